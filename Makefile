# SPDX-License-Identifier: Apache-2.0
#
# make run   build the mock plugin (and the CUDA / Metal plugin where it
#            builds) and build/gpurt, then run `gpurt probe` and
#            `gpurt bench --quick`.
#            The CUDA plugin is built only where nvcc is installed (or was
#            fetched before); `make run CUDA=1` fetches it from PyPI.
# make generate  regenerate core/internal/bind/zslots.go, internal/abi/z*.go and
#            csrc/gp_zslots.h from abi/gpurt.h (go run ./internal/cmd/genbind).
# make test  everything that runs without a GPU and without nvcc, in
#            passes that share one build where they can (one GOCACHE: the
#            CGO_ENABLED=0 linux/amd64 build serves gen-check, vet, cross,
#            go-test, mod-test and the README commands):
#            gen-check   the generated files are what the generator makes;
#            fmt-check   gofmt;
#            vet         go vet, every module (cgo off; the cgo packages
#                        bench/cgobaseline and cmd/gpurt-cgobench with cgo);
#            cross       CGO_ENABLED=0 go build ./... for linux/amd64, and
#                        every module type-checked for linux/arm64,
#                        darwin/amd64 and darwin/arm64 (internal/cmd/crosscheck:
#                        the compiler's front-end checks, no code generation);
#            abi-suite   the C ABI suite on the mock (plain, ASan+UBSan, TSan);
#            go-test     every package's tests but plugins/cuda's (make
#                        test-cuda), every module but llm's, full sizes, cgo
#                        off as the shipped binary runs (the ABI layout check
#                        and the README-commands test included);
#            go-test-race  with -race -short and cgo on, the packages whose
#                        tests or code start goroutines (RACE_PKGS: core,
#                        its loader and pool, conform but its grouped/ and
#                        quant/ numeric checks, switches; tests/racepass_test.go
#                        keeps the list whole) and the llm module (its
#                        loader's goroutines);
#            mod-test    scripts/mod_check.sh (what a module importing only
#                        core compiles and lists);
#            dist-check  make dist's archive (scripts/dist_check.sh).
#            The steps run three at a time (TEST_JOBS) in an order that
#            shares compiles (see TEST_STEPS below). Cold (fresh clone,
#            empty GOCACHE, 2 idle cores, 2026-12-04): 5 min 40 s wall,
#            about 11 CPU-minutes (scripts/test_cpu.sh: CPU per step).
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
# The CUDA plugin's package: make test-cuda tests it, make test does not.
CUDA_PKGS := ./plugins/cuda
# Packages make test runs with -race -short (cgo on): those whose tests or
# code start goroutines (tests/racepass_test.go fails naming a package that
# does and is not here, and a pattern here that matches none); and the
# modules of their own tested that way (only there). The others' tests run
# once, in the plain pass: a single goroutine cannot race, and each package
# here costs an instrumented build, link and run.
RACE_PKGS := ./core ./core/internal/loader ./core/pool ./conform ./switches
RACE_MODULES := llm
# The targets other than linux/amd64 that cross type-checks.
CROSS := linux/arm64 darwin/amd64 darwin/arm64
UNAME := $(shell uname -s)

.PHONY: run build mock cuda metal gpurt test test-cuda generate gen-check fmt-check vet cross abi-test abi-suite fuzz \
        go-test go-test-race mod-test tidy cuda-check check-metal cgobench clean dist dist-check gpu-artifacts decodeplot

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

# make test's steps. They run as make -j$(TEST_JOBS) (default 3) in one
# sub-make with the order-only prerequisites below (only there: each step
# alone stays what it is), so that while one step waits on a single core
# (a test binary's run, a link, the C suite, the cross type-check) another
# keeps the second busy. vet runs after gen-check, and go-test and cross
# after vet: each reuses the compile of the one before, which two at once
# would each do again. The race pass (its own instrumented build) also
# waits for vet, so that vet, the gate of go-test, has both cores, and the
# race pass's long runs overlap go-test's. go-test also waits for
# abi-suite, whose sanitizer builds plugins/mock's TestSelftest reuses;
# mod-test and dist-check wait for go-test. Each step's output is printed
# whole when it ends (make --output-sync, GNU make 4; an older make
# interleaves lines). Cold on 2 idle cores: 5 min 40 s (README).
TEST_STEPS := gen-check fmt-check abi-suite vet go-test-race go-test cross mod-test dist-check
TEST_JOBS ?= 3
ifeq ($(GPURT_TEST_STEPS),1)
vet: | gen-check
go-test-race: | vet
go-test: | vet abi-suite
cross: | vet
mod-test dist-check: | go-test
endif

test:
	@echo "== [$(T)] make test: $(TEST_STEPS), $(TEST_JOBS) at a time"
	@GPURT_TEST_STEPS=1 $(MAKE) --no-print-directory -j$(TEST_JOBS) $(if $(filter output-sync,$(.FEATURES)),--output-sync=target) $(TEST_STEPS)
	@echo "== [$(T)] make test: all passed (the CUDA plugin's build and tests: make test-cuda)"

# -trimpath for make test's Go steps (and the commands they run), as make
# dist builds: then the dist check's build of bin/gpurt reuses the plain
# pass's compile instead of compiling the tree and its standard library
# again (testutil.RepoRoot finds the checkout from the working folder).
test gen-check vet cross go-test go-test-race mod-test dist-check: export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS 2>/dev/null)) -trimpath)

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
	@echo "== [$(T)] the GEMVs of cuda_quant.cu, the KV append of cuda_append.cuh and the built-in argmax, norms and sampling of cuda_kernels.cu on the CPU emulation of CUDA (scripts/cuda_emu.sh)"
	bash scripts/cuda_emu.sh --ci | grep -v '^ok '
	@echo "== [$(T)] make test-cuda: all passed"

generate:
	@echo "== go run ./internal/cmd/genbind"
	$(GO) run ./internal/cmd/genbind

# Regenerating must change nothing (as x/sys checks with git diff, but
# comparing in memory, so it also holds in a tree with uncommitted edits).
gen-check:
	@echo "== [$(T)] go run ./internal/cmd/genbind -check (generated files up to date)"
	CGO_ENABLED=0 $(GO) run ./internal/cmd/genbind -check

fmt-check:
	@echo "== [$(T)] gofmt -l"
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './build/*' -not -path './.*' -not -path '*/testdata/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Cgo off, as go-test builds (one compile of the dependencies serves
# both); then the packages with cgo files, with cgo.
vet:
	@echo "== [$(T)] go vet ./... (cgo off), every module"
	CGO_ENABLED=0 $(GO) vet ./...
	@for m in $(SUBMODULES); do echo "(cd $$m && go vet ./...)"; (cd $$m && CGO_ENABLED=0 $(GO) vet ./...); done
	CGO_ENABLED=1 $(GO) vet ./bench/cgobaseline
	CGO_ENABLED=1 $(GO) vet -tags cgobench ./cmd/gpurt-cgobench/

# linux/amd64 built (the binaries go-test links share its compile); the
# other targets type-checked from source by internal/cmd/crosscheck, every
# module: a cross-build compiles the standard library again for each
# (a CPU-minute a target), the type check takes seconds and reports the
# same front-end errors. make dist builds linux/arm64 and darwin/arm64.
cross:
	@echo "== [$(T)] CGO_ENABLED=0 go build ./... (linux/amd64)"
	CGO_ENABLED=0 $(GO) build ./...
	@for m in . $(SUBMODULES); do \
	  echo "== [$(T)] go run ./internal/cmd/crosscheck -C $$m $(CROSS) -- ./..."; \
	  CGO_ENABLED=0 $(GO) run ./internal/cmd/crosscheck -C $$m $(CROSS) -- ./...; \
	done

# The layout check alone (make test runs it within go-test).
abi-test:
	@echo "== [$(T)] abi layout check"
	$(GO) test -count=1 -run 'Layout' ./internal/abi/

# The plugin-agnostic C ABI suite (csrc/test/abi_suite.c) on the mock, built
# plain, with ASan+UBSan and with TSan; scripts/gpu_check.sh runs it on CUDA.
# Then the ABI fuzzer (csrc/test/abi_fuzz.c) on the suite's ASan+UBSan
# mock: a fixed set of generated inputs and the saved ones (make fuzz: the
# coverage-guided run).
abi-suite:
	@echo "== [$(T)] C ABI suite on the mock (plain, asan+ubsan, tsan)"
	bash scripts/abi_suite.sh --mock
	@echo "== [$(T)] C ABI fuzzer on the mock (asan+ubsan, fixed inputs)"
	bash scripts/abi_fuzz.sh --quick

# Coverage-guided fuzzing, FUZZTIME seconds per target (default 300): the C
# ABI over the mock with clang's libFuzzer (scripts/abi_fuzz.sh), then every
# Go fuzz target (scripts/fuzz_go.sh). Not part of make test.
FUZZTIME ?= 300
fuzz: mock
	bash scripts/abi_fuzz.sh --libfuzzer $(FUZZTIME)
	$(TEST_MOCK) FUZZTIME=$(FUZZTIME)s bash scripts/fuzz_go.sh

# Both test passes use the mock plugin `make mock` built
# (GPURT_TEST_MOCK_PLUGIN: internal/testutil), not one build per test binary.
TEST_MOCK = GPURT_TEST_MOCK_PLUGIN=$(abspath $(BUILD))/libgpurt_mock$(if $(filter Darwin,$(UNAME)),.dylib,.so)

# The plain pass: every package (but the CUDA plugin's) and every module
# (but those of RACE_MODULES), full sizes, cgo off (the shipped binary runs
# with purego's fakecgo).
go-test: mock
	@echo "== [$(T)] go test (cgo off) ./... but $(CUDA_PKGS), and the modules $(filter-out $(RACE_MODULES),$(SUBMODULES))"
	$(TEST_MOCK) CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) \
	  $$($(GO) list ./... | grep -v '$(CUDA_PKGS:./%=/%)$$')
	@for m in $(filter-out $(RACE_MODULES),$(SUBMODULES)); do \
	  echo "== [$(T)] $$m (own module): go test ./... (cgo off)"; \
	  (cd $$m && $(TEST_MOCK) CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...) || \
	  { echo "go-test: $$m failed; after a change to the root go.mod, 'make tidy' updates the modules' go.mod and go.sum"; exit 1; }; \
	done

# The race pass: -race -short, cgo on (which -race needs), the packages
# whose tests run goroutines of their own (RACE_PKGS) and RACE_MODULES.
# -short: the conformance suite quick (without its grouped/ and quant/
# GEMM checks: numeric, single-goroutine, minutes under -race), the stress
# test 100 rounds and core's data-volume tests (TestCopyPool,
# TestRoundTrips, TestStagedCopies: a race-instrumented loop over every
# byte) at their smaller sizes; go-test runs them all in full.
# atexit_sleep_ms=0: a race-instrumented program otherwise sleeps a second
# as it exits (the race runtime's default, so that other goroutines may
# still report), and the runtime tests start the test binary again for
# every isolated probe (core.Open), a child per test: ~100 seconds of
# sleeping in core and the loader. The caller's GORACE options come after,
# so theirs win.
RACE_ENV = GORACE="atexit_sleep_ms=0 $${GORACE:-}"

go-test-race: mock
	@echo "== [$(T)] go test -race -short $(RACE_PKGS) (cgo on)"
	$(TEST_MOCK) $(RACE_ENV) CGO_ENABLED=1 $(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	@for m in $(RACE_MODULES); do \
	  echo "== [$(T)] $$m (own module): go test -race -short ./..."; \
	  (cd $$m && $(TEST_MOCK) $(RACE_ENV) CGO_ENABLED=1 $(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) ./...); \
	done

# What a module importing only core compiles and lists (the modules of
# their own are vetted by vet and tested by go-test or go-test-race).
mod-test:
	@echo "== [$(T)] scripts/mod_check.sh (a module importing only core: what it compiles, its go list -m all)"
	CGO_ENABLED=0 bash scripts/mod_check.sh

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

# The Metal plugin's Objective-C type-checked on any host, against the stub
# headers of plugins/metal/stubs (not part of make test; .ci/run runs it):
# clang from the PATH, else PyPI's ziglang wheel's, fetched into .zig-venv/.
check-metal:
	@echo "== scripts/metal_syntax.sh (clang -fsyntax-only over plugins/metal/src)"
	bash scripts/metal_syntax.sh

# What scripts/gpu_all.sh needs on the GPU machine, built here (no Go and
# no FlashInfer/CUTLASS headers there): the CUDA plugin (nvcc from PyPI
# when none is installed), every command under cmd/ and examples/ with
# CGO_ENABLED=0, and the cgo baseline. scripts/gpu_pack.sh runs it in a clean
# worktree and packs build/ as .pick/b.txz (build/ is too large to travel).
# Then, on the GPU machine:
#   bash scripts/gpu_all.sh        (with .pick carried along)
gpu-artifacts: mock cgobench
	bash scripts/build_cuda.sh $(BUILD)
	@for d in cmd/* examples/*; do \
	  [ -d "$$d" ] && [ "$$d" != cmd/gpurt-cgobench ] || continue; \
	  ls $$d/*.go >/dev/null 2>&1 || continue; \
	  m=.; [ "$${d%%/*}" = examples ] && m=examples; \
	  echo "== CGO_ENABLED=0 go -C $$m build -ldflags='-s -w' -o $(abspath $(BUILD))/$$(basename $$d) ./$${d#$$m/}"; \
	  CGO_ENABLED=0 $(GO) -C $$m build -ldflags='-s -w' -o $(abspath $(BUILD))/$$(basename $$d) ./$${d#$$m/}; \
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
