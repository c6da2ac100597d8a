#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_skinny.sh — ONE command on the GPU machine for the batched-decode int8
# GEMV (the skinny form, 8 < n <= 64) and the attention plan's memo, with
# what make gpu-artifacts built here (carry build/):
#
#   conform    build/gpurt conform --backend cuda --run '^(quant|attention)/'
#              (the new n = 12..64 cases against float64, and every
#              attention check with plans that keep their schedule)
#   gemv_pf<P> build/gpurt-quantbench -only gemv: int8 vs bf16 cuBLASLt,
#              n = 1, 8, 16, 32, 64 at 4096x4096 and 14336x4096, once per
#              GPURT_CUDA_QGEMV_PREFETCH value P in PFS (default: the
#              built-in distances), GPURT_CUDA_QGEMV_WARPS value W in
#              WARPS (default: the heuristic) and GPURT_CUDA_QGEMV_FETCH
#              value F in FETCHES (32 or 256: the L2's DRAM fetch for a
#              load of W), rows "gpurt int8 pf P[ warps W][ fetch F]"
#   gemv_<form> the same with GPURT_CUDA_QGEMV=<form> for each form in
#              FORMS (default: dequant factored; the skinny GEMV dequantizing,
#              or factored without the prepared x), rows "gpurt int8 <form>"
#   gemv_cutlass  the same with GPURT_CUDA_QMM_MIN_N=9 (n >= 9 on CUTLASS's
#              mixed-input GEMM, the former crossover), for the same-run ratio
#   int8       build/llama -weights int8 (or each of I8_WEIGHTS, e.g. "int8
#              int8-all": the LM head int8 too), I8_PRESETS (8b), batch 1 and 32,
#              context 1K, eager and graph: tokens/s, and graph tokens
#              against eager's step by step; once more per form in I8_FORMS
#              (GPURT_CUDA_QGEMV, e.g. dequant) for the same-run A/B
#   hostcost   build/llama -idle-steps, graph mode, 1B and 8B, batch 1 and
#              32, with the plan memo and with GPURT_CUDA_ATTN_PLAN_MEMO=0,
#              and per decode-kernel setting in KERNELS (auto: the plugin's
#              per-plan choice; decode, prefill: GPURT_CUDA_DECODE_KERNEL),
#              per GPURT_CUDA_PDL value in PDLS (1; "1 0": whether the
#              programmatic edges in a step graph cost its launch) and per
#              weights in HC_WEIGHTS (bf16; "bf16 int8"), alternating
#              (A B A B) so drift shows
# The int8 step also runs the same llama with bf16 weights (step bf16_<preset>,
# unless SKIP has bf16) for the same-run ratio. ROTATE: quantbench's -rotate
# MiB (the weights not resident in the L2).
# Logs and JSON lines in $OUT (default build/gpu_skinny). Knobs: SKIP (step
# names), PRESETS (1b 8b), PFS, WARPS, FETCHES, ROTATE, KERNELS, MEMOS
# (1 0), I8_PRESETS, I8_WEIGHTS, PRES (GPURT_CUDA_QGEMV_PRE values for the
# gemv step), I8_PRES (the same for the int8 decoder: one more run each,
# tagged pre<P>), I8_REPS (rounds of the int8 step, A B A B), CONFORM_RUN (conform's --run). Exit status 0 when every step passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_skinny 300
presets=${PRESETS:-1b 8b}

want conform && step conform 150 build/gpurt conform --backend cuda --plugin-path build --run "${CONFORM_RUN:-^(quant|attention)/}"
for pf in ${PFS:-default}; do
  for wp in ${WARPS:-default}; do
    for fe in ${FETCHES:-default}; do
      for pr in ${PRES:-default}; do
        e=()
        [ "$pf" = default ] || e+=(GPURT_CUDA_QGEMV_PREFETCH=$pf)
        [ "$wp" = default ] || e+=(GPURT_CUDA_QGEMV_WARPS=$wp)
        [ "$fe" = default ] || e+=(GPURT_CUDA_QGEMV_FETCH=$fe)
        [ "$pr" = default ] || e+=(GPURT_CUDA_QGEMV_PRE=$pr)
        tag="pf $pf"
        [ "$wp" = default ] || tag="$tag warps $wp"
        [ "$fe" = default ] || tag="$tag fetch $fe"
        [ "$pr" = default ] || tag="$tag pre $pr"
        want gemv && step_jsonl "gemv_pf${pf}_w${wp}_f${fe}_p${pr}" 60 "$out/quant.jsonl" env "${e[@]}" \
          build/gpurt-quantbench -plugin-path build -only gemv ${ROTATE:+-rotate $ROTATE} &&
          sed -i "s/\"impl\":\"gpurt int8\"/\"impl\":\"gpurt int8 $tag\"/" "$out/quant.jsonl"
      done
    done
  done
done
for form in ${FORMS:-dequant factored}; do
  want "gemv_$form" && step_jsonl "gemv_$form" 60 "$out/quant.jsonl" env GPURT_CUDA_QGEMV=$form \
    build/gpurt-quantbench -plugin-path build -only gemv &&
    sed -i "s/\"impl\":\"gpurt int8\"/\"impl\":\"gpurt int8 $form\"/" "$out/quant.jsonl"
done
want gemv_cutlass && step_jsonl gemv_cutlass 60 "$out/quant_cutlass.jsonl" env GPURT_CUDA_QMM_MIN_N=9 \
  build/gpurt-quantbench -plugin-path build -only gemv
if want int8; then
  for rep in $(seq 1 "${I8_REPS:-1}"); do
  [ "${I8_REPS:-1}" = 1 ] && rep=
  for p in ${I8_PRESETS:-8b}; do
    for w in ${I8_WEIGHTS:-int8} bf16; do
      [ "$w" = bf16 ] && ! want bf16 && continue
      for form in default ${I8_FORMS:-} ${I8_PRES:+$(printf 'pre%s ' $I8_PRES)}; do
        [ "$w" = bf16 ] && [ "$form" != default ] && continue
        e=()
        case $form in
        default) ;;
        pre*) e+=(GPURT_CUDA_QGEMV_PRE=${form#pre}) ;;
        *) e+=(GPURT_CUDA_QGEMV=$form) ;;
        esac
        tag=${w}_$p${form#default}${rep:+_r$rep}
        step "$tag" 120 env "${e[@]}" build/llama -plugin-path build/libgpurt_cuda.so -backend cuda -prompt 1 \
          -preset "$p" -weights $w -batch ${I8_BATCHES:-1,32} -ctx 1024 -steps 16 -warmup 2 -modes eager,graph
        python3 "$root/scripts/lib/llama_summary.py" "$out/$tag.log" "$w $form" | tee -a "$out/int8.txt"
      done
    done
  done
  done
fi
if want hostcost; then
  for rep in 1 2; do
    for memo in ${MEMOS:-1 0}; do
      for kern in ${KERNELS:-auto}; do
        for pdl in ${PDLS:-1}; do
          for w in ${HC_WEIGHTS:-bf16}; do
            e=(GPURT_CUDA_ATTN_PLAN_MEMO=$memo GPURT_CUDA_PDL=$pdl)
            [ "$kern" = auto ] || e+=(GPURT_CUDA_DECODE_KERNEL=$kern)
            for p in $presets; do
              step "hostcost_${p}_${w}_memo${memo}_${kern}_pdl${pdl}_$rep" 60 env "${e[@]}" build/llama \
                -plugin-path build/libgpurt_cuda.so -backend cuda -prompt 1 -preset "$p" -weights "$w" -batch 1,32 \
                -ctx 1024 -steps 32 -warmup 2 -modes graph -idle-steps
            done
          done
        done
      done
    done
  done
fi
echo
echo "== gpu_skinny.sh summary ($(($(date +%s) - t_start)) s)"
printf '  %s\n' "${summary[@]}"
for f in "$out"/hostcost_*.log; do
  [ -f "$f" ] && grep -h '^{' "$f" | sed "s|^|$(basename "$f" .log) |"
done
exit $failed
