// liere/backend/kernels/clip.hpp — gradient clipping's coefficient and the optimizer's gate, shared by the host
// (optim/clip.hpp, optim/adam.hpp) and the CPU and CUDA kernels, so that clipping computed where the norm is (a
// device's memory, read by no host) is the host's to the bit:
//
//   clip_coefficient(norm, max_norm, factor)  factor · min(1, max_norm / (norm + 1e-6))
//                                             (torch.nn.utils.clip_grad_norm_'s; factor alone when max_norm is ∞)
//   clip_from_sum(sumsq, max_norm)            the same with factor 1 and norm √Σg², or 1 (scale nothing) when Σg²
//                                             is NaN or ∞: the caller reads it with the loss and names the parameter
//                                             (optim::check_finite_grads), its gradients as they were
//   gate_open(loss, sumsq)                    an optimizer step gated on the step's loss and Σg² (either nullptr:
//                                             no condition) being finite: a NaN or ∞ leaves weights and moments as
//                                             they were, so a host that reads the loss after queuing the update
//                                             still stops before the update touches anything
#pragma once

#include <cmath>
#include <liere/backend/kernels/loss_scale.hpp>
#include <liere/core/config.hpp>

namespace liere::kernels {

LIERE_HOST_DEVICE inline double clip_coefficient(double norm, double max_norm, double factor) {
  const double r = max_norm / (norm + 1e-6);
  return factor * (r < 1.0 ? r : 1.0);  // std::min(1.0, r): 1 when r is NaN
}

LIERE_HOST_DEVICE inline double clip_from_sum(double sumsq, double max_norm) {
  using std::sqrt;
  return finite_bits(sumsq) ? clip_coefficient(sqrt(sumsq), max_norm, 1.0) : 1.0;
}

template <class S>
LIERE_HOST_DEVICE inline bool gate_open(const S* loss, const double* sumsq) {
  return (!loss || finite_bits(*loss)) && (!sumsq || finite_bits(*sumsq));
}

}  // namespace liere::kernels
