#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_quant_tune.sh — ONE command on the GPU machine for tuning the int8
# matmul kernels (issue 12): the quant conformance checks on the default
# kernels and on the variants in $TUNE_CHECKS, then the GEMV rows (weights
# rotated through 512 MiB of copies, so no call finds them in L2, and not),
# and the prefill GEMM rows (n = 2048) for every CUTLASS variant in
# $TUNE_TILES (GPURT_CUDA_QGEMM_TILE names: cuda_cutlass_mixed.h; the
# experimental kernels need a plugin built with GPURT_CLM_EXPERIMENTS=1).
# Uses build/gpurt, build/gpurt-quantbench and build/libgpurt_cuda.so built
# elsewhere; prints one line per figure (impl, case, GPU us) and a summary.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
chmod 755 build 2>/dev/null; chmod 644 build/libgpurt_cuda.so 2>/dev/null
tiles=${TUNE_TILES:-"default dequant nopdl xprep 128x256 pp64x256 ppc2x1 swz2 rm"}
checks=${TUNE_CHECKS:-"default 128x256"}
out=${OUT:-$root/build/gpu_tune}
mkdir -p "$out"
rows=$out/tune.jsonl
: >"$rows"
qb() { # LABEL ENV... -- ARGS...: gpurt-quantbench rows relabelled "LABEL: impl"
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  timeout 120 env "${envs[@]}" build/gpurt-quantbench -plugin-path build "$@" 2>>"$out/tune.err" |
    grep '^{' | sed "s/\"impl\":\"/\"impl\":\"$label: /" >>"$rows"
}
for c in $checks; do
  if [ "$c" = default ]; then e=(GPURT_UNUSED=1); else e=(GPURT_CUDA_QGEMM_TILE=$c); fi
  echo "== conform quant/ with ${e[*]}"
  timeout 120 env "${e[@]}" build/gpurt conform --backend cuda --run '^quant/' 2>&1 | grep -E 'FAIL|passed'
done
qb gemv GPURT_UNUSED=1 -- -only gemv -rotate 512
qb gemv-norot GPURT_UNUSED=1 -- -only gemv
for t in $tiles; do
  case $t in
    default) qb "$t" GPURT_UNUSED=1 -- -only gemm ;;
    dequant) qb "$t" GPURT_CUDA_QGEMM=dequant -- -only gemm ;;
    *) qb "$t" GPURT_CUDA_QGEMM_TILE="$t" -- -only gemm ;;
  esac
done
python3 - "$rows" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("%-40s %-28s %8.1f us" % (r["impl"], r["name"], r["gpu_us"]) + (("  " + r["note"]) if r.get("note") else ""))
PY
