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
#include "gp_backend.h"

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
#define CU_OPTIONAL_FUNCS(X) X(cuFuncGetParamInfo) X(cuFuncSetAttribute) X(cuLaunchKernelEx) X(cuGraphDebugDotPrint) CU_GRAPH_FUNCS(X)
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

/* ---- the engine: csrc ------------------------------------------------------ */
/*
 * csrc's engine (csrc/gp_engine*.c, built into the plugin by
 * scripts/build_cuda.sh) implements gpurt_api over this plugin's gp_backend
 * table (cuda_plugin.c): handles, the caller's structs, the contract's
 * checks and their messages. The entries below receive resolved operands
 * (gp_mem: addr is the CUdeviceptr of byte offset, obj the cu_buffer;
 * gp_queue: q is the cu_stream). Errors are csrc's gp_err / gp_err_vendor
 * ("cuda: <message>"; gp_plugin_prefix is in cuda_plugin.c).
 */

/* ---- runtime objects --------------------------------------------------- */
/*
 * Locks. Launch, copy, memset, stream and event entries take none (the
 * engine resolved their handles), a context is made current per call, and
 * the last-kernel records are atomics. The mutexes, and the order
 * in which they may nest (a lock is only ever taken while holding locks
 * ABOVE it in this list, never below):
 *
 *   (the engine's)   a graph's mu (held while its recording's entries run
 *                    and around graph_launch) and an attention object's mu
 *                    (around attention_plan) are above every lock below.
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
 *   cu_device.mu     (cuda_runtime.c, cuda_gemm.c, cuda_ownk.c) lost_msg /
 *                    lost_code, the device's lazy cuBLASLt handle, scratch
 *                    and internal module, and the own fatbin's module and
 *                    kernels (cu_own_fn); reached from cu_fail /
 *                    cu_lost_error, so under cu_plan.mu and
 *                    cu_stream.slot_mu too.
 *   cu_comm.mu       (cuda_comm.c) a communicator's NCCL calls: a leaf but
 *                    for cu_device.mu through cu_fail.
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
 * cuModuleGetFunction of the internal kernels); cu_comm.mu (NCCL calls);
 * g_mu and lt_mu around dlopen. Never held across a driver call: g_lost_mu.
 */

#define CU_NAME_CAP 128

typedef struct cu_device {
  uint32_t index;
  CUdevice dev;
  CUcontext ctx; /* the primary context, retained */
  int cc_major, cc_minor, sm_count, max_threads, warp, integrated;
  /* Kernels that wait for their predecessor themselves (the built-ins, the
   * GEMVs, FlashInfer's decode and the KV append) are launched with
   * programmatic stream serialization (cu_launch_kernel): compute
   * capability 9.0 or newer, cuLaunchKernelEx present, GPURT_CUDA_PDL not
   * "0". */
  int pdl;
  char name[GPURT_NAME_LEN];
  char pci[32];
  size_t total;
  _Atomic int lost;             /* sticky: every later call fails */
  pthread_mutex_t mu;           /* lost_msg, last_kernel, lazy cuBLASLt */
  char lost_msg[640];
  CUresult lost_code;
  char last_kernel[CU_NAME_CAP]; /* the last kernel launched on any stream */
  _Atomic uintptr_t last_kernel_h; /* its CUfunction (0: a GEMM or none): the name
                                      is copied only when the kernel changes */
  void *lt;                     /* cublasLtHandle_t, lazily (cuda_gemm.c) */
  CUdeviceptr gemm_scratch;     /* 256 bytes, f32 1.0 first, lazily (cuda_gemm.c) */
  /* The embedded fatbin loaded once more for the plugin's own kernels
   * (cuda_gemm.c's f32 bias conversion), lazily under mu; never a user module. */
  CUmodule internal_mod;
  CUfunction f32_to_bf16, f32_to_f16;
  void *own; /* cuda_ownk.c: the own fatbin (cuda_quant.cu) and its kernels, lazily under mu */
} cu_device;

typedef struct cu_runtime {
  uint32_t ndev;
  cu_device *devs;
} cu_runtime;

/* A buffer (gp_mem.obj of mem_alloc). */
typedef struct cu_buffer {
  uint32_t dev;
  CUdeviceptr ptr;
  uint64_t size;
} cu_buffer;

/* A recording's snapshot of a captured attention run (cuda_attention.c). */
typedef struct cu_attn_snap {
  void *obj;              /* the cu_attn (alive while the graph's items are: the engine checks) */
  uint32_t batch;         /* the plan's batch at capture: the one replays need */
  uint64_t pages_avail;   /* int32 entries readable from the captured indices view */
  CUdeviceptr fws, iws;   /* the workspace the captured kernels point into */
  uint8_t prefill_kernel; /* the kernel the captured runs launched (decode objects choose per plan) */
} cu_attn_snap;

typedef struct cu_event cu_event;

/* What a recording (graph_begin .. graph_end, cuda_graph.c) keeps while its
 * items are captured on its private stream: per item the kernel node a
 * launch added (graph_patch), the attention runs' snapshots (checked before
 * each replay) and the events recorded (marked recorded at each replay).
 * Filled by the entries on the recording's queue (cu_rec_*, cuda_stream.c)
 * on the one thread that records (the engine holds the graph's lock). */
typedef struct cu_rec {
  uint64_t items;
  CUgraphNode *knodes;     /* items entries */
  cu_attn_snap *snaps;
  uint64_t nsnaps, capsnaps;
  cu_event **evs;
  uint64_t nevs, capevs;
  int capturing;           /* cuStreamBeginCapture_v2 ran */
  int oom;                 /* a snapshot or event could not be kept */
} cu_rec;

/* A stream (gp_queue.q; a recording queue's too: its private stream). */
typedef struct cu_stream {
  uint32_t dev;
  CUstream s;
  uint64_t serial; /* this process's streams numbered from 1: never reused, as a freed handle's address may be */
  cu_rec *rec;                    /* a recording's stream: what it captured so far */
  char last_kernel[CU_NAME_CAP];
  _Atomic uintptr_t last_kernel_h; /* as cu_device's */
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

struct cu_event {
  uint32_t dev;
  CUevent ev;
  uint32_t flags;
  _Atomic int recorded;
};

typedef struct cu_module {
  uint32_t dev;
  CUmodule mod;
  int builtin;
  void *image; /* the caller's data, copied; kept until unload */
} cu_module;

/* ---- cuda_runtime.c: the bottom floor ---- */
/* The remedy every lost-device message ends with. */
CU_HIDDEN extern const char cu_restart[];
/* Records ordinal i's sticky error (the first one wins). */
CU_HIDDEN void cu_proc_mark_lost(uint32_t i, CUresult r, const char *msg);
/* 1 with the code and message when ordinal i suffered a sticky error. */
CU_HIDDEN int cu_proc_lost(uint32_t i, CUresult *code, char *msg, size_t cap);
/* 1 when r leaves the context unusable (the device is lost). */
CU_HIDDEN int cu_sticky(CUresult r);
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
/* For teardown: makes the context current, lost or not. */
CU_HIDDEN void cu_enter_quiet(cu_runtime *rt, uint32_t dev);
/* The error for a failed driver call `op` on device dev; records a sticky
 * error (device lost). kernel: the kernel to name, or NULL. */
CU_HIDDEN gpurt_error *cu_fail(cu_runtime *rt, uint32_t dev, CUresult r,
                               const char *op, const char *kernel);
CU_HIDDEN gpurt_error *cu_lost_error(cu_runtime *rt, uint32_t dev);
/* Whether dev is lost for this runtime or, process-wide, for any runtime
 * (the primary context is shared: a sticky error in one is in all). */
CU_HIDDEN int cu_dev_lost(cu_runtime *rt, uint32_t dev);
/* Names kernel `name` (key: any value that tells kernels apart) as the last
 * launched on st and on its device, for a later fault report. */
CU_HIDDEN void cu_note_kernel(cu_runtime *rt, cu_stream *st, uintptr_t key, const char *name);
/* cuLaunchKernel of f on st's stream, or, when pdl is set and the device
 * allows it (cu_device.pdl), cuLaunchKernelEx with programmatic stream
 * serialization: f may then be scheduled before the kernel ahead of it on
 * the stream finishes, so f must wait for it (griddepcontrol.wait) before
 * any access to memory that kernel may write, and before it exits. */
CU_HIDDEN CUresult cu_launch_kernel(const cu_runtime *rt, const cu_stream *st, CUfunction f,
                                    const uint32_t grid[3], const uint32_t block[3], uint32_t shared,
                                    void **params, int pdl);
/* The tuning variable name as a whole number in [lo, hi], or -1 when it is
 * unset or anything else (the callers then keep their default; each reads
 * it once and caches the answer). lo >= 0. */
CU_HIDDEN long long cu_env_whole(const char *name, long long lo, long long hi);
/* Whether ABI 1.10's fusions run on this plugin: the GEMM prologues
 * (cuda_gemm.c) and kv_append's rotary embedding (cuda_attention.c): off
 * unless GPURT_CUDA_FUSE=1 (read once), since on the H200 (2026-12-05,
 * BENCHMARKS.md) the prologue GEMVs ran 15-45% slower than the plain GEMV
 * and the fused decoder lost 15-20% at batch 1, and the rope append gained
 * nothing; off, each is refused as unsupported, naming the variable, and
 * callers (the decoder) keep their separate kernels. */
CU_HIDDEN int cu_fuse_on(void);

/* ---- cuda_stream.c: streams, events (gp_backend entries) ---------------- */

CU_HIDDEN gpurt_error *cu_queue_create(void *ctx, uint32_t dev, gp_queue *out);
CU_HIDDEN void cu_queue_destroy(void *ctx, gp_queue *q);
CU_HIDDEN gpurt_error *cu_queue_sync(void *ctx, gp_queue *q);
CU_HIDDEN gpurt_error *cu_queue_query(void *ctx, gp_queue *q, uint64_t *pending);
CU_HIDDEN gpurt_error *cu_event_create(void *ctx, uint32_t dev, uint32_t flags, void **ev);
CU_HIDDEN void cu_event_destroy(void *ctx, void *ev);
CU_HIDDEN gpurt_error *cu_event_record(void *ctx, void *ev, gp_queue *q);
CU_HIDDEN gpurt_error *cu_event_wait(void *ctx, gp_queue *q, void *ev);
CU_HIDDEN gpurt_error *cu_event_query(void *ctx, void *ev, int *done);
CU_HIDDEN gpurt_error *cu_event_sync(void *ctx, void *ev);
CU_HIDDEN gpurt_error *cu_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which);
/* A private stream of device dev (graph recordings) and its release. */
CU_HIDDEN gpurt_error *cu_stream_new(cu_runtime *rt, uint32_t dev, cu_stream **out);
CU_HIDDEN void cu_stream_free(cu_runtime *rt, cu_stream *s);
/* Lazily allocates the stream's GEMM workspace (at least size bytes). */
CU_HIDDEN gpurt_error *cu_stream_workspace(cu_runtime *rt, cu_stream *s,
                                           size_t size, CUdeviceptr *out);
/* Recordings (cu_rec): after a launch captured on st, keeps the kernel
 * node it added for item `item`; keeps a captured attention run's
 * snapshot (one per object: the smallest page view). */
CU_HIDDEN void cu_rec_launch_node(cu_stream *st, uint64_t item);
CU_HIDDEN void cu_rec_snap(cu_stream *st, const cu_attn_snap *s);

/* ---- cuda_memory.c: buffers, host buffers, copy, memset ----------------- */

CU_HIDDEN gpurt_error *cu_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out);
CU_HIDDEN gpurt_error *cu_mem_free(void *ctx, gp_mem *m);
CU_HIDDEN gpurt_error *cu_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr);
CU_HIDDEN void cu_host_free(void *ctx, gp_mem *m);
CU_HIDDEN gpurt_error *cu_copy(void *ctx, gp_queue *q, const gp_copy *c);
CU_HIDDEN gpurt_error *cu_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                                 uint32_t element_size);

/* ---- cuda_module.c: modules, kernels, launch ------------------------------ */

CU_HIDDEN gpurt_error *cu_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod);
CU_HIDDEN void cu_module_unload(void *ctx, void *mod);
CU_HIDDEN gpurt_error *cu_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                                     gpurt_kernel_info *info);
CU_HIDDEN gpurt_error *cu_launch(void *ctx, gp_queue *q, const gp_launch_op *l);
CU_HIDDEN gpurt_error *cu_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n,
                                      uint64_t *enqueued);
/* A launch's kernel-node parameters (graph_patch): p's pointers point into
 * vals and ptrs (GPURT_MAX_KERNEL_PARAMS entries each). */
CU_HIDDEN void cu_launch_node(const gp_launch_op *l, CUDA_KERNEL_NODE_PARAMS *p, uint64_t *vals, void **ptrs);

/* ---- GEMM (cuda_gemm.c) -------------------------------------------------------- */

CU_HIDDEN gpurt_error *cu_gemm_plan(void *ctx, uint32_t dev, const gpurt_gemm_desc *d, void **plan);
CU_HIDDEN void cu_gemm_plan_free(void *ctx, void *plan);
/* On a GP_QUEUE_PREPARE queue: the lazy allocations only. */
CU_HIDDEN gpurt_error *cu_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r);
/* Releases a device's cuBLASLt handle (runtime teardown). */
CU_HIDDEN void cu_gemm_device_release(cu_device *d);
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

/* ---- quantized and grouped matmul (cuda_quant.c, 1.4) ------------------------------ */

/* On a GP_QUEUE_PREPARE queue: what the call makes lazily (its kernel's
 * module, the stream's scratch and GEMM workspace, cuBLASLt's handle),
 * nothing enqueued. */
CU_HIDDEN gpurt_error *cu_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r);
CU_HIDDEN gpurt_error *cu_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r);
/* Unloads a device's quant kernels (runtime teardown, context current). */
/* ---- cuda_ownk.c: the plugin's own kernels (cuda_quant.cu's fatbin) ------ */

/* Slots of cu_own_fn's per-device cache: cuda_quant.c's variants first,
 * then the GEMV's (type x N 1/2/4). */
enum { CU_OWN_QUANT_FNS = 112, CU_OWN_BGEMV = CU_OWN_QUANT_FNS, CU_OWN_FNS = CU_OWN_BGEMV + 10 };
/* Kernel `name` of the own fatbin on device dev, cached in slot v (the
 * module loaded on first use, under the device's mutex); context current. */
CU_HIDDEN gpurt_error *cu_own_fn(cu_runtime *rt, uint32_t dev, int v, const char *name, CUfunction *out);
/* cu_own_fn for a kernel that takes smem bytes of dynamic shared memory:
 * the first fetch also raises the kernel's limit to smem
 * (cuFuncSetAttribute); *ok is 0 when the driver or the device refuses
 * it (then the caller takes another kernel; no error). */
CU_HIDDEN gpurt_error *cu_own_fn_smem(cu_runtime *rt, uint32_t dev, int v, const char *name, uint32_t smem,
                                      CUfunction *out, int *ok);
/* Launches f with params on st (grid x gridy blocks of block threads) and
 * notes it as the stream's last kernel (cu_note_kernel); a driver refusal
 * names the kernel. pdl: f waits for its predecessor itself
 * (cuda_pdl.cuh's gpurt_pdl_enter), so it may take programmatic dependent
 * launch (cu_launch_kernel). A grid of 0 launches nothing. */
CU_HIDDEN gpurt_error *cu_own_launch(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t grid,
                                     uint32_t gridy, uint32_t block, void **params, int pdl);
/* cu_own_launch of a grid x 1 launch with smem bytes of dynamic shared memory. */
CU_HIDDEN gpurt_error *cu_own_launch_smem(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name,
                                          uint64_t grid, uint32_t block, uint32_t smem, void **params, int pdl);
/* Unloads a device's own module (runtime teardown). */
CU_HIDDEN void cu_own_device_release(cu_device *d);
/* The GEMM slot's GEMV for 16-bit decode shapes (cuda_ownk.c launches
 * cuda_quant.cu's gpurt_bgemv_*; cuda_gemm.c decides): D = alpha * A^T B
 * + beta * C, A stored as m rows of k (lda), B n columns of k (ldb), C and
 * D column-major, n <= CU_BGEMV_MAX_N, batch >= 1 (strides in elements),
 * f32 accumulation; w and x 16-byte aligned, lda, ldb, k multiples of 8,
 * m < 2^32 (the caller checked). Context current. */
#define CU_BGEMV_MAX_N 4
/* The kernel's parameters (cuda_quant.cu's BgemvArgs: the same fields,
 * types and order). */
typedef struct cu_bgemv_args {
  CUdeviceptr w, x, c, d;
  uint64_t lda, ldb, ldc, ldd;
  int64_t sa, sb, sc, sd; /* batch strides (elements) */
  uint32_t m, k, n;
  float alpha, beta;
  uint32_t flags; /* CU_BGEMV_CONST_A: nothing earlier on the stream writes w */
  CUdeviceptr nw; /* GPURT_GEMM_PROLOGUE_RMSNORM's weight (k elements, 16-byte aligned), else 0 */
  float eps;      /* its epsilon */
} cu_bgemv_args;
/* cu_bgemv_args.flags: w is not written by work earlier on the stream (a
 * weight), so the kernel may copy its first chunks before its PDL wait. */
#define CU_BGEMV_CONST_A 1u
/* Launches f (cu_bgemv_fn's kernel, named name) over a, batch blocks high. */
CU_HIDDEN gpurt_error *cu_bgemv(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, uint64_t batch,
                                const cu_bgemv_args *a);
/* The kernel a cu_bgemv of this type and n launches, loaded, and its name
 * (in name, cap bytes: 32 are enough). */
CU_HIDDEN gpurt_error *cu_bgemv_fn(cu_runtime *rt, uint32_t dev, int32_t t, uint64_t n, int prologue, CUfunction *out,
                                   char *name, size_t cap);

/* ---- attention over a paged KV cache (cuda_attention.c, 1.5) ------------------------ */

CU_HIDDEN gpurt_error *cu_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r);
CU_HIDDEN gpurt_error *cu_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj);
CU_HIDDEN void cu_attention_destroy(void *ctx, void *obj);
CU_HIDDEN gpurt_error *cu_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                                         const gp_attention_sched *sched);
/* On a recording queue: decode objects on FlashInfer's decode kernel only
 * (else UNSUPPORTED); the run's snapshot is kept in the recording. */
CU_HIDDEN gpurt_error *cu_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r);

/* Before a replay: the object is planned for the captured batch, into the
 * captured workspace, with no more pages than the captured indices hold
 * (FAILED_PRECONDITION / OUT_OF_RANGE naming what differs). Takes cu_attn.mu. */
CU_HIDDEN gpurt_error *cu_attention_replay_check(const cu_attn_snap *snap);

/* ---- graphs (cuda_graph.c) ------------------------------------------------------- */

CU_HIDDEN gpurt_error *cu_graph_begin(void *ctx, uint32_t dev, gp_queue *rec);
CU_HIDDEN gpurt_error *cu_graph_capture(void *ctx, gp_queue *rec);
CU_HIDDEN gpurt_error *cu_graph_end(void *ctx, gp_queue *rec, int abort, void **exec);
CU_HIDDEN int cu_graph_patchable(void *ctx, void *exec, uint64_t item);
CU_HIDDEN gpurt_error *cu_graph_patch(void *ctx, void *exec, uint64_t item, const gp_launch_op *l);
CU_HIDDEN gpurt_error *cu_graph_launch(void *ctx, void *exec, gp_queue *q);
CU_HIDDEN void cu_graph_destroy(void *ctx, void *exec);

/* ---- the embedded kernels (cuda_fatbin.S) ------------------------------------------ */

/* Names of the plugin's own kernels in the fatbin (cuda_kernels.cu); they
 * are not in csrc's built-in table, so kernel_get never finds them. */
#define CU_INTERNAL_PREFIX "gpurt_internal_"

CU_HIDDEN extern const unsigned char gpurt_cuda_fatbin[];
CU_HIDDEN extern const uint64_t gpurt_cuda_fatbin_size;

#endif /* GPURT_CUDA_INTERNAL_H_ */
