#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_cli_check.sh — ONE command on the GPU machine (no Go, no network) for
# the commands' convention (internal/cli) on CUDA, using what was built
# elsewhere into build/:
#
#   make gpu-artifacts                          # the plugin and every command
#   bash scripts/gpu_cli_check.sh               # on the GPU machine
#
# Steps (each with a timeout; a failure is reported and the script goes on;
# about 2 minutes in all):
#   help      every command's -h exits 0 with its usage on stdout, an old
#             plugin flag (-plugins build) exits 2 naming -plugin-path
#   conform   build/gpurt conform --plugin-path build/libgpurt_cuda.so (the
#             file names the backend) --quick --run '^api/'
#   bench     build/gpurt bench --quick --plugin-path build --benchfmt
#             $logs/bench.txt: the Go benchmark format lines benchstat reads
#   quant     build/gpurt-quantbench -plugin-path build -only gemv -iters 5
#   attn      build/gpurt-attnbench -plugin-path build -only decode -iters 5
#   hook      with build/core.test (CGO_ENABLED=0 go test -c -o build/core.test
#             ./core): the metrics hooks' own cost, timing off and on
#             (BenchmarkMetricsHook; needs no plugin), on a quiet CPU
# Logs in build/gpu_cli/; with $OUT set, copied there. Exit status: 0 when
# every step passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
logs=build/gpu_cli
mkdir -p "$logs"
failed=0
summary=()
# shellcheck source=scripts/lib/step.sh
. scripts/lib/step.sh

help_check() {
  local rc=0 bin
  for bin in "build/gpurt probe" "build/gpurt conform" "build/gpurt bench" build/gpurt-quantbench \
    build/gpurt-attnbench build/gpurt-multibench build/gpurt-decodestep build/gpurt-cgobench; do
    set -- $bin
    [ -x "$1" ] || { echo "skip: no $1"; continue; }
    if ! "$@" -h >"$logs/h.out" 2>"$logs/h.err" || ! grep -q '^usage:' "$logs/h.out" || [ -s "$logs/h.err" ]; then
      echo "FAIL: $bin -h (want status 0, the usage on stdout, nothing on stderr)"; rc=1
    fi
    "$@" -plugins build >/dev/null 2>"$logs/old.err"
    local st=$?
    if [ $st -ne 2 ] || ! grep -q -- '-plugin-path' "$logs/old.err"; then
      echo "FAIL: $bin -plugins build: status $st (want 2 naming -plugin-path)"; rc=1
    fi
    echo "ok: $bin"
  done
  return $rc
}

export logs
export -f help_check
step help 60 bash -c help_check
step conform 300 build/gpurt conform --plugin-path build/libgpurt_cuda.so --quick --run '^api/'
step bench 300 build/gpurt bench --quick --plugin-path build --benchfmt "$logs/bench.txt"
step benchfmt 10 grep -E '^Benchmark[A-Z][^ ]*-[0-9]+	1	[^ ]+ [^ ]+$' "$logs/bench.txt"
step quant 300 build/gpurt-quantbench -plugin-path build -only gemv -iters 5
step attn 300 build/gpurt-attnbench -plugin-path build -only decode -iters 5
if [ -x build/core.test ]; then
  step hook 120 build/core.test -test.run '^$' -test.bench MetricsHook -test.count 5 -test.benchmem
fi

printf '%s\n' "${summary[@]}"
if [ -n "${OUT:-}" ]; then cp -r "$logs" "$OUT/" 2>/dev/null; fi
exit $failed
