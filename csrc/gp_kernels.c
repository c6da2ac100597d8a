/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in kernels of gpurt.h ("Built-in kernels"), executed on the CPU
 * for the mock (their table is gp_builtin.c), thread by thread:
 * i = blockIdx.x * blockDim.x + threadIdx.x, a thread with i >= n does
 * nothing, arithmetic in f32 rounded to T (nearest even). */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE /* clock_gettime, nanosleep, posix_memalign */
#endif
#include <math.h>
#include <string.h>
#include <time.h>

#include "gp_common.h"

static float gp_bits_to_f32(uint64_t bits) {
  uint32_t u = (uint32_t)bits;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Do two byte ranges overlap? */
static int gp_overlap(const void *a, const void *b, uint64_t bytes) {
  const char *x = a, *y = b;
  return x < y + bytes && y < x + bytes;
}

/* An order-preserving key of a float: larger floats give larger keys,
 * -0 counts as +0, and NaN is below everything (gpurt.h: argmax_T). */
static uint32_t gp_order_key(float v) {
  if (v != v) return 0;
  if (v == 0.0f) v = 0.0f;
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The composite key of element c of a row: value first, then the lower
 * index; unique within a row. */
static uint64_t gp_rank_key(int32_t dt, const void *row, uint64_t c) {
  return ((uint64_t)gp_order_key(gp_load(dt, row, c)) << 32) | (uint64_t)(0xffffffffu - (uint32_t)c);
}

/* sample_T's weight of element c: exp((x - max) / temperature), f32; a
 * weight that is NaN (a NaN logit; -Inf at an infinite temperature) is 0
 * (gpurt.h: sample_T's non-finite logits). */
static float gp_sample_w(int32_t dt, const void *row, uint64_t c, float mx, float temp) {
  float w = expf((gp_load(dt, row, c) - mx) / temp);
  return w == w ? w : 0.0f;
}

/* Sum of the weights of the elements whose key is at least t (and at least
 * floor: the kept set), or their count when temp is 0. */
static double gp_sample_mass(int32_t dt, const void *row, uint64_t cols, uint64_t t, uint64_t floor,
                             float mx, float temp) {
  double s = 0;
  for (uint64_t c = 0; c < cols; c++) {
    uint64_t key = gp_rank_key(dt, row, c);
    if (key >= t && key >= floor) s += temp == 0.0f ? 1.0 : (double)gp_sample_w(dt, row, c, mx, temp);
  }
  return s;
}

/* The largest key t with mass(t) >= want (strict: > want), bit by bit. */
static uint64_t gp_sample_search(int32_t dt, const void *row, uint64_t cols, uint64_t floor, float mx,
                                 float temp, double want, int strict) {
  uint64_t t = 0;
  for (int b = 63; b >= 0; b--) {
    uint64_t cand = t | (1ull << b);
    double m = gp_sample_mass(dt, row, cols, cand, floor, mx, temp);
    if (strict ? m > want : m >= want) t = cand;
  }
  return t;
}

static void gp_store_i32(void *base, uint64_t i, int32_t v) { memcpy((char *)base + 4 * i, &v, 4); }

float gp_rms_scale(int32_t dt, const void *x, uint64_t cols, float eps) {
  float ss = 0;
  for (uint64_t c = 0; c < cols; c++) {
    float v = gp_load(dt, x, c);
    ss += v * v;
  }
  return 1.0f / sqrtf(ss / (float)cols + eps);
}

float gp_rms_elem(int32_t dt, const void *x, const void *w, uint64_t c, float scale) {
  float v = gp_load(dt, x, c) * scale;
  return v * gp_load(dt, w, c);
}

float gp_silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

void gp_rope_freqs_pair(int32_t dt, float *u, float *v, int32_t pos, float f) {
  double a = (double)((float)pos * f);
  float cs = gp_round_to(dt, (float)cos(a)), sn = gp_round_to(dt, (float)sin(a));
  float x = *u, y = *v;
  *u = gp_round_to(dt, gp_round_to(dt, x * cs) - gp_round_to(dt, y * sn));
  *v = gp_round_to(dt, gp_round_to(dt, y * cs) + gp_round_to(dt, x * sn));
}

/* One row of rmsnorm: y[c] = x[c] / sqrt(mean(x^2) + eps) * w[c], rounded to dt. */
static void gp_rmsnorm_row(int32_t dt, const void *x, void *y, const void *w, uint64_t cols, float eps) {
  const float scale = gp_rms_scale(dt, x, cols, eps);
  for (uint64_t c = 0; c < cols; c++) gp_store(dt, y, c, gp_rms_elem(dt, x, w, c, scale));
}

float gp_round_to(int32_t dt, float v) {
  unsigned char b[4];
  gp_store(dt, b, 0, v);
  return gp_load(dt, b, 0);
}

/* The row kernels (rmsnorm_T and after in gpurt.h), one-dimensional. */
static void gp_launch_rows(const gp_launch_exec *e) {
  const gp_builtin_kernel *k = e->k;
  int32_t dt = k->dtype;
  size_t es = gp_dtype_size(dt);
  uint64_t threads = (uint64_t)e->grid[0] * e->block[0];
  switch (k->op) {
    case GP_BK_RMSNORM: {
      float eps = gp_bits_to_f32(e->scalar[3]);
      uint64_t rows = e->scalar[4] < e->grid[0] ? e->scalar[4] : e->grid[0], cols = e->scalar[5];
      for (uint64_t r = 0; r < rows; r++)
        gp_rmsnorm_row(dt, (const char *)e->bufs[1] + r * cols * es, (char *)e->bufs[0] + r * cols * es, e->bufs[2],
                       cols, eps);
      break;
    }
    case GP_BK_ADD_RMSNORM: { /* r = x + r rounded to T, then x = rmsnorm_T of that r */
      float eps = gp_bits_to_f32(e->scalar[3]);
      uint64_t rows = e->scalar[4] < e->grid[0] ? e->scalar[4] : e->grid[0], cols = e->scalar[5];
      for (uint64_t r = 0; r < rows; r++) {
        char *x = (char *)e->bufs[0] + r * cols * es;
        char *res = (char *)e->bufs[1] + r * cols * es;
        for (uint64_t c = 0; c < cols; c++) gp_store(dt, res, c, gp_load(dt, x, c) + gp_load(dt, res, c));
        gp_rmsnorm_row(dt, res, x, e->bufs[2], cols, eps);
      }
      break;
    }
    case GP_BK_ROPE_LLAMA:
    case GP_BK_ROPE_NEOX: {
      float theta = gp_bits_to_f32(e->scalar[2]);
      uint64_t heads = e->scalar[4], hd = e->scalar[5], half = hd / 2, per = heads * half;
      uint64_t pairs = e->scalar[3] * per, n = pairs < threads ? pairs : threads;
      const int32_t *pos = e->bufs[1];
      for (uint64_t i = 0; i < n; i++) {
        uint64_t t = i / per, rem = i % per, h = rem / half, j = rem % half;
        uint64_t base = (t * heads + h) * hd;
        uint64_t i0 = k->op == GP_BK_ROPE_LLAMA ? base + 2 * j : base + j;
        uint64_t i1 = k->op == GP_BK_ROPE_LLAMA ? base + 2 * j + 1 : base + j + half;
        float ex = (float)(2 * j) / (float)hd;
        float inv = 1.0f / powf(theta, ex);
        int32_t p;
        memcpy(&p, (const char *)pos + 4 * t, 4);
        float ang = (float)p * inv;
        float cs = cosf(ang), sn = sinf(ang);
        float x0 = gp_load(dt, e->bufs[0], i0), x1 = gp_load(dt, e->bufs[0], i1);
        float a = x0 * cs, b = x1 * sn, c = x0 * sn, d = x1 * cs;
        gp_store(dt, e->bufs[0], i0, a - b);
        gp_store(dt, e->bufs[0], i1, c + d);
      }
      break;
    }
    case GP_BK_ROPE_FREQS: { /* half-split pairs, Hugging Face's arithmetic in T */
      uint64_t heads = e->scalar[4], hd = e->scalar[5], half = hd / 2, per = heads * half;
      uint64_t pairs = e->scalar[3] * per, n = pairs < threads ? pairs : threads;
      const int32_t *pos = e->bufs[1];
      for (uint64_t i = 0; i < n; i++) {
        uint64_t t = i / per, rem = i % per, h = rem / half, j = rem % half;
        uint64_t i0 = (t * heads + h) * hd + j, i1 = i0 + half;
        int32_t p;
        float f;
        memcpy(&p, (const char *)pos + 4 * t, 4);
        memcpy(&f, (const char *)e->bufs[2] + 4 * j, 4);
        float u = gp_load(dt, e->bufs[0], i0), v = gp_load(dt, e->bufs[0], i1);
        gp_rope_freqs_pair(dt, &u, &v, p, f);
        gp_store(dt, e->bufs[0], i0, u);
        gp_store(dt, e->bufs[0], i1, v);
      }
      break;
    }
    case GP_BK_EMBED: {
      uint64_t cols = e->scalar[4], vocab = e->scalar[5];
      uint64_t all = e->scalar[3] * cols, n = all < threads ? all : threads;
      for (uint64_t i = 0; i < n; i++) {
        uint64_t t = i / cols, c = i % cols;
        int32_t id;
        memcpy(&id, (const char *)e->bufs[2] + 4 * t, 4);
        if (id < 0 || (uint64_t)id >= vocab)
          memset((char *)e->bufs[0] + i * es, 0, es);
        else
          memcpy((char *)e->bufs[0] + i * es, (const char *)e->bufs[1] + ((uint64_t)id * cols + c) * es, es);
      }
      break;
    }
    case GP_BK_ARGMAX:
    case GP_BK_SAMPLE: {
      uint64_t rows = e->scalar[2] < e->grid[0] ? e->scalar[2] : e->grid[0], cols = e->scalar[3];
      for (uint64_t r = 0; r < rows; r++) {
        const char *x = (const char *)e->bufs[1] + r * cols * es;
        uint64_t best = 0, bk = gp_rank_key(dt, x, 0);
        for (uint64_t c = 1; c < cols; c++) {
          uint64_t key = gp_rank_key(dt, x, c);
          if (key > bk) bk = key, best = c;
        }
        if (k->op == GP_BK_SAMPLE) {
          uint64_t topk = e->scalar[4];
          float topp = gp_bits_to_f32(e->scalar[5]), temp = gp_bits_to_f32(e->scalar[6]);
          float mx = gp_load(dt, x, best);
          /* A non-finite maximum (+Inf, or a row of -Inf and NaN only)
           * leaves no finite weights: the argmax (gpurt.h). */
          if (topk != 1 && temp > 0.0f && isfinite(mx)) {
            if (topk == 0 || topk > cols) topk = cols;
            /* the k-th key: the kept set is every key >= floor */
            uint64_t floor = gp_sample_search(dt, x, cols, 0, mx, 0.0f, (double)topk, 0);
            if (topp < 1.0f) { /* the smallest prefix holding top_p of the mass */
              double z = gp_sample_mass(dt, x, cols, 0, floor, mx, temp);
              double want = topp > 0.0f ? (double)topp * z : 0.0;
              floor = gp_sample_search(dt, x, cols, floor, mx, temp, want, 0);
              if (topp <= 0.0f) floor = bk;
            }
            double z = gp_sample_mass(dt, x, cols, 0, floor, mx, temp);
            uint64_t h = gp_splitmix64(e->scalar[7] + (r + 1) * 0x9E3779B97F4A7C15ull);
            double u = (double)(h >> 40) * (1.0 / 16777216.0);
            uint64_t t = gp_sample_search(dt, x, cols, floor, mx, temp, u * z, 1);
            best = 0xffffffffu - (uint32_t)t;
          }
        }
        gp_store_i32(e->bufs[0], r, (int32_t)best);
      }
      break;
    }
    case GP_BK_SAMPLE_ROWS:
      gp_sample_rows_run(e);
      break;
    default:
      break;
  }
}

void gp_launch_run(const gp_launch_exec *e) {
  const gp_builtin_kernel *k = e->k;
  if (k->op >= GP_BK_RMSNORM) {
    gp_launch_rows(e);
    return;
  }
  if (k->op == GP_BK_SLEEP) {
    uint64_t ns = e->scalar[0];
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return;
  }
  uint64_t n = gp_launch_touched(e);
  if (n == 0) return;
  /* Threads that share an x index (grid/block y and z beyond 1) each apply
   * the op to the same element, as on a GPU; it only matters when the op
   * reads what it writes. */
  uint64_t reps = (uint64_t)e->grid[1] * e->grid[2] * e->block[1] * e->block[2];
  size_t es = gp_dtype_size(k->dtype);
  int reads_own_output = k->op == GP_BK_AXPY;
  for (uint32_t b = 1; b < k->num_buffers; b++)
    if (gp_overlap(e->bufs[0], e->bufs[b], n * es)) reads_own_output = 1;
  if (!reads_own_output) reps = 1;
  int32_t dt = k->dtype;
  void *y = e->bufs[0];
  for (uint64_t r = 0; r < reps; r++) {
    switch (k->op) {
      case GP_BK_FILL: {
        uint64_t v = e->scalar[1];
        if (es == 4) {
          uint32_t u = (uint32_t)v;
          for (uint64_t i = 0; i < n; i++) memcpy((char *)y + i * 4, &u, 4);
        } else {
          uint16_t u = (uint16_t)v;
          for (uint64_t i = 0; i < n; i++) memcpy((char *)y + i * 2, &u, 2);
        }
        break;
      }
      case GP_BK_SCALE: {
        float alpha = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++) {
          float p = alpha * gp_load(dt, e->bufs[1], i);
          gp_store(dt, y, i, p);
        }
        break;
      }
      case GP_BK_AXPY: {
        float alpha = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++) {
          float p = alpha * gp_load(dt, e->bufs[1], i);
          float s = p + gp_load(dt, y, i);
          gp_store(dt, y, i, s);
        }
        break;
      }
      case GP_BK_ADD:
        for (uint64_t i = 0; i < n; i++) {
          float s = gp_load(dt, e->bufs[1], i) + gp_load(dt, e->bufs[2], i);
          gp_store(dt, y, i, s);
        }
        break;
      case GP_BK_MUL:
        for (uint64_t i = 0; i < n; i++) {
          float s = gp_load(dt, e->bufs[1], i) * gp_load(dt, e->bufs[2], i);
          gp_store(dt, y, i, s);
        }
        break;
      case GP_BK_SILU_MUL:
        for (uint64_t i = 0; i < n; i++)
          gp_store(dt, y, i, gp_silu_mul(gp_load(dt, e->bufs[1], i), gp_load(dt, e->bufs[2], i)));
        break;
      case GP_BK_SOFTCAP: {
        float cap = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++)
          gp_store(dt, y, i, cap * tanhf(gp_load(dt, e->bufs[1], i) / cap));
        break;
      }
      default:
        break;
    }
  }
}
