/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_stream.c — streams (with their lazily allocated GEMM workspace) and events
 * on the CUDA driver API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- streams ------------------------------------------------------------------ */

gpurt_error *cu_stream_create(gpurt_runtime *h, uint32_t dev, gpurt_stream **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "stream_create", &e);
  if (!rt) return e;
  *out = NULL;
  if ((e = cu_enter(rt, dev))) return e;
  cu_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: out of host memory");
  CUresult r = cu_drv.p_cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
  if (r) {
    free(s);
    return cu_fail(rt, dev, r, "cuStreamCreate", NULL);
  }
  s->dev = dev;
  pthread_mutex_init(&s->ws_mu, NULL);
  pthread_mutex_init(&s->slot_mu, NULL);
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->streams, s, cu_release_stream, "stream_create", &hv))) return e;
  *out = (gpurt_stream *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_take(h, CU_TABLE(streams), sh, &rt, &e);
  if (s == NULL) return e;
  cu_enter_quiet(rt, s->dev);
  if (!cu_dev_lost(rt, s->dev)) {
    CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
    if (r) e = cu_fail(rt, s->dev, r, "stream destroy: synchronize", s->last_kernel);
  }
  cu_release_stream(rt, s);
  return e; /* the handle is freed either way */
}

gpurt_error *cu_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s || (e = cu_enter(rt, s->dev))) return e;
  CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
  return r ? cu_fail(rt, s->dev, r, "stream synchronize", s->last_kernel) : NULL;
}

gpurt_error *cu_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s || (e = cu_enter(rt, s->dev))) return e;
  CUresult r = cu_drv.p_cuStreamQuery(s->s);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "stream query: work pending");
  return r ? cu_fail(rt, s->dev, r, "stream query", s->last_kernel) : NULL;
}

gpurt_error *cu_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s) return e;
  cu_event *ev = cu_get(&rt->events, eh, &e);
  if (!ev || (e = cu_enter(rt, s->dev))) return e;
  if (ev->dev != s->dev && cu_dev_lost(rt, ev->dev))
    return cu_lost_error(rt, ev->dev);
  CUresult r = cu_drv.p_cuStreamWaitEvent(s->s, ev->ev, 0);
  return r ? cu_fail(rt, s->dev, r, "cuStreamWaitEvent", s->last_kernel) : NULL;
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
      atomic_fetch_sub(&rt->device_bytes, s->ws_size);
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
    atomic_fetch_add(&rt->device_bytes, size);
    atomic_store_explicit(&s->ws, p, memory_order_release);
    ws = p;
  }
  pthread_mutex_unlock(&s->ws_mu);
  *out = ws;
  return NULL;
}

/* ---- events ------------------------------------------------------------------------ */

gpurt_error *cu_event_create(gpurt_runtime *h, uint32_t dev, uint32_t flags,
                             gpurt_event **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "event_create", &e);
  if (!rt) return e;
  *out = NULL;
  if (flags & ~GPURT_EVENT_TIMING)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x", flags);
  if ((e = cu_enter(rt, dev))) return e;
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
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->events, ev, cu_release_event, "event_create", &hv))) return e;
  *out = (gpurt_event *)(uintptr_t)hv;
  return NULL;
}

gpurt_error *cu_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_take(h, CU_TABLE(events), eh, &rt, &e);
  if (ev == NULL) return e;
  cu_release_event(rt, ev);
  return NULL;
}

gpurt_error *cu_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev) return e;
  cu_stream *s = NULL;
  if (sh != NULL) {
    if (!(s = cu_get(&rt->streams, sh, &e))) return e;
    if (s->dev != ev->dev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "event_record: the event is on device %u, the stream on device %u",
                    ev->dev, s->dev);
  }
  if ((e = cu_enter(rt, ev->dev))) return e;
  CUresult r;
  if (s == NULL) {
    /* Default ordering: after all earlier work on the device. */
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, ev->dev, r, "event_record: device synchronize",
                          rt->devs[ev->dev].last_kernel);
  }
  r = cu_drv.p_cuEventRecord(ev->ev, s ? s->s : NULL);
  if (r) return cu_fail(rt, ev->dev, r, "cuEventRecord", s ? s->last_kernel : NULL);
  atomic_store(&ev->recorded, 1);
  return NULL;
}

gpurt_error *cu_event_query(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev || (e = cu_enter(rt, ev->dev))) return e;
  CUresult r = cu_drv.p_cuEventQuery(ev->ev);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "event query: work pending");
  return r ? cu_fail(rt, ev->dev, r, "event query", rt->devs[ev->dev].last_kernel) : NULL;
}

gpurt_error *cu_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev || (e = cu_enter(rt, ev->dev))) return e;
  CUresult r = cu_drv.p_cuEventSynchronize(ev->ev);
  return r ? cu_fail(rt, ev->dev, r, "event synchronize", rt->devs[ev->dev].last_kernel)
           : NULL;
}

gpurt_error *cu_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh,
                              double *out_ms) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
  cu_event *a = cu_get(&rt->events, sh, &e);
  if (!a) return e;
  cu_event *b = cu_get(&rt->events, eh, &e);
  if (!b) return e;
  if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "event_elapsed: both events need GPURT_EVENT_TIMING");
  if (a->dev != b->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "event_elapsed: the events are on devices %u and %u", a->dev, b->dev);
  if (!atomic_load(&a->recorded) || !atomic_load(&b->recorded))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION,
                  "event_elapsed: the %s event was never recorded",
                  atomic_load(&a->recorded) ? "end" : "start");
  if ((e = cu_enter(rt, a->dev))) return e;
  float ms = 0;
  CUresult r = cu_drv.p_cuEventElapsedTime(&ms, a->ev, b->ev);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "event_elapsed: an event is not complete");
  if (r) return cu_fail(rt, a->dev, r, "cuEventElapsedTime", rt->devs[a->dev].last_kernel);
  *out_ms = ms;
  return NULL;
}
