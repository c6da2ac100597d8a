#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the JSON lines of examples/llama (impl "gpurt") and
scripts/llama_torch.py (impl "torch"), for scripts/gpu_llama.sh.

  llama_compare.py check GPURT.jsonl TORCH.jsonl [--tol 0.05]
      tokens step by step for every request, and request 0's logits
      (before the first diverging token); exit 1 when a run differs
  llama_compare.py table FILE.jsonl ...
      tokens/s per (preset, batch, ctx): gpurt eager, gpurt graph, torch
      eager, torch graph and the ratios against the goals
"""
import json
import sys


def load(paths):
    out = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        try:
                            out.append(json.loads(line))
                        except ValueError:
                            pass
        except OSError as e:
            print(f"llama_compare: {p}: {e}", file=sys.stderr)
    return out


def runs(lines, impl):
    """(mode, batch, ctx) -> [step lines in order]"""
    r = {}
    for x in lines:
        if x.get("impl") == impl and x.get("kind") == "step":
            r.setdefault((x["mode"], x["batch"], x["ctx"]), []).append(x)
    for v in r.values():
        v.sort(key=lambda x: x["step"])
    return r


def logit_gap(gs, ts, n):
    """Over the first n steps that have logits on both sides: the largest
    |gpurt - torch| and the largest |torch logit|."""
    worst, scale = 0.0, 0.0
    for i in range(n):
        a, c = gs[i].get("logits"), ts[i].get("logits")
        if a and c:
            worst = max(worst, max(abs(x - y) for x, y in zip(a, c)))
            scale = max(scale, max(abs(y) for y in c))
    return worst, scale


def check(gpath, tpath, tol):
    g, t = runs(load([gpath]), "gpurt"), runs(load([tpath]), "torch")
    ref = {k[1:]: v for k, v in t.items() if k[0] == "eager"}
    # (free-running: each side feeds back its own tokens)
    if not g or not ref:
        print(f"check: FAIL: no runs to compare (gpurt {len(g)}, torch eager {len(ref)})")
        return False
    ok = True
    for (mode, b, ctx), gs in sorted(g.items()):
        ts = ref.get((b, ctx))
        if ts is None:
            print(f"check: gpurt {mode} batch {b} ctx {ctx}: no torch eager run")
            ok = False
            continue
        n = min(len(gs), len(ts))
        first = None  # first step where any request's token differs
        same_req = 0
        for req in range(b):
            d = next((i for i in range(n) if gs[i]["tokens"][req] != ts[i]["tokens"][req]), None)
            if d is None:
                same_req += 1
            elif first is None or d < first:
                first = d
        lim = n if first is None else first + 1
        worst, scale = logit_gap(gs, ts, lim)
        good = first is None and n >= 1 and worst <= tol * max(1.0, scale)
        ok &= good
        print(f"check: gpurt {mode} vs torch eager, batch {b} ctx {ctx}: {n} steps, requests with identical tokens "
              f"{same_req}/{b}" + ("" if first is None else f", first differing step {first}") +
              f"; logits (request 0, up to there) max |diff| {worst:.4g} (max |logit| {scale:.3g}, tol {tol}x) "
              + ("OK" if good else "FAIL"))
    # teacher forcing: torch fed gpurt's eager tokens; its own argmax at
    # every step against gpurt's token, logits over every step
    forced = {k[1:]: v for k, v in t.items() if k[0] == "forced"}
    for (b, ctx), ts in sorted(forced.items()):
        gs = g.get(("eager", b, ctx))
        if not gs:
            continue
        n = min(len(gs), len(ts))
        agree = sum(gs[i]["tokens"][r] == ts[i]["tokens"][r] for i in range(n) for r in range(b))
        worst, scale = logit_gap(gs, ts, n)
        good = n >= 1 and worst <= tol * max(1.0, scale)
        ok &= good
        print(f"check: teacher-forced (torch fed gpurt's tokens), batch {b} ctx {ctx}: {n} steps, argmax agree "
              f"{agree}/{n * b}; logits (request 0, every step) max |diff| {worst:.4g} (max |logit| {scale:.3g}) "
              + ("OK" if good else "FAIL"))
    return ok


def table(paths):
    s = {}
    for x in load(paths):
        if x.get("kind") == "summary" and "tokens_per_s" in x:
            key = (x.get("preset", "?"), x.get("weights", "bf16"), x["batch"], x["ctx"])
            s.setdefault(key, {})[f'{x["impl"]} {x["mode"]}'] = x["tokens_per_s"]
    cols = ["gpurt eager", "gpurt graph", "torch eager", "torch graph"]
    print(f'{"config":<24}' + "".join(f"{c:>13}" for c in cols) + f'{"g/tgraph":>10}{"g/teager":>10}  goals(>=1.0, >=1.3)')
    for key in sorted(s, key=lambda k: (k[0], k[1], k[2], k[3])):
        v = s[key]
        name = f"{key[0]} {key[1]} b{key[2]} ctx{key[3]}"
        row = f"{name:<24}" + "".join(f'{v[c]:>13.1f}' if c in v else f'{"-":>13}' for c in cols)
        g = v.get("gpurt graph") or v.get("gpurt eager")
        r1 = g / v["torch graph"] if g and v.get("torch graph") else None
        r2 = g / v["torch eager"] if g and v.get("torch eager") else None
        row += f"{r1:>10.2f}" if r1 else f'{"-":>10}'
        row += f"{r2:>10.2f}" if r2 else f'{"-":>10}'
        if r1 and r2:
            row += "  " + ("met" if r1 >= 1.0 else "MISSED") + "/" + ("met" if r2 >= 1.3 else "MISSED")
        print(row)
    if not s:
        print("(no summaries)")


def main():
    a = sys.argv[1:]
    if len(a) >= 3 and a[0] == "check":
        tol = float(a[a.index("--tol") + 1]) if "--tol" in a else 0.05
        sys.exit(0 if check(a[1], a[2], tol) else 1)
    if len(a) >= 2 and a[0] == "table":
        table(a[1:])
        return
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
