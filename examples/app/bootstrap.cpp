// examples/app/bootstrap.cpp — the percentile and paired bootstraps (estimators in bootstrap.hpp).
#include <app/bootstrap.hpp>

#include <liere/core/config.hpp>
#include <liere/core/rng.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

namespace liere::train {

namespace {

// The q-quantile (0 <= q <= 1) of sorted values, linear interpolation between order statistics (type 7).
double quantile_sorted(const std::vector<double>& sorted, double q) {
  const double h = (double(sorted.size()) - 1) * q;
  const auto i = std::size_t(std::floor(h));
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (h - double(i)) * (sorted[i + 1] - sorted[i]);
}

void check_outcomes(const std::vector<std::uint8_t>& correct, const char* what, const char* name) {
  LIERE_ENSURE(!correct.empty(), what << ": '" << name << "' is empty (no examples)");
  for (std::size_t i = 0; i < correct.size(); ++i)
    LIERE_ENSURE(correct[i] <= 1, what << ": '" << name << "'[" << i << "] = " << int(correct[i])
                                       << ", expected 0 (wrong) or 1 (right)");
}

void check_bootstrap_args(int resamples, double level, const char* what) {
  LIERE_ENSURE(resamples >= 1, what << ": resamples must be at least 1, got " << resamples);
  LIERE_ENSURE(level > 0 && level < 1, what << ": level must be in (0, 1), got " << level);
}

}  // namespace

BootstrapCI bootstrap_ci(const std::vector<std::uint8_t>& correct, int resamples, double level, std::uint64_t seed) {
  check_outcomes(correct, "bootstrap_ci", "correct");
  check_bootstrap_args(resamples, level, "bootstrap_ci");
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
  return {double(k) / double(n), quantile_sorted(acc, alpha / 2), quantile_sorted(acc, 1 - alpha / 2)};
}

PairedBootstrap paired_bootstrap(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b, int resamples,
                                 double level, std::uint64_t seed) {
  LIERE_ENSURE(a.size() == b.size(), "paired_bootstrap: the two classifiers have outcomes for "
                                         << a.size() << " and " << b.size()
                                         << " examples; a paired test needs the same examples in the same order");
  check_outcomes(a, "paired_bootstrap", "a");
  check_outcomes(b, "paired_bootstrap", "b");
  check_bootstrap_args(resamples, level, "paired_bootstrap");
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
  r.diff_lo = quantile_sorted(diff, alpha / 2);
  r.diff_hi = quantile_sorted(diff, 1 - alpha / 2);
  r.p_value = n10 == n01 ? 1.0
                         : std::min(1.0, 2.0 * double(1 + std::min(at_or_below, at_or_above)) / double(resamples + 1));
  r.p_bound = n10 != n01 && std::min(at_or_below, at_or_above) == 0;
  return r;
}

std::string p_value_text(const PairedBootstrap& r) {
  char buf[64];
  if (!r.p_bound) {
    std::snprintf(buf, sizeof buf, "%.3g", r.p_value);
    return buf;
  }
  // Round up to 2 significant digits: 2/10001 = 0.00019998 is written 0.0002 (the 1 − 1e-12 keeps an exact
  // 0.00020000000000000001 from becoming 0.00021).
  const double scale = std::pow(10.0, 1 - std::floor(std::log10(r.p_value)));
  std::snprintf(buf, sizeof buf, "≤ %.2g", std::ceil(r.p_value * scale * (1 - 1e-12)) / scale);
  return buf;
}

}  // namespace liere::train
