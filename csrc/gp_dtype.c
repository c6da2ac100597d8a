/* SPDX-License-Identifier: Apache-2.0 */
/* f16, bf16 and fp8 (OCP e4m3 "fn" and e5m2) conversions, round to nearest
 * even; fp8 conversions saturate to the largest finite value. */
#include <math.h>
#include <string.h>

#include "gp_common.h"

static uint32_t gp_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float gp_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Encodes |a| (finite, >= 0) with mbits mantissa bits and the given bias;
 * returns the magnitude code; *overflow set when it does not fit below
 * exponent field max_field (exclusive of specials handled by the caller). */
static uint32_t gp_encode_small(double a, int mbits, int bias, int max_field,
                                int *overflow) {
  *overflow = 0;
  int emin = 1 - bias;
  if (a == 0) return 0;
  if (a < ldexp(1.0, emin)) {
    double r = rint(a / ldexp(1.0, emin - mbits));
    return (uint32_t)r; /* r == 2^mbits encodes the smallest normal */
  }
  int ex;
  frexp(a, &ex);
  int e = ex - 1;
  double r = rint(a / ldexp(1.0, e - mbits));
  if (r >= ldexp(1.0, mbits + 1)) { e++; r = ldexp(1.0, mbits); }
  if (e + bias > max_field) { *overflow = 1; return 0; }
  return ((uint32_t)(e + bias) << mbits) | ((uint32_t)r - (1u << mbits));
}

static float gp_decode_small(uint32_t mag, int mbits, int bias) {
  uint32_t ef = mag >> mbits, m = mag & ((1u << mbits) - 1u);
  if (ef == 0) return (float)ldexp((double)m, 1 - bias - mbits);
  return (float)ldexp(1.0 + ldexp((double)m, -mbits), (int)ef - bias);
}

float gp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 0x1f) return gp_bits_f32(sign | 0x7f800000u | (mant << 13));
  return gp_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t gp_f32_to_f16(float f) {
  uint32_t x = gp_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return (uint16_t)(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
  if (x < 0x38800000u) { /* below the smallest normal: subnormal or zero */
    float a = gp_bits_f32(x) * 0x1p24f; /* exact */
    return (uint16_t)(sign | (uint16_t)rintf(a));
  }
  uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd; /* rebias by -112 and round to nearest even */
  return (uint16_t)(sign | (x >> 13));
}

float gp_bf16_to_f32(uint16_t h) { return gp_bits_f32((uint32_t)h << 16); }

uint16_t gp_f32_to_bf16(float f) {
  uint32_t u = gp_f32_bits(f);
  if (isnan(f)) return (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float gp_e4m3_to_f32(uint8_t v) {
  uint32_t s = v >> 7, mag = v & 0x7f;
  float r = mag == 0x7f ? NAN : gp_decode_small(mag, 3, 7);
  return s ? -r : r;
}

/* f rounded to an fp8 format whose magnitudes are gp_encode_small's
 * (mbits, bias, max_field) codes, saturating at code top (value max and above);
 * NaN is 0x7f. */
static uint8_t gp_f32_to_fp8(float f, double max, uint32_t top, int mbits, int bias, int max_field) {
  uint8_t s = (uint8_t)((gp_f32_bits(f) >> 31) << 7);
  if (isnan(f)) return (uint8_t)(s | 0x7f);
  double a = fabs((double)f);
  if (a >= max) return (uint8_t)(s | top);
  int of;
  uint32_t m = gp_encode_small(a, mbits, bias, max_field, &of);
  if (of || m > top) m = top;
  return (uint8_t)(s | m);
}

uint8_t gp_f32_to_e4m3(float f) { return gp_f32_to_fp8(f, 448.0, 0x7e, 3, 7, 15); }

float gp_e5m2_to_f32(uint8_t v) {
  uint32_t s = v >> 7, mag = v & 0x7f;
  float r;
  if ((mag >> 2) == 0x1f) r = (mag & 3) ? NAN : INFINITY;
  else r = gp_decode_small(mag, 2, 15);
  return s ? -r : r;
}

uint8_t gp_f32_to_e5m2(float f) { return gp_f32_to_fp8(f, 57344.0, 0x7b, 2, 15, 30); }

float gp_load(int32_t dtype, const void *base, uint64_t i) {
  const unsigned char *p = base;
  switch (dtype) {
    case GPURT_DTYPE_F32: { float v; memcpy(&v, p + i * 4, 4); return v; }
    case GPURT_DTYPE_F16: { uint16_t v; memcpy(&v, p + i * 2, 2); return gp_f16_to_f32(v); }
    case GPURT_DTYPE_BF16: { uint16_t v; memcpy(&v, p + i * 2, 2); return gp_bf16_to_f32(v); }
    case GPURT_DTYPE_FP8_E4M3: return gp_e4m3_to_f32(p[i]);
    case GPURT_DTYPE_FP8_E5M2: return gp_e5m2_to_f32(p[i]);
    case GPURT_DTYPE_F64: { double v; memcpy(&v, p + i * 8, 8); return (float)v; }
    case GPURT_DTYPE_I8: return (float)(int8_t)p[i];
    case GPURT_DTYPE_U8: return (float)p[i];
    case GPURT_DTYPE_I32: { int32_t v; memcpy(&v, p + i * 4, 4); return (float)v; }
    default: return 0;
  }
}

void gp_store(int32_t dtype, void *base, uint64_t i, float v) {
  unsigned char *p = base;
  switch (dtype) {
    case GPURT_DTYPE_F32: memcpy(p + i * 4, &v, 4); break;
    case GPURT_DTYPE_F16: { uint16_t u = gp_f32_to_f16(v); memcpy(p + i * 2, &u, 2); break; }
    case GPURT_DTYPE_BF16: { uint16_t u = gp_f32_to_bf16(v); memcpy(p + i * 2, &u, 2); break; }
    case GPURT_DTYPE_FP8_E4M3: p[i] = gp_f32_to_e4m3(v); break;
    case GPURT_DTYPE_FP8_E5M2: p[i] = gp_f32_to_e5m2(v); break;
    case GPURT_DTYPE_F64: { double d = v; memcpy(p + i * 8, &d, 8); break; }
    default: break;
  }
}
