#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch twin of the decode-step benchmark (bench/decodestep, issue 11).

Per config (hidden/intermediate/layers) and batch, one step is, in plain
torch and bf16 (weights as nn.Linear stores them, out x in):

    h.copy_(x_in)
    per layer: n = rmsnorm(h) * w_norm
               a = F.silu(F.linear(n, W_gate)) * F.linear(n, W_up)
               h.add_(F.linear(a, W_down))

(variant "plain"), or with gate and up as one F.linear over the two
weights concatenated (then chunked) and the residual in h.addmm_(a, W_down.t())
(variant "fused", as gpurt-decodestep's fused variant), each run eagerly
and replayed as a torch.cuda.CUDAGraph, with two RMSNorms:
F.rms_norm ("torch eager" / "torch graph") and the Hugging Face Llama
style in f32 ops ("torch eager hf" / "torch graph hf"). Step time: the
median of events recorded between steps enqueued back to back (as
gpurt-decodestep measures it); host time: the median wall time of one step
(eager) or one CUDAGraph.replay() (graph) on an idle stream. Prints one JSON
line per measurement (the fields of decodestep.Result) and exits 0 with a
note line when torch or CUDA is missing.

usage: decodestep_torch.py [--configs 4096/14336/32,...] [--batches 1,16]
                           [--steps 100] [--warmup 5] [--variants plain,fused]
                           [--norms fused,hf]
"""
import argparse
import json
import math
import statistics
import sys
import time

EPS = 1e-5


def base(c, b, variant="plain"):
    h, i, n = c
    return {"config": "%d/%d/%d" % c, "hidden": h, "inter": i, "layers": n, "batch": b, "variant": variant}


def emit(r):
    print(json.dumps(r), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="4096/14336/32,2048/8192/16,1024/4096/24")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--norms", default="fused,hf", help="rmsnorm variants: fused (F.rms_norm), hf (Llama style)")
    ap.add_argument("--variants", default="plain,fused", help="plain (two linears, add) and/or fused (one linear for gate+up, addmm_)")
    a = ap.parse_args()
    configs = [tuple(int(x) for x in c.split("/")) for c in a.configs.split(",") if c]
    batches = [int(b) for b in a.batches.split(",") if b]
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in ("plain", "fused"):
            ap.error("--variants: %r is not plain or fused" % v)
    for n in a.norms.split(","):
        if n not in ("fused", "hf"):
            ap.error("--norms: %r is not fused or hf" % n)
    try:
        import torch
        import torch.nn.functional as F
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
    except Exception as e:  # noqa: BLE001
        for c in configs:
            for b in batches:
                r = base(c, b)
                r.update({"impl": "torch eager", "step_us": 0, "host_us": 0, "note": "torch unusable: %s" % e})
                emit(r)
        return 0
    dev = torch.device("cuda")
    torch.manual_seed(7)
    rc = 0

    def rms_fused(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, EPS)

    def rms_hf(x, w):
        xf = x.to(torch.float32)
        var = xf.pow(2).mean(-1, keepdim=True)
        return w * (xf * torch.rsqrt(var + EPS)).to(torch.bfloat16)

    norms = {"fused": ("", "F.rms_norm", rms_fused), "hf": (" hf", "hf llama", rms_hf)}

    def measure(run, steps, warmup):
        for _ in range(warmup):
            run()
        torch.cuda.synchronize()
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        for i in range(steps):
            evs[i].record()
            run()
        evs[steps].record()
        evs[steps].synchronize()
        us = [evs[i].elapsed_time(evs[i + 1]) * 1e3 for i in range(steps)]
        host = []
        for _ in range(min(steps, 50)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()
            host.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return statistics.median(us), sum(us) / len(us), statistics.median(host)

    for c in configs:
        H, I, L = c
        try:
            layers = []
            for _ in range(L):
                layers.append((
                    (1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16),
                    (torch.randn(I, H, device=dev) / math.sqrt(H)).to(torch.bfloat16),
                    (torch.randn(I, H, device=dev) / math.sqrt(H)).to(torch.bfloat16),
                    (torch.randn(H, I, device=dev) / math.sqrt(I)).to(torch.bfloat16),
                ))
            if "fused" in variants:
                layers = [(wn, wg, wu, wd, torch.cat((wg, wu), 0)) for wn, wg, wu, wd in layers]
            else:
                layers = [(wn, wg, wu, wd, None) for wn, wg, wu, wd in layers]
        except Exception as e:  # noqa: BLE001
            for b in batches:
                r = base(c, b)
                r.update({"impl": "torch eager", "step_us": 0, "host_us": 0, "note": "weights: %s" % e})
                emit(r)
            rc = 1
            continue
        for b in batches:
            xin = torch.randn(b, H, device=dev).to(torch.bfloat16)
            h = torch.empty_like(xin)
            for variant, key in [(v, k) for v in variants for k in a.norms.split(",")]:
                sfx, nname, rms = norms[key]

                def step_plain():
                    h.copy_(xin)
                    for wn, wg, wu, wd, _ in layers:
                        n = rms(h, wn)
                        act = F.silu(F.linear(n, wg)) * F.linear(n, wu)
                        h.add_(F.linear(act, wd))

                def step_fused():
                    h.copy_(xin)
                    for wn, _, _, wd, wgu in layers:
                        g, u = F.linear(rms(h, wn), wgu).chunk(2, dim=-1)
                        h.addmm_(F.silu(g) * u, wd.t())

                step = step_fused if variant == "fused" else step_plain
                r0 = dict(base(c, b, variant), steps=a.steps, norm=nname, backend="torch %s" % torch.__version__)
                try:
                    med, mean, host = measure(step, a.steps, a.warmup)
                    emit(dict(r0, impl="torch eager" + sfx, step_us=med, mean_us=mean, host_us=host))
                    h.fill_(float("nan"))
                    step()
                    torch.cuda.synchronize()
                    want = h.clone()
                except Exception as e:  # noqa: BLE001
                    emit(dict(r0, impl="torch eager" + sfx, step_us=0, host_us=0, note=str(e)[:300]))
                    rc = 1
                    continue
                try:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            step()
                    torch.cuda.current_stream().wait_stream(side)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        step()
                    h.fill_(float("nan"))
                    g.replay()
                    torch.cuda.synchronize()
                    match = "identical" if torch.equal(h, want) else "differs (max %g)" % (h.float() - want.float()).abs().max().item()
                    med, mean, host = measure(g.replay, a.steps, a.warmup)
                    emit(dict(r0, impl="torch graph" + sfx, step_us=med, mean_us=mean, host_us=host, match=match))
                    del g
                except Exception as e:  # noqa: BLE001
                    emit(dict(r0, impl="torch graph" + sfx, step_us=0, host_us=0, note=str(e)[:300]))
                    rc = 1
        del layers
        torch.cuda.empty_cache()
    return rc


if __name__ == "__main__":
    sys.exit(main())
