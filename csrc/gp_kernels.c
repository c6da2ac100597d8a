/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in kernels of gpurt.h ("Built-in kernels"), executed on the CPU
 * thread by thread: i = blockIdx.x * blockDim.x + threadIdx.x, a thread with
 * i >= n does nothing, arithmetic in f32 rounded to T (nearest even). */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE /* clock_gettime, nanosleep, posix_memalign */
#endif
#include <string.h>
#include <time.h>

#include "gp_common.h"

#define B GPURT_ARG_BUFFER
#define U64 GPURT_ARG_U64
#define F32 GPURT_ARG_F32

#define GP_KERNELS_OF(sfx, dt, vkind, vsize)                                     \
  {"fill_" sfx, GP_BK_FILL, dt, 3, {B, vkind, U64, 0}, {8, vsize, 8, 0}, 2, 1},  \
  {"scale_" sfx, GP_BK_SCALE, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2},      \
  {"axpy_" sfx, GP_BK_AXPY, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2},        \
  {"add_" sfx, GP_BK_ADD, dt, 4, {B, B, B, U64}, {8, 8, 8, 8}, 3, 3},            \
  {"mul_" sfx, GP_BK_MUL, dt, 4, {B, B, B, U64}, {8, 8, 8, 8}, 3, 3}

const gp_builtin_kernel gp_builtin_kernels[] = {
    GP_KERNELS_OF("f32", GPURT_DTYPE_F32, GPURT_ARG_F32, 4),
    GP_KERNELS_OF("f16", GPURT_DTYPE_F16, GPURT_ARG_F16, 2),
    GP_KERNELS_OF("bf16", GPURT_DTYPE_BF16, GPURT_ARG_BF16, 2),
    {"sleep_ns", GP_BK_SLEEP, GPURT_DTYPE_INVALID, 1, {U64, 0, 0, 0}, {8, 0, 0, 0}, 0, 0},
};
const size_t gp_builtin_kernel_count =
    sizeof gp_builtin_kernels / sizeof gp_builtin_kernels[0];

const gp_builtin_kernel *gp_builtin_find(const char *name, size_t len) {
  for (size_t i = 0; i < gp_builtin_kernel_count; i++) {
    const char *n = gp_builtin_kernels[i].name;
    if (strlen(n) == len && memcmp(n, name, len) == 0) return &gp_builtin_kernels[i];
  }
  return NULL;
}

uint64_t gp_launch_touched(const gp_launch_exec *e) {
  if (e->k->op == GP_BK_SLEEP) return 0;
  uint64_t n = e->scalar[e->k->n_param];
  uint64_t threads = (uint64_t)e->grid[0] * (uint64_t)e->block[0];
  return n < threads ? n : threads;
}

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
      default:
        break;
    }
  }
}
