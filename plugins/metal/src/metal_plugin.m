/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metal_plugin.m — libgpurt_metal.dylib's top floor: probe, open (options),
 * close, devices, the loss check, runtime_control's keys, the gp_backend
 * table and the entry (csrc's engine implements gpurt_api over the table).
 * See metal_internal.h for the objects, the files and the locking.
 *
 * Collectives (1.6) are left unset: an Apple GPU is one device per host
 * and has no collective library, so the engine answers every comm_* slot
 * GPURT_ERR_UNSUPPORTED ("the metal backend has no collectives").
 *
 * Every entry runs inside its own @autoreleasepool: the calling thread (a
 * Go-managed OS thread) has no pool of its own.
 */
#import "metal_internal.h"

#include <string.h>

#include "gp_engine.h"

const char gp_plugin_prefix[] = "metal";

/* The default device first, then the others (MTLCopyAllDevices). */
static NSArray<id<MTLDevice>> *all_devices(void) {
  NSMutableArray<id<MTLDevice>> *all = [NSMutableArray array];
  id<MTLDevice> def = MTLCreateSystemDefaultDevice();
  if (def != nil) [all addObject:def];
  NSArray<id<MTLDevice>> *others = MTLCopyAllDevices();
  for (id<MTLDevice> d in others)
    if (def == nil || d.registryID != def.registryID) [all addObject:d];
  return all;
}

/* The highest GPU family the device supports: "apple9" -> 9, "mac2" -> 2. */
static uint32_t family(id<MTLDevice> d, char *arch, size_t cap) {
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

/* Fills the engine's zeroed, full-size info. */
static void fill_device_info(id<MTLDevice> d, gpurt_device_info *i) {
  gp_strlcpy(i->name, sizeof i->name, d.name.UTF8String ? d.name.UTF8String : "metal device");
  gp_strlcpy(i->vendor, sizeof i->vendor, "Apple");
  i->compute_major = family(d, i->arch, sizeof i->arch);
  NSOperatingSystemVersion v = NSProcessInfo.processInfo.operatingSystemVersion;
  snprintf(i->driver_version, sizeof i->driver_version, "macOS %ld.%ld.%ld", (long)v.majorVersion,
           (long)v.minorVersion, (long)v.patchVersion);
  i->driver_version_code = (uint32_t)(v.majorVersion * 10000 + v.minorVersion * 100 + v.patchVersion);
  uint64_t total = d.recommendedMaxWorkingSetSize;
  uint64_t used = d.currentAllocatedSize;
  i->memory_total = total;
  i->memory_free = used < total ? total - used : 0;
  i->max_threads_per_block = (uint32_t)d.maxThreadsPerThreadgroup.width;
  i->warp_size = 32; /* the SIMD-group width of Apple and current Mac GPUs */
  if (d.hasUnifiedMemory) i->flags |= GPURT_DEVICE_UNIFIED_MEMORY;
  if (@available(macOS 14.0, *)) {
    if ([d supportsFamily:MTLGPUFamilyApple7]) i->flags |= GPURT_DEVICE_BF16;
  }
  /* Never GPURT_DEVICE_FP8: Metal has no fp8 type. */
}

static gpurt_error *m_probe(gpurt_probe_args *a) {
  @autoreleasepool {
    NSArray<id<MTLDevice>> *devs = all_devices();
    a->device_count = (uint32_t)devs.count;
    for (uint32_t i = 0; i < a->device_count && i < a->device_capacity; i++) fill_device_info(devs[i], &a->devices[i]);
    if (devs.count == 0) {
      a->available = 0;
      a->score = 0;
      a->reason_code = GPURT_PROBE_NO_DEVICE;
      gp_strlcpy(a->reason, sizeof a->reason, "no Metal device (MTLCopyAllDevices is empty)");
      return NULL;
    }
    a->available = 1;
    a->reason_code = GPURT_PROBE_OK;
    char arch[64];
    uint32_t fam = family(devs[0], arch, sizeof arch);
    a->score = (int32_t)(devs[0].hasUnifiedMemory ? 100 + fam : fam);
    snprintf(a->reason, sizeof a->reason, "%lu Metal device(s): %s (%s)", (unsigned long)devs.count,
             devs[0].name.UTF8String, arch);
    return NULL;
  }
}

/* No runtime options yet; unknown keys are logged and ignored so that one
 * option string can serve every backend. */
static gpurt_error *option(void *user, const char *key, size_t key_len, const char *val, size_t val_len) {
  GMContext *c = (__bridge GMContext *)user;
  gm_log(c, 1, "metal: ignoring runtime option %.*s=%.*s", (int)key_len, key, (int)val_len, val);
  return NULL;
}

static gpurt_error *m_open(const gpurt_runtime_create_args *a, void **ctx, uint32_t *ndev, gp_limits *lim) {
  @autoreleasepool {
    GMContext *c = [[GMContext alloc] init];
    c->log = a->log;
    c->log_user = a->log_user;
    gpurt_error *e;
    if (a->options == NULL && a->options_len > 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_create: options is NULL with options_len %llu",
                    (unsigned long long)a->options_len);
    if (a->options != NULL &&
        (e = gp_parse_options(a->options, a->options_len, ";,", "runtime options", option, (__bridge void *)c)))
      return e;
    NSArray<id<MTLDevice>> *devs = all_devices();
    if (devs.count == 0) return gp_err(GPURT_ERR_UNAVAILABLE, "runtime_create: no Metal device");
    NSMutableArray<GMDevice *> *gd = [NSMutableArray array];
    /* The launch limits are the strictest device's. */
    lim->max_threads = UINT32_MAX;
    lim->max_block_z = UINT32_MAX;
    lim->max_shared = UINT32_MAX;
    lim->max_grid[0] = 0x7fffffffu; /* Metal has no smaller grid limit; the contract's */
    lim->max_grid[1] = lim->max_grid[2] = 65535;
    for (NSUInteger i = 0; i < devs.count; i++) {
      GMDevice *d = [[GMDevice alloc] init];
      d->dev = devs[i];
      d->index = (uint32_t)i;
      [gd addObject:d];
      MTLSize t = devs[i].maxThreadsPerThreadgroup;
      uint32_t shared = (uint32_t)devs[i].maxThreadgroupMemoryLength;
      if ((uint32_t)t.width < lim->max_threads) lim->max_threads = (uint32_t)t.width;
      if ((uint32_t)t.depth < lim->max_block_z) lim->max_block_z = (uint32_t)t.depth;
      if (shared < lim->max_shared) lim->max_shared = shared;
    }
    c->devices = gd;
    gm_log(c, 1, "metal: runtime with %lu device(s), first %s", (unsigned long)devs.count, devs[0].name.UTF8String);
    *ndev = (uint32_t)devs.count;
    *ctx = (void *)CFBridgingRetain(c);
    return NULL;
  }
}

static void m_close(void *ctx) {
  @autoreleasepool {
    (void)CFBridgingRelease(ctx);
  }
}

static gpurt_error *m_device_info(void *ctx, uint32_t dev, gpurt_device_info *out) {
  @autoreleasepool {
    fill_device_info(gm_dev(ctx, dev)->dev, out);
    return NULL;
  }
}

static gpurt_error *m_device_check(void *ctx, uint32_t dev) { return gm_check_lost(gm_dev(ctx, dev)); }

static int key_is(const char *k, size_t n, const char *name) { return strlen(name) == n && memcmp(k, name, n) == 0; }

static gpurt_error *m_control(void *ctx, const char *k, uint64_t key_len, int64_t value, const gp_mem *buf) {
  (void)buf;
  GMContext *c = (__bridge GMContext *)ctx;
  size_t kl = (size_t)key_len;
  int fa = key_is(k, kl, "fail_alloc_nth"), fl = key_is(k, kl, "fail_launch_nth");
  if (fa || fl) {
    if (value < 0)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: %.*s=%lld is negative (0 turns it off)", (int)kl, k,
                    (long long)value);
    pthread_mutex_lock(&c->mu);
    if (fa) c->fail_alloc_nth = value;
    else c->fail_launch_nth = value;
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  if (key_is(k, kl, "lose_device")) {
    if (value < 0 || (uint64_t)value >= c->devices.count)
      return gp_err(GPURT_ERR_INVALID_ARGUMENT, "runtime_control: lose_device=%lld but the runtime has %lu devices",
                    (long long)value, (unsigned long)c->devices.count);
    gm_mark_lost(c->devices[(NSUInteger)value], "lost on request (runtime_control lose_device)");
    return NULL;
  }
  return gp_err(GPURT_ERR_UNSUPPORTED, "runtime_control: unknown key \"%.*s\" (the metal plugin knows "
                "fail_alloc_nth, fail_launch_nth, lose_device)", (int)(kl > 200 ? 200 : kl), k);
}

/* ---- the backend table and the entry -------------------------------------------------------- */

static const gp_backend metal_backend = {
    .name = "metal",
    .version = GM_VERSION,
    .abi_minor = GPURT_ABI_MINOR,
    .priority = GM_PRIORITY,
    .buffer_keys = NULL,
    .unrecordable = 0, /* every recordable op is recorded (gm_submit) */
    .probe = m_probe,
    .open = m_open,
    .close = m_close,
    .device_info = m_device_info,
    .device_check = m_device_check,
    .control = m_control,
    .mem_alloc = gm_mem_alloc,
    .mem_free = gm_mem_free,
    .host_alloc = gm_host_alloc,
    .host_free = gm_host_free,
    .copy = gm_copy,
    .memset = gm_memset,
    .queue_create = gm_queue_create,
    .queue_destroy = gm_queue_destroy,
    .queue_sync = gm_queue_sync,
    .queue_query = gm_queue_query,
    .event_create = gm_event_create,
    .event_destroy = gm_event_destroy,
    .event_record = gm_event_record,
    .event_wait = gm_event_wait,
    .event_query = gm_event_query,
    .event_sync = gm_event_sync,
    .event_elapsed = gm_event_elapsed,
    .module_load = gm_module_load,
    .module_unload = gm_module_unload,
    .kernel_get = gm_kernel_get,
    .launch = gm_launch,
    .launch_many = gm_launch_many,
    .graph_begin = gm_graph_begin,
    .graph_end = gm_graph_end,
    .graph_launch = gm_graph_launch,
    .graph_destroy = gm_graph_destroy,
    .gemm_plan = gm_gemm_plan,
    .gemm_plan_free = gm_gemm_plan_free,
    .gemm_run = gm_gemm_run,
    .quant_matmul = gm_quant_matmul,
    .grouped_gemm = gm_grouped_gemm,
    .kv_append = gm_kv_append,
    .attention_create = gm_attention_create,
    .attention_destroy = gm_attention_destroy,
    .attention_plan = gm_attention_plan,
    .attention_run = gm_attention_run,
    /* comm_*: unset (collectives are UNSUPPORTED on Metal) */
};

/* The entry: the engine's negotiation over Metal's table. No side effects:
 * no Metal call, no allocation, no output. */
GP_ENGINE_ENTRY(metal_backend)
