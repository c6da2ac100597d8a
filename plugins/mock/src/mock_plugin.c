/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_plugin.c — the mock's top floor: probe, open (options, environment,
 * fault settings), close, devices, runtime_control's keys, the gp_backend
 * table and the entry (csrc's engine implements gpurt_api over the table).
 * See mock_internal.h for the objects and the locking.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"
#include "mock_internal.h"

const char gp_plugin_prefix[] = "mock";

static void fill_device_info(gpurt_device_info *out, uint32_t d, uint64_t total,
                             uint64_t free_b) {
  gpurt_device_info i = *out; /* the engine's, full size and zeroed */
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
  *out = i;
}

/* Reads an unsigned env setting; -1 when unset, -2 when malformed. */
static int64_t env_i64(const char *name, int suffix) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == 0) return -1;
  int64_t x;
  if (gp_parse_i64(v, strlen(v), suffix, &x) != 0 || x < 0) return -2;
  return x;
}

static gpurt_error *m_probe(gpurt_probe_args *a) {
  int64_t nd = env_i64("GPURT_MOCK_DEVICES", 0);
  uint32_t ndev = (nd >= 1 && nd <= (int64_t)MOCK_MAX_DEVICES) ? (uint32_t)nd : 1;
  int64_t mem = env_i64("GPURT_MOCK_MEMORY", 1);
  uint64_t memory = mem > 0 ? (uint64_t)mem : MOCK_DEFAULT_MEMORY;
  for (uint32_t d = 0; d < ndev && d < a->device_capacity; d++) {
    fill_device_info(&a->devices[d], d, memory, memory);
  }
  a->device_count = ndev;
  a->available = 1;
  a->score = 1;
  a->reason_code = GPURT_PROBE_OK;
  gp_strlcpy(a->reason, sizeof a->reason, "cpu reference backend");
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Runtime                                                             */
/* ------------------------------------------------------------------ */

typedef struct rt_config {
  int64_t devices, memory, delay_us, gemm_threads;
  int64_t fail_alloc_nth, fail_launch_nth, lose_device, refuse_replay_nth;
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

/* An integer option: its key, whether the value may have a size suffix,
 * and its field of rt_config. */
typedef struct int_opt {
  const char *key;
  int suffix;
  size_t off;
} int_opt;
#define INT_OPT(field, suffix) {#field, suffix, offsetof(rt_config, field)}
static const int_opt runtime_opts[] = {INT_OPT(devices, 0), INT_OPT(memory, 1), INT_OPT(delay_us, 0),
                                       INT_OPT(gemm_threads, 0)};
static const int_opt fault_opts[] = {INT_OPT(fail_alloc_nth, 0), INT_OPT(fail_launch_nth, 0), INT_OPT(lose_device, 0),
                                     INT_OPT(refuse_replay_nth, 0)};
#undef INT_OPT
/* runtime_opts[i]'s environment variable (read first, the options then
 * override it) and what a malformed value of it is not. */
static const char *const runtime_envs[][2] = {{"GPURT_MOCK_DEVICES", "a count"},
                                              {"GPURT_MOCK_MEMORY", "a size in bytes"},
                                              {"GPURT_MOCK_DELAY_US", "a number of microseconds"},
                                              {"GPURT_MOCK_GEMM_THREADS", "a count"}};
_Static_assert(sizeof runtime_envs / sizeof *runtime_envs == sizeof runtime_opts / sizeof *runtime_opts,
               "runtime_envs names every runtime_opts entry");
#define OPTS(t) t, sizeof t / sizeof *t

/* Sets the option of t[0..n) keyed k (what names the list in the error of
 * a bad value, *e); 0 when t has no such key. */
static int set_int_opt(const int_opt *t, size_t n, const char *what, rt_config *c, const char *k, size_t kl,
                       const char *v, size_t vl, gpurt_error **e) {
  for (size_t i = 0; i < n; i++) {
    if (!key_is(k, kl, t[i].key)) continue;
    *e = parse_int_opt(what, k, kl, v, vl, t[i].suffix, (int64_t *)(void *)((char *)c + t[i].off));
    return 1;
  }
  return 0;
}

static gpurt_error *fault_opt(void *user, const char *k, size_t kl, const char *v, size_t vl) {
  gpurt_error *e;
  if (set_int_opt(OPTS(fault_opts), "GPURT_MOCK_FAULTS", user, k, kl, v, vl, &e)) return e;
  return gp_err(GPURT_ERR_UNSUPPORTED, "GPURT_MOCK_FAULTS: unknown fault \"%.*s\" (known: fail_alloc_nth, "
                "fail_launch_nth, lose_device, refuse_replay_nth)", (int)kl, k);
}

static gpurt_error *runtime_opt(void *user, const char *k, size_t kl, const char *v, size_t vl) {
  gpurt_error *e;
  if (set_int_opt(OPTS(runtime_opts), "runtime options", user, k, kl, v, vl, &e) ||
      set_int_opt(OPTS(fault_opts), "GPURT_MOCK_FAULTS", user, k, kl, v, vl, &e))
    return e;
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime options: unknown key \"%.*s\" (known: devices, "
                "memory, delay_us, gemm_threads, fail_alloc_nth, fail_launch_nth, lose_device, refuse_replay_nth)",
                (int)kl, k);
}

static void rt_free(mock_rt *rt) {
  free(rt->used);
  free(rt->lost);
  pthread_mutex_destroy(&rt->mu);
  pthread_mutex_destroy(&rt->ev_mu);
  pthread_cond_destroy(&rt->ev_cv);
  free(rt);
}

static gpurt_error *m_open(const gpurt_runtime_create_args *ap, void **ctx, uint32_t *ndev, gp_limits *lim) {
  const gpurt_runtime_create_args a = *ap;
  gpurt_error *e;

  rt_config c = {-1, -1, -1, -1, -1, -1, -1, -1};
  for (size_t i = 0; i < sizeof runtime_envs / sizeof *runtime_envs; i++) {
    const char *name = runtime_envs[i][0];
    int64_t v = env_i64(name, runtime_opts[i].suffix);
    if (v == -2)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s=\"%s\" is not %s", name, getenv(name), runtime_envs[i][1]);
    *(int64_t *)(void *)((char *)&c + runtime_opts[i].off) = v;
  }
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
  rt->fail_alloc_nth = c.fail_alloc_nth > 0 ? c.fail_alloc_nth : 0;
  rt->fail_launch_nth = c.fail_launch_nth > 0 ? c.fail_launch_nth : 0;
  rt->refuse_replay_nth = c.refuse_replay_nth > 0 ? c.refuse_replay_nth : 0;
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
  if (a.log) {
    char msg[200];
    int n = snprintf(msg, sizeof msg, "mock: runtime with %u device(s) of %llu bytes, %u us delay per op, %d gemm threads",
                     rt->ndev, U(rt->memory), rt->delay_us, rt->gemm_threads);
    a.log(a.log_user, 1, msg, (uint64_t)n);
  }
  lim->max_threads = 1024;
  lim->max_block_z = 64;
  lim->max_grid[0] = 0x7fffffffu;
  lim->max_grid[1] = lim->max_grid[2] = 65535;
  lim->max_shared = MOCK_MAX_SHARED;
  *ctx = rt;
  *ndev = rt->ndev;
  return NULL;
}

static void m_close(void *ctx) { rt_free(ctx); }

static gpurt_error *m_device_check(void *ctx, uint32_t dev) {
  return mock_is_lost(ctx, dev) ? gp_err(GPURT_ERR_DEVICE_LOST, "injected fault") : NULL;
}

static gpurt_error *m_device_info(void *ctx, uint32_t d, gpurt_device_info *out) {
  mock_rt *rt = ctx;
  pthread_mutex_lock(&rt->mu);
  uint64_t used = rt->used[d];
  pthread_mutex_unlock(&rt->mu);
  fill_device_info(out, d, rt->memory, rt->memory - used);
  return NULL;
}

static gpurt_error *m_control(void *ctx, const char *k, uint64_t key_len, int64_t value, const gp_mem *buf) {
  mock_rt *rt = ctx;
  size_t kl = (size_t)key_len;
  int fa = key_is(k, kl, "fail_alloc_nth"), fl = key_is(k, kl, "fail_launch_nth");
  int fr = key_is(k, kl, "refuse_replay_nth");
  if (fa || fl || fr) {
    if (value < 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: %.*s=%lld is negative (0 turns it off)",
                    (int)kl, k, (long long)value);
    pthread_mutex_lock(&rt->mu);
    if (fa) rt->fail_alloc_nth = value;
    else if (fl) rt->fail_launch_nth = value;
    else rt->refuse_replay_nth = value;
    pthread_mutex_unlock(&rt->mu);
    return NULL;
  }
  if (key_is(k, kl, "lose_device")) {
    if (value < 0 || (uint64_t)value >= rt->ndev)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: lose_device=%lld but the runtime has %u devices",
                    (long long)value, rt->ndev);
    atomic_store(&rt->lost[value], 1);
    return NULL;
  }
  if (key_is(k, kl, "debug_corrupt_guard")) {
    /* Test hook: value is a buffer handle (the engine resolved it); one
     * byte past its end is overwritten so that buffer_free must report
     * the guard. */
    mock_corrupt_guard(buf);
    return NULL;
  }
  if (key_is(k, kl, "delay_us")) {
    if (value < 0 || value > 1000000)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: delay_us=%lld is outside 0..1000000",
                    (long long)value);
    rt->delay_us = (unsigned)value;
    return NULL;
  }
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime_control: unknown key \"%.*s\" (the mock knows "
                "fail_alloc_nth, fail_launch_nth, refuse_replay_nth, lose_device, delay_us, debug_corrupt_guard)", (int)(kl > 200 ? 200 : kl), k);
}

/* ------------------------------------------------------------------ */
/* The backend table and the entry                                     */
/* ------------------------------------------------------------------ */

static const char *const buffer_keys[] = {"debug_corrupt_guard", NULL};

static const gp_backend mock_backend = {
    .name = "mock",
    .version = MOCK_VERSION,
    .abi_minor = GPURT_ABI_MINOR,
    .priority = 100,
    .buffer_keys = buffer_keys,
    .probe = m_probe,
    .open = m_open,
    .close = m_close,
    .device_info = m_device_info,
    .device_check = m_device_check,
    .control = m_control,
    .mem_alloc = mock_mem_alloc,
    .mem_free = mock_mem_free,
    .host_alloc = mock_host_alloc,
    .host_free = mock_host_free,
    .copy = mock_copy,
    .memset = mock_memset,
    .queue_create = mock_queue_create,
    .queue_destroy = mock_queue_destroy,
    .queue_sync = mock_queue_sync,
    .queue_query = mock_queue_query,
    .event_create = mock_event_create,
    .event_destroy = mock_event_destroy,
    .event_record = mock_event_record,
    .event_wait = mock_event_wait,
    .event_query = mock_event_query,
    .event_sync = mock_event_sync,
    .event_elapsed = mock_event_elapsed,
    .module_load = mock_module_load,
    .module_unload = mock_module_unload,
    .kernel_get = mock_kernel_get,
    .launch = mock_launch,
    .launch_many = mock_launch_many,
    .graph_begin = mock_graph_begin,
    .graph_end = mock_graph_end,
    .graph_launch = mock_graph_launch,
    .graph_destroy = mock_graph_destroy,
    .gemm_run = mock_gemm_run,
    .attention_create = mock_attention_create,
    .attention_destroy = mock_attention_destroy,
    .attention_plan = mock_attention_plan,
/* Every recordable op's run is mock_<slot> (GP_ZCALLS). */
#define MOCK_RUN_(name, NAME, minor, idx, atype, obj) .name = mock_##name,
    GP_ZCALLS(MOCK_RUN_)
#undef MOCK_RUN_
    .comm_unique_id = mock_comm_unique_id,
    .comm_create = mock_comm_create,
    .comm_destroy = mock_comm_destroy,
    .comm_abort = mock_comm_abort,
    .comm_query = mock_comm_query,
    .comm_run = mock_comm_run,
};

/* The entry: the engine's negotiation over the mock's table (no side
 * effects). */
GP_ENGINE_ENTRY(mock_backend)
