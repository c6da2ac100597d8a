// SPDX-License-Identifier: Apache-2.0
//
// A user kernel that writes far out of bounds, for the fault test
// (plugins/cuda/test/fault_test.c). scripts/gpu_check.sh compiles it to PTX:
//   nvcc -ptx -arch=compute_80 -o build/oob.ptx plugins/cuda/testdata/oob.cu
// oob_write(p, n): thread 0 writes p[n] with n far past any allocation.
// ok_write(p, v): thread 0 writes p[0] = v (a kernel that works).
extern "C" __global__ void oob_write(unsigned int *p, unsigned long long n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[n] = 0xdeadbeefu;
}

extern "C" __global__ void ok_write(unsigned int *p, unsigned int v) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[0] = v;
}
