/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_runtime.c — the bottom floor of the CUDA plugin: the sticky
 * (lost-device) state, errors of driver calls, entering a device's primary
 * context and the last-kernel records. Every other file of the plugin uses
 * these; this file uses only cuda_driver.c below it (README.md draws the
 * layers; plugins/mock/layers_test.go holds them for every plugin).
 *
 * Every device's context is its primary context (cuDevicePrimaryCtxRetain),
 * made current inside each call (cu_enter), so any OS thread may call and
 * runtime-API code in the same process shares the context. Errors of
 * asynchronous work surface at the next call that reports them, naming the
 * CUDA error and the last kernel launched (on the stream, or on the device);
 * a sticky context error marks the device lost, and every later call that
 * touches the device answers GPURT_ERR_DEVICE_LOST naming the original
 * error. Resource destruction still frees handles on a lost device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* Sticky errors, process-wide, per device ordinal. A sticky error
 * (CUDA_ERROR_ILLEGAL_ADDRESS, LAUNCH_FAILED, ...) leaves the process's CUDA
 * state for that device unusable until the process exits: CUDA documents
 * that the process must be terminated and relaunched; releasing or even
 * resetting the primary context does not bring it back (and a reset would
 * pull memory from under other users of the primary context). So the
 * plugin never tries: it remembers the first sticky error per device, and
 * every runtime (existing or new) and probe reports that device as lost,
 * naming the error, the kernel and the remedy. */
#define CU_MAX_ORDINALS 64
static pthread_mutex_t g_lost_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_lost[CU_MAX_ORDINALS];
static CUresult g_lost_code[CU_MAX_ORDINALS];       /* under g_lost_mu */
static char g_lost_msg[CU_MAX_ORDINALS][600];        /* under g_lost_mu */

const char cu_restart[] =
    "CUDA cannot recover from a sticky error in this process: restart the process";

/* Records ordinal i's sticky error (the first one wins). */
void cu_proc_mark_lost(uint32_t i, CUresult r, const char *msg) {
  if (i >= CU_MAX_ORDINALS) return;
  pthread_mutex_lock(&g_lost_mu);
  if (!atomic_load(&g_lost[i])) {
    g_lost_code[i] = r;
    gp_strlcpy(g_lost_msg[i], sizeof g_lost_msg[i], msg);
    atomic_store_explicit(&g_lost[i], 1, memory_order_release);
  }
  pthread_mutex_unlock(&g_lost_mu);
}

/* 1 with the code and message when ordinal i suffered a sticky error. */
int cu_proc_lost(uint32_t i, CUresult *code, char *msg, size_t cap) {
  if (i >= CU_MAX_ORDINALS || !atomic_load_explicit(&g_lost[i], memory_order_acquire))
    return 0;
  pthread_mutex_lock(&g_lost_mu);
  if (code) *code = g_lost_code[i];
  if (msg) gp_strlcpy(msg, cap, g_lost_msg[i]);
  pthread_mutex_unlock(&g_lost_mu);
  return 1;
}

/* ---- errors and contexts --------------------------------------------------- */

int cu_sticky(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return 1;
    default:
      return 0;
  }
}

static int32_t cu_code(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: return GPURT_ERR_OUT_OF_MEMORY;
    case CUDA_ERROR_NOT_READY: return GPURT_ERR_NOT_READY;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
      return GPURT_ERR_INVALID_ARGUMENT;
    case CUDA_ERROR_NOT_FOUND: return GPURT_ERR_NOT_FOUND;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
      return GPURT_ERR_UNSUPPORTED;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
      return GPURT_ERR_LAUNCH_FAILED;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
      return GPURT_ERR_UNAVAILABLE;
    default: return GPURT_ERR_INTERNAL;
  }
}

/* Adopts the process-wide record of d's sticky error (another runtime saw
 * it first). Returns 1 when d is lost. */
static int cu_adopt_lost(cu_device *d) {
  if (atomic_load_explicit(&d->lost, memory_order_acquire)) return 1;
  CUresult code;
  char msg[600];
  if (!cu_proc_lost(d->index, &code, msg, sizeof msg)) return 0;
  pthread_mutex_lock(&d->mu);
  if (!atomic_load(&d->lost)) {
    gp_strlcpy(d->lost_msg, sizeof d->lost_msg, msg);
    d->lost_code = code;
    atomic_store(&d->lost, 1);
  }
  pthread_mutex_unlock(&d->mu);
  return 1;
}

int cu_dev_lost(cu_runtime *rt, uint32_t dev) {
  return dev < rt->ndev && cu_adopt_lost(&rt->devs[dev]);
}

gpurt_error *cu_lost_error(cu_runtime *rt, uint32_t dev) {
  cu_device *d = &rt->devs[dev];
  (void)cu_adopt_lost(d);
  pthread_mutex_lock(&d->mu);
  gpurt_error *e = gp_err_vendor(GPURT_ERR_DEVICE_LOST, d->lost_code,
                                 "device %u is lost: %s; %s", dev, d->lost_msg, cu_restart);
  pthread_mutex_unlock(&d->mu);
  return e;
}

gpurt_error *cu_fail(cu_runtime *rt, uint32_t dev, CUresult r, const char *op,
                     const char *kernel) {
  char text[320];
  cu_result_text(r, text, sizeof text);
  char after[CU_NAME_CAP + 48] = "";
  if (kernel != NULL && kernel[0] != 0)
    snprintf(after, sizeof after, " after kernel \"%s\"", kernel);
  if (!cu_sticky(r))
    return gp_err_vendor(cu_code(r), r, "device %u: %s: %s%s", dev, op, text,
                         after);
  cu_device *d = &rt->devs[dev];
  /* Lost before (here or in another runtime of the process): that error. */
  if (cu_adopt_lost(d)) return cu_lost_error(rt, dev);
  pthread_mutex_lock(&d->mu);
  int first = !atomic_load(&d->lost);
  if (first) {
    snprintf(d->lost_msg, sizeof d->lost_msg, "%s%s (reported by %s)", text,
             after, op);
    d->lost_code = r;
    atomic_store(&d->lost, 1);
  }
  pthread_mutex_unlock(&d->mu);
  if (!first) return cu_lost_error(rt, dev);
  char pmsg[600];
  snprintf(pmsg, sizeof pmsg, "%s%s", text, after);
  cu_proc_mark_lost(d->index, r, pmsg);
  return gp_err_vendor(GPURT_ERR_LAUNCH_FAILED, r,
                       "device %u: %s: %s%s; the context is in a sticky error "
                       "state: the device is lost (%s)",
                       dev, op, text, after, cu_restart);
}

gpurt_error *cu_enter(cu_runtime *rt, uint32_t dev) {
  if (__builtin_expect(dev >= rt->ndev, 0))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device %u out of range (%u devices)",
                  dev, rt->ndev);
  cu_device *d = &rt->devs[dev];
  if (__builtin_expect(atomic_load_explicit(&d->lost, memory_order_acquire), 0) ||
      __builtin_expect(d->index < CU_MAX_ORDINALS &&
                           atomic_load_explicit(&g_lost[d->index], memory_order_relaxed), 0))
    return cu_lost_error(rt, dev);
  CUresult r = cu_make_current(d);
  if (__builtin_expect(r != CUDA_SUCCESS, 0))
    return cu_fail(rt, dev, r, "cuCtxSetCurrent", NULL);
  return NULL;
}

/* For teardown: make the context current, ignoring a lost device. */
void cu_enter_quiet(cu_runtime *rt, uint32_t dev) {
  if (dev < rt->ndev) (void)cu_make_current(&rt->devs[dev]);
}

/* ---- tuning variables ------------------------------------------------------ */

long long cu_env_whole(const char *name, long long lo, long long hi) {
  const char *e = getenv(name);
  char *end = NULL;
  const long long n = e != NULL ? strtoll(e, &end, 10) : -1;
  return e != NULL && end != e && *end == 0 && n >= lo && n <= hi ? n : -1;
}

int cu_fuse_on(void) {
  static _Atomic int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    v = cu_env_whole("GPURT_CUDA_FUSE", 0, 1) == 1;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

/* ---- launches ------------------------------------------------------------- */

CUresult cu_launch_kernel(const cu_runtime *rt, const cu_stream *st, CUfunction f, const uint32_t grid[3],
                          const uint32_t block[3], uint32_t shared, void **params, int pdl) {
  if (!pdl || !rt->devs[st->dev].pdl)
    return cu_drv.p_cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, st->s,
                                   params, NULL);
  CUlaunchAttribute at;
  memset(&at, 0, sizeof at);
  at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  at.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig c;
  memset(&c, 0, sizeof c);
  c.gridDimX = grid[0];
  c.gridDimY = grid[1];
  c.gridDimZ = grid[2];
  c.blockDimX = block[0];
  c.blockDimY = block[1];
  c.blockDimZ = block[2];
  c.sharedMemBytes = shared;
  c.hStream = st->s;
  c.attrs = &at;
  c.numAttrs = 1;
  return cu_drv.p_cuLaunchKernelEx(&c, f, params, NULL);
}

/* ---- the last kernel ------------------------------------------------------ */

void cu_note_kernel(cu_runtime *rt, cu_stream *st, uintptr_t key, const char *name) {
  /* Named for a later fault; copied only when the kernel changes (the
   * device's record is shared by every thread using the device). */
  if (atomic_load_explicit(&st->last_kernel_h, memory_order_relaxed) != key) {
    gp_strlcpy(st->last_kernel, sizeof st->last_kernel, name);
    atomic_store_explicit(&st->last_kernel_h, key, memory_order_relaxed);
  }
  cu_device *d = &rt->devs[st->dev];
  if (atomic_load_explicit(&d->last_kernel_h, memory_order_relaxed) != key) {
    gp_strlcpy(d->last_kernel, sizeof d->last_kernel, name);
    atomic_store_explicit(&d->last_kernel_h, key, memory_order_relaxed);
  }
}
