// SPDX-License-Identifier: Apache-2.0
//
// cuda_append.cuh — the paged KV append's device code, apart from
// FlashInfer: the slot arithmetic both adapters' append kernels share
// (kv_append_slot: cuda_attention.cu's gpurt_kv_append_kernel over 16-bit
// pages, cuda_attention_fp8.cu's gpurt_fi8_append_kernel over e4m3 pages)
// and the 16-bit append kernel itself with ABI 1.10's rotary embedding
// (rope8, gpurt_kv_append_kernel; launched by cu_fi_kv_append). The host
// side (append_blocks, the launch) stays in the adapters: it throws their
// exceptions.
//
// It needs only the CUDA 16-bit types, cuda_pdl.cuh, cuda_rope.cuh and
// cuda_attention.h, so that with GPURT_CUDA_EMU defined it compiles on the
// host against ../emu/cuda_emu.h and its kernel runs unmodified on the
// CPU (plugins/cuda/emu/append_emu_test.cc, scripts/cuda_emu.sh).
// Included by cuda_attention.cu and cuda_attention_fp8.cu (after
// cuda_attention_fi.cuh), whose cached objects scripts/build_cuda.sh keys
// on it.
#ifndef GPURT_CUDA_APPEND_CUH_
#define GPURT_CUDA_APPEND_CUH_

#ifdef GPURT_CUDA_EMU
#include "../emu/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "cuda_attention.h"
#include "cuda_pdl.cuh"
#include "cuda_rope.cuh"

// gpurt.h's GPURT_KV_LAYOUT_HND (cuda_attention_fi.cuh defines it the same
// way; cuda_attention.c asserts it matches).
#ifndef FI_LAYOUT_HND
#define FI_LAYOUT_HND 1
#endif

namespace gpurt_fi_common {

// The append kernels' thread t handles unit t % per_head (an element, or 16
// bytes) of head (t / per_head) % num_kv_heads of row t / (per_head *
// num_kv_heads), in K and V. kv_append_slot says where that unit goes in
// the pages (in units), or false when the row is skipped: a batch index
// or position out of range, a request whose pages are malformed or end
// beyond n_indices, a page index beyond the cache.
__device__ __forceinline__ bool kv_append_slot(const cu_kv_append_args &a, uint32_t per_head, uint64_t t,
                                               uint64_t *at) {
  uint32_t heads = a.num_kv_heads, page_size = a.page_size;
  uint64_t per_row = (uint64_t)heads * per_head;
  if (t >= a.nnz * per_row) return false;
  uint64_t i = t / per_row;
  uint32_t h = (uint32_t)((t / per_head) % heads);
  uint32_t u = (uint32_t)(t % per_head);
  int32_t b = a.batch_indices[i], p = a.positions[i];
  if (b < 0 || (uint32_t)b >= a.batch || p < 0) return false;
  int32_t p0 = a.indptr[b], p1 = a.indptr[b + 1], lp = a.last[b];
  if (p0 < 0 || p1 <= p0 || (uint64_t)p1 > a.n_indices || lp < 1 || (uint32_t)lp > page_size) return false;
  uint64_t len = (uint64_t)(p1 - p0 - 1) * page_size + (uint64_t)lp;
  if ((uint64_t)p >= len) return false;
  int32_t page = a.indices[p0 + p / page_size];
  if (page < 0 || (uint64_t)page >= a.num_pages) return false;
  uint64_t slot = (uint64_t)p % page_size;
  *at = (uint64_t)page * page_size * per_row +
        (a.layout == FI_LAYOUT_HND ? ((uint64_t)h * page_size + slot) : (slot * heads + h)) * per_head + u;
  return true;
}

}  // namespace gpurt_fi_common

namespace gpurt_fi {

using namespace gpurt_fi_common;

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

#endif  // GPURT_CUDA_APPEND_CUH_
