#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# gpu_profile.sh — where a decode step's time goes (issue 24 item 3), ONE
# command on the GPU machine (no Go, no network, no Nsight Systems there):
# build/llama in graph mode under build/libgpurt_ktrace.so (a CUPTI tracer,
# scripts/ktrace/ktrace.c: every kernel with its graph, every copy, every
# driver call), with a Go CPU profile of the same run (-cpuprofile). Per
# preset and batch, in $OUT:
#   <name>.csv     the trace (ktrace.c says the lines)
#   <name>.pprof   the Go CPU profile (go tool pprof build/llama <name>.pprof, here)
#   <name>.log     build/llama's JSON lines
# and profile.md: for the decode step's graph, per replay (a replay is a run
# of the step graph's kernels with no other device work between them):
# its span (first kernel's start to last kernel's end), the kernels' busy
# time, the gaps between kernels; per kernel name, its launches and time
# per step (the median replay's, over the timed replays) and share; per
# driver call, calls and host time per step.
#
# Built elsewhere (carry the files):  make gpu-artifacts; bash scripts/ktrace/build.sh build
#   build/llama, build/libgpurt_cuda.so, build/libgpurt_ktrace.so, build/libcupti.so.13
# Knobs: PRESETS ("1b 8b"), BATCHES ("1"), CTX (1024), STEPS (24), WARMUP
# (2), LLAMA_ARGS (more flags for build/llama, e.g. "-weights int8"),
# TAG (a suffix for the names), OUT (default build/gpu_profile).
# Exit status: 0 when every run and every report passed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-$root/build/gpu_profile}
mkdir -p "$out"
presets=${PRESETS:-1b 8b}
batches=${BATCHES:-1}
ctx=${CTX:-1024}
steps=${STEPS:-24}
warmup=${WARMUP:-2}
tag=${TAG:-}
rc=0
names=()
for p in $presets; do
  for b in $batches; do
    n="${p}_b${b}${tag:+_$tag}"
    echo "== $n"
    # shellcheck disable=SC2086
    if ! LD_PRELOAD="$root/build/libgpurt_ktrace.so" KTRACE_OUT="$out/$n.csv" KTRACE_API=1 \
      "$root/build/llama" -plugin-path "$root/build/libgpurt_cuda.so" -backend cuda -prompt 1 \
      -preset "$p" -batch "$b" -ctx "$ctx" -steps "$steps" -warmup "$warmup" -modes graph \
      -progress none -cpuprofile "$out/$n.pprof" ${LLAMA_ARGS:-} >"$out/$n.log" 2>"$out/$n.err"; then
      echo "gpu_profile: $n: build/llama failed:" >&2
      tail -20 "$out/$n.err" >&2
      rc=1
      continue
    fi
    grep '"kind":"summary"' "$out/$n.log"
    names+=("$n")
  done
done
[ "${#names[@]}" -gt 0 ] || exit 1
python3 - "$out" "$steps" "${names[@]}" <<'PY' >"$out/profile.md" || rc=1
import collections, json, statistics, sys
out, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for n in names:
    summ = [json.loads(l) for l in open(f"{out}/{n}.log") if '"kind":"summary"' in l]
    ev, api = [], []
    for line in open(f"{out}/{n}.csv"):
        f = line.rstrip("\n").split(",")
        if f[0] == "K":   # name may hold commas: the last four fields are numbers
            ev.append(("K", ",".join(f[1:-4]), int(f[-4]), int(f[-3]), int(f[-1])))
        elif f[0] == "M":
            ev.append(("M", f[1], int(f[3]), int(f[4]), int(f[5])))
        elif f[0] == "A":
            api.append((",".join(f[1:-2]), int(f[-2]), int(f[-1])))
    ev.sort(key=lambda e: e[2])
    graphs = collections.Counter(e[4] for e in ev if e[0] == "K" and e[4])
    print(f"## {n}\n")
    for s in summ:
        print(f"- {s.get('mode')}: {s.get('tokens_per_s', 0):,.1f} tok/s, {s.get('ms_per_step', 0):.3f} ms/step, "
              f"host {s.get('host_us_per_step', 0):.1f} µs/step, graph launches/step {s.get('graph_launches_per_step', '-')}")
    if not graphs:
        print("\nno kernel ran inside a graph\n")
        continue
    gid = graphs.most_common(1)[0][0]
    reps, cur = [], None
    for e in ev:
        if e[0] == "K" and e[4] == gid:
            if cur is None:
                cur = []
                reps.append(cur)
            cur.append(e)
        else:
            cur = None
    # A replay is the step graph's kernels with nothing else between them;
    # keep those with the usual kernel count (an overlap with other work can
    # cut one in two) and of them the timed ones (the warm-up's come first).
    common = collections.Counter(len(r) for r in reps).most_common(1)[0][0]
    reps = [r for r in reps if len(r) == common][-steps:]
    def stats(r):
        busy = sum(e[3] - e[2] for e in r)
        return r[-1][3] - r[0][2], busy
    spans = sorted((stats(r), i) for i, r in enumerate(reps))
    (span, busy), mi = spans[len(spans) // 2]
    med = reps[mi]
    kinds = len(med)
    print(f"\nStep graph {gid}: {len(reps)} timed replays, {kinds} kernels each. Median replay: span {span/1e3:.1f} µs, "
          f"kernels busy {busy/1e3:.1f} µs ({100*busy/max(span,1):.1f}%), gaps {(span-busy)/1e3:.1f} µs "
          f"({(span-busy)/1e3/max(kinds-1,1):.2f} µs between kernels on average).\n")
    # With programmatic dependent launch a kernel starts before the one it
    # waits for ends, so start-to-end times overlap (busy can pass the
    # span). A kernel's own share of the replay is what it adds to the
    # span: from the later of its start and the end of every kernel before
    # it, to its end (0 when it ends inside them); those shares and the
    # gaps (no kernel running) sum to the span.
    def own(r):
        m, res, gap = r[0][2], [], 0
        for e in r:
            gap += max(0, e[2] - m)
            res.append(max(0, e[3] - max(m, e[2])))
            m = max(m, e[3])
        return res, gap
    per = collections.defaultdict(list)
    gaps = []
    for r in reps:
        acc = collections.defaultdict(lambda: [0, 0, 0])
        o, g = own(r)
        gaps.append(g)
        for e, x in zip(r, o):
            a = acc[e[1]]
            a[0] += 1
            a[1] += e[3] - e[2]
            a[2] += x
        for k, (c, t, x) in acc.items():
            per[k].append((c, t, x))
    rows = sorted(((statistics.median(x for _, _, x in v), statistics.median(t for _, t, _ in v), v[0][0], k)
                   for k, v in per.items()), reverse=True)
    tot = sum(r[0] for r in rows) + statistics.median(gaps)
    print("Per kernel: \"own\" is what its launches add to the replay's span (the median replay's share; "
          "with PDL a kernel's start-to-end time includes its wait for the one before).\n")
    print("| kernel | launches per step | own µs per step | share of span | start-to-end µs per step | own µs per launch |\n"
          "|---|---|---|---|---|---|")
    for x, t, c, k in rows:
        print(f"| `{k[:100]}` | {c} | {x/1e3:.1f} | {100*x/max(tot,1):.1f}% | {t/1e3:.1f} | {x/1e3/c:.2f} |")
    print(f"| gaps (no kernel running) | | {statistics.median(gaps)/1e3:.1f} | {100*statistics.median(gaps)/max(tot,1):.1f}% | | |")
    print(f"| all | {sum(r[2] for r in rows)} | {tot/1e3:.1f} | | {sum(r[1] for r in rows)/1e3:.1f} | |\n")
    # Between replays: the device work outside the graph and the host's driver calls.
    t0, t1 = reps[0][0][2], reps[-1][-1][3]
    outside = [e for e in ev if t0 <= e[2] <= t1 and not (e[0] == "K" and e[4] == gid)]
    oc = collections.Counter((e[0], e[1]) for e in outside)
    print(f"Device work outside the step graph, per step: " + ", ".join(
        f"{c/len(reps):.1f} × {k[1]} ({'kernel' if k[0]=='K' else 'copy'})" for k, c in oc.most_common(8)) + "\n")
    a = [x for x in api if t0 <= x[1] <= t1]
    ac = collections.defaultdict(lambda: [0, 0])
    for name, s, e in a:
        ac[name][0] += 1
        ac[name][1] += e - s
    print("Driver calls per step (host side, during the timed replays):\n\n| call | per step | mean µs | µs per step |\n|---|---|---|---|")
    for name, (c, t) in sorted(ac.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"| {name} | {c/len(reps):.1f} | {t/c/1e3:.2f} | {t/len(reps)/1e3:.1f} |")
    print()
PY
cat "$out/profile.md"
exit $rc
