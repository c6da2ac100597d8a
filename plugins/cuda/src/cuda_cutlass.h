/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C face of cuda_cutlass.cu, the one translation unit that holds
 * CUTLASS (sm_90a grouped GEMMs for grouped_gemm). No C++ type crosses
 * this header; every C++ exception is caught inside. Built only when
 * scripts/build_cuda.sh finds the CUTLASS headers, which then defines
 * GPURT_HAVE_CUTLASS for the C files; cuda_quant.c runs its own kernel
 * without it, on GPUs other than sm_90, and for what CUTLASS cannot do
 * (cu_cl_grouped_ok).
 */
#ifndef GPURT_CUDA_CUTLASS_H
#define GPURT_CUDA_CUTLASS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The groups of one CUTLASS launch: those with rows (m_sizes[g] > 0). */
#define CU_CL_MAX_GROUPS 1024

typedef struct cu_cl_grouped {
  int fp8;            /* 0: bf16; 1: e4m3 with 1x128 / 128x128 block scales */
  uint32_t count;     /* entries below (<= CU_CL_MAX_GROUPS) */
  uint32_t n, k;
  int sm_count;
  const void *a, *b;  /* device: A (M x k), B (groups x n x k) */
  void *d;            /* device: D (M x n) bf16 */
  const float *sa, *sb; /* fp8: the ABI's scale_a / scale_b (K-major blocks) */
  const uint32_t *group; /* host: entry i is group group[i] ... */
  const uint32_t *row0;  /* host: ... starting at row row0[i] of A and D ... */
  const uint32_t *m;     /* host: ... with m[i] >= 1 rows */
  void *stream;       /* CUstream (the runtime's cudaStream_t) */
  void *scratch;      /* device, cu_cl_scratch_bytes() bytes, stream-ordered */
  size_t scratch_bytes;
} cu_cl_grouped;

/* 1 when sm_90 (cc 9.0) runs them: they are compiled for sm_90a only. */
int cu_cl_arch_ok(int cc_major, int cc_minor);
/* Whether CUTLASS can run this shape (TMA alignment: n % 8 == 0, k % 8
 * (bf16) or % 16 (fp8) == 0, D 16-byte aligned); else the own kernel. */
int cu_cl_grouped_ok(int fp8, uint64_t n, uint64_t k, uintptr_t d);
/* Device scratch the call needs: the per-group arrays and CUTLASS's
 * workspace. 0 on failure (msg says why). */
size_t cu_cl_scratch_bytes(int fp8, uint32_t count, int sm_count, char *msg, size_t msglen);
/* Enqueues the grouped GEMM on a->stream (the context current). 0 on
 * success; 1 when CUTLASS refuses the problem before anything was
 * enqueued (the caller runs its own kernel); else a CUDA runtime error
 * code or -1, with msg filled. */
int cu_cl_grouped_run(const cu_cl_grouped *a, char *msg, size_t msglen);

#ifdef __cplusplus
}
#endif
#endif
