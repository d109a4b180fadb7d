// liere/backend/kernels/lanes.hpp — how a shared row body runs as one of several lanes (backend/kernels/ bodies with
// a `Lanes` template parameter: LayerNorm's rows, the softmax rows).
//
// A row of n values is shared by Lanes lanes: lane l takes the columns l, l + Lanes, … and the body combines its
// partial sums (or maxima) over the lanes with a functor that gives every lane the total. The CPU runs Lanes = 1
// with OneLane (the identity: one thread per row, its stride-1 loops as before); the CUDA kernels run a warp per
// row, Lanes = 32, with the warp's xor-shuffle reductions (backend/cuda/common.cuh: WarpSum, WarpMax). The tests
// run the Lanes = 32 bodies on the CPU too, the lanes one after another with a functor that follows the shuffles.
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <type_traits>

namespace liere::kernels {

// c + a·b with one rounding where the machine has a fused multiply-add (every GPU; a CPU built with FMA), else two.
// For sums that must give the same bits in two loop forms: left as `c += a * b`, the compiler fuses or not by the
// loop's shape (GCC's vectorised and scalar loops differed in the last bit of LayerNorm's dγ under -march=native).
template <class S>
LIERE_HOST_DEVICE inline S madd(S a, S b, S c) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_floating_point_v<S>) return fma(a, b, c);
#else
  if constexpr (std::is_same_v<S, float>) {
#ifdef FP_FAST_FMAF
    return std::fma(a, b, c);
#endif
  } else if constexpr (std::is_same_v<S, double>) {
#ifdef FP_FAST_FMA
    return std::fma(a, b, c);
#endif
  }
#endif
  return c + a * b;
}

// Lanes = 1: the lane's value is the row's.
struct OneLane {
  template <class A>
  LIERE_HOST_DEVICE A operator()(A v) const {
    return v;
  }
};

}  // namespace liere::kernels
