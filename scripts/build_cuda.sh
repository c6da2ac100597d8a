#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# build_cuda.sh [--ci] [OUTDIR] — builds the CUDA plugin OUTDIR/libgpurt_cuda.so
# (default OUTDIR: build/ in the repository root).
#
# The kernels (plugins/cuda/src/cuda_kernels.cu; cuda_quant.cu apart) are
# compiled by nvcc into a fatbin (SASS for sm_80 and sm_90a, PTX for
# compute_90; cached by content with the adapters' objects, see
# $objcache) that is embedded into the library as data
# (plugins/cuda/src/cuda_fatbin.S, cuda_quant_fatbin.S, .incbin); the host
# code is C, compiled with $CC (default cc), hidden visibility, a version
# script that exports only gpurt_plugin_negotiate, and no link against
# libcuda or cudart (libcuda.so.1 and libcublasLt.so.13 are dlopen'ed).
#
# nvcc: $NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc, else the
# CUDA 13.0 packages from PyPI installed into .cuda-venv/ (gitignored).
#
# --ci: what `make test` runs on a machine without a GPU. When the PyPI
# packages cannot be installed it prints why and exits 0 (skipped); when they
# install but the build fails it exits non-zero. Every build ends with the
# checks: exported symbols (only gpurt_plugin_negotiate) and DT_NEEDED (only
# the C library: libc, libm, libdl, libpthread, the dynamic loader). Host
# code: every plugins/cuda/src/cuda_*.c and every csrc/*.c but the CPU
# reference math (gp_dtype.c, gp_kernels.c, gp_gemm.c: the mock's, with
# libm); a new .c file is built without editing this script. Attention: the FlashInfer adapter
# plugins/cuda/src/cuda_attention.cu (see "attention" below), linked with the
# static CUDA runtime and a static libstdc++. CUTLASS (sm_90a, same linking):
# plugins/cuda/src/cuda_cutlass.cu (grouped_gemm) and cuda_cutlass_mixed.cu
# (quant_matmul's prefill: uint8 W dequantized in the GEMM's mainloop),
# compiled side by side (see "CUTLASS" below); GPURT_NO_CUTLASS=1 leaves both out.
set -uo pipefail

ci=0
noinstall=0
out=""
for arg in "$@"; do
  case "$arg" in
    --ci) ci=1 ;;
    --no-install) noinstall=1 ;;
    -h|--help) sed -n '3,31p' "$0"; exit 0 ;;
    -*) echo "build_cuda.sh: unknown flag $arg" >&2; exit 2 ;;
    *) out=$arg ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
out=${out:-$root/build}
cc=${CC:-cc}
src=$root/plugins/cuda/src

# The CUDA 13.0 line on PyPI (matches the GPU machine's driver 580 / CUDA 13.0).
# nvidia-nvvm must be pinned too: nvidia-cuda-nvcc pulls the newest one
# otherwise, whose cicc emits PTX that ptxas 13.0 rejects.
pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-cublas==13.1.0.3
)

say() { echo "build_cuda.sh: $*" >&2; }
skip() {
  echo "build_cuda.sh: SKIP: $*"
  exit 0
}
die() {
  say "FAILED: $*"
  exit 1
}

# ---- find nvcc ---------------------------------------------------------------
nvcc=${NVCC:-}
if [ -z "$nvcc" ]; then
  if command -v nvcc >/dev/null 2>&1; then
    nvcc=$(command -v nvcc)
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    nvcc=/usr/local/cuda/bin/nvcc
  fi
fi
if [ -z "$nvcc" ]; then
  venv=$root/.cuda-venv
  stamp=$venv/.gpurt-pins
  want=$(printf '%s\n' "${pins[@]}")
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    if [ $noinstall = 1 ]; then
      echo "build_cuda.sh: SKIP: no nvcc here and --no-install given (the CUDA 13.0 compiler from PyPI is ~870 MB: run 'make cuda CUDA=1' or 'scripts/build_cuda.sh' to fetch it)"
      exit 0
    fi
    say "no nvcc on PATH: installing ${pins[*]} into $venv"
    # shellcheck source=lib/pipvenv.sh
    . "$root/scripts/lib/pipvenv.sh"
    pip_into_venv "$venv" "the CUDA packages" "${pins[@]}"
    printf '%s\n' "${pins[@]}" >"$stamp"
  fi
  nvcc=$(find "$venv/" -path '*/site-packages/nvidia/*/bin/nvcc' -type f 2>/dev/null | head -n 1)
  [ -n "$nvcc" ] || die "the PyPI packages installed but no nvcc was found under $venv"
fi
[ -x "$nvcc" ] || die "nvcc at $nvcc is not executable"
cudaroot=$(cd "$(dirname "$nvcc")/.." && pwd)
inc=""
for d in "$cudaroot/include" "$cudaroot/targets/x86_64-linux/include" \
         "$cudaroot/targets/sbsa-linux/include"; do
  if [ -f "$d/cuda.h" ]; then inc=$d; break; fi
done
[ -n "$inc" ] || die "no cuda.h next to $nvcc (looked in $cudaroot/include)"
[ -f "$inc/cublasLt.h" ] || die "no cublasLt.h in $inc (install cuBLAS headers)"
say "nvcc: $nvcc ($("$nvcc" --version | tail -n 2 | head -n 1))"

# ---- build --------------------------------------------------------------------
mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The adapters' objects are cached by content, named by a key of everything
# that shapes them (sources, flags without this checkout's path, nvcc's
# version, the pinned headers' version), in $GPURT_NVCC_CACHE, else
# ${XDG_CACHE_HOME:-~/.cache}/gpurt/nvcc (shared by this user's checkouts,
# as Go's build cache is: a fresh clone on a machine that built them once
# links them in seconds instead of compiling FlashInfer and CUTLASS for
# minutes), else .fi/cache/ when that folder cannot be made or written.
# The folder is trusted only when it is a real folder (not a symbolic
# link) owned by this user and writable by nobody else: an object planted
# there would be linked into the plugin (and make dist records the
# plugin's checksum as trusted), and a lock file held by someone else
# would stall every build. An untrusted folder is passed over, with the
# reason, for .fi/cache/ (made private).
cache_untrusted() { # DIR: prints why DIR is not trusted; empty when it is
  local d=$1 owner mode
  [ -L "$d" ] && { echo "it is a symbolic link"; return; }
  [ -d "$d" ] || { echo "it is not a folder"; return; }
  read -r owner mode < <(stat -c '%u %a' "$d") || { echo "stat failed"; return; }
  [ "$owner" = "$(id -u)" ] || { echo "it is owned by uid $owner, not $(id -u)"; return; }
  (( (8#$mode & 8#022) == 0 )) || echo "group or others can write it (mode $mode)"
}
objcache=${GPURT_NVCC_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/gpurt/nvcc}
if ! { mkdir -p -m 700 "$objcache" 2>/dev/null && [ -w "$objcache" ]; }; then
  objcache=$root/.fi/cache
elif why=$(cache_untrusted "$objcache") && [ -n "$why" ]; then
  say "object cache $objcache not used: $why; using .fi/cache/"
  objcache=$root/.fi/cache
fi
if [ "$objcache" = "$root/.fi/cache" ]; then
  mkdir -p -m 700 "$objcache" || die "cannot create $objcache"
  why=$(cache_untrusted "$objcache")
  [ -z "$why" ] || die "object cache $objcache not usable: $why"
fi
# cached_nvcc OBJ LOCK WHAT SOURCE FLAGS...: nvcc FLAGS -o OBJ SOURCE, unless
# OBJ (in $objcache) is there already, under flock on LOCK (two builds never
# write one object). The adapters' compiles below go through it; exit
# status nvcc's.
cached_nvcc() {
  local obj=$1 lock=$2 what=$3 srcf=$4 t0
  shift 4
  (
    flock 9
    if [ -L "$obj" ] || [ ! -f "$obj" ]; then
      rm -f "$obj"
      say "compiling ${srcf#"$root"/} ($what) ..."
      t0=$(date +%s)
      "$nvcc" "$@" -o "$obj.tmp" "$srcf" || exit 1
      mv -f "$obj.tmp" "$obj"
      say "compiled $(basename "$srcf") in $(( $(date +%s) - t0 )) s"
    else
      say "$(basename "$srcf"): cached object $(basename "$obj")"
    fi
  ) 9>"$lock"
}

# ---- the plugin's own kernels: two fatbins ------------------------------------------
# make_fatbin NAME: plugins/cuda/src/NAME.cu as a fatbin for sm_80, sm_90a
# and compute_90 (PTX), cached as the adapters' objects are (keyed by every
# source and header of plugins/cuda/src, the flags and nvcc: a build that
# did not touch them takes seconds instead of a minute); prints its path.
fat_flags=(--fatbin -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
           -gencode arch=compute_90,code=compute_90)
make_fatbin() {
  local key
  key=$( { cat "$src"/*.cu "$src"/*.cuh "$src"/*.h; echo "$1 ${fat_flags[*]}"; "$nvcc" --version; } | sha256sum | cut -c1-16)
  cached_nvcc "$objcache/$1-$key.fatbin" "$objcache/lock" "sm_80, sm_90a, compute_90" "$src/$1.cu" "${fat_flags[@]}" >&2 ||
    die "nvcc could not compile plugins/cuda/src/$1.cu"
  echo "$objcache/$1-$key.fatbin"
}
fatbin=$(make_fatbin cuda_kernels) || exit 1
# The quantized and grouped matmul kernels (cuda_quant.cu): a fatbin of their
# own (cuda_quant_fatbin.S), the same targets.
qfatbin=$(make_fatbin cuda_quant) || exit 1

# ---- attention: the FlashInfer adapter (cuda_attention.cu) -------------------------
# FlashInfer's header-only kernels from ONE pinned wheel, flashinfer-python
# $fi_pin: its flashinfer/data/{include,cccl} (the wheel's CCCL before the
# toolkit's). Unpacked into .fi/ (gitignored) on first use, or taken from
# $GPURT_FLASHINFER_DATA. The adapter is compiled by nvcc into an object
# linked into the plugin with the static CUDA runtime and a static libstdc++
# (DT_NEEDED stays libc-only); FlashInfer's kernels run on the primary
# context the plugin makes current. Target: sm_90a (H100/H200) only by
# default, for --ci and full builds alike (so both share one cached object);
# GPURT_FI_SM80=1 adds sm_80 (A100; about 5 MB more: the adapter's object is
# about 5 MB per target with compressed device code).
# On other GPUs attention_create answers unsupported naming the compute
# capability. Compile time: the template instantiations take most of this
# script's time (256 s for sm_90a on 2 busy cores here); the object is
# cached (see $objcache above) keyed by the sources, flags and nvcc, so a rebuild
# that did not touch the adapter takes seconds.
fi_pin=0.7.4
fi_data=${GPURT_FLASHINFER_DATA:-$root/.fi/flashinfer/data}
fi_obj=""
fi8_obj=""
if { [ ! -f "$fi_data/include/flashinfer/attention/decode.cuh" ] ||
     [ ! -f "$fi_data/cutlass/include/cutlass/version.h" ]; } && [ -z "${GPURT_FLASHINFER_DATA:-}" ] &&
   [ $noinstall = 0 ]; then
  say "fetching flashinfer-python==$fi_pin (headers for the attention and CUTLASS adapters) into $root/.fi"
  py=${PYTHON:-python3}
  pyx=$py
  [ -x "$root/.cuda-venv/bin/python" ] && pyx=$root/.cuda-venv/bin/python
  mkdir -p "$root/.fi" && ( cd "$root/.fi" &&
    "$pyx" -m pip download --disable-pip-version-check -q --no-deps "flashinfer-python==$fi_pin" -d . &&
    "$pyx" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(".", [n for n in z.namelist() if n.startswith(("flashinfer/data/include/", "flashinfer/data/cccl/",
  "flashinfer/data/cutlass/include/", "flashinfer/data/cutlass/tools/util/include/"))])' \
      "flashinfer_python-$fi_pin-py3-none-any.whl" ) >/dev/null 2>&1 ||
    say "could not fetch flashinfer-python==$fi_pin"
fi
if [ -f "$fi_data/include/flashinfer/attention/decode.cuh" ]; then
  fi_gencode=(-gencode arch=compute_90a,code=sm_90a)
  [ "${GPURT_FI_SM80:-0}" = 1 ] && fi_gencode+=(-gencode arch=compute_80,code=sm_80)
  # FlashInfer's own JIT flags for these kernels (-use_fast_math, compressed
  # device code), so the kernels are the ones its Python API would build.
  fi_flags=(-c -O3 -std=c++17 -DNDEBUG -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
            -static-global-template-stub=false --expt-relaxed-constexpr -use_fast_math
            -Xfatbin=-compress-all --compress-mode=size
            -I"$fi_data/cccl/libcudacxx/include" -I"$fi_data/cccl/cub" -I"$fi_data/cccl/thrust"
            -I"$fi_data/include" -I"$src" "${fi_gencode[@]}")
  key=$( { cat "$src/cuda_attention.cu" "$src/cuda_attention.h" "$src/cuda_attention_fi.cuh" "$src/cuda_append.cuh" "$src/cuda_pdl.cuh" "$src/cuda_rope.cuh"; echo "${fi_flags[*]}" | sed "s|$root||g";
           "$nvcc" --version; echo "$fi_pin"; } | sha256sum | cut -c1-16)
  fi_obj=$objcache/cuda_attention-$key.o
  cached_nvcc "$fi_obj" "$objcache/lock" "FlashInfer $fi_pin; ${fi_gencode[*]}" "$src/cuda_attention.cu" \
    "${fi_flags[@]}" --threads "${GPURT_NVCC_THREADS:-2}" ||
    die "nvcc could not compile plugins/cuda/src/cuda_attention.cu"
  # fp8 KV caches (ABI 1.8): their own adapter over the same headers and
  # flags (cuda_attention_fp8.cu: e4m3 pages, head dim 128, f16/bf16
  # queries), cached apart so that cuda_attention.cu's object stays valid.
  # (cuda_append.cuh, which it includes for kv_append_slot, includes
  # cuda_pdl.cuh and cuda_rope.cuh: all three in its key.)
  fi8_key=$( { cat "$src/cuda_attention_fp8.cu" "$src/cuda_attention_fp8.h" "$src/cuda_attention.h" "$src/cuda_attention_fi.cuh"
               cat "$src/cuda_append.cuh" "$src/cuda_pdl.cuh" "$src/cuda_rope.cuh";
              echo "${fi_flags[*]}" | sed "s|$root||g"; "$nvcc" --version; echo "$fi_pin"; } | sha256sum | cut -c1-16)
  fi8_obj=$objcache/cuda_attention_fp8-$fi8_key.o
  cached_nvcc "$fi8_obj" "$objcache/lock" "FlashInfer $fi_pin fp8 KV; ${fi_gencode[*]}" "$src/cuda_attention_fp8.cu" \
    "${fi_flags[@]}" --threads "${GPURT_NVCC_THREADS:-2}" ||
    die "nvcc could not compile plugins/cuda/src/cuda_attention_fp8.cu"
else
  # No headers (a machine without network, such as the GPU machine): the
  # plugin is built without attention, which its slots then say.
  say "WARNING: no FlashInfer headers at $fi_data (flashinfer-python==$fi_pin not fetched): this plugin" \
      "is built WITHOUT attention (attention_create answers unsupported)"
fi
# ---- CUTLASS: quant_matmul's prefill (cuda_cutlass_mixed.cu) -----------------------
# CUTLASS's headers from the same pinned flashinfer-python wheel (its
# flashinfer/data/cutlass: include/ and tools/util/include), or from
# $GPURT_CUTLASS_DIR. Both CUTLASS adapters are sm_90a only (TMA and wgmma)
# and linked like the attention adapter (static cudart and libstdc++); each
# object is cached ($objcache) keyed by its sources, flags, nvcc and
# CUTLASS's version.h. Without the headers, or with GPURT_NO_CUTLASS=1,
# neither is built and the build says so.
# The mixed-input GEMM (uint8 W x bf16/f16 x, W dequantized in CUTLASS's
# mainloop; two kernels, both cooperative in tiles of 128 x 256 and
# launched with PDL: bf16 x in a 2 x 1 cluster, f16 x in 1 x 1) compiles in
# the background while cuda_cutlass.cu compiles in the foreground (each
# takes one core): 81-87 s alone here on 2 busy cores (97 s for the former
# three kernels side by side). Without it, quant_matmul's prefill
# dequantizes W and runs cuBLASLt.
cl_dir=${GPURT_CUTLASS_DIR:-$root/.fi/flashinfer/data/cutlass}
# The flags both CUTLASS adapters compile with (each adds its -D), and the
# cache key of adapter NAME (plugins/cuda/src/NAME.cu and NAME.h) under
# flags FLAGS...: the sources, the flags without this checkout's path,
# nvcc's version and CUTLASS's version.h.
cl_common=(-c -O3 -std=c++17 -DNDEBUG -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
           --expt-relaxed-constexpr -diag-suppress 20012 -gencode arch=compute_90a,code=sm_90a
           -I"$cl_dir/include" -I"$cl_dir/tools/util/include" -I"$src")
cl_key() {
  local name=$1
  shift
  { cat "$src/$name.cu" "$src/$name.h"; echo "$*" | sed "s|$root||g";
    "$nvcc" --version; cat "$cl_dir/include/cutlass/version.h"; } | sha256sum | cut -c1-16
}
clm_obj=""
clm_pid=""
clm_defs=()
if [ "${GPURT_NO_CUTLASS:-0}" != 1 ] &&
   [ -f "$cl_dir/include/cutlass/gemm/collective/sm90_mma_tma_gmma_rs_warpspecialized_mixed_input.hpp" ]; then
  clm_flags=("${cl_common[@]:0:4}" -DGPURT_HAVE_CUTLASS_MIXED "${cl_common[@]:4}")
  # GPURT_CLM_EXPERIMENTS=1 (tuning runs, never CI): four more bf16 kernels
  # (128x256 in 1 x 1, 128x128, pp64x256, ppc2x1) and the knob xprep
  # (GPURT_CUDA_QGEMM_TILE, cuda_cutlass_mixed.h); in the flags, so in the
  # cache key too. 154 s here (six kernels) instead of 81-87 s.
  [ "${GPURT_CLM_EXPERIMENTS:-0}" = 1 ] && clm_flags+=(-DGPURT_CLM_EXPERIMENTS)
  clm_obj=$objcache/cuda_cutlass_mixed-$(cl_key cuda_cutlass_mixed "${clm_flags[@]}").o
  cached_nvcc "$clm_obj" "$objcache/cutlass_mixed.lock" "CUTLASS mixed-input GEMM, sm_90a; in the background" \
    "$src/cuda_cutlass_mixed.cu" "${clm_flags[@]}" &
  clm_pid=$!
  clm_defs=(-DGPURT_HAVE_CUTLASS_MIXED)
else
  say "no CUTLASS headers at $cl_dir (or GPURT_NO_CUTLASS=1): quant_matmul's prefill dequantizes W and runs cuBLASLt in this build"
fi
# ---- CUTLASS: grouped GEMM (cuda_cutlass.cu) ---------------------------------------
# The ptr-array grouped kernels (other GPUs run the plugin's own kernel).
# Without them grouped_gemm runs the own kernel.
cl_obj=""
cl_defs=()
if [ "${GPURT_NO_CUTLASS:-0}" != 1 ] &&
   [ -f "$cl_dir/include/cutlass/gemm/collective/sm90_mma_array_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp" ]; then
  cl_flags=("${cl_common[@]:0:4}" -DGPURT_HAVE_CUTLASS "${cl_common[@]:4}")
  cl_obj=$objcache/cuda_cutlass-$(cl_key cuda_cutlass "${cl_flags[@]}").o
  cached_nvcc "$cl_obj" "$objcache/cutlass.lock" "CUTLASS grouped GEMM, sm_90a" "$src/cuda_cutlass.cu" \
    "${cl_flags[@]}" || die "nvcc could not compile plugins/cuda/src/cuda_cutlass.cu"
  cl_defs=(-DGPURT_HAVE_CUTLASS)
else
  say "no CUTLASS headers at $cl_dir (or GPURT_NO_CUTLASS=1): grouped_gemm runs the plugin's own kernel in this build"
fi
if [ -n "$clm_pid" ]; then
  wait "$clm_pid" || die "nvcc could not compile plugins/cuda/src/cuda_cutlass_mixed.cu"
fi
cudart_static=""
for d in "$cudaroot/lib64" "$cudaroot/lib" "$cudaroot/targets/x86_64-linux/lib"; do
  if [ -f "$d/libcudart_static.a" ]; then cudart_static=$d/libcudart_static.a; break; fi
done
[ -z "$fi_obj$cl_obj$clm_obj" ] || [ -n "$cudart_static" ] || die "no libcudart_static.a next to $nvcc"

cflags=(-std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden -Wall -Wextra
        -Wno-unused-parameter -I"$root/abi" -I"$root/csrc" -I"$src" -isystem "$inc")
# Extra host-compiler flags (make dist passes -ffile-prefix-map for
# reproducible builds).
# shellcheck disable=SC2206
cflags+=(${GPURT_CUDA_CFLAGS:-})
cflags+=("${cl_defs[@]}" "${clm_defs[@]}") # -DGPURT_HAVE_CUTLASS(_MIXED) when the adapters are linked
"$cc" -c -o "$tmp/fatbin.o" -DGPURT_FATBIN_FILE="\"$fatbin\"" "$src/cuda_fatbin.S" \
  || die "could not assemble plugins/cuda/src/cuda_fatbin.S"
objs=("$tmp/fatbin.o")
"$cc" -c -o "$tmp/quant_fatbin.o" -DGPURT_FATBIN_FILE="\"$qfatbin\"" "$src/cuda_quant_fatbin.S" \
  || die "could not assemble plugins/cuda/src/cuda_quant_fatbin.S"
objs+=("$tmp/quant_fatbin.o")
# Every plugins/cuda/src/cuda_*.c (one file per concept: cuda_plugin.c,
# cuda_memory.c, cuda_stream.c, cuda_module.c, cuda_gemm.c, ...).
for c in "$src"/cuda_*.c; do
  f=$(basename "$c" .c)
  extra=()
  [ "$f" = cuda_attention ] && [ -z "$fi_obj" ] && extra=(-DGPURT_CUDA_NO_FLASHINFER)
  [ "$f" = cuda_attention ] && [ -z "$fi8_obj" ] && extra+=(-DGPURT_CUDA_NO_FI8)
  "$cc" "${cflags[@]}" "${extra[@]}" -c -o "$tmp/$f.o" "$c" || die "could not compile plugins/cuda/src/$f.c"
  objs+=("$tmp/$f.o")
done
# Every csrc/*.c (the framework every plugin links: errors, ABI struct
# access, the contract's checks, handle tables, graphs, the ops' checks; a
# new file is compiled without an edit here) except the CPU reference math,
# which is the mock's and pulls in libm: gp_dtype.c (conversions),
# gp_kernels.c (the built-ins on the CPU), gp_gemm.c (the reference GEMM),
# gp_sample_rows.c (sample_rows_T on the CPU).
cpu_reference=" gp_dtype gp_kernels gp_gemm gp_sample_rows "
for c in "$root"/csrc/*.c; do
  f=$(basename "$c" .c)
  case "$cpu_reference" in *" $f "*) continue ;; esac
  "$cc" "${cflags[@]}" -c -o "$tmp/$f.o" "$c" || die "could not compile csrc/$f.c"
  objs+=("$tmp/$f.o")
done
lib=$out/libgpurt_cuda.so
if [ -n "$fi_obj$cl_obj$clm_obj" ]; then
  # The adapters: C++ and the CUDA runtime, both linked statically.
  "${CXX:-g++}" -shared -o "$lib.tmp" "${objs[@]}" ${fi_obj:+"$fi_obj"} ${fi8_obj:+"$fi8_obj"} ${cl_obj:+"$cl_obj"} ${clm_obj:+"$clm_obj"} \
    "$cudart_static" \
    -static-libstdc++ -static-libgcc \
    -Wl,--version-script="$src/exports.map" -Wl,-z,noexecstack -Wl,-z,now \
    -Wl,--no-undefined -Wl,--as-needed -ldl -lpthread -lrt || die "could not link $lib"
else
"$cc" -shared -o "$lib.tmp" "${objs[@]}" \
  -Wl,--version-script="$src/exports.map" -Wl,-z,noexecstack -Wl,-z,now \
  -Wl,--no-undefined -Wl,--as-needed -ldl -lpthread || die "could not link $lib"
fi
mv -f "$lib.tmp" "$lib"

# ---- checks ---------------------------------------------------------------------
syms=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u)
[ "$syms" = "gpurt_plugin_negotiate" ] ||
  die "$lib exports more than gpurt_plugin_negotiate:
$syms"
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|ld-linux*) ;;
    *) die "$lib needs $n (only the C library is allowed; libcuda is dlopen'ed)" ;;
  esac
done
say "ok: $lib exports only gpurt_plugin_negotiate; DT_NEEDED: $(echo "$needed" | tr "\n" " ")"
echo "$lib"
