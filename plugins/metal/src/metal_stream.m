/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_stream.m — streams (one MTLCommandQueue each: begin / commit / wait)
 * and events (MTLSharedEvent) on Metal.
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

/* ---- streams ------------------------------------------------------------------------------ */

gpurt_error *gm_stream_begin(GMStream *s, id<MTLCommandBuffer> __strong *out) {
  gpurt_error *e = gm_check_lost(s->device);
  if (e) return e;
  pthread_mutex_lock(&s->enc);
  id<MTLCommandBuffer> cb = [s->queue commandBuffer];
  if (cb == nil) {
    pthread_mutex_unlock(&s->enc);
    return gp_err(GPURT_ERR_INTERNAL, "device %u: could not make a command buffer",
                  s->device->index);
  }
  pthread_mutex_lock(&s->mu);
  uint64_t prev = s->committed;
  pthread_mutex_unlock(&s->mu);
  /* Strict stream order, whatever resources the work touches. */
  if (prev > 0) [cb encodeWaitForEvent:s->timeline value:prev];
  *out = cb;
  return NULL;
}

void gm_stream_abort(GMStream *s) { pthread_mutex_unlock(&s->enc); }

void gm_stream_commit(GMStream *s, id<MTLCommandBuffer> cb, NSString *what,
                      GMEvent *signal_event, uint64_t signal_value) {
  uint64_t seq;
  pthread_mutex_lock(&s->mu);
  seq = ++s->committed;
  pthread_mutex_unlock(&s->mu);
  cb.label = what;
  if (signal_event != nil) [cb encodeSignalEvent:signal_event->ev value:signal_value];
  [cb encodeSignalEvent:s->timeline value:seq];
  GMStream *st = s; /* the handler keeps the stream alive until it runs */
  id<MTLSharedEvent> timeline = s->timeline;
  GMDevice *dev = s->device;
  GMEvent *sev = signal_event;
  [cb addCompletedHandler:^(id<MTLCommandBuffer> done) {
    gpurt_error *err = NULL;
    if (done.status == MTLCommandBufferStatusError) {
      NSError *ne = done.error;
      if (ne.code == MTLCommandBufferErrorDeviceRemoved) {
        gm_mark_lost(dev, "the device was removed");
        err = gm_nserror(GPURT_ERR_DEVICE_LOST, ne, "device %u: %s: device removed",
                         dev->index, what.UTF8String);
      } else {
        err = gm_nserror(GPURT_ERR_LAUNCH_FAILED, ne, "device %u: %s failed (MTLCommandBufferError %ld)",
                         dev->index, what.UTF8String, (long)ne.code);
      }
      /* Work queued behind a failed command buffer must not wait forever. */
      if (timeline.signaledValue < seq) timeline.signaledValue = seq;
      if (sev != nil && sev->ev.signaledValue < signal_value)
        sev->ev.signaledValue = signal_value;
    }
    if (sev != nil) {
      uint64_t now = gm_now_ns();
      pthread_mutex_lock(&sev->mu);
      if (signal_value > sev->done) {
        sev->done = signal_value;
        sev->time_ns = now;
      }
      pthread_cond_broadcast(&sev->cv);
      pthread_mutex_unlock(&sev->mu);
    }
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

gpurt_error *gm_stream_take_error(GMStream *s) {
  pthread_mutex_lock(&s->mu);
  gpurt_error *e = s->pending;
  s->pending = NULL;
  pthread_mutex_unlock(&s->mu);
  return e;
}

gpurt_error *gm_stream_create(gpurt_runtime *h, uint32_t device, gpurt_stream **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMDevice *d;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "stream_create: out is NULL");
    if ((e = gm_device(rt, device, &d))) return e;
    GMStream *s = [[GMStream alloc] init];
    s->device = d;
    s->queue = [d->dev newCommandQueue];
    s->timeline = [d->dev newSharedEvent];
    if (s->queue == nil || s->timeline == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY,
                    "stream_create: device %u: no command queue or shared event", device);
    s->queue.label = @"gpurt stream";
    uintptr_t hs;
    if ((e = gm_insert(rt, &rt->streams, s, &hs, "stream_create"))) return e;
    *out = (gpurt_stream *)hs;
    return NULL;
  }
}

gpurt_error *gm_get_stream(GMRuntime *rt, gpurt_stream *h, GMStream *__strong *out) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->streams, (uintptr_t)h, GP_KIND_STREAM, &o);
  if (e) return e;
  *out = o;
  return NULL;
}

gpurt_error *gm_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  if (sh == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_stream(rt, sh, &s))) return e;
    gm_stream_wait(s);
    pthread_mutex_lock(&rt->mu);
    id gone = gm_remove_locked(&rt->streams, (uintptr_t)sh);
    pthread_mutex_unlock(&rt->mu);
    if (gone == nil) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_STREAM, (uintptr_t)sh);
    /* An error nobody synchronised for is still reported, once. */
    return gm_stream_take_error(s);
  }
}

gpurt_error *gm_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_stream(rt, sh, &s))) return e;
    gm_stream_wait(s);
    e = gm_stream_take_error(s);
    gpurt_error *lost = gm_check_lost(s->device);
    if (lost != NULL) {
      gp_error_destroy(e);
      return lost;
    }
    return e;
  }
}

gpurt_error *gm_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMStream *s;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_stream(rt, sh, &s))) return e;
    pthread_mutex_lock(&s->mu);
    int busy = s->completed < s->committed;
    pthread_mutex_unlock(&s->mu);
    if (busy) return gp_err(GPURT_ERR_NOT_READY, "stream has pending work");
    return NULL;
  }
}

static gpurt_error *gm_get_event(GMRuntime *rt, gpurt_event *h, GMEvent *__strong *out) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->events, (uintptr_t)h, GP_KIND_EVENT, &o);
  if (e) return e;
  *out = o;
  return NULL;
}

gpurt_error *gm_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMStream *s;
    GMEvent *ev;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_stream(rt, sh, &s))) return e;
    if ((e = gm_get_event(rt, eh, &ev))) return e;
    if (ev->device != s->device)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "stream_wait_event: the event is on device %u, the stream on device %u",
                    ev->device->index, s->device->index);
    pthread_mutex_lock(&ev->mu);
    uint64_t v = ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    if (v == 0) return NULL; /* never recorded: nothing to wait for */
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    [cb encodeWaitForEvent:ev->ev value:v];
    gm_stream_commit(s, cb, @"stream_wait_event", nil, 0);
    return NULL;
  }
}

/* ---- events ------------------------------------------------------------------------------------ */

gpurt_error *gm_event_create(gpurt_runtime *h, uint32_t device, uint32_t flags,
                             gpurt_event **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMDevice *d;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: out is NULL");
    if ((e = gm_device(rt, device, &d))) return e;
    if (flags & ~GPURT_EVENT_TIMING)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x",
                    flags & ~GPURT_EVENT_TIMING);
    GMEvent *ev = [[GMEvent alloc] init];
    ev->device = d;
    ev->flags = flags;
    ev->ev = [d->dev newSharedEvent];
    if (ev->ev == nil)
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: device %u: no shared event", device);
    uintptr_t he;
    if ((e = gm_insert(rt, &rt->events, ev, &he, "event_create"))) return e;
    *out = (gpurt_event *)he;
    return NULL;
  }
}

gpurt_error *gm_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  if (eh == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->events, (uintptr_t)eh, &o);
    id gone = st == GP_HANDLE_OK ? gm_remove_locked(&rt->events, (uintptr_t)eh) : nil;
    pthread_mutex_unlock(&rt->mu);
    (void)gone; /* in-flight records keep the event alive */
    if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_EVENT, (uintptr_t)eh);
    return NULL;
  }
}

gpurt_error *gm_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMEvent *ev;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_event(rt, eh, &ev))) return e;
    if (sh == NULL) {
      /* Default ordering: after all work on the device, recorded now. */
      if ((e = gm_check_lost(ev->device))) return e;
      gm_wait_device(rt, ev->device->index);
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
    GMStream *s;
    if ((e = gm_get_stream(rt, sh, &s))) return e;
    if (ev->device != s->device)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "event_record: the event is on device %u, the stream on device %u",
                    ev->device->index, s->device->index);
    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    pthread_mutex_lock(&ev->mu);
    uint64_t v = ++ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    gm_stream_commit(s, cb, @"event_record", ev, v);
    return NULL;
  }
}

gpurt_error *gm_event_query(gpurt_runtime *h, gpurt_event *eh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMEvent *ev;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_event(rt, eh, &ev))) return e;
    pthread_mutex_lock(&ev->mu);
    int pending = ev->done < ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    return pending ? gp_err(GPURT_ERR_NOT_READY, "event has not completed") : NULL;
  }
}

gpurt_error *gm_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  @autoreleasepool {
    GMRuntime *rt;
    GMEvent *ev;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gm_get_event(rt, eh, &ev))) return e;
    pthread_mutex_lock(&ev->mu);
    uint64_t target = ev->recorded;
    while (ev->done < target) pthread_cond_wait(&ev->cv, &ev->mu);
    pthread_mutex_unlock(&ev->mu);
    return gm_check_lost(ev->device);
  }
}

gpurt_error *gm_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh,
                              double *out_ms) {
  @autoreleasepool {
    GMRuntime *rt;
    GMEvent *a, *b;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
    if ((e = gm_get_event(rt, sh, &a))) return e;
    if ((e = gm_get_event(rt, eh, &b))) return e;
    if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "event_elapsed: both events need GPURT_EVENT_TIMING");
    uint64_t ta = 0, tb = 0;
    int ra, rb, da, db;
    pthread_mutex_lock(&a->mu);
    ra = a->recorded != 0;
    da = a->done >= a->recorded;
    ta = a->time_ns;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    rb = b->recorded != 0;
    db = b->done >= b->recorded;
    tb = b->time_ns;
    pthread_mutex_unlock(&b->mu);
    if (!ra || !rb)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: the %s event was never recorded",
                    !ra ? "start" : "end");
    if (!da || !db) return gp_err(GPURT_ERR_NOT_READY, "event_elapsed: an event has not completed");
    /* Host times taken in the completion handlers of the recording command
     * buffers (mach_absolute_time): same clock for both events. */
    *out_ms = ((double)tb - (double)ta) / 1e6;
    return NULL;
  }
}
