// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm for the decode-step benchmark (package bench/decodestep). It is
// not a built-in kernel: the benchmark loads it as a user PTX module
// (rmsnorm.ptx, generated from this file by scripts/gen_decodestep_ptx.sh;
// TestPTXUpToDate fails when this file changed and the PTX was not
// regenerated).
//
//   decodestep_rmsnorm_bf16(BUFFER y, BUFFER x, BUFFER w, F32 eps, U64 cols)
//     row r = blockIdx.x (grid.x = rows), c < cols:
//     y[r,c] = bf16(x[r,c] * rsqrt(sum_c' x[r,c']^2 / cols + eps) * w[c])
//
// f32 math, one rounding to bf16. blockDim.x must be a multiple of 32 (at
// most 1024). Rows of a multiple of 8 elements at 16-byte aligned
// addresses are read and written 8 elements at a time.
#include <cuda_bf16.h>
#include <stdint.h>

typedef unsigned long long u64;

__device__ __forceinline__ float block_sum(float v, float *part) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const unsigned nw = (blockDim.x + 31u) >> 5;
    float t = lane < nw ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) part[0] = t;
  }
  __syncthreads();
  return part[0];
}

extern "C" __global__ void decodestep_rmsnorm_bf16(__nv_bfloat16 *y, const __nv_bfloat16 *x,
                                                   const __nv_bfloat16 *w, float eps, u64 cols) {
  __shared__ float part[32];
  const u64 row = blockIdx.x;
  const __nv_bfloat16 *xr = x + row * cols;
  __nv_bfloat16 *yr = y + row * cols;
  const bool vec = (cols % 8 == 0) && ((uintptr_t)xr % 16 == 0) && ((uintptr_t)yr % 16 == 0) &&
                   ((uintptr_t)w % 16 == 0);
  float ss = 0.0f;
  if (vec) {
    for (u64 i = (u64)threadIdx.x * 8; i < cols; i += (u64)blockDim.x * 8) {
      uint4 v = *reinterpret_cast<const uint4 *>(xr + i);
      const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(p[j]);
        ss += f.x * f.x + f.y * f.y;
      }
    }
  } else {
    for (u64 i = threadIdx.x; i < cols; i += blockDim.x) {
      float f = __bfloat162float(xr[i]);
      ss += f * f;
    }
  }
  const float r = rsqrtf(block_sum(ss, part) / (float)cols + eps);
  if (vec) {
    for (u64 i = (u64)threadIdx.x * 8; i < cols; i += (u64)blockDim.x * 8) {
      uint4 v = *reinterpret_cast<const uint4 *>(xr + i);
      uint4 g = *reinterpret_cast<const uint4 *>(w + i);
      uint4 o;
      const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&v);
      const __nv_bfloat162 *q = reinterpret_cast<const __nv_bfloat162 *>(&g);
      __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(&o);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(p[j]);
        float2 h = __bfloat1622float2(q[j]);
        d[j] = __floats2bfloat162_rn(f.x * r * h.x, f.y * r * h.y);
      }
      *reinterpret_cast<uint4 *>(yr + i) = o;
    }
  } else {
    for (u64 i = threadIdx.x; i < cols; i += blockDim.x)
      yr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * r * __bfloat162float(w[i]));
  }
}
