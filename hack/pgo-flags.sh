#!/usr/bin/env bash
# Prints the rustc flags that build kcm-rs with its committed profile
# (pgo/kcm-rs.profdata.gz, made by `make pgo-profile`), or nothing, with the
# reason on stderr, when the profile is missing or was written by another
# LLVM major than this rustc's (an indexed profile is read only by the LLVM
# that wrote its format). Unpacks the profile into target/pgo/.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=pgo/kcm-rs.profdata.gz
want=$(cat pgo/llvm-major 2>/dev/null || true)
have=$(${RUSTC:-rustc} -vV 2>/dev/null | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' || true)
if [[ ! -f $profile || -z $want ]]; then
  echo "pgo: no profile ($profile); building kcm-rs without PGO" >&2
  exit 0
fi
if [[ $have != "$want" ]]; then
  echo "pgo: the profile is for LLVM $want, rustc has LLVM ${have:-?}; building kcm-rs without PGO" >&2
  exit 0
fi
mkdir -p target/pgo
out=$PWD/target/pgo/kcm-rs.profdata
if [[ ! -f $out || $profile -nt $out ]]; then
  gzip -dc "$profile" > "$out.tmp" && mv "$out.tmp" "$out"
fi
# Functions changed since the profile was made lose their profile (LLVM
# says so in a warning); the rest keep it.
echo "-Cprofile-use=$out"
