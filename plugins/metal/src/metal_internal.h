/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_internal.h — the Metal plugin's objects (Objective-C, ARC) and the
 * functions its files share.
 *
 * The plugin is a backend of csrc's engine (csrc/gp_engine*.c implements
 * every slot of gpurt_api: negotiation, handles, lifetimes, the lost-device
 * state, stats, and each slot's front half: the caller's structs read and
 * checked, every handle and operand resolved, the errors). The plugin fills
 * a gp_backend table (csrc/gp_backend.h) and sees resolved operands only:
 *   - a device buffer is a gp_mem whose `obj` is the id<MTLBuffer>
 *     (CFBridgingRetain'd by mem_alloc, released by mem_free), `addr` 0
 *     (Metal has no flat addresses), bound at `offset`;
 *   - pinned host memory is a gp_mem whose `obj` is a GMHostBuffer and
 *     `addr` the host address (the GPU sees it through gm_host_wrapper);
 *   - a gp_queue's `q` is a GMStream (or, while the engine records a graph
 *     replay, a GMRecording: gp_queue.capturing is 1);
 *   - the runtime's context is a GMContext, events GMEvent, modules
 *     GMModule, kernels GMKernel (owned by their module), GEMM plans
 *     GMPlan, attention objects GMAttention (each CFBridgingRetain'd by the
 *     entry that makes it and released by the one that frees it).
 *
 * Every operation is one encode function (gm_encode_fn) handed to
 * gm_submit: on a stream it is encoded into a new command buffer, committed
 * at once; on a recording it is kept and encoded when the replay is
 * launched, all of a replay's operations into ONE command buffer (so a
 * decode step's kernels cost one commit).
 *
 * Files (one prefix, one concept each), from the top floor down; a file
 * uses only files below it (plugins/mock/layers_test.go checks every
 * plugin):
 *   metal_plugin.m     probe, open (options), close, devices, loss check,
 *                      runtime_control's keys, the gp_backend table, the entry
 *   metal_graph.m      recording queues and their replay
 *   metal_memory.m     buffers, host buffers, copy, memset
 *   metal_module.m     modules (BUILTIN, METALLIB, METAL_SOURCE), kernels,
 *                      launch, launch_many
 *   metal_gemm.m       GEMM plans and runs (MPS, the generic kernel)
 *   metal_quant.m      quantized and grouped matmul (1.4)
 *   metal_attention.m  kv_append and attention over a paged KV cache (1.5)
 *   metal_stream.m     streams (command queues), encoding and submission,
 *                      events
 *   metal_runtime.m    the bottom floor: the objects, time, errors, the lost
 *                      state, the fault counters, the built-in library and
 *                      its pipelines, the host-memory wrappers
 *
 * Locks, in the order they may nest (never the other way round):
 *   GMStream.enc (held from gm_stream_begin to commit / abort)
 *   GMContext.mu / GMStream.mu / GMEvent.mu / GMDevice.mu / GMModule.mu /
 *   GMPlan.mu / GMAttention.mu / GMHostBuffer.mu (leaves: short, never
 *   waited on while another lock is held)
 * No lock is held while waiting for the GPU. The engine holds none of its
 * locks while an entry runs, except a graph's (around a replay's recording
 * and launch) and an attention object's (around attention_plan).
 */
#ifndef GPURT_METAL_INTERNAL_H_
#define GPURT_METAL_INTERNAL_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <pthread.h>

#include "gp_backend.h"

/* The ABI it implements, then its own patch level (a minor bump is one
 * edit, in gpurt.h). */
#define GM_VERSION GP_ABI_VERSION ".0"
#define GM_PRIORITY 200

/* The built-in library, made by scripts/build_metal.sh (gm_embedded.c): a
 * metallib (len 0 when the metal compiler was absent at build time) and the
 * .metal source it was compiled from (the fallback, newLibraryWithSource). */
extern const unsigned char gm_metallib_data[];
extern const unsigned long gm_metallib_len;
extern const unsigned char gm_metal_source[];
extern const unsigned long gm_metal_source_len;

/* Mirrors struct gemm_params in kernels/gpurt_builtin.metal. */
typedef struct gm_gemm_params {
  uint64_t m, n, k;
  uint64_t lda, ldb, ldc, ldd;
  int64_t stride_a, stride_b, stride_c, stride_d;
  float alpha, beta;
  uint32_t a_type, b_type, c_type, d_type, bias_type;
  uint32_t trans_a, trans_b;
  uint32_t epilogue;
  uint32_t has_c;
  uint32_t pad;
} gm_gemm_params;

/* ---- objects (metal_runtime.m implements them) ------------------------------ */

/* An object with a mutex: init initializes mu, dealloc destroys it (after a
 * subclass's dealloc). What mu guards, each subclass says. */
@interface GMLocked : NSObject {
@public
  pthread_mutex_t mu;
}
@end

@interface GMDevice : GMLocked {
@public
  id<MTLDevice> dev;
  uint32_t index;
  /* mu guards everything below */
  id<MTLLibrary> builtin;  /* lazily loaded */
  NSMutableDictionary<NSString *, id<MTLComputePipelineState>> *psos;
  float sleep_iters_per_ns; /* 0 until calibrated */
  int lost;                 /* sticky: device_check answers DEVICE_LOST */
  char lost_why[160];
}
@end

/* The backend's runtime (open's ctx). */
@interface GMContext : GMLocked {
@public
  NSArray<GMDevice *> *devices;
  /* mu guards the fault counters */
  int64_t fail_alloc_nth, fail_launch_nth;
  gpurt_log_fn log;
  void *log_user;
}
@end

/* Page-aligned host memory (mmap); unmapped when the last owner (the host
 * buffer, or a no-copy MTLBuffer wrapping it) goes away. */
@interface GMHostMem : NSObject {
@public
  void *ptr;
  size_t mapped;
}
@end

@interface GMHostBuffer : GMLocked {
@public
  GMHostMem *mem;
  uint64_t size;
  /* mu guards wrappers */
  NSMutableDictionary<NSNumber *, id<MTLBuffer>> *wrappers; /* per device */
}
@end

@interface GMEvent : GMLocked {
@public
  GMDevice *device;
  uint32_t flags;
  id<MTLSharedEvent> ev;
  pthread_cond_t cv; /* with mu */
  uint64_t recorded; /* value of the latest record; 0: never recorded */
  uint64_t done;     /* highest value whose record completed */
  uint64_t time_ns;  /* host time when `done` completed */
}
@end

@interface GMStream : GMLocked {
@public
  GMDevice *device;
  id<MTLCommandQueue> queue;
  id<MTLSharedEvent> timeline; /* value n: the n-th command buffer is done */
  pthread_mutex_t enc;  /* held from begin to commit: one command buffer at a time */
  /* mu guards the counters and pending */
  pthread_cond_t cv;    /* completed advanced */
  uint64_t committed;   /* command buffers committed */
  uint64_t completed;   /* command buffers whose completion handler ran */
  gpurt_error *pending; /* the first command buffer error since the last sync */
}
@end

/* One command buffer being encoded: an eager operation's, or a whole graph
 * replay's. A compute encoder stays open across consecutive dispatches
 * (gm_compute) and is ended before anything else is encoded. */
@interface GMEnc : NSObject {
@public
  GMDevice *device;
  id<MTLCommandBuffer> cb;
  id<MTLComputeCommandEncoder> compute; /* the open compute encoder, or nil */
  uint32_t shared_set;                  /* threadgroup memory the open encoder has set */
  NSMutableArray<GMEvent *> *signal_events; /* records encoded, with ... */
  NSMutableArray<NSNumber *> *signal_values; /* ... their values */
}
@end

/* Encodes one operation into x; NULL or an error (then nothing of the
 * command buffer is committed). */
typedef gpurt_error *(^gm_encode_fn)(GMEnc *x);

/* graph_begin's queue: the operations of a replay, encoded at graph_launch. */
@interface GMRecording : NSObject {
@public
  GMDevice *device;
  NSMutableArray<gm_encode_fn> *steps;
  NSMutableArray<NSString *> *names;
}
@end

@interface GMKernel : NSObject {
@public
  GMDevice *device;
  id<MTLComputePipelineState> pso;
  NSString *name;
  const gp_builtin_kernel *builtin; /* NULL for user modules */
  uint32_t num_params;
  int32_t kinds[GPURT_MAX_KERNEL_PARAMS];
  uint32_t sizes[GPURT_MAX_KERNEL_PARAMS]; /* reflected; for ANY, the scalar's size */
}
@end

@interface GMModule : GMLocked {
@public
  GMDevice *device;
  id<MTLLibrary> lib;
  int builtin;
  NSString *name;
  /* mu guards kernels */
  NSMutableDictionary<NSString *, GMKernel *> *kernels; /* owned: one per name */
}
@end

/* ---- metal_runtime.m: the bottom floor ----------------------------------------- */

uint64_t gm_now_ns(void);
/* NSError -> error object: the message ends with localizedDescription, the
 * vendor code is the NSError code. */
gpurt_error *gm_nserror(int32_t code, NSError *err, const char *fmt, ...) GP_PRINTF(3, 4);
void gm_log(GMContext *c, int32_t level, const char *fmt, ...) GP_PRINTF(3, 4);
/* The device of an index the engine checked. */
GMDevice *gm_dev(void *ctx, uint32_t dev);
/* The lost state: set once (the first cause stays), DEVICE_LOST from
 * gm_check_lost (the engine asks through device_check). */
void gm_mark_lost(GMDevice *d, const char *why);
gpurt_error *gm_check_lost(GMDevice *d);
/* Consumes one allocation from fail_alloc_nth; 1 when it must fail. */
int gm_alloc_fault(GMContext *c);
/* Counts n launches against fail_launch_nth: the index refused, or n. */
uint64_t gm_launch_faults(GMContext *c, uint64_t n);
/* The options every Metal source is compiled with (the built-in library
 * from source, user modules of MODULE_METAL_SOURCE): no fast math. */
MTLCompileOptions *gm_compile_options(void);
/* The built-in library and a pipeline of it, loaded on first use. */
gpurt_error *gm_builtin_library(GMDevice *d, id<MTLLibrary> __strong *out);
gpurt_error *gm_builtin_pso(GMDevice *d, NSString *name, id<MTLComputePipelineState> __strong *out);
/* The MTLBuffer through which device d sees pinned host memory (NULL when
 * it cannot be wrapped). */
id<MTLBuffer> gm_host_wrapper(GMHostBuffer *h, GMDevice *d);
/* A resolved device operand's buffer (nil for a NULL operand). */
static inline id<MTLBuffer> gm_buf(const gp_mem *m) { return (__bridge id<MTLBuffer>)m->obj; }

/* ---- metal_stream.m: streams, encoding, submission, events ----------------------- */

/* The open compute encoder of x, with no dynamic threadgroup memory set (a
 * new one when none is open or the open one has it set); nil when Metal
 * gives none. */
id<MTLComputeCommandEncoder> gm_compute(GMEnc *x);
/* Ends x's compute encoder, if one is open. */
void gm_end_compute(GMEnc *x);
/* Binds a resolved operand at index i (a NULL operand binds `instead`). */
void gm_bind(id<MTLComputeCommandEncoder> enc, const gp_mem *m, const gp_mem *instead, NSUInteger i);
/* The operation's tail: on a stream, one command buffer encoded by fn and
 * committed (labelled `what`, which names it in a command-buffer error);
 * on a recording, fn kept for the replay. */
gpurt_error *gm_submit(gp_queue *q, NSString *what, gm_encode_fn fn);
/* The device a queue (stream or recording) is on. */
GMDevice *gm_queue_device(gp_queue *q);
/* A new command buffer of s, ordered after the previous one (s->enc held
 * until gm_stream_commit or gm_stream_abort). */
gpurt_error *gm_stream_begin(GMStream *s, GMEnc *__strong *out);
void gm_stream_commit(GMStream *s, GMEnc *x, NSString *what);
/* Drops x uncommitted; the event records it had encoded complete now. */
void gm_stream_abort(GMStream *s, GMEnc *x);
/* Waits until every command buffer committed so far has completed. */
void gm_stream_wait(GMStream *s);
gpurt_error *gm_queue_create(void *ctx, uint32_t dev, gp_queue *out);
void gm_queue_destroy(void *ctx, gp_queue *q);
gpurt_error *gm_queue_sync(void *ctx, gp_queue *q);
gpurt_error *gm_queue_query(void *ctx, gp_queue *q, uint64_t *pending);
gpurt_error *gm_event_create(void *ctx, uint32_t dev, uint32_t flags, void **ev);
void gm_event_destroy(void *ctx, void *ev);
gpurt_error *gm_event_record(void *ctx, void *ev, gp_queue *q);
gpurt_error *gm_event_wait(void *ctx, gp_queue *q, void *ev);
gpurt_error *gm_event_query(void *ctx, void *ev, int *done);
gpurt_error *gm_event_sync(void *ctx, void *ev);
gpurt_error *gm_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which);

/* ---- the op files --------------------------------------------------------------- */

/* metal_attention.m (1.5) */
gpurt_error *gm_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r);
gpurt_error *gm_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj);
void gm_attention_destroy(void *ctx, void *obj);
gpurt_error *gm_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                               const gp_attention_sched *sched);
gpurt_error *gm_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r);
/* metal_quant.m (1.4) */
gpurt_error *gm_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r);
gpurt_error *gm_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r);
/* metal_gemm.m */
gpurt_error *gm_gemm_plan(void *ctx, uint32_t dev, const gpurt_gemm_desc *d, void **plan);
void gm_gemm_plan_free(void *ctx, void *plan);
gpurt_error *gm_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r);
/* metal_module.m */
gpurt_error *gm_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod);
void gm_module_unload(void *ctx, void *mod);
gpurt_error *gm_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                           gpurt_kernel_info *info);
gpurt_error *gm_launch(void *ctx, gp_queue *q, const gp_launch_op *l);
gpurt_error *gm_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n, uint64_t *enqueued);
/* metal_memory.m */
gpurt_error *gm_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out);
gpurt_error *gm_mem_free(void *ctx, gp_mem *m);
gpurt_error *gm_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr);
void gm_host_free(void *ctx, gp_mem *m);
gpurt_error *gm_copy(void *ctx, gp_queue *q, const gp_copy *c);
gpurt_error *gm_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                       uint32_t element_size);
/* metal_graph.m */
gpurt_error *gm_graph_begin(void *ctx, uint32_t dev, gp_queue *rec);
gpurt_error *gm_graph_end(void *ctx, gp_queue *rec, int abort, void **exec);
gpurt_error *gm_graph_launch(void *ctx, void *exec, gp_queue *q);
void gm_graph_destroy(void *ctx, void *exec);

#endif /* GPURT_METAL_INTERNAL_H_ */
