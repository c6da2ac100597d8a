/* SPDX-License-Identifier: Apache-2.0 */
/* The built-in kernels' signature table: the one list every plugin's
 * built-in module answers kernel_get and checks launches from (the CUDA
 * plugin links it too, so it needs nothing beyond libc). Adding a built-in
 * kernel: one row here (name, op, dtype, parameters), its implementation in
 * gp_kernels.c (the mock), plugins/cuda/src/cuda_kernels.cu and
 * plugins/metal/kernels/gpurt_builtin.metal, and gpurt.h's list. */
#include <string.h>

#include "gp_common.h"

#define B GPURT_ARG_BUFFER
#define U64 GPURT_ARG_U64
#define F32 GPURT_ARG_F32

#define GP_KERNELS_OF(sfx, dt, vkind, vsize)                                     \
  {"fill_" sfx, GP_BK_FILL, dt, 3, {B, vkind, U64, 0}, {8, vsize, 8, 0}, 2, 1},  \
  {"scale_" sfx, GP_BK_SCALE, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2},      \
  {"axpy_" sfx, GP_BK_AXPY, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2},        \
  {"add_" sfx, GP_BK_ADD, dt, 4, {B, B, B, U64}, {8, 8, 8, 8}, 3, 3},            \
  {"mul_" sfx, GP_BK_MUL, dt, 4, {B, B, B, U64}, {8, 8, 8, 8}, 3, 3},            \
  {"silu_mul_" sfx, GP_BK_SILU_MUL, dt, 4, {B, B, B, U64}, {8, 8, 8, 8}, 3, 3},  \
  {"softcap_" sfx, GP_BK_SOFTCAP, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2}

const gp_builtin_kernel gp_builtin_kernels[] = {
    GP_KERNELS_OF("f32", GPURT_DTYPE_F32, GPURT_ARG_F32, 4),
    GP_KERNELS_OF("f16", GPURT_DTYPE_F16, GPURT_ARG_F16, 2),
    GP_KERNELS_OF("bf16", GPURT_DTYPE_BF16, GPURT_ARG_BF16, 2),
    {"sleep_ns", GP_BK_SLEEP, GPURT_DTYPE_INVALID, 1, {U64, 0, 0, 0}, {8, 0, 0, 0}, 0, 0},
};
#undef B
#undef U64
#undef F32

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
