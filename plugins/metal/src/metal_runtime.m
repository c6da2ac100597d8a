/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_runtime.m — the Metal plugin's bottom floor: the objects, the
 * clock, NSError messages, the log, the lost state, the fault counters
 * (fail_alloc_nth, fail_launch_nth), the built-in library and its
 * pipelines, and the per-device wrappers of pinned host memory. Every other
 * file may use these; this file uses none of theirs.
 */
#import "metal_internal.h"

#include <mach/mach_time.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>

/* ---- objects --------------------------------------------------------------- */

@implementation GMLocked
- (instancetype)init {
  if ((self = [super init])) pthread_mutex_init(&mu, NULL);
  return self;
}
- (void)dealloc {
  pthread_mutex_destroy(&mu);
}
@end

@implementation GMDevice
- (instancetype)init {
  if ((self = [super init])) psos = [NSMutableDictionary dictionary];
  return self;
}
@end

@implementation GMContext
@end

@implementation GMHostMem
- (void)dealloc {
  if (ptr != NULL) munmap(ptr, mapped);
}
@end

@implementation GMHostBuffer
- (instancetype)init {
  if ((self = [super init])) wrappers = [NSMutableDictionary dictionary];
  return self;
}
@end

@implementation GMEvent
- (instancetype)init {
  if ((self = [super init])) pthread_cond_init(&cv, NULL);
  return self;
}
- (void)dealloc {
  pthread_cond_destroy(&cv);
}
@end

@implementation GMStream
- (instancetype)init {
  if ((self = [super init])) {
    pthread_mutex_init(&enc, NULL);
    pthread_cond_init(&cv, NULL);
  }
  return self;
}
- (void)dealloc {
  gp_error_destroy(pending);
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&enc);
}
@end

@implementation GMEnc
- (instancetype)init {
  if ((self = [super init])) {
    signal_events = [NSMutableArray array];
    signal_values = [NSMutableArray array];
  }
  return self;
}
@end

@implementation GMRecording
- (instancetype)init {
  if ((self = [super init])) {
    steps = [NSMutableArray array];
    names = [NSMutableArray array];
  }
  return self;
}
@end

@implementation GMKernel
@end

@implementation GMModule
- (instancetype)init {
  if ((self = [super init])) kernels = [NSMutableDictionary dictionary];
  return self;
}
@end

/* ---- time, errors, log -------------------------------------------------------- */

uint64_t gm_now_ns(void) {
  static mach_timebase_info_data_t tb;
  if (tb.denom == 0) mach_timebase_info(&tb);
  return mach_absolute_time() * tb.numer / tb.denom;
}

gpurt_error *gm_nserror(int32_t code, NSError *err, const char *fmt, ...) {
  char body[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  const char *desc = err != nil ? err.localizedDescription.UTF8String : NULL;
  return gp_err_vendor(code, err != nil ? (int64_t)err.code : 0, "%s: %s", body,
                       desc != NULL ? desc : "no further detail");
}

void gm_log(GMContext *c, int32_t level, const char *fmt, ...) {
  if (c == nil || c->log == NULL) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
  c->log(c->log_user, level, msg, (uint64_t)len);
}

/* ---- devices and the lost state ---------------------------------------------------- */

GMDevice *gm_dev(void *ctx, uint32_t dev) {
  GMContext *c = (__bridge GMContext *)ctx;
  return c->devices[dev];
}

void gm_mark_lost(GMDevice *d, const char *why) {
  pthread_mutex_lock(&d->mu);
  if (!d->lost) {
    d->lost = 1;
    gp_strlcpy(d->lost_why, sizeof d->lost_why, why);
  }
  pthread_mutex_unlock(&d->mu);
}

gpurt_error *gm_check_lost(GMDevice *d) {
  gpurt_error *e = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->lost) e = gp_err(GPURT_ERR_DEVICE_LOST, "%s", d->lost_why);
  pthread_mutex_unlock(&d->mu);
  return e;
}

/* ---- fault counters ----------------------------------------------------------------- */

int gm_alloc_fault(GMContext *c) { return gp_fault_alloc(&c->mu, &c->fail_alloc_nth); }

uint64_t gm_launch_faults(GMContext *c, uint64_t n) { return gp_fault_launches(&c->mu, &c->fail_launch_nth, n); }

/* ---- the built-in library ------------------------------------------------------------ */

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
MTLCompileOptions *gm_compile_options(void) {
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
      dispatch_data_t data = dispatch_data_create(gm_metallib_data, gm_metallib_len, NULL, ^{
                                                  }); /* static bytes: nothing to free */
      lib = [d->dev newLibraryWithData:data error:&err];
    }
    if (lib == nil) {
      NSString *src = [[NSString alloc] initWithBytes:gm_metal_source
                                               length:gm_metal_source_len
                                             encoding:NSUTF8StringEncoding];
      NSError *serr = nil;
      lib = src == nil ? nil : [d->dev newLibraryWithSource:src options:gm_compile_options() error:&serr];
      if (lib == nil)
        e = gm_nserror(GPURT_ERR_INTERNAL, serr != nil ? serr : err,
                       "device %u: the built-in kernels did not load (metallib %lu bytes, then source)",
                       d->index, gm_metallib_len);
    }
    d->builtin = lib;
  }
  if (e == NULL) *out = d->builtin;
  pthread_mutex_unlock(&d->mu);
  return e;
}

gpurt_error *gm_builtin_pso(GMDevice *d, NSString *name, id<MTLComputePipelineState> __strong *out) {
  id<MTLLibrary> lib;
  gpurt_error *e = gm_builtin_library(d, &lib);
  if (e) return e;
  pthread_mutex_lock(&d->mu);
  id<MTLComputePipelineState> pso = d->psos[name];
  pthread_mutex_unlock(&d->mu);
  if (pso == nil) {
    id<MTLFunction> fn = [lib newFunctionWithName:name];
    if (fn == nil)
      return gp_err(GPURT_ERR_INTERNAL, "device %u: the built-in library has no kernel \"%s\"", d->index,
                    name.UTF8String);
    NSError *err = nil;
    pso = [d->dev newComputePipelineStateWithFunction:fn error:&err];
    if (pso == nil)
      return gm_nserror(GPURT_ERR_INTERNAL, err, "device %u: kernel \"%s\": no pipeline state", d->index,
                        name.UTF8String);
    pthread_mutex_lock(&d->mu);
    if (d->psos[name] == nil) d->psos[name] = pso;
    pso = d->psos[name];
    pthread_mutex_unlock(&d->mu);
  }
  *out = pso;
  return NULL;
}

/* ---- pinned host memory on a device --------------------------------------------------- */

id<MTLBuffer> gm_host_wrapper(GMHostBuffer *h, GMDevice *d) {
  NSNumber *key = @(d->index);
  id<MTLBuffer> b;
  pthread_mutex_lock(&h->mu);
  b = h->wrappers[key];
  if (b == nil) {
    GMHostMem *mem = h->mem; /* the deallocator keeps the memory alive */
    b = [d->dev newBufferWithBytesNoCopy:mem->ptr
                                  length:mem->mapped
                                 options:MTLResourceStorageModeShared
                             deallocator:^(void *p, NSUInteger len) {
                               (void)p;
                               (void)len;
                               (void)mem;
                             }];
    if (b != nil) h->wrappers[key] = b;
  }
  pthread_mutex_unlock(&h->mu);
  return b;
}
