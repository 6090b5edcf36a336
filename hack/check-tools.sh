#!/usr/bin/env bash
# What `make test` needs before it starts its long builds (`make check-tools`
# runs this first). Each missing piece is one clear line; exit 1 if any.
#   - Go >= 1.26: helm (e2e/harness/helm) and the 1.37 control plane that
#     make test builds say `go 1.26.0` in their go.mod (1.34's says 1.24); an
#     older go would try to download a newer toolchain (GOTOOLCHAIN=auto),
#     which needs the Go proxy and fails offline.
#   - a C compiler where cgo is on (go env CGO_ENABLED=1): the control plane
#     links with it.
#   - Rust (cargo, rustc) >= the workspace's rust-version (Cargo.toml).
#   - GNU patch: upstream's integration suites are patched with
#     `patch -p1 --no-backup-if-mismatch` (e2e/upstream-suites/suites.sh).
#   - git (the build's commit), python3 (hack/ scripts), promtool and
#     prometheus 2.x (the Debian package `prometheus`, or PROMTOOL and
#     PROMETHEUS set: the monitoring tests).
#   - free disk space where the repository is: MIN_FREE_GIB (default 8 when
#     target/debug does not exist yet, as on a clean clone, with a warning
#     under 20; 3 otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."
problems=0
err() { echo "error: $*" >&2; problems=$((problems + 1)); }
# version_ge A B: A >= B for dotted versions.
version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]; }

need_go=1.26
if ! command -v go >/dev/null 2>&1; then
  err "go not found: install Go >= $need_go (https://go.dev/dl); make test builds kube-apiserver, kube-controller-manager and helm from their Go modules"
else
  have_go=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed 's/^go//')
  if ! version_ge "${have_go:-0}" "$need_go"; then
    err "Go ${have_go:-unknown} is older than $need_go, which helm (e2e/harness/helm/go.mod) and the 1.37 control plane need; install Go >= $need_go"
  fi
  if [[ "$(go env CGO_ENABLED 2>/dev/null)" == 1 ]]; then
    cc=$(go env CC 2>/dev/null)
    command -v "${cc:-gcc}" >/dev/null 2>&1 \
      || err "cgo is on but its C compiler ${cc:-gcc} is missing: apt-get install gcc (or set CGO_ENABLED=0)"
  fi
fi

need_rust=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)
if ! command -v cargo >/dev/null 2>&1; then
  err "cargo not found: install Rust >= $need_rust (https://rustup.rs)"
else
  have_rust=$(rustc --version 2>/dev/null | awk '{print $2}')
  version_ge "${have_rust:-0}" "$need_rust" \
    || err "Rust ${have_rust:-unknown} is older than the workspace's rust-version $need_rust: rustup update"
fi

if ! command -v patch >/dev/null 2>&1; then
  err "patch not found: apt-get install patch (GNU patch; e2e/upstream-suites/suites.sh patches upstream's tests)"
elif ! patch --version 2>/dev/null | head -1 | grep -q "GNU patch"; then
  err "patch is not GNU patch ($(patch --version 2>&1 | head -1)): suites.sh uses --no-backup-if-mismatch; install GNU patch"
fi

for tool in git python3; do
  command -v "$tool" >/dev/null 2>&1 || err "$tool not found: apt-get install $tool"
done

for p in promtool:PROMTOOL prometheus:PROMETHEUS; do
  t=${p%%:*}
  v=${p##*:}
  if [[ -n "${!v:-}" ]]; then
    [[ -x "${!v}" ]] || err "$v=${!v} is not an executable"
  elif ! command -v "$t" >/dev/null 2>&1; then
    err "$t not found: apt-get install --no-install-recommends prometheus (or set $v); .ci/run installs it"
  fi
done

# A clean `make test` (CARGO_INCREMENTAL=0, as .ci/run) writes some 15 GiB;
# below MIN_FREE_GIB (default 8, 3 with a build already there) it cannot
# finish, below 20 it may: a warning only, as the estimate is rough.
if [[ -d target/debug ]]; then min=${MIN_FREE_GIB:-3}; else min=${MIN_FREE_GIB:-8}; fi
free=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
where=$(df -P . | awk 'NR == 2 { print $6 }')
if (( ${free:-0} < min )); then
  err "only ${free} GiB free on $where; make test cannot finish in under $min GiB (the Rust build in target/, the control planes, Go's caches); free some space or set MIN_FREE_GIB"
elif [[ ! -d target/debug ]] && (( ${free:-0} < 20 )); then
  echo "check-tools: warning: ${free} GiB free on $where; a clean make test writes about 15 GiB" >&2
fi

if ((problems > 0)); then
  echo "check-tools: $problems problem(s); see docs/install.md" >&2
  exit 1
fi
