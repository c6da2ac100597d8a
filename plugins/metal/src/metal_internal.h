/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_internal.h — the Metal plugin's objects (Objective-C, ARC) and the
 * functions its files share.
 *
 * Files (one prefix, one concept each):
 *   metal_plugin.m  negotiate, the table, probe, runtimes, devices
 *   metal_memory.m  buffers, host buffers, copy, memset
 *   metal_stream.m  command-buffer streams, events
 *   metal_module.m  modules (BUILTIN, METALLIB, METAL_SOURCE), kernels, launch
 *   metal_gemm.m    GEMM plans and runs
 *
 * Handles are generational ids from csrc's gp_handle_table, never object
 * pointers. A table slot holds a +1 reference taken with CFBridgingRetain
 * when the handle is made and dropped with CFBridgingRelease when it is
 * freed; gm_lookup turns a handle back into a strong local (ARC retains it
 * while the runtime's lock is held), so an object outlives every call that
 * is using it even if another thread frees its handle meanwhile.
 *
 * Locks, in the order they may nest (never the other way round):
 *   g_mu (the process-wide runtime table)
 *   GMRuntime.mu (its tables, counters, fault injection)
 *   GMStream.enc (held from gm_stream_begin to gm_stream_commit)
 *   GMStream.mu / GMEvent.mu / GMDevice.mu (leaves: short, never waited on
 *   while another lock is held)
 * No lock is held while waiting for the GPU.
 */
#ifndef GPURT_METAL_INTERNAL_H_
#define GPURT_METAL_INTERNAL_H_

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <pthread.h>

#include "gp_common.h"

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

/* ---- objects ------------------------------------------------------------ */

@interface GMDevice : NSObject {
@public
  id<MTLDevice> dev;
  uint32_t index;
  pthread_mutex_t mu;      /* guards everything below */
  id<MTLLibrary> builtin;  /* lazily loaded */
  NSMutableDictionary<NSString *, id<MTLComputePipelineState>> *psos;
  float sleep_iters_per_ns; /* 0 until calibrated */
  int lost;                 /* sticky GPURT_ERR_DEVICE_LOST */
  char lost_why[256];
}
@end

@interface GMBuffer : NSObject {
@public
  id<MTLBuffer> buf;
  uint64_t size;
  uint32_t device;
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

@interface GMHostBuffer : NSObject {
@public
  GMHostMem *mem;
  uint64_t size;
  pthread_mutex_t mu; /* guards wrappers */
  NSMutableDictionary<NSNumber *, id<MTLBuffer>> *wrappers; /* per device */
}
@end

@interface GMStream : NSObject {
@public
  GMDevice *device;
  id<MTLCommandQueue> queue;
  id<MTLSharedEvent> timeline; /* value n: the n-th command buffer is done */
  pthread_mutex_t enc;  /* held from begin to commit: one encoder at a time */
  pthread_mutex_t mu;   /* guards the counters and pending */
  pthread_cond_t cv;    /* completed advanced */
  uint64_t committed;   /* command buffers committed */
  uint64_t completed;   /* command buffers whose completion handler ran */
  gpurt_error *pending; /* the first command buffer error since the last sync */
}
@end

@interface GMEvent : NSObject {
@public
  GMDevice *device;
  uint32_t flags;
  id<MTLSharedEvent> ev;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded; /* value of the latest record; 0: never recorded */
  uint64_t done;     /* highest value whose record completed */
  uint64_t time_ns;  /* host time when `done` completed */
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
  uint32_t sizes[GPURT_MAX_KERNEL_PARAMS];
  uint32_t static_shared;
}
@end

@interface GMModule : NSObject {
@public
  GMDevice *device;
  id<MTLLibrary> lib;
  int builtin;
  NSString *name;
  /* kernel name -> kernel handle (owned by the module); guarded by the
   * runtime's lock */
  NSMutableDictionary<NSString *, NSNumber *> *kernels;
}
@end

@interface GMPlan : NSObject {
@public
  GMDevice *device;
  gpurt_gemm_desc desc;
  int use_mps;
  pthread_mutex_t mu; /* guards the cached MPS kernel */
  id mps;             /* MPSMatrixMultiplication for (alpha, beta) below */
  double mps_alpha, mps_beta;
}
@end

@interface GMRuntime : NSObject {
@public
  pthread_mutex_t mu;
  uintptr_t handle;
  uint32_t serial;
  int closed;
  NSArray<GMDevice *> *devices;
  gp_handle_table buffers, hosts, streams, events, modules, kernels, plans;
  gp_handle_table graphs; /* 1.3 (metal_graph.m) */
  gp_handle_table attns;  /* 1.5 (metal_attention.m) */
  uint64_t device_bytes, host_bytes;
  /* fault injection (runtime_control), as in the mock */
  int64_t fail_alloc_nth, fail_launch_nth;
  gpurt_log_fn log;
  void *log_user;
}
@end

/* ---- helpers shared by the .m files ---------------------------------------- */

/* NSError -> error object: the message includes localizedDescription, the
 * vendor code is the NSError code. */
gpurt_error *gm_nserror(int32_t code, NSError *err, const char *fmt, ...)
    GP_PRINTF(3, 4);

gpurt_error *gm_get_rt(gpurt_runtime *h, GMRuntime *__strong *out);
/* Looks h up in one of rt's tables; on success *out is a strong reference. */
gpurt_error *gm_lookup(GMRuntime *rt, gp_handle_table *t, uintptr_t h,
                       uint32_t kind, id __strong *out);
/* Inserts obj (+1 retained by the table); writes the handle. */
gpurt_error *gm_insert(GMRuntime *rt, gp_handle_table *t, id obj,
                       uintptr_t *out, const char *what);
gpurt_error *gm_device(GMRuntime *rt, uint32_t device, GMDevice *__strong *out);
/* DEVICE_LOST when the device was lost. */
gpurt_error *gm_check_lost(GMDevice *d);
void gm_mark_lost(GMDevice *d, const char *why);
void gm_log(GMRuntime *rt, int32_t level, const char *fmt, ...) GP_PRINTF(3, 4);

/* The built-in library and an internal pipeline of it, loaded on first use. */
gpurt_error *gm_builtin_library(GMDevice *d, id<MTLLibrary> __strong *out);
gpurt_error *gm_builtin_pso(GMDevice *d, NSString *name,
                            id<MTLComputePipelineState> __strong *out);

/* Streams: begin takes s->enc and returns a command buffer that waits for
 * the stream's previous one; commit signals the timeline, installs the
 * completion handler (errors name `what`) and releases s->enc. On an
 * encoding failure call gm_stream_abort instead of commit. */
gpurt_error *gm_stream_begin(GMStream *s, id<MTLCommandBuffer> __strong *out);
void gm_stream_commit(GMStream *s, id<MTLCommandBuffer> cb, NSString *what,
                      GMEvent *signal_event, uint64_t signal_value);
void gm_stream_abort(GMStream *s);
/* Waits until every command buffer committed so far has completed. */
void gm_stream_wait(GMStream *s);
/* Takes the stream's pending error (NULL when none). */
gpurt_error *gm_stream_take_error(GMStream *s);
/* Waits for every stream of rt on device (default ordering). */
void gm_wait_device(GMRuntime *rt, uint32_t device);

/* Encodes a 1-D internal kernel over n elements on cb. */
gpurt_error *gm_encode_1d(GMDevice *d, id<MTLCommandBuffer> cb, NSString *kernel,
                          id<MTLBuffer> b0, uint64_t off0, id<MTLBuffer> b1,
                          uint64_t off1, const void *scalar, size_t scalar_len,
                          uint64_t n);

/* Resolves a device-side endpoint of a copy or argument. */
id<MTLBuffer> gm_host_wrapper(GMHostBuffer *h, GMDevice *d);

uint64_t gm_now_ns(void);

/* metal_plugin.m: the runtime table and fault counters */
id gm_remove_locked(gp_handle_table *t, uintptr_t h);
int gm_alloc_fault(GMRuntime *rt);

/* metal_memory.m: the table's memory slots */
gpurt_error *gm_buffer_alloc(gpurt_runtime *h, uint32_t device, uint64_t size,
                             gpurt_buffer **out);
gpurt_error *gm_buffer_free(gpurt_runtime *h, gpurt_buffer *buf);
gpurt_error *gm_host_alloc(gpurt_runtime *h, uint64_t size, gpurt_host_buffer **out,
                           void **out_ptr);
gpurt_error *gm_host_free(gpurt_runtime *h, gpurt_host_buffer *buf);
gpurt_error *gm_copy(gpurt_runtime *h, const gpurt_copy_args *args);
gpurt_error *gm_memset(gpurt_runtime *h, const gpurt_memset_args *args);

/* metal_stream.m: the table's stream and event slots; stream lookup */
gpurt_error *gm_stream_create(gpurt_runtime *h, uint32_t device, gpurt_stream **out);
gpurt_error *gm_get_stream(GMRuntime *rt, gpurt_stream *h, GMStream *__strong *out);
gpurt_error *gm_stream_destroy(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *gm_stream_synchronize(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *gm_stream_query(gpurt_runtime *h, gpurt_stream *sh);
gpurt_error *gm_stream_wait_event(gpurt_runtime *h, gpurt_stream *sh, gpurt_event *eh);
gpurt_error *gm_event_create(gpurt_runtime *h, uint32_t device, uint32_t flags,
                             gpurt_event **out);
gpurt_error *gm_event_destroy(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *gm_event_record(gpurt_runtime *h, gpurt_event *eh, gpurt_stream *sh);
gpurt_error *gm_event_query(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *gm_event_synchronize(gpurt_runtime *h, gpurt_event *eh);
gpurt_error *gm_event_elapsed(gpurt_runtime *h, gpurt_event *sh, gpurt_event *eh,
                              double *out_ms);

/* metal_module.m and metal_gemm.m: the table's module, launch and GEMM slots */
gpurt_error *gm_module_load(gpurt_runtime *h, const gpurt_module_load_args *args,
                            gpurt_module **out);
gpurt_error *gm_module_unload(gpurt_runtime *h, gpurt_module *m);
gpurt_error *gm_kernel_get(gpurt_runtime *h, gpurt_module *m, const char *name,
                           uint64_t name_len, gpurt_kernel **out);
gpurt_error *gm_kernel_info(gpurt_runtime *h, gpurt_kernel *k,
                            gpurt_kernel_info *out);
gpurt_error *gm_launch(gpurt_runtime *h, gpurt_stream *s, gpurt_kernel *k,
                       const gpurt_launch_args *args);
gpurt_error *gm_launch_batch(gpurt_runtime *h, gpurt_stream *s, uint64_t count,
                             const gpurt_launch_item *items, uint64_t *out_enqueued);
gpurt_error *gm_gemm_plan_create(gpurt_runtime *h, uint32_t device,
                                 const gpurt_gemm_desc *desc,
                                 gpurt_gemm_plan **out);
gpurt_error *gm_gemm_plan_destroy(gpurt_runtime *h, gpurt_gemm_plan *p);
gpurt_error *gm_gemm_run(gpurt_runtime *h, gpurt_stream *s, gpurt_gemm_plan *p,
                         const gpurt_gemm_run_args *args);
/* metal_attention.m: attention over a paged KV cache (1.5) */
gpurt_error *gm_kv_append(gpurt_runtime *h, gpurt_stream *s, const gpurt_kv_append_args *args);
gpurt_error *gm_attention_create(gpurt_runtime *h, uint32_t device, const gpurt_attention_desc *desc,
                                 gpurt_attention **out);
gpurt_error *gm_attention_destroy(gpurt_runtime *h, gpurt_attention *a);
gpurt_error *gm_attention_plan(gpurt_runtime *h, gpurt_stream *s, gpurt_attention *a,
                               const gpurt_attention_plan_args *args);
gpurt_error *gm_attention_run(gpurt_runtime *h, gpurt_stream *s, gpurt_attention *a,
                              const gpurt_attention_run_args *args);
/* metal_comm.m: collectives (1.6): UNSUPPORTED */
gpurt_error *gm_comm_unique_id(gpurt_runtime *h, gpurt_comm_id *out);
gpurt_error *gm_comm_create(gpurt_runtime *h, const gpurt_comm_create_args *args, gpurt_comm **out);
gpurt_error *gm_comm_destroy(gpurt_runtime *h, gpurt_comm *c);
gpurt_error *gm_comm_abort(gpurt_runtime *h, gpurt_comm *c);
gpurt_error *gm_comm_query(gpurt_runtime *h, gpurt_comm *c);
gpurt_error *gm_comm_run(gpurt_runtime *h, gpurt_comm *c, const gpurt_comm_run_args *args);

/* metal_quant.m: quantized and grouped matmul (1.4) */
gpurt_error *gm_quant_matmul(gpurt_runtime *h, gpurt_stream *s, const gpurt_quant_matmul_args *args);
gpurt_error *gm_grouped_gemm(gpurt_runtime *h, gpurt_stream *s, const gpurt_grouped_gemm_args *args);
/* metal_graph.m: graphs (1.3) */
gpurt_error *gm_graph_create(gpurt_runtime *h, const gpurt_graph_create_args *args, gpurt_graph **out);
gpurt_error *gm_graph_launch(gpurt_runtime *h, gpurt_graph *g, gpurt_stream *s);
gpurt_error *gm_graph_update(gpurt_runtime *h, gpurt_graph *g, gpurt_graph_update_args *args);
gpurt_error *gm_graph_destroy(gpurt_runtime *h, gpurt_graph *g);
/* Frees every kernel handle of a module (runtime lock held by the caller). */
void gm_module_drop_kernels_locked(GMRuntime *rt, GMModule *m);

#endif /* GPURT_METAL_INTERNAL_H_ */
