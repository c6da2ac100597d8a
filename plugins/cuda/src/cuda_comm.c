/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_comm.c — collectives (1.6) on NCCL, peer access between devices,
 * device UUIDs.
 *
 * NCCL is opened with dlopen on the first comm call, like cuBLASLt
 * (cuda_gemm.c): GPURT_NCCL_PATH names the file (ignored when the process
 * runs setuid/setgid; it must pass csrc/gp_path.h's rule, or NCCL is
 * unavailable naming why), else "libnccl.so.2" by the dynamic loader's
 * search. No NCCL header is used: the few types and entry points below
 * are declared here from NCCL's documented public ABI (nccl.h of 2.14 and
 * later: ncclResult_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId of 128
 * bytes, ncclConfig_t's leading fields). The config passed is the 2.14
 * prefix (size, magic, version, blocking) with version 2.14.0, so NCCL
 * reads only `blocking` and keeps its defaults for every later field.
 *
 * Communicators are non-blocking (blocking = 0): init, group end and
 * finalize may answer ncclInProgress, and this file polls
 * ncclCommGetAsyncError until the state settles, bounded by the
 * communicator's timeout; an error (or a timeout at init) aborts the NCCL
 * communicators (ncclCommAbort) and leaves the handle broken, reported
 * by comm_query. Every group of comm_run is ncclGroupStart ..
 * ncclGroupEnd inside the one call. Before NCCL's first call,
 * NCCL_NVLS_ENABLE=0 is set in the environment when it is unset (NVLink
 * SHARP needs multicast objects, which gpurt never uses); the plugin never
 * creates multicast objects itself.
 *
 * The engine owns the handles, checks every op of a group and resolves its
 * streams and buffers (gp_coll_item); these entries make, run, query,
 * abort and free the NCCL communicators behind them.
 *
 * Locks (see cuda_internal.h's "Locks"): nc_mu (loading NCCL, a leaf);
 * cu_comm.mu (one communicator's NCCL calls: NCCL communicators are not
 * thread-safe), taken alone, held across NCCL calls and their polling;
 * comm_abort sets `abort_req` first so that a poll holding mu gives up.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_comm.h"
#include "gp_comm.h"
#include "gp_path.h"

/* ---- NCCL's public ABI (declared, not included) -------------------------- */

typedef struct nc_comm_s *nc_comm_t; /* ncclComm_t */
typedef struct {
  char internal[GPURT_COMM_ID_BYTES];
} nc_unique_id; /* ncclUniqueId: NCCL_UNIQUE_ID_BYTES == 128 */

enum { /* ncclResult_t */
       NC_SUCCESS = 0,
       NC_UNHANDLED_CUDA_ERROR = 1,
       NC_SYSTEM_ERROR = 2,
       NC_INTERNAL_ERROR = 3,
       NC_INVALID_ARGUMENT = 4,
       NC_INVALID_USAGE = 5,
       NC_REMOTE_ERROR = 6,
       NC_IN_PROGRESS = 7 };
enum { NC_UINT8 = 1, NC_FLOAT16 = 6, NC_FLOAT32 = 7, NC_BFLOAT16 = 9 }; /* ncclDataType_t */
enum { NC_SUM = 0, NC_MAX = 2 };                                        /* ncclRedOp_t */

/* ncclConfig_t's prefix as of NCCL 2.14 (NCCL reads `size` bytes and only
 * the fields its `version` had). */
typedef struct {
  size_t size;
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION(2, 14, 0) = 21400 */
  int blocking;
} nc_config;
#define NC_CONFIG_MAGIC 0xcafebeefu
#define NC_CONFIG_VERSION 21400u

typedef int nc_result;
#define NC_FUNCS(X)                                                                         \
  X(ncclGetVersion, nc_result, (int *))                                                     \
  X(ncclGetUniqueId, nc_result, (nc_unique_id *))                                           \
  X(ncclCommInitRankConfig, nc_result, (nc_comm_t *, int, nc_unique_id, int, nc_config *))  \
  X(ncclCommGetAsyncError, nc_result, (nc_comm_t, nc_result *))                             \
  X(ncclCommFinalize, nc_result, (nc_comm_t))                                               \
  X(ncclCommDestroy, nc_result, (nc_comm_t))                                                \
  X(ncclCommAbort, nc_result, (nc_comm_t))                                                  \
  X(ncclGetErrorString, const char *, (nc_result))                                          \
  X(ncclGroupStart, nc_result, (void))                                                      \
  X(ncclGroupEnd, nc_result, (void))                                                        \
  X(ncclAllReduce, nc_result, (const void *, void *, size_t, int, int, nc_comm_t, CUstream)) \
  X(ncclAllGather, nc_result, (const void *, void *, size_t, int, nc_comm_t, CUstream))     \
  X(ncclReduceScatter, nc_result, (const void *, void *, size_t, int, int, nc_comm_t, CUstream)) \
  X(ncclBroadcast, nc_result, (const void *, void *, size_t, int, int, nc_comm_t, CUstream)) \
  X(ncclSend, nc_result, (const void *, size_t, int, int, nc_comm_t, CUstream))             \
  X(ncclRecv, nc_result, (void *, size_t, int, int, nc_comm_t, CUstream))
/* Optional: the last error's text (NCCL 2.13+). */
#define NC_OPT_FUNCS(X) X(ncclGetLastError, const char *, (nc_comm_t))

#define NC_FIELD(name, ret, params) ret(*p_##name) params;
static struct {
  NC_FUNCS(NC_FIELD)
  NC_OPT_FUNCS(NC_FIELD)
} nc;
#undef NC_FIELD

static pthread_mutex_t nc_mu = PTHREAD_MUTEX_INITIALIZER;
static int nc_state; /* 0 untried, 1 loaded, -1 failed */
static char nc_why[800];
static int nc_version;

/* Loads NCCL once; NULL or the reason it is unavailable (UNSUPPORTED). */
static gpurt_error *nc_load(const char *what) {
  pthread_mutex_lock(&nc_mu);
  if (nc_state == 0) {
    /* Before NCCL reads its environment: no NVLink SHARP unless asked. */
    if (getenv("NCCL_NVLS_ENABLE") == NULL) setenv("NCCL_NVLS_ENABLE", "0", 0);
    char tried[600] = "";
    void *h = NULL;
    const char *env = gp_secure_getenv("GPURT_NCCL_PATH");
    /* The named file is checked and opened once, and loaded through its
     * descriptor (/proc/self/fd/N): a file renamed into place after the
     * checks is never loaded (as core/internal/loader/pin_unix.go). */
    char env_fd[64];
    int env_fdn = -1;
    if (env != NULL && env[0] != 0) {
      char why_env[512];
      if (gp_trusted_open(env, &env_fdn, env_fd, sizeof env_fd, why_env, sizeof why_env) != 0) {
        snprintf(nc_why, sizeof nc_why, "NCCL unavailable: GPURT_NCCL_PATH=%s refused: %s", env, why_env);
        nc_state = -1;
        goto done;
      }
      env = env_fd;
    }
    const char *cands[] = {env, "libnccl.so.2"};
    if (env_fdn >= 0) snprintf(tried, sizeof tried, "GPURT_NCCL_PATH=%.200s as %s: ", gp_secure_getenv("GPURT_NCCL_PATH"), env_fd);
    h = cu_dlopen_first(cands, sizeof cands / sizeof cands[0], 1 /* an explicit file is never replaced */,
                        tried + strlen(tried), sizeof tried - strlen(tried));
    /* A descriptor whose name a dlopen went through stays open (glibc
     * would hand this library back for a reused number). */
    if (h == NULL && env_fdn >= 0) close(env_fdn);
    if (h == NULL) {
      snprintf(nc_why, sizeof nc_why,
               "NCCL unavailable: libnccl.so.2 could not be opened (%s; install the nvidia-nccl-cu13 wheel "
               "or the system's NCCL, or set GPURT_NCCL_PATH to the file)", tried);
      nc_state = -1;
      goto done;
    }
    const char *missing = NULL;
#define NC_RESOLVE(name, ret, params)                           \
  nc.p_##name = (__typeof__(nc.p_##name))dlsym(h, #name);       \
  if (nc.p_##name == NULL && missing == NULL) missing = #name;
    NC_FUNCS(NC_RESOLVE)
#undef NC_RESOLVE
#define NC_RESOLVE_OPT(name, ret, params) nc.p_##name = (__typeof__(nc.p_##name))dlsym(h, #name);
    NC_OPT_FUNCS(NC_RESOLVE_OPT)
#undef NC_RESOLVE_OPT
    if (missing) {
      snprintf(nc_why, sizeof nc_why, "NCCL unavailable: %.300s lacks %s (NCCL 2.14 or later is needed)",
               env && env[0] ? env : "libnccl.so.2", missing);
      nc_state = -1;
      goto done;
    }
    if (nc.p_ncclGetVersion(&nc_version) != NC_SUCCESS || nc_version < 21400) {
      snprintf(nc_why, sizeof nc_why, "NCCL unavailable: version %d is older than 2.14 (non-blocking "
               "communicators)", nc_version);
      nc_state = -1;
      goto done;
    }
    nc_state = 1;
  }
done:;
  int st = nc_state;
  pthread_mutex_unlock(&nc_mu);
  if (st == 1) return NULL;
  return gp_err(GPURT_ERR_UNSUPPORTED, "%s: %s", what, nc_why);
}

static const char *nc_text(nc_result r) {
  const char *s = nc.p_ncclGetErrorString ? nc.p_ncclGetErrorString(r) : NULL;
  return s ? s : "unknown NCCL error";
}

static int32_t nc_code(nc_result r) {
  switch (r) {
    case NC_INVALID_ARGUMENT:
    case NC_INVALID_USAGE: return GPURT_ERR_INVALID_ARGUMENT;
    case NC_REMOTE_ERROR:
    case NC_SYSTEM_ERROR: return GPURT_ERR_UNAVAILABLE;
    case NC_UNHANDLED_CUDA_ERROR: return GPURT_ERR_LAUNCH_FAILED;
    default: return GPURT_ERR_INTERNAL;
  }
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap(void) {
  struct timespec ts = {0, 20000}; /* 20 us */
  nanosleep(&ts, NULL);
}

/* ---- communicators ------------------------------------------------------- */

typedef struct cu_comm {
  cu_runtime *rt;
  uint32_t nranks, first_rank, local;
  uint32_t devs[GP_COMM_MAX_LOCAL];
  nc_comm_t nccl[GP_COMM_MAX_LOCAL]; /* NULL once aborted */
  uint64_t timeout_ms;
  _Atomic int abort_req;
  pthread_mutex_t mu;
  int aborted, broken;
  int32_t err_code;
  int64_t err_vendor;
  char err[512];
} cu_comm;

/* Aborts every NCCL communicator of c (c->mu held). */
static void comm_abort_locked(cu_comm *c) {
  for (uint32_t i = 0; i < c->local; i++) {
    if (c->nccl[i] == NULL) continue;
    cu_enter_quiet(c->rt, c->devs[i]);
    (void)nc.p_ncclCommAbort(c->nccl[i]);
    c->nccl[i] = NULL;
  }
  c->aborted = 1;
}

/* Breaks c with an error (c->mu held): the first cause stays. */
static void comm_break(cu_comm *c, int32_t code, int64_t vendor, const char *fmt, ...) GP_PRINTF(4, 5);
static void comm_break(cu_comm *c, int32_t code, int64_t vendor, const char *fmt, ...) {
  if (c->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  c->err_code = code;
  c->err_vendor = vendor;
  c->broken = 1;
}

/* Polls the local NCCL communicators until none is in progress (c->mu
 * held). Returns NC_SUCCESS, an NCCL error (with *rank the local index),
 * or NC_IN_PROGRESS after the deadline or an abort request. */
static nc_result comm_settle(cu_comm *c, uint64_t deadline, uint32_t *which) {
  for (;;) {
    int pending = 0;
    for (uint32_t i = 0; i < c->local; i++) {
      if (c->nccl[i] == NULL) continue;
      nc_result st = NC_SUCCESS;
      nc_result r = nc.p_ncclCommGetAsyncError(c->nccl[i], &st);
      if (r != NC_SUCCESS) st = r;
      if (st == NC_IN_PROGRESS) pending = 1;
      else if (st != NC_SUCCESS) {
        *which = i;
        return st;
      }
    }
    if (!pending) return NC_SUCCESS;
    if (atomic_load(&c->abort_req) || now_ms() > deadline) return NC_IN_PROGRESS;
    nap();
  }
}

static gpurt_error *comm_broken_error(cu_comm *c, const char *what) {
  if (c->aborted && !c->broken)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: the communicator was aborted (destroy it)", what);
  if (c->broken)
    return gp_err_vendor(c->err_code, c->err_vendor, "%s: the communicator is broken: %s (abort and destroy it)",
                         what, c->err);
  return NULL;
}

/* The settled state after a call that may be in progress (c->mu held). */
static gpurt_error *comm_finish(cu_comm *c, const char *what, nc_result r0, uint64_t deadline) {
  uint32_t which = 0;
  nc_result r = r0;
  if (r == NC_SUCCESS || r == NC_IN_PROGRESS) r = comm_settle(c, deadline, &which);
  if (r == NC_SUCCESS) return NULL;
  const char *last = (c->nccl[which] && nc.p_ncclGetLastError) ? nc.p_ncclGetLastError(c->nccl[which]) : NULL;
  if (r == NC_IN_PROGRESS)
    comm_break(c, GPURT_ERR_UNAVAILABLE, 0, "%s: rank %u did not settle within %llu ms (a peer missing or hung; "
               "the NCCL communicators were aborted)", what, c->first_rank + which,
               (unsigned long long)c->timeout_ms);
  else
    comm_break(c, nc_code(r), r, "%s: rank %u: NCCL error %d (%s)%s%s", what, c->first_rank + which, r,
               nc_text(r), last && last[0] ? ": " : "", last ? last : "");
  comm_abort_locked(c);
  return gp_err_vendor(c->err_code, c->err_vendor, "%s", c->err);
}

gpurt_error *cu_comm_unique_id(void *ctx, uint8_t out[GPURT_COMM_ID_BYTES]) {
  gpurt_error *e;
  if ((e = nc_load("comm_unique_id"))) return e;
  nc_unique_id id;
  nc_result r = nc.p_ncclGetUniqueId(&id);
  if (r != NC_SUCCESS)
    return gp_err_vendor(nc_code(r), r, "comm_unique_id: ncclGetUniqueId: %s", nc_text(r));
  memcpy(out, id.internal, GPURT_COMM_ID_BYTES);
  return NULL;
}

gpurt_error *cu_comm_create(void *ctx, const gpurt_comm_create_args *ap, uint32_t nranks, void **out) {
  cu_runtime *rt = ctx;
  const gpurt_comm_create_args a = *ap;
  gpurt_error *e = NULL;
  for (uint32_t i = 0; i < a.device_count; i++)
    if (cu_dev_lost(rt, a.devices[i])) return cu_lost_error(rt, a.devices[i]);
  if ((e = nc_load("comm_create"))) return e;
  cu_comm *c = calloc(1, sizeof *c);
  if (!c) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "comm_create: no memory");
  c->rt = rt;
  c->local = a.device_count;
  c->first_rank = a.first_rank;
  c->nranks = nranks;
  c->timeout_ms = a.timeout_ms;
  memcpy(c->devs, a.devices, a.device_count * sizeof *a.devices);
  pthread_mutex_init(&c->mu, NULL);
  nc_unique_id id;
  nc_result r;
  if (a.nranks == 0) {
    if ((r = nc.p_ncclGetUniqueId(&id)) != NC_SUCCESS) {
      e = gp_err_vendor(nc_code(r), r, "comm_create: ncclGetUniqueId: %s", nc_text(r));
      goto fail;
    }
  } else {
    memcpy(id.internal, a.unique_id, GPURT_COMM_ID_BYTES);
  }
  nc_config cfg = {sizeof(nc_config), NC_CONFIG_MAGIC, NC_CONFIG_VERSION, 0};
  uint64_t deadline = now_ms() + a.timeout_ms;
  pthread_mutex_lock(&c->mu);
  r = nc.p_ncclGroupStart();
  for (uint32_t i = 0; i < c->local && (r == NC_SUCCESS || r == NC_IN_PROGRESS); i++) {
    if ((e = cu_enter(rt, c->devs[i]))) break;
    r = nc.p_ncclCommInitRankConfig(&c->nccl[i], (int)c->nranks, id, (int)(c->first_rank + i), &cfg);
  }
  nc_result re = nc.p_ncclGroupEnd();
  if (r == NC_SUCCESS || r == NC_IN_PROGRESS) r = re;
  if (e) {
    comm_abort_locked(c);
    pthread_mutex_unlock(&c->mu);
    goto fail;
  }
  e = comm_finish(c, "comm_create", r, deadline);
  pthread_mutex_unlock(&c->mu);
  if (e) {
    if (gp_error_code(e) == GPURT_ERR_UNAVAILABLE || c->broken)
      e = gp_err_wrap(e, "comm_create: ranks %u..%u of %u", c->first_rank, c->first_rank + c->local - 1, c->nranks);
    goto fail;
  }
  *out = c;
  return NULL;
fail:
  pthread_mutex_destroy(&c->mu);
  free(c);
  return e;
}

/* The engine drained the communicator's devices first (unless aborted):
 * finalize flushes NCCL's work (non-blocking: polled), then destroy frees
 * it; an error there leaves nothing to report to (the handle is gone). */
void cu_comm_destroy(void *ctx, void *obj) {
  cu_runtime *rt = ctx;
  cu_comm *c = obj;
  pthread_mutex_lock(&c->mu);
  if (!c->aborted) {
    uint64_t deadline = now_ms() + c->timeout_ms;
    nc_result r = NC_SUCCESS;
    for (uint32_t i = 0; i < c->local && (r == NC_SUCCESS || r == NC_IN_PROGRESS); i++) {
      cu_enter_quiet(rt, c->devs[i]);
      r = nc.p_ncclCommFinalize(c->nccl[i]);
    }
    gp_error_destroy(comm_finish(c, "comm_destroy", r, deadline));
    for (uint32_t i = 0; i < c->local; i++) {
      if (c->nccl[i] == NULL) continue;
      cu_enter_quiet(rt, c->devs[i]);
      (void)nc.p_ncclCommDestroy(c->nccl[i]);
      c->nccl[i] = NULL;
    }
  }
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void cu_comm_abort(void *ctx, void *obj) {
  cu_comm *c = obj;
  atomic_store(&c->abort_req, 1); /* a poll holding mu gives up */
  pthread_mutex_lock(&c->mu);
  comm_abort_locked(c);
  pthread_mutex_unlock(&c->mu);
}

gpurt_error *cu_comm_query(void *ctx, void *obj, const char *what) {
  cu_comm *c = obj;
  gpurt_error *e;
  pthread_mutex_lock(&c->mu);
  if (!(e = comm_broken_error(c, what))) {
    for (uint32_t i = 0; i < c->local; i++) {
      if (c->nccl[i] == NULL) continue;
      nc_result st = NC_SUCCESS;
      nc_result r = nc.p_ncclCommGetAsyncError(c->nccl[i], &st);
      if (r != NC_SUCCESS) st = r;
      if (st != NC_SUCCESS && st != NC_IN_PROGRESS) {
        const char *last = nc.p_ncclGetLastError ? nc.p_ncclGetLastError(c->nccl[i]) : NULL;
        comm_break(c, nc_code(st), st, "rank %u: NCCL error %d (%s)%s%s", c->first_rank + i, st, nc_text(st),
                   last && last[0] ? ": " : "", last ? last : "");
        comm_abort_locked(c);
        e = comm_broken_error(c, what);
        break;
      }
    }
  }
  pthread_mutex_unlock(&c->mu);
  return e;
}

static nc_result coll_enqueue(cu_comm *c, const gp_coll_item *x) {
  const gpurt_coll_op *o = &x->op;
  nc_comm_t nk = c->nccl[o->rank - c->first_rank];
  size_t es = gp_dtype_size(o->dtype);
  size_t cnt = (size_t)o->count, bytes = cnt * es;
  const void *s = (const void *)(uintptr_t)x->send.addr;
  void *d = (void *)(uintptr_t)x->recv.addr;
  int dt = o->dtype == GPURT_DTYPE_F32 ? NC_FLOAT32 : o->dtype == GPURT_DTYPE_F16 ? NC_FLOAT16 : NC_BFLOAT16;
  int red = o->reduce == GPURT_REDUCE_MAX ? NC_MAX : NC_SUM;
  CUstream cs = ((cu_stream *)x->q->q)->s;
  switch (o->kind) {
    case GPURT_COLL_ALL_REDUCE: return nc.p_ncclAllReduce(s, d, cnt, dt, red, nk, cs);
    case GPURT_COLL_REDUCE_SCATTER: return nc.p_ncclReduceScatter(s, d, cnt, dt, red, nk, cs);
    /* Data movement by bytes: any element type. */
    case GPURT_COLL_ALL_GATHER: return nc.p_ncclAllGather(s, d, bytes, NC_UINT8, nk, cs);
    case GPURT_COLL_BROADCAST: return nc.p_ncclBroadcast(s, d, bytes, NC_UINT8, (int)o->peer, nk, cs);
    case GPURT_COLL_SEND: return nc.p_ncclSend(s, bytes, NC_UINT8, (int)o->peer, nk, cs);
    case GPURT_COLL_RECV: return nc.p_ncclRecv(d, bytes, NC_UINT8, (int)o->peer, nk, cs);
  }
  return NC_INVALID_ARGUMENT;
}

/* One checked group (the engine's): ncclGroupStart .. ncclGroupEnd. */
gpurt_error *cu_comm_run(void *ctx, void *obj, const gp_coll_item *xs, uint64_t n) {
  cu_runtime *rt = ctx;
  cu_comm *c = obj;
  gpurt_error *e;
  pthread_mutex_lock(&c->mu);
  if ((e = comm_broken_error(c, "comm_run"))) {
    pthread_mutex_unlock(&c->mu);
    return e;
  }
  uint64_t deadline = now_ms() + c->timeout_ms;
  nc_result r = nc.p_ncclGroupStart();
  uint64_t bad = n;
  for (uint64_t i = 0; i < n && (r == NC_SUCCESS || r == NC_IN_PROGRESS); i++) {
    if (xs[i].op.count == 0) continue;
    if ((e = cu_enter(rt, xs[i].dev))) break;
    r = coll_enqueue(c, &xs[i]);
    if (r != NC_SUCCESS && r != NC_IN_PROGRESS) bad = i;
  }
  nc_result re = nc.p_ncclGroupEnd();
  if (r == NC_SUCCESS || r == NC_IN_PROGRESS) r = re;
  if (e) {
    /* A lost device midway: the group's other ops may be enqueued. */
    comm_break(c, gp_error_code(e), 0, "a device was lost while the group was enqueued");
    comm_abort_locked(c);
  } else if (bad < n) {
    const char *last = nc.p_ncclGetLastError ? nc.p_ncclGetLastError(c->nccl[xs[bad].op.rank - c->first_rank]) : NULL;
    comm_break(c, nc_code(r), r, "comm_run: op %llu (%s): NCCL error %d (%s)%s%s", (unsigned long long)bad,
               gp_coll_kind_name(xs[bad].op.kind), r, nc_text(r), last && last[0] ? ": " : "", last ? last : "");
    comm_abort_locked(c);
    e = gp_err_vendor(c->err_code, c->err_vendor, "%s", c->err);
  } else {
    e = comm_finish(c, "comm_run", r, deadline);
  }
  pthread_mutex_unlock(&c->mu);
  return e;
}

/* ---- peer access ----------------------------------------------------------- */

typedef CUresult (*can_access_fn)(int *, CUdevice, CUdevice);
typedef CUresult (*enable_peer_fn)(CUcontext, unsigned int);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);

static pthread_once_t g_extra_once = PTHREAD_ONCE_INIT;
static can_access_fn p_can_access;
static enable_peer_fn p_enable_peer;
static uuid_fn p_uuid;

static void extra_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) return;
  p_can_access = (can_access_fn)dlsym(h, "cuDeviceCanAccessPeer");
  p_enable_peer = (enable_peer_fn)dlsym(h, "cuCtxEnablePeerAccess");
  p_uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid_v2");
  if (p_uuid == NULL) p_uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid");
}

/* Per process (primary contexts are per process): 0 untried, 1 enabled,
 * 2 not possible; [from][to] by CUdevice ordinal. */
#define CU_PEER_MAX 64
static _Atomic uint8_t g_peer[CU_PEER_MAX][CU_PEER_MAX];

static void peer_one(cu_device *from, cu_device *to) {
  int f = (int)from->dev, t = (int)to->dev;
  if (f < 0 || t < 0 || f >= CU_PEER_MAX || t >= CU_PEER_MAX || f == t) return;
  if (atomic_load(&g_peer[f][t]) != 0) return;
  uint8_t st = 2;
  int can = 0;
  if (p_can_access && p_enable_peer && p_can_access(&can, from->dev, to->dev) == CUDA_SUCCESS && can &&
      cu_make_current(from) == CUDA_SUCCESS) {
    CUresult r = p_enable_peer(to->ctx, 0);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) st = 1;
  }
  atomic_store(&g_peer[f][t], st);
}

void cu_peer_enable(cu_runtime *rt, uint32_t a, uint32_t b) {
  if (a >= rt->ndev || b >= rt->ndev || a == b) return;
  pthread_once(&g_extra_once, extra_load);
  peer_one(&rt->devs[a], &rt->devs[b]);
  peer_one(&rt->devs[b], &rt->devs[a]);
}

void cu_device_uuid(CUdevice dev, char *out, size_t cap) {
  if (cap == 0) return;
  out[0] = 0;
  pthread_once(&g_extra_once, extra_load);
  CUuuid u;
  if (p_uuid == NULL || p_uuid(&u, dev) != CUDA_SUCCESS) return;
  const unsigned char *b = (const unsigned char *)u.bytes;
  snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}
