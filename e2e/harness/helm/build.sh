#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v4, pinned with its
# dependencies' checksums in go.mod/go.sum beside this script, a `tool`
# directive) into the e2e cache folder, and does nothing when the inputs (this
# script, go.mod, go.sum, the Go version) are unchanged: a warm `make test`
# never rebuilds it. The chart test (e2e/tests/chart.rs) runs it.
#
# usage: e2e/harness/helm/build.sh [OUT_DIR]   (default target/e2e-bin)
# The binary is OUT_DIR/kcm-e2e-helm. The first build takes several minutes
# (docs/testing.md, "Manifests and the chart"), the module download seconds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../../../target/e2e-bin}"
if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain is not on PATH; install Go 1.26 or newer (https://go.dev/dl) to build helm" >&2
  exit 1
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
bin="$out/kcm-e2e-helm"
stamp="$bin.stamp"
# One build at a time (parallel tests, make, other checkouts).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$out/.helm-build.lock"
  flock 9
fi
cd "$here"
inputs_hash="$( { go version; cat build.sh go.mod go.sum; } | sha256sum | cut -d' ' -f1)"
if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$inputs_hash" ]]; then exit 0; fi
version="$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' go.mod)"
echo "building helm $version from helm.sh/helm/v4 (first build takes several minutes) ..." >&2
start=$(date +%s)
# -trimpath, -buildvcs=false: the same inputs give the same binary. helm
# reports its version from internal/version, stamped as its release build does.
if ! go build -trimpath -buildvcs=false -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
    -o "$bin.tmp" helm.sh/helm/v4/cmd/helm; then
  echo "error: go build of helm failed (see above); check access to the Go module proxy and run $0 again" >&2
  exit 1
fi
mv "$bin.tmp" "$bin"
echo "$inputs_hash" > "$stamp"
echo "built helm $version in $(( $(date +%s) - start ))s" >&2
