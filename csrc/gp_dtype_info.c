/* SPDX-License-Identifier: Apache-2.0 */
/* dtype sizes and names: kept apart from the conversions (gp_dtype.c) so a
 * plugin that needs only these links no libm. */
#include "gp_common.h"

size_t gp_dtype_size(int32_t dtype) {
  switch (dtype) {
    case GPURT_DTYPE_F32: case GPURT_DTYPE_I32: return 4;
    case GPURT_DTYPE_F16: case GPURT_DTYPE_BF16: return 2;
    case GPURT_DTYPE_F64: return 8;
    case GPURT_DTYPE_I8: case GPURT_DTYPE_U8:
    case GPURT_DTYPE_FP8_E4M3: case GPURT_DTYPE_FP8_E5M2: return 1;
    default: return 0;
  }
}

const char *gp_dtype_name(int32_t dtype) {
  switch (dtype) {
    case GPURT_DTYPE_F32: return "f32";
    case GPURT_DTYPE_F16: return "f16";
    case GPURT_DTYPE_BF16: return "bf16";
    case GPURT_DTYPE_F64: return "f64";
    case GPURT_DTYPE_I8: return "i8";
    case GPURT_DTYPE_I32: return "i32";
    case GPURT_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case GPURT_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case GPURT_DTYPE_U8: return "u8";
    default: return "invalid";
  }
}
