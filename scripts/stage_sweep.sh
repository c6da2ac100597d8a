#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# stage_sweep.sh: the staged pageable copies (CopyFromHost/CopyToHost of a
# Go []byte) at 1 GiB under a few staging settings (core.StagingConfig:
# GPURT_STAGE_CHUNK, GPURT_STAGE_SLOTS, GPURT_COPY_WORKERS). Run on the GPU
# machine from the repo root with build/gpurt built. gpurt bench has no
# copy-only mode, so each setting is a whole `bench --sizes 1G` (~12 s):
# six settings keep the sweep under 90 s. Prints one line per setting:
#   chunk slots workers htod_pageable_gbps dtoh_pageable_gbps
# Extra arguments go to gpurt bench (e.g. --backend cuda).
set -u
bin=build/gpurt
[ -x "$bin" ] || { echo "stage_sweep: $bin not found (run from the repo root after make)" >&2; exit 1; }
slots=4
# chunk:workers, from the defaults (8 MiB, 8) outwards.
grid="8M:8 16M:8 32M:8 16M:12 16M:15 32M:15"
printf '%-6s %5s %7s %18s %18s\n' chunk slots workers htod_pageable_gbps dtoh_pageable_gbps
for g in $grid; do
	chunk=${g%%:*} workers=${g##*:}
	out=$(GPURT_STAGE_CHUNK=$chunk GPURT_STAGE_SLOTS=$slots GPURT_COPY_WORKERS=$workers \
		timeout 25 "$bin" bench --json --sizes 1G "$@" 2>/dev/null)
	pick() { # the value of metric $1 at 1 GiB, or "-"
		local v
		v=$(printf '%s\n' "$out" | grep "\"metric\":\"$1\"" | grep '"bytes":1073741824' |
			sed -n 's/.*"value":\([0-9.eE+-]*\).*/\1/p' | head -n1)
		echo "${v:--}"
	}
	printf '%-6s %5s %7s %18s %18s\n' "$chunk" "$slots" "$workers" "$(pick htod_pageable_gbps)" "$(pick dtoh_pageable_gbps)"
done
