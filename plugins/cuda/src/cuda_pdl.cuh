// SPDX-License-Identifier: Apache-2.0
//
// Programmatic dependent launch (sm_90 and newer), shared by the plugin's
// own kernels (cuda_kernels.cu, cuda_quant.cu, cuda_attention.cu's KV
// append): launched with programmatic stream serialization
// (cu_launch_kernel), a kernel may be scheduled while the kernel before it
// on the stream still runs. gpurt_pdl_enter waits until that kernel has
// finished and its writes are visible (griddepcontrol.wait), then lets the
// next kernel be scheduled early (launch_dependents; it waits in turn).
// Call it before any load, store or exit of memory the kernel before may
// write. Launched without the attribute, both are no-ops.
#pragma once

static __device__ __forceinline__ void gpurt_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
