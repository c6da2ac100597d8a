#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# cuda_emu.sh [--ci] [--no-install] [--quick] [FILTER...]
#                          build plugins/cuda/emu/quant_emu_test.cc (which
#                          includes plugins/cuda/src/cuda_quant.cu with
#                          GPURT_CUDA_EMU: its kernels unmodified on
#                          plugins/cuda/emu/cuda_emu.h's CPU emulation of
#                          CUDA's execution model),
#                          plugins/cuda/emu/append_emu_test.cc (which
#                          includes plugins/cuda/src/cuda_append.cuh the
#                          same way) and plugins/cuda/emu/kernels_emu_test.cc
#                          (cuda_kernels.cu, the built-in kernels) with $CXX
#                          (default g++) and run them: the 16-bit GEMVs
#                          (gpurt_bgemv_*, the rmsnorm and swiglu
#                          prologues), the skinny int8 GEMVs
#                          (gpurt_qgemvw*) and, as the emulator's own
#                          check, the GPU-verified int8 register GEMVs
#                          (gpurt_qgemv*_n*), against float64 references;
#                          the paged KV append with ABI 1.10's rotary
#                          embedding (gpurt_kv_append_kernel) against the
#                          mock's append_run; the built-in argmax_T against
#                          gpurt.h's order, rmsnorm_T, add_rmsnorm_T and
#                          sample_T against float64, sample_rows_T's
#                          invariants; no GPU, no nvcc
#
# It needs the CUDA headers (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h,
# vector_types.h: their host conversions; and nv/target, which they
# include): $GPURT_CUDA_INC, else those of the CUDA 13.0 packages in
# .cuda-venv/ (scripts/build_cuda.sh installs them), else next to nvcc on
# PATH, else /usr/local/cuda/include. With none of them, it installs the
# three header packages of build_cuda.sh's pins (nvidia-cuda-runtime,
# nvidia-cuda-crt, nvidia-cuda-cccl; about 50 MB installed, from PyPI) into
# .cuda-venv/, as build_cuda.sh would (its later full install adds the rest);
# --no-install says what is missing and exits 0 (SKIP) instead; --ci exits
# 0 (SKIP) with the reason when the install fails.
#
# Each test prints one line per case and last "N passed, M failed"; this
# script runs all three (each even when one before it fails) and exits
# non-zero when a case of any fails, one aborts or a build fails.
# --quick runs each case once instead of three times (thread orders,
# cp.async landing late: see the tests); FILTERs keep the cases whose name
# contains one (quant_emu_test's: bgemv_, qgemv, emu/;
# append_emu_test's: append_; kernels_emu_test's: argmax_, rmsnorm, sample_). The binaries
# are kept in ${BUILD:-build}/cuda_emu/, each rebuilt when its sources,
# the flags or the compiler change. About 20 s of CPU to build them and
# 50 s to run them on the 2-core development VM.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cxx=${CXX:-g++}
ci=0
noinstall=0
args=()
for arg in "$@"; do
  case "$arg" in
    --ci) ci=1 ;;
    --no-install) noinstall=1 ;;
    --quick) args+=(-quick) ;;
    -h|--help) sed -n '4,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cuda_emu.sh: unknown flag $arg" >&2; exit 2 ;;
    *) args+=("$arg") ;;
  esac
done

say() { echo "cuda_emu.sh: $*" >&2; }
skip() {
  echo "cuda_emu.sh: SKIP: $*"
  exit 0
}
die() {
  say "FAILED: $*"
  exit 1
}

command -v "${cxx%% *}" >/dev/null 2>&1 || die "no C++ compiler: $cxx (set CXX)"

# ---- the CUDA headers ---------------------------------------------------------
# has_headers DIR: the headers the emulation includes are there.
has_headers() {
  [ -f "$1/cuda_fp16.h" ] && [ -f "$1/cuda_bf16.h" ] && [ -f "$1/cuda_fp8.h" ] &&
    [ -f "$1/vector_types.h" ] && [ -f "$1/crt/host_defines.h" ] && [ -f "$1/nv/target" ]
}
if [ -n "${GPURT_CUDA_INC:-}" ] && ! has_headers "$GPURT_CUDA_INC"; then
  die "GPURT_CUDA_INC=$GPURT_CUDA_INC lacks cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, vector_types.h, crt/host_defines.h or nv/target"
fi
find_headers() {
  local d
  if [ -n "${GPURT_CUDA_INC:-}" ]; then
    echo "$GPURT_CUDA_INC"
    return
  fi
  for d in "$root"/.cuda-venv/lib/python3*/site-packages/nvidia/cu*/include; do
    has_headers "$d" && { echo "$d"; return; }
  done
  if command -v nvcc >/dev/null 2>&1; then
    d=$(cd "$(dirname "$(command -v nvcc)")/.." && pwd)
    for d in "$d/include" "$d/targets/x86_64-linux/include" "$d/targets/sbsa-linux/include"; do
      has_headers "$d" && { echo "$d"; return; }
    done
  fi
  has_headers /usr/local/cuda/include && { echo /usr/local/cuda/include; return; }
}
inc=$(find_headers)
if [ -z "$inc" ]; then
  missing="no CUDA headers (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, vector_types.h, crt/host_defines.h, nv/target) in \$GPURT_CUDA_INC, .cuda-venv/, next to nvcc or in /usr/local/cuda/include"
  [ $noinstall = 1 ] && skip "$missing; run scripts/cuda_emu.sh without --no-install (or scripts/build_cuda.sh) to install them into .cuda-venv/"
  # build_cuda.sh's pins of the three packages that hold those headers.
  pins=()
  while IFS= read -r p; do pins+=("$p"); done < <(grep -oE 'nvidia-cuda-(runtime|crt|cccl)==[0-9.]+' "$root/scripts/build_cuda.sh")
  [ ${#pins[@]} -eq 3 ] ||
    die "$missing, and scripts/build_cuda.sh's pins of nvidia-cuda-runtime, nvidia-cuda-crt and nvidia-cuda-cccl were not found"
  venv=$root/.cuda-venv
  say "$missing: installing ${pins[*]} into $venv"
  # shellcheck source=lib/pipvenv.sh
  . "$root/scripts/lib/pipvenv.sh"
  pip_into_venv "$venv" "the CUDA headers" "${pins[@]}"
  inc=$(find_headers)
  [ -n "$inc" ] || die "${pins[*]} installed into $venv, but the headers were not found there"
fi

# ---- build (kept while its inputs are unchanged) ------------------------------------
out=${BUILD:-$root/build}
case "$out" in /*) ;; *) out=$root/$out ;; esac
out=$out/cuda_emu
mkdir -p "$out" || die "cannot create $out"
emu=$root/plugins/cuda/emu
src=$root/plugins/cuda/src
flags=(-std=c++17 -O2 -pthread -fno-strict-aliasing -ffp-contract=off -DGPURT_CUDA_EMU=1
       -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas)
# clang: cuda_quant.cu's `#pragma unroll` over loops it cannot unroll.
"$cxx" --version 2>/dev/null | grep -qi clang && flags+=(-Wno-pass-failed)
# build NAME SOURCES...: $out/NAME from plugins/cuda/emu/NAME.cc, unless
# the binary there was built from the same SOURCES (everything it
# includes), flags and compiler.
build() {
  local name=$1 bin=$out/$1 key t0
  shift
  key=$( { cat "$@"; echo "$cxx ${flags[*]} $inc"; "$cxx" --version 2>&1; } | sha256sum | cut -c1-16)
  if [ -x "$bin" ] && [ "$(cat "$bin.key" 2>/dev/null)" = "$key" ]; then
    say "$name: up to date ($bin)"
    return
  fi
  say "building $name with $cxx (CUDA headers: $inc)"
  t0=$(date +%s)
  rm -f "$bin.key"
  "$cxx" "${flags[@]}" -I"$inc" -o "$bin.tmp" "$emu/$name.cc" ||
    die "$cxx could not build plugins/cuda/emu/$name.cc"
  mv -f "$bin.tmp" "$bin"
  echo "$key" >"$bin.key"
  say "built $name in $(( $(date +%s) - t0 )) s"
}
build quant_emu_test "$emu/quant_emu_test.cc" "$emu/emu_test.h" "$emu/cuda_emu.h" "$src/cuda_quant.cu" "$src/cuda_pdl.cuh"
build append_emu_test "$emu/append_emu_test.cc" "$emu/emu_test.h" "$emu/cuda_emu.h" "$src/cuda_append.cuh" "$src/cuda_attention.h" \
  "$src/cuda_pdl.cuh" "$src/cuda_rope.cuh"
build kernels_emu_test "$emu/kernels_emu_test.cc" "$emu/emu_test.h" "$emu/cuda_emu.h" "$src/cuda_kernels.cu" \
  "$src/cuda_fused.cu" "$src/cuda_sample.cu" "$src/cuda_rope.cuh" "$src/cuda_pdl.cuh"

# ---- run ------------------------------------------------------------------------
failed=()
run() { # NAME WHAT: runs $out/NAME; WHAT says what its failure means
  local name=$1 t0 rc=0
  t0=$(date +%s)
  "$out/$name" ${args[@]+"${args[@]}"} || rc=$?
  say "$name ran in $(( $(date +%s) - t0 )) s"
  if [ $rc -ne 0 ]; then
    say "FAILED: $name exited $rc ($2)"
    failed+=("$name")
  fi
}
t_all=$(date +%s)
run quant_emu_test "a kernel of cuda_quant.cu disagrees with its reference, or the emulator aborted"
run append_emu_test "gpurt_kv_append_kernel (cuda_append.cuh) disagrees with the mock's append, or the emulator aborted"
run kernels_emu_test "a built-in row kernel of cuda_kernels.cu disagrees with gpurt.h's rule, or the emulator aborted"
if [ ${#failed[@]} -ne 0 ]; then
  say "FAILED: ${failed[*]} (all three ran, in $(( $(date +%s) - t_all )) s)"
  exit 1
fi
say "all three passed in $(( $(date +%s) - t_all )) s"
exit 0
