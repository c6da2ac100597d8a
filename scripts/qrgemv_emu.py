#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
#
# qrgemv_emu.py — a lane-level emulation of the CUDA plugin's int8 ring GEMVs
# (plugins/cuda/src/cuda_quant.cu: qrgemv_body, one token; qrgemvw_body, 2
# to 32 tokens in a cluster of CTAs), for checking a change to their copies,
# their mma fragments or their arithmetic without a GPU: every cp.async of
# a block into its stages (landing only when a wait_group retires its
# commit group: a stage read too early fails), the swizzles, every lane's
# registers put into mma.sync m16n8k16's A and B fragments by the PTX
# ISA's layouts, the combine, the warps' and the cluster's reductions,
# against float64. It runs the warps one after another, so it cannot see
# a missing __syncthreads, and it adds in float64, so it checks where each
# value goes, not the hardware's f32 rounding. Keep it in step with the
# kernels (same names).
#
#   python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy
#   /tmp/v/bin/python scripts/qrgemv_emu.py
import numpy as np
rng = np.random.default_rng(1)
QR_ROWS, QR_KC, QR_ST, QR_WARPS, QR_LD, QR_SB = 16, 512, 4, 4, 512 + 64, 8

def bf16(a):  # round to bf16 (nearest even), as float32
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7fff + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)

def f16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)

class Ring:
    """cp.async's commit groups: a stage's copies land only when a
    wait_group<N> retires their group; until then the stage reads as not
    there (an assertion), so a wrong wait count or a stage refilled too
    early fails."""
    def __init__(self, stages):
        self.pending, self.group, self.valid = [], [], [False] * stages
    def copy(self, stage, fn):  # one cp.async: fn writes when it lands
        self.valid[stage] = False
        self.group.append((stage, fn))
    def commit(self):
        self.pending.append(self.group)
        self.group = []
    def wait(self, n):
        while len(self.pending) > n:
            for stage, fn in self.pending.pop(0):
                fn()
                self.valid[stage] = True
    def check(self, stage):
        assert self.valid[stage], f"stage {stage} read before its copies landed"

def mma(C, A, B):  # A 16x16, B 16x8 (f16 values as float), f32 accumulate
    return C + (A.astype(np.float64) @ B.astype(np.float64))

def weights(m, k, gs, stype):
    """Random codes W, scales S and biases Bi (stype: bf16 or f16)."""
    rs = bf16 if stype == 'bf16' else f16
    W = rng.integers(0, 256, size=(m, k), dtype=np.uint8)
    return W, rs(rng.uniform(0.001, 0.02, size=(m, k // gs))), rs(rng.uniform(-1, 1, size=(m, k // gs)))

def run(m, k, gs, xtype, wide=False, stype='bf16'):
    gshift = gs.bit_length() - 1
    groups = k // gs
    W, S, Bi = weights(m, k, gs, stype)
    x = rng.standard_normal(k).astype(np.float32)
    if wide:
        x = x * np.exp2(rng.integers(-20, 21, size=k)).astype(np.float32)
    x = bf16(x) if xtype == 'bf16' else x.astype(np.float16).astype(np.float32)
    Wd = S.repeat(gs, axis=1).astype(np.float64) * W + Bi.repeat(gs, axis=1)
    ref = Wd @ x.astype(np.float64)
    y = np.zeros(m)
    chunks = k // QR_KC
    spr = (QR_KC >> gshift) // 4
    for blk in range((m + QR_ROWS - 1) // QR_ROWS):
        row0 = blk * QR_ROWS
        cw = np.zeros((QR_ST, QR_ROWS * QR_LD), np.uint8)
        cx = np.zeros((QR_ST, QR_KC), np.float32)
        cs = np.zeros((QR_ST, QR_ROWS, QR_SB), np.float32)
        cb = np.zeros((QR_ST, QR_ROWS, QR_SB), np.float32)
        ring = Ring(QR_ST)
        def issue(c):  # issue_w and issue_x, then the commit
            if c < chunks:
                s, k0 = c % QR_ST, c * QR_KC
                for tid in range(QR_WARPS * 32):
                    for i in range(tid, QR_ROWS * (QR_KC // 16), QR_WARPS * 32):
                        r, p = i // (QR_KC // 16), i % (QR_KC // 16)
                        row = min(row0 + r, m - 1)
                        def f(s=s, r=r, p=p, row=row, k0=k0):
                            cw[s, r * QR_LD + p * 16: r * QR_LD + p * 16 + 16] = W[row, k0 + p * 16: k0 + p * 16 + 16]
                        ring.copy(s, f)
                    if tid < 2 * QR_ROWS * spr:
                        which, j = tid // (QR_ROWS * spr), tid % (QR_ROWS * spr)
                        r, p = j // spr, j % spr
                        row = min(row0 + r, m - 1)
                        src = (Bi if which else S)[row].reshape(-1)  # row*groups + ...
                        off = (k0 >> gshift) + p * 4
                        def f(s=s, r=r, p=p, src=src, off=off, which=which):
                            (cb if which else cs)[s, r, p * 4: p * 4 + 4] = src[off: off + 4]
                        ring.copy(s, f)
                    if tid < QR_KC // 8:
                        def f(s=s, tid=tid, c=c):
                            cx[s, tid * 8: tid * 8 + 8] = x[c * QR_KC + tid * 8: c * QR_KC + tid * 8 + 8]
                        ring.copy(s, f)
            ring.commit()
        for c in range(QR_ST - 1): issue(c)
        acc = np.zeros((QR_WARPS, 32, 2, 2))
        for c in range(chunks):
            issue(c + QR_ST - 1)
            ring.wait(QR_ST - 1)
            s = c % QR_ST
            ring.check(s)
            for warp in range(QR_WARPS):
                for q in range(2):
                    d0 = warp * 128 + q * 64
                    # per lane: x' (8 pairs), unsc, codes
                    xf = np.zeros((32, 16)); unsc = np.ones(32); cv = np.zeros((32, 2, 16), np.int64)
                    for lane in range(32):
                        gq, tq = lane >> 2, lane & 3
                        xs = cx[s, d0 + 16 * tq: d0 + 16 * tq + 16]
                        xf[lane] = xs
                        for t in range(2):
                            base = (8 * t + gq) * QR_LD + d0 + 16 * tq
                            cv[lane, t] = cw[s, base: base + 16]
                    if xtype == 'bf16':
                        x0 = xf.copy()
                        for lane in range(32):
                            quad = [(lane & ~3) | i for i in range(4)]
                            mx = max(np.abs(x0[l]).max() for l in quad)
                            e = (np.float32(mx).view(np.uint32) >> 23) & 0xff
                            sx = min(max(141 - int(e), -126), 126)
                            up = np.float32(2.0) ** sx; unsc[lane] = np.float32(2.0) ** (-sx)
                            xf[lane] = (xf[lane] * up).astype(np.float16).astype(np.float64)
                    X = np.zeros((32, 4)); P = np.zeros((2, 32, 4))
                    for j in range(4):
                        # assemble A (16x16) and B (16x8) from the lanes' registers
                        A = np.full((16, 16), np.nan); Bo = np.full((16, 8), np.nan); Bt = [np.full((16, 8), np.nan) for _ in range(2)]
                        for lane in range(32):
                            gq, tq = lane >> 2, lane & 3
                            regs = [xf[lane][4*j:4*j+2], xf[lane][4*j:4*j+2], xf[lane][4*j+2:4*j+4], xf[lane][4*j+2:4*j+4]]
                            A[gq, 2*tq:2*tq+2] = regs[0]; A[gq+8, 2*tq:2*tq+2] = regs[1]
                            A[gq, 2*tq+8:2*tq+10] = regs[2]; A[gq+8, 2*tq+8:2*tq+10] = regs[3]
                            Bo[2*tq:2*tq+2, gq] = 1.0; Bo[2*tq+8:2*tq+10, gq] = 1.0
                            for t in range(2):
                                b = 1024 + cv[lane, t, 4*j:4*j+4].astype(np.float64)
                                Bt[t][2*tq:2*tq+2, gq] = b[0:2]; Bt[t][2*tq+8:2*tq+10, gq] = b[2:4]
                        assert not np.isnan(A).any() and not np.isnan(Bo).any()
                        Dx = A @ Bo; Dp = [A @ Bt[t] for t in range(2)]
                        for lane in range(32):
                            gq, tq = lane >> 2, lane & 3
                            X[lane] += [Dx[gq, 2*tq], Dx[gq, 2*tq+1], Dx[gq+8, 2*tq], Dx[gq+8, 2*tq+1]]
                            for t in range(2):
                                P[t, lane] += [Dp[t][gq, 2*tq], Dp[t][gq, 2*tq+1], Dp[t][gq+8, 2*tq], Dp[t][gq+8, 2*tq+1]]
                    gl = d0 >> gshift
                    for lane in range(32):
                        tq = lane & 3
                        for t in range(2):
                            for e in range(2):
                                r = 8 * t + 2 * tq + e
                                v = cs[s, r, gl] * (P[t, lane, e] - 1024 * X[lane, e]) + cb[s, r, gl] * X[lane, e]
                                acc[warp, lane, t, e] += v * unsc[lane]
        red = np.zeros((QR_WARPS, QR_ROWS))
        for warp in range(QR_WARPS):
            for lane in range(4):
                for t in range(2):
                    for e in range(2):
                        red[warp, 8 * t + 2 * lane + e] = acc[warp, lane, t, e]
        for r in range(QR_ROWS):
            if row0 + r < m: y[row0 + r] = red[:, r].sum()
    err = np.abs(y - ref).max() / np.abs(ref).max()
    print(f"m {m} k {k} gs {gs} {xtype}{' wide' if wide else ''}: max rel err {err:.2e}")
    assert err < 1e-5, err


QS_ROWS, QS_KC, QS_ST, QS_WARPS, QS_SBY = 64, 256, 3, 4, 16

def swz_w(r, p): return p ^ ((r & 1) << 2)
def swz_x(t, p): return p ^ (t & 1)

def bits16(v, xtype):  # the weight rounded to x's type, as pack2<XT>
    return bf16(v) if xtype == 'bf16' else np.float32(v).astype(np.float16).astype(np.float32)

def runw(m, n, k, gs, xtype, split, stype='bf16'):
    """gpurt_qrgemvw (qrgemvw_body): MT m-tiles of 16 tokens, a cluster of split CTAs a row block."""
    MT = 1 if n <= 16 else 2
    gshift = gs.bit_length() - 1
    groups = k // gs
    W, S, Bi = weights(m, k, gs, stype)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x = bf16(x) if xtype == 'bf16' else x.astype(np.float16).astype(np.float32)
    Wd = S.repeat(gs, axis=1).astype(np.float64) * W + Bi.repeat(gs, axis=1)
    Wr = bits16(Wd.astype(np.float32), xtype).astype(np.float64)  # every weight rounded once
    ref = x.astype(np.float64) @ Wr.T                              # [n][m]
    y = np.full((n, m), np.nan)
    chunks = k // QS_KC
    sby = (QS_KC >> gshift) * 2
    ncopy = min(n, 16 * MT)
    for blk in range((m + QS_ROWS - 1) // QS_ROWS):
        row0 = blk * QS_ROWS
        parts = []
        for rank in range(split):
            c0 = rank * chunks // split
            nc = (rank + 1) * chunks // split - c0
            # a stage as bytes-level arrays: codes by physical piece, x by physical piece
            cw = np.zeros((QS_ST, QS_ROWS, QS_KC), np.uint8)
            cx = np.full((QS_ST, 16 * MT, QS_KC), np.nan)  # tokens past n stay unset (garbage)
            cs = np.zeros((QS_ST, QS_ROWS, QS_SBY // 2)); cb = np.zeros((QS_ST, QS_ROWS, QS_SBY // 2))
            ring = Ring(QS_ST)
            def issue(i):
                if i < nc:
                    s, k0 = i % QS_ST, (c0 + i) * QS_KC
                    for q in range(QS_ROWS * (QS_KC // 16)):
                        r, p = q // (QS_KC // 16), q % (QS_KC // 16)
                        row = min(row0 + r, m - 1)
                        d = swz_w(r, p) * 16
                        def f(s=s, r=r, d=d, row=row, k0=k0, p=p):
                            cw[s, r, d:d + 16] = W[row, k0 + p * 16: k0 + p * 16 + 16]
                        ring.copy(s, f)
                    for q in range(ncopy * (QS_KC // 8)):
                        t, p = q // (QS_KC // 8), q % (QS_KC // 8)
                        d = swz_x(t, p) * 8
                        def f(s=s, t=t, d=d, k0=k0, p=p):
                            cx[s, t, d:d + 8] = x[t, k0 + p * 8: k0 + p * 8 + 8]
                        ring.copy(s, f)
                    for tid in range(2 * QS_ROWS):
                        which, r = tid // QS_ROWS, tid % QS_ROWS
                        row = min(row0 + r, m - 1)
                        src = (Bi if which else S)[row]
                        off = k0 >> gshift
                        nv = sby // 2
                        def f(s=s, r=r, src=src, off=off, nv=nv, which=which):
                            (cb if which else cs)[s, r, :nv] = src[off: off + nv]
                        ring.copy(s, f)
                ring.commit()
            for i in range(QS_ST - 1): issue(i)
            acc = np.zeros((QS_WARPS, 32, MT, 8, 4))
            for i in range(nc):
                issue(i + QS_ST - 1)
                ring.wait(QS_ST - 1)
                s = i % QS_ST
                ring.check(s)
                for warp in range(QS_WARPS):
                    xa = np.zeros((32, MT, 2, 16))
                    for lane in range(32):
                        gq, tq = lane >> 2, lane & 3
                        for mt in range(MT):
                            for h in range(2):
                                t = 16 * mt + gq + 8 * h
                                p0 = 8 * warp + 2 * tq
                                v0 = cx[s, t, swz_x(t, p0) * 8: swz_x(t, p0) * 8 + 8]
                                v1 = cx[s, t, swz_x(t, p0 + 1) * 8: swz_x(t, p0 + 1) * 8 + 8]
                                xa[lane, mt, h] = np.concatenate([v0, v1])
                    for t in range(8):
                        bw = np.zeros((32, 16))
                        for lane in range(32):
                            gq, tq = lane >> 2, lane & 3
                            r = 8 * t + gq
                            ph = swz_w(r, 4 * warp + tq) * 16
                            cv = cw[s, r, ph: ph + 16].astype(np.float64)
                            gl = (64 * warp + 16 * tq) >> gshift
                            bw[lane] = bits16((cs[s, r, gl] * cv + cb[s, r, gl]).astype(np.float32), xtype)
                        for mt in range(MT):
                            for j in range(4):
                                A = np.full((16, 16), np.nan); B = np.full((16, 8), np.nan)
                                for lane in range(32):
                                    gq, tq = lane >> 2, lane & 3
                                    lo, hi = xa[lane, mt, 0], xa[lane, mt, 1]
                                    A[gq, 2*tq:2*tq+2] = lo[4*j:4*j+2]; A[gq+8, 2*tq:2*tq+2] = hi[4*j:4*j+2]
                                    A[gq, 2*tq+8:2*tq+10] = lo[4*j+2:4*j+4]; A[gq+8, 2*tq+8:2*tq+10] = hi[4*j+2:4*j+4]
                                    B[2*tq:2*tq+2, gq] = bw[lane, 4*j:4*j+2]; B[2*tq+8:2*tq+10, gq] = bw[lane, 4*j+2:4*j+4]
                                assert not np.isnan(B).any()
                                with np.errstate(invalid='ignore'):
                                    D = A @ B  # rows of tokens past n are NaN (never stored)
                                for lane in range(32):
                                    gq, tq = lane >> 2, lane & 3
                                    acc[warp, lane, mt, t] += [D[gq, 2*tq], D[gq, 2*tq+1], D[gq+8, 2*tq], D[gq+8, 2*tq+1]]
            red = np.zeros((QS_WARPS, 16 * MT, QS_ROWS))
            for warp in range(QS_WARPS):
                for lane in range(32):
                    gq, tq = lane >> 2, lane & 3
                    for mt in range(MT):
                        for t in range(8):
                            for e in range(4):
                                red[warp, 16 * mt + gq + 8 * (e >> 1), 8 * t + 2 * tq + (e & 1)] = acc[warp, lane, mt, t, e]
            parts.append(red.sum(axis=0).reshape(-1))
        for q in range(ncopy * QS_ROWS):
            tok, row = q // QS_ROWS, q % QS_ROWS
            v = sum(parts[r][q] for r in range(split))
            if row0 + row < m: y[tok, row0 + row] = v
    assert not np.isnan(y).any(), "a result was not written"
    err = np.abs(y - ref).max() / np.abs(ref).max()
    print(f"ring skinny: m {m} n {n} k {k} gs {gs} {xtype} split {split}: max rel err {err:.2e}")
    assert err < 1e-5, err

run(40, 1024, 64, 'bf16')
run(37, 1536, 128, 'f16')
run(20, 512, 128, 'bf16', wide=True)
run(16, 512, 64, 'f16')
runw(70, 5, 512, 32, 'bf16', 2)
runw(64, 16, 768, 128, 'f16', 1)
runw(130, 27, 1024, 64, 'bf16', 4)
runw(20, 32, 512, 64, 'f16', 2)
run(48, 1024, 64, 'f16', stype='f16')
runw(66, 9, 512, 64, 'bf16', 2, stype='f16')
