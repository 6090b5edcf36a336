#!/usr/bin/env bash
# Upstream's own e2e tests of the four controllers kcm-rs replaces
# (`go test -c k8s.io/kubernetes/test/e2e` of each minor), run on the real
# node (e2e/realnode, docs/real-node.md) against kcm-rs and against upstream
# KCM. One node session per minor and suite (the node's lock held
# throughout: node.sh session), a fresh cluster for each implementation
# within it (the taint suite is Serial and Disruptive).
#
# usage:
#   run.sh build 1.N...               e2e.test of each minor (cached; about
#                                     10 minutes cold each; needs no lock)
#   run.sh run 1.N SUITE IMPL...      one session: for each IMPL a fresh cluster
#                                     (up), IMPL, e2e.test on SUITE, down;
#                                     results in target/upstream-e2e/1.N/SUITE/IMPL
#   run.sh all "1.34 1.37" "kcm kcm-rs" [SUITE...]
#   run.sh report OUT_DIR 1.N...      markdown tables (OUT_DIR/<minor>-<suite>.md, summary.md)
#   run.sh bar 1.N SUITE              every spec KCM passed passed for kcm-rs
#   run.sh specs 1.N SUITE            the specs a run of SUITE selects (dry)
#
# SUITE: job disruption taint-eviction podgc (default: all four).
# IMPL: kcm (kube-controller-manager of the minor: the node's helper KCM
# restarted with job, pod GC, taint eviction and disruption added) or kcm-rs
# (KCM_RS_BIN, default a copy of target/debug/kcm-rs taken by `all`, with
# --controllers=*). FOCUS=regexp narrows a run to matching specs. PROCS=N
# (N > 1) runs the job and disruption suites as upstream's CI does: the
# ginkgo CLI of the minor's go.mod, N processes, the [Serial] specs alone at
# the end (Ginkgo's Serial decorator); the other suites always run serially.
# Must run as root (the node).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
realnode="$root/e2e/realnode"
work="$root/target/upstream-e2e"
all_suites=(job disruption taint-eviction podgc)
say() { echo "upstream-e2e: $*" >&2; }
err() { echo "error: $*" >&2; }

minor() { local v="${1#v}"; echo "$v" | cut -d. -f1,2; }
e2e_bin() { echo "$root/target/realnode/$1/bin/e2e.test"; }
cp_bin() { if [[ "$1" == 1.34 ]]; then echo "$root/target/e2e-bin"; else echo "$root/target/e2e-bin/$1"; fi; }

# The specs of each suite: its Describe, without [Feature:…] specs (pod
# GC's only spec is one: [Feature:PodGarbageCollector] [Slow]).
focus_of() {
  case "$1" in
    job) echo '\[sig-apps\] Job ' ;;
    disruption) echo '\[sig-apps\] DisruptionController ' ;;
    taint-eviction) echo '\[sig-node\] NoExecuteTaintManager ' ;;
    podgc) echo '\[sig-node\] Pod garbage collector ' ;;
    *) err "unknown suite $1 (have: ${all_suites[*]})"; exit 2 ;;
  esac
}
skip_of() { [[ "$1" == podgc ]] && echo '' || echo '\[Feature:'; }
# The ginkgo CLI of the version e2e.test of minor $1 is built with (its
# real-node module file), installed once under $work/bin.
ginkgo_cli() {
  local v="$1" modfile gv bin
  if [[ "$v" == 1.34 ]]; then modfile="$realnode/go.mod"; else modfile="$realnode/versions/$v/go.mod"; fi
  gv="$(awk '$1 == "github.com/onsi/ginkgo/v2" { print $2; exit }' "$modfile")"
  [[ -n "$gv" ]] || { err "no github.com/onsi/ginkgo/v2 in $modfile"; return 1; }
  bin="$work/bin/ginkgo-$gv/ginkgo"
  if [[ ! -x "$bin" ]]; then
    mkdir -p "$(dirname "$bin")"
    GOFLAGS=-mod=mod GOBIN="$(dirname "$bin")" go install "github.com/onsi/ginkgo/v2/ginkgo@$gv" >&2 ||
      { err "go install of the ginkgo CLI $gv failed (needs the Go module proxy)"; return 1; }
  fi
  echo "$bin"
}
# PROCS for suite $1 (1: e2e.test alone).
procs_of() { case "$1" in job|disruption) echo "${PROCS:-1}" ;; *) echo 1 ;; esac; }

# A bound on one run (the session holds the node for at most this long).
timeout_of() { case "$1" in job) echo 60m ;; podgc) echo 20m ;; *) echo 40m ;; esac; }

build() {
  local v
  for v in "$@"; do "$realnode/build.sh" --version "$(minor "$v")" --e2e; done
}

specs() {
  local v suite
  v="$(minor "$1")"; suite="$2"
  "$(e2e_bin "$v")" -list-tests 2>/dev/null | sed 's/^ *[^ ]*: //' |
    grep -E -- "$(focus_of "$suite")" | { if [[ -n "$(skip_of "$suite")" ]]; then grep -v -E -- "$(skip_of "$suite")"; else cat; fi; } |
    { if [[ -n "${FOCUS:-}" ]]; then grep -E -- "$FOCUS"; else cat; fi; }
}

# The kcm-rs binary a batch runs: a copy, so that a rebuild of
# target/debug/kcm-rs by someone else does not change it halfway.
snapshot_kcm_rs() {
  [[ -n "${KCM_RS_BIN:-}" ]] && return 0
  (cd "$root" && ${CARGO:-cargo} build -p kcm-rs --bin kcm-rs)
  mkdir -p "$work"
  cp "$root/target/debug/kcm-rs" "$work/kcm-rs.tmp" && mv "$work/kcm-rs.tmp" "$work/kcm-rs"
  local dirty=""
  [[ -n "$(cd "$root" && git status --porcelain --untracked-files=no -- crates cmd Cargo.lock 2>/dev/null)" ]] && dirty="+dirty"
  echo "$(cd "$root" && git rev-parse --short HEAD)$dirty" >"$work/kcm-rs.build"
}
kcm_rs_bin() { echo "${KCM_RS_BIN:-$work/kcm-rs}"; }

# run 1.N SUITE IMPL...: one node session for the suite, a fresh cluster
# (down, up) for each implementation within it.
run() {
  local v suite impl
  v="$(minor "$1")"; suite="$2"; shift 2
  focus_of "$suite" >/dev/null
  [[ $# -gt 0 ]] || { err "no implementation (kcm, kcm-rs)"; exit 2; }
  for impl in "$@"; do
    case "$impl" in kcm|kcm-rs) ;; *) err "unknown implementation $impl (kcm or kcm-rs)"; exit 2 ;; esac
    if [[ "$impl" == kcm-rs && ! -x "$(kcm_rs_bin)" ]]; then snapshot_kcm_rs; fi
  done
  [[ -x "$(e2e_bin "$v")" ]] || build "$v"
  [[ "$(procs_of "$suite")" -le 1 ]] || ginkgo_cli "$v" >/dev/null
  "$realnode/node.sh" session --version "$v" -- "$here/run.sh" inside "$v" "$suite" "$@"
}

# inside 1.N SUITE IMPL...: in a node session (KUBECONFIG etc. set).
inside() {
  local v="$1" suite="$2" impl n=0 rc=0
  shift 2
  for impl in "$@"; do
    if [[ $((n++)) -gt 0 ]]; then
      say "a fresh cluster for $impl"
      "$realnode/node.sh" down >&2 && "$realnode/node.sh" up --version "$v" >/dev/null || return 1
    fi
    (one "$v" "$suite" "$impl") || rc=1
  done
  return "$rc"
}

# one 1.N SUITE IMPL: IMPL and e2e.test on SUITE in the cluster up now.
one() {
  local v="$1" suite="$2" impl="$3" out pid rc=0 began build kcm_args=()
  out="$work/$v/$suite/$impl"
  rm -rf "$out"; mkdir -p "$out"
  focus_of "$suite" >"$out/focus"
  skip_of "$suite" >"$out/skip"
  [[ "$suite" == podgc ]] && kcm_args+=(--terminated-pod-gc-threshold=100)
  if [[ "$impl" == kcm ]]; then
    # KCM as upstream deploys it: one process, the node's helper KCM
    # restarted with the four added to its --controllers. Its
    # taint-eviction-controller finds a node's pods through the spec.nodeName
    # index node-lifecycle-controller adds to the shared pod informer; in a
    # KCM of its own it fails with "Index with name spec.nodeName does not
    # exist" and evicts nothing. The pid file is node.sh's, so `down` stops it.
    local state="${KCM_NODE_STATE:-/run/kcm-rs-node}" hpid argv=() a i kcm=()
    hpid="$(cat "$state/pids/kcm-helpers")"
    mapfile -d '' argv <"/proc/$hpid/cmdline"
    [[ "${argv[0]:-}" == *kcm-e2e-controller-manager ]] || { err "pid $hpid is not the helper KCM: ${argv[*]}"; exit 1; }
    for a in "${argv[@]}"; do
      case "$a" in
        --controllers=*) kcm+=("$a,job-controller,pod-garbage-collector-controller,taint-eviction-controller,disruption-controller") ;;
        *) kcm+=("$a") ;;
      esac
    done
    kill -TERM "$hpid"
    for ((i = 0; i < 200; i++)); do kill -0 "$hpid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$hpid" 2>/dev/null && { err "the helper KCM $hpid did not stop"; exit 1; }
    build="kube-controller-manager $("${kcm[0]}" --version 2>/dev/null | awk '{ print $2 }') (with the node's helpers, one process)"
    setsid "${kcm[@]}" "${kcm_args[@]}" </dev/null >"$out/controller.log" 2>&1 &
    echo $! >"$state/pids/kcm-helpers"
  else
    build="kcm-rs $(cat "$work/kcm-rs.build" 2>/dev/null || echo "$(kcm_rs_bin)")"
    setsid "$(kcm_rs_bin)" --kubeconfig="$KUBECONFIG" --controllers='*' --leader-elect=false --secure-port=0 \
      "${kcm_args[@]}" </dev/null >"$out/controller.log" 2>&1 &
  fi
  pid=$!
  stop_controller() {
    kill -TERM "$pid" 2>/dev/null || return 0
    local i
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  }
  trap stop_controller EXIT
  sleep 2
  kill -0 "$pid" 2>/dev/null || { err "$impl exited at start"; tail -n 20 "$out/controller.log" >&2; exit 1; }
  local focus="$(focus_of "$suite")"
  [[ -n "${FOCUS:-}" ]] && focus="$focus.*(${FOCUS})"
  [[ -n "${FOCUS:-}" ]] && echo "$focus" >"$out/focus"
  local args=(--kubeconfig="$KUBECONFIG" --kubectl-path="$KUBECTL"
    --disable-log-dump --e2e-verify-service-account=true
    --kubelet-root-dir="${KCM_NODE_STATE:-/run/kcm-rs-node}/kubelet")
  local gargs=(focus="$focus" no-color v timeout="$(timeout_of "$suite")" json-report="$out/report.json")
  [[ -n "$(skip_of "$suite")" ]] && gargs+=(skip="$(skip_of "$suite")")
  local procs cmd=() g
  procs="$(procs_of "$suite")"
  if [[ "$procs" -gt 1 ]]; then
    # The CLI runs the processes and merges their reports into one.
    cmd=("$(ginkgo_cli "$v")" -p --procs="$procs")
    for g in "${gargs[@]}"; do cmd+=(--"$g"); done
    cmd+=("$(e2e_bin "$v")" --)
  else
    cmd=("$(e2e_bin "$v")")
    for g in "${gargs[@]}"; do cmd+=(--ginkgo."$g"); done
  fi
  say "$v $suite against $impl ($build): $(specs "$v" "$suite" | wc -l) specs, $procs process(es)"
  began=$(date +%s)
  # The e2e framework writes into its working directory (reports, dumps).
  (cd "$out" && "${cmd[@]}" "${args[@]}") >"$out/e2e.log" 2>&1 || rc=$?
  {
    echo "wall=$(($(date +%s) - began))"
    echo "procs=$procs"
    echo "rc=$rc"
    echo "build=$build"
    echo "when=$(date -u +%Y-%m-%dT%H:%MZ)"
  } >"$out/meta"
  grep -E '^(Ran|FAIL|SUCCESS|PASS)|^\s*\[FAIL\]' "$out/e2e.log" | tail -n 20 >&2 || true
  stop_controller
  trap - EXIT
  kill -0 "$pid" 2>/dev/null && err "$impl did not stop"
  say "$v $suite against $impl: e2e.test exit $rc in $(($(date +%s) - began))s; $out"
  return 0
}

all() {
  local versions="$1" impls="$2" v s i failed=0 began
  began=$(date +%s)
  shift 2
  local suites=("$@")
  [[ ${#suites[@]} -gt 0 ]] || suites=("${all_suites[@]}")
  for v in $versions; do build "$v"; done
  [[ " $impls " == *" kcm-rs "* ]] && snapshot_kcm_rs
  for v in $versions; do
    for s in "${suites[@]}"; do
      # shellcheck disable=SC2086 # a list of implementations
      run "$v" "$s" $impls || { err "session $v $s ($impls) failed"; failed=1; }
    done
  done
  say "all of $versions, ${suites[*]}, $impls: $(($(date +%s) - began))s"
  return "$failed"
}

report_tool() {
  local bin="$work/bin/e2e-report"
  mkdir -p "$work/bin"
  (cd "$here" && go build -o "$bin" ./cmd/e2e-report)
  echo "$bin"
}

# Everything runs from one parsed line: an edit of this file while a batch
# runs does not change what that batch executes next.
main() {
case "${1:-}" in
  build) shift; build "$@" ;;
  specs) shift; specs "$@" ;;
  run) shift; [[ $# -ge 3 ]] || { err "usage: run.sh run 1.N SUITE IMPL..."; exit 2; }; run "$@" ;;
  inside) shift; inside "$@" ;;
  all) shift; [[ $# -ge 2 ]] || { err "usage: run.sh all \"1.N...\" \"kcm kcm-rs\" [SUITE...]"; exit 2; }; all "$@" ;;
  report) shift; out="${1:?usage: run.sh report OUT_DIR 1.N...}"; shift
    "$(report_tool)" -results "$work" -out "$out" -notes "$here/notes.tsv" "$@" ;;
  bar) shift; [[ $# -eq 2 ]] || { err "usage: run.sh bar 1.N SUITE"; exit 2; }
    "$(report_tool)" -results "$work" -bar "$(minor "$1")" "$2" ;;
  *) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
}
main "$@"; exit $?
