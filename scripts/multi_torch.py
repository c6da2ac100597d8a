# SPDX-License-Identifier: Apache-2.0
"""multi_torch.py — the PyTorch baseline of scripts/gpu_multi.sh.

torch.distributed with the NCCL backend, one process per GPU (what users
run), on the same all-reduce sizes and element type as gpurt-multibench,
timed the same way: after warm-up every rank synchronises its device, N
all-reduces (in place, sum) are enqueued back to back, the device is
synchronised again; the figure is the wall time over N, and bus bandwidth
is NCCL's (algbw * 2 (n-1) / n). Then, in this process, peer copies
(tensor.copy_ from cuda:0 to cuda:1 and back).

Every result is one JSON line on stdout (rank 0), like gpurt-multibench's:
{"name": "all_reduce 1GiB", "impl": "torch.distributed nccl", ...}.
No network: the ranks meet through a file in a temporary folder.

usage: python3 scripts/multi_torch.py [--sizes 8K,...,1G] [--dtype bf16]
                                      [--ranks 2] [--peer 1G]
"""
import argparse
import json
import os
import sys
import tempfile
import time


def parse_size(s):
    s = s.strip().upper()
    mul = 1
    for suf, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suf):
            s, mul = s[:-1], m
    return int(s) * mul


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return "%dB" % n


def iters(nbytes):
    return int(max(5, min(200, 60e9 // max(nbytes, 1))))


def rank_main(rank, world, init_file, sizes, dtype_name, q):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    try:
        dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    es = torch.tensor([], dtype=dtype).element_size()
    buf = torch.zeros(max(sizes) // es, dtype=dtype, device="cuda")
    out = []
    for nbytes in sizes:
        t = buf[: nbytes // es]
        for _ in range(5):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        n = iters(nbytes)
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        us = (time.perf_counter() - t0) * 1e6 / n
        alg = nbytes / (us * 1e3)
        out.append({"name": "all_reduce " + human(nbytes), "impl": "torch.distributed nccl", "bytes": nbytes,
                    "us": us, "algbw_gb_s": alg, "busbw_gb_s": alg * 2 * (world - 1) / world, "iters": n})
    dist.destroy_process_group()
    if rank == 0:
        q.put(out)


def peer(src, dst, nbytes):
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % src)
    b = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % dst)
    with torch.cuda.device(src):
        for _ in range(3):
            b.copy_(a, non_blocking=True)
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        n = max(3, iters(nbytes) // 2)
        t0 = time.perf_counter()
        for _ in range(n):
            b.copy_(a, non_blocking=True)
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        us = (time.perf_counter() - t0) * 1e6 / n
    gbs = nbytes / (us * 1e3)
    return {"name": "peer_copy %s %d->%d" % (human(nbytes), src, dst), "impl": "torch copy_", "bytes": nbytes,
            "us": us, "algbw_gb_s": gbs, "busbw_gb_s": gbs, "iters": n,
            "note": "can_device_access_peer=%s" % torch.cuda.can_device_access_peer(src, dst)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8K,64K,512K,1M,4M,16M,64M,256M,1G")
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--peer", default="1G")
    args = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(json.dumps({"name": "all_reduce", "impl": "torch.distributed nccl", "note": "no torch: %s" % e}))
        return 1
    if torch.cuda.device_count() < args.ranks:
        print(json.dumps({"name": "all_reduce", "impl": "torch.distributed nccl",
                          "note": "torch sees %d GPUs, need %d" % (torch.cuda.device_count(), args.ranks)}))
        return 1
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    print("torch %s, NCCL %s, NCCL_NVLS_ENABLE=%s" % (torch.__version__, ".".join(map(str, torch.cuda.nccl.version())),
                                                      os.environ["NCCL_NVLS_ENABLE"]), file=sys.stderr)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rc = 0
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(r, args.ranks, os.path.join(tmp, "init"), sizes, args.dtype, q))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        res = None
        try:
            res = q.get(timeout=900)
        except Exception as e:  # a rank died: say so, keep the peer figures
            print(json.dumps({"name": "all_reduce", "impl": "torch.distributed nccl", "note": "no result: %r" % e}))
            rc = 1
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                rc = 1
        for r in res or []:
            print(json.dumps(r))
    nb = parse_size(args.peer)
    if nb > 0 and args.ranks >= 2:
        print(json.dumps(peer(0, 1, nb)))
        print(json.dumps(peer(1, 0, nb)))
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
