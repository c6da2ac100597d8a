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
  {"softcap_" sfx, GP_BK_SOFTCAP, dt, 4, {B, B, F32, U64}, {8, 8, 4, 8}, 3, 2},   \
  {"rmsnorm_" sfx, GP_BK_RMSNORM, dt, 6, {B, B, B, F32, U64, U64}, {8, 8, 8, 4, 8, 8}, 4, 3},      \
  {"rope_llama_" sfx, GP_BK_ROPE_LLAMA, dt, 6, {B, B, F32, U64, U64, U64}, {8, 8, 4, 8, 8, 8}, 3, 2}, \
  {"rope_neox_" sfx, GP_BK_ROPE_NEOX, dt, 6, {B, B, F32, U64, U64, U64}, {8, 8, 4, 8, 8, 8}, 3, 2},   \
  {"embed_" sfx, GP_BK_EMBED, dt, 6, {B, B, B, U64, U64, U64}, {8, 8, 8, 8, 8, 8}, 3, 3},          \
  {"argmax_" sfx, GP_BK_ARGMAX, dt, 4, {B, B, U64, U64}, {8, 8, 8, 8}, 2, 2},                      \
  {"sample_" sfx, GP_BK_SAMPLE, dt, 8, {B, B, U64, U64, U64, F32, F32, U64}, {8, 8, 8, 8, 8, 4, 4, 8}, 2, 2}

/* Per-request sampling (1.8): sample_rows_T(out, x, params, rows, cols, hist). */
#define GP_SAMPLE_ROWS_OF(sfx, dt) \
  {"sample_rows_" sfx, GP_BK_SAMPLE_ROWS, dt, 6, {B, B, B, U64, U64, U64}, {8, 8, 8, 8, 8, 8}, 3, 3}

/* After 1.8 (gpurt.h: a plugin may lack them): add_rmsnorm_T, rope_neox_freqs_T. */
#define GP_FUSED_OF(sfx, dt) \
  {"add_rmsnorm_" sfx, GP_BK_ADD_RMSNORM, dt, 6, {B, B, B, F32, U64, U64}, {8, 8, 8, 4, 8, 8}, 4, 3}, \
  {"rope_neox_freqs_" sfx, GP_BK_ROPE_FREQS, dt, 6, {B, B, B, U64, U64, U64}, {8, 8, 8, 8, 8, 8}, 3, 3}

const gp_builtin_kernel gp_builtin_kernels[] = {
    GP_KERNELS_OF("f32", GPURT_DTYPE_F32, GPURT_ARG_F32, 4),
    GP_KERNELS_OF("f16", GPURT_DTYPE_F16, GPURT_ARG_F16, 2),
    GP_KERNELS_OF("bf16", GPURT_DTYPE_BF16, GPURT_ARG_BF16, 2),
    GP_SAMPLE_ROWS_OF("f32", GPURT_DTYPE_F32),
    GP_SAMPLE_ROWS_OF("f16", GPURT_DTYPE_F16),
    GP_SAMPLE_ROWS_OF("bf16", GPURT_DTYPE_BF16),
    GP_FUSED_OF("f32", GPURT_DTYPE_F32),
    GP_FUSED_OF("f16", GPURT_DTYPE_F16),
    GP_FUSED_OF("bf16", GPURT_DTYPE_BF16),
    {"sleep_ns", GP_BK_SLEEP, GPURT_DTYPE_INVALID, 1, {U64, 0, 0, 0}, {8, 0, 0, 0}, 0, 0},
};
#undef GP_SAMPLE_ROWS_OF
#undef GP_FUSED_OF
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

static uint64_t gp_smul(uint64_t a, uint64_t b) { /* saturating */
  return (a != 0 && b > UINT64_MAX / a) ? UINT64_MAX : a * b;
}

void gp_builtin_need(const gp_builtin_kernel *k, const uint64_t *scalar, const uint32_t *grid,
                     const uint32_t *block, uint64_t need[3]) {
  uint64_t es = gp_dtype_size(k->dtype);
  uint64_t threads = (uint64_t)grid[0] * (uint64_t)block[0];
  need[0] = need[1] = need[2] = 0;
  switch (k->op) {
    case GP_BK_RMSNORM: /* y, x: rows x cols; w: cols */
    case GP_BK_ADD_RMSNORM: { /* x, r: rows x cols; w: cols */
      uint64_t rows = scalar[4] < grid[0] ? scalar[4] : grid[0], cols = scalar[5];
      need[0] = need[1] = gp_smul(gp_smul(rows, cols), es);
      need[2] = rows ? gp_smul(cols, es) : 0;
      return;
    }
    case GP_BK_ROPE_LLAMA:
    case GP_BK_ROPE_NEOX: /* x: tokens x heads x head_dim; pos: tokens int32 */
    case GP_BK_ROPE_FREQS: { /* the same, and inv_freq: head_dim/2 f32 */
      uint64_t per = gp_smul(scalar[4], scalar[5] / 2);
      uint64_t pairs = gp_smul(scalar[3], per);
      uint64_t p = pairs < threads ? pairs : threads;
      uint64_t t = (p == 0 || per == 0) ? 0 : (p - 1) / per + 1;
      need[0] = gp_smul(gp_smul(gp_smul(t, scalar[4]), scalar[5]), es);
      need[1] = gp_smul(t, 4);
      if (k->op == GP_BK_ROPE_FREQS) need[2] = p == 0 ? 0 : gp_smul(p < scalar[5] / 2 ? p : scalar[5] / 2, 4);
      return;
    }
    case GP_BK_EMBED: { /* y: tokens x cols; table: vocab x cols; ids: tokens int32 */
      uint64_t cols = scalar[4], all = gp_smul(scalar[3], cols);
      uint64_t e = all < threads ? all : threads;
      uint64_t t = (e == 0 || cols == 0) ? 0 : (e - 1) / cols + 1;
      need[0] = gp_smul(e, es);
      need[1] = e ? gp_smul(gp_smul(scalar[5], cols), es) : 0;
      need[2] = gp_smul(t, 4);
      return;
    }
    case GP_BK_ARGMAX:
    case GP_BK_SAMPLE: { /* idx: rows int32; x: rows x cols */
      uint64_t rows = scalar[2] < grid[0] ? scalar[2] : grid[0];
      need[0] = gp_smul(rows, 4);
      need[1] = gp_smul(gp_smul(rows, scalar[3]), es);
      return;
    }
    case GP_BK_SAMPLE_ROWS: { /* out: int32 tokens then f32 logprobs, [rows] each; x: rows x cols;
                                 params: the per-row arrays of all rows (GP_SR_*) */
      uint64_t all = scalar[3], rows = all < grid[0] ? all : grid[0];
      if (rows == 0) return;
      need[0] = gp_smul(all, 8);
      need[1] = gp_smul(gp_smul(rows, scalar[4]), es);
      need[2] = gp_smul(all, 40u + gp_smul(scalar[5], 4));
      return;
    }
    default: {
      uint64_t n = scalar[k->n_param];
      uint64_t touched = n < threads ? n : threads;
      for (uint32_t b = 0; b < k->num_buffers && b < 3; b++) need[b] = gp_smul(touched, es);
      return;
    }
  }
}

uint64_t gp_splitmix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
