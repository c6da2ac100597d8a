/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_gemm.c — the mock's GEMM runs: csrc/gp_gemm.c's reference GEMM on
 * the stream's worker, over the operands the engine resolved (the scales
 * are read when the run executes, from device memory, as a GPU does).
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* The worker's call: the GEMM, with what the run captured. */
static void gemm_fn(void *x) { gp_gemm_run(x); }

gpurt_error *mock_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r) {
  mock_rt *rt = ctx;
  gp_gemm_exec *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory");
  x->d = r->d;
  x->alpha = r->alpha;
  x->beta = r->beta;
  x->threads = rt->gemm_threads;
  x->a = mock_ptr(&r->a);
  x->b = mock_ptr(&r->b);
  x->c = mock_ptr(&r->c);
  x->dd = mock_ptr(&r->dd);
  x->bias = mock_ptr(&r->bias);
  x->scale_ptr_a = mock_ptr(&r->scale_a);
  x->scale_ptr_b = mock_ptr(&r->scale_b);
  x->scale_ptr_d = mock_ptr(&r->scale_d);
  x->norm_w = mock_ptr(&r->norm_weight);
  x->norm_eps = r->norm_eps;
  return mock_submit_fn(q, "gemm_run", gemm_fn, free, x);
}
