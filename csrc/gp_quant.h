/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_quant.h — argument checks of the 1.4 ops (quant_matmul, grouped_gemm)
 * shared by the plugins: every field's domain, with the same messages on
 * every backend, and the byte extent of every operand. Buffers themselves
 * (handles, devices, ranges) are the plugin's to check.
 */
#ifndef GPURT_CSRC_QUANT_H_
#define GPURT_CSRC_QUANT_H_

#include "gp_common.h"

/* A checked quant_matmul: the caller's arguments (zero-extended to this
 * ABI's struct) and each operand's extent in bytes. */
typedef struct gp_quant_mm {
  gpurt_quant_matmul_args a;
  uint64_t groups;     /* k / group_size */
  uint64_t w_bytes, s_bytes, x_bytes, y_bytes; /* s_bytes: scales, biases */
} gp_quant_mm;

/* INVALID_ARGUMENT / UNSUPPORTED naming the field ("quant_matmul: ..."). */
gpurt_error *gp_quant_mm_check(const gpurt_quant_matmul_args *in, gp_quant_mm *out);

/* A checked grouped_gemm. m_sizes stays the caller's (borrowed). */
typedef struct gp_grouped {
  gpurt_grouped_gemm_args a;
  uint64_t total_m;    /* sum of m_sizes; with device counts, max_m (the rows the operands hold) */
  int dev_counts;      /* 1.11: the counts are a.m_counts's, read on the device (m_sizes NULL) */
  uint64_t kb, nb;     /* fp8: k/128 and ceil(n/128); else 0 */
  uint64_t a_bytes, b_bytes, d_bytes, sa_bytes, sb_bytes;
  int fp8;
} gp_grouped;

gpurt_error *gp_grouped_check(const gpurt_grouped_gemm_args *in, gp_grouped *out);

#endif /* GPURT_CSRC_QUANT_H_ */
