// liere/backend/kernels/cross_entropy.hpp — one row of the fused softmax cross-entropy and its gradient, shared
// by the CPU and the CUDA kernels (backend/cpu/cross_entropy.hpp has the maths).
//
//   cross_entropy_row_forward   p = softmax(z) into probs; returns ℓ = lse(z) − (1 − ε) z_y − (ε/K) Σ_k z_k (a row as
//                               one of Lanes lanes: the CPU one, the GPU a warp)
//   cross_entropy_row_backward  dz += c · (p − q), q = (1 − ε)·onehot(y) + ε/K, c = dL/B (cross_entropy_grad_entry
//                               per entry: the GPU's thread per entry)
#pragma once

#include <cmath>
#include <limits>
#include <liere/backend/kernels/lanes.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::kernels {

// The argument checks of the cross-entropy, one definition: the engine op (for every device, with the labels) and
// the CPU kernel (also called directly) make them.
inline void check_cross_entropy(Index K, double smoothing) {
  LIERE_ENSURE(K > 0, "cross_entropy: no classes");
  LIERE_ENSURE(smoothing >= 0 && smoothing < 1, "cross_entropy: label smoothing must be in [0, 1), got " << smoothing);
}

// The forward as lane `lane` of Lanes (kernels/lanes.hpp): the lane's classes k ≡ lane mod Lanes, the row's maximum
// and sums over the lanes by `max_all` and `sum_all`. The CPU: Lanes = 1 (the classes in order); the CUDA kernel: a
// warp per row (its sums add the same terms in another order: equal to float rounding). Every lane returns ℓ.
template <int Lanes = 1, class S, class Max = OneLane, class Sum = OneLane>
LIERE_HOST_DEVICE inline S cross_entropy_row_forward(const S* z, int label, S eps_k, S one_minus_eps, S* p, Index K,
                                                     int lane = 0, Max max_all = {}, Sum sum_all = {}) {
  using std::exp;
  using std::log;
  S m = -std::numeric_limits<S>::infinity();
  for (Index k = lane; k < K; k += Lanes) m = z[k] > m ? z[k] : m;
  m = max_all(m);
  S s = S(0), zsum = S(0);
  for (Index k = lane; k < K; k += Lanes) {
    p[k] = exp(z[k] - m);
    s += p[k];
    zsum += z[k];
  }
  s = sum_all(s);
  zsum = sum_all(zsum);
  const S inv_s = S(1) / s;
  for (Index k = lane; k < K; k += Lanes) p[k] *= inv_s;
  const S lse = m + log(s);
  return lse - one_minus_eps * z[label] - eps_k * zsum;
}

// One entry of the gradient, dz_k += c · (p_k − q_k): the row below on the CPU, a thread per entry on the GPU.
template <class S>
LIERE_HOST_DEVICE inline void cross_entropy_grad_entry(S p, bool is_label, S eps_k, S one_minus_eps, S c, S& d) {
  d += c * (p - eps_k);
  if (is_label) d -= c * one_minus_eps;
}

template <class S>
LIERE_HOST_DEVICE inline void cross_entropy_row_backward(const S* p, int label, S eps_k, S one_minus_eps, S c, S* d,
                                                         Index K) {
  for (Index k = 0; k < K; ++k) cross_entropy_grad_entry(p[k], k == label, eps_k, one_minus_eps, c, d[k]);
}

}  // namespace liere::kernels
