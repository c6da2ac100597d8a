// SPDX-License-Identifier: Apache-2.0
//
// cuda_rope.cuh — rope_neox_freqs_T's pair arithmetic (gpurt.h), one
// definition for the two kernels that rotate: the built-in
// rope_neox_freqs_T (cuda_fused.cu, through cuda_kernels.cu) and
// kv_append's rotary embedding of ABI 1.10 (cuda_attention.cu), so that
// the fused append gives the bits of the built-in. Hugging Face's
// arithmetic in T: a = f32(pos) * inv_freq (f32), cos a and sin a in
// double, rounded to f32 and then to T; each product and sum rounded to T.
// Only round-to-nearest intrinsics, so the same bits under
// -use_fast_math (the attention adapter's flags), but for denormals (f32
// inputs and products), which its -ftz flushes to zero. rt rounds an f32 to T and
// back.
#ifndef GPURT_CUDA_ROPE_CUH_
#define GPURT_CUDA_ROPE_CUH_

template <class RT>
__device__ __forceinline__ void gpurt_rope_pair(float &u, float &v, int pos, float inv, RT rt) {
  double a = (double)__fmul_rn((float)pos, inv);
  double sd, cd;
  sincos(a, &sd, &cd);
  const float c = rt(__double2float_rn(cd)), s = rt(__double2float_rn(sd));
  const float x = u, y = v;
  u = rt(__fsub_rn(rt(__fmul_rn(x, c)), rt(__fmul_rn(y, s))));
  v = rt(__fadd_rn(rt(__fmul_rn(y, c)), rt(__fmul_rn(x, s))));
}

#endif  // GPURT_CUDA_ROPE_CUH_
