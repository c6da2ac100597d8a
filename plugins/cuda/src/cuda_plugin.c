/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_plugin.c — the top floor of the CUDA plugin: probe, open (the
 * devices' primary contexts and launch limits), close, device info, the
 * lost-device check, the gp_backend table and the entry (csrc's engine
 * implements gpurt_api over the table). Errors, contexts and the
 * lost-device state are cuda_runtime.c's (the bottom floor); memory is in
 * cuda_memory.c, streams and events in cuda_stream.c, modules, kernels and
 * launches in cuda_module.c, GEMM in cuda_gemm.c, graphs in cuda_graph.c
 * (README.md: the file map).
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

#include "cuda_comm.h"
#include "cuda_internal.h"
#include "gp_engine.h"

/* The prefix of csrc's error messages ("cuda: ..."). */
const char gp_plugin_prefix[] = "cuda";

/* The plugin's version: the ABI it implements (GP_ABI_VERSION, from
 * gpurt.h), its own patch level, and what its fatbin needs. */
#define CU_PLUGIN_VERSION GP_ABI_VERSION ".0 (fatbin: sm_80 sm_90a compute_90; needs CUDA 13.0 driver)"

/* ---- negotiate, info, probe ---------------------------------------------- */

/* Fills o, zeroed and full size (the engine's, or a local one). */
static void cu_fill_info(CUdevice dev, int ver, gpurt_device_info *o) {
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
  cu_device_uuid(dev, o->uuid, sizeof o->uuid); /* 1.6 */
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

/* The engine read and checked args and gives full-size device infos. */
static gpurt_error *cu_probe(gpurt_probe_args *args) {
  gpurt_probe_args a = *args;
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
        gpurt_device_info local;
        memset(&local, 0, sizeof local);
        gpurt_device_info *info = (uint32_t)i < a.device_capacity ? &a.devices[i] : &local;
        cu_fill_info(dev, ver, info);
        if (i == 0) snprintf(first, sizeof first, "%s (%s)", info->name, info->arch);
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
  *args = a;
  return NULL;
}

/* ---- runtime ------------------------------------------------------------- */

/* Runs after the engine destroyed every object of the runtime. */
static void cu_runtime_free(cu_runtime *rt) {
  for (uint32_t i = 0; i < rt->ndev; i++) {
    if (rt->devs[i].ctx == NULL) continue;
    cu_enter_quiet(rt, i);
    (void)cu_drv.p_cuCtxSynchronize();
  }
  for (uint32_t i = 0; i < rt->ndev; i++) {
    cu_device *d = &rt->devs[i];
    if (d->ctx == NULL) continue;
    cu_enter_quiet(rt, i);
    cu_gemm_device_release(d);
    cu_own_device_release(d);
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
  free(rt->devs);
  free(rt);
}

/* The launch limits the engine checks: none beyond the ABI's. The driver
 * refuses a geometry or a dynamic shared size the device or the kernel
 * cannot run (CUDA_ERROR_INVALID_VALUE, named with the launch, as before
 * the engine), and it knows the kernel's own limits (registers, its
 * shared-memory attribute) that a per-device bound would not. */
static void cu_limits(gp_limits *lim) {
  lim->max_threads = UINT32_MAX;
  lim->max_block_z = UINT32_MAX;
  lim->max_shared = UINT32_MAX;
  for (int k = 0; k < 3; k++) lim->max_grid[k] = UINT32_MAX;
}

/* The engine read and checked a; the plugin has no runtime options. */
static gpurt_error *cu_open(const gpurt_runtime_create_args *a, void **ctx, uint32_t *ndev, gp_limits *lim) {
  (void)a;
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
    memset(&info, 0, sizeof info);
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
    const char *pdl = getenv("GPURT_CUDA_PDL");
    d->pdl = d->cc_major >= 9 && cu_drv.p_cuLaunchKernelEx != NULL && !(pdl != NULL && strcmp(pdl, "0") == 0);
  }
  cu_limits(lim);
  *ctx = rt;
  *ndev = rt->ndev;
  return NULL;
}

static void cu_close(void *ctx) { cu_runtime_free(ctx); }

/* ---- devices -------------------------------------------------------------- */

static gpurt_error *cu_device_info(void *ctx, uint32_t dev, gpurt_device_info *out) {
  cu_runtime *rt = ctx;
  gpurt_error *e = cu_enter(rt, dev);
  if (e) return e;
  int ver = 0;
  cu_drv.p_cuDriverGetVersion(&ver);
  cu_fill_info(rt->devs[dev].dev, ver, out);
  size_t fr = 0, tot = 0;
  CUresult r = cu_drv.p_cuMemGetInfo(&fr, &tot);
  if (r != CUDA_SUCCESS) return cu_fail(rt, dev, r, "cuMemGetInfo", NULL);
  out->memory_free = fr;
  return NULL;
}

/* A sticky error seen by any runtime of the process (cu_fail). The engine
 * keeps the first 95 bytes of the message as the cause it names in every
 * later refusal, so it is short: the CUDA error's name, the remedy, the
 * kernel last launched. */
static gpurt_error *cu_device_check(void *ctx, uint32_t dev) {
  cu_runtime *rt = ctx;
  if (!cu_dev_lost(rt, dev)) return NULL;
  cu_device *d = &rt->devs[dev];
  char msg[sizeof d->lost_msg];
  pthread_mutex_lock(&d->mu);
  CUresult code = d->lost_code;
  gp_strlcpy(msg, sizeof msg, d->lost_msg);
  pthread_mutex_unlock(&d->mu);
  const char *name = NULL;
  if (cu_drv.p_cuGetErrorName == NULL || cu_drv.p_cuGetErrorName(code, &name) != CUDA_SUCCESS || name == NULL)
    name = "a sticky CUDA error";
  static const char after[] = "after kernel \"";
  const char *k = strstr(msg, after);
  int klen = 0;
  if (k != NULL) {
    k += sizeof after - 1;
    const char *q = strchr(k, '"');
    klen = q ? (int)(q - k) : (int)strlen(k);
  }
  if (klen > 0)
    return gp_err_vendor(GPURT_ERR_DEVICE_LOST, code, "%s, restart the process (after kernel \"%.*s\")", name, klen, k);
  return gp_err_vendor(GPURT_ERR_DEVICE_LOST, code, "%s, restart the process", name);
}

/* ---- the backend table and the entry ------------------------------------------ */

static const gp_backend cu_backend = {
    .name = "cuda",
    .version = CU_PLUGIN_VERSION,
    .abi_minor = GPURT_ABI_MINOR,
    .priority = 300,
    /* attention objects on FlashInfer's prefill kernel are refused by
     * attention_run itself while recording (UNSUPPORTED, naming why). */
    .unrecordable = 0,
    .graph_once = 1,
    .probe = cu_probe,
    .open = cu_open,
    .close = cu_close,
    .device_info = cu_device_info,
    .device_check = cu_device_check,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy = cu_copy,
    .memset = cu_memset,
    .queue_create = cu_queue_create,
    .queue_destroy = cu_queue_destroy,
    .queue_sync = cu_queue_sync,
    .queue_query = cu_queue_query,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .event_elapsed = cu_event_elapsed,
    .module_load = cu_module_load,
    .module_unload = cu_module_unload,
    .kernel_get = cu_kernel_get,
    .launch = cu_launch,
    .launch_many = cu_launch_many,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_capture = cu_graph_capture,
    .graph_patchable = cu_graph_patchable,
    .graph_patch = cu_graph_patch,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
    .gemm_plan = cu_gemm_plan,
    .gemm_plan_free = cu_gemm_plan_free,
    .gemm_run = cu_gemm_run,
    .quant_matmul = cu_quant_matmul,
    .grouped_gemm = cu_grouped_gemm,
    .kv_append = cu_kv_append,
    .attention_create = cu_attention_create,
    .attention_destroy = cu_attention_destroy,
    .attention_plan = cu_attention_plan,
    .attention_run = cu_attention_run,
    /* 1.6: cuda_comm.c (NCCL) */
    .comm_unique_id = cu_comm_unique_id,
    .comm_create = cu_comm_create,
    .comm_destroy = cu_comm_destroy,
    .comm_abort = cu_comm_abort,
    .comm_query = cu_comm_query,
    .comm_run = cu_comm_run,
};

/* The entry: the engine's negotiation over the CUDA table (no side
 * effects). */
GP_ENGINE_ENTRY(cu_backend)
