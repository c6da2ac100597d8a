/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine_api.c — the engine's top floor: the gpurt_api table built from
 * the backend's (a slot whose backend entries are unset is NULL, so the
 * core answers it UNSUPPORTED), negotiation, plugin info, probe, shutdown,
 * runtimes (create, destroy, stats, control) and devices.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_engine.h"

/* ---- plugin info, probe, shutdown ---------------------------------------------------- */

gpurt_error *gp_e_plugin_info(gpurt_plugin_info *out) {
  gpurt_error *e = gp_check_out(out, "plugin_info: out");
  if (e) return e;
  gpurt_plugin_info i;
  memset(&i, 0, sizeof i);
  gp_strlcpy(i.backend, sizeof i.backend, gp_eb->name);
  gp_strlcpy(i.version, sizeof i.version, gp_eb->version);
  i.priority = gp_eb->priority;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* The most devices a probe reports in detail (more are counted). */
#define GP_PROBE_MAX 64

/* The backend fills full-size, zeroed infos of the engine's; the engine
 * writes each into the caller's struct within its struct_size. */
gpurt_error *gp_e_probe(gpurt_probe_args *args) {
  gpurt_error *e = gp_check_out(args, "probe: args");
  if (e) return e;
  gpurt_probe_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "probe: args"))) return e;
  if (a.device_capacity > 0 && a.devices == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe: devices is NULL with device_capacity %u", a.device_capacity);
  gpurt_device_info devs[GP_PROBE_MAX];
  gpurt_device_info *caller = a.devices;
  uint32_t caller_cap = a.device_capacity;
  uint32_t cap = a.device_capacity < GP_PROBE_MAX ? a.device_capacity : GP_PROBE_MAX;
  memset(devs, 0, cap * sizeof devs[0]);
  for (uint32_t d = 0; d < cap; d++) devs[d].struct_size = sizeof devs[d];
  a.devices = devs;
  a.device_capacity = cap;
  if ((e = gp_eb->probe(&a))) return e;
  for (uint32_t d = 0; d < a.device_count && d < cap; d++) {
    if (caller[d].struct_size < sizeof(uint64_t))
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "probe: devices[%u] has struct_size below 8", d);
    gp_write_struct(&caller[d], &devs[d], sizeof devs[d]);
  }
  a.devices = caller;
  a.device_capacity = caller_cap;
  gp_write_struct(args, &a, sizeof a);
  return NULL;
}

gpurt_error *gp_e_shutdown(void) {
  uint32_t live = gp_rt_live();
  if (live > 0)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "shutdown: %u runtime(s) still alive; destroy them first", live);
  return NULL;
}

/* ---- runtimes ------------------------------------------------------------------------- */

static gp_handle_table *tables(gp_rt *rt, size_t *n) {
  *n = 10;
  return &rt->bufs; /* bufs .. comms are consecutive members */
}

static void rt_free(gp_rt *rt) {
  size_t n;
  gp_handle_table *t = tables(rt, &n);
  for (size_t i = 0; i < n; i++) gp_table_free(&t[i]);
  free(rt->lost);
  free(rt->lost_why);
  pthread_mutex_destroy(&rt->mu);
  free(rt);
}

gpurt_error *gp_e_runtime_create(const gpurt_runtime_create_args *args, gpurt_runtime **out) {
  GP_OUT_OR_RETURN(out, "runtime_create");
  gpurt_runtime_create_args a;
  memset(&a, 0, sizeof a);
  gpurt_error *e;
  if (args != NULL && (e = gp_read_struct(&a, sizeof a, args, "runtime_create: args"))) return e;
  gp_rt *rt = calloc(1, sizeof *rt);
  if (rt == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory");
  pthread_mutex_init(&rt->mu, NULL);
  static const uint32_t kinds[10] = {GP_KIND_BUFFER, GP_KIND_HOST_BUFFER, GP_KIND_STREAM,    GP_KIND_EVENT,
                                     GP_KIND_MODULE, GP_KIND_KERNEL,      GP_KIND_GEMM_PLAN, GP_KIND_GRAPH,
                                     GP_KIND_ATTENTION, GP_KIND_COMM};
  size_t nt;
  gp_handle_table *tt = tables(rt, &nt);
  for (size_t i = 0; i < nt; i++) gp_table_init(&tt[i], kinds[i], 0);
  if ((e = gp_eb->open(&a, &rt->ctx, &rt->ndev, &rt->lim))) {
    rt_free(rt);
    return e;
  }
  rt->lost = calloc(rt->ndev, sizeof *rt->lost);
  rt->lost_why = calloc(rt->ndev, sizeof *rt->lost_why);
  if (rt->lost == NULL || rt->lost_why == NULL) {
    gp_eb->close(rt->ctx);
    rt_free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory");
  }
  for (uint32_t d = 0; d < rt->ndev; d++) atomic_init(&rt->lost[d], 0);
  atomic_init(&rt->destroys, 0);
  gp_poll_lost(rt);
  uintptr_t h;
  int r = gp_rt_register(rt, &h);
  size_t n;
  gp_handle_table *t = tables(rt, &n);
  for (size_t i = 0; i < n; i++) t[i].owner = rt->serial & 0xffff; /* no handle made yet */
  if (r != 0) {
    gp_eb->close(rt->ctx);
    rt_free(rt);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: no memory for the runtime table");
  }
  *out = (gpurt_runtime *)h;
  return NULL;
}

gpurt_error *gp_e_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  GP_RT_OR_RETURN(h);
  gp_rt_unregister(h);
  /* Streams first: their work may still use the rest. */
  for (uint32_t i = 0; i < gp_table_cap(&rt->streams); i++) {
    gp_stream *s = gp_table_at(&rt->streams, i);
    if (s) gp_stream_unref(rt, s);
  }
  gpurt_error *first = NULL;
  for (uint32_t i = 0; i < gp_table_cap(&rt->bufs); i++) {
    gp_buf *b = gp_table_at(&rt->bufs, i);
    if (!b) continue;
    gpurt_error *be = gp_eb->mem_free(rt->ctx, &b->m);
    if (be) be = gp_err_wrap(be, "buffer %#llx (%llu bytes on device %u)", 0ull, U(b->m.size), b->m.dev);
    if (be && !first) first = be;
    else gp_error_destroy(be);
    free(b);
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->hosts); i++) {
    gp_host *hb = gp_table_at(&rt->hosts, i);
    if (hb) {
      gp_eb->host_free(rt->ctx, &hb->m);
      free(hb);
    }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->events); i++) {
    gp_event *ev = gp_table_at(&rt->events, i);
    if (ev) {
      gp_eb->event_destroy(rt->ctx, ev->ev);
      free(ev);
    }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->kernels); i++) free(gp_table_at(&rt->kernels, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->modules); i++) gp_module_free(rt, gp_table_at(&rt->modules, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->plans); i++) {
    gp_plan *p = gp_table_at(&rt->plans, i);
    if (p && gp_eb->gemm_plan_free) gp_eb->gemm_plan_free(rt->ctx, p->plan);
    free(p);
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->graphs); i++) gp_graph_free(rt, gp_table_at(&rt->graphs, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->attns); i++) gp_attn_free(rt, gp_table_at(&rt->attns, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->comms); i++) gp_comm_free(rt, gp_table_at(&rt->comms, i));
  gp_eb->close(rt->ctx);
  rt_free(rt);
  return first;
}

gpurt_error *gp_e_runtime_stats(gpurt_runtime *h, gpurt_runtime_stats *out) {
  GP_RT_OR_RETURN(h);
  gpurt_runtime_stats s;
  memset(&s, 0, sizeof s);
  pthread_mutex_lock(&rt->mu);
  s.live_buffers = rt->bufs.live;
  s.live_host_buffers = rt->hosts.live;
  s.live_streams = rt->streams.live;
  s.live_events = rt->events.live;
  s.live_modules = rt->modules.live;
  s.live_plans = rt->plans.live + rt->attns.live;
  s.device_bytes = rt->device_bytes;
  s.host_bytes = rt->host_bytes;
  pthread_mutex_unlock(&rt->mu);
  return gp_stats_write(out, &s);
}

gpurt_error *gp_e_runtime_control(gpurt_runtime *h, const gpurt_control_args *args) {
  GP_RT_OR_RETURN(h);
  gpurt_control_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "runtime_control: args"))) return e;
  if (a.key == NULL && a.key_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: key is NULL with key_len %llu", U(a.key_len));
  const char *k = a.key ? a.key : "";
  size_t kl = (size_t)a.key_len;
  if (gp_eb->control == NULL)
    return gp_err(GPURT_ERR_UNSUPPORTED, "runtime_control: unknown key \"%.*s\"", (int)(kl > 200 ? 200 : kl), k);
  gp_mem m, *buf = NULL;
  for (const char *const *bk = gp_eb->buffer_keys; bk && *bk; bk++) {
    if (strlen(*bk) != kl || memcmp(*bk, k, kl) != 0) continue;
    gp_buf *b;
    if ((e = gp_buf_get(rt, (gpurt_buffer *)(uintptr_t)a.value, &b)))
      return gp_err_wrap(e, "runtime_control: %.*s", (int)kl, k);
    gp_mem_at(b, 0, &m);
    buf = &m;
  }
  e = gp_eb->control(rt->ctx, k, a.key_len, a.value, buf);
  gp_poll_lost(rt);
  return e;
}

/* ---- devices -------------------------------------------------------------------------- */

gpurt_error *gp_e_device_count(gpurt_runtime *h, uint32_t *out) {
  GP_RT_OR_RETURN(h);
  if (!out) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device_count: out is NULL");
  *out = rt->ndev;
  return NULL;
}

gpurt_error *gp_e_device_info(gpurt_runtime *h, uint32_t d, gpurt_device_info *out) {
  GP_RT_OR_RETURN(h);
  if ((e = gp_check_dev(rt, d, "device_info"))) return e;
  if ((e = gp_check_out(out, "device_info: out"))) return e;
  gpurt_device_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  if ((e = gp_eb->device_info(rt->ctx, d, &i))) return e;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

gpurt_error *gp_e_device_synchronize(gpurt_runtime *h, uint32_t d) {
  GP_RT_OR_RETURN(h);
  if (d >= rt->ndev) return gp_check_dev(rt, d, "device_synchronize");
  if ((e = gp_drain_device(rt, d))) return e;
  return gp_after_wait(rt, "device_synchronize", d);
}

/* ---- the table and negotiation ------------------------------------------------------------ */

/* error_get and error_destroy are csrc's (gp_error.c). */
#define gp_e_error_get gp_error_get
#define gp_e_error_destroy gp_error_destroy

#define SLOT_(name, minor, ret, params) .name = gp_e_##name,
static const gpurt_api full_api = {
    .struct_size = sizeof(gpurt_api),
    .abi_major = GPURT_ABI_MAJOR,
    .abi_minor = GPURT_ABI_MINOR,
    GP_ZSLOTS(SLOT_)
};
#undef SLOT_

static gpurt_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static gpurt_error *api_err;

/* The table for the backend: slots of minors it does not implement, or
 * whose entries it leaves unset, are NULL (the core then answers them
 * GPURT_ERR_UNSUPPORTED). */
static int before(uint32_t minor, uint32_t since) { return minor < since; }

static void build_api(void) {
  api_err = gp_backend_check(gp_eb);
  api = full_api;
  const gp_backend *b = gp_eb;
  api.abi_minor = b->abi_minor;
  /* Each slot from its minor on; a recordable op while its run is set. */
#define GATE_(name, minor, ret, params) if (before(b->abi_minor, minor)) api.name = NULL;
  GP_ZSLOTS(GATE_)
#undef GATE_
#define RUN_GATE_(name, NAME, minor, idx, atype, obj) if (!b->name) api.name = NULL;
  GP_ZCALLS(RUN_GATE_)
#undef RUN_GATE_
  /* The families whose slots share one backend entry. */
  if (!b->gemm_run) api.gemm_plan_create = NULL, api.gemm_plan_destroy = NULL, api.gemm_run = NULL;
  if (!b->graph_begin)
    api.graph_create = NULL, api.graph_launch = NULL, api.graph_update = NULL, api.graph_destroy = NULL;
  if (!b->attention_run)
    api.attention_create = NULL, api.attention_destroy = NULL, api.attention_plan = NULL, api.attention_run = NULL;
  if (!b->comm_create)
    api.comm_unique_id = NULL, api.comm_create = NULL, api.comm_destroy = NULL, api.comm_abort = NULL,
    api.comm_query = NULL, api.comm_run = NULL;
}

int32_t gp_engine_negotiate(gpurt_negotiate_args *args, const gp_backend *b) {
  gp_eb = b;
  pthread_once(&api_once, build_api);
  int32_t rc = gp_negotiate(args, &api);
  if (rc != GPURT_OK || api_err == NULL) return rc;
  /* A backend table that breaks its promises is a bug of the plugin: the
   * negotiation fails naming the entry (the slot would crash when called). */
  args->api = NULL;
  if (args->struct_size >= offsetof(gpurt_negotiate_args, message) + sizeof args->message) {
    gpurt_error_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    gp_error_get(api_err, &i);
    snprintf(args->message, sizeof args->message, "%s: negotiation: %.*s", gp_plugin_prefix,
             (int)(i.message_len - (strlen(gp_plugin_prefix) + 2)), i.message + strlen(gp_plugin_prefix) + 2);
  }
  return GPURT_ERR_INTERNAL;
}
