/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_memory.c — the mock plugin's device buffers, host buffers, copy and memset.
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

gpurt_error *m_buffer_alloc(gpurt_runtime *h, uint32_t d, uint64_t size, gpurt_buffer **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: out is NULL");
  *out = NULL;
  if ((e = mock_check_dev(rt, d, "buffer_alloc"))) return e;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0 (must be > 0)");
  pthread_mutex_lock(&rt->mu);
  if (mock_alloc_fault_locked(rt)) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", d, U(size));
  }
  uint64_t free_b = rt->memory - rt->used[d];
  if (size > free_b) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: asked for %llu bytes, "
                  "%llu bytes free of %llu", d, U(size), U(free_b), U(rt->memory));
  }
  rt->used[d] += size; /* reserve while allocating */
  pthread_mutex_unlock(&rt->mu);

  mock_buf *b = calloc(1, sizeof *b);
  void *raw = NULL;
  if (b == NULL || size > SIZE_MAX - 2 * MOCK_GUARD ||
      posix_memalign(&raw, 256, (size_t)size + 2 * MOCK_GUARD) != 0) {
    free(b);
    pthread_mutex_lock(&rt->mu);
    rt->used[d] -= size;
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: the host could not "
                  "back %llu bytes (malloc failed)", d, U(size));
  }
  b->dev = d;
  b->size = size;
  b->raw = raw;
  b->data = b->raw + MOCK_GUARD;
  memset(b->raw, MOCK_GUARD_BYTE, MOCK_GUARD);
  memset(b->data, MOCK_FRESH, size);
  memset(b->data + size, MOCK_GUARD_BYTE, MOCK_GUARD);
  uintptr_t hb;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->bufs, b, &hb);
  if (r != 0) rt->used[d] -= size;
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(raw);
    free(b);
    return gp_table_full_error("buffer_alloc", GP_KIND_BUFFER);
  }
  *out = (gpurt_buffer *)hb;
  return NULL;
}

gpurt_error *m_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) {
  if (buf == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_buf *b;
  if ((e = mock_lookup(rt, &rt->bufs, buf, (void **)&b))) return e;
  /* Like cudaFree: work already queued on the device may still use it. */
  if ((e = mock_drain_device(rt, b->dev))) return e;
  pthread_mutex_lock(&rt->mu);
  b = gp_table_remove(&rt->bufs, (uintptr_t)buf);
  if (b) rt->used[b->dev] -= b->size;
  pthread_mutex_unlock(&rt->mu);
  if (b == NULL) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_BUFFER, (uintptr_t)buf);
  return mock_buf_release(b, (uintptr_t)buf);
}

gpurt_error *m_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out, void **out_ptr) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL || out_ptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
  *out = NULL;
  *out_ptr = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0 (must be > 0)");
  pthread_mutex_lock(&rt->mu);
  int fault = mock_alloc_fault_locked(rt);
  pthread_mutex_unlock(&rt->mu);
  if (fault)
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", U(size));
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  uint64_t asz = (size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
  mock_host *hb = calloc(1, sizeof *hb);
  void *p = NULL;
  if (hb == NULL || asz < size || asz > SIZE_MAX || posix_memalign(&p, (size_t)page, (size_t)asz) != 0) {
    free(hb);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory: asked for %llu bytes "
                  "(malloc failed)", U(size));
  }
  memset(p, 0, (size_t)asz);
  hb->size = size;
  hb->alloc_size = asz;
  hb->ptr = p;
  uintptr_t hh;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->hosts, hb, &hh);
  if (r == 0) rt->host_bytes += size;
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(p);
    free(hb);
    return gp_table_full_error("host_alloc", GP_KIND_HOST_BUFFER);
  }
  *out = (gpurt_host_buffer *)hh;
  *out_ptr = p;
  return NULL;
}

gpurt_error *m_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) {
  if (buf == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_host *hb;
  if ((e = mock_lookup(rt, &rt->hosts, buf, (void **)&hb))) return e;
  if ((e = mock_drain_device(rt, UINT32_MAX))) return e;
  pthread_mutex_lock(&rt->mu);
  hb = gp_table_remove(&rt->hosts, (uintptr_t)buf);
  if (hb) rt->host_bytes -= hb->size;
  pthread_mutex_unlock(&rt->mu);
  if (hb == NULL) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_HOST_BUFFER, (uintptr_t)buf);
  memset(hb->ptr, MOCK_POISON, (size_t)hb->alloc_size);
  free(hb->ptr);
  free(hb);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Copy and memset                                                     */
/* ------------------------------------------------------------------ */

typedef struct endpoint {
  int kind; /* GP_END_BUFFER, GP_END_HOST, GP_END_PTR */
  uint32_t dev;
  uintptr_t handle;
  unsigned char *p;
} endpoint;

/* Resolves one end of a copy gp_copy_check accepted (kind is its GP_END_*). */
static gpurt_error *resolve_endpoint(mock_rt *rt, const char *side, int kind, gpurt_buffer *buf,
                                     gpurt_host_buffer *host, const void *ptr, uint64_t off,
                                     uint64_t size, endpoint *ep) {
  gpurt_error *e;
  ep->kind = kind;
  if (kind == GP_END_BUFFER) {
    mock_buf *b;
    if ((e = mock_lookup(rt, &rt->bufs, buf, (void **)&b))) return e;
    if (mock_is_lost(rt, b->dev)) return mock_lost_err("copy", b->dev);
    if ((e = gp_copy_range(side, kind, b->size, off, size))) return e;
    ep->dev = b->dev;
    ep->handle = (uintptr_t)buf;
    ep->p = b->data + off;
  } else if (kind == GP_END_HOST) {
    mock_host *hb;
    if ((e = mock_lookup(rt, &rt->hosts, host, (void **)&hb))) return e;
    if ((e = gp_copy_range(side, kind, hb->size, off, size))) return e;
    ep->handle = (uintptr_t)host;
    ep->p = hb->ptr + off;
  } else {
    ep->p = (unsigned char *)(uintptr_t)ptr;
  }
  return NULL;
}

static gpurt_error *stream_matches(const char *what, const char *name, uintptr_t h, uint32_t bdev,
                                   uint32_t sdev) {
  if (bdev != sdev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u",
                  what, name, U(h), bdev, sdev);
  return NULL;
}

/* An asynchronous copy of a graph item on stream s (the item's own stream
 * is NULL: csrc's graph checks allow it, and the replay's stream orders
 * it); checked as copy checks an asynchronous copy. */
gpurt_error *mock_copy_prepare(mock_rt *rt, mock_stream *s, const gpurt_copy_args *args, mock_op **out) {
  *out = NULL;
  gpurt_copy_args in = *args, a;
  in.stream = GP_GRAPH_STREAM;
  int dk, sk;
  gpurt_error *e;
  if ((e = gp_copy_check(&in, &a, &dk, &sk))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("copy", s->dev);
  endpoint src, dst;
  memset(&src, 0, sizeof src);
  memset(&dst, 0, sizeof dst);
  if ((e = resolve_endpoint(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset, a.size, &dst)))
    return e;
  if ((e = resolve_endpoint(rt, "src", sk, a.src_buffer, a.src_host, a.src_ptr, a.src_offset, a.size, &src)))
    return e;
  if (dk == GP_END_BUFFER && (e = stream_matches("copy", "dst buffer", dst.handle, dst.dev, s->dev))) return e;
  if (sk == GP_END_BUFFER && (e = stream_matches("copy", "src buffer", src.handle, src.dev, s->dev))) return e;
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "copy: no memory");
  op->kind = OP_COPY;
  op->u.copy.dst = dst.p;
  op->u.copy.src = src.p;
  op->u.copy.size = a.size;
  *out = op;
  return NULL;
}

gpurt_error *m_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  gpurt_copy_args a;
  int dk, sk;
  if ((e = gp_copy_check(args, &a, &dk, &sk))) return e;
  int sync = (a.flags & GPURT_COPY_SYNC) != 0;
  mock_stream *s = NULL;
  if (a.stream) {
    if ((e = mock_lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
    if (mock_is_lost(rt, s->dev)) return mock_lost_err("copy", s->dev);
  }
  endpoint src, dst;
  memset(&src, 0, sizeof src);
  memset(&dst, 0, sizeof dst);
  if ((e = resolve_endpoint(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset, a.size, &dst)))
    return e;
  if ((e = resolve_endpoint(rt, "src", sk, a.src_buffer, a.src_host, a.src_ptr, a.src_offset, a.size, &src)))
    return e;
  if (s) {
    /* A peer copy (device to device across devices) may go on a stream of
     * either device; every other copy on the stream's device. */
    int peer = dk == GP_END_BUFFER && sk == GP_END_BUFFER && dst.dev != src.dev &&
               (dst.dev == s->dev || src.dev == s->dev);
    if (!peer && dk == GP_END_BUFFER && (e = stream_matches("copy", "dst buffer", dst.handle, dst.dev, s->dev)))
      return e;
    if (!peer && sk == GP_END_BUFFER && (e = stream_matches("copy", "src buffer", src.handle, src.dev, s->dev)))
      return e;
    uint32_t other = dst.dev == s->dev ? src.dev : dst.dev;
    if (peer && mock_is_lost(rt, other)) return mock_lost_err("copy", other);
  }
  if (a.size == 0) return NULL;

  if (s) {
    mock_op *op = calloc(1, sizeof *op);
    if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "copy: no memory");
    op->kind = OP_COPY;
    op->sync = sync;
    op->u.copy.dst = dst.p;
    op->u.copy.src = src.p;
    op->u.copy.size = a.size;
    mock_submit(s, op);
    if (sync && mock_is_lost(rt, s->dev)) return mock_lost_err("copy", s->dev);
    return NULL;
  }
  /* Synchronous on the default ordering: after all work of the devices. */
  if (dk != GP_END_BUFFER && sk != GP_END_BUFFER) e = mock_drain_device(rt, UINT32_MAX);
  else {
    if (dk == GP_END_BUFFER) e = mock_drain_device(rt, dst.dev);
    if (!e && sk == GP_END_BUFFER && !(dk == GP_END_BUFFER && dst.dev == src.dev))
      e = mock_drain_device(rt, src.dev);
  }
  if (e) return e;
  memmove(dst.p, src.p, (size_t)a.size);
  return NULL;
}

gpurt_error *mock_memset_prepare(mock_rt *rt, mock_stream *s, const gpurt_memset_args *args, uint32_t *dev,
                                 mock_op **out) {
  gpurt_error *e;
  gpurt_memset_args a;
  *out = NULL;
  if ((e = gp_memset_check(args, &a))) return e;
  uint32_t es = a.element_size;
  mock_buf *b;
  if ((e = mock_lookup(rt, &rt->bufs, a.buffer, (void **)&b))) return e;
  if (mock_is_lost(rt, b->dev)) return mock_lost_err("memset", b->dev);
  if (s && (e = stream_matches("memset", "buffer", (uintptr_t)a.buffer, b->dev, s->dev))) return e;
  if ((e = gp_memset_range(b->size, a.offset, a.size))) return e;
  if (a.size == 0) return NULL;
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "memset: no memory");
  op->kind = OP_MEMSET;
  op->u.fill.dst = b->data + a.offset;
  op->u.fill.size = a.size;
  op->u.fill.value = a.value;
  op->u.fill.es = es;
  *dev = b->dev;
  *out = op;
  return NULL;
}

gpurt_error *m_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  gpurt_memset_args a;
  if ((e = gp_memset_check(args, &a))) return e;
  mock_stream *s = NULL;
  if (a.stream && (e = mock_lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
  mock_op *op;
  uint32_t dev = 0;
  if ((e = mock_memset_prepare(rt, s, args, &dev, &op))) return e;
  if (op == NULL) return NULL;
  if (s) {
    mock_submit(s, op);
    return NULL;
  }
  if ((e = mock_drain_device(rt, dev))) { free(op); return e; }
  mock_stream tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.rt = rt;
  tmp.dev = dev;
  mock_op_run(&tmp, op);
  free(op);
  return NULL;
}
