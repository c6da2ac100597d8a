/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The 1.4 ops on Metal: quant_matmul and grouped_gemm, with the kernels of
 * kernels/gpurt_quant.metal (compiled with the built-in library; kernel_get
 * does not reach them). Arguments are checked by csrc/gp_quant.c, as on the
 * other backends. The grouped GEMM is one dispatch per non-empty group in
 * one command buffer. Written on Linux: not compiled or run yet.
 */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <string.h>

#include "gp_quant.h"
#include "metal_internal.h"

typedef struct gq_mm_params {
  uint32_t m, n, k, gshift;
  uint32_t x_f16, s_f16;
} gq_mm_params;

typedef struct gq_gg_params {
  uint32_t row0, rows, n, k;
  uint32_t group, fp8;
  uint32_t kb, nb;
} gq_gg_params;

typedef struct gq_operand {
  GMBuffer *__unsafe_unretained b; /* kept alive by the caller's strong local */
  uint64_t offset;
} gq_operand;

/* A buffer on the stream's device with [offset, offset + bytes) inside it. */
static gpurt_error *gq_operand_get(GMRuntime *rt, GMStream *s, const char *op, const char *name,
                                   gpurt_buffer *bh, uint64_t offset, uint64_t bytes, gq_operand *out,
                                   id __strong *keep) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->buffers, (uintptr_t)bh, GP_KIND_BUFFER, &o);
  if (e) return gp_err_wrap(e, "%s: operand %s", op, name);
  GMBuffer *b = o;
  *keep = o;
  if (b->device != s->device->index)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: operand %s: buffer %#llx is on device %u but the stream is on "
                  "device %u", op, name, (unsigned long long)(uintptr_t)bh, b->device, s->device->index);
  if (!gp_in_range(b->size, offset, bytes))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: operand %s spans %llu bytes from offset %llu, beyond the buffer of "
                  "%llu bytes", op, name, (unsigned long long)bytes, (unsigned long long)offset,
                  (unsigned long long)b->size);
  out->b = b;
  out->offset = offset;
  return NULL;
}

static gpurt_error *gq_stream(gpurt_runtime *h, gpurt_stream *sh, const char *op, GMRuntime *__strong *rt,
                              GMStream *__strong *s) {
  gpurt_error *e = gm_get_rt(h, rt);
  if (e) return e;
  if ((e = gp_need_stream(op, sh))) return e;
  if ((e = gm_get_stream(*rt, sh, s))) return e;
  return gm_check_lost((*s)->device);
}

gpurt_error *gm_quant_matmul(gpurt_runtime *h, gpurt_stream *sh, const gpurt_quant_matmul_args *args) {
  @autoreleasepool {
    const char *op = "quant_matmul";
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = gq_stream(h, sh, op, &rt, &s);
    if (e) return e;
    gp_quant_mm c;
    if ((e = gp_quant_mm_check(args, &c))) return e;
    const gpurt_quant_matmul_args *a = &c.a;
    gq_operand ow, os, ob, ox, oy;
    id kw, ks, kb, kx, ky;
    if ((e = gq_operand_get(rt, s, op, "w", a->w, a->w_offset, c.w_bytes, &ow, &kw)) ||
        (e = gq_operand_get(rt, s, op, "scales", a->scales, a->scales_offset, c.s_bytes, &os, &ks)) ||
        (e = gq_operand_get(rt, s, op, "biases", a->biases, a->biases_offset, c.s_bytes, &ob, &kb)) ||
        (e = gq_operand_get(rt, s, op, "x", a->x, a->x_offset, c.x_bytes, &ox, &kx)) ||
        (e = gq_operand_get(rt, s, op, "y", a->y, a->y_offset, c.y_bytes, &oy, &ky)))
      return e;
    id<MTLComputePipelineState> pso;
    if ((e = gm_builtin_pso(s->device, @"gq_quant_matmul", &pso))) return e;
    uint32_t gshift = 0;
    while ((1u << gshift) < a->group_size) gshift++;
    gq_mm_params prm = {(uint32_t)a->m, (uint32_t)a->n, (uint32_t)a->k, gshift,
                        a->x_type == GPURT_DTYPE_F16, a->scale_type == GPURT_DTYPE_F16};
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    if (enc == nil) {
      gm_stream_abort(s);
      return gp_err(GPURT_ERR_INTERNAL, "%s: no compute encoder", op);
    }
    [enc setComputePipelineState:pso];
    [enc setBuffer:ow.b->buf offset:(NSUInteger)ow.offset atIndex:0];
    [enc setBuffer:os.b->buf offset:(NSUInteger)os.offset atIndex:1];
    [enc setBuffer:ob.b->buf offset:(NSUInteger)ob.offset atIndex:2];
    [enc setBuffer:ox.b->buf offset:(NSUInteger)ox.offset atIndex:3];
    [enc setBuffer:oy.b->buf offset:(NSUInteger)oy.offset atIndex:4];
    [enc setBytes:&prm length:sizeof prm atIndex:5];
    [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)a->m, (NSUInteger)a->n, 1)
        threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
    [enc endEncoding];
    gm_stream_commit(s, cb, @"quant_matmul (gq_quant_matmul)", nil, 0);
    return NULL;
  }
}

gpurt_error *gm_grouped_gemm(gpurt_runtime *h, gpurt_stream *sh, const gpurt_grouped_gemm_args *args) {
  @autoreleasepool {
    const char *op = "grouped_gemm";
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = gq_stream(h, sh, op, &rt, &s);
    if (e) return e;
    gp_grouped c;
    if ((e = gp_grouped_check(args, &c))) return e;
    const gpurt_grouped_gemm_args *a = &c.a;
    gq_operand oa, ob, od, osa = {nil, 0}, osb = {nil, 0};
    id ka, kb, kd, ksa, ksb;
    if ((e = gq_operand_get(rt, s, op, "a", a->a, a->a_offset, c.a_bytes, &oa, &ka)) ||
        (e = gq_operand_get(rt, s, op, "b", a->b, a->b_offset, c.b_bytes, &ob, &kb)) ||
        (e = gq_operand_get(rt, s, op, "d", a->d, a->d_offset, c.d_bytes, &od, &kd)) ||
        (c.fp8 && (e = gq_operand_get(rt, s, op, "scale_a", a->scale_a, a->scale_a_offset, c.sa_bytes, &osa, &ksa))) ||
        (c.fp8 && (e = gq_operand_get(rt, s, op, "scale_b", a->scale_b, a->scale_b_offset, c.sb_bytes, &osb, &ksb))))
      return e;
    if (c.total_m == 0) return NULL;
    id<MTLComputePipelineState> pso;
    if ((e = gm_builtin_pso(s->device, @"gq_grouped_gemm", &pso))) return e;
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    if (enc == nil) {
      gm_stream_abort(s);
      return gp_err(GPURT_ERR_INTERNAL, "%s: no compute encoder", op);
    }
    [enc setComputePipelineState:pso];
    [enc setBuffer:oa.b->buf offset:(NSUInteger)oa.offset atIndex:0];
    [enc setBuffer:ob.b->buf offset:(NSUInteger)ob.offset atIndex:1];
    [enc setBuffer:od.b->buf offset:(NSUInteger)od.offset atIndex:2];
    /* Unused scale slots are bound to D (every index is bound). */
    [enc setBuffer:(osa.b ? osa.b->buf : od.b->buf) offset:(NSUInteger)(osa.b ? osa.offset : od.offset) atIndex:3];
    [enc setBuffer:(osb.b ? osb.b->buf : od.b->buf) offset:(NSUInteger)(osb.b ? osb.offset : od.offset) atIndex:4];
    uint64_t row = 0;
    for (uint64_t g = 0; g < a->group_count; g++) {
      uint64_t m = a->m_sizes[g];
      if (m > 0) {
        gq_gg_params prm = {(uint32_t)row, (uint32_t)m, (uint32_t)a->n, (uint32_t)a->k,
                            (uint32_t)g, (uint32_t)c.fp8, (uint32_t)c.kb, (uint32_t)c.nb};
        [enc setBytes:&prm length:sizeof prm atIndex:5];
        [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)a->n, (NSUInteger)m, 1)
            threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
      }
      row += m;
    }
    [enc endEncoding];
    gm_stream_commit(s, cb, @"grouped_gemm (gq_grouped_gemm)", nil, 0);
    return NULL;
  }
}
