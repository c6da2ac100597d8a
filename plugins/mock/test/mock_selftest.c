/* SPDX-License-Identifier: Apache-2.0 */
/* Placeholder; the full selftest follows. */
#include <dlfcn.h>
#include <stdio.h>
#include "gpurt.h"
int main(int argc, char **argv) {
  if (argc < 2) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  gpurt_negotiate_fn f = (gpurt_negotiate_fn)dlsym(h, GPURT_ENTRY_SYMBOL);
  gpurt_negotiate_args a = {sizeof a, GPURT_ABI_MAJOR, GPURT_ABI_MINOR, 0, 0, 0, {0}};
  int ok = f && f(&a) == 0 && a.api != NULL;
  printf("%d passed, %d failed\n", ok, !ok);
  return ok ? 0 : 1;
}
