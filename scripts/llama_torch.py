#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch twin of examples/llama: the same decoder, the same weights
(the seed's counter hash of llm/weights.go, never torch's RNG),
written plainly in torch: greedy decode over a static KV cache, eager
(SDPA over the filled part) and as one CUDA graph per step (SDPA over the
whole cache with a mask). JSON lines as the Go program prints them:
"step" (tokens of every request, with --logits request 0's f32 logits)
and "summary" (tokens per second).

  python3 scripts/llama_torch.py --preset 1b --batch 1,32 --ctx 1024,8192 --steps 32
  python3 scripts/llama_torch.py --selftest     # the hash against Go's fixed values
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

M32 = 0xFFFFFFFF

PRESETS = {
    "tiny": dict(layers=2, hidden=256, heads=4, kv_heads=2, inter=512, vocab=128, theta=10000.0),
    "1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, inter=8192, vocab=32000, theta=500000.0),
    "8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, inter=14336, vocab=32000, theta=500000.0),
}


def lowbias32_int(x):
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    x ^= x >> 16
    return x


def _mul32(x, c):
    # (x * c) mod 2^32 for int64 tensors holding uint32 values, without
    # overflowing int64: c = hi * 2^16 + lo.
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & M32


def lowbias32(x):
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def tensor_key(seed, tid):
    return lowbias32_int((lowbias32_int(tid) + (seed & M32) * 0x9E3779B1 + (seed >> 32) * 0x85EBCA77) & M32)


def gen_f32(seed, tid, rows, cols, amp, norm, device):
    """The tensor's values in float32 before the bf16 rounding."""
    key = tensor_key(seed, tid)
    i = torch.arange(rows * cols, dtype=torch.int64, device=device)
    h = lowbias32(lowbias32((i + key) & M32) ^ key)
    del i
    t = (h >> 8).to(torch.float32) * (1.0 / 16777216.0) * 2 - 1  # exact
    del h
    if norm:
        t = t * torch.tensor(0.1, dtype=torch.float32, device=device) + torch.tensor(1.0, dtype=torch.float32, device=device)
    else:
        t = t * torch.tensor(amp, dtype=torch.float32, device=device)
    return t.view(rows, cols)


def gen_bf16(*a, **k):
    return gen_f32(*a, **k).to(torch.bfloat16)


def prompt_tokens(seed, batch, prompt, vocab):
    key = tensor_key(seed, 0xFFFFFFFF)
    return [lowbias32_int((key + i) & M32) % vocab for i in range(batch * prompt)]


def selftest():
    """The fixed values of examples/llama's TestWeightsHash (seed 7)."""
    ok = True
    key = tensor_key(7, 0)
    ok &= key == 0x5556689F
    v = gen_f32(7, 0, 1, 2, 1.0, False, "cpu").flatten().tolist()
    want = torch.tensor([0.21178985, 0.7769048], dtype=torch.float32).tolist()
    ok &= v == want
    tiny = PRESETS["tiny"]
    n = gen_bf16(7, 1 + tiny["layers"] * 16, 1, 2, 0.0, True, "cpu").float().flatten().tolist()
    ok &= n == [1.0078125, 1.0625]
    ok &= prompt_tokens(7, 1, 3, tiny["vocab"]) == [123, 37, 47]
    print(json.dumps({"kind": "selftest", "impl": "torch", "ok": bool(ok), "key": hex(key), "values": v, "norm": n,
                      "prompt": prompt_tokens(7, 1, 3, tiny["vocab"])}))
    return ok


class Model:
    def __init__(self, c, seed, rope, device):
        self.c, self.rope_style, self.dev = c, rope, device
        H, nh, kvh = c["hidden"], c["heads"], c["kv_heads"]
        hd = H // nh
        self.hd, self.eps = hd, 1e-5
        Q, KV, I, V = nh * hd, kvh * hd, c["inter"], c["vocab"]
        amp = lambda fan: math.sqrt(3.0 / fan)
        g = lambda tid, r, k, a, norm=False: gen_bf16(seed, tid, r, k, a, norm, device)
        self.embed = g(0, V, H, 1.0)
        self.layers = []
        for l in range(c["layers"]):
            b = 1 + l * 16
            self.layers.append(dict(
                attn_norm=g(b + 0, 1, H, 0.0, True).view(H), wq=g(b + 1, Q, H, amp(H)), wk=g(b + 2, KV, H, amp(H)),
                wv=g(b + 3, KV, H, amp(H)), wo=g(b + 4, H, Q, amp(Q)), mlp_norm=g(b + 5, 1, H, 0.0, True).view(H),
                wg=g(b + 6, I, H, amp(H)), wu=g(b + 7, I, H, amp(H)), wd=g(b + 8, H, I, amp(I))))
        self.final_norm = g(1 + c["layers"] * 16, 1, H, 0.0, True).view(H)
        self.lm = g(2 + c["layers"] * 16, V, H, amp(H))
        ex = torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd
        self.inv = 1.0 / (torch.tensor(c["theta"], dtype=torch.float32, device=device) ** ex)
        try:  # f32 logits from bf16 operands, as gpurt's GEMM with an f32 D
            torch.mm(self.embed[:1], self.lm[:2].t(), out_dtype=torch.float32)
            self.lm_f32 = None
        except Exception:
            self.lm_f32 = self.lm.float()

    def alloc_cache(self, batch, max_len):
        c = self.c
        max_len = (max_len + 15) // 16 * 16  # an aligned mask row for SDPA's kernels
        shape = (batch, c["kv_heads"], max_len, self.hd)
        self.kc = [torch.zeros(shape, dtype=torch.bfloat16, device=self.dev) for _ in range(c["layers"])]
        self.vc = [torch.zeros(shape, dtype=torch.bfloat16, device=self.dev) for _ in range(c["layers"])]
        self.max_len = max_len

    def rmsnorm(self, x, w):
        xf = x.float()
        s = 1.0 / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * s * w.float()).to(torch.bfloat16)

    def rope(self, x, pos):
        # x [B, T, heads, hd], pos [T] int64 (same positions for every request)
        a = pos.to(torch.float32)[:, None] * self.inv[None, :]
        cs, sn = torch.cos(a)[None, :, None, :], torch.sin(a)[None, :, None, :]
        xf = x.float()
        if self.rope_style == "neox":
            half = self.hd // 2
            u, v = xf[..., :half], xf[..., half:]
            return torch.cat([u * cs - v * sn, u * sn + v * cs], -1).to(torch.bfloat16)
        u, v = xf[..., 0::2], xf[..., 1::2]
        return torch.stack([u * cs - v * sn, u * sn + v * cs], -1).flatten(-2).to(torch.bfloat16)

    def logits(self, x):
        if self.lm_f32 is None:
            return torch.mm(x, self.lm.t(), out_dtype=torch.float32)
        return x.float() @ self.lm_f32.t()

    def forward(self, ids, pos, mask=None, length=None):
        """ids [B, T]; pos [T] int64 device tensor of the new tokens'
        positions; attention over the cache up to length (eager) or
        masked by mask [B or 1, 1, T, max_len] (static shapes)."""
        c = self.c
        B, T = ids.shape
        nh, kvh, hd = c["heads"], c["kv_heads"], self.hd
        h = self.embed[ids.reshape(-1)]  # [B*T, H]
        for l, L in enumerate(self.layers):
            xn = self.rmsnorm(h, L["attn_norm"])
            q = self.rope(F.linear(xn, L["wq"]).view(B, T, nh, hd), pos)
            k = self.rope(F.linear(xn, L["wk"]).view(B, T, kvh, hd), pos)
            v = F.linear(xn, L["wv"]).view(B, T, kvh, hd)
            self.kc[l].index_copy_(2, pos, k.transpose(1, 2).contiguous())
            self.vc[l].index_copy_(2, pos, v.transpose(1, 2).contiguous())
            if mask is None:
                kk, vv = self.kc[l][:, :, :length], self.vc[l][:, :, :length]
                m = None
                if T > 1:  # causal prefill: query t sees keys 0 .. pos[t]
                    m = torch.arange(length, device=self.dev)[None, :] <= pos[:, None]
            else:
                kk, vv, m = self.kc[l], self.vc[l], mask
            if T == 1:  # decode: a kv head's query heads as its query rows (no K/V copies for GQA)
                o = F.scaled_dot_product_attention(q.view(B, kvh, nh // kvh, hd), kk, vv, attn_mask=m)
                o = o.reshape(B, nh * hd)
            else:
                o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=m, enable_gqa=True)
                o = o.transpose(1, 2).reshape(B * T, nh * hd)
            h = torch.addmm(h, o, L["wo"].t())
            xn = self.rmsnorm(h, L["mlp_norm"])
            a = (F.silu(F.linear(xn, L["wg"]).float()) * F.linear(xn, L["wu"]).float()).to(torch.bfloat16)
            h = torch.addmm(h, a, L["wd"].t())
        last = h.view(B, T, -1)[:, -1]
        lg = self.logits(self.rmsnorm(last, self.final_norm))
        return lg, torch.argmax(lg, dim=-1).to(torch.int32)


def sync(dev):
    if str(dev).startswith("cuda"):
        torch.cuda.synchronize()


def generate(m, prompt, batch, P, ctx, steps, graph, collect, out_lines, meta, force=None):
    """force: the tokens of every step (e.g. gpurt's) fed back instead of
    this run's own (teacher forcing; eager only)."""
    dev = m.dev
    ids = torch.tensor(prompt, dtype=torch.int64, device=dev).view(batch, P)
    rows = []  # (tokens, logits0)
    n = ctx
    steps_left = steps
    if P > 1:
        pos = torch.arange(ctx, ctx + P, device=dev)
        lg, tok = m.forward(ids, pos, length=ctx + P)
        n += P
        rows.append((tok, lg[0].clone() if collect else None))
        steps_left -= 1
        cur = tok.to(torch.int64).view(batch, 1)
        if force is not None:
            cur = torch.tensor(force[0], dtype=torch.int64, device=dev).view(batch, 1)
    else:
        cur = ids.view(batch, 1)
    static_ids = cur.clone()
    static_pos = torch.tensor([n], dtype=torch.int64, device=dev)
    hist = torch.zeros((max(steps_left, 1), batch), dtype=torch.int32, device=dev)
    g = None
    if graph and steps_left > 0:
        ar = torch.arange(m.max_len, device=dev)

        def step():
            mask = (ar <= static_pos)[None, None, None, :]
            lg, tok = m.forward(static_ids, static_pos, mask=mask)
            static_ids.copy_(tok.view(batch, 1).to(torch.int64))
            static_pos.add_(1)
            return lg
        # warm up on a side stream, then capture (the cache slot written by
        # the warm-up is rewritten by the first replay). Without CUDA, the
        # static step runs as it is (to try its masked attention on a CPU).
    if graph and steps_left > 0 and not str(dev).startswith("cuda"):
        g = "static"
    elif graph and steps_left > 0:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        save_ids, save_pos = static_ids.clone(), static_pos.clone()
        with torch.cuda.stream(s):
            step()
        torch.cuda.current_stream().wait_stream(s)
        static_ids.copy_(save_ids)
        static_pos.copy_(save_pos)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_lg = step()
        static_ids.copy_(save_ids)
        static_pos.copy_(save_pos)
    ar_e = torch.arange(m.max_len, device=dev)
    pos_t = torch.tensor([n], dtype=torch.int64, device=dev)  # eager: the position on the device, no host copy per step
    sync(dev)
    t0 = time.perf_counter()
    for i in range(steps_left):
        if g == "static":
            static_lg = step()
            lg = static_lg
            hist[i].copy_(static_ids.view(batch).to(torch.int32))
        elif g is not None:
            g.replay()
            lg = static_lg
            hist[i].copy_(static_ids.view(batch).to(torch.int32))
        else:
            # the static cache and a mask, as in the graph's step: slicing the
            # cache to the current length gives SDPA a new shape every step,
            # which run4 on the H200 showed costing milliseconds a step (a
            # backend re-planning per shape), so that eager measured torch's
            # planning rather than its decode
            lg, tok = m.forward(cur, pos_t, mask=(ar_e <= pos_t)[None, None, None, :])
            pos_t.add_(1)
            cur = tok.view(batch, 1).to(torch.int64)
            j = i + 1 if P > 1 else i
            if force is not None and j < len(force):
                cur = torch.tensor(force[j], dtype=torch.int64, device=dev).view(batch, 1)
            hist[i].copy_(tok)
        n += 1
        if collect:
            rows.append((None, lg[0].clone()))
    sync(dev)
    dt = time.perf_counter() - t0
    h = hist.cpu().tolist()
    toks = [r[0].cpu().tolist() for r in rows[:1] if r[0] is not None] + h[:steps_left]
    if collect:
        ln = meta.get("logits_n") or None
        lgs = [r[1].float().cpu()[:ln].tolist() for r in rows]
    for i, tk in enumerate(toks):
        line = dict(meta, kind="step", step=i, tokens=tk)
        if collect:
            line["logits"] = lgs[i]
        out_lines.append(line)
    s = dict(meta, kind="summary", decode_steps=steps_left)
    if steps_left > 0:
        s["ms_per_step"] = dt / steps_left * 1e3
        s["tokens_per_s"] = batch * steps_left / dt
    out_lines.append(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rope", default="neox", choices=["neox", "llama"])
    ap.add_argument("--batch", default="1")
    ap.add_argument("--ctx", default="0")
    ap.add_argument("--prompt", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--logits", action="store_true")
    ap.add_argument("--logits-n", type=int, default=512, help="with --logits: how many of request 0's logits (0: all)")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu (eager only: to try the twin without a GPU)")
    ap.add_argument("--force", help="JSON lines of examples/llama: feed its eager run's tokens back (teacher forcing, eager only)")
    a = ap.parse_args()
    if a.selftest:
        sys.exit(0 if selftest() else 1)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("llama_torch.py: no CUDA device", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    c = PRESETS[a.preset]
    forced = {}
    if a.force:
        with open(a.force) as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                x = json.loads(line)
                if x.get("kind") == "step" and x.get("impl") == "gpurt" and x.get("mode") == "eager":
                    forced.setdefault((x["batch"], x["ctx"]), {})[x["step"]] = x["tokens"]
        forced = {k: [v[i] for i in sorted(v)] for k, v in forced.items()}
    t0 = time.perf_counter()
    m = Model(c, a.seed, a.rope, a.device)
    sync(m.dev)
    print(json.dumps(dict(kind="config", impl="torch", preset=a.preset, seed=a.seed, rope=a.rope, torch=torch.__version__,
                          weights_s=time.perf_counter() - t0, f32_logits_via="mm out_dtype" if m.lm_f32 is None else "f32 copy",
                          **c)), flush=True)
    for b in [int(x) for x in a.batch.split(",")]:
        for ctx in [int(x) for x in a.ctx.split(",")]:
            prompt = prompt_tokens(a.seed, b, a.prompt, c["vocab"])
            for mode in a.modes.split(","):
                m.alloc_cache(b, ctx + a.prompt + a.steps + a.warmup + 2)
                meta = dict(impl="torch", mode=mode, batch=b, ctx=ctx, preset=a.preset, weights="bf16", logits_n=a.logits_n)
                force = None
                if a.force:
                    force = forced.get((b, ctx))
                    if force is None or mode != "eager":
                        print(json.dumps(dict(meta, kind="skip", why="no gpurt eager tokens to force" if force is None
                                              else "forcing is eager only")), flush=True)
                        continue
                    meta["mode"] = "forced"
                lines = []
                try:
                    if a.warmup:
                        generate(m, prompt, b, a.prompt, ctx, a.warmup, mode == "graph", False, [], meta)
                    generate(m, prompt, b, a.prompt, ctx, a.steps, mode == "graph", a.logits, lines, meta, force)
                except Exception as e:  # report and go on with the next run
                    lines = [dict(meta, kind="error", error=repr(e)[:500])]
                for line in lines:
                    print(json.dumps(line), flush=True)
                m.kc = m.vc = None
                if m.dev == "cuda":
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
