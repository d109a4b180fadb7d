// liere/train/bootstrap.hpp — confidence intervals for a test accuracy and a paired test between two
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
//   When diff == 0 exactly, p = 1.
//
// Only counts matter (accuracy is a mean of 0/1 values), so a resample is computed by drawing n uniform
// indices into the examples ordered by outcome — (1,1), (1,0), (0,1), (0,0) for pairs — and counting how
// many fall into each group. That is the same distribution as resampling the examples themselves, without
// touching memory. Draws come from liere::Rng (std::mt19937_64, whose sequence the standard fixes) and its
// unbiased Rng::below (core/rng.hpp), so a seed gives the same result with every standard library.
#pragma once

#include <liere/config.hpp>
#include <liere/core/rng.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
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
};

namespace detail {

// The q-quantile (0 <= q <= 1) of sorted values, linear interpolation between order statistics (type 7).
inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  const double h = (double(sorted.size()) - 1) * q;
  const auto i = std::size_t(std::floor(h));
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - double(i)) * (sorted[i + 1] - sorted[i]);
}

inline void check_outcomes(const std::vector<std::uint8_t>& correct, const char* what, const char* name) {
  LIERE_ENSURE(!correct.empty(), what << ": '" << name << "' is empty (no examples)");
  for (std::size_t i = 0; i < correct.size(); ++i)
    LIERE_ENSURE(correct[i] <= 1, what << ": '" << name << "'[" << i << "] = " << int(correct[i])
                                       << ", expected 0 (wrong) or 1 (right)");
}

inline void check_bootstrap_args(int resamples, double level, const char* what) {
  LIERE_ENSURE(resamples >= 1, what << ": resamples must be at least 1, got " << resamples);
  LIERE_ENSURE(level > 0 && level < 1, what << ": level must be in (0, 1), got " << level);
}

}  // namespace detail

// Percentile bootstrap interval of the accuracy mean(correct). Deterministic for a seed.
inline BootstrapCI bootstrap_ci(const std::vector<std::uint8_t>& correct, int resamples = 1000, double level = 0.95,
                                std::uint64_t seed = 0) {
  detail::check_outcomes(correct, "bootstrap_ci", "correct");
  detail::check_bootstrap_args(resamples, level, "bootstrap_ci");
  const std::uint64_t n = correct.size();
  std::uint64_t k = 0;  // examples classified correctly
  for (auto c : correct) k += c;

  Rng rng(seed);
  std::vector<double> acc(static_cast<std::size_t>(resamples));
  for (auto& a : acc) {
    std::uint64_t hits = 0;
    for (std::uint64_t j = 0; j < n; ++j) hits += rng.below(n) < k;
    a = double(hits) / double(n);
  }
  std::sort(acc.begin(), acc.end());
  const double alpha = 1 - level;
  return {double(k) / double(n), detail::quantile_sorted(acc, alpha / 2), detail::quantile_sorted(acc, 1 - alpha / 2)};
}

// Paired bootstrap of two classifiers' outcomes on the same n examples (a[i], b[i] for example i); see the
// file comment for the estimator. Sizes must match. Deterministic for a seed.
inline PairedBootstrap paired_bootstrap(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                                        int resamples = 10000, double level = 0.95, std::uint64_t seed = 0) {
  LIERE_ENSURE(a.size() == b.size(), "paired_bootstrap: the two classifiers have outcomes for "
                                         << a.size() << " and " << b.size()
                                         << " examples; a paired test needs the same examples in the same order");
  detail::check_outcomes(a, "paired_bootstrap", "a");
  detail::check_outcomes(b, "paired_bootstrap", "b");
  detail::check_bootstrap_args(resamples, level, "paired_bootstrap");
  const std::uint64_t n = a.size();
  // Examples ordered by outcome: [0, n10) a right b wrong, [n10, n10 + n01) a wrong b right, the rest
  // (both right or both wrong) add nothing to the difference.
  std::uint64_t n11 = 0, n10 = 0, n01 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    n11 += a[i] & b[i];
    n10 += a[i] & (1 - b[i]);
    n01 += (1 - a[i]) & b[i];
  }
  const std::uint64_t split = n10, end = n10 + n01;

  Rng rng(seed);
  std::vector<double> diff(static_cast<std::size_t>(resamples));
  std::int64_t at_or_below = 0, at_or_above = 0;  // resampled differences <= 0 and >= 0
  for (auto& d : diff) {
    std::int64_t delta = 0;  // (a right, b wrong) - (a wrong, b right) in this resample
    for (std::uint64_t j = 0; j < n; ++j) {
      const std::uint64_t u = rng.below(n);
      delta += std::int64_t(u < split) - std::int64_t(u >= split && u < end);
    }
    at_or_below += delta <= 0;
    at_or_above += delta >= 0;
    d = double(delta) / double(n);
  }
  std::sort(diff.begin(), diff.end());
  const double alpha = 1 - level;

  PairedBootstrap r;
  r.acc_a = double(n11 + n10) / double(n);
  r.acc_b = double(n11 + n01) / double(n);
  r.diff = (double(n10) - double(n01)) / double(n);
  r.diff_lo = detail::quantile_sorted(diff, alpha / 2);
  r.diff_hi = detail::quantile_sorted(diff, 1 - alpha / 2);
  r.p_value = n10 == n01 ? 1.0
                         : std::min(1.0, 2.0 * double(1 + std::min(at_or_below, at_or_above)) / double(resamples + 1));
  return r;
}

}  // namespace liere::train
