/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checks of ABI 1.5 (attention over a paged KV cache) shared by every
 * plugin: layouts, descriptors and a step's host counts.
 */
#include "gp_attention.h"

#define U(x) ((unsigned long long)(x))

gpurt_error *gp_kv_layout_check(const gpurt_kv_layout *l, const char *what) {
  if (l->dtype != GPURT_DTYPE_F16 && l->dtype != GPURT_DTYPE_BF16 && l->dtype != GPURT_DTYPE_FP8_E4M3)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: dtype %s (%d) is not supported (f16, bf16, fp8_e4m3)", what,
                  gp_dtype_name(l->dtype), l->dtype);
  if (l->dtype == GPURT_DTYPE_FP8_E4M3 && l->qo_dtype != GPURT_DTYPE_F16 && l->qo_dtype != GPURT_DTYPE_BF16)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s: layout.qo_dtype %s (%d) must be f16 or bf16 for an fp8_e4m3 cache (the queries', "
                  "outputs' and appended rows' type)", what, gp_dtype_name(l->qo_dtype), l->qo_dtype);
  if (l->head_dim != 64 && l->head_dim != 128 && l->head_dim != 256)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: head_dim %u is not supported (64, 128, 256)", what,
                  l->head_dim);
  if (l->layout != GPURT_KV_LAYOUT_NHD && l->layout != GPURT_KV_LAYOUT_HND)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: layout %d is not a GPURT_KV_LAYOUT (NHD 0, HND 1)", what,
                  l->layout);
  if (l->page_size == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: page_size is 0 (must be >= 1)", what);
  if (l->num_kv_heads == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: num_kv_heads is 0 (must be >= 1)", what);
  if (l->dtype != GPURT_DTYPE_FP8_E4M3 && l->qo_dtype != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s: layout.qo_dtype is %d (must be 0 for a %s cache: its queries are %s)", what, l->qo_dtype,
                  gp_dtype_name(l->dtype), gp_dtype_name(l->dtype));
  if ((uint64_t)l->page_size * l->num_kv_heads * l->head_dim > (1ull << 31))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: page_size %u x num_kv_heads %u x head_dim %u elements per page "
                  "exceed 2^31", what, l->page_size, l->num_kv_heads, l->head_dim);
  return NULL;
}

static int finite_pos(double x) { return x > 0 && x <= 1.7976931348623157e308; }

gpurt_error *gp_attention_desc_check(const gpurt_attention_desc *d) {
  const char *w = "attention_create";
  if (d->kind != GPURT_ATTENTION_DECODE && d->kind != GPURT_ATTENTION_PREFILL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: kind %d is not a GPURT_ATTENTION (decode 1, prefill 2)", w,
                  d->kind);
  gpurt_error *e = gp_kv_layout_check(&d->layout, w);
  if (e) return e;
  if (d->num_qo_heads == 0 || d->num_qo_heads % d->layout.num_kv_heads != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: num_qo_heads %u is not a positive multiple of num_kv_heads %u",
                  w, d->num_qo_heads, d->layout.num_kv_heads);
  if (d->causal > 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: causal is %u (must be 0 or 1)", w, d->causal);
  if (d->causal && d->kind == GPURT_ATTENTION_DECODE)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: causal is 1 for decode (a decode row sees every token; "
                  "set it for prefill only)", w);
  if (d->sm_scale != 0 && !finite_pos(d->sm_scale))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: sm_scale %g must be 0 (default) or positive and finite", w,
                  d->sm_scale);
  if (d->logits_soft_cap != 0 && !finite_pos(d->logits_soft_cap))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: logits_soft_cap %g must be 0 (none) or positive and finite",
                  w, d->logits_soft_cap);
  if (d->max_batch_size == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: max_batch_size is 0 (must be >= 1)", w);
  if (d->kind == GPURT_ATTENTION_PREFILL && (d->max_rows == 0 || d->max_rows > (1ull << 31)))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: max_rows %llu must be 1 .. 2^31 for prefill", w,
                  U(d->max_rows));
  for (size_t i = 0; i < sizeof d->reserved; i++)
    if (d->reserved[i] || d->reserved2)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: reserved fields must be 0", w);
  return NULL;
}

double gp_attention_sm_scale(const gpurt_attention_desc *d) {
  if (d->sm_scale != 0) return d->sm_scale;
  switch (d->layout.head_dim) {
    case 64: return 0.125;
    case 128: return 0.08838834764831845; /* 1/sqrt(128) */
    case 256: return 0.0625;
    default: return 0; /* not reached: the descriptor was checked */
  }
}

gpurt_error *gp_attention_plan_check(const gpurt_attention_desc *d, const gpurt_attention_plan_args *a,
                                     gp_attention_sched *out) {
  const char *w = "attention_plan";
  int prefill = d->kind == GPURT_ATTENTION_PREFILL;
  uint32_t n = a->batch_size;
  if (n == 0 || n > d->max_batch_size)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: batch_size %u must be 1 .. max_batch_size %u", w, n,
                  d->max_batch_size);
  if (a->kv_indptr == NULL || a->kv_last_page_len == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", w,
                  a->kv_indptr == NULL ? "kv_indptr" : "kv_last_page_len");
  if (prefill && a->qo_indptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is NULL (prefill needs it)", w);
  if (!prefill && a->qo_indptr != NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is set for decode (one row per request; pass NULL)",
                  w);
  if (a->kv_indptr[0] != 0 || (prefill && a->qo_indptr[0] != 0))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s[0] is %d (must be 0)", w,
                  a->kv_indptr[0] != 0 ? "kv_indptr" : "qo_indptr",
                  a->kv_indptr[0] != 0 ? a->kv_indptr[0] : a->qo_indptr[0]);
  gp_attention_sched s = {.batch = n};
  uint32_t ps = d->layout.page_size;
  for (uint32_t b = 0; b < n; b++) {
    int64_t np = (int64_t)a->kv_indptr[b + 1] - a->kv_indptr[b];
    if (np < 1)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: request %u has %lld pages (kv_indptr[%u] %d, kv_indptr[%u] "
                    "%d; every request needs at least one)", w, b, (long long)np, b, a->kv_indptr[b], b + 1,
                    a->kv_indptr[b + 1]);
    int32_t last = a->kv_last_page_len[b];
    if (last < 1 || (uint32_t)last > ps)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: kv_last_page_len[%u] is %d (must be 1 .. page_size %u)", w,
                    b, last, ps);
    uint64_t kv = (uint64_t)(np - 1) * ps + (uint64_t)last;
    uint64_t qo = 1;
    if (prefill) {
      int64_t q = (int64_t)a->qo_indptr[b + 1] - a->qo_indptr[b];
      if (q < 1)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: request %u has %lld query rows (qo_indptr[%u] %d, "
                      "qo_indptr[%u] %d; at least one)", w, b, (long long)q, b, a->qo_indptr[b], b + 1,
                      a->qo_indptr[b + 1]);
      qo = (uint64_t)q;
      if (d->causal && qo > kv)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: request %u has %llu query rows but %llu tokens (causal "
                      "needs qo_len <= kv_len)", w, b, U(qo), U(kv));
    }
    if (kv > s.max_kv) s.max_kv = kv;
    if (qo > s.max_qo) s.max_qo = qo;
    s.kv_tokens += kv;
    s.rows += qo;
  }
  s.pages = (uint64_t)a->kv_indptr[n];
  uint64_t max_rows = prefill ? d->max_rows : d->max_batch_size;
  if (s.rows > max_rows)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %llu query rows exceed max_rows %llu", w, U(s.rows),
                  U(max_rows));
  *out = s;
  return NULL;
}

gpurt_error *gp_attention_align(const char *what, const char *name, uint64_t off, uint64_t align) {
  if (off % align != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s offset %llu is not a multiple of %llu bytes", what, name,
                  U(off), U(align));
  return NULL;
}

gpurt_error *gp_kv_pages_check(const gpurt_kv_layout *l, const gpurt_kv_pages *p, uint32_t batch,
                               uint64_t n_indices, uint64_t max_pages, const char *w, gp_kv_extent *out) {
  gpurt_error *e;
  if (p->num_pages == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: num_pages is 0 (must be >= 1)", w);
  uint64_t page_bytes = gp_kv_page_elems(l) * gp_dtype_size(l->dtype);
  if (p->num_pages > UINT64_MAX / page_bytes)
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: num_pages %llu overflows", w, U(p->num_pages));
  if (p->num_pages > max_pages)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: num_pages %llu exceeds int32 page indices", w, U(p->num_pages));
  if ((e = gp_attention_align(w, "k", p->k_offset, 16)) || (e = gp_attention_align(w, "v", p->v_offset, 16)) ||
      (e = gp_attention_align(w, "indptr", p->indptr_offset, 4)) ||
      (e = gp_attention_align(w, "indices", p->indices_offset, 4)) ||
      (e = gp_attention_align(w, "last_page_len", p->last_page_len_offset, 4)))
    return e;
  out->kv = p->num_pages * page_bytes;
  out->indptr = 4ull * ((uint64_t)batch + 1);
  out->last = 4ull * batch;
  out->indices = 4ull * (n_indices == 0 ? 1 : n_indices);
  return NULL;
}

gpurt_error *gp_kv_append_check(const gpurt_kv_append_args *in, gpurt_kv_append_args *a, uint64_t *row_bytes) {
  const char *w = "kv_append";
  gpurt_error *e;
  if ((e = gp_read_struct(a, sizeof *a, in, "kv_append: args"))) return e;
  if ((e = gp_kv_layout_check(&a->layout, w))) return e;
  if (a->batch_size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: batch_size is 0 (must be >= 1)", w);
  if (a->nnz > (1ull << 31)) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: nnz %llu exceeds 2^31", w, U(a->nnz));
  if ((e = gp_kv_scales_check(&a->layout, a->k_scale, a->v_scale, w))) return e;
  if (a->reserved2 != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: reserved2 is %u (must be 0)", w, a->reserved2);
  if (a->num_qo_heads > 65536)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: num_qo_heads %u exceeds 65536", w, a->num_qo_heads);
  if (a->inv_freq == NULL && (a->q != NULL || a->num_qo_heads != 0))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is set but inv_freq is NULL (q is rotated only with a rotary "
                  "embedding)", w, a->q != NULL ? "q" : "num_qo_heads");
  if (a->inv_freq != NULL) {
    if ((a->q == NULL) != (a->num_qo_heads == 0))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: q is %s but num_qo_heads is %u (q needs num_qo_heads >= 1, "
                    "no q needs 0)", w, a->q != NULL ? "set" : "NULL", a->num_qo_heads);
    const int32_t t = a->layout.dtype;
    if (t != GPURT_DTYPE_F16 && t != GPURT_DTYPE_BF16)
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the rotary embedding (inv_freq) needs an f16 or bf16 cache, not %s",
                    w, gp_dtype_name(t));
  }
  *row_bytes = a->nnz * a->layout.num_kv_heads * a->layout.head_dim * gp_dtype_size(gp_kv_qo_dtype(&a->layout));
  return NULL;
}

gpurt_error *gp_kv_scales_check(const gpurt_kv_layout *l, float k_scale, float v_scale, const char *w) {
  if (l->dtype != GPURT_DTYPE_FP8_E4M3) return NULL;
  if (!(k_scale > 0 && k_scale <= 3.4028234663852886e38f) || !(v_scale > 0 && v_scale <= 3.4028234663852886e38f))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "%s: k_scale %g and v_scale %g of an fp8_e4m3 cache must be positive and finite", w,
                  (double)k_scale, (double)v_scale);
  return NULL;
}
