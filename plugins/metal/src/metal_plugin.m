/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_plugin.m — libgpurt_metal.dylib: negotiation, the function table,
 * the objects, probe, runtimes and devices. Memory, copies and memsets are in
 * metal_memory.m, streams and events in metal_stream.m, modules, kernels and
 * launches in metal_module.m, GEMM in metal_gemm.m.
 *
 * Every entry point runs inside its own @autoreleasepool, because the
 * calling thread (a Go-managed OS thread) has no pool of its own.
 */
#import "metal_internal.h"

#include <errno.h>
#include <mach/mach_time.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const char gp_plugin_prefix[] = "metal";

/* ---- objects --------------------------------------------------------------- */

@implementation GMDevice
- (instancetype)init {
  if ((self = [super init])) {
    pthread_mutex_init(&mu, NULL);
    psos = [NSMutableDictionary dictionary];
  }
  return self;
}
- (void)dealloc { pthread_mutex_destroy(&mu); }
@end

@implementation GMBuffer
@end

@implementation GMHostMem
- (void)dealloc {
  if (ptr != NULL) munmap(ptr, mapped);
}
@end

@implementation GMHostBuffer
- (instancetype)init {
  if ((self = [super init])) {
    pthread_mutex_init(&mu, NULL);
    wrappers = [NSMutableDictionary dictionary];
  }
  return self;
}
- (void)dealloc { pthread_mutex_destroy(&mu); }
@end

@implementation GMStream
- (instancetype)init {
  if ((self = [super init])) {
    pthread_mutex_init(&enc, NULL);
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
  }
  return self;
}
- (void)dealloc {
  gp_error_destroy(pending);
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&mu);
  pthread_mutex_destroy(&enc);
}
@end

@implementation GMEvent
- (instancetype)init {
  if ((self = [super init])) {
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&cv, NULL);
  }
  return self;
}
- (void)dealloc {
  pthread_cond_destroy(&cv);
  pthread_mutex_destroy(&mu);
}
@end

@implementation GMRuntime
- (instancetype)init {
  if ((self = [super init])) pthread_mutex_init(&mu, NULL);
  return self;
}
- (void)dealloc {
  gp_table_free(&buffers);
  gp_table_free(&hosts);
  gp_table_free(&streams);
  gp_table_free(&events);
  gp_table_free(&modules);
  gp_table_free(&kernels);
  gp_table_free(&plans);
  gp_table_free(&graphs);
  gp_table_free(&attns);
  pthread_mutex_destroy(&mu);
}
@end

/* ---- helpers ----------------------------------------------------------------- */

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

void gm_log(GMRuntime *rt, int32_t level, const char *fmt, ...) {
  if (rt == nil || rt->log == NULL) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
  rt->log(rt->log_user, level, msg, (uint64_t)len);
}

uint64_t gm_now_ns(void) {
  static mach_timebase_info_data_t tb;
  if (tb.denom == 0) mach_timebase_info(&tb);
  return mach_absolute_time() * tb.numer / tb.denom;
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gp_handle_table g_rts; /* slot objects: CFBridgingRetain'd GMRuntime */
static int g_rts_init;
static uint32_t g_serial;

gpurt_error *gm_get_rt(gpurt_runtime *h, GMRuntime *__strong *out) {
  GMRuntime *rt = nil;
  void *o = NULL;
  int st;
  pthread_mutex_lock(&g_mu);
  st = h == NULL ? GP_HANDLE_NULL
       : g_rts_init ? gp_table_lookup(&g_rts, (uintptr_t)h, &o)
                    : GP_HANDLE_STALE;
  if (st == GP_HANDLE_OK) rt = (__bridge GMRuntime *)o; /* retained here */
  pthread_mutex_unlock(&g_mu);
  if (st != GP_HANDLE_OK) return gp_handle_error(st, GP_KIND_RUNTIME, (uintptr_t)h);
  *out = rt;
  return NULL;
}

gpurt_error *gm_lookup(GMRuntime *rt, gp_handle_table *t, uintptr_t h,
                       uint32_t kind, id __strong *out) {
  id obj = nil;
  void *o = NULL;
  int closed, st;
  pthread_mutex_lock(&rt->mu);
  closed = rt->closed;
  st = h == 0 ? GP_HANDLE_NULL : gp_table_lookup(t, h, &o);
  if (!closed && st == GP_HANDLE_OK) obj = (__bridge id)o; /* retained here */
  pthread_mutex_unlock(&rt->mu);
  if (closed)
    return gp_err(GPURT_ERR_FAILED_PRECONDITION, "runtime is being destroyed");
  if (st != GP_HANDLE_OK) return gp_handle_error(st, kind, h);
  *out = obj;
  return NULL;
}

gpurt_error *gm_insert(GMRuntime *rt, gp_handle_table *t, id obj,
                       uintptr_t *out, const char *what) {
  void *o = (void *)CFBridgingRetain(obj);
  int r, closed;
  pthread_mutex_lock(&rt->mu);
  closed = rt->closed;
  r = closed ? -1 : gp_table_insert(t, o, out);
  pthread_mutex_unlock(&rt->mu);
  if (r != 0) {
    CFBridgingRelease(o);
    if (closed)
      return gp_err(GPURT_ERR_FAILED_PRECONDITION, "%s: runtime is being destroyed", what);
    return gp_table_full_error(what, t->kind);
  }
  return NULL;
}

/* Removes h and returns the object (the table's reference moves to ARC). */
id gm_remove_locked(gp_handle_table *t, uintptr_t h) {
  void *o = gp_table_remove(t, h);
  return o != NULL ? CFBridgingRelease(o) : nil;
}

gpurt_error *gm_device(GMRuntime *rt, uint32_t device, GMDevice *__strong *out) {
  if (device >= rt->devices.count)
    return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device %u does not exist (%lu devices)",
                  device, (unsigned long)rt->devices.count);
  *out = rt->devices[device];
  return gm_check_lost(*out);
}

gpurt_error *gm_check_lost(GMDevice *d) {
  gpurt_error *e = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->lost)
    e = gp_err(GPURT_ERR_DEVICE_LOST, "device %u (%s) is lost: %s", d->index,
               d->dev.name.UTF8String, d->lost_why);
  pthread_mutex_unlock(&d->mu);
  return e;
}

void gm_mark_lost(GMDevice *d, const char *why) {
  pthread_mutex_lock(&d->mu);
  if (!d->lost) {
    d->lost = 1;
    gp_strlcpy(d->lost_why, sizeof d->lost_why, why);
  }
  pthread_mutex_unlock(&d->mu);
}

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

/* ---- entry: negotiation, info, probe ---------------------------------------------- */

static gpurt_error *gm_plugin_info(gpurt_plugin_info *out) {
  gpurt_error *e = gp_check_out(out, "plugin info");
  if (e) return e;
  gpurt_plugin_info i;
  memset(&i, 0, sizeof i);
  gp_strlcpy(i.backend, sizeof i.backend, "metal");
  gp_strlcpy(i.version, sizeof i.version, GM_VERSION);
  i.priority = GM_PRIORITY;
  gp_write_struct(out, &i, sizeof i);
  return NULL;
}

/* The default device first, then the others (MTLCopyAllDevices). */
static NSArray<id<MTLDevice>> *gm_all_devices(void) {
  NSMutableArray<id<MTLDevice>> *all = [NSMutableArray array];
  id<MTLDevice> def = MTLCreateSystemDefaultDevice();
  if (def != nil) [all addObject:def];
  NSArray<id<MTLDevice>> *others = MTLCopyAllDevices();
  for (id<MTLDevice> d in others)
    if (def == nil || d.registryID != def.registryID) [all addObject:d];
  return all;
}

/* The highest GPU family the device supports: "apple9" -> 9, "mac2" -> 2. */
static uint32_t gm_family(id<MTLDevice> d, char *arch, size_t cap) {
  for (int f = 1009; f >= 1001; f--) { /* MTLGPUFamilyApple9 .. Apple1 */
    if ([d supportsFamily:(MTLGPUFamily)f]) {
      snprintf(arch, cap, "apple%d", f - 1000);
      return (uint32_t)(f - 1000);
    }
  }
  if ([d supportsFamily:MTLGPUFamilyMac2]) {
    snprintf(arch, cap, "mac2");
    return 2;
  }
  snprintf(arch, cap, "metal");
  return 0;
}

static void gm_fill_device_info(id<MTLDevice> d, gpurt_device_info *out) {
  gpurt_device_info i;
  memset(&i, 0, sizeof i);
  gp_strlcpy(i.name, sizeof i.name, d.name.UTF8String ? d.name.UTF8String : "metal device");
  gp_strlcpy(i.vendor, sizeof i.vendor, "Apple");
  i.compute_major = gm_family(d, i.arch, sizeof i.arch);
  NSOperatingSystemVersion v = NSProcessInfo.processInfo.operatingSystemVersion;
  snprintf(i.driver_version, sizeof i.driver_version, "macOS %ld.%ld.%ld",
           (long)v.majorVersion, (long)v.minorVersion, (long)v.patchVersion);
  i.driver_version_code =
      (uint32_t)(v.majorVersion * 10000 + v.minorVersion * 100 + v.patchVersion);
  uint64_t total = d.recommendedMaxWorkingSetSize;
  uint64_t used = d.currentAllocatedSize;
  i.memory_total = total;
  i.memory_free = used < total ? total - used : 0;
  i.max_threads_per_block = (uint32_t)d.maxThreadsPerThreadgroup.width;
  i.warp_size = 32; /* the SIMD-group width of Apple and current Mac GPUs */
  if (d.hasUnifiedMemory) i.flags |= GPURT_DEVICE_UNIFIED_MEMORY;
  if (@available(macOS 14.0, *)) {
    if ([d supportsFamily:MTLGPUFamilyApple7]) i.flags |= GPURT_DEVICE_BF16;
  }
  gp_write_struct(out, &i, sizeof i);
}

static gpurt_error *gm_probe(gpurt_probe_args *args) {
  @autoreleasepool {
    gpurt_error *e = gp_check_out(args, "probe args");
    if (e) return e;
    gpurt_probe_args a;
    if ((e = gp_read_struct(&a, sizeof a, args, "probe args"))) return e;
    if (a.device_capacity > 0 && a.devices == NULL)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                    "probe args: devices is NULL with capacity %u", a.device_capacity);
    NSArray<id<MTLDevice>> *devs = gm_all_devices();
    a.device_count = (uint32_t)devs.count;
    for (uint32_t i = 0; i < a.device_count && i < a.device_capacity; i++) {
      if (a.devices[i].struct_size < 8)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT,
                      "probe args: devices[%u] has struct_size below 8", i);
      gm_fill_device_info(devs[i], &a.devices[i]);
    }
    if (devs.count == 0) {
      a.available = 0;
      a.score = 0;
      a.reason_code = GPURT_PROBE_NO_DEVICE;
      gp_strlcpy(a.reason, sizeof a.reason, "no Metal device (MTLCopyAllDevices is empty)");
    } else {
      a.available = 1;
      a.reason_code = GPURT_PROBE_OK;
      char arch[64];
      uint32_t fam = gm_family(devs[0], arch, sizeof arch);
      a.score = (int32_t)(devs[0].hasUnifiedMemory ? 100 + fam : fam);
      snprintf(a.reason, sizeof a.reason, "%lu Metal device(s): %s (%s)",
               (unsigned long)devs.count, devs[0].name.UTF8String, arch);
    }
    gp_write_struct(args, &a, sizeof a);
    return NULL;
  }
}

static gpurt_error *gm_shutdown(void) { return NULL; }

static void gm_error_get(const gpurt_error *err, gpurt_error_info *out) {
  gp_error_get(err, out);
}
static void gm_error_destroy(gpurt_error *err) { gp_error_destroy(err); }

/* ---- runtimes ---------------------------------------------------------------------- */

typedef struct gm_opts {
  GMRuntime *__unsafe_unretained rt;
} gm_opts;

static gpurt_error *gm_option(void *user, const char *key, size_t key_len,
                              const char *val, size_t val_len) {
  gm_opts *o = user;
  /* No options yet; unknown keys are logged and ignored so that one option
   * string can serve every backend. */
  gm_log(o->rt, 1, "metal: ignoring runtime option %.*s=%.*s", (int)key_len, key,
         (int)val_len, val);
  return NULL;
}

static gpurt_error *gm_runtime_create(const gpurt_runtime_create_args *args,
                                      gpurt_runtime **out) {
  @autoreleasepool {
    if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: out is NULL");
    gpurt_runtime_create_args a;
    memset(&a, 0, sizeof a);
    gpurt_error *e;
    if (args != NULL && (e = gp_read_struct(&a, sizeof a, args, "runtime create args")))
      return e;
    GMRuntime *rt = [[GMRuntime alloc] init];
    rt->log = a.log;
    rt->log_user = a.log_user;
    gm_opts o = {rt};
    if ((e = gp_parse_options(a.options, a.options_len, ";,", "runtime options",
                              gm_option, &o)))
      return e;
    NSArray<id<MTLDevice>> *devs = gm_all_devices();
    if (devs.count == 0)
      return gp_err(GPURT_ERR_UNAVAILABLE, "runtime_create: no Metal device");
    NSMutableArray<GMDevice *> *gd = [NSMutableArray array];
    for (NSUInteger i = 0; i < devs.count; i++) {
      GMDevice *d = [[GMDevice alloc] init];
      d->dev = devs[i];
      d->index = (uint32_t)i;
      [gd addObject:d];
    }
    rt->devices = gd;

    pthread_mutex_lock(&g_mu);
    if (!g_rts_init) {
      gp_table_init(&g_rts, GP_KIND_RUNTIME, 0);
      g_rts_init = 1;
    }
    g_serial = (g_serial + 1) & 0xffff;
    if (g_serial == 0) g_serial = 1;
    rt->serial = g_serial;
    gp_table_init(&rt->buffers, GP_KIND_BUFFER, rt->serial);
    gp_table_init(&rt->hosts, GP_KIND_HOST_BUFFER, rt->serial);
    gp_table_init(&rt->streams, GP_KIND_STREAM, rt->serial);
    gp_table_init(&rt->events, GP_KIND_EVENT, rt->serial);
    gp_table_init(&rt->modules, GP_KIND_MODULE, rt->serial);
    gp_table_init(&rt->kernels, GP_KIND_KERNEL, rt->serial);
    gp_table_init(&rt->plans, GP_KIND_GEMM_PLAN, rt->serial);
    gp_table_init(&rt->graphs, GP_KIND_GRAPH, rt->serial);
    gp_table_init(&rt->attns, GP_KIND_ATTENTION, rt->serial);
    void *o_rt = (void *)CFBridgingRetain(rt);
    uintptr_t h = 0;
    int r = gp_table_insert(&g_rts, o_rt, &h);
    pthread_mutex_unlock(&g_mu);
    if (r != 0) {
      CFBridgingRelease(o_rt);
      return gp_err(GPURT_ERR_OUT_OF_MEMORY, "runtime_create: the runtime table is full");
    }
    rt->handle = h;
    gm_log(rt, 1, "metal: runtime with %lu device(s), first %s", (unsigned long)devs.count,
           devs[0].name.UTF8String);
    *out = (gpurt_runtime *)h;
    return NULL;
  }
}

/* Empties a table, dropping its references. Runtime lock held. */
static void gm_drain_locked(gp_handle_table *t, NSMutableArray *keep) {
  for (uint32_t i = 0; i < gp_table_cap(t); i++) {
    void *o = gp_table_at(t, i);
    if (o != NULL) [keep addObject:CFBridgingRelease(o)];
  }
  gp_table_free(t);
}

static gpurt_error *gm_runtime_destroy(gpurt_runtime *h) {
  if (h == NULL) return NULL;
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    pthread_mutex_lock(&g_mu);
    id self_ref = gm_remove_locked(&g_rts, (uintptr_t)h);
    pthread_mutex_unlock(&g_mu);
    if (self_ref == nil) /* destroyed concurrently */
      return gp_handle_error(GP_HANDLE_STALE, GP_KIND_RUNTIME, (uintptr_t)h);
    for (GMDevice *d in rt->devices) gm_wait_device(rt, d->index);
    NSMutableArray *keep = [NSMutableArray array];
    pthread_mutex_lock(&rt->mu);
    rt->closed = 1;
    gm_drain_locked(&rt->graphs, keep);
    gm_drain_locked(&rt->attns, keep);
    gm_drain_locked(&rt->plans, keep);
    gm_drain_locked(&rt->kernels, keep);
    gm_drain_locked(&rt->modules, keep);
    gm_drain_locked(&rt->events, keep);
    gm_drain_locked(&rt->streams, keep);
    gm_drain_locked(&rt->hosts, keep);
    gm_drain_locked(&rt->buffers, keep);
    rt->device_bytes = rt->host_bytes = 0;
    pthread_mutex_unlock(&rt->mu);
    [keep removeAllObjects]; /* released outside the lock */
    return NULL;
  }
}

static gpurt_error *gm_runtime_stats(gpurt_runtime *h, gpurt_runtime_stats *out) {
  GMRuntime *rt;
  gpurt_error *e = gm_get_rt(h, &rt);
  if (e) return e;
  gpurt_runtime_stats s;
  memset(&s, 0, sizeof s);
  pthread_mutex_lock(&rt->mu);
  s.live_buffers = rt->buffers.live;
  s.live_host_buffers = rt->hosts.live;
  s.live_streams = rt->streams.live;
  s.live_events = rt->events.live;
  s.live_modules = rt->modules.live;
  s.live_plans = rt->plans.live;
  s.device_bytes = rt->device_bytes;
  s.host_bytes = rt->host_bytes;
  pthread_mutex_unlock(&rt->mu);
  return gp_stats_write(out, &s);
}

static gpurt_error *gm_runtime_control(gpurt_runtime *h, const gpurt_control_args *args) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    gpurt_control_args a;
    if ((e = gp_read_struct(&a, sizeof a, args, "control args"))) return e;
    if (a.key == NULL && a.key_len > 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "control: key is NULL");
    size_t kl = (size_t)a.key_len;
#define GM_KEY_IS(s) (kl == sizeof(s) - 1 && memcmp(a.key, s, kl) == 0)
    if (GM_KEY_IS("fail_alloc_nth") || GM_KEY_IS("fail_launch_nth")) {
      if (a.value < 0)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "control %.*s: value %lld is negative",
                      (int)kl, a.key, (long long)a.value);
      pthread_mutex_lock(&rt->mu);
      if (GM_KEY_IS("fail_alloc_nth")) rt->fail_alloc_nth = a.value;
      else rt->fail_launch_nth = a.value;
      pthread_mutex_unlock(&rt->mu);
      return NULL;
    }
    if (GM_KEY_IS("lose_device")) {
      GMDevice *d;
      if (a.value < 0 || (uint64_t)a.value >= rt->devices.count)
        return gp_err(GPURT_ERR_INVALID_ARGUMENT, "control lose_device: device %lld does not exist",
                      (long long)a.value);
      d = rt->devices[(NSUInteger)a.value];
      gm_mark_lost(d, "lost on request (runtime_control lose_device)");
      return NULL;
    }
#undef GM_KEY_IS
    return gp_err(GPURT_ERR_UNSUPPORTED, "control: unknown key \"%.*s\"",
                  (int)(kl > 200 ? 200 : kl), a.key != NULL ? a.key : "");
  }
}

/* 1 when the injected allocation failure fires now. */
int gm_alloc_fault(GMRuntime *rt) {
  int fire = 0;
  pthread_mutex_lock(&rt->mu);
  if (rt->fail_alloc_nth > 0 && --rt->fail_alloc_nth == 0) fire = 1;
  pthread_mutex_unlock(&rt->mu);
  return fire;
}

/* ---- devices ------------------------------------------------------------------------- */

static gpurt_error *gm_device_count(gpurt_runtime *h, uint32_t *out) {
  GMRuntime *rt;
  gpurt_error *e = gm_get_rt(h, &rt);
  if (e) return e;
  if (out == NULL) return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device_count: out is NULL");
  *out = (uint32_t)rt->devices.count;
  return NULL;
}

static gpurt_error *gm_device_info(gpurt_runtime *h, uint32_t device, gpurt_device_info *out) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if ((e = gp_check_out(out, "device info"))) return e;
    if (device >= rt->devices.count)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device %u does not exist (%lu devices)",
                    device, (unsigned long)rt->devices.count);
    gm_fill_device_info(rt->devices[device]->dev, out);
    return NULL;
  }
}

/* Strong references to rt's streams on a device (all when device is -1). */
static NSArray<GMStream *> *gm_streams_of(GMRuntime *rt, int64_t device) {
  NSMutableArray<GMStream *> *list = [NSMutableArray array];
  pthread_mutex_lock(&rt->mu);
  for (uint32_t i = 0; i < gp_table_cap(&rt->streams); i++) {
    void *o = gp_table_at(&rt->streams, i);
    if (o == NULL) continue;
    GMStream *s = (__bridge GMStream *)o;
    if (device < 0 || s->device->index == (uint32_t)device) [list addObject:s];
  }
  pthread_mutex_unlock(&rt->mu);
  return list;
}

void gm_wait_device(GMRuntime *rt, uint32_t device) {
  for (GMStream *s in gm_streams_of(rt, device)) gm_stream_wait(s);
}

static gpurt_error *gm_device_synchronize(gpurt_runtime *h, uint32_t device) {
  @autoreleasepool {
    GMRuntime *rt;
    gpurt_error *e = gm_get_rt(h, &rt);
    if (e) return e;
    if (device >= rt->devices.count)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "device %u does not exist (%lu devices)",
                    device, (unsigned long)rt->devices.count);
    gpurt_error *first = NULL;
    for (GMStream *s in gm_streams_of(rt, device)) {
      gm_stream_wait(s);
      gpurt_error *se = gm_stream_take_error(s);
      if (first == NULL) first = se;
      else gp_error_destroy(se);
    }
    gpurt_error *lost = gm_check_lost(rt->devices[device]);
    if (lost != NULL) {
      gp_error_destroy(first);
      return lost;
    }
    return first;
  }
}

/* ---- the table and the entry ----------------------------------------------------------------------------- */

static const gpurt_api gm_api = {
    .struct_size = sizeof(gpurt_api),
    .abi_major = GPURT_ABI_MAJOR,
    .abi_minor = GPURT_ABI_MINOR,
    .error_get = gm_error_get,
    .error_destroy = gm_error_destroy,
    .plugin_info = gm_plugin_info,
    .probe = gm_probe,
    .shutdown = gm_shutdown,
    .runtime_create = gm_runtime_create,
    .runtime_destroy = gm_runtime_destroy,
    .runtime_stats = gm_runtime_stats,
    .runtime_control = gm_runtime_control,
    .device_count = gm_device_count,
    .device_info = gm_device_info,
    .device_synchronize = gm_device_synchronize,
    .buffer_alloc = gm_buffer_alloc,
    .buffer_free = gm_buffer_free,
    .host_alloc = gm_host_alloc,
    .host_free = gm_host_free,
    .copy = gm_copy,
    .memset = gm_memset,
    .stream_create = gm_stream_create,
    .stream_destroy = gm_stream_destroy,
    .stream_synchronize = gm_stream_synchronize,
    .stream_query = gm_stream_query,
    .stream_wait_event = gm_stream_wait_event,
    .event_create = gm_event_create,
    .event_destroy = gm_event_destroy,
    .event_record = gm_event_record,
    .event_query = gm_event_query,
    .event_synchronize = gm_event_synchronize,
    .event_elapsed = gm_event_elapsed,
    .module_load = gm_module_load,
    .module_unload = gm_module_unload,
    .kernel_get = gm_kernel_get,
    .kernel_info = gm_kernel_info,
    .launch = gm_launch,
    .launch_batch = gm_launch_batch,
    .gemm_plan_create = gm_gemm_plan_create,
    .gemm_plan_destroy = gm_gemm_plan_destroy,
    .gemm_run = gm_gemm_run,
    .quant_matmul = gm_quant_matmul,
    .grouped_gemm = gm_grouped_gemm,
    .graph_create = gm_graph_create,
    .graph_launch = gm_graph_launch,
    .graph_update = gm_graph_update,
    .graph_destroy = gm_graph_destroy,
    .kv_append = gm_kv_append,
    .attention_create = gm_attention_create,
    .attention_destroy = gm_attention_destroy,
    .attention_plan = gm_attention_plan,
    .attention_run = gm_attention_run,
    /* 1.6: metal_comm.m (UNSUPPORTED) */
    .comm_unique_id = gm_comm_unique_id,
    .comm_create = gm_comm_create,
    .comm_destroy = gm_comm_destroy,
    .comm_abort = gm_comm_abort,
    .comm_query = gm_comm_query,
    .comm_run = gm_comm_run,
};

/* The entry: csrc's gp_negotiate. No side effects: no Metal call, no
 * allocation, no output. */
GPURT_EXPORT int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args) {
  return gp_negotiate(args, &gm_api);
}
