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
// guard(), the plan and run calls and the append's grid are
// cuda_attention_fi.cuh's, shared with the fp8 adapter
// (cuda_attention_fp8.cu); the append kernel (gpurt_kv_append_kernel, with
// its rotary embedding) and its slot arithmetic are cuda_append.cuh's,
// free of FlashInfer (the CPU emulation runs them: emu/append_emu_test.cc).
// This file keeps its dispatch and the append's launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_attention_fi.cuh"
#include "cuda_append.cuh"

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
