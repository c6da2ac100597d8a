#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_quant_bench.sh — ONE command on the GPU machine (CUDA toolkit at
# /usr/local/cuda, no Go, no network) for the 1.4 ops (issue 12). Run it
# from the repository root with these built elsewhere with CGO_ENABLED=0:
#
#   CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt
#   CGO_ENABLED=0 go build -o build/gpurt-quantbench ./cmd/gpurt-quantbench
#   bash scripts/gpu_quant_bench.sh
#
# Steps (each with a timeout; a failure is reported and the script goes on):
#   build     scripts/build_cuda.sh build (nvcc; its time is printed)
#   conform   build/gpurt conform --backend cuda --run '^(quant|grouped)/'
#             (every quantized and grouped check against float64
#             references, on the H200's large shapes)
#   bench     build/gpurt-quantbench: int8 GEMV vs bf16 cuBLASLt GEMV
#             (4096x4096 and 14336x4096, n = 1 and 8), int8 GEMM at
#             n = 2048 vs bf16 cuBLASLt, grouped GEMM of 8 and 64 experts
#             (skewed rows; bf16 and fp8 block scales) vs one cuBLASLt GEMM
#             per expert
#   torch     python3 scripts/gpu_quant_torch.py: torch._grouped_mm (bf16)
#             and torch._scaled_grouped_mm (fp8) on the same grouped cases
# Then the table. Logs in build/gpu_quant/; with $OUT set, copied there
# (summary.txt, quantbench.jsonl, torch.jsonl, the logs).
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

# step NAME TIMEOUT CMD...: runs CMD, its output to $logs/NAME.log.
step() {
  local name=$1 to=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$to" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  t1=$(date +%s)
  tail -n 15 "$logs/$name.log"
  local st=ok
  if [ $rc -ne 0 ]; then
    st="FAIL($rc)"
    failed=1
  fi
  summary+=("$(printf '%-8s %-8s %5ss' "$name" "$st" $((t1 - t0)))")
  echo "== [$name] $st in $((t1 - t0))s"
  return $rc
}

echo "== [build] scripts/build_cuda.sh build"
step build 900 bash scripts/build_cuda.sh build
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true

if [ -x build/gpurt ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [conform] quant and grouped checks on cuda"
  step conform 900 build/gpurt conform --backend cuda --run '^(quant|grouped)/'
else
  summary+=("conform  skip     (no build/gpurt or no plugin)")
  failed=1
fi

if [ -x build/gpurt-quantbench ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [bench] gpurt-quantbench"
  step bench 900 build/gpurt-quantbench -plugins build
  grep '^{' "$logs/bench.log" >"$logs/quantbench.jsonl" || true
else
  summary+=("bench    skip     (no build/gpurt-quantbench; build it with CGO_ENABLED=0 go build -o build/gpurt-quantbench ./cmd/gpurt-quantbench)")
  failed=1
  : >"$logs/quantbench.jsonl"
fi

if command -v python3 >/dev/null 2>&1 && [ -s "$logs/quantbench.jsonl" ]; then
  echo "== [torch] torch grouped mm"
  step torch 600 python3 scripts/gpu_quant_torch.py "$logs/quantbench.jsonl"
  grep '^{' "$logs/torch.log" >"$logs/torch.jsonl" || true
else
  summary+=("torch    skip     (no python3 or no bench results)")
  : >"$logs/torch.jsonl"
fi

table() {
  python3 - "$logs/quantbench.jsonl" "$logs/torch.jsonl" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    for line in open(path):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
by = {}
order = []
for r in rows:
    if r["name"] not in by:
        order.append(r["name"])
    by.setdefault(r["name"], {})[r["impl"]] = r
def us(r):
    return "%9.1f" % r["gpu_us"] if r and r["gpu_us"] > 0 else "        -"
print("%-48s %9s %9s %7s %6s  %s" % ("int8 quantized matmul (MLX, group 64)", "int8 us", "bf16 us", "speedup", "goal", "int8 TFLOP/s | GB/s, wall us int8/bf16"))
for name in order:
    d = by[name]
    q, b = d.get("gpurt int8"), d.get("cuBLASLt bf16")
    if not q and not b:
        continue
    sp = b["gpu_us"] / q["gpu_us"] if q and b and q["gpu_us"] > 0 else 0
    goal = "1.7x" if " n=1" in name or " n=8" in name else "0.9x"
    ok = "" if not sp else ("MET" if sp >= float(goal[:-1]) else "missed")
    extra = "%.1f TFLOP/s, %.0f GB/s; wall %.1f / %.1f" % (q["tflops"], q["gb_s"], q["wall_us"], b["wall_us"]) if q and b else ""
    notes = "; ".join(x.get("note", "") for x in (q, b) if x and x.get("note"))
    print("%-48s %s %s %6.2fx %6s %-6s %s %s" % (name, us(q), us(b), sp, goal, ok, extra, notes))
print()
print("%-48s %9s %9s %9s %9s %9s  %s" % ("grouped GEMM", "gpurt us", "per-exp", "torch us", "vs per-e", "vs torch", "gpurt TFLOP/s, notes"))
for name in order:
    d = by[name]
    g = d.get("gpurt grouped")
    if not g:
        continue
    pe = d.get("cuBLASLt per expert")
    t = d.get("torch._grouped_mm") or d.get("torch._scaled_grouped_mm") or d.get("torch")
    def ratio(o):
        return "%8.2fx" % (o["gpu_us"] / g["gpu_us"]) if o and o["gpu_us"] > 0 and g["gpu_us"] > 0 else "        -"
    notes = "; ".join("%s: %s" % (x["impl"], x["note"]) for x in (g, pe, t) if x and x.get("note"))
    print("%-48s %s %s %s %s %s  %.1f TFLOP/s %s" % (name, us(g), us(pe), us(t), ratio(pe), ratio(t), g["tflops"], notes))
PY
}

{
  echo
  echo "== gpu_quant_bench.sh summary"
  echo "build time (nvcc, both fatbins, 3 targets each): see the build line below"
  for s in "${summary[@]}"; do echo "$s"; done
  grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/conform.log" 2>/dev/null | tail -n 1 | sed 's/^/conform: /'
  grep -E 'FAIL|fail' "$logs/conform.log" 2>/dev/null | head -n 20
  echo
  if command -v python3 >/dev/null 2>&1 && [ -s "$logs/quantbench.jsonl" ]; then
    table
  else
    cat "$logs/quantbench.jsonl"
  fi
  echo
  echo "speedup = cuBLASLt bf16 time / int8 time (GPU time per call, calls queued behind a sleep);"
  echo "vs per-e / vs torch = their time / gpurt grouped time (> 1: gpurt is faster)"
} | tee "$logs/summary.txt"

if [ -n "${OUT:-}" ]; then
  cp "$logs"/*.txt "$logs"/*.jsonl "$logs"/*.log "$OUT"/ 2>/dev/null || true
fi
exit $failed
