#!/usr/bin/env bash
# Upstream's own integration tests of the four controllers kcm-rs replaces,
# run against an external controller process (kcm-rs or upstream KCM).
#
# The test files are taken at build time from the pinned k8s.io/kubernetes
# module in the Go module cache, copied to target/upstream-suites/1.N/src
# (never into the repository) and patched: each in-process controller start
# becomes a start of $KCM_UNDER_TEST through extctl/, and the metric checks
# scrape that process's /metrics. One patch per suite serves every minor
# from its own on, until a newer minor's directory has one of its own: 1.N's
# SUITE.patch is patches/1.M/SUITE.patch for the newest M <= N (patch_of).
# Patches apply with no fuzz (line offsets only), so a patch that no longer
# fits a newer minor's tests fails instead of landing in the wrong place.
#
# usage:
#   suites.sh prepare 1.N             copy and patch the tests
#   suites.sh build 1.N [SUITE...]    the test binaries and the etcd command
#   suites.sh run 1.N IMPL [SUITE...] IMPL: kcm-rs | kcm; go test -json output
#                                     in target/upstream-suites/1.N/results
#   suites.sh report OUT_DIR 1.N...   markdown tables of the results
#   suites.sh check 1.N IMPL SUITE    every leaf passed, or failed/skipped as
#                                     expected/1.N-IMPL-SUITE.tsv lists it
#                                     ("flaky" there: any result)
#   suites.sh bar 1.N SUITE           every leaf KCM passed passes for kcm-rs
#                                     (a missed leaf is rerun once)
#   suites.sh all "1.34 1.37" "kcm kcm-rs" [SUITE...]
#   suites.sh gen 1.N.x               (re)write the module file of a version
#                                     (e2e/gen-modfile.sh upstream-suites 1.N.x)
#   suites.sh durations 1.N IMPL SUITE  the last run's seconds per top-level
#                                     test (durations/1.N-SUITE.tsv, for SHARDS)
#
# SUITE: job podgc disruption node (default: all four). RUN=regexp passes
# -test.run (RERUN=name with it: see run). SHARDS=N runs N test processes of
# a suite at once (without RUN). KCM_RS_BIN overrides target/debug/kcm-rs; KCM_BIN overrides
# the harness's kube-controller-manager of that version.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/target/upstream-suites"
all_suites=(job podgc disruption node)
default_version=1.34

minor() { local v="${1#v}"; echo "$v" | cut -d. -f1,2; }

modfile_of() {
  local v; v="$(minor "$1")"
  if [[ "$v" == "$default_version" ]]; then echo "$here/go.mod"; else echo "$here/versions/$v/go.mod"; fi
}

kver_of() {
  local mf; mf="$(modfile_of "$1")"
  [[ -f "$mf" ]] || { echo "error: no module file for Kubernetes $1 ($mf); write one with suites.sh gen 1.N.x" >&2; exit 1; }
  awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$mf"
}

kdir_of() {
  (cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
}

# The patch of SUITE for minor 1.N: the newest patches/1.M/SUITE.patch with
# M <= N, or nothing.
patch_of() {
  local n="${1#1.}" s="$2" d m best="" best_m=-1
  for d in "$here/patches/"1.*; do
    m="${d##*/1.}"
    [[ -f "$d/$s.patch" && "$m" -le "$n" && "$m" -gt "$best_m" ]] || continue
    best="$d/$s.patch"; best_m="$m"
  done
  echo "$best"
}

prepare() {
  local v kver kdir src mf s p
  v="$(minor "$1")"; kver="$(kver_of "$v")"; mf="$(modfile_of "$v")"
  kdir="$(kdir_of "$kver")"
  [[ -d "$kdir/test/integration" ]] || { echo "error: k8s.io/kubernetes@$kver is not in the module cache and cannot be downloaded" >&2; exit 1; }
  src="$work/$v/src"
  rm -rf "$src" "$work/$v/localcp"; mkdir -p "$src"
  cp "$mf" "$src/go.mod"; cp "${mf%.mod}.sum" "$src/go.sum"
  cp -r "$here/extctl" "$here/cmd" "$src/"
  # The module files replace the shared helpers with ../localcp.
  cp -r "$here/../localcp" "$work/$v/localcp"
  for s in "${all_suites[@]}"; do
    mkdir -p "$src/$s"
    cp "$kdir/test/integration/$s/"*.go "$src/$s/"
  done
  chmod -R u+w "$src"
  for s in "${all_suites[@]}"; do
    p="$(patch_of "$v" "$s")"
    [[ -n "$p" ]] || continue
    if ! patch -p1 -s -F0 -d "$src" --no-backup-if-mismatch < "$p"; then
      echo "error: $p does not apply to k8s.io/kubernetes@$kver's tests" >&2; exit 1
    fi
  done
  echo "prepared upstream's tests of k8s.io/kubernetes@$kver in $src" >&2
}

build() {
  local v kver src bin kmajor kminor ldflags pkg s hash
  v="$(minor "$1")"; shift
  local suites=("$@"); [[ ${#suites[@]} -gt 0 ]] || suites=("${all_suites[@]}")
  kver="$(kver_of "$v")"; src="$work/$v/src"; bin="$work/$v/bin"
  [[ -d "$src" && -d "$work/$v/localcp" ]] || prepare "$v"
  mkdir -p "$bin"
  kmajor="$(echo "${kver#v}" | cut -d. -f1)"; kminor="$(echo "${kver#v}" | cut -d. -f2)"
  # The in-process API server reports a real version, as a release build does.
  ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=$kmajor -X $pkg.gitMinor=$kminor -X $pkg.gitTreeState=clean"
  done
  cd "$src"
  for s in etcd "${suites[@]}"; do
    hash="$( { go version; echo "$ldflags"; cat go.mod go.sum ../localcp/go.mod; find extctl cmd ../localcp -name '*.go' | sort | xargs cat; [[ $s == etcd ]] || cat "$s"/*.go; } | sha256sum | cut -d' ' -f1)"
    if [[ -f "$bin/$s.stamp" && "$(cat "$bin/$s.stamp")" == "$hash" ]]; then continue; fi
    local t0; t0=$(date +%s)
    if [[ $s == etcd ]]; then
      go build -o "$bin/suites-etcd" ./cmd/suites-etcd
    else
      go test -c -ldflags "$ldflags" -o "$bin/$s.test" "./$s"
    fi
    echo "$hash" > "$bin/$s.stamp"
    echo "built $s for Kubernetes $v in $(( $(date +%s) - t0 ))s" >&2
  done
  cd "$root"
}

impl_bin() {
  local v="$1" impl="$2"
  case "$impl" in
    kcm-rs) echo "${KCM_RS_BIN:-$root/target/debug/kcm-rs}" ;;
    kcm)
      if [[ -n "${KCM_BIN:-}" ]]; then echo "$KCM_BIN"
      elif [[ "$v" == "$default_version" ]]; then echo "$root/target/e2e-bin/kcm-e2e-controller-manager"
      else echo "$root/target/e2e-bin/$v/kcm-e2e-controller-manager"; fi ;;
    *) echo "error: unknown implementation $impl (kcm-rs or kcm)" >&2; exit 2 ;;
  esac
}

etcd_pid=""
start_etcd() {
  local v="$1" line
  [[ -z "$etcd_pid" ]] || return 0
  mkdir -p "$work/$v/run"
  coproc ETCD { exec "$work/$v/bin/suites-etcd" "$work/$v/run/etcd-data" 2>"$work/$v/run/etcd.log"; }
  etcd_pid=$ETCD_PID
  exec {etcd_in}>&"${ETCD[1]}"
  if ! read -r -t 90 line <&"${ETCD[0]}" || [[ "$line" != READY* ]]; then
    echo "error: etcd did not start (see $work/$v/run/etcd.log)" >&2; exit 1
  fi
  export KUBE_INTEGRATION_ETCD_URL="${line#READY }"
  trap stop_etcd EXIT
}
stop_etcd() {
  if [[ -n "$etcd_pid" ]]; then kill "$etcd_pid" 2>/dev/null || true; wait "$etcd_pid" 2>/dev/null || true; etcd_pid=""; fi
}

run() {
  local v impl b s out rc=0 t0
  v="$(minor "$1")"; impl="$2"; shift 2
  local suites=("$@"); [[ ${#suites[@]} -gt 0 ]] || suites=("${all_suites[@]}")
  b="$(impl_bin "$v" "$impl")"
  [[ -x "$b" ]] || { echo "error: $impl binary $b is missing (cargo build -p kcm-rs; e2e/harness/build.sh target/e2e-bin --version $v)" >&2; exit 1; }
  build "$v" "${suites[@]}"
  start_etcd "$v"
  out="$work/$v/results"; mkdir -p "$out"
  # RERUN=name: the leaves of RUN again, into IMPL-SUITE.name.json; the
  # report takes a leaf's result from the newest such file that has it.
  local suffix="${RERUN:+.$RERUN}" logs
  for s in "${suites[@]}"; do
    logs="$out/logs/$impl-$s$suffix"
    rm -rf "$logs"; mkdir -p "$logs"
    echo "== Kubernetes $v, suite $s, $impl ($b)" >&2
    t0=$(date +%s)
    if [[ -z "${RUN:-}" && "${SHARDS:-1}" -gt 1 ]]; then
      run_sharded "$v" "$s" "$b" "$logs" "$out/$impl-$s$suffix.json" || rc=1
    else
      run_one "$v" "$s" "$b" "$logs" "${RUN:-}" "$out/$impl-$s$suffix.json" || rc=1
    fi
    [[ -n "$suffix" ]] || echo "$(( $(date +%s) - t0 ))" > "$out/$impl-$s.seconds"
    echo "   $(grep -c '"Action":"pass","Package' "$out/$impl-$s$suffix.json" || true) pass lines; $(( $(date +%s) - t0 ))s" >&2
  done
  return $rc
}

# One test process of suite S (RUN_RE: its -test.run, empty for all) into
# JSON; fails when the process does.
run_one() {
  local v="$1" s="$2" b="$3" logs="$4" run_re="$5" json="$6" st
  set +e
  (cd "$work/$v/src/$s" && KCM_UNDER_TEST="$b" KCM_SUITES_LOG_DIR="$logs" \
    "$work/$v/bin/$s.test" -test.v -test.timeout="${SUITE_TIMEOUT:-90m}" ${run_re:+-test.run "$run_re"} 2>&1) \
    | go tool test2json -t -p "$s" > "$json"
  st=${PIPESTATUS[0]}
  set -e
  return "$st"
}

# SHARDS=N test processes of one suite at once, the top-level tests dealt out
# longest first by durations/1.N-SUITE.tsv (a test it does not list counts as
# its median), so each process gets about the same wall time; the JSON of
# all of them, in shard order, is the suite's. Every test starts its own API
# server on its own etcd prefix and its own controller process on a free
# port, so they do not see each other. Most of a leaf's time is waiting
# (back-offs, the controller's resyncs): on 2 cores 3 shards take about a
# third of the sequential time.
run_sharded() {
  local v="$1" s="$2" b="$3" logs="$4" json="$5" n="${SHARDS}" i st=0
  local names regexes=() pids=()
  names="$(cd "$work/$v/src/$s" && "$work/$v/bin/$s.test" -test.list '.*' | grep '^Test')"
  mapfile -t regexes < <(leaves shard "$n" "$here/durations/$v-$s.tsv" <<<"$names")
  for i in "${!regexes[@]}"; do
    run_one "$v" "$s" "$b" "$logs" "${regexes[$i]}" "$json.shard$i" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || st=1; done
  : > "$json"
  for i in "${!regexes[@]}"; do cat "$json.shard$i" >> "$json"; rm -f "$json.shard$i"; done
  return $st
}

# durations 1.N IMPL SUITE: the top-level tests' seconds of the last run, in
# the form run_sharded reads (commit it to durations/ when a suite changes).
durations() {
  local v impl s
  v="$(minor "$1")"; impl="$2"; s="$3"
  leaves durations "$work/$v/results/$impl-$s.json"
}

# bar 1.N SUITE: every leaf upstream KCM passed in its last run passes for
# kcm-rs, but the deliberate deviations expected/1.N-bar-SUITE.tsv lists
# (leaf or "prefix*", reason); the leaves that did not are run again once for kcm-rs
# (RERUN=bar, BAR_RERUN=no to skip) and count as their newer result.
bar() {
  local v s dir missed allowed
  v="$(minor "$1")"; s="$2"; dir="$work/$v/results"
  for f in "$dir/kcm-$s.json" "$dir/kcm-rs-$s.json"; do
    [[ -f "$f" ]] || { echo "error: no results in $f (suites.sh run $v kcm|kcm-rs $s)" >&2; exit 1; }
  done
  rm -f "$dir/kcm-rs-$s.bar.json"
  allowed="$here/expected/$v-bar-$s.tsv"
  if missed="$(leaves bar "$allowed" "$dir/kcm-$s.json" "$dir/kcm-rs-$s.json")"; then return 0; fi
  [[ -n "$missed" ]] || { echo "error: the bar of $v/$s could not be checked" >&2; return 1; }
  echo "$missed" | sed "s#^#$v/$s: KCM passes, kcm-rs: #" >&2
  [[ "${BAR_RERUN:-yes}" != no ]] || return 1
  echo "== $v/$s: those leaves again for kcm-rs" >&2
  RUN="$(leaves regex <<<"$missed")" RERUN=bar run "$v" kcm-rs "$s" || true
  if missed="$(leaves bar "$allowed" "$dir/kcm-$s.json" "$dir/kcm-rs-$s.json" "$dir/kcm-rs-$s.bar.json")"; then return 0; fi
  echo "$missed" | sed "s#^#$v/$s: KCM passes, kcm-rs (rerun): #" >&2
  return 1
}

# cmd/suites-leaves: the leaf checks, durations and shards (Go, so the
# script needs no other interpreter).
leaves() { (cd "$here" && go run ./cmd/suites-leaves "$@"); }

report() {
  local outdir="$1"; shift
  local v args=()
  for v in "$@"; do args+=("$(minor "$v")=$work/$(minor "$v")/results"); done
  mkdir -p "$outdir"; outdir="$(cd "$outdir" && pwd)"
  (cd "$here" && go run ./cmd/suites-report -out "$outdir" -notes "$here/notes.tsv" "${args[@]}")
}

check() {
  local v impl s json exp
  v="$(minor "$1")"; impl="$2"; s="$3"
  json="$work/$v/results/$impl-$s.json"; exp="$here/expected/$v-$impl-$s.tsv"
  [[ -f "$json" ]] || { echo "error: no results in $json (suites.sh run $v $impl $s)" >&2; exit 1; }
  leaves check "$json" "$exp"
}

# The module file of a release comes from the harnesses' one template
# (e2e/gen-modfile.sh), which calls `tidy` below: upstream's tests are copied
# per run, so the file is tidied over a copy of them.
gen() { "$here/../gen-modfile.sh" upstream-suites "$@"; }

tidy() {
  local full="${1#v}" mf="$2" v tmp s
  v="$(minor "$full")"
  tmp="$work/gen-$v/src"; rm -rf "$work/gen-$v"; mkdir -p "$tmp"
  cp "$mf" "$tmp/go.mod"
  # tidy over the unpatched tests, extctl and the commands
  local kdir; kdir="$(kdir_of "v$full")"
  cp -r "$here/extctl" "$here/cmd" "$tmp/"
  cp -r "$here/../localcp" "$work/gen-$v/localcp"
  for s in "${all_suites[@]}"; do mkdir -p "$tmp/$s"; cp "$kdir/test/integration/$s/"*.go "$tmp/$s/"; done
  chmod -R u+w "$tmp"
  (cd "$tmp" && go mod tidy)
  cp "$tmp/go.mod" "$mf"; cp "$tmp/go.sum" "${mf%.mod}.sum"
  rm -rf "$work/gen-$v"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  prepare) prepare "$@" ;;
  build) build "$@" ;;
  run) run "$@" ;;
  report) report "$@" ;;
  check) check "$@" ;;
  bar) bar "$@" ;;
  gen) gen "$@" ;;
  tidy) tidy "$@" ;;
  durations) durations "$@" ;;
  all)
    versions="$1"; impls="$2"; shift 2; rc=0
    for v in $versions; do
      prepare "$v"
      for i in $impls; do run "$v" "$i" "$@" || rc=1; stop_etcd; done
    done
    exit $rc ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
