// SPDX-License-Identifier: Apache-2.0
//
// The CUTLASS mixed-input adapter (cuda_cutlass_mixed.h): quant_matmul's
// prefill (n >= 128) on sm_90a without a dequantized copy of W. CUTLASS's
// sm90_mma_tma_gmma_rs_warpspecialized_mixed_input collective in its
// ConvertAndScaleWithZero mode loads W's uint8 codes by TMA, converts them
// in registers to x's type ((scale * q + zero), one group's scale and zero
// per row and 64-deep K tile) and feeds them to wgmma as the register-sourced
// A operand. The headers come from the pinned flashinfer-python wheel
// (scripts/build_cuda.sh); nothing of CUTLASS is copied here.
//
// The problem as CUTLASS sees it (the narrow operand must be A, K-major):
//   A = W      M = m rows, K = k, row-major (k contiguous), uint8
//   B = x      N = n, K x N column-major (x is n x k row-major)
//   D = y      M x N column-major, ld = m: exactly y, n x m row-major
//   scales, zeros: f32, M x (k / group) with M contiguous ("MN-major", the
//              only layout the collective takes: its StrideScale is
//              Stride<_1, int64_t, int64_t>)
// MLX stores scales and biases m x (k / group) with the group index
// contiguous, as bf16 or f16, so a small kernel (clm_prep) first writes
// them transposed and widened to f32 into the stream's scratch: 8 bytes
// per group for both (14336 x 4096 in groups of 64: 7.3 MB written, a few
// microseconds; W itself, 1 byte a weight, is read only by the GEMM).
//
// Precision of the in-register dequantization. The collective computes,
// for ElementScale (float) different from the MMA type, stage = float(q);
// stage = stage * scale + zero (in f32); then converts stage to bf16 / f16
// with round-to-nearest (cvt.rn). scale has at most 11 significant bits
// (it came from bf16 or f16) and q at most 8, so scale * q is exact in f32
// and only the addition rounds, whether or not nvcc fuses it into an FMA:
// every weight is round16(round_f32(s * q + b)), bit for bit what a
// dequantizing pass in f32 followed by a rounding to x's type gives (the
// old path and conform/quant.go's model of it: at most half an ulp of x's
// type, 2^-9 relative for bf16, per weight, well inside its 2^-6 term).
// The tempting alternative, 16-bit scales and zeros applied in the MMA type
// (what the collective does when ElementScale is x's type: bf16 mul, then
// bf16 add), rounds s * q to bf16 before adding b; MLX's b is the group's
// extreme, so s * q reaches twice the largest |w| and that rounding costs
// up to 2^-9 of it. Simulated on conform's data (normal weights quantized
// as MLX does, groups of 64, k 4096, y rounded to bf16): the worst element
// is 0.36 of conform's tolerance with the f32 form and 1.1 (two of 16384
// over) with bf16 arithmetic, so the f32 form it is. The accumulation is
// wgmma's f32; y is rounded once (round-to-nearest) in the epilogue.
//
// Kernels (the default build has exactly two): TMA warp-specialized
// cooperative (two consumer warp groups split the 128 W rows of a tile),
// persistent, tile 128 (W rows) x 256 (tokens) x 64 (k; the smallest tile K
// wgmma's 16-deep steps allow the collective, and what group sizes 64 and
// 128 need: a group may not be smaller than the K tile); for bf16 x in a
// 2 x 1 cluster (x's 256 x 64 tile, 32 KB of the 40 KB a stage loads,
// multicast to the two W-row tiles of a pair: L2 serves ~40% fewer bytes a
// flop), for f16 x in a 1 x 1 cluster. Both launched with programmatic
// dependent launch (PDL) after clm_prep: CUTLASS's griddepcontrol.wait
// (CUTLASS_ENABLE_GDC_FOR_SM90) comes before their first global loads, so
// the GEMM's prologue (barriers, TMA descriptors) overlaps clm_prep's tail;
// a launch attribute, no other kernel. H200, n 2048, k 4096, groups of 64,
// bf16: 97.1 / 330.0 us at m 4096 / 14336, 0.90x / 0.92x bf16 cuBLASLt's
// speed (87.7 / 303.4 us); the former default (cluster 1 x 1, no PDL) 98.8
// / 334.5 us. The knob nopdl (any build) launches without PDL.
//
// Experiments (tuning runs; the names in cuda_cutlass_mixed.h). Built only
// with GPURT_CLM_EXPERIMENTS=1 (scripts/build_cuda.sh then passes
// -DGPURT_CLM_EXPERIMENTS), never by CI's build, all bf16 x: 128x256 (the
// former default: cluster 1 x 1), 128x128 (130 / 437 us above),
// pp64x256 and ppc2x1 (ping-pong: each warp group its own 64 x 256 tile,
// one's epilogue under the other's mainloop; the same conversions per flop
// as 128 x 256, but each tile loads its own x tile, which ppc2x1's cluster
// halves again: 114.0 / 410.0 and 112.3 / 377.1 us); the knob xprep. No
// gain measured from the swizzle and raster knobs (rm is worse at 14336).
// Not tried: a 128-deep K tile (can_implement wants group % tile K == 0,
// and MLX's groups are 64), 128 x 128 ping-pong (the conversions and x
// bytes a flop of 128 x 128, which runs 27% slower cooperatively). Also
// worth a try one day: a W copy re-ordered so that each thread's codes are
// contiguous in shared memory (CUTLASS's "shuffled" layout for A; that
// needs a pass over W, or a weight format of our own).
//
// A call: can_implement and the GEMM's initialize (host-side; nothing on
// the stream), then clm_prep on the stream, then the GEMM through
// GemmUniversalAdapter (runtime API, static cudart, on the primary context
// the plugin made current), its workspace after the f32 scales in the same
// scratch. A refusal (return 1) so comes before anything is enqueued. Every
// C++ exception stops here.
#include <stdio.h>
#include <string.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda_cutlass_mixed.h"

#if defined(GPURT_HAVE_CUTLASS_MIXED)
// griddepcontrol.wait before the kernels' first global loads (a no-op when
// launched without programmatic dependent launch: the knob nopdl).
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#if defined(GPURT_CLM_EXPERIMENTS)
#include <mutex>
#endif
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <exception>
#include <new>

using namespace cute;

namespace gpurt_clm {

constexpr int kTileK = 64;
using Acc = float;

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpiCoop = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpiPingpong = cutlass::epilogue::TmaWarpSpecialized;
using Cluster1 = Shape<_1, _1, _1>;
using Cluster2x1 = Shape<_2, _1, _1>;

// One mixed-input GEMM: x's type (the MMA type, also y's), the tile, the
// cluster and the schedule (mainloop, epilogue).
template <class Elem, class Tile, class Cluster = Cluster1, class Sched = Coop, class EpiSched = EpiCoop,
          class TileSched = void>
struct Config {
  using ElementQ = uint8_t;   // W's codes
  using ElementScale = float; // scales and zeros, widened by clm_prep
  using LayoutW = cutlass::layout::RowMajor;    // A: m x k, k contiguous
  using LayoutX = cutlass::layout::ColumnMajor; // B: k x n, k contiguous (x, n x k row-major)
  using LayoutY = cutlass::layout::ColumnMajor; // D: m x n, m contiguous (y, n x m row-major)
  static constexpr int AlignW = 16, AlignX = 8, AlignY = 8; // 16 bytes: TMA
  using ClusterShape = Cluster;
  using ProblemShape = Shape<int, int, int, int>; // M, N, K, L

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Acc, Acc, void, LayoutY, AlignY, Elem, LayoutY, AlignY,
      EpiSched,
      cutlass::epilogue::fusion::LinearCombination<Elem, Acc, void, Acc>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementQ, ElementScale, ElementScale>, LayoutW,
      AlignW, Elem, LayoutX, AlignX, Acc, Tile, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      Sched>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue, TileSched>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideW = typename Kernel::StrideA;
  using StrideX = typename Kernel::StrideB;
  using StrideY = typename Kernel::StrideD;
  using StrideS = typename Mainloop::StrideScale;
  static_assert(cute::size<2>(Tile{}) == kTileK, "the group-size check assumes a 64-deep K tile");
};

using T128x256 = Shape<_128, _256, Int<kTileK>>;
// The default build's two kernels.
using Bf16 = Config<cutlass::bfloat16_t, T128x256, Cluster2x1>;
using F16 = Config<cutlass::half_t, T128x256>;
// The skinny kernels (batched decode, 8 < n <= 64 tokens; CU_CLM_TILE_SKINNY,
// chosen by cuda_quant.c): tiles of 128 W rows x 32 tokens, so that the
// tensor cores do at most twice the needed work at n = 16 instead of 16x
// on 128 x 256, and the stream-K scheduler (deterministic reduction) to
// spread k over every SM: m = 4096 is only 32 tiles.
using T128x32 = Shape<_128, _32, Int<kTileK>>;
using Bf16Sk = Config<cutlass::bfloat16_t, T128x32, Cluster1, Coop, EpiCoop, cutlass::gemm::StreamKScheduler>;
using F16Sk = Config<cutlass::half_t, T128x32, Cluster1, Coop, EpiCoop, cutlass::gemm::StreamKScheduler>;
#if defined(GPURT_CLM_EXPERIMENTS)
using Bf16C1 = Config<cutlass::bfloat16_t, T128x256>;
using Bf16T128 = Config<cutlass::bfloat16_t, Shape<_128, _128, Int<kTileK>>>;
using Bf16Pp64x256 = Config<cutlass::bfloat16_t, Shape<_64, _256, Int<kTileK>>, Cluster1, Pingpong, EpiPingpong>;
using Bf16PpC2x1 = Config<cutlass::bfloat16_t, Shape<_64, _256, Int<kTileK>>, Cluster2x1, Pingpong, EpiPingpong>;
#endif

// cu_clm_qgemm.tile: the kernel in bits 0-7 (CU_CLM_TILE_DEFAULT, else one
// of an experiments build), then the knobs.
[[maybe_unused]] constexpr int kKernelMask = 0xff; // read by an experiments build's dispatch
constexpr int kKernel128x128 = 1, kKernel128x256 = 2, kKernelPp64x256 = 3, kKernelPpC2x1 = 4;
constexpr int kKernelSkinny = CU_CLM_TILE_SKINNY; // any build
static_assert(kKernelSkinny > kKernelPpC2x1, "CU_CLM_TILE_SKINNY is not an experiments kernel's number");
constexpr int kSwzShift = 8;     // bits 8-10: 0 CUTLASS's default, v: max swizzle 1 << (v - 1)
constexpr int kRasterShift = 11; // bits 11-12: 0 heuristic, 1 along M, 2 along N
constexpr int kKnobNoPdl = 1 << 13; // any build
constexpr int kKnobXprep = 1 << 14; // experiments builds

// The scratch: f32 scales, then f32 zeros (each (k / group) x m), then
// CUTLASS's workspace, each 256-byte aligned.
struct Scratch {
  float *s, *z;
  void *workspace;
  size_t end; // bytes before the workspace
  Scratch(void *base, uint32_t m, uint32_t groups) {
    const size_t one = ((size_t)m * groups * sizeof(float) + 255) & ~size_t(255);
    char *p = static_cast<char *>(base);
    s = p ? reinterpret_cast<float *>(p) : nullptr;
    z = p ? reinterpret_cast<float *>(p + one) : nullptr;
    end = 2 * one;
    workspace = p ? p + end : nullptr;
  }
};

__device__ __forceinline__ float clm_widen(uint16_t u, int f16) {
  return f16 ? __half2float(__ushort_as_half(u)) : __uint_as_float((uint32_t)u << 16);
}

// scales and biases (m x groups, 16-bit, row-major) -> s, z (groups x m,
// f32), both arrays in one pass. Bytes: 2 + 2 read and 4 + 4 written a
// group of a row (m 4096, k 4096 in groups of 64: 1 MB read, 2 MB written;
// m 14336: 3.7 + 7.3 MB), so it is latency-bound: a block (32 x 8 threads)
// takes 64 rows x 32 groups of both arrays, each thread issues its 16 loads
// (a warp: 64 contiguous bytes of a row) before its first use, the widened
// values go through shared memory (conflict-free both ways: a row of the
// tile is a group, 65 floats apart), and each warp store writes 32 rows of
// one group (128 contiguous bytes). Widening bf16 or f16 to f32 is exact.
constexpr uint32_t kPrepRows = 64, kPrepGroups = 32;
__global__ void __launch_bounds__(256) clm_prep(const uint16_t *__restrict__ scales,
                                                const uint16_t *__restrict__ biases, float *__restrict__ s,
                                                float *__restrict__ z, uint32_t m, uint32_t groups, int f16) {
  asm volatile("griddepcontrol.launch_dependents;"); // PDL: the GEMM may start its prologue
  __shared__ float tile[2][kPrepGroups][kPrepRows + 1];
  const uint32_t tx = threadIdx.x, ty = threadIdx.y; // 32 x 8
  const uint32_t r0 = blockIdx.x * kPrepRows, c0 = blockIdx.y * kPrepGroups;
  const uint32_t c = c0 + tx;
  uint16_t vs[kPrepRows / 8], vb[kPrepRows / 8];
#pragma unroll
  for (uint32_t i = 0; i < kPrepRows / 8; i++) {
    const uint32_t r = r0 + ty + 8 * i;
    const bool in = r < m && c < groups;
    const size_t o = (size_t)r * groups + c;
    vs[i] = in ? scales[o] : (uint16_t)0;
    vb[i] = in ? biases[o] : (uint16_t)0;
  }
#pragma unroll
  for (uint32_t i = 0; i < kPrepRows / 8; i++) {
    tile[0][tx][ty + 8 * i] = clm_widen(vs[i], f16);
    tile[1][tx][ty + 8 * i] = clm_widen(vb[i], f16);
  }
  __syncthreads();
#pragma unroll
  for (uint32_t j = 0; j < kPrepGroups / 8; j++) {
    const uint32_t g = ty + 8 * j, cg = c0 + g;
    if (cg < groups) {
#pragma unroll
      for (uint32_t h = 0; h < kPrepRows; h += 32) {
        const uint32_t r = r0 + h + tx;
        if (r < m) {
          s[(size_t)cg * m + r] = tile[0][g][h + tx];
          z[(size_t)cg * m + r] = tile[1][g][h + tx];
        }
      }
    }
  }
}

#if defined(GPURT_CLM_EXPERIMENTS)
// The knob xprep: the last conversion's inputs and output.
struct PrepKey {
  const void *scales, *biases;
  const float *s;
  uint32_t m, groups;
  int f16;
  bool operator==(const PrepKey &o) const {
    return scales == o.scales && biases == o.biases && s == o.s && m == o.m && groups == o.groups && f16 == o.f16;
  }
};
std::mutex prep_mu;
PrepKey prep_last{};
#endif

template <class C> typename C::Gemm::Arguments make_args(const cu_clm_qgemm *a, const Scratch &lay) {
  using E = typename C::Mainloop::ElementB; // x's type
  const int m = (int)a->m, n = (int)a->n, k = (int)a->k;
  const int groups = (int)(a->k / a->group);
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = a->sm_count;
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = typename C::ProblemShape{m, n, k, 1};
  args.mainloop.ptr_A = static_cast<const uint8_t *>(a->w);
  args.mainloop.dA = cutlass::make_cute_packed_stride(typename C::StrideW{}, cute::make_shape(m, k, 1));
  args.mainloop.ptr_B = static_cast<const E *>(a->x);
  args.mainloop.dB = cutlass::make_cute_packed_stride(typename C::StrideX{}, cute::make_shape(n, k, 1));
  args.mainloop.ptr_S = lay.s;
  args.mainloop.dS = cutlass::make_cute_packed_stride(typename C::StrideS{}, cute::make_shape(m, groups, 1));
  args.mainloop.group_size = (int)a->group;
  args.mainloop.ptr_Z = lay.z;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = cutlass::make_cute_packed_stride(typename C::StrideY{}, cute::make_shape(m, n, 1));
  args.epilogue.ptr_D = static_cast<E *>(a->y);
  args.epilogue.dD = cutlass::make_cute_packed_stride(typename C::StrideY{}, cute::make_shape(m, n, 1));
  args.hw_info = hw;
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  const int swz = (a->tile >> kSwzShift) & 7, raster = (a->tile >> kRasterShift) & 3;
  if (swz != 0) args.scheduler.max_swizzle_size = 1 << (swz - 1);
  if (raster != 0) args.scheduler.raster_order = raster == 1 ? Raster::AlongM : Raster::AlongN;
  return args;
}

void say(char *msg, size_t len, const char *fmt, const char *a, const char *b) {
  if (msg != nullptr && len > 0) snprintf(msg, len, fmt, a, b);
}

template <class C> size_t scratch_bytes(const cu_clm_qgemm *a) {
  Scratch lay(nullptr, a->m, a->k / a->group);
  auto args = make_args<C>(a, lay);
  return lay.end + C::Gemm::get_workspace_size(args);
}

template <class C> int run(const cu_clm_qgemm *a, char *msg, size_t len) {
  const uint32_t groups = a->k / a->group;
  Scratch lay(a->scratch, a->m, groups);
  cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  auto args = make_args<C>(a, lay);
  const size_t ws = C::Gemm::get_workspace_size(args);
  if (lay.end + ws > a->scratch_bytes) {
    say(msg, len, "the scratch is smaller than the %s%s needs", "CUTLASS mixed-input GEMM", "");
    return -1;
  }
  // Everything that can refuse or fail on the host comes before clm_prep is
  // enqueued: can_implement, then initialize (the kernel's parameters and
  // its shared-memory attribute; the persistent scheduler's workspace needs
  // no initialization on the stream).
  typename C::Gemm gemm;
  cutlass::Status s = gemm.can_implement(args);
  if (s != cutlass::Status::kSuccess) {
    say(msg, len, "CUTLASS cannot run this mixed-input GEMM: %s%s", cutlassGetStatusString(s), "");
    return 1; // nothing enqueued: the caller dequantizes
  }
  s = gemm.initialize(args, lay.workspace, st);
  if (s != cutlass::Status::kSuccess) {
    cudaError_t ce = cudaGetLastError();
    say(msg, len, "CUTLASS initialize: %s (%s)", cutlassGetStatusString(s), cudaGetErrorString(ce));
    return ce != cudaSuccess ? (int)ce : -1;
  }
  const uint16_t *sc = static_cast<const uint16_t *>(a->scales), *bi = static_cast<const uint16_t *>(a->biases);
  const bool pdl = (a->tile & kKnobNoPdl) == 0;
  bool prep = true;
#if defined(GPURT_CLM_EXPERIMENTS)
  if (a->tile & kKnobXprep) {
    const PrepKey key{a->scales, a->biases, lay.s, a->m, groups, a->scale_f16};
    std::lock_guard<std::mutex> hold(prep_mu);
    prep = !(key == prep_last);
    prep_last = key;
  }
#endif
  if (prep)
    clm_prep<<<dim3((a->m + kPrepRows - 1) / kPrepRows, (groups + kPrepGroups - 1) / kPrepGroups), dim3(32, 8), 0,
               st>>>(sc, bi, lay.s, lay.z, a->m, groups, a->scale_f16);
  cudaError_t ce = cudaGetLastError();
  if (ce != cudaSuccess) {
    say(msg, len, "launching the scale conversion kernel: %s (%s)", cudaGetErrorString(ce), cudaGetErrorName(ce));
    return (int)ce;
  }
  s = gemm.run(st, nullptr, pdl);
  ce = cudaGetLastError();
  if (s != cutlass::Status::kSuccess || ce != cudaSuccess) {
    say(msg, len, "CUTLASS run: %s (%s)", cutlassGetStatusString(s), cudaGetErrorString(ce));
    return ce != cudaSuccess ? (int)ce : -1;
  }
  return 0;
}

// The instantiation for a call.
template <class F> auto dispatch(const cu_clm_qgemm *a, F &&f) {
  if ((a->tile & kKernelMask) == kKernelSkinny)
    return a->x_f16 ? f(static_cast<F16Sk *>(nullptr)) : f(static_cast<Bf16Sk *>(nullptr));
  if (a->x_f16) return f(static_cast<F16 *>(nullptr));
#if defined(GPURT_CLM_EXPERIMENTS)
  switch (a->tile & kKernelMask) {
  case kKernel128x128:
    return f(static_cast<Bf16T128 *>(nullptr));
  case kKernel128x256:
    return f(static_cast<Bf16C1 *>(nullptr));
  case kKernelPp64x256:
    return f(static_cast<Bf16Pp64x256 *>(nullptr));
  case kKernelPpC2x1:
    return f(static_cast<Bf16PpC2x1 *>(nullptr));
  default:
    break;
  }
#endif
  return f(static_cast<Bf16 *>(nullptr));
}

} // namespace gpurt_clm

using namespace gpurt_clm;

extern "C" int cu_clm_tile_parse(const char *name) {
  if (name == nullptr) return CU_CLM_TILE_DEFAULT;
  constexpr int swz = 7 << kSwzShift, ras = 3 << kRasterShift;
  static const struct {
    const char *name;
    int kernel, knob, field; // kernel -1: a knob, which replaces field's bits
  } names[] = {
      {"default", CU_CLM_TILE_DEFAULT, 0, 0},
      {"c2x1", CU_CLM_TILE_DEFAULT, 0, 0}, // the default's cluster, its name in the tuning runs
      {"128x256", kKernel128x256, 0, 0},
      {"128x128", kKernel128x128, 0, 0},
      {"pp64x256", kKernelPp64x256, 0, 0},
      {"ppc2x1", kKernelPpC2x1, 0, 0},
      {"sk128x32", kKernelSkinny, 0, 0},
      {"swz1", -1, 1 << kSwzShift, swz},
      {"swz2", -1, 2 << kSwzShift, swz},
      {"swz4", -1, 3 << kSwzShift, swz},
      {"swz8", -1, 4 << kSwzShift, swz},
      {"rm", -1, 1 << kRasterShift, ras},
      {"rn", -1, 2 << kRasterShift, ras},
      {"pdl", -1, 0, 0}, // the default: accepted, changes nothing
      {"nopdl", -1, kKnobNoPdl, 0},
      {"xprep", -1, kKnobXprep, 0},
  };
  int kernel = -1, knobs = 0;
  for (const char *p = name; *p != 0;) {
    const char *e = strchr(p, '+');
    const size_t n = e != nullptr ? (size_t)(e - p) : strlen(p);
    size_t i = 0;
    while (i < sizeof names / sizeof names[0] && !(strlen(names[i].name) == n && strncmp(names[i].name, p, n) == 0))
      i++;
    if (i == sizeof names / sizeof names[0]) return CU_CLM_TILE_DEFAULT; // an unknown name
    if (names[i].kernel >= 0) {
      if (kernel >= 0) return CU_CLM_TILE_DEFAULT; // two kernels
      kernel = names[i].kernel;
    } else {
      knobs = (knobs & ~names[i].field) | names[i].knob; // the last swizzle or raster named wins
    }
    p += n;
    if (*p == '+') p++;
  }
#if !defined(GPURT_CLM_EXPERIMENTS)
  kernel = CU_CLM_TILE_DEFAULT; // the experiments' kernels are not built in
  knobs &= ~kKnobXprep;
#endif
  return (kernel < 0 ? CU_CLM_TILE_DEFAULT : kernel) | knobs;
}

extern "C" int cu_clm_arch_ok(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

extern "C" int cu_clm_qgemm_ok(int x_f16, int scale_f16, uint64_t m, uint64_t n, uint64_t k, uint32_t group,
                               uintptr_t w, uintptr_t x, uintptr_t y) {
  (void)x_f16;
  (void)scale_f16; // every pairing: clm_prep widens either scale type to f32
  if (group != 64 && group != 128) return 0;
  if (m == 0 || n == 0 || k == 0 || m % 8 != 0 || k % kTileK != 0 || k % group != 0) return 0;
  if (m > 0x7fffffffull || n > 0x7fffffffull || k > 0x7fffffffull) return 0;
  if ((m + 31) / 32 > 0x7fffffffull || (k / group + 31) / 32 > 65535) return 0; // clm_prep's grid
  return w % 16 == 0 && x % 16 == 0 && y % 16 == 0;
}

extern "C" size_t cu_clm_scratch_bytes(const cu_clm_qgemm *a, char *msg, size_t len) {
  try {
    if (a->group == 0) {
      say(msg, len, "%s%s", "CUTLASS mixed-input GEMM: group size 0", "");
      return 0;
    }
    return dispatch(a, [&](auto *c) { return scratch_bytes<std::remove_pointer_t<decltype(c)>>(a); });
  } catch (const std::exception &e) {
    say(msg, len, "CUTLASS workspace size: %s%s", e.what(), "");
  } catch (...) {
    say(msg, len, "CUTLASS workspace size: %s%s", "an unknown C++ exception", "");
  }
  return 0;
}

extern "C" int cu_clm_qgemm_run(const cu_clm_qgemm *a, char *msg, size_t len) {
  try {
    if (!cu_clm_qgemm_ok(a->x_f16, a->scale_f16, a->m, a->n, a->k, a->group, (uintptr_t)a->w, (uintptr_t)a->x,
                         (uintptr_t)a->y)) {
      say(msg, len, "%s%s", "CUTLASS mixed-input GEMM: a shape or alignment it cannot take", "");
      return 1;
    }
    return dispatch(a, [&](auto *c) { return run<std::remove_pointer_t<decltype(c)>>(a, msg, len); });
  } catch (const std::bad_alloc &) {
    say(msg, len, "CUTLASS mixed-input GEMM: %s%s", "out of host memory (std::bad_alloc)", "");
  } catch (const std::exception &e) {
    say(msg, len, "CUTLASS mixed-input GEMM: a C++ exception: %s%s", e.what(), "");
  } catch (...) {
    say(msg, len, "CUTLASS mixed-input GEMM: %s%s", "an unknown C++ exception", "");
  }
  return -1;
}

#else
#error "cuda_cutlass_mixed.cu needs the CUTLASS headers: scripts/build_cuda.sh compiles it with -DGPURT_HAVE_CUTLASS_MIXED"
#endif
