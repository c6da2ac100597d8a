/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_module.c — the mock's built-in module (GPURT_MODULE_BUILTIN only),
 * its kernels (rows of csrc's gp_builtin_kernels, run on the CPU by
 * gp_kernels.c), launch and launch_many with the fail_launch_nth fault.
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

static const char *format_name(int32_t f) {
  switch (f) {
    case GPURT_MODULE_BUILTIN: return "builtin";
    case GPURT_MODULE_PTX: return "ptx";
    case GPURT_MODULE_CUBIN: return "cubin";
    case GPURT_MODULE_FATBIN: return "fatbin";
    case GPURT_MODULE_METALLIB: return "metallib";
    case GPURT_MODULE_METAL_SOURCE: return "metal source";
    default: return "unknown";
  }
}

/* The built-in module has no state: its object is the table itself. */
gpurt_error *mock_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod) {
  (void)ctx;
  (void)dev;
  int nl = a->name && a->name_len ? (int)(a->name_len > 60 ? 60 : a->name_len) : 0;
  if (a->format != GPURT_MODULE_BUILTIN)
    return gp_err(GPURT_ERR_UNSUPPORTED, "module_load: module \"%.*s\": format %d (%s) is not supported by "
                  "the mock; it only has GPURT_MODULE_BUILTIN", nl, nl ? a->name : "", a->format,
                  format_name(a->format));
  *mod = (void *)gp_builtin_kernels;
  return NULL;
}

void mock_module_unload(void *ctx, void *mod) {
  (void)ctx;
  (void)mod;
}

gpurt_error *mock_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                             gpurt_kernel_info *info) {
  (void)ctx;
  (void)mod;
  const gp_builtin_kernel *k = gp_builtin_find(name, (size_t)len);
  if (k == NULL) return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\"", (int)(len > 200 ? 200 : len), name);
  info->num_params = k->num_params;
  info->max_threads_per_block = 1024;
  info->static_shared_bytes = 0;
  for (uint32_t p = 0; p < k->num_params; p++) {
    info->param_kind[p] = k->kinds[p];
    info->param_size[p] = k->sizes[p];
  }
  *kernel = (void *)k;
  return NULL;
}

static gpurt_error *fault_err(const gp_launch_op *l) {
  return gp_err(GPURT_ERR_LAUNCH_FAILED, "launch \"%s\": the kernel failed to start (injected fault: "
                "fail_launch_nth)", l->name);
}

/* The op of one launch: buffer addresses and scalar bits by parameter. */
static gpurt_error *launch_op(const gp_launch_op *l, mock_op **out) {
  gpurt_error *e = mock_op_new("launch", OP_LAUNCH, out);
  if (e) return e;
  gp_launch_exec *x = &(*out)->u.launch;
  x->k = l->kernel;
  memcpy(x->grid, l->grid, sizeof x->grid);
  memcpy(x->block, l->block, sizeof x->block);
  for (uint32_t p = 0; p < l->num_args && p < GP_BK_MAX_PARAMS; p++) {
    if (l->kinds[p] == GPURT_ARG_BUFFER) {
      if (p < 3) x->bufs[p] = mock_ptr(&l->bufs[p]);
    } else {
      x->scalar[p] = l->scalar[p];
    }
  }
  return NULL;
}

gpurt_error *mock_launch(void *ctx, gp_queue *q, const gp_launch_op *l) {
  mock_rt *rt = ctx;
  if (mock_launch_faults(rt, 1) == 0) return fault_err(l);
  mock_op *op = NULL;
  gpurt_error *e = launch_op(l, &op);
  if (e) return e;
  mock_submit(q, op);
  return NULL;
}

/* Every op is made before any is enqueued; the launches the fault lets
 * through are then appended under one hold of the stream's lock. */
gpurt_error *mock_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n, uint64_t *enqueued) {
  mock_rt *rt = ctx;
  *enqueued = 0;
  mock_op **ops = n <= SIZE_MAX / sizeof *ops ? calloc((size_t)n, sizeof *ops) : NULL;
  if (!ops) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch_batch: no memory for %llu items", U(n));
  gpurt_error *e = NULL;
  uint64_t made = 0;
  for (; made < n && !(e = launch_op(&l[made], &ops[made])); made++) {
  }
  if (!e) {
    uint64_t k = mock_launch_faults(rt, n);
    if (k > 0 && !q->capturing) mock_enqueue_many(q->q, ops, k);
    else for (uint64_t i = 0; i < k; i++) mock_submit(q, ops[i]);
    *enqueued = k;
    if (k < n) e = fault_err(&l[k]);
    for (uint64_t i = k; i < n; i++) mock_op_free(rt, ops[i]);
  } else {
    for (uint64_t i = 0; i < made; i++) mock_op_free(rt, ops[i]);
  }
  free(ops);
  return e;
}
