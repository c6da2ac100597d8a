/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gp_common.h — C shared by the gpurt plugins: error objects, the
 * generational handle table, struct_size-aware reading and writing of ABI
 * structs, option parsing, dtype conversions, the built-in kernels and the
 * CPU reference GEMM. Everything here is hidden (-fvisibility=hidden); only
 * a plugin's entry symbol is exported.
 */
#ifndef GPURT_CSRC_COMMON_H_
#define GPURT_CSRC_COMMON_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../abi/gpurt.h"
#include "gp_zslots.h" /* the slots as X-macro lists (generated) */

#if defined(__GNUC__)
#define GP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define GP_PRINTF(a, b)
#endif

/* "MAJOR.MINOR" of the header a plugin is built from: plugins derive their
 * version from it (MOCK_VERSION is GP_ABI_VERSION ".0"), so a minor bump
 * is one edit, in gpurt.h. */
#define GP_STR_(x) #x
#define GP_STR(x) GP_STR_(x)
#define GP_ABI_VERSION GP_STR(GPURT_ABI_MAJOR) "." GP_STR(GPURT_ABI_MINOR)

/* The prefix of every message ("mock", "cuda", ...), defined by the plugin. */
extern const char gp_plugin_prefix[];

/* ---- errors ------------------------------------------------------------ */

/* A new error object owned by the caller: "<prefix>: <message>". Never
 * returns NULL (a static out-of-memory error when malloc fails). */
gpurt_error *gp_err(int32_t code, const char *fmt, ...) GP_PRINTF(2, 3);
gpurt_error *gp_errv(int32_t code, const char *fmt, va_list ap);
/* As gp_err, with a vendor code (a driver's error number, errno, ...). */
gpurt_error *gp_err_vendor(int32_t code, int64_t vendor, const char *fmt, ...)
    GP_PRINTF(3, 4);
gpurt_error *gp_errv_vendor(int32_t code, int64_t vendor, const char *fmt,
                            va_list ap);
/* Sets e's vendor code (not on the static out-of-memory error); returns e. */
gpurt_error *gp_err_set_vendor(gpurt_error *e, int64_t vendor);
void gp_error_get(const gpurt_error *err, gpurt_error_info *out);
void gp_error_destroy(gpurt_error *err);
/* A new error with e's code and "<context>: <e's message without prefix>";
 * consumes e. */
gpurt_error *gp_err_wrap(gpurt_error *e, const char *fmt, ...) GP_PRINTF(2, 3);
/* A new error with e's code and vendor code and "<e's message><suffix>"
 * (suffix formatted from fmt); consumes e. */
gpurt_error *gp_err_append(gpurt_error *e, const char *fmt, ...) GP_PRINTF(2, 3);
int32_t gp_error_code(const gpurt_error *err);

/* ---- ABI structs --------------------------------------------------------- */

/* Copies the caller's struct (up to its struct_size) into a zeroed local of
 * local_size bytes. NULL or a struct_size below 8 is INVALID_ARGUMENT naming
 * `what`. */
gpurt_error *gp_read_struct(void *local, size_t local_size, const void *in,
                            const char *what);
/* Checks an out-struct pointer and its struct_size. */
gpurt_error *gp_check_out(const void *out, const char *what);
/* Writes a local out-struct into the caller's, only the bytes inside the
 * caller's struct_size; keeps the caller's struct_size. */
void gp_write_struct(void *out, const void *local, size_t local_size);

/* Copies a NUL-terminated string into a fixed char array. */
void gp_strlcpy(char *dst, size_t cap, const char *src);

/* ---- options: "key=value;key=value" or "key=value,key=value" --------------- */

/* Calls fn for every key=value pair; stops at the first error fn returns.
 * An item without '=' is INVALID_ARGUMENT, and so is a key given twice
 * (naming both values: the last would otherwise win silently). */
typedef gpurt_error *(*gp_option_fn)(void *user, const char *key,
                                     size_t key_len, const char *val,
                                     size_t val_len);
gpurt_error *gp_parse_options(const char *s, size_t len, const char *seps,
                              const char *what, gp_option_fn fn, void *user);
/* Parses a decimal (or 0x hex) integer, optionally with a K/M/G/T suffix
 * (binary units) when allow_suffix. Returns 0 on success. */
int gp_parse_i64(const char *s, size_t len, int allow_suffix, int64_t *out);

/* ---- generational handle table ------------------------------------------ */

/* A handle is a pointer-sized value, never dereferenced:
 *   bits 56..63 kind tag, 40..55 owner serial (the runtime), 24..39
 *   generation, 0..23 slot index + 1.
 * Lookups are lock-free (an acquire load of the slot's handle: what every
 * call does for each handle it is given); inserts and removes take the
 * table's own mutex. Slots live in buckets that never move (bucket b holds
 * 16 << b slots), so a reader never sees memory being freed or moved;
 * freed slots are reused first in, first out, each with a new generation.
 * The object a lookup returns stays valid while the caller keeps it from
 * being destroyed (gpurt.h: a handle is not destroyed while a call uses it). */
enum {
  GP_KIND_RUNTIME = 0x11,
  GP_KIND_BUFFER = 0x12,
  GP_KIND_HOST_BUFFER = 0x13,
  GP_KIND_STREAM = 0x14,
  GP_KIND_EVENT = 0x15,
  GP_KIND_MODULE = 0x16,
  GP_KIND_KERNEL = 0x17,
  GP_KIND_GEMM_PLAN = 0x18,
  GP_KIND_GRAPH = 0x19, /* 1.3 */
  GP_KIND_ATTENTION = 0x1C /* 1.5 */
};

#define GP_TABLE_BUCKETS 21 /* 16 << 20 slots in the last: past 2^24 */

typedef struct gp_hslot {
  _Atomic uint64_t handle; /* the live handle of the slot, 0 when free */
  _Atomic(void *) obj;
  uint32_t gen;            /* under mu */
  uint32_t next;           /* free-list link, under mu */
} gp_hslot;

typedef struct gp_handle_table {
  uint32_t kind;
  uint32_t owner;   /* serial written into every handle */
  pthread_mutex_t mu; /* inserts and removes */
  _Atomic(gp_hslot *) buckets[GP_TABLE_BUCKETS];
  _Atomic uint32_t cap; /* slots made so far (indices below it exist) */
  _Atomic uint32_t live;
  uint32_t free_head, free_tail; /* FIFO free list, UINT32_MAX when empty */
} gp_handle_table;

enum { GP_HANDLE_OK = 0, GP_HANDLE_NULL, GP_HANDLE_WRONG_KIND,
       GP_HANDLE_FOREIGN, GP_HANDLE_STALE };

const char *gp_kind_name(uint32_t kind);
void gp_table_init(gp_handle_table *t, uint32_t kind, uint32_t owner);
void gp_table_free(gp_handle_table *t);
/* Inserts obj; returns 0 (and writes the handle) or -1 when full / no memory. */
int gp_table_insert(gp_handle_table *t, void *obj, uintptr_t *out);
/* Decodes and validates h; on success writes the object. */
int gp_table_lookup(const gp_handle_table *t, uintptr_t h, void **obj);
/* Removes h (must be valid); returns the object. */
void *gp_table_remove(gp_handle_table *t, uintptr_t h);
/* The error for a failed lookup. */
gpurt_error *gp_handle_error(int status, uint32_t kind, uintptr_t h);
/* Looks h up and removes it in one step: GP_HANDLE_OK and the object, or
 * the lookup's status (nothing removed). */
int gp_table_take(gp_handle_table *t, uintptr_t h, void **obj);
/* The error of a full table: OUT_OF_MEMORY "<op>: too many <kind>s". */
gpurt_error *gp_table_full_error(const char *op, uint32_t kind);
/* Iterates live objects (index order). */
uint32_t gp_table_cap(const gp_handle_table *t);
void *gp_table_at(const gp_handle_table *t, uint32_t i);

/* ---- dtypes --------------------------------------------------------------- */

float gp_f16_to_f32(uint16_t h);
uint16_t gp_f32_to_f16(float f);
float gp_bf16_to_f32(uint16_t h);
uint16_t gp_f32_to_bf16(float f);
float gp_e4m3_to_f32(uint8_t v);
uint8_t gp_f32_to_e4m3(float f); /* saturating (OCP "satfinite"), RNE */
float gp_e5m2_to_f32(uint8_t v);
uint8_t gp_f32_to_e5m2(float f); /* saturating, RNE */
size_t gp_dtype_size(int32_t dtype); /* 0 for unknown */
const char *gp_dtype_name(int32_t dtype);
/* Loads element i of a typed array as f32; stores f32 rounded to the type. */
float gp_load(int32_t dtype, const void *base, uint64_t i);
void gp_store(int32_t dtype, void *base, uint64_t i, float v);

/* ---- built-in kernels (gp_builtin.c: the one signature table) --------------- */

/* The built-in kernels of gpurt.h ("Built-in kernels"): every plugin's
 * built-in module has exactly these, with these parameters. gp_builtin.c
 * holds the table (no libm: the CUDA plugin links it too); gp_kernels.c runs
 * them on the CPU (mock). A new built-in kernel is one row here plus its
 * implementation in every plugin. */
enum { GP_BK_FILL, GP_BK_SCALE, GP_BK_AXPY, GP_BK_ADD, GP_BK_MUL, GP_BK_SLEEP, GP_BK_SILU_MUL,
       GP_BK_SOFTCAP, GP_BK_RMSNORM, GP_BK_ROPE_LLAMA, GP_BK_ROPE_NEOX, GP_BK_EMBED, GP_BK_ARGMAX,
       GP_BK_SAMPLE, GP_BK_SAMPLE_ROWS, GP_BK_ADD_RMSNORM,
       GP_BK_ROPE_FREQS };

/* The most parameters of a built-in kernel (the table's arrays). */
#define GP_BK_MAX_PARAMS 8

typedef struct gp_builtin_kernel {
  const char *name;
  int op;          /* GP_BK_* */
  int32_t dtype;   /* element type, INVALID for sleep_ns */
  uint32_t num_params;
  int32_t kinds[GP_BK_MAX_PARAMS];
  uint32_t sizes[GP_BK_MAX_PARAMS];
  uint32_t n_param;    /* index of the U64 n (or ns, or rows) parameter */
  uint32_t num_buffers;/* buffer parameters are 0..num_buffers-1 */
} gp_builtin_kernel;

extern const gp_builtin_kernel gp_builtin_kernels[];
extern const size_t gp_builtin_kernel_count;
const gp_builtin_kernel *gp_builtin_find(const char *name, size_t len);

/* One resolved launch: buffer pointers (already offset), scalar bits. */
typedef struct gp_launch_exec {
  const gp_builtin_kernel *k;
  void *bufs[3];
  uint64_t scalar[GP_BK_MAX_PARAMS]; /* param index -> bits */
  uint32_t grid[3], block[3];
} gp_launch_exec;

/* Elements of each buffer the launch will touch: min(n, grid.x*block.x). */
uint64_t gp_launch_touched(const gp_launch_exec *e);
/* The bytes of each buffer parameter a launch of k with these scalar
 * argument values (param index -> bits) and geometry reads or writes:
 * need[p] for p < k->num_buffers. Element-wise kernels touch
 * min(n, grid.x*block.x) elements of each buffer; the row kernels
 * (rmsnorm, argmax, sample: one block per row; rope, embed: one thread per
 * pair or element) what their shapes say. */
void gp_builtin_need(const gp_builtin_kernel *k, const uint64_t *scalar, const uint32_t *grid,
                     const uint32_t *block, uint64_t need[3]);
/* The token sample_T draws for a row (gpurt.h's counter-based hash). */
uint64_t gp_splitmix64(uint64_t z);
/* The CPU execution of a launch (gp_kernels.c; needs gp_dtype.c). */
void gp_launch_run(const gp_launch_exec *e);
/* sample_rows_T's per-row parameter arrays (gpurt.h): byte offsets of each
 * array in the params buffer of a launch of `rows` rows and `hist` history
 * slots per row, and the buffer's size. */
#define GP_SR_SEED(rows) 0u
#define GP_SR_OFFSET(rows) (8u * (uint64_t)(rows))
#define GP_SR_TEMP(rows) (16u * (uint64_t)(rows))
#define GP_SR_TOPK(rows) (20u * (uint64_t)(rows))
#define GP_SR_TOPP(rows) (24u * (uint64_t)(rows))
#define GP_SR_MINP(rows) (28u * (uint64_t)(rows))
#define GP_SR_REP(rows) (32u * (uint64_t)(rows))
#define GP_SR_PRES(rows) (36u * (uint64_t)(rows))
#define GP_SR_HIST(rows) (40u * (uint64_t)(rows))
#define GP_SR_MAX_HIST 65536u /* hist slots per row at most */
/* sample_rows_T on the CPU, the float64 reference (gp_sample_rows.c). */
void gp_sample_rows_run(const gp_launch_exec *e);
/* Philox4x32-10 of key (seed) and counter (offset low, offset high, 0, 0):
 * the first output word (gpurt.h: sample_rows_T's draw). */
uint32_t gp_philox_first(uint64_t seed, uint64_t offset);

/* ---- the ABI contract (gp_contract.c) ----------------------------------------- */
/*
 * The checks gpurt.h asks of every plugin, written once so that every plugin
 * refuses the same input with the same code and the same message (after its
 * "<prefix>: "). A plugin calls them first and then does what only it can:
 * resolve handles, check devices, lost state and device limits, and run.
 * gp_contract.c needs only gp_error.c and gp_dtype_info.c (no libm).
 */

/* The entry: writes both versions always, then the table or a message. A
 * plugin's gpurt_plugin_negotiate is `return gp_negotiate(args, &api);`. */
int32_t gp_negotiate(gpurt_negotiate_args *args, const gpurt_api *api);

/* [off, off+size) inside [0, total). */
static inline int gp_in_range(uint64_t total, uint64_t off, uint64_t size) {
  return off <= total && size <= total - off;
}

/* copy: one end of a copy. */
enum { GP_END_BUFFER = 1, GP_END_HOST = 2, GP_END_PTR = 3 };
/* Reads the caller's copy args into *a and checks, in this order: unknown
 * flags; no stream without GPURT_COPY_SYNC; exactly one destination, then
 * exactly one source; a non-zero offset with a plain pointer (dst, then
 * src); a pageable pointer without GPURT_COPY_SYNC. Writes the kind of
 * each end (GP_END_*). */
gpurt_error *gp_copy_check(const gpurt_copy_args *in, gpurt_copy_args *a,
                           int *dst_kind, int *src_kind);
/* OUT_OF_RANGE unless [off, off+size) is inside the end's allocation of
 * total bytes (checked for size 0 too). side: "dst" or "src"; kind:
 * GP_END_BUFFER or GP_END_HOST. */
gpurt_error *gp_copy_range(const char *side, int kind, uint64_t total,
                           uint64_t off, uint64_t size);

/* memset: reads the caller's args into *a and checks element_size (1, 2 or
 * 4), offset and size (multiples of it), and that value fits in it. */
gpurt_error *gp_memset_check(const gpurt_memset_args *in, gpurt_memset_args *a);
/* OUT_OF_RANGE unless [off, off+size) is inside the buffer's total bytes. */
gpurt_error *gp_memset_range(uint64_t total, uint64_t off, uint64_t size);

/* launch: reads the caller's launch args into *a ("launch: args"). */
gpurt_error *gp_launch_read(const gpurt_launch_args *in, gpurt_launch_args *a);
/* Checks a launch of kernel `name` against what the plugin knows of its
 * parameters: num_params (GP_PARAMS_UNKNOWN: not known), kinds (NULL: not
 * known; GPURT_ARG_ANY entries match any kind of that size), sizes (NULL
 * or 0 entries: not known). In order: grid and block non-zero; at most
 * GPURT_MAX_KERNEL_PARAMS arguments; args non-NULL when num_args > 0; the
 * argument count; then per argument: a known kind, size equal to the kind's
 * width (8 for a buffer), the parameter's kind, the parameter's size. */
#define GP_PARAMS_UNKNOWN UINT32_MAX
/* flags: GP_LAUNCH_ANY_TAKES_BUFFER lets a GPURT_ARG_ANY parameter take a
 * buffer whatever its size (Metal: reflection cannot tell a `device const
 * T *` binding from a `constant T &` one, both have the size of T). */
#define GP_LAUNCH_ANY_TAKES_BUFFER 1u
gpurt_error *gp_launch_check(const char *name, const gpurt_launch_args *a,
                             uint32_t num_params, const int32_t *kinds,
                             const uint32_t *sizes, uint32_t flags);
/* Width in bytes of an argument kind: 8 for a buffer, 0 for ANY/unknown. */
uint32_t gp_arg_width(int32_t kind);
const char *gp_arg_kind_name(int32_t kind);
/* The messages of the checks that need a resolved handle. */
gpurt_error *gp_launch_device_error(const char *name, uint32_t kernel_dev,
                                    uint32_t stream_dev);
gpurt_error *gp_launch_arg_device_error(const char *name, uint32_t i,
                                        uint32_t buffer_dev, uint32_t stream_dev);
/* OUT_OF_RANGE unless argument i's view (offset, length; 0 = to the end)
 * is inside its buffer's total bytes. *view gets the view's bytes. */
gpurt_error *gp_launch_view(const char *name, uint32_t i, uint64_t total,
                            uint64_t off, uint64_t len, uint64_t *view);
/* For a built-in kernel: OUT_OF_RANGE when the elements the launch touches,
 * min(n, grid.x * block.x), do not fit the view (bytes) of every buffer
 * parameter; view[p] for p < k->num_buffers. */
gpurt_error *gp_builtin_check_views(const gp_builtin_kernel *k,
                                    const gpurt_launch_args *a,
                                    const uint64_t *view);

/* A call that enqueues needs a stream: INVALID_ARGUMENT naming op. */
gpurt_error *gp_need_stream(const char *op, const void *stream);
/* launch_batch, after `count == 0 is a no-op`: stream and items set. */
gpurt_error *gp_launch_batch_check(const gpurt_stream *s, uint64_t count,
                                   const gpurt_launch_item *items);
/* Names item i: "launch_batch: item I: <e>"; consumes e. */
gpurt_error *gp_batch_item_error(gpurt_error *e, uint64_t i);
/* A launch that failed midway at item i, items 0..i-1 enqueued: the item's
 * error plus what stays enqueued; consumes e. */
gpurt_error *gp_batch_midway_error(gpurt_error *e, uint64_t i);

/* runtime_stats: checks out and writes s into it (inside its struct_size). */
gpurt_error *gp_stats_write(gpurt_runtime_stats *out, const gpurt_runtime_stats *s);

/* ---- fault injection ------------------------------------------------------- */

/* The fault counters of a backend (0 = off), guarded by mu. Inline so that
 * any plugin can use them without linking more of csrc. */

/* Consumes one allocation from fail_alloc_nth: 1 when it must fail (the
 * counter then off). */
static inline int gp_fault_alloc(pthread_mutex_t *mu, int64_t *fail_alloc_nth) {
  pthread_mutex_lock(mu);
  int fire = *fail_alloc_nth > 0 && --*fail_alloc_nth == 0;
  pthread_mutex_unlock(mu);
  return fire;
}

/* Counts n launches (a launch_batch's items, or 1) against fail_launch_nth.
 * Returns the index of the launch the fault refuses, the counter then off,
 * or n when none is refused. */
static inline uint64_t gp_fault_launches(pthread_mutex_t *mu, int64_t *fail_launch_nth, uint64_t n) {
  uint64_t at = n;
  pthread_mutex_lock(mu);
  if (*fail_launch_nth > 0 && (uint64_t)*fail_launch_nth <= n) {
    at = (uint64_t)*fail_launch_nth - 1;
    *fail_launch_nth = 0;
  } else if (*fail_launch_nth > 0) {
    *fail_launch_nth -= (int64_t)n;
  }
  pthread_mutex_unlock(mu);
  return at;
}

/* ---- reference GEMM ---------------------------------------------------------- */

/* Validates a descriptor (INVALID_ARGUMENT / UNSUPPORTED naming the field). */
gpurt_error *gp_gemm_validate(const gpurt_gemm_desc *d);
/* Elements an operand spans: (batch-1)*stride + (cols-1)*ld + rows. */
uint64_t gp_gemm_extent(uint64_t rows, uint64_t cols, uint64_t ld,
                        uint64_t batch, int64_t stride);
typedef struct gp_gemm_exec {
  gpurt_gemm_desc d;
  const void *a, *b, *c;
  void *dd;
  const void *bias;
  /* fp8 per-tensor scales: f32 in device memory, read when the run
   * executes; NULL = 1.0 */
  const void *scale_ptr_a, *scale_ptr_b, *scale_ptr_d;
  double alpha, beta;
  int threads; /* worker threads to use, >= 1 */
  const void *norm_w; /* GPURT_GEMM_PROLOGUE_RMSNORM's weight (k of b_type) */
  double norm_eps;
} gp_gemm_exec;
void gp_gemm_run(const gp_gemm_exec *e);
/* The built-ins' element math (gp_kernels.c), shared with the reference
 * GEMM's prologues so that a fused GEMM reads the bits the separate
 * kernel would have written: rmsnorm_T's 1/sqrt(mean(x^2) + eps) of cols
 * values and its element c (x[c] * scale * w[c], f32, not yet rounded),
 * and silu_mul_T's g / (1 + exp(-g)) * u (f32, not yet rounded). */
float gp_rms_scale(int32_t dt, const void *x, uint64_t cols, float eps);
float gp_rms_elem(int32_t dt, const void *x, const void *w, uint64_t c, float scale);
float gp_silu_mul(float g, float u);
/* v rounded to the element type dt (f32 for f32). */
float gp_round_to(int32_t dt, float v);
/* rope_neox_freqs_T's pair (gpurt.h): (u, v) of type dt rotated at
 * position pos by frequency f, in place (each product and sum rounded to
 * dt); shared with kv_append's rotary embedding (1.10). */
void gp_rope_freqs_pair(int32_t dt, float *u, float *v, int32_t pos, float f);

#endif /* GPURT_CSRC_COMMON_H_ */
