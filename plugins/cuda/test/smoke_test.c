/* SPDX-License-Identifier: Apache-2.0 */
/*
 * smoke_test PLUGIN OOB_PTX — the CUDA plugin's runtime surface on a real
 * GPU, without Go (scripts/gpu_check.sh runs it before the fault test):
 * probe, devices, memory and copies (pinned, pageable, 1 GiB), memset, the
 * built-in kernels against CPU results, launch_batch (dependent launches,
 * validation before enqueue, a refusal midway), streams, events, a user PTX
 * module, validation errors, many threads, and GEMM against a CPU reference (with
 * an f32 bias for a bf16 D).
 * Prints "N passed, M failed".
 */
#include <math.h>
#include <pthread.h>

#include "harness.h"

static gpurt_runtime *rt;
static gpurt_module *bmod;

static gpurt_kernel *kernel(const char *name) {
  gpurt_kernel *k = NULL;
  OK(api->kernel_get(rt, bmod, name, strlen(name), &k));
  return k;
}

static void copy_h2d(gpurt_stream *s, gpurt_buffer *d, const void *src, uint64_t n) {
  OK(upload_on(rt, s, d, src, n));
}

static void copy_d2h(gpurt_stream *s, void *dst, gpurt_buffer *src, uint64_t n) {
  OK(download_on(rt, s, dst, src, n));
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* [-1, 1) */
  return (float)((xorshift(&rng) >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* ---- threads ---- */
static int thread_ok[8];
static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  gpurt_stream *s = NULL;
  gpurt_buffer *b = NULL;
  if (take(api->stream_create(rt, 0, &s), NULL, 0)) return NULL;
  if (take(api->buffer_alloc(rt, 0, 4096 * 4, &b), NULL, 0)) return NULL;
  gpurt_kernel *k = NULL;
  if (take(api->kernel_get(rt, bmod, "fill_f32", 8, &k), NULL, 0)) return NULL;
  int good = 1;
  for (int it = 0; it < 50 && good; it++) {
    float v = (float)(id * 1000 + it);
    gpurt_kernel_arg a[3] = {arg_buf(b, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(v)),
                             arg_val(GPURT_ARG_U64, 8, 4096)};
    if (take(launch1d(rt, s, k, 16, 256, a, 3), NULL, 0)) good = 0;
    float out[4096];
    if (take(download_on(rt, s, out, b, sizeof out), NULL, 0)) good = 0;
    for (int i = 0; i < 4096 && good; i++)
      if (out[i] != v) good = 0;
  }
  take(api->buffer_free(rt, b), NULL, 0);
  take(api->stream_destroy(rt, s), NULL, 0);
  thread_ok[id] = good;
  return NULL;
}

/* ---- GEMM ---- */
static void gemm_ref(int ta, int tb, int m, int n, int k, const float *A, int lda,
                     const float *B, int ldb, float *D, int ldd, float alpha,
                     const float *bias, int relu) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double acc = 0;
      for (int p = 0; p < k; p++) {
        double a = ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
        double b = tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
        acc += a * b;
      }
      acc *= alpha;
      if (bias) acc += bias[i];
      if (relu && acc < 0) acc = 0;
      D[i + (size_t)j * ldd] = (float)acc;
    }
}

/* ---- fp8 ---- */
static float fp8_decode(uint8_t b, int e5m2) {
  int sg = b >> 7;
  float v;
  if (e5m2) {
    int E = (b >> 2) & 31, M = b & 3;
    if (E == 31) return NAN;
    v = E == 0 ? ldexpf((float)M / 4.0f, -14) : ldexpf(1.0f + (float)M / 4.0f, E - 15);
  } else {
    int E = (b >> 3) & 15, M = b & 7;
    if (E == 15 && M == 7) return NAN;
    v = E == 0 ? ldexpf((float)M / 8.0f, -6) : ldexpf(1.0f + (float)M / 8.0f, E - 7);
  }
  return sg ? -v : v;
}
/* The code of an exactly representable value. */
static uint8_t fp8_encode_exact(float f, int e5m2) {
  for (int b = 0; b < 256; b++)
    if (fp8_decode((uint8_t)b, e5m2) == f && (signbit(f) != 0) == ((b >> 7) != 0))
      return (uint8_t)b;
  return 0;
}

/* Scaled fp8 GEMMs (TN) whose scales sit at offsets that are not 16-byte
 * aligned (conform's fp8/e4m3_e5m2_f32_scaled and fp8/e4m3_out_scaled):
 * inputs from {-1, -0.5, 0, 0.5, 1} (exact in e4m3 and e5m2). */
static void test_gemm_fp8_scaled(gpurt_stream *s, int out_fp8) {
  int m = out_fp8 ? 48 : 32, n = 32, k = out_fp8 ? 32 : 64;
  int bt_e5m2 = !out_fp8;
  static const float vals[5] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f};
  uint8_t *A = malloc((size_t)k * m), *B = malloc((size_t)k * n);
  float *Af = malloc(sizeof(float) * k * m), *Bf = malloc(sizeof(float) * k * n);
  float *R = malloc(sizeof(float) * m * n);
  for (int i = 0; i < k * m; i++) {
    Af[i] = vals[(int)(((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 5)];
    A[i] = fp8_encode_exact(Af[i], 0);
  }
  for (int i = 0; i < k * n; i++) {
    Bf[i] = vals[(int)(((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 5)];
    B[i] = fp8_encode_exact(Bf[i], bt_e5m2);
  }
  /* scale_a 0.5, scale_b 4, scale_d 0.5; f32 D: offsets 0 and 4; fp8 D:
   * offsets 4, 8 and 12 (none 16-byte aligned). */
  float sc[4];
  size_t oa = out_fp8 ? 4 : 0;
  memset(sc, 0, sizeof sc);
  sc[oa / 4] = 0.5f;
  sc[oa / 4 + 1] = 4.0f;
  if (out_fp8) sc[oa / 4 + 2] = 0.5f;
  size_t dsz = out_fp8 ? 1 : 4;
  gpurt_buffer *bA, *bB, *bD, *bS;
  /* 64 spare bytes so that a shifted A (the alignment check below) is still
   * inside its buffer. */
  OK(api->buffer_alloc(rt, 0, (size_t)k * m + 64, &bA));
  OK(api->buffer_alloc(rt, 0, (size_t)k * n, &bB));
  OK(api->buffer_alloc(rt, 0, dsz * m * n, &bD));
  OK(api->buffer_alloc(rt, 0, sizeof sc, &bS));
  copy_h2d(s, bA, A, (size_t)k * m);
  copy_h2d(s, bB, B, (size_t)k * n);
  copy_h2d(s, bS, sc, sizeof sc);
  gpurt_gemm_desc d = gemm_desc(GPURT_DTYPE_FP8_E4M3, out_fp8 ? GPURT_DTYPE_BF16 : GPURT_DTYPE_F32, m, n, k, k, k, m);
  d.b_type = bt_e5m2 ? GPURT_DTYPE_FP8_E5M2 : GPURT_DTYPE_FP8_E4M3;
  d.d_type = out_fp8 ? GPURT_DTYPE_FP8_E4M3 : GPURT_DTYPE_F32;
  d.trans_a = 1;
  d.align_a = d.align_b = d.align_c = d.align_d = 16;
  const char *name = out_fp8 ? "fp8 e4m3 -> e4m3 D, C NULL, scales at 4/8/12"
                             : "fp8 e4m3 x e5m2 -> f32, scales at 0/4";
  gpurt_gemm_plan *p = NULL;
  OK(api->gemm_plan_create(rt, 0, &d, &p));
  if (p != NULL) {
    gpurt_gemm_run_args r = gemm_run_args(bA, bB, bD, 1.25);
    r.scale_a = bS; r.scale_a_offset = oa;
    r.scale_b = bS; r.scale_b_offset = oa + 4;
    if (out_fp8) {
      r.scale_d = bS;
      r.scale_d_offset = oa + 8;
    }
    /* Twice: the second run reuses the plan's descriptor and the slots. */
    for (int it = 0; it < 2; it++) {
      gpurt_memset_args ms = memset_args(bD, 0, dsz * m * n, 0x7f, 1);
      OK(api->memset(rt, &ms));
      OK(api->gemm_run(rt, s, p, &r));
      OK(api->stream_synchronize(rt, s));
      void *D = malloc(dsz * m * n);
      copy_d2h(s, D, bD, dsz * m * n);
      float total = 1.25f * 0.5f * 4.0f * (out_fp8 ? 0.5f : 1.0f);
      gemm_ref(1, 0, m, n, k, Af, k, Bf, k, R, m, total, NULL, 0);
      double worst = 0;
      for (int i = 0; i < m * n; i++) {
        double got = out_fp8 ? fp8_decode(((uint8_t *)D)[i], 0) : ((float *)D)[i];
        double tol = out_fp8 ? 0.0625 * fabs(R[i]) + 1e-2 : 1e-4 * fabs(R[i]) + 1e-4;
        double e = fabs(got - R[i]) / tol;
        if (!(e <= worst)) worst = e; /* NaN counts as bad */
      }
      CHECK(worst <= 1.0, "gemm %s (run %d): worst error %g of the tolerance", name, it + 1,
            worst);
      free(D);
    }
    /* A matrix pointer that is not 16-byte aligned is refused by the plan's
     * align_a (16) before cuBLASLt sees it. */
    r.a_offset = 4;
    ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_ARGUMENT, "gemm_run: a");
    r.a_offset = 0;
    OK(api->gemm_plan_destroy(rt, p));
    /* With a plan that allows any alignment, the fp8 16-byte rule names a
     * (when cuBLASLt plans fp8 for such alignments at all). */
    d.align_a = d.align_b = d.align_c = d.align_d = 0;
    p = NULL;
    char msg[1024];
    int code = take(api->gemm_plan_create(rt, 0, &d, &p), msg, sizeof msg);
    if (code == 0 && p != NULL) {
      r.a_offset = 4;
      ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_ARGUMENT, "16-byte");
      r.a_offset = 0;
      OK(api->gemm_plan_destroy(rt, p));
    } else {
      printf("note: %s with align 1: plan refused (%d: %s); 16-byte run check skipped\n", name,
             code, msg);
    }
  }
  api->buffer_free(rt, bA);
  api->buffer_free(rt, bB);
  api->buffer_free(rt, bD);
  api->buffer_free(rt, bS);
  free(A); free(B); free(Af); free(Bf); free(R);
}

/* bf16 A/B/D with an f32 bias (conform's gemm/bf16/f32_bias): the plugin
 * converts the bias to bf16 on the stream (gpurt_internal_f32_to_bf16)
 * before the matmul. The reference adds the bias rounded to bf16 (what the
 * plugin passes cuBLASLt), then the epilogue, in double. The bias sits at
 * offset 4 of its buffer; bias[0] and bias[1] are ties (1 + 2^-8 and
 * 1 + 3*2^-8) that round to even. With a zero A and the BIAS epilogue, D is
 * exactly the bias rounded to bf16 (checks the rounding bit for bit). */
static double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static void test_gemm_f32_bias(gpurt_stream *s, int32_t epilogue, int m, int n, int k) {
  const char *ep = epilogue == GPURT_EPILOGUE_BIAS_GELU ? "bias_gelu" : "bias";
  uint16_t *A = malloc(2 * (size_t)m * k), *B = malloc(2 * (size_t)k * n);
  uint16_t *D = malloc(2 * (size_t)m * n);
  float *Af = malloc(4 * (size_t)m * k), *Bf = malloc(4 * (size_t)k * n);
  float *bias = malloc(4 * (size_t)m + 8);
  for (size_t i = 0; i < (size_t)m * k; i++) { A[i] = f32_to_bf16(frand()); Af[i] = bf16_to_f32(A[i]); }
  for (size_t i = 0; i < (size_t)k * n; i++) { B[i] = f32_to_bf16(frand()); Bf[i] = bf16_to_f32(B[i]); }
  bias[0] = 0.0f; /* the 4 bytes before the bias */
  for (int i = 0; i < m; i++) bias[1 + i] = 3.0f * frand();
  bias[1 + 0] = 1.0f + 1.0f / 256.0f;
  bias[1 + 1] = 1.0f + 3.0f / 256.0f;
  bias[1 + m] = 0.0f;
  gpurt_buffer *bA, *bZ, *bB, *bD, *bb;
  OK(api->buffer_alloc(rt, 0, 2 * (size_t)m * k, &bA));
  OK(api->buffer_alloc(rt, 0, 2 * (size_t)m * k, &bZ));
  OK(api->buffer_alloc(rt, 0, 2 * (size_t)k * n, &bB));
  OK(api->buffer_alloc(rt, 0, 2 * (size_t)m * n, &bD));
  OK(api->buffer_alloc(rt, 0, 4 * (size_t)m + 8, &bb));
  copy_h2d(s, bA, A, 2 * (size_t)m * k);
  copy_h2d(s, bB, B, 2 * (size_t)k * n);
  copy_h2d(s, bb, bias, 4 * (size_t)m + 8);
  gpurt_memset_args ms = memset_args(bZ, 0, 2 * (size_t)m * k, 0, 1);
  OK(api->memset(rt, &ms));
  gpurt_gemm_desc d = gemm_desc(GPURT_DTYPE_BF16, GPURT_DTYPE_BF16, m, n, k, m, k, m);
  d.epilogue = epilogue;
  d.bias_type = GPURT_DTYPE_F32;
  gpurt_gemm_plan *p = NULL;
  OK(api->gemm_plan_create(rt, 0, &d, &p));
  if (p != NULL) {
    gpurt_gemm_run_args r = gemm_run_args(bA, bB, bD, 1);
    r.bias = bb; r.bias_offset = 4;
    OK(api->gemm_run(rt, s, p, &r));
    copy_d2h(s, D, bD, 2 * (size_t)m * n); /* synchronous on s */
    double worst = 0;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int q = 0; q < k; q++) acc += (double)Af[i + (size_t)q * m] * Bf[q + (size_t)j * k];
        acc += bf16_to_f32(f32_to_bf16(bias[1 + i]));
        if (epilogue == GPURT_EPILOGUE_BIAS_GELU) acc = gelu_tanh(acc);
        double got = bf16_to_f32(D[i + (size_t)j * m]);
        double e = fabs(got - acc) / (1.5e-2 * fabs(acc) + 1e-2);
        if (!(e <= worst)) worst = e; /* NaN counts as bad */
      }
    CHECK(worst <= 1.0, "gemm bf16 %s with an f32 bias, m=%d n=%d k=%d: worst error %g of the "
          "tolerance", ep, m, n, k, worst);
    if (epilogue == GPURT_EPILOGUE_BIAS) {
      r.a = bZ;
      OK(api->gemm_run(rt, s, p, &r));
      copy_d2h(s, D, bD, 2 * (size_t)m * n);
      int bad = 0, first = -1;
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
          if (D[i + (size_t)j * m] != f32_to_bf16(bias[1 + i])) {
            if (first < 0) first = i;
            bad++;
          }
      CHECK(bad == 0, "gemm bf16 bias with A = 0: %d elements are not the f32 bias rounded to "
            "bf16 (first row %d: got %#x, want %#x)", bad, first,
            first < 0 ? 0u : (unsigned)D[first], first < 0 ? 0u : (unsigned)f32_to_bf16(bias[1 + first]));
      r.a = bA;
    }
    /* The caller's f32 bias spans m * 4 bytes; it must be 4-byte aligned. */
    char want[64];
    snprintf(want, sizeof want, "(%d bytes of f32) from offset 12", 4 * m);
    r.bias_offset = 12;
    ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_OUT_OF_RANGE, want);
    r.bias_offset = 2;
    ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_ARGUMENT, "4-byte aligned");
    OK(api->stream_synchronize(rt, s));
    OK(api->gemm_plan_destroy(rt, p));
  }
  /* The conversion kernel is the plugin's own, not a built-in. */
  gpurt_kernel *ik = NULL;
  ERR(api->kernel_get(rt, bmod, "gpurt_internal_f32_to_bf16",
                      strlen("gpurt_internal_f32_to_bf16"), &ik), GPURT_ERR_NOT_FOUND,
      "gpurt_internal_f32_to_bf16");
  api->buffer_free(rt, bA);
  api->buffer_free(rt, bZ);
  api->buffer_free(rt, bB);
  api->buffer_free(rt, bD);
  api->buffer_free(rt, bb);
  free(A); free(B); free(D); free(Af); free(Bf); free(bias);
}

static void test_gemm(gpurt_stream *s, const gpurt_device_info *di) {
  /* f32, NN, bias+relu, odd sizes, lda > m. */
  {
    int m = 37, n = 29, k = 53, lda = 40, ldb = 53, ldd = 37;
    float *A = malloc(sizeof(float) * lda * k), *B = malloc(sizeof(float) * ldb * n);
    float *D = malloc(sizeof(float) * ldd * n), *R = malloc(sizeof(float) * ldd * n);
    float bias[37];
    for (int i = 0; i < lda * k; i++) A[i] = frand();
    for (int i = 0; i < ldb * n; i++) B[i] = frand();
    for (int i = 0; i < m; i++) bias[i] = frand();
    gpurt_buffer *bA, *bB, *bD, *bb;
    OK(api->buffer_alloc(rt, 0, sizeof(float) * lda * k, &bA));
    OK(api->buffer_alloc(rt, 0, sizeof(float) * ldb * n, &bB));
    OK(api->buffer_alloc(rt, 0, sizeof(float) * ldd * n, &bD));
    OK(api->buffer_alloc(rt, 0, sizeof bias, &bb));
    copy_h2d(s, bA, A, sizeof(float) * lda * k);
    copy_h2d(s, bB, B, sizeof(float) * ldb * n);
    copy_h2d(s, bb, bias, sizeof bias);
    gpurt_gemm_desc d = gemm_desc(GPURT_DTYPE_F32, GPURT_DTYPE_F32, m, n, k, lda, ldb, ldd);
    d.compute_type = GPURT_COMPUTE_F32;
    d.epilogue = GPURT_EPILOGUE_BIAS_RELU;
    d.bias_type = GPURT_DTYPE_F32;
    d.align_a = d.align_b = d.align_c = d.align_d = 4;
    gpurt_gemm_plan *p = NULL;
    OK(api->gemm_plan_create(rt, 0, &d, &p));
    gpurt_gemm_run_args r = gemm_run_args(bA, bB, bD, 0.5);
    r.bias = bb;
    r.beta = 0;
    OK(api->gemm_run(rt, s, p, &r));
    OK(api->stream_synchronize(rt, s));
    copy_d2h(s, D, bD, sizeof(float) * ldd * n);
    gemm_ref(0, 0, m, n, k, A, lda, B, ldb, R, ldd, 0.5f, bias, 1);
    double worst = 0;
    for (int i = 0; i < ldd * n; i++) {
      double e = fabs(D[i] - R[i]) / (fabs(R[i]) + 1e-3);
      if (e > worst) worst = e;
    }
    CHECK(worst < 1e-4, "gemm f32 bias+relu: worst relative error %g", worst);
    /* Out-of-range view and a freed buffer are errors. A spans
     * (k-1)*lda + m elements, 3 fewer than its buffer (lda - m = 3): an
     * offset of 4 elements is the smallest that runs past the end. */
    r.a_offset = sizeof(float) * (size_t)(lda - m + 1);
    ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_OUT_OF_RANGE, "gemm_run: operand a");
    r.a_offset = 0;
    OK(api->gemm_plan_destroy(rt, p));
    ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_HANDLE, "gemm plan");
    api->buffer_free(rt, bA);
    api->buffer_free(rt, bB);
    api->buffer_free(rt, bD);
    api->buffer_free(rt, bb);
    free(A); free(B); free(D); free(R);
  }
  /* bf16 TN 256x192x320 -> f32 D, batch 2. */
  {
    int m = 256, n = 192, k = 320, batch = 2;
    size_t sa = (size_t)k * m, sb = (size_t)k * n, sd = (size_t)m * n;
    uint16_t *A = malloc(2 * sa * batch), *B = malloc(2 * sb * batch);
    float *Af = malloc(4 * sa * batch), *Bf = malloc(4 * sb * batch);
    float *D = malloc(4 * sd * batch), *R = malloc(4 * sd);
    for (size_t i = 0; i < sa * batch; i++) { A[i] = f32_to_bf16(frand()); Af[i] = bf16_to_f32(A[i]); }
    for (size_t i = 0; i < sb * batch; i++) { B[i] = f32_to_bf16(frand()); Bf[i] = bf16_to_f32(B[i]); }
    gpurt_buffer *bA, *bB, *bD;
    OK(api->buffer_alloc(rt, 0, 2 * sa * batch, &bA));
    OK(api->buffer_alloc(rt, 0, 2 * sb * batch, &bB));
    OK(api->buffer_alloc(rt, 0, 4 * sd * batch, &bD));
    copy_h2d(s, bA, A, 2 * sa * batch);
    copy_h2d(s, bB, B, 2 * sb * batch);
    gpurt_gemm_desc d = gemm_desc(GPURT_DTYPE_BF16, GPURT_DTYPE_F32, m, n, k, k, k, m);
    d.trans_a = 1;
    d.batch_count = batch;
    d.stride_a = (int64_t)sa; d.stride_b = (int64_t)sb; d.stride_c = d.stride_d = (int64_t)sd;
    d.align_a = d.align_b = d.align_c = d.align_d = 256;
    gpurt_gemm_plan *p = NULL;
    OK(api->gemm_plan_create(rt, 0, &d, &p));
    gpurt_gemm_run_args r = gemm_run_args(bA, bB, bD, 1);
    OK(api->gemm_run(rt, s, p, &r));
    copy_d2h(s, D, bD, 4 * sd * batch);
    double worst = 0;
    for (int b = 0; b < batch; b++) {
      gemm_ref(1, 0, m, n, k, Af + b * sa, k, Bf + b * sb, k, R, m, 1.0f, NULL, 0);
      for (size_t i = 0; i < sd; i++) {
        double e = fabs(D[b * sd + i] - R[i]) / (fabs(R[i]) + 1e-2);
        if (e > worst) worst = e;
      }
    }
    CHECK(worst < 1e-3, "gemm bf16 TN batched: worst relative error %g", worst);
    OK(api->gemm_plan_destroy(rt, p));
    /* f32 bias with a bf16 D: the small m first, then one that grows the
     * stream's bf16 bias copy (and needs two blocks of the conversion). */
    test_gemm_f32_bias(s, GPURT_EPILOGUE_BIAS_GELU, 37, 21, 29);
    test_gemm_f32_bias(s, GPURT_EPILOGUE_BIAS, 300, 24, 40);
    /* fp8 needs TN: a plan with trans_a=0 names the field. */
    if (di->flags & GPURT_DEVICE_FP8) {
      d.a_type = d.b_type = GPURT_DTYPE_FP8_E4M3;
      d.c_type = d.d_type = GPURT_DTYPE_BF16;
      d.trans_a = 0;
      d.lda = m;
      d.batch_count = 1;
      ERR(api->gemm_plan_create(rt, 0, &d, &p), GPURT_ERR_UNSUPPORTED, "trans_a");
      d.trans_a = 1;
      d.lda = k;
      OK(api->gemm_plan_create(rt, 0, &d, &p));
      OK(api->gemm_plan_destroy(rt, p));
      test_gemm_fp8_scaled(s, 0);
      test_gemm_fp8_scaled(s, 1);
    }
    api->buffer_free(rt, bA);
    api->buffer_free(rt, bB);
    api->buffer_free(rt, bD);
    free(A); free(B); free(Af); free(Bf); free(D); free(R);
  }
}

/* ---- launch_batch (1.2) ---- */

/* How many of the n floats of b are not want (synchronizes s). */
static int count_not(gpurt_stream *s, gpurt_buffer *b, float *host, int n, float want) {
  OK(api->stream_synchronize(rt, s));
  copy_d2h(s, host, b, sizeof(float) * (size_t)n);
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (host[i] != want) bad++;
  return bad;
}

/* Dependent launches in one batch, order, validation of every item before
 * any is enqueued, a driver refusal midway, count 0 and NULL out_enqueued. */
static void test_launch_batch(gpurt_stream *s) {
  enum { N = 4096 };
  static float host[N];
  CHECK(GPURT_API_HAS(api, launch_batch), "the table has launch_batch");
  if (!GPURT_API_HAS(api, launch_batch)) return;
  gpurt_buffer *b1 = NULL, *b2 = NULL;
  OK(api->buffer_alloc(rt, 0, sizeof host, &b1));
  OK(api->buffer_alloc(rt, 0, sizeof host, &b2));
  gpurt_kernel *kfill = kernel("fill_f32"), *kaxpy = kernel("axpy_f32"),
               *kscale = kernel("scale_f32");
  uint32_t g = (N + 255) / 256;
  uint64_t n = 99;

  /* b1 = 2, b2 = 0.5; b2 = 3*b1 + b2 (6.5); b1 = 2*b2 (13); b2 = -1*b1 + b2
   * (-6.5): each launch reads what the one before wrote. */
  gpurt_kernel_arg f1[3] = {arg_buf(b1, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(2.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg f2[3] = {arg_buf(b2, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(0.5f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg x1[4] = {arg_buf(b2, 0, 0), arg_buf(b1, 0, 0),
                            arg_val(GPURT_ARG_F32, 4, f32_bits(3.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg s1[4] = {arg_buf(b1, 0, 0), arg_buf(b2, 0, 0),
                            arg_val(GPURT_ARG_F32, 4, f32_bits(2.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg x2[4] = {arg_buf(b2, 0, 0), arg_buf(b1, 0, 0),
                            arg_val(GPURT_ARG_F32, 4, f32_bits(-1.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_launch_args la[5] = {launch_args(g, 256, f1, 3), launch_args(g, 256, f2, 3),
                             launch_args(g, 256, x1, 4), launch_args(g, 256, s1, 4),
                             launch_args(g, 256, x2, 4)};
  gpurt_launch_item it[5] = {{kfill, &la[0]}, {kfill, &la[1]}, {kaxpy, &la[2]},
                             {kscale, &la[3]}, {kaxpy, &la[4]}};
  OK(api->launch_batch(rt, s, 5, it, &n));
  CHECK(n == 5, "launch_batch of 5: out_enqueued %llu", (unsigned long long)n);
  int bad1 = count_not(s, b1, host, N, 13.0f), bad2 = count_not(s, b2, host, N, -6.5f);
  CHECK(bad1 == 0 && bad2 == 0,
        "launch_batch fill, fill, axpy, scale, axpy: %d and %d of %d elements differ", bad1,
        bad2, N);

  /* 64 fills of b1 with 0..63 in one batch: the last one wins. */
  {
    enum { B = 64 };
    gpurt_kernel_arg fa[B][3];
    gpurt_launch_args fl[B];
    gpurt_launch_item fi[B];
    for (int i = 0; i < B; i++) {
      fa[i][0] = arg_buf(b1, 0, 0);
      fa[i][1] = arg_val(GPURT_ARG_F32, 4, f32_bits((float)i));
      fa[i][2] = arg_val(GPURT_ARG_U64, 8, N);
      fl[i] = launch_args(g, 256, fa[i], 3);
      fi[i].kernel = kfill;
      fi[i].args = &fl[i];
    }
    n = 99;
    OK(api->launch_batch(rt, s, B, fi, &n));
    CHECK(n == B, "launch_batch of 64: out_enqueued %llu", (unsigned long long)n);
    int bad = count_not(s, b1, host, N, (float)(B - 1));
    CHECK(bad == 0, "launch_batch of 64 fills: %d of %d elements are not the last value", bad,
          N);
  }

  /* An invalid item enqueues nothing: b1 = 7 before; the valid fills before
   * the bad item must not run. */
  gpurt_kernel_arg f7[3] = {arg_buf(b1, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(7.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  OK(launch1d(rt, s, kfill, g, 256, f7, 3));
  OK(api->stream_synchronize(rt, s));
  gpurt_kernel_arg f9[3] = {arg_buf(b1, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(9.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg xbad[4] = {arg_buf(b2, 0, 0), arg_buf(b1, 0, 0),
                              arg_val(GPURT_ARG_U32, 4, 3), /* the kernel wants f32 */
                              arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_launch_args lv[3] = {launch_args(g, 256, f9, 3), launch_args(g, 256, f9, 3),
                             launch_args(g, 256, xbad, 4)};
  gpurt_launch_item bad_kind[3] = {{kfill, &lv[0]}, {kfill, &lv[1]}, {kaxpy, &lv[2]}};
  n = 99;
  ERR(api->launch_batch(rt, s, 3, bad_kind, &n), GPURT_ERR_INVALID_ARGUMENT, "item 2: ");
  CHECK(n == 0, "invalid item 2: out_enqueued %llu, want 0", (unsigned long long)n);
  ERR(api->launch_batch(rt, s, 3, bad_kind, NULL), GPURT_ERR_INVALID_ARGUMENT, "wants f32");
  gpurt_launch_item bad_kernel[3] = {{kfill, &lv[0]},
                                     {(gpurt_kernel *)(uintptr_t)0xdeadbeef, &lv[1]},
                                     {kfill, &lv[1]}};
  n = 99;
  ERR(api->launch_batch(rt, s, 3, bad_kernel, &n), GPURT_ERR_INVALID_HANDLE,
      "item 1: invalid kernel handle");
  CHECK(n == 0, "invalid kernel in item 1: out_enqueued %llu", (unsigned long long)n);
  gpurt_launch_item no_args[2] = {{kfill, &lv[0]}, {kfill, NULL}};
  ERR(api->launch_batch(rt, s, 2, no_args, &n), GPURT_ERR_INVALID_ARGUMENT, "item 1: ");
  gpurt_launch_args zero_grid = launch_args(0, 256, f9, 3);
  gpurt_launch_item zg[2] = {{kfill, &lv[0]}, {kfill, &zero_grid}};
  ERR(api->launch_batch(rt, s, 2, zg, &n), GPURT_ERR_INVALID_ARGUMENT, "item 1: ");
  gpurt_kernel_arg f9far[3] = {arg_buf(b1, sizeof host + 4, 0), f9[1], f9[2]};
  gpurt_launch_args lfar = launch_args(g, 256, f9far, 3);
  gpurt_launch_item far[2] = {{kfill, &lv[0]}, {kfill, &lfar}};
  ERR(api->launch_batch(rt, s, 2, far, &n), GPURT_ERR_OUT_OF_RANGE, "item 1: ");
  ERR(api->launch_batch(rt, s, 2, NULL, &n), GPURT_ERR_INVALID_ARGUMENT, "items is NULL");
  int bad = count_not(s, b1, host, N, 7.0f);
  CHECK(bad == 0, "rejected batches enqueued something: %d of %d elements are not 7", bad, N);

  /* count 0 is a no-op (items may be NULL); out_enqueued gets 0. */
  n = 99;
  OK(api->launch_batch(rt, s, 0, NULL, &n));
  CHECK(n == 0, "count 0: out_enqueued %llu", (unsigned long long)n);
  OK(api->launch_batch(rt, s, 0, bad_kind, NULL));
  ERR(api->launch_batch(rt, (gpurt_stream *)(uintptr_t)0xdeadbeef, 1, it, &n),
      GPURT_ERR_INVALID_HANDLE, "stream");

  /* NULL out_enqueued on success. */
  OK(api->launch_batch(rt, s, 2, bad_kind, NULL)); /* two fills of 9 */
  bad = count_not(s, b1, host, N, 9.0f);
  CHECK(bad == 0, "launch_batch with NULL out_enqueued: %d of %d elements are not 9", bad, N);

  /* The driver refuses item 2 (a block of 2048 threads passes the ABI's
   * checks, not the device's): items 0 and 1 stay enqueued. */
  gpurt_kernel_arg f4[3] = {arg_buf(b1, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(4.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_kernel_arg f5[3] = {arg_buf(b2, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(5.0f)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  gpurt_launch_args lr[4] = {launch_args(g, 256, f4, 3), launch_args(g, 256, f5, 3),
                             launch_args(1, 2048, f9, 3), launch_args(g, 256, f9, 3)};
  gpurt_launch_item refused[4] = {{kfill, &lr[0]}, {kfill, &lr[1]}, {kfill, &lr[2]},
                                  {kfill, &lr[3]}};
  n = 99;
  ERR(api->launch_batch(rt, s, 4, refused, &n), GPURT_ERR_INVALID_ARGUMENT,
      "item 2: launch \"fill_f32\"");
  CHECK(n == 2, "driver refusal at item 2: out_enqueued %llu, want 2", (unsigned long long)n);
  ERR(api->launch_batch(rt, s, 4, refused, NULL), GPURT_ERR_INVALID_ARGUMENT,
      "CUDA_ERROR_INVALID_VALUE");
  bad1 = count_not(s, b1, host, N, 4.0f);
  bad2 = count_not(s, b2, host, N, 5.0f);
  CHECK(bad1 == 0 && bad2 == 0,
        "items before the refused one: %d and %d of %d elements differ (item 3 must not run)",
        bad1, bad2, N);
  OK(api->stream_query(rt, s)); /* the refusal is not sticky */

  OK(api->buffer_free(rt, b1));
  OK(api->buffer_free(rt, b2));
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: smoke_test PLUGIN [OOB_PTX]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  load_plugin(argv[1]);

  gpurt_plugin_info pi;
  ARGS_INIT(pi);
  OK(api->plugin_info(&pi));
  CHECK(strcmp(pi.backend, "cuda") == 0 && pi.priority == 300, "plugin info %s %d", pi.backend,
        pi.priority);

  gpurt_device_info devs[4];
  memset(devs, 0, sizeof devs);
  for (int i = 0; i < 4; i++) devs[i].struct_size = sizeof devs[i];
  gpurt_probe_args pa;
  ARGS_INIT(pa);
  pa.devices = devs;
  pa.device_capacity = 4;
  OK(api->probe(&pa));
  printf("probe: available=%u reason_code=%d count=%u: %s\n", pa.available, pa.reason_code,
         pa.device_count, pa.reason);
  CHECK(pa.available == 1 && pa.device_count >= 1, "probe says available");
  if (!pa.available) return finish();
  CHECK(strncmp(devs[0].arch, "sm_", 3) == 0 && devs[0].memory_total > 0, "device 0 %s %s",
        devs[0].name, devs[0].arch);

  gpurt_runtime_create_args ca;
  ARGS_INIT(ca);
  OK(api->runtime_create(&ca, &rt));
  if (rt == NULL) return finish();
  gpurt_device_info di;
  ARGS_INIT(di);
  OK(api->device_info(rt, 0, &di));
  printf("device 0: %s arch %s pci %s driver %s (%u) cc %u.%u sms %u mem %llu free %llu flags %#x\n",
         di.name, di.arch, di.pci_bus_id, di.driver_version, di.driver_version_code,
         di.compute_major, di.compute_minor, di.multiprocessor_count,
         (unsigned long long)di.memory_total, (unsigned long long)di.memory_free, di.flags);
  CHECK(di.memory_free > 0 && di.memory_free <= di.memory_total, "memory_free");
  CHECK(strcmp(di.vendor, "NVIDIA") == 0, "vendor %s", di.vendor);

  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  OK(load_builtin(rt, &bmod));

  /* Built-ins, f32 exact. */
  enum { N = 10000 };
  static float x[N], y[N], out[N];
  for (int i = 0; i < N; i++) {
    x[i] = frand() * 10;
    y[i] = frand() * 10;
  }
  gpurt_buffer *bx, *by, *bz;
  OK(api->buffer_alloc(rt, 0, sizeof x, &bx));
  OK(api->buffer_alloc(rt, 0, sizeof y, &by));
  OK(api->buffer_alloc(rt, 0, sizeof out, &bz));
  copy_h2d(NULL, bx, x, sizeof x);
  copy_h2d(s, by, y, sizeof y);
  gpurt_kernel_info ki;
  ARGS_INIT(ki);
  gpurt_kernel *kaxpy = kernel("axpy_f32");
  OK(api->kernel_info(rt, kaxpy, &ki));
  CHECK(ki.num_params == 4 && ki.param_kind[0] == GPURT_ARG_BUFFER &&
            ki.param_kind[2] == GPURT_ARG_F32 && ki.param_size[3] == 8 &&
            ki.max_threads_per_block >= 256,
        "kernel_info axpy_f32: %u params, max threads %u", ki.num_params,
        ki.max_threads_per_block);
  float alpha = 1.75f;
  gpurt_kernel_arg ax[4] = {arg_buf(bz, 0, 0), arg_buf(bx, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(alpha)),
                            arg_val(GPURT_ARG_U64, 8, N)};
  OK(launch1d(rt, s, kernel("scale_f32"), (N + 255) / 256, 256, ax, 4));
  ax[1] = arg_buf(by, 0, 0);
  OK(launch1d(rt, s, kaxpy, (N + 255) / 256, 256, ax, 4)); /* z = a*y + z */
  copy_d2h(s, out, bz, sizeof out);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float p = alpha * x[i];
    float q = alpha * y[i];
    float want = q + p;
    if (out[i] != want) bad++;
  }
  CHECK(bad == 0, "scale_f32 then axpy_f32: %d of %d elements differ", bad, N);
  gpurt_kernel_arg a3[4] = {arg_buf(bz, 0, 0), arg_buf(bx, 0, 0), arg_buf(by, 0, 0), arg_val(GPURT_ARG_U64, 8, N)};
  OK(launch1d(rt, s, kernel("mul_f32"), (N + 255) / 256, 256, a3, 4));
  copy_d2h(s, out, bz, sizeof out);
  bad = 0;
  for (int i = 0; i < N; i++)
    if (out[i] != x[i] * y[i]) bad++;
  CHECK(bad == 0, "mul_f32: %d differ", bad);
  test_launch_batch(s);
  /* bf16 add of exactly representable values; grid too small leaves the tail. */
  {
    static uint16_t hx[N], hy[N], hz[N];
    for (int i = 0; i < N; i++) {
      hx[i] = f32_to_bf16((float)(i % 64));
      hy[i] = f32_to_bf16(1.5f);
    }
    copy_h2d(s, bx, hx, sizeof hx);
    copy_h2d(s, by, hy, sizeof hy);
    gpurt_memset_args ms = memset_args(bz, 0, sizeof hz, 0xffff, 2);
    OK(api->memset(rt, &ms));
    OK(launch1d(rt, s, kernel("add_bf16"), 8, 256, a3, 4)); /* 2048 threads only */
    copy_d2h(s, hz, bz, sizeof hz);
    bad = 0;
    for (int i = 0; i < N; i++) {
      uint16_t want = i < 2048 ? f32_to_bf16((float)(i % 64) + 1.5f) : 0xffff;
      if (hz[i] != want) bad++;
    }
    CHECK(bad == 0, "add_bf16 with a short grid + memset: %d differ", bad);
  }
  /* Validation errors. */
  ERR(launch1d(rt, s, kaxpy, 1, 1, ax, 3), GPURT_ERR_INVALID_ARGUMENT, "takes 4");
  ax[0].offset = sizeof out + 4;
  ERR(launch1d(rt, s, kaxpy, 1, 1, ax, 4), GPURT_ERR_OUT_OF_RANGE, "argument 0");
  ax[0].offset = 0;
  ax[2].kind = GPURT_ARG_U32;
  ERR(launch1d(rt, s, kaxpy, 1, 1, ax, 4), GPURT_ERR_INVALID_ARGUMENT, "wants f32");
  ax[2].kind = GPURT_ARG_F32;
  gpurt_kernel *nk = NULL;
  ERR(api->kernel_get(rt, bmod, "nope", 4, &nk), GPURT_ERR_NOT_FOUND, "nope");
  gpurt_buffer *huge = NULL;
  ERR(api->buffer_alloc(rt, 0, 1ull << 50, &huge), GPURT_ERR_OUT_OF_MEMORY, "free");
  ERR(api->buffer_free(rt, (gpurt_buffer *)(uintptr_t)0xdeadbeef), GPURT_ERR_INVALID_HANDLE, "buffer");
  gpurt_module_load_args bad_ptx;
  ARGS_INIT(bad_ptx);
  bad_ptx.format = GPURT_MODULE_PTX;
  bad_ptx.data = ".version 8.0\n.target sm_80\nthis is not ptx\n";
  bad_ptx.data_len = strlen(bad_ptx.data);
  gpurt_module *bm = NULL;
  ERR(api->module_load(rt, &bad_ptx, &bm), GPURT_ERR_INVALID_ARGUMENT, "CUDA_ERROR_INVALID_PTX");

  /* Events and sleep_ns: elapsed time and query while busy. */
  gpurt_event *e0, *e1;
  OK(api->event_create(rt, 0, GPURT_EVENT_TIMING, &e0));
  OK(api->event_create(rt, 0, GPURT_EVENT_TIMING, &e1));
  gpurt_kernel_arg sl[1] = {arg_val(GPURT_ARG_U64, 8, 20000000)}; /* 20 ms */
  OK(api->event_record(rt, e0, s));
  OK(launch1d(rt, s, kernel("sleep_ns"), 1, 1, sl, 1));
  OK(api->event_record(rt, e1, s));
  ERR(api->stream_query(rt, s), GPURT_ERR_NOT_READY, "pending");
  OK(api->event_synchronize(rt, e1));
  OK(api->stream_query(rt, s));
  double ms = 0;
  OK(api->event_elapsed(rt, e0, e1, &ms));
  CHECK(ms >= 15 && ms < 2000, "sleep_ns 20 ms took %g ms", ms);
  /* Another stream waits for an event of the first. */
  gpurt_stream *s2 = NULL;
  OK(api->stream_create(rt, 0, &s2));
  OK(launch1d(rt, s, kernel("sleep_ns"), 1, 1, sl, 1));
  OK(api->event_record(rt, e1, s));
  OK(api->stream_wait_event(rt, s2, e1));
  gpurt_kernel_arg fl[3] = {arg_buf(bz, 0, 0), arg_val(GPURT_ARG_F32, 4, f32_bits(3.0f)), arg_val(GPURT_ARG_U64, 8, N)};
  OK(launch1d(rt, s2, kernel("fill_f32"), (N + 255) / 256, 256, fl, 3));
  ERR(api->stream_query(rt, s2), GPURT_ERR_NOT_READY, "pending");
  OK(api->stream_synchronize(rt, s2));

  /* User PTX module (oob.ptx's ok_write) and cuFuncGetParamInfo. */
  if (argc > 2) {
    size_t len = 0;
    char *ptx = read_file(argv[2], &len);
    CHECK(ptx != NULL, "read %s", argv[2]);
    if (ptx) {
      gpurt_module_load_args um;
      ARGS_INIT(um);
      um.format = GPURT_MODULE_PTX;
      um.data = ptx;
      um.data_len = len;
      gpurt_module *m = NULL;
      OK(api->module_load(rt, &um, &m));
      gpurt_kernel *k = NULL;
      OK(api->kernel_get(rt, m, "ok_write", 8, &k));
      ARGS_INIT(ki);
      OK(api->kernel_info(rt, k, &ki));
      CHECK(ki.num_params == 2 && ki.param_kind[0] == GPURT_ARG_ANY && ki.param_size[0] == 8 &&
                ki.param_size[1] == 4,
            "user kernel_info: %u params sizes %u %u", ki.num_params, ki.param_size[0],
            ki.param_size[1]);
      gpurt_kernel_arg ua[2] = {arg_buf(bz, 0, 0), arg_val(GPURT_ARG_U32, 4, 0x1234)};
      OK(launch1d(rt, s, k, 1, 1, ua, 2));
      uint32_t w = 0;
      copy_d2h(s, &w, bz, 4);
      CHECK(w == 0x1234, "ok_write wrote %#x", w);
      OK(api->module_unload(rt, m));
      ERR(launch1d(rt, s, k, 1, 1, ua, 2), GPURT_ERR_INVALID_HANDLE, "kernel");
      free(ptx);
    }
  }

  /* Pinned 1 GiB round trip, asynchronous on a stream. */
  {
    uint64_t n = 1ull << 30;
    gpurt_host_buffer *h1, *h2;
    void *p1 = NULL, *p2 = NULL;
    OK(api->host_alloc(rt, n, &h1, &p1));
    OK(api->host_alloc(rt, n, &h2, &p2));
    gpurt_buffer *big = NULL;
    OK(api->buffer_alloc(rt, 0, n, &big));
    if (p1 && p2 && big) {
      uint64_t *q = p1;
      for (uint64_t i = 0; i < n / 8; i++) q[i] = i * 0x9e3779b97f4a7c15ull;
      memset(p2, 0, n);
      gpurt_copy_args c = async_copy_args(s, big, NULL, NULL, h1, n);
      OK(api->copy(rt, &c));
      c = async_copy_args(s, NULL, h2, big, NULL, n);
      OK(api->copy(rt, &c));
      OK(api->stream_synchronize(rt, s));
      CHECK(memcmp(p1, p2, n) == 0, "1 GiB pinned round trip");
      c.size = n + 1;
      ERR(api->copy(rt, &c), GPURT_ERR_OUT_OF_RANGE, "outside the host buffer");
    }
    gpurt_runtime_stats st;
    ARGS_INIT(st);
    OK(api->runtime_stats(rt, &st));
    CHECK(st.host_bytes == 2 * n && st.live_host_buffers == 2, "stats: %llu host bytes",
          (unsigned long long)st.host_bytes);
    OK(api->host_free(rt, h1));
    OK(api->host_free(rt, h2));
    OK(api->buffer_free(rt, big));
  }

  /* Many OS threads share the runtime. */
  pthread_t th[8];
  for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    CHECK(thread_ok[i], "thread %d", i);
  }

  test_gemm(s, &di);

  OK(api->event_destroy(rt, e0));
  OK(api->event_destroy(rt, e1));
  OK(api->stream_destroy(rt, s2));
  FREE_BUFFERS(rt, bx, by, bz);
  OK(api->module_unload(rt, bmod));
  OK(api->stream_destroy(rt, s));
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 0 && st.live_streams == 0 && st.live_events == 0 &&
            st.live_modules == 0 && st.live_plans == 0,
        "all freed: %llu buffers %llu streams %llu plans", (unsigned long long)st.live_buffers,
        (unsigned long long)st.live_streams, (unsigned long long)st.live_plans);
  OK(api->runtime_destroy(rt));
  return finish();
}
