/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_fuzz — a structure-aware fuzzer of the C ABI: any gpurt plugin,
 * dlopen'd by path, on its device 0 and the others its runtime has.
 *
 * Each input is a small program: its bytes choose runtime options, then a
 * sequence of ABI calls (every slot of gpurt_api up to 1.10), each built
 * valid from the objects made so far and then mutated field by field
 * (numbers to edges and overflows, handles to NULL, freed, foreign-kind
 * and made-up values, struct_size to short ones, array counts, dtypes,
 * NaN and infinite floats). So the calls reach every check of the engine
 * (csrc) and, when they pass them, the backend's work itself: the mock's
 * kernels then run on what the program left in its buffers, including
 * page tables and token ids that other calls overwrote.
 *
 * What must hold for every call, whatever its arguments (a violation
 * aborts with the call and the reason, so that the fuzzer keeps the
 * input):
 *   - it returns; no crash, no sanitizer report, no leak at the end;
 *   - an error is well formed: a known GPURT_ERR_* code, a non-empty
 *     message of message_len bytes that starts with "<backend>: ";
 *   - a call that fails changes nothing the runtime counts (its live
 *     buffers, host buffers, streams, events, modules and plans, and its
 *     device and host bytes): bad input loses nothing and leaks nothing;
 *   - a create that succeeds hands out a non-NULL handle and counts one
 *     more object of its kind;
 *   - runtime_stats itself never fails;
 *   - up to four valid items (launches, GEMMs, copies, memsets, events,
 *     recorded calls of quant_matmul, kv_append, grouped_gemm and
 *     attention_run) run eagerly on a stream and, from the same bytes,
 *     replayed as a graph on it leave every buffer and host buffer with
 *     the same bytes (diff_graph).
 *
 * What the harness keeps out, because it is slow by contract and not a
 * fault: the built-in sleep_ns (its argument is capped at 1000 ns),
 * delay_us above 20, a communicator's rendezvous wait (timeout_ms is kept
 * within 1..20 ms) and, on a backend other than the mock, grids of more
 * than 65536 blocks.
 *
 * Two ways to run it (scripts/abi_fuzz.sh builds both):
 *   - with libFuzzer (clang -fsanitize=fuzzer,address,undefined; the
 *     plugin built with -fsanitize=fuzzer-no-link,...): coverage-guided,
 *     the plugin's path in $GPURT_TEST_FUZZ_PLUGIN;
 *   - with any C compiler (-DGPURT_FUZZ_DRIVER): abi_fuzz PLUGIN N SEED
 *     runs N inputs made by xorshift from SEED (a fixed sequence: `make
 *     test` runs it under ASan+UBSan), and abi_fuzz PLUGIN FILE... runs
 *     the inputs in those files (a crash libFuzzer found, replayed).
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#include "testlib.h"

/* ---- the input ---------------------------------------------------------------- */

typedef struct {
  const uint8_t *p;
  size_t n, i;
} rd;

static uint8_t u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static bool more(const rd *r) { return r->i < r->n; }
static uint32_t u32(rd *r) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)u8(r) << (8 * i);
  return v;
}
static uint64_t u64(rd *r) { return (uint64_t)u32(r) | (uint64_t)u32(r) << 32; }
/* 0 .. n-1 (n <= 256). */
static uint32_t below(rd *r, uint32_t n) { return n ? u8(r) % n : 0; }
/* True one time in n. */
static bool one_in(rd *r, uint32_t n) { return below(r, n) == 0; }

/* ---- a violated property ------------------------------------------------------- */

static char backend_prefix[40]; /* "<backend>: " */
static const char *cur_op = "";

__attribute__((noreturn, format(printf, 1, 2))) static void bug(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "abi_fuzz: %s: ", cur_op);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

/* Calls and successes per operation (the driver prints them with -v: what
 * the inputs reach). */
#define TALLY_OPS 128
static struct {
  const char *op;
  unsigned long calls, ok;
} tally[TALLY_OPS];

static void count_call(int ok) {
  for (int i = 0; i < TALLY_OPS; i++) {
    if (tally[i].op == NULL) tally[i].op = cur_op;
    if (tally[i].op == cur_op || strcmp(tally[i].op, cur_op) == 0) {
      tally[i].calls++;
      tally[i].ok += ok;
      return;
    }
  }
  bug("more than %d operation names: raise TALLY_OPS", TALLY_OPS);
}

/* The error's code (GPURT_OK for NULL) after checking that it is well
 * formed; destroys it. */
static int take_checked(gpurt_error *e) {
  count_call(e == NULL);
  if (e == NULL) return GPURT_OK;
  gpurt_error_info i;
  ARGS_INIT(i);
  api->error_get(e, &i);
  if (i.code < GPURT_ERR_INVALID_ARGUMENT || i.code > GPURT_ERR_FAILED_PRECONDITION)
    bug("error code %d is not a GPURT_ERR_*", i.code);
  if (i.message == NULL || i.message_len == 0) bug("error %d has no message", i.code);
  if (strlen(i.message) != i.message_len)
    bug("message_len %llu, strlen %zu: \"%s\"", (unsigned long long)i.message_len, strlen(i.message), i.message);
  if (strncmp(i.message, backend_prefix, strlen(backend_prefix)) != 0)
    bug("message does not start with \"%s\": \"%s\"", backend_prefix, i.message);
  api->error_destroy(e);
  return i.code;
}

/* ---- the program's objects ----------------------------------------------------------- */

enum { H_BUF, H_HOST, H_STREAM, H_EVENT, H_MODULE, H_KERNEL, H_PLAN, H_GRAPH, H_ATTN, H_COMM, H_KINDS };
#define SLOTS 12
#define ARENA 8            /* the first buffers: 64 KiB each, made before the calls */
#define ARENA_BYTES 65536u
#define MAX_ALLOC (1u << 20) /* larger sizes are kept only where they must fail (>= 2^48) */

typedef struct {
  void *h;
  uint64_t size;          /* buffers, host buffers */
  void *ptr;              /* host buffers */
  gpurt_gemm_desc gd;     /* plans */
  gpurt_attention_desc ad; /* attention objects */
  int sleeps;             /* kernels: the built-in sleep_ns */
  int32_t kinds[4];       /* graphs: their items' kinds */
  uint64_t count;         /* graphs: items */
} obj;

typedef struct {
  gpurt_runtime *rt;
  uint32_t ndev;
  obj live[H_KINDS][SLOTS];
  void *dead[H_KINDS][SLOTS]; /* freed handles, for reuse as stale ones */
  int ndead[H_KINDS];
  gpurt_module *builtin;
} state;

static obj *slot_free(state *s, int k) {
  for (int i = 0; i < SLOTS; i++)
    if (s->live[k][i].h == NULL) return &s->live[k][i];
  return NULL;
}

static int count_live(const state *s, int k) {
  int n = 0;
  for (int i = 0; i < SLOTS; i++) n += s->live[k][i].h != NULL;
  return n;
}

/* A live object of kind k chosen by the input, or NULL when none. */
static obj *pick_live(rd *r, state *s, int k) {
  int n = count_live(s, k);
  if (n == 0) return NULL;
  int want = (int)below(r, (uint32_t)n);
  for (int i = 0; i < SLOTS; i++)
    if (s->live[k][i].h != NULL && want-- == 0) return &s->live[k][i];
  return NULL;
}

/* Set while diff_graph builds its items: valid calls only (no mutation,
 * live handles of the right kind). */
static bool calm;

/* A handle where one of kind k is expected: mostly a live one, else NULL,
 * a freed one, one of another kind or a made-up value. */
static void *pick(rd *r, state *s, int k) {
  switch (calm ? 0 : below(r, 16)) {
  case 10:
    return NULL;
  case 11:
    if (s->ndead[k] > 0) return s->dead[k][below(r, (uint32_t)s->ndead[k])];
    return NULL;
  case 12: {
    obj *o = pick_live(r, s, (int)below(r, H_KINDS));
    return o ? o->h : NULL;
  }
  case 13:
    return (void *)(uintptr_t)u64(r);
  case 14:
    return (void *)(uintptr_t)(below(r, 64) + 1);
  default: {
    obj *o = pick_live(r, s, k);
    return o ? o->h : NULL;
  }
  }
}

static void forget(state *s, int k, obj *o) {
  if (s->ndead[k] < SLOTS) s->dead[k][s->ndead[k]++] = o->h;
  else s->dead[k][(uintptr_t)o->h % SLOTS] = o->h;
  memset(o, 0, sizeof *o);
}

/* The object of kind k whose handle is h, or NULL. */
static obj *find(state *s, int k, const void *h) {
  if (h == NULL) return NULL;
  for (int i = 0; i < SLOTS; i++)
    if (s->live[k][i].h == h) return &s->live[k][i];
  return NULL;
}

static gpurt_buffer *arena(state *s, int i) { return (gpurt_buffer *)s->live[H_BUF][i].h; }

/* ---- the counts a failed call must leave alone ------------------------------------------ */

static gpurt_runtime_stats stats(state *s) {
  gpurt_runtime_stats st;
  ARGS_INIT(st);
  const char *op = cur_op;
  cur_op = "runtime_stats";
  int c = take_checked(api->runtime_stats(s->rt, &st));
  if (c != GPURT_OK) bug("failed with code %d", c);
  cur_op = op;
  return st;
}

static void same_counts(const gpurt_runtime_stats *a, const gpurt_runtime_stats *b, int code) {
#define SAME_(f)                                                                                        \
  if (a->f != b->f)                                                                                     \
    bug("failed (code %d) but changed " #f " from %llu to %llu", code, (unsigned long long)a->f,        \
        (unsigned long long)b->f);
  SAME_(live_buffers) SAME_(live_host_buffers) SAME_(live_streams) SAME_(live_events) SAME_(live_modules)
  SAME_(live_plans) SAME_(device_bytes) SAME_(host_bytes)
#undef SAME_
}

/* The counts before the last CALL (keep compares a create's with them). */
static gpurt_runtime_stats before_call;

/* A call that may fail but must then change nothing: its code. */
#define CALL(s, name, expr)                                 \
  ({                                                        \
    cur_op = (name);                                        \
    before_call = stats(s);                                 \
    int c_ = take_checked(expr);                            \
    if (c_ != GPURT_OK) {                                   \
      gpurt_runtime_stats a_ = stats(s);                    \
      same_counts(&before_call, &a_, c_);                   \
    }                                                       \
    c_;                                                     \
  })

/* A call whose failure may change counts (frees, destroys, controls,
 * synchronizations): its error must still be well formed. */
#define CALL_ANY(name, expr) (cur_op = (name), take_checked(expr))

/* ---- values ---------------------------------------------------------------------------- */

static const uint64_t edges[] = {0,          1,          2,          3,          4,          7,
                                 8,          15,         16,         17,         31,         32,
                                 33,         63,         64,         65,         127,        128,
                                 255,        256,        257,        511,        512,        1023,
                                 1024,       4095,       4096,       4097,       65535,      65536,
                                 65537,      0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32, (1ull << 32) + 1,
                                 1ull << 48, INT64_MAX,  1ull << 63, UINT64_MAX, UINT64_MAX - 1, UINT64_MAX / 2 + 1};

/* A number near cur, or an edge, or any. */
static uint64_t mutate_num(rd *r, uint64_t cur) {
  switch (below(r, 12)) {
  case 0: return 0;
  case 1: return 1;
  case 2: return cur + 1;
  case 3: return cur - 1;
  case 4: return cur * 2;
  case 5: return cur / 2;
  case 6: return u64(r);
  case 7: return 1ull << below(r, 64);
  case 8: return UINT64_MAX - below(r, 4);
  case 9: return cur + (uint64_t)(int64_t)(int8_t)u8(r);
  case 10: return u8(r);
  default: return edges[below(r, sizeof edges / sizeof edges[0])];
  }
}

static double mutate_f64(rd *r) {
  static const double v[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e-45, 1e30, 3.5e38, 1e39, 1e300, -1e300};
  switch (below(r, 6)) {
  case 0: return NAN;
  case 1: return INFINITY;
  case 2: return -INFINITY;
  case 3: {
    uint64_t b = u64(r);
    double d;
    memcpy(&d, &b, 8);
    return d;
  }
  default: return v[below(r, sizeof v / sizeof v[0])];
  }
}

static int32_t mutate_dtype(rd *r) {
  if (one_in(r, 4)) return (int32_t)u32(r);
  return (int32_t)below(r, 11) - (one_in(r, 8) ? 1 : 0);
}

/* ---- field tables: which fields of an argument struct the input may change --------------- */

enum { F_NUM, F_F32, F_F64, F_DTYPE, F_PTR, F_H };
typedef struct {
  uint16_t off;
  uint8_t size, kind, hk;
} fld;
#define FN(T, f) {offsetof(T, f), sizeof(((T *)0)->f), F_NUM, 0}
#define FF(T, f) {offsetof(T, f), sizeof(((T *)0)->f), F_F32, 0}
#define FD(T, f) {offsetof(T, f), sizeof(((T *)0)->f), F_F64, 0}
#define FT(T, f) {offsetof(T, f), sizeof(((T *)0)->f), F_DTYPE, 0}
#define FP(T, f) {offsetof(T, f), sizeof(((T *)0)->f), F_PTR, 0}
#define FH(T, f, k) {offsetof(T, f), sizeof(((T *)0)->f), F_H, k}
/* The ABI's buffer operand: a handle and its byte offset. */
#define FB(T, f) FH(T, f, H_BUF), FN(T, f##_offset)
#define NF(a) (sizeof(a) / sizeof((a)[0]))

static void set_field(rd *r, state *s, void *base, const fld *f) {
  char *p = (char *)base + f->off;
  switch (f->kind) {
  case F_NUM: {
    uint64_t cur = 0;
    memcpy(&cur, p, f->size); /* little-endian */
    uint64_t v = mutate_num(r, cur);
    memcpy(p, &v, f->size);
    break;
  }
  case F_F32: {
    float v = (float)mutate_f64(r);
    memcpy(p, &v, 4);
    break;
  }
  case F_F64: {
    double v = mutate_f64(r);
    memcpy(p, &v, 8);
    break;
  }
  case F_DTYPE: {
    int32_t v = mutate_dtype(r);
    memcpy(p, &v, 4);
    break;
  }
  case F_PTR: { /* a borrowed host array: only ever NULL instead */
    void *v = NULL;
    memcpy(p, &v, sizeof v);
    break;
  }
  default: {
    void *v = pick(r, s, f->hk);
    memcpy(p, &v, sizeof v);
  }
  }
}

/* Up to three field changes (none a quarter of the time: the valid call),
 * and now and then a short or long struct_size. */
static void mutate(rd *r, state *s, void *base, const fld *fs, size_t n, bool has_size) {
  if (calm) return;
  uint32_t times = below(r, 4);
  for (uint32_t t = 0; t < times; t++) set_field(r, s, base, &fs[below(r, (uint32_t)n)]);
  if (has_size && one_in(r, 16)) {
    uint64_t ss;
    memcpy(&ss, base, 8);
    ss = one_in(r, 2) ? below(r, (uint32_t)(ss + 1 > 255 ? 255 : ss + 1)) : ss + 8 * (1 + below(r, 8));
    memcpy(base, &ss, 8);
  }
}

static const fld copy_f[] = {
    FH(gpurt_copy_args, stream, H_STREAM), FN(gpurt_copy_args, flags),       FN(gpurt_copy_args, reserved),
    FN(gpurt_copy_args, size),             FH(gpurt_copy_args, dst_buffer, H_BUF),
    FH(gpurt_copy_args, dst_host, H_HOST), FP(gpurt_copy_args, dst_ptr),     FN(gpurt_copy_args, dst_offset),
    FH(gpurt_copy_args, src_buffer, H_BUF), FH(gpurt_copy_args, src_host, H_HOST), FP(gpurt_copy_args, src_ptr),
    FN(gpurt_copy_args, src_offset)};
static const fld memset_f[] = {FH(gpurt_memset_args, stream, H_STREAM), FH(gpurt_memset_args, buffer, H_BUF),
                               FN(gpurt_memset_args, offset), FN(gpurt_memset_args, size),
                               FN(gpurt_memset_args, value), FN(gpurt_memset_args, element_size)};
static const fld launch_f[] = {FN(gpurt_launch_args, grid[0]),  FN(gpurt_launch_args, grid[1]),
                               FN(gpurt_launch_args, grid[2]),  FN(gpurt_launch_args, block[0]),
                               FN(gpurt_launch_args, block[1]), FN(gpurt_launch_args, block[2]),
                               FN(gpurt_launch_args, shared_mem_bytes), FN(gpurt_launch_args, num_args),
                               FP(gpurt_launch_args, args)};
static const fld karg_f[] = {FN(gpurt_kernel_arg, kind), FN(gpurt_kernel_arg, size), FN(gpurt_kernel_arg, value),
                             FH(gpurt_kernel_arg, buffer, H_BUF), FN(gpurt_kernel_arg, offset),
                             FN(gpurt_kernel_arg, length)};
static const fld gdesc_f[] = {
    FT(gpurt_gemm_desc, a_type),   FT(gpurt_gemm_desc, b_type),      FT(gpurt_gemm_desc, c_type),
    FT(gpurt_gemm_desc, d_type),   FN(gpurt_gemm_desc, compute_type), FN(gpurt_gemm_desc, epilogue),
    FT(gpurt_gemm_desc, bias_type), FN(gpurt_gemm_desc, trans_a),     FN(gpurt_gemm_desc, trans_b),
    FN(gpurt_gemm_desc, flags),    FN(gpurt_gemm_desc, prologue),    FN(gpurt_gemm_desc, m),
    FN(gpurt_gemm_desc, n),        FN(gpurt_gemm_desc, k),           FN(gpurt_gemm_desc, lda),
    FN(gpurt_gemm_desc, ldb),      FN(gpurt_gemm_desc, ldc),         FN(gpurt_gemm_desc, ldd),
    FN(gpurt_gemm_desc, batch_count), FN(gpurt_gemm_desc, stride_a), FN(gpurt_gemm_desc, stride_b),
    FN(gpurt_gemm_desc, stride_c), FN(gpurt_gemm_desc, stride_d),    FN(gpurt_gemm_desc, align_a),
    FN(gpurt_gemm_desc, align_b),  FN(gpurt_gemm_desc, align_c),     FN(gpurt_gemm_desc, align_d)};
static const fld grun_f[] = {
    FB(gpurt_gemm_run_args, a),         FB(gpurt_gemm_run_args, b),           FB(gpurt_gemm_run_args, c),
    FB(gpurt_gemm_run_args, d),         FB(gpurt_gemm_run_args, bias),        FB(gpurt_gemm_run_args, scale_a),
    FB(gpurt_gemm_run_args, scale_b),   FB(gpurt_gemm_run_args, scale_d),     FD(gpurt_gemm_run_args, alpha),
    FD(gpurt_gemm_run_args, beta),      FB(gpurt_gemm_run_args, workspace),   FN(gpurt_gemm_run_args, workspace_size),
    FB(gpurt_gemm_run_args, norm_weight), FD(gpurt_gemm_run_args, norm_eps)};
static const fld quant_f[] = {
    FT(gpurt_quant_matmul_args, x_type), FT(gpurt_quant_matmul_args, scale_type), FN(gpurt_quant_matmul_args, bits),
    FN(gpurt_quant_matmul_args, group_size), FN(gpurt_quant_matmul_args, m),  FN(gpurt_quant_matmul_args, n),
    FN(gpurt_quant_matmul_args, k),      FB(gpurt_quant_matmul_args, w),      FB(gpurt_quant_matmul_args, scales),
    FB(gpurt_quant_matmul_args, biases), FB(gpurt_quant_matmul_args, x),      FB(gpurt_quant_matmul_args, y)};
static const fld grouped_f[] = {
    FT(gpurt_grouped_gemm_args, ab_type), FT(gpurt_grouped_gemm_args, d_type), FN(gpurt_grouped_gemm_args, group_count),
    FN(gpurt_grouped_gemm_args, n),       FN(gpurt_grouped_gemm_args, k),      FP(gpurt_grouped_gemm_args, m_sizes),
    FB(gpurt_grouped_gemm_args, a),       FB(gpurt_grouped_gemm_args, b),      FB(gpurt_grouped_gemm_args, d),
    FB(gpurt_grouped_gemm_args, scale_a), FB(gpurt_grouped_gemm_args, scale_b),
    FB(gpurt_grouped_gemm_args, m_counts), FN(gpurt_grouped_gemm_args, max_m)};
/* A layout and a page table, as embedded in kv_append and attention
 * structs (offsets relative to the embedding struct). */
#define LAYOUT_F(T, f)                                                                                    \
  FT(T, f.dtype), FN(T, f.layout), FN(T, f.page_size), FN(T, f.num_kv_heads), FN(T, f.head_dim),          \
      FT(T, f.qo_dtype)
#define PAGES_F(T, f)                                                                                     \
  FB(T, f.k), FB(T, f.v), FN(T, f.num_pages), FB(T, f.indptr), FB(T, f.indices), FB(T, f.last_page_len)
static const fld append_f[] = {
    LAYOUT_F(gpurt_kv_append_args, layout), PAGES_F(gpurt_kv_append_args, pages),
    FN(gpurt_kv_append_args, batch_size),   FN(gpurt_kv_append_args, reserved),
    FN(gpurt_kv_append_args, nnz),          FB(gpurt_kv_append_args, k_rows),
    FB(gpurt_kv_append_args, v_rows),       FB(gpurt_kv_append_args, batch_indices),
    FB(gpurt_kv_append_args, positions),    FF(gpurt_kv_append_args, k_scale),
    FF(gpurt_kv_append_args, v_scale),      FB(gpurt_kv_append_args, inv_freq),
    FB(gpurt_kv_append_args, q),            FN(gpurt_kv_append_args, num_qo_heads),
    FN(gpurt_kv_append_args, reserved2)};
static const fld adesc_f[] = {
    FN(gpurt_attention_desc, kind),        FN(gpurt_attention_desc, num_qo_heads),
    LAYOUT_F(gpurt_attention_desc, layout), FN(gpurt_attention_desc, causal),
    FN(gpurt_attention_desc, reserved[0]), FD(gpurt_attention_desc, sm_scale),
    FD(gpurt_attention_desc, logits_soft_cap), FN(gpurt_attention_desc, max_batch_size),
    FN(gpurt_attention_desc, reserved2),   FN(gpurt_attention_desc, max_rows)};
static const fld aplan_f[] = {FN(gpurt_attention_plan_args, batch_size), FN(gpurt_attention_plan_args, reserved),
                              FP(gpurt_attention_plan_args, qo_indptr), FP(gpurt_attention_plan_args, kv_indptr),
                              FP(gpurt_attention_plan_args, kv_last_page_len)};
static const fld arun_f[] = {FB(gpurt_attention_run_args, q), FB(gpurt_attention_run_args, o),
                             PAGES_F(gpurt_attention_run_args, pages), FB(gpurt_attention_run_args, qo_indptr),
                             FF(gpurt_attention_run_args, k_scale), FF(gpurt_attention_run_args, v_scale)};
static const fld coll_f[] = {FN(gpurt_coll_op, kind),  FT(gpurt_coll_op, dtype), FN(gpurt_coll_op, reduce),
                             FN(gpurt_coll_op, rank),  FN(gpurt_coll_op, peer),  FN(gpurt_coll_op, reserved),
                             FN(gpurt_coll_op, count), FH(gpurt_coll_op, stream, H_STREAM),
                             FB(gpurt_coll_op, send),  FB(gpurt_coll_op, recv)};
static const fld ccreate_f[] = {FN(gpurt_comm_create_args, device_count), FN(gpurt_comm_create_args, nranks),
                                FN(gpurt_comm_create_args, first_rank),   FN(gpurt_comm_create_args, reserved),
                                FP(gpurt_comm_create_args, unique_id),    FN(gpurt_comm_create_args, unique_id_len),
                                FN(gpurt_comm_create_args, timeout_ms)};
static const fld item_f[] = {FN(gpurt_graph_item, kind),       FN(gpurt_graph_item, reserved),
                             FH(gpurt_graph_item, kernel, H_KERNEL), FH(gpurt_graph_item, plan, H_PLAN),
                             FH(gpurt_graph_item, event, H_EVENT), FN(gpurt_graph_item, slot),
                             FH(gpurt_graph_item, object, H_ATTN), FP(gpurt_graph_item, args)};

/* ---- argument builders: valid from the program's objects, before mutation ------------------ */

static uint32_t pick_dev(rd *r, const state *s) {
  switch (below(r, 8)) {
  case 0: return s->ndev;
  case 1: return s->ndev - 1;
  case 2: return u32(r);
  default: return 0;
  }
}

/* A size for an allocation: small mostly; a huge one only where it must fail. */
static uint64_t pick_size(rd *r) {
  uint64_t v = mutate_num(r, 4096);
  if (v > MAX_ALLOC && v < (1ull << 48)) v = v % MAX_ALLOC;
  return v;
}

typedef struct {
  gpurt_kernel_arg a[GPURT_MAX_KERNEL_PARAMS + 2];
  gpurt_launch_args l;
} launch_buf;

/* A launch of kernel k (its parameters from kernel_info): buffers from the
 * arena, small counts, a small 1-D geometry; then mutated. */
static void build_launch(rd *r, state *s, gpurt_kernel *k, launch_buf *lb) {
  memset(lb, 0, sizeof *lb);
  gpurt_kernel_info ki;
  ARGS_INIT(ki);
  uint32_t np = below(r, 8);
  if (k != NULL && take_checked(api->kernel_info(s->rt, k, &ki)) == GPURT_OK) np = ki.num_params;
  if (np > GPURT_MAX_KERNEL_PARAMS) np = GPURT_MAX_KERNEL_PARAMS;
  for (uint32_t i = 0; i < np; i++) {
    int32_t kind = ki.param_kind[i] ? ki.param_kind[i] : (int32_t)(1 + below(r, 13));
    uint32_t size = ki.param_size[i] ? ki.param_size[i] : 8;
    if (kind == GPURT_ARG_BUFFER) {
      lb->a[i] = arg_buf(arena(s, (int)below(r, ARENA)), one_in(r, 4) ? 16 * below(r, 16) : 0, 0);
    } else if (kind == GPURT_ARG_F32) {
      lb->a[i] = arg_val(kind, size, f32_bits(one_in(r, 4) ? (float)mutate_f64(r) : 1e-5f));
    } else {
      lb->a[i] = arg_val(kind, size == 0 ? 8 : size, 1 + below(r, 64));
    }
  }
  lb->l = launch_args(1 + below(r, 4), 32u << below(r, 4), lb->a, np);
  mutate(r, s, &lb->l, launch_f, NF(launch_f), true);
  for (uint32_t t = below(r, 3); t > 0; t--)
    if (np > 0) mutate(r, s, &lb->a[below(r, np)], karg_f, NF(karg_f), false);
  if (lb->l.num_args > GPURT_MAX_KERNEL_PARAMS + 2 && lb->l.args != NULL) lb->l.num_args = GPURT_MAX_KERNEL_PARAMS + 2;
  /* A GPU runs every block of a launch (the mock only the elements it
   * touches): on another backend, at most 2^16 blocks, so that one input
   * cannot take minutes. */
  if (strcmp(backend_prefix, "mock: ") != 0)
    for (int d = 0; d < 3; d++)
      if (lb->l.grid[d] > (d == 0 ? 65536u : 1u)) lb->l.grid[d] = d == 0 ? 65536u : 1u;
  obj *ko = find(s, H_KERNEL, k);
  if (ko != NULL && ko->sleeps) /* sleep_ns: not for long */
    for (uint32_t i = 0; i < GPURT_MAX_KERNEL_PARAMS + 2; i++)
      if (lb->a[i].kind != GPURT_ARG_BUFFER && lb->a[i].value > 1000) lb->a[i].value = 1000;
}

static void build_copy(rd *r, state *s, gpurt_copy_args *c, void *host_scratch, bool graph) {
  ARGS_INIT(*c);
  c->size = 1 + below(r, 255);
  c->stream = graph ? NULL : (gpurt_stream *)pick(r, s, H_STREAM);
  c->flags = graph ? 0 : (one_in(r, 2) ? GPURT_COPY_SYNC : 0);
  for (int end = 0; end < 2; end++) {
    uint32_t how = below(r, graph ? 2 : 3);
    gpurt_buffer **b = end ? &c->src_buffer : &c->dst_buffer;
    gpurt_host_buffer **h = end ? &c->src_host : &c->dst_host;
    uint64_t *off = end ? &c->src_offset : &c->dst_offset;
    if (how == 0) *b = (gpurt_buffer *)pick(r, s, H_BUF);
    else if (how == 1) *h = (gpurt_host_buffer *)pick(r, s, H_HOST);
    else if (end) c->src_ptr = host_scratch;
    else c->dst_ptr = host_scratch;
    if (how < 2 && one_in(r, 2)) *off = 16 * below(r, 64);
  }
  mutate(r, s, c, copy_f, NF(copy_f), true);
  /* A pageable pointer is the caller's memory: never more than the scratch. */
  if ((c->src_ptr || c->dst_ptr) && c->size > 4096) c->size = 4096;
}

static void build_memset(rd *r, state *s, gpurt_memset_args *m, bool graph) {
  uint32_t es = 1u << below(r, 3);
  *m = memset_args((gpurt_buffer *)pick(r, s, H_BUF), es * below(r, 64), es * (1 + below(r, 64)), 0, es);
  m->value = u8(r) & (es == 1 ? 0xff : 0xffff);
  m->stream = graph ? NULL : (gpurt_stream *)pick(r, s, H_STREAM);
  mutate(r, s, m, memset_f, NF(memset_f), true);
}

static const int32_t gemm_types[] = {GPURT_DTYPE_F32, GPURT_DTYPE_F16, GPURT_DTYPE_BF16, GPURT_DTYPE_FP8_E4M3,
                                     GPURT_DTYPE_F64, GPURT_DTYPE_I8};

static void build_gemm_desc(rd *r, state *s, gpurt_gemm_desc *d) {
  int32_t ab = gemm_types[below(r, 3)], cd = one_in(r, 2) ? ab : GPURT_DTYPE_F32;
  uint64_t m = 1 + below(r, 16), n = 1 + below(r, 16), k = 1 + below(r, 16);
  *d = gemm_desc(ab, cd, m, n, k, m, k, m);
  if (one_in(r, 4)) {
    d->trans_a = 1;
    d->lda = k;
  }
  if (one_in(r, 4)) {
    d->batch_count = 1 + below(r, 3);
    d->stride_a = (int64_t)(m * k);
    d->stride_b = (int64_t)(k * n);
    d->stride_c = d->stride_d = (int64_t)(m * n);
  }
  if (one_in(r, 4)) {
    d->epilogue = (int32_t)below(r, 6);
    d->bias_type = cd;
  }
  if (one_in(r, 4)) d->prologue = (uint8_t)(1 + below(r, 2));
  if (one_in(r, 8)) d->a_type = d->b_type = GPURT_DTYPE_FP8_E4M3;
  mutate(r, s, d, gdesc_f, NF(gdesc_f), true);
}

static void build_gemm_run(rd *r, state *s, const gpurt_gemm_desc *d, gpurt_gemm_run_args *g) {
  *g = gemm_run_args(arena(s, 0), arena(s, 1), arena(s, 2), 1.0);
  if (d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
      d->epilogue == GPURT_EPILOGUE_BIAS_GELU)
    g->bias = arena(s, 3);
  if (one_in(r, 3)) {
    g->c = arena(s, 2);
    g->beta = 0.5;
  }
  if (d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM) {
    g->norm_weight = arena(s, 3);
    g->norm_eps = 1e-5;
  }
  if (d->a_type == GPURT_DTYPE_FP8_E4M3 && one_in(r, 2)) g->scale_a = g->scale_b = arena(s, 4);
  if (one_in(r, 8)) {
    g->workspace = arena(s, 5);
    g->workspace_size = 16384;
  }
  mutate(r, s, g, grun_f, NF(grun_f), true);
}

static void build_quant(rd *r, state *s, gpurt_quant_matmul_args *q) {
  const uint64_t gs = 32u << below(r, 3), m = 1 + below(r, 64), n = 1 + below(r, 8), k = gs * (1 + below(r, 4));
  int32_t t = one_in(r, 2) ? GPURT_DTYPE_F16 : GPURT_DTYPE_BF16;
  *q = (gpurt_quant_matmul_args){.struct_size = sizeof *q, .x_type = t, .scale_type = t, .bits = 8,
                                 .group_size = (uint32_t)gs, .m = m, .n = n, .k = k,
                                 .w = arena(s, 0), .scales = arena(s, 1), .biases = arena(s, 2),
                                 .x = arena(s, 3), .y = arena(s, 4)};
  mutate(r, s, q, quant_f, NF(quant_f), true);
}

static void build_grouped(rd *r, state *s, gpurt_grouped_gemm_args *g, uint64_t *msz) {
  const bool fp8 = one_in(r, 3);
  uint64_t groups = 1 + below(r, 4), total = 0;
  for (uint64_t i = 0; i < 8; i++) {
    msz[i] = below(r, 9);
    if (i < groups) total += msz[i];
  }
  (void)total;
  *g = (gpurt_grouped_gemm_args){.struct_size = sizeof *g,
                                 .ab_type = fp8 ? GPURT_DTYPE_FP8_E4M3 : GPURT_DTYPE_BF16,
                                 .d_type = GPURT_DTYPE_BF16, .group_count = groups,
                                 .n = 1 + below(r, 16), .k = fp8 ? 128 : 8 * (1 + below(r, 8)),
                                 .m_sizes = msz, .a = arena(s, 0), .b = arena(s, 1), .d = arena(s, 2)};
  if (fp8) {
    g->scale_a = arena(s, 3);
    g->scale_b = arena(s, 4);
  }
  if (one_in(r, 3)) { /* 1.11: the counts on the device, the page table's small int32s */
    g->m_sizes = NULL;
    g->m_counts = arena(s, 6);
    g->max_m = 1 + below(r, 16);
  }
  mutate(r, s, g, grouped_f, NF(grouped_f), true);
  if (g->m_sizes != NULL && g->group_count > 8) g->group_count = 8; /* the array's length */
}

/* The arena's page-table buffer (arena 6) holds, from offset 0: indptr
 * {0,2,4} (batch 2), at 64 indices {0,1,2,3}, at 128 last_page_len {3,2},
 * at 192 the appended rows' batch indices {0,1,1}, at 256 their positions
 * {6,4,5} (inside the requests' lengths 2*4+... with page size 4), at 320
 * a prefill's qo_indptr {0,1,3}. */
static const int32_t table_words[] = {0, 2, 4};
static const int32_t table_idx[] = {0, 1, 2, 3};
static const int32_t table_last[] = {3, 2};
static const int32_t table_bi[] = {0, 1, 1};
static const int32_t table_pos[] = {6, 4, 5};
static const int32_t table_qo[] = {0, 1, 3};

static gpurt_kv_layout kv_layout(rd *r) {
  gpurt_kv_layout l = {one_in(r, 2) ? GPURT_DTYPE_F16 : GPURT_DTYPE_BF16, (int32_t)below(r, 2), 4, 1 + below(r, 2),
                       64u << below(r, 2), 0};
  if (one_in(r, 6)) {
    l.qo_dtype = l.dtype;
    l.dtype = GPURT_DTYPE_FP8_E4M3;
  }
  return l;
}

static gpurt_kv_pages kv_pages_of(state *s) {
  gpurt_kv_pages p = {.k = arena(s, 0), .v = arena(s, 1), .num_pages = 4, .indptr = arena(s, 6),
                      .indices = arena(s, 6), .indices_offset = 64, .last_page_len = arena(s, 6),
                      .last_page_len_offset = 128};
  return p;
}

static void build_append(rd *r, state *s, gpurt_kv_append_args *a) {
  ARGS_INIT(*a);
  a->layout = kv_layout(r);
  a->pages = kv_pages_of(s);
  a->batch_size = 2;
  a->nnz = below(r, 4);
  a->k_rows = arena(s, 2);
  a->v_rows = arena(s, 3);
  a->batch_indices = arena(s, 6);
  a->batch_indices_offset = 192;
  a->positions = arena(s, 6);
  a->positions_offset = 256;
  a->k_scale = a->v_scale = 1.0f;
  if (one_in(r, 3)) {
    a->inv_freq = arena(s, 4);
    if (one_in(r, 2)) {
      a->q = arena(s, 5);
      a->num_qo_heads = a->layout.num_kv_heads * (1 + below(r, 2));
    }
  }
  mutate(r, s, a, append_f, NF(append_f), true);
}

static void build_attn_desc(rd *r, state *s, gpurt_attention_desc *d) {
  ARGS_INIT(*d);
  d->kind = one_in(r, 2) ? GPURT_ATTENTION_DECODE : GPURT_ATTENTION_PREFILL;
  d->layout = kv_layout(r);
  d->num_qo_heads = d->layout.num_kv_heads * (1 + below(r, 2));
  d->causal = d->kind == GPURT_ATTENTION_PREFILL && one_in(r, 2);
  d->max_batch_size = 2 + below(r, 3);
  d->max_rows = 4;
  if (one_in(r, 4)) d->logits_soft_cap = 30.0;
  mutate(r, s, d, adesc_f, NF(adesc_f), true);
}

static void build_attn_run(rd *r, state *s, const gpurt_attention_desc *d, gpurt_attention_run_args *a) {
  ARGS_INIT(*a);
  a->q = arena(s, 2);
  a->o = arena(s, 3);
  a->pages = kv_pages_of(s);
  if (d->kind == GPURT_ATTENTION_PREFILL) {
    a->qo_indptr = arena(s, 6);
    a->qo_indptr_offset = 320;
  }
  a->k_scale = a->v_scale = 1.0f;
  mutate(r, s, a, arun_f, NF(arun_f), true);
}

/* A graph item of a random kind with its args in *store (one per item). */
typedef struct {
  launch_buf lb;
  gpurt_gemm_run_args g;
  gpurt_copy_args c;
  gpurt_memset_args m;
  gpurt_quant_matmul_args q;
  gpurt_kv_append_args ka;
  gpurt_attention_run_args ar;
  gpurt_grouped_gemm_args gg;
  uint64_t msz[8];
} item_store;

/* One call of an enqueueing slot that takes only its args (quant_matmul,
 * kv_append, grouped_gemm) or an attention and its args (attention_run):
 * eager (OP_CALL) or a graph's CALL item. */
static void build_call(rd *r, state *s, item_store *st, uint64_t *slot, void **object, const void **args) {
  *object = NULL;
  switch (below(r, 4)) {
  case 0:
    build_quant(r, s, &st->q);
    *slot = offsetof(gpurt_api, quant_matmul);
    *args = &st->q;
    break;
  case 1:
    build_append(r, s, &st->ka);
    *slot = offsetof(gpurt_api, kv_append);
    *args = &st->ka;
    break;
  case 2: {
    obj *a = pick_live(r, s, H_ATTN);
    gpurt_attention_desc d;
    if (a) d = a->ad;
    else build_attn_desc(r, s, &d);
    build_attn_run(r, s, &d, &st->ar);
    *slot = offsetof(gpurt_api, attention_run);
    *object = a && !one_in(r, 8) ? a->h : pick(r, s, H_ATTN);
    *args = &st->ar;
    break;
  }
  default:
    build_grouped(r, s, &st->gg, st->msz);
    *slot = offsetof(gpurt_api, grouped_gemm);
    *args = &st->gg;
  }
}

static void build_item(rd *r, state *s, gpurt_graph_item *it, item_store *st, int32_t kind, void *scratch) {
  memset(it, 0, sizeof *it);
  it->struct_size = sizeof *it;
  it->kind = kind;
  switch (kind) {
  case GPURT_GRAPH_OP_LAUNCH:
    it->kernel = (gpurt_kernel *)pick(r, s, H_KERNEL);
    build_launch(r, s, it->kernel, &st->lb);
    it->launch = &st->lb.l;
    break;
  case GPURT_GRAPH_OP_GEMM: {
    obj *p = pick_live(r, s, H_PLAN);
    it->plan = p ? (gpurt_gemm_plan *)p->h : NULL;
    gpurt_gemm_desc d = p ? p->gd : gemm_desc_square(GPURT_DTYPE_F32, 4);
    build_gemm_run(r, s, &d, &st->g);
    it->gemm = &st->g;
    break;
  }
  case GPURT_GRAPH_OP_COPY:
    build_copy(r, s, &st->c, scratch, true);
    it->copy = &st->c;
    break;
  case GPURT_GRAPH_OP_MEMSET:
    build_memset(r, s, &st->m, true);
    it->memset = &st->m;
    break;
  case GPURT_GRAPH_OP_EVENT_RECORD:
  case GPURT_GRAPH_OP_EVENT_WAIT:
    it->event = (gpurt_event *)pick(r, s, H_EVENT);
    break;
  default: /* CALL */
    build_call(r, s, st, &it->slot, &it->object, &it->args);
  }
  mutate(r, s, it, item_f, NF(item_f), true);
  if (!calm && one_in(r, 16)) it->kind = (int32_t)below(r, 10);
}

/* ---- one input ------------------------------------------------------------------------ */

static const char *const option_words[] = {
    "devices=1", "devices=2", "devices=3", "devices=0", "devices=65", "devices=x", "memory=1", "memory=65536",
    "memory=1048576", "memory=-1", "memory=99999999999999999999", "gemm_threads=1", "gemm_threads=2",
    "fail_alloc_nth=5", "fail_alloc_nth=12", "fail_launch_nth=2", "fail_launch_nth=9", "lose_device=0",
    "lose_device=1", "refuse_replay_nth=1", "delay_us=3", "bogus=1", "devices", "=", "", "devices=1=2"};

static const char *const kernel_families[] = {"fill",      "scale",      "axpy",   "add",         "mul",
                                              "silu_mul",  "softcap",    "rmsnorm", "rope_llama", "rope_neox",
                                              "embed",     "argmax",     "sample", "sample_rows", "add_rmsnorm",
                                              "rope_neox_freqs"};
static const char *const kernel_types[] = {"f32", "f16", "bf16"};

static const char *const control_keys[] = {"fail_alloc_nth", "fail_launch_nth", "lose_device", "delay_us",
                                           "refuse_replay_nth", "debug_corrupt_guard", "nope", ""};

static bool new_runtime_from(rd *r, state *s) {
  char opts[512] = "";
  size_t len = 0;
  /* The words are the mock's options; another backend gets them (and
   * refuses most) one time in eight, and no options otherwise. */
  const bool mock = strcmp(backend_prefix, "mock: ") == 0;
  bool mem = !mock;
  for (uint32_t n = mock || one_in(r, 8) ? below(r, 4) : 0; n > 0; n--) {
    const char *w = option_words[below(r, NF(option_words))];
    if (strncmp(w, "memory", 6) == 0) mem = true;
    len += (size_t)snprintf(opts + len, sizeof opts - len, "%s%s", len ? (one_in(r, 2) ? ";" : ",") : "", w);
  }
  if (one_in(r, mock ? 8 : 64)) { /* raw bytes, except a delay */
    uint32_t n = below(r, 24);
    char raw[25];
    for (uint32_t i = 0; i < n; i++) raw[i] = (char)u8(r);
    raw[n] = 0;
    if (strstr(raw, "delay") == NULL && strstr(raw, "memory") == NULL && len + n + 2 < sizeof opts) {
      memcpy(opts + len, raw, n);
      len += n;
      opts[len] = 0;
    }
  }
  if (!mem && len + 20 < sizeof opts)
    len += (size_t)snprintf(opts + len, sizeof opts - len, "%smemory=16777216", len ? ";" : "");
  gpurt_runtime_create_args a;
  ARGS_INIT(a);
  a.options = opts;
  a.options_len = len;
  if (one_in(r, 32)) a.options = NULL;
  cur_op = "runtime_create";
  if (take_checked(api->runtime_create(&a, &s->rt)) != GPURT_OK) {
    s->rt = NULL;
    return false;
  }
  if (s->rt == NULL) bug("succeeded with a NULL runtime");
  cur_op = "device_count";
  if (take_checked(api->device_count(s->rt, &s->ndev)) != GPURT_OK || s->ndev == 0) bug("no device");
  return true;
}

/* The arena: 8 buffers of 64 KiB on device 0 (contents: f16 0.5 in 0-5,
 * the page table in 6, input bytes in 7), one stream, one event, the
 * built-in module and some of its kernels. Whatever fails here (an
 * injected fault, a small memory) leaves its slot empty. */
static void setup(rd *r, state *s) {
  static uint8_t raw[ARENA_BYTES];
  for (size_t i = 0; i < ARENA_BYTES; i++) raw[i] = r->n ? r->p[i % r->n] : 0;
  static uint16_t half[ARENA_BYTES / 2];
  for (size_t i = 0; i < ARENA_BYTES / 2; i++) half[i] = 0x3800;
  static int32_t table[128];
  memset(table, 0, sizeof table);
  memcpy(table, table_words, sizeof table_words);
  memcpy(table + 16, table_idx, sizeof table_idx);
  memcpy(table + 32, table_last, sizeof table_last);
  memcpy(table + 48, table_bi, sizeof table_bi);
  memcpy(table + 64, table_pos, sizeof table_pos);
  memcpy(table + 80, table_qo, sizeof table_qo);
  for (int i = 0; i < ARENA; i++) {
    gpurt_buffer *b = NULL;
    cur_op = "setup: buffer_alloc";
    if (take_checked(api->buffer_alloc(s->rt, 0, ARENA_BYTES, &b)) != GPURT_OK) continue;
    s->live[H_BUF][i] = (obj){.h = b, .size = ARENA_BYTES};
    const void *src = i < 6 ? (const void *)half : i == 6 ? (const void *)table : (const void *)raw;
    uint64_t n = i == 6 ? sizeof table : ARENA_BYTES;
    cur_op = "setup: upload";
    take_checked(upload_on(s->rt, NULL, b, src, n));
  }
  gpurt_stream *st = NULL;
  cur_op = "setup: stream_create";
  if (take_checked(api->stream_create(s->rt, 0, &st)) == GPURT_OK) s->live[H_STREAM][0].h = st;
  gpurt_event *ev = NULL;
  cur_op = "setup: event_create";
  if (take_checked(api->event_create(s->rt, 0, GPURT_EVENT_TIMING, &ev)) == GPURT_OK) s->live[H_EVENT][0].h = ev;
  cur_op = "setup: module_load";
  if (take_checked(load_builtin(s->rt, &s->builtin)) == GPURT_OK) {
    s->live[H_MODULE][0].h = s->builtin;
    for (int i = 0; i < 4; i++) {
      char name[40];
      int n = snprintf(name, sizeof name, "%s_%s", kernel_families[below(r, NF(kernel_families))],
                       kernel_types[below(r, 3)]);
      gpurt_kernel *k = NULL;
      cur_op = "setup: kernel_get";
      if (take_checked(api->kernel_get(s->rt, s->builtin, name, (uint64_t)n, &k)) == GPURT_OK)
        s->live[H_KERNEL][i].h = k;
    }
  }
}

/* A create's result, after its CALL succeeded: a handle, kept, and one
 * more counted where the runtime counts that kind. */
static void keep(state *s, int k, void *h, obj extra) {
  const gpurt_runtime_stats *before = &before_call;
  if (h == NULL) bug("succeeded with a NULL handle");
  gpurt_runtime_stats after = stats(s);
  const uint64_t *b = NULL, *a = NULL;
  switch (k) {
  case H_BUF: b = &before->live_buffers, a = &after.live_buffers; break;
  case H_HOST: b = &before->live_host_buffers, a = &after.live_host_buffers; break;
  case H_STREAM: b = &before->live_streams, a = &after.live_streams; break;
  case H_EVENT: b = &before->live_events, a = &after.live_events; break;
  case H_MODULE: b = &before->live_modules, a = &after.live_modules; break;
  case H_PLAN: b = &before->live_plans, a = &after.live_plans; break;
  default: break;
  }
  if (b != NULL && *a != *b + 1) bug("succeeded but the count went from %llu to %llu", (unsigned long long)*b,
                                     (unsigned long long)*a);
  obj *o = slot_free(s, k);
  if (o == NULL) { /* no room: it stays the runtime's (runtime_destroy frees it) */
    return;
  }
  extra.h = h;
  *o = extra;
}

/* A destroy chosen by the input: the handle is forgotten when the call
 * took it (success, or any failure on a live one but a wrong-handle one). */
static void destroy_one(rd *r, state *s, int k) {
  void *h = pick(r, s, k);
  gpurt_runtime *rt = s->rt;
  int c;
  switch (k) {
  case H_BUF: c = CALL_ANY("buffer_free", api->buffer_free(rt, h)); break;
  case H_HOST: c = CALL_ANY("host_free", api->host_free(rt, h)); break;
  case H_STREAM: c = CALL_ANY("stream_destroy", api->stream_destroy(rt, h)); break;
  case H_EVENT: c = CALL_ANY("event_destroy", api->event_destroy(rt, h)); break;
  case H_MODULE: c = CALL_ANY("module_unload", api->module_unload(rt, h)); break;
  case H_PLAN: c = CALL_ANY("gemm_plan_destroy", api->gemm_plan_destroy(rt, h)); break;
  case H_GRAPH: c = CALL_ANY("graph_destroy", api->graph_destroy(rt, h)); break;
  case H_ATTN: c = CALL_ANY("attention_destroy", api->attention_destroy(rt, h)); break;
  case H_COMM: c = CALL_ANY("comm_destroy", api->comm_destroy(rt, h)); break;
  default: return; /* kernels are their module's */
  }
  obj *o = find(s, k, h);
  if (o == NULL) return;
  if (c == GPURT_OK || c != GPURT_ERR_INVALID_HANDLE) {
    if (k == H_MODULE) { /* its kernels are gone with it */
      for (int i = 0; i < SLOTS; i++)
        if (s->live[H_KERNEL][i].h) forget(s, H_KERNEL, &s->live[H_KERNEL][i]);
      if (h == s->builtin) s->builtin = NULL;
    }
    forget(s, k, o);
  }
}

enum {
  OP_ALLOC, OP_HOST_ALLOC, OP_FREE, OP_COPY, OP_MEMSET, OP_STREAM, OP_STREAM_OPS, OP_EVENT, OP_EVENT_OPS,
  OP_MODULE, OP_KERNEL_GET, OP_KERNEL_INFO, OP_LAUNCH, OP_LAUNCH_BATCH, OP_PLAN, OP_GEMM, OP_CALL, OP_CALL2,
  OP_CALL3, OP_ATTN_CREATE, OP_ATTN_PLAN, OP_CALL4, OP_GRAPH, OP_GRAPH_LAUNCH, OP_GRAPH_UPDATE, OP_CONTROL,
  OP_INFO, OP_SYNC, OP_RECORDABLE, OP_COMM, OP_COMM_RUN, OP_DIFF, OP_COUNT
};

/* ---- a graph's replay against the same items run eagerly -------------------------------- */

/* Every live buffer's and host buffer's bytes (NULL entries for the
 * others). */
typedef struct {
  uint8_t *b[SLOTS], *h[SLOTS];
} snapshot;

static bool snap_take(state *s, snapshot *sn) {
  memset(sn, 0, sizeof *sn);
  for (int i = 0; i < SLOTS; i++) {
    obj *o = &s->live[H_HOST][i];
    if (o->h == NULL || o->ptr == NULL || o->size == 0) continue;
    if ((sn->h[i] = malloc(o->size)) == NULL) return false;
    memcpy(sn->h[i], o->ptr, o->size);
  }
  for (int i = 0; i < SLOTS; i++) {
    obj *o = &s->live[H_BUF][i];
    if (o->h == NULL || o->size == 0) continue;
    sn->b[i] = malloc(o->size);
    if (sn->b[i] == NULL || take_checked(download_on(s->rt, NULL, sn->b[i], o->h, o->size)) != GPURT_OK) return false;
  }
  return true;
}

static bool snap_put(state *s, const snapshot *sn) {
  for (int i = 0; i < SLOTS; i++)
    if (sn->h[i]) memcpy(s->live[H_HOST][i].ptr, sn->h[i], s->live[H_HOST][i].size);
  for (int i = 0; i < SLOTS; i++)
    if (sn->b[i] && take_checked(upload_on(s->rt, NULL, s->live[H_BUF][i].h, sn->b[i], s->live[H_BUF][i].size)) !=
                        GPURT_OK)
      return false;
  return true;
}

static void snap_free(snapshot *sn) {
  for (int i = 0; i < SLOTS; i++) free(sn->b[i]), free(sn->h[i]);
}

/* Item it enqueued eagerly on st: its code. */
static int run_eager(state *s, gpurt_stream *st, const gpurt_graph_item *it) {
  gpurt_runtime *rt = s->rt;
  switch (it->kind) {
  case GPURT_GRAPH_OP_LAUNCH: return CALL_ANY("diff: launch", api->launch(rt, st, it->kernel, it->launch));
  case GPURT_GRAPH_OP_GEMM: return CALL_ANY("diff: gemm_run", api->gemm_run(rt, st, it->plan, it->gemm));
  case GPURT_GRAPH_OP_COPY: {
    if (it->copy == NULL) return GPURT_ERR_INVALID_ARGUMENT;
    gpurt_copy_args c = *it->copy;
    c.stream = st;
    return CALL_ANY("diff: copy", api->copy(rt, &c));
  }
  case GPURT_GRAPH_OP_MEMSET: {
    if (it->memset == NULL) return GPURT_ERR_INVALID_ARGUMENT;
    gpurt_memset_args m = *it->memset;
    m.stream = st;
    return CALL_ANY("diff: memset", api->memset(rt, &m));
  }
  case GPURT_GRAPH_OP_EVENT_RECORD: return CALL_ANY("diff: event_record", api->event_record(rt, it->event, st));
  case GPURT_GRAPH_OP_EVENT_WAIT: return CALL_ANY("diff: stream_wait_event", api->stream_wait_event(rt, st, it->event));
  case GPURT_GRAPH_OP_CALL:
    if (it->slot == offsetof(gpurt_api, quant_matmul)) return CALL_ANY("diff: quant_matmul", api->quant_matmul(rt, st, it->args));
    if (it->slot == offsetof(gpurt_api, kv_append)) return CALL_ANY("diff: kv_append", api->kv_append(rt, st, it->args));
    if (it->slot == offsetof(gpurt_api, grouped_gemm)) return CALL_ANY("diff: grouped_gemm", api->grouped_gemm(rt, st, it->args));
    if (it->slot == offsetof(gpurt_api, attention_run))
      return CALL_ANY("diff: attention_run", api->attention_run(rt, st, it->object, it->args));
    return GPURT_ERR_UNSUPPORTED;
  default: return GPURT_ERR_INVALID_ARGUMENT;
  }
}

/* Items run eagerly on a stream and, from the same bytes, as a graph
 * replayed on it must leave every buffer with the same bytes (gpurt.h: a
 * graph runs like the eager items would). Skipped, with nothing to
 * compare, when anything on the way fails (a bad item, an injected fault). */
static void diff_graph(rd *r, state *s, void *scratch) {
  static item_store store[4];
  gpurt_graph_item items[4];
  uint64_t n = 1 + below(r, 4);
  calm = true;
  for (uint64_t i = 0; i < n; i++) build_item(r, s, &items[i], &store[i], (int32_t)(1 + below(r, 7)), scratch);
  calm = false;
  obj *so = pick_live(r, s, H_STREAM);
  if (so == NULL) return;
  gpurt_stream *st = so->h;
  snapshot before = {0}, eager = {0}, replay = {0};
  gpurt_graph *g = NULL;
  cur_op = "diff: device_synchronize";
  if (take_checked(api->device_synchronize(s->rt, 0)) != GPURT_OK || !snap_take(s, &before)) goto out;
  bool ok = true;
  for (uint64_t i = 0; i < n && ok; i++) ok = run_eager(s, st, &items[i]) == GPURT_OK;
  cur_op = "diff: stream_synchronize";
  if (!ok || take_checked(api->stream_synchronize(s->rt, st)) != GPURT_OK || !snap_take(s, &eager) ||
      !snap_put(s, &before))
    goto out;
  gpurt_graph_create_args ga = graph_args(items, n);
  cur_op = "diff: graph_create";
  if (take_checked(api->graph_create(s->rt, &ga, &g)) != GPURT_OK) goto out;
  cur_op = "diff: graph_launch";
  if (take_checked(api->graph_launch(s->rt, g, st)) != GPURT_OK) goto out;
  cur_op = "diff: stream_synchronize";
  if (take_checked(api->stream_synchronize(s->rt, st)) != GPURT_OK || !snap_take(s, &replay)) goto out;
  cur_op = "diff: graph replay against eager";
  for (int i = 0; i < SLOTS; i++)
    if (eager.h[i] && replay.h[i] && memcmp(eager.h[i], replay.h[i], s->live[H_HOST][i].size) != 0)
      bug("host buffer %d differs after the replay from the eager run", i);
  for (int i = 0; i < SLOTS; i++) {
    if (eager.b[i] == NULL || replay.b[i] == NULL) continue;
    for (uint64_t j = 0; j < s->live[H_BUF][i].size; j++)
      if (eager.b[i][j] != replay.b[i][j]) {
        char kinds[64] = "";
        for (uint64_t k = 0; k < n; k++)
          snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%d", k ? "," : "", items[k].kind);
        bug("items of kinds %s: buffer %d byte %llu is %#x after the replay, %#x after the eager run", kinds, i,
            (unsigned long long)j, replay.b[i][j], eager.b[i][j]);
      }
  }
out:
  if (g) CALL_ANY("diff: graph_destroy", api->graph_destroy(s->rt, g));
  snap_free(&before);
  snap_free(&eager);
  snap_free(&replay);
}

static void step(rd *r, state *s, void *scratch) {
  gpurt_runtime *rt = s->rt;
  switch (below(r, OP_COUNT)) {
  case OP_ALLOC: {
    gpurt_buffer *b = NULL;
    uint64_t size = pick_size(r);
    if (CALL(s, "buffer_alloc", api->buffer_alloc(rt, pick_dev(r, s), size, &b)) == GPURT_OK)
      keep(s, H_BUF, b, (obj){.size = size});
    break;
  }
  case OP_HOST_ALLOC: {
    gpurt_host_buffer *h = NULL;
    void *p = NULL;
    uint64_t size = pick_size(r);
    if (CALL(s, "host_alloc", api->host_alloc(rt, size, &h, &p)) == GPURT_OK) {
      if (p == NULL && size > 0) bug("host_alloc succeeded with a NULL pointer");
      if (p != NULL && size > 0) memset(p, 0x5a, size); /* the memory is the caller's */
      keep(s, H_HOST, h, (obj){.size = size, .ptr = p});
    }
    break;
  }
  case OP_FREE:
    destroy_one(r, s, (int)below(r, H_KINDS));
    break;
  case OP_COPY: {
    gpurt_copy_args c;
    build_copy(r, s, &c, scratch, false);
    CALL(s, "copy", api->copy(rt, &c));
    break;
  }
  case OP_MEMSET: {
    gpurt_memset_args m;
    build_memset(r, s, &m, false);
    CALL(s, "memset", api->memset(rt, &m));
    break;
  }
  case OP_STREAM: {
    gpurt_stream *st = NULL;
    if (CALL(s, "stream_create", api->stream_create(rt, pick_dev(r, s), &st)) == GPURT_OK)
      keep(s, H_STREAM, st, (obj){0});
    break;
  }
  case OP_STREAM_OPS: {
    gpurt_stream *st = pick(r, s, H_STREAM);
    switch (below(r, 3)) {
    case 0: CALL_ANY("stream_synchronize", api->stream_synchronize(rt, st)); break;
    case 1: CALL_ANY("stream_query", api->stream_query(rt, st)); break;
    default: CALL(s, "stream_wait_event", api->stream_wait_event(rt, st, pick(r, s, H_EVENT)));
    }
    break;
  }
  case OP_EVENT: {
    gpurt_event *ev = NULL;
    uint32_t flags = one_in(r, 8) ? u32(r) : below(r, 2);
    if (CALL(s, "event_create", api->event_create(rt, pick_dev(r, s), flags, &ev)) == GPURT_OK)
      keep(s, H_EVENT, ev, (obj){0});
    break;
  }
  case OP_EVENT_OPS: {
    gpurt_event *ev = pick(r, s, H_EVENT);
    switch (below(r, 4)) {
    case 0: CALL(s, "event_record", api->event_record(rt, ev, one_in(r, 4) ? NULL : pick(r, s, H_STREAM))); break;
    case 1: CALL_ANY("event_query", api->event_query(rt, ev)); break;
    case 2: CALL_ANY("event_synchronize", api->event_synchronize(rt, ev)); break;
    default: {
      double ms = 0;
      CALL_ANY("event_elapsed", api->event_elapsed(rt, ev, pick(r, s, H_EVENT), one_in(r, 16) ? NULL : &ms));
      if (!isfinite(ms) && ms == ms) bug("event_elapsed wrote %g", ms);
    }
    }
    break;
  }
  case OP_MODULE: {
    gpurt_module_load_args ml;
    ARGS_INIT(ml);
    ml.device = pick_dev(r, s);
    ml.format = one_in(r, 2) ? GPURT_MODULE_BUILTIN : (int32_t)below(r, 8) - 1;
    uint32_t n = below(r, 64);
    ml.data = r->p + r->i;
    ml.data_len = r->i + n <= r->n ? n : 0;
    r->i += ml.data_len;
    ml.name = "fuzz";
    ml.name_len = one_in(r, 8) ? 0 : 4;
    if (one_in(r, 8)) ml.data = NULL;
    if (one_in(r, 16)) ml.struct_size = below(r, 48);
    gpurt_module *m = NULL;
    if (CALL(s, "module_load", api->module_load(rt, &ml, &m)) == GPURT_OK) keep(s, H_MODULE, m, (obj){0});
    break;
  }
  case OP_KERNEL_GET: {
    char name[64];
    int n;
    if (one_in(r, 4)) {
      n = (int)below(r, 40);
      for (int i = 0; i < n; i++) name[i] = (char)u8(r);
      name[n] = 0;
    } else {
      n = snprintf(name, sizeof name, "%s_%s", kernel_families[below(r, NF(kernel_families))],
                   kernel_types[below(r, 3)]);
    }
    uint64_t len = one_in(r, 16) ? below(r, 64) : (uint64_t)n;
    if (len > sizeof name) len = sizeof name;
    gpurt_kernel *k = NULL;
    if (CALL(s, "kernel_get", api->kernel_get(rt, pick(r, s, H_MODULE), one_in(r, 32) ? NULL : name, len, &k)) ==
        GPURT_OK) {
      if (k == NULL) bug("kernel_get succeeded with a NULL kernel");
      obj *o = slot_free(s, H_KERNEL);
      if (o) *o = (obj){.h = k, .sleeps = len == 8 && memcmp(name, "sleep_ns", 8) == 0};
    }
    break;
  }
  case OP_KERNEL_INFO: {
    gpurt_kernel_info ki;
    ARGS_INIT(ki);
    if (one_in(r, 8)) ki.struct_size = below(r, 64);
    CALL(s, "kernel_info", api->kernel_info(rt, pick(r, s, H_KERNEL), one_in(r, 16) ? NULL : &ki));
    if (ki.num_params > GPURT_MAX_KERNEL_PARAMS) bug("kernel_info: %u parameters", ki.num_params);
    break;
  }
  case OP_LAUNCH: {
    gpurt_kernel *k = pick(r, s, H_KERNEL);
    launch_buf lb;
    build_launch(r, s, k, &lb);
    CALL(s, "launch", api->launch(rt, pick(r, s, H_STREAM), k, one_in(r, 32) ? NULL : &lb.l));
    break;
  }
  case OP_LAUNCH_BATCH: {
    static launch_buf lbs[4];
    gpurt_launch_item items[4];
    uint64_t n = 1 + below(r, 4), enq = 0;
    for (uint64_t i = 0; i < n; i++) {
      items[i].kernel = pick(r, s, H_KERNEL);
      build_launch(r, s, items[i].kernel, &lbs[i]);
      items[i].args = one_in(r, 32) ? NULL : &lbs[i].l;
    }
    uint64_t count = one_in(r, 8) ? below(r, (uint32_t)n + 1) : n;
    gpurt_stream *st = pick(r, s, H_STREAM);
    int c = CALL_ANY("launch_batch", api->launch_batch(rt, st, count, one_in(r, 32) ? NULL : items,
                                                        one_in(r, 4) ? NULL : &enq));
    if (enq > count) bug("launch_batch: %llu enqueued of %llu", (unsigned long long)enq, (unsigned long long)count);
    (void)c;
    break;
  }
  case OP_PLAN: {
    gpurt_gemm_desc d;
    build_gemm_desc(r, s, &d);
    gpurt_gemm_plan *p = NULL;
    if (CALL(s, "gemm_plan_create", api->gemm_plan_create(rt, pick_dev(r, s), one_in(r, 32) ? NULL : &d, &p)) ==
        GPURT_OK)
      keep(s, H_PLAN, p, (obj){.gd = d});
    break;
  }
  case OP_GEMM: {
    obj *p = pick_live(r, s, H_PLAN);
    gpurt_gemm_desc d = p ? p->gd : gemm_desc_square(GPURT_DTYPE_F32, 4);
    gpurt_gemm_run_args g;
    build_gemm_run(r, s, &d, &g);
    void *ph = p && !one_in(r, 8) ? p->h : pick(r, s, H_PLAN);
    CALL(s, "gemm_run", api->gemm_run(rt, pick(r, s, H_STREAM), ph, one_in(r, 32) ? NULL : &g));
    break;
  }
  case OP_CALL: /* four entries: as often as before */
  case OP_CALL2:
  case OP_CALL3:
  case OP_CALL4: {
    static item_store st;
    uint64_t slot;
    void *object;
    const void *args;
    build_call(r, s, &st, &slot, &object, &args);
    gpurt_stream *sp = pick(r, s, H_STREAM);
    if (slot == offsetof(gpurt_api, quant_matmul)) CALL(s, "quant_matmul", api->quant_matmul(rt, sp, args));
    else if (slot == offsetof(gpurt_api, kv_append)) CALL(s, "kv_append", api->kv_append(rt, sp, args));
    else if (slot == offsetof(gpurt_api, grouped_gemm)) CALL(s, "grouped_gemm", api->grouped_gemm(rt, sp, args));
    else CALL(s, "attention_run", api->attention_run(rt, sp, object, args));
    break;
  }
  case OP_ATTN_CREATE: {
    gpurt_attention_desc d;
    build_attn_desc(r, s, &d);
    gpurt_attention *a = NULL;
    if (CALL(s, "attention_create", api->attention_create(rt, pick_dev(r, s), &d, &a)) == GPURT_OK)
      keep(s, H_ATTN, a, (obj){.ad = d});
    break;
  }
  case OP_ATTN_PLAN: {
    obj *a = pick_live(r, s, H_ATTN);
    gpurt_attention_plan_args pa;
    ARGS_INIT(pa);
    /* Requests 0 and 1 as in the arena's page table, then one-page ones
     * (the arrays hold batches up to 64: the caller's memory). */
    int32_t kv[65], last[64], qo[65];
    for (int i = 0; i < 65; i++) {
      kv[i] = i < 2 ? 2 * i : 4 + (i - 2);
      qo[i] = i < 2 ? i : 1 + i;
      if (i < 64) last[i] = i == 0 ? 3 : i == 1 ? 2 : 1;
    }
    pa.batch_size = 2;
    pa.kv_indptr = kv;
    pa.kv_last_page_len = last;
    if (a && a->ad.kind == GPURT_ATTENTION_PREFILL) pa.qo_indptr = qo;
    mutate(r, s, &pa, aplan_f, NF(aplan_f), true);
    if (pa.batch_size > 64) /* past the arrays: only with none to read */
      pa.kv_indptr = NULL, pa.kv_last_page_len = NULL, pa.qo_indptr = NULL;
    for (int i = below(r, 3); i > 0; i--) {
      int32_t *arr = one_in(r, 3) ? kv : one_in(r, 2) ? last : qo;
      arr[below(r, 64)] = (int32_t)mutate_num(r, 2);
    }
    CALL(s, "attention_plan", api->attention_plan(rt, pick(r, s, H_STREAM), a ? a->h : pick(r, s, H_ATTN), &pa));
    break;
  }
  case OP_GRAPH: {
    static item_store store[4];
    gpurt_graph_item items[4];
    int32_t kinds[4];
    uint64_t n = 1 + below(r, 4);
    for (uint64_t i = 0; i < n; i++) {
      kinds[i] = (int32_t)(1 + below(r, 7));
      build_item(r, s, &items[i], &store[i], kinds[i], scratch);
    }
    gpurt_graph_create_args ga = graph_args(items, n);
    ga.device = pick_dev(r, s);
    if (one_in(r, 8)) ga.flags = u32(r);
    if (one_in(r, 8)) ga.count = below(r, (uint32_t)n + 1);
    if (one_in(r, 8)) ga.item_size = below(r, (uint32_t)sizeof items[0] + 1);
    if (one_in(r, 32)) ga.items = NULL;
    gpurt_graph *g = NULL;
    if (CALL(s, "graph_create", api->graph_create(rt, &ga, &g)) == GPURT_OK) {
      if (g == NULL) bug("graph_create succeeded with a NULL graph");
      obj *o = slot_free(s, H_GRAPH);
      if (o) {
        *o = (obj){.h = g, .count = ga.count};
        memcpy(o->kinds, kinds, sizeof kinds);
      }
    }
    break;
  }
  case OP_GRAPH_LAUNCH:
    CALL(s, "graph_launch", api->graph_launch(rt, pick(r, s, H_GRAPH), pick(r, s, H_STREAM)));
    break;
  case OP_GRAPH_UPDATE: {
    obj *g = pick_live(r, s, H_GRAPH);
    static item_store store[2];
    gpurt_graph_item items[2];
    uint64_t idx[2], n = 1 + below(r, 2);
    for (uint64_t i = 0; i < n; i++) {
      idx[i] = g && g->count ? below(r, (uint32_t)g->count) : below(r, 4);
      int32_t kind = g && idx[i] < 4 ? g->kinds[idx[i]] : (int32_t)(1 + below(r, 7));
      build_item(r, s, &items[i], &store[i], kind, scratch);
      if (one_in(r, 8)) idx[i] = mutate_num(r, idx[i]);
    }
    gpurt_graph_update_args ua = update_args(idx, items);
    ua.count = n;
    if (one_in(r, 8)) ua.count = below(r, (uint32_t)n + 1);
    if (one_in(r, 16)) ua.item_size = below(r, (uint32_t)sizeof items[0] + 1);
    if (one_in(r, 32)) ua.indices = NULL;
    CALL(s, "graph_update", api->graph_update(rt, g && !one_in(r, 8) ? g->h : pick(r, s, H_GRAPH), &ua));
    break;
  }
  case OP_CONTROL: {
    const char *key = control_keys[below(r, NF(control_keys))];
    gpurt_control_args ca;
    ARGS_INIT(ca);
    ca.key = key;
    ca.key_len = strlen(key);
    ca.value = (int64_t)mutate_num(r, 1);
    if (strcmp(key, "delay_us") == 0 && (ca.value < 0 || ca.value > 20)) ca.value = ca.value < 0 ? ca.value : 20;
    if (one_in(r, 16)) ca.key = NULL;
    CALL_ANY("runtime_control", api->runtime_control(rt, &ca));
    break;
  }
  case OP_INFO: {
    gpurt_device_info di;
    ARGS_INIT(di);
    if (one_in(r, 8)) di.struct_size = below(r, 64);
    CALL(s, "device_info", api->device_info(rt, pick_dev(r, s), one_in(r, 16) ? NULL : &di));
    break;
  }
  case OP_SYNC:
    CALL_ANY("device_synchronize", api->device_synchronize(rt, pick_dev(r, s)));
    break;
  case OP_RECORDABLE: {
    static const uint64_t slots[] = {offsetof(gpurt_api, launch), offsetof(gpurt_api, gemm_run),
                                     offsetof(gpurt_api, copy), offsetof(gpurt_api, quant_matmul),
                                     offsetof(gpurt_api, attention_run), offsetof(gpurt_api, comm_run)};
    uint8_t out = 7;
    uint64_t slot = one_in(r, 2) ? slots[below(r, NF(slots))] : mutate_num(r, 8);
    if (CALL(s, "graph_recordable", api->graph_recordable(rt, slot, one_in(r, 16) ? NULL : &out)) == GPURT_OK &&
        out > 1)
      bug("graph_recordable answered %u", out);
    break;
  }
  case OP_COMM: {
    uint32_t devs[4] = {0, 1, 2, 3};
    uint8_t id[GPURT_COMM_ID_BYTES] = {0};
    gpurt_comm_create_args ca;
    ARGS_INIT(ca);
    ca.device_count = 1 + below(r, s->ndev < 4 ? s->ndev : 4);
    ca.devices = devs;
    if (one_in(r, 4)) devs[below(r, 4)] = (uint32_t)mutate_num(r, 1);
    if (one_in(r, 4)) {
      gpurt_comm_id cid;
      ARGS_INIT(cid);
      if (CALL(s, "comm_unique_id", api->comm_unique_id(rt, &cid)) == GPURT_OK) memcpy(id, cid.bytes, sizeof id);
      ca.nranks = ca.device_count;
      ca.unique_id = id;
      ca.unique_id_len = sizeof id;
    }
    mutate(r, s, &ca, ccreate_f, NF(ccreate_f), true);
    if (ca.device_count > 4 && ca.devices != NULL) ca.device_count = 4;            /* the array's length */
    if (ca.unique_id != NULL && ca.unique_id_len > sizeof id) ca.unique_id_len = sizeof id;
    ca.timeout_ms = 1 + ca.timeout_ms % 20;                                         /* no long rendezvous */
    gpurt_comm *c = NULL;
    if (CALL(s, "comm_create", api->comm_create(rt, &ca, &c)) == GPURT_OK) {
      if (c == NULL) bug("comm_create succeeded with a NULL communicator");
      obj *o = slot_free(s, H_COMM);
      if (o) *o = (obj){.h = c, .count = ca.device_count};
    }
    break;
  }
  case OP_DIFF:
    diff_graph(r, s, scratch);
    break;
  default: { /* OP_COMM_RUN, and query / abort */
    obj *c = pick_live(r, s, H_COMM);
    void *ch = c && !one_in(r, 8) ? c->h : pick(r, s, H_COMM);
    switch (below(r, 4)) {
    case 0: CALL_ANY("comm_query", api->comm_query(rt, ch)); break;
    case 1: CALL_ANY("comm_abort", api->comm_abort(rt, ch)); break;
    default: {
      gpurt_coll_op ops[4];
      uint64_t n = c ? c->count : 1;
      if (n > 4) n = 4;
      for (uint64_t i = 0; i < n; i++) {
        ops[i] = (gpurt_coll_op){.struct_size = sizeof ops[i], .kind = GPURT_COLL_ALL_REDUCE,
                                 .dtype = GPURT_DTYPE_F32, .rank = (uint32_t)i, .count = 1 + below(r, 64),
                                 .send = arena(s, 5), .recv = arena(s, 5)};
        if (one_in(r, 3)) ops[i].kind = (int32_t)(1 + below(r, 6));
        mutate(r, s, &ops[i], coll_f, NF(coll_f), true);
      }
      gpurt_comm_run_args ra = {.struct_size = sizeof ra, .count = n, .ops = ops, .op_size = sizeof ops[0]};
      if (one_in(r, 8)) ra.count = below(r, (uint32_t)n + 1);
      if (one_in(r, 8)) ra.op_size = below(r, (uint32_t)sizeof ops[0] + 1);
      CALL(s, "comm_run", api->comm_run(rt, ch, &ra));
    }
    }
  }
  }
}

/* Most objects destroyed one by one, through their slots, in an order that
 * releases holders first (graphs hold buffers, modules kernels); the rest
 * with the runtime. */
static void teardown(rd *r, state *s) {
  static const int order[] = {H_GRAPH, H_ATTN, H_COMM, H_PLAN, H_EVENT, H_STREAM, H_MODULE, H_HOST, H_BUF};
  for (size_t i = 0; i < NF(order); i++)
    for (int j = 0; j < SLOTS; j++) {
      obj *o = &s->live[order[i]][j];
      if (o->h == NULL || one_in(r, 4)) continue;
      void *h = o->h;
      gpurt_runtime *rt = s->rt;
      switch (order[i]) {
      case H_GRAPH: CALL_ANY("graph_destroy", api->graph_destroy(rt, h)); break;
      case H_ATTN: CALL_ANY("attention_destroy", api->attention_destroy(rt, h)); break;
      case H_COMM: CALL_ANY("comm_destroy", api->comm_destroy(rt, h)); break;
      case H_PLAN: CALL_ANY("gemm_plan_destroy", api->gemm_plan_destroy(rt, h)); break;
      case H_EVENT: CALL_ANY("event_destroy", api->event_destroy(rt, h)); break;
      case H_STREAM: CALL_ANY("stream_destroy", api->stream_destroy(rt, h)); break;
      case H_MODULE: CALL_ANY("module_unload", api->module_unload(rt, h)); break;
      case H_HOST: CALL_ANY("host_free", api->host_free(rt, h)); break;
      default: CALL_ANY("buffer_free", api->buffer_free(rt, h));
      }
      memset(o, 0, sizeof *o);
    }
  cur_op = "runtime_destroy";
  take_checked(api->runtime_destroy(s->rt));
}

static char scratch_mem[4096];

static int run_one(const uint8_t *data, size_t size) {
  rd r = {data, size, 0};
  state s;
  memset(&s, 0, sizeof s);
  if (!new_runtime_from(&r, &s)) return 0;
  setup(&r, &s);
  for (int n = 0; more(&r) && n < 64; n++) step(&r, &s, scratch_mem);
  teardown(&r, &s);
  return 0;
}

/* ---- the plugin ------------------------------------------------------------------------- */

#ifdef GPURT_FUZZ_STATIC
/* Linked with the plugin's sources (the libFuzzer build of the mock). */
int32_t gpurt_plugin_negotiate(gpurt_negotiate_args *args);
#endif

static int load(const char *path) {
#ifdef GPURT_FUZZ_STATIC
  (void)path;
  gpurt_negotiate_fn fn = gpurt_plugin_negotiate;
#else
  gpurt_negotiate_fn fn = plugin_entry(path);
#endif
  if (fn == NULL) return -1;
  gpurt_negotiate_args a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.host_abi_major = GPURT_ABI_MAJOR;
  a.host_abi_minor = GPURT_ABI_MINOR;
  if (fn(&a) != GPURT_OK || a.api == NULL) {
    fprintf(stderr, "abi_fuzz: negotiate: %s\n", a.message);
    return -1;
  }
  api = a.api;
  gpurt_plugin_info pi;
  ARGS_INIT(pi);
  if (take(api->plugin_info(&pi), NULL, 0) != GPURT_OK) return -1;
  snprintf(backend_prefix, sizeof backend_prefix, "%s: ", pi.backend);
  return 0;
}

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1:detect_leaks=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

#ifdef GPURT_FUZZ_DRIVER
#include "../gp_zslots.h"

/* Whether the inputs called every slot the plugin has (but the five that
 * take no runtime) and saw each succeed at least once: a slot added to the
 * header and not to step() fails here, by name. */
static bool every_slot_reached(void) {
  bool all = true;
#define REACHED_(name, minor, ret, params)                                                              \
  if (strcmp(#name, "error_get") && strcmp(#name, "error_destroy") && strcmp(#name, "plugin_info") &&   \
      strcmp(#name, "probe") && strcmp(#name, "shutdown") && GPURT_API_HAS(api, name)) {                \
    unsigned long ok_ = 0;                                                                              \
    for (int i = 0; i < TALLY_OPS && tally[i].op; i++)                                                  \
      if (strcmp(tally[i].op, #name) == 0) ok_ += tally[i].ok;                                         \
    if (ok_ == 0) {                                                                                     \
      printf("abi_fuzz: no input made a successful " #name " call: add it to csrc/test/abi_fuzz.c's "   \
             "step() with a valid template\n");                                                         \
      all = false;                                                                                      \
    }                                                                                                   \
  }
  GP_ZSLOTS(REACHED_)
#undef REACHED_
  return all;
}
#endif

#ifndef GPURT_FUZZ_DRIVER
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *p = getenv("GPURT_TEST_FUZZ_PLUGIN");
#ifndef GPURT_FUZZ_STATIC
  if (p == NULL) {
    fprintf(stderr, "abi_fuzz: set GPURT_TEST_FUZZ_PLUGIN to a plugin file\n");
    exit(2);
  }
#endif
  if (load(p) != 0) exit(2);
  return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return run_one(data, size); }
#else
int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN N SEED | PLUGIN FILE...\n", argv[0]);
    return 2;
  }
  if (load(argv[1]) != 0) return 2;
  char *end = NULL;
  unsigned long long n = strtoull(argv[2], &end, 10);
  if (argc == 4 && end && *end == 0) { /* N inputs from SEED */
    uint64_t st = 2 * strtoull(argv[3], NULL, 10) + 1;
    static uint8_t buf[4096];
    for (unsigned long long i = 0; i < n; i++) {
      size_t len = 64 + xorshift(&st) % (sizeof buf - 64);
      for (size_t j = 0; j < len; j++) buf[j] = (uint8_t)xorshift(&st);
      run_one(buf, len);
    }
    if (getenv("GPURT_TEST_FUZZ_TALLY") != NULL)
      for (int i = 0; i < TALLY_OPS && tally[i].op; i++)
        printf("%-28s %8lu calls %8lu ok\n", tally[i].op, tally[i].calls, tally[i].ok);
    printf("abi_fuzz: %llu inputs, no violation\n", n);
    return n >= 500 && !every_slot_reached() ? 1 : 0;
  }
  for (int i = 2; i < argc; i++) { /* replay files */
    FILE *f = fopen(argv[i], "rb");
    if (f == NULL) {
      fprintf(stderr, "abi_fuzz: cannot open %s\n", argv[i]);
      return 2;
    }
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    run_one(buf, len);
  }
  printf("abi_fuzz: %d inputs replayed, no violation\n", argc - 2);
  return 0;
}
#endif
