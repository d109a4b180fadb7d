// liere/optim/clip.hpp — global gradient norm, clipping by it, and the stop on non-finite values.
//
//   ‖g‖ = √(Σ_params Σ_i g_i²)  (accumulated in double, in a fixed order: thread-count independent)
//   clip_grad_norm: when ‖g‖ > max_norm, every gradient is scaled by max_norm / (‖g‖ + 1e-6)
//                   (torch.nn.utils.clip_grad_norm_); returns ‖g‖ before clipping.
//   clip_grad_norm_into: the same with Σg² left in device memory: no read of the device (a GPU step's one wait is
//                   for the loss).
// A non-finite loss or gradient throws liere::Error naming the step and the first offending parameter, so a
// diverging run stops with a clear message instead of training on NaNs.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/optim.hpp>
#include <liere/backend/dispatch.hpp>
#include <liere/backend/kernels/clip.hpp>
#include <vector>

namespace liere::optim {

namespace detail {
// Σ g² of a parameter's gradient in double, on its device (backend/cpu/optim.hpp: thread-count independent).
template <class S>
double grad_sum_squares(const ParameterT<S>& p) {
  const S* g = p.grad().data();
  return LIERE_DISPATCH(S, p.device(), sum_squares, g, p.numel());
}
}  // namespace detail

// One backend call per run of parameters on the same device (for_grad_runs): on a GPU one read of the device for
// all of them (one per parameter synchronised the step 151 times for ViT-Tiny). The same sums in the same order as
// adding grad_sum_squares parameter by parameter.
template <class S>
double grad_norm(const std::vector<ParameterT<S>>& params) {
  double total = 0.0;
  for_grad_runs(params, [&](Device dev, S* const* xs, const Index* ns, int count) {
    total += LIERE_DISPATCH(S, dev, sum_squares_many, xs, ns, count);
  });
  return std::sqrt(total);
}

// Throws naming the first parameter with a NaN or Inf gradient (if any).
template <class S>
void check_finite_grads(const std::vector<ParameterT<S>>& params, std::int64_t step = -1) {
  for (const auto& p : params)
    if (!std::isfinite(detail::grad_sum_squares(p))) {
      const std::vector<S> host = p.grad().to_vector();
      const S* g = host.data();
      Index bad = 0;
      while (bad < p.numel() && std::isfinite(double(g[bad]))) ++bad;
      LIERE_ENSURE(false, "non-finite gradient" << (step >= 0 ? " at step " + std::to_string(step) : std::string())
                                                << " in " << p.label()
                                                << (bad < p.numel() ? " (element " + std::to_string(bad) + " is " +
                                                                          std::to_string(double(g[bad])) + ")"
                                                                    : std::string(" (sum of squares overflows)"))
                                                << ": stopping (lower the learning rate, or clip gradients)");
    }
}

// Throws when the loss is NaN or Inf.
inline void check_finite_loss(double loss, std::int64_t step = -1) {
  LIERE_ENSURE(std::isfinite(loss), "non-finite loss " << loss
                                                       << (step >= 0 ? " at step " + std::to_string(step) : std::string())
                                                       << ": stopping (lower the learning rate, or clip gradients)");
}

// Every gradient × factor · min(1, max_norm / (norm + 1e-6)), norm the gradients' norm as clipping sees it (max_norm
// ∞: no clipping, × factor alone): one pass per run of parameters, none when the product is 1. clip_grad_norm with
// factor 1; a loss-scaled step (loss_scale.hpp) unscales and clips in the same pass.
template <class S>
void scale_grads(const std::vector<ParameterT<S>>& params, double norm, double max_norm, double factor = 1.0) {
  const double coef = kernels::clip_coefficient(norm, max_norm, factor);
  if (coef != 1.0)
    for_grad_runs(params, [&](Device dev, S* const* xs, const Index* ns, int count) {
      LIERE_DISPATCH(S, dev, scale_many, xs, ns, count, S(coef));
    });
}

// Clips in place; returns the norm before clipping. Non-finite gradients throw (error_if_nonfinite).
template <class S>
double clip_grad_norm(const std::vector<ParameterT<S>>& params, double max_norm, bool error_if_nonfinite = true,
                      std::int64_t step = -1) {
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) {
    if (error_if_nonfinite) check_finite_grads(params, step);
    return norm;
  }
  scale_grads(params, norm, max_norm);
  return norm;
}

// Clipping with no read of the device: Σg² of every gradient into sumsq (one element on the parameters' device, all
// of them on one), then every gradient × kernels::clip_from_sum(Σg², max_norm) there (max_norm ∞: the sum alone).
// The same bits as clip_grad_norm, whose norm is √sumsq. A NaN or ∞ in Σg² scales nothing and throws nothing: the
// caller reads sumsq when it reads the loss (check_finite_grads then names the parameter) and gates its optimizer
// step on it (AdamT::step's StepGate), so that one wait for the device a step is enough.
template <class S>
void clip_grad_norm_into(const std::vector<ParameterT<S>>& params, double max_norm, const TensorT<double>& sumsq) {
  LIERE_ENSURE(sumsq.defined() && sumsq.numel() == 1,
               "clip_grad_norm_into: the sum of squares is one value, got " << (sumsq.defined() ? "shape " : "none")
                                                                            << (sumsq.defined() ? sumsq.shape().str() : ""));
  LIERE_ENSURE(!params.empty(), "clip_grad_norm_into: no parameters");
  for (const auto& p : params)
    LIERE_ENSURE(p.device() == sumsq.device(), "clip_grad_norm_into: " << p.label() << " is on "
                                                                       << to_string(p.device())
                                                                       << ", the sum of squares on "
                                                                       << to_string(sumsq.device()));
  for_grad_runs(params, [&](Device dev, S* const* xs, const Index* ns, int count) {
    LIERE_DISPATCH(S, dev, sum_squares_many_into, xs, ns, count, sumsq.data());
    if (max_norm < std::numeric_limits<double>::infinity())
      LIERE_DISPATCH(S, dev, clip_scale_many, xs, ns, count, sumsq.data(), max_norm);
  });
}

}  // namespace liere::optim
