/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_gemm.m — GEMM plans (ABI 1.1).
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

@implementation GMPlan
- (instancetype)init {
  if ((self = [super init])) pthread_mutex_init(&mu, NULL);
  return self;
}
- (void)dealloc { pthread_mutex_destroy(&mu); }
@end

gpurt_error *gm_gemm_plan_create(gpurt_runtime *h, uint32_t device, const gpurt_gemm_desc *desc,
                                 gpurt_gemm_plan **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMDevice *d;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_plan_create: out is NULL");
    gpurt_gemm_desc g;
    if ((e = gp_read_struct(&g, sizeof g, desc, "gemm desc"))) return e;
    if ((e = gm_device(rt, device, &d))) return e;
    if ((e = gp_gemm_validate(&g))) return e;
    const struct { const char *field; int32_t t; } types[] = {
        {"a_type", g.a_type}, {"b_type", g.b_type}, {"c_type", g.c_type}, {"d_type", g.d_type}};
    for (int i = 0; i < 4; i++)
      if (types[i].t == GPURT_DTYPE_FP8_E4M3 || types[i].t == GPURT_DTYPE_FP8_E5M2)
        return gp_err(GPURT_ERR_UNSUPPORTED,
                      "gemm_plan_create: %s %s is not supported by the metal plugin (Metal has no "
                      "fp8; f32, f16 and bf16 are)",
                      types[i].field, gp_dtype_name(types[i].t));
    GMPlan *p = [[GMPlan alloc] init];
    p->device = d;
    p->desc = g;
    int same = g.a_type == g.b_type && g.a_type == g.c_type && g.a_type == g.d_type;
    p->use_mps = same && (g.a_type == GPURT_DTYPE_F32 || g.a_type == GPURT_DTYPE_F16) &&
                 MPSSupportsMTLDevice(d->dev);
    uintptr_t hp;
    if ((e = gm_insert(rt, &rt->plans, p, &hp, "gemm_plan_create"))) return e;
    *out = (gpurt_gemm_plan *)hp;
    return NULL;
  }
}

gpurt_error *gm_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *ph) {
  if (ph == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->plans, (uintptr_t)ph, &o);
    id gone = st == GP_HANDLE_OK ? CFBridgingRelease(gp_table_remove(&rt->plans, (uintptr_t)ph)) : nil;
    pthread_mutex_unlock(&rt->mu);
    (void)gone;
    if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_GEMM_PLAN, (uintptr_t)ph);
    return NULL;
  }
}

typedef struct gm_operand {
  GMBuffer *__unsafe_unretained b; /* kept alive by the caller's strong local */
  uint64_t offset;
} gm_operand;

static gpurt_error *gm_gemm_operand(GMRuntime *rt, GMStream *s, const char *name, gpurt_buffer *bh,
                                    uint64_t offset, uint64_t elems, int32_t dtype, gm_operand *out,
                                    id __strong *keep) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->buffers, (uintptr_t)bh, GP_KIND_BUFFER, &o);
  if (e) return gp_err_wrap(e, "gemm_run: operand %s", name);
  GMBuffer *b = o;
  *keep = o;
  if (b->device != s->device->index)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "gemm_run: operand %s: buffer %#llx is on device %u but the stream is on device %u",
                  name, (unsigned long long)(uintptr_t)bh, b->device, s->device->index);
  size_t es = gp_dtype_size(dtype);
  if (offset % es != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "gemm_run: operand %s: offset %llu is not a multiple of the %zu-byte %s element",
                  name, (unsigned long long)offset, es, gp_dtype_name(dtype));
  if (elems > UINT64_MAX / es || offset > b->size || elems * es > b->size - offset)
    return gp_err(GPURT_ERR_OUT_OF_RANGE,
                  "gemm_run: operand %s spans %llu elements (%llu bytes of %s) from offset %llu, "
                  "beyond the buffer of %llu bytes",
                  name, (unsigned long long)elems, (unsigned long long)(elems * es),
                  gp_dtype_name(dtype), (unsigned long long)offset, (unsigned long long)b->size);
  out->b = b;
  out->offset = offset;
  return NULL;
}

/* A row-major MPS view of a column-major operand (rows x cols row-major =
 * the stored matrix transposed), batched when the stride allows, else NULL
 * so the caller loops over the batch. */
static MPSMatrix *gm_view(const gm_operand *o, uint64_t rows, uint64_t cols, uint64_t ld,
                          int64_t stride, uint64_t batch, uint64_t b_index, MPSDataType t,
                          size_t es) {
  NSUInteger row_bytes = (NSUInteger)(ld * es);
  uint64_t off = o->offset + (uint64_t)stride * es * b_index;
  MPSMatrixDescriptor *md;
  if (batch > 1)
    md = [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)rows
                                               columns:(NSUInteger)cols
                                              matrices:(NSUInteger)batch
                                              rowBytes:row_bytes
                                           matrixBytes:(NSUInteger)((uint64_t)stride * es)
                                              dataType:t];
  else
    md = [MPSMatrixDescriptor matrixDescriptorWithRows:(NSUInteger)rows
                                               columns:(NSUInteger)cols
                                              rowBytes:row_bytes
                                              dataType:t];
  return [[MPSMatrix alloc] initWithBuffer:o->b->buf offset:(NSUInteger)off descriptor:md];
}

/* MPS may check rows * rowBytes (full last row) against the buffer, and
 * needs matrixBytes to be a multiple of rowBytes covering a matrix. */
static int gm_mps_fits(const gm_operand *o, uint64_t rows, uint64_t ld, int64_t stride,
                       uint64_t batch, size_t es) {
  uint64_t span = rows * ld * es;
  if (batch > 1) {
    uint64_t sb = (uint64_t)stride * es;
    if (sb == 0 || sb % (ld * es) != 0 || sb < span) return 0;
    span += sb * (batch - 1);
  }
  return o->offset <= o->b->size && span <= o->b->size - o->offset;
}

static void gm_encode_params(id<MTLComputeCommandEncoder> enc, id<MTLComputePipelineState> pso,
                             const gm_gemm_params *prm, uint64_t batch) {
  [enc setComputePipelineState:pso];
  [enc setBytes:prm length:sizeof *prm atIndex:5];
  MTLSize tg = MTLSizeMake(16, 16, 1);
  MTLSize groups = MTLSizeMake((NSUInteger)((prm->m + 15) / 16), (NSUInteger)((prm->n + 15) / 16),
                               (NSUInteger)batch);
  [enc dispatchThreadgroups:groups threadsPerThreadgroup:tg];
  [enc endEncoding];
}

gpurt_error *gm_gemm_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_gemm_plan *ph,
                         const gpurt_gemm_run_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gp_need_stream("gemm_run", sh))) return e;
    id so, po;
    if ((e = gm_lookup(rt, &rt->streams, (uintptr_t)sh, GP_KIND_STREAM, &so))) return e;
    if ((e = gm_lookup(rt, &rt->plans, (uintptr_t)ph, GP_KIND_GEMM_PLAN, &po))) return e;
    GMStream *s = so;
    GMPlan *p = po;
    if ((e = gm_check_lost(s->device))) return e;
    if (p->device != s->device)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "gemm_run: plan %#llx is for device %u but the stream is on device %u",
                    (unsigned long long)(uintptr_t)ph, p->device->index, s->device->index);
    gpurt_gemm_run_args a;
    if ((e = gp_read_struct(&a, sizeof a, args, "gemm run args"))) return e;
    const gpurt_gemm_desc *d = &p->desc;
    if (a.a == NULL || a.b == NULL || a.d == NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: operand %s is NULL",
                    a.a == NULL ? "a" : a.b == NULL ? "b" : "d");
    if (a.c == NULL && a.beta != 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "gemm_run: c is NULL but beta is %g (c may be NULL only when beta is 0)", a.beta);
    int has_bias = d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
                   d->epilogue == GPURT_EPILOGUE_BIAS_GELU;
    if (has_bias && a.bias == NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: the plan's epilogue adds a bias but bias is NULL");
    if (a.scale_a != NULL || a.scale_b != NULL || a.scale_d != NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "gemm_run: scale_%s is set but scales apply to fp8 operands only",
                    a.scale_a != NULL ? "a" : a.scale_b != NULL ? "b" : "d");
    if (isnan(a.alpha) || isnan(a.beta))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: alpha or beta is NaN");

    uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
    uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
    uint64_t batch = d->batch_count;
    gm_operand oa, ob, oc = {nil, 0}, od, obias = {nil, 0};
    id ka, kb, kc, kd, kbias;
    if ((e = gm_gemm_operand(rt, s, "a", a.a, a.a_offset,
                             gp_gemm_extent(ar, ac, d->lda, batch, d->stride_a), d->a_type, &oa, &ka)) ||
        (e = gm_gemm_operand(rt, s, "b", a.b, a.b_offset,
                             gp_gemm_extent(br, bc, d->ldb, batch, d->stride_b), d->b_type, &ob, &kb)) ||
        (a.c != NULL &&
         (e = gm_gemm_operand(rt, s, "c", a.c, a.c_offset,
                              gp_gemm_extent(d->m, d->n, d->ldc, batch, d->stride_c), d->c_type, &oc,
                              &kc))) ||
        (e = gm_gemm_operand(rt, s, "d", a.d, a.d_offset,
                             gp_gemm_extent(d->m, d->n, d->ldd, batch, d->stride_d), d->d_type, &od, &kd)) ||
        (has_bias && (e = gm_gemm_operand(rt, s, "bias", a.bias, a.bias_offset, d->m, d->bias_type,
                                          &obias, &kbias))))
      return e;

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
    prm.alpha = (float)a.alpha;
    prm.beta = (float)a.beta;
    prm.a_type = (uint32_t)d->a_type;
    prm.b_type = (uint32_t)d->b_type;
    prm.c_type = (uint32_t)d->c_type;
    prm.d_type = (uint32_t)d->d_type;
    prm.bias_type = (uint32_t)(has_bias ? d->bias_type : d->d_type);
    prm.trans_a = d->trans_a;
    prm.trans_b = d->trans_b;
    prm.epilogue = (uint32_t)d->epilogue;
    prm.has_c = a.c != NULL && a.beta != 0;

    size_t es = gp_dtype_size(d->d_type);
    int mps = p->use_mps &&
              gm_mps_fits(&ob, d->trans_b ? d->k : d->n, d->ldb, prm.stride_b, batch, es) &&
              gm_mps_fits(&oa, d->trans_a ? d->m : d->k, d->lda, prm.stride_a, batch, es) &&
              gm_mps_fits(&od, d->n, d->ldd, prm.stride_d, batch, es);
    GMDevice *dev = s->device;
    id<MTLBuffer> cbuf = oc.b != nil ? oc.b->buf : od.b->buf; /* every index is bound */
    uint64_t coff = oc.b != nil ? oc.offset : od.offset;
    id<MTLBuffer> biasbuf = obias.b != nil ? obias.b->buf : od.b->buf;
    uint64_t biasoff = obias.b != nil ? obias.offset : od.offset;

    id<MTLComputePipelineState> k_main, k_copy, k_epi;
    if (!mps) {
      if ((e = gm_builtin_pso(dev, @"gpurt_gemm_generic", &k_main))) return e;
    } else {
      if ((e = gm_builtin_pso(dev, @"gpurt_gemm_copy_c", &k_copy))) return e;
      if (d->epilogue != GPURT_EPILOGUE_NONE &&
          (e = gm_builtin_pso(dev, @"gpurt_gemm_epilogue", &k_epi)))
        return e;
    }
    MPSMatrixMultiplication *mm = nil;
    if (mps) {
      pthread_mutex_lock(&p->mu);
      if (p->mps == nil || p->mps_alpha != a.alpha || p->mps_beta != a.beta) {
        p->mps = [[MPSMatrixMultiplication alloc] initWithDevice:dev->dev
                                                   transposeLeft:d->trans_b != 0
                                                  transposeRight:d->trans_a != 0
                                                      resultRows:(NSUInteger)d->n
                                                   resultColumns:(NSUInteger)d->m
                                                 interiorColumns:(NSUInteger)d->k
                                                           alpha:a.alpha
                                                            beta:a.beta];
        p->mps_alpha = a.alpha;
        p->mps_beta = a.beta;
      }
      mm = p->mps;
      pthread_mutex_unlock(&p->mu);
      if (mm == nil) return gp_err(GPURT_ERR_INTERNAL, "gemm_run: MPSMatrixMultiplication failed");
    }

    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    if (!mps) {
      id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
      if (enc == nil) goto no_encoder;
      [enc setBuffer:oa.b->buf offset:(NSUInteger)oa.offset atIndex:0];
      [enc setBuffer:ob.b->buf offset:(NSUInteger)ob.offset atIndex:1];
      [enc setBuffer:cbuf offset:(NSUInteger)coff atIndex:2];
      [enc setBuffer:od.b->buf offset:(NSUInteger)od.offset atIndex:3];
      [enc setBuffer:biasbuf offset:(NSUInteger)biasoff atIndex:4];
      gm_encode_params(enc, k_main, &prm, batch);
    } else {
      /* MPS reads C from D: copy C there (or zero D) unless C is D. */
      int c_is_d = oc.b == od.b && oc.offset == od.offset && d->ldc == d->ldd &&
                   prm.stride_c == prm.stride_d && d->c_type == d->d_type;
      if (!(prm.has_c && c_is_d)) {
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
        if (enc == nil) goto no_encoder;
        [enc setBuffer:cbuf offset:(NSUInteger)coff atIndex:2];
        [enc setBuffer:od.b->buf offset:(NSUInteger)od.offset atIndex:3];
        gm_encode_params(enc, k_copy, &prm, batch);
      }
      MPSDataType t = d->d_type == GPURT_DTYPE_F16 ? MPSDataTypeFloat16 : MPSDataTypeFloat32;
      uint64_t loops = 1, mb = batch;
      /* Batched views need strides that are whole numbers of rows; a
       * broadcast (stride 0) or odd stride loops over the batch instead. */
      if (batch > 1 && !(prm.stride_a > 0 && prm.stride_b > 0 && prm.stride_d > 0)) {
        loops = batch;
        mb = 1;
      }
      for (uint64_t i = 0; i < loops; i++) {
        MPSMatrix *left = gm_view(&ob, d->trans_b ? d->k : d->n, d->trans_b ? d->n : d->k, d->ldb,
                                  prm.stride_b, mb, i, t, es);
        MPSMatrix *right = gm_view(&oa, d->trans_a ? d->m : d->k, d->trans_a ? d->k : d->m, d->lda,
                                   prm.stride_a, mb, i, t, es);
        MPSMatrix *res = gm_view(&od, d->n, d->m, d->ldd, prm.stride_d, mb, i, t, es);
        [mm encodeToCommandBuffer:cb leftMatrix:left rightMatrix:right resultMatrix:res];
      }
      if (d->epilogue != GPURT_EPILOGUE_NONE) {
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
        if (enc == nil) goto no_encoder;
        [enc setBuffer:od.b->buf offset:(NSUInteger)od.offset atIndex:3];
        [enc setBuffer:biasbuf offset:(NSUInteger)biasoff atIndex:4];
        gm_encode_params(enc, k_epi, &prm, batch);
      }
    }
    gm_stream_commit(s, cb, mps ? @"gemm (MPSMatrixMultiplication)" : @"gemm (gpurt_gemm_generic)",
                     nil, 0);
    return NULL;
  no_encoder:
    gm_stream_abort(s);
    return gp_err(GPURT_ERR_INTERNAL, "gemm_run: no compute encoder");
  }
}
