/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_stream.c — streams (with their lazily allocated GEMM workspace),
 * events and what a recording keeps (cu_rec) on the CUDA driver API: the
 * gp_backend entries queue_* and event_*. A recording queue (graph_begin,
 * cuda_graph.c) is a cu_stream in capture mode; an event recorded or waited
 * on it becomes an external event node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- streams ------------------------------------------------------------------ */

gpurt_error *cu_stream_new(cu_runtime *rt, uint32_t dev, cu_stream **out) {
  gpurt_error *e = cu_enter(rt, dev);
  if (e) return e;
  cu_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: out of host memory");
  CUresult r = cu_drv.p_cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
  if (r) {
    free(s);
    return cu_fail(rt, dev, r, "cuStreamCreate", NULL);
  }
  static _Atomic uint64_t serials;
  s->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
  s->dev = dev;
  pthread_mutex_init(&s->ws_mu, NULL);
  pthread_mutex_init(&s->slot_mu, NULL);
  *out = s;
  return NULL;
}

/* Frees the stream and its lazy memory (its work done or abandoned). */
void cu_stream_free(cu_runtime *rt, cu_stream *s) {
  cu_enter_quiet(rt, s->dev);
  cu_drv.p_cuStreamDestroy(s->s);
  CUdeviceptr ws = atomic_load(&s->ws);
  if (ws) cu_drv.p_cuMemFree(ws);
  if (s->slots) cu_drv.p_cuMemFree(s->slots);
  if (s->bias16) cu_drv.p_cuMemFree(s->bias16);
  if (s->qscratch) cu_drv.p_cuMemFree(s->qscratch);
  pthread_mutex_destroy(&s->ws_mu);
  pthread_mutex_destroy(&s->slot_mu);
  free(s);
}

gpurt_error *cu_queue_create(void *ctx, uint32_t dev, gp_queue *out) {
  cu_stream *s;
  gpurt_error *e = cu_stream_new(ctx, dev, &s);
  if (e) return e;
  out->q = s;
  return NULL;
}

void cu_queue_destroy(void *ctx, gp_queue *q) {
  cu_runtime *rt = ctx;
  cu_stream *s = q->q;
  cu_enter_quiet(rt, s->dev);
  if (!cu_dev_lost(rt, s->dev)) (void)cu_drv.p_cuStreamSynchronize(s->s);
  cu_stream_free(rt, s);
}

/* On a device lost before, the queued work is dropped: nothing is left to
 * wait for (the engine then asks device_check and refuses, naming the
 * cause), so a free or a teardown that drains first still completes. The
 * wait that meets the sticky error first reports it (cu_fail). */
gpurt_error *cu_queue_sync(void *ctx, gp_queue *q) {
  cu_runtime *rt = ctx;
  cu_stream *s = q->q;
  if (cu_dev_lost(rt, s->dev)) return NULL;
  gpurt_error *e = cu_enter(rt, s->dev);
  if (e) return e;
  CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
  return r ? cu_fail(rt, s->dev, r, "stream synchronize", s->last_kernel) : NULL;
}

gpurt_error *cu_queue_query(void *ctx, gp_queue *q, uint64_t *pending) {
  cu_runtime *rt = ctx;
  cu_stream *s = q->q;
  gpurt_error *e = cu_enter(rt, s->dev);
  if (e) return e;
  CUresult r = cu_drv.p_cuStreamQuery(s->s);
  *pending = r == CUDA_ERROR_NOT_READY; /* the driver does not count them */
  if (r == CUDA_ERROR_NOT_READY) return NULL;
  return r ? cu_fail(rt, s->dev, r, "stream query", s->last_kernel) : NULL;
}

gpurt_error *cu_stream_workspace(cu_runtime *rt, cu_stream *s, size_t size,
                                 CUdeviceptr *out) {
  CUdeviceptr ws = atomic_load_explicit(&s->ws, memory_order_acquire);
  if (ws != 0 && s->ws_size >= size) {
    *out = ws;
    return NULL;
  }
  pthread_mutex_lock(&s->ws_mu);
  ws = atomic_load(&s->ws);
  if (ws == 0 || s->ws_size < size) {
    if (ws != 0) {
      /* Grow: earlier work on this stream may still use the old one. */
      CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
      if (r) {
        pthread_mutex_unlock(&s->ws_mu);
        return cu_fail(rt, s->dev, r, "gemm workspace: stream synchronize", s->last_kernel);
      }
      cu_drv.p_cuMemFree(ws);
      atomic_store(&s->ws, 0);
      s->ws_size = 0;
    }
    CUdeviceptr p = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&p, size);
    if (r) {
      pthread_mutex_unlock(&s->ws_mu);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                             "gemm: out of device memory allocating the stream's %zu-byte "
                             "cuBLASLt workspace on device %u",
                             size, s->dev);
      return cu_fail(rt, s->dev, r, "gemm workspace: cuMemAlloc", NULL);
    }
    s->ws_size = size;
    atomic_store_explicit(&s->ws, p, memory_order_release);
    ws = p;
  }
  pthread_mutex_unlock(&s->ws_mu);
  *out = ws;
  return NULL;
}

/* ---- what a recording keeps ------------------------------------------------------- */

void cu_rec_launch_node(cu_stream *st, uint64_t item) {
  cu_rec *r = st->rec;
  if (r == NULL || item >= r->items) return;
  CUstreamCaptureStatus cs;
  const CUgraphNode *deps = NULL;
  size_t nd = 0;
  r->knodes[item] = NULL;
  if (cu_drv.p_cuStreamGetCaptureInfo(st->s, &cs, NULL, NULL, &deps, NULL, &nd) == CUDA_SUCCESS && nd == 1)
    r->knodes[item] = deps[0];
}

void cu_rec_snap(cu_stream *st, const cu_attn_snap *s) {
  cu_rec *r = st->rec;
  if (r == NULL) return;
  for (uint64_t j = 0; j < r->nsnaps; j++)
    if (r->snaps[j].obj == s->obj) {
      if (s->pages_avail < r->snaps[j].pages_avail) r->snaps[j].pages_avail = s->pages_avail;
      return;
    }
  if (r->nsnaps == r->capsnaps) {
    uint64_t cap = r->capsnaps ? 2 * r->capsnaps : 4;
    cu_attn_snap *v = realloc(r->snaps, (size_t)cap * sizeof *v);
    if (v == NULL) {
      r->oom = 1;
      return;
    }
    r->snaps = v;
    r->capsnaps = cap;
  }
  r->snaps[r->nsnaps++] = *s;
}

static void rec_event(cu_rec *r, cu_event *ev) {
  for (uint64_t j = 0; j < r->nevs; j++)
    if (r->evs[j] == ev) return;
  if (r->nevs == r->capevs) {
    uint64_t cap = r->capevs ? 2 * r->capevs : 4;
    cu_event **v = realloc(r->evs, (size_t)cap * sizeof *v);
    if (v == NULL) {
      r->oom = 1;
      return;
    }
    r->evs = v;
    r->capevs = cap;
  }
  r->evs[r->nevs++] = ev;
}

/* ---- events ------------------------------------------------------------------------ */

gpurt_error *cu_event_create(void *ctx, uint32_t dev, uint32_t flags, void **out) {
  cu_runtime *rt = ctx;
  gpurt_error *e = cu_enter(rt, dev);
  if (e) return e;
  cu_event *ev = calloc(1, sizeof *ev);
  if (ev == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: out of host memory");
  CUresult r = cu_drv.p_cuEventCreate(
      &ev->ev, (flags & GPURT_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  if (r) {
    free(ev);
    return cu_fail(rt, dev, r, "cuEventCreate", NULL);
  }
  ev->dev = dev;
  ev->flags = flags;
  *out = ev;
  return NULL;
}

void cu_event_destroy(void *ctx, void *p) {
  cu_event *ev = p;
  cu_enter_quiet(ctx, ev->dev);
  cu_drv.p_cuEventDestroy(ev->ev);
  free(ev);
}

gpurt_error *cu_event_record(void *ctx, void *p, gp_queue *q) {
  cu_runtime *rt = ctx;
  cu_event *ev = p;
  cu_stream *s = q ? q->q : NULL;
  gpurt_error *e = cu_enter(rt, ev->dev);
  if (e) return e;
  if (q != NULL && q->capturing == GP_QUEUE_PREPARE) return NULL;
  if (q != NULL && q->capturing) {
    if (cu_drv.p_cuEventRecordWithFlags == NULL)
      return gp_err(GPURT_ERR_UNSUPPORTED, "event_record: the driver lacks cuEventRecordWithFlags");
    CUresult r = cu_drv.p_cuEventRecordWithFlags(ev->ev, s->s, CU_EVENT_RECORD_EXTERNAL);
    if (r) return cu_fail(rt, ev->dev, r, "cuEventRecordWithFlags (external, captured)", NULL);
    if (s->rec) rec_event(s->rec, ev);
    return NULL;
  }
  /* q NULL: the engine drained the device first. */
  CUresult r = cu_drv.p_cuEventRecord(ev->ev, s ? s->s : NULL);
  if (r) return cu_fail(rt, ev->dev, r, "cuEventRecord", s ? s->last_kernel : NULL);
  atomic_store(&ev->recorded, 1);
  return NULL;
}

gpurt_error *cu_event_wait(void *ctx, gp_queue *q, void *p) {
  cu_runtime *rt = ctx;
  cu_stream *s = q->q;
  cu_event *ev = p;
  gpurt_error *e = cu_enter(rt, s->dev);
  if (e) return e;
  if (q->capturing == GP_QUEUE_PREPARE) return NULL;
  if (ev->dev != s->dev && cu_dev_lost(rt, ev->dev)) return cu_lost_error(rt, ev->dev);
  if (q->capturing) {
    CUresult r = cu_drv.p_cuStreamWaitEvent(s->s, ev->ev, CU_EVENT_WAIT_EXTERNAL);
    return r ? cu_fail(rt, s->dev, r, "cuStreamWaitEvent (external, captured)", NULL) : NULL;
  }
  CUresult r = cu_drv.p_cuStreamWaitEvent(s->s, ev->ev, 0);
  return r ? cu_fail(rt, s->dev, r, "cuStreamWaitEvent", s->last_kernel) : NULL;
}

gpurt_error *cu_event_query(void *ctx, void *p, int *done) {
  cu_runtime *rt = ctx;
  cu_event *ev = p;
  gpurt_error *e = cu_enter(rt, ev->dev);
  if (e) return e;
  CUresult r = cu_drv.p_cuEventQuery(ev->ev);
  *done = r != CUDA_ERROR_NOT_READY;
  if (r == CUDA_ERROR_NOT_READY) return NULL;
  return r ? cu_fail(rt, ev->dev, r, "event query", rt->devs[ev->dev].last_kernel) : NULL;
}

gpurt_error *cu_event_sync(void *ctx, void *p) {
  cu_runtime *rt = ctx;
  cu_event *ev = p;
  gpurt_error *e = cu_enter(rt, ev->dev);
  if (e) return e;
  CUresult r = cu_drv.p_cuEventSynchronize(ev->ev);
  return r ? cu_fail(rt, ev->dev, r, "event synchronize", rt->devs[ev->dev].last_kernel) : NULL;
}

gpurt_error *cu_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which) {
  cu_runtime *rt = ctx;
  cu_event *a = start, *b = end;
  if (!atomic_load(&a->recorded) || !atomic_load(&b->recorded)) {
    *which = atomic_load(&a->recorded) ? 1 : 0;
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "never recorded");
  }
  gpurt_error *e = cu_enter(rt, a->dev);
  if (e) return e;
  float f = 0;
  CUresult r = cu_drv.p_cuEventElapsedTime(&f, a->ev, b->ev);
  if (r == CUDA_ERROR_NOT_READY) {
    *which = cu_drv.p_cuEventQuery(a->ev) == CUDA_ERROR_NOT_READY ? 0 : 1;
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "not completed");
  }
  if (r) return cu_fail(rt, a->dev, r, "cuEventElapsedTime", rt->devs[a->dev].last_kernel);
  *ms = f;
  return NULL;
}
