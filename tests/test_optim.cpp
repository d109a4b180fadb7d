// Adam / AdamW against PyTorch's published update formulas, parameter groups, the cosine schedule with warmup,
// clipping by global norm (also with the norm left in memory: no read of a device) and the stop on non-finite
// values, and the gated Adam step that lets a trainer queue the update before it reads the loss.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <liere/backend/kernels/clip.hpp>
#include <liere/optim/adam.hpp>
#include <liere/optim/clip.hpp>
#include <liere/optim/schedule.hpp>
#include <limits>
#include <random>
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
  // A group's own weight decay and lr_scale reach both decays: AdamW multiplies θ by 1 − lr·lr_scale·λ, Adam adds
  // the group's λθ to the gradient (not the configuration's default λ, here 0). Zero gradients, first step.
  ParameterT<double> dw("dw", Shape{1}), l2("l2", Shape{1});
  dw.value().fill(1.0);
  l2.value().fill(1.0);
  optim::AdamT<double> adamw_group(std::vector<optim::ParamGroupT<double>>{{{dw}, 0.1, 0.5, "half"}},
                                   optim::adamw_config(0.4, 0.0));
  adamw_group.step();  // m = v = 0: the decay alone moves θ
  CHECK(dw.data()[0] == Approx(1.0 - 0.4 * 0.5 * 0.1).epsilon(1e-14));
  optim::AdamT<double> adam_group(std::vector<optim::ParamGroupT<double>>{{{l2}, 0.1, 1.0, "l2"}},
                                  optim::adam_config(0.4, 0.0));
  adam_group.step();  // g' = 0 + 0.1·1: the first step moves θ by lr·g'/(|g'| + ε)
  CHECK(l2.data()[0] == Approx(1.0 - 0.4 * 0.1 / (0.1 + 1e-8)).epsilon(1e-14));
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

namespace {

// Parameters of 3, 20 000 (chunks of 8192 and a partial one) and 1 values with gradients of a fixed seed.
std::vector<Parameter> clip_params() {
  std::vector<Parameter> ps = {Parameter("a", Shape{3}), Parameter("b", Shape{100, 200}), Parameter("c", Shape{1})};
  std::mt19937 g(17);
  std::normal_distribution<float> n(0, 0.01f);
  for (const auto& p : ps)
    for (Index i = 0; i < p.numel(); ++i) p.grad().data()[i] = n(g);
  return ps;
}
std::vector<std::vector<float>> grads_of(const std::vector<Parameter>& ps) {
  std::vector<std::vector<float>> out;
  for (const auto& p : ps) out.emplace_back(p.grad().data(), p.grad().data() + p.numel());
  return out;
}
bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (a[k].size() != b[k].size() || std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0)
      return false;
  return true;
}

}  // namespace

TEST_CASE("the clipping coefficient and the optimizer's gate (the bodies every device runs)", "[optim]") {
  // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1.
  CHECK(kernels::clip_coefficient(13.0, 6.5, 1.0) == 6.5 / (13.0 + 1e-6));
  CHECK(kernels::clip_coefficient(13.0, 20.0, 1.0) == 1.0);
  CHECK(kernels::clip_coefficient(13.0, 6.5, 0.25) == 0.25 * (6.5 / (13.0 + 1e-6)));
  CHECK(kernels::clip_coefficient(13.0, INFINITY, 0.25) == 0.25);
  CHECK(kernels::clip_coefficient(std::nan(""), 6.5, 1.0) == 1.0);  // as std::min(1.0, NaN)
  CHECK(kernels::clip_from_sum(169.0, 6.5) == 6.5 / (13.0 + 1e-6));
  CHECK(kernels::clip_from_sum(0.0, 6.5) == 1.0);
  CHECK(kernels::clip_from_sum(std::nan(""), 6.5) == 1.0);  // not finite: nothing scaled (an ∞ norm would give 0)
  CHECK(kernels::clip_from_sum(INFINITY, 6.5) == 1.0);
  const float loss = 2.5f, nan_loss = std::numeric_limits<float>::quiet_NaN(), inf_loss = -INFINITY;
  const double sum = 4.0, inf_sum = INFINITY, nan_sum = std::nan("");
  CHECK(kernels::gate_open<float>(nullptr, nullptr));
  CHECK(kernels::gate_open(&loss, &sum));
  CHECK(kernels::gate_open<float>(&loss, nullptr));
  CHECK_FALSE(kernels::gate_open(&nan_loss, &sum));
  CHECK_FALSE(kernels::gate_open<float>(&inf_loss, nullptr));
  CHECK_FALSE(kernels::gate_open(&loss, &inf_sum));
  CHECK_FALSE(kernels::gate_open<float>(nullptr, &nan_sum));
  // The largest finite values are finite (only an exponent of all ones is NaN or ∞): the gate stays open and the
  // coefficient is the formula's.
  const float big_loss = std::numeric_limits<float>::max();
  const double big_sum = std::numeric_limits<double>::max();
  CHECK(kernels::gate_open(&big_loss, &big_sum));
  CHECK(kernels::clip_from_sum(big_sum, 6.5) == 6.5 / (std::sqrt(big_sum) + 1e-6));
}

TEST_CASE("clipping with the norm left in memory: clip_grad_norm's bits, and nothing scaled when it is not finite",
          "[optim]") {
  TensorT<double> sumsq(Shape{1});
  for (double max_norm : {0.5, 1e3, double(INFINITY)}) {  // above the norm (≈ 1.4) and below it, and no bound
    INFO("max_norm " << max_norm);
    const std::vector<Parameter> host = clip_params(), mem = clip_params();
    const double norm = optim::clip_grad_norm(host, max_norm);
    sumsq.data()[0] = -1;
    optim::clip_grad_norm_into(mem, max_norm, sumsq);
    CHECK(std::sqrt(sumsq.data()[0]) == norm);
    CHECK(same_bits(grads_of(mem), grads_of(host)));
    // and against the formula written out: Σ g² of the unclipped gradients, each × max_norm / (‖g‖ + 1e-6) if < 1
    const auto g0 = grads_of(clip_params());
    double total = 0;
    for (const auto& g : g0)
      for (float x : g) total += double(x) * double(x);
    CHECK(sumsq.data()[0] == Approx(total).epsilon(1e-12));
    const double c = std::min(1.0, max_norm / (std::sqrt(total) + 1e-6));
    CHECK((max_norm == 0.5) == (c < 1.0));
    const auto g1 = grads_of(mem);
    for (std::size_t k = 0; k < g0.size(); ++k)
      for (std::size_t i = 0; i < g0[k].size(); i += 997) CHECK(g1[k][i] == Approx(double(g0[k][i]) * c).epsilon(1e-6));
  }
  // A NaN or ∞ gradient: Σg² says so, nothing is scaled and nothing thrown (the caller reads Σg² with the loss).
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
    const std::vector<Parameter> ps = clip_params();
    ps[1].grad().data()[12345] = bad;
    const auto before = grads_of(ps);
    CHECK_NOTHROW(optim::clip_grad_norm_into(ps, 0.5, sumsq));
    CHECK_FALSE(std::isfinite(sumsq.data()[0]));
    CHECK(same_bits(grads_of(ps), before));
    CHECK_THROWS_WITH(optim::check_finite_grads(ps), Catch::Contains("'b'") && Catch::Contains("element 12345"));
  }
  const std::vector<Parameter> ps = clip_params();
  CHECK_THROWS_WITH(optim::clip_grad_norm_into(ps, 0.5, TensorT<double>(Shape{2})), Catch::Contains("one value"));
  CHECK_THROWS_WITH(optim::clip_grad_norm_into(ps, 0.5, TensorT<double>()), Catch::Contains("got none"));
  CHECK_THROWS_WITH(optim::clip_grad_norm_into(std::vector<Parameter>{}, 0.5, sumsq), Catch::Contains("no parameters"));
}

TEST_CASE("a gated Adam step: the ungated step's bits when the gate is open, nothing touched when it is closed",
          "[optim]") {
  using Gate = optim::Adam::StepGate;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto state_of = [](const optim::Adam& opt) {
    std::vector<std::vector<float>> out;
    for (const auto& s : opt.states()) {
      out.emplace_back(s.param.data(), s.param.data() + s.param.numel());
      out.emplace_back(s.m.data(), s.m.data() + s.m.numel());
      out.emplace_back(s.v.data(), s.v.data() + s.v.numel());
    }
    return out;
  };
  const std::vector<Parameter> pa = clip_params(), pb = clip_params();
  for (const auto* ps : {&pa, &pb})
    for (const auto& p : *ps)
      for (Index i = 0; i < p.numel(); ++i) p.data()[i] = 0.001f * float(i % 7);
  optim::Adam plain(pa, optim::adamw_config(1e-2, 0.05)), gated(pb, optim::adamw_config(1e-2, 0.05));
  const Tensor loss = Tensor::full(Shape{}, 2.5f), bad_loss = Tensor::full(Shape{}, nan);
  TensorT<double> sum = TensorT<double>::full(Shape{1}, 4.0), bad_sum = TensorT<double>::full(Shape{1}, INFINITY);
  for (int step = 0; step < 2; ++step) {  // open: the same bits (twice, so that m and v are not zero)
    plain.step();
    gated.step(step == 0 ? Gate{loss, sum} : Gate{loss, TensorT<double>()});
    CHECK(same_bits(state_of(gated), state_of(plain)));
  }
  const auto before = state_of(gated);
  for (const Gate& closed : {Gate{bad_loss, sum}, Gate{loss, bad_sum}, Gate{bad_loss, TensorT<double>()},
                             Gate{Tensor(), bad_sum}}) {
    gated.step(closed);
    CHECK(same_bits(state_of(gated), before));
  }
  CHECK(gated.steps() == 6);  // the count moves on (a trainer stops; set_steps restores it)
  CHECK_THROWS_WITH(gated.step(Gate{Tensor::full(Shape{2}, 1.0f), sum}), Catch::Contains("one value"));
  CHECK(gated.steps() == 6);  // a call that throws changes nothing, the count included
  CHECK(same_bits(state_of(gated), before));
}
