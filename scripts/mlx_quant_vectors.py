#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes test vectors of MLX's affine quantization (mlx.core.quantize) as
JSON, for quant's bit-exact test: python3 scripts/mlx_quant_vectors.py
[--seed N] OUT.json. Needs `pip install mlx numpy` (mlx runs on Linux
CPUs). Every array is base64 of its raw little-endian bytes: w in its own
dtype, q as MLX's uint32 words, scales and biases in the weights' dtype."""
import argparse
import base64
import json

import mlx.core as mx
import numpy as np


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def raw(arr):
    # MLX array -> numpy bytes of the same width (bf16 has no numpy dtype).
    if arr.dtype == mx.bfloat16:
        return np.array(arr.view(mx.uint16))
    return np.array(arr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=12)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    dtypes = {"bf16": mx.bfloat16, "f16": mx.float16, "f32": mx.float32}
    cases = []
    shapes = [(8, 256), (5, 384), (3, 128)]
    i = 0
    for dname, dt in dtypes.items():
        for gs in (32, 64, 128):
            for bits in (8, 4, 2):
                rows, cols = shapes[i % len(shapes)]
                i += 1
                w = rng.standard_normal((rows, cols)).astype(np.float32)
                w *= rng.choice([1e-3, 0.05, 1.0, 30.0])
                # Edge groups: constant (the eps path), all positive, a
                # zero group, one huge outlier, exact ties.
                w[0, :gs] = 0.25
                w[1 % rows, gs:2 * gs] = np.abs(w[1 % rows, gs:2 * gs])
                if cols >= 3 * gs:
                    w[2 % rows, 2 * gs:3 * gs] = 0.0
                w[rows - 1, cols - 1] = 1000.0 if dname != "f16" else 600.0
                w[rows - 1, 0:gs] = np.round(w[rows - 1, 0:gs] * 4) / 4
                wm = mx.array(w).astype(dt)
                q, s, b = mx.quantize(wm, group_size=gs, bits=bits)
                mx.eval(q, s, b)
                cases.append({
                    "dtype": dname, "rows": rows, "cols": cols,
                    "group_size": gs, "bits": bits,
                    "w": b64(raw(wm)), "q": b64(np.array(q)),
                    "scales": b64(raw(s)), "biases": b64(raw(b)),
                })
    with open(args.out, "w") as f:
        json.dump({"mlx_version": mx.__version__, "seed": args.seed, "cases": cases}, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
