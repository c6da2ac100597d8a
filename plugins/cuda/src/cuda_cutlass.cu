// SPDX-License-Identifier: Apache-2.0
//
// The CUTLASS adapter (cuda_cutlass.h): grouped_gemm on sm_90a through
// CUTLASS 3.x's ptr-array grouped kernels with a TMA warp-specialized
// cooperative schedule (KernelPtrArrayTmaWarpSpecializedCooperative for
// bf16, KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise for e4m3
// with 1 x 128 scales of A and 128 x 128 scales of B, read in the ABI's
// own K-major layout). The headers come from the pinned flashinfer-python
// wheel (scripts/build_cuda.sh); nothing of CUTLASS is copied here.
//
// A call: one small kernel (cl_prep) writes the per-group problem shapes,
// pointers, strides and scale layouts into the stream's scratch from its
// parameters (so no host buffer is read after the call returns), then the
// GEMM runs through GemmUniversalAdapter (runtime API, static cudart, on
// the primary context the plugin made current), its workspace after the
// arrays in the same scratch. Every C++ exception stops here.
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_cutlass.h"

#if defined(GPURT_HAVE_CUTLASS)
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <exception>
#include <new>

using namespace cute;

namespace gpurt_cl {

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using Shape3 = ProblemShape::UnderlyingProblemShape;
using LayoutA = cutlass::layout::RowMajor;    // A_g: m_g x k, k contiguous
using LayoutB = cutlass::layout::ColumnMajor; // B_g: n x k, k contiguous (CUTLASS's K x N column-major)
using LayoutD = cutlass::layout::RowMajor;    // D_g: m_g x n
using Acc = float;

// One grouped GEMM configuration: element type, tile, schedules.
template <class Elem, class Tile, class KernelSched, bool Blockwise> struct Config {
  using ElementA = Elem;
  using ElementB = Elem;
  using ElementC = void;
  using ElementD = cutlass::bfloat16_t;
  static constexpr int AlignAB = 128 / cutlass::sizeof_bits<Elem>::value;
  static constexpr int AlignD = 8;
  using ClusterShape = Shape<_1, _1, _1>;
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Acc, Acc, ElementC, LayoutD *, AlignD, ElementD, LayoutD *,
      AlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ElementD, Acc, ElementC, Acc>>::CollectiveOp;

  using GmemA = cute::conditional_t<Blockwise, cute::tuple<LayoutA *, LayoutSFA *>, LayoutA *>;
  using GmemB = cute::conditional_t<Blockwise, cute::tuple<LayoutB *, LayoutSFB *>, LayoutB *>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, GmemA, AlignAB, ElementB, GmemB, AlignAB, Acc,
      Tile, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSched>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Gemm::GemmKernel::InternalStrideA;
  using StrideB = typename Gemm::GemmKernel::InternalStrideB;
  using StrideC = typename Gemm::GemmKernel::InternalStrideC;
  using StrideD = typename Gemm::GemmKernel::InternalStrideD;
};

using Bf16 = Config<cutlass::bfloat16_t, Shape<_128, _256, _64>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                    false>;
using Fp8 = Config<cutlass::float_e4m3_t, Shape<_128, _128, _128>,
                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise, true>;

// The per-group arrays in the scratch, each 16-byte aligned, then the
// CUTLASS workspace (256-byte aligned).
template <class C> struct Arrays {
  Shape3 *shape;
  const typename C::ElementA **pa;
  const typename C::ElementB **pb;
  typename C::ElementD **pd;
  typename C::StrideA *sa;
  typename C::StrideB *sb;
  typename C::StrideC *sc;
  typename C::StrideD *sd;
  const float **psfa, **psfb;
  typename C::LayoutSFA *lsfa;
  typename C::LayoutSFB *lsfb;
  void *workspace;
  size_t end; // bytes before the workspace

  Arrays() = default;
  Arrays(void *base, uint32_t count) {
    char *p = static_cast<char *>(base);
    size_t off = 0;
    auto take = [&](size_t bytes) {
      void *r = p ? p + off : nullptr;
      off += (bytes + 15) & ~size_t(15);
      return r;
    };
    shape = static_cast<Shape3 *>(take(sizeof(Shape3) * count));
    pa = static_cast<const typename C::ElementA **>(take(sizeof(void *) * count));
    pb = static_cast<const typename C::ElementB **>(take(sizeof(void *) * count));
    pd = static_cast<typename C::ElementD **>(take(sizeof(void *) * count));
    sa = static_cast<typename C::StrideA *>(take(sizeof(typename C::StrideA) * count));
    sb = static_cast<typename C::StrideB *>(take(sizeof(typename C::StrideB) * count));
    sc = static_cast<typename C::StrideC *>(take(sizeof(typename C::StrideC) * count));
    sd = static_cast<typename C::StrideD *>(take(sizeof(typename C::StrideD) * count));
    psfa = static_cast<const float **>(take(sizeof(void *) * count));
    psfb = static_cast<const float **>(take(sizeof(void *) * count));
    lsfa = static_cast<typename C::LayoutSFA *>(take(sizeof(typename C::LayoutSFA) * count));
    lsfb = static_cast<typename C::LayoutSFB *>(take(sizeof(typename C::LayoutSFB) * count));
    off = (off + 255) & ~size_t(255);
    end = off;
    workspace = p ? p + off : nullptr;
  }
};

// Entries per cl_prep launch (its parameters stay under 4 KB).
constexpr int kPrep = 256;

template <class C> struct PrepParams {
  Arrays<C> ar;
  const char *a, *b;
  char *d;
  const float *sfa, *sfb;
  uint32_t n, k, first, count;
  uint32_t group[kPrep], row0[kPrep], m[kPrep];
};

template <class C> __global__ void cl_prep(const PrepParams<C> p) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= p.count) return;
  const uint32_t e = p.first + i, g = p.group[i], r0 = p.row0[i];
  const int m = (int)p.m[i], n = (int)p.n, k = (int)p.k;
  constexpr size_t ea = sizeof(typename C::ElementA), ed = sizeof(typename C::ElementD);
  p.ar.shape[e] = Shape3{m, n, k};
  p.ar.pa[e] = reinterpret_cast<const typename C::ElementA *>(p.a + (size_t)r0 * k * ea);
  p.ar.pb[e] = reinterpret_cast<const typename C::ElementB *>(p.b + (size_t)g * n * k * ea);
  p.ar.pd[e] = reinterpret_cast<typename C::ElementD *>(p.d + (size_t)r0 * n * ed);
  p.ar.sa[e] = cutlass::make_cute_packed_stride(typename C::StrideA{}, cute::make_shape(m, k, 1));
  p.ar.sb[e] = cutlass::make_cute_packed_stride(typename C::StrideB{}, cute::make_shape(n, k, 1));
  p.ar.sc[e] = cutlass::make_cute_packed_stride(typename C::StrideC{}, cute::make_shape(m, n, 1));
  p.ar.sd[e] = cutlass::make_cute_packed_stride(typename C::StrideD{}, cute::make_shape(m, n, 1));
  if (p.sfa != nullptr) {
    const uint32_t kb = p.k / 128, nb = (p.n + 127) / 128;
    p.ar.psfa[e] = p.sfa + (size_t)r0 * kb;
    p.ar.psfb[e] = p.sfb + (size_t)g * nb * kb;
    p.ar.lsfa[e] = C::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, k, 1));
    p.ar.lsfb[e] = C::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));
  }
}

template <class C> typename C::Gemm::Arguments make_args(const Arrays<C> &ar, uint32_t count, int sm_count) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sm_count;
  hw.max_active_clusters = sm_count; // 1 x 1 clusters, one CTA per SM (the kernel takes the shared memory)
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{(int32_t)count, ar.shape, nullptr};
  if constexpr (std::is_same_v<C, Fp8>) {
    args.mainloop = {ar.pa, ar.sa, ar.pb, ar.sb, ar.psfa, ar.lsfa, ar.psfb, ar.lsfb};
  } else {
    args.mainloop = {ar.pa, ar.sa, ar.pb, ar.sb};
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = ar.sc;
  args.epilogue.ptr_D = ar.pd;
  args.epilogue.dD = ar.sd;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.hw_info = hw;
  return args;
}

void say(char *msg, size_t len, const char *fmt, const char *a, const char *b) {
  if (msg != nullptr && len > 0) snprintf(msg, len, fmt, a, b);
}

template <class C> size_t scratch_bytes(uint32_t count, int sm_count) {
  Arrays<C> ar(nullptr, count);
  auto args = make_args<C>(ar, count, sm_count);
  return ar.end + C::Gemm::get_workspace_size(args);
}

template <class C> int run(const cu_cl_grouped *a, char *msg, size_t len) {
  Arrays<C> ar(a->scratch, a->count);
  cudaStream_t st = static_cast<cudaStream_t>(a->stream);
  auto args = make_args<C>(ar, a->count, a->sm_count);
  const size_t ws = C::Gemm::get_workspace_size(args);
  if (ar.end + ws > a->scratch_bytes) {
    say(msg, len, "the scratch is smaller than the %s%s needs", "CUTLASS grouped GEMM", "");
    return -1;
  }
  typename C::Gemm gemm;
  cutlass::Status s = gemm.can_implement(args);
  if (s != cutlass::Status::kSuccess) {
    say(msg, len, "CUTLASS cannot run this grouped GEMM: %s%s", cutlassGetStatusString(s), "");
    return 1; // nothing enqueued: the caller runs its own kernel
  }
  // Parameters: the arrays' contents, chunk by chunk, in stream order.
  static_assert(sizeof(PrepParams<C>) <= 4096, "cl_prep's parameters exceed 4 KB");
  PrepParams<C> p;
  p.ar = ar;
  p.a = static_cast<const char *>(a->a);
  p.b = static_cast<const char *>(a->b);
  p.d = static_cast<char *>(a->d);
  p.sfa = a->fp8 ? a->sa : nullptr;
  p.sfb = a->fp8 ? a->sb : nullptr;
  p.n = a->n;
  p.k = a->k;
  for (uint32_t first = 0; first < a->count; first += kPrep) {
    const uint32_t cnt = a->count - first < (uint32_t)kPrep ? a->count - first : (uint32_t)kPrep;
    p.first = first;
    p.count = cnt;
    memcpy(p.group, a->group + first, cnt * sizeof(uint32_t));
    memcpy(p.row0, a->row0 + first, cnt * sizeof(uint32_t));
    memcpy(p.m, a->m + first, cnt * sizeof(uint32_t));
    cl_prep<C><<<(cnt + 127) / 128, 128, 0, st>>>(p);
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess) {
      say(msg, len, "launching the CUTLASS argument kernel: %s (%s)", cudaGetErrorString(ce), cudaGetErrorName(ce));
      return (int)ce;
    }
  }
  s = gemm.initialize(args, ar.workspace, st);
  if (s != cutlass::Status::kSuccess) {
    cudaError_t ce = cudaGetLastError();
    say(msg, len, "CUTLASS initialize: %s (%s)", cutlassGetStatusString(s), cudaGetErrorString(ce));
    return ce != cudaSuccess ? (int)ce : -1;
  }
  s = gemm.run(st);
  cudaError_t ce = cudaGetLastError();
  if (s != cutlass::Status::kSuccess || ce != cudaSuccess) {
    say(msg, len, "CUTLASS run: %s (%s)", cutlassGetStatusString(s), cudaGetErrorString(ce));
    return ce != cudaSuccess ? (int)ce : -1;
  }
  return 0;
}

} // namespace gpurt_cl

using namespace gpurt_cl;

extern "C" int cu_cl_arch_ok(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

extern "C" int cu_cl_grouped_ok(int fp8, uint64_t n, uint64_t k, uintptr_t d) {
  if (n % 8 != 0 || d % 16 != 0) return 0;
  if (n > 0x7fffffffull || k > 0x7fffffffull) return 0;
  return fp8 ? k % 128 == 0 : k % 8 == 0;
}

extern "C" size_t cu_cl_scratch_bytes(int fp8, uint32_t count, int sm_count, char *msg, size_t len) {
  try {
    return fp8 ? scratch_bytes<Fp8>(count, sm_count) : scratch_bytes<Bf16>(count, sm_count);
  } catch (const std::exception &e) {
    say(msg, len, "CUTLASS workspace size: %s%s", e.what(), "");
  } catch (...) {
    say(msg, len, "CUTLASS workspace size: %s%s", "an unknown C++ exception", "");
  }
  return 0;
}

extern "C" int cu_cl_grouped_run(const cu_cl_grouped *a, char *msg, size_t len) {
  try {
    if (a->count == 0) return 0;
    if (a->count > CU_CL_MAX_GROUPS) {
      say(msg, len, "%s%s", "more groups than CU_CL_MAX_GROUPS", "");
      return -1;
    }
    return a->fp8 ? run<Fp8>(a, msg, len) : run<Bf16>(a, msg, len);
  } catch (const std::bad_alloc &) {
    say(msg, len, "CUTLASS grouped GEMM: %s%s", "out of host memory (std::bad_alloc)", "");
  } catch (const std::exception &e) {
    say(msg, len, "CUTLASS grouped GEMM: a C++ exception: %s%s", e.what(), "");
  } catch (...) {
    say(msg, len, "CUTLASS grouped GEMM: %s%s", "an unknown C++ exception", "");
  }
  return -1;
}

#else
#error "cuda_cutlass.cu needs the CUTLASS headers: scripts/build_cuda.sh compiles it with -DGPURT_HAVE_CUTLASS"
#endif
