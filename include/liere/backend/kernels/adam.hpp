// liere/backend/kernels/adam.hpp — one element of an Adam/AdamW update (PyTorch 1.13's formulas), shared by the
// CPU and the CUDA kernels.
//
//   Adam (L2):          g ← g + λ θ                   AdamW (decoupled):  θ ← θ (1 − lr λ)
//   m ← β1 m + (1 − β1) g,   v ← β2 v + (1 − β2) g²,   θ ← θ − step_size · m / (√v · inv_bc2_sqrt + ε)
// with step_size = lr / (1 − β1^t) and inv_bc2_sqrt = 1/√(1 − β2^t), computed once per step in double. A closed
// gate (AdamStep's gate_loss, gate_sumsq) skips every element: the multi-tensor kernels test it once per tensor.
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::kernels {

template <class S>
struct AdamStep {
  S beta1, beta2, one_minus_beta1, one_minus_beta2, eps, inv_bc2_sqrt;
  S step_size;  // lr / (1 − β1^t) for this parameter group
  S decay;      // 1 − lr λ (AdamW)
  S l2;         // λ (Adam)
  bool decoupled, has_weight_decay;
  // The gate (optim::AdamT::step's StepGate; nullptr: none): the update runs only when *gate_loss and *gate_sumsq
  // are finite (kernels/clip.hpp, gate_open), read where the update runs, so that no host waits for them.
  const S* gate_loss;
  const double* gate_sumsq;
};

// One parameter's update (the multi-tensor form: cpu/cuda adam_update_many).
template <class S>
struct AdamTensor {
  S* theta;
  const S* g;
  S* m;
  S* v;
  Index n;
  AdamStep<S> step;
};

template <class S>
LIERE_HOST_DEVICE inline void adam_update(S& theta, S g, S& m, S& v, const AdamStep<S>& a) {
  using std::sqrt;
  if (a.has_weight_decay) {
    if (a.decoupled) theta *= a.decay;
    else g += a.l2 * theta;
  }
  m = a.beta1 * m + a.one_minus_beta1 * g;
  v = a.beta2 * v + a.one_minus_beta2 * g * g;
  const S denom = sqrt(v) * a.inv_bc2_sqrt + a.eps;
  theta -= a.step_size * m / denom;
}

}  // namespace liere::kernels
