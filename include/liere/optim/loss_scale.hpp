// liere/optim/loss_scale.hpp — dynamic loss scaling for fp16 training (issue 22), the host-side policy that a CPU
// or GPU trainer shares (fp16 training itself is not implemented yet: --precision fp16 stops with exit code 2).
//
// fp16's largest value is 65504 and its smallest normal 6.1e-5: small gradients underflow unless the loss is scaled
// up by s before backward, large ones overflow if s is too large. The policy (as torch.cuda.amp.GradScaler's, with
// a floor):
//   * each step, backward runs on s·L; unscale() divides every gradient by s (kernels::unscale_grad) and reports
//     whether any was ±∞ or NaN;
//   * update(overflow, step): an overflow step is skipped (no optimizer update) and s ← s · backoff; after
//     growth_interval finite steps in a row s ← min(s · growth, max_scale);
//   * an overflow storm: when s falls below floor, update() throws liere::Error naming the step, the scale, the
//     overflowing steps in a row, and suggesting --precision bf16 (fp32's range: it needs no loss scaling);
//   * counters for the metrics: skipped (overflow steps), growths; metrics() as (key, value) pairs.
// unscale_grads(params, s, max_norm) is the trainer's side on any device: one norm of the scaled gradients
// (grad_norm: one read of each device) says whether one overflowed; if none did, every gradient × 1/s, clipped to
// max_norm in the same pass (scale_grads, clip.hpp), exact while s is a power of two (the trainers require one;
// growth 2 and backoff ½ keep it one): the same bits as unscaling, then clip_grad_norm.
#pragma once

#include <cstdint>
#include <liere/backend/kernels/loss_scale.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/optim/clip.hpp>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace liere::optim {

struct LossScaleConfig {
  double init = 65536;          // 2^16, as PyTorch's GradScaler
  double growth = 2;            // s ← s · growth after growth_interval finite steps in a row
  double backoff = 0.5;         // s ← s · backoff at an overflow
  std::int64_t growth_interval = 2000;
  double floor = 1;             // below this an overflow storm stops training
  double max_scale = 16777216;  // 2^24
};

class DynamicLossScale {
 public:
  explicit DynamicLossScale(const LossScaleConfig& c = {}) : c_(c), scale_(c.init) {
    LIERE_ENSURE(c.init > 0 && c.growth > 1 && c.backoff > 0 && c.backoff < 1 && c.growth_interval >= 1 &&
                     c.floor > 0 && c.init >= c.floor && c.max_scale >= c.init,
                 "loss scale: need init ≥ floor > 0, growth > 1, 0 < backoff < 1, growth_interval ≥ 1, max_scale ≥ "
                 "init; got init "
                     << c.init << ", growth " << c.growth << ", backoff " << c.backoff << ", growth_interval "
                     << c.growth_interval << ", floor " << c.floor << ", max_scale " << c.max_scale);
  }

  double scale() const { return scale_; }

  // Unscales the n gradients in g (of the loss scaled by scale()); returns whether all of them were finite.
  bool unscale(float* g, Index n) const {
    const float inv = float(1.0 / scale_);
    bool finite = true;
    for (Index i = 0; i < n; ++i) finite &= kernels::unscale_grad(g[i], inv);
    return finite;
  }

  // After the step's gradients were checked: returns whether to apply the update (false: skip this step).
  // step: the 1-based global step, for the message.
  bool update(bool overflow, std::int64_t step) {
    if (overflow) {
      ++skipped_, ++overflow_run_;
      good_run_ = 0;
      scale_ *= c_.backoff;
      LIERE_ENSURE(scale_ >= c_.floor,
                   "fp16 loss scaling: an overflow storm at step "
                       << step << ": the gradients overflowed fp16 in " << overflow_run_
                       << " steps in a row and the loss scale fell to " << scale_ << ", below its floor " << c_.floor
                       << " (" << skipped_ << " steps skipped in all); fp16's range (65504) is too small for this "
                       << "model's gradients: train with --precision bf16, which has fp32's range and needs no loss "
                          "scaling (or fp32)");
      return false;
    }
    overflow_run_ = 0;
    if (++good_run_ >= c_.growth_interval) {
      good_run_ = 0;
      if (scale_ * c_.growth <= c_.max_scale) scale_ *= c_.growth, ++growths_;
    }
    return true;
  }

  std::int64_t skipped() const { return skipped_; }
  std::int64_t growths() const { return growths_; }
  // For a metrics row: loss_scale, skipped_steps (each one a backoff), loss_scale_growths.
  std::vector<std::pair<std::string, double>> metrics() const {
    return {{"loss_scale", scale_},
            {"skipped_steps", double(skipped_)},
            {"loss_scale_growths", double(growths_)}};
  }

 private:
  LossScaleConfig c_;
  double scale_;
  std::int64_t good_run_ = 0, overflow_run_ = 0, skipped_ = 0, growths_ = 0;
};

// The gradients of params, those of a loss scaled by `scale`, divided by it in place and clipped to max_norm (∞: not
// clipped); false (and untouched) when one of them is ±∞ or NaN: an overflow step for DynamicLossScale::update. The
// scaled norm over `scale` is the unscaled norm exactly (squares summed in double, sqrt correctly rounded).
template <class S>
bool unscale_grads(const std::vector<ParameterT<S>>& params, double scale,
                   double max_norm = std::numeric_limits<double>::infinity()) {
  const double norm = grad_norm(params);
  if (!std::isfinite(norm)) return false;
  scale_grads(params, norm / scale, max_norm, 1.0 / scale);
  return true;
}

}  // namespace liere::optim
