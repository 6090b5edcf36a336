#!/usr/bin/env bash
# Builds the local control-plane binaries from the pinned k8s.io/kubernetes
# module into a cache folder, and does nothing when the inputs (go.mod, go.sum,
# the harness sources, this script and the Go version) are unchanged.
#
# usage: e2e/harness/build.sh [OUT_DIR] [--with-kubectl]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../../target/e2e-bin}"
shift || true
targets=(kcm-e2e-apiserver kcm-e2e-controller-manager)
if [[ "${1:-}" == "--with-kubectl" ]]; then targets+=(kcm-e2e-kubectl); fi

if ! command -v go >/dev/null 2>&1; then
  echo "error: the Go toolchain is not on PATH; install Go 1.24 or newer (https://go.dev/dl) to build the local control plane" >&2
  exit 1
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$here"
inputs_hash="$( { go version; cat build.sh go.mod go.sum; find . -name '*.go' -type f | LC_ALL=C sort | xargs cat; } | sha256sum | cut -d' ' -f1)"
stale=()
for t in "${targets[@]}"; do
  stamp="$out/$t.stamp"
  if [[ ! -x "$out/$t" || ! -f "$stamp" || "$(cat "$stamp")" != "$inputs_hash" ]]; then stale+=("$t"); fi
done
if [[ ${#stale[@]} -eq 0 ]]; then exit 0; fi
echo "building ${stale[*]} from k8s.io/kubernetes (first build takes several minutes) ..." >&2
start=$(date +%s)
# Stamp the version the binaries report (/version, user agents), as the
# upstream release build does; module builds otherwise say v0.0.0-master.
kver="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)"
kmajor="$(echo "${kver#v}" | cut -d. -f1)"; kminor="$(echo "${kver#v}" | cut -d. -f2)"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$kmajor -X $pkg.gitMinor=$kminor -X $pkg.gitTreeState=clean"
done
pkgs=()
for t in "${stale[@]}"; do pkgs+=("./cmd/$t"); done
if ! go build -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"; then
  echo "error: go build of the control plane failed (see above); check network access to the Go module proxy and run e2e/harness/build.sh again" >&2
  exit 1
fi
for t in "${stale[@]}"; do echo "$inputs_hash" > "$out/$t.stamp"; done
echo "built ${stale[*]} in $(( $(date +%s) - start ))s" >&2
