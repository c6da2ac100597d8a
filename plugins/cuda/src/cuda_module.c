/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_module.c — modules (BUILTIN, PTX, CUBIN, FATBIN), kernels, and launch /
 * launch_batch (resolve, validate, pack, enqueue) on the CUDA driver API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- modules and kernels ---------------------------------------------------------------- */

static const char *cu_format_name(int32_t f) {
  switch (f) {
    case GPURT_MODULE_BUILTIN: return "builtin";
    case GPURT_MODULE_PTX: return "PTX";
    case GPURT_MODULE_CUBIN: return "cubin";
    case GPURT_MODULE_FATBIN: return "fatbin";
    case GPURT_MODULE_METALLIB: return "metallib";
    case GPURT_MODULE_METAL_SOURCE: return "Metal source";
    default: return "unknown";
  }
}

gpurt_error *cu_module_load(gpurt_runtime *h, const gpurt_module_load_args *args,
                            gpurt_module **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "module_load", &e);
  if (!rt) return e;
  *out = NULL;
  gpurt_module_load_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "module load args"))) return e;
  char name[CU_NAME_CAP] = "";
  if (a.name != NULL && a.name_len > 0) {
    size_t n = a.name_len < sizeof name - 1 ? (size_t)a.name_len : sizeof name - 1;
    memcpy(name, a.name, n);
    name[n] = 0;
  }
  const void *image = NULL;
  void *copy = NULL;
  switch (a.format) {
    case GPURT_MODULE_BUILTIN:
      image = gpurt_cuda_fatbin;
      if (!name[0]) gp_strlcpy(name, sizeof name, "builtin");
      break;
    case GPURT_MODULE_PTX:
    case GPURT_MODULE_CUBIN:
    case GPURT_MODULE_FATBIN:
      if (a.data == NULL || a.data_len == 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load \"%s\": %s data is empty",
                      name, cu_format_name(a.format));
      copy = malloc((size_t)a.data_len + 1);
      if (copy == NULL)
        return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load \"%s\": out of host memory", name);
      memcpy(copy, a.data, (size_t)a.data_len);
      ((char *)copy)[a.data_len] = 0; /* PTX must be NUL-terminated */
      image = copy;
      break;
    case GPURT_MODULE_METALLIB:
    case GPURT_MODULE_METAL_SOURCE:
      return gp_err(GPURT_ERR_UNSUPPORTED, "module_load \"%s\": format %s is not CUDA",
                    name, cu_format_name(a.format));
    default:
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load \"%s\": unknown format %d",
                    name, a.format);
  }
  if ((e = cu_enter(rt, a.device))) {
    free(copy);
    return e;
  }
  cu_module *mi = calloc(1, sizeof *mi);
  if (mi == NULL) {
    free(copy);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: out of host memory");
  }
  char elog[8192];
  elog[0] = 0;
  CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {elog, (void *)(uintptr_t)sizeof elog};
  CUresult r = cu_drv.p_cuModuleLoadDataEx(&mi->mod, image, 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    free(copy);
    free(mi);
    elog[sizeof elog - 1] = 0;
    size_t n = strlen(elog);
    while (n > 0 && (elog[n - 1] == '\n' || elog[n - 1] == ' ')) elog[--n] = 0;
    char op[CU_NAME_CAP + 64];
    snprintf(op, sizeof op, "module_load \"%s\" (%s)", name, cu_format_name(a.format));
    gpurt_error *fe = cu_fail(rt, a.device, r, op, NULL);
    if (n == 0) return fe;
    return gp_err_set_vendor(gp_err_append(fe, ": %s", elog), r);
  }
  mi->dev = a.device;
  mi->builtin = a.format == GPURT_MODULE_BUILTIN;
  gp_strlcpy(mi->name, sizeof mi->name, name);
  mi->image = copy;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->modules, mi, cu_release_module, "module_load", &hv))) return e;
  *out = (gpurt_module *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_module *mi = cu_rt_take(h, CU_TABLE(modules), mh, &rt, &e);
  if (mi == NULL) return e;
  pthread_mutex_lock(&rt->mu);
  for (cu_kernel *k = mi->kernels; k; k = k->next) cu_table_remove(&rt->kernels, k->handle);
  cu_free_kernel_list(mi);
  pthread_mutex_unlock(&rt->mu);
  cu_enter_quiet(rt, mi->dev);
  CUresult r = CUDA_SUCCESS;
  if (!cu_dev_lost(rt, mi->dev)) r = cu_drv.p_cuModuleUnload(mi->mod);
  uint32_t dev = mi->dev;
  free(mi->image);
  free(mi);
  return r ? cu_fail(rt, dev, r, "cuModuleUnload", NULL) : NULL;
}

gpurt_error *cu_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name,
                           uint64_t name_len, gpurt_kernel **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "kernel_get", &e);
  if (!rt) return e;
  *out = NULL;
  cu_module *m = cu_get(&rt->modules, mh, &e);
  if (m == NULL) return e;
  if (name == NULL || name_len == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: the kernel name is empty");
  if (cu_dev_lost(rt, m->dev)) return cu_lost_error(rt, m->dev);
  if (name_len >= CU_NAME_CAP)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel named \"%.*s...\" in module "
                  "\"%s\" (name longer than %d bytes)", 64, name, m->name, CU_NAME_CAP - 1);
  char nm[CU_NAME_CAP];
  memcpy(nm, name, (size_t)name_len);
  nm[name_len] = 0;
  if (strlen(nm) != name_len)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: the kernel name contains a NUL");
  /* The embedded fatbin also holds the plugin's own kernels (cuda_gemm.c's f32
   * bias conversion); they are not built-ins. */
  if (m->builtin && strncmp(nm, CU_INTERNAL_PREFIX, sizeof CU_INTERNAL_PREFIX - 1) == 0)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel named \"%s\" in module \"%s\" "
                  "(the plugin's internal kernels are not built-ins)", nm, m->name);
  pthread_mutex_lock(&rt->mu);
  for (cu_kernel *k = m->kernels; k; k = k->next)
    if (k->name_len == name_len && memcmp(k->name, nm, name_len) == 0) {
      *out = (gpurt_kernel *)(uintptr_t)k->handle;
      pthread_mutex_unlock(&rt->mu);
      return NULL;
    }
  pthread_mutex_unlock(&rt->mu);
  if ((e = cu_enter(rt, m->dev))) return e;
  CUfunction fn = NULL;
  CUresult r = cu_drv.p_cuModuleGetFunction(&fn, m->mod, nm);
  if (r == CUDA_ERROR_NOT_FOUND)
    return gp_err_vendor(GPURT_ERR_NOT_FOUND, r, "kernel_get: no kernel named \"%s\" in module \"%s\"",
                         nm, m->name);
  if (r) return cu_fail(rt, m->dev, r, "cuModuleGetFunction", NULL);
  cu_kernel *k = calloc(1, sizeof *k);
  if (k == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: out of host memory");
  k->dev = m->dev;
  k->module = m;
  k->fn = fn;
  memcpy(k->name, nm, (size_t)name_len + 1);
  k->name_len = (size_t)name_len;
  /* A built-in's parameters come from csrc's one table (gp_builtin.c). */
  const gp_builtin_kernel *sig = m->builtin ? gp_builtin_find(nm, (size_t)name_len) : NULL;
  if (sig != NULL) {
    k->builtin = sig;
    k->num_params = sig->num_params;
    k->params_known = k->kinds_known = 1;
    for (uint32_t i = 0; i < sig->num_params; i++) {
      k->kinds[i] = sig->kinds[i];
      k->sizes[i] = sig->sizes[i];
    }
  } else if (cu_drv.p_cuFuncGetParamInfo != NULL) {
    uint32_t n = 0;
    for (;;) {
      size_t off = 0, sz = 0;
      CUresult pr = cu_drv.p_cuFuncGetParamInfo(fn, n, &off, &sz);
      if (pr != CUDA_SUCCESS) break;
      if (n >= GPURT_MAX_KERNEL_PARAMS) {
        free(k);
        return gp_err(GPURT_ERR_UNSUPPORTED,
                      "kernel_get \"%s\": more than %d parameters", nm,
                      GPURT_MAX_KERNEL_PARAMS);
      }
      k->kinds[n] = GPURT_ARG_ANY;
      k->sizes[n] = (uint32_t)sz;
      n++;
    }
    k->num_params = n;
    k->params_known = 1;
  }
  pthread_mutex_lock(&rt->mu);
  /* Another thread may have added it meanwhile. */
  for (cu_kernel *o = m->kernels; o; o = o->next)
    if (o->name_len == k->name_len && memcmp(o->name, nm, k->name_len) == 0) {
      *out = (gpurt_kernel *)(uintptr_t)o->handle;
      pthread_mutex_unlock(&rt->mu);
      free(k);
      return NULL;
    }
  if (cu_table_insert(&rt->kernels, k, &k->handle) != 0) {
    pthread_mutex_unlock(&rt->mu);
    free(k);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: too many kernels");
  }
  k->next = m->kernels;
  m->kernels = k;
  *out = (gpurt_kernel *)(uintptr_t)k->handle;
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

gpurt_error *cu_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_kernel *k = cu_rt_obj(h, CU_TABLE(kernels), kh, &rt, &e);
  if (!k || (e = gp_check_out(out, "kernel info"))) return e;
  if (!k->params_known)
    return gp_err(GPURT_ERR_UNSUPPORTED,
                  "kernel_info \"%s\": the driver cannot describe parameters "
                  "(cuFuncGetParamInfo is missing)", k->name);
  if ((e = cu_enter(rt, k->dev))) return e;
  gpurt_kernel_info i;
  memset(&i, 0, sizeof i);
  i.num_params = k->num_params;
  int v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->fn) == 0)
    i.max_threads_per_block = (uint32_t)v;
  v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->fn) == 0)
    i.static_shared_bytes = (uint32_t)v;
  for (uint32_t p = 0; p < k->num_params; p++) {
    i.param_kind[p] = k->kinds[p];
    i.param_size[p] = k->sizes[p];
  }
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* ---- launch: resolve, validate, pack, enqueue ----------------------------------
 *
 * launch and launch_batch share these parts. launch runs them once;
 * launch_batch resolves and validates every item first (an invalid item
 * enqueues nothing), makes the context current once, then resolves, packs and
 * enqueues each item in order. Packing writes into the caller's fixed arrays
 * (GPURT_MAX_KERNEL_PARAMS entries, on its stack): no allocation per launch. */

/* The kernel of a launch and a local, struct_size-aware copy of its args. */
static inline gpurt_error *cu_launch_resolve(cu_runtime *rt, gpurt_kernel *kh,
                                             const gpurt_launch_args *args, cu_kernel **k,
                                             gpurt_launch_args *a) {
  gpurt_error *e = NULL;
  if ((*k = cu_get(&rt->kernels, kh, &e)) == NULL) return e;
  return gp_launch_read(args, a);
}

/* Checks a launch of k on st: devices, then csrc's checks of geometry,
 * argument count and each argument's kind and size against the kernel's
 * parameters (where known), then each buffer handle and view, and for a
 * built-in the elements it touches. Enqueues nothing. */
static gpurt_error *cu_launch_validate(cu_runtime *rt, const cu_stream *st, const cu_kernel *k,
                                       const gpurt_launch_args *a) {
  if (st->dev != k->dev) return gp_launch_device_error(k->name, k->dev, st->dev);
  gpurt_error *e = gp_launch_check(k->name, a, k->params_known ? k->num_params : GP_PARAMS_UNKNOWN,
                                   k->kinds_known ? k->kinds : NULL,
                                   k->params_known ? k->sizes : NULL, 0);
  if (e) return e;
  uint64_t view[GPURT_MAX_KERNEL_PARAMS];
  for (uint32_t i = 0; i < a->num_args; i++) {
    const gpurt_kernel_arg *g = &a->args[i];
    if (g->kind != GPURT_ARG_BUFFER) continue;
    const cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)g->buffer);
    if (b == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "launch \"%s\": argument %u: invalid buffer handle %p: freed, foreign "
                    "or never created", k->name, i, (void *)g->buffer);
    if (b->dev != st->dev) return gp_launch_arg_device_error(k->name, i, b->dev, st->dev);
    if ((e = gp_launch_view(k->name, i, b->size, g->offset, g->length, &view[i]))) return e;
  }
  if (k->builtin != NULL) return gp_builtin_check_views(k->builtin, a, view);
  return NULL;
}

/* Packs validated arguments for cuLaunchKernel: vals[i] holds argument i's
 * bits (a buffer's device address + offset; a scalar's low bytes, little-
 * endian), ptrs[i] points at vals[i]. A buffer gone since validation (freed
 * during the call, which the ABI forbids) is an error, not a crash. */
static inline gpurt_error *cu_launch_pack(cu_runtime *rt, const cu_kernel *k,
                                          const gpurt_launch_args *a,
                                          uint64_t vals[GPURT_MAX_KERNEL_PARAMS],
                                          void *ptrs[GPURT_MAX_KERNEL_PARAMS]) {
  for (uint32_t i = 0; i < a->num_args; i++) {
    const gpurt_kernel_arg *g = &a->args[i];
    if (g->kind == GPURT_ARG_BUFFER) {
      const cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)g->buffer);
      if (__builtin_expect(b == NULL, 0))
        return gp_err(GPURT_ERR_INVALID_HANDLE,
                      "launch \"%s\": argument %u: buffer handle %p was freed during the call",
                      k->name, i, (void *)g->buffer);
      vals[i] = (uint64_t)(b->ptr + g->offset);
    } else {
      vals[i] = g->value;
    }
    ptrs[i] = &vals[i];
  }
  return NULL;
}

/* Enqueues a packed launch on st (the device's context current) and records
 * the kernel's name for a later fault report. */
static gpurt_error *cu_launch_enqueue(cu_runtime *rt, cu_stream *st, const cu_kernel *k,
                                      const gpurt_launch_args *a, void **ptrs) {
  CUresult r = cu_drv.p_cuLaunchKernel(k->fn, a->grid[0], a->grid[1], a->grid[2], a->block[0],
                                       a->block[1], a->block[2], a->shared_mem_bytes, st->s,
                                       a->num_args ? ptrs : NULL, NULL);
  if (r) {
    if (r == CUDA_ERROR_INVALID_VALUE) {
      char t[256];
      cu_result_text(r, t, sizeof t);
      return gp_err_vendor(GPURT_ERR_INVALID_ARGUMENT, r,
                           "launch \"%s\": grid (%u,%u,%u) block (%u,%u,%u) shared %u: %s",
                           k->name, a->grid[0], a->grid[1], a->grid[2], a->block[0],
                           a->block[1], a->block[2], a->shared_mem_bytes, t);
    }
    char op[CU_NAME_CAP + 32];
    snprintf(op, sizeof op, "launch \"%s\"", k->name);
    return cu_fail(rt, st->dev, r, op, st->last_kernel);
  }
  /* Named for a later fault; copied only when the kernel changes (the
   * device's record is shared by every thread using the device). */
  if (atomic_load_explicit(&st->last_kernel_h, memory_order_relaxed) != k->handle) {
    memcpy(st->last_kernel, k->name, k->name_len + 1);
    atomic_store_explicit(&st->last_kernel_h, k->handle, memory_order_relaxed);
  }
  cu_device *d = &rt->devs[st->dev];
  if (atomic_load_explicit(&d->last_kernel_h, memory_order_relaxed) != k->handle) {
    memcpy(d->last_kernel, k->name, k->name_len + 1);
    atomic_store_explicit(&d->last_kernel_h, k->handle, memory_order_relaxed);
  }
  return NULL;
}

gpurt_error *cu_launch_params(cu_runtime *rt, const cu_stream *st, gpurt_kernel *kh,
                              const gpurt_launch_args *args, cu_kernel **k, gpurt_launch_args *a,
                              uint64_t *vals, void **ptrs) {
  gpurt_error *e;
  if ((e = cu_launch_resolve(rt, kh, args, k, a)) || (e = cu_launch_validate(rt, st, *k, a)) ||
      (e = cu_launch_pack(rt, *k, a, vals, ptrs)))
    return e;
  return NULL;
}

gpurt_error *cu_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh,
                       const gpurt_launch_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *st = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (st == NULL) {
    if (rt != NULL && sh == NULL) {
      gp_error_destroy(e);
      return gp_need_stream("launch", sh);
    }
    return e;
  }
  cu_kernel *k;
  gpurt_launch_args a;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  if ((e = cu_launch_resolve(rt, kh, args, &k, &a)) || (e = cu_launch_validate(rt, st, k, &a)) ||
      (e = cu_launch_pack(rt, k, &a, vals, ptrs)) || (e = cu_enter(rt, st->dev)))
    return e;
  return cu_launch_enqueue(rt, st, k, &a, ptrs);
}

/* Every item validated before any is enqueued; one cu_enter; then each item
 * packed into the same stack arrays and enqueued in order. Errors name the
 * item ("launch_batch: item 3: ..."); out_enqueued counts what was enqueued. */
gpurt_error *cu_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count,
                             const gpurt_launch_item *items, uint64_t *out_enqueued) {
  if (out_enqueued != NULL) *out_enqueued = 0;
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (count == 0) return NULL; /* a no-op (any stream), as in the mock */
  if ((e = gp_launch_batch_check(sh, count, items))) return e;
  cu_stream *st = cu_get(&rt->streams, sh, &e);
  if (st == NULL) return e;
  cu_kernel *k;
  gpurt_launch_args a;
  for (uint64_t i = 0; i < count; i++)
    if ((e = cu_launch_resolve(rt, items[i].kernel, items[i].args, &k, &a)) ||
        (e = cu_launch_validate(rt, st, k, &a)))
      return gp_batch_item_error(e, i);
  if ((e = cu_enter(rt, st->dev))) return e;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  for (uint64_t i = 0; i < count; i++) {
    if ((e = cu_launch_resolve(rt, items[i].kernel, items[i].args, &k, &a)) ||
        (e = cu_launch_pack(rt, k, &a, vals, ptrs)) ||
        (e = cu_launch_enqueue(rt, st, k, &a, ptrs))) {
      if (out_enqueued != NULL) *out_enqueued = i;
      return gp_batch_midway_error(e, i);
    }
  }
  if (out_enqueued != NULL) *out_enqueued = count;
  return NULL;
}
