#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_multi.sh — ONE command on a machine with 2+ NVIDIA GPUs (issue 15:
# peer copies, device choice, NCCL collectives). The GPU machine has no Go
# and no network: build these elsewhere with CGO_ENABLED=0 and bring build/:
#
#   CGO_ENABLED=0 go build -o build/gpurt ./cmd/gpurt
#   CGO_ENABLED=0 go build -o build/gpurt-multibench ./cmd/gpurt-multibench
#   bash scripts/build_cuda.sh build            # build/libgpurt_cuda.so
#   bash scripts/gpu_multi.sh                   # on the GPU machine
#
# NCCL: the one torch brings (python3's site-packages
# nvidia/nccl/lib/libnccl.so.2, or another nvidia/*/lib/libnccl.so.2), else
# the system's (ldconfig); it is passed to the plugin as GPURT_NCCL_PATH
# unless that is set already. NCCL_NVLS_ENABLE=0 is exported (no NVLink
# SHARP / multicast), for gpurt and torch alike.
#
# Steps (each with a timeout; a failure is reported and the script goes on):
#   env       nvidia-smi -L, topology, the NCCL file, torch's versions
#   build     only when build/libgpurt_cuda.so is missing (needs nvcc)
#   abi       scripts/abi_suite.sh build/libgpurt_cuda.so (the 1.6 prologue
#             checks included, a one-rank NCCL communicator)
#   conform   build/gpurt conform --backend cuda --run '^(comm|peer|api)/'
#             (peer copies both ways, FindDevice by index/UUID/PCI id, every
#             collective against float64 references, one runtime per rank,
#             misuse, join timeout, abort)
#   bench     build/gpurt-multibench -procs: all-reduce bf16 8 KiB .. 1 GiB
#             (one process for both GPUs, and one process per GPU), peer
#             copies 1 GiB both ways
#   torch     python3 scripts/multi_torch.py: torch.distributed + NCCL, one
#             process per GPU, the same sizes; torch's peer copy_
# Then the table, last. Logs in build/gpu_multi/; with $OUT set, copied
# there (summary.txt, multibench.jsonl, torch.jsonl, the logs).
# Exit status: 0 when every step passed.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"
export NCCL_NVLS_ENABLE=0
logs=$root/build/gpu_multi
rm -rf "$logs"
mkdir -p "$logs" build
chmod 755 build 2>/dev/null || true
chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
failed=0
summary=()

# step NAME TIMEOUT CMD... (scripts/lib/step.sh).
. "$root/scripts/lib/step.sh"

# find_nccl: torch's NCCL wheel first, then the system's.
find_nccl() {
  if command -v python3 >/dev/null 2>&1; then
    python3 - <<'PY' 2>/dev/null && return 0
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
try:
    roots.append(site.getusersitepackages())
except Exception:
    pass
roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
for r in roots:
    for pat in ("nvidia/nccl/lib/libnccl.so.2", "nvidia/*/lib/libnccl.so.2", "torch/lib/libnccl.so.2"):
        for f in sorted(glob.glob(os.path.join(r, pat))):
            print(os.path.realpath(f))
            sys.exit(0)
sys.exit(1)
PY
  fi
  ldconfig -p 2>/dev/null | sed -n 's/.*libnccl\.so\.2 .*=> \(.*\)$/\1/p' | head -n 1 | grep . && return 0
  return 1
}

echo "== [env]"
{
  nvidia-smi -L
  nvidia-smi topo -m
  nvidia-smi --query-gpu=index,name,pci.bus_id,uuid,driver_version,memory.total --format=csv
  if [ -z "${GPURT_NCCL_PATH:-}" ]; then
    GPURT_NCCL_PATH=$(find_nccl) || GPURT_NCCL_PATH=""
  fi
  echo "GPURT_NCCL_PATH=${GPURT_NCCL_PATH:-<none found: the comm checks will say NCCL is unavailable>}"
  [ -n "$GPURT_NCCL_PATH" ] && namei -l "$GPURT_NCCL_PATH"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
} >"$logs/env.log" 2>&1
cat "$logs/env.log"
GPURT_NCCL_PATH=$(sed -n 's/^GPURT_NCCL_PATH=\(\/.*\)$/\1/p' "$logs/env.log" | head -n 1)
export GPURT_NCCL_PATH
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "gpu_multi.sh: $ngpu GPU(s) here; this script needs 2 or more" | tee "$logs/summary.txt"
  [ -n "${OUT:-}" ] && cp "$logs"/*.txt "$logs"/*.log "$OUT"/ 2>/dev/null
  exit 1
fi

if [ ! -f build/libgpurt_cuda.so ]; then
  echo "== [build] scripts/build_cuda.sh build"
  step build 1800 bash scripts/build_cuda.sh build
  chmod 644 build/libgpurt_cuda.so 2>/dev/null || true
else
  summary+=("build    skip     (build/libgpurt_cuda.so is here)")
fi

if [ -f build/libgpurt_cuda.so ]; then
  echo "== [abi] C ABI suite on cuda"
  step abi 300 bash scripts/abi_suite.sh build/libgpurt_cuda.so
fi

conform_cuda 1200 "comm, peer and api checks on cuda ($ngpu GPUs)" '^(comm|peer|api)/'

if [ -x build/gpurt-multibench ] && [ -f build/libgpurt_cuda.so ]; then
  echo "== [bench] gpurt-multibench"
  step_jsonl bench 1200 "$logs/multibench.jsonl" build/gpurt-multibench -plugin-path build -procs
else
  summary+=("bench    skip     (no build/gpurt-multibench: CGO_ENABLED=0 go build -o build/gpurt-multibench ./cmd/gpurt-multibench)")
  failed=1
  : >"$logs/multibench.jsonl"
fi

: >"$logs/torch.jsonl"
if command -v python3 >/dev/null 2>&1; then
  echo "== [torch] torch.distributed + NCCL"
  step_jsonl torch 1200 "$logs/torch.jsonl" python3 scripts/multi_torch.py
else
  summary+=("torch    skip     (no python3)")
fi

table() {
  bench_table "$logs/multibench.jsonl" "$logs/torch.jsonl" <<'PY'
from benchrows import load_args
rows, by, order = load_args()
def bw(r):
    return "%9.1f" % r["busbw_gb_s"] if r and r.get("us", 0) > 0 else "        -"
def us(r):
    return "%9.1f" % r["us"] if r and r.get("us", 0) > 0 else "        -"
print("%-22s %9s %9s %9s %9s %9s %9s %8s %-7s" % ("all-reduce bf16 (sum)", "gpurt us", "1proc us", "torch us",
      "gpurt bw", "1proc bw", "torch bw", "gp/torch", "goal"))
for name in order:
    if not name.startswith("all_reduce "):
        continue
    d = by[name]
    g, p, t = d.get("gpurt"), d.get("gpurt 1 proc/GPU"), d.get("torch.distributed nccl")
    ratio, goal = "", ""
    if g and t and g.get("us", 0) > 0 and t.get("us", 0) > 0:
        r = g["busbw_gb_s"] / t["busbw_gb_s"]
        ratio = "%7.3fx" % r
        if g["bytes"] >= 1 << 20:
            goal = "MET" if r >= 0.98 else "missed"
        elif g["bytes"] <= 8 << 10:
            goal = "MET" if g["us"] < t["us"] else "missed"
    print("%-22s %s %s %s %s %s %s %8s %-7s" % (name, us(g), us(p), us(t), bw(g), bw(p), bw(t), ratio, goal))
print()
print("%-22s %9s %9s %8s" % ("peer copy", "gpurt GB/s", "torch GB/s", "gp/torch"))
for name in order:
    if not name.startswith("peer_copy"):
        continue
    d = by[name]
    g, t = d.get("gpurt"), d.get("torch copy_")
    ratio = "%7.3fx" % (g["busbw_gb_s"] / t["busbw_gb_s"]) if g and t and g.get("us", 0) > 0 and t.get("us", 0) > 0 else ""
    print("%-22s %s %s %8s %s" % (name, bw(g), bw(t), ratio, (t or {}).get("note", "")))
notes = [(r["impl"], r["name"], r["note"]) for r in rows if r.get("note") and r.get("us", 0) == 0]
for impl, name, note in notes:
    print("note: %s %s: %s" % (impl, name, note))
PY
}

{
  echo
  echo "== gpu_multi.sh summary ($ngpu GPUs, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE, GPURT_NCCL_PATH=${GPURT_NCCL_PATH:-none})"
  for s in "${summary[@]}"; do echo "$s"; done
  grep -E 'passed, [0-9]+ failed' "$logs/abi.log" 2>/dev/null | tail -n 1 | sed 's/^/abi suite: /'
  grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/conform.log" 2>/dev/null | tail -n 1 | sed 's/^/conform: /'
  grep -E 'FAIL' "$logs/conform.log" 2>/dev/null | head -n 20
  echo
  echo "times: wall time per operation over N back-to-back operations (both sides the same way);"
  echo "bw: bus bandwidth GB/s (NCCL's busbw = algbw * 2(n-1)/n); goal: >= 0.98x torch at >= 1 MiB, lower latency at 8 KiB"
  if command -v python3 >/dev/null 2>&1; then
    table
  else
    cat "$logs/multibench.jsonl" "$logs/torch.jsonl"
  fi
} | tee "$logs/summary.txt"

copy_out
exit $failed
