/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in kernels of gpurt.h ("Built-in kernels"), executed on the CPU
 * for the mock (their table is gp_builtin.c), thread by thread:
 * i = blockIdx.x * blockDim.x + threadIdx.x, a thread with i >= n does
 * nothing, arithmetic in f32 rounded to T (nearest even). */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE /* clock_gettime, nanosleep, posix_memalign */
#endif
#include <math.h>
#include <string.h>
#include <time.h>

#include "gp_common.h"

static float gp_bits_to_f32(uint64_t bits) {
  uint32_t u = (uint32_t)bits;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Do two byte ranges overlap? */
static int gp_overlap(const void *a, const void *b, uint64_t bytes) {
  const char *x = a, *y = b;
  return x < y + bytes && y < x + bytes;
}

void gp_launch_run(const gp_launch_exec *e) {
  const gp_builtin_kernel *k = e->k;
  if (k->op == GP_BK_SLEEP) {
    uint64_t ns = e->scalar[0];
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return;
  }
  uint64_t n = gp_launch_touched(e);
  if (n == 0) return;
  /* Threads that share an x index (grid/block y and z beyond 1) each apply
   * the op to the same element, as on a GPU; it only matters when the op
   * reads what it writes. */
  uint64_t reps = (uint64_t)e->grid[1] * e->grid[2] * e->block[1] * e->block[2];
  size_t es = gp_dtype_size(k->dtype);
  int reads_own_output = k->op == GP_BK_AXPY;
  for (uint32_t b = 1; b < k->num_buffers; b++)
    if (gp_overlap(e->bufs[0], e->bufs[b], n * es)) reads_own_output = 1;
  if (!reads_own_output) reps = 1;
  int32_t dt = k->dtype;
  void *y = e->bufs[0];
  for (uint64_t r = 0; r < reps; r++) {
    switch (k->op) {
      case GP_BK_FILL: {
        uint64_t v = e->scalar[1];
        if (es == 4) {
          uint32_t u = (uint32_t)v;
          for (uint64_t i = 0; i < n; i++) memcpy((char *)y + i * 4, &u, 4);
        } else {
          uint16_t u = (uint16_t)v;
          for (uint64_t i = 0; i < n; i++) memcpy((char *)y + i * 2, &u, 2);
        }
        break;
      }
      case GP_BK_SCALE: {
        float alpha = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++) {
          float p = alpha * gp_load(dt, e->bufs[1], i);
          gp_store(dt, y, i, p);
        }
        break;
      }
      case GP_BK_AXPY: {
        float alpha = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++) {
          float p = alpha * gp_load(dt, e->bufs[1], i);
          float s = p + gp_load(dt, y, i);
          gp_store(dt, y, i, s);
        }
        break;
      }
      case GP_BK_ADD:
        for (uint64_t i = 0; i < n; i++) {
          float s = gp_load(dt, e->bufs[1], i) + gp_load(dt, e->bufs[2], i);
          gp_store(dt, y, i, s);
        }
        break;
      case GP_BK_MUL:
        for (uint64_t i = 0; i < n; i++) {
          float s = gp_load(dt, e->bufs[1], i) * gp_load(dt, e->bufs[2], i);
          gp_store(dt, y, i, s);
        }
        break;
      case GP_BK_SILU_MUL:
        for (uint64_t i = 0; i < n; i++) {
          float g = gp_load(dt, e->bufs[1], i);
          float s = g / (1.0f + expf(-g));
          gp_store(dt, y, i, s * gp_load(dt, e->bufs[2], i));
        }
        break;
      case GP_BK_SOFTCAP: {
        float cap = gp_bits_to_f32(e->scalar[2]);
        for (uint64_t i = 0; i < n; i++)
          gp_store(dt, y, i, cap * tanhf(gp_load(dt, e->bufs[1], i) / cap));
        break;
      }
      default:
        break;
    }
  }
}
