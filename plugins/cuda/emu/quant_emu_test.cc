// SPDX-License-Identifier: Apache-2.0
//
// quant_emu_test: cuda_quant.cu's kernels run unmodified on the CPU
// (cuda_emu.h, GPURT_CUDA_EMU) against float64 references, on random data
// with fixed seeds (scripts/cuda_emu.sh builds and runs it):
//
//  bgemv   gpurt_bgemv_<t>_n1/_n2/_n4 (the GEMM slot's 16-bit GEMV) over the
//          shapes cu_bgemv launches it with (cuda_gemm.c's gemv_takes: k,
//          lda, ldb multiples of 8, A and B 16-byte aligned; n <= 4, the
//          kernel N = 1, 2 or 4 for n = 1, 2, 3-4; a block per 8 rows, or
//          fewer blocks each taking several row groups, GPURT_CUDA_GEMV_GRID;
//          BG_CONST_A or not; alpha and beta with C; batches), then the
//          prologue variants _n1_rmsnorm (y = W (x / sqrt(mean(x^2) + eps)
//          * nw)) and _n1_swiglu (y = W (silu(g) * u), U ldb elements after
//          G). Tolerance: conform/gemm.go's for 16-bit GEMMs (||D - ref|| /
//          ||ref|| <= 1e-2) and, per element, |ref| / 128 + c * sqrt(sum_p
//          (alpha w_p x_p)^2) with c = 2^-10 (f32 accumulation; SwiGLU 2^-7:
//          silu(g) * u is rounded to the 16-bit type, as silu_mul_T does).
//  qgemv   the register GEMVs gpurt_qgemv_<x>_<s>_n<N> and the factored
//          gpurt_qgemvf_*, measured correct on the H200: they check the
//          emulator itself (mma.sync's fragment layout above all). If they
//          fail, the emulator is wrong, not the kernel.
//          The int8 GEMVs' tolerance is conform/quant.go's: |ref| / 128 +
//          2^-6 sqrt(sum_j (x_j w_j)^2) per element.
//  emu/    the emulator's refusals, each in a child process: a lane alone
//          at a shuffle, a lane exiting while its warp waits, two shuffles
//          met by one warp, a partial mask, a misaligned cp.async, a read
//          past a buffer.
//
// Every case runs three times: the scheduler favouring the block's first
// threads, then its last ones (GPURT_TEST_EMU_ORDER fwd, rev; each lets the
// favoured warps run ahead to the next __syncthreads), with cp.async
// copying at once (a stage refilled while a warp still reads it gives
// different bits in one order or the other), then with cp.async landing
// only at the wait_group that must have it (GPURT_TEST_EMU_CPASYNC=late: a
// read of a stage its wait does not cover sees what the stage held). The
// three outputs must have the same bits (the kernels are deterministic).
// Every operand lies just before a guard page (a read or write past it
// faults, naming the kernel and thread); shared memory starts each block
// as NaNs (cuda_emu.h); outputs start as NaN and what a kernel must not
// write is checked unchanged.
//
// Usage: quant_emu_test [-quick] [FILTER...]: only the cases whose name
// contains one of the FILTERs; -quick runs each case once, under what the
// environment says (cuda_emu.h: GPURT_TEST_EMU_ORDER, GPURT_TEST_EMU_CPASYNC,
// GPURT_TEST_EMU_THREADS; fwd, now and fibers by default).
// Prints one line per case, then "N passed, M failed"; exit status 1 on a
// failure.
#ifndef GPURT_CUDA_EMU
#define GPURT_CUDA_EMU 1
#endif
#include "../src/cuda_quant.cu"
#include "emu_test.h"

#include <sys/wait.h>

// Where the refusal tests' kernels write (external: not optimized away).
float emu_sink[64];

#include <chrono>
#include <functional>
#include <memory>

namespace {

// ---- random data -------------------------------------------------------------------------------


// 16-bit values as raw bits, through the kernels' own conversions.
uint16_t to16(double v, int t) { return t == T_F16 ? f2h<T_F16>((float)v) : f2h<T_BF16>((float)v); }
double from16(uint16_t h, int t) { return t == T_F16 ? (double)h2f<T_F16>(h) : (double)h2f<T_BF16>(h); }
const char *tname(int t) { return t == T_F16 ? "f16" : "bf16"; }

// The emulator's settings each case runs under (all but the first only
// without -quick): the threads' order between barriers and when cp.async
// lands (cuda_emu.h). Their outputs must have the same bits.
const EmuRun kRuns[] = {{"fwd", "now"}, {"rev", "now"}, {"fwd", "late"}};

// Per-element and norm-wise comparison. ref, norm (sqrt of the element's
// sum of squared products) per element; got as 16-bit of type t; c the
// per-element constant; rel_tol the norm-wise tolerance (0: none).
struct Cmp {
  double num = 0, den = 0, worst = 0;
  std::string first_bad;
  int bad = 0;
  void add(const char *what, double got, double ref, double norm, double c) {
    const double tol = std::fabs(ref) / 128 + c * norm + 1e-30;
    const double d = std::fabs(got - ref);
    num += (got - ref) * (got - ref);
    den += ref * ref;
    const double r = std::isnan(d) ? 1e30 : d / tol;
    if (r > worst) worst = r;
    if (!(d <= tol)) {
      if (bad == 0) {
        char buf[240];
        snprintf(buf, sizeof buf, "%s = %.6g, reference %.6g (difference %.3g, tolerance %.3g)", what, got, ref, d,
                 tol);
        first_bad = buf;
      }
      bad++;
    }
  }
  std::string verdict(double rel_tol, int count) const {
    char buf[400];
    if (bad > 0) {
      snprintf(buf, sizeof buf, "%d of %d elements out of tolerance; the first: %s", bad, count, first_bad.c_str());
      return buf;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : 0;
    if (rel_tol > 0 && !(rel <= rel_tol)) {
      snprintf(buf, sizeof buf, "||D-ref||/||ref|| = %.3g, tolerance %.3g", rel, rel_tol);
      return buf;
    }
    return "";
  }
  std::string info() const {
    char buf[120];
    if (worst >= 1e30)
      snprintf(buf, sizeof buf, "rel %.1e, worst NaN", den > 0 ? std::sqrt(num / den) : 0.0);
    else
      snprintf(buf, sizeof buf, "rel %.1e, worst %.3f of tol", den > 0 ? std::sqrt(num / den) : 0.0, worst);
    return buf;
  }
};

// ---- the 16-bit GEMV ----------------------------------------------------------------------------

typedef void (*BgemvFn)(const BgemvArgs);

struct BgCase {
  int t = T_BF16;
  int N = 1;      // the kernel: _n1, _n2, _n4
  int pro = 0;    // 1 rmsnorm, 2 swiglu (N = 1)
  u32 m = 8, k = 512, n = 1;
  u32 lda_pad = 0, ldb_pad = 0, ldc_pad = 0, ldd_pad = 0; // elements past k (A, B) or m (C, D)
  u32 batch = 1;
  u32 grid = 0;   // blocks in x; 0: one per 8-row group
  bool const_a = false;
  float alpha = 1.f, beta = 0.f;
  float eps = 1e-5f;
};

BgemvFn bgemv_fn(const BgCase &c) {
  if (c.pro == 1) return c.t == T_F16 ? gpurt_bgemv_f16_n1_rmsnorm : gpurt_bgemv_bf16_n1_rmsnorm;
  if (c.pro == 2) return c.t == T_F16 ? gpurt_bgemv_f16_n1_swiglu : gpurt_bgemv_bf16_n1_swiglu;
  if (c.t == T_F16) return c.N == 1 ? gpurt_bgemv_f16_n1 : c.N == 2 ? gpurt_bgemv_f16_n2 : gpurt_bgemv_f16_n4;
  return c.N == 1 ? gpurt_bgemv_bf16_n1 : c.N == 2 ? gpurt_bgemv_bf16_n2 : gpurt_bgemv_bf16_n4;
}

std::string bg_name(const BgCase &c) {
  char buf[200];
  const char *pro = c.pro == 1 ? "_rmsnorm" : c.pro == 2 ? "_swiglu" : "";
  const u32 groups = (c.m + BG_RB - 1) / BG_RB;
  snprintf(buf, sizeof buf, "bgemv_%s_n%d%s m=%u k=%u n=%u%s%s%s%s", tname(c.t), c.N, pro, c.m, c.k, c.n,
           c.grid && c.grid < groups ? (" grid=" + std::to_string(c.grid)).c_str() : "", c.const_a ? " const_a" : "",
           c.beta != 0 ? " beta" : "", c.batch > 1 ? (" batch=" + std::to_string(c.batch)).c_str() : "");
  std::string s = buf;
  if (c.lda_pad || c.ldb_pad || c.ldd_pad) s += " ld+";
  return s;
}

void run_bgemv(const BgCase &c, uint64_t seed) {
  const std::string name = bg_name(c);
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const u32 lda = c.k + c.lda_pad, ldb = c.k + c.ldb_pad, ldc = c.m + c.ldc_pad, ldd = c.m + c.ldd_pad;
  const u32 bcols = c.pro == 2 ? 2 : c.n; // SwiGLU: G then U
  const long long sa = (long long)lda * c.m, sb = (long long)ldb * bcols, sc = (long long)ldc * c.n,
                  sd = (long long)ldd * c.n;
  // A, B and the norm weight are read in 16-byte pieces; C and D by element
  // (ending exactly at the guard page).
  Dev<uint16_t> A((size_t)sa * c.batch), B((size_t)sb * c.batch), C((size_t)sc * c.batch, 2),
      D((size_t)sd * c.batch, 2), NW(c.k);
  // Padding (past k in A and B) holds NaNs: a kernel that reads it poisons its sums.
  const uint16_t nan16 = 0x7fff;
  for (size_t i = 0; i < A.n; i++) A[i] = nan16;
  for (size_t i = 0; i < B.n; i++) B[i] = nan16;
  for (u32 bz = 0; bz < c.batch; bz++) {
    for (u32 i = 0; i < c.m; i++)
      for (u32 p = 0; p < c.k; p++) A[bz * sa + (size_t)i * lda + p] = to16(rng.uni(-1, 1), c.t);
    for (u32 j = 0; j < bcols; j++)
      for (u32 p = 0; p < c.k; p++) {
        double v = c.pro == 2 && j == 0 ? rng.uni(-5, 5) : c.pro == 1 ? rng.uni(-3, 3) : rng.uni(-1, 1);
        B[bz * sb + (size_t)j * ldb + p] = to16(v, c.t);
      }
    for (size_t i = 0; i < (size_t)sc; i++) C[bz * sc + i] = to16(rng.uni(-1, 1), c.t);
  }
  for (u32 p = 0; p < c.k; p++) NW[p] = to16(rng.uni(0.5, 1.5), c.t);

  BgemvArgs a{};
  a.w = A.p();
  a.x = B.p();
  a.c = c.beta != 0 ? C.p() : D.p();
  a.d = D.p();
  a.lda = lda, a.ldb = ldb, a.ldc = c.beta != 0 ? ldc : ldd, a.ldd = ldd;
  a.sa = sa, a.sb = sb, a.sc = c.beta != 0 ? sc : sd, a.sd = sd;
  a.m = c.m, a.k = c.k, a.n = c.n;
  a.alpha = c.alpha, a.beta = c.beta;
  a.flags = c.const_a ? BG_CONST_A : 0u;
  a.nw = c.pro == 1 ? NW.p() : nullptr;
  a.eps = c.eps;
  const u32 groups = (c.m + BG_RB - 1) / BG_RB;
  const u32 grid = c.grid && c.grid < groups ? c.grid : groups;
  BgemvFn fn = bgemv_fn(c);
  std::string kname = name.substr(0, name.find(' '));

  std::vector<uint16_t> out;
  std::string sched = run_orders(kRuns, 
      [&] {
        for (size_t i = 0; i < D.n; i++) D[i] = nan16;
      },
      [&] { emu_launch(dim3(grid, c.batch), dim3(256), [&] { fn(a); }, kname.c_str()); },
      [&] { return std::vector<uint16_t>(D.p(), D.p() + D.n); }, out);

  Cmp cmp;
  int count = 0;
  const double cst = c.pro == 2 ? 1.0 / 128 : 1.0 / 1024;
  std::vector<double> xb(c.k);
  std::string err;
  for (u32 bz = 0; bz < c.batch; bz++) {
    for (u32 j = 0; j < c.n; j++) {
      // op(B)'s column j as float64, the prologue applied.
      const uint16_t *bj = B.p() + bz * sb + (size_t)j * ldb;
      if (c.pro == 1) {
        double ss = 0;
        for (u32 p = 0; p < c.k; p++) ss += from16(bj[p], c.t) * from16(bj[p], c.t);
        const double r = 1.0 / std::sqrt(ss / c.k + (double)c.eps);
        for (u32 p = 0; p < c.k; p++) xb[p] = from16(bj[p], c.t) * r * from16(NW[p], c.t);
      } else if (c.pro == 2) {
        for (u32 p = 0; p < c.k; p++) {
          const double g = from16(bj[p], c.t), u = from16(bj[ldb + p], c.t);
          xb[p] = g / (1 + std::exp(-g)) * u;
        }
      } else {
        for (u32 p = 0; p < c.k; p++) xb[p] = from16(bj[p], c.t);
      }
      for (u32 i = 0; i < c.m; i++) {
        const uint16_t *ai = A.p() + bz * sa + (size_t)i * lda;
        double acc = 0, n2 = 0;
        for (u32 p = 0; p < c.k; p++) {
          const double pr = c.alpha * from16(ai[p], c.t) * xb[p];
          acc += pr;
          n2 += pr * pr;
        }
        if (c.beta != 0) {
          const double bc = c.beta * from16(C[bz * sc + (size_t)j * ldc + i], c.t);
          acc += bc;
          n2 += bc * bc;
        }
        const uint16_t g16 = out[bz * sd + (size_t)j * ldd + i];
        char what[80];
        snprintf(what, sizeof what, "D[%u][%u][%u]", bz, j, i);
        cmp.add(what, from16(g16, c.t), acc, std::sqrt(n2), cst);
        count++;
      }
    }
    // Nothing past row m or token n is written.
    for (u32 j = 0; j < c.n && err.empty(); j++)
      for (u32 i = c.m; i < ldd; i++)
        if (out[bz * sd + (size_t)j * ldd + i] != nan16) err = "D written past row m (ldd padding)";
  }
  if (err.empty()) err = cmp.verdict(1e-2, count);
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  report(name, err, cmp.info(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// ---- the int8 GEMVs -----------------------------------------------------------------------------

typedef void (*QvFn)(const uint8_t *, const uint16_t *, const uint16_t *, const uint16_t *, uint16_t *, u32, u32, u32,
                     u32, u32);

struct QCase {
  const char *kind = "qgemv"; // qgemv, qgemvf (n <= 8); qgemvw (the skinny form, 8 < n <= 32)
  int xt = T_BF16, st = T_BF16;
  u32 m = 16, k = 512, gs = 64, n = 1;
  bool wide = false; // x over 2^-20 .. 2^20 (bf16 x only)
  u32 grid = 0;      // qgemvr: blocks (0: one a row group)
};

QvFn q_fn(const QCase &c) {
  const int v = (c.xt == T_F16) * 2 + (c.st == T_F16);
#define QROW(P, XN, SN) \
  {P##_##XN##_##SN##_n1, P##_##XN##_##SN##_n2, P##_##XN##_##SN##_n3, P##_##XN##_##SN##_n4, \
   P##_##XN##_##SN##_n5, P##_##XN##_##SN##_n6, P##_##XN##_##SN##_n7, P##_##XN##_##SN##_n8}
  static const QvFn g[4][8] = {QROW(gpurt_qgemv, bf16, bf16), QROW(gpurt_qgemv, bf16, f16),
                               QROW(gpurt_qgemv, f16, bf16), QROW(gpurt_qgemv, f16, f16)};
  static const QvFn gf[4][8] = {QROW(gpurt_qgemvf, bf16, bf16), QROW(gpurt_qgemvf, bf16, f16),
                                QROW(gpurt_qgemvf, f16, bf16), QROW(gpurt_qgemvf, f16, f16)};
#undef QROW
#define WROW(P, XN, SN) {P##_##XN##_##SN##_t2, P##_##XN##_##SN##_t4}
  static const QvFn w[4][2] = {WROW(gpurt_qgemvw, bf16, bf16), WROW(gpurt_qgemvw, bf16, f16),
                               WROW(gpurt_qgemvw, f16, bf16), WROW(gpurt_qgemvw, f16, f16)};
#undef WROW
  static const QvFn r[4] = {gpurt_qgemvr_bf16_bf16_n1, gpurt_qgemvr_bf16_f16_n1, gpurt_qgemvr_f16_bf16_n1,
                            gpurt_qgemvr_f16_f16_n1};
  static const QvFn rs[4] = {gpurt_qgemvrs_bf16_bf16_n1, gpurt_qgemvrs_bf16_f16_n1, gpurt_qgemvrs_f16_bf16_n1,
                             gpurt_qgemvrs_f16_f16_n1};
  if (strcmp(c.kind, "qgemvr") == 0) return r[v];
  static const QvFn rl[4] = {gpurt_qgemvrl_bf16_bf16_n1, gpurt_qgemvrl_bf16_f16_n1, gpurt_qgemvrl_f16_bf16_n1,
                             gpurt_qgemvrl_f16_f16_n1};
  if (strcmp(c.kind, "qgemvrs") == 0) return rs[v];
  if (strcmp(c.kind, "qgemvrl") == 0) return rl[v];
  if (strcmp(c.kind, "qgemvw") == 0) return w[v][c.n > 16];
  return strcmp(c.kind, "qgemvf") == 0 ? gf[v][c.n - 1] : g[v][c.n - 1];
}

bool q_skinny(const QCase &c) { return strcmp(c.kind, "qgemvw") == 0; }

std::string q_name(const QCase &c) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s_%s_%s_n%u m=%u k=%u gs=%u%s%s", c.kind, tname(c.xt), tname(c.st), c.n, c.m, c.k, c.gs,
           c.wide ? " wide-x" : "", c.grid ? (" grid=" + std::to_string(c.grid)).c_str() : "");
  return buf;
}

// Runs c's kernel and checks it against float64.
void run_q(const QCase &c, uint64_t seed) {
  const std::string name = q_name(c);
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const u32 groups = c.k / c.gs;
  Dev<uint8_t> W((size_t)c.m * c.k);
  Dev<uint16_t> S((size_t)c.m * groups, 8), Bi((size_t)c.m * groups, 8), X((size_t)c.n * c.k), Y((size_t)c.n * c.m, 2);
  for (size_t i = 0; i < W.n; i++) W[i] = (uint8_t)(rng.next() >> 56);
  // MLX's affine form: w = s q + b with s = (max - min) / 255, b = min.
  for (size_t i = 0; i < S.n; i++) {
    const double lo = rng.uni(-0.6, -0.1), hi = rng.uni(0.1, 0.6);
    S[i] = to16((hi - lo) / 255, c.st);
    Bi[i] = to16(lo, c.st);
  }
  for (size_t i = 0; i < X.n; i++) {
    double v = rng.uni(-1, 1);
    if (c.wide) v = (rng.uni() < 0.5 ? -1 : 1) * std::ldexp(rng.uni(1, 2), (int)std::floor(rng.uni(-20, 20)));
    X[i] = to16(v, c.xt);
  }
  const u32 gshift = (u32)__builtin_ctz(c.gs);
  QvFn fn = q_fn(c);
  // cuda_quant.c's gemv_launch: 32 rows a block, k split among up to 16
  // warps (the skinny form: 16 for 2 n-tiles, 8 for 4; the grid is small
  // here) in 128-deep batches (the skinny form: 64-deep).
  const bool sk = q_skinny(c);
  const u32 depth = sk ? 64 : 128;
  const u32 blocks = (c.m + QV_ROWS - 1) / QV_ROWS, batches = (c.k + depth - 1) / depth;
  u32 nw = !sk ? QV_MAXW : c.n <= 16 ? 16 : 8;
  if (nw > batches) nw = batches;
  dim3 grid(blocks), block(nw * 32);
  // The ring GEMV (cuda_quant.c's qmm): 8 warps, at most one block an SM
  // (c.grid plays the SMs: fewer blocks than row groups, each taking
  // several in turn through its ring).
  if (strncmp(c.kind, "qgemvr", 6) == 0)
    grid = dim3(c.grid > 0 && c.grid < blocks ? c.grid : blocks),
    block = dim3(strcmp(c.kind, "qgemvrs") == 0 ? 128 : strcmp(c.kind, "qgemvrl") == 0 ? 512 : 256);
  // Prefetch distance 2, 256-byte fetches, 3 batches asked for before the
  // PDL wait: no-ops here, the code paths run.
  const u32 pf = 2u | 0x100u | 3u << 9;
  std::string kname = name.substr(0, name.find(' '));
  const uint16_t nan16 = 0x7fff;
  std::vector<uint16_t> out;
  std::string sched = run_orders(kRuns, 
      [&] {
        for (size_t i = 0; i < Y.n; i++) Y[i] = nan16;
      },
      [&] {
        emu_launch(grid, block, [&] { fn(W.p(), S.p(), Bi.p(), X.p(), Y.p(), c.m, c.k, gshift, c.n, pf); },
                   kname.c_str());
      },
      [&] { return std::vector<uint16_t>(Y.p(), Y.p() + Y.n); }, out);
  Cmp cmp;
  int count = 0;
  for (u32 tok = 0; tok < c.n; tok++)
    for (u32 row = 0; row < c.m; row++) {
      double ref = 0, n2 = 0;
      for (u32 j = 0; j < c.k; j++) {
        const u32 g = row * groups + j / c.gs;
        const double wv = from16(S[g], c.st) * W[(size_t)row * c.k + j] + from16(Bi[g], c.st);
        const double p = from16(X[(size_t)tok * c.k + j], c.xt) * wv;
        ref += p;
        n2 += p * p;
      }
      char what[64];
      snprintf(what, sizeof what, "y[%u][%u]", tok, row);
      cmp.add(what, from16(out[(size_t)tok * c.m + row], c.xt), ref, std::sqrt(n2), 1.0 / 64);
      count++;
    }
  std::string err = cmp.verdict(0, count);
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  report(name, err, cmp.info(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// ---- the grouped GEMM with the row counts on the device (ABI 1.11) ------------------------------
//
// gpurt_ggemmc_bf16 / _fp8 launched as cuda_quant.c's ggemm_counts does
// (a launch per 64 groups, each of (ceil(max_m / 128) + groups) x
// ceil(n / 128) blocks), against float64: D_g = A_g B_g^T for the groups'
// rows in order, cut at max_m rows; D's rows past the counts' total keep
// what they held (NaN here).

struct GgCase {
  bool fp8 = false;
  u32 n = 40, k = 64, max_m = 300;
  std::vector<u32> counts;
};

std::string gg_name(const GgCase &c) {
  u64 sum = 0;
  for (u32 m : c.counts) sum += m;
  char buf[160];
  snprintf(buf, sizeof buf, "ggemmc_%s groups=%zu n=%u k=%u max_m=%u rows=%llu", c.fp8 ? "fp8" : "bf16",
           c.counts.size(), c.n, c.k, c.max_m, (unsigned long long)sum);
  return buf;
}

void run_ggc(const GgCase &c, uint64_t seed) {
  const std::string name = gg_name(c);
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const u32 G = (u32)c.counts.size(), kb = c.k / 128, nb = (c.n + 127) / 128, es = c.fp8 ? 1 : 2;
  Dev<uint8_t> A((size_t)c.max_m * c.k * es), B((size_t)G * c.n * c.k * es);
  Dev<float> SA(c.fp8 ? (size_t)c.max_m * kb : 1), SB(c.fp8 ? (size_t)G * nb * kb : 1);
  Dev<uint16_t> D((size_t)c.max_m * c.n, 2);
  Dev<u32> Cnt(G, 4);
  for (u32 g = 0; g < G; g++) Cnt[g] = c.counts[g];
  // Operand element i as a double: bf16, or an e4m3 byte.
  auto val = [&](const Dev<uint8_t> &m, size_t i) {
    if (!c.fp8) return from16(reinterpret_cast<const uint16_t *>(m.p())[i], T_BF16);
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)m[i], __NV_E4M3);
    return (double)__half2float(__half(h));
  };
  auto fill = [&](Dev<uint8_t> &m) {
    for (size_t i = 0; i < m.n / es; i++) {
      const double v = rng.uni(-1, 1);
      if (c.fp8)
        m[i] = (uint8_t)__nv_cvt_float_to_fp8((float)(v * 4), __NV_SATFINITE, __NV_E4M3);
      else
        reinterpret_cast<uint16_t *>(m.p())[i] = to16(v, T_BF16);
    }
  };
  fill(A);
  fill(B);
  for (size_t i = 0; c.fp8 && i < SA.n; i++) SA[i] = (float)rng.uni(0.25, 2);
  for (size_t i = 0; c.fp8 && i < SB.n; i++) SB[i] = (float)rng.uni(0.25, 2);
  GemmArgs ga{A.p(), B.p(), D.p(), nullptr, nullptr, c.fp8 ? SA.p() : nullptr, c.fp8 ? SB.p() : nullptr, c.n, c.k, 0};
  const uint16_t nan16 = 0x7fff;
  std::vector<uint16_t> out;
  std::string sched = run_orders(kRuns,
      [&] {
        for (size_t i = 0; i < D.n; i++) D[i] = nan16;
      },
      [&] {
        for (u32 g0 = 0; g0 < G; g0 += GG_MAX_GROUPS) {
          const u32 cnt = G - g0 < GG_MAX_GROUPS ? G - g0 : GG_MAX_GROUPS;
          const CountArgs ca{Cnt.p(), g0, cnt, c.max_m};
          const dim3 grid(((c.max_m + GG_BM - 1) / GG_BM + cnt) * ((c.n + GG_BN - 1) / GG_BN)), block(GG_THREADS);
          if (c.fp8)
            emu_launch(grid, block, [&] { gpurt_ggemmc_fp8(ga, ca); }, "gpurt_ggemmc_fp8");
          else
            emu_launch(grid, block, [&] { gpurt_ggemmc_bf16(ga, ca); }, "gpurt_ggemmc_bf16");
        }
      },
      [&] { return std::vector<uint16_t>(D.p(), D.p() + D.n); }, out);
  Cmp cmp;
  int count = 0, untouched_bad = 0;
  u32 row = 0;
  for (u32 g = 0; g < G; g++) {
    const u32 m = std::min(c.counts[g], c.max_m - row);
    for (u32 r = row; r < row + m; r++)
      for (u32 j = 0; j < c.n; j++) {
        double ref = 0, n2 = 0;
        for (u32 p = 0; p < c.k; p++) {
          double v = val(A, (size_t)r * c.k + p) * val(B, ((size_t)g * c.n + j) * c.k + p);
          if (c.fp8) v *= SA[(size_t)r * kb + p / 128] * SB[((size_t)g * nb + j / 128) * kb + p / 128];
          ref += v;
          n2 += v * v;
        }
        char what[64];
        snprintf(what, sizeof what, "D[%u][%u] (group %u)", r, j, g);
        cmp.add(what, from16(out[(size_t)r * c.n + j], T_BF16), ref, std::sqrt(n2), 1.0 / 64);
        count++;
      }
    row += m;
  }
  for (size_t i = (size_t)row * c.n; i < out.size(); i++) untouched_bad += out[i] != nan16;
  std::string err = cmp.verdict(0, count);
  if (untouched_bad > 0)
    err += (err.empty() ? "" : "; and ") + std::to_string(untouched_bad) + " elements of D past the counts' " +
           std::to_string(row) + " rows were written";
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  report(name, err, cmp.info(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// ---- the emulator's refusals ---------------------------------------------------------------------
//
// What a kernel must not do, each in a child process that the emulator must
// abort with the message given.

__global__ void emu_lane_alone(float *out) { // lane 5 skips a shuffle its warp meets
  float v = (float)threadIdx.x;
  if (threadIdx.x % 32 != 5) v = __shfl_xor_sync(0xffffffffu, v, 1);
  __syncthreads();
  out[threadIdx.x] = v;
}
__global__ void emu_lane_exits(float *out) { // lane 7 exits while its warp waits at a shuffle
  if (threadIdx.x % 32 == 7) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}
__global__ void emu_two_places(float *out) { // lane 3 at another shuffle than its warp's
  float v = (float)threadIdx.x;
  if (threadIdx.x % 32 == 3)
    v = __shfl_xor_sync(0xffffffffu, v, 2);
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
__global__ void emu_half_mask(float *out) { out[threadIdx.x] = __shfl_down_sync(0xffffu, (float)threadIdx.x, 1); }
__global__ void emu_misaligned(const uint16_t *src) { // cp.async into shared memory 8 bytes off
  __shared__ __align__(16) uint16_t st[64];
  cp_async16(&st[4], src);
}
__global__ void emu_past_end(const uint16_t *src, float *out) { out[threadIdx.x] = h2f<T_BF16>(src[threadIdx.x + 1]); }

void death_test(const char *name, const char *want, const std::function<void()> &body) {
  const std::string full = std::string("emu/") + name;
  if (!selected(full)) return;
  const auto t0 = std::chrono::steady_clock::now();
  int fds[2];
  if (pipe(fds) != 0) emu::die("pipe failed");
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) emu::die("fork failed");
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    body();
    _exit(0); // not aborted: the emulator let it through
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t r;
  while ((r = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, (size_t)r);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string err;
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
    err = "the emulator did not abort (exit status " + std::to_string(status) + ")";
  else if (text.find(want) == std::string::npos)
    err = "its message lacks \"" + std::string(want) + "\": " + text;
  const size_t nl = text.find('\n');
  report(full, err, "aborts: " + text.substr(0, nl == std::string::npos ? text.size() : nl).substr(0, 90),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void death_tests() {
  float *out = emu_sink;
  death_test("lane_alone", "lane 5 at __syncthreads",
             [=] { emu_launch(dim3(1), dim3(64), [=] { emu_lane_alone(out); }, "emu_lane_alone"); });
  death_test("lane_exits", "exited",
             [=] { emu_launch(dim3(1), dim3(32), [=] { emu_lane_exits(out); }, "emu_lane_exits"); });
  death_test("two_places", "a collective every lane does not meet together",
             [=] { emu_launch(dim3(1), dim3(32), [=] { emu_two_places(out); }, "emu_two_places"); });
  death_test("half_mask", "with mask 0xffff",
             [=] { emu_launch(dim3(1), dim3(32), [=] { emu_half_mask(out); }, "emu_half_mask"); });
  death_test("misaligned_cp_async", "not 16-byte aligned", [] {
    Dev<uint16_t> src(64);
    emu_launch(dim3(1), dim3(1), [&] { emu_misaligned(src.p()); }, "emu_misaligned");
  });
  death_test("past_the_end", "SIGSEGV", [=] {
    Dev<uint16_t> src(32, 2);
    emu_launch(dim3(1), dim3(32), [&] { emu_past_end(src.p(), out); }, "emu_past_end");
  });
}

} // namespace

int main(int argc, char **argv) {
  if (!parse_args(argc, argv)) return 2;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t seed = 1;

  // The emulator refuses what no GPU runs correctly.
  death_tests();

  // The emulator's own check first: the GPU-verified register GEMVs (mma's
  // layout, shuffles, the block's reduction).
  {
    std::vector<QCase> qs;
    auto q = [&](const char *kind, int xt, int st, u32 m, u32 k, u32 gs, u32 n, bool wide = false) {
      QCase c;
      c.kind = kind, c.xt = xt, c.st = st, c.m = m, c.k = k, c.gs = gs, c.n = n, c.wide = wide;
      qs.push_back(c);
    };
    q("qgemv", T_BF16, T_BF16, 40, 1024, 64, 1);
    q("qgemv", T_F16, T_BF16, 40, 608, 32, 3);   // k not a multiple of 128: the tail batch
    q("qgemv", T_BF16, T_F16, 72, 512, 128, 8);
    q("qgemvf", T_BF16, T_BF16, 40, 1024, 128, 1, true);
    q("qgemvf", T_F16, T_F16, 40, 576, 64, 2);    // the tail batch
    q("qgemvf", T_BF16, T_F16, 72, 512, 64, 4);
    for (auto &c : qs) run_q(c, seed++);
  }

  // The ring GEMVs (n = 1, k a multiple of their chunk): each group size and type
  // pair; m not a multiple of 32 (the last group's rows past m); more
  // chunks than the ring's stages (stages refilled); fewer blocks than row
  // groups (a block walks several through one ring, the grid's SMs).
  {
    struct R {
      int xt, st;
      u32 m, k, gs, grid;
      bool wide;
    };
    const R rs[] = {{T_BF16, T_BF16, 40, 1024, 64, 0, false}, {T_BF16, T_BF16, 72, 5120, 128, 0, true},
                    {T_F16, T_BF16, 64, 512, 32, 0, false},   {T_BF16, T_F16, 100, 2048, 64, 2, false},
                    {T_F16, T_F16, 136, 4608, 64, 3, false},  {T_BF16, T_BF16, 200, 1536, 32, 4, false}};
    for (const R &x : rs)
      for (const char *kind : {"qgemvr", "qgemvrs", "qgemvrl"}) {
        if (strcmp(kind, "qgemvrl") == 0 && x.k % 1024 != 0) continue; // its chunk is 1024 deep
        QCase c;
        c.kind = kind, c.xt = x.xt, c.st = x.st, c.m = x.m, c.k = x.k, c.gs = x.gs, c.n = 1, c.grid = x.grid,
        c.wide = x.wide;
        run_q(c, seed++);
      }
    // k a multiple of 256 but not of 512: the 256-deep form only.
    QCase c;
    c.kind = "qgemvrs", c.xt = T_BF16, c.st = T_BF16, c.m = 48, c.k = 768, c.gs = 128, c.n = 1, c.grid = 1;
    run_q(c, seed++);
    // Groups of 32 in 1024-deep chunks (64 bytes of scales a row a chunk).
    c.kind = "qgemvrl", c.xt = T_F16, c.st = T_BF16, c.m = 64, c.k = 2048, c.gs = 32, c.n = 1, c.grid = 1;
    run_q(c, seed++);
  }

  // The skinny GEMV, 8 < n <= 32 (measured correct on the H200 and the
  // H100), against float64: m not a multiple of 32 (the last block's rows
  // past m), k with a tail, n short of its n-tiles.
  {
    struct W {
      int xt, st;
      u32 m, k, gs, n;
    };
    const W ws[] = {{T_BF16, T_BF16, 96, 512, 64, 32},  {T_F16, T_BF16, 72, 544, 32, 12},
                    {T_BF16, T_F16, 136, 1024, 128, 27}, {T_F16, T_F16, 40, 512, 64, 16},
                    {T_BF16, T_BF16, 200, 832, 32, 9},  {T_BF16, T_BF16, 600, 1024, 64, 32}};
    for (const W &x : ws) {
      QCase c;
      c.kind = "qgemvw", c.xt = x.xt, c.st = x.st, c.m = x.m, c.k = x.k, c.gs = x.gs, c.n = x.n;
      run_q(c, seed++);
    }
  }

  // The 16-bit GEMV: every kernel (n = 1, 2, 3 on _n4, 4) of each type
  // over m = 8, 24, 100 and k = 512 .. 2048 and 1000 (a multiple of 8 only:
  // a short last chunk), and for m = 24 and 100 k = 4096 and 3000, past the
  // ring's BG_ST chunks (stages refilled), A constant or not alternating,
  // so that each kernel sees both on several shapes.
  {
    std::vector<BgCase> cs;
    int idx = 0;
    const u32 ms[] = {8, 24, 100}, ks[] = {512, 1024, 1536, 2048, 1000, 4096, 3000};
    const int ns[][2] = {{1, 1}, {2, 2}, {4, 3}, {4, 4}}; // kernel N, n
    for (int t : {T_BF16, T_F16})
      for (auto &nn : ns)
        for (u32 m : ms)
          for (u32 k : ks) {
            if (m == 8 && k > 2048) continue;
            // n = 3 and 4 share the kernel: fewer shapes for n = 3.
            if (nn[1] == 3 && k != 1000 && k != 3000) continue;
            BgCase c;
            c.t = t, c.N = nn[0], c.n = (u32)nn[1], c.m = m, c.k = k;
            c.const_a = (idx++ % 2) == 1;
            cs.push_back(c);
          }
    // A grid smaller than the row groups (GPURT_CUDA_GEMV_GRID): each block
    // takes groups blockIdx.x, + gridDim.x, ...
    for (int t : {T_BF16, T_F16})
      for (int N : {1, 2, 4})
        for (bool ca : {false, true}) {
          BgCase c;
          c.t = t, c.N = N, c.n = (u32)N, c.m = 100, c.k = N == 2 ? 1000 : N == 4 ? 3000 : 1536;
          c.grid = N == 4 ? 2 : 3, c.const_a = ca;
          cs.push_back(c);
        }
    // alpha and beta with C, padded leading dimensions, batches.
    for (int t : {T_BF16, T_F16}) {
      BgCase c;
      c.t = t, c.N = 2, c.n = 2, c.m = 24, c.k = 1024, c.alpha = 0.5f, c.beta = 0.75f, c.ldc_pad = 8;
      cs.push_back(c);
      c = BgCase();
      c.t = t, c.N = 4, c.n = 3, c.m = 100, c.k = 1000, c.lda_pad = 24, c.ldb_pad = 8, c.ldd_pad = 5, c.const_a = true;
      cs.push_back(c);
      c = BgCase();
      c.t = t, c.N = 1, c.n = 1, c.m = 24, c.k = 1536, c.batch = 2, c.alpha = 2.f, c.beta = -1.f, c.grid = 2;
      cs.push_back(c);
    }
    for (auto &c : cs) run_bgemv(c, seed++);
  }

  // The prologue GEMVs (n = 1).
  {
    std::vector<BgCase> cs;
    int idx = 0;
    for (int pro : {1, 2})
      for (int t : {T_BF16, T_F16})
        for (u32 m : {8u, 24u, 100u})
          for (u32 k : {512u, 2048u, 1000u, 3000u}) {
            if (m == 8 && k == 3000) continue;
            BgCase c;
            c.t = t, c.N = 1, c.n = 1, c.pro = pro, c.m = m, c.k = k, c.const_a = (idx++ % 2) == 1;
            if (m == 100 && k == 2048) c.grid = 3;
            cs.push_back(c);
          }
    for (int pro : {1, 2}) {
      BgCase c;
      c.t = T_BF16, c.N = 1, c.n = 1, c.pro = pro, c.m = 24, c.k = 1536, c.alpha = 0.5f, c.beta = 0.25f,
      c.ldb_pad = pro == 2 ? 16 : 0;
      cs.push_back(c);
    }
    for (auto &c : cs) run_bgemv(c, seed++);
  }

  // The grouped GEMM with the row counts on the device (1.11): an empty
  // group, a group cut at max_m and the groups after it empty, rows left
  // below max_m (D past them untouched), a partial column tile, and 70
  // groups (two launches: the second's rows start after the first's).
  {
    std::vector<GgCase> cs;
    auto g = [&](bool fp8, u32 n, u32 k, u32 max_m, std::vector<u32> counts) {
      GgCase c;
      c.fp8 = fp8, c.n = n, c.k = k, c.max_m = max_m, c.counts = std::move(counts);
      cs.push_back(c);
    };
    g(false, 40, 64, 300, {70, 0, 130, 20, 200, 9});
    g(false, 136, 96, 256, {100, 3, 0, 17});
    g(true, 40, 128, 200, {60, 0, 90, 80});
    std::vector<u32> many(70);
    for (u32 i = 0; i < 70; i++) many[i] = (i * 7) % 5;
    g(false, 24, 32, 200, many);
    for (auto &c : cs) run_ggc(c, seed++);
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%d passed, %d failed (%.1f s%s)\n", g_pass, g_fail, secs,
         g_one_order ? ", quick: one run a case" : ", three runs a case");
  return g_fail ? 1 : 0;
}
