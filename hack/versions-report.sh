#!/usr/bin/env bash
# The version × controller table of `make test-versions`: for each minor and
# differential crate, the scenarios that passed (kcm-rs and upstream agree,
# or kcm-rs keeps a listed deviation the test asserts) and those that failed,
# from the logs target/test-versions/<minor>-<crate>.log.
# Usage: hack/versions-report.sh <log dir> <minor>...
set -euo pipefail
dir=$1; shift
crates=(kcm-job kcm-podgc kcm-taint-eviction kcm-disruption)
printf '| Kubernetes |'; for c in "${crates[@]}"; do printf ' %s |' "$c"; done; echo
printf '|---|'; for _ in "${crates[@]}"; do printf -- '---|'; done; echo
for v in "$@"; do
  printf '| %s |' "$v"
  for c in "${crates[@]}"; do
    log="$dir/$v-$c.log"
    if [[ ! -f "$log" ]]; then printf ' not run |'; continue; fi
    ok=$(grep -cE '^test .* \.\.\. ok$' "$log" || true)
    bad=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | xargs || true)
    if [[ -n "$bad" ]]; then printf ' %s pass, **failed: %s** |' "$ok" "$bad"; else printf ' %s pass |' "$ok"; fi
  done
  echo
done
gates="$dir/gates.log"
if [[ -f "$gates" ]]; then
  echo
  echo '| Kubernetes | gate strings | same verdict as upstream KCM | listed deviations | differing |'
  echo '|---|--:|--:|--:|--:|'
  for v in "$@"; do
    lines=$(grep -E "^$v \"" "$gates" | sort -u || true)
    total=$(grep -c . <<<"$lines" || true)
    dev=$(grep -c '\[deviation' <<<"$lines" || true)
    same=$(grep -cE 'upstream accepts, kcm-rs accepts|upstream rejects, kcm-rs rejects' <<<"$lines" || true)
    printf '| %s | %s | %s | %s | %s |\n' "$v" "$total" "$same" "$dev" "$((total - same - dev))"
  done
fi
