/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attention over a paged KV cache on Metal (ABI 1.5): kv_append and the
 * attention objects, with the kernels of kernels/gpurt_attention.metal
 * (ga_kv_append, ga_attention: one kernel for decode and prefill, compiled
 * with the built-in library; kernel_get does not reach them). Checks are
 * csrc's (gp_attention.c): the same codes and messages as the mock and
 * CUDA. An attention object keeps its descriptor and the last plan's
 * checked counts; a plan enqueues nothing (the kernel reads the page table
 * and qo_indptr from device memory, as the other backends do), so plans
 * never race with runs in flight. Each call is one command buffer on the
 * caller's stream. Written on Linux: not compiled or run yet.
 */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <string.h>

#include "gp_attention.h"
#include "metal_internal.h"

/* The kernels' parameter structs (gpurt_attention.metal's ga_params and
 * ga_append_params: the same fields, types and order). */
typedef struct ga_params {
  uint32_t hq, hk, dim, page_size;
  uint32_t hnd, bf16, causal, prefill;
  uint32_t batch, rows, num_pages, pad;
  float scale, cap;
} ga_params;

typedef struct ga_append_params {
  uint32_t hk, dim, page_size, hnd;
  uint32_t batch, num_pages;
  uint64_t nnz;
} ga_append_params;

@interface GMAttention : NSObject {
@public
  uint32_t device;
  gpurt_attention_desc desc;
  pthread_mutex_t mu; /* guards the plan below */
  int planned;
  gpurt_stream *stream; /* the stream of the last plan */
  gp_attention_sched sched;
}
@end

@implementation GMAttention
- (instancetype)init {
  if ((self = [super init])) pthread_mutex_init(&mu, NULL);
  return self;
}
- (void)dealloc {
  pthread_mutex_destroy(&mu);
}
@end

typedef struct ga_operand {
  GMBuffer *__unsafe_unretained b; /* kept alive by the caller's strong local */
  uint64_t offset;
} ga_operand;

/* A buffer on the stream's device with [offset, offset + bytes) inside it,
 * the offset a multiple of align. */
static gpurt_error *ga_operand_get(GMRuntime *rt, GMStream *s, const char *op, const char *name, gpurt_buffer *bh,
                                   uint64_t offset, uint64_t bytes, uint64_t align, ga_operand *out,
                                   id __strong *keep) {
  gpurt_error *e = gp_attention_align(op, name, offset, align);
  if (e) return e;
  if (bh == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  id o;
  if ((e = gm_lookup(rt, &rt->buffers, (uintptr_t)bh, GP_KIND_BUFFER, &o))) return gp_err_wrap(e, "%s: %s", op, name);
  GMBuffer *b = o;
  *keep = o;
  if (b->device != s->device->index)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u", op,
                  name, (unsigned long long)(uintptr_t)bh, b->device, s->device->index);
  if (!gp_in_range(b->size, offset, bytes))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: %s needs %llu bytes from offset %llu, beyond buffer %#llx of %llu "
                  "bytes", op, name, (unsigned long long)bytes, (unsigned long long)offset,
                  (unsigned long long)(uintptr_t)bh, (unsigned long long)b->size);
  out->b = b;
  out->offset = offset;
  return NULL;
}

static gpurt_error *ga_stream(gpurt_runtime *h, gpurt_stream *sh, const char *op, GMRuntime *__strong *rt,
                              GMStream *__strong *s) {
  gpurt_error *e = gm_get_rt(h, rt);
  if (e) return e;
  if ((e = gp_need_stream(op, sh))) return e;
  if ((e = gm_get_stream(*rt, sh, s))) return gp_err_wrap(e, "%s", op);
  return gm_check_lost((*s)->device);
}

/* The pages of a call: K/V (num_pages pages), indptr, indices (n_indices
 * entries, at least 1) and last_page_len, resolved in the mock's order. */
typedef struct ga_pages {
  ga_operand k, v, indptr, indices, last;
  id keep[5];
} ga_pages;

static gpurt_error *ga_pages_get(GMRuntime *rt, GMStream *s, const gpurt_kv_layout *l, const gpurt_kv_pages *p,
                                 uint32_t batch, uint64_t n_indices, const char *op, ga_pages *out) {
  if (p->num_pages == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: num_pages is 0 (must be >= 1)", op);
  uint64_t page_bytes = gp_kv_page_elems(l) * gp_dtype_size(l->dtype);
  if (p->num_pages > UINT64_MAX / page_bytes)
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: num_pages %llu overflows", op, (unsigned long long)p->num_pages);
  if (p->num_pages > 0x7fffffffull)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: num_pages %llu exceeds int32 page indices", op,
                  (unsigned long long)p->num_pages);
  uint64_t bytes = p->num_pages * page_bytes;
  if (n_indices == 0) n_indices = 1;
  gpurt_error *e;
  id k0, k1, k2, k3, k4;
  if ((e = ga_operand_get(rt, s, op, "k", p->k, p->k_offset, bytes, 16, &out->k, &k0)) ||
      (e = ga_operand_get(rt, s, op, "v", p->v, p->v_offset, bytes, 16, &out->v, &k1)) ||
      (e = ga_operand_get(rt, s, op, "indptr", p->indptr, p->indptr_offset, 4ull * (batch + 1), 4, &out->indptr,
                          &k2)) ||
      (e = ga_operand_get(rt, s, op, "last_page_len", p->last_page_len, p->last_page_len_offset, 4ull * batch, 4,
                          &out->last, &k3)) ||
      (e = ga_operand_get(rt, s, op, "indices", p->indices, p->indices_offset, 4 * n_indices, 4, &out->indices,
                          &k4)))
    return e;
  out->keep[0] = k0;
  out->keep[1] = k1;
  out->keep[2] = k2;
  out->keep[3] = k3;
  out->keep[4] = k4;
  return NULL;
}

static void ga_set(id<MTLComputeCommandEncoder> enc, const ga_operand *o, NSUInteger i) {
  [enc setBuffer:o->b->buf offset:(NSUInteger)o->offset atIndex:i];
}

/* ---- kv_append -------------------------------------------------------------------------------- */

gpurt_error *gm_kv_append(gpurt_runtime *h, gpurt_stream *sh, const gpurt_kv_append_args *args) {
  @autoreleasepool {
    const char *op = "kv_append";
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = ga_stream(h, sh, op, &rt, &s);
    if (e) return e;
    gpurt_kv_append_args a;
    if ((e = gp_read_struct(&a, sizeof a, args, "kv_append: args"))) return e;
    if ((e = gp_kv_layout_check(&a.layout, op))) return e;
    if (a.layout.dtype == GPURT_DTYPE_FP8_E4M3) /* ABI 1.8: not on Metal yet */
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: dtype fp8_e4m3 caches are not supported by the Metal plugin", op);
    if (a.batch_size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: batch_size is 0 (must be >= 1)", op);
    if (a.nnz == 0) return NULL;
    if (a.nnz > (1ull << 31))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: nnz %llu exceeds 2^31", op, (unsigned long long)a.nnz);
    const gpurt_kv_layout *l = &a.layout;
    uint64_t rows = a.nnz * l->num_kv_heads * l->head_dim * gp_dtype_size(l->dtype);
    ga_pages pg;
    ga_operand kr, vr, bi, pos;
    id k0, k1, k2, k3;
    if ((e = ga_pages_get(rt, s, l, &a.pages, a.batch_size, 1, op, &pg)) ||
        (e = ga_operand_get(rt, s, op, "k_rows", a.k_rows, a.k_rows_offset, rows, 16, &kr, &k0)) ||
        (e = ga_operand_get(rt, s, op, "v_rows", a.v_rows, a.v_rows_offset, rows, 16, &vr, &k1)) ||
        (e = ga_operand_get(rt, s, op, "batch_indices", a.batch_indices, a.batch_indices_offset, 4 * a.nnz, 4, &bi,
                            &k2)) ||
        (e = ga_operand_get(rt, s, op, "positions", a.positions, a.positions_offset, 4 * a.nnz, 4, &pos, &k3)))
      return e;
    id<MTLComputePipelineState> pso;
    if ((e = gm_builtin_pso(s->device, @"ga_kv_append", &pso))) return e;
    ga_append_params prm = {l->num_kv_heads, l->head_dim, l->page_size, l->layout == GPURT_KV_LAYOUT_HND,
                            a.batch_size, (uint32_t)a.pages.num_pages, a.nnz};
    uint64_t per_row = (uint64_t)l->num_kv_heads * l->head_dim;
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    if (enc == nil) {
      gm_stream_abort(s);
      return gp_err(GPURT_ERR_INTERNAL, "%s: no compute encoder", op);
    }
    [enc setComputePipelineState:pso];
    ga_set(enc, &pg.k, 0);
    ga_set(enc, &pg.v, 1);
    ga_set(enc, &kr, 2);
    ga_set(enc, &vr, 3);
    ga_set(enc, &bi, 4);
    ga_set(enc, &pos, 5);
    ga_set(enc, &pg.indptr, 6);
    ga_set(enc, &pg.indices, 7);
    ga_set(enc, &pg.last, 8);
    [enc setBytes:&prm length:sizeof prm atIndex:9];
    [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)((per_row + 255) / 256), (NSUInteger)a.nnz, 1)
        threadsPerThreadgroup:MTLSizeMake(256, 1, 1)];
    [enc endEncoding];
    gm_stream_commit(s, cb, @"kv_append (ga_kv_append)", nil, 0);
    return NULL;
  }
}

/* ---- attention objects ------------------------------------------------------------------------- */

gpurt_error *gm_attention_create(gpurt_runtime *h, uint32_t device, const gpurt_attention_desc *desc,
                                 gpurt_attention **out) {
  @autoreleasepool {
    const char *op = "attention_create";
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    GMDevice *d;
    if ((e = gm_device(rt, device, &d))) return gp_err_wrap(e, "%s", op);
    gpurt_attention_desc dd;
    if ((e = gp_read_struct(&dd, sizeof dd, desc, "attention_create: desc"))) return e;
    if ((e = gp_attention_desc_check(&dd))) return e;
    if (dd.layout.dtype == GPURT_DTYPE_FP8_E4M3) /* ABI 1.8: not on Metal yet */
      return gp_err(GPURT_ERR_UNSUPPORTED, "attention_create: dtype fp8_e4m3 caches are not supported by the "
                    "Metal plugin");
    GMAttention *a = [[GMAttention alloc] init];
    a->device = device;
    a->desc = dd;
    uintptr_t hv = 0;
    if ((e = gm_insert(rt, &rt->attns, a, &hv, "attention"))) return e;
    *out = (gpurt_attention *)hv;
    return NULL;
  }
}

gpurt_error *gm_attention_destroy(gpurt_runtime *h, gpurt_attention *ah) {
  if (ah == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->attns, (uintptr_t)ah, &o);
    id gone = st == GP_HANDLE_OK ? gm_remove_locked(&rt->attns, (uintptr_t)ah) : nil;
    pthread_mutex_unlock(&rt->mu);
    /* Runs in flight hold nothing of the object (their parameters are
     * copied into the command buffer): nothing to wait for. */
    (void)gone;
    if (st != GP_HANDLE_OK)
      return gp_err_wrap(gp_handle_error(st, GP_KIND_ATTENTION, (uintptr_t)ah), "attention_destroy");
    return NULL;
  }
}

gpurt_error *gm_attention_plan(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                               const gpurt_attention_plan_args *args) {
  @autoreleasepool {
    const char *op = "attention_plan";
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = ga_stream(h, sh, op, &rt, &s);
    if (e) return e;
    id o;
    if ((e = gm_lookup(rt, &rt->attns, (uintptr_t)ah, GP_KIND_ATTENTION, &o))) return gp_err_wrap(e, "%s", op);
    GMAttention *a = o;
    if (a->device != s->device->index)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: attention %#llx is for device %u but the stream is on device "
                    "%u", op, (unsigned long long)(uintptr_t)ah, a->device, s->device->index);
    gpurt_attention_plan_args pa;
    if ((e = gp_read_struct(&pa, sizeof pa, args, "attention_plan: args"))) return e;
    gp_attention_sched sc;
    if ((e = gp_attention_plan_check(&a->desc, &pa, &sc))) return e;
    if (sc.rows > 0xffffffffull || sc.max_kv > 0xffffffffull)
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: %llu rows / %llu tokens exceed the kernel's 32-bit counts", op,
                    (unsigned long long)sc.rows, (unsigned long long)sc.max_kv);
    pthread_mutex_lock(&a->mu);
    a->sched = sc;
    a->stream = sh;
    a->planned = 1;
    pthread_mutex_unlock(&a->mu);
    return NULL;
  }
}

gpurt_error *gm_attention_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                              const gpurt_attention_run_args *args) {
  @autoreleasepool {
    const char *op = "attention_run";
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = ga_stream(h, sh, op, &rt, &s);
    if (e) return e;
    id o;
    if ((e = gm_lookup(rt, &rt->attns, (uintptr_t)ah, GP_KIND_ATTENTION, &o))) return gp_err_wrap(e, "%s", op);
    GMAttention *a = o;
    gpurt_attention_run_args ra;
    if ((e = gp_read_struct(&ra, sizeof ra, args, "attention_run: args"))) return e;
    pthread_mutex_lock(&a->mu);
    int planned = a->planned;
    gpurt_stream *ps = a->stream;
    gp_attention_sched sc = a->sched;
    pthread_mutex_unlock(&a->mu);
    if (!planned)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: attention %#llx has no plan (call attention_plan first)", op,
                    (unsigned long long)(uintptr_t)ah);
    if (ps != sh)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: stream %#llx is not the stream of the last plan (%#llx); "
                    "runs go on the plan's stream", op, (unsigned long long)(uintptr_t)sh,
                    (unsigned long long)(uintptr_t)ps);
    const gpurt_attention_desc *d = &a->desc;
    const gpurt_kv_layout *l = &d->layout;
    int prefill = d->kind == GPURT_ATTENTION_PREFILL;
    uint64_t row_bytes = (uint64_t)d->num_qo_heads * l->head_dim * gp_dtype_size(l->dtype);
    ga_operand q, out, qo;
    id k0, k1, k2;
    ga_pages pg;
    if ((e = ga_operand_get(rt, s, op, "q", ra.q, ra.q_offset, sc.rows * row_bytes, 16, &q, &k0)) ||
        (e = ga_operand_get(rt, s, op, "o", ra.o, ra.o_offset, sc.rows * row_bytes, 16, &out, &k1)) ||
        (e = ga_pages_get(rt, s, l, &ra.pages, sc.batch, sc.pages, op, &pg)))
      return e;
    if (prefill) {
      if ((e = ga_operand_get(rt, s, op, "qo_indptr", ra.qo_indptr, ra.qo_indptr_offset, 4ull * (sc.batch + 1), 4,
                              &qo, &k2)))
        return e;
    } else if (ra.qo_indptr != NULL) {
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: qo_indptr is set for decode (pass NULL)", op);
    } else {
      qo = pg.indptr; /* bound, not read (decode) */
    }
    id<MTLComputePipelineState> pso;
    if ((e = gm_builtin_pso(s->device, @"ga_attention", &pso))) return e;
    ga_params prm = {d->num_qo_heads, l->num_kv_heads, l->head_dim, l->page_size,
                     l->layout == GPURT_KV_LAYOUT_HND, l->dtype == GPURT_DTYPE_BF16, d->causal, (uint32_t)prefill,
                     sc.batch, (uint32_t)sc.rows, (uint32_t)ra.pages.num_pages, 0,
                     (float)gp_attention_sm_scale(d), (float)d->logits_soft_cap};
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    if (enc == nil) {
      gm_stream_abort(s);
      return gp_err(GPURT_ERR_INTERNAL, "%s: no compute encoder", op);
    }
    [enc setComputePipelineState:pso];
    ga_set(enc, &q, 0);
    ga_set(enc, &out, 1);
    ga_set(enc, &pg.k, 2);
    ga_set(enc, &pg.v, 3);
    ga_set(enc, &pg.indptr, 4);
    ga_set(enc, &pg.indices, 5);
    ga_set(enc, &pg.last, 6);
    ga_set(enc, &qo, 7);
    [enc setBytes:&prm length:sizeof prm atIndex:8];
    [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)sc.rows, d->num_qo_heads, 1)
        threadsPerThreadgroup:MTLSizeMake(128, 1, 1)];
    [enc endEncoding];
    gm_stream_commit(s, cb, prefill ? @"attention_run (ga_attention, prefill)" : @"attention_run (ga_attention, decode)",
                     nil, 0);
    return NULL;
  }
}
