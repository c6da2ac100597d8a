/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_engine.h — csrc's implementation of gpurt_api over a gp_backend
 * (gp_backend.h): the runtime and handle tables, lifetimes, the lost-device
 * state, stats and every slot's front half. A plugin on the engine defines
 * its gp_backend and its entry, GP_ENGINE_ENTRY(my_backend) (below):
 *
 *   GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
 *     return gp_engine_negotiate(args, &my_backend);
 *   }
 *
 * Files (one concept each, from the top floor down; a file uses only the
 * files below it):
 *   gp_engine_api.c    the table, negotiation, plugin info, probe, runtimes,
 *                      devices, stats, control
 *   gp_engine_graph.c  graphs: items kept, re-resolved and recorded per replay
 *                      (or once, for a backend with graph_once)
 *   gp_engine_ops.c    quant/grouped matmul, kv_append, attention, collectives
 *                      (an op added later: its check, front half and slot in
 *                      its own gp_<op>.c, on this floor)
 *   gp_engine_exec.c   modules, kernels, launch, launch_batch, GEMM
 *   gp_engine_mem.c    buffers, host buffers, copy, memset, streams, events
 *   gp_engine_rt.c     the bottom floor: the runtime table, lookups, the lost
 *                      state, draining, operand views
 *
 * Locking: the global mutex guards the runtime table; handle lookups are
 * lock-free and each table locks its own inserts and removes (a leaf,
 * gp_handles.c); a runtime's `mu` guards its byte counters, the streams'
 * references and a module's kernel list, and no backend entry runs under
 * it; a graph's `mu` guards its items and replay order and is
 * held while its replay is recorded and launched (backend entries run
 * under it).
 */
#ifndef GPURT_CSRC_ENGINE_H_
#define GPURT_CSRC_ENGINE_H_

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>

#include "gp_backend.h"
#include "gp_comm.h"
#include "gp_graph.h"

#define H(p) ((unsigned long long)(uintptr_t)(p))
#define U(x) ((unsigned long long)(x))

/* The backend the plugin negotiated with (gp_engine_negotiate sets it,
 * before the core can call any slot). */
extern const gp_backend *gp_eb;

typedef struct gp_rt {
  uint32_t serial;
  uint32_t ndev;
  void *ctx; /* the backend's */
  gp_limits lim;
  pthread_mutex_t mu;
  gp_handle_table bufs, hosts, streams, events, modules, kernels, plans, graphs, attns, comms;
  uint64_t device_bytes, host_bytes;
  /* Bumped by every destroy of a handle (gp_take, module_unload): a
   * graph recorded once re-checks all its items only when it moved. */
  atomic_uint_fast64_t destroys;
  atomic_int *lost;        /* per device, sticky */
  char (*lost_why)[96];    /* the cause, written before lost is set */
} gp_rt;

typedef struct gp_buf {
  gp_mem m; /* offset 0, size = the allocation */
} gp_buf;

typedef struct gp_host {
  gp_mem m;
  void *ptr;
} gp_host;

typedef struct gp_stream {
  gp_queue q;
  int refs; /* guarded by rt->mu: the table's and drainers' */
} gp_stream;

typedef struct gp_event {
  void *ev;
  uint32_t dev, flags;
} gp_event;

typedef struct gp_module {
  void *mod;
  uint32_t dev;
  int32_t format;
  char name[64];
  uintptr_t *kernels; /* built-in modules: one cached handle per built-in */
  uint32_t nkernels, capk;
} gp_module;

typedef struct gp_kernel {
  void *k;
  uint32_t dev;
  uintptr_t module;
  const gp_builtin_kernel *builtin;
  char name[128];
  gpurt_kernel_info info;
} gp_kernel;

typedef struct gp_plan {
  void *plan;
  uint32_t dev;
  gpurt_gemm_desc desc;
} gp_plan;

typedef struct gp_attn {
  void *obj;
  uint32_t dev;
  gpurt_attention_desc d;
  pthread_mutex_t mu; /* guards the plan state below */
  int planned;
  gpurt_stream *stream; /* the stream of the last plan */
  gp_attention_sched sched;
  /* Bumped (atomically, under mu) by a plan that changes what attention_run's
   * check reads: planned, the stream, or the schedule's batch, rows or
   * pages. A kept graph (graph_once) skips re-checking an attention item
   * whose object's gen and replay stream are those of its last check. */
  uint64_t gen;
} gp_attn;

typedef struct gp_comm {
  void *obj;
  uint32_t nranks, first_rank, local;
  uint32_t devs[GP_COMM_MAX_LOCAL];
  atomic_int aborted;
} gp_comm;

/* Every slot of gpurt_api is gp_e_<slot> (gp_engine_api.c puts them in its
 * table), declared here from the header's prototypes. */
#define GP_E_DECL_(name, minor, ret, params) ret gp_e_##name params;
GP_ZSLOTS(GP_E_DECL_)
#undef GP_E_DECL_

/* ---- gp_engine_rt.c: the bottom floor ---- */
int gp_rt_register(gp_rt *rt, uintptr_t *h);
void gp_rt_unregister(gpurt_runtime *h);
uint32_t gp_rt_live(void); /* the live runtimes */
gpurt_error *gp_get_rt(gpurt_runtime *h, gp_rt **out);
/* A slot's first statement: declares rt (runtime handle h's) and e (NULL),
 * returning gp_get_rt's error when h is no live runtime. */
#define GP_RT_OR_RETURN(h)              \
  gp_rt *rt;                            \
  gpurt_error *e = gp_get_rt((h), &rt); \
  if (e) return e
/* A slot's out pointer: INVALID_ARGUMENT "<op>: out is NULL" returned when
 * it is NULL, else *out cleared (what a failure leaves). */
#define GP_OUT_OR_RETURN(out, op)                                                        \
  if ((out) == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "%s: out is NULL", (op)); \
  *(out) = NULL
gpurt_error *gp_lookup(gp_rt *rt, gp_handle_table *t, const void *h, void **out);
/* Inserts obj into t; OUT_OF_MEMORY "<op>: too many <kind>s". */
gpurt_error *gp_insert(gp_rt *rt, gp_handle_table *t, void *obj, const char *op, uintptr_t *out);
/* gp_insert, the handle in *out; on a failure obj is handed to drop first
 * (its making undone). */
gpurt_error *gp_insert_or_drop(gp_rt *rt, gp_handle_table *t, void *obj, const char *op,
                               void (*drop)(gp_rt *rt, void *obj), uintptr_t *out);
/* A create's last statement: obj into t (gp_insert_or_drop, with rt and the
 * caller's e), its handle in *out, NULL returned. */
#define GP_RETURN_INSERTED(t, obj, op, drop, out)                                 \
  do {                                                                            \
    uintptr_t h_;                                                                 \
    if ((e = gp_insert_or_drop(rt, (t), (obj), (op), (drop), &h_))) return e;     \
    *(out) = (void *)h_;                                                          \
    return NULL;                                                                  \
  } while (0)
/* Takes h out of t (the handle's error otherwise). */
gpurt_error *gp_take(gp_rt *rt, gp_handle_table *t, const void *h, void **out);
/* A destroy slot: a NULL handle x is a no-op; else runtime h's table at
 * byte offset table of gp_rt (offsetof) gives x up (a failure wrapped
 * "<what>: " when what is not NULL) and its object is handed to drop. */
gpurt_error *gp_destroy(gpurt_runtime *h, size_t table, const void *x, const char *what,
                        void (*drop)(gp_rt *rt, void *obj));
int gp_is_lost(gp_rt *rt, uint32_t dev);
gpurt_error *gp_lost_err(gp_rt *rt, const char *what, uint32_t dev);
/* A device index the caller named: exists and is not lost. */
gpurt_error *gp_check_dev(gp_rt *rt, uint32_t dev, const char *what);
/* Asks the backend's device_check for every device not yet lost. */
void gp_poll_lost(gp_rt *rt);
gpurt_error *gp_after_wait(gp_rt *rt, const char *what, uint32_t dev);
/* Waits until every stream of the runtime on dev (UINT32_MAX: all) drained. */
gpurt_error *gp_drain_device(gp_rt *rt, uint32_t dev);
void gp_stream_unref(gp_rt *rt, gp_stream *s);
/* An enqueueing call's stream: non-NULL, valid, its device not lost; a
 * failed lookup is wrapped "<what>: " when wrap. */
gpurt_error *gp_stream_get(gp_rt *rt, gpurt_stream *sh, const char *what, int wrap, gp_stream **out);
/* The buffer of handle h resolved at off (no range check). */
gpurt_error *gp_buf_get(gp_rt *rt, gpurt_buffer *h, gp_buf **out);
void gp_mem_at(const gp_buf *b, uint64_t off, gp_mem *out);

/* Operand views: buffer h on device dev with [off, off + bytes) inside it,
 * resolved into *out. The three wordings of the families (each family's
 * messages are part of the contract):
 *   GP_VIEW_OPERAND  "<what>: operand <name>: ..." / "spans N bytes"  (1.4)
 *   GP_VIEW_NAMED    "<what>: <name> ..." / "needs N bytes"           (1.5)
 *   GP_VIEW_GEMM     as OPERAND, the extent in elements of dtype      (1.1) */
enum { GP_VIEW_OPERAND = 1, GP_VIEW_NAMED = 2, GP_VIEW_GEMM = 3 };
gpurt_error *gp_view(gp_rt *rt, int style, uint32_t dev, const char *what, const char *name, gpurt_buffer *h,
                     uint64_t off, uint64_t bytes, int32_t dtype, gp_mem *out);
/* A family's operands, in the order they are checked: gp_views resolves
 * v[0..n) with gp_view (style OPERAND or NAMED) and stops at the first error. */
typedef struct gp_view_req {
  const char *name;
  gpurt_buffer *h;
  uint64_t off, bytes;
  gp_mem *out;
} gp_view_req;
gpurt_error *gp_views(gp_rt *rt, int style, uint32_t dev, const char *what, const gp_view_req *v, size_t n);

/* ---- gp_engine_mem.c ---- */
/* Front halves the graphs share (s: the stream, or a recording queue's
 * stand-in; run 0: check only). A graph copy's stream is the replay's. */
gpurt_error *gp_copy_async(gp_rt *rt, gp_stream *s, const gpurt_copy_args *args, int run);
gpurt_error *gp_memset_on(gp_rt *rt, gp_stream *s, const gpurt_memset_args *args, int run);
/* An event item of a graph: record (1) or wait (0) on s. */
gpurt_error *gp_event_on(gp_rt *rt, gp_stream *s, gpurt_event *eh, int record, int run);

/* ---- gp_engine_exec.c ---- */
/* One launch checked against s and resolved into *out. */
gpurt_error *gp_launch_resolve(gp_rt *rt, gp_stream *s, gpurt_kernel *kh, const gpurt_launch_args *args,
                               gp_launch_op *out);
gpurt_error *gp_gemm_on(gp_rt *rt, gp_stream *s, gpurt_gemm_plan *ph, const gpurt_gemm_run_args *args, int run);
void gp_module_free(gp_rt *rt, gp_module *m);

/* ---- gp_engine_ops.c ---- */
/* The front half of each recordable op (GP_ZCALLS, gp_zslots.h), one
 * signature: the eager call's checks and resolution against s, then (run)
 * the backend's run on s. sh is the stream's handle (NULL when only
 * checking: attention_run then does not check the plan's stream); object
 * the handle the slot takes, or NULL. gp_<slot>_on is in gp_engine_ops.c
 * or, for an op added later, in the op's own csrc/gp_<slot>.c. */
typedef gpurt_error *(*gp_call_fn)(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args,
                                   int run);
#define GP_ON_DECL_(name, NAME, minor, idx, atype, obj)                                            \
  gpurt_error *gp_##name##_on(gp_rt *rt, gp_stream *s, gpurt_stream *sh, void *object, const void *args, \
                              int run);
GP_ZCALLS(GP_ON_DECL_)
#undef GP_ON_DECL_
/* The eager call of a recordable op, its slot gp_e_<slot>: the runtime, the
 * stream (non-NULL, live, its device not lost; a failed lookup wrapped
 * "<what>: " when wrap), then fn with run 1. */
gpurt_error *gp_call(gpurt_runtime *h, gpurt_stream *sh, const char *what, int wrap, gp_call_fn fn, void *object,
                     const void *args);
void gp_attn_free(gp_rt *rt, gp_attn *a);
void gp_comm_free(gp_rt *rt, gp_comm *c);

/* ---- gp_engine_graph.c ---- */
void gp_graph_free(gp_rt *rt, void *g);

/* ---- gp_engine_api.c ---- */
int32_t gp_engine_negotiate(gpurt_negotiate_args *args, const gp_backend *b);

/* The entry of a plugin on the engine, its one exported symbol: the
 * engine's negotiation over the plugin's table (no side effects). */
#define GP_ENGINE_ENTRY(backend)                                            \
  GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) { \
    return gp_engine_negotiate(args, &(backend));                           \
  }

#endif /* GPURT_CSRC_ENGINE_H_ */
