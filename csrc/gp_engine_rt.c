/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_rt.c — the engine's bottom floor: the process-wide runtime
 * table, handle lookups, the lost-device state, draining a device's
 * streams, and operand views (a buffer handle + offset resolved into a
 * gp_mem, checked against the device and the bytes an operation touches).
 * Every other gp_engine_*.c uses these; this file uses none of theirs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

const gp_backend *gp_eb;

/* The runtime table. Every call resolves its runtime first, so the lookup
 * takes no lock (as every other handle's): g_rts is made once, published
 * by g_rts_init (release), and kept until the process exits (shutdown
 * leaves it, empty: a call racing with shutdown reads live memory and a
 * freed runtime's handle stays stale). g_mu orders register / unregister
 * and the serials. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gp_handle_table g_rts;
static atomic_int g_rts_init;
static uint32_t g_serial;

gpurt_error *gp_get_rt(gpurt_runtime *h, gp_rt **out) {
  void *o = NULL;
  int st;
  if (h == NULL) st = GP_HANDLE_NULL;
  else if (!atomic_load_explicit(&g_rts_init, memory_order_acquire))
    st = ((uintptr_t)h >> 56) == GP_KIND_RUNTIME ? GP_HANDLE_STALE : GP_HANDLE_WRONG_KIND;
  else st = gp_table_lookup(&g_rts, (uintptr_t)h, &o);
  if (st == GP_HANDLE_FOREIGN) st = GP_HANDLE_STALE; /* runtimes have no owner */
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_RUNTIME, (uintptr_t)h);
  *out = o;
  return NULL;
}

int gp_rt_register(gp_rt *rt, uintptr_t *h) {
  pthread_mutex_lock(&g_mu);
  if (!atomic_load_explicit(&g_rts_init, memory_order_relaxed)) {
    gp_table_init(&g_rts, GP_KIND_RUNTIME, 0);
    atomic_store_explicit(&g_rts_init, 1, memory_order_release);
  }
  g_serial = (g_serial + 1) & 0xffff;
  if (g_serial == 0) g_serial = 1;
  rt->serial = g_serial;
  int r = gp_table_insert(&g_rts, rt, h);
  pthread_mutex_unlock(&g_mu);
  return r;
}

void gp_rt_unregister(gpurt_runtime *h) {
  pthread_mutex_lock(&g_mu);
  gp_table_remove(&g_rts, (uintptr_t)h);
  pthread_mutex_unlock(&g_mu);
}

/* Shutdown asks it; the table stays (see g_rts). */
uint32_t gp_rt_live(void) {
  pthread_mutex_lock(&g_mu);
  uint32_t live = atomic_load_explicit(&g_rts_init, memory_order_relaxed) ? atomic_load(&g_rts.live) : 0;
  pthread_mutex_unlock(&g_mu);
  return live;
}

/* Lock-free (gp_handles.c): every call resolves its handles this way. */
gpurt_error *gp_lookup(gp_rt *rt, gp_handle_table *t, const void *h, void **out) {
  (void)rt;
  int st = gp_table_lookup(t, (uintptr_t)h, out);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, t->kind, (uintptr_t)h);
  return NULL;
}

gpurt_error *gp_insert(gp_rt *rt, gp_handle_table *t, void *obj, const char *op, uintptr_t *out) {
  (void)rt;
  int r = gp_table_insert(t, obj, out);
  return r != 0 ? gp_table_full_error(op, t->kind) : NULL;
}

gpurt_error *gp_insert_or_drop(gp_rt *rt, gp_handle_table *t, void *obj, const char *op,
                               void (*drop)(gp_rt *rt, void *obj), uintptr_t *out) {
  gpurt_error *e = gp_insert(rt, t, obj, op, out);
  if (e) drop(rt, obj);
  return e;
}

gpurt_error *gp_take(gp_rt *rt, gp_handle_table *t, const void *h, void **out) {
  int st = gp_table_take(t, (uintptr_t)h, out);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, t->kind, (uintptr_t)h);
  atomic_fetch_add(&rt->destroys, 1);
  return NULL;
}

gpurt_error *gp_destroy(gpurt_runtime *h, size_t table, const void *x, const char *what,
                        void (*drop)(gp_rt *rt, void *obj)) {
  if (x == NULL) return NULL;
  GP_RT_OR_RETURN(h);
  void *o;
  if ((e = gp_take(rt, (gp_handle_table *)((char *)rt + table), x, &o))) return what ? gp_err_wrap(e, "%s", what) : e;
  drop(rt, o);
  return NULL;
}

/* ---- the lost-device state --------------------------------------------------- */

int gp_is_lost(gp_rt *rt, uint32_t dev) { return dev < rt->ndev && atomic_load(&rt->lost[dev]) != 0; }

gpurt_error *gp_lost_err(gp_rt *rt, const char *what, uint32_t dev) {
  return gp_err(GPURT_ERR_DEVICE_LOST, "%s: device %u is lost (%s); it refuses all work", what, dev,
                rt->lost_why[dev]);
}

gpurt_error *gp_check_dev(gp_rt *rt, uint32_t dev, const char *what) {
  if (dev >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device %u does not exist (the runtime has %u)", what, dev,
                  rt->ndev);
  if (gp_is_lost(rt, dev)) return gp_lost_err(rt, what, dev);
  return NULL;
}

/* Asks the backend whether device d is lost and, the first time it is,
 * records the cause. */
static void poll_one(gp_rt *rt, uint32_t d) {
  if (gp_eb->device_check == NULL || d >= rt->ndev || gp_is_lost(rt, d)) return;
  gpurt_error *e = gp_eb->device_check(rt->ctx, d);
  if (e == NULL) return;
  gpurt_error_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  gp_error_get(e, &i);
  /* The cause without the plugin's "<prefix>: ". */
  size_t skip = strlen(gp_plugin_prefix) + 2;
  const char *m = i.message_len > skip ? i.message + skip : "lost";
  int n = i.message_len > skip ? (int)(i.message_len - skip) : 4;
  snprintf(rt->lost_why[d], sizeof rt->lost_why[d], "%.*s", n, m);
  gp_error_destroy(e);
  atomic_store(&rt->lost[d], 1);
}

void gp_poll_lost(gp_rt *rt) {
  for (uint32_t d = 0; d < rt->ndev; d++) poll_one(rt, d);
}

/* After a wait: a backend drops the work queued on a device it has lost
 * and its wait then returns, so the wait's success proves nothing until
 * the backend is asked again. Every wait that reports completion ends here. */
gpurt_error *gp_after_wait(gp_rt *rt, const char *what, uint32_t dev) {
  poll_one(rt, dev);
  return gp_is_lost(rt, dev) ? gp_lost_err(rt, what, dev) : NULL;
}

/* ---- streams: references and draining ------------------------------------------ */

void gp_stream_unref(gp_rt *rt, gp_stream *s) {
  pthread_mutex_lock(&rt->mu);
  int left = --s->refs;
  pthread_mutex_unlock(&rt->mu);
  if (left == 0) {
    gp_eb->queue_destroy(rt->ctx, &s->q);
    free(s);
  }
}

gpurt_error *gp_drain_device(gp_rt *rt, uint32_t dev) {
  pthread_mutex_lock(&rt->mu);
  uint32_t cap = gp_table_cap(&rt->streams), n = 0;
  gp_stream **list = cap ? malloc(cap * sizeof *list) : NULL;
  if (cap && list == NULL) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "synchronize: no memory");
  }
  for (uint32_t i = 0; i < cap; i++) {
    gp_stream *s = gp_table_at(&rt->streams, i);
    if (s && (dev == UINT32_MAX || s->q.dev == dev)) {
      s->refs++;
      list[n++] = s;
    }
  }
  pthread_mutex_unlock(&rt->mu);
  gpurt_error *first = NULL;
  for (uint32_t i = 0; i < n; i++) {
    gpurt_error *e = gp_eb->queue_sync(rt->ctx, &list[i]->q);
    if (e && !first) first = e;
    else gp_error_destroy(e);
    gp_stream_unref(rt, list[i]);
  }
  free(list);
  return first;
}

gpurt_error *gp_stream_get(gp_rt *rt, gpurt_stream *sh, const char *what, int wrap, gp_stream **out) {
  gpurt_error *e;
  if ((e = gp_need_stream(what, sh))) return e;
  gp_stream *s;
  if ((e = gp_lookup(rt, &rt->streams, sh, (void **)&s))) return wrap ? gp_err_wrap(e, "%s", what) : e;
  if (gp_is_lost(rt, s->q.dev)) return gp_lost_err(rt, what, s->q.dev);
  *out = s;
  return NULL;
}

/* ---- buffers and operand views ---------------------------------------------------- */

gpurt_error *gp_buf_get(gp_rt *rt, gpurt_buffer *h, gp_buf **out) { return gp_lookup(rt, &rt->bufs, h, (void **)out); }

void gp_mem_at(const gp_buf *b, uint64_t off, gp_mem *out) {
  *out = b->m;
  out->offset = off;
  out->addr = b->m.addr ? b->m.addr + off : 0;
  out->size = off <= b->m.size ? b->m.size - off : 0;
}

gpurt_error *gp_view(gp_rt *rt, int style, uint32_t dev, const char *what, const char *name, gpurt_buffer *h,
                     uint64_t off, uint64_t bytes, int32_t dtype, gp_mem *out) {
  if (style == GP_VIEW_NAMED && h == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, name);
  gp_buf *b;
  gpurt_error *e = gp_buf_get(rt, h, &b);
  if (e) return style == GP_VIEW_NAMED ? gp_err_wrap(e, "%s: %s", what, name)
                                       : gp_err_wrap(e, "%s: operand %s", what, name);
  uint64_t size = b->m.size;
  if (b->m.dev != dev) {
    if (style == GP_VIEW_NAMED)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u", what,
                    name, H(h), b->m.dev, dev);
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: operand %s: buffer %#llx is on device %u but the stream is on "
                  "device %u", what, name, H(h), b->m.dev, dev);
  }
  if (style == GP_VIEW_GEMM) {
    uint64_t elems = bytes;
    size_t es = gp_dtype_size(dtype);
    bytes = elems * es;
    if (elems != 0 && bytes / es != elems) bytes = UINT64_MAX;
    if (!gp_in_range(size, off, bytes))
      return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: operand %s spans %llu elements (%llu bytes of %s) from offset "
                    "%llu, beyond buffer %#llx of %llu bytes", what, name, U(elems), U(bytes), gp_dtype_name(dtype),
                    U(off), H(h), U(size));
  } else if (!gp_in_range(size, off, bytes)) {
    if (style == GP_VIEW_NAMED)
      return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: %s needs %llu bytes from offset %llu, beyond buffer %#llx of %llu "
                    "bytes", what, name, U(bytes), U(off), H(h), U(size));
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "%s: operand %s spans %llu bytes from offset %llu, beyond buffer %#llx "
                  "of %llu bytes", what, name, U(bytes), U(off), H(h), U(size));
  }
  gp_mem_at(b, off, out);
  return NULL;
}

gpurt_error *gp_views(gp_rt *rt, int style, uint32_t dev, const char *what, const gp_view_req *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    gpurt_error *e = gp_view(rt, style, dev, what, v[i].name, v[i].h, v[i].off, v[i].bytes, 0, v[i].out);
    if (e) return e;
  }
  return NULL;
}
