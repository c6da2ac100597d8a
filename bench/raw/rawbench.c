/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rawbench — the raw C baseline for gpurt's benchmarks: the same work done
 * directly on the CUDA driver API and cuBLASLt, printed as JSON lines, one
 * object per metric: {"metric":...,"value":...,"unit":...,...}.
 *
 * Build (scripts/gpu_check.sh does this):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -I/usr/local/cuda/include bench/raw/rawbench.c \
 *      -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcuda -lm \
 *      -o build/rawbench
 * Run: build/rawbench [--quick]
 *
 * Timings: host costs are wall-clock medians over batches; GPU times are
 * CUDA events around each run, median after warm-up. GEMM inputs are random
 * (never zeros). Layout TN (op(A) = A^T, column-major), bf16 in/out, f32
 * accumulation, 32 MiB workspace, the heuristic's top algorithm.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cuda.h>

static int quick;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void emit(const char *metric, double value, const char *unit, const char *extra) {
  printf("{\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"source\":\"raw\"%s%s}\n", metric,
         value, unit, extra && *extra ? "," : "", extra ? extra : "");
  fflush(stdout);
}

#define CK(call)                                                            \
  do {                                                                      \
    CUresult r_ = (call);                                                   \
    if (r_ != CUDA_SUCCESS) {                                               \
      const char *n_ = "?";                                                 \
      cuGetErrorName(r_, &n_);                                              \
      fprintf(stderr, "rawbench: %s failed: %s (line %d)\n", #call, n_, __LINE__); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

#define LK(call)                                                            \
  do {                                                                      \
    cublasStatus_t s_ = (call);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                      \
      fprintf(stderr, "rawbench: %s failed: %s (line %d)\n", #call,         \
              cublasLtGetStatusName(s_), __LINE__);                         \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static const char *ptx =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry empty()\n{\n ret;\n}\n"
    ".visible .entry args3(.param .u64 p0, .param .f32 p1, .param .u64 p2)\n{\n ret;\n}\n";

static void bench_launch(CUstream s) {
  CUmodule mod;
  CK(cuModuleLoadData(&mod, ptx));
  CUfunction fe, f3;
  CK(cuModuleGetFunction(&fe, mod, "empty"));
  CK(cuModuleGetFunction(&f3, mod, "args3"));
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 4096));
  float a = 1.0f;
  unsigned long long n = 1024;
  void *args[3] = {&p, &a, &n};
  const int batches = quick ? 10 : 50, per = 1000;
  for (int which = 0; which < 2; which++) {
    CUfunction f = which ? f3 : fe;
    void **pa = which ? args : NULL;
    for (int i = 0; i < 1000; i++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, pa, NULL));
    CK(cuStreamSynchronize(s));
    double v[64];
    for (int b = 0; b < batches; b++) {
      double t0 = now_us();
      for (int i = 0; i < per; i++) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, pa, NULL);
      double t1 = now_us();
      CK(cuStreamSynchronize(s));
      v[b] = (t1 - t0) / per;
    }
    emit("launch_host_us", median(v, batches), "us",
         which ? "\"kernel\":\"args3(u64,f32,u64)\",\"grid\":1,\"block\":32"
               : "\"kernel\":\"empty\",\"grid\":1,\"block\":32");
  }
  CK(cuMemFree(p));
  CK(cuModuleUnload(mod));
}

static void bench_copies(CUstream s) {
  size_t sizes[2] = {256u << 20, 1u << 30};
  for (int si = 0; si < 2; si++) {
    size_t n = sizes[si];
    void *h;
    CK(cuMemHostAlloc(&h, n, CU_MEMHOSTALLOC_PORTABLE));
    memset(h, 0x5a, n);
    CUdeviceptr d, d2;
    CK(cuMemAlloc(&d, n));
    CK(cuMemAlloc(&d2, n));
    const int reps = quick ? 3 : 7;
    double up[16], down[16], dd[16];
    for (int r = 0; r < reps + 1; r++) {
      double t0 = now_us();
      CK(cuMemcpyHtoDAsync(d, h, n, s));
      CK(cuStreamSynchronize(s));
      double t1 = now_us();
      CK(cuMemcpyDtoHAsync(h, d, n, s));
      CK(cuStreamSynchronize(s));
      double t2 = now_us();
      CK(cuMemcpyDtoDAsync(d2, d, n, s));
      CK(cuStreamSynchronize(s));
      double t3 = now_us();
      if (r == 0) continue; /* warm-up */
      up[r - 1] = n / ((t1 - t0) * 1e3);
      down[r - 1] = n / ((t2 - t1) * 1e3);
      dd[r - 1] = n / ((t3 - t2) * 1e3);
    }
    char extra[64];
    snprintf(extra, sizeof extra, "\"bytes\":%zu", n);
    emit("copy_pinned_htod_gbps", median(up, reps), "GB/s", extra);
    emit("copy_pinned_dtoh_gbps", median(down, reps), "GB/s", extra);
    emit("copy_dtod_gbps", median(dd, reps), "GB/s", extra); /* bytes copied / s */
    if (si == 0) {
      char *pg = malloc(n);
      memset(pg, 0x33, n);
      for (int r = 0; r < reps + 1; r++) {
        double t0 = now_us();
        CK(cuMemcpyHtoD(d, pg, n));
        CK(cuCtxSynchronize());
        double t1 = now_us();
        CK(cuMemcpyDtoH(pg, d, n));
        double t2 = now_us();
        if (r == 0) continue;
        up[r - 1] = n / ((t1 - t0) * 1e3);
        down[r - 1] = n / ((t2 - t1) * 1e3);
      }
      emit("copy_pageable_htod_gbps", median(up, reps), "GB/s", extra);
      emit("copy_pageable_dtoh_gbps", median(down, reps), "GB/s", extra);
      free(pg);
    }
    CK(cuMemFree(d));
    CK(cuMemFree(d2));
    CK(cuMemFreeHost(h));
  }
}

static unsigned short bf16_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static void fill_random_bf16(CUdeviceptr d, size_t elems, unsigned seed) {
  size_t chunk = 1u << 24;
  unsigned short *h = malloc(chunk * 2);
  unsigned long long x = 0x9e3779b97f4a7c15ull ^ seed;
  for (size_t off = 0; off < elems; off += chunk) {
    size_t n = elems - off < chunk ? elems - off : chunk;
    for (size_t i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      h[i] = bf16_bits(((float)((x >> 40) & 0xffff) / 32768.0f - 1.0f) * 0.5f);
    }
    CK(cuMemcpyHtoD(d + off * 2, h, n * 2));
  }
  free(h);
}

typedef struct gemm_case {
  const char *name;
  int m, n, k;
} gemm_case;

static void bench_gemm(CUstream s) {
  double t0 = now_us();
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  emit("cublaslt_create_ms", (now_us() - t0) / 1e3, "ms", NULL);
  const size_t wsz = 32u << 20;
  CUdeviceptr ws;
  CK(cuMemAlloc(&ws, wsz));
  gemm_case cases[] = {
      {"square", 8192, 8192, 8192},  {"decode", 14336, 1, 4096}, {"decode", 14336, 16, 4096},
      {"decode", 14336, 64, 4096},   {"decode", 4096, 1, 4096},  {"prefill", 14336, 2048, 4096},
  };
  CUevent e0, e1;
  CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    gemm_case c = cases[ci];
    if (quick && c.m == 8192) continue;
    CUdeviceptr A, B, D;
    CK(cuMemAlloc(&A, (size_t)c.m * c.k * 2));
    CK(cuMemAlloc(&B, (size_t)c.k * c.n * 2));
    CK(cuMemAlloc(&D, (size_t)c.m * c.n * 2));
    fill_random_bf16(A, (size_t)c.m * c.k, 1);
    fill_random_bf16(B, (size_t)c.k * c.n, 2);
    cublasLtMatmulDesc_t op;
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c.k, c.m, c.k));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c.k, c.n, c.k));
    LK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, c.m, c.n, c.m));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsz;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                            sizeof w));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    double h0 = now_us();
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found));
    double h1 = now_us();
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found));
    double h2 = now_us();
    char extra[160];
    snprintf(extra, sizeof extra,
             "\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"dtype\":\"bf16\",\"layout\":\"TN\"",
             c.name, c.m, c.n, c.k);
    emit("gemm_heuristic_first_us", h1 - h0, "us", extra);
    emit("gemm_heuristic_repeat_us", h2 - h1, "us", extra);
    if (!found) {
      fprintf(stderr, "rawbench: no cuBLASLt algorithm for %d x %d x %d\n", c.m, c.n, c.k);
      continue;
    }
    float alpha = 1, beta = 0;
#define MM()                                                                                  \
  cublasLtMatmul(lt, op, &alpha, (void *)A, la, (void *)B, lb, &beta, (void *)D, ld, (void *)D, \
                 ld, &res.algo, (void *)ws, wsz, (cudaStream_t)s)
    for (int i = 0; i < 10; i++) LK(MM());
    CK(cuStreamSynchronize(s));
    int reps = quick ? 10 : 50;
    double v[64];
    for (int r = 0; r < reps; r++) {
      CK(cuEventRecord(e0, s));
      LK(MM());
      CK(cuEventRecord(e1, s));
      CK(cuEventSynchronize(e1));
      float ms;
      CK(cuEventElapsedTime(&ms, e0, e1));
      v[r] = ms * 1e3;
    }
    double us = median(v, reps);
    double flops = 2.0 * c.m * c.n * c.k;
    double bytes = 2.0 * ((double)c.m * c.k + (double)c.k * c.n + (double)c.m * c.n);
    emit("gemm_us", us, "us", extra);
    emit("gemm_tflops", flops / (us * 1e6), "TFLOP/s", extra);
    emit("gemm_tbps", bytes / (us * 1e6), "TB/s", extra);
    /* Host cost of one call (batches of 20, then drain the queue). */
    if (c.n == 1 && c.m == 4096) {
      double hv[256];
      int nb = quick ? 20 : 100, per = 20;
      for (int b = 0; b < nb; b++) {
        double t0b = now_us();
        for (int i = 0; i < per; i++) MM();
        double t1b = now_us();
        CK(cuStreamSynchronize(s));
        hv[b] = (t1b - t0b) / per;
      }
      emit("gemm_host_us", median(hv, nb), "us", extra);
    }
#undef MM
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    CK(cuMemFree(A));
    CK(cuMemFree(B));
    CK(cuMemFree(D));
  }
  CK(cuMemFree(ws));
  cublasLtDestroy(lt);
}

int main(int argc, char **argv) {
  quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  double t0 = now_us();
  CK(cuInit(0));
  double t1 = now_us();
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuCtxSynchronize());
  double t2 = now_us();
  char name[256];
  cuDeviceGetName(name, sizeof name, dev);
  int ver = 0;
  cuDriverGetVersion(&ver);
  char extra[400];
  snprintf(extra, sizeof extra, "\"device\":\"%s\",\"driver\":%d", name, ver);
  emit("cuinit_ms", (t1 - t0) / 1e3, "ms", extra);
  emit("primary_ctx_create_ms", (t2 - t1) / 1e3, "ms", extra);
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  bench_launch(s);
  bench_copies(s);
  bench_gemm(s);
  CK(cuStreamDestroy(s));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
