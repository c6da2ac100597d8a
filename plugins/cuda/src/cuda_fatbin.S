/* SPDX-License-Identifier: Apache-2.0 */
/* Embeds the kernels' fatbin (built by nvcc from cuda_kernels.cu) as read-only
 * data. GPURT_FATBIN_FILE is the fatbin's path, a quoted string, given by
 * scripts/build_cuda.sh. */
        .section .rodata.gpurt_cuda_fatbin, "a"
        .balign 64
        .globl gpurt_cuda_fatbin
        .hidden gpurt_cuda_fatbin
        .type gpurt_cuda_fatbin, @object
gpurt_cuda_fatbin:
        .incbin GPURT_FATBIN_FILE
gpurt_cuda_fatbin_end:
        .byte 0
        .balign 8
        .globl gpurt_cuda_fatbin_size
        .hidden gpurt_cuda_fatbin_size
        .type gpurt_cuda_fatbin_size, @object
gpurt_cuda_fatbin_size:
        .quad gpurt_cuda_fatbin_end - gpurt_cuda_fatbin
        .section .note.GNU-stack, "", @progbits
