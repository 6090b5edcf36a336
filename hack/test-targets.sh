#!/usr/bin/env bash
# Cargo arguments selecting the workspace's integration-test targets:
#   hack/test-targets.sh e2e           every tests/*.rs target but `differential`
#   hack/test-targets.sh differential  every crate's `differential` target
# (one `-p <package> --test <target>` pair per target: each member's
# tests/*.rs and tests/*/main.rs, as cargo finds them), for `make e2e` and
# `make differential`.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:?usage: hack/test-targets.sh e2e|differential}
for dir in cmd/* crates/* e2e sim bench; do
  [[ -f "$dir/Cargo.toml" && -d "$dir/tests" ]] || continue
  pkg=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)
  for f in "$dir"/tests/*.rs "$dir"/tests/*/main.rs; do
    [[ -f "$f" ]] || continue
    t=$(basename "$f" .rs)
    [[ $t == main ]] && t=$(basename "$(dirname "$f")")
    case "$want:$t" in
      differential:differential | e2e:[!d]* | e2e:d[!i]*) printf -- '-p %s --test %s ' "$pkg" "$t" ;;
    esac
  done
done
echo
