/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mock plugin: a real CPU implementation of every function of gpurt.h,
 * the reference the GPU backends are compared against.
 *
 *  - Device memory is its own allocation (copies are required), with guard
 *    bytes before and after, checked on free, and poison (0xDB) on free.
 *  - Every stream is a worker thread with a FIFO of operations; workers
 *    really run later (GPURT_MOCK_DELAY_US per operation, default 50), so a
 *    missing synchronisation shows up as a wrong result.
 *  - Handles are generational (gp_handle_table): freed, foreign or made-up
 *    handles are errors, never crashes.
 *  - Fault injection: runtime_control or GPURT_MOCK_FAULTS
 *    ("fail_alloc_nth=3,fail_launch_nth=2,lose_device=0").
 *
 * Locking: the global mutex guards the runtime table; each runtime's `mu`
 * guards its handle tables, counters and fault settings; each stream's `mu`
 * guards its queue; the runtime's `ev_mu` guards event records. Locks are
 * never nested except rt->mu -> (nothing) and s->mu -> (nothing).
 */
#if !defined(_GNU_SOURCE) && !defined(__APPLE__)
#define _GNU_SOURCE /* clock_gettime, nanosleep, posix_memalign */
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gp_common.h"

const char gp_plugin_prefix[] = "mock";

#define MOCK_VERSION "1.2.0"
#define MOCK_DEFAULT_MEMORY (16ull << 30)
#define MOCK_MAX_DEVICES 64u
#define MOCK_GUARD 256u
#define MOCK_GUARD_BYTE 0xA5
#define MOCK_POISON 0xDB
#define MOCK_FRESH 0xCD
#define MOCK_MAX_SHARED (48u * 1024u)
#define MOCK_DEFAULT_DELAY_US 50u

/* ------------------------------------------------------------------ */
/* Objects                                                             */
/* ------------------------------------------------------------------ */

typedef struct mock_buf {
  uint32_t dev;
  uint64_t size;
  unsigned char *raw; /* MOCK_GUARD | size | MOCK_GUARD */
  unsigned char *data;
} mock_buf;

typedef struct mock_host {
  uint64_t size;
  uint64_t alloc_size;
  unsigned char *ptr;
} mock_host;

/* One recording of an event; refcounted (event, queued ops). */
typedef struct ev_rec {
  int refs;
  int done;
  uint64_t ns; /* CLOCK_MONOTONIC at completion */
} ev_rec;

typedef struct mock_event {
  uint32_t dev;
  uint32_t flags;
  ev_rec *latest; /* guarded by rt->ev_mu */
} mock_event;

typedef struct mock_module {
  uint32_t dev;
  char name[64];
  uintptr_t *kernels; /* one cached handle per built-in, 0 when none */
} mock_module;

typedef struct mock_kernel {
  uint32_t dev;
  const gp_builtin_kernel *k;
} mock_kernel;

typedef struct mock_plan {
  uint32_t dev;
  gpurt_gemm_desc desc;
} mock_plan;

enum { OP_COPY, OP_MEMSET, OP_LAUNCH, OP_RECORD, OP_WAIT, OP_GEMM };

typedef struct mock_op {
  struct mock_op *next;
  int kind;
  int sync;     /* a caller waits for `finished`; it frees the op */
  int finished;
  union {
    struct { void *dst; const void *src; uint64_t size; } copy;
    struct { unsigned char *dst; uint64_t size; uint32_t value, es; } fill;
    gp_launch_exec launch;
    ev_rec *rec;
    gp_gemm_exec *gemm;
  } u;
} mock_op;

typedef struct mock_rt mock_rt;

typedef struct mock_stream {
  mock_rt *rt;
  uint32_t dev;
  int refs; /* guarded by rt->mu: the table's and drainers' */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* the worker waits for work */
  pthread_cond_t done_cv; /* callers wait for progress */
  mock_op *head, *tail;
  uint64_t pending; /* queued or running */
  int stop;
  pthread_t thread;
} mock_stream;

struct mock_rt {
  uint32_t serial;
  uint32_t ndev;
  uint64_t memory; /* per device */
  unsigned delay_us;
  int gemm_threads;
  gpurt_log_fn log;
  void *log_user;

  pthread_mutex_t mu;
  gp_handle_table bufs, hosts, streams, events, modules, kernels, plans;
  uint64_t *used; /* device bytes per device */
  uint64_t host_bytes;
  int64_t fail_alloc_nth, fail_launch_nth;
  atomic_int *lost; /* per device, sticky */

  pthread_mutex_t ev_mu;
  pthread_cond_t ev_cv;
};

/* ------------------------------------------------------------------ */
/* Runtimes (a process-wide table)                                     */
/* ------------------------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gp_handle_table g_rts;
static int g_rts_init;
static uint32_t g_serial;

static gpurt_error *get_rt(gpurt_runtime *h, mock_rt **out) {
  void *o = NULL;
  int st;
  pthread_mutex_lock(&g_mu);
  if (h == NULL) st = GP_HANDLE_NULL;
  else if (!g_rts_init) st = ((uintptr_t)h >> 56) == GP_KIND_RUNTIME ? GP_HANDLE_STALE : GP_HANDLE_WRONG_KIND;
  else st = gp_table_lookup(&g_rts, (uintptr_t)h, &o);
  pthread_mutex_unlock(&g_mu);
  if (st == GP_HANDLE_FOREIGN) st = GP_HANDLE_STALE; /* runtimes have no owner */
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_RUNTIME, (uintptr_t)h);
  *out = o;
  return NULL;
}

/* Looks a handle up in one of the runtime's tables. */
static gpurt_error *lookup(mock_rt *rt, gp_handle_table *t, const void *h, void **out) {
  pthread_mutex_lock(&rt->mu);
  int st = gp_table_lookup(t, (uintptr_t)h, out);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, t->kind, (uintptr_t)h);
  return NULL;
}

#define H(p) ((unsigned long long)(uintptr_t)(p))
#define U(x) ((unsigned long long)(x))

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int is_lost(mock_rt *rt, uint32_t dev) {
  return dev < rt->ndev && atomic_load(&rt->lost[dev]) != 0;
}

static gpurt_error *lost_err(const char *what, uint32_t dev) {
  return gp_err(GPURT_ERR_DEVICE_LOST, "%s: device %u is lost (injected fault); it refuses all work",
                what, dev);
}

/* A device index the caller named: exists and is not lost. */
static gpurt_error *check_dev(mock_rt *rt, uint32_t dev, const char *what) {
  if (dev >= rt->ndev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: device %u does not exist (the runtime has %u)",
                  what, dev, rt->ndev);
  if (is_lost(rt, dev)) return lost_err(what, dev);
  return NULL;
}

/* Range check: [off, off+size) inside [0, total). */
static int in_range(uint64_t total, uint64_t off, uint64_t size) {
  return off <= total && size <= total - off;
}

/* ------------------------------------------------------------------ */
/* Event records                                                       */
/* ------------------------------------------------------------------ */

static void rec_release(mock_rt *rt, ev_rec *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&rt->ev_mu);
  int left = --r->refs;
  pthread_mutex_unlock(&rt->ev_mu);
  if (left == 0) free(r);
}

static void rec_complete(mock_rt *rt, ev_rec *r) {
  pthread_mutex_lock(&rt->ev_mu);
  r->ns = now_ns();
  r->done = 1;
  pthread_cond_broadcast(&rt->ev_cv);
  pthread_mutex_unlock(&rt->ev_mu);
}

static void rec_wait(mock_rt *rt, ev_rec *r) {
  pthread_mutex_lock(&rt->ev_mu);
  while (!r->done) pthread_cond_wait(&rt->ev_cv, &rt->ev_mu);
  pthread_mutex_unlock(&rt->ev_mu);
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */
/* ------------------------------------------------------------------ */

static void op_free(mock_rt *rt, mock_op *op) {
  if (op->kind == OP_RECORD || op->kind == OP_WAIT) rec_release(rt, op->u.rec);
  if (op->kind == OP_GEMM) free(op->u.gemm);
  free(op);
}

static void op_run(mock_stream *s, mock_op *op) {
  mock_rt *rt = s->rt;
  int lost = is_lost(rt, s->dev);
  switch (op->kind) {
    case OP_COPY:
      if (!lost && op->u.copy.size) memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.size);
      break;
    case OP_MEMSET: {
      if (lost) break;
      unsigned char *d = op->u.fill.dst;
      uint32_t es = op->u.fill.es, v = op->u.fill.value;
      if (es == 1) { memset(d, (int)(v & 0xff), op->u.fill.size); break; }
      unsigned char pat[4];
      memcpy(pat, &v, 4); /* little-endian: the low element_size bytes */
      for (uint64_t i = 0; i < op->u.fill.size; i += es) memcpy(d + i, pat, es);
      break;
    }
    case OP_LAUNCH:
      if (!lost) gp_launch_run(&op->u.launch);
      break;
    case OP_RECORD:
      rec_complete(rt, op->u.rec);
      break;
    case OP_WAIT:
      rec_wait(rt, op->u.rec);
      break;
    case OP_GEMM:
      if (!lost) gp_gemm_run(op->u.gemm);
      break;
  }
}

static void *stream_main(void *arg) {
  mock_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work_cv, &s->mu);
    if (s->head == NULL) {
      pthread_mutex_unlock(&s->mu);
      break;
    }
    mock_op *op = s->head;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);

    /* Run later than the caller expects: ordering bugs show up. */
    unsigned d = s->rt->delay_us;
    if (d) usleep(d);
    else sched_yield();
    op_run(s, op);

    /* A sync op belongs to its waiter once `finished` is set. */
    int sync = op->sync;
    pthread_mutex_lock(&s->mu);
    s->pending--;
    if (sync) op->finished = 1;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mu);
    if (!sync) op_free(s->rt, op);
  }
  return NULL;
}

/* Appends n ops (n >= 1), in order, under one hold of s->mu: nothing
 * another thread enqueues can land between them. */
static void enqueue_many(mock_stream *s, mock_op *const *ops, uint64_t n) {
  for (uint64_t i = 0; i + 1 < n; i++) ops[i]->next = ops[i + 1];
  ops[n - 1]->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = ops[0];
  else s->head = ops[0];
  s->tail = ops[n - 1];
  s->pending += n;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
}

static void enqueue(mock_stream *s, mock_op *op) { enqueue_many(s, &op, 1); }

/* Enqueues op and, when sync, waits for it and frees it. */
static void submit(mock_stream *s, mock_op *op) {
  if (!op->sync) {
    enqueue(s, op);
    return;
  }
  enqueue(s, op);
  pthread_mutex_lock(&s->mu);
  while (!op->finished) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  op_free(s->rt, op);
}

static void stream_drain(mock_stream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->pending > 0) pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static void stream_unref(mock_rt *rt, mock_stream *s) {
  pthread_mutex_lock(&rt->mu);
  int left = --s->refs;
  pthread_mutex_unlock(&rt->mu);
  if (left == 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
  }
}

/* Waits until every stream of the runtime on dev (UINT32_MAX: all) drained. */
static gpurt_error *drain_device(mock_rt *rt, uint32_t dev) {
  pthread_mutex_lock(&rt->mu);
  uint32_t cap = gp_table_cap(&rt->streams), n = 0;
  mock_stream **list = cap ? malloc(cap * sizeof *list) : NULL;
  if (cap && list == NULL) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "synchronize: no memory");
  }
  for (uint32_t i = 0; i < cap; i++) {
    mock_stream *s = gp_table_at(&rt->streams, i);
    if (s && (dev == UINT32_MAX || s->dev == dev)) {
      s->refs++;
      list[n++] = s;
    }
  }
  pthread_mutex_unlock(&rt->mu);
  for (uint32_t i = 0; i < n; i++) {
    stream_drain(list[i]);
    stream_unref(rt, list[i]);
  }
  free(list);
  return NULL;
}

/* Stops the worker after it drained, joins it and drops the table's ref. */
static void stream_finish(mock_rt *rt, mock_stream *s) {
  stream_drain(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  stream_unref(rt, s);
}

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
  pthread_mutex_lock(&g_mu);
  if (g_rts_init && g_rts.live > 0) {
    uint32_t live = g_rts.live;
    pthread_mutex_unlock(&g_mu);
    return gp_err(GPURT_ERR_FAILED_PRECONDITION,
                  "shutdown: %u runtime(s) still alive; destroy them first", live);
  }
  if (g_rts_init) {
    gp_table_free(&g_rts);
    g_rts_init = 0;
  }
  pthread_mutex_unlock(&g_mu);
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

  pthread_mutex_lock(&g_mu);
  if (!g_rts_init) {
    gp_table_init(&g_rts, GP_KIND_RUNTIME, 0);
    g_rts_init = 1;
  }
  g_serial = (g_serial + 1) & 0xffff;
  if (g_serial == 0) g_serial = 1;
  rt->serial = g_serial;
  uintptr_t h;
  int r = gp_table_insert(&g_rts, rt, &h);
  pthread_mutex_unlock(&g_mu);
  gp_table_init(&rt->bufs, GP_KIND_BUFFER, rt->serial);
  gp_table_init(&rt->hosts, GP_KIND_HOST_BUFFER, rt->serial);
  gp_table_init(&rt->streams, GP_KIND_STREAM, rt->serial);
  gp_table_init(&rt->events, GP_KIND_EVENT, rt->serial);
  gp_table_init(&rt->modules, GP_KIND_MODULE, rt->serial);
  gp_table_init(&rt->kernels, GP_KIND_KERNEL, rt->serial);
  gp_table_init(&rt->plans, GP_KIND_GEMM_PLAN, rt->serial);
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

/* Frees a buffer's memory: guards checked, poison written. Returns an
 * error naming the buffer when a guard was overwritten. */
static gpurt_error *buf_release(mock_buf *b, uintptr_t h) {
  const char *where = NULL;
  uint64_t at = 0;
  for (uint32_t i = 0; i < MOCK_GUARD; i++)
    if (b->raw[i] != MOCK_GUARD_BYTE) { where = "before its start"; at = MOCK_GUARD - i; break; }
  if (!where)
    for (uint32_t i = 0; i < MOCK_GUARD; i++)
      if (b->data[b->size + i] != MOCK_GUARD_BYTE) { where = "after its end"; at = i; break; }
  gpurt_error *e = NULL;
  if (where)
    e = gp_err(GPURT_ERR_OUT_OF_RANGE,
               "buffer %#llx (%llu bytes on device %u): guard bytes %s were overwritten "
               "(an out-of-range write, %llu bytes %s); the buffer was freed",
               H(h), U(b->size), b->dev, where, U(at), where[0] == 'b' ? "before" : "past the end");
  memset(b->data, MOCK_POISON, b->size);
  free(b->raw);
  free(b);
  return e;
}

static gpurt_error *m_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&g_mu);
  gp_table_remove(&g_rts, (uintptr_t)h);
  pthread_mutex_unlock(&g_mu);

  /* Streams first: they may still use buffers. */
  for (uint32_t i = 0; i < gp_table_cap(&rt->streams); i++) {
    mock_stream *s = gp_table_at(&rt->streams, i);
    if (s) stream_finish(rt, s);
  }
  gpurt_error *first = NULL;
  for (uint32_t i = 0; i < gp_table_cap(&rt->bufs); i++) {
    mock_buf *b = gp_table_at(&rt->bufs, i);
    if (!b) continue;
    gpurt_error *be = buf_release(b, 0);
    if (be && !first) first = be;
    else gp_error_destroy(be);
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->hosts); i++) {
    mock_host *hb = gp_table_at(&rt->hosts, i);
    if (hb) { free(hb->ptr); free(hb); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->events); i++) {
    mock_event *ev = gp_table_at(&rt->events, i);
    if (ev) { rec_release(rt, ev->latest); free(ev); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->modules); i++) {
    mock_module *m = gp_table_at(&rt->modules, i);
    if (m) { free(m->kernels); free(m); }
  }
  for (uint32_t i = 0; i < gp_table_cap(&rt->kernels); i++) free(gp_table_at(&rt->kernels, i));
  for (uint32_t i = 0; i < gp_table_cap(&rt->plans); i++) free(gp_table_at(&rt->plans, i));
  rt_free(rt);
  return first;
}

static gpurt_error *m_runtime_stats(gpurt_runtime *h, gpurt_runtime_stats *out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if ((e = gp_check_out(out, "runtime_stats: out"))) return e;
  gpurt_runtime_stats s;
  memset(&s, 0, sizeof s);
  pthread_mutex_lock(&rt->mu);
  s.live_buffers = rt->bufs.live;
  s.live_host_buffers = rt->hosts.live;
  s.live_streams = rt->streams.live;
  s.live_events = rt->events.live;
  s.live_modules = rt->modules.live;
  s.live_plans = rt->plans.live;
  for (uint32_t d = 0; d < rt->ndev; d++) s.device_bytes += rt->used[d];
  s.host_bytes = rt->host_bytes;
  pthread_mutex_unlock(&rt->mu);
  gp_write_struct(out, &s, sizeof s);
  return NULL;
}

static gpurt_error *m_runtime_control(gpurt_runtime *h, const gpurt_control_args *args) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
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
    if ((e = lookup(rt, &rt->bufs, (const void *)(uintptr_t)a.value, (void **)&b)))
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

/* Consumes one allocation from the fault counter; 1 when it must fail. */
static int alloc_fault_locked(mock_rt *rt) {
  if (rt->fail_alloc_nth <= 0) return 0;
  return --rt->fail_alloc_nth == 0;
}

/* ------------------------------------------------------------------ */
/* Devices and memory                                                  */
/* ------------------------------------------------------------------ */

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
  if ((e = check_dev(rt, d, "device_info"))) return e;
  if ((e = gp_check_out(out, "device_info: out"))) return e;
  pthread_mutex_lock(&rt->mu);
  uint64_t used = rt->used[d];
  pthread_mutex_unlock(&rt->mu);
  fill_device_info(out, d, rt->memory, rt->memory - used);
  return NULL;
}

static gpurt_error *m_device_synchronize(gpurt_runtime *h, uint32_t d) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (d >= rt->ndev) return check_dev(rt, d, "device_synchronize");
  if ((e = drain_device(rt, d))) return e;
  if (is_lost(rt, d)) return lost_err("device_synchronize", d);
  return NULL;
}

static gpurt_error *m_buffer_alloc(gpurt_runtime *h, uint32_t d, uint64_t size, gpurt_buffer **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: out is NULL");
  *out = NULL;
  if ((e = check_dev(rt, d, "buffer_alloc"))) return e;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "buffer_alloc: size is 0 (must be > 0)");
  pthread_mutex_lock(&rt->mu);
  if (alloc_fault_locked(rt)) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", d, U(size));
  }
  uint64_t free_b = rt->memory - rt->used[d];
  if (size > free_b) {
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: asked for %llu bytes, "
                  "%llu bytes free of %llu", d, U(size), U(free_b), U(rt->memory));
  }
  rt->used[d] += size; /* reserve while allocating */
  pthread_mutex_unlock(&rt->mu);

  mock_buf *b = calloc(1, sizeof *b);
  void *raw = NULL;
  if (b == NULL || size > SIZE_MAX - 2 * MOCK_GUARD ||
      posix_memalign(&raw, 256, (size_t)size + 2 * MOCK_GUARD) != 0) {
    free(b);
    pthread_mutex_lock(&rt->mu);
    rt->used[d] -= size;
    pthread_mutex_unlock(&rt->mu);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: out of memory on device %u: the host could not "
                  "back %llu bytes (malloc failed)", d, U(size));
  }
  b->dev = d;
  b->size = size;
  b->raw = raw;
  b->data = b->raw + MOCK_GUARD;
  memset(b->raw, MOCK_GUARD_BYTE, MOCK_GUARD);
  memset(b->data, MOCK_FRESH, size);
  memset(b->data + size, MOCK_GUARD_BYTE, MOCK_GUARD);
  uintptr_t hb;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->bufs, b, &hb);
  if (r != 0) rt->used[d] -= size;
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(raw);
    free(b);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "buffer_alloc: too many buffers");
  }
  *out = (gpurt_buffer *)hb;
  return NULL;
}

static gpurt_error *m_buffer_free(gpurt_runtime *h, gpurt_buffer *buf) {
  if (buf == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_buf *b;
  if ((e = lookup(rt, &rt->bufs, buf, (void **)&b))) return e;
  /* Like cudaFree: work already queued on the device may still use it. */
  if ((e = drain_device(rt, b->dev))) return e;
  pthread_mutex_lock(&rt->mu);
  b = gp_table_remove(&rt->bufs, (uintptr_t)buf);
  if (b) rt->used[b->dev] -= b->size;
  pthread_mutex_unlock(&rt->mu);
  if (b == NULL) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_BUFFER, (uintptr_t)buf);
  return buf_release(b, (uintptr_t)buf);
}

static gpurt_error *m_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out, void **out_ptr) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL || out_ptr == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: out or out_ptr is NULL");
  *out = NULL;
  *out_ptr = NULL;
  if (size == 0) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "host_alloc: size is 0 (must be > 0)");
  pthread_mutex_lock(&rt->mu);
  int fault = alloc_fault_locked(rt);
  pthread_mutex_unlock(&rt->mu);
  if (fault)
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory allocating %llu bytes "
                  "(injected fault: fail_alloc_nth)", U(size));
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  uint64_t asz = (size + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
  mock_host *hb = calloc(1, sizeof *hb);
  void *p = NULL;
  if (hb == NULL || asz < size || asz > SIZE_MAX || posix_memalign(&p, (size_t)page, (size_t)asz) != 0) {
    free(hb);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: out of pinned host memory: asked for %llu bytes "
                  "(malloc failed)", U(size));
  }
  memset(p, 0, (size_t)asz);
  hb->size = size;
  hb->alloc_size = asz;
  hb->ptr = p;
  uintptr_t hh;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->hosts, hb, &hh);
  if (r == 0) rt->host_bytes += size;
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(p);
    free(hb);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "host_alloc: too many host buffers");
  }
  *out = (gpurt_host_buffer *)hh;
  *out_ptr = p;
  return NULL;
}

static gpurt_error *m_host_free(gpurt_runtime *h, gpurt_host_buffer *buf) {
  if (buf == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_host *hb;
  if ((e = lookup(rt, &rt->hosts, buf, (void **)&hb))) return e;
  if ((e = drain_device(rt, UINT32_MAX))) return e;
  pthread_mutex_lock(&rt->mu);
  hb = gp_table_remove(&rt->hosts, (uintptr_t)buf);
  if (hb) rt->host_bytes -= hb->size;
  pthread_mutex_unlock(&rt->mu);
  if (hb == NULL) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_HOST_BUFFER, (uintptr_t)buf);
  memset(hb->ptr, MOCK_POISON, (size_t)hb->alloc_size);
  free(hb->ptr);
  free(hb);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Copy and memset                                                     */
/* ------------------------------------------------------------------ */

typedef struct endpoint {
  int kind; /* 0 device, 1 pinned, 2 pageable */
  uint32_t dev;
  uintptr_t handle;
  unsigned char *p;
} endpoint;

static gpurt_error *resolve_endpoint(mock_rt *rt, const char *side, gpurt_buffer *buf,
                                     gpurt_host_buffer *host, const void *ptr, uint64_t off,
                                     uint64_t size, endpoint *ep) {
  int n = (buf != NULL) + (host != NULL) + (ptr != NULL);
  if (n != 1)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: exactly one of %s_buffer, %s_host, %s_ptr must be set (%d are)",
                  side, side, side, n);
  gpurt_error *e;
  if (buf) {
    mock_buf *b;
    if ((e = lookup(rt, &rt->bufs, buf, (void **)&b))) return e;
    if (is_lost(rt, b->dev)) return lost_err("copy", b->dev);
    if (size && !in_range(b->size, off, size))
      return gp_err(GPURT_ERR_OUT_OF_RANGE, "copy: %s range is outside buffer %#llx: buffer size %llu, "
                    "offset %llu, size %llu", side, H(buf), U(b->size), U(off), U(size));
    ep->kind = 0;
    ep->dev = b->dev;
    ep->handle = (uintptr_t)buf;
    ep->p = b->data + (size ? off : 0);
  } else if (host) {
    mock_host *hb;
    if ((e = lookup(rt, &rt->hosts, host, (void **)&hb))) return e;
    if (size && !in_range(hb->size, off, size))
      return gp_err(GPURT_ERR_OUT_OF_RANGE, "copy: %s range is outside host buffer %#llx: buffer size %llu, "
                    "offset %llu, size %llu", side, H(host), U(hb->size), U(off), U(size));
    ep->kind = 1;
    ep->handle = (uintptr_t)host;
    ep->p = hb->ptr + (size ? off : 0);
  } else {
    if (off != 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: %s_offset is %llu with %s_ptr; offsets apply to "
                    "buffers only (advance the pointer instead)", side, U(off), side);
    ep->kind = 2;
    ep->p = (unsigned char *)(uintptr_t)ptr;
  }
  return NULL;
}

static gpurt_error *stream_matches(const char *what, const char *name, uintptr_t h, uint32_t bdev,
                                   uint32_t sdev) {
  if (bdev != sdev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: %s %#llx is on device %u but the stream is on device %u",
                  what, name, U(h), bdev, sdev);
  return NULL;
}

static gpurt_error *m_copy(gpurt_runtime *h, const gpurt_copy_args *args) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  gpurt_copy_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "copy: args"))) return e;
  if (a.flags & ~GPURT_COPY_SYNC)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: unknown flags %#x", a.flags & ~GPURT_COPY_SYNC);
  int sync = (a.flags & GPURT_COPY_SYNC) != 0;
  mock_stream *s = NULL;
  if (a.stream) {
    if ((e = lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
    if (is_lost(rt, s->dev)) return lost_err("copy", s->dev);
  } else if (!sync) {
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: an asynchronous copy needs a stream (stream is NULL "
                  "without GPURT_COPY_SYNC)");
  }
  endpoint src, dst;
  memset(&src, 0, sizeof src);
  memset(&dst, 0, sizeof dst);
  if ((e = resolve_endpoint(rt, "dst", a.dst_buffer, a.dst_host, a.dst_ptr, a.dst_offset, a.size, &dst))) return e;
  if ((e = resolve_endpoint(rt, "src", a.src_buffer, a.src_host, a.src_ptr, a.src_offset, a.size, &src))) return e;
  if (!sync && (src.kind == 2 || dst.kind == 2))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "copy: %s_ptr is pageable memory; an asynchronous copy takes "
                  "pinned host memory (a host buffer) or needs GPURT_COPY_SYNC", src.kind == 2 ? "src" : "dst");
  if (s) {
    if (dst.kind == 0 && (e = stream_matches("copy", "dst buffer", dst.handle, dst.dev, s->dev))) return e;
    if (src.kind == 0 && (e = stream_matches("copy", "src buffer", src.handle, src.dev, s->dev))) return e;
  }
  if (a.size == 0) return NULL;

  if (s) {
    mock_op *op = calloc(1, sizeof *op);
    if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "copy: no memory");
    op->kind = OP_COPY;
    op->sync = sync;
    op->u.copy.dst = dst.p;
    op->u.copy.src = src.p;
    op->u.copy.size = a.size;
    submit(s, op);
    if (sync && is_lost(rt, s->dev)) return lost_err("copy", s->dev);
    return NULL;
  }
  /* Synchronous on the default ordering: after all work of the devices. */
  if (dst.kind != 0 && src.kind != 0) e = drain_device(rt, UINT32_MAX);
  else {
    if (dst.kind == 0) e = drain_device(rt, dst.dev);
    if (!e && src.kind == 0 && !(dst.kind == 0 && dst.dev == src.dev)) e = drain_device(rt, src.dev);
  }
  if (e) return e;
  memmove(dst.p, src.p, (size_t)a.size);
  return NULL;
}

static gpurt_error *m_memset(gpurt_runtime *h, const gpurt_memset_args *args) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  gpurt_memset_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "memset: args"))) return e;
  mock_stream *s = NULL;
  if (a.stream && (e = lookup(rt, &rt->streams, a.stream, (void **)&s))) return e;
  mock_buf *b;
  if ((e = lookup(rt, &rt->bufs, a.buffer, (void **)&b))) return e;
  if (is_lost(rt, b->dev)) return lost_err("memset", b->dev);
  if (s && (e = stream_matches("memset", "buffer", (uintptr_t)a.buffer, b->dev, s->dev))) return e;
  uint32_t es = a.element_size;
  if (es != 1 && es != 2 && es != 4)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: element_size is %u (must be 1, 2 or 4)", es);
  if (a.offset % es || a.size % es)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: offset %llu and size %llu must be multiples of "
                  "element_size %u", U(a.offset), U(a.size), es);
  if (es < 4 && (a.value >> (8 * es)) != 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "memset: value %#x does not fit in %u byte(s)", a.value, es);
  if (a.size == 0) return NULL;
  if (!in_range(b->size, a.offset, a.size))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "memset: range is outside buffer %#llx: buffer size %llu, "
                  "offset %llu, size %llu", H(a.buffer), U(b->size), U(a.offset), U(a.size));
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "memset: no memory");
  op->kind = OP_MEMSET;
  op->u.fill.dst = b->data + a.offset;
  op->u.fill.size = a.size;
  op->u.fill.value = a.value;
  op->u.fill.es = es;
  if (s) {
    submit(s, op);
    return NULL;
  }
  if ((e = drain_device(rt, b->dev))) { free(op); return e; }
  mock_stream tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.rt = rt;
  tmp.dev = b->dev;
  op_run(&tmp, op);
  free(op);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Streams and events                                                  */
/* ------------------------------------------------------------------ */

static gpurt_error *m_stream_create(gpurt_runtime *h, uint32_t d, gpurt_stream **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "stream_create: out is NULL");
  *out = NULL;
  if ((e = check_dev(rt, d, "stream_create"))) return e;
  mock_stream *s = calloc(1, sizeof *s);
  if (!s) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: no memory");
  s->rt = rt;
  s->dev = d;
  s->refs = 1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  int r = pthread_create(&s->thread, NULL, stream_main, s);
  if (r != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    free(s);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: cannot start the worker thread: %s", strerror(r));
  }
  uintptr_t hs;
  pthread_mutex_lock(&rt->mu);
  r = gp_table_insert(&rt->streams, s, &hs);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    stream_finish(rt, s);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_create: too many streams");
  }
  *out = (gpurt_stream *)hs;
  return NULL;
}

static gpurt_error *m_stream_destroy(gpurt_runtime *h, gpurt_stream *sh) {
  if (sh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->streams, (uintptr_t)sh, &o);
  if (st == GP_HANDLE_OK) gp_table_remove(&rt->streams, (uintptr_t)sh);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_STREAM, (uintptr_t)sh);
  stream_finish(rt, o);
  return NULL;
}

static gpurt_error *m_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  stream_drain(s);
  if (is_lost(rt, s->dev)) return lost_err("stream_synchronize", s->dev);
  return NULL;
}

static gpurt_error *m_stream_query(gpurt_runtime *h, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (is_lost(rt, s->dev)) return lost_err("stream_query", s->dev);
  pthread_mutex_lock(&s->mu);
  uint64_t p = s->pending;
  pthread_mutex_unlock(&s->mu);
  if (p) return gp_err(GPURT_ERR_NOT_READY, "stream %#llx has %llu operation(s) pending", H(sh), U(p));
  return NULL;
}

static gpurt_error *m_event_create(gpurt_runtime *h, uint32_t d, uint32_t flags, gpurt_event **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: out is NULL");
  *out = NULL;
  if ((e = check_dev(rt, d, "event_create"))) return e;
  if (flags & ~GPURT_EVENT_TIMING)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_create: unknown flags %#x", flags & ~GPURT_EVENT_TIMING);
  mock_event *ev = calloc(1, sizeof *ev);
  if (!ev) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: no memory");
  ev->dev = d;
  ev->flags = flags;
  uintptr_t he;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->events, ev, &he);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(ev);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_create: too many events");
  }
  *out = (gpurt_event *)he;
  return NULL;
}

static gpurt_error *m_event_destroy(gpurt_runtime *h, gpurt_event *eh) {
  if (eh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->events, (uintptr_t)eh, &o);
  if (st == GP_HANDLE_OK) gp_table_remove(&rt->events, (uintptr_t)eh);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_EVENT, (uintptr_t)eh);
  mock_event *ev = o;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  ev->latest = NULL;
  pthread_mutex_unlock(&rt->ev_mu);
  rec_release(rt, r);
  free(ev);
  return NULL;
}

static gpurt_error *m_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  mock_stream *s = NULL;
  if (sh && (e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (is_lost(rt, ev->dev)) return lost_err("event_record", ev->dev);
  if (s && s->dev != ev->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_record: event %#llx is on device %u but stream %#llx is "
                  "on device %u", H(eh), ev->dev, H(sh), s->dev);
  ev_rec *r = calloc(1, sizeof *r);
  mock_op *op = s ? calloc(1, sizeof *op) : NULL;
  if (!r || (s && !op)) {
    free(r);
    free(op);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "event_record: no memory");
  }
  r->refs = s ? 2 : 1;
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *old = ev->latest;
  ev->latest = r;
  pthread_mutex_unlock(&rt->ev_mu);
  rec_release(rt, old);
  if (s) {
    op->kind = OP_RECORD;
    op->u.rec = r;
    submit(s, op);
    return NULL;
  }
  /* NULL stream: the device's default ordering. */
  if ((e = drain_device(rt, ev->dev))) return e;
  rec_complete(rt, r);
  return NULL;
}

/* The event's latest record with a reference, or NULL (never recorded). */
static ev_rec *latest_ref(mock_rt *rt, mock_event *ev) {
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *r = ev->latest;
  if (r) r->refs++;
  pthread_mutex_unlock(&rt->ev_mu);
  return r;
}

static gpurt_error *m_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  mock_event *ev;
  if ((e = lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (is_lost(rt, s->dev)) return lost_err("stream_wait_event", s->dev);
  ev_rec *r = latest_ref(rt, ev);
  if (r == NULL) return NULL; /* never recorded: nothing to wait for */
  mock_op *op = calloc(1, sizeof *op);
  if (!op) {
    rec_release(rt, r);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "stream_wait_event: no memory");
  }
  op->kind = OP_WAIT;
  op->u.rec = r;
  submit(s, op);
  return NULL;
}

static gpurt_error *m_event_query(gpurt_runtime *h, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  if (is_lost(rt, ev->dev)) return lost_err("event_query", ev->dev);
  pthread_mutex_lock(&rt->ev_mu);
  int pending = ev->latest != NULL && !ev->latest->done;
  pthread_mutex_unlock(&rt->ev_mu);
  if (pending) return gp_err(GPURT_ERR_NOT_READY, "event %#llx has not completed yet", H(eh));
  return NULL;
}

static gpurt_error *m_event_synchronize(gpurt_runtime *h, gpurt_event *eh) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_event *ev;
  if ((e = lookup(rt, &rt->events, eh, (void **)&ev))) return e;
  ev_rec *r = latest_ref(rt, ev);
  if (r) {
    rec_wait(rt, r);
    rec_release(rt, r);
  }
  if (is_lost(rt, ev->dev)) return lost_err("event_synchronize", ev->dev);
  return NULL;
}

static gpurt_error *m_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh, double *out_ms) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out_ms == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "event_elapsed: out_ms is NULL");
  mock_event *a, *b;
  if ((e = lookup(rt, &rt->events, sh, (void **)&a))) return e;
  if ((e = lookup(rt, &rt->events, eh, (void **)&b))) return e;
  if (is_lost(rt, a->dev)) return lost_err("event_elapsed", a->dev);
  if (is_lost(rt, b->dev)) return lost_err("event_elapsed", b->dev);
  if (!(a->flags & GPURT_EVENT_TIMING) || !(b->flags & GPURT_EVENT_TIMING))
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: %s event %#llx was created without "
                  "GPURT_EVENT_TIMING", (a->flags & GPURT_EVENT_TIMING) ? "end" : "start",
                  H((a->flags & GPURT_EVENT_TIMING) ? eh : sh));
  pthread_mutex_lock(&rt->ev_mu);
  ev_rec *ra = a->latest, *rb = b->latest;
  int na = ra == NULL, nb = rb == NULL;
  int pa = ra && !ra->done, pb = rb && !rb->done;
  uint64_t ta = ra ? ra->ns : 0, tb = rb ? rb->ns : 0;
  pthread_mutex_unlock(&rt->ev_mu);
  if (na || nb)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "event_elapsed: %s event %#llx was never recorded",
                  na ? "start" : "end", H(na ? sh : eh));
  if (pa || pb)
    return gp_err(GPURT_ERR_NOT_READY, "event_elapsed: %s event %#llx has not completed yet",
                  pa ? "start" : "end", H(pa ? sh : eh));
  *out_ms = ((double)tb - (double)ta) / 1e6;
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Modules, kernels, launch                                            */
/* ------------------------------------------------------------------ */

static const char *format_name(int32_t f) {
  switch (f) {
    case GPURT_MODULE_BUILTIN: return "builtin";
    case GPURT_MODULE_PTX: return "ptx";
    case GPURT_MODULE_CUBIN: return "cubin";
    case GPURT_MODULE_FATBIN: return "fatbin";
    case GPURT_MODULE_METALLIB: return "metallib";
    case GPURT_MODULE_METAL_SOURCE: return "metal source";
    default: return "unknown";
  }
}

static gpurt_error *m_module_load(gpurt_runtime *h, const gpurt_module_load_args *args, gpurt_module **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: out is NULL");
  *out = NULL;
  gpurt_module_load_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "module_load: args"))) return e;
  if ((e = check_dev(rt, a.device, "module_load"))) return e;
  int nl = a.name && a.name_len ? (int)(a.name_len > 60 ? 60 : a.name_len) : 0;
  if (a.format != GPURT_MODULE_BUILTIN)
    return gp_err(GPURT_ERR_UNSUPPORTED, "module_load: module \"%.*s\": format %d (%s) is not supported by "
                  "the mock; it only has GPURT_MODULE_BUILTIN", nl, nl ? a.name : "", a.format,
                  format_name(a.format));
  mock_module *m = calloc(1, sizeof *m);
  uintptr_t *ks = calloc(gp_builtin_kernel_count, sizeof *ks);
  if (!m || !ks) {
    free(m);
    free(ks);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: no memory");
  }
  m->dev = a.device;
  m->kernels = ks;
  if (nl) memcpy(m->name, a.name, (size_t)nl);
  else gp_strlcpy(m->name, sizeof m->name, "builtin");
  uintptr_t hm;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->modules, m, &hm);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(ks);
    free(m);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "module_load: too many modules");
  }
  *out = (gpurt_module *)hm;
  return NULL;
}

static gpurt_error *m_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  if (mh == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o);
  if (st == GP_HANDLE_OK) {
    mock_module *m = o;
    gp_table_remove(&rt->modules, (uintptr_t)mh);
    for (size_t i = 0; i < gp_builtin_kernel_count; i++)
      if (m->kernels[i]) free(gp_table_remove(&rt->kernels, m->kernels[i]));
  }
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  mock_module *m = o;
  free(m->kernels);
  free(m);
  return NULL;
}

static gpurt_error *m_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name, uint64_t name_len,
                                 gpurt_kernel **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: out is NULL");
  *out = NULL;
  if (name == NULL && name_len > 0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: name is NULL with name_len %llu", U(name_len));
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o);
  if (st != GP_HANDLE_OK) {
    pthread_mutex_unlock(&rt->mu);
    return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
  }
  mock_module *m = o;
  const gp_builtin_kernel *k = gp_builtin_find(name ? name : "", (size_t)name_len);
  if (k == NULL) {
    pthread_mutex_unlock(&rt->mu);
    int nl = (int)(name_len > 200 ? 200 : name_len);
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl,
                  nl ? name : "", m->name);
  }
  size_t idx = (size_t)(k - gp_builtin_kernels);
  uintptr_t hk = m->kernels[idx];
  if (hk == 0) {
    mock_kernel *mk = calloc(1, sizeof *mk);
    if (mk) {
      mk->dev = m->dev;
      mk->k = k;
      if (gp_table_insert(&rt->kernels, mk, &hk) != 0) {
        free(mk);
        hk = 0;
      }
    }
    m->kernels[idx] = hk;
  }
  pthread_mutex_unlock(&rt->mu);
  if (hk == 0) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: no memory");
  *out = (gpurt_kernel *)hk;
  return NULL;
}

static gpurt_error *m_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  mock_kernel *mk;
  if ((e = lookup(rt, &rt->kernels, kh, (void **)&mk))) return e;
  if ((e = gp_check_out(out, "kernel_info: out"))) return e;
  gpurt_kernel_info i;
  memset(&i, 0, sizeof i);
  i.num_params = mk->k->num_params;
  i.max_threads_per_block = 1024;
  i.static_shared_bytes = 0;
  for (uint32_t p = 0; p < mk->k->num_params; p++) {
    i.param_kind[p] = mk->k->kinds[p];
    i.param_size[p] = mk->k->sizes[p];
  }
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

static const char *arg_kind_name(int32_t k) {
  static const char *names[] = {"?", "buffer", "i8", "i16", "i32", "i64", "u8", "u16", "u32",
                                "u64", "f16", "bf16", "f32", "f64", "any"};
  return (k >= 1 && k <= 14) ? names[k] : "unknown";
}

/* Checks one launch against the kernel's parameters and the stream as
 * launch does, and resolves it into *out (enqueues nothing). */
static gpurt_error *launch_prepare(mock_rt *rt, mock_stream *s, gpurt_kernel *kh, const gpurt_launch_args *args,
                                   gp_launch_exec *out) {
  gpurt_error *e;
  mock_kernel *mk;
  if ((e = lookup(rt, &rt->kernels, kh, (void **)&mk))) return e;
  if (is_lost(rt, s->dev)) return lost_err("launch", s->dev);
  const gp_builtin_kernel *k = mk->k;
  if (mk->dev != s->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: the kernel's module is on device %u but the stream "
                  "is on device %u", k->name, mk->dev, s->dev);
  gpurt_launch_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "launch: args"))) return e;
  for (int i = 0; i < 3; i++) {
    if (a.grid[i] == 0 || a.block[i] == 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: grid (%u,%u,%u) and block (%u,%u,%u) must be >= 1 "
                    "in every dimension", k->name, a.grid[0], a.grid[1], a.grid[2], a.block[0], a.block[1],
                    a.block[2]);
  }
  uint64_t threads = (uint64_t)a.block[0] * a.block[1] * a.block[2];
  if (threads > 1024 || a.block[2] > 64)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: block (%u,%u,%u) has %llu threads (max 1024, z max 64)",
                  k->name, a.block[0], a.block[1], a.block[2], U(threads));
  if (a.grid[0] > 0x7fffffffu || a.grid[1] > 65535 || a.grid[2] > 65535)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: grid (%u,%u,%u) is too large (x max 2^31-1, y and z "
                  "max 65535)", k->name, a.grid[0], a.grid[1], a.grid[2]);
  if (a.shared_mem_bytes > MOCK_MAX_SHARED)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: %u bytes of dynamic shared memory (max %u)", k->name,
                  a.shared_mem_bytes, MOCK_MAX_SHARED);
  if (a.num_args != k->num_params)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: %u argument(s) given, the kernel takes %u", k->name,
                  a.num_args, k->num_params);
  if (a.num_args > 0 && a.args == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: args is NULL with num_args %u", k->name, a.num_args);

  gp_launch_exec x;
  memset(&x, 0, sizeof x);
  x.k = k;
  memcpy(x.grid, a.grid, sizeof x.grid);
  memcpy(x.block, a.block, sizeof x.block);
  uint64_t view[3] = {0, 0, 0};
  uintptr_t bh[3] = {0, 0, 0};
  for (uint32_t p = 0; p < a.num_args; p++) {
    const gpurt_kernel_arg *g = &a.args[p];
    if (g->kind != k->kinds[p])
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: argument %u has kind %s (%d), expected %s", k->name,
                    p, arg_kind_name(g->kind), g->kind, arg_kind_name(k->kinds[p]));
    if (g->size != k->sizes[p])
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: argument %u (%s) has size %u, expected %u", k->name,
                    p, arg_kind_name(g->kind), g->size, k->sizes[p]);
    if (g->kind == GPURT_ARG_BUFFER) {
      mock_buf *b;
      if ((e = lookup(rt, &rt->bufs, g->buffer, (void **)&b)))
        return gp_err_wrap(e, "launch %s: argument %u", k->name, p);
      if (b->dev != s->dev)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch %s: argument %u: buffer %#llx is on device %u but the "
                      "stream is on device %u", k->name, p, H(g->buffer), b->dev, s->dev);
      if (g->offset > b->size || (g->length && !in_range(b->size, g->offset, g->length)))
        return gp_err(GPURT_ERR_OUT_OF_RANGE, "launch %s: argument %u: view is outside buffer %#llx: buffer "
                      "size %llu, offset %llu, length %llu", k->name, p, H(g->buffer), U(b->size), U(g->offset),
                      U(g->length));
      x.bufs[p] = b->data + g->offset;
      view[p] = g->length ? g->length : b->size - g->offset;
      bh[p] = (uintptr_t)g->buffer;
    } else {
      uint64_t v = g->value;
      if (g->size < 8) v &= (1ull << (8 * g->size)) - 1;
      x.scalar[p] = v;
    }
  }
  uint64_t touched = gp_launch_touched(&x);
  size_t es = gp_dtype_size(k->dtype);
  for (uint32_t p = 0; p < k->num_buffers; p++) {
    if (touched > view[p] / es)
      return gp_err(GPURT_ERR_OUT_OF_RANGE, "launch %s: argument %u: the kernel touches %llu elements (%llu "
                    "bytes) but the view of buffer %#llx holds %llu bytes", k->name, p, U(touched),
                    U(touched * es), H(bh[p]), U(view[p]));
  }
  *out = x;
  return NULL;
}

/* Counts n launches against fail_launch_nth (one lock hold); returns the
 * index of the launch the fault refuses, or n when none is refused. */
static uint64_t launch_faults(mock_rt *rt, uint64_t n) {
  pthread_mutex_lock(&rt->mu);
  uint64_t at = gp_fault_launches(&rt->fail_launch_nth, n);
  pthread_mutex_unlock(&rt->mu);
  return at;
}

static gpurt_error *launch_fault_err(const gp_launch_exec *x) {
  return gp_err(GPURT_ERR_LAUNCH_FAILED, "launch %s: the kernel failed to start (injected fault: "
                "fail_launch_nth)", x->k->name);
}

static gpurt_error *m_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh, const gpurt_launch_args *args) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (sh == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch: stream is NULL (launches need a stream)");
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  gp_launch_exec x;
  if ((e = launch_prepare(rt, s, kh, args, &x))) return e;
  if (launch_faults(rt, 1) == 0) return launch_fault_err(&x);
  mock_op *op = calloc(1, sizeof *op);
  if (!op) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch: no memory");
  op->kind = OP_LAUNCH;
  op->u.launch = x;
  submit(s, op);
  return NULL;
}

static void free_ops(mock_rt *rt, mock_op **ops, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; i++) op_free(rt, ops[i]);
}

/* Every item is checked (launch_prepare) and given its op before any is
 * enqueued, so a bad item or no memory enqueues nothing; the launches the
 * fault injection lets through are then appended under one hold of the
 * stream's lock. */
static gpurt_error *m_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count, const gpurt_launch_item *items,
                                   uint64_t *out_enqueued) {
  if (out_enqueued) *out_enqueued = 0;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (count == 0) return NULL;
  if (sh == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch_batch: stream is NULL (launches need a stream)");
  if (items == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch_batch: items is NULL with count %llu", U(count));
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  if (is_lost(rt, s->dev)) return lost_err("launch_batch", s->dev);
  mock_op **ops = count <= SIZE_MAX / sizeof *ops ? calloc((size_t)count, sizeof *ops) : NULL;
  if (!ops) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch_batch: no memory for %llu items", U(count));
  for (uint64_t i = 0; i < count; i++) {
    gp_launch_exec x;
    if ((e = launch_prepare(rt, s, items[i].kernel, items[i].args, &x))) {
      free_ops(rt, ops, 0, i);
      free(ops);
      return gp_err_wrap(e, "launch_batch: item %llu", U(i));
    }
    if (!(ops[i] = calloc(1, sizeof *ops[i]))) {
      free_ops(rt, ops, 0, i);
      free(ops);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "launch_batch: item %llu: no memory", U(i));
    }
    ops[i]->kind = OP_LAUNCH;
    ops[i]->u.launch = x;
  }
  uint64_t n = launch_faults(rt, count);
  if (n > 0) enqueue_many(s, ops, n);
  if (out_enqueued) *out_enqueued = n;
  if (n < count) {
    e = gp_err_wrap(launch_fault_err(&ops[n]->u.launch), "launch_batch: item %llu", U(n));
    if (n) e = gp_err_append(e, "; items 0..%llu before it stay enqueued", U(n - 1));
    else e = gp_err_append(e, "; nothing was enqueued");
    free_ops(rt, ops, n, count);
  }
  free(ops);
  return e;
}

/* ------------------------------------------------------------------ */
/* GEMM (1.1)                                                          */
/* ------------------------------------------------------------------ */

static gpurt_error *m_gemm_plan_create(gpurt_runtime *h, uint32_t d, const gpurt_gemm_desc *desc,
                                       gpurt_gemm_plan **out) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_plan_create: out is NULL");
  *out = NULL;
  if ((e = check_dev(rt, d, "gemm_plan_create"))) return e;
  gpurt_gemm_desc g;
  if ((e = gp_read_struct(&g, sizeof g, desc, "gemm_plan_create: desc"))) return e;
  if ((e = gp_gemm_validate(&g))) return e;
  mock_plan *p = calloc(1, sizeof *p);
  if (!p) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_plan_create: no memory");
  p->dev = d;
  p->desc = g;
  uintptr_t hp;
  pthread_mutex_lock(&rt->mu);
  int r = gp_table_insert(&rt->plans, p, &hp);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    free(p);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_plan_create: too many plans");
  }
  *out = (gpurt_gemm_plan *)hp;
  return NULL;
}

static gpurt_error *m_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *ph) {
  if (ph == NULL) return NULL;
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  pthread_mutex_lock(&rt->mu);
  void *o = NULL;
  int st = gp_table_lookup(&rt->plans, (uintptr_t)ph, &o);
  if (st == GP_HANDLE_OK) gp_table_remove(&rt->plans, (uintptr_t)ph);
  pthread_mutex_unlock(&rt->mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_GEMM_PLAN, (uintptr_t)ph);
  free(o);
  return NULL;
}

/* Resolves one gemm operand: valid buffer on the stream's device, its
 * extent (elements of dtype) inside the buffer from offset. */
static gpurt_error *gemm_operand(mock_rt *rt, mock_stream *s, const char *name, gpurt_buffer *bh, uint64_t off,
                                 uint64_t elems, int32_t dtype, void **out) {
  mock_buf *b;
  gpurt_error *e = lookup(rt, &rt->bufs, bh, (void **)&b);
  if (e) return gp_err_wrap(e, "gemm_run: operand %s", name);
  if (b->dev != s->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: operand %s: buffer %#llx is on device %u but the "
                  "stream is on device %u", name, H(bh), b->dev, s->dev);
  size_t es = gp_dtype_size(dtype);
  uint64_t bytes = elems * es;
  if (elems != 0 && bytes / es != elems) bytes = UINT64_MAX;
  if (!in_range(b->size, off, bytes))
    return gp_err(GPURT_ERR_OUT_OF_RANGE, "gemm_run: operand %s spans %llu elements (%llu bytes of %s) from "
                  "offset %llu, beyond buffer %#llx of %llu bytes", name, U(elems), U(bytes),
                  gp_dtype_name(dtype), U(off), H(bh), U(b->size));
  *out = b->data + off;
  return NULL;
}

static gpurt_error *m_gemm_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_gemm_plan *ph,
                               const gpurt_gemm_run_args *args) {
  mock_rt *rt;
  gpurt_error *e = get_rt(h, &rt);
  if (e) return e;
  if (sh == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: stream is NULL (runs need a stream)");
  mock_stream *s;
  if ((e = lookup(rt, &rt->streams, sh, (void **)&s))) return e;
  mock_plan *p;
  if ((e = lookup(rt, &rt->plans, ph, (void **)&p))) return e;
  if (is_lost(rt, s->dev)) return lost_err("gemm_run", s->dev);
  if (p->dev != s->dev)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: plan %#llx is for device %u but the stream is on "
                  "device %u", H(ph), p->dev, s->dev);
  gpurt_gemm_run_args a;
  if ((e = gp_read_struct(&a, sizeof a, args, "gemm_run: args"))) return e;
  const gpurt_gemm_desc *d = &p->desc;
  if (a.a == NULL || a.b == NULL || a.d == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: operand %s is NULL", a.a == NULL ? "a" : a.b == NULL ? "b" : "d");
  if (a.c == NULL && a.beta != 0.0)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: c is NULL but beta is %g (c may be NULL only when beta "
                  "is 0)", a.beta);
  int has_bias = d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
                 d->epilogue == GPURT_EPILOGUE_BIAS_GELU;
  if (has_bias && a.bias == NULL)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: the plan's epilogue adds a bias but bias is NULL");
  int fp8 = d->a_type == GPURT_DTYPE_FP8_E4M3 || d->a_type == GPURT_DTYPE_FP8_E5M2;
  if (!fp8 && (a.scale_a || a.scale_b || a.scale_d))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: scale_%s is set but scales apply to fp8 operands only",
                  a.scale_a ? "a" : a.scale_b ? "b" : "d");
  if (a.scale_d && d->d_type != GPURT_DTYPE_FP8_E4M3 && d->d_type != GPURT_DTYPE_FP8_E5M2)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: scale_d is set but D is %s: scale_d quantises an fp8 D only",
                  gp_dtype_name(d->d_type));
  if (!(a.alpha == a.alpha) || !(a.beta == a.beta))
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_run: alpha or beta is NaN");

  gp_gemm_exec *x = calloc(1, sizeof *x);
  if (!x) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory");
  x->d = *d;
  x->alpha = a.alpha;
  x->beta = a.beta;
  x->threads = rt->gemm_threads;
  uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
  uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
  void *pa, *pb, *pc = NULL, *pd, *pbias = NULL, *psa = NULL, *psb = NULL, *psd = NULL;
  if ((e = gemm_operand(rt, s, "a", a.a, a.a_offset, gp_gemm_extent(ar, ac, d->lda, d->batch_count, d->stride_a),
                        d->a_type, &pa)) ||
      (e = gemm_operand(rt, s, "b", a.b, a.b_offset, gp_gemm_extent(br, bc, d->ldb, d->batch_count, d->stride_b),
                        d->b_type, &pb)) ||
      (a.c && (e = gemm_operand(rt, s, "c", a.c, a.c_offset,
                                gp_gemm_extent(d->m, d->n, d->ldc, d->batch_count, d->stride_c), d->c_type, &pc))) ||
      (e = gemm_operand(rt, s, "d", a.d, a.d_offset, gp_gemm_extent(d->m, d->n, d->ldd, d->batch_count, d->stride_d),
                        d->d_type, &pd)) ||
      (has_bias && (e = gemm_operand(rt, s, "bias", a.bias, a.bias_offset, d->m, d->bias_type, &pbias))) ||
      (a.scale_a && (e = gemm_operand(rt, s, "scale_a", a.scale_a, a.scale_a_offset, 1, GPURT_DTYPE_F32, &psa))) ||
      (a.scale_b && (e = gemm_operand(rt, s, "scale_b", a.scale_b, a.scale_b_offset, 1, GPURT_DTYPE_F32, &psb))) ||
      (a.scale_d && (e = gemm_operand(rt, s, "scale_d", a.scale_d, a.scale_d_offset, 1, GPURT_DTYPE_F32, &psd)))) {
    free(x);
    return e;
  }
  if (a.workspace) {
    void *pw;
    if ((e = gemm_operand(rt, s, "workspace", a.workspace, a.workspace_offset, a.workspace_size, GPURT_DTYPE_U8,
                          &pw))) {
      free(x);
      return e;
    }
  }
  x->a = pa;
  x->b = pb;
  x->c = pc;
  x->dd = pd;
  x->bias = pbias;
  /* Scales live in device memory; read them when the run executes. */
  x->scale_ptr_a = psa;
  x->scale_ptr_b = psb;
  x->scale_ptr_d = psd;
  mock_op *op = calloc(1, sizeof *op);
  if (!op) {
    free(x);
    return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_run: no memory");
  }
  op->kind = OP_GEMM;
  op->u.gemm = x;
  submit(s, op);
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
};

/* No side effects: writes versions, the table or a message; nothing else. */
GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  if (args == NULL || args->struct_size < offsetof(gpurt_negotiate_args, api))
    return GPURT_ERR_INVALID_ARGUMENT;
  int has_api = args->struct_size >= offsetof(gpurt_negotiate_args, api) + sizeof(args->api);
  int has_msg = args->struct_size >= offsetof(gpurt_negotiate_args, message) + sizeof(args->message);
  args->plugin_abi_major = GPURT_ABI_MAJOR;
  args->plugin_abi_minor = GPURT_ABI_MINOR;
  if (has_api) args->api = NULL;
  if (has_msg) args->message[0] = 0;
  if (args->host_abi_major != GPURT_ABI_MAJOR) {
    if (has_msg)
      snprintf(args->message, sizeof args->message,
               "mock: abi mismatch: the core speaks %u.%u, the plugin speaks %u.%u (majors must match)",
               args->host_abi_major, args->host_abi_minor, GPURT_ABI_MAJOR, GPURT_ABI_MINOR);
    return GPURT_ERR_ABI_MISMATCH;
  }
  if (!has_api) {
    if (has_msg) snprintf(args->message, sizeof args->message, "mock: negotiate args too small for the api field");
    return GPURT_ERR_INVALID_ARGUMENT;
  }
  args->api = &mock_api;
  return GPURT_OK;
}
