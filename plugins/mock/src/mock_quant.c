/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mock's 1.4 ops, the references the GPU backends are compared with:
 *
 *  quant_matmul   y[t][i] = sum_j x[t][j] * (s[i][g] * q[i][j] + b[i][g]),
 *                 g = j / group_size (MLX's affine format, bits 8)
 *  grouped_gemm   D_g = A_g * B_g^T per group; fp8 with 1x128 (A) and
 *                 128x128 (B) block scales
 *
 * Every product and sum is in double (inputs widen exactly) and the result
 * is rounded once to the output type (round to nearest even). Work is split
 * over output rows between the runtime's reference threads.
 */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE
#endif
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gp_common.h"
#include "gp_quant.h"
#include "mock_internal.h"

/* Widens an f16/bf16 element. */
static double ld_half(int32_t t, const void *base, uint64_t i) {
  uint16_t h;
  memcpy(&h, (const unsigned char *)base + 2 * i, 2);
  return t == GPURT_DTYPE_F16 ? (double)gp_f16_to_f32(h) : (double)gp_bf16_to_f32(h);
}

/* Rounds v once to f16/bf16: first to f32 by round-to-odd (truncate, then
 * set the last bit when inexact), which keeps the second rounding (to 16
 * bits, nearest even) correct. */
static uint16_t round_half(int32_t t, double v) {
  float f = (float)v;
  if (isfinite(f) && (double)f != v) {
    if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= 1;
    memcpy(&f, &u, 4);
  }
  return t == GPURT_DTYPE_F16 ? gp_f32_to_f16(f) : gp_f32_to_bf16(f);
}

static void st_half(int32_t t, void *base, uint64_t i, double v) {
  uint16_t h = round_half(t, v);
  memcpy((unsigned char *)base + 2 * i, &h, 2);
}

static int op_threads(const mock_rt *rt) { return rt->gemm_threads < 1 ? 1 : rt->gemm_threads; }

/* ---- a parallel loop over rows ------------------------------------------- */

typedef struct par_job {
  void (*rows)(void *ctx, uint64_t from, uint64_t to);
  void *ctx;
  uint64_t from, to;
} par_job;

static void *par_main(void *p) {
  par_job *j = p;
  j->rows(j->ctx, j->from, j->to);
  return NULL;
}

/* Runs rows(ctx, ...) over [0, n) on up to `threads` threads (the calling
 * worker is one of them); falls back to one thread when a thread cannot
 * start. */
static void par_rows(int threads, uint64_t n, void (*rows)(void *, uint64_t, uint64_t), void *ctx) {
  enum { MAXT = 64 };
  if (threads > MAXT) threads = MAXT;
  if ((uint64_t)threads > n) threads = (int)(n ? n : 1);
  if (threads <= 1) {
    rows(ctx, 0, n);
    return;
  }
  par_job jobs[MAXT];
  pthread_t tids[MAXT];
  int started[MAXT] = {0};
  for (int i = 0; i < threads; i++)
    jobs[i] = (par_job){rows, ctx, n * (uint64_t)i / (uint64_t)threads, n * (uint64_t)(i + 1) / (uint64_t)threads};
  for (int i = 1; i < threads; i++) started[i] = pthread_create(&tids[i], NULL, par_main, &jobs[i]) == 0;
  rows(ctx, jobs[0].from, jobs[0].to);
  for (int i = 1; i < threads; i++) {
    if (started[i]) pthread_join(tids[i], NULL);
    else rows(ctx, jobs[i].from, jobs[i].to);
  }
}

/* ---- quant_matmul ---------------------------------------------------------- */

typedef struct qmm_job {
  gpurt_quant_matmul_args a;
  const uint8_t *w;
  const void *s, *b, *x;
  void *y;
  int threads;
} qmm_job;

/* Output features [from, to) for every token. */
static void qmm_rows(void *ctx, uint64_t from, uint64_t to) {
  const qmm_job *j = ctx;
  const gpurt_quant_matmul_args *a = &j->a;
  uint64_t gs = a->group_size, groups = a->k / gs;
  double *wrow = malloc(a->k * sizeof *wrow);
  for (uint64_t i = from; i < to; i++) {
    const uint8_t *q = j->w + i * a->k;
    if (wrow) /* dequantize the row once */
      for (uint64_t jj = 0; jj < a->k; jj++)
        wrow[jj] = ld_half(a->scale_type, j->s, i * groups + jj / gs) * (double)q[jj] +
                   ld_half(a->scale_type, j->b, i * groups + jj / gs);
    for (uint64_t t = 0; t < a->n; t++) {
      double acc = 0;
      for (uint64_t jj = 0; jj < a->k; jj++) {
        double w = wrow ? wrow[jj]
                        : ld_half(a->scale_type, j->s, i * groups + jj / gs) * (double)q[jj] +
                              ld_half(a->scale_type, j->b, i * groups + jj / gs);
        acc += ld_half(a->x_type, j->x, t * a->k + jj) * w;
      }
      st_half(a->x_type, j->y, t * a->m + i, acc);
    }
  }
  free(wrow);
}

static void qmm_run(void *p) {
  qmm_job *j = p;
  par_rows(j->threads, j->a.m, qmm_rows, j);
}

gpurt_error *mock_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r) {
  mock_rt *rt = ctx;
  qmm_job *j = calloc(1, sizeof *j);
  if (!j) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "quant_matmul: no memory");
  j->a = r->c.a;
  j->w = mock_ptr(&r->w);
  j->s = mock_ptr(&r->scales);
  j->b = mock_ptr(&r->biases);
  j->x = mock_ptr(&r->x);
  j->y = mock_ptr(&r->y);
  j->threads = op_threads(rt);
  return mock_submit_fn(q, "quant_matmul", qmm_run, free, j);
}

/* ---- grouped_gemm ------------------------------------------------------------ */

typedef struct gg_job {
  gp_grouped c;
  uint64_t *row_group; /* group of every row of A/D (total_m entries) */
  const uint32_t *counts; /* device counts (1.11): row_group is filled when the job runs */
  uint64_t rows;          /* rows with a group: total_m, or the device counts' (cut at max_m) */
  const void *a, *b;
  const float *sa, *sb;
  void *d;
  int threads;
} gg_job;

static double ld_ab(int fp8, const void *base, uint64_t i) {
  if (fp8) return (double)gp_e4m3_to_f32(((const uint8_t *)base)[i]);
  return ld_half(GPURT_DTYPE_BF16, base, i);
}

static void gg_rows(void *ctx, uint64_t from, uint64_t to) {
  const gg_job *j = ctx;
  const gp_grouped *c = &j->c;
  uint64_t n = c->a.n, k = c->a.k;
  for (uint64_t r = from; r < to; r++) {
    uint64_t g = j->row_group[r];
    for (uint64_t col = 0; col < n; col++) {
      uint64_t brow = (g * n + col) * k;
      double acc = 0;
      if (!c->fp8) {
        for (uint64_t p = 0; p < k; p++) acc += ld_ab(0, j->a, r * k + p) * ld_ab(0, j->b, brow + p);
      } else {
        for (uint64_t kb = 0; kb < c->kb; kb++) {
          double part = 0;
          for (uint64_t p = kb * 128; p < kb * 128 + 128; p++)
            part += ld_ab(1, j->a, r * k + p) * ld_ab(1, j->b, brow + p);
          double sa = j->sa[r * c->kb + kb];
          double sb = j->sb[(g * c->nb + col / 128) * c->kb + kb];
          acc += part * sa * sb;
        }
      }
      st_half(GPURT_DTYPE_BF16, j->d, r * n + col, acc);
    }
  }
}

/* The rows' groups from counts m (group_count of them), in order, cut at
 * max rows (the groups past the cut get none); returns the rows filled. */
static uint64_t fill_groups(uint64_t *row_group, uint64_t max, uint64_t group_count, const uint64_t *m64,
                            const uint32_t *m32) {
  uint64_t row = 0;
  for (uint64_t g = 0; g < group_count; g++)
    for (uint64_t i = 0, m = m64 ? m64[g] : m32[g]; i < m && row < max; i++) row_group[row++] = g;
  return row;
}

static void gg_run(void *p) {
  gg_job *j = p;
  /* Device counts: read now, in the stream's order (what ran before wrote them). */
  if (j->counts) j->rows = fill_groups(j->row_group, j->c.total_m, j->c.a.group_count, NULL, j->counts);
  par_rows(j->threads, j->rows, gg_rows, j);
}

static void gg_release(void *p) {
  gg_job *j = p;
  free(j->row_group);
  free(j);
}

gpurt_error *mock_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r) {
  mock_rt *rt = ctx;
  const char *what = "grouped_gemm";
  gg_job *j = calloc(1, sizeof *j);
  if (!j) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", what);
  j->c = r->c;
  j->row_group = malloc(j->c.total_m * sizeof *j->row_group);
  if (!j->row_group) {
    unsigned long long rows = j->c.total_m;
    free(j);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory for %llu rows", what, rows);
  }
  /* m_sizes is borrowed: copy what the worker needs now. */
  const gpurt_grouped_gemm_args *a = &r->c.a;
  if (r->c.dev_counts)
    j->counts = mock_ptr(&r->m_counts);
  else
    j->rows = fill_groups(j->row_group, j->c.total_m, a->group_count, a->m_sizes, NULL);
  j->c.a.m_sizes = NULL;
  j->a = mock_ptr(&r->a);
  j->b = mock_ptr(&r->b);
  j->d = mock_ptr(&r->d);
  j->sa = mock_ptr(&r->scale_a);
  j->sb = mock_ptr(&r->scale_b);
  j->threads = op_threads(rt);
  return mock_submit_fn(q, what, gg_run, gg_release, j);
}
