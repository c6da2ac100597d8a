/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Drives csrc/gp_path.c for trust_c_test.go:
 *   pathcheck PATH...   one line per path: "ok\t<resolved>" or "refused\t<why>"
 *   pathcheck --env NAME  "euid <n>" then "set\t<value>" or "unset"
 *   pathcheck --open PATH [SYMBOL]  gp_trusted_open: "ok\t<fd path>\t<the file
 *     it names>" (then, with SYMBOL, dlopen of the fd path and
 *     "\tsymbol found" or "\tdlopen failed: <why>"), or "refused\t<why>"
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gp_path.h"

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--env") == 0) {
    const char *v = gp_secure_getenv(argv[2]);
    printf("euid %u\n", (unsigned)geteuid());
    if (v) printf("set\t%s\n", v);
    else printf("unset\n");
    return 0;
  }
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "--open") == 0) {
    char fdpath[64], why[1024], target[4096];
    int fd = -1;
    if (gp_trusted_open(argv[2], &fd, fdpath, sizeof fdpath, why, sizeof why) != 0) {
      printf("refused\t%s\n", why);
      return fd == -1 ? 0 : 1;
    }
    ssize_t n = readlink(fdpath, target, sizeof target - 1);
    target[n < 0 ? 0 : n] = 0;
    printf("ok\t%s\t%s", fdpath, target);
    if (argc == 4) {
      void *h = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
      if (h == NULL) printf("\tdlopen failed: %s", dlerror());
      else printf("\t%s", dlsym(h, argv[3]) != NULL ? "symbol found" : "symbol missing");
    }
    printf("\n");
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    char res[4096], why[1024];
    if (gp_trusted_file(argv[i], res, sizeof res, why, sizeof why) == 0) printf("ok\t%s\n", res);
    else printf("refused\t%s\n", why);
  }
  return 0;
}
