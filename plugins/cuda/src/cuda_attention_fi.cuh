// SPDX-License-Identifier: Apache-2.0
//
// cuda_attention_fi.cuh — the plumbing the two FlashInfer adapters share
// (cuda_attention.cu: 16-bit KV pages; cuda_attention_fp8.cu: fp8 e4m3
// pages), included by both and by nothing else: the exceptions and
// guard() that turn every C++ exception into a cu_fi_status, the plan and
// run calls over FlashInfer's decode and prefill kernels, templated over
// the query/output type T, the KV page type KVT, the head dim HD and the
// attention variant V, and the append kernels' grid (append_blocks; their
// slot arithmetic, kv_append_slot, is cuda_append.cuh's, free of
// FlashInfer). Each adapter keeps what differs: which (T, KVT, HD, V) it
// instantiates (its dispatch), its append kernel and, for fp8, the scales.
//
// Templates and inline functions only, in a namespace of their own: each
// adapter is compiled apart (scripts/build_cuda.sh caches each object) and
// both are linked into the plugin.
#ifndef GPURT_CUDA_ATTENTION_FI_CUH_
#define GPURT_CUDA_ATTENTION_FI_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "cuda_attention.h"

// The ABI's values (gpurt.h is C; these three are all the adapters need;
// cuda_attention.c asserts they match).
#define FI_DTYPE_F16 2 /* GPURT_DTYPE_F16 */
#define FI_DTYPE_BF16 3 /* GPURT_DTYPE_BF16 */
#define FI_LAYOUT_HND 1

// A named namespace, not an anonymous one: with
// -static-global-template-stub=false the host stubs of the kernel templates
// name their argument types, which must be reachable from the stub file.
namespace gpurt_fi_common {

using namespace flashinfer;

struct unsupported : std::exception {
  std::string m;
  explicit unsupported(std::string s) : m(std::move(s)) {}
  const char *what() const noexcept override { return m.c_str(); }
};

// The workspace the plan needs is larger than the one it was given.
struct grow : std::exception {
  uint64_t f, i;
  grow(uint64_t f_, uint64_t i_) : f(f_), i(i_) {}
  const char *what() const noexcept override { return "workspace too small"; }
};

inline void set_msg(cu_fi_status *st, const char *m) {
  std::snprintf(st->msg, sizeof st->msg, "%s", m ? m : "");
}

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
      (void)cudaGetLastError();  // the runtime's per-thread record: not sticky for us
    }
  } catch (const grow &g) {
    st->code = CU_FI_GROW;
    st->float_need = g.f;
    st->int_need = g.i;
  } catch (const unsupported &u) {
    st->code = CU_FI_UNSUPPORTED;
    set_msg(st, u.what());
  } catch (const std::bad_alloc &) {
    st->code = CU_FI_EXCEPTION;
    set_msg(st, "out of host memory (std::bad_alloc)");
  } catch (const std::exception &x) {
    st->code = CU_FI_EXCEPTION;
    set_msg(st, x.what());
  } catch (...) {
    st->code = CU_FI_EXCEPTION;
    set_msg(st, "an unknown C++ exception");
  }
  return st->code;
}

template <class T, class KVT>
using DecodeP = BatchDecodeParams<T, KVT, T, int32_t>;
template <class T, class KVT>
using PrefillP = BatchPrefillPagedParams<T, KVT, T, int32_t>;
template <bool CAP>
using Variant = DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false, CAP, /*alibi=*/false>;

constexpr PosEncodingMode kPos = PosEncodingMode::kNone;

// Decode plans in FlashInfer's CUDA-graph mode, always (eager runs too;
// 16-bit and fp8 pages alike): the schedule's shape (split-KV or not, the
// padded grid, every offset into the workspaces) then depends on the batch
// size alone, never on the lengths, so a run captured in a graph
// (cuda_graph.c) stays valid across replans of the same batch: each plan
// rewrites the same int-workspace addresses, and CTAs beyond the split
// schedule skip through the block-valid mask.
constexpr bool kGraphMode = true;

inline QKVLayout layout_of(const cu_fi_config *c) {
  return c->layout == FI_LAYOUT_HND ? QKVLayout::kHND : QKVLayout::kNHD;
}

inline bool decode_group(uint32_t g) {
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}

static_assert(sizeof(DecodePlanInfo) <= sizeof(cu_fi_plan), "DecodePlanInfo does not fit cu_fi_plan");
static_assert(sizeof(PrefillPlanInfo) <= sizeof(cu_fi_plan), "PrefillPlanInfo does not fit cu_fi_plan");

// The decode plan's split of the KV (its work estimation, which DecodePlan
// takes as a parameter). FlashInfer's own puts at least 128 tokens in a
// chunk: at batch 1 and context 1K that is 8 chunks x 8 KV heads = 64 CTAs
// on 132 SMs, each walking 128 tokens two at a time, latency-bound (15 us a
// layer for 4 MB of K/V on the H200, 0.27 TB/s). This one is FlashInfer's
// rule with the lower bound in pages a chunk as a knob (GPURT_CUDA_DECODE_
// CHUNK_PAGES, 1..1024, read once; scripts/gpu_decode_split.sh measures it), and
// FlashInfer's grid (occupancy x SMs, which its estimation queries from the
// runtime on every plan) asked once per kernel and device.
inline uint32_t decode_chunk_pages(uint32_t page_size) {
  static const long env = [] {
    const char *v = std::getenv("GPURT_CUDA_DECODE_CHUNK_PAGES");
    long n = v ? std::strtol(v, nullptr, 10) : 0;
    return n >= 1 && n <= 1024 ? n : 0L;
  }();
  if (env) return (uint32_t)env;
  // 16 tokens a chunk: on the H200 the best or within 1% of it at batch 1
  // and 32, context 1K and 8K, 1B and 8B (BENCHMARKS.md, "the decode
  // attention's KV split"; scripts/gpu_decode_split.sh).
  return std::max(16u / page_size, 1u);
}

template <uint32_t GROUP, uint32_t HD, class V, class P>
cudaError_t decode_estimate(bool &split_kv, uint32_t &max_grid, uint32_t &chunk_pages, uint32_t &new_batch,
                            uint32_t &gdy, uint32_t batch, int32_t *indptr, uint32_t num_qo_heads,
                            uint32_t page_size, bool graph, cudaStream_t s) {
  constexpr int kMaxDev = 64;
  static uint32_t grid[kMaxDev];  // 0: not asked yet (a race asks twice, same answer)
  int dev = 0;
  FLASHINFER_CUDA_CALL(cudaGetDevice(&dev));
  uint32_t g = dev >= 0 && dev < kMaxDev ? __atomic_load_n(&grid[dev], __ATOMIC_RELAXED) : 0;
  if (g == 0) {
    cudaError_t e = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP, HD, kPos, V, P>(
        split_kv, g, chunk_pages, new_batch, gdy, batch, indptr, num_qo_heads, page_size, graph, s);
    if (e != cudaSuccess) return e;
    if (dev >= 0 && dev < kMaxDev) __atomic_store_n(&grid[dev], g, __ATOMIC_RELAXED);
  }
  max_grid = g;
  gdy = num_qo_heads / GROUP;
  if (batch * gdy >= max_grid) {  // the batch fills the GPU: no split
    split_kv = false;
    chunk_pages = 1;
    for (uint32_t b = 0; b < batch; b++) chunk_pages = std::max<uint32_t>(chunk_pages, indptr[b + 1] - indptr[b]);
    new_batch = batch;
    return cudaSuccess;
  }
  std::vector<int32_t> pages(batch);
  for (uint32_t b = 0; b < batch; b++) pages[b] = indptr[b + 1] - indptr[b];
  std::tie(chunk_pages, new_batch) =
      PartitionPagedKVCacheBinarySearchMinNumPagePerBatch(max_grid, gdy, pages, decode_chunk_pages(page_size));
  split_kv = graph || new_batch != batch;  // graph mode always splits (the schedule's shape must not change)
  return cudaSuccess;
}

// ---- plan ------------------------------------------------------------------

struct plan_call {
  const cu_fi_config *c;
  void *fws, *iws, *pinned;
  uint64_t fb, ib;
  int32_t *qo, *kv;
  uint32_t batch, rows;
  cudaStream_t s;
  cu_fi_plan *out;

  template <class T, class KVT, uint32_t HD, class V>
  cudaError_t operator()() {
    if (!c->prefill_kernel) {
      using P = DecodeP<T, KVT>;
      const uint32_t group = c->num_qo_heads / c->num_kv_heads;
      if (!decode_group(group)) throw unsupported("decode group size " + std::to_string(group));
      cudaError_t e = cudaSuccess;
      DISPATCH_GQA_GROUP_SIZE(group, GROUP_SIZE, {
        auto est = decode_estimate<GROUP_SIZE, HD, V, P>;
        DecodePlanInfo info;
        try {
          e = DecodePlan<HD, kPos, V, P>(fws, fb, iws, pinned, ib, info, kv, batch,
                                         c->num_qo_heads, c->page_size, kGraphMode, s, est);
        } catch (const flashinfer::Error &) {
          // Thrown before the upload is enqueued (the allocator's check):
          // a workspace too small is a growth, anything else is passed on.
          size_t fneed = 0, ineed = 0;
          if (DecodePlanWorkspaceSize<HD, kPos, V, P>(fneed, ineed, kv, batch, c->num_qo_heads,
                                                      c->page_size, kGraphMode, s, est) == cudaSuccess &&
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
    if (q == nullptr) {  // decode through the prefill kernel: one row each
      iota.resize(batch + 1);
      for (uint32_t i = 0; i <= batch; i++) iota[i] = (int32_t)i;
      q = iota.data();
    }
    // Decode on the prefill kernel over 16-bit pages (FlashInfer's
    // tensor-core decode): its CUDA-graph mode with one query row a
    // request, as its tensor-core decode wrapper plans it. The grid (padded
    // to the GPU), the split and every workspace offset then depend on the
    // batch alone, so a run captured in a graph replays any later plan of
    // the same batch; CTAs past the plan's work skip through the
    // block-valid mask. (fp8 pages: planned per step, not recorded.)
    const bool graph = qo == nullptr && sizeof(KVT) == 2;
    const int64_t uniform = graph ? 1 : 0;
    PrefillPlanInfo info;
    cudaError_t e;
    try {
      e = PrefillPlan<int32_t>(fws, fb, iws, pinned, ib, info, q, kv, rows, batch,
                               c->num_qo_heads, c->num_kv_heads, HD, HD, c->page_size, graph,
                               sizeof(T), /*window_left=*/-1, /*fixed_split_size=*/-1,
                               /*disable_split_kv=*/false, /*num_colocated_ctas=*/0,
                               /*uniform_q_len=*/uniform, /*fixed_uniform_q_len=*/graph, s,
                               /*kv_dtype_bytes=*/sizeof(KVT));
    } catch (const flashinfer::Error &) {
      size_t fneed = 0, ineed = 0;
      if (PrefillPlanWorkspaceSize<int32_t>(fneed, ineed, q, kv, rows, batch, c->num_qo_heads,
                                            c->num_kv_heads, HD, HD, c->page_size, graph,
                                            sizeof(T), -1, -1, false, 0, uniform, graph, s,
                                            sizeof(KVT)) == cudaSuccess &&
          (fneed > fb || ineed > ib))
        throw grow(fneed, ineed);
      throw;
    }
    if (e == cudaSuccess) std::memcpy(out->v, &info, sizeof info);
    return e;
  }
};

// ---- run -------------------------------------------------------------------

struct run_call {
  const cu_fi_config *c;
  const cu_fi_plan *plan;
  const cu_fi_run_args *a;
  cudaStream_t s;
  float sm_scale, cap;  // the kernels' sm_scale and logits soft cap
  const char *tag;      // names the adapter in the cta_tile_q refusal; NULL: head_dim instead

  // The split-KV temporaries (none when the plan does not split).
  template <class T>
  struct split_tmp {
    T *v = nullptr;
    float *s = nullptr;
  };

  // Copies the plan (Info) out of *plan and sets the fields the decode and
  // prefill kernels' parameters (P) share; the plan's split-KV temporaries.
  template <class T, uint32_t HD, class P, class Info, class KV>
  split_tmp<T> fill(P &p, Info &info, const KV &kv, char *iws, char *fws) const {
    std::memcpy(&info, plan->v, sizeof info);
    p.q = static_cast<T *>(a->q);
    p.paged_kv = kv;
    p.o = static_cast<T *>(a->o);
    p.lse = nullptr;
    p.num_qo_heads = c->num_qo_heads;
    p.q_stride_n = (int32_t)(c->num_qo_heads * HD);
    p.q_stride_h = (int32_t)HD;
    p.window_left = -1;
    p.logits_soft_cap = cap;
    p.sm_scale = sm_scale;
    p.rope_rcp_scale = 1.f;
    p.rope_rcp_theta = 1e-4f;
    p.request_indices = GetPtrFromBaseOffset<int32_t>(iws, info.request_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(iws, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(iws, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(iws, info.kv_chunk_size_ptr_offset);
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    split_tmp<T> tmp;
    if (info.split_kv) {
      tmp.v = GetPtrFromBaseOffset<T>(fws, info.v_offset);
      tmp.s = GetPtrFromBaseOffset<float>(fws, info.s_offset);
    }
    return tmp;
  }

  template <class T, class KVT, uint32_t HD, class V>
  cudaError_t operator()() {
    paged_kv_t<KVT, int32_t> kv(c->num_kv_heads, c->page_size, HD, a->batch, layout_of(c),
                                static_cast<KVT *>(a->k), static_cast<KVT *>(a->v), a->indices,
                                a->indptr, a->last);
    char *iws = static_cast<char *>(a->int_ws);
    char *fws = static_cast<char *>(a->float_ws);
    if (!c->prefill_kernel) {
      DecodeP<T, KVT> p;
      DecodePlanInfo info;
      const split_tmp<T> tmp = fill<T, HD>(p, info, kv, iws, fws);
      p.block_valid_mask = nullptr;
      p.partition_kv = false;
      // Graph mode pads the grid to the whole GPU: the mask says which
      // CTAs have work in this plan.
      if (info.split_kv && info.enable_cuda_graph)
        p.block_valid_mask = GetPtrFromBaseOffset<bool>(iws, info.block_valid_mask_offset);
      return BatchDecodeWithPagedKVCacheDispatched<HD, kPos, V>(p, tmp.v, tmp.s, a->pdl != 0, s);
    }
    using P = PrefillP<T, KVT>;
    P p;
    PrefillPlanInfo info;
    const split_tmp<T> tmp = fill<T, HD>(p, info, kv, iws, fws);
    p.q_indptr = a->qo_indptr;
    p.group_size = uint_fastdiv(c->num_qo_heads / c->num_kv_heads);
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(iws, info.qo_tile_indices_offset);
    if (info.split_kv) p.merge_indptr = GetPtrFromBaseOffset<int32_t>(iws, info.merge_indptr_offset);
    p.max_total_num_rows = (uint32_t)info.total_num_rows;
    p.total_num_rows = nullptr;
    p.block_valid_mask = nullptr;
    if (info.enable_cuda_graph) {  // decode rows: the padded grid's mask, the rows on the device
      p.total_num_rows = GetPtrFromBaseOffset<uint32_t>(iws, info.total_num_rows_offset);
      p.block_valid_mask = GetPtrFromBaseOffset<bool>(iws, info.block_valid_mask_offset);
    }
    const bool causal = c->causal != 0;
    auto go = [&](auto tile) -> cudaError_t {
      constexpr uint32_t TQ = decltype(tile)::value;
      if (causal)
        return BatchPrefillWithPagedKVCacheDispatched<true, TQ, HD, HD, kPos, false, MaskMode::kCausal,
                                                      false, V, P>(p, tmp.v, tmp.s, a->pdl != 0, s);
      return BatchPrefillWithPagedKVCacheDispatched<true, TQ, HD, HD, kPos, false, MaskMode::kNone,
                                                    false, V, P>(p, tmp.v, tmp.s, a->pdl != 0, s);
    };
    switch (info.cta_tile_q) {
      case 16: return go(std::integral_constant<uint32_t, 16>{});
      case 64: return go(std::integral_constant<uint32_t, 64>{});
      case 128:
        if constexpr (HD < 256) return go(std::integral_constant<uint32_t, 128>{});
        [[fallthrough]];
      default:
        if (tag != nullptr)
          throw unsupported(std::string(tag) + ": the plan's cta_tile_q " + std::to_string(info.cta_tile_q) +
                            " has no kernel in this build");
        throw unsupported("the plan's cta_tile_q " + std::to_string(info.cta_tile_q) +
                          " for head_dim " + std::to_string(HD) + " has no kernel in this build");
    }
  }
};

// ---- append ----------------------------------------------------------------

// The blocks of 256 threads an append of per_head units per head takes
// (one thread a unit of kv_append_slot, cuda_append.cuh).
inline unsigned append_blocks(const cu_kv_append_args *a, uint32_t per_head) {
  uint64_t threads = a->nnz * a->num_kv_heads * per_head;
  uint64_t blocks = (threads + 255) / 256;
  if (blocks > 0x7fffffffull) throw unsupported("kv_append: too many rows for one launch");
  return (unsigned)blocks;
}

}  // namespace gpurt_fi_common

#endif  // GPURT_CUDA_ATTENTION_FI_CUH_
