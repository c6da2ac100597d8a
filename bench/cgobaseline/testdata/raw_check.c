/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks raw.h's own declarations against the real cuda.h and cublasLt.h:
 * enum values and struct layouts at compile time, each function pointer
 * type by calling it and the real function with the same arguments (an
 * arity or pointer-type mistake fails under -Werror), and the symbol each
 * name resolves to at run time (cuda.h maps some to _v2). raw_test.go, when
 * the headers are at hand, compiles it with -fsyntax-only -Werror, then
 * builds it with -DGBR_CHECK_RUN (no CUDA library linked) and runs it.
 */
#include <cuda.h>
#include <cublasLt.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../raw.h"

_Static_assert(sizeof(gbr_CUresult) == sizeof(CUresult), "CUresult");
_Static_assert(GBR_CUDA_SUCCESS == CUDA_SUCCESS, "CUDA_SUCCESS");
_Static_assert(sizeof(gbr_CUdevice) == sizeof(CUdevice), "CUdevice");
_Static_assert(sizeof(gbr_CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(GBR_CU_STREAM_NON_BLOCKING == CU_STREAM_NON_BLOCKING, "non-blocking");
_Static_assert(sizeof(gbr_ltStatus) == sizeof(cublasStatus_t), "cublasStatus_t");
_Static_assert(GBR_CUBLAS_STATUS_SUCCESS == CUBLAS_STATUS_SUCCESS, "status success");
_Static_assert(GBR_CUBLAS_COMPUTE_32F == CUBLAS_COMPUTE_32F, "compute 32F");
_Static_assert(sizeof(int) == sizeof(cublasComputeType_t), "cublasComputeType_t");
_Static_assert(GBR_CUDA_R_32F == CUDA_R_32F, "R_32F");
_Static_assert(GBR_CUDA_R_16BF == CUDA_R_16BF, "R_16BF");
_Static_assert(sizeof(int) == sizeof(cudaDataType_t), "cudaDataType_t");
_Static_assert(GBR_CUBLAS_OP_N == CUBLAS_OP_N, "OP_N");
_Static_assert(GBR_CUBLAS_OP_T == CUBLAS_OP_T, "OP_T");
_Static_assert(GBR_CUBLASLT_MATMUL_DESC_TRANSA == CUBLASLT_MATMUL_DESC_TRANSA, "TRANSA");
_Static_assert(GBR_CUBLASLT_MATMUL_DESC_TRANSB == CUBLASLT_MATMUL_DESC_TRANSB, "TRANSB");
_Static_assert(sizeof(int) == sizeof(cublasLtMatmulDescAttributes_t), "desc attributes");
_Static_assert(GBR_CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ==
                   CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "MAX_WORKSPACE_BYTES");
_Static_assert(sizeof(int) == sizeof(cublasLtMatmulPreferenceAttributes_t), "pref attributes");
_Static_assert(sizeof(gbr_ltAlgo) == sizeof(cublasLtMatmulAlgo_t), "algo");
_Static_assert(sizeof(gbr_ltHeuristic) == sizeof(cublasLtMatmulHeuristicResult_t), "heuristic");
_Static_assert(offsetof(gbr_ltHeuristic, workspaceSize) ==
                   offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize), "workspaceSize");
_Static_assert(offsetof(gbr_ltHeuristic, state) ==
                   offsetof(cublasLtMatmulHeuristicResult_t, state), "state");
_Static_assert(offsetof(gbr_ltHeuristic, wavesCount) ==
                   offsetof(cublasLtMatmulHeuristicResult_t, wavesCount), "wavesCount");
_Static_assert(sizeof(gbr_ltHandle) == sizeof(cublasLtHandle_t), "handle");

#ifndef GBR_CHECK_RUN
/* Compiled only with -fsyntax-only (nothing links a CUDA library): each
 * line must compile against both declarations. */
void check_calls(gbr *g, gbr_CUdevice dev, gbr_CUcontext ctx, gbr_CUstream s,
                 gbr_CUmodule mod, gbr_CUfunction f, gbr_CUdeviceptr p, void **params) {
  gbr_CUresult r = 0;
  gbr_CUdevice d2;
  gbr_CUcontext c2;
  gbr_CUstream s2;
  gbr_CUmodule m2;
  gbr_CUfunction f2;
  gbr_CUdeviceptr p2;
  const char *name;
#define BOTH(fn, args) r |= g->fn args; r |= fn args;
  BOTH(cuInit, (0u))
  BOTH(cuDeviceGet, (&d2, 0))
  BOTH(cuDevicePrimaryCtxRetain, (&c2, dev))
  BOTH(cuDevicePrimaryCtxRelease, (dev))
  BOTH(cuCtxGetCurrent, (&c2))
  BOTH(cuCtxSetCurrent, (ctx))
  BOTH(cuStreamCreate, (&s2, GBR_CU_STREAM_NON_BLOCKING))
  BOTH(cuStreamDestroy, (s))
  BOTH(cuStreamSynchronize, (s))
  BOTH(cuModuleLoadData, (&m2, gbr_fill_ptx))
  BOTH(cuModuleUnload, (mod))
  BOTH(cuModuleGetFunction, (&f2, mod, "gbr_fill_f32"))
  BOTH(cuMemAlloc, (&p2, (size_t)256))
  BOTH(cuMemFree, (p))
  BOTH(cuMemcpyHtoD, (p, params, (size_t)8))
  BOTH(cuLaunchKernel, (f, 1u, 1u, 1u, 1u, 1u, 1u, 0u, s, params, (void **)NULL))
  BOTH(cuGetErrorName, (r, &name))
  gbr_ltStatus st = 0;
  gbr_ltHandle h = NULL;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t l = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  gbr_ltHeuristic gres;
  int found = 0;
  float alpha = 1, beta = 0;
  const cublasLtMatmulAlgo_t *algo = NULL;
  const gbr_ltAlgo *galgo = NULL;
  uint64_t v = 0;
#define BOTHLT(fn, args) st |= g->fn args; st |= fn args;
  BOTHLT(cublasLtCreate, (&h))
  BOTHLT(cublasLtDestroy, (h))
  /* raw.h's descriptors are void *: its out-parameters are void ** */
  gbr_ltDesc gop = NULL;
  gbr_ltLayout gl = NULL;
  gbr_ltPref gpref = NULL;
  st |= g->cublasLtMatmulDescCreate(&gop, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  st |= cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  BOTHLT(cublasLtMatmulDescDestroy, (op))
  BOTHLT(cublasLtMatmulDescSetAttribute, (op, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v))
  st |= g->cublasLtMatrixLayoutCreate(&gl, CUDA_R_16BF, (uint64_t)1, (uint64_t)1, (int64_t)1);
  st |= cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, (uint64_t)1, (uint64_t)1, (int64_t)1);
  BOTHLT(cublasLtMatrixLayoutDestroy, (l))
  st |= g->cublasLtMatmulPreferenceCreate(&gpref);
  st |= cublasLtMatmulPreferenceCreate(&pref);
  BOTHLT(cublasLtMatmulPreferenceDestroy, (pref))
  BOTHLT(cublasLtMatmulPreferenceSetAttribute,
         (pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &v, sizeof v))
  st |= g->cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &gres, &found);
  st |= cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &res, &found);
  st |= g->cublasLtMatmul(h, op, &alpha, params, l, params, l, &beta, params, l, params, l,
                          galgo, params, (size_t)0, s);
  st |= cublasLtMatmul(h, op, &alpha, params, l, params, l, &beta, params, l, params, l, algo,
                       params, (size_t)0, s);
  name = g->cublasLtGetStatusName(st);
  name = cublasLtGetStatusName(st);
  (void)name;
  (void)gop;
  (void)gl;
  (void)gpref;
  (void)r;
}
#endif

#define XSTR(x) #x
#define STR(x) XSTR(x)

int main(void) {
  int bad = 0;
#define SYM(name, sym, params)                                                 \
  if (strcmp(STR(name), sym) != 0) {                                           \
    fprintf(stderr, "raw.h resolves %s as %s, cuda.h maps it to %s\n", #name, sym, \
            STR(name));                                                        \
    bad = 1;                                                                   \
  }
  GBR_CU_FUNCS(SYM)
  GBR_CU_OPT_FUNCS(SYM)
  if (!bad) printf("raw.h matches cuda.h and cublasLt.h\n");
  return bad;
}
