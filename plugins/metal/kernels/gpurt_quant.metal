// SPDX-License-Identifier: Apache-2.0
//
// The 1.4 ops on Metal (metal_quant.m encodes them). Not compiled or run
// yet: this repository is built on Linux; scripts/build_metal.sh compiles it
// with the other kernels on macOS. Correct first, simple: one SIMD group
// (32 threads) per output element, lanes striding the depth, simd_sum.
//
//  gq_quant_matmul   y[t][i] = sum_j x[t][j] * (s[i][g] * q[i][j] + b[i][g]),
//                    g = j >> gshift (MLX's int8 affine format); threadgroup
//                    (i, t); x, y f16 or bf16, scales/biases f16 or bf16
//  gq_grouped_gemm   one group of the grouped GEMM (the host dispatches per
//                    group): D[row0 + r][c] = sum_p A[row0 + r][p] B_g[c][p],
//                    bf16, or fp8 e4m3 with 1x128 (A) and 128x128 (B) scales
//
// 16-bit values travel as ushort bits (bfloat needs Metal 3.1); sums are
// f32, the result rounded to nearest even.
#include <metal_stdlib>
using namespace metal;

struct gq_mm_params {
  uint m, n, k, gshift;
  uint x_f16, s_f16; // 1: f16, 0: bf16
};

struct gq_gg_params {
  uint row0, rows, n, k;
  uint group, fp8;
  uint kb, nb; // fp8: k / 128 and ceil(n / 128)
};

static inline float gq_h2f(ushort h, uint is_f16) {
  return is_f16 ? float(as_type<half>(h)) : as_type<float>(uint(h) << 16);
}

static inline ushort gq_f2h(float f, uint is_f16) {
  if (is_f16) return as_type<ushort>(half(f));
  uint b = as_type<uint>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return ushort((b >> 16) | 0x40u); // NaN stays NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return ushort(b >> 16);
}

// OCP fp8 e4m3 (fn): bias 7, no infinities, 0x7f / 0xff are NaN.
static inline float gq_e4m3(uchar v) {
  uint s = v >> 7, e = (v >> 3) & 0xfu, m = v & 7u;
  float r;
  if (e == 0xfu && m == 7u) r = NAN;
  else if (e == 0) r = float(m) * 0.001953125f; // m * 2^-9
  else r = ldexp(1.0f + float(m) * 0.125f, int(e) - 7);
  return s ? -r : r;
}

kernel void gq_quant_matmul(device const uchar *w [[buffer(0)]],
                            device const ushort *sc [[buffer(1)]],
                            device const ushort *bi [[buffer(2)]],
                            device const ushort *x [[buffer(3)]],
                            device ushort *y [[buffer(4)]],
                            constant gq_mm_params &p [[buffer(5)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
  const uint i = tg.x, t = tg.y;
  if (i >= p.m || t >= p.n) return;
  const uint groups = p.k >> p.gshift;
  device const uchar *wr = w + ulong(i) * p.k;
  device const ushort *xr = x + ulong(t) * p.k;
  float acc = 0.0f;
  for (uint j = lane; j < p.k; j += 32) {
    const uint g = j >> p.gshift;
    const float s = gq_h2f(sc[ulong(i) * groups + g], p.s_f16);
    const float b = gq_h2f(bi[ulong(i) * groups + g], p.s_f16);
    acc = fma(gq_h2f(xr[j], p.x_f16), fma(s, float(wr[j]), b), acc);
  }
  acc = simd_sum(acc);
  if (lane == 0) y[ulong(t) * p.m + i] = gq_f2h(acc, p.x_f16);
}

kernel void gq_grouped_gemm(device const uchar *a [[buffer(0)]],
                            device const uchar *b [[buffer(1)]],
                            device ushort *d [[buffer(2)]],
                            device const float *sa [[buffer(3)]],
                            device const float *sb [[buffer(4)]],
                            constant gq_gg_params &p [[buffer(5)]],
                            uint2 tg [[threadgroup_position_in_grid]],
                            uint lane [[thread_index_in_simdgroup]]) {
  const uint c = tg.x, r = tg.y;
  if (c >= p.n || r >= p.rows) return;
  const ulong row = ulong(p.row0) + r;
  const ulong brow = ulong(p.group) * p.n + c;
  float acc = 0.0f;
  if (p.fp8) {
    for (uint kb = 0; kb < p.kb; kb++) {
      float part = 0.0f;
      for (uint q = lane; q < 128; q += 32) {
        const uint pidx = kb * 128 + q;
        part = fma(gq_e4m3(a[row * p.k + pidx]), gq_e4m3(b[brow * p.k + pidx]), part);
      }
      part = simd_sum(part);
      acc = fma(part, sa[row * p.kb + kb] * sb[(ulong(p.group) * p.nb + c / 128) * p.kb + kb], acc);
    }
  } else {
    device const ushort *a16 = (device const ushort *)a;
    device const ushort *b16 = (device const ushort *)b;
    for (uint q = lane; q < p.k; q += 32)
      acc = fma(gq_h2f(a16[row * p.k + q], 0), gq_h2f(b16[brow * p.k + q], 0), acc);
    acc = simd_sum(acc);
  }
  if (lane == 0) d[row * p.n + c] = gq_f2h(acc, 0);
}
