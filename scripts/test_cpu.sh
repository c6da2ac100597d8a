#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# test_cpu.sh [REF] — what `make test` costs cold, target by target: clones
# this checkout (at REF, default HEAD) into a temporary folder, then runs
# each prerequisite of `make test` in make's order with an empty private
# GOCACHE (the module cache is shared: downloads aside) and prints the CPU
# seconds (user + sys, children included) and the wall seconds of each,
# and the totals. CPU seconds are the figure to compare on a loaded
# machine: 6 minutes on 2 cores is at best 12 CPU-minutes. Set KEEP=1 to
# keep the clone and the cache.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-HEAD}
tmp=$(mktemp -d)
[ "${KEEP:-}" = 1 ] || trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
git clone -q "$root" "$tmp/src"
git -C "$tmp/src" checkout -q "$ref"
export GOCACHE=$tmp/gocache
mkdir -p "$GOCACHE"
cd "$tmp/src"
# make test's steps (TEST_STEPS), one at a time, in their order.
targets=$(sed -n "s/^TEST_STEPS := //p" Makefile)
[ -n "$targets" ] || { echo "test_cpu: no TEST_STEPS line in the Makefile" >&2; exit 1; }
printf '%-16s %9s %8s\n' target cpu_s wall_s
tot_cpu=0 tot_wall=0
for t in $targets; do
  log=$tmp/$t.log
  /usr/bin/time -f '%U %S %e' -o "$tmp/$t.time" make "$t" >"$log" 2>&1 ||
    { echo "test_cpu: make $t failed:" >&2; tail -n 40 "$log" >&2; exit 1; }
  read -r u s e <"$tmp/$t.time"
  cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')
  printf '%-16s %9s %8s\n' "$t" "$cpu" "$e"
  tot_cpu=$(awk -v a="$tot_cpu" -v b="$cpu" 'BEGIN { printf "%.1f", a + b }')
  tot_wall=$(awk -v a="$tot_wall" -v b="$e" 'BEGIN { printf "%.1f", a + b }')
done
printf '%-16s %9s %8s  (%.1f CPU-minutes)\n' total "$tot_cpu" "$tot_wall" "$(awk -v a="$tot_cpu" 'BEGIN { print a / 60 }')"
[ "${KEEP:-}" != 1 ] || echo "test_cpu: kept $tmp (logs: $tmp/TARGET.log)"
