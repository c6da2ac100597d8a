/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_memory.c — device buffers, pinned host buffers, copy and memset on the
 * CUDA driver API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_comm.h"

/* ---- memory ----------------------------------------------------------------- */

gpurt_error *cu_buffer_alloc(gpurt_runtime *h, uint32_t dev, uint64_t size,
                             gpurt_buffer **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "buffer_alloc", &e);
  if (!rt) return e;
  *out = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0");
  if ((e = cu_enter(rt, dev))) return e;
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
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->buffers, b, cu_release_buffer, "buffer_alloc", &hv))) return e;
  atomic_fetch_add(&rt->device_bytes, size);
  *out = (gpurt_buffer *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_buffer *b = cu_rt_take(h, CU_TABLE(buffers), buf, &rt, &e);
  if (b == NULL) return e;
  atomic_fetch_sub(&rt->device_bytes, b->size);
  cu_release_buffer(rt, b);
  return NULL;
}

gpurt_error *cu_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out,
                           void **out_ptr) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (out == NULL || out_ptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
  *out = NULL;
  *out_ptr = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0");
  if ((e = cu_enter(rt, 0))) return e;
  cu_host *hb = calloc(1, sizeof *hb);
  if (hb == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of host memory");
  CUresult r = cu_drv.p_cuMemHostAlloc(&hb->ptr, (size_t)size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    free(hb);
    char t[256];
    cu_result_text(r, t, sizeof t);
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE)
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                           "host_alloc: cannot pin %llu bytes of host memory: %s",
                           (unsigned long long)size, t);
    return cu_fail(rt, 0, r, "cuMemHostAlloc", NULL);
  }
  hb->size = size;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->hosts, hb, cu_release_host, "host_alloc", &hv))) return e;
  atomic_fetch_add(&rt->host_bytes, size);
  *out = (gpurt_host_buffer *)(uintptr_t)hv;
  *out_ptr = hb->ptr;
  return NULL;
}

gpurt_error *cu_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_host *hb = cu_rt_take(h, CU_TABLE(hosts), buf, &rt, &e);
  if (hb == NULL) return e;
  atomic_fetch_sub(&rt->host_bytes, hb->size);
  cu_release_host(rt, hb);
  return NULL;
}

gpurt_error *cu_view(cu_runtime *rt, gpurt_buffer *bh, uint64_t off, uint64_t bytes,
                     uint32_t dev, const char *what, CUdeviceptr *out) {
  cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)bh);
  if (b == NULL) {
    if (bh == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE, "%s: buffer handle is NULL", what);
    return gp_err(GPURT_ERR_INVALID_HANDLE,
                  "%s: invalid buffer handle %p: freed, foreign or never created", what,
                  (void *)bh);
  }
  if (b->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: the buffer is on device %u, not %u",
                  what, b->dev, dev);
  if (off > b->size || bytes > b->size - off)
    return gp_err(GPURT_ERR_OUT_OF_RANGE,
                  "%s: range [%llu, %llu+%llu) is beyond the buffer's %llu bytes", what,
                  (unsigned long long)off, (unsigned long long)off,
                  (unsigned long long)bytes, (unsigned long long)b->size);
  *out = b->ptr + off;
  return NULL;
}

/* One end of a copy. */
enum { EP_DEVICE = GP_END_BUFFER, EP_PINNED = GP_END_HOST, EP_PAGEABLE = GP_END_PTR };
typedef struct cu_ep {
  int kind;
  uint32_t dev;
  CUdeviceptr d;
  void *h;
} cu_ep;

/* Resolves one end of a copy gp_copy_check accepted (kind is its GP_END_*). */
static gpurt_error *cu_copy_end(cu_runtime *rt, const char *side, int kind, gpurt_buffer *buf,
                                gpurt_host_buffer *host, const void *ptr, uint64_t off,
                                uint64_t size, cu_ep *ep) {
  gpurt_error *e;
  ep->kind = kind;
  if (kind == EP_DEVICE) {
    cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)buf);
    if (b == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "copy: invalid %s_buffer handle %p: freed, foreign or never created",
                    side, (void *)buf);
    if ((e = gp_copy_range(side, kind, b->size, off, size))) return e;
    ep->dev = b->dev;
    ep->d = b->ptr + off;
  } else if (kind == EP_PINNED) {
    cu_host *hb = cu_table_lookup(&rt->hosts, (uint64_t)(uintptr_t)host);
    if (hb == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "copy: invalid %s_host handle %p: freed, foreign or never created",
                    side, (void *)host);
    if ((e = gp_copy_range(side, kind, hb->size, off, size))) return e;
    ep->h = (char *)hb->ptr + off;
  } else {
    ep->h = (void *)ptr;
  }
  return NULL;
}

gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  gpurt_copy_args a;
  int dk, sk;
  if ((e = gp_copy_check(args, &a, &dk, &sk))) return e;
  cu_ep src = {0}, dst = {0};
  if ((e = cu_copy_end(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset,
                       a.size, &dst)))
    return e;
  if ((e = cu_copy_end(rt, "src", sk, a.src_buffer, a.src_host, a.src_ptr, a.src_offset,
                       a.size, &src)))
    return e;
  int sync = (a.flags & GPURT_COPY_SYNC) != 0;
  cu_stream *st = NULL;
  if (a.stream != NULL && !(st = cu_get(&rt->streams, a.stream, &e))) return e;
  int has_dev = src.kind == EP_DEVICE || dst.kind == EP_DEVICE;
  uint32_t dev = dst.kind == EP_DEVICE ? dst.dev : src.dev;
  if (has_dev && st != NULL && st->dev != dev &&
      !(src.kind == EP_DEVICE && st->dev == src.dev))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: the stream is on device %u, the buffers on device %u", st->dev,
                  dev);
  if (st != NULL) dev = st->dev;
  if (!has_dev) {
    /* Host to host. */
    if (st != NULL) {
      if ((e = cu_enter(rt, st->dev))) return e;
      if (!sync && src.kind == EP_PINNED && dst.kind == EP_PINNED) {
        if (a.size == 0) return NULL;
        CUresult r = cu_drv.p_cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst.h,
                                            (CUdeviceptr)(uintptr_t)src.h, a.size, st->s);
        return r ? cu_fail(rt, st->dev, r, "cuMemcpyAsync", st->last_kernel) : NULL;
      }
      CUresult r = cu_drv.p_cuStreamSynchronize(st->s);
      if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
    }
    if (a.size) memmove(dst.h, src.h, a.size);
    return NULL;
  }
  if ((e = cu_enter(rt, dev))) return e;
  if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE && src.dev != dst.dev &&
      cu_dev_lost(rt, src.dev == dev ? dst.dev : src.dev))
    return cu_lost_error(rt, src.dev == dev ? dst.dev : src.dev);
  if (a.size == 0) return NULL;
  CUresult r;
  const char *what;
  if (st == NULL) {
    /* Default ordering: after all earlier work on the device(s). */
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, dev, r, "copy: device synchronize", rt->devs[dev].last_kernel);
    if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE) {
      if (src.dev != dst.dev) {
        cu_device *o = &rt->devs[src.dev == dev ? dst.dev : src.dev];
        (void)cu_make_current(o);
        r = cu_drv.p_cuCtxSynchronize();
        (void)cu_make_current(&rt->devs[dev]);
        if (r) return cu_fail(rt, o->index, r, "copy: device synchronize", o->last_kernel);
        cu_peer_enable(rt, dst.dev, src.dev); /* once; else the driver stages */
        (void)cu_make_current(&rt->devs[dev]);
        what = "cuMemcpyPeerAsync";
        r = cu_drv.p_cuMemcpyPeerAsync(dst.d, rt->devs[dst.dev].ctx, src.d,
                                       rt->devs[src.dev].ctx, a.size, NULL);
      } else {
        what = "cuMemcpyDtoD";
        r = cu_drv.p_cuMemcpyDtoD(dst.d, src.d, a.size);
      }
      if (r == CUDA_SUCCESS) r = cu_drv.p_cuCtxSynchronize();
    } else if (dst.kind == EP_DEVICE) {
      what = "cuMemcpyHtoD";
      r = cu_drv.p_cuMemcpyHtoD(dst.d, src.h, a.size);
    } else {
      what = "cuMemcpyDtoH";
      r = cu_drv.p_cuMemcpyDtoH(dst.h, src.d, a.size);
    }
    return r ? cu_fail(rt, dev, r, what, rt->devs[dev].last_kernel) : NULL;
  }
  if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE) {
    if (src.dev != dst.dev) {
      cu_peer_enable(rt, dst.dev, src.dev); /* once; else the driver stages */
      (void)cu_make_current(&rt->devs[st->dev]);
      what = "cuMemcpyPeerAsync";
      r = cu_drv.p_cuMemcpyPeerAsync(dst.d, rt->devs[dst.dev].ctx, src.d,
                                     rt->devs[src.dev].ctx, a.size, st->s);
    } else {
      what = "cuMemcpyDtoDAsync";
      r = cu_drv.p_cuMemcpyDtoDAsync(dst.d, src.d, a.size, st->s);
    }
  } else if (dst.kind == EP_DEVICE) {
    what = "cuMemcpyHtoDAsync";
    r = cu_drv.p_cuMemcpyHtoDAsync(dst.d, src.h, a.size, st->s);
  } else {
    what = "cuMemcpyDtoHAsync";
    r = cu_drv.p_cuMemcpyDtoHAsync(dst.h, src.d, a.size, st->s);
  }
  if (r) return cu_fail(rt, st->dev, r, what, st->last_kernel);
  if (sync) {
    r = cu_drv.p_cuStreamSynchronize(st->s);
    if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
  }
  return NULL;
}

gpurt_error *cu_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  gpurt_memset_args a;
  if ((e = gp_memset_check(args, &a))) return e;
  uint32_t es = a.element_size;
  cu_buffer *b = cu_get(&rt->buffers, a.buffer, &e);
  if (b == NULL) return e;
  if ((e = gp_memset_range(b->size, a.offset, a.size))) return e;
  cu_stream *st = NULL;
  if (a.stream != NULL) {
    if (!(st = cu_get(&rt->streams, a.stream, &e))) return e;
    if (st->dev != b->dev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "memset: the stream is on device %u, the buffer on device %u", st->dev,
                    b->dev);
  }
  if ((e = cu_enter(rt, b->dev))) return e;
  if (a.size == 0) return NULL;
  CUdeviceptr p = b->ptr + a.offset;
  size_t count = (size_t)(a.size / es);
  CUstream s = st ? st->s : NULL;
  const char *kern = st ? st->last_kernel : rt->devs[b->dev].last_kernel;
  CUresult r;
  if (st == NULL) {
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, b->dev, r, "memset: device synchronize", kern);
  }
  if (es == 1)
    r = cu_drv.p_cuMemsetD8Async(p, (unsigned char)a.value, count, s);
  else if (es == 2)
    r = cu_drv.p_cuMemsetD16Async(p, (unsigned short)a.value, count, s);
  else
    r = cu_drv.p_cuMemsetD32Async(p, a.value, count, s);
  if (r == CUDA_SUCCESS && st == NULL) r = cu_drv.p_cuCtxSynchronize();
  return r ? cu_fail(rt, b->dev, r, "memset", kern) : NULL;
}
