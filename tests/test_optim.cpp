// Adam / AdamW against PyTorch's published update formulas, parameter groups, the cosine schedule with warmup,
// clipping by global norm and the stop on non-finite values.
#include <catch2/catch.hpp>
#include <cmath>
#include <liere/optim/adam.hpp>
#include <liere/optim/clip.hpp>
#include <liere/optim/schedule.hpp>
#include <limits>
#include <vector>

using namespace liere;

namespace {

// The formulas of torch.optim.Adam / AdamW (torch 1.13, `_single_tensor_adam(w)`), written out independently:
//   t ← t + 1
//   Adam:  g ← g + λ θ                    AdamW:  θ ← θ (1 − lr λ)
//   m ← β1 m + (1 − β1) g,   v ← β2 v + (1 − β2) g²
//   θ ← θ − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε)
struct Reference {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> theta, m, v;
  int t = 0;
  void step(const std::vector<double>& grad) {
    ++t;
    for (std::size_t i = 0; i < theta.size(); ++i) {
      double g = grad[i];
      if (decoupled) theta[i] *= 1 - lr * wd;
      else g += wd * theta[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      theta[i] -= lr * mhat / denom;
    }
  }
};

// Gradient of ½‖θ − target‖².
template <class S>
void set_grad(const ParameterT<S>& p, const std::vector<double>& target) {
  for (Index i = 0; i < p.numel(); ++i) p.grad().data()[i] = p.data()[i] - S(target[std::size_t(i)]);
}

}  // namespace

TEST_CASE("Adam and AdamW follow PyTorch's formulas step by step", "[optim]") {
  const std::vector<double> theta0 = {0.5, -1.5, 2.0, 0.0}, target = {1.0, 1.0, -1.0, 0.25};
  for (bool decoupled : {true, false}) {
    INFO((decoupled ? "AdamW" : "Adam"));
    optim::AdamConfig cfg = decoupled ? optim::adamw_config(0.1, 0.05) : optim::adam_config(0.1, 0.05);
    ParameterT<double> p("theta", Shape{4});
    std::copy(theta0.begin(), theta0.end(), p.data());
    optim::AdamT<double> opt(std::vector<ParameterT<double>>{p}, cfg);
    Reference ref{0.1, 0.9, 0.999, 1e-8, 0.05, decoupled, theta0, std::vector<double>(4, 0.0), std::vector<double>(4, 0.0)};

    // Step 1 in closed form: m̂ = g, v̂ = g², so θ1 = θ0·(1 − lr λ) − lr·g/(|g| + ε) for AdamW and
    // θ1 = θ0 − lr·g'/(|g'| + ε) with g' = g + λ θ0 for Adam.
    set_grad(p, target);
    std::vector<double> g(4);
    for (int i = 0; i < 4; ++i) g[i] = p.data()[i] - target[i];
    opt.step();
    for (int i = 0; i < 4; ++i) {
      const double gi = decoupled ? g[i] : g[i] + 0.05 * theta0[i];
      const double expect = (decoupled ? theta0[i] * (1 - 0.1 * 0.05) : theta0[i]) - 0.1 * gi / (std::abs(gi) + 1e-8);
      CHECK(p.data()[i] == Approx(expect).epsilon(1e-14));
    }
    ref.step(g);
    // Steps 2..5 against the reference.
    for (int step = 2; step <= 5; ++step) {
      set_grad(p, target);
      for (int i = 0; i < 4; ++i) g[i] = p.data()[i] - target[i];
      opt.step();
      ref.step(g);
      for (int i = 0; i < 4; ++i) CHECK(p.data()[i] == Approx(ref.theta[i]).epsilon(1e-14));
      for (int i = 0; i < 4; ++i) CHECK(opt.states()[0].m.data()[i] == Approx(ref.m[i]).epsilon(1e-14));
      for (int i = 0; i < 4; ++i) CHECK(opt.states()[0].v.data()[i] == Approx(ref.v[i]).epsilon(1e-14));
    }
    CHECK(opt.steps() == 5);

    // float follows the double computation to float rounding.
    Parameter pf("theta", Shape{4});
    for (int i = 0; i < 4; ++i) pf.data()[i] = float(theta0[i]);
    optim::Adam optf(std::vector<Parameter>{pf}, cfg);
    Reference reff{0.1, 0.9, 0.999, 1e-8, 0.05, decoupled, theta0, std::vector<double>(4, 0.0), std::vector<double>(4, 0.0)};
    for (int step = 1; step <= 5; ++step) {
      set_grad(pf, target);
      for (int i = 0; i < 4; ++i) g[i] = pf.data()[i] - target[i];
      optf.step();
      reff.step(g);
    }
    for (int i = 0; i < 4; ++i) CHECK(pf.data()[i] == Approx(reff.theta[i]).epsilon(1e-6));
  }
}

TEST_CASE("Adam minimises a quadratic", "[optim]") {
  ParameterT<double> p("theta", Shape{3});
  const std::vector<double> target = {3, -2, 0.5};
  optim::AdamT<double> opt(std::vector<ParameterT<double>>{p}, optim::adam_config(0.05));
  for (int step = 0; step < 2000; ++step) {
    set_grad(p, target);
    opt.step();
  }
  for (int i = 0; i < 3; ++i) CHECK(p.data()[i] == Approx(target[i]).margin(1e-3));
}

TEST_CASE("parameter groups: no weight decay for biases, norms, tokens, position encodings", "[optim]") {
  CHECK_FALSE(optim::default_no_decay("blocks.0.attn.qkv.weight", {576, 192}));
  CHECK(optim::default_no_decay("blocks.0.attn.qkv.bias", {576}));
  CHECK(optim::default_no_decay("blocks.0.norm1.weight", {192}));
  CHECK(optim::default_no_decay("cls_token", {1, 1, 192}));
  CHECK(optim::default_no_decay("pos_embed", {1, 65, 192}));
  CHECK_FALSE(optim::default_no_decay("blocks.0.attn.pe.generators", {2, 64}));
  CHECK(optim::default_no_decay("blocks.0.attn.pe.generators", {2, 64}, {".pe."}));

  ParameterT<double> w("head.weight", Shape{2, 2}), b("head.bias", Shape{2}), tok("cls_token", Shape{1, 1, 2});
  for (const auto* p : {&w, &b, &tok}) p->value().fill(1.0);
  auto groups = optim::decay_groups<double>({w, b, tok}, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].params.size() == 1);
  CHECK(groups[1].params.size() == 2);
  optim::AdamT<double> opt(groups, optim::adamw_config(0.5));
  opt.step();  // zero gradients: only the decoupled decay moves the decayed parameters
  for (double v : w.value().to_vector()) CHECK(v == 1.0 - 0.5 * 0.1);
  for (double v : b.value().to_vector()) CHECK(v == 1.0);
  for (double v : tok.value().to_vector()) CHECK(v == 1.0);
  // lr_scale multiplies the learning rate of a group.
  ParameterT<double> q("q", Shape{1});
  q.value().fill(1.0);
  optim::AdamT<double> scaled(std::vector<optim::ParamGroupT<double>>{{{q}, 0.0, 0.5, "half"}}, optim::adam_config(0.2));
  q.grad().fill(1.0);
  scaled.step();
  CHECK(q.data()[0] == Approx(1.0 - 0.1 * 1.0 / (1.0 + 1e-8)).epsilon(1e-14));
  CHECK_THROWS_WITH((optim::AdamT<double>(std::vector<optim::ParamGroupT<double>>{{{q}, 0.0, 1.0, "a"}, {{q}, 0.0, 1.0, "b"}},
                                          optim::adam_config(0.1))),
                    Catch::Contains("'q' is in two groups"));
}

TEST_CASE("cosine schedule with linear warmup, per step and per epoch", "[optim]") {
  optim::CosineSchedule s;
  s.base_lr = 1e-3;
  s.min_lr = 1e-5;
  s.total = 100;
  s.warmup = 10;
  CHECK(s.at(0) == 0.0);
  CHECK(s.at(5) == Approx(5e-4).epsilon(1e-14));
  CHECK(s.at(10) == Approx(1e-3).epsilon(1e-14));  // warmup ends at the base rate
  CHECK(s.at(55) == Approx(1e-5 + 0.5 * (1e-3 - 1e-5)).epsilon(1e-14));  // half way: cos(π/2) = 0
  CHECK(s.at(32) == Approx(1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + std::cos(M_PI * 22.0 / 90.0))).epsilon(1e-14));
  CHECK(s.at(100) == 1e-5);
  CHECK(s.at(1000) == 1e-5);
  for (int t = 11; t < 100; ++t) CHECK(s.at(t) < s.at(t - 1));  // decreasing after warmup
  s.warmup_init_lr = 1e-6;
  CHECK(s.at(0) == 1e-6);
  // Per epoch: 50 steps per epoch, the rate changes at epoch boundaries only.
  s.steps_per_unit = 50;
  CHECK(s.at_step(125) == s.at(2));
  CHECK(s.at_step(100) == s.at_step(149));
  // No warmup: starts at the base rate.
  optim::CosineSchedule plain{1.0, 0.0, 4, 0};
  CHECK(plain.at(0) == 1.0);
  CHECK(plain.at(2) == Approx(0.5).epsilon(1e-14));
}

TEST_CASE("gradient clipping by global norm", "[optim]") {
  Parameter a("a", Shape{2}), b("b", Shape{1});
  a.grad().data()[0] = 3, a.grad().data()[1] = 4, b.grad().data()[0] = 12;  // ‖g‖ = 13
  const std::vector<Parameter> ps = {a, b};
  CHECK(optim::grad_norm(ps) == Approx(13).epsilon(1e-7));
  CHECK(optim::clip_grad_norm(ps, 20.0) == Approx(13).epsilon(1e-7));  // below the bound: untouched
  CHECK(a.grad().data()[0] == 3.0f);
  CHECK(optim::clip_grad_norm(ps, 6.5) == Approx(13).epsilon(1e-7));  // returns the norm before clipping
  CHECK(optim::grad_norm(ps) == Approx(6.5).epsilon(1e-6));
  CHECK(a.grad().data()[1] / a.grad().data()[0] == Approx(4.0 / 3.0).epsilon(1e-6));  // direction kept
}

TEST_CASE("non-finite loss or gradients stop with a clear message", "[optim]") {
  Parameter a("blocks.3.mlp.fc1.weight", Shape{2, 2}), b("head.bias", Shape{3});
  const std::vector<Parameter> ps = {a, b};
  CHECK_NOTHROW(optim::check_finite_grads(ps, 7));
  b.grad().data()[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(optim::check_finite_grads(ps, 7),
                    Catch::Contains("non-finite gradient at step 7 in 'head.bias' (3)") && Catch::Contains("element 1"));
  CHECK_THROWS_WITH(optim::clip_grad_norm(ps, 1.0), Catch::Contains("'head.bias'"));
  CHECK(std::isnan(optim::clip_grad_norm(ps, 1.0, /*error_if_nonfinite=*/false)));
  CHECK_THROWS_WITH(optim::check_finite_loss(std::nan(""), 12), Catch::Contains("non-finite loss nan at step 12"));
  CHECK_THROWS_WITH(optim::check_finite_loss(INFINITY), Catch::Contains("non-finite loss inf"));
  CHECK_NOTHROW(optim::check_finite_loss(2.3));
}
