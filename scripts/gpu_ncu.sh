#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_ncu.sh — ONE command on the GPU machine: Nsight Compute (ncu, there in
# the image) on the kernels a decode step spends its time in, one launch of
# each launch configuration, with what make gpu-artifacts built here (carry
# build/gpurt-quantbench, build/gpurt-attnbench, build/llama,
# build/libgpurt_cuda.so).
#
#   gemv   build/gpurt-quantbench -only gemv under ncu, kernels matching
#          GEMV_RE (the int8 decode GEMV and its skinny forms, and
#          cuBLASLt's bf16 GEMV-shaped kernels for the same shapes)
#   bgemv  build/gpurt-quantbench -only decode16 with GPURT_CUDA_FUSE=1
#          under ncu, kernels matching BGEMV_RE (the 16-bit GEMV and its
#          RMSNorm and SwiGLU prologue forms at the decode shapes: why the
#          prologue forms ran 15-45% slower on the H200, BENCHMARKS.md
#          2026-12-05)
#   attn   build/gpurt-attnbench -only decode under ncu, kernels matching
#          ATTN_RE (FlashInfer's decode and prefill kernels, the merge)
#   samp   build/llama, 1B, batch 1 and 32, sampled decoding (temperature
#          0.8, top-k 20, top-p 0.9, eager) and greedy, under ncu, kernels
#          matching SAMP_RE (sample_T, argmax_T): the sampler costs about
#          150 us a step at every batch on the H100 (BENCHMARKS.md,
#          seventeenth session); with ncu's SourceCounters and
#          InstructionStats sections too (where its warps stall: the
#          top-k histogram's shared-memory atomics, the searches' block
#          sums and barriers, or the loads)
#
# Each step writes <step>.txt: ncu's SpeedOfLight, MemoryWorkloadAnalysis,
# WarpStateStats, Occupancy and LaunchStats sections plus DRAM, L2 and L1
# byte counts per kernel, and <step>.csv: the same metrics one row a
# kernel. ncu is run with --clock-control none (the clocks stay as they are:
# the device README's METHOD.md). Knobs: SKIP (step names), GEMV_RE, BGEMV_RE,
# ATTN_RE, SAMP_RE, NCU (path to ncu), SKIP_LAUNCHES (launches of each configuration
# passed over first: the warm-up, default 3). Logs in $OUT (default
# build/gpu_ncu). Exit status 0 when every step passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_ncu 300
cuda=${CUDA_HOME:-/usr/local/cuda}
ncu=${NCU:-}
if [ -z "$ncu" ]; then
  ncu=$(command -v ncu || ls "$cuda"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
fi
[ -n "$ncu" ] && [ -x "$ncu" ] || { echo "gpu_ncu: no ncu on this machine (NCU=path)"; exit 2; }
"$ncu" --version | tail -n 1
gemv_re=${GEMV_RE:-'gpurt_qgemvw?f?_|gemv|gemvx|Kernel2|splitKreduce|sm90_xmma'}
bgemv_re=${BGEMV_RE:-'gpurt_bgemv_bf16_n1'}
attn_re=${ATTN_RE:-'BatchDecode|BatchPrefill|MergeStates|VariableLengthMerge'}
samp_re=${SAMP_RE:-'sample_|argmax_'}
metrics=dram__bytes_read.sum,lts__t_bytes.sum,l1tex__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active

# prof NAME RE CMD...: ncu over CMD, the kernels matching RE (more ncu
# sections before CMD through the array extra).
extra=()
prof() {
  local name=$1 re=$2
  shift 2
  local base=(--clock-control none --filter-mode per-launch-config --launch-skip "${SKIP_LAUNCHES:-3}"
    --launch-count 1 -k "regex:$re")
  step "$name" 200 "$ncu" "${base[@]}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats ${extra[@]+"${extra[@]}"} --metrics "$metrics" "$@" &&
    cp "$logs/$name.log" "$logs/$name.txt"
  step "${name}_csv" 200 "$ncu" "${base[@]}" --csv --metrics "$metrics" "$@" &&
    grep -E '^"' "$logs/${name}_csv.log" >"$logs/$name.csv"
}

want gemv && prof gemv "$gemv_re" build/gpurt-quantbench -plugin-path build -only gemv -iters 5
want bgemv && prof bgemv "$bgemv_re" env GPURT_CUDA_FUSE=1 build/gpurt-quantbench -plugin-path build -only decode16 \
  -iters 5
want attn && prof attn "$attn_re" build/gpurt-attnbench -plugin-path build -only decode -iters 5
if want samp; then
  extra=(--section SourceCounters --section InstructionStats)
  llama=(build/llama -plugin-path build/libgpurt_cuda.so -backend cuda -prompt 1 -preset 1b -batch 1,32 -ctx 1024
    -steps 6 -warmup 0 -modes eager)
  prof samp "$samp_re" "${llama[@]}" -temperature 0.8 -top-k 20 -top-p 0.9
  prof greedy "$samp_re" "${llama[@]}"
  extra=()
fi

echo
echo "gpu_ncu: $(($(date +%s) - t_start))s"
printf '%s\n' "${summary[@]}" | tee "$out/steps.txt"
exit $failed
