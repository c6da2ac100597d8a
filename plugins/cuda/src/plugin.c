/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c — the gpurt 1.x runtime surface on the CUDA driver API.
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

#include "cu_internal.h"

/* The prefix of csrc's error messages ("cuda: ..."). */
const char gp_plugin_prefix[] = "cuda";

#define CU_PLUGIN_VERSION "0.1.0 (fatbin: sm_80 sm_90a compute_90; needs CUDA 13.0 driver)"

static cu_table g_runtimes = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .kind = "runtime", .free_head = UINT32_MAX};

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

static const char cu_restart[] =
    "CUDA cannot recover from a sticky error in this process: restart the process";

/* Records ordinal i's sticky error (the first one wins). */
static void cu_proc_mark_lost(uint32_t i, CUresult r, const char *msg) {
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
static int cu_proc_lost(uint32_t i, CUresult *code, char *msg, size_t cap) {
  if (i >= CU_MAX_ORDINALS || !atomic_load_explicit(&g_lost[i], memory_order_acquire))
    return 0;
  pthread_mutex_lock(&g_lost_mu);
  if (code) *code = g_lost_code[i];
  if (msg) gp_strlcpy(msg, cap, g_lost_msg[i]);
  pthread_mutex_unlock(&g_lost_mu);
  return 1;
}

/* ---- built-in kernel signatures ---------------------------------------- */

typedef struct cu_builtin_sig {
  const char *name;
  uint32_t n;
  int32_t kinds[4];
  uint32_t sizes[4];
} cu_builtin_sig;

#define B GPURT_ARG_BUFFER
#define U64 GPURT_ARG_U64
#define F32 GPURT_ARG_F32
#define CU_SIGS(sfx, vkind, vsize)                        \
  {"fill_" sfx, 3, {B, vkind, U64, 0}, {8, vsize, 8, 0}}, \
  {"scale_" sfx, 4, {B, B, F32, U64}, {8, 8, 4, 8}},      \
  {"axpy_" sfx, 4, {B, B, F32, U64}, {8, 8, 4, 8}},       \
  {"add_" sfx, 4, {B, B, B, U64}, {8, 8, 8, 8}},          \
  {"mul_" sfx, 4, {B, B, B, U64}, {8, 8, 8, 8}}
static const cu_builtin_sig cu_builtins[] = {
    CU_SIGS("f32", GPURT_ARG_F32, 4),
    CU_SIGS("f16", GPURT_ARG_F16, 2),
    CU_SIGS("bf16", GPURT_ARG_BF16, 2),
    {"sleep_ns", 1, {U64, 0, 0, 0}, {8, 0, 0, 0}},
};
#undef B
#undef U64
#undef F32

static const cu_builtin_sig *cu_builtin_find(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof cu_builtins / sizeof cu_builtins[0]; i++)
    if (strlen(cu_builtins[i].name) == len &&
        memcmp(cu_builtins[i].name, name, len) == 0)
      return &cu_builtins[i];
  return NULL;
}

/* Width in bytes of a scalar kind; 0 for BUFFER/ANY/unknown. */
static uint32_t cu_kind_width(int32_t kind) {
  switch (kind) {
    case GPURT_ARG_I8: case GPURT_ARG_U8: return 1;
    case GPURT_ARG_I16: case GPURT_ARG_U16: case GPURT_ARG_F16:
    case GPURT_ARG_BF16: return 2;
    case GPURT_ARG_I32: case GPURT_ARG_U32: case GPURT_ARG_F32: return 4;
    case GPURT_ARG_I64: case GPURT_ARG_U64: case GPURT_ARG_F64: return 8;
    default: return 0;
  }
}

static const char *cu_kind_name(int32_t kind) {
  static const char *names[] = {"?", "buffer", "i8", "i16", "i32", "i64", "u8",
                                "u16", "u32", "u64", "f16", "bf16", "f32",
                                "f64", "any"};
  return kind >= 1 && kind <= 14 ? names[kind] : "unknown";
}

/* ---- errors and contexts --------------------------------------------------- */

cu_runtime *cu_rt(gpurt_runtime *h, gpurt_error **err) {
  cu_runtime *rt = cu_table_lookup(&g_runtimes, (uint64_t)(uintptr_t)h);
  if (rt == NULL) *err = cu_bad_handle(&g_runtimes, h);
  return rt;
}

cu_runtime *cu_rt_out(gpurt_runtime *h, const void *out, const char *op,
                      gpurt_error **err) {
  cu_runtime *rt = cu_rt(h, err);
  if (rt != NULL && out == NULL) {
    *err = gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    return NULL;
  }
  return rt;
}

void *cu_rt_take(gpurt_runtime *h, size_t tbl, const void *x, cu_runtime **rt,
                 gpurt_error **err) {
  cu_runtime *r = cu_rt(h, err);
  *rt = r;
  if (r == NULL || x == NULL) return NULL;
  cu_table *t = (cu_table *)((char *)r + tbl);
  void *o = cu_table_remove(t, (uint64_t)(uintptr_t)x);
  if (o == NULL) *err = cu_bad_handle(t, x);
  return o;
}

static int cu_sticky(CUresult r) {
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

static inline CUresult cu_make_current(cu_device *d) {
  CUcontext cur = NULL;
  if (__builtin_expect(cu_drv.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx, 1))
    return CUDA_SUCCESS;
  return cu_drv.p_cuCtxSetCurrent(d->ctx);
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
static void cu_enter_quiet(cu_runtime *rt, uint32_t dev) {
  if (dev < rt->ndev) (void)cu_make_current(&rt->devs[dev]);
}

/* ---- negotiate, info, probe ---------------------------------------------- */

static void cu_fill_info(CUdevice dev, int ver, gpurt_device_info *o) {
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  if (cu_drv.p_cuDeviceGetName(o->name, sizeof o->name, dev) != CUDA_SUCCESS)
    gp_strlcpy(o->name, sizeof o->name, "unknown NVIDIA GPU");
  gp_strlcpy(o->vendor, sizeof o->vendor, "NVIDIA");
  int maj = 0, min = 0, sms = 0, mt = 0, warp = 0, integ = 0;
  cu_drv.p_cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cu_drv.p_cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cu_drv.p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  cu_drv.p_cuDeviceGetAttribute(&mt, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
  cu_drv.p_cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
  cu_drv.p_cuDeviceGetAttribute(&integ, CU_DEVICE_ATTRIBUTE_INTEGRATED, dev);
  snprintf(o->arch, sizeof o->arch, "sm_%d%d%s", maj, min, maj >= 9 ? "a" : "");
  if (cu_drv.p_cuDeviceGetPCIBusId(o->pci_bus_id, (int)sizeof o->pci_bus_id, dev) !=
      CUDA_SUCCESS)
    o->pci_bus_id[0] = 0;
  /* cuda reports "0000:17:00.0" in upper case hex; keep it as the driver says. */
  snprintf(o->driver_version, sizeof o->driver_version, "%d.%d", ver / 1000,
           (ver % 1000) / 10);
  size_t total = 0;
  if (cu_drv.p_cuDeviceTotalMem(&total, dev) == CUDA_SUCCESS) o->memory_total = total;
  o->compute_major = (uint32_t)maj;
  o->compute_minor = (uint32_t)min;
  o->driver_version_code = (uint32_t)ver;
  o->multiprocessor_count = (uint32_t)sms;
  o->max_threads_per_block = (uint32_t)mt;
  o->warp_size = (uint32_t)warp;
  if (maj >= 8) o->flags |= GPURT_DEVICE_BF16;
  if (maj > 8 || (maj == 8 && min >= 9)) o->flags |= GPURT_DEVICE_FP8;
  if (integ) o->flags |= GPURT_DEVICE_UNIFIED_MEMORY;
}

static gpurt_error *cu_plugin_info(gpurt_plugin_info *out) {
  gpurt_error *e = gp_check_out(out, "plugin info");
  if (e) return e;
  gpurt_plugin_info i;
  memset(&i, 0, sizeof i);
  gp_strlcpy(i.backend, sizeof i.backend, "cuda");
  gp_strlcpy(i.version, sizeof i.version, CU_PLUGIN_VERSION);
  i.priority = 300;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

static gpurt_error *cu_probe(gpurt_probe_args *args) {
  gpurt_probe_args a;
  gpurt_error *e = gp_read_struct(&a, sizeof a, args, "probe args");
  if (e) return e;
  if (a.device_capacity > 0 && a.devices == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "probe args: devices is NULL with device_capacity %u",
                  a.device_capacity);
  a.available = 0;
  a.score = 0;
  a.device_count = 0;
  a.reason[0] = 0;
  int ver = 0;
  a.reason_code = cu_driver_ready(a.reason, sizeof a.reason, &ver);
  if (a.reason_code == GPURT_PROBE_OK) {
    int n = 0;
    CUresult r = cu_drv.p_cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS || n <= 0) {
      char t[256] = "the driver sees no CUDA device";
      if (r != CUDA_SUCCESS) {
        char rt[200];
        cu_result_text(r, rt, sizeof rt);
        snprintf(t, sizeof t, "cuDeviceGetCount: %s", rt);
      }
      snprintf(a.reason, sizeof a.reason, "no device: %s", t);
      a.reason_code = GPURT_PROBE_NO_DEVICE;
    } else {
      a.device_count = (uint32_t)n;
      char first[GPURT_NAME_LEN + 80] = "";
      int lost_dev = -1;
      char lost_msg[600] = "";
      for (int i = 0; i < n; i++) {
        if (lost_dev < 0 && cu_proc_lost((uint32_t)i, NULL, lost_msg, sizeof lost_msg))
          lost_dev = i;
        CUdevice dev;
        if (cu_drv.p_cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
        gpurt_device_info info;
        cu_fill_info(dev, ver, &info);
        if (i == 0) snprintf(first, sizeof first, "%s (%s)", info.name, info.arch);
        if ((uint32_t)i < a.device_capacity) {
          gpurt_error *ce = gp_check_out(&a.devices[i], "probe device info");
          if (ce) return ce;
          gp_write_struct(&a.devices[i], &info, sizeof info);
        }
      }
      if (lost_dev >= 0) {
        /* runtime_create would fail: a runtime spans every device. */
        snprintf(a.reason, sizeof a.reason, "device lost: device %d is lost: %s; %s",
                 lost_dev, lost_msg, cu_restart);
        a.reason_code = GPURT_PROBE_NO_DEVICE;
      } else {
        a.available = 1;
        a.score = n;
        snprintf(a.reason, sizeof a.reason, "%d CUDA device%s, first %s, driver %d.%d",
                 n, n == 1 ? "" : "s", first, ver / 1000, (ver % 1000) / 10);
      }
    }
  }
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

static gpurt_error *cu_shutdown(void) {
  /* Nothing process-wide to release: the driver stays loaded (plugins are
   * never dlclose'd) and runtimes release their contexts themselves. */
  return NULL;
}

/* ---- runtime ------------------------------------------------------------- */

static void cu_free_kernel_list(cu_module *m) {
  cu_kernel *k = m->kernels;
  while (k) {
    cu_kernel *n = k->next;
    free(k);
    k = n;
  }
  m->kernels = NULL;
}

/* Releasers: each frees one object of runtime u (a cu_runtime *) — its
 * driver resources, in its device's context (made current, lost or not),
 * and the object. Used by the free/destroy calls, by the create calls when
 * the handle table is full, and by runtime teardown (cu_table_each). */
static void cu_release_module(void *u, void *o) {
  cu_module *m = o;
  cu_enter_quiet(u, m->dev);
  cu_drv.p_cuModuleUnload(m->mod);
  cu_free_kernel_list(m);
  free(m->image);
  free(m);
}
static void cu_release_stream(void *u, void *o) {
  cu_runtime *rt = u;
  cu_stream *s = o;
  cu_enter_quiet(rt, s->dev);
  cu_drv.p_cuStreamDestroy(s->s);
  CUdeviceptr ws = atomic_load(&s->ws);
  if (ws) {
    cu_drv.p_cuMemFree(ws);
    atomic_fetch_sub(&rt->device_bytes, s->ws_size);
  }
  if (s->slots) cu_drv.p_cuMemFree(s->slots);
  if (s->bias16) cu_drv.p_cuMemFree(s->bias16);
  pthread_mutex_destroy(&s->ws_mu);
  pthread_mutex_destroy(&s->slot_mu);
  free(s);
}
static void cu_release_event(void *u, void *o) {
  cu_event *ev = o;
  cu_enter_quiet(u, ev->dev);
  cu_drv.p_cuEventDestroy(ev->ev);
  free(ev);
}
static void cu_release_buffer(void *u, void *o) {
  cu_buffer *b = o;
  cu_enter_quiet(u, b->dev);
  cu_drv.p_cuMemFree(b->ptr); /* a lost device's memory goes with its context */
  free(b);
}
static void cu_release_host(void *u, void *o) {
  cu_host *hb = o;
  cu_enter_quiet(u, 0);
  cu_drv.p_cuMemFreeHost(hb->ptr);
  free(hb);
}
static void cu_release_plan(void *u, void *o) {
  cu_enter_quiet(u, cu_gemm_plan_device(o));
  cu_gemm_plan_free(o);
}
static void cu_release_none(void *u, void *o) {
  (void)u;
  (void)o;
}

/* Inserts obj, a new object of table t, and sets *hv to its handle; when
 * the table is full, releases obj and returns "<op>: too many <kind>s". */
static gpurt_error *cu_insert(cu_runtime *rt, cu_table *t, void *obj,
                              void (*release)(void *u, void *o), const char *op,
                              uint64_t *hv) {
  if (cu_table_insert(t, obj, hv) == 0) return NULL;
  release(rt, obj);
  return gp_err(GPURT_ERR_OUT_OF_MEMORY, "%s: too many %ss", op, t->kind);
}

static void cu_runtime_free(cu_runtime *rt) {
  for (uint32_t i = 0; i < rt->ndev; i++) {
    if (rt->devs[i].ctx == NULL) continue;
    cu_enter_quiet(rt, i);
    (void)cu_drv.p_cuCtxSynchronize();
  }
  cu_table_each(&rt->kernels, cu_release_none, rt); /* owned by modules */
  cu_table_each(&rt->modules, cu_release_module, rt);
  cu_table_each(&rt->plans, cu_release_plan, rt);
  cu_table_each(&rt->events, cu_release_event, rt);
  cu_table_each(&rt->streams, cu_release_stream, rt);
  cu_table_each(&rt->buffers, cu_release_buffer, rt);
  cu_table_each(&rt->hosts, cu_release_host, rt);
  for (uint32_t i = 0; i < rt->ndev; i++) {
    cu_device *d = &rt->devs[i];
    if (d->ctx == NULL) continue;
    cu_enter_quiet(rt, i);
    cu_gemm_device_release(d);
    if (rt->ndev > 0) {
      CUcontext cur = NULL;
      if (cu_drv.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx)
        cu_drv.p_cuCtxSetCurrent(NULL);
    }
    /* No reset: a sticky error stays for the process's life anyway (see
     * g_lost), and a reset would free memory other users of the primary
     * context still hold. */
    (void)cu_drv.p_cuDevicePrimaryCtxRelease(d->dev);
    pthread_mutex_destroy(&d->mu);
  }
  /* Leave no context of ours current on this thread. */
  if (rt->ndev > 0) {
    CUcontext cur = NULL;
    if (cu_drv.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != NULL)
      for (uint32_t i = 0; i < rt->ndev; i++)
        if (cur == rt->devs[i].ctx) {
          cu_drv.p_cuCtxSetCurrent(NULL);
          break;
        }
  }
  cu_table_free(&rt->kernels);
  cu_table_free(&rt->modules);
  cu_table_free(&rt->plans);
  cu_table_free(&rt->events);
  cu_table_free(&rt->streams);
  cu_table_free(&rt->buffers);
  cu_table_free(&rt->hosts);
  pthread_mutex_destroy(&rt->mu);
  free(rt->devs);
  free(rt);
}

static gpurt_error *cu_runtime_create(const gpurt_runtime_create_args *args,
                                      gpurt_runtime **out) {
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: out is NULL");
  *out = NULL;
  gpurt_runtime_create_args a;
  if (args != NULL) {
    gpurt_error *e = gp_read_struct(&a, sizeof a, args, "runtime create args");
    if (e) return e;
  }
  char why[512];
  int ver = 0;
  int32_t reason = cu_driver_ready(why, sizeof why, &ver);
  if (reason != GPURT_PROBE_OK)
    return gp_err(GPURT_ERR_UNAVAILABLE, "runtime_create: %s", why);
  int n = 0;
  CUresult r = cu_drv.p_cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n <= 0) {
    char t[256] = "no CUDA device";
    if (r != CUDA_SUCCESS) cu_result_text(r, t, sizeof t);
    return gp_err_vendor(GPURT_ERR_UNAVAILABLE, r, "runtime_create: no device: %s", t);
  }
  cu_runtime *rt = calloc(1, sizeof *rt);
  if (rt == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: out of host memory");
  rt->devs = calloc((size_t)n, sizeof *rt->devs);
  if (rt->devs == NULL) {
    free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: out of host memory");
  }
  pthread_mutex_init(&rt->mu, NULL);
  cu_table_init(&rt->buffers, "buffer");
  cu_table_init(&rt->hosts, "host buffer");
  cu_table_init(&rt->streams, "stream");
  cu_table_init(&rt->events, "event");
  cu_table_init(&rt->modules, "module");
  cu_table_init(&rt->kernels, "kernel");
  cu_table_init(&rt->plans, "gemm plan");
  rt->ndev = (uint32_t)n;
  for (int i = 0; i < n; i++) {
    cu_device *d = &rt->devs[i];
    d->index = (uint32_t)i;
    pthread_mutex_init(&d->mu, NULL);
    d->ctx = NULL;
    CUresult lcode;
    char lmsg[600];
    if (cu_proc_lost((uint32_t)i, &lcode, lmsg, sizeof lmsg)) {
      /* An earlier runtime of this process saw a sticky error here. */
      rt->ndev = (uint32_t)i + 1; /* free what was set up */
      cu_runtime_free(rt);
      return gp_err_vendor(GPURT_ERR_DEVICE_LOST, lcode, "device %d is lost: %s; %s", i, lmsg,
                           cu_restart);
    }
    r = cu_drv.p_cuDeviceGet(&d->dev, i);
    if (r == CUDA_SUCCESS) r = cu_drv.p_cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r != CUDA_SUCCESS) {
      char t[256];
      cu_result_text(r, t, sizeof t);
      d->ctx = NULL;
      rt->ndev = (uint32_t)i + 1; /* free what was set up */
      cu_runtime_free(rt);
      if (cu_sticky(r)) {
        /* A sticky error we did not see (other CUDA code in the process). */
        char pm[320];
        snprintf(pm, sizeof pm, "%s (reported by cuDevicePrimaryCtxRetain)", t);
        cu_proc_mark_lost((uint32_t)i, r, pm);
        return gp_err_vendor(GPURT_ERR_DEVICE_LOST, r, "device %d is lost: %s; %s", i, pm,
                             cu_restart);
      }
      return gp_err_vendor(r == CUDA_ERROR_OUT_OF_MEMORY ? GPURT_ERR_OUT_OF_MEMORY
                                                         : GPURT_ERR_UNAVAILABLE,
                           r, "runtime_create: device %d: cuDevicePrimaryCtxRetain: %s",
                           i, t);
    }
    gpurt_device_info info;
    cu_fill_info(d->dev, ver, &info);
    gp_strlcpy(d->name, sizeof d->name, info.name);
    gp_strlcpy(d->pci, sizeof d->pci, info.pci_bus_id);
    d->cc_major = (int)info.compute_major;
    d->cc_minor = (int)info.compute_minor;
    d->sm_count = (int)info.multiprocessor_count;
    d->max_threads = (int)info.max_threads_per_block;
    d->warp = (int)info.warp_size;
    d->integrated = (info.flags & GPURT_DEVICE_UNIFIED_MEMORY) != 0;
    d->total = info.memory_total;
  }
  if (cu_table_insert(&g_runtimes, rt, &rt->self) != 0) {
    cu_runtime_free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: too many runtimes");
  }
  *out = (gpurt_runtime *)(uintptr_t)rt->self;
  return NULL;
}

static gpurt_error *cu_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  cu_runtime *rt = cu_table_remove(&g_runtimes, (uint64_t)(uintptr_t)h);
  if (rt == NULL) return cu_bad_handle(&g_runtimes, h);
  cu_runtime_free(rt);
  return NULL;
}

static gpurt_error *cu_runtime_stats(gpurt_runtime *h, gpurt_runtime_stats *out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if ((e = gp_check_out(out, "runtime stats"))) return e;
  gpurt_runtime_stats s;
  memset(&s, 0, sizeof s);
  s.live_buffers = rt->buffers.live;
  s.live_host_buffers = rt->hosts.live;
  s.live_streams = rt->streams.live;
  s.live_events = rt->events.live;
  s.live_modules = rt->modules.live;
  s.live_plans = rt->plans.live;
  s.device_bytes = atomic_load(&rt->device_bytes);
  s.host_bytes = atomic_load(&rt->host_bytes);
  gp_write_struct(out, &s, sizeof s);
  return NULL;
}

static gpurt_error *cu_runtime_control(gpurt_runtime *h, const gpurt_control_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  gpurt_control_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "control args"))) return e;
  int len = a.key == NULL ? 0 : (int)(a.key_len > 200 ? 200 : a.key_len);
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime_control: unknown key \"%.*s\"", len,
                a.key ? a.key : "");
}

/* ---- devices -------------------------------------------------------------- */

static gpurt_error *cu_device_count(gpurt_runtime *h, uint32_t *out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "device_count", &e);
  if (!rt) return e;
  *out = rt->ndev;
  return NULL;
}

static gpurt_error *cu_device_info(gpurt_runtime *h, uint32_t dev, gpurt_device_info *out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if ((e = gp_check_out(out, "device info"))) return e;
  if ((e = cu_enter(rt, dev))) return e;
  int ver = 0;
  cu_drv.p_cuDriverGetVersion(&ver);
  gpurt_device_info info;
  cu_fill_info(rt->devs[dev].dev, ver, &info);
  size_t fr = 0, tot = 0;
  CUresult r = cu_drv.p_cuMemGetInfo(&fr, &tot);
  if (r != CUDA_SUCCESS) return cu_fail(rt, dev, r, "cuMemGetInfo", NULL);
  info.memory_free = fr;
  gp_write_struct(out, &info, sizeof info);
  return NULL;
}

static gpurt_error *cu_device_synchronize(gpurt_runtime *h, uint32_t dev) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if ((e = cu_enter(rt, dev))) return e;
  CUresult r = cu_drv.p_cuCtxSynchronize();
  if (r != CUDA_SUCCESS)
    return cu_fail(rt, dev, r, "device synchronize", rt->devs[dev].last_kernel);
  return NULL;
}

/* ---- memory ----------------------------------------------------------------- */

static gpurt_error *cu_buffer_alloc(gpurt_runtime *h, uint32_t dev, uint64_t size,
                                    gpurt_buffer **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "buffer_alloc", &e);
  if (!rt) return e;
  *out = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0");
  if ((e = cu_enter(rt, dev))) return e;
  cu_buffer *b = calloc(1, sizeof *b);
  if (b == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of host memory");
  CUresult r = cu_drv.p_cuMemAlloc(&b->ptr, (size_t)size);
  if (r != CUDA_SUCCESS) {
    free(b);
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE) {
      size_t fr = 0, tot = 0;
      cu_drv.p_cuMemGetInfo(&fr, &tot);
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                           "buffer_alloc: out of device memory allocating %llu bytes "
                           "on device %u (%llu bytes free of %llu)",
                           (unsigned long long)size, dev, (unsigned long long)fr,
                           (unsigned long long)tot);
    }
    return cu_fail(rt, dev, r, "cuMemAlloc", NULL);
  }
  b->dev = dev;
  b->size = size;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->buffers, b, cu_release_buffer, "buffer_alloc", &hv))) return e;
  atomic_fetch_add(&rt->device_bytes, size);
  *out = (gpurt_buffer *)(uintptr_t)hv;
  return NULL;
}

static gpurt_error *cu_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_buffer *b = cu_rt_take(h, CU_TABLE(buffers), buf, &rt, &e);
  if (b == NULL) return e;
  atomic_fetch_sub(&rt->device_bytes, b->size);
  cu_release_buffer(rt, b);
  return NULL;
}

static gpurt_error *cu_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out,
                                  void **out_ptr) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (out == NULL || out_ptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
  *out = NULL;
  *out_ptr = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0");
  if ((e = cu_enter(rt, 0))) return e;
  cu_host *hb = calloc(1, sizeof *hb);
  if (hb == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of host memory");
  CUresult r = cu_drv.p_cuMemHostAlloc(&hb->ptr, (size_t)size, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    free(hb);
    char t[256];
    cu_result_text(r, t, sizeof t);
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_VALUE)
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                           "host_alloc: cannot pin %llu bytes of host memory: %s",
                           (unsigned long long)size, t);
    return cu_fail(rt, 0, r, "cuMemHostAlloc", NULL);
  }
  hb->size = size;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->hosts, hb, cu_release_host, "host_alloc", &hv))) return e;
  atomic_fetch_add(&rt->host_bytes, size);
  *out = (gpurt_host_buffer *)(uintptr_t)hv;
  *out_ptr = hb->ptr;
  return NULL;
}

static gpurt_error *cu_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_host *hb = cu_rt_take(h, CU_TABLE(hosts), buf, &rt, &e);
  if (hb == NULL) return e;
  atomic_fetch_sub(&rt->host_bytes, hb->size);
  cu_release_host(rt, hb);
  return NULL;
}

gpurt_error *cu_view(cu_runtime *rt, gpurt_buffer *bh, uint64_t off, uint64_t bytes,
                     uint32_t dev, const char *what, CUdeviceptr *out) {
  cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)bh);
  if (b == NULL) {
    if (bh == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE, "%s: buffer handle is NULL", what);
    return gp_err(GPURT_ERR_INVALID_HANDLE,
                  "%s: invalid buffer handle %p: freed, foreign or never created", what,
                  (void *)bh);
  }
  if (b->dev != dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: the buffer is on device %u, not %u",
                  what, b->dev, dev);
  if (off > b->size || bytes > b->size - off)
    return gp_err(GPURT_ERR_OUT_OF_RANGE,
                  "%s: range [%llu, %llu+%llu) is beyond the buffer's %llu bytes", what,
                  (unsigned long long)off, (unsigned long long)off,
                  (unsigned long long)bytes, (unsigned long long)b->size);
  *out = b->ptr + off;
  return NULL;
}

/* One end of a copy. */
enum { EP_DEVICE = 1, EP_PINNED, EP_PAGEABLE };
typedef struct cu_ep {
  int kind;
  uint32_t dev;
  CUdeviceptr d;
  void *h;
} cu_ep;

static gpurt_error *cu_copy_end(cu_runtime *rt, const char *side, gpurt_buffer *buf,
                                gpurt_host_buffer *host, const void *ptr, uint64_t off,
                                uint64_t size, cu_ep *ep) {
  int n = (buf != NULL) + (host != NULL) + (ptr != NULL);
  if (n != 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: exactly one %s (%s_buffer, %s_host or %s_ptr) must be set, got %d",
                  strcmp(side, "src") == 0 ? "source" : "destination", side, side, side, n);
  if (buf != NULL) {
    cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)buf);
    if (b == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "copy: invalid %s_buffer handle %p: freed, foreign or never created",
                    side, (void *)buf);
    if (off > b->size || size > b->size - off)
      return gp_err(GPURT_ERR_OUT_OF_RANGE,
                    "copy: %s range [%llu, %llu+%llu) is beyond the buffer's %llu bytes",
                    side, (unsigned long long)off, (unsigned long long)off,
                    (unsigned long long)size, (unsigned long long)b->size);
    ep->kind = EP_DEVICE;
    ep->dev = b->dev;
    ep->d = b->ptr + off;
  } else if (host != NULL) {
    cu_host *hb = cu_table_lookup(&rt->hosts, (uint64_t)(uintptr_t)host);
    if (hb == NULL)
      return gp_err(GPURT_ERR_INVALID_HANDLE,
                    "copy: invalid %s_host handle %p: freed, foreign or never created",
                    side, (void *)host);
    if (off > hb->size || size > hb->size - off)
      return gp_err(GPURT_ERR_OUT_OF_RANGE,
                    "copy: %s range [%llu, %llu+%llu) is beyond the host buffer's %llu bytes",
                    side, (unsigned long long)off, (unsigned long long)off,
                    (unsigned long long)size, (unsigned long long)hb->size);
    ep->kind = EP_PINNED;
    ep->h = (char *)hb->ptr + off;
  } else {
    ep->kind = EP_PAGEABLE;
    ep->h = (void *)ptr;
  }
  return NULL;
}

static gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  gpurt_copy_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "copy args"))) return e;
  cu_ep src = {0}, dst = {0};
  if ((e = cu_copy_end(rt, "src", a.src_buffer, a.src_host, a.src_ptr, a.src_offset,
                       a.size, &src)))
    return e;
  if ((e = cu_copy_end(rt, "dst", a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset,
                       a.size, &dst)))
    return e;
  int sync = (a.flags & GPURT_COPY_SYNC) != 0;
  if (a.flags & ~GPURT_COPY_SYNC)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: unknown flags %#x", a.flags);
  if (!sync && (src.kind == EP_PAGEABLE || dst.kind == EP_PAGEABLE))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: pageable memory (src_ptr/dst_ptr) needs GPURT_COPY_SYNC");
  if (!sync && a.stream == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: an asynchronous copy needs a stream (or GPURT_COPY_SYNC)");
  cu_stream *st = NULL;
  if (a.stream != NULL && !(st = cu_get(&rt->streams, a.stream, &e))) return e;
  int has_dev = src.kind == EP_DEVICE || dst.kind == EP_DEVICE;
  uint32_t dev = dst.kind == EP_DEVICE ? dst.dev : src.dev;
  if (has_dev && st != NULL && st->dev != dev &&
      !(src.kind == EP_DEVICE && st->dev == src.dev))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "copy: the stream is on device %u, the buffers on device %u", st->dev,
                  dev);
  if (st != NULL) dev = st->dev;
  if (!has_dev) {
    /* Host to host. */
    if (st != NULL) {
      if ((e = cu_enter(rt, st->dev))) return e;
      if (!sync && src.kind == EP_PINNED && dst.kind == EP_PINNED) {
        if (a.size == 0) return NULL;
        CUresult r = cu_drv.p_cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst.h,
                                            (CUdeviceptr)(uintptr_t)src.h, a.size, st->s);
        return r ? cu_fail(rt, st->dev, r, "cuMemcpyAsync", st->last_kernel) : NULL;
      }
      CUresult r = cu_drv.p_cuStreamSynchronize(st->s);
      if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
    }
    if (a.size) memmove(dst.h, src.h, a.size);
    return NULL;
  }
  if ((e = cu_enter(rt, dev))) return e;
  if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE && src.dev != dst.dev &&
      cu_dev_lost(rt, src.dev == dev ? dst.dev : src.dev))
    return cu_lost_error(rt, src.dev == dev ? dst.dev : src.dev);
  if (a.size == 0) return NULL;
  CUresult r;
  const char *what;
  if (st == NULL) {
    /* Default ordering: after all earlier work on the device(s). */
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, dev, r, "copy: device synchronize", rt->devs[dev].last_kernel);
    if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE) {
      if (src.dev != dst.dev) {
        cu_device *o = &rt->devs[src.dev == dev ? dst.dev : src.dev];
        (void)cu_make_current(o);
        r = cu_drv.p_cuCtxSynchronize();
        (void)cu_make_current(&rt->devs[dev]);
        if (r) return cu_fail(rt, o->index, r, "copy: device synchronize", o->last_kernel);
        what = "cuMemcpyPeerAsync";
        r = cu_drv.p_cuMemcpyPeerAsync(dst.d, rt->devs[dst.dev].ctx, src.d,
                                       rt->devs[src.dev].ctx, a.size, NULL);
      } else {
        what = "cuMemcpyDtoD";
        r = cu_drv.p_cuMemcpyDtoD(dst.d, src.d, a.size);
      }
      if (r == CUDA_SUCCESS) r = cu_drv.p_cuCtxSynchronize();
    } else if (dst.kind == EP_DEVICE) {
      what = "cuMemcpyHtoD";
      r = cu_drv.p_cuMemcpyHtoD(dst.d, src.h, a.size);
    } else {
      what = "cuMemcpyDtoH";
      r = cu_drv.p_cuMemcpyDtoH(dst.h, src.d, a.size);
    }
    return r ? cu_fail(rt, dev, r, what, rt->devs[dev].last_kernel) : NULL;
  }
  if (src.kind == EP_DEVICE && dst.kind == EP_DEVICE) {
    if (src.dev != dst.dev) {
      what = "cuMemcpyPeerAsync";
      r = cu_drv.p_cuMemcpyPeerAsync(dst.d, rt->devs[dst.dev].ctx, src.d,
                                     rt->devs[src.dev].ctx, a.size, st->s);
    } else {
      what = "cuMemcpyDtoDAsync";
      r = cu_drv.p_cuMemcpyDtoDAsync(dst.d, src.d, a.size, st->s);
    }
  } else if (dst.kind == EP_DEVICE) {
    what = "cuMemcpyHtoDAsync";
    r = cu_drv.p_cuMemcpyHtoDAsync(dst.d, src.h, a.size, st->s);
  } else {
    what = "cuMemcpyDtoHAsync";
    r = cu_drv.p_cuMemcpyDtoHAsync(dst.h, src.d, a.size, st->s);
  }
  if (r) return cu_fail(rt, st->dev, r, what, st->last_kernel);
  if (sync) {
    r = cu_drv.p_cuStreamSynchronize(st->s);
    if (r) return cu_fail(rt, st->dev, r, "copy: stream synchronize", st->last_kernel);
  }
  return NULL;
}

static gpurt_error *cu_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  gpurt_memset_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "memset args"))) return e;
  uint32_t es = a.element_size;
  if (es != 1 && es != 2 && es != 4)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: element_size %u is not 1, 2 or 4", es);
  if (a.offset % es || a.size % es)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "memset: offset %llu and size %llu must be multiples of element_size %u",
                  (unsigned long long)a.offset, (unsigned long long)a.size, es);
  cu_buffer *b = cu_get(&rt->buffers, a.buffer, &e);
  if (b == NULL) return e;
  if (a.offset > b->size || a.size > b->size - a.offset)
    return gp_err(GPURT_ERR_OUT_OF_RANGE,
                  "memset: range [%llu, %llu+%llu) is beyond the buffer's %llu bytes",
                  (unsigned long long)a.offset, (unsigned long long)a.offset,
                  (unsigned long long)a.size, (unsigned long long)b->size);
  cu_stream *st = NULL;
  if (a.stream != NULL) {
    if (!(st = cu_get(&rt->streams, a.stream, &e))) return e;
    if (st->dev != b->dev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "memset: the stream is on device %u, the buffer on device %u", st->dev,
                    b->dev);
  }
  if ((e = cu_enter(rt, b->dev))) return e;
  if (a.size == 0) return NULL;
  CUdeviceptr p = b->ptr + a.offset;
  size_t count = (size_t)(a.size / es);
  CUstream s = st ? st->s : NULL;
  const char *kern = st ? st->last_kernel : rt->devs[b->dev].last_kernel;
  CUresult r;
  if (st == NULL) {
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, b->dev, r, "memset: device synchronize", kern);
  }
  if (es == 1)
    r = cu_drv.p_cuMemsetD8Async(p, (unsigned char)a.value, count, s);
  else if (es == 2)
    r = cu_drv.p_cuMemsetD16Async(p, (unsigned short)a.value, count, s);
  else
    r = cu_drv.p_cuMemsetD32Async(p, a.value, count, s);
  if (r == CUDA_SUCCESS && st == NULL) r = cu_drv.p_cuCtxSynchronize();
  return r ? cu_fail(rt, b->dev, r, "memset", kern) : NULL;
}

/* ---- streams ------------------------------------------------------------------ */

static gpurt_error *cu_stream_create(gpurt_runtime *h, uint32_t dev, gpurt_stream **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "stream_create", &e);
  if (!rt) return e;
  *out = NULL;
  if ((e = cu_enter(rt, dev))) return e;
  cu_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: out of host memory");
  CUresult r = cu_drv.p_cuStreamCreate(&s->s, CU_STREAM_NON_BLOCKING);
  if (r) {
    free(s);
    return cu_fail(rt, dev, r, "cuStreamCreate", NULL);
  }
  s->dev = dev;
  pthread_mutex_init(&s->ws_mu, NULL);
  pthread_mutex_init(&s->slot_mu, NULL);
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->streams, s, cu_release_stream, "stream_create", &hv))) return e;
  *out = (gpurt_stream *)(uintptr_t)hv;
  return NULL;
}

static gpurt_error *cu_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_take(h, CU_TABLE(streams), sh, &rt, &e);
  if (s == NULL) return e;
  cu_enter_quiet(rt, s->dev);
  if (!cu_dev_lost(rt, s->dev)) {
    CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
    if (r) e = cu_fail(rt, s->dev, r, "stream destroy: synchronize", s->last_kernel);
  }
  cu_release_stream(rt, s);
  return e; /* the handle is freed either way */
}

static gpurt_error *cu_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s || (e = cu_enter(rt, s->dev))) return e;
  CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
  return r ? cu_fail(rt, s->dev, r, "stream synchronize", s->last_kernel) : NULL;
}

static gpurt_error *cu_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s || (e = cu_enter(rt, s->dev))) return e;
  CUresult r = cu_drv.p_cuStreamQuery(s->s);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "stream query: work pending");
  return r ? cu_fail(rt, s->dev, r, "stream query", s->last_kernel) : NULL;
}

static gpurt_error *cu_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *s = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (!s) return e;
  cu_event *ev = cu_get(&rt->events, eh, &e);
  if (!ev || (e = cu_enter(rt, s->dev))) return e;
  if (ev->dev != s->dev && cu_dev_lost(rt, ev->dev))
    return cu_lost_error(rt, ev->dev);
  CUresult r = cu_drv.p_cuStreamWaitEvent(s->s, ev->ev, 0);
  return r ? cu_fail(rt, s->dev, r, "cuStreamWaitEvent", s->last_kernel) : NULL;
}

gpurt_error *cu_stream_workspace(cu_runtime *rt, cu_stream *s, size_t size,
                                 CUdeviceptr *out) {
  CUdeviceptr ws = atomic_load_explicit(&s->ws, memory_order_acquire);
  if (ws != 0 && s->ws_size >= size) {
    *out = ws;
    return NULL;
  }
  pthread_mutex_lock(&s->ws_mu);
  ws = atomic_load(&s->ws);
  if (ws == 0 || s->ws_size < size) {
    if (ws != 0) {
      /* Grow: earlier work on this stream may still use the old one. */
      CUresult r = cu_drv.p_cuStreamSynchronize(s->s);
      if (r) {
        pthread_mutex_unlock(&s->ws_mu);
        return cu_fail(rt, s->dev, r, "gemm workspace: stream synchronize", s->last_kernel);
      }
      cu_drv.p_cuMemFree(ws);
      atomic_fetch_sub(&rt->device_bytes, s->ws_size);
      atomic_store(&s->ws, 0);
      s->ws_size = 0;
    }
    CUdeviceptr p = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&p, size);
    if (r) {
      pthread_mutex_unlock(&s->ws_mu);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                             "gemm: out of device memory allocating the stream's %zu-byte "
                             "cuBLASLt workspace on device %u",
                             size, s->dev);
      return cu_fail(rt, s->dev, r, "gemm workspace: cuMemAlloc", NULL);
    }
    s->ws_size = size;
    atomic_fetch_add(&rt->device_bytes, size);
    atomic_store_explicit(&s->ws, p, memory_order_release);
    ws = p;
  }
  pthread_mutex_unlock(&s->ws_mu);
  *out = ws;
  return NULL;
}

/* ---- events ------------------------------------------------------------------------ */

static gpurt_error *cu_event_create(gpurt_runtime *h, uint32_t dev, uint32_t flags,
                                    gpurt_event **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "event_create", &e);
  if (!rt) return e;
  *out = NULL;
  if (flags & ~GPURT_EVENT_TIMING)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x", flags);
  if ((e = cu_enter(rt, dev))) return e;
  cu_event *ev = calloc(1, sizeof *ev);
  if (ev == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: out of host memory");
  CUresult r = cu_drv.p_cuEventCreate(
      &ev->ev, (flags & GPURT_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  if (r) {
    free(ev);
    return cu_fail(rt, dev, r, "cuEventCreate", NULL);
  }
  ev->dev = dev;
  ev->flags = flags;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->events, ev, cu_release_event, "event_create", &hv))) return e;
  *out = (gpurt_event *)(uintptr_t)hv;
  return NULL;
}

static gpurt_error *cu_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_take(h, CU_TABLE(events), eh, &rt, &e);
  if (ev == NULL) return e;
  cu_release_event(rt, ev);
  return NULL;
}

static gpurt_error *cu_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev) return e;
  cu_stream *s = NULL;
  if (sh != NULL) {
    if (!(s = cu_get(&rt->streams, sh, &e))) return e;
    if (s->dev != ev->dev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "event_record: the event is on device %u, the stream on device %u",
                    ev->dev, s->dev);
  }
  if ((e = cu_enter(rt, ev->dev))) return e;
  CUresult r;
  if (s == NULL) {
    /* Default ordering: after all earlier work on the device. */
    r = cu_drv.p_cuCtxSynchronize();
    if (r) return cu_fail(rt, ev->dev, r, "event_record: device synchronize",
                          rt->devs[ev->dev].last_kernel);
  }
  r = cu_drv.p_cuEventRecord(ev->ev, s ? s->s : NULL);
  if (r) return cu_fail(rt, ev->dev, r, "cuEventRecord", s ? s->last_kernel : NULL);
  atomic_store(&ev->recorded, 1);
  return NULL;
}

static gpurt_error *cu_event_query(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev || (e = cu_enter(rt, ev->dev))) return e;
  CUresult r = cu_drv.p_cuEventQuery(ev->ev);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "event query: work pending");
  return r ? cu_fail(rt, ev->dev, r, "event query", rt->devs[ev->dev].last_kernel) : NULL;
}

static gpurt_error *cu_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_event *ev = cu_rt_obj(h, CU_TABLE(events), eh, &rt, &e);
  if (!ev || (e = cu_enter(rt, ev->dev))) return e;
  CUresult r = cu_drv.p_cuEventSynchronize(ev->ev);
  return r ? cu_fail(rt, ev->dev, r, "event synchronize", rt->devs[ev->dev].last_kernel)
           : NULL;
}

static gpurt_error *cu_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh,
                                     double *out_ms) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
  cu_event *a = cu_get(&rt->events, sh, &e);
  if (!a) return e;
  cu_event *b = cu_get(&rt->events, eh, &e);
  if (!b) return e;
  if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "event_elapsed: both events need GPURT_EVENT_TIMING");
  if (a->dev != b->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "event_elapsed: the events are on devices %u and %u", a->dev, b->dev);
  if (!atomic_load(&a->recorded) || !atomic_load(&b->recorded))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION,
                  "event_elapsed: the %s event was never recorded",
                  atomic_load(&a->recorded) ? "end" : "start");
  if ((e = cu_enter(rt, a->dev))) return e;
  float ms = 0;
  CUresult r = cu_drv.p_cuEventElapsedTime(&ms, a->ev, b->ev);
  if (r == CUDA_ERROR_NOT_READY)
    return gp_err_vendor(GPURT_ERR_NOT_READY, r, "event_elapsed: an event is not complete");
  if (r) return cu_fail(rt, a->dev, r, "cuEventElapsedTime", rt->devs[a->dev].last_kernel);
  *out_ms = ms;
  return NULL;
}

/* ---- modules and kernels ---------------------------------------------------------------- */

static const char *cu_format_name(int32_t f) {
  switch (f) {
    case GPURT_MODULE_BUILTIN: return "builtin";
    case GPURT_MODULE_PTX: return "PTX";
    case GPURT_MODULE_CUBIN: return "cubin";
    case GPURT_MODULE_FATBIN: return "fatbin";
    case GPURT_MODULE_METALLIB: return "metallib";
    case GPURT_MODULE_METAL_SOURCE: return "Metal source";
    default: return "unknown";
  }
}

static gpurt_error *cu_module_load(gpurt_runtime *h, const gpurt_module_load_args *args,
                                   gpurt_module **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "module_load", &e);
  if (!rt) return e;
  *out = NULL;
  gpurt_module_load_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "module load args"))) return e;
  char name[CU_NAME_CAP] = "";
  if (a.name != NULL && a.name_len > 0) {
    size_t n = a.name_len < sizeof name - 1 ? (size_t)a.name_len : sizeof name - 1;
    memcpy(name, a.name, n);
    name[n] = 0;
  }
  const void *image = NULL;
  void *copy = NULL;
  switch (a.format) {
    case GPURT_MODULE_BUILTIN:
      image = gpurt_cuda_fatbin;
      if (!name[0]) gp_strlcpy(name, sizeof name, "builtin");
      break;
    case GPURT_MODULE_PTX:
    case GPURT_MODULE_CUBIN:
    case GPURT_MODULE_FATBIN:
      if (a.data == NULL || a.data_len == 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load \"%s\": %s data is empty",
                      name, cu_format_name(a.format));
      copy = malloc((size_t)a.data_len + 1);
      if (copy == NULL)
        return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load \"%s\": out of host memory", name);
      memcpy(copy, a.data, (size_t)a.data_len);
      ((char *)copy)[a.data_len] = 0; /* PTX must be NUL-terminated */
      image = copy;
      break;
    case GPURT_MODULE_METALLIB:
    case GPURT_MODULE_METAL_SOURCE:
      return gp_err(GPURT_ERR_UNSUPPORTED, "module_load \"%s\": format %s is not CUDA",
                    name, cu_format_name(a.format));
    default:
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load \"%s\": unknown format %d",
                    name, a.format);
  }
  if ((e = cu_enter(rt, a.device))) {
    free(copy);
    return e;
  }
  cu_module *mi = calloc(1, sizeof *mi);
  if (mi == NULL) {
    free(copy);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: out of host memory");
  }
  char elog[8192];
  elog[0] = 0;
  CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {elog, (void *)(uintptr_t)sizeof elog};
  CUresult r = cu_drv.p_cuModuleLoadDataEx(&mi->mod, image, 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    free(copy);
    free(mi);
    elog[sizeof elog - 1] = 0;
    size_t n = strlen(elog);
    while (n > 0 && (elog[n - 1] == '\n' || elog[n - 1] == ' ')) elog[--n] = 0;
    char op[CU_NAME_CAP + 64];
    snprintf(op, sizeof op, "module_load \"%s\" (%s)", name, cu_format_name(a.format));
    gpurt_error *fe = cu_fail(rt, a.device, r, op, NULL);
    if (n == 0) return fe;
    return gp_err_set_vendor(gp_err_append(fe, ": %s", elog), r);
  }
  mi->dev = a.device;
  mi->builtin = a.format == GPURT_MODULE_BUILTIN;
  gp_strlcpy(mi->name, sizeof mi->name, name);
  mi->image = copy;
  uint64_t hv;
  if ((e = cu_insert(rt, &rt->modules, mi, cu_release_module, "module_load", &hv))) return e;
  *out = (gpurt_module *)(uintptr_t)hv;
  return NULL;
}

static gpurt_error *cu_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_module *mi = cu_rt_take(h, CU_TABLE(modules), mh, &rt, &e);
  if (mi == NULL) return e;
  pthread_mutex_lock(&rt->mu);
  for (cu_kernel *k = mi->kernels; k; k = k->next) cu_table_remove(&rt->kernels, k->handle);
  cu_free_kernel_list(mi);
  pthread_mutex_unlock(&rt->mu);
  cu_enter_quiet(rt, mi->dev);
  CUresult r = CUDA_SUCCESS;
  if (!cu_dev_lost(rt, mi->dev)) r = cu_drv.p_cuModuleUnload(mi->mod);
  uint32_t dev = mi->dev;
  free(mi->image);
  free(mi);
  return r ? cu_fail(rt, dev, r, "cuModuleUnload", NULL) : NULL;
}

static gpurt_error *cu_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name,
                                  uint64_t name_len, gpurt_kernel **out) {
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt_out(h, out, "kernel_get", &e);
  if (!rt) return e;
  *out = NULL;
  cu_module *m = cu_get(&rt->modules, mh, &e);
  if (m == NULL) return e;
  if (name == NULL || name_len == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: the kernel name is empty");
  if (cu_dev_lost(rt, m->dev)) return cu_lost_error(rt, m->dev);
  if (name_len >= CU_NAME_CAP)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel named \"%.*s...\" in module "
                  "\"%s\" (name longer than %d bytes)", 64, name, m->name, CU_NAME_CAP - 1);
  char nm[CU_NAME_CAP];
  memcpy(nm, name, (size_t)name_len);
  nm[name_len] = 0;
  if (strlen(nm) != name_len)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: the kernel name contains a NUL");
  /* The embedded fatbin also holds the plugin's own kernels (gemm.c's f32
   * bias conversion); they are not built-ins. */
  if (m->builtin && strncmp(nm, CU_INTERNAL_PREFIX, sizeof CU_INTERNAL_PREFIX - 1) == 0)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel named \"%s\" in module \"%s\" "
                  "(the plugin's internal kernels are not built-ins)", nm, m->name);
  pthread_mutex_lock(&rt->mu);
  for (cu_kernel *k = m->kernels; k; k = k->next)
    if (k->name_len == name_len && memcmp(k->name, nm, name_len) == 0) {
      *out = (gpurt_kernel *)(uintptr_t)k->handle;
      pthread_mutex_unlock(&rt->mu);
      return NULL;
    }
  pthread_mutex_unlock(&rt->mu);
  if ((e = cu_enter(rt, m->dev))) return e;
  CUfunction fn = NULL;
  CUresult r = cu_drv.p_cuModuleGetFunction(&fn, m->mod, nm);
  if (r == CUDA_ERROR_NOT_FOUND)
    return gp_err_vendor(GPURT_ERR_NOT_FOUND, r, "kernel_get: no kernel named \"%s\" in module \"%s\"",
                         nm, m->name);
  if (r) return cu_fail(rt, m->dev, r, "cuModuleGetFunction", NULL);
  cu_kernel *k = calloc(1, sizeof *k);
  if (k == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: out of host memory");
  k->dev = m->dev;
  k->module = m;
  k->fn = fn;
  memcpy(k->name, nm, (size_t)name_len + 1);
  k->name_len = (size_t)name_len;
  const cu_builtin_sig *sig = m->builtin ? cu_builtin_find(nm, (size_t)name_len) : NULL;
  if (sig != NULL) {
    k->num_params = sig->n;
    k->params_known = k->kinds_known = 1;
    for (uint32_t i = 0; i < sig->n; i++) {
      k->kinds[i] = sig->kinds[i];
      k->sizes[i] = sig->sizes[i];
    }
  } else if (cu_drv.p_cuFuncGetParamInfo != NULL) {
    uint32_t n = 0;
    for (;;) {
      size_t off = 0, sz = 0;
      CUresult pr = cu_drv.p_cuFuncGetParamInfo(fn, n, &off, &sz);
      if (pr != CUDA_SUCCESS) break;
      if (n >= GPURT_MAX_KERNEL_PARAMS) {
        free(k);
        return gp_err(GPURT_ERR_UNSUPPORTED,
                      "kernel_get \"%s\": more than %d parameters", nm,
                      GPURT_MAX_KERNEL_PARAMS);
      }
      k->kinds[n] = GPURT_ARG_ANY;
      k->sizes[n] = (uint32_t)sz;
      n++;
    }
    k->num_params = n;
    k->params_known = 1;
  }
  pthread_mutex_lock(&rt->mu);
  /* Another thread may have added it meanwhile. */
  for (cu_kernel *o = m->kernels; o; o = o->next)
    if (o->name_len == k->name_len && memcmp(o->name, nm, k->name_len) == 0) {
      *out = (gpurt_kernel *)(uintptr_t)o->handle;
      pthread_mutex_unlock(&rt->mu);
      free(k);
      return NULL;
    }
  if (cu_table_insert(&rt->kernels, k, &k->handle) != 0) {
    pthread_mutex_unlock(&rt->mu);
    free(k);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: too many kernels");
  }
  k->next = m->kernels;
  m->kernels = k;
  *out = (gpurt_kernel *)(uintptr_t)k->handle;
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

static gpurt_error *cu_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_kernel *k = cu_rt_obj(h, CU_TABLE(kernels), kh, &rt, &e);
  if (!k || (e = gp_check_out(out, "kernel info"))) return e;
  if (!k->params_known)
    return gp_err(GPURT_ERR_UNSUPPORTED,
                  "kernel_info \"%s\": the driver cannot describe parameters "
                  "(cuFuncGetParamInfo is missing)", k->name);
  if ((e = cu_enter(rt, k->dev))) return e;
  gpurt_kernel_info i;
  memset(&i, 0, sizeof i);
  i.num_params = k->num_params;
  int v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->fn) == 0)
    i.max_threads_per_block = (uint32_t)v;
  v = 0;
  if (cu_drv.p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->fn) == 0)
    i.static_shared_bytes = (uint32_t)v;
  for (uint32_t p = 0; p < k->num_params; p++) {
    i.param_kind[p] = k->kinds[p];
    i.param_size[p] = k->sizes[p];
  }
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* ---- launch: resolve, validate, pack, enqueue ----------------------------------
 *
 * launch and launch_batch share these parts. launch runs them once;
 * launch_batch resolves and validates every item first (an invalid item
 * enqueues nothing), makes the context current once, then resolves, packs and
 * enqueues each item in order. Packing writes into the caller's fixed arrays
 * (GPURT_MAX_KERNEL_PARAMS entries, on its stack): no allocation per launch. */

/* The kernel of a launch and a local, struct_size-aware copy of its args. */
static inline gpurt_error *cu_launch_resolve(cu_runtime *rt, gpurt_kernel *kh,
                                             const gpurt_launch_args *args, cu_kernel **k,
                                             gpurt_launch_args *a) {
  gpurt_error *e = NULL;
  if ((*k = cu_get(&rt->kernels, kh, &e)) == NULL) return e;
  return gp_read_struct(a, sizeof *a, args, "launch args");
}

/* Checks a launch of k on st: devices, geometry, argument count, and each
 * argument's kind, size, buffer handle and view against the kernel's
 * parameters (where known). Enqueues nothing. */
static gpurt_error *cu_launch_validate(cu_runtime *rt, const cu_stream *st, const cu_kernel *k,
                                       const gpurt_launch_args *a) {
  if (st->dev != k->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": the kernel is on device %u, the stream on device %u",
                  k->name, k->dev, st->dev);
  if (a->grid[0] == 0 || a->grid[1] == 0 || a->grid[2] == 0 || a->block[0] == 0 ||
      a->block[1] == 0 || a->block[2] == 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": grid (%u,%u,%u) and block (%u,%u,%u) must be non-zero",
                  k->name, a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1],
                  a->block[2]);
  if (a->num_args > GPURT_MAX_KERNEL_PARAMS)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": %u arguments, at most %d",
                  k->name, a->num_args, GPURT_MAX_KERNEL_PARAMS);
  if (a->num_args > 0 && a->args == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": args is NULL", k->name);
  if (k->params_known && a->num_args != k->num_params)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": the kernel takes %u arguments, got %u",
                  k->name, k->num_params, a->num_args);
  for (uint32_t i = 0; i < a->num_args; i++) {
    const gpurt_kernel_arg *g = &a->args[i];
    if (k->kinds_known && g->kind != k->kinds[i])
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "launch \"%s\": argument %u is %s, the kernel wants %s", k->name, i,
                    cu_kind_name(g->kind), cu_kind_name(k->kinds[i]));
    if (g->kind == GPURT_ARG_BUFFER) {
      const cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)g->buffer);
      if (b == NULL)
        return gp_err(GPURT_ERR_INVALID_HANDLE,
                      "launch \"%s\": argument %u: invalid buffer handle %p: freed, foreign "
                      "or never created", k->name, i, (void *)g->buffer);
      if (b->dev != st->dev)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": argument %u: the buffer is on device %u, the stream "
                      "on device %u", k->name, i, b->dev, st->dev);
      if (g->offset > b->size || (g->length != 0 && g->length > b->size - g->offset))
        return gp_err(GPURT_ERR_OUT_OF_RANGE,
                      "launch \"%s\": argument %u: view [%llu, %llu+%llu) is beyond the "
                      "buffer's %llu bytes", k->name, i, (unsigned long long)g->offset,
                      (unsigned long long)g->offset, (unsigned long long)g->length,
                      (unsigned long long)b->size);
      if (k->params_known && k->sizes[i] != 8)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": argument %u is a buffer (8 bytes), the parameter has %u",
                      k->name, i, k->sizes[i]);
    } else {
      uint32_t w = cu_kind_width(g->kind);
      if (w == 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": argument %u has kind %d",
                      k->name, i, g->kind);
      if (g->size != w)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": argument %u is %s of %u bytes, size says %u", k->name,
                      i, cu_kind_name(g->kind), w, g->size);
      if (k->params_known && k->sizes[i] != w)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "launch \"%s\": argument %u has %u bytes, the parameter %u", k->name,
                      i, w, k->sizes[i]);
    }
  }
  return NULL;
}

/* Packs validated arguments for cuLaunchKernel: vals[i] holds argument i's
 * bits (a buffer's device address + offset; a scalar's low bytes, little-
 * endian), ptrs[i] points at vals[i]. A buffer gone since validation (freed
 * during the call, which the ABI forbids) is an error, not a crash. */
static inline gpurt_error *cu_launch_pack(cu_runtime *rt, const cu_kernel *k,
                                          const gpurt_launch_args *a,
                                          uint64_t vals[GPURT_MAX_KERNEL_PARAMS],
                                          void *ptrs[GPURT_MAX_KERNEL_PARAMS]) {
  for (uint32_t i = 0; i < a->num_args; i++) {
    const gpurt_kernel_arg *g = &a->args[i];
    if (g->kind == GPURT_ARG_BUFFER) {
      const cu_buffer *b = cu_table_lookup(&rt->buffers, (uint64_t)(uintptr_t)g->buffer);
      if (__builtin_expect(b == NULL, 0))
        return gp_err(GPURT_ERR_INVALID_HANDLE,
                      "launch \"%s\": argument %u: buffer handle %p was freed during the call",
                      k->name, i, (void *)g->buffer);
      vals[i] = (uint64_t)(b->ptr + g->offset);
    } else {
      vals[i] = g->value;
    }
    ptrs[i] = &vals[i];
  }
  return NULL;
}

/* Enqueues a packed launch on st (the device's context current) and records
 * the kernel's name for a later fault report. */
static gpurt_error *cu_launch_enqueue(cu_runtime *rt, cu_stream *st, const cu_kernel *k,
                                      const gpurt_launch_args *a, void **ptrs) {
  CUresult r = cu_drv.p_cuLaunchKernel(k->fn, a->grid[0], a->grid[1], a->grid[2], a->block[0],
                                       a->block[1], a->block[2], a->shared_mem_bytes, st->s,
                                       a->num_args ? ptrs : NULL, NULL);
  if (r) {
    if (r == CUDA_ERROR_INVALID_VALUE) {
      char t[256];
      cu_result_text(r, t, sizeof t);
      return gp_err_vendor(GPURT_ERR_INVALID_ARGUMENT, r,
                           "launch \"%s\": grid (%u,%u,%u) block (%u,%u,%u) shared %u: %s",
                           k->name, a->grid[0], a->grid[1], a->grid[2], a->block[0],
                           a->block[1], a->block[2], a->shared_mem_bytes, t);
    }
    char op[CU_NAME_CAP + 32];
    snprintf(op, sizeof op, "launch \"%s\"", k->name);
    return cu_fail(rt, st->dev, r, op, st->last_kernel);
  }
  /* Named for a later fault; copied only when the kernel changes (the
   * device's record is shared by every thread using the device). */
  if (atomic_load_explicit(&st->last_kernel_h, memory_order_relaxed) != k->handle) {
    memcpy(st->last_kernel, k->name, k->name_len + 1);
    atomic_store_explicit(&st->last_kernel_h, k->handle, memory_order_relaxed);
  }
  cu_device *d = &rt->devs[st->dev];
  if (atomic_load_explicit(&d->last_kernel_h, memory_order_relaxed) != k->handle) {
    memcpy(d->last_kernel, k->name, k->name_len + 1);
    atomic_store_explicit(&d->last_kernel_h, k->handle, memory_order_relaxed);
  }
  return NULL;
}

static gpurt_error *cu_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh,
                              const gpurt_launch_args *args) {
  gpurt_error *e = NULL;
  cu_runtime *rt;
  cu_stream *st = cu_rt_obj(h, CU_TABLE(streams), sh, &rt, &e);
  if (st == NULL) return e;
  cu_kernel *k;
  gpurt_launch_args a;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  if ((e = cu_launch_resolve(rt, kh, args, &k, &a)) || (e = cu_launch_validate(rt, st, k, &a)) ||
      (e = cu_launch_pack(rt, k, &a, vals, ptrs)) || (e = cu_enter(rt, st->dev)))
    return e;
  return cu_launch_enqueue(rt, st, k, &a, ptrs);
}

/* Every item validated before any is enqueued; one cu_enter; then each item
 * packed into the same stack arrays and enqueued in order. Errors name the
 * item ("launch_batch: item 3: ..."); out_enqueued counts what was enqueued. */
static gpurt_error *cu_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count,
                                    const gpurt_launch_item *items, uint64_t *out_enqueued) {
  if (out_enqueued != NULL) *out_enqueued = 0;
  gpurt_error *e = NULL;
  cu_runtime *rt = cu_rt(h, &e);
  if (!rt) return e;
  if (count == 0) return NULL; /* a no-op (any stream), as in the mock */
  cu_stream *st = cu_get(&rt->streams, sh, &e);
  if (st == NULL) return e;
  if (items == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch_batch: items is NULL (count %llu)",
                  (unsigned long long)count);
  cu_kernel *k;
  gpurt_launch_args a;
  for (uint64_t i = 0; i < count; i++)
    if ((e = cu_launch_resolve(rt, items[i].kernel, items[i].args, &k, &a)) ||
        (e = cu_launch_validate(rt, st, k, &a)))
      return gp_err_wrap(e, "launch_batch: item %llu", (unsigned long long)i);
  if ((e = cu_enter(rt, st->dev))) return e;
  uint64_t vals[GPURT_MAX_KERNEL_PARAMS];
  void *ptrs[GPURT_MAX_KERNEL_PARAMS];
  for (uint64_t i = 0; i < count; i++) {
    if ((e = cu_launch_resolve(rt, items[i].kernel, items[i].args, &k, &a)) ||
        (e = cu_launch_pack(rt, k, &a, vals, ptrs)) ||
        (e = cu_launch_enqueue(rt, st, k, &a, ptrs))) {
      if (out_enqueued != NULL) *out_enqueued = i;
      return gp_err_wrap(e, "launch_batch: item %llu", (unsigned long long)i);
    }
  }
  if (out_enqueued != NULL) *out_enqueued = count;
  return NULL;
}

/* ---- the table and the entry ------------------------------------------------ */

static const gpurt_api cu_api = {
    .struct_size = sizeof(gpurt_api),
    .abi_major = GPURT_ABI_MAJOR,
    .abi_minor = GPURT_ABI_MINOR,
    .error_get = gp_error_get,
    .error_destroy = gp_error_destroy,
    .plugin_info = cu_plugin_info,
    .probe = cu_probe,
    .shutdown = cu_shutdown,
    .runtime_create = cu_runtime_create,
    .runtime_destroy = cu_runtime_destroy,
    .runtime_stats = cu_runtime_stats,
    .runtime_control = cu_runtime_control,
    .device_count = cu_device_count,
    .device_info = cu_device_info,
    .device_synchronize = cu_device_synchronize,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy = cu_copy,
    .memset = cu_memset,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_synchronize,
    .stream_query = cu_stream_query,
    .stream_wait_event = cu_stream_wait_event,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .event_elapsed = cu_event_elapsed,
    .module_load = cu_module_load,
    .module_unload = cu_module_unload,
    .kernel_get = cu_kernel_get,
    .kernel_info = cu_kernel_info,
    .launch = cu_launch,
    .gemm_plan_create = cu_gemm_plan_create,
    .gemm_plan_destroy = cu_gemm_plan_destroy,
    .gemm_run = cu_gemm_run,
    .launch_batch = cu_launch_batch,
};

GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  if (args == NULL || args->struct_size < offsetof(gpurt_negotiate_args, api))
    return GPURT_ERR_INVALID_ARGUMENT;
  uint64_t sz = args->struct_size;
  args->plugin_abi_major = GPURT_ABI_MAJOR;
  args->plugin_abi_minor = GPURT_ABI_MINOR;
  int has_api = sz >= offsetof(gpurt_negotiate_args, api) + sizeof args->api;
  int has_msg = sz >= offsetof(gpurt_negotiate_args, message) + sizeof args->message;
  if (has_api) args->api = NULL;
  if (has_msg) args->message[0] = 0;
  if (args->host_abi_major != GPURT_ABI_MAJOR) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "cuda: ABI major mismatch: core %u.%u, plugin %d.%d", args->host_abi_major,
               args->host_abi_minor, GPURT_ABI_MAJOR, GPURT_ABI_MINOR);
    return GPURT_ERR_ABI_MISMATCH;
  }
  if (!has_api) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "cuda: negotiate args struct_size %llu has no room for api",
               (unsigned long long)sz);
    return GPURT_ERR_INVALID_ARGUMENT;
  }
  args->api = &cu_api;
  return GPURT_OK;
}
