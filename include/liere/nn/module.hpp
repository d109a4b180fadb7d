// liere/nn/module.hpp — the parameter registry every module registers into, and ViT initialisation.
//
// A model owns one ParamsT. Each module's constructor takes the registry and its dotted name and adds its
// parameters as "<name>.<param>", so that names follow PyTorch/timm's state_dict keys
// ("blocks.3.mlp.fc1.weight", "patch_embed.proj.weight", "cls_token"): the optimizer, gradient clipping and
// checkpoints all see every parameter, in registration order, under that name.
//
//   nn::Params params;
//   Rng rng(seed);
//   nn::Linear head(params, "head", 192, 10, rng);   // registers head.weight (10, 192), head.bias (10)
//
// Initialisation (timm's VisionTransformer): Linear and patch-embedding weights truncated normal with std 0.02
// (timm's bounds [-2, 2] are absolute), biases 0, LayerNorm weight 1 and bias 0. Modules draw from the Rng
// passed to their constructor, in construction order, so a seed fixes the whole model.
#pragma once

#include <liere/autodiff/tape.hpp>
#include <liere/core/config.hpp>
#include <liere/tensor/random.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace liere::nn {

// "blocks.3" + "mlp" -> "blocks.3.mlp"; an empty prefix gives the name alone.
inline std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : name.empty() ? prefix : prefix + "." + name;
}

template <class S>
class ParamsT {
 public:
  // Creates a parameter of zeros and registers it. Names must be unique.
  ParameterT<S> add(const std::string& name, const Shape& shape) {
    ParameterT<S> p(name, shape);
    add(p);
    return p;
  }
  // Registers an existing parameter (e.g. one shared between modules is registered once).
  void add(const ParameterT<S>& p) {
    LIERE_ENSURE(!p.name().empty(), "Params::add: a parameter needs a name");
    LIERE_ENSURE(!index_.count(p.name()), "Params::add: '" << p.name() << "' is registered twice");
    index_.emplace(p.name(), list_.size());
    list_.push_back(p);
  }

  const std::vector<ParameterT<S>>& all() const { return list_; }
  auto begin() const { return list_.begin(); }
  auto end() const { return list_.end(); }
  std::size_t size() const { return list_.size(); }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const ParameterT<S>& operator[](const std::string& name) const {
    auto it = index_.find(name);
    LIERE_ENSURE(it != index_.end(), "Params: no parameter named '" << name << "'");
    return list_[it->second];
  }
  // Number of scalar parameters.
  Index numel() const {
    Index n = 0;
    for (const auto& p : list_) n += p.numel();
    return n;
  }
  void zero_grad() const { zero_grads(list_); }
  // Moves every parameter to `device` (before an optimizer is made for them: its state follows the parameters'
  // device). Parameters over storage owned elsewhere stay on the host: those of the position encodings whose
  // effective generators are made from their parameters on the host (nn/position_encoding.hpp).
  void to(Device device) const {
    for (const auto& p : list_)
      if (p.owns_storage()) p.move_to(device);
  }

 private:
  std::vector<ParameterT<S>> list_;
  std::unordered_map<std::string, std::size_t> index_;
};

using Params = ParamsT<float>;

namespace init {
inline constexpr double kVitStd = 0.02;
// timm's trunc_normal_(std=0.02): bounds are absolute values.
template <class S>
void trunc_normal(const ParameterT<S>& p, Rng& rng, double std = kVitStd, double a = -2.0, double b = 2.0) {
  fill_trunc_normal(p.value(), rng, 0.0, std, a, b);
}
template <class S>
void normal(const ParameterT<S>& p, Rng& rng, double std) {
  fill_normal(p.value(), rng, 0.0, std);
}
template <class S>
void constant(const ParameterT<S>& p, double v) {
  p.value().fill(S(v));
}
}  // namespace init

}  // namespace liere::nn
