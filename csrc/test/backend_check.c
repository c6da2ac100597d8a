/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_check.c — gp_backend_check (csrc/gp_backend.c): a backend table
 * that leaves unset an entry its ABI minor promises is refused, naming the
 * entry; optional entries and entries of later minors may stay NULL. Built
 * with csrc and run by plugins/mock/backend_test.go. Prints one line per
 * check and last "N passed, M failed".
 */
#include <stdio.h>
#include <string.h>

#include "gp_backend.h"
#include "gp_engine.h"

const char gp_plugin_prefix[] = "test";

static int passed, failed;

static void result(int ok, const char *what, const char *msg) {
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, msg ? ": " : "", msg ? msg : "");
  if (ok) passed++;
  else failed++;
}

/* The message of e (or NULL), e destroyed. */
static const char *take(gpurt_error *e, char *buf, size_t cap) {
  if (e == NULL) return NULL;
  gpurt_error_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  gp_error_get(e, &i);
  snprintf(buf, cap, "%.*s", (int)i.message_len, i.message);
  gp_error_destroy(e);
  return buf;
}

/* A table with every entry set (never called: only checked). */
static gp_backend full(uint32_t minor) {
  gp_backend b;
  memset(&b, 0x5a, sizeof b);
  b.name = "test";
  b.version = "1.7.0";
  b.abi_minor = minor;
  b.priority = 1;
  return b;
}

static void unset(gp_backend *b, size_t offset) { memset((unsigned char *)b + offset, 0, sizeof(void *)); }

int main(void) {
  char m[600];
  gp_backend b = full(GPURT_ABI_MINOR);
  result(take(gp_backend_check(&b), m, sizeof m) == NULL, "a full table is accepted", NULL);

  /* Each promised entry, unset alone, is refused by name. */
  for (size_t i = 0; i < gp_backend_need_count; i++) {
    const gp_backend_need *n = &gp_backend_needs[i];
    b = full(GPURT_ABI_MINOR);
    unset(&b, n->offset);
    const char *msg = take(gp_backend_check(&b), m, sizeof m);
    char want[120];
    snprintf(want, sizeof want, "entry %s is unset", n->name);
    char what[160];
    snprintf(what, sizeof what, "%s unset at 1.%d is refused", n->name, GPURT_ABI_MINOR);
    result(msg != NULL && strstr(msg, want) != NULL, what, msg);
  }

  /* Named cases, independent of the list: an entry of a later minor may be
   * unset; an optional one always. */
  struct {
    const char *what;
    size_t offset;
    uint32_t minor;
    int refused;
  } cases[] = {
      {"attention_run unset at 1.5", offsetof(gp_backend, attention_run), 5, 1},
      {"attention_run unset at 1.4", offsetof(gp_backend, attention_run), 4, 0},
      {"graph_begin unset at 1.3", offsetof(gp_backend, graph_begin), 3, 1},
      {"graph_begin unset at 1.2", offsetof(gp_backend, graph_begin), 2, 0},
      {"launch unset at 1.0", offsetof(gp_backend, launch), 0, 1},
      {"launch_many (optional) unset", offsetof(gp_backend, launch_many), GPURT_ABI_MINOR, 0},
      {"control (optional) unset", offsetof(gp_backend, control), GPURT_ABI_MINOR, 0},
      {"comm_run (optional) unset", offsetof(gp_backend, comm_run), GPURT_ABI_MINOR, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    b = full(cases[i].minor);
    unset(&b, cases[i].offset);
    const char *msg = take(gp_backend_check(&b), m, sizeof m);
    result((msg != NULL) == cases[i].refused, cases[i].what, msg);
  }

  b = full(GPURT_ABI_MINOR + 1);
  const char *msg = take(gp_backend_check(&b), m, sizeof m);
  result(msg != NULL && strstr(msg, "newer than the header") != NULL, "a minor newer than the header is refused",
         msg);
  result(take(gp_backend_check(NULL), m, sizeof m) != NULL, "a NULL table is refused", NULL);

  /* The engine refuses to negotiate over a table that breaks its promise:
   * the plugin fails to load, naming the entry, instead of crashing on
   * the first call of the slot. */
  b = full(GPURT_ABI_MINOR);
  unset(&b, offsetof(gp_backend, kv_append));
  gpurt_negotiate_args na;
  memset(&na, 0, sizeof na);
  na.struct_size = sizeof na;
  na.host_abi_major = GPURT_ABI_MAJOR;
  na.host_abi_minor = GPURT_ABI_MINOR;
  int32_t rc = gp_engine_negotiate(&na, &b);
  result(rc == GPURT_ERR_INTERNAL && na.api == NULL && strstr(na.message, "entry kv_append is unset") != NULL,
         "gp_engine_negotiate refuses a table without kv_append", na.message);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
