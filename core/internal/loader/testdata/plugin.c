/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A configurable test plugin for the loader tests. Built at test time with
 * `go env CC` and -D flags, one build per case:
 *
 *   -DBACKEND="\"mock\""   backend name from plugin_info (default "mock")
 *   -DPRIORITY=100         priority (default 100)
 *   -DSCORE=0              probe score (default 0)
 *   -DMAJOR=1 -DMINOR=1    the ABI version the plugin speaks
 *   -DOLD_TABLE            table ends after `launch` (a 1.0 table)
 *   -DNEW_TABLE            table has three more slots than this core knows
 *   -DNO_ENTRY             do not export the entry symbol
 *   -DENTRY_ERROR          the entry returns GPURT_ERR_INTERNAL with a message
 *   -DUNAVAILABLE          probe says unavailable, driver missing
 *   -DPROBE_ERROR          probe returns an error object
 *   -DRAN_MARK             when loaded (an ELF initialiser, before any call)
 *                          and when negotiated, appends a line to the file
 *                          $GPURT_TEST_RAN_MARK: the file swapped in by the
 *                          integrity race tests, which must never run
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "gpurt.h"

#ifndef BACKEND
#define BACKEND "mock"
#endif
#ifndef PRIORITY
#define PRIORITY 100
#endif
#ifndef SCORE
#define SCORE 0
#endif
#ifndef MAJOR
#define MAJOR GPURT_ABI_MAJOR
#endif
#ifndef MINOR
#define MINOR GPURT_ABI_MINOR
#endif

struct gpurt_error {
  int32_t code;
  char msg[128];
};

static gpurt_error *mkerr(int32_t code, const char *msg) {
  gpurt_error *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->code = code;
  strncpy(e->msg, msg, sizeof e->msg - 1);
  return e;
}

static void error_get(const gpurt_error *err, gpurt_error_info *out) {
  out->code = err->code;
  out->vendor_code = 0;
  out->message = err->msg;
  out->message_len = strlen(err->msg);
}

static void error_destroy(gpurt_error *err) { free(err); }

static gpurt_error *plugin_info(gpurt_plugin_info *out) {
  strncpy(out->backend, BACKEND, sizeof out->backend - 1);
  strncpy(out->version, "test-" BACKEND, sizeof out->version - 1);
  out->priority = PRIORITY;
  return NULL;
}

static gpurt_error *probe(gpurt_probe_args *a) {
#if defined(PROBE_CRASH) /* a driver that crashes in probe */
  raise(SIGSEGV);
#endif
#if defined(PROBE_HANG) /* a driver that never answers */
  for (;;) pause();
#endif
#if defined(PROBE_NOISE) /* a driver that prints to stdout */
  printf("driver chatter on stdout\n");
  fflush(stdout);
#endif
#if defined(PROBE_COUNT) /* counts its probes in the file $GPURT_TEST_PROBE_COUNT */
  {
    const char *f = getenv("GPURT_TEST_PROBE_COUNT");
    FILE *fp = f ? fopen(f, "a") : NULL;
    if (fp) { fputc('x', fp); fclose(fp); }
  }
#endif
#if defined(PROBE_ERROR)
  (void)a;
  return mkerr(GPURT_ERR_INTERNAL, "test: probe exploded");
#elif defined(UNAVAILABLE)
  a->available = 0;
  a->device_count = 0;
  a->score = 0;
  a->reason_code = GPURT_PROBE_DRIVER_MISSING;
  strncpy(a->reason, "libcuda.so.1 not found (test)", sizeof a->reason - 1);
  return NULL;
#else
  a->available = 1;
  a->device_count = 1;
  a->score = SCORE;
  a->reason_code = GPURT_PROBE_OK;
  strncpy(a->reason, "test device", sizeof a->reason - 1);
  if (a->device_capacity >= 1 && a->devices) {
    gpurt_device_info *d = &a->devices[0];
    strncpy(d->name, "Test Device", sizeof d->name - 1);
    strncpy(d->vendor, "gpurt-test", sizeof d->vendor - 1);
    strncpy(d->arch, "cpu", sizeof d->arch - 1);
    strncpy(d->driver_version, "0.0", sizeof d->driver_version - 1);
    d->memory_total = 1u << 30;
    d->memory_free = 1u << 29;
    d->compute_major = 1;
    d->compute_minor = 2;
    d->multiprocessor_count = 3;
  }
  return NULL;
#endif
}

/* Every other slot: never called by the loader; present so the table is
 * whole. */
static gpurt_error *stub(void) {
  return mkerr(GPURT_ERR_UNSUPPORTED, "test plugin");
}

#define S(T) ((T)(void *)stub)

typedef struct {
  gpurt_api api;
  void *extra[3]; /* slots of a future minor */
} table_t;

__attribute__((unused)) static table_t table = {
    .api =
        {
            .abi_major = MAJOR,
            .abi_minor = MINOR,
            .error_get = error_get,
            .error_destroy = error_destroy,
            .plugin_info = plugin_info,
            .probe = probe,
            .shutdown = S(gpurt_error * (*)(void)),
            .runtime_create = S(gpurt_error * (*)(const gpurt_runtime_create_args *, gpurt_runtime **)),
            .runtime_destroy = S(gpurt_error * (*)(gpurt_runtime *)),
            .runtime_stats = S(gpurt_error * (*)(gpurt_runtime *, gpurt_runtime_stats *)),
            .runtime_control = S(gpurt_error * (*)(gpurt_runtime *, const gpurt_control_args *)),
            .device_count = S(gpurt_error * (*)(gpurt_runtime *, uint32_t *)),
            .device_info = S(gpurt_error * (*)(gpurt_runtime *, uint32_t, gpurt_device_info *)),
            .device_synchronize = S(gpurt_error * (*)(gpurt_runtime *, uint32_t)),
            .buffer_alloc = S(gpurt_error * (*)(gpurt_runtime *, uint32_t, uint64_t, gpurt_buffer **)),
            .buffer_free = S(gpurt_error * (*)(gpurt_runtime *, gpurt_buffer *)),
            .host_alloc = S(gpurt_error * (*)(gpurt_runtime *, uint64_t, gpurt_host_buffer **, void **)),
            .host_free = S(gpurt_error * (*)(gpurt_runtime *, gpurt_host_buffer *)),
            .copy = S(gpurt_error * (*)(gpurt_runtime *, const gpurt_copy_args *)),
            .memset = S(gpurt_error * (*)(gpurt_runtime *, const gpurt_memset_args *)),
            .stream_create = S(gpurt_error * (*)(gpurt_runtime *, uint32_t, gpurt_stream **)),
            .stream_destroy = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *)),
            .stream_synchronize = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *)),
            .stream_query = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *)),
            .stream_wait_event = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *, gpurt_event *)),
            .event_create = S(gpurt_error * (*)(gpurt_runtime *, uint32_t, uint32_t, gpurt_event **)),
            .event_destroy = S(gpurt_error * (*)(gpurt_runtime *, gpurt_event *)),
            .event_record = S(gpurt_error * (*)(gpurt_runtime *, gpurt_event *, gpurt_stream *)),
            .event_query = S(gpurt_error * (*)(gpurt_runtime *, gpurt_event *)),
            .event_synchronize = S(gpurt_error * (*)(gpurt_runtime *, gpurt_event *)),
            .event_elapsed = S(gpurt_error * (*)(gpurt_runtime *, gpurt_event *, gpurt_event *, double *)),
            .module_load = S(gpurt_error * (*)(gpurt_runtime *, const gpurt_module_load_args *, gpurt_module **)),
            .module_unload = S(gpurt_error * (*)(gpurt_runtime *, gpurt_module *)),
            .kernel_get = S(gpurt_error * (*)(gpurt_runtime *, gpurt_module *, const char *, uint64_t, gpurt_kernel **)),
            .kernel_info = S(gpurt_error * (*)(gpurt_runtime *, gpurt_kernel *, gpurt_kernel_info *)),
            .launch = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *, gpurt_kernel *, const gpurt_launch_args *)),
#if !defined(OLD_TABLE)
            .gemm_plan_create = S(gpurt_error * (*)(gpurt_runtime *, uint32_t, const gpurt_gemm_desc *, gpurt_gemm_plan **)),
            .gemm_plan_destroy = S(gpurt_error * (*)(gpurt_runtime *, gpurt_gemm_plan *)),
            .gemm_run = S(gpurt_error * (*)(gpurt_runtime *, gpurt_stream *, gpurt_gemm_plan *, const gpurt_gemm_run_args *)),
#endif
        },
    .extra = {(void *)stub, (void *)stub, (void *)stub},
};

#if defined(RAN_MARK)
static void ran_mark(const char *what) {
  const char *f = getenv("GPURT_TEST_RAN_MARK");
  FILE *fp = f ? fopen(f, "a") : NULL;
  if (fp) { fprintf(fp, "%s pid %d\n", what, (int)getpid()); fclose(fp); }
}
__attribute__((constructor)) static void ran_mark_init(void) { ran_mark("loaded"); }
#endif

#if !defined(NO_ENTRY)
GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
#if defined(RAN_MARK)
  ran_mark("negotiated");
#endif
#if defined(OLD_TABLE)
  table.api.struct_size = offsetof(gpurt_api, launch) + sizeof(table.api.launch);
#elif defined(NEW_TABLE)
  table.api.struct_size = sizeof(table_t);
#else
  table.api.struct_size = sizeof(gpurt_api);
#endif
  args->plugin_abi_major = MAJOR;
  args->plugin_abi_minor = MINOR;
  args->api = NULL;
#if defined(ENTRY_ERROR)
  strncpy(args->message, "test: entry refuses to load", sizeof args->message - 1);
  return GPURT_ERR_INTERNAL;
#else
  if (args->host_abi_major != MAJOR) {
    strncpy(args->message, "test: ABI major differs", sizeof args->message - 1);
    return GPURT_ERR_ABI_MISMATCH;
  }
  args->api = &table.api;
  return GPURT_OK;
#endif
}
#else
GPURT_EXPORT int32_t not_the_entry(void) { return 0; }
#endif
