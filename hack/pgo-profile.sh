#!/usr/bin/env bash
# make pgo-profile: writes pgo/kcm-rs.profdata.gz and pgo/llvm-major, the
# profile that release builds of kcm-rs use (hack/pgo-flags.sh).
#
# Builds kcm-rs instrumented (-Cprofile-generate), runs kcm-bench's W3, W4, W5
# and W7 at --scale 0.1 with it (Jobs one at a time, 2,000 pods at start-up,
# pod GC and taint eviction, a flood of Jobs): not W1, W2 or W8, which
# measure what the profile buys. About 20 minutes. Needs llvm-profdata of
# this rustc's LLVM major (Debian: apt-get install llvm-<major>).
set -euo pipefail
cd "$(dirname "$0")/.."
major=$(${RUSTC:-rustc} -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=${LLVM_PROFDATA:-}
if [[ -z $profdata ]]; then
  for p in "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata" llvm-profdata; do
    if command -v "$p" >/dev/null && grep -q "LLVM version $major\." <<<"$("$p" --version)"; then
      profdata=$p
      break
    fi
  done
fi
if [[ -z $profdata ]]; then
  echo "error: no llvm-profdata of LLVM $major (rustc's); apt-get install llvm-$major or set LLVM_PROFDATA" >&2
  exit 1
fi
dir=$PWD/target/pgo-train
rm -rf "$dir/raw" "$dir/bench"
mkdir -p "$dir/raw"
cargo=${CARGO:-cargo}
RUSTFLAGS="-Cprofile-generate=$dir/raw" "$cargo" build --release --locked -p kcm-rs --target-dir "$dir/target"
# The build's own instrumented build scripts and proc macros wrote profiles
# of compile-time code here: only the training runs' count.
rm -rf "$dir/raw"
mkdir -p "$dir/raw"
"$cargo" build --release --locked -p kcm-sim -p kcm-bench --bins
# kcm-bench stops a manager with SIGKILL, which writes no profile: the
# wrapper's watcher turns that into a SIGTERM, on which kcm-rs exits cleanly
# and writes its profile. The wrapper is gone once it is missing or a zombie.
cat >"$dir/kcm-rs" <<EOF
#!/usr/bin/env bash
export LLVM_PROFILE_FILE='$dir/raw/kcm-rs-%p.profraw'
'$dir/target/release/kcm-rs' "\$@" &
child=\$!
me=\$\$
alive() { [[ \$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' /proc/\$me/status 2>/dev/null) =~ ^[^Z]\$ ]]; }
( while alive; do sleep 0.3; done; kill -TERM \$child 2>/dev/null ) &
wait \$child
EOF
chmod +x "$dir/kcm-rs"
target/release/kcm-bench --only w3,w4,w5,w7 --scale 0.1 --w3-runs 20 --kcm-rs "$dir/kcm-rs" --out "$dir/bench"
# Managers still running (the last one's watcher may not have fired yet)
# get their SIGTERM here; each writes its profile as it exits (its drain is
# bounded by --shutdown-grace-period, 30 s by default).
pkill -TERM -f "^$dir/target/release/kcm-rs" || true
for _ in $(seq 1 200); do
  pgrep -f "^$dir/target/release/kcm-rs" >/dev/null || break
  sleep 0.3
done
"$profdata" merge --sparse -o "$dir/kcm-rs.profdata" "$dir"/raw/kcm-rs-*.profraw
gzip -9nc "$dir/kcm-rs.profdata" >pgo/kcm-rs.profdata.gz
echo "$major" >pgo/llvm-major
echo "pgo/kcm-rs.profdata.gz: $(stat -c %s pgo/kcm-rs.profdata.gz) bytes from $(ls "$dir"/raw/kcm-rs-*.profraw | wc -l) runs, LLVM $major" >&2
