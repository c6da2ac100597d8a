#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_serve.sh — issue 26 item 5, ONE command on the GPU machine (no Go, no
# nvcc there), under 500 s: continuous batching measured on the 1B- and
# 8B-class models (random weights, llm.Presets' shapes, as gpu_roofline.sh
# uses them), a sweep of Poisson arrival rates each.
#
# Built elsewhere (carry ["build"]):  make gpu-artifacts
#   build/gpurt-servebench (examples/gpurt-servebench), build/libgpurt_cuda.so
#
# Steps (each under its own timeout, cut to what is left of TOTAL):
#   bandwidth  python3 scripts/decode_twin.py bandwidth (gpu_roofline.sh's read
#              bandwidth: torch bf16 x.sum() over 4 GiB, CUDA events); when it
#              fails the servebench measures a device copy itself
#   serve_1b   gpurt-servebench -preset 1b: REQUESTS requests all at once (the
#              offline capacity C), then SWEEP_REQUESTS at each of FRACTIONS x C
#              (highest first; points that would pass the step's deadline are
#              skipped with a "skip" line)
#   serve_8b   the same, 8B (token budget 1024), with what is left
#   serve_<p>_graph  with MODES="eager graph": the same with -graph (the
#              decode-only steps replayed as graphs, one per batch size)
#   report     serve.md: one table row per (model, rate) from the JSON lines
# Results in $OUT (default build/gpu_serve): serve_1b.jsonl, serve_8b.jsonl,
# serve.jsonl (both, and the bandwidth line), serve.md, the logs, steps.txt.
# The plot is drawn here afterwards (no Go there):
#   make decodeplot && build/decodeplot -serve -o bench/plots/serve.png serve.jsonl
# Exit status 0 when every step passed.
#
# Knobs: TOTAL (480), REQUESTS (1000), SWEEP_REQUESTS (300), FRACTIONS
# (1.25,1,0.75,0.5,0.25), SERVE_FLAGS (more gpurt-servebench flags, e.g.
# "-max-batch 256 -token-budget 4096"), MODES (eager; "eager graph": each
# preset also with -graph, in the same run), PYTHON (python3), SKIP (step names),
# PRESETS ("1b 8b"), BACKEND (cuda) and PLUGIN (build/libgpurt_cuda.so): to
# try the script without a GPU, BACKEND=mock PLUGIN=build/libgpurt_mock.so
# PRESETS=tiny SKIP=bandwidth SERVE_FLAGS="-prompt 5-40 -output 2-9 -shared 48
# -token-budget 24 -max-batch 4 -chunk 16 -copy-mib 4" REQUESTS=12 SWEEP_REQUESTS=6.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
. "$root/scripts/lib/step.sh"
step_budget gpu_serve 480
requests=${REQUESTS:-1000}
sweep=${SWEEP_REQUESTS:-300}
fractions=${FRACTIONS:-1.25,1,0.75,0.5,0.25}
backend=${BACKEND:-cuda}
plugin=${PLUGIN:-build/libgpurt_cuda.so}
presets=${PRESETS:-1b 8b}
for f in build/gpurt-servebench "$plugin"; do
  [ -f "$f" ] || { echo "gpu_serve: $f is missing (make gpu-artifacts, carry build)"; exit 2; }
done
# A step's row count changes from step to step, and each count is a GEMM
# shape of its own: a plan cache larger than the default 1024 keeps them.
export GPURT_OPCACHE_SIZE=${GPURT_OPCACHE_SIZE:-16384}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/env.txt" 2>&1 || true

gbps=0
how=""
case "$skip" in *" bandwidth "*) ;; *)
  if step bandwidth 40 "$py" scripts/decode_twin.py bandwidth --gib 4 --reps 20; then
    line=$(grep '"kind": "bandwidth"' "$logs/bandwidth.log" | tail -1)
    gbps=$(printf '%s' "$line" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["gbps"])' 2>/dev/null || echo 0)
    how=$(printf '%s' "$line" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["how"])' 2>/dev/null || echo "")
    printf '%s\n' "$line" >"$out/bandwidth.jsonl"
  fi ;;
esac

preset_flags() {
  local v="FLAGS_$1"
  if [ -n "${!v+x}" ]; then echo "${!v}"; elif [ "$1" = 8b ]; then echo "-token-budget 1024"; fi
}
serve() { # serve PRESET MODE SECONDS: MODE eager, or graph (-graph)
  local p=$1 mode=$2 secs=$3 name=serve_$1 g=""
  [ "$mode" = graph ] && name=serve_${p}_graph && g=-graph
  case "$skip" in *" $name "*) return 0 ;; esac
  # shellcheck disable=SC2086 # SERVE_FLAGS are words
  step "$name" $((secs + 30)) build/gpurt-servebench -plugin-path "$plugin" -backend "$backend" -preset "$p" \
    -requests "$requests" -sweep-requests "$sweep" -fractions "$fractions" -deadline "$secs" \
    -hbm-gbps "$gbps" -hbm-how "$how" -json "$out/$name.jsonl" $(preset_flags "$p") $g ${SERVE_FLAGS:-}
  cat "$out/$name.jsonl" >>"$out/serve.jsonl" 2>/dev/null
}
# The runs, each preset in each of MODES (default eager; "eager graph"
# runs both, the decode-only steps replayed as graphs in the second), share
# what is left (less the report's 45 s) by weight: 2 for the 8B, 1 for
# the others (1B, the faster, first), the last run all of the rest. Per
# preset flags: FLAGS_<preset> (8B: a token budget of 1024, so a mixed
# step's prefill keeps the time per output token near the 50 ms goal; 2048
# elsewhere).
weight() { if [ "$1" = 8b ]; then echo 2; else echo 1; fi; }
jobs=()
for p in $presets; do
  for mode in ${MODES:-eager}; do jobs+=("$p $mode"); done
done
: >"$out/serve.jsonl"
cat "$out/bandwidth.jsonl" >>"$out/serve.jsonl" 2>/dev/null
for i in "${!jobs[@]}"; do
  read -r p mode <<<"${jobs[$i]}"
  l=$(( $(budget_left) - 45 ))
  wsum=0
  for j in "${jobs[@]:$i}"; do wsum=$((wsum + $(weight "${j%% *}"))); done
  secs=$(( l * $(weight "$p") / wsum ))
  [ "$secs" -ge 20 ] || { echo "== [serve_$p $mode] not run: ${secs}s left" | tee -a "$out/steps.txt"; failed=1; continue; }
  serve "$p" "$mode" "$secs"
done
case "$skip" in *" report "*) ;; *)
step report 20 "$py" - "$out/serve.jsonl" "$out/serve.md" <<'PY'
import json, sys
rows, notes = [], []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("kind") == "serve":
        rows.append(r)
    elif r.get("kind") in ("skip", "error", "bandwidth", "model"):
        notes.append(r)
with open(sys.argv[2], "w") as f:
    f.write("| model | rate req/s | requests | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | prefix hit rate | shared prefill skipped | decode steps (mean batch) | decode GB/s wall / GPU | share of measured BW wall / GPU | preemptions | host ms/step |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        rate = "all at once" if r["rate"] == 0 else "%.2f" % r["rate"]
        f.write("| %s | %s | %d | %.0f | %.0f / %.0f | %.1f / %.1f | %.3f | %.3f | %d (%.1f) | %.0f / %.0f | %.2f / %.2f | %d | %.2f |\n" % (
            r["model"] + (" (graphs)" if r.get("graphs") else ""), rate, r["requests"], r["output_tokens_per_s"], r["ttft"]["p50_ms"], r["ttft"]["p99_ms"],
            r["tpot"]["p50_ms"], r["tpot"]["p99_ms"], r["prefix_hit_rate"], r["shared_prefill_skipped"],
            r["decode_steps"], r["decode_batch_mean"], r["decode_gbps"], r["decode_gpu_gbps"],
            r["decode_bw_share"], r["decode_gpu_bw_share"], r["preemptions"], r.get("host_ms_per_step", 0)))
    f.write("\n")
    for n in notes:
        f.write("- %s\n" % json.dumps(n))
print(open(sys.argv[2]).read())
PY
;; esac

{
  echo "gpu_serve: $(( $(date +%s) - t_start ))s of TOTAL=${total}s"
  printf '%s\n' "${summary[@]}"
} | tee "$out/steps.txt"
exit $failed
