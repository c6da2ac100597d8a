#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_kvpage.sh — ONE command on the GPU machine (no Go there) for the KV
# page allocator's per-step host cost at batch 256 with the real plugin
# (issue 26 item 1): the page table's one upload per step through the CUDA
# plugin instead of the mock. Build HERE first:
#
#   bash scripts/build_cuda.sh build          # build/libgpurt_cuda.so
#   CGO_ENABLED=0 go test -c -o build/kvpage.test ./kvpage
#   bash scripts/gpu_kvpage.sh
#
# It runs the kvpage benchmarks (allocator decode step, scheduler step, table fill, table
# step with its upload, the whole host step) on device 0, then the package's
# pure-Go tests (the allocator's property and unit tests, the scheduler's).
# Output: the benchmark lines (ns/op, cpu-ns/op, allocs/op, pages/step,
# upload-B/step), also in $OUT/kvpage_bench.txt when $OUT is set.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-$root/build/gpu_kvpage}
mkdir -p "$out"
for f in build/kvpage.test build/libgpurt_cuda.so; do
  [ -f "$f" ] || { echo "gpu_kvpage: $f is missing (see the header for how to build it)"; exit 2; }
done
nvidia-smi -L || true
rc=0
GPURT_KVPAGE_BENCH_ENV=1 GPURT_BACKEND=cuda GPURT_PLUGIN_PATH="$root/build" \
  timeout 300 build/kvpage.test -test.run '^$' -test.bench 'TableFill|TableStep|DecodeStepHost|AllocatorDecodeStep|SchedulerDecodeStep' \
  -test.benchtime 3s -test.count 3 2>&1 | tee "$out/kvpage_bench.txt" || rc=1
timeout 120 build/kvpage.test -test.run '^Test(AllocatorProperty|AllocatorZeroAllocs|NewChecks|PrefixHits|CopyOnWrite|LRUOrder|Errors|Scheduler(Load|ChunkedPrefill|Errors|LongPromptsPreempt))$' 2>&1 | tail -3 | tee -a "$out/kvpage_bench.txt" || rc=1
exit $rc
