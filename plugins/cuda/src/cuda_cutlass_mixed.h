/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C face of cuda_cutlass_mixed.cu, the one translation unit that holds
 * CUTLASS's sm_90a mixed-input GEMM (uint8 codes x bf16/f16 activations,
 * dequantized inside the mainloop) for quant_matmul's prefill path. No C++
 * type crosses this header; every C++ exception is caught inside. Built
 * only when scripts/build_cuda.sh finds the CUTLASS headers, which then
 * defines GPURT_HAVE_CUTLASS_MIXED for the C files; without it, on GPUs
 * other than sm_90, for shapes it refuses (cu_clm_qgemm_ok) and with
 * GPURT_CUDA_QGEMM=dequant, cuda_quant.c dequantizes W and runs cuBLASLt.
 */
#ifndef GPURT_CUDA_CUTLASS_MIXED_H
#define GPURT_CUDA_CUTLASS_MIXED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cu_clm_qgemm.tile: a kernel and run-time knobs, what cu_clm_tile_parse
 * makes of GPURT_CUDA_QGEMM_TILE. The default (0): tiles of 128 (W rows) x
 * 256 (tokens) x 64 (k), cooperative, persistent; bf16 x in a 2 x 1 cluster,
 * f16 x in 1 x 1; launched with programmatic dependent launch after the
 * scale conversion. H200, n 2048, k 4096, groups of 64, bf16 x: 97.1 / 330.0
 * us at m 4096 / 14336, 0.90x / 0.92x bf16 cuBLASLt's speed. */
#define CU_CLM_TILE_DEFAULT 0
/* The skinny kernel, any build (also GPURT_CUDA_QGEMM_TILE=sk128x32): tiles
 * of 128 W rows x 32 tokens x 64 k, cooperative, the stream-K scheduler
 * (deterministic reduction), cluster 1 x 1; cuda_quant.c takes it for 8 < n
 * <= 64 tokens (batched decode). */
#define CU_CLM_TILE_SKINNY 5
/* GPURT_CUDA_QGEMM_TILE (a tuning switch): names joined by '+', at most one
 * kernel among them. Kernels: default (also c2x1), and only in a build made
 * with GPURT_CLM_EXPERIMENTS=1 (bf16 x only; f16 x runs the default):
 * 128x256 (the former default: cluster 1 x 1), 128x128, pp64x256
 * (ping-pong, 64x256 a warp group), ppc2x1 (pp64x256 in a 2 x 1 cluster);
 * in any build: sk128x32 (CU_CLM_TILE_SKINNY).
 * Knobs, any build: nopdl (the GEMM launched without programmatic dependent
 * launch; pdl, the default, is accepted), swz1/swz2/swz4/swz8 (the
 * persistent scheduler's swizzle), rm/rn (raster along M (W rows) / along N
 * (tokens); else CUTLASS's heuristic). A knob of an experiments build only
 * (else ignored): xprep (timing only: skips the scale conversion when
 * scales, biases, scratch and shape are the last call's; wrong results if
 * the scales changed in between). NULL, an unknown name or two kernels: 0
 * (the default); a kernel not built in: the default kernel. */
int cu_clm_tile_parse(const char *name);

/* y (n x m, row-major, x's type) = x (n x k, row-major) . dequant(W)^T,
 * dequant(W)[r][c] = scales[r][c / group] * w[r][c] + biases[r][c / group]. */
typedef struct cu_clm_qgemm {
  int x_f16;           /* x and y: 0 bf16, 1 f16 */
  int scale_f16;       /* scales and biases: 0 bf16, 1 f16 */
  uint32_t m, n, k;    /* W is m x k */
  uint32_t group;      /* 64 or 128 */
  int sm_count;
  int tile;            /* CU_CLM_TILE_DEFAULT, or cu_clm_tile_parse's answer */
  const void *w;       /* device: m x k uint8 codes, row-major */
  const void *scales;  /* device: m x (k / group) 16-bit, row-major */
  const void *biases;  /* device: the same layout */
  const void *x;       /* device: n x k */
  void *y;             /* device: n x m */
  void *stream;        /* CUstream (the runtime's cudaStream_t) */
  void *scratch;       /* device, cu_clm_scratch_bytes() bytes, stream-ordered */
  size_t scratch_bytes;
} cu_clm_qgemm;

/* 1 when sm_90 (cc 9.0) runs it: it is compiled for sm_90a only. */
int cu_clm_arch_ok(int cc_major, int cc_minor);
/* Whether the kernel can run this call: group 64 or 128 (a multiple of its
 * 64-deep K tile), m % 8 == 0 (TMA stores of y, whose rows are m long),
 * k % 64 == 0, every dimension below 2^31, and w, x, y 16-byte aligned
 * (TMA). Any pairing of x and scale types. Else the dequantizing path. */
int cu_clm_qgemm_ok(int x_f16, int scale_f16, uint64_t m, uint64_t n, uint64_t k, uint32_t group, uintptr_t w,
                    uintptr_t x, uintptr_t y);
/* Device scratch the call needs (a's shape fields, tile and sm_count are
 * read): the f32 scales and biases transposed to (k / group) x m, then
 * CUTLASS's workspace. 0 on failure (msg says why). */
size_t cu_clm_scratch_bytes(const cu_clm_qgemm *a, char *msg, size_t msglen);
/* Enqueues the conversion of the scales and the GEMM on a->stream (the
 * context current). 0 on success; 1 when CUTLASS refuses the problem before
 * anything was enqueued (the caller runs the dequantizing path); else a
 * CUDA runtime error code or -1, with msg filled. */
int cu_clm_qgemm_run(const cu_clm_qgemm *a, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif
