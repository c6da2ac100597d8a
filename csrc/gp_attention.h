/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_attention.h — the checks of ABI 1.5 (attention over a paged KV
 * cache) that every plugin shares, so that an invalid or unsupported
 * request gets the same error everywhere. No libm, no allocation: the CUDA
 * plugin links it too.
 */
#ifndef GPURT_CSRC_ATTENTION_H_
#define GPURT_CSRC_ATTENTION_H_

#include "gp_common.h"

/* Validates a cache layout: UNSUPPORTED naming the field for a dtype or a
 * head_dim 1.5 does not define, INVALID_ARGUMENT for the rest. `what`
 * prefixes the message ("kv_append", "attention_create"). */
gpurt_error *gp_kv_layout_check(const gpurt_kv_layout *l, const char *what);

/* Validates a descriptor (layout included). */
gpurt_error *gp_attention_desc_check(const gpurt_attention_desc *d);

/* sm_scale with its default applied (1/sqrt(head_dim) for 0). */
double gp_attention_sm_scale(const gpurt_attention_desc *d);

/* A step's checked counts. */
typedef struct gp_attention_sched {
  uint32_t batch;
  uint64_t rows;     /* query rows: batch (decode) or qo_indptr[batch] */
  uint64_t pages;    /* kv_indptr[batch]: entries of indices */
  uint64_t max_kv;   /* the longest request, tokens */
  uint64_t max_qo;   /* the most query rows of one request */
  uint64_t kv_tokens;/* sum of the lengths */
} gp_attention_sched;

/* Checks plan arguments against a descriptor and fills *out. The host
 * arrays are read (batch + 1 / batch entries). */
gpurt_error *gp_attention_plan_check(const gpurt_attention_desc *d,
                                     const gpurt_attention_plan_args *a,
                                     gp_attention_sched *out);

/* An offset the ABI wants aligned (16 for data, 4 for int32 arrays). */
gpurt_error *gp_attention_align(const char *what, const char *name, uint64_t off, uint64_t align);

/* The bytes a call's page table (gpurt_kv_pages) spans in each of its
 * buffers, for `batch` requests and `n_indices` entries of indices (0 is
 * taken as 1: an append reads what the device's indptr names, at least
 * one entry). */
typedef struct gp_kv_extent {
  uint64_t kv;        /* K and V: num_pages pages each */
  uint64_t indptr;    /* 4 * (batch + 1) */
  uint64_t indices;   /* 4 * n_indices */
  uint64_t last;      /* 4 * batch */
} gp_kv_extent;

/* The one check of a page table, used by kv_append and attention_run on
 * every plugin: num_pages >= 1 and at most max_pages (UNSUPPORTED above it:
 * a plugin's index width), no overflow, the offsets' alignment (16 for K
 * and V, 4 for the int32 arrays); then *out. The caller resolves each
 * buffer and checks [offset, offset + out->X) inside it. `w` prefixes the
 * messages. */
gpurt_error *gp_kv_pages_check(const gpurt_kv_layout *l, const gpurt_kv_pages *p, uint32_t batch,
                               uint64_t n_indices, uint64_t max_pages, const char *w, gp_kv_extent *out);

/* kv_append's own checks after the stream: reads the caller's struct into
 * *a, checks the layout, batch_size >= 1 and nnz <= 2^31, and writes the
 * bytes of k_rows (and v_rows) into *row_bytes. a->nnz 0 is a no-op (the
 * caller returns). The page table is then gp_kv_pages_check's, with
 * batch_size requests and one index entry. */
gpurt_error *gp_kv_append_check(const gpurt_kv_append_args *in, gpurt_kv_append_args *a, uint64_t *row_bytes);

/* Elements of one page of K (or V). */
static inline uint64_t gp_kv_page_elems(const gpurt_kv_layout *l) {
  return (uint64_t)l->page_size * l->num_kv_heads * l->head_dim;
}

/* The type of the queries, outputs and appended rows: qo_dtype for an fp8
 * cache (1.8), else the cache's dtype. */
static inline int32_t gp_kv_qo_dtype(const gpurt_kv_layout *l) {
  return l->dtype == GPURT_DTYPE_FP8_E4M3 ? l->qo_dtype : l->dtype;
}

/* An fp8 cache's scales (1.8): positive and finite; nothing for a 16-bit
 * cache. */
gpurt_error *gp_kv_scales_check(const gpurt_kv_layout *l, float k_scale, float v_scale, const char *w);

/* Element offset of (page, slot, head, 0) in a K or V region. */
static inline uint64_t gp_kv_elem(const gpurt_kv_layout *l, uint64_t page,
                                  uint64_t slot, uint64_t head) {
  uint64_t base = page * gp_kv_page_elems(l);
  if (l->layout == GPURT_KV_LAYOUT_HND)
    return base + (head * l->page_size + slot) * l->head_dim;
  return base + (slot * l->num_kv_heads + head) * l->head_dim;
}

#endif /* GPURT_CSRC_ATTENTION_H_ */
