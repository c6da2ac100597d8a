/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_stream.c — the mock's stream workers (one thread and FIFO per queue), queues
 * (a recording queue appends instead), events and their records.
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
  if (op->kind == OP_RECORD || op->kind == OP_WAIT) mock_rec_release(rt, op->u.ev.rec);
  if (op->kind == OP_FN && op->u.fn.release) op->u.fn.release(op->u.fn.arg);
  free(op);
}

gpurt_error *mock_op_new(const char *what, int kind, mock_op **out) {
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: no memory", what);
  op->kind = kind;
  *out = op;
  return NULL;
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

void mock_op_run(mock_rt *rt, uint32_t dev, mock_op *op) {
  int lost = mock_is_lost(rt, dev);
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
      rec_complete(rt, op->u.ev.rec);
      break;
    case OP_WAIT:
      rec_wait(rt, op->u.ev.rec);
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
    mock_op_run(s->rt, s->dev, op);

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

void mock_submit(gp_queue *q, mock_op *op) {
  if (q->capturing) {
    mock_recording *r = q->q;
    op->next = NULL;
    if (r->tail) r->tail->next = op;
    else r->head = op;
    r->tail = op;
    return;
  }
  mock_stream *s = q->q;
  int sync = op->sync; /* read first: the worker frees an async op */
  mock_enqueue_many(s, &op, 1);
  if (!sync) return;
  pthread_mutex_lock(&s->mu);
  while (!op->finished) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  mock_op_free(s->rt, op);
}

gpurt_error *mock_submit_fn(gp_queue *q, const char *what, void (*fn)(void *), void (*release)(void *), void *arg) {
  mock_op *op = NULL;
  gpurt_error *e = mock_fn_op(what, fn, release, arg, &op);
  if (e) return e;
  mock_submit(q, op);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Queues                                                              */
/* ------------------------------------------------------------------ */

gpurt_error *mock_queue_create(void *ctx, uint32_t dev, gp_queue *out) {
  mock_rt *rt = ctx;
  mock_stream *s = calloc(1, sizeof *s);
  if (!s) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: no memory");
  s->rt = rt;
  s->dev = dev;
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
  out->q = s;
  return NULL;
}

static void stream_drain(mock_stream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->pending > 0) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

/* Stops the worker after it drained, joins it and frees the stream. */
void mock_queue_destroy(void *ctx, gp_queue *q) {
  (void)ctx;
  mock_stream *s = q->q;
  stream_drain(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->done_cv);
  free(s);
}

gpurt_error *mock_queue_sync(void *ctx, gp_queue *q) {
  (void)ctx;
  stream_drain(q->q);
  return NULL;
}

gpurt_error *mock_queue_query(void *ctx, gp_queue *q, uint64_t *pending) {
  (void)ctx;
  mock_stream *s = q->q;
  pthread_mutex_lock(&s->mu);
  *pending = s->pending;
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

gpurt_error *mock_event_create(void *ctx, uint32_t dev, uint32_t flags, void **out) {
  (void)ctx;
  mock_event *ev = calloc(1, sizeof *ev);
  if (!ev) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: no memory");
  ev->dev = dev;
  ev->flags = flags;
  *out = ev;
  return NULL;
}

void mock_event_destroy(void *ctx, void *p) {
  mock_rt *rt = ctx;
  mock_event *ev = p;
  if (ev == NULL) return;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  ev->latest = NULL;
  pthread_mutex_unlock(&rt->ev_mu);
  mock_rec_release(rt, r);
  free(ev);
}

ev_rec *mock_rec_publish(mock_rt *rt, mock_event *ev) {
  ev_rec *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->refs = 2; /* the event's and the record op's */
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *old = ev->latest;
  ev->latest = r;
  pthread_mutex_unlock(&rt->ev_mu);
  mock_rec_release(rt, old);
  return r;
}

gpurt_error *mock_event_record(void *ctx, void *p, gp_queue *q) {
  mock_rt *rt = ctx;
  mock_event *ev = p;
  mock_op *op = NULL;
  gpurt_error *e;
  if (q && (e = mock_op_new("event_record", OP_RECORD, &op))) return e;
  if (q && q->capturing) { /* published when the replay is launched */
    op->u.ev.ev = ev;
    mock_submit(q, op);
    return NULL;
  }
  ev_rec *r = mock_rec_publish(rt, ev);
  if (!r) {
    free(op);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_record: no memory");
  }
  if (q) {
    op->u.ev.rec = r;
    mock_submit(q, op);
    return NULL;
  }
  /* NULL queue: the engine drained the device; the record completes now. */
  rec_complete(rt, r);
  mock_rec_release(rt, r);
  return NULL;
}

ev_rec *mock_latest_ref(mock_rt *rt, mock_event *ev) {
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  if (r) r->refs++;
  pthread_mutex_unlock(&rt->ev_mu);
  return r;
}

gpurt_error *mock_event_wait(void *ctx, gp_queue *q, void *p) {
  mock_rt *rt = ctx;
  mock_event *ev = p;
  mock_op *op = NULL;
  if (q->capturing) { /* the latest record is taken when the replay is launched */
    gpurt_error *e = mock_op_new("stream_wait_event", OP_WAIT, &op);
    if (e) return e;
    op->u.ev.ev = ev;
    mock_submit(q, op);
    return NULL;
  }
  ev_rec *r = mock_latest_ref(rt, ev);
  if (r == NULL) return NULL; /* never recorded: nothing to wait for */
  gpurt_error *e = mock_op_new("stream_wait_event", OP_WAIT, &op);
  if (e) {
    mock_rec_release(rt, r);
    return e;
  }
  op->u.ev.rec = r;
  mock_submit(q, op);
  return NULL;
}

gpurt_error *mock_event_query(void *ctx, void *p, int *done) {
  mock_rt *rt = ctx;
  mock_event *ev = p;
  pthread_mutex_lock(&rt->ev_mu);
  *done = ev->latest == NULL || ev->latest->done;
  pthread_mutex_unlock(&rt->ev_mu);
  return NULL;
}

gpurt_error *mock_event_sync(void *ctx, void *p) {
  mock_rt *rt = ctx;
  ev_rec *r = mock_latest_ref(rt, p);
  if (r) {
    rec_wait(rt, r);
    mock_rec_release(rt, r);
  }
  return NULL;
}

gpurt_error *mock_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which) {
  mock_rt *rt = ctx;
  mock_event *a = start, *b = end;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *ra = a->latest, *rb = b->latest;
  int na = ra == NULL, nb = rb == NULL;
  int pa = ra && !ra->done, pb = rb && !rb->done;
  uint64_t ta = ra ? ra->ns : 0, tb = rb ? rb->ns : 0;
  pthread_mutex_unlock(&rt->ev_mu);
  if (na || nb) {
    *which = na ? 0 : 1;
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "never recorded");
  }
  if (pa || pb) {
    *which = pa ? 0 : 1;
    return gp_err(GPURT_ERR_NOT_READY, "not completed");
  }
  *ms = ((double)tb - (double)ta) / 1e6;
  return NULL;
}
