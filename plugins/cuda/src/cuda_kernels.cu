// SPDX-License-Identifier: Apache-2.0
//
// The built-in kernels of gpurt.h ("Built-in kernels"), compiled by nvcc
// into the fatbin embedded in libgpurt_cuda.so. One element per thread,
// i = blockIdx.x * blockDim.x + threadIdx.x, no grid-stride loop; math in
// f32 with explicit round-to-nearest operations (no FMA contraction, so the
// results match the CPU reference bit for bit; expf/tanhf in silu_mul and
// softcap are within a few ulp of libm's), rounded to T (RN).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned long long u64;

__device__ __forceinline__ u64 gpurt_index() {
  return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

#define GPURT_KERNELS(T, SFX)                                                      \
  extern "C" __global__ void fill_##SFX(T *y, T value, u64 n) {                    \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = value;                                                       \
  }                                                                                \
  extern "C" __global__ void scale_##SFX(T *y, const T *x, float alpha, u64 n) {   \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fmul_rn(alpha, ld(x[i])));                           \
  }                                                                                \
  extern "C" __global__ void axpy_##SFX(T *y, const T *x, float alpha, u64 n) {    \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fadd_rn(__fmul_rn(alpha, ld(x[i])), ld(y[i])));      \
  }                                                                                \
  extern "C" __global__ void add_##SFX(T *z, const T *x, const T *y, u64 n) {      \
    u64 i = gpurt_index();                                                         \
    if (i < n) z[i] = st<T>(__fadd_rn(ld(x[i]), ld(y[i])));                        \
  }                                                                                \
  extern "C" __global__ void mul_##SFX(T *z, const T *x, const T *y, u64 n) {      \
    u64 i = gpurt_index();                                                         \
    if (i < n) z[i] = st<T>(__fmul_rn(ld(x[i]), ld(y[i])));                        \
  }                                                                                \
  extern "C" __global__ void silu_mul_##SFX(T *z, const T *g, const T *u, u64 n) { \
    u64 i = gpurt_index();                                                         \
    if (i < n) {                                                                   \
      float gv = ld(g[i]);                                                         \
      float s = __fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv)));                         \
      z[i] = st<T>(__fmul_rn(s, ld(u[i])));                                        \
    }                                                                              \
  }                                                                                \
  extern "C" __global__ void softcap_##SFX(T *y, const T *x, float cap, u64 n) {   \
    u64 i = gpurt_index();                                                         \
    if (i < n) y[i] = st<T>(__fmul_rn(cap, tanhf(__fdiv_rn(ld(x[i]), cap))));      \
  }

GPURT_KERNELS(float, f32)
GPURT_KERNELS(__half, f16)
GPURT_KERNELS(__nv_bfloat16, bf16)

__device__ __forceinline__ u64 gpurt_globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Each thread waits about ns nanoseconds (ordering and timing tests).
extern "C" __global__ void sleep_ns(u64 ns) {
  u64 start = gpurt_globaltimer();
  while (gpurt_globaltimer() - start < ns) {
    __nanosleep(ns > 2000 ? 1000 : 100);
  }
}

// Internal kernels of the plugin itself, not built-ins: kernel_get refuses
// every name starting with "gpurt_internal_" in the built-in module
// (cuda_module.c), so only cuda_gemm.c reaches them (its own module
// handle). They turn an f32 GEMM bias into the 16-bit bias cuBLASLt takes for a bf16/f16 D,
// rounding to nearest even (NaN stays NaN, overflow becomes inf).
extern "C" __global__ void gpurt_internal_f32_to_bf16(__nv_bfloat16 *y, const float *x, u64 n) {
  u64 i = gpurt_index();
  if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}

extern "C" __global__ void gpurt_internal_f32_to_f16(__half *y, const float *x, u64 n) {
  u64 i = gpurt_index();
  if (i < n) y[i] = __float2half_rn(x[i]);
}
