#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_quant_bench.sh — ONE command on the GPU machine (no Go, no network, no
# nvcc needed) for the 1.4 ops (issue 12), using what was built elsewhere
# into build/ (it does not rebuild the plugin: the CUTLASS and FlashInfer
# headers stay on the build machine):
#
#   bash scripts/build_cuda.sh build            # with .fi/ (CUTLASS headers)
#   CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt
#   CGO_ENABLED=0 go build -o build/gpurt-quantbench ./cmd/gpurt-quantbench
#   bash scripts/gpu_quant_bench.sh             # on the GPU machine
#
# Steps (each with a timeout; a failure is reported and the script goes on;
# about 2 minutes in all, 4 at most):
#   plugin    what build/libgpurt_cuda.so is (size, DT_NEEDED, whether the
#             CUTLASS adapter is linked in)
#   conform   build/gpurt conform --backend cuda --run '^(quant|grouped)/'
#             (every quantized and grouped check against float64
#             references, on the H200's large shapes)
#   bench     build/gpurt-quantbench: int8 GEMV vs bf16 cuBLASLt GEMV
#             (4096x4096 and 14336x4096, n = 1, 8, 16, 32, 64), int8 GEMM at
#             n = 2048 vs bf16 cuBLASLt, grouped GEMM of 8 and 64 experts
#             (skewed rows; bf16 and fp8 block scales; CUTLASS on sm_90)
#             vs one cuBLASLt GEMM per expert
#   gemv_rot  the GEMV rows with the calls rotating through 512 MiB of
#             weight copies (rows "... rot": no call finds W in the L2)
#   gemv_cutlass  the GEMV rows with GPURT_CUDA_QMM_MIN_N=9: n = 16..64 on
#             CUTLASS's mixed-input GEMM (the crossover before the skinny
#             GEMV), rows "gpurt int8 cutlass" (n = 1, 8 as before)
#   gemv_dequant, conform_dequant  the GEMV rows with GPURT_CUDA_QGEMV=dequant
#             (the dequantizing kernel that groups of 32 use), and the quant
#             checks with it and GPURT_CUDA_QGEMM=dequant (the prefill path
#             without CUTLASS)
#   gemm_dequant  the prefill rows with GPURT_CUDA_QGEMM=dequant (dequantize
#             W, then cuBLASLt), for comparison
#   own       the grouped cases again with GPURT_CUDA_GROUPED=kernel (the
#             plugin's own grouped kernel, the fallback), for comparison
#   torch     python3 scripts/gpu_quant_torch.py: torch._grouped_mm (bf16)
#             and torch._scaled_grouped_mm (fp8) on the same grouped cases
# Then the markdown table (last). Logs in build/gpu_quant/; with $OUT set,
# copied there (summary.txt, quantbench.jsonl, torch.jsonl, the logs).
# Exit status: 0 when every step passed.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
logs=$root/build/gpu_quant
rm -rf "$logs"
mkdir -p "$logs" build
chmod 755 build 2>/dev/null || true
failed=0
summary=()

# step NAME TIMEOUT CMD... (scripts/lib/step.sh).
. "$root/scripts/lib/step.sh"

plugin_info() {
  local lib=build/libgpurt_cuda.so
  [ -f "$lib" ] || { echo "no $lib: build it with scripts/build_cuda.sh build"; return 1; }
  ls -l "$lib"
  readelf -d "$lib" 2>/dev/null | grep NEEDED || true
  if grep -q cu_cl_grouped_run "$lib"; then # the adapter's symbol (symbol table)
    echo "CUTLASS adapter: linked (grouped_gemm on sm_90 runs CUTLASS)"
  else
    echo "CUTLASS adapter: not linked (grouped_gemm runs the own kernel)"
  fi
}
echo "== [plugin] build/libgpurt_cuda.so"
step plugin 20 bash -c "$(declare -f plugin_info); plugin_info"
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true

conform_cuda 60 "quant and grouped checks on cuda" '^(quant|grouped)/'

if [ -x build/gpurt-quantbench ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [bench] gpurt-quantbench"
  step_jsonl bench 90 "$logs/quantbench.jsonl" build/gpurt-quantbench -plugin-path build
  # again NAME TIMEOUT ONLY IMPL AS ENV...: gpurt-quantbench -only ONLY once
  # more under ENV; its IMPL rows join quantbench.jsonl as impl AS.
  again() {
    local name=$1 limit=$2 only=$3 impl=$4 as=$5
    shift 5
    echo "== [$name] -only $only with $*"
    step "$name" "$limit" env "$@" build/gpurt-quantbench -plugin-path build -only "$only"
    grep '^{' "$logs/$name.log" | grep "\"impl\":\"$impl\"" |
      sed "s/\"impl\":\"$impl\"/\"impl\":\"$as\"/" >>"$logs/quantbench.jsonl" || true
  }
  # The GEMV rows again with every call reading another copy of the
  # weights (512 MiB of copies in turn: none left in the 50 MB L2 by the
  # call before), rows "... rot".
  echo "== [gemv_rot] -only gemv -rotate 512"
  step_jsonl gemv_rot 40 "$logs/quantbench.jsonl" build/gpurt-quantbench -plugin-path build -only gemv -rotate 512
  again gemv_cutlass 30 gemv "gpurt int8" "gpurt int8 cutlass" GPURT_CUDA_QMM_MIN_N=9
  again gemv_dequant 20 gemv "gpurt int8" "gpurt int8 wdq" GPURT_CUDA_QGEMV=dequant
  echo "== [conform_dequant] quant checks with GPURT_CUDA_QGEMV=dequant and GPURT_CUDA_QGEMM=dequant"
  step conform_dequant 60 env GPURT_CUDA_QGEMV=dequant GPURT_CUDA_QGEMM=dequant build/gpurt conform --backend cuda --run '^quant/'
  # The prefill rows on the path CUTLASS replaced (dequantize W, then cuBLASLt).
  again gemm_dequant 30 gemm "gpurt int8" "gpurt int8 dequant+cuBLASLt" GPURT_CUDA_QGEMM=dequant
  again own 60 grouped "gpurt grouped" "gpurt own kernel" GPURT_CUDA_GROUPED=kernel
else
  summary+=("bench    skip     (no build/gpurt-quantbench; build it with CGO_ENABLED=0 go build -o build/gpurt-quantbench ./cmd/gpurt-quantbench)")
  failed=1
  : >"$logs/quantbench.jsonl"
fi

: >"$logs/torch.jsonl"
if command -v python3 >/dev/null 2>&1 && [ -s "$logs/quantbench.jsonl" ]; then
  echo "== [torch] torch grouped mm"
  step_jsonl torch 40 "$logs/torch.jsonl" python3 scripts/gpu_quant_torch.py "$logs/quantbench.jsonl"
else
  summary+=("torch    skip     (no python3 or no bench results)")
fi

table() {
  bench_table "$logs/quantbench.jsonl" "$logs/torch.jsonl" <<'PY'
from benchrows import load_args, us
rows, by, order = load_args()
def ratio(o, g):
    return "%.2fx" % (o["gpu_us"] / g["gpu_us"]) if o and g and o.get("gpu_us", 0) > 0 and g.get("gpu_us", 0) > 0 else "-"
extra = [("gpurt int8 cutlass", "CUTLASS from n 9"), ("gpurt int8 wdq", "dequantizing GEMV"), ("gpurt int8 dequant+cuBLASLt", "dequant + cuBLASLt")]
extra = [e for e in extra if any(e[0] in by[nm] for nm in order)]
print("| int8 quantized matmul (MLX, group 64) | gpurt int8 us | gpurt bf16 gemm us | speedup | goal | | int8 GB/s | wall us int8 / bf16 |" + "".join(" %s us |" % e[1] for e in extra))
print("|---|---:|---:|---:|---:|---|---:|---|" + "---:|" * len(extra))
for name in order:
    d = by[name]
    q, b = d.get("gpurt int8"), d.get("gpurt bf16 gemm")
    if not q and not b:
        continue
    sp = b["gpu_us"] / q["gpu_us"] if q and b and q["gpu_us"] > 0 else 0
    n = int(name.split(" n=")[1].split()[0]) if " n=" in name else 0
    goal = 1.7 if n <= 8 else 1.2 if n <= 64 else 0.9
    ok = "" if not sp else ("met" if sp >= goal else "missed")
    gbs = "%.0f" % q["gb_s"] if q else "-"
    wall = "%.1f / %.1f" % (q["wall_us"], b["wall_us"]) if q and b else "-"
    print("| %s | %s | %s | %s | %.1fx | %s | %s | %s |" % (name, us(q), us(b), "%.2fx" % sp if sp else "-", goal, ok, gbs, wall) +
          "".join(" %s |" % us(d.get(e[0])) for e in extra))
print()
print("| grouped GEMM | gpurt us | own kernel us | cuBLASLt per expert us | torch us | vs per-expert | vs torch | gpurt TFLOP/s | notes |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for name in order:
    d = by[name]
    g = d.get("gpurt grouped")
    if not g:
        continue
    own = d.get("gpurt own kernel")
    pe = d.get("cuBLASLt per expert")
    t = d.get("torch._grouped_mm") or d.get("torch._scaled_grouped_mm") or d.get("torch")
    notes = "; ".join("%s: %s" % (x["impl"], x["note"]) for x in (g, pe, t) if x and x.get("note"))
    print("| %s | %s | %s | %s | %s | %s | %s | %.1f | %s |" % (name, us(g), us(own), us(pe), us(t), ratio(pe, g), ratio(t, g), g.get("tflops", 0), notes))
PY
}

{
  echo
  echo "== gpu_quant_bench.sh summary"
  grep -h "CUTLASS adapter" "$logs/plugin.log" 2>/dev/null
  for s in "${summary[@]}"; do echo "$s"; done
  for c in conform conform_dequant; do
    grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/$c.log" 2>/dev/null | tail -n 1 | sed "s/^/$c: /"
    grep -E 'FAIL|fail' "$logs/$c.log" 2>/dev/null | head -n 20
  done
  echo
  echo "speedup = gpurt bf16 gemm time / int8 time (GPU time per call, calls queued behind a sleep);"
  echo "vs per-expert / vs torch = their time / gpurt grouped time (> 1: gpurt is faster);"
  echo "own kernel = the same call with GPURT_CUDA_GROUPED=kernel (the fallback without CUTLASS)"
  echo
  if command -v python3 >/dev/null 2>&1 && [ -s "$logs/quantbench.jsonl" ]; then
    table
  else
    cat "$logs/quantbench.jsonl"
  fi
} | tee "$logs/summary.txt"

copy_out
exit $failed
