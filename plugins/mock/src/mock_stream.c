/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_stream.c — the mock plugin's stream workers (one thread and FIFO per stream),
 * streams and events.
 * See mock_internal.h for the objects and the locking.
 */
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* ------------------------------------------------------------------ */
/* Event records                                                       */
/* ------------------------------------------------------------------ */

void mock_rec_release(mock_rt *rt, ev_rec *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&rt->ev_mu);
  int left = --r->refs;
  pthread_mutex_unlock(&rt->ev_mu);
  if (left == 0) free(r);
}

static void rec_complete(mock_rt *rt, ev_rec *r) {
  pthread_mutex_lock(&rt->ev_mu);
  r->ns = mock_now_ns();
  r->done = 1;
  pthread_cond_broadcast(&rt->ev_cv);
  pthread_mutex_unlock(&rt->ev_mu);
}

static void rec_wait(mock_rt *rt, ev_rec *r) {
  pthread_mutex_lock(&rt->ev_mu);
  while (!r->done) pthread_cond_wait(&rt->ev_cv, &rt->ev_mu);
  pthread_mutex_unlock(&rt->ev_mu);
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

void mock_op_free(mock_rt *rt, mock_op *op) {
  if (op->kind == OP_RECORD || op->kind == OP_WAIT) mock_rec_release(rt, op->u.rec);
  if (op->kind == OP_GEMM) free(op->u.gemm);
  if (op->kind == OP_FN && op->u.fn.release) op->u.fn.release(op->u.fn.arg);
  free(op);
}

gpurt_error *mock_fn_op(const char *what, void (*fn)(void *), void (*release)(void *), void *arg, mock_op **out) {
  mock_op *op = calloc(1, sizeof *op);
  if (!op) {
    release(arg);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", what);
  }
  op->kind = OP_FN;
  op->u.fn.fn = fn;
  op->u.fn.release = release;
  op->u.fn.arg = arg;
  *out = op;
  return NULL;
}

gpurt_error *mock_call(gpurt_runtime *h, gpurt_stream *sh, const char *what, int wrap, mock_prepare_fn prep,
                       void *object, const void *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if ((e = gp_need_stream(what, sh))) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return wrap ? gp_err_wrap(e, "%s", what) : e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err(what, s->dev);
  mock_op *op;
  if ((e = prep(rt, s, sh, object, args, &op))) return e;
  if (op) mock_submit(s, op);
  return NULL;
}

void mock_op_run(mock_stream *s, mock_op *op) {
  mock_rt *rt = s->rt;
  int lost = mock_is_lost(rt, s->dev);
  switch (op->kind) {
    case OP_COPY:
      if (!lost && op->u.copy.size) memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.size);
      break;
    case OP_MEMSET: {
      if (lost) break;
      unsigned char *d = op->u.fill.dst;
      uint32_t es = op->u.fill.es, v = op->u.fill.value;
      if (es == 1) { memset(d, (int)(v & 0xff), op->u.fill.size); break; }
      unsigned char pat[4];
      memcpy(pat, &v, 4); /* little-endian: the low element_size bytes */
      for (uint64_t i = 0; i < op->u.fill.size; i += es) memcpy(d + i, pat, es);
      break;
    }
    case OP_LAUNCH:
      if (!lost) gp_launch_run(&op->u.launch);
      break;
    case OP_RECORD:
      rec_complete(rt, op->u.rec);
      break;
    case OP_WAIT:
      rec_wait(rt, op->u.rec);
      break;
    case OP_GEMM:
      if (!lost) gp_gemm_run(op->u.gemm);
      break;
    case OP_FN:
      if (!lost) op->u.fn.fn(op->u.fn.arg);
      break;
  }
}

static void *stream_main(void *arg) {
  mock_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work_cv, &s->mu);
    if (s->head == NULL) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    mock_op *op = s->head;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);

    /* Run later than the caller expects: ordering bugs show up. */
    unsigned d = s->rt->delay_us;
    if (d) usleep(d);
    else sched_yield();
    mock_op_run(s, op);

    /* A sync op belongs to its waiter once `finished` is set. */
    int sync = op->sync;
    pthread_mutex_lock(&s->mu);
    s->pending--;
    if (sync) op->finished = 1;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
    if (!sync) mock_op_free(s->rt, op);
  }
  return NULL;
}

/* Appends n ops (n >= 1), in order, under one hold of s->mu: nothing
 * another thread enqueues can land between them. */
void mock_enqueue_many(mock_stream *s, mock_op *const *ops, uint64_t n) {
  for (uint64_t i = 0; i + 1 < n; i++) ops[i]->next = ops[i + 1];
  ops[n - 1]->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = ops[0];
  else s->head = ops[0];
  s->tail = ops[n - 1];
  s->pending += n;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
}

static void enqueue(mock_stream *s, mock_op *op) { mock_enqueue_many(s, &op, 1); }

/* Enqueues op and, when sync, waits for it and frees it. */
void mock_submit(mock_stream *s, mock_op *op) {
  if (!op->sync) {
    enqueue(s, op);
    return;
  }
  enqueue(s, op);
  pthread_mutex_lock(&s->mu);
  while (!op->finished) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  mock_op_free(s->rt, op);
}

static void stream_drain(mock_stream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->pending > 0) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static void stream_unref(mock_rt *rt, mock_stream *s) {
  pthread_mutex_lock(&rt->mu);
  int left = --s->refs;
  pthread_mutex_unlock(&rt->mu);
  if (left == 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
  }
}

/* Waits until every stream of the runtime on dev (UINT32_MAX: all) drained. */
gpurt_error *mock_drain_device(mock_rt *rt, uint32_t dev) {
  pthread_mutex_lock(&rt->mu);
  uint32_t cap = gp_table_cap(&rt->streams), n = 0;
  mock_stream **list = cap ? malloc(cap * sizeof *list) : NULL;
  if (cap && list == NULL) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "synchronize: no memory");
  }
  for (uint32_t i = 0; i < cap; i++) {
    mock_stream *s = gp_table_at(&rt->streams, i);
    if (s && (dev == UINT32_MAX || s->dev == dev)) {
      s->refs++;
      list[n++] = s;
    }
  }
  pthread_mutex_unlock(&rt->mu);
  for (uint32_t i = 0; i < n; i++) {
    stream_drain(list[i]);
    stream_unref(rt, list[i]);
  }
  free(list);
  return NULL;
}

/* Stops the worker after it drained, joins it and drops the table's ref. */
void mock_stream_finish(mock_rt *rt, mock_stream *s) {
  stream_drain(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  stream_unref(rt, s);
}

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

gpurt_error *m_stream_create(gpurt_runtime *h, uint32_t d, gpurt_stream **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "stream_create: out is NULL");
  *out = NULL;
  if ((e = mock_check_dev(rt, d, "stream_create"))) return e;
  mock_stream *s = calloc(1, sizeof *s);
  if (!s) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: no memory");
  s->rt = rt;
  s->dev = d;
  s->refs = 1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  int r = pthread_create(&s->thread, NULL, stream_main, s);
  if (r != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: cannot start the worker thread: %s", strerror(r));
  }
  uintptr_t hs;
  pthread_mutex_lock(&rt->mu);
  r = gp_table_insert(&rt->streams, s, &hs);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    mock_stream_finish(rt, s);
    return gp_table_full_error("stream_create", GP_KIND_STREAM);
  }
  *out = (gpurt_stream *)hs;
  return NULL;
}

gpurt_error *m_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  if (sh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_take(&rt->streams, (uintptr_t)sh, &o);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_STREAM, (uintptr_t)sh);
  mock_stream_finish(rt, o);
  return NULL;
}

gpurt_error *m_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  stream_drain(s);
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("stream_synchronize", s->dev);
  return NULL;
}

gpurt_error *m_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("stream_query", s->dev);
  pthread_mutex_lock(&s->mu);
  uint64_t p = s->pending;
  pthread_mutex_unlock(&s->mu);
  if (p) return gp_err(GPURT_ERR_NOT_READY, "stream %#llx has %llu operation(s) pending", H(sh), U(p));
  return NULL;
}

gpurt_error *m_event_create(gpurt_runtime *h, uint32_t d, uint32_t flags, gpurt_event **out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: out is NULL");
  *out = NULL;
  if ((e = mock_check_dev(rt, d, "event_create"))) return e;
  if (flags & ~GPURT_EVENT_TIMING)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x", flags & ~GPURT_EVENT_TIMING);
  mock_event *ev = calloc(1, sizeof *ev);
  if (!ev) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: no memory");
  ev->dev = d;
  ev->flags = flags;
  uintptr_t he;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->events, ev, &he);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(ev);
    return gp_table_full_error("event_create", GP_KIND_EVENT);
  }
  *out = (gpurt_event *)he;
  return NULL;
}

gpurt_error *m_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  if (eh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_take(&rt->events, (uintptr_t)eh, &o);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_EVENT, (uintptr_t)eh);
  mock_event *ev = o;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  ev->latest = NULL;
  pthread_mutex_unlock(&rt->ev_mu);
  mock_rec_release(rt, r);
  free(ev);
  return NULL;
}

gpurt_error *m_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = mock_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  mock_stream *s = NULL;
  if (sh && (e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (mock_is_lost(rt, ev->dev)) return mock_lost_err("event_record", ev->dev);
  if (s && s->dev != ev->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: event %#llx is on device %u but stream %#llx is "
                  "on device %u", H(eh), ev->dev, H(sh), s->dev);
  ev_rec *r = calloc(1, sizeof *r);
  mock_op *op = s ? calloc(1, sizeof *op) : NULL;
  if (!r || (s && !op)) {
    free(r);
    free(op);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_record: no memory");
  }
  r->refs = s ? 2 : 1;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *old = ev->latest;
  ev->latest = r;
  pthread_mutex_unlock(&rt->ev_mu);
  mock_rec_release(rt, old);
  if (s) {
    op->kind = OP_RECORD;
    op->u.rec = r;
    mock_submit(s, op);
    return NULL;
  }
  /* NULL stream: the device's default ordering. */
  if ((e = mock_drain_device(rt, ev->dev))) return e;
  rec_complete(rt, r);
  return NULL;
}

/* The event's latest record with a reference, or NULL (never recorded). */
ev_rec *mock_latest_ref(mock_rt *rt, mock_event *ev) {
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  if (r) r->refs++;
  pthread_mutex_unlock(&rt->ev_mu);
  return r;
}

gpurt_error *m_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = mock_lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  mock_event *ev;
  if ((e = mock_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (mock_is_lost(rt, s->dev)) return mock_lost_err("stream_wait_event", s->dev);
  ev_rec *r = mock_latest_ref(rt, ev);
  if (r == NULL) return NULL; /* never recorded: nothing to wait for */
  mock_op *op = calloc(1, sizeof *op);
  if (!op) {
    mock_rec_release(rt, r);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_wait_event: no memory");
  }
  op->kind = OP_WAIT;
  op->u.rec = r;
  mock_submit(s, op);
  return NULL;
}

gpurt_error *m_event_query(gpurt_runtime *h, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = mock_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (mock_is_lost(rt, ev->dev)) return mock_lost_err("event_query", ev->dev);
  pthread_mutex_lock(&rt->ev_mu);
  int pending = ev->latest != NULL && !ev->latest->done;
  pthread_mutex_unlock(&rt->ev_mu);
  if (pending) return gp_err(GPURT_ERR_NOT_READY, "event %#llx has not completed yet", H(eh));
  return NULL;
}

gpurt_error *m_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = mock_lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  ev_rec *r = mock_latest_ref(rt, ev);
  if (r) {
    rec_wait(rt, r);
    mock_rec_release(rt, r);
  }
  if (mock_is_lost(rt, ev->dev)) return mock_lost_err("event_synchronize", ev->dev);
  return NULL;
}

gpurt_error *m_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh, double *out_ms) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
  mock_event *a, *b;
  if ((e = mock_lookup(rt, &rt->events, sh, (void **)&a))) return e;
  if ((e = mock_lookup(rt, &rt->events, eh, (void **)&b))) return e;
  if (mock_is_lost(rt, a->dev)) return mock_lost_err("event_elapsed", a->dev);
  if (mock_is_lost(rt, b->dev)) return mock_lost_err("event_elapsed", b->dev);
  if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: %s event %#llx was created without "
                  "GPURT_EVENT_TIMING", (a->flags & GPURT_EVENT_TIMING) ? "end" : "start",
                  H((a->flags & GPURT_EVENT_TIMING) ? eh : sh));
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *ra = a->latest, *rb = b->latest;
  int na = ra == NULL, nb = rb == NULL;
  int pa = ra && !ra->done, pb = rb && !rb->done;
  uint64_t ta = ra ? ra->ns : 0, tb = rb ? rb->ns : 0;
  pthread_mutex_unlock(&rt->ev_mu);
  if (na || nb)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: %s event %#llx was never recorded",
                  na ? "start" : "end", H(na ? sh : eh));
  if (pa || pb)
    return gp_err(GPURT_ERR_NOT_READY, "event_elapsed: %s event %#llx has not completed yet",
                  pa ? "start" : "end", H(pa ? sh : eh));
  *out_ms = ((double)tb - (double)ta) / 1e6;
  return NULL;
}
