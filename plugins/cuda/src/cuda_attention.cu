// SPDX-License-Identifier: Apache-2.0
//
// cuda_attention.cu — the FlashInfer adapter: the one translation unit that
// includes FlashInfer's header-only kernels (flashinfer-python 0.7.4's
// flashinfer/data/include, pinned in scripts/build_cuda.sh) and exposes them
// to cuda_attention.c through the C functions of cuda_attention.h. Nothing
// of torch or tvm-ffi: the plan and run functions FlashInfer's own JIT
// bindings call (DecodePlan / PrefillPlan,
// BatchDecodeWithPagedKVCacheDispatched /
// BatchPrefillWithPagedKVCacheDispatched), with FlashInfer's default
// parameter structs and its DefaultAttention variant.
//
// Instantiated, and nothing more: f16 and bf16 (q, kv and o of one type),
// head dim 64 / 128 / 256, with and without the logits soft cap, no RoPE, no
// sliding window, no custom mask, int32 indices. Decode: FlashInfer's decode
// kernel (it dispatches the group sizes 1, 2, 3, 4, 6, 8, 16 itself).
// Prefill (and decode with any other group size): the prefill kernel with
// the causal mask or none, for the CTA_TILE_Q values FlashInfer's planner
// picks for these head dims (128, 64, 16; 128 not for head dim 256).
//
// Every C++ exception (FlashInfer throws flashinfer::Error, the standard
// library std::bad_alloc) is caught in guard() and becomes a cu_fi_status.
// guard(), the plan and run calls and the append kernel's slot arithmetic
// are cuda_attention_fi.cuh's, shared with the fp8 adapter
// (cuda_attention_fp8.cu): this file keeps its dispatch and its kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_attention_fi.cuh"
#include "cuda_pdl.cuh"
#include "cuda_rope.cuh"

namespace gpurt_fi {

using namespace gpurt_fi_common;

// Calls f.template operator()<T, T, HD, Variant<CAP>>() for the config's
// types (KV pages of the queries' type).
template <class F>
cudaError_t dispatch(const cu_fi_config *c, F &&f) {
#ifdef GPURT_FI_QUICK
  // A compile check of the adapter only (-DGPURT_FI_QUICK): one combination.
  if (c->dtype == FI_DTYPE_BF16 && c->head_dim == 128 && !c->soft_cap)
    return f.template operator()<nv_bfloat16, nv_bfloat16, 128, Variant<false>>();
  throw unsupported("this build (GPURT_FI_QUICK) has only bf16, head dim 128, no soft cap");
#else
  auto by_cap = [&](auto t, auto hd) -> cudaError_t {
    using T = decltype(t);
    constexpr uint32_t HD = decltype(hd)::value;
    if (c->soft_cap) return f.template operator()<T, T, HD, Variant<true>>();
    return f.template operator()<T, T, HD, Variant<false>>();
  };
  auto by_hd = [&](auto t) -> cudaError_t {
    switch (c->head_dim) {
      case 64: return by_cap(t, std::integral_constant<uint32_t, 64>{});
      case 128: return by_cap(t, std::integral_constant<uint32_t, 128>{});
      case 256: return by_cap(t, std::integral_constant<uint32_t, 256>{});
      default: throw unsupported("head_dim " + std::to_string(c->head_dim) + " has no kernel");
    }
  };
  if (c->dtype == FI_DTYPE_F16) return by_hd(half{});
  if (c->dtype == FI_DTYPE_BF16) return by_hd(nv_bfloat16{});
  throw unsupported("dtype " + std::to_string(c->dtype) + " has no kernel");
#endif
}

// Rotates the 8 pairs (lo[e], hi[e]) of 16-bit type T (lo: elements j0 ..
// j0 + 7 of a head, hi: those head_dim / 2 further) at position pos:
// rope_neox_freqs_T's arithmetic (cuda_rope.cuh).
template <typename T>
__device__ __forceinline__ void rope8(uint4 &lo, uint4 &hi, int pos, const float *inv, uint32_t j0) {
  T *l = reinterpret_cast<T *>(&lo), *h = reinterpret_cast<T *>(&hi);
  auto rt = [](float f) { return static_cast<float>(static_cast<T>(f)); };
#pragma unroll
  for (int e = 0; e < 8; e++) {
    float u = static_cast<float>(l[e]), v = static_cast<float>(h[e]);
    gpurt_rope_pair(u, v, pos, inv[j0 + e], rt);
    l[e] = static_cast<T>(u);
    h[e] = static_cast<T>(v);
  }
}

// One thread per 16 bytes of one head of one row, K and V. With a rotary
// embedding (a.inv_freq, ABI 1.10) a thread of the first half of a head
// also takes K's 16 bytes head_dim / 2 further and stores both rotated
// (the second half's threads copy V alone), and the threads past K and V
// rotate q in place, a pair of 16-byte pieces each, for every row (as the
// rope_neox_freqs_T launch this replaces did).
// With programmatic dependent launch (a.pdl) it may be scheduled before the
// kernel ahead of it finishes: it waits for that kernel's writes first
// thing, then lets the next kernel (the attention) be scheduled.
template <typename T>
__global__ void gpurt_kv_append_kernel(cu_kv_append_args a, uint32_t chunks) {
  gpurt_pdl_enter();
  uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t half = chunks / 2;
  const uint64_t kv_threads = a.nnz * a.num_kv_heads * chunks;
  if (a.inv_freq != nullptr && t >= kv_threads) { // q's pieces
    const uint64_t qt = t - kv_threads, per_row = (uint64_t)a.num_qo_heads * half;
    if (a.q == nullptr || qt >= a.nnz * per_row) return;
    const uint64_t i = qt / per_row, hh = (qt % per_row) / half;
    const uint32_t u = (uint32_t)(qt % half);
    uint4 *q = static_cast<uint4 *>(a.q) + (i * a.num_qo_heads + hh) * chunks;
    uint4 lo = q[u], hi = q[u + half];
    rope8<T>(lo, hi, a.positions[i], a.inv_freq, u * 8);
    q[u] = lo;
    q[u + half] = hi;
    return;
  }
  uint64_t at;
  if (!kv_append_slot(a, chunks, t, &at)) return;
  static_cast<uint4 *>(a.v)[at] = static_cast<const uint4 *>(a.v_rows)[t];
  if (a.inv_freq == nullptr) {
    static_cast<uint4 *>(a.k)[at] = static_cast<const uint4 *>(a.k_rows)[t];
    return;
  }
  const uint32_t u = (uint32_t)(t % chunks);
  if (u >= half) return; // the first half's thread stores this piece
  uint4 lo = static_cast<const uint4 *>(a.k_rows)[t], hi = static_cast<const uint4 *>(a.k_rows)[t + half];
  rope8<T>(lo, hi, a.positions[t / ((uint64_t)a.num_kv_heads * chunks)], a.inv_freq, u * 8);
  static_cast<uint4 *>(a.k)[at] = lo;
  static_cast<uint4 *>(a.k)[at + half] = hi;
}

}  // namespace gpurt_fi

using namespace gpurt_fi;

extern "C" int cu_fi_plan_make(const cu_fi_config *c, void *float_ws, uint64_t float_bytes,
                               void *int_ws, void *pinned, uint64_t int_bytes,
                               const int32_t *qo_indptr_h, const int32_t *kv_indptr_h,
                               uint32_t batch, uint32_t total_rows, void *stream, cu_fi_plan *plan,
                               cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    plan_call pc{c, float_ws, int_ws, pinned, float_bytes, int_bytes,
                 const_cast<int32_t *>(qo_indptr_h), const_cast<int32_t *>(kv_indptr_h), batch,
                 total_rows, static_cast<cudaStream_t>(stream), plan};
    return dispatch(c, pc);
  });
}

extern "C" int cu_fi_run(const cu_fi_config *c, const cu_fi_plan *plan, const cu_fi_run_args *a,
                         void *stream, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    run_call rc{c, plan, a, static_cast<cudaStream_t>(stream), c->sm_scale, c->cap, nullptr};
    return dispatch(c, rc);
  });
}

extern "C" int cu_fi_kv_append(const cu_kv_append_args *a, void *stream, cu_fi_status *st) {
  return guard(st, [&]() -> cudaError_t {
    uint32_t chunks = a->head_dim * 2 / 16;  // 16-bit elements, head_dim a multiple of 8
    // With the rotary embedding, q's pieces after K's and V's: head_dim is
    // 64, 128 or 256 (csrc checks), so a head's pieces pair up.
    uint64_t extra = a->inv_freq != nullptr && a->q != nullptr ? a->nnz * a->num_qo_heads * (chunks / 2) : 0;
    uint64_t blocks = append_blocks(a, chunks) + (extra + 255) / 256;
    if (blocks > 0x7fffffffull) throw unsupported("kv_append: too many rows for one launch");
    auto kernel = a->bf16 ? gpurt_kv_append_kernel<nv_bfloat16> : gpurt_kv_append_kernel<half>;
    if (!a->pdl) {
      kernel<<<(unsigned)blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(*a, chunks);
      return cudaGetLastError();
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = static_cast<cudaStream_t>(stream);
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, *a, chunks);
  });
}

extern "C" const char *cu_fi_build_info(void) {
  return "FlashInfer 0.7.4 (flashinfer-python wheel headers)";
}

extern "C" int cu_fi_has_arch(int major, int minor) {
#ifdef __CUDA_ARCH_LIST__
  const int archs[] = {__CUDA_ARCH_LIST__};
  for (int a : archs) {
    if (a >= 900 && a == major * 100 + minor * 10) return 1;  // sm_90a: exactly 9.0
    if (a < 900 && major == a / 100 && minor >= (a % 100) / 10) return 1;  // sm_80: 8.x
  }
  return 0;
#else
  (void)major;
  (void)minor;
  return 1;
#endif
}
