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
 * Checks are the engine's (csrc/gp_engine_ops.c over gp_attention.c): the
 * same codes and messages as the mock; the entries get resolved operands. An object holds its workspace: a float and an int device buffer
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

/* Keys naming the KV append and the attention as a stream's last kernel
 * (cu_note_kernel). */
static char kv_append_key, attn_key; /* distinct addresses */

/* cuda_attention.cu (C++, without gpurt.h) copies these three values. */
_Static_assert(GPURT_DTYPE_F16 == 2 && GPURT_DTYPE_BF16 == 3 && GPURT_KV_LAYOUT_HND == 1,
               "cuda_attention.cu's FI_DTYPE_F16, FI_DTYPE_BF16 and FI_LAYOUT_HND must match gpurt.h");

#define U(x) ((unsigned long long)(x))

#if defined(GPURT_CUDA_NO_FLASHINFER) || defined(GPURT_CUDA_NO_FI8)
/* An adapter this plugin was built without: its entries answer unsupported,
 * saying why. */
static int cu_fi_missing(cu_fi_status *st, const char *why) {
  memset(st, 0, sizeof *st);
  st->code = CU_FI_UNSUPPORTED;
  snprintf(st->msg, sizeof st->msg, "%s", why);
  return st->code;
}
#endif

#ifdef GPURT_CUDA_NO_FLASHINFER
/* Built without FlashInfer's headers (scripts/build_cuda.sh --ci where the
 * wheel could not be fetched): the slots validate, then answer unsupported. */
#define CU_NO_FI "this plugin was built without FlashInfer (no flashinfer-python headers)"
int cu_fi_plan_make(const cu_fi_config *c, void *f, uint64_t fb, void *i, void *p, uint64_t ib,
                    const int32_t *q, const int32_t *kv, uint32_t b, uint32_t r, void *s,
                           cu_fi_plan *plan, cu_fi_status *st) {
  return cu_fi_missing(st, CU_NO_FI);
}
int cu_fi_run(const cu_fi_config *c, const cu_fi_plan *p, const cu_fi_run_args *a, void *s,
                     cu_fi_status *st) {
  return cu_fi_missing(st, CU_NO_FI);
}
int cu_fi_kv_append(const cu_kv_append_args *a, void *s, cu_fi_status *st) { return cu_fi_missing(st, CU_NO_FI); }
int cu_fi_has_arch(int major, int minor) { return 0; }
/* and no fp8 adapter either */
#define CU_NO_FI8 CU_NO_FI
#elif defined(GPURT_CUDA_NO_FI8)
/* Built without the fp8 KV adapter (cuda_attention_fp8.cu): an fp8 cache
 * is answered unsupported. */
#define CU_NO_FI8 "this plugin was built without the fp8 KV cache adapter"
#endif

#ifdef CU_NO_FI8
int cu_fi8_plan_make(const cu_fi_config *c, void *f, uint64_t fb, void *i, void *p, uint64_t ib,
                     const int32_t *q, const int32_t *kv, uint32_t b, uint32_t r, void *s, cu_fi_plan *plan,
                     cu_fi_status *st) {
  return cu_fi_missing(st, CU_NO_FI8);
}
int cu_fi8_run(const cu_fi_config *c, const cu_fi_plan *p, const cu_fi_run_args *a, uint64_t rows, float ks,
               float vs, void *s, cu_fi_status *st) {
  return cu_fi_missing(st, CU_NO_FI8);
}
int cu_fi8_kv_append(const cu_kv_append_args *a, int32_t qo, float ks, float vs, void *s, cu_fi_status *st) {
  return cu_fi_missing(st, CU_NO_FI8);
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
  int auto_kernel;      /* decode over 16-bit pages: each plan picks the kernel (decode_kernel_for) */
  int planned;
  cu_fi_plan plan;
  gp_attention_sched sched;
  /* The last plan's inputs (qo_indptr when prefill, then kv_indptr: 2 x
   * (max_batch + 1) entries) and stream; memo_ok once its upload is
   * enqueued (see plan_memo). */
  int32_t *memo;
  uint64_t memo_stream; /* its cu_stream's serial */
  int memo_ok;
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
  a->memo_ok = 0;
  return ws_alloc(rt, a, f + f / 4, in + in / 4, w);
}

static void attn_free(cu_attn *a) {
  ws_free(a);
  for (int i = 0; i < 2; i++)
    if (a->ev[i]) cu_drv.p_cuEventDestroy(a->ev[i]);
  if (a->iota) cu_drv.p_cuMemFree(a->iota);
  free(a->memo);
  pthread_mutex_destroy(&a->mu);
  free(a);
}


/* ---- helpers -------------------------------------------------------------------------- */

/* ---- kv_append ---------------------------------------------------------------------- */

static int arch_ok(const cu_device *dv) { return cu_fi_has_arch(dv->cc_major, dv->cc_minor); }

/* The engine checked the layout, the counts and every view (csrc's
 * messages); rows whose batch index, position or page is out of range are
 * skipped by the kernel. */
gpurt_error *cu_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r) {
  const char *w = "kv_append";
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  uint32_t dev = st->dev;
  const gpurt_kv_layout *l = &r->layout;
  const cu_device *dv = &rt->devs[dev];
  if (!arch_ok(dv))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: device %u is compute capability %d.%d; this plugin's attention kernels "
                  "are built for sm_90a", w, dev, dv->cc_major, dv->cc_minor);
  if (r->inv_freq.obj != NULL && !cu_fuse_on())
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the rotary embedding on append (inv_freq) is off on this plugin: measured on the "
                  "H200 it gained nothing over the separate kernel (GPURT_CUDA_FUSE=1 turns it on)", w);
  if (q->capturing == GP_QUEUE_PREPARE) return NULL; /* one kernel, nothing lazy */
  gpurt_error *e = cu_enter(rt, dev);
  if (e) return e;
  const gp_kv_pages_op *p = &r->pages;
  cu_kv_append_args ka = {
      .k = (void *)(uintptr_t)p->k.addr, .v = (void *)(uintptr_t)p->v.addr,
      .k_rows = (const void *)(uintptr_t)r->k_rows.addr, .v_rows = (const void *)(uintptr_t)r->v_rows.addr,
      .batch_indices = (const int32_t *)(uintptr_t)r->batch_indices.addr,
      .positions = (const int32_t *)(uintptr_t)r->positions.addr,
      .indptr = (const int32_t *)(uintptr_t)p->indptr.addr, .indices = (const int32_t *)(uintptr_t)p->indices.addr,
      .last = (const int32_t *)(uintptr_t)p->last_page_len.addr, .nnz = r->nnz, .num_pages = p->num_pages,
      .batch = r->batch, .num_kv_heads = l->num_kv_heads, .head_dim = l->head_dim,
      .page_size = l->page_size, .layout = l->layout, .n_indices = p->indices.size / 4,
      .pdl = rt->devs[dev].pdl && l->dtype != GPURT_DTYPE_FP8_E4M3,
      .inv_freq = (const float *)(uintptr_t)r->inv_freq.addr, .q = (void *)(uintptr_t)r->q.addr,
      .num_qo_heads = r->num_qo_heads, .bf16 = l->dtype == GPURT_DTYPE_BF16};
  cu_fi_status fs;
  int rc = l->dtype == GPURT_DTYPE_FP8_E4M3
               ? cu_fi8_kv_append(&ka, l->qo_dtype, r->k_scale, r->v_scale, (void *)st->s, &fs)
               : cu_fi_kv_append(&ka, (void *)st->s, &fs);
  if (rc != CU_FI_OK) return fi_err(&fs, w);
  cu_note_kernel(rt, st, (uintptr_t)&kv_append_key, "gpurt_kv_append_kernel");
  return NULL;
}

/* ---- attention objects ----------------------------------------------------------------- */

static int decode_group(uint32_t g) {
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16;
}

/* Which kernel a decode object over 16-bit pages runs, chosen at each plan
 * by the KV it reads: FlashInfer's prefill kernel with one query row a
 * request (its use_tensor_cores decode: a group's query heads are the rows
 * of a tensor-core tile) when the step reads DECODE_TC_TOKENS tokens of KV
 * or more, its decode kernel (CUDA cores, with the KV split of
 * decode_chunk_pages) below. On the H200 (group 4, dim 128, page 16;
 * BENCHMARKS.md 2026-12-04, scripts/gpu_attention.sh) the prefill kernel
 * took 16.9 / 31.0 / 135.3 / 74.9 / 494.0 us at batch x context 1 x 8K,
 * 16 x 1K, 16 x 8K, 64 x 1K, 64 x 8K against the decode kernel's 20.9 /
 * 33.8 / 197.3 / 107.5 / 752.6 (4.35 TB/s of KV at 64 x 8K), and made the
 * 8B-class decoder's batch-32 step at 8K 1.29x faster; at 1 x 1K it took
 * 12.7 against 11.1 us and made the 8B decoder's batch-1 step 10% slower
 * (its schedule puts at least 128 tokens in a chunk: 64 busy CTAs at batch
 * 1, where the decode kernel's split keeps 512). Group sizes the decode
 * kernel lacks always take the prefill kernel. A plan that switches kernels
 * invalidates graphs captured on the other (cu_attention_replay_check).
 * GPURT_CUDA_DECODE_KERNEL=prefill or =decode (read once) fixes the kernel
 * for the group sizes the decode kernel has (comparisons: gpu_attention.sh's
 * bench_tc and bench_dk rows). fp8 pages keep the decode kernel. */
#define DECODE_TC_TOKENS 8192
static int decode_kernel_env(void) {
  static int v = -1; /* 0: by the plan, 1: prefill, 2: decode; a race reads the environment twice, same answer */
  if (v < 0) {
    const char *e = getenv("GPURT_CUDA_DECODE_KERNEL");
    v = e == NULL ? 0 : strcmp(e, "prefill") == 0 ? 1 : strcmp(e, "decode") == 0 ? 2 : 0;
  }
  return v;
}

/* 1: this plan's decode runs the prefill kernel (auto objects). Back to the
 * decode kernel only below 3/4 of DECODE_TC_TOKENS, so that a serving batch
 * whose KV hovers at the threshold does not switch (and recapture its
 * graphs) step after step. */
static int decode_kernel_for(const cu_attn *a, const int32_t *kv_indptr, uint32_t batch) {
  const uint64_t tokens = (uint64_t)(uint32_t)(kv_indptr[batch] - kv_indptr[0]) * a->d.layout.page_size;
  return tokens >= (a->cfg.prefill_kernel ? DECODE_TC_TOKENS / 4 * 3 : DECODE_TC_TOKENS);
}

/* The engine checked the descriptor (gp_attention_desc_check). */
gpurt_error *cu_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *desc, void **out) {
  const char *w = "attention_create";
  cu_runtime *rt = ctx;
  gpurt_error *e = NULL;
  const gpurt_attention_desc d = *desc;
#ifdef GPURT_CUDA_NO_FLASHINFER
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: this plugin was built without FlashInfer (scripts/build_cuda.sh "
                "found no flashinfer-python headers)", w);
#endif
  const cu_device *dv = &rt->devs[dev];
  if (!arch_ok(dv))
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
      .prefill_kernel = d.kind == GPURT_ATTENTION_PREFILL || !decode_group(group) ||
                        (d.layout.dtype != GPURT_DTYPE_FP8_E4M3 && decode_kernel_env() == 1),
      .causal = d.causal, .soft_cap = d.logits_soft_cap > 0,
      .sm_scale = (float)gp_attention_sm_scale(&d), .cap = (float)d.logits_soft_cap};
  a->memo = malloc(8 * ((size_t)d.max_batch_size + 1));
  if (a->memo == NULL) {
    attn_free(a);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: out of host memory", w);
  }
  CUresult r;
  for (int i = 0; i < 2; i++)
    if ((r = cu_drv.p_cuEventCreate(&a->ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
      attn_free(a);
      return cu_fail(rt, dev, r, "cuEventCreate", NULL);
    }
  a->auto_kernel = d.kind == GPURT_ATTENTION_DECODE && d.layout.dtype != GPURT_DTYPE_FP8_E4M3 &&
                   decode_group(group) && decode_kernel_env() == 0;
  if (d.kind == GPURT_ATTENTION_DECODE && (a->cfg.prefill_kernel || a->auto_kernel)) {
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
  *out = a;
  return NULL;
}

/* Its work in flight (runs on its plans' streams, which may be gone, and
 * uploads) ends first: the context's. The object is freed even when that
 * fails (a lost device). */
void cu_attention_destroy(void *ctx, void *obj) {
  cu_runtime *rt = ctx;
  cu_attn *a = obj;
  if (cu_enter(rt, a->dev) == NULL) (void)cu_drv.p_cuCtxSynchronize();
  else cu_enter_quiet(rt, a->dev);
  attn_free(a);
}

/* Whether a plan may keep the current one: FlashInfer's decode and prefill
 * schedules are functions of the batch, the query rows and the two indptr
 * arrays alone (the last page's length does not enter them), so when those
 * equal the last successful plan's on the same stream, the int workspace
 * already holds (or will, in stream order, before any run on that stream)
 * exactly what this plan would upload: the host work, the copy and the
 * event record are skipped. In decode this is every step that does not
 * start a new page (15 of 16 at page size 16, batch 1). Another stream, a
 * growth or a failed plan since, or GPURT_CUDA_ATTN_PLAN_MEMO=0 (read
 * once; for comparisons) plans in full. a->mu held. */
static int plan_memo(cu_attn *a, const gpurt_attention_plan_args *pa, const gp_attention_sched *sc, uint64_t s) {
  static int enabled = -1; /* a race reads the environment twice, same answer */
  if (enabled < 0) {
    const char *v = getenv("GPURT_CUDA_ATTN_PLAN_MEMO");
    enabled = !(v != NULL && strcmp(v, "0") == 0);
  }
  if (!enabled || !a->planned || !a->memo_ok || a->memo_stream != s || sc->batch != a->sched.batch ||
      sc->rows != a->sched.rows)
    return 0;
  const uint32_t nq = pa->qo_indptr != NULL ? sc->batch + 1 : 0;
  return (nq == 0 || memcmp(a->memo, pa->qo_indptr, 4 * (size_t)nq) == 0) &&
         memcmp(a->memo + nq, pa->kv_indptr, 4 * ((size_t)sc->batch + 1)) == 0;
}

/* The engine checked the host counts (gp_attention_plan_check: sc) and
 * holds its attention object's lock. */
gpurt_error *cu_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *pap,
                               const gp_attention_sched *scp) {
  const char *w = "attention_plan";
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  cu_attn *a = obj;
  const gpurt_attention_plan_args pa = *pap;
  const gp_attention_sched sc = *scp;
  gpurt_error *e;
  if ((e = cu_enter(rt, a->dev))) return e;
  pthread_mutex_lock(&a->mu);
  if (plan_memo(a, &pa, &sc, st->serial)) {
    a->sched = sc;
    pthread_mutex_unlock(&a->mu);
    return NULL;
  }
  a->memo_ok = 0; /* the int workspace may change from here on */
  const cu_fi_config keep = a->cfg; /* back, should this plan fail */
  if (a->auto_kernel) a->cfg.prefill_kernel = (uint8_t)decode_kernel_for(a, pa.kv_indptr, sc.batch);
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
    a->planned = 1;
    const uint32_t nq = pa.qo_indptr != NULL ? sc.batch + 1 : 0;
    if (nq > 0) memcpy(a->memo, pa.qo_indptr, 4 * (size_t)nq);
    memcpy(a->memo + nq, pa.kv_indptr, 4 * ((size_t)sc.batch + 1));
    a->memo_stream = st->serial;
    a->memo_ok = 1;
    break;
  }
  if (e != NULL) a->cfg = keep;
  pthread_mutex_unlock(&a->mu);
  return e;
}

/* Enqueues a run of a's current plan on st (a->mu held, a planned; the
 * engine checked the operands against the plan). */
/* Whether an attention run may take programmatic dependent launch.
 * FlashInfer's kernels read the page table (indptr, last_page_len) before
 * they wait for the kernel ahead of them, so that kernel must not be one
 * that may write it: only a run whose stream's last kernel is the KV
 * append (which writes K and V, never the table) takes it, as a decode
 * step's does. A copy or memset in between makes the question moot: PDL
 * relaxes a kernel's dependency on the kernel right before it only. */
static int attn_pdl(const cu_runtime *rt, cu_stream *st) {
  return rt->devs[st->dev].pdl &&
         atomic_load_explicit(&st->last_kernel_h, memory_order_relaxed) == (uintptr_t)&kv_append_key;
}

static gpurt_error *attn_enqueue(cu_runtime *rt, cu_attn *a, cu_stream *st, const gp_attention_op *r, const char *w) {
  const gpurt_kv_layout *l = &a->d.layout;
  gp_attention_sched sc = a->sched;
  const gp_kv_pages_op *pg = &r->pages;
  CUdeviceptr qo = a->d.kind == GPURT_ATTENTION_PREFILL ? r->qo_indptr.addr : a->iota;
  gpurt_error *e;
  if ((e = cu_enter(rt, st->dev))) return e;
  cu_fi_run_args fa = {
      .q = (void *)(uintptr_t)r->q.addr, .o = (void *)(uintptr_t)r->o.addr, .k = (void *)(uintptr_t)pg->k.addr,
      .v = (void *)(uintptr_t)pg->v.addr, .indptr = (int32_t *)(uintptr_t)pg->indptr.addr,
      .indices = (int32_t *)(uintptr_t)pg->indices.addr, .last = (int32_t *)(uintptr_t)pg->last_page_len.addr,
      .qo_indptr = (int32_t *)(uintptr_t)qo, .batch = sc.batch,
      .float_ws = (void *)(uintptr_t)a->fws, .int_ws = (void *)(uintptr_t)a->iws,
      .pdl = attn_pdl(rt, st)};
  cu_fi_status fs;
  int rc = l->dtype == GPURT_DTYPE_FP8_E4M3
               ? cu_fi8_run(&a->cfg, &a->plan, &fa, sc.rows, r->k_scale, r->v_scale, (void *)st->s, &fs)
               : cu_fi_run(&a->cfg, &a->plan, &fa, (void *)st->s, &fs);
  if (rc != CU_FI_OK) return fi_err(&fs, w);
  cu_note_kernel(rt, st, (uintptr_t)&attn_key, "FlashInfer attention");
  return NULL;
}

/* Runs recorded in graphs. A decode object plans in FlashInfer's CUDA-graph
 * mode (cuda_attention_fi.cuh; on its decode kernel over 16-bit and fp8
 * pages alike, an fp8 run's V scale then a kernel argument of the
 * recording, as its K scale in sm_scale is; on its prefill kernel with one
 * query row a request over 16-bit pages): for a given batch size
 * every plan writes its schedule to the same addresses of the int
 * workspace, and the kernels' grid and arguments do not change. So a run
 * captured once replays any later plan of the same batch: the plan stays
 * outside the graph and is uploaded on the plan's stream, where the replay
 * is ordered after it (the engine checks at each replay that the object is
 * planned on the replay's stream). What the captured kernels baked in (the
 * batch, the workspace addresses, how many page indices the captured view
 * holds) is kept in the recording (cu_rec_snap) and checked before every
 * replay (cu_attention_replay_check). */
static gpurt_error *recordable(const cu_attn *a, const char *w) {
  /* Decode over 16-bit pages on the prefill kernel plans in FlashInfer's
   * CUDA-graph mode (cuda_attention_fi.cuh); prefill and fp8 do not. */
  if (a->cfg.prefill_kernel && (a->d.kind == GPURT_ATTENTION_PREFILL || a->d.layout.dtype == GPURT_DTYPE_FP8_E4M3))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the attention object runs FlashInfer's prefill kernel planned for "
                  "each step's rows (%s); this plugin records decode attention only in a graph: run it eagerly "
                  "between graphs", w, a->d.kind == GPURT_ATTENTION_PREFILL ? "a prefill object"
                  : "fp8 pages with a group size FlashInfer's decode kernel lacks");
  return NULL;
}

gpurt_error *cu_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r) {
  const char *w = "attention_run";
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  cu_attn *a = r->obj;
  gpurt_error *e;
  if (a->dev != st->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: the attention object is for device %u but the %s is on device %u",
                  w, a->dev, q->capturing ? "graph" : "stream", st->dev);
  if (q->capturing && (e = recordable(a, w))) return e;
  pthread_mutex_lock(&a->mu);
  if (!a->planned) {
    /* The engine saw a plan, but its workspace's growth failed since. */
    pthread_mutex_unlock(&a->mu);
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: the attention object has no plan (its last plan failed: "
                  "call attention_plan again)", w);
  }
  if (q->capturing == GP_QUEUE_PREPARE) {
    pthread_mutex_unlock(&a->mu);
    return NULL;
  }
  e = attn_enqueue(rt, a, st, r, w);
  if (e == NULL && q->capturing) {
    cu_attn_snap snap = {a, a->sched.batch, r->pages.indices.size / 4, a->fws, a->iws, a->cfg.prefill_kernel};
    cu_rec_snap(st, &snap);
  }
  pthread_mutex_unlock(&a->mu);
  return e;
}

gpurt_error *cu_attention_replay_check(const cu_attn_snap *snap) {
  const char *w = "graph_launch";
  cu_attn *a = snap->obj;
  gpurt_error *e = NULL;
  pthread_mutex_lock(&a->mu);
  if (!a->planned)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: a recorded attention object has no plan (plan it before each "
               "replay)", w);
  else if (a->sched.batch != snap->batch)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: a recorded attention object is planned for batch %u but the graph "
               "recorded its runs at batch %u: a graph replays the batch it was captured at (capture one per batch "
               "size, or pad the batch to the captured one)", w, a->sched.batch, snap->batch);
  else if (a->cfg.prefill_kernel != snap->prefill_kernel)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: a recorded attention object's plan runs FlashInfer's %s kernel "
               "but the graph recorded its %s kernel (decode switches to the prefill kernel at %d tokens of KV a "
               "step): capture the graph again", w, a->cfg.prefill_kernel ? "prefill" : "decode",
               snap->prefill_kernel ? "prefill" : "decode", DECODE_TC_TOKENS);
  else if (a->fws != snap->fws || a->iws != snap->iws)
    e = gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: a recorded attention object's workspace was reallocated since the "
               "graph recorded its runs (a plan needed more): capture the graph again", w);
  else if (a->sched.pages > snap->pages_avail)
    e = gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: a recorded attention object's plan has %llu pages but the page indices "
               "the graph recorded hold %llu", w, U(a->sched.pages), U(snap->pages_avail));
  pthread_mutex_unlock(&a->mu);
  return e;
}
