#!/usr/bin/env bash
# make release-rehearsal VERSION=X.Y.Z: hack/release-publish.sh, the release
# workflow's push step, against a registry on localhost (`crane registry
# serve`, in memory, gone when this ends) instead of the real one: the image
# index pushed as dist/ has it (the digest the chart pins), signed and
# attested, the chart pushed as an OCI artifact and signed, both pulled back
# and verified. What it cannot show: the real registry's login, permissions
# and quotas (docs/release.md, "What only the forge can check").
# Signs with COSIGN_KEY/COSIGN_PASSWORD if set (verified with
# release/cosign.pub), else with a throwaway pair.
# usage: hack/release-rehearsal.sh VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:?usage: $0 VERSION}"
hack/release-tools/build.sh target/release-tools
e2e/harness/helm/build.sh target/e2e-bin
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
target/release-tools/crane registry serve --address "127.0.0.1:$port" >"$work/registry.log" 2>&1 &
registry=$!
trap 'kill $registry 2>/dev/null; wait $registry 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break
  sleep 0.1
done
if [[ -z "${COSIGN_KEY:-}" ]]; then
  (cd "$work" && COSIGN_PASSWORD= "$OLDPWD/target/release-tools/cosign" generate-key-pair >/dev/null 2>&1)
  export COSIGN_KEY="$work/cosign.key" COSIGN_PUB="$work/cosign.pub" COSIGN_PASSWORD=
  echo "release-rehearsal: COSIGN_KEY unset: signing with a throwaway key pair" >&2
fi
REGISTRY="127.0.0.1:$port" PLAIN_HTTP=1 hack/release-publish.sh "$version"
