# cgdelegate build and test entry points. See README.md and docs/development.md.
GO        ?= go
PREFIX    ?= /usr/local
BINDIR    := bin
GOLANGCI_LINT_VERSION ?= v2.15.0
LINT      := $(shell $(GO) env GOPATH)/bin/golangci-lint
# promtool, Prometheus' rule checker, for the chart's PrometheusRule; kept
# by version in GOPATH/bin (prometheus is not in go.mod: too large).
PROMTOOL_VERSION ?= v0.316.0
PROMTOOL  := $(shell $(GO) env GOPATH)/bin/promtool-$(PROMTOOL_VERSION)
# The binaries' -version: git describe, or "dev" outside a git checkout.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/cgdelegate/cgdelegate/internal/version.linked=$(VERSION)

# The image reference `make image` writes; the chart's image.repository
# (contrib/helm/cgdelegate/values.yaml) names the same repository.
IMAGE_REPO ?= ghcr.io/cgdelegate/cgdelegate
# The image tag; the version label is always $(VERSION). The DaemonSet names
# :dev, so `make image IMAGE_TAG=dev` builds what it runs.
IMAGE_TAG ?= $(VERSION)
# Where `make install` puts the config the systemd unit reads.
CONFDIR   ?= /etc/cgdelegate

.PHONY: all build image release push install test vet lint unit promtool promtool-rules chart manifests profiles demo demo-inproc integration ingredients boots boots-extended boots-conformance bench bench-roundtrip bench-node clean tidy-check

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINDIR)/cgdelegate ./cmd/cgdelegate
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINDIR)/cgdelegate-hook ./cmd/cgdelegate-hook
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BINDIR)/cgdelegate-init ./cmd/cgdelegate-init

# An OCI image layout archive of the static binaries, written in Go without a
# container engine: ctr -n k8s.io images import bin/cgdelegate-image.tar, or
# podman load -i bin/cgdelegate-image.tar.
# The image is for the architecture the binaries are built for (GOARCH,
# default the host's).
image: build
	$(GO) run ./cmd/mkimage -o $(BINDIR)/cgdelegate-image.tar -arch $$($(GO) env GOARCH) -repo $(IMAGE_REPO) -tag $(IMAGE_TAG) -version $(VERSION) \
		$(BINDIR)/cgdelegate $(BINDIR)/cgdelegate-hook $(BINDIR)/cgdelegate-init

# A release (docs/releasing.md): `make release VERSION=vX.Y.Z` checks that
# VERSION is semver with a leading v, cross-builds the static binaries for
# every RELEASE_ARCHES (pure Go, CGO_ENABLED=0: no cross toolchain, works
# offline), and writes to $(DIST):
#   - cgdelegate-vX.Y.Z.oci.tar, an OCI image layout archive holding an
#     image index (one image per architecture) named $(IMAGE_REPO):vX.Y.Z;
#   - cgdelegate-X.Y.Z.tgz, the chart, version X.Y.Z, appVersion vX.Y.Z
#     (its default image tag).
# `make push VERSION=vX.Y.Z REGISTRY=host:port [PLAIN_HTTP=1]` uploads
# both: the index to $(PUSH_REPO):vX.Y.Z and the chart to
# $(CHART_REPO)/cgdelegate:X.Y.Z (an OCI artifact, `helm push`).
DIST           ?= dist
RELEASE_ARCHES ?= amd64 arm64
RELEASE_BINS   := cgdelegate cgdelegate-hook cgdelegate-init
RELEASE_IMAGE   = $(DIST)/cgdelegate-$(VERSION).oci.tar
RELEASE_CHART   = $(DIST)/cgdelegate-$(VERSION:v%=%).tgz
PUSH_REPO      ?= $(REGISTRY)/cgdelegate
# PLAIN_HTTP=1 (or true): HTTP to a registry without TLS; 0 or empty: HTTPS.
PLAIN          := $(filter 1 true yes,$(PLAIN_HTTP))
CHART_REPO     ?= oci://$(REGISTRY)/charts

release:
	@$(GO) run ./cmd/mkimage check-version '$(VERSION)'
	@for arch in $(RELEASE_ARCHES); do for bin in $(RELEASE_BINS); do \
		echo "build linux/$$arch $$bin"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/linux-$$arch/$$bin ./cmd/$$bin || exit 1; \
	done; done
	$(GO) run ./cmd/mkimage -o $(RELEASE_IMAGE) -repo $(IMAGE_REPO) -tag $(VERSION) -version $(VERSION) \
		$(foreach arch,$(RELEASE_ARCHES),$(foreach bin,$(RELEASE_BINS),$(arch)=$(DIST)/linux-$(arch)/$(bin)))
	$(GO) run ./cmd/mkimage chart -version $(VERSION) -o $(DIST) $(CHART)

push:
	@$(GO) run ./cmd/mkimage check-version '$(VERSION)'
	@test -n '$(REGISTRY)' || { echo "push: REGISTRY is empty: make push VERSION=$(VERSION) REGISTRY=host:port [PLAIN_HTTP=1]" >&2; exit 2; }
	@test -f $(RELEASE_IMAGE) -a -f $(RELEASE_CHART) || { echo "push: $(RELEASE_IMAGE) or $(RELEASE_CHART) missing: run make release VERSION=$(VERSION) first" >&2; exit 2; }
	$(GO) run ./cmd/mkimage push $(if $(PLAIN),-plain-http) $(RELEASE_IMAGE) $(PUSH_REPO):$(VERSION)
	CGO_ENABLED=0 $(GO) tool helm push $(RELEASE_CHART) $(CHART_REPO) $(if $(PLAIN),--plain-http)

# Installs the binaries and, if there is none yet, the default config at the
# path contrib/systemd/cgdelegate.service reads (an existing one is kept).
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(CONFDIR)
	install -m 0755 $(BINDIR)/cgdelegate $(BINDIR)/cgdelegate-hook $(BINDIR)/cgdelegate-init $(DESTDIR)$(PREFIX)/bin/
	test -e $(DESTDIR)$(CONFDIR)/config.yaml || install -m 0644 contrib/config.yaml $(DESTDIR)$(CONFDIR)/config.yaml

vet:
	$(GO) vet ./...

# PROMTOOL: the chart's alerts are checked by promtool in
# TestChartRulesPromtool (skipped without it, but not under CI).
unit: export PROMTOOL := $(PROMTOOL)
unit:
	$(GO) test -race -count=1 ./...

# promtool is built from the Go module proxy (github.com/prometheus/prometheus,
# outside this module's go.mod) once per version, into $(GOPATH)/bin (made
# here: a fresh HOME has none before lint installs golangci-lint; a cold CI
# run failed on that, 2026-11-29). Like lint: when the proxy
# is unreachable a developer machine goes on without it (the test skips),
# and CI (CI=true) fails. remove_all_sd leaves out the cloud service
# discoveries (their SDKs are most of the build; promtool checks rules
# without them). A cold build (empty build cache, modules downloaded) took
# 11m59s on the shared 2-core test machine under load 12 to 17: 7m17s of
# CPU (6m15s user, 1m03s sys), so about 3.5 minutes on the two cores alone.
promtool:
	@if [ ! -x $(PROMTOOL) ]; then \
		tmp=$$(mktemp -d) && \
		if GOBIN=$$tmp CGO_ENABLED=0 $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION); then \
			mkdir -p $(dir $(PROMTOOL)) && mv $$tmp/promtool $(PROMTOOL) && rm -rf $$tmp || { rm -rf $$tmp; echo "promtool: could not be put at $(PROMTOOL)" >&2; exit 1; }; \
		else \
			rm -rf $$tmp; \
			if [ -n "$$CI" ]; then echo "promtool: could not be built from the module proxy; CI never skips the alert rules' check" >&2; exit 1; fi; \
			echo "promtool: could not be built from the module proxy; TestChartRulesPromtool skips (CI fails here)"; \
		fi; \
	fi

# The chart's PrometheusRule through promtool check rules and test rules
# (integration/internal/manifests/testdata/alerts_test.yaml); make unit runs
# the same test.
promtool-rules: promtool
	PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -run '^(TestChartRulesPromtool|TestChartRulesOnLiveScrape|TestChartAlertsTested)$$' ./integration/internal/manifests/

# golangci-lint is built from the Go module proxy when it can be; when the
# proxy is unreachable the lint step is skipped with a message on a developer
# machine, and fails under CI (CI=true): CI never runs without lint.
lint:
	@if [ ! -x $(LINT) ]; then \
		$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) || \
		{ if [ -n "$$CI" ]; then echo "lint: golangci-lint could not be installed from the module proxy; CI never skips lint" >&2; exit 1; fi; \
		  echo "lint: golangci-lint could not be installed from the module proxy; skipping (CI fails here)"; exit 0; }; \
	fi; \
	if [ -x $(LINT) ]; then $(LINT) run ./...; fi

# The Helm chart: lint it strictly and render it with its default values.
# helm is a Go tool of this module (go.mod's tool directive): `go tool helm`
# builds it from the module proxy the first time, with nothing to install.
# Before unit in test, so the tests that run helm find it built.
CHART := contrib/helm/cgdelegate
# helm is always built without cgo (CGO_ENABLED=0): one build in the Go
# cache for this target, the tests that render the chart and the VM's
# guest, which has no C library in its busybox boots.
chart:
	CGO_ENABLED=0 $(GO) tool helm lint --strict $(CHART)
	CGO_ENABLED=0 $(GO) tool helm template cgdelegate $(CHART) --namespace kube-system >/dev/null

# The plain manifests (contrib/kubernetes/*.yaml) are the chart rendered with
# its default values; integration/internal/manifests' tests fail when they
# differ from what this writes.
manifests:
	$(GO) run ./integration/cmd/manifests

test: vet chart promtool unit lint

# The engine pods' seccomp profiles (internal/lsmprofile/engines-*.json),
# regenerated from containerd's RuntimeDefault by internal/lsmprofile/gen,
# a module of its own (this module does not require containerd); then its
# tests: the committed files are what it writes, and the AppArmor profile
# is containerd's default with the documented changes. Not part of test:
# it downloads containerd's module the first time.
profiles:
	$(GO) generate ./internal/lsmprofile
	cd internal/lsmprofile/gen && $(GO) test -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The CreateContainer round trip in process (BenchmarkCreateContainer,
# docs/performance.md): every case once per round, ROUNDS rounds
# (interleaved: load elsewhere hits every case alike), then benchstat
# compares the cases of the run, each against mount-options-only (the
# answer of containerd/nri's writable-cgroups sample plugin). benchstat runs
# at a pinned version with go run; it is not in go.mod.
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da
ROUNDS    ?= 10
BENCH_OUT ?= $(BINDIR)/bench-roundtrip.txt
bench-roundtrip:
	@mkdir -p $(BINDIR)
	$(GO) test -c -o $(BINDIR)/inproc.test ./integration/internal/inproc/
	@: > $(BENCH_OUT)
	@for i in $$(seq $(ROUNDS)); do echo "bench-roundtrip: round $$i of $(ROUNDS)" >&2; \
		(cd integration/internal/inproc && $(CURDIR)/$(BINDIR)/inproc.test -test.run '^$$' -test.bench 'BenchmarkCreateContainer' -test.cpu 1) >> $(BENCH_OUT) || exit 1; \
	done
	$(GO) run golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION) \
		-col '/plugin@(mount-options-only part-mount part-mount-env part-mount-hook fixed-writable-adjustment cgdelegate-writable metrics-cgdelegate-writable noop cgdelegate-default metrics-cgdelegate-default)' $(BENCH_OUT)

# The demo boots one VM (integration/vm TestDemo) and tells what cgdelegate
# did there, from real observations; it fails if any step was not observed.
# Each step says on stderr when it starts and how long it took: from a fresh
# clone the first run spends minutes building before the VM boots.
demo:
	@echo "make demo: host packages (integration/vm/install-deps.sh)..." >&2
	@start=$$(date +%s); bash integration/vm/install-deps.sh >/dev/null && \
		echo "make demo: host packages ready in $$(( $$(date +%s) - start )) s" >&2
	@echo "make demo: compiling the VM harness (integration/vm; a fresh clone downloads its Go modules first)..." >&2
	@start=$$(date +%s); $(GO) test -tags integration_vm -c -o $(BINDIR)/integration-vm.test ./integration/vm/ && \
		echo "make demo: VM harness compiled in $$(( $$(date +%s) - start )) s" >&2
	@CGD_DEMO=1 ./$(BINDIR)/integration-vm.test -test.run '^TestDemo$$' -test.count=1 -test.timeout 30m

# The node bench (not part of CI, make integration or make boots):
# boots one VM (integration/vm TestBenchNode, variant.BenchVariant) and prints
# the exclusivity lag, the pinned pod start, the plugin's cost and its restart
# with 0, 50, 100 and 250 node-shared containers (the kubelet anchor up to
# 100), after the in-process NRI round trip (CPU per CreateContainer, a
# no-op plugin against cgdelegate); CGD_BENCH_SIZES=0,10
# picks the sizes. It fails only when a measurement could not be made or a
# correctness check failed (docs/performance.md). About half an hour under
# TCG on a quiet 2-core machine.
bench-node:
	@echo "bench-node: the NRI round trip of CreateContainer in process (integration/internal/inproc), before the VM:"
	@$(GO) test -run '^$$' -bench 'BenchmarkCreateContainer/^plugin=(noop|cgdelegate-default|cgdelegate-writable)$$' -count 5 -cpu 1 ./integration/internal/inproc/ | grep '^Benchmark'
	@bash integration/vm/install-deps.sh >/dev/null
	@$(GO) test -tags integration_vm -c -o $(BINDIR)/integration-vm.test ./integration/vm/
	@CGD_BENCH=1 ./$(BINDIR)/integration-vm.test -test.run '^TestBenchNode$$' -test.count=1 -test.timeout 120m

# The quick demo: the real plugin over a real NRI socket, in process, on an
# embedded fake host (no VM).
demo-inproc: build
	$(GO) run ./integration/cmd/demo

# The VM suite (integration/vm): installs its host packages if missing
# (idempotent), then builds, boots and reports every scenario, in two steps
# with their own time limits:
#   - ingredients: kernel, containerd, runc, kubelet, the cluster's
#     control plane and etcd, systemd root filesystem, cached by version
#     (15.5 min cold beside make test on a quiet 2-core machine with
#     transparent huge pages always, as in CI, before the control plane,
#     which adds about 5.5 min after the kubelet; about 30 s when cached);
#   - boots: every variant, one VM at a time. Two at once are slower on two
#     cores: each TCG guest keeps its host core busy when another competes.
# CI (.ci/run) builds the ingredients while `make test` runs.
integration: ingredients boots boots-extended boots-conformance

ingredients:
	bash integration/vm/install-deps.sh
	CGD_INGREDIENTS=1 $(GO) test -tags integration_vm -count=1 -v -run '^TestIngredients$$' -timeout 80m ./integration/vm/

# The boots' limit: CI's suite (variant.Suite, then eight boots, six since
# 2026-11-29) took 31m42s in a cold CI run on a quiet 2-core machine on
# 2026-11-28, 57 minutes before what moved to boots-extended
# (docs/development.md has the measurements); 80 leaves room on a slower
# machine.
boots:
	bash integration/vm/install-deps.sh
	$(GO) test -tags integration_vm -count=1 -v -timeout 80m ./integration/vm/

# The checks CI leaves out (variant.Extended): the scale boot with the
# static pod start latency, the kubelet's pinning oracle on eight CPUs, the
# cluster boot with the second node, the user stories, the uninstall and
# the kubelet's pinning after it, the DaemonSet's pod as a static pod, and
# containerd 2.3; about 40 minutes under TCG, with containerd 2.3 and the
# engines image built here the first time (make ingredients builds CI's
# only).
boots-extended:
	bash integration/vm/install-deps.sh
	CGD_SUITE=extended $(GO) test -tags integration_vm -count=1 -v -timeout 90m -run '^TestVM$$' ./integration/vm/

# SIG Node's CRI validation suite (critest, built from the module proxy)
# against containerd without cgdelegate, with its shipped config and with
# CPU pinning, in one boot on the cgroupfs driver (variant.Conformance,
# docs/critest.md): it prints each pass's counts and fails on a difference
# docs/critest.md does not explain. About 19 minutes under TCG; not part
# of CI.
boots-conformance:
	bash integration/vm/install-deps.sh
	CGD_SUITE=conformance $(GO) test -tags integration_vm -count=1 -v -timeout 80m -run '^TestVM$$' ./integration/vm/

clean:
	rm -rf $(BINDIR) $(DIST)
