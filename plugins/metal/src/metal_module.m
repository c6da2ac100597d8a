/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_module.m — modules (BUILTIN, METAL_SOURCE, METALLIB), kernels
 * (MTLComputePipelineState, owned by their module) and launches. The engine
 * has checked each launch against kernel_get's parameters, the limits open
 * reported and the built-in table, and resolved every buffer; this file
 * adds what only the pipeline knows (its thread and threadgroup-memory
 * limits, a reflected scalar's size) and encodes.
 *
 * Parameter p is [[buffer(p)]]: buffers bind with setBuffer:offset:atIndex:,
 * scalars with setBytes:length:atIndex:, dynamic shared memory with
 * setThreadgroupMemoryLength:atIndex:0; the launch is
 * dispatchThreadgroups:grid threadsPerThreadgroup:block. User kernels are
 * reflected: a writable buffer is BUFFER; a read-only binding may be
 * `device const T *` or `constant T &`, which reflection cannot tell apart,
 * so it is ANY (a buffer, or a scalar of T's size: kernel_get reports its
 * size as unknown so that the engine lets a buffer through, and launch
 * checks a scalar's size itself).
 */
#import "metal_internal.h"

#include <string.h>

#define GM_SLEEP_MAX_NS 2000000000ull /* sleep_ns is capped at 2 s */

/* ---- modules ------------------------------------------------------------------------------ */

gpurt_error *gm_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod) {
  @autoreleasepool {
    GMDevice *d = gm_dev(ctx, dev);
    if (a->name == NULL && a->name_len > 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: name is NULL with name_len %llu",
                    (unsigned long long)a->name_len);
    int nl = (int)(a->name_len > 200 ? 200 : a->name_len);
    const char *nm = a->name != NULL ? a->name : "";
    GMModule *m = [[GMModule alloc] init];
    m->device = d;
    m->name = [[NSString alloc] initWithBytes:nm length:(NSUInteger)nl encoding:NSUTF8StringEncoding];
    if (m->name == nil || nl == 0) m->name = @"(unnamed)";
    gpurt_error *e;
    switch (a->format) {
      case GPURT_MODULE_BUILTIN: {
        id<MTLLibrary> lib;
        if ((e = gm_builtin_library(d, &lib))) return e;
        m->lib = lib;
        m->builtin = 1;
        break;
      }
      case GPURT_MODULE_METAL_SOURCE: {
        if (a->data == NULL || a->data_len == 0)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": no source", nl, nm);
        NSString *src = [[NSString alloc] initWithBytes:a->data
                                                 length:(NSUInteger)a->data_len
                                               encoding:NSUTF8StringEncoding];
        if (src == nil)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": source is not UTF-8", nl, nm);
        NSError *err = nil;
        m->lib = [d->dev newLibraryWithSource:src options:gm_compile_options() error:&err];
        if (m->lib == nil)
          return gm_nserror(GPURT_ERR_INVALID_ARGUMENT, err,
                            "module_load: module \"%.*s\": the Metal source did not compile", nl, nm);
        break;
      }
      case GPURT_MODULE_METALLIB: {
        if (a->data == NULL || a->data_len == 0)
          return gp_err(GPURT_ERR_INVALID_ARGUMENT, "module_load: module \"%.*s\": no metallib data", nl, nm);
        /* The caller's bytes are borrowed for the call only: copy them. */
        dispatch_data_t data =
            dispatch_data_create(a->data, (size_t)a->data_len, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT);
        NSError *err = nil;
        m->lib = [d->dev newLibraryWithData:data error:&err];
        if (m->lib == nil)
          return gm_nserror(GPURT_ERR_INVALID_ARGUMENT, err, "module_load: module \"%.*s\": not a usable metallib",
                            nl, nm);
        break;
      }
      default:
        return gp_err(GPURT_ERR_UNSUPPORTED, "module_load: module \"%.*s\": format %d is not supported by the "
                      "metal plugin (BUILTIN, METALLIB and METAL_SOURCE are)", nl, nm, a->format);
    }
    *mod = (void *)CFBridgingRetain(m);
    return NULL;
  }
}

void gm_module_unload(void *ctx, void *mod) {
  (void)ctx;
  @autoreleasepool {
    (void)CFBridgingRelease(mod); /* its kernels go with it */
  }
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* Parameters of a user kernel from pipeline reflection (see the top). */
static gpurt_error *reflect(GMKernel *k, MTLComputePipelineReflection *r) {
  k->num_params = 0;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  for (MTLArgument *arg in r.arguments) {
    if (!arg.isActive) continue;
    switch (arg.type) {
      case MTLArgumentTypeBuffer: {
        NSUInteger idx = arg.index;
        if (idx >= GPURT_MAX_KERNEL_PARAMS)
          return gp_err(GPURT_ERR_UNSUPPORTED, "kernel_get: kernel \"%s\": buffer index %lu is beyond %d parameters",
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
        break; /* the pipeline's staticThreadgroupMemoryLength counts it */
      default:
        return gp_err(GPURT_ERR_UNSUPPORTED, "kernel_get: kernel \"%s\": parameter \"%s\" is a texture, sampler or "
                      "other non-buffer binding, which gpurt cannot pass", k->name.UTF8String, arg.name.UTF8String);
    }
  }
#pragma clang diagnostic pop
  return NULL;
}

static gpurt_error *user_pso(GMModule *m, NSString *name, int nl, const char *nm,
                             id<MTLComputePipelineState> __strong *out, MTLComputePipelineReflection *__strong *refl) {
  id<MTLFunction> fn = [m->lib newFunctionWithName:name];
  if (fn == nil)
    return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl, nm, m->name.UTF8String);
  if (fn.functionType != MTLFunctionTypeKernel)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "kernel_get: \"%.*s\" in module \"%s\" is not a kernel function", nl, nm,
                  m->name.UTF8String);
  NSError *err = nil;
  MTLComputePipelineReflection *r = nil;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  id<MTLComputePipelineState> pso = [m->device->dev newComputePipelineStateWithFunction:fn
                                                                                options:MTLPipelineOptionArgumentInfo
                                                                             reflection:&r
                                                                                  error:&err];
#pragma clang diagnostic pop
  if (pso == nil)
    return gm_nserror(GPURT_ERR_INTERNAL, err, "kernel_get: kernel \"%.*s\": no pipeline state", nl, nm);
  *out = pso;
  *refl = r;
  return NULL;
}

gpurt_error *gm_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                           gpurt_kernel_info *info) {
  (void)ctx;
  @autoreleasepool {
    GMModule *m = (__bridge GMModule *)mod;
    int nl = (int)(len > 200 ? 200 : len);
    NSString *key = [[NSString alloc] initWithBytes:name length:(NSUInteger)len encoding:NSUTF8StringEncoding];
    if (key == nil || len == 0)
      return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl, name,
                    m->name.UTF8String);
    /* One kernel object per name and module; the module owns it. */
    pthread_mutex_lock(&m->mu);
    GMKernel *k = m->kernels[key];
    pthread_mutex_unlock(&m->mu);
    gpurt_error *e;
    if (k == nil) {
      k = [[GMKernel alloc] init];
      k->device = m->device;
      k->name = key;
      if (m->builtin) {
        /* The engine found the name in gp_builtin_kernels. */
        k->builtin = gp_builtin_find(name, (size_t)len);
        if (k->builtin == NULL)
          return gp_err(GPURT_ERR_NOT_FOUND, "kernel_get: no kernel \"%.*s\" in module \"%s\"", nl, name,
                        m->name.UTF8String);
        k->num_params = k->builtin->num_params;
        memcpy(k->kinds, k->builtin->kinds, sizeof k->builtin->kinds);
        memcpy(k->sizes, k->builtin->sizes, sizeof k->builtin->sizes);
        id<MTLComputePipelineState> pso;
        if ((e = gm_builtin_pso(m->device, key, &pso))) return e;
        k->pso = pso;
      } else {
        id<MTLComputePipelineState> pso;
        MTLComputePipelineReflection *r = nil;
        if ((e = user_pso(m, key, nl, name, &pso, &r))) return e;
        k->pso = pso;
        if ((e = reflect(k, r))) return e;
      }
      pthread_mutex_lock(&m->mu);
      if (m->kernels[key] == nil) m->kernels[key] = k;
      k = m->kernels[key];
      pthread_mutex_unlock(&m->mu);
    }
    info->num_params = k->num_params;
    info->max_threads_per_block = (uint32_t)k->pso.maxTotalThreadsPerThreadgroup;
    info->static_shared_bytes = (uint32_t)k->pso.staticThreadgroupMemoryLength;
    for (uint32_t p = 0; p < k->num_params; p++) {
      info->param_kind[p] = k->kinds[p];
      /* ANY: a buffer or a scalar of the reflected size; launch checks it. */
      info->param_size[p] = k->kinds[p] == GPURT_ARG_ANY ? 0 : k->sizes[p];
    }
    *kernel = (__bridge void *)k;
    return NULL;
  }
}

/* ---- launch -------------------------------------------------------------------------------- */

/* sleep_ns spins; its speed is measured once per device: iterations per ns. */
static gpurt_error *sleep_rate(GMDevice *d, float *out) {
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
    return gp_err(GPURT_ERR_INTERNAL, "device %u: sleep_ns calibration: Metal gave no command buffer", d->index);
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

/* What only the pipeline knows, checked before anything is encoded. */
static gpurt_error *check(GMKernel *k, const gp_launch_op *l) {
  const char *kn = l->name;
  for (uint32_t p = 0; p < l->num_args && p < k->num_params; p++)
    if (l->kinds[p] != GPURT_ARG_BUFFER && k->kinds[p] == GPURT_ARG_ANY && k->sizes[p] != 0 &&
        l->sizes[p] != k->sizes[p])
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": argument %u (%s) has %u bytes, the kernel's "
                    "parameter %u", kn, p, gp_arg_kind_name(l->kinds[p]), l->sizes[p], k->sizes[p]);
  uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
  uint64_t max_threads = k->pso.maxTotalThreadsPerThreadgroup;
  if (threads > max_threads)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": block (%u,%u,%u) has %llu threads (this pipeline "
                  "allows %llu)", kn, l->block[0], l->block[1], l->block[2], (unsigned long long)threads,
                  (unsigned long long)max_threads);
  uint64_t max_shared = k->device->dev.maxThreadgroupMemoryLength;
  uint64_t static_shared = k->pso.staticThreadgroupMemoryLength;
  uint64_t dyn = ((uint64_t)l->shared_bytes + 15) & ~(uint64_t)15;
  if (dyn + static_shared > max_shared)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "launch \"%s\": %u bytes of dynamic threadgroup memory (+%llu static; "
                  "max %llu)", kn, l->shared_bytes, (unsigned long long)static_shared, (unsigned long long)max_shared);
  return NULL;
}

/* Encodes one checked launch into x. */
static gpurt_error *encode(GMEnc *x, GMKernel *k, const gp_launch_op *l, float rate) {
  /* A launch with dynamic threadgroup memory sets its own length, so it may
   * share the open encoder whatever it has set; one without needs an
   * encoder that has none set (gm_compute). */
  id<MTLComputeCommandEncoder> enc = l->shared_bytes > 0 && x->compute != nil ? x->compute : gm_compute(x);
  if (enc == nil) return gp_err(GPURT_ERR_INTERNAL, "launch \"%s\": Metal gave no compute encoder", l->name);
  [enc setComputePipelineState:k->pso];
  for (uint32_t p = 0; p < l->num_args; p++) {
    if (l->kinds[p] == GPURT_ARG_BUFFER) {
      gm_bind(enc, &l->bufs[p], NULL, p);
    } else {
      uint64_t v = l->scalar[p]; /* little-endian: the low bytes come first */
      [enc setBytes:&v length:l->sizes[p] atIndex:p];
    }
  }
  if (k->builtin != NULL && k->builtin->op == GP_BK_SLEEP) {
    /* The hidden second argument of sleep_ns; the spin is capped. */
    uint64_t ns = l->scalar[0] > GM_SLEEP_MAX_NS ? GM_SLEEP_MAX_NS : l->scalar[0];
    [enc setBytes:&ns length:sizeof ns atIndex:0];
    [enc setBytes:&rate length:sizeof rate atIndex:1];
  }
  if (l->shared_bytes > 0) {
    [enc setThreadgroupMemoryLength:(NSUInteger)(((uint64_t)l->shared_bytes + 15) & ~(uint64_t)15) atIndex:0];
    x->shared_set = l->shared_bytes;
  }
  [enc dispatchThreadgroups:MTLSizeMake(l->grid[0], l->grid[1], l->grid[2])
      threadsPerThreadgroup:MTLSizeMake(l->block[0], l->block[1], l->block[2])];
  return NULL;
}

static gpurt_error *fault_err(const gp_launch_op *l) {
  return gp_err(GPURT_ERR_LAUNCH_FAILED, "launch \"%s\": the kernel failed to start (injected fault: "
                "fail_launch_nth)", l->name);
}

/* Each launch is checked for what only its pipeline knows; the launches
 * before the first that fails it (or before the one fail_launch_nth
 * refuses) are encoded, in order, into one command buffer by one serial
 * compute encoder (on a recording: one step of the replay), and *enqueued
 * says how many, as the engine's launch_batch reports them ("items 0..I-1
 * before it stay enqueued"). The launch ops are copied: on a recording the
 * block outlives the caller's array. */
gpurt_error *gm_launch_many(void *ctx, gp_queue *q, const gp_launch_op *l, uint64_t n, uint64_t *enqueued) {
  @autoreleasepool {
    GMContext *c = (__bridge GMContext *)ctx;
    *enqueued = 0;
    gpurt_error *bad = NULL;
    uint64_t ok = 0;
    float rate = 0;
    for (; ok < n; ok++) {
      GMKernel *k = (__bridge GMKernel *)l[ok].kernel;
      if ((bad = check(k, &l[ok]))) break;
      if (k->builtin != NULL && k->builtin->op == GP_BK_SLEEP && rate == 0 && (bad = sleep_rate(k->device, &rate)))
        break;
    }
    uint64_t go = gm_launch_faults(c, ok);
    if (go < ok) {
      gp_error_destroy(bad);
      bad = fault_err(&l[go]);
    }
    if (go > 0) {
      NSMutableData *ops = [NSMutableData dataWithBytes:l length:(NSUInteger)(go * sizeof *l)];
      NSMutableArray *keep = [NSMutableArray arrayWithCapacity:(NSUInteger)(go < 64 ? go : 64)];
      for (uint64_t i = 0; i < go; i++) {
        [keep addObject:(__bridge GMKernel *)l[i].kernel]; /* kernels and buffers stay alive */
        for (uint32_t p = 0; p < l[i].num_args; p++)
          if (l[i].kinds[p] == GPURT_ARG_BUFFER && l[i].bufs[p].obj != NULL) [keep addObject:gm_buf(&l[i].bufs[p])];
      }
      NSString *what = go == 1 ? [NSString stringWithFormat:@"kernel %s", l[0].name]
                               : [NSString stringWithFormat:@"launch_batch of %llu kernels, first %s",
                                                            (unsigned long long)go, l[0].name];
      gpurt_error *e = gm_submit(q, what, ^gpurt_error *(GMEnc *x) {
        (void)keep;
        const gp_launch_op *op = ops.bytes;
        for (uint64_t i = 0; i < go; i++) {
          gpurt_error *ee = encode(x, (__bridge GMKernel *)op[i].kernel, &op[i], rate);
          if (ee) return ee;
        }
        return NULL;
      });
      if (e) {
        gp_error_destroy(bad);
        return e; /* nothing was enqueued */
      }
    }
    *enqueued = go;
    return bad;
  }
}

gpurt_error *gm_launch(void *ctx, gp_queue *q, const gp_launch_op *l) {
  uint64_t n = 0;
  return gm_launch_many(ctx, q, l, 1, &n);
}
