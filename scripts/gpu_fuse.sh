#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_fuse.sh — issue 24 item 2 on the GPU machine, ONE command (about 3-4
# minutes; no Go, no nvcc there): the built-ins after ABI 1.8 on CUDA and
# what they change in the decoder, each A/B in the same run.
#
# Built elsewhere (carry ["build"]):  make gpu-artifacts
#   build/gpurt, build/llama (examples/llama), build/libgpurt_cuda.so
#
# Steps (each under its own timeout; a failure is reported, the next runs):
#   conform     gpurt conform --backend cuda --run 'rmsnorm|rope|api/modules':
#               rmsnorm_T (now cuda_fused.cu's kernel), add_rmsnorm_T and
#               rope_neox_freqs_T against their float64 references
#   8b_bf16     build/llama -preset "$big", bf16, batch 1 and 32, context 1K,
#               eager and graph (compare with BENCHMARKS.md's 165 / 4,048 tok/s:
#               the rmsnorm kernel is the only change for these shapes)
#   8b_rope     -rope-scaling llama3 (Llama 3.1's), graph, fused and -unfused
#   8b_i8       -weights int8, eager and graph, fused and -unfused
#   1b_bf16     -preset "$small", bf16, batch 1 and 32 (launch-bound: the norms)
#   1b_i8       -preset "$small" -weights int8, fused and -unfused
#   report      the table (tokens/s, ms a step, launches a step) and the
#               checks: fused and -unfused give the same tokens on every
#               step of every row (on CUDA both norms are one kernel and
#               rope_neox_freqs_T has transformers' roundings), graph the
#               same tokens as eager.
# Results in $OUT (default build/gpu_fuse). Exit status 0 when every step
# ran and every check held.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-$root/build/gpu_fuse}
mkdir -p "$out"
plugin=${PLUGIN:-$root/build/libgpurt_cuda.so}
backend=${BACKEND:-cuda}
py=${PYTHON:-python3}
rc=0
gp=("$root/build/llama" -plugin-path "$plugin" -backend "$backend" -prompt 1 -ctx "${CTX:-1024}" -warmup 2)

step() { # step NAME SECONDS CMD...
  local name=$1 to=$2
  shift 2
  echo "== [$name] $*"
  if ! timeout "$to" "$@" >"$out/$name.log" 2>"$out/$name.err"; then
    echo "== [$name] FAILED (rc $?): $(tail -n 3 "$out/$name.err" | tr '\n' ' ')"
    rc=1
  fi
}

date -u | tee "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1 | tee -a "$out/env.txt"
step conform 120 "$root/build/gpurt" conform --backend "$backend" --plugin-path "$plugin" --run 'rmsnorm|rope|api/modules'
grep -E '^(PASS|FAIL|SKIP)' "$out/conform.log" | awk '{print $1, $2}' | sort | uniq -c | awk '{print "   ", $2, $3}' | tr '\n' ' '
echo
tail -n 1 "$out/conform.log"
grep -q ' 0 failed' "$out/conform.log" || rc=1
grep -E '^(FAIL|SKIP)' "$out/conform.log" | head -10

big=${BIG:-8b}    # the presets (BIG=tiny SMALL=tiny to try it on the mock)
small=${SMALL:-1b}
s8=${STEPS_8B:-16}
s1=${STEPS_1B:-32}
step 8b_bf16 90 "${gp[@]}" -preset "$big" -batch 1,32 -steps "$s8" -modes eager,graph
step 8b_rope 90 "${gp[@]}" -preset "$big" -rope-scaling llama3 -batch 1,32 -steps "$s8" -modes graph
step 8b_rope_unfused 90 "${gp[@]}" -preset "$big" -rope-scaling llama3 -batch 1,32 -steps "$s8" -modes graph -unfused
step 8b_i8 120 "${gp[@]}" -preset "$big" -weights int8 -batch 1,32 -steps "$s8" -modes eager,graph
step 8b_i8_unfused 120 "${gp[@]}" -preset "$big" -weights int8 -batch 1,32 -steps "$s8" -modes eager,graph -unfused
step 1b_bf16 60 "${gp[@]}" -preset "$small" -batch 1,32 -steps "$s1" -modes eager,graph
step 1b_i8 60 "${gp[@]}" -preset "$small" -weights int8 -batch 1,32 -steps "$s1" -modes eager,graph
step 1b_i8_unfused 60 "${gp[@]}" -preset "$small" -weights int8 -batch 1,32 -steps "$s1" -modes eager,graph -unfused

"$py" - "$out" <<'EOF' | tee "$out/report.txt"
import json, os, sys
out = sys.argv[1]
runs = {}
for name in ["8b_bf16", "8b_rope", "8b_rope_unfused", "8b_i8", "8b_i8_unfused", "1b_bf16", "1b_i8", "1b_i8_unfused"]:
    p = os.path.join(out, name + ".log")
    steps, summ = {}, []
    if os.path.exists(p):
        for line in open(p):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            key = (d.get("mode"), d.get("batch"), d.get("ctx"))
            if d.get("kind") == "step":
                steps.setdefault(key, []).append(d.get("tokens"))
            elif d.get("kind") == "summary":
                summ.append(d)
    runs[name] = (steps, summ)
bad = 0
print("| run | mode | batch | ctx | tokens/s | ms/step | launches/step |")
print("|---|---|---|---|---|---|---|")
for name, (steps, summ) in runs.items():
    if not summ:
        print(f"| {name} | (no rows) | | | | | |")
        bad += 1
    for d in summ:
        print(f"| {name} | {d['mode']} | {d['batch']} | {d['ctx']} | {d['tokens_per_s']:.1f} | {d['ms_per_step']:.3f} | {d.get('graph_launches_per_step', '-')} |")
def same(a, b, what):
    global bad
    sa, sb = runs[a][0], runs[b][0]
    keys = sorted(set(sa) & set(sb), key=str)
    if not keys:
        print(f"check {what}: no common rows"); bad += 1; return
    for k in keys:
        ok = sa[k] == sb[k] and len(sa[k]) > 0
        bad += not ok
        print(f"check {what} {k}: {'same tokens' if ok else 'DIFFERENT tokens'} ({len(sa[k])} steps)")
same("8b_rope", "8b_rope_unfused", "8b llama3 rope fused vs unfused")
same("8b_i8", "8b_i8_unfused", "8b int8 fused vs unfused")
same("1b_i8", "1b_i8_unfused", "1b int8 fused vs unfused")
for name in runs:
    st = runs[name][0]
    for (mode, b, c), toks in st.items():
        if mode == "graph" and ("eager", b, c) in st:
            ok = st[("eager", b, c)] == toks
            bad += not ok
            if not ok:
                print(f"check {name} batch {b}: graph tokens DIFFER from eager")
print("report:", "all checks held" if bad == 0 else f"{bad} checks failed")
sys.exit(1 if bad else 0)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "gpu_fuse.sh: rc=$rc"
exit $rc
