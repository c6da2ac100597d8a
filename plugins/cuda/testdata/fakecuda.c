/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A fake libcuda.so.1 for the probe tests of plugins/cuda (cuda_test.go):
 * enough of the driver API for the plugin's probe, driven by environment
 * variables, so "driver too old" and "no device" are tested on a host
 * without a GPU. Every other entry point the plugin resolves exists and
 * fails with CUDA_ERROR_NOT_SUPPORTED (801).
 *
 *   FAKECUDA_VERSION  cuDriverGetVersion's answer (default 13000)
 *   FAKECUDA_INIT     cuInit's result (default 0)
 *   FAKECUDA_COUNT    number of devices (default 1)
 */
#include <stdlib.h>
#include <string.h>

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : def;
}

int cuInit(unsigned flags) {
  (void)flags;
  return env_int("FAKECUDA_INIT", 0);
}
int cuDriverGetVersion(int *v) {
  *v = env_int("FAKECUDA_VERSION", 13000);
  return 0;
}
int cuDeviceGetCount(int *n) {
  *n = env_int("FAKECUDA_COUNT", 1);
  return 0;
}
int cuDeviceGet(int *d, int i) {
  *d = i;
  return 0;
}
int cuDeviceGetName(char *name, int len, int d) {
  (void)d;
  strncpy(name, "Fake GPU", (size_t)len);
  return 0;
}
int cuDeviceTotalMem_v2(size_t *b, int d) {
  (void)d;
  *b = (size_t)80 << 30;
  return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int d) {
  (void)d;
  switch (attr) {
    case 75: *v = 9; break;   /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = 0; break;   /* ..._MINOR */
    case 16: *v = 132; break; /* MULTIPROCESSOR_COUNT */
    case 1: *v = 1024; break; /* MAX_THREADS_PER_BLOCK */
    case 10: *v = 32; break;  /* WARP_SIZE */
    default: *v = 0; break;
  }
  return 0;
}
int cuDeviceGetPCIBusId(char *s, int len, int d) {
  (void)d;
  strncpy(s, "0000:17:00.0", (size_t)len);
  return 0;
}
int cuGetErrorName(int r, const char **s) {
  *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int r, const char **s) {
  *s = r == 100 ? "no CUDA-capable device is detected" : "fake error";
  return 0;
}

#define STUB(name) \
  int name(void) { return 801; }
STUB(cuDevicePrimaryCtxRetain)
STUB(cuDevicePrimaryCtxRelease_v2)
STUB(cuCtxGetCurrent)
STUB(cuCtxSetCurrent)
STUB(cuCtxSynchronize)
STUB(cuMemGetInfo_v2)
STUB(cuMemAlloc_v2)
STUB(cuMemFree_v2)
STUB(cuMemHostAlloc)
STUB(cuMemFreeHost)
STUB(cuMemcpyHtoD_v2)
STUB(cuMemcpyDtoH_v2)
STUB(cuMemcpyDtoD_v2)
STUB(cuMemcpyHtoDAsync_v2)
STUB(cuMemcpyDtoHAsync_v2)
STUB(cuMemcpyDtoDAsync_v2)
STUB(cuMemcpyPeerAsync)
STUB(cuMemcpyAsync)
STUB(cuMemsetD8Async)
STUB(cuMemsetD16Async)
STUB(cuMemsetD32Async)
STUB(cuStreamCreate)
STUB(cuStreamDestroy_v2)
STUB(cuStreamSynchronize)
STUB(cuStreamQuery)
STUB(cuStreamWaitEvent)
STUB(cuEventCreate)
STUB(cuEventDestroy_v2)
STUB(cuEventRecord)
STUB(cuEventQuery)
STUB(cuEventSynchronize)
STUB(cuEventElapsedTime_v2)
STUB(cuModuleLoadDataEx)
STUB(cuModuleUnload)
STUB(cuModuleGetFunction)
STUB(cuFuncGetAttribute)
STUB(cuLaunchKernel)
