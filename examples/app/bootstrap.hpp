// examples/app/bootstrap.hpp — confidence intervals for a test accuracy and a paired test between two
// classifiers evaluated on the same examples, by the bootstrap (resampling the test examples).
//
// Inputs are per-example outcomes: correct[i] = 1 when example i was classified correctly, else 0.
//
// bootstrap_ci: percentile bootstrap. B times, draw n examples with replacement and take the accuracy
//   acc*_b; the interval is the (1-level)/2 and (1+level)/2 quantiles of {acc*_b} (linear interpolation
//   between order statistics, numpy's default "linear" / Hyndman–Fan type 7). `mean` is the observed
//   accuracy, not the mean of the resamples.
//
// paired_bootstrap: B times, draw n example *indices* with replacement and evaluate both classifiers on
//   the same draw: d*_b = acc*_a - acc*_b. The interval for diff = acc_a - acc_b is the percentile interval
//   of {d*_b} as above. The two-sided p-value for H0: acc_a == acc_b inverts that interval — it is the
//   smallest 1 - level at which the percentile interval would exclude 0:
//       p = min(1, 2 (1 + min(#{b : d*_b <= 0}, #{b : d*_b >= 0})) / (B + 1))
//   i.e. the fraction of resampled differences on the other side of 0 (ties at 0 count against rejecting),
//   doubled, with the +1 correction so that p is never 0 (the smallest reachable value is 2 / (B + 1)).
//   When diff == 0 exactly, p = 1. When no resample falls on the other side of 0, p = 2 / (B + 1) is that floor,
//   not an estimate: all the resamples say is p ≤ 2 / (B + 1) (`p_bound`; p_text writes "p ≤ …").
//
// Only counts matter (accuracy is a mean of 0/1 values), so a resample is computed by drawing n uniform indices into
// the examples ordered by outcome — right before wrong; for pairs (1,0), (0,1), then (1,1) and (0,0) — and counting how
// many fall into each group. That is the same distribution as resampling the examples themselves, without touching
// memory. Draws come from liere::Rng (std::mt19937_64, whose sequence the standard fixes) and its unbiased Rng::below
// (core/rng.hpp), so a seed gives the same result with every standard library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace liere::train {

// Accuracy with a percentile-bootstrap interval at the requested level.
struct BootstrapCI {
  double mean = 0;  // observed accuracy
  double lo = 0;    // lower end of the interval
  double hi = 0;    // upper end of the interval
};

// Two classifiers on the same examples: both accuracies, their difference a - b with its interval and the
// two-sided paired bootstrap p-value for equal accuracy.
struct PairedBootstrap {
  double acc_a = 0;
  double acc_b = 0;
  double diff = 0;  // acc_a - acc_b
  double diff_lo = 0;
  double diff_hi = 0;
  double p_value = 1;
  bool p_bound = false;  // no resample on the other side of 0: p_value is the floor 2 / (B + 1), an upper bound
};

// Percentile bootstrap interval of the accuracy mean(correct). Deterministic for a seed.
BootstrapCI bootstrap_ci(const std::vector<std::uint8_t>& correct, int resamples = 1000, double level = 0.95,
                         std::uint64_t seed = 0);

// Paired bootstrap of two classifiers' outcomes on the same n examples (a[i], b[i] for example i); see the
// file comment for the estimator. Sizes must match. Deterministic for a seed.
PairedBootstrap paired_bootstrap(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                 int resamples = 10000, double level = 0.95, std::uint64_t seed = 0);

// The p-value as text: "0.0123" (3 significant digits), or "≤ 0.0002" when it is the floor (p_bound), rounded up to
// 2 significant digits so that the printed bound still holds. Callers write "p = 0.0123" and "p ≤ 0.0002".
std::string p_value_text(const PairedBootstrap& r);

}  // namespace liere::train
