#!/usr/bin/env bash
# Writes the module file of one Kubernetes minor for the real-node Go module
# (e2e/realnode): k8s.io/kubernetes at the given release and every staging
# module it replaces at the matching v0.x.y tag, then `go mod tidy`. 1.34's
# is e2e/realnode/go.mod itself; the others are versions/<minor>/go.mod and
# build.sh builds the same sources with -modfile.
#
# usage: e2e/realnode/versions/gen.sh 1.37.2
set -euo pipefail
full="${1:?usage: gen.sh <k8s version, e.g. 1.37.2>}"
full="${full#v}"
minor="$(echo "$full" | cut -d. -f1,2)"
staging_tag="v0.$(echo "$full" | cut -d. -f2,3)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
module="$(cd "$here/.." && pwd)"
if [[ "$minor" == 1.34 ]]; then modfile="$module/go.mod"; else modfile="$here/$minor/go.mod"; fi
mkdir -p "$(dirname "$modfile")"

kmod="$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$full" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$kmod" ]] || { echo "error: cannot download k8s.io/kubernetes@v$full from the Go module proxy" >&2; exit 1; }
go_line="$(awk '$1 == "go" { print $2; exit }' "$kmod")"
# Every staging module, also those only the kubelet imports (1.37's
# k8s.io/cri-streaming): without its replace Go looks for v0.0.0.
mapfile -t staging < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$kmod" | LC_ALL=C sort)
{
  echo "module github.com/kcm-rs/kcm-rs/e2e/realnode"
  echo
  echo "go $go_line"
  echo
  echo "require ("
  echo "	k8s.io/component-base $staging_tag"
  echo "	k8s.io/kubernetes v$full"
  echo ")"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $staging_tag"; done
  echo ")"
} > "$modfile"
rm -f "${modfile%.mod}.sum"
cd "$module"
if [[ "$modfile" == "$module/go.mod" ]]; then go mod tidy; else go mod tidy -modfile="$modfile"; fi
echo "wrote $modfile (k8s.io/kubernetes v$full, go $go_line)" >&2
