/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The 1.4 ops on CUDA: quant_matmul (MLX int8 affine weights) and
 * grouped_gemm (mixture-of-experts, bf16 and fp8 with block scales), with
 * the plugin's own kernels (cuda_quant.cu, in their own embedded fatbin,
 * cuda_quant_fatbin.S), loaded per device on first use by cuda_ownk.c.
 *
 *  quant_matmul, n = 1    gpurt_qgemvr_<x>_<s>_n1, gpurt_qgemvrs_*, gpurt_qgemvrl_*
 *                         (GPURT_CUDA_QGEMV=ring, rings, ringl): the same
 *                         arithmetic with W staged through a shared-memory
 *                         ring (k a multiple of 512, 256 or 1024); not the
 *                         default
 *  quant_matmul, n <= 8   gpurt_qgemvf_<x>_<s>_n<n> (groups of 64, 128) or
 *                         gpurt_qgemv_<x>_<s>_n<n> (32): 32 rows of W per
 *                         block, k split among its warps (tensor cores, n as
 *                         8 columns)
 *  quant_matmul, n <= 64  gpurt_qgemvwf_<x>_<s>_t<NT> / gpurt_qgemvw_*: the
 *                         same with NT = 2, 4, 8 n-tiles of 8 tokens
 *  quant_matmul, n < 128  gpurt_qgemm_<x>_<s>: the tiled tensor-core kernel
 *                         (sm_90 with CUTLASS: only where CUTLASS refuses
 *                         the shape; n >= 65 goes to CUTLASS, see QMM_CL_MIN_N)
 *  quant_matmul, n >= 128 sm_90 (built with CUTLASS): CUTLASS's mixed-input
 *                         GEMM (cuda_cutlass_mixed.cu), W's codes dequantized
 *                         in its mainloop, after a small kernel writes the
 *                         scales and biases as f32 (transposed) into the
 *                         stream's scratch. Otherwise (other GPUs, groups of
 *                         32, m % 8, alignment, GPURT_CUDA_QGEMM=dequant):
 *  quant_matmul, n >= 128 gpurt_qdequant_<x>_<s> writes W as 16-bit values
 *                         into the stream's scratch (m * k * 2 bytes, kept
 *                         and grown), then one cuBLASLt GEMM (prefill: the
 *                         dequantization costs 3 bytes per weight, the GEMM
 *                         2n flops per weight)
 *  grouped_gemm, sm_90    CUTLASS's ptr-array grouped kernels (cuda_cutlass.cu,
 *                         when built with the headers): every group in one
 *                         launch after a small argument kernel; arrays and
 *                         workspace in the stream's scratch. Otherwise, or
 *                         for shapes CUTLASS refuses (n % 8, D alignment):
 *  grouped_gemm           gpurt_ggemm_bf16 / gpurt_ggemm_fp8: the same
 *                         kernel, up to 64 groups per launch; bf16 groups
 *                         of 256 rows or more go to cuBLASLt instead (one
 *                         GEMM each: large groups run at cuBLASLt's speed,
 *                         the many small ones share one launch)
 *  grouped_gemm, counts   gpurt_ggemmc_bf16 / gpurt_ggemmc_fp8 (1.11, the
 *  on the device          row counts in device memory): the same kernel,
 *                         each block building its launch's group table from
 *                         the counts; grids of the most tiles max_m allows
 *
 * Arguments are checked by csrc/gp_quant.c (the same messages as the mock);
 * this file adds what the kernels need (bf16 grouped: k a multiple of 8).
 * Each call is one launch (grouped: one per 64 groups; prefill: two) on
 * the caller's stream; only the prefill scratch's growth allocates (after
 * synchronizing the stream, whose queued work may still read the old one).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_cutlass.h"
#include "cuda_cutlass_mixed.h"
#include "cuda_internal.h"
#include "gp_quant.h"

/* Kernel variants, indexed: GEMV (x type, scale type, n), quant GEMM (x
 * type, scale type), grouped bf16, grouped fp8. */
enum {
  QV_GEMV = 0,
  QV_GEMVF = 32,
  QV_QGEMM = 64,
  QV_GG_BF16 = 68,
  QV_GG_FP8 = 69,
  QV_DEQ = 70,
  QV_GEMVW = 74, /* (x type, scale type, n-tiles 2/4/8, factored) */
  QV_GGC_BF16 = 98, /* grouped, the row counts on the device (1.11) */
  QV_GGC_FP8 = 99,
  QV_GEMVR = 100, /* the ring GEMVs, n = 1 (form: 512-, 256-, 1024-deep chunks; x type, scale type) */
  QV_COUNT = 112
};
_Static_assert((int)QV_COUNT == (int)CU_OWN_QUANT_FNS, "cuda_internal.h's CU_OWN_QUANT_FNS is QV_COUNT");

static const char *tname(int32_t t) { return t == GPURT_DTYPE_F16 ? "f16" : "bf16"; }

/* From this many tokens on, quant_matmul takes the prefill path (CUTLASS's
 * mixed-input GEMM, else W dequantized and cuBLASLt); from QMM_CL_MIN_N on
 * where CUTLASS's mixed-input GEMM takes the shape (sm_90). Below it, up to
 * QMM_W_MAX_N tokens, the skinny GEMV (gpurt_qgemvw*: W read once for all
 * tokens, as the decode GEMV). The former crossover (CUTLASS from n = 9,
 * measured 2.0x faster than the tiled gpurt_qgemm at n = 16 to 64 on the
 * H200, 2026-12-03) left the int8 decoder at batch 32 at 0.38x of bf16:
 * CUTLASS's 128 x 256 tile computes 8x the flops at n = 32 on 32 CTAs for
 * m = 4096. GPURT_CUDA_QMM_MIN_N=9..65536 moves the CUTLASS crossover
 * (=9: the former behaviour, for comparisons). */
#define QMM_LT_MIN_N 128
#define QMM_CL_MIN_N 65
#define QMM_W_MAX_N 64
/* bf16 groups of this many rows or more run as their own cuBLASLt GEMM. */
#define GG_LT_MIN_M 256

#define GG_MAX_GROUPS 64
#define GG_TILE 128
#define QV_ROWS 32 /* GEMV: rows of W per block (cuda_quant.cu) */
#define QV_MAXW 16 /* GEMV: warps per block at most */
#define QV_WARPS_WAVE 0xff /* qgemv_env.warps for GPURT_CUDA_QGEMV_WARPS=wave */
#define QV_PF 0    /* GEMV: batches ahead asked into the L2 (0: none) */
#define QW_PF 1    /* skinny GEMV: the same */
#define QV_PRE 0   /* GEMVs: a warp's first batches asked into the L2 before the PDL wait (0..15; 0 until measured) */
#define QV_FETCH 256 /* GEMVs: bytes the L2 fetches from DRAM for a load of W (32 or 256) */
#define QR_DEFAULT 0 /* n = 1 through the ring GEMV by default: no (its first form lost; see cuda_quant.cu) */
/* The ring GEMVs (cuda_quant.cu): chunk depth, chunks in the ring, blocks
 * an SM. Their dynamic shared memory is NS stages of 32 rows of KC + 64
 * bytes, 32 rows of KC / 16 bytes of scales and of biases, and KC elements
 * of x (cuda_quant.cu's QR_STAGE): gpurt_qgemvr_* 84 KB (two blocks an SM),
 * gpurt_qgemvrs_* 37 KB (five, with its 4 KB of static shared memory),
 * gpurt_qgemvrl_* 114 KB (one, with 16 KB static). */
typedef struct qr_form {
  const char *prefix;
  uint32_t kc, ns, per_sm;
} qr_form;
static const qr_form qr_forms[3] = {
    {"gpurt_qgemvr", 512, 4, 2}, {"gpurt_qgemvrs", 256, 3, 5}, {"gpurt_qgemvrl", 1024, 3, 1}};
static uint32_t qr_smem(const qr_form *q) { return q->ns * (32u * (q->kc + 64u) + 2u * 32u * (q->kc / 16u) + q->kc * 2u); }
/* skinny GEMV: warps per block at most, by n-tiles (cuda_quant.cu's QGEMVW_T) */
static uint32_t qw_maxw(uint32_t nt) { return nt == 2 ? 16 : 8; }

/* The kernels' parameter structs (cuda_quant.cu's GemmArgs and GroupTable:
 * the same fields, types and order). */
typedef struct gg_args {
  const void *a, *b;
  uint16_t *d;
  const uint16_t *sc, *bi;
  const float *sa, *sb;
  uint32_t ncols, k, gshift;
} gg_args;

/* gpurt_ggemmc_*'s second parameter (cuda_quant.cu's CountArgs). */
typedef struct gg_counts {
  const uint32_t *counts;
  uint32_t first, count, max_m;
} gg_counts;

typedef struct gg_table {
  uint32_t count, first_group;
  uint32_t tile_start[GG_MAX_GROUPS + 1];
  uint32_t row_start[GG_MAX_GROUPS + 1];
} gg_table;

/* The GEMV's tuning switches, read once (the environment is not read on
 * every call): GPURT_CUDA_QGEMV_WARPS=1..16 fixes its warps per block
 * (0: the heuristic; scripts/gpu_quant_bench.sh; wave: wave_warps), GPURT_CUDA_QGEMV=dequant
 * keeps the dequantizing form for groups of 64 and 128 too, =factored
 * gives the skinny GEMV the factored form for them (comparisons), =cutlass
 * see qmm, =ring, =rings and =ringl send n = 1 to a ring GEMV
 * (gpurt_qgemvr_*, gpurt_qgemvrs_*, gpurt_qgemvrl_*) where it takes the
 * shape (qr_takes), =register keeps the register GEMV (any other value leaves
 * the defaults: QR_DEFAULT), GPURT_CUDA_QGEMV_PREFETCH=0..8 how
 * many of a warp's batches ahead it asks W into the L2 (QV_PF, QW_PF by
 * default; scripts/gpu_skinny.sh), GPURT_CUDA_QGEMV_FETCH=32 or 256 the
 * bytes the L2 fetches from DRAM for a load of W (QV_FETCH by default),
 * GPURT_CUDA_QGEMV_PRE=0..15 how many of a warp's first batches of W, its
 * scales and biases it asks into the L2 before its PDL wait (QV_PRE). */
typedef struct qgemv_env {
  int warps, dequant, factored, pf, fetch; /* pf: -1 the defaults; fetch: 0 the default, 1: 32, 2: 256 */
  int cutlass; /* GPURT_CUDA_QGEMV=cutlass: 8 < n <= 64 on CUTLASS's skinny kernel */
  int pre;     /* GPURT_CUDA_QGEMV_PRE: -1 the default (QV_PRE), else 0..15 */
  int ring;    /* n = 1 through a ring GEMV: GPURT_CUDA_QGEMV=ring 1, =rings 2, =ringl 3, =register 0, else QR_DEFAULT */
} qgemv_env;

static qgemv_env qgemv_switches(void) {
  static _Atomic int cached = -1; /* warps | dequant << 8 | factored << 9 | (pf + 1) << 10 | fetch << 14 | cutlass << 16
                                     | (pre + 1) << 17 | ring << 22, once read */
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *w = getenv("GPURT_CUDA_QGEMV_WARPS"), *k = getenv("GPURT_CUDA_QGEMV");
    const char *p = getenv("GPURT_CUDA_QGEMV_PREFETCH"), *fe = getenv("GPURT_CUDA_QGEMV_FETCH");
    const char *pr = getenv("GPURT_CUDA_QGEMV_PRE");
    int warps = w != NULL ? atoi(w) : 0;
    if (warps < 0 || warps > QV_MAXW) warps = 0;
    if (w != NULL && strcmp(w, "wave") == 0) warps = QV_WARPS_WAVE;
    int pf = p != NULL && *p != 0 ? atoi(p) : -1;
    if (pf < -1 || pf > 8) pf = -1;
    int pre = pr != NULL && *pr != 0 ? atoi(pr) : -1;
    if (pre < -1 || pre > 15) pre = -1;
    v = warps | (k != NULL && strcmp(k, "dequant") == 0) << 8 | (k != NULL && strcmp(k, "factored") == 0) << 9 |
        (pf + 1) << 10 | (fe != NULL && strcmp(fe, "32") == 0 ? 1 : fe != NULL && strcmp(fe, "256") == 0 ? 2 : 0) << 14 |
        (k != NULL && strcmp(k, "cutlass") == 0) << 16 | (pre + 1) << 17 |
        (k != NULL && strcmp(k, "ring") == 0    ? 1
         : k != NULL && strcmp(k, "rings") == 0 ? 2
         : k != NULL && strcmp(k, "ringl") == 0 ? 3
         : k != NULL && (strcmp(k, "register") == 0 || strcmp(k, "dequant") == 0) ? 0
                                                                                   : QR_DEFAULT) << 22;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return (qgemv_env){v & 0xff, (v >> 8) & 1, (v >> 9) & 1, ((v >> 10) & 0xf) - 1, (v >> 14) & 3, (v >> 16) & 1,
                     ((v >> 17) & 0x1f) - 1, (v >> 22) & 3};
}

/* The CUTLASS crossover: QMM_CL_MIN_N or GPURT_CUDA_QMM_MIN_N, read once
 * (a value outside 9..65536 is ignored: n <= 8 is the GEMV's). */
static uint32_t qmm_min_n(void) {
  static _Atomic int64_t cached = -1;
  int64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const long long n = cu_env_whole("GPURT_CUDA_QMM_MIN_N", 9, 65536);
    v = n >= 0 ? n : QMM_CL_MIN_N;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return (uint32_t)v;
}

/* Whether CUTLASS's mixed-input GEMM takes this call (built in, sm_90, a
 * shape and alignment it accepts): below QMM_LT_MIN_N only it beats the
 * tiled kernel; the dequantizing fallback is not measured there. */
static int qmm_cutlass_takes(const cu_runtime *rt, uint32_t dev, const gpurt_quant_matmul_args *a, CUdeviceptr w,
                             CUdeviceptr x, CUdeviceptr y) {
#ifdef GPURT_HAVE_CUTLASS_MIXED
  const cu_device *d = &rt->devs[dev];
  return cu_clm_arch_ok(d->cc_major, d->cc_minor) &&
         cu_clm_qgemm_ok(a->x_type == GPURT_DTYPE_F16, a->scale_type == GPURT_DTYPE_F16, a->m, a->n, a->k,
                         a->group_size, (uintptr_t)w, (uintptr_t)x, (uintptr_t)y);
#else
  (void)rt, (void)dev, (void)a, (void)w, (void)x, (void)y;
  return 0;
#endif
}

static uint32_t log2u(uint32_t v) {
  uint32_t s = 0;
  while ((1u << s) < v) s++;
  return s;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Grows the stream's scratch (st->qscratch) to need bytes; slot_mu held.
 * Growth waits for the stream first: its queued work may still read the
 * old one. Used by the prefill path and the CUTLASS grouped path (both
 * stream-ordered, so one buffer serves both). */
static gpurt_error *stream_scratch(cu_runtime *rt, cu_stream *st, uint64_t need, const char *op, const char *what) {
  const uint32_t dev = st->dev;
  if (st->qscratch_cap >= need) return NULL;
  CUresult r = CUDA_SUCCESS;
  if (st->qscratch != 0) {
    r = cu_drv.p_cuStreamSynchronize(st->s);
    if (r != CUDA_SUCCESS) {
      char m[160];
      snprintf(m, sizeof m, "%s: waiting for the stream before growing its scratch", op);
      return cu_fail(rt, dev, r, m, st->last_kernel);
    }
    cu_drv.p_cuMemFree(st->qscratch);
    st->qscratch = 0;
    st->qscratch_cap = 0;
  }
  CUdeviceptr p = 0;
  r = cu_drv.p_cuMemAlloc(&p, (size_t)need);
  if (r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r, "%s: out of device memory allocating the stream's %llu-byte "
                           "scratch for %s on device %u", op, (unsigned long long)need, what, dev);
    char m[160];
    snprintf(m, sizeof m, "%s: stream scratch cuMemAlloc", op);
    return cu_fail(rt, dev, r, m, NULL);
  }
  st->qscratch = p;
  st->qscratch_cap = need;
  return NULL;
}

#ifdef GPURT_HAVE_CUTLASS_MIXED
/* CUTLASS's mixed-input GEMM (cuda_cutlass_mixed.cu) on sm_90, W's codes
 * dequantized in its mainloop (no 16-bit copy of W), the scales and biases
 * first widened to f32 and transposed into the stream's scratch. skinny:
 * its skinny kernel (CU_CLM_TILE_SKINNY, 128 x 32 tiles, stream-K), else
 * the prefill one (128 x 256 tiles, bf16 x in a 2 x 1 cluster), launched
 * with PDL after the scale conversion. *done = 0 (and no error): another
 * GPU, a shape it refuses (cu_clm_qgemm_ok, or CUTLASS's can_implement:
 * rc 1, nothing enqueued) or GPURT_CUDA_QGEMM=dequant; the caller takes
 * another path. GPURT_CUDA_QGEMM_TILE (tuning runs: nopdl, and the
 * experiments build's kernels, cuda_cutlass_mixed.h; the skinny call keeps
 * its kernel and takes the knobs). Both read once. */
static gpurt_error *cutlass_qgemm(cu_runtime *rt, cu_stream *st, const gpurt_quant_matmul_args *a, CUdeviceptr w,
                                  CUdeviceptr sc, CUdeviceptr bi, CUdeviceptr x, CUdeviceptr y, int skinny, int warm,
                                  int *done) {
  const uint32_t dev = st->dev;
  const int xi = a->x_type == GPURT_DTYPE_F16, si = a->scale_type == GPURT_DTYPE_F16;
  *done = 0;
  static _Atomic int qgemm_env = -1; /* bit 0: dequant forced, bits 1 and up: cu_clm_tile_parse */
  int env = atomic_load_explicit(&qgemm_env, memory_order_relaxed);
  if (env < 0) {
    const char *q = getenv("GPURT_CUDA_QGEMM"), *t = getenv("GPURT_CUDA_QGEMM_TILE");
    /* bits 1 and up: the tile and knobs (cu_clm_tile_parse, cuda_cutlass_mixed.h) */
    env = (q != NULL && strcmp(q, "dequant") == 0) | cu_clm_tile_parse(t) << 1;
    atomic_store_explicit(&qgemm_env, env, memory_order_relaxed);
  }
  const cu_device *d = &rt->devs[dev];
  if ((env & 1) || !cu_clm_arch_ok(d->cc_major, d->cc_minor) ||
      !cu_clm_qgemm_ok(xi, si, a->m, a->n, a->k, a->group_size, (uintptr_t)w, (uintptr_t)x, (uintptr_t)y))
    return NULL;
  const int tile = skinny ? ((env >> 1) & ~0xff) | CU_CLM_TILE_SKINNY : env >> 1;
  cu_clm_qgemm cl = {xi, si, (uint32_t)a->m, (uint32_t)a->n, (uint32_t)a->k, (uint32_t)a->group_size,
                     d->sm_count, tile, (const void *)(uintptr_t)w,
                     (const void *)(uintptr_t)sc, (const void *)(uintptr_t)bi, (const void *)(uintptr_t)x,
                     (void *)(uintptr_t)y, (void *)st->s, NULL, 0};
  char msg[256];
  msg[0] = 0;
  const size_t cneed = cu_clm_scratch_bytes(&cl, msg, sizeof msg);
  if (cneed == 0) return gp_err(GPURT_ERR_INTERNAL, "quant_matmul: %s", msg);
  pthread_mutex_lock(&st->slot_mu);
  gpurt_error *ce = stream_scratch(rt, st, cneed, "quant_matmul", "CUTLASS's f32 scales and workspace");
  if (ce || warm) { /* warm: a graph's capture follows: the scratch is all it needed */
    pthread_mutex_unlock(&st->slot_mu);
    *done = ce == NULL;
    return ce;
  }
  cl.scratch = (void *)(uintptr_t)st->qscratch;
  cl.scratch_bytes = (size_t)st->qscratch_cap;
  const int rc = cu_clm_qgemm_run(&cl, msg, sizeof msg);
  pthread_mutex_unlock(&st->slot_mu);
  if (rc == 1) return NULL; /* refused before enqueueing anything */
  if (rc != 0)
    return gp_err_vendor(rc == 2 ? GPURT_ERR_OUT_OF_MEMORY : GPURT_ERR_LAUNCH_FAILED, rc,
                         "quant_matmul: %s on device %u (CUTLASS mixed-input GEMM, m %llu, n %llu, k %llu, "
                         "groups of %u, %s x, %s scales)", msg, dev, (unsigned long long)a->m,
                         (unsigned long long)a->n, (unsigned long long)a->k, (unsigned)a->group_size,
                         tname(a->x_type), tname(a->scale_type));
  *done = 1;
  return NULL;
}
#endif

/* The prefill path (n >= QMM_LT_MIN_N): CUTLASS's mixed-input GEMM where it
 * applies (cutlass_qgemm), else W dequantized into the stream's scratch,
 * then cuBLASLt (column-major: y = (W')^T-as-stored times x, see
 * cu_gemm_tn_ptrs). */
static gpurt_error *prefill(cu_runtime *rt, cu_stream *st, const gpurt_quant_matmul_args *a, CUdeviceptr w,
                            CUdeviceptr sc, CUdeviceptr bi, CUdeviceptr x, CUdeviceptr y, uint32_t gshift,
                            int warm) {
  const uint32_t dev = st->dev;
  const int xi = a->x_type == GPURT_DTYPE_F16, si = a->scale_type == GPURT_DTYPE_F16;
#ifdef GPURT_HAVE_CUTLASS_MIXED
  int done = 0;
  gpurt_error *ce = cutlass_qgemm(rt, st, a, w, sc, bi, x, y, 0, warm, &done);
  if (ce || done) return ce;
#endif
  char name[64];
  snprintf(name, sizeof name, "gpurt_qdequant_%s_%s", tname(a->x_type), tname(a->scale_type));
  CUfunction f;
  gpurt_error *e = cu_own_fn(rt, dev, QV_DEQ + xi * 2 + si, name, &f);
  if (e) return e;
  /* The workspace first: its lock is taken alone (cuda_internal.h). */
  const size_t wsz = cu_gemm_workspace_bytes();
  CUdeviceptr ws;
  if ((e = cu_stream_workspace(rt, st, wsz, &ws))) return e;
  const uint64_t need = a->m * a->k * 2;
  pthread_mutex_lock(&st->slot_mu);
  if ((e = stream_scratch(rt, st, need, "quant_matmul", "the dequantized weights"))) {
    pthread_mutex_unlock(&st->slot_mu);
    return e;
  }
  if (warm) {
    pthread_mutex_unlock(&st->slot_mu);
    return cu_gemm_lt_warm(rt, dev);
  }
  const uint8_t *pw = (const uint8_t *)(uintptr_t)w;
  const uint16_t *ps = (const uint16_t *)(uintptr_t)sc, *pb = (const uint16_t *)(uintptr_t)bi;
  uint16_t *po = (uint16_t *)(uintptr_t)st->qscratch;
  uint64_t chunks = a->m * a->k / 16;
  void *params[6] = {&pw, &ps, &pb, &po, &chunks, &gshift};
  e = cu_own_launch(rt, st, f, name, cdiv(chunks, 256), 1, 256, params, 0);
  if (e == NULL)
    e = cu_gemm_tn_ptrs(rt, st, a->x_type, a->m, a->n, a->k, st->qscratch, x, y, ws, wsz);
  pthread_mutex_unlock(&st->slot_mu);
  return e;
}

/* The ten parameters every int8 GEMV kernel takes (cuda_quant.cu's
 * gpurt_qgemv*: W, scales, biases, x, y, m, k, log2 of the group size, n,
 * pf), and the pointer array cuLaunchKernel reads them through. */
typedef struct qv_params {
  const void *w, *sc, *bi, *x;
  void *y;
  uint32_t m, k, gshift, n, pf;
  void *p[10];
} qv_params;

static void qv_params_fill(qv_params *q, const gp_quant_op *r, uint32_t n, uint32_t pf) {
  const gpurt_quant_matmul_args *a = &r->c.a;
  q->w = (const void *)(uintptr_t)r->w.addr;
  q->sc = (const void *)(uintptr_t)r->scales.addr;
  q->bi = (const void *)(uintptr_t)r->biases.addr;
  q->x = (const void *)(uintptr_t)r->x.addr;
  q->y = (void *)(uintptr_t)r->y.addr;
  q->m = (uint32_t)a->m, q->k = (uint32_t)a->k, q->gshift = log2u(a->group_size), q->n = n, q->pf = pf;
  void *p[10] = {&q->w, &q->sc, &q->bi, &q->x, &q->y, &q->m, &q->k, &q->gshift, &q->n, &q->pf};
  memcpy(q->p, p, sizeof p);
}

/* GPURT_CUDA_QGEMV_WARPS=wave: the most warps a block (maxw, maxw / 2,
 * ..., down to 4) with which the grid's blocks are resident at once, from
 * the kernel's registers and the device's SMs (65536 registers an SM,
 * allocated 256 a warp at a time); 4 when none is. The default rule
 * (maxw below 256 blocks) gives 8B int8's fused QKV, 6144 rows, 192
 * blocks of 16 warps: at 128 registers one a SM, two waves, the second
 * less than half full; this gives it 8 warps (two blocks a SM, one wave).
 * Not measured yet: a knob, not the default. */
static uint64_t wave_warps(cu_runtime *rt, uint32_t dev, CUfunction f, uint64_t blocks, uint32_t maxw) {
  int regs = 0;
  if (cu_drv.p_cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f) != 0 || regs <= 0) return 4;
  const uint64_t per_warp = ((uint64_t)regs * 32 + 255) / 256 * 256, warps_sm = 65536 / per_warp;
  for (uint64_t w = maxw; w >= 4; w /= 2) {
    const uint64_t per_sm = warps_sm / w < 32 ? warps_sm / w : 32;
    if (blocks <= per_sm * (uint64_t)rt->devs[dev].sm_count) return w;
  }
  return 4;
}

/* Launches a GEMV kernel (either form: the same parameters; the n <= 8
 * kernels have n built in) over r's operands: QV_ROWS rows of W a block,
 * k split among its warps in depth-deep batches: maxw warps while the grid
 * is small (fewer than ~2 blocks per SM), else 4, never more than batches;
 * GPURT_CUDA_QGEMV_WARPS (up to maxw, or wave: wave_warps) fixes it. pf:
 * the prefetch distance unless GPURT_CUDA_QGEMV_PREFETCH says. */
static gpurt_error *gemv_launch(cu_runtime *rt, cu_stream *st, CUfunction f, const char *name, const gp_quant_op *r,
                                uint32_t n, uint32_t pf, uint32_t depth, uint32_t maxw) {
  const qgemv_env sw = qgemv_switches();
  if (sw.pf >= 0) pf = (uint32_t)sw.pf;
  /* The kernels' pf: the distance, and bit 8 for 256-byte fetches of W. */
  if (sw.fetch == 2 || (sw.fetch == 0 && QV_FETCH == 256)) pf |= 0x100u;
  /* Bits 9-12: the warp's first batches asked into the L2 before the PDL wait. */
  pf |= (uint32_t)(sw.pre >= 0 ? sw.pre : QV_PRE) << 9;
  qv_params q;
  qv_params_fill(&q, r, n, pf);
  const uint64_t blocks = cdiv(q.m, QV_ROWS), batches = cdiv(q.k, depth);
  uint64_t nw = sw.warps == QV_WARPS_WAVE                    ? wave_warps(rt, st->dev, f, blocks, maxw)
                : sw.warps > 0 && (uint32_t)sw.warps <= maxw ? (uint64_t)sw.warps
                : blocks < 256                               ? maxw
                                                             : 4;
  if (nw > batches) nw = batches;
  return cu_own_launch(rt, st, f, name, blocks, 1, (uint32_t)nw * 32, q.p, 1);
}

/* Whether ring GEMV form q takes a's shape: k a multiple of its chunk, W
 * and x 16-byte aligned (W's rows then are: k is a multiple of 256),
 * scales and biases 8-byte aligned (their rows' chunks then are 4-byte
 * aligned or more). */
static int qr_takes(const qr_form *q, const gpurt_quant_matmul_args *a, CUdeviceptr w, CUdeviceptr sc,
                    CUdeviceptr bi, CUdeviceptr x) {
  return a->k % q->kc == 0 && w % 16 == 0 && x % 16 == 0 && sc % 8 == 0 && bi % 8 == 0;
}

/* n = 1 on ring GEMV form q (GPURT_CUDA_QGEMV=ring, rings, ringl; the
 * caller checked qr_takes): *done 0 when the device refuses the form's
 * shared memory (the caller then takes the register GEMV). warm: only the
 * kernel fetched, nothing enqueued. */
static gpurt_error *ring_gemv(cu_runtime *rt, cu_stream *st, const gp_quant_op *r, int form, int warm, int *done) {
  const qr_form *qf = &qr_forms[form];
  const gpurt_quant_matmul_args *a = &r->c.a;
  const uint32_t dev = st->dev;
  const int xi = a->x_type == GPURT_DTYPE_F16, si = a->scale_type == GPURT_DTYPE_F16;
  char name[64];
  snprintf(name, sizeof name, "%s_%s_%s_n1", qf->prefix, tname(a->x_type), tname(a->scale_type));
  CUfunction f;
  gpurt_error *e = cu_own_fn_smem(rt, dev, QV_GEMVR + form * 4 + xi * 2 + si, name, qr_smem(qf), &f, done);
  if (e != NULL || !*done || warm) return e;
  qv_params q;
  qv_params_fill(&q, r, 1, 0);
  /* As many blocks as fit the SMs (the rings take most of their shared
   * memory), each taking row groups in turn. */
  uint64_t blocks = cdiv(a->m, QV_ROWS);
  const uint64_t sms = (uint64_t)rt->devs[dev].sm_count;
  if (sms > 0 && blocks > qf->per_sm * sms) blocks = qf->per_sm * sms;
  return cu_own_launch_smem(rt, st, f, name, blocks, qf->kc / 64 * 32, qr_smem(qf), q.p, 1);
}

/* quant_matmul; warm: before a graph captures the call on sh (the graph's
 * stream), only what the call would make lazily (the module's kernel, the
 * stream's scratch and workspace, cuBLASLt's handle), nothing enqueued:
 * no allocation or stream synchronization may run while it captures. */
static gpurt_error *qmm(cu_runtime *rt, cu_stream *st, const gp_quant_op *r, int warm) {
  gpurt_error *e = NULL;
  const gpurt_quant_matmul_args *a = &r->c.a;
  uint32_t dev = st->dev;
  const CUdeviceptr w = r->w.addr, sc = r->scales.addr, bi = r->biases.addr, x = r->x.addr, y = r->y.addr;
  if ((e = cu_enter(rt, dev))) return e;
  const int xi = a->x_type == GPURT_DTYPE_F16, si = a->scale_type == GPURT_DTYPE_F16;
  uint32_t m = (uint32_t)a->m, n = (uint32_t)a->n, k = (uint32_t)a->k, gshift = log2u(a->group_size);
  char name[64];
  CUfunction f;
  /* The GEMVs below (n <= 8, and the skinny ones up to QMM_W_MAX_N) load
   * W's codes straight into registers. The int8 ring GEMVs (gpurt_qrgemv_*,
   * n = 1 with W through a shared-memory ring; gpurt_qrgemvw_*, 2 <= n <=
   * 32 with k split among the CTAs of a thread-block cluster;
   * GPURT_CUDA_QGEMV=ring, ring-any) were removed after losing to them on
   * every shape measured on the H200 (2026-12-05, quantbench, cold L2, gpu
   * us, register against ring; m x k 4096 x 4096, 14336 x 4096, 4096 x
   * 14336): n = 1 6.9 / 9.0, 20.4 / 24.0, 18.5 / 27.1; n = 8 7.4 / 17.8,
   * 21.6 / 34.3, 19.3 / 44.7; n = 32 12.8 / 29.5, 36.0 / 50.4, 38.1 / 71.6.
   * The decoder (graph mode, tok/s): 8B int8 304.6 / 260.3 at batch 1 and
   * 4,348 / 3,177 at batch 32, 1B int8 1,193 / 1,039 at batch 1. */
  const int ring = qgemv_switches().ring;
  if (n == 1 && ring && qr_takes(&qr_forms[ring - 1], a, w, sc, bi, x)) {
    int done = 0;
    if ((e = ring_gemv(rt, st, r, ring - 1, warm, &done)) || done) return e;
    /* The device refused the ring's shared memory: the register GEMV. */
  }
  if (n <= 8) {
    /* Groups of 64 or more: the factored form (gpurt_qgemvf_*, no weight
     * rounded to 16 bits, ~40% fewer instructions); 32: dequantizing. */
    const int fac = a->group_size >= 64 && !qgemv_switches().dequant;
    snprintf(name, sizeof name, "gpurt_qgemv%s_%s_%s_n%u", fac ? "f" : "", tname(a->x_type), tname(a->scale_type), n);
    if ((e = cu_own_fn(rt, dev, (fac ? QV_GEMVF : QV_GEMV) + (xi * 2 + si) * 8 + (int)(n - 1), name, &f)) || warm)
      return e;
    /* The block's warps split k in 128-deep batches: 16 warps while the
     * grid is small (fewer than ~2 blocks per SM: more loads in flight per
     * SM), else 4 (four blocks per SM: at 14336 x 4096 on the H200 22.3 /
     * 22.8 us for n = 1 / 8 against 22.9 / 23.6 with 8 warps and 27.0 /
     * 27.7 with 16, 2026-12-02 run14). */
    return gemv_launch(rt, st, f, name, r, n, QV_PF, 128, QV_MAXW);
  }
  if (n >= QMM_LT_MIN_N || (n >= qmm_min_n() && qmm_cutlass_takes(rt, dev, a, w, x, y)))
    return prefill(rt, st, a, w, sc, bi, x, y, gshift, warm);
  if (n <= QMM_W_MAX_N) {
#ifdef GPURT_HAVE_CUTLASS_MIXED
    /* GPURT_CUDA_QGEMV=cutlass, sm_90: CUTLASS's skinny mixed-input kernel
     * (128 x 32 tiles, stream-K). Not the default: on the H200 it was
     * 1.08-1.14x the dequantizing GEMV at n = 32 for 14336 x 4096 and 4096 x
     * 14336, but 0.48-0.74x at n = 16 and at 4096 x 4096 (its scale
     * conversion, stream-K workspace and launches cost ~10 us a call), and
     * the 8B int8 decoder at batch 32 ran 4,188 against 4,342 tok/s
     * (BENCHMARKS.md, 2026-12-04, tenth session). */
    if (qgemv_switches().cutlass) {
      int done = 0;
      if ((e = cutlass_qgemm(rt, st, a, w, sc, bi, x, y, 1, warm, &done))) return e;
      /* warm: the GEMV's kernel is loaded too, in case CUTLASS refuses the
       * call during the capture (nothing may be loaded then). */
      if (done && !warm) return NULL;
    }
#endif
    /* The skinny GEMV: n-tiles of 8 tokens, 2, 4 or 8 of them, in the
     * dequantizing form (each weight rounded to x's type once, as the
     * prefill paths do; its conversions are shared by the n-tiles, where
     * the factored form's x scaling and all-ones mma are per n-tile). */
    const int fac = a->group_size >= 64 && qgemv_switches().factored;
    const uint32_t nt = n <= 16 ? 2 : n <= 32 ? 4 : 8, ti = n <= 16 ? 0 : n <= 32 ? 1 : 2;
    snprintf(name, sizeof name, "gpurt_qgemvw%s_%s_%s_t%u", fac ? "f" : "", tname(a->x_type), tname(a->scale_type),
             nt);
    if ((e = cu_own_fn(rt, dev, QV_GEMVW + ((xi * 2 + si) * 3 + (int)ti) * 2 + fac, name, &f)) || warm) return e;
    /* Batches of one 64-deep step (cuda_quant.cu's QW_U2, QW_U4); warps
     * as the GEMV's, from 4 (several blocks per SM, large grids) to the
     * most the kernel takes (measured: 32.5 against 38.7 us with 16 warps
     * at 14336 x 4096, n = 16; bench/results/h200-2026-12-04c). */
    return gemv_launch(rt, st, f, name, r, n, QW_PF, 64, qw_maxw(nt));
  }
  snprintf(name, sizeof name, "gpurt_qgemm_%s_%s", tname(a->x_type), tname(a->scale_type));
  if ((e = cu_own_fn(rt, dev, QV_QGEMM + xi * 2 + si, name, &f)) || warm) return e;
  /* The tiled kernel with one group: A = x (n rows), B = W (m rows). */
  gg_args ga = {(const void *)(uintptr_t)x, (const void *)(uintptr_t)w, (uint16_t *)(uintptr_t)y,
                (const uint16_t *)(uintptr_t)sc, (const uint16_t *)(uintptr_t)bi, NULL, NULL, m, k, gshift};
  gg_table gt;
  memset(&gt, 0, sizeof gt);
  uint64_t tiles = cdiv(n, GG_TILE) * cdiv(m, GG_TILE);
  if (tiles > 0x7fffffffull)
    return gp_err(GPURT_ERR_UNSUPPORTED, "quant_matmul: m %u x n %u needs more than 2^31 - 1 tiles", m, n);
  gt.count = 1;
  gt.tile_start[1] = (uint32_t)tiles;
  gt.row_start[1] = n;
  void *params[2] = {&ga, &gt};
  return cu_own_launch(rt, st, f, name, tiles, 1, 256, params, 0);
}

gpurt_error *cu_quant_matmul(void *ctx, gp_queue *q, const gp_quant_op *r) {
  return qmm(ctx, q->q, r, q->capturing == GP_QUEUE_PREPARE);
}

#ifdef GPURT_HAVE_CUTLASS
/* grouped_gemm through CUTLASS (cuda_cutlass.cu) on sm_90 when the shape
 * suits its TMA loads and stores: every group with rows in one launch
 * (after a small argument kernel), its arrays and workspace in the
 * stream's scratch. *done = 0 (and no error) leaves the call to the own
 * kernel: another GPU, a shape CUTLASS refuses, more than
 * CU_CL_MAX_GROUPS groups with rows, or GPURT_CUDA_GROUPED=kernel. */
static gpurt_error *cutlass_grouped(cu_runtime *rt, cu_stream *st, const gpurt_grouped_gemm_args *a, int fp8,
                                    CUdeviceptr pa, CUdeviceptr pb, CUdeviceptr pd, CUdeviceptr psa,
                                    CUdeviceptr psb, int warm, int *done) {
  *done = 0;
  const uint32_t dev = st->dev;
  const cu_device *d = &rt->devs[dev];
  if (!cu_cl_arch_ok(d->cc_major, d->cc_minor) || !cu_cl_grouped_ok(fp8, a->n, a->k, (uintptr_t)pd)) return NULL;
  const char *force = getenv("GPURT_CUDA_GROUPED");
  if (force != NULL && strcmp(force, "kernel") == 0) return NULL;
  /* fp8 with block scales: CUTLASS's blockwise kernel differs from a
   * float64 reference by up to ~4e-4 of the products' norm (2026-12-01
   * run3), the precision of sm_90's fp8 tensor cores within a 128-deep
   * scale block (conform/quant.go); the own kernel widens to f16 and sums
   * in f32, GPURT_CUDA_GROUPED=kernel picks it. */
  uint32_t group[CU_CL_MAX_GROUPS], row0[CU_CL_MAX_GROUPS], m[CU_CL_MAX_GROUPS];
  uint32_t count = 0;
  uint64_t row = 0;
  for (uint64_t g = 0; g < a->group_count; g++) {
    const uint64_t mg = a->m_sizes[g];
    if (mg > 0) {
      if (count == CU_CL_MAX_GROUPS) return NULL;
      group[count] = (uint32_t)g;
      row0[count] = (uint32_t)row;
      m[count] = (uint32_t)mg;
      count++;
    }
    row += mg;
  }
  char msg[256];
  msg[0] = 0;
  const size_t need = cu_cl_scratch_bytes(fp8, count, d->sm_count, msg, sizeof msg);
  if (need == 0) return gp_err(GPURT_ERR_INTERNAL, "grouped_gemm: %s", msg);
  pthread_mutex_lock(&st->slot_mu);
  gpurt_error *e = stream_scratch(rt, st, need, "grouped_gemm", "CUTLASS's arrays and workspace");
  if (e || warm) { /* warm: the own kernel's needs are made too (CUTLASS may refuse the shape at capture) */
    pthread_mutex_unlock(&st->slot_mu);
    return e;
  }
  cu_cl_grouped cl = {fp8, count, (uint32_t)a->n, (uint32_t)a->k, d->sm_count, (const void *)(uintptr_t)pa,
                      (const void *)(uintptr_t)pb, (void *)(uintptr_t)pd, (const float *)(uintptr_t)psa,
                      (const float *)(uintptr_t)psb, group, row0, m, (void *)st->s,
                      (void *)(uintptr_t)st->qscratch, (size_t)st->qscratch_cap};
  const int rc = cu_cl_grouped_run(&cl, msg, sizeof msg);
  pthread_mutex_unlock(&st->slot_mu);
  if (rc == 1) return NULL; /* refused before enqueueing: the own kernel */
  if (rc != 0)
    return gp_err_vendor(rc == 2 ? GPURT_ERR_OUT_OF_MEMORY : GPURT_ERR_LAUNCH_FAILED, rc,
                         "grouped_gemm: %s on device %u (%u groups with rows, n %llu, k %llu, %s)", msg, dev, count,
                         (unsigned long long)a->n, (unsigned long long)a->k, fp8 ? "fp8 block scales" : "bf16");
  *done = 1;
  return NULL;
}
#endif

/* The grouped kernels' first parameter (gpurt_ggemm*, gpurt_ggemmc*) from
 * r's operands: fp8's scales, else none. */
static gg_args grouped_args(const gp_grouped_op *r) {
  const int fp8 = r->c.fp8;
  return (gg_args){(const void *)(uintptr_t)r->a.addr,
                   (const void *)(uintptr_t)r->b.addr,
                   (uint16_t *)(uintptr_t)r->d.addr,
                   NULL,
                   NULL,
                   fp8 ? (const float *)(uintptr_t)r->scale_a.addr : NULL,
                   fp8 ? (const float *)(uintptr_t)r->scale_b.addr : NULL,
                   (uint32_t)r->c.a.n,
                   (uint32_t)r->c.a.k,
                   0};
}

/* grouped_gemm with the row counts on the device (1.11): the own kernel
 * only (gpurt_ggemmc_*; CUTLASS's and cuBLASLt's paths take the shapes on
 * the host), a launch per GG_MAX_GROUPS groups, each of the most tiles its
 * groups can need: sum_g ceil(m_g / 128) <= ceil(max_m / 128) + groups row
 * tiles, times the column tiles. The blocks past the counts' tiles return
 * at once. warm as qmm's. */
static gpurt_error *ggemm_counts(cu_runtime *rt, cu_stream *st, const gp_grouped_op *r, int warm) {
  const gp_grouped *c = &r->c;
  const gpurt_grouped_gemm_args *a = &c->a;
  const char *name = c->fp8 ? "gpurt_ggemmc_fp8" : "gpurt_ggemmc_bf16";
  CUfunction f;
  gpurt_error *e = cu_own_fn(rt, st->dev, c->fp8 ? QV_GGC_FP8 : QV_GGC_BF16, name, &f);
  if (e || warm) return e;
  gg_args ga = grouped_args(r);
  const uint64_t tiles_n = cdiv(a->n, GG_TILE);
  for (uint64_t g0 = 0; g0 < a->group_count; g0 += GG_MAX_GROUPS) {
    const uint64_t cnt = a->group_count - g0 < GG_MAX_GROUPS ? a->group_count - g0 : GG_MAX_GROUPS;
    const uint64_t tiles = (cdiv(a->max_m, GG_TILE) + cnt) * tiles_n;
    if (tiles > 0x7fffffffull)
      return gp_err(GPURT_ERR_UNSUPPORTED, "grouped_gemm: max_m %llu, n %llu and groups %llu.. need up to %llu "
                    "tiles, more than 2^31 - 1", (unsigned long long)a->max_m, (unsigned long long)a->n,
                    (unsigned long long)g0, (unsigned long long)tiles);
    gg_counts ca = {(const uint32_t *)(uintptr_t)r->m_counts.addr, (uint32_t)g0, (uint32_t)cnt, (uint32_t)a->max_m};
    void *params[2] = {&ga, &ca};
    if ((e = cu_own_launch(rt, st, f, name, tiles, 1, 256, params, 0))) return e;
  }
  return NULL;
}

/* grouped_gemm; warm as qmm's. */
static gpurt_error *ggemm(cu_runtime *rt, cu_stream *st, const gp_grouped_op *r, int warm) {
  gpurt_error *e = NULL;
  const gp_grouped c = r->c;
  const gpurt_grouped_gemm_args *a = &c.a;
  if (!c.fp8 && a->k % 8 != 0)
    return gp_err(GPURT_ERR_UNSUPPORTED, "grouped_gemm: k %llu is not a multiple of 8 (the CUDA kernel reads "
                  "rows of bf16 A and B in 16-byte pieces)", (unsigned long long)a->k);
  uint32_t dev = st->dev;
  const CUdeviceptr pa = r->a.addr, pb = r->b.addr, pd = r->d.addr;
  if (c.total_m == 0) return NULL;
  if ((e = cu_enter(rt, dev))) return e;
  if (c.dev_counts) return ggemm_counts(rt, st, r, warm);
#ifdef GPURT_HAVE_CUTLASS
  {
    const CUdeviceptr psa = c.fp8 ? r->scale_a.addr : 0, psb = c.fp8 ? r->scale_b.addr : 0;
    int done = 0;
    if ((e = cutlass_grouped(rt, st, a, c.fp8, pa, pb, pd, psa, psb, warm, &done))) return e;
    if (done) return NULL;
  }
#endif
  const char *name = c.fp8 ? "gpurt_ggemm_fp8" : "gpurt_ggemm_bf16";
  CUfunction f;
  if ((e = cu_own_fn(rt, dev, c.fp8 ? QV_GG_FP8 : QV_GG_BF16, name, &f))) return e;
  if (warm) {
    for (uint64_t g = 0; !c.fp8 && g < a->group_count; g++)
      if (a->m_sizes[g] >= GG_LT_MIN_M) {
        CUdeviceptr ws;
        if ((e = cu_stream_workspace(rt, st, cu_gemm_workspace_bytes(), &ws))) return e;
        return cu_gemm_lt_warm(rt, dev);
      }
    return NULL;
  }
  gg_args ga = grouped_args(r);
  /* bf16: the large groups through cuBLASLt, D_g (column-major n x m_g) =
   * B_g^T-as-stored times A_g. */
  if (!c.fp8) {
    const size_t wsz = cu_gemm_workspace_bytes();
    CUdeviceptr ws = 0;
    uint64_t r0 = 0;
    for (uint64_t g = 0; g < a->group_count; g++) {
      const uint64_t m = a->m_sizes[g];
      if (m >= GG_LT_MIN_M) {
        if (ws == 0 && (e = cu_stream_workspace(rt, st, wsz, &ws))) return e;
        if ((e = cu_gemm_tn_ptrs(rt, st, GPURT_DTYPE_BF16, a->n, m, a->k, pb + g * a->n * a->k * 2,
                                 pa + r0 * a->k * 2, pd + r0 * a->n * 2, ws, wsz)))
          return gp_err_wrap(e, "grouped_gemm: group %llu (%llu rows, cuBLASLt)", (unsigned long long)g,
                             (unsigned long long)m);
      }
      r0 += m;
    }
  }
  const uint64_t tiles_n = cdiv(a->n, GG_TILE);
  uint64_t row = 0;
  for (uint64_t g0 = 0; g0 < a->group_count; g0 += GG_MAX_GROUPS) {
    uint64_t cnt = a->group_count - g0 < GG_MAX_GROUPS ? a->group_count - g0 : GG_MAX_GROUPS;
    gg_table gt;
    memset(&gt, 0, sizeof gt);
    gt.count = (uint32_t)cnt;
    gt.first_group = (uint32_t)g0;
    uint64_t tiles = 0;
    for (uint64_t i = 0; i < cnt; i++) {
      gt.tile_start[i] = (uint32_t)tiles;
      gt.row_start[i] = (uint32_t)row;
      uint64_t m = a->m_sizes[g0 + i];
      if (c.fp8 || m < GG_LT_MIN_M) tiles += cdiv(m, GG_TILE) * tiles_n; /* else: done by cuBLASLt */
      row += m;
      if (tiles > 0x7fffffffull)
        return gp_err(GPURT_ERR_UNSUPPORTED, "grouped_gemm: groups %llu.. need more than 2^31 - 1 tiles",
                      (unsigned long long)g0);
    }
    gt.tile_start[cnt] = (uint32_t)tiles;
    gt.row_start[cnt] = (uint32_t)row;
    void *params[2] = {&ga, &gt};
    if ((e = cu_own_launch(rt, st, f, name, tiles, 1, 256, params, 0))) return e;
  }
  return NULL;
}

gpurt_error *cu_grouped_gemm(void *ctx, gp_queue *q, const gp_grouped_op *r) {
  return ggemm(ctx, q->q, r, q->capturing == GP_QUEUE_PREPARE);
}
