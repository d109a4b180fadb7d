// tests/test_train_utils.cpp — the trainers' utilities in examples/app/: bootstrap intervals and the paired
// test (against the normal approximation, hand-built counts and a calibration run under H0), the metrics
// writer (read back with data_tools/jsonl.hpp), atomic summaries (with real write failures), predictions
// files (round trip and every kind of bad line), and the progress bar's plain and terminal output under a
// fake clock.
#include <catch2/catch.hpp>

#include <app/bootstrap.hpp>
#include <app/metrics.hpp>
#include <app/progress.hpp>
#include <data_tools/jsonl.hpp>
#include <liere/tensor/random.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace train = liere::train;
using Catch::Matchers::Contains;

namespace {

fs::path scratch_dir() {
  const fs::path dir = fs::path(LIERE_BINARY_DIR) / "test_train_utils_out";
  fs::create_directories(dir);
  return dir;
}

std::string scratch(const std::string& name) {
  const fs::path p = scratch_dir() / name;
  fs::remove_all(p);
  fs::remove_all(p.string() + ".tmp");
  return p.string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// n Bernoulli(p) outcomes from a fixed seed.
std::vector<std::uint8_t> bernoulli(std::size_t n, double p, std::uint64_t seed) {
  liere::Rng rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& x : v) x = rng.uniform() < p;
  return v;
}

// Paired outcomes with exactly the given counts of (a, b) = (1,1), (1,0), (0,1), (0,0), shuffled.
void paired_counts(int n11, int n10, int n01, int n00, std::vector<std::uint8_t>& a, std::vector<std::uint8_t>& b) {
  std::vector<int> kind;
  kind.insert(kind.end(), n11, 3);
  kind.insert(kind.end(), n10, 2);
  kind.insert(kind.end(), n01, 1);
  kind.insert(kind.end(), n00, 0);
  liere::Rng(7).shuffle(kind.begin(), kind.end());
  a.resize(kind.size());
  b.resize(kind.size());
  for (std::size_t i = 0; i < kind.size(); ++i) {
    a[i] = kind[i] >> 1;
    b[i] = kind[i] & 1;
  }
}

// Two-sided normal p-value for z.
double normal_p(double z) { return std::erfc(std::abs(z) / std::sqrt(2.0)); }

}  // namespace

// ---- bootstrap ------------------------------------------------------------------------------------------

TEST_CASE("bootstrap_ci: contains the accuracy, width close to the normal approximation", "[bootstrap]") {
  for (double p : {0.3, 0.7, 0.92}) {
    const std::size_t n = 2000;
    const auto c = bernoulli(n, p, 11);
    const auto ci = train::bootstrap_ci(c, 2000, 0.95, 3);
    double k = 0;
    for (auto x : c) k += x;
    const double acc = k / n;
    CHECK(ci.mean == acc);
    CHECK(ci.lo < acc);
    CHECK(ci.hi > acc);
    const double normal_width = 2 * 1.959964 * std::sqrt(acc * (1 - acc) / n);
    INFO("p " << p << " acc " << acc << " CI [" << ci.lo << ", " << ci.hi << "] normal width " << normal_width);
    CHECK(std::abs((ci.hi - ci.lo) / normal_width - 1) < 0.15);
    // Roughly centred on the accuracy.
    CHECK(std::abs((ci.hi - acc) - (acc - ci.lo)) < 0.25 * normal_width);
  }
}

TEST_CASE("bootstrap_ci: the level widens the interval; degenerate samples give a point", "[bootstrap]") {
  const auto c = bernoulli(1000, 0.6, 5);
  const auto ci90 = train::bootstrap_ci(c, 2000, 0.90, 1);
  const auto ci99 = train::bootstrap_ci(c, 2000, 0.99, 1);
  CHECK(ci99.hi - ci99.lo > 1.3 * (ci90.hi - ci90.lo));  // normal ratio 2.576 / 1.645 = 1.57

  const auto ones = train::bootstrap_ci(std::vector<std::uint8_t>(50, 1), 100);
  CHECK(ones.mean == 1.0);
  CHECK(ones.lo == 1.0);
  CHECK(ones.hi == 1.0);
  const auto zeros = train::bootstrap_ci(std::vector<std::uint8_t>(50, 0), 100);
  CHECK(zeros.lo == 0.0);
  CHECK(zeros.hi == 0.0);
}

TEST_CASE("bootstrap: deterministic for a seed, different for another", "[bootstrap]") {
  const auto a = bernoulli(1500, 0.55, 1);
  const auto b = bernoulli(1500, 0.60, 2);
  const auto x = train::bootstrap_ci(a, 500, 0.95, 42);
  const auto y = train::bootstrap_ci(a, 500, 0.95, 42);
  const auto z = train::bootstrap_ci(a, 500, 0.95, 43);
  CHECK(x.lo == y.lo);
  CHECK(x.hi == y.hi);
  CHECK((x.lo != z.lo || x.hi != z.hi));

  const auto p = train::paired_bootstrap(a, b, 1000, 0.95, 9);
  const auto q = train::paired_bootstrap(a, b, 1000, 0.95, 9);
  const auto r = train::paired_bootstrap(a, b, 1000, 0.95, 10);
  CHECK(p.diff_lo == q.diff_lo);
  CHECK(p.diff_hi == q.diff_hi);
  CHECK(p.p_value == q.p_value);
  CHECK((p.diff_lo != r.diff_lo || p.diff_hi != r.diff_hi || p.p_value != r.p_value));
}

namespace {
// The q-quantile of sorted values by its definition (Hyndman–Fan type 7, numpy's default): position (m - 1)·q,
// linear between the order statistics on either side.
double type7_quantile(const std::vector<double>& sorted, double q) {
  const double h = double(sorted.size() - 1) * q;
  const double below = std::floor(h);
  const std::size_t i = std::size_t(below);
  const double upper = i + 1 < sorted.size() ? sorted[i + 1] : sorted[i];
  return (1 - (h - below)) * sorted[i] + (h - below) * upper;
}
}  // namespace

TEST_CASE("bootstrap: small cases against resampling by hand with the documented generator", "[bootstrap]") {
  // bootstrap.hpp: each resample draws n indices with liere::Rng(seed).below(n) into the examples ordered by
  // outcome. Here the examples already are in that order, so a draw is an index into them, looked up directly.
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    for (double level : {0.5, 0.8, 0.95}) {
      INFO("seed " << seed << " level " << level);
      const int B = 9;
      const std::vector<std::uint8_t> correct = {1, 1, 1, 1, 0, 0, 0};  // right first
      liere::Rng rng(seed);
      std::vector<double> acc;
      for (int r = 0; r < B; ++r) {
        int hits = 0;
        for (std::size_t j = 0; j < correct.size(); ++j) hits += correct[rng.below(correct.size())];
        acc.push_back(hits / double(correct.size()));
      }
      std::sort(acc.begin(), acc.end());
      const auto ci = train::bootstrap_ci(correct, B, level, seed);
      CHECK(ci.mean == Approx(4.0 / 7).epsilon(1e-15));
      CHECK(ci.lo == Approx(type7_quantile(acc, (1 - level) / 2)).epsilon(1e-12));
      CHECK(ci.hi == Approx(type7_quantile(acc, (1 + level) / 2)).epsilon(1e-12));
    }
  }
  // Pairs in the order the implementation groups them: (a right, b wrong), (a wrong, b right), then the rest.
  struct Case {
    int n10, n01, n11, n00;
  };
  for (const Case c : {Case{1, 3, 5, 3}, Case{4, 1, 2, 5}, Case{2, 2, 4, 4}}) {
    for (std::uint64_t seed : {5u, 6u}) {
      INFO("n10 " << c.n10 << " n01 " << c.n01 << " seed " << seed);
      std::vector<std::uint8_t> a, b;
      auto add = [&](int count, std::uint8_t x, std::uint8_t y) {
        a.insert(a.end(), std::size_t(count), x);
        b.insert(b.end(), std::size_t(count), y);
      };
      add(c.n10, 1, 0);
      add(c.n01, 0, 1);
      add(c.n11, 1, 1);
      add(c.n00, 0, 0);
      const std::size_t n = a.size();
      const int B = 200;
      const double level = 0.9;
      liere::Rng rng(seed);
      std::vector<double> d;
      int at_or_below = 0, at_or_above = 0;
      for (int r = 0; r < B; ++r) {
        int delta = 0;
        for (std::size_t j = 0; j < n; ++j) {
          const std::size_t u = rng.below(n);
          delta += int(a[u]) - int(b[u]);
        }
        at_or_below += delta <= 0;
        at_or_above += delta >= 0;
        d.push_back(delta / double(n));
      }
      std::sort(d.begin(), d.end());
      const auto res = train::paired_bootstrap(a, b, B, level, seed);
      const double p = c.n10 == c.n01 ? 1.0 : std::min(1.0, 2.0 * (1 + std::min(at_or_below, at_or_above)) / (B + 1));
      CHECK(res.diff == Approx(double(c.n10 - c.n01) / n).epsilon(1e-15));
      CHECK(res.diff_lo == Approx(type7_quantile(d, (1 - level) / 2)).epsilon(1e-12));
      CHECK(res.diff_hi == Approx(type7_quantile(d, (1 + level) / 2)).epsilon(1e-12));
      CHECK(res.p_value == Approx(p).epsilon(1e-15));
    }
  }
}

TEST_CASE("paired_bootstrap: clearly different classifiers give a small p", "[bootstrap]") {
  const auto a = bernoulli(1000, 0.80, 21);
  const auto b = bernoulli(1000, 0.60, 22);
  const int B = 10000;
  const auto r = train::paired_bootstrap(a, b, B);
  CHECK(r.p_value < 0.01);
  CHECK(r.p_value == Approx(2.0 / (B + 1)));  // no resample crosses 0 at z ≈ 10
  CHECK(r.diff > 0.1);
  CHECK(r.diff_lo > 0);
  CHECK(r.diff_lo < r.diff);
  CHECK(r.diff_hi > r.diff);
  CHECK(r.diff == Approx(r.acc_a - r.acc_b));
}

TEST_CASE("paired_bootstrap: a p-value at the floor 2/(B+1) is a bound, written \"≤\", rounded up", "[bootstrap]") {
  const auto a = bernoulli(1000, 0.80, 21), b = bernoulli(1000, 0.60, 22);
  // No resample crosses 0 (z ≈ 10): p is the floor, a bound.
  const auto r = train::paired_bootstrap(a, b, 10000);
  CHECK(r.p_bound);
  CHECK(r.p_value == 2.0 / 10001);
  CHECK(train::p_value_text(r) == "≤ 0.0002");
  // 2/1235 = 0.0016194: the bound rounded up to 2 digits, 0.0017 (0.0016 would not hold).
  const auto s = train::paired_bootstrap(a, b, 1234);
  CHECK(s.p_bound);
  CHECK(train::p_value_text(s) == "≤ 0.0017");
  // Some resamples cross 0: 60 examples only c gets right, 40 only d, 900 both (z ≈ 2): an estimate above the
  // floor, written as a value.
  std::vector<std::uint8_t> c(1000, 1), d(1000, 1);
  for (int i = 0; i < 60; ++i) d[i] = 0;
  for (int i = 60; i < 100; ++i) c[i] = 0;
  const auto e = train::paired_bootstrap(c, d, 10000);
  INFO("p " << e.p_value << " diff " << e.diff);
  CHECK_FALSE(e.p_bound);
  CHECK(e.p_value > 2.0 / 10001);
  CHECK(e.p_value < 0.2);
  char want[32];
  std::snprintf(want, sizeof want, "%.3g", e.p_value);
  CHECK(train::p_value_text(e) == want);
  // Equal accuracy: p = 1 is no bound either.
  const auto f = train::paired_bootstrap(a, a, 2000);
  CHECK_FALSE(f.p_bound);
  CHECK(train::p_value_text(f) == "1");
}

TEST_CASE("compare_runs prints \"p ≤ 0.0002\" (and p_bound in its JSON) when no resample crosses 0", "[bootstrap][program]") {
  // tests/CMakeLists.txt builds compare_runs before this test (both need the example programs).
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "compare_runs";
  INFO(exe.string() << " is not built");
  REQUIRE(fs::exists(exe));
  // 1000 examples, label 0: A wrong on examples 0-9; B wrong on 0-4 and on a run of others.
  auto preds = [&](const std::string& name, int first_wrong, int n_wrong, int also_first, int also_n) {
    std::string text = "# liere-predictions v1 n=1000 columns: index label pred\n";
    for (int i = 0; i < 1000; ++i) {
      const bool wrong = (i >= first_wrong && i < first_wrong + n_wrong) || (i >= also_first && i < also_first + also_n);
      text += std::to_string(i) + " 0 " + (wrong ? "1" : "0") + "\n";
    }
    const std::string path = scratch(name);
    write_text(path, text);
    return path;
  };
  const std::string a = preds("cr_a.pred", 0, 10, 0, 0), far = preds("cr_far.pred", 100, 200, 0, 5),
                    near = preds("cr_near.pred", 100, 15, 0, 5), json = scratch("cr.json"), log = scratch("cr.log");
  auto run = [&](const std::string& b) {
    return std::system((exe.string() + " " + a + " " + b + " --json " + json + " > " + log + " 2>&1").c_str());
  };
  // 200 only B wrong, 5 only A: no resample has A behind.
  REQUIRE(run(far) == 0);
  CHECK_THAT(read_text(log), Contains("\np ≤ 0.0002  (two-sided paired bootstrap") && Contains("no resample crossed 0"));
  CHECK_THAT(read_text(json), Contains("\"p_bound\": true"));
  // 15 only B wrong, 5 only A (z ≈ 2.2): an estimate, "p = …".
  REQUIRE(run(near) == 0);
  CHECK_THAT(read_text(log), Contains("\np = 0.0") && !Contains("≤"));
  CHECK_THAT(read_text(json), Contains("\"p_bound\": false"));
}

TEST_CASE("compare_runs: --resamples beyond its range, a header n beyond what the file holds: named errors",
          "[bootstrap][program]") {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "compare_runs";
  INFO(exe.string() << " is not built");
  REQUIRE(fs::exists(exe));
  const std::string a = scratch("cr_small.pred"), big = scratch("cr_big.pred"), log = scratch("cr_small.log");
  write_text(a, "# liere-predictions v1 n=2 columns: index label pred\n0 1 1\n1 2 0\n");
  auto run = [&](const std::string& args) { return liere::test::run_logged(exe.string() + " " + args, log); };
  // --resamples: 1 to 10^7 (8 bytes each: 80 MB at most; p down to 2e-7); outside, a usage error (exit 2).
  CHECK(run(a + " " + a + " --resamples 10000000") == 0);
  CHECK_THAT(read_text(log), Contains("2 examples, 10000000 bootstrap resamples"));
  for (const std::string bad : {"0", "10000001", "2147483647"}) {
    CHECK(run(a + " " + a + " --resamples " + bad) == 2);
    CHECK_THAT(read_text(log), Contains("--resamples " + bad + ": expected an integer in [1, 10000000]"));
  }
  // A header's n beyond what the file holds: read_predictions reserves no more than the file's bytes can hold (an
  // example line takes at least 6), so the error names the file and its lines, not "out of memory" (n=10^18) or
  // "vector::reserve" (4·10^18).
  for (const std::string n : {"1000000000000000000", "4000000000000000000", "3"}) {
    write_text(big, "# liere-predictions v1 n=" + n + " columns: index label pred\n0 1 1\n1 2 0\n");
    CHECK(run(a + " " + big) == 1);
    CHECK_THAT(read_text(log), Contains(big + ":3: the header says n=" + n + " but the file has 2 examples"));
    CHECK(run(big + " " + a) == 1);
    CHECK_THAT(read_text(log), Contains(big + ":3: the header says n=" + n));
  }
}

TEST_CASE("paired_bootstrap: equal accuracy gives a large p", "[bootstrap]") {
  SECTION("identical classifiers") {
    const auto a = bernoulli(800, 0.7, 31);
    const auto r = train::paired_bootstrap(a, a, 2000);
    CHECK(r.p_value == 1.0);
    CHECK(r.diff == 0.0);
    CHECK(r.diff_lo == 0.0);
    CHECK(r.diff_hi == 0.0);
  }
  SECTION("same accuracy, errors on different examples") {
    std::vector<std::uint8_t> a, b;
    paired_counts(500, 120, 120, 260, a, b);
    const auto r = train::paired_bootstrap(a, b, 4000);
    CHECK(r.acc_a == r.acc_b);
    CHECK(r.p_value == 1.0);  // bootstrap.hpp: when diff == 0 exactly, p = 1
    // Also where few resamples fall on 0 and chance puts fewer than half on one side (the formula alone would
    // then give p < 1 for some of these seeds).
    std::vector<std::uint8_t> c, d;
    paired_counts(10, 40, 40, 10, c, d);
    for (std::uint64_t seed = 0; seed < 20; ++seed) CHECK(train::paired_bootstrap(c, d, 21, 0.95, seed).p_value == 1.0);
    CHECK(r.diff_lo < 0);
    CHECK(r.diff_hi > 0);
  }
  SECTION("a difference of half a standard error") {
    std::vector<std::uint8_t> a, b;
    paired_counts(500, 127, 120, 253, a, b);  // diff 0.007, se ≈ 0.0157
    const auto r = train::paired_bootstrap(a, b, 4000);
    CHECK(r.p_value > 0.2);
  }
}

TEST_CASE("paired_bootstrap: p and the interval match the normal approximation at z ≈ 2.2", "[bootstrap]") {
  std::vector<std::uint8_t> a, b;
  paired_counts(700, 50, 30, 220, a, b);  // n 1000, diff 0.02
  const double n = 1000, diff = 0.02;
  const double se = std::sqrt(((50 + 30) / n - diff * diff) / n);
  const double p_normal = normal_p(diff / se);  // ≈ 0.025
  const auto r = train::paired_bootstrap(a, b, 10000, 0.95, 4);
  INFO("p " << r.p_value << " normal " << p_normal << " CI [" << r.diff_lo << ", " << r.diff_hi << "]");
  CHECK(r.diff == Approx(diff));
  CHECK(r.p_value > 0.7 * p_normal);  // catches a p-value that is not doubled (two-sided) ...
  CHECK(r.p_value < 1.5 * p_normal);  // ... or doubled twice
  CHECK(std::abs((r.diff_hi - r.diff_lo) / (2 * 1.959964 * se) - 1) < 0.15);
  // The p-value inverts the interval: p < 0.05 exactly when the 95% interval excludes 0.
  CHECK((r.p_value < 0.05) == (r.diff_lo > 0));
  // Swapping the classifiers flips the difference.
  const auto s = train::paired_bootstrap(b, a, 10000, 0.95, 4);
  CHECK(s.diff == Approx(-r.diff));
  CHECK(s.p_value == Approx(r.p_value).epsilon(0.5));
}

TEST_CASE("paired_bootstrap: about 5% of tests reject at 0.05 under H0", "[bootstrap]") {
  liere::Rng rng(99);
  const int sims = 200, n = 300;
  int rejected = 0;
  for (int s = 0; s < sims; ++s) {
    std::vector<std::uint8_t> a(n), b(n);
    for (int i = 0; i < n; ++i) {
      a[i] = rng.uniform() < 0.7;
      b[i] = rng.uniform() < 0.7;
    }
    rejected += train::paired_bootstrap(a, b, 500, 0.95, std::uint64_t(s)).p_value < 0.05;
  }
  INFO(rejected << " of " << sims << " rejected");
  CHECK(rejected >= 2);
  CHECK(rejected <= 20);
}

TEST_CASE("bootstrap: bad inputs are clear errors", "[bootstrap]") {
  const std::vector<std::uint8_t> a(10, 1), b(11, 0);
  CHECK_THROWS_WITH(train::paired_bootstrap(a, b), Contains("10 and 11 examples") && Contains("same examples"));
  CHECK_THROWS_AS(train::paired_bootstrap(a, b), liere::Error);
  CHECK_THROWS_WITH(train::bootstrap_ci({}), Contains("empty"));
  CHECK_THROWS_WITH(train::bootstrap_ci({0, 1, 2}), Contains("[2] = 2") && Contains("0 (wrong) or 1 (right)"));
  CHECK_THROWS_WITH(train::bootstrap_ci(a, 0), Contains("resamples"));
  CHECK_THROWS_WITH(train::bootstrap_ci(a, 100, 1.5), Contains("level"));
  CHECK_THROWS_WITH(train::paired_bootstrap(a, a, 100, 42), Contains("level must be in (0, 1), got 42"));
}

// ---- metrics --------------------------------------------------------------------------------------------

TEST_CASE("MetricsWriter: lines read back with data_tools/jsonl.hpp", "[metrics]") {
  const std::string path = scratch("metrics.jsonl");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::string tricky = "a \"quoted\" back\\slash\nnew line\ttab \x01 caf\xc3\xa9";
  {
    train::MetricsWriter w(path);
    w.write({{"epoch", 1}, {"train_loss", 0.5}, {"pe", "liere"}});
    // Each line is flushed: readable while the writer is open.
    CHECK(read_text(path) == "{\"epoch\":1,\"train_loss\":0.5,\"pe\":\"liere\"}\n");
    w.write({{"epoch", 2}, {"lr", 1e-5}, {"acc", 0.1f}, {"ok", true}, {"bad", false}, {"nan", nan}, {"inf", -inf},
             {"none", nullptr}, {"note", tricky}, {"big", std::int64_t(9007199254740993)}, {"u", 7u},
             {"s", std::string("x")}});
  }
  std::vector<int> lines;
  const auto rows = liere::data::read_jsonl(path, &lines);
  REQUIRE(rows.size() == 2);
  CHECK(lines == std::vector<int>{1, 2});
  CHECK(rows[0].at("epoch").as_number() == 1);
  CHECK(rows[0].at("train_loss").as_number() == 0.5);
  CHECK(rows[0].at("pe").as_string() == "liere");
  const auto& r = rows[1];
  CHECK(r.at("epoch").as_number() == 2);
  CHECK(r.at("lr").as_number() == 1e-5);
  CHECK(r.at("acc").as_number() == 0.1);  // a float written in its shortest form, "0.1"
  CHECK(r.at("ok").as_bool() == true);
  CHECK(r.at("bad").as_bool() == false);
  CHECK(r.at("nan").is_null());
  CHECK(r.at("inf").is_null());
  CHECK(r.at("none").is_null());
  CHECK(r.at("note").as_string() == tricky);
  CHECK(r.at("u").as_number() == 7);
  CHECK(r.at("s").as_string() == "x");
  const std::string text = read_text(path);
  CHECK_THAT(text, Contains("\"big\":9007199254740993"));  // integers exactly, not via double
  CHECK_THAT(text, Contains("\"nan\":null,\"inf\":null"));
  CHECK_THAT(text, Contains("\\u0001"));

  // Append mode continues the file.
  {
    train::MetricsWriter w(path, train::MetricsWriter::Mode::append);
    w.write({{"epoch", 3}});
  }
  CHECK(liere::data::read_jsonl(path).size() == 3);
}

TEST_CASE("MetricsWriter: arrays, key order, errors", "[metrics]") {
  CHECK(train::to_json({{"v", std::vector<double>{1, 2.5, std::nan("")}}, {"f", std::vector<float>{0.1f}},
                        {"i", std::vector<int>{-3, 4}}, {"e", std::vector<double>{}}}) ==
        "{\"v\":[1,2.5,null],\"f\":[0.1],\"i\":[-3,4],\"e\":[]}");
  CHECK(train::to_json({{"z", 1}, {"a", 2}}) == "{\"z\":1,\"a\":2}");
  CHECK(train::to_json({}) == "{}");
  CHECK(train::to_json({{"a", 1}, {"b", "x"}}, true) == "{\n  \"a\": 1,\n  \"b\": \"x\"\n}");
  CHECK_THROWS_WITH(train::to_json({{"a", 1}, {"a", 2}}), Contains("'a' appears twice"));
  CHECK_THROWS_WITH(train::to_json({{"", 1}}), Contains("empty key"));
  CHECK_THROWS_WITH(train::MetricsWriter((scratch_dir() / "no_such_dir" / "m.jsonl").string()),
                    Contains("no_such_dir/m.jsonl"));
}

TEST_CASE("write_json_atomic: replaces the file, leaves no .tmp, keeps the old file on failure", "[metrics]") {
  const std::string path = scratch("summary.json");
  train::write_json_atomic(path, {{"best_acc", 0.5}, {"pe", "rope"}});
  train::write_json_atomic(path, {{"best_acc", 0.75}, {"pe", "liere"}, {"epochs", 10}});
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const auto obj = liere::data::parse_json_object(read_text(path), path);
  CHECK(obj.at("best_acc").as_number() == 0.75);
  CHECK(obj.at("pe").as_string() == "liere");
  CHECK(obj.at("epochs").as_number() == 10);
  const std::string good = read_text(path);

  SECTION("the directory does not exist") {
    const std::string bad = (scratch_dir() / "no_such_dir" / "summary.json").string();
    CHECK_THROWS_WITH(train::write_json_atomic(bad, {{"a", 1}}), Contains("cannot create") && Contains("no_such_dir"));
    CHECK_FALSE(fs::exists(bad + ".tmp"));
  }
  SECTION("writing fails half-way (file size limit)") {
    // RLIMIT_FSIZE makes write() fail with EFBIG after `limit` bytes: a real mid-write failure, as root too.
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 64;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string error;
    try {
      train::write_json_atomic(path, {{"payload", std::string(1000, 'x')}});
    } catch (const liere::Error& e) {
      error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    CHECK_THAT(error, Contains("writing '" + path + ".tmp' failed after 64 of"));
    CHECK(read_text(path) == good);
    CHECK_FALSE(fs::exists(path + ".tmp"));
  }
  SECTION("the rename fails (the target is a non-empty directory)") {
    const std::string dir = scratch("summary_dir.json");
    fs::create_directories(dir + "/inside");
    CHECK_THROWS_WITH(train::write_json_atomic(dir, {{"a", 1}}), Contains("cannot rename"));
    CHECK_FALSE(fs::exists(dir + ".tmp"));
    CHECK(fs::is_directory(dir + "/inside"));
  }
  CHECK(read_text(path) == good);
}

// ---- predictions ----------------------------------------------------------------------------------------

TEST_CASE("predictions: round trip", "[predictions]") {
  const std::string path = scratch("run.pred");
  const std::vector<int> labels = {3, 5, 1, 0, 9, 9, 2};
  const std::vector<int> preds = {3, 2, 1, -1, 9, 8, 2};
  train::write_predictions(path, labels, preds);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  const std::string text = read_text(path);
  CHECK(text.rfind("# liere-predictions v1 n=7 columns: index label pred\n0 3 3\n1 5 2\n2 1 1\n3 0 -1\n", 0) == 0);
  const auto p = train::read_predictions(path);
  CHECK(p.labels == labels);
  CHECK(p.preds == preds);
  CHECK(p.size() == 7);
  CHECK(p.correct() == std::vector<std::uint8_t>{1, 0, 1, 0, 1, 0, 1});
  CHECK(p.accuracy() == Approx(4.0 / 7));

  // An empty test set, CRLF line ends and blank lines are fine.
  train::write_predictions(path, {}, {});
  CHECK(train::read_predictions(path).size() == 0);
  write_text(path, "# liere-predictions v1 n=2 columns: index label pred\r\n0 1 1\r\n\r\n1  2\t0 \r\n");
  const auto q = train::read_predictions(path);
  CHECK(q.labels == std::vector<int>{1, 2});
  CHECK(q.preds == std::vector<int>{1, 0});

  CHECK_THROWS_WITH(train::write_predictions(path, {1, 2}, {1}), Contains("2 labels but 1 predictions"));
}

TEST_CASE("predictions: bad files name the file and line", "[predictions]") {
  const std::string path = scratch("bad.pred");
  const std::string header = "# liere-predictions v1 n=3 columns: index label pred\n";
  auto error_of = [&](const std::string& text) {
    write_text(path, text);
    try {
      train::read_predictions(path);
    } catch (const liere::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of(""), Contains(path + ":1: not a predictions file") && Contains("<empty file>"));
  CHECK_THAT(error_of("index label pred\n0 1 1\n"), Contains(path + ":1: not a predictions file"));
  CHECK_THAT(error_of("# liere-predictions v1 n=x\n"), Contains(path + ":1: not a predictions file"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2\n2 3 3\n"),
             Contains(path + ":3: expected three integers 'index label pred', got '1 2'"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 2 7\n"), Contains(path + ":3: expected three integers"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 x\n"), Contains(path + ":3: expected three integers"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 2.5\n"), Contains(path + ":3: expected three integers"));
  CHECK_THAT(error_of(header + "0 1 1\n2 2 2\n"), Contains(path + ":3: index 2, expected 1"));
  CHECK_THAT(error_of(header + "0 1 1\n1 99999999999 2\n"), Contains(path + ":3: label 99999999999 does not fit"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 2\n"), Contains("n=3 but the file has 2 examples (truncated?)"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 2\n2 3 3\n3 4 4\n"), Contains(path + ":5: more lines than the header's n=3"));
  CHECK_THAT(error_of(header + "0 1 1\n1 2 2\n2 3 3\n"), Contains("no error"));
  CHECK_THROWS_WITH(train::read_predictions(scratch("missing.pred")), Contains("cannot open") && Contains("missing.pred"));
  const std::string folder = scratch("folder.pred");
  fs::create_directories(folder);
  CHECK_THROWS_WITH(train::read_predictions(folder), Contains("'" + folder + "': is a directory"));
}

TEST_CASE("predictions: the stream form names its source and reads what the writer's text holds", "[predictions]") {
  const std::vector<int> labels = {7, -3, 2147483647, 0};
  const std::vector<int> preds = {7, 4, -2147483647 - 1, 0};
  const std::string text = train::predictions_text(labels, preds, "x.pred");
  using Bytes = std::optional<std::uintmax_t>;
  for (const Bytes bytes : {Bytes(text.size()), Bytes(), Bytes(0)}) {
    std::istringstream in(text);
    const auto p = train::read_predictions(in, "mem.pred", bytes);
    CHECK(p.labels == labels);
    CHECK(p.preds == preds);
  }
  std::istringstream cut(text.substr(0, text.size() - 6));  // the last example's line "3 0 0\n" gone
  CHECK_THROWS_WITH(train::read_predictions(cut, "mem.pred", std::nullopt),
                    Contains("mem.pred:4: the header says n=4 but the file has 3 examples"));
  CHECK_THROWS_WITH(train::predictions_text({1, 2}, {1}, "y.pred"), Contains("'y.pred': 2 labels but 1 predictions"));
}

// ---- progress bar ---------------------------------------------------------------------------------------

TEST_CASE("ProgressBar: plain lines every 10% with a fake clock", "[progress]") {
  double t = 100;
  train::ProgressOptions opt;
  opt.clock = [&t] { return t; };
  std::ostringstream out;
  {
    train::ProgressBar bar(10, "epoch 1/2", out, opt);
    CHECK_FALSE(bar.tty());  // a string stream is never a terminal
    for (int i = 0; i < 10; ++i) {
      t += 1;
      bar.add_items(32);
      bar.update(i + 1, {{"loss", 2.5 - 0.1 * i}, {"acc", 0.1 * (i + 1)}});
    }
    bar.finish();  // the 100% line is already there: nothing more
  }
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 10);
  CHECK(lines[0] == "epoch 1/2  1/10  10% loss 2.5 acc 0.1 | 32.00 img/s | 00:01 eta 00:09");
  CHECK(lines[4] == "epoch 1/2  5/10  50% loss 2.1 acc 0.5 | 32.00 img/s | 00:05 eta 00:05");
  CHECK(lines[9] == "epoch 1/2 10/10 100% loss 1.6 acc 1 | 32.00 img/s | 00:10");
  CHECK(out.str().find('\r') == std::string::npos);

  // Every 0.1% of 1000 steps is a line at every step, also where 100·k/1000/0.1 rounds to just below k
  // (k = 3 gives 2.9999999999999996).
  opt.plain_every_percent = 0.1;
  std::ostringstream fine;
  {
    train::ProgressBar bar(1000, "", fine, opt);
    for (int i = 1; i <= 1000; ++i) bar.update(i);
    bar.finish();
  }
  const std::string f = fine.str();
  CHECK(std::count(f.begin(), f.end(), '\n') == 1000);
}

TEST_CASE("ProgressBar: plain mode on many steps, a stop part-way, steps/s", "[progress]") {
  double t = 0;
  train::ProgressOptions opt;
  opt.clock = [&t] { return t; };
  opt.plain_every_percent = 25;
  std::ostringstream out;
  train::ProgressBar bar(1000, "", out, opt);
  for (int i = 1; i <= 600; ++i) {
    t += 1.0 / 256;  // exact in binary: the printed rate and times do not depend on rounding
    bar.update(i);
  }
  bar.finish({{"loss", 0.25}});  // stopped at 600: one more line with the final state
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);  // 25%, 50%, and finish at 60%
  CHECK(lines[0] == " 250/1000  25% | 256.0 it/s | 00:01 eta 00:03");
  CHECK(lines[2] == " 600/1000  60% loss 0.25 | 256.0 it/s | 00:02 eta 00:02");
  bar.finish();  // a second finish prints nothing
  CHECK(out.str().size() == lines[0].size() + lines[1].size() + lines[2].size() + 3);
}

TEST_CASE("ProgressBar: terminal mode redraws in place at most every 0.1 s", "[progress]") {
  double t = 0;
  train::ProgressOptions opt;
  opt.clock = [&t] { return t; };
  opt.mode = train::ProgressOptions::Mode::tty;
  opt.bar_width = 10;
  std::ostringstream out;
  train::ProgressBar bar(100, "eval", out, opt);
  for (int i = 1; i <= 100; ++i) {
    t += 1.0 / 128;  // 100 steps over 0.78 s: a redraw every 13 steps (0.102 s), and the last one
    bar.update(i, {{"acc", 0.5}});
  }
  const std::string s = out.str();
  CHECK(std::count(s.begin(), s.end(), '\r') == 9);  // steps 1, 14, 27, 40, 53, 66, 79, 92, 100
  CHECK(s.find('\n') == std::string::npos);
  CHECK_THAT(s, Contains("\reval [#####.....]  53/100  53% acc 0.5 | 128.0 it/s | 00:00 eta 00:00"));
  bar.finish();
  const std::string f = out.str();
  CHECK(f.back() == '\n');
  CHECK(f.substr(f.rfind('\r')) == "\reval [##########] 100/100 100% acc 0.5 | 128.0 it/s | 00:01\n");

  // Exactly min_redraw_seconds after the last redraw is soon enough (times in binary fractions, so exact): with
  // 0.125 s and a step every 1/128 s, every 16th step.
  t = 0;
  opt.min_redraw_seconds = 0.125;
  std::ostringstream exact;
  train::ProgressBar every16(100, "eval", exact, opt);
  for (int i = 1; i <= 100; ++i) {
    t += 1.0 / 128;
    every16.update(i);
  }
  const std::string e = exact.str();
  CHECK(std::count(e.begin(), e.end(), '\r') == 8);  // steps 1, 17, 33, 49, 65, 81, 97, 100
}

TEST_CASE("ProgressBar: terminal mode pads a shorter line over a longer one", "[progress]") {
  double t = 0;
  train::ProgressOptions opt;
  opt.clock = [&t] { return t; };
  opt.mode = train::ProgressOptions::Mode::tty;
  opt.bar_width = 4;
  std::ostringstream out;
  train::ProgressBar bar(4, "", out, opt);
  t = 1;
  bar.update(1, {{"a_long_name", 1.5}});
  t = 2;
  bar.update(2, {{"b", 1}});
  const std::string s = out.str();
  const std::string first = "\r[#...] 1/4  25% a_long_name 1.5 | 1.00 it/s | 00:01 eta 00:03";
  const std::string second = "\r[##..] 2/4  50% b 1 | 1.00 it/s | 00:02 eta 00:02";
  REQUIRE(s.size() == 2 * first.size());
  CHECK(s.substr(0, first.size()) == first);
  CHECK(s.substr(first.size()) == second + std::string(first.size() - second.size(), ' '));
}

TEST_CASE("ProgressBar: clock text and bad arguments", "[progress]") {
  CHECK(train::ProgressBar::clock_text(0) == "00:00");
  CHECK(train::ProgressBar::clock_text(59.4) == "00:59");
  CHECK(train::ProgressBar::clock_text(125) == "02:05");
  CHECK(train::ProgressBar::clock_text(3661) == "1:01:01");
  std::ostringstream out;
  CHECK_THROWS_WITH(train::ProgressBar(-1, "x", out), Contains("total must be >= 0"));
  train::ProgressOptions opt;
  opt.plain_every_percent = 0;
  CHECK_THROWS_WITH(train::ProgressBar(10, "x", out, opt), Contains("plain_every_percent"));
  // total 0: one line at the first update, none at finish.
  train::ProgressBar empty(0, "nothing", out);
  empty.update(0);
  empty.finish();
  const std::string s = out.str();
  CHECK(s == "nothing 0/0 100% | 00:00\n");
}
