// liere/nn/dropout.hpp — torch.nn.Dropout. Active only when tape.training(); draws from tape.rng().
#pragma once

#include <liere/autodiff/ops.hpp>

namespace liere::nn {

template <class S>
class DropoutT {
 public:
  explicit DropoutT(double p = 0.0) : p_(p) {
    LIERE_ENSURE(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got " << p);
  }
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) const { return ops::dropout(tape, x, p_); }
  VarT<S> operator()(TapeT<S>& tape, const VarT<S>& x) const { return forward(tape, x); }
  double p() const { return p_; }

 private:
  double p_ = 0.0;
};

using Dropout = DropoutT<float>;

}  // namespace liere::nn
