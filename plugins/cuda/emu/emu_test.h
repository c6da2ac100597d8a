// SPDX-License-Identifier: Apache-2.0
//
// emu_test.h — what the emulator's tests share (quant_emu_test.cc,
// append_emu_test.cc): their options and counts, buffers that end at a
// guard page, a seeded generator, the case filter, the one-line report and
// the runs under several schedules that must give the same bits.
// Included once per test program, after cuda_emu.h and the kernels.
#ifndef GPURT_EMU_TEST_H_
#define GPURT_EMU_TEST_H_

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

bool g_one_order = false;
std::vector<std::string> g_filters;
int g_pass = 0, g_fail = 0;

// ---- buffers ending at a guard page ------------------------------------------------------------

constexpr unsigned char kFill = 0xA5; // the mapping in front of the data

struct GuardedBuf {
  char *map = nullptr;
  size_t maplen = 0;
  void *data = nullptr;
  size_t bytes = 0;
  GuardedBuf(size_t n, size_t align) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = ((n + align + page - 1) / page) * page;
    maplen = body + page;
    map = (char *)mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) emu::die("mmap of %zu bytes failed", maplen);
    if (mprotect(map + body, page, PROT_NONE) != 0) emu::die("mprotect failed");
    uintptr_t end = (uintptr_t)(map + body);
    data = (void *)((end - n) & ~(uintptr_t)(align - 1));
    bytes = n;
    memset(map, kFill, body);
  }
  ~GuardedBuf() { munmap(map, maplen); }
  GuardedBuf(const GuardedBuf &) = delete;
  GuardedBuf &operator=(const GuardedBuf &) = delete;
  // Nothing written between the mapping's start and the data, nor between
  // the data's end and the guard page (when the alignment left a gap).
  bool margins_intact() const {
    for (char *p = map; p < (char *)data; p++)
      if ((unsigned char)*p != kFill) return false;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (char *p = (char *)data + bytes; p < map + maplen - page; p++)
      if ((unsigned char)*p != kFill) return false;
    return true;
  }
};

template <class E> struct Dev {
  std::unique_ptr<GuardedBuf> g;
  size_t n = 0;
  explicit Dev(size_t count, size_t align = 16) : g(new GuardedBuf(count > 0 ? count * sizeof(E) : 1, align)), n(count) {}
  E *p() const { return (E *)g->data; }
  E &operator[](size_t i) const { return p()[i]; }
  std::vector<E> copy() const { return std::vector<E>(p(), p() + n); }
  // Whether the buffer holds v's elements (or its first n of them, with n).
  bool holds(const std::vector<E> &v) const { return holds(v, v.size()); }
  bool holds(const std::vector<E> &v, size_t count) const {
    return count == n && count <= v.size() && std::equal(p(), p() + n, v.begin());
  }
};

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 12345) {}
  uint64_t next() { return emu::splitmix(s); }
  double uni() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uni(double lo, double hi) { return lo + (hi - lo) * uni(); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

bool selected(const std::string &name) {
  if (g_filters.empty()) return true;
  for (auto &f : g_filters)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

void report(const std::string &name, const std::string &err, const std::string &info, double secs) {
  if (err.empty()) {
    g_pass++;
    printf("ok    %-58s %s (%.2f s)\n", name.c_str(), info.c_str(), secs);
  } else {
    g_fail++;
    printf("FAIL  %-58s %s\n      %s\n", name.c_str(), info.c_str(), err.c_str());
  }
  fflush(stdout);
}

// The tests' command line: [-quick] [FILTER...]; false (usage said) on a
// flag it does not know.
bool parse_args(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-quick") == 0) {
      g_one_order = true;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: %s [-quick] [FILTER...]\n", argv[0]);
      return false;
    } else {
      g_filters.push_back(argv[i]);
    }
  }
  return true;
}

// ---- the same bits under every schedule ------------------------------------------------------

// One of the emulator's schedules: the threads' order between barriers and
// when cp.async lands (cuda_emu.h's set_order, set_cp_async).
struct EmuRun {
  const char *order, *cp;
};

// Runs launch under each of runs (only once, as GPURT_TEST_EMU_ORDER and
// GPURT_TEST_EMU_CPASYNC say, with -quick), the output reset before and
// snapshotted after each; out is the first's. Returns "" or how the runs
// differ.
template <size_t N>
std::string run_orders(const EmuRun (&runs)[N], const std::function<void()> &reset,
                       const std::function<void()> &launch, const std::function<std::vector<uint16_t>()> &snap,
                       std::vector<uint16_t> &out) {
  std::string err;
  if (g_one_order) {
    reset();
    launch();
    out = snap();
    return err;
  }
  for (size_t r = 0; r < N; r++) {
    emu::set_order(runs[r].order);
    emu::set_cp_async(runs[r].cp);
    reset();
    launch();
    std::vector<uint16_t> got = snap();
    if (r == 0) {
      out = std::move(got);
      continue;
    }
    for (size_t i = 0; i < out.size() && err.empty(); i++)
      if (out[i] != got[i]) {
        char buf[300];
        snprintf(buf, sizeof buf,
                 "the output depends on the emulator's schedule (a race, or a read of a stage its cp.async wait "
                 "does not cover): element %zu is %#06x with %s order and cp.async %s, %#06x with %s and %s",
                 i, out[i], runs[0].order, runs[0].cp, got[i], runs[r].order, runs[r].cp);
        err = buf;
      }
  }
  emu::set_order("fwd");
  emu::set_cp_async("now");
  return err;
}

}  // namespace

#endif  // GPURT_EMU_TEST_H_
