/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention over a paged KV cache on CUDA (ABI 1.5): kv_append and the
 * attention objects, over FlashInfer's kernels through the adapter
 * cuda_attention.cu (cuda_attention.h: C types only; every C++ exception is
 * caught there).
 *
 *  kv_append          the plugin's own kernel (gpurt_kv_append_kernel in the
 *                     adapter): a thread per 16 bytes of a row's head; rows
 *                     whose batch index, position or page is out of range
 *                     are skipped, as the mock does
 *  decode             FlashInfer's decode kernel for group sizes 1, 2, 3, 4,
 *                     6, 8 and 16 (what its dispatcher has); any other group
 *                     size runs FlashInfer's prefill kernel with one query
 *                     row per request (qo_indptr 0, 1, ..., batch: a device
 *                     array the object uploads once at create)
 *  prefill            FlashInfer's prefill kernel, causal mask or none
 *
 * Checks are csrc's (gp_attention.c): the same codes and messages as the
 * mock. An object holds its workspace: a float and an int device buffer
 * and two pinned host buffers for the plan's schedule. A plan writes one
 * pinned buffer on the host and enqueues its copy into the int buffer on the
 * plan's stream, then records that buffer's event; the next plan uses the
 * other buffer, and a plan waits (on the host) for a buffer's event before
 * writing it again, so a copy never reads a half-rewritten schedule. When
 * FlashInfer needs more workspace than the object has (the sizes depend on
 * the lengths), the plan synchronizes the context (work of earlier plans
 * may still use it), frees it and allocates what is needed.
 *
 * Lock: cu_attn.mu (a new entry of cuda_internal.h's lock order) guards the
 * object's plan and workspace from a plan's start to its upload's enqueue,
 * and a run from reading the plan to enqueuing the kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_internal.h"
#include "cuda_attention_fp8.h"
#include "gp_attention.h"

/* cuda_attention.cu (C++, without gpurt.h) copies these three values. */
_Static_assert(GPURT_DTYPE_F16 == 2 && GPURT_DTYPE_BF16 == 3 && GPURT_KV_LAYOUT_HND == 1,
               "cuda_attention.cu's FI_DTYPE_F16, FI_DTYPE_BF16 and FI_LAYOUT_HND must match gpurt.h");

#define U(x) ((unsigned long long)(x))

#ifdef GPURT_CUDA_NO_FLASHINFER
/* Built without FlashInfer's headers (scripts/build_cuda.sh --ci where the
 * wheel could not be fetched): the slots validate, then answer unsupported. */
static int no_fi(cu_fi_status *st) {
  memset(st, 0, sizeof *st);
  st->code = CU_FI_UNSUPPORTED;
  snprintf(st->msg, sizeof st->msg, "this plugin was built without FlashInfer (no flashinfer-python headers)");
  return st->code;
}
int cu_fi_plan_make(const cu_fi_config *c, void *f, uint64_t fb, void *i, void *p, uint64_t ib,
                    const int32_t *q, const int32_t *kv, uint32_t b, uint32_t r, void *s,
                           cu_fi_plan *plan, cu_fi_status *st) {
  return no_fi(st);
}
int cu_fi_run(const cu_fi_config *c, const cu_fi_plan *p, const cu_fi_run_args *a, void *s,
                     cu_fi_status *st) {
  return no_fi(st);
}
int cu_fi_kv_append(const cu_kv_append_args *a, void *s, cu_fi_status *st) { return no_fi(st); }
int cu_fi_has_arch(int major, int minor) { return 0; }
#endif

#if defined(GPURT_CUDA_NO_FI8) && !defined(GPURT_CUDA_NO_FLASHINFER)
/* Built without the fp8 KV adapter (cuda_attention_fp8.cu): an fp8 cache
 * is answered unsupported. */
static int no_fi8(cu_fi_status *st) {
  memset(st, 0, sizeof *st);
  st->code = CU_FI_UNSUPPORTED;
  snprintf(st->msg, sizeof st->msg, "this plugin was built without the fp8 KV cache adapter");
  return st->code;
}
int cu_fi8_plan_make(const cu_fi_config *c, void *f, uint64_t fb, void *i, void *p, uint64_t ib,
                     const int32_t *q, const int32_t *kv, uint32_t b, uint32_t r, void *s, cu_fi_plan *plan,
                     cu_fi_status *st) {
  return no_fi8(st);
}
int cu_fi8_run(const cu_fi_config *c, const cu_fi_plan *p, const cu_fi_run_args *a, uint64_t rows, float ks,
               float vs, void *s, cu_fi_status *st) {
  return no_fi8(st);
}
int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo, float ks, float vs, void *s, cu_fi_status *st) {
  return no_fi8(st);
}
#elif defined(GPURT_CUDA_NO_FLASHINFER)
int cu_fi8_plan_make(const cu_fi_config *c, void *f, uint64_t fb, void *i, void *p, uint64_t ib,
                     const int32_t *q, const int32_t *kv, uint32_t b, uint32_t r, void *s, cu_fi_plan *plan,
                     cu_fi_status *st) {
  return no_fi(st);
}
int cu_fi8_run(const cu_fi_config *c, const cu_fi_plan *p, const cu_fi_run_args *a, uint64_t rows, float ks,
               float vs, void *s, cu_fi_status *st) {
  return no_fi(st);
}
int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo, float ks, float vs, void *s, cu_fi_status *st) {
  return no_fi(st);
}
#endif

typedef struct cu_attn {
  uint32_t dev;
  gpurt_attention_desc d;
  cu_fi_config cfg;
  pthread_mutex_t mu;
  CUdeviceptr fws, iws; /* float and int workspace */
  uint64_t fws_bytes, iws_bytes;
  void *pinned[2];      /* iws_bytes each */
  CUevent ev[2];        /* recorded after the copy out of pinned[i] */
  int ev_live[2];
  int cur;              /* the pinned buffer of the last plan */
  CUdeviceptr iota;     /* decode on the prefill kernel: int32 0..max_batch */
  int planned;
  gpurt_stream *stream; /* the stream of the last plan */
  CUstream cs;
  cu_fi_plan plan;
  gp_attention_sched sched;
} cu_attn;

/* ---- errors ------------------------------------------------------------------ */

/* The gpurt error of an adapter status (code != CU_FI_OK). */
static gpurt_error *fi_err(const cu_fi_status *st, const char *what) {
  switch (st->code) {
    case CU_FI_CUDA: {
      int32_t code = GPURT_ERR_INTERNAL;
      if (st->cuda == 2 /* cudaErrorMemoryAllocation */) code = GPURT_ERR_OUT_OF_MEMORY;
      else if (st->cuda == 98 /* cudaErrorInvalidDeviceFunction */ ||
               st->cuda == 209 /* cudaErrorNoKernelImageForDevice */ ||
               st->cuda == 701 /* cudaErrorLaunchOutOfResources */)
        code = GPURT_ERR_LAUNCH_FAILED;
      return gp_err_vendor(code, st->cuda, "%s: CUDA runtime error %s", what, st->msg);
    }
    case CU_FI_UNSUPPORTED:
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: %s", what, st->msg);
    case CU_FI_GROW:
      return gp_err(GPURT_ERR_INTERNAL, "%s: workspace of %llu + %llu bytes needed", what,
                    U(st->float_need), U(st->int_need));
    default:
      return gp_err(GPURT_ERR_INTERNAL, "%s: FlashInfer: %s", what, st->msg);
  }
}

/* ---- workspace ----------------------------------------------------------------- */

static void ws_free(cu_attn *a) {
  for (int i = 0; i < 2; i++) {
    if (a->pinned[i]) cu_drv.p_cuMemFreeHost(a->pinned[i]);
    a->pinned[i] = NULL;
  }
  if (a->fws) cu_drv.p_cuMemFree(a->fws);
  if (a->iws) cu_drv.p_cuMemFree(a->iws);
  a->fws = a->iws = 0;
  a->fws_bytes = a->iws_bytes = 0;
}

/* Allocates the workspace (context current, none held). */
static gpurt_error *ws_alloc(cu_runtime *rt, cu_attn *a, uint64_t fb, uint64_t ib, const char *w) {
  fb = (fb + 4095) & ~4095ull;
  ib = (ib + 4095) & ~4095ull;
  CUresult r;
  const char *op = "cuMemAlloc";
  if ((r = cu_drv.p_cuMemAlloc(&a->fws, (size_t)fb)) != CUDA_SUCCESS) goto fail;
  if ((r = cu_drv.p_cuMemAlloc(&a->iws, (size_t)ib)) != CUDA_SUCCESS) goto fail;
  op = "cuMemHostAlloc";
  for (int i = 0; i < 2; i++)
    if ((r = cu_drv.p_cuMemHostAlloc(&a->pinned[i], (size_t)ib, 0)) != CUDA_SUCCESS) goto fail;
  a->fws_bytes = fb;
  a->iws_bytes = ib;
  return NULL;
fail:
  ws_free(a);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r, "%s: out of memory for the attention workspace "
                         "(%llu bytes float, %llu bytes int, twice %llu bytes pinned)", w, U(fb), U(ib),
                         U(ib));
  return cu_fail(rt, a->dev, r, op, NULL);
}

/* The workspace create allocates, from the descriptor's maxima; a plan
 * grows it when FlashInfer asks for more. Split-KV partial outputs (f32,
 * the float workspace): decode splits into at most about 16 CTAs per SM per
 * KV head; prefill into at most 2 CTAs per SM per KV head, each of up to 128
 * packed rows. The int workspace holds the per-CTA tile indices (one per
 * 16 packed query rows at most, when not split) and the merge index. */
static void ws_initial(const cu_device *dv, const gpurt_attention_desc *d, uint64_t *fb, uint64_t *ib) {
  uint64_t sms = dv->sm_count > 0 ? (uint64_t)dv->sm_count : 132;
  uint64_t hq = d->num_qo_heads, hk = d->layout.num_kv_heads, hd = d->layout.head_dim, g = hq / hk;
  uint64_t rows = d->kind == GPURT_ATTENTION_PREFILL ? d->max_rows : d->max_batch_size;
  uint64_t prows = d->kind == GPURT_ATTENTION_PREFILL ? (2 * sms / hk + 1) * 128 / g + 1 : sms * 16 / hk + 1;
  *fb = hq * prows * (hd + 1) * 4 + 65536;
  uint64_t ctas = rows * g / 16 + d->max_batch_size + 2 * sms + prows;
  *ib = 4 * (3 * ctas + rows + d->max_batch_size + 64) + 65536;
}

/* Waits for the work that may still read the workspace (the whole
 * context's: runs of earlier plans may be on streams since destroyed; a
 * growth is rare), frees it and allocates fb / ib bytes (a->mu held,
 * context current). */
static gpurt_error *ws_grow(cu_runtime *rt, cu_attn *a, uint64_t fb, uint64_t ib, const char *w) {
  CUresult r = cu_drv.p_cuCtxSynchronize();
  if (r != CUDA_SUCCESS) return cu_fail(rt, a->dev, r, "cuCtxSynchronize", NULL);
  a->ev_live[0] = a->ev_live[1] = 0;
  uint64_t f = a->fws_bytes > fb ? a->fws_bytes : fb, in = a->iws_bytes > ib ? a->iws_bytes : ib;
  ws_free(a);
  a->planned = 0; /* the old schedule is gone */
  return ws_alloc(rt, a, f + f / 4, in + in / 4, w);
}

static void attn_free(cu_attn *a) {
  ws_free(a);
  for (int i = 0; i < 2; i++)
    if (a->ev[i]) cu_drv.p_cuEventDestroy(a->ev[i]);
  if (a->iota) cu_drv.p_cuMemFree(a->iota);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

void cu_release_attention(void *u, void *o) {
  cu_attn *a = o;
  cu_enter_quiet(u, a->dev);
  attn_free(a);
}

/* ---- helpers -------------------------------------------------------------------------- */

/* The stream of a call (non-NULL, live), its device entered. */
static gpurt_error *stream_of(gpurt_runtime *h, gpurt_stream *sh, const char *w, cu_runtime **rt,
                              cu_stream **out) {
  gpurt_error *e = gp_need_stream(w, sh);
  if (e) return e;
  cu_stream *st = cu_rt_obj(h, CU_TABLE(streams), sh, rt, &e);
  if (st == NULL) return gp_err_wrap(e, "%s", w);
  *out = st;
  return NULL;
}

/* K, V (num_pages pages each), indptr, indices (n_indices entries) and
 * last_page_len of a call: offsets checked as the mock checks them. */
typedef struct cu_pages {
  CUdeviceptr k, v, indptr, indices, last;
  uint64_t indices_avail; /* int32 entries from indices to its buffer's end */
} cu_pages;

static gpurt_error *pages_of(cu_runtime *rt, uint32_t dev, const gpurt_kv_layout *l, const gpurt_kv_pages *p,
                             uint32_t batch, uint64_t n_indices, const char *w, cu_pages *out) {
  gpurt_error *e;
  char what[96];
  gp_kv_extent x;
  if ((e = gp_kv_pages_check(l, p, batch, n_indices, 0x7fffffffull, w, &x))) return e;
#define VIEW(buf, off, n, name, dst)                                              \
  (snprintf(what, sizeof what, "%s: %s", w, name),                                \
   cu_view(rt, p->buf, p->off, (n), dev, what, &out->dst))
  if ((e = VIEW(k, k_offset, x.kv, "k", k)) || (e = VIEW(v, v_offset, x.kv, "v", v)) ||
      (e = VIEW(indptr, indptr_offset, x.indptr, "indptr", indptr)) ||
      (e = VIEW(last_page_len, last_page_len_offset, x.last, "last_page_len", last)) ||
      (e = VIEW(indices, indices_offset, x.indices, "indices", indices)))
    return e;
#undef VIEW
  const cu_buffer *ib = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)p->indices);
  out->indices_avail = ib != NULL ? (ib->size - p->indices_offset) / 4 : x.indices / 4;
  return NULL;
}

static gpurt_error *view(cu_runtime *rt, uint32_t dev, gpurt_buffer *b, uint64_t off, uint64_t n,
                         uint64_t align, const char *w, const char *name, CUdeviceptr *out) {
  gpurt_error *e = gp_attention_align(w, name, off, align);
  if (e) return e;
  char what[96];
  snprintf(what, sizeof what, "%s: %s", w, name);
  return cu_view(rt, b, off, n, dev, what, out);
}

/* ---- kv_append ---------------------------------------------------------------------- */

gpurt_error *cu_kv_append(gpurt_runtime *h, gpurt_stream *sh, const gpurt_kv_append_args *args) {
  const char *w = "kv_append";
  cu_runtime *rt;
  cu_stream *st;
  gpurt_error *e = stream_of(h, sh, w, &rt, &st);
  if (e) return e;
  gpurt_kv_append_args a;
  uint64_t rows;
  if ((e = gp_kv_append_check(args, &a, &rows))) return e;
  if (a.nnz == 0) return NULL;
  uint32_t dev = st->dev;
  const gpurt_kv_layout *l = &a.layout;
  const cu_device *dv = &rt->devs[dev];
  if (!cu_fi_has_arch(dv->cc_major, dv->cc_minor))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: device %u is compute capability %d.%d; this plugin's attention kernels "
                  "are built for sm_90a", w, dev, dv->cc_major, dv->cc_minor);
  cu_pages p;
  CUdeviceptr kr, vr, bi, pos;
  if ((e = pages_of(rt, dev, l, &a.pages, a.batch_size, 1, w, &p)) ||
      (e = view(rt, dev, a.k_rows, a.k_rows_offset, rows, 16, w, "k_rows", &kr)) ||
      (e = view(rt, dev, a.v_rows, a.v_rows_offset, rows, 16, w, "v_rows", &vr)) ||
      (e = view(rt, dev, a.batch_indices, a.batch_indices_offset, 4 * a.nnz, 4, w, "batch_indices", &bi)) ||
      (e = view(rt, dev, a.positions, a.positions_offset, 4 * a.nnz, 4, w, "positions", &pos)))
    return e;
  if ((e = cu_enter(rt, dev))) return e;
  cu_kv_append_args ka = {
      .k = (void *)(uintptr_t)p.k, .v = (void *)(uintptr_t)p.v,
      .k_rows = (const void *)(uintptr_t)kr, .v_rows = (const void *)(uintptr_t)vr,
      .batch_indices = (const int32_t *)(uintptr_t)bi, .positions = (const int32_t *)(uintptr_t)pos,
      .indptr = (const int32_t *)(uintptr_t)p.indptr, .indices = (const int32_t *)(uintptr_t)p.indices,
      .last = (const int32_t *)(uintptr_t)p.last, .nnz = a.nnz, .num_pages = a.pages.num_pages,
      .batch = a.batch_size, .num_kv_heads = l->num_kv_heads, .head_dim = l->head_dim,
      .page_size = l->page_size, .layout = l->layout, .n_indices = p.indices_avail};
  cu_fi_status fs;
  int rc = l->dtype == GPURT_DTYPE_FP8_E4M3
               ? cu_fi8_kv_append(&ka, l->qo_dtype, a.k_scale, a.v_scale, (void *)st->s, &fs)
               : cu_fi_kv_append(&ka, (void *)st->s, &fs);
  if (rc != CU_FI_OK) return fi_err(&fs, w);
  return NULL;
}

/* ---- attention objects ----------------------------------------------------------------- */

static int decode_group(uint32_t g) {
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}

gpurt_error *cu_attention_create(gpurt_runtime *h, uint32_t dev, const gpurt_attention_desc *desc,
                                 gpurt_attention **out) {
  const char *w = "attention_create";
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, w, &e);
  if (rt == NULL) return e;
  *out = NULL;
  if (dev >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device %u out of range (%u devices)", w, dev, rt->ndev);
  gpurt_attention_desc d;
  if ((e = gp_read_struct(&d, sizeof d, desc, "attention_create: desc"))) return e;
  if ((e = gp_attention_desc_check(&d))) return e;
#ifdef GPURT_CUDA_NO_FLASHINFER
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: this plugin was built without FlashInfer (scripts/build_cuda.sh "
                "found no flashinfer-python headers)", w);
#endif
  const cu_device *dv = &rt->devs[dev];
  if (!cu_fi_has_arch(dv->cc_major, dv->cc_minor))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: device %u (%s) is compute capability %d.%d; this plugin's FlashInfer "
                  "kernels are built for sm_90a (rebuild with GPURT_FI_SM80=1 scripts/build_cuda.sh for sm_80)",
                  w, dev, dv->name, dv->cc_major, dv->cc_minor);
  if ((e = cu_enter(rt, dev))) return e;
  cu_attn *a = calloc(1, sizeof *a);
  if (a == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: out of host memory", w);
  a->dev = dev;
  a->d = d;
  pthread_mutex_init(&a->mu, NULL);
  uint32_t group = d.num_qo_heads / d.layout.num_kv_heads;
  a->cfg = (cu_fi_config){
      .dtype = gp_kv_qo_dtype(&d.layout), .layout = d.layout.layout, .head_dim = d.layout.head_dim,
      .num_qo_heads = d.num_qo_heads, .num_kv_heads = d.layout.num_kv_heads,
      .page_size = d.layout.page_size,
      .prefill_kernel = d.kind == GPURT_ATTENTION_PREFILL || !decode_group(group),
      .causal = d.causal, .soft_cap = d.logits_soft_cap > 0,
      .sm_scale = (float)gp_attention_sm_scale(&d), .cap = (float)d.logits_soft_cap};
  CUresult r;
  for (int i = 0; i < 2; i++)
    if ((r = cu_drv.p_cuEventCreate(&a->ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
      attn_free(a);
      return cu_fail(rt, dev, r, "cuEventCreate", NULL);
    }
  if (d.kind == GPURT_ATTENTION_DECODE && a->cfg.prefill_kernel) {
    uint64_t n = (uint64_t)d.max_batch_size + 1;
    int32_t *iota = malloc(4 * n);
    if (iota == NULL) {
      attn_free(a);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: out of host memory", w);
    }
    for (uint64_t i = 0; i < n; i++) iota[i] = (int32_t)i;
    r = cu_drv.p_cuMemAlloc(&a->iota, 4 * n);
    if (r == CUDA_SUCCESS) r = cu_drv.p_cuMemcpyHtoD(a->iota, iota, 4 * n);
    free(iota);
    if (r != CUDA_SUCCESS) {
      attn_free(a);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r, "%s: out of memory", w);
      return cu_fail(rt, dev, r, "cuMemAlloc", NULL);
    }
  }
  uint64_t fb, ib;
  ws_initial(&rt->devs[dev], &d, &fb, &ib);
  if ((e = ws_alloc(rt, a, fb, ib, w))) {
    attn_free(a);
    return e;
  }
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->attns, a, cu_release_attention, w, &hv))) return e;
  *out = (gpurt_attention *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_attention_destroy(gpurt_runtime *h, gpurt_attention *ah) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_attn *a = cu_rt_take(h, CU_TABLE(attns), ah, &rt, &e);
  if (a == NULL) return e;
  /* Its work in flight (runs on its plans' streams, which may be gone,
   * and uploads) ends first: the context's. The object is freed even when
   * that fails (a lost device). */
  gpurt_error *se = NULL;
  if (cu_enter(rt, a->dev) == NULL) {
    CUresult r = cu_drv.p_cuCtxSynchronize();
    if (r != CUDA_SUCCESS) se = cu_fail(rt, a->dev, r, "attention_destroy: cuCtxSynchronize", NULL);
  } else {
    cu_enter_quiet(rt, a->dev);
  }
  attn_free(a);
  return se;
}

gpurt_error *cu_attention_plan(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                               const gpurt_attention_plan_args *args) {
  const char *w = "attention_plan";
  cu_runtime *rt;
  cu_stream *st;
  gpurt_error *e = stream_of(h, sh, w, &rt, &st);
  if (e) return e;
  cu_attn *a = cu_get(&rt->attns, ah, &e);
  if (a == NULL) return gp_err_wrap(e, "%s", w);
  if (a->dev != st->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: attention %#llx is for device %u but the stream is on device %u",
                  w, U((uintptr_t)ah), a->dev, st->dev);
  gpurt_attention_plan_args pa;
  if ((e = gp_read_struct(&pa, sizeof pa, args, "attention_plan: args"))) return e;
  gp_attention_sched sc;
  if ((e = gp_attention_plan_check(&a->d, &pa, &sc))) return e;
  if ((e = cu_enter(rt, a->dev))) return e;
  pthread_mutex_lock(&a->mu);
  int idx = a->cur ^ 1;
  for (int tries = 0;; tries++) {
    if (a->ev_live[idx]) {
      CUresult r = cu_drv.p_cuEventSynchronize(a->ev[idx]);
      if (r != CUDA_SUCCESS) {
        e = cu_fail(rt, a->dev, r, "attention_plan: cuEventSynchronize", NULL);
        break;
      }
      a->ev_live[idx] = 0;
    }
    cu_fi_status fs;
    cu_fi_plan plan = {{0}};
    int rc = (a->d.layout.dtype == GPURT_DTYPE_FP8_E4M3 ? cu_fi8_plan_make : cu_fi_plan_make)(
        &a->cfg, (void *)(uintptr_t)a->fws, a->fws_bytes, (void *)(uintptr_t)a->iws, a->pinned[idx],
        a->iws_bytes, pa.qo_indptr, pa.kv_indptr, sc.batch, (uint32_t)sc.rows, (void *)st->s, &plan, &fs);
    if (rc == CU_FI_GROW && tries == 0) {
      if ((e = ws_grow(rt, a, fs.float_need, fs.int_need, w))) break;
      continue;
    }
    if (rc != CU_FI_OK) {
      e = fi_err(&fs, w);
      break;
    }
    CUresult r = cu_drv.p_cuEventRecord(a->ev[idx], st->s);
    if (r != CUDA_SUCCESS) {
      /* The copy is enqueued but unknown to the event: wait for it here. */
      (void)cu_drv.p_cuStreamSynchronize(st->s);
      e = cu_fail(rt, a->dev, r, "attention_plan: cuEventRecord", NULL);
      break;
    }
    a->ev_live[idx] = 1;
    a->cur = idx;
    a->plan = plan;
    a->sched = sc;
    a->stream = sh;
    a->cs = st->s;
    a->planned = 1;
    break;
  }
  pthread_mutex_unlock(&a->mu);
  return e;
}

/* Enqueues a run of a's current plan on st (a->mu held, a planned):
 * views the operands against the plan, then FlashInfer's kernel(s). *pg:
 * the page table's views. */
static gpurt_error *attn_enqueue(cu_runtime *rt, cu_attn *a, cu_stream *st, const gpurt_attention_run_args *ra,
                                 const char *w, cu_pages *pg) {
  uint32_t dev = st->dev;
  const gpurt_kv_layout *l = &a->d.layout;
  gp_attention_sched sc = a->sched;
  uint64_t row_bytes = (uint64_t)a->d.num_qo_heads * l->head_dim * gp_dtype_size(gp_kv_qo_dtype(l));
  CUdeviceptr q, o, qo = 0;
  int prefill = a->d.kind == GPURT_ATTENTION_PREFILL;
  gpurt_error *e;
  if ((e = gp_kv_scales_check(l, ra->k_scale, ra->v_scale, w)) ||
      (e = view(rt, dev, ra->q, ra->q_offset, sc.rows * row_bytes, 16, w, "q", &q)) ||
      (e = view(rt, dev, ra->o, ra->o_offset, sc.rows * row_bytes, 16, w, "o", &o)) ||
      (e = pages_of(rt, dev, l, &ra->pages, sc.batch, sc.pages, w, pg)))
    return e;
  if (prefill) {
    if ((e = view(rt, dev, ra->qo_indptr, ra->qo_indptr_offset, 4ull * (sc.batch + 1), 4, w, "qo_indptr", &qo)))
      return e;
  } else if (ra->qo_indptr != NULL) {
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is set for decode (pass NULL)", w);
  } else {
    qo = a->iota;
  }
  if ((e = cu_enter(rt, dev))) return e;
  cu_fi_run_args fa = {
      .q = (void *)(uintptr_t)q, .o = (void *)(uintptr_t)o, .k = (void *)(uintptr_t)pg->k,
      .v = (void *)(uintptr_t)pg->v, .indptr = (int32_t *)(uintptr_t)pg->indptr,
      .indices = (int32_t *)(uintptr_t)pg->indices, .last = (int32_t *)(uintptr_t)pg->last,
      .qo_indptr = (int32_t *)(uintptr_t)qo, .batch = sc.batch,
      .float_ws = (void *)(uintptr_t)a->fws, .int_ws = (void *)(uintptr_t)a->iws};
  cu_fi_status fs;
  int rc = l->dtype == GPURT_DTYPE_FP8_E4M3
               ? cu_fi8_run(&a->cfg, &a->plan, &fa, sc.rows, ra->k_scale, ra->v_scale, (void *)st->s, &fs)
               : cu_fi_run(&a->cfg, &a->plan, &fa, (void *)st->s, &fs);
  if (rc != CU_FI_OK) return fi_err(&fs, w);
  return NULL;
}

gpurt_error *cu_attention_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                              const gpurt_attention_run_args *args) {
  const char *w = "attention_run";
  cu_runtime *rt;
  cu_stream *st;
  gpurt_error *e = stream_of(h, sh, w, &rt, &st);
  if (e) return e;
  cu_attn *a = cu_get(&rt->attns, ah, &e);
  if (a == NULL) return gp_err_wrap(e, "%s", w);
  gpurt_attention_run_args ra;
  if ((e = gp_read_struct(&ra, sizeof ra, args, "attention_run: args"))) return e;
  pthread_mutex_lock(&a->mu);
  if (!a->planned || a->stream != sh) {
    int planned = a->planned;
    gpurt_stream *ps = a->stream;
    pthread_mutex_unlock(&a->mu);
    if (!planned)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan (call attention_plan first)", w,
                    U((uintptr_t)ah));
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: stream %#llx is not the stream of the last plan (%#llx); "
                  "runs go on the plan's stream", w, U((uintptr_t)sh), U((uintptr_t)ps));
  }
  cu_pages p;
  e = attn_enqueue(rt, a, st, &ra, w, &p);
  pthread_mutex_unlock(&a->mu);
  return e;
}

/* ---- runs recorded in graphs (cuda_graph.c) ------------------------------------------- */

/* A decode object on FlashInfer's decode kernel plans in its CUDA-graph
 * mode (cuda_attention.cu): for a given batch size every plan writes its
 * schedule to the same addresses of the int workspace, and the kernels'
 * grid and arguments do not change. So a run captured once replays any
 * later plan of the same batch: the plan stays outside the graph and is
 * uploaded on the plan's stream, where the replay is ordered after it.
 * What the captured kernels baked in (the batch, the workspace addresses,
 * how many page indices the captured view holds) is kept in *snap and
 * checked before every replay (cu_attention_replay_check). The capture
 * stream is the graph's own; the plan's stream is checked at replay. */
gpurt_error *cu_attention_capture(gpurt_runtime *h, gpurt_stream *cap, gpurt_attention *ah,
                                  const gpurt_attention_run_args *args, cu_attn_snap *snap) {
  const char *w = "attention_run";
  cu_runtime *rt;
  cu_stream *st;
  gpurt_error *e = stream_of(h, cap, w, &rt, &st);
  if (e) return e;
  cu_attn *a = cu_get(&rt->attns, ah, &e);
  if (a == NULL) return gp_err_wrap(e, "%s", w);
  if (a->dev != st->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: attention %#llx is for device %u but the graph is on device %u",
                  w, U((uintptr_t)ah), a->dev, st->dev);
  gpurt_attention_run_args ra;
  if ((e = gp_read_struct(&ra, sizeof ra, args, "attention_run: args"))) return e;
  if (a->d.layout.dtype == GPURT_DTYPE_FP8_E4M3)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: attention %#llx reads an fp8 e4m3 KV cache, whose plans are not in "
                  "FlashInfer's CUDA-graph mode: this plugin does not record its runs in a graph (run it eagerly "
                  "between graphs)", w, U((uintptr_t)ah));
  if (a->cfg.prefill_kernel)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: attention %#llx runs FlashInfer's prefill kernel (%s); this plugin "
                  "records in a graph the decode attention on FlashInfer's decode kernel only (group sizes 1, 2, 3, "
                  "4, 6, 8, 16): run it eagerly between graphs", w, U((uintptr_t)ah),
                  a->d.kind == GPURT_ATTENTION_PREFILL ? "a prefill object" : "a decode group size its decode "
                  "kernel lacks");
  pthread_mutex_lock(&a->mu);
  if (!a->planned) {
    pthread_mutex_unlock(&a->mu);
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan: plan before recording its run "
                  "(the plan stays outside the graph; its batch is the one the graph replays)", w, U((uintptr_t)ah));
  }
  cu_pages p;
  if ((e = attn_enqueue(rt, a, st, &ra, w, &p)) == NULL) {
    snap->handle = ah;
    snap->batch = a->sched.batch;
    snap->pages_avail = p.indices_avail;
    snap->fws = a->fws;
    snap->iws = a->iws;
  }
  pthread_mutex_unlock(&a->mu);
  return e;
}

gpurt_error *cu_attention_replay_check(cu_runtime *rt, const cu_attn_snap *snap, gpurt_stream *sh) {
  const char *w = "graph_launch";
  cu_attn *a = cu_table_lookup(&rt->attns, (uint64_t)(uintptr_t)snap->handle);
  if (a == NULL)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx, whose run the graph recorded, was destroyed",
                  w, U((uintptr_t)snap->handle));
  gpurt_error *e = NULL;
  pthread_mutex_lock(&a->mu);
  if (!a->planned)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan (plan it before each replay)", w,
               U((uintptr_t)snap->handle));
  else if (a->stream != sh)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: stream %#llx is not the stream of attention %#llx's last plan "
               "(%#llx); a graph with its runs replays on the plan's stream", w, U((uintptr_t)sh),
               U((uintptr_t)snap->handle), U((uintptr_t)a->stream));
  else if (a->sched.batch != snap->batch)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx is planned for batch %u but the graph recorded "
               "its runs at batch %u: a graph replays the batch it was captured at (capture one per batch size, "
               "or pad the batch to the captured one)", w, U((uintptr_t)snap->handle), a->sched.batch, snap->batch);
  else if (a->fws != snap->fws || a->iws != snap->iws)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx's workspace was reallocated since the graph "
               "recorded its runs (a plan needed more): capture the graph again", w, U((uintptr_t)snap->handle));
  else if (a->sched.pages > snap->pages_avail)
    e = gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: attention %#llx's plan has %llu pages but the page indices the graph "
               "recorded hold %llu", w, U((uintptr_t)snap->handle), U(a->sched.pages), U(snap->pages_avail));
  pthread_mutex_unlock(&a->mu);
  return e;
}
