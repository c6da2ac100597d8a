#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_conform.sh — the quick correctness pass on the GPU machine, with the
# carried build/libgpurt_cuda.so and build/gpurt: the C ABI suite (built
# there with cc) and `gpurt conform --backend cuda` (every check; the long
# attention contexts run in gpu_attention.sh). Logs to $OUT when set.
# What it covers of ABI 1.7 and issue 22 (printed as its own lines): the
# suite's table checks (every slot of the claimed minors set),
# graph_recordable and CALL items (recorded vs eager byte for byte where
# the plugin records the slot), and conform's graph/replays_ordered_across_streams
# and attention/kv_bounds.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-$root/build/gpu_conform}
mkdir -p "$out"
rc=0
cc -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Iabi -o build/abi_suite csrc/test/abi_suite.c -ldl &&
  timeout 120 build/abi_suite "$root/build/libgpurt_cuda.so" >"$out/abi_suite.log" 2>&1 || rc=1
echo "abi_suite: $(tail -n 1 "$out/abi_suite.log")"
grep -E '^(FAIL|not ok)' "$out/abi_suite.log" | head -20
grep -E '^(ok  |FAIL|skip) *(table:|graph_recordable|call)' "$out/abi_suite.log" | sed 's/^/abi 1.7: /' | head -40
timeout 100 build/gpurt conform --backend cuda >"$out/conform_cuda.log" 2>&1 || rc=1
grep -E '^(FAIL)' "$out/conform_cuda.log" | head -30
# issue 22 item 4: sample_T/argmax_T on NaN, +Inf (an f16 overflow), all -Inf, all NaN.
echo "non-finite sampling: $(grep -E 'kernel/sample_nonfinite/' "$out/conform_cuda.log" | awk '{print $1}' | sort | uniq -c | tr -s ' \n' ' ')"
grep -E 'graph/replays_ordered_across_streams|attention/kv_bounds' "$out/conform_cuda.log" | sed 's/^/issue 22: /'
# issue 24: kv_append + attention_run + quant_matmul recorded in one graph,
# replanned between replays, each replay byte for byte the eager step.
grep -E 'graph/decode_step_attention' "$out/conform_cuda.log" | sed 's/^/issue 24: /'
grep -E 'kernel/sample_rows_|attention/fp8/' "$out/conform_cuda.log" | sed 's/^/issue 26: /'
echo "conform: $(tail -n 1 "$out/conform_cuda.log")"
exit $rc
