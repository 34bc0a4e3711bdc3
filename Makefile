# WorkloadSpread: build, test and demo entry points.
#
#   make demo   - local control plane + webhook + controller, a workload spread across zones
#   make test   - everything CI runs: fmt, clippy, unit tests, Wasm build, integration tests,
#                 images + the chart installed on a real kubelet node, the playground in
#                 headless Chromium, fuzzing
#   make playground-serve - the browser planner on http://127.0.0.1:8090/
#
# CARGO_TARGET_DIR is honoured (CI keeps it outside the repo as a cache).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
CLUSTER := e2e/cluster/cluster.sh
POLICY_WASM := policy/policy.wasm
## Each step of `make test` records when it began and ended where WS_PHASE_LOG names (.ci/run
## sets it and prints the table; scripts/phase.sh).
PHASE = @bash scripts/phase.sh
## The workspace's binaries as the integration tests build them. Every step that needs a
## dev binary builds them this one way: a build of only some packages unifies other
## features for the shared crates and compiles them (and the host) again. `make test` builds
## them as its tests do (`cargo test --no-run`, which links the same binaries into
## target/debug): `cargo build --bins` leaves out the dev-dependencies' features (tokio's
## test-util, k8s-openapi's schemars through core's `crd`), so it compiled k8s-openapi, kube,
## the tokio tree, the host and the controller a second time (issue #59).
BINS ?= $(CARGO) build --workspace --locked --bins

## Build profiles. What users run is built with `release` (host and controller, thin LTO) and
## `wasm` (the module: LTO, one codegen unit): `make images`, `make release`, `make policy`,
## `make bench`. `make test` builds the same code by the same recipes with faster profiles
## (issue #59): its images are made of the binaries its tests ran (`dev`: one build of
## wasmtime serves the tests and the images), its module and playground of `wasm-test`
## (the `wasm` profile without LTO and with 16 codegen units).
WASM_PROFILE ?= wasm
PLAYGROUND_PROFILE ?= playground
IMAGE_PROFILE ?= release

.PHONY: all build policy annotated-policy fmt fmt-check lint supply-chain unit integration kwctl-suite takeover test test-integration \
        cluster-up cluster-down cluster-status demo bench clean playground playground-serve \
        playground-test fuzz images push-images image-test release chart-e2e prebuild prebuild-wait

all: build policy

build:
	$(CARGO) build --workspace --locked

## The waPC policy module for wasm32-wasip1 (rustup target, or Debian's offline fallback).
policy:
	$(PHASE) begin "wasm module ($(WASM_PROFILE))"
	scripts/build-wasm.sh workloadspread-policy wasm32-wasip1 $(POLICY_WASM) $(WASM_PROFILE)
	$(PHASE) end "wasm module ($(WASM_PROFILE))"

## The module with its metadata embedded (what Kubewarden loads; `kwctl annotate` equivalent).
annotated-policy: policy
	$(PHASE) begin "annotate (host dev build)"
	$(BINS) -q
	$(TARGET_DIR)/debug/workloadspread-host annotate -m metadata.yml -u README.md \
	  -o policy/annotated-policy.wasm $(POLICY_WASM)
	$(PHASE) end "annotate (host dev build)"

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(PHASE) begin fmt
	$(CARGO) fmt --all -- --check
	$(PHASE) end fmt

lint:
	$(PHASE) begin clippy
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(PHASE) end clippy
	$(PHASE) begin "chart lint, alert rules"
	python3 e2e/chart/test_chart.py lint
	python3 e2e/chart/test_monitoring.py lint
	$(PHASE) end "chart lint, alert rules"

## Dependencies checked with cargo-deny (deny.toml): licences, bans (duplicates reported),
## sources; advisories when the RustSec database can be fetched (or WS_ADVISORY_DB names a
## copy), else said so loudly. Installed by scripts/install-prereqs.sh.
supply-chain:
	$(PHASE) begin cargo-deny
	bash scripts/supply-chain.sh
	$(PHASE) end cargo-deny

unit:
	$(PHASE) begin "unit tests (dev build)"
	$(CARGO) test --workspace --locked --lib --bins
	$(PHASE) end "unit tests (dev build)"

## Integration tests against a fresh local control plane, stopped afterwards even on failure.
## Every test binary runs (--no-fail-fast); the invariant monitor's verdict per scenario
## (highest occupancy of each subset against its maximum) is printed at the end.
integration: annotated-policy
	$(PHASE) begin "integration: cluster up, build, scenarios"
	@env="$$(bash $(CLUSTER) up)" || exit 1; eval "$$env"; \
	monitor_log="$$(mktemp)"; \
	trap 'echo "[integration] invariant monitor, highest occupancy per scenario:"; sort "$$monitor_log"; rm -f "$$monitor_log"; bash $(CLUSTER) down' EXIT; \
	$(BINS) && \
	WS_TEST_KUBECONFIG="$$KUBECONFIG" WS_REQUIRE_WASM=1 WS_MONITOR_LOG="$$monitor_log" \
	  $(CARGO) test --workspace --locked --no-fail-fast --test '*' && \
	python3 e2e/chart/test_chart.py apply
	$(PHASE) end "integration: cluster up, build, scenarios"
	$(MAKE) --no-print-directory kwctl-suite

TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
## The kwctl suite (e2e/policy.bats) against our host's kwctl-compatible `run`, and against
## kwctl itself where one is installed.
kwctl-suite: annotated-policy
	$(PHASE) begin "kwctl suite"
	$(BINS) -q
	KWCTL="$(TARGET_DIR)/debug/workloadspread-host" bats e2e/policy.bats
	@# Again behind kwctl 1.36's offline stderr (its Sigstore warning): the suite must judge
	@# stdout and the evaluation's log only.
	KWCTL=e2e/kwctl-offline.sh KWCTL_RUNNER="$(TARGET_DIR)/debug/workloadspread-host" bats e2e/policy.bats
	@if command -v kwctl >/dev/null; then KWCTL=kwctl bats e2e/policy.bats; \
	else echo "kwctl-suite: no kwctl installed here; ran against workloadspread-host run"; fi
	$(PHASE) end "kwctl suite"

# The crates' version: image tags and the chart's appVersion follow it.
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)
IMAGES_DIR ?= dist/images
## Where the release binaries are built (CI keeps them apart: `prebuild` builds them while
## the integration tests build and run theirs).
RELEASE_TARGET_DIR ?= $(TARGET_DIR)
## The images' binaries: `release` ones in RELEASE_TARGET_DIR, any other profile's (make test:
## dev) where the tests built theirs.
IMAGE_TARGET_DIR = $(if $(filter release,$(IMAGE_PROFILE)),$(RELEASE_TARGET_DIR),$(TARGET_DIR))
IMAGE_BIN_DIR = $(IMAGE_TARGET_DIR)/$(if $(filter dev test,$(IMAGE_PROFILE)),debug,$(IMAGE_PROFILE))
PRECOMPILED_DIR = $(IMAGE_TARGET_DIR)/precompiled-policy
## OCI image layouts of the host (with the annotated policy module, and that module
## precompiled for the host's engine: the host starts without compiling it) and the
## controller, built from the release binaries and Debian packages without a container
## engine (reproducible).
images: annotated-policy
	$(PHASE) begin "images ($(IMAGE_PROFILE) binaries)"
	CARGO_TARGET_DIR=$(IMAGE_TARGET_DIR) $(CARGO) build --profile $(IMAGE_PROFILE) --locked \
	  $(if $(filter release,$(IMAGE_PROFILE)),-p workloadspread-host -p workloadspread-controller,--workspace --bins)
	rm -rf $(PRECOMPILED_DIR)
	$(IMAGE_BIN_DIR)/workloadspread-host precompile --cache-dir none \
	  -o $(PRECOMPILED_DIR) policy/annotated-policy.wasm
	python3 scripts/build_image.py --name workloadspread-host --version $(VERSION) \
	  --binary $(IMAGE_BIN_DIR)/workloadspread-host \
	  --file policy/annotated-policy.wasm:/policy/policy.wasm \
	  $$(for f in $(PRECOMPILED_DIR)/*.cwasm; do printf -- '--file %s:/policy/precompiled/%s ' "$$f" "$${f##*/}"; done) \
	  --description "WorkloadSpread admission host (webhook, exact counters)" --out $(IMAGES_DIR)/host
	python3 scripts/build_image.py --name workloadspread-controller --version $(VERSION) \
	  --binary $(IMAGE_BIN_DIR)/workloadspread-controller \
	  --description "WorkloadSpread controller (status, deletion costs, rescheduling)" \
	  --out $(IMAGES_DIR)/controller
	$(PHASE) end "images ($(IMAGE_PROFILE) binaries)"

## Pushes both images as REGISTRY/host:VERSION and REGISTRY/controller:VERSION
## (e.g. REGISTRY=ghcr.io/workloadspread, the chart's default; SKOPEO_FLAGS=--dest-tls-verify=false
## for a plain-http registry).
REGISTRY ?=
SKOPEO_FLAGS ?=
push-images: images
	@[ -n "$(REGISTRY)" ] || { echo "push-images: set REGISTRY=host[:port][/path], e.g. REGISTRY=127.0.0.1:5000/workloadspread" >&2; exit 2; }
	for image in host controller; do \
	  skopeo copy $(SKOPEO_FLAGS) oci:$(IMAGES_DIR)/$$image:$(VERSION) docker://$(REGISTRY)/$$image:$(VERSION); \
	done

## Everything a release publishes into dist/release (policy module, image archives, packaged
## chart, metadata, SHA256SUMS); REGISTRY=... also pushes images and policy (PLAIN_HTTP=1).
release: images
	HOST_BIN=$(IMAGE_BIN_DIR)/workloadspread-host bash scripts/release.sh

## The chart installed for real: a cluster with a real kubelet node and a loopback registry
## (own state dir, stopped afterwards), the released images pushed, helm install/upgrade/uninstall.
CHART_CLUSTER_DIR ?= $(or $(TMPDIR),/tmp)/workloadspread-chart-cluster
chart-e2e: release
	$(PHASE) begin "chart e2e (real kubelet node)"
	bash e2e/cluster/test-real-node.sh
	@export WS_REAL_NODE=1 WS_CLUSTER_DIR="$(CHART_CLUSTER_DIR)"; \
	env="$$(bash $(CLUSTER) up)" || exit 1; eval "$$env"; \
	trap 'bash $(CLUSTER) down' EXIT; \
	python3 e2e/chart/test_install.py
	$(PHASE) end "chart e2e (real kubelet node)"

## The image builder's own tests (layout, reproducibility, runs as non-root, skopeo reads it).
image-test:
	$(PHASE) begin "image builder tests"
	python3 scripts/test_build_image.py
	$(PHASE) end "image builder tests"

## The browser planner (core via wasm-bindgen) into playground/dist.
playground:
	$(PHASE) begin "playground ($(PLAYGROUND_PROFILE))"
	WS_PLAYGROUND_PROFILE=$(PLAYGROUND_PROFILE) scripts/build-playground.sh
	$(PHASE) end "playground ($(PLAYGROUND_PROFILE))"

PLAYGROUND_PORT ?= 8090
## Serves the planner on localhost (static files only; works offline).
playground-serve: playground
	@echo "playground: open http://127.0.0.1:$(PLAYGROUND_PORT)/  (Ctrl-C to stop)"
	python3 -m http.server --bind 127.0.0.1 $(PLAYGROUND_PORT) -d playground/dist

## The page in headless Chromium, checked against the native planner.
playground-test: playground
	$(PHASE) begin "playground tests (headless Chromium)"
	$(BINS)
	npm ci --prefix playground --no-audit --no-fund --loglevel=error
	node --test playground/tests/locate.test.mjs
	node playground/tests/browser.mjs
	$(PHASE) end "playground tests (headless Chromium)"

FUZZ_SECONDS ?= 20
## Every cargo-fuzz target for FUZZ_SECONDS each (stable toolchain with RUSTC_BOOTSTRAP=1; seeds from fixtures).
fuzz:
	$(PHASE) begin "fuzz smoke"
	bash scripts/fuzz.sh $(FUZZ_SECONDS)
	$(PHASE) end "fuzz smoke"

## The background builds start first: the Go builds of the control plane (and everything
## else prebuild.sh lists) take the cores the steps in front leave idle.
test: prebuild fmt-check lint supply-chain unit image-test integration chart-e2e playground-test fuzz prebuild-wait
	@bash scripts/phase.sh report
	@echo "make test: all checks passed"
test: export WASM_PROFILE := wasm-test
test: export PLAYGROUND_PROFILE := wasm-test
test: export IMAGE_PROFILE := dev
test: export BINS := $(CARGO) test --workspace --locked --no-run --test '*'

## The compile-heavy work that later steps need (the control plane's Go builds, the real
## node's kubelet, the fuzz targets, wasm-bindgen) runs in the background at the lowest
## priority from the start of `make test`, on the cores its steps leave idle; `prebuild-wait`
## says how it went (scripts/prebuild.sh). Nothing is skipped: the later steps run as before
## and find it built.
prebuild:
	bash scripts/prebuild.sh start

prebuild-wait:
	$(PHASE) begin "waiting for the background builds"
	bash scripts/prebuild.sh wait
	$(PHASE) end "waiting for the background builds"

cluster-up:
	bash $(CLUSTER) up

cluster-down:
	bash $(CLUSTER) down

cluster-status:
	bash $(CLUSTER) status

demo:
	bash scripts/demo.sh

## The take-over from OpenKruise and back (docs/operations.md, "Coming from OpenKruise") with
## OpenKruise v1.9.0's own manager, built from the Go module proxy (~7 min once, cached): not
## in `make test` (the build would not fit CI's budget); its refuse-to-fight half is. One test at
## a time: OpenKruise's pod webhook, while on, spreads the pods of every namespace.
takeover: annotated-policy
	@env="$$(bash $(CLUSTER) up)" || exit 1; eval "$$env"; \
	trap 'bash $(CLUSTER) down' EXIT; \
	manager="$$(bash e2e/kruise/kruise.sh build)" && manifests="$$(bash e2e/kruise/kruise.sh manifests)" && \
	$(BINS) && \
	WS_TEST_KUBECONFIG="$$KUBECONFIG" WS_REQUIRE_WASM=1 WS_KRUISE_MANAGER="$$manager" WS_KRUISE_MANIFESTS="$$manifests" \
	  $(CARGO) test --locked -p workloadspread-testkit --test openkruise -- --include-ignored --nocapture --test-threads=1

## Criterion benchmarks of every crate that has them (figures go to docs/benchmarks.md).
## Regenerates docs/benchmarks.md (starts and stops a local control plane).
bench:
	bash scripts/bench.sh

clean:
	$(CARGO) clean
	rm -f $(POLICY_WASM)
