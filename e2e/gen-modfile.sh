#!/usr/bin/env bash
# Writes the module file of one Kubernetes release for one Go harness, every
# harness from the one template below: k8s.io/kubernetes at the release,
# every staging module it replaces pinned at the matching v0.N.x tag, the
# release's own Go line, and the harness's own requirements; then
# `go mod tidy`. The sources of a harness are shared by every minor
# (`go build -modfile=...`); 1.34's module file is the harness's go.mod,
# the others versions/1.N/go.mod (and go.sum).
#
#   harness          e2e/harness: kcm-e2e-apiserver, kcm-e2e-controller-manager,
#                    kcm-e2e-kubectl (with the release's etcd server and kubectl)
#   realnode         e2e/realnode: the node's kubelet, scheduler, CRI and image tools
#   upstream-suites  e2e/upstream-suites: extctl, its commands and upstream's
#                    integration tests (tidied over a copy of them: suites.sh gen)
#
# usage: e2e/gen-modfile.sh harness|realnode|upstream-suites 1.37.2 [OUT_MODFILE]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kind="${1:?usage: gen-modfile.sh harness|realnode|upstream-suites <k8s version, e.g. 1.37.2> [OUT_MODFILE]}"
full="${2:?usage: gen-modfile.sh harness|realnode|upstream-suites <k8s version, e.g. 1.37.2> [OUT_MODFILE]}"
full="${full#v}"
minor="$(echo "$full" | cut -d. -f1,2)"
staging_tag="v0.$(echo "$full" | cut -d. -f2,3)"
case "$kind" in
  harness | realnode | upstream-suites) module="$here/$kind" ;;
  *) echo "error: unknown harness '$kind' (harness, realnode or upstream-suites)" >&2; exit 2 ;;
esac
if [[ -n "${3:-}" ]]; then modfile="$3"
elif [[ "$minor" == 1.34 ]]; then modfile="$module/go.mod"
else modfile="$module/versions/$minor/go.mod"; fi
mkdir -p "$(dirname "$modfile")"
modfile="$(cd "$(dirname "$modfile")" && pwd)/$(basename "$modfile")"

# The release's own go.mod, from the module proxy (or the module cache).
kmod="$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$full" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$kmod" ]] || { echo "error: cannot download k8s.io/kubernetes@v$full from the Go module proxy" >&2; exit 1; }
go_line="$(awk '$1 == "go" { print $2; exit }' "$kmod")"
etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$kmod")"
# Every staging module, also those only one program imports (1.37's
# k8s.io/cri-streaming, the kubelet's): without its replace Go looks for v0.0.0.
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$kmod" | LC_ALL=C sort)

# What each harness requires beyond k8s.io/kubernetes, and whether it
# imports the shared control-plane helpers (e2e/localcp).
localcp=""
requires=()
case "$kind" in
  harness)
    localcp=1
    requires=("go.etcd.io/etcd/server/v3 $etcd" "k8s.io/component-base $staging_tag" "k8s.io/kubectl v0.0.0") ;;
  realnode) requires=("k8s.io/component-base $staging_tag") ;;
  upstream-suites) localcp=1 ;;
esac

# The template.
{
  echo "module github.com/kcm-rs/kcm-rs/e2e/$kind"
  echo
  echo "go $go_line"
  echo
  echo "require ("
  [[ -z "$localcp" ]] || echo "	github.com/kcm-rs/kcm-rs/e2e/localcp v0.0.0"
  for r in "${requires[@]}"; do echo "	$r"; done
  echo "	k8s.io/kubernetes v$full"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $staging_tag"; done
  echo ")"
  if [[ -n "$localcp" ]]; then
    echo
    echo "// The local control plane helpers both Go harnesses share."
    echo "replace github.com/kcm-rs/kcm-rs/e2e/localcp => ../localcp"
  fi
} > "$modfile"
rm -f "${modfile%.mod}.sum"

case "$kind" in
  upstream-suites)
    # Its packages are upstream's tests, copied per run: tidied over a copy.
    "$module/suites.sh" tidy "$full" "$modfile" ;;
  *)
    cd "$module"
    if [[ "$modfile" == "$module/go.mod" ]]; then go mod tidy; else go mod tidy -modfile="$modfile"; fi ;;
esac
echo "wrote $modfile (k8s.io/kubernetes v$full, go $go_line)" >&2
