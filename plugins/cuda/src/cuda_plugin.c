/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_plugin.c — the top floor of the CUDA plugin: negotiation, the
 * function table, plugin info, probe, runtime create/destroy and devices.
 * The runtime table, errors, contexts, the lost-device state and the
 * releasers are cuda_runtime.c's (the bottom floor); memory is in
 * cuda_memory.c, streams and events in cuda_stream.c, modules, kernels and
 * launches in cuda_module.c, GEMM in cuda_gemm.c (README.md: the file map).
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
#include "cuda_comm.h"

/* The prefix of csrc's error messages ("cuda: ..."). */
const char gp_plugin_prefix[] = "cuda";

/* The plugin's version: the ABI it implements (GP_ABI_VERSION, from
 * gpurt.h), its own patch level, and what its fatbin needs. */
#define CU_PLUGIN_VERSION GP_ABI_VERSION ".0 (fatbin: sm_80 sm_90a compute_90; needs CUDA 13.0 driver)"

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

static void cu_release_plan(void *u, void *o) {
  cu_enter_quiet(u, cu_gemm_plan_device(o));
  cu_gemm_plan_free(o);
}
static void cu_release_none(void *u, void *o) {
  (void)u;
  (void)o;
}

static void cu_runtime_free(cu_runtime *rt) {
  cu_comm_release_runtime(rt); /* 1.6: first, so no NCCL kernel waits for a peer */
  for (uint32_t i = 0; i < rt->ndev; i++) {
    if (rt->devs[i].ctx == NULL) continue;
    cu_enter_quiet(rt, i);
    (void)cu_drv.p_cuCtxSynchronize();
  }
  cu_table_each(&rt->graphs, cu_release_graph, rt); /* before what they use */
  cu_table_each(&rt->attns, cu_release_attention, rt);
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
    cu_quant_device_release(d);
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
  cu_table_free(&rt->graphs);
  cu_table_free(&rt->attns);
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
  cu_table_init(&rt->graphs, "graph");
  cu_table_init(&rt->attns, "attention");
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
  return gp_stats_write(out, &s);
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
    .quant_matmul = cu_quant_matmul,
    .grouped_gemm = cu_grouped_gemm,
    .graph_create = cu_graph_create,
    .graph_launch = cu_graph_launch,
    .graph_update = cu_graph_update,
    .graph_destroy = cu_graph_destroy,
    .launch_batch = cu_launch_batch,
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
    /* 1.7 */
    .graph_recordable = cu_graph_recordable,
};

/* The entry: csrc's gp_negotiate (no side effects). */
GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  return gp_negotiate(args, &cu_api);
}
