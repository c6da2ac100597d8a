#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch._grouped_mm (bf16) and torch._scaled_grouped_mm (fp8, row-wise
scales: the same work as the block-scaled gpurt kernel, other scales) on the
grouped cases of gpurt-quantbench: reads its JSON lines (argv[1]) for the
cases (name, rows per expert) and prints JSON lines of the same schema.
GPU time per call: the stream is held by torch.cuda._sleep while the calls
are enqueued, as gpurt-quantbench does. Prints a note line and exits 0 when
torch or the op is missing."""
import json
import sys
import time


def note(name, impl, msg):
    print(json.dumps({"name": name, "impl": impl, "gpu_us": 0, "wall_us": 0, "tflops": 0, "gb_s": 0,
                      "note": msg}))


def main():
    cases = []
    with open(sys.argv[1]) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("impl") == "gpurt grouped" and r.get("m_sizes"):
                cases.append(r)
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        for c in cases:
            note(c["name"], "torch", "torch not importable: %s" % e)
        return
    dev = torch.device("cuda")
    for c in cases:
        name, ms = c["name"], c["m_sizes"]
        fp8 = " fp8 " in name
        parts = dict(p.split("=") for p in name.split() if "=" in p)
        n, k = int(parts["n"]), int(parts["k"])
        g, total = len(ms), sum(ms)
        offs = torch.tensor([sum(ms[: i + 1]) for i in range(g)], dtype=torch.int32, device=dev)
        a = torch.randn(total, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16)
        impl = "torch._scaled_grouped_mm" if fp8 else "torch._grouped_mm"
        try:
            if fp8:
                a8 = a.to(torch.float8_e4m3fn)
                b8 = b.to(torch.float8_e4m3fn).transpose(-2, -1)
                sa = torch.ones(total, device=dev, dtype=torch.float32)
                sb = torch.ones(g, n, device=dev, dtype=torch.float32)
                fn = lambda: torch._scaled_grouped_mm(a8, b8, sa, sb, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
            else:
                bt = b.transpose(-2, -1)
                fn = lambda: torch._grouped_mm(a, bt, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            iters = 50
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / iters * 1e6
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(2e6 + 3 * wall * iters * 2e3))  # cycles (~2 GHz)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            gpu = start.elapsed_time(end) / iters * 1e3
            flops = 2.0 * total * n * k
            r = {"name": name, "impl": impl, "gpu_us": gpu, "wall_us": wall, "tflops": flops / gpu / 1e6,
                 "gb_s": 0, "note": "torch %s" % torch.__version__}
            if fp8:
                r["note"] += "; row-wise scales (ones), same work"
            print(json.dumps(r))
        except Exception as e:  # noqa: BLE001
            note(name, impl, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
