/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_internal.h — the mock plugin's objects and the functions its files
 * share. The mock is a real CPU implementation of every function of
 * gpurt.h, the reference the GPU backends are compared against.
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
 * The mock is a backend of csrc's engine (csrc/gp_engine.h): the engine
 * implements every slot of gpurt_api (handles, checks, resolution of every
 * operand, errors) and calls the mock's gp_backend entries with resolved
 * operands (gp_mem: the host address of the mock's private allocation in
 * `addr`). The mock's files implement those entries and the math only.
 *
 * Files (one prefix, one concept each), from the top floor down; a file
 * uses only files below it (plugins/mock/layers_test.go):
 *   mock_plugin.c  probe, open (options, faults), devices, control, the
 *                  gp_backend table and the entry (the top: it names every
 *                  file's entries)
 *   mock_graph.c   recording queues and their replay (graph_begin .. launch)
 *   mock_memory.c  allocations with guards, copy, memset
 *   mock_module.c  the built-in module, kernels, launch, launch_many
 *   mock_gemm.c    GEMM runs (csrc/gp_gemm.c does the math)
 *   mock_quant.c   quantized and grouped matmul (1.4)
 *   mock_attention.c  paged KV cache append, attention (1.5)
 *   mock_comm.c    collectives across the mock's devices (1.6)
 *   mock_stream.c  stream workers, queues, events (below every op file)
 *   mock_runtime.c the bottom floor: time, the lost state, fault counters
 *
 * Locking: each context's `mu` guards its counters and fault settings;
 * each stream's `mu` guards its queue; the context's `ev_mu` guards event
 * records. Locks are never nested.
 */
#ifndef GPURT_MOCK_INTERNAL_H
#define GPURT_MOCK_INTERNAL_H

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

#include "gp_backend.h"
#include "gp_comm.h"

/* The plugin's version: the ABI it implements, then its own patch level. */
#define MOCK_VERSION GP_ABI_VERSION ".0"
#define MOCK_DEFAULT_MEMORY (16ull << 30)
#define MOCK_MAX_DEVICES 64u
#define MOCK_MAX_RANKS 1024u /* a communicator's ranks (pairwise counters: 16 MiB) */
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

enum { OP_COPY, OP_MEMSET, OP_LAUNCH, OP_RECORD, OP_WAIT, OP_FN };

typedef struct mock_op {
  struct mock_op *next;
  int kind;
  int sync;     /* a caller waits for `finished`; it frees the op */
  int finished;
  union {
    struct { void *dst; const void *src; uint64_t size; } copy;
    struct { unsigned char *dst; uint64_t size; uint32_t value, es; } fill;
    gp_launch_exec launch;
    struct { ev_rec *rec; struct mock_event *ev; } ev; /* OP_RECORD, OP_WAIT: the record;
                                                          in a recording, ev (published
                                                          when the replay is launched) */
    /* OP_FN: the worker runs fn(arg) (not on a lost device); op free calls
     * release(arg) once, whether fn ran or not */
    struct { void (*fn)(void *); void (*release)(void *); void *arg; } fn;
  } u;
} mock_op;

typedef struct mock_rt mock_rt;

typedef struct mock_stream {
  mock_rt *rt;
  uint32_t dev;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* the worker waits for work */
  pthread_cond_t done_cv; /* callers wait for progress */
  mock_op *head, *tail;
  uint64_t pending; /* queued or running */
  int stop;
  pthread_t thread;
} mock_stream;

/* A recording queue (graph_begin): ops appended in order, replayed by
 * mock_graph_launch. */
typedef struct mock_recording {
  mock_rt *rt;
  uint32_t dev;
  mock_op *head, *tail;
  int attention; /* an attention run is recorded (refuse_replay_nth counts this replay) */
} mock_recording;

struct mock_rt {
  uint32_t ndev;
  uint64_t memory; /* per device */
  unsigned delay_us;
  int gemm_threads;

  pthread_mutex_t mu;
  uint64_t *used; /* device bytes per device */
  int64_t fail_alloc_nth, fail_launch_nth;
  int64_t refuse_replay_nth; /* the Nth replay holding an attention run is refused */
  atomic_int *lost; /* per device, sticky */

  pthread_mutex_t ev_mu;
  pthread_cond_t ev_cv;
};

#define H(p) ((unsigned long long)(uintptr_t)(p))
#define U(x) ((unsigned long long)(x))

/* mock_runtime.c (the bottom floor): time, lost devices, fault counters */
uint64_t mock_now_ns(void);
int mock_is_lost(mock_rt *rt, uint32_t dev);
/* Consumes one allocation from the fault counter; 1 when it must fail. */
int mock_alloc_fault(mock_rt *rt);
/* Counts n launches against fail_launch_nth; the index of the launch the
 * fault refuses, or n when none is refused. */
uint64_t mock_launch_faults(mock_rt *rt, uint64_t n);
/* Counts one replay holding an attention run against refuse_replay_nth;
 * 1 when it must be refused. */
int mock_replay_fault(mock_rt *rt);

/* mock_stream.c: stream workers, queues, events */
void mock_rec_release(mock_rt *rt, ev_rec *r);
void mock_op_free(mock_rt *rt, mock_op *op);
void mock_op_run(mock_rt *rt, uint32_t dev, mock_op *op);
/* A new op of kind (OUT_OF_MEMORY "<what>: no memory" when none). */
gpurt_error *mock_op_new(const char *what, int kind, mock_op **out);
/* An OP_FN op running fn(arg) (release(arg) when freed); on failure (no
 * memory) release(arg) has run. */
gpurt_error *mock_fn_op(const char *what, void (*fn)(void *), void (*release)(void *), void *arg, mock_op **out);
void mock_enqueue_many(mock_stream *s, mock_op *const *ops, uint64_t n);
/* Enqueues op on q (appends it when q records) and, when op->sync, waits
 * for it and frees it. */
void mock_submit(gp_queue *q, mock_op *op);
/* An OP_FN op submitted to q (the common tail of the op files). */
gpurt_error *mock_submit_fn(gp_queue *q, const char *what, void (*fn)(void *), void (*release)(void *), void *arg);
/* The host address of a resolved operand. */
static inline void *mock_ptr(const gp_mem *m) { return (void *)(uintptr_t)m->addr; }
ev_rec *mock_latest_ref(mock_rt *rt, mock_event *ev);
/* Publishes a new record of ev (the event's latest) with 2 references. */
ev_rec *mock_rec_publish(mock_rt *rt, mock_event *ev);
gpurt_error *mock_queue_create(void *ctx, uint32_t dev, gp_queue *out);
void mock_queue_destroy(void *ctx, gp_queue *q);
gpurt_error *mock_queue_sync(void *ctx, gp_queue *q);
gpurt_error *mock_queue_query(void *ctx, gp_queue *q, uint64_t *pending);
gpurt_error *mock_event_create(void *ctx, uint32_t dev, uint32_t flags, void **ev);
void mock_event_destroy(void *ctx, void *ev);
gpurt_error *mock_event_record(void *ctx, void *ev, gp_queue *q);
gpurt_error *mock_event_wait(void *ctx, gp_queue *q, void *ev);
gpurt_error *mock_event_query(void *ctx, void *ev, int *done);
gpurt_error *mock_event_sync(void *ctx, void *ev);
gpurt_error *mock_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which);

/* mock_memory.c: allocations, copy, memset */
gpurt_error *mock_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out);
gpurt_error *mock_mem_free(void *ctx, gp_mem *m);
gpurt_error *mock_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr);
void mock_host_free(void *ctx, gp_mem *m);
gpurt_error *mock_copy(void *ctx, gp_queue *q, const gp_copy *c);
gpurt_error *mock_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value, uint32_t es);
/* Test hook (runtime_control debug_corrupt_guard): one byte past the end. */
void mock_corrupt_guard(const gp_mem *m);

/* mock_module.c: the built-in module, kernels, launches */
gpurt_error *mock_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod);
void mock_module_unload(void *ctx, void *mod);
gpurt_error *mock_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                             gpurt_kernel_info *info);
gpurt_error *mock_launch(void *ctx, gp_queue *q, const gp_launch_op *l);
gpurt_error *mock_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n, uint64_t *enqueued);

/* mock_gemm.c */
gpurt_error *mock_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r);
/* The run of each recordable op (GP_ZCALLS, csrc/gp_zslots.h), mock_<slot>
 * in its mock_<family>.c (quant_matmul, grouped_gemm: mock_quant.c;
 * kv_append, attention_run: mock_attention.c) and put in the table by
 * mock_plugin.c. */
#define MOCK_RUN_DECL_(name, NAME, minor, idx, atype, obj) \
  gpurt_error *mock_##name(void *ctx, gp_queue *q, const gp_##name##_op *r);
GP_ZCALLS(MOCK_RUN_DECL_)
#undef MOCK_RUN_DECL_
/* mock_attention.c (1.5) */
gpurt_error *mock_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj);
void mock_attention_destroy(void *ctx, void *obj);
gpurt_error *mock_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                                 const gp_attention_sched *sched);
/* fp8 KV caches (mock_fp8.c, 1.8): one row of head_dim elements of an
 * appended row (rows, element src_elem, the layout's qo type) into a page
 * region (element dst_elem): bytes copied for a 16-bit cache, e4m3(x /
 * scale) for an fp8 one; and one cache element as a float (times scale for
 * fp8). */
void mock_kv_store_row(const gpurt_kv_layout *l, unsigned char *page_base, uint64_t dst_elem,
                       const unsigned char *rows, uint64_t src_elem, float scale);
float mock_kv_load(const gpurt_kv_layout *l, const unsigned char *page_base, uint64_t elem, float scale);
/* mock_comm.c (1.6) */
gpurt_error *mock_comm_unique_id(void *ctx, uint8_t id[GPURT_COMM_ID_BYTES]);
gpurt_error *mock_comm_create(void *ctx, const gpurt_comm_create_args *a, uint32_t nranks, void **comm);
void mock_comm_destroy(void *ctx, void *comm);
void mock_comm_abort(void *ctx, void *comm);
gpurt_error *mock_comm_query(void *ctx, void *comm, const char *what);
gpurt_error *mock_comm_run(void *ctx, void *comm, const gp_coll_item *items, uint64_t n);
/* mock_graph.c: recordings */
gpurt_error *mock_graph_begin(void *ctx, uint32_t dev, gp_queue *rec);
gpurt_error *mock_graph_end(void *ctx, gp_queue *rec, int abort, void **exec);
gpurt_error *mock_graph_launch(void *ctx, void *exec, gp_queue *q);
void mock_graph_destroy(void *ctx, void *exec);

#endif /* GPURT_MOCK_INTERNAL_H */
