// SPDX-License-Identifier: Apache-2.0
//
// The built-in kernels of gpurt.h ("Built-in kernels"), compiled by nvcc
// into the fatbin embedded in libgpurt_cuda.so. One element per thread,
// i = blockIdx.x * blockDim.x + threadIdx.x, no grid-stride loop; math in
// f32 with explicit round-to-nearest operations (no FMA contraction, so the
// results match the CPU reference bit for bit; expf/tanhf in silu_mul and
// softcap are within a few ulp of libm's), rounded to T (RN).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned long long u64;

// The plugin launches the built-ins with programmatic dependent launch
// (cuda_module.c): every built-in calls gpurt_pdl_enter first.
#include "cuda_pdl.cuh"

__device__ __forceinline__ u64 gpurt_index() {
  return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

#define GPURT_KERNELS(T, SFX)                                                      \
  extern "C" __global__ void fill_##SFX(T *y, T value, u64 n) {                    \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = value;                                                       \
  }                                                                                \
  extern "C" __global__ void scale_##SFX(T *y, const T *x, float alpha, u64 n) {   \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fmul_rn(alpha, ld(x[i])));                           \
  }                                                                                \
  extern "C" __global__ void axpy_##SFX(T *y, const T *x, float alpha, u64 n) {    \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fadd_rn(__fmul_rn(alpha, ld(x[i])), ld(y[i])));      \
  }                                                                                \
  extern "C" __global__ void add_##SFX(T *z, const T *x, const T *y, u64 n) {      \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) z[i] = st<T>(__fadd_rn(ld(x[i]), ld(y[i])));                        \
  }                                                                                \
  extern "C" __global__ void mul_##SFX(T *z, const T *x, const T *y, u64 n) {      \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) z[i] = st<T>(__fmul_rn(ld(x[i]), ld(y[i])));                        \
  }                                                                                \
  extern "C" __global__ void silu_mul_##SFX(T *z, const T *g, const T *u, u64 n) { \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) {                                                                   \
      float gv = ld(g[i]);                                                         \
      float s = __fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv)));                         \
      z[i] = st<T>(__fmul_rn(s, ld(u[i])));                                        \
    }                                                                              \
  }                                                                                \
  extern "C" __global__ void softcap_##SFX(T *y, const T *x, float cap, u64 n) {   \
    gpurt_pdl_enter();                                                             \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fmul_rn(cap, tanhf(__fdiv_rn(ld(x[i]), cap))));      \
  }

GPURT_KERNELS(float, f32)
GPURT_KERNELS(__half, f16)
GPURT_KERNELS(__nv_bfloat16, bf16)

// ---- the row kernels (gpurt.h: rmsnorm_T and after) -------------------------
// One-dimensional launches (csrc checks it). "One block per row": row
// blockIdx.x, the block's threads (up to 1024, any count) stride over the
// row, reductions are a shared-memory tree in a fixed order (deterministic).

// The sum of v over the block; every thread gets it.
__device__ float gpurt_block_sum(float v, float *sh) {
  unsigned t = threadIdx.x, n = blockDim.x;
  __syncthreads(); // an earlier reduction's readers are done with sh
  sh[t] = v;
  __syncthreads();
  unsigned p = 1;
  while (p < n) p <<= 1;
  for (unsigned s = p >> 1; s > 0; s >>= 1) {
    if (t < s && t + s < n) sh[t] = __fadd_rn(sh[t], sh[t + s]);
    __syncthreads();
  }
  return sh[0];
}

__device__ u64 gpurt_block_max(u64 v, u64 *sh) {
  unsigned t = threadIdx.x, n = blockDim.x;
  if (n % 32 == 0) {
    // Whole warps: each warp's maximum by shuffles, then the warps' in
    // shared memory (the maximum does not depend on the order: the same
    // result as the tree below, two barriers instead of up to eleven).
    for (int o = 16; o > 0; o >>= 1) {
      const u64 y = __shfl_xor_sync(0xffffffffu, v, o);
      v = y > v ? y : v;
    }
    __syncthreads(); // an earlier reduction's readers are done with sh
    if ((t & 31) == 0) sh[t >> 5] = v;
    __syncthreads();
    if (t < 32) {
      v = t < n / 32 ? sh[t] : 0;
      for (int o = 16; o > 0; o >>= 1) {
        const u64 y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
      }
      if (t == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
  }
  __syncthreads();
  sh[t] = v;
  __syncthreads();
  unsigned p = 1;
  while (p < n) p <<= 1;
  for (unsigned s = p >> 1; s > 0; s >>= 1) {
    if (t < s && t + s < n && sh[t + s] > sh[t]) sh[t] = sh[t + s];
    __syncthreads();
  }
  return sh[0];
}

// argmax_T's and sample_T's order: value (-0 as +0, NaN lowest), then the
// lower index; unique within a row.
__device__ __forceinline__ u64 gpurt_rank_key(float v, u64 c) {
  unsigned u = 0;
  if (v == v) {
    if (v == 0.0f) v = 0.0f;
    unsigned b = __float_as_uint(v);
    u = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  return ((u64)u << 32) | (u64)(0xffffffffu - (unsigned)c);
}

// f(v, c) for each column c of row xr the thread takes (threadIdx.x,
// + blockDim.x, ...), in that order, as f32 values, with eight loads in
// flight: one at a time, a row is as many dependent memory round trips as
// it has columns per thread (31 for 32,000 logits and 1,024 threads: on the
// H200 argmax_f32 took 11.6 us at batch 1, BENCHMARKS.md's tenth-session
// profile). The same columns in the same order: a sum over them has the
// same bits.
template <class T, class F> __device__ __forceinline__ void gpurt_row_each(const T *xr, u64 cols, F f) {
  u64 c = threadIdx.x;
  const u64 step = blockDim.x;
  for (; c + 7 * step < cols; c += 8 * step) {
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; i++) x[i] = ld(xr[c + i * step]);
#pragma unroll
    for (int i = 0; i < 8; i++) f(x[i], c + i * step);
  }
  for (; c < cols; c += step) f(ld(xr[c]), c);
}

// The samplers' candidates once top-k has cut the row: each thread's kept
// columns (key >= the top-k floor), in the order gpurt_row_each visits
// them, at most GPURT_CAND a thread ([slot][thread]: no bank conflicts).
// A pass over them instead of the row gives the same per-thread sums (a
// column left out has a key below every later threshold, so it added
// nothing), in a fraction of the time when top-k keeps few.
#define GPURT_CAND 4
struct gpurt_cand {
  float v[GPURT_CAND][1024];
  unsigned c[GPURT_CAND][1024];
  unsigned char n[1024];
};

// f(v, c) over the thread's candidates when cl is set, else over its
// columns of the row (gpurt_row_each): the same order either way.
template <class T, class F>
__device__ __forceinline__ void gpurt_kept_each(const T *xr, u64 cols, const gpurt_cand *cl, F f) {
  if (cl != nullptr) {
    const unsigned t = threadIdx.x, n = cl->n[t];
    for (unsigned i = 0; i < n; i++) f(cl->v[i][t], (u64)cl->c[i][t]);
  } else {
    gpurt_row_each(xr, cols, f);
  }
}

// Row xr's greatest gpurt_rank_key (its column is 0xffffffff less the low
// half), over the block's threads; sh: blockDim.x entries of shared memory.
template <class T> __device__ u64 gpurt_row_best(const T *xr, u64 cols, u64 *sh) {
  u64 best = 0;
  gpurt_row_each(xr, cols, [&](float v, u64 c) {
    const u64 k = gpurt_rank_key(v, c);
    if (k > best) best = k;
  });
  return gpurt_block_max(best, sh);
}

template <typename T, bool LLAMA>
__device__ void gpurt_rope(T *x, const int *pos, float theta, u64 tokens, u64 heads, u64 hd) {
  u64 half = hd / 2, per = heads * half, i = gpurt_index();
  if (per == 0 || i >= tokens * per) return;
  u64 t = i / per, rem = i % per, h = rem / half, j = rem % half;
  u64 base = (t * heads + h) * hd;
  u64 i0 = LLAMA ? base + 2 * j : base + j;
  u64 i1 = LLAMA ? base + 2 * j + 1 : base + j + half;
  float ex = __fdiv_rn((float)(2 * j), (float)hd);
  float inv = __fdiv_rn(1.0f, powf(theta, ex));
  float a = __fmul_rn((float)pos[t], inv);
  float sn, cs;
  sincosf(a, &sn, &cs);
  float u = ld(x[i0]), v = ld(x[i1]);
  x[i0] = st<T>(__fsub_rn(__fmul_rn(u, cs), __fmul_rn(v, sn)));
  x[i1] = st<T>(__fadd_rn(__fmul_rn(u, sn), __fmul_rn(v, cs)));
}

template <typename T>
__device__ void gpurt_embed(T *y, const T *table, const int *ids, u64 tokens, u64 cols, u64 vocab) {
  u64 i = gpurt_index();
  if (cols == 0 || i >= tokens * cols) return;
  u64 t = i / cols, c = i % cols;
  int id = ids[t];
  y[i] = (id < 0 || (u64)id >= vocab) ? st<T>(0.0f) : table[(u64)id * cols + c];
}

// sample_T's weight: exp((x - max) / temperature); a weight that is NaN (a
// NaN logit; -Inf at an infinite temperature) is 0 (gpurt.h: sample_T's
// non-finite logits).
__device__ __forceinline__ float gpurt_sample_w(float v, float mx, float temp) {
  float w = expf(__fdiv_rn(__fsub_rn(v, mx), temp));
  return w == w ? w : 0.0f;
}

// Fills cl with each thread's columns whose key is >= floor; returns cl,
// or nullptr when a thread has more than GPURT_CAND of them (the passes
// then read the row). shk: block_max's shared words.
template <typename T>
__device__ const gpurt_cand *gpurt_cand_fill(const T *xr, u64 cols, u64 floor, gpurt_cand *cl, u64 *shk) {
  const unsigned t = threadIdx.x;
  unsigned n = 0;
  gpurt_row_each(xr, cols, [&](float v, u64 c) {
    if (gpurt_rank_key(v, c) < floor) return;
    if (n < GPURT_CAND) {
      cl->v[n][t] = v;
      cl->c[n][t] = (unsigned)c;
    }
    n++;
  });
  cl->n[t] = (unsigned char)(n < GPURT_CAND ? n : GPURT_CAND);
  return gpurt_block_max(n > GPURT_CAND ? 1 : 0, shk) ? nullptr : cl; // (its barriers publish cl)
}

// The searches' shortcut. Once a search has decided its key's upper 32
// bits (the value's order) with some key accepted (hi, nonzero), its
// answer is a kept key with those upper bits; when exactly one kept key
// has them, the answer is that key: each further step would compare the
// mass of the same set of keys (the same sum, so the same outcome), and
// the steps would spell out its lower 32 bits (its column). One pass
// instead of 32 for any row whose logits do not tie at the threshold.
// Returns that key, or 0 (then the search goes on).
template <typename T, class Kept>
__device__ u64 gpurt_search_alone(const T *xr, u64 cols, u64 hi, Kept kept, float *sh, u64 *shk,
                                  const gpurt_cand *cl = nullptr) {
  float n = 0.0f;
  u64 best = 0;
  gpurt_kept_each(xr, cols, cl, [&](float v, u64 c) {
    const u64 k = gpurt_rank_key(v, c);
    if ((k >> 32) == hi && kept(k, v)) {
      n = __fadd_rn(n, 1.0f);
      if (k > best) best = k;
    }
  });
  n = gpurt_block_sum(n, sh);
  best = gpurt_block_max(best, shk);
  return n == 1.0f ? best : 0;
}

// A count search's upper 32 bits at once (top-k: the largest key t with
// at least want kept keys >= t is the want-th greatest kept key): its value
// bits, 8 a pass, from integer counts in shared memory (hist: 258 words).
// The search's 32 steps would find the same bits, as their counts (float
// sums of ones, below 2^24) are exact. *hi: those bits, or 0 when fewer
// than want keys are kept (the steps would accept none either).
// cbuf (or nullptr): shared memory for two uses in turn. While the
// passes read the row, each warp counts into its own 256 words of it,
// summed into hist after the pass: logits crowd into a few values of
// their top byte, so one histogram for the block makes every warp's
// increments meet at the same few words, one at a time. After the second
// pass (the value's upper 16 bits known), it takes the candidates
// (gpurt_cand_fill) at floor (prefix's upper 16 bits) << 48: every key
// the later passes count has those bits, so passes 3 and 4 read each
// thread's candidates instead of the row, and so do the caller's later
// passes (*cl: the list, or nullptr when a thread had more than
// GPURT_CAND; every later threshold is >= that floor). shk: block_max's
// words. The bin is chosen by warp 0 (8 bins a lane, a prefix sum across
// the lanes), where one thread walked the 256 bins. Counts are integers:
// the same counts, the same bin, whichever way they are added.
// best (or nullptr): the row's greatest key (gpurt_row_best's), found in
// the first pass, which reads every column anyway.
template <typename T, class Kept>
__device__ void gpurt_count_hi(const T *xr, u64 cols, Kept kept, u64 want, unsigned *hist, unsigned *hi,
                               gpurt_cand *cbuf = nullptr, const gpurt_cand **cl = nullptr, u64 *shk = nullptr,
                               u64 *best = nullptr) {
  const unsigned t = threadIdx.x, nb = blockDim.x, nw = (nb + 31) / 32;
  unsigned *const whist = reinterpret_cast<unsigned *>(cbuf);
  const gpurt_cand *list = nullptr;
  if (cl != nullptr) *cl = nullptr;
  unsigned prefix = 0;
  u64 left = want;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const bool per_warp = whist != nullptr && list == nullptr;
    unsigned *mine = per_warp ? whist + 256 * (t >> 5) : hist;
    __syncthreads(); // an earlier reader of the shared words is done
    if (per_warp)
      for (unsigned i = t; i < 256 * nw; i += nb) whist[i] = 0;
    else
      for (unsigned i = t; i < 256; i += nb) hist[i] = 0;
    __syncthreads();
    const unsigned mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
    const bool find_top = shift == 24 && best != nullptr; // (the first pass reads every column)
    u64 top = 0;
    gpurt_kept_each(xr, cols, list, [&](float v, u64 c) {
      const u64 k = gpurt_rank_key(v, c);
      const unsigned h = (unsigned)(k >> 32);
      if (find_top && k > top) top = k;
      if ((h & mask) == (prefix & mask) && kept(k, v)) atomicAdd(&mine[(h >> shift) & 255u], 1u);
    });
    if (find_top) *best = gpurt_block_max(top, shk); // (its barriers end the pass too)
    __syncthreads();
    if (per_warp) {
      for (unsigned b = t; b < 256; b += nb) {
        unsigned n = 0;
        for (unsigned w = 0; w < nw; w++) n += whist[256 * w + b];
        hist[b] = n;
      }
      __syncthreads();
    }
    if (nb >= 32) {
      if (t < 32) {
        // Lane l holds bins 255 - 8 l down to 248 - 8 l; the first bin
        // (from the top) whose running count reaches left is in the first
        // lane whose running count does.
        unsigned c[8];
        u64 own = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
          c[j] = hist[255 - 8 * t - j];
          own += c[j];
        }
        u64 run = own;
        for (unsigned o = 1; o < 32; o <<= 1) {
          const u64 y = __shfl_up_sync(0xffffffffu, run, o);
          if (t >= o) run += y;
        }
        unsigned first = run >= left ? t : 32u;
        for (int o = 16; o > 0; o >>= 1) {
          const unsigned y = __shfl_xor_sync(0xffffffffu, first, o);
          first = y < first ? y : first;
        }
        if (first == 32u) {
          if (t == 0) hist[256] = 0xffffffffu;
        } else if (t == first) {
          u64 above = run - own;
          for (int j = 0; j < 8; j++) {
            if (above + c[j] >= left) {
              hist[256] = 255u - 8u * t - (unsigned)j;
              hist[257] = (unsigned)(left - above);
              break;
            }
            above += c[j];
          }
        }
      }
    } else if (t == 0) {
      u64 above = 0;
      int d = -1;
      for (int b = 255; b >= 0; b--) {
        if (above + hist[b] >= left) {
          d = b;
          break;
        }
        above += hist[b];
      }
      hist[256] = d < 0 ? 0xffffffffu : (unsigned)d;
      hist[257] = (unsigned)(left - above);
    }
    __syncthreads();
    if (hist[256] == 0xffffffffu) {
      *hi = 0;
      return;
    }
    prefix |= hist[256] << shift;
    left = hist[257];
    if (shift == 16 && cbuf != nullptr && cl != nullptr) {
      list = gpurt_cand_fill(xr, cols, (u64)(prefix & 0xffff0000u) << 32, cbuf, shk);
      *cl = list;
    }
  }
  *hi = prefix;
}

// The mass searches once top-k has cut the row (cl set). A search's
// answer, the largest key t whose mass (the block sum, over the kept keys
// >= t, of what pass sums) is >= want (> want when strict), is a kept key
// or 0: the mass only changes at the kept keys and grows as t falls (the
// per-thread sums and the tree add more terms that are >= 0). With the
// kept keys in descending order s[0] > s[1] > ..., it is s[i] for the
// smallest i whose mass passes, found by bisection: about log2(kept)
// block sums instead of the 33 to 64 of the bit-by-bit search, each the
// mass that search computes at that threshold (the same sums, so the same
// answer). The kept keys are gathered into shk (1024 at most) and put in
// order by their ranks. Returns false, leaving *out alone, when more than
// 1024 are kept (the caller searches bit by bit).
template <class Kept, class Mass>
__device__ bool gpurt_cand_search(const gpurt_cand *cl, Kept kept, Mass mass, float want, bool strict, u64 *shk,
                                  u64 *out) {
  __shared__ unsigned count;
  const unsigned t = threadIdx.x, nb = blockDim.x;
  __syncthreads(); // an earlier reader of shk is done
  if (t == 0) count = 0;
  __syncthreads();
  for (unsigned i = 0; i < cl->n[t]; i++) {
    const float v = cl->v[i][t];
    const u64 k = gpurt_rank_key(v, cl->c[i][t]);
    if (!kept(k, v)) continue;
    const unsigned at = atomicAdd(&count, 1u);
    if (at < 1024) shk[at] = k;
  }
  __syncthreads();
  const unsigned n = count;
  if (n > 1024) return false;
  // above every key the mass is that of no key, 0: the bit-by-bit search
  // then takes every bit
  if (strict ? 0.0f > want : 0.0f >= want) {
    *out = ~0ull;
    return true;
  }
  // Each key's rank: how many kept keys are greater (they are distinct:
  // the column is part of the key). A thread has at most GPURT_CAND
  // candidates, so n <= GPURT_CAND x blockDim.
  u64 key[GPURT_CAND];
  unsigned rank[GPURT_CAND];
#pragma unroll
  for (int j = 0; j < GPURT_CAND; j++) {
    const unsigned i = t + (unsigned)j * nb;
    rank[j] = 0;
    key[j] = i < n ? shk[i] : 0;
    if (i < n)
      for (unsigned q = 0; q < n; q++) rank[j] += shk[q] > key[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < GPURT_CAND; j++)
    if (t + (unsigned)j * nb < n) shk[rank[j]] = key[j];
  __syncthreads();
  unsigned lo = 0, hi = n;
  while (lo < hi) {
    const unsigned mid = (lo + hi) / 2;
    const float m = mass(shk[mid]);
    if (strict ? m > want : m >= want)
      hi = mid;
    else
      lo = mid + 1;
  }
  *out = lo < n ? shk[lo] : 0;
  return true;
}

// sample_T's search: the largest key t whose mass (the weights, or the
// count when temp is 0, of the keys >= t and >= floor) is >= want (> want
// when strict), bit by bit from the top (the count's upper 32 bits by
// gpurt_count_hi; gpurt_search_alone after them).
template <typename T>
__device__ u64 gpurt_sample_search(const T *xr, u64 cols, u64 floor, float mx, float temp, float want,
                                   bool strict, float *sh, u64 *shk, const gpurt_cand *cl = nullptr,
                                   gpurt_cand *cbuf = nullptr, const gpurt_cand **clout = nullptr,
                                   u64 *best = nullptr) {
  u64 t = 0;
  int b = 63;
  auto kept = [&](u64 key, float) { return key >= floor; };
  if (temp == 0.0f && !strict && want >= 1.0f && want < 16777216.0f) {
    unsigned hi;
    const gpurt_cand *got = nullptr;
    gpurt_count_hi(xr, cols, kept, (u64)want, (unsigned *)sh, &hi, cbuf, clout != nullptr ? &got : nullptr, shk,
                   best);
    if (got != nullptr) cl = got; // the rest of this search reads the candidates too
    if (clout != nullptr) *clout = got;
    t = (u64)hi << 32;
    b = 31;
  } else if (best != nullptr) {
    *best = gpurt_row_best(xr, cols, shk);
  }
  // the mass at threshold cand, as each step below computes it
  auto mass = [&](u64 cand) {
    float m = 0.0f;
    gpurt_kept_each(xr, cols, cl, [&](float v, u64 c) {
      u64 k = gpurt_rank_key(v, c);
      if (k >= cand && k >= floor) m = __fadd_rn(m, temp == 0.0f ? 1.0f : gpurt_sample_w(v, mx, temp));
    });
    return gpurt_block_sum(m, sh);
  };
  if (cl != nullptr && b == 63 && gpurt_cand_search(cl, kept, mass, want, strict, shk, &t)) return t;
  for (; b >= 0; b--) {
    if (b == 31 && t != 0) {
      const u64 k = gpurt_search_alone(xr, cols, t >> 32, kept, sh, shk, cl);
      if (k != 0) return k;
    }
    const u64 cand = t | (1ull << b);
    const float m = mass(cand);
    if (strict ? m > want : m >= want) t = cand;
  }
  return t;
}

template <typename T>
__device__ float gpurt_sample_mass(const T *xr, u64 cols, u64 floor, float mx, float temp, float *sh,
                                   const gpurt_cand *cl = nullptr) {
  float m = 0.0f;
  gpurt_kept_each(xr, cols, cl, [&](float v, u64 c) {
    if (gpurt_rank_key(v, c) >= floor) m = __fadd_rn(m, gpurt_sample_w(v, mx, temp));
  });
  return gpurt_block_sum(m, sh);
}

__device__ __forceinline__ u64 gpurt_splitmix64(u64 z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// argmax_T (sample false) and sample_T.
template <typename T>
__device__ void gpurt_pick(int *idx, const T *x, u64 rows, u64 cols, bool sample, u64 topk, float topp,
                           float temp, u64 seed) {
  __shared__ u64 shk[1024];
  __shared__ float sh[1024];
  u64 r = blockIdx.x;
  if (r >= rows) return;
  const T *xr = x + r * cols;
  const bool draw = sample && topk != 1 && temp > 0.0f;
  if (draw && (topk == 0 || topk > cols)) topk = cols;
  __shared__ gpurt_cand cand; // (the count's per-warp histograms, then its candidates)
  const gpurt_cand *cl = nullptr;
  u64 best = 0, floor = 0;
  // A draw's top-k count (the weights do not enter it) also finds the
  // row's maximum in its first pass: one pass over the row fewer.
  if (draw)
    floor = gpurt_sample_search(xr, cols, 0, 0.0f, 0.0f, (float)topk, false, sh, shk, nullptr, &cand, &cl, &best);
  else
    best = gpurt_row_best(xr, cols, shk);
  unsigned bi = 0xffffffffu - (unsigned)best;
  float mx = ld(xr[bi]);
  // A non-finite maximum (+Inf, or a row of -Inf and NaN only) leaves no
  // finite weights: the argmax (gpurt.h).
  if (draw && isfinite(mx)) {
    // every later threshold is >= floor: the passes read the candidates
    if (cl == nullptr) cl = gpurt_cand_fill(xr, cols, floor, &cand, shk);
    if (topp < 1.0f) {
      if (topp <= 0.0f) {
        floor = best;
      } else {
        float z = gpurt_sample_mass(xr, cols, floor, mx, temp, sh, cl);
        floor = gpurt_sample_search(xr, cols, floor, mx, temp, __fmul_rn(topp, z), false, sh, shk, cl);
      }
    }
    float z = gpurt_sample_mass(xr, cols, floor, mx, temp, sh, cl);
    u64 h = gpurt_splitmix64(seed + (r + 1) * 0x9E3779B97F4A7C15ull);
    float u = (float)(h >> 40) * (1.0f / 16777216.0f);
    u64 t = gpurt_sample_search(xr, cols, floor, mx, temp, __fmul_rn(u, z), true, sh, shk, cl);
    bi = 0xffffffffu - (unsigned)t;
  }
  if (threadIdx.x == 0) idx[r] = (int)bi;
}

// rmsnorm_T and add_rmsnorm_T: cuda_fused.cu (vector loads, warp-shuffle sums).
#include "cuda_rope.cuh"
#include "cuda_fused.cu"

#define GPURT_ROW_KERNELS(T, SFX)                                                                   \
  extern "C" __global__ void rope_llama_##SFX(T *x, const int *pos, float theta, u64 tokens,       \
                                              u64 heads, u64 hd) {                                  \
    gpurt_pdl_enter();                                                                              \
    gpurt_rope<T, true>(x, pos, theta, tokens, heads, hd);                                          \
  }                                                                                                 \
  extern "C" __global__ void rope_neox_##SFX(T *x, const int *pos, float theta, u64 tokens,        \
                                             u64 heads, u64 hd) {                                   \
    gpurt_pdl_enter();                                                                              \
    gpurt_rope<T, false>(x, pos, theta, tokens, heads, hd);                                         \
  }                                                                                                 \
  extern "C" __global__ void embed_##SFX(T *y, const T *table, const int *ids, u64 tokens,         \
                                         u64 cols, u64 vocab) {                                     \
    gpurt_pdl_enter();                                                                              \
    gpurt_embed<T>(y, table, ids, tokens, cols, vocab);                                             \
  }                                                                                                 \
  extern "C" __global__ void argmax_##SFX(int *idx, const T *x, u64 rows, u64 cols) {              \
    gpurt_pdl_enter();                                                                             \
    gpurt_pick<T>(idx, x, rows, cols, false, 1, 1.0f, 0.0f, 0);                                     \
  }                                                                                                 \
  /* (1024: any block the ABI allows launches; at most 64 registers) */                             \
  extern "C" __global__ void __launch_bounds__(1024) sample_##SFX(int *idx, const T *x, u64 rows,  \
                                                                  u64 cols, u64 topk, float topp,   \
                                                                  float temp, u64 seed) {           \
    gpurt_pdl_enter();                                                                              \
    gpurt_pick<T>(idx, x, rows, cols, true, topk, topp, temp, seed);                                \
  }

GPURT_ROW_KERNELS(float, f32)
GPURT_ROW_KERNELS(__half, f16)
GPURT_ROW_KERNELS(__nv_bfloat16, bf16)

__device__ __forceinline__ u64 gpurt_globaltimer() {
#ifdef GPURT_CUDA_EMU
  return (u64)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
#else
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// Each thread waits about ns nanoseconds (ordering and timing tests). It
// waits for the kernel before it but does not let the next one be
// scheduled early: benchmarks queue their timed calls behind it, and none
// of them may start its work during the sleep.
extern "C" __global__ void sleep_ns(u64 ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  u64 start = gpurt_globaltimer();
  while (gpurt_globaltimer() - start < ns) {
    __nanosleep(ns > 2000 ? 1000 : 100);
  }
}

// Internal kernels of the plugin itself, not built-ins: kernel_get refuses
// every name starting with "gpurt_internal_" in the built-in module
// (cuda_module.c), so only cuda_gemm.c reaches them (its own module
// handle). They turn an f32 GEMM bias into the 16-bit bias cuBLASLt takes for a bf16/f16 D,
// rounding to nearest even (NaN stays NaN, overflow becomes inf).
extern "C" __global__ void gpurt_internal_f32_to_bf16(__nv_bfloat16 *y, const float *x, u64 n) {
  u64 i = gpurt_index();
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

extern "C" __global__ void gpurt_internal_f32_to_f16(__half *y, const float *x, u64 n) {
  u64 i = gpurt_index();
  if (i < n) y[i] = __float2half_rn(x[i]);
}

// sample_rows_T (1.8): per-request sampling, in its own file.
#include "cuda_sample.cu"
