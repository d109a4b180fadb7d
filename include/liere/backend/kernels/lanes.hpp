// liere/backend/kernels/lanes.hpp — how a shared row body runs as one of several lanes (backend/kernels/ bodies with
// a `Lanes` template parameter: LayerNorm's rows, the softmax rows).
//
// A row of n values is shared by Lanes lanes: lane l takes the columns l, l + Lanes, … and the body combines its
// partial sums (or maxima) over the lanes with a functor that gives every lane the total. The CPU runs Lanes = 1
// with OneLane (the identity: one thread per row, its stride-1 loops as before); the CUDA kernels run a warp per
// row, Lanes = 32, with the warp's xor-shuffle reductions (backend/cuda/common.cuh: WarpSum, WarpMax). The tests
// run the Lanes = 32 bodies on the CPU too, the lanes one after another with a functor that follows the shuffles.
#pragma once

#include <liere/core/config.hpp>

namespace liere::kernels {

// Lanes = 1: the lane's value is the row's.
struct OneLane {
  template <class A>
  LIERE_HOST_DEVICE A operator()(A v) const {
    return v;
  }
};

}  // namespace liere::kernels
