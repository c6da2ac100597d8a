/* SPDX-License-Identifier: Apache-2.0 */
/* Embeds the quantized and grouped matmul kernels (built by nvcc from cuda_quant.cu)
 * as read-only data. GPURT_FATBIN_FILE is the fatbin's path, a quoted string, given by
 * scripts/build_cuda.sh. */
        .section .rodata.gpurt_cuda_quant_fatbin, "a"
        .balign 64
        .globl gpurt_cuda_quant_fatbin
        .hidden gpurt_cuda_quant_fatbin
        .type gpurt_cuda_quant_fatbin, @object
gpurt_cuda_quant_fatbin:
        .incbin GPURT_FATBIN_FILE
gpurt_cuda_quant_fatbin_end:
        .byte 0
        .balign 8
        .globl gpurt_cuda_quant_fatbin_size
        .hidden gpurt_cuda_quant_fatbin_size
        .type gpurt_cuda_quant_fatbin_size, @object
gpurt_cuda_quant_fatbin_size:
        .quad gpurt_cuda_quant_fatbin_end - gpurt_cuda_quant_fatbin
        .section .note.GNU-stack, "", @progbits
