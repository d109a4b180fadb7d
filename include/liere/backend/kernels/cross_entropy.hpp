// liere/backend/kernels/cross_entropy.hpp — one row of the fused softmax cross-entropy and its gradient, shared
// by the CPU and the CUDA kernels (backend/cpu/cross_entropy.hpp has the maths).
//
//   cross_entropy_row_forward   p = softmax(z) into probs; returns ℓ = lse(z) − (1 − ε) z_y − (ε/K) Σ_k z_k
//   cross_entropy_row_backward  dz += c · (p − q), q = (1 − ε)·onehot(y) + ε/K, c = dL/B
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::kernels {

// The argument checks of the cross-entropy, one definition: the engine op (for every device, with the labels) and
// the CPU kernel (also called directly) make them.
inline void check_cross_entropy(Index K, double smoothing) {
  LIERE_ENSURE(K > 0, "cross_entropy: no classes");
  LIERE_ENSURE(smoothing >= 0 && smoothing < 1, "cross_entropy: label smoothing must be in [0, 1), got " << smoothing);
}

template <class S>
LIERE_HOST_DEVICE inline S cross_entropy_row_forward(const S* z, int label, S eps_k, S one_minus_eps, S* p, Index K) {
  using std::exp;
  using std::log;
  S m = z[0];
  for (Index k = 1; k < K; ++k)
    if (z[k] > m) m = z[k];
  S s = S(0), zsum = S(0);
  for (Index k = 0; k < K; ++k) {
    p[k] = exp(z[k] - m);
    s += p[k];
    zsum += z[k];
  }
  const S inv_s = S(1) / s;
  for (Index k = 0; k < K; ++k) p[k] *= inv_s;
  const S lse = m + log(s);
  return lse - one_minus_eps * z[label] - eps_k * zsum;
}

template <class S>
LIERE_HOST_DEVICE inline void cross_entropy_row_backward(const S* p, int label, S eps_k, S one_minus_eps, S c, S* d,
                                                         Index K) {
  for (Index k = 0; k < K; ++k) d[k] += c * (p[k] - eps_k);
  d[label] -= c * one_minus_eps;
}

}  // namespace liere::kernels
