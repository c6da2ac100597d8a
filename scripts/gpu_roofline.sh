#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_roofline.sh — issue 24's benchmark, ONE command on the GPU machine
# (no Go, no nvcc, no network there), within one 10-minute limit: decode
# tokens/s of gpurt (eager, and graph mode: one Graph.Launch per step where
# the plugin records every op, else the segments and which ops broke them)
# against a torch.compile twin written the way gpt-fast writes its model
# (static KV cache, mode="reduce-overhead", fullgraph=True) and the same
# twin captured as a torch CUDA graph, 1B- and 8B-class Llama shapes, batch
# 1/8/32/64, context 1K and 8K, bf16 (and int8 weights for gpurt); each row
# with its HBM use against the read bandwidth measured in the same run.
#
# Built elsewhere (carry ["build"]):  make gpu-artifacts
#   build/llama (examples/llama), build/libgpurt_cuda.so
#
# Steps, in this order (each under its own timeout, cut to what is left of
# the whole run's TOTAL seconds, minus the report's share; a failure is
# reported and the next step runs; every step prints its JSON lines as it
# goes, so a step cut short keeps the rows it finished):
#   (env.txt     GPU, driver, torch, the artifacts)
#   check        build/llama, 1B, batch 1 and 32, 16 steps: graph mode against eager
#                (tokens and request 0's logits every step; compared in the report)
#   bandwidth    python3 scripts/decode_twin.py bandwidth (bf16 x.sum() over 4 GiB, CUDA events)
#   gpurt_1b     build/llama -preset 1b, bf16, eager and graph, all batches and contexts
#   gpurt_8b     the same, 8B
#   gpurt_1b_i8  int8 weights (quantized at load), 1B, eager and graph
#   gpurt_8b_i8  int8, 8B, batch 1 and 32, context 1K
#   hostcost_<p> build/llama -idle-steps, graph mode, each preset, batch BATCHES,
#                the first context: host_us_per_step with the device idle before
#                each step (the bare cost of enqueueing one); hostcost_<p>_i8 the
#                same with int8 weights (the report's "idle" host-cost line; the
#                pipelined runs' host cost counts a launch blocked on a full queue);
#                their step graphs as Graphviz files in dot.tgz (GPURT_CUDA_GRAPH_DOT)
#   twin_1b      decode_twin.py twin --preset 1b (rows by priority: batch 1 and 32 first,
#                compile then graph at each shape; --budget: a row that would not fit is
#                skipped with a reason)
#   twin_8b      the same, 8B (what is left of TOTAL, at most TWIN_8B_S)
#   report       decode_twin.py report: roofline.json, roofline.md (the table), roofline.png
# Results in $OUT (default build/gpu_roofline): the logs, steps.txt and the
# report files. Exit status 0 when every step passed.
#
# Knobs: TOTAL (seconds for the whole run, 570), I8_WEIGHTS (int8; int8-all:
# the LM head int8 too, llama -weights), BATCHES (1,8,32,64), CTXS
# (1024,8192), STEPS_1B (32), STEPS_8B (16), TWIN_1B_S (170), TWIN_8B_S
# (200), TWIN_CDT (1: gpt-fast's coordinate-descent tuning in inductor),
# SKIP (space-separated step names to leave out), PYTHON (python3),
# LLAMA_FLAGS (more build/llama flags for every gpurt row, e.g.
# -no-prologues), ROPE_SCALING (none; llama3: the gpurt decoders with Llama 3.1's rope
# scaling, whose rotation the KV append can take with GPURT_CUDA_FUSE=1,
# which the script passes on like any environment),
# BACKEND (cuda; mock with PLUGIN=build/libgpurt_mock.so to try the script
# on a machine without a GPU, with DEVICE=cpu for the twin and PRESETS="tiny").
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_roofline 570
batches=${BATCHES:-1,8,32,64}
i8w=${I8_WEIGHTS:-int8}
ctxs=${CTXS:-1024,8192}
backend=${BACKEND:-cuda}
plugin=${PLUGIN:-$root/build/libgpurt_cuda.so}
presets=${PRESETS:-1b 8b}

# run NAME CAP CMD...: step with the smaller of CAP and what is left of
# TOTAL less the report's 20 s; skipped when under 15 s are left or NAME
# is in SKIP.
run() {
  local name=$1 cap=$2
  shift 2
  case "$skip" in *" $name "*)
    summary+=("$(printf '%-14s %-14s' "$name" skipped)")
    return 0 ;;
  esac
  local left=$(($(budget_left) - 20))
  if [ "$left" -lt 15 ]; then
    echo "== [$name] not run: ${left}s left of TOTAL=${total}s" | tee -a "$out/steps.txt"
    summary+=("$(printf '%-14s %-14s' "$name" no-time)")
    failed=1
    return 1
  fi
  local to=$((cap < left ? cap : left))
  echo "== [$name] (limit ${to}s, $(($(date +%s) - t_start))s into the run): $*" | tee -a "$out/steps.txt"
  STEP_ROW='%-14s %-14s %5ss' step "$name" "$to" "$@"
  local rc=$?
  echo "== [$name] rc=$rc at $(($(date +%s) - t_start))s" >>"$out/steps.txt"
  return $rc
}

env_info() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -n 2
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  "$py" -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' 2>&1 | tail -n 1
  ls -l "$root/build/llama" "$plugin" 2>&1
  git -C "$root" log -1 --oneline 2>/dev/null || true
}

gp=("$root/build/llama" -plugin-path "$plugin" -backend "$backend" -prompt 1 -rope-scaling "${ROPE_SCALING:-none}")
# shellcheck disable=SC2206 # LLAMA_FLAGS is a list of flags
gp+=(${LLAMA_FLAGS:-})
tw=("$py" "$root/scripts/decode_twin.py")
steps_for() { case $1 in 8b) echo "${STEPS_8B:-16}" ;; tiny) echo 4 ;; *) echo "${STEPS_1B:-32}" ;; esac; }

env_info 2>&1 | tee "$out/env.txt"
# graph mode against eager on the device: tokens and request 0's logits
# every step (the report compares them)
run check 60 "${gp[@]}" -preset "${presets%% *}" -batch 1,32 -ctx "${ctxs%%,*}" -steps 16 -warmup 0 -logits -logits-n 256 -modes eager,graph
run bandwidth 60 "${tw[@]}" bandwidth --gib "${BW_GIB:-4}"
for p in $presets; do
  s=$(steps_for "$p")
  run "gpurt_$p" 120 "${gp[@]}" -preset "$p" -batch "$batches" -ctx "$ctxs" -steps "$s" -warmup 2 -modes eager,graph
done
for p in $presets; do
  [ "$p" = 8b ] && continue
  s=$(steps_for "$p")
  run "gpurt_${p}_i8" 90 "${gp[@]}" -preset "$p" -weights "$i8w" -batch "$batches" -ctx "$ctxs" -steps "$s" -warmup 2 -modes eager,graph
done
case " $presets " in *" 8b "*)
  run gpurt_8b_i8 120 "${gp[@]}" -preset 8b -weights "$i8w" -batch 1,32 -ctx "${ctxs%%,*}" -steps "$(steps_for 8b)" -warmup 2 -modes eager,graph ;;
esac

# the bare host cost of a graph step: the device idle before each step
# (-idle-steps), so that no wait hides in the driver's calls
# (each step graph written as Graphviz, GPURT_CUDA_GRAPH_DOT: what a graph
# holds, node kinds and edges, beside its host cost; packed into dot.tgz)
for p in $presets; do
  for w in bf16 "$i8w"; do
    tag=hostcost_$p
    [ "$w" = bf16 ] || tag=${tag}_i8
    mkdir -p "$out/dot/$tag"
    run "$tag" 60 env GPURT_CUDA_GRAPH_DOT="$out/dot/$tag" "${gp[@]}" -preset "$p" -weights "$w" -batch "$batches" \
      -ctx "${ctxs%%,*}" -steps 32 -warmup 2 -modes graph -idle-steps
  done
done
[ -d "$out/dot" ] && tar -czf "$out/dot.tgz" -C "$out" dot 2>/dev/null && rm -rf "$out/dot"

for p in $presets; do
  s=$(steps_for "$p")
  cap=${TWIN_1B_S:-170}
  guess=60
  [ "$p" = 8b ] && cap=${TWIN_8B_S:-200} && guess=90
  left=$(($(budget_left) - 20))
  budget=$(((cap < left ? cap : left) - 10))
  [ "$budget" -lt 1 ] && budget=1
  run "twin_$p" "$cap" "${tw[@]}" twin --preset "$p" --batch "$batches" --ctx "$ctxs" --steps "$s" --warmup 3 \
    --budget "$budget" --compile-guess "$guess"
done
# the report: whatever the steps left
total=$((total + 20))
run report 20 "$py" "$root/scripts/decode_twin.py" report --out "$out" \
  "$out/bandwidth.log" "$out/check.log" "$out"/gpurt_*.log "$out"/hostcost_*.log "$out"/twin_*.log

echo
echo "== summary ($(date -u), $(($(date +%s) - t_start)) s)"
printf '  %s\n' "${summary[@]}" | tee -a "$out/steps.txt"
[ -f "$out/roofline.md" ] && cat "$out/roofline.md"
exit $failed
