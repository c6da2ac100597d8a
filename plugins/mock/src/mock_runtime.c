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

int mock_alloc_fault(mock_rt *rt) { return gp_fault_alloc(&rt->mu, &rt->fail_alloc_nth); }

uint64_t mock_launch_faults(mock_rt *rt, uint64_t n) { return gp_fault_launches(&rt->mu, &rt->fail_launch_nth, n); }

int mock_replay_fault(mock_rt *rt) { return gp_fault_launches(&rt->mu, &rt->refuse_replay_nth, 1) == 0; }
