#!/usr/bin/env bash
# Builds the release's tools from their Go modules (pinned with their
# dependencies' checksums in go.mod/go.sum beside this script, `tool`
# directives) into target/release-tools/, and does nothing when the inputs
# (this script, go.mod, go.sum, the Go version) are unchanged:
#   cosign  sign-blob, attest-blob, verify-blob(-attestation), sign/verify of
#           pushed images (github.com/sigstore/cosign/v2)
#   crane   pushes and inspects OCI layouts and registries, and serves a
#           registry on localhost for make release-rehearsal
#           (github.com/google/go-containerregistry)
# usage: hack/release-tools/build.sh [OUT_DIR]    (default target/release-tools)
# The first build takes several minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../../target/release-tools}"
if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain is not on PATH; install Go 1.26 or newer to build cosign and crane" >&2
  exit 1
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec 9>"$out/.build.lock"
flock 9
cd "$here"
inputs="$( { go version; cat build.sh go.mod go.sum; } | sha256sum | cut -d' ' -f1)"
if [[ -x "$out/cosign" && -x "$out/crane" && "$(cat "$out/stamp" 2>/dev/null)" == "$inputs" ]]; then exit 0; fi
cosign_version="$(awk '$1 == "github.com/sigstore/cosign/v2" { print $2; exit }' go.mod)"
echo "building cosign $cosign_version and crane (first build takes several minutes) ..." >&2
start=$(date +%s)
# -trimpath, -buildvcs=false: the same inputs give the same binaries; cosign
# reports its version from sigs.k8s.io/release-utils, stamped as its release.
go build -trimpath -buildvcs=false \
  -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$cosign_version" \
  -o "$out/cosign.tmp" github.com/sigstore/cosign/v2/cmd/cosign
go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$out/crane.tmp" github.com/google/go-containerregistry/cmd/crane
mv "$out/cosign.tmp" "$out/cosign"
mv "$out/crane.tmp" "$out/crane"
echo "$inputs" >"$out/stamp"
echo "built cosign $cosign_version and crane in $(( $(date +%s) - start ))s" >&2
