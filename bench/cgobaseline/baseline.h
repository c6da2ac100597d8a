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
  /* launch: fill_f32 of the built-in module on a 256-byte buffer */
  gpurt_module *mod;
  gpurt_kernel *fill;
  gpurt_buffer *fill_buf;
  /* gemm: one plan and its operands (A, B, D) */
  gpurt_gemm_plan *plan;
  gpurt_buffer *ga, *gb, *gd;
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
  if (p->s) p->api->error_destroy(p->api->stream_synchronize(p->rt, p->s));
  if (p->plan) p->api->error_destroy(p->api->gemm_plan_destroy(p->rt, p->plan));
  p->api->error_destroy(p->api->buffer_free(p->rt, p->ga));
  p->api->error_destroy(p->api->buffer_free(p->rt, p->gb));
  p->api->error_destroy(p->api->buffer_free(p->rt, p->gd));
  p->api->error_destroy(p->api->buffer_free(p->rt, p->fill_buf));
  if (p->mod) p->api->error_destroy(p->api->module_unload(p->rt, p->mod));
  p->plan = NULL;
  p->ga = p->gb = p->gd = p->fill_buf = NULL;
  p->mod = NULL;
  p->fill = NULL;
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

/* Writes "op: message" of e into msg and frees e (e non-NULL). */
static void gb_error_message(const gpurt_api *api, gpurt_error *e,
                             const char *op, char *msg, size_t cap) {
  gb_fail(api, e, op, msg, cap);
}

/* Loads the built-in module, gets fill_f32 and allocates its 256-byte
 * buffer. 0 on success; otherwise 1 with a reason in msg. */
static int gb_prepare_launch(gb_plugin *p, char *msg, size_t cap) {
  const gpurt_api *api = p->api;
  if (!GPURT_API_HAS(api, module_load) || !GPURT_API_HAS(api, kernel_get) ||
      !GPURT_API_HAS(api, launch) || !GPURT_API_HAS(api, buffer_alloc) ||
      !GPURT_API_HAS(api, stream_synchronize)) {
    snprintf(msg, cap, "the function table lacks a launch slot");
    return 1;
  }
  if (p->fill != NULL) return 0;
  gpurt_module_load_args ml;
  memset(&ml, 0, sizeof ml);
  ml.struct_size = sizeof ml;
  ml.format = GPURT_MODULE_BUILTIN;
  ml.name = "builtin";
  ml.name_len = 7;
  gpurt_error *e = api->module_load(p->rt, &ml, &p->mod);
  if (e) return gb_fail(api, e, "module_load", msg, cap);
  e = api->kernel_get(p->rt, p->mod, "fill_f32", 8, &p->fill);
  if (e) return gb_fail(api, e, "kernel_get fill_f32", msg, cap);
  e = api->buffer_alloc(p->rt, 0, 256, &p->fill_buf);
  if (e) return gb_fail(api, e, "buffer_alloc", msg, cap);
  return 0;
}

/* Packs fill_f32(y, 1.0f, n = 1), grid 1, block 1, into ka and *la on the
 * caller's stack. Always inlined: gb_launch_fill packs on every call, as
 * the core does, and that cost is part of what it measures. */
static inline __attribute__((always_inline)) void gb_fill_args(gpurt_kernel_arg ka[3],
                                                               gpurt_launch_args *la,
                                                               gpurt_buffer *y) {
  memset(ka, 0, 3 * sizeof ka[0]);
  ka[0].kind = GPURT_ARG_BUFFER;
  ka[0].size = 8;
  ka[0].buffer = y;
  ka[0].length = 256;
  ka[1].kind = GPURT_ARG_F32;
  ka[1].size = 4;
  ka[1].value = 0x3f800000u; /* 1.0f */
  ka[2].kind = GPURT_ARG_U64;
  ka[2].size = 8;
  ka[2].value = 1;
  memset(la, 0, sizeof *la);
  la->struct_size = sizeof *la;
  la->grid[0] = la->grid[1] = la->grid[2] = 1;
  la->block[0] = la->block[1] = la->block[2] = 1;
  la->num_args = 3;
  la->args = ka;
}

/* One launch of fill_f32(y, 1.0f, n = 1) on s, grid 1, block 1, packed on
 * the stack as a C caller does it (and as the core does). */
static gpurt_error *gb_launch_fill(const gpurt_api *api, gpurt_runtime *rt,
                                   gpurt_stream *s, gpurt_kernel *k,
                                   gpurt_buffer *y) {
  gpurt_kernel_arg ka[3];
  gpurt_launch_args la;
  gb_fill_args(ka, &la, y);
  return api->launch(rt, s, k, &la);
}

/* n launches from C: the floor. Returns the first error (stops there). */
static gpurt_error *gb_launch_fill_loop(const gpurt_api *api,
                                        gpurt_runtime *rt, gpurt_stream *s,
                                        gpurt_kernel *k, gpurt_buffer *y,
                                        int n) {
  for (int i = 0; i < n; i++) {
    gpurt_error *e = gb_launch_fill(api, rt, s, k, y);
    if (e) return e;
  }
  return NULL;
}

/* The largest batch gb_launch_fill_batch takes. */
#define GB_BATCH_MAX 1024

/* 1 when the plugin's table has the 1.2 launch_batch slot. */
static int gb_has_launch_batch(const gpurt_api *api) {
  return GPURT_API_HAS(api, launch_batch);
}

/* count (1..GB_BATCH_MAX) launches of fill_f32(y, 1.0, n = 1), grid 1,
 * block 1 (gb_launch_fill's), through one call of the launch_batch slot:
 * the items share one argument array and one launch_args, as the core's
 * batch of identical launches would carry the same values. */
static gpurt_error *gb_launch_fill_batch(const gpurt_api *api,
                                         gpurt_runtime *rt, gpurt_stream *s,
                                         gpurt_kernel *k, gpurt_buffer *y,
                                         int count) {
  static gpurt_launch_item items[GB_BATCH_MAX];
  gpurt_kernel_arg ka[3];
  gpurt_launch_args la;
  gb_fill_args(ka, &la, y);
  if (count < 1) count = 1;
  if (count > GB_BATCH_MAX) count = GB_BATCH_MAX;
  for (int i = 0; i < count; i++) {
    items[i].kernel = k;
    items[i].args = &la;
  }
  uint64_t done = 0;
  return api->launch_batch(rt, s, (uint64_t)count, items, &done);
}

static gpurt_error *gb_synchronize(const gpurt_api *api, gpurt_runtime *rt,
                                   gpurt_stream *s) {
  return api->stream_synchronize(rt, s);
}

/* Allocates size bytes on device 0 into *out and copies src (size bytes,
 * pageable, synchronously) into it when src is not NULL. */
static int gb_alloc_upload(gb_plugin *p, gpurt_buffer **out, const void *src,
                           uint64_t size, char *msg, size_t cap) {
  const gpurt_api *api = p->api;
  gpurt_error *e = api->buffer_alloc(p->rt, 0, size, out);
  if (e) return gb_fail(api, e, "buffer_alloc", msg, cap);
  if (src == NULL) return 0;
  gpurt_copy_args ca;
  memset(&ca, 0, sizeof ca);
  ca.struct_size = sizeof ca;
  ca.flags = GPURT_COPY_SYNC;
  ca.size = size;
  ca.dst_buffer = *out;
  ca.src_ptr = src;
  e = api->copy(p->rt, &ca);
  if (e) return gb_fail(api, e, "copy", msg, cap);
  return 0;
}

/* A bf16 GEMM, f32 accumulation, op(A) = A^T: A stored k x m, B k x n, D
 * m x n, tightly packed, every pointer 256-aligned, beta 0, no epilogue:
 * the descriptor the core builds for such a Stream.Gemm. Creates the plan
 * and the operands (a: 2*k*m bytes, b: 2*k*n bytes). 0 on success;
 * otherwise 1 with a reason in msg (2 when the plugin has no GEMM or
 * refuses the descriptor as unsupported). */
static int gb_prepare_gemm(gb_plugin *p, uint64_t m, uint64_t n, uint64_t k,
                           const void *a, const void *b, char *msg,
                           size_t cap) {
  const gpurt_api *api = p->api;
  if (!GPURT_API_HAS(api, gemm_plan_create) || !GPURT_API_HAS(api, gemm_run) ||
      !GPURT_API_HAS(api, gemm_plan_destroy)) {
    snprintf(msg, cap, "the plugin speaks ABI %u.%u; GEMM needs 1.1",
             api->abi_major, api->abi_minor);
    return 2;
  }
  if (p->plan != NULL) {
    snprintf(msg, cap, "a GEMM is already prepared");
    return 1;
  }
  gpurt_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.a_type = d.b_type = d.c_type = d.d_type = GPURT_DTYPE_BF16;
  d.compute_type = GPURT_COMPUTE_DEFAULT;
  d.epilogue = GPURT_EPILOGUE_NONE;
  d.trans_a = 1;
  d.m = m;
  d.n = n;
  d.k = k;
  d.lda = k;
  d.ldb = k;
  d.ldc = m;
  d.ldd = m;
  d.batch_count = 1;
  d.align_a = d.align_b = d.align_c = d.align_d = 256;
  gpurt_error *e = api->gemm_plan_create(p->rt, 0, &d, &p->plan);
  if (e) {
    gpurt_error_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    api->error_get(e, &info);
    int unsupported = info.code == GPURT_ERR_UNSUPPORTED;
    gb_fail(api, e, "gemm_plan_create", msg, cap);
    p->plan = NULL;
    return unsupported ? 2 : 1;
  }
  if (gb_alloc_upload(p, &p->ga, a, 2 * k * m, msg, cap) ||
      gb_alloc_upload(p, &p->gb, b, 2 * k * n, msg, cap) ||
      gb_alloc_upload(p, &p->gd, NULL, 2 * m * n, msg, cap))
    return 1;
  return 0;
}

/* One run of the plan on s: D = A^T B, alpha 1, beta 0, the plugin's
 * workspace; the run arguments packed on the stack as the core does. */
static gpurt_error *gb_gemm_run(const gpurt_api *api, gpurt_runtime *rt,
                                gpurt_stream *s, gpurt_gemm_plan *plan,
                                gpurt_buffer *a, gpurt_buffer *b,
                                gpurt_buffer *d) {
  gpurt_gemm_run_args ra;
  memset(&ra, 0, sizeof ra);
  ra.struct_size = sizeof ra;
  ra.a = a;
  ra.b = b;
  ra.d = d;
  ra.alpha = 1.0;
  ra.beta = 0.0;
  return api->gemm_run(rt, s, plan, &ra);
}

/* n runs from C: the floor. Returns the first error (stops there). */
static gpurt_error *gb_gemm_run_loop(const gpurt_api *api, gpurt_runtime *rt,
                                     gpurt_stream *s, gpurt_gemm_plan *plan,
                                     gpurt_buffer *a, gpurt_buffer *b,
                                     gpurt_buffer *d, int n) {
  for (int i = 0; i < n; i++) {
    gpurt_error *e = gb_gemm_run(api, rt, s, plan, a, b, d);
    if (e) return e;
  }
  return NULL;
}

#endif
