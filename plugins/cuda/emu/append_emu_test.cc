// SPDX-License-Identifier: Apache-2.0
//
// append_emu_test: the paged KV append with ABI 1.10's rotary embedding,
// gpurt_kv_append_kernel<half> and <nv_bfloat16> (cuda_append.cuh, which
// cu_fi_kv_append in cuda_attention.cu launches), run unmodified on the CPU
// (cuda_emu.h, GPURT_CUDA_EMU) over page tables built here, against the
// mock's append_run (plugins/mock/src/mock_attention.c; its rules written
// out again here) (scripts/cuda_emu.sh builds and runs it):
//
//  - both layouts (NHD, HND), head_dim 64, 128, 256, page sizes 1, 4, 16,
//    1 to 4 KV heads, six requests, 30 to 50 rows in a shuffled order
//    (108 cases); then prefills, a request of about 300 tokens each
//    appended, 2 or 8 KV heads, 8 query heads (12 cases);
//  - rows the kernel must skip, as the mock does: a batch index of -1, of
//    batch or far beyond; a negative position; a position at or past the
//    request's length (into the last page's unused slots too); a row into
//    a page whose index is past the cache or negative; a malformed request
//    (no pages, last_page_len 0 or past page_size, a negative indptr); a
//    request whose pages end past n_indices (the indices buffer ends at a
//    guard page there: a read of it faults);
//  - without the rotary embedding, with it on K alone (q NULL), and on K
//    and q (num_qo_heads 1 to 8), inv_freq of theta 10^4 and 10^6.
//
// Checked, bit for bit, over the whole of each buffer: every K and V slot a
// row goes to holds the row (V copied; K copied, or rotated when inv_freq
// is set), every other element of K and V keeps its fill (NaN); q, when
// given, rotated in place at its row's position for every row, the
// skipped ones too; the inputs (rows, positions, page table, inv_freq)
// unchanged; nothing written in front of any buffer (each ends at a guard
// page: nothing past it either). The rotated values are those of a host
// evaluation of cuda_rope.cuh's gpurt_rope_pair (the same arithmetic),
// and also those of csrc's gp_rope_freqs_pair (the mock's: cos and sin
// apart instead of sincos; same libm here), and within a float64 bound of
// the exact rotation at the angle pos * inv_freq[j]: per element
// (|x| + |y|) (da + 2^-23 + 2 eps) + eps (|ref| + |x| + |y|) + 3 * 2^-25 (f16 subnormals),
// eps = 2^-11 (f16) or 2^-8 (bf16), da the f32 rounding of the angle:
// the rounding of cos and sin to T, of both products and of the sum.
// (The emulation runs glibc's sincos where the GPU runs CUDA's; that the
// two agree to the bit is for the GPU's own check, conform
// attention/append/rope, to say.)
//
// Every case runs three times, the scheduler favouring the block's first
// threads, its last ones, then a shuffle (GPURT_TEST_EMU_ORDER fwd, rev,
// rand:SEED): the kernel has no barrier, so each thread runs to its end in
// that order; distinct slots mean the outputs must have the same bits.
//
// The grid is cu_fi_kv_append's: append_blocks(a, chunks) blocks (its
// arithmetic, written out: append_blocks lives with the adapters'
// exceptions in cuda_attention_fi.cuh) plus ceil(nnz * num_qo_heads *
// chunks / 2 / 256) for q with the rotary embedding, of 256 threads.
//
// Usage: append_emu_test [-quick] [FILTER...]: only the cases whose name
// contains one of the FILTERs; -quick runs each case once (the order the
// environment says, fwd by default). Prints one line per case, then
// "N passed, M failed"; exit status 1 on a failure.
#ifndef GPURT_CUDA_EMU
#define GPURT_CUDA_EMU 1
#endif
#include "cuda_emu.h"


#include "../src/cuda_append.cuh"
#include "emu_test.h"

#include <chrono>
#include <functional>
#include <memory>
#include <numeric>

namespace {

// The emulator's orders each case runs under (one run with -quick); the
// append has no cp.async, so each lands at once.
const EmuRun kRuns[] = {{"fwd", "now"}, {"rev", "now"}, {"rand:20261205", "now"}};

// ---- 16-bit values -------------------------------------------------------------------------------

template <class T> uint16_t bits(T v) {
  uint16_t b;
  memcpy(&b, &v, 2);
  return b;
}
template <class T> T of_bits(uint16_t b) {
  T v;
  memcpy(static_cast<void *>(&v), &b, 2);
  return v;
}
template <class T> float f_of(uint16_t b) { return static_cast<float>(of_bits<T>(b)); }
template <class T> uint16_t b_of(float f) { return bits(static_cast<T>(f)); }
template <class T> float rt(float f) { return static_cast<float>(static_cast<T>(f)); }
template <class T> constexpr bool is_f16() { return std::is_same<T, half>::value; }

// One head rotated at pos, cuda_rope.cuh's arithmetic on the host: pairs
// (j, j + hd / 2), as rope8 and the mock's rope_head pair them.
template <class T> void rope_head(const uint16_t *src, uint16_t *dst, int32_t pos, const float *inv, uint32_t hd) {
  for (uint32_t j = 0; j < hd / 2; j++) {
    float u = f_of<T>(src[j]), v = f_of<T>(src[j + hd / 2]);
    gpurt_rope_pair(u, v, pos, inv[j], [](float f) { return rt<T>(f); });
    dst[j] = b_of<T>(u);
    dst[j + hd / 2] = b_of<T>(v);
  }
}

// csrc's gp_rope_freqs_pair (the mock's), over T.
template <class T> void mock_pair(float *u, float *v, int32_t pos, float f) {
  double a = (double)((float)pos * f);
  float cs = rt<T>((float)cos(a)), sn = rt<T>((float)sin(a));
  float x = *u, y = *v;
  *u = rt<T>(rt<T>(x * cs) - rt<T>(y * sn));
  *v = rt<T>(rt<T>(y * cs) + rt<T>(x * sn));
}

// Compares one rotated head (got, bits) with the mock's arithmetic (to the
// bit) and the exact rotation (within the bound at the top). Returns "" or
// the first disagreement; worst: the largest error / bound seen.
template <class T>
std::string check_rotation(const uint16_t *src, const uint16_t *got, int32_t pos, const float *inv, uint32_t hd,
                           double &worst, const char *what) {
  const double eps = is_f16<T>() ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  const double sub = is_f16<T>() ? 3 * std::ldexp(1.0, -25) : 0.0;
  char buf[400];
  for (uint32_t j = 0; j < hd / 2; j++) {
    const float x = f_of<T>(src[j]), y = f_of<T>(src[j + hd / 2]);
    float mu = x, mv = y;
    mock_pair<T>(&mu, &mv, pos, inv[j]);
    if (b_of<T>(mu) != got[j] || b_of<T>(mv) != got[j + hd / 2]) {
      snprintf(buf, sizeof buf,
               "%s: pair %u at position %d: the kernel's (%#06x, %#06x), csrc's gp_rope_freqs_pair's (%#06x, %#06x)",
               what, j, pos, got[j], got[j + hd / 2], b_of<T>(mu), b_of<T>(mv));
      return buf;
    }
    const double A = (double)pos * (double)inv[j]; // exact for the positions here (|pos| < 2^29)
    const double da = std::fabs((double)(float)((float)pos * inv[j]) - A);
    const double c = std::cos(A), s = std::sin(A);
    const double ru = (double)x * c - (double)y * s, rv = (double)y * c + (double)x * s;
    const double m = std::fabs((double)x) + std::fabs((double)y);
    const double gu = f_of<T>(got[j]), gv = f_of<T>(got[j + hd / 2]);
    const double tu = m * (da + std::ldexp(1.0, -23) + 2 * eps) + eps * (std::fabs(ru) + m) + sub + 1e-300;
    const double tv = m * (da + std::ldexp(1.0, -23) + 2 * eps) + eps * (std::fabs(rv) + m) + sub + 1e-300;
    const double eu = std::fabs(gu - ru) / tu, ev = std::fabs(gv - rv) / tv;
    worst = std::max(worst, std::max(std::isnan(eu) ? 1e30 : eu, std::isnan(ev) ? 1e30 : ev));
    if (!(eu <= 1) || !(ev <= 1)) {
      snprintf(buf, sizeof buf,
               "%s: pair %u at position %d: (%.8g, %.8g) from (%.8g, %.8g); the exact rotation (%.8g, %.8g), bound "
               "(%.3g, %.3g)",
               what, j, pos, gu, gv, (double)x, (double)y, ru, rv, tu, tv);
      return buf;
    }
  }
  return "";
}

// ---- a case --------------------------------------------------------------------------------------

struct Case {
  bool bf16 = false;
  int32_t layout = 0; // 0 NHD, 1 HND (gpurt.h's GPURT_KV_LAYOUT_*)
  uint32_t hd = 128, ps = 4, kvh = 2;
  bool rope = false;
  uint32_t hq = 0;     // num_qo_heads with q; 0: q NULL
  double theta = 1e4;
  int bad = 0;         // which malformed request (see build)
  bool cut = false;    // n_indices one short of indptr[batch]: the last request is skipped
  bool lng = false;    // request 0 about 300 tokens long, every position appended (a prefill)
};

std::string case_name(const Case &c) {
  static const char *const bads[] = {"empty-request", "last=0", "last>page", "indptr<0"};
  char buf[200];
  snprintf(buf, sizeof buf, "append_%s_%s d=%u ps=%u kvh=%u%s%s %s%s%s", c.bf16 ? "bf16" : "f16",
           c.layout == FI_LAYOUT_HND ? "hnd" : "nhd", c.hd, c.ps, c.kvh, c.rope ? " rope" : "",
           c.rope ? (c.hq ? (" q=" + std::to_string(c.hq)).c_str() : " q=NULL") : "", bads[c.bad],
           c.cut ? " cut" : "", c.lng ? " prefill" : "");
  return buf;
}

// The page table, the rows and what the mock makes of them.
struct Table {
  uint32_t batch = 6;
  std::vector<int32_t> indptr, indices, last;
  uint64_t num_pages = 0, n_indices = 0;
  std::vector<int32_t> bi, pos; // per row
  std::vector<std::string> why; // per row: "" appended, else why skipped (the generator's intent)
};

// The mock's append_run decision for row i: the page, or -1 when skipped.
int64_t mock_page(const Table &tb, uint32_t ps, size_t i, uint64_t *slot) {
  const int32_t b = tb.bi[i], pos = tb.pos[i];
  if (b < 0 || (uint32_t)b >= tb.batch || pos < 0) return -1;
  const int32_t p0 = tb.indptr[b], p1 = tb.indptr[b + 1], last = tb.last[b];
  if (p0 < 0 || p1 <= p0 || (uint64_t)p1 > tb.n_indices || last < 1 || (uint32_t)last > ps) return -1;
  const uint64_t len = (uint64_t)(p1 - p0 - 1) * ps + (uint64_t)last;
  if ((uint64_t)pos >= len) return -1;
  const int32_t page = tb.indices[(uint64_t)p0 + (uint64_t)pos / ps];
  if (page < 0 || (uint64_t)page >= tb.num_pages) return -1;
  *slot = (uint64_t)pos % ps;
  return page;
}

// Six requests: 0 normal (or indptr[0] < 0: bad 3), 1 one page, 2 with its
// second page's index past the cache (or -1), 3 malformed by bad (no pages,
// last 0, last page_size + 1; normal for bad 3), 4 its last page full, 5
// normal, its pages past n_indices when cut. Rows: distinct positions of
// each request (distinct slots), then rows that must be skipped.
Table build(const Case &c, Rng &rng) {
  Table tb;
  const uint32_t B = tb.batch, ps = c.ps;
  const int maxp = ps == 1 ? 12 : ps == 4 ? 5 : 3; // pages a request
  std::vector<int> np(B);
  for (uint32_t b = 0; b < B; b++) np[b] = 1 + rng.below(maxp);
  if (c.lng) np[0] = (int)((300 + ps - 1) / ps);
  np[1] = 1;
  np[2] = std::max(np[2], 2);
  if (c.bad == 0) np[3] = 0;
  tb.last.resize(B);
  for (uint32_t b = 0; b < B; b++) tb.last[b] = 1 + rng.below((int)ps);
  tb.last[4] = (int32_t)ps;
  if (c.bad == 1) tb.last[3] = 0;
  if (c.bad == 2) tb.last[3] = (int32_t)ps + 1;
  tb.indptr.assign(B + 1, 0);
  for (uint32_t b = 0; b < B; b++) tb.indptr[b + 1] = tb.indptr[b] + np[b];
  const uint32_t total = (uint32_t)tb.indptr[B];
  tb.num_pages = total + 3; // spare pages: untouched
  std::vector<int32_t> perm(tb.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = perm.size() - 1; i > 0; i--) std::swap(perm[i], perm[rng.next() % (i + 1)]);
  tb.indices.assign(perm.begin(), perm.begin() + total);
  tb.indices[tb.indptr[2] + 1] = rng.below(2) ? (int32_t)tb.num_pages : -1; // request 2's second page
  if (c.bad == 3) tb.indptr[0] = -2;                                          // request 0: p0 < 0
  tb.n_indices = c.cut ? total - 1 : total;

  // Why a request's rows are all skipped ("" when they are not).
  auto req_skip = [&](uint32_t b) -> const char * {
    if (b == 0 && c.bad == 3) return "indptr[b] < 0";
    if (b == 3 && c.bad == 0) return "a request without pages";
    if (b == 3 && c.bad == 1) return "last_page_len 0";
    if (b == 3 && c.bad == 2) return "last_page_len past page_size";
    if (b == B - 1 && c.cut) return "the request's pages end past n_indices";
    return "";
  };
  auto add = [&](int32_t b, int32_t p, const char *why) {
    tb.bi.push_back(b);
    tb.pos.push_back(p);
    tb.why.push_back(why);
  };
  for (uint32_t b = 0; b < B; b++) {
    // The length the table gives (its pages' count, the last one's fill).
    const int64_t len = np[b] == 0 ? 0 : (int64_t)(np[b] - 1) * ps + std::min<int64_t>(std::max(tb.last[b], 1), ps);
    // Up to 5 distinct positions in [0, len).
    std::vector<int32_t> all((size_t)len);
    std::iota(all.begin(), all.end(), 0);
    for (size_t i = all.size(); i > 1; i--) std::swap(all[i - 1], all[rng.next() % i]);
    const size_t k = c.lng && b == 0 ? all.size() : std::min<size_t>(all.size(), 3 + (size_t)rng.below(3));
    for (size_t i = 0; i < k; i++) {
      const char *why = req_skip(b);
      if (!*why && b == 2 && (uint32_t)all[i] / ps == 1) why = "its page's index out of range";
      add((int32_t)b, all[i], why);
    }
    if (len > 0) add((int32_t)b, (int32_t)len, "position == length"); // the last page's next slot, or the next page
    add((int32_t)b, (int32_t)(len + ps + rng.below(40)), "position past the length");
  }
  // Request 2's second page (index past the cache or -1): a row into it.
  add(2, (int32_t)ps, "its page's index out of range"); // in request 2's length: np >= 2
  add(-1, rng.below(8), "batch index -1");
  add((int32_t)B, rng.below(8), "batch index == batch");
  add(1 << 30, 0, "batch index far past batch");
  add(0, -1, "position -1");
  add(4, -(1 + rng.below(1000)), "negative position");
  add(-7, 100000 + rng.below(100000), "batch index -7, a large position (q's rotation)");
  add(5, 70000 + rng.below(1000), "position far past the length (q's rotation)");
  // Shuffle the rows.
  const size_t n = tb.bi.size();
  for (size_t i = n - 1; i > 0; i--) {
    const size_t j = rng.next() % (i + 1);
    std::swap(tb.bi[i], tb.bi[j]);
    std::swap(tb.pos[i], tb.pos[j]);
    std::swap(tb.why[i], tb.why[j]);
  }
  return tb;
}

// Element index of (page, slot, head, 0) in K or V (gp_kv_elem).
uint64_t kv_elem(const Case &c, uint64_t page, uint64_t slot, uint32_t h) {
  return c.layout == FI_LAYOUT_HND ? ((page * c.kvh + h) * c.ps + slot) * c.hd : ((page * c.ps + slot) * c.kvh + h) * c.hd;
}

template <class T> void run_case(const Case &c, uint64_t seed) {
  const std::string name = case_name(c);
  if (!selected(name)) return;
  const auto t0 = std::chrono::steady_clock::now();
  Rng rng(seed);
  Table tb = build(c, rng);
  const uint64_t nnz = tb.bi.size();
  const uint32_t hd = c.hd, kvh = c.kvh, hq = c.hq;
  const uint64_t row = (uint64_t)kvh * hd, qrow = (uint64_t)hq * hd;
  const uint64_t kv_n = tb.num_pages * c.ps * row;

  // The operands, each ending at a guard page.
  Dev<uint16_t> K(kv_n), V(kv_n), KR(nnz * row), VR(nnz * row), Q(c.rope && hq ? nnz * qrow : 0);
  Dev<int32_t> BI(nnz, 4), POS(nnz, 4), INDPTR(tb.batch + 1, 4), INDICES(tb.n_indices, 4), LAST(tb.batch, 4);
  Dev<float> INV(hd / 2, 4);
  for (uint64_t i = 0; i < nnz; i++) BI[i] = tb.bi[i], POS[i] = tb.pos[i];
  for (uint32_t b = 0; b <= tb.batch; b++) INDPTR[b] = tb.indptr[b];
  for (uint32_t b = 0; b < tb.batch; b++) LAST[b] = tb.last[b];
  for (uint64_t i = 0; i < tb.n_indices; i++) INDICES[i] = tb.indices[i];
  for (uint32_t j = 0; j < hd / 2; j++) INV[j] = (float)std::pow(c.theta, -2.0 * j / hd);
  // V (and K without the rotation) any bits, NaNs too: copied. Rotated K
  // and q: values in [-2, 2], a few tiny.
  auto val = [&]() -> uint16_t {
    const double r = rng.uni(-2, 2);
    return b_of<T>((float)(rng.below(16) == 0 ? r * 1e-4 : r));
  };
  for (uint64_t i = 0; i < VR.n; i++) VR[i] = (uint16_t)rng.next();
  for (uint64_t i = 0; i < KR.n; i++) KR[i] = c.rope ? val() : (uint16_t)rng.next();
  std::vector<uint16_t> q0(Q.n);
  for (auto &x : q0) x = val();
  const auto kr0 = KR.copy(), vr0 = VR.copy();
  const auto inv0 = INV.copy();

  // The kernel's arguments, as cuda_attention.c's cu_kv_append fills them.
  cu_kv_append_args a{};
  a.k = K.p(), a.v = V.p();
  a.k_rows = KR.p(), a.v_rows = VR.p();
  a.batch_indices = BI.p(), a.positions = POS.p();
  a.indptr = INDPTR.p(), a.indices = INDICES.p(), a.last = LAST.p();
  a.nnz = nnz, a.num_pages = tb.num_pages;
  a.batch = tb.batch, a.num_kv_heads = kvh, a.head_dim = hd, a.page_size = c.ps;
  a.layout = c.layout;
  a.n_indices = tb.n_indices;
  a.pdl = 1; // gpurt_pdl_enter: nothing on the host
  a.inv_freq = c.rope ? INV.p() : nullptr;
  a.q = c.rope && hq ? Q.p() : nullptr;
  a.num_qo_heads = c.rope ? hq : 0;
  a.bf16 = c.bf16;
  // cu_fi_kv_append's launch.
  const uint32_t chunks = a.head_dim * 2 / 16;
  const uint64_t extra = a.inv_freq != nullptr && a.q != nullptr ? a.nnz * a.num_qo_heads * (chunks / 2) : 0;
  const uint64_t kv_blocks = (a.nnz * a.num_kv_heads * chunks + 255) / 256; // append_blocks(a, chunks)
  const uint64_t blocks = kv_blocks + (extra + 255) / 256;
  const std::string kname = c.bf16 ? "gpurt_kv_append_kernel<nv_bfloat16>" : "gpurt_kv_append_kernel<half>";

  const uint16_t nan16 = 0xffff;
  auto reset = [&] {
    for (uint64_t i = 0; i < kv_n; i++) K[i] = nan16, V[i] = nan16;
    for (uint64_t i = 0; i < Q.n; i++) Q[i] = q0[i];
  };
  auto snap = [&] {
    std::vector<uint16_t> s(K.p(), K.p() + kv_n);
    s.insert(s.end(), V.p(), V.p() + kv_n);
    s.insert(s.end(), Q.p(), Q.p() + Q.n);
    return s;
  };

  std::vector<uint16_t> out;
  std::string err = run_orders(
      kRuns, reset,
      [&] {
        emu_launch(dim3((unsigned)blocks), dim3(256), [&] { gpurt_fi::gpurt_kv_append_kernel<T>(a, chunks); },
                   kname.c_str());
      },
      snap, out);

  // The mock's result: K and V from the fill, the rows where they go.
  std::vector<uint16_t> wk(kv_n, nan16), wv(kv_n, nan16), wq(q0);
  std::vector<int64_t> owner(tb.num_pages * c.ps, -1); // row in each (page, slot)
  int appended = 0, skipped = 0;
  std::vector<uint16_t> tmp(hd);
  for (uint64_t i = 0; i < nnz && err.empty(); i++) {
    uint64_t slot = 0;
    const int64_t page = mock_page(tb, c.ps, i, &slot);
    if ((page >= 0) != tb.why[i].empty()) {
      err = "test generator: row " + std::to_string(i) + " meant " +
            (tb.why[i].empty() ? std::string("appended") : "skipped (" + tb.why[i] + ")") + ", the mock's rule says otherwise";
      break;
    }
    if (page < 0) {
      skipped++;
      continue;
    }
    appended++;
    int64_t &o = owner[(uint64_t)page * c.ps + slot];
    if (o >= 0) {
      err = "test generator: rows " + std::to_string(o) + " and " + std::to_string(i) + " go to one slot";
      break;
    }
    o = (int64_t)i;
    for (uint32_t h = 0; h < kvh; h++) {
      const uint64_t dst = kv_elem(c, (uint64_t)page, slot, h), src = (i * kvh + h) * hd;
      memcpy(&wv[dst], &vr0[src], 2 * hd);
      if (c.rope)
        rope_head<T>(&kr0[src], &wk[dst], tb.pos[i], inv0.data(), hd);
      else
        memcpy(&wk[dst], &kr0[src], 2 * hd);
    }
  }
  if (Q.n != 0)
    for (uint64_t i = 0; i < nnz; i++)
      for (uint32_t h = 0; h < hq; h++) rope_head<T>(&q0[(i * hq + h) * hd], &wq[(i * hq + h) * hd], tb.pos[i], inv0.data(), hd);

  // Bit for bit, every element.
  auto where_kv = [&](uint64_t e) {
    const uint64_t d = e % hd, x = e / hd;
    uint64_t page, slot, h;
    if (c.layout == FI_LAYOUT_HND)
      slot = x % c.ps, h = (x / c.ps) % kvh, page = x / ((uint64_t)c.ps * kvh);
    else
      h = x % kvh, slot = (x / kvh) % c.ps, page = x / ((uint64_t)kvh * c.ps);
    const int64_t o = owner[page * c.ps + slot];
    char buf[200];
    if (o >= 0)
      snprintf(buf, sizeof buf, "page %llu slot %llu head %llu element %llu (row %lld: batch %d position %d)",
               (unsigned long long)page, (unsigned long long)slot, (unsigned long long)h, (unsigned long long)d,
               (long long)o, tb.bi[o], tb.pos[o]);
    else
      snprintf(buf, sizeof buf, "page %llu slot %llu head %llu element %llu (no row goes there: untouched)",
               (unsigned long long)page, (unsigned long long)slot, (unsigned long long)h, (unsigned long long)d);
    return std::string(buf);
  };
  int bad_k = 0, bad_v = 0, bad_q = 0;
  std::string first;
  for (uint64_t e = 0; e < kv_n && err.empty(); e++) {
    if (out[e] != wk[e] && bad_k++ == 0 && first.empty()) {
      char buf[120];
      snprintf(buf, sizeof buf, "K is %#06x, want %#06x, at ", out[e], wk[e]);
      first = buf + where_kv(e);
    }
    if (out[kv_n + e] != wv[e] && bad_v++ == 0 && first.empty()) {
      char buf[120];
      snprintf(buf, sizeof buf, "V is %#06x, want %#06x, at ", out[kv_n + e], wv[e]);
      first = buf + where_kv(e);
    }
  }
  for (uint64_t e = 0; e < Q.n && err.empty(); e++)
    if (out[2 * kv_n + e] != wq[e] && bad_q++ == 0 && first.empty()) {
      const uint64_t i = e / qrow, h = (e / hd) % hq, d = e % hd;
      char buf[240];
      snprintf(buf, sizeof buf, "q is %#06x, want %#06x, at row %llu head %llu element %llu (position %d, %s)",
               out[2 * kv_n + e], wq[e], (unsigned long long)i, (unsigned long long)h, (unsigned long long)d,
               tb.pos[i], tb.why[i].empty() ? "appended" : tb.why[i].c_str());
      first = buf;
    }
  if (err.empty() && (bad_k || bad_v || bad_q))
    err = std::to_string(bad_k) + " elements of K, " + std::to_string(bad_v) + " of V, " + std::to_string(bad_q) +
          " of q differ; the first: " + first;

  // The rotations against csrc's arithmetic and the exact one (the
  // expected bits are the kernel's now).
  double worst = 0;
  int rotated = 0;
  if (err.empty() && c.rope) {
    for (uint64_t i = 0; i < nnz && err.empty(); i++) {
      uint64_t slot = 0;
      const int64_t page = mock_page(tb, c.ps, i, &slot);
      if (page < 0) continue;
      for (uint32_t h = 0; h < kvh && err.empty(); h++) {
        err = check_rotation<T>(&kr0[(i * kvh + h) * hd], &out[kv_elem(c, (uint64_t)page, slot, h)], tb.pos[i],
                                inv0.data(), hd, worst, "K");
        rotated++;
      }
    }
    for (uint64_t i = 0; i < nnz && Q.n && err.empty(); i++)
      for (uint32_t h = 0; h < hq && err.empty(); h++) {
        err = check_rotation<T>(&q0[(i * hq + h) * hd], &out[2 * kv_n + (i * hq + h) * hd], tb.pos[i], inv0.data(),
                                hd, worst, "q");
        rotated++;
      }
  }

  // Inputs unchanged, nothing written around any buffer.
  if (err.empty()) {
    if (!KR.holds(kr0)) err = "k_rows written";
    else if (!VR.holds(vr0)) err = "v_rows written";
    else if (!INV.holds(inv0)) err = "inv_freq written";
    else if (!BI.holds(tb.bi) || !POS.holds(tb.pos)) err = "batch_indices or positions written";
    else if (!INDPTR.holds(tb.indptr) || !LAST.holds(tb.last) || !INDICES.holds(tb.indices, tb.n_indices))
      err = "the page table written";
    const GuardedBuf *gs[] = {K.g.get(), V.g.get(), Q.g.get(), KR.g.get(), VR.g.get()};
    const char *gn[] = {"K", "V", "q", "k_rows", "v_rows"};
    for (int i = 0; i < 5 && err.empty(); i++)
      if (!gs[i]->margins_intact()) err = std::string("bytes written in front of ") + gn[i];
  }

  char info[160];
  if (c.rope)
    snprintf(info, sizeof info, "%llu rows (%d appended, %d skipped), %llu blocks; %d heads rotated, worst %.3f of bound",
             (unsigned long long)nnz, appended, skipped, (unsigned long long)blocks, rotated, worst);
  else
    snprintf(info, sizeof info, "%llu rows (%d appended, %d skipped), %llu blocks", (unsigned long long)nnz, appended,
             skipped, (unsigned long long)blocks);
  report(name, err, info, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

} // namespace

int main(int argc, char **argv) {
  if (!parse_args(argc, argv)) return 2;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t seed = 1;
  int idx = 0;
  for (bool bf16 : {false, true})
    for (int32_t layout : {0, 1})
      for (uint32_t hd : {64u, 128u, 256u})
        for (uint32_t ps : {1u, 4u, 16u})
          for (int mode = 0; mode < 3; mode++) { // no rotation, K alone, K and q
            Case c;
            c.bf16 = bf16, c.layout = layout, c.hd = hd, c.ps = ps;
            c.kvh = 1 + (uint32_t)(idx % 4);
            c.rope = mode > 0;
            c.hq = mode == 2 ? 1 + (uint32_t)(idx % 8) : 0;
            c.theta = idx % 2 ? 1e6 : 1e4;
            c.bad = idx % 4;
            c.cut = (idx / 4) % 2 == 1;
            idx++;
            if (bf16)
              run_case<nv_bfloat16>(c, seed++);
            else
              run_case<half>(c, seed++);
          }
  // Prefills: request 0 about 300 tokens, every one appended (the K and
  // V threads and q's over many blocks), 8 KV heads and 8 query heads or
  // 2 and 8.
  for (bool bf16 : {false, true})
    for (int32_t layout : {0, 1})
      for (uint32_t hd : {64u, 128u, 256u}) {
        Case c;
        c.bf16 = bf16, c.layout = layout, c.hd = hd, c.ps = idx % 3 == 0 ? 1 : idx % 3 == 1 ? 4 : 16;
        c.kvh = idx % 2 ? 8 : 2;
        c.rope = idx % 4 != 3, c.hq = c.rope ? 8 : 0;
        c.theta = 5e5;
        c.bad = idx % 3, c.cut = idx % 2 == 0, c.lng = true;
        idx++;
        if (bf16)
          run_case<nv_bfloat16>(c, seed++);
        else
          run_case<half>(c, seed++);
      }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%d passed, %d failed (%.1f s%s)\n", g_pass, g_fail, secs,
         g_one_order ? ", quick: one run a case" : ", three runs a case");
  return g_fail ? 1 : 0;
}
