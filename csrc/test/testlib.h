/* SPDX-License-Identifier: Apache-2.0 */
/*
 * testlib.h — what the C tests share (csrc/test/abi_suite.c, graph_once.c,
 * backend_check.c, plugins/mock/test/mock_selftest.c and the CUDA plugin's
 * plugins/cuda/test/harness.h): the pass/fail counters and the two ways of
 * reporting (result: one "ok"/"FAIL" line a check; CHECK: a line only for a
 * failure, with file and line), an error's code and message, OK and ERR on
 * a call's error, "N passed, M failed", opening a plugin, and the argument
 * structs most checks build (copies, kernel arguments, 1-D launches).
 *
 * Header only: every function is static inline, so a test that uses a part
 * of it builds warning-free with -Wall -Wextra -Werror. The calls go
 * through `api` (the negotiated table), which the test sets; a test linked
 * with csrc and calling it directly (backend_check.c) uses only the
 * reporting part.
 */
#ifndef GPURT_TESTLIB_H_
#define GPURT_TESTLIB_H_

#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpurt.h"

/* x (an argument or out struct) zeroed, with its struct_size set. */
#define ARGS_INIT(x) (memset(&(x), 0, sizeof(x)), (x).struct_size = sizeof(x))

static int passed, failed;
/* The plugin's table once negotiated. */
static const gpurt_api *api __attribute__((unused));

/* ---- reporting ---------------------------------------------------------------- */

/* One line a check: "ok   <what>" or "FAIL <what>", counted. */
__attribute__((format(printf, 2, 3))) static inline void result(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok) passed++;
  else failed++;
}

/* result with a name and a message shown after ": " when there is one. */
static inline void result_msg(int ok, const char *what, const char *msg) {
  result(ok, "%s%s%s", what, msg ? ": " : "", msg ? msg : "");
}

/* Counts a check; prints a line (file and line first) only when it fails. */
#define CHECK(cond, ...)                          \
  do {                                            \
    if (cond) {                                   \
      passed++;                                   \
    } else {                                      \
      failed++;                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      fflush(stdout);                             \
    }                                             \
  } while (0)

/* The last line, "N passed, M failed" (extra failures added: a test that
 * could not get going counts that as one); the exit status, 1 on any. */
static inline int finish_with(int extra) {
  printf("%d passed, %d failed\n", passed, failed + extra);
  return failed + extra != 0;
}
static inline int finish(void) { return finish_with(0); }

/* ---- errors ------------------------------------------------------------------- */

/* The code and message of e (code 0 and "" for NULL), then destroys e;
 * msg may be NULL. */
static inline int take(gpurt_error *e, char *msg, size_t cap) {
  if (msg && cap) msg[0] = 0;
  if (e == NULL) return GPURT_OK;
  gpurt_error_info i;
  ARGS_INIT(i);
  api->error_get(e, &i);
  if (msg && cap) snprintf(msg, cap, "%.*s", (int)i.message_len, i.message ? i.message : "");
  api->error_destroy(e);
  return i.code;
}

/* take's message ("" for NULL), for a check that shows it. */
static inline const char *take_msg(gpurt_error *e, char *msg, size_t cap) {
  take(e, msg, cap);
  return msg;
}

/* The call succeeds (its error, if any, is consumed). */
#define OK(call)                                                      \
  do {                                                                \
    char m_[1024];                                                    \
    gpurt_error *e_ = (call);                                         \
    int had_ = e_ != NULL, c_ = take(e_, m_, sizeof m_);              \
    CHECK(!had_, "%s: unexpected error [%d] %s", #call, c_, m_);      \
  } while (0)

/* The call fails with code `want` and a message containing `sub` (any
 * message for a NULL sub); its error is consumed. */
#define ERR(call, want, sub)                                                           \
  do {                                                                                 \
    char m_[1024];                                                                     \
    gpurt_error *e_ = (call);                                                          \
    int had_ = e_ != NULL, c_ = take(e_, m_, sizeof m_);                               \
    const char *s_ = (sub);                                                            \
    CHECK(had_ && c_ == (want) && (s_ == NULL || strstr(m_, s_) != NULL),              \
          "%s: want code %d with \"%s\", got %s[%d] %s", #call, (int)(want), s_ ? s_ : "", \
          had_ ? "" : "no error ", c_, m_);                                            \
  } while (0)

/* OK(api->buffer_free(rt, b)) for each buffer given, in order. */
#define FREE_BUFFERS(rt, ...)                                                 \
  do {                                                                        \
    gpurt_buffer *fb_[] = {__VA_ARGS__};                                      \
    for (size_t i_ = 0; i_ < sizeof fb_ / sizeof fb_[0]; i_++) OK(api->buffer_free((rt), fb_[i_])); \
  } while (0)

/* ---- the plugin ----------------------------------------------------------------- */

/* dlopens the plugin at path and returns its entry point; NULL (said on
 * stdout, with "0 passed, 1 failed") when it cannot. */
static inline gpurt_negotiate_fn plugin_entry(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("cannot dlopen %s: %s\n0 passed, 1 failed\n", path, dlerror());
    return NULL;
  }
  gpurt_negotiate_fn fn;
  *(void **)&fn = dlsym(h, GPURT_ENTRY_SYMBOL);
  if (fn == NULL) printf("no %s in %s\n0 passed, 1 failed\n", GPURT_ENTRY_SYMBOL, path);
  return fn;
}

/* ---- argument structs ----------------------------------------------------------- */

static inline uint64_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* A synchronous copy with nothing set yet. */
static inline gpurt_copy_args copy_args(void) {
  gpurt_copy_args c;
  ARGS_INIT(c);
  c.flags = GPURT_COPY_SYNC;
  return c;
}

/* An asynchronous copy on s of size bytes between buffers and host buffers
 * (one end set on each side). */
static inline gpurt_copy_args async_copy_args(gpurt_stream *s, gpurt_buffer *db, gpurt_host_buffer *dh,
                                              gpurt_buffer *sb, gpurt_host_buffer *sh, uint64_t size) {
  gpurt_copy_args c = {.struct_size = sizeof c, .stream = s, .size = size,
                       .dst_buffer = db, .dst_host = dh, .src_buffer = sb, .src_host = sh};
  return c;
}

/* A synchronous copy of size bytes on s (or none) between the ends given
 * (a buffer and offset, or a host pointer, on each side). */
static inline gpurt_error *copy_sync(gpurt_runtime *rt, gpurt_stream *s, gpurt_buffer *db, uint64_t doff, void *dp,
                                     gpurt_buffer *sb, uint64_t soff, const void *sp, uint64_t size) {
  gpurt_copy_args c = {.struct_size = sizeof c, .stream = s, .flags = GPURT_COPY_SYNC, .size = size,
                       .dst_buffer = db, .dst_offset = doff, .dst_ptr = dp,
                       .src_buffer = sb, .src_offset = soff, .src_ptr = sp};
  return api->copy(rt, &c);
}

/* n bytes from host src into b, and of b into host dst (synchronous). */
static inline gpurt_error *upload_on(gpurt_runtime *rt, gpurt_stream *s, gpurt_buffer *b, const void *src,
                                     uint64_t n) {
  return copy_sync(rt, s, b, 0, NULL, NULL, 0, src, n);
}
static inline gpurt_error *download_on(gpurt_runtime *rt, gpurt_stream *s, void *dst, gpurt_buffer *b,
                                       uint64_t n) {
  return copy_sync(rt, s, NULL, 0, dst, b, 0, NULL, n);
}

/* D = alpha * A B (no C, bias or scales; offsets 0). */
static inline gpurt_gemm_run_args gemm_run_args(gpurt_buffer *a, gpurt_buffer *b, gpurt_buffer *d, double alpha) {
  gpurt_gemm_run_args r = {.struct_size = sizeof r, .a = a, .b = b, .d = d, .alpha = alpha};
  return r;
}

/* size bytes of b from off set to value, element_size es (no stream). */
static inline gpurt_memset_args memset_args(gpurt_buffer *b, uint64_t off, uint64_t size, uint32_t value,
                                            uint32_t es) {
  gpurt_memset_args m = {.struct_size = sizeof m, .buffer = b, .offset = off, .size = size, .value = value,
                         .element_size = es};
  return m;
}

/* An m x n x k GEMM of one batch: A and B of type ab, C and D of type cd,
 * leading dimensions lda, ldb and ldd (C's too). */
static inline gpurt_gemm_desc gemm_desc(int32_t ab, int32_t cd, uint64_t m, uint64_t n, uint64_t k, uint64_t lda,
                                        uint64_t ldb, uint64_t ldd) {
  gpurt_gemm_desc d = {.struct_size = sizeof d, .a_type = ab, .b_type = ab, .c_type = cd, .d_type = cd,
                       .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldd, .ldd = ldd, .batch_count = 1};
  return d;
}

/* An n x n x n GEMM of dtype throughout (leading dimensions n). */
static inline gpurt_gemm_desc gemm_desc_square(int32_t dtype, uint64_t n) {
  return gemm_desc(dtype, dtype, n, n, n, n, n, n);
}

static inline gpurt_kernel_arg arg_val(int32_t kind, uint32_t size, uint64_t v) {
  gpurt_kernel_arg a = {.kind = kind, .size = size, .value = v};
  return a;
}
static inline gpurt_kernel_arg arg_buf(gpurt_buffer *b, uint64_t off, uint64_t len) {
  gpurt_kernel_arg a = {.kind = GPURT_ARG_BUFFER, .size = 8, .buffer = b, .offset = off, .length = len};
  return a;
}
static inline gpurt_kernel_arg arg_u64(uint64_t v) { return arg_val(GPURT_ARG_U64, 8, v); }
static inline gpurt_kernel_arg arg_f32(float f) { return arg_val(GPURT_ARG_F32, 4, f32_bits(f)); }

/* A launch of grid x 1 x 1 blocks of block x 1 x 1 threads. */
static inline gpurt_launch_args launch_args(uint32_t grid, uint32_t block, const gpurt_kernel_arg *args,
                                            uint32_t n) {
  gpurt_launch_args l = {.struct_size = sizeof l, .grid = {grid, 1, 1}, .block = {block, 1, 1}, .args = args,
                         .num_args = n};
  return l;
}

static inline gpurt_error *launch1d(gpurt_runtime *rt, gpurt_stream *s, gpurt_kernel *k, uint32_t grid,
                                    uint32_t block, const gpurt_kernel_arg *args, uint32_t n) {
  gpurt_launch_args l = launch_args(grid, block, args, n);
  return api->launch(rt, s, k, &l);
}

/* The built-in module (GPURT_MODULE_BUILTIN). */
static inline gpurt_error *load_builtin(gpurt_runtime *rt, gpurt_module **out) {
  gpurt_module_load_args ml;
  ARGS_INIT(ml);
  ml.format = GPURT_MODULE_BUILTIN;
  return api->module_load(rt, &ml, out);
}

/* A graph item recording a call of the slot at offset `slot` of gpurt_api. */
static inline gpurt_graph_item call_item(uint64_t slot, void *object, const void *args) {
  gpurt_graph_item it = {.struct_size = sizeof it, .kind = GPURT_GRAPH_OP_CALL, .slot = slot, .object = object,
                         .args = args};
  return it;
}

/* A graph of the n items. */
static inline gpurt_graph_create_args graph_args(const gpurt_graph_item *items, uint64_t n) {
  gpurt_graph_create_args ga = {.struct_size = sizeof ga, .count = n, .items = items, .item_size = sizeof items[0]};
  return ga;
}

/* An update of one item: *upd at index *idx. */
static inline gpurt_graph_update_args update_args(const uint64_t *idx, const gpurt_graph_item *upd) {
  gpurt_graph_update_args ua = {.struct_size = sizeof ua, .count = 1, .indices = idx, .items = upd,
                                .item_size = sizeof *upd};
  return ua;
}

/* ---- host-side values ----------------------------------------------------------- */

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Round to nearest even; finite inputs. */
static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* xorshift64: a fixed sequence from *state. */
static inline uint64_t xorshift(uint64_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

#endif
