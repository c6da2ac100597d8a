/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpurt.h — the one stable C ABI between the gpurt Go core and its backend
 * plugins (libgpurt_cuda.so, libgpurt_metal.dylib, libgpurt_mock.so).
 *
 * ===================================================================
 * RULES (read before changing anything in this file)
 * ===================================================================
 *
 * Versioning
 *   - GPURT_ABI_MAJOR must match exactly between core and plugin. A change
 *     that removes, reorders, resizes or re-types anything is a new major.
 *   - Minors only add: new functions are appended at the END of gpurt_api,
 *     new fields at the END of an argument struct, new enum values after the
 *     last. A plugin of an older or a newer minor loads.
 *   - gpurt_api and every argument/info struct start with `struct_size`
 *     (uint64_t, the size the writer of the struct knew). The core calls a
 *     table slot only when api->struct_size covers the slot AND the pointer is
 *     non-NULL (GPURT_API_HAS below); otherwise the operation is
 *     GPURT_ERR_UNSUPPORTED. A plugin reads only the fields of a caller's
 *     struct inside the caller's struct_size and treats missing ones as zero;
 *     it writes only the fields of an out-struct inside the caller's
 *     struct_size. A struct_size below 8 (or a NULL struct) is
 *     GPURT_ERR_INVALID_ARGUMENT, and so is one below the plugin's own size
 *     of the struct that is not a multiple of 8: every version of a struct
 *     starts with a uint64_t, so no version has such a size, and it would
 *     end inside a field.
 *   - Two structs have no struct_size: gpurt_kernel_arg and
 *     gpurt_launch_item are elements of caller-owned arrays, read with the
 *     fixed stride sizeof(T) of this header, and are frozen for the major.
 *     Should one ever need a field, a minor appends a stride field to the
 *     struct that points at the array (e.g. `uint32_t arg_stride` at the end
 *     of gpurt_launch_args, 0 meaning sizeof(gpurt_kernel_arg) as of 1.0);
 *     gpurt_launch_item arrays are passed to launch_batch directly, so a
 *     longer item needs a new slot that takes the stride.
 *   - Required slots: every 1.0 slot except shutdown (optional, may be
 *     NULL); a core refuses a plugin that lacks one. Slots of later minors
 *     are optional: NULL (or a struct_size that does not cover them) makes
 *     the operation GPURT_ERR_UNSUPPORTED.
 *
 * Negotiation
 *   - A plugin exports exactly one symbol, GPURT_ENTRY_SYMBOL. It runs
 *     before any other plugin code and has no side effects: no driver call,
 *     no allocation that outlives the call, no thread, no output. Library
 *     constructors do nothing either. The core passes its version, the plugin
 *     answers with its own and with its static function table.
 *
 * Errors
 *   - Every fallible call returns gpurt_error*: NULL on success, otherwise an
 *     error object owned by the CALLER, who reads it with api->error_get and
 *     frees it with api->error_destroy. There is no thread-local "last error":
 *     goroutines move between OS threads between two calls.
 *
 * Threads
 *   - Every function may be called from any OS thread, concurrently with any
 *     other, except that a handle must not be destroyed while another call
 *     uses it (the core serialises that). No call depends on the calling
 *     thread: a CUDA plugin makes its context current inside each call.
 *
 * Shapes (what purego passes on every platform)
 *   - Only fixed-width integers, doubles and pointers as arguments; structs
 *     only by pointer; strings and blobs as pointer + length (never relying on
 *     a NUL); booleans as uint8_t; no varargs; no callbacks created per call.
 *   - Functions take at most six integer/pointer arguments.
 *
 * Handles and ownership
 *   - Each resource has its own opaque handle type. A plugin validates every
 *     handle it is given (a freed or foreign handle is
 *     GPURT_ERR_INVALID_HANDLE, never a crash). Every *_destroy / *_free
 *     accepts NULL and does nothing.
 *   - Fields say who owns what they point to and for how long; outputs are
 *     marked  out. Pointers in an argument struct are borrowed for the
 *     duration of the call only, unless the field says otherwise: the plugin
 *     never keeps a caller's pointer after returning (asynchronous copies
 *     therefore take only plugin-owned pinned host memory).
 *
 * Memory
 *   - buffer_alloc returns device memory whose start is aligned to at least
 *     256 bytes, and host_alloc pinned host memory (*out_ptr) aligned to at
 *     least 256 bytes. The core relies on it: it sub-allocates pinned host
 *     memory in 256-byte steps, and derives a GEMM operand's alignment from
 *     its offset alone (buffer + offset is as aligned as offset, up to 256).
 *
 * The contract's checks
 *   - The argument checks every plugin makes (copy, memset, launch,
 *     launch_batch, the NULL stream of an enqueueing call, negotiation,
 *     stats) are implemented once in csrc/gp_contract.c and worded once: the
 *     same input gets the same code and message from every plugin, after its
 *     "<backend>: " prefix. csrc/test/abi_suite.c checks any plugin against
 *     them (scripts/abi_suite.sh).
 *
 * Lifetime
 *   - Plugins are never dlclose'd and the core never calls shutdown. A
 *     plugin's process-wide state (driver handles, tables) lives until the
 *     process exits; shutdown is for other hosts that embed a plugin.
 */
#ifndef GPURT_H_
#define GPURT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPURT_ABI_MAJOR 1
#define GPURT_ABI_MINOR 11

/* The one exported symbol. */
#define GPURT_ENTRY_SYMBOL "gpurt_plugin_negotiate"

#if defined(_WIN32)
#define GPURT_EXPORT __declspec(dllexport)
#else
#define GPURT_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------ */
/* Enumerations (int32_t on the wire)                                  */
/* ------------------------------------------------------------------ */

/* Error codes: a small, stable set. */
enum {
  GPURT_OK = 0,
  GPURT_ERR_INVALID_ARGUMENT = 1, /* a value is out of its domain */
  GPURT_ERR_INVALID_HANDLE = 2,   /* freed, foreign or never created */
  GPURT_ERR_OUT_OF_RANGE = 3,     /* offset + size beyond an allocation */
  GPURT_ERR_OUT_OF_MEMORY = 4,    /* device or pinned host memory */
  GPURT_ERR_NOT_FOUND = 5,        /* kernel/module name */
  GPURT_ERR_UNSUPPORTED = 6,      /* the plugin cannot do this */
  GPURT_ERR_UNAVAILABLE = 7,      /* driver/device not usable here */
  GPURT_ERR_DEVICE_LOST = 8,      /* sticky: the device refuses all work */
  GPURT_ERR_LAUNCH_FAILED = 9,    /* a kernel faulted or failed to start */
  GPURT_ERR_NOT_READY = 10,       /* event/stream query: work pending */
  GPURT_ERR_ABI_MISMATCH = 11,    /* negotiation failed */
  GPURT_ERR_INTERNAL = 12,        /* a bug or an unexpected vendor error */
  GPURT_ERR_FAILED_PRECONDITION = 13 /* wrong state: closed, busy, ... */
};

/* Why a probe says what it says. */
enum {
  GPURT_PROBE_OK = 0,
  GPURT_PROBE_DRIVER_MISSING = 1,
  GPURT_PROBE_NO_DEVICE = 2,
  GPURT_PROBE_DRIVER_TOO_OLD = 3,
  GPURT_PROBE_PLATFORM_UNSUPPORTED = 4,
  GPURT_PROBE_INIT_FAILED = 5,
  GPURT_PROBE_DISABLED = 6
};

/* Element types. */
enum {
  GPURT_DTYPE_INVALID = 0,
  GPURT_DTYPE_F32 = 1,
  GPURT_DTYPE_F16 = 2,
  GPURT_DTYPE_BF16 = 3,
  GPURT_DTYPE_F64 = 4,
  GPURT_DTYPE_I8 = 5,
  GPURT_DTYPE_I32 = 6,
  GPURT_DTYPE_FP8_E4M3 = 7,
  GPURT_DTYPE_FP8_E5M2 = 8,
  GPURT_DTYPE_U8 = 9
};

/* Kernel argument kinds. */
enum {
  GPURT_ARG_BUFFER = 1, /* buffer + offset (+ length): a device pointer */
  GPURT_ARG_I8 = 2,
  GPURT_ARG_I16 = 3,
  GPURT_ARG_I32 = 4,
  GPURT_ARG_I64 = 5,
  GPURT_ARG_U8 = 6,
  GPURT_ARG_U16 = 7,
  GPURT_ARG_U32 = 8,
  GPURT_ARG_U64 = 9,
  GPURT_ARG_F16 = 10,  /* bits in the low 16 bits of value */
  GPURT_ARG_BF16 = 11, /* bits in the low 16 bits of value */
  GPURT_ARG_F32 = 12,  /* bits in the low 32 bits of value */
  GPURT_ARG_F64 = 13,  /* bits of the double */
  GPURT_ARG_ANY = 14   /* kernel_info only: size known, kind not */
};

/* Module formats. */
enum {
  GPURT_MODULE_BUILTIN = 0, /* the plugin's own kernels; data ignored */
  GPURT_MODULE_PTX = 1,
  GPURT_MODULE_CUBIN = 2,
  GPURT_MODULE_FATBIN = 3,
  GPURT_MODULE_METALLIB = 4,
  GPURT_MODULE_METAL_SOURCE = 5
};

/* Copy flags. */
#define GPURT_COPY_SYNC 1u /* return after the copy completed */

/* Event flags. */
#define GPURT_EVENT_TIMING 1u /* the event records time (elapsed_ms) */

/* Device capability flags. */
#define GPURT_DEVICE_UNIFIED_MEMORY 1u
#define GPURT_DEVICE_BF16 2u
#define GPURT_DEVICE_FP8 4u

/* GEMM compute types (1.1). */
enum {
  GPURT_COMPUTE_DEFAULT = 0,  /* f32 accumulation */
  GPURT_COMPUTE_F32 = 1,      /* strict f32 */
  GPURT_COMPUTE_F32_TF32 = 2, /* f32 with tf32 matrix units allowed */
  GPURT_COMPUTE_F16 = 3       /* f16 accumulation */
};

/* GEMM epilogues (1.1). */
enum {
  GPURT_EPILOGUE_NONE = 0,
  GPURT_EPILOGUE_BIAS = 1,      /* D += bias[row] (bias has m entries) */
  GPURT_EPILOGUE_RELU = 2,      /* D = max(D, 0) */
  GPURT_EPILOGUE_BIAS_RELU = 3,
  GPURT_EPILOGUE_GELU = 4,      /* tanh approximation */
  GPURT_EPILOGUE_BIAS_GELU = 5
};

/* GEMM descriptor flags (1.9): gpurt_gemm_desc.flags, combined with |;
 * other bits are GPURT_ERR_INVALID_ARGUMENT. */
enum {
  /* A is constant: nothing enqueued earlier on the run's stream (or
   * recorded earlier in a graph) writes A; a plugin may read A before the
   * work ahead of it completes (e.g. before the wait of a programmatic
   * dependent launch). Work that completed before the run was enqueued
   * (a weight's upload followed by a synchronize) does not count. Meant
   * for weights. Wrong use is undefined results, not a crash. */
  GPURT_GEMM_FLAG_CONST_A = 1
};

/* GEMM prologues (1.10): gpurt_gemm_desc.prologue, what op(B) is made of
 * before the product. Unlike a flag, a prologue is part of the result: a
 * plugin that cannot run one refuses the plan (GPURT_ERR_UNSUPPORTED),
 * never ignores it. Other values are GPURT_ERR_INVALID_ARGUMENT. With a
 * prologue, trans_b is 0, batch_count 1, and b_type f32, f16 or bf16; the
 * transformed values are computed in at least f32 and may or may not be
 * rounded to b_type before the product. */
enum {
  GPURT_GEMM_PROLOGUE_NONE = 0,
  /* Each column x of B (k values) is RMS-normalized and scaled:
   *   x'[p] = x[p] / sqrt(mean(x^2) + norm_eps) * w[p]
   * with w the run's norm_weight (k values of b_type) and norm_eps its
   * norm_eps (finite, >= 0): a transformer's RMSNorm ahead of a linear
   * layer, without writing the normalized activations. */
  GPURT_GEMM_PROLOGUE_RMSNORM = 1,
  /* op(B) = silu(G) * U element-wise (SwiGLU), where G is the stored B (k
   * x n, ldb) and U the k x n matrix of the same ldb that follows it, at
   * B + ldb * n elements: B's region holds G then U (2 * ldb * n
   * elements); silu(g) = g / (1 + exp(-g)). An MLP's gate and up
   * projections' output feeding its down projection. */
  GPURT_GEMM_PROLOGUE_SWIGLU = 2
};

/* Paged KV cache layouts (1.5): the order of one page's axes. */
enum {
  GPURT_KV_LAYOUT_NHD = 0, /* [page_size][num_kv_heads][head_dim] */
  GPURT_KV_LAYOUT_HND = 1  /* [num_kv_heads][page_size][head_dim] */
};

/* Attention kinds (1.5). */
enum {
  GPURT_ATTENTION_DECODE = 1, /* one query row per request */
  GPURT_ATTENTION_PREFILL = 2 /* ragged query rows per request (qo_indptr) */
};

/* Collectives (1.6): the bytes of a communicator's unique id. */
#define GPURT_COMM_ID_BYTES 128

/* Collective operations (1.6): gpurt_coll_op.kind. */
enum {
  GPURT_COLL_ALL_REDUCE = 1,     /* recv = reduce over ranks of send */
  GPURT_COLL_ALL_GATHER = 2,     /* recv[r * count ..] = send of rank r */
  GPURT_COLL_REDUCE_SCATTER = 3, /* recv of rank r = reduce of send[r * count ..] */
  GPURT_COLL_BROADCAST = 4,      /* recv = send of rank `peer` (the root) */
  GPURT_COLL_SEND = 5,           /* send to rank `peer` */
  GPURT_COLL_RECV = 6            /* recv from rank `peer` */
};

/* Reductions (1.6): gpurt_coll_op.reduce. */
enum {
  GPURT_REDUCE_SUM = 0,
  GPURT_REDUCE_MAX = 1
};

#define GPURT_MAX_KERNEL_PARAMS 32
#define GPURT_NAME_LEN 256

/* ------------------------------------------------------------------ */
/* Built-in kernels (module format GPURT_MODULE_BUILTIN)               */
/* ------------------------------------------------------------------ */
/*
 * Every plugin's built-in module has these kernels, with exactly these
 * parameters, so the conformance suite runs unchanged on every backend.
 * T is one of f32, f16, bf16 (the suffix of the name). Indexing is one
 * element per thread: i = blockIdx.x * blockDim.x + threadIdx.x, and a
 * thread with i >= n does nothing (no grid-stride loop: a grid too small
 * leaves elements unwritten, which the suite detects). Arithmetic is done
 * in f32 and rounded to T (round to nearest even).
 *
 *   fill_T (BUFFER y, T value, U64 n)             y[i] = value
 *   scale_T(BUFFER y, BUFFER x, F32 alpha, U64 n) y[i] = alpha * x[i]
 *   axpy_T (BUFFER y, BUFFER x, F32 alpha, U64 n) y[i] = alpha * x[i] + y[i]
 *   add_T  (BUFFER z, BUFFER x, BUFFER y, U64 n)  z[i] = x[i] + y[i]
 *   mul_T  (BUFFER z, BUFFER x, BUFFER y, U64 n)  z[i] = x[i] * y[i]
 *   silu_mul_T(BUFFER z, BUFFER g, BUFFER u, U64 n)
 *                           z[i] = g[i] / (1 + exp(-g[i])) * u[i]
 *                           (SiLU(gate) * up of a gated MLP)
 *   softcap_T(BUFFER y, BUFFER x, F32 cap, U64 n)
 *                           y[i] = cap * tanh(x[i] / cap) (logits soft cap)
 *   sleep_ns(U64 ns)        each thread waits about ns nanoseconds (for
 *                           ordering and timing tests; launch 1 thread)
 *
 * T value is passed with kind GPURT_ARG_F32 / F16 / BF16 matching T.
 *
 * The row kernels of a decoder follow. Their grid and block must be
 * one-dimensional (y and z 1: INVALID_ARGUMENT otherwise); matrices are
 * row-major and dense; index and position arrays are int32; f32 math as
 * above. "One block per row": row r = blockIdx.x, rows at or past grid.x
 * are left unwritten, the block's threads (any count up to the device's
 * limit) share the row. The others are one thread per item, as above.
 *
 *   rmsnorm_T(BUFFER y, BUFFER x, BUFFER w, F32 eps, U64 rows, U64 cols)
 *       one block per row: s = 1 / sqrt(sum_c x[r][c]^2 / cols + eps),
 *       y[r][c] = (x[r][c] * s) * w[c]; cols >= 1; y may be x
 *   rope_llama_T(BUFFER x, BUFFER pos, F32 theta, U64 tokens, U64 heads, U64 head_dim)
 *   rope_neox_T(BUFFER x, BUFFER pos, F32 theta, U64 tokens, U64 heads, U64 head_dim)
 *       rotary embedding in place on x [tokens][heads][head_dim] (head_dim
 *       even), one thread per rotated pair: i over tokens*heads*head_dim/2
 *       gives token t, head h, pair j < head_dim/2; inv = 1 / theta^(2j /
 *       head_dim), a = pos[t] * inv, (u, v) -> (u cos a - v sin a,
 *       u sin a + v cos a), where (u, v) is (x[2j], x[2j+1]) for llama
 *       (interleaved pairs) and (x[j], x[j + head_dim/2]) for neox
 *       (half-split, as Hugging Face's rotate_half)
 *   embed_T(BUFFER y, BUFFER table, BUFFER ids, U64 tokens, U64 cols, U64 vocab)
 *       one thread per element i < tokens*cols: y[t][c] = table[ids[t]][c]
 *       (table: vocab rows of cols); an id outside [0, vocab) gives zeros
 *   argmax_T(BUFFER idx, BUFFER x, U64 rows, U64 cols)
 *       one block per row: idx[r] = the c of the largest x[r][c]; ties go
 *       to the lowest c; -0 equals +0; NaN is below every number
 *   sample_T(BUFFER idx, BUFFER x, U64 rows, U64 cols, U64 top_k, F32 top_p, F32 temperature, U64 seed)
 *       one block per row: idx[r] is a token drawn from row r's logits.
 *       Order the row by (value descending, index ascending), as argmax.
 *       top_k == 1 or temperature <= 0: the argmax. Else keep the first
 *       top_k (0 or more than cols: all); w[c] = exp((x[c] - max) /
 *       temperature); if top_p < 1, keep the shortest prefix whose w sum
 *       is at least top_p times the kept sum (top_p <= 0: the first
 *       element); then with u = (splitmix64(seed + (r + 1) *
 *       0x9E3779B97F4A7C15) >> 40) / 2^24 in [0, 1), where splitmix64(z)
 *       is z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
 *       z *= 0x94D049BB133111EB; z ^ (z >> 31), idx[r] is the first kept
 *       element, in order, whose running w sum exceeds u times the kept
 *       sum. The same inputs and seed give the same token on a backend;
 *       backends agree up to the rounding of the w sums at a boundary.
 *       Non-finite logits: idx[r] is always an index of the row, never -1.
 *       A row whose maximum is not finite (an element is +Inf, or every
 *       element is -Inf or NaN) gives the argmax: the first +Inf; the
 *       first -Inf when there is no number; 0 when every element is NaN
 *       (the caller cannot tell that row from a real token 0: check the
 *       logits when it matters). Otherwise a weight w that is NaN (a NaN
 *       logit; -Inf at an infinite temperature) is 0, so a NaN or -Inf
 *       element is never drawn. Softmax's limit puts all the mass on a
 *       +Inf logit, hence the argmax; NaN carries no information, hence
 *       weight 0 and the lowest rank, as argmax_T ranks it.
 *   sample_rows_T(BUFFER out, BUFFER x, BUFFER params, U64 rows, U64 cols, U64 hist)
 *       (1.8) per-request sampling, one block per row: row r of x (logits,
 *       rows x cols, cols in 1 .. 2^31-1) is request r, with its own
 *       parameters in params, which holds per-row arrays of all `rows`
 *       rows (R = rows; byte offsets): u64 seed[R] at 0, u64 offset[R] at
 *       8R, f32 temperature[R] at 16R, i32 top_k[R] at 20R, f32 top_p[R]
 *       at 24R, f32 min_p[R] at 28R, f32 repetition_penalty[R] at 32R,
 *       f32 presence_penalty[R] at 36R, i32 history[R][hist] at 40R
 *       (hist <= 65536 slots per row; 40R + 4R*hist bytes in all; any
 *       alignment). out: i32 token[R] at 0, f32 logprob[R] at 4R.
 *       1. Penalties, in place on x (rounded to T): for each distinct id
 *       of the row's history in [0, cols) (others, e.g. -1 padding, are
 *       skipped), v = x[id]; if repetition_penalty is finite, > 0 and not
 *       1: v = v > 0 ? v / rp : v * rp; if presence_penalty is finite and
 *       not 0: v = v - pp; x[id] = v.
 *       2. Order the row as argmax_T (value descending, index ascending;
 *       NaN lowest). If the maximum is not finite, token is argmax_T's
 *       choice (sample_T's non-finite rule) and logprob is NaN. Else with
 *       t = temperature when temperature > 0, 1 otherwise (0, negative
 *       and NaN are greedy), w[c] = exp((x[c] - max) / t), a NaN w being 0.
 *       3. Greedy or top_k == 1: token is the argmax. Else the kept set
 *       is, in order: the first top_k elements (top_k <= 0 or >= cols:
 *       all); of those, the shortest prefix whose w sum is at least top_p
 *       times their w sum (top_p >= 1 or NaN: all; <= 0: the first
 *       element); of those, the elements with w >= min_p (min_p <= 0 or
 *       NaN: all; the argmax is always kept). With u = (philox(seed,
 *       offset) >> 8) / 2^24 in [0, 1), where philox is the first 32-bit
 *       word of Philox4x32-10 with key (seed low, seed high) and counter
 *       (offset low, offset high, 0, 0) (curand's philox4_32_10 with
 *       subsequence 0 and offset 4 * offset), token is the first kept
 *       element, in order, whose running w sum exceeds u times the kept
 *       sum. The draw depends on the request's seed and offset only, not
 *       on its row: a caller advances offset by one per step.
 *       4. logprob = (x[token] - max) / t - log(sum over the whole row of
 *       w): the chosen token's log-probability after the penalties and
 *       the temperature, before top-k, top-p and min-p.
 *       Rows at or past grid.x are left unwritten; backends agree up to
 *       the rounding of the w sums at a boundary (the mock sums in
 *       double).
 *   add_rmsnorm_T(BUFFER x, BUFFER r, BUFFER w, F32 eps, U64 rows, U64 cols)
 *       the residual add fused into the next RMSNorm, in place on both
 *       (as FlashInfer's fused_add_rmsnorm), one block per row (rows x
 *       cols, cols >= 1): r[r][c] = x[r][c] + r[r][c] rounded to T, then
 *       x[r][c] = rmsnorm_T of that rounded row of r: the same bits as
 *       add_T into r followed by rmsnorm_T(x, r, w) on a backend; x and r
 *       must not overlap. Not in ABI 1.8's list: a plugin may lack it
 *       (kernel_get answers NOT_FOUND); callers fall back to add_T and
 *       rmsnorm_T.
 *   rope_neox_freqs_T(BUFFER x, BUFFER pos, BUFFER inv_freq, U64 tokens, U64 heads, U64 head_dim)
 *       rope_neox_T with the frequencies of a table (f32 inv_freq[j], j <
 *       head_dim/2: any scaling, such as Llama 3.1's) and Hugging Face's
 *       arithmetic in T: a = f32(pos[t]) * inv_freq[j] (f32), c and s are
 *       cos(a) and sin(a) rounded to f32 and then to T (computed in double
 *       on the mock and CUDA; a device without double, Metal, may miss the
 *       f32 rounding by a unit);
 *       (u, v) -> (T(T(u c) - T(v s)), T(T(v c) + T(u s))), each product
 *       and sum rounded to T (x*cos + rotate_half(x)*sin of tables in T).
 *       One thread per pair as rope_neox_T. Not in ABI 1.8's list, as
 *       add_rmsnorm_T.
 */

/* ------------------------------------------------------------------ */
/* Opaque handles                                                      */
/* ------------------------------------------------------------------ */

typedef struct gpurt_error gpurt_error;
typedef struct gpurt_runtime gpurt_runtime;
typedef struct gpurt_buffer gpurt_buffer;           /* device memory */
typedef struct gpurt_host_buffer gpurt_host_buffer; /* pinned host memory */
typedef struct gpurt_stream gpurt_stream;
typedef struct gpurt_event gpurt_event;
typedef struct gpurt_module gpurt_module;
typedef struct gpurt_kernel gpurt_kernel; /* owned by its module */
typedef struct gpurt_gemm_plan gpurt_gemm_plan;
typedef struct gpurt_graph gpurt_graph; /* 1.3 */
typedef struct gpurt_attention gpurt_attention; /* 1.5 */
typedef struct gpurt_comm gpurt_comm; /* 1.6: a communicator's local ranks */

/* ------------------------------------------------------------------ */
/* Structs                                                             */
/* ------------------------------------------------------------------ */

typedef struct gpurt_error_info {
  uint64_t struct_size;
  int32_t code;        /* out: GPURT_ERR_* */
  int32_t reserved;
  int64_t vendor_code; /* out: e.g. the CUresult; 0 when none */
  const char *message; /* out: owned by the error; valid until error_destroy */
  uint64_t message_len; /* out: bytes, no NUL counted */
} gpurt_error_info;

typedef struct gpurt_plugin_info {
  uint64_t struct_size;
  char backend[32];  /* out: "cuda", "metal", "mock" (NUL-terminated) */
  char version[64];  /* out: the plugin's own version string */
  int32_t priority;  /* out: higher is preferred by auto (cuda 300, metal 200, mock 100) */
  int32_t reserved;
} gpurt_plugin_info;

typedef struct gpurt_device_info {
  uint64_t struct_size;
  char name[GPURT_NAME_LEN];  /* out */
  char vendor[64];            /* out */
  char arch[64];              /* out: "sm_90a", "apple9", "cpu" */
  char pci_bus_id[32];        /* out: "0000:17:00.0"; "" where none */
  char driver_version[64];    /* out: human readable, "13.0" */
  uint64_t memory_total;      /* out: bytes */
  uint64_t memory_free;       /* out: bytes, at the time of the call */
  uint32_t compute_major;     /* out: compute capability / GPU family */
  uint32_t compute_minor;     /* out */
  uint32_t driver_version_code; /* out: vendor encoding (CUDA: 13000) */
  uint32_t multiprocessor_count; /* out */
  uint32_t max_threads_per_block; /* out */
  uint32_t warp_size;         /* out */
  uint32_t flags;             /* out: GPURT_DEVICE_* */
  uint32_t reserved;
  char uuid[48];              /* out (1.6): "GPU-xxxxxxxx-xxxx-xxxx-xxxx-
                                 xxxxxxxxxxxx" (lower-case hex, as
                                 nvidia-smi prints it); "" where none */
} gpurt_device_info;

typedef struct gpurt_probe_args {
  uint64_t struct_size;
  gpurt_device_info *devices; /* in: caller-owned array of device_capacity
                                 entries, each with struct_size set; may be
                                 NULL when device_capacity is 0 */
  uint32_t device_capacity;   /* in */
  uint32_t device_count;      /* out: devices found (may exceed capacity;
                                 only min(count, capacity) are written) */
  uint8_t available;          /* out: 1 when a runtime can be created */
  uint8_t reserved[3];
  int32_t score;              /* out: among available plugins of the same
                                 backend, higher is better */
  int32_t reason_code;        /* out: GPURT_PROBE_* */
  char reason[512];           /* out: one human line, NUL-terminated */
} gpurt_probe_args;

/* Optional host log sink, created once by the core at load time. The
 * plugin may call it only from a thread that is inside an ABI call made by
 * the core, never from a thread of its own. level: 0 trace .. 4 error. */
typedef void (*gpurt_log_fn)(void *user, int32_t level, const char *msg,
                             uint64_t msg_len);

typedef struct gpurt_runtime_create_args {
  uint64_t struct_size;
  gpurt_log_fn log;       /* may be NULL */
  void *log_user;         /* passed back to log */
  const char *options;    /* "key=value;key=value", may be NULL; borrowed */
  uint64_t options_len;
} gpurt_runtime_create_args;

typedef struct gpurt_runtime_stats {
  uint64_t struct_size;
  uint64_t live_buffers;      /* out */
  uint64_t live_host_buffers; /* out */
  uint64_t live_streams;      /* out */
  uint64_t live_events;       /* out */
  uint64_t live_modules;      /* out */
  uint64_t live_plans;        /* out */
  uint64_t device_bytes;      /* out: device bytes allocated */
  uint64_t host_bytes;        /* out: pinned host bytes allocated */
} gpurt_runtime_stats;

/* A named integer control of the runtime (fault injection, tuning).
 * Unknown keys are GPURT_ERR_UNSUPPORTED naming the key. The mock knows:
 * "fail_alloc_nth" (the Nth allocation from now fails, 0 = off),
 * "fail_launch_nth" (likewise for launches), "lose_device" (device index
 * to lose; irreversible for the runtime's life), "delay_us" (per-op delay
 * of stream workers). On a lost device every call that would do work
 * returns GPURT_ERR_DEVICE_LOST naming the cause; frees and destroys still
 * release what they hold and succeed. A corrupted guard region found on
 * free is GPURT_ERR_OUT_OF_RANGE naming the buffer (the buffer is freed). */
typedef struct gpurt_control_args {
  uint64_t struct_size;
  const char *key; /* borrowed */
  uint64_t key_len;
  int64_t value;
} gpurt_control_args;

/* One copy. Exactly one source and one destination among:
 *   device:  *_buffer + *_offset
 *   pinned:  *_host + *_offset   (plugin-owned host memory)
 *   pageable: *_ptr               (only with GPURT_COPY_SYNC)
 * stream NULL means the device's default ordering: the copy runs after all
 * work submitted earlier to any stream of the runtime on that device.
 * Device to device across two devices of the runtime (a peer copy): a
 * stream on either device orders it (work on the other device is not
 * waited for: record an event there); with stream NULL it runs after all
 * earlier work on both devices. CUDA enables peer access between the two
 * devices on first use where cuDeviceCanAccessPeer allows; elsewhere the
 * driver stages the copy through host memory.
 * Without GPURT_COPY_SYNC the call only enqueues the copy on `stream`
 * (which must then be non-NULL). *_offset applies to *_buffer and *_host
 * only: with a pageable *_ptr a non-zero *_offset is refused
 * (GPURT_ERR_INVALID_ARGUMENT; the caller offsets the pointer itself),
 * never ignored. [offset, offset+size) must lie inside the buffer or host
 * buffer (GPURT_ERR_OUT_OF_RANGE), also when size is 0.
 * Checks, in this order (csrc/gp_contract.c, gp_copy_check): unknown
 * flags; no stream without GPURT_COPY_SYNC; exactly one destination, then
 * exactly one source; a *_ptr with a non-zero *_offset (dst, then src); a
 * *_ptr without GPURT_COPY_SYNC; then handles, devices and ranges. */
typedef struct gpurt_copy_args {
  uint64_t struct_size;
  gpurt_stream *stream;
  uint32_t flags;        /* GPURT_COPY_* */
  uint32_t reserved;
  uint64_t size;         /* bytes; 0 is a valid no-op */
  gpurt_buffer *dst_buffer;
  gpurt_host_buffer *dst_host;
  void *dst_ptr;         /* borrowed for the call */
  uint64_t dst_offset;
  gpurt_buffer *src_buffer;
  gpurt_host_buffer *src_host;
  const void *src_ptr;   /* borrowed for the call */
  uint64_t src_offset;
} gpurt_copy_args;

/* Fill a range of device memory with a 1-, 2- or 4-byte pattern. A value
 * wider than element_size (value >> (8 * element_size) != 0) is refused
 * (GPURT_ERR_INVALID_ARGUMENT), never truncated. [offset, offset+size) must
 * lie inside the buffer (GPURT_ERR_OUT_OF_RANGE), also when size is 0.
 * Checks, in this order (gp_memset_check): element_size; offset and size
 * multiples of it; value fits; then handles, devices and the range. */
typedef struct gpurt_memset_args {
  uint64_t struct_size;
  gpurt_stream *stream;  /* NULL: default ordering, synchronous */
  gpurt_buffer *buffer;
  uint64_t offset;       /* bytes, multiple of element_size */
  uint64_t size;         /* bytes, multiple of element_size */
  uint32_t value;        /* the pattern: fits in element_size bytes */
  uint32_t element_size; /* 1, 2 or 4 */
} gpurt_memset_args;

typedef struct gpurt_module_load_args {
  uint64_t struct_size;
  uint32_t device;
  int32_t format;        /* GPURT_MODULE_* */
  const void *data;      /* borrowed; may be NULL for BUILTIN */
  uint64_t data_len;
  const char *name;      /* for messages; borrowed */
  uint64_t name_len;
} gpurt_module_load_args;

typedef struct gpurt_kernel_info {
  uint64_t struct_size;
  uint32_t num_params;        /* out */
  uint32_t max_threads_per_block; /* out */
  uint32_t static_shared_bytes;   /* out */
  uint32_t reserved;
  int32_t param_kind[GPURT_MAX_KERNEL_PARAMS];  /* out: GPURT_ARG_* */
  uint32_t param_size[GPURT_MAX_KERNEL_PARAMS]; /* out: bytes */
} gpurt_kernel_info;

/* One packed kernel argument. For GPURT_ARG_BUFFER the kernel receives the
 * device address buffer+offset; length (bytes, 0 = to the end) bounds the
 * view for plugins that can check it. Scalars: `value` holds the bits,
 * `size` their width in bytes (8 for a buffer). No struct_size: an element
 * of gpurt_launch_args.args, fixed stride (see RULES, Versioning). */
typedef struct gpurt_kernel_arg {
  int32_t kind;   /* GPURT_ARG_* */
  uint32_t size;  /* bytes the kernel parameter occupies */
  uint64_t value;
  gpurt_buffer *buffer;
  uint64_t offset;
  uint64_t length;
} gpurt_kernel_arg;

typedef struct gpurt_launch_args {
  uint64_t struct_size;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_mem_bytes;  /* dynamic shared memory */
  uint32_t num_args;
  const gpurt_kernel_arg *args; /* borrowed: num_args entries */
} gpurt_launch_args;

/* One launch of a batch (1.2): a kernel and its launch arguments. No
 * struct_size: an element of launch_batch's items, fixed stride (see RULES,
 * Versioning). */
typedef struct gpurt_launch_item {
  gpurt_kernel *kernel;
  const gpurt_launch_args *args; /* borrowed for the call; struct_size set */
} gpurt_launch_item;

/* GEMM (1.1). Column-major, as BLAS. op(A) is m x k, op(B) is k x n, C and
 * D are m x n. Leading dimensions and strides are in elements. A row-major
 * caller swaps A and B and m and n. The result is (as cuBLASLt defines it)
 *   D = scale_d * epilogue(alpha * scale_a * scale_b * op(A) op(B)
 *                          + beta * C [+ bias])
 * where the bias (m entries, one per row) is added before relu/gelu, and
 * the scales (fp8 only; f32 in device memory; NULL = 1.0) are 1.0 for
 * other types. scale_a/scale_b need fp8 A/B and scale_d an fp8 D; a scale
 * set otherwise is GPURT_ERR_INVALID_ARGUMENT. C is not read when beta == 0 and may then be NULL; ldc is
 * still validated (>= m).
 *
 * flags (1.9; before 1.9 the byte was reserved and 0): promises the caller
 * makes for every run of the plan, GPURT_GEMM_FLAG_* combined with |. A bit
 * this header does not define is GPURT_ERR_INVALID_ARGUMENT ("flags ... has
 * unknown bits"). A flag never changes the result a correct caller gets; a
 * plugin may ignore any of them. A plugin older than 1.9 ignores the byte,
 * so a core sends a nonzero flags byte only to a plugin whose negotiated
 * minor is >= 9. */
typedef struct gpurt_gemm_desc {
  uint64_t struct_size;
  int32_t a_type, b_type, c_type, d_type; /* GPURT_DTYPE_* */
  int32_t compute_type;  /* GPURT_COMPUTE_* */
  int32_t epilogue;      /* GPURT_EPILOGUE_* */
  int32_t bias_type;     /* dtype of bias, when the epilogue has one */
  uint8_t trans_a;       /* 1: op(A) = A^T */
  uint8_t trans_b;
  uint8_t flags;         /* 1.9 (before: reserved, 0): GPURT_GEMM_FLAG_* */
  uint8_t prologue;      /* 1.10 (before: reserved, 0): GPURT_GEMM_PROLOGUE_* */
  uint64_t m, n, k;
  uint64_t lda, ldb, ldc, ldd;
  uint64_t batch_count;  /* >= 1 */
  int64_t stride_a, stride_b, stride_c, stride_d; /* elements per batch */
  uint32_t align_a, align_b, align_c, align_d;    /* byte alignment the
                                  caller guarantees for each pointer; 0 or
                                  less than the element size = the element
                                  size (natural alignment) */
} gpurt_gemm_desc;

typedef struct gpurt_gemm_run_args {
  uint64_t struct_size;
  gpurt_buffer *a; uint64_t a_offset;
  gpurt_buffer *b; uint64_t b_offset;
  gpurt_buffer *c; uint64_t c_offset; /* may be NULL when beta == 0 */
  gpurt_buffer *d; uint64_t d_offset;
  gpurt_buffer *bias; uint64_t bias_offset;
  /* fp8: per-tensor f32 scales in device memory, or NULL for 1.0 */
  gpurt_buffer *scale_a; uint64_t scale_a_offset;
  gpurt_buffer *scale_b; uint64_t scale_b_offset;
  gpurt_buffer *scale_d; uint64_t scale_d_offset;
  double alpha;
  double beta;
  /* optional caller workspace; NULL: the plugin's per-stream workspace */
  gpurt_buffer *workspace; uint64_t workspace_offset; uint64_t workspace_size;
  /* 1.10: GPURT_GEMM_PROLOGUE_RMSNORM's weight (k elements of b_type,
   * norm_weight_offset a multiple of 16) and epsilon (finite, >= 0, within
   * an f32's range); norm_weight NULL and norm_eps 0 for any other
   * prologue */
  gpurt_buffer *norm_weight; uint64_t norm_weight_offset;
  double norm_eps;
} gpurt_gemm_run_args;


/* ---- Graphs (1.3) ---- */
/*
 * A graph is a list of operations recorded by the core and handed to the
 * plugin whole: graph_create begins and ends the capture inside one call
 * (a goroutine may move between OS threads between two calls), builds the
 * device's graph and instantiates it; graph_launch replays it on a stream
 * with one call. Each item is validated as its eager call would be (same
 * checks, same messages, prefixed "item N: "). What an item refers to
 * (buffers, host buffers, kernels, plans, events) must stay alive until
 * graph_destroy: the core guarantees it; a plugin still validates every
 * handle when it uses it and never crashes on a stale one.
 */

/* Operation kinds of a graph item. */
enum {
  GPURT_GRAPH_OP_LAUNCH = 1,       /* kernel + launch */
  GPURT_GRAPH_OP_GEMM = 2,         /* plan + gemm (workspace included) */
  GPURT_GRAPH_OP_COPY = 3,         /* copy: device and pinned endpoints only */
  GPURT_GRAPH_OP_MEMSET = 4,       /* memset */
  GPURT_GRAPH_OP_EVENT_RECORD = 5, /* event: recorded at this point */
  GPURT_GRAPH_OP_EVENT_WAIT = 6,   /* event: later items wait for it */
  GPURT_GRAPH_OP_CALL = 7          /* 1.7: slot + object + args: any slot
                                      graph_recordable answers 1 for */
};

/* How graph_update applied a change (gpurt_graph_update_args.applied). */
enum {
  GPURT_GRAPH_UPDATE_NONE = 0,          /* count was 0 */
  GPURT_GRAPH_UPDATE_PATCHED = 1,       /* nodes patched in place */
  GPURT_GRAPH_UPDATE_EXEC_UPDATE = 2,   /* re-captured, executable updated */
  GPURT_GRAPH_UPDATE_REINSTANTIATED = 3 /* re-captured and re-instantiated */
};

/* One recorded operation. Only the fields of its kind are read; the
 * others must be NULL. The argument structs are the eager calls' own, read
 * during the call only (the plugin keeps copies), with these rules: their
 * `stream` field must be NULL (the stream is graph_launch's); a copy's
 * flags must be 0 and its endpoints device buffers or host buffers (no
 * pageable pointer); a memset's size may not be 0 (the core drops empty
 * ones). */
typedef struct gpurt_graph_item {
  uint64_t struct_size;
  int32_t kind;   /* GPURT_GRAPH_OP_* */
  uint32_t reserved;
  gpurt_kernel *kernel;                 /* LAUNCH */
  const gpurt_launch_args *launch;      /* LAUNCH */
  gpurt_gemm_plan *plan;                /* GEMM */
  const gpurt_gemm_run_args *gemm;      /* GEMM */
  const gpurt_copy_args *copy;          /* COPY */
  const gpurt_memset_args *memset;      /* MEMSET */
  gpurt_event *event;                   /* EVENT_RECORD, EVENT_WAIT */
  /* ---- 1.7: CALL ----
   * One call of a table slot, recorded: `slot` is the byte offset of the
   * slot in gpurt_api (offsetof(gpurt_api, quant_matmul), ...), `object`
   * the handle the slot takes after the runtime and the stream (the
   * attention of attention_run, the kernel of launch, the plan of
   * gemm_run; NULL for a slot that takes only its argument struct), `args`
   * the slot's own argument struct exactly as for the eager call, with its
   * `stream` field (if it has one) NULL. The item is checked as the eager
   * call would be, with the eager call's messages (prefixed "item N: ");
   * a slot the plugin does not record (graph_recordable answers 0) is
   * GPURT_ERR_UNSUPPORTED naming it. A recorded attention_run runs the
   * plan its attention holds at the replay's point in the stream's order,
   * as an eager run enqueued there would (plan between replays, into the
   * same fixed buffers): graph_create needs a plan to check the run
   * against, and each graph_launch checks the run against the current
   * plan and its stream as the eager call would. A plugin whose captured
   * kernels depend on the plan's shape refuses, at graph_launch, a plan of
   * another batch size than the one captured (GPURT_ERR_FAILED_PRECONDITION
   * naming both: capture a graph per batch-size bucket, or pad the batch);
   * the CUDA plugin does. A recorded grouped_gemm replays the m_sizes its
   * item was read with (host values, copied). The older kinds stay valid; an item
   * whose struct_size ends before `args` cannot be a CALL. */
  uint64_t slot;                        /* CALL */
  void *object;                         /* CALL: a handle, or NULL */
  const void *args;                     /* CALL: the slot's argument struct */
} gpurt_graph_item;

typedef struct gpurt_graph_create_args {
  uint64_t struct_size;
  uint32_t device;   /* every item's objects are on this device */
  uint32_t flags;    /* 0 */
  uint64_t count;    /* >= 1 */
  const gpurt_graph_item *items; /* borrowed: count entries, item_size apart */
  uint64_t item_size;            /* sizeof(gpurt_graph_item) as the caller
                                    knows it (the array's stride) */
} gpurt_graph_create_args;

/* New arguments for some items of a graph: items[i] replaces item
 * indices[i] of the list given to graph_create. An item keeps its kind
 * and its kernel or plan; a launch may change its scalar and buffer
 * arguments and its geometry, a gemm its operands and alpha/beta, a copy
 * or memset its buffers, offsets and (memset) value, with the same size.
 * Every new item is validated first; an invalid one changes nothing. */
typedef struct gpurt_graph_update_args {
  uint64_t struct_size;
  uint64_t count;
  const uint64_t *indices;       /* borrowed: count entries */
  const gpurt_graph_item *items; /* borrowed: count entries, item_size apart */
  uint64_t item_size;
  int32_t applied;               /* out: GPURT_GRAPH_UPDATE_* */
  uint32_t reserved;
} gpurt_graph_update_args;
/* ---- Quantized and grouped matmul (1.4) ---------------------------- */

/* Matrix multiplication by MLX affine-quantized weights (1.4):
 *   y = x * dequant(W)^T        (row-major: y is n x m, x is n x k)
 * W is m x k (m output features, k input features), stored as MLX's
 * `quantize(w, group_size, bits, mode="affine")` stores it: for bits 8 each
 * element is one unsigned byte q (row-major, k bytes per row; MLX's uint32
 * words read as little-endian bytes), and every group of group_size
 * consecutive elements of a row has one scale s and one bias b (row-major
 * m x k/group_size arrays, scale_type), so that
 *   dequant(W)[i][j] = s[i][j/group_size] * q[i][j] + b[i][j/group_size].
 * In GEMM terms (column-major, as gpurt_gemm_desc) y is the m x n matrix
 * D = dequant(W) * x^T. n is the number of tokens: small n (decode) and
 * large n (prefill) may take different kernels; the result is the same
 * within rounding. The reference accumulates in double and rounds once.
 * Pointers (buffer + offset): w and x 16-byte aligned, the others aligned
 * to their element size; otherwise GPURT_ERR_INVALID_ARGUMENT. bits other
 * than 8 and group sizes other than 32, 64, 128 are GPURT_ERR_UNSUPPORTED;
 * k not a multiple of group_size is GPURT_ERR_INVALID_ARGUMENT. */
typedef struct gpurt_quant_matmul_args {
  uint64_t struct_size;
  int32_t x_type;      /* GPURT_DTYPE_F16 or _BF16; y has the same type */
  int32_t scale_type;  /* GPURT_DTYPE_F16 or _BF16: scales and biases */
  uint32_t bits;       /* 8 */
  uint32_t group_size; /* 32, 64 or 128 */
  uint64_t m;          /* output features: rows of W, columns of y; >= 1 */
  uint64_t n;          /* tokens: rows of x and y; >= 1 */
  uint64_t k;          /* input features; a multiple of group_size */
  gpurt_buffer *w; uint64_t w_offset;           /* m * k * bits/8 bytes */
  gpurt_buffer *scales; uint64_t scales_offset; /* m * k/group_size */
  gpurt_buffer *biases; uint64_t biases_offset; /* m * k/group_size */
  gpurt_buffer *x; uint64_t x_offset;           /* n * k */
  gpurt_buffer *y; uint64_t y_offset;           /* out: n * m */
} gpurt_quant_matmul_args;

/* Grouped GEMM for mixture-of-experts (1.4): group_count problems that
 * share n and k, with m_sizes[g] rows each (0 allowed), all row-major:
 *   D_g = A_g * B_g^T        (D_g is m_g x n, A_g is m_g x k, B_g is n x k)
 * A and D hold the groups' rows one after another (M = sum of m_sizes
 * rows; group g starts at row m_0 + ... + m_{g-1}); B holds group_count
 * matrices of n x k, one after another.
 * bf16: A and B are GPURT_DTYPE_BF16, no scales.
 * fp8 (DeepSeek-style block scales): A and B are GPURT_DTYPE_FP8_E4M3,
 * k is a multiple of 128, and f32 scales multiply 1 x 128 blocks of A and
 * 128 x 128 blocks of B:
 *   scale_a: M x k/128 (row-major): A_g[r][c] counts as a * scale_a[row][c/128]
 *   scale_b: group_count x ceil(n/128) x k/128: B_g[j][c] counts as
 *            b * scale_b[g][j/128][c/128]
 * D is GPURT_DTYPE_BF16. The reference accumulates in double and rounds
 * once. a and b 16-byte aligned, the others aligned to their element size.
 * m_sizes is host memory, borrowed for the call. M = 0 is a no-op.
 *
 * Row counts on the device (1.11): with m_counts set (and m_sizes NULL),
 * the counts are group_count uint32 values in device memory (4-byte
 * aligned), read by the device when the call runs, in the stream's order:
 * work enqueued before it (a routing kernel) may write them, and a graph
 * replay reads the counts of its own time, so that mixture-of-experts
 * routing needs no host synchronization and a step with it records whole.
 * max_m (>= 1, < 2^32) then stands for M in the operands' sizes: A, D and
 * fp8's scale_a hold max_m rows. The groups take rows in order while they
 * fit: a group that would pass max_m rows in all is cut at max_m, and the
 * groups after it get no rows (the device cannot return an error); D's
 * rows past the counts' total are not written. m_counts NULL: m_sizes
 * gives the counts and max_m must be 0. */
typedef struct gpurt_grouped_gemm_args {
  uint64_t struct_size;
  int32_t ab_type;         /* GPURT_DTYPE_BF16 or _FP8_E4M3 */
  int32_t d_type;          /* GPURT_DTYPE_BF16 */
  uint64_t group_count;    /* >= 1 */
  uint64_t n, k;           /* >= 1 */
  const uint64_t *m_sizes; /* borrowed: group_count row counts */
  gpurt_buffer *a; uint64_t a_offset; /* M * k */
  gpurt_buffer *b; uint64_t b_offset; /* group_count * n * k */
  gpurt_buffer *d; uint64_t d_offset; /* out: M * n */
  gpurt_buffer *scale_a; uint64_t scale_a_offset; /* fp8 only; else NULL */
  gpurt_buffer *scale_b; uint64_t scale_b_offset; /* fp8 only; else NULL */
  /* 1.11: the row counts on the device (above); NULL: m_sizes */
  gpurt_buffer *m_counts; uint64_t m_counts_offset; /* uint32 [group_count] */
  uint64_t max_m;                                    /* with m_counts: rows of A and D; else 0 */
} gpurt_grouped_gemm_args;

/* ---- Attention over a paged KV cache (1.5) -------------------------
 *
 * The cache follows FlashInfer's paged layout. K and V live in two device
 * regions of num_pages pages each; a page holds page_size tokens of
 * num_kv_heads heads of head_dim elements, in NHD or HND order (the
 * GPURT_KV_LAYOUT_* comments), so one page is page_size * num_kv_heads *
 * head_dim elements and page p starts at element p * that. Request b of a
 * batch owns the pages indices[indptr[b] .. indptr[b+1]) in order; its
 * last page holds last_page_len[b] tokens (1 .. page_size), so its length
 * is (indptr[b+1] - indptr[b] - 1) * page_size + last_page_len[b] and it
 * must have at least one page. indptr (batch + 1 entries, indptr[0] == 0,
 * non-decreasing), indices and last_page_len (batch entries) are int32 in
 * device memory. Every index must be < num_pages: the mock checks it when
 * the work runs (and writes NaN where it is violated); GPU plugins do not
 * read device memory on the host, and an index out of range there is
 * undefined behaviour of the kernel.
 *
 * Queries and outputs are row-major [rows][num_qo_heads][head_dim], of the
 * cache's dtype. Decode has one row per request (rows = batch); prefill has
 * qo_indptr[b+1] - qo_indptr[b] >= 1 rows for request b (rows =
 * qo_indptr[batch]). Query head h reads KV head h / (num_qo_heads /
 * num_kv_heads) (GQA: num_qo_heads must be a multiple of num_kv_heads, any
 * group size). For query row i of a request with qo_len rows and kv_len
 * tokens, its position is kv_len - qo_len + i (decode: kv_len - 1); with
 * the causal mask it sees tokens 0 .. that position, without it all
 * kv_len tokens. The score of a token is s = sm_scale * dot(q, k); with a
 * soft cap c > 0 it is c * tanh(s / c); the output is the softmax-weighted
 * sum of the V rows. Accumulation is in f32 or wider.
 *
 * Offsets: those of q, o, k, v, k_rows and v_rows are multiples of 16
 * bytes, those of the int32 arrays multiples of 4 (INVALID_ARGUMENT
 * otherwise).
 *
 * What 1.5 defines: dtype F16 or BF16 (cache, queries and outputs alike),
 * head_dim 64, 128 or 256, any page_size >= 1, both layouts, causal or not
 * (prefill; decode has nothing to mask). A plugin that cannot run a
 * combination says GPURT_ERR_UNSUPPORTED naming the field.
 *
 * fp8 KV caches (1.8): layout.dtype GPURT_DTYPE_FP8_E4M3 (OCP e4m3fn) makes
 * the pages one byte per element; layout.qo_dtype (F16 or BF16) is then the
 * type of the queries, the outputs and the rows kv_append writes (0 for a
 * 16-bit cache, whose queries are of its dtype). One scale per cache for K
 * and one for V (per layer: a cache is one layer's K and V), passed with
 * every kv_append and attention_run of the cache: k_scale, v_scale
 * positive and finite (ignored for a 16-bit cache). kv_append stores
 * e4m3(row / scale), rounded to nearest even and saturated to +-448 (NaN
 * stays NaN); attention reads element * scale. Per cache, not per head:
 * FlashInfer's kernels take the K scale folded into sm_scale and the V
 * scale as a multiply of the output, both scalars, as vLLM's per-layer
 * k_scale / v_scale. */

/* The cache's shape (no struct_size: embedded, fixed forever). */
typedef struct gpurt_kv_layout {
  int32_t dtype;         /* GPURT_DTYPE_F16 or GPURT_DTYPE_BF16 */
  int32_t layout;        /* GPURT_KV_LAYOUT_* */
  uint32_t page_size;    /* tokens per page, >= 1 */
  uint32_t num_kv_heads; /* >= 1 */
  uint32_t head_dim;     /* 64, 128, 256 */
  int32_t qo_dtype;      /* 1.8 (before: reserved, 0): dtype FP8_E4M3: the
                            queries', outputs' and appended rows' type, F16
                            or BF16; else 0 */
} gpurt_kv_layout;

/* The cache's memory and page table (embedded, fixed forever). Buffers
 * are borrowed for the call; the work enqueued reads (append: writes) them
 * when it runs. */
typedef struct gpurt_kv_pages {
  gpurt_buffer *k; uint64_t k_offset;   /* num_pages pages of K */
  gpurt_buffer *v; uint64_t v_offset;   /* num_pages pages of V */
  uint64_t num_pages;                   /* >= 1 */
  gpurt_buffer *indptr; uint64_t indptr_offset;   /* int32 [batch + 1] */
  gpurt_buffer *indices; uint64_t indices_offset; /* int32 [indptr[batch]] */
  gpurt_buffer *last_page_len; uint64_t last_page_len_offset; /* int32 [batch] */
} gpurt_kv_pages;

/* Writes nnz new rows into the pages (FlashInfer's append_paged_kv_cache):
 * row i of k_rows and v_rows ([nnz][num_kv_heads][head_dim], the cache's
 * dtype) goes to request batch_indices[i] at token positions[i], i.e. into
 * page indices[indptr[b] + pos / page_size], slot pos % page_size. The page
 * table must already count the new tokens (pos < the request's length). */
typedef struct gpurt_kv_append_args {
  uint64_t struct_size;
  gpurt_kv_layout layout;
  gpurt_kv_pages pages;
  uint32_t batch_size;   /* requests in the page table, >= 1 */
  uint32_t reserved;
  uint64_t nnz;          /* rows to append; 0 is a no-op */
  gpurt_buffer *k_rows; uint64_t k_rows_offset;
  gpurt_buffer *v_rows; uint64_t v_rows_offset;
  gpurt_buffer *batch_indices; uint64_t batch_indices_offset; /* int32 [nnz] */
  gpurt_buffer *positions; uint64_t positions_offset;         /* int32 [nnz] */
  float k_scale, v_scale; /* 1.8: an fp8 cache's scales (> 0, finite) */
  /* 1.10: a rotary embedding on the way in, with rope_neox_freqs_T's
   * arithmetic (the built-ins above): with inv_freq set (head_dim / 2 f32
   * frequencies, 4-byte aligned), each K row is rotated at its position
   * before it is stored (k_rows itself is not written), and q, when set
   * (nnz rows of num_qo_heads heads of head_dim, the rows' type, 16-byte
   * aligned), is rotated in place at the same positions, every row of it
   * (the rows the append skips too), so that no rotary kernel runs between
   * the QKV projection and the attention. A 16-bit cache (else
   * GPURT_ERR_UNSUPPORTED; a plugin may refuse it altogether the same
   * way). inv_freq NULL: no rotation; q must then be
   * NULL and num_qo_heads 0; q set needs num_qo_heads in 1 .. 65536.
   * reserved2 is 0. */
  gpurt_buffer *inv_freq; uint64_t inv_freq_offset;
  gpurt_buffer *q; uint64_t q_offset;
  uint32_t num_qo_heads;
  uint32_t reserved2;
} gpurt_kv_append_args;

/* What stays fixed across steps: an attention object is made once per
 * shape and reused; each step plans it (attention_plan) and runs it
 * (attention_run) once per layer. */
typedef struct gpurt_attention_desc {
  uint64_t struct_size;
  int32_t kind;            /* GPURT_ATTENTION_* */
  uint32_t num_qo_heads;   /* a multiple of layout.num_kv_heads */
  gpurt_kv_layout layout;
  uint8_t causal;          /* prefill: 1 = causal mask; decode: must be 0 */
  uint8_t reserved[7];
  double sm_scale;         /* 0: 1 / sqrt(head_dim); else > 0, finite */
  double logits_soft_cap;  /* 0: none; else > 0, finite */
  uint32_t max_batch_size; /* the largest batch a plan may have, >= 1 */
  uint32_t reserved2;
  uint64_t max_rows;       /* prefill: the most query rows a plan may have
                              (>= 1); decode: ignored (= max_batch_size) */
} gpurt_attention_desc;

/* One step's schedule, from host copies of the page table's counts (the
 * same values the device arrays of the runs hold). Pointers are borrowed
 * for the call. */
typedef struct gpurt_attention_plan_args {
  uint64_t struct_size;
  uint32_t batch_size;            /* 1 .. max_batch_size */
  uint32_t reserved;
  const int32_t *qo_indptr;       /* prefill: [batch + 1]; decode: NULL */
  const int32_t *kv_indptr;       /* [batch + 1], pages */
  const int32_t *kv_last_page_len; /* [batch] */
} gpurt_attention_plan_args;

/* One run of the current plan. q and o are [rows][num_qo_heads][head_dim];
 * pages hold the page table the plan was made from (same values); prefill
 * also passes the device copy of qo_indptr. */
typedef struct gpurt_attention_run_args {
  uint64_t struct_size;
  gpurt_buffer *q; uint64_t q_offset;
  gpurt_buffer *o; uint64_t o_offset;
  gpurt_kv_pages pages;
  gpurt_buffer *qo_indptr; uint64_t qo_indptr_offset; /* prefill: int32 [batch + 1] */
  float k_scale, v_scale; /* 1.8: an fp8 cache's scales (> 0, finite) */
} gpurt_attention_run_args;

/* ---- Collectives (1.6) ----------------------------------------------
 *
 * A communicator (gpurt_comm) joins nranks ranks, one device each, as
 * NCCL does. A handle holds the ranks of one runtime: all of them (one
 * process drives several devices: nranks == 0 in comm_create) or some
 * (one process per device, or per group of devices: the processes share
 * a unique id made by comm_unique_id in any one of them and passed by the
 * caller, e.g. over its own control channel).
 *
 * comm_run enqueues a list of operations (gpurt_coll_op) as one group
 * (ncclGroupStart .. ncclGroupEnd inside the call): each on its stream,
 * asynchronously; the sends and receives of one group run concurrently
 * (a group may hold a send and a receive between two ranks in either
 * order). Collectives are matched across ranks by order: every rank
 * issues the same collectives (kind, dtype, reduce, count, root) in the
 * same order, and a handle with several local ranks issues each
 * collective for all of them in one call (one thread drives them). Within
 * one call all the operations of a rank use one stream. A mismatch the
 * plugin can see in one call (its local ranks) is GPURT_ERR_INVALID_ARGUMENT
 * naming the op; a mismatch across processes is undefined on NCCL (a
 * hang, until comm_abort) and reported by the mock through comm_query.
 *
 * Reductions (all_reduce, reduce_scatter) take GPURT_DTYPE_F32, _F16 or
 * _BF16 (others GPURT_ERR_UNSUPPORTED) and GPURT_REDUCE_SUM or _MAX; the
 * reference accumulates in double, in rank order, and rounds once. Data
 * movement (all_gather, broadcast, send, recv) takes any element type.
 * Sizes are in elements of dtype:
 *   all_reduce:     send and recv count elements (send == recv: in place)
 *   all_gather:     send count, recv nranks * count
 *   reduce_scatter: send nranks * count, recv count
 *   broadcast:      recv count on every rank, send count on the root
 *                   (other ranks: send NULL or ignored)
 *   send:           send count, recv NULL;  recv: recv count, send NULL
 * count 0 is a no-op. Buffers are on the rank's device; in-place ranges
 * are the same buffer and offset (other overlaps are undefined).
 *
 * Errors while the work runs (a peer died, a network error) make the
 * communicator broken: comm_query returns that error from then on, and
 * the caller aborts it (comm_abort) and destroys it. */

/* A communicator's unique id (out of comm_unique_id). */
typedef struct gpurt_comm_id {
  uint64_t struct_size;
  uint8_t bytes[GPURT_COMM_ID_BYTES]; /* out: opaque */
} gpurt_comm_id;

typedef struct gpurt_comm_create_args {
  uint64_t struct_size;
  uint32_t device_count;     /* local ranks of this handle, >= 1 */
  uint32_t nranks;           /* 0: every rank is local (nranks = device_count,
                                rank r on devices[r]); else the communicator's
                                size, >= device_count */
  const uint32_t *devices;   /* borrowed: device_count distinct devices of
                                the runtime */
  uint32_t first_rank;       /* nranks > 0: devices[i] is rank first_rank + i
                                (first_rank + device_count <= nranks); else 0 */
  uint32_t reserved;
  const uint8_t *unique_id;  /* nranks > 0: borrowed, GPURT_COMM_ID_BYTES bytes
                                from comm_unique_id, the same on every rank;
                                else NULL */
  uint64_t unique_id_len;    /* GPURT_COMM_ID_BYTES, or 0 with NULL */
  uint64_t timeout_ms;       /* how long create waits for the other ranks
                                (GPURT_ERR_UNAVAILABLE after); 0: 60000 */
} gpurt_comm_create_args;

/* One operation of a group. Only the fields of its kind are read (the
 * size rules above); the unused buffer must be NULL. */
typedef struct gpurt_coll_op {
  uint64_t struct_size;
  int32_t kind;          /* GPURT_COLL_* */
  int32_t dtype;         /* GPURT_DTYPE_* */
  int32_t reduce;        /* GPURT_REDUCE_*: all_reduce, reduce_scatter; else 0 */
  uint32_t rank;         /* the rank that runs it: one of the handle's */
  uint32_t peer;         /* broadcast: the root; send: the receiver; recv:
                            the sender; else 0 */
  uint32_t reserved;
  uint64_t count;        /* elements (the size rules above) */
  gpurt_stream *stream;  /* on the rank's device; orders the operation */
  gpurt_buffer *send; uint64_t send_offset;
  gpurt_buffer *recv; uint64_t recv_offset;
} gpurt_coll_op;

typedef struct gpurt_comm_run_args {
  uint64_t struct_size;
  uint64_t count;            /* operations, >= 1 */
  const gpurt_coll_op *ops;  /* borrowed: count entries, op_size apart */
  uint64_t op_size;          /* sizeof(gpurt_coll_op) as the caller knows it
                                (the array's stride), >= 8 */
} gpurt_comm_run_args;

/* ------------------------------------------------------------------ */
/* The function table                                                  */
/* ------------------------------------------------------------------ */

typedef struct gpurt_api {
  uint64_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;

  /* ---- 1.0 ---- */

  /* Read an error (never fails). */
  void (*error_get)(const gpurt_error *err, gpurt_error_info *out);
  /* Free an error; NULL is a no-op. */
  void (*error_destroy)(gpurt_error *err);

  /* Static facts about the plugin; no side effects. */
  gpurt_error *(*plugin_info)(gpurt_plugin_info *out);
  /* Can this plugin run here? Creates no context, prints nothing, never
   * hangs; may load the vendor driver library to ask. */
  gpurt_error *(*probe)(gpurt_probe_args *args);
  /* OPTIONAL (may be NULL; the core never calls it, plugins are never
   * unloaded): release process-wide state. Runtimes must have been
   * destroyed (GPURT_ERR_FAILED_PRECONDITION otherwise). */
  gpurt_error *(*shutdown)(void);

  gpurt_error *(*runtime_create)(const gpurt_runtime_create_args *args,
                                 gpurt_runtime **out);
  /* Frees everything the runtime still owns. NULL is a no-op. */
  gpurt_error *(*runtime_destroy)(gpurt_runtime *rt);
  gpurt_error *(*runtime_stats)(gpurt_runtime *rt, gpurt_runtime_stats *out);
  gpurt_error *(*runtime_control)(gpurt_runtime *rt,
                                  const gpurt_control_args *args);

  gpurt_error *(*device_count)(gpurt_runtime *rt, uint32_t *out);
  gpurt_error *(*device_info)(gpurt_runtime *rt, uint32_t device,
                              gpurt_device_info *out);
  /* Waits for all work of this runtime on the device. */
  gpurt_error *(*device_synchronize)(gpurt_runtime *rt, uint32_t device);

  /* Device memory. size > 0. The start is 256-byte aligned (at least).
   * Out of memory names the size and the free. */
  gpurt_error *(*buffer_alloc)(gpurt_runtime *rt, uint32_t device,
                               uint64_t size, gpurt_buffer **out);
  gpurt_error *(*buffer_free)(gpurt_runtime *rt, gpurt_buffer *buf);

  /* Pinned host memory, owned by the plugin; *out_ptr is valid until
   * host_free and 256-byte aligned (at least). */
  gpurt_error *(*host_alloc)(gpurt_runtime *rt, uint64_t size,
                             gpurt_host_buffer **out, void **out_ptr);
  gpurt_error *(*host_free)(gpurt_runtime *rt, gpurt_host_buffer *buf);

  gpurt_error *(*copy)(gpurt_runtime *rt, const gpurt_copy_args *args);
  gpurt_error *(*memset)(gpurt_runtime *rt, const gpurt_memset_args *args);

  gpurt_error *(*stream_create)(gpurt_runtime *rt, uint32_t device,
                                gpurt_stream **out);
  /* Waits for the stream's work, then frees it. */
  gpurt_error *(*stream_destroy)(gpurt_runtime *rt, gpurt_stream *s);
  gpurt_error *(*stream_synchronize)(gpurt_runtime *rt, gpurt_stream *s);
  /* NULL when idle, GPURT_ERR_NOT_READY when work is pending. */
  gpurt_error *(*stream_query)(gpurt_runtime *rt, gpurt_stream *s);
  /* Work later submitted to s waits until ev has completed. */
  gpurt_error *(*stream_wait_event)(gpurt_runtime *rt, gpurt_stream *s,
                                    gpurt_event *ev);

  gpurt_error *(*event_create)(gpurt_runtime *rt, uint32_t device,
                               uint32_t flags, gpurt_event **out);
  gpurt_error *(*event_destroy)(gpurt_runtime *rt, gpurt_event *ev);
  /* s NULL: the event completes once all work submitted earlier to the
   * runtime's streams on the event's device has completed. */
  gpurt_error *(*event_record)(gpurt_runtime *rt, gpurt_event *ev,
                               gpurt_stream *s);
  /* NULL when complete (or never recorded), GPURT_ERR_NOT_READY if not. */
  gpurt_error *(*event_query)(gpurt_runtime *rt, gpurt_event *ev);
  gpurt_error *(*event_synchronize)(gpurt_runtime *rt, gpurt_event *ev);
  /* Milliseconds from start to end; both recorded with GPURT_EVENT_TIMING
   * and complete. */
  gpurt_error *(*event_elapsed)(gpurt_runtime *rt, gpurt_event *start,
                                gpurt_event *end, double *out_ms);

  gpurt_error *(*module_load)(gpurt_runtime *rt,
                              const gpurt_module_load_args *args,
                              gpurt_module **out);
  /* Invalidates the module's kernels. */
  gpurt_error *(*module_unload)(gpurt_runtime *rt, gpurt_module *m);
  gpurt_error *(*kernel_get)(gpurt_runtime *rt, gpurt_module *m,
                             const char *name, uint64_t name_len,
                             gpurt_kernel **out);
  gpurt_error *(*kernel_info)(gpurt_runtime *rt, gpurt_kernel *k,
                              gpurt_kernel_info *out);
  /* Enqueue a kernel on s (non-NULL; NULL is GPURT_ERR_INVALID_ARGUMENT).
   * Arguments are checked against the kernel's parameters (count, size,
   * and kind where known), in this order (gp_launch_check): grid and block
   * non-zero in every dimension; at most GPURT_MAX_KERNEL_PARAMS
   * arguments; args non-NULL when num_args > 0; the count; per argument a
   * known kind, size equal to the kind's width (8 for a buffer), the
   * parameter's kind and size; then each buffer's handle, device and view
   * (offset + length inside the buffer), and for a built-in kernel that
   * the min(n, grid.x * block.x) elements it touches fit every view
   * (GPURT_ERR_OUT_OF_RANGE); then the device's own limits. */
  gpurt_error *(*launch)(gpurt_runtime *rt, gpurt_stream *s, gpurt_kernel *k,
                         const gpurt_launch_args *args);

  /* ---- 1.1 ---- */

  /* Validate a descriptor and choose an algorithm once. An unsupported
   * descriptor is GPURT_ERR_UNSUPPORTED naming the field. */
  gpurt_error *(*gemm_plan_create)(gpurt_runtime *rt, uint32_t device,
                                   const gpurt_gemm_desc *desc,
                                   gpurt_gemm_plan **out);
  gpurt_error *(*gemm_plan_destroy)(gpurt_runtime *rt, gpurt_gemm_plan *p);
  /* Enqueue one run of a plan on s (non-NULL; NULL is
   * GPURT_ERR_INVALID_ARGUMENT). */
  gpurt_error *(*gemm_run)(gpurt_runtime *rt, gpurt_stream *s,
                           gpurt_gemm_plan *p, const gpurt_gemm_run_args *args);

  /* ---- 1.2 ---- */

  /* Enqueue `count` launches on s (non-NULL) in order, with one crossing
   * of the boundary. Every item is validated as launch would before any is
   * enqueued: an invalid item is an error naming its index ("item 3: ...")
   * and nothing is enqueued (out_enqueued gets 0). If the driver refuses a
   * launch midway, the error names the item and out_enqueued counts the
   * launches already enqueued (they stay enqueued, in order); the message
   * then ends "; items 0..I-1 before it stay enqueued" or "; nothing was
   * enqueued". count 0 is a no-op (after the runtime check, whatever s and
   * items are); otherwise s and items must be non-NULL
   * (GPURT_ERR_INVALID_ARGUMENT). out_enqueued may be NULL. */
  gpurt_error *(*launch_batch)(gpurt_runtime *rt, gpurt_stream *s,
                               uint64_t count, const gpurt_launch_item *items,
                               uint64_t *out_enqueued);

  /* ---- 1.3 ---- */

  /* Build a graph of args->count items on args->device (see
   * gpurt_graph_item): the capture begins and ends inside this call. An
   * invalid item is an error naming it ("item 3: ...") and makes nothing. */
  gpurt_error *(*graph_create)(gpurt_runtime *rt,
                               const gpurt_graph_create_args *args,
                               gpurt_graph **out);
  /* Enqueue one replay of the graph on s (non-NULL, on the graph's
   * device), with one call: it runs in s's order like the eager items
   * would, and a later replay runs after an earlier one. */
  gpurt_error *(*graph_launch)(gpurt_runtime *rt, gpurt_graph *g,
                               gpurt_stream *s);
  /* Change the arguments of some items (gpurt_graph_update_args) for the
   * replays enqueued after the call; replays already enqueued keep the old
   * ones. The plugin patches the nodes when it can, else updates or
   * rebuilds the executable graph; `applied` says which. */
  gpurt_error *(*graph_update)(gpurt_runtime *rt, gpurt_graph *g,
                               gpurt_graph_update_args *args);
  /* Frees the graph; replays already enqueued still complete. NULL is a
   * no-op. */
  gpurt_error *(*graph_destroy)(gpurt_runtime *rt, gpurt_graph *g);

  /* ---- 1.4 ---- */

  /* Enqueue y = x * dequant(W)^T (gpurt_quant_matmul_args) on s
   * (non-NULL). Errors name the field. */
  gpurt_error *(*quant_matmul)(gpurt_runtime *rt, gpurt_stream *s,
                               const gpurt_quant_matmul_args *args);
  /* Enqueue the grouped GEMM (gpurt_grouped_gemm_args) on s (non-NULL). */
  gpurt_error *(*grouped_gemm)(gpurt_runtime *rt, gpurt_stream *s,
                               const gpurt_grouped_gemm_args *args);

  /* ---- 1.5 ---- */
  /* Attention over a paged KV cache. */

  /* Enqueue an append of new K/V rows into the cache on s (non-NULL). */
  gpurt_error *(*kv_append)(gpurt_runtime *rt, gpurt_stream *s,
                            const gpurt_kv_append_args *args);
  /* Validate a descriptor and allocate the object's workspace (device,
   * pinned host) for max_batch_size / max_rows. An unsupported descriptor
   * is GPURT_ERR_UNSUPPORTED naming the field. */
  gpurt_error *(*attention_create)(gpurt_runtime *rt, uint32_t device,
                                   const gpurt_attention_desc *desc,
                                   gpurt_attention **out);
  /* Waits for the object's work in flight, then frees it. */
  gpurt_error *(*attention_destroy)(gpurt_runtime *rt, gpurt_attention *a);
  /* Plan one step on s (non-NULL): checks the counts (lengths >= 1, rows
   * within the maxima, prefill causal: qo_len <= kv_len) and enqueues the
   * schedule's upload. Replaces the previous plan: runs enqueued earlier
   * keep the plan they were enqueued with only when they are on the same
   * stream (work on one stream is ordered); the plugin waits, on the host,
   * for its own previous upload before reusing its pinned memory. */
  gpurt_error *(*attention_plan)(gpurt_runtime *rt, gpurt_stream *s,
                                 gpurt_attention *a,
                                 const gpurt_attention_plan_args *args);
  /* Enqueue one run of the current plan on s, which must be the stream of
   * the last attention_plan (GPURT_ERR_FAILED_PRECONDITION otherwise, and
   * before any plan). */
  gpurt_error *(*attention_run)(gpurt_runtime *rt, gpurt_stream *s,
                                gpurt_attention *a,
                                const gpurt_attention_run_args *args);

  /* ---- 1.6 ---- */
  /* Collectives (see "Collectives (1.6)" above). */

  /* Make a new unique id for comm_create (NCCL: ncclGetUniqueId; it
   * names this process's bootstrap endpoint). */
  gpurt_error *(*comm_unique_id)(gpurt_runtime *rt, gpurt_comm_id *out);
  /* Make a communicator's local ranks; returns when every rank joined
   * (GPURT_ERR_UNAVAILABLE after timeout_ms). */
  gpurt_error *(*comm_create)(gpurt_runtime *rt,
                              const gpurt_comm_create_args *args,
                              gpurt_comm **out);
  /* Waits for the communicator's work, then frees it. NULL is a no-op. */
  gpurt_error *(*comm_destroy)(gpurt_runtime *rt, gpurt_comm *c);
  /* Stops the communicator's work in flight without waiting for the other
   * ranks (ncclCommAbort); later calls on it are
   * GPURT_ERR_FAILED_PRECONDITION; comm_destroy still frees the handle. */
  gpurt_error *(*comm_abort)(gpurt_runtime *rt, gpurt_comm *c);
  /* NULL while the communicator is healthy (its work may be pending), else
   * the error that broke it (sticky). */
  gpurt_error *(*comm_query)(gpurt_runtime *rt, gpurt_comm *c);
  /* Enqueue a group of operations (gpurt_comm_run_args). Every op is
   * checked before any is enqueued (errors name it: "op 3: ..."). */
  gpurt_error *(*comm_run)(gpurt_runtime *rt, gpurt_comm *c,
                           const gpurt_comm_run_args *args);

  /* ---- 1.7 ---- */

  /* Whether the plugin records calls of `slot` (a byte offset in
   * gpurt_api, as gpurt_graph_item.slot) in a graph: *out 1 when a
   * GPURT_GRAPH_OP_CALL item of that slot is accepted by graph_create and
   * graph_update, 0 otherwise (an unknown offset is 0, not an error). A
   * plugin answers 1 at least for the slots that have their own item kind
   * (launch, gemm_run, copy, memset) and for the enqueueing ops it can
   * replay: attention_run, kv_append, quant_matmul, grouped_gemm. out NULL
   * is GPURT_ERR_INVALID_ARGUMENT; *out is an output. */
  gpurt_error *(*graph_recordable)(gpurt_runtime *rt, uint64_t slot,
                                   uint8_t *out);

  /* ---- 1.8 ---- */

  /* No new slot: the built-in kernels sample_rows_T (per-request
   * sampling) and fp8 KV caches (gpurt_kv_layout.qo_dtype, the k_scale
   * and v_scale of kv_append and attention_run). */

  /* ---- 1.9 ---- */

  /* No new slot: gpurt_gemm_desc.flags (GPURT_GEMM_FLAG_CONST_A), in the
   * byte that was reserved. */

  /* ---- 1.10 ---- */

  /* No new slot: gpurt_gemm_desc.prologue (GPURT_GEMM_PROLOGUE_*), in the
   * byte that was reserved, and gpurt_gemm_run_args' norm_weight and
   * norm_eps. A plugin older than 1.10 ignores that byte, so a core sends
   * a prologue only to a plugin whose negotiated minor is >= 10. And
   * gpurt_kv_append_args' rotary embedding (inv_freq, q, num_qo_heads),
   * which a core sends only to a plugin of 1.10 or later (an older one
   * reads the struct to its own size and would not rotate). */

  /* ---- 1.11 ---- */

  /* No new slot: gpurt_grouped_gemm_args' row counts on the device
   * (m_counts, max_m), which a core sends only to a plugin of 1.11 or
   * later (an older one reads the struct to its own size and would find
   * m_sizes NULL). */
} gpurt_api;

/* True when the table has slot `field` and it is set. */
#define GPURT_API_HAS(api, field)                                          \
  ((api) != NULL &&                                                        \
   (api)->struct_size >= offsetof(gpurt_api, field) + sizeof((api)->field) && \
   (api)->field != NULL)

/* ------------------------------------------------------------------ */
/* Negotiation                                                         */
/* ------------------------------------------------------------------ */

typedef struct gpurt_negotiate_args {
  uint64_t struct_size;
  uint32_t host_abi_major;   /* in: the core's GPURT_ABI_MAJOR */
  uint32_t host_abi_minor;   /* in */
  uint32_t plugin_abi_major; /* out: always written */
  uint32_t plugin_abi_minor; /* out: always written */
  const gpurt_api *api;      /* out: static; lives until process exit;
                                NULL on failure */
  char message[256];         /* out: why, when the result is not GPURT_OK */
} gpurt_negotiate_args;

/* The entry: returns GPURT_OK, or GPURT_ERR_ABI_MISMATCH when the majors
 * differ (both versions written), or another GPURT_ERR_* with a message. */
typedef int32_t (*gpurt_negotiate_fn)(gpurt_negotiate_args *args);

#ifdef __cplusplus
}
#endif

#endif /* GPURT_H_ */
