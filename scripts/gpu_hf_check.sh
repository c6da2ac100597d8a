#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_hf_check.sh — issue 25 on an NVIDIA GPU: gpurt's llama command
# (build/llama, -model DIR) against Hugging Face transformers on the same
# safetensors checkpoints, in one command of under 10 minutes:
#
#   0. preflight: the GPU, torch and transformers versions, the binaries
#   1. qwen2-small  Qwen2ForCausalLM, Qwen2.5-0.5B shapes (q/k/v biases, tied)
#   2. llama-1b     LlamaForCausalLM, Llama-3.2-1B shapes (tied, llama3 rope)
#   3. llama-8b     LlamaForCausalLM, Llama-3.1-8B shapes (llama3 rope),
#                   built on the GPU in bf16, saved in 5 GB shards
#   4. the report: $OUT/hf_check.md and $OUT/hf_check.json (and per model
#      $OUT/NAME.json with every step's figures, $OUT/hf_check.log the
#      steps' output: six files)
#
# Each model step (scripts/hf_check.py model NAME, its own process under
# its own time limit) creates the random-initialised model, saves it with
# save_pretrained, times from_pretrained, computes transformers' logits in
# bf16 and float32 for a 512-token prompt and 64 teacher-forced tokens at
# batch 8 (batch 1 is request 0), runs build/llama at batch 1 and 8, eager
# and graph, and compares the logits of the prefill's last token and of
# every decode step (see hf_check.py's doc). A failing or slow step is
# reported and the next one runs.
#
# Needs, carried from the machine that built them (make gpu-artifacts):
#   build/llama              CGO_ENABLED=0 go -C examples build -o ../build/llama ./llama
#   build/libgpurt_cuda.so   scripts/build_cuda.sh build
# and python3 with torch (CUDA) and transformers 5. No network.
#
# Knobs: OUT (results; default ./gpu_hf_check_out), HF_CHECK_WORK (the
# checkpoints, deleted after each step; default /tmp/gpurt_hf_check),
# HF_CHECK_MODELS (default "qwen2-small llama-1b llama-8b"), PROMPT (512),
# DECODE_STEPS (64), BATCHES (1,8), T_QWEN2 (110), T_1B (140), T_8B (290)
# seconds; HF_CHECK_BACKEND (cuda) and HF_CHECK_DEVICE (cuda): a check of
# this script where there is no GPU, e.g. HF_CHECK_BACKEND=mock
# HF_CHECK_DEVICE=cpu HF_CHECK_MODELS="tiny-llama tiny-qwen2" PROMPT=40
# DECODE_STEPS=8 BATCHES=1,3.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/gpu_hf_check_out}
work=${HF_CHECK_WORK:-/tmp/gpurt_hf_check}
py=${PYTHON:-python3}
models=${HF_CHECK_MODELS:-qwen2-small llama-1b llama-8b}
backend=${HF_CHECK_BACKEND:-cuda}
device=${HF_CHECK_DEVICE:-cuda}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out" "$work/logs"
# the step logs stay beside the checkpoints and are joined into one file
# of $OUT at the end (few files come back from the GPU machine)
logs=$work/logs
failed=0
summary=()
STEP_TAIL=${STEP_TAIL:-14}
STEP_TIMEOUT_STATE=1
# shellcheck source=scripts/lib/step.sh
. "$root/scripts/lib/step.sh"

echo "== [preflight]"
nvidia-smi -L 2>&1 | head -4
$py -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1 | tail -1
for f in build/llama build/libgpurt_$backend.so; do
  if [ ! -e "$f" ]; then
    echo "gpu_hf_check: $f is missing: run 'make gpu-artifacts' where Go is and carry build/" >&2
    exit 1
  fi
done
# the loader refuses folders and plugins that group or others can write
# (the carried files' modes may not have survived the trip)
chmod 755 build 2>/dev/null || true
chmod 644 "build/libgpurt_$backend.so" 2>/dev/null || true
ls -la build/llama "build/libgpurt_$backend.so"
df -h "$work" | tail -1
free -g | head -2

limit() {
  case $1 in
    qwen2-small) echo "${T_QWEN2:-110}" ;;
    llama-1b) echo "${T_1B:-140}" ;;
    llama-8b) echo "${T_8B:-290}" ;;
    *) echo 120 ;;
  esac
}

for m in $models; do
  echo "== [$m] (limit $(limit "$m")s)"
  step "$m" "$(limit "$m")" $py scripts/hf_check.py model "$m" --llama build/llama --backend "$backend" \
    --plugin-path "$root/build/libgpurt_$backend.so" --device "$device" --work "$work" --out "$out" \
    --prompt "${PROMPT:-512}" --steps "${DECODE_STEPS:-64}" --batches "${BATCHES:-1,8}" \
    --gpurt-timeout $(($(limit "$m") - 20))
  rm -rf "${work:?}/$m" "$work/$m"_logits_*
done

for m in $models; do
  [ -f "$logs/$m.log" ] && { echo "===== $m"; cat "$logs/$m.log"; }
done >"$out/hf_check.log"

echo "== [report]"
# shellcheck disable=SC2086 # the model names are words
$py scripts/hf_check.py report --out "$out" $models
rc=$?
echo
echo "== summary"
printf '%s\n' "${summary[@]}"
if [ $failed -ne 0 ] || [ $rc -ne 0 ]; then
  echo "gpu_hf_check: FAIL (details: $out/hf_check.log, $out/hf_check.md)"
  exit 1
fi
echo "gpu_hf_check: PASS"
