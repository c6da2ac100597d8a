/* SPDX-License-Identifier: Apache-2.0 */
/* A tiny harness for the C tests of the CUDA plugin that run on the GPU
 * machine (no Go there): csrc/test/testlib.h (CHECK, OK and ERR that
 * count, kernel-argument and launch helpers, "N passed, M failed" at the
 * end), with loading the plugin and reading a file. */
#ifndef GPURT_CUDA_TEST_HARNESS_H_
#define GPURT_CUDA_TEST_HARNESS_H_

#include "../../../csrc/test/testlib.h"

/* dlopens and negotiates the plugin; exits (with "0 passed, 1 failed")
 * when it cannot. */
static void load_plugin(const char *path) {
  gpurt_negotiate_fn fn = plugin_entry(path);
  if (fn == NULL) exit(1);
  gpurt_negotiate_args a;
  ARGS_INIT(a);
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  int32_t rc = fn(&a);
  if (rc != GPURT_OK || a.api == NULL) {
    printf("negotiate failed: %d %s\n0 passed, 1 failed\n", rc, a.message);
    exit(1);
  }
  api = a.api;
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

#endif
