/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_runtime.c — the mock's bottom floor: the clock, the lost-device
 * state its workers read, and the fault counters (fail_alloc_nth,
 * fail_launch_nth). Every other file of the mock may use these; this file
 * uses none of theirs (plugins/mock/layers_test.go holds the layers).
 */
#include "mock_internal.h"

uint64_t mock_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mock_is_lost(mock_rt *rt, uint32_t dev) { return dev < rt->ndev && atomic_load(&rt->lost[dev]) != 0; }

int mock_alloc_fault(mock_rt *rt) {
  pthread_mutex_lock(&rt->mu);
  int fail = rt->fail_alloc_nth > 0 && --rt->fail_alloc_nth == 0;
  pthread_mutex_unlock(&rt->mu);
  return fail;
}

uint64_t mock_launch_faults(mock_rt *rt, uint64_t n) {
  pthread_mutex_lock(&rt->mu);
  uint64_t at = gp_fault_launches(&rt->fail_launch_nth, n);
  pthread_mutex_unlock(&rt->mu);
  return at;
}
