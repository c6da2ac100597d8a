/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_cublaslt.h — where cuBLASLt is looked for after GPURT_CUBLASLT_PATH:
 * the library's name, then the CUDA toolkit's usual folders. The cuda
 * plugin (plugins/cuda/src/cuda_gemm.c) and the raw baseline of
 * gpurt-cgobench (bench/cgobaseline/raw.h) search the same list.
 */
#ifndef GPURT_CSRC_CUBLASLT_H_
#define GPURT_CSRC_CUBLASLT_H_

#if defined(__aarch64__)
#define GP_CUBLASLT_TARGET_LIB "/usr/local/cuda/targets/sbsa-linux/lib/libcublasLt.so.13"
#else
#define GP_CUBLASLT_TARGET_LIB "/usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.13"
#endif

/* The candidates, in order, for a `const char *[]` initializer. */
#define GP_CUBLASLT_CANDIDATES \
  "libcublasLt.so.13", GP_CUBLASLT_TARGET_LIB, "/usr/local/cuda/lib64/libcublasLt.so.13"

#endif /* GPURT_CSRC_CUBLASLT_H_ */
