#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_fuse_pick.sh — ONE command on the GPU machine (about 8 minutes; carry
# what `make gpu-artifacts` built: build/gpurt, build/llama,
# build/gpurt-quantbench, build/libgpurt_cuda.so) that measures ABI 1.10's
# fusions on CUDA and picks among them, all in one run:
#
#   conform     GPURT_CUDA_FUSE=1 gpurt conform: the prologue GEMMs against
#               float64, the rope append against the built-in, bit for bit
#   abi_suite   csrc/test/abi_suite.c with GPURT_CUDA_FUSE=1
#   gemv        scripts/gpu_gemv.sh with CFGS=fuse (quantbench's "n=1
#               rmsnorm" / "n=1 swiglu" rows beside the plain GEMV at every
#               decode shape) and LCFGS="fuse nopro norope auto" (the 1B and
#               8B decoders at batch 1 and 4, Llama 3.1's rope scaling, both
#               fusions, the rope append alone, the prologues alone, neither;
#               alternating A B C D A B C D)
#   pick        the configuration with the best geometric mean, over the 1B
#               and 8B graph rows at batch 1, of its tokens/s against auto's
#               (mean of the repetitions); auto unless another beats it by 1%
#   roofline    scripts/gpu_roofline.sh at batch 1, context 1K, bf16, with
#               the picked configuration's environment and llama flags: the
#               gpurt rows against the torch.compile twin and the bandwidth
#               of the same run
#
# Results in $OUT (default build/gpu_fuse_pick): gemv/ (llama.txt,
# quant.txt), roof/ (roofline.md), pick.txt, steps.txt. Knobs: TOTAL (s,
# 560), GEMV_BATCHES (the decoders' batches in gemv, 1,4), ROOF_TOTAL (s,
# 300), SKIP (step names). Exit status 0 when every step passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_fuse_pick 560
chmod 755 build 2>/dev/null || true
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
cc=${CC:-cc}

want conform && step conform 120 env GPURT_CUDA_FUSE=1 build/gpurt conform --backend cuda --plugin-path build \
  --run '^(gemm/.*prologue|attention/append/rope)'
if want abi_suite; then
  step build_abi_suite 60 "$cc" -std=c11 -D_GNU_SOURCE -O1 -Wall -Iabi -o build/abi_suite csrc/test/abi_suite.c -ldl &&
    step abi_suite 120 env GPURT_CUDA_FUSE=1 build/abi_suite "$root/build/libgpurt_cuda.so"
fi
want gemv && step gemv 240 env OUT="$out/gemv" SKIP=conform CFGS=fuse LCFGS="fuse nopro norope auto" \
  ROPE_SCALING=llama3 BATCHES="${GEMV_BATCHES:-1,4}" REPS=2 TOTAL=230 bash scripts/gpu_gemv.sh

# pick: llama.txt rows "1b gemv=fuse graph batch 1: 840.5 tok/s, ..."
pick=auto
if [ -s "$out/gemv/llama.txt" ]; then
  pick=$(python3 - "$out/gemv/llama.txt" <<'PY' | tee "$out/pick.txt" | tail -n 1
import collections, math, re, sys
tok = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) gemv=(\w+) graph batch 1: ([\d.]+) tok/s", line)
    if m:
        tok[(m.group(1), m.group(2))].append(float(m.group(3)))
mean = {k: sum(v) / len(v) for k, v in tok.items()}
presets = sorted({p for p, _ in mean})
best, best_g = "auto", 1.0
for cfg in ("fuse", "nopro", "norope"):
    r = [mean[(p, cfg)] / mean[(p, "auto")] for p in presets if (p, cfg) in mean and (p, "auto") in mean]
    if len(r) != len(presets) or not r:
        continue
    g = math.exp(sum(map(math.log, r)) / len(r))
    print("%s against auto, graph batch 1: %s, geometric mean %.3f" % (
        cfg, ", ".join("%s %.3f" % (p, x) for p, x in zip(presets, r)), g))
    if g > 1.01 and g > best_g:
        best, best_g = cfg, g
print(best)
PY
)
fi
echo "== picked: $pick"
e=()
flags=""
case $pick in
  fuse) e=(GPURT_CUDA_FUSE=1) ;;
  nopro) e=(GPURT_CUDA_FUSE=1); flags=-no-prologues ;;
  norope) e=(GPURT_CUDA_FUSE=1); flags=-no-rope-append ;;
esac
want roofline && step roofline "$(( $(budget_left) > 30 ? $(budget_left) - 10 : 20 ))" \
  env ${e[@]+"${e[@]}"} OUT="$out/roof" LLAMA_FLAGS="$flags" ROPE_SCALING=llama3 BATCHES=1 CTXS=1024 \
  SKIP="gpurt_1b_i8 gpurt_8b_i8" TOTAL="${ROOF_TOTAL:-300}" bash scripts/gpu_roofline.sh

echo
echo "== gpu_fuse_pick.sh summary ($(($(date +%s) - t_start)) s; picked $pick)"
printf '  %s\n' "${summary[@]}" | tee "$out/steps.txt"
exit $failed
