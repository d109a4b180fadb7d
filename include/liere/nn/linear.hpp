// liere/nn/linear.hpp — torch.nn.Linear: y = x Wᵀ + b, W (out, in), b (out).
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>

namespace liere::nn {

template <class S>
class LinearT {
 public:
  LinearT() = default;
  // Registers <name>.weight (out, in) ~ trunc normal(0.02) and <name>.bias (out) = 0.
  LinearT(ParamsT<S>& params, const std::string& name, Index in, Index out, Rng& rng, bool bias = true)
      : in_(in), out_(out) {
    LIERE_ENSURE(in > 0 && out > 0, "Linear " << name << ": sizes must be positive, got in=" << in << " out=" << out);
    weight_ = params.add(join(name, "weight"), Shape{out, in});
    init::trunc_normal(weight_, rng);
    if (bias) bias_ = params.add(join(name, "bias"), Shape{out});
  }

  // x (..., in) → (..., out)
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) const { return ops::linear(tape, x, weight_, bias_); }
  VarT<S> operator()(TapeT<S>& tape, const VarT<S>& x) const { return forward(tape, x); }

  const ParameterT<S>& weight() const { return weight_; }
  const ParameterT<S>& bias() const { return bias_; }  // undefined without bias
  Index in_features() const { return in_; }
  Index out_features() const { return out_; }

 private:
  ParameterT<S> weight_, bias_;
  Index in_ = 0, out_ = 0;
};

using Linear = LinearT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class LinearT<float>;
extern template class LinearT<double>;
#endif

}  // namespace liere::nn
