# kcm-rs developer entry points. The README documents `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
E2E_BIN := target/e2e-bin
ARGS ?=
# Flags for kcm-dev (the local `make run`), e.g. --exit-when-done.
DEV_ARGS ?=
# The one version: Cargo.toml's [workspace.package] version (--version,
# kcm_rs_build_info, the image tag manifests/base references).
WORKSPACE_VERSION := $(shell sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
VERSION := $(WORKSPACE_VERSION)
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# The one image repository: where the release workflow pushes, and the
# default of the chart (values.yaml image.repository) and of kustomize
# (manifests/base/kustomization.yaml); hack/release-checks.py holds them equal
# in make test.
IMAGE_REPOSITORY := ghcr.io/kcm-rs/kcm-rs
IMAGE ?= $(IMAGE_REPOSITORY):$(VERSION)
# The commit's time: every timestamp of a release (image, chart, archives).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
DOCKER_BUILD_ARGS = --build-arg VERSION=$(VERSION) --build-arg KCM_RS_GIT_COMMIT=$(COMMIT) \
  --build-arg SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
  --build-arg CREATED=$$(date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
# The release binary (make release-bin; kcm-bench's default --kcm-rs): static,
# for RUST_TARGET, the host's target triple (x86_64-unknown-linux-gnu here).
RUST_TARGET ?= $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
RELEASE_TARGET_DIR ?= target/pgo
KCM_RS_RELEASE := $(RELEASE_TARGET_DIR)/$(RUST_TARGET)/release/kcm-rs

.PHONY: run run-examples test lint unit e2e differential bench bench-decode chaos chaos-seeds handover controlplane fmt clean-run \
	check-tools monitoring image kind-up release release-bin pgo-profile

## run: kcm-rs against TARGET_KUBECONFIG / --kubeconfig in ARGS, else against a local
## control plane with simulated nodes and the sample Job; REAL_NODE=1: run-real.
run:
	@# Only an explicit TARGET_KUBECONFIG or --kubeconfig leaves the local
	@# control plane: an exported KUBECONFIG must not point kcm-rs at a real
	@# cluster whose KCM may still run the same controllers.
	@if [[ -n "$(REAL_NODE)" ]]; then exec $(MAKE) --no-print-directory run-real; fi; \
	if [[ -n "$(TARGET_KUBECONFIG)" || "$(ARGS)" == *--kubeconfig* ]]; then \
	  $(CARGO) build -p kcm-rs && \
	  if [[ "$(ARGS)" == *--kubeconfig* ]]; then exec target/debug/kcm-rs $(ARGS); \
	  else exec target/debug/kcm-rs --kubeconfig "$(TARGET_KUBECONFIG)" $(ARGS); fi; \
	else \
	  e2e/harness/build.sh $(E2E_BIN) --with-kubectl && \
	  $(CARGO) build -p kcm-rs -p kcm-sim --bins && \
	  exec target/debug/kcm-dev $(DEV_ARGS) -- $(ARGS); \
	fi

## run-examples: `make run` until every example Job has finished; prints one
## line per Job and exits (1 if they are not done within 5 minutes).
run-examples:
	$(MAKE) run DEV_ARGS="--exit-when-done $(DEV_ARGS)"

## test: formatting, lints, unit tests and end-to-end tests on a real API server,
## then upstream's own Job integration suite against kcm-rs on 1.34
## (upstream-tests-job, about 3 minutes in 5 shards plus a 2-minute Go build).
## The differential suites run on the oldest supported minor with the rest
## of the tests (the tests that need 1.37 start its control plane);
## make test-versions runs them on all four minors (make test-newest: 1.37),
## out of make test for its time budget.
test: check-tools release-checks lint controlplane
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(MAKE) upstream-tests-job

.PHONY: test-newest
test-newest:
	$(MAKE) test-versions K8S_VERSIONS=1.37 TEST_GATES=no TEST_UPSTREAM=no

## release-checks: the release's bookkeeping (hack/release-checks.py: the
## chart's version moved with its files, one image repository, the CHANGELOG's
## form) and the image builder's and those checks' unit tests; a few seconds.
## chart-version: records the chart's version after a bump (the check says when).
.PHONY: release-checks chart-version
release-checks:
	@for t in hack/test_oci_image.py hack/test_release_checks.py; do \
	  out=$$(python3 $$t 2>&1) || { echo "$$out"; echo "error: $$t failed" >&2; exit 1; }; \
	  echo "$$t: $$(echo "$$out" | grep -E '^Ran [0-9]+ tests') OK"; \
	done
	@python3 hack/release-checks.py check
chart-version:
	python3 hack/release-checks.py record-chart

## check-tools: what make test needs, checked before its long builds (Go >= 1.26,
## cgo's C compiler, Rust >= rust-version, GNU patch, git, python3, promtool and
## prometheus, free disk space; hack/check-tools.sh says why each).
check-tools:
	@hack/check-tools.sh

## monitoring: the alert rules under promtool, and a real Prometheus scraping
## kcm-rs (every dashboard panel and alert expression evaluated).
monitoring: check-tools controlplane
	$(CARGO) test -p kcm-e2e --test prometheus_rules --test monitoring --test manifests

## image: the container image, where a container engine exists.
image:
	@engine=""; \
	for e in docker podman; do \
	  if command -v $$e >/dev/null && $$e info >/dev/null 2>&1; then engine=$$e; break; fi; \
	done; \
	if [[ -z "$$engine" ]]; then \
	  echo "error: no working container engine (docker or podman with a reachable daemon);" \
	    "build the image elsewhere: docker build -f manifests/Dockerfile -t $(IMAGE) ." >&2; \
	  exit 1; \
	fi; \
	DOCKER_BUILDKIT=1 $$engine build -f manifests/Dockerfile -t $(IMAGE) $(DOCKER_BUILD_ARGS) .

## image-oci: the image without a container engine: an OCI image layout
## archive, target/image/kcm-rs-$(VERSION).oci.tar, holding an image index with
## the release binary's architecture (hack/oci-image.py: only the static
## binary, CA certificates and a nonroot user; reproducible; prints the
## index's digest). Load it with `ctr -n k8s.io images import <archive>`.
## make release-artifacts makes the release's, from one binary per architecture.
IMAGE_OCI := target/image/kcm-rs-$(VERSION).oci.tar
.PHONY: image-oci print-release-bin print-image-repository print-e2e-bin
image-oci: release-bin
	@python3 hack/oci-image.py --binary $(KCM_RS_RELEASE) --name $(IMAGE) \
	  --out $(IMAGE_OCI) --version $(VERSION) --revision $(COMMIT) \
	  --created $$(git log -1 --format=%ct $(COMMIT) 2>/dev/null || echo 0)
	@echo "load: ctr -n k8s.io images import $(IMAGE_OCI)   pin: $(IMAGE)@$$(cat $(IMAGE_OCI).digest)" >&2

## release-bin: the release binary, $(KCM_RS_RELEASE): statically linked
## (-C target-feature=+crt-static with glibc's static libraries, Debian's
## libc6-dev: it needs no shared library of any host; DNS and NSS:
## docs/release.md), built with the committed profile of its hot paths
## (profile-guided optimization: pgo/README.md) where this rustc's LLVM reads
## it (hack/pgo-flags.sh says when not), in a target directory of its own so
## that the other release builds keep their cache. `--target` keeps build
## scripts and proc macros dynamic (they cannot be static). Refused by
## hack/oci-image.py --check if anything in it is dynamic.
release-bin:
	KCM_RS_GIT_COMMIT=$(COMMIT) RUSTFLAGS="$${RUSTFLAGS:-} -C target-feature=+crt-static $$(hack/pgo-flags.sh)" \
	  $(CARGO) build --release --locked -p kcm-rs --target $(RUST_TARGET) --target-dir $(RELEASE_TARGET_DIR)
	@python3 hack/oci-image.py --check $(KCM_RS_RELEASE)

print-release-bin:
	@echo $(KCM_RS_RELEASE)

## release-binary: the release binary as dist/kcm-rs-$(VERSION)-linux-<arch>
## with what it was built from (<binary>.build-info.json: rustc, the PGO
## profile, glibc's and libgcc's Debian packages, the crates). The forge runs
## it on each architecture's runner; make release-artifacts on the host's.
## release-artifacts: the release in dist/ (hack/release-artifacts.sh,
## docs/release.md): binaries, image index archive, chart package pinned by
## digest, SBOM, provenance, SHA256SUMS, cosign signatures and attestations
## verified offline against release/cosign.pub. VERSION must be the workspace's;
## COSIGN_KEY (and COSIGN_PASSWORD) the release key, or COSIGN_KEY=ephemeral for
## a dry run; RELEASE_BINARIES_FROM=DIR takes other architectures' binaries.
## release-rehearsal: dist/ pushed as the release workflow pushes it, to a
## registry on localhost (crane registry serve), and pulled back and verified.
.PHONY: release-binary release-artifacts release-rehearsal
release-binary: release-bin
	@mkdir -p dist
	@arch=$$(python3 hack/oci-image.py --check $(KCM_RS_RELEASE)) && \
	  cp $(KCM_RS_RELEASE) dist/kcm-rs-$(VERSION)-linux-$$arch && \
	  python3 hack/release.py build-info --binary dist/kcm-rs-$(VERSION)-linux-$$arch \
	    --target $(RUST_TARGET) --out dist/kcm-rs-$(VERSION)-linux-$$arch.build-info.json
release-artifacts:
	@test -n "$(filter command line,$(origin VERSION))" || { echo "usage: make release-artifacts VERSION=x.y.z" >&2; exit 2; }
	MAKE="$(MAKE)" hack/release-artifacts.sh $(VERSION) $(WORKSPACE_VERSION)
release-rehearsal:
	@test -n "$(filter command line,$(origin VERSION))" || { echo "usage: make release-rehearsal VERSION=x.y.z" >&2; exit 2; }
	hack/release-rehearsal.sh $(VERSION)
print-image-repository:
	@echo $(IMAGE_REPOSITORY)
print-e2e-bin:
	@echo $(CURDIR)/$(E2E_BIN)

## pgo-profile: remakes pgo/kcm-rs.profdata.gz from training runs of an
## instrumented build (hack/pgo-profile.sh; about 20 minutes, needs llvm-profdata).
pgo-profile: controlplane
	hack/pgo-profile.sh

## release: the release binary ($(KCM_RS_RELEASE)) and, where a container
## engine exists, the image $(IMAGE), also tagged $(IMAGE)-$(COMMIT);
## without one, prints the buildx command and still succeeds.
release: release-bin
	@$(KCM_RS_RELEASE) --version
	@engine=""; \
	for e in docker podman; do \
	  if command -v $$e >/dev/null && $$e info >/dev/null 2>&1; then engine=$$e; break; fi; \
	done; \
	if [[ -z "$$engine" ]]; then \
	  echo "no working container engine: build the image elsewhere with" >&2; \
	  echo "  docker buildx build -f manifests/Dockerfile --platform linux/amd64,linux/arm64" \
	    "$(DOCKER_BUILD_ARGS) -t $(IMAGE) -t $(IMAGE)-$(COMMIT) --push ." >&2; \
	  exit 0; \
	fi; \
	DOCKER_BUILDKIT=1 $$engine build -f manifests/Dockerfile -t $(IMAGE) -t $(IMAGE)-$(COMMIT) \
	  $(DOCKER_BUILD_ARGS) . && \
	echo "built $(IMAGE) and $(IMAGE)-$(COMMIT)"

## abuse: the serving abuse tests against the binary and a real API server,
## one at a time (2,000 half-open connections and 1,000 bogus tokens; 1,100
## keep-alive connections with random tokens, >1 MiB headers, a 3 MiB body,
## the same flood against upstream KCM); then the authenticated tenant
## (crates/serving/tests/tenant_flood.rs: an unbound ServiceAccount's token on
## 1,100 and 5,000 HTTP/1.1 connections and over HTTP/2 with h2load, scrapes
## and probes timed, SubjectAccessReviews counted, against kcm-rs and KCM;
## about 10 min; the table in bench/results/abuse/tenant-flood.md; the
## release binary when built, KCM_RS_BIN for another); out of make test for
## its budget and its latency bounds, which want an idle machine. Then the
## hostile tenant (e2e/tests/hostile_tenant.rs, about 2.5 min): a namespace's
## ServiceAccount tries to stop, slow or steer the controllers for another.
.PHONY: abuse
abuse: controlplane
	$(CARGO) test -p kcm-serving --test abuse -- --ignored --nocapture --test-threads=1
	@command -v h2load >/dev/null || { echo "error: h2load is missing (apt-get install nghttp2-client)" >&2; exit 1; }
	bin=$${KCM_RS_BIN:-$$( [[ -x $(KCM_RS_RELEASE) ]] && echo $(CURDIR)/$(KCM_RS_RELEASE) )}; \
	  KCM_RS_BIN=$$bin ABUSE_RESULTS=$(CURDIR)/bench/results/abuse \
	  $(CARGO) test -p kcm-serving --test tenant_flood -- --ignored --nocapture
	$(CARGO) test -p kcm-e2e --test hostile_tenant -- --ignored --nocapture

## beside-kcm-versions: the beside-KCM admission policy on the 1.35 and 1.36
## control planes (make test runs it on 1.34 and 1.37; these need their own
## cold Go builds, so they stay out of it).
.PHONY: beside-kcm-versions
beside-kcm-versions:
	@for v in 1.35 1.36; do e2e/harness/build.sh $(E2E_BIN) --version $$v || exit 1; done
	$(CARGO) test -p kcm-e2e --test beside_kcm_policy -- --include-ignored

## kind-up: a kind cluster (K8S_VERSION=1.34..1.37, default 1.34) with KCM's
## four controllers off, the image loaded,
## the manifests applied, waiting for the Lease holder and the sample Job.
kind-up: image
	hack/kind-up.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## unit: every crate's unit and doc tests (no API server).
## e2e: every crate's integration tests on the real API server but the
## differential suites (hack/test-targets.sh lists them).
## differential: every controller's differential suite against upstream KCM of
## KCM_E2E_K8S_VERSION (default 1.34). `make test` is the union of the three
## (plus lint, and the differential suites again on 1.37).
unit:
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test --workspace --doc

e2e: controlplane
	$(CARGO) test $$(hack/test-targets.sh e2e)

differential: controlplane
	$(CARGO) test $$(hack/test-targets.sh differential)

## controlplane: build (or reuse) kube-apiserver and kube-controller-manager.
controlplane:
	e2e/harness/build.sh $(E2E_BIN)

## controlplane-versions: the same for every supported Kubernetes version
## (K8S_VERSIONS; 1.34 in target/e2e-bin, the others in target/e2e-bin/1.N).
## test-versions: each controller's differential suite against that version's
## API server and upstream KCM (KCM_E2E_K8S_VERSION=1.N), every version run,
## then upstream's four integration suites against KCM and kcm-rs of each
## version (TEST_UPSTREAM=no skips them), then the gate strings against each
## version's KCM; a table in target/test-versions/report.md.
K8S_VERSIONS ?= 1.34 1.35 1.36 1.37
# The gate-string comparison with upstream KCM of each version (make test runs
# it for 1.34 and 1.37 with the other tests, so it passes TEST_GATES=no).
TEST_GATES ?= yes
# Upstream's four integration suites against KCM and kcm-rs of each version,
# failing on a leaf KCM passes and kcm-rs does not (suites.sh bar); tables in
# target/upstream-suites/report.
TEST_UPSTREAM ?= yes
DIFFERENTIAL_CRATES := -p kcm-job -p kcm-podgc -p kcm-taint-eviction -p kcm-disruption
.PHONY: controlplane-versions test-versions
controlplane-versions:
	@for v in $(K8S_VERSIONS); do e2e/harness/build.sh $(E2E_BIN) --version $$v || exit 1; done

test-versions: controlplane-versions
	@mkdir -p target/test-versions; failed=""; for v in $(K8S_VERSIONS); do \
	  echo "== differential suites on Kubernetes $$v" >&2; \
	  for c in $(filter-out -p,$(DIFFERENTIAL_CRATES)); do \
	    KCM_E2E_K8S_VERSION=$$v $(CARGO) test -p $$c --test differential 2>&1 \
	      | tee target/test-versions/$$v-$$c.log; \
	    [[ $${PIPESTATUS[0]} == 0 ]] || failed+=" $$v/$$c"; \
	  done; \
	done; \
	if [[ "$(TEST_UPSTREAM)" == yes ]]; then \
	  $(CARGO) build -p kcm-rs || exit 1; \
	  for v in $(K8S_VERSIONS); do \
	    echo "== upstream's suites on Kubernetes $$v" >&2; \
	    SHARDS=$(UPSTREAM_SHARDS) e2e/upstream-suites/suites.sh all "$$v" "kcm kcm-rs" || true; \
	    for s in job podgc disruption node; do \
	      e2e/upstream-suites/suites.sh bar $$v $$s || failed+=" $$v/upstream-$$s"; \
	    done; \
	  done; \
	  e2e/upstream-suites/suites.sh report target/upstream-suites/report $(K8S_VERSIONS); \
	fi; \
	if [[ "$(TEST_GATES)" == yes ]]; then \
	  echo "== feature-gate strings on Kubernetes $(K8S_VERSIONS)" >&2; \
	  KCM_GATE_VERSIONS="$(K8S_VERSIONS)" $(CARGO) test -p kcm-e2e --test feature_gates -- --nocapture 2>&1 \
	    | tee target/test-versions/gates.log; \
	  [[ $${PIPESTATUS[0]} == 0 ]] || failed+=" gates"; \
	fi; \
	hack/versions-report.sh target/test-versions $(K8S_VERSIONS) > target/test-versions/report.md; \
	cat target/test-versions/report.md; \
	if [[ -n "$$failed" ]]; then echo "error: differential suites differ on Kubernetes$$failed" >&2; exit 1; fi

## chaos: the mixed workload calm, with 50 SIGKILLs of kcm-rs, with API faults
## at 10% of its requests (fault proxy), and with both; the invariants checked
## in each (not part of `test`); CHAOS_ARGS="--kills 5 --scale 8 --runs kills".
CHAOS_ARGS ?=
chaos: controlplane
	$(CARGO) build -p kcm-rs -p kcm-sim -p kcm-bench --bins
	target/debug/kcm-chaos --out bench/results/chaos/$$(date +%F).md $(CHAOS_ARGS)

## chaos-seeds: the calm run and kills + faults together (50 SIGKILLs, 10% API
## faults including requests delayed 2-10 s before they reach the API server)
## on each of CHAOS_SEEDS; one report per seed in bench/results/chaos/seeds/.
CHAOS_SEEDS ?= 1 2 3 4 5
chaos-seeds: controlplane
	$(CARGO) build -p kcm-rs -p kcm-sim -p kcm-bench --bins
	@mkdir -p bench/results/chaos/seeds; failed=""; for s in $(CHAOS_SEEDS); do \
	  target/debug/kcm-chaos --seed $$s --runs combined \
	    --out bench/results/chaos/seeds/seed-$$s.md $(CHAOS_ARGS) || failed+=" $$s"; \
	done; \
	if [[ -n "$$failed" ]]; then echo "error: chaos invariants broken on seeds$$failed" >&2; exit 1; fi

## handover: leader hand-overs (crash, SIGTERM, freeze) of kcm-rs and of
## upstream KCM's job-controller under the same test; prints the
## leadership table of docs/operating.md (about 8 minutes; not part of `test`).
handover: controlplane
	$(CARGO) test -p kcm-e2e --test leadership -- --ignored --nocapture --test-threads=1 handover_table

## bench: kcm-rs against upstream KCM (release builds; not part of `test`).
## BENCH_ARGS="--scale 0.1 --only w1,w3" for a shorter run; see bench/src/.
## KCM_RS_BIN=<binary> benchmarks that kcm-rs (e.g. a release's
## dist/kcm-rs-<version>-linux-amd64; default the release binary, built first);
## BENCH_K8S_VERSION=1.N runs the API server and upstream KCM of that minor
## (default 1.34; built first when missing).
BENCH_ARGS ?=
KCM_RS_BIN ?= $(KCM_RS_RELEASE)
BENCH_K8S_VERSION ?= 1.34
bench: $(if $(filter command line environment,$(origin KCM_RS_BIN)),,release-bin)
	e2e/harness/build.sh $(E2E_BIN) --version $(BENCH_K8S_VERSION)
	$(CARGO) build --release -p kcm-sim -p kcm-bench --bins
	@echo "kcm-rs: $(KCM_RS_BIN) ($$($(KCM_RS_BIN) --version), sha256 $$(sha256sum $(KCM_RS_BIN) | cut -c1-16)); Kubernetes $(BENCH_K8S_VERSION)"
	KCM_E2E_K8S_VERSION=$(BENCH_K8S_VERSION) target/release/kcm-bench --kcm-rs $(KCM_RS_BIN) $(BENCH_ARGS)

## bench-decode: JSON against protobuf decoding of W4's pods into the cache
## type (bytes and ns per pod; kcm-rs alone).
bench-decode: controlplane
	$(CARGO) build --release -p kcm-bench --bin kcm-decode-bench
	target/release/kcm-decode-bench $(BENCH_ARGS)

## fuzz: every parser of untrusted bytes under cargo-fuzz (crates/fuzz:
## protobuf lists and watch frames, pods in protobuf and JSON, kubeconfigs,
## --feature-gates and other flag values, explain/lint manifests), FUZZ_RUNS
## executions per target from the committed seeds; needs nightly, installs
## cargo-fuzz when missing; the table goes to bench/results/fuzz/README.md
## (not part of `test`, which runs a stable smoke of each target).
FUZZ_RUNS ?= 200000
.PHONY: fuzz
fuzz:
	FUZZ_RUNS=$(FUZZ_RUNS) hack/fuzz.sh

fmt:
	$(CARGO) fmt --all

clean-run:
	rm -rf .run

## upstream-tests: upstream's own integration tests of the four controllers
## (test/integration/{job,podgc,disruption,node} of the pinned
## k8s.io/kubernetes, copied to target/upstream-suites and patched at build
## time) against upstream KCM and against kcm-rs as external processes, on
## K8S_VERSIONS (default 1.34 1.37 for this target); tables in
## target/upstream-suites/report (UPSTREAM_SUITES="job podgc" for fewer).
## upstream-tests-job: the cheap variant, the Job suite against kcm-rs on
## UPSTREAM_JOB_VERSION (default 1.34); fails when a leaf's result is not
## pass or what e2e/upstream-suites/expected/ lists for it (part of test).
UPSTREAM_K8S_VERSIONS = $(if $(filter command line environment,$(origin K8S_VERSIONS)),$(K8S_VERSIONS),1.34 1.37)
UPSTREAM_SUITES ?=
UPSTREAM_JOB_VERSION ?= 1.34
# Test processes per suite at once (suites.sh SHARDS): the leaves mostly wait,
# so 5 take about a fifth of the Job suite's 13 minutes on 2 cores.
UPSTREAM_SHARDS ?= 5
.PHONY: upstream-tests upstream-tests-job
upstream-tests:
	@for v in $(UPSTREAM_K8S_VERSIONS); do e2e/harness/build.sh $(E2E_BIN) --version $$v || exit 1; done
	$(CARGO) build -p kcm-rs
	SHARDS=$(UPSTREAM_SHARDS) e2e/upstream-suites/suites.sh all "$(UPSTREAM_K8S_VERSIONS)" "kcm kcm-rs" $(UPSTREAM_SUITES) || true
	e2e/upstream-suites/suites.sh report target/upstream-suites/report $(UPSTREAM_K8S_VERSIONS)
	@cat target/upstream-suites/report/summary.md

upstream-tests-job:
	$(CARGO) build -p kcm-rs
	e2e/upstream-suites/suites.sh prepare $(UPSTREAM_JOB_VERSION)
	SHARDS=$(UPSTREAM_SHARDS) e2e/upstream-suites/suites.sh run $(UPSTREAM_JOB_VERSION) kcm-rs job || true
	e2e/upstream-suites/suites.sh check $(UPSTREAM_JOB_VERSION) kcm-rs job

## upstream-e2e: upstream's e2e tests (e2e.test of each minor: [sig-apps] Job,
## [sig-apps] DisruptionController, [sig-node] NoExecuteTaintManager, pod GC)
## on the real node (root), against KCM and against kcm-rs, one node session
## (the node's lock held) per minor, suite and implementation; on
## UPSTREAM_E2E_VERSIONS (default 1.34..1.37), UPSTREAM_E2E_SUITES (default
## job disruption taint-eviction podgc); the job and disruption suites in
## UPSTREAM_E2E_PROCS ginkgo processes (default 3, as upstream's CI; 1: serial);
## tables in target/upstream-e2e/report;
## fails when a spec KCM passed did not pass for kcm-rs. Commits nothing.
UPSTREAM_E2E_VERSIONS ?= 1.34 1.35 1.36 1.37
UPSTREAM_E2E_SUITES ?= job disruption taint-eviction podgc
UPSTREAM_E2E_PROCS ?= 3
.PHONY: upstream-e2e
upstream-e2e:
	CARGO="$(CARGO)" PROCS="$(UPSTREAM_E2E_PROCS)" e2e/upstream-e2e/run.sh all "$(UPSTREAM_E2E_VERSIONS)" "kcm kcm-rs" $(UPSTREAM_E2E_SUITES) || true
	e2e/upstream-e2e/run.sh report target/upstream-e2e/report $(UPSTREAM_E2E_VERSIONS)
	@cat target/upstream-e2e/report/summary.md
	@failed=""; for v in $(UPSTREAM_E2E_VERSIONS); do for s in $(UPSTREAM_E2E_SUITES); do \
	  e2e/upstream-e2e/run.sh bar $$v $$s || failed+=" $$v/$$s"; done; done; \
	  if [ -n "$$failed" ]; then echo "upstream-e2e: kcm-rs missed specs KCM passed in:$$failed" >&2; exit 1; fi

## realnode-up: the local control plane plus one real node on this machine
## (containerd + runc, the CNI bridge, kubelet, kube-scheduler; KCM's helper
## controllers, never kcm-rs's four) of K8S_VERSION (1.34..1.37, default
## 1.34); needs root; runs until realnode-down, which removes everything it
## made and then checks that nothing is left (realnode-check). docs/real-node.md.
## realnode-test: the node's own test (real pods exit 42, serve a probe, see
## no default route; teardown leaves nothing), on each of K8S_VERSIONS.
REALNODE_VERSION = $(or $(K8S_VERSION),1.34)
.PHONY: realnode-up realnode-down realnode-check realnode-test
realnode-test:
	@for v in $(or $(K8S_VERSIONS),$(REALNODE_VERSION)); do e2e/realnode/selftest.sh --version $$v || exit 1; done
realnode-up:
	e2e/realnode/node.sh up --version $(REALNODE_VERSION)
realnode-down:
	e2e/realnode/node.sh down
	e2e/realnode/check-clean.sh
realnode-check:
	e2e/realnode/check-clean.sh
## realnode-session CMD='...': waits for the node's lock (/run/kcm-rs-node.lock),
## brings the node of K8S_VERSION up, runs CMD with KUBECONFIG, K8S_VERSION,
## NODE_NAME and KUBECTL exported, and always tears down (realnode-down).
.PHONY: realnode-session
realnode-session:
	@test -n "$$CMD" || { echo "usage: make realnode-session CMD='...' [K8S_VERSION=1.N]" >&2; exit 2; }
	e2e/realnode/node.sh session --version $(REALNODE_VERSION) -- bash -c "$$CMD"

## run-real: `make run` on a real node (root): the local control plane plus
## the real node of K8S_VERSION (realnode-up), kcm-rs, and the example Jobs as
## real containers (their pods exit 42, exit 1, get evicted through the
## Eviction API); Ctrl-C tears it all down and checks nothing is left.
## run-real-examples: the same until every Job has finished, one line per Job.
## run-real-test: the test of run-real-examples (e2e/tests/make_run_real.rs).
.PHONY: run-real run-real-examples run-real-test
run-real:
	CARGO="$(CARGO)" e2e/realnode/run.sh --version $(REALNODE_VERSION) $(DEV_ARGS) -- $(ARGS)
run-real-examples:
	$(MAKE) --no-print-directory run-real DEV_ARGS="--exit-when-done $(DEV_ARGS)"
run-real-test:
	$(CARGO) test -p kcm-e2e --test make_run_real -- --ignored --nocapture

## realnode-kep: KEP-3329 on the real node with every real source of
## DisruptionTarget (scheduler preemption, Eviction API under a PDB, NoExecute
## taint, pod GC of a deleted node, kubelet preemption; and the kubelet's
## ephemeral-storage eviction, which sets none), kcm-rs then KCM's four.
## realnode-termination: real graceful termination (FailJob while siblings
## ignore SIGTERM, podReplacementPolicy, activeDeadlineSeconds, suspend), the
## same way. realnode-scenarios: both. Each minor of K8S_VERSIONS (default
## 1.34 1.37) in its own node session (takes the node's lock); tables in
## bench/results/realnode-kep/. e2e/realnode/scenarios/run.sh, docs/real-node.md.
REALNODE_KEP_VERSIONS = $(or $(K8S_VERSIONS),1.34 1.37)
.PHONY: realnode-kep realnode-termination realnode-scenarios
realnode-kep:
	CARGO="$(CARGO)" e2e/realnode/scenarios/run.sh --versions "$(REALNODE_KEP_VERSIONS)" kep
realnode-termination:
	CARGO="$(CARGO)" e2e/realnode/scenarios/run.sh --versions "$(REALNODE_KEP_VERSIONS)" termination
realnode-scenarios:
	CARGO="$(CARGO)" e2e/realnode/scenarios/run.sh --versions "$(REALNODE_KEP_VERSIONS)" all

## realnode-install-test: kcm-rs installed in pods on the real node of
## K8S_VERSION (root; e2e/tests/realnode_install/), one node session each:
## `kubectl apply -k manifests/` replacing KCM's controllers then upgrade A -> B
## -> A while Jobs run; the Helm chart in kcm-system scraped by Prometheus
## (KcmRsDown fired and cleared); manifests/beside-kcm beside a complete KCM.
## Figures in bench/results/in-cluster/. TESTS=<name> runs one.
.PHONY: realnode-install-test
realnode-install-test:
	CARGO="$(CARGO)" e2e/realnode/installs/build.sh
	KCM_INSTALL_BUILT=1 K8S_VERSION=$(REALNODE_VERSION) $(CARGO) test -p kcm-e2e --test realnode_install -- --ignored --nocapture --test-threads=1 $(TESTS)
