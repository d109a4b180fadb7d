// examples/compare_runs.cpp — is run A more accurate than run B on the same test set?
//
// Reads two predictions files (app/metrics.hpp: write_predictions, one "index label pred" line per
// example), checks that they cover the same examples (same count, same label at every index), and prints
//   * each run's accuracy with its percentile-bootstrap confidence interval,
//   * the difference A − B with the paired-bootstrap interval and the two-sided paired-bootstrap p-value for
//     H0: equal accuracy (estimator: app/bootstrap.hpp); "p ≤ 0.0002" when no resample fell on the other side of
//     0, since 2/(N+1) is then a floor, not an estimate (JSON: "p_bound": true),
//   * the discordant counts (examples only A gets right, only B gets right) that drive the difference.
//   compare_runs runs/liere.pred runs/rope.pred --resamples 10000 --json runs/liere_vs_rope.json
// --resamples takes 1 to 10^7 (kMaxResamples); a header whose n is more than the file's bytes can hold is an error
// naming the file and line before any memory is reserved for it (train::read_predictions).
#include <app/bootstrap.hpp>
#include <app/flags.hpp>
#include <app/metrics.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

// --resamples at most 10^7: each bootstrap keeps one double per resample (80 MB at this bound; the three run one after
// the other), the smallest p-value is then 2e-7, and the time grows as resamples × examples (10^5 resamples of 10^4
// examples took 27 s on one core).
constexpr int kMaxResamples = 10'000'000;

struct Config {
  std::string a, b;          // the two predictions files
  int resamples = 10000;     // bootstrap resamples, for the intervals and the p-value
  std::uint64_t seed = 0;    // the same seed for all three bootstraps
  double level = 0.95;       // confidence level of the intervals
  std::string json;          // optional summary file
};

// The two files must describe the same test set: same number of examples, same label at every index.
void check_same_examples(const Config& cfg, const liere::train::Predictions& a, const liere::train::Predictions& b) {
  if (a.size() != b.size())
    throw liere::Error("'" + cfg.a + "' has " + std::to_string(a.size()) + " examples but '" + cfg.b + "' has " +
                       std::to_string(b.size()) + ": not the same test set");
  if (a.size() == 0) throw liere::Error("'" + cfg.a + "' and '" + cfg.b + "' hold no examples");
  std::size_t differ = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.labels[i] != b.labels[i] && differ++ == 0) first = i;
  if (differ > 0)
    throw liere::Error("'" + cfg.a + "' and '" + cfg.b + "' disagree on the labels of " + std::to_string(differ) +
                       " of " + std::to_string(a.size()) + " examples (first: index " + std::to_string(first) +
                       ", label " + std::to_string(a.labels[first]) + " vs " + std::to_string(b.labels[first]) +
                       "): not the same test set, or not in the same order");
}

// Both accuracies, the paired bootstrap and the discordant counts, printed and (--json) written.
void compare(const Config& cfg) {
  namespace train = liere::train;
  const train::Predictions pa = train::read_predictions(cfg.a);
  const train::Predictions pb = train::read_predictions(cfg.b);
  check_same_examples(cfg, pa, pb);
  const auto ca = pa.correct(), cb = pb.correct();

  const train::BootstrapCI ci_a = train::bootstrap_ci(ca, cfg.resamples, cfg.level, cfg.seed);
  const train::BootstrapCI ci_b = train::bootstrap_ci(cb, cfg.resamples, cfg.level, cfg.seed);
  const train::PairedBootstrap pair = train::paired_bootstrap(ca, cb, cfg.resamples, cfg.level, cfg.seed);
  std::size_t only_a = 0, only_b = 0;
  for (std::size_t i = 0; i < ca.size(); ++i) {
    only_a += ca[i] && !cb[i];
    only_b += !ca[i] && cb[i];
  }

  const int pct = int(cfg.level * 100 + 0.5);
  const int w = int(std::max(cfg.a.size(), cfg.b.size()));
  std::printf("%zu examples, %d bootstrap resamples, seed %llu\n", ca.size(), cfg.resamples,
              (unsigned long long)cfg.seed);
  std::printf("A  %-*s  accuracy %.4f  %d%% CI [%.4f, %.4f]\n", w, cfg.a.c_str(), ci_a.mean, pct, ci_a.lo, ci_a.hi);
  std::printf("B  %-*s  accuracy %.4f  %d%% CI [%.4f, %.4f]\n", w, cfg.b.c_str(), ci_b.mean, pct, ci_b.lo, ci_b.hi);
  std::printf("A - B  %+.4f  %d%% CI [%+.4f, %+.4f]  (paired bootstrap)\n", pair.diff, pct, pair.diff_lo,
              pair.diff_hi);
  // No resample on the other side of 0: the p-value is the floor 2/(N+1), a bound, not an estimate.
  std::printf("p %s%s  (two-sided paired bootstrap, H0: equal accuracy%s)\n", pair.p_bound ? "" : "= ",
              train::p_value_text(pair).c_str(),
              pair.p_bound ? "; no resample crossed 0: 2/(N+1) is the smallest value N resamples can give" : "");
  std::printf("discordant examples: %zu only A right, %zu only B right\n", only_a, only_b);

  if (!cfg.json.empty()) {
    train::write_json_atomic(cfg.json, {{"a", cfg.a},
                                        {"b", cfg.b},
                                        {"examples", ca.size()},
                                        {"resamples", cfg.resamples},
                                        {"seed", cfg.seed},
                                        {"level", cfg.level},
                                        {"acc_a", pair.acc_a},
                                        {"acc_a_lo", ci_a.lo},
                                        {"acc_a_hi", ci_a.hi},
                                        {"acc_b", pair.acc_b},
                                        {"acc_b_lo", ci_b.lo},
                                        {"acc_b_hi", ci_b.hi},
                                        {"diff", pair.diff},
                                        {"diff_lo", pair.diff_lo},
                                        {"diff_hi", pair.diff_hi},
                                        {"p_value", pair.p_value},
                                        {"p_bound", pair.p_bound},
                                        {"only_a_right", only_a},
                                        {"only_b_right", only_b}});
    std::printf("wrote %s\n", cfg.json.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("compare_runs", [&] {
    Config cfg;
    std::vector<std::string> files;
    liere::app::Flags f("compare_runs",
                        "Compares two classifiers evaluated on the same examples (predictions files with one\n"
                        "'index label pred' line per example, as the trainers write them): both accuracies with\n"
                        "bootstrap confidence intervals, the difference A - B with its paired-bootstrap interval, and\n"
                        "the two-sided paired-bootstrap p-value for equal accuracy.");
    f.section("Options");
    f.positional("A.pred B.pred", &files, "the two predictions files");
    f.add("resamples", &cfg.resamples,
          "bootstrap resamples (the smallest p-value is 2/(N+1); 8 bytes each, the time grows as N × examples)",
          liere::app::Range{1, kMaxResamples});
    f.add("seed", &cfg.seed, "random seed; the same seed gives the same numbers");
    f.add("level", &cfg.level, "confidence level of the intervals");
    f.add("json", &cfg.json, "also write the results as a JSON object to OUT (atomically)", "OUT");
    if (!f.parse(argc, argv)) return 0;
    if (files.size() != 2)
      throw liere::app::UsageError("give exactly two predictions files, got " + std::to_string(files.size()));
    if (!(cfg.level > 0 && cfg.level < 1)) throw liere::app::UsageError("--level must be in (0, 1)");
    cfg.a = files[0];
    cfg.b = files[1];
    compare(cfg);
    return 0;
  });
}
