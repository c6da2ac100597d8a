/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_backend.h — the internal backend table under csrc's framework.
 *
 * csrc implements gpurt_api (abi/gpurt.h) once for every plugin (the
 * engine, csrc/gp_engine*.c; the mock, CUDA and Metal are on it): the
 * negotiation, the table, the handle tables, lifetimes, the lost-device
 * state, stats, and each slot's front half (read the caller's struct by its
 * struct_size, check the contract, resolve every handle and operand to the
 * backend's objects and device addresses, build the errors). What only a
 * device can do goes through this table: about fifteen primitives (memory,
 * the copy kinds, memset, modules, launch, streams, events, graph build
 * and replay) and one `run` per operation that receives already-resolved
 * pointers and descriptors. A backend implements this table and nothing
 * else; it never sees a gpurt_* handle, a caller's struct or a
 * struct_size: where an entry takes an ABI struct it is the framework's
 * checked, full-size copy (ggml-backend's iface structs and database/sql's
 * driver package have the same shape).
 *
 * Who calls what, and under which lock:
 *   - The framework calls every entry; never two calls of one entry for one
 *     object at once unless the entry says so. No framework lock is held
 *     while a backend entry runs, except a graph's (its replay is recorded
 *     and launched under it) and an attention object's around
 *     attention_plan.
 *   - `ctx` is the backend's runtime object (from `open`); `dev` an index
 *     below the device count `open` returned, checked and not lost.
 *   - An entry returns NULL or a new gpurt_error made with gp_err (the
 *     plugin's prefix is added there). A vendor code goes through
 *     gp_err_vendor. The framework's sticky lost state of a device comes
 *     from device_check (asked after open and after every control); an
 *     entry's DEVICE_LOST is passed to the caller as it is.
 *   - Entries marked "(optional)" may be NULL; the framework then answers
 *     the slot with GPURT_ERR_UNSUPPORTED naming it, or (where said) falls
 *     back. Every other entry must be set for the ABI minor the backend
 *     declares (gp_backend.abi_minor): gp_backend_check refuses a table
 *     with a promised entry unset, and csrc/test checks every plugin's.
 *
 * Metal fits as it is: a gp_mem carries the backend's buffer object
 * (id<MTLBuffer>, retained by the backend) and an offset, not only a flat
 * address; a gp_queue is a command queue per stream; graph_begin/graph_end
 * record into the backend's own command list (Metal: an indirect command
 * buffer or a recorded list of encoders); gemm_run may use MPS.
 */
#ifndef GPURT_CSRC_BACKEND_H_
#define GPURT_CSRC_BACKEND_H_

#include "gp_attention.h"
#include "gp_common.h"
#include "gp_quant.h"

/* ---- resolved operands ---------------------------------------------------- */

/* A piece of device (or pinned host) memory, resolved from a handle and an
 * offset by the framework: `obj` is what the backend returned from
 * mem_alloc / host_alloc (its buffer object), `addr` the device address of
 * byte `offset` when the backend has flat addresses (CUDA: a CUdeviceptr;
 * mock: the host address of its private allocation), 0 otherwise (Metal:
 * use obj + offset), `size` the bytes from `offset` to the end of the
 * allocation (the framework has checked that what the operation touches
 * fits). A NULL operand is all zero. */
typedef struct gp_mem {
  void *obj;
  uint64_t addr;
  uint64_t offset;
  uint64_t size;
  uint32_t dev;
  uint32_t pinned; /* 1: host memory from host_alloc */
} gp_mem;

/* A stream as the backend sees it: its own object (`q`), its device. The
 * framework owns the struct (one per gpurt_stream handle) and keeps it
 * alive while any call uses it. */
typedef struct gp_queue {
  void *q;
  uint32_t dev;
  uint32_t capturing; /* GP_QUEUE_*: 0 runs, else a recording queue of graph_begin */
  /* Recording queues: the graph's item count (set before graph_begin) and
   * the index of the item being recorded (what graph_patch names). */
  uint64_t items, item;
} gp_queue;

/* gp_queue.capturing. */
enum {
  GP_QUEUE_RUN = 0,
  GP_QUEUE_RECORD = 1,  /* entries record what they would enqueue */
  GP_QUEUE_PREPARE = 2  /* graph_once with graph_capture: entries make what
                           they make lazily (workspaces, modules, library
                           handles) and enqueue and record nothing */
};

/* The copy kinds (the framework has already checked ranges and flags). */
enum {
  GP_COPY_H2D = 1, /* src.addr is a host pointer (pageable or pinned) */
  GP_COPY_D2H = 2, /* dst.addr is a host pointer */
  GP_COPY_D2D = 3,
  GP_COPY_H2H = 4  /* host to host (pinned or pageable) */
};

typedef struct gp_copy {
  int kind;            /* GP_COPY_* */
  int sync;            /* 1: return when the copy has completed */
  gp_mem dst, src;     /* host ends: addr is the host pointer, obj NULL
                          for pageable memory */
  uint64_t size;       /* > 0 */
} gp_copy;

/* What the framework checks a launch's geometry against (open fills it;
 * the strictest of the backend's devices). */
typedef struct gp_limits {
  uint32_t max_threads;  /* per block */
  uint32_t max_block_z;
  uint32_t max_grid[3];
  uint32_t max_shared;   /* dynamic shared memory, bytes */
} gp_limits;

/* ---- per-op descriptors (what each run receives) ------------------------------- */
/* Each op's run gets its caller struct already read and checked and its
 * operands resolved. The structs below are the framework's, so a new field
 * of the ABI struct is one line here, one in the front half. Handle fields
 * of an embedded ABI struct are never to be read by a backend. */

typedef struct gp_launch_op {
  void *kernel;                     /* the backend's kernel object (kernel_get) */
  const gp_builtin_kernel *builtin; /* the built-in's row, NULL otherwise */
  const char *name;                 /* the kernel's name, for messages */
  uint32_t grid[3], block[3];
  uint32_t shared_bytes;
  uint32_t num_args;
  gp_mem bufs[GPURT_MAX_KERNEL_PARAMS];     /* BUFFER args (by index) */
  uint64_t scalar[GPURT_MAX_KERNEL_PARAMS]; /* scalar bits (by index), masked to their size */
  int32_t kinds[GPURT_MAX_KERNEL_PARAMS];
  uint32_t sizes[GPURT_MAX_KERNEL_PARAMS];
} gp_launch_op;

typedef struct gp_gemm_op {
  void *plan;                   /* the backend's plan (gemm_plan), or NULL */
  gpurt_gemm_desc d;
  gp_mem a, b, c, dd, bias, scale_a, scale_b, scale_d, workspace;
  uint64_t workspace_size;
  double alpha, beta;
  gp_mem norm_weight; /* d.prologue GPURT_GEMM_PROLOGUE_RMSNORM's (k elements), else unset */
  double norm_eps;
} gp_gemm_op;

typedef struct gp_quant_op {
  gp_quant_mm c;                /* checked (gp_quant.h) */
  gp_mem w, scales, biases, x, y;
} gp_quant_op;

typedef struct gp_grouped_op {
  gp_grouped c;                 /* checked, c.total_m >= 1; c.a.m_sizes borrowed for the call */
  gp_mem a, b, d, scale_a, scale_b;
  gp_mem m_counts;              /* c.dev_counts: the uint32 counts (1.11), read when the op runs */
} gp_grouped_op;

typedef struct gp_kv_pages_op {
  gp_mem k, v, indptr, indices, last_page_len;
  uint64_t num_pages;
} gp_kv_pages_op;

typedef struct gp_kv_append_op {
  gpurt_kv_layout layout;
  uint32_t batch;
  uint64_t nnz;                 /* >= 1 */
  gp_kv_pages_op pages;
  gp_mem k_rows, v_rows, batch_indices, positions;
  float k_scale, v_scale;       /* an fp8_e4m3 cache's (1.8): checked positive and finite; else 0 */
  /* 1.10: the rotary embedding on the way in (a 16-bit cache: checked;
   * head_dim 64, 128 or 256, so a head's halves are whole 16-byte pieces);
   * inv_freq unset (addr 0, obj NULL): none */
  gp_mem inv_freq, q;           /* q unset: K alone */
  uint32_t num_qo_heads;        /* q's heads, 0 without q */
} gp_kv_append_op;

typedef struct gp_attention_op {
  void *obj;                    /* the backend's attention (attention_create) */
  gp_mem q, o, qo_indptr;       /* qo_indptr: prefill only */
  gp_kv_pages_op pages;
  float k_scale, v_scale;       /* an fp8_e4m3 cache's (1.8): checked positive and finite; else 0 */
} gp_attention_op;

/* One operation of a comm_run group, checked and resolved. */
typedef struct gp_coll_item {
  gpurt_coll_op op;             /* checked (gp_coll_op_read) */
  gp_queue *q;                  /* the rank's stream */
  uint32_t dev;                 /* the rank's device */
  gp_mem send, recv;            /* zero when unused */
} gp_coll_item;

/* The descriptor of each recordable op (GP_ZCALLS, gp_zslots.h) is
 * gp_<slot>_op: the older short names stay. */
typedef gp_quant_op gp_quant_matmul_op;
typedef gp_grouped_op gp_grouped_gemm_op;
typedef gp_attention_op gp_attention_run_op;

/* gp_backend.unrecordable bits: GP_REC_<SLOT>, one per recordable op
 * (GP_REC_QUANT_MATMUL 1, GP_REC_GROUPED_GEMM 2, GP_REC_KV_APPEND 4,
 * GP_REC_ATTENTION_RUN 8, ...). */
#define GP_REC_BIT_(name, NAME, minor, idx, atype, obj) GP_REC_##NAME = 1u << (idx),
enum { GP_ZCALLS(GP_REC_BIT_) };
#undef GP_REC_BIT_

/* ---- the table --------------------------------------------------------------- */

typedef struct gp_backend {
  const char *name;     /* "mock", "cuda", "metal": the message prefix */
  const char *version;  /* derived from GPURT_ABI_MINOR (GP_ABI_VERSION ".N") */
  uint32_t abi_minor;   /* the minor this backend implements */
  int32_t priority;
  /* runtime_control keys whose value is a buffer handle: the framework
   * resolves it and passes the buffer to control (NULL-terminated; may be
   * NULL). */
  const char *const *buffer_keys;
  /* The recordable ops (GPURT_GRAPH_OP_CALL items) the backend cannot
   * record yet, GP_REC_* bits (0: all of them are). graph_recordable
   * answers 0 for them and a CALL item of one is refused naming the slot. */
  uint32_t unrecordable;
  /* 1: an executable replays many times (CUDA: an instantiated CUDA
   * graph). The framework then records a graph once, at graph_create and
   * again after each graph_update, keeps the executable, and at every
   * graph_launch checks the items' handles (all of them again only when
   * an object of the runtime was destroyed since the last check; CALL
   * items of attention_run always) before one graph_launch of it; the
   * backend orders the replays of one executable among themselves (as
   * cuGraphLaunch does) and may refuse a replay in graph_launch (a
   * captured attention plan that no longer fits). 0 (mock): the
   * framework records every replay anew and destroys it after its
   * launch. */
  uint32_t graph_once;

  /* ---- process (no lock held) ---- */
  /* Whether the backend can run here, without side effects on the device
   * (gpurt.h's probe rules); a is read and checked, its devices array
   * checked; the framework writes it back. */
  gpurt_error *(*probe)(gpurt_probe_args *a);
  /* Opens the backend for a runtime: parses its own options (a is read and
   * checked; options may be NULL), makes its context, returns the device
   * count and the launch limits. */
  gpurt_error *(*open)(const gpurt_runtime_create_args *a, void **ctx, uint32_t *ndev, gp_limits *lim);
  /* Frees the context after every object of it was destroyed. */
  void (*close)(void *ctx);
  /* Fills a zeroed, full-size info (the framework writes it back). */
  gpurt_error *(*device_info)(void *ctx, uint32_t dev, gpurt_device_info *out);
  /* Loss test (optional): DEVICE_LOST, with the cause as its message
   * ("injected fault"), when the device fell off; asked after open and
   * after every control. */
  gpurt_error *(*device_check)(void *ctx, uint32_t dev);
  /* runtime_control for the backend's own keys (optional: UNSUPPORTED);
   * buf is the resolved buffer when the key is one of buffer_keys. */
  gpurt_error *(*control)(void *ctx, const char *key, uint64_t key_len, int64_t value, const gp_mem *buf);

  /* ---- memory (no lock held) ---- */
  gpurt_error *(*mem_alloc)(void *ctx, uint32_t dev, uint64_t size, gp_mem *out);
  /* The framework has drained the device's queues first. An error (the
   * memory is freed all the same) is wrapped "buffer H (N bytes on device
   * D): ". */
  gpurt_error *(*mem_free)(void *ctx, gp_mem *m);
  gpurt_error *(*host_alloc)(void *ctx, uint64_t size, gp_mem *out, void **host_ptr);
  void (*host_free)(void *ctx, gp_mem *m);
  /* q NULL: synchronous and immediate (the framework has drained the
   * devices the contract orders the copy after). */
  gpurt_error *(*copy)(void *ctx, gp_queue *q, const gp_copy *c);
  gpurt_error *(*memset)(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                         uint32_t element_size);

  /* ---- streams and events (no lock held; a queue is used by many threads
   * at once: the backend orders its own submissions) ---- */
  gpurt_error *(*queue_create)(void *ctx, uint32_t dev, gp_queue *out);
  /* Waits for the queue's work, then frees it. */
  void (*queue_destroy)(void *ctx, gp_queue *q);
  gpurt_error *(*queue_sync)(void *ctx, gp_queue *q);
  /* *pending: the operations queued or running (0 when idle). */
  gpurt_error *(*queue_query)(void *ctx, gp_queue *q, uint64_t *pending);
  gpurt_error *(*event_create)(void *ctx, uint32_t dev, uint32_t flags, void **ev);
  void (*event_destroy)(void *ctx, void *ev);
  /* q NULL: the event completes now (the framework drained the device). */
  gpurt_error *(*event_record)(void *ctx, void *ev, gp_queue *q);
  gpurt_error *(*event_wait)(void *ctx, gp_queue *q, void *ev);
  /* *done: 1 when complete or never recorded. */
  gpurt_error *(*event_query)(void *ctx, void *ev, int *done);
  gpurt_error *(*event_sync)(void *ctx, void *ev);
  /* FAILED_PRECONDITION (never recorded) or NOT_READY, *which 0 for
   * start and 1 for end (the framework words the message). */
  gpurt_error *(*event_elapsed)(void *ctx, void *start, void *end, double *ms, int *which);

  /* ---- modules and launch ---- */
  gpurt_error *(*module_load)(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod);
  void (*module_unload)(void *ctx, void *mod);
  /* The kernel's object and what the backend knows of its parameters
   * (info->num_params GP_PARAMS_UNKNOWN when it cannot tell). For a
   * built-in module the framework has found the name in gp_builtin_kernels. */
  gpurt_error *(*kernel_get)(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                             gpurt_kernel_info *info);
  /* Enqueues one resolved launch; the framework checked it against
   * kernel_get's parameters, the limits and the built-in table. */
  gpurt_error *(*launch)(void *ctx, gp_queue *q, const gp_launch_op *l);
  /* Enqueues n launches contiguously (optional: the framework loops over
   * launch). *enqueued: how many were, also on an error. */
  gpurt_error *(*launch_many)(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n,
                              uint64_t *enqueued);

  /* ---- graphs ---- */
  /* Recording: graph_begin makes a queue that records instead of running
   * (mock: a list of operations; CUDA: a private stream in capture mode;
   * Metal: an indirect command buffer); the framework then calls the
   * items' runs (and event_record / event_wait) on it, in order, and
   * graph_end turns the recording into an executable (*exec), or frees it
   * when abort is 1. Without graph_once the framework records at every
   * graph_launch, from its own copy of the items resolved again (a stale
   * handle is an error, never a crash), launches the executable once and
   * destroys it; with graph_once it records at graph_create and
   * graph_update and launches the one executable at every graph_launch
   * (graph_update: a new recording, then the old executable destroyed).
   * While recording, sh-dependent checks (attention_run's plan stream)
   * are left to the launch's checks. */
  gpurt_error *(*graph_begin)(void *ctx, uint32_t dev, gp_queue *rec);
  /* graph_once: on entry *exec is the executable a graph_update's
   * recording replaces (NULL otherwise); the backend may update that one
   * in place and return it (the framework keeps it: EXEC_UPDATE) or return
   * a new one (the old is destroyed: REINSTANTIATED). */
  gpurt_error *(*graph_end)(void *ctx, gp_queue *rec, int abort, void **exec);
  /* (optional) graph_once only: where the backend's recording cannot
   * allocate or synchronize (a CUDA stream capture), the framework first
   * passes every item but event records and waits once through its run on
   * the recording queue with capturing GP_QUEUE_PREPARE (nothing is
   * enqueued), then calls graph_capture (the recording starts for real:
   * capturing becomes GP_QUEUE_RECORD), then records the items. NULL: no
   * preparing pass. */
  gpurt_error *(*graph_capture)(void *ctx, gp_queue *rec);
  /* (optional, both or neither) graph_once only: a graph_update of launch
   * items only patches the kept executable in place instead of recording
   * it again when graph_patchable answers 1 for every updated item (its
   * recording kept a node for that item: gp_queue.item while it was
   * recorded). graph_patch then gets each item's new launch, checked and
   * resolved as an eager launch; an error leaves the items before it
   * patched (the framework keeps those and says so). */
  int (*graph_patchable)(void *ctx, void *exec, uint64_t item);
  gpurt_error *(*graph_patch)(void *ctx, void *exec, uint64_t item, const gp_launch_op *l);
  /* Enqueues the executable on q, contiguously (graph_once: may be
   * called many times for one executable, from many threads, under the
   * graph's lock). */
  gpurt_error *(*graph_launch)(void *ctx, void *exec, gp_queue *q);
  /* graph_once: replays of exec may still be running; the backend keeps
   * what they read alive until they finish (CUDA: synchronize first). */
  void (*graph_destroy)(void *ctx, void *exec);

  /* ---- operations: one run each (the front half is the framework's) ----
   * Each enqueues on q (a recording queue inside graph_begin..graph_end,
   * for the slots graph_recordable names). */
  gpurt_error *(*gemm_plan)(void *ctx, uint32_t dev, const gpurt_gemm_desc *d, void **plan); /* (optional) */
  void (*gemm_plan_free)(void *ctx, void *plan);                                              /* (optional) */
  gpurt_error *(*gemm_run)(void *ctx, gp_queue *q, const gp_gemm_op *r);
  /* The run of each recordable op (GP_ZCALLS: quant_matmul, grouped_gemm,
   * kv_append, attention_run, ...), one entry per slot of the same name:
   *   gpurt_error *(*<slot>)(void *ctx, gp_queue *q, const gp_<slot>_op *r);
   * each promised from the slot's minor on (gp_backend.c). */
#define GP_RUN_ENTRY_(name, NAME, minor, idx, atype, obj) \
  gpurt_error *(*name)(void *ctx, gp_queue *q, const gp_##name##_op *r);
  GP_ZCALLS(GP_RUN_ENTRY_)
#undef GP_RUN_ENTRY_
  gpurt_error *(*attention_create)(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj);
  void (*attention_destroy)(void *ctx, void *obj);
  /* Plans on q from checked host counts (the framework ran
   * gp_attention_plan_check); the backend keeps the plan its runs use. */
  gpurt_error *(*attention_plan)(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                                 const gp_attention_sched *sched);
  /* Collectives (1.6, optional: UNSUPPORTED when comm_create is NULL). */
  gpurt_error *(*comm_unique_id)(void *ctx, uint8_t id[GPURT_COMM_ID_BYTES]);
  /* a is checked (devices on live devices); nranks is the communicator's size. */
  gpurt_error *(*comm_create)(void *ctx, const gpurt_comm_create_args *a, uint32_t nranks, void **comm);
  void (*comm_destroy)(void *ctx, void *comm);
  void (*comm_abort)(void *ctx, void *comm);
  /* NULL while healthy, else "<what>: the communicator is broken: ...". */
  gpurt_error *(*comm_query)(void *ctx, void *comm, const char *what);
  /* Enqueues a checked group (each item on its rank's queue). */
  gpurt_error *(*comm_run)(void *ctx, void *comm, const gp_coll_item *items, uint64_t n);
} gp_backend;

/* The entries a backend must set for each ABI minor (the rest are
 * optional), by offset in gp_backend; gp_backend_check walks it. */
typedef struct gp_backend_need {
  size_t offset;
  uint32_t since_minor;
  const char *name;
} gp_backend_need;

extern const gp_backend_need gp_backend_needs[];
extern const size_t gp_backend_need_count;

/* INTERNAL naming the first entry a table leaves unset that its
 * abi_minor promises; NULL when complete. */
gpurt_error *gp_backend_check(const gp_backend *b);

#endif /* GPURT_CSRC_BACKEND_H_ */
