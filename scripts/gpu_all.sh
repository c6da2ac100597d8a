#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_all.sh [NAME...] — the one command of a GPU-machine session: runs the
# per-issue GPU scripts in order, each under a time limit, with the plugin
# that came with the tree (build/libgpurt_cuda.so, built on the development
# machine by `make gpu-artifacts`: FlashInfer's and CUTLASS's headers are too
# large to travel, so nothing is rebuilt there).
#
#   check      scripts/gpu_check.sh       C suites, conform, launch/copy/GEMM
#   conform    scripts/gpu_conform.sh     C ABI suite and the whole conform suite only
#   quant      scripts/gpu_quant_bench.sh quant conform and benchmarks
#   attention  scripts/gpu_attention.sh   attention conform and benchmarks
#   decodestep scripts/gpu_decodestep.sh  MLP decode step vs PyTorch
#   llama      scripts/gpu_llama.sh       the decoder end to end vs PyTorch
# and, named only (issue 24's measurements):
#   roofline   scripts/gpu_roofline.sh    decode against the torch.compile twin
#   gemv       scripts/gpu_gemv.sh        the decoders per configuration, A B A B
#   skinny     scripts/gpu_skinny.sh      the int8 GEMVs and decoders
#   ncu        scripts/gpu_ncu.sh         Nsight Compute on the decode kernels
#   profile    scripts/gpu_profile.sh     a decode step's kernels and driver calls
#
# With no NAME, every script of the first list that exists runs. A NAME may
# carry a tag, NAME.TAG (profile.i8), to run a script twice with different
# settings. Each script's own $OUT files are packed into $OUT/<name>.tgz
# (the device tool brings back few files); each one's printed tail goes to
# $OUT/<name>.txt and the summary is printed last. GPURT_ALL_LIMIT_<NAME>
# (seconds) overrides a script's limit; GPURT_ALL_ENV_<NAME> sets its
# environment, assignments separated by ";" (a value may hold spaces):
#   GPURT_ALL_ENV_PROFILE_I8='PRESETS=8b;BATCHES=1 32;LLAMA_ARGS=-weights int8'
# (<NAME>: the name upper-cased, its dot an underscore). The build comes
# from build/, or from .pick/b.txz when build/ has no plugin
# (scripts/gpu_pack.sh makes that archive: build/ itself is too large to
# travel beside the tree).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
export GPURT_PREBUILT=1
all=(check conform quant attention decodestep llama)
declare -A script=([check]=gpu_check.sh [conform]=gpu_conform.sh [quant]=gpu_quant_bench.sh [attention]=gpu_attention.sh
  [decodestep]=gpu_decodestep.sh [llama]=gpu_llama.sh [roofline]=gpu_roofline.sh [gemv]=gpu_gemv.sh
  [skinny]=gpu_skinny.sh [ncu]=gpu_ncu.sh [profile]=gpu_profile.sh)
declare -A limit=([check]=240 [conform]=120 [quant]=240 [attention]=300 [decodestep]=240 [llama]=330 [roofline]=580
  [gemv]=300 [skinny]=300 [ncu]=240 [profile]=240)
want=("$@")
[ ${#want[@]} -eq 0 ] && want=("${all[@]}")
out=${OUT:-$root/build/gpu_all}
mkdir -p "$out"
if [ ! -f build/libgpurt_cuda.so ] && [ -f .pick/b.txz ]; then
  echo "gpu_all: unpacking .pick/b.txz into build/"
  tar -xJf .pick/b.txz || exit 2
fi
chmod 755 build 2>/dev/null || true
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
lines=()
for n in "${want[@]}"; do
  base=${n%%.*}
  s=${script[$base]:-}
  if [ -z "$s" ] || [ ! -f "scripts/$s" ]; then
    lines+=("$(printf '%-11s %-8s %s' "$n" skip "no scripts/${s:-?}")")
    continue
  fi
  key=${n^^}
  key=${key//./_}
  var=GPURT_ALL_LIMIT_$key
  lim=${!var:-${limit[$base]}}
  var=GPURT_ALL_ENV_$key
  envs=()
  if [ -n "${!var:-}" ]; then
    IFS=';' read -r -a envs <<<"${!var}"
  fi
  sub=$(mktemp -d)
  t0=$(date +%s)
  echo "=================== $n: ${envs[*]+${envs[*]} }scripts/$s (limit ${lim}s)"
  OUT=$sub timeout --kill-after=10 "$lim" env ${envs[@]+"${envs[@]}"} bash "scripts/$s" >"$out/$n.txt" 2>&1
  rc=$?
  t1=$(date +%s)
  tail -n 60 "$out/$n.txt"
  (cd "$sub" && tar czf "$out/$n.tgz" . 2>/dev/null)
  rm -rf "$sub"
  state=ok
  [ $rc -ne 0 ] && state="rc=$rc"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && state=TIMEOUT
  lines+=("$(printf '%-11s %-8s %4ss' "$n" "$state" "$((t1 - t0))")")
done
echo "=================== gpu_all summary"
printf '%s\n' "${lines[@]}"
