// SPDX-License-Identifier: Apache-2.0
//
// The kernels of the 1.4 ops (cuda_quant.c launches them), compiled by nvcc
// into their own fatbin (cuda_quant_fatbin.S), never reachable through
// kernel_get:
//
//  gpurt_qgemv_<x>_<s>_n<N>   y = x * dequant(W)^T for N <= 8 tokens
//     (decode): 32 rows of W per block, k split among its warps, the N
//     tokens as the 8 columns of mma.sync m16n8k16 (see the GEMV section),
//     so each weight byte is read once (16-byte non-caching loads) for all
//     tokens; gpurt_qgemvf_<x>_<s>_n<N> the same loads with the factored
//     arithmetic for groups of 64 and 128 (see FAC in qgemv_body).
//  gpurt_qdequant_<x>_<s>     W dequantized into a 16-bit scratch (s*q + b,
//     rounded to x's type), for the prefill path through cuBLASLt (N >= 128);
//  gpurt_qgemm_<x>_<s>        the tiled kernel below for 8 < N < 128, and
//  gpurt_ggemm_bf16 / _fp8    the grouped GEMM: one tiled tensor-core
//     kernel, D[r][c] = sum_p A[r][p] * B[c][p] over 128 x 128 tiles of D,
//     32 deep, 8 warps of 64 x 32, mma.sync m16n8k16 with f32 accumulation.
//     A and B tiles are staged through registers into double-buffered shared
//     memory: int8 weights are dequantized (s*q + b in f32, rounded to the
//     activation type) and fp8 e4m3 widened to f16 (exact) on the way, so
//     the tensor cores see 16-bit operands. fp8 runs keep a second
//     accumulator per 128-deep block and add it scaled by the block's
//     scale_a (per row) * scale_b (per 128 x 128 block) when the block ends.
//     A launch covers up to GG_MAX_GROUPS groups: a table of tile and row
//     starts in the kernel's parameters, searched by each block.
//
// With GPURT_CUDA_EMU defined, the file compiles on the host (g++ or
// clang++) against ../emu/cuda_emu.h, a CPU emulation of the execution
// model, and every inline-asm helper below takes its emulated branch
// (scripts/cuda_emu.sh runs plugins/cuda/emu/quant_emu_test.cc); what is
// under __CUDA_ARCH__ >= 900 (the L2 bulk prefetches, the PDL wait) is left
// out there, as for sm_80.
//
// The int8 ring GEMVs (gpurt_qrgemv_*, n = 1 through a shared-memory ring;
// gpurt_qrgemvw_*, 2 <= n <= 32 in thread-block clusters) were removed
// after losing to the register GEMVs (gpurt_qgemv*) on every shape measured
// on the H200 (cuda_quant.c's qmm has the figures).
#ifdef GPURT_CUDA_EMU
#include "../emu/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif
#include <stdint.h>

#include <type_traits>

typedef unsigned int u32;
typedef unsigned long long u64;

enum { T_BF16 = 0, T_F16 = 1, T_FP8 = 2, T_Q8 = 3 };

#define GG_BM 128      // rows of A per tile
#define GG_BN 128      // rows of B (columns of D) per tile
#define GG_BK 32       // depth per step
#define GG_LD (GG_BK + 8) // shared row stride in 16-bit elements (80 bytes: no bank conflicts)
#define GG_THREADS 256
#define GG_MAX_GROUPS 64

// ---- element conversions (16-bit values travel as raw bits) ----------------

template <int T> __device__ __forceinline__ float h2f(uint16_t h);
template <> __device__ __forceinline__ float h2f<T_BF16>(uint16_t h) {
  return __uint_as_float((u32)h << 16);
}
template <> __device__ __forceinline__ float h2f<T_F16>(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
template <int T> __device__ __forceinline__ uint16_t f2h(float f);
template <> __device__ __forceinline__ uint16_t f2h<T_BF16>(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
template <> __device__ __forceinline__ uint16_t f2h<T_F16>(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
// The low and high 16-bit values of a 32-bit word as f32.
template <int T> __device__ __forceinline__ float2 w2f(u32 w);
template <> __device__ __forceinline__ float2 w2f<T_BF16>(u32 w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 w2f<T_F16>(u32 w) {
  __half2 h = *reinterpret_cast<__half2 *>(&w);
  return __half22float2(h);
}
template <int T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<T_BF16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32 *>(&v);
}
template <> __device__ __forceinline__ u32 pack2<T_F16>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<u32 *>(&v);
}

// Byte j (0..3) of w as f32, exactly: 2^23 + q built by a byte permute.
__device__ __forceinline__ float byte_f(u32 w, int j) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + (u32)j)) - 8388608.0f;
}

// Two e4m3 bytes (the low 16 bits of w) as an f16 pair, exactly.
__device__ __forceinline__ u32 e4m3x2_f16x2(u32 w) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
  return (u32)h.x | ((u32)h.y << 16);
}

// A 16-byte load that does not keep the line in L1 (W is read once); with
// big, it asks the L2 to fetch the 256 bytes around it from DRAM: a block's
// warps read neighbouring 64-byte pieces of the same rows a batch apart, so
// the rest of each fetch is in the L2 when they ask.
__device__ __forceinline__ uint4 ld_stream(const void *p, bool big) {
#ifdef GPURT_CUDA_EMU
  (void)big;
  return emu::ld16(p);
#else
  uint4 v;
  if (big)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
#endif
}

// A 16-byte load through the L1 (x: read by every block), and a 2-byte one.
__device__ __forceinline__ uint4 ld_cached(const void *p) {
#ifdef GPURT_CUDA_EMU
  return emu::ld16(p);
#else
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#endif
}
// The GEMVs are launched with programmatic dependent launch (cuda_ownk.c's
// cu_own_launch with pdl): they call gpurt_pdl_enter before touching memory
// the kernel before may write.
#include "cuda_pdl.cuh"

#ifdef GPURT_CUDA_EMU
// A prefetch touches its byte: one outside a buffer hits the emulation's guard page.
__device__ __forceinline__ void prefetch_l2(const void *p) { (void)*(const volatile char *)p; }
__device__ __forceinline__ uint16_t ld_u16(const uint16_t *p) { return *p; }
#else
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ uint16_t ld_u16(const uint16_t *p) {
  uint16_t v;
  asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
#endif

// ---- GEMV (decode) --------------------------------------------------------------
//
// A block owns QV_ROWS (32) rows of W and splits k among its warps; each
// warp runs mma.sync m16n8k16 over its share, with the n <= 8 tokens as the
// 8 columns of the B operand (tokens >= n are zeros), so every weight byte
// is loaded once for all n tokens. Per 128-deep batch a lane loads, for the
// 4 rows gq, gq+8, gq+16, gq+24 (gq = lane / 4), 16 bytes at depth
// kb + 16 * (lane % 4) of each of 2 steps (8 16-byte loads in flight), and
// 32 bytes of token gq's x at the same depths. The dot product does not
// care in which order k is summed, so the A and B fragments use the same
// permutation of k: mma step j of a lane takes its bytes 4j .. 4j+3 (A:
// (4j, 4j+1) as a0/a1, (4j+2, 4j+3) as a2/a3; B the same x pairs). A lane's
// 16 codes lie in one group (group sizes are multiples of 16), dequantized
// as s*q + b in f32 and rounded to x's type (like the prefill scratch).
// The warps' f32 accumulators are summed in shared memory at the end.

#define QV_ROWS 32 // rows of W per block
#define QV_U 2     // 64-deep steps per batch
#define QV_MAXW 16 // warps per block at most

__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4], const u32 (&b)[2], int f16) {
#ifdef GPURT_CUDA_EMU
  emu::mma16816(c, a, b, f16 != 0); // a warp collective, the PTX ISA's fragment layout
#else
  if (f16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// The factored forms' x as f16 pairs (xf) from a lane's 8 pairs of x (xw):
// f16 x as it is; bf16 x scaled by a power of two per lane quad (the 64
// values of the quad's depth step: xor-shuffles over lanes 4q .. 4q + 3)
// so that max |x'| is in [2^14, 2^15), then rounded to f16 (bf16's 8 bits
// fit f16's 11 wherever the value is above max |x'| / 2^24). Returns what
// scales the step's result back (1 for f16).
template <int XT> __device__ __forceinline__ float x_to_f16(const u32 (&xw)[8], u32 (&xf)[8]) {
  if constexpr (XT == T_BF16) {
    float2 f[8];
    float mx = 0.f;
#pragma unroll
    for (int p = 0; p < 8; p++) {
      f[p] = w2f<T_BF16>(xw[p]);
      mx = fmaxf(mx, fmaxf(fabsf(f[p].x), fabsf(f[p].y)));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    int sx = 141 - (int)((__float_as_uint(mx) >> 23) & 0xffu);
    sx = sx < -126 ? -126 : sx > 126 ? 126 : sx;
    const float up = __uint_as_float((u32)(sx + 127) << 23);
#pragma unroll
    for (int p = 0; p < 8; p++) xf[p] = pack2<T_F16>(f[p].x * up, f[p].y * up);
    return __uint_as_float((u32)(127 - sx) << 23);
  } else {
#pragma unroll
    for (int p = 0; p < 8; p++) xf[p] = xw[p];
    return 1.f;
  }
}

// A lane's 16 x values of one n-tile's token (two 16-byte loads) as 8
// words of two values each.
__device__ __forceinline__ void xwords(const uint4 (&xv)[2], u32 (&xw)[8]) {
  xw[0] = xv[0].x, xw[1] = xv[0].y, xw[2] = xv[0].z, xw[3] = xv[0].w;
  xw[4] = xv[1].x, xw[5] = xv[1].y, xw[6] = xv[1].z, xw[7] = xv[1].w;
}

// A lane's 16 codes of one row slot dequantized (s q + b in f32, rounded
// to x's type) as 8 pairs, in the k permutation above.
template <int XT>
__device__ __forceinline__ void dequant16(const uint4 &q, float s, float b, u32 (&d)[8]) {
  const u32 qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int p = 0; p < 4; p++) {
    d[2 * p] = pack2<XT>(fmaf(s, byte_f(qw[p], 0), b), fmaf(s, byte_f(qw[p], 1), b));
    d[2 * p + 1] = pack2<XT>(fmaf(s, byte_f(qw[p], 2), b), fmaf(s, byte_f(qw[p], 3), b));
  }
}

// One 64-deep step of a warp over its 4 row slots (32 rows) and NT n-tiles:
// q the lane's 16 codes of each row slot, s and b their group's scale and
// bias as f32, xv the lane's 16 x values of each n-tile's token (8 j + gq),
// in the k permutation described above; acc[j][t] the m16n8 accumulators of
// n-tile j, m-tile t. FAC: the factored arithmetic (groups of 64 or more).
template <int XT, int NT, bool FAC>
__device__ __forceinline__ void qstep(const uint4 (&q)[4], const float (&s)[4], const float (&b)[4],
                                      const uint4 (&xv)[NT][2], float (&acc)[NT][2][4], u32 tq) {
  if constexpr (FAC) {
    // Factored (groups of 64 or more: one group per 64-deep step of a
    // lane quad): sum_k (s q_k + b) x_k = s sum_k q_k x_k + b sum_k x_k,
    // on f16 tensor cores. A is the codes as f16 1024 + q (exact, one
    // byte permute per pair); an all-ones A gives X = sum_k x_k; P - 1024 X
    // is sum_k q_k x_k. bf16 x is scaled per token and step by a power of
    // two so that max |x'| is in [2^14, 2^15) and rounded to f16 (bf16's 8
    // bits fit f16's 11 wherever the value is above max |x'| / 2^24), the
    // step's result scaled back. No weight is rounded to 16 bits.
    const u32 ones[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
    // The codes as A fragments, built once for every n-tile.
    u32 af[4][2][4];
#pragma unroll
    for (int jj = 0; jj < 4; jj++)
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const uint4 &qa = q[2 * t], &qb = q[2 * t + 1];
        const u32 w0 = jj == 0 ? qa.x : jj == 1 ? qa.y : jj == 2 ? qa.z : qa.w;
        const u32 w1 = jj == 0 ? qb.x : jj == 1 ? qb.y : jj == 2 ? qb.z : qb.w;
        af[jj][t][0] = __byte_perm(w0, 0x64646464u, 0x4140);
        af[jj][t][1] = __byte_perm(w1, 0x64646464u, 0x4140);
        af[jj][t][2] = __byte_perm(w0, 0x64646464u, 0x4342);
        af[jj][t][3] = __byte_perm(w1, 0x64646464u, 0x4342);
      }
#pragma unroll
    for (int j = 0; j < NT; j++) {
      u32 xw[8];
      xwords(xv[j], xw);
      u32 xf[8];
      const float unsc = x_to_f16<XT>(xw, xf);
      // Columns 2 tq, 2 tq + 1 of the result are tokens held by lanes 8 tq and 8 tq + 4.
      const float u0 = __shfl_sync(0xffffffffu, unsc, 8 * tq), u1 = __shfl_sync(0xffffffffu, unsc, 8 * tq + 4);
      float P[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}}, X[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int jj = 0; jj < 4; jj++) {
        const u32 bf[2] = {xf[2 * jj], xf[2 * jj + 1]};
        mma16816(X, ones, bf, 1);
#pragma unroll
        for (int t = 0; t < 2; t++) mma16816(P[t], af[jj][t], bf, 1);
      }
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float sr = s[2 * t + (e >> 1)], brow = b[2 * t + (e >> 1)];
          const float v = fmaf(sr, fmaf(-1024.f, X[e], P[t][e]), brow * X[e]);
          acc[j][t][e] = fmaf(v, (e & 1) ? u1 : u0, acc[j][t][e]);
        }
    }
  } else {
    // The lane's 16 dequantized codes of each row slot, as 8 pairs.
    u32 d[4][8];
#pragma unroll
    for (int i = 0; i < 4; i++) dequant16<XT>(q[i], s[i], b[i], d[i]);
#pragma unroll
    for (int j = 0; j < NT; j++) {
      u32 xw[8];
      xwords(xv[j], xw);
#pragma unroll
      for (int jj = 0; jj < 4; jj++) {
        const u32 bf[2] = {xw[2 * jj], xw[2 * jj + 1]};
#pragma unroll
        for (int t = 0; t < 2; t++) {
          const u32 af[4] = {d[2 * t][2 * jj], d[2 * t + 1][2 * jj], d[2 * t][2 * jj + 1],
                             d[2 * t + 1][2 * jj + 1]};
          mma16816(acc[j][t], af, bf, XT == T_F16);
        }
      }
    }
  }
}

// The body for NT n-tiles of 8 tokens (ntok <= 8 NT of them), U 64-deep
// steps a batch and at most MAXW warps a block: the decode GEMV is NT = 1
// (ntok a constant 1..8); the skinny form (gpurt_qgemvw_*, 8 < n <= 64) is
// NT = 2, 4 or 8 over the same loads of W, each lane also loading its
// token 8 j + gq of every n-tile j, and one dequantization (or the factored
// form's codes) feeding NT mma's instead of one.
template <int XT, int ST, int NT, int U, int MAXW, bool FAC>
__device__ __forceinline__ void qgemv_body(const uint8_t *__restrict__ w, const uint16_t *__restrict__ sc,
                                           const uint16_t *__restrict__ bi, const uint16_t *__restrict__ x,
                                           uint16_t *__restrict__ y, u32 m, u32 k, u32 gshift, u32 ntok,
                                           u32 pf) {
  // The warps' partial sums, JC n-tiles at a time (rows padded by one
  // float past NT = 1: lane-indexed rows, no bank conflicts).
  constexpr int JC = NT < 4 ? NT : 4;
  __shared__ float red[MAXW][32][8 * JC + (NT == 1 ? 0 : 1)];
  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const u32 gq = lane >> 2, tq = lane & 3;
  // pf: bits 0-7 the L2 prefetch distance in batches, bit 8 the 256-byte
  // DRAM fetches of W (ld_stream's big), bits 9-12 how many of the warp's
  // first batches are asked into the L2 before the PDL wait (pre, below).
  const bool big = (pf >> 8) & 1;
  const u32 pre = (pf >> 9) & 0xfu;
  pf &= 0xffu;
  const u32 row0 = blockIdx.x * QV_ROWS;
  const u32 groups = k >> gshift;
  // Row slot i: row row0 + 8 * i + gq (slots 0, 1: m-tile 0; 2, 3: m-tile 1);
  // rows past m repeat the last one (loaded, never stored).
  const uint8_t *wr[4];
  const uint16_t *sr[4], *br[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    u32 row = row0 + 8 * i + gq;
    row = row < m ? row : m - 1;
    wr[i] = w + (u64)row * k;
    sr[i] = sc + (u64)row * groups;
    br[i] = bi + (u64)row * groups;
  }
  // n-tile j's token of this lane: 8 j + gq; past ntok, token 0 (the mma's
  // columns are independent: what those columns compute is never stored).
  const uint16_t *xr[NT];
#pragma unroll
  for (int j = 0; j < NT; j++) xr[j] = x + (u64)(8 * j + gq < ntok ? 8 * j + gq : 0) * k;
  float acc[NT][2][4];
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[j][t][e] = 0.f;
  // A batch: U 64-deep steps. The full batches run without a bound check
  // (TAIL false); the last one, when k is not a multiple of 64 U, checks
  // each lane's depth.
  const u32 nb = (k + 64 * U - 1) / (64 * U), nfull = k / (64 * U);
  // Launched with programmatic dependent launch, the block may start while
  // the kernel before it still runs (and may be writing x, or even W). W,
  // its scales and biases of the warp's first pre batches are only asked
  // into the L2 before the wait (the L2 is the coherent point: a line
  // fetched early is still updated by the writer's stores), so their loads
  // after it wait for the L2, not for HBM; every load comes after the wait.
  for (u32 p = 0; p < pre; p++) {
    const u32 bt = warp + p * nw;
    if (bt >= nb) break;
#pragma unroll
    for (int u = 0; u < U; u++) {
      const u32 kk = bt * (64 * U) + u * 64 + tq * 16;
      if (kk < k)
#pragma unroll
        for (int i = 0; i < 4; i++) {
          prefetch_l2(wr[i] + kk);
          if (tq == 0) {
            prefetch_l2(sr[i] + (kk >> gshift));
            prefetch_l2(br[i] + (kk >> gshift));
          }
        }
    }
  }
  gpurt_pdl_enter();
  auto batch = [&](u32 bt, auto tail_c) {
    constexpr bool TAIL = decltype(tail_c)::value;
    // pf batches ahead, the warp's W bytes are asked into the L2 (no
    // registers held: the loads below then wait for the L2, not for HBM).
    if (pf > 0 && bt + pf * nw < nb) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const u32 kk = (bt + pf * nw) * (64 * U) + u * 64 + tq * 16;
        if (kk < k)
#pragma unroll
          for (int i = 0; i < 4; i++) prefetch_l2(wr[i] + kk);
      }
    }
    // Every load of the batch is issued before the first use (volatile
    // asm keeps them in order ahead of the mma's): a lane out of k loads
    // depth 0 instead and zeroes what it loaded.
    uint4 q[U][4], xv[U][NT][2];
    float s[U][4], b[U][4];
    uint16_t sh[U][4], bh[U][4];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const u32 kk = bt * (64 * U) + u * 64 + tq * 16;
      const u32 kc = !TAIL || kk < k ? kk : 0; // k is a multiple of 32: a lane's 16 are all in or all out
#pragma unroll
      for (int i = 0; i < 4; i++) q[u][i] = ld_stream(wr[i] + kc, big);
#pragma unroll
      for (int j = 0; j < NT; j++) {
        xv[u][j][0] = ld_cached(xr[j] + kc);
        xv[u][j][1] = ld_cached(xr[j] + kc + 8);
      }
#pragma unroll
      for (int i = 0; i < 4; i++) {
        sh[u][i] = ld_u16(sr[i] + (kc >> gshift));
        bh[u][i] = ld_u16(br[i] + (kc >> gshift));
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      // Past k (the tail only): the codes and x read at depth 0 count as zeros.
      const bool ok = !TAIL || bt * (64 * U) + u * 64 + tq * 16 < k;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        s[u][i] = ok ? h2f<ST>(sh[u][i]) : 0.f;
        b[u][i] = ok ? h2f<ST>(bh[u][i]) : 0.f;
      }
      if (!ok)
#pragma unroll
        for (int j = 0; j < NT; j++) xv[u][j][0] = xv[u][j][1] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; u++) qstep<XT, NT, FAC>(q[u], s[u], b[u], xv[u], acc, tq);
  };
  u32 bt = warp;
  for (; bt < nfull; bt += nw) batch(bt, std::false_type{});
  if (bt < nb) batch(bt, std::true_type{});
  // acc[j][t][e]: row row0 + 16t + gq + 8(e >> 1), token 8j + 2tq + (e & 1).
  // The warps' partial sums meet in shared memory, JC n-tiles at a time,
  // each summed in warp order (deterministic: a graph replay and an eager
  // call give the same bits).
#pragma unroll
  for (int c = 0; c < NT / JC; c++) {
    if (c > 0) __syncthreads(); // the previous chunk's sums are read
#pragma unroll
    for (int jl = 0; jl < JC; jl++)
#pragma unroll
      for (int t = 0; t < 2; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[warp][lane][jl * 8 + t * 4 + e] = acc[c * JC + jl][t][e];
    __syncthreads();
    for (u32 id = threadIdx.x; id < 256 * JC; id += blockDim.x) { // 32 rows x 8 JC tokens
      const u32 jl = id >> 8, l = (id >> 3) & 31, t = (id >> 2) & 1, e = id & 3;
      float v = 0.f;
      for (u32 i = 0; i < nw; i++) v += red[i][l][jl * 8 + t * 4 + e];
      const u32 row = row0 + 16 * t + (l >> 2) + 8 * (e >> 1), tok = 8 * (c * JC + jl) + 2 * (l & 3) + (e & 1);
      if (row < m && tok < ntok) y[(u64)tok * m + row] = f2h<XT>(v);
    }
  }
}

#define QGEMV(XN, XT, SN, ST, N)                                                                       \
  extern "C" __global__ void __launch_bounds__(QV_MAXW * 32, 1)                                         \
      gpurt_qgemv_##XN##_##SN##_n##N(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,         \
                                     const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift, u32, u32 pf) { \
    qgemv_body<XT, ST, 1, QV_U, QV_MAXW, false>(w, sc, bi, x, y, m, k, gshift, N, pf);                     \
  }                                                                                                    \
  extern "C" __global__ void __launch_bounds__(QV_MAXW * 32, 1)                                         \
      gpurt_qgemvf_##XN##_##SN##_n##N(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,        \
                                      const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift, u32, u32 pf) { \
    qgemv_body<XT, ST, 1, QV_U, QV_MAXW, true>(w, sc, bi, x, y, m, k, gshift, N, pf);                      \
  }
#define QGEMV_N(XN, XT, SN, ST)                                                                        \
  QGEMV(XN, XT, SN, ST, 1) QGEMV(XN, XT, SN, ST, 2) QGEMV(XN, XT, SN, ST, 3) QGEMV(XN, XT, SN, ST, 4)  \
  QGEMV(XN, XT, SN, ST, 5) QGEMV(XN, XT, SN, ST, 6) QGEMV(XN, XT, SN, ST, 7) QGEMV(XN, XT, SN, ST, 8)

// The skinny form, 8 < n <= 64 (batched decode): gpurt_qgemvw_<x>_<s>_t<NT>
// (dequantizing, groups of 32) and gpurt_qgemvwf_<x>_<s>_t<NT> (factored),
// NT = 2, 4, 8 n-tiles (n up to 16, 32, 64), n a parameter. QW_U<NT>
// 64-deep steps a batch (NT = 8 and the factored form: one; two measured
// no faster on the H200: 46.8 against 39.3 us at 14336 x 4096, n = 32); at most 16 warps a block for NT = 2
// (128 registers a thread), 8 for 4 and 8 (their accumulators and x
// fragments take more).
#ifndef QW_U2
#define QW_U2 1
#endif
#ifndef QW_U4
#define QW_U4 1
#endif
#define QGEMVW(XN, XT, SN, ST, NT, W, U)                                                                \
  extern "C" __global__ void __launch_bounds__(W * 32, 1)                                               \
      gpurt_qgemvw_##XN##_##SN##_t##NT(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,       \
                                       const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift,       \
                                       u32 n, u32 pf) {                                                \
    qgemv_body<XT, ST, NT, U, W, false>(w, sc, bi, x, y, m, k, gshift, n, pf);                         \
  }                                                                                                    \
  extern "C" __global__ void __launch_bounds__(W * 32, 1)                                               \
      gpurt_qgemvwf_##XN##_##SN##_t##NT(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,      \
                                        const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift,      \
                                        u32 n, u32 pf) {                                               \
    qgemv_body<XT, ST, NT, 1, W, true>(w, sc, bi, x, y, m, k, gshift, n, pf);                          \
  }
#define QGEMVW_T(XN, XT, SN, ST)                                                                       \
  QGEMVW(XN, XT, SN, ST, 2, 16, QW_U2) QGEMVW(XN, XT, SN, ST, 4, 8, QW_U4) QGEMVW(XN, XT, SN, ST, 8, 8, 1)

// ---- tiled tensor-core GEMM (prefill, grouped) -------------------------------------

// The groups of one launch: group g of the launch owns tiles
// [tile_start[g], tile_start[g+1]) and rows [row_start[g], row_start[g+1])
// of A and D (absolute rows); its B matrix is number first_group + g.
struct GroupTable {
  u32 count;
  u32 first_group;
  u32 tile_start[GG_MAX_GROUPS + 1];
  u32 row_start[GG_MAX_GROUPS + 1];
};

struct GemmArgs {
  const void *a;       // rows x k: 16-bit or fp8
  const void *b;       // groups x ncols x k: 16-bit, fp8 or int8 codes
  uint16_t *d;         // rows x ncols
  const uint16_t *sc;  // int8 B: ncols x k>>gshift scales
  const uint16_t *bi;  // int8 B: biases
  const float *sa;     // fp8: rows x k/128
  const float *sb;     // fp8: groups x ceil(ncols/128) x k/128
  u32 ncols, k, gshift;
};


// One operand tile's share of a thread, held in registers between the
// global load and the shared store. 16-bit operands: 2 chunks of 8
// elements per thread; 8-bit ones (fp8, int8): 1 chunk of 16.
template <int T> struct Stage {
  static constexpr int CHUNKS = (T == T_BF16 || T == T_F16) ? 2 : 1;
  static constexpr int ELEMS = (T == T_BF16 || T == T_F16) ? 8 : 16;
  uint4 v[CHUNKS];
  float s, b; // int8: the chunk's scale and bias
};

// Loads the tile of `rows` rows (of which `valid` exist) starting at row
// pointer base (row stride k elements), depth k0, into st. OPT is the
// operand type; for int8 the scales/biases of row (first_row + r).
template <int OPT, int ST>
__device__ __forceinline__ void load_tile(Stage<OPT> &st, const void *base, u32 valid, u32 k, u32 k0,
                                          const uint16_t *sc, const uint16_t *bi, u32 gshift) {
  constexpr int CPR = GG_BK / Stage<OPT>::ELEMS; // chunks per row: 4 or 2
  constexpr int ES = (OPT == T_BF16 || OPT == T_F16) ? 2 : 1;
#pragma unroll
  for (int c = 0; c < Stage<OPT>::CHUNKS; c++) {
    const u32 id = threadIdx.x + c * GG_THREADS;
    const u32 r = id / CPR, kc = id % CPR;
    const u32 kk = k0 + kc * Stage<OPT>::ELEMS;
    if (r < valid && kk < k) {
      st.v[c] = __ldg(reinterpret_cast<const uint4 *>(reinterpret_cast<const char *>(base) +
                                                      ((u64)r * k + kk) * ES));
      if (OPT == T_Q8) {
        const u64 gi = (u64)r * (k >> gshift) + (kk >> gshift);
        st.s = h2f<ST>(__ldg(sc + gi));
        st.b = h2f<ST>(__ldg(bi + gi));
      }
    } else {
      st.v[c] = make_uint4(0, 0, 0, 0);
      st.s = 0.f;
      st.b = 0.f;
    }
  }
}

// Stores st into the shared tile (rows x GG_LD 16-bit elements), turning
// 8-bit operands into MT (the 16-bit type of the tensor-core op).
template <int OPT, int MT>
__device__ __forceinline__ void store_tile(const Stage<OPT> &st, uint16_t *tile) {
  constexpr int CPR = GG_BK / Stage<OPT>::ELEMS;
#pragma unroll
  for (int c = 0; c < Stage<OPT>::CHUNKS; c++) {
    const u32 id = threadIdx.x + c * GG_THREADS;
    const u32 r = id / CPR, kc = id % CPR;
    uint16_t *dst = tile + r * GG_LD + kc * Stage<OPT>::ELEMS;
    if (OPT == T_BF16 || OPT == T_F16) {
      *reinterpret_cast<uint4 *>(dst) = st.v[c];
    } else {
      const u32 w[4] = {st.v[c].x, st.v[c].y, st.v[c].z, st.v[c].w};
      u32 o[8];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        if (OPT == T_FP8) {
          o[2 * i] = e4m3x2_f16x2(w[i]);
          o[2 * i + 1] = e4m3x2_f16x2(w[i] >> 16);
        } else { // int8 codes: s*q + b in f32, rounded to MT
          o[2 * i] = pack2<MT>(fmaf(st.s, byte_f(w[i], 0), st.b), fmaf(st.s, byte_f(w[i], 1), st.b));
          o[2 * i + 1] = pack2<MT>(fmaf(st.s, byte_f(w[i], 2), st.b), fmaf(st.s, byte_f(w[i], 3), st.b));
        }
      }
      reinterpret_cast<uint4 *>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<uint4 *>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
}

// AT: A's type (bf16, f16, fp8); BT: B's (the same, or int8 codes with
// scale type ST); MT: the tensor-core type (f16 for f16 and fp8).
template <int AT, int BT, int ST, int MT>
__device__ __forceinline__ void gemm_body(const GemmArgs &p, const GroupTable &gt) {
  constexpr bool SCALED = AT == T_FP8;
  __shared__ __align__(16) uint16_t As[2][GG_BM * GG_LD];
  __shared__ __align__(16) uint16_t Bs[2][GG_BN * GG_LD];
  // This block's group and tile.
  u32 g = 0;
  while (g + 1 < gt.count && gt.tile_start[g + 1] <= blockIdx.x) g++;
  const u32 rows = gt.row_start[g + 1] - gt.row_start[g];
  const u32 tiles_n = (p.ncols + GG_BN - 1) / GG_BN;
  const u32 local = blockIdx.x - gt.tile_start[g];
  const u32 tm = local / tiles_n, tn = local % tiles_n;
  const u32 m0 = tm * GG_BM, n0 = tn * GG_BN;
  const u32 grp = gt.first_group + g;
  const u32 arow0 = gt.row_start[g] + m0;
  const u32 avalid = rows - m0 < GG_BM ? rows - m0 : GG_BM;
  const u32 bvalid = p.ncols - n0 < GG_BN ? p.ncols - n0 : GG_BN;
  constexpr int AES = (AT == T_FP8) ? 1 : 2;
  constexpr int BES = (BT == T_BF16 || BT == T_F16) ? 2 : 1;
  const void *abase = reinterpret_cast<const char *>(p.a) + (u64)arow0 * p.k * AES;
  const void *bbase =
      reinterpret_cast<const char *>(p.b) + ((u64)grp * p.ncols + n0) * (u64)p.k * BES;
  const uint16_t *sc = p.sc ? p.sc + (u64)n0 * (p.k >> p.gshift) : nullptr;
  const uint16_t *bi = p.bi ? p.bi + (u64)n0 * (p.k >> p.gshift) : nullptr;

  const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const u32 wm = warp >> 2, wn = warp & 3; // 2 x 4 warps of 64 x 32
  const u32 gq = lane >> 2, tq = lane & 3;

  float acc[4][4][4];
  float tmp[SCALED ? 4 : 1][SCALED ? 4 : 1][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
  if (SCALED) {
#pragma unroll
    for (int i = 0; i < (SCALED ? 4 : 1); i++)
#pragma unroll
      for (int j = 0; j < (SCALED ? 4 : 1); j++)
#pragma unroll
        for (int e = 0; e < 4; e++) tmp[i][j][e] = 0.f;
  }

  Stage<AT> sa_st;
  Stage<BT> sb_st;
  const u32 kt_n = (p.k + GG_BK - 1) / GG_BK;
  load_tile<AT, ST>(sa_st, abase, avalid, p.k, 0, nullptr, nullptr, 0);
  load_tile<BT, ST>(sb_st, bbase, bvalid, p.k, 0, sc, bi, p.gshift);
  store_tile<AT, MT>(sa_st, As[0]);
  store_tile<BT, MT>(sb_st, Bs[0]);
  __syncthreads();
  for (u32 kt = 0; kt < kt_n; kt++) {
    const u32 cur = kt & 1;
    if (kt + 1 < kt_n) {
      load_tile<AT, ST>(sa_st, abase, avalid, p.k, (kt + 1) * GG_BK, nullptr, nullptr, 0);
      load_tile<BT, ST>(sb_st, bbase, bvalid, p.k, (kt + 1) * GG_BK, sc, bi, p.gshift);
    }
    const u32 *A32 = reinterpret_cast<const u32 *>(As[cur]);
    const u32 *B32 = reinterpret_cast<const u32 *>(Bs[cur]);
#pragma unroll
    for (int ks = 0; ks < GG_BK / 16; ks++) {
      u32 af[4][4], bf[4][2];
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        const u32 r = wm * 64 + mt * 16 + gq;
        af[mt][0] = A32[r * (GG_LD / 2) + ks * 8 + tq];
        af[mt][1] = A32[(r + 8) * (GG_LD / 2) + ks * 8 + tq];
        af[mt][2] = A32[r * (GG_LD / 2) + ks * 8 + 4 + tq];
        af[mt][3] = A32[(r + 8) * (GG_LD / 2) + ks * 8 + 4 + tq];
      }
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const u32 c = wn * 32 + nt * 8 + gq;
        bf[nt][0] = B32[c * (GG_LD / 2) + ks * 8 + tq];
        bf[nt][1] = B32[c * (GG_LD / 2) + ks * 8 + 4 + tq];
      }
#pragma unroll
      for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
          if (SCALED)
            mma16816(tmp[SCALED ? mt : 0][SCALED ? nt : 0], af[mt], bf[nt], MT == T_F16);
          else
            mma16816(acc[mt][nt], af[mt], bf[nt], MT == T_F16);
        }
    }
    if (SCALED && (((kt + 1) % (128 / GG_BK)) == 0 || kt + 1 == kt_n)) {
      // The 128-deep block kb ends: acc += tmp * scale_a[row][kb] * scale_b[grp][n0/128][kb].
      const u32 kb = kt / (128 / GG_BK), kbn = p.k / 128;
      const u32 nbn = (p.ncols + 127) / 128;
      const float sbv = __ldg(p.sb + ((u64)grp * nbn + n0 / 128) * kbn + kb);
#pragma unroll
      for (int mt = 0; mt < 4; mt++) {
        const u32 r = wm * 64 + mt * 16 + gq;
        const float s0 = r < avalid ? __ldg(p.sa + (u64)(arow0 + r) * kbn + kb) * sbv : 0.f;
        const float s1 = r + 8 < avalid ? __ldg(p.sa + (u64)(arow0 + r + 8) * kbn + kb) * sbv : 0.f;
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
          float *t4 = tmp[SCALED ? mt : 0][SCALED ? nt : 0];
          acc[mt][nt][0] = fmaf(t4[0], s0, acc[mt][nt][0]);
          acc[mt][nt][1] = fmaf(t4[1], s0, acc[mt][nt][1]);
          acc[mt][nt][2] = fmaf(t4[2], s1, acc[mt][nt][2]);
          acc[mt][nt][3] = fmaf(t4[3], s1, acc[mt][nt][3]);
          t4[0] = t4[1] = t4[2] = t4[3] = 0.f;
        }
      }
    }
    if (kt + 1 < kt_n) {
      store_tile<AT, MT>(sa_st, As[cur ^ 1]);
      store_tile<BT, MT>(sb_st, Bs[cur ^ 1]);
    }
    __syncthreads();
  }
  // D: row-major, ncols per row; pairs of columns as one 32-bit store when
  // ncols is even (then every pair is 4-byte aligned).
  const bool even = (p.ncols & 1) == 0;
#pragma unroll
  for (int mt = 0; mt < 4; mt++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const u32 r = wm * 64 + mt * 16 + gq + h * 8;
      if (r >= avalid) continue;
      uint16_t *drow = p.d + (u64)(arow0 + r) * p.ncols;
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        const u32 c = n0 + wn * 32 + nt * 8 + tq * 2;
        const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        constexpr int OT = (AT == T_F16) ? T_F16 : T_BF16; // D: the activations' type (grouped: bf16)
        if (even && c + 1 < p.ncols) {
          *reinterpret_cast<u32 *>(drow + c) = pack2<OT>(v0, v1);
        } else {
          if (c < p.ncols) drow[c] = f2h<OT>(v0);
          if (c + 1 < p.ncols) drow[c + 1] = f2h<OT>(v1);
        }
      }
    }
}

#define GEMM_KERNEL(NAME, AT, BT, ST, MT)                                                        \
  extern "C" __global__ void __launch_bounds__(GG_THREADS) NAME(const GemmArgs p, const GroupTable gt) { \
    gemm_body<AT, BT, ST, MT>(p, gt);                                                            \
  }
GEMM_KERNEL(gpurt_qgemm_bf16_bf16, T_BF16, T_Q8, T_BF16, T_BF16)
GEMM_KERNEL(gpurt_qgemm_bf16_f16, T_BF16, T_Q8, T_F16, T_BF16)
GEMM_KERNEL(gpurt_qgemm_f16_bf16, T_F16, T_Q8, T_BF16, T_F16)
GEMM_KERNEL(gpurt_qgemm_f16_f16, T_F16, T_Q8, T_F16, T_F16)
GEMM_KERNEL(gpurt_ggemm_bf16, T_BF16, T_BF16, T_BF16, T_BF16)
GEMM_KERNEL(gpurt_ggemm_fp8, T_FP8, T_FP8, T_BF16, T_F16)

// The grouped GEMM with the row counts on the device (ABI 1.11):
// gpurt_ggemmc_*, a launch for the groups [first, first + count) of
// counts (uint32, read here, after whatever ran before on the stream
// wrote them). Thread 0 of every block reads the counts of the groups
// before the launch's (the rows they take) and of its own, cut at max_m
// rows in all (a group that would pass it is cut there, the later ones get
// none), and writes the launch's GroupTable to shared memory; the grid is
// the most tiles the groups can need (cuda_quant.c: ceil(max_m / GG_BM) +
// count row tiles, times the column tiles), and a block past the counts'
// tiles returns at once (all of its threads: no barrier is left waiting).
struct CountArgs {
  const u32 *counts;
  u32 first, count, max_m;
};

template <int AT, int BT, int ST, int MT>
__device__ __forceinline__ void gemm_counts_body(const GemmArgs &p, const CountArgs &ca) {
  __shared__ GroupTable gt;
  if (threadIdx.x == 0) {
    const u32 tiles_n = (p.ncols + GG_BN - 1) / GG_BN;
    u32 row = 0;
    for (u32 g = 0; g < ca.first; g++) {
      const u32 m = ca.counts[g];
      row = m < ca.max_m - row ? row + m : ca.max_m;
    }
    u32 tiles = 0;
    gt.count = ca.count;
    gt.first_group = ca.first;
    for (u32 i = 0; i < ca.count; i++) {
      gt.tile_start[i] = tiles;
      gt.row_start[i] = row;
      u32 m = ca.counts[ca.first + i];
      m = m < ca.max_m - row ? m : ca.max_m - row;
      tiles += (m + GG_BM - 1) / GG_BM * tiles_n;
      row += m;
    }
    gt.tile_start[ca.count] = tiles;
    gt.row_start[ca.count] = row;
  }
  __syncthreads();
  if (blockIdx.x >= gt.tile_start[gt.count]) return;
  gemm_body<AT, BT, ST, MT>(p, gt);
}

#define GEMM_COUNTS_KERNEL(NAME, AT, BT, ST, MT)                                                 \
  extern "C" __global__ void __launch_bounds__(GG_THREADS) NAME(const GemmArgs p, const CountArgs ca) { \
    gemm_counts_body<AT, BT, ST, MT>(p, ca);                                                     \
  }
GEMM_COUNTS_KERNEL(gpurt_ggemmc_bf16, T_BF16, T_BF16, T_BF16, T_BF16)
GEMM_COUNTS_KERNEL(gpurt_ggemmc_fp8, T_FP8, T_FP8, T_BF16, T_F16)

QGEMV_N(bf16, T_BF16, bf16, T_BF16)
QGEMV_N(bf16, T_BF16, f16, T_F16)
QGEMV_N(f16, T_F16, bf16, T_BF16)
QGEMV_N(f16, T_F16, f16, T_F16)
QGEMVW_T(bf16, T_BF16, bf16, T_BF16)
QGEMVW_T(bf16, T_BF16, f16, T_F16)
QGEMVW_T(f16, T_F16, bf16, T_BF16)
QGEMVW_T(f16, T_F16, f16, T_F16)

// ---- dequantization into a 16-bit scratch (the prefill path through cuBLASLt) -------

// out[e] = s * q[e] + b for the m x k codes (flattened: the group of
// element e is e >> gshift, since k is a multiple of the group size), 16
// elements per thread, rounded to OT.
template <int ST, int OT>
__device__ __forceinline__ void qdequant_body(const uint8_t *__restrict__ w, const uint16_t *__restrict__ sc,
                                              const uint16_t *__restrict__ bi, uint16_t *__restrict__ out,
                                              u64 chunks, u32 gshift) {
  const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const u64 e0 = i * 16;
  const uint4 q = ld_stream(w + e0, false);
  const float s = h2f<ST>(__ldg(sc + (e0 >> gshift))), b = h2f<ST>(__ldg(bi + (e0 >> gshift)));
  const u32 qw[4] = {q.x, q.y, q.z, q.w};
  u32 o[8];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    o[2 * j] = pack2<OT>(fmaf(s, byte_f(qw[j], 0), b), fmaf(s, byte_f(qw[j], 1), b));
    o[2 * j + 1] = pack2<OT>(fmaf(s, byte_f(qw[j], 2), b), fmaf(s, byte_f(qw[j], 3), b));
  }
  uint4 *dst = reinterpret_cast<uint4 *>(out + e0);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

#define QDEQUANT(ON, OT, SN, ST)                                                                  \
  extern "C" __global__ void __launch_bounds__(256) gpurt_qdequant_##ON##_##SN(                  \
      const uint8_t *w, const uint16_t *sc, const uint16_t *bi, uint16_t *out, u64 chunks, u32 gshift) { \
    qdequant_body<ST, OT>(w, sc, bi, out, chunks, gshift);                                        \
  }
QDEQUANT(bf16, T_BF16, bf16, T_BF16)
QDEQUANT(bf16, T_BF16, f16, T_F16)
QDEQUANT(f16, T_F16, bf16, T_BF16)
QDEQUANT(f16, T_F16, f16, T_F16)

// ---- the GEMM slot's GEMV (cuda_gemm.c, cu_bgemv): 16-bit decode GEMMs ------
//
// D = alpha * op(A) * B + beta * C for the decoder's shape: A stored as m
// rows of k (trans_a = 1, row stride lda), B as n columns of k (ldb), C and
// D column-major (m x n, ldc, ldd), n <= N tokens, f32 accumulation, one
// rounding. cuBLASLt splits k for these (m x k x 1) GEMMs and adds the
// parts in a second kernel, and a GEMV that loads W into registers issues
// its loads a few at a time (the compiler interleaves them with the
// arithmetic), so at m = 4096 both wait on DRAM's latency more than on
// its bandwidth. Here a block of 8 warps owns 8 rows (one a warp) and
// stages 512-deep chunks of them and of the n tokens' x into shared memory
// with cp.async, BG_ST chunks in flight, so the loads in flight do not
// hold registers; each warp sums its row's chunk from shared memory and
// its lanes by shuffles in a fixed order (deterministic). blockIdx.y is
// the batch.
//
// A prologue (ABI 1.10, gpurt_gemm_desc.prologue; PRO, n = 1 and batch 1
// only) transforms x on its way in, so the kernel that wrote it and the
// GEMV are all the decoder launches: PRO 1 (RMSNorm) multiplies x by the
// norm weight in f32 in the sum, sums x^2 beside (every warp the same
// pieces in the same order: the same value in each), and scales the row's
// sum by rsqrt(mean(x^2) + eps) at the end (the normalized x is never
// rounded); the norm weight's chunk is staged in a slot of its own beside
// x's (40 KB a block instead of 36: five blocks an SM instead of six). On
// the H200 (2026-12-05) that was 65.9 us at 28672 x 4096 against the plain
// GEMV's 57.3, and reading the weight from global memory where it is used
// instead (36 KB) was slower still, 68.8: the cost is not the occupancy
// alone, and the prologues stay off (cu_fuse_on). PRO 2 (SwiGLU) stages the gate's
// chunks in x's slot; U (ldb elements after G) is read from global memory
// into a register a chunk ahead (two elements a thread, no slot of its own),
// and once a chunk has landed every thread writes silu(g) * u for its two
// elements over the gate's slot (silu_mul_T's expression, rounded to T: the
// separate kernel's bits), read by the sum as x. (With U in a slot and 64
// threads doing eight elements each, the whole block waited on their expf
// and division every chunk: 4096 x 14336 took 51.5 us; now 47.4, against
// the plain GEMV's 32.5.)
struct BgemvArgs {
  const uint16_t *w, *x, *c;
  uint16_t *d;
  u64 lda, ldb, ldc, ldd;
  long long sa, sb, sc, sd; // batch strides (elements)
  u32 m, k, n;
  float alpha, beta;
  u32 flags;           // BG_CONST_A: nothing earlier on the stream writes A
  const uint16_t *nw;  // PRO 1: the norm weight (k elements)
  float eps;           // PRO 1: the norm's epsilon
};

#define BG_CONST_A 1u // cuda_internal.h's CU_BGEMV_CONST_A
#define BG_RB 8    // rows a block (one a warp)
#define BG_KC 512  // elements of a chunk
#define BG_ST 4    // chunks in the ring

#ifdef GPURT_CUDA_EMU
// Copied at once, or when a wait needs it (cuda_emu.h's GPURT_TEST_EMU_CPASYNC).
__device__ __forceinline__ void cp_async16(void *dst, const void *src) { emu::cp_async(dst, src, 16); }
__device__ __forceinline__ void cp_async_commit() { emu::cp_async_commit(); }
template <int P> __device__ __forceinline__ void cp_async_wait() { emu::cp_async_wait(P); }
#else
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const u32 d = (u32)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int P> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(P) : "memory");
}
#endif

template <int T, int N, int PRO>
__device__ __forceinline__ void bgemv_body(const BgemvArgs &a) {
  static_assert(PRO == 0 || N == 1, "a prologue is for one token");
  // Slots: BG_RB rows of W, N tokens' x (PRO 2: the gate), then PRO 1's
  // norm weight.
  constexpr int SLOTS = BG_RB + N + (PRO == 1), PC = BG_KC / 8; // 16-byte pieces of a slot's chunk
  static_assert(PRO != 2 || PC * 4 == 256, "PRO 2: a pair of elements a thread");
  __shared__ uint4 ring[BG_ST][SLOTS][PC];
  const u32 tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // Row groups blockIdx.x, + gridDim.x, ... (a grid smaller than the
  // rows' BG_RB-row groups: cu_bgemv's GPURT_CUDA_GEMV_GRID), one after
  // another through the same ring.
  u64 row0 = (u64)blockIdx.x * BG_RB;
  const u64 bz = blockIdx.y;
  const uint16_t *w = a.w + bz * a.sa, *x = a.x + bz * a.sb;
  const u32 chunks = (a.k + BG_KC - 1) / BG_KC;
  // Chunk c into its stage, then a commit: thread tid copies piece tid % PC
  // of slots tid / PC, + 256 / PC, ... (W's rows are slots 0..BG_RB-1, the
  // tokens' x the rest); rows past m and tokens past n are not copied
  // (their sums are never written). Every thread commits one group per
  // chunk, empty or not, so the group counts agree.
  // Slots [s0, s1) of chunk c into its stage (no commit).
  auto issue_part = [&](u32 c, int s0, int s1) {
    const u32 k0 = c * BG_KC, pieces = c < chunks ? min((u32)PC, (a.k - k0) / 8) : 0, p = tid % PC;
    if (p < pieces) {
#pragma unroll
      for (int sl = tid / PC; sl < SLOTS; sl += 256 / PC) {
        if (sl < s0 || sl >= s1) continue;
        const uint16_t *src = nullptr;
        if (sl < BG_RB) {
          if (row0 + sl < a.m) src = w + (row0 + sl) * a.lda;
        } else if (PRO == 1 && sl == BG_RB + N) {
          src = a.nw; // the norm weight
        } else if ((u32)(sl - BG_RB) < a.n) {
          src = x + (u64)(sl - BG_RB) * a.ldb;
        }
        if (src) cp_async16(&ring[c % BG_ST][sl][p], src + k0 + p * 8);
      }
    }
  };
  auto issue = [&](u32 c) {
    issue_part(c, 0, SLOTS);
    cp_async_commit();
  };
  // Launched with programmatic dependent launch (cu_bgemv, sm_90), the
  // block may start while the kernel before it still runs, and that kernel
  // may be writing A or B. So before waiting for it, each row's first
  // chunks are only asked into the L2 (one bulk prefetch a row: the L2 is
  // the coherent point, so a line fetched early is still updated by the
  // writer's stores), and every copy into shared memory comes after the
  // wait. When the caller says that nothing earlier on the stream writes A
  // (BG_CONST_A: weights), A's part of the first BG_ST - 1 chunks is copied
  // into shared memory before the wait instead, and only x's after it
  // (chunk 0's commit group then holds A's three chunks and x's first:
  // waiting for it waits for more than needed, never less).
  if (a.flags & BG_CONST_A) {
#pragma unroll
    for (int c = 0; c < BG_ST - 1; c++) issue_part(c, 0, BG_RB);
    gpurt_pdl_enter();
#pragma unroll
    for (int c = 0; c < BG_ST - 1; c++) {
      issue_part(c, BG_RB, SLOTS);
      cp_async_commit();
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tid < BG_RB && row0 + tid < a.m) {
      const u32 bytes = min(a.k, (u32)((BG_ST - 1) * BG_KC)) * 2;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + (row0 + tid) * a.lda), "r"(bytes)
                   : "memory");
    }
#endif
    gpurt_pdl_enter();
#pragma unroll
    for (int c = 0; c < BG_ST - 1; c++) issue(c);
  }
  for (;;) { // a row group
    float acc[N], ss = 0.f; // ss: PRO 1's sum of x^2
    // PRO 2: this thread's pair of U (elements 2 tid, 2 tid + 1 of a chunk)
    // for chunk c, loaded during chunk c - 1 (0 past k: never used).
    auto load_u = [&](u32 c) -> u32 {
      return c < chunks && (tid >> 2) < min((u32)PC, (a.k - c * BG_KC) / 8)
                 ? reinterpret_cast<const u32 *>(x + a.ldb + (u64)c * BG_KC)[tid]
                 : 0u;
    };
    u32 u_next = PRO == 2 ? load_u(0) : 0u;
#pragma unroll
    for (int j = 0; j < N; j++) acc[j] = 0.f;
    for (u32 c = 0; c < chunks; c++) {
      __syncthreads(); // every warp is done with chunk c - 1: its stage may be refilled
      issue(c + BG_ST - 1);
      const u32 u_cur = u_next;
      if (PRO == 2) u_next = load_u(c + 1);
      cp_async_wait<BG_ST - 1>(); // this thread's copies of chunk c have landed
      __syncthreads();            // and everyone's
      const u32 pieces = min((u32)PC, (a.k - c * BG_KC) / 8);
      if (PRO == 2) { // x = silu(g) * u over the gate's slot, then everyone reads it
        // Thread tid: the pair tid % 4 of piece tid / 4, the pair u_cur holds.
        if ((tid >> 2) < pieces) {
          u32 *gs = &ring[c % BG_ST][BG_RB][0].x + tid;
          // silu_mul_T's expression (cuda_kernels.cu): its bits
          const float2 g = w2f<T>(*gs), u = w2f<T>(u_cur);
          *gs = pack2<T>(__fmul_rn(__fdiv_rn(g.x, __fadd_rn(1.f, expf(-g.x))), u.x),
                         __fmul_rn(__fdiv_rn(g.y, __fadd_rn(1.f, expf(-g.y))), u.y));
        }
        __syncthreads();
      }
      const uint4(*st)[PC] = ring[c % BG_ST];
#pragma unroll
      for (int q = 0; q < PC / 32; q++) {
        const u32 p = lane + 32 * q;
        if (p >= pieces) break;
        const uint4 wv = st[warp][p];
        const uint4 nv = PRO == 1 ? st[BG_RB + N][p] : wv; // PRO 1's norm weight
#pragma unroll
        for (int h = 0; h < 4; h++) {
          const float2 wf = w2f<T>((&wv.x)[h]);
#pragma unroll
          for (int j = 0; j < N; j++) {
            float2 xf = w2f<T>((&st[BG_RB + j][p].x)[h]);
            if (PRO == 1) {
              const float2 nf = w2f<T>((&nv.x)[h]);
              ss = fmaf(xf.y, xf.y, fmaf(xf.x, xf.x, ss));
              xf.x *= nf.x;
              xf.y *= nf.y;
            }
            acc[j] = fmaf(wf.y, xf.y, fmaf(wf.x, xf.x, acc[j]));
          }
        }
      }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < N; j++)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], o);
    if (PRO == 1)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const u64 row = row0 + warp;
    // Lane j writes token j.
#pragma unroll
    for (int j = 0; j < N; j++) {
      if (row >= a.m || lane != (u32)j || (u32)j >= a.n) continue;
      float v = a.alpha * acc[j];
      if (PRO == 1) v *= rsqrtf(ss / (float)a.k + a.eps);
      if (a.beta != 0.f) v = fmaf(a.beta, h2f<T>(a.c[bz * a.sc + j * a.ldc + row]), v);
      a.d[bz * a.sd + j * a.ldd + row] = f2h<T>(v);
    }
    row0 += (u64)gridDim.x * BG_RB;
    if (row0 >= a.m) break;
    __syncthreads(); // every warp is done with the last chunks' stages
#pragma unroll
    for (int c = 0; c < BG_ST - 1; c++) issue(c);
  }
}

#define BGEMV(TN, T, N)                                                                           \
  extern "C" __global__ void __launch_bounds__(256) gpurt_bgemv_##TN##_n##N(const BgemvArgs a) {  \
    bgemv_body<T, N, 0>(a);                                                                       \
  }
BGEMV(bf16, T_BF16, 1)
BGEMV(bf16, T_BF16, 2)
BGEMV(bf16, T_BF16, 4)
BGEMV(f16, T_F16, 1)
BGEMV(f16, T_F16, 2)
BGEMV(f16, T_F16, 4)
// With a prologue, one token (cu_bgemv_fn's variants 6 to 9).
#define BGEMVP(TN, T, PN, PRO)                                                                      \
  extern "C" __global__ void __launch_bounds__(256) gpurt_bgemv_##TN##_n1_##PN(const BgemvArgs a) { \
    bgemv_body<T, 1, PRO>(a);                                                                       \
  }
BGEMVP(bf16, T_BF16, rmsnorm, 1)
BGEMVP(bf16, T_BF16, swiglu, 2)
BGEMVP(f16, T_F16, rmsnorm, 1)
BGEMVP(f16, T_F16, swiglu, 2)

// ---- the ring GEMVs (n = 1, GPURT_CUDA_QGEMV=ring, rings): W through a shared-memory ring ----
//
// gpurt_qgemvr_<x>_<s>_n1 and gpurt_qgemvrs_<x>_<s>_n1: the register GEMV's
// arithmetic (qstep, the factored form for groups of 64 and 128,
// dequantizing for 32) with W, its scales and biases and x staged through
// a block-wide ring of NS chunks by cp.async, as the 16-bit GEMV above
// stages its rows (it reads at 96% of the H200's bandwidth in the decoder
// where the register GEMV reads at 73%): the loads in flight hold no
// registers. A block of KC / 64 warps owns 32 rows at a time (QV_ROWS, the
// row slots and m-tiles of qstep) and walks k in KC-deep chunks, warp w
// taking the 64-deep step w of each; the grid is at most as many blocks as
// fit the SMs (cuda_quant.c), each taking row groups blockIdx.x, +
// gridDim.x, ... one after another through the same ring (it never drains
// between them). The warps' sums meet in shared memory in warp order at
// the end of each row group (deterministic).
//
// Not the default: a first form, 8 chunks of 512 and one block an SM (8
// warps an SM, two barriers a chunk), took 32.8 us a launch in the 8B int8
// step on the H200 against the register GEMV's 19.4 (bench/results/
// h200-2026-12-05c/call2). The two kept differ in what the next call can
// tell apart: qgemvr 4 chunks of 512, two blocks an SM (16 warps, 92 KB a
// block); qgemvrs 3 chunks of 256, up to five blocks of 4 warps an SM (20
// warps, 42 KB a block); qgemvrl 3 chunks of 1024, one block of 16 warps an
// SM (130 KB). None is measured yet.
//
// Launched with programmatic dependent launch: before the wait, only the
// block's first NS - 1 chunks of W, scales and biases are asked into the
// L2 (the coherent point: a line fetched early is still updated by the
// writer's stores); every copy into shared memory comes after it.
//
// cuda_quant.c takes them for n = 1 when k is a multiple of KC, W and x
// are 16-byte aligned and the scales and biases 8-byte aligned; rows past
// m repeat the last row (loaded, never stored).
// KC: codes of a row a chunk (1024, 512 or 256), KC / 64 warps (a 64-deep
// step of each chunk a warp); a row's bytes in a stage KC + 64 (rows 64
// bytes apart mod 128: no bank conflicts); KC / 16 scale (or bias) bytes of
// a row in a stage (KC / 32 groups at most); NS chunks in the ring.
// Bytes of one stage: W, scales, biases, the token's x.
#define QR_STAGE(KC) (QV_ROWS * ((KC) + 64) + 2 * QV_ROWS * ((KC) / 16) + (KC) * 2)

#ifdef GPURT_CUDA_EMU
// The emulator has no dynamic shared memory: one static buffer, refilled
// with NaNs where cp.async wrote before each block (cuda_emu.h).
__device__ __forceinline__ unsigned char *qr_smem() {
  static unsigned char buf[3 * QR_STAGE(1024)] __attribute__((aligned(16)));
  return buf;
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src) { emu::cp_async(dst, src, 8); }
__device__ __forceinline__ void cp_async4(void *dst, const void *src) { emu::cp_async(dst, src, 4); }
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, u32 bytes) {
  if (bytes > 0) prefetch_l2(p), prefetch_l2((const char *)p + bytes - 1);
}
#else
extern __shared__ __align__(16) unsigned char gpurt_qr_dsmem[];
__device__ __forceinline__ unsigned char *qr_smem() { return gpurt_qr_dsmem; }
__device__ __forceinline__ void cp_async8(void *dst, const void *src) {
  const u32 d = (u32)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
  const u32 d = (u32)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
// bytes: a multiple of 16, p 16-byte aligned (sm_90; a no-op before).
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, u32 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes > 0) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}
#endif

template <int XT, int ST, int KC, int NS>
__device__ __forceinline__ void qgemvr_body(const uint8_t *__restrict__ w, const uint16_t *__restrict__ sc,
                                            const uint16_t *__restrict__ bi, const uint16_t *__restrict__ x,
                                            uint16_t *__restrict__ y, u32 m, u32 k, u32 gshift) {
  constexpr u32 WARPS = KC / 64, RS = KC + 64, NT = WARPS * 32, SR = KC / 16;
  constexpr u32 SB = QR_STAGE(KC), OS = QV_ROWS * RS, OB = OS + QV_ROWS * SR, OX = OB + QV_ROWS * SR;
  __shared__ float red[WARPS][32][8];
  unsigned char *ring = qr_smem();
  const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const u32 groups = k >> gshift, chunks = k / KC, rgs = (m + QV_ROWS - 1) / QV_ROWS;
  const u32 mine = blockIdx.x < rgs ? (rgs - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const u32 total = mine * chunks;
  // A row's scale (or bias) elements a chunk, and its pieces of pb bytes
  // (8, or 4 where a chunk holds two groups).
  const u32 sper = KC >> gshift, pb = sper * 2 >= 8 ? 8 : 4, spieces = sper * 2 / pb;
  // Chunk g of the block (row group blockIdx.x + (g / chunks) gridDim.x,
  // chunk g % chunks) into stage g % NS; past total, nothing. Then a
  // commit (every thread one group a chunk, empty or not).
  auto issue = [&](u32 g) {
    if (g < total) {
      const u32 rg = blockIdx.x + (g / chunks) * gridDim.x, c = g % chunks;
      unsigned char *st = ring + (g % NS) * SB;
      // W: 32 rows of KC bytes, 16-byte pieces.
#pragma unroll
      for (u32 p = tid; p < QV_ROWS * (KC / 16); p += NT) {
        const u32 r = p / (KC / 16), col = p % (KC / 16);
        u32 row = rg * QV_ROWS + r;
        row = row < m ? row : m - 1;
        cp_async16(st + r * RS + col * 16, w + (u64)row * k + (u64)c * KC + col * 16);
      }
      // Scales (the first half of the threads) and biases (the second).
      {
        const u32 t = tid % (NT / 2);
        if (t < QV_ROWS * spieces) {
          const u32 r = t / spieces, pc = t % spieces;
          u32 row = rg * QV_ROWS + r;
          row = row < m ? row : m - 1;
          const u64 off = (u64)row * groups + (u64)c * sper + pc * (pb / 2);
          unsigned char *dst = st + (tid < NT / 2 ? OS : OB) + r * SR + pc * pb;
          const uint16_t *src = (tid < NT / 2 ? sc : bi) + off;
          if (pb == 8)
            cp_async8(dst, src);
          else
            cp_async4(dst, src);
        }
      }
      // x: KC elements, 16-byte pieces.
      if (tid < KC / 8) cp_async16(st + OX + tid * 16, x + (u64)c * KC + tid * 8);
    }
    cp_async_commit();
  };
  // Before the PDL wait: the first row group's first chunks of W, its
  // scales and biases, asked into the L2 (a bulk prefetch a row).
  if (mine > 0) {
    const u32 pre = (chunks < NS - 1 ? chunks : NS - 1) * KC;
    if (tid < 3 * QV_ROWS) {
      const u32 r = tid % QV_ROWS, what = tid / QV_ROWS;
      u32 row = blockIdx.x * QV_ROWS + r;
      row = row < m ? row : m - 1;
      if (what == 0)
        prefetch_l2_bulk(w + (u64)row * k, pre);
      else {
        const uint16_t *p = (what == 1 ? sc : bi) + (u64)row * groups;
        if ((((uintptr_t)p) & 15) == 0 && (((pre >> gshift) * 2) & 15) == 0) prefetch_l2_bulk(p, (pre >> gshift) * 2);
      }
    }
  }
  gpurt_pdl_enter();
#pragma unroll 1
  for (u32 g = 0; g < NS - 1; g++) issue(g);
  float acc[1][2][4];
#pragma unroll
  for (int t = 0; t < 2; t++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[0][t][e] = 0.f;
  // This warp's depth in a chunk and its lane's group in the chunk's
  // scales (every lane takes the one token: qstep's columns past it are
  // never stored).
  const u32 d0 = warp * 64 + tq * 16, gi = d0 >> gshift;
#pragma unroll 1
  for (u32 g = 0; g < total; g++) {
    __syncthreads(); // every warp is done with chunk g - 1: its stage may be refilled
    issue(g + NS - 1);
    cp_async_wait<NS - 1>(); // this thread's copies of chunk g have landed
    __syncthreads();            // and everyone's
    const unsigned char *st = ring + (g % NS) * SB;
    uint4 q[4], xv[1][2];
    float s[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const u32 r = 8 * i + gq;
      q[i] = *reinterpret_cast<const uint4 *>(st + r * RS + d0);
      s[i] = h2f<ST>(reinterpret_cast<const uint16_t *>(st + OS + r * SR)[gi]);
      b[i] = h2f<ST>(reinterpret_cast<const uint16_t *>(st + OB + r * SR)[gi]);
    }
    xv[0][0] = *reinterpret_cast<const uint4 *>(st + OX + d0 * 2);
    xv[0][1] = *reinterpret_cast<const uint4 *>(st + OX + d0 * 2 + 16);
    if (gshift >= 6)
      qstep<XT, 1, true>(q, s, b, xv, acc, tq);
    else
      qstep<XT, 1, false>(q, s, b, xv, acc, tq);
    if (g % chunks != chunks - 1) continue;
    // The row group's last chunk: the warps' sums, in warp order.
    // acc[0][t][e]: row 16 t + gq + 8 (e >> 1), token 2 tq + (e & 1).
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        red[warp][lane][t * 4 + e] = acc[0][t][e];
        acc[0][t][e] = 0.f;
      }
    __syncthreads();
    const u32 row0 = (blockIdx.x + (g / chunks) * gridDim.x) * QV_ROWS;
    for (u32 id = tid; id < 256; id += NT) { // 32 rows x 8 token columns
      const u32 l = id >> 3, t = (id >> 2) & 1, e = id & 3;
      float v = 0.f;
#pragma unroll
      for (u32 i = 0; i < WARPS; i++) v += red[i][l][t * 4 + e];
      const u32 row = row0 + 16 * t + (l >> 2) + 8 * (e >> 1), tk = 2 * (l & 3) + (e & 1);
      if (row < m && tk == 0) y[row] = f2h<XT>(v);
    }
    // The next row group's reduction comes chunks iterations later, each
    // with its barriers: red is read by then.
  }
  cp_async_wait<0>();
}

// gpurt_qgemvr_*: 512-deep chunks, 4 in the ring, 8 warps, two blocks an
// SM; gpurt_qgemvrs_*: 256-deep chunks, 3 in the ring, 4 warps, up to five
// blocks an SM (20 warps; GPURT_CUDA_QGEMV=rings); gpurt_qgemvrl_*:
// 1024-deep chunks, 3 in the ring, 16 warps, one block an SM (as the
// register GEMV has for grids below two blocks an SM; =ringl).
#define QGEMVR(XN, XT, SN, ST)                                                                          \
  extern "C" __global__ void __launch_bounds__(256, 2)                                                   \
      gpurt_qgemvr_##XN##_##SN##_n1(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,            \
                                    const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift, u32, u32) { \
    qgemvr_body<XT, ST, 512, 4>(w, sc, bi, x, y, m, k, gshift);                                      \
  }                                                                                                      \
  extern "C" __global__ void __launch_bounds__(128, 5)                                                   \
      gpurt_qgemvrs_##XN##_##SN##_n1(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,           \
                                     const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift, u32, u32) { \
    qgemvr_body<XT, ST, 256, 3>(w, sc, bi, x, y, m, k, gshift);                                      \
  }                                                                                                      \
  extern "C" __global__ void __launch_bounds__(512, 1)                                                   \
      gpurt_qgemvrl_##XN##_##SN##_n1(const uint8_t *w, const uint16_t *sc, const uint16_t *bi,           \
                                     const uint16_t *x, uint16_t *y, u32 m, u32 k, u32 gshift, u32, u32) { \
    qgemvr_body<XT, ST, 1024, 3>(w, sc, bi, x, y, m, k, gshift);                                     \
  }
QGEMVR(bf16, T_BF16, bf16, T_BF16)
QGEMVR(bf16, T_BF16, f16, T_F16)
QGEMVR(f16, T_F16, bf16, T_BF16)
QGEMVR(f16, T_F16, f16, T_F16)
