/* SPDX-License-Identifier: Apache-2.0
 *
 * ktrace.c — a kernel tracer for the GPU machine, where Nsight Systems is
 * missing: LD_PRELOAD it into a program (build/llama, a Go binary with
 * CGO_ENABLED=0 works, the CUDA plugin is a shared library like any other)
 * and it writes, through CUPTI's activity API, one CSV line per
 *   K,<kernel name>,<start ns>,<end ns>,<stream>,<graph id>   kernel (graph nodes too)
 *   M,<copy kind>,<bytes>,<start ns>,<end ns>,<graph id>      memcpy
 *   A,<driver call>,<start ns>,<end ns>                       driver API call (host side)
 * to $KTRACE_OUT (default ktrace.csv). scripts/gpu_profile.sh sums it.
 *
 * A Go program leaves by exit_group without running C destructors, so the
 * records are flushed by a thread every 50 ms and when a context is
 * destroyed or a primary context released (the plugin's teardown). Build:
 * scripts/ktrace/build.sh (CUPTI 13.0's headers and library from PyPI). */
#define _GNU_SOURCE
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_BYTES (8u << 20)

static FILE *out;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *buf = aligned_alloc(8, BUF_BYTES);
  *size = *buf ? BUF_BYTES : 0;
  *max_records = 0;
}

static const char *copy_kind(uint8_t k) {
  switch (k) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
  default: return "other";
  }
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *r = NULL;
  pthread_mutex_lock(&out_mu);
  while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
      fprintf(out, "K,%s,%llu,%llu,%u,%u\n", k->name ? k->name : "?", (unsigned long long)k->start,
              (unsigned long long)k->end, k->streamId, k->graphId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
      fprintf(out, "M,%s,%llu,%llu,%llu,%u\n", copy_kind(m->copyKind), (unsigned long long)m->bytes,
              (unsigned long long)m->start, (unsigned long long)m->end, m->graphId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
      const char *name = NULL;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name) != CUPTI_SUCCESS || !name) name = "?";
      fprintf(out, "A,%s,%llu,%llu\n", name, (unsigned long long)a->start, (unsigned long long)a->end);
      break;
    }
    default:
      break;
    }
  }
  if (out) fflush(out);
  pthread_mutex_unlock(&out_mu);
  free(buf);
}

static void *flusher(void *arg) {
  (void)arg;
  for (;;) {
    usleep(50000);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  return NULL;
}

/* Flush before a context goes away (its records would be lost with it). */
static void CUPTIAPI on_driver(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data) {
  (void)ud, (void)dom, (void)cbid;
  const CUpti_CallbackData *cd = data;
  if (cd->callbackSite == CUPTI_API_ENTER) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

#define CK(call)                                                                                                 \
  do {                                                                                                           \
    CUptiResult r_ = (call);                                                                                     \
    if (r_ != CUPTI_SUCCESS) {                                                                                   \
      const char *s_ = "?";                                                                                      \
      cuptiGetResultString(r_, &s_);                                                                             \
      fprintf(stderr, "ktrace: %s: %s\n", #call, s_);                                                            \
      return;                                                                                                    \
    }                                                                                                            \
  } while (0)

__attribute__((constructor)) static void ktrace_init(void) {
  const char *path = getenv("KTRACE_OUT");
  if (!path || !*path) path = "ktrace.csv";
  out = fopen(path, "w");
  if (!out) {
    fprintf(stderr, "ktrace: cannot write %s\n", path);
    return;
  }
  CK(cuptiActivityRegisterCallbacks(buf_requested, buf_completed));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  if (getenv("KTRACE_API")) CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
  CUpti_SubscriberHandle sub;
  CK(cuptiSubscribe(&sub, on_driver, NULL));
  CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2));
  CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2));
  pthread_t t;
  if (pthread_create(&t, NULL, flusher, NULL) == 0) pthread_detach(t);
  fprintf(stderr, "ktrace: tracing kernels to %s\n", path);
}
