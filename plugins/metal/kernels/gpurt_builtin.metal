// SPDX-License-Identifier: Apache-2.0
//
// gpurt_builtin.metal — the Metal plugin's built-in kernels (module format
// GPURT_MODULE_BUILTIN) and the internal kernels the plugin uses for
// unaligned copies, 2/4-byte memsets and GEMM work MPS cannot do.
//
// The public kernels have the names and parameter order of gpurt.h (and of
// the CUDA plugin): parameter p is bound at [[buffer(p)]]; buffers with
// setBuffer:offset:atIndex:, scalars with setBytes:length:atIndex:.
// One element per thread:
//   i = threadgroup_position_in_grid.x * threads_per_threadgroup.x
//       + thread_position_in_threadgroup.x
// and a thread with i >= n does nothing (no grid-stride loop).
// Arithmetic is done in f32 and rounded to the element type (RNE).
//
// Compiled offline (xcrun metal, no fast math) into a metallib embedded in
// the plugin, or at run time from this source (newLibraryWithSource).

#include <metal_stdlib>
using namespace metal;

// ---- element types -------------------------------------------------------

// bf16 is carried as its bits (ushort) everywhere, so the kernels have the
// same parameter layout with and without a native bfloat type.
#if defined(__HAVE_BFLOAT__)
static inline float bf16_to_f32(ushort b) { return float(as_type<bfloat>(b)); }
static inline ushort f32_to_bf16(float f) { return as_type<ushort>(bfloat(f)); }
#else
static inline float bf16_to_f32(ushort b) { return as_type<float>(uint(b) << 16); }
static inline ushort f32_to_bf16(float f) {
  uint u = as_type<uint>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return ushort((u >> 16) | 0x0040u); // NaN stays a (quiet) NaN
  }
  u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
  return ushort(u >> 16);
}
#endif

struct f32_t {
  typedef float storage;
  static inline float load(storage v) { return v; }
  static inline storage store(float f) { return f; }
};
struct f16_t {
  typedef half storage;
  static inline float load(storage v) { return float(v); }
  static inline storage store(float f) { return half(f); } // RNE
};
struct bf16_t {
  typedef ushort storage;
  static inline float load(storage v) { return bf16_to_f32(v); }
  static inline storage store(float f) { return f32_to_bf16(f); }
};

#define GPURT_INDEX                                                         \
  ulong i = ulong(tgp.x) * ulong(tpt.x) + ulong(tid.x);                    \
  if (i >= n) return;

#define GPURT_THREAD_ARGS                                                   \
  uint3 tgp [[threadgroup_position_in_grid]],                               \
  uint3 tpt [[threads_per_threadgroup]],                                    \
  uint3 tid [[thread_position_in_threadgroup]]

// ---- fill / scale / axpy / add / mul / silu_mul / softcap -------------------------------------

#define GPURT_DEFINE_ELEMENTWISE(SUFFIX, T)                                  \
  kernel void fill_##SUFFIX(device T::storage *y [[buffer(0)]],              \
                            constant T::storage &value [[buffer(1)]],        \
                            constant ulong &n [[buffer(2)]],                 \
                            GPURT_THREAD_ARGS) {                             \
    GPURT_INDEX                                                              \
    y[i] = value;                                                            \
  }                                                                          \
  kernel void scale_##SUFFIX(device T::storage *y [[buffer(0)]],             \
                             device const T::storage *x [[buffer(1)]],       \
                             constant float &alpha [[buffer(2)]],            \
                             constant ulong &n [[buffer(3)]],                \
                             GPURT_THREAD_ARGS) {                            \
    GPURT_INDEX                                                              \
    y[i] = T::store(alpha * T::load(x[i]));                                  \
  }                                                                          \
  kernel void axpy_##SUFFIX(device T::storage *y [[buffer(0)]],              \
                            device const T::storage *x [[buffer(1)]],        \
                            constant float &alpha [[buffer(2)]],             \
                            constant ulong &n [[buffer(3)]],                 \
                            GPURT_THREAD_ARGS) {                             \
    GPURT_INDEX                                                              \
    y[i] = T::store(alpha * T::load(x[i]) + T::load(y[i]));                  \
  }                                                                          \
  kernel void add_##SUFFIX(device T::storage *z [[buffer(0)]],               \
                           device const T::storage *x [[buffer(1)]],         \
                           device const T::storage *y [[buffer(2)]],         \
                           constant ulong &n [[buffer(3)]],                  \
                           GPURT_THREAD_ARGS) {                              \
    GPURT_INDEX                                                              \
    z[i] = T::store(T::load(x[i]) + T::load(y[i]));                          \
  }                                                                          \
  kernel void mul_##SUFFIX(device T::storage *z [[buffer(0)]],               \
                           device const T::storage *x [[buffer(1)]],         \
                           device const T::storage *y [[buffer(2)]],         \
                           constant ulong &n [[buffer(3)]],                  \
                           GPURT_THREAD_ARGS) {                              \
    GPURT_INDEX                                                              \
    z[i] = T::store(T::load(x[i]) * T::load(y[i]));                          \
  }                                                                          \
  kernel void silu_mul_##SUFFIX(device T::storage *z [[buffer(0)]],          \
                                device const T::storage *g [[buffer(1)]],    \
                                device const T::storage *u [[buffer(2)]],    \
                                constant ulong &n [[buffer(3)]],             \
                                GPURT_THREAD_ARGS) {                         \
    GPURT_INDEX                                                              \
    float gv = T::load(g[i]);                                                \
    z[i] = T::store(gv / (1.0f + precise::exp(-gv)) * T::load(u[i]));        \
  }                                                                          \
  kernel void softcap_##SUFFIX(device T::storage *y [[buffer(0)]],           \
                               device const T::storage *x [[buffer(1)]],     \
                               constant float &cap [[buffer(2)]],            \
                               constant ulong &n [[buffer(3)]],              \
                               GPURT_THREAD_ARGS) {                          \
    GPURT_INDEX                                                              \
    y[i] = T::store(cap * precise::tanh(T::load(x[i]) / cap));               \
  }

GPURT_DEFINE_ELEMENTWISE(f32, f32_t)
GPURT_DEFINE_ELEMENTWISE(f16, f16_t)
GPURT_DEFINE_ELEMENTWISE(bf16, bf16_t)

// ---- the row kernels (gpurt.h: rmsnorm_T and after) ----------------------
// One-dimensional launches (csrc checks it). "One block per row": row
// tgp.x, the threadgroup's threads stride over it (at most 1024),
// reductions a threadgroup-memory tree in a fixed order, as on CUDA.

static inline float gpurt_tg_sum(float v, threadgroup float *sh, uint t, uint n) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  sh[t] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint p = 1;
  while (p < n) p <<= 1;
  for (uint s = p >> 1; s > 0; s >>= 1) {
    if (t < s && t + s < n) sh[t] = sh[t] + sh[t + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  return sh[0];
}

static inline ulong gpurt_tg_max(ulong v, threadgroup ulong *sh, uint t, uint n) {
  threadgroup_barrier(mem_flags::mem_threadgroup);
  sh[t] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint p = 1;
  while (p < n) p <<= 1;
  for (uint s = p >> 1; s > 0; s >>= 1) {
    if (t < s && t + s < n && sh[t + s] > sh[t]) sh[t] = sh[t + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  return sh[0];
}

static inline ulong gpurt_rank_key(float v, ulong c) {
  uint u = 0;
  if (v == v) {
    if (v == 0.0f) v = 0.0f;
    uint b = as_type<uint>(v);
    u = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  return (ulong(u) << 32) | ulong(0xffffffffu - uint(c));
}

static inline ulong gpurt_splitmix64(ulong z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ul;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBul;
  return z ^ (z >> 31);
}

// sample_T's weight: exp((x - max) / temperature); a weight that is NaN (a
// NaN logit; -Inf at an infinite temperature) is 0 (gpurt.h: sample_T's
// non-finite logits).
static inline float gpurt_sample_w(float v, float mx, float temp) {
  float w = precise::exp((v - mx) / temp);
  return w == w ? w : 0.0f;
}

template <typename T>
static inline ulong gpurt_sample_search(device const typename T::storage *xr, ulong cols, ulong floor,
                                        float mx, float temp, float want, bool strict,
                                        threadgroup float *sh, uint t, uint n) {
  ulong r = 0;
  for (int b = 63; b >= 0; b--) {
    ulong cand = r | (1ul << b);
    float m = 0.0f;
    for (ulong c = t; c < cols; c += n) {
      float v = T::load(xr[c]);
      ulong k = gpurt_rank_key(v, c);
      if (k >= cand && k >= floor) m += temp == 0.0f ? 1.0f : gpurt_sample_w(v, mx, temp);
    }
    m = gpurt_tg_sum(m, sh, t, n);
    if (strict ? m > want : m >= want) r = cand;
  }
  return r;
}

template <typename T>
static inline float gpurt_sample_mass(device const typename T::storage *xr, ulong cols, ulong floor,
                                      float mx, float temp, threadgroup float *sh, uint t, uint n) {
  float m = 0.0f;
  for (ulong c = t; c < cols; c += n) {
    float v = T::load(xr[c]);
    if (gpurt_rank_key(v, c) >= floor) m += gpurt_sample_w(v, mx, temp);
  }
  return gpurt_tg_sum(m, sh, t, n);
}

template <typename T>
static inline void gpurt_pick(device int *idx, device const typename T::storage *x, ulong rows,
                              ulong cols, bool sample, ulong topk, float topp, float temp,
                              ulong seed, threadgroup float *sh, threadgroup ulong *shk, uint row,
                              uint t, uint n) {
  if (row >= rows) return;
  device const typename T::storage *xr = x + ulong(row) * cols;
  ulong best = 0;
  for (ulong c = t; c < cols; c += n) {
    ulong k = gpurt_rank_key(T::load(xr[c]), c);
    if (k > best) best = k;
  }
  best = gpurt_tg_max(best, shk, t, n);
  uint bi = 0xffffffffu - uint(best);
  float mx = T::load(xr[bi]);
  // A non-finite maximum (+Inf, or a row of -Inf and NaN only) leaves no
  // finite weights: the argmax (gpurt.h).
  if (sample && topk != 1 && temp > 0.0f && isfinite(mx)) {
    if (topk == 0 || topk > cols) topk = cols;
    ulong floor = gpurt_sample_search<T>(xr, cols, 0, mx, 0.0f, float(topk), false, sh, t, n);
    if (topp < 1.0f) {
      if (topp <= 0.0f) {
        floor = best;
      } else {
        float z = gpurt_sample_mass<T>(xr, cols, floor, mx, temp, sh, t, n);
        floor = gpurt_sample_search<T>(xr, cols, floor, mx, temp, topp * z, false, sh, t, n);
      }
    }
    float z = gpurt_sample_mass<T>(xr, cols, floor, mx, temp, sh, t, n);
    ulong h = gpurt_splitmix64(seed + (ulong(row) + 1) * 0x9E3779B97F4A7C15ul);
    float u = float(h >> 40) * (1.0f / 16777216.0f);
    ulong r = gpurt_sample_search<T>(xr, cols, floor, mx, temp, u * z, true, sh, t, n);
    bi = 0xffffffffu - uint(r);
  }
  if (t == 0) idx[row] = int(bi);
}

#define GPURT_DEFINE_ROWS(SUFFIX, T)                                                   \
  kernel void rmsnorm_##SUFFIX(device T::storage *y [[buffer(0)]],                     \
                               device const T::storage *x [[buffer(1)]],               \
                               device const T::storage *w [[buffer(2)]],               \
                               constant float &eps [[buffer(3)]],                      \
                               constant ulong &rows [[buffer(4)]],                     \
                               constant ulong &cols [[buffer(5)]],                     \
                               GPURT_THREAD_ARGS) {                                    \
    threadgroup float sh[1024];                                                        \
    if (ulong(tgp.x) >= rows) return;                                                  \
    device const T::storage *xr = x + ulong(tgp.x) * cols;                             \
    device T::storage *yr = y + ulong(tgp.x) * cols;                                   \
    float ss = 0.0f;                                                                   \
    for (ulong c = tid.x; c < cols; c += tpt.x) {                                      \
      float v = T::load(xr[c]);                                                        \
      ss += v * v;                                                                     \
    }                                                                                  \
    ss = gpurt_tg_sum(ss, sh, tid.x, tpt.x);                                           \
    float s = 1.0f / precise::sqrt(ss / float(cols) + eps);                            \
    for (ulong c = tid.x; c < cols; c += tpt.x)                                        \
      yr[c] = T::store((T::load(xr[c]) * s) * T::load(w[c]));                          \
  }                                                                                    \
  kernel void rope_llama_##SUFFIX(device T::storage *x [[buffer(0)]],                  \
                                  device const int *pos [[buffer(1)]],                 \
                                  constant float &theta [[buffer(2)]],                 \
                                  constant ulong &tokens [[buffer(3)]],                \
                                  constant ulong &heads [[buffer(4)]],                 \
                                  constant ulong &hd [[buffer(5)]],                    \
                                  GPURT_THREAD_ARGS) {                                 \
    gpurt_rope<T>(x, pos, theta, tokens, heads, hd, true, tgp, tpt, tid);              \
  }                                                                                    \
  kernel void rope_neox_##SUFFIX(device T::storage *x [[buffer(0)]],                   \
                                 device const int *pos [[buffer(1)]],                  \
                                 constant float &theta [[buffer(2)]],                  \
                                 constant ulong &tokens [[buffer(3)]],                 \
                                 constant ulong &heads [[buffer(4)]],                  \
                                 constant ulong &hd [[buffer(5)]],                     \
                                 GPURT_THREAD_ARGS) {                                  \
    gpurt_rope<T>(x, pos, theta, tokens, heads, hd, false, tgp, tpt, tid);             \
  }                                                                                    \
  kernel void embed_##SUFFIX(device T::storage *y [[buffer(0)]],                       \
                             device const T::storage *table [[buffer(1)]],             \
                             device const int *ids [[buffer(2)]],                      \
                             constant ulong &tokens [[buffer(3)]],                     \
                             constant ulong &cols [[buffer(4)]],                       \
                             constant ulong &vocab [[buffer(5)]],                      \
                             GPURT_THREAD_ARGS) {                                      \
    ulong n = tokens * cols;                                                           \
    GPURT_INDEX                                                                        \
    ulong t = i / cols, c = i % cols;                                                  \
    int id = ids[t];                                                                   \
    y[i] = (id < 0 || ulong(id) >= vocab) ? T::store(0.0f) : table[ulong(id) * cols + c]; \
  }                                                                                    \
  kernel void argmax_##SUFFIX(device int *idx [[buffer(0)]],                           \
                              device const T::storage *x [[buffer(1)]],                \
                              constant ulong &rows [[buffer(2)]],                      \
                              constant ulong &cols [[buffer(3)]],                      \
                              GPURT_THREAD_ARGS) {                                     \
    threadgroup float sh[1024];                                                        \
    threadgroup ulong shk[1024];                                                       \
    gpurt_pick<T>(idx, x, rows, cols, false, 1, 1.0f, 0.0f, 0, sh, shk, tgp.x, tid.x, tpt.x); \
  }                                                                                    \
  kernel void sample_##SUFFIX(device int *idx [[buffer(0)]],                           \
                              device const T::storage *x [[buffer(1)]],                \
                              constant ulong &rows [[buffer(2)]],                      \
                              constant ulong &cols [[buffer(3)]],                      \
                              constant ulong &topk [[buffer(4)]],                      \
                              constant float &topp [[buffer(5)]],                      \
                              constant float &temp [[buffer(6)]],                      \
                              constant ulong &seed [[buffer(7)]],                      \
                              GPURT_THREAD_ARGS) {                                     \
    threadgroup float sh[1024];                                                        \
    threadgroup ulong shk[1024];                                                       \
    gpurt_pick<T>(idx, x, rows, cols, true, topk, topp, temp, seed, sh, shk, tgp.x, tid.x, tpt.x); \
  }

template <typename T>
static inline void gpurt_rope(device typename T::storage *x, device const int *pos, float theta,
                              ulong tokens, ulong heads, ulong hd, bool llama, uint3 tgp, uint3 tpt,
                              uint3 tid) {
  ulong half_ = hd / 2, per = heads * half_, n = tokens * per;
  if (per == 0) return;
  GPURT_INDEX
  ulong t = i / per, rem = i % per, h = rem / half_, j = rem % half_;
  ulong base = (t * heads + h) * hd;
  ulong i0 = llama ? base + 2 * j : base + j;
  ulong i1 = llama ? base + 2 * j + 1 : base + j + half_;
  float ex = float(2 * j) / float(hd);
  float inv = 1.0f / precise::pow(theta, ex);
  float a = float(pos[t]) * inv;
  float cs = precise::cos(a), sn = precise::sin(a);
  float u = T::load(x[i0]), v = T::load(x[i1]);
  x[i0] = T::store(u * cs - v * sn);
  x[i1] = T::store(u * sn + v * cs);
}

GPURT_DEFINE_ROWS(f32, f32_t)
GPURT_DEFINE_ROWS(f16, f16_t)
GPURT_DEFINE_ROWS(bf16, bf16_t)

// ---- after 1.8 (gpurt.h: a plugin may lack them) --------------------------
// add_rmsnorm_T: the residual add fused into the next RMSNorm, one
// threadgroup per row, in place on both: r = x + r rounded to T, then x =
// rmsnorm_T of that rounded r (each thread rereads only the columns it
// wrote, so no barrier is needed between the two passes but the sum's).
// rope_neox_freqs_T: rope_neox_T with the frequencies of an f32 inv_freq
// table and Hugging Face's arithmetic in T (cos and sin in float: Metal has
// no double, so they may miss the f32 rounding by a unit, as gpurt.h
// allows); each product and sum rounded to T.
template <typename T>
static inline float gpurt_round(float v) { return T::load(T::store(v)); }

#define GPURT_DEFINE_FUSED(SUFFIX, T)                                                  \
  kernel void add_rmsnorm_##SUFFIX(device T::storage *x [[buffer(0)]],                 \
                                   device T::storage *r [[buffer(1)]],                 \
                                   device const T::storage *w [[buffer(2)]],           \
                                   constant float &eps [[buffer(3)]],                  \
                                   constant ulong &rows [[buffer(4)]],                 \
                                   constant ulong &cols [[buffer(5)]],                 \
                                   GPURT_THREAD_ARGS) {                                \
    threadgroup float sh[1024];                                                        \
    if (ulong(tgp.x) >= rows) return;                                                  \
    device T::storage *xr = x + ulong(tgp.x) * cols;                                   \
    device T::storage *rr = r + ulong(tgp.x) * cols;                                   \
    float ss = 0.0f;                                                                   \
    for (ulong c = tid.x; c < cols; c += tpt.x) {                                      \
      T::storage sum = T::store(T::load(xr[c]) + T::load(rr[c]));                      \
      rr[c] = sum;                                                                     \
      float v = T::load(sum);                                                          \
      ss += v * v;                                                                     \
    }                                                                                  \
    ss = gpurt_tg_sum(ss, sh, tid.x, tpt.x);                                           \
    float s = 1.0f / precise::sqrt(ss / float(cols) + eps);                            \
    for (ulong c = tid.x; c < cols; c += tpt.x)                                        \
      xr[c] = T::store((T::load(rr[c]) * s) * T::load(w[c]));                          \
  }                                                                                    \
  kernel void rope_neox_freqs_##SUFFIX(device T::storage *x [[buffer(0)]],             \
                                       device const int *pos [[buffer(1)]],            \
                                       device const float *inv_freq [[buffer(2)]],     \
                                       constant ulong &tokens [[buffer(3)]],           \
                                       constant ulong &heads [[buffer(4)]],            \
                                       constant ulong &hd [[buffer(5)]],               \
                                       GPURT_THREAD_ARGS) {                            \
    ulong half_ = hd / 2, per = heads * half_, n = tokens * per;                       \
    if (per == 0) return;                                                              \
    GPURT_INDEX                                                                        \
    ulong t = i / per, rem = i % per, h = rem / half_, j = rem % half_;                \
    ulong i0 = (t * heads + h) * hd + j, i1 = i0 + half_;                              \
    float a = float(pos[t]) * inv_freq[j];                                             \
    float cs = gpurt_round<T>(precise::cos(a)), sn = gpurt_round<T>(precise::sin(a));  \
    float u = T::load(x[i0]), v = T::load(x[i1]);                                      \
    x[i0] = T::store(gpurt_round<T>(u * cs) - gpurt_round<T>(v * sn));                 \
    x[i1] = T::store(gpurt_round<T>(v * cs) + gpurt_round<T>(u * sn));                 \
  }

GPURT_DEFINE_FUSED(f32, f32_t)
GPURT_DEFINE_FUSED(f16, f16_t)
GPURT_DEFINE_FUSED(bf16, bf16_t)

// ---- sample_rows_T (gpurt.h, 1.8): per-request sampling -----------------
// One threadgroup per row (row tgp.x, its threads striding over the row),
// the semantics of csrc/gp_sample_rows.c (the float64 reference) and of the
// CUDA kernel (plugins/cuda/src/cuda_sample.cu), in f32: the penalties in
// place on x (rounded to T), the order of argmax_T (the 64-bit rank key:
// value descending, then the lower index), top-k, then top-p over the top-k
// set, then min-p, a Philox4x32-10 draw keyed by the request's (seed,
// offset) only (never by its row in the batch), and the logprob of the
// chosen token over the whole penalised, tempered row. A row whose maximum
// is not finite gives the argmax and a NaN logprob. params holds per-row
// arrays at any alignment, so it is read byte by byte.

static inline uint gpurt_sr_u32(device const uchar *p) {
  return uint(p[0]) | (uint(p[1]) << 8) | (uint(p[2]) << 16) | (uint(p[3]) << 24);
}
static inline ulong gpurt_sr_u64(device const uchar *p) {
  return ulong(gpurt_sr_u32(p)) | (ulong(gpurt_sr_u32(p + 4)) << 32);
}
static inline float gpurt_sr_f32(device const uchar *p) { return as_type<float>(gpurt_sr_u32(p)); }
static inline void gpurt_sr_put_u32(device uchar *p, uint v) {
  p[0] = uchar(v);
  p[1] = uchar(v >> 8);
  p[2] = uchar(v >> 16);
  p[3] = uchar(v >> 24);
}

// Philox4x32-10: the first output word for key seed, counter (offset, 0),
// as csrc's gp_philox_first.
static inline uint gpurt_philox_first(ulong seed, ulong offset) {
  uint k0 = uint(seed), k1 = uint(seed >> 32);
  uint c0 = uint(offset), c1 = uint(offset >> 32), c2 = 0u, c3 = 0u;
  for (int i = 0; i < 10; i++) {
    if (i > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint hi0 = mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint hi1 = mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return c0;
}

struct gpurt_sr_row {
  float mx, t, minp; // the row's (finite) maximum, the temperature, min-p's floor weight
  ulong best, floor; // the argmax's key; keys below floor are cut (top-k / top-p)
};

// exp((x - max) / t); NaN (a NaN logit) is 0.
static inline float gpurt_sr_w(float v, thread const gpurt_sr_row &R) {
  float w = precise::exp((v - R.mx) / R.t);
  return w == w ? w : 0.0f;
}

// The kept mass (weights, or the count when count is set) of the keys >= thr.
template <typename T>
static inline float gpurt_sr_mass(device const typename T::storage *xr, ulong cols, thread const gpurt_sr_row &R,
                                  ulong thr, bool count, threadgroup float *sh, uint t, uint n) {
  float m = 0.0f;
  for (ulong c = t; c < cols; c += n) {
    float v = T::load(xr[c]);
    ulong k = gpurt_rank_key(v, c);
    if (k < thr || k < R.floor) continue;
    float w = gpurt_sr_w(v, R);
    if (w >= R.minp || k == R.best) m += count ? 1.0f : w;
  }
  return gpurt_tg_sum(m, sh, t, n);
}

// The largest key t whose kept mass is >= want (> want when strict).
template <typename T>
static inline ulong gpurt_sr_search(device const typename T::storage *xr, ulong cols, thread const gpurt_sr_row &R,
                                    float want, bool count, bool strict, threadgroup float *sh, uint t, uint n) {
  ulong r = 0;
  for (int b = 63; b >= 0; b--) {
    ulong cand = r | (1ul << b);
    float m = gpurt_sr_mass<T>(xr, cols, R, cand, count, sh, t, n);
    if (strict ? m > want : m >= want) r = cand;
  }
  return r;
}

template <typename T>
static inline void gpurt_sample_rows(device uchar *out, device typename T::storage *x, device const uchar *p,
                                     ulong rows, ulong cols, ulong hist, threadgroup float *sh,
                                     threadgroup ulong *shk, uint row, uint t, uint n) {
  ulong r = ulong(row);
  if (r >= rows) return; // the whole threadgroup: no barrier is skipped by part of it
  device typename T::storage *xr = x + r * cols;
  float temp = gpurt_sr_f32(p + 16 * rows + 4 * r);
  int topk = int(gpurt_sr_u32(p + 20 * rows + 4 * r));
  float topp = gpurt_sr_f32(p + 24 * rows + 4 * r);
  float minp = gpurt_sr_f32(p + 28 * rows + 4 * r);
  float rep = gpurt_sr_f32(p + 32 * rows + 4 * r);
  float pres = gpurt_sr_f32(p + 36 * rows + 4 * r);
  // 1. the penalties, in place, each distinct history id in [0, cols) once
  bool use_rep = isfinite(rep) && rep > 0.0f && rep != 1.0f;
  bool use_pres = isfinite(pres) && pres != 0.0f;
  if (use_rep || use_pres) {
    device const uchar *h = p + 40 * rows + 4 * r * hist;
    for (ulong j = t; j < hist; j += n) {
      int id = int(gpurt_sr_u32(h + 4 * j));
      if (id < 0 || ulong(id) >= cols) continue;
      bool seen = false;
      for (ulong i = 0; i < j && !seen; i++) seen = int(gpurt_sr_u32(h + 4 * i)) == id;
      if (seen) continue;
      float v = T::load(xr[id]);
      if (use_rep) v = v > 0.0f ? v / rep : v * rep;
      if (use_pres) v = v - pres;
      xr[id] = T::store(v);
    }
    // the penalised row is what every thread of the row reads next
    threadgroup_barrier(mem_flags::mem_device);
  }
  // 2. the order's maximum
  ulong best = 0;
  for (ulong c = t; c < cols; c += n) {
    ulong k = gpurt_rank_key(T::load(xr[c]), c);
    if (k > best) best = k;
  }
  best = gpurt_tg_max(best, shk, t, n);
  uint bi = 0xffffffffu - uint(best);
  float mx = T::load(xr[bi]);
  float lp = as_type<float>(0x7fc00000u); // NaN: no finite maximum
  if (isfinite(mx)) {
    bool greedy = !(temp > 0.0f);
    gpurt_sr_row R = {mx, greedy ? 1.0f : temp, 0.0f, best, 0};
    float zall = gpurt_sr_mass<T>(xr, cols, R, 0, false, sh, t, n);
    // 3. the kept set and the draw
    if (!greedy && topk != 1) {
      if (topk > 0 && ulong(topk) < cols) R.floor = gpurt_sr_search<T>(xr, cols, R, float(topk), true, false, sh, t, n);
      if (topp < 1.0f) {
        if (topp > 0.0f) {
          float z = gpurt_sr_mass<T>(xr, cols, R, 0, false, sh, t, n);
          R.floor = gpurt_sr_search<T>(xr, cols, R, topp * z, false, false, sh, t, n);
        } else {
          R.floor = best;
        }
      }
      if (minp > 0.0f) R.minp = minp;
      float z = gpurt_sr_mass<T>(xr, cols, R, 0, false, sh, t, n);
      ulong seed = gpurt_sr_u64(p + 8 * r), off = gpurt_sr_u64(p + 8 * rows + 8 * r);
      float u = float(gpurt_philox_first(seed, off) >> 8) * (1.0f / 16777216.0f);
      ulong tk = gpurt_sr_search<T>(xr, cols, R, u * z, false, true, sh, t, n);
      bi = 0xffffffffu - uint(tk);
    }
    // 4. the logprob after the penalties and the temperature
    lp = (T::load(xr[bi]) - mx) / R.t - precise::log(zall);
  }
  if (t == 0) {
    gpurt_sr_put_u32(out + 4 * r, bi);
    gpurt_sr_put_u32(out + 4 * rows + 4 * r, as_type<uint>(lp));
  }
}

#define GPURT_DEFINE_SAMPLE_ROWS(SUFFIX, T)                                                   \
  kernel void sample_rows_##SUFFIX(device uchar *out [[buffer(0)]],                          \
                                   device T::storage *x [[buffer(1)]],                       \
                                   device const uchar *params [[buffer(2)]],                 \
                                   constant ulong &rows [[buffer(3)]],                       \
                                   constant ulong &cols [[buffer(4)]],                       \
                                   constant ulong &hist [[buffer(5)]],                       \
                                   GPURT_THREAD_ARGS) {                                      \
    threadgroup float sh[1024];                                                               \
    threadgroup ulong shk[1024];                                                              \
    gpurt_sample_rows<T>(out, x, params, rows, cols, hist, sh, shk, tgp.x, tid.x, tpt.x);      \
  }

GPURT_DEFINE_SAMPLE_ROWS(f32, f32_t)
GPURT_DEFINE_SAMPLE_ROWS(f16, f16_t)
GPURT_DEFINE_SAMPLE_ROWS(bf16, bf16_t)

// ---- sleep_ns ------------------------------------------------------------

// MSL has no clock, so sleep_ns is a bounded spin: ns * iters_per_ns
// iterations of a dependent integer chain. iters_per_ns is a hidden second
// argument the plugin binds itself (calibrated once per device against the
// command buffer's GPU time); the public signature stays sleep_ns(U64 ns).
// The spin is capped at GPURT_SLEEP_MAX_ITERS so a huge ns cannot trip the
// GPU watchdog.
#define GPURT_SLEEP_MAX_ITERS 4000000000ul

kernel void sleep_ns(constant ulong &ns [[buffer(0)]],
                     constant float &iters_per_ns [[buffer(1)]],
                     GPURT_THREAD_ARGS) {
  threadgroup atomic_uint sink;
  float want = float(ns) * iters_per_ns;
  ulong iters = want >= float(GPURT_SLEEP_MAX_ITERS) ? GPURT_SLEEP_MAX_ITERS
                                                     : ulong(want);
  uint acc = tid.x + 1u;
  for (ulong it = 0; it < iters; it++) {
    acc = acc * 1664525u + 1013904223u; // dependent: cannot be vectorised away
  }
  // The result is consumed by an atomic, so the loop is not dead code.
  if (acc == 0u) {
    atomic_fetch_add_explicit(&sink, 1u, memory_order_relaxed);
  }
}

// ---- internal: copies and memsets -----------------------------------------

kernel void gpurt_copy_u8(device uchar *dst [[buffer(0)]],
                          device const uchar *src [[buffer(1)]],
                          constant ulong &n [[buffer(2)]],
                          GPURT_THREAD_ARGS) {
  GPURT_INDEX
  dst[i] = src[i];
}

#define GPURT_DEFINE_MEMSET(NAME, T)                                         \
  kernel void NAME(device T *p [[buffer(0)]],                                \
                   constant T &value [[buffer(1)]],                          \
                   constant ulong &n [[buffer(2)]],                          \
                   GPURT_THREAD_ARGS) {                                      \
    GPURT_INDEX                                                              \
    p[i] = value;                                                            \
  }

GPURT_DEFINE_MEMSET(gpurt_memset_u8, uchar)
GPURT_DEFINE_MEMSET(gpurt_memset_u16, ushort)
GPURT_DEFINE_MEMSET(gpurt_memset_u32, uint)

// ---- internal: GEMM helpers --------------------------------------------------

// Element types as in gpurt.h (GPURT_DTYPE_*).
#define DT_F32 1u
#define DT_F16 2u
#define DT_BF16 3u

static inline float load_any(device const uchar *base, uint dtype, ulong i) {
  switch (dtype) {
  case DT_F16:
    return float(((device const half *)base)[i]);
  case DT_BF16:
    return bf16_to_f32(((device const ushort *)base)[i]);
  default:
    return ((device const float *)base)[i];
  }
}

static inline void store_any(device uchar *base, uint dtype, ulong i, float v) {
  switch (dtype) {
  case DT_F16:
    ((device half *)base)[i] = half(v);
    break;
  case DT_BF16:
    ((device ushort *)base)[i] = f32_to_bf16(v);
    break;
  default:
    ((device float *)base)[i] = v;
    break;
  }
}

#define EPI_NONE 0u
#define EPI_BIAS 1u
#define EPI_RELU 2u
#define EPI_BIAS_RELU 3u
#define EPI_GELU 4u
#define EPI_BIAS_GELU 5u

static inline float gelu_tanh(float x) {
  const float k0 = 0.7978845608028654f; // sqrt(2/pi)
  const float k1 = 0.044715f;
  return 0.5f * x * (1.0f + precise::tanh(k0 * (x + k1 * x * x * x)));
}

static inline float apply_epilogue(uint epi, float v, device const uchar *bias,
                                   uint bias_type, ulong row) {
  if (epi == EPI_BIAS || epi == EPI_BIAS_RELU || epi == EPI_BIAS_GELU) {
    v += load_any(bias, bias_type, row);
  }
  if (epi == EPI_RELU || epi == EPI_BIAS_RELU) {
    v = max(v, 0.0f);
  } else if (epi == EPI_GELU || epi == EPI_BIAS_GELU) {
    v = gelu_tanh(v);
  }
  return v;
}

// The layout of this struct is mirrored by gm_gemm_params in
// plugins/metal/src/metal_internal.h: 8-byte fields first, then 4-byte ones.
struct gemm_params {
  ulong m, n, k;
  ulong lda, ldb, ldc, ldd;
  long stride_a, stride_b, stride_c, stride_d;
  float alpha, beta;
  uint a_type, b_type, c_type, d_type, bias_type;
  uint trans_a, trans_b;
  uint epilogue;
  uint has_c;
  uint pad;
};

// D = alpha * op(A) op(B) + beta * C, then the epilogue; column-major; one
// thread per element of D: x = row, y = column, z = batch. f32 accumulation.
// Used where MPSMatrixMultiplication cannot run the descriptor (bf16,
// mixed types).
kernel void gpurt_gemm_generic(device const uchar *a [[buffer(0)]],
                               device const uchar *b [[buffer(1)]],
                               device const uchar *c [[buffer(2)]],
                               device uchar *d [[buffer(3)]],
                               device const uchar *bias [[buffer(4)]],
                               constant gemm_params &p [[buffer(5)]],
                               uint3 gid [[thread_position_in_grid]]) {
  ulong row = gid.x, col = gid.y, bat = gid.z;
  if (row >= p.m || col >= p.n) return;
  long oa = long(bat) * p.stride_a, ob = long(bat) * p.stride_b;
  float acc = 0.0f;
  for (ulong kk = 0; kk < p.k; kk++) {
    ulong ia = p.trans_a ? (row * p.lda + kk) : (kk * p.lda + row);
    ulong ib = p.trans_b ? (kk * p.ldb + col) : (col * p.ldb + kk);
    acc = fma(load_any(a, p.a_type, ulong(oa) + ia),
              load_any(b, p.b_type, ulong(ob) + ib), acc);
  }
  float v = p.alpha * acc;
  if (p.has_c != 0u && p.beta != 0.0f) {
    ulong ic = ulong(long(bat) * p.stride_c) + col * p.ldc + row;
    v += p.beta * load_any(c, p.c_type, ic);
  }
  v = apply_epilogue(p.epilogue, v, bias, p.bias_type, row);
  store_any(d, p.d_type, ulong(long(bat) * p.stride_d) + col * p.ldd + row, v);
}

// D[b][j][i] = C[b][j][i] (converted from c_type to d_type), for the MPS
// path where C and D are different memory (MPS reads C from D).
kernel void gpurt_gemm_copy_c(device const uchar *c [[buffer(2)]],
                              device uchar *d [[buffer(3)]],
                              constant gemm_params &p [[buffer(5)]],
                              uint3 gid [[thread_position_in_grid]]) {
  ulong row = gid.x, col = gid.y, bat = gid.z;
  if (row >= p.m || col >= p.n) return;
  float v = p.has_c != 0u
                ? load_any(c, p.c_type, ulong(long(bat) * p.stride_c) +
                                            col * p.ldc + row)
                : 0.0f;
  store_any(d, p.d_type, ulong(long(bat) * p.stride_d) + col * p.ldd + row, v);
}

// The epilogue after an MPS GEMM: D = epilogue(D).
kernel void gpurt_gemm_epilogue(device uchar *d [[buffer(3)]],
                                device const uchar *bias [[buffer(4)]],
                                constant gemm_params &p [[buffer(5)]],
                                uint3 gid [[thread_position_in_grid]]) {
  ulong row = gid.x, col = gid.y, bat = gid.z;
  if (row >= p.m || col >= p.n) return;
  ulong id = ulong(long(bat) * p.stride_d) + col * p.ldd + row;
  float v = load_any(d, p.d_type, id);
  store_any(d, p.d_type, id, apply_epilogue(p.epilogue, v, bias, p.bias_type, row));
}
