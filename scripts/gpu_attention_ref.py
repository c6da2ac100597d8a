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

  * FlashInfer's own batch-decode and batch-prefill modules (its csrc
    bindings, built with its JIT's flags by scripts/build_fi_ref.sh where
    the wheel's sources are and carried as .whl/fi-ref/fi_batch_decode.so
    and fi_batch_prefill.so with the apache-tvm-ffi wheel; $GPURT_FI_REF_DIR
    names the folder, tvm_ffi must be importable): the plan and run (paged
    run, causal, for prefill) that FlashInfer's BatchDecode- and
    BatchPrefillWithPagedKVCacheWrapper call, with PDL off (as gpurt
    launches) and on (FlashInfer's default on sm_90);

GPU time per call from CUDA events around `iters` back-to-back calls
(after warm-up). One JSON object per line on stdout, the same fields as
gpurt-attnbench's; failures are lines with a "note".
"""
import json
import os
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


def time_plan(torch, plan, n):
    """plan() once, then n more times: the last plan's result and the mean
    wall time of a plan call in us (the device synchronized either side)."""
    info = plan()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        info = plan()
    us = (time.perf_counter() - t0) * 1e6 / n
    torch.cuda.synchronize()
    return info, us


def fi_workspaces(torch, dev):
    """FlashInfer's float and int workspaces on the device and the pinned
    host one (128, 8 and 8 MiB)."""
    return (torch.empty(128 << 20, dtype=torch.uint8, device=dev), torch.empty(8 << 20, dtype=torch.uint8, device=dev),
            torch.empty(8 << 20, dtype=torch.uint8, pin_memory=True))


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    # "sdpa": torch only; "fi": FlashInfer only (its package, else its
    # decode module); "all": both.
    mode = sys.argv[2] if len(sys.argv) > 2 else "all"
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
    fimod = None
    fipre = None
    d = os.environ.get("GPURT_FI_REF_DIR", "")
    if mode != "sdpa":
        try:
            import flashinfer  # noqa: F401

            fi = flashinfer
        except Exception as e:  # noqa: BLE001
            emit(name="*", impl="flashinfer", note=f"flashinfer is not importable: {type(e).__name__}: {e}"[:300])
    if mode == "sdpa":
        pass
    elif d:
        try:
            import tvm_ffi

            fimod = tvm_ffi.load_module(os.path.join(d, "fi_batch_decode.so"))
        except Exception as e:  # noqa: BLE001
            emit(name="*", impl="flashinfer_module",
                 note=f"FlashInfer's decode module did not load: {type(e).__name__}: {e}"[:300])
        try:
            import tvm_ffi

            fipre = tvm_ffi.load_module(os.path.join(d, "fi_batch_prefill.so"))
        except Exception as e:  # noqa: BLE001
            emit(name="*", impl="flashinfer_module",
                 note=f"FlashInfer's prefill module did not load: {type(e).__name__}: {e}"[:300])
    else:
        emit(name="*", impl="flashinfer_module", note="GPURT_FI_REF_DIR not set (no FlashInfer decode module)")
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
                _, plan_us = time_plan(torch, plan, 20)
                us = gpu_time(torch, lambda: w.run(q, (kc, vc)), iters)
                figures(name, "flashinfer", prefill, batch, kv, qo, us, plan_us)
            except Exception as e:  # noqa: BLE001
                emit(name=name, impl="flashinfer", note=f"error: {type(e).__name__}: {e}"[:300])
        if fimod is not None and not prefill:
            try:
                fws, iws, pws = fi_workspaces(torch, dev)
                indptr_h = indptr.cpu()
                eq = torch.empty(0, dtype=torch.bfloat16)

                def fiplan():
                    return fimod.plan(fws, iws, pws, indptr_h, batch, HQ, HK, PAGE, False, -1, 0.0, DIM, DIM, eq, eq)

                info, plan_us = time_plan(torch, fiplan, 200)
                out = torch.empty_like(q)
                for pdl, impl in ((False, "flashinfer"), (True, "flashinfer_pdl")):
                    us = gpu_time(torch, lambda: fimod.run(fws, iws, info, q, kc, vc, indptr, perm, last, out, None, 0,
                                                           -1, pdl, None, 0.0, 1.0 / DIM ** 0.5, 1.0, 1e4), iters)
                    figures(name, impl, prefill, batch, kv, qo, us, plan_us,
                            note="FlashInfer's own decode module (csrc binding), PDL " + ("on" if pdl else "off"))
            except Exception as e:  # noqa: BLE001
                emit(name=name, impl="flashinfer", note=f"error: {type(e).__name__}: {e}"[:300])
        # The prefill module: prefill shapes (causal), and decode shapes as
        # FlashInfer's tensor-core decode (one query row a request, no mask,
        # its CUDA-graph mode with uniform_q_len 1, as its decode wrapper
        # with use_tensor_cores=True plans it), rows "flashinfer_tc".
        if fipre is not None:
            try:
                fws, iws, pws = fi_workspaces(torch, dev)
                qo_h, kv_h = qo_indptr.cpu(), indptr.cpu()
                kvlen_h = torch.full((batch,), kv, dtype=torch.int32)
                tc = not prefill

                def fiplan():
                    return fipre.plan(fws, iws, pws, qo_h, kv_h, kvlen_h, rows, batch, HQ, HK, PAGE, tc, DIM, DIM,
                                      prefill, -1, -1, False, 0, 1 if tc else 0, tc)

                info, plan_us = time_plan(torch, fiplan, 50)
                out = torch.empty_like(q)
                none8 = [None] * 8
                base = "flashinfer_tc" if tc else "flashinfer"
                for pdl, impl in ((False, base), (True, base + "_pdl")):
                    us = gpu_time(torch, lambda: fipre.paged_run(fws, iws, info, q, kc, vc, qo_indptr, indptr, perm,
                                                                 last, out, None, 1 if prefill else 0, 0, -1, pdl,
                                                                 *none8, 0.0, 1.0 / DIM ** 0.5, 1.0, 1e4, 0), iters)
                    figures(name, impl, prefill, batch, kv, qo, us, plan_us,
                            note="FlashInfer's own prefill module (csrc binding), " +
                                 ("causal" if prefill else "decode rows (its tensor-core decode)") +
                                 ", PDL " + ("on" if pdl else "off"))
            except Exception as e:  # noqa: BLE001
                emit(name=name, impl="flashinfer", note=f"error: {type(e).__name__}: {e}"[:300])
        # torch SDPA on contiguous K/V (the pages gathered once, outside the timing).
        if mode == "fi":
            del q, kc, vc
            torch.cuda.empty_cache()
            continue
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
