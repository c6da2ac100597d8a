// SPDX-License-Identifier: Apache-2.0
//
// kernels_emu_test: the built-in row kernels of cuda_kernels.cu run
// unmodified on the CPU (cuda_emu.h, GPURT_CUDA_EMU) against host
// references of gpurt.h's rules (scripts/cuda_emu.sh builds and runs it):
//
//  argmax  argmax_f32, argmax_bf16, argmax_f16 (one block per row, any
//          block size up to 1024): the column of the row's greatest value
//          in gpurt.h's order (-0 as +0, NaN lowest, the lower column on a
//          tie). Rows of 1 to 40,001 columns with planted ties at the
//          maximum, NaNs, -0 and +0 maxima, rows of -Inf only and of NaN
//          only, +Inf; blocks of 1024, 256, 100 (not a multiple of 32), 33,
//          32 and 1 threads. Checked exactly, and the same under every
//          schedule.
//  rmsnorm rmsnorm_T and add_rmsnorm_T (cuda_fused.cu: 16-byte vectors
//          where the row and pointers allow, else element by element;
//          shuffles then warps for the sum of squares): add_rmsnorm's
//          residual exactly round_T(x + r) in f32 (the bits of add_T), and
//          y within 2 ulps of T (f32: 2^-21 relative) of the float64 norm
//          of the T values: the sum's order is the kernel's own. Rows of 7
//          to 4,096 columns, aligned and not, blocks of 1024, 256, 100 and
//          32 threads, y in place of x too.
//  sample  sample_f32, sample_bf16 (gpurt.h's sample_T) over rows of
//          16 to 3,000 logits with ties, NaN and -Inf, top-k 0, 1, 20, 50
//          (past cols), 2000, top-p 1, 0.95, 0.9, 0.5, 0, temperatures 0
//          to 2, blocks of 32 to 256 threads: the token against a
//          float64 evaluation of gpurt.h's rule (a different token only
//          where the f32 sums put u at a kept element's boundary, to 2^-12
//          of the kept sum); the info prints a digest of the tokens, so
//          that two builds of the kernel can be compared bit for bit.
//  sample_rows  sample_rows_f32, sample_rows_bf16 (gpurt.h's
//          sample_rows_T: per-row top-k, top-p, min-p, penalties over a
//          history, the logprob): a token of the row that is no NaN, at
//          most top-k-th in the order (after the penalties), a logprob
//          that is at most 0, the same under every schedule; and the digest
//          of tokens and logprobs, to compare two builds.
//
// Every case runs three times, the scheduler favouring the block's first
// threads, its last ones (and the grid's last block first), then a shuffle
// (GPURT_TEST_EMU_ORDER fwd, rev, rand:SEED); the outputs must have the
// same bits.
//
// Usage: kernels_emu_test [-quick] [FILTER...]: only the cases whose name
// contains one of the FILTERs; -quick runs each case once. Prints one line
// per case, then "N passed, M failed"; exit status 1 on a failure.
#ifndef GPURT_CUDA_EMU
#define GPURT_CUDA_EMU 1
#endif
#include "cuda_emu.h"

#include "../src/cuda_kernels.cu"
#include "emu_test.h"

#include <chrono>
#include <functional>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

const EmuRun kRuns[] = {{"fwd", "now"}, {"rev", "now"}, {"rand:20261205", "now"}};

enum { K_F32, K_BF16, K_F16 };

const char *kname(int t) { return t == K_F32 ? "f32" : t == K_BF16 ? "bf16" : "f16"; }

// The element type's bits of v (bf16: round to nearest even; f16 through
// the CUDA headers' host conversion).
uint16_t to16(float v, int t) {
  if (t == K_F16) {
    __half h = __float2half_rn(v);
    uint16_t b;
    memcpy(&b, (const void *)&h, 2);
    return b;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  if (v != v) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float from16(uint16_t b, int t) {
  if (t == K_F16) {
    __half h;
    memcpy((void *)&h, &b, 2);
    return __half2float(h);
  }
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// gpurt.h's argmax order: greater value first (-0 equals +0, NaN below
// everything), then the lower column.
bool before(float a, size_t ia, float b, size_t ib) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return !na && nb ? true : na && nb ? ia < ib : false;
  if (a != b) return a > b;
  return ia < ib;
}

// A row-major matrix of logits as a kernel reads it: X32 (f32) or X16
// (bf16, f16 bits), and seen, its values as floats (16-bit types rounded).
struct Logits {
  Dev<float> X32;
  Dev<uint16_t> X16;
  std::vector<float> seen;
  Logits(const std::vector<float> &v, int t)
      : X32(t == K_F32 ? v.size() : 0), X16(t == K_F32 ? 0 : v.size()), seen(v.size()) {
    for (size_t i = 0; i < v.size(); i++) {
      if (t == K_F32) {
        X32[i] = v[i];
        seen[i] = v[i];
      } else {
        X16[i] = to16(v[i], t);
        seen[i] = from16(X16[i], t);
      }
    }
  }
};

// Runs launch (writing rows int32 into Idx) under each schedule, Idx reset
// to -7 before each; out: the first run's Idx as 16-bit words; returns ""
// or how the runs differ (run_orders).
std::string run_idx(Dev<int> &Idx, const std::function<void()> &launch, std::vector<uint16_t> &out) {
  return run_orders(
      kRuns, [&] { for (size_t i = 0; i < Idx.n; i++) Idx[i] = -7; }, launch,
      [&] {
        std::vector<uint16_t> v(2 * Idx.n);
        memcpy(v.data(), Idx.p(), 4 * Idx.n);
        return v;
      },
      out);
}

struct ArgCase {
  int t = K_F32;
  uint64_t rows = 3, cols = 1000;
  unsigned block = 1024;
};

void run_argmax(const ArgCase &c, uint64_t seed) {
  char nm[128];
  snprintf(nm, sizeof nm, "argmax_%s rows=%llu cols=%llu block=%u", kname(c.t), (unsigned long long)c.rows,
           (unsigned long long)c.cols, c.block);
  const std::string name = nm;
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const size_t n = (size_t)(c.rows * c.cols);
  std::vector<float> v(n);
  for (uint64_t r = 0; r < c.rows; r++) {
    float *row = &v[r * c.cols];
    const int kind = (int)(r % 8);
    for (uint64_t j = 0; j < c.cols; j++) row[j] = (float)rng.uni(-8, 8);
    const uint64_t a = (uint64_t)rng.below((int)c.cols), b = (uint64_t)rng.below((int)c.cols);
    switch (kind) {
    case 0: break; // random values
    case 1:        // a tie at the maximum: the lower column
      row[a] = row[b] = 100.0f;
      break;
    case 2: // NaNs everywhere but some, the maximum among the rest
      for (uint64_t j = 0; j < c.cols; j++)
        if (j % 3 != 0) row[j] = NAN;
      break;
    case 3: // -0 and +0 as the maximum (equal: the lower column)
      for (uint64_t j = 0; j < c.cols; j++) row[j] = -1.0f - (float)(j % 7);
      row[a] = -0.0f, row[b] = 0.0f;
      break;
    case 4: // -Inf only
      for (uint64_t j = 0; j < c.cols; j++) row[j] = -INFINITY;
      break;
    case 5: // NaN only: column 0
      for (uint64_t j = 0; j < c.cols; j++) row[j] = NAN;
      break;
    case 6: // +Inf twice
      row[a] = row[b] = INFINITY;
      break;
    case 7: // the maximum in the last column
      row[c.cols - 1] = 50.0f;
      break;
    }
  }
  // The inputs as the kernel reads them (16-bit types rounded), and the
  // reference over those values.
  const Logits L(v, c.t);
  const std::vector<float> &seen = L.seen;
  const Dev<float> &X32 = L.X32;
  const Dev<uint16_t> &X16 = L.X16;
  std::vector<int> want(c.rows);
  for (uint64_t r = 0; r < c.rows; r++) {
    size_t best = 0;
    for (size_t j = 1; j < c.cols; j++)
      if (before(seen[r * c.cols + j], j, seen[r * c.cols + best], best)) best = j;
    want[r] = (int)best;
  }
  Dev<int> Idx(c.rows);
  std::vector<uint16_t> out;
  std::string sched = run_idx(
      Idx,
      [&] {
        const dim3 grid((unsigned)c.rows), block(c.block);
        if (c.t == K_F32)
          emu_launch(grid, block, [&] { argmax_f32(Idx.p(), X32.p(), c.rows, c.cols); }, "argmax_f32");
        else if (c.t == K_BF16)
          emu_launch(grid, block, [&] { argmax_bf16(Idx.p(), (const __nv_bfloat16 *)X16.p(), c.rows, c.cols); },
                     "argmax_bf16");
        else
          emu_launch(grid, block, [&] { argmax_f16(Idx.p(), (const __half *)X16.p(), c.rows, c.cols); },
                     "argmax_f16");
      },
      out);
  std::string err;
  for (uint64_t r = 0; r < c.rows && err.empty(); r++) {
    int got;
    memcpy(&got, (const char *)out.data() + 4 * r, 4);
    if (got != want[r]) {
      char b[200];
      snprintf(b, sizeof b, "row %llu (kind %d): column %d, want %d", (unsigned long long)r, (int)(r % 8), got,
               want[r]);
      err = b;
    }
  }
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  report(name, err, "", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// T's value nearest v, as a float (the kernel's st<T> then ld).
float round_t(float v, int t) { return t == K_F32 ? v : from16(to16(v, t), t); }

float ulp_t(double v, int t) {
  const int mant = t == K_F32 ? 23 : t == K_BF16 ? 7 : 10;
  int e;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  const int emin = t == K_F32 ? -125 : t == K_BF16 ? -125 : -13; // subnormals: the smallest step
  return (float)std::ldexp(1.0, std::max(e, emin) - 1 - mant);
}

struct NormCase {
  int t = K_F32;
  bool add = false, inplace = false, misalign = false;
  uint64_t rows = 3, cols = 4096;
  unsigned block = 1024;
};

void run_norm(const NormCase &c, uint64_t seed) {
  char nm[160];
  snprintf(nm, sizeof nm, "%s_%s rows=%llu cols=%llu block=%u%s%s", c.add ? "add_rmsnorm" : "rmsnorm", kname(c.t),
           (unsigned long long)c.rows, (unsigned long long)c.cols, c.block, c.misalign ? " misaligned" : "",
           c.inplace ? " in-place" : "");
  const std::string name = nm;
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const size_t n = (size_t)(c.rows * c.cols), off = c.misalign ? 1 : 0;
  const size_t es = c.t == K_F32 ? 4 : 2;
  // Element buffers of T (as bytes), off elements in (misaligned: the
  // element-by-element path).
  Dev<uint8_t> X((n + off) * es, 16), R((n + off) * es, 16), W((c.cols + off) * es, 16), Y((n + off) * es, 16);
  auto put = [&](Dev<uint8_t> &b, size_t i, float v) {
    if (c.t == K_F32)
      memcpy(b.p() + (i + off) * 4, &v, 4);
    else {
      const uint16_t h = to16(v, c.t);
      memcpy(b.p() + (i + off) * 2, &h, 2);
    }
  };
  auto get = [&](const uint8_t *base, size_t i) {
    if (c.t == K_F32) {
      float v;
      memcpy(&v, base + (i + off) * 4, 4);
      return v;
    }
    uint16_t h;
    memcpy(&h, base + (i + off) * 2, 2);
    return from16(h, c.t);
  };
  std::vector<float> x0(n), r0(n), w0(c.cols);
  for (size_t i = 0; i < n; i++) x0[i] = round_t((float)rng.uni(-3, 3), c.t), r0[i] = round_t((float)rng.uni(-3, 3), c.t);
  for (size_t j = 0; j < c.cols; j++) w0[j] = round_t((float)rng.uni(0.5, 1.5), c.t);
  for (size_t j = 0; j < c.cols; j++) put(W, j, w0[j]);
  const float eps = 1e-5f;
  std::vector<uint8_t> xs, rs;
  std::vector<uint16_t> out;
  std::string sched = run_orders(
      kRuns,
      [&] {
        for (size_t i = 0; i < n; i++) put(X, i, x0[i]), put(R, i, r0[i]), put(Y, i, NAN);
      },
      [&] {
        const dim3 grid((unsigned)c.rows), block(c.block);
        uint8_t *x = X.p() + off * es, *r = R.p() + off * es, *w = W.p() + off * es;
        uint8_t *y = c.inplace ? x : Y.p() + off * es;
        if (c.t == K_F32) {
          if (c.add)
            emu_launch(grid, block, [&] { add_rmsnorm_f32((float *)x, (float *)r, (const float *)w, eps, c.rows, c.cols); });
          else
            emu_launch(grid, block, [&] { rmsnorm_f32((float *)y, (const float *)x, (const float *)w, eps, c.rows, c.cols); });
        } else if (c.t == K_BF16) {
          typedef __nv_bfloat16 B;
          if (c.add)
            emu_launch(grid, block, [&] { add_rmsnorm_bf16((B *)x, (B *)r, (const B *)w, eps, c.rows, c.cols); });
          else
            emu_launch(grid, block, [&] { rmsnorm_bf16((B *)y, (const B *)x, (const B *)w, eps, c.rows, c.cols); });
        } else {
          if (c.add)
            emu_launch(grid, block, [&] { add_rmsnorm_f16((__half *)x, (__half *)r, (const __half *)w, eps, c.rows, c.cols); });
          else
            emu_launch(grid, block, [&] { rmsnorm_f16((__half *)y, (const __half *)x, (const __half *)w, eps, c.rows, c.cols); });
        }
      },
      [&] {
        // the output (y, or x for add and in place) and r, as 16-bit words
        const uint8_t *o = c.add || c.inplace ? X.p() : Y.p();
        std::vector<uint16_t> v((2 * (n + off) * es + 1) / 2);
        memcpy(v.data(), o, (n + off) * es);
        memcpy((uint8_t *)v.data() + (n + off) * es, R.p(), (n + off) * es);
        return v;
      },
      out);
  const uint8_t *o = (const uint8_t *)out.data(), *ro = o + (n + off) * es;
  std::string err;
  double worst = 0;
  for (uint64_t r = 0; r < c.rows && err.empty(); r++) {
    std::vector<float> v(c.cols);
    for (uint64_t j = 0; j < c.cols; j++) {
      const size_t i = r * c.cols + j;
      v[j] = x0[i];
      if (c.add) {
        v[j] = round_t(x0[i] + r0[i], c.t); // f32 add, then T (add_T)
        const float got = get(ro, i);
        if (memcmp(&got, &v[j], 4) != 0) {
          char b[200];
          snprintf(b, sizeof b, "r[%llu][%llu] is %.9g, want round_T(x + r) = %.9g", (unsigned long long)r,
                   (unsigned long long)j, got, v[j]);
          err = b;
          break;
        }
      }
    }
    double ss = 0;
    for (float e : v) ss += (double)e * e;
    const double sc = 1.0 / std::sqrt(ss / (double)c.cols + eps);
    for (uint64_t j = 0; j < c.cols && err.empty(); j++) {
      const double ref = (double)v[j] * sc * w0[j];
      const float got = get(o, r * c.cols + j);
      const double tol = 2.0 * ulp_t(ref, c.t) + std::fabs(ref) * std::ldexp(1.0, -21);
      const double d = std::fabs((double)got - ref);
      worst = std::max(worst, d / tol);
      if (!(d <= tol)) {
        char b[200];
        snprintf(b, sizeof b, "y[%llu][%llu] is %.9g, the float64 norm %.9g (tolerance %.3g)", (unsigned long long)r,
                 (unsigned long long)j, got, ref, tol);
        err = b;
      }
    }
  }
  if (!X.g->margins_intact() || !R.g->margins_intact() || !Y.g->margins_intact())
    err += (err.empty() ? "" : "; and ") + std::string("a write outside its buffer");
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  char info[64];
  snprintf(info, sizeof info, "worst %.3f of tol", worst);
  report(name, err, info, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

uint64_t splitmix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct SampleCase {
  int t = K_F32;
  uint64_t rows = 6, cols = 1000;
  uint64_t topk = 0;
  float topp = 1.0f, temp = 1.0f;
  unsigned block = 1024;
};

// gpurt.h's sample_T in float64 over the values the kernel reads; near:
// whether u times the kept sum lies within 2^-12 of the kept sum from a
// running sum, or the top-p cut within 2^-12 of its bound (where f32 sums
// may decide otherwise).
int sample_ref(const float *x, uint64_t cols, uint64_t r, uint64_t topk, float topp, float temp, uint64_t seed,
               bool *near) {
  *near = false;
  std::vector<size_t> ord(cols);
  for (size_t j = 0; j < cols; j++) ord[j] = j;
  std::stable_sort(ord.begin(), ord.end(), [&](size_t a, size_t b) { return before(x[a], a, x[b], b); });
  const float mx = x[ord[0]];
  if (topk == 1 || !(temp > 0) || !std::isfinite(mx)) return (int)ord[0];
  size_t kept = topk == 0 || topk > cols ? cols : (size_t)topk;
  std::vector<double> w(kept);
  for (size_t i = 0; i < kept; i++) {
    const double v = std::exp(((double)x[ord[i]] - mx) / temp);
    w[i] = v == v ? v : 0;
  }
  if (topp < 1) {
    if (topp <= 0) {
      kept = 1;
    } else {
      double z = 0, run = 0;
      for (size_t i = 0; i < kept; i++) z += w[i];
      size_t i = 0;
      for (; i < kept; i++) {
        run += w[i];
        if (std::fabs(run - topp * z) <= z * std::ldexp(1.0, -12)) *near = true;
        if (run >= topp * z) break;
      }
      kept = std::min(kept, i + 1);
    }
  }
  double z = 0;
  for (size_t i = 0; i < kept; i++) z += w[i];
  const double u = (double)(splitmix64(seed + (r + 1) * 0x9E3779B97F4A7C15ull) >> 40) / 16777216.0;
  double run = 0;
  for (size_t i = 0; i < kept; i++) {
    run += w[i];
    if (std::fabs(run - u * z) <= z * std::ldexp(1.0, -12)) *near = true;
    if (run > u * z) return (int)ord[i];
  }
  *near = true;
  return (int)ord[kept - 1];
}

void run_sample(const SampleCase &c, uint64_t seed) {
  char nm[160];
  snprintf(nm, sizeof nm, "sample_%s rows=%llu cols=%llu k=%llu p=%g T=%g block=%u", kname(c.t),
           (unsigned long long)c.rows, (unsigned long long)c.cols, (unsigned long long)c.topk, c.topp, c.temp, c.block);
  const std::string name = nm;
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const size_t n = (size_t)(c.rows * c.cols);
  std::vector<float> v0(n);
  for (uint64_t r = 0; r < c.rows; r++)
    for (uint64_t j = 0; j < c.cols; j++) {
      float v = (float)rng.uni(-6, 6);
      if (r % 3 == 1 && j % 5 == 0) v = 4.0f;                   // ties
      if (r % 3 == 2 && j % 7 == 0) v = j % 2 ? NAN : -INFINITY; // NaN and -Inf, never drawn
      v0[r * c.cols + j] = v;
    }
  const Logits L(v0, c.t);
  const std::vector<float> &seen = L.seen;
  const Dev<float> &X32 = L.X32;
  const Dev<uint16_t> &X16 = L.X16;
  const uint64_t sd = 1234567 + seed;
  Dev<int> Idx(c.rows);
  std::vector<uint16_t> out;
  std::string sched = run_idx(
      Idx,
      [&] {
        const dim3 grid((unsigned)c.rows), block(c.block);
        if (c.t == K_F32)
          emu_launch(grid, block, [&] { sample_f32(Idx.p(), X32.p(), c.rows, c.cols, c.topk, c.topp, c.temp, sd); });
        else
          emu_launch(grid, block, [&] {
            sample_bf16(Idx.p(), (const __nv_bfloat16 *)X16.p(), c.rows, c.cols, c.topk, c.topp, c.temp, sd);
          });
      },
      out);
  std::string err;
  int nearmiss = 0;
  uint64_t digest = 0;
  for (uint64_t r = 0; r < c.rows && err.empty(); r++) {
    int got;
    memcpy(&got, (const char *)out.data() + 4 * r, 4);
    digest = splitmix64(digest ^ (uint64_t)(uint32_t)got);
    bool near = false;
    const int want = sample_ref(&seen[r * c.cols], c.cols, r, c.topk, c.topp, c.temp, sd, &near);
    if (got != want) {
      if (near && got >= 0 && (uint64_t)got < c.cols && seen[r * c.cols + got] == seen[r * c.cols + got]) {
        nearmiss++;
        continue;
      }
      char b[200];
      snprintf(b, sizeof b, "row %llu: token %d, gpurt.h's rule in float64 gives %d", (unsigned long long)r, got, want);
      err = b;
    }
  }
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  char info[96];
  snprintf(info, sizeof info, "digest %016llx%s", (unsigned long long)digest, nearmiss ? " (boundary)" : "");
  report(name, err, info, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void put32(std::vector<uint8_t> &b, size_t off, uint32_t v) { memcpy(&b[off], &v, 4); }
void put64(std::vector<uint8_t> &b, size_t off, uint64_t v) { memcpy(&b[off], &v, 8); }
void putf(std::vector<uint8_t> &b, size_t off, float v) { memcpy(&b[off], &v, 4); }

void run_sample_rows(int t, uint64_t cols, unsigned block, uint64_t seed) {
  const uint64_t rows = 8, hist = 6;
  char nm[128];
  snprintf(nm, sizeof nm, "sample_rows_%s rows=%llu cols=%llu block=%u", kname(t), (unsigned long long)rows,
           (unsigned long long)cols, block);
  const std::string name = nm;
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  const size_t n = (size_t)(rows * cols);
  std::vector<float> x0(n);
  for (size_t i = 0; i < n; i++) {
    x0[i] = (float)rng.uni(-5, 5);
    if (i % 97 == 3) x0[i] = 3.0f; // ties
    if (i % 89 == 5) x0[i] = NAN;
  }
  // Per-row parameters, gpurt.h's layout; row r: topk 0 or 5 or 40, topp
  // 1 or 0.9, min-p 0 or 0.05, penalties on the odd rows, temperature 0 on
  // row 7 (greedy).
  std::vector<uint8_t> P(40 * rows + 4 * rows * hist);
  std::vector<int> topk(rows);
  for (uint64_t r = 0; r < rows; r++) {
    topk[r] = r % 3 == 0 ? 0 : r % 3 == 1 ? 5 : 40;
    put64(P, 8 * r, 77 + r), put64(P, 8 * rows + 8 * r, 1000 + 3 * r);
    putf(P, 16 * rows + 4 * r, r == 7 ? 0.0f : 0.6f + 0.2f * (float)(r % 4));
    put32(P, 20 * rows + 4 * r, (uint32_t)topk[r]);
    putf(P, 24 * rows + 4 * r, r % 2 ? 0.9f : 1.0f);
    putf(P, 28 * rows + 4 * r, r % 4 == 2 ? 0.05f : 0.0f);
    putf(P, 32 * rows + 4 * r, r % 2 ? 1.3f : 1.0f);
    putf(P, 36 * rows + 4 * r, r % 2 ? 0.5f : 0.0f);
    for (uint64_t h = 0; h < hist; h++)
      put32(P, 40 * rows + 4 * r * hist + 4 * h, h == 5 ? 0xffffffffu : (uint32_t)rng.below((int)cols));
  }
  Dev<uint8_t> Pd(P.size()), Out(8 * rows), X(n * (t == K_F32 ? 4 : 2));
  memcpy(Pd.p(), P.data(), P.size());
  std::vector<uint16_t> out;
  std::string sched = run_orders(
      kRuns,
      [&] {
        for (size_t i = 0; i < n; i++) {
          if (t == K_F32)
            memcpy(X.p() + 4 * i, &x0[i], 4);
          else {
            const uint16_t h = to16(x0[i], t);
            memcpy(X.p() + 2 * i, &h, 2);
          }
        }
        memset(Out.p(), 0xee, Out.n);
      },
      [&] {
        const dim3 grid((unsigned)rows), blk(block);
        if (t == K_F32)
          emu_launch(grid, blk, [&] { sample_rows_f32(Out.p(), (float *)X.p(), Pd.p(), rows, cols, hist); });
        else
          emu_launch(grid, blk, [&] { sample_rows_bf16(Out.p(), (__nv_bfloat16 *)X.p(), Pd.p(), rows, cols, hist); });
      },
      [&] {
        std::vector<uint16_t> v(4 * rows);
        memcpy(v.data(), Out.p(), 8 * rows);
        return v;
      },
      out);
  std::string err;
  uint64_t digest = 0;
  const uint8_t *o = (const uint8_t *)out.data();
  for (uint64_t r = 0; r < rows && err.empty(); r++) {
    int32_t tok;
    float lp;
    memcpy(&tok, o + 4 * r, 4);
    memcpy(&lp, o + 4 * rows + 4 * r, 4);
    uint32_t lpb;
    memcpy(&lpb, &lp, 4);
    digest = splitmix64(digest ^ ((uint64_t)(uint32_t)tok << 32 | lpb));
    char b[200];
    if (tok < 0 || (uint64_t)tok >= cols) {
      snprintf(b, sizeof b, "row %llu: token %d out of the row", (unsigned long long)r, tok);
      err = b;
      break;
    }
    // the row as the kernel saw it after its penalties: X holds it now
    std::vector<float> v(cols);
    for (uint64_t j = 0; j < cols; j++)
      v[j] = t == K_F32 ? [&] { float f; memcpy(&f, X.p() + 4 * (r * cols + j), 4); return f; }()
                        : from16([&] { uint16_t h; memcpy(&h, X.p() + 2 * (r * cols + j), 2); return h; }(), t);
    size_t above = 0;
    for (uint64_t j = 0; j < cols; j++)
      if (before(v[j], j, v[tok], (size_t)tok)) above++;
    if (v[tok] != v[tok] || (topk[r] > 0 && above >= (size_t)topk[r]) || !(lp <= 0.0f)) {
      snprintf(b, sizeof b, "row %llu: token %d (logit %g, %zu above it, top-k %d), logprob %g", (unsigned long long)r,
               tok, v[tok], above, topk[r], lp);
      err = b;
    }
  }
  if (!sched.empty()) err = sched + (err.empty() ? "" : "; and " + err);
  char info[64];
  snprintf(info, sizeof info, "digest %016llx", (unsigned long long)digest);
  report(name, err, info, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

int main(int argc, char **argv) {
  if (!parse_args(argc, argv)) return 2;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t seed = 1;
  for (int t : {K_F32, K_BF16, K_F16})
    for (uint64_t cols : {1ull, 31ull, 1000ull, 32000ull, 40001ull})
      for (unsigned block : {1024u, 256u, 100u, 33u, 32u, 1u}) {
        if (block == 1 && cols > 1000) continue; // slow here, nothing new
        if (t != K_F32 && cols == 40001) continue;
        ArgCase c;
        c.t = t, c.cols = cols, c.block = block, c.rows = cols == 1 ? 3 : 8;
        run_argmax(c, seed++);
      }
  int idx = 0;
  for (int t : {K_F32, K_BF16, K_F16})
    for (bool add : {false, true})
      for (uint64_t cols : {4096ull, 2048ull, 1000ull, 7ull})
        for (unsigned block : {1024u, 256u, 100u, 32u}) {
          NormCase c;
          c.t = t, c.add = add, c.cols = cols, c.block = block;
          c.misalign = idx % 3 == 1;
          c.inplace = !add && idx % 4 == 2;
          idx++;
          run_norm(c, seed++);
        }
  // (each pass over the row visits every column: the emulation of a
  // 1024-thread block over 32,000 logits takes seconds, so most rows here
  // are short and the blocks small, and one case has a decoder's shape)
  struct S {
    uint64_t cols, topk;
    float topp, temp;
    unsigned block;
  };
  const S ss[] = {{16, 0, 1.0f, 0.7f, 32},    {1000, 0, 1.0f, 0.7f, 128},   {1000, 20, 1.0f, 1.3f, 100},
                  {1000, 0, 0.9f, 0.7f, 64}, {1000, 20, 0.9f, 1.3f, 128},  {3000, 20, 0.9f, 0.7f, 128},
                  {3000, 0, 0.5f, 1.0f, 96},  {1000, 1, 0.9f, 0.7f, 128},   {1000, 20, 0.0f, 0.7f, 128},
                  {1000, 20, 0.9f, 0.0f, 128}, {2500, 2000, 0.95f, 2.0f, 64}, {40, 50, 0.9f, 0.7f, 33},
                  // the 250th greatest among 200 ties at 4.0 (rows 1, 4): the search past the value's bits
                  {1000, 250, 1.0f, 0.7f, 128}, {1000, 250, 0.9f, 1.3f, 96},
                  // a decoder's: 32 warps' histograms, the searches over 1024 threads' candidates
                  {32000, 20, 0.9f, 0.8f, 1024}};
  for (int t : {K_F32, K_BF16})
    for (const S &x : ss) {
      SampleCase c;
      c.t = t, c.cols = x.cols, c.topk = x.topk, c.topp = x.topp, c.temp = x.temp, c.block = x.block;
      run_sample(c, seed++);
    }
  for (int t : {K_F32, K_BF16})
    for (uint64_t cols : {300ull, 2000ull})
      run_sample_rows(t, cols, cols == 300 ? 100 : 128, seed++);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%d passed, %d failed (%.1f s%s)\n", g_pass, g_fail, secs,
         g_one_order ? ", quick: one run a case" : ", three runs a case");
  return g_fail ? 1 : 0;
}
