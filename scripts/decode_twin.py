#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""decode_twin.py — the torch side of scripts/gpu_roofline.sh (issue 24).

Three subcommands, each printing JSON lines (flushed as they go, so a run
cut short by its timeout keeps what it measured):

  bandwidth   the GPU's read bandwidth, measured: x.sum() over a large bf16
              tensor (4 GiB by default), timed with CUDA events; one line
              {"kind": "bandwidth", "gbps": best, "gbps_median": ...}.
  twin        a Llama-style decoder written the way gpt-fast writes its
              model (not its code): a static KV cache per layer
              ([batch, kv_heads, max_len, head_dim] buffers, index_copy_ at
              the step's position, attention over the whole cache with a
              mask, K/V repeated to the query heads), the decode step
              compiled with torch.compile(mode="reduce-overhead",
              fullgraph=True) and run under the math SDPA backend as
              gpt-fast's decode loop does (mode "compile"); the same model
              uncompiled, its step captured in a torch.cuda.CUDAGraph (mode
              "graph"). Greedy; random bf16 weights of the preset's shapes
              (the speed does not depend on their values). One "summary"
              line per (mode, batch, ctx), as examples/llama prints them,
              with compile_s for compile rows. Rows go in priority order and
              a row whose estimated time (the last compile's, measured)
              exceeds what is left of --budget is skipped with a "skip" line.
  report      reads the JSON lines of the bandwidth step, examples/llama
              (gpurt) and twin runs, and writes roofline.json, roofline.md
              and roofline.png (matplotlib, when it is there) into --out:
              each row with tokens/s and its HBM use, the bytes a step must
              read (weights, and the K/V of the live context) over the step
              time, against the measured read bandwidth.

DEVICE=cpu (or --device cpu) runs twin on the CPU (compile without CUDA
graphs; graph mode runs the step uncaptured) to try the logic with
--preset tiny.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from llama_summary import host_parts  # noqa: E402  (scripts/lib: the same split as gpu_gemv.sh's lines)

# The shapes of llm.Presets (llm/model.go): layers, hidden, heads, kv heads,
# intermediate, vocab. Keep in step with the Go side.
PRESETS = {
    "tiny": dict(layers=2, hidden=256, heads=4, kv_heads=2, inter=512, vocab=128),
    "1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, inter=8192, vocab=32000),
    "8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, inter=14336, vocab=32000),
}
INT8_GROUP = 64  # llm's default group size: int8 codes + a bf16 scale and bias per group


def emit(obj):
    print(json.dumps(obj), flush=True)


def ints(s):
    return [int(x) for x in str(s).split(",") if x.strip()]


# ---------------------------------------------------------------- bandwidth

def bandwidth(a):
    import torch
    if not torch.cuda.is_available():
        emit(dict(kind="error", impl="bandwidth", error="no CUDA device"))
        return 2
    n = int(a.gib * (1 << 30)) // 2
    x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        x.sum()
    torch.cuda.synchronize()
    ts = []
    for _ in range(a.reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        x.sum()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    nbytes = 2 * n
    best, med = min(ts), statistics.median(ts)
    emit(dict(kind="bandwidth", how="torch bf16 x.sum() over %d bytes, CUDA events, best of %d" % (nbytes, a.reps),
              bytes=nbytes, gbps=nbytes / best / 1e9, gbps_median=nbytes / med / 1e9,
              device=torch.cuda.get_device_name(0), torch=torch.__version__))
    return 0


# ---------------------------------------------------------------- the twin

def build_twin(torch, c, device):
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight

    class KVCache(nn.Module):
        def __init__(self, batch, max_len, kv_heads, head_dim, dtype):
            super().__init__()
            shape = (batch, kv_heads, max_len, head_dim)
            self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
            self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

        def update(self, pos, k, v):
            # pos: [1] int64; k, v: [batch, kv_heads, 1, head_dim]
            self.k.index_copy_(2, pos, k)
            self.v.index_copy_(2, pos, v)
            return self.k, self.v

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads, self.kvh, self.hd = c["heads"], c["kv_heads"], c["hidden"] // c["heads"]
            self.wqkv = nn.Linear(c["hidden"], (self.heads + 2 * self.kvh) * self.hd, bias=False)
            self.wo = nn.Linear(self.heads * self.hd, c["hidden"], bias=False)
            self.cache = None

        def forward(self, x, cos, sin, mask, pos):
            B = x.shape[0]
            q, k, v = self.wqkv(x).split([self.heads * self.hd, self.kvh * self.hd, self.kvh * self.hd], dim=-1)
            q = rope(q.view(B, 1, self.heads, self.hd), cos, sin).transpose(1, 2)
            k = rope(k.view(B, 1, self.kvh, self.hd), cos, sin).transpose(1, 2)
            v = v.view(B, 1, self.kvh, self.hd).transpose(1, 2)
            k, v = self.cache.update(pos, k, v)
            rep = self.heads // self.kvh
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
            return self.wo(y.transpose(1, 2).reshape(B, 1, self.heads * self.hd))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(c["hidden"], c["inter"], bias=False)
            self.w3 = nn.Linear(c["hidden"], c["inter"], bias=False)
            self.w2 = nn.Linear(c["inter"], c["hidden"], bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.feed_forward = Attention(), FeedForward()
            self.attention_norm, self.ffn_norm = RMSNorm(c["hidden"]), RMSNorm(c["hidden"])

        def forward(self, x, cos, sin, mask, pos):
            h = x + self.attention(self.attention_norm(x), cos, sin, mask, pos)
            return h + self.feed_forward(self.ffn_norm(h))

    def rope(x, cos, sin):
        # half-split (NeoX) rotary in f32; cos, sin: [hd/2]
        xf = x.float()
        a, b = xf.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).type_as(x)

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(c["vocab"], c["hidden"])
            self.layers = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.norm = RMSNorm(c["hidden"])
            self.output = nn.Linear(c["hidden"], c["vocab"], bias=False)
            self.max_len = 0

        def setup_caches(self, batch, max_len):
            hd = c["hidden"] // c["heads"]
            for b in self.layers:
                b.attention.cache = None
            if device == "cuda":
                torch.cuda.empty_cache()
            for b in self.layers:
                b.attention.cache = KVCache(batch, max_len, c["kv_heads"], hd, torch.bfloat16)
            inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
            f = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv)
            self.cos, self.sin = torch.cos(f), torch.sin(f)
            self.arange = torch.arange(max_len, device=device)
            self.max_len = max_len

        def forward(self, idx, pos):
            # idx: [batch, 1] int64; pos: [1] int64 (the step's position)
            mask = (self.arange <= pos)[None, None, None, :]
            cos, sin = self.cos[pos], self.sin[pos]
            x = self.tok_embeddings(idx)
            for b in self.layers:
                x = b(x, cos, sin, mask, pos)
            return self.output(self.norm(x))

    with torch.device(device):
        m = Transformer()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return m.to(dtype=torch.bfloat16).eval()


def decode_one_token(model, idx, pos):
    logits = model(idx, pos)
    return logits[:, -1].argmax(dim=-1, keepdim=True)


def twin(a):
    import torch
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        emit(dict(kind="error", impl="torch", error="no CUDA device"))
        return 2
    import torch._dynamo
    import torch._inductor.config as ic
    from torch.nn.attention import SDPBackend, sdpa_kernel
    # gpt-fast's inductor settings; every shape compiled static (no dynamic
    # batch or length), as gpt-fast runs
    ic.coordinate_descent_tuning = os.environ.get("TWIN_CDT", "1") == "1"
    ic.triton.unique_kernel_names = True
    ic.fx_graph_cache = True
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 256
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch.backends.cuda.matmul.allow_tf32 = False
    t_start = time.perf_counter()
    c = dict(PRESETS[a.preset])
    for k in ("layers", "hidden", "heads", "kv_heads", "inter", "vocab"):
        v = getattr(a, k.replace("-", "_"))
        if v:
            c[k] = v
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    model = build_twin(torch, c, dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sync()
    emit(dict(kind="config", impl="torch", preset=a.preset, torch=torch.__version__, weights_s=time.perf_counter() - t0,
              coordinate_descent_tuning=ic.coordinate_descent_tuning, device=dev, **c))
    compiled = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
    modes, batches, ctxs = a.modes.split(","), ints(a.batch), ints(a.ctx)
    # priority: batch 1 and 32 at the first context first, then the rest;
    # compile before graph at each shape
    shapes = [(b, x) for x in ctxs for b in batches]
    shapes.sort(key=lambda bx: (bx[0] not in (1, 32), ctxs.index(bx[1]), batches.index(bx[0])))
    rows = [(m, b, x) for (b, x) in shapes for m in ("compile", "graph") if m in modes]
    est = {"compile": a.compile_guess, "graph": 5.0}
    for mode, b, ctx in rows:
        meta = dict(impl="torch", mode=mode, batch=b, ctx=ctx, preset=a.preset, weights="bf16")
        left = a.budget - (time.perf_counter() - t_start)
        if a.budget > 0 and est[mode] > left:
            emit(dict(meta, kind="skip", why="budget: %.0f s left of %.0f, this row is estimated at %.0f s" % (left, a.budget, est[mode])))
            continue
        t_row = time.perf_counter()
        skips0 = cudagraph_skips(torch)
        try:
            line = run_twin_row(torch, model, compiled, sdpa_kernel, SDPBackend, mode, b, ctx, a.steps, a.warmup, dev, sync, meta)
        except Exception as e:  # report and go on
            line = dict(meta, kind="error", error=repr(e)[:500])
        if mode == "compile" and line.get("kind") == "summary":
            # reduce-overhead falls back to no CUDA graph (and says so in the
            # log) on some patterns: count it here so a row is read for what it is
            line["cudagraph_skips"] = cudagraph_skips(torch) - skips0
        emit(line)
        spent = time.perf_counter() - t_row
        if line.get("kind") == "summary":
            est[mode] = spent if mode == "compile" else max(spent, 1.0)
        for blk in model.layers:
            blk.attention.cache = None
        if dev == "cuda":
            torch.cuda.empty_cache()
    return 0


def cudagraph_skips(torch):
    try:
        from torch._dynamo.utils import counters
        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:  # an older torch without the counter
        return 0


def run_twin_row(torch, model, compiled, sdpa_kernel, SDPBackend, mode, b, ctx, steps, warmup, dev, sync, meta):
    max_len = ctx + steps + max(warmup, 3) + 2
    model.setup_caches(b, max_len)
    idx = torch.randint(0, model.output.out_features, (b, 1), device=dev)
    line = dict(meta, kind="summary", decode_steps=steps)
    with torch.no_grad():
        if mode == "compile":
            # gpt-fast's decode loop: the math SDPA backend (inductor fuses it)
            with sdpa_kernel([SDPBackend.MATH]):
                pos = torch.tensor([ctx], device=dev, dtype=torch.int64)
                t0 = time.perf_counter()
                cur = compiled(model, idx, pos).clone()
                sync()
                line["compile_s"] = time.perf_counter() - t0
                for _ in range(max(warmup, 3) - 1):  # CUDA graph warm-up and recording
                    pos += 1
                    cur = compiled(model, cur, pos).clone()
                sync()
                line["warmup_s"] = time.perf_counter() - t0
                pos = torch.tensor([ctx], device=dev, dtype=torch.int64)
                cur = idx
                sync()
                t0 = time.perf_counter()
                for _ in range(steps):
                    cur = compiled(model, cur, pos).clone()
                    pos += 1
                sync()
                dt = time.perf_counter() - t0
        else:
            static_idx = idx.clone()
            static_pos = torch.tensor([ctx], device=dev, dtype=torch.int64)

            def step():
                nxt = decode_one_token(model, static_idx, static_pos)
                static_idx.copy_(nxt)
                static_pos.add_(1)
            if dev == "cuda":
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(max(warmup, 1)):
                        step()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                run = g.replay
            else:
                run = step
            static_idx.copy_(idx)
            static_pos.fill_(ctx)
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                run()
            sync()
            dt = time.perf_counter() - t0
    line["ms_per_step"] = dt / steps * 1e3
    line["tokens_per_s"] = b * steps / dt
    return line


# ---------------------------------------------------------------- report

def step_bytes(c, batch, ctx, steps, weights):
    """Bytes a decode step must read: every weight once (the blocks' linears
    as int8 codes plus a bf16 scale and bias per group of 64 for int8, and
    the LM head too for int8-all), the norms, the LM head, the batch's
    embedding rows, and the K/V of every
    request's live context (at the timed steps' mean length, ctx +
    steps/2)."""
    L, H, nh, kvh, I, V = c["layers"], c["hidden"], c["heads"], c["kv_heads"], c["inter"], c["vocab"]
    hd = H // nh
    block = L * (H * (nh + 2 * kvh) * hd + nh * hd * H + 3 * H * I)
    per = 2.0 if weights == "bf16" else 1.0 + 2 * 2.0 / INT8_GROUP
    head = (1.0 + 2 * 2.0 / INT8_GROUP if weights == "int8-all" else 2.0) * V * H
    w = block * per + head + 2.0 * ((2 * L + 1) * H + batch * H)
    kv = 2.0 * batch * (ctx + steps / 2.0) * L * 2 * kvh * hd
    return w, kv


def label(r):
    impl, mode = r.get("impl"), r.get("mode")
    if impl == "torch":
        return {"compile": "torch.compile", "graph": "torch graph"}.get(mode, "torch " + str(mode))
    # llama -idle-steps: the device idle before each step, for the bare
    # host cost (its tokens/s are not the pipelined ones: not in the table)
    return "%s %s%s" % (impl, mode, ", idle" if r.get("idle_steps") else "")


def report(a):
    bw, rows, other = None, [], []
    steps = {}  # (log, batch, ctx, weights, mode) -> {step: (tokens, logits)} of gpurt runs
    for path in a.logs:
        try:
            f = open(path)
        except OSError as e:
            other.append(dict(kind="error", error="%s: %s" % (path, e)))
            continue
        with f:
            cfg = {}
            for ln in f:
                ln = ln.strip()
                if not ln.startswith("{"):
                    continue
                try:
                    x = json.loads(ln)
                except ValueError:
                    continue
                k = x.get("kind")
                if k == "bandwidth":
                    bw = x
                elif k == "config":
                    cfg = x
                elif k == "summary" and not os.path.basename(path).startswith("check"):
                    x["preset"] = x.get("preset") or cfg.get("preset")
                    rows.append(x)
                elif k == "step" and x.get("impl") == "gpurt":
                    key = (os.path.basename(path), x["batch"], x["ctx"], cfg.get("weights", "bf16"), x["mode"])
                    steps.setdefault(key, {})[x["step"]] = (x["tokens"], x.get("logits"))
                elif k in ("skip", "error"):
                    x["log"] = os.path.basename(path)
                    other.append(x)
    gbps = bw["gbps"] if bw else None
    out = []
    for r in rows:
        c = PRESETS.get(r.get("preset"))
        if c is None or not r.get("ms_per_step"):
            continue
        w, kv = step_bytes(c, r["batch"], r["ctx"], r.get("decode_steps", 0), r.get("weights", "bf16"))
        t = r["ms_per_step"] / 1e3
        o = dict(model=r["preset"], weights=r.get("weights", "bf16"), batch=r["batch"], ctx=r["ctx"], impl=label(r),
                 tokens_per_s=r["tokens_per_s"], ms_per_step=r["ms_per_step"], weight_bytes=w, kv_bytes=kv,
                 gbps=(w + kv) / t / 1e9, weight_gbps=w / t / 1e9)
        if gbps:
            o["hbm_use"] = o["gbps"] / gbps
        for k in ("graph_launches_per_step", "graph_broken_by", "host_us_per_step", "host_launch_us_per_step",
                  "host_plan_us_per_step", "host_stage_us_per_step", "host_upload_us_per_step", "compile_s",
                  "cudagraph_skips"):
            if k in r:
                o[k] = r[k]
        out.append(o)
    checks = graph_checks(steps)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "roofline.json"), "w") as f:
        json.dump(dict(bandwidth=bw, rows=out, skipped=other, graph_vs_eager=checks), f, indent=1)
    md = markdown(out, bw, other, checks)
    with open(os.path.join(a.out, "roofline.md"), "w") as f:
        f.write(md)
    print(md)
    try:
        plot(out, gbps, os.path.join(a.out, "roofline.png"))
    except Exception as e:  # the table and the JSON are written: say so and go on
        print("decode_twin.py: no plot: %r" % e, file=sys.stderr)
    return 0


def graph_checks(steps):
    """gpurt graph mode against eager, same log and run: every step's tokens
    identical, and the largest difference of request 0's logits (when the
    run printed them)."""
    out = []
    for key in sorted(steps):
        log, b, ctx, w, mode = key
        if mode != "graph" or (log, b, ctx, w, "eager") not in steps:
            continue
        g, e = steps[key], steps[(log, b, ctx, w, "eager")]
        n = sorted(set(g) & set(e))
        same = sum(1 for i in n if g[i][0] == e[i][0])
        diff = None
        for i in n:
            lg, le = g[i][1], e[i][1]
            if lg and le:
                d = max((abs(x - y) for x, y in zip(lg, le) if x is not None and y is not None), default=0.0)
                diff = d if diff is None else max(diff, d)
        out.append(dict(log=log, batch=b, ctx=ctx, weights=w, steps=len(n), tokens_identical_steps=same,
                        max_logit_diff=diff))
    return out


IMPLS = ["gpurt eager", "gpurt graph", "torch.compile", "torch graph"]


def markdown(out, bw, other, checks=()):
    ls = []
    if bw:
        ls.append("Read bandwidth measured in the same run: **%.0f GB/s** (%s; median %.0f GB/s).\n" %
                  (bw["gbps"], bw["how"], bw["gbps_median"]))
    else:
        ls.append("No bandwidth measurement in the logs: HBM use is not given.\n")
    ls.append("Tokens/s of decode (batch × steps / time); in brackets the HBM use, (weights + live K/V bytes per step) "
              "/ step time / measured read bandwidth.\n")
    ls.append("| model | weights | batch | ctx | " + " | ".join(IMPLS) + " | gpurt graph / torch.compile | graph launches/step (broken by) |")
    ls.append("|---" * (6 + len(IMPLS)) + "|")
    keys = sorted({(o["model"], o["weights"], o["batch"], o["ctx"]) for o in out},
                  key=lambda k: (k[0] != "1b", k[0], k[1] != "bf16", k[3], k[2]))
    for k in keys:
        cell = {o["impl"]: o for o in out if (o["model"], o["weights"], o["batch"], o["ctx"]) == k}
        cs = []
        for i in IMPLS:
            o = cell.get(i)
            if not o:
                cs.append("–")
            elif "hbm_use" in o:
                cs.append("%s (%.0f%%)" % (fmt(o["tokens_per_s"]), 100 * o["hbm_use"]))
            else:
                cs.append(fmt(o["tokens_per_s"]))
        g, tc = cell.get("gpurt graph"), cell.get("torch.compile")
        ratio = "%.2f" % (g["tokens_per_s"] / tc["tokens_per_s"]) if g and tc else "–"
        gl = "–"
        if g and "graph_launches_per_step" in g:
            gl = str(g["graph_launches_per_step"])
            if g.get("graph_broken_by"):
                gl += " (" + ", ".join(g["graph_broken_by"]) + ")"
        ls.append("| %s | %s | %d | %s | %s | %s | %s |" % (k[0].upper(), k[1], k[2], ctxs(k[3]), " | ".join(cs), ratio, gl))
    comp = [o for o in out if o["impl"] == "torch.compile" and "compile_s" in o]
    if comp:
        ls.append("\ntorch.compile time per shape (s): " + ", ".join(
            "%s b%d %s: %.0f%s" % (o["model"].upper(), o["batch"], ctxs(o["ctx"]), o["compile_s"],
                                    " (CUDA graphs skipped: see the twin's log)" if o.get("cudagraph_skips") else "") for o in comp))
    def hosts(impl):
        return ", ".join(
            "%s %s b%d %s: %.1f%s" % (o["model"].upper(), o["weights"], o["batch"], ctxs(o["ctx"]), o["host_us_per_step"],
                                      host_parts(o))
            for o in out if o["impl"] == impl and "host_us_per_step" in o)
    host = hosts("gpurt graph")
    if host:
        ls.append("\ngpurt graph host cost per step, pipelined (µs, Decode less its waits; a driver call that "
                  "blocks on a full queue counts): " + host)
    host = hosts("gpurt graph, idle")
    if host:
        ls.append("\ngpurt graph host cost per step with the device idle before each step (µs, the bare cost of "
                  "enqueueing one): " + host)
    if checks:
        ls.append("\ngpurt graph against eager (same run): " + "; ".join(
            "%s %s b%d %s: tokens identical on %d of %d steps%s" % (
                x["log"].replace(".log", ""), x["weights"], x["batch"], ctxs(x["ctx"]), x["tokens_identical_steps"], x["steps"],
                "" if x["max_logit_diff"] is None else ", logits max |diff| %.3g" % x["max_logit_diff"]) for x in checks))
    if other:
        ls.append("\nNot measured:")
        for x in other:
            what = " ".join(str(x.get(k)) for k in ("impl", "mode", "batch", "ctx") if x.get(k) is not None)
            ls.append("- %s: %s" % (what or x.get("log", "?"), x.get("why") or x.get("error")))
    return "\n".join(ls) + "\n"


def fmt(v):
    return "{:,.0f}".format(v)


def ctxs(c):
    return "%dK" % (c // 1024) if c and c % 1024 == 0 else str(c)


def plot(out, gbps, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("decode_twin.py: no matplotlib: no plot (build it from roofline.json elsewhere)", file=sys.stderr)
        return
    keys = sorted({(o["model"], o["weights"], o["batch"], o["ctx"]) for o in out},
                  key=lambda k: (k[0] != "1b", k[0], k[1] != "bf16", k[3], k[2]))
    if not keys:
        return
    metric = "hbm_use" if gbps else "tokens_per_s"
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(keys) + 2), 4.5))
    w = 0.8 / len(IMPLS)
    for j, impl in enumerate(IMPLS):
        ys = []
        for k in keys:
            o = [o for o in out if (o["model"], o["weights"], o["batch"], o["ctx"]) == k and o["impl"] == impl]
            ys.append((100 * o[0][metric] if metric == "hbm_use" else o[0][metric]) if o else 0)
        ax.bar([i + (j - (len(IMPLS) - 1) / 2) * w for i in range(len(keys))], ys, w, label=impl)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(["%s %s\n%s b%d" % (k[0].upper(), k[1], ctxs(k[3]), k[2]) for k in keys], fontsize=7)
    if metric == "hbm_use":
        ax.axhline(100, color="k", lw=0.8, ls="--")
        ax.set_ylabel("HBM use, %% of %.0f GB/s read (measured)" % gbps)
    else:
        ax.set_ylabel("tokens/s")
    ax.set_title("decode: bytes a step must read / step time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("decode_twin.py: wrote", path, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bandwidth")
    b.add_argument("--gib", type=float, default=4.0)
    b.add_argument("--reps", type=int, default=20)
    t = sub.add_parser("twin")
    t.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    for k in ("layers", "hidden", "heads", "kv-heads", "inter", "vocab"):
        t.add_argument("--" + k, type=int, default=0)
    t.add_argument("--batch", default="1")
    t.add_argument("--ctx", default="1024")
    t.add_argument("--steps", type=int, default=32)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--modes", default="compile,graph")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--budget", type=float, default=0, help="seconds for the whole run (0: none): rows that would not fit are skipped")
    t.add_argument("--compile-guess", type=float, default=60, help="seconds a compile row is estimated at before one was measured")
    t.add_argument("--device", default=os.environ.get("DEVICE", "cuda"))
    r = sub.add_parser("report")
    r.add_argument("--out", required=True)
    r.add_argument("logs", nargs="+")
    a = ap.parse_args()
    if a.cmd == "bandwidth":
        return bandwidth(a)
    if a.cmd == "twin":
        if a.device not in ("cuda", "cpu"):
            ap.error("--device %r is not cuda or cpu" % a.device)
        return twin(a)
    return report(a)


if __name__ == "__main__":
    sys.exit(main())
