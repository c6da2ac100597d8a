/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_module.c — the mock plugin's modules (BUILTIN), kernels, launch and launch_batch.
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* ------------------------------------------------------------------ */
/* Modules, kernels, launch                                            */
/* ------------------------------------------------------------------ */

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

gpurt_error *m_module_load(gpurt_runtime *h, const gpurt_module_load_args *args, gpurt_module **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: out is NULL");
  *out = NULL;
  gpurt_module_load_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "module_load: args"))) return e;
  if ((e = mock_check_dev(rt, a.device, "module_load"))) return e;
  int nl = a.name && a.name_len ? (int)(a.name_len > 60 ? 60 : a.name_len) : 0;
  if (a.format != GPURT_MODULE_BUILTIN)
    return gp_err(GPURT_ERR_UNSUPPORTED, "module_load: module \"%.*s\": format %d (%s) is not supported by "
                  "the mock; it only has GPURT_MODULE_BUILTIN", nl, nl ? a.name : "", a.format,
                  format_name(a.format));
  mock_module *m = calloc(1, sizeof *m);
  uintptr_t *ks = calloc(gp_builtin_kernel_count, sizeof *ks);
  if (!m || !ks) {
    free(m);
    free(ks);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: no memory");
  }
  m->dev = a.device;
  m->kernels = ks;
  if (nl) memcpy(m->name, a.name, (size_t)nl);
  else gp_strlcpy(m->name, sizeof m->name, "builtin");
  uintptr_t hm;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->modules, m, &hm);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(ks);
    free(m);
    return gp_table_full_error("module_load", GP_KIND_MODULE);
  }
  *out = (gpurt_module *)hm;
  return NULL;
}

gpurt_error *m_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  if (mh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o);
  if (st == GP_HANDLE_OK) {
    mock_module *m = o;
    gp_table_remove(&rt->modules, (uintptr_t)mh);
    for (size_t i = 0; i < gp_builtin_kernel_count; i++)
      if (m->kernels[i]) free(gp_table_remove(&rt->kernels, m->kernels[i]));
  }
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  mock_module *m = o;
  free(m->kernels);
  free(m);
  return NULL;
}

gpurt_error *m_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name, uint64_t name_len,
                          gpurt_kernel **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: out is NULL");
  *out = NULL;
  if (name == NULL && name_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: name is NULL with name_len %llu", U(name_len));
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o);
  if (st != GP_HANDLE_OK) {
    pthread_mutex_unlock(&rt->mu);
    return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  }
  mock_module *m = o;
  const gp_builtin_kernel *k = gp_builtin_find(name ? name : "", (size_t)name_len);
  if (k == NULL) {
    pthread_mutex_unlock(&rt->mu);
    int nl = (int)(name_len > 200 ? 200 : name_len);
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl,
                  nl ? name : "", m->name);
  }
  size_t idx = (size_t)(k - gp_builtin_kernels);
  uintptr_t hk = m->kernels[idx];
  if (hk == 0) {
    mock_kernel *mk = calloc(1, sizeof *mk);
    if (mk) {
      mk->dev = m->dev;
      mk->k = k;
      if (gp_table_insert(&rt->kernels, mk, &hk) != 0) {
        free(mk);
        hk = 0;
      }
    }
    m->kernels[idx] = hk;
  }
  pthread_mutex_unlock(&rt->mu);
  if (hk == 0) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: no memory");
  *out = (gpurt_kernel *)hk;
  return NULL;
}

gpurt_error *m_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_kernel *mk;
  if ((e = mock_lookup(rt, &rt->kernels, kh, (void **)&mk))) return e;
  if ((e = gp_check_out(out, "kernel_info: out"))) return e;
  gpurt_kernel_info i;
  memset(&i, 0, sizeof i);
  i.num_params = mk->k->num_params;
  i.max_threads_per_block = 1024;
  i.static_shared_bytes = 0;
  for (uint32_t p = 0; p < mk->k->num_params; p++) {
    i.param_kind[p] = mk->k->kinds[p];
    i.param_size[p] = mk->k->sizes[p];
  }
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* Checks one launch against the kernel's parameters and the stream as
 * launch does, and resolves it into *out (enqueues nothing). The checks
 * every plugin makes are csrc's (gp_launch_check and friends); the device
 * limits after them are the mock's. */
gpurt_error *mock_launch_prepare(mock_rt *rt, mock_stream *s, gpurt_kernel *kh, const gpurt_launch_args *args,
                                 gp_launch_exec *out) {
  gpurt_error *e;
  mock_kernel *mk;
  if ((e = mock_lookup(rt, &rt->kernels, kh, (void **)&mk))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("launch", s->dev);
  const gp_builtin_kernel *k = mk->k;
  if (mk->dev != s->dev) return gp_launch_device_error(k->name, mk->dev, s->dev);
  gpurt_launch_args a;
  if ((e = gp_launch_read(args, &a))) return e;
  if ((e = gp_launch_check(k->name, &a, k->num_params, k->kinds, k->sizes, 0))) return e;
  uint64_t threads = (uint64_t)a.block[0] * a.block[1] * a.block[2];
  if (threads > 1024 || a.block[2] > 64)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": block (%u,%u,%u) has %llu threads (max 1024, z max 64)",
                  k->name, a.block[0], a.block[1], a.block[2], U(threads));
  if (a.grid[0] > 0x7fffffffu || a.grid[1] > 65535 || a.grid[2] > 65535)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": grid (%u,%u,%u) is too large (x max 2^31-1, y and z "
                  "max 65535)", k->name, a.grid[0], a.grid[1], a.grid[2]);
  if (a.shared_mem_bytes > MOCK_MAX_SHARED)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": %u bytes of dynamic shared memory (max %u)", k->name,
                  a.shared_mem_bytes, MOCK_MAX_SHARED);

  gp_launch_exec x;
  memset(&x, 0, sizeof x);
  x.k = k;
  memcpy(x.grid, a.grid, sizeof x.grid);
  memcpy(x.block, a.block, sizeof x.block);
  uint64_t view[GP_BK_MAX_PARAMS] = {0};
  for (uint32_t p = 0; p < a.num_args; p++) {
    const gpurt_kernel_arg *g = &a.args[p];
    if (g->kind == GPURT_ARG_BUFFER) {
      mock_buf *b;
      if ((e = mock_lookup(rt, &rt->bufs, g->buffer, (void **)&b)))
        return gp_err_wrap(e, "launch \"%s\": argument %u", k->name, p);
      if (b->dev != s->dev) return gp_launch_arg_device_error(k->name, p, b->dev, s->dev);
      if ((e = gp_launch_view(k->name, p, b->size, g->offset, g->length, &view[p]))) return e;
      x.bufs[p] = b->data + g->offset;
    } else {
      uint64_t v = g->value;
      if (g->size < 8) v &= (1ull << (8 * g->size)) - 1;
      x.scalar[p] = v;
    }
  }
  if ((e = gp_builtin_check_views(k, &a, view))) return e;
  *out = x;
  return NULL;
}

/* Counts n launches against fail_launch_nth (one lock hold); returns the
 * index of the launch the fault refuses, or n when none is refused. */
uint64_t mock_launch_faults(mock_rt *rt, uint64_t n) {
  pthread_mutex_lock(&rt->mu);
  uint64_t at = gp_fault_launches(&rt->fail_launch_nth, n);
  pthread_mutex_unlock(&rt->mu);
  return at;
}

gpurt_error *mock_launch_fault_err(const gp_launch_exec *x) {
  return gp_err(GPURT_ERR_LAUNCH_FAILED, "launch \"%s\": the kernel failed to start (injected fault: "
                "fail_launch_nth)", x->k->name);
}

gpurt_error *m_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh, const gpurt_launch_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if ((e = gp_need_stream("launch", sh))) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  gp_launch_exec x;
  if ((e = mock_launch_prepare(rt, s, kh, args, &x))) return e;
  if (mock_launch_faults(rt, 1) == 0) return mock_launch_fault_err(&x);
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch: no memory");
  op->kind = OP_LAUNCH;
  op->u.launch = x;
  mock_submit(s, op);
  return NULL;
}

static void free_ops(mock_rt *rt, mock_op **ops, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) mock_op_free(rt, ops[i]);
}

/* Every item is checked (launch_prepare) and given its op before any is
 * enqueued, so a bad item or no memory enqueues nothing; the launches the
 * fault injection lets through are then appended under one hold of the
 * stream's lock. */
gpurt_error *m_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count, const gpurt_launch_item *items,
                            uint64_t *out_enqueued) {
  if (out_enqueued) *out_enqueued = 0;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (count == 0) return NULL;
  if ((e = gp_launch_batch_check(sh, count, items))) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("launch_batch", s->dev);
  mock_op **ops = count <= SIZE_MAX / sizeof *ops ? calloc((size_t)count, sizeof *ops) : NULL;
  if (!ops) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch_batch: no memory for %llu items", U(count));
  for (uint64_t i = 0; i < count; i++) {
    gp_launch_exec x;
    if ((e = mock_launch_prepare(rt, s, items[i].kernel, items[i].args, &x))) {
      free_ops(rt, ops, 0, i);
      free(ops);
      return gp_batch_item_error(e, i);
    }
    if (!(ops[i] = calloc(1, sizeof *ops[i]))) {
      free_ops(rt, ops, 0, i);
      free(ops);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch_batch: item %llu: no memory", U(i));
    }
    ops[i]->kind = OP_LAUNCH;
    ops[i]->u.launch = x;
  }
  uint64_t n = mock_launch_faults(rt, count);
  if (n > 0) mock_enqueue_many(s, ops, n);
  if (out_enqueued) *out_enqueued = n;
  if (n < count) {
    e = gp_batch_midway_error(mock_launch_fault_err(&ops[n]->u.launch), n);
    free_ops(rt, ops, n, count);
  }
  free(ops);
  return e;
}
