/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_plugin.c — the mock plugin's top floor: negotiation, the function table, plugin
 * info, probe, shutdown, runtime create/destroy/stats/control and devices. The runtime
 * table and the helpers every file uses are mock_runtime.c's (the bottom floor).
 * See mock_internal.h for the objects and the locking.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_comm.h"
#include "mock_internal.h"

const char gp_plugin_prefix[] = "mock";

/* ------------------------------------------------------------------ */
/* Plugin info, probe, shutdown                                        */
/* ------------------------------------------------------------------ */

static gpurt_error *m_plugin_info(gpurt_plugin_info *out) {
  gpurt_error *e = gp_check_out(out, "plugin_info: out");
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
  i.compute_minor = 0;
  i.driver_version_code = 1;
  i.multiprocessor_count = 1;
  i.max_threads_per_block = 1024;
  i.warp_size = 32;
  i.flags = GPURT_DEVICE_BF16 | GPURT_DEVICE_FP8;
  snprintf(i.pci_bus_id, sizeof i.pci_bus_id, "0000:%02x:00.0", (d + 1) & 0xff);
  /* Like a real UUID, the first group tells devices apart. */
  snprintf(i.uuid, sizeof i.uuid, "GPU-%08x-6d6f-436b-8000-%012x", (unsigned)((d + 1) * 0x9e3779b1u), d);
  gp_write_struct(out, &i, sizeof i);
}

/* Reads an unsigned env setting; -1 when unset, -2 when malformed. */
static int64_t env_i64(const char *name, int suffix) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == 0) return -1;
  int64_t x;
  if (gp_parse_i64(v, strlen(v), suffix, &x) != 0 || x < 0) return -2;
  return x;
}

static gpurt_error *m_probe(gpurt_probe_args *args) {
  gpurt_error *e = gp_check_out(args, "probe: args");
  if (e) return e;
  gpurt_probe_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "probe: args"))) return e;
  if (a.device_capacity > 0 && a.devices == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe: devices is NULL with device_capacity %u",
                  a.device_capacity);
  int64_t nd = env_i64("GPURT_MOCK_DEVICES", 0);
  uint32_t ndev = (nd >= 1 && nd <= (int64_t)MOCK_MAX_DEVICES) ? (uint32_t)nd : 1;
  int64_t mem = env_i64("GPURT_MOCK_MEMORY", 1);
  uint64_t memory = mem > 0 ? (uint64_t)mem : MOCK_DEFAULT_MEMORY;
  for (uint32_t d = 0; d < ndev && d < a.device_capacity; d++) {
    if (a.devices[d].struct_size < sizeof(uint64_t))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe: devices[%u] has struct_size below 8", d);
    fill_device_info(&a.devices[d], d, memory, memory);
  }
  a.device_count = ndev;
  a.available = 1;
  a.score = 1;
  a.reason_code = GPURT_PROBE_OK;
  gp_strlcpy(a.reason, sizeof a.reason, "cpu reference backend");
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

static gpurt_error *m_shutdown(void) {
  uint32_t live = mock_rt_shutdown();
  if (live > 0)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION,
                  "shutdown: %u runtime(s) still alive; destroy them first", live);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Runtime                                                             */
/* ------------------------------------------------------------------ */

typedef struct rt_config {
  int64_t devices, memory, delay_us, gemm_threads;
  int64_t fail_alloc_nth, fail_launch_nth, lose_device;
} rt_config;

static gpurt_error *parse_int_opt(const char *what, const char *key, size_t klen,
                                  const char *val, size_t vlen, int suffix, int64_t *out) {
  int64_t x;
  if (gp_parse_i64(val, vlen, suffix, &x) != 0 || x < 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %.*s=\"%.*s\" is not a non-negative integer",
                  what, (int)klen, key, (int)vlen, val);
  *out = x;
  return NULL;
}

static int key_is(const char *k, size_t n, const char *name) {
  return strlen(name) == n && memcmp(k, name, n) == 0;
}

static gpurt_error *fault_opt(void *user, const char *k, size_t kl, const char *v, size_t vl) {
  rt_config *c = user;
  const char *what = "GPURT_MOCK_FAULTS";
  if (key_is(k, kl, "fail_alloc_nth")) return parse_int_opt(what, k, kl, v, vl, 0, &c->fail_alloc_nth);
  if (key_is(k, kl, "fail_launch_nth")) return parse_int_opt(what, k, kl, v, vl, 0, &c->fail_launch_nth);
  if (key_is(k, kl, "lose_device")) return parse_int_opt(what, k, kl, v, vl, 0, &c->lose_device);
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: unknown fault \"%.*s\" (known: fail_alloc_nth, "
                "fail_launch_nth, lose_device)", what, (int)kl, k);
}

static gpurt_error *runtime_opt(void *user, const char *k, size_t kl, const char *v, size_t vl) {
  rt_config *c = user;
  const char *what = "runtime options";
  if (key_is(k, kl, "devices")) return parse_int_opt(what, k, kl, v, vl, 0, &c->devices);
  if (key_is(k, kl, "memory")) return parse_int_opt(what, k, kl, v, vl, 1, &c->memory);
  if (key_is(k, kl, "delay_us")) return parse_int_opt(what, k, kl, v, vl, 0, &c->delay_us);
  if (key_is(k, kl, "gemm_threads")) return parse_int_opt(what, k, kl, v, vl, 0, &c->gemm_threads);
  if (key_is(k, kl, "fail_alloc_nth") || key_is(k, kl, "fail_launch_nth") ||
      key_is(k, kl, "lose_device")) {
    gpurt_error *e = fault_opt(user, k, kl, v, vl);
    return e;
  }
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime options: unknown key \"%.*s\" (known: devices, "
                "memory, delay_us, gemm_threads, fail_alloc_nth, fail_launch_nth, lose_device)",
                (int)kl, k);
}

static void rt_free(mock_rt *rt) {
  gp_table_free(&rt->bufs);
  gp_table_free(&rt->hosts);
  gp_table_free(&rt->streams);
  gp_table_free(&rt->events);
  gp_table_free(&rt->modules);
  gp_table_free(&rt->kernels);
  gp_table_free(&rt->plans);
  gp_table_free(&rt->graphs);
  gp_table_free(&rt->attns);
  gp_table_free(&rt->comms);
  free(rt->used);
  free(rt->lost);
  pthread_mutex_destroy(&rt->mu);
  pthread_mutex_destroy(&rt->ev_mu);
  pthread_cond_destroy(&rt->ev_cv);
  free(rt);
}

static gpurt_error *m_runtime_create(const gpurt_runtime_create_args *args,
                                     gpurt_runtime **out) {
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: out is NULL");
  *out = NULL;
  gpurt_runtime_create_args a;
  memset(&a, 0, sizeof a);
  gpurt_error *e;
  if (args != NULL && (e = gp_read_struct(&a, sizeof a, args, "runtime_create: args"))) return e;

  rt_config c = {-1, -1, -1, -1, -1, -1, -1};
  int64_t v;
  if ((v = env_i64("GPURT_MOCK_DEVICES", 0)) == -2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "GPURT_MOCK_DEVICES=\"%s\" is not a count", getenv("GPURT_MOCK_DEVICES"));
  c.devices = v;
  if ((v = env_i64("GPURT_MOCK_MEMORY", 1)) == -2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "GPURT_MOCK_MEMORY=\"%s\" is not a size in bytes", getenv("GPURT_MOCK_MEMORY"));
  c.memory = v;
  if ((v = env_i64("GPURT_MOCK_DELAY_US", 0)) == -2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "GPURT_MOCK_DELAY_US=\"%s\" is not a number of microseconds", getenv("GPURT_MOCK_DELAY_US"));
  c.delay_us = v;
  if ((v = env_i64("GPURT_MOCK_GEMM_THREADS", 0)) == -2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "GPURT_MOCK_GEMM_THREADS=\"%s\" is not a count", getenv("GPURT_MOCK_GEMM_THREADS"));
  c.gemm_threads = v;
  const char *faults = getenv("GPURT_MOCK_FAULTS");
  if (faults && (e = gp_parse_options(faults, strlen(faults), ",;", "GPURT_MOCK_FAULTS", fault_opt, &c)))
    return e;
  if (a.options != NULL && a.options_len > 0 &&
      (e = gp_parse_options(a.options, a.options_len, ";,", "runtime options", runtime_opt, &c)))
    return e;
  if (a.options == NULL && a.options_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: options is NULL with options_len %llu",
                  U(a.options_len));

  if (c.devices == -1) c.devices = 1;
  if (c.devices < 1 || c.devices > (int64_t)MOCK_MAX_DEVICES)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: devices=%lld is outside 1..%u",
                  (long long)c.devices, MOCK_MAX_DEVICES);
  if (c.memory == -1) c.memory = (int64_t)MOCK_DEFAULT_MEMORY;
  if (c.memory < 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: memory=%lld must be at least 1 byte",
                  (long long)c.memory);
  if (c.delay_us == -1) c.delay_us = MOCK_DEFAULT_DELAY_US;
  if (c.delay_us > 1000000)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: delay_us=%lld is above 1000000",
                  (long long)c.delay_us);
  if (c.lose_device >= c.devices)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: lose_device=%lld but there are %lld devices",
                  (long long)c.lose_device, (long long)c.devices);

  mock_rt *rt = calloc(1, sizeof *rt);
  if (rt == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory");
  rt->ndev = (uint32_t)c.devices;
  rt->memory = (uint64_t)c.memory;
  rt->delay_us = (unsigned)c.delay_us;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 1) ncpu = 1;
  if (ncpu > 16) ncpu = 16;
  rt->gemm_threads = c.gemm_threads >= 1 ? (int)(c.gemm_threads > 64 ? 64 : c.gemm_threads) : (int)ncpu;
  rt->log = a.log;
  rt->log_user = a.log_user;
  rt->fail_alloc_nth = c.fail_alloc_nth > 0 ? c.fail_alloc_nth : 0;
  rt->fail_launch_nth = c.fail_launch_nth > 0 ? c.fail_launch_nth : 0;
  rt->used = calloc(rt->ndev, sizeof *rt->used);
  rt->lost = calloc(rt->ndev, sizeof *rt->lost);
  pthread_mutex_init(&rt->mu, NULL);
  pthread_mutex_init(&rt->ev_mu, NULL);
  pthread_cond_init(&rt->ev_cv, NULL);
  if (rt->used == NULL || rt->lost == NULL) {
    rt_free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory");
  }
  for (uint32_t d = 0; d < rt->ndev; d++) atomic_init(&rt->lost[d], 0);
  if (c.lose_device >= 0) atomic_store(&rt->lost[c.lose_device], 1);

  uintptr_t h;
  int r = mock_rt_register(rt, &h);
  gp_table_init(&rt->bufs, GP_KIND_BUFFER, rt->serial);
  gp_table_init(&rt->hosts, GP_KIND_HOST_BUFFER, rt->serial);
  gp_table_init(&rt->streams, GP_KIND_STREAM, rt->serial);
  gp_table_init(&rt->events, GP_KIND_EVENT, rt->serial);
  gp_table_init(&rt->modules, GP_KIND_MODULE, rt->serial);
  gp_table_init(&rt->kernels, GP_KIND_KERNEL, rt->serial);
  gp_table_init(&rt->plans, GP_KIND_GEMM_PLAN, rt->serial);
  gp_table_init(&rt->graphs, GP_KIND_GRAPH, rt->serial);
  gp_table_init(&rt->attns, GP_KIND_ATTENTION, rt->serial);
  gp_table_init(&rt->comms, GP_KIND_COMM, rt->serial);
  if (r != 0) {
    rt_free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory for the runtime table");
  }
  if (rt->log) {
    char msg[200];
    int n = snprintf(msg, sizeof msg, "mock: runtime with %u device(s) of %llu bytes, %u us delay per op, %d gemm threads",
                     rt->ndev, U(rt->memory), rt->delay_us, rt->gemm_threads);
    rt->log(rt->log_user, 1, msg, (uint64_t)n);
  }
  *out = (gpurt_runtime *)h;
  return NULL;
}

static gpurt_error *m_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  mock_rt_unregister(h);

  /* Streams first: they may still use buffers. */
  for (uint32_t i = 0; i < gp_table_cap(&rt->streams); i++) {
    mock_stream *s = gp_table_at(&rt->streams, i);
    if (s) mock_stream_finish(rt, s);
  }
  gpurt_error *first = NULL;
  for (uint32_t i = 0; i < gp_table_cap(&rt->bufs); i++) {
    mock_buf *b = gp_table_at(&rt->bufs, i);
    if (!b) continue;
    gpurt_error *be = mock_buf_release(b, 0);
    if (be && !first) first = be;
    else gp_error_destroy(be);
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->hosts); i++) {
    mock_host *hb = gp_table_at(&rt->hosts, i);
    if (hb) { free(hb->ptr); free(hb); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->events); i++) {
    mock_event *ev = gp_table_at(&rt->events, i);
    if (ev) { mock_rec_release(rt, ev->latest); free(ev); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->modules); i++) {
    mock_module *m = gp_table_at(&rt->modules, i);
    if (m) { free(m->kernels); free(m); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->kernels); i++) free(gp_table_at(&rt->kernels, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->plans); i++) free(gp_table_at(&rt->plans, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->graphs); i++) mock_graph_free(gp_table_at(&rt->graphs, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->attns); i++) {
    void *a = gp_table_at(&rt->attns, i);
    if (a) mock_attention_free(a);
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->comms); i++) mock_comm_free(gp_table_at(&rt->comms, i));
  rt_free(rt);
  return first;
}

static gpurt_error *m_runtime_stats(gpurt_runtime *h, gpurt_runtime_stats *out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  gpurt_runtime_stats s;
  memset(&s, 0, sizeof s);
  pthread_mutex_lock(&rt->mu);
  s.live_buffers = rt->bufs.live;
  s.live_host_buffers = rt->hosts.live;
  s.live_streams = rt->streams.live;
  s.live_events = rt->events.live;
  s.live_modules = rt->modules.live;
  s.live_plans = rt->plans.live + rt->attns.live;
  for (uint32_t d = 0; d < rt->ndev; d++) s.device_bytes += rt->used[d];
  s.host_bytes = rt->host_bytes;
  pthread_mutex_unlock(&rt->mu);
  return gp_stats_write(out, &s);
}

static gpurt_error *m_runtime_control(gpurt_runtime *h, const gpurt_control_args *args) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  gpurt_control_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "runtime_control: args"))) return e;
  if (a.key == NULL && a.key_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: key is NULL with key_len %llu", U(a.key_len));
  const char *k = a.key ? a.key : "";
  size_t kl = (size_t)a.key_len;
  int fa = key_is(k, kl, "fail_alloc_nth"), fl = key_is(k, kl, "fail_launch_nth");
  if (fa || fl) {
    if (a.value < 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: %.*s=%lld is negative (0 turns it off)",
                    (int)kl, k, (long long)a.value);
    pthread_mutex_lock(&rt->mu);
    if (fa) rt->fail_alloc_nth = a.value;
    else rt->fail_launch_nth = a.value;
    pthread_mutex_unlock(&rt->mu);
    return NULL;
  }
  if (key_is(k, kl, "lose_device")) {
    if (a.value < 0 || (uint64_t)a.value >= rt->ndev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: lose_device=%lld but the runtime has %u devices",
                    (long long)a.value, rt->ndev);
    atomic_store(&rt->lost[a.value], 1);
    return NULL;
  }
  if (key_is(k, kl, "debug_corrupt_guard")) {
    /* Test hook: value is a buffer handle; one byte past its end is
     * overwritten so that buffer_free must report the guard. */
    mock_buf *b;
    if ((e = mock_lookup(rt, &rt->bufs, (const void *)(uintptr_t)a.value, (void **)&b)))
      return gp_err_wrap(e, "runtime_control: debug_corrupt_guard");
    b->data[b->size] ^= 0xff;
    return NULL;
  }
  if (key_is(k, kl, "delay_us")) {
    if (a.value < 0 || a.value > 1000000)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: delay_us=%lld is outside 0..1000000",
                    (long long)a.value);
    rt->delay_us = (unsigned)a.value;
    return NULL;
  }
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime_control: unknown key \"%.*s\" (the mock knows "
                "fail_alloc_nth, fail_launch_nth, lose_device, delay_us, debug_corrupt_guard)", (int)(kl > 200 ? 200 : kl), k);
}

/* ------------------------------------------------------------------ */
/* Devices and memory                                                  */
/* ------------------------------------------------------------------ */

static gpurt_error *m_device_count(gpurt_runtime *h, uint32_t *out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (!out) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device_count: out is NULL");
  *out = rt->ndev;
  return NULL;
}

static gpurt_error *m_device_info(gpurt_runtime *h, uint32_t d, gpurt_device_info *out) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if ((e = mock_check_dev(rt, d, "device_info"))) return e;
  if ((e = gp_check_out(out, "device_info: out"))) return e;
  pthread_mutex_lock(&rt->mu);
  uint64_t used = rt->used[d];
  pthread_mutex_unlock(&rt->mu);
  fill_device_info(out, d, rt->memory, rt->memory - used);
  return NULL;
}

static gpurt_error *m_device_synchronize(gpurt_runtime *h, uint32_t d) {
  mock_rt *rt;
  gpurt_error *e = mock_get_rt(h, &rt);
  if (e) return e;
  if (d >= rt->ndev) return mock_check_dev(rt, d, "device_synchronize");
  if ((e = mock_drain_device(rt, d))) return e;
  if (mock_is_lost(rt, d)) return mock_lost_err("device_synchronize", d);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* The table and the entry                                             */
/* ------------------------------------------------------------------ */

static const gpurt_api mock_api = {
    .struct_size = sizeof(gpurt_api),
    .abi_major = GPURT_ABI_MAJOR,
    .abi_minor = GPURT_ABI_MINOR,
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
    .launch_batch = m_launch_batch,
    .gemm_plan_create = m_gemm_plan_create,
    .gemm_plan_destroy = m_gemm_plan_destroy,
    .gemm_run = m_gemm_run,
    .graph_create = m_graph_create,
    .graph_launch = m_graph_launch,
    .graph_update = m_graph_update,
    .graph_destroy = m_graph_destroy,
    .quant_matmul = m_quant_matmul,
    .grouped_gemm = m_grouped_gemm,
    /* 1.5: mock_attention.c */
    .kv_append = m_kv_append,
    .attention_create = m_attention_create,
    .attention_destroy = m_attention_destroy,
    .attention_plan = m_attention_plan,
    .attention_run = m_attention_run,
    /* 1.6: mock_comm.c */
    .comm_unique_id = m_comm_unique_id,
    .comm_create = m_comm_create,
    .comm_destroy = m_comm_destroy,
    .comm_abort = m_comm_abort,
    .comm_query = m_comm_query,
    .comm_run = m_comm_run,
    /* 1.7: mock_graph.c */
    .graph_recordable = m_graph_recordable,
};

/* The entry: csrc's gp_negotiate (no side effects). */
GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  return gp_negotiate(args, &mock_api);
}
