/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rawbench — the raw C baseline for gpurt's benchmarks: the same work done
 * directly on the CUDA driver API and cuBLASLt, printed as JSON lines, one
 * object per metric: {"metric":...,"value":...,"unit":...,...}.
 *
 * Beside each raw figure it measures the same work through the CUDA
 * plugin's C function table (dlopen'ed, negotiated, no Go): metrics with
 * "source":"plugin_c" (stream_query dispatch, launch of fill_f32, the same
 * launch through launch_batch in calls of 64 (launch_batch_host_us, per
 * launch), GEMM device time and gemm_run host cost), so Go overhead and
 * plugin overhead can be told apart in one run.
 *
 * Build (scripts/gpu_check.sh does this):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iabi -I/usr/local/cuda/include bench/raw/rawbench.c \
 *      -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcublasLt -lcuda -ldl -lm \
 *      -o build/rawbench
 * Run: build/rawbench [--quick] [--plugin-path build/libgpurt_cuda.so]
 *
 * Timings: host costs are wall-clock medians over batches; GPU times are
 * CUDA events around each run, median after warm-up. GEMM inputs are random
 * (never zeros). Layout TN (op(A) = A^T, column-major), bf16 in/out, f32
 * accumulation, 32 MiB workspace, the heuristic's top algorithm. GEMM
 * device time is measured two ways, both for direct cuBLASLt and for the
 * plugin: "gemm_us" (events around one run, idle in between: the GPU
 * boosts) and "gemm_batched_us" (events around many back-to-back runs, as
 * `gpurt bench` does: sustained clocks).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlfcn.h>

#include <cublasLt.h>
#include <cuda.h>

#include "gpurt.h"

static int quick;

/* ---- the plugin through its C table -------------------------------------- */

static const gpurt_api *api;
static gpurt_runtime *prt;
static gpurt_stream *pst;
static char plugin_why[512] = "not loaded";

static int perr(gpurt_error *e, const char *what) {
  if (e == NULL) return 0;
  gpurt_error_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  api->error_get(e, &in);
  fprintf(stderr, "rawbench: plugin %s: %.*s\n", what, (int)in.message_len,
          in.message ? in.message : "");
  api->error_destroy(e);
  return 1;
}

static void plugin_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(plugin_why, sizeof plugin_why, "dlopen %s: %s", path, dlerror());
    return;
  }
  gpurt_negotiate_fn fn = (gpurt_negotiate_fn)dlsym(h, GPURT_ENTRY_SYMBOL);
  gpurt_negotiate_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  if (fn == NULL || fn(&a) != GPURT_OK || a.api == NULL) {
    snprintf(plugin_why, sizeof plugin_why, "negotiation with %s failed: %s", path,
             fn ? a.message : "no entry symbol");
    return;
  }
  api = a.api;
  gpurt_runtime_create_args ca;
  memset(&ca, 0, sizeof ca);
  ca.struct_size = sizeof ca;
  if (perr(api->runtime_create(&ca, &prt), "runtime_create") ||
      perr(api->stream_create(prt, 0, &pst), "stream_create")) {
    snprintf(plugin_why, sizeof plugin_why, "runtime or stream creation failed (see stderr)");
    api = NULL;
    return;
  }
  plugin_why[0] = 0;
}

static void emit_src(const char *metric, double value, const char *unit, const char *src,
                     const char *extra) {
  printf("{\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"source\":\"%s\"%s%s}\n",
         metric, value, unit, src, extra && *extra ? "," : "", extra ? extra : "");
  fflush(stdout);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A plugin call whose host cost is timed (the fields its kind reads). */
typedef struct timed_call {
  gpurt_kernel *k;
  const gpurt_launch_args *la;
  const gpurt_launch_item *items;
  uint64_t n_items;
  gpurt_gemm_plan *plan;
  const gpurt_gemm_run_args *r;
} timed_call;
static gpurt_error *call_launch(const timed_call *c) { return api->launch(prt, pst, c->k, c->la); }
static gpurt_error *call_launch_batch(const timed_call *c) {
  return api->launch_batch(prt, pst, c->n_items, c->items, NULL);
}
static gpurt_error *call_gemm_run(const timed_call *c) { return api->gemm_run(prt, pst, c->plan, c->r); }

/* The host cost of call(c) on pst: in each of n batches, per calls timed
 * (their errors dropped), then the stream synchronized outside the timing;
 * v[i] = batch i's microseconds / units. 0, or -1 when a synchronize fails. */
static int host_us(gpurt_error *(*call)(const timed_call *), const timed_call *c, int n, int per, double units,
                   double *v) {
  for (int bi = 0; bi < n; bi++) {
    double t0 = now_us();
    for (int i = 0; i < per; i++) {
      gpurt_error *e = call(c);
      if (e) api->error_destroy(e);
    }
    double t1 = now_us();
    if (perr(api->stream_synchronize(prt, pst), "stream_synchronize")) return -1;
    v[bi] = (t1 - t0) / units;
  }
  return 0;
}

static void emit(const char *metric, double value, const char *unit, const char *extra) {
  printf("{\"metric\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"source\":\"raw\"%s%s}\n", metric,
         value, unit, extra && *extra ? "," : "", extra ? extra : "");
  fflush(stdout);
}

#define CK(call)                                                            \
  do {                                                                      \
    CUresult r_ = (call);                                                   \
    if (r_ != CUDA_SUCCESS) {                                               \
      const char *n_ = "?";                                                 \
      cuGetErrorName(r_, &n_);                                              \
      fprintf(stderr, "rawbench: %s failed: %s (line %d)\n", #call, n_, __LINE__); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

#define LK(call)                                                            \
  do {                                                                      \
    cublasStatus_t s_ = (call);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                      \
      fprintf(stderr, "rawbench: %s failed: %s (line %d)\n", #call,         \
              cublasLtGetStatusName(s_), __LINE__);                         \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static const char *ptx =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry empty()\n{\n ret;\n}\n"
    ".visible .entry args3(.param .u64 p0, .param .f32 p1, .param .u64 p2)\n{\n ret;\n}\n";

static void bench_launch(CUstream s) {
  CUmodule mod;
  CK(cuModuleLoadData(&mod, ptx));
  CUfunction fe, f3;
  CK(cuModuleGetFunction(&fe, mod, "empty"));
  CK(cuModuleGetFunction(&f3, mod, "args3"));
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 4096));
  float a = 1.0f;
  unsigned long long n = 1024;
  void *args[3] = {&p, &a, &n};
  const int batches = quick ? 10 : 50, per = 1000;
  for (int which = 0; which < 2; which++) {
    CUfunction f = which ? f3 : fe;
    void **pa = which ? args : NULL;
    for (int i = 0; i < 1000; i++) CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, pa, NULL));
    CK(cuStreamSynchronize(s));
    double v[64];
    for (int b = 0; b < batches; b++) {
      double t0 = now_us();
      for (int i = 0; i < per; i++) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, pa, NULL);
      double t1 = now_us();
      CK(cuStreamSynchronize(s));
      v[b] = (t1 - t0) / per;
    }
    emit("launch_host_us", median(v, batches), "us",
         which ? "\"kernel\":\"args3(u64,f32,u64)\",\"grid\":1,\"block\":32"
               : "\"kernel\":\"empty\",\"grid\":1,\"block\":32");
  }
  CK(cuMemFree(p));
  CK(cuModuleUnload(mod));
}

/* Per-call cost of a tight loop of fn, in ns: the median of batches. */
#define TIME_NS(label_metric, src, note, body)                                 \
  do {                                                                         \
    const int nb_ = quick ? 10 : 30, per_ = 20000;                             \
    double v_[64];                                                             \
    for (int i_ = 0; i_ < per_; i_++) { body; }                                \
    for (int b_ = 0; b_ < nb_; b_++) {                                         \
      double t0_ = now_us();                                                   \
      for (int i_ = 0; i_ < per_; i_++) { body; }                              \
      v_[b_] = (now_us() - t0_) * 1e3 / per_;                                  \
    }                                                                          \
    emit_src(label_metric, median(v_, nb_), "ns/op", src, note);               \
  } while (0)

/* The dispatch floor: an idle stream's query, raw and through the plugin's
 * table from C; and what making a context current costs (the plugin does
 * cuCtxGetCurrent on every call, cuCtxSetCurrent only when it differs). */
static void bench_dispatch(CUstream s, CUcontext ctx) {
  CK(cuStreamSynchronize(s));
  TIME_NS("dispatch_ns", "raw", "\"note\":\"cuStreamQuery on an idle stream\"",
          (void)cuStreamQuery(s));
  CUcontext cur;
  TIME_NS("ctx_get_current_ns", "raw", "\"note\":\"cuCtxGetCurrent\"",
          (void)cuCtxGetCurrent(&cur));
  TIME_NS("ctx_set_current_ns", "raw", "\"note\":\"cuCtxSetCurrent of the current context\"",
          (void)cuCtxSetCurrent(ctx));
  if (api == NULL) return;
  CK(cuCtxSetCurrent(ctx));
  TIME_NS("dispatch_ns", "plugin_c",
          "\"note\":\"api->stream_query on an idle stream, called from C\"",
          do {
            gpurt_error *e_ = api->stream_query(prt, pst);
            if (e_) api->error_destroy(e_);
          } while (0));
}

/* The plugin's launch of its built-in fill_f32 on 1 element (what gpurt
 * bench's launch_us times through Go), beside raw args3 with the same
 * parameter shape (u64 pointer, f32, u64); then the same launch 64 at a
 * time through launch_batch. */
static void bench_plugin_launch(void) {
  if (api == NULL) return;
  gpurt_module_load_args ml;
  memset(&ml, 0, sizeof ml);
  ml.struct_size = sizeof ml;
  ml.format = GPURT_MODULE_BUILTIN;
  gpurt_module *m = NULL;
  gpurt_kernel *k = NULL;
  gpurt_buffer *b = NULL;
  if (perr(api->module_load(prt, &ml, &m), "module_load builtin") ||
      perr(api->kernel_get(prt, m, "fill_f32", 8, &k), "kernel_get fill_f32") ||
      perr(api->buffer_alloc(prt, 0, 4096, &b), "buffer_alloc"))
    return;
  float one = 1.0f;
  uint32_t bits;
  memcpy(&bits, &one, 4);
  gpurt_kernel_arg args[3];
  memset(args, 0, sizeof args);
  args[0].kind = GPURT_ARG_BUFFER;
  args[0].size = 8;
  args[0].buffer = b;
  args[1].kind = GPURT_ARG_F32;
  args[1].size = 4;
  args[1].value = bits;
  args[2].kind = GPURT_ARG_U64;
  args[2].size = 8;
  args[2].value = 1;
  gpurt_launch_args la;
  memset(&la, 0, sizeof la);
  la.struct_size = sizeof la;
  la.grid[0] = la.grid[1] = la.grid[2] = 1;
  la.block[0] = 32;
  la.block[1] = la.block[2] = 1;
  la.num_args = 3;
  la.args = args;
  for (int i = 0; i < 1000; i++)
    if (perr(api->launch(prt, pst, k, &la), "launch")) return;
  if (perr(api->stream_synchronize(prt, pst), "stream_synchronize")) return;
  const int batches = quick ? 10 : 50, per = 1000;
  double v[64];
  timed_call single = {.k = k, .la = &la};
  if (host_us(call_launch, &single, batches, per, per, v)) return;
  emit_src("launch_host_us", median(v, batches), "us", "plugin_c",
           "\"kernel\":\"fill_f32 (api->launch)\",\"grid\":1,\"block\":32");
  /* The same launch through launch_batch (1.2), 64 items per call: the
   * per-launch host cost when one call (one Go->C crossing) carries many. */
  if (GPURT_API_HAS(api, launch_batch)) {
    enum { BATCH = 64, CALLS = 16 }; /* 1024 launches per timed batch */
    gpurt_launch_item items[BATCH];
    for (int i = 0; i < BATCH; i++) {
      items[i].kernel = k;
      items[i].args = &la;
    }
    uint64_t done = 0;
    for (int i = 0; i < CALLS; i++)
      if (perr(api->launch_batch(prt, pst, BATCH, items, &done), "launch_batch")) return;
    if (perr(api->stream_synchronize(prt, pst), "stream_synchronize")) return;
    timed_call many = {.items = items, .n_items = BATCH};
    if (host_us(call_launch_batch, &many, batches, CALLS, CALLS * BATCH, v)) return;
    emit_src("launch_batch_host_us", median(v, batches), "us", "plugin_c",
             "\"kernel\":\"fill_f32 (api->launch_batch)\",\"grid\":1,\"block\":32,"
             "\"batch\":64,\"note\":\"per launch\"");
  } else {
    fprintf(stderr, "rawbench: the plugin has no launch_batch (ABI < 1.2)\n");
  }
  perr(api->buffer_free(prt, b), "buffer_free");
  perr(api->module_unload(prt, m), "module_unload");
}

static void bench_copies(CUstream s) {
  size_t sizes[2] = {256u << 20, 1u << 30};
  for (int si = 0; si < 2; si++) {
    size_t n = sizes[si];
    void *h;
    CK(cuMemHostAlloc(&h, n, CU_MEMHOSTALLOC_PORTABLE));
    memset(h, 0x5a, n);
    CUdeviceptr d, d2;
    CK(cuMemAlloc(&d, n));
    CK(cuMemAlloc(&d2, n));
    const int reps = quick ? 3 : 7;
    double up[16], down[16], dd[16];
    for (int r = 0; r < reps + 1; r++) {
      double t0 = now_us();
      CK(cuMemcpyHtoDAsync(d, h, n, s));
      CK(cuStreamSynchronize(s));
      double t1 = now_us();
      CK(cuMemcpyDtoHAsync(h, d, n, s));
      CK(cuStreamSynchronize(s));
      double t2 = now_us();
      CK(cuMemcpyDtoDAsync(d2, d, n, s));
      CK(cuStreamSynchronize(s));
      double t3 = now_us();
      if (r == 0) continue; /* warm-up */
      up[r - 1] = n / ((t1 - t0) * 1e3);
      down[r - 1] = n / ((t2 - t1) * 1e3);
      dd[r - 1] = n / ((t3 - t2) * 1e3);
    }
    char extra[64];
    snprintf(extra, sizeof extra, "\"bytes\":%zu", n);
    emit("copy_pinned_htod_gbps", median(up, reps), "GB/s", extra);
    emit("copy_pinned_dtoh_gbps", median(down, reps), "GB/s", extra);
    emit("copy_dtod_gbps", median(dd, reps), "GB/s", extra); /* bytes copied / s */
    { /* pageable, both sizes */
      char *pg = malloc(n);
      memset(pg, 0x33, n);
      for (int r = 0; r < reps + 1; r++) {
        double t0 = now_us();
        CK(cuMemcpyHtoD(d, pg, n));
        CK(cuCtxSynchronize());
        double t1 = now_us();
        CK(cuMemcpyDtoH(pg, d, n));
        double t2 = now_us();
        if (r == 0) continue;
        up[r - 1] = n / ((t1 - t0) * 1e3);
        down[r - 1] = n / ((t2 - t1) * 1e3);
      }
      emit("copy_pageable_htod_gbps", median(up, reps), "GB/s", extra);
      emit("copy_pageable_dtoh_gbps", median(down, reps), "GB/s", extra);
      free(pg);
    }
    CK(cuMemFree(d));
    CK(cuMemFree(d2));
    CK(cuMemFreeHost(h));
  }
}

static unsigned short bf16_bits(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Random bf16 in [-0.5, 0.5) (never zeros), the same for raw and plugin. */
static unsigned short *random_bf16(size_t elems, unsigned seed) {
  unsigned short *h = malloc(elems * 2);
  if (h == NULL) {
    fprintf(stderr, "rawbench: out of host memory (%zu bytes)\n", elems * 2);
    exit(1);
  }
  unsigned long long x = 0x9e3779b97f4a7c15ull ^ seed;
  for (size_t i = 0; i < elems; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    h[i] = bf16_bits(((float)((x >> 40) & 0xffff) / 32768.0f - 1.0f) * 0.5f);
  }
  return h;
}

/* Back-to-back runs per timed batch: about 100 ms (20 quick) of GPU work. */
static int batch_runs(double one_us) {
  double target = quick ? 20000 : 100000;
  int n = one_us > 0 ? (int)(target / one_us) : 1;
  return n < 1 ? 1 : n > 1000 ? 1000 : n;
}

typedef struct gemm_case {
  const char *name;
  int m, n, k;
} gemm_case;

/* The same GEMM through the plugin's table: plan once (bf16, TN, C NULL,
 * beta 0, alignment 256, as gpurt bench asks), then device time (single and
 * batched, plugin events) and, for 4096x1x4096, the host cost of gemm_run. */
static void plugin_gemm(gemm_case c, const unsigned short *hA, const unsigned short *hB,
                        const char *extra) {
  if (api == NULL) return;
  gpurt_buffer *A = NULL, *B = NULL, *D = NULL;
  gpurt_gemm_plan *plan = NULL;
  gpurt_event *e0 = NULL, *e1 = NULL;
  size_t na = (size_t)c.m * c.k * 2, nb = (size_t)c.k * c.n * 2, nd = (size_t)c.m * c.n * 2;
  gpurt_copy_args cp;
  memset(&cp, 0, sizeof cp);
  cp.struct_size = sizeof cp;
  cp.flags = GPURT_COPY_SYNC;
  gpurt_gemm_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.a_type = d.b_type = d.c_type = d.d_type = GPURT_DTYPE_BF16;
  d.compute_type = GPURT_COMPUTE_DEFAULT;
  d.trans_a = 1;
  d.m = c.m, d.n = c.n, d.k = c.k;
  d.lda = c.k, d.ldb = c.k, d.ldc = d.ldd = c.m;
  d.batch_count = 1;
  d.align_a = d.align_b = d.align_c = d.align_d = 256;
  if (perr(api->buffer_alloc(prt, 0, na, &A), "buffer_alloc A") ||
      perr(api->buffer_alloc(prt, 0, nb, &B), "buffer_alloc B") ||
      perr(api->buffer_alloc(prt, 0, nd, &D), "buffer_alloc D"))
    goto out;
  cp.dst_buffer = A, cp.src_ptr = hA, cp.size = na;
  if (perr(api->copy(prt, &cp), "copy A")) goto out;
  cp.dst_buffer = B, cp.src_ptr = hB, cp.size = nb;
  if (perr(api->copy(prt, &cp), "copy B")) goto out;
  double t0 = now_us();
  if (perr(api->gemm_plan_create(prt, 0, &d, &plan), "gemm_plan_create")) goto out;
  emit_src("gemm_plan_create_us", now_us() - t0, "us", "plugin_c", extra);
  if (perr(api->event_create(prt, 0, GPURT_EVENT_TIMING, &e0), "event_create") ||
      perr(api->event_create(prt, 0, GPURT_EVENT_TIMING, &e1), "event_create"))
    goto out;
  gpurt_gemm_run_args r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.a = A, r.b = B, r.d = D;
  r.alpha = 1;
  for (int i = 0; i < 10; i++)
    if (perr(api->gemm_run(prt, pst, plan, &r), "gemm_run")) goto out;
  if (perr(api->stream_synchronize(prt, pst), "stream_synchronize")) goto out;
  double flops = 2.0 * c.m * c.n * c.k;
  int reps = quick ? 10 : 50;
  double v[64], ms;
  for (int q = 0; q < reps; q++) {
    if (perr(api->event_record(prt, e0, pst), "event_record") ||
        perr(api->gemm_run(prt, pst, plan, &r), "gemm_run") ||
        perr(api->event_record(prt, e1, pst), "event_record") ||
        perr(api->event_synchronize(prt, e1), "event_synchronize") ||
        perr(api->event_elapsed(prt, e0, e1, &ms), "event_elapsed"))
      goto out;
    v[q] = ms * 1e3;
  }
  double us = median(v, reps);
  emit_src("gemm_us", us, "us", "plugin_c", extra);
  emit_src("gemm_tflops", flops / (us * 1e6), "TFLOP/s", "plugin_c", extra);
  int nbat = batch_runs(us), trials = quick ? 3 : 5;
  for (int t = 0; t < trials; t++) {
    if (perr(api->event_record(prt, e0, pst), "event_record")) goto out;
    for (int i = 0; i < nbat; i++)
      if (perr(api->gemm_run(prt, pst, plan, &r), "gemm_run")) goto out;
    if (perr(api->event_record(prt, e1, pst), "event_record") ||
        perr(api->event_synchronize(prt, e1), "event_synchronize") ||
        perr(api->event_elapsed(prt, e0, e1, &ms), "event_elapsed"))
      goto out;
    v[t] = ms * 1e3 / nbat;
  }
  double bus = median(v, trials);
  emit_src("gemm_batched_us", bus, "us", "plugin_c", extra);
  emit_src("gemm_batched_tflops", flops / (bus * 1e6), "TFLOP/s", "plugin_c", extra);
  if (c.n == 1 && c.m == 4096) {
    double hv[256];
    int nbh = quick ? 20 : 100, per = 20;
    timed_call run = {.plan = plan, .r = &r};
    if (host_us(call_gemm_run, &run, nbh, per, per, hv)) goto out;
    emit_src("gemm_host_us", median(hv, nbh), "us", "plugin_c", extra);
  }
out:
  if (pst) perr(api->stream_synchronize(prt, pst), "stream_synchronize");
  perr(api->event_destroy(prt, e0), "event_destroy");
  perr(api->event_destroy(prt, e1), "event_destroy");
  perr(api->gemm_plan_destroy(prt, plan), "gemm_plan_destroy");
  perr(api->buffer_free(prt, A), "buffer_free");
  perr(api->buffer_free(prt, B), "buffer_free");
  perr(api->buffer_free(prt, D), "buffer_free");
}

static void bench_gemm(CUstream s) {
  double t0 = now_us();
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  emit("cublaslt_create_ms", (now_us() - t0) / 1e3, "ms", NULL);
  const size_t wsz = 32u << 20;
  CUdeviceptr ws;
  CK(cuMemAlloc(&ws, wsz));
  gemm_case cases[] = {
      {"square", 8192, 8192, 8192},  {"decode", 14336, 1, 4096}, {"decode", 14336, 16, 4096},
      {"decode", 14336, 64, 4096},   {"decode", 4096, 1, 4096},  {"prefill", 14336, 2048, 4096},
  };
  CUevent e0, e1;
  CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    gemm_case c = cases[ci];
    if (quick && c.m == 8192) continue;
    CUdeviceptr A, B, D;
    CK(cuMemAlloc(&A, (size_t)c.m * c.k * 2));
    CK(cuMemAlloc(&B, (size_t)c.k * c.n * 2));
    CK(cuMemAlloc(&D, (size_t)c.m * c.n * 2));
    unsigned short *hA = random_bf16((size_t)c.m * c.k, 1), *hB = random_bf16((size_t)c.k * c.n, 2);
    CK(cuMemcpyHtoD(A, hA, (size_t)c.m * c.k * 2));
    CK(cuMemcpyHtoD(B, hB, (size_t)c.k * c.n * 2));
    cublasLtMatmulDesc_t op;
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t la, lb, ld;
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c.k, c.m, c.k));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c.k, c.n, c.k));
    LK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, c.m, c.n, c.m));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsz;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                            sizeof w));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    double h0 = now_us();
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found));
    double h1 = now_us();
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &found));
    double h2 = now_us();
    char extra[160];
    snprintf(extra, sizeof extra,
             "\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"dtype\":\"bf16\",\"layout\":\"TN\"",
             c.name, c.m, c.n, c.k);
    emit("gemm_heuristic_first_us", h1 - h0, "us", extra);
    emit("gemm_heuristic_repeat_us", h2 - h1, "us", extra);
    if (!found) {
      fprintf(stderr, "rawbench: no cuBLASLt algorithm for %d x %d x %d\n", c.m, c.n, c.k);
      free(hA);
      free(hB);
      continue;
    }
    {
      char ex2[400];
      snprintf(ex2, sizeof ex2,
               "%s,\"algo_workspace\":%zu,\"waves\":%.3g,\"algo_id\":%llu", extra,
               res.workspaceSize, res.wavesCount,
               (unsigned long long)((const uint64_t *)res.algo.data)[0]);
      emit("gemm_algo", (double)res.workspaceSize, "bytes", ex2);
    }
    float alpha = 1, beta = 0;
#define MM()                                                                                  \
  cublasLtMatmul(lt, op, &alpha, (void *)A, la, (void *)B, lb, &beta, (void *)D, ld, (void *)D, \
                 ld, &res.algo, (void *)ws, wsz, (cudaStream_t)s)
    for (int i = 0; i < 10; i++) LK(MM());
    CK(cuStreamSynchronize(s));
    int reps = quick ? 10 : 50;
    double v[64];
    for (int r = 0; r < reps; r++) {
      CK(cuEventRecord(e0, s));
      LK(MM());
      CK(cuEventRecord(e1, s));
      CK(cuEventSynchronize(e1));
      float ms;
      CK(cuEventElapsedTime(&ms, e0, e1));
      v[r] = ms * 1e3;
    }
    double us = median(v, reps);
    double flops = 2.0 * c.m * c.n * c.k;
    double bytes = 2.0 * ((double)c.m * c.k + (double)c.k * c.n + (double)c.m * c.n);
    emit("gemm_us", us, "us", extra);
    emit("gemm_tflops", flops / (us * 1e6), "TFLOP/s", extra);
    emit("gemm_tbps", bytes / (us * 1e6), "TB/s", extra);
    /* Back-to-back runs, as gpurt bench times them (sustained clocks). */
    int nbat = batch_runs(us), trials = quick ? 3 : 5;
    for (int r = 0; r < trials; r++) {
      CK(cuEventRecord(e0, s));
      for (int i = 0; i < nbat; i++) LK(MM());
      CK(cuEventRecord(e1, s));
      CK(cuEventSynchronize(e1));
      float ms;
      CK(cuEventElapsedTime(&ms, e0, e1));
      v[r] = ms * 1e3 / nbat;
    }
    double bus = median(v, trials);
    emit("gemm_batched_us", bus, "us", extra);
    emit("gemm_batched_tflops", flops / (bus * 1e6), "TFLOP/s", extra);
    /* Host cost of one call (batches of 20, then drain the queue). */
    if (c.n == 1 && c.m == 4096) {
      double hv[256];
      int nb = quick ? 20 : 100, per = 20;
      for (int b = 0; b < nb; b++) {
        double t0b = now_us();
        for (int i = 0; i < per; i++) MM();
        double t1b = now_us();
        CK(cuStreamSynchronize(s));
        hv[b] = (t1b - t0b) / per;
      }
      emit("gemm_host_us", median(hv, nb), "us", extra);
    }
#undef MM
    plugin_gemm(c, hA, hB, extra);
    free(hA);
    free(hB);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    CK(cuMemFree(A));
    CK(cuMemFree(B));
    CK(cuMemFree(D));
  }
  CK(cuMemFree(ws));
  cublasLtDestroy(lt);
}

int main(int argc, char **argv) {
  const char *plugin = "build/libgpurt_cuda.so";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: rawbench [--quick] [--plugin-path PLUGIN_FILE]\n");
      return 0;
    } else if (strcmp(argv[i], "--quick") == 0 || strcmp(argv[i], "-quick") == 0)
      quick = 1;
    else if ((strcmp(argv[i], "--plugin-path") == 0 || strcmp(argv[i], "-plugin-path") == 0) && i + 1 < argc)
      plugin = argv[++i];
    else if (strcmp(argv[i], "--plugin") == 0 || strcmp(argv[i], "-plugin") == 0) {
      fprintf(stderr, "rawbench: %s was renamed: use --plugin-path PLUGIN_FILE\n", argv[i]);
      return 2;
    } else {
      fprintf(stderr, "rawbench: unknown argument %s\nusage: rawbench [--quick] [--plugin-path PLUGIN_FILE]\n", argv[i]);
      return 2;
    }
  }
  double t0 = now_us();
  CK(cuInit(0));
  double t1 = now_us();
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuCtxSynchronize());
  double t2 = now_us();
  char name[256];
  cuDeviceGetName(name, sizeof name, dev);
  int ver = 0;
  cuDriverGetVersion(&ver);
  char extra[400];
  snprintf(extra, sizeof extra, "\"device\":\"%s\",\"driver\":%d", name, ver);
  emit("cuinit_ms", (t1 - t0) / 1e3, "ms", extra);
  emit("primary_ctx_create_ms", (t2 - t1) / 1e3, "ms", extra);
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  plugin_open(plugin);
  if (api == NULL) {
    char ex[700];
    snprintf(ex, sizeof ex, "\"why\":\"%s\"", plugin_why);
    emit_src("plugin_unavailable", 1, "flag", "plugin_c", ex);
  }
  CK(cuCtxSetCurrent(ctx));
  bench_dispatch(s, ctx);
  bench_plugin_launch();
  CK(cuCtxSetCurrent(ctx));
  bench_launch(s);
  bench_copies(s);
  CK(cuCtxSetCurrent(ctx));
  bench_gemm(s);
  if (api != NULL) {
    perr(api->stream_destroy(prt, pst), "stream_destroy");
    perr(api->runtime_destroy(prt), "runtime_destroy");
  }
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamDestroy(s));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
