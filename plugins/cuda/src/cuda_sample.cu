// SPDX-License-Identifier: Apache-2.0
//
// sample_rows_T (gpurt.h, 1.8): per-request sampling, one block per row.
// Compiled as part of cuda_kernels.cu's fatbin (included at its end: it
// uses that file's ld/st, block reductions and rank key), so it is a
// built-in kernel: launched by name, recordable in graphs like any launch.
//
// Why not FlashInfer's sampling kernels (flashinfer/sampling.cuh), which
// take per-row top_k/top_p/seed/offset arrays too: (1) they seed curand's
// Philox with the row index as the subsequence (curand_init(seed, bx,
// offset)), so a request's draw would change with its row in the batch,
// against the contract (a draw depends on seed and offset only); (2) their
// top-k/top-p are rejection sampling over pivots, not the exact masks in
// the documented order that the conformance suite checks; (3) sampling.cuh
// needs curand's headers, which the pinned CUDA packages do not carry.
// The algorithm here is sample_T's exact rank-key search (the row's order
// is a 64-bit key: value, then the lower index), extended with min-p, the
// penalties, a Philox draw per request and the logprob.

__device__ __forceinline__ unsigned gpurt_sr_u32(const unsigned char *p) {
  return (unsigned)p[0] | ((unsigned)p[1] << 8) | ((unsigned)p[2] << 16) | ((unsigned)p[3] << 24);
}
__device__ __forceinline__ u64 gpurt_sr_u64(const unsigned char *p) {
  return (u64)gpurt_sr_u32(p) | ((u64)gpurt_sr_u32(p + 4) << 32);
}
__device__ __forceinline__ float gpurt_sr_f32(const unsigned char *p) {
  return __uint_as_float(gpurt_sr_u32(p));
}
__device__ __forceinline__ void gpurt_sr_put_u32(unsigned char *p, unsigned v) {
  p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
  p[3] = (unsigned char)(v >> 24);
}

// Philox4x32-10: the first output word for key seed, counter (offset, 0).
__device__ __forceinline__ unsigned gpurt_philox_first(u64 seed, u64 offset) {
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
  unsigned c0 = (unsigned)offset, c1 = (unsigned)(offset >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int i = 0; i < 10; i++) {
    if (i > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    unsigned n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
  }
  return c0;
}

struct gpurt_sr_row {
  float mx, t, minp;
  u64 best, floor;
};

__device__ __forceinline__ float gpurt_sr_w(float v, const gpurt_sr_row &R) {
  float w = expf(__fdiv_rn(__fsub_rn(v, R.mx), R.t));
  return w == w ? w : 0.0f;
}

// The kept mass (weights, or the count) of the keys >= thr.
template <typename T>
__device__ float gpurt_sr_mass(const T *xr, u64 cols, const gpurt_sr_row &R, u64 thr, bool count, float *sh,
                               const gpurt_cand *cl = nullptr) {
  float m = 0.0f;
  gpurt_kept_each(xr, cols, cl, [&](float v, u64 c) { // cuda_kernels.cu: the row or the candidates, in order
    u64 k = gpurt_rank_key(v, c);
    if (k < thr || k < R.floor) return;
    float w = gpurt_sr_w(v, R);
    if (w >= R.minp || k == R.best) m = __fadd_rn(m, count ? 1.0f : w);
  });
  return gpurt_block_sum(m, sh);
}

// The largest key t whose kept mass is >= want (> want when strict).
template <typename T>
__device__ u64 gpurt_sr_search(const T *xr, u64 cols, const gpurt_sr_row &R, float want, bool count, bool strict,
                               float *sh, u64 *shk, const gpurt_cand *cl = nullptr, gpurt_cand *cbuf = nullptr,
                               const gpurt_cand **clout = nullptr) {
  // (cuda_kernels.cu's gpurt_count_hi and gpurt_search_alone: the kept set
  // as gpurt_sr_mass keeps it)
  auto kept = [&](u64 key, float v) { return key >= R.floor && (gpurt_sr_w(v, R) >= R.minp || key == R.best); };
  u64 t = 0;
  int b = 63;
  if (count && !strict && want >= 1.0f && want < 16777216.0f) {
    unsigned hi;
    const gpurt_cand *got = nullptr;
    gpurt_count_hi(xr, cols, kept, (u64)want, (unsigned *)sh, &hi, cbuf, clout != nullptr ? &got : nullptr, shk);
    if (got != nullptr) cl = got; // the rest of this search reads the candidates too
    if (clout != nullptr) *clout = got;
    t = (u64)hi << 32;
    b = 31;
  }
  // (cuda_kernels.cu's gpurt_cand_search: the same answer by bisection over
  // the kept candidates, at the masses below)
  if (cl != nullptr && b == 63 &&
      gpurt_cand_search(cl, kept, [&](u64 thr) { return gpurt_sr_mass(xr, cols, R, thr, count, sh, cl); }, want, strict,
                        shk, &t))
    return t;
  for (; b >= 0; b--) {
    if (b == 31 && t != 0) {
      const u64 k = gpurt_search_alone(xr, cols, t >> 32, kept, sh, shk, cl);
      if (k != 0) return k;
    }
    u64 cand = t | (1ull << b);
    float m = gpurt_sr_mass(xr, cols, R, cand, count, sh, cl);
    if (strict ? m > want : m >= want) t = cand;
  }
  return t;
}

template <typename T>
__device__ void gpurt_sample_rows(unsigned char *out, T *x, const unsigned char *p, u64 rows, u64 cols, u64 hist) {
  __shared__ u64 shk[1024];
  __shared__ float sh[1024];
  u64 r = blockIdx.x;
  if (r >= rows) return;
  T *xr = x + r * cols;
  float temp = gpurt_sr_f32(p + 16 * rows + 4 * r);
  int topk = (int)gpurt_sr_u32(p + 20 * rows + 4 * r);
  float topp = gpurt_sr_f32(p + 24 * rows + 4 * r);
  float minp = gpurt_sr_f32(p + 28 * rows + 4 * r);
  float rep = gpurt_sr_f32(p + 32 * rows + 4 * r);
  float pres = gpurt_sr_f32(p + 36 * rows + 4 * r);
  // 1. penalties, in place, each distinct history id once
  bool use_rep = isfinite(rep) && rep > 0.0f && rep != 1.0f;
  bool use_pres = isfinite(pres) && pres != 0.0f;
  if (use_rep || use_pres) {
    const unsigned char *h = p + 40 * rows + 4 * r * hist;
    for (u64 j = threadIdx.x; j < hist; j += blockDim.x) {
      int id = (int)gpurt_sr_u32(h + 4 * j);
      if (id < 0 || (u64)id >= cols) continue;
      bool seen = false;
      for (u64 i = 0; i < j && !seen; i++) seen = (int)gpurt_sr_u32(h + 4 * i) == id;
      if (seen) continue;
      float v = ld(xr[id]);
      if (use_rep) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
      if (use_pres) v = __fsub_rn(v, pres);
      xr[id] = st<T>(v);
    }
    __syncthreads(); // the penalised row is what every thread reads next
  }
  // 2. the order's maximum
  u64 best = gpurt_row_best(xr, cols, shk);
  unsigned bi = 0xffffffffu - (unsigned)best;
  float mx = ld(xr[bi]);
  float lp = __uint_as_float(0x7fc00000u); // NaN: no finite maximum
  if (isfinite(mx)) {
    bool greedy = !(temp > 0.0f);
    gpurt_sr_row R = {mx, greedy ? 1.0f : temp, 0.0f, best, 0};
    float zall = gpurt_sr_mass(xr, cols, R, 0, false, sh);
    // 3. the kept set and the draw
    if (!greedy && topk != 1) {
      __shared__ gpurt_cand cand;
      const gpurt_cand *cl = nullptr;
      if (topk > 0 && (u64)topk < cols) {
        // (cand: the count's per-warp histograms, then its candidates)
        R.floor = gpurt_sr_search(xr, cols, R, (float)topk, true, false, sh, shk, nullptr, &cand, &cl);
        // every later threshold is >= R.floor: the passes read the candidates
        if (cl == nullptr) cl = gpurt_cand_fill(xr, cols, R.floor, &cand, shk);
      }
      if (topp < 1.0f) {
        if (topp > 0.0f) {
          float z = gpurt_sr_mass(xr, cols, R, 0, false, sh, cl);
          R.floor = gpurt_sr_search(xr, cols, R, __fmul_rn(topp, z), false, false, sh, shk, cl);
        } else {
          R.floor = best;
        }
      }
      if (minp > 0.0f) R.minp = minp;
      float z = gpurt_sr_mass(xr, cols, R, 0, false, sh, cl);
      u64 seed = gpurt_sr_u64(p + 8 * r), off = gpurt_sr_u64(p + 8 * rows + 8 * r);
      float u = (float)(gpurt_philox_first(seed, off) >> 8) * (1.0f / 16777216.0f);
      u64 t = gpurt_sr_search(xr, cols, R, __fmul_rn(u, z), false, true, sh, shk, cl);
      bi = 0xffffffffu - (unsigned)t;
    }
    // 4. the logprob after penalties and temperature
    lp = __fsub_rn(__fdiv_rn(__fsub_rn(ld(xr[bi]), mx), R.t), logf(zall));
  }
  if (threadIdx.x == 0) {
    gpurt_sr_put_u32(out + 4 * r, bi);
    gpurt_sr_put_u32(out + 4 * rows + 4 * r, __float_as_uint(lp));
  }
}

#define GPURT_SAMPLE_ROWS(T, SFX)                                                                         \
  /* (1024: any block the ABI allows launches; at most 64 registers) */                                  \
  extern "C" __global__ void __launch_bounds__(1024) sample_rows_##SFX(unsigned char *out, T *x,        \
                                                                       const unsigned char *params,      \
                                                                       u64 rows, u64 cols, u64 hist) {   \
    gpurt_pdl_enter();                                                                                    \
    gpurt_sample_rows<T>(out, x, params, rows, cols, hist);                                               \
  }

GPURT_SAMPLE_ROWS(float, f32)
GPURT_SAMPLE_ROWS(__half, f16)
GPURT_SAMPLE_ROWS(__nv_bfloat16, bf16)
