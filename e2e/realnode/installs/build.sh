#!/usr/bin/env bash
# Builds what the in-cluster installs on the real node need (no lock: only
# files under target/realnode/installs/), each step skipped when its inputs
# are unchanged:
#   bin/kcm-node-proxy          kube-proxy 1.34 (./kube-proxy, its own Go
#                               module: kube-proxy's packages are in no
#                               other module file here)
#   images/kcm-rs-A.oci.tar     `make image-oci`'s image of the (static)
#                               release binary (<IMAGE_REPOSITORY>:<version>,
#                               the name manifests/ and the chart default to;
#                               build_info commit = HEAD)
#   images/kcm-rs-B.oci.tar     the same sources with another commit stamp
#                               (<IMAGE_REPOSITORY>:<version>-b, commit
#                               <HEAD>-b): another binary and another digest,
#                               for the upgrade
#   images/kcm-rs-{A,B}.digest  each image's digest
#
# usage: e2e/realnode/installs/build.sh [--no-images]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$root/target/realnode/installs"
mkdir -p "$out/bin" "$out/images"
exec 9>"$out/.build.lock"
flock 9

images=yes
[[ "${1:-}" == --no-images ]] && images=no

# kube-proxy, cached like e2e/realnode/build.sh's binaries.
cd "$here/kube-proxy"
inputs="$( { go version; cat "$here/build.sh" go.mod go.sum ./*.go; } | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$out/bin/kcm-node-proxy" || "$(cat "$out/bin/kcm-node-proxy.stamp" 2>/dev/null)" != "$inputs" ]]; then
  echo "building kcm-node-proxy (kube-proxy 1.34) ..." >&2
  start=$(date +%s)
  kver="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)"
  ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=1 -X $pkg.gitMinor=34 -X $pkg.gitTreeState=clean"
  done
  go build -ldflags "$ldflags" -o "$out/bin/kcm-node-proxy" . ||
    { echo "error: go build of kube-proxy failed (see above)" >&2; exit 1; }
  echo "$inputs" >"$out/bin/kcm-node-proxy.stamp"
  echo "built kcm-node-proxy in $(($(date +%s) - start))s" >&2
fi
[[ "$images" == yes ]] || exit 0

# The two images: the release binary as `make release-bin` builds it (with
# the PGO profile), twice, KCM_RS_GIT_COMMIT told apart (cmd/kcm-rs/build.rs:
# the kcm_rs_build_info metric's commit label), then hack/oci-image.py as
# `make image-oci` runs it.
cd "$root"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
commit="$(git rev-parse --short=12 HEAD)"
created="$(git log -1 --format=%ct HEAD)"
cargo="${CARGO:-cargo}"
# The sources the binary is built from, as the tree has them now, and the
# compiler (whose LLVM decides whether the PGO profile is used): skip both
# builds when the images were made from the same (each switch between A's
# and B's stamp recompiles the kcm-rs crate).
src="$( { echo "$commit ${KCM_INSTALL_B_RELABELLED:-}"; "${RUSTC:-rustc}" -vV; cat "$here/build.sh" Makefile hack/oci-image.py hack/pgo-flags.sh manifests/Dockerfile pgo/*; git diff HEAD -- Cargo.toml Cargo.lock cmd crates;
  git ls-files --others --exclude-standard -- cmd crates | LC_ALL=C sort | xargs -r cat; } | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$out/images/stamp" 2>/dev/null)" == "$src" && -f "$out/images/kcm-rs-A.oci.tar" && -f "$out/images/kcm-rs-B.oci.tar" ]]; then
  exit 0
fi
repo="$(make -s print-image-repository)"
# KCM_INSTALL_B_RELABELLED=1: B is A's binary under another revision label
# (another image digest, the same build_info commit; one release build
# instead of two, for the tests that tell images apart by digest).
for which in A B; do
  if [[ "$which" == A ]]; then stamp="$commit" name="$repo:$version"; else stamp="$commit-b" name="$repo:$version-b"; fi
  if [[ "$which" == A || "${KCM_INSTALL_B_RELABELLED:-}" != 1 ]]; then
    make --no-print-directory release-bin COMMIT="$stamp" CARGO="$cargo"
  fi
  cp "$(make -s print-release-bin)" "$out/images/kcm-rs-$which"
  python3 hack/oci-image.py --binary "$out/images/kcm-rs-$which" --name "$name" --version "$version" \
    --out "$out/images/kcm-rs-$which.oci.tar" --revision "$stamp" --created "$created" >/dev/null
  cp "$out/images/kcm-rs-$which.oci.tar.digest" "$out/images/kcm-rs-$which.digest"
  echo "$name" >"$out/images/kcm-rs-$which.name"
done
echo "images: A $(cat "$out/images/kcm-rs-A.name") $(cat "$out/images/kcm-rs-A.digest"), B $(cat "$out/images/kcm-rs-B.name") $(cat "$out/images/kcm-rs-B.digest")" >&2
echo "$src" >"$out/images/stamp"
