#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_check.sh — ONE command on the GPU machine (CUDA toolkit at
# /usr/local/cuda, no Go, no network). Run it from the repository root with
# build/gpurt (a CGO_ENABLED=0 binary built elsewhere) present:
#
#   bash scripts/gpu_check.sh
#
# It builds build/libgpurt_cuda.so with nvcc, the C smoke and fault tests and
# the raw C baseline (bench/raw/rawbench.c), then runs: the smoke test, the
# fault test, `gpurt probe`, `gpurt conform --backend cuda` and
# `gpurt bench --json` (when those subcommands exist), and rawbench. Each
# step has a timeout; a failing step is reported and the script goes on.
# Full logs go to $OUT/gpu_check/ (when $OUT is set) or build/gpu_check/;
# a short summary table is printed LAST. Exit status: 0 when every step that
# ran passed, 1 otherwise.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
cc=${CC:-cc}
logs=${OUT:+$OUT/gpu_check}
logs=${logs:-$root/build/gpu_check}
mkdir -p "$logs" build
chmod 755 build 2>/dev/null || true

names=()
states=()
secs=()
notes=()

# step NAME TIMEOUT_S CMD... — runs CMD with a timeout, logging to $logs/NAME.log.
step() {
  local name=$1 to=$2
  shift 2
  local log="$logs/$name.log"
  echo "== [$name] $*" >"$log"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$to" "$@" >>"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local dt
  dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  local note
  note=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    states+=("ok")
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    states+=("TIMEOUT")
    note="${note:+$note; }timed out after ${to}s"
  else
    states+=("FAIL($rc)")
    [ -z "$note" ] && note=$(grep -v '^==' "$log" | tail -n 1 | cut -c1-90)
  fi
  names+=("$name")
  secs+=("$dt")
  notes+=("$note")
  tail -n 25 "$log"
  echo "== [$name] exit $rc in ${dt}s"
  return $rc
}

skip() {
  names+=("$1")
  states+=("skip")
  secs+=("-")
  notes+=("$2")
  echo "== [$1] skipped: $2" | tee "$logs/$1.log"
}

has_cmd() { # has_cmd SUBCOMMAND: does build/gpurt know it?
  [ -x build/gpurt ] && build/gpurt help 2>&1 | grep -qE "^\s+$1\b"
}

# ---- environment ------------------------------------------------------------
step env 60 bash -c "uname -a; nvidia-smi; nvcc --version; $cc --version | head -n 1;
  ls -la build/; ls -la $cuda/lib64/libcublasLt.so* $cuda/targets/*/lib/libcublasLt.so* 2>/dev/null; true"

# ---- builds -----------------------------------------------------------------
step build_plugin 600 bash scripts/build_cuda.sh build
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
step oob_ptx 120 nvcc -ptx -arch=compute_80 -o build/oob.ptx plugins/cuda/testdata/oob.cu
tflags=(-std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Iabi -Iplugins/cuda/test)
step build_smoke 120 "$cc" "${tflags[@]}" -o build/cuda_smoke_test plugins/cuda/test/smoke_test.c -ldl -lpthread -lm
step build_fault 120 "$cc" "${tflags[@]}" -o build/cuda_fault_test plugins/cuda/test/fault_test.c -ldl
step build_rawbench 120 "$cc" -O2 -std=c11 -D_GNU_SOURCE -I"$cuda/include" bench/raw/rawbench.c \
  -L"$cuda/lib64" -L"$cuda/lib64/stubs" -Wl,-rpath,"$cuda/lib64" -lcublasLt -lcuda -lm -o build/rawbench

# ---- plugin tests (no Go needed) ----------------------------------------------
if [ -f build/libgpurt_cuda.so ] && [ -x build/cuda_smoke_test ]; then
  step smoke_test 600 build/cuda_smoke_test "$root/build/libgpurt_cuda.so" build/oob.ptx
else
  skip smoke_test "plugin or test not built"
fi
if [ -f build/libgpurt_cuda.so ] && [ -x build/cuda_fault_test ] && [ -f build/oob.ptx ]; then
  step fault_test 300 build/cuda_fault_test "$root/build/libgpurt_cuda.so" build/oob.ptx
else
  skip fault_test "plugin, test or oob.ptx not built"
fi

# ---- gpurt (the Go binary) ------------------------------------------------------
if [ -x build/gpurt ]; then
  step gpurt_probe 120 build/gpurt probe
  step gpurt_probe_json 120 build/gpurt probe --json
  if has_cmd conform; then
    step conform_cuda 600 build/gpurt conform --backend cuda
  else
    skip conform_cuda "build/gpurt has no conform subcommand"
  fi
else
  skip gpurt_probe "no build/gpurt (build it with CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt)"
  skip conform_cuda "no build/gpurt"
fi

# ---- benchmarks ----------------------------------------------------------------
if [ -x build/rawbench ]; then
  step rawbench 600 bash -o pipefail -c "build/rawbench | tee '$logs/rawbench.jsonl'"
else
  skip rawbench "rawbench not built"
fi
if [ -x build/gpurt ] && has_cmd bench; then
  step gpurt_bench 600 env GPURT_BACKEND=cuda bash -o pipefail -c "build/gpurt bench --json | tee '$logs/gpurt_bench.jsonl'"
else
  skip gpurt_bench "no build/gpurt bench subcommand"
fi
# gpurt probe wall time (startup), beside rawbench's cuinit_ms + primary_ctx_create_ms.
if [ -x build/gpurt ]; then
  # shellcheck disable=SC2016
  step probe_walltime 120 bash -c 'for i in 1 2 3; do s=$(date +%s%N); build/gpurt probe >/dev/null 2>&1; e=$(date +%s%N); echo "{\"metric\":\"gpurt_probe_wall_ms\",\"value\":$(( (e-s)/1000000 )),\"unit\":\"ms\"}"; done'
fi

# ---- summary (last) ----------------------------------------------------------------
status=0
echo
echo "logs: $logs"
if [ -f "$logs/rawbench.jsonl" ]; then
  echo "rawbench:"
  sed 's/^/  /' "$logs/rawbench.jsonl"
fi
echo
printf '%-18s %-10s %7s  %s\n' STEP STATUS SECONDS NOTE
for i in "${!names[@]}"; do
  printf '%-18s %-10s %7s  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${notes[$i]}"
  case "${states[$i]}" in ok|skip) ;; *) status=1 ;; esac
done
exit $status
