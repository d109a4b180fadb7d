// The whole ViT with every kind of encoding, in double: the loss gradient of every parameter tensor checked
// two independent ways —
//   * central differences on sampled entries of every parameter tensor (|a − n| / max(1, |a|, |n|) < 1e-6);
//   * the directional derivative along one random direction over all parameters at once,
//     ⟨∇L, u⟩ = (L(θ + εu) − L(θ − εu)) / 2ε, which also catches a gradient landing in the wrong tensor;
// plus: per-layer sharing gives each layer its own gradient, evaluation on another grid, mean pooling,
// the absolute table on the training grid, and the PyTorch reference of a tiny LieRE8 ViT (made by
// tests/make_vit_reference.py, committed in tests/data/vit_reference.safetensors): loss and every
// parameter gradient in float32 to 1e-4 relative.
#include <catch2/catch.hpp>
#include <cmath>
#include <liere/nn/engine.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

using liere::Index;
using liere::PEConfig;
using liere::Shape;
using liere::nn::VitConfig;
using liere::test::rel_err;

template <class S>
using Vit = liere::nn::VitT<S>;
template <class S>
using Params = liere::nn::ParamsT<S>;

VitConfig small_config(const std::string& pe, int block = 4, const std::string& sharing = "layer-head") {
  VitConfig c;
  c.image = {8, 12};  // a 2×3 grid of 4×4 patches: non-square on purpose
  c.channels = 2;
  c.patch = 4;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.mlp_hidden = 24;
  c.classes = 3;
  c.pe.set("pe", pe);
  if (pe == "liere" || pe == "comrope-ap" || pe == "comrope-ld") c.pe.set("block", std::to_string(block));
  c.pe.set("sharing", sharing);
  return c;
}

struct Batch {
  liere::TensorT<double> x;
  std::vector<int> y;
};

// A 3D ViT (videos): (frames, H, W) = (4, 8, 12) in 2×4×4 tubelets, a 2×2×3 grid of tokens with positions
// (t, h, w); head dim 8.
VitConfig video_config(const std::string& pe, int block = 4) {
  VitConfig c = small_config(pe, block);
  c.image = {4, 8, 12};
  c.tubelet = 2;
  return c;
}

// `size`: the input's spatial size (empty: the model's).
Batch random_batch(const VitConfig& c, int B, std::uint64_t seed, const std::vector<int>& size = {}) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  Shape s{B, c.channels};
  for (int d : size.empty() ? c.image : size) s.push_back(d);
  Batch b{liere::TensorT<double>(s), {}};
  for (Index i = 0; i < b.x.numel(); ++i) b.x.data()[i] = n(g);
  for (int i = 0; i < B; ++i) b.y.push_back(int(g() % c.classes));
  return b;
}

// Perturbs every parameter (timm's init leaves biases, LayerNorm and cls at constants, which would hide
// errors in their gradients).
void perturb(const Params<double>& params, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 0.3);
  for (const auto& p : params) {
    const bool pe = p.name().rfind("pe.", 0) == 0;
    for (Index i = 0; i < p.numel(); ++i) p.value().data()[i] += pe ? 0.2 * n(g) : n(g);
  }
}

double loss_of(Vit<double>& model, const Batch& b) {
  liere::TapeT<double> tape;
  auto _ = tape.no_grad();
  liere::VarT<double> x(b.x);
  return liere::ops::cross_entropy(tape, model.forward(tape, x), b.y).item();
}

double loss_and_grad(Vit<double>& model, const Params<double>& params, const Batch& b) {
  params.zero_grad();
  model.pe().encoding().zero_grad();
  liere::TapeT<double> tape;
  liere::VarT<double> x(b.x);
  auto loss = liere::ops::cross_entropy(tape, model.forward(tape, x), b.y);
  tape.backward(loss);
  return loss.item();
}

void check_gradients(const VitConfig& cfg, const std::vector<int>& input_size = {}) {
  Params<double> params;
  Vit<double> model(params, cfg, 7);
  perturb(params, 11);
  const Batch b = random_batch(cfg, 3, 5, input_size);
  loss_and_grad(model, params, b);

  // Copies of the analytic gradients (the finite differences below run forwards only).
  std::vector<std::vector<double>> grads;
  for (const auto& p : params) grads.emplace_back(p.grad().data(), p.grad().data() + p.numel());

  const double eps = 1e-6;
  double worst = 0;
  std::string worst_name;
  std::size_t k = 0, checked = 0;
  for (const auto& p : params) {
    const auto& g = grads[k++];
    const Index step = std::max<Index>(1, p.numel() / 6);  // ≈ 6 entries per tensor, first and last included
    for (Index i = 0; i < p.numel(); i += (i + step < p.numel() || i == p.numel() - 1) ? step : p.numel() - 1 - i) {
      double& v = p.value().data()[i];
      const double v0 = v;
      v = v0 + eps;
      const double lp = loss_of(model, b);
      v = v0 - eps;
      const double lm = loss_of(model, b);
      v = v0;
      const double e = rel_err(g[i], (lp - lm) / (2 * eps));
      ++checked;
      if (!std::isnan(worst) && !(e <= worst)) worst = e, worst_name = p.name() + "[" + std::to_string(i) + "]";
      if (i == p.numel() - 1) break;
    }
  }
  INFO(cfg.pe.label() << ": " << checked << " entries, worst " << worst << " at " << worst_name);
  CHECK(worst < 1e-6);

  // Directional derivative along a random direction over every parameter.
  std::mt19937_64 gu(3);
  std::normal_distribution<double> n(0, 1);
  std::vector<std::vector<double>> u;
  double analytic = 0;
  k = 0;
  for (const auto& p : params) {
    u.emplace_back(p.numel());
    for (Index i = 0; i < p.numel(); ++i) u.back()[i] = n(gu), analytic += u.back()[i] * grads[k][i];
    ++k;
  }
  auto shift = [&](double s) {
    std::size_t j = 0;
    for (const auto& p : params) {
      for (Index i = 0; i < p.numel(); ++i) p.value().data()[i] += s * u[j][i];
      ++j;
    }
  };
  const double h = 1e-6;
  shift(h);
  const double lp = loss_of(model, b);
  shift(-2 * h);
  const double lm = loss_of(model, b);
  shift(h);
  const double numeric = (lp - lm) / (2 * h);
  INFO(cfg.pe.label() << ": directional " << analytic << " vs " << numeric);
  CHECK(std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric)) < 1e-6);
}

}  // namespace

TEST_CASE("ViT gradients in double, every encoding kind", "[vit]") {
  for (const char* pe : {"none", "absolute", "visionllama", "rope-mixed", "rope-mixed-official", "liere-commute",
                         "liere", "comrope-ap", "comrope-ld", "string"}) {
    SECTION(pe) { check_gradients(small_config(pe)); }
  }
  SECTION("liere, block 8 = head dim, per-layer sharing") { check_gradients(small_config("liere", 8, "layer")); }
  SECTION("liere, mean pooling without a CLS token") {
    VitConfig c = small_config("liere", 4, "head");
    c.pool = liere::nn::Pool::mean;
    check_gradients(c);
  }
}

TEST_CASE("ViT: mean pooling averages every token (without an encoding, permuting patches changes nothing)", "[vit]") {
  // Without a position encoding every layer treats the tokens alike, so a mean over all of them cannot tell where a
  // patch came from: swapping two patches of the image leaves the logits as they were (to rounding). A pool that
  // missed a token, or read one token alone, would see the swap. The gradient checks cannot: any pool is consistent.
  VitConfig c = small_config("none");
  c.pool = liere::nn::Pool::mean;
  Params<double> params;
  Vit<double> model(params, c, 1);
  perturb(params, 4);
  const Batch b = random_batch(c, 2, 5);
  auto logits = [&](const liere::TensorT<double>& x) {
    liere::TapeT<double> tape;
    auto _ = tape.no_grad();
    return model.forward(tape, liere::VarT<double>(x)).value().to_vector();
  };
  // Patch (0, 0) and patch (1, 2) of the 2×3 grid of 4×4 patches swapped; then two pixels inside patch (0, 0).
  liere::TensorT<double> swapped = b.x.clone(), inside = b.x.clone();
  for (Index n = 0; n < 2; ++n)
    for (Index ch = 0; ch < c.channels; ++ch) {
      for (Index i = 0; i < 4; ++i)
        for (Index j = 0; j < 4; ++j) std::swap(swapped(n, ch, i, j), swapped(n, ch, 4 + i, 8 + j));
      std::swap(inside(n, ch, 0, 0), inside(n, ch, 3, 2));
    }
  const std::vector<double> y = logits(b.x), ys = logits(swapped), yi = logits(inside);
  double same = 0, moved = 0;
  for (std::size_t k = 0; k < y.size(); ++k) {
    liere::test::raise_error(same, rel_err(y[k], ys[k]));
    liere::test::raise_error(moved, rel_err(y[k], yi[k]));
  }
  CHECK(same < 1e-12);
  CHECK(moved > 1e-6);  // not vacuous: the logits do depend on the pixels
}

TEST_CASE("ViT: the absolute table is added to the tokens (its gradient is the CLS token's and the patch bias's)",
          "[vit]") {
  // Row 0 of pe.absolute meets only the CLS token, and rows 1.. meet the patch tokens only through patch bias + row:
  // d cls_token = d row 0, d patch bias = Σ_{n ≥ 1} d row n. The gradient checks cannot see a table that is never
  // added (its gradient and its finite differences are both 0); these identities can.
  VitConfig c = small_config("absolute");
  Params<double> params;
  Vit<double> model(params, c, 1);
  perturb(params, 6);
  const Batch b = random_batch(c, 2, 7);
  liere::TapeT<double> tape;
  liere::VarT<double> x(b.x);
  tape.backward(liere::ops::cross_entropy(tape, model.forward(tape, x), b.y));
  const auto table = params["pe.absolute"].grad().to_vector(), cls = params["cls_token"].grad().to_vector(),
             bias = params["patch_embed.proj.bias"].grad().to_vector();
  const Index D = c.dim, rows = Index(table.size()) / D;
  REQUIRE(rows == c.tokens());
  double worst = 0, size = 0;
  for (Index d = 0; d < D; ++d) {
    double patches = 0;
    for (Index n = 1; n < rows; ++n) patches += table[std::size_t(n * D + d)];
    liere::test::raise_error(worst, rel_err(table[std::size_t(d)], cls[std::size_t(d)]));
    liere::test::raise_error(worst, rel_err(patches, bias[std::size_t(d)]));
    size = std::max(size, std::abs(bias[std::size_t(d)]));
  }
  CHECK(worst < 1e-12);
  CHECK(size > 1e-3);  // not vacuous: the gradients are not all zero
}

TEST_CASE("3D ViT (tubelets, positions (t, h, w)) gradients in double", "[vit][3d]") {
  SECTION("liere Dim 3, block 4") { check_gradients(video_config("liere", 4)); }
  SECTION("liere Dim 3, block 8 = head dim (dense)") { check_gradients(video_config("liere", 8)); }
  SECTION("absolute on the training grid") { check_gradients(video_config("absolute")); }
  // 6 frames: a 3×2×3 grid, so the absolute table goes through trilinear interpolation and LieRE's positions
  // through the resolution policy.
  SECTION("absolute, trilinear interpolation to 6 frames") { check_gradients(video_config("absolute"), {6, 8, 12}); }
  SECTION("liere Dim 3 on 6 frames") { check_gradients(video_config("liere", 4), {6, 8, 12}); }
  for (const char* pe : {"rope-mixed", "visionllama", "liere-commute"}) {
    SECTION(pe) { check_gradients(video_config(pe)); }
  }
}

TEST_CASE("3D ViT: LieRE has a generator per axis (t, h, w) and the time axis matters", "[vit][3d]") {
  VitConfig c = video_config("liere", 4);
  Params<double> params;
  Vit<double> model(params, c, 1);
  perturb(params, 2);
  const auto& gen = params["pe.generators"];
  REQUIRE(gen.shape() == Shape{4, 3, 2, 6});  // (layers × heads, axes t h w, 8/4 blocks, 4·3/2 parameters)
  const Batch b = random_batch(c, 2, 3);
  loss_and_grad(model, params, b);
  // Every axis gets a gradient, and changing only the time generators changes the loss.
  for (int axis = 0; axis < 3; ++axis) {
    double norm = 0;
    for (Index s = 0; s < 4; ++s)
      for (Index k = 0; k < 12; ++k) norm += std::pow(gen.grad().data()[(s * 3 + axis) * 12 + k], 2);
    INFO("axis " << axis);
    CHECK(norm > 1e-12);
  }
  const double l0 = loss_of(model, b);
  for (Index s = 0; s < 4; ++s)
    for (Index k = 0; k < 12; ++k) gen.value().data()[(s * 3 + 0) * 12 + k] += 0.1;
  CHECK(std::abs(loss_of(model, b) - l0) > 1e-9);
}

TEST_CASE("ViT: per-layer sharing gives each layer its own parameters and gradient", "[vit]") {
  // The official code reuses layer 0's rotation in every layer; here layer 1's generators must matter.
  VitConfig c = small_config("liere", 4, "layer");
  Params<double> params;
  Vit<double> model(params, c, 1);
  perturb(params, 2);
  const Batch b = random_batch(c, 2, 3);
  loss_and_grad(model, params, b);
  const auto& gen = params["pe.generators"];
  REQUIRE(gen.shape()[0] == 2);  // one set per layer
  const Index per_set = gen.numel() / 2;
  double n0 = 0, n1 = 0;
  for (Index i = 0; i < per_set; ++i) n0 += std::pow(gen.grad().data()[i], 2), n1 += std::pow(gen.grad().data()[per_set + i], 2);
  CHECK(n0 > 1e-12);
  CHECK(n1 > 1e-12);
  // Changing layer 1's generators changes the loss.
  const double l0 = loss_of(model, b);
  for (Index i = per_set; i < gen.numel(); ++i) gen.value().data()[i] += 0.1;
  CHECK(std::abs(loss_of(model, b) - l0) > 1e-9);
}

TEST_CASE("ViT: forwards between a forward and its backward leave its gradients as they were", "[vit]") {
  // Each attention layer keeps what its backward reads (the rotated q, k and the probabilities) in a cache, and the
  // encoding's rows per set and its interpolation of the absolute table follow the last grid; a forward without
  // gradients on other images (an evaluation, also at another size), or a second forward with gradients, before the
  // first one's backward must not change the first one's gradients: bit for bit the gradients of the undisturbed
  // step, for every parameter, with and without rotations and transforms, the step at the training size and at
  // another (the absolute table interpolated to its grid). (Before: other gradients, silently, or a heap overflow.)
  for (const std::string pe : {"absolute", "liere", "string"}) {
    for (const std::vector<int>& size : {std::vector<int>{}, std::vector<int>{12, 16}}) {
      INFO(pe << (size.empty() ? "" : ", the step at 12 x 16"));
      const VitConfig c = small_config(pe);
      const Batch b = random_batch(c, 2, 3, size), other = random_batch(c, 3, 4),
                  larger = random_batch(c, 3, 5, {16, 16});
      std::vector<std::vector<double>> grads[4];
      for (int variant = 0; variant < 4; ++variant) {
        Params<double> params;
        Vit<double> model(params, c, 1);
        perturb(params, 2);
        liere::TapeT<double> tape;
        auto loss = liere::ops::cross_entropy(tape, model.forward(tape, liere::VarT<double>(b.x)), b.y);
        liere::TapeT<double> t2;
        if (variant == 1) {
          auto _ = t2.no_grad();
          (void)model.forward(t2, liere::VarT<double>(other.x));
        } else if (variant == 2) {
          (void)liere::ops::cross_entropy(t2, model.forward(t2, liere::VarT<double>(other.x)), other.y);
        } else if (variant == 3) {
          auto _ = t2.no_grad();
          (void)model.forward(t2, liere::VarT<double>(larger.x));
        }
        tape.backward(loss);
        for (const auto& p : params) grads[variant].emplace_back(p.grad().data(), p.grad().data() + p.numel());
      }
      CHECK(grads[1] == grads[0]);
      CHECK(grads[2] == grads[0]);
      CHECK(grads[3] == grads[0]);
    }
  }
}

TEST_CASE("ViT: parameter counts and names", "[vit]") {
  VitConfig c;
  c.set_size("base");
  c.image = {224, 224};
  c.patch = 16;
  c.classes = 1000;
  c.pe.set("pe", "liere");
  c.pe.set("block", "8");
  liere::nn::Params params;
  liere::nn::Vit model(params, c, 0);
  CHECK(model.pe().num_params() == 64512);  // paper Table 10
  // timm ViT-B/16 has 86,567,656 parameters with a learned pos_embed of 197×768 = 151,296.
  CHECK(params.numel() - model.pe().num_params() == 86567656 - 151296);
  CHECK(params.contains("blocks.11.attn.qkv.weight"));
  CHECK(params.contains("patch_embed.proj.weight"));
  CHECK(params.contains("cls_token"));
  CHECK(params["blocks.0.mlp.fc1.weight"].shape() == Shape{3072, 768});
  CHECK_THROWS_WITH(c.set_size("huge"), Catch::Contains("allowed: tiny, small, base, custom"));

  VitConfig a;
  a.set_size("base");
  a.image = {224, 224};
  a.patch = 16;
  a.classes = 1000;
  a.pe.set("pe", "absolute");
  liere::nn::Params pa;
  liere::nn::Vit ma(pa, a, 0);
  CHECK(pa.numel() == 86567656);
}

TEST_CASE("ViT: other input sizes follow the resolution policy; bad inputs are named", "[vit]") {
  for (const char* pe : {"liere", "absolute", "rope-mixed"}) {
    VitConfig c = small_config(pe);
    liere::nn::Params params;
    liere::nn::Vit model(params, c, 0);
    liere::Tape tape;
    auto _ = tape.no_grad();
    liere::Var x(liere::Tensor::zeros(Shape{2, 2, 16, 16}));
    CHECK(model.forward(tape, x).shape() == Shape{2, 3});
    liere::Var bad(liere::Tensor::zeros(Shape{2, 2, 10, 12}));
    CHECK_THROWS_WITH(model.forward(tape, bad), Catch::Contains("not a multiple of the patch size 4"));
    liere::Var chans(liere::Tensor::zeros(Shape{2, 3, 8, 12}));
    CHECK_THROWS_WITH(model.forward(tape, chans), Catch::Contains("expected (B, 2, H, W)"));
  }
}

TEST_CASE("ViT matches the PyTorch reference (tiny LieRE8 ViT, float32)", "[vit][reference]") {
  const std::string path = std::string(LIERE_TEST_DATA_DIR) + "/vit_reference.safetensors";
  const auto f = liere::nn::load_safetensors(path);
  VitConfig c;
  c.image = {16, 16};
  c.channels = 3;
  c.patch = 4;
  c.dim = 32;
  c.depth = 2;
  c.heads = 2;
  c.mlp_hidden = 128;
  c.classes = 10;
  c.pe.set("pe", "liere");
  c.pe.set("block", "8");
  liere::nn::Params params;
  liere::nn::Vit model(params, c, 0);
  auto to_float = [&](const std::string& name) {
    const auto d = f.tensor<double>(name);
    liere::Tensor t(d.shape());
    for (Index i = 0; i < d.numel(); ++i) t.data()[i] = float(d.data()[i]);
    return t;
  };
  for (const auto& p : params) {
    const auto t = to_float(p.name());
    REQUIRE(t.shape() == p.shape());
    std::copy(t.data(), t.data() + t.numel(), p.value().data());
  }
  const auto images = to_float("input.images");
  const auto labels_d = f.tensor<double>("input.labels");
  std::vector<int> labels;
  for (Index i = 0; i < labels_d.numel(); ++i) labels.push_back(int(labels_d.data()[i]));

  liere::Tape tape;
  liere::Var x(images);
  auto logits = model.forward(tape, x);
  auto loss = liere::ops::cross_entropy(tape, logits, labels);
  tape.backward(loss);

  const auto ref_loss = f.tensor<double>("ref.loss");
  CHECK(std::abs(loss.item() - ref_loss.data()[0]) / std::abs(ref_loss.data()[0]) < 1e-4);
  const auto ref_logits = f.tensor<double>("ref.logits");
  double le = 0, ln = 0;
  for (Index i = 0; i < ref_logits.numel(); ++i)
    le += std::pow(logits.data()[i] - ref_logits.data()[i], 2), ln += std::pow(ref_logits.data()[i], 2);
  CHECK(std::sqrt(le / ln) < 1e-4);
  for (const auto& p : params) {
    const auto g = f.tensor<double>("grad." + p.name());
    double e = 0, n = 0;
    for (Index i = 0; i < g.numel(); ++i) e += std::pow(p.grad().data()[i] - g.data()[i], 2), n += std::pow(g.data()[i], 2);
    INFO(p.name() << ": |g − ref| / |ref| = " << std::sqrt(e / n) << ", |ref| = " << std::sqrt(n));
    CHECK(n > 0);
    CHECK(std::sqrt(e / n) < 1e-4);
  }
}
