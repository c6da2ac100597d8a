/* SPDX-License-Identifier: Apache-2.0 */
/*
 * graph_once.c — the engine's graphs for a backend whose executables replay
 * many times (gp_backend.graph_once, csrc/gp_engine_graph.c): recorded once
 * at graph_create and again at each graph_update, the kept executable
 * launched at every graph_launch after the items' checks (a destroyed
 * handle is refused before anything is launched), the preparing pass
 * (GP_QUEUE_PREPARE) before graph_capture, an update of launches patched
 * in place (graph_patch) where the backend kept their nodes and recorded
 * again where it did not, an update that fails changing nothing, a
 * recording or preparation the backend refuses leaking nothing.
 *
 * The backend here is a test double on host memory (one device, flat
 * addresses, everything synchronous): memset runs at once on a stream, is
 * counted on a preparing queue and appended to the recording on a
 * recording queue (after graph_capture only); its executable is the
 * recorded list, run at every graph_launch, so a replay's effect is seen
 * in the memory. Of modules and kernels it has the built-in fill_f32 (run
 * on host memory, or recorded with a node to patch); GEMM answers
 * UNSUPPORTED (unused). Built with csrc and run by
 * plugins/mock/backend_test.go; prints one line per check and last
 * "N passed, M failed".
 */
#include "gp_backend.h"
#include "gp_engine.h"
#include "testlib.h"

const char gp_plugin_prefix[] = "once";


/* ---- the test double ---------------------------------------------------------- */

/* A recorded op: a memset (n bytes of value8) or a fill_f32 launch (n
 * floats of valuef) of item `item`; node 0 for a launch recorded without a
 * node to patch. */
typedef struct rec_op {
  int fill;
  void *dst;
  uint64_t n;
  uint8_t value8;
  float valuef;
  uint64_t item;
  int node;
} rec_op;

typedef struct recording {
  rec_op ops[16];
  int n;
  int captured; /* graph_capture ran */
} recording;

static struct {
  int begins, ends, aborts, launches, live_execs, prepares, captures, patches, plans;
} cnt;

static gpurt_error *f_probe(gpurt_probe_args *a) {
  (void)a;
  return NULL;
}

static gpurt_error *f_open(const gpurt_runtime_create_args *a, void **ctx, uint32_t *ndev, gp_limits *lim) {
  (void)a;
  static int token;
  *ctx = &token;
  *ndev = 1;
  memset(lim, 0, sizeof *lim);
  lim->max_threads = 1024;
  lim->max_block_z = 64;
  lim->max_grid[0] = lim->max_grid[1] = lim->max_grid[2] = 65535;
  lim->max_shared = 48 << 10;
  return NULL;
}

static void f_close(void *ctx) { (void)ctx; }

static gpurt_error *f_device_info(void *ctx, uint32_t dev, gpurt_device_info *out) {
  (void)ctx;
  (void)dev;
  snprintf(out->name, sizeof out->name, "graph_once test device");
  return NULL;
}

static gpurt_error *f_mem_alloc(void *ctx, uint32_t dev, uint64_t size, gp_mem *out) {
  (void)ctx;
  void *p = calloc(1, (size_t)size);
  if (!p) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "no memory");
  out->obj = p;
  out->addr = (uint64_t)(uintptr_t)p;
  out->size = size;
  out->dev = dev;
  return NULL;
}

static gpurt_error *f_mem_free(void *ctx, gp_mem *m) {
  (void)ctx;
  free(m->obj);
  return NULL;
}

static gpurt_error *f_host_alloc(void *ctx, uint64_t size, gp_mem *out, void **host_ptr) {
  gpurt_error *e = f_mem_alloc(ctx, 0, size, out);
  if (!e) *host_ptr = out->obj, out->pinned = 1;
  return e;
}

static void f_host_free(void *ctx, gp_mem *m) { gp_error_destroy(f_mem_free(ctx, m)); }

static gpurt_error *f_copy(void *ctx, gp_queue *q, const gp_copy *c) {
  (void)ctx;
  if (q && q->capturing) return gp_err(GPURT_ERR_UNSUPPORTED, "copies are not recorded by this test double");
  memcpy((void *)(uintptr_t)c->dst.addr, (const void *)(uintptr_t)c->src.addr, (size_t)c->size);
  return NULL;
}

static gpurt_error *f_memset(void *ctx, gp_queue *q, const gp_mem *dst, uint64_t size, uint32_t value,
                             uint32_t element_size) {
  (void)ctx;
  if (element_size != 1) return gp_err(GPURT_ERR_UNSUPPORTED, "only 1-byte patterns in this test double");
  if (q && q->capturing == GP_QUEUE_PREPARE) {
    if (value == 0xEF) return gp_err(GPURT_ERR_UNSUPPORTED, "value 0xEF is refused while preparing");
    if (((recording *)q->q)->captured) return gp_err(GPURT_ERR_INTERNAL, "prepared after graph_capture");
    cnt.prepares++;
    return NULL;
  }
  if (q && q->capturing) {
    recording *r = q->q;
    if (!r->captured) return gp_err(GPURT_ERR_INTERNAL, "recorded before graph_capture");
    if (value == 0xEE) return gp_err(GPURT_ERR_UNSUPPORTED, "value 0xEE is refused while recording");
    if (r->n == 16) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "the recording is full");
    r->ops[r->n++] = (rec_op){0, (void *)(uintptr_t)dst->addr, size, (uint8_t)value, 0, q->item, 0};
    return NULL;
  }
  memset((void *)(uintptr_t)dst->addr, (int)value, (size_t)size);
  return NULL;
}

static gpurt_error *f_queue_create(void *ctx, uint32_t dev, gp_queue *out) {
  (void)ctx;
  out->q = NULL;
  out->dev = dev;
  return NULL;
}
static void f_queue_destroy(void *ctx, gp_queue *q) { (void)ctx, (void)q; }
static gpurt_error *f_queue_sync(void *ctx, gp_queue *q) { return (void)ctx, (void)q, NULL; }
static gpurt_error *f_queue_query(void *ctx, gp_queue *q, uint64_t *pending) {
  (void)ctx, (void)q;
  *pending = 0;
  return NULL;
}

static int ev_token;
static gpurt_error *f_event_create(void *ctx, uint32_t dev, uint32_t flags, void **ev) {
  (void)ctx, (void)dev, (void)flags;
  *ev = &ev_token;
  return NULL;
}
static void f_event_destroy(void *ctx, void *ev) { (void)ctx, (void)ev; }
static gpurt_error *f_event_record(void *ctx, void *ev, gp_queue *q) { return (void)ctx, (void)ev, (void)q, NULL; }
static gpurt_error *f_event_wait(void *ctx, gp_queue *q, void *ev) { return (void)ctx, (void)ev, (void)q, NULL; }
static gpurt_error *f_event_query(void *ctx, void *ev, int *done) {
  (void)ctx, (void)ev;
  *done = 1;
  return NULL;
}
static gpurt_error *f_event_sync(void *ctx, void *ev) { return (void)ctx, (void)ev, NULL; }
static gpurt_error *f_event_elapsed(void *ctx, void *start, void *end, double *ms, int *which) {
  (void)ctx, (void)start, (void)end, (void)which;
  *ms = 0;
  return NULL;
}

/* The built-in module only, and of it fill_f32 only. */
static int mod_token;
static gpurt_error *f_module_load(void *ctx, uint32_t dev, const gpurt_module_load_args *a, void **mod) {
  (void)ctx, (void)dev;
  if (a->format != GPURT_MODULE_BUILTIN) return gp_err(GPURT_ERR_UNSUPPORTED, "only the built-in module here");
  *mod = &mod_token;
  return NULL;
}
static void f_module_unload(void *ctx, void *mod) { (void)ctx, (void)mod; }
static gpurt_error *f_kernel_get(void *ctx, void *mod, const char *name, uint64_t len, void **kernel,
                                 gpurt_kernel_info *info) {
  (void)ctx, (void)mod;
  const gp_builtin_kernel *k = gp_builtin_find(name, (size_t)len);
  if (k == NULL || len != 8 || memcmp(name, "fill_f32", 8) != 0)
    return gp_err(GPURT_ERR_NOT_FOUND, "only fill_f32 in this test double");
  info->num_params = k->num_params;
  info->max_threads_per_block = 1024;
  for (uint32_t p = 0; p < k->num_params; p++) {
    info->param_kind[p] = k->kinds[p];
    info->param_size[p] = k->sizes[p];
  }
  *kernel = (void *)k;
  return NULL;
}
static float f32_of(uint64_t bits) {
  uint32_t b = (uint32_t)bits;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}
static void fill_run(const rec_op *op) {
  for (uint64_t i = 0; i < op->n; i++) ((float *)op->dst)[i] = op->valuef;
}
/* fill_f32(buffer, f32, u64): run, or recorded with a node for its item
 * (but a value of 3.0, recorded without one: an item the backend cannot
 * patch). */
static gpurt_error *f_launch(void *ctx, gp_queue *q, const gp_launch_op *l) {
  (void)ctx;
  rec_op op = {1, (void *)(uintptr_t)l->bufs[0].addr, l->scalar[2], 0, f32_of(l->scalar[1]), q->item, 0};
  if (q->capturing == GP_QUEUE_PREPARE) return NULL;
  if (q->capturing) {
    recording *r = q->q;
    if (r->n == 16) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "the recording is full");
    op.node = op.valuef != 3.0f;
    r->ops[r->n++] = op;
    return NULL;
  }
  fill_run(&op);
  return NULL;
}
static gpurt_error *f_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r) {
  (void)ctx, (void)q, (void)r;
  return gp_err(GPURT_ERR_UNSUPPORTED, "no GEMM in this test double");
}

static gpurt_error *f_graph_begin(void *ctx, uint32_t dev, gp_queue *rec) {
  (void)ctx, (void)dev;
  recording *r = calloc(1, sizeof *r);
  if (!r) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "no memory for the recording");
  rec->q = r;
  cnt.begins++;
  return NULL;
}

/* 1: graph_end updates the executable it replaces in place when the
 * recording has as many ops. */
static int inplace;

static gpurt_error *f_graph_capture(void *ctx, gp_queue *rec) {
  (void)ctx;
  ((recording *)rec->q)->captured = 1;
  cnt.captures++;
  return NULL;
}

static gpurt_error *f_graph_end(void *ctx, gp_queue *rec, int abort, void **exec) {
  (void)ctx;
  cnt.ends++;
  if (abort) {
    cnt.aborts++;
    free(rec->q);
    return NULL;
  }
  recording *r = rec->q, *old = *exec;
  if (inplace && old != NULL && old->n == r->n) { /* as cuGraphExecUpdate of the same topology */
    memcpy(old->ops, r->ops, sizeof r->ops);
    free(r);
    return NULL;
  }
  cnt.live_execs++;
  *exec = r;
  return NULL;
}

static gpurt_error *f_graph_launch(void *ctx, void *exec, gp_queue *q) {
  (void)ctx, (void)q;
  const recording *r = exec;
  for (int i = 0; i < r->n; i++)
    if (r->ops[i].fill) fill_run(&r->ops[i]);
    else memset(r->ops[i].dst, r->ops[i].value8, (size_t)r->ops[i].n);
  cnt.launches++;
  return NULL;
}

static rec_op *node_of(void *exec, uint64_t item) {
  recording *r = exec;
  for (int i = 0; i < r->n; i++)
    if (r->ops[i].fill && r->ops[i].node && r->ops[i].item == item) return &r->ops[i];
  return NULL;
}

static int f_graph_patchable(void *ctx, void *exec, uint64_t item) {
  (void)ctx;
  return node_of(exec, item) != NULL;
}

/* A value of 7.0 is refused (as a driver's refusal of a patch). */
static gpurt_error *f_graph_patch(void *ctx, void *exec, uint64_t item, const gp_launch_op *l) {
  (void)ctx;
  rec_op *op = node_of(exec, item);
  float v = f32_of(l->scalar[1]);
  if (v == 7.0f) return gp_err(GPURT_ERR_LAUNCH_FAILED, "value 7 is refused by graph_patch");
  op->dst = (void *)(uintptr_t)l->bufs[0].addr;
  op->n = l->scalar[2];
  op->valuef = v;
  cnt.patches++;
  return NULL;
}

static void f_graph_destroy(void *ctx, void *exec) {
  (void)ctx;
  cnt.live_execs--;
  free(exec);
}

/* Attention (1.5): an object is a token; a plan is counted; a run writes
 * 16 bytes of 0xA5 at o (recorded as that memset), so a replay is seen in
 * the memory. The other runs of 1.4 and 1.5 answer UNSUPPORTED (unused). */
static gpurt_error *f_attention_create(void *ctx, uint32_t dev, const gpurt_attention_desc *d, void **obj) {
  (void)ctx, (void)dev, (void)d;
  *obj = calloc(1, 1);
  return *obj ? NULL : gp_err(GPURT_ERR_OUT_OF_MEMORY, "no memory");
}

static void f_attention_destroy(void *ctx, void *obj) {
  (void)ctx;
  free(obj);
}

static gpurt_error *f_attention_plan(void *ctx, gp_queue *q, void *obj, const gpurt_attention_plan_args *a,
                                     const gp_attention_sched *sched) {
  (void)ctx, (void)q, (void)obj, (void)a, (void)sched;
  cnt.plans++;
  return NULL;
}

static gpurt_error *f_attention_run(void *ctx, gp_queue *q, const gp_attention_op *r) {
  (void)ctx;
  if (q && q->capturing == GP_QUEUE_PREPARE) return NULL;
  if (q && q->capturing) {
    recording *rec = q->q;
    if (rec->n == 16) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "the recording is full");
    rec->ops[rec->n++] = (rec_op){0, (void *)(uintptr_t)r->o.addr, 16, 0xA5, 0, q->item, 0};
    return NULL;
  }
  memset((void *)(uintptr_t)r->o.addr, 0xA5, 16);
  return NULL;
}

static gpurt_error *f_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r) {
  (void)ctx, (void)q, (void)r;
  return gp_err(GPURT_ERR_UNSUPPORTED, "quant_matmul is not in this test double");
}

static gpurt_error *f_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r) {
  (void)ctx, (void)q, (void)r;
  return gp_err(GPURT_ERR_UNSUPPORTED, "grouped_gemm is not in this test double");
}

static gpurt_error *f_kv_append(void *ctx, gp_queue *q, const gp_kv_append_op *r) {
  (void)ctx, (void)q, (void)r;
  return gp_err(GPURT_ERR_UNSUPPORTED, "kv_append is not in this test double");
}

static const gp_backend once_backend = {
    .name = "once",
    .version = "1.5.0",
    .abi_minor = 5,
    .priority = 1,
    .graph_once = 1,
    .probe = f_probe,
    .open = f_open,
    .close = f_close,
    .device_info = f_device_info,
    .mem_alloc = f_mem_alloc,
    .mem_free = f_mem_free,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .copy = f_copy,
    .memset = f_memset,
    .queue_create = f_queue_create,
    .queue_destroy = f_queue_destroy,
    .queue_sync = f_queue_sync,
    .queue_query = f_queue_query,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_wait = f_event_wait,
    .event_query = f_event_query,
    .event_sync = f_event_sync,
    .event_elapsed = f_event_elapsed,
    .module_load = f_module_load,
    .module_unload = f_module_unload,
    .kernel_get = f_kernel_get,
    .launch = f_launch,
    .gemm_run = f_gemm_run,
    .graph_begin = f_graph_begin,
    .graph_end = f_graph_end,
    .graph_capture = f_graph_capture,
    .graph_patchable = f_graph_patchable,
    .graph_patch = f_graph_patch,
    .graph_launch = f_graph_launch,
    .graph_destroy = f_graph_destroy,
    .quant_matmul = f_quant_matmul,
    .grouped_gemm = f_grouped_gemm,
    .kv_append = f_kv_append,
    .attention_run = f_attention_run,
    .attention_create = f_attention_create,
    .attention_destroy = f_attention_destroy,
    .attention_plan = f_attention_plan,
};

/* ---- the test ----------------------------------------------------------------- */

/* 16 bytes of b at off set to value. */
static gpurt_memset_args ms(gpurt_buffer *b, uint64_t off, uint32_t value) { return memset_args(b, off, 16, value, 1); }

static gpurt_graph_item memset_item(const gpurt_memset_args *m) {
  gpurt_graph_item it;
  ARGS_INIT(it);
  it.kind = GPURT_GRAPH_OP_MEMSET;
  it.memset = m;
  return it;
}

/* The first n (at most 32) bytes of b are want's, bit for bit; the first
 * difference is said as a byte, or as a float when floats is set. */
static int reads_back(gpurt_runtime *rt, gpurt_buffer *b, const void *want, size_t n, int floats) {
  unsigned char got[32];
  char m[300];
  if (*take_msg(download_on(rt, NULL, got, b, n), m, sizeof m)) {
    printf("     read back: %s\n", m);
    return 0;
  }
  const unsigned char *w = want;
  for (size_t i = 0; i < n; i += floats ? 4 : 1) {
    if (memcmp(got + i, w + i, floats ? 4 : 1) == 0) continue;
    if (floats) {
      float g, x;
      memcpy(&g, got + i, 4);
      memcpy(&x, w + i, 4);
      printf("     float %d is %g, want %g\n", (int)(i / 4), (double)g, (double)x);
    } else {
      printf("     byte %d is %#x, want %#x\n", (int)i, got[i], w[i]);
    }
    return 0;
  }
  return 1;
}

/* b holds lo in bytes 0..15 and hi in 16..31. */
static int holds(gpurt_runtime *rt, gpurt_buffer *b, uint8_t lo, uint8_t hi) {
  uint8_t want[32];
  memset(want, lo, 16);
  memset(want + 16, hi, 16);
  return reads_back(rt, b, want, sizeof want, 0);
}

/* The first 8 floats of b all equal want. */
static int floats_are(gpurt_runtime *rt, gpurt_buffer *b, float want) {
  float w[8] = {want, want, want, want, want, want, want, want};
  return reads_back(rt, b, w, sizeof w, 1);
}

/* Updates of launch items: patched in place when the backend kept their
 * nodes, recorded again otherwise; a refused patch applies nothing. */
static void patch_checks(gpurt_runtime *rt, gpurt_stream *s) {
  char m[600];
  gpurt_buffer *c = NULL;
  gpurt_module *mod = NULL;
  gpurt_kernel *fill = NULL;
  gpurt_error *e = api->buffer_alloc(rt, 0, 64, &c);
  if (!e) e = load_builtin(rt, &mod);
  if (!e) e = api->kernel_get(rt, mod, "fill_f32", 8, &fill);
  result_msg(e == NULL, "patch: buffer, module, fill_f32", take_msg(e, m, sizeof m));
  if (e) return;
  gpurt_kernel_arg fa[3] = {arg_buf(c, 0, 32), arg_f32(1.5f), arg_u64(8)};
  gpurt_launch_args la = launch_args(1, 64, fa, 3);
  gpurt_memset_args zm = ms(c, 32, 0);
  gpurt_graph_item items[2] = {memset_item(&zm), memset_item(&zm)};
  items[1].kind = GPURT_GRAPH_OP_LAUNCH;
  items[1].memset = NULL;
  items[1].kernel = fill;
  items[1].launch = &la;
  gpurt_graph_create_args ga = graph_args(items, 2);
  gpurt_graph *g = NULL;
  int begins = cnt.begins;
  e = api->graph_create(rt, &ga, &g);
  if (!e) e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && floats_are(rt, c, 1.5f), "patch: a graph with a launch replays it", take_msg(e, m, sizeof m));

  /* A new value: patched, not recorded again. */
  fa[1].value = f32_bits(2.5f);
  uint64_t idx = 1;
  gpurt_graph_item upd = items[1];
  gpurt_graph_update_args ua = update_args(&idx, &upd);
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_PATCHED && cnt.patches == 1 && cnt.begins == begins + 1,
         "patch: a launch update is patched in place", take_msg(e, m, sizeof m));
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && floats_are(rt, c, 2.5f), "patch: the replay runs the patched launch", take_msg(e, m, sizeof m));

  /* A patch the backend refuses applies nothing. */
  fa[1].value = f32_bits(7.0f);
  const char *msg = take_msg(api->graph_update(rt, g, &ua), m, sizeof m);
  result_msg(strstr(msg, "graph_update: item 1: value 7 is refused") != NULL, "patch: a refused patch names the item",
         msg);
  /* Another item's update records again, from the items as they stand:
   * the refused value is not among them. */
  gpurt_memset_args zm2 = ms(c, 48, 0);
  upd = memset_item(&zm2);
  idx = 0;
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_REINSTANTIATED && cnt.begins == begins + 2,
         "patch: a memset update records again", take_msg(e, m, sizeof m));
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && floats_are(rt, c, 2.5f), "patch: the refused patch left the item as it was",
         take_msg(e, m, sizeof m));

  /* A launch the backend kept no node for is recorded again: 3.0 patched
   * in, then recorded (by a memset's update) without a node. */
  fa[1].value = f32_bits(3.0f);
  upd = items[1];
  idx = 1;
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_PATCHED, "patch: 3.0 patched in", take_msg(e, m, sizeof m));
  upd = memset_item(&zm);
  idx = 0;
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_REINSTANTIATED, "patch: recorded again with 3.0",
         take_msg(e, m, sizeof m));
  int patches = cnt.patches;
  upd = items[1];
  idx = 1;
  fa[1].value = f32_bits(4.0f);
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_REINSTANTIATED && cnt.patches == patches,
         "patch: an item recorded without a node is recorded again", take_msg(e, m, sizeof m));
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && floats_are(rt, c, 4.0f), "patch: the replay runs the re-recorded launch", take_msg(e, m, sizeof m));

  /* graph_end may update the executable it replaces in place. */
  inplace = 1;
  gpurt_memset_args zm3 = ms(c, 48, 0);
  upd = memset_item(&zm3);
  idx = 0;
  int live = cnt.live_execs;
  e = api->graph_update(rt, g, &ua);
  inplace = 0;
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_EXEC_UPDATE && cnt.live_execs == live,
         "patch: an executable updated in place is kept", take_msg(e, m, sizeof m));
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && floats_are(rt, c, 4.0f), "patch: the replay runs the updated executable",
         take_msg(e, m, sizeof m));
  e = api->graph_destroy(rt, g);
  if (!e) e = api->module_unload(rt, mod);
  if (!e) e = api->buffer_free(rt, c);
  result_msg(e == NULL, "patch: teardown", take_msg(e, m, sizeof m));
}

/* Attention items of a kept graph: checked at a launch only when their
 * object was planned anew with another batch, row count or page count
 * (its gen moved) or the replay is on another stream; a plan that no
 * longer fits the recorded views is still refused, nothing launched. */
static void attention_checks(gpurt_runtime *rt, gpurt_stream *s) {
  char m[400];
  const uint64_t D = 64, ps = 16, npages = 8, page = ps * D * 2, rows = 2 * D * 2;
  const int32_t fits[3] = {0, 2, 5}, grown[3] = {0, 3, 6}, last[2] = {4, 1}, idx[5] = {3, 0, 7, 1, 5};
  gpurt_buffer *k = NULL, *v = NULL, *q = NULL, *o = NULL, *ip = NULL, *ix = NULL, *lp = NULL;
  gpurt_stream *s2 = NULL;
  gpurt_attention *at = NULL;
  gpurt_graph *g = NULL;
  gpurt_error *e = api->buffer_alloc(rt, 0, npages * page, &k);
  if (!e) e = api->buffer_alloc(rt, 0, npages * page, &v);
  if (!e) e = api->buffer_alloc(rt, 0, rows, &q);
  if (!e) e = api->buffer_alloc(rt, 0, rows, &o);
  if (!e) e = api->buffer_alloc(rt, 0, sizeof fits, &ip);
  if (!e) e = api->buffer_alloc(rt, 0, sizeof idx, &ix); /* 5 page indices: a plan of 6 pages does not fit */
  if (!e) e = api->buffer_alloc(rt, 0, sizeof last, &lp);
  if (!e) e = upload_on(rt, NULL, ip, fits, sizeof fits);
  if (!e) e = upload_on(rt, NULL, ix, idx, sizeof idx);
  if (!e) e = upload_on(rt, NULL, lp, last, sizeof last);
  if (!e) e = api->stream_create(rt, 0, &s2);
  gpurt_attention_desc d;
  ARGS_INIT(d);
  d.kind = GPURT_ATTENTION_DECODE;
  d.num_qo_heads = 1;
  d.layout = (gpurt_kv_layout){GPURT_DTYPE_F16, GPURT_KV_LAYOUT_NHD, ps, 1, D, 0};
  d.max_batch_size = 2;
  if (!e) e = api->attention_create(rt, 0, &d, &at);
  gpurt_attention_plan_args pa;
  ARGS_INIT(pa);
  pa.batch_size = 2;
  pa.kv_indptr = fits;
  pa.kv_last_page_len = last;
  if (!e) e = api->attention_plan(rt, s, at, &pa);
  gpurt_attention_run_args ra;
  ARGS_INIT(ra);
  ra.q = q;
  ra.o = o;
  ra.pages = (gpurt_kv_pages){.k = k, .v = v, .num_pages = npages, .indptr = ip, .indices = ix, .last_page_len = lp};
  gpurt_graph_item it = call_item(offsetof(gpurt_api, attention_run), at, &ra);
  gpurt_graph_create_args ga = graph_args(&it, 1);
  if (!e) e = api->graph_create(rt, &ga, &g);
  result_msg(e == NULL, "attention: a graph of one attention_run", take_msg(e, m, sizeof m));
  if (e) goto out;
  uint8_t a5[16];
  memset(a5, 0xA5, sizeof a5);
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && reads_back(rt, o, a5, 16, 0), "attention: the first launch checks and replays",
             take_msg(e, m, sizeof m));
  int launches = cnt.launches;
  e = api->attention_plan(rt, s, at, &pa);
  if (!e) e = api->graph_launch(rt, g, s);
  if (!e) e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && cnt.launches == launches + 2, "attention: replays after a plan of the same shape",
             take_msg(e, m, sizeof m));
  pa.kv_indptr = grown;
  e = api->attention_plan(rt, s, at, &pa);
  result_msg(e == NULL, "attention: a plan of 6 pages", take_msg(e, m, sizeof m));
  launches = cnt.launches;
  const char *msg = take_msg(api->graph_launch(rt, g, s), m, sizeof m);
  result_msg(strstr(msg, "graph_launch: item 0") != NULL && strstr(msg, "indices") != NULL &&
             cnt.launches == launches, "attention: a plan the recorded page indices cannot hold is refused, "
             "nothing launched", msg);
  pa.kv_indptr = fits;
  e = api->attention_plan(rt, s, at, &pa);
  if (!e) e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && cnt.launches == launches + 1, "attention: a plan that fits again replays",
             take_msg(e, m, sizeof m));
  msg = take_msg(api->graph_launch(rt, g, s2), m, sizeof m);
  result_msg(strstr(msg, "graph_launch: item 0") != NULL && strstr(msg, "stream") != NULL &&
             cnt.launches == launches + 1, "attention: a replay on another stream than the plan's is refused", msg);
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && cnt.launches == launches + 2, "attention: and on the plan's stream it replays",
             take_msg(e, m, sizeof m));
out:
  if (g) take_msg(api->graph_destroy(rt, g), m, sizeof m);
  if (at) take_msg(api->attention_destroy(rt, at), m, sizeof m);
  if (s2) take_msg(api->stream_destroy(rt, s2), m, sizeof m);
  gpurt_buffer *bs[] = {k, v, q, o, ip, ix, lp};
  for (size_t i = 0; i < 7; i++)
    if (bs[i]) take_msg(api->buffer_free(rt, bs[i]), m, sizeof m);
}

int main(void) {
  char m[600];
  gpurt_negotiate_args na;
  ARGS_INIT(na);
  na.host_abi_major = GPURT_ABI_MAJOR;
  na.host_abi_minor = GPURT_ABI_MINOR;
  int32_t rc = gp_engine_negotiate(&na, &once_backend);
  result_msg(rc == GPURT_OK && na.api != NULL, "negotiate with a graph_once backend", na.message);
  if (rc != GPURT_OK || na.api == NULL) return 1;
  api = na.api;

  gpurt_runtime *rt = NULL;
  gpurt_buffer *a = NULL, *other = NULL;
  gpurt_stream *s = NULL;
  gpurt_error *e = api->runtime_create(NULL, &rt);
  if (!e) e = api->buffer_alloc(rt, 0, 64, &a);
  if (!e) e = api->buffer_alloc(rt, 0, 64, &other);
  if (!e) e = api->stream_create(rt, 0, &s);
  result_msg(e == NULL, "runtime, buffers and stream", take_msg(e, m, sizeof m));
  if (rt == NULL || a == NULL || other == NULL || s == NULL) return 1;

  /* graph_create records once. */
  gpurt_memset_args m0 = ms(a, 0, 0x11), m1 = ms(a, 16, 0x22);
  gpurt_graph_item items[2] = {memset_item(&m0), memset_item(&m1)};
  gpurt_graph_create_args ga = graph_args(items, 2);
  gpurt_graph *g = NULL;
  e = api->graph_create(rt, &ga, &g);
  result_msg(e == NULL && g != NULL, "graph_create", take_msg(e, m, sizeof m));
  result_msg(cnt.begins == 1 && cnt.ends == 1 && cnt.live_execs == 1, "graph_create records once", NULL);
  result_msg(cnt.prepares == 2 && cnt.captures == 1, "graph_create prepares each item once, then captures", NULL);
  result_msg(holds(rt, a, 0, 0), "recording runs nothing", NULL);

  /* Three launches: one recording, three replays of it. */
  int ok = 1;
  for (int i = 0; i < 3 && ok; i++) {
    gpurt_memset_args z = ms(a, 0, 0);
    z.size = 32;
    ok = !*take_msg(api->memset(rt, &z), m, sizeof m) && !*take_msg(api->graph_launch(rt, g, s), m, sizeof m) &&
         holds(rt, a, 0x11, 0x22);
  }
  result_msg(ok, "each graph_launch replays the kept executable", m);
  result_msg(cnt.begins == 1 && cnt.launches == 3 && cnt.prepares == 2, "graph_launch records nothing", NULL);

  /* An update records again; the old executable goes. */
  gpurt_memset_args m1b = ms(a, 16, 0x33);
  gpurt_graph_item upd = memset_item(&m1b);
  uint64_t idx = 1;
  gpurt_graph_update_args ua = update_args(&idx, &upd);
  e = api->graph_update(rt, g, &ua);
  result_msg(e == NULL && ua.applied == GPURT_GRAPH_UPDATE_REINSTANTIATED, "graph_update re-records",
         take_msg(e, m, sizeof m));
  result_msg(cnt.begins == 2 && cnt.live_execs == 1, "graph_update: one recording, the old executable destroyed",
         NULL);
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && holds(rt, a, 0x11, 0x33), "the replay after an update runs the new item", take_msg(e, m, sizeof m));

  /* An update the checks refuse changes nothing. */
  gpurt_memset_args bad = ms(a, 64, 0x44); /* past the end */
  upd = memset_item(&bad);
  int begins = cnt.begins;
  const char *msg = take_msg(api->graph_update(rt, g, &ua), m, sizeof m);
  result_msg(strstr(msg, "graph_update: item 1") != NULL, "an out-of-range update is refused naming the item", msg);
  result_msg(cnt.begins == begins && cnt.live_execs == 1, "a refused update records nothing", NULL);

  /* An update the backend refuses while recording changes nothing. */
  gpurt_memset_args refused = ms(a, 16, 0xEE);
  upd = memset_item(&refused);
  msg = take_msg(api->graph_update(rt, g, &ua), m, sizeof m);
  result_msg(strstr(msg, "graph_update: item 1") != NULL && strstr(msg, "0xEE") != NULL,
         "a recording the backend refuses fails naming the item", msg);
  result_msg(cnt.begins == begins + 1 && cnt.aborts == 1 && cnt.live_execs == 1, "the refused recording was aborted",
         NULL);
  gpurt_memset_args z = ms(a, 0, 0);
  z.size = 32;
  take_msg(api->memset(rt, &z), m, sizeof m);
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && holds(rt, a, 0x11, 0x33), "the graph still replays its last good recording",
         take_msg(e, m, sizeof m));

  /* An update the backend refuses while preparing changes nothing either. */
  gpurt_memset_args unprepared = ms(a, 16, 0xEF);
  upd = memset_item(&unprepared);
  int captures = cnt.captures;
  msg = take_msg(api->graph_update(rt, g, &ua), m, sizeof m);
  result_msg(strstr(msg, "graph_update: item 1") != NULL && strstr(msg, "0xEF") != NULL,
         "a preparation the backend refuses fails naming the item", msg);
  result_msg(cnt.captures == captures && cnt.aborts == 2 && cnt.live_execs == 1,
         "the refused preparation captured nothing and was aborted", NULL);
  e = api->graph_launch(rt, g, s);
  result_msg(e == NULL && holds(rt, a, 0x11, 0x33), "the graph still replays after a refused preparation",
         take_msg(e, m, sizeof m));

  /* A destroy elsewhere makes the next launch check every item: still fine. */
  e = api->buffer_free(rt, other);
  if (!e) e = api->graph_launch(rt, g, s);
  result_msg(e == NULL, "a launch after an unrelated destroy passes its full check", take_msg(e, m, sizeof m));

  /* The graph's buffer destroyed: the launch is refused, nothing launched. */
  int launches = cnt.launches;
  e = api->buffer_free(rt, a);
  result_msg(e == NULL, "buffer_free", take_msg(e, m, sizeof m));
  msg = take_msg(api->graph_launch(rt, g, s), m, sizeof m);
  result_msg(strstr(msg, "graph_launch: item 0") != NULL, "a launch after its buffer was freed is refused", msg);
  result_msg(cnt.launches == launches, "the refused launch launched nothing", NULL);

  e = api->graph_destroy(rt, g);
  result_msg(e == NULL && cnt.live_execs == 0, "graph_destroy frees the executable", take_msg(e, m, sizeof m));

  patch_checks(rt, s);
  attention_checks(rt, s);

  /* A recording the backend refuses at graph_create leaks nothing. */
  gpurt_buffer *b = NULL;
  e = api->buffer_alloc(rt, 0, 64, &b);
  gpurt_memset_args r0 = ms(b, 0, 0xEE);
  items[0] = memset_item(&r0);
  ga.count = 1;
  g = NULL;
  msg = take_msg(e ? e : api->graph_create(rt, &ga, &g), m, sizeof m);
  result_msg(g == NULL && strstr(msg, "graph_create: item 0") != NULL && cnt.live_execs == 0,
         "graph_create with a refused recording fails naming the item", msg);

  take_msg(api->stream_destroy(rt, s), m, sizeof m);
  take_msg(api->buffer_free(rt, b), m, sizeof m);
  e = api->runtime_destroy(rt);
  result_msg(e == NULL, "runtime_destroy", take_msg(e, m, sizeof m));
  return finish();
}
