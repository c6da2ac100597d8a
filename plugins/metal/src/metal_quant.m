/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_quant.m — the 1.4 ops on Metal: quant_matmul and grouped_gemm,
 * with the kernels of kernels/gpurt_quant.metal (compiled with the built-in
 * library; kernel_get does not reach them). The engine checks the
 * arguments (csrc/gp_quant.c) and resolves the operands, as for every
 * backend. The grouped GEMM is one dispatch per non-empty group in
 * one command buffer. Written on Linux: not compiled or run yet.
 */
#import "metal_internal.h"

#include <string.h>

typedef struct gq_mm_params {
  uint32_t m, n, k, gshift;
  uint32_t x_f16, s_f16;
} gq_mm_params;

typedef struct gq_gg_params {
  uint32_t row0, rows, n, k;
  uint32_t group, fp8;
  uint32_t kb, nb;
} gq_gg_params;

/* The operands were resolved by the engine (gp_quant.c's checks, every
 * view in range and on the stream's device). */
gpurt_error *gm_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r) {
  (void)ctx;
  @autoreleasepool {
    const gpurt_quant_matmul_args *a = &r->c.a;
    id<MTLComputePipelineState> pso;
    gpurt_error *e = gm_builtin_pso(gm_queue_device(q), @"gq_quant_matmul", &pso);
    if (e) return e;
    uint32_t gshift = 0;
    while ((1u << gshift) < a->group_size) gshift++;
    gq_mm_params prm = {(uint32_t)a->m, (uint32_t)a->n, (uint32_t)a->k, gshift, a->x_type == GPURT_DTYPE_F16,
                        a->scale_type == GPURT_DTYPE_F16};
    gp_mem w = r->w, sc = r->scales, bi = r->biases, x_ = r->x, y = r->y;
    NSUInteger m = (NSUInteger)a->m, n = (NSUInteger)a->n;
    return gm_submit(q, @"quant_matmul (gq_quant_matmul)", ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "quant_matmul: Metal gave no compute encoder");
      [enc setComputePipelineState:pso];
      gm_bind(enc, &w, NULL, 0);
      gm_bind(enc, &sc, NULL, 1);
      gm_bind(enc, &bi, NULL, 2);
      gm_bind(enc, &x_, NULL, 3);
      gm_bind(enc, &y, NULL, 4);
      [enc setBytes:&prm length:sizeof prm atIndex:5];
      [enc dispatchThreadgroups:MTLSizeMake(m, n, 1) threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
      return NULL;
    });
  }
}

/* One dispatch per non-empty group, in one command buffer (r->c.total_m >=
 * 1: the engine answers M = 0 itself). The group sizes are the caller's,
 * borrowed for the call: the dispatches' parameters are made here. */
gpurt_error *gm_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r) {
  (void)ctx;
  @autoreleasepool {
    const gpurt_grouped_gemm_args *a = &r->c.a;
    /* 1.11's row counts on the device: the dispatches here are made from
     * host counts, so they are refused (a kernel that reads them is to come). */
    if (r->c.dev_counts)
      return gp_err(GPURT_ERR_UNSUPPORTED, "grouped_gemm: row counts on the device (m_counts) are not "
                    "supported on Metal yet; pass m_sizes");
    id<MTLComputePipelineState> pso;
    gpurt_error *e = gm_builtin_pso(gm_queue_device(q), @"gq_grouped_gemm", &pso);
    if (e) return e;
    NSMutableData *groups = [NSMutableData data];
    uint64_t row = 0;
    for (uint64_t g = 0; g < a->group_count; g++) {
      uint64_t m = a->m_sizes[g];
      if (m > 0) {
        gq_gg_params prm = {(uint32_t)row, (uint32_t)m, (uint32_t)a->n, (uint32_t)a->k,
                            (uint32_t)g, (uint32_t)r->c.fp8, (uint32_t)r->c.kb, (uint32_t)r->c.nb};
        [groups appendBytes:&prm length:sizeof prm];
      }
      row += m;
    }
    gp_mem ma = r->a, mb = r->b, md = r->d, msa = r->scale_a, msb = r->scale_b;
    return gm_submit(q, @"grouped_gemm (gq_grouped_gemm)", ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "grouped_gemm: Metal gave no compute encoder");
      [enc setComputePipelineState:pso];
      gm_bind(enc, &ma, NULL, 0);
      gm_bind(enc, &mb, NULL, 1);
      gm_bind(enc, &md, NULL, 2);
      gm_bind(enc, &msa, &md, 3); /* unused scale slots are bound to D: every index is bound */
      gm_bind(enc, &msb, &md, 4);
      const gq_gg_params *gs = groups.bytes;
      for (NSUInteger i = 0; i < groups.length / sizeof *gs; i++) {
        [enc setBytes:&gs[i] length:sizeof gs[i] atIndex:5];
        [enc dispatchThreadgroups:MTLSizeMake(gs[i].n, gs[i].rows, 1) threadsPerThreadgroup:MTLSizeMake(32, 1, 1)];
      }
      return NULL;
    });
  }
}
