/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_attention.m — attention over a paged KV cache on Metal (ABI 1.5):
 * kv_append and the attention objects, with the kernels of
 * kernels/gpurt_attention.metal (ga_kv_append, ga_attention: one kernel for
 * decode and prefill, compiled with the built-in library; kernel_get does
 * not reach them). The engine checks (csrc/gp_attention.c: the same codes
 * and messages as the mock and CUDA) and resolves every operand. An
 * attention object keeps its descriptor and the last plan's checked
 * counts; a plan enqueues nothing (the kernel reads the page table and
 * qo_indptr from device memory, as the other backends do), so plans never
 * race with runs in flight.
 *
 * fp8_e4m3 caches (ABI 1.8) are not supported on Metal: kv_append and
 * attention_create answer GPURT_ERR_UNSUPPORTED naming fp8 (Apple GPUs
 * have no fp8 type; the kernels read 16-bit elements). Written on Linux:
 * not compiled or run yet.
 */
#import "metal_internal.h"

#include <string.h>

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

@interface GMAttention : GMLocked {
@public
  GMDevice *device;
  gpurt_attention_desc desc;
  /* mu guards the plan below */
  gp_attention_sched sched;
}
@end

@implementation GMAttention
@end

static gpurt_error *no_fp8(const char *what, int32_t dtype) {
  if (dtype != GPURT_DTYPE_FP8_E4M3) return NULL;
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: layout dtype fp8_e4m3 (an fp8 KV cache, ABI 1.8) is not supported by the "
                "metal plugin (Metal has no fp8; f16 and bf16 caches are)", what);
}

/* ---- kv_append ------------------------------------------------------------------------------ */

gpurt_error *gm_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r) {
  (void)ctx;
  @autoreleasepool {
    const gpurt_kv_layout *l = &r->layout;
    gpurt_error *e = no_fp8("kv_append", l->dtype);
    if (e) return e;
    if (r->inv_freq.obj != NULL)
      return gp_err(GPURT_ERR_UNSUPPORTED, "kv_append: the rotary embedding on append (inv_freq, ABI 1.10) is not "
                    "supported by the metal plugin (run rope_neox_freqs_T, then the append)");
    if (r->pages.num_pages > 0x7fffffffull)
      return gp_err(GPURT_ERR_UNSUPPORTED, "kv_append: num_pages %llu exceeds the kernel's int32 page indices",
                    (unsigned long long)r->pages.num_pages);
    if (r->nnz > (1ull << 31))
      return gp_err(GPURT_ERR_UNSUPPORTED, "kv_append: nnz %llu exceeds the kernel's 2^31 rows",
                    (unsigned long long)r->nnz);
    id<MTLComputePipelineState> pso;
    if ((e = gm_builtin_pso(gm_queue_device(q), @"ga_kv_append", &pso))) return e;
    ga_append_params prm = {l->num_kv_heads, l->head_dim, l->page_size, l->layout == GPURT_KV_LAYOUT_HND,
                            r->batch, (uint32_t)r->pages.num_pages, r->nnz};
    uint64_t per_row = (uint64_t)l->num_kv_heads * l->head_dim;
    gp_kv_pages_op pg = r->pages;
    gp_mem kr = r->k_rows, vr = r->v_rows, bi = r->batch_indices, pos = r->positions;
    NSUInteger gx = (NSUInteger)((per_row + 255) / 256), gy = (NSUInteger)r->nnz;
    return gm_submit(q, @"kv_append (ga_kv_append)", ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "kv_append: Metal gave no compute encoder");
      [enc setComputePipelineState:pso];
      gm_bind(enc, &pg.k, NULL, 0);
      gm_bind(enc, &pg.v, NULL, 1);
      gm_bind(enc, &kr, NULL, 2);
      gm_bind(enc, &vr, NULL, 3);
      gm_bind(enc, &bi, NULL, 4);
      gm_bind(enc, &pos, NULL, 5);
      gm_bind(enc, &pg.indptr, NULL, 6);
      gm_bind(enc, &pg.indices, NULL, 7);
      gm_bind(enc, &pg.last_page_len, NULL, 8);
      [enc setBytes:&prm length:sizeof prm atIndex:9];
      [enc dispatchThreadgroups:MTLSizeMake(gx, gy, 1) threadsPerThreadgroup:MTLSizeMake(256, 1, 1)];
      return NULL;
    });
  }
}

/* ---- attention objects ---------------------------------------------------------------------- */

gpurt_error *gm_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj) {
  @autoreleasepool {
    gpurt_error *e = no_fp8("attention_create", d->layout.dtype);
    if (e) return e;
    GMAttention *a = [[GMAttention alloc] init];
    a->device = gm_dev(ctx, dev);
    a->desc = *d;
    *obj = (void *)CFBridgingRetain(a);
    return NULL;
  }
}

void gm_attention_destroy(void *ctx, void *obj) {
  (void)ctx;
  @autoreleasepool {
    /* Runs in flight hold nothing of the object (their parameters are
     * copied into the command buffer): nothing to wait for. */
    if (obj != NULL) (void)CFBridgingRelease(obj);
  }
}

gpurt_error *gm_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *pa,
                               const gp_attention_sched *sc) {
  (void)ctx;
  (void)q;
  (void)pa;
  GMAttention *a = (__bridge GMAttention *)obj;
  if (sc->rows > 0xffffffffull || sc->max_kv > 0xffffffffull)
    return gp_err(GPURT_ERR_UNSUPPORTED, "attention_plan: %llu rows / %llu tokens exceed the kernel's 32-bit counts",
                  (unsigned long long)sc->rows, (unsigned long long)sc->max_kv);
  pthread_mutex_lock(&a->mu);
  a->sched = *sc;
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

gpurt_error *gm_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r) {
  (void)ctx;
  @autoreleasepool {
    GMAttention *a = (__bridge GMAttention *)r->obj;
    pthread_mutex_lock(&a->mu);
    gp_attention_sched sc = a->sched;
    pthread_mutex_unlock(&a->mu);
    const gpurt_attention_desc *d = &a->desc;
    const gpurt_kv_layout *l = &d->layout;
    int prefill = d->kind == GPURT_ATTENTION_PREFILL;
    if (r->pages.num_pages > 0x7fffffffull)
      return gp_err(GPURT_ERR_UNSUPPORTED, "attention_run: num_pages %llu exceeds the kernel's int32 page indices",
                    (unsigned long long)r->pages.num_pages);
    id<MTLComputePipelineState> pso;
    gpurt_error *e = gm_builtin_pso(a->device, @"ga_attention", &pso);
    if (e) return e;
    ga_params prm = {d->num_qo_heads, l->num_kv_heads, l->head_dim, l->page_size,
                     l->layout == GPURT_KV_LAYOUT_HND, l->dtype == GPURT_DTYPE_BF16, d->causal, (uint32_t)prefill,
                     sc.batch, (uint32_t)sc.rows, (uint32_t)r->pages.num_pages, 0,
                     (float)gp_attention_sm_scale(d), (float)d->logits_soft_cap};
    gp_kv_pages_op pg = r->pages;
    gp_mem qm = r->q, o = r->o, qo = r->qo_indptr; /* qo: prefill only; decode binds indptr (not read) */
    NSUInteger rows = (NSUInteger)sc.rows, heads = d->num_qo_heads;
    return gm_submit(q, prefill ? @"attention_run (ga_attention, prefill)" : @"attention_run (ga_attention, decode)",
                     ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "attention_run: Metal gave no compute encoder");
      [enc setComputePipelineState:pso];
      gm_bind(enc, &qm, NULL, 0);
      gm_bind(enc, &o, NULL, 1);
      gm_bind(enc, &pg.k, NULL, 2);
      gm_bind(enc, &pg.v, NULL, 3);
      gm_bind(enc, &pg.indptr, NULL, 4);
      gm_bind(enc, &pg.indices, NULL, 5);
      gm_bind(enc, &pg.last_page_len, NULL, 6);
      gm_bind(enc, &qo, &pg.indptr, 7);
      [enc setBytes:&prm length:sizeof prm atIndex:8];
      [enc dispatchThreadgroups:MTLSizeMake(rows, heads, 1) threadsPerThreadgroup:MTLSizeMake(128, 1, 1)];
      return NULL;
    });
  }
}
