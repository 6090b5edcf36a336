#!/usr/bin/env bash
# `make realnode-kep` / `make realnode-termination` / `make realnode-scenarios`:
# the real-node scenarios of e2e/tests/realnode_kep3329/ (KEP-3329 with every
# real source of DisruptionTarget) and realnode_termination.rs (real graceful
# termination), kcm-rs then KCM's four controllers on the same node, for each
# minor in its own node session: the node's lock (/run/kcm-rs-node.lock), up,
# the tests, down, the leftover check. Everything is built before the lock is
# taken. Tables: bench/results/realnode-kep/<minor>-{kep3329,termination}.md
# (KCM_REALNODE_RESULTS elsewhere); nothing is committed.
#
# usage: e2e/realnode/scenarios/run.sh [--versions "1.34 1.37"] kep|termination|all   (root)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
versions="1.34 1.37"
what=all
while [[ $# -gt 0 ]]; do
  case "$1" in
    --versions) versions="${2:?--versions needs a list such as \"1.34 1.37\"}"; shift ;;
    --versions=*) versions="${1#--versions=}" ;;
    kep | termination | all) what="$1" ;;
    *) echo "usage: run.sh [--versions \"1.34 1.37\"] kep|termination|all" >&2; exit 2 ;;
  esac
  shift
done
case "$what" in
  kep) tests=(realnode_kep3329) ;;
  termination) tests=(realnode_termination) ;;
  all) tests=(realnode_kep3329 realnode_termination) ;;
esac
[[ "$(id -u)" == 0 ]] || { echo "error: the real node needs root" >&2; exit 1; }
cd "$root"
cargo="${CARGO:-cargo}"
lock="${KCM_NODE_LOCK:-/run/kcm-rs-node.lock}"

# Builds first, outside the lock: kcm-rs (a copy, so another build of
# target/debug/kcm-rs during the session changes nothing), the test
# binaries, each minor's control plane and node binaries.
$cargo build -p kcm-rs
mkdir -p target/realnode/scenarios
cp target/debug/kcm-rs target/realnode/scenarios/kcm-rs
export KCM_RS_BIN="$root/target/realnode/scenarios/kcm-rs"
test_args=()
for t in "${tests[@]}"; do test_args+=(--test "$t"); done
$cargo test -p kcm-e2e "${test_args[@]}" --no-run --message-format=json >target/realnode/scenarios/build.json
mapfile -t bins < <(jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null) | .executable' \
  target/realnode/scenarios/build.json)
[[ ${#bins[@]} -eq ${#tests[@]} ]] || { echo "error: expected ${#tests[@]} test binaries, got: ${bins[*]}" >&2; exit 1; }
e2e/harness/build.sh target/e2e-bin --with-kubectl >/dev/null
for v in $versions; do
  e2e/harness/build.sh target/e2e-bin --version "$v" >/dev/null
  e2e/realnode/build.sh --version "$v" >/dev/null
done

rc=0
for v in $versions; do
  echo "== Kubernetes $v: waiting for the node's lock ($lock)" >&2
  began=$(date +%s)
  # shellcheck disable=SC2016
  flock -w 10800 "$lock" bash -c '
    v="$1"; shift
    e2e/realnode/node.sh up --version "$v" >/dev/null || { e2e/realnode/node.sh down; exit 1; }
    rc=0
    for b in "$@"; do
      t0=$(date +%s)
      "$b" --ignored --nocapture --test-threads=1 || rc=1
      echo "== $(basename "$b" | sed "s/-[0-9a-f]*$//") on $v: $(( $(date +%s) - t0 )) s" >&2
    done
    e2e/realnode/node.sh down || rc=1
    e2e/realnode/check-clean.sh || rc=1
    exit $rc' _ "$v" "${bins[@]}" || rc=1
  echo "== Kubernetes $v: session $(( $(date +%s) - began )) s (rc so far $rc)" >&2
done
exit $rc
