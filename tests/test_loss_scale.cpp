// tests/test_loss_scale.cpp — dynamic loss scaling for fp16 (optim/loss_scale.hpp, backend/kernels/loss_scale.hpp),
// the policy a CPU or GPU fp16 trainer will share: unscaling and the overflow check per element, skip and back off
// on overflow, growth after a run of finite steps (capped), the counters for the metrics, and an overflow storm
// that stops with a message naming the step and suggesting bf16. A simulated fp16 backward (a gradient g of the
// scaled loss s·L is s·g, and overflows to ∞ beyond fp16's 65504) drives the policy as a trainer would.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <liere/optim/loss_scale.hpp>
#include <vector>

#include "tensor_compare.hpp"

using liere::optim::DynamicLossScale;
using liere::optim::LossScaleConfig;

namespace {

constexpr float kFp16Max = 65504.0f;

// The fp16 gradients of the loss scaled by s: s·g, ±∞ where that exceeds fp16's range (the rounding to fp16's
// 11 significant bits is left out: it does not decide overflow).
std::vector<float> scaled_fp16_grads(const std::vector<float>& g, double s) {
  std::vector<float> out(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double v = double(g[i]) * s;
    out[i] = std::abs(v) > kFp16Max ? std::copysign(std::numeric_limits<float>::infinity(), float(v)) : float(v);
  }
  return out;
}

}  // namespace

TEST_CASE("loss scale: unscale_grad divides and reports non-finite elements", "[loss_scale]") {
  using liere::kernels::unscale_grad;
  float g = 3.0f * 1024;
  CHECK(unscale_grad(g, 1.0f / 1024));
  CHECK(g == 3.0f);  // a power-of-two scale is exact
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    float b = bad;
    CHECK(!unscale_grad(b, 0.5f));
  }
  float big = std::numeric_limits<float>::max();  // finite, however large
  CHECK(unscale_grad(big, 1.0f));
  DynamicLossScale ls;
  std::vector<float> grads = {1024.0f, -2048.0f, 0.0f};
  CHECK(ls.unscale(grads.data(), 3));
  CHECK(grads == std::vector<float>{1024.0f / 65536, -2048.0f / 65536, 0.0f});
  grads[1] = std::numeric_limits<float>::infinity();
  CHECK(!ls.unscale(grads.data(), 3));
}

TEST_CASE("loss scale: skip and back off on overflow, grow after a run of finite steps", "[loss_scale]") {
  LossScaleConfig c;
  c.init = 65536;
  c.growth_interval = 5;
  c.max_scale = 65536;  // growth stops here
  DynamicLossScale ls(c);
  // Gradients up to 10: s·10 overflows fp16 for s > 6550, so 65536 → 32768 → 16384 → 8192 → 4096 (4 skipped steps).
  const std::vector<float> g = {10.0f, -3.0f, 1e-3f, 0.5f};
  std::int64_t step = 0, applied = 0;
  std::vector<double> scales;
  for (int i = 0; i < 30; ++i) {
    ++step;
    std::vector<float> grads = scaled_fp16_grads(g, ls.scale());
    const bool finite = ls.unscale(grads.data(), liere::Index(grads.size()));
    if (ls.update(!finite, step)) {
      ++applied;
      for (std::size_t k = 0; k < g.size(); ++k) CHECK(grads[k] == Approx(g[k]).epsilon(1e-6));  // unscaled
    }
    scales.push_back(ls.scale());
  }
  // Steps 1–4 overflow: 4096 after step 4. Steps 5–9 are finite: 8192 after step 9; at step 10, 8192·10 = 81920
  // overflows: skipped, back to 4096; and so on every 6 steps (growth at 15, 21, 27; overflows at 16, 22, 28).
  CHECK(scales[3] == 4096);
  CHECK(scales[8] == 8192);
  CHECK(scales[9] == 4096);
  CHECK(scales[29] == 4096);
  CHECK(ls.skipped() == 8);
  CHECK(applied == 22);
  CHECK(ls.growths() == 4);
  const auto m = ls.metrics();
  REQUIRE(m.size() == 3);
  CHECK(m[0].first == "loss_scale");
  CHECK(m[0].second == ls.scale());
  CHECK(m[1].first == "skipped_steps");
  CHECK(m[1].second == 8);
  CHECK(m[2].second == 4);
  CHECK(m[2].first == "loss_scale_growths");

  // Growth is capped at max_scale: with small gradients the scale never passes it.
  DynamicLossScale capped(c);
  for (int i = 1; i <= 20; ++i) CHECK(capped.update(false, i));
  CHECK(capped.scale() == 65536);
  CHECK(capped.growths() == 0);
}

TEST_CASE("loss scale: an overflow storm below the floor stops, naming the step and suggesting bf16", "[loss_scale]") {
  LossScaleConfig c;
  c.init = 1024;
  c.floor = 1;
  DynamicLossScale ls(c);
  // Gradients of 1e5 overflow fp16 even unscaled: 1024 → 512 → … → 1 (10 skipped steps) → 0.5 < floor at the 11th.
  const std::vector<float> g = {1e5f, 1.0f};
  for (std::int64_t step = 100; step < 110; ++step) {
    std::vector<float> grads = scaled_fp16_grads(g, ls.scale());
    CHECK(!ls.update(!ls.unscale(grads.data(), 2), step));
  }
  CHECK(ls.scale() == 1);
  CHECK(ls.skipped() == 10);
  std::vector<float> grads = scaled_fp16_grads(g, ls.scale());
  REQUIRE_THROWS_WITH(ls.update(!ls.unscale(grads.data(), 2), 110),
                      Catch::Contains("overflow storm at step 110") && Catch::Contains("11 steps in a row") &&
                          Catch::Contains("below its floor 1") && Catch::Contains("--precision bf16"));
  // A finite step in between resets the run (it is the run that is reported, not the total).
  DynamicLossScale ls2(c);
  CHECK(!ls2.update(true, 1));
  CHECK(ls2.update(false, 2));
  CHECK(ls2.scale() == 512);
  // Bad settings are refused with what was expected.
  LossScaleConfig bad;
  bad.backoff = 1.5;
  REQUIRE_THROWS_WITH(DynamicLossScale(bad), Catch::Contains("0 < backoff < 1") && Catch::Contains("backoff 1.5"));
}

TEST_CASE("loss scale: the configured growth and backoff factors, a run broken by an overflow, growth up to max_scale",
          "[loss_scale]") {
  LossScaleConfig c;
  c.init = 64;
  c.growth = 4;
  c.backoff = 0.25;
  c.growth_interval = 3;
  c.max_scale = 1024;
  DynamicLossScale ls(c);
  CHECK(ls.update(false, 1));
  CHECK(ls.update(false, 2));
  CHECK(ls.scale() == 64);
  CHECK(ls.update(false, 3));
  CHECK(ls.scale() == 64 * 4);  // 3 finite steps: × growth
  CHECK(ls.update(false, 4));
  CHECK(!ls.update(true, 5));
  CHECK(ls.scale() == 64);  // × backoff; the finite step before it no longer counts
  CHECK(ls.update(false, 6));
  CHECK(ls.update(false, 7));
  CHECK(ls.scale() == 64);
  CHECK(ls.update(false, 8));
  CHECK(ls.scale() == 256);
  for (std::int64_t step = 9; step <= 11; ++step) CHECK(ls.update(false, step));
  CHECK(ls.scale() == 1024);  // growth to exactly max_scale is allowed
  for (std::int64_t step = 12; step <= 17; ++step) CHECK(ls.update(false, step));
  CHECK(ls.scale() == 1024);  // and no further
  CHECK(ls.growths() == 3);
  CHECK(ls.skipped() == 1);

  // The storm's message counts the overflows since the last finite step: 4 → 2, a finite step, 2 → 1 → 0.5 < 1.
  LossScaleConfig s;
  s.init = 4;
  DynamicLossScale storm(s);
  CHECK(!storm.update(true, 1));
  CHECK(storm.update(false, 2));
  CHECK(!storm.update(true, 3));
  REQUIRE_THROWS_WITH(storm.update(true, 4), Catch::Contains("overflowed fp16 in 2 steps in a row") &&
                                                 Catch::Contains("(3 steps skipped in all)"));
}

TEST_CASE("loss scale: unscale_grads divides by the scale and clips the unscaled norm; "
          "an overflow leaves all as it was",
          "[loss_scale]") {
  using liere::ParameterT;
  using liere::Shape;
  using liere::test::raise_error;
  // Unscaled gradients (3, −4) and (12): norm 13. Scaled by 2¹⁰, exact in float.
  const std::vector<double> g = {3, -4, 12};
  const double scale = 1024;
  ParameterT<float> a("a", Shape{2}), b("b", Shape{1});
  const std::vector<ParameterT<float>> params = {a, b};
  float* ga = a.grad().data();
  float* gb = b.grad().data();
  auto set_scaled = [&] { ga[0] = float(g[0] * scale), ga[1] = float(g[1] * scale), gb[0] = float(g[2] * scale); };

  // No clipping: the unscaled gradients exactly (a power-of-two scale).
  set_scaled();
  REQUIRE(liere::optim::unscale_grads(params, scale));
  CHECK(ga[0] == 3.0f);
  CHECK(ga[1] == -4.0f);
  CHECK(gb[0] == 12.0f);

  // Clipped to 2.6: g · 2.6 / (13 + 1e-6) (torch's clip_grad_norm_ on the unscaled gradients), within the two float
  // roundings of the coefficient and of the product.
  set_scaled();
  REQUIRE(liere::optim::unscale_grads(params, scale, 2.6));
  const double coef = 2.6 / (13 + 1e-6);
  double worst = 0;
  raise_error(worst, std::abs(ga[0] - g[0] * coef) / std::abs(g[0] * coef));
  raise_error(worst, std::abs(ga[1] - g[1] * coef) / std::abs(g[1] * coef));
  raise_error(worst, std::abs(gb[0] - g[2] * coef) / std::abs(g[2] * coef));
  CHECK(worst <= std::ldexp(1.0, -22));

  // An overflow: false, and every gradient as it was.
  set_scaled();
  gb[0] = std::numeric_limits<float>::infinity();
  CHECK(!liere::optim::unscale_grads(params, scale, 2.6));
  CHECK(ga[0] == float(g[0] * scale));
  CHECK(ga[1] == float(g[1] * scale));
}
