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
// after the kernel (gpurt_fi8_scale_o), on the same stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "cuda_attention_fp8.h"

#define FI8_DTYPE_F16 2  /* GPURT_DTYPE_F16 */
#define FI8_DTYPE_BF16 3 /* GPURT_DTYPE_BF16 */
#define FI8_LAYOUT_HND 1

namespace gpurt_fi8 {

using namespace flashinfer;
using KV = __nv_fp8_e4m3;

struct unsupported : std::exception {
  std::string m;
  explicit unsupported(std::string s) : m(std::move(s)) {}
  const char *what() const noexcept override { return m.c_str(); }
};

struct grow : std::exception {
  uint64_t f, i;
  grow(uint64_t f_, uint64_t i_) : f(f_), i(i_) {}
  const char *what() const noexcept override { return "workspace too small"; }
};

template <class F>
int guard(cu_fi_status *st, F &&f) {
  st->code = CU_FI_OK;
  st->cuda = 0;
  st->msg[0] = 0;
  try {
    cudaError_t e = f();
    if (e != cudaSuccess) {
      st->code = CU_FI_CUDA;
      st->cuda = (int32_t)e;
      std::snprintf(st->msg, sizeof st->msg, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
  } catch (const grow &g) {
    st->code = CU_FI_GROW;
    st->float_need = g.f;
    st->int_need = g.i;
  } catch (const unsupported &u) {
    st->code = CU_FI_UNSUPPORTED;
    std::snprintf(st->msg, sizeof st->msg, "%s", u.what());
  } catch (const std::bad_alloc &) {
    st->code = CU_FI_EXCEPTION;
    std::snprintf(st->msg, sizeof st->msg, "out of host memory (std::bad_alloc)");
  } catch (const std::exception &x) {
    st->code = CU_FI_EXCEPTION;
    std::snprintf(st->msg, sizeof st->msg, "%s", x.what());
  } catch (...) {
    st->code = CU_FI_EXCEPTION;
    std::snprintf(st->msg, sizeof st->msg, "an unknown C++ exception");
  }
  return st->code;
}

template <class T>
using DecodeP = BatchDecodeParams<T, KV, T, int32_t>;
template <class T>
using PrefillP = BatchPrefillPagedParams<T, KV, T, int32_t>;
using V = DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false, /*logits_soft_cap=*/false,
                           /*alibi=*/false>;
constexpr PosEncodingMode kPos = PosEncodingMode::kNone;
constexpr uint32_t HD = 128;

// Calls f.template operator()<T>() for the config's query type.
template <class F>
cudaError_t dispatch(const cu_fi_config *c, F &&f) {
  if (c->head_dim != HD)
    throw unsupported("fp8 KV: head_dim " + std::to_string(c->head_dim) + " has no kernel in this build (128)");
  if (c->soft_cap) throw unsupported("fp8 KV: the logits soft cap has no kernel in this build");
  if (c->dtype == FI8_DTYPE_F16) return f.template operator()<half>();
  if (c->dtype == FI8_DTYPE_BF16) return f.template operator()<nv_bfloat16>();
  throw unsupported("fp8 KV: query dtype " + std::to_string(c->dtype) + " has no kernel (f16, bf16)");
}

QKVLayout layout_of(const cu_fi_config *c) {
  return c->layout == FI8_LAYOUT_HND ? QKVLayout::kHND : QKVLayout::kNHD;
}

bool decode_group(uint32_t g) {
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}

struct plan_call {
  const cu_fi_config *c;
  void *fws, *iws, *pinned;
  uint64_t fb, ib;
  int32_t *qo, *kv;
  uint32_t batch, rows;
  cudaStream_t s;
  cu_fi_plan *out;

  template <class T>
  cudaError_t operator()() {
    if (!c->prefill_kernel) {
      using P = DecodeP<T>;
      const uint32_t group = c->num_qo_heads / c->num_kv_heads;
      if (!decode_group(group)) throw unsupported("decode group size " + std::to_string(group));
      cudaError_t e = cudaSuccess;
      DISPATCH_GQA_GROUP_SIZE(group, GROUP_SIZE, {
        auto est = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, HD, kPos, V, P>;
        DecodePlanInfo info;
        try {
          e = DecodePlan<HD, kPos, V, P>(fws, fb, iws, pinned, ib, info, kv, batch, c->num_qo_heads,
                                         c->page_size, false, s, est);
        } catch (const flashinfer::Error &) {
          size_t fneed = 0, ineed = 0;
          if (DecodePlanWorkspaceSize<HD, kPos, V, P>(fneed, ineed, kv, batch, c->num_qo_heads, c->page_size,
                                                      false, s, est) == cudaSuccess &&
              (fneed > fb || ineed > ib))
            throw grow(fneed, ineed);
          throw;
        }
        if (e == cudaSuccess) std::memcpy(out->v, &info, sizeof info);
      });
      return e;
    }
    std::vector<int32_t> iota;
    int32_t *q = qo;
    if (q == nullptr) {
      iota.resize(batch + 1);
      for (uint32_t i = 0; i <= batch; i++) iota[i] = (int32_t)i;
      q = iota.data();
    }
    PrefillPlanInfo info;
    cudaError_t e;
    try {
      e = PrefillPlan<int32_t>(fws, fb, iws, pinned, ib, info, q, kv, rows, batch, c->num_qo_heads,
                               c->num_kv_heads, HD, HD, c->page_size, false, sizeof(T), -1, -1, false, 0, 0,
                               false, s, sizeof(KV));
    } catch (const flashinfer::Error &) {
      size_t fneed = 0, ineed = 0;
      if (PrefillPlanWorkspaceSize<int32_t>(fneed, ineed, q, kv, rows, batch, c->num_qo_heads, c->num_kv_heads,
                                            HD, HD, c->page_size, false, sizeof(T), -1, -1, false, 0, 0, false,
                                            s, sizeof(KV)) == cudaSuccess &&
          (fneed > fb || ineed > ib))
        throw grow(fneed, ineed);
      throw;
    }
    if (e == cudaSuccess) std::memcpy(out->v, &info, sizeof info);
    return e;
  }
};

// o[i] *= v_scale, rounded to T.
template <class T>
__global__ void gpurt_fi8_scale_o(T *o, uint64_t n, float scale) {
  uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = static_cast<T>(__fmul_rn(static_cast<float>(o[i]), scale));
}

struct run_call {
  const cu_fi_config *c;
  const cu_fi_plan *plan;
  const cu_fi_run_args *a;
  uint64_t rows;
  float k_scale, v_scale;
  cudaStream_t s;

  template <class T>
  cudaError_t run() {
    paged_kv_t<KV, int32_t> kv(c->num_kv_heads, c->page_size, HD, a->batch, layout_of(c), static_cast<KV *>(a->k),
                               static_cast<KV *>(a->v), a->indices, a->indptr, a->last);
    char *iws = static_cast<char *>(a->int_ws);
    char *fws = static_cast<char *>(a->float_ws);
    const float sm = c->sm_scale * k_scale;
    if (!c->prefill_kernel) {
      using P = DecodeP<T>;
      DecodePlanInfo info;
      std::memcpy(&info, plan->v, sizeof info);
      P p;
      p.q = static_cast<T *>(a->q);
      p.paged_kv = kv;
      p.o = static_cast<T *>(a->o);
      p.lse = nullptr;
      p.num_qo_heads = c->num_qo_heads;
      p.q_stride_n = (int32_t)(c->num_qo_heads * HD);
      p.q_stride_h = (int32_t)HD;
      p.window_left = -1;
      p.logits_soft_cap = 0.f;
      p.sm_scale = sm;
      p.rope_rcp_scale = 1.f;
      p.rope_rcp_theta = 1e-4f;
      p.request_indices = GetPtrFromBaseOffset<int32_t>(iws, info.request_indices_offset);
      p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(iws, info.kv_tile_indices_offset);
      p.o_indptr = GetPtrFromBaseOffset<int32_t>(iws, info.o_indptr_offset);
      p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(iws, info.kv_chunk_size_ptr_offset);
      p.block_valid_mask = nullptr;
      p.partition_kv = false;
      T *tmp_v = nullptr;
      float *tmp_s = nullptr;
      if (info.split_kv) {
        tmp_v = GetPtrFromBaseOffset<T>(fws, info.v_offset);
        tmp_s = GetPtrFromBaseOffset<float>(fws, info.s_offset);
      }
      p.padded_batch_size = (uint32_t)info.padded_batch_size;
      return BatchDecodeWithPagedKVCacheDispatched<HD, kPos, V>(p, tmp_v, tmp_s, false, s);
    }
    using P = PrefillP<T>;
    PrefillPlanInfo info;
    std::memcpy(&info, plan->v, sizeof info);
    P p;
    p.q = static_cast<T *>(a->q);
    p.paged_kv = kv;
    p.q_indptr = a->qo_indptr;
    p.o = static_cast<T *>(a->o);
    p.lse = nullptr;
    p.num_qo_heads = c->num_qo_heads;
    p.group_size = uint_fastdiv(c->num_qo_heads / c->num_kv_heads);
    p.q_stride_n = (int32_t)(c->num_qo_heads * HD);
    p.q_stride_h = (int32_t)HD;
    p.window_left = -1;
    p.logits_soft_cap = 0.f;
    p.sm_scale = sm;
    p.rope_rcp_scale = 1.f;
    p.rope_rcp_theta = 1e-4f;
    p.request_indices = GetPtrFromBaseOffset<int32_t>(iws, info.request_indices_offset);
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(iws, info.qo_tile_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(iws, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(iws, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(iws, info.kv_chunk_size_ptr_offset);
    T *tmp_v = nullptr;
    float *tmp_s = nullptr;
    if (info.split_kv) {
      p.merge_indptr = GetPtrFromBaseOffset<int32_t>(iws, info.merge_indptr_offset);
      tmp_v = GetPtrFromBaseOffset<T>(fws, info.v_offset);
      tmp_s = GetPtrFromBaseOffset<float>(fws, info.s_offset);
    }
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    p.max_total_num_rows = (uint32_t)info.total_num_rows;
    p.total_num_rows = nullptr;
    p.block_valid_mask = nullptr;
    const bool causal = c->causal != 0;
    auto go = [&](auto tile) -> cudaError_t {
      constexpr uint32_t TQ = decltype(tile)::value;
      if (causal)
        return BatchPrefillWithPagedKVCacheDispatched<true, TQ, HD, HD, kPos, false, MaskMode::kCausal, false, V,
                                                      P>(p, tmp_v, tmp_s, false, s);
      return BatchPrefillWithPagedKVCacheDispatched<true, TQ, HD, HD, kPos, false, MaskMode::kNone, false, V, P>(
          p, tmp_v, tmp_s, false, s);
    };
    switch (info.cta_tile_q) {
      case 16: return go(std::integral_constant<uint32_t, 16>{});
      case 64: return go(std::integral_constant<uint32_t, 64>{});
      case 128: return go(std::integral_constant<uint32_t, 128>{});
      default:
        throw unsupported("fp8 KV: the plan's cta_tile_q " + std::to_string(info.cta_tile_q) +
                          " has no kernel in this build");
    }
  }

  template <class T>
  cudaError_t operator()() {
    cudaError_t e = run<T>();
    if (e != cudaSuccess || v_scale == 1.0f) return e;
    uint64_t n = rows * c->num_qo_heads * HD;
    uint64_t blocks = (n + 255) / 256;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x7fffffffull) throw unsupported("fp8 KV: too many output rows for one launch");
    gpurt_fi8_scale_o<T><<<(unsigned)blocks, 256, 0, s>>>(static_cast<T *>(a->o), n, v_scale);
    return cudaGetLastError();
  }
};

// One thread per element of one head of one row, K and V.
template <class T>
__global__ void gpurt_fi8_append_kernel(__nv_fp8_storage_t *k, __nv_fp8_storage_t *v, const T *kr, const T *vr,
                                        const int32_t *bi, const int32_t *pos, const int32_t *indptr,
                                        const int32_t *indices, const int32_t *last, uint64_t nnz,
                                        uint64_t num_pages, uint32_t batch, uint32_t heads, uint32_t hd,
                                        uint32_t page_size, int hnd, uint64_t n_indices, float ks, float vs) {
  uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t per_row = (uint64_t)heads * hd;
  if (t >= nnz * per_row) return;
  uint64_t i = t / per_row;
  uint32_t h = (uint32_t)((t / hd) % heads);
  uint32_t d = (uint32_t)(t % hd);
  int32_t b = bi[i], p = pos[i];
  if (b < 0 || (uint32_t)b >= batch || p < 0) return;
  int32_t p0 = indptr[b], p1 = indptr[b + 1], lp = last[b];
  if (p0 < 0 || p1 <= p0 || (uint64_t)p1 > n_indices || lp < 1 || (uint32_t)lp > page_size) return;
  uint64_t len = (uint64_t)(p1 - p0 - 1) * page_size + (uint64_t)lp;
  if ((uint64_t)p >= len) return;
  int32_t page = indices[p0 + p / page_size];
  if (page < 0 || (uint64_t)page >= num_pages) return;
  uint64_t slot = (uint64_t)p % page_size;
  uint64_t at = (uint64_t)page * page_size * per_row +
                (hnd ? ((uint64_t)h * page_size + slot) : (slot * heads + h)) * hd + d;
  k[at] = __nv_cvt_float_to_fp8(__fdiv_rn(static_cast<float>(kr[t]), ks), __NV_SATFINITE, __NV_E4M3);
  v[at] = __nv_cvt_float_to_fp8(__fdiv_rn(static_cast<float>(vr[t]), vs), __NV_SATFINITE, __NV_E4M3);
}

template <class T>
cudaError_t append(const cu_kv_append_args *a, float ks, float vs, cudaStream_t s) {
  uint64_t threads = a->nnz * a->num_kv_heads * a->head_dim;
  uint64_t blocks = (threads + 255) / 256;
  if (blocks > 0x7fffffffull) throw unsupported("kv_append: too many rows for one launch");
  gpurt_fi8_append_kernel<T><<<(unsigned)blocks, 256, 0, s>>>(
      static_cast<__nv_fp8_storage_t *>(a->k), static_cast<__nv_fp8_storage_t *>(a->v),
      static_cast<const T *>(a->k_rows), static_cast<const T *>(a->v_rows), a->batch_indices, a->positions,
      a->indptr, a->indices, a->last, a->nnz, a->num_pages, a->batch, a->num_kv_heads, a->head_dim, a->page_size,
      a->layout == FI8_LAYOUT_HND, a->n_indices, ks, vs);
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
    run_call rc{c, plan, a, rows, k_scale, v_scale, static_cast<cudaStream_t>(stream)};
    return dispatch(c, rc);
  });
}

extern "C" int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo_dtype, float k_scale, float v_scale,
                                void *stream, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (qo_dtype == FI8_DTYPE_F16) return append<half>(a, k_scale, v_scale, s);
    if (qo_dtype == FI8_DTYPE_BF16) return append<nv_bfloat16>(a, k_scale, v_scale, s);
    throw unsupported("fp8 KV: row dtype " + std::to_string(qo_dtype) + " has no append kernel (f16, bf16)");
  });
}
