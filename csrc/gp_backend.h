/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_backend.h — the internal backend table under csrc's framework.
 *
 * csrc implements gpurt_api (abi/gpurt.h) once for every plugin: the
 * negotiation, the table, the handle tables, lifetimes, the lost-device
 * state, stats, and each slot's front half (read the caller's struct by its
 * struct_size, check the contract, resolve every handle and operand to the
 * backend's objects and device addresses, build the errors). What only a
 * device can do goes through this table: about fifteen primitives (memory,
 * the copy kinds, memset, modules, launch, streams, events, graph build
 * and replay) and one `run` per operation that receives already-resolved
 * pointers and descriptors. A backend implements this table and nothing
 * else; it never sees a gpurt_* handle, an argument struct of the caller
 * or a struct_size (ggml-backend's iface structs and database/sql's driver
 * package have the same shape).
 *
 * Who calls what, and under which lock:
 *   - The framework calls every entry; never two calls of one entry for one
 *     object at once unless the entry says so. No framework lock is held
 *     while a backend entry runs, except where an entry says "under the
 *     queue's order lock" (gp_queue.order: the framework holds it so that a
 *     graph replay's items land contiguously, as eager calls would).
 *   - `ctx` is the backend's runtime object (from `open`); `dev` an index
 *     below the device count `open` returned, checked and not lost.
 *   - An entry returns NULL or a new gpurt_error made with gp_err (the
 *     plugin's prefix is added there). A vendor code goes through
 *     gp_err_vendor. DEVICE_LOST from any entry makes the framework mark
 *     the device lost (sticky, as the header says).
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

#include "gp_common.h"

/* ---- resolved operands ---------------------------------------------------- */

/* A piece of device (or pinned host) memory, resolved from a handle and an
 * offset by the framework: `obj` is what the backend returned from
 * mem_alloc / host_alloc (its buffer object), `addr` the device address of
 * byte `offset` when the backend has flat addresses (CUDA: a CUdeviceptr;
 * mock: the host address of its private allocation), 0 otherwise (Metal:
 * use obj + offset), `size` the bytes from `offset` the operation may
 * touch (already checked against the allocation). */
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
  uint32_t capturing; /* 1 while graph_begin..graph_end records into it */
} gp_queue;

/* The copy kinds (the framework has already checked ranges and flags). */
enum {
  GP_COPY_H2D = 1, /* src.addr is a host pointer (pageable or pinned) */
  GP_COPY_D2H = 2, /* dst.addr is a host pointer */
  GP_COPY_D2D = 3,
  GP_COPY_H2H = 4  /* pinned to pinned, ordered on a stream */
};

typedef struct gp_copy {
  int kind;            /* GP_COPY_* */
  gp_mem dst, src;     /* host ends: addr is the host pointer, obj NULL
                          for pageable memory */
  uint64_t size;       /* > 0 */
} gp_copy;

/* ---- per-op descriptors (what each run receives) ----------------------------------------------- */
/* Each op's run gets its caller struct already read and checked and its
 * operands resolved. The structs below are the framework's, so a new field
 * of the ABI struct is one line here, one in the front half. */

typedef struct gp_launch_op {
  void *kernel;                 /* the backend's kernel object (kernel_get) */
  const gp_builtin_kernel *builtin; /* the built-in's row, NULL otherwise */
  uint32_t grid[3], block[3];
  uint32_t shared_bytes;
  uint32_t num_args;
  gp_mem bufs[GPURT_MAX_KERNEL_PARAMS];     /* BUFFER args (by index) */
  uint64_t scalar[GPURT_MAX_KERNEL_PARAMS]; /* scalar bits (by index) */
  int32_t kinds[GPURT_MAX_KERNEL_PARAMS];
} gp_launch_op;

typedef struct gp_gemm_op {
  void *plan;                   /* the backend's plan (gemm_plan), or NULL */
  gpurt_gemm_desc d;
  gp_mem a, b, c, dd, bias, scale_a, scale_b, scale_d, workspace;
  double alpha, beta;
} gp_gemm_op;

typedef struct gp_quant_op {
  gpurt_quant_matmul_args a;    /* checked; handles not to be read */
  gp_mem w, scales, biases, x, y;
} gp_quant_op;

typedef struct gp_kv_pages_op {
  gp_mem k, v, indptr, indices, last_page_len;
  uint64_t num_pages;
} gp_kv_pages_op;

typedef struct gp_kv_append_op {
  gpurt_kv_layout layout;
  uint32_t batch;
  uint64_t nnz;
  gp_kv_pages_op pages;
  gp_mem k_rows, v_rows, batch_indices, positions;
} gp_kv_append_op;

typedef struct gp_attention_op {
  void *obj;                    /* the backend's attention (attention_create) */
  gp_mem q, o, qo_indptr;
  gp_kv_pages_op pages;
} gp_attention_op;

/* ---- the table --------------------------------------------------------------- */

typedef struct gp_backend {
  const char *name;     /* "mock", "cuda", "metal": the message prefix */
  const char *version;  /* gp_plugin_version(): derived from GPURT_ABI_MINOR */
  uint32_t abi_minor;   /* the minor this backend implements */
  int32_t priority;

  /* ---- process (no lock held) ---- */
  /* Whether the backend can run here, without side effects on the device
   * (gpurt.h's probe rules); fills a (checked, zeroed) probe result. */
  gpurt_error *(*probe)(gpurt_probe_args *a);
  /* Opens the backend for a runtime: parses its own options (key=value
   * pairs the framework did not know), makes its context, returns the
   * device count. */
  gpurt_error *(*open)(const char *options, uint64_t options_len, void **ctx, uint32_t *ndev);
  /* Frees the context after every object of it was destroyed. */
  void (*close)(void *ctx);
  gpurt_error *(*device_info)(void *ctx, uint32_t dev, gpurt_device_info *out);
  /* Driver-level loss test (optional): DEVICE_LOST when the device fell off. */
  gpurt_error *(*device_check)(void *ctx, uint32_t dev);

  /* ---- memory (no lock held) ---- */
  gpurt_error *(*mem_alloc)(void *ctx, uint32_t dev, uint64_t size, gp_mem *out);
  /* Waits for nothing: the framework has drained the device's queues that
   * used the memory when the contract says so. */
  void (*mem_free)(void *ctx, gp_mem *m);
  gpurt_error *(*host_alloc)(void *ctx, uint64_t size, gp_mem *out, void **host_ptr);
  void (*host_free)(void *ctx, gp_mem *m);
  /* q NULL: synchronous (returns when the copy is done, after the work the
   * contract orders before it). */
  gpurt_error *(*copy)(void *ctx, gp_queue *q, const gp_copy *c);
  gpurt_error *(*memset)(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                         uint32_t element_size);

  /* ---- streams and events (no lock held; a queue is used by many threads
   * at once: the backend orders its own submissions) ---- */
  gpurt_error *(*queue_create)(void *ctx, uint32_t dev, gp_queue *out);
  /* Waits for the queue's work, then frees it. */
  void (*queue_destroy)(void *ctx, gp_queue *q);
  gpurt_error *(*queue_sync)(void *ctx, gp_queue *q);
  /* NULL when idle, NOT_READY when work is pending. */
  gpurt_error *(*queue_query)(void *ctx, gp_queue *q);
  gpurt_error *(*event_create)(void *ctx, uint32_t dev, uint32_t flags, void **ev);
  void (*event_destroy)(void *ctx, void *ev);
  gpurt_error *(*event_record)(void *ctx, void *ev, gp_queue *q);
  gpurt_error *(*event_wait)(void *ctx, gp_queue *q, void *ev);
  gpurt_error *(*event_query)(void *ctx, void *ev);
  gpurt_error *(*event_sync)(void *ctx, void *ev);
  gpurt_error *(*event_elapsed)(void *ctx, void *start, void *end, double *ms);

  /* ---- modules and launch ---- */
  gpurt_error *(*module_load)(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod);
  void (*module_unload)(void *ctx, void *mod);
  /* The kernel's object and what the backend knows of its parameters
   * (info->num_params GP_PARAMS_UNKNOWN when it cannot tell). */
  gpurt_error *(*kernel_get)(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                             gpurt_kernel_info *info);
  /* Enqueues one resolved launch; the framework checked it against
   * kernel_get's parameters and the built-in table. */
  gpurt_error *(*launch)(void *ctx, gp_queue *q, const gp_launch_op *l);
  /* Enqueues n launches contiguously (optional: the framework loops over
   * launch, under the queue's order lock). *enqueued: how many were. */
  gpurt_error *(*launch_many)(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n,
                              uint64_t *enqueued);

  /* ---- graphs ---- */
  /* Recording: graph_begin returns a queue that records instead of running
   * (mock: a list of operations; CUDA: a private stream in capture mode;
   * Metal: an indirect command buffer / recorded encoder list); the
   * framework then calls the items' runs on it, in order, and graph_end
   * turns the recording into an executable graph (*exec). A failed item
   * makes the framework call graph_end with abort 1 (nothing made). */
  gpurt_error *(*graph_begin)(void *ctx, uint32_t dev, gp_queue *rec);
  gpurt_error *(*graph_end)(void *ctx, gp_queue *rec, int abort, void **exec);
  /* Enqueues one replay on q, after every earlier replay of exec (the
   * header's order rule, on any stream). */
  gpurt_error *(*graph_launch)(void *ctx, void *exec, gp_queue *q);
  void (*graph_destroy)(void *ctx, void *exec);
  /* Patches item i's run in place (optional: the framework re-records the
   * whole graph; it reports GPURT_GRAPH_UPDATE_REINSTANTIATED). */
  gpurt_error *(*graph_patch)(void *ctx, void *exec, uint64_t i, int32_t kind, const void *run);

  /* ---- operations: one run each (the front half is the framework's) ----
   * Each enqueues on q (a recording queue inside graph_begin..graph_end,
   * when the framework's recordable list names the slot). */
  gpurt_error *(*gemm_plan)(void *ctx, uint32_t dev, const gpurt_gemm_desc *d, void **plan); /* (optional) */
  void (*gemm_plan_free)(void *ctx, void *plan);                                              /* (optional) */
  gpurt_error *(*gemm_run)(void *ctx, gp_queue *q, const gp_gemm_op *r);
  gpurt_error *(*quant_matmul)(void *ctx, gp_queue *q, const gp_quant_op *r);                  /* 1.4 */
  gpurt_error *(*grouped_gemm)(void *ctx, gp_queue *q, const gpurt_grouped_gemm_args *checked,
                               const gp_mem *operands, uint64_t n_operands);                    /* 1.4 */
  gpurt_error *(*kv_append)(void *ctx, gp_queue *q, const gp_kv_append_op *r);                /* 1.5 */
  gpurt_error *(*attention_create)(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj);
  void (*attention_destroy)(void *ctx, void *obj);
  /* Plans on q from checked host counts (the framework ran
   * gp_attention_plan_check); the backend keeps the plan its runs use. */
  gpurt_error *(*attention_plan)(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                                 const void *sched /* gp_attention_sched */);
  gpurt_error *(*attention_run)(void *ctx, gp_queue *q, const gp_attention_op *r);
  /* Collectives (1.6, optional: UNSUPPORTED when NULL). */
  gpurt_error *(*comm_create)(void *ctx, const gpurt_comm_create_args *a, void **comm);
  void (*comm_destroy)(void *ctx, void *comm);
  gpurt_error *(*comm_run)(void *ctx, void *comm, const gpurt_comm_run_args *a);
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
