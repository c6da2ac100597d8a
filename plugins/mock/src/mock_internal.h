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
 * Files (one prefix, one concept each), from the top floor down; a file
 * uses only files below it (plugins/mock/layers_test.go):
 *   mock_plugin.c  negotiate, the table, info, probe, runtime create/destroy,
 *                  devices (the top: it names every file's functions)
 *   mock_graph.c   graphs (1.3): recorded lists replayed on stream workers,
 *                  through the op files' prepare helpers
 *   mock_memory.c  buffers, host buffers, copy, memset
 *   mock_module.c  modules, kernels, launch, launch_batch
 *   mock_gemm.c    GEMM plans and runs
 *   mock_quant.c   quantized and grouped matmul (1.4)
 *   mock_attention.c  paged KV cache append, attention (1.5)
 *   mock_comm.c    collectives across the mock's devices (1.6)
 *   mock_stream.c  stream workers, streams, events (below every op file)
 *   mock_runtime.c the bottom floor: the runtime table, lookups, lost
 *                  devices, the fault counters, buffer release
 *
 * Locking: the global mutex guards the runtime table; each runtime's `mu`
 * guards its handle tables, counters and fault settings; each stream's `mu`
 * guards its queue; the runtime's `ev_mu` guards event records. Locks are
 * never nested except rt->mu -> (nothing) and s->mu -> (nothing).
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

#include "gp_common.h"
#include "gp_graph.h"

/* The plugin's version: the ABI it implements, then its own patch level. */
#define MOCK_VERSION GP_ABI_VERSION ".0"
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

enum { OP_COPY, OP_MEMSET, OP_LAUNCH, OP_RECORD, OP_WAIT, OP_GEMM, OP_FN };

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
    /* OP_FN: the worker runs fn(arg) (not on a lost device); op free calls
     * release(arg) once, whether fn ran or not */
    struct { void (*fn)(void *); void (*release)(void *); void *arg; } fn;
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
  gp_handle_table graphs; /* 1.3 */
  gp_handle_table attns; /* 1.5: mock_attention.c */
  gp_handle_table comms; /* 1.6: mock_comm.c */
  uint64_t *used; /* device bytes per device */
  uint64_t host_bytes;
  int64_t fail_alloc_nth, fail_launch_nth;
  atomic_int *lost; /* per device, sticky */

  pthread_mutex_t ev_mu;
  pthread_cond_t ev_cv;
};

#define H(p) ((unsigned long long)(uintptr_t)(p))
#define U(x) ((unsigned long long)(x))

/* mock_runtime.c (the bottom floor): the runtime table, lookups, lost
 * devices, fault counters */
int mock_rt_register(mock_rt *rt, uintptr_t *h);
void mock_rt_unregister(gpurt_runtime *h);
/* Frees the runtime table when no runtime is alive; returns the live count. */
uint32_t mock_rt_shutdown(void);
gpurt_error *mock_get_rt(gpurt_runtime *h, mock_rt **out);
gpurt_error *mock_lookup(mock_rt *rt, gp_handle_table *t, const void *h, void **out);
uint64_t mock_now_ns(void);
int mock_is_lost(mock_rt *rt, uint32_t dev);
gpurt_error *mock_lost_err(const char *what, uint32_t dev);
gpurt_error *mock_check_dev(mock_rt *rt, uint32_t dev, const char *what);
gpurt_error *mock_buf_release(mock_buf *b, uintptr_t h);
int mock_alloc_fault_locked(mock_rt *rt);

/* mock_stream.c: stream workers, streams, events */
void mock_rec_release(mock_rt *rt, ev_rec *r);
void mock_op_free(mock_rt *rt, mock_op *op);
void mock_op_run(mock_stream *s, mock_op *op);
void mock_enqueue_many(mock_stream *s, mock_op *const *ops, uint64_t n);
void mock_submit(mock_stream *s, mock_op *op);
gpurt_error *mock_drain_device(mock_rt *rt, uint32_t dev);
void mock_stream_finish(mock_rt *rt, mock_stream *s);
gpurt_error *m_stream_create(gpurt_runtime *h, uint32_t d, gpurt_stream **out);
gpurt_error *m_stream_destroy(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *m_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *m_stream_query(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *m_event_create(gpurt_runtime *h, uint32_t d, uint32_t flags, gpurt_event **out);
gpurt_error *m_event_destroy(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *m_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh);
gpurt_error *m_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh);
gpurt_error *m_event_query(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *m_event_synchronize(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *m_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh, double *out_ms);

/* mock_memory.c: buffers, host buffers, copy, memset */
gpurt_error *m_buffer_alloc(gpurt_runtime *h, uint32_t d, uint64_t size, gpurt_buffer **out);
gpurt_error *m_buffer_free(gpurt_runtime *h, gpurt_buffer *buf);
gpurt_error *m_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out, void **out_ptr);
gpurt_error *m_host_free(gpurt_runtime *h, gpurt_host_buffer *buf);
gpurt_error *m_copy(gpurt_runtime *h, const gpurt_copy_args *args);
gpurt_error *m_memset(gpurt_runtime *h, const gpurt_memset_args *args);

/* mock_module.c: modules, kernels, launches */
gpurt_error *m_module_load(gpurt_runtime *h, const gpurt_module_load_args *args, gpurt_module **out);
gpurt_error *m_module_unload(gpurt_runtime *h, gpurt_module *mh);
gpurt_error *m_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name, uint64_t name_len,
                          gpurt_kernel **out);
gpurt_error *m_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out);
gpurt_error *m_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh, const gpurt_launch_args *args);
gpurt_error *m_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count, const gpurt_launch_item *items,
                            uint64_t *out_enqueued);

/* mock_gemm.c: GEMM */
gpurt_error *m_gemm_plan_create(gpurt_runtime *h, uint32_t d, const gpurt_gemm_desc *desc,
                                gpurt_gemm_plan **out);
gpurt_error *m_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *ph);
gpurt_error *m_gemm_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_gemm_plan *ph,
                        const gpurt_gemm_run_args *args);

/* Prepare helpers: check one operation against stream s exactly as its
 * eager call would and resolve it (enqueue nothing); graphs replay
 * through them. s may be a stand-in (only rt and dev are read). */
gpurt_error *mock_launch_prepare(mock_rt *rt, mock_stream *s, gpurt_kernel *kh, const gpurt_launch_args *args,
                                 gp_launch_exec *out);
uint64_t mock_launch_faults(mock_rt *rt, uint64_t n);
gpurt_error *mock_launch_fault_err(const gp_launch_exec *x);
gpurt_error *mock_gemm_prepare(mock_rt *rt, mock_stream *s, gpurt_gemm_plan *ph, const gpurt_gemm_run_args *args,
                               gp_gemm_exec **out);
/* An asynchronous copy on s (device and pinned endpoints); *out NULL when
 * the size is 0. */
gpurt_error *mock_copy_prepare(mock_rt *rt, mock_stream *s, const gpurt_copy_args *args, mock_op **out);
/* A memset on s (NULL: the default ordering); *out NULL when the size is
 * 0; *dev gets the buffer's device. */
gpurt_error *mock_memset_prepare(mock_rt *rt, mock_stream *s, const gpurt_memset_args *args, uint32_t *dev,
                                 mock_op **out);
/* An OP_FN op running fn(arg) (release(arg) when freed); on failure (no
 * memory) release(arg) has run. */
gpurt_error *mock_fn_op(const char *what, void (*fn)(void *), void (*release)(void *), void *arg, mock_op **out);
/* The recordable ops of 1.4 and 1.5, one signature: the eager call's
 * checks and resolution against stream s (a stand-in when only checking:
 * rt and dev are read), made into an op that is not submitted; *out NULL
 * when there is nothing to run (nnz 0, M 0). sh is the stream's handle
 * (NULL: graph_create/update; attention_run then does not check the
 * plan's stream); object the handle the slot takes (attention_run's), or
 * NULL; args the caller's struct. The graph's CALL items and the eager
 * calls (mock_call) both go through them. */
typedef gpurt_error *(*mock_prepare_fn)(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object,
                                        const void *args, mock_op **out);
gpurt_error *mock_quant_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object, const void *args,
                                mock_op **out);
gpurt_error *mock_grouped_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object, const void *args,
                                  mock_op **out);
/* fp8 KV caches (mock_fp8.c): one row of head_dim elements of an
 * appended row (rows, element src_elem, layout's qo type) into a page
 * region (element dst_elem): bytes copied for a 16-bit cache, e4m3(x /
 * scale) for an fp8 one; and one cache element as a float (times scale for
 * fp8). */
void mock_kv_store_row(const gpurt_kv_layout *l, unsigned char *page_base, uint64_t dst_elem,
                       const unsigned char *rows, uint64_t src_elem, float scale);
float mock_kv_load(const gpurt_kv_layout *l, const unsigned char *page_base, uint64_t elem, float scale);
gpurt_error *mock_kv_append_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object, const void *args,
                                    mock_op **out);
gpurt_error *mock_attention_run_prepare(mock_rt *rt, mock_stream *s, gpurt_stream *sh, void *object,
                                        const void *args, mock_op **out);
/* The eager call of a recordable op: the runtime, the stream (non-NULL,
 * live, its device not lost; a failed lookup is wrapped "<what>: " when
 * wrap), prep, then the op submitted to the stream. */
gpurt_error *mock_call(gpurt_runtime *h, gpurt_stream *sh, const char *what, int wrap, mock_prepare_fn prep,
                       void *object, const void *args);
/* The event's latest record with a reference, or NULL (never recorded). */
ev_rec *mock_latest_ref(mock_rt *rt, mock_event *ev);

/* mock_graph.c: graphs (1.3) */
void mock_graph_free(void *g);
gpurt_error *m_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args, gpurt_graph **out);
gpurt_error *m_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh);
gpurt_error *m_graph_update(gpurt_runtime *h, gpurt_graph *gh, gpurt_graph_update_args *args);
gpurt_error *m_graph_destroy(gpurt_runtime *h, gpurt_graph *gh);
gpurt_error *m_graph_recordable(gpurt_runtime *h, uint64_t slot, uint8_t *out); /* 1.7 */
/* mock_quant.c: quantized and grouped matmul (1.4) */
gpurt_error *m_quant_matmul(gpurt_runtime *h, gpurt_stream *sh, const gpurt_quant_matmul_args *args);
gpurt_error *m_grouped_gemm(gpurt_runtime *h, gpurt_stream *sh, const gpurt_grouped_gemm_args *args);

/* mock_attention.c: paged KV cache append and attention (1.5) */
void mock_attention_free(void *obj);
gpurt_error *m_kv_append(gpurt_runtime *h, gpurt_stream *sh, const gpurt_kv_append_args *args);
gpurt_error *m_attention_create(gpurt_runtime *h, uint32_t d, const gpurt_attention_desc *desc,
                                gpurt_attention **out);
gpurt_error *m_attention_destroy(gpurt_runtime *h, gpurt_attention *ah);
gpurt_error *m_attention_plan(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                              const gpurt_attention_plan_args *args);
gpurt_error *m_attention_run(gpurt_runtime *h, gpurt_stream *sh, gpurt_attention *ah,
                             const gpurt_attention_run_args *args);

/* mock_comm.c: collectives (1.6) */
void mock_comm_free(void *obj);
gpurt_error *m_comm_unique_id(gpurt_runtime *h, gpurt_comm_id *out);
gpurt_error *m_comm_create(gpurt_runtime *h, const gpurt_comm_create_args *args, gpurt_comm **out);
gpurt_error *m_comm_destroy(gpurt_runtime *h, gpurt_comm *ch);
gpurt_error *m_comm_abort(gpurt_runtime *h, gpurt_comm *ch);
gpurt_error *m_comm_query(gpurt_runtime *h, gpurt_comm *ch);
gpurt_error *m_comm_run(gpurt_runtime *h, gpurt_comm *ch, const gpurt_comm_run_args *args);

#endif /* GPURT_MOCK_INTERNAL_H */
