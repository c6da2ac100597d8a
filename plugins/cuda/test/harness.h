/* SPDX-License-Identifier: Apache-2.0 */
/* A tiny harness for the C tests of the CUDA plugin that run on the GPU
 * machine (no Go there): dlopen the plugin, negotiate, CHECK macros that
 * count, and "N passed, M failed" at the end. */
#ifndef GPURT_CUDA_TEST_HARNESS_H_
#define GPURT_CUDA_TEST_HARNESS_H_

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpurt.h"

static const gpurt_api *api;
static int passed, failed;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      passed++;                                            \
    } else {                                               \
      failed++;                                            \
      fprintf(stdout, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stdout, __VA_ARGS__);                        \
      fprintf(stdout, "\n");                               \
      fflush(stdout);                                      \
    }                                                      \
  } while (0)

/* Code and message of an error, then frees it; code 0 for NULL. */
static int err_take(gpurt_error *e, char *msg, size_t cap) {
  if (msg && cap) msg[0] = 0;
  if (e == NULL) return 0;
  gpurt_error_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  api->error_get(e, &i);
  if (msg && cap) {
    size_t n = i.message_len < cap - 1 ? (size_t)i.message_len : cap - 1;
    memcpy(msg, i.message, n);
    msg[n] = 0;
  }
  int code = i.code;
  api->error_destroy(e);
  return code;
}

/* Expect success. */
#define OK(call)                                                         \
  do {                                                                   \
    char m_[1024];                                                       \
    int c_ = err_take((call), m_, sizeof m_);                            \
    CHECK(c_ == 0, "%s -> code %d: %s", #call, c_, m_);                  \
  } while (0)

/* Expect a code and a substring of the message. */
#define ERR(call, want, sub)                                             \
  do {                                                                   \
    char m_[1024];                                                       \
    int c_ = err_take((call), m_, sizeof m_);                            \
    CHECK(c_ == (want) && strstr(m_, (sub)) != NULL,                     \
          "%s -> code %d (want %d) message \"%s\" (want \"%s\")", #call, \
          c_, (int)(want), m_, (sub));                                   \
  } while (0)

static void load_plugin(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("cannot dlopen %s: %s\n0 passed, 1 failed\n", path, dlerror());
    exit(1);
  }
  gpurt_negotiate_fn fn = (gpurt_negotiate_fn)dlsym(h, GPURT_ENTRY_SYMBOL);
  if (fn == NULL) {
    printf("no %s in %s\n0 passed, 1 failed\n", GPURT_ENTRY_SYMBOL, path);
    exit(1);
  }
  gpurt_negotiate_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  int32_t rc = fn(&a);
  if (rc != GPURT_OK || a.api == NULL) {
    printf("negotiate failed: %d %s\n0 passed, 1 failed\n", rc, a.message);
    exit(1);
  }
  api = a.api;
}

static int finish(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = 0;
    *len = (size_t)n;
  }
  return buf;
}

static gpurt_kernel_arg arg_buf(gpurt_buffer *b, uint64_t off) {
  gpurt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.kind = GPURT_ARG_BUFFER;
  a.size = 8;
  a.buffer = b;
  a.offset = off;
  return a;
}

static gpurt_kernel_arg arg_scalar(int32_t kind, uint32_t size, uint64_t bits) {
  gpurt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.kind = kind;
  a.size = size;
  a.value = bits;
  return a;
}

static gpurt_error *launch1d(gpurt_runtime *rt, gpurt_stream *s, gpurt_kernel *k,
                             uint32_t grid, uint32_t block, gpurt_kernel_arg *args,
                             uint32_t n) {
  gpurt_launch_args l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.grid[0] = grid;
  l.grid[1] = l.grid[2] = 1;
  l.block[0] = block;
  l.block[1] = l.block[2] = 1;
  l.num_args = n;
  l.args = args;
  return api->launch(rt, s, k, &l);
}

#endif
