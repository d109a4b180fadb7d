// liere/nn/mlp.hpp — timm's Mlp: Linear → GELU → Dropout → Linear → Dropout.
// Parameters <name>.fc1.{weight,bias} (hidden, in) and <name>.fc2.{weight,bias} (out, hidden).
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/dropout.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/module.hpp>

namespace liere::nn {

template <class S>
class MlpT {
 public:
  MlpT() = default;
  MlpT(ParamsT<S>& params, const std::string& name, Index in, Index hidden, Index out, Rng& rng, double drop = 0.0)
      : fc1_(params, join(name, "fc1"), in, hidden, rng), drop_(drop), fc2_(params, join(name, "fc2"), hidden, out, rng) {}

  // x (..., in) → (..., out)
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) const {
    VarT<S> h = fc1_(tape, x);
    h = ops::gelu(tape, h);
    h = drop_(tape, h);
    h = fc2_(tape, h);
    return drop_(tape, h);
  }
  VarT<S> operator()(TapeT<S>& tape, const VarT<S>& x) const { return forward(tape, x); }

  const LinearT<S>& fc1() const { return fc1_; }
  const LinearT<S>& fc2() const { return fc2_; }

 private:
  LinearT<S> fc1_;
  DropoutT<S> drop_;
  LinearT<S> fc2_;
};

using Mlp = MlpT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class MlpT<float>;
extern template class MlpT<double>;
#endif

}  // namespace liere::nn
