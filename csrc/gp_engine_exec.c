/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_exec.c — the engine's modules, kernels, launch, launch_batch
 * and GEMM: handles, the contract's checks (gp_contract.c), the launch
 * limits open reported, and every operand resolved before the backend's
 * launch / gemm_run sees it.
 */
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

/* ---- modules and kernels ---------------------------------------------------------- */

/* A module loaded but not in the table yet. */
static void module_undo(gp_rt *rt, void *o) {
  gp_module *m = o;
  gp_eb->module_unload(rt->ctx, m->mod);
  free(m);
}

gpurt_error *gp_e_module_load(gpurt_runtime *h, const gpurt_module_load_args *args, gpurt_module **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "module_load");
  gpurt_module_load_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "module_load: args"))) return e;
  if ((e = gp_check_dev(rt, a.device, "module_load"))) return e;
  gp_module *m = calloc(1, sizeof *m);
  if (!m) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: no memory");
  if ((e = gp_eb->module_load(rt->ctx, a.device, &a, &m->mod))) {
    free(m);
    return e;
  }
  m->dev = a.device;
  m->format = a.format;
  int nl = a.name && a.name_len ? (int)(a.name_len > 60 ? 60 : a.name_len) : 0;
  if (nl) memcpy(m->name, a.name, (size_t)nl);
  else gp_strlcpy(m->name, sizeof m->name, a.format == GPURT_MODULE_BUILTIN ? "builtin" : "module");
  GP_RETURN_INSERTED(&rt->modules, m, "module_load", module_undo, out);
}

/* Frees a module taken out of its table and its kernels (rt->mu held). */
static void module_drop_kernels_locked(gp_rt *rt, gp_module *m) {
  for (uint32_t i = 0; i < m->nkernels; i++) free(gp_table_remove(&rt->kernels, m->kernels[i]));
  m->nkernels = 0;
}

void gp_module_free(gp_rt *rt, gp_module *m) {
  if (m == NULL) return;
  gp_eb->module_unload(rt->ctx, m->mod);
  free(m->kernels);
  free(m);
}

gpurt_error *gp_e_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  if (mh == NULL) return NULL;
  GP_RT_OR_RETURN(h);
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_take(&rt->modules, (uintptr_t)mh, &o);
  if (st == GP_HANDLE_OK) module_drop_kernels_locked(rt, o);
  pthread_mutex_unlock(&rt->mu);
  if (st == GP_HANDLE_OK) atomic_fetch_add(&rt->destroys, 1);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  gp_module_free(rt, o);
  return NULL;
}

gpurt_error *gp_e_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name, uint64_t name_len,
                             gpurt_kernel **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "kernel_get");
  if (name == NULL && name_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: name is NULL with name_len %llu", U(name_len));
  gp_module *m;
  if ((e = gp_lookup(rt, &rt->modules, mh, (void **)&m))) return e;
  const gp_builtin_kernel *bk = NULL;
  if (m->format == GPURT_MODULE_BUILTIN) {
    bk = gp_builtin_find(name ? name : "", (size_t)name_len);
    if (bk == NULL) {
      int nl = (int)(name_len > 200 ? 200 : name_len);
      return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl, nl ? name : "",
                    m->name);
    }
    /* One handle per built-in of a module: the same name gives the same kernel. */
    uintptr_t found = 0;
    pthread_mutex_lock(&rt->mu);
    for (uint32_t i = 0; i < m->nkernels && !found; i++) {
      void *o;
      if (gp_table_lookup(&rt->kernels, m->kernels[i], &o) == GP_HANDLE_OK && ((gp_kernel *)o)->builtin == bk)
        found = m->kernels[i];
    }
    pthread_mutex_unlock(&rt->mu);
    if (found) {
      *out = (gpurt_kernel *)found;
      return NULL;
    }
  }
  gp_kernel *k = calloc(1, sizeof *k);
  if (!k) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: no memory");
  k->info.struct_size = sizeof k->info;
  if ((e = gp_eb->kernel_get(rt->ctx, m->mod, name ? name : "", name_len, &k->k, &k->info))) {
    free(k);
    return e;
  }
  k->dev = m->dev;
  k->module = (uintptr_t)mh;
  k->builtin = bk;
  int nl = (int)(name_len >= sizeof k->name ? sizeof k->name - 1 : name_len);
  if (nl) memcpy(k->name, name, (size_t)nl);
  uintptr_t hk = 0;
  pthread_mutex_lock(&rt->mu);
  void *o;
  int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o); /* unloaded meanwhile? */
  int r = -1;
  if (st == GP_HANDLE_OK && m->nkernels == m->capk) {
    uint32_t nc = m->capk ? 2 * m->capk : 8;
    uintptr_t *nk = realloc(m->kernels, nc * sizeof *nk);
    if (nk) {
      m->kernels = nk;
      m->capk = nc;
    }
  }
  if (st == GP_HANDLE_OK && m->nkernels < m->capk && (r = gp_table_insert(&rt->kernels, k, &hk)) == 0)
    m->kernels[m->nkernels++] = hk;
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) {
    free(k);
    return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  }
  if (r != 0) {
    free(k);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: no memory");
  }
  *out = (gpurt_kernel *)hk;
  return NULL;
}

gpurt_error *gp_e_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  GP_RT_OR_RETURN(h);
  gp_kernel *k;
  if ((e = gp_lookup(rt, &rt->kernels, kh, (void **)&k))) return e;
  /* A lost device refuses this too (its backend is asked: the loss may
   * not have been seen yet). */
  if ((e = gp_after_wait(rt, "kernel_info", k->dev))) return e;
  if ((e = gp_check_out(out, "kernel_info: out"))) return e;
  gpurt_kernel_info i = k->info;
  if (i.num_params == GP_PARAMS_UNKNOWN) i.num_params = 0;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* ---- launch ------------------------------------------------------------------------ */

gpurt_error *gp_launch_resolve(gp_rt *rt, gp_stream *s, gpurt_kernel *kh, const gpurt_launch_args *args,
                               gp_launch_op *out) {
  gpurt_error *e;
  gp_kernel *k;
  if ((e = gp_lookup(rt, &rt->kernels, kh, (void **)&k))) return e;
  uint32_t dev = s->q.dev;
  if (gp_is_lost(rt, dev)) return gp_lost_err(rt, "launch", dev);
  const char *name = k->name;
  if (k->dev != dev) return gp_launch_device_error(name, k->dev, dev);
  gpurt_launch_args a;
  if ((e = gp_launch_read(args, &a))) return e;
  const gpurt_kernel_info *ki = &k->info;
  if ((e = gp_launch_check(name, &a, ki->num_params, ki->num_params == GP_PARAMS_UNKNOWN ? NULL : ki->param_kind,
                           ki->num_params == GP_PARAMS_UNKNOWN ? NULL : ki->param_size, 0)))
    return e;
  const gp_limits *lim = &rt->lim;
  uint64_t threads = (uint64_t)a.block[0] * a.block[1] * a.block[2];
  if (threads > lim->max_threads || a.block[2] > lim->max_block_z)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": block (%u,%u,%u) has %llu threads (max %u, z max %u)",
                  name, a.block[0], a.block[1], a.block[2], U(threads), lim->max_threads, lim->max_block_z);
  if (a.grid[0] > lim->max_grid[0] || a.grid[1] > lim->max_grid[1] || a.grid[2] > lim->max_grid[2])
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": grid (%u,%u,%u) is too large (x max 2^31-1, y and z "
                  "max 65535)", name, a.grid[0], a.grid[1], a.grid[2]);
  if (a.shared_mem_bytes > lim->max_shared)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": %u bytes of dynamic shared memory (max %u)", name,
                  a.shared_mem_bytes, lim->max_shared);
  memset(out, 0, offsetof(gp_launch_op, bufs));
  out->kernel = k->k;
  out->builtin = k->builtin;
  out->name = name;
  memcpy(out->grid, a.grid, sizeof out->grid);
  memcpy(out->block, a.block, sizeof out->block);
  out->shared_bytes = a.shared_mem_bytes;
  out->num_args = a.num_args;
  uint64_t view[GPURT_MAX_KERNEL_PARAMS];
  for (uint32_t p = 0; p < a.num_args; p++) {
    const gpurt_kernel_arg *g = &a.args[p];
    out->kinds[p] = g->kind;
    out->sizes[p] = g->size;
    view[p] = 0;
    if (g->kind == GPURT_ARG_BUFFER) {
      gp_buf *b;
      if ((e = gp_buf_get(rt, g->buffer, &b))) return gp_err_wrap(e, "launch \"%s\": argument %u", name, p);
      if (b->m.dev != dev) return gp_launch_arg_device_error(name, p, b->m.dev, dev);
      if ((e = gp_launch_view(name, p, b->m.size, g->offset, g->length, &view[p]))) return e;
      gp_mem_at(b, g->offset, &out->bufs[p]);
      out->scalar[p] = 0;
    } else {
      uint64_t v = g->value;
      if (g->size < 8) v &= (1ull << (8 * g->size)) - 1;
      out->scalar[p] = v;
      memset(&out->bufs[p], 0, sizeof out->bufs[p]);
    }
  }
  if (k->builtin && (e = gp_builtin_check_views(k->builtin, &a, view))) return e;
  return NULL;
}

gpurt_error *gp_e_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh, const gpurt_launch_args *args) {
  GP_RT_OR_RETURN(h);
  if ((e = gp_need_stream("launch", sh))) return e;
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  gp_launch_op op;
  if ((e = gp_launch_resolve(rt, s, kh, args, &op))) return e;
  return gp_eb->launch(rt->ctx, &s->q, &op);
}

/* Items resolved on the stack at a time (a gp_launch_op is ~1.8 KB): a
 * decode step's batch fits in one; a larger batch is checked whole first,
 * then resolved and enqueued a chunk at a time. No allocation either way. */
#define GP_BATCH_CHUNK 16

/* Enqueues ops[0..n) on s (launch_many, or one by one); *done counts them. */
static gpurt_error *enqueue_ops(gp_rt *rt, gp_stream *s, const gp_launch_op *ops, uint64_t n, uint64_t *done) {
  if (gp_eb->launch_many) return gp_eb->launch_many(rt->ctx, &s->q, ops, n, done);
  gpurt_error *e = NULL;
  for (*done = 0; *done < n && !(e = gp_eb->launch(rt->ctx, &s->q, &ops[*done])); (*done)++) {
  }
  return e;
}

/* Every item is checked and resolved before any is enqueued, so a bad item
 * enqueues nothing; the backend then enqueues them in one go (launch_many)
 * or one by one, a chunk at a time. */
gpurt_error *gp_e_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count, const gpurt_launch_item *items,
                               uint64_t *out_enqueued) {
  if (out_enqueued) *out_enqueued = 0;
  GP_RT_OR_RETURN(h);
  if (count == 0) return NULL;
  if ((e = gp_launch_batch_check(sh, count, items))) return e;
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "launch_batch", s->q.dev);
  gp_launch_op ops[GP_BATCH_CHUNK];
  if (count > GP_BATCH_CHUNK) /* check all first: the chunks below enqueue as they go */
    for (uint64_t i = 0; i < count; i++)
      if ((e = gp_launch_resolve(rt, s, items[i].kernel, items[i].args, &ops[0]))) return gp_batch_item_error(e, i);
  uint64_t n = 0;
  while (n < count && !e) {
    uint64_t k = count - n < GP_BATCH_CHUNK ? count - n : GP_BATCH_CHUNK, done = 0;
    for (uint64_t i = 0; i < k; i++)
      if ((e = gp_launch_resolve(rt, s, items[n + i].kernel, items[n + i].args, &ops[i]))) {
        if (n == 0) return gp_batch_item_error(e, i); /* nothing enqueued yet */
        /* Changed since the check (a handle destroyed during the call) */
        if (out_enqueued) *out_enqueued = n;
        return gp_err_append(gp_batch_item_error(e, n + i), "; items 0..%llu stay enqueued", U(n - 1));
      }
    e = enqueue_ops(rt, s, ops, k, &done);
    n += done;
  }
  if (out_enqueued) *out_enqueued = n;
  if (e) return gp_batch_midway_error(e, n);
  return NULL;
}

/* ---- GEMM ------------------------------------------------------------------------------ */

static void plan_drop(gp_rt *rt, void *o) {
  gp_plan *p = o;
  if (gp_eb->gemm_plan_free) gp_eb->gemm_plan_free(rt->ctx, p->plan);
  free(p);
}

gpurt_error *gp_e_gemm_plan_create(gpurt_runtime *h, uint32_t d, const gpurt_gemm_desc *desc,
                                   gpurt_gemm_plan **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "gemm_plan_create");
  if ((e = gp_check_dev(rt, d, "gemm_plan_create"))) return e;
  gp_plan *p = calloc(1, sizeof *p);
  if (!p) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_plan_create: no memory");
  if ((e = gp_read_struct(&p->desc, sizeof p->desc, desc, "gemm_plan_create: desc")) ||
      (e = gp_gemm_validate(&p->desc)) ||
      (gp_eb->gemm_plan && (e = gp_eb->gemm_plan(rt->ctx, d, &p->desc, &p->plan)))) {
    free(p);
    return e;
  }
  p->dev = d;
  GP_RETURN_INSERTED(&rt->plans, p, "gemm_plan_create", plan_drop, out);
}

gpurt_error *gp_e_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *ph) {
  return gp_destroy(h, offsetof(gp_rt, plans), ph, NULL, plan_drop);
}

gpurt_error *gp_gemm_on(gp_rt *rt, gp_stream *s, gpurt_gemm_plan *ph, const gpurt_gemm_run_args *args, int run) {
  gpurt_error *e;
  gp_plan *p;
  uint32_t dev = s->q.dev;
  if ((e = gp_lookup(rt, &rt->plans, ph, (void **)&p))) return e;
  if (gp_is_lost(rt, dev)) return gp_lost_err(rt, "gemm_run", dev);
  if (p->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: plan %#llx is for device %u but the stream is on "
                  "device %u", H(ph), p->dev, dev);
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
  const int norm = d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM;
  if (norm && a.norm_weight == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: the plan's rmsnorm prologue needs norm_weight (k = %llu "
                  "elements of %s) but it is NULL", (unsigned long long)d->k, gp_dtype_name(d->b_type));
  if (!norm && (a.norm_weight != NULL || a.norm_eps != 0.0))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: norm_%s is set but the plan has no rmsnorm prologue",
                  a.norm_weight != NULL ? "weight" : "eps");
  if (norm && !(a.norm_eps >= 0.0 && a.norm_eps <= 3.4028234663852886e38)) /* an f32's range */
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: norm_eps %g is not a finite f32 value >= 0", a.norm_eps);
  if (norm && a.norm_weight_offset % 16)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: norm_weight_offset %llu is not a multiple of 16 (the norm "
                  "weight must be 16-byte aligned)", (unsigned long long)a.norm_weight_offset);
  gp_gemm_op r;
  memset(&r, 0, sizeof r);
  r.plan = p->plan;
  r.d = *d;
  r.alpha = a.alpha;
  r.beta = a.beta;
  const char *w = "gemm_run";
  uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
  uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
  int g = GP_VIEW_GEMM;
  if ((e = gp_view(rt, g, dev, w, "a", a.a, a.a_offset, gp_gemm_extent(ar, ac, d->lda, d->batch_count, d->stride_a),
                   d->a_type, &r.a)) ||
      (e = gp_view(rt, g, dev, w, "b", a.b, a.b_offset,
                   d->prologue == GPURT_GEMM_PROLOGUE_SWIGLU /* G then U, ldb * n apart */
                       ? gp_gemm_extent(br, bc > UINT64_MAX / 2 ? UINT64_MAX : 2 * bc, d->ldb, 1, 0)
                       : gp_gemm_extent(br, bc, d->ldb, d->batch_count, d->stride_b),
                   d->b_type, &r.b)) ||
      (norm && (e = gp_view(rt, g, dev, w, "norm_weight", a.norm_weight, a.norm_weight_offset, d->k, d->b_type,
                            &r.norm_weight))) ||
      (a.c && (e = gp_view(rt, g, dev, w, "c", a.c, a.c_offset,
                           gp_gemm_extent(d->m, d->n, d->ldc, d->batch_count, d->stride_c), d->c_type, &r.c))) ||
      (e = gp_view(rt, g, dev, w, "d", a.d, a.d_offset, gp_gemm_extent(d->m, d->n, d->ldd, d->batch_count, d->stride_d),
                   d->d_type, &r.dd)) ||
      (has_bias && (e = gp_view(rt, g, dev, w, "bias", a.bias, a.bias_offset, d->m, d->bias_type, &r.bias))) ||
      (a.scale_a && (e = gp_view(rt, g, dev, w, "scale_a", a.scale_a, a.scale_a_offset, 1, GPURT_DTYPE_F32, &r.scale_a))) ||
      (a.scale_b && (e = gp_view(rt, g, dev, w, "scale_b", a.scale_b, a.scale_b_offset, 1, GPURT_DTYPE_F32, &r.scale_b))) ||
      (a.scale_d && (e = gp_view(rt, g, dev, w, "scale_d", a.scale_d, a.scale_d_offset, 1, GPURT_DTYPE_F32, &r.scale_d))) ||
      (a.workspace && (e = gp_view(rt, g, dev, w, "workspace", a.workspace, a.workspace_offset, a.workspace_size,
                                   GPURT_DTYPE_U8, &r.workspace))))
    return e;
  r.workspace_size = a.workspace ? a.workspace_size : 0;
  r.norm_eps = a.norm_eps;
  if (!run) return NULL;
  return gp_eb->gemm_run(rt->ctx, &s->q, &r);
}

gpurt_error *gp_e_gemm_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_gemm_plan *ph,
                           const gpurt_gemm_run_args *args) {
  GP_RT_OR_RETURN(h);
  if ((e = gp_need_stream("gemm_run", sh))) return e;
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  return gp_gemm_on(rt, s, ph, args, 1);
}
