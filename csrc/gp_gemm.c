/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference GEMM: column-major as BLAS, op(A) m x k, op(B) k x n,
 * f32 accumulation, multi-threaded over column blocks.
 *
 *   acc = sum_p op(A)[i,p] * op(B)[p,j]            (f32)
 *   t   = alpha * scale_a * scale_b * acc + beta * C[i,j]
 *   t   = t + bias[i]          (BIAS, BIAS_RELU, BIAS_GELU)
 *   t   = max(t, 0) / gelu_tanh(t)   (RELU / GELU variants)
 *   D[i,j] = round_to_d_type(scale_d * t)
 *
 * scale_d is applied last, as cuBLASLt does (it is the quantisation scale
 * of an fp8 output). C is not read when beta == 0.
 *
 * A prologue (1.10) transforms each column x of op(B) first, as the
 * built-in kernel it replaces computes it (gp_kernels.c's rmsnorm_T and
 * silu_mul_T: f32, one rounding to b_type), so that on the mock a fused
 * GEMM gives the bits of the kernel then the GEMM:
 *   RMSNORM  x'[p] = x[p] / sqrt(sum_q x[q]^2 / k + eps) * w[p]
 *   SWIGLU   x'[p] = silu(x[p]) * u[p], u the column n columns later
 */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE /* clock_gettime, nanosleep, posix_memalign */
#endif
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gp_common.h"

static int gp_has_bias(int32_t ep) {
  return ep == GPURT_EPILOGUE_BIAS || ep == GPURT_EPILOGUE_BIAS_RELU || ep == GPURT_EPILOGUE_BIAS_GELU;
}


typedef struct gp_gemm_job {
  const gp_gemm_exec *e;
  const float *at; /* op(A) row-major: at[i*k + p] */
  const float *bc; /* op(B) column-major: bc[j*k + p] */
  const void *c;
  void *d;
  float ab_scale, beta, sd;
  uint64_t j0, j1;
} gp_gemm_job;

static float gp_gelu(float x) {
  const float c = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

static float gp_dot(const float *a, const float *b, uint64_t k) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int q = 0; q < 8; q++) s[q] += a[p + q] * b[p + q];
  for (int q = 0; p < k; p++, q++) s[q] += a[p] * b[p];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void *gp_gemm_cols(void *arg) {
  gp_gemm_job *jb = arg;
  const gpurt_gemm_desc *d = &jb->e->d;
  uint64_t m = d->m, k = d->k;
  int ep = d->epilogue;
  int bias = gp_has_bias(ep);
  const uint64_t TI = 64;
  for (uint64_t i0 = 0; i0 < m; i0 += TI) {
    uint64_t i1 = i0 + TI < m ? i0 + TI : m;
    for (uint64_t j = jb->j0; j < jb->j1; j++) {
      const float *bcol = jb->bc + j * k;
      for (uint64_t i = i0; i < i1; i++) {
        float t = jb->ab_scale * gp_dot(jb->at + i * k, bcol, k);
        if (jb->beta != 0.0f) t += jb->beta * gp_load(d->c_type, jb->c, j * d->ldc + i);
        if (bias) t += gp_load(d->bias_type, jb->e->bias, i);
        if (ep == GPURT_EPILOGUE_RELU || ep == GPURT_EPILOGUE_BIAS_RELU) t = t > 0.0f ? t : 0.0f;
        else if (ep == GPURT_EPILOGUE_GELU || ep == GPURT_EPILOGUE_BIAS_GELU) t = gp_gelu(t);
        gp_store(d->d_type, jb->d, j * d->ldd + i, jb->sd * t);
      }
    }
  }
  return NULL;
}

static float gp_scale(const void *p) {
  if (p == NULL) return 1.0f;
  float f;
  memcpy(&f, p, 4);
  return f;
}

void gp_gemm_run(const gp_gemm_exec *e) {
  const gpurt_gemm_desc *d = &e->d;
  uint64_t m = d->m, n = d->n, k = d->k;
  float *at = malloc((size_t)(m * k) * sizeof *at);
  float *bc = malloc((size_t)(k * n) * sizeof *bc);
  if (at == NULL || bc == NULL) { /* cannot report from a worker; leave D */
    free(at);
    free(bc);
    return;
  }
  float ab_scale = (float)e->alpha * gp_scale(e->scale_ptr_a) * gp_scale(e->scale_ptr_b);
  float sd = gp_scale(e->scale_ptr_d);
  size_t esa = gp_dtype_size(d->a_type), esb = gp_dtype_size(d->b_type);
  size_t esc = gp_dtype_size(d->c_type), esd = gp_dtype_size(d->d_type);
  for (uint64_t bt = 0; bt < d->batch_count; bt++) {
    const unsigned char *a = (const unsigned char *)e->a + bt * (uint64_t)d->stride_a * esa;
    const unsigned char *b = (const unsigned char *)e->b + bt * (uint64_t)d->stride_b * esb;
    const unsigned char *c = e->c ? (const unsigned char *)e->c + bt * (uint64_t)d->stride_c * esc : NULL;
    unsigned char *dd = (unsigned char *)e->dd + bt * (uint64_t)d->stride_d * esd;
    /* op(A)[i,p] = trans_a ? A[p,i] : A[i,p], A[r,c] at c*lda + r. */
    for (uint64_t i = 0; i < m; i++)
      for (uint64_t p = 0; p < k; p++)
        at[i * k + p] = gp_load(d->a_type, a, d->trans_a ? i * d->lda + p : p * d->lda + i);
    for (uint64_t j = 0; j < n; j++) {
      float *col = bc + j * k;
      if (d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM) { /* trans_b is 0 */
        const unsigned char *x = b + j * d->ldb * esb;
        const float scale = gp_rms_scale(d->b_type, x, k, (float)e->norm_eps);
        for (uint64_t p = 0; p < k; p++)
          col[p] = gp_round_to(d->b_type, gp_rms_elem(d->b_type, x, e->norm_w, p, scale));
      } else if (d->prologue == GPURT_GEMM_PROLOGUE_SWIGLU) {
        for (uint64_t p = 0; p < k; p++)
          col[p] = gp_round_to(d->b_type, gp_silu_mul(gp_load(d->b_type, b, j * d->ldb + p),
                                                    gp_load(d->b_type, b, (n + j) * d->ldb + p)));
      } else {
        for (uint64_t p = 0; p < k; p++)
          col[p] = gp_load(d->b_type, b, d->trans_b ? p * d->ldb + j : j * d->ldb + p);
      }
    }
    uint64_t work = m * n * k;
    int th = e->threads < 1 ? 1 : e->threads;
    if ((uint64_t)th > n) th = (int)n;
    if (work < (1u << 18)) th = 1;
    if (th > 64) th = 64;
    gp_gemm_job jobs[64];
    pthread_t tids[64];
    int threaded[64];
    uint64_t per = (n + (uint64_t)th - 1) / (uint64_t)th;
    for (int t = 0; t < th; t++) {
      gp_gemm_job *jb = &jobs[t];
      jb->e = e;
      jb->at = at;
      jb->bc = bc;
      jb->c = c;
      jb->d = dd;
      jb->ab_scale = ab_scale;
      jb->beta = (float)e->beta;
      jb->sd = sd;
      jb->j0 = (uint64_t)t * per < n ? (uint64_t)t * per : n;
      jb->j1 = jb->j0 + per < n ? jb->j0 + per : n;
      threaded[t] = t > 0 && jb->j0 < jb->j1 && pthread_create(&tids[t], NULL, gp_gemm_cols, jb) == 0;
    }
    for (int t = 0; t < th; t++)
      if (!threaded[t]) gp_gemm_cols(&jobs[t]);
    for (int t = 0; t < th; t++)
      if (threaded[t]) pthread_join(tids[t], NULL);
  }
  free(at);
  free(bc);
}
