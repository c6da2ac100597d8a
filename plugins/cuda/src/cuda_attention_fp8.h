/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_attention_fp8.h — the C interface of the fp8 KV cache adapter
 * (cuda_attention_fp8.cu, ABI 1.8): FlashInfer's decode and prefill
 * kernels over fp8 e4m3 pages with f16 or bf16 queries and outputs, and
 * the append kernel that quantises rows into the pages. A translation unit
 * of its own, so that cuda_attention.cu's cached object stays valid; it
 * uses cuda_attention.h's types (config, plan, run arguments, status).
 *
 * Scales (one for K and one for V per cache): K's is folded into sm_scale
 * (scores = q . (k8 * k_scale) * sm_scale), V's multiplies the output
 * after the kernel (o = sum p * (v8 * v_scale) = v_scale * sum p * v8).
 */
#ifndef GPURT_CUDA_ATTENTION_FP8_H_
#define GPURT_CUDA_ATTENTION_FP8_H_

#include "cuda_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As cu_fi_plan_make, for an fp8 cache (c->dtype: the queries' type). */
int cu_fi8_plan_make(const cu_fi_config *c, void *float_ws, uint64_t float_bytes, void *int_ws,
                     void *pinned, uint64_t int_bytes, const int32_t *qo_indptr_h,
                     const int32_t *kv_indptr_h, uint32_t batch, uint32_t total_rows, void *stream,
                     cu_fi_plan *plan, cu_fi_status *st);

/* As cu_fi_run, then o[0 .. rows * num_qo_heads * head_dim) *= v_scale. */
int cu_fi8_run(const cu_fi_config *c, const cu_fi_plan *plan, const cu_fi_run_args *a, uint64_t rows,
               float k_scale, float v_scale, void *stream, cu_fi_status *st);

/* The append kernel: rows of qo_dtype (GPURT_DTYPE_F16 or _BF16) stored
 * as e4m3(x / scale), nearest even, saturated (NaN stays NaN). */
int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo_dtype, float k_scale, float v_scale,
                     void *stream, cu_fi_status *st);

#ifdef __cplusplus
}
#endif

#endif /* GPURT_CUDA_ATTENTION_FP8_H_ */
