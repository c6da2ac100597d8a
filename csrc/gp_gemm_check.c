/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_gemm_check.c — a GEMM descriptor's validation and an operand's extent:
 * the checks every plugin (and the engine) makes, apart from the reference
 * GEMM of gp_gemm.c (which needs libm and is the mock's only).
 */
#include <stdint.h>

#include "gp_common.h"

static int gp_is_fp8(int32_t t) { return t == GPURT_DTYPE_FP8_E4M3 || t == GPURT_DTYPE_FP8_E5M2; }
static int gp_is_float(int32_t t) {
  return t == GPURT_DTYPE_F32 || t == GPURT_DTYPE_F16 || t == GPURT_DTYPE_BF16;
}
static int gp_has_bias(int32_t ep) {
  return ep == GPURT_EPILOGUE_BIAS || ep == GPURT_EPILOGUE_BIAS_RELU || ep == GPURT_EPILOGUE_BIAS_GELU;
}

#define U(x) ((unsigned long long)(x))

gpurt_error *gp_gemm_validate(const gpurt_gemm_desc *d) {
  const char *pre = "gemm_plan_create";
  if (d->m == 0 || d->n == 0 || d->k == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s is 0 (m=%llu n=%llu k=%llu; each must be >= 1)", pre,
                  d->m == 0 ? "m" : d->n == 0 ? "n" : "k", U(d->m), U(d->n), U(d->k));
  if (d->batch_count == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: batch_count is 0 (must be >= 1)", pre);
  if (d->trans_a > 1 || d->trans_b > 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: trans_%s is %u (must be 0 or 1)", pre,
                  d->trans_a > 1 ? "a" : "b", d->trans_a > 1 ? d->trans_a : d->trans_b);
  if (d->flags & ~(uint8_t)GPURT_GEMM_FLAG_CONST_A)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: flags 0x%02x has unknown bits 0x%02x (GPURT_GEMM_FLAG_CONST_A "
                  "is 0x01)", pre, d->flags, d->flags & ~(uint8_t)GPURT_GEMM_FLAG_CONST_A);
  /* Operand types. */
  int32_t at = d->a_type, bt = d->b_type;
  if (!gp_is_float(at) && !gp_is_fp8(at))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: a_type %s (%d) is not supported (f32, f16, bf16, fp8_e4m3, "
                  "fp8_e5m2)", pre, gp_dtype_name(at), at);
  if (gp_is_fp8(at)) {
    if (!gp_is_fp8(bt) || (at == GPURT_DTYPE_FP8_E5M2 && bt == GPURT_DTYPE_FP8_E5M2))
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: b_type %s with a_type %s is not supported (fp8 pairs: "
                    "e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3)", pre, gp_dtype_name(bt), gp_dtype_name(at));
  } else if (bt != at) {
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: b_type %s with a_type %s is not supported (a_type and b_type "
                  "must match)", pre, gp_dtype_name(bt), gp_dtype_name(at));
  }
  if (!gp_is_float(d->c_type))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: c_type %s (%d) is not supported (f32, f16, bf16)", pre,
                  gp_dtype_name(d->c_type), d->c_type);
  if (!gp_is_float(d->d_type) && !(gp_is_fp8(d->d_type) && gp_is_fp8(at)))
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: d_type %s (%d) is not supported with a_type %s (f32, f16, bf16; "
                  "fp8 only for fp8 operands)", pre, gp_dtype_name(d->d_type), d->d_type, gp_dtype_name(at));
  if (d->compute_type < GPURT_COMPUTE_DEFAULT || d->compute_type > GPURT_COMPUTE_F16)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: compute_type %d is not supported", pre, d->compute_type);
  if (d->epilogue < GPURT_EPILOGUE_NONE || d->epilogue > GPURT_EPILOGUE_BIAS_GELU)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: epilogue %d is not supported", pre, d->epilogue);
  if (gp_has_bias(d->epilogue) && d->bias_type != d->d_type && d->bias_type != GPURT_DTYPE_F32)
    return gp_err(GPURT_ERR_UNSUPPORTED, "%s: bias_type %s (%d) is not supported with d_type %s (bias_type "
                  "must be d_type or f32)", pre, gp_dtype_name(d->bias_type), d->bias_type,
                  gp_dtype_name(d->d_type));
  if (d->prologue > GPURT_GEMM_PROLOGUE_SWIGLU)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: prologue %u is not a GPURT_GEMM_PROLOGUE_* (0 none, 1 rmsnorm, "
                  "2 swiglu)", pre, d->prologue);
  if (d->prologue != GPURT_GEMM_PROLOGUE_NONE) {
    const char *pn = d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM ? "rmsnorm" : "swiglu";
    if (d->trans_b)
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the %s prologue needs trans_b 0 (each column of B one "
                    "token's k values)", pre, pn);
    if (d->batch_count != 1)
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the %s prologue needs batch_count 1 (it is %llu)", pre, pn,
                    U(d->batch_count));
    if (!gp_is_float(bt))
      return gp_err(GPURT_ERR_UNSUPPORTED, "%s: the %s prologue needs b_type f32, f16 or bf16 (it is %s)", pre,
                    pn, gp_dtype_name(bt));
  }
  /* Leading dimensions: at least the rows of the stored matrix. */
  uint64_t ar = d->trans_a ? d->k : d->m, br = d->trans_b ? d->n : d->k;
  if (d->lda < ar)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: lda %llu is below the %llu rows of stored A", pre,
                  U(d->lda), U(ar));
  if (d->ldb < br)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: ldb %llu is below the %llu rows of stored B", pre,
                  U(d->ldb), U(br));
  if (d->ldc < d->m)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: ldc %llu is below m = %llu", pre, U(d->ldc), U(d->m));
  if (d->ldd < d->m)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: ldd %llu is below m = %llu", pre, U(d->ldd), U(d->m));
  if (d->batch_count > 1) {
    const int64_t st[4] = {d->stride_a, d->stride_b, d->stride_c, d->stride_d};
    const char *nm[4] = {"stride_a", "stride_b", "stride_c", "stride_d"};
    for (int i = 0; i < 4; i++)
      if (st[i] < 0)
        return gp_err(GPURT_ERR_UNSUPPORTED, "%s: %s is negative (%lld)", pre, nm[i], (long long)st[i]);
    uint64_t dspan = gp_gemm_extent(d->m, d->n, d->ldd, 1, 0);
    if ((uint64_t)d->stride_d < dspan)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: stride_d %lld is below the %llu elements one batch of D "
                    "spans (batches of D would overlap)", pre, (long long)d->stride_d, U(dspan));
  }
  const uint32_t al[4] = {d->align_a, d->align_b, d->align_c, d->align_d};
  const char *an[4] = {"align_a", "align_b", "align_c", "align_d"};
  for (int i = 0; i < 4; i++)
    if (al[i] & (al[i] - 1))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %u is not a power of two", pre, an[i], al[i]);
  return NULL;
}

static uint64_t gp_sat_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}
static uint64_t gp_sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t gp_gemm_extent(uint64_t rows, uint64_t cols, uint64_t ld, uint64_t batch, int64_t stride) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  uint64_t one = gp_sat_add(gp_sat_mul(cols - 1, ld), rows);
  if (batch > 1) one = gp_sat_add(one, gp_sat_mul(batch - 1, stride < 0 ? 0 : (uint64_t)stride));
  return one;
}
