/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_stream.m — streams (one MTLCommandQueue each), the encoding of
 * operations into command buffers and their submission (gm_submit: eager on
 * a stream, kept on a recording), and events (MTLSharedEvent).
 *
 * A stream is strictly ordered whatever resources its work touches: each
 * command buffer waits for the previous one through the stream's timeline
 * event and signals its own value. Completion handlers count finished
 * command buffers (queue_sync waits on the count, no lock held), and the
 * first command-buffer error surfaces at the next queue_sync, naming the
 * operation, with the NSError text and its MTLCommandBufferError code as
 * the vendor code. MTLCommandBufferErrorDeviceRemoved marks the device lost
 * (the engine learns it through device_check). A failed command buffer's
 * timeline value and event records are signalled from the CPU so work
 * behind it does not hang.
 *
 * Every entry runs inside its own @autoreleasepool: the calling thread (a
 * Go-managed OS thread) has no pool of its own.
 */
#import "metal_internal.h"

#include <string.h>

/* ---- encoding ------------------------------------------------------------------------ */

id<MTLComputeCommandEncoder> gm_compute(GMEnc *x) {
  /* Threadgroup memory set for an earlier dispatch stays set: a dispatch
   * that sets none gets a fresh encoder (same command buffer). */
  if (x->shared_set > 0) gm_end_compute(x);
  if (x->compute == nil) {
    x->compute = [x->cb computeCommandEncoder];
    x->shared_set = 0;
  }
  return x->compute;
}

void gm_end_compute(GMEnc *x) {
  if (x->compute != nil) [x->compute endEncoding];
  x->compute = nil;
  x->shared_set = 0;
}

void gm_bind(id<MTLComputeCommandEncoder> enc, const gp_mem *m, const gp_mem *instead, NSUInteger i) {
  if (m->obj == NULL && instead != NULL) m = instead; /* every index is bound */
  [enc setBuffer:gm_buf(m) offset:(NSUInteger)m->offset atIndex:i];
}

GMDevice *gm_queue_device(gp_queue *q) {
  if (q->capturing) return ((__bridge GMRecording *)q->q)->device;
  return ((__bridge GMStream *)q->q)->device;
}

/* ---- streams -------------------------------------------------------------------------- */

gpurt_error *gm_stream_begin(GMStream *s, GMEnc *__strong *out) {
  pthread_mutex_lock(&s->enc);
  id<MTLCommandBuffer> cb = [s->queue commandBuffer];
  if (cb == nil) {
    pthread_mutex_unlock(&s->enc);
    return gp_err(GPURT_ERR_INTERNAL, "device %u: Metal gave no command buffer", s->device->index);
  }
  pthread_mutex_lock(&s->mu);
  uint64_t prev = s->committed;
  pthread_mutex_unlock(&s->mu);
  /* Strict stream order, whatever resources the work touches. */
  if (prev > 0) [cb encodeWaitForEvent:s->timeline value:prev];
  GMEnc *x = [[GMEnc alloc] init];
  x->device = s->device;
  x->cb = cb;
  *out = x;
  return NULL;
}

/* An event record is done: its value signalled (from the CPU when failed
 * is set) and its completion time taken. */
static void event_done(GMEvent *ev, uint64_t v, int failed) {
  if (failed && ev->ev.signaledValue < v) ev->ev.signaledValue = v;
  uint64_t now = gm_now_ns();
  pthread_mutex_lock(&ev->mu);
  if (v > ev->done) {
    ev->done = v;
    ev->time_ns = now;
  }
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

void gm_stream_abort(GMStream *s, GMEnc *x) {
  gm_end_compute(x);
  for (NSUInteger i = 0; i < x->signal_events.count; i++)
    event_done(x->signal_events[i], x->signal_values[i].unsignedLongLongValue, 1);
  pthread_mutex_unlock(&s->enc);
}

void gm_stream_commit(GMStream *s, GMEnc *x, NSString *what) {
  gm_end_compute(x);
  uint64_t seq;
  pthread_mutex_lock(&s->mu);
  seq = ++s->committed;
  pthread_mutex_unlock(&s->mu);
  id<MTLCommandBuffer> cb = x->cb;
  cb.label = what;
  [cb encodeSignalEvent:s->timeline value:seq];
  GMStream *st = s; /* the handler keeps the stream alive until it runs */
  id<MTLSharedEvent> timeline = s->timeline;
  GMDevice *dev = s->device;
  NSArray<GMEvent *> *evs = [x->signal_events copy];
  NSArray<NSNumber *> *vals = [x->signal_values copy];
  [cb addCompletedHandler:^(id<MTLCommandBuffer> done) {
    gpurt_error *err = NULL;
    int failed = done.status == MTLCommandBufferStatusError;
    if (failed) {
      NSError *ne = done.error;
      if (ne.code == MTLCommandBufferErrorDeviceRemoved) {
        gm_mark_lost(dev, "the device was removed");
        err = gm_nserror(GPURT_ERR_DEVICE_LOST, ne, "device %u: %s: device removed", dev->index,
                         what.UTF8String);
      } else {
        err = gm_nserror(GPURT_ERR_LAUNCH_FAILED, ne, "device %u: %s failed (MTLCommandBufferError %ld)",
                         dev->index, what.UTF8String, (long)ne.code);
      }
      /* Work queued behind a failed command buffer must not wait forever. */
      if (timeline.signaledValue < seq) timeline.signaledValue = seq;
    }
    for (NSUInteger i = 0; i < evs.count; i++) event_done(evs[i], vals[i].unsignedLongLongValue, failed);
    pthread_mutex_lock(&st->mu);
    if (err != NULL) {
      if (st->pending == NULL) st->pending = err;
      else gp_error_destroy(err);
    }
    st->completed++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
  }];
  [cb commit];
  pthread_mutex_unlock(&s->enc);
}

void gm_stream_wait(GMStream *s) {
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->committed;
  while (s->completed < target) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

gpurt_error *gm_submit(gp_queue *q, NSString *what, gm_encode_fn fn) {
  if (q->capturing) {
    GMRecording *r = (__bridge GMRecording *)q->q;
    [r->steps addObject:[fn copy]]; /* off the stack: the block outlives this call */
    [r->names addObject:what];
    return NULL;
  }
  GMStream *s = (__bridge GMStream *)q->q;
  GMEnc *x;
  gpurt_error *e = gm_stream_begin(s, &x);
  if (e) return e;
  if ((e = fn(x))) {
    gm_stream_abort(s, x);
    return e;
  }
  gm_stream_commit(s, x, what);
  return NULL;
}

gpurt_error *gm_queue_create(void *ctx, uint32_t dev, gp_queue *out) {
  @autoreleasepool {
    GMDevice *d = gm_dev(ctx, dev);
    GMStream *s = [[GMStream alloc] init];
    s->device = d;
    s->queue = [d->dev newCommandQueue];
    s->timeline = [d->dev newSharedEvent];
    if (s->queue == nil || s->timeline == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: device %u: Metal gave no command queue or shared event",
                    dev);
    s->queue.label = @"gpurt stream";
    out->q = (void *)CFBridgingRetain(s);
    return NULL;
  }
}

void gm_queue_destroy(void *ctx, gp_queue *q) {
  (void)ctx;
  @autoreleasepool {
    GMStream *s = CFBridgingRelease(q->q);
    q->q = NULL;
    gm_stream_wait(s);
    /* An error nobody synchronised for goes with the stream. */
  }
}

gpurt_error *gm_queue_sync(void *ctx, gp_queue *q) {
  (void)ctx;
  GMStream *s = (__bridge GMStream *)q->q;
  gm_stream_wait(s);
  pthread_mutex_lock(&s->mu);
  gpurt_error *e = s->pending;
  s->pending = NULL;
  pthread_mutex_unlock(&s->mu);
  return e;
}

gpurt_error *gm_queue_query(void *ctx, gp_queue *q, uint64_t *pending) {
  (void)ctx;
  GMStream *s = (__bridge GMStream *)q->q;
  pthread_mutex_lock(&s->mu);
  *pending = s->committed - s->completed;
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- events ------------------------------------------------------------------------------ */

gpurt_error *gm_event_create(void *ctx, uint32_t dev, uint32_t flags, void **out) {
  @autoreleasepool {
    GMDevice *d = gm_dev(ctx, dev);
    GMEvent *ev = [[GMEvent alloc] init];
    ev->device = d;
    ev->flags = flags;
    ev->ev = [d->dev newSharedEvent];
    if (ev->ev == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: device %u: Metal gave no shared event", dev);
    *out = (void *)CFBridgingRetain(ev);
    return NULL;
  }
}

void gm_event_destroy(void *ctx, void *ev) {
  (void)ctx;
  @autoreleasepool {
    /* In-flight records hold their own reference (the completion handler's). */
    (void)CFBridgingRelease(ev);
  }
}

gpurt_error *gm_event_record(void *ctx, void *evp, gp_queue *q) {
  (void)ctx;
  @autoreleasepool {
    GMEvent *ev = (__bridge GMEvent *)evp;
    if (q == NULL) {
      /* The default ordering: the engine drained the device; recorded now. */
      uint64_t now = gm_now_ns();
      pthread_mutex_lock(&ev->mu);
      uint64_t v = ++ev->recorded;
      ev->ev.signaledValue = v;
      ev->done = v;
      ev->time_ns = now;
      pthread_cond_broadcast(&ev->cv);
      pthread_mutex_unlock(&ev->mu);
      return NULL;
    }
    /* The record's value is taken when it is encoded: at once on a stream,
     * when the replay is launched on a recording (as an eager record at
     * that point would). */
    return gm_submit(q, @"event_record", ^gpurt_error *(GMEnc *x) {
      gm_end_compute(x);
      pthread_mutex_lock(&ev->mu);
      uint64_t v = ++ev->recorded;
      pthread_mutex_unlock(&ev->mu);
      [x->cb encodeSignalEvent:ev->ev value:v];
      [x->signal_events addObject:ev];
      [x->signal_values addObject:@(v)];
      return NULL;
    });
  }
}

gpurt_error *gm_event_wait(void *ctx, gp_queue *q, void *evp) {
  (void)ctx;
  @autoreleasepool {
    GMEvent *ev = (__bridge GMEvent *)evp;
    /* The latest record when encoded; never recorded: nothing to wait for. */
    return gm_submit(q, @"stream_wait_event", ^gpurt_error *(GMEnc *x) {
      pthread_mutex_lock(&ev->mu);
      uint64_t v = ev->recorded;
      pthread_mutex_unlock(&ev->mu);
      if (v == 0) return NULL;
      gm_end_compute(x);
      [x->cb encodeWaitForEvent:ev->ev value:v];
      return NULL;
    });
  }
}

gpurt_error *gm_event_query(void *ctx, void *evp, int *done) {
  (void)ctx;
  GMEvent *ev = (__bridge GMEvent *)evp;
  pthread_mutex_lock(&ev->mu);
  *done = ev->done >= ev->recorded;
  pthread_mutex_unlock(&ev->mu);
  return NULL;
}

gpurt_error *gm_event_sync(void *ctx, void *evp) {
  (void)ctx;
  GMEvent *ev = (__bridge GMEvent *)evp;
  pthread_mutex_lock(&ev->mu);
  uint64_t target = ev->recorded;
  while (ev->done < target) pthread_cond_wait(&ev->cv, &ev->mu);
  pthread_mutex_unlock(&ev->mu);
  return NULL;
}

gpurt_error *gm_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which) {
  (void)ctx;
  GMEvent *ev[2] = {(__bridge GMEvent *)start, (__bridge GMEvent *)end};
  uint64_t t[2];
  for (int i = 0; i < 2; i++) {
    pthread_mutex_lock(&ev[i]->mu);
    int recorded = ev[i]->recorded != 0, done = ev[i]->done >= ev[i]->recorded;
    t[i] = ev[i]->time_ns;
    pthread_mutex_unlock(&ev[i]->mu);
    *which = i;
    if (!recorded) return gp_err(GPURT_ERR_FAILED_PRECONDITION, "never recorded");
    if (!done) return gp_err(GPURT_ERR_NOT_READY, "not complete");
  }
  /* Host times taken in the completion handlers of the recording command
   * buffers (mach_absolute_time): the same clock for both events. */
  *ms = ((double)t[1] - (double)t[0]) / 1e6;
  return NULL;
}
