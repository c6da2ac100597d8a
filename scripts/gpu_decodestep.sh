#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_decodestep.sh — ONE command on the GPU machine (no Go, no network) for
# the decode-step benchmark of issue 11: gpurt eager and replayed (graph)
# against PyTorch eager and CUDA graph on the same MLP decode step. Run it
# from the repository root with these built elsewhere (CGO_ENABLED=0):
#
#   bash scripts/build_cuda.sh build                      # build/libgpurt_cuda.so
#   CGO_ENABLED=0 go build -o build/gpurt-decodestep ./cmd/gpurt-decodestep
#   bash scripts/gpu_decodestep.sh
#
# It does not rebuild the plugin. Steps (each with a timeout; a failure is
# reported and the later steps still run):
#   env     nvidia-smi, the files it needs
#   gpurt   build/gpurt-decodestep -plugin-path build: reference checks of small
#           configs (256/512/2, 100/260/2 against the Go float64 reference,
#           replay vs eager byte for byte), then configs 4096/14336/32,
#           2048/8192/16, 1024/4096/24 at batch 1 and 16, eager and replayed
#   bnorm   build/gpurt-decodestep -norm builtin -configs none: the same
#           reference checks with the plugin's built-in rmsnorm_bf16 in place
#           of rmsnorm.ptx (a few seconds; reported, not in the table)
#   torch   python3 scripts/decodestep_torch.py: the same steps in plain
#           torch, eager and torch.cuda.CUDAGraph, RMSNorm as F.rms_norm and
#           Llama (hf) style
# Both in two variants: plain (6 operations a layer) and fused (gate+up as
# one GEMM, the residual inside the down GEMM: 4).
# Then the table (summary.txt). Logs and JSON lines in build/gpu_decodestep/
# (gpurt.jsonl, torch.jsonl, decodestep.jsonl = both); with $OUT set, copied
# there. Plot them here afterwards:
#   make decodeplot && build/decodeplot -o bench/plots/decodestep.svg decodestep.jsonl
# Env: DECODESTEP_STEPS (default 100) timed steps per mode; DECODESTEP_ARGS
# and DECODESTEP_TORCH_ARGS: more arguments for either program (e.g.
# "-backend mock -configs 64/160/2" to try the script without a GPU).
# Timeouts: gpurt 110 s, bnorm 40 s, torch 110 s (about a minute in all is
# expected). Exit status: 0 when every step passed and every check held.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
logs=$root/build/gpu_decodestep
rm -rf "$logs"
mkdir -p "$logs"
chmod 755 build 2>/dev/null || true
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
steps=${DECODESTEP_STEPS:-100}
failed=0
summary=()

# step NAME TIMEOUT OUTFILE CMD...: runs CMD, stdout to OUTFILE, stderr to $logs/NAME.log.
step() {
  local name=$1 to=$2 outf=$3
  shift 3
  local t0 t1 rc
  t0=$(date +%s)
  timeout --kill-after=10 "$to" "$@" >"$outf" 2>"$logs/$name.log"
  rc=$?
  t1=$(date +%s)
  tail -n 40 "$logs/$name.log"
  local st=ok
  if [ $rc -ne 0 ]; then
    st="FAIL($rc)"
    failed=1
  fi
  summary+=("$(printf '%-6s %-8s %5ss' "$name" "$st" $((t1 - t0)))")
  echo "== [$name] $st in $((t1 - t0))s"
  return $rc
}

echo "== [env]"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  ls -l build/libgpurt_cuda.so build/gpurt-decodestep 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} | tee "$logs/env.log"

: >"$logs/gpurt.jsonl"
if [ -x build/gpurt-decodestep ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [gpurt] build/gpurt-decodestep -plugin-path build -steps $steps ${DECODESTEP_ARGS:-}"
  # shellcheck disable=SC2086
  step gpurt 110 "$logs/gpurt.jsonl" build/gpurt-decodestep -plugin-path build -steps "$steps" ${DECODESTEP_ARGS:-}
else
  summary+=("gpurt  skip     (need build/gpurt-decodestep and build/libgpurt_cuda.so, built elsewhere: see the header)")
  failed=1
fi

if [ -x build/gpurt-decodestep ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [bnorm] build/gpurt-decodestep -norm builtin -configs none"
  # shellcheck disable=SC2086
  step bnorm 40 "$logs/bnorm.jsonl" build/gpurt-decodestep -plugin-path build ${DECODESTEP_ARGS:-} -norm builtin -configs none
fi

: >"$logs/torch.jsonl"
if command -v python3 >/dev/null 2>&1; then
  echo "== [torch] python3 scripts/decodestep_torch.py --steps $steps ${DECODESTEP_TORCH_ARGS:-}"
  # shellcheck disable=SC2086
  step torch 110 "$logs/torch.jsonl" python3 scripts/decodestep_torch.py --steps "$steps" ${DECODESTEP_TORCH_ARGS:-}
else
  summary+=("torch  skip     (no python3)")
  failed=1
fi
cat "$logs/gpurt.jsonl" "$logs/torch.jsonl" >"$logs/decodestep.jsonl"

table() {
  python3 - "$logs/decodestep.jsonl" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except ValueError:
        pass
bad = 0
checks = [r for r in rows if r.get("impl") == "gpurt check"]
if checks:
    print("reference checks (gpurt eager step vs Go float64 reference; replay vs eager)")
    for r in checks:
        ok = bool(r.get("ok"))
        bad += not ok
        print("  %-14s batch %-3s %-5s %-4s max rel err %.4f (tol %.2f), replay %s %s" % (
            r["config"], r["batch"], r.get("variant", ""), "ok" if ok else "FAIL", r.get("max_err", 0), r.get("tol", 0),
            r.get("match", "-"), r.get("note", "")))
    print()
by, order = {}, []
for r in rows:
    if r.get("impl") == "gpurt check":
        continue
    key = (r["config"], r["batch"], r.get("variant", "plain"))
    if key not in by:
        order.append(key)
    by.setdefault(key, {})[r["impl"]] = r
def us(r):
    return r["step_us"] if r and r.get("step_us", 0) > 0 else None
def f(v, w=9, p=1):
    return ("%*.*f" % (w, p, v)) if v else " " * (w - 1) + "-"
def best(d, a, b):
    x, y = d.get(a), d.get(b)
    c = [r for r in (x, y) if us(r)]
    if not c:
        return None, ""
    r = min(c, key=us)
    return r, ("h" if r is y and y is not x else "f")
print("%-14s %5s %-5s %9s %9s %10s %10s %9s %9s %9s %9s  %s" % (
    "config H/I/L", "batch", "var", "g.eager", "g.replay", "t.eager", "t.graph", "rep/tgr", "eag/teag", "host rep", "host eag", "replay==eager"))
print("%-14s %5s %-5s %9s %9s %10s %10s %9s %9s %9s %9s" % ("", "", "", "us/step", "us/step", "us/step", "us/step", "<=1.0", "<=0.6 sm", "us <=10", "us"))
goals = {"replay": [], "host": [], "eager": []}
for key in order:
    d = by[key]
    ge, gr = d.get("gpurt eager"), d.get("gpurt replayed")
    te, tes = best(d, "torch eager", "torch eager hf")
    tg, tgs = best(d, "torch graph", "torch graph hf")
    r1 = us(gr) / us(tg) if us(gr) and us(tg) else None
    r2 = us(ge) / us(te) if us(ge) and us(te) else None
    hr = gr.get("host_us") if gr else None
    small = key[0] == "1024/4096/24"
    if r1:
        goals["replay"].append((key, r1, r1 <= 1.0))
    if hr:
        goals["host"].append((key, hr, hr <= 10))
    if r2 and small:
        goals["eager"].append((key, r2, r2 <= 0.6))
    notes = "; ".join("%s: %s" % (k, v["note"]) for k, v in sorted(d.items()) if v.get("note"))
    match = gr.get("match", "-") if gr else "-"
    if gr and match != "identical":
        bad += 1
    print("%-14s %5s %-5s %s %s %s%1s %s%1s %s %s %s %s  %s %s" % (
        key[0], key[1], key[2], f(us(ge)), f(us(gr)), f(us(te)), tes, f(us(tg)), tgs, f(r1, 8, 2) + "x" if r1 else f(None),
        f(r2, 8, 2) + "x" if r2 else f(None), f(hr, 9, 2), f(ge.get("host_us") if ge else None, 9, 1), match, notes))
print()
print("t.eager / t.graph: the faster torch variant (f: F.rms_norm, h: Llama-style f32 rmsnorm); ops per step:",
      ", ".join("%s b%s %s %s" % (k[0], k[1], k[2], by[k]["gpurt eager"].get("ops")) for k in order if by[k].get("gpurt eager")))
print("variants: plain = 6 operations a layer (norm, gate, up, silu_mul, down, add); fused = 4 (gate+up one GEMM, residual in the down GEMM); torch does the same in each")
for name, what in (("replay", "gpurt replayed <= 1.0x torch graph (every config)"),
                   ("host", "host cost of one replayed step <= 10 us"),
                   ("eager", "gpurt eager <= 0.6x torch eager (1024/4096/24)")):
    g = goals[name]
    if not g:
        print("goal %-52s no data" % what)
        continue
    missed = [x for x in g if not x[2]]
    line = "goal %-52s %s (%d/%d)" % (what, "MET" if not missed else "missed", len(g) - len(missed), len(g))
    if missed:
        line += ": " + ", ".join("%s b%s %s %.2f%s" % (k[0], k[1], k[2], v, "us" if name == "host" else "x") for k, v, _ in missed)
    print(line)
sys.exit(1 if bad else 0)
PY
}

if command -v python3 >/dev/null 2>&1 && [ -s "$logs/decodestep.jsonl" ]; then
  table >"$logs/table.txt" 2>&1 || failed=1
else
  cp "$logs/decodestep.jsonl" "$logs/table.txt"
fi
{
  echo
  echo "== gpu_decodestep.sh summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
  for s in "${summary[@]}"; do echo "$s"; done
  if [ -s "$logs/bnorm.jsonl" ]; then
    echo "built-in rmsnorm_bf16 checks: $(grep -c '"ok":true' "$logs/bnorm.jsonl") of $(grep -c '^{' "$logs/bnorm.jsonl") ok"
  fi
  echo
  cat "$logs/table.txt"
  echo
  echo "step time: median of events between $steps steps enqueued back to back (GPU time, host waits included);"
  echo "host rep: median wall time of one Graph.Launch on an idle stream; host eag: of enqueueing one eager step"
} | tee "$logs/summary.txt"

if [ -n "${OUT:-}" ]; then
  cp "$logs"/*.txt "$logs"/*.jsonl "$logs"/*.log "$OUT"/ 2>/dev/null || true
fi
exit $failed
