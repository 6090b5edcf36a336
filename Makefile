# kcm-rs developer entry points. The README documents `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
E2E_BIN := target/e2e-bin
ARGS ?=

.PHONY: run test lint unit e2e bench controlplane fmt clean-run

## run: kcm-rs against $KUBECONFIG / --kubeconfig in ARGS, else against a local
## control plane with simulated nodes and the sample Job.
run:
	@if [[ -n "$(KUBECONFIG)" || "$(ARGS)" == *--kubeconfig* ]]; then \
	  $(CARGO) build -p kcm-rs && \
	  if [[ "$(ARGS)" == *--kubeconfig* ]]; then exec target/debug/kcm-rs $(ARGS); \
	  else exec target/debug/kcm-rs --kubeconfig "$(KUBECONFIG)" $(ARGS); fi; \
	else \
	  e2e/harness/build.sh $(E2E_BIN) --with-kubectl && \
	  $(CARGO) build -p kcm-rs -p kcm-e2e --bins && \
	  exec target/debug/kcm-dev -- $(ARGS); \
	fi

## test: formatting, lints, unit tests and end-to-end tests on a real API server.
test: lint controlplane
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --lib --bins

e2e: controlplane
	$(CARGO) test -p kcm-e2e --tests

## controlplane: build (or reuse) kube-apiserver and kube-controller-manager.
controlplane:
	e2e/harness/build.sh $(E2E_BIN)

## bench: kcm-rs against upstream KCM (release builds; not part of `test`).
## BENCH_ARGS="--scale 0.1 --only w1,w3" for a shorter run; see e2e/src/bench/.
BENCH_ARGS ?=
bench: controlplane
	$(CARGO) build --release -p kcm-rs -p kcm-e2e --bins
	target/release/kcm-bench $(BENCH_ARGS)

fmt:
	$(CARGO) fmt --all

clean-run:
	rm -rf .run
