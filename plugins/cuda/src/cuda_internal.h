/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_internal.h — shared declarations of the CUDA plugin (libgpurt_cuda.so).
 *
 * The plugin never links against libcuda: every driver entry point is
 * resolved with dlsym from dlopen("libcuda.so.1") into `cu_drv` below. The
 * names come from cuda.h's own macros (cuMemAlloc -> cuMemAlloc_v2), so the
 * symbol looked up is the one this header version means.
 *
 * Everything here is hidden; the one exported symbol is
 * gpurt_plugin_negotiate (exports.map).
 */
#ifndef GPURT_CUDA_INTERNAL_H_
#define GPURT_CUDA_INTERNAL_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "gpurt.h"
#include "gp_common.h"

#define CU_HIDDEN __attribute__((visibility("hidden")))

/* The driver the embedded fatbin needs (nvcc 13.0 -> CUDA 13.0). */
#define CU_REQUIRED_DRIVER 13000

/* ---- driver entry points ---------------------------------------------- */

/* Needed by probe (no context is created). */
#define CU_PROBE_FUNCS(X)                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet)           \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute)               \
  X(cuDeviceGetPCIBusId) X(cuGetErrorName) X(cuGetErrorString)

/* Needed by a runtime. */
#define CU_RUNTIME_FUNCS(X)                                                    \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                      \
  X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo)    \
  X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost)                \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync)         \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemcpyPeerAsync)               \
  X(cuMemcpyAsync) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async)  \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                  \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy)     \
  X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize)                       \
  X(cuEventElapsedTime) X(cuModuleLoadDataEx) X(cuModuleUnload)                \
  X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuLaunchKernel)

/* Optional (NULL when the driver lacks them). The graph entry points
 * (1.3, cuda_graph.c) are cuda.h's versioned forms (cuStreamBeginCapture ->
 * cuStreamBeginCapture_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags,
 * cuGraphExecUpdate -> _v2, cuGraphExecKernelNodeSetParams -> _v2,
 * cuStreamGetCaptureInfo -> _v3), never the legacy names. */
#define CU_OPTIONAL_FUNCS(X) X(cuFuncGetParamInfo) CU_GRAPH_FUNCS(X)
#define CU_GRAPH_FUNCS(X)                                                      \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamGetCaptureInfo)      \
  X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy)                 \
  X(cuGraphDestroy) X(cuGraphExecUpdate) X(cuGraphExecKernelNodeSetParams)     \
  X(cuEventRecordWithFlags)

#define CU_FIELD(name) __typeof__(name) *p_##name;
typedef struct cu_driver {
  CU_PROBE_FUNCS(CU_FIELD)
  CU_RUNTIME_FUNCS(CU_FIELD)
  CU_OPTIONAL_FUNCS(CU_FIELD)
} cu_driver;
#undef CU_FIELD

CU_HIDDEN extern cu_driver cu_drv;

/* Loads libcuda.so.1 and runs cuInit once per process (bounded wait).
 * Returns GPURT_PROBE_OK or a GPURT_PROBE_* reason with a line in why. */
CU_HIDDEN int32_t cu_driver_ready(char *why, size_t cap, int *driver_version);
/* "CUDA_ERROR_X (text)" for r; never NULL. */
CU_HIDDEN void cu_result_text(CUresult r, char *buf, size_t cap);
/* The first candidate library dlopen accepts (cuda_driver.c says how). */
CU_HIDDEN void *cu_dlopen_first(const char *const *cands, size_t n, int explicit_only, char *tried, size_t cap);

/* ---- errors, ABI structs, dtypes: csrc ------------------------------------ */
/*
 * Error objects ("cuda: <message>", gp_err / gp_err_vendor), struct_size-aware
 * reading and writing of ABI structs (gp_read_struct, gp_check_out,
 * gp_write_struct), gp_strlcpy and gp_dtype_name come from csrc/ (built into
 * the plugin by scripts/build_cuda.sh; gp_plugin_prefix is in cuda_plugin.c).
 */

/* ---- handle tables ----------------------------------------------------- */
/*
 * A handle is a number, never dereferenced: (serial << 24) | (slot + 1),
 * where serial comes from one process-wide counter, so a freed handle, a
 * handle of another table (another kind or another runtime) or garbage
 * never matches a live slot. Lookups take no lock (the ABI forbids
 * destroying a handle while another call uses it); insert and remove lock.
 * Slots live in chunks that never move.
 *
 * Why not csrc's gp_handle_table: that table grows by realloc and is used
 * under its owner's lock, so every lookup would take a lock; launch and
 * GEMM run resolve one to four handles per call here and stay lock-free
 * (one acquire load of the slot's handle). The encoding (a process-wide
 * serial instead of kind/owner/generation fields) and the messages
 * (cu_bad_handle) differ too, and both are part of this plugin's behaviour.
 */
#define CU_HT_CHUNK_BITS 10
#define CU_HT_CHUNK (1u << CU_HT_CHUNK_BITS)
#define CU_HT_MAX_CHUNKS 4096 /* 4 Mi live objects per table */

typedef struct cu_slot {
  _Atomic uint64_t handle; /* 0 when free */
  void *_Atomic obj;
  uint32_t next_free;
} cu_slot;

typedef struct cu_table {
  pthread_mutex_t mu;
  const char *kind; /* "buffer", ... for messages */
  _Atomic(cu_slot *) chunks[CU_HT_MAX_CHUNKS];
  _Atomic uint32_t nslots;
  uint32_t free_head; /* UINT32_MAX when empty */
  uint64_t live;
} cu_table;

CU_HIDDEN void cu_table_init(cu_table *t, const char *kind);
CU_HIDDEN void cu_table_free(cu_table *t);
/* 0 on success; -1 when full or out of memory. */
CU_HIDDEN int cu_table_insert(cu_table *t, void *obj, uint64_t *out);
/* Inline: every call resolves one to four handles. */
static inline void *cu_table_lookup(const cu_table *t, uint64_t h) {
  uint64_t slot = h & 0xffffffu;
  if (__builtin_expect(h == 0 || slot == 0, 0)) return NULL;
  uint32_t idx = (uint32_t)(slot - 1);
  if (__builtin_expect(idx >= atomic_load_explicit(&t->nslots, memory_order_acquire), 0))
    return NULL;
  cu_slot *chunk = atomic_load_explicit(&t->chunks[idx >> CU_HT_CHUNK_BITS],
                                        memory_order_acquire);
  if (__builtin_expect(chunk == NULL, 0)) return NULL;
  cu_slot *s = &chunk[idx & (CU_HT_CHUNK - 1)];
  if (__builtin_expect(atomic_load_explicit(&s->handle, memory_order_acquire) != h, 0))
    return NULL;
  return atomic_load_explicit(&s->obj, memory_order_relaxed);
}
/* Removes h; returns its object or NULL when h is not live. */
CU_HIDDEN void *cu_table_remove(cu_table *t, uint64_t h);
/* Calls fn on every live object (under the table's lock). */
CU_HIDDEN void cu_table_each(cu_table *t, void (*fn)(void *user, void *obj),
                             void *user);
CU_HIDDEN gpurt_error *cu_bad_handle(const cu_table *t, const void *h);
/* The live object of handle h in t, or NULL with *err set (cu_bad_handle).
 * Always inlined: launch and gemm_run resolve their handles through it. */
static inline __attribute__((always_inline)) void *cu_get(const cu_table *t, const void *h,
                                                          gpurt_error **err) {
  void *o = cu_table_lookup(t, (uint64_t)(uintptr_t)h);
  if (__builtin_expect(o == NULL, 0)) *err = cu_bad_handle(t, h);
  return o;
}

/* ---- runtime objects --------------------------------------------------- */
/*
 * Locks. Launch, copy, memset, stream and event calls take none: handle
 * lookups are lock-free (cu_table_lookup), a context is made current per
 * call, and the last-kernel records are atomics. The mutexes, and the order
 * in which they may nest (a lock is only ever taken while holding locks
 * ABOVE it in this list, never below):
 *
 *   cu_plan.mu       (cuda_gemm.c) a plan with pointer attributes (bias,
 *                    fp8 scales): serialises its runs from setting the
 *                    attributes to enqueuing cublasLtMatmul; plan_c_scratch's
 *                    lazy C buffer.
 *   cu_stream.slot_mu (cuda_gemm.c) the stream's fp8 scale slots and its
 *                    16-bit bias copy, from filling them until the matmul
 *                    that reads them is enqueued (taken inside cu_plan.mu);
 *                    also cuda_quant.c's qscratch, from its growth to the
 *                    matmul that reads it (then taking cu_device.mu).
 *   cu_attn.mu       (cuda_attention.c) an attention object's plan and
 *                    workspace, from a plan's start to its upload's enqueue
 *                    (cuEventSynchronize; cuCtxSynchronize, cuMemFree,
 *                    cuMemAlloc, cuMemHostAlloc when the workspace grows) and
 *                    from a run's read of the plan to its kernel's enqueue;
 *                    taken alone (then cu_device.mu through cu_fail).
 *   cu_stream.ws_mu  (cuda_stream.c) the stream's lazy GEMM workspace;
 *                    taken alone, before cu_plan.mu, released before it.
 *   cu_runtime.mu    (cuda_module.c) the modules' kernel lists; may take a
 *                    table's mu (kernel handles inserted / removed).
 *   cu_device.mu     (cuda_runtime.c, cuda_gemm.c) lost_msg / lost_code and
 *                    the device's lazy cuBLASLt handle, scratch and internal
 *                    module; reached from cu_fail / cu_lost_error, so under
 *                    cu_plan.mu and cu_stream.slot_mu too.
 *   cu_table.mu      (cuda_handles.c) insert and remove of one table; a leaf,
 *                    except runtime teardown (cu_table_each), which holds it
 *                    while releasing the objects.
 *   g_lost_mu        (cuda_runtime.c) the process-wide sticky-error record: a
 *                    leaf, never held with cu_device.mu (cu_fail and
 *                    cu_adopt_lost take one after releasing the other).
 *   g_mu + g_cv      (cuda_driver.c) loading libcuda and cuInit's state: a
 *                    leaf; cuInit itself runs on its own thread without it.
 *   lt_mu            (cuda_gemm.c) loading cuBLASLt once: a leaf.
 *
 * Held while calling the driver or cuBLASLt (never on the launch, copy or
 * memset path): cu_plan.mu (cublasLtMatmulDescSetAttribute, cublasLtMatmul,
 * cuMemAlloc of the C scratch); cu_stream.slot_mu (cuMemAlloc, cuMemFree,
 * cuMemcpyDtoDAsync, cuStreamSynchronize, cuLaunchKernel of the bias
 * conversion and of cuda_quant.c's dequantization, the cuBLASLt descriptor
 * calls and cublasLtMatmul of cu_gemm_tn_ptrs); cu_stream.ws_mu (cuStreamSynchronize, cuMemFree, cuMemAlloc
 * when the workspace grows); cu_device.mu (one-time cublasLtCreate,
 * cuMemAlloc + cuMemcpyHtoD of the scratch, cuModuleLoadDataEx +
 * cuModuleGetFunction of the internal kernels); cu_table.mu at teardown
 * (the objects' destroy/free calls); g_mu and lt_mu around dlopen. Never
 * held across a driver call: cu_runtime.mu, g_lost_mu.
 */

#define CU_NAME_CAP 128

typedef struct cu_device {
  uint32_t index;
  CUdevice dev;
  CUcontext ctx; /* the primary context, retained */
  int cc_major, cc_minor, sm_count, max_threads, warp, integrated;
  char name[GPURT_NAME_LEN];
  char pci[32];
  size_t total;
  _Atomic int lost;             /* sticky: every later call fails */
  pthread_mutex_t mu;           /* lost_msg, last_kernel, lazy cuBLASLt */
  char lost_msg[640];
  CUresult lost_code;
  char last_kernel[CU_NAME_CAP]; /* the last kernel launched on any stream */
  _Atomic uint64_t last_kernel_h; /* its handle (0: a GEMM or none): the name is
                                     copied only when the kernel changes */
  void *lt;                     /* cublasLtHandle_t, lazily (cuda_gemm.c) */
  CUdeviceptr gemm_scratch;     /* 256 bytes, f32 1.0 first, lazily (cuda_gemm.c) */
  /* The embedded fatbin loaded once more for the plugin's own kernels
   * (cuda_gemm.c's f32 bias conversion), lazily under mu; never a user module. */
  CUmodule internal_mod;
  CUfunction f32_to_bf16, f32_to_f16;
  void *quant; /* cuda_quant.c's kernels (its own fatbin), lazily under mu */
} cu_device;

typedef struct cu_runtime {
  uint64_t self;
  uint32_t ndev;
  cu_device *devs;
  cu_table buffers, hosts, streams, events, modules, kernels, plans;
  cu_table graphs; /* 1.3 (cuda_graph.c) */
  cu_table attns;  /* 1.5 (cuda_attention.c) */
  _Atomic uint64_t device_bytes, host_bytes;
  pthread_mutex_t mu; /* module kernel lists */
} cu_runtime;

typedef struct cu_buffer {
  uint32_t dev;
  CUdeviceptr ptr;
  uint64_t size;
} cu_buffer;

typedef struct cu_host {
  void *ptr;
  uint64_t size;
} cu_host;

typedef struct cu_stream {
  uint32_t dev;
  CUstream s;
  char last_kernel[CU_NAME_CAP];
  _Atomic uint64_t last_kernel_h; /* as cu_device's */
  pthread_mutex_t ws_mu;          /* lazy GEMM workspace */
  _Atomic CUdeviceptr ws;
  size_t ws_size;
  /* 16-byte aligned slots (64 bytes) for fp8 scales that are not 16-byte
   * aligned: gemm_run copies the scale there on the stream first. Allocated
   * on first use; slot_mu is held from those copies through the matmul. */
  pthread_mutex_t slot_mu;
  CUdeviceptr slots;
  /* The 16-bit copy of an f32 GEMM bias (cuda_gemm.c, plans whose cuBLASLt bias
   * is bf16/f16 while the caller's is f32): bias16_cap bytes, grown to the
   * largest m seen, allocated on first use; under slot_mu from the
   * conversion kernel's launch through the matmul. */
  CUdeviceptr bias16;
  uint64_t bias16_cap;
  /* cuda_quant.c's 16-bit copy of dequantized weights (the prefill path):
   * qscratch_cap bytes, grown to the largest W seen; under slot_mu from
   * its growth through the matmul that reads it. */
  CUdeviceptr qscratch;
  uint64_t qscratch_cap;
} cu_stream;

typedef struct cu_event {
  uint32_t dev;
  CUevent ev;
  uint32_t flags;
  _Atomic int recorded;
} cu_event;

typedef struct cu_kernel cu_kernel;

typedef struct cu_module {
  uint32_t dev;
  CUmodule mod;
  int builtin;
  char name[CU_NAME_CAP];
  cu_kernel *kernels; /* list, under rt->mu */
  void *image;        /* the caller's data, copied; kept until unload */
} cu_module;

struct cu_kernel {
  uint32_t dev;
  uint64_t handle;
  cu_module *module;
  CUfunction fn;
  char name[CU_NAME_CAP];
  size_t name_len;
  uint32_t num_params;
  int params_known; /* num_params/sizes are known */
  int kinds_known;  /* kinds are known (built-ins) */
  const gp_builtin_kernel *builtin; /* csrc's row for a built-in, else NULL */
  int32_t kinds[GPURT_MAX_KERNEL_PARAMS];
  uint32_t sizes[GPURT_MAX_KERNEL_PARAMS];
  cu_kernel *next;
};

/* ---- cuda_runtime.c: the bottom floor ---- */
/* The process-wide runtime table (cuda_plugin.c's create/destroy fill it). */
CU_HIDDEN extern cu_table g_runtimes;
/* The remedy every lost-device message ends with. */
CU_HIDDEN extern const char cu_restart[];
/* Records ordinal i's sticky error (the first one wins). */
CU_HIDDEN void cu_proc_mark_lost(uint32_t i, CUresult r, const char *msg);
/* 1 with the code and message when ordinal i suffered a sticky error. */
CU_HIDDEN int cu_proc_lost(uint32_t i, CUresult *code, char *msg, size_t cap);
/* 1 when r leaves the context unusable (the device is lost). */
CU_HIDDEN int cu_sticky(CUresult r);
/* Looks up rt; NULL with *err set when it is not a live runtime. */
CU_HIDDEN cu_runtime *cu_rt(gpurt_runtime *h, gpurt_error **err);
/* The prologue of a call with an out parameter: resolves h, then refuses
 * out NULL ("<op>: out is NULL"). NULL with *err set on either. */
CU_HIDDEN cu_runtime *cu_rt_out(gpurt_runtime *h, const void *out, const char *op,
                                gpurt_error **err);
/* One of cu_runtime's tables, for cu_rt_obj and cu_rt_take. */
#define CU_TABLE(name) offsetof(cu_runtime, name)
/* The prologue of a call on one object: resolves h into *rt, then handle x
 * in the runtime's table tbl (CU_TABLE(...)). NULL with *err set when either
 * is not live. Always inlined (launch and gemm_run start with it). */
static inline __attribute__((always_inline)) void *cu_rt_obj(gpurt_runtime *h, size_t tbl,
                                                             const void *x, cu_runtime **rt,
                                                             gpurt_error **err) {
  cu_runtime *r = cu_rt(h, err);
  *rt = r;
  if (__builtin_expect(r == NULL, 0)) return NULL;
  return cu_get((const cu_table *)((const char *)r + tbl), x, err);
}
/* The prologue of a free/destroy: resolves h into *rt, then removes handle x
 * from the runtime's table tbl (CU_TABLE(...)) and returns its object. NULL
 * with *err NULL when x is NULL (nothing to free), with *err set when h or x
 * is not live. */
CU_HIDDEN void *cu_rt_take(gpurt_runtime *h, size_t tbl, const void *x, cu_runtime **rt,
                           gpurt_error **err);
/* Makes d's context current on this thread when it is not already. */
static inline CUresult cu_make_current(cu_device *d) {
  CUcontext cur = NULL;
  if (__builtin_expect(cu_drv.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx, 1))
    return CUDA_SUCCESS;
  return cu_drv.p_cuCtxSetCurrent(d->ctx);
}
/* Makes the device's primary context current on this thread and checks the
 * device is not lost. NULL on success. */
CU_HIDDEN gpurt_error *cu_enter(cu_runtime *rt, uint32_t dev);
/* The error for a failed driver call `op` on device dev; records a sticky
 * error (device lost). kernel: the kernel to name, or NULL. */
CU_HIDDEN gpurt_error *cu_fail(cu_runtime *rt, uint32_t dev, CUresult r,
                               const char *op, const char *kernel);
CU_HIDDEN gpurt_error *cu_lost_error(cu_runtime *rt, uint32_t dev);
/* Whether dev is lost for this runtime or, process-wide, for any runtime
 * (the primary context is shared: a sticky error in one is in all). */
CU_HIDDEN int cu_dev_lost(cu_runtime *rt, uint32_t dev);
/* Lazily allocates the stream's GEMM workspace (at least size bytes). */
CU_HIDDEN gpurt_error *cu_stream_workspace(cu_runtime *rt, cu_stream *s,
                                           size_t size, CUdeviceptr *out);
/* Resolves a buffer view: handle, offset, bytes needed from offset. */
CU_HIDDEN gpurt_error *cu_view(cu_runtime *rt, gpurt_buffer *b, uint64_t off,
                               uint64_t bytes, uint32_t dev, const char *what,
                               CUdeviceptr *out);

/* ---- cuda_plugin.c: runtimes, releasers (runtime teardown, full tables) --- */

CU_HIDDEN void cu_enter_quiet(cu_runtime *rt, uint32_t dev);
CU_HIDDEN void cu_free_kernel_list(cu_module *m);
CU_HIDDEN void cu_release_module(void *u, void *o);
CU_HIDDEN void cu_release_stream(void *u, void *o);
CU_HIDDEN void cu_release_event(void *u, void *o);
CU_HIDDEN void cu_release_buffer(void *u, void *o);
CU_HIDDEN void cu_release_host(void *u, void *o);
CU_HIDDEN gpurt_error *cu_insert(cu_runtime *rt, cu_table *t, void *obj,
                                 void (*release)(void *u, void *o), const char *op,
                                 uint64_t *hv);

/* ---- cuda_memory.c: buffers, host buffers, copy, memset ----------------- */

CU_HIDDEN gpurt_error *cu_buffer_alloc(gpurt_runtime *h, uint32_t dev, uint64_t size,
                                       gpurt_buffer **out);
CU_HIDDEN gpurt_error *cu_buffer_free(gpurt_runtime *h, gpurt_buffer *buf);
CU_HIDDEN gpurt_error *cu_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out,
                                     void **out_ptr);
CU_HIDDEN gpurt_error *cu_host_free(gpurt_runtime *h, gpurt_host_buffer *buf);
CU_HIDDEN gpurt_error *cu_copy(gpurt_runtime *h, const gpurt_copy_args *args);
CU_HIDDEN gpurt_error *cu_memset(gpurt_runtime *h, const gpurt_memset_args *args);

/* ---- cuda_stream.c: streams, events ------------------------------------- */

CU_HIDDEN gpurt_error *cu_stream_create(gpurt_runtime *h, uint32_t dev, gpurt_stream **out);
CU_HIDDEN gpurt_error *cu_stream_destroy(gpurt_runtime *h, gpurt_stream *sh);
CU_HIDDEN gpurt_error *cu_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh);
CU_HIDDEN gpurt_error *cu_stream_query(gpurt_runtime *h, gpurt_stream *sh);
CU_HIDDEN gpurt_error *cu_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh);
CU_HIDDEN gpurt_error *cu_event_create(gpurt_runtime *h, uint32_t dev, uint32_t flags,
                                       gpurt_event **out);
CU_HIDDEN gpurt_error *cu_event_destroy(gpurt_runtime *h, gpurt_event *eh);
CU_HIDDEN gpurt_error *cu_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh);
CU_HIDDEN gpurt_error *cu_event_query(gpurt_runtime *h, gpurt_event *eh);
CU_HIDDEN gpurt_error *cu_event_synchronize(gpurt_runtime *h, gpurt_event *eh);
CU_HIDDEN gpurt_error *cu_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh,
                                        double *out_ms);

/* ---- cuda_module.c: modules, kernels, launch, launch_batch -------------- */

CU_HIDDEN gpurt_error *cu_module_load(gpurt_runtime *h, const gpurt_module_load_args *args,
                                      gpurt_module **out);
CU_HIDDEN gpurt_error *cu_module_unload(gpurt_runtime *h, gpurt_module *mh);
CU_HIDDEN gpurt_error *cu_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name,
                                     uint64_t name_len, gpurt_kernel **out);
CU_HIDDEN gpurt_error *cu_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out);
CU_HIDDEN gpurt_error *cu_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh,
                                 const gpurt_launch_args *args);
CU_HIDDEN gpurt_error *cu_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count,
                                       const gpurt_launch_item *items, uint64_t *out_enqueued);

/* ---- GEMM (cuda_gemm.c) -------------------------------------------------------- */

CU_HIDDEN gpurt_error *cu_gemm_plan_create(gpurt_runtime *rt, uint32_t device,
                                           const gpurt_gemm_desc *desc,
                                           gpurt_gemm_plan **out);
CU_HIDDEN gpurt_error *cu_gemm_plan_destroy(gpurt_runtime *rt,
                                            gpurt_gemm_plan *p);
CU_HIDDEN gpurt_error *cu_gemm_run(gpurt_runtime *rt, gpurt_stream *s,
                                   gpurt_gemm_plan *p,
                                   const gpurt_gemm_run_args *args);
/* Frees a plan object (runtime teardown; the plan's context current). */
CU_HIDDEN void cu_gemm_plan_free(void *plan);
/* The device the plan is for (teardown makes its context current). */
CU_HIDDEN uint32_t cu_gemm_plan_device(const void *plan);
/* Releases a device's cuBLASLt handle (runtime teardown). */
CU_HIDDEN void cu_gemm_device_release(cu_device *d);

/* ---- quantized and grouped matmul (cuda_quant.c, 1.4) ------------------------------ */

CU_HIDDEN gpurt_error *cu_quant_matmul(gpurt_runtime *rt, gpurt_stream *s,
                                       const gpurt_quant_matmul_args *args);
CU_HIDDEN gpurt_error *cu_grouped_gemm(gpurt_runtime *rt, gpurt_stream *s,
                                       const gpurt_grouped_gemm_args *args);
/* For cuda_quant.c (cuda_gemm.c): D (column-major m x n, type t: bf16 or
 * f16) = A^T B, A stored k x m and B k x n (leading dimension k), f32
 * accumulation, one cublasLtMatmul on st with workspace ws (descriptors
 * made and dropped per call). Context current; takes cu_device.mu. */
CU_HIDDEN gpurt_error *cu_gemm_tn_ptrs(cu_runtime *rt, cu_stream *st, int32_t t, uint64_t m,
                                       uint64_t n, uint64_t k, CUdeviceptr A, CUdeviceptr B,
                                       CUdeviceptr D, CUdeviceptr ws, size_t ws_size);
/* The size of a stream's GEMM workspace (cu_stream_workspace). */
CU_HIDDEN size_t cu_gemm_workspace_bytes(void);
/* Before a graph captures calls of cu_gemm_tn_ptrs: loads cuBLASLt and
 * makes device dev's handle (cuda_gemm.c; context current). */
CU_HIDDEN gpurt_error *cu_gemm_lt_warm(cu_runtime *rt, uint32_t dev);
/* Before a graph captures quant_matmul / grouped_gemm with these args on
 * its stream cap: what the call makes lazily (its kernel's module, the
 * stream's scratch and GEMM workspace, cuBLASLt's handle), nothing
 * enqueued (cuda_quant.c). The argument checks are the call's own. */
CU_HIDDEN gpurt_error *cu_quant_graph_warm(gpurt_runtime *h, gpurt_stream *cap,
                                           const gpurt_quant_matmul_args *args);
CU_HIDDEN gpurt_error *cu_grouped_graph_warm(gpurt_runtime *h, gpurt_stream *cap,
                                             const gpurt_grouped_gemm_args *args);
/* Unloads a device's quant kernels (runtime teardown, context current). */
CU_HIDDEN void cu_quant_device_release(cu_device *d);

/* ---- graphs (cuda_graph.c, 1.3) ----------------------------------------------------- */

CU_HIDDEN gpurt_error *cu_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args,
                                       gpurt_graph **out);
CU_HIDDEN gpurt_error *cu_graph_launch(gpurt_runtime *h, gpurt_graph *gh, gpurt_stream *sh);
CU_HIDDEN gpurt_error *cu_graph_update(gpurt_runtime *h, gpurt_graph *gh,
                                       gpurt_graph_update_args *args);
CU_HIDDEN gpurt_error *cu_graph_destroy(gpurt_runtime *h, gpurt_graph *gh);
CU_HIDDEN gpurt_error *cu_graph_recordable(gpurt_runtime *h, uint64_t slot, uint8_t *out); /* 1.7 */
/* Runtime teardown: frees a graph (its capture stream is in rt->streams). */
CU_HIDDEN void cu_release_graph(void *u, void *o);
/* launch's checks of a launch of kh on st and its packed arguments
 * (vals/ptrs: GPURT_MAX_KERNEL_PARAMS entries), enqueueing nothing
 * (cuda_module.c; graphs patch kernel nodes with them). */
CU_HIDDEN gpurt_error *cu_launch_params(cu_runtime *rt, const cu_stream *st, gpurt_kernel *kh,
                                        const gpurt_launch_args *args, cu_kernel **k,
                                        gpurt_launch_args *a, uint64_t *vals, void **ptrs);
/* Before a capture of runs of plan ph with args on st: makes the lazy
 * allocations such a run makes (cuMemAlloc and cuStreamSynchronize are not
 * allowed while the stream captures): the plan's C scratch, the stream's
 * workspace, fp8 scale slots and 16-bit bias copy (cuda_gemm.c). */
CU_HIDDEN gpurt_error *cu_gemm_graph_warm(cu_runtime *rt, cu_stream *st, gpurt_gemm_plan *ph,
                                          const gpurt_gemm_run_args *args);

/* ---- attention over a paged KV cache (cuda_attention.c, 1.5) ------------------------ */

CU_HIDDEN gpurt_error *cu_kv_append(gpurt_runtime *h, gpurt_stream *sh,
                                    const gpurt_kv_append_args *args);
CU_HIDDEN gpurt_error *cu_attention_create(gpurt_runtime *h, uint32_t dev,
                                           const gpurt_attention_desc *desc,
                                           gpurt_attention **out);
CU_HIDDEN gpurt_error *cu_attention_destroy(gpurt_runtime *h, gpurt_attention *a);
CU_HIDDEN gpurt_error *cu_attention_plan(gpurt_runtime *h, gpurt_stream *s, gpurt_attention *a,
                                         const gpurt_attention_plan_args *args);
CU_HIDDEN gpurt_error *cu_attention_run(gpurt_runtime *h, gpurt_stream *s, gpurt_attention *a,
                                        const gpurt_attention_run_args *args);
/* Runtime teardown: frees an attention object (its context made current). */
CU_HIDDEN void cu_release_attention(void *u, void *o);

/* Graphs (cuda_graph.c): a decode run recorded in a graph, and what its
 * captured kernels baked in, checked before every replay. */
typedef struct cu_attn_snap {
  gpurt_attention *handle;
  uint32_t batch;         /* the plan's batch at capture: the one replays need */
  uint64_t pages_avail;   /* int32 entries readable from the captured indices view */
  CUdeviceptr fws, iws;   /* the workspace the captured kernels point into */
} cu_attn_snap;
/* Captures a run of the object's current plan on the capturing stream cap
 * (without eager run's plan-stream check; decode objects on FlashInfer's
 * decode kernel only, else UNSUPPORTED), filling *snap. */
CU_HIDDEN gpurt_error *cu_attention_capture(gpurt_runtime *h, gpurt_stream *cap, gpurt_attention *a,
                                            const gpurt_attention_run_args *args, cu_attn_snap *snap);
/* Before a replay on stream sh: the object still exists, is planned on sh,
 * for the captured batch, into the captured workspace, with no more pages
 * than the captured indices hold (FAILED_PRECONDITION / OUT_OF_RANGE
 * naming what differs). Takes cu_attn.mu (under cu_graph.mu). */
CU_HIDDEN gpurt_error *cu_attention_replay_check(cu_runtime *rt, const cu_attn_snap *snap, gpurt_stream *sh);

/* ---- the embedded kernels (cuda_fatbin.S) ------------------------------------------ */

/* Names of the plugin's own kernels in the fatbin (cuda_kernels.cu); kernel_get
 * refuses them in the built-in module. */
#define CU_INTERNAL_PREFIX "gpurt_internal_"

CU_HIDDEN extern const unsigned char gpurt_cuda_fatbin[];
CU_HIDDEN extern const uint64_t gpurt_cuda_fatbin_size;

#endif /* GPURT_CUDA_INTERNAL_H_ */
