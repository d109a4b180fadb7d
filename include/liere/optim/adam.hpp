// liere/optim/adam.hpp — Adam and AdamW with PyTorch's update formulas, and parameter groups.
//
// With gradient g, step count t (1 after the first step), learning rate lr, weight decay λ:
//   Adam (L2, torch.optim.Adam):        g ← g + λ θ
//   AdamW (decoupled, torch.optim.AdamW): θ ← θ (1 − lr λ)
//   then, for both:
//   m ← β1 m + (1 − β1) g
//   v ← β2 v + (1 − β2) g²
//   θ ← θ − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε)
// (torch 1.13 `_single_tensor_adam(w)`: step_size = lr / bias_correction1,
//  denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps); param.addcdiv_(exp_avg, denom, -step_size).)
// The scalars (bias corrections, step size) are computed in double, the elementwise update in S.
// Defaults β1 0.9, β2 0.999, ε 1e-8. One step counter for all parameters (they all step together).
//
// Parameter groups carry their own weight decay and a learning-rate multiplier; `decay_groups` builds the
// usual two (with and without decay) from a name/shape predicate, e.g. no decay for biases, norms, tokens
// and position-encoding parameters.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/optim.hpp>
#include <liere/backend/dispatch.hpp>
#include <string>
#include <vector>

namespace liere::optim {

struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // the default for parameters not in an explicit group
  bool decoupled = true;      // true: AdamW; false: Adam with L2 regularisation
};

template <class S>
struct ParamGroupT {
  std::vector<ParameterT<S>> params;
  double weight_decay = 0.0;
  double lr_scale = 1.0;  // this group's learning rate is lr · lr_scale
  std::string name;
};

// timm's rule: no weight decay for 1-D parameters (biases, norm weights) and for tokens and position
// embeddings. `extra` adds name fragments (e.g. a position encoding's parameter names).
inline bool default_no_decay(const std::string& name, const Shape& shape, const std::vector<std::string>& extra = {}) {
  if (shape.rank() <= 1) return true;
  auto ends_with = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  if (ends_with(".bias") || ends_with("bias")) return true;
  for (const char* frag : {"cls_token", "pos_embed", "dist_token", "norm"})
    if (name.find(frag) != std::string::npos) return true;
  for (const auto& frag : extra)
    if (name.find(frag) != std::string::npos) return true;
  return false;
}

// Two groups: "decay" (weight decay wd) and "no_decay" (0), split by the predicate (true: no decay).
template <class S>
std::vector<ParamGroupT<S>> decay_groups(
    const std::vector<ParameterT<S>>& params, double wd,
    const std::function<bool(const std::string&, const Shape&)>& no_decay =
        [](const std::string& n, const Shape& s) { return default_no_decay(n, s); }) {
  ParamGroupT<S> decay{{}, wd, 1.0, "decay"}, keep{{}, 0.0, 1.0, "no_decay"};
  for (const auto& p : params) (no_decay(p.name(), p.shape()) ? keep : decay).params.push_back(p);
  return {decay, keep};
}

template <class S>
class AdamT {
 public:
  struct State {
    ParameterT<S> param;
    TensorT<S> m;  // exp_avg, same shape as the parameter
    TensorT<S> v;  // exp_avg_sq
    double weight_decay = 0.0;
    double lr_scale = 1.0;
  };

  // Every parameter in one group with cfg.weight_decay.
  AdamT(const std::vector<ParameterT<S>>& params, const AdamConfig& cfg)
      : AdamT(std::vector<ParamGroupT<S>>{{params, cfg.weight_decay, 1.0, "all"}}, cfg) {}
  AdamT(const std::vector<ParamGroupT<S>>& groups, const AdamConfig& cfg) : cfg_(cfg), lr_(cfg.lr) {
    LIERE_ENSURE(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1 && cfg.eps > 0 && cfg.lr >= 0,
                 "Adam: bad hyper-parameters lr=" << cfg.lr << " betas=(" << cfg.beta1 << ", " << cfg.beta2
                                                  << ") eps=" << cfg.eps);
    for (const auto& g : groups)
      for (const auto& p : g.params) {
        for (const auto& s : states_)
          LIERE_ENSURE(s.param.name() != p.name(), "Adam: parameter '" << p.name() << "' is in two groups");
        states_.push_back({p, TensorT<S>::zeros(p.shape(), p.device()), TensorT<S>::zeros(p.shape(), p.device()),
                           g.weight_decay, g.lr_scale});
      }
  }

  // The condition of a gated step (either tensor undefined: no condition): the update runs when the one value of
  // `loss` (the step's loss) and of `sumsq` (its Σg², optim::clip_grad_norm_into) are finite, tested where the update
  // runs, in the memory of the parameters' device (kernels/clip.hpp, gate_open). A trainer queues the update behind
  // the backward and reads the loss after it (one wait for a GPU a step, not one before the update): a NaN or ∞ leaves
  // every weight and moment as it was, and the trainer stops (the step count has moved on: set_steps(steps() − 1)
  // restores it, as examples/app/trainer.cpp does).
  struct StepGate {
    TensorT<S> loss;
    TensorT<double> sumsq;
  };

  // One update of every parameter from its current gradient; under a gate, only when the gate is open.
  void step(const StepGate& gate = {}) {
    // Every check before anything changes: a call that throws leaves the step count, weights and moments as they were.
    LIERE_ENSURE(!gate.loss.defined() || gate.loss.numel() == 1, "Adam: the gate's loss is one value, got shape "
                                                                     << gate.loss.shape());
    LIERE_ENSURE(!gate.sumsq.defined() || gate.sumsq.numel() == 1, "Adam: the gate's sum of squares is one value, got "
                                                                       "shape " << gate.sumsq.shape());
    if (gate.loss.defined() || gate.sumsq.defined())
      for (const State& s : states_) {
        const Device dev = s.param.device();
        LIERE_ENSURE((!gate.loss.defined() || gate.loss.device() == dev) &&
                         (!gate.sumsq.defined() || gate.sumsq.device() == dev),
                     "Adam: '" << s.param.name() << "' is on " << to_string(dev)
                               << ", its gate on another device (the gate is read where the update runs)");
      }
    ++step_;
    const double bc1 = 1.0 - std::pow(cfg_.beta1, double(step_));
    const double bc2_sqrt = std::sqrt(1.0 - std::pow(cfg_.beta2, double(step_)));
    kernels::AdamStep<S> a{};
    a.beta1 = S(cfg_.beta1), a.beta2 = S(cfg_.beta2);
    a.one_minus_beta1 = S(1.0 - cfg_.beta1), a.one_minus_beta2 = S(1.0 - cfg_.beta2);
    a.eps = S(cfg_.eps), a.inv_bc2_sqrt = S(1.0 / bc2_sqrt);
    a.decoupled = cfg_.decoupled;
    a.gate_loss = gate.loss.defined() ? gate.loss.data() : nullptr;
    a.gate_sumsq = gate.sumsq.defined() ? gate.sumsq.data() : nullptr;
    // One multi-tensor call per run of parameters on the same device (on a GPU a launch per 24 parameters).
    std::vector<kernels::AdamTensor<S>> ts;
    for (std::size_t i = 0; i < states_.size();) {
      const Device dev = states_[i].param.device();
      ts.clear();
      for (; i < states_.size() && states_[i].param.device() == dev; ++i) {
        const State& s = states_[i];
        const double lr = lr_ * s.lr_scale;
        a.step_size = S(lr / bc1);
        a.decay = S(1.0 - lr * s.weight_decay);  // AdamW
        a.l2 = S(s.weight_decay);                 // Adam
        a.has_weight_decay = s.weight_decay != 0.0;
        ts.push_back({s.param.data(), s.param.grad().data(), s.m.data(), s.v.data(), s.param.numel(), a});
      }
      LIERE_DISPATCH(S, dev, adam_update_many, ts.data(), int(ts.size()));
    }
  }

  void zero_grad() {
    std::vector<ParameterT<S>> ps;
    for (const auto& s : states_) ps.push_back(s.param);
    zero_grads(ps);
  }

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const AdamConfig& config() const { return cfg_; }
  std::int64_t steps() const { return step_; }
  void set_steps(std::int64_t t) { step_ = t; }
  std::vector<State>& states() { return states_; }
  const std::vector<State>& states() const { return states_; }
  const State& state(const std::string& name) const {
    for (const auto& s : states_)
      if (s.param.name() == name) return s;
    LIERE_ENSURE(false, "Adam: no parameter named '" << name << "'");
    return states_.front();
  }

 private:
  AdamConfig cfg_;
  double lr_;
  std::int64_t step_ = 0;
  std::vector<State> states_;
};

using Adam = AdamT<float>;

// AdamW = Adam with decoupled weight decay (torch.optim.AdamW's default weight decay is 1e-2).
inline AdamConfig adamw_config(double lr, double weight_decay = 1e-2) {
  AdamConfig c;
  c.lr = lr;
  c.weight_decay = weight_decay;
  c.decoupled = true;
  return c;
}
inline AdamConfig adam_config(double lr, double weight_decay = 0.0) {
  AdamConfig c;
  c.lr = lr;
  c.weight_decay = weight_decay;
  c.decoupled = false;
  return c;
}

}  // namespace liere::optim
