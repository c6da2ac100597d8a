#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_attention.sh — ONE command on the GPU machine (no Go, no network, no
# FlashInfer headers) for attention over a paged KV cache (issue 10). Run it
# from the repository root with these built HERE (the FlashInfer adapter is
# compiled where its headers are, scripts/build_cuda.sh):
#
#   bash scripts/build_cuda.sh build                 # libgpurt_cuda.so, with FlashInfer
#   CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt
#   CGO_ENABLED=0 go build -o build/gpurt-attnbench ./cmd/gpurt-attnbench
#   bash scripts/gpu_attention.sh
#
# Optional, for the FlashInfer comparison: scripts/build_fi_ref.sh (builds
# FlashInfer's own batch-decode module here into .whl/fi-ref/, with the
# apache-tvm-ffi wheel); carry .whl (gitignored). Without it the reference
# steps time torch SDPA only. FlashInfer's Python package itself is not
# used: its decode/prefill modules import nvidia-cutlass-dsl, cuda-python,
# tvm-ffi and ~340 of its modules at import time.
#
# Steps (each with a timeout; a failure is reported and the script goes on):
#   plugin    the plugin is there, its DT_NEEDED (libc family only)
#   conform   build/gpurt conform --backend cuda --run '^attention/'
#             (decode, prefill, GQA 1-8 incl. 7, page 1/16, NHD/HND, causal,
#             soft cap, plan reuse, append, unsupported, misuse; float64
#             references)
#   long      the long-context checks (--long): decode batch 64 x 8K, 32K,
#             ragged to 20K (the long prefills with GPURT_ATTN_LONG_PREFILL=1:
#             their float64 Go reference takes minutes)
#   bench     build/gpurt-attnbench: decode batch 1/16/64 x 1K/8K, causal
#             prefill shapes (bf16, 32/8 heads, dim 128, page 16)
#   bench_dk  the decode rows again with GPURT_CUDA_DECODE_KERNEL=decode
#             (FlashInfer's decode kernel, CUDA cores), rows "gpurt dk"
#   bench_tc  and with GPURT_CUDA_DECODE_KERNEL=prefill (its prefill kernel,
#             one query row a request: tensor cores), rows "gpurt tc"; the
#             default picks one of the two at each plan by the KV it reads
#   ref       python3 scripts/gpu_attention_ref.py ... sdpa: torch
#             scaled_dot_product_attention on the same shapes (contiguous K/V)
#   ref-fi    the same script ... fi: FlashInfer's own decode and prefill modules (plan,
#             run; PDL off and on) on the same shapes, when carried
# Then the table (markdown), last. SKIP="conform long" leaves those out. Logs and JSON lines in $OUT (else
# build/gpu_attention/). Exit status: 0 when every step passed.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
logs=${OUT:-$root/build/gpu_attention}
mkdir -p "$logs"
failed=0
summary=()

# step NAME TIMEOUT CMD... (scripts/lib/step.sh).
STEP_TAIL=12 STEP_ROW='%-12s %-14s %5ss' STEP_TIMEOUT_STATE=1
. "$root/scripts/lib/step.sh"

# SKIP: step names to leave out (conform, long: when another script of the
# same call ran them); step.sh's want reads skip.
skip=" ${SKIP:-} "

plugin_ok=0
echo "== [plugin] build/libgpurt_cuda.so"
if [ -f build/libgpurt_cuda.so ]; then
  chmod 755 build 2>/dev/null || true
  chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
  step plugin 60 bash -c 'ls -l build/libgpurt_cuda.so; nvidia-smi -L;
    if command -v readelf >/dev/null; then readelf -d build/libgpurt_cuda.so | grep NEEDED; fi;
    grep -a -o -m1 "FlashInfer 0[.0-9]*" build/libgpurt_cuda.so || { echo "no FlashInfer adapter in this plugin"; exit 1; }' &&
    plugin_ok=1
else
  summary+=("plugin       skip           (no build/libgpurt_cuda.so: build it here with scripts/build_cuda.sh build)")
  failed=1
fi

if [ -x build/gpurt ] && [ $plugin_ok = 1 ]; then
  if want conform; then
    echo "== [conform] attention checks on cuda"
    step conform 120 build/gpurt conform --backend cuda --run '^attention/'
  fi
  if want long; then
    echo "== [long] long-context decode checks"
    step long 120 build/gpurt conform --backend cuda --long --run '^attention/long/decode'
  fi
  # The long prefills' float64 Go reference takes minutes (hundreds of
  # GFLOP on one core): only when asked.
  if [ "${GPURT_ATTN_LONG_PREFILL:-0}" = 1 ]; then
    echo "== [long-prefill] long-context prefill checks (slow Go reference)"
    step long-prefill 400 build/gpurt conform --backend cuda --long --run '^attention/long/prefill'
  else
    summary+=("long-prefill skip           (GPURT_ATTN_LONG_PREFILL=1 runs them; their Go reference takes minutes)")
  fi
else
  summary+=("conform      skip           (no build/gpurt or no plugin)")
  failed=1
fi

: >"$logs/attnbench.jsonl"
if [ -x build/gpurt-attnbench ] && [ $plugin_ok = 1 ]; then
  echo "== [bench] gpurt-attnbench"
  step_jsonl bench 150 "$logs/attnbench.jsonl" build/gpurt-attnbench -plugin-path build
  # The decode rows again on each of FlashInfer's two kernels (the default
  # picks one at each plan): rows "gpurt dk" (decode kernel), "gpurt tc"
  # (prefill kernel, tensor cores).
  for kk in dk:decode tc:prefill; do
    echo "== [bench_${kk%%:*}] gpurt-attnbench -only decode with GPURT_CUDA_DECODE_KERNEL=${kk#*:}"
    step "bench_${kk%%:*}" 90 env GPURT_CUDA_DECODE_KERNEL="${kk#*:}" build/gpurt-attnbench -plugin-path build -only decode
    grep -h '^{' "$logs/bench_${kk%%:*}.log" | grep '"impl":"gpurt"' |
      sed "s/\"impl\":\"gpurt\"/\"impl\":\"gpurt ${kk%%:*}\"/" >>"$logs/attnbench.jsonl" || true
  done
else
  summary+=("bench        skip           (no build/gpurt-attnbench: CGO_ENABLED=0 go build -o build/gpurt-attnbench ./cmd/gpurt-attnbench)")
  failed=1
fi

: >"$logs/ref.jsonl"
if command -v python3 >/dev/null 2>&1; then
  echo "== [ref] torch SDPA"
  step_jsonl ref 120 "$logs/ref.jsonl" python3 scripts/gpu_attention_ref.py 50 sdpa
  # FlashInfer: its decode module built here (scripts/build_fi_ref.sh) and
  # the apache-tvm-ffi wheel, carried in .whl/fi-ref/; a separate process, so
  # that a failure there loses none of the figures above.
  fir=$root/.whl/fi-ref
  if [ -f "$fir/fi_batch_decode.so" ] && ls "$fir"/apache_tvm_ffi-*.whl >/dev/null 2>&1; then
    site=/tmp/gpurt-fi-site
    rm -rf "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$fir"/apache_tvm_ffi-*.whl >"$logs/ref-fi-install.log" 2>&1 || echo "tvm-ffi wheel did not install (see ref-fi-install.log)"
    echo "== [ref-fi] FlashInfer's own decode module"
    oldpp=${PYTHONPATH:-}
    export PYTHONPATH="$site${oldpp:+:$oldpp}" GPURT_FI_REF_DIR="$fir"
    step_jsonl ref-fi 120 "$logs/ref.jsonl" python3 scripts/gpu_attention_ref.py 50 fi
    export PYTHONPATH="$oldpp"
    unset GPURT_FI_REF_DIR
  else
    summary+=("ref-fi       skip           (no .whl/fi-ref/fi_batch_decode.so + apache_tvm_ffi wheel: scripts/build_fi_ref.sh, then carry .whl)")
  fi
else
  summary+=("ref          skip           (no python3)")
fi

bench_table "$logs/attnbench.jsonl" "$logs/ref.jsonl" >"$logs/table.md" <<'PY' || echo "(no table: python3 failed)" >"$logs/table.md"
from benchrows import read_args, us
rows = read_args()
by, order, notes = {}, [], []
for r in rows:
    if r.get("name") == "*":
        notes.append("%s: %s" % (r.get("impl"), r.get("note", "")))
        continue
    if r["name"] not in by:
        order.append(r["name"])
    by.setdefault(r["name"], {})[r["impl"]] = r
print("| shape | gpurt us | FlashInfer us (best path) | gpurt/FI speed | FI+PDL us | torch SDPA us | gpurt KV TB/s or TFLOP/s | plan us gpurt / FI | gpurt decode kernel us (KV TB/s) | gpurt prefill kernel us (KV TB/s) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in order:
    d = by[name]
    # FlashInfer's best path for the shape: its decode module or, for decode
    # shapes, its prefill module as its tensor-core decode ("tc").
    def best(*rs):
        rs = [r for r in rs if r and r.get("gpu_us", 0) > 0]
        return min(rs, key=lambda r: r["gpu_us"]) if rs else None
    g, t = d.get("gpurt"), d.get("torch_sdpa")
    f = best(d.get("flashinfer"), d.get("flashinfer_tc"))
    fp = best(d.get("flashinfer_pdl"), d.get("flashinfer_tc_pdl"))
    ratio = "-"
    if g and f and g.get("gpu_us", 0) > 0 and f.get("gpu_us", 0) > 0:
        ratio = "%.3f" % (f["gpu_us"] / g["gpu_us"])
    fig = "-"
    if g and g.get("gpu_us", 0) > 0:
        fig = "%.2f TB/s" % (g["kv_gb_s"] / 1e3) if g.get("kind") == "decode" else "%.0f TFLOP/s" % g["tflops"]
    plan = "%s / %s" % ("%.1f" % g["plan_us"] if g and g.get("plan_us") else "-",
                        "%.1f" % f["plan_us"] if f and f.get("plan_us") else "-")
    def kern(r):
        return "%s (%.2f)" % (us(r), r["kv_gb_s"] / 1e3) if r and r.get("gpu_us", 0) > 0 and r.get("kv_gb_s") else us(r)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (name, us(g), us(f), ratio, us(fp), us(t), fig, plan,
          kern(d.get("gpurt dk")), kern(d.get("gpurt tc"))))
    for x in (g, f, t):
        if x and x.get("note") and not x.get("gpu_us"):
            notes.append("%s %s: %s" % (name, x["impl"], x["note"]))
for impl in ("gpurt", "gpurt dk", "gpurt tc"):
    g = by.get("decode/b64/kv8k", {}).get(impl)
    if g and g.get("kv_gb_s"):
        tb = g["kv_gb_s"] / 1e3
        print("\nGoal decode b64 x 8K >= 3.6 TB/s of KV (%s): %.2f TB/s (%s)" % (impl, tb, "MET" if tb >= 3.6 else "missed"))
def fi_best(n):
    us_ = [by[n][k]["gpu_us"] for k in ("flashinfer", "flashinfer_tc") if by[n].get(k, {}).get("gpu_us")]
    return min(us_) if us_ else 0
rs = [fi_best(n) / by[n]["gpurt"]["gpu_us"] for n in order if by[n].get("gpurt", {}).get("gpu_us") and fi_best(n)]
if rs:
    print("Goal >= 0.98x FlashInfer's best path (both without PDL): worst %.3f, mean %.3f (%s)" % (min(rs), sum(rs) / len(rs),
          "MET" if min(rs) >= 0.98 else "missed"))
else:
    print("No FlashInfer figures (see notes): ratios against FlashInfer not measured.")
for n in notes:
    print("- " + n)
PY

echo
echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
for f in conform long long-prefill; do
  [ -f "$logs/$f.log" ] && { echo "$f: $(grep -E "^FAIL" "$logs/$f.log" | head -n 5)"; grep -E "[0-9]+ passed, [0-9]+ failed" "$logs/$f.log" | tail -n 1; }
done
echo
cat "$logs/table.md"
exit $failed
