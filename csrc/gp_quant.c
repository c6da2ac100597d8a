/* SPDX-License-Identifier: Apache-2.0 */
/* Argument checks of quant_matmul and grouped_gemm (1.4); see gp_quant.h. */
#include <string.h>

#include "gp_quant.h"

#define U(x) ((unsigned long long)(x))

/* a * b, or 0 with *ovf set when it overflows. */
static uint64_t mul(uint64_t a, uint64_t b, int *ovf) {
  if (a != 0 && b > UINT64_MAX / a) {
    *ovf = 1;
    return 0;
  }
  return a * b;
}

static int is_half(int32_t t) { return t == GPURT_DTYPE_F16 || t == GPURT_DTYPE_BF16; }

/* A buffer operand: set, and its offset aligned. */
static gpurt_error *operand(const char *op, const char *name, const gpurt_buffer *b, uint64_t off,
                            uint64_t align) {
  if (b == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  if (off % align != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s_offset %llu is not a multiple of %llu (%s must be "
                  "%llu-byte aligned)", op, name, U(off), U(align), name, U(align));
  return NULL;
}

/* The UNSUPPORTED error of a type the op does not take (allowed: those it
 * does). */
static gpurt_error *bad_type(const char *op, const char *name, int32_t t, const char *allowed) {
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: %s %s (%d) is not supported (%s)", op, name, gp_dtype_name(t), t,
                allowed);
}

gpurt_error *gp_quant_mm_check(const gpurt_quant_matmul_args *in, gp_quant_mm *out) {
  const char *op = "quant_matmul";
  memset(out, 0, sizeof *out);
  gpurt_error *e = gp_read_struct(&out->a, sizeof out->a, in, "quant_matmul: args");
  if (e) return e;
  const gpurt_quant_matmul_args *a = &out->a;
  if (!is_half(a->x_type)) return bad_type(op, "x_type", a->x_type, "f16 or bf16");
  if (!is_half(a->scale_type)) return bad_type(op, "scale_type", a->scale_type, "f16 or bf16");
  if (a->bits != 8)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: bits %u is not supported (8)", op, a->bits);
  if (a->group_size != 32 && a->group_size != 64 && a->group_size != 128)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: group_size %u is not supported (32, 64 or 128)", op,
                  a->group_size);
  if (a->m == 0 || a->n == 0 || a->k == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is 0 (m=%llu n=%llu k=%llu; each must be >= 1)", op,
                  a->m == 0 ? "m" : a->n == 0 ? "n" : "k", U(a->m), U(a->n), U(a->k));
  if (a->k % a->group_size != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: k %llu is not a multiple of group_size %u", op, U(a->k),
                  a->group_size);
  if (a->m > UINT32_MAX || a->n > UINT32_MAX || a->k > UINT32_MAX)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: m, n and k must each be below 2^32 (m=%llu n=%llu k=%llu)", op,
                  U(a->m), U(a->n), U(a->k));
  int ovf = 0;
  out->groups = a->k / a->group_size;
  out->w_bytes = mul(a->m, a->k, &ovf);
  out->s_bytes = mul(mul(a->m, out->groups, &ovf), 2, &ovf);
  out->x_bytes = mul(mul(a->n, a->k, &ovf), 2, &ovf);
  out->y_bytes = mul(mul(a->n, a->m, &ovf), 2, &ovf);
  if (ovf) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: the operands' sizes overflow 64 bits", op);
  if ((e = operand(op, "w", a->w, a->w_offset, 16)) || (e = operand(op, "scales", a->scales, a->scales_offset, 2)) ||
      (e = operand(op, "biases", a->biases, a->biases_offset, 2)) || (e = operand(op, "x", a->x, a->x_offset, 16)) ||
      (e = operand(op, "y", a->y, a->y_offset, 2)))
    return e;
  return NULL;
}

gpurt_error *gp_grouped_check(const gpurt_grouped_gemm_args *in, gp_grouped *out) {
  const char *op = "grouped_gemm";
  memset(out, 0, sizeof *out);
  gpurt_error *e = gp_read_struct(&out->a, sizeof out->a, in, "grouped_gemm: args");
  if (e) return e;
  const gpurt_grouped_gemm_args *a = &out->a;
  if (a->ab_type != GPURT_DTYPE_BF16 && a->ab_type != GPURT_DTYPE_FP8_E4M3)
    return bad_type(op, "ab_type", a->ab_type, "bf16 or fp8_e4m3");
  if (a->d_type != GPURT_DTYPE_BF16) return bad_type(op, "d_type", a->d_type, "bf16");
  if (a->group_count == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: group_count is 0 (must be >= 1)", op);
  if (a->n == 0 || a->k == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is 0 (n=%llu k=%llu; each must be >= 1)", op,
                  a->n == 0 ? "n" : "k", U(a->n), U(a->k));
  if (a->m_sizes != NULL && a->m_counts != NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: m_sizes and m_counts are both set (the row counts come from "
                  "one of them: host or device)", op);
  if (a->m_sizes == NULL && a->m_counts == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: m_sizes is NULL", op);
  if (a->m_counts == NULL && a->max_m != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: max_m is %llu without m_counts (it bounds the rows of device "
                  "counts; 0 with m_sizes)", op, U(a->max_m));
  if (a->m_counts != NULL && a->max_m == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: max_m is 0 with m_counts (must be >= 1: the rows A and D "
                  "hold)", op);
  if (a->group_count > UINT32_MAX || a->n > UINT32_MAX || a->k > UINT32_MAX)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: group_count, n and k must each be below 2^32", op);
  if (a->max_m > UINT32_MAX)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: max_m %llu must be below 2^32", op, U(a->max_m));
  out->fp8 = a->ab_type == GPURT_DTYPE_FP8_E4M3;
  if (out->fp8 && a->k % 128 != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: k %llu is not a multiple of 128 (fp8 block scales cover "
                  "128 x 128 blocks)", op, U(a->k));
  uint64_t total = a->max_m; /* device counts: the rows the operands hold */
  out->dev_counts = a->m_counts != NULL;
  for (uint64_t g = 0; !out->dev_counts && g < a->group_count; g++) {
    uint64_t m = a->m_sizes[g];
    if (m > UINT32_MAX || total + m > UINT32_MAX)
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: m_sizes[%llu] = %llu takes the total rows past 2^32 - 1", op,
                    U(g), U(m));
    total += m;
  }
  out->total_m = total;
  int ovf = 0;
  uint64_t es = out->fp8 ? 1 : 2;
  out->a_bytes = mul(mul(total, a->k, &ovf), es, &ovf);
  out->b_bytes = mul(mul(mul(a->group_count, a->n, &ovf), a->k, &ovf), es, &ovf);
  out->d_bytes = mul(mul(total, a->n, &ovf), 2, &ovf);
  if (out->fp8) {
    out->kb = a->k / 128;
    out->nb = (a->n + 127) / 128;
    out->sa_bytes = mul(mul(total, out->kb, &ovf), 4, &ovf);
    out->sb_bytes = mul(mul(mul(a->group_count, out->nb, &ovf), out->kb, &ovf), 4, &ovf);
  }
  if (ovf) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: the operands' sizes overflow 64 bits", op);
  if ((e = operand(op, "a", a->a, a->a_offset, 16)) || (e = operand(op, "b", a->b, a->b_offset, 16)) ||
      (e = operand(op, "d", a->d, a->d_offset, 2)))
    return e;
  if (out->dev_counts && (e = operand(op, "m_counts", a->m_counts, a->m_counts_offset, 4))) return e;
  if (out->fp8) {
    if ((e = operand(op, "scale_a", a->scale_a, a->scale_a_offset, 4)) ||
        (e = operand(op, "scale_b", a->scale_b, a->scale_b_offset, 4)))
      return e;
  } else if (a->scale_a || a->scale_b) {
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: scale_%s is set but scales apply to fp8 operands only", op,
                  a->scale_a ? "a" : "b");
  }
  return NULL;
}
