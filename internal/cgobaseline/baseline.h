/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C half of the cgo dispatch baseline: load a plugin by absolute path,
 * negotiate exactly as the core does, create a runtime and a stream, and
 * call table slots from C. Static functions only: this header is included
 * once, by cgo.go's preamble.
 */
#ifndef GPURT_CGOBASELINE_H_
#define GPURT_CGOBASELINE_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gpurt.h"

typedef struct gb_plugin {
  void *lib;
  const gpurt_api *api;
  gpurt_runtime *rt;
  gpurt_stream *s;
} gb_plugin;

/* Writes "op: message" of e into msg and frees e. Returns 1. */
static int gb_fail(const gpurt_api *api, gpurt_error *e, const char *op,
                   char *msg, size_t cap) {
  gpurt_error_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  api->error_get(e, &info);
  snprintf(msg, cap, "%s: %.*s (code %d)", op, (int)info.message_len,
           info.message ? info.message : "", (int)info.code);
  api->error_destroy(e);
  return 1;
}

/* 0 on success; otherwise 1 with a reason in msg. */
static int gb_open(const char *path, const char *options, gb_plugin *p,
                   char *msg, size_t cap) {
  memset(p, 0, sizeof *p);
  p->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (p->lib == NULL) {
    snprintf(msg, cap, "dlopen %s: %s", path, dlerror());
    return 1;
  }
  gpurt_negotiate_fn entry =
      (gpurt_negotiate_fn)dlsym(p->lib, GPURT_ENTRY_SYMBOL);
  if (entry == NULL) {
    snprintf(msg, cap, "%s has no %s", path, GPURT_ENTRY_SYMBOL);
    return 1;
  }
  gpurt_negotiate_args na;
  memset(&na, 0, sizeof na);
  na.struct_size = sizeof na;
  na.host_abi_major = GPURT_ABI_MAJOR;
  na.host_abi_minor = GPURT_ABI_MINOR;
  int32_t r = entry(&na);
  if (r != GPURT_OK || na.api == NULL) {
    snprintf(msg, cap, "negotiate %s: result %d, plugin ABI %u.%u: %.*s", path,
             (int)r, na.plugin_abi_major, na.plugin_abi_minor,
             (int)sizeof na.message, na.message);
    return 1;
  }
  const gpurt_api *api = na.api;
  if (!GPURT_API_HAS(api, error_get) || !GPURT_API_HAS(api, error_destroy) ||
      !GPURT_API_HAS(api, runtime_create) ||
      !GPURT_API_HAS(api, runtime_destroy) ||
      !GPURT_API_HAS(api, stream_create) ||
      !GPURT_API_HAS(api, stream_destroy) ||
      !GPURT_API_HAS(api, stream_query)) {
    snprintf(msg, cap, "%s: the function table lacks a 1.0 slot", path);
    return 1;
  }
  p->api = api;
  gpurt_runtime_create_args ra;
  memset(&ra, 0, sizeof ra);
  ra.struct_size = sizeof ra;
  ra.options = options;
  ra.options_len = options ? strlen(options) : 0;
  gpurt_error *e = api->runtime_create(&ra, &p->rt);
  if (e) return gb_fail(api, e, "runtime_create", msg, cap);
  e = api->stream_create(p->rt, 0, &p->s);
  if (e) {
    gb_fail(api, e, "stream_create", msg, cap);
    api->error_destroy(api->runtime_destroy(p->rt));
    p->rt = NULL;
    return 1;
  }
  return 0;
}

static void gb_close(gb_plugin *p) {
  if (p->api == NULL) return;
  p->api->error_destroy(p->api->stream_destroy(p->rt, p->s));
  p->api->error_destroy(p->api->runtime_destroy(p->rt));
  p->s = NULL;
  p->rt = NULL;
  /* never dlclose'd: the ABI says so */
}

/* One stream_query through the table: 0 when idle, 1 otherwise. */
static int gb_stream_query(const gpurt_api *api, gpurt_runtime *rt,
                           gpurt_stream *s) {
  gpurt_error *e = api->stream_query(rt, s);
  if (e) {
    api->error_destroy(e);
    return 1;
  }
  return 0;
}

/* n stream_query calls from C (no boundary crossing): the floor under both
 * the cgo and the gpurt figure. Returns the number that were not idle. */
static int gb_stream_query_loop(const gpurt_api *api, gpurt_runtime *rt,
                                gpurt_stream *s, int n) {
  int busy = 0;
  for (int i = 0; i < n; i++) busy += gb_stream_query(api, rt, s);
  return busy;
}

#endif
