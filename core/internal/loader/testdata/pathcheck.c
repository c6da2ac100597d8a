/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Drives csrc/gp_path.c for trust_c_test.go:
 *   pathcheck PATH...   one line per path: "ok\t<resolved>" or "refused\t<why>"
 *   pathcheck --env NAME  "euid <n>" then "set\t<value>" or "unset"
 */
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
  for (int i = 1; i < argc; i++) {
    char res[4096], why[1024];
    if (gp_trusted_file(argv[i], res, sizeof res, why, sizeof why) == 0) printf("ok\t%s\n", res);
    else printf("refused\t%s\n", why);
  }
  return 0;
}
