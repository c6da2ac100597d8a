// SPDX-License-Identifier: Apache-2.0
//
// cuda_attention_fp8.cu — fp8 e4m3 KV caches (ABI 1.8) over FlashInfer
// 0.7.4's header-only kernels: BatchDecodeParams / BatchPrefillPagedParams
// with DTypeKV = __nv_fp8_e4m3 and DTypeQ = DTypeO = half or nv_bfloat16,
// the same plan and run calls as cuda_attention.cu (whose object this file
// leaves untouched: a separate cached compile in scripts/build_cuda.sh).
//
// Instantiated: head dim 128, f16 and bf16 queries, no soft cap, no RoPE,
// int32 indices; decode (FlashInfer's group sizes 1, 2, 3, 4, 6, 8, 16)
// and prefill (causal or not, CTA_TILE_Q 16 / 64 / 128). Anything else
// answers unsupported naming what is missing.
//
// The K scale is folded into sm_scale; the V scale multiplies the output
// after the kernel (gpurt_fi8_scale_o), on the same stream. guard(), the
// plan and run calls and the append's grid are cuda_attention_fi.cuh's,
// the append kernel's slot arithmetic cuda_append.cuh's, shared with
// cuda_attention.cu: this file keeps its dispatch, the scales and its
// append kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda_attention_fi.cuh"
#include "cuda_append.cuh"
#include "cuda_attention_fp8.h"

namespace gpurt_fi8 {

using namespace gpurt_fi_common;
using KV = __nv_fp8_e4m3;
using V = Variant</*logits_soft_cap=*/false>;
constexpr uint32_t HD = 128;

// Calls f.template operator()<T, KV, HD, V>() for the config's query type.
template <class F>
cudaError_t dispatch(const cu_fi_config *c, F &&f) {
  if (c->head_dim != HD)
    throw unsupported("fp8 KV: head_dim " + std::to_string(c->head_dim) + " has no kernel in this build (128)");
  if (c->soft_cap) throw unsupported("fp8 KV: the logits soft cap has no kernel in this build");
  if (c->dtype == FI_DTYPE_F16) return f.template operator()<half, KV, HD, V>();
  if (c->dtype == FI_DTYPE_BF16) return f.template operator()<nv_bfloat16, KV, HD, V>();
  throw unsupported("fp8 KV: query dtype " + std::to_string(c->dtype) + " has no kernel (f16, bf16)");
}

// o[i] *= v_scale, rounded to T.
template <class T>
__global__ void gpurt_fi8_scale_o(T *o, uint64_t n, float scale) {
  uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = static_cast<T>(__fmul_rn(static_cast<float>(o[i]), scale));
}

// The shared run (K's scale folded into sm_scale, no soft cap), then the
// output times V's scale.
struct scaled_run {
  run_call run;
  uint64_t rows;
  float v_scale;

  template <class T, class KVT, uint32_t HD_, class V_>
  cudaError_t operator()() {
    cudaError_t e = run.template operator()<T, KVT, HD_, V_>();
    if (e != cudaSuccess || v_scale == 1.0f) return e;
    uint64_t n = rows * run.c->num_qo_heads * HD_;
    uint64_t blocks = (n + 255) / 256;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x7fffffffull) throw unsupported("fp8 KV: too many output rows for one launch");
    gpurt_fi8_scale_o<T><<<(unsigned)blocks, 256, 0, run.s>>>(static_cast<T *>(run.a->o), n, v_scale);
    return cudaGetLastError();
  }
};

// One thread per element of one head of one row, K and V.
template <class T>
__global__ void gpurt_fi8_append_kernel(cu_kv_append_args a, float ks, float vs) {
  uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t at;
  if (!kv_append_slot(a, a.head_dim, t, &at)) return;
  const T *kr = static_cast<const T *>(a.k_rows), *vr = static_cast<const T *>(a.v_rows);
  static_cast<__nv_fp8_storage_t *>(a.k)[at] =
      __nv_cvt_float_to_fp8(__fdiv_rn(static_cast<float>(kr[t]), ks), __NV_SATFINITE, __NV_E4M3);
  static_cast<__nv_fp8_storage_t *>(a.v)[at] =
      __nv_cvt_float_to_fp8(__fdiv_rn(static_cast<float>(vr[t]), vs), __NV_SATFINITE, __NV_E4M3);
}

template <class T>
cudaError_t append(const cu_kv_append_args *a, float ks, float vs, cudaStream_t s) {
  gpurt_fi8_append_kernel<T><<<append_blocks(a, a->head_dim), 256, 0, s>>>(*a, ks, vs);
  return cudaGetLastError();
}

}  // namespace gpurt_fi8

using namespace gpurt_fi8;

extern "C" int cu_fi8_plan_make(const cu_fi_config *c, void *float_ws, uint64_t float_bytes, void *int_ws,
                                void *pinned, uint64_t int_bytes, const int32_t *qo_indptr_h,
                                const int32_t *kv_indptr_h, uint32_t batch, uint32_t total_rows, void *stream,
                                cu_fi_plan *plan, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    plan_call pc{c, float_ws, int_ws, pinned, float_bytes, int_bytes, const_cast<int32_t *>(qo_indptr_h),
                 const_cast<int32_t *>(kv_indptr_h), batch, total_rows, static_cast<cudaStream_t>(stream), plan};
    return dispatch(c, pc);
  });
}

extern "C" int cu_fi8_run(const cu_fi_config *c, const cu_fi_plan *plan, const cu_fi_run_args *a, uint64_t rows,
                          float k_scale, float v_scale, void *stream, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    scaled_run rc{{c, plan, a, static_cast<cudaStream_t>(stream), c->sm_scale * k_scale, 0.f, "fp8 KV"}, rows,
                  v_scale};
    return dispatch(c, rc);
  });
}

extern "C" int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo_dtype, float k_scale, float v_scale,
                                void *stream, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (qo_dtype == FI_DTYPE_F16) return append<half>(a, k_scale, v_scale, s);
    if (qo_dtype == FI_DTYPE_BF16) return append<nv_bfloat16>(a, k_scale, v_scale, s);
    throw unsupported("fp8 KV: row dtype " + std::to_string(qo_dtype) + " has no append kernel (f16, bf16)");
  });
}
