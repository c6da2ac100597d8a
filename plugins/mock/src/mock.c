/* SPDX-License-Identifier: Apache-2.0 */
/* The mock plugin (minimal first cut): negotiation, plugin info, probe,
 * runtimes and devices. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_common.h"

const char gp_plugin_prefix[] = "mock";

#define MOCK_VERSION "1.1.0"
#define MOCK_DEFAULT_MEMORY (16ull << 30)

typedef struct mock_rt {
  uint32_t serial;
  uint32_t ndev;
  uint64_t memory;
} mock_rt;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gp_handle_table g_rts;
static int g_rts_init;
static uint32_t g_serial;

static gpurt_error *get_rt(gpurt_runtime *h, mock_rt **out) {
  pthread_mutex_lock(&g_mu);
  void *o = NULL;
  int st = g_rts_init ? gp_table_lookup(&g_rts, (uintptr_t)h, &o) : GP_HANDLE_STALE;
  if (h == NULL) st = GP_HANDLE_NULL;
  pthread_mutex_unlock(&g_mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_RUNTIME, (uintptr_t)h);
  *out = o;
  return NULL;
}

static gpurt_error *m_plugin_info(gpurt_plugin_info *out) {
  gpurt_error *e = gp_check_out(out, "plugin info");
  if (e) return e;
  gpurt_plugin_info i;
  memset(&i, 0, sizeof i);
  gp_strlcpy(i.backend, sizeof i.backend, "mock");
  gp_strlcpy(i.version, sizeof i.version, MOCK_VERSION);
  i.priority = 100;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

static void fill_device_info(gpurt_device_info *out, uint32_t d, uint64_t total,
                             uint64_t free_b) {
  gpurt_device_info i;
  memset(&i, 0, sizeof i);
  snprintf(i.name, sizeof i.name, "gpurt mock CPU device %u", d);
  gp_strlcpy(i.vendor, sizeof i.vendor, "gpurt");
  gp_strlcpy(i.arch, sizeof i.arch, "cpu");
  gp_strlcpy(i.driver_version, sizeof i.driver_version, "mock-1");
  i.memory_total = total;
  i.memory_free = free_b;
  i.compute_major = 1;
  i.driver_version_code = 1;
  i.multiprocessor_count = 1;
  i.max_threads_per_block = 1024;
  i.warp_size = 32;
  i.flags = GPURT_DEVICE_BF16 | GPURT_DEVICE_FP8;
  gp_write_struct(out, &i, sizeof i);
}

static gpurt_error *m_probe(gpurt_probe_args *args) {
  gpurt_error *e = gp_check_out(args, "probe args");
  if (e) return e;
  gpurt_probe_args a;
  e = gp_read_struct(&a, sizeof a, args, "probe args");
  if (e) return e;
  if (a.device_capacity > 0 && a.devices == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe args: devices is NULL with capacity %u",
                  a.device_capacity);
  if (a.device_capacity > 0) {
    if (a.devices[0].struct_size < 8)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe args: devices[0] has struct_size below 8");
    fill_device_info(&a.devices[0], 0, MOCK_DEFAULT_MEMORY, MOCK_DEFAULT_MEMORY);
  }
  a.device_count = 1;
  a.available = 1;
  a.score = 1;
  a.reason_code = GPURT_PROBE_OK;
  gp_strlcpy(a.reason, sizeof a.reason, "cpu reference backend");
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

static gpurt_error *m_shutdown(void) { return NULL; }

static gpurt_error *m_runtime_create(const gpurt_runtime_create_args *args,
                                     gpurt_runtime **out) {
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: out is NULL");
  mock_rt *rt = calloc(1, sizeof *rt);
  if (!rt) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory");
  (void)args;
  rt->ndev = 1;
  rt->memory = MOCK_DEFAULT_MEMORY;
  pthread_mutex_lock(&g_mu);
  if (!g_rts_init) { gp_table_init(&g_rts, GP_KIND_RUNTIME, 0); g_rts_init = 1; }
  g_serial = (g_serial + 1) & 0xffff;
  if (g_serial == 0) g_serial = 1;
  rt->serial = g_serial;
  uintptr_t h;
  int r = gp_table_insert(&g_rts, rt, &h);
  pthread_mutex_unlock(&g_mu);
  if (r != 0) { free(rt); return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory"); }
  *out = (gpurt_runtime *)h;
  return NULL;
}

static gpurt_error *m_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&g_mu);
  gp_table_remove(&g_rts, (uintptr_t)h);
  pthread_mutex_unlock(&g_mu);
  free(rt);
  return NULL;
}

static gpurt_error *m_device_count(gpurt_runtime *h, uint32_t *out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (!out) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device_count: out is NULL");
  *out = rt->ndev;
  return NULL;
}

static gpurt_error *m_device_info(gpurt_runtime *h, uint32_t d, gpurt_device_info *out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if ((e = gp_check_out(out, "device info"))) return e;
  if (d >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device %u does not exist (%u devices)", d, rt->ndev);
  fill_device_info(out, d, rt->memory, rt->memory);
  return NULL;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STUB(name, ...)                                                     \
  static gpurt_error *m_##name(__VA_ARGS__) {                               \
    return gp_err(GPURT_ERR_UNSUPPORTED, #name " is not implemented yet");  \
  }
STUB(runtime_stats, gpurt_runtime *a, gpurt_runtime_stats *b)
STUB(runtime_control, gpurt_runtime *a, const gpurt_control_args *b)
STUB(device_synchronize, gpurt_runtime *a, uint32_t b)
STUB(buffer_alloc, gpurt_runtime *a, uint32_t b, uint64_t c, gpurt_buffer **d)
STUB(buffer_free, gpurt_runtime *a, gpurt_buffer *b)
STUB(host_alloc, gpurt_runtime *a, uint64_t b, gpurt_host_buffer **c, void **d)
STUB(host_free, gpurt_runtime *a, gpurt_host_buffer *b)
STUB(copy, gpurt_runtime *a, const gpurt_copy_args *b)
STUB(memset, gpurt_runtime *a, const gpurt_memset_args *b)
STUB(stream_create, gpurt_runtime *a, uint32_t b, gpurt_stream **c)
STUB(stream_destroy, gpurt_runtime *a, gpurt_stream *b)
STUB(stream_synchronize, gpurt_runtime *a, gpurt_stream *b)
STUB(stream_query, gpurt_runtime *a, gpurt_stream *b)
STUB(stream_wait_event, gpurt_runtime *a, gpurt_stream *b, gpurt_event *c)
STUB(event_create, gpurt_runtime *a, uint32_t b, uint32_t c, gpurt_event **d)
STUB(event_destroy, gpurt_runtime *a, gpurt_event *b)
STUB(event_record, gpurt_runtime *a, gpurt_event *b, gpurt_stream *c)
STUB(event_query, gpurt_runtime *a, gpurt_event *b)
STUB(event_synchronize, gpurt_runtime *a, gpurt_event *b)
STUB(event_elapsed, gpurt_runtime *a, gpurt_event *b, gpurt_event *c, double *d)
STUB(module_load, gpurt_runtime *a, const gpurt_module_load_args *b, gpurt_module **c)
STUB(module_unload, gpurt_runtime *a, gpurt_module *b)
STUB(kernel_get, gpurt_runtime *a, gpurt_module *b, const char *c, uint64_t d, gpurt_kernel **e)
STUB(kernel_info, gpurt_runtime *a, gpurt_kernel *b, gpurt_kernel_info *c)
STUB(launch, gpurt_runtime *a, gpurt_stream *b, gpurt_kernel *c, const gpurt_launch_args *d)
#pragma GCC diagnostic pop

static const gpurt_api mock_api = {
    .struct_size = offsetof(gpurt_api, gemm_plan_create),
    .abi_major = GPURT_ABI_MAJOR,
    .abi_minor = 0,
    .error_get = gp_error_get,
    .error_destroy = gp_error_destroy,
    .plugin_info = m_plugin_info,
    .probe = m_probe,
    .shutdown = m_shutdown,
    .runtime_create = m_runtime_create,
    .runtime_destroy = m_runtime_destroy,
    .runtime_stats = m_runtime_stats,
    .runtime_control = m_runtime_control,
    .device_count = m_device_count,
    .device_info = m_device_info,
    .device_synchronize = m_device_synchronize,
    .buffer_alloc = m_buffer_alloc,
    .buffer_free = m_buffer_free,
    .host_alloc = m_host_alloc,
    .host_free = m_host_free,
    .copy = m_copy,
    .memset = m_memset,
    .stream_create = m_stream_create,
    .stream_destroy = m_stream_destroy,
    .stream_synchronize = m_stream_synchronize,
    .stream_query = m_stream_query,
    .stream_wait_event = m_stream_wait_event,
    .event_create = m_event_create,
    .event_destroy = m_event_destroy,
    .event_record = m_event_record,
    .event_query = m_event_query,
    .event_synchronize = m_event_synchronize,
    .event_elapsed = m_event_elapsed,
    .module_load = m_module_load,
    .module_unload = m_module_unload,
    .kernel_get = m_kernel_get,
    .kernel_info = m_kernel_info,
    .launch = m_launch,
};

GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  if (args == NULL || args->struct_size < offsetof(gpurt_negotiate_args, api))
    return GPURT_ERR_INVALID_ARGUMENT;
  int has_api = args->struct_size >= offsetof(gpurt_negotiate_args, api) + sizeof(args->api);
  int has_msg = args->struct_size >= offsetof(gpurt_negotiate_args, message) + sizeof(args->message);
  args->plugin_abi_major = GPURT_ABI_MAJOR;
  args->plugin_abi_minor = mock_api.abi_minor;
  if (has_api) args->api = NULL;
  if (has_msg) args->message[0] = 0;
  if (args->host_abi_major != GPURT_ABI_MAJOR) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "mock: abi mismatch: core speaks %u.%u, plugin speaks %u.%u",
               args->host_abi_major, args->host_abi_minor, GPURT_ABI_MAJOR,
               mock_api.abi_minor);
    return GPURT_ERR_ABI_MISMATCH;
  }
  if (!has_api) {
    if (has_msg) snprintf(args->message, sizeof args->message, "mock: negotiate args too small");
    return GPURT_ERR_INVALID_ARGUMENT;
  }
  args->api = &mock_api;
  return GPURT_OK;
}
