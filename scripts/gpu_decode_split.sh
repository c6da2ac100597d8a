#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_decode_split.sh — the decode attention's KV split, measured (issue 24):
# build/llama in graph mode with GPURT_CUDA_DECODE_CHUNK_PAGES (the least
# pages in a KV chunk of the CUDA plugin's decode plan; FlashInfer's own
# rule is 128 tokens, 8 pages of 16) set to each of CHUNKS, per preset,
# batch and context; prints a table of decode tokens/s and writes it to
# $OUT/split.md (the JSON lines beside it). ONE command on the GPU machine.
#
# Built elsewhere (carry the files):  make gpu-artifacts
#   build/llama, build/libgpurt_cuda.so
# Knobs: CHUNKS ("1 2 4 8"), PRESETS ("1b 8b"), BATCHES (1,32), CTXS
# (1024,8192), STEPS (16), OUT (build/gpu_decode_split).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-$root/build/gpu_decode_split}
mkdir -p "$out"
rc=0
for p in ${PRESETS:-1b 8b}; do
  for c in ${CHUNKS:-1 2 4 8}; do
    echo "== $p chunk pages $c"
    if ! GPURT_CUDA_DECODE_CHUNK_PAGES=$c "$root/build/llama" -plugin-path "$root/build/libgpurt_cuda.so" \
      -backend cuda -prompt 1 -preset "$p" -batch "${BATCHES:-1,32}" -ctx "${CTXS:-1024,8192}" \
      -steps "${STEPS:-16}" -warmup 2 -modes graph -progress none >"$out/${p}_c$c.log" 2>"$out/${p}_c$c.err"; then
      tail -5 "$out/${p}_c$c.err" >&2
      rc=1
    fi
  done
done
python3 - "$out" <<'PY' | tee "$out/split.md"
import glob, json, os, sys, collections
out = sys.argv[1]
t = collections.defaultdict(dict)
for f in sorted(glob.glob(f"{out}/*_c*.log")):
    p, c = os.path.basename(f)[:-4].rsplit("_c", 1)
    for l in open(f):
        if '"kind":"summary"' in l:
            s = json.loads(l)
            t[(p, s["batch"], s["ctx"])][int(c)] = s["tokens_per_s"]
cs = sorted({c for v in t.values() for c in v})
print("| model | batch | ctx | " + " | ".join(f"{c} pages" for c in cs) + " | best |")
print("|---|---|---|" + "---|" * (len(cs) + 1))
for k in sorted(t):
    v = t[k]
    best = max(v, key=v.get)
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{v[c]:,.0f}" if c in v else "-" for c in cs) + f" | {best} |")
PY
exit $rc
