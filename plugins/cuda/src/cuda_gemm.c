/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_gemm.c — GEMM plans (ABI 1.1) on cuBLASLt: the gp_backend entries
 * gemm_plan, gemm_plan_free and gemm_run (the engine validated the
 * descriptor, gp_gemm_validate, and resolves and checks every operand's
 * view; this file adds cuBLASLt's own limits and the alignments).
 *
 * libcublasLt.so.13 is dlopen'ed on the first plan (GPURT_CUBLASLT_PATH
 * first, then the library name, then the CUDA toolkit's usual folders); a
 * host without it gets GPURT_ERR_UNAVAILABLE naming the library.
 * GPURT_CUBLASLT_PATH is ignored in a setuid/setgid process, and must be an
 * absolute path passing the loader's ownership and permission rule
 * (csrc/gp_path.h); a refused one makes cuBLASLt unavailable, naming why. A plan owns
 * the matmul descriptor, the four layouts and the algorithm, chosen once by
 * cublasLtMatmulAlgoGetHeuristic at plan creation; gemm_run only enqueues
 * cublasLtMatmul on the stream with that algorithm and the stream's
 * plugin-owned workspace (allocated on first use, freed with the stream).
 *
 * Semantics are gpurt.h's: column-major, D = alpha*op(A)*op(B) + beta*C,
 * then the epilogue, with bias[m] per row of D.
 *
 * An f32 bias where cuBLASLt takes a bf16/f16 one (a bf16/f16 D, and the
 * fp8 rows of its table): the plan is built with cuBLASLt's bias type, and
 * each run first converts the m f32 values (round to nearest even) into the
 * stream's 16-bit bias copy with the plugin's internal kernel
 * (cuda_kernels.cu, gpurt_internal_f32_to_bf16/_f16), on the run's stream, and
 * passes that copy as the bias. The bias is thus rounded to 16 bits before
 * the add, as a 16-bit bias would be.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublasLt.h>

#include "cuda_internal.h"
#include "gp_cublaslt.h"
#include "gp_path.h"

#define CU_GEMM_WORKSPACE (32u << 20)

#define LT_FUNCS(X)                                                            \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)               \
  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                 \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)   \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
#define LT_OPT_FUNCS(X) X(cublasLtGetStatusName) X(cublasLtGetStatusString)

#define LT_FIELD(name) __typeof__(name) *p_##name;
static struct {
  LT_FUNCS(LT_FIELD)
  LT_OPT_FUNCS(LT_FIELD)
} lt;
#undef LT_FIELD

static pthread_mutex_t lt_mu = PTHREAD_MUTEX_INITIALIZER;
static int lt_state; /* 0 untried, 1 loaded, -1 failed */
static char lt_why[700];

static int lt_load(char *why, size_t cap) {
  pthread_mutex_lock(&lt_mu);
  if (lt_state == 0) {
    char tried[600] = "";
    void *h = NULL;
    /* GPURT_CUBLASLT_PATH: ignored when the process runs setuid/setgid;
     * otherwise it must name an absolute path that passes the loader's
     * rule (csrc/gp_path.h), or cuBLASLt is unavailable with the reason:
     * an explicit library that is refused is never replaced silently. */
    const char *env = gp_secure_getenv("GPURT_CUBLASLT_PATH");
    /* The named file is checked and opened once, and loaded through its
     * descriptor (/proc/self/fd/N): a file renamed into place after the
     * checks is never loaded (as core/internal/loader/pin_unix.go). */
    char env_fd[64];
    int env_fdn = -1;
    if (env != NULL && env[0] != 0) {
      char why_env[512];
      if (gp_trusted_open(env, &env_fdn, env_fd, sizeof env_fd, why_env, sizeof why_env) != 0) {
        snprintf(lt_why, sizeof lt_why, "cuBLASLt unavailable: GPURT_CUBLASLT_PATH=%s refused: %s",
                 env, why_env);
        lt_state = -1;
        goto done;
      }
      env = env_fd;
    }
    const char *cands[] = {env, GP_CUBLASLT_CANDIDATES};
    if (env_fdn >= 0) snprintf(tried, sizeof tried, "GPURT_CUBLASLT_PATH=%.200s as %s: ", gp_secure_getenv("GPURT_CUBLASLT_PATH"), env_fd);
    h = cu_dlopen_first(cands, sizeof cands / sizeof cands[0], 0, tried + strlen(tried), sizeof tried - strlen(tried));
    /* The descriptor stays open once a dlopen may have gone through its
     * name (glibc would hand this library back for a reused number);
     * with no library loaded it is closed. */
    if (h == NULL && env_fdn >= 0) close(env_fdn);
    if (h == NULL) {
      snprintf(lt_why, sizeof lt_why,
               "cuBLASLt unavailable: libcublasLt.so.13 not found (%s; also tried "
               "/usr/local/cuda; set GPURT_CUBLASLT_PATH to its path)", tried);
      lt_state = -1;
    } else {
      const char *missing = NULL;
#define LT_RESOLVE(name)                                                  \
  lt.p_##name = (__typeof__(lt.p_##name))dlsym(h, #name);                 \
  if (lt.p_##name == NULL && missing == NULL) missing = #name;
      LT_FUNCS(LT_RESOLVE)
#undef LT_RESOLVE
#define LT_RESOLVE_OPT(name) lt.p_##name = (__typeof__(lt.p_##name))dlsym(h, #name);
      LT_OPT_FUNCS(LT_RESOLVE_OPT)
#undef LT_RESOLVE_OPT
      if (missing) {
        snprintf(lt_why, sizeof lt_why, "cuBLASLt unusable: libcublasLt.so.13 has no %s",
                 missing);
        lt_state = -1;
      } else {
        lt_state = 1;
      }
    }
  }
done:;
  int ok = lt_state == 1;
  if (!ok) gp_strlcpy(why, cap, lt_why);
  pthread_mutex_unlock(&lt_mu);
  return ok;
}

static void lt_status_text(cublasStatus_t s, char *buf, size_t cap) {
  const char *n = lt.p_cublasLtGetStatusName ? lt.p_cublasLtGetStatusName(s) : NULL;
  const char *t = lt.p_cublasLtGetStatusString ? lt.p_cublasLtGetStatusString(s) : NULL;
  if (n && t)
    snprintf(buf, cap, "%s (%s)", n, t);
  else
    snprintf(buf, cap, "cublasStatus_t %d", (int)s);
}

static int32_t lt_code(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED: return GPURT_ERR_OUT_OF_MEMORY;
    case CUBLAS_STATUS_INVALID_VALUE: return GPURT_ERR_INVALID_ARGUMENT;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return GPURT_ERR_UNSUPPORTED;
    case CUBLAS_STATUS_EXECUTION_FAILED: return GPURT_ERR_LAUNCH_FAILED;
    case CUBLAS_STATUS_NOT_INITIALIZED: return GPURT_ERR_UNAVAILABLE;
    default: return GPURT_ERR_INTERNAL;
  }
}

static gpurt_error *lt_err(cublasStatus_t s, const char *op) {
  char t[256];
  lt_status_text(s, t, sizeof t);
  return gp_err_vendor(lt_code(s), s, "gemm: %s: %s", op, t);
}

/* The device's cuBLASLt handle, created on first use (context current). */
static gpurt_error *lt_handle(cu_device *d, cublasLtHandle_t *out) {
  pthread_mutex_lock(&d->mu);
  if (d->lt == NULL) {
    cublasLtHandle_t h = NULL;
    cublasStatus_t s = lt.p_cublasLtCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) {
      pthread_mutex_unlock(&d->mu);
      return lt_err(s, "cublasLtCreate");
    }
    d->lt = h;
  }
  *out = (cublasLtHandle_t)d->lt;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* The device's GEMM scratch (256 bytes, f32 1.0 at offset 0), allocated on
 * first use (context current): the scale pointer of an fp8 run that passes
 * no scale, and the bias pointer a plan is created with. */
static gpurt_error *lt_scratch(cu_device *d, CUdeviceptr *out) {
  pthread_mutex_lock(&d->mu);
  if (d->gemm_scratch == 0) {
    CUdeviceptr p = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&p, 256);
    if (r == CUDA_SUCCESS) {
      const float one[64] = {1.0f};
      r = cu_drv.p_cuMemcpyHtoD(p, one, sizeof one);
      if (r != CUDA_SUCCESS) cu_drv.p_cuMemFree(p);
    }
    if (r != CUDA_SUCCESS) {
      pthread_mutex_unlock(&d->mu);
      char t[256];
      cu_result_text(r, t, sizeof t);
      return gp_err_vendor(r == CUDA_ERROR_OUT_OF_MEMORY ? GPURT_ERR_OUT_OF_MEMORY
                                                         : GPURT_ERR_INTERNAL,
                           r, "gemm: device %u: allocating the 256-byte GEMM scratch: %s",
                           d->index, t);
    }
    d->gemm_scratch = p;
  }
  *out = d->gemm_scratch;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* The plugin's internal f32 -> bf16/f16 kernel on device dev (to: the
 * 16-bit type): the embedded fatbin is loaded once more per device for it
 * (a module of the plugin's, never in the modules table, so kernel_get
 * cannot reach it), on first use, context current. */
static gpurt_error *internal_f32_to_16(cu_runtime *rt, uint32_t dev, int32_t to,
                                       CUfunction *out) {
  cu_device *d = &rt->devs[dev];
  CUresult r = CUDA_SUCCESS;
  const char *op = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->internal_mod == NULL) {
    CUmodule mod = NULL;
    CUfunction fb = NULL, fh = NULL;
    op = "gemm_plan_create: loading the plugin's internal kernels (cuModuleLoadDataEx)";
    r = cu_drv.p_cuModuleLoadDataEx(&mod, gpurt_cuda_fatbin, 0, NULL, NULL);
    if (r == CUDA_SUCCESS) {
      op = "gemm_plan_create: cuModuleGetFunction " CU_INTERNAL_PREFIX "f32_to_bf16";
      r = cu_drv.p_cuModuleGetFunction(&fb, mod, CU_INTERNAL_PREFIX "f32_to_bf16");
      if (r == CUDA_SUCCESS) {
        op = "gemm_plan_create: cuModuleGetFunction " CU_INTERNAL_PREFIX "f32_to_f16";
        r = cu_drv.p_cuModuleGetFunction(&fh, mod, CU_INTERNAL_PREFIX "f32_to_f16");
      }
      if (r != CUDA_SUCCESS) cu_drv.p_cuModuleUnload(mod);
    }
    if (r == CUDA_SUCCESS) {
      d->internal_mod = mod;
      d->f32_to_bf16 = fb;
      d->f32_to_f16 = fh;
    }
  }
  CUfunction f = to == GPURT_DTYPE_BF16 ? d->f32_to_bf16 : d->f32_to_f16;
  pthread_mutex_unlock(&d->mu); /* cu_fail takes d->mu */
  if (r != CUDA_SUCCESS) return cu_fail(rt, dev, r, op, NULL);
  *out = f;
  return NULL;
}

void cu_gemm_device_release(cu_device *d) {
  if (d->lt != NULL && lt.p_cublasLtDestroy != NULL) lt.p_cublasLtDestroy(d->lt);
  d->lt = NULL;
  if (d->gemm_scratch != 0) cu_drv.p_cuMemFree(d->gemm_scratch);
  d->gemm_scratch = 0;
  if (d->internal_mod != NULL) cu_drv.p_cuModuleUnload(d->internal_mod);
  d->internal_mod = NULL;
  d->f32_to_bf16 = d->f32_to_f16 = NULL;
}

/* ---- plans ---------------------------------------------------------------- */

typedef struct cu_plan {
  uint32_t dev;
  gpurt_gemm_desc d;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulAlgo_t algo;
  size_t ws_needed;
  uint64_t bytes_a, bytes_b, bytes_c, bytes_d, bytes_bias;
  uint32_t align[4];
  int fp8, has_bias, half_scale;
  /* The caller's bias is f32, cuBLASLt's is lt_bias_type (bf16 or f16):
   * each run converts it with bias_fn into the stream's bias16 first. */
  int bias_conv;
  int32_t lt_bias_type; /* cuBLASLt's BIAS_DATA_TYPE (has_bias) */
  CUfunction bias_fn;
  int d_scale;        /* D is fp8: the plan has a D scale pointer */
  int c_is_d;         /* C's layout is D's: a NULL C may alias D */
  CUdeviceptr scratch; /* the device's GEMM scratch (lt_scratch) */
  /* The C of a run with C NULL (beta 0) when C's layout or type is not D's
   * (an fp8 D with a bf16/f16 C): bytes_c bytes, allocated on the first such
   * run (under mu), never read for beta 0 but a whole valid matrix, so
   * cuBLASLt sees a C as large as its layout says. */
  CUdeviceptr c_scratch;
  pthread_mutex_t mu; /* per-run pointer attributes + the matmul call */
  /* The pointer attributes last set on op (under mu): set again only when a
   * run passes different ones. Plan creation sets them all (bias to the
   * scratch, scales to the scratch's 1.0) before the heuristic query, so the
   * algorithm is chosen for exactly the descriptor every run uses. */
  CUdeviceptr cur_bias, cur_sa, cur_sb, cur_sd;
  /* The plan's shape is a decode GEMV (gemv_takes): runs whose A and B are
   * 16-byte aligned launch cuda_quant.cu's gpurt_bgemv_* instead of
   * cublasLtMatmul; the others take the algorithm. Its kernel is loaded
   * with the plan (a plan whose load fails keeps cuBLASLt). */
  int gemv;
  CUfunction gemv_fn;
  char gemv_name[32];
  /* cu_bgemv_args.flags of the plan's GEMV runs: CU_BGEMV_CONST_A when the
   * descriptor has GPURT_GEMM_FLAG_CONST_A (1.9; A is never written by
   * earlier work on the stream, so the kernel reads its first chunks of A
   * before its PDL wait). Part of the plan, as the descriptor is: the core
   * keys its plans by the whole descriptor, flags included. */
  uint32_t gemv_flags;
} cu_plan;

/* The element size of a type cuBLASLt GEMM plans take; 0 for the others
 * (gp_dtype_size knows every type). */
static size_t dt_size(int32_t t) {
  switch (t) {
    case GPURT_DTYPE_F32: return 4;
    case GPURT_DTYPE_F16: case GPURT_DTYPE_BF16: return 2;
    case GPURT_DTYPE_FP8_E4M3: case GPURT_DTYPE_FP8_E5M2: return 1;
    default: return 0;
  }
}

static int dt_cuda(int32_t t, cudaDataType_t *out) {
  switch (t) {
    case GPURT_DTYPE_F32: *out = CUDA_R_32F; return 1;
    case GPURT_DTYPE_F16: *out = CUDA_R_16F; return 1;
    case GPURT_DTYPE_BF16: *out = CUDA_R_16BF; return 1;
    case GPURT_DTYPE_FP8_E4M3: *out = CUDA_R_8F_E4M3; return 1;
    case GPURT_DTYPE_FP8_E5M2: *out = CUDA_R_8F_E5M2; return 1;
    default: return 0;
  }
}

static int is_fp8(int32_t t) {
  return t == GPURT_DTYPE_FP8_E4M3 || t == GPURT_DTYPE_FP8_E5M2;
}

/* Bytes an operand spans: elem * ((batch-1)*stride + (cols-1)*ld + rows). */
static int extent(uint64_t rows, uint64_t cols, uint64_t ldv, uint64_t batch,
                  int64_t stride, size_t elem, uint64_t *out) {
  unsigned __int128 e = (unsigned __int128)(cols - 1) * ldv + rows;
  if (batch > 1) e += (unsigned __int128)(batch - 1) * (uint64_t)stride;
  e *= elem;
  if (e > UINT64_MAX) return 0;
  *out = (uint64_t)e;
  return 1;
}

static cublasLtMatrixLayout_t plan_lc(const cu_plan *p) { return p->lc ? p->lc : p->ld; }

static void plan_release(cu_plan *p) {
  if (p->c_scratch) cu_drv.p_cuMemFree(p->c_scratch);
  if (p->op) lt.p_cublasLtMatmulDescDestroy(p->op);
  if (p->la) lt.p_cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) lt.p_cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) lt.p_cublasLtMatrixLayoutDestroy(p->lc);
  if (p->ld) lt.p_cublasLtMatrixLayoutDestroy(p->ld);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* The C scratch is freed in the plan's context (lost or not). */
void cu_gemm_plan_free(void *ctx, void *plan) {
  cu_plan *p = plan;
  if (p == NULL) return;
  cu_enter_quiet(ctx, p->dev);
  plan_release(p);
}

#define UNSUP(...) gp_err(GPURT_ERR_UNSUPPORTED, "gemm_plan_create: " __VA_ARGS__)
#define INVAL(...) gp_err(GPURT_ERR_INVALID_ARGUMENT, "gemm_plan_create: " __VA_ARGS__)

/* Checks the descriptor; fills the derived fields of p. */
static gpurt_error *plan_validate(cu_device *dev, gpurt_gemm_desc *d, cu_plan *p) {
  if (d->m == 0) return INVAL("m is 0");
  if (d->n == 0) return INVAL("n is 0");
  if (d->k == 0) return INVAL("k is 0");
  if (d->batch_count == 0) return INVAL("batch_count is 0 (must be >= 1)");
  if (d->batch_count > INT32_MAX) return UNSUP("batch_count %llu exceeds 2^31-1",
                                               (unsigned long long)d->batch_count);
  if (d->trans_a > 1) return INVAL("trans_a is %u (0 or 1)", d->trans_a);
  if (d->trans_b > 1) return INVAL("trans_b is %u (0 or 1)", d->trans_b);
  if (d->flags & ~(uint8_t)GPURT_GEMM_FLAG_CONST_A)
    return INVAL("flags 0x%02x has unknown bits 0x%02x (GPURT_GEMM_FLAG_CONST_A is 0x01)", d->flags,
                 d->flags & ~(uint8_t)GPURT_GEMM_FLAG_CONST_A);
  const int32_t at = d->a_type, bt = d->b_type;
  if (!dt_size(at)) return UNSUP("a_type %s", gp_dtype_name(at));
  if (!dt_size(bt)) return UNSUP("b_type %s", gp_dtype_name(bt));
  if (!dt_size(d->d_type)) return UNSUP("d_type %s", gp_dtype_name(d->d_type));
  p->fp8 = is_fp8(at) || is_fp8(bt);
  if (d->c_type == GPURT_DTYPE_INVALID)
    d->c_type = is_fp8(d->d_type) ? GPURT_DTYPE_BF16 : d->d_type;
  if (!dt_size(d->c_type) || is_fp8(d->c_type)) return UNSUP("c_type %s", gp_dtype_name(d->c_type));
  if (p->fp8) {
    /* cuBLASLt's FP8 table (cublasLtMatmul, "FP8 data types"): A/B e4m3 x
     * e4m3, e4m3 x e5m2 or e5m2 x e4m3 (never e5m2 x e5m2), TN layout, f32
     * accumulation and scale type; C/D/bias:
     *   D f32          C f32            bias bf16
     *   D bf16         C bf16           bias bf16
     *   D f16          C f16            bias f16
     *   D e4m3         C bf16 or f16    bias = C's type
     *   D e5m2         C bf16 or f16    bias = C's type (only if A or B is e5m2)
     */
    if (!is_fp8(at) || !is_fp8(bt))
      return UNSUP("%s: fp8 needs both a_type and b_type fp8 (got %s and %s)",
                   is_fp8(at) ? "b_type" : "a_type", gp_dtype_name(at), gp_dtype_name(bt));
    if (at == GPURT_DTYPE_FP8_E5M2 && bt == GPURT_DTYPE_FP8_E5M2)
      return UNSUP("b_type: fp8_e5m2 x fp8_e5m2 is not in cuBLASLt's FP8 table");
    if (dev->cc_major < 8 || (dev->cc_major == 8 && dev->cc_minor < 9))
      return UNSUP("a_type %s: fp8 needs compute capability 8.9 or newer, device %u has %d.%d",
                   gp_dtype_name(at), dev->index, dev->cc_major, dev->cc_minor);
    if (d->trans_a != 1) return UNSUP("trans_a: fp8 in cuBLASLt needs trans_a=1 (TN layout)");
    if (d->trans_b != 0) return UNSUP("trans_b: fp8 in cuBLASLt needs trans_b=0 (TN layout)");
    if (d->d_type == GPURT_DTYPE_FP8_E5M2 && at != GPURT_DTYPE_FP8_E5M2 &&
        bt != GPURT_DTYPE_FP8_E5M2)
      return UNSUP("d_type fp8_e5m2 with %s x %s: cuBLASLt's FP8 table has an e5m2 D only "
                   "when A or B is e5m2", gp_dtype_name(at), gp_dtype_name(bt));
    if (is_fp8(d->d_type)) {
      if (d->c_type != GPURT_DTYPE_BF16 && d->c_type != GPURT_DTYPE_F16)
        return UNSUP("c_type %s with d_type %s: cuBLASLt needs c_type bf16 or f16 for an "
                     "fp8 D", gp_dtype_name(d->c_type), gp_dtype_name(d->d_type));
    } else if (d->c_type != d->d_type) {
      return UNSUP("c_type %s must equal d_type %s (%s x %s)", gp_dtype_name(d->c_type),
                   gp_dtype_name(d->d_type), gp_dtype_name(at), gp_dtype_name(bt));
    }
    if (d->compute_type != GPURT_COMPUTE_DEFAULT && d->compute_type != GPURT_COMPUTE_F32)
      return UNSUP("compute_type %d: fp8 accumulates in f32", d->compute_type);
  } else {
    if (bt != at)
      return UNSUP("b_type %s must equal a_type %s", gp_dtype_name(bt), gp_dtype_name(at));
    if (is_fp8(d->d_type)) return UNSUP("d_type %s needs fp8 inputs", gp_dtype_name(d->d_type));
    if (d->c_type != d->d_type)
      return UNSUP("c_type %s must equal d_type %s", gp_dtype_name(d->c_type),
                   gp_dtype_name(d->d_type));
    if (at == GPURT_DTYPE_F32 && d->d_type != GPURT_DTYPE_F32)
      return UNSUP("d_type %s with f32 inputs (d_type must be f32)", gp_dtype_name(d->d_type));
    if (at != GPURT_DTYPE_F32 && d->d_type != at && d->d_type != GPURT_DTYPE_F32)
      return UNSUP("d_type %s with %s inputs (d_type must be %s or f32)", gp_dtype_name(d->d_type),
                   gp_dtype_name(at), gp_dtype_name(at));
    if (at == GPURT_DTYPE_BF16 && dev->cc_major < 8)
      return UNSUP("a_type bf16 needs compute capability 8.0, device has %d.%d",
                   dev->cc_major, dev->cc_minor);
  }
  switch (d->compute_type) {
    case GPURT_COMPUTE_DEFAULT:
    case GPURT_COMPUTE_F32:
    case GPURT_COMPUTE_F32_TF32:
      break;
    case GPURT_COMPUTE_F16:
      if (at != GPURT_DTYPE_F16 || d->d_type != GPURT_DTYPE_F16)
        return UNSUP("compute_type f16 needs f16 a/b/c/d (got %s and %s)", gp_dtype_name(at),
                     gp_dtype_name(d->d_type));
      p->half_scale = 1;
      break;
    default:
      return INVAL("compute_type %d is unknown", d->compute_type);
  }
  if (d->epilogue < GPURT_EPILOGUE_NONE || d->epilogue > GPURT_EPILOGUE_BIAS_GELU)
    return INVAL("epilogue %d is unknown", d->epilogue);
  p->has_bias = d->epilogue == GPURT_EPILOGUE_BIAS || d->epilogue == GPURT_EPILOGUE_BIAS_RELU ||
                d->epilogue == GPURT_EPILOGUE_BIAS_GELU;
  if (p->has_bias) {
    /* cuBLASLt's bias has D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE),
     * except fp8 GEMMs: bf16 for an f32 D, C's type for an fp8 D. */
    int32_t want = d->d_type;
    if (p->fp8 && d->d_type == GPURT_DTYPE_F32) want = GPURT_DTYPE_BF16;
    if (p->fp8 && is_fp8(d->d_type)) want = d->c_type;
    if (d->bias_type == GPURT_DTYPE_INVALID) d->bias_type = want;
    p->lt_bias_type = want;
    /* An f32 bias where cuBLASLt takes a 16-bit one is converted at each
     * run (see the top of this file); d->bias_type stays f32, so the run
     * checks the caller's m * 4 bytes. */
    if (d->bias_type == GPURT_DTYPE_F32 &&
        (want == GPURT_DTYPE_BF16 || want == GPURT_DTYPE_F16))
      p->bias_conv = 1;
    else if (d->bias_type != want)
      return UNSUP("bias_type %s with a_type %s, b_type %s, c_type %s, d_type %s: cuBLASLt "
                   "needs bias_type %s for this combination", gp_dtype_name(d->bias_type),
                   gp_dtype_name(at), gp_dtype_name(bt), gp_dtype_name(d->c_type),
                   gp_dtype_name(d->d_type), gp_dtype_name(want));
    if (d->m > UINT64_MAX / 4) return INVAL("m %llu: the bias spans more than 2^64 bytes",
                                            (unsigned long long)d->m);
    p->bytes_bias = d->m * dt_size(d->bias_type);
  }
  /* Stored shapes. */
  uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
  uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
  if (d->lda < ar) return INVAL("lda %llu < %llu rows of A", (unsigned long long)d->lda,
                                (unsigned long long)ar);
  if (d->ldb < br) return INVAL("ldb %llu < %llu rows of B", (unsigned long long)d->ldb,
                                (unsigned long long)br);
  if (d->ldd < d->m) return INVAL("ldd %llu < m %llu", (unsigned long long)d->ldd,
                                  (unsigned long long)d->m);
  if (d->ldc == 0) d->ldc = d->ldd;
  if (d->ldc < d->m) return INVAL("ldc %llu < m %llu", (unsigned long long)d->ldc,
                                  (unsigned long long)d->m);
  if (d->batch_count > 1) {
    if (d->stride_a < 0) return INVAL("stride_a %lld is negative", (long long)d->stride_a);
    if (d->stride_b < 0) return INVAL("stride_b %lld is negative", (long long)d->stride_b);
    if (d->stride_c < 0) return INVAL("stride_c %lld is negative", (long long)d->stride_c);
    if (d->stride_d < 0) return INVAL("stride_d %lld is negative", (long long)d->stride_d);
  }
  if (!extent(ar, ac, d->lda, d->batch_count, d->stride_a, dt_size(at), &p->bytes_a) ||
      !extent(br, bc, d->ldb, d->batch_count, d->stride_b, dt_size(bt), &p->bytes_b) ||
      !extent(d->m, d->n, d->ldc, d->batch_count, d->stride_c, dt_size(d->c_type), &p->bytes_c) ||
      !extent(d->m, d->n, d->ldd, d->batch_count, d->stride_d, dt_size(d->d_type), &p->bytes_d))
    return INVAL("the operands span more than 2^64 bytes");
  uint32_t al[4] = {d->align_a, d->align_b, d->align_c, d->align_d};
  static const char *aln[4] = {"align_a", "align_b", "align_c", "align_d"};
  const uint32_t es[4] = {(uint32_t)dt_size(at), (uint32_t)dt_size(bt), (uint32_t)dt_size(d->c_type),
                          (uint32_t)dt_size(d->d_type)};
  for (int i = 0; i < 4; i++) {
    if (al[i] & (al[i] - 1)) return INVAL("%s %u is not a power of two", aln[i], al[i]);
    /* An element is at least naturally aligned (0 and smaller values mean
     * that): cuBLASLt has no kernels for less, and gemm_run checks the
     * pointers against what the plan assumed. */
    if (al[i] < es[i]) al[i] = es[i];
    if (al[i] > 256) al[i] = 256;
    p->align[i] = al[i];
  }
  return NULL;
}

static gpurt_error *layout(cublasLtMatrixLayout_t *out, int32_t type, uint64_t rows,
                           uint64_t cols, uint64_t ldv, uint64_t batch, int64_t stride) {
  cudaDataType_t ct = CUDA_R_32F;
  dt_cuda(type, &ct);
  cublasStatus_t s = lt.p_cublasLtMatrixLayoutCreate(out, ct, rows, cols, (int64_t)ldv);
  if (s) return lt_err(s, "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    s = lt.p_cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc,
                                              sizeof bc);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = lt.p_cublasLtMatrixLayoutSetAttribute(
          *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    if (s) return lt_err(s, "cublasLtMatrixLayoutSetAttribute");
  }
  return NULL;
}

static gpurt_error *desc_set(cu_plan *p, cublasLtMatmulDescAttributes_t a, const void *v,
                             size_t n, const char *what) {
  cublasStatus_t s = lt.p_cublasLtMatmulDescSetAttribute(p->op, a, v, n);
  return s ? lt_err(s, what) : NULL;
}

/* The most tokens (columns of B) a plan takes the GEMV for: GEMV_MAX_N,
 * or GPURT_CUDA_GEMV_MAX_N=0..4 read once (0: never, every run on
 * cuBLASLt; for comparisons in one process, scripts/gpu_gemv.sh). And the
 * largest A it takes: GEMV_MAX_MK elements, or any with the variable set.
 * Measured on the H200 (bench/results/h200-2026-12-04f, quantbench -only
 * decode16, W rotated out of the L2): at n = 1 the GEMV is 1.05-1.25x
 * cuBLASLt for A of up to 25M elements (6144 x 4096, 4096 x 4096, 2048 x
 * 8192, 3072 x 2048, 2048 x 2048) and 0.94-0.99x from 33M up (16384 x
 * 2048, 4096 x 14336, 28672 x 4096), where cuBLASLt reads at 3.5-4.2
 * TB/s; at n = 2 it wins only below 17M, at n = 4 nowhere but 2048 x
 * 2048 (its shared-memory reads of x grow with n). */
#define GEMV_MAX_N 1
/* The size cap holds only for an A that may be written by earlier work,
 * or without programmatic dependent launch: with GPURT_GEMM_FLAG_CONST_A
 * and PDL, the GEMV takes n = 1 at any size of A. In the decoders (graph,
 * batch 1, context 1K, H200, bench/results/h200-2026-12-04g/call7: the
 * GEMV also for the MLP's and the lm head's 33M-525M-element weights
 * against cuBLASLt for them, A B A B): 1B 1,069.0 / 1,070.1 against
 * 1,023.1 / 1,022.1 tok/s (1.046x), 8B 231.9 / 232.0 against 229.0 /
 * 228.9 (1.013x). */
#define GEMV_MAX_MK (1ull << 25)
static uint64_t gemv_max_n(int *set) {
  static _Atomic int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    /* A value that is not a whole number from 0 to 4 keeps the default. */
    const long long n = cu_env_whole("GPURT_CUDA_GEMV_MAX_N", 0, CU_BGEMV_MAX_N);
    v = n >= 0 ? (int)n | 0x100 : GEMV_MAX_N;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  *set = v >> 8;
  return (uint64_t)(v & 0xff);
}

/* Whether the GEMV honours GPURT_GEMM_FLAG_CONST_A (copies A before its
 * PDL wait): yes, unless GPURT_CUDA_GEMV_CONST_A=0 (read once; for the
 * same-process comparison in scripts/gpu_gemv.sh). */
static int gemv_const_a(void) {
  static _Atomic int cached = -1;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("GPURT_CUDA_GEMV_CONST_A");
    v = !(e != NULL && strcmp(e, "0") == 0);
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

/* GPURT_CUDA_LT_REDUCTION (read once): the split-k reductions the plan's
 * cuBLASLt algorithm may use, as CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK.
 * "none": no split-k reduction (no separate reduce kernel: at batch 32 the
 * 8B decoder's cuBLASLt GEMMs came with 96 splitKreduce_kernel launches a
 * step, 218 us of a 6.2 ms step on the H200, bench/results/h200-2026-12-05b);
 * "inplace": also the in-place reduction (parts added in the output's type,
 * in order, counters in the workspace); unset or any other value: every
 * scheme (cuBLASLt's default). -1: no mask set. For the comparison in
 * scripts/gpu_gemv.sh (its ltnone and ltinplace parts). */
static int lt_reduction_mask(void) {
  static _Atomic int cached = -2;
  int v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v == -2) {
    const char *e = getenv("GPURT_CUDA_LT_REDUCTION");
    v = e == NULL                     ? -1
        : strcmp(e, "none") == 0      ? (int)CUBLASLT_REDUCTION_SCHEME_NONE
        : strcmp(e, "inplace") == 0   ? (int)CUBLASLT_REDUCTION_SCHEME_INPLACE
                                      : -1;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

/* Whether the plan's runs may take the GEMV (cu_bgemv; p->gemv_flags
 * set): 16-bit A, B, C and D of one type, f32 accumulation, no epilogue, A
 * transposed and B not (the decoder's y = x W^T), few columns and A below
 * GEMV_MAX_MK unless constant (see above), the 16-byte pieces it copies (k, lda, ldb and the batch strides
 * multiples of 8 elements), compute capability 8.0 or newer (cp.async). */
static void gemv_takes(const cu_device *dev, cu_plan *p) {
  const gpurt_gemm_desc *d = &p->d;
  const int32_t t = d->a_type;
  int set = 0;
  const uint64_t max_n = gemv_max_n(&set);
  /* A of any size when A is constant and the GEMV runs with programmatic
   * dependent launch: it then copies A's first chunks before its wait
   * (GEMV_MAX_MK's measurement). */
  const int big_ok = (p->gemv_flags & CU_BGEMV_CONST_A) && dev->pdl;
  /* A prologue runs only on the GEMV (n = 1): taken at any size and
   * whatever GPURT_CUDA_GEMV_MAX_N says, which choose between two kernels
   * of the same result. */
  const int pro = d->prologue != GPURT_GEMM_PROLOGUE_NONE;
  p->gemv = !p->fp8 && (t == GPURT_DTYPE_BF16 || t == GPURT_DTYPE_F16) && d->b_type == t &&
            d->c_type == t && d->d_type == t &&
            (d->compute_type == GPURT_COMPUTE_DEFAULT || d->compute_type == GPURT_COMPUTE_F32) &&
            d->epilogue == GPURT_EPILOGUE_NONE && d->trans_a == 1 && d->trans_b == 0 &&
            (pro ? d->n == 1 : d->n <= max_n) && (set || pro || d->m * d->k < GEMV_MAX_MK || big_ok) &&
            d->k % 8 == 0 && d->lda % 8 == 0 &&
            d->ldb % 8 == 0 &&
            d->k < (1ull << 31) && d->m <= UINT32_MAX && d->batch_count <= 65535 &&
            (d->batch_count == 1 || (d->stride_a % 8 == 0 && d->stride_b % 8 == 0)) && dev->cc_major >= 8;
}

/* The engine validated the descriptor (gp_gemm_validate); plan_validate
 * adds what cuBLASLt needs. */
gpurt_error *cu_gemm_plan(void *ctx, uint32_t device, const gpurt_gemm_desc *desc, void **out) {
  cu_runtime *rt = ctx;
  gpurt_error *e = NULL;
  cu_plan *p = calloc(1, sizeof *p);
  if (p == NULL) return gp_err(GPURT_ERR_OUT_OF_MEMORY, "gemm_plan_create: out of host memory");
  pthread_mutex_init(&p->mu, NULL);
  p->d = *desc;
  if ((e = cu_enter(rt, device))) goto fail_early;
  if ((e = plan_validate(&rt->devs[device], &p->d, p))) goto fail_early;
  char why[700];
  if (!lt_load(why, sizeof why)) {
    e = gp_err(GPURT_ERR_UNAVAILABLE, "gemm_plan_create: %s", why);
    goto fail_early;
  }
  p->dev = device;
  gpurt_gemm_desc *d = &p->d;
  cublasLtHandle_t lh = NULL;
  if ((e = lt_handle(&rt->devs[device], &lh))) goto fail;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  cudaDataType_t st = CUDA_R_32F;
  if (d->compute_type == GPURT_COMPUTE_F16) {
    ct = CUBLAS_COMPUTE_16F;
    st = CUDA_R_16F;
  } else if (d->compute_type == GPURT_COMPUTE_F32_TF32 && d->a_type == GPURT_DTYPE_F32) {
    ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  cublasStatus_t s = lt.p_cublasLtMatmulDescCreate(&p->op, ct, st);
  if (s) {
    e = lt_err(s, "cublasLtMatmulDescCreate");
    goto fail;
  }
  int32_t ta = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, "set TRANSA"))) goto fail;
  if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, "set TRANSB"))) goto fail;
  cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
  switch (d->epilogue) {
    case GPURT_EPILOGUE_BIAS: ep = CUBLASLT_EPILOGUE_BIAS; break;
    case GPURT_EPILOGUE_RELU: ep = CUBLASLT_EPILOGUE_RELU; break;
    case GPURT_EPILOGUE_BIAS_RELU: ep = CUBLASLT_EPILOGUE_RELU_BIAS; break;
    case GPURT_EPILOGUE_GELU: ep = CUBLASLT_EPILOGUE_GELU; break;
    case GPURT_EPILOGUE_BIAS_GELU: ep = CUBLASLT_EPILOGUE_GELU_BIAS; break;
    default: break;
  }
  if (ep != CUBLASLT_EPILOGUE_DEFAULT &&
      (e = desc_set(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep, "set EPILOGUE")))
    goto fail;
  if (p->has_bias) {
    cudaDataType_t bt = CUDA_R_32F;
    dt_cuda(p->lt_bias_type, &bt);
    int32_t bti = (int32_t)bt;
    if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bti, sizeof bti,
                      "set BIAS_DATA_TYPE")))
      goto fail;
  }
  uint64_t ar = d->trans_a ? d->k : d->m, ac = d->trans_a ? d->m : d->k;
  uint64_t br = d->trans_b ? d->n : d->k, bc = d->trans_b ? d->k : d->n;
  if ((e = layout(&p->la, d->a_type, ar, ac, d->lda, d->batch_count, d->stride_a))) goto fail;
  if ((e = layout(&p->lb, d->b_type, br, bc, d->ldb, d->batch_count, d->stride_b))) goto fail;
  /* C shares D's layout object when they are the same (as a direct caller
   * passes one layout twice); then a NULL C may alias D. */
  p->c_is_d = d->c_type == d->d_type && d->ldc == d->ldd &&
              (d->batch_count == 1 || d->stride_c == d->stride_d);
  if (!p->c_is_d &&
      (e = layout(&p->lc, d->c_type, d->m, d->n, d->ldc, d->batch_count, d->stride_c)))
    goto fail;
  if ((e = layout(&p->ld, d->d_type, d->m, d->n, d->ldd, d->batch_count, d->stride_d))) goto fail;
  /* Every pointer attribute a run sets is set now, before the heuristic
   * query, to the device's scratch (scales read 1.0 there): the algorithm is
   * chosen for the descriptor the runs use, and a run only swaps pointers. */
  if (p->fp8 || p->has_bias || !p->c_is_d) {
    if ((e = lt_scratch(&rt->devs[device], &p->scratch))) goto fail;
  }
  if (p->bias_conv &&
      (e = internal_f32_to_16(rt, device, p->lt_bias_type, &p->bias_fn)))
    goto fail;
  if (p->has_bias) {
    p->cur_bias = p->scratch;
    if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->cur_bias, sizeof p->cur_bias,
                      "set BIAS_POINTER")))
      goto fail;
  }
  if (p->fp8) {
    p->d_scale = is_fp8(d->d_type);
    p->cur_sa = p->cur_sb = p->scratch;
    if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->cur_sa, sizeof p->cur_sa,
                      "set A_SCALE_POINTER")) ||
        (e = desc_set(p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->cur_sb, sizeof p->cur_sb,
                      "set B_SCALE_POINTER")))
      goto fail;
    if (p->d_scale) {
      p->cur_sd = p->scratch;
      if ((e = desc_set(p, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &p->cur_sd,
                        sizeof p->cur_sd, "set D_SCALE_POINTER")))
        goto fail;
    }
  }
  cublasLtMatmulPreference_t pref = NULL;
  s = lt.p_cublasLtMatmulPreferenceCreate(&pref);
  if (s) {
    e = lt_err(s, "cublasLtMatmulPreferenceCreate");
    goto fail;
  }
  /* The same preference a direct caller sets (rawbench): the workspace
   * bound, and the alignments only where they are below cuBLASLt's default
   * of 256 bytes. */
  uint64_t wsmax = CU_GEMM_WORKSPACE;
  s = lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &wsmax, sizeof wsmax);
  const cublasLtMatmulPreferenceAttributes_t alattr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++) {
    uint32_t al = p->align[i];
    if (i == 2 && p->c_is_d) al = p->align[3];
    if (al < 256) s = lt.p_cublasLtMatmulPreferenceSetAttribute(pref, alattr[i], &al, sizeof al);
  }
  const int rmask = lt_reduction_mask();
  if (rmask >= 0 && s == CUBLAS_STATUS_SUCCESS) {
    const uint32_t m32 = (uint32_t)rmask;
    s = lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &m32, sizeof m32);
  }
  if (s) {
    lt.p_cublasLtMatmulPreferenceDestroy(pref);
    e = lt_err(s, "cublasLtMatmulPreferenceSetAttribute");
    goto fail;
  }
  cublasLtMatmulHeuristicResult_t res;
  memset(&res, 0, sizeof res);
  int found = 0;
  s = lt.p_cublasLtMatmulAlgoGetHeuristic(lh, p->op, p->la, p->lb, plan_lc(p), p->ld, pref, 1,
                                          &res, &found);
  lt.p_cublasLtMatmulPreferenceDestroy(pref);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE ||
      (s == CUBLAS_STATUS_SUCCESS && found == 0)) {
    char t[256] = "no algorithm found";
    if (s) lt_status_text(s, t, sizeof t);
    e = gp_err_vendor(GPURT_ERR_UNSUPPORTED, s,
                      "gemm_plan_create: cuBLASLt does not support the descriptor a_type=%s "
                      "b_type=%s c_type=%s d_type=%s compute_type=%d epilogue=%d bias_type=%s "
                      "trans_a=%u trans_b=%u m=%llu n=%llu k=%llu lda=%llu ldb=%llu ldc=%llu "
                      "ldd=%llu batch=%llu align=%u/%u/%u/%u on device %u (sm_%d%d): "
                      "cublasLtMatmulAlgoGetHeuristic: %s",
                      gp_dtype_name(d->a_type), gp_dtype_name(d->b_type), gp_dtype_name(d->c_type),
                      gp_dtype_name(d->d_type), d->compute_type, d->epilogue,
                      p->has_bias ? gp_dtype_name(p->lt_bias_type) : "none", d->trans_a,
                      d->trans_b,
                      (unsigned long long)d->m, (unsigned long long)d->n,
                      (unsigned long long)d->k, (unsigned long long)d->lda,
                      (unsigned long long)d->ldb, (unsigned long long)d->ldc,
                      (unsigned long long)d->ldd, (unsigned long long)d->batch_count,
                      p->align[0], p->align[1], p->align[2], p->align[3], device,
                      rt->devs[device].cc_major, rt->devs[device].cc_minor, t);
    goto fail;
  }
  if (s) {
    e = lt_err(s, "cublasLtMatmulAlgoGetHeuristic");
    goto fail;
  }
  p->algo = res.algo;
  p->ws_needed = res.workspaceSize;
  p->gemv_flags = (d->flags & GPURT_GEMM_FLAG_CONST_A) && gemv_const_a() ? CU_BGEMV_CONST_A : 0;
  gemv_takes(&rt->devs[device], p);
  if (d->prologue != GPURT_GEMM_PROLOGUE_NONE && !cu_fuse_on()) {
    e = UNSUP("the %s prologue is off on this plugin: measured on the H200 its GEMV was slower than the plain one "
              "and a separate kernel (GPURT_CUDA_FUSE=1 turns it on)",
              d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM ? "rmsnorm" : "swiglu");
    goto fail;
  }
  if (d->prologue != GPURT_GEMM_PROLOGUE_NONE && (!p->gemv || p->align[0] < 16 || p->align[1] < 16)) {
    e = UNSUP("the %s prologue runs on the plugin's GEMV alone, which takes n = 1, 16-bit A, B, C and D of one "
              "type, f32 accumulation, no epilogue, trans_a 1, k, lda and ldb multiples of 8 and A and B "
              "16-byte aligned, on compute capability 8.0 or newer (m=%llu n=%llu k=%llu a_type=%s c_type=%s "
              "d_type=%s epilogue=%d trans_a=%u lda=%llu ldb=%llu align_a=%u align_b=%u, sm_%d%d)",
              d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM ? "rmsnorm" : "swiglu", (unsigned long long)d->m,
              (unsigned long long)d->n, (unsigned long long)d->k, gp_dtype_name(d->a_type),
              gp_dtype_name(d->c_type), gp_dtype_name(d->d_type), d->epilogue, d->trans_a,
              (unsigned long long)d->lda, (unsigned long long)d->ldb, p->align[0], p->align[1],
              rt->devs[device].cc_major, rt->devs[device].cc_minor);
    goto fail;
  }
  if (p->gemv) {
    gpurt_error *ge = cu_bgemv_fn(rt, device, d->a_type, d->n, d->prologue, &p->gemv_fn, p->gemv_name,
                                  sizeof p->gemv_name);
    if (ge && d->prologue != GPURT_GEMM_PROLOGUE_NONE) { /* no other kernel runs it */
      e = ge;
      goto fail;
    }
    if (ge) {
      gp_error_destroy(ge);
      p->gemv = 0;
    }
  }
  *out = p;
  return NULL;
fail:
  plan_release(p);
  return e;
fail_early:
  pthread_mutex_destroy(&p->mu);
  free(p);
  return e;
}

static uint16_t f32_to_f16_bits(float f) {
  /* Round to nearest even; overflow to inf; subnormals handled. */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
  if (ax < 0x38800000u) {                                    /* subnormal half */
    float a;
    memcpy(&a, &ax, 4);
    float scaled = a * 16777216.0f; /* 2^24: units of the smallest subnormal */
    uint32_t q = (uint32_t)scaled;
    float rem = scaled - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t m = ax + 0xc8000fffu + ((ax >> 13) & 1); /* rebias + RNE */
  return (uint16_t)(sign | (m >> 13));
}

#define RUNERR(code, ...) gp_err(code, "gemm_run: " __VA_ARGS__)

/* The plan's C scratch (p->c_scratch), allocated on first use; the
 * context is current. */
static gpurt_error *plan_c_scratch(cu_runtime *rt, cu_plan *p, CUdeviceptr *out) {
  pthread_mutex_lock(&p->mu);
  if (p->c_scratch == 0) {
    CUdeviceptr q = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&q, (size_t)p->bytes_c);
    if (r != CUDA_SUCCESS) {
      pthread_mutex_unlock(&p->mu);
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                             "gemm_run: out of device memory allocating the plan's %llu-byte "
                             "C scratch (c is NULL, c_type %s differs from d_type %s) on "
                             "device %u", (unsigned long long)p->bytes_c,
                             gp_dtype_name(p->d.c_type), gp_dtype_name(p->d.d_type), p->dev);
      return cu_fail(rt, p->dev, r, "gemm_run: C scratch cuMemAlloc", NULL);
    }
    p->c_scratch = q;
  }
  *out = p->c_scratch;
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Under st->slot_mu, context current: replaces each scale pointer that is
 * not 16-byte aligned by a 16-byte aligned slot of the stream's slot
 * buffer (a: +0, b: +16, d: +32), enqueuing the 4-byte copy on the stream. */
static gpurt_error *stream_slots(cu_runtime *rt, cu_stream *st, CUdeviceptr *sa,
                                 CUdeviceptr *sb, CUdeviceptr *sd, int d_scale) {
  if (st->slots == 0) {
    CUdeviceptr q = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&q, 64);
    if (r != CUDA_SUCCESS) {
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                             "gemm_run: out of device memory allocating the stream's fp8 "
                             "scale slots on device %u", st->dev);
      return cu_fail(rt, st->dev, r, "gemm_run: scale slots cuMemAlloc", NULL);
    }
    st->slots = q;
  }
  CUdeviceptr *v[3] = {sa, sb, d_scale ? sd : NULL};
  static const char *what[3] = {"scale_a", "scale_b", "scale_d"};
  for (int i = 0; i < 3; i++) {
    if (v[i] == NULL || *v[i] % 16 == 0) continue;
    CUdeviceptr slot = st->slots + 16u * (unsigned)i;
    CUresult r = cu_drv.p_cuMemcpyDtoDAsync(slot, *v[i], 4, st->s);
    if (r != CUDA_SUCCESS) {
      char op[64];
      snprintf(op, sizeof op, "gemm_run: copying %s to an aligned slot", what[i]);
      return cu_fail(rt, st->dev, r, op, st->last_kernel);
    }
    *v[i] = slot;
  }
  return NULL;
}

/* Under st->slot_mu, context current: enqueues on the stream the
 * conversion of the run's m f32 bias values at *bias into the stream's
 * 16-bit bias copy (grown to m elements first), and points *bias at the
 * copy. Runs on one stream hold slot_mu from this launch through their
 * matmul, so the stream's order keeps each matmul's bias until it is read. */
static gpurt_error *stream_bias16(cu_runtime *rt, cu_stream *st, const cu_plan *p,
                                  CUdeviceptr *bias) {
  const uint64_t m = p->d.m;
  const uint64_t need = m * 2;
  if (st->bias16 == 0 || st->bias16_cap < need) {
    if (st->bias16 != 0) {
      /* Grow: earlier matmuls on this stream may still read the old copy. */
      CUresult r = cu_drv.p_cuStreamSynchronize(st->s);
      if (r != CUDA_SUCCESS)
        return cu_fail(rt, st->dev, r, "gemm_run: growing the stream's 16-bit bias copy: "
                       "stream synchronize", st->last_kernel);
      cu_drv.p_cuMemFree(st->bias16);
      st->bias16 = 0;
      st->bias16_cap = 0;
    }
    uint64_t cap = (need + 255) & ~(uint64_t)255;
    CUdeviceptr q = 0;
    CUresult r = cu_drv.p_cuMemAlloc(&q, (size_t)cap);
    if (r != CUDA_SUCCESS) {
      if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                             "gemm_run: out of device memory allocating the stream's "
                             "%llu-byte %s copy of the f32 bias on device %u",
                             (unsigned long long)cap, gp_dtype_name(p->lt_bias_type), st->dev);
      return cu_fail(rt, st->dev, r, "gemm_run: 16-bit bias copy cuMemAlloc", NULL);
    }
    st->bias16 = q;
    st->bias16_cap = cap;
  }
  const uint64_t grid = (m + 255) / 256;
  if (grid > (uint64_t)INT32_MAX)
    return RUNERR(GPURT_ERR_UNSUPPORTED, "m %llu: the f32 bias conversion needs more than "
                  "2^31-1 blocks", (unsigned long long)m);
  CUdeviceptr dst = st->bias16, src = *bias;
  uint64_t n = m;
  void *params[3] = {&dst, &src, &n};
  CUresult r = cu_drv.p_cuLaunchKernel(p->bias_fn, (unsigned)grid, 1, 1, 256, 1, 1, 0, st->s,
                                       params, NULL);
  if (r != CUDA_SUCCESS) {
    char op[128];
    snprintf(op, sizeof op, "gemm_run: launching the f32 bias conversion (" CU_INTERNAL_PREFIX
             "f32_to_%s)", gp_dtype_name(p->lt_bias_type));
    return cu_fail(rt, st->dev, r, op, st->last_kernel);
  }
  *bias = dst;
  return NULL;
}

/* Under p->mu, in gemm_run: points the plan's descriptor attribute attr
 * (named name, for the error) at v unless it points there already (*cur,
 * the last run's); *what names the attribute set last. */
static inline __attribute__((always_inline)) cublasStatus_t desc_ptr(
    cu_plan *p, cublasLtMatmulDescAttributes_t attr, const char *name, CUdeviceptr v,
    CUdeviceptr *cur, const char **what) {
  if (v == *cur) return CUBLAS_STATUS_SUCCESS;
  *what = name;
  cublasStatus_t s = lt.p_cublasLtMatmulDescSetAttribute(p->op, attr, &v, sizeof v);
  if (!s) *cur = v;
  return s;
}

static gpurt_error *gemm_warm(cu_runtime *rt, cu_stream *st, cu_plan *p, int has_c, int has_ws);

/* The engine checked the operands against the plan's descriptor (views,
 * NULLs, scales); the alignments and cuBLASLt's own limits are checked
 * here. On a preparing queue (a graph's capture follows) only the lazy
 * allocations are made. */
gpurt_error *cu_gemm_run(void *ctx, gp_queue *q, const gp_gemm_op *r) {
  cu_runtime *rt = ctx;
  cu_stream *st = q->q;
  cu_plan *p = r->plan;
  gpurt_error *e = NULL;
  const int has_c = r->c.obj != NULL, has_ws = r->workspace.obj != NULL;
  if (q->capturing == GP_QUEUE_PREPARE) return gemm_warm(rt, st, p, has_c, has_ws);
  uint32_t dev = p->dev;
  CUdeviceptr A = r->a.addr, B = r->b.addr, C, D = r->dd.addr, bias = 0, sa = 0, sb = 0, sd = 0;
  /* C NULL is never read (beta == 0); cuBLASLt accepts C == D only when
   * their layouts and types are the same, else C is the plan's C scratch
   * (set below, once the context is current). */
  C = has_c ? r->c.addr : p->c_is_d ? D : 0;
  const CUdeviceptr ptrs[4] = {A, B, has_c ? C : 0, D};
  static const char *names[4] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    if (ptrs[i] % p->align[i])
      return RUNERR(GPURT_ERR_INVALID_ARGUMENT,
                    "%s (offset included) is not aligned to the plan's align_%s of %u bytes",
                    names[i], names[i], p->align[i]);
  if (p->fp8)
    for (int i = 0; i < 4; i++)
      if (ptrs[i] % 16)
        return RUNERR(GPURT_ERR_INVALID_ARGUMENT,
                      "%s (offset included) is at device address %#llx, not 16-byte aligned: "
                      "cuBLASLt needs 16-byte aligned A, B, C and D pointers for fp8",
                      names[i], (unsigned long long)ptrs[i]);
  if (p->has_bias) {
    bias = r->bias.addr;
    if (p->bias_conv && bias % 4)
      return RUNERR(GPURT_ERR_INVALID_ARGUMENT,
                    "bias (offset included) is at device address %#llx, not 4-byte aligned: "
                    "an f32 bias must be naturally aligned", (unsigned long long)bias);
  }
  if (p->fp8 && !p->d_scale && r->scale_d.obj != NULL)
    return gp_err(GPURT_ERR_UNSUPPORTED,
                  "gemm_run: scale_d with d_type %s: cuBLASLt scales D only when d_type is "
                  "fp8 (CUBLASLT_MATMUL_DESC_D_SCALE_POINTER); fold it into alpha",
                  gp_dtype_name(p->d.d_type));
  if (p->fp8) {
    sa = sb = sd = p->scratch; /* NULL scale = 1.0 */
    if (r->scale_a.obj != NULL) sa = r->scale_a.addr;
    if (r->scale_b.obj != NULL) sb = r->scale_b.addr;
    if (r->scale_d.obj != NULL) sd = r->scale_d.addr;
  }
  CUdeviceptr ws = 0;
  size_t ws_size = 0;
  if (has_ws) {
    if (r->workspace_size < p->ws_needed)
      return RUNERR(GPURT_ERR_INVALID_ARGUMENT,
                    "workspace_size %llu is below the %zu bytes the plan's algorithm needs",
                    (unsigned long long)r->workspace_size, p->ws_needed);
    ws = r->workspace.addr;
    ws_size = (size_t)r->workspace_size;
  }
  if ((e = cu_enter(rt, dev))) return e;
  /* The GEMV needs neither the C scratch nor the workspace (a NULL C is
   * never read: beta is 0). */
  if (p->gemv && A % 16 == 0 && B % 16 == 0) {
    const gpurt_gemm_desc *d = &p->d;
    const CUdeviceptr nw = d->prologue == GPURT_GEMM_PROLOGUE_RMSNORM ? r->norm_weight.addr : 0;
    if (nw % 16)
      return RUNERR(GPURT_ERR_INVALID_ARGUMENT,
                    "norm_weight (offset included) is at device address %#llx, not 16-byte aligned: the rmsnorm "
                    "prologue's GEMV copies it in 16-byte pieces", (unsigned long long)nw);
    const cu_bgemv_args g = {A, B, has_c ? C : D, D, d->lda, d->ldb, d->ldc, d->ldd, d->stride_a, d->stride_b,
                             d->stride_c, d->stride_d, (uint32_t)d->m, (uint32_t)d->k, (uint32_t)d->n,
                             (float)r->alpha, (float)r->beta, p->gemv_flags, nw, (float)r->norm_eps};
    return cu_bgemv(rt, st, p->gemv_fn, p->gemv_name, d->batch_count, &g);
  }
  if (p->d.prologue != GPURT_GEMM_PROLOGUE_NONE) /* the plan's alignments make A and B 16-byte aligned */
    return RUNERR(GPURT_ERR_INTERNAL, "a plan with a prologue did not take its GEMV (A %#llx, B %#llx)",
                  (unsigned long long)A, (unsigned long long)B);
  if (C == 0 && (e = plan_c_scratch(rt, p, &C))) return e;
  if (!has_ws) {
    /* The stream's workspace, as large as the heuristic was allowed. */
    if ((e = cu_stream_workspace(rt, st, CU_GEMM_WORKSPACE, &ws))) return e;
    ws_size = CU_GEMM_WORKSPACE;
  }
  cu_device *cd = &rt->devs[dev];
  cublasLtHandle_t lh = (cublasLtHandle_t)cd->lt;
  float alpha = (float)r->alpha, beta = (float)r->beta;
  uint16_t halpha = 0, hbeta = 0;
  const void *pa = &alpha, *pb = &beta;
  if (p->half_scale) {
    halpha = f32_to_f16_bits(alpha);
    hbeta = f32_to_f16_bits(beta);
    pa = &halpha;
    pb = &hbeta;
  }
  /* Plans with pointer attributes (bias, fp8 scales) serialise their runs:
   * the attributes live in the plan's descriptor. Each is set only when it
   * differs from the last run's. */
  int lock = p->has_bias || p->fp8;
  /* fp8 scales that are not 16-byte aligned are copied into the stream's
   * aligned slots first, on the same stream (so in order with this matmul
   * and the stream's earlier ones); the slots are held until the matmul is
   * enqueued. */
  /* An f32 bias converted for cuBLASLt goes the same way: converted on the
   * stream into the stream's 16-bit copy, which is held (slot_mu) until the
   * matmul that reads it is enqueued. */
  int scale_slots = p->fp8 && ((sa % 16) || (sb % 16) || (p->d_scale && (sd % 16)));
  int slot_lock = scale_slots || p->bias_conv;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (lock) pthread_mutex_lock(&p->mu);
  if (slot_lock) {
    pthread_mutex_lock(&st->slot_mu);
    if ((scale_slots && (e = stream_slots(rt, st, &sa, &sb, &sd, p->d_scale))) ||
        (p->bias_conv && (e = stream_bias16(rt, st, p, &bias)))) {
      pthread_mutex_unlock(&st->slot_mu);
      pthread_mutex_unlock(&p->mu);
      return e;
    }
  }
  if (lock) {
    const char *what = NULL;
    if (p->has_bias)
      s = desc_ptr(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, "BIAS_POINTER", bias, &p->cur_bias,
                   &what);
    if (p->fp8 && !s)
      s = desc_ptr(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, "A_SCALE_POINTER", sa, &p->cur_sa,
                   &what);
    if (p->fp8 && !s)
      s = desc_ptr(p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, "B_SCALE_POINTER", sb, &p->cur_sb,
                   &what);
    if (p->d_scale && !s)
      s = desc_ptr(p, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, "D_SCALE_POINTER", sd, &p->cur_sd,
                   &what);
    if (s) {
      if (slot_lock) pthread_mutex_unlock(&st->slot_mu);
      pthread_mutex_unlock(&p->mu);
      char t[256];
      lt_status_text(s, t, sizeof t);
      return gp_err_vendor(lt_code(s), s, "gemm_run: cublasLtMatmulDescSetAttribute %s: %s",
                           what, t);
    }
  }
  s = lt.p_cublasLtMatmul(lh, p->op, pa, (const void *)(uintptr_t)A, p->la,
                          (const void *)(uintptr_t)B, p->lb, pb, (const void *)(uintptr_t)C,
                          plan_lc(p), (void *)(uintptr_t)D, p->ld, &p->algo,
                          (void *)(uintptr_t)ws, ws_size, (cudaStream_t)st->s);
  if (slot_lock) pthread_mutex_unlock(&st->slot_mu);
  if (lock) pthread_mutex_unlock(&p->mu);
  if (s != CUBLAS_STATUS_SUCCESS) {
    char t[256];
    lt_status_text(s, t, sizeof t);
    return gp_err_vendor(lt_code(s), s,
                         "gemm_run: cublasLtMatmul: %s (plan a_type=%s b_type=%s c_type=%s "
                         "d_type=%s m=%llu n=%llu k=%llu)",
                         t, gp_dtype_name(p->d.a_type), gp_dtype_name(p->d.b_type),
                         gp_dtype_name(p->d.c_type), gp_dtype_name(p->d.d_type),
                         (unsigned long long)p->d.m,
                         (unsigned long long)p->d.n, (unsigned long long)p->d.k);
  }
  /* Named for a later fault; written only when it changes (cd is shared by
   * every thread using the device). */
  cu_note_kernel(rt, st, 0, "cublasLtMatmul");
  return NULL;
}

/* ---- for cuda_quant.c: one TN matmul on device pointers ---------------------- */

size_t cu_gemm_workspace_bytes(void) { return CU_GEMM_WORKSPACE; }

/* Largest power of two, at most 256, dividing p. */
static uint32_t ptr_align(CUdeviceptr p) {
  uint32_t a = 256;
  while (a > 1 && p % a != 0) a >>= 1;
  return a;
}

gpurt_error *cu_gemm_tn_ptrs(cu_runtime *rt, cu_stream *st, int32_t t, uint64_t m, uint64_t n,
                             uint64_t k, CUdeviceptr A, CUdeviceptr B, CUdeviceptr D, CUdeviceptr ws,
                             size_t ws_size) {
  char why[700];
  if (!lt_load(why, sizeof why)) return gp_err(GPURT_ERR_UNAVAILABLE, "quant_matmul: %s", why);
  cublasLtHandle_t lh = NULL;
  gpurt_error *e = lt_handle(&rt->devs[st->dev], &lh);
  if (e) return e;
  const cudaDataType_t ct = t == GPURT_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  const char *what = "cublasLtMatmulDescCreate";
  cublasStatus_t s = lt.p_cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t tr = CUBLAS_OP_T;
  if (!s) {
    what = "set TRANSA";
    s = lt.p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tr, sizeof tr);
  }
  if (!s) {
    what = "cublasLtMatrixLayoutCreate";
    s = lt.p_cublasLtMatrixLayoutCreate(&la, ct, k, m, (int64_t)k);
  }
  if (!s) s = lt.p_cublasLtMatrixLayoutCreate(&lb, ct, k, n, (int64_t)k);
  if (!s) s = lt.p_cublasLtMatrixLayoutCreate(&ld, ct, m, n, (int64_t)m);
  if (!s) {
    what = "cublasLtMatmulPreferenceCreate";
    s = lt.p_cublasLtMatmulPreferenceCreate(&pref);
  }
  const uint64_t wsmax = ws_size;
  if (!s) {
    what = "cublasLtMatmulPreferenceSetAttribute";
    s = lt.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsmax,
                                                  sizeof wsmax);
  }
  const cublasLtMatmulPreferenceAttributes_t alattr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const uint32_t al[4] = {ptr_align(A), ptr_align(B), ptr_align(D), ptr_align(D)};
  for (int i = 0; i < 4 && !s; i++)
    if (al[i] < 256) s = lt.p_cublasLtMatmulPreferenceSetAttribute(pref, alattr[i], &al[i], sizeof al[i]);
  cublasLtMatmulHeuristicResult_t res;
  memset(&res, 0, sizeof res);
  int found = 0;
  if (!s) {
    what = "cublasLtMatmulAlgoGetHeuristic";
    s = lt.p_cublasLtMatmulAlgoGetHeuristic(lh, op, la, lb, ld, ld, pref, 1, &res, &found);
  }
  if (!s && found == 0) {
    e = gp_err(GPURT_ERR_UNSUPPORTED, "quant_matmul: cuBLASLt has no algorithm for the dequantized %s GEMM "
               "m=%llu n=%llu k=%llu", gp_dtype_name(t), (unsigned long long)m, (unsigned long long)n,
               (unsigned long long)k);
  } else if (!s) {
    const float alpha = 1.0f, beta = 0.0f;
    what = "cublasLtMatmul";
    s = lt.p_cublasLtMatmul(lh, op, &alpha, (const void *)(uintptr_t)A, la, (const void *)(uintptr_t)B, lb,
                            &beta, (const void *)(uintptr_t)D, ld, (void *)(uintptr_t)D, ld, &res.algo,
                            (void *)(uintptr_t)ws, ws_size, (cudaStream_t)st->s);
  }
  if (s && e == NULL) e = lt_err(s, what);
  if (pref) lt.p_cublasLtMatmulPreferenceDestroy(pref);
  if (ld) lt.p_cublasLtMatrixLayoutDestroy(ld);
  if (lb) lt.p_cublasLtMatrixLayoutDestroy(lb);
  if (la) lt.p_cublasLtMatrixLayoutDestroy(la);
  if (op) lt.p_cublasLtMatmulDescDestroy(op);
  return e;
}

gpurt_error *cu_gemm_lt_warm(cu_runtime *rt, uint32_t dev) {
  char why[700];
  if (!lt_load(why, sizeof why)) return gp_err(GPURT_ERR_UNAVAILABLE, "quant_matmul: %s", why);
  cublasLtHandle_t lh = NULL;
  return lt_handle(&rt->devs[dev], &lh);
}

/* Graphs (1.3): gemm_run on a preparing queue (GP_QUEUE_PREPARE, before
 * the recording's stream captures). The allocations are the ones
 * plan_c_scratch, cu_stream_workspace, stream_slots and stream_bias16 make
 * lazily; a run captured afterwards finds them and makes none. */
static gpurt_error *gemm_warm(cu_runtime *rt, cu_stream *st, cu_plan *p, int has_c, int has_ws) {
  gpurt_error *e;
  if ((e = cu_enter(rt, p->dev))) return e;
  CUdeviceptr q = 0;
  if (!has_c && !p->c_is_d && (e = plan_c_scratch(rt, p, &q))) return e;
  if (!has_ws && (e = cu_stream_workspace(rt, st, CU_GEMM_WORKSPACE, &q))) return e;
  if (!p->fp8 && !p->bias_conv) return NULL;
  pthread_mutex_lock(&st->slot_mu);
  CUresult r = CUDA_SUCCESS;
  const char *what = NULL;
  if (p->fp8 && st->slots == 0) {
    what = "fp8 scale slots";
    if ((r = cu_drv.p_cuMemAlloc(&q, 64)) == CUDA_SUCCESS) st->slots = q;
  }
  const uint64_t need = p->d.m * 2;
  if (r == CUDA_SUCCESS && p->bias_conv && st->bias16_cap < need) {
    /* The graph's own stream: nothing captured uses the old copy yet. */
    what = "16-bit copy of the f32 bias";
    if (st->bias16 != 0) {
      if ((r = cu_drv.p_cuStreamSynchronize(st->s)) == CUDA_SUCCESS) {
        cu_drv.p_cuMemFree(st->bias16);
        st->bias16 = 0;
        st->bias16_cap = 0;
      }
    }
    uint64_t cap = (need + 255) & ~(uint64_t)255;
    if (r == CUDA_SUCCESS && (r = cu_drv.p_cuMemAlloc(&q, (size_t)cap)) == CUDA_SUCCESS) {
      st->bias16 = q;
      st->bias16_cap = cap;
    }
  }
  pthread_mutex_unlock(&st->slot_mu);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return gp_err_vendor(GPURT_ERR_OUT_OF_MEMORY, r,
                         "out of device memory allocating the graph's %s on device %u", what, st->dev);
  if (r != CUDA_SUCCESS) return cu_fail(rt, st->dev, r, "gemm allocations before a capture", NULL);
  return NULL;
}
