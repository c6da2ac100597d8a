/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The raw baseline: the CUDA driver and cuBLASLt called directly, with no
 * plugin in between, in the process that measures gpurt and the plugin —
 * so that gpurt's launch and GEMM host costs are compared with
 * cuLaunchKernel and cublasLtMatmul in the same process, the same batches
 * and the same interleaving (cmd/gpurt-cgobench).
 *
 * No CUDA header is needed to build it (CI builds it without CUDA): the
 * few types, enum values and prototypes it uses are declared here, with
 * gbr_/GBR_ names; testdata/raw_check.c compiles them against the real
 * cuda.h and cublasLt.h when those are at hand (raw_test.go). The handle
 * types use cuda.h's struct tags, so that the check is exact for them.
 *
 * Static functions only: included once, by raw.go's preamble. Every
 * CUresult and cublasStatus_t is checked; a failure writes the step into
 * msg and returns 1 (the caller skips that metric).
 */
#ifndef GPURT_CGOBASELINE_RAW_H_
#define GPURT_CGOBASELINE_RAW_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_cublaslt.h"

/* ---- cuda.h, the part used -------------------------------------------- */

typedef int gbr_CUresult; /* CUresult: an enum, 0 = CUDA_SUCCESS */
typedef int gbr_CUdevice;
typedef unsigned long long gbr_CUdeviceptr; /* CUdeviceptr_v2 (64-bit) */
typedef struct CUctx_st *gbr_CUcontext;
typedef struct CUmod_st *gbr_CUmodule;
typedef struct CUfunc_st *gbr_CUfunction;
typedef struct CUstream_st *gbr_CUstream;
#define GBR_CUDA_SUCCESS 0
#define GBR_CU_STREAM_NON_BLOCKING 0x1u /* as the cuda plugin's streams */

/* Each driver function: X(return-less name, symbol, parameter list). The
 * symbols are the ones cuda.h maps the names to (the _v2 ABI). */
#define GBR_CU_FUNCS(X)                                                      \
  X(cuInit, "cuInit", (unsigned int flags))                                  \
  X(cuDeviceGet, "cuDeviceGet", (gbr_CUdevice * dev, int ordinal))           \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                    \
    (gbr_CUcontext * pctx, gbr_CUdevice dev))                                \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",               \
    (gbr_CUdevice dev))                                                      \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", (gbr_CUcontext * pctx))              \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (gbr_CUcontext ctx))                 \
  X(cuStreamCreate, "cuStreamCreate",                                        \
    (gbr_CUstream * ph, unsigned int flags))                                 \
  X(cuStreamDestroy, "cuStreamDestroy_v2", (gbr_CUstream h))                 \
  X(cuStreamSynchronize, "cuStreamSynchronize", (gbr_CUstream h))            \
  X(cuModuleLoadData, "cuModuleLoadData",                                    \
    (gbr_CUmodule * module, const void *image))                              \
  X(cuModuleUnload, "cuModuleUnload", (gbr_CUmodule hmod))                   \
  X(cuModuleGetFunction, "cuModuleGetFunction",                              \
    (gbr_CUfunction * hfunc, gbr_CUmodule hmod, const char *name))           \
  X(cuMemAlloc, "cuMemAlloc_v2", (gbr_CUdeviceptr * dptr, size_t bytesize))  \
  X(cuMemFree, "cuMemFree_v2", (gbr_CUdeviceptr dptr))                       \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2",                                         \
    (gbr_CUdeviceptr dst, const void *src, size_t bytes))                    \
  X(cuLaunchKernel, "cuLaunchKernel",                                        \
    (gbr_CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,    \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,  \
     gbr_CUstream s, void **params, void **extra))

/* Optional: only for error text. */
#define GBR_CU_OPT_FUNCS(X)                                                  \
  X(cuGetErrorName, "cuGetErrorName", (gbr_CUresult error, const char **s))

#define GBR_CU_TYPEDEF(name, sym, params) typedef gbr_CUresult(*gbr_##name##_fn) params;
GBR_CU_FUNCS(GBR_CU_TYPEDEF)
GBR_CU_OPT_FUNCS(GBR_CU_TYPEDEF)
#undef GBR_CU_TYPEDEF

/* ---- cublasLt.h, the part used ----------------------------------------- */

typedef int gbr_ltStatus; /* cublasStatus_t, 0 = CUBLAS_STATUS_SUCCESS */
typedef struct cublasLtContext *gbr_ltHandle;
typedef void *gbr_ltDesc;   /* cublasLtMatmulDesc_t */
typedef void *gbr_ltLayout; /* cublasLtMatrixLayout_t */
typedef void *gbr_ltPref;   /* cublasLtMatmulPreference_t */
typedef struct {
  uint64_t data[8];
} gbr_ltAlgo; /* cublasLtMatmulAlgo_t */
typedef struct {
  gbr_ltAlgo algo;
  size_t workspaceSize;
  gbr_ltStatus state;
  float wavesCount;
  int reserved[4];
} gbr_ltHeuristic; /* cublasLtMatmulHeuristicResult_t */

#define GBR_CUBLAS_STATUS_SUCCESS 0
#define GBR_CUBLAS_COMPUTE_32F 68               /* cublasComputeType_t */
#define GBR_CUDA_R_32F 0                        /* cudaDataType_t */
#define GBR_CUDA_R_16BF 14                      /* cudaDataType_t */
#define GBR_CUBLAS_OP_N 0                       /* cublasOperation_t */
#define GBR_CUBLAS_OP_T 1                       /* cublasOperation_t */
#define GBR_CUBLASLT_MATMUL_DESC_TRANSA 3       /* cublasLtMatmulDescAttributes_t */
#define GBR_CUBLASLT_MATMUL_DESC_TRANSB 4       /* cublasLtMatmulDescAttributes_t */
#define GBR_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES 1 /* ...PreferenceAttributes_t */
/* The cuda plugin's GEMM workspace (plugins/cuda/src/cuda_gemm.c). */
#define GBR_GEMM_WORKSPACE (32u << 20)

#define GBR_LT_FUNCS(X)                                                      \
  X(cublasLtCreate, (gbr_ltHandle * h))                                      \
  X(cublasLtDestroy, (gbr_ltHandle h))                                       \
  X(cublasLtMatmulDescCreate,                                                \
    (gbr_ltDesc * d, int compute_type, int scale_type))                      \
  X(cublasLtMatmulDescDestroy, (gbr_ltDesc d))                               \
  X(cublasLtMatmulDescSetAttribute,                                          \
    (gbr_ltDesc d, int attr, const void *buf, size_t size))                  \
  X(cublasLtMatrixLayoutCreate,                                              \
    (gbr_ltLayout * l, int type, uint64_t rows, uint64_t cols, int64_t ld))  \
  X(cublasLtMatrixLayoutDestroy, (gbr_ltLayout l))                           \
  X(cublasLtMatmulPreferenceCreate, (gbr_ltPref * p))                        \
  X(cublasLtMatmulPreferenceDestroy, (gbr_ltPref p))                         \
  X(cublasLtMatmulPreferenceSetAttribute,                                    \
    (gbr_ltPref p, int attr, const void *buf, size_t size))                  \
  X(cublasLtMatmulAlgoGetHeuristic,                                          \
    (gbr_ltHandle h, gbr_ltDesc op, gbr_ltLayout a, gbr_ltLayout b,          \
     gbr_ltLayout c, gbr_ltLayout d, gbr_ltPref pref, int requested,         \
     gbr_ltHeuristic *results, int *count))                                  \
  X(cublasLtMatmul,                                                          \
    (gbr_ltHandle h, gbr_ltDesc op, const void *alpha, const void *A,        \
     gbr_ltLayout la, const void *B, gbr_ltLayout lb, const void *beta,      \
     const void *C, gbr_ltLayout lc, void *D, gbr_ltLayout ld,               \
     const gbr_ltAlgo *algo, void *workspace, size_t workspace_size,         \
     gbr_CUstream stream))

#define GBR_LT_TYPEDEF(name, params) typedef gbr_ltStatus(*gbr_##name##_fn) params;
GBR_LT_FUNCS(GBR_LT_TYPEDEF)
#undef GBR_LT_TYPEDEF
typedef const char *(*gbr_cublasLtGetStatusName_fn)(gbr_ltStatus s);

/* ---- the kernel ---------------------------------------------------------- */

/* gbr_fill_f32(u64 y, f32 value, u64 n): y[i] = value for i < n, i the
 * global thread index: fill_f32's parameters, written by hand (PTX ISA 7.0,
 * sm_80; the driver JITs it for the device). */
static const char gbr_fill_ptx[] =
    ".version 7.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry gbr_fill_f32(\n"
    "  .param .u64 gbr_fill_f32_y,\n"
    "  .param .f32 gbr_fill_f32_v,\n"
    "  .param .u64 gbr_fill_f32_n\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<4>;\n"
    "  .reg .f32 %f<2>;\n"
    "  .reg .b64 %rd<8>;\n"
    "\n"
    "  ld.param.u64 %rd1, [gbr_fill_f32_y];\n"
    "  ld.param.f32 %f1, [gbr_fill_f32_v];\n"
    "  ld.param.u64 %rd2, [gbr_fill_f32_n];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mul.wide.u32 %rd3, %r1, %r2;\n"
    "  cvt.u64.u32 %rd4, %r3;\n"
    "  add.s64 %rd3, %rd3, %rd4;\n"
    "  setp.ge.u64 %p1, %rd3, %rd2;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd5, %rd1;\n"
    "  shl.b64 %rd6, %rd3, 2;\n"
    "  add.s64 %rd7, %rd5, %rd6;\n"
    "  st.global.f32 [%rd7], %f1;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

/* ---- state ----------------------------------------------------------------- */

typedef struct gbr {
  void *cuda;
#define GBR_FIELD(name, sym, params) gbr_##name##_fn name;
  GBR_CU_FUNCS(GBR_FIELD)
  GBR_CU_OPT_FUNCS(GBR_FIELD)
#undef GBR_FIELD
  gbr_CUdevice dev;
  gbr_CUcontext ctx; /* device 0's primary context (retained) */
  gbr_CUstream s;
  /* launch */
  gbr_CUmodule mod;
  gbr_CUfunction fill;
  gbr_CUdeviceptr fill_buf; /* 256 bytes */
  /* gemm */
  void *ltlib;
#define GBR_LT_FIELD(name, params) gbr_##name##_fn name;
  GBR_LT_FUNCS(GBR_LT_FIELD)
#undef GBR_LT_FIELD
  gbr_cublasLtGetStatusName_fn cublasLtGetStatusName;
  gbr_ltHandle lt;
  gbr_ltDesc op;
  gbr_ltLayout la, lb, ld;
  gbr_ltAlgo algo;
  gbr_CUdeviceptr ga, gb, gd, ws;
  int gemm_ready;
} gbr;

/* "step: CUDA_ERROR_X (code)" into msg. Returns 1. */
static int gbr_cu_fail(const gbr *g, const char *step, gbr_CUresult r, char *msg,
                       size_t cap) {
  const char *name = NULL;
  if (g->cuGetErrorName == NULL || g->cuGetErrorName(r, &name) != GBR_CUDA_SUCCESS)
    name = NULL;
  snprintf(msg, cap, "%s: %s (CUresult %d)", step, name ? name : "error", r);
  return 1;
}

static int gbr_lt_fail(const gbr *g, const char *step, gbr_ltStatus s, char *msg,
                       size_t cap) {
  const char *name = g->cublasLtGetStatusName ? g->cublasLtGetStatusName(s) : NULL;
  snprintf(msg, cap, "%s: %s (cublasStatus_t %d)", step, name ? name : "error", s);
  return 1;
}

#define GBR_CK(call, step)                                                   \
  do {                                                                       \
    gbr_CUresult r_ = (call);                                                \
    if (r_ != GBR_CUDA_SUCCESS) return gbr_cu_fail(g, step, r_, msg, cap);   \
  } while (0)

#define GBR_LK(call, step)                                                   \
  do {                                                                       \
    gbr_ltStatus s_ = (call);                                                \
    if (s_ != GBR_CUBLAS_STATUS_SUCCESS)                                     \
      return gbr_lt_fail(g, step, s_, msg, cap);                             \
  } while (0)

/* Makes the primary context current on the calling thread (a goroutine
 * may have moved to another thread since the last call): one
 * cuCtxGetCurrent per batch, a set only when it differs. */
static gbr_CUresult gbr_enter(gbr *g) {
  gbr_CUcontext cur = NULL;
  gbr_CUresult r = g->cuCtxGetCurrent(&cur);
  if (r == GBR_CUDA_SUCCESS && cur != g->ctx) r = g->cuCtxSetCurrent(g->ctx);
  return r;
}

/* Loads libcuda.so.1, initialises the driver, retains device 0's primary
 * context (the one the cuda plugin uses) and creates a non-blocking
 * stream. 0 on success; otherwise 1 with the failing step in msg. */
static int gbr_open(gbr *g, char *msg, size_t cap) {
  memset(g, 0, sizeof *g);
  dlerror();
  g->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g->cuda == NULL) {
    const char *e = dlerror();
    snprintf(msg, cap, "dlopen libcuda.so.1: %s", e ? e : "failed");
    return 1;
  }
#define GBR_RESOLVE(name, sym, params)                                       \
  g->name = (gbr_##name##_fn)dlsym(g->cuda, sym);                            \
  if (g->name == NULL) {                                                     \
    snprintf(msg, cap, "libcuda.so.1 has no %s", sym);                       \
    return 1;                                                                \
  }
  GBR_CU_FUNCS(GBR_RESOLVE)
#undef GBR_RESOLVE
#define GBR_RESOLVE_OPT(name, sym, params) g->name = (gbr_##name##_fn)dlsym(g->cuda, sym);
  GBR_CU_OPT_FUNCS(GBR_RESOLVE_OPT)
#undef GBR_RESOLVE_OPT
  GBR_CK(g->cuInit(0), "cuInit");
  GBR_CK(g->cuDeviceGet(&g->dev, 0), "cuDeviceGet 0");
  GBR_CK(g->cuDevicePrimaryCtxRetain(&g->ctx, g->dev), "cuDevicePrimaryCtxRetain");
  gbr_CUresult r = g->cuCtxSetCurrent(g->ctx);
  if (r == GBR_CUDA_SUCCESS) r = g->cuStreamCreate(&g->s, GBR_CU_STREAM_NON_BLOCKING);
  if (r != GBR_CUDA_SUCCESS) {
    gbr_cu_fail(g, g->s == NULL ? "cuCtxSetCurrent / cuStreamCreate" : "cuStreamCreate", r,
                msg, cap);
    g->s = NULL;
    g->cuDevicePrimaryCtxRelease(g->dev);
    g->ctx = NULL;
    return 1;
  }
  return 0;
}

/* Loads the PTX module, gets gbr_fill_f32, allocates its 256-byte buffer
 * and runs one launch to completion. 0 on success; 1 with msg. */
static int gbr_prepare_launch(gbr *g, char *msg, size_t cap) {
  if (g->ctx == NULL) {
    snprintf(msg, cap, "the raw driver is not open");
    return 1;
  }
  if (g->fill != NULL) return 0;
  GBR_CK(gbr_enter(g), "cuCtxSetCurrent");
  GBR_CK(g->cuModuleLoadData(&g->mod, gbr_fill_ptx), "cuModuleLoadData (the fill PTX)");
  GBR_CK(g->cuModuleGetFunction(&g->fill, g->mod, "gbr_fill_f32"),
         "cuModuleGetFunction gbr_fill_f32");
  GBR_CK(g->cuMemAlloc(&g->fill_buf, 256), "cuMemAlloc 256 bytes");
  gbr_CUdeviceptr y = g->fill_buf;
  float v = 1.0f;
  uint64_t n = 1;
  void *params[3] = {&y, &v, &n};
  GBR_CK(g->cuLaunchKernel(g->fill, 1, 1, 1, 1, 1, 1, 0, g->s, params, NULL),
         "cuLaunchKernel gbr_fill_f32");
  GBR_CK(g->cuStreamSynchronize(g->s), "cuStreamSynchronize after the first launch");
  return 0;
}

/* n launches of gbr_fill_f32(y, 1.0f, n = 1), grid 1, block 1, from C:
 * what a direct driver caller does (the Stream.Launch and launch slot
 * figures use the same configuration). 0, or the first failure's
 * CUresult (it stops there). */
static gbr_CUresult gbr_launch_loop(gbr *g, int n) {
  gbr_CUresult r = gbr_enter(g);
  if (r != GBR_CUDA_SUCCESS) return r;
  gbr_CUdeviceptr y = g->fill_buf;
  float v = 1.0f;
  uint64_t cnt = 1;
  void *params[3] = {&y, &v, &cnt};
  for (int i = 0; i < n; i++) {
    r = g->cuLaunchKernel(g->fill, 1, 1, 1, 1, 1, 1, 0, g->s, params, NULL);
    if (r != GBR_CUDA_SUCCESS) return r;
  }
  return GBR_CUDA_SUCCESS;
}

static gbr_CUresult gbr_synchronize(gbr *g) {
  gbr_CUresult r = gbr_enter(g);
  if (r != GBR_CUDA_SUCCESS) return r;
  return g->cuStreamSynchronize(g->s);
}

/* Writes "op: CUDA_ERROR_X (code)" of r into msg. */
static void gbr_result_message(const gbr *g, gbr_CUresult r, const char *op, char *msg,
                               size_t cap) {
  gbr_cu_fail(g, op, r, msg, cap);
}

/* Opens cuBLASLt: GPURT_CUBLASLT_PATH, then the library name, then the
 * toolkit's usual folders (csrc/gp_cublaslt.h's list, the cuda plugin's). */
static int gbr_lt_load(gbr *g, char *msg, size_t cap) {
  if (g->ltlib != NULL) return 0;
  const char *cands[] = {getenv("GPURT_CUBLASLT_PATH"), GP_CUBLASLT_CANDIDATES};
  char first[400] = "";
  for (size_t i = 0; i < sizeof cands / sizeof cands[0] && g->ltlib == NULL; i++) {
    if (cands[i] == NULL || cands[i][0] == 0) continue;
    dlerror();
    g->ltlib = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
    if (g->ltlib == NULL && first[0] == 0) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%s", e ? e : cands[i]);
    }
  }
  if (g->ltlib == NULL) {
    snprintf(msg, cap,
             "libcublasLt.so.13 not found (%s; also tried /usr/local/cuda; set "
             "GPURT_CUBLASLT_PATH to its path)", first);
    return 1;
  }
#define GBR_LT_RESOLVE(name, params)                                         \
  g->name = (gbr_##name##_fn)dlsym(g->ltlib, #name);                         \
  if (g->name == NULL) {                                                     \
    snprintf(msg, cap, "libcublasLt.so.13 has no %s", #name);                \
    g->ltlib = NULL;                                                         \
    return 1;                                                                \
  }
  GBR_LT_FUNCS(GBR_LT_RESOLVE)
#undef GBR_LT_RESOLVE
  g->cublasLtGetStatusName =
      (gbr_cublasLtGetStatusName_fn)dlsym(g->ltlib, "cublasLtGetStatusName");
  return 0;
}

/* The cuda plugin's plan for the descriptor gb_prepare_gemm passes
 * (plugins/cuda/src/cuda_gemm.c), made directly: compute 32F, scale 32F,
 * TRANSA T, TRANSB N, bf16 A (k x m, ld k), B (k x n, ld k) and D (m x n,
 * ld m), C = D (one layout, C pointer D, beta 0), a preference with the
 * 32 MiB workspace bound and no alignment attributes (256 bytes is
 * cuBLASLt's default, so the plugin sets none), the heuristic's first
 * algorithm. Allocates A, B, D and the 32 MiB workspace and copies a
 * (2*k*m bytes) and b (2*k*n bytes) in. 0 on success; 1 with msg. */
static int gbr_prepare_gemm(gbr *g, uint64_t m, uint64_t n, uint64_t k, const void *a,
                            const void *b, char *msg, size_t cap) {
  if (g->ctx == NULL) {
    snprintf(msg, cap, "the raw driver is not open");
    return 1;
  }
  if (g->gemm_ready) {
    snprintf(msg, cap, "a raw GEMM is already prepared");
    return 1;
  }
  if (gbr_lt_load(g, msg, cap)) return 1;
  GBR_CK(gbr_enter(g), "cuCtxSetCurrent");
  if (g->lt == NULL) GBR_LK(g->cublasLtCreate(&g->lt), "cublasLtCreate");
  GBR_LK(g->cublasLtMatmulDescCreate(&g->op, GBR_CUBLAS_COMPUTE_32F, GBR_CUDA_R_32F),
         "cublasLtMatmulDescCreate");
  int32_t ta = GBR_CUBLAS_OP_T, tb = GBR_CUBLAS_OP_N;
  GBR_LK(g->cublasLtMatmulDescSetAttribute(g->op, GBR_CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                           sizeof ta),
         "cublasLtMatmulDescSetAttribute TRANSA");
  GBR_LK(g->cublasLtMatmulDescSetAttribute(g->op, GBR_CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                           sizeof tb),
         "cublasLtMatmulDescSetAttribute TRANSB");
  GBR_LK(g->cublasLtMatrixLayoutCreate(&g->la, GBR_CUDA_R_16BF, k, m, (int64_t)k),
         "cublasLtMatrixLayoutCreate A");
  GBR_LK(g->cublasLtMatrixLayoutCreate(&g->lb, GBR_CUDA_R_16BF, k, n, (int64_t)k),
         "cublasLtMatrixLayoutCreate B");
  GBR_LK(g->cublasLtMatrixLayoutCreate(&g->ld, GBR_CUDA_R_16BF, m, n, (int64_t)m),
         "cublasLtMatrixLayoutCreate D");
  gbr_ltPref pref = NULL;
  GBR_LK(g->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t wsmax = GBR_GEMM_WORKSPACE;
  gbr_ltStatus s = g->cublasLtMatmulPreferenceSetAttribute(
      pref, GBR_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax, sizeof wsmax);
  if (s != GBR_CUBLAS_STATUS_SUCCESS) {
    g->cublasLtMatmulPreferenceDestroy(pref);
    return gbr_lt_fail(g, "cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES", s, msg,
                       cap);
  }
  gbr_ltHeuristic res;
  memset(&res, 0, sizeof res);
  int found = 0;
  s = g->cublasLtMatmulAlgoGetHeuristic(g->lt, g->op, g->la, g->lb, g->ld, g->ld, pref, 1,
                                        &res, &found);
  g->cublasLtMatmulPreferenceDestroy(pref);
  if (s != GBR_CUBLAS_STATUS_SUCCESS)
    return gbr_lt_fail(g, "cublasLtMatmulAlgoGetHeuristic", s, msg, cap);
  if (found == 0) {
    snprintf(msg, cap, "cublasLtMatmulAlgoGetHeuristic: no algorithm for bf16 m=%llu n=%llu "
             "k=%llu", (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
    return 1;
  }
  g->algo = res.algo;
  GBR_CK(g->cuMemAlloc(&g->ga, (size_t)(2 * k * m)), "cuMemAlloc A");
  GBR_CK(g->cuMemAlloc(&g->gb, (size_t)(2 * k * n)), "cuMemAlloc B");
  GBR_CK(g->cuMemAlloc(&g->gd, (size_t)(2 * m * n)), "cuMemAlloc D");
  GBR_CK(g->cuMemAlloc(&g->ws, GBR_GEMM_WORKSPACE), "cuMemAlloc the 32 MiB workspace");
  GBR_CK(g->cuMemcpyHtoD(g->ga, a, (size_t)(2 * k * m)), "cuMemcpyHtoD A");
  GBR_CK(g->cuMemcpyHtoD(g->gb, b, (size_t)(2 * k * n)), "cuMemcpyHtoD B");
  g->gemm_ready = 1;
  return 0;
}

/* n cublasLtMatmul calls from C (D = A^T B, alpha 1, beta 0, C = D, the
 * 32 MiB workspace) on the raw stream. Returns 0 or the first failure's
 * status (it stops there); *cu_out gets a CUresult when entering the
 * context failed. */
static gbr_ltStatus gbr_gemm_loop(gbr *g, int n, gbr_CUresult *cu_out) {
  *cu_out = gbr_enter(g);
  if (*cu_out != GBR_CUDA_SUCCESS) return GBR_CUBLAS_STATUS_SUCCESS;
  const float alpha = 1.0f, beta = 0.0f;
  void *D = (void *)(uintptr_t)g->gd;
  for (int i = 0; i < n; i++) {
    gbr_ltStatus s = g->cublasLtMatmul(
        g->lt, g->op, &alpha, (const void *)(uintptr_t)g->ga, g->la,
        (const void *)(uintptr_t)g->gb, g->lb, &beta, D, g->ld, D, g->ld, &g->algo,
        (void *)(uintptr_t)g->ws, GBR_GEMM_WORKSPACE, g->s);
    if (s != GBR_CUBLAS_STATUS_SUCCESS) return s;
  }
  return GBR_CUBLAS_STATUS_SUCCESS;
}

/* Writes "op: CUBLAS_STATUS_X (code)" of s into msg. */
static void gbr_status_message(const gbr *g, gbr_ltStatus s, const char *op, char *msg,
                               size_t cap) {
  gbr_lt_fail(g, op, s, msg, cap);
}

/* Waits for the stream, frees everything, releases the primary context
 * (the libraries stay loaded). */
static void gbr_close(gbr *g) {
  if (g->ctx == NULL) return;
  if (gbr_enter(g) == GBR_CUDA_SUCCESS) {
    if (g->s) g->cuStreamSynchronize(g->s);
    if (g->op) g->cublasLtMatmulDescDestroy(g->op);
    if (g->la) g->cublasLtMatrixLayoutDestroy(g->la);
    if (g->lb) g->cublasLtMatrixLayoutDestroy(g->lb);
    if (g->ld) g->cublasLtMatrixLayoutDestroy(g->ld);
    if (g->lt) g->cublasLtDestroy(g->lt);
    gbr_CUdeviceptr bufs[5] = {g->ga, g->gb, g->gd, g->ws, g->fill_buf};
    for (int i = 0; i < 5; i++)
      if (bufs[i]) g->cuMemFree(bufs[i]);
    if (g->mod) g->cuModuleUnload(g->mod);
    if (g->s) g->cuStreamDestroy(g->s);
  }
  g->cuDevicePrimaryCtxRelease(g->dev);
  memset(g, 0, sizeof *g); /* the libraries are never dlclose'd */
}

#endif
