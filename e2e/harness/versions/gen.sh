#!/usr/bin/env bash
# Writes the module file of one supported Kubernetes version for the harness:
# versions/<major.minor>/go.mod and go.sum, pinning k8s.io/kubernetes at the
# given release, every staging module it replaces at the matching v0.x.y tag,
# and the etcd server that release uses. The harness sources (cmd/, internal/,
# and ../localcp, which e2e/upstream-suites shares) are shared: build.sh builds them with `go build -modfile=versions/N/go.mod`.
#
# The default version (1.34) is the harness's own go.mod at its root.
#
# usage: e2e/harness/versions/gen.sh 1.37.2 [OUT_MODFILE]
set -euo pipefail
full="${1:?usage: gen.sh <k8s version, e.g. 1.37.2> [OUT_MODFILE]}"
full="${full#v}"
minor="$(echo "$full" | cut -d. -f1,2)"
staging_tag="v0.$(echo "$full" | cut -d. -f2,3)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
harness="$(cd "$here/.." && pwd)"
modfile="${2:-$here/$minor/go.mod}"
mkdir -p "$(dirname "$modfile")"
modfile="$(cd "$(dirname "$modfile")" && pwd)/$(basename "$modfile")"

# The release's own go.mod, from the module proxy (or the module cache).
kmod="$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$full" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$kmod" ]] || { echo "error: cannot download k8s.io/kubernetes@v$full" >&2; exit 1; }
go_line="$(awk '$1 == "go" { print $2; exit }' "$kmod")"
etcd="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$kmod")"
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$kmod" | LC_ALL=C sort)

{
  echo "module github.com/kcm-rs/kcm-rs/e2e/harness"
  echo
  echo "go $go_line"
  echo
  echo "require ("
  echo "	github.com/kcm-rs/kcm-rs/e2e/localcp v0.0.0"
  echo "	go.etcd.io/etcd/server/v3 $etcd"
  echo "	k8s.io/component-base $staging_tag"
  echo "	k8s.io/kubectl v0.0.0"
  echo "	k8s.io/kubernetes v$full"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $staging_tag"; done
  echo ")"
  echo
  echo "// The local control plane helpers both Go harnesses share."
  echo "replace github.com/kcm-rs/kcm-rs/e2e/localcp => ../localcp"
} > "$modfile"
rm -f "${modfile%.mod}.sum"
cd "$harness"
go mod tidy -modfile="$modfile"
echo "wrote $modfile (k8s.io/kubernetes v$full, etcd $etcd, go $go_line)" >&2
