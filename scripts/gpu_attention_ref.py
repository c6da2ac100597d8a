# SPDX-License-Identifier: Apache-2.0
"""gpu_attention_ref.py: what a user would otherwise run for the shapes of
cmd/gpurt-attnbench (keep the SHAPES list in step with its `shapes`):

  * FlashInfer's own Python API (BatchDecodeWithPagedKVCacheWrapper,
    BatchPrefillWithPagedKVCacheWrapper) on the same paged layout (bf16,
    32 query heads, 8 KV heads, head dim 128, page 16, NHD, shuffled pages),
    when `import flashinfer` works (scripts/gpu_attention.sh puts a trimmed
    copy on PYTHONPATH when one was carried);
  * torch.nn.functional.scaled_dot_product_attention on contiguous
    [batch, heads, tokens, dim] K/V (enable_gqa; prefill with the
    bottom-right causal mask gpurt and FlashInfer use), always.

GPU time per call from CUDA events around `iters` back-to-back calls
(after warm-up). One JSON object per line on stdout, the same fields as
gpurt-attnbench's; failures are lines with a "note".
"""
import json
import sys
import time

HQ, HK, DIM, PAGE = 32, 8, 128, 16
SHAPES = [
    ("decode/b1/kv1k", False, 1, 1024, 1),
    ("decode/b1/kv8k", False, 1, 8192, 1),
    ("decode/b16/kv1k", False, 16, 1024, 1),
    ("decode/b16/kv8k", False, 16, 8192, 1),
    ("decode/b64/kv1k", False, 64, 1024, 1),
    ("decode/b64/kv8k", False, 64, 8192, 1),
    ("prefill/b1/qo1k/kv1k", True, 1, 1024, 1024),
    ("prefill/b1/qo4k/kv4k", True, 1, 4096, 4096),
    ("prefill/b4/qo512/kv4k", True, 4, 4096, 512),
    ("prefill/b16/qo128/kv2k", True, 16, 2048, 128),
]


def emit(**kw):
    print(json.dumps(kw), flush=True)


def figures(name, impl, prefill, batch, kv, qo, gpu_us, plan_us=0.0, note=None):
    r = dict(name=name, impl=impl, kind="prefill" if prefill else "decode", batch=batch,
             kv_len=kv, qo_len=qo, gpu_us=gpu_us, wall_us=0.0, plan_us=plan_us)
    if prefill:
        vis = sum(kv - qo + i + 1 for i in range(qo))
        r["tflops"] = 4.0 * vis * batch * HQ * DIM / (gpu_us * 1e-6) / 1e12
    else:
        r["kv_gb_s"] = batch * kv * HK * DIM * 2 * 2 / (gpu_us * 1e-6) / 1e9
    if note:
        r["note"] = note
    emit(**r)


def gpu_time(torch, fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        emit(name="*", impl="torch", note=f"torch is not importable: {e}")
        return
    if not torch.cuda.is_available():
        emit(name="*", impl="torch", note="torch sees no CUDA device")
        return
    dev = torch.device("cuda")
    fi = None
    fi_note = None
    try:
        import flashinfer  # noqa: F401

        fi = flashinfer
    except Exception as e:  # noqa: BLE001
        fi_note = f"flashinfer is not importable: {type(e).__name__}: {e}"[:300]
        emit(name="*", impl="flashinfer", note=fi_note)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    for name, prefill, batch, kv, qo in SHAPES:
        pages_per = (kv + PAGE - 1) // PAGE
        num_pages = pages_per * batch
        rows = batch * qo
        try:
            q = torch.rand(rows, HQ, DIM, device=dev, generator=g, dtype=torch.float32).mul_(2).sub_(1).bfloat16()
            kc = torch.rand(num_pages, PAGE, HK, DIM, device=dev, generator=g, dtype=torch.float32).bfloat16()
            vc = torch.rand(num_pages, PAGE, HK, DIM, device=dev, generator=g, dtype=torch.float32).bfloat16()
            perm = torch.randperm(num_pages, device=dev, generator=g).int()
            indptr = torch.arange(0, batch + 1, device=dev, dtype=torch.int32) * pages_per
            last = torch.full((batch,), kv - (pages_per - 1) * PAGE, device=dev, dtype=torch.int32)
            qo_indptr = torch.arange(0, batch + 1, device=dev, dtype=torch.int32) * qo
        except Exception as e:  # noqa: BLE001
            emit(name=name, impl="torch", note=f"allocation failed: {e}"[:300])
            continue
        if fi is not None:
            try:
                ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
                if prefill:
                    w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
                    plan = lambda: w.plan(qo_indptr, indptr, perm, last, HQ, HK, DIM, PAGE,  # noqa: E731
                                          causal=True, q_data_type=torch.bfloat16,
                                          kv_data_type=torch.bfloat16)
                else:
                    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
                    plan = lambda: w.plan(indptr, perm, last, HQ, HK, DIM, PAGE,  # noqa: E731
                                          q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
                plan()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(20):
                    plan()
                plan_us = (time.perf_counter() - t0) * 1e6 / 20
                torch.cuda.synchronize()
                us = gpu_time(torch, lambda: w.run(q, (kc, vc)), iters)
                figures(name, "flashinfer", prefill, batch, kv, qo, us, plan_us)
            except Exception as e:  # noqa: BLE001
                emit(name=name, impl="flashinfer", note=f"error: {type(e).__name__}: {e}"[:300])
        # torch SDPA on contiguous K/V (the pages gathered once, outside the timing).
        try:
            import torch.nn.functional as F

            kk = kc[perm.long()].reshape(batch, pages_per * PAGE, HK, DIM)[:, :kv].transpose(1, 2).contiguous()
            vv = vc[perm.long()].reshape(batch, pages_per * PAGE, HK, DIM)[:, :kv].transpose(1, 2).contiguous()
            qq = q.reshape(batch, qo, HQ, DIM).transpose(1, 2).contiguous()
            mask = None
            if prefill and qo != kv:
                from torch.nn.attention.bias import causal_lower_right

                mask = causal_lower_right(qo, kv)
            causal = prefill and qo == kv

            def sdpa():
                return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, is_causal=causal,
                                                      enable_gqa=True)

            us = gpu_time(torch, sdpa, iters)
            figures(name, "torch_sdpa", prefill, batch, kv, qo, us,
                    note="contiguous K/V (no page table)")
        except Exception as e:  # noqa: BLE001
            emit(name=name, impl="torch_sdpa", note=f"error: {type(e).__name__}: {e}"[:300])
        del q, kc, vc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
