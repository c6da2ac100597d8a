/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_memory.m — device buffers, host buffers (with their per-device
 * wrappers), copy and memset on Metal.
 *
 * Every entry point runs inside its own @autoreleasepool, because the
 * calling thread (a Go-managed OS thread) has no pool of its own.
 */
#import "metal_internal.h"

#include <errno.h>
#include <mach/mach_time.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- memory ------------------------------------------------------------------------------ */

gpurt_error *gm_buffer_alloc(gpurt_runtime *h, uint32_t device, uint64_t size,
                             gpurt_buffer **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMDevice *d;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: out is NULL");
    if ((e = gm_device(rt, device, &d))) return e;
    if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0");
    uint64_t total = d->dev.recommendedMaxWorkingSetSize, used = d->dev.currentAllocatedSize;
    uint64_t free_b = used < total ? total - used : 0;
    if (gm_alloc_fault(rt))
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "buffer_alloc: %llu bytes on device %u: injected failure (fail_alloc_nth)",
                    (unsigned long long)size, device);
    if (size > (uint64_t)d->dev.maxBufferLength || size > total)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "buffer_alloc: %llu bytes on device %u: larger than the device allows "
                    "(max buffer %llu bytes, %llu bytes free of %llu)",
                    (unsigned long long)size, device,
                    (unsigned long long)d->dev.maxBufferLength,
                    (unsigned long long)free_b, (unsigned long long)total);
    id<MTLBuffer> b = [d->dev newBufferWithLength:(NSUInteger)size
                                          options:MTLResourceStorageModeShared |
                                                  MTLResourceHazardTrackingModeTracked];
    if (b == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "buffer_alloc: %llu bytes on device %u failed (%llu bytes free of %llu)",
                    (unsigned long long)size, device, (unsigned long long)free_b,
                    (unsigned long long)total);
    GMBuffer *gb = [[GMBuffer alloc] init];
    gb->buf = b;
    gb->size = size;
    gb->device = device;
    uintptr_t hb;
    if ((e = gm_insert(rt, &rt->buffers, gb, &hb, "buffer_alloc"))) return e;
    pthread_mutex_lock(&rt->mu);
    rt->device_bytes += size;
    pthread_mutex_unlock(&rt->mu);
    *out = (gpurt_buffer *)hb;
    return NULL;
  }
}

gpurt_error *gm_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) {
  if (buf == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    GMBuffer *gb;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->buffers, (uintptr_t)buf, &o);
    gb = st == GP_HANDLE_OK ? gm_remove_locked(&rt->buffers, (uintptr_t)buf) : nil;
    if (gb != nil) rt->device_bytes -= gb->size;
    pthread_mutex_unlock(&rt->mu);
    if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_BUFFER, (uintptr_t)buf);
    /* Command buffers still using it hold their own reference. */
    return NULL;
  }
}

gpurt_error *gm_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out,
                           void **out_ptr) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL || out_ptr == NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
    if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0");
    if (gm_alloc_fault(rt))
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "host_alloc: %llu bytes: injected failure (fail_alloc_nth)",
                    (unsigned long long)size);
    uint64_t page = (uint64_t)getpagesize();
    if (size > UINT64_MAX - page || size > (uint64_t)SIZE_MAX / 2)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: %llu bytes is too large",
                    (unsigned long long)size);
    size_t mapped = (size_t)((size + page - 1) / page * page);
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    if (p == MAP_FAILED)
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, errno, "host_alloc: %llu bytes: mmap: %s",
                           (unsigned long long)size, strerror(errno));
    GMHostMem *mem = [[GMHostMem alloc] init]; /* owns p from here on */
    mem->ptr = p;
    mem->mapped = mapped;
    GMHostBuffer *hb = [[GMHostBuffer alloc] init];
    hb->mem = mem;
    hb->size = size;
    uintptr_t hh;
    if ((e = gm_insert(rt, &rt->hosts, hb, &hh, "host_alloc"))) return e;
    pthread_mutex_lock(&rt->mu);
    rt->host_bytes += size;
    pthread_mutex_unlock(&rt->mu);
    *out = (gpurt_host_buffer *)hh;
    *out_ptr = p;
    return NULL;
  }
}

gpurt_error *gm_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) {
  if (buf == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->hosts, (uintptr_t)buf, &o);
    GMHostBuffer *hb = st == GP_HANDLE_OK ? gm_remove_locked(&rt->hosts, (uintptr_t)buf) : nil;
    if (hb != nil) rt->host_bytes -= hb->size;
    pthread_mutex_unlock(&rt->mu);
    if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_HOST_BUFFER, (uintptr_t)buf);
    /* The memory is unmapped when the last MTLBuffer wrapping it (held by an
     * in-flight command buffer, if any) is released. */
    return NULL;
  }
}

/* ---- copies --------------------------------------------------------------------------------------- */

typedef struct gm_end {
  int kind;           /* 0 none, 1 device, 2 pinned, 3 pageable */
  GMBuffer *__unsafe_unretained buf; /* kept alive by the caller's strong local */
  GMHostBuffer *__unsafe_unretained host;
  uint8_t *ptr;       /* CPU address of the start of the range */
  uint64_t offset;
  uint64_t cap;       /* bytes of the allocation (device / pinned) */
} gm_end;

/* Resolves one end of a copy gp_copy_check accepted (kind is its GP_END_*:
 * 1 device, 2 pinned, 3 pageable, as gm_end.kind). */
static gpurt_error *gm_resolve_end(GMRuntime *rt, const char *side, int kind, gpurt_buffer *bh,
                                   gpurt_host_buffer *hh, void *ptr, uint64_t offset,
                                   uint64_t size, gm_end *out, id __strong *keep) {
  gpurt_error *e;
  memset(out, 0, sizeof *out);
  out->offset = offset;
  out->kind = kind;
  if (kind == GP_END_BUFFER) {
    id o;
    if ((e = gm_lookup(rt, &rt->buffers, (uintptr_t)bh, GP_KIND_BUFFER, &o))) return e;
    *keep = o;
    out->buf = o;
    out->cap = out->buf->size;
  } else if (kind == GP_END_HOST) {
    id o;
    if ((e = gm_lookup(rt, &rt->hosts, (uintptr_t)hh, GP_KIND_HOST_BUFFER, &o))) return e;
    *keep = o;
    out->host = o;
    out->cap = out->host->size;
  } else {
    out->ptr = ptr;
    return NULL;
  }
  if ((e = gp_copy_range(side, kind, out->cap, offset, size))) return e;
  uint8_t *base = out->kind == 1 ? (uint8_t *)out->buf->buf.contents
                                 : (uint8_t *)out->host->mem->ptr;
  out->ptr = base + offset;
  return NULL;
}

/* The MTLBuffer through which the GPU sees an endpoint on device d. */
static id<MTLBuffer> gm_end_buffer(const gm_end *x, GMDevice *d) {
  return x->kind == 1 ? x->buf->buf : gm_host_wrapper(x->host, d);
}

gpurt_error *gm_encode_1d(GMDevice *d, id<MTLCommandBuffer> cb, NSString *kernel,
                          id<MTLBuffer> b0, uint64_t off0, id<MTLBuffer> b1,
                          uint64_t off1, const void *scalar, size_t scalar_len,
                          uint64_t n) {
  id<MTLComputePipelineState> pso;
  gpurt_error *e = gm_builtin_pso(d, kernel, &pso);
  if (e) return e;
  const uint64_t tg = 256;
  uint64_t groups = (n + tg - 1) / tg;
  if (groups > UINT32_MAX)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %llu elements is too many",
                  kernel.UTF8String, (unsigned long long)n);
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "%s: no compute encoder", kernel.UTF8String);
  [enc setComputePipelineState:pso];
  uint32_t idx = 0;
  [enc setBuffer:b0 offset:(NSUInteger)off0 atIndex:idx++];
  if (b1 != nil) [enc setBuffer:b1 offset:(NSUInteger)off1 atIndex:idx++];
  if (scalar != NULL) [enc setBytes:scalar length:scalar_len atIndex:idx++];
  [enc setBytes:&n length:sizeof n atIndex:idx];
  [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)groups, 1, 1)
      threadsPerThreadgroup:MTLSizeMake((NSUInteger)tg, 1, 1)];
  [enc endEncoding];
  return NULL;
}

gpurt_error *gm_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    gpurt_copy_args a;
    int dk, sk;
    if ((e = gp_copy_check(args, &a, &dk, &sk))) return e;
    int sync = (a.flags & GPURT_COPY_SYNC) != 0;
    GMStream *s = nil;
    if (a.stream != NULL && (e = gm_get_stream(rt, a.stream, &s))) return e;
    gm_end src, dst;
    id keep_src, keep_dst;
    if ((e = gm_resolve_end(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset,
                            a.size, &dst, &keep_dst)))
      return e;
    if ((e = gm_resolve_end(rt, "src", sk, a.src_buffer, a.src_host, (void *)a.src_ptr,
                            a.src_offset, a.size, &src, &keep_src)))
      return e;
    if (s != nil) {
      if ((dst.kind == 1 && dst.buf->device != s->device->index) ||
          (src.kind == 1 && src.buf->device != s->device->index))
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "copy: a buffer is on another device than the stream (device %u)",
                      s->device->index);
    }
    if (src.kind == 1 && (e = gm_check_lost(rt->devices[src.buf->device]))) return e;
    if (dst.kind == 1 && (e = gm_check_lost(rt->devices[dst.buf->device]))) return e;
    if (a.size == 0) return NULL;

    if (sync) {
      /* Order after earlier work, then copy with the CPU: every buffer is
       * MTLStorageModeShared, so its contents are host-addressable. */
      if (s != nil) {
        gm_stream_wait(s);
      } else {
        if (src.kind == 1) gm_wait_device(rt, src.buf->device);
        if (dst.kind == 1 && !(src.kind == 1 && src.buf->device == dst.buf->device))
          gm_wait_device(rt, dst.buf->device);
        if (src.kind != 1 && dst.kind != 1)
          for (GMDevice *d in rt->devices) gm_wait_device(rt, d->index);
      }
      memmove(dst.ptr, src.ptr, (size_t)a.size);
      return NULL;
    }

    GMDevice *d = s->device;
    id<MTLBuffer> sb = gm_end_buffer(&src, d), db = gm_end_buffer(&dst, d);
    if (sb == nil || db == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "copy: device %u could not map the pinned host buffer", d->index);
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    if (((a.src_offset | a.dst_offset | a.size) & 3u) == 0) {
      id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
      if (blit == nil) {
        gm_stream_abort(s);
        return gp_err(GPURT_ERR_INTERNAL, "copy: no blit encoder");
      }
      [blit copyFromBuffer:sb
              sourceOffset:(NSUInteger)a.src_offset
                  toBuffer:db
         destinationOffset:(NSUInteger)a.dst_offset
                      size:(NSUInteger)a.size];
      [blit endEncoding];
    } else if ((e = gm_encode_1d(d, cb, @"gpurt_copy_u8", db, a.dst_offset, sb, a.src_offset, NULL,
                                 0, a.size))) {
      gm_stream_abort(s);
      return e;
    }
    gm_stream_commit(s, cb, @"copy", nil, 0);
    return NULL;
  }
}

gpurt_error *gm_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    gpurt_memset_args a;
    if ((e = gp_memset_check(args, &a))) return e;
    uint32_t es = a.element_size;
    GMStream *s = nil;
    if (a.stream != NULL && (e = gm_get_stream(rt, a.stream, &s))) return e;
    id o;
    if ((e = gm_lookup(rt, &rt->buffers, (uintptr_t)a.buffer, GP_KIND_BUFFER, &o))) return e;
    GMBuffer *b = o;
    if ((e = gp_memset_range(b->size, a.offset, a.size))) return e;
    if (s != nil && s->device->index != b->device)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "memset: the buffer is on device %u, the stream on device %u", b->device,
                    s->device->index);
    GMDevice *d = rt->devices[b->device];
    if ((e = gm_check_lost(d))) return e;
    if (a.size == 0) return NULL;
    uint32_t v32 = es == 1 ? (a.value & 0xffu) * 0x01010101u
                 : es == 2 ? (a.value & 0xffffu) * 0x00010001u
                           : a.value;
    if (s == nil) {
      gm_wait_device(rt, b->device);
      uint8_t *p = (uint8_t *)b->buf.contents + a.offset;
      if (es == 1) {
        memset(p, (int)(v32 & 0xff), (size_t)a.size);
      } else {
        for (uint64_t i = 0; i < a.size; i += es) memcpy(p + i, &v32, es);
      }
      return NULL;
    }
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    if (es == 1 && ((a.offset | a.size) & 3u) == 0) {
      id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
      if (blit == nil) {
        gm_stream_abort(s);
        return gp_err(GPURT_ERR_INTERNAL, "memset: no blit encoder");
      }
      [blit fillBuffer:b->buf range:NSMakeRange((NSUInteger)a.offset, (NSUInteger)a.size)
                 value:(uint8_t)v32];
      [blit endEncoding];
    } else {
      uint8_t v8 = (uint8_t)v32;
      uint16_t v16 = (uint16_t)v32;
      NSString *k = es == 1 ? @"gpurt_memset_u8" : es == 2 ? @"gpurt_memset_u16" : @"gpurt_memset_u32";
      const void *pv = es == 1 ? (const void *)&v8 : es == 2 ? (const void *)&v16 : (const void *)&v32;
      if ((e = gm_encode_1d(d, cb, k, b->buf, a.offset, nil, 0, pv, es, a.size / es))) {
        gm_stream_abort(s);
        return e;
      }
    }
    gm_stream_commit(s, cb, @"memset", nil, 0);
    return NULL;
  }
}
