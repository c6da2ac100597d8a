/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mock_selftest PLUGIN — dlopens the mock plugin, calls every function
 * through its table and checks results and error cases. Prints one line per
 * failure and "N passed, M failed" last; exits 1 on any failure.
 */
#include <math.h>
#include <pthread.h>

#include "../../../csrc/test/testlib.h"

/* ---- independent conversions (exactly representable values only) ---- */

static float f16_f(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (float)(s ? -v : v);
}
/* f16 bits of a value that is exactly representable and normal. */
static uint16_t f_f16_exact(float f) {
  if (f == 0) return 0;
  int s = f < 0, ex;
  double fr = frexp(fabs(f), &ex); /* [0.5,1) */
  int e = ex - 1 + 15;
  int m = (int)(fr * 2048.0) - 1024;
  return (uint16_t)((s << 15) | (e << 10) | m);
}
static double e4m3_d(uint8_t v) {
  int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  double r = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
  return s ? -r : r;
}
static double e5m2_d(uint8_t v) {
  int s = v >> 7, e = (v >> 2) & 31, m = v & 3;
  double r = e == 0 ? ldexp(m, -16) : ldexp(4 + m, e - 17);
  return s ? -r : r;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) { return (uint32_t)(xorshift(&rng) >> 11); }
/* Uniform in [-1,-0.05] U [0.05,1]: never zero. */
static float rndf(void) {
  float v = 0.05f + 0.95f * (float)(rnd() % 100000) / 100000.0f;
  return (rnd() & 1) ? -v : v;
}

/* ---- small helpers over the ABI ---- */

static gpurt_runtime *new_rt(const char *opts) {
  gpurt_runtime_create_args a;
  ARGS_INIT(a);
  a.options = opts;
  a.options_len = opts ? strlen(opts) : 0;
  gpurt_runtime *rt = NULL;
  OK(api->runtime_create(&a, &rt));
  return rt;
}

static gpurt_buffer *alloc(gpurt_runtime *rt, uint32_t dev, uint64_t size) {
  gpurt_buffer *b = NULL;
  OK(api->buffer_alloc(rt, dev, size, &b));
  return b;
}

static void upload(gpurt_runtime *rt, gpurt_buffer *b, const void *p, uint64_t n) { OK(upload_on(rt, NULL, b, p, n)); }
static void download(gpurt_runtime *rt, void *p, gpurt_buffer *b, uint64_t n) { OK(download_on(rt, NULL, p, b, n)); }

static gpurt_error *control(gpurt_runtime *rt, const char *key, int64_t v) {
  gpurt_control_args c = {sizeof c, key, strlen(key), v};
  return api->runtime_control(rt, &c);
}

static gpurt_kernel *kernel(gpurt_runtime *rt, gpurt_module *m, const char *name) {
  gpurt_kernel *k = NULL;
  OK(api->kernel_get(rt, m, name, strlen(name), &k));
  return k;
}

/* ------------------------------------------------------------------ */

static void test_negotiate(gpurt_negotiate_fn neg) {
  gpurt_negotiate_args a;
  ARGS_INIT(a);
  a.host_abi_major = GPURT_ABI_MAJOR + 1;
  a.host_abi_minor = 0;
  CHECK(neg(&a) == GPURT_ERR_ABI_MISMATCH, "negotiate with another major");
  CHECK(a.api == NULL && a.plugin_abi_major == GPURT_ABI_MAJOR && strstr(a.message, "abi") != NULL,
        "mismatch writes versions and a message: %s", a.message);
  ARGS_INIT(a);
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = 0; /* an older core minor loads */
  CHECK(neg(&a) == GPURT_OK && a.api != NULL, "negotiate with an older minor");
  CHECK(a.plugin_abi_minor == GPURT_ABI_MINOR, "plugin minor %u", a.plugin_abi_minor);
  api = a.api;
  CHECK(api->struct_size == sizeof(gpurt_api), "table size %llu", (unsigned long long)api->struct_size);
  CHECK(GPURT_API_HAS(api, gemm_run) && GPURT_API_HAS(api, launch) && GPURT_API_HAS(api, launch_batch),
        "every slot set");
}

static void test_info(void) {
  gpurt_plugin_info pi;
  ARGS_INIT(pi);
  OK(api->plugin_info(&pi));
  CHECK(strcmp(pi.backend, "mock") == 0 && pi.priority == 100, "plugin info %s %d", pi.backend, pi.priority);
  gpurt_device_info devs[2];
  memset(devs, 0, sizeof devs);
  devs[0].struct_size = devs[1].struct_size = sizeof devs[0];
  gpurt_probe_args p;
  ARGS_INIT(p);
  p.devices = devs;
  p.device_capacity = 2;
  OK(api->probe(&p));
  CHECK(p.available == 1 && p.score == 1 && p.device_count == 1 && strcmp(p.reason, "cpu reference backend") == 0,
        "probe: available %u score %d count %u reason %s", p.available, p.score, p.device_count, p.reason);
  CHECK(strcmp(devs[0].name, "gpurt mock CPU device 0") == 0, "probe device name %s", devs[0].name);
  /* A short struct_size: only the fields inside it are written. */
  gpurt_plugin_info small;
  memset(&small, 0x77, sizeof small);
  small.struct_size = 8 + 32;
  OK(api->plugin_info(&small));
  CHECK(small.priority == 0x77777777 && strcmp(small.backend, "mock") == 0, "short struct respected");
}

static void test_devices(void) {
  gpurt_runtime *rt = new_rt("devices=2;memory=1M");
  uint32_t n = 0;
  OK(api->device_count(rt, &n));
  CHECK(n == 2, "device_count %u", n);
  gpurt_device_info di;
  ARGS_INIT(di);
  OK(api->device_info(rt, 1, &di));
  CHECK(strcmp(di.name, "gpurt mock CPU device 1") == 0 && strcmp(di.vendor, "gpurt") == 0 &&
            strcmp(di.arch, "cpu") == 0 && strcmp(di.driver_version, "mock-1") == 0 &&
            di.memory_total == (1u << 20) && di.memory_free == (1u << 20) && di.warp_size == 32 &&
            di.max_threads_per_block == 1024 && di.flags == (GPURT_DEVICE_BF16 | GPURT_DEVICE_FP8),
        "device_info fields: %s %s %s %llu", di.name, di.vendor, di.arch, (unsigned long long)di.memory_total);
  ERR(api->device_info(rt, 2, &di), GPURT_ERR_INVALID_ARGUMENT, "device 2");
  gpurt_buffer *b = alloc(rt, 0, 1000);
  OK(api->device_info(rt, 0, &di));
  CHECK(di.memory_free == (1u << 20) - 1000, "memory_free after alloc %llu", (unsigned long long)di.memory_free);
  gpurt_buffer *big = NULL;
  ERR(api->buffer_alloc(rt, 0, 2u << 20, &big), GPURT_ERR_OUT_OF_MEMORY, "asked for 2097152 bytes");
  ERR(api->buffer_alloc(rt, 0, 2u << 20, &big), GPURT_ERR_OUT_OF_MEMORY, "1047576 bytes free");
  ERR(api->buffer_alloc(rt, 0, 0, &big), GPURT_ERR_INVALID_ARGUMENT, "size");
  ERR(api->buffer_alloc(rt, 5, 10, &big), GPURT_ERR_INVALID_ARGUMENT, "device 5");
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 1 && st.device_bytes == 1000, "stats %llu %llu", (unsigned long long)st.live_buffers,
        (unsigned long long)st.device_bytes);
  OK(api->buffer_free(rt, b));
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 0 && st.device_bytes == 0, "stats after free");
  ERR(api->runtime_create(NULL, NULL), GPURT_ERR_INVALID_ARGUMENT, "out");
  gpurt_runtime_create_args ca = {sizeof ca, NULL, NULL, "colour=blue", 11};
  gpurt_runtime *r2 = NULL;
  ERR(api->runtime_create(&ca, &r2), GPURT_ERR_UNSUPPORTED, "colour");
  /* A repeated key is refused, naming it and both values, whatever its
   * spelling around the separators (the last value must not win
   * silently); distinct keys still parse. */
  static const struct { const char *opts, *sub; } repeats[] = {
      {"devices=2;devices=3", "runtime options: devices=\"3\" repeats the key (devices=\"2\" came first)"},
      {"devices=2, memory=1M; devices=2", "devices=\"2\" repeats the key"},
      {" memory = 1M ;;memory=2M", "memory=\"2M\" repeats the key (memory=\"1M\" came first)"},
      {"lose_device=0;fail_alloc_nth=1;lose_device=1", "lose_device=\"1\" repeats the key"},
  };
  for (size_t i = 0; i < sizeof repeats / sizeof repeats[0]; i++) {
    gpurt_runtime_create_args rc = {sizeof rc, NULL, NULL, repeats[i].opts, strlen(repeats[i].opts)};
    r2 = NULL;
    ERR(api->runtime_create(&rc, &r2), GPURT_ERR_INVALID_ARGUMENT, repeats[i].sub);
    CHECK(r2 == NULL, "runtime made from repeated options \"%s\"", repeats[i].opts);
  }
  setenv("GPURT_MOCK_FAULTS", "fail_alloc_nth=1,fail_alloc_nth=2", 1);
  ca.options = NULL;
  ca.options_len = 0;
  ERR(api->runtime_create(&ca, &r2), GPURT_ERR_INVALID_ARGUMENT,
      "GPURT_MOCK_FAULTS: fail_alloc_nth=\"2\" repeats the key");
  unsetenv("GPURT_MOCK_FAULTS");
  r2 = new_rt("devices=2;memory=1M;delay_us=0");
  OK(api->runtime_destroy(r2));
  OK(api->runtime_destroy(rt));
  ERR(api->device_count(rt, &n), GPURT_ERR_INVALID_HANDLE, "runtime");
}

static void test_copies(void) {
  gpurt_runtime *rt = new_rt("delay_us=30");
  const uint64_t sizes[] = {1, 7, 64, 4099, 1 << 20};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    uint64_t n = sizes[si];
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (uint64_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 31 + si);
    gpurt_buffer *b = alloc(rt, 0, n + 3);
    OK(copy_sync(rt, NULL, b, 3, NULL, NULL, 0, src, n)); /* unaligned offset */
    memset(dst, 0, n);
    OK(copy_sync(rt, NULL, NULL, 0, dst, b, 3, NULL, n));
    CHECK(memcmp(src, dst, n) == 0, "round trip of %llu bytes", (unsigned long long)n);
    /* device to device on a stream, synchronously */
    gpurt_stream *s = NULL;
    OK(api->stream_create(rt, 0, &s));
    gpurt_buffer *b2 = alloc(rt, 0, n);
    OK(copy_sync(rt, s, b2, 0, NULL, b, 3, NULL, n));
    memset(dst, 0, n);
    download(rt, dst, b2, n);
    CHECK(memcmp(src, dst, n) == 0, "d2d of %llu bytes", (unsigned long long)n);
    OK(api->stream_destroy(rt, s));
    OK(api->buffer_free(rt, b));
    OK(api->buffer_free(rt, b2));
    free(src);
    free(dst);
  }
  gpurt_buffer *b = alloc(rt, 0, 100);
  char tmp[200];
  ERR(copy_sync(rt, NULL, b, 50, NULL, NULL, 0, tmp, 51), GPURT_ERR_OUT_OF_RANGE, "dst range (offset 50, size 51) is outside the buffer of 100 bytes");
  ERR(copy_sync(rt, NULL, NULL, 0, tmp, b, 101, NULL, 1), GPURT_ERR_OUT_OF_RANGE, "offset 101");
  ERR(copy_sync(rt, NULL, NULL, 0, tmp, b, UINT64_MAX, NULL, 2), GPURT_ERR_OUT_OF_RANGE, "size 2");
  OK(copy_sync(rt, NULL, b, 0, NULL, NULL, 0, tmp, 0)); /* size 0: no-op */
  ERR(copy_sync(rt, NULL, b, 0, tmp, NULL, 0, tmp, 4), GPURT_ERR_INVALID_ARGUMENT, "exactly one of dst");
  /* async needs a stream and pinned memory */
  gpurt_copy_args c;
  ARGS_INIT(c);
  c.size = 4;
  c.dst_buffer = b;
  c.src_ptr = tmp;
  ERR(api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT, "stream");
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  c.stream = s;
  ERR(api->copy(rt, &c), GPURT_ERR_INVALID_ARGUMENT, "pageable");

  /* pinned: async up and down, ordered on the stream */
  gpurt_host_buffer *h1 = NULL, *h2 = NULL;
  void *p1 = NULL, *p2 = NULL;
  OK(api->host_alloc(rt, 100, &h1, &p1));
  OK(api->host_alloc(rt, 100, &h2, &p2));
  CHECK(p1 && ((uintptr_t)p1 % 4096) == 0, "pinned memory is page aligned");
  for (int i = 0; i < 100; i++) ((unsigned char *)p1)[i] = (unsigned char)(200 - i);
  memset(p2, 0, 100);
  c = async_copy_args(s, b, NULL, NULL, h1, 100);
  OK(api->copy(rt, &c));
  c = async_copy_args(s, NULL, h2, b, NULL, 100);
  OK(api->copy(rt, &c));
  OK(api->stream_synchronize(rt, s));
  OK(api->stream_query(rt, s));
  CHECK(memcmp(p1, p2, 100) == 0, "pinned async round trip");
  c.dst_offset = 1;
  ERR(api->copy(rt, &c), GPURT_ERR_OUT_OF_RANGE, "host buffer");

  /* memset */
  gpurt_memset_args ms = {sizeof ms, NULL, b, 4, 8, 0xBEEF, 2};
  OK(api->memset(rt, &ms));
  unsigned char out[100];
  download(rt, out, b, 100);
  CHECK(out[4] == 0xEF && out[5] == 0xBE && out[10] == 0xEF && out[11] == 0xBE && out[12] == 200 - 12,
        "memset 2-byte pattern");
  ms.stream = s;
  ms.value = 0x11223344;
  ms.element_size = 4;
  ms.offset = 96;
  ms.size = 4;
  OK(api->memset(rt, &ms));
  OK(api->stream_synchronize(rt, s));
  download(rt, out, b, 100);
  CHECK(out[96] == 0x44 && out[99] == 0x11, "memset on a stream");
  ms.offset = 100;
  ERR(api->memset(rt, &ms), GPURT_ERR_OUT_OF_RANGE, "offset 100");
  ms.offset = 2;
  ERR(api->memset(rt, &ms), GPURT_ERR_INVALID_ARGUMENT, "multiples");
  ms.element_size = 3;
  ERR(api->memset(rt, &ms), GPURT_ERR_INVALID_ARGUMENT, "element_size");

  OK(api->host_free(rt, h1));
  OK(api->host_free(rt, h2));
  ERR(api->host_free(rt, h2), GPURT_ERR_INVALID_HANDLE, "host buffer");
  OK(api->stream_destroy(rt, s));
  OK(api->buffer_free(rt, b));
  OK(api->runtime_destroy(rt));
}

static void test_handles(void) {
  gpurt_runtime *rt = new_rt("devices=2");
  gpurt_runtime *rt2 = new_rt(NULL);
  gpurt_buffer *b = alloc(rt, 0, 64);
  gpurt_buffer *other = alloc(rt2, 0, 64);
  gpurt_buffer *dev1 = alloc(rt, 1, 64);
  char tmp[64] = {0};
  OK(api->buffer_free(rt, b));
  ERR(api->buffer_free(rt, b), GPURT_ERR_INVALID_HANDLE, "buffer");
  ERR(copy_sync(rt, NULL, b, 0, NULL, NULL, 0, tmp, 4), GPURT_ERR_INVALID_HANDLE, "freed");
  ERR(api->buffer_free(rt, (gpurt_buffer *)(uintptr_t)0x1234), GPURT_ERR_INVALID_HANDLE, "buffer");
  ERR(api->buffer_free(rt, other), GPURT_ERR_INVALID_HANDLE, "belongs to another runtime");
  OK(api->buffer_free(rt, NULL));
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  ERR(api->buffer_free(rt, (gpurt_buffer *)s), GPURT_ERR_INVALID_HANDLE, "stream");
  ERR(api->stream_synchronize(rt, (gpurt_stream *)dev1), GPURT_ERR_INVALID_HANDLE, "stream");
  /* a buffer of device 1 on a stream of device 0 */
  ERR(copy_sync(rt, s, dev1, 0, NULL, NULL, 0, tmp, 4), GPURT_ERR_INVALID_ARGUMENT, "device 1");
  ERR(copy_sync(rt, s, dev1, 0, NULL, NULL, 0, tmp, 4), GPURT_ERR_INVALID_ARGUMENT, "device 0");
  gpurt_module *m = NULL;
  gpurt_module_load_args ml = {sizeof ml, 0, GPURT_MODULE_BUILTIN, NULL, 0, "builtin", 7};
  OK(api->module_load(rt, &ml, &m));
  gpurt_kernel *k = kernel(rt, m, "fill_f32");
  gpurt_kernel_arg args[3] = {arg_buf(dev1, 0, 0), arg_f32(1.0f), arg_u64(4)};
  ERR(launch1d(rt, s, k, 1, 4, args, 3), GPURT_ERR_INVALID_ARGUMENT, "device 1");
  args[0] = arg_buf(other, 0, 0);
  ERR(launch1d(rt, s, k, 1, 4, args, 3), GPURT_ERR_INVALID_HANDLE, "argument 0");
  OK(api->module_unload(rt, m));
  args[0] = arg_buf(dev1, 0, 0);
  ERR(launch1d(rt, s, k, 1, 4, args, 3), GPURT_ERR_INVALID_HANDLE, "kernel");
  ERR(api->module_unload(rt, m), GPURT_ERR_INVALID_HANDLE, "module");
  OK(api->stream_destroy(rt, s));
  ERR(api->stream_destroy(rt, s), GPURT_ERR_INVALID_HANDLE, "stream");
  OK(api->stream_destroy(rt, NULL));
  OK(api->event_destroy(rt, NULL));
  OK(api->module_unload(rt, NULL));
  OK(api->gemm_plan_destroy(rt, NULL));
  OK(api->host_free(rt, NULL));
  OK(api->runtime_destroy(NULL));
  /* guard corruption is reported on free and names the buffer */
  gpurt_buffer *g = alloc(rt, 0, 32);
  OK(control(rt, "debug_corrupt_guard", (int64_t)(uintptr_t)g));
  char want[64];
  snprintf(want, sizeof want, "buffer %#llx", (unsigned long long)(uintptr_t)g);
  ERR(api->buffer_free(rt, g), GPURT_ERR_OUT_OF_RANGE, want);
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 1, "the corrupted buffer was freed anyway (live %llu)", (unsigned long long)st.live_buffers);
  OK(api->runtime_destroy(rt)); /* frees dev1 */
  OK(api->runtime_destroy(rt2)); /* frees other */
}

typedef struct kcase {
  const char *sfx;
  int32_t vkind;
  uint32_t es;
} kcase;

static float load_t(const kcase *c, const void *p, int i) {
  if (c->es == 4) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return c->vkind == GPURT_ARG_F16 ? f16_f(h) : bf16_to_f32(h);
}
static void store_t(const kcase *c, void *p, int i, float v) {
  if (c->es == 4) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = c->vkind == GPURT_ARG_F16 ? f_f16_exact(v) : f32_to_bf16(v);
}

static void test_kernels(void) {
  gpurt_runtime *rt = new_rt(NULL);
  gpurt_module *m = NULL;
  gpurt_module_load_args ml = {sizeof ml, 0, GPURT_MODULE_BUILTIN, NULL, 0, "builtin", 7};
  OK(api->module_load(rt, &ml, &m));
  gpurt_module_load_args ptx = {sizeof ptx, 0, GPURT_MODULE_PTX, "x", 1, "user", 4};
  gpurt_module *m2 = NULL;
  ERR(api->module_load(rt, &ptx, &m2), GPURT_ERR_UNSUPPORTED, "ptx");
  gpurt_kernel *k = NULL;
  ERR(api->kernel_get(rt, m, "nope_f32", 8, &k), GPURT_ERR_NOT_FOUND, "nope_f32");
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  const kcase cases[] = {{"f32", GPURT_ARG_F32, 4}, {"f16", GPURT_ARG_F16, 2}, {"bf16", GPURT_ARG_BF16, 2}};
  enum { N = 1000 };
  static unsigned char hx[N * 4], hy[N * 4], out[N * 4];
  for (size_t ci = 0; ci < 3; ci++) {
    const kcase *c = &cases[ci];
    char name[32];
    gpurt_buffer *x = alloc(rt, 0, N * c->es), *y = alloc(rt, 0, N * c->es), *z = alloc(rt, 0, N * c->es);
    for (int i = 0; i < N; i++) {
      store_t(c, hx, i, (float)(i % 17 - 8) * 0.25f);
      store_t(c, hy, i, (float)(i % 13 - 6) * 0.5f + (i % 13 == 6 ? 0.125f : 0));
    }
    upload(rt, x, hx, N * c->es);
    upload(rt, y, hy, N * c->es);
    /* kernel_info */
    snprintf(name, sizeof name, "fill_%s", c->sfx);
    k = kernel(rt, m, name);
    gpurt_kernel_info ki;
    ARGS_INIT(ki);
    OK(api->kernel_info(rt, k, &ki));
    CHECK(ki.num_params == 3 && ki.param_kind[0] == GPURT_ARG_BUFFER && ki.param_kind[1] == c->vkind &&
              ki.param_size[1] == c->es && ki.param_kind[2] == GPURT_ARG_U64 && ki.param_size[2] == 8,
          "kernel_info %s", name);
    /* fill with a grid too small: elements beyond are untouched */
    gpurt_memset_args ms = {sizeof ms, s, z, 0, N * c->es, 0, 1};
    OK(api->memset(rt, &ms));
    gpurt_kernel_arg fa[3] = {arg_buf(z, 0, 0), {c->vkind, c->es, 0, NULL, 0, 0}, arg_u64(N)};
    uint16_t hv = c->vkind == GPURT_ARG_F16 ? f_f16_exact(2.5f) : f32_to_bf16(2.5f);
    float fv = 2.5f;
    uint32_t fu;
    memcpy(&fu, &fv, 4);
    fa[1].value = c->es == 4 ? fu : hv;
    OK(launch1d(rt, s, k, 3, 256, fa, 3)); /* 768 < 1000 threads */
    OK(api->stream_synchronize(rt, s));
    download(rt, out, z, N * c->es);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= load_t(c, out, i) == (i < 768 ? 2.5f : 0.0f);
    CHECK(ok, "%s: fill with a small grid", name);
    /* argument errors */
    ERR(launch1d(rt, s, k, 1, 1, fa, 2), GPURT_ERR_INVALID_ARGUMENT, "the kernel takes 3 arguments, got 2");
    gpurt_kernel_arg bad[3] = {fa[0], arg_u64(1), fa[2]};
    ERR(launch1d(rt, s, k, 1, 1, bad, 3), GPURT_ERR_INVALID_ARGUMENT, "argument 1");
    bad[1] = fa[1];
    bad[1].size = 8;
    ERR(launch1d(rt, s, k, 1, 1, bad, 3), GPURT_ERR_INVALID_ARGUMENT, "argument 1");
    ERR(launch1d(rt, s, k, 1, 2048, fa, 3), GPURT_ERR_INVALID_ARGUMENT, "block");
    ERR(launch1d(rt, s, k, 0, 1, fa, 3), GPURT_ERR_INVALID_ARGUMENT, "grid");
    bad[1] = fa[1];
    bad[0] = arg_buf(z, 0, 10 * c->es);
    ERR(launch1d(rt, s, k, 4, 256, bad, 3), GPURT_ERR_OUT_OF_RANGE, "argument 0");
    bad[0] = arg_buf(z, N * c->es + 1, 0);
    ERR(launch1d(rt, s, k, 4, 256, bad, 3), GPURT_ERR_OUT_OF_RANGE, "argument 0");
    bad[0] = arg_buf(z, 0, 0);
    bad[2] = arg_u64(N + 1);
    ERR(launch1d(rt, s, k, 4, 256, bad, 3), GPURT_ERR_OUT_OF_RANGE, "argument 0");
    bad[2] = arg_u64(N + 1);
    OK(launch1d(rt, s, k, 1, 10, bad, 3)); /* touches 10 only */

    /* scale, axpy, add, mul */
    const char *ops[] = {"scale", "axpy", "add", "mul"};
    for (int oi = 0; oi < 4; oi++) {
      snprintf(name, sizeof name, "%s_%s", ops[oi], c->sfx);
      k = kernel(rt, m, name);
      upload(rt, z, hy, N * c->es); /* z starts as y */
      gpurt_kernel_arg a[4];
      if (oi < 2) {
        a[0] = arg_buf(z, 0, 0);
        a[1] = arg_buf(x, 0, 0);
        a[2] = arg_f32(1.5f);
        a[3] = arg_u64(N);
      } else {
        a[0] = arg_buf(z, 0, 0);
        a[1] = arg_buf(x, 0, 0);
        a[2] = arg_buf(y, 0, 0);
        a[3] = arg_u64(N);
      }
      OK(launch1d(rt, s, k, (N + 127) / 128, 128, a, 4));
      OK(api->stream_synchronize(rt, s));
      download(rt, out, z, N * c->es);
      ok = 1;
      int bad_i = -1;
      for (int i = 0; i < N; i++) {
        float xv = load_t(c, hx, i), yv = load_t(c, hy, i), want;
        if (oi == 0) want = 1.5f * xv;
        else if (oi == 1) want = 1.5f * xv + yv;
        else if (oi == 2) want = xv + yv;
        else want = xv * yv;
        if (load_t(c, out, i) != want) { ok = 0; if (bad_i < 0) bad_i = i; }
      }
      CHECK(ok, "%s: element %d: got %g", name, bad_i, bad_i >= 0 ? load_t(c, out, bad_i) : 0.0);
    }
    FREE_BUFFERS(rt, x, y, z);
  }
  /* rounding to nearest even in bf16 and f16 */
  {
    gpurt_buffer *x = alloc(rt, 0, 4), *y = alloc(rt, 0, 4);
    uint16_t in[2] = {f32_to_bf16(1.0078125f), 0}, o[2];
    upload(rt, x, in, 2);
    k = kernel(rt, m, "scale_bf16");
    gpurt_kernel_arg a[4] = {arg_buf(y, 0, 0), arg_buf(x, 0, 0), arg_f32(1.00390625f), arg_u64(1)};
    OK(launch1d(rt, s, k, 1, 1, a, 4));
    OK(api->stream_synchronize(rt, s));
    download(rt, o, y, 2);
    CHECK(bf16_to_f32(o[0]) == 1.015625f, "bf16 rounding: %g", bf16_to_f32(o[0]));
    in[0] = f_f16_exact(1.0f);
    upload(rt, x, in, 2);
    k = kernel(rt, m, "scale_f16");
    a[2] = arg_f32(1.0f + 1.0f / 2048.0f); /* a tie: rounds to even (1.0) */
    OK(launch1d(rt, s, k, 1, 1, a, 4));
    a[2] = arg_f32(1.0f + 3.0f / 2048.0f); /* a tie: rounds to even (1 + 2/1024) */
    a[0] = arg_buf(y, 2, 0);
    OK(launch1d(rt, s, k, 1, 1, a, 4));
    OK(api->stream_synchronize(rt, s));
    download(rt, o, y, 4);
    CHECK(o[0] == 0x3c00 && o[1] == 0x3c02, "f16 ties to even: %#x %#x", o[0], o[1]);
    OK(api->buffer_free(rt, x));
    OK(api->buffer_free(rt, y));
  }
  /* sleep_ns and stream_query */
  k = kernel(rt, m, "sleep_ns");
  gpurt_kernel_arg sa[1] = {arg_u64(300000000)};
  OK(launch1d(rt, s, k, 1, 1, sa, 1));
  ERR(api->stream_query(rt, s), GPURT_ERR_NOT_READY, "pending");
  OK(api->stream_synchronize(rt, s));
  OK(api->stream_query(rt, s));
  OK(api->module_unload(rt, m));
  OK(api->stream_destroy(rt, s));
  OK(api->runtime_destroy(rt));
}

static void test_ordering_and_events(void) {
  gpurt_runtime *rt = new_rt("delay_us=200");
  gpurt_module *m = NULL;
  OK(load_builtin(rt, &m));
  gpurt_stream *a = NULL, *b = NULL;
  OK(api->stream_create(rt, 0, &a));
  OK(api->stream_create(rt, 0, &b));
  enum { N = 256 };
  gpurt_buffer *x = alloc(rt, 0, N * 4), *y = alloc(rt, 0, N * 4);
  gpurt_host_buffer *hb = NULL;
  void *hp = NULL;
  OK(api->host_alloc(rt, N * 4, &hb, &hp));
  gpurt_event *e1 = NULL, *e2 = NULL, *plain = NULL;
  OK(api->event_create(rt, 0, GPURT_EVENT_TIMING, &e1));
  OK(api->event_create(rt, 0, GPURT_EVENT_TIMING, &e2));
  OK(api->event_create(rt, 0, 0, &plain));
  OK(api->event_query(rt, e1)); /* never recorded: complete */
  double ms = -1;
  ERR(api->event_elapsed(rt, e1, e2, &ms), GPURT_ERR_FAILED_PRECONDITION, "never recorded");
  /* stream a: sleep, fill x = 3, record e1; b waits e1 then y = 2 * x */
  OK(api->event_record(rt, e1, a));
  gpurt_kernel_arg sl[1] = {arg_u64(100000000)};
  OK(launch1d(rt, a, kernel(rt, m, "sleep_ns"), 1, 1, sl, 1));
  gpurt_kernel_arg fa[3] = {arg_buf(x, 0, 0), arg_f32(3.0f), arg_u64(N)};
  OK(launch1d(rt, a, kernel(rt, m, "fill_f32"), 2, 128, fa, 3));
  OK(api->event_record(rt, e2, a));
  ERR(api->event_query(rt, e2), GPURT_ERR_NOT_READY, "not completed");
  ERR(api->event_elapsed(rt, e1, e2, &ms), GPURT_ERR_NOT_READY, "not completed");
  OK(api->stream_wait_event(rt, b, e2));
  gpurt_kernel_arg sc[4] = {arg_buf(y, 0, 0), arg_buf(x, 0, 0), arg_f32(2.0f), arg_u64(N)};
  OK(launch1d(rt, b, kernel(rt, m, "scale_f32"), 2, 128, sc, 4));
  gpurt_copy_args c;
  ARGS_INIT(c);
  c.stream = b;
  c.size = N * 4;
  c.dst_host = hb;
  c.src_buffer = y;
  OK(api->copy(rt, &c));
  /* re-recording e2 later does not change what b waits for */
  OK(api->event_record(rt, e2, b));
  OK(api->stream_synchronize(rt, b));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= ((float *)hp)[i] == 6.0f;
  CHECK(ok, "cross-stream wait orders the work: got %g", ((float *)hp)[0]);
  OK(api->event_synchronize(rt, e2));
  OK(api->event_query(rt, e2));
  OK(api->event_elapsed(rt, e1, e2, &ms));
  CHECK(ms >= 90.0, "elapsed covers the 100 ms sleep: %g ms", ms);
  OK(api->event_record(rt, plain, a));
  OK(api->event_synchronize(rt, plain));
  ERR(api->event_elapsed(rt, e1, plain, &ms), GPURT_ERR_FAILED_PRECONDITION, "GPURT_EVENT_TIMING");
  /* a missing synchronize is visible: work runs later than the call */
  ERR(api->event_create(rt, 0, 8, &e1), GPURT_ERR_INVALID_ARGUMENT, "flags");
  /* stream order: many small ops in sequence */
  for (int i = 0; i < 20; i++) {
    gpurt_kernel_arg ax[4] = {arg_buf(x, 0, 0), arg_buf(x, 0, 0), arg_f32(1.0f), arg_u64(N)}; /* x = 2x */
    OK(launch1d(rt, a, kernel(rt, m, "axpy_f32"), 2, 128, ax, 4));
  }
  c.stream = a;
  c.src_buffer = x;
  OK(api->copy(rt, &c));
  OK(api->stream_synchronize(rt, a));
  CHECK(((float *)hp)[N - 1] == 3.0f * 1048576.0f, "20 in-order doublings: %g", ((float *)hp)[N - 1]);
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_streams == 2 && st.live_events == 3 && st.live_modules == 1 && st.live_host_buffers == 1 &&
            st.host_bytes == N * 4,
        "stats: streams %llu events %llu", (unsigned long long)st.live_streams, (unsigned long long)st.live_events);
  /* leave everything: runtime_destroy frees it */
  OK(api->runtime_destroy(rt));
}

static void test_faults(void) {
  gpurt_runtime *rt = new_rt("devices=2");
  OK(control(rt, "fail_alloc_nth", 2));
  gpurt_buffer *b = alloc(rt, 0, 16), *b2 = NULL;
  ERR(api->buffer_alloc(rt, 0, 16, &b2), GPURT_ERR_OUT_OF_MEMORY, "injected");
  b2 = alloc(rt, 0, 16);
  OK(control(rt, "fail_alloc_nth", 1));
  gpurt_host_buffer *hb = NULL;
  void *hp = NULL;
  ERR(api->host_alloc(rt, 16, &hb, &hp), GPURT_ERR_OUT_OF_MEMORY, "injected");
  ERR(control(rt, "explode", 1), GPURT_ERR_UNSUPPORTED, "explode");
  gpurt_module *m = NULL;
  OK(load_builtin(rt, &m));
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  gpurt_kernel *k = kernel(rt, m, "fill_f32");
  gpurt_kernel_arg fa[3] = {arg_buf(b, 0, 0), arg_f32(1.0f), arg_u64(4)};
  OK(control(rt, "fail_launch_nth", 2));
  OK(launch1d(rt, s, k, 1, 4, fa, 3));
  ERR(launch1d(rt, s, k, 1, 4, fa, 3), GPURT_ERR_LAUNCH_FAILED, "injected");
  OK(launch1d(rt, s, k, 1, 4, fa, 3));
  OK(control(rt, "lose_device", 1));
  gpurt_buffer *b3 = NULL;
  ERR(api->buffer_alloc(rt, 1, 16, &b3), GPURT_ERR_DEVICE_LOST, "device 1");
  ERR(api->device_synchronize(rt, 1), GPURT_ERR_DEVICE_LOST, "lost");
  OK(api->device_synchronize(rt, 0));
  OK(control(rt, "lose_device", 0));
  ERR(launch1d(rt, s, k, 1, 4, fa, 3), GPURT_ERR_DEVICE_LOST, "lost");
  ERR(api->stream_synchronize(rt, s), GPURT_ERR_DEVICE_LOST, "lost");
  ERR(api->buffer_alloc(rt, 0, 16, &b3), GPURT_ERR_DEVICE_LOST, "lost");
  OK(api->buffer_free(rt, b)); /* frees still release memory */
  OK(api->buffer_free(rt, b2));
  OK(api->stream_destroy(rt, s));
  OK(api->runtime_destroy(rt));
  /* the environment, read at runtime_create */
  setenv("GPURT_MOCK_FAULTS", "fail_alloc_nth=1", 1);
  rt = new_rt(NULL);
  unsetenv("GPURT_MOCK_FAULTS");
  ERR(api->buffer_alloc(rt, 0, 16, &b), GPURT_ERR_OUT_OF_MEMORY, "injected");
  b = alloc(rt, 0, 16);
  OK(api->buffer_free(rt, b));
  OK(api->runtime_destroy(rt));
  setenv("GPURT_MOCK_FAULTS", "bogus=1", 1);
  gpurt_runtime_create_args ca = {sizeof ca, NULL, NULL, NULL, 0};
  gpurt_runtime *r2 = NULL;
  ERR(api->runtime_create(&ca, &r2), GPURT_ERR_UNSUPPORTED, "bogus");
  unsetenv("GPURT_MOCK_FAULTS");
  setenv("GPURT_MOCK_DEVICES", "3", 1);
  rt = new_rt(NULL);
  unsetenv("GPURT_MOCK_DEVICES");
  uint32_t n = 0;
  OK(api->device_count(rt, &n));
  CHECK(n == 3, "GPURT_MOCK_DEVICES=3 gives %u devices", n);
  OK(api->runtime_destroy(rt));
}

/* ---- launch_batch (1.2) ---- */

/* Items j of the batch fill element j of buf with value j + 1. */
enum { PB = 5 };
typedef struct per_elem_batch {
  gpurt_kernel_arg a[PB][3];
  gpurt_launch_args l[PB];
  gpurt_launch_item it[PB];
} per_elem_batch;

static void per_elem(per_elem_batch *b, gpurt_kernel *fill, gpurt_buffer *buf) {
  for (int j = 0; j < PB; j++) {
    b->a[j][0] = arg_buf(buf, (uint64_t)j * 4, 4);
    b->a[j][1] = arg_f32((float)(j + 1));
    b->a[j][2] = arg_u64(1);
    b->l[j] = launch_args(1, 1, b->a[j], 3);
    b->it[j].kernel = fill;
    b->it[j].args = &b->l[j];
  }
}

typedef struct batch_thread {
  gpurt_runtime *rt;
  gpurt_stream *s;
  gpurt_kernel *fill, *scale;
  gpurt_buffer *v, *out;
  int id, ok;
} batch_thread;

enum { BT_THREADS = 3, BT_ITERS = 40, BT_LEN = 12 };

/* Each batch sets the shared scratch v to its own id, then copies v into
 * BT_LEN - 1 slots of its own output: a launch of another batch landing
 * inside it shows as a foreign id in the output. */
static void *batch_worker(void *p) {
  batch_thread *w = p;
  w->ok = 1;
  for (int it = 0; it < BT_ITERS; it++) {
    float id = (float)(w->id * 1000 + it + 1);
    uint64_t base = ((uint64_t)(w->id * BT_ITERS + it) * BT_LEN) * 4;
    gpurt_kernel_arg a[BT_LEN][4];
    gpurt_launch_args l[BT_LEN];
    gpurt_launch_item items[BT_LEN];
    a[0][0] = arg_buf(w->v, 0, 4);
    a[0][1] = arg_f32(id);
    a[0][2] = arg_u64(1);
    l[0] = launch_args(1, 1, a[0], 3);
    items[0].kernel = w->fill;
    items[0].args = &l[0];
    for (int k = 1; k < BT_LEN; k++) {
      a[k][0] = arg_buf(w->out, base + (uint64_t)k * 4, 4);
      a[k][1] = arg_buf(w->v, 0, 4);
      a[k][2] = arg_f32(1.0f);
      a[k][3] = arg_u64(1);
      l[k] = launch_args(1, 1, a[k], 4);
      items[k].kernel = w->scale;
      items[k].args = &l[k];
    }
    uint64_t n = 0;
    gpurt_error *e = api->launch_batch(w->rt, w->s, BT_LEN, items, &n);
    if (e || n != BT_LEN) w->ok = 0;
    api->error_destroy(e);
  }
  return NULL;
}

static void test_launch_batch(void) {
  gpurt_runtime *rt = new_rt("delay_us=100;devices=2");
  gpurt_module *m = NULL;
  OK(load_builtin(rt, &m));
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  gpurt_kernel *fill = kernel(rt, m, "fill_f32"), *axpy = kernel(rt, m, "axpy_f32");
  gpurt_kernel *scale = kernel(rt, m, "scale_f32");
  enum { N = 256 };
  gpurt_buffer *x = alloc(rt, 0, N * 4), *y = alloc(rt, 0, N * 4);
  float hx[N], hy[N];

  /* dependent launches run in order: x = 1, y = 2, y += 3x, x += 2y, y += x */
  gpurt_kernel_arg f1[3] = {arg_buf(x, 0, 0), arg_f32(1.0f), arg_u64(N)};
  gpurt_kernel_arg f2[3] = {arg_buf(y, 0, 0), arg_f32(2.0f), arg_u64(N)};
  gpurt_kernel_arg a1[4] = {arg_buf(y, 0, 0), arg_buf(x, 0, 0), arg_f32(3.0f), arg_u64(N)};
  gpurt_kernel_arg a2[4] = {arg_buf(x, 0, 0), arg_buf(y, 0, 0), arg_f32(2.0f), arg_u64(N)};
  gpurt_kernel_arg a3[4] = {arg_buf(y, 0, 0), arg_buf(x, 0, 0), arg_f32(1.0f), arg_u64(N)};
  gpurt_launch_args l[5] = {launch_args(2, 128, f1, 3), launch_args(2, 128, f2, 3), launch_args(2, 128, a1, 4),
                            launch_args(2, 128, a2, 4), launch_args(2, 128, a3, 4)};
  gpurt_launch_item items[5] = {{fill, &l[0]}, {fill, &l[1]}, {axpy, &l[2]}, {axpy, &l[3]}, {axpy, &l[4]}};
  uint64_t n = 99;
  OK(api->launch_batch(rt, s, 5, items, &n));
  CHECK(n == 5, "out_enqueued after a full batch: %llu", (unsigned long long)n);
  OK(api->stream_synchronize(rt, s));
  download(rt, hx, x, N * 4);
  download(rt, hy, y, N * 4);
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= hx[i] == 11.0f && hy[i] == 16.0f;
  CHECK(ok, "batch with dependencies: x %g (want 11), y %g (want 16)", hx[N - 1], hy[N - 1]);

  /* NULL out_enqueued: y += x once more */
  OK(api->launch_batch(rt, s, 1, &items[4], NULL));
  OK(api->stream_synchronize(rt, s));
  download(rt, hy, y, N * 4);
  CHECK(hy[0] == 27.0f && hy[N - 1] == 27.0f, "batch with NULL out_enqueued: y %g (want 27)", hy[0]);

  /* count 0 is a no-op; items may then be NULL */
  n = 99;
  OK(api->launch_batch(rt, s, 0, items, &n));
  CHECK(n == 0, "count 0 writes out_enqueued 0: %llu", (unsigned long long)n);
  OK(api->launch_batch(rt, s, 0, NULL, NULL));

  /* an invalid item 2 of 4 enqueues nothing: x stays 11 */
  gpurt_kernel_arg bad[2] = {arg_buf(x, 0, 0), arg_f32(5.0f)}; /* fill without n */
  gpurt_launch_args lb[4] = {launch_args(2, 128, f1, 3), launch_args(2, 128, a1, 4), launch_args(2, 128, bad, 2),
                             launch_args(2, 128, f2, 3)};
  gpurt_launch_item ib[4] = {{fill, &lb[0]}, {axpy, &lb[1]}, {fill, &lb[2]}, {fill, &lb[3]}};
  n = 99;
  ERR(api->launch_batch(rt, s, 4, ib, &n), GPURT_ERR_INVALID_ARGUMENT, "item 2: launch \"fill_f32\": the kernel takes 3 arguments, got 2");
  CHECK(n == 0, "invalid item: out_enqueued %llu (want 0)", (unsigned long long)n);
  /* a view too small for item 1 is out of range */
  gpurt_kernel_arg small[4] = {arg_buf(y, 0, 16), arg_buf(x, 0, 0), arg_f32(1.0f), arg_u64(N)};
  lb[1] = launch_args(2, 128, small, 4);
  lb[2] = launch_args(2, 128, f1, 3);
  n = 99;
  ERR(api->launch_batch(rt, s, 4, ib, &n), GPURT_ERR_OUT_OF_RANGE, "item 1: launch \"axpy_f32\"");
  CHECK(n == 0, "out-of-range item: out_enqueued %llu (want 0)", (unsigned long long)n);
  /* a NULL args pointer and NULL items */
  lb[1] = launch_args(2, 128, a1, 4);
  ib[3].args = NULL;
  ERR(api->launch_batch(rt, s, 4, ib, &n), GPURT_ERR_INVALID_ARGUMENT, "item 3");
  ERR(api->launch_batch(rt, s, 2, NULL, &n), GPURT_ERR_INVALID_ARGUMENT, "items is NULL");
  ERR(api->launch_batch(rt, NULL, 2, ib, &n), GPURT_ERR_INVALID_ARGUMENT, "stream is NULL");
  /* a freed kernel handle in item 1 */
  gpurt_module *m2 = NULL;
  OK(load_builtin(rt, &m2));
  gpurt_kernel *gone = kernel(rt, m2, "fill_f32");
  OK(api->module_unload(rt, m2));
  gpurt_launch_item ig[2] = {{fill, &l[0]}, {gone, &l[1]}};
  n = 99;
  ERR(api->launch_batch(rt, s, 2, ig, &n), GPURT_ERR_INVALID_HANDLE, "item 1: invalid kernel handle");
  CHECK(n == 0, "freed kernel: out_enqueued %llu (want 0)", (unsigned long long)n);
  /* a kernel of another device's module */
  gpurt_module *m1 = NULL;
  gpurt_module_load_args ml1 = {sizeof ml1, 1, GPURT_MODULE_BUILTIN, NULL, 0, NULL, 0};
  OK(api->module_load(rt, &ml1, &m1));
  ig[1].kernel = kernel(rt, m1, "fill_f32");
  ERR(api->launch_batch(rt, s, 2, ig, &n), GPURT_ERR_INVALID_ARGUMENT, "item 1: launch \"fill_f32\": the kernel is on device 1, the stream on device 0");
  OK(api->stream_synchronize(rt, s));
  download(rt, hx, x, N * 4);
  download(rt, hy, y, N * 4);
  ok = 1;
  for (int i = 0; i < N; i++) ok &= hx[i] == 11.0f && hy[i] == 27.0f;
  CHECK(ok, "rejected batches touched nothing: x %g (want 11), y %g (want 27)", hx[0], hy[0]);

  /* fail_launch_nth counts every item: the 3rd launch fails, 2 stay enqueued */
  gpurt_buffer *z = alloc(rt, 0, PB * 4);
  float zero[PB] = {0}, hz[PB];
  upload(rt, z, zero, sizeof zero);
  per_elem_batch pe;
  per_elem(&pe, fill, z);
  OK(control(rt, "fail_launch_nth", 3));
  n = 99;
  ERR(api->launch_batch(rt, s, PB, pe.it, &n), GPURT_ERR_LAUNCH_FAILED, "item 2: launch \"fill_f32\"");
  CHECK(n == 2, "fault at item 2: out_enqueued %llu (want 2)", (unsigned long long)n);
  OK(api->stream_synchronize(rt, s));
  download(rt, hz, z, sizeof hz);
  CHECK(hz[0] == 1.0f && hz[1] == 2.0f && hz[2] == 0.0f && hz[3] == 0.0f && hz[4] == 0.0f,
        "items before the fault ran, the rest did not: %g %g %g %g %g", hz[0], hz[1], hz[2], hz[3], hz[4]);
  /* the fault fires once, and at item 0 nothing is enqueued */
  upload(rt, z, zero, sizeof zero);
  OK(control(rt, "fail_launch_nth", 1));
  n = 99;
  ERR(api->launch_batch(rt, s, PB, pe.it, &n), GPURT_ERR_LAUNCH_FAILED, "item 0");
  CHECK(n == 0, "fault at item 0: out_enqueued %llu", (unsigned long long)n);
  OK(api->launch_batch(rt, s, PB, pe.it, &n));
  CHECK(n == PB, "after the fault: out_enqueued %llu", (unsigned long long)n);
  /* the count carries over batches and single launches: 8 = 5 + 1 + the 2nd of the next batch */
  OK(control(rt, "fail_launch_nth", 8));
  OK(api->launch_batch(rt, s, PB, pe.it, &n));
  OK(launch1d(rt, s, fill, 2, 128, f1, 3));
  upload(rt, z, zero, sizeof zero);
  ERR(api->launch_batch(rt, s, PB, pe.it, &n), GPURT_ERR_LAUNCH_FAILED, "item 1");
  CHECK(n == 1, "fault carried over: out_enqueued %llu (want 1)", (unsigned long long)n);
  OK(api->stream_synchronize(rt, s));
  download(rt, hz, z, sizeof hz);
  CHECK(hz[0] == 1.0f && hz[1] == 0.0f, "carried fault: %g %g", hz[0], hz[1]);

  /* 3 threads submit batches to one stream: every batch stays contiguous */
  gpurt_buffer *v = alloc(rt, 0, 4);
  gpurt_buffer *out = alloc(rt, 0, (uint64_t)BT_THREADS * BT_ITERS * BT_LEN * 4);
  OK(control(rt, "delay_us", 0));
  pthread_t th[BT_THREADS];
  batch_thread bt[BT_THREADS];
  for (int t = 0; t < BT_THREADS; t++) {
    bt[t] = (batch_thread){rt, s, fill, scale, v, out, t, 0};
    pthread_create(&th[t], NULL, batch_worker, &bt[t]);
  }
  ok = 1;
  for (int t = 0; t < BT_THREADS; t++) {
    pthread_join(th[t], NULL);
    ok &= bt[t].ok;
  }
  CHECK(ok, "3 threads: every batch enqueued in full");
  OK(api->stream_synchronize(rt, s));
  static float ho[BT_THREADS * BT_ITERS * BT_LEN];
  download(rt, ho, out, sizeof ho);
  int foreign = 0;
  for (int t = 0; t < BT_THREADS; t++)
    for (int it = 0; it < BT_ITERS; it++)
      for (int k = 1; k < BT_LEN; k++)
        if (ho[(t * BT_ITERS + it) * BT_LEN + k] != (float)(t * 1000 + it + 1)) foreign++;
  CHECK(foreign == 0, "batches from 3 threads interleaved: %d slots saw another batch's value", foreign);

  /* a lost device refuses the whole batch */
  gpurt_stream *s1 = NULL;
  OK(api->stream_create(rt, 1, &s1));
  OK(control(rt, "lose_device", 1));
  n = 99;
  ERR(api->launch_batch(rt, s1, PB, pe.it, &n), GPURT_ERR_DEVICE_LOST, "lost");
  CHECK(n == 0, "lost device: out_enqueued %llu", (unsigned long long)n);
  OK(api->runtime_destroy(rt));
}

/* ---- many threads at once ---- */

typedef struct worker_arg {
  gpurt_runtime *rt;
  gpurt_kernel *k;
  int id, ok;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  w->ok = 1;
  gpurt_stream *s = NULL;
  if (api->stream_create(w->rt, 0, &s)) { w->ok = 0; return NULL; }
  for (int it = 0; it < 30; it++) {
    gpurt_buffer *b = NULL;
    if (api->buffer_alloc(w->rt, 0, 400, &b)) { w->ok = 0; break; }
    float v = (float)(w->id * 100 + it);
    gpurt_kernel_arg fa[3] = {arg_buf(b, 0, 0), arg_f32(v), arg_u64(100)};
    gpurt_error *e = launch1d(w->rt, s, w->k, 1, 128, fa, 3);
    float out[100];
    e = e ? e : copy_sync(w->rt, s, NULL, 0, out, b, 0, NULL, 400);
    if (e) { api->error_destroy(e); w->ok = 0; }
    for (int i = 0; i < 100; i++) if (out[i] != v) w->ok = 0;
    if (api->buffer_free(w->rt, b)) w->ok = 0;
  }
  if (api->stream_destroy(w->rt, s)) w->ok = 0;
  return NULL;
}

static void test_threads(void) {
  gpurt_runtime *rt = new_rt("delay_us=0");
  gpurt_module *m = NULL;
  OK(load_builtin(rt, &m));
  gpurt_kernel *k = kernel(rt, m, "fill_f32");
  enum { T = 8 };
  pthread_t th[T];
  worker_arg wa[T];
  for (int i = 0; i < T; i++) {
    wa[i] = (worker_arg){rt, k, i, 0};
    pthread_create(&th[i], NULL, worker, &wa[i]);
  }
  int ok = 1;
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    ok &= wa[i].ok;
  }
  CHECK(ok, "8 threads alloc/launch/copy/free at once");
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  OK(api->runtime_stats(rt, &st));
  CHECK(st.live_buffers == 0 && st.live_streams == 0, "nothing leaked by the threads");
  OK(api->runtime_destroy(rt));
}

/* ---- GEMM ---- */

static double dval(int32_t t, const void *p, uint64_t i) {
  switch (t) {
    case GPURT_DTYPE_F32: return ((const float *)p)[i];
    case GPURT_DTYPE_F16: return f16_f(((const uint16_t *)p)[i]);
    case GPURT_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case GPURT_DTYPE_FP8_E4M3: return e4m3_d(((const uint8_t *)p)[i]);
    case GPURT_DTYPE_FP8_E5M2: return e5m2_d(((const uint8_t *)p)[i]);
  }
  return 0;
}
static size_t dsize(int32_t t) {
  return t == GPURT_DTYPE_F32 ? 4 : (t == GPURT_DTYPE_F16 || t == GPURT_DTYPE_BF16) ? 2 : 1;
}
/* A random nonzero element of type t, exactly representable. */
static void rnd_elem(int32_t t, void *p, uint64_t i) {
  float f = rndf();
  switch (t) {
    case GPURT_DTYPE_F32: ((float *)p)[i] = f; break;
    case GPURT_DTYPE_F16: ((uint16_t *)p)[i] = f_f16_exact(roundf(f * 1024) / 1024 == 0 ? 0.5f : roundf(f * 1024) / 1024); break;
    case GPURT_DTYPE_BF16: {
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
      break;
    }
    case GPURT_DTYPE_FP8_E4M3: {
      uint8_t v;
      do v = (uint8_t)rnd(); while ((v & 0x7f) == 0x7f || (v & 0x7f) == 0 || ((v >> 3) & 15) > 9 || ((v >> 3) & 15) < 4);
      ((uint8_t *)p)[i] = v;
      break;
    }
    case GPURT_DTYPE_FP8_E5M2: {
      uint8_t v;
      do v = (uint8_t)rnd(); while (((v >> 2) & 31) > 17 || ((v >> 2) & 31) < 11);
      ((uint8_t *)p)[i] = v;
      break;
    }
  }
}

typedef struct gcase {
  const char *name;
  int32_t a, b, c, d;
  int epi;
  int32_t bias_t;
  int ta, tb;
  uint64_t m, n, k, pad, batch;
  double alpha, beta, tol;
  int scales;
} gcase;

static void run_gemm_case(gpurt_runtime *rt, gpurt_stream *s, const gcase *g) {
  uint64_t ar = g->ta ? g->k : g->m, ac = g->ta ? g->m : g->k;
  uint64_t br = g->tb ? g->n : g->k, bc = g->tb ? g->k : g->n;
  gpurt_gemm_desc d = {.struct_size = sizeof d, .a_type = g->a, .b_type = g->b, .c_type = g->c, .d_type = g->d,
                       .epilogue = g->epi, .bias_type = g->bias_t, .trans_a = (uint8_t)g->ta,
                       .trans_b = (uint8_t)g->tb, .m = g->m, .n = g->n, .k = g->k, .lda = ar + g->pad,
                       .ldb = br + g->pad, .ldc = g->m + g->pad, .ldd = g->m + 2 * g->pad, .batch_count = g->batch};
  d.stride_a = (int64_t)(d.lda * ac + 3);
  d.stride_b = (int64_t)(d.ldb * bc);
  d.stride_c = (int64_t)(d.ldc * g->n + 1);
  d.stride_d = (int64_t)(d.ldd * g->n);
  uint64_t na = (g->batch - 1) * d.stride_a + d.lda * ac, nb = (g->batch - 1) * d.stride_b + d.ldb * bc;
  uint64_t nc = (g->batch - 1) * d.stride_c + d.ldc * g->n, nd = (g->batch - 1) * d.stride_d + d.ldd * g->n;
  void *ha = calloc(na, dsize(g->a)), *hb = calloc(nb, dsize(g->b)), *hc = calloc(nc, dsize(g->c));
  void *hd = calloc(nd, dsize(g->d)), *hbias = calloc(g->m, dsize(g->bias_t ? g->bias_t : 1));
  for (uint64_t i = 0; i < na; i++) rnd_elem(g->a, ha, i);
  for (uint64_t i = 0; i < nb; i++) rnd_elem(g->b, hb, i);
  for (uint64_t i = 0; i < nc; i++) rnd_elem(g->c, hc, i);
  int has_bias = g->epi == GPURT_EPILOGUE_BIAS || g->epi == GPURT_EPILOGUE_BIAS_RELU || g->epi == GPURT_EPILOGUE_BIAS_GELU;
  if (has_bias)
    for (uint64_t i = 0; i < g->m; i++) rnd_elem(g->bias_t, hbias, i);
  float scales[3] = {0.5f, 2.0f, 0.25f};
  gpurt_buffer *A = alloc(rt, 0, na * dsize(g->a)), *B = alloc(rt, 0, nb * dsize(g->b));
  gpurt_buffer *C = alloc(rt, 0, nc * dsize(g->c)), *D = alloc(rt, 0, nd * dsize(g->d) + 8);
  gpurt_buffer *BIAS = alloc(rt, 0, g->m * 4), *SC = alloc(rt, 0, 16);
  upload(rt, A, ha, na * dsize(g->a));
  upload(rt, B, hb, nb * dsize(g->b));
  upload(rt, C, hc, nc * dsize(g->c));
  if (has_bias) upload(rt, BIAS, hbias, g->m * dsize(g->bias_t));
  upload(rt, SC, scales, sizeof scales);
  gpurt_gemm_plan *p = NULL;
  OK(api->gemm_plan_create(rt, 0, &d, &p));
  gpurt_gemm_run_args r;
  ARGS_INIT(r);
  r.a = A;
  r.b = B;
  r.c = g->beta != 0 ? C : NULL;
  r.d = D;
  r.d_offset = 8;
  r.bias = has_bias ? BIAS : NULL;
  if (g->scales) {
    r.scale_a = SC;
    r.scale_a_offset = 0;
    r.scale_b = SC;
    r.scale_b_offset = 4;
    if (g->d == GPURT_DTYPE_FP8_E4M3 || g->d == GPURT_DTYPE_FP8_E5M2) { /* scale_d: fp8 D only */
      r.scale_d = SC;
      r.scale_d_offset = 8;
    }
  }
  r.alpha = g->alpha;
  r.beta = g->beta;
  OK(api->gemm_run(rt, s, p, &r));
  OK(api->stream_synchronize(rt, s));
  unsigned char *out = malloc(nd * dsize(g->d) + 8);
  download(rt, out, D, nd * dsize(g->d) + 8);
  double sab = g->scales ? 0.5 * 2.0 : 1.0, sd = g->scales && (g->d == GPURT_DTYPE_FP8_E4M3 || g->d == GPURT_DTYPE_FP8_E5M2) ? 0.25 : 1.0;
  double maxerr = 0;
  int ok = 1;
  for (uint64_t bt = 0; bt < g->batch; bt++) {
    const unsigned char *a = (unsigned char *)ha + bt * d.stride_a * dsize(g->a);
    const unsigned char *b = (unsigned char *)hb + bt * d.stride_b * dsize(g->b);
    const unsigned char *c = (unsigned char *)hc + bt * d.stride_c * dsize(g->c);
    for (uint64_t j = 0; j < g->n; j++)
      for (uint64_t i = 0; i < g->m; i++) {
        double acc = 0, mag = 0;
        for (uint64_t q = 0; q < g->k; q++) {
          double av = dval(g->a, a, g->ta ? i * d.lda + q : q * d.lda + i);
          double bv = dval(g->b, b, g->tb ? q * d.ldb + j : j * d.ldb + q);
          acc += av * bv;
          mag += fabs(av * bv);
        }
        double t = g->alpha * sab * acc;
        mag = fabs(g->alpha * sab) * mag;
        if (g->beta != 0) {
          double cv = dval(g->c, c, j * d.ldc + i);
          t += g->beta * cv;
          mag += fabs(g->beta * cv);
        }
        if (has_bias) {
          double bv = dval(g->bias_t, hbias, i);
          t += bv;
          mag += fabs(bv);
        }
        if (g->epi == GPURT_EPILOGUE_RELU || g->epi == GPURT_EPILOGUE_BIAS_RELU) t = t > 0 ? t : 0;
        if (g->epi == GPURT_EPILOGUE_GELU || g->epi == GPURT_EPILOGUE_BIAS_GELU)
          t = 0.5 * t * (1 + tanh(sqrt(2 / M_PI) * (t + 0.044715 * t * t * t)));
        t *= sd;
        mag *= sd;
        double got = dval(g->d, out + 8, bt * d.stride_d + j * d.ldd + i);
        double err = fabs(got - t) / (mag + 1e-30);
        if (err > maxerr) maxerr = err;
        if (!(err <= g->tol)) ok = 0;
      }
  }
  CHECK(ok, "gemm %s: max error %.3g relative to sum |a*b| (tolerance %g)", g->name, maxerr, g->tol);
  /* Padding between columns of D (ldd > m) is never written. */
  if (g->pad) {
    int pad_ok = 1;
    for (uint64_t j = 0; j < g->n; j++)
      for (uint64_t i = g->m; i < d.ldd; i++) {
        const unsigned char *e = out + 8 + (j * d.ldd + i) * dsize(g->d);
        for (size_t q = 0; q < dsize(g->d); q++) pad_ok &= e[q] == 0xCD;
      }
    CHECK(pad_ok, "gemm %s: D's padding rows untouched", g->name);
  }
  /* D one element too small: OUT_OF_RANGE naming d */
  r.d_offset = 8 + (2 * g->pad + 1) * dsize(g->d); /* past the slack of ldd > m */
  ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_OUT_OF_RANGE, "operand d");
  OK(api->gemm_plan_destroy(rt, p));
  FREE_BUFFERS(rt, A, B, C, D, BIAS, SC);
  free(ha);
  free(hb);
  free(hc);
  free(hd);
  free(hbias);
  free(out);
}

static void test_gemm(void) {
  gpurt_runtime *rt = new_rt("delay_us=0");
  gpurt_stream *s = NULL;
  OK(api->stream_create(rt, 0, &s));
  const int32_t F32 = GPURT_DTYPE_F32, F16 = GPURT_DTYPE_F16, BF = GPURT_DTYPE_BF16;
  const int32_t E4 = GPURT_DTYPE_FP8_E4M3, E5 = GPURT_DTYPE_FP8_E5M2;
  const gcase cases[] = {
      {"f32 nn", F32, F32, F32, F32, 0, 0, 0, 0, 37, 29, 41, 0, 1, 1.0, 0.0, 1e-5, 0},
      {"f32 tn beta", F32, F32, F32, F32, 0, 0, 1, 0, 33, 17, 70, 3, 1, 0.75, 0.5, 1e-5, 0},
      {"f32 nt batch", F32, F32, F32, F32, 0, 0, 0, 1, 16, 9, 23, 1, 3, -1.25, 2.0, 1e-5, 0},
      {"f32 tt 1xN", F32, F32, F32, F32, 0, 0, 1, 1, 1, 65, 13, 0, 1, 1.0, 1.0, 1e-5, 0},
      {"f32 Nx1 bias", F32, F32, F32, F32, GPURT_EPILOGUE_BIAS, F32, 0, 0, 70, 1, 19, 2, 1, 1.0, 0.0, 1e-5, 0},
      {"f32 big threaded", F32, F32, F32, F32, GPURT_EPILOGUE_BIAS_RELU, F32, 0, 1, 130, 150, 96, 0, 2, 1.0, 1.0, 1e-5, 0},
      {"f32 relu", F32, F32, F32, F32, GPURT_EPILOGUE_RELU, 0, 0, 0, 20, 20, 20, 0, 1, 1.0, 0.0, 1e-5, 0},
      {"f32 gelu", F32, F32, F32, F32, GPURT_EPILOGUE_GELU, 0, 1, 0, 21, 19, 33, 0, 1, 1.0, 0.0, 1e-5, 0},
      {"f32 bias_gelu", F32, F32, F32, F32, GPURT_EPILOGUE_BIAS_GELU, F32, 0, 0, 21, 19, 33, 1, 1, 1.0, 0.25, 1e-5, 0},
      {"f16 -> f16", F16, F16, F16, F16, 0, 0, 0, 0, 31, 27, 45, 1, 2, 1.0, 1.0, 1e-2, 0},
      {"f16 -> f32 bias f16", F16, F16, F32, F16, GPURT_EPILOGUE_BIAS, F16, 1, 1, 19, 22, 37, 0, 1, 1.0, 0.0, 1e-2, 0},
      {"bf16 -> bf16", BF, BF, BF, BF, GPURT_EPILOGUE_BIAS_RELU, F32, 0, 1, 33, 35, 64, 2, 2, 0.5, 1.0, 1e-2, 0},
      {"bf16 -> f32", BF, BF, F32, F32, 0, 0, 1, 0, 40, 8, 100, 0, 1, 1.0, 0.0, 1e-2, 0},
      {"e4m3 x e4m3 -> bf16", E4, E4, BF, BF, 0, 0, 1, 0, 32, 16, 64, 0, 1, 1.0, 0.0, 2e-2, 1},
      {"e4m3 x e5m2 -> f32", E4, E5, F32, F32, GPURT_EPILOGUE_BIAS, F32, 1, 0, 16, 16, 32, 0, 2, 1.0, 1.0, 1e-2, 1},
      {"e5m2 x e4m3 -> f16", E5, E4, F16, F16, GPURT_EPILOGUE_GELU, 0, 0, 0, 17, 9, 48, 1, 1, 1.0, 0.0, 2e-2, 0},
      {"e4m3 -> e4m3", E4, E4, BF, E4, GPURT_EPILOGUE_BIAS_RELU, E4, 1, 0, 16, 32, 64, 0, 1, 1.0, 0.0, 1.5e-1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_gemm_case(rt, s, &cases[i]);

  /* descriptor errors */
  gpurt_gemm_desc d = gemm_desc_square(F32, 4);
  gpurt_gemm_plan *p = NULL;
  OK(api->gemm_plan_create(rt, 0, &d, &p));
  d.m = 0;
  gpurt_gemm_plan *q = NULL;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_INVALID_ARGUMENT, "m is 0");
  d.m = 4;
  d.b_type = F16;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "b_type");
  d.a_type = d.b_type = E5;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "b_type");
  d.a_type = d.b_type = GPURT_DTYPE_I8;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "a_type");
  d.a_type = d.b_type = F32;
  d.d_type = E4;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "d_type");
  d.d_type = F32;
  d.lda = 3;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_INVALID_ARGUMENT, "lda");
  d.lda = 4;
  d.batch_count = 0;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_INVALID_ARGUMENT, "batch_count");
  d.batch_count = 1;
  d.epilogue = 9;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "epilogue");
  d.epilogue = GPURT_EPILOGUE_BIAS;
  d.bias_type = F16;
  ERR(api->gemm_plan_create(rt, 0, &d, &q), GPURT_ERR_UNSUPPORTED, "bias_type");
  /* run errors */
  gpurt_buffer *X = alloc(rt, 0, 64);
  gpurt_gemm_run_args r = gemm_run_args(X, X, X, 1);
  r.beta = 1;
  ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_ARGUMENT, "beta");
  r.beta = 0;
  OK(api->gemm_run(rt, s, p, &r));
  r.a_offset = 4;
  ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_OUT_OF_RANGE, "operand a");
  r.a_offset = 0;
  ERR(api->gemm_run(rt, NULL, p, &r), GPURT_ERR_INVALID_ARGUMENT, "stream");
  OK(api->gemm_plan_destroy(rt, p));
  ERR(api->gemm_run(rt, s, p, &r), GPURT_ERR_INVALID_HANDLE, "gemm plan");
  OK(api->stream_synchronize(rt, s));
  OK(api->runtime_destroy(rt));
}

/* ---- graphs: CALL items (1.7) and the replay order across streams ------- */

static gpurt_error *graph_of(gpurt_runtime *rt, const gpurt_graph_item *items, uint64_t n, gpurt_graph **g) {
  gpurt_graph_create_args a = graph_args(items, n);
  return api->graph_create(rt, &a, g);
}

static void test_graph_calls(void) {
  gpurt_runtime *rt = new_rt("delay_us=20");
  gpurt_stream *s1 = NULL, *s2 = NULL;
  OK(api->stream_create(rt, 0, &s1));
  OK(api->stream_create(rt, 0, &s2));
  gpurt_module *m = NULL;
  OK(load_builtin(rt, &m));
  gpurt_kernel *sleep = kernel(rt, m, "sleep_ns"), *axpy = kernel(rt, m, "axpy_f32");
  enum { N = 64 };
  gpurt_buffer *x = alloc(rt, 0, 4 * N), *t = alloc(rt, 0, 4 * N), *one = alloc(rt, 0, 4 * N);
  float h[N];
  for (int i = 0; i < N; i++) h[i] = 1;
  upload(rt, one, h, sizeof h);
  memset(h, 0, sizeof h);
  upload(rt, x, h, sizeof h);

  /* t = x; sleep; x = t; x += 1: CALL items of copy and launch (read as
   * their own kinds), replayed 8 times alternating two streams. */
  gpurt_copy_args c1, c2;
  ARGS_INIT(c1);
  c1.size = 4 * N;
  c2 = c1;
  c1.dst_buffer = t;
  c1.src_buffer = x;
  c2.dst_buffer = x;
  c2.src_buffer = t;
  gpurt_kernel_arg sa[] = {arg_u64(200000)};
  gpurt_kernel_arg xa[] = {arg_buf(x, 0, 0), arg_buf(one, 0, 0), arg_f32(1), arg_u64(N)};
  gpurt_launch_args sl = launch_args(1, 1, sa, 1), xl = launch_args(1, N, xa, 4);
  gpurt_graph_item items[] = {call_item(offsetof(gpurt_api, copy), NULL, &c1),
                              call_item(offsetof(gpurt_api, launch), sleep, &sl),
                              call_item(offsetof(gpurt_api, copy), NULL, &c2),
                              call_item(offsetof(gpurt_api, launch), axpy, &xl)};
  gpurt_graph *g = NULL;
  OK(graph_of(rt, items, 4, &g));
  for (int i = 0; i < 8; i++) OK(api->graph_launch(rt, g, i % 2 ? s2 : s1));
  OK(api->stream_synchronize(rt, s1));
  OK(api->stream_synchronize(rt, s2));
  download(rt, h, x, sizeof h);
  CHECK(h[0] == 8 && h[N - 1] == 8, "8 replays on two streams: x = %g, %g (want 8: replays in order)", h[0],
        h[N - 1]);
  OK(api->graph_destroy(rt, g));

  /* grouped_gemm: m_sizes is borrowed; the graph keeps its own copy. */
  enum { G = 2, GN = 8, GK = 16, GM = 8 };
  uint64_t msz[G] = {3, 5};
  uint16_t ab[GM * GK + G * GN * GK];
  for (size_t i = 0; i < sizeof ab / 2; i++) ab[i] = f32_to_bf16(rndf());
  gpurt_buffer *a = alloc(rt, 0, 2 * GM * GK), *b = alloc(rt, 0, 2 * G * GN * GK), *d = alloc(rt, 0, 2 * GM * GN);
  upload(rt, a, ab, 2 * GM * GK);
  upload(rt, b, ab + GM * GK, 2 * G * GN * GK);
  gpurt_grouped_gemm_args gg = {.struct_size = sizeof gg, .ab_type = GPURT_DTYPE_BF16, .d_type = GPURT_DTYPE_BF16,
                                .group_count = G, .n = GN, .k = GK, .m_sizes = msz, .a = a, .b = b, .d = d};
  OK(api->grouped_gemm(rt, s1, &gg));
  OK(api->stream_synchronize(rt, s1));
  uint16_t want[GM * GN], got[GM * GN];
  download(rt, want, d, sizeof want);
  gpurt_graph_item gi = call_item(offsetof(gpurt_api, grouped_gemm), NULL, &gg);
  OK(graph_of(rt, &gi, 1, &g));
  msz[0] = msz[1] = 0; /* the caller's array changes after graph_create */
  gpurt_memset_args z = {sizeof z, NULL, d, 0, sizeof got, 0, 1};
  OK(api->memset(rt, &z));
  OK(api->graph_launch(rt, g, s2));
  OK(api->stream_synchronize(rt, s2));
  download(rt, got, d, sizeof got);
  CHECK(memcmp(got, want, sizeof got) == 0, "a recorded grouped_gemm replays with the m_sizes of graph_create");
  /* An update may change the args (a new m_sizes copy), not the slot. */
  uint64_t msz2[G] = {8, 0};
  gpurt_grouped_gemm_args gg2 = gg;
  gg2.m_sizes = msz2;
  gpurt_graph_item gi2 = call_item(offsetof(gpurt_api, grouped_gemm), NULL, &gg2);
  uint64_t at = 0;
  gpurt_graph_update_args ua = update_args(&at, &gi2);
  OK(api->graph_update(rt, g, &ua));
  CHECK(ua.applied == GPURT_GRAPH_UPDATE_PATCHED, "graph_update of a CALL item: applied %d", ua.applied);
  gpurt_kv_append_args ka;
  ARGS_INIT(ka);
  ka.layout.dtype = GPURT_DTYPE_F16;
  ka.layout.page_size = 16;
  ka.layout.num_kv_heads = 1;
  ka.layout.head_dim = 64;
  ka.batch_size = 1;
  gpurt_graph_item gq = call_item(offsetof(gpurt_api, kv_append), NULL, &ka);
  ua.items = &gq;
  ERR(api->graph_update(rt, g, &ua), GPURT_ERR_INVALID_ARGUMENT, "cannot change its slot");
  OK(api->graph_launch(rt, g, s1));
  OK(api->stream_synchronize(rt, s1));
  OK(api->graph_destroy(rt, g));
  /* kv_append of nnz 0 records a no-op; a CALL of an unknown slot is refused. */
  gpurt_graph_item gk[] = {call_item(offsetof(gpurt_api, kv_append), NULL, &ka)};
  OK(graph_of(rt, gk, 1, &g));
  OK(api->graph_launch(rt, g, s1));
  OK(api->graph_destroy(rt, g));
  gk[0].slot = offsetof(gpurt_api, comm_run);
  ERR(graph_of(rt, gk, 1, &g), GPURT_ERR_UNSUPPORTED, "not one a graph records");

  FREE_BUFFERS(rt, x, t, one, a, b, d);
  OK(api->module_unload(rt, m));
  OK(api->stream_destroy(rt, s1));
  OK(api->stream_destroy(rt, s2));
  OK(api->runtime_destroy(rt));
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN\n", argv[0]);
    return 2;
  }
  gpurt_negotiate_fn neg = plugin_entry(argv[1]);
  if (!neg) return 1;
  unsetenv("GPURT_MOCK_FAULTS");
  unsetenv("GPURT_MOCK_DEVICES");
  unsetenv("GPURT_MOCK_MEMORY");
  test_negotiate(neg);
  if (api == NULL) return finish_with(1);
  test_info();
  test_devices();
  test_copies();
  test_handles();
  test_kernels();
  test_ordering_and_events();
  test_faults();
  test_launch_batch();
  test_threads();
  test_gemm();
  test_graph_calls();
  OK(api->shutdown());
  return finish();
}
