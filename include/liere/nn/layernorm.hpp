// liere/nn/layernorm.hpp — torch.nn.LayerNorm over the last dimension, with an affine γ, β.
// eps defaults to PyTorch's 1e-5 (timm's ViT passes 1e-6: give it explicitly to match a timm checkpoint).
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>

namespace liere::nn {

template <class S>
class LayerNormT {
 public:
  LayerNormT() = default;
  // Registers <name>.weight (dim) = 1 and <name>.bias (dim) = 0.
  LayerNormT(ParamsT<S>& params, const std::string& name, Index dim, double eps = kernels::kLayerNormEps)
      : dim_(dim), eps_(eps) {
    LIERE_ENSURE(dim > 0, "LayerNorm " << name << ": dim must be positive, got " << dim);
    weight_ = params.add(join(name, "weight"), Shape{dim});
    init::constant(weight_, 1.0);
    bias_ = params.add(join(name, "bias"), Shape{dim});
  }

  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) const { return ops::layernorm(tape, x, weight_, bias_, eps_); }
  VarT<S> operator()(TapeT<S>& tape, const VarT<S>& x) const { return forward(tape, x); }

  const ParameterT<S>& weight() const { return weight_; }
  const ParameterT<S>& bias() const { return bias_; }
  Index dim() const { return dim_; }
  double eps() const { return eps_; }

 private:
  ParameterT<S> weight_, bias_;
  Index dim_ = 0;
  double eps_ = kernels::kLayerNormEps;
};

using LayerNorm = LayerNormT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class LayerNormT<float>;
extern template class LayerNormT<double>;
#endif

}  // namespace liere::nn
