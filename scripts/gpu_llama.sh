#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_llama.sh — issue 13 on an NVIDIA GPU: a Llama-style decoder through
# gpurt (build/llama, examples/llama) against its PyTorch twin
# (scripts/llama_torch.py), same seed, same weights.
#
#   1. the built-in row kernels' conformance checks on CUDA (gpurt conform --run kernel/)
#   2. the torch twin's hash self-test
#   3. correctness, 1B-class: prompt 16, 64 greedy steps, batch 1 and 32:
#      tokens of every request and request 0's logits, gpurt eager and
#      graph against torch eager (bf16 tolerance: 5% of the largest logit);
#      then torch fed gpurt's tokens (teacher forcing: random weights make
#      near-ties, where bf16 rounding may flip a free-running token)
#   4. speed: 1B-class and 8B-class at batch 1 and 32, context 1K and 8K
#      (zero K/V already in the cache), decode only: gpurt eager, gpurt
#      graph, torch eager, torch CUDA graph
#   5. gpurt int8 (MLX) weights, 1B-class, one short run
#   then the tokens/s table (last).
#
# Needs, from the machine that built them (CGO_ENABLED=0 Go, the CUDA plugin):
#   build/llama            go -C examples build -o ../build/llama ./llama
#   build/gpurt            go build -o build/gpurt ./cmd/gpurt
#   build/libgpurt_cuda.so scripts/build_cuda.sh build
# and python3 with torch (CUDA). Every step's failure is reported; later
# steps still run. Full logs under $OUT (default: ./gpu_llama_out).
#
# Knobs: STEPS_1B (64), STEPS_8B (16), STEP_TIMEOUT (seconds, 170), SKIP_8B=1.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/gpu_llama_out}
mkdir -p "$out"
py=${PYTHON:-python3}
steps1b=${STEPS_1B:-64}
steps8b=${STEPS_8B:-16}
tmo=${STEP_TIMEOUT:-170}
bin=$root/build/llama
plugin=$root/build/libgpurt_cuda.so
declare -a results=()

# step NAME CMD...: runs CMD with a timeout, its output in $out/NAME.log
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$out/steps.txt"
  timeout "$tmo" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local line="$name: rc=$rc ($((SECONDS - t0)) s)"
  [ $rc = 124 ] && line="$line TIMED OUT after ${tmo}s"
  if [ $rc != 0 ]; then
    line="$line FAILED: $(grep -v '^{' "$out/$name.log" | tail -n 1 | cut -c1-200)"
    tail -n 5 "$out/$name.log" | cut -c1-300 | sed 's/^/    /' >>"$out/steps.txt"
  fi
  echo "$line" | tee -a "$out/steps.txt"
  results+=("$line")
  return $rc
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 2
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  ls -l "$bin" "$root/build/gpurt" "$plugin" 2>&1
} | tee "$out/env.txt"

for f in "$bin" "$plugin"; do
  [ -e "$f" ] || echo "MISSING: $f (build it on the build machine, see the header)" | tee -a "$out/steps.txt"
done

gp=("$bin" -plugin-path "$plugin" -backend cuda)
tp=("$py" "$root/scripts/llama_torch.py")

# 1. kernels
step conform_kernels "$root/build/gpurt" conform --plugin-path "$plugin" --run 'kernel/'
# 2. hash
step torch_selftest "${tp[@]}" --selftest
# 3. correctness (1B)
step check_gpurt_1b "${gp[@]}" -preset 1b -batch 1,32 -ctx 0 -prompt 16 -steps "$steps1b" -warmup 0 -logits -modes eager,graph
step check_torch_1b "${tp[@]}" --preset 1b --batch 1,32 --ctx 0 --prompt 16 --steps "$steps1b" --warmup 0 --logits --modes eager,graph
step check_torch_1b_forced "${tp[@]}" --preset 1b --batch 1,32 --ctx 0 --prompt 16 --steps "$steps1b" --warmup 0 --logits --modes eager --force "$out/check_gpurt_1b.log"
step compare_1b "$py" "$root/scripts/llama_compare.py" check "$out/check_gpurt_1b.log" <(cat "$out/check_torch_1b.log" "$out/check_torch_1b_forced.log" 2>/dev/null)
# 4. speed
step speed_gpurt_1b "${gp[@]}" -preset 1b -batch 1,32 -ctx 1024,8192 -prompt 1 -steps "$steps1b" -warmup 3
step speed_torch_1b "${tp[@]}" --preset 1b --batch 1,32 --ctx 1024,8192 --prompt 1 --steps "$steps1b" --warmup 3
if [ "${SKIP_8B:-0}" != 1 ]; then
  step speed_gpurt_8b "${gp[@]}" -preset 8b -batch 1,32 -ctx 1024,8192 -prompt 1 -steps "$steps8b" -warmup 2
  step speed_torch_8b "${tp[@]}" --preset 8b --batch 1,32 --ctx 1024,8192 --prompt 1 --steps "$steps8b" --warmup 2
fi
# 5. int8 weights (gpurt only; eager: graphs do not record quant_matmul)
step speed_gpurt_1b_int8 "${gp[@]}" -preset 1b -weights int8 -batch 1,32 -ctx 1024 -prompt 1 -steps 16 -warmup 2 -modes eager

echo
echo "== summary ($(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
for r in "${results[@]}"; do echo "  $r"; done
echo
grep -h '^check:' "$out/compare_1b.log" 2>/dev/null | sed 's/^/  /'
echo
"$py" "$root/scripts/llama_compare.py" table "$out"/speed_*.log 2>&1 | tee "$out/table.txt"
