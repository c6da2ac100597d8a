/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_mem.c — the engine's memory, streams and events: buffers and
 * host buffers (handles, accounting, draining before a free), copy and
 * memset (gp_contract.c's checks, endpoints resolved, the default
 * ordering), streams and events. The device work is the backend's.
 */
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

/* ---- buffers ------------------------------------------------------------------ */

/* The end of buffer_alloc and host_alloc (host): obj, its memory made, in
 * its table and its size on the runtime's count; on a failure its memory
 * and obj are freed. */
static gpurt_error *mem_insert(gp_rt *rt, int host, void *obj, uint64_t size, uintptr_t *out) {
  gpurt_error *e = gp_insert(rt, host ? &rt->hosts : &rt->bufs, obj, host ? "host_alloc" : "buffer_alloc", out);
  if (e) {
    if (host) gp_eb->host_free(rt->ctx, &((gp_host *)obj)->m);
    else gp_error_destroy(gp_eb->mem_free(rt->ctx, &((gp_buf *)obj)->m));
    free(obj);
    return e;
  }
  pthread_mutex_lock(&rt->mu);
  *(host ? &rt->host_bytes : &rt->device_bytes) += size;
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

gpurt_error *gp_e_buffer_alloc(gpurt_runtime *h, uint32_t d, uint64_t size, gpurt_buffer **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "buffer_alloc");
  if ((e = gp_check_dev(rt, d, "buffer_alloc"))) return e;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0 (must be > 0)");
  gp_buf *b = calloc(1, sizeof *b);
  if (!b) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: no memory");
  if ((e = gp_eb->mem_alloc(rt->ctx, d, size, &b->m))) {
    free(b);
    return e;
  }
  b->m.dev = d;
  b->m.size = size;
  b->m.offset = 0;
  uintptr_t hb;
  if ((e = mem_insert(rt, 0, b, size, &hb))) return e;
  *out = (gpurt_buffer *)hb;
  return NULL;
}

/* buffer_free and host_free: x's object, once the work queued on its
 * device (a host buffer's: on every device) drained, taken out of its
 * table, its bytes off the runtime's count, and freed. */
static gpurt_error *mem_free(gpurt_runtime *h, const void *x, int host) {
  if (x == NULL) return NULL;
  GP_RT_OR_RETURN(h);
  gp_handle_table *t = host ? &rt->hosts : &rt->bufs;
  void *o;
  if ((e = gp_lookup(rt, t, x, &o))) return e;
  /* Like cudaFree: work already queued on the device may still use it. */
  if ((e = gp_drain_device(rt, host ? UINT32_MAX : ((gp_buf *)o)->m.dev))) return e;
  if ((e = gp_take(rt, t, x, &o))) return e;
  gp_mem m = host ? ((gp_host *)o)->m : ((gp_buf *)o)->m;
  pthread_mutex_lock(&rt->mu);
  *(host ? &rt->host_bytes : &rt->device_bytes) -= m.size;
  pthread_mutex_unlock(&rt->mu);
  if (host) {
    gp_eb->host_free(rt->ctx, &((gp_host *)o)->m);
    free(o);
    return NULL;
  }
  free(o);
  if ((e = gp_eb->mem_free(rt->ctx, &m)))
    return gp_err_wrap(e, "buffer %#llx (%llu bytes on device %u)", H(x), U(m.size), m.dev);
  return NULL;
}

gpurt_error *gp_e_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) { return mem_free(h, buf, 0); }

gpurt_error *gp_e_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out, void **out_ptr) {
  GP_RT_OR_RETURN(h);
  if (out == NULL || out_ptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
  *out = NULL;
  *out_ptr = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0 (must be > 0)");
  gp_host *hb = calloc(1, sizeof *hb);
  if (!hb) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: no memory");
  if ((e = gp_eb->host_alloc(rt->ctx, size, &hb->m, &hb->ptr))) {
    free(hb);
    return e;
  }
  hb->m.size = size;
  hb->m.pinned = 1;
  uintptr_t hh;
  if ((e = mem_insert(rt, 1, hb, size, &hh))) return e;
  *out = (gpurt_host_buffer *)hh;
  *out_ptr = hb->ptr;
  return NULL;
}

gpurt_error *gp_e_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) { return mem_free(h, buf, 1); }

/* ---- copy and memset ------------------------------------------------------------ */

typedef struct endpoint {
  int kind; /* GP_END_* */
  uintptr_t handle;
  gp_mem m;
} endpoint;

/* Resolves one end of a copy gp_copy_check accepted. */
static gpurt_error *resolve_endpoint(gp_rt *rt, const char *side, int kind, gpurt_buffer *buf,
                                     gpurt_host_buffer *host, const void *ptr, uint64_t off, uint64_t size,
                                     endpoint *ep) {
  gpurt_error *e;
  memset(ep, 0, sizeof *ep);
  ep->kind = kind;
  if (kind == GP_END_BUFFER) {
    gp_buf *b;
    if ((e = gp_buf_get(rt, buf, &b))) return e;
    if (gp_is_lost(rt, b->m.dev)) return gp_lost_err(rt, "copy", b->m.dev);
    if ((e = gp_copy_range(side, kind, b->m.size, off, size))) return e;
    ep->handle = (uintptr_t)buf;
    gp_mem_at(b, off, &ep->m);
  } else if (kind == GP_END_HOST) {
    gp_host *hb;
    if ((e = gp_lookup(rt, &rt->hosts, host, (void **)&hb))) return e;
    if ((e = gp_copy_range(side, kind, hb->m.size, off, size))) return e;
    ep->handle = (uintptr_t)host;
    ep->m = hb->m;
    ep->m.offset = off;
    ep->m.addr = (uint64_t)(uintptr_t)hb->ptr + off;
    ep->m.size = hb->m.size - off;
  } else {
    ep->m.addr = (uint64_t)(uintptr_t)ptr;
    ep->m.size = size;
  }
  return NULL;
}

static gpurt_error *stream_matches(const char *what, const char *name, uintptr_t h, uint32_t bdev, uint32_t sdev) {
  if (bdev != sdev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u", what,
                  name, U(h), bdev, sdev);
  return NULL;
}

static void copy_desc(const endpoint *dst, const endpoint *src, uint64_t size, int sync, gp_copy *c) {
  memset(c, 0, sizeof *c);
  int dd = dst->kind == GP_END_BUFFER, sd = src->kind == GP_END_BUFFER;
  c->kind = dd && sd ? GP_COPY_D2D : dd ? GP_COPY_H2D : sd ? GP_COPY_D2H : GP_COPY_H2H;
  c->sync = sync;
  c->dst = dst->m;
  c->src = src->m;
  c->size = size;
}

/* A graph item's asynchronous copy on s (its own stream is NULL: the
 * replay's stream orders it), checked as copy checks an asynchronous one. */
gpurt_error *gp_copy_async(gp_rt *rt, gp_stream *s, const gpurt_copy_args *args, int run) {
  gpurt_copy_args in = *args, a;
  in.stream = GP_GRAPH_STREAM;
  int dk, sk;
  gpurt_error *e;
  if ((e = gp_copy_check(&in, &a, &dk, &sk))) return e;
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "copy", s->q.dev);
  endpoint src, dst;
  if ((e = resolve_endpoint(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset, a.size, &dst)) ||
      (e = resolve_endpoint(rt, "src", sk, a.src_buffer, a.src_host, a.src_ptr, a.src_offset, a.size, &src)))
    return e;
  if (dk == GP_END_BUFFER && (e = stream_matches("copy", "dst buffer", dst.handle, dst.m.dev, s->q.dev))) return e;
  if (sk == GP_END_BUFFER && (e = stream_matches("copy", "src buffer", src.handle, src.m.dev, s->q.dev))) return e;
  if (!run || a.size == 0) return NULL;
  gp_copy c;
  copy_desc(&dst, &src, a.size, 0, &c);
  return gp_eb->copy(rt->ctx, &s->q, &c);
}

gpurt_error *gp_e_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  GP_RT_OR_RETURN(h);
  gpurt_copy_args a;
  int dk, sk;
  if ((e = gp_copy_check(args, &a, &dk, &sk))) return e;
  int sync = (a.flags & GPURT_COPY_SYNC) != 0;
  gp_stream *s = NULL;
  if (a.stream) {
    if ((e = gp_lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
    if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "copy", s->q.dev);
  }
  endpoint src, dst;
  if ((e = resolve_endpoint(rt, "dst", dk, a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset, a.size, &dst)) ||
      (e = resolve_endpoint(rt, "src", sk, a.src_buffer, a.src_host, a.src_ptr, a.src_offset, a.size, &src)))
    return e;
  uint32_t sdev = s ? s->q.dev : 0;
  if (s) {
    /* A peer copy (device to device across devices) may go on a stream of
     * either device; every other copy on the stream's device. */
    int peer = dk == GP_END_BUFFER && sk == GP_END_BUFFER && dst.m.dev != src.m.dev &&
               (dst.m.dev == sdev || src.m.dev == sdev);
    if (!peer && dk == GP_END_BUFFER && (e = stream_matches("copy", "dst buffer", dst.handle, dst.m.dev, sdev)))
      return e;
    if (!peer && sk == GP_END_BUFFER && (e = stream_matches("copy", "src buffer", src.handle, src.m.dev, sdev)))
      return e;
    uint32_t other = dst.m.dev == sdev ? src.m.dev : dst.m.dev;
    if (peer && gp_is_lost(rt, other)) return gp_lost_err(rt, "copy", other);
  }
  if (a.size == 0) return NULL;
  gp_copy c;
  copy_desc(&dst, &src, a.size, sync, &c);
  if (s) {
    if ((e = gp_eb->copy(rt->ctx, &s->q, &c))) return e;
    return sync ? gp_after_wait(rt, "copy", sdev) : NULL;
  }
  /* Synchronous on the default ordering: after all work of the devices. */
  if (dk != GP_END_BUFFER && sk != GP_END_BUFFER) e = gp_drain_device(rt, UINT32_MAX);
  else {
    if (dk == GP_END_BUFFER) e = gp_drain_device(rt, dst.m.dev);
    if (!e && sk == GP_END_BUFFER && !(dk == GP_END_BUFFER && dst.m.dev == src.m.dev))
      e = gp_drain_device(rt, src.m.dev);
  }
  if (e) return e;
  if ((e = gp_eb->copy(rt->ctx, NULL, &c))) return e;
  if (dk == GP_END_BUFFER && (e = gp_after_wait(rt, "copy", dst.m.dev))) return e;
  if (sk == GP_END_BUFFER) return gp_after_wait(rt, "copy", src.m.dev);
  return NULL;
}

gpurt_error *gp_memset_on(gp_rt *rt, gp_stream *s, const gpurt_memset_args *args, int run) {
  gpurt_error *e;
  gpurt_memset_args a;
  if ((e = gp_memset_check(args, &a))) return e;
  gp_buf *b;
  if ((e = gp_buf_get(rt, a.buffer, &b))) return e;
  if (gp_is_lost(rt, b->m.dev)) return gp_lost_err(rt, "memset", b->m.dev);
  if (s && (e = stream_matches("memset", "buffer", (uintptr_t)a.buffer, b->m.dev, s->q.dev))) return e;
  if ((e = gp_memset_range(b->m.size, a.offset, a.size))) return e;
  if (!run || a.size == 0) return NULL;
  gp_mem m;
  gp_mem_at(b, a.offset, &m);
  if (s) return gp_eb->memset(rt->ctx, &s->q, &m, a.size, a.value, a.element_size);
  if ((e = gp_drain_device(rt, b->m.dev))) return e;
  return gp_eb->memset(rt->ctx, NULL, &m, a.size, a.value, a.element_size);
}

gpurt_error *gp_e_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  GP_RT_OR_RETURN(h);
  gpurt_memset_args a;
  if ((e = gp_memset_check(args, &a))) return e;
  gp_stream *s = NULL;
  if (a.stream && (e = gp_lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
  return gp_memset_on(rt, s, args, 1);
}

/* ---- streams ---------------------------------------------------------------------- */

static void stream_drop(gp_rt *rt, void *s) { gp_stream_unref(rt, s); }

gpurt_error *gp_e_stream_create(gpurt_runtime *h, uint32_t d, gpurt_stream **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "stream_create");
  if ((e = gp_check_dev(rt, d, "stream_create"))) return e;
  gp_stream *s = calloc(1, sizeof *s);
  if (!s) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: no memory");
  if ((e = gp_eb->queue_create(rt->ctx, d, &s->q))) {
    free(s);
    return e;
  }
  s->q.dev = d;
  s->refs = 1;
  GP_RETURN_INSERTED(&rt->streams, s, "stream_create", stream_drop, out);
}

gpurt_error *gp_e_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  return gp_destroy(h, offsetof(gp_rt, streams), sh, NULL, stream_drop);
}

gpurt_error *gp_e_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  GP_RT_OR_RETURN(h);
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if ((e = gp_eb->queue_sync(rt->ctx, &s->q))) return e;
  return gp_after_wait(rt, "stream_synchronize", s->q.dev);
}

gpurt_error *gp_e_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  GP_RT_OR_RETURN(h);
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "stream_query", s->q.dev);
  uint64_t p = 0;
  if ((e = gp_eb->queue_query(rt->ctx, &s->q, &p))) return e;
  if (p) return gp_err(GPURT_ERR_NOT_READY, "stream %#llx has %llu operation(s) pending", H(sh), U(p));
  return gp_after_wait(rt, "stream_query", s->q.dev);
}

/* ---- events ----------------------------------------------------------------------- */

static void event_drop(gp_rt *rt, void *o) {
  gp_event *ev = o;
  gp_eb->event_destroy(rt->ctx, ev->ev);
  free(ev);
}

gpurt_error *gp_e_event_create(gpurt_runtime *h, uint32_t d, uint32_t flags, gpurt_event **out) {
  GP_RT_OR_RETURN(h);
  GP_OUT_OR_RETURN(out, "event_create");
  if ((e = gp_check_dev(rt, d, "event_create"))) return e;
  if (flags & ~GPURT_EVENT_TIMING)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x", flags & ~GPURT_EVENT_TIMING);
  gp_event *ev = calloc(1, sizeof *ev);
  if (!ev) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: no memory");
  if ((e = gp_eb->event_create(rt->ctx, d, flags, &ev->ev))) {
    free(ev);
    return e;
  }
  ev->dev = d;
  ev->flags = flags;
  GP_RETURN_INSERTED(&rt->events, ev, "event_create", event_drop, out);
}

gpurt_error *gp_e_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  return gp_destroy(h, offsetof(gp_rt, events), eh, NULL, event_drop);
}

gpurt_error *gp_e_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  GP_RT_OR_RETURN(h);
  gp_event *ev;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  gp_stream *s = NULL;
  if (sh && (e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (gp_is_lost(rt, ev->dev)) return gp_lost_err(rt, "event_record", ev->dev);
  if (s && s->q.dev != ev->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: event %#llx is on device %u but stream %#llx is "
                  "on device %u", H(eh), ev->dev, H(sh), s->q.dev);
  if (s) return gp_eb->event_record(rt->ctx, ev->ev, &s->q);
  /* NULL stream: the device's default ordering. */
  if ((e = gp_drain_device(rt, ev->dev))) return e;
  return gp_eb->event_record(rt->ctx, ev->ev, NULL);
}

gpurt_error *gp_event_on(gp_rt *rt, gp_stream *s, gpurt_event *eh, int record, int run) {
  const char *what = record ? "event_record" : "stream_wait_event";
  gp_event *ev;
  gpurt_error *e;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&ev))) return gp_err_wrap(e, "%s", what);
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, what, s->q.dev);
  if (record && ev->dev != s->q.dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: event %#llx is on device %u but the graph's "
                  "stream is on device %u", H(eh), ev->dev, s->q.dev);
  if (!run) return NULL;
  return record ? gp_eb->event_record(rt->ctx, ev->ev, &s->q) : gp_eb->event_wait(rt->ctx, &s->q, ev->ev);
}

gpurt_error *gp_e_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  GP_RT_OR_RETURN(h);
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  gp_event *ev;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, "stream_wait_event", s->q.dev);
  return gp_eb->event_wait(rt->ctx, &s->q, ev->ev);
}

gpurt_error *gp_e_event_query(gpurt_runtime *h, gpurt_event *eh) {
  GP_RT_OR_RETURN(h);
  gp_event *ev;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (gp_is_lost(rt, ev->dev)) return gp_lost_err(rt, "event_query", ev->dev);
  int done = 1;
  if ((e = gp_eb->event_query(rt->ctx, ev->ev, &done))) return e;
  if (!done) return gp_err(GPURT_ERR_NOT_READY, "event %#llx has not completed yet", H(eh));
  return gp_after_wait(rt, "event_query", ev->dev);
}

gpurt_error *gp_e_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  GP_RT_OR_RETURN(h);
  gp_event *ev;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if ((e = gp_eb->event_sync(rt->ctx, ev->ev))) return e;
  return gp_after_wait(rt, "event_synchronize", ev->dev);
}

gpurt_error *gp_e_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh, double *out_ms) {
  GP_RT_OR_RETURN(h);
  if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
  gp_event *a, *b;
  if ((e = gp_lookup(rt, &rt->events, sh, (void **)&a))) return e;
  if ((e = gp_lookup(rt, &rt->events, eh, (void **)&b))) return e;
  if (gp_is_lost(rt, a->dev)) return gp_lost_err(rt, "event_elapsed", a->dev);
  if (gp_is_lost(rt, b->dev)) return gp_lost_err(rt, "event_elapsed", b->dev);
  if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: %s event %#llx was created without "
                  "GPURT_EVENT_TIMING", (a->flags & GPURT_EVENT_TIMING) ? "end" : "start",
                  H((a->flags & GPURT_EVENT_TIMING) ? eh : sh));
  int which = 0;
  double ms = 0;
  if ((e = gp_eb->event_elapsed(rt->ctx, a->ev, b->ev, &ms, &which))) {
    int32_t code = gp_error_code(e);
    const char *side = which ? "end" : "start";
    gpurt_event *eth = which ? eh : sh;
    if (code == GPURT_ERR_FAILED_PRECONDITION) {
      gp_error_destroy(e);
      return gp_err(code, "event_elapsed: %s event %#llx was never recorded", side, H(eth));
    }
    if (code == GPURT_ERR_NOT_READY) {
      gp_error_destroy(e);
      return gp_err(code, "event_elapsed: %s event %#llx has not completed yet", side, H(eth));
    }
    return e;
  }
  *out_ms = ms;
  return NULL;
}
