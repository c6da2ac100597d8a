# SPDX-License-Identifier: Apache-2.0
#
# make run   build the mock plugin (and the CUDA / Metal plugin where it
#            builds) and build/gpurt, then run `gpurt probe` and
#            `gpurt bench --quick`.
#            The CUDA plugin is built only where nvcc is installed (or was
#            fetched before); `make run CUDA=1` fetches it from PyPI.
# make generate  regenerate core/internal/bind/zslots.go and abi/zsizes.go
#            from abi/gpurt.h (go run ./internal/cmd/genbind).
# make test  everything that runs without a GPU and without nvcc: that the
#            generated files are what the generator makes (gen-check),
#            gofmt, go vet, the four CGO_ENABLED=0 cross-builds, the C ABI
#            suite on the mock (plain, ASan+UBSan, TSan), the Go tests with
#            -race -short (every package but plugins/cuda, the ABI layout
#            check and the README-commands test included)
#            and once more in full with cgo off (core, conform, cmd), the modules of their own (metrics,
#            internal/cmd/decodeplot; scripts/mod_check.sh: what a module
#            importing only core compiles) and the make-dist check
#            (scripts/dist_check.sh). Cold: 16 CPU-minutes (8+ minutes on 2 cores).
# make test-cuda  the CUDA plugin built as shipped, with FlashInfer's and
#            CUTLASS's adapters (scripts/build_cuda.sh --ci, which fetches
#            nvcc from PyPI; the adapters' objects are cached in
#            ~/.cache/gpurt/nvcc), and the Go tests that need nvcc or the
#            CUDA headers but no GPU. .ci/run runs make test, then this.
# make dist  one reproducible archive per platform into dist/, named by
#            version (scripts/version.sh).

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := run

GO ?= go
BUILD ?= build
TEST_TIMEOUT ?= 15m
# The version and commit stamped into build/gpurt (gpurt version).
VERSION := $(shell bash scripts/version.sh 2>/dev/null || echo unknown)
COMMIT := $(shell bash scripts/version.sh --commit 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# The modules of their own (each with its go.mod), tested by make test:
# llm (its safetensors parser), the examples (llm, a progress bar, x/term),
# internal/tinyckpt (the tests' checkpoint writer), metrics (Prometheus),
# decodeplot (gonum/plot); none of theirs is in the root module's go.mod.
SUBMODULES := internal/tinyckpt llm examples metrics internal/cmd/decodeplot
# Packages make test runs with -race: all but the CUDA plugin's (make test-cuda).
CUDA_PKGS := ./plugins/cuda
CROSS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
UNAME := $(shell uname -s)

.PHONY: run build mock cuda metal gpurt test test-cuda generate gen-check fmt-check vet cross abi-test abi-suite \
        go-test go-test-nocgo mod-test tidy cuda-check cgobench clean dist dist-check gpu-artifacts decodeplot

run: build
	@echo "== $(BUILD)/gpurt probe"
	$(BUILD)/gpurt probe
	@echo "== $(BUILD)/gpurt bench --quick"
	$(BUILD)/gpurt bench --quick

build: mock cuda metal gpurt cgobench
	@# the loader refuses folders and plugins that group or others can write
	chmod go-w $(BUILD) $(BUILD)/libgpurt_* 2>/dev/null || true

# The cgo dispatch baseline (a test tool, never shipped): gpurt bench runs it
# from beside build/gpurt. Build tag cgobench keeps it out of ./... (TestNoCgo).
cgobench:
	@echo "== $(BUILD)/gpurt-cgobench (cgo; the dispatch, launch and GEMM host-cost baselines)"
	mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -tags cgobench -o $(BUILD)/gpurt-cgobench ./cmd/gpurt-cgobench || echo "note: gpurt-cgobench not built (needs a C compiler); gpurt bench runs without the cgo baseline"

mock:
	@echo "== mock plugin"
	mkdir -p $(BUILD) && chmod go-w $(BUILD)
	bash scripts/build_mock.sh $(BUILD)

# Optional plugins: built when their script exists and succeeds; a failure
# is reported and never fails `make run`.
cuda:
	@if [ -f scripts/build_cuda.sh ] && [ "$(UNAME)" = Linux ]; then \
	  echo "== cuda plugin (optional)"; \
	  bash scripts/build_cuda.sh $(if $(filter 1,$(CUDA)),,--no-install) $(BUILD) || echo "note: cuda plugin not built (scripts/build_cuda.sh failed); continuing with the others"; \
	fi

metal:
	@if [ -f scripts/build_metal.sh ] && [ "$(UNAME)" = Darwin ]; then \
	  echo "== metal plugin (optional)"; \
	  bash scripts/build_metal.sh $(BUILD) || echo "note: metal plugin not built (scripts/build_metal.sh failed); continuing with the others"; \
	fi

gpurt:
	@echo "== $(BUILD)/gpurt (CGO_ENABLED=0)"
	mkdir -p $(BUILD)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BUILD)/gpurt ./cmd/gpurt

# The plotting tool (its own module: gonum/plot stays out of gpurt's).
decodeplot:
	@echo "== $(BUILD)/decodeplot"
	mkdir -p $(BUILD)
	cd internal/cmd/decodeplot && $(GO) build -o $(abspath $(BUILD))/decodeplot .

# Each step's line starts with the time (UTC), so a log shows where the
# minutes go.
T = $$(date -u +%T)

test: gen-check fmt-check vet cross abi-suite go-test go-test-nocgo mod-test dist-check
	@echo "== [$(T)] make test: all passed (the CUDA plugin's build and tests: make test-cuda)"

# What needs nvcc (fetched from PyPI into .cuda-venv/ when none is
# installed, ~870 MB) but no GPU: the plugin built as shipped, FlashInfer's
# and CUTLASS's adapters included (minutes the first time; their objects
# are then cached in $$GPURT_NVCC_CACHE or ~/.cache/gpurt/nvcc), its
# exports and dependencies, its probe without a driver; then the tests that
# compare against the CUDA headers and nvcc's output once they are here.
test-cuda:
	@echo "== [$(T)] go test ./plugins/cuda (scripts/build_cuda.sh --ci: the plugin with its adapters)"
	$(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) $(CUDA_PKGS) 2>&1 | grep -v '^=== \(RUN\|PAUSE\|CONT\)'
	@echo "== [$(T)] the tests that use nvcc and the CUDA headers (decodestep's PTX, the cgo baseline's declarations)"
	$(GO) test -count=1 -v -run 'TestPTXUpToDate|TestRawDeclarationsMatchTheHeaders' ./bench/decodestep ./bench/cgobaseline 2>&1 | \
	  grep -v '^=== \(RUN\|PAUSE\|CONT\)'
	@echo "== [$(T)] make test-cuda: all passed"

generate:
	@echo "== go run ./internal/cmd/genbind"
	$(GO) run ./internal/cmd/genbind

# Regenerating must change nothing (as x/sys checks with git diff, but
# comparing in memory, so it also holds in a tree with uncommitted edits).
gen-check:
	@echo "== [$(T)] go run ./internal/cmd/genbind -check (generated files up to date)"
	$(GO) run ./internal/cmd/genbind -check

fmt-check:
	@echo "== [$(T)] gofmt -l"
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './build/*' -not -path './.*' -not -path '*/testdata/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	@echo "== [$(T)] go vet ./..."
	$(GO) vet ./...
	CGO_ENABLED=1 $(GO) vet -tags cgobench ./cmd/gpurt-cgobench/

cross:
	@for t in $(CROSS); do \
	  echo "== [$(T)] CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} go build ./..."; \
	  CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build ./... ; \
	done

# The layout check alone (make test runs it within go-test).
abi-test:
	@echo "== [$(T)] abi layout check"
	$(GO) test -count=1 -run 'Layout' ./abi/

# The plugin-agnostic C ABI suite (csrc/test/abi_suite.c) on the mock, built
# plain, with ASan+UBSan and with TSan; scripts/gpu_check.sh runs it on CUDA.
abi-suite:
	@echo "== [$(T)] C ABI suite on the mock (plain, asan+ubsan, tsan)"
	bash scripts/abi_suite.sh --mock

# -short: the conformance suite quick, the stress test 100 rounds and
# core's data-volume tests (TestCopyPool, TestRoundTrips, TestStagedCopies:
# a race-instrumented loop over every byte) at their smaller sizes under
# the race detector; go-test-nocgo runs them in full, without it.
# Both passes use the mock plugin `make mock` built (GPURT_TEST_MOCK_PLUGIN:
# internal/testutil), not one build per test binary.
TEST_MOCK = GPURT_TEST_MOCK_PLUGIN=$(abspath $(BUILD))/libgpurt_mock$(if $(filter Darwin,$(UNAME)),.dylib,.so)
go-test: mock
	@echo "== [$(T)] go test -race -short ./... but $(CUDA_PKGS) (cgo on)"
	$(TEST_MOCK) CGO_ENABLED=1 $(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) \
	  $$($(GO) list ./... | grep -v '$(CUDA_PKGS:./%=/%)$$')

# The shipped binary runs with cgo off (purego's fakecgo): run the tests of
# the call path, the loader, the core, the conformance suite and the CLI
# that way too, in full.
go-test-nocgo: mock
	@echo "== [$(T)] go test (cgo off) ./core/... ./conform ./cmd/..."
	$(TEST_MOCK) CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./core/... ./conform ./cmd/...

# The modules of their own: vet and their tests (one build of their
# dependencies serves both; -race would compile Prometheus and gonum/plot
# a second time for code that starts no goroutine of its own).
mod-test: mock
	@for m in $(SUBMODULES); do \
	  echo "== [$(T)] $$m (own module): go vet ./... && go test ./..."; \
	  (cd $$m && $(GO) vet ./... && $(TEST_MOCK) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...) || \
	  { echo "mod-test: $$m failed; after a change to the root go.mod, 'make tidy' updates the modules' go.mod and go.sum"; exit 1; }; \
	done
	@echo "== [$(T)] scripts/mod_check.sh (a module importing only core compiles purego, go-hclog, x/sys)"
	bash scripts/mod_check.sh

# go mod tidy in the root module and in each module of its own (whose
# go.mod lists the root module's requirements it builds with, through the
# replace directive).
tidy:
	$(GO) mod tidy
	@for m in $(SUBMODULES); do echo "(cd $$m && $(GO) mod tidy)"; (cd $$m && $(GO) mod tidy); done

# The compile check alone (make test-cuda runs it within plugins/cuda's tests).
cuda-check:
	@if [ -f scripts/build_cuda.sh ]; then \
	  echo "== scripts/build_cuda.sh --ci"; \
	  bash scripts/build_cuda.sh --ci; \
	else \
	  echo "== cuda-check: scripts/build_cuda.sh not present, nothing to check"; \
	fi

# What scripts/gpu_all.sh needs on the GPU machine, built here (no Go and
# no FlashInfer/CUTLASS headers there): the CUDA plugin (nvcc from PyPI
# when none is installed), every command under cmd/ and examples/ with
# CGO_ENABLED=0, and the cgo baseline. Then, on the GPU machine:
#   bash scripts/gpu_all.sh        (with build/ carried along)
gpu-artifacts: mock cgobench
	bash scripts/build_cuda.sh $(BUILD)
	@for d in cmd/* examples/*; do \
	  [ -d "$$d" ] && [ "$$d" != cmd/gpurt-cgobench ] || continue; \
	  ls $$d/*.go >/dev/null 2>&1 || continue; \
	  m=.; [ "$${d%%/*}" = examples ] && m=examples; \
	  echo "== CGO_ENABLED=0 go -C $$m build -o $(abspath $(BUILD))/$$(basename $$d) ./$${d#$$m/}"; \
	  CGO_ENABLED=0 $(GO) -C $$m build -o $(abspath $(BUILD))/$$(basename $$d) ./$${d#$$m/}; \
	done
	chmod go-w $(BUILD) $(BUILD)/libgpurt_* 2>/dev/null || true
	@du -sh $(BUILD)

clean:
	rm -rf $(BUILD)

# One archive per platform (linux/amd64 with the CUDA plugin built from
# PyPI's nvcc, linux/arm64, darwin/arm64) into dist/, reproducible, with
# the plugins' SHA-256 recorded in the binary. DIST_FLAGS go to dist.sh
# (e.g. --no-cuda, --platforms linux/amd64).
dist:
	@echo "== make dist (scripts/dist.sh $(DIST_FLAGS))"
	bash scripts/dist.sh $(DIST_FLAGS) dist

# What make test checks of make dist: linux/amd64 built twice and compared
# byte for byte, installed into a fresh folder and probed, then tampered
# with and refused.
dist-check:
	@echo "== [$(T)] scripts/dist_check.sh"
	bash scripts/dist_check.sh
