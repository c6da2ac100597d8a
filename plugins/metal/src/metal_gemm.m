/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_gemm.m — GEMM plans and runs (ABI 1.1). The engine has read and
 * validated the descriptor (gp_gemm_validate) and resolved every operand
 * (in range, on the stream's device); this file picks MPS or the generic
 * kernel and encodes.
 *
 * gpurt's GEMM is column-major (BLAS): D = alpha op(A) op(B) + beta C. MPS
 * is row-major, and a column-major m x n matrix with leading dimension ld is
 * the same memory as a row-major n x m matrix with rowBytes ld * size. So
 * the plugin asks MPS for D^T = op(B)^T op(A)^T:
 *   left  = stored B viewed row-major (n x k, or k x n transposed),
 *   right = stored A viewed row-major (k x m, or m x k transposed),
 *   result = D viewed row-major (n x m).
 * MPS computes result = alpha left right + beta result in place, so C is
 * first copied into D (or D zeroed when beta is 0) by a small kernel, and
 * the epilogue (bias, relu, gelu) runs as a kernel afterwards.
 *
 * MPS runs f32 and f16 when A, B, C and D share the type. bf16 and mixed
 * types run on gpurt_gemm_generic (one thread per element of D, f32
 * accumulation): correct, not fast. fp8 is UNSUPPORTED.
 */
#import "metal_internal.h"
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <math.h>
#include <string.h>

/* A plan: the descriptor, whether MPS runs it, the MPS kernel of the last
 * (alpha, beta). */
@interface GMPlan : GMLocked {
@public
  GMDevice *device;
  gpurt_gemm_desc desc;
  int use_mps;
  /* mu guards the cached MPS kernel */
  MPSMatrixMultiplication *mps;
  double mps_alpha, mps_beta;
}
@end

@implementation GMPlan
@end

gpurt_error *gm_gemm_plan(void *ctx, uint32_t dev, const gpurt_gemm_desc *g, void **plan) {
  @autoreleasepool {
    GMDevice *d = gm_dev(ctx, dev);
    const struct {
      const char *field;
      int32_t t;
    } types[] = {{"a_type", g->a_type}, {"b_type", g->b_type}, {"c_type", g->c_type}, {"d_type", g->d_type}};
    for (int i = 0; i < 4; i++)
      if (types[i].t == GPURT_DTYPE_FP8_E4M3 || types[i].t == GPURT_DTYPE_FP8_E5M2)
        return gp_err(GPURT_ERR_UNSUPPORTED, "gemm_plan_create: %s %s is not supported by the metal plugin (Metal "
                      "has no fp8; f32, f16 and bf16 are)", types[i].field, gp_dtype_name(types[i].t));
    if (g->prologue != GPURT_GEMM_PROLOGUE_NONE)
      return gp_err(GPURT_ERR_UNSUPPORTED, "gemm_plan_create: the %s prologue is not supported by the metal plugin "
                    "(run the norm or silu_mul built-in, then the GEMM)",
                    g->prologue == GPURT_GEMM_PROLOGUE_RMSNORM ? "rmsnorm" : "swiglu");
    GMPlan *p = [[GMPlan alloc] init];
    p->device = d;
    p->desc = *g;
    int same = g->a_type == g->b_type && g->a_type == g->c_type && g->a_type == g->d_type;
    p->use_mps = same && (g->a_type == GPURT_DTYPE_F32 || g->a_type == GPURT_DTYPE_F16) && MPSSupportsMTLDevice(d->dev);
    *plan = (void *)CFBridgingRetain(p);
    return NULL;
  }
}

void gm_gemm_plan_free(void *ctx, void *plan) {
  (void)ctx;
  @autoreleasepool {
    if (plan != NULL) (void)CFBridgingRelease(plan);
  }
}

/* A row-major MPS view of a column-major operand (rows x cols row-major =
 * the stored matrix transposed), batched when mb > 1, else matrix b_index
 * of the batch. */
static MPSMatrix *view(const gp_mem *o, uint64_t rows, uint64_t cols, uint64_t ld, int64_t stride, uint64_t mb,
                       uint64_t b_index, MPSDataType t, size_t es) {
  NSUInteger row_bytes = (NSUInteger)(ld * es);
  uint64_t off = o->offset + (uint64_t)stride * es * b_index;
  MPSMatrixDescriptor *md;
  if (mb > 1)
    md = [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)rows
                                               columns:(NSUInteger)cols
                                              matrices:(NSUInteger)mb
                                              rowBytes:row_bytes
                                           matrixBytes:(NSUInteger)((uint64_t)stride * es)
                                              dataType:t];
  else
    md = [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)rows
                                               columns:(NSUInteger)cols
                                              rowBytes:row_bytes
                                              dataType:t];
  return [[MPSMatrix alloc] initWithBuffer:gm_buf(o) offset:(NSUInteger)off descriptor:md];
}

/* MPS may check rows * rowBytes (a full last row) against the buffer, and
 * needs matrixBytes to be a multiple of rowBytes covering a matrix; o->size
 * is the bytes from the operand's offset to the end of its buffer. */
static int mps_fits(const gp_mem *o, uint64_t rows, uint64_t ld, int64_t stride, uint64_t batch, size_t es) {
  uint64_t span = rows * ld * es;
  if (batch > 1) {
    uint64_t sb = (uint64_t)stride * es;
    if (sb == 0 || sb % (ld * es) != 0 || sb < span) return 0;
    span += sb * (batch - 1);
  }
  return span <= o->size;
}

static void encode_params(id<MTLComputeCommandEncoder> enc, id<MTLComputePipelineState> pso, const gm_gemm_params *prm,
                          uint64_t batch) {
  [enc setComputePipelineState:pso];
  [enc setBytes:prm length:sizeof *prm atIndex:5];
  MTLSize tg = MTLSizeMake(16, 16, 1);
  MTLSize groups = MTLSizeMake((NSUInteger)((prm->m + 15) / 16), (NSUInteger)((prm->n + 15) / 16), (NSUInteger)batch);
  [enc dispatchThreadgroups:groups threadsPerThreadgroup:tg];
}

gpurt_error *gm_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r) {
  (void)ctx;
  @autoreleasepool {
    GMPlan *p = (__bridge GMPlan *)r->plan;
    const gpurt_gemm_desc *d = &p->desc;
    uint64_t batch = d->batch_count;
    int has_bias = d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
                   d->epilogue == GPURT_EPILOGUE_BIAS_GELU;
    int has_c = r->c.obj != NULL && r->beta != 0;
    gm_gemm_params prm;
    memset(&prm, 0, sizeof prm);
    prm.m = d->m;
    prm.n = d->n;
    prm.k = d->k;
    prm.lda = d->lda;
    prm.ldb = d->ldb;
    prm.ldc = d->ldc;
    prm.ldd = d->ldd;
    prm.stride_a = batch > 1 ? d->stride_a : 0;
    prm.stride_b = batch > 1 ? d->stride_b : 0;
    prm.stride_c = batch > 1 ? d->stride_c : 0;
    prm.stride_d = batch > 1 ? d->stride_d : 0;
    prm.alpha = (float)r->alpha;
    prm.beta = (float)r->beta;
    prm.a_type = (uint32_t)d->a_type;
    prm.b_type = (uint32_t)d->b_type;
    prm.c_type = (uint32_t)d->c_type;
    prm.d_type = (uint32_t)d->d_type;
    prm.bias_type = (uint32_t)(has_bias ? d->bias_type : d->d_type);
    prm.trans_a = d->trans_a;
    prm.trans_b = d->trans_b;
    prm.epilogue = (uint32_t)d->epilogue;
    prm.has_c = (uint32_t)has_c;

    size_t es = gp_dtype_size(d->d_type);
    int mps = p->use_mps && mps_fits(&r->b, d->trans_b ? d->k : d->n, d->ldb, prm.stride_b, batch, es) &&
              mps_fits(&r->a, d->trans_a ? d->m : d->k, d->lda, prm.stride_a, batch, es) &&
              mps_fits(&r->dd, d->n, d->ldd, prm.stride_d, batch, es);
    GMDevice *dev = p->device;
    gp_mem a = r->a, b = r->b, c = r->c, dd = r->dd, bias = r->bias; /* captured by value */
    gpurt_error *e;
    id<MTLComputePipelineState> k_main = nil, k_copy = nil, k_epi = nil;
    if (!mps) {
      if ((e = gm_builtin_pso(dev, @"gpurt_gemm_generic", &k_main))) return e;
      return gm_submit(q, @"gemm (gpurt_gemm_generic)", ^gpurt_error *(GMEnc *x) {
        id<MTLComputeCommandEncoder> enc = gm_compute(x);
        if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "gemm_run: Metal gave no compute encoder");
        gm_bind(enc, &a, NULL, 0);
        gm_bind(enc, &b, NULL, 1);
        gm_bind(enc, &c, &dd, 2); /* every index is bound */
        gm_bind(enc, &dd, NULL, 3);
        gm_bind(enc, &bias, &dd, 4);
        encode_params(enc, k_main, &prm, batch);
        return NULL;
      });
    }
    if ((e = gm_builtin_pso(dev, @"gpurt_gemm_copy_c", &k_copy))) return e;
    if (d->epilogue != GPURT_EPILOGUE_NONE && (e = gm_builtin_pso(dev, @"gpurt_gemm_epilogue", &k_epi))) return e;
    MPSMatrixMultiplication *mm;
    pthread_mutex_lock(&p->mu);
    if (p->mps == nil || p->mps_alpha != r->alpha || p->mps_beta != r->beta) {
      p->mps = [[MPSMatrixMultiplication alloc] initWithDevice:dev->dev
                                                 transposeLeft:d->trans_b != 0
                                                transposeRight:d->trans_a != 0
                                                    resultRows:(NSUInteger)d->n
                                                 resultColumns:(NSUInteger)d->m
                                               interiorColumns:(NSUInteger)d->k
                                                         alpha:r->alpha
                                                          beta:r->beta];
      p->mps_alpha = r->alpha;
      p->mps_beta = r->beta;
    }
    mm = p->mps;
    pthread_mutex_unlock(&p->mu);
    if (mm == nil) return gp_err(GPURT_ERR_INTERNAL, "gemm_run: MPSMatrixMultiplication could not be made");
    /* MPS reads C from D: copy C there (or zero D) unless C is D. */
    int c_is_d = c.obj == dd.obj && c.offset == dd.offset && d->ldc == d->ldd && prm.stride_c == prm.stride_d &&
                 d->c_type == d->d_type;
    int copy_c = !(has_c && c_is_d);
    MPSDataType t = d->d_type == GPURT_DTYPE_F16 ? MPSDataTypeFloat16 : MPSDataTypeFloat32;
    /* Batched views need strides that are whole numbers of rows; a
     * broadcast (stride 0) or odd stride loops over the batch instead. */
    uint64_t loops = 1, mb = batch;
    if (batch > 1 && !(prm.stride_a > 0 && prm.stride_b > 0 && prm.stride_d > 0)) {
      loops = batch;
      mb = 1;
    }
    gpurt_gemm_desc dc = *d;
    return gm_submit(q, @"gemm (MPSMatrixMultiplication)", ^gpurt_error *(GMEnc *x) {
      if (copy_c) {
        id<MTLComputeCommandEncoder> enc = gm_compute(x);
        if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "gemm_run: Metal gave no compute encoder");
        gm_bind(enc, &c, &dd, 2);
        gm_bind(enc, &dd, NULL, 3);
        encode_params(enc, k_copy, &prm, batch);
      }
      gm_end_compute(x); /* MPS encodes its own passes */
      for (uint64_t i = 0; i < loops; i++) {
        MPSMatrix *left = view(&b, dc.trans_b ? dc.k : dc.n, dc.trans_b ? dc.n : dc.k, dc.ldb, prm.stride_b, mb, i, t, es);
        MPSMatrix *right = view(&a, dc.trans_a ? dc.m : dc.k, dc.trans_a ? dc.k : dc.m, dc.lda, prm.stride_a, mb, i, t, es);
        MPSMatrix *res = view(&dd, dc.n, dc.m, dc.ldd, prm.stride_d, mb, i, t, es);
        [mm encodeToCommandBuffer:x->cb leftMatrix:left rightMatrix:right resultMatrix:res];
      }
      if (k_epi != nil) {
        id<MTLComputeCommandEncoder> enc = gm_compute(x);
        if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "gemm_run: Metal gave no compute encoder");
        gm_bind(enc, &dd, NULL, 3);
        gm_bind(enc, &bias, &dd, 4);
        encode_params(enc, k_epi, &prm, batch);
      }
      return NULL;
    });
  }
}
