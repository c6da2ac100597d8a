// SPDX-License-Identifier: Apache-2.0
//
// The decoder's norms and scaled rotary embedding as built-in kernels
// (gpurt.h: rmsnorm_T, add_rmsnorm_T, rope_neox_freqs_T), included by
// cuda_kernels.cu into the built-in fatbin (it uses that file's ld/st, u64
// and gpurt_index). The norms' scheme is FlashInfer's RMSNorm and
// FusedAddRMSNorm (flashinfer/norm.cuh): one block per row, 16-byte vector
// loads and stores, the sum of squares reduced by warp shuffles and then
// across warps through shared memory. FlashInfer's kernels themselves
// cannot be the built-ins: they take a two-dimensional block (32 lanes x
// warps) and the size of their own launch, while a built-in is launched by
// the caller with any one-dimensional block (csrc checks it), so this is a
// kernel of the same shape written for that contract. Differences from
// FlashInfer's math, as gpurt.h asks: the residual is rounded to T before
// it is squared (add_rmsnorm_T gives the bits of add_T then rmsnorm_T), and
// every f32 operation is an explicit round-to-nearest one (no FMA, no
// rsqrt approximation), so the only difference from the CPU reference is
// the order of the sum of squares, fixed for a given block size.

// The vector of a 16-byte access.
template <typename T> struct gpurt_vec {
  static constexpr unsigned n = 16 / sizeof(T);
  union {
    uint4 raw;
    T v[16 / sizeof(T)];
  };
};

// The sum of v over a one-dimensional block of any size up to 1024; every
// thread gets it. Lanes then warps, in a fixed order (deterministic).
__device__ float gpurt_block_sum_warps(float v, float *sh) {
  unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = (blockDim.x + 31u) >> 5;
  unsigned lanes = min(32u, blockDim.x - (warp << 5)); // a last warp may be partial
  unsigned mask = lanes == 32u ? 0xffffffffu : (1u << lanes) - 1u;
  for (unsigned o = 16; o > 0; o >>= 1) {
    float u = __shfl_down_sync(mask, v, o);
    if (lane + o < lanes) v = __fadd_rn(v, u);
  }
  __syncthreads(); // an earlier reduction's readers are done with sh
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (unsigned w = 0; w < warps; w++) s = __fadd_rn(s, sh[w]);
  return s;
}

// y[r] = rmsnorm(x[r]) * w; with ADD, r[r] = x[r] + r[r] (rounded to T)
// first and y is x: x[r] = rmsnorm(r[r]) * w. src is the row normalized.
template <typename T, bool ADD>
__device__ void gpurt_norm_row(T *y, T *x, T *res, const T *w, float eps, u64 rows, u64 cols) {
  __shared__ float sh[32];
  u64 row = blockIdx.x;
  if (row >= rows) return; // the whole block
  T *xr = x + row * cols;
  T *yr = ADD ? xr : y + row * cols;
  T *rr = ADD ? res + row * cols : nullptr;
  const T *src = ADD ? rr : xr;
  constexpr unsigned V = gpurt_vec<T>::n;
  bool vec = cols % V == 0 && ((unsigned long long)xr % 16 == 0) && ((unsigned long long)yr % 16 == 0) &&
             ((unsigned long long)w % 16 == 0) && (!ADD || (unsigned long long)rr % 16 == 0);
  float ss = 0.0f;
  if (vec) {
    u64 nv = cols / V;
    for (u64 i = threadIdx.x; i < nv; i += blockDim.x) {
      gpurt_vec<T> a;
      a.raw = reinterpret_cast<const uint4 *>(xr)[i];
      if (ADD) {
        gpurt_vec<T> b;
        b.raw = reinterpret_cast<const uint4 *>(rr)[i];
#pragma unroll
        for (unsigned j = 0; j < V; j++) a.v[j] = st<T>(__fadd_rn(ld(a.v[j]), ld(b.v[j])));
        reinterpret_cast<uint4 *>(rr)[i] = a.raw;
      }
#pragma unroll
      for (unsigned j = 0; j < V; j++) {
        float v = ld(a.v[j]);
        ss = __fadd_rn(ss, __fmul_rn(v, v));
      }
    }
  } else {
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
      float v = ld(xr[c]);
      if (ADD) {
        T t = st<T>(__fadd_rn(v, ld(rr[c])));
        rr[c] = t;
        v = ld(t);
      }
      ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
  }
  ss = gpurt_block_sum_warps(ss, sh);
  float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)cols), eps)));
  // Each thread reads back only the elements it wrote to r above (the same
  // indices), so no barrier is needed between the passes.
  if (vec) {
    u64 nv = cols / V;
    for (u64 i = threadIdx.x; i < nv; i += blockDim.x) {
      gpurt_vec<T> a, b;
      a.raw = reinterpret_cast<const uint4 *>(src)[i];
      b.raw = reinterpret_cast<const uint4 *>(w)[i];
#pragma unroll
      for (unsigned j = 0; j < V; j++) a.v[j] = st<T>(__fmul_rn(__fmul_rn(ld(a.v[j]), s), ld(b.v[j])));
      reinterpret_cast<uint4 *>(yr)[i] = a.raw;
    }
  } else {
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = st<T>(__fmul_rn(__fmul_rn(ld(src[c]), s), ld(w[c])));
  }
}

#define GPURT_NORM_KERNELS(T, SFX)                                                                  \
  extern "C" __global__ void rmsnorm_##SFX(T *y, const T *x, const T *w, float eps, u64 rows,      \
                                           u64 cols) {                                             \
    gpurt_pdl_enter();                                                                             \
    gpurt_norm_row<T, false>(y, const_cast<T *>(x), nullptr, w, eps, rows, cols);                  \
  }                                                                                                 \
  extern "C" __global__ void add_rmsnorm_##SFX(T *x, T *r, const T *w, float eps, u64 rows,        \
                                               u64 cols) {                                         \
    gpurt_pdl_enter();                                                                             \
    gpurt_norm_row<T, true>(x, x, r, w, eps, rows, cols);                                           \
  }

GPURT_NORM_KERNELS(float, f32)
GPURT_NORM_KERNELS(__half, f16)
GPURT_NORM_KERNELS(__nv_bfloat16, bf16)

// rope_neox_freqs_T (gpurt.h): rope_neox_T with a frequency table and
// Hugging Face's arithmetic in T (cos and sin in double, rounded to f32 and
// then to T; each product and sum rounded to T), so that a scaled rotary
// embedding (Llama 3.1's, linear, dynamic) is one launch with the bits of
// transformers' x*cos + rotate_half(x)*sin. One thread per pair.
template <typename T> __device__ __forceinline__ float gpurt_rt(float v) { return ld(st<T>(v)); }

template <typename T>
__device__ void gpurt_rope_freqs(T *x, const int *pos, const float *inv, u64 tokens, u64 heads, u64 hd) {
  u64 half = hd / 2, per = heads * half, i = gpurt_index();
  if (per == 0 || i >= tokens * per) return;
  u64 t = i / per, rem = i % per, h = rem / half, j = rem % half;
  u64 i0 = (t * heads + h) * hd + j, i1 = i0 + half;
  float u = ld(x[i0]), v = ld(x[i1]);
  gpurt_rope_pair(u, v, pos[t], inv[j], [](float f) { return gpurt_rt<T>(f); }); // cuda_rope.cuh
  x[i0] = st<T>(u);
  x[i1] = st<T>(v);
}

#define GPURT_ROPE_FREQS_KERNELS(T, SFX)                                                          \
  extern "C" __global__ void rope_neox_freqs_##SFX(T *x, const int *pos, const float *inv,        \
                                                   u64 tokens, u64 heads, u64 hd) {               \
    gpurt_pdl_enter();                                                                            \
    gpurt_rope_freqs<T>(x, pos, inv, tokens, heads, hd);                                           \
  }

GPURT_ROPE_FREQS_KERNELS(float, f32)
GPURT_ROPE_FREQS_KERNELS(__half, f16)
GPURT_ROPE_FREQS_KERNELS(__nv_bfloat16, bf16)
