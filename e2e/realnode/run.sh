#!/usr/bin/env bash
# `make run-real`: `make run` on a real node. Brings up the local control
# plane plus the real node (node.sh up), runs kcm-rs against it through
# kcm-dev with the example Jobs as real containers, and on exit (Ctrl-C, or
# when every Job has finished with --exit-when-done) tears the node down and
# checks that nothing is left.
#
# The examples: manifests/examples/job.yaml as it is, and
# e2e/realnode/examples/pod-failure-policy.yaml, the real-node form of
# manifests/examples/pod-failure-policy.yaml (its pods really exit 1 and 42
# and really get evicted; kcm-dev --evict-requests does the evicting).
#
# usage: e2e/realnode/run.sh [--version 1.N] [kcm-dev flags] [-- kcm-rs flags]   (root)
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
orig_args=("$@")
version=1.34
dev_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --version) version="${2:?--version needs a value such as 1.37}"; shift ;;
    --version=*) version="${1#--version=}" ;;
    --) break ;;
    *) dev_args+=("$1") ;;
  esac
  shift
done
cd "$ROOT"
${CARGO:-cargo} build -p kcm-rs -p kcm-sim --bins
# One node session at a time: wait for the lock unless a caller holds it.
hold_lock "$REALNODE_DIR/run.sh" "${orig_args[@]}"
"$REALNODE_DIR/node.sh" up --version "$version" >/dev/null
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  "$REALNODE_DIR/node.sh" down || rc=1
  "$REALNODE_DIR/check-clean.sh" || rc=1
  exit "$rc"
}
trap teardown EXIT
# Ctrl-C reaches kcm-dev too (same process group); it stops kcm-rs and
# returns, then the EXIT trap tears the node down.
trap ':' INT TERM
mkdir -p "$LOGS"
target/debug/kcm-dev --kubeconfig "$STATE/admin.kubeconfig" --state-dir "$LOGS" \
  --evict-requests "$STATE/hostpath/examples/evict" \
  --example manifests/examples/job.yaml --example "$REALNODE_DIR/examples/pod-failure-policy.yaml" \
  "${dev_args[@]}" "$@"
