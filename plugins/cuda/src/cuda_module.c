/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_module.c — modules (BUILTIN, PTX, CUBIN, FATBIN), kernels, launch and
 * launch_many (pack, enqueue) on the CUDA driver API: the gp_backend entries
 * module_*, kernel_get, launch and launch_many.
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

gpurt_error *cu_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *ap, void **out) {
  cu_runtime *rt = ctx;
  const gpurt_module_load_args a = *ap;
  gpurt_error *e;
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
  if ((e = cu_enter(rt, dev))) {
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
    gpurt_error *fe = cu_fail(rt, dev, r, op, NULL);
    if (n == 0) return fe;
    return gp_err_set_vendor(gp_err_append(fe, ": %s", elog), r);
  }
  mi->dev = dev;
  mi->builtin = a.format == GPURT_MODULE_BUILTIN;
  mi->image = copy;
  *out = mi;
  return NULL;
}

void cu_module_unload(void *ctx, void *mod) {
  cu_runtime *rt = ctx;
  cu_module *mi = mod;
  cu_enter_quiet(rt, mi->dev);
  if (!cu_dev_lost(rt, mi->dev)) (void)cu_drv.p_cuModuleUnload(mi->mod);
  free(mi->image);
  free(mi);
}

/* The kernel object is the CUfunction itself. A built-in's parameters come
 * from csrc's table (gp_builtin.c; the engine found the name there), a
 * user kernel's from cuFuncGetParamInfo where the driver has it. */
gpurt_error *cu_kernel_get(void *ctx, void *mod, const char *name, uint64_t name_len, void **kernel,
                           gpurt_kernel_info *info) {
  cu_runtime *rt = ctx;
  cu_module *m = mod;
  if (name_len >= CU_NAME_CAP)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel named \"%.*s...\" in the module "
                  "(name longer than %d bytes)", 64, name, CU_NAME_CAP - 1);
  char nm[CU_NAME_CAP];
  memcpy(nm, name, (size_t)name_len);
  nm[name_len] = 0;
  if (strlen(nm) != name_len)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: the kernel name contains a NUL");
  gpurt_error *e = cu_enter(rt, m->dev);
  if (e) return e;
  CUfunction fn = NULL;
  CUresult r = cu_drv.p_cuModuleGetFunction(&fn, m->mod, nm);
  if (r == CUDA_ERROR_NOT_FOUND)
    return gp_err_vendor(GPURT_ERR_NOT_FOUND, r, "kernel_get: no kernel named \"%s\" in the module", nm);
  if (r) return cu_fail(rt, m->dev, r, "cuModuleGetFunction", NULL);
  const gp_builtin_kernel *sig = m->builtin ? gp_builtin_find(nm, (size_t)name_len) : NULL;
  if (sig != NULL) {
    info->num_params = sig->num_params;
    for (uint32_t i = 0; i < sig->num_params; i++) {
      info->param_kind[i] = sig->kinds[i];
      info->param_size[i] = sig->sizes[i];
    }
  } else if (cu_drv.p_cuFuncGetParamInfo != NULL) {
    uint32_t n = 0;
    for (;;) {
      size_t off = 0, sz = 0;
      if (cu_drv.p_cuFuncGetParamInfo(fn, n, &off, &sz) != CUDA_SUCCESS) break;
      if (n >= GPURT_MAX_KERNEL_PARAMS)
        return gp_err(GPURT_ERR_UNSUPPORTED, "kernel_get \"%s\": more than %d parameters", nm,
                      GPURT_MAX_KERNEL_PARAMS);
      info->param_kind[n] = GPURT_ARG_ANY;
      info->param_size[n] = (uint32_t)sz;
      n++;
    }
    info->num_params = n;
  } else {
    info->num_params = GP_PARAMS_UNKNOWN;
  }
  int v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn) == 0)
    info->max_threads_per_block = (uint32_t)v;
  v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn) == 0)
    info->static_shared_bytes = (uint32_t)v;
  *kernel = fn;
  return NULL;
}

/* ---- launch ------------------------------------------------------------------------
 *
 * The engine checked the launch against the kernel's parameters, the
 * limits and the built-in table, and resolved every buffer: packing writes
 * the arguments into fixed arrays on the caller's stack (no allocation). */

/* vals[i] holds argument i's bits (a buffer's device address; a scalar's
 * low bytes, little-endian), ptrs[i] points at vals[i]. */
static inline void cu_launch_pack(const gp_launch_op *l, uint64_t *vals, void **ptrs) {
  for (uint32_t i = 0; i < l->num_args; i++) {
    vals[i] = l->kinds[i] == GPURT_ARG_BUFFER ? l->bufs[i].addr : l->scalar[i];
    ptrs[i] = &vals[i];
  }
}

void cu_launch_node(const gp_launch_op *l, CUDA_KERNEL_NODE_PARAMS *p, uint64_t *vals, void **ptrs) {
  cu_launch_pack(l, vals, ptrs);
  memset(p, 0, sizeof *p);
  p->func = (CUfunction)l->kernel;
  p->gridDimX = l->grid[0];
  p->gridDimY = l->grid[1];
  p->gridDimZ = l->grid[2];
  p->blockDimX = l->block[0];
  p->blockDimY = l->block[1];
  p->blockDimZ = l->block[2];
  p->sharedMemBytes = l->shared_bytes;
  p->kernelParams = l->num_args ? ptrs : NULL;
}

/* Enqueues one packed launch on st (the device's context current) and
 * records the kernel's name for a later fault report. */
static gpurt_error *cu_launch_enqueue(cu_runtime *rt, cu_stream *st, const gp_launch_op *l) {
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  cu_launch_pack(l, vals, ptrs);
  /* The built-ins wait for their predecessor themselves (cuda_kernels.cu
   * gpurt_pdl_enter): launched with programmatic dependent launch. */
  CUresult r = cu_launch_kernel(rt, st, (CUfunction)l->kernel, l->grid, l->block, l->shared_bytes,
                                l->num_args ? ptrs : NULL, l->builtin != NULL);
  if (r) {
    if (r == CUDA_ERROR_INVALID_VALUE) {
      char t[256];
      cu_result_text(r, t, sizeof t);
      return gp_err_vendor(GPURT_ERR_INVALID_ARGUMENT, r,
                           "launch \"%s\": grid (%u,%u,%u) block (%u,%u,%u) shared %u: %s",
                           l->name, l->grid[0], l->grid[1], l->grid[2], l->block[0],
                           l->block[1], l->block[2], l->shared_bytes, t);
    }
    char op[CU_NAME_CAP + 32];
    snprintf(op, sizeof op, "launch \"%s\"", l->name);
    return cu_fail(rt, st->dev, r, op, st->last_kernel);
  }
  cu_note_kernel(rt, st, (uintptr_t)l->kernel, l->name);
  return NULL;
}

gpurt_error *cu_launch(void *ctx, gp_queue *q, const gp_launch_op *l) {
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  if (q->capturing == GP_QUEUE_PREPARE) return NULL;
  gpurt_error *e = cu_enter(rt, st->dev);
  if (e || (e = cu_launch_enqueue(rt, st, l))) return e;
  if (q->capturing) cu_rec_launch_node(st, q->item);
  return NULL;
}

/* One cu_enter, then each launch enqueued in order. */
gpurt_error *cu_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n, uint64_t *enqueued) {
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  *enqueued = 0;
  gpurt_error *e = cu_enter(rt, st->dev);
  if (e) return e;
  for (uint64_t i = 0; i < n; i++) {
    if ((e = cu_launch_enqueue(rt, st, &l[i]))) return e;
    *enqueued = i + 1;
  }
  return NULL;
}
