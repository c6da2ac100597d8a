// SPDX-License-Identifier: Apache-2.0
//
// cuda_emu.h: enough of CUDA's execution model, on the host, for a .cu file
// of ours to compile with g++ or clang++ (C++17) and run its kernels
// unmodified, so that kernels nobody could run on a GPU yet are checked on
// the CPU (scripts/cuda_emu.sh, plugins/cuda/emu/quant_emu_test.cc). A .cu
// file includes it instead of the CUDA headers when GPURT_CUDA_EMU is
// defined, and gives each of its inline-asm helpers an emulated branch
// (cuda_quant.cu: loads are plain loads, cp.async emu::cp_async, prefetches
// nothing, mma.sync emu::mma16816).
//
// The model:
//  - A launch (emu_launch) runs the grid's blocks one after another; a
//    block's threads are fibers (ucontext) run by one OS thread, each until
//    it waits (__syncthreads, a warp shuffle, mma.sync) or exits, the
//    scheduler always resuming the first runnable thread in an order
//    GPURT_TEST_EMU_ORDER picks: "fwd" (the default: thread 0 first),
//    "rev" (the last thread first, and the grid's blocks from the last:
//    see emu_launch) or "rand:SEED" (a fixed shuffle per
//    block). So a block runs deterministically, and the threads first in
//    the order run ahead as far as the barriers let them (a warp through
//    its shuffles and mma's up to the next __syncthreads) before the others
//    move: a kernel whose result depends on the order has a race (a stage
//    refilled while another warp still reads it, a missing barrier), which
//    running it both ways shows (emu::set_order). GPURT_TEST_EMU_THREADS=1
//    (or emu::set_threads(true)) runs each thread of a block as a
//    std::thread instead, with real concurrency: much slower (hundreds of
//    OS threads on a few cores), for once in a while.
//  - __shared__ is `static` (one instance a kernel instantiation, shared by
//    the block's threads and reused by the next block, as blocks never run
//    at once); marked `used` so that the compiler assumes any call (a
//    barrier) may change it and never keeps it in a register across one.
//    Every block starts with 0xff bytes (NaNs) in what earlier blocks'
//    cp.async copies wrote (any compiler), and in every __shared__
//    variable where they all lie in one section (ELF, clang; g++ ignores
//    the section of a template's local static), as a GPU's shared memory
//    holds no data of ours when a block starts: a read of what the block
//    has not written shows. Dynamic shared memory (extern __shared__) and
//    thread-block clusters are not emulated: no kernel run here uses them.
//  - threadIdx, blockIdx, blockDim, gridDim read the running emulated
//    thread's record (a thread_local pointer the scheduler sets).
//  - __syncthreads() waits for every thread of the block that has not
//    exited (Volta and later). A warp collective (__shfl_*_sync,
//    emu::mma16816) waits for the warp's lanes, which exchange their
//    values through the warp's array (double-buffered: a lane may run ahead
//    to the next collective before the slowest has read this one's). Every
//    collective must be met by all the warp's lanes with a full mask at the
//    same place (kind and source line): 32 lanes and 0xffffffff, or, in the
//    partial last warp of a block that is not a multiple of 32 threads, its
//    n lanes and a mask of those n (shuffles only; a value shuffled from a
//    lane past them is all ones); a lane that arrives alone, a lane that
//    exits while its warp waits, another mask or a deadlock aborts with a
//    report of where each thread waits.
//  - mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 with
//    the PTX ISA's fragment layout (g = lane >> 2, t = lane & 3; A 16 x 16
//    row-major: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] =
//    A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]; B 16 x 8 column-major:
//    b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]; C and D 16 x 8: c[0] =
//    D[g][2t], c[1] = D[g][2t+1], c[2] = D[g+8][2t], c[3] = D[g+8][2t+1];
//    the low half of a 32-bit register is the lower index). Each element of
//    D is the exact sum of its 16 products and C (in double) rounded once
//    to f32: at least as accurate as the tensor cores, which is what the
//    tests' tolerances assume of the hardware anyway.
//  - Float intrinsics with round-to-nearest-even f32 arithmetic (compile
//    with -ffp-contract=off so that nothing is fused that the kernel wrote
//    apart; fmaf is a real fused multiply-add); 16-bit conversions from the
//    CUDA headers' host versions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h);
//    rsqrtf is 1 / sqrtf (the GPU's is within 2 ulp).
//  - cp.async of 4, 8 or 16 bytes (emu::cp_async) checks both addresses'
//    alignment (the GPU faults on a misaligned one), as do the 16-byte
//    loads (emu::ld16), and copies at once (GPURT_TEST_EMU_CPASYNC=now,
//    the default: a stage refilled while another warp still reads it
//    shows) or only when a cp.async.wait_group must have it (=late: a read
//    of a stage before the wait that covers it shows); emu::set_cp_async.
//  - A SIGSEGV or SIGBUS (a guard page after a test's buffer) names the
//    kernel, block and thread.
// Compile with -fno-strict-aliasing (the kernels pun 16-bit pairs, words
// and vectors through pointers, as CUDA allows).
#pragma once

#ifndef GPURT_CUDA_EMU
#error "cuda_emu.h is for host builds with GPURT_CUDA_EMU defined"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <condition_variable>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

// ---- the CUDA qualifiers ------------------------------------------------------
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __align__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#if defined(__ELF__)
// All of them in one section, which each block starts by filling with 0xff
// bytes (NaN as f16, bf16 and f32): a read of shared memory the block has
// not written shows instead of seeing the previous block's data. (clang
// honours the section for a template's local static; g++ does not, and
// puts those in .bss: then only what cp.async has written is refilled,
// see g_cp_ranges.)
#define __shared__ static __attribute__((used, section("gpurt_emu_shared")))
extern "C" char __start_gpurt_emu_shared[] __attribute__((weak));
extern "C" char __stop_gpurt_emu_shared[] __attribute__((weak));
#else
#define __shared__ static __attribute__((used))
#endif
#define __constant__ static
// __restrict__ is a GNU C++ keyword already.

namespace emu {

[[noreturn]] inline void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
inline void mma_compute(struct Warp &w, int p, bool f16);

// ---- threads, warps, blocks -----------------------------------------------------

enum class TS : uint8_t { running, at_sync, at_warp, done };
enum Kind : int { K_SHFL_XOR = 1, K_SHFL_DOWN, K_SHFL_IDX, K_MMA_F16, K_MMA_BF16, K_SHFL_UP };

inline const char *kind_name(int k) {
  switch (k) {
    case K_SHFL_XOR: return "__shfl_xor_sync";
    case K_SHFL_DOWN: return "__shfl_down_sync";
    case K_SHFL_IDX: return "__shfl_sync";
    case K_SHFL_UP: return "__shfl_up_sync";
    case K_MMA_F16: return "mma.sync m16n8k16 f16";
    case K_MMA_BF16: return "mma.sync m16n8k16 bf16";
  }
  return "?";
}

struct Thread {
  dim3 tid, bid, bdim, gdim;
  int linear = 0; // x + y bdim.x + z bdim.x bdim.y
  TS st = TS::running;
  int line = 0;   // where it waits
  int kind = 0;   // the collective it waits at
  unsigned wseq = 0; // collectives this thread has met (its warp buffers' parity)
  // cp.async in the late mode: the open group, then the committed ones.
  struct Copy {
    void *dst;
    const void *src;
    size_t n;
  };
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> groups;
  ucontext_t uc;
  char *stack = nullptr;
};

struct Warp {
  int nlanes = 32;
  int arrived = 0;
  int kind = 0, line = 0;
  unsigned gen = 0;
  // Double-buffered exchange (parity = the collective's sequence number & 1).
  uint64_t val[2][32];
  uint32_t ma[2][32][4], mb[2][32][2];
  float mc[2][32][4], md[2][32][4];
};

struct Block {
  int n = 0, live = 0, running = 0;
  int sync_arrived = 0;
  unsigned sync_gen = 0;
  std::vector<Thread> th;
  std::vector<Warp> w;
  bool threads_mode = false;
  std::mutex mu; // threads mode only
  std::condition_variable cv;
};

struct Launch {
  const char *name = "kernel";
  dim3 grid, block;
  dim3 cur_block;
};

inline thread_local Thread *t_cur = nullptr;
inline Block *g_blk = nullptr; // the running thread's
inline Launch g_launch;
inline ucontext_t g_sched_uc;
inline int g_order = 0; // 0 fwd, 1 rev, 2 rand
inline uint64_t g_order_seed = 1;
inline bool g_order_set = false;
inline int g_threads_mode = -1; // -1: from the environment
inline int g_cp_late = -1;       // cp.async lands at its wait_group (1) or at once (0); -1: from the environment
inline std::mutex g_diag_mu;
// The shared memory cp.async has written, as disjoint [lo, hi) ranges
// (merged when they touch): refilled with 0xff bytes as each block starts.
inline std::map<uintptr_t, uintptr_t> g_cp_ranges;
inline std::mutex g_cp_ranges_mu; // threads mode

inline void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda_emu: FATAL: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  abort();
}

// GPURT_TEST_EMU_ORDER: fwd, rev, rand:SEED.
inline void set_order(const char *s) {
  g_order_set = true;
  if (s == nullptr || strcmp(s, "fwd") == 0 || *s == 0) {
    g_order = 0;
  } else if (strcmp(s, "rev") == 0) {
    g_order = 1;
  } else if (strncmp(s, "rand", 4) == 0) {
    g_order = 2;
    g_order_seed = s[4] == ':' ? strtoull(s + 5, nullptr, 0) : 1;
  } else {
    die("GPURT_TEST_EMU_ORDER=%s: want fwd, rev or rand:SEED", s);
  }
}
inline const char *order_name() { return g_order == 0 ? "fwd" : g_order == 1 ? "rev" : "rand"; }
inline void set_threads(bool on) { g_threads_mode = on ? 1 : 0; }
// GPURT_TEST_EMU_CPASYNC: "now" (the default) or "late" (see cp_async).
inline void set_cp_async(const char *s) {
  if (s == nullptr || *s == 0 || strcmp(s, "now") == 0)
    g_cp_late = 0;
  else if (strcmp(s, "late") == 0)
    g_cp_late = 1;
  else
    die("GPURT_TEST_EMU_CPASYNC=%s: want now or late", s);
}

inline const char *ts_name(const Thread &t) {
  switch (t.st) {
    case TS::running: return "running";
    case TS::at_sync: return "__syncthreads";
    case TS::at_warp: return kind_name(t.kind);
    case TS::done: return "exited";
  }
  return "?";
}

// Where every thread of the block is, grouped by warp and place; then abort.
inline void print_warps(Block &b);
[[noreturn]] inline void report_and_die(Block &b, const char *why) {
  std::lock_guard<std::mutex> lk(g_diag_mu);
  fprintf(stderr, "cuda_emu: FATAL: %s\n  kernel %s, block (%u,%u,%u) of grid (%u,%u,%u), block of (%u,%u,%u)\n", why,
          g_launch.name, g_launch.cur_block.x, g_launch.cur_block.y, g_launch.cur_block.z, g_launch.grid.x,
          g_launch.grid.y, g_launch.grid.z, g_launch.block.x, g_launch.block.y, g_launch.block.z);
  print_warps(b);
  fflush(stderr);
  abort();
}
inline void print_warps(Block &b) {
  for (size_t wi = 0; wi < b.w.size(); wi++) {
    // Runs of lanes with the same state and line.
    int lo = (int)wi * 32, hi = lo + b.w[wi].nlanes;
    std::string line = "  warp " + std::to_string(wi) + ":";
    int i = lo;
    while (i < hi) {
      int j = i;
      while (j + 1 < hi && b.th[j + 1].st == b.th[i].st && b.th[j + 1].line == b.th[i].line &&
             b.th[j + 1].kind == b.th[i].kind)
        j++;
      char buf[160], lanes[32];
      if (i == j)
        snprintf(lanes, sizeof lanes, "lane %d", i - lo);
      else
        snprintf(lanes, sizeof lanes, "lanes %d-%d", i - lo, j - lo);
      if (b.th[i].st == TS::at_sync || b.th[i].st == TS::at_warp)
        snprintf(buf, sizeof buf, " %s at %s (line %d);", lanes, ts_name(b.th[i]), b.th[i].line);
      else
        snprintf(buf, sizeof buf, " %s %s;", lanes, ts_name(b.th[i]));
      line += buf;
      i = j + 1;
    }
    fprintf(stderr, "%s\n", line.c_str());
    if (b.w[wi].arrived > 0 && b.w[wi].arrived < b.w[wi].nlanes)
      fprintf(stderr, "    (%d of its %d lanes wait at %s, line %d, which the others never reach: every lane must take "
              "part)\n", b.w[wi].arrived, b.w[wi].nlanes, kind_name(b.w[wi].kind), b.w[wi].line);
  }
}

// ---- waiting ---------------------------------------------------------------------

// The calling thread waits until released (its state back to running).
// Fibers: back to the scheduler, which resumes only running fibers.
// Threads: the block's condition variable (lk holds b.mu).
inline void wait_released(Block &b, Thread &me, std::unique_lock<std::mutex> *lk) {
  if (!b.threads_mode) {
    while (me.st != TS::running) swapcontext(&me.uc, &g_sched_uc);
    t_cur = &me;
    return;
  }
  if (b.running == 0) report_and_die(b, "deadlock: every thread of the block waits and none can go on");
  b.cv.wait(*lk, [&] { return me.st == TS::running; });
}

// Fibers: after a release, the releasing thread yields too, so that the
// scheduler picks the first runnable thread in the order again.
inline void yield_after_release(Block &b, Thread &me) {
  if (!b.threads_mode) {
    swapcontext(&me.uc, &g_sched_uc);
    t_cur = &me;
  }
}

inline void release_sync(Block &b) {
  b.sync_arrived = 0;
  b.sync_gen++;
  for (auto &t : b.th)
    if (t.st == TS::at_sync) {
      t.st = TS::running;
      b.running++;
    }
  if (b.threads_mode) b.cv.notify_all();
}

inline void syncthreads(int line) {
  Block &b = *g_blk;
  Thread &me = *t_cur;
  asm volatile("" ::: "memory");
  std::unique_lock<std::mutex> lk(b.mu, std::defer_lock);
  if (b.threads_mode) lk.lock();
  me.st = TS::at_sync;
  me.line = line;
  me.kind = 0;
  b.running--;
  if (++b.sync_arrived == b.live) {
    release_sync(b);
    if (b.threads_mode) lk.unlock();
    yield_after_release(b, me);
  } else {
    wait_released(b, me, &lk);
  }
  asm volatile("" ::: "memory");
}

// A warp collective: the lane has put its operands into w's buffers of
// parity p (its sequence number); returns when all lanes have, with the
// results (mma: md) in place.
inline int warp_arrive(int kind, int line, unsigned mask) {
  Block &b = *g_blk;
  Thread &me = *t_cur;
  const int wi = me.linear / 32;
  Warp &w = b.w[wi];
  asm volatile("" ::: "memory");
  std::unique_lock<std::mutex> lk(b.mu, std::defer_lock);
  if (b.threads_mode) lk.lock();
  // Every lane of the warp takes part: all 32, or in a block's partial last
  // warp (a block not a multiple of 32 threads) all of its lanes, for
  // shuffles only (mma.sync needs 32).
  const bool is_mma = kind == K_MMA_F16 || kind == K_MMA_BF16;
  const unsigned full = w.nlanes == 32 ? 0xffffffffu : (1u << w.nlanes) - 1u;
  if (mask != full || (is_mma && w.nlanes != 32)) {
    char why[200];
    snprintf(why, sizeof why, "%s at line %d by lane %d with mask %#x in a warp of %d lanes: the kernels emulated "
             "here take part with all the warp's lanes", kind_name(kind), line, me.linear % 32, mask, w.nlanes);
    report_and_die(b, why);
  }
  for (int l = 0; l < w.nlanes; l++)
    if (b.th[wi * 32 + l].st == TS::done) {
      char why[200];
      snprintf(why, sizeof why, "lane %d of warp %d arrived at %s (line %d), but lane %d has exited", me.linear % 32,
               wi, kind_name(kind), line, l);
      report_and_die(b, why);
    }
  if (w.arrived == 0) {
    w.kind = kind;
    w.line = line;
  } else if (w.kind != kind || w.line != line) {
    char why[240];
    snprintf(why, sizeof why, "lane %d of warp %d arrived at %s (line %d) while its other lanes wait at %s (line %d): "
             "a collective every lane does not meet together", me.linear % 32, wi, kind_name(kind), line,
             kind_name(w.kind), w.line);
    report_and_die(b, why);
  }
  const int p = (int)(me.wseq & 1u);
  me.wseq++;
  me.st = TS::at_warp;
  me.kind = kind;
  me.line = line;
  b.running--;
  if (++w.arrived == w.nlanes) {
    if (is_mma) mma_compute(w, p, kind == K_MMA_F16);
    w.arrived = 0;
    w.gen++;
    for (int l = 0; l < w.nlanes; l++) {
      Thread &t = b.th[wi * 32 + l];
      t.st = TS::running;
      b.running++;
    }
    if (b.threads_mode) {
      b.cv.notify_all();
      lk.unlock();
    }
    yield_after_release(b, me);
  } else {
    wait_released(b, me, &lk);
  }
  asm volatile("" ::: "memory");
  return p;
}

template <class T> inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a shuffled value is a scalar");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  return u;
}
template <class T> inline T from_bits(uint64_t u) {
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}

// src(lane): the lane whose value lane receives.
template <class T, class Src> inline T shfl(int kind, int line, unsigned mask, T var, int width, Src src) {
  if (width != 32) die("%s at line %d with width %d: only 32 is emulated", kind_name(kind), line, width);
  Thread &me = *t_cur;
  Warp &w = g_blk->w[me.linear / 32];
  const int lane = me.linear % 32;
  const int p = (int)(me.wseq & 1u);
  w.val[p][lane] = to_bits(var);
  const int q = warp_arrive(kind, line, mask);
  // A source lane past a partial warp's lanes: no value (all ones: a NaN
  // for floats), as the GPU's is undefined.
  const int s = src(lane);
  return s < w.nlanes ? from_bits<T>(w.val[q][s]) : from_bits<T>(~0ull);
}

// ---- the fiber scheduler and the launch ----------------------------------------------

constexpr size_t kStack = 256 * 1024;

struct StackPool {
  std::vector<char *> stacks;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *get(size_t i) {
    while (stacks.size() <= i) {
      // A guard page below each stack: an overflow faults instead of writing
      // into the next one.
      char *m = (char *)mmap(nullptr, kStack + page, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) die("mmap of a fiber stack failed");
      mprotect(m, page, PROT_NONE);
      stacks.push_back(m + page);
    }
    return stacks[i];
  }
};
inline StackPool g_stacks;

// What each thread runs: the launch's kernel call (type-erased).
inline void (*g_entry_fn)(void *) = nullptr;
inline void *g_entry_arg = nullptr;

inline void thread_exit(Block &b, Thread &me) {
  std::unique_lock<std::mutex> lk(b.mu, std::defer_lock);
  if (b.threads_mode) lk.lock();
  const int wi = me.linear / 32;
  if (b.w[wi].arrived > 0) {
    char why[200];
    snprintf(why, sizeof why, "lane %d of warp %d exited while %d lanes of its warp wait at %s (line %d)",
             me.linear % 32, wi, b.w[wi].arrived, kind_name(b.w[wi].kind), b.w[wi].line);
    report_and_die(b, why);
  }
  me.st = TS::done;
  b.live--;
  b.running--;
  if (b.sync_arrived > 0 && b.sync_arrived == b.live) release_sync(b);
  if (b.threads_mode && b.running == 0 && b.live > 0)
    report_and_die(b, "deadlock: a thread exited and every other thread waits with none able to go on");
}

inline void cp_async_drain(Thread &me);

inline void fiber_main() {
  Thread &me = *t_cur;
  g_entry_fn(g_entry_arg);
  cp_async_drain(me);
  thread_exit(*g_blk, me);
  swapcontext(&me.uc, &g_sched_uc); // never resumed
  die("a finished fiber was resumed");
}

inline void on_fault(int sig, siginfo_t *si, void *) {
  const Thread *t = t_cur;
  char buf[400];
  int n = snprintf(buf, sizeof buf,
                   "cuda_emu: FATAL: %s at address %p in kernel %s, block (%u,%u,%u), thread (%u,%u,%u): an access "
                   "past a buffer (the tests put a guard page after each) or a bad pointer\n",
                   sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", si->si_addr, g_launch.name, g_launch.cur_block.x,
                   g_launch.cur_block.y, g_launch.cur_block.z, t ? t->tid.x : 0, t ? t->tid.y : 0, t ? t->tid.z : 0);
  if (n > 0) {
    ssize_t r = write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    (void)r;
  }
  signal(SIGABRT, SIG_DFL);
  abort();
}

inline void install_fault_handler() {
  static bool done = false;
  if (done) return;
  done = true;
  static char altstack[1 << 16];
  stack_t ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

inline uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Static shared memory (and what cp.async writes) as NaN, before a block
// starts.
inline void fill_shared_nan() {
#if defined(__ELF__)
  {
    char *lo = __start_gpurt_emu_shared, *hi = __stop_gpurt_emu_shared;
    if (lo != nullptr && hi > lo) memset(lo, 0xff, (size_t)(hi - lo));
  }
#endif
  for (auto &r : g_cp_ranges) memset((void *)r.first, 0xff, r.second - r.first);
}

// Block b (id bid) with n fresh threads of the launch's block shape, its
// warps sized.
inline void init_block(Block &b, dim3 bid, int n) {
  const dim3 bd = g_launch.block;
  b.n = b.live = b.running = n;
  b.sync_arrived = 0;
  b.th.assign(n, Thread{});
  b.w.assign((n + 31) / 32, Warp{});
  for (size_t wi = 0; wi < b.w.size(); wi++) b.w[wi].nlanes = std::min(32, n - (int)wi * 32);
  for (int i = 0; i < n; i++) {
    Thread &t = b.th[i];
    t.linear = i;
    t.tid = dim3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
    t.bid = bid;
    t.bdim = bd;
    t.gdim = g_launch.grid;
  }
}

// A fiber for t on stack i (a function of its own, out of the callers'
// loops: getcontext returns twice).
__attribute__((noinline)) inline void make_fiber(Thread &t, size_t i) {
  t.stack = g_stacks.get(i);
  getcontext(&t.uc);
  t.uc.uc_stack.ss_sp = t.stack;
  t.uc.uc_stack.ss_size = kStack;
  t.uc.uc_link = nullptr;
  makecontext(&t.uc, fiber_main, 0);
}

// The order the scheduler tries N threads in: 0 .. N-1 (fwd), reversed
// (rev) or shuffled from seed s (rand).
inline std::vector<int> thread_order(int N, uint64_t s) {
  std::vector<int> order(N);
  for (int i = 0; i < N; i++) order[i] = g_order == 1 ? N - 1 - i : i;
  if (g_order == 2)
    for (int i = N - 1; i > 0; i--) std::swap(order[i], order[splitmix(s) % (uint64_t)(i + 1)]);
  return order;
}

// Always the first runnable thread of b in the order: it runs ahead as far
// as the barriers let it (a warp through all its shuffles and mma's up to
// the next barrier) before any thread after it moves. Returns when every
// thread has exited; aborts when every thread left waits.
inline void schedule(Block &b, const std::vector<int> &order) {
  for (;;) {
    int pick = -1;
    for (int i : order)
      if (b.th[i].st == TS::running) {
        pick = i;
        break;
      }
    if (pick < 0) {
      t_cur = nullptr;
      if (b.live == 0) return;
      report_and_die(b, "deadlock: every thread of the block waits and none can go on");
    }
    t_cur = &b.th[pick];
    swapcontext(&g_sched_uc, &t_cur->uc);
  }
}

inline void run_block(Block &b, dim3 bid) {
  g_launch.cur_block = bid;
  fill_shared_nan();
  const dim3 bd = g_launch.block;
  const int n = (int)(bd.x * bd.y * bd.z);
  init_block(b, bid, n);
  if (b.threads_mode) {
    std::vector<std::thread> ts;
    ts.reserve(n);
    for (int i = 0; i < n; i++)
      ts.emplace_back([&b, i] {
        t_cur = &b.th[i];
        g_entry_fn(g_entry_arg);
        cp_async_drain(b.th[i]);
        thread_exit(b, b.th[i]);
        t_cur = nullptr;
      });
    for (auto &t : ts) t.join();
    return;
  }
  for (int i = 0; i < n; i++) make_fiber(b.th[i], (size_t)i);
  schedule(b, thread_order(n, g_order_seed ^ (0x51ED2701ull * (bid.x + 1)) ^ ((uint64_t)bid.y << 40)));
}

} // namespace emu

// Runs kernel_call() (a call of a __global__ function with its arguments)
// as every thread of every block of grid, blocks one after another (z, y,
// x order; GPURT_TEST_EMU_ORDER=rev: the reverse, so that of blocks that
// meet through global memory, e.g. the last of a split counting itself,
// another one is last), each block's threads as fibers (or std::threads:
// see the top).
template <class F> inline void emu_launch(dim3 grid, dim3 block, F kernel_call, const char *name = "kernel") {
  using namespace emu;
  install_fault_handler();
  if (!g_order_set) set_order(getenv("GPURT_TEST_EMU_ORDER"));
  if (g_cp_late < 0) set_cp_async(getenv("GPURT_TEST_EMU_CPASYNC"));
  if (g_threads_mode < 0) {
    const char *e = getenv("GPURT_TEST_EMU_THREADS");
    g_threads_mode = e != nullptr && strcmp(e, "1") == 0;
  }
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024) die("launch of %s with a block of %u threads", name, nt);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) die("launch of %s with an empty grid", name);
  g_launch.name = name;
  g_launch.grid = grid;
  g_launch.block = block;
  g_entry_fn = [](void *p) { (*static_cast<F *>(p))(); };
  g_entry_arg = &kernel_call;
  Block b;
  b.threads_mode = g_threads_mode == 1;
  g_blk = &b;
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        if (g_order == 1)
          run_block(b, dim3(grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z));
        else
          run_block(b, dim3(x, y, z));
      }
  g_blk = nullptr;
}

#define threadIdx (::emu::t_cur->tid)
#define blockIdx (::emu::t_cur->bid)
#define blockDim (::emu::t_cur->bdim)
#define gridDim (::emu::t_cur->gdim)
#define warpSize 32

// ---- barriers and warp shuffles ---------------------------------------------------------

inline void emu_syncthreads(int line) { emu::syncthreads(line); }
#define __syncthreads() emu_syncthreads(__LINE__)

// line: the caller's (the check that a warp's lanes meet at one place).
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, int line = __builtin_LINE()) {
  return emu::shfl(emu::K_SHFL_XOR, line, mask, var, width, [&](int l) { return (l ^ lane_mask) & 31; });
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  return emu::shfl(emu::K_SHFL_DOWN, line, mask, var, width,
                   [&](int l) { return l + (int)delta < 32 ? l + (int)delta : l; });
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, int line = __builtin_LINE()) {
  return emu::shfl(emu::K_SHFL_UP, line, mask, var, width, [&](int l) { return l >= (int)delta ? l - (int)delta : l; });
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, int line = __builtin_LINE()) {
  return emu::shfl(emu::K_SHFL_IDX, line, mask, var, width, [&](int) { return src_lane & 31; });
}

// ---- float and integer intrinsics -----------------------------------------------------------

inline float __uint_as_float(unsigned int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) {
  int u;
  memcpy(&u, &f, 4);
  return u;
}
// Separate operations, each rounded to nearest even (no contraction under
// -ffp-contract=off).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
inline void __nanosleep(unsigned int) {}
using std::isfinite;
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// The CUDA headers declare it for the device alone; a host cast rounds to
// nearest even as well (cuda_rope.cuh's cos and sin).
inline float __double2float_rn(double d) { return (float)d; }

// PTX prmt.b32 (default mode): byte n of the result is byte s<4n+2:4n> of
// {b, a} (a's bytes 0-3, b's 4-7), or, when bit 4n+3 is set, that byte's
// sign replicated over 8 bits. (CUDA's documentation of __byte_perm says
// only bits 2:0 of each nibble count; the kernels here never set bit 3.)
inline unsigned int __byte_perm(unsigned int a, unsigned int b, unsigned int s) {
  const uint64_t v = ((uint64_t)b << 32) | a;
  unsigned int r = 0;
  for (int n = 0; n < 4; n++) {
    const unsigned sel = (s >> (4 * n)) & 0xfu;
    unsigned byte = (unsigned)(v >> (8 * (sel & 7u))) & 0xffu;
    if (sel & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    r |= byte << (8 * n);
  }
  return r;
}

template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *(const volatile T *)p; }

// Blocks run one after another and a block's threads as fibers of one OS
// thread (or, in threads mode, as std::threads): sequentially consistent
// atomics and fences.
inline unsigned int atomicAdd(unsigned int *p, unsigned int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

inline size_t __cvta_generic_to_shared(const void *p) { return (size_t)p; }

[[noreturn]] inline void __trap() { emu::die("__trap() in kernel %s", emu::g_launch.name); }

inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// ---- memory: the emulated meaning of the kernels' inline asm ------------------------------------

namespace emu {

inline void check_align(const void *p, size_t n, const char *what) {
  if (((uintptr_t)p & (n - 1)) != 0) {
    const Thread *t = t_cur;
    die("%s: address %p is not %zu-byte aligned (kernel %s, block (%u,%u,%u), thread %u): the GPU faults", what, p, n,
        g_launch.name, g_launch.cur_block.x, g_launch.cur_block.y, g_launch.cur_block.z, t ? (unsigned)t->linear : 0u);
  }
}

// cp.async of n (4, 8, 16) bytes, cp.async.commit_group and
// cp.async.wait_group N, at the two ends of what the GPU may do: "now"
// copies at once (commit and wait do nothing), so a stage refilled while
// another warp still reads it shows; "late" keeps each thread's copies in
// its groups and copies a group only when a wait_group leaves more than N
// groups pending (or at the thread's exit), so a read before the wait that
// covers it sees what the stage held before.
inline void note_cp_range(uintptr_t lo, uintptr_t hi) {
  std::unique_lock<std::mutex> lk(g_cp_ranges_mu, std::defer_lock);
  if (g_blk != nullptr && g_blk->threads_mode) lk.lock();
  auto it = g_cp_ranges.upper_bound(lo); // the first range starting past lo
  if (it != g_cp_ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= hi) return; // inside (the usual case)
    if (prev->second >= lo) {       // touches or overlaps: extend it
      lo = prev->first;
      it = g_cp_ranges.erase(prev);
    }
  }
  while (it != g_cp_ranges.end() && it->first <= hi) { // swallow the ranges it reaches
    hi = std::max(hi, it->second);
    it = g_cp_ranges.erase(it);
  }
  g_cp_ranges[lo] = hi;
}

inline void cp_async(void *dst, const void *src, size_t n) {
  check_align(dst, n, "cp.async (shared destination)");
  check_align(src, n, "cp.async (global source)");
  note_cp_range((uintptr_t)dst, (uintptr_t)dst + n);
  if (g_cp_late != 1) {
    memcpy(dst, src, n);
    return;
  }
  t_cur->open.push_back({dst, src, n});
}
inline void cp_async_commit() {
  if (g_cp_late != 1) return;
  Thread &me = *t_cur;
  me.groups.push_back(std::move(me.open));
  me.open.clear();
}
inline void cp_async_wait(int pending) {
  if (g_cp_late != 1) return;
  Thread &me = *t_cur;
  size_t done = 0;
  while (me.groups.size() - done > (size_t)pending) {
    for (auto &c : me.groups[done]) memcpy(c.dst, c.src, c.n);
    done++;
  }
  me.groups.erase(me.groups.begin(), me.groups.begin() + (long)done);
}
inline void cp_async_drain(Thread &me) {
  for (auto &g : me.groups)
    for (auto &c : g) memcpy(c.dst, c.src, c.n);
  for (auto &c : me.open) memcpy(c.dst, c.src, c.n);
  me.groups.clear();
  me.open.clear();
}

// A 16-byte vector load (ld.global.*.v4.u32).
inline uint4 ld16(const void *p) {
  check_align(p, 16, "ld.global.v4.u32");
  uint4 v;
  memcpy(&v, p, 16);
  return v;
}

inline float h16_to_f(uint16_t h, bool f16) {
  if (f16) {
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
  }
  return __uint_as_float((uint32_t)h << 16);
}

// D = A B + C for one warp's m16n8k16 (see the top), every lane's output.
inline void mma_compute(Warp &w, int p, bool f16) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    const uint32_t *a = w.ma[p][l], *b = w.mb[p][l];
    auto lo = [&](uint32_t v) { return (double)h16_to_f((uint16_t)(v & 0xffffu), f16); };
    auto hi = [&](uint32_t v) { return (double)h16_to_f((uint16_t)(v >> 16), f16); };
    A[g][2 * t] = lo(a[0]), A[g][2 * t + 1] = hi(a[0]);
    A[g + 8][2 * t] = lo(a[1]), A[g + 8][2 * t + 1] = hi(a[1]);
    A[g][2 * t + 8] = lo(a[2]), A[g][2 * t + 9] = hi(a[2]);
    A[g + 8][2 * t + 8] = lo(a[3]), A[g + 8][2 * t + 9] = hi(a[3]);
    B[2 * t][g] = lo(b[0]), B[2 * t + 1][g] = hi(b[0]);
    B[2 * t + 8][g] = lo(b[1]), B[2 * t + 9][g] = hi(b[1]);
  }
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    for (int e = 0; e < 4; e++) {
      const int r = g + 8 * (e >> 1), c = 2 * t + (e & 1);
      double s = (double)w.mc[p][l][e];
      for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
      w.md[p][l][e] = (float)s;
    }
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, c += a b.
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool f16,
                     int line = __builtin_LINE()) {
  Thread &me = *t_cur;
  Warp &w = g_blk->w[me.linear / 32];
  const int lane = me.linear % 32;
  const int p = (int)(me.wseq & 1u);
  for (int i = 0; i < 4; i++) w.ma[p][lane][i] = a[i], w.mc[p][lane][i] = c[i];
  w.mb[p][lane][0] = b[0], w.mb[p][lane][1] = b[1];
  const int q = warp_arrive(f16 ? K_MMA_F16 : K_MMA_BF16, line, 0xffffffffu);
  for (int i = 0; i < 4; i++) c[i] = w.md[q][lane][i];
}

} // namespace emu
