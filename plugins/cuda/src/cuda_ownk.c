/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plugin's own kernels of cuda_quant.cu (their own embedded fatbin,
 * cuda_quant_fatbin.S), loaded per device on first use, and what launches
 * them: cu_own_fn (a kernel by name, cached in a slot), cu_own_launch
 * (one launch, programmatic dependent launch for the kernels that wait for
 * their predecessor), and the GEMM slot's 16-bit GEMV (cu_bgemv, for
 * cuda_gemm.c). cuda_quant.c (quantized and grouped matmul) and cuda_gemm.c
 * both sit above this file.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

CU_HIDDEN extern const unsigned char gpurt_cuda_quant_fatbin[];

typedef struct cu_own_dev {
  CUmodule mod;
  CUfunction fn[CU_OWN_FNS];
  /* cu_own_fn_smem: 0 not asked yet, 1 the dynamic shared memory granted, 2 refused */
  unsigned char smem[CU_OWN_FNS];
} cu_own_dev;

/* The kernel in slot v, fetched on first use; smem > 0: its dynamic
 * shared memory limit raised to smem on that first use (*ok 1 when
 * granted), under the same lock. */
static gpurt_error *own_fn(cu_runtime *rt, uint32_t dev, int v, const char *name, uint32_t smem, CUfunction *out,
                           int *ok) {
  cu_device *d = &rt->devs[dev];
  CUresult r = CUDA_SUCCESS;
  char op[160];
  op[0] = 0;
  pthread_mutex_lock(&d->mu);
  cu_own_dev *q = d->own;
  if (q == NULL) {
    q = calloc(1, sizeof *q);
    if (q == NULL) {
      pthread_mutex_unlock(&d->mu);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "device %u: no host memory for the plugin's own kernels", dev);
    }
    snprintf(op, sizeof op, "loading the plugin's own kernels (quantized, grouped matmul, GEMV: cuModuleLoadDataEx)");
    r = cu_drv.p_cuModuleLoadDataEx(&q->mod, gpurt_cuda_quant_fatbin, 0, NULL, NULL);
    if (r != CUDA_SUCCESS) {
      free(q);
      q = NULL;
    } else {
      d->own = q;
    }
  }
  if (q != NULL && q->fn[v] == NULL) {
    CUfunction fn = NULL;
    snprintf(op, sizeof op, "cuModuleGetFunction %s", name);
    r = cu_drv.p_cuModuleGetFunction(&fn, q->mod, name);
    if (r == CUDA_SUCCESS) q->fn[v] = fn;
  }
  CUfunction f = q != NULL ? q->fn[v] : NULL;
  if (smem > 0 && f != NULL) {
    /* Refused (an older driver without the call, a device with less shared
     * memory a block): the caller takes another kernel. */
    if (q->smem[v] == 0)
      q->smem[v] = cu_drv.p_cuFuncSetAttribute != NULL &&
                           cu_drv.p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                       (int)smem) == CUDA_SUCCESS
                       ? 1
                       : 2;
    *ok = q->smem[v] == 1;
  }
  pthread_mutex_unlock(&d->mu); /* cu_fail takes d->mu */
  if (r != CUDA_SUCCESS) return cu_fail(rt, dev, r, op, NULL);
  *out = f;
  return NULL;
}

gpurt_error *cu_own_fn(cu_runtime *rt, uint32_t dev, int v, const char *name, CUfunction *out) {
  return own_fn(rt, dev, v, name, 0, out, NULL);
}

gpurt_error *cu_own_fn_smem(cu_runtime *rt, uint32_t dev, int v, const char *name, uint32_t smem, CUfunction *out,
                            int *ok) {
  *ok = 0;
  return own_fn(rt, dev, v, name, smem, out, ok);
}

void cu_own_device_release(cu_device *d) {
  cu_own_dev *q = d->own;
  if (q == NULL) return;
  if (q->mod != NULL) cu_drv.p_cuModuleUnload(q->mod);
  free(q);
  d->own = NULL;
}

static gpurt_error *own_launch(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t grid,
                               uint32_t gridy, uint32_t block, uint32_t smem, void **params, int pdl) {
  if (grid == 0) return NULL;
  if (grid > 0x7fffffffull)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the problem needs %llu blocks (more than 2^31 - 1)", name,
                  (unsigned long long)grid);
  const uint32_t g[3] = {(uint32_t)grid, gridy, 1}, b[3] = {block, 1, 1};
  CUresult r = cu_launch_kernel(rt, st, f, g, b, smem, params, pdl);
  if (r != CUDA_SUCCESS) {
    char op[160];
    snprintf(op, sizeof op, "launching %s (cuLaunchKernel)", name);
    return cu_fail(rt, st->dev, r, op, st->last_kernel);
  }
  cu_note_kernel(rt, st, (uintptr_t)f, name); /* a later fault names it */
  return NULL;
}

gpurt_error *cu_own_launch(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t grid,
                           uint32_t gridy, uint32_t block, void **params, int pdl) {
  return own_launch(rt, st, f, name, grid, gridy, block, 0, params, pdl);
}

gpurt_error *cu_own_launch_smem(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t grid,
                                uint32_t block, uint32_t smem, void **params, int pdl) {
  return own_launch(rt, st, f, name, grid, 1, block, smem, params, pdl);
}

/* ---- the GEMM slot's 16-bit GEMV (cuda_gemm.c) ---------------------------- */

/* The variant for n tokens (n <= CU_BGEMV_MAX_N): N = 1, 2 or 4 by type;
 * with a GPURT_GEMM_PROLOGUE_* (n = 1), gpurt_bgemv_<t>_n1_<prologue>. */
gpurt_error *cu_bgemv_fn(cu_runtime *rt, uint32_t dev, int32_t t, uint64_t n, int prologue, CUfunction *out,
                        char *name, size_t cap) {
  const int f16 = t == GPURT_DTYPE_F16;
  if (prologue != GPURT_GEMM_PROLOGUE_NONE) {
    const int sw = prologue == GPURT_GEMM_PROLOGUE_SWIGLU;
    snprintf(name, cap, "gpurt_bgemv_%s_n1_%s", f16 ? "f16" : "bf16", sw ? "swiglu" : "rmsnorm");
    return cu_own_fn(rt, dev, CU_OWN_BGEMV + 6 + 2 * f16 + sw, name, out);
  }
  const uint32_t N = n <= 1 ? 1 : n <= 2 ? 2 : 4;
  snprintf(name, cap, "gpurt_bgemv_%s_n%u", f16 ? "f16" : "bf16", N);
  const int v = CU_OWN_BGEMV + (f16 ? 3 : 0) + (N == 1 ? 0 : N == 2 ? 1 : 2);
  return cu_own_fn(rt, dev, v, name, out);
}

gpurt_error *cu_bgemv(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t batch,
                      const cu_bgemv_args *a) {
  void *params[] = {(void *)a};
  uint64_t blocks = ((uint64_t)a->m + 7) / 8; /* cuda_quant.cu's BG_RB rows a group, a group a block */
  /* GPURT_CUDA_GEMV_GRID=1..32: at most that many blocks per SM, each then
   * taking several row groups in turn (no partial last wave); unset or
   * another value: a block a group. Read once. */
  static _Atomic int per_sm = -1;
  int v = atomic_load_explicit(&per_sm, memory_order_relaxed);
  if (v < 0) {
    const long long n = cu_env_whole("GPURT_CUDA_GEMV_GRID", 1, 32);
    v = n >= 0 ? (int)n : 0;
    atomic_store_explicit(&per_sm, v, memory_order_relaxed);
  }
  const uint64_t cap = (uint64_t)v * (uint64_t)rt->devs[st->dev].sm_count;
  if (cap > 0 && blocks > cap) blocks = cap;
  return cu_own_launch(rt, st, f, name, blocks, (uint32_t)batch, 256, params, 1);
}
