/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_memory.m — device buffers (MTLStorageModeShared: host-addressable,
 * still separate allocations, so copies are required), pinned host memory
 * (page-aligned mmap memory, wrapped per device with
 * newBufferWithBytesNoCopy when the GPU needs it), copy and memset. The
 * engine has checked every range, flag and device and resolved every
 * operand (gp_copy's host ends: addr is the host address; obj the
 * GMHostBuffer for pinned memory, NULL for pageable).
 *
 * Synchronous copies and memsets on no stream run on the CPU after the
 * engine drained the devices; on a stream a synchronous copy waits for the
 * stream, then copies on the CPU. Asynchronous copies use a blit encoder
 * when offsets and size are multiples of 4, else the gpurt_copy_u8 kernel;
 * memset uses fillBuffer for 4-aligned 1-byte patterns, else the
 * gpurt_memset_u8/u16/u32 kernels.
 */
#import "metal_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

gpurt_error *gm_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out) {
  @autoreleasepool {
    GMContext *c = (__bridge GMContext *)ctx;
    GMDevice *d = c->devices[dev];
    uint64_t total = d->dev.recommendedMaxWorkingSetSize, used = d->dev.currentAllocatedSize;
    uint64_t free_b = used < total ? total - used : 0;
    if (gm_alloc_fault(c))
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u allocating %llu bytes "
                    "(injected fault: fail_alloc_nth)", dev, (unsigned long long)size);
    if (size > (uint64_t)d->dev.maxBufferLength || size > total)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes on device %u: larger than the device "
                    "allows (max buffer %llu bytes, %llu bytes free of %llu)", (unsigned long long)size, dev,
                    (unsigned long long)d->dev.maxBufferLength, (unsigned long long)free_b,
                    (unsigned long long)total);
    id<MTLBuffer> b = [d->dev newBufferWithLength:(NSUInteger)size
                                          options:MTLResourceStorageModeShared | MTLResourceHazardTrackingModeTracked];
    if (b == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes on device %u failed (%llu bytes free of %llu)",
                    (unsigned long long)size, dev, (unsigned long long)free_b, (unsigned long long)total);
    memset(out, 0, sizeof *out);
    out->obj = (void *)CFBridgingRetain(b);
    return NULL;
  }
}

gpurt_error *gm_mem_free(void *ctx, gp_mem *m) {
  (void)ctx;
  @autoreleasepool {
    /* Command buffers still holding it keep their own reference. */
    (void)CFBridgingRelease(m->obj);
    m->obj = NULL;
    return NULL;
  }
}

gpurt_error *gm_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr) {
  @autoreleasepool {
    GMContext *c = (__bridge GMContext *)ctx;
    if (gm_alloc_fault(c))
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory allocating %llu bytes "
                    "(injected fault: fail_alloc_nth)", (unsigned long long)size);
    uint64_t page = (uint64_t)getpagesize();
    if (size > UINT64_MAX - page || size > (uint64_t)SIZE_MAX / 2)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: %llu bytes is too large", (unsigned long long)size);
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
    memset(out, 0, sizeof *out);
    out->obj = (void *)CFBridgingRetain(hb);
    out->addr = (uint64_t)(uintptr_t)p;
    *host_ptr = p;
    return NULL;
  }
}

void gm_host_free(void *ctx, gp_mem *m) {
  (void)ctx;
  @autoreleasepool {
    /* The memory is unmapped when the last MTLBuffer wrapping it (held by an
     * in-flight command buffer, if any) is released. */
    (void)CFBridgingRelease(m->obj);
    m->obj = NULL;
  }
}

/* ---- copies ------------------------------------------------------------------------- */

/* The CPU address of a resolved copy end (device memory is shared storage). */
static uint8_t *cpu_ptr(const gp_mem *m, int device) {
  if (device) return (uint8_t *)gm_buf(m).contents + m->offset;
  return (uint8_t *)(uintptr_t)m->addr;
}

/* The GPU's view of a copy end on device d: the buffer and the offset in it
 * (nil for pageable host memory, which the engine never hands an
 * asynchronous copy). */
static id<MTLBuffer> gpu_buf(const gp_mem *m, int device, GMDevice *d) {
  if (device) return gm_buf(m);
  if (m->obj == NULL) return nil;
  return gm_host_wrapper((__bridge GMHostBuffer *)m->obj, d);
}

/* A 1-D internal kernel over n elements: buffer 0, buffer 1 (or none),
 * one scalar (or none), then n. */
static void encode_1d(id<MTLComputeCommandEncoder> enc, id<MTLComputePipelineState> pso, id<MTLBuffer> b0,
                      uint64_t off0, id<MTLBuffer> b1, uint64_t off1, const void *scalar, size_t scalar_len,
                      uint64_t n) {
  const uint64_t tg = 256;
  [enc setComputePipelineState:pso];
  NSUInteger idx = 0;
  [enc setBuffer:b0 offset:(NSUInteger)off0 atIndex:idx++];
  if (b1 != nil) [enc setBuffer:b1 offset:(NSUInteger)off1 atIndex:idx++];
  if (scalar != NULL) [enc setBytes:scalar length:scalar_len atIndex:idx++];
  [enc setBytes:&n length:sizeof n atIndex:idx];
  [enc dispatchThreadgroups:MTLSizeMake((NSUInteger)((n + tg - 1) / tg), 1, 1)
      threadsPerThreadgroup:MTLSizeMake((NSUInteger)tg, 1, 1)];
}

static gpurt_error *groups_fit(const char *what, uint64_t n) {
  if ((n + 255) / 256 > UINT32_MAX)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %llu elements is more than one dispatch takes", what,
                  (unsigned long long)n);
  return NULL;
}

gpurt_error *gm_copy(void *ctx, gp_queue *q, const gp_copy *c) {
  (void)ctx;
  @autoreleasepool {
    int dd = c->kind == GP_COPY_D2D || c->kind == GP_COPY_H2D;
    int sd = c->kind == GP_COPY_D2D || c->kind == GP_COPY_D2H;
    if (q == NULL) { /* the engine drained the devices the copy is ordered after */
      memmove(cpu_ptr(&c->dst, dd), cpu_ptr(&c->src, sd), (size_t)c->size);
      return NULL;
    }
    if (c->sync && !q->capturing) {
      gm_stream_wait((__bridge GMStream *)q->q);
      memmove(cpu_ptr(&c->dst, dd), cpu_ptr(&c->src, sd), (size_t)c->size);
      return NULL;
    }
    GMDevice *d = gm_queue_device(q);
    if ((dd && c->dst.dev != d->index) || (sd && c->src.dev != d->index))
      return gp_err(GPURT_ERR_UNSUPPORTED, "copy: a peer copy between Metal devices %u and %u on a stream is not "
                    "supported (copy with GPURT_COPY_SYNC and no stream)", c->dst.dev, c->src.dev);
    id<MTLBuffer> db = gpu_buf(&c->dst, dd, d), sb = gpu_buf(&c->src, sd, d);
    if (db == nil || sb == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "copy: device %u could not map the pinned host buffer", d->index);
    uint64_t doff = c->dst.offset, soff = c->src.offset, size = c->size;
    gpurt_error *e;
    if (((doff | soff | size) & 3u) == 0) {
      return gm_submit(q, @"copy", ^gpurt_error *(GMEnc *x) {
        gm_end_compute(x);
        id<MTLBlitCommandEncoder> blit = [x->cb blitCommandEncoder];
        if (blit == nil) return gp_err(GPURT_ERR_INTERNAL, "copy: Metal gave no blit encoder");
        [blit copyFromBuffer:sb sourceOffset:(NSUInteger)soff toBuffer:db destinationOffset:(NSUInteger)doff
                        size:(NSUInteger)size];
        [blit endEncoding];
        return NULL;
      });
    }
    id<MTLComputePipelineState> pso;
    if ((e = groups_fit("copy", size)) || (e = gm_builtin_pso(d, @"gpurt_copy_u8", &pso))) return e;
    return gm_submit(q, @"copy (gpurt_copy_u8)", ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "copy: Metal gave no compute encoder");
      encode_1d(enc, pso, db, doff, sb, soff, NULL, 0, size);
      return NULL;
    });
  }
}

gpurt_error *gm_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value, uint32_t es) {
  (void)ctx;
  @autoreleasepool {
    uint32_t v32 = es == 1 ? (value & 0xffu) * 0x01010101u : es == 2 ? (value & 0xffffu) * 0x00010001u : value;
    id<MTLBuffer> b = gm_buf(dst);
    uint64_t off = dst->offset;
    if (q == NULL) { /* the engine drained the device */
      uint8_t *p = (uint8_t *)b.contents + off;
      if (es == 1) memset(p, (int)(v32 & 0xff), (size_t)size);
      else for (uint64_t i = 0; i < size; i += es) memcpy(p + i, &v32, es);
      return NULL;
    }
    if (es == 1 && ((off | size) & 3u) == 0) {
      uint8_t v8 = (uint8_t)v32;
      return gm_submit(q, @"memset", ^gpurt_error *(GMEnc *x) {
        gm_end_compute(x);
        id<MTLBlitCommandEncoder> blit = [x->cb blitCommandEncoder];
        if (blit == nil) return gp_err(GPURT_ERR_INTERNAL, "memset: Metal gave no blit encoder");
        [blit fillBuffer:b range:NSMakeRange((NSUInteger)off, (NSUInteger)size) value:v8];
        [blit endEncoding];
        return NULL;
      });
    }
    NSString *k = es == 1 ? @"gpurt_memset_u8" : es == 2 ? @"gpurt_memset_u16" : @"gpurt_memset_u32";
    id<MTLComputePipelineState> pso;
    gpurt_error *e;
    if ((e = groups_fit("memset", size / es)) || (e = gm_builtin_pso(gm_queue_device(q), k, &pso))) return e;
    return gm_submit(q, [@"memset (" stringByAppendingFormat:@"%@)", k], ^gpurt_error *(GMEnc *x) {
      id<MTLComputeCommandEncoder> enc = gm_compute(x);
      if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "memset: Metal gave no compute encoder");
      encode_1d(enc, pso, b, off, nil, 0, &v32, es, size / es);
      return NULL;
    });
  }
}
