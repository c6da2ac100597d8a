#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_check.sh — ONE command on the GPU machine (CUDA toolkit at
# /usr/local/cuda, no Go, no network). Run it from the repository root with
# build/gpurt (a CGO_ENABLED=0 binary built elsewhere) present:
#
#   bash scripts/gpu_check.sh
#
# It builds build/libgpurt_cuda.so with nvcc, the C smoke and fault tests, the
# C ABI suite (csrc/test/abi_suite.c) and the raw C baseline
# (bench/raw/rawbench.c), then runs: the smoke test, the C ABI suite, the
# ABI fuzzer (100 inputs), the fault test, `gpurt probe`, `gpurt conform
# --backend cuda` (and its fusion checks with GPURT_CUDA_FUSE=1, its quant
# checks) and
# `gpurt bench --json` (when those subcommands exist), and rawbench. Each
# step has a timeout; a failing step is reported and the script goes on.
# Full logs go to build/gpu_check/; when $OUT is set, they are packed into
# ONE tarball $OUT/gpu_check.tgz, beside $OUT/summary.txt (what this script
# prints after the steps) and the two JSON-lines files
# $OUT/rawbench.jsonl and $OUT/gpurt_bench.jsonl (the device tool returns
# few files). Printed last: a comparison table gpurt vs raw C (launch,
# dispatch Go/C/raw, copies, startup, GEMM and its host cost), then the
# step table. Exit status: 0 when every step that ran passed, 1 otherwise.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
cc=${CC:-cc}
logs=$root/build/gpu_check
rm -rf "$logs"
mkdir -p "$logs" build
chmod 755 build 2>/dev/null || true

names=()
states=()
secs=()
notes=()

# step NAME TIMEOUT_S CMD... — runs CMD with a timeout, logging to $logs/NAME.log.
step() {
  local name=$1 to=$2
  shift 2
  local log="$logs/$name.log"
  echo "== [$name] $*" >"$log"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$to" "$@" >>"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local dt
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  local note
  note=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    states+=("ok")
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    states+=("TIMEOUT")
    note="${note:+$note; }timed out after ${to}s"
  else
    states+=("FAIL($rc)")
    [ -z "$note" ] && note=$(grep -v '^==' "$log" | tail -n 1 | cut -c1-90)
  fi
  names+=("$name")
  secs+=("$dt")
  notes+=("$note")
  tail -n 25 "$log"
  echo "== [$name] exit $rc in ${dt}s"
  return $rc
}

skip() {
  names+=("$1")
  states+=("skip")
  secs+=("-")
  notes+=("$2")
  echo "== [$1] skipped: $2" | tee "$logs/$1.log"
}

# probe_walltime FILE: `gpurt probe` wall time, 3 runs, as JSON lines (also to
# FILE). Run through `bash -c` (exported) so that step's timeout applies.
# shellcheck disable=SC2317
probe_walltime() {
  local i s e
  for i in 1 2 3; do
    s=$(date +%s%N)
    build/gpurt probe >/dev/null 2>&1
    e=$(date +%s%N)
    echo "{\"metric\":\"gpurt_probe_wall_ms\",\"value\":$(((e - s) / 1000000)),\"unit\":\"ms\",\"run\":$i}"
  done | tee "$1"
}
export -f probe_walltime

has_cmd() { # has_cmd SUBCOMMAND: does build/gpurt know it?
  [ -x build/gpurt ] && build/gpurt help 2>&1 | grep -qE "^\s+$1\b"
}

# ---- environment ------------------------------------------------------------
step env 60 bash -c "uname -a; nvidia-smi; nvcc --version; $cc --version | head -n 1;
  ls -la build/; namei -l $root/build 2>/dev/null; ls -la $cuda/lib64/libcublasLt.so* $cuda/targets/*/lib/libcublasLt.so* 2>/dev/null; true"

# ---- builds -----------------------------------------------------------------
# GPURT_PREBUILT=1: use the build/libgpurt_cuda.so that came with the tree
# (built on the development machine, where the FlashInfer and CUTLASS headers
# are; they are too large to travel), instead of building it here.
if [ "${GPURT_PREBUILT:-0}" = 1 ] && [ -f build/libgpurt_cuda.so ]; then
  skip build_plugin "GPURT_PREBUILT=1: using the carried build/libgpurt_cuda.so"
else
  step build_plugin 600 bash scripts/build_cuda.sh build
fi
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
step oob_ptx 120 nvcc -ptx -arch=compute_80 -o build/oob.ptx plugins/cuda/testdata/oob.cu
tflags=(-std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Iabi -Iplugins/cuda/test)
step build_smoke 120 "$cc" "${tflags[@]}" -o build/cuda_smoke_test plugins/cuda/test/smoke_test.c -ldl -lpthread -lm
step build_fault 120 "$cc" "${tflags[@]}" -o build/cuda_fault_test plugins/cuda/test/fault_test.c -ldl
step build_abi_suite 120 "$cc" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Iabi \
  -o build/abi_suite csrc/test/abi_suite.c -ldl
step build_rawbench 120 "$cc" -O2 -std=c11 -D_GNU_SOURCE -Iabi -I"$cuda/include" bench/raw/rawbench.c \
  -L"$cuda/lib64" -L"$cuda/lib64/stubs" -Wl,-rpath,"$cuda/lib64" -lcublasLt -lcuda -ldl -lm -o build/rawbench

# ---- plugin tests (no Go needed) ----------------------------------------------
if [ -f build/libgpurt_cuda.so ] && [ -x build/cuda_smoke_test ]; then
  step smoke_test 600 build/cuda_smoke_test "$root/build/libgpurt_cuda.so" build/oob.ptx
else
  skip smoke_test "plugin or test not built"
fi
# The plugin-agnostic C ABI suite (csrc/test/abi_suite.c): the same checks
# and the same messages as on the mock in `make test`.
if [ -f build/libgpurt_cuda.so ] && [ -x build/abi_suite ]; then
  step abi_suite 300 build/abi_suite "$root/build/libgpurt_cuda.so"
  # ABI 1.10's fusions are off until GPURT_CUDA_FUSE=1: the suite's
  # prologue run again with them on.
  step abi_suite_fuse 300 env GPURT_CUDA_FUSE=1 build/abi_suite "$root/build/libgpurt_cuda.so"
else
  skip abi_suite "plugin or suite not built"
fi
# The ABI fuzzer (csrc/test/abi_fuzz.c) on the CUDA plugin: 100 generated
# programs of calls (each opens its own runtime); every error well formed,
# no failed call changing the runtime's counts, no crash.
if [ -f build/libgpurt_cuda.so ]; then
  step abi_fuzz 300 env CC="$cc" bash scripts/abi_fuzz.sh "$root/build/libgpurt_cuda.so" 100 1
fi
if [ -f build/libgpurt_cuda.so ] && [ -x build/cuda_fault_test ] && [ -f build/oob.ptx ]; then
  step fault_test 300 build/cuda_fault_test "$root/build/libgpurt_cuda.so" build/oob.ptx
else
  skip fault_test "plugin, test or oob.ptx not built"
fi

# ---- gpurt (the Go binary) ------------------------------------------------------
if [ -x build/gpurt ]; then
  step gpurt_probe 120 build/gpurt probe
  step gpurt_probe_json 120 build/gpurt probe --json
  if has_cmd conform; then
    step conform_cuda 600 build/gpurt conform --backend cuda
    # ABI 1.10's fusions (GEMM prologues, the rotary embedding in the KV
    # append) are off by default (GPURT_CUDA_FUSE): their checks with them on.
    step conform_cuda_fuse 180 env GPURT_CUDA_FUSE=1 build/gpurt conform --backend cuda --run '^(gemm/.*prologue|attention/append/rope)'
    # GPURT_CUBLASLT_PATH must be absolute and pass the loader's trust rule
    # (csrc/gp_path.c): a relative one makes GEMM unavailable, naming why,
    # and is never replaced by the default library. Passes when the refusal
    # is reported.
    step cublaslt_path_refused 120 bash -c 'GPURT_CUBLASLT_PATH=libcublasLt.so.13 build/gpurt conform --backend cuda \
      --run "^gemm/large$" 2>&1 | grep -m1 "GPURT_CUBLASLT_PATH=libcublasLt.so.13 refused: libcublasLt.so.13 is not an absolute path"'
    # An absolute GPURT_CUBLASLT_PATH is checked, opened once and loaded
    # through its descriptor (/proc/self/fd/N, csrc/gp_path.c
    # gp_trusted_open): GEMM must work through it.
    lt=""
    for d in /usr/local/cuda/targets/*/lib /usr/local/cuda/lib64 "$root"/.cuda-venv/lib/python3*/site-packages/nvidia/cu13/lib; do
      if [ -f "$d/libcublasLt.so.13" ]; then lt=$(readlink -f "$d/libcublasLt.so.13"); break; fi
    done
    if [ -n "$lt" ]; then
      step cublaslt_path_fd 300 env GPURT_CUBLASLT_PATH="$lt" build/gpurt conform --backend cuda --run "^gemm/"
    else
      skip cublaslt_path_fd "no libcublasLt.so.13 found to name"
    fi
  else
    skip conform_cuda "build/gpurt has no conform subcommand"
  fi
else
  skip gpurt_probe "no build/gpurt (build it with CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt)"
  skip conform_cuda "no build/gpurt"
fi

# ---- benchmarks ----------------------------------------------------------------
if [ -x build/rawbench ]; then
  step rawbench 600 bash -o pipefail -c "build/rawbench --plugin-path '$root/build/libgpurt_cuda.so' | tee '$logs/rawbench.jsonl'"
else
  skip rawbench "rawbench not built"
fi
if [ -x build/gpurt ] && has_cmd bench; then
  step gpurt_bench 600 env GPURT_BACKEND=cuda bash -o pipefail -c "build/gpurt bench --json | tee '$logs/gpurt_bench.jsonl'"
else
  skip gpurt_bench "no build/gpurt bench subcommand"
fi
if [ -x build/gpurt-cgobench ] && [ -f build/libgpurt_cuda.so ]; then
  step cgobench 180 bash -o pipefail -c "build/gpurt-cgobench --json --plugin-path '$root/build/libgpurt_cuda.so' | tee '$logs/cgobench.jsonl'"
else
  skip cgobench "no build/gpurt-cgobench"
fi
# gpurt probe wall time (startup), beside rawbench's cuinit_ms + primary_ctx_create_ms.
if [ -x build/gpurt ]; then
  # shellcheck disable=SC2016
  step probe_walltime 120 bash -c 'probe_walltime "$1"' _ "$logs/probe_walltime.jsonl"
fi

# compare LOGDIR — the gpurt-vs-raw table from the JSON lines of this run.
compare() {
  python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
def load(name):
    out = []
    try:
        with open(os.path.join(d, name)) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try: out.append(json.loads(line))
                    except ValueError: pass
    except OSError:
        pass
    return out
g, r, cg, pw = load("gpurt_bench.jsonl"), load("rawbench.jsonl"), load("cgobench.jsonl"), load("probe_walltime.jsonl")
def find(rows, metric, src=None, **kw):
    for x in rows:
        if x.get("metric") != metric: continue
        if src is not None and x.get("source", "raw") != src: continue
        if all(x.get(k) == v for k, v in kw.items()): return x.get("value")
    return None
rows = []
def row(name, gv, rv, goal="", higher=True):
    ratio = gv / rv if isinstance(gv, (int, float)) and isinstance(rv, (int, float)) and rv else None
    rows.append((name, gv, rv, ratio, goal))
row("launch_us (Go) vs raw cuLaunchKernel", find(g, "launch_us"), find(r, "launch_host_us", "raw", kernel="args3(u64,f32,u64)"), "<= 1.05")
row("launch_us (plugin from C) vs raw", find(r, "launch_host_us", "plugin_c"), find(r, "launch_host_us", "raw", kernel="args3(u64,f32,u64)"), "")
row("dispatch_ns Go stream_query vs raw cuStreamQuery", find(g, "dispatch_ns"), find(r, "dispatch_ns", "raw"), "")
row("dispatch_ns C stream_query vs raw", find(r, "dispatch_ns", "plugin_c"), find(r, "dispatch_ns", "raw"), "")
row("dispatch_ns Go vs C (plugin)", find(g, "dispatch_ns"), find(r, "dispatch_ns", "plugin_c"), "")
cgo = find(cg, "dispatch_cgo_ns") or find(g, "dispatch_cgo_ns")
row("dispatch_ns Go vs cgo (gpurt-cgobench)", find(g, "dispatch_ns"), cgo, "")
row("dispatch_ns Go vs cgo, one process (cgobench)", find(cg, "dispatch_ns"), find(cg, "dispatch_cgo_ns"), "<= 2")
row("launch host us Go vs cgo, one process (cgobench)", find(cg, "launch_host_us"), find(cg, "launch_host_cgo_us"), "")
row("launch host us C loop of the plugin slot (cgobench)", find(cg, "launch_host_c_us"), find(r, "launch_host_us", "raw", kernel="args3(u64,f32,u64)"), "info")
row("gemm host us Go vs cgo, one process (cgobench)", find(cg, "gemm_host_us"), find(cg, "gemm_host_cgo_us"), "")
row("gemm host us C loop of gemm_run (cgobench) vs raw", find(cg, "gemm_host_c_us"), find(r, "gemm_host_us", "raw"), "info")
row("launch host us Go vs raw cuLaunchKernel, one process (cgobench)", find(cg, "launch_host_us"), find(cg, "launch_host_raw_us"), "<= 1.05")
row("launch host us plugin from C vs raw cuLaunchKernel, one process (cgobench)", find(cg, "launch_host_c_us"), find(cg, "launch_host_raw_us"), "<= 1.05")
row("launch host us per launch, gpurt batch of 64 vs raw cuLaunchKernel, one process (cgobench)", find(cg, "launch_batch_vs_raw"), find(cg, "launch_host_raw_us"), "<= 1.05")
row("launch host us per launch, gpurt batch of 64 vs launch_batch slot from cgo, one process (cgobench)", find(cg, "launch_batch_host_us"), find(cg, "launch_batch_c_us"), "info")
row("launch_batch_us (Go, batch of 64) vs raw cuLaunchKernel", find(g, "launch_batch_us"), find(r, "launch_host_us", "raw", kernel="args3(u64,f32,u64)"), "")
row("launch_batch_host_us (plugin from C, batch of 64) vs raw", find(r, "launch_batch_host_us", "plugin_c"), find(r, "launch_host_us", "raw", kernel="args3(u64,f32,u64)"), "info")
row("gemm host us Go vs raw cublasLtMatmul, one process (cgobench)", find(cg, "gemm_host_us"), find(cg, "gemm_host_raw_us"), "<= raw+1us")
row("gemm host us plugin from C vs raw cublasLtMatmul, one process (cgobench)", find(cg, "gemm_host_c_us"), find(cg, "gemm_host_raw_us"), "<= raw+1us")
row("cuCtxGetCurrent / cuCtxSetCurrent ns", find(r, "ctx_get_current_ns", "raw"), find(r, "ctx_set_current_ns", "raw"), "info")
for n, lab in ((256 << 20, "256MiB"), (1 << 30, "1GiB")):
    row("htod pinned GB/s " + lab, find(g, "htod_pinned_gbps", bytes=n), find(r, "copy_pinned_htod_gbps", "raw", bytes=n), ">= 0.97")
    row("dtoh pinned GB/s " + lab, find(g, "dtoh_pinned_gbps", bytes=n), find(r, "copy_pinned_dtoh_gbps", "raw", bytes=n), ">= 0.97")
    row("dtod GB/s " + lab, find(g, "dtod_gbps", bytes=n), find(r, "copy_dtod_gbps", "raw", bytes=n), ">= 0.97")
    row("htod pageable GB/s " + lab, find(g, "htod_pageable_gbps", bytes=n), find(r, "copy_pageable_htod_gbps", "raw", bytes=n), ">= 3")
    row("dtoh pageable GB/s " + lab, find(g, "dtoh_pageable_gbps", bytes=n), find(r, "copy_pageable_dtoh_gbps", "raw", bytes=n), ">= 3")
ci, pc = find(r, "cuinit_ms", "raw"), find(r, "primary_ctx_create_ms", "raw")
raw_start = ci + pc if ci is not None and pc is not None else None
walls = sorted(x["value"] for x in pw if x.get("metric") == "gpurt_probe_wall_ms")
row("startup ms: gpurt probe wall (median) vs cuInit+ctx", walls[len(walls) // 2] if walls else None, raw_start, "info")
row("startup ms: core.Open vs cuInit+ctx", find(g, "startup_ms"), raw_start, "info")
shapes = [("gemm_bf16_8192_tflops", 8192, 8192, 8192, "tflops")]
for m, n, k in ((14336, 1, 4096), (14336, 16, 4096), (14336, 64, 4096), (4096, 1, 4096)):
    shapes.append(("gemm_decode_%dx%dx%d_us" % (m, n, k), m, n, k, "us"))
shapes.append(("gemm_prefill_14336x2048x4096_tflops", 14336, 2048, 4096, "tflops"))
for metric, m, n, k, unit in shapes:
    kw = dict(m=m, n=n, k=k)
    if unit == "tflops":
        rb, rs = find(r, "gemm_batched_tflops", "raw", **kw), find(r, "gemm_tflops", "raw", **kw)
        pb = find(r, "gemm_batched_tflops", "plugin_c", **kw)
        goal = ">= 0.99"
    else:
        rb, rs = find(r, "gemm_batched_us", "raw", **kw), find(r, "gemm_us", "raw", **kw)
        pb = find(r, "gemm_batched_us", "plugin_c", **kw)
        goal = "<= 1.01 (time)"
    row(metric + " Go vs raw batched", find(g, metric), rb, goal)
    row(metric + " plugin-C vs raw batched", pb, rb, goal)
    row(metric + " raw single-run (boost) ", rs, rb, "info")
row("gemm_host_us Go vs raw cublasLtMatmul", find(g, "gemm_host_us"), find(r, "gemm_host_us", "raw"), "<= raw+1us")
row("gemm_host_us plugin-C vs raw", find(r, "gemm_host_us", "plugin_c"), find(r, "gemm_host_us", "raw"), "<= raw+1us")
row("gemm_host_us Go vs plugin-C", find(g, "gemm_host_us"), find(r, "gemm_host_us", "plugin_c"), "")
def f(v):
    if v is None: return "-"
    return "%.4g" % v
print("gpurt vs raw (ratio = first / second):")
w = max(60, max(len(x[0]) for x in rows))
print("%-*s %10s %10s %7s  %s" % (w, "metric", "gpurt", "raw", "ratio", "goal"))
for name, gv, rv, ratio, goal in rows:
    if goal.startswith("<= raw+") and gv is not None and rv is not None:
        goal += " (diff %+.3f us)" % (gv - rv)
    print("%-*s %10s %10s %7s  %s" % (w, name, f(gv), f(rv), f(ratio), goal))
un = [x for x in r if x.get("metric") == "plugin_unavailable"]
if un: print("rawbench: the plugin was not measured from C:", un[0].get("why"))
PY
}

# ---- summary (last) ----------------------------------------------------------------
summary() {
  local status=0
  echo
  echo "logs: $logs${OUT:+ (packed into \$OUT/gpu_check.tgz)}"
  if command -v python3 >/dev/null 2>&1; then
    compare "$logs" || echo "(comparison table failed: see above)"
  else
    echo "(no python3: no comparison table)"
  fi
  echo
  printf '%-18s %-10s %7s  %s\n' STEP STATUS SECONDS NOTE
  for i in "${!names[@]}"; do
    printf '%-18s %-10s %7s  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${notes[$i]}"
    case "${states[$i]}" in ok|skip) ;; *) status=1 ;; esac
  done
  return $status
}
summary | tee "$logs/summary.txt"
status=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$logs/summary.txt" "$OUT/summary.txt"
  for f in rawbench.jsonl gpurt_bench.jsonl; do
    [ -f "$logs/$f" ] && cp "$logs/$f" "$OUT/$f"
  done
  tar -czf "$OUT/gpu_check.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" ||
    echo "gpu_check.sh: could not write $OUT/gpu_check.tgz" >&2
fi
exit "$status"
