#!/usr/bin/env bash
# Builds what the real node of one Kubernetes minor runs, into
# target/realnode/<minor>/, and does nothing when its inputs are unchanged
# (a stamp per output holds the hash of its inputs, like
# e2e/harness/build.sh):
#   bin/kcm-node-kubelet, bin/kcm-node-scheduler   kubelet, kube-scheduler
#   bin/kcm-node-cri   removes every pod sandbox (node.sh down)
#   bin/kcm-node-pause, bin/kcm-node-image, bin/agnhost  (static, for images)
#   images/*.tar    busybox, agnhost, pause, httpd as OCI archives, tagged
#                   with the names that minor's e2e suite uses; sandbox-image
#                   names the pause image containerd is to use
#   bin/e2e.test    upstream's e2e suite, only with --e2e (about 10 minutes cold)
#
# usage: e2e/realnode/build.sh [--version 1.N] [--e2e]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version="${K8S_VERSION:-1.34}"
want_e2e=no
while [[ $# -gt 0 ]]; do
  case "$1" in
    --version) version="${2:?--version needs a value such as 1.37}"; shift ;;
    --version=*) version="${1#--version=}" ;;
    --e2e) want_e2e=yes ;;
    *) echo "error: unknown argument $1 (usage: build.sh [--version 1.N] [--e2e])" >&2; exit 2 ;;
  esac
  shift
done
version="${version#v}"
version="$(echo "$version" | cut -d. -f1,2)"

for tool in go sha256sum; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found: install Go 1.26 (https://go.dev/dl) and coreutils" >&2; exit 1; }
done
busybox="${BUSYBOX:-/bin/busybox}"
if [[ ! -x "$busybox" ]] || ! file -L "$busybox" 2>/dev/null | grep -q 'statically linked'; then
  echo "error: no static busybox at $busybox (the images' shell): apt-get install busybox-static (or set BUSYBOX)" >&2
  exit 1
fi

cd "$here"
if [[ "$version" == 1.34 ]]; then modfile=go.mod; modflags=(); else modfile="versions/$version/go.mod"; modflags=(-modfile="$modfile"); fi
if [[ ! -f "$modfile" ]]; then
  echo "error: Kubernetes $version has no real-node module file (have: 1.34 $(ls versions | grep -v gen.sh | tr '\n' ' ')); add one with e2e/realnode/versions/gen.sh 1.N.x" >&2
  exit 1
fi
out="$root/target/realnode/$version"
mkdir -p "$out/bin" "$out/images"
exec 9>"$out/.build.lock"
flock 9

kver="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$modfile")"
kmajor="$(echo "${kver#v}" | cut -d. -f1)"; kminor="$(echo "${kver#v}" | cut -d. -f2)"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$kmajor -X $pkg.gitMinor=$kminor -X $pkg.gitTreeState=clean"
done
inputs="$( { go version; echo "$version"; cat build.sh "$modfile" "${modfile%.mod}.sum"; find cmd -name '*.go' | LC_ALL=C sort | xargs cat; } | sha256sum | cut -d' ' -f1)"

# fresh NAME HASH: whether bin/NAME is built from inputs hashing to HASH.
fresh() { [[ -x "$out/bin/$1" && -f "$out/bin/$1.stamp" && "$(cat "$out/bin/$1.stamp")" == "$2" ]]; }
stamp() { echo "$2" > "$out/bin/$1.stamp"; }
build() { # build NAME CGO PACKAGE [go build flags]
  local name="$1" cgo="$2" pkg="$3"; shift 3
  fresh "$name" "$inputs" && return 0
  echo "building $name for Kubernetes $version ($kver) ..." >&2
  local start; start=$(date +%s)
  if ! CGO_ENABLED="$cgo" go build "${modflags[@]}" -ldflags "$ldflags" "$@" -o "$out/bin/$name" "$pkg"; then
    echo "error: go build of $pkg ($version) failed (see above); check access to the Go module proxy and run e2e/realnode/build.sh again" >&2
    exit 1
  fi
  stamp "$name" "$inputs"
  echo "built $name in $(( $(date +%s) - start ))s" >&2
}
# The kubelet and scheduler build like the control plane (cgo as Go
# defaults), so they reuse its compiled packages from the Go build cache;
# what goes into images is static.
build kcm-node-kubelet "$(go env CGO_ENABLED)" ./cmd/kcm-node-kubelet
build kcm-node-scheduler "$(go env CGO_ENABLED)" ./cmd/kcm-node-scheduler
build kcm-node-pause 0 ./cmd/kcm-node-pause
build kcm-node-image 0 ./cmd/kcm-node-image
build kcm-node-cri "$(go env CGO_ENABLED)" ./cmd/kcm-node-cri
build agnhost 0 k8s.io/kubernetes/test/images/agnhost

if [[ "$want_e2e" == yes ]] && ! fresh e2e.test "$inputs"; then
  echo "building upstream's e2e suite (e2e.test) for Kubernetes $version; about 10 minutes cold ..." >&2
  start=$(date +%s)
  if ! go test "${modflags[@]}" -c -ldflags "$ldflags" -o "$out/bin/e2e.test" k8s.io/kubernetes/test/e2e; then
    echo "error: go test -c k8s.io/kubernetes/test/e2e ($version) failed (see above)" >&2
    exit 1
  fi
  stamp e2e.test "$inputs"
  echo "built e2e.test in $(( $(date +%s) - start ))s" >&2
fi

# Images: the names the e2e suite of this minor uses (its
# test/utils/image/manifest.go), plus those of the project's examples.
kdir="$(go list "${modflags[@]}" -m -f '{{.Dir}}' k8s.io/kubernetes)"
manifest="$kdir/test/utils/image/manifest.go"
image_tag() { # image_tag KEY NAME: the tag manifest.go gives configs[KEY] (image NAME), or nothing
  { grep -oE "configs\[$1\] = Config\{list\.[A-Za-z0-9]+, \"$2\", \"[^\"]+\"\}" "$manifest" || true; } | head -n1 | cut -d'"' -f4
}
busybox_tag="$(image_tag BusyBox busybox)"; agnhost_tag="$(image_tag Agnhost agnhost)"
pause_tag="$(image_tag Pause pause)"; httpd_tag="$(image_tag Httpd httpd)"
for t in busybox_tag agnhost_tag pause_tag; do
  [[ -n "${!t}" ]] || { echo "error: no ${t%_tag} image in $manifest" >&2; exit 1; }
done
e2e=registry.k8s.io/e2e-test-images
images_inputs="$( { echo "$inputs"; sha256sum "$busybox"; echo "$busybox_tag $agnhost_tag $pause_tag $httpd_tag"; } | sha256sum | cut -d' ' -f1)"
if [[ -f "$out/images/images.stamp" && "$(cat "$out/images/images.stamp")" == "$images_inputs" ]]; then exit 0; fi
img="$out/bin/kcm-node-image"
"$img" --out "$out/images/busybox.tar" --busybox "$busybox" --cmd '["sh"]' \
  --name "$e2e/busybox:$busybox_tag" --name docker.io/library/busybox:1.36 --name docker.io/library/busybox:latest
"$img" --out "$out/images/agnhost.tar" --busybox "$busybox" --file "$out/bin/agnhost:agnhost" \
  --dir uploads --entrypoint '["/agnhost"]' --cmd '["pause"]' --name "$e2e/agnhost:$agnhost_tag"
# containerd 1.6's default sandbox image is pause:3.6; node.sh configures
# this minor's pause instead, and both names point at the same image.
"$img" --out "$out/images/pause.tar" --file "$out/bin/kcm-node-pause:pause" --entrypoint '["/pause"]' \
  --name "registry.k8s.io/pause:$pause_tag" --name registry.k8s.io/pause:3.6
# httpd (where the minor still lists it) stands in with busybox's httpd
# applet: it serves /index.html on port 80.
rm -f "$out/images/httpd.tar"
if [[ -n "$httpd_tag" ]]; then
  "$img" --out "$out/images/httpd.tar" --busybox "$busybox" \
    --text 'usr/local/apache2/htdocs/index.html=<html><body><h1>It works!</h1></body></html>' \
    --cmd '["httpd", "-f", "-p", "80", "-h", "/usr/local/apache2/htdocs"]' --name "$e2e/httpd:$httpd_tag"
fi
echo "registry.k8s.io/pause:$pause_tag" > "$out/images/sandbox-image"
echo "$images_inputs" > "$out/images/images.stamp"
echo "images for Kubernetes $version: busybox:$busybox_tag agnhost:$agnhost_tag pause:$pause_tag httpd:${httpd_tag:-none} (+ busybox:1.36 for the examples)" >&2
