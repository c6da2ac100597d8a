// SPDX-License-Identifier: Apache-2.0
//
// gpurt_attention.metal — attention over a paged KV cache (ABI 1.5) for the
// Metal plugin (metal_attention.m): the append of new K/V rows and one
// kernel for decode and prefill, with the semantics of the mock's float64
// reference (plugins/mock/src/mock_attention.c): query head h reads KV head
// h / (hq / hk); query row i of a request with qo rows and kv tokens sees
// tokens 0 .. kv - qo + i under the causal mask, all kv tokens without it;
// s = scale * q.k, with a soft cap c > 0 s = c * tanh(s / c); the output is
// the softmax-weighted sum of the V rows, accumulated in f32.
//
// Elements are 16-bit (f16 or bf16, a uniform flag); bf16 is converted by
// hand (no `bfloat` type before Metal 3.1). Written on Linux: not compiled
// or run yet.
#include <metal_stdlib>
using namespace metal;

struct ga_params {
  uint hq, hk, dim, page_size;
  uint hnd, bf16, causal, prefill;
  uint batch, rows, num_pages, pad;
  float scale, cap;
};

struct ga_append_params {
  uint hk, dim, page_size, hnd;
  uint batch, num_pages;
  ulong nnz;
};

static inline float ga_load(device const ushort *p, ulong i, uint bf16) {
  ushort v = p[i];
  return bf16 ? as_type<float>(uint(v) << 16) : float(as_type<half>(v));
}

// Round to nearest even (bf16: by hand; f16: the conversion does it).
static inline ushort ga_bits(float x, uint bf16) {
  if (bf16) {
    uint u = as_type<uint>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ushort((u >> 16) | 0x40u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return ushort(u >> 16);
  }
  return as_type<ushort>(half(x));
}

// Element offset of (page, slot, kv head, 0) in a K or V region.
static inline ulong ga_at(uint page, uint slot, uint head, constant ga_params &p) {
  ulong base = (ulong)page * p.page_size * p.hk * p.dim;
  if (p.hnd) return base + ((ulong)head * p.page_size + slot) * p.dim;
  return base + ((ulong)slot * p.hk + head) * p.dim;
}

#define GA_SG 4      // simdgroups per threadgroup (128 threads)
#define GA_PER 8     // elements of head_dim per lane, at most (256 / 32)

// One threadgroup per (query row, query head): each simdgroup walks every
// GA_SG-th token with an online softmax (the 32 lanes split head_dim and
// reduce the dot product with simd_sum), then the simdgroups' partial
// states are merged. Grid: (rows, hq) threadgroups of 128 threads.
kernel void ga_attention(device const ushort *q [[buffer(0)]], device ushort *o [[buffer(1)]],
                         device const ushort *k [[buffer(2)]], device const ushort *v [[buffer(3)]],
                         device const int *indptr [[buffer(4)]], device const int *indices [[buffer(5)]],
                         device const int *last [[buffer(6)]], device const int *qo_indptr [[buffer(7)]],
                         constant ga_params &p [[buffer(8)]],
                         uint2 tg [[threadgroup_position_in_grid]],
                         uint sg [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float t_m[GA_SG], t_l[GA_SG];
  threadgroup int t_bad[GA_SG];
  threadgroup float t_acc[GA_SG][256];
  const uint row = tg.x, h = tg.y;
  if (row >= p.rows || h >= p.hq) return;
  const uint D = p.dim, per = D / 32;
  uint b = row, i = 0, qo_len = 1;
  if (p.prefill) {
    // The request of this row: the last b with qo_indptr[b] <= row.
    uint lo = 0, hi = p.batch;
    while (hi - lo > 1) {
      uint mid = (lo + hi) / 2;
      if ((uint)qo_indptr[mid] <= row) lo = mid;
      else hi = mid;
    }
    b = lo;
    i = row - (uint)qo_indptr[b];
    qo_len = (uint)(qo_indptr[b + 1] - qo_indptr[b]);
  }
  const int p0 = indptr[b], p1 = indptr[b + 1], lp = last[b];
  int bad = (p0 < 0 || p1 <= p0 || lp < 1 || (uint)lp > p.page_size) ? 1 : 0;
  uint kv = bad ? 0u : (uint)(p1 - p0 - 1) * p.page_size + (uint)lp;
  uint n = kv;
  if (p.causal && !bad) {
    if (qo_len > kv) bad = 1;
    else n = kv - qo_len + i + 1;
  }
  const uint kh = h / (p.hq / p.hk);
  float qv[GA_PER], acc[GA_PER];
  const ulong qbase = ((ulong)row * p.hq + h) * D + lane * per;
  for (uint j = 0; j < per; j++) {
    qv[j] = ga_load(q, qbase + j, p.bf16);
    acc[j] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (uint t = sg; t < n && !bad; t += GA_SG) {
    int pg = indices[p0 + (int)(t / p.page_size)];
    if (pg < 0 || (uint)pg >= p.num_pages) {
      bad = 1;
      break;
    }
    ulong at = ga_at((uint)pg, t % p.page_size, kh, p) + lane * per;
    float s = 0.f;
    for (uint j = 0; j < per; j++) s += qv[j] * ga_load(k, at + j, p.bf16);
    s = simd_sum(s) * p.scale;
    if (p.cap > 0.f) s = p.cap * precise::tanh(s / p.cap);
    float mn = max(m, s);
    float corr = exp(m - mn), w = exp(s - mn);
    l = l * corr + w;
    for (uint j = 0; j < per; j++) acc[j] = acc[j] * corr + w * ga_load(v, at + j, p.bf16);
    m = mn;
  }
  if (lane == 0) {
    t_m[sg] = m;
    t_l[sg] = l;
    t_bad[sg] = bad;
  }
  for (uint j = 0; j < per; j++) t_acc[sg][lane * per + j] = acc[j];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg != 0) return;
  int any_bad = 0;
  float M = -INFINITY;
  for (uint s = 0; s < GA_SG; s++) {
    any_bad |= t_bad[s];
    M = max(M, t_m[s]);
  }
  float L = 0.f, wsg[GA_SG];
  for (uint s = 0; s < GA_SG; s++) {
    wsg[s] = t_l[s] > 0.f ? exp(t_m[s] - M) : 0.f;
    L += t_l[s] * wsg[s];
  }
  const ulong obase = ((ulong)row * p.hq + h) * D + lane * per;
  for (uint j = 0; j < per; j++) {
    float x = 0.f;
    for (uint s = 0; s < GA_SG; s++) x += t_acc[s][lane * per + j] * wsg[s];
    x = (any_bad || !(L > 0.f)) ? NAN : x / L;
    o[obase + j] = ga_bits(x, p.bf16);
  }
}

// Append: row r of k_rows / v_rows ([nnz][hk][dim]) to request
// batch_indices[r] at token positions[r]; rows whose batch index, position
// or page is out of range are skipped (as the mock does). Grid:
// (ceil(hk * dim / 256), nnz) threadgroups of 256 threads, one element each.
kernel void ga_kv_append(device ushort *k [[buffer(0)]], device ushort *v [[buffer(1)]],
                         device const ushort *kr [[buffer(2)]], device const ushort *vr [[buffer(3)]],
                         device const int *bi [[buffer(4)]], device const int *pos [[buffer(5)]],
                         device const int *indptr [[buffer(6)]], device const int *indices [[buffer(7)]],
                         device const int *last [[buffer(8)]], constant ga_append_params &p [[buffer(9)]],
                         uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]]) {
  const uint e = tg.x * 256 + tid;
  const ulong r = tg.y;
  const uint per_row = p.hk * p.dim;
  if (e >= per_row || r >= p.nnz) return;
  const int b = bi[r], t = pos[r];
  if (b < 0 || (uint)b >= p.batch || t < 0) return;
  const int p0 = indptr[b], p1 = indptr[b + 1], lp = last[b];
  if (p0 < 0 || p1 <= p0 || lp < 1 || (uint)lp > p.page_size) return;
  const ulong len = (ulong)(p1 - p0 - 1) * p.page_size + (ulong)lp;
  if ((ulong)t >= len) return;
  const int pg = indices[p0 + t / (int)p.page_size];
  if (pg < 0 || (uint)pg >= p.num_pages) return;
  const uint slot = (uint)t % p.page_size, head = e / p.dim, d = e % p.dim;
  ulong at = (ulong)pg * p.page_size * per_row;
  at += p.hnd ? ((ulong)head * p.page_size + slot) * p.dim : ((ulong)slot * p.hk + head) * p.dim;
  k[at + d] = kr[r * per_row + e];
  v[at + d] = vr[r * per_row + e];
}
