#!/usr/bin/env bash
# make fuzz: every cargo-fuzz target of crates/fuzz/fuzz (one per parser of
# untrusted bytes, see crates/fuzz/src/lib.rs) for FUZZ_RUNS executions
# each, from the committed seeds (crates/fuzz/corpus/<target>, read-only)
# plus a working corpus in target/fuzz/corpus/<target>; the table goes to
# bench/results/fuzz/README.md (FUZZ_OUT). Needs nightly Rust; installs
# cargo-fuzz when missing. Built with AddressSanitizer so libFuzzer's
# -malloc_limit_mb catches any single allocation over FUZZ_MALLOC_MB.
#   FUZZ_RUNS=200000 FUZZ_TARGETS="proto_watch pod_proto" hack/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${FUZZ_RUNS:-200000}
malloc_mb=${FUZZ_MALLOC_MB:-256}
out=${FUZZ_OUT:-bench/results/fuzz/README.md}
fuzz_dir=crates/fuzz/fuzz
all=$(sed -n 's/^name = "\(.*\)"/\1/p' "$fuzz_dir/Cargo.toml" | grep -v '^kcm-fuzz-targets$')
targets=${FUZZ_TARGETS:-$all}

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "error: make fuzz needs nightly Rust (rustup toolchain install nightly);" \
    "the stable smoke runs in make test (cargo test -p kcm-fuzz --test smoke)" >&2
  exit 1
fi
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --locked
fi
fuzz=(cargo +nightly fuzz)
build_args=(--fuzz-dir "$fuzz_dir" --target-dir target/fuzz)
"${fuzz[@]}" build "${build_args[@]}"

rows=()
failed=""
for t in $targets; do
  work=target/fuzz/corpus/$t
  artifacts=target/fuzz/artifacts/$t/
  log=target/fuzz/$t.log
  mkdir -p "$work" "$artifacts"
  start=$(date +%s%N)
  set +e
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: the whole
  # process; -malloc_limit_mb: any one allocation (a length prefix taken
  # at its word would be one).
  "${fuzz[@]}" run "${build_args[@]}" "$t" "$work" "crates/fuzz/corpus/$t" -- \
    -runs="$runs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb="$malloc_mb" \
    -max_len=65536 -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  secs=$((($(date +%s%N) - start) / 1000000000))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(find "$artifacts" -type f | wc -l)
  findings="none"
  if [[ $rc != 0 || $found != 0 ]]; then
    findings="exit $rc, $found artifact(s) in $artifacts (see $log)"
    failed+=" $t"
  fi
  seeds=$(find "crates/fuzz/corpus/$t" -type f | wc -l)
  corpus=$(find "$work" -type f | wc -l)
  rows+=("| \`$t\` | ${execs:-?} | $secs s | $seeds | $corpus | $findings |")
  echo "$t: ${execs:-?} executions in $secs s, findings: $findings" >&2
done

mkdir -p "$(dirname "$out")"
{
  echo "# Fuzzing results"
  echo
  echo "\`make fuzz\` (hack/fuzz.sh) on $(date -u +%F), kcm-rs $(git rev-parse --short=12 HEAD)," \
    "$(rustc +nightly --version | cut -d' ' -f1-2), AddressSanitizer, $(nproc) cores:" \
    "FUZZ_RUNS=$runs executions per target, -malloc_limit_mb=$malloc_mb, -timeout=10 s," \
    "-max_len=65536. Seeds are crates/fuzz/corpus (real API-server bytes, see" \
    "crates/fuzz/tests/capture.rs); the corpus column counts the working corpus after" \
    "the run (target/fuzz/corpus, not committed; it grows across runs)."
  echo
  echo "| target | executions | time | seeds | corpus | findings |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$out.new"
if [[ -f "$out" ]] && grep -q '^## Findings' "$out"; then
  # The hand-kept findings section survives a rerun.
  { echo; sed -n '/^## Findings/,$p' "$out"; } >>"$out.new"
fi
mv "$out.new" "$out"
echo "wrote $out" >&2
if [[ -n "$failed" ]]; then
  echo "error: fuzz findings in$failed" >&2
  exit 1
fi
