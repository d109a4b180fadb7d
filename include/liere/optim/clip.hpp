// liere/optim/clip.hpp — global gradient norm, clipping by it, and the stop on non-finite values.
//
//   ‖g‖ = √(Σ_params Σ_i g_i²)  (accumulated in double, in a fixed order: thread-count independent)
//   clip_grad_norm: when ‖g‖ > max_norm, every gradient is scaled by max_norm / (‖g‖ + 1e-6)
//                   (torch.nn.utils.clip_grad_norm_); returns ‖g‖ before clipping.
// A non-finite loss or gradient throws liere::Error naming the step and the first offending parameter, so a
// diverging run stops with a clear message instead of training on NaNs.
#pragma once

#include <cmath>
#include <cstdint>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/common.hpp>
#include <vector>

namespace liere::optim {

namespace detail {
// Σ x_i² in double; chunks of 8192 summed in parallel, chunks added in order.
template <class S>
double sum_squares(const S* x, Index n) {
  constexpr Index kChunk = 8192;
  const Index nc = (n + kChunk - 1) / kChunk;
  std::vector<double> part(std::size_t(nc), 0.0);
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index c = 0; c < nc; ++c) {
    const Index e = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (Index i = c * kChunk; i < e; ++i) s += double(x[i]) * double(x[i]);
    part[std::size_t(c)] = s;
  }
  double total = 0.0;
  for (double s : part) total += s;
  return total;
}
}  // namespace detail

template <class S>
double grad_norm(const std::vector<ParameterT<S>>& params) {
  double total = 0.0;
  for (const auto& p : params) total += detail::sum_squares(p.grad().data(), p.numel());
  return std::sqrt(total);
}

// Throws naming the first parameter with a NaN or Inf gradient (if any).
template <class S>
void check_finite_grads(const std::vector<ParameterT<S>>& params, std::int64_t step = -1) {
  for (const auto& p : params)
    if (!std::isfinite(detail::sum_squares(p.grad().data(), p.numel()))) {
      const S* g = p.grad().data();
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

// Clips in place; returns the norm before clipping. Non-finite gradients throw (error_if_nonfinite).
template <class S>
double clip_grad_norm(const std::vector<ParameterT<S>>& params, double max_norm, bool error_if_nonfinite = true,
                      std::int64_t step = -1) {
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) {
    if (error_if_nonfinite) check_finite_grads(params, step);
    return norm;
  }
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const S c = S(coef);
    for (const auto& p : params) {
      S* g = p.grad().data();
      const Index n = p.numel();
#pragma omp parallel for schedule(static) if (n > kGrain)
      for (Index i = 0; i < n; ++i) g[i] *= c;
    }
  }
  return norm;
}

}  // namespace liere::optim
