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

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class DropoutT<float>;
extern template class DropoutT<double>;
#endif

}  // namespace liere::nn
