/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_memory.c — device buffers, pinned host buffers, copy and memset on the
 * CUDA driver API: the gp_backend entries mem_*, host_*, copy and memset
 * (the engine resolved and checked every operand).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_comm.h"

/* ---- memory ----------------------------------------------------------------- */

gpurt_error *cu_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out) {
  cu_runtime *rt = ctx;
  gpurt_error *e = cu_enter(rt, dev);
  if (e) return e;
  cu_buffer *b = calloc(1, sizeof *b);
  if (b == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of host memory");
  CUresult r = cu_drv.p_cuMemAlloc(&b->ptr, (size_t)size);
  if (r != CUDA_SUCCESS) {
    free(b);
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE) {
      size_t fr = 0, tot = 0;
      cu_drv.p_cuMemGetInfo(&fr, &tot);
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                           "buffer_alloc: out of device memory allocating %llu bytes "
                           "on device %u (%llu bytes free of %llu)",
                           (unsigned long long)size, dev, (unsigned long long)fr,
                           (unsigned long long)tot);
    }
    return cu_fail(rt, dev, r, "cuMemAlloc", NULL);
  }
  b->dev = dev;
  b->size = size;
  out->obj = b;
  out->addr = b->ptr;
  out->offset = 0;
  out->size = size;
  out->dev = dev;
  out->pinned = 0;
  return NULL;
}

gpurt_error *cu_mem_free(void *ctx, gp_mem *m) {
  cu_buffer *b = m->obj;
  cu_enter_quiet(ctx, b->dev);
  cu_drv.p_cuMemFree(b->ptr); /* a lost device's memory goes with its context */
  free(b);
  return NULL;
}

gpurt_error *cu_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr) {
  cu_runtime *rt = ctx;
  gpurt_error *e = cu_enter(rt, 0);
  if (e) return e;
  void *ptr = NULL;
  CUresult r = cu_drv.p_cuMemHostAlloc(&ptr, (size_t)size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    char t[256];
    cu_result_text(r, t, sizeof t);
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE)
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                           "host_alloc: cannot pin %llu bytes of host memory: %s",
                           (unsigned long long)size, t);
    return cu_fail(rt, 0, r, "cuMemHostAlloc", NULL);
  }
  out->obj = ptr;
  out->addr = (uint64_t)(uintptr_t)ptr;
  out->offset = 0;
  out->size = size;
  out->dev = 0;
  out->pinned = 1;
  *host_ptr = ptr;
  return NULL;
}

void cu_host_free(void *ctx, gp_mem *m) {
  cu_enter_quiet(ctx, 0);
  cu_drv.p_cuMemFreeHost(m->obj);
}

/* A host end's pointer. */
static void *host_of(const gp_mem *m) { return (void *)(uintptr_t)m->addr; }

gpurt_error *cu_copy(void *ctx, gp_queue *q, const gp_copy *c) {
  cu_runtime *rt = ctx;
  gpurt_error *e;
  cu_stream *st = q ? q->q : NULL;
  if (q != NULL && q->capturing == GP_QUEUE_PREPARE) return NULL;
  int sync = c->sync && (q == NULL || !q->capturing);
  const uint64_t n = c->size;
  if (c->kind == GP_COPY_H2H) {
    if (st != NULL) {
      if ((e = cu_enter(rt, st->dev))) return e;
      if (q->capturing || (!sync && c->src.obj != NULL && c->dst.obj != NULL)) {
        CUresult r = cu_drv.p_cuMemcpyAsync((CUdeviceptr)c->dst.addr, (CUdeviceptr)c->src.addr, n, st->s);
        return r ? cu_fail(rt, st->dev, r, "cuMemcpyAsync", st->last_kernel) : NULL;
      }
      CUresult r = cu_drv.p_cuStreamSynchronize(st->s);
      if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
    }
    memmove(host_of(&c->dst), host_of(&c->src), (size_t)n);
    return NULL;
  }
  int d2d = c->kind == GP_COPY_D2D;
  uint32_t dev = st ? st->dev : c->kind == GP_COPY_D2H ? c->src.dev : c->dst.dev;
  if ((e = cu_enter(rt, dev))) return e;
  uint32_t other = c->src.dev == dev ? c->dst.dev : c->src.dev;
  if (d2d && c->src.dev != c->dst.dev && cu_dev_lost(rt, other)) return cu_lost_error(rt, other);
  CUresult r;
  const char *what;
  if (st == NULL) {
    /* Synchronous: the engine drained the devices the copy is ordered after. */
    if (d2d) {
      if (c->src.dev != c->dst.dev) {
        cu_peer_enable(rt, c->dst.dev, c->src.dev); /* once; else the driver stages */
        (void)cu_make_current(&rt->devs[dev]);
        what = "cuMemcpyPeerAsync";
        r = cu_drv.p_cuMemcpyPeerAsync(c->dst.addr, rt->devs[c->dst.dev].ctx, c->src.addr,
                                       rt->devs[c->src.dev].ctx, n, NULL);
      } else {
        what = "cuMemcpyDtoD";
        r = cu_drv.p_cuMemcpyDtoD(c->dst.addr, c->src.addr, n);
      }
      if (r == CUDA_SUCCESS) r = cu_drv.p_cuCtxSynchronize();
    } else if (c->kind == GP_COPY_H2D) {
      what = "cuMemcpyHtoD";
      r = cu_drv.p_cuMemcpyHtoD(c->dst.addr, host_of(&c->src), n);
    } else {
      what = "cuMemcpyDtoH";
      r = cu_drv.p_cuMemcpyDtoH(host_of(&c->dst), c->src.addr, n);
    }
    return r ? cu_fail(rt, dev, r, what, rt->devs[dev].last_kernel) : NULL;
  }
  if (d2d) {
    if (c->src.dev != c->dst.dev) {
      cu_peer_enable(rt, c->dst.dev, c->src.dev); /* once; else the driver stages */
      (void)cu_make_current(&rt->devs[st->dev]);
      what = "cuMemcpyPeerAsync";
      r = cu_drv.p_cuMemcpyPeerAsync(c->dst.addr, rt->devs[c->dst.dev].ctx, c->src.addr,
                                     rt->devs[c->src.dev].ctx, n, st->s);
    } else {
      what = "cuMemcpyDtoDAsync";
      r = cu_drv.p_cuMemcpyDtoDAsync(c->dst.addr, c->src.addr, n, st->s);
    }
  } else if (c->kind == GP_COPY_H2D) {
    what = "cuMemcpyHtoDAsync";
    r = cu_drv.p_cuMemcpyHtoDAsync(c->dst.addr, host_of(&c->src), n, st->s);
  } else {
    what = "cuMemcpyDtoHAsync";
    r = cu_drv.p_cuMemcpyDtoHAsync(host_of(&c->dst), c->src.addr, n, st->s);
  }
  if (r) return cu_fail(rt, st->dev, r, what, st->last_kernel);
  if (sync) {
    r = cu_drv.p_cuStreamSynchronize(st->s);
    if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
  }
  return NULL;
}

gpurt_error *cu_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                       uint32_t es) {
  cu_runtime *rt = ctx;
  cu_stream *st = q ? q->q : NULL;
  if (q != NULL && q->capturing == GP_QUEUE_PREPARE) return NULL;
  gpurt_error *e = cu_enter(rt, dst->dev);
  if (e) return e;
  if (size == 0) return NULL;
  CUdeviceptr p = dst->addr;
  size_t count = (size_t)(size / es);
  CUstream s = st ? st->s : NULL;
  const char *kern = st ? st->last_kernel : rt->devs[dst->dev].last_kernel;
  CUresult r;
  if (es == 1)
    r = cu_drv.p_cuMemsetD8Async(p, (unsigned char)value, count, s);
  else if (es == 2)
    r = cu_drv.p_cuMemsetD16Async(p, (unsigned short)value, count, s);
  else
    r = cu_drv.p_cuMemsetD32Async(p, value, count, s);
  /* q NULL: synchronous (the engine drained the device first). */
  if (r == CUDA_SUCCESS && st == NULL) r = cu_drv.p_cuCtxSynchronize();
  return r ? cu_fail(rt, dst->dev, r, "memset", kern) : NULL;
}
