/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_gemm.c — the mock plugin's GEMM plans and runs (csrc/gp_gemm.c does the math).
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* ------------------------------------------------------------------ */
/* GEMM (1.1)                                                          */
/* ------------------------------------------------------------------ */

gpurt_error *m_gemm_plan_create(gpurt_runtime *h, uint32_t d, const gpurt_gemm_desc *desc,
                                gpurt_gemm_plan **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_plan_create: out is NULL");
  *out = NULL;
  if ((e = mock_check_dev(rt, d, "gemm_plan_create"))) return e;
  gpurt_gemm_desc g;
  if ((e = gp_read_struct(&g, sizeof g, desc, "gemm_plan_create: desc"))) return e;
  if ((e = gp_gemm_validate(&g))) return e;
  mock_plan *p = calloc(1, sizeof *p);
  if (!p) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_plan_create: no memory");
  p->dev = d;
  p->desc = g;
  uintptr_t hp;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->plans, p, &hp);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(p);
    return gp_table_full_error("gemm_plan_create", GP_KIND_GEMM_PLAN);
  }
  *out = (gpurt_gemm_plan *)hp;
  return NULL;
}

gpurt_error *m_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *ph) {
  if (ph == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_take(&rt->plans, (uintptr_t)ph, &o);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_GEMM_PLAN, (uintptr_t)ph);
  free(o);
  return NULL;
}

/* Resolves one gemm operand: valid buffer on the stream's device, its
 * extent (elements of dtype) inside the buffer from offset. */
static gpurt_error *gemm_operand(mock_rt *rt, mock_stream *s, const char *name, gpurt_buffer *bh, uint64_t off,
                                 uint64_t elems, int32_t dtype, void **out) {
  mock_buf *b;
  gpurt_error *e = mock_lookup(rt, &rt->bufs, bh, (void **)&b);
  if (e) return gp_err_wrap(e, "gemm_run: operand %s", name);
  if (b->dev != s->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: operand %s: buffer %#llx is on device %u but the "
                  "stream is on device %u", name, H(bh), b->dev, s->dev);
  size_t es = gp_dtype_size(dtype);
  uint64_t bytes = elems * es;
  if (elems != 0 && bytes / es != elems) bytes = UINT64_MAX;
  if (!gp_in_range(b->size, off, bytes))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "gemm_run: operand %s spans %llu elements (%llu bytes of %s) from "
                  "offset %llu, beyond buffer %#llx of %llu bytes", name, U(elems), U(bytes),
                  gp_dtype_name(dtype), U(off), H(bh), U(b->size));
  *out = b->data + off;
  return NULL;
}

gpurt_error *mock_gemm_prepare(mock_rt *rt, mock_stream *s, gpurt_gemm_plan *ph, const gpurt_gemm_run_args *args,
                               gp_gemm_exec **out) {
  gpurt_error *e;
  mock_plan *p;
  if ((e = mock_lookup(rt, &rt->plans, ph, (void **)&p))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("gemm_run", s->dev);
  if (p->dev != s->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: plan %#llx is for device %u but the stream is on "
                  "device %u", H(ph), p->dev, s->dev);
  gpurt_gemm_run_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "gemm_run: args"))) return e;
  const gpurt_gemm_desc *d = &p->desc;
  if (a.a == NULL || a.b == NULL || a.d == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: operand %s is NULL", a.a == NULL ? "a" : a.b == NULL ? "b" : "d");
  if (a.c == NULL && a.beta != 0.0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: c is NULL but beta is %g (c may be NULL only when beta "
                  "is 0)", a.beta);
  int has_bias = d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
                 d->epilogue == GPURT_EPILOGUE_BIAS_GELU;
  if (has_bias && a.bias == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: the plan's epilogue adds a bias but bias is NULL");
  int fp8 = d->a_type == GPURT_DTYPE_FP8_E4M3 || d->a_type == GPURT_DTYPE_FP8_E5M2;
  if (!fp8 && (a.scale_a || a.scale_b || a.scale_d))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: scale_%s is set but scales apply to fp8 operands only",
                  a.scale_a ? "a" : a.scale_b ? "b" : "d");
  if (a.scale_d && d->d_type != GPURT_DTYPE_FP8_E4M3 && d->d_type != GPURT_DTYPE_FP8_E5M2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: scale_d is set but D is %s: scale_d quantises an fp8 D only",
                  gp_dtype_name(d->d_type));
  if (!(a.alpha == a.alpha) || !(a.beta == a.beta))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: alpha or beta is NaN");

  gp_gemm_exec *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory");
  x->d = *d;
  x->alpha = a.alpha;
  x->beta = a.beta;
  x->threads = rt->gemm_threads;
  uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
  uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
  void *pa, *pb, *pc = NULL, *pd, *pbias = NULL, *psa = NULL, *psb = NULL, *psd = NULL;
  if ((e = gemm_operand(rt, s, "a", a.a, a.a_offset, gp_gemm_extent(ar, ac, d->lda, d->batch_count, d->stride_a),
                        d->a_type, &pa)) ||
      (e = gemm_operand(rt, s, "b", a.b, a.b_offset, gp_gemm_extent(br, bc, d->ldb, d->batch_count, d->stride_b),
                        d->b_type, &pb)) ||
      (a.c && (e = gemm_operand(rt, s, "c", a.c, a.c_offset,
                                gp_gemm_extent(d->m, d->n, d->ldc, d->batch_count, d->stride_c), d->c_type, &pc))) ||
      (e = gemm_operand(rt, s, "d", a.d, a.d_offset, gp_gemm_extent(d->m, d->n, d->ldd, d->batch_count, d->stride_d),
                        d->d_type, &pd)) ||
      (has_bias && (e = gemm_operand(rt, s, "bias", a.bias, a.bias_offset, d->m, d->bias_type, &pbias))) ||
      (a.scale_a && (e = gemm_operand(rt, s, "scale_a", a.scale_a, a.scale_a_offset, 1, GPURT_DTYPE_F32, &psa))) ||
      (a.scale_b && (e = gemm_operand(rt, s, "scale_b", a.scale_b, a.scale_b_offset, 1, GPURT_DTYPE_F32, &psb))) ||
      (a.scale_d && (e = gemm_operand(rt, s, "scale_d", a.scale_d, a.scale_d_offset, 1, GPURT_DTYPE_F32, &psd)))) {
    free(x);
    return e;
  }
  if (a.workspace) {
    void *pw;
    if ((e = gemm_operand(rt, s, "workspace", a.workspace, a.workspace_offset, a.workspace_size, GPURT_DTYPE_U8,
                          &pw))) {
      free(x);
      return e;
    }
  }
  x->a = pa;
  x->b = pb;
  x->c = pc;
  x->dd = pd;
  x->bias = pbias;
  /* Scales live in device memory; read them when the run executes. */
  x->scale_ptr_a = psa;
  x->scale_ptr_b = psb;
  x->scale_ptr_d = psd;
  *out = x;
  return NULL;
}

gpurt_error *m_gemm_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_gemm_plan *ph,
                        const gpurt_gemm_run_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if ((e = gp_need_stream("gemm_run", sh))) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  gp_gemm_exec *x;
  if ((e = mock_gemm_prepare(rt, s, ph, args, &x))) return e;
  mock_op *op = calloc(1, sizeof *op);
  if (!op) {
    free(x);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory");
  }
  op->kind = OP_GEMM;
  op->u.gemm = x;
  mock_submit(s, op);
  return NULL;
}
