// liere/optim/schedule.hpp — cosine learning-rate schedule with optional linear warmup (timm's
// CosineLRScheduler without restarts).
//
// Time t counts units — optimizer steps, or epochs (t = step / steps_per_epoch, integer division, so the
// rate changes once per epoch). With W warmup units and U units in total:
//   t < W:       lr = lr_init + t · (base − lr_init) / W                  (linear warmup from lr_init)
//   W ≤ t < U:   lr = min + ½ (base − min) (1 + cos(π (t − W) / (U − W)))
//   t ≥ U:       lr = min
#pragma once

#include <cmath>
#include <cstdint>
#include <liere/core/config.hpp>
#include <numbers>

namespace liere::optim {

struct CosineSchedule {
  double base_lr = 1e-3;
  double min_lr = 0.0;
  std::int64_t total = 1;        // units (steps or epochs) of the whole run, warmup included
  std::int64_t warmup = 0;       // warmup units
  double warmup_init_lr = 0.0;   // lr at t = 0 when warming up
  std::int64_t steps_per_unit = 1;  // 1: per step; steps_per_epoch: per epoch

  // The learning rate for the optimizer step with 0-based index `step`.
  double at_step(std::int64_t step) const { return at(step / steps_per_unit); }

  // The learning rate at unit t.
  double at(std::int64_t t) const {
    LIERE_ENSURE(total > 0 && warmup >= 0 && warmup <= total && steps_per_unit > 0,
                 "CosineSchedule: bad configuration total=" << total << " warmup=" << warmup
                                                            << " steps_per_unit=" << steps_per_unit);
    if (t < warmup) return warmup_init_lr + double(t) * (base_lr - warmup_init_lr) / double(warmup);
    if (t >= total) return min_lr;
    const double progress = double(t - warmup) / double(total - warmup);
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
  }
};

}  // namespace liere::optim
