/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_runtime.c — the mock's bottom floor: the process-wide runtime table,
 * handle lookups, the lost-device state, device checks, the allocation
 * fault counter and buffer release. Every other file of the mock uses
 * these; this file uses none of theirs (plugins/mock/README.md draws the
 * layers; plugins/mock/layers_test.go holds them).
 */
#include "mock_internal.h"


static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gp_handle_table g_rts;
static int g_rts_init;
static uint32_t g_serial;

gpurt_error *mock_get_rt(gpurt_runtime *h, mock_rt **out) {
  void *o = NULL;
  int st;
  pthread_mutex_lock(&g_mu);
  if (h == NULL) st = GP_HANDLE_NULL;
  else if (!g_rts_init) st = ((uintptr_t)h >> 56) == GP_KIND_RUNTIME ? GP_HANDLE_STALE : GP_HANDLE_WRONG_KIND;
  else st = gp_table_lookup(&g_rts, (uintptr_t)h, &o);
  pthread_mutex_unlock(&g_mu);
  if (st == GP_HANDLE_FOREIGN) st = GP_HANDLE_STALE; /* runtimes have no owner */
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_RUNTIME, (uintptr_t)h);
  *out = o;
  return NULL;
}

/* Looks a handle up in one of the runtime's tables. */
gpurt_error *mock_lookup(mock_rt *rt, gp_handle_table *t, const void *h, void **out) {
  pthread_mutex_lock(&rt->mu);
  int st = gp_table_lookup(t, (uintptr_t)h, out);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, t->kind, (uintptr_t)h);
  return NULL;
}


uint64_t mock_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mock_is_lost(mock_rt *rt, uint32_t dev) {
  return dev < rt->ndev && atomic_load(&rt->lost[dev]) != 0;
}

gpurt_error *mock_lost_err(const char *what, uint32_t dev) {
  return gp_err(GPURT_ERR_DEVICE_LOST, "%s: device %u is lost (injected fault); it refuses all work",
                what, dev);
}

/* A device index the caller named: exists and is not lost. */
gpurt_error *mock_check_dev(mock_rt *rt, uint32_t dev, const char *what) {
  if (dev >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device %u does not exist (the runtime has %u)",
                  what, dev, rt->ndev);
  if (mock_is_lost(rt, dev)) return mock_lost_err(what, dev);
  return NULL;
}

/* Puts a new runtime in the table with a fresh serial (rt->serial);
 * 0 and the handle, or -1 when the table is full. */
int mock_rt_register(mock_rt *rt, uintptr_t *h) {
  pthread_mutex_lock(&g_mu);
  if (!g_rts_init) {
    gp_table_init(&g_rts, GP_KIND_RUNTIME, 0);
    g_rts_init = 1;
  }
  g_serial = (g_serial + 1) & 0xffff;
  if (g_serial == 0) g_serial = 1;
  rt->serial = g_serial;
  int r = gp_table_insert(&g_rts, rt, h);
  pthread_mutex_unlock(&g_mu);
  return r;
}

void mock_rt_unregister(gpurt_runtime *h) {
  pthread_mutex_lock(&g_mu);
  gp_table_remove(&g_rts, (uintptr_t)h);
  pthread_mutex_unlock(&g_mu);
}

uint32_t mock_rt_shutdown(void) {
  pthread_mutex_lock(&g_mu);
  uint32_t live = g_rts_init ? g_rts.live : 0;
  if (g_rts_init && live == 0) {
    gp_table_free(&g_rts);
    g_rts_init = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return live;
}

/* Frees a buffer's memory: guards checked, poison written. Returns an
 * error naming the buffer when a guard was overwritten. */
gpurt_error *mock_buf_release(mock_buf *b, uintptr_t h) {
  const char *where = NULL;
  uint64_t at = 0;
  for (uint32_t i = 0; i < MOCK_GUARD; i++)
    if (b->raw[i] != MOCK_GUARD_BYTE) { where = "before its start"; at = MOCK_GUARD - i; break; }
  if (!where)
    for (uint32_t i = 0; i < MOCK_GUARD; i++)
      if (b->data[b->size + i] != MOCK_GUARD_BYTE) { where = "after its end"; at = i; break; }
  gpurt_error *e = NULL;
  if (where)
    e = gp_err(GPURT_ERR_OUT_OF_RANGE,
               "buffer %#llx (%llu bytes on device %u): guard bytes %s were overwritten "
               "(an out-of-range write, %llu bytes %s); the buffer was freed",
               H(h), U(b->size), b->dev, where, U(at), where[0] == 'b' ? "before" : "past the end");
  memset(b->data, MOCK_POISON, b->size);
  free(b->raw);
  free(b);
  return e;
}

/* Consumes one allocation from the fault counter; 1 when it must fail. */
int mock_alloc_fault_locked(mock_rt *rt) {
  if (rt->fail_alloc_nth <= 0) return 0;
  return --rt->fail_alloc_nth == 0;
}
