/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_attention.h — the C interface of the FlashInfer adapter
 * (cuda_attention.cu, the one C++ translation unit over FlashInfer's
 * header-only kernels) used by cuda_attention.c, which implements the 1.5
 * slots. Only C types cross: no C++ type, no exception (every one is caught
 * in the adapter and becomes a cu_fi_status).
 *
 * The adapter calls the CUDA runtime API (linked statically): the caller has
 * made the device's primary context current, so the runtime uses it.
 */
#ifndef GPURT_CUDA_ATTENTION_H_
#define GPURT_CUDA_ATTENTION_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the kernels are instantiated for (one attention object). */
typedef struct cu_fi_config {
  int32_t dtype;          /* GPURT_DTYPE_F16 or GPURT_DTYPE_BF16 */
  int32_t layout;         /* GPURT_KV_LAYOUT_NHD or _HND */
  uint32_t head_dim;      /* 64, 128, 256 */
  uint32_t num_qo_heads, num_kv_heads, page_size;
  uint8_t prefill_kernel; /* 1: FlashInfer's prefill kernel (prefill, or decode
                             with a group size its decode kernel lacks) */
  uint8_t causal;         /* prefill kernel: the causal mask */
  uint8_t soft_cap;       /* 1: the soft-cap variant */
  uint8_t reserved;
  float sm_scale, cap;
} cu_fi_config;

/* A plan's schedule (FlashInfer's DecodePlanInfo or PrefillPlanInfo, copied
 * bytewise). */
typedef struct cu_fi_plan {
  int64_t v[20];
} cu_fi_plan;

enum {
  CU_FI_OK = 0,
  CU_FI_CUDA = 1,        /* a CUDA runtime error: cuda holds the cudaError_t */
  CU_FI_EXCEPTION = 2,   /* a C++ exception: msg holds what() */
  CU_FI_UNSUPPORTED = 3, /* a combination this build has no kernel for */
  CU_FI_GROW = 4         /* the workspace is too small: float_need/int_need */
};

typedef struct cu_fi_status {
  int32_t code;  /* CU_FI_* */
  int32_t cuda;  /* cudaError_t for CU_FI_CUDA */
  uint64_t float_need, int_need; /* CU_FI_GROW */
  char msg[480];
} cu_fi_status;

/* Plans one step: writes the schedule into pinned (int_bytes), enqueues its
 * copy into int_ws on stream and fills *plan. qo_indptr_h is NULL for decode
 * (one row per request). CU_FI_GROW when float_bytes / int_bytes are too
 * small (nothing enqueued then). */
int cu_fi_plan_make(const cu_fi_config *c, void *float_ws, uint64_t float_bytes, void *int_ws,
                    void *pinned, uint64_t int_bytes, const int32_t *qo_indptr_h,
                    const int32_t *kv_indptr_h, uint32_t batch, uint32_t total_rows, void *stream,
                    cu_fi_plan *plan, cu_fi_status *st);

typedef struct cu_fi_run_args {
  void *q, *o, *k, *v;
  int32_t *indptr, *indices, *last;
  int32_t *qo_indptr; /* device; prefill kernel only */
  uint32_t batch;
  void *float_ws, *int_ws;
  int32_t pdl; /* launch with programmatic dependent launch (cu_device.pdl) */
} cu_fi_run_args;

/* Enqueues one run of plan on stream. */
int cu_fi_run(const cu_fi_config *c, const cu_fi_plan *plan, const cu_fi_run_args *a, void *stream,
              cu_fi_status *st);

typedef struct cu_kv_append_args {
  void *k, *v;
  const void *k_rows, *v_rows;
  const int32_t *batch_indices, *positions, *indptr, *indices, *last;
  uint64_t nnz, num_pages;
  uint32_t batch, num_kv_heads, head_dim, page_size;
  int32_t layout;
  uint64_t n_indices; /* entries of indices readable (to the buffer's end):
                         a row whose request's pages end beyond is skipped,
                         as the mock skips it */
  int32_t pdl;        /* launch with programmatic dependent launch (cu_device.pdl) */
  /* 1.10: the rotary embedding on the way in (rope_neox_freqs_T's
   * arithmetic; inv_freq NULL: none): K rotated before it is stored, q
   * (nnz rows of num_qo_heads heads, NULL: none) in place; bf16 says the
   * 16-bit type (else f16); head_dim 64, 128 or 256 (checked), so a
   * head's halves are whole 16-byte pieces */
  const float *inv_freq;
  void *q;
  uint32_t num_qo_heads;
  int32_t bf16;
} cu_kv_append_args;

/* Enqueues the append kernel (16-bit elements) on stream. */
int cu_fi_kv_append(const cu_kv_append_args *a, void *stream, cu_fi_status *st);

/* What the adapter was built from, static. */
const char *cu_fi_build_info(void);
/* 1 when the adapter has kernels (SASS) for compute capability major.minor. */
int cu_fi_has_arch(int major, int minor);

#ifdef __cplusplus
}
#endif

#endif /* GPURT_CUDA_ATTENTION_H_ */
