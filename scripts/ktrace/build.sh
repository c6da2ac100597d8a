#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# build.sh OUTDIR — builds OUTDIR/libgpurt_ktrace.so (scripts/ktrace/ktrace.c,
# a CUPTI kernel tracer for scripts/gpu_profile.sh) and puts CUPTI 13.0's
# libcupti.so.13 beside it (the GPU machine's toolkit may lack it). CUPTI
# comes from PyPI (nvidia-cuda-cupti, the 13.0 line of the driver there)
# into .cuda-venv (scripts/build_cuda.sh makes it). A developer tool: never
# shipped, not built by make build.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
outdir=${1:-$root/build}
venv=$root/.cuda-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
cu=$venv/lib/python3*/site-packages/nvidia/cu13
# shellcheck disable=SC2086
if ! ls $cu/include/cupti.h >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "nvidia-cuda-cupti==13.0.85"
fi
cu=$(echo $cu)
mkdir -p "$outdir"
cc=${CC:-cc}
"$cc" -O2 -Wall -Wextra -Werror -shared -fPIC -I"$cu/include" -o "$outdir/libgpurt_ktrace.so" \
  "$root/scripts/ktrace/ktrace.c" -L"$cu/lib" -l:libcupti.so.13 -lpthread -Wl,-rpath,'$ORIGIN'
cp "$cu/lib/libcupti.so.13" "$outdir/"
echo "built $outdir/libgpurt_ktrace.so (+ libcupti.so.13)"
