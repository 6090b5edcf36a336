#!/usr/bin/env bash
# Prints the rustc flags that build kcm-rs with its committed profile
# (pgo/kcm-rs.profdata.gz, made by `make pgo-profile`), or nothing, with the
# reason on stderr, when the profile is missing, cannot be unpacked, or was
# written by another LLVM major than this rustc's (an indexed profile is read
# only by the LLVM that wrote its format). The profile is unpacked into
# target/pgo/ under a name of its content's hash: cargo does not watch the
# file, but a new name is a new flag, which rebuilds.
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
sha=$(sha256sum "$profile" | cut -c1-16)
out=$PWD/target/pgo/kcm-rs-$sha.profdata
if [[ ! -f $out ]]; then
  mkdir -p target/pgo
  # A name of our own while writing: parallel builds may share target/.
  if ! gzip -dc "$profile" >"$out.$$" || ! mv "$out.$$" "$out"; then
    rm -f "$out.$$"
    echo "pgo: cannot unpack $profile; building kcm-rs without PGO" >&2
    exit 0
  fi
fi
# Functions changed since the profile was made lose their profile (LLVM
# matches them by a hash of their control flow); the rest keep it.
echo "-Cprofile-use=$out"
