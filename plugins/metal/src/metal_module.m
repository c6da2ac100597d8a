/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_module.m — modules (BUILTIN, METAL_SOURCE, METALLIB), kernels
 * (MTLComputePipelineState) and launches. Launch arguments are checked as
 * the mock checks them (count, kind, size, buffer views, device) before
 * anything is encoded.
 */
#import "metal_internal.h"

#include <string.h>

#define GM_SLEEP_MAX_NS 2000000000ull /* sleep_ns is capped at 2 s */

@implementation GMKernel
@end
@implementation GMModule
@end

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
static MTLCompileOptions *gm_compile_options(void) {
  MTLCompileOptions *o = [[MTLCompileOptions alloc] init];
  o.fastMathEnabled = NO; /* f32 arithmetic as the other backends do it */
  return o;
}
#pragma clang diagnostic pop

gpurt_error *gm_builtin_library(GMDevice *d, id<MTLLibrary> __strong *out) {
  gpurt_error *e = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->builtin == nil) {
    NSError *err = nil;
    id<MTLLibrary> lib = nil;
    if (gm_metallib_len > 0) {
      dispatch_data_t data =
          dispatch_data_create(gm_metallib_data, gm_metallib_len, NULL, ^{
                               }); /* static bytes: nothing to free */
      lib = [d->dev newLibraryWithData:data error:&err];
    }
    if (lib == nil) {
      NSString *src = [[NSString alloc] initWithBytes:gm_metal_source
                                               length:gm_metal_source_len
                                             encoding:NSUTF8StringEncoding];
      NSError *serr = nil;
      lib = src == nil ? nil
                       : [d->dev newLibraryWithSource:src options:gm_compile_options() error:&serr];
      if (lib == nil)
        e = gm_nserror(GPURT_ERR_INTERNAL, serr != nil ? serr : err,
                       "device %u: the built-in kernels did not load (metallib %lu bytes, then "
                       "source)",
                       d->index, gm_metallib_len);
    }
    d->builtin = lib;
  }
  if (e == NULL) *out = d->builtin;
  pthread_mutex_unlock(&d->mu);
  return e;
}

static gpurt_error *gm_make_pso(GMDevice *d, id<MTLLibrary> lib, NSString *name, int reflect,
                                id<MTLComputePipelineState> __strong *out,
                                MTLComputePipelineReflection *__strong *refl) {
  id<MTLFunction> fn = [lib newFunctionWithName:name];
  if (fn == nil)
    return gp_err(GPURT_ERR_NOT_FOUND, "device %u: no kernel \"%s\" in the library", d->index,
                  name.UTF8String);
  if (fn.functionType != MTLFunctionTypeKernel)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "\"%s\" is not a kernel function", name.UTF8String);
  NSError *err = nil;
  id<MTLComputePipelineState> pso;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  if (reflect) {
    MTLComputePipelineReflection *r = nil;
    pso = [d->dev newComputePipelineStateWithFunction:fn
                                              options:MTLPipelineOptionArgumentInfo
                                           reflection:&r
                                                error:&err];
    if (refl != NULL) *refl = r;
  } else {
    pso = [d->dev newComputePipelineStateWithFunction:fn error:&err];
  }
#pragma clang diagnostic pop
  if (pso == nil)
    return gm_nserror(GPURT_ERR_INTERNAL, err, "device %u: kernel \"%s\": no pipeline state",
                      d->index, name.UTF8String);
  *out = pso;
  return NULL;
}

gpurt_error *gm_builtin_pso(GMDevice *d, NSString *name, id<MTLComputePipelineState> __strong *out) {
  id<MTLLibrary> lib;
  gpurt_error *e = gm_builtin_library(d, &lib);
  if (e) return e;
  pthread_mutex_lock(&d->mu);
  id<MTLComputePipelineState> pso = d->psos[name];
  pthread_mutex_unlock(&d->mu);
  if (pso == nil) {
    if ((e = gm_make_pso(d, lib, name, 0, &pso, NULL))) return e;
    pthread_mutex_lock(&d->mu);
    if (d->psos[name] == nil) d->psos[name] = pso;
    pso = d->psos[name];
    pthread_mutex_unlock(&d->mu);
  }
  *out = pso;
  return NULL;
}

/* ---- modules ------------------------------------------------------------------ */

gpurt_error *gm_module_load(gpurt_runtime *h, const gpurt_module_load_args *args,
                            gpurt_module **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMDevice *d;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: out is NULL");
    gpurt_module_load_args a;
    if ((e = gp_read_struct(&a, sizeof a, args, "module load args"))) return e;
    if (a.name == NULL && a.name_len > 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: name is NULL with name_len %llu",
                    (unsigned long long)a.name_len);
    int nl = (int)(a.name_len > 200 ? 200 : a.name_len);
    const char *nm = a.name != NULL ? a.name : "";
    if ((e = gm_device(rt, a.device, &d))) return e;
    GMModule *m = [[GMModule alloc] init];
    m->device = d;
    m->kernels = [NSMutableDictionary dictionary];
    m->name = [[NSString alloc] initWithBytes:nm length:(NSUInteger)nl encoding:NSUTF8StringEncoding];
    if (m->name == nil) m->name = @"(unnamed)";
    switch (a.format) {
      case GPURT_MODULE_BUILTIN: {
        id<MTLLibrary> lib;
        if ((e = gm_builtin_library(d, &lib))) return e;
        m->lib = lib;
        m->builtin = 1;
        break;
      }
      case GPURT_MODULE_METAL_SOURCE: {
        if (a.data == NULL || a.data_len == 0)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": no source", nl, nm);
        NSString *src = [[NSString alloc] initWithBytes:a.data
                                                 length:(NSUInteger)a.data_len
                                               encoding:NSUTF8StringEncoding];
        if (src == nil)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": source is not UTF-8",
                        nl, nm);
        NSError *err = nil;
        m->lib = [d->dev newLibraryWithSource:src options:gm_compile_options() error:&err];
        if (m->lib == nil)
          return gm_nserror(GPURT_ERR_INVALID_ARGUMENT, err,
                            "module_load: module \"%.*s\": the Metal source did not compile", nl, nm);
        break;
      }
      case GPURT_MODULE_METALLIB: {
        if (a.data == NULL || a.data_len == 0)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": no metallib data",
                        nl, nm);
        /* The caller's bytes are borrowed for the call only: copy them. */
        dispatch_data_t data = dispatch_data_create(a.data, (size_t)a.data_len, NULL,
                                                    DISPATCH_DATA_DESTRUCTOR_DEFAULT);
        NSError *err = nil;
        m->lib = [d->dev newLibraryWithData:data error:&err];
        if (m->lib == nil)
          return gm_nserror(GPURT_ERR_INVALID_ARGUMENT, err,
                            "module_load: module \"%.*s\": not a usable metallib", nl, nm);
        break;
      }
      default:
        return gp_err(GPURT_ERR_UNSUPPORTED,
                      "module_load: module \"%.*s\": format %d is not supported by the metal "
                      "plugin (BUILTIN, METALLIB and METAL_SOURCE are)",
                      nl, nm, a.format);
    }
    uintptr_t hm;
    if ((e = gm_insert(rt, &rt->modules, m, &hm, "module_load"))) return e;
    *out = (gpurt_module *)hm;
    return NULL;
  }
}

void gm_module_drop_kernels_locked(GMRuntime *rt, GMModule *m) {
  for (NSNumber *hk in m->kernels.allValues) {
    void *o = gp_table_remove(&rt->kernels, (uintptr_t)hk.unsignedLongLongValue);
    if (o != NULL) CFBridgingRelease(o);
  }
  [m->kernels removeAllObjects];
}

gpurt_error *gm_module_unload(gpurt_runtime *h, gpurt_module *mh) {
  if (mh == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&rt->mu);
    void *o = NULL;
    int st = gp_table_lookup(&rt->modules, (uintptr_t)mh, &o);
    GMModule *m = nil;
    if (st == GP_HANDLE_OK) {
      m = CFBridgingRelease(gp_table_remove(&rt->modules, (uintptr_t)mh));
      gm_module_drop_kernels_locked(rt, m);
    }
    pthread_mutex_unlock(&rt->mu);
    if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_MODULE, (uintptr_t)mh);
    return NULL;
  }
}

/* ---- kernels ----------------------------------------------------------------------- */

/* Parameters of a user kernel from pipeline reflection. Buffer index p is
 * parameter p. A writable device buffer is GPURT_ARG_BUFFER; a read-only
 * binding may be a `device const T *` or a `constant T &` scalar, which
 * reflection cannot tell apart, so it is GPURT_ARG_ANY with the size of T
 * and launch accepts a buffer or a scalar of that size there. */
static gpurt_error *gm_reflect(GMKernel *k, MTLComputePipelineReflection *r) {
  k->num_params = 0;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  for (MTLArgument *arg in r.arguments) {
    if (!arg.isActive) continue;
    switch (arg.type) {
      case MTLArgumentTypeBuffer: {
        NSUInteger idx = arg.index;
        if (idx >= GPURT_MAX_KERNEL_PARAMS)
          return gp_err(GPURT_ERR_UNSUPPORTED, "kernel \"%s\": buffer index %lu is beyond %d parameters",
                        k->name.UTF8String, (unsigned long)idx, GPURT_MAX_KERNEL_PARAMS);
        for (uint32_t p = k->num_params; p < idx; p++) { /* gaps take anything */
          k->kinds[p] = GPURT_ARG_ANY;
          k->sizes[p] = 0;
        }
        if (idx + 1 > k->num_params) k->num_params = (uint32_t)idx + 1;
        if (arg.access == MTLArgumentAccessReadOnly) {
          k->kinds[idx] = GPURT_ARG_ANY;
          k->sizes[idx] = (uint32_t)arg.bufferDataSize;
        } else {
          k->kinds[idx] = GPURT_ARG_BUFFER;
          k->sizes[idx] = 8;
        }
        break;
      }
      case MTLArgumentTypeThreadgroupMemory:
        k->static_shared += (uint32_t)arg.threadgroupMemoryDataSize;
        break;
      default:
        return gp_err(GPURT_ERR_UNSUPPORTED,
                      "kernel \"%s\": parameter \"%s\" is a texture, sampler or other non-buffer "
                      "binding, which gpurt cannot pass",
                      k->name.UTF8String, arg.name.UTF8String);
    }
  }
#pragma clang diagnostic pop
  return NULL;
}

static gpurt_error *gm_get_module(GMRuntime *rt, gpurt_module *h, GMModule *__strong *out) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->modules, (uintptr_t)h, GP_KIND_MODULE, &o);
  if (e) return e;
  *out = o;
  return NULL;
}

gpurt_error *gm_kernel_get(gpurt_runtime *h, gpurt_module *mh, const char *name,
                           uint64_t name_len, gpurt_kernel **out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMModule *m;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: out is NULL");
    if (name == NULL && name_len > 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: name is NULL with name_len %llu",
                    (unsigned long long)name_len);
    if ((e = gm_get_module(rt, mh, &m))) return e;
    int nl = (int)(name_len > 200 ? 200 : name_len);
    NSString *key = [[NSString alloc] initWithBytes:name != NULL ? name : ""
                                             length:(NSUInteger)name_len
                                           encoding:NSUTF8StringEncoding];
    if (key == nil || name_len == 0)
      return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl,
                    name != NULL ? name : "", m->name.UTF8String);
    /* One handle per name and module. */
    pthread_mutex_lock(&rt->mu);
    NSNumber *have = m->kernels[key];
    pthread_mutex_unlock(&rt->mu);
    if (have != nil) {
      *out = (gpurt_kernel *)(uintptr_t)have.unsignedLongLongValue;
      return NULL;
    }
    GMKernel *k = [[GMKernel alloc] init];
    k->device = m->device;
    k->name = key;
    if (m->builtin) {
      k->builtin = gp_builtin_find(name, (size_t)name_len);
      if (k->builtin == NULL)
        return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl,
                      name, m->name.UTF8String);
      k->num_params = k->builtin->num_params;
      memcpy(k->kinds, k->builtin->kinds, sizeof k->builtin->kinds);
      memcpy(k->sizes, k->builtin->sizes, sizeof k->builtin->sizes);
      id<MTLComputePipelineState> pso;
      if ((e = gm_builtin_pso(m->device, key, &pso))) return e;
      k->pso = pso;
    } else {
      id<MTLComputePipelineState> pso;
      MTLComputePipelineReflection *r = nil;
      if ((e = gm_make_pso(m->device, m->lib, key, 1, &pso, &r))) {
        if (gp_error_code(e) == GPURT_ERR_NOT_FOUND) {
          gp_error_destroy(e);
          return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl,
                        name, m->name.UTF8String);
        }
        return e;
      }
      k->pso = pso;
      if ((e = gm_reflect(k, r))) return e;
    }
    uintptr_t hk = 0;
    /* Insert unless another thread got there first or the module went away. */
    void *obj = (void *)CFBridgingRetain(k);
    int r;
    void *mo = NULL;
    pthread_mutex_lock(&rt->mu);
    have = m->kernels[key];
    int live = !rt->closed && gp_table_lookup(&rt->modules, (uintptr_t)mh, &mo) == GP_HANDLE_OK;
    if (have != nil) {
      hk = (uintptr_t)have.unsignedLongLongValue;
      r = 1;
    } else if (!live) {
      r = -2;
    } else {
      r = gp_table_insert(&rt->kernels, obj, &hk);
      if (r == 0) m->kernels[key] = @((unsigned long long)hk);
    }
    pthread_mutex_unlock(&rt->mu);
    if (r != 0) CFBridgingRelease(obj);
    if (r == -2) return gp_handle_error(GP_HANDLE_STALE, GP_KIND_MODULE, (uintptr_t)mh);
    if (r < 0) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "kernel_get: the handle table is full");
    *out = (gpurt_kernel *)hk;
    return NULL;
  }
}

static gpurt_error *gm_get_kernel(GMRuntime *rt, gpurt_kernel *h, GMKernel *__strong *out) {
  id o;
  gpurt_error *e = gm_lookup(rt, &rt->kernels, (uintptr_t)h, GP_KIND_KERNEL, &o);
  if (e) return e;
  *out = o;
  return NULL;
}

gpurt_error *gm_kernel_info(gpurt_runtime *h, gpurt_kernel *kh, gpurt_kernel_info *out) {
  @autoreleasepool {
    GMRuntime *rt;
    GMKernel *k;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gp_check_out(out, "kernel info"))) return e;
    if ((e = gm_get_kernel(rt, kh, &k))) return e;
    gpurt_kernel_info i;
    memset(&i, 0, sizeof i);
    i.num_params = k->num_params;
    i.max_threads_per_block = (uint32_t)k->pso.maxTotalThreadsPerThreadgroup;
    i.static_shared_bytes = (uint32_t)k->pso.staticThreadgroupMemoryLength;
    memcpy(i.param_kind, k->kinds, sizeof i.param_kind);
    memcpy(i.param_size, k->sizes, sizeof i.param_size);
    gp_write_struct(out, &i, sizeof i);
    return NULL;
  }
}

/* ---- launch ----------------------------------------------------------------------------------- */

/* sleep_ns spins; its speed is measured once per device: iterations per ns. */
static gpurt_error *gm_sleep_rate(GMDevice *d, float *out) {
  pthread_mutex_lock(&d->mu);
  float rate = d->sleep_iters_per_ns;
  pthread_mutex_unlock(&d->mu);
  if (rate > 0) {
    *out = rate;
    return NULL;
  }
  id<MTLComputePipelineState> pso;
  gpurt_error *e = gm_builtin_pso(d, @"sleep_ns", &pso);
  if (e) return e;
  id<MTLCommandQueue> q = [d->dev newCommandQueue];
  id<MTLCommandBuffer> cb = [q commandBuffer];
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  if (q == nil || cb == nil || enc == nil)
    return gp_err(GPURT_ERR_INTERNAL, "device %u: sleep_ns calibration: no command buffer", d->index);
  const uint64_t probe_iters = 2000000; /* "ns" at one iteration per ns */
  const float one = 1.0f;
  [enc setComputePipelineState:pso];
  [enc setBytes:&probe_iters length:sizeof probe_iters atIndex:0];
  [enc setBytes:&one length:sizeof one atIndex:1];
  [enc dispatchThreadgroups:MTLSizeMake(1, 1, 1) threadsPerThreadgroup:MTLSizeMake(1, 1, 1)];
  [enc endEncoding];
  [cb commit];
  [cb waitUntilCompleted];
  double secs = cb.GPUEndTime - cb.GPUStartTime;
  rate = 1.0f;
  if (cb.status == MTLCommandBufferStatusCompleted && secs > 0) {
    rate = (float)((double)probe_iters / (secs * 1e9));
    if (rate < 0.01f) rate = 0.01f;
    if (rate > 100.0f) rate = 100.0f;
  }
  pthread_mutex_lock(&d->mu);
  d->sleep_iters_per_ns = rate;
  pthread_mutex_unlock(&d->mu);
  *out = rate;
  return NULL;
}

/* One launch, checked and resolved by gm_launch_prepare, encoded by
 * gm_launch_encode. a.args is the caller's array, borrowed for the call. */
@interface GMLaunch : NSObject {
@public
  GMKernel *k;
  gpurt_launch_args a;
  GMBuffer *bufs[GPURT_MAX_KERNEL_PARAMS]; /* the buffer arguments, nil elsewhere */
  gp_launch_exec x;
  uint64_t dyn;     /* dynamic threadgroup memory, rounded up to 16 bytes */
  float sleep_rate; /* sleep_ns only */
}
@end
@implementation GMLaunch
@end

/* Checks one launch on stream s as launch does (kernel, device, geometry,
 * arguments, buffer views) and resolves it; encodes nothing. */
static gpurt_error *gm_launch_prepare(GMRuntime *rt, GMStream *s, gpurt_kernel *kh,
                                      const gpurt_launch_args *args, GMLaunch *__strong *out) {
  GMKernel *k;
  gpurt_error *e;
  if ((e = gm_get_kernel(rt, kh, &k))) return e;
  const char *kn = k->name.UTF8String;
  if ((e = gm_check_lost(s->device))) return e;
  if (k->device != s->device) return gp_launch_device_error(kn, k->device->index, s->device->index);
  gpurt_launch_args a;
  if ((e = gp_launch_read(args, &a))) return e;
  if ((e = gp_launch_check(kn, &a, k->num_params, k->kinds, k->sizes, GP_LAUNCH_ANY_TAKES_BUFFER)))
    return e;
  /* The device's limits (after the checks every plugin makes). */
  uint64_t threads = (uint64_t)a.block[0] * a.block[1] * a.block[2];
  uint64_t max_threads = k->pso.maxTotalThreadsPerThreadgroup;
  if (threads > max_threads)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": block (%u,%u,%u) has %llu threads (this pipeline allows %llu)", kn,
                  a.block[0], a.block[1], a.block[2], (unsigned long long)threads,
                  (unsigned long long)max_threads);
  uint64_t max_shared = k->device->dev.maxThreadgroupMemoryLength;
  uint64_t static_shared = k->pso.staticThreadgroupMemoryLength;
  uint64_t dyn = ((uint64_t)a.shared_mem_bytes + 15) & ~(uint64_t)15;
  if (dyn + static_shared > max_shared)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                  "launch \"%s\": %u bytes of dynamic threadgroup memory (+%llu static; max %llu)", kn,
                  a.shared_mem_bytes, (unsigned long long)static_shared,
                  (unsigned long long)max_shared);

  /* Resolve every buffer argument before encoding anything. */
  __strong GMBuffer *bufs[GPURT_MAX_KERNEL_PARAMS] = {nil};
  uint64_t view[GPURT_MAX_KERNEL_PARAMS] = {0};
  gp_launch_exec x;
  memset(&x, 0, sizeof x);
  x.k = k->builtin;
  memcpy(x.grid, a.grid, sizeof x.grid);
  memcpy(x.block, a.block, sizeof x.block);
  for (uint32_t p = 0; p < a.num_args; p++) {
    const gpurt_kernel_arg *g = &a.args[p];
    if (g->kind == GPURT_ARG_BUFFER) {
      id bo;
      if ((e = gm_lookup(rt, &rt->buffers, (uintptr_t)g->buffer, GP_KIND_BUFFER, &bo)))
        return gp_err_wrap(e, "launch \"%s\": argument %u", kn, p);
      GMBuffer *b = bo;
      if (b->device != s->device->index)
        return gp_launch_arg_device_error(kn, p, b->device, s->device->index);
      if ((e = gp_launch_view(kn, p, b->size, g->offset, g->length, &view[p]))) return e;
      bufs[p] = b;
    } else if (p < GP_BK_MAX_PARAMS) {
      uint64_t v = g->value;
      if (g->size < 8) v &= (1ull << (8 * g->size)) - 1;
      x.scalar[p] = v;
    }
  }
  float sleep_rate = 0;
  if (k->builtin != NULL) {
    if ((e = gp_builtin_check_views(k->builtin, &a, view))) return e;
    if (k->builtin->op == GP_BK_SLEEP && (e = gm_sleep_rate(k->device, &sleep_rate))) return e;
  }
  GMLaunch *l = [[GMLaunch alloc] init];
  l->k = k;
  l->a = a;
  for (uint32_t p = 0; p < a.num_args; p++) l->bufs[p] = bufs[p];
  l->x = x;
  l->dyn = dyn;
  l->sleep_rate = sleep_rate;
  *out = l;
  return NULL;
}

/* Encodes one prepared launch as a dispatch of enc. */
static void gm_launch_encode(id<MTLComputeCommandEncoder> enc, GMLaunch *l) {
  GMKernel *k = l->k;
  const gpurt_launch_args *a = &l->a;
  [enc setComputePipelineState:k->pso];
  for (uint32_t p = 0; p < a->num_args; p++) {
    const gpurt_kernel_arg *g = &a->args[p];
    if (g->kind == GPURT_ARG_BUFFER) {
      [enc setBuffer:l->bufs[p]->buf offset:(NSUInteger)g->offset atIndex:p];
    } else {
      uint64_t v = g->value; /* little-endian: the low bytes come first */
      [enc setBytes:&v length:g->size atIndex:p];
    }
  }
  if (k->builtin != NULL && k->builtin->op == GP_BK_SLEEP) {
    /* The hidden second argument of sleep_ns; the spin is capped. */
    uint64_t ns = l->x.scalar[0] > GM_SLEEP_MAX_NS ? GM_SLEEP_MAX_NS : l->x.scalar[0];
    float rate = l->sleep_rate;
    [enc setBytes:&ns length:sizeof ns atIndex:0];
    [enc setBytes:&rate length:sizeof rate atIndex:1];
  }
  if (a->shared_mem_bytes > 0) [enc setThreadgroupMemoryLength:(NSUInteger)l->dyn atIndex:0];
  [enc dispatchThreadgroups:MTLSizeMake(a->grid[0], a->grid[1], a->grid[2])
      threadsPerThreadgroup:MTLSizeMake(a->block[0], a->block[1], a->block[2])];
}

/* Counts n launches against fail_launch_nth: the index refused, or n. */
static uint64_t gm_launch_faults(GMRuntime *rt, uint64_t n) {
  pthread_mutex_lock(&rt->mu);
  uint64_t at = gp_fault_launches(&rt->fail_launch_nth, n);
  pthread_mutex_unlock(&rt->mu);
  return at;
}

static gpurt_error *gm_launch_fault_err(GMLaunch *l) {
  return gp_err(GPURT_ERR_LAUNCH_FAILED,
                "launch \"%s\": the kernel failed to start (injected fault: fail_launch_nth)",
                l->k->name.UTF8String);
}

gpurt_error *gm_launch(gpurt_runtime *h, gpurt_stream *sh, gpurt_kernel *kh,
                       const gpurt_launch_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gp_need_stream("launch", sh))) return e;
    id so;
    if ((e = gm_lookup(rt, &rt->streams, (uintptr_t)sh, GP_KIND_STREAM, &so))) return e;
    GMStream *s = so;
    GMLaunch *l;
    if ((e = gm_launch_prepare(rt, s, kh, args, &l))) return e;
    if (gm_launch_faults(rt, 1) == 0) return gm_launch_fault_err(l);

    id<MTLCommandBuffer> cb;
    if ((e = gm_stream_begin(s, &cb))) return e;
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    if (enc == nil) {
      gm_stream_abort(s);
      return gp_err(GPURT_ERR_INTERNAL, "launch \"%s\": no compute encoder", l->k->name.UTF8String);
    }
    gm_launch_encode(enc, l);
    [enc endEncoding];
    gm_stream_commit(s, cb, [@"kernel " stringByAppendingString:l->k->name], nil, 0);
    return NULL;
  }
}

/* Every item is checked (gm_launch_prepare) before anything is encoded, so
 * an invalid item enqueues nothing. The launches fail_launch_nth lets
 * through are then dispatched, in order, by one serial compute encoder of
 * one command buffer of the stream (s->enc held from begin to commit, so
 * no other work on the stream lands inside the batch). */
gpurt_error *gm_launch_batch(gpurt_runtime *h, gpurt_stream *sh, uint64_t count,
                             const gpurt_launch_item *items, uint64_t *out_enqueued) {
  if (out_enqueued != NULL) *out_enqueued = 0;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (count == 0) return NULL;
    if ((e = gp_launch_batch_check(sh, count, items))) return e;
    id so;
    if ((e = gm_lookup(rt, &rt->streams, (uintptr_t)sh, GP_KIND_STREAM, &so))) return e;
    GMStream *s = so;
    if ((e = gm_check_lost(s->device))) return gp_err_wrap(e, "launch_batch");
    /* The capacity is a hint: bounded, whatever count claims. */
    NSMutableArray<GMLaunch *> *ls =
        [NSMutableArray arrayWithCapacity:(NSUInteger)(count < 1024 ? count : 1024)];
    for (uint64_t i = 0; i < count; i++) {
      GMLaunch *l;
      if ((e = gm_launch_prepare(rt, s, items[i].kernel, items[i].args, &l)))
        return gp_batch_item_error(e, i);
      [ls addObject:l];
    }
    GMLaunch *first = [ls objectAtIndex:0];
    uint64_t n = gm_launch_faults(rt, count);
    if (n > 0) {
      id<MTLCommandBuffer> cb;
      if ((e = gm_stream_begin(s, &cb))) return gp_err_wrap(e, "launch_batch");
      id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
      if (enc == nil) {
        gm_stream_abort(s);
        return gp_err(GPURT_ERR_INTERNAL, "launch_batch: item 0: launch \"%s\": no compute encoder",
                      first->k->name.UTF8String);
      }
      uint32_t shared_set = 0; /* threadgroup memory the current encoder has set */
      for (uint64_t i = 0; i < n; i++) {
        GMLaunch *l = [ls objectAtIndex:(NSUInteger)i];
        /* Threadgroup memory set for an earlier dispatch stays set; a
         * launch without any gets a fresh encoder (same command buffer). */
        if (l->a.shared_mem_bytes == 0 && shared_set > 0) {
          [enc endEncoding];
          enc = [cb computeCommandEncoder];
          if (enc == nil) {
            /* The launches before item i are encoded: commit them. */
            n = i;
            e = gp_err(GPURT_ERR_INTERNAL, "launch_batch: item %llu: launch \"%s\": no compute encoder",
                       (unsigned long long)i, l->k->name.UTF8String);
            break;
          }
        }
        gm_launch_encode(enc, l);
        shared_set = l->a.shared_mem_bytes;
      }
      if (enc != nil) [enc endEncoding];
      gm_stream_commit(s, cb,
                       [NSString stringWithFormat:@"launch_batch of %llu kernels, first %@",
                                                  (unsigned long long)n, first->k->name],
                       nil, 0);
    }
    if (out_enqueued != NULL) *out_enqueued = n;
    if (e != NULL) return e;
    if (n < count) {
      e = gp_batch_midway_error(gm_launch_fault_err([ls objectAtIndex:(NSUInteger)n]), n);
    }
    return e;
  }
}
