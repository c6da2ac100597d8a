#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_gemv.sh — ONE command on the GPU machine for the CUDA plugin's 16-bit
# GEMV (the GEMM slot's decode path, cuda_gemm.c gemv_takes) and its
# programmatic dependent launch (cu_device.pdl), with what make
# gpu-artifacts built here (carry build/):
#
#   conform        build/gpurt conform --backend cuda --run "$CONFORM_RUN"
#                  (default: every check; the GEMV-shaped cases against
#                  float64, graphs with it and with PDL edges),
#                  then '^gemm/' with GPURT_CUDA_GEMV_MAX_N=4 (every variant,
#                  n = 1 to 4, whatever the size of A)
#   q_<cfg>        build/gpurt-quantbench -only decode16 -rotate $ROTATE: the
#                  bf16 GEMM slot at the 8B and 1B decode shapes, n = 1, 2,
#                  4, 8, once per configuration in CFGS: lt
#                  (GPURT_CUDA_GEMV_MAX_N=0: cuBLASLt), auto (the defaults:
#                  the GEMV for n = 1 and A below 2^25 elements), n1, n4
#                  (GPURT_CUDA_GEMV_MAX_N=1 or 4: the GEMV up to that n, at
#                  every size of A), nopdl (the defaults with
#                  GPURT_CUDA_PDL=0: every kernel launched plainly), fuse
#                  (GPURT_CUDA_FUSE=1: the rows "n=1 rmsnorm" and "n=1
#                  swiglu", the GEMV with ABI 1.10's prologues, run; else
#                  they carry the refusal); rows "gpurt bf16 gemm <cfg>"
#                  in quant.jsonl
#   llama_<p>_<cfg>_<rep>  build/llama, PRESETS (1b 8b), batch BATCHES
#                  (1,4), context 1K, eager and graph, per configuration
#                  in LCFGS (base: GEMV and PDL off; lt, nopdl, auto, n1 as
#                  above; noconst: GPURT_CUDA_GEMV_CONST_A=0, the GEMV
#                  copying A only after its PDL wait; n1grid: n1 with
#                  GPURT_CUDA_GEMV_GRID=6; fuse: GPURT_CUDA_FUSE=1, ABI
#                  1.10's fusions on: at batch 1 the norms and silu_mul
#                  inside the GEMVs, and with ROPE_SCALING=llama3 the
#                  rotary embedding inside the KV append; nopro and
#                  norope: fuse with llama -no-prologues or
#                  -no-rope-append, one of the two; i8: -weights int8;
#                  pf<M>: -prefetch-l2 M, M MiB of each layer's output
#                  projection and gate/up weights asked into the L2
#                  before its attention; pre<P>: GPURT_CUDA_QGEMV_PRE=P;
#                  wave: GPURT_CUDA_QGEMV_WARPS=wave; samp:
#                  sampled decoding (temperature 0.8, top-k 20, top-p
#                  0.9: sample_T's cost against argmax_T's); i8all:
#                  -weights int8-all (the head too); idle: -idle-steps
#                  (the bare host cost of a step); old: build/llama.old
#                  instead of build/llama (an earlier build's decoder,
#                  carried beside it, against the same plugin);
#                  ltnone, ltinplace: GPURT_CUDA_LT_REDUCTION=none or
#                  inplace (cuBLASLt without split-k reduce kernels);
#                  ring, rings, ringl, reg: GPURT_CUDA_QGEMV=ring, rings,
#                  ringl or register (the int8 GEMV at n = 1 through one
#                  of its shared-memory rings, or the register GEMV);
#                  parts join with "+", e.g. i8+pf32), alternating A B C D
#                  A B C D: tokens/s, and graph tokens against eager's step
#                  by step (llama.txt)
#   q8_<form>_<rep>  build/gpurt-quantbench -only gemv with
#                  GPURT_CUDA_QGEMV=<form>, for each form in QFORMS (unset:
#                  none; e.g. "register ring rings ringl"), QREPS rounds
#                  (2) alternating: the int8 GEMV rows in quant8.jsonl and
#                  quant8.txt (µs per form and round; the register
#                  GEMV's time over the best other form's)
# Logs in $OUT (default build/gpu_gemv). Knobs: SKIP (step names), CFGS,
# QFORMS, QREPS, LCFGS, CONFORM_RUN, ROTATE (MiB, default 256), PRESETS, BATCHES, REPS
# (2), ROPE_SCALING (none or llama3: the decoders' -rope-scaling), TOTAL
# (s, 420).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_gemv 420

if want conform; then
  step conform 150 build/gpurt conform --backend cuda --plugin-path build --run "${CONFORM_RUN:-.}"
  step conform_nopdl 150 env GPURT_CUDA_PDL=0 build/gpurt conform --backend cuda --plugin-path build --run '^(gemm|graph|attention)/'
  step conform_n4 60 env GPURT_CUDA_GEMV_MAX_N=4 build/gpurt conform --backend cuda --plugin-path build --run '^gemm/'
fi
for cfg in ${CFGS:-lt nopdl auto}; do
  case $cfg in
    fuse) e=(GPURT_CUDA_FUSE=1) ;;
    lt) e=(GPURT_CUDA_GEMV_MAX_N=0) ;;
    n1) e=(GPURT_CUDA_GEMV_MAX_N=1) ;;
    n4) e=(GPURT_CUDA_GEMV_MAX_N=4) ;;
    nopdl) e=(GPURT_CUDA_PDL=0) ;;
    *) e=() ;;
  esac
  want "q_$cfg" && step "q_$cfg" 90 env ${e[@]+"${e[@]}"} build/gpurt-quantbench -plugin-path build \
    -only decode16 -rotate "${ROTATE:-256}" &&
    grep '^{' "$logs/q_$cfg.log" | sed "s/\"impl\":\"gpurt bf16 gemm\"/\"impl\":\"gpurt bf16 gemm $cfg\"/" >>"$out/quant.jsonl"
done
if [ -s "$out/quant.jsonl" ]; then
  python3 - "$out/quant.jsonl" <<'PY' | tee "$out/quant.txt"
import json, sys, collections
rows = collections.OrderedDict()
impls = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["name"], {})[r["impl"]] = r
    if r["impl"] not in impls:
        impls.append(r["impl"])
print("| m x k, n | " + " | ".join("%s us (GB/s)" % i.replace("gpurt bf16 gemm ", "") for i in impls) + " | lt / best GEMV |")
print("|---|" + "---:|" * (len(impls) + 1))
for name, d in rows.items():
    cells = []
    for i in impls:
        r = d.get(i)
        cells.append("%.2f (%.0f)%s" % (r["gpu_us"], r["gb_s"], " ERR" if r.get("note") else "") if r else "-")
    lt = d.get("gpurt bf16 gemm lt")
    g = [d[i]["gpu_us"] for i in impls if i in d and not i.endswith(" lt")]
    ratio = "%.2f" % (lt["gpu_us"] / min(g)) if lt and g else ""
    print("| %s | %s | %s |" % (name, " | ".join(cells), ratio))
PY
fi
# The int8 GEMV's forms at n = 1 (and the register GEMV at n <= 8), per
# shape: quantbench -only gemv once per form in QFORMS (GPURT_CUDA_QGEMV
# values: register, ring, rings, ringl), A B C A B C over QREPS rounds.
if [ -n "${QFORMS:-}" ]; then
  : >"$out/quant8.jsonl"
  for rep in $(seq 1 "${QREPS:-2}"); do
    for f in $QFORMS; do
      want "q8_${f}_$rep" && step "q8_${f}_$rep" 90 env GPURT_CUDA_QGEMV="$f" build/gpurt-quantbench -plugin-path build \
        -only gemv -rotate "${ROTATE:-256}" &&
        grep '^{' "$logs/q8_${f}_$rep.log" | grep '"impl":"gpurt int8"' |
        sed "s/\"impl\":\"gpurt int8\"/\"impl\":\"$f\",\"rep\":$rep/" >>"$out/quant8.jsonl"
    done
  done
  python3 - "$out/quant8.jsonl" <<'PY' | tee "$out/quant8.txt"
import json, sys, collections
rows, forms = collections.OrderedDict(), []
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["name"], {}).setdefault(r["impl"], []).append(r["gpu_us"])
    if r["impl"] not in forms:
        forms.append(r["impl"])
print("| m x k, n | " + " | ".join("%s us (rounds)" % f for f in forms) + " | register / best other |")
print("|---|" + "---:|" * (len(forms) + 1))
for name, d in rows.items():
    cells = [" / ".join("%.2f" % u for u in d[f]) if f in d else "-" for f in forms]
    best = {f: min(d[f]) for f in d}
    reg = best.get("register")
    others = [v for f, v in best.items() if f != "register"]
    ratio = "%.2f" % (reg / min(others)) if reg and others else ""
    print("| %s | %s | %s |" % (name, " | ".join(cells), ratio))
PY
fi
if want llama; then
  for rep in $(seq 1 "${REPS:-2}"); do
    for cfg in ${LCFGS:-base lt nopdl auto}; do
      x=()
      e=()
      bin=build/llama
      # A configuration is one or more parts joined by "+" (e.g. i8+pf32).
      for part in ${cfg//+/ }; do
        case $part in
          base) e+=(GPURT_CUDA_GEMV_MAX_N=0 GPURT_CUDA_PDL=0) ;;
          fuse) e+=(GPURT_CUDA_FUSE=1) ;;
          nopro) e+=(GPURT_CUDA_FUSE=1); x+=(-no-prologues) ;;
          norope) e+=(GPURT_CUDA_FUSE=1); x+=(-no-rope-append) ;;
          n1) e+=(GPURT_CUDA_GEMV_MAX_N=1) ;;
          lt) e+=(GPURT_CUDA_GEMV_MAX_N=0) ;;
          nopdl) e+=(GPURT_CUDA_PDL=0) ;;
          noconst) e+=(GPURT_CUDA_GEMV_CONST_A=0) ;;
          n1grid) e+=(GPURT_CUDA_GEMV_MAX_N=1 GPURT_CUDA_GEMV_GRID=6) ;;
          i8) x+=(-weights int8) ;;
          pf[0-9]*) x+=(-prefetch-l2 "${part#pf}") ;;
          pre[0-9]*) e+=(GPURT_CUDA_QGEMV_PRE="${part#pre}") ;;
          wave) e+=(GPURT_CUDA_QGEMV_WARPS=wave) ;;
          samp) x+=(-temperature 0.8 -top-k 20 -top-p 0.9) ;;
          i8all) x+=(-weights int8-all) ;;
          idle) x+=(-idle-steps) ;;
          old) bin=build/llama.old ;;
          ltnone) e+=(GPURT_CUDA_LT_REDUCTION=none) ;;
          ltinplace) e+=(GPURT_CUDA_LT_REDUCTION=inplace) ;;
          ring) e+=(GPURT_CUDA_QGEMV=ring) ;;
          rings) e+=(GPURT_CUDA_QGEMV=rings) ;;
          ringl) e+=(GPURT_CUDA_QGEMV=ringl) ;;
          reg) e+=(GPURT_CUDA_QGEMV=register) ;;
          *) ;;
        esac
      done
      for p in ${PRESETS:-1b 8b}; do
        step "llama_${p}_${cfg}_$rep" 120 env ${e[@]+"${e[@]}"} "$bin" -plugin-path build/libgpurt_cuda.so \
          -backend cuda -prompt 1 -preset "$p" -batch "${BATCHES:-1,4}" -ctx 1024 -steps 32 -warmup 2 \
          -modes eager,graph -rope-scaling "${ROPE_SCALING:-none}" ${x[@]+"${x[@]}"}
        python3 "$root/scripts/lib/llama_summary.py" "$logs/llama_${p}_${cfg}_$rep.log" "gemv=$cfg" | tee -a "$out/llama.txt"
      done
    done
  done
fi
echo
echo "== gpu_gemv.sh summary ($(($(date +%s) - t_start)) s)"
printf '  %s\n' "${summary[@]}"
exit $failed
