// tests/test_encodings.cpp — every position encoding behind PositionEncoding: formulas on hand-checked cases,
// the relative-position identity of the commuting ones, parameter counts per sharing mode, per-layer sharing
// that really is per layer, positions and CLS policies, gradients through attention, flag parsing; the
// pe_diagnostics program's command line and --json file.
#include <catch2/catch.hpp>

#include <liere/attention.hpp>
#include <liere/pe/encoding.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numbers>
#include <numeric>

#include "skip.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace liere::test;
using liere::PEConfig;
using liere::PEGeometry;
using liere::PEKind;

namespace {

PEConfig config(const std::string& pe, int block = 8, const std::string& sharing = "layer-head") {
  PEConfig c;
  c.set("pe", pe);
  c.set("block", std::to_string(block));
  c.set("sharing", sharing);
  return c;
}

PEGeometry geometry(int layers, int heads, int d, int p, std::vector<int> grid, bool cls = true) {
  PEGeometry g;
  g.layers = layers;
  g.heads = heads;
  g.head_dim = d;
  g.pos_dim = p;
  g.embed_dim = heads * d;
  g.train_grid = std::move(grid);
  g.cls = cls;
  return g;
}

// max |R(p)ᵀR(q) − R(q − p)| over random pairs, for one parameter set.
double relative_deviation(const liere::PositionEncoding<double>& pe, int set, double range) {
  double m = 0;
  const int p = pe.geometry().pos_dim;
  for (int trial = 0; trial < 6; ++trial) {
    const std::vector<double> a = random_vector(p, -range, range), b = random_vector(p, -range, range);
    std::vector<double> d(p);
    for (int i = 0; i < p; ++i) d[i] = b[i] - a[i];
    const Eigen::MatrixXd dev = pe.rotation(set, a).transpose() * pe.rotation(set, b) - pe.rotation(set, d);
    raise_error(m, dev.cwiseAbs().maxCoeff<Eigen::PropagateNaN>());
  }
  return m;
}

}  // namespace

TEST_CASE("flags build a configuration; unknown values name the allowed ones", "[encodings][flags]") {
  PEConfig c = config("liere", 8);
  REQUIRE(c.kind == PEKind::liere);
  REQUIRE(c.label() == "liere8");
  REQUIRE(config("abs").label() == "abs");
  REQUIRE_THROWS_WITH(config("lire"), Catch::Contains("unknown --pe value 'lire'") && Catch::Contains("rope-mixed") &&
                                          Catch::Contains("comrope-ld"));
  REQUIRE_THROWS_WITH(config("liere", 5), Catch::Contains("--block 5 is not supported") &&
                                              Catch::Contains("2, 3, 4, 8, 16, 32, 64"));
  REQUIRE_THROWS_WITH(config("liere", 8, "per-layer"), Catch::Contains("layer-head, head, layer, shared"));
  PEConfig d;
  REQUIRE_THROWS_WITH(d.set("cls", "first"), Catch::Contains("identity, skip, center"));
  REQUIRE_THROWS_WITH(d.set("positions", "stretch"), Catch::Contains("official, extrapolate, interpolate"));
  REQUIRE_THROWS_WITH(d.set("init", "gauss"), Catch::Contains("2pi, uniform:S, normal:S"));
  // Scales in (0, 1e6]: past it float32 generators are noise, then infinite (1e300 overflowed into a forward that
  // blamed the training).
  for (const std::string bad :
       {"normal:1e300", "uniform:1e300", "normal:1000001", "uniform:0", "normal:-1", "normal:nan"})
    REQUIRE_THROWS_WITH(d.set("init", bad), Catch::Contains("--init " + bad + ": expected a scale in (0, 1e6]"));
  REQUIRE(d.set("init", "normal:1e6"));
  REQUIRE((d.init.kind == liere::PEInit::Kind::normal && d.init.scale == 1e6));
  REQUIRE(d.set("init", "uniform:1e-3"));
  REQUIRE((d.init.kind == liere::PEInit::Kind::uniform && d.init.scale == 1e-3));
  REQUIRE(!d.set("epochs", "3"));
}

TEST_CASE("encodings that do not fit the model give clear errors", "[encodings][bad-input]") {
  REQUIRE_THROWS_WITH(liere::PositionEncoding<float>(config("liere", 64), geometry(2, 2, 32, 2, {4, 4}), 0),
                      Catch::Contains("block 64 does not fit head dim 32"));
  REQUIRE_THROWS_WITH(liere::PositionEncoding<float>(config("rope-1d"), geometry(2, 2, 32, 2, {4, 4}), 0),
                      Catch::Contains("rope-1d encodes 1D sequences") && Catch::Contains("2 axes"));
  REQUIRE_THROWS_WITH(liere::PositionEncoding<float>(config("comrope-ap", 32), geometry(2, 2, 32, 2, {4, 4}), 0),
                      Catch::Contains("at least one block per axis"));
  liere::PositionEncoding<float> pe(config("liere", 8), geometry(2, 2, 32, 2, {4, 4}), 0);
  REQUIRE_THROWS_WITH(pe.set_grid({4, 4, 4}), Catch::Contains("3 axes"));
}

TEST_CASE("sharing modes give the parameter counts they should", "[encodings][sharing]") {
  const PEGeometry g = geometry(12, 12, 64, 2, {14, 14});  // ViT-B
  const std::size_t per8 = liere::liere_num_params(2, 64, 8);
  CHECK(liere::PositionEncoding<float>(config("liere", 8, "layer-head"), g, 0).num_params() == 144 * per8);
  CHECK(liere::PositionEncoding<float>(config("liere", 8, "head"), g, 0).num_params() == 12 * per8);
  CHECK(liere::PositionEncoding<float>(config("liere", 8, "layer"), g, 0).num_params() == 12 * per8);
  CHECK(liere::PositionEncoding<float>(config("liere", 8, "shared"), g, 0).num_params() == per8);
  CHECK(liere::PositionEncoding<float>(config("liere", 8), g, 0).num_params() == 64512);  // paper Table 10
  CHECK(liere::PositionEncoding<float>(config("liere", 64), g, 0).num_params() == 580608);
  CHECK(liere::PositionEncoding<float>(config("rope-mixed"), g, 0).num_params() == 144 * 2 * 32);
  CHECK(liere::PositionEncoding<float>(config("rope-mixed-official"), g, 0).num_params() == 9216);
  CHECK(liere::PositionEncoding<float>(config("liere-commute"), g, 0).num_params() == 64);  // one set, forced
  CHECK(liere::PositionEncoding<float>(config("visionllama"), g, 0).num_params() == 0);
  CHECK(liere::PositionEncoding<float>(config("none"), g, 0).num_params() == 0);
  CHECK(liere::PositionEncoding<float>(config("absolute"), g, 0).num_params() == (196 + 1) * 768);
  CHECK(liere::PositionEncoding<float>(config("comrope-ld", 8), g, 0).num_params() == 144 * (8 * 28 + 2 * 8));
  CHECK(liere::PositionEncoding<float>(config("comrope-ap", 8), g, 0).num_params() == 144 * 8 * 28);
  CHECK(liere::PositionEncoding<float>(config("string"), g, 0).num_params() == 144 * (2 * 32 + 64 * 63 / 2));
}

TEST_CASE("per-layer sharing really is per layer: each layer's parameters get their own gradient", "[encodings][sharing]") {
  // The official code reuses layer 0's rotation in every layer; here a loss that depends on layer 1 only must
  // put gradient into layer 1's parameters and none into layer 0's.
  const PEGeometry g = geometry(2, 2, 8, 2, {2, 2});
  liere::PositionEncoding<double> pe(config("liere", 4, "layer"), g, 3);
  REQUIRE(pe.num_sets() == 2);
  REQUIRE(pe.set_of(0, 1) == 0);
  REQUIRE(pe.set_of(1, 0) == 1);
  pe.prepare();
  const int T = pe.tokens();
  const liere::AttentionShape s{2, T, 2, 8};
  const std::vector<double> q = random_vector(std::size_t(s.size())), k = random_vector(q.size()), v = random_vector(q.size()),
                            dout = random_vector(q.size());
  // the tables of the two layers differ
  CHECK(pe.rotations(0).heads[0].table.data != pe.rotations(1).heads[0].table.data);
  liere::AttentionCache<double> cache;
  std::vector<double> out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
  liere::attention_forward(s, q.data(), k.data(), v.data(), 16, pe.rotations(1), {}, out.data(), cache);
  auto grads = pe.rotation_grads(1);
  liere::attention_backward(s, q.data(), k.data(), v.data(), 16, pe.rotations(1), {}, dout.data(), cache, dq.data(),
                            dk.data(), dv.data(), &grads);
  pe.backward();
  const std::size_t per = pe.num_params() / 2;
  double layer0 = 0, layer1 = 0;
  for (std::size_t i = 0; i < per; ++i) layer0 = std::max(layer0, std::abs(pe.grads()[i]));
  for (std::size_t i = per; i < 2 * per; ++i) layer1 = std::max(layer1, std::abs(pe.grads()[i]));
  CHECK(layer0 == 0.0);
  CHECK(layer1 > 1e-3);
}

TEST_CASE("grid positions follow the resolution policies", "[encodings][positions]") {
  // The official code's test: 64×64 image, 16×16 patches → positions {0, 1/3, 2/3, 1}².
  const auto p = liere::grid_positions({4, 4}, {4, 4}, liere::PositionUnit::range, liere::ResolutionPolicy::official);
  REQUIRE(p.size() == 32);
  CHECK(p[0] == 0.0);
  CHECK(p[1] == 0.0);
  CHECK(p[3] == Approx(1.0 / 3));  // token 1 = (0, 1)
  CHECK(p[30] == Approx(1.0));
  CHECK(p[31] == Approx(1.0));
  // Larger grid, official: linspace(0, n/E, n) — CIFAR 8 → 16 patches: step 0.143 → 0.133 (peers.md §3.4)
  CHECK(liere::grid_step(8, 8, liere::PositionUnit::range, liere::ResolutionPolicy::official) == Approx(1.0 / 7));
  CHECK(liere::grid_step(16, 8, liere::PositionUnit::range, liere::ResolutionPolicy::official) == Approx(2.0 / 15));
  CHECK(liere::grid_step(16, 8, liere::PositionUnit::range, liere::ResolutionPolicy::extrapolate) == Approx(1.0 / 7));
  CHECK(liere::grid_step(16, 8, liere::PositionUnit::range, liere::ResolutionPolicy::interpolate) == Approx(1.0 / 15));
  CHECK(liere::grid_step(16, 8, liere::PositionUnit::integer, liere::ResolutionPolicy::extrapolate) == 1.0);
  // 3D: (t, h, w), first axis outermost
  const auto p3 = liere::grid_positions({2, 2, 3}, {2, 2, 3}, liere::PositionUnit::integer, liere::ResolutionPolicy::official);
  CHECK(p3[3 * 5 + 0] == 0.0);  // token 5 = (0, 1, 2)
  CHECK(p3[3 * 5 + 1] == 1.0);
  CHECK(p3[3 * 5 + 2] == 2.0);
  CHECK(p3[3 * 11 + 0] == 1.0);
}

TEST_CASE("CLS policies: identity (position 0), skip (unrotated), center (grid centre)", "[encodings][cls]") {
  const PEGeometry g = geometry(1, 2, 8, 2, {3, 3});
  for (const char* cls : {"identity", "skip", "center"}) {
    CAPTURE(cls);
    PEConfig c = config("liere", 4);
    c.set("cls", cls);
    liere::PositionEncoding<double> pe(c, g, 1);
    pe.prepare();
    REQUIRE(pe.tokens() == 10);
    const auto& pos = pe.rotated_positions();
    if (std::string(cls) == "skip") {
      CHECK(pos.size() == 9 * 2);
      CHECK(pe.rotations(0).first_rotated == 1);
    } else {
      CHECK(pos.size() == 10 * 2);
      CHECK(pos[0] == (std::string(cls) == "center" ? 0.5 : 0.0));  // centre of {0, 0.5, 1}²
    }
  }
  // identity and skip give the same attention for a rotary encoding
  std::vector<std::vector<double>> outs;
  const liere::AttentionShape s{2, 10, 2, 8};
  const std::vector<double> q = random_vector(std::size_t(s.size())), k = random_vector(q.size()), v = random_vector(q.size());
  for (const char* cls : {"identity", "skip"}) {
    PEConfig c = config("liere", 4);
    c.set("cls", cls);
    liere::PositionEncoding<double> pe(c, g, 1);
    pe.prepare();
    liere::AttentionCache<double> cache;
    outs.emplace_back(q.size());
    liere::attention_forward(s, q.data(), k.data(), v.data(), 16, pe.rotations(0), {}, outs.back().data(), cache);
  }
  CHECK(max_rel_err(outs[0], outs[1]) < 1e-14);
}

TEST_CASE("commuting encodings are exactly relative; LieRE with blocks > 2 is not", "[encodings][relative]") {
  for (const char* kind : {"rope-mixed", "rope-mixed-official", "visionllama", "liere-commute", "comrope-ap", "comrope-ld", "string"}) {
    for (int p : {2, 3}) {
      CAPTURE(kind, p);
      liere::PositionEncoding<double> pe(config(kind, 4), geometry(1, 1, 24, p, std::vector<int>(p, 3)), 2);
      if (std::string(kind) == "string") {  // a non-trivial P
        auto cay = pe.group_values(1);
        for (std::size_t i = 0; i < cay.size(); ++i) cay[i] = 0.3 * normal();
      }
      CHECK(relative_deviation(pe, 0, 5.0) <= 1e-12);
    }
  }
  liere::PositionEncoding<double> r1(config("rope-1d"), geometry(1, 1, 16, 1, {8}), 0);
  CHECK(relative_deviation(r1, 0, 100.0) <= 1e-12);
  liere::PositionEncoding<double> l8(config("liere", 8), geometry(1, 1, 24, 2, {3, 3}), 2);
  CHECK(relative_deviation(l8, 0, 1.0) > 0.1);
}

TEST_CASE("baselines match their formulas on hand-checked cases", "[encodings][formulas]") {
  SECTION("visionllama: ω_j = exp(−4j/(n−1)), axis-major blocks, 60 of 64 dims in 3D") {
    liere::PositionEncoding<double> pe(config("visionllama"), geometry(1, 1, 64, 2, {8, 8}), 0);
    const std::vector<double> x = {0.7, -1.3};
    const Eigen::MatrixXd r = pe.rotation(0, x);
    for (int a = 0; a < 2; ++a)
      for (int j = 0; j < 16; ++j) {
        const int blk = a * 16 + j;
        const double th = x[a] * std::exp(-4.0 * j / 15);
        CHECK(r(2 * blk, 2 * blk) == Approx(std::cos(th)).epsilon(1e-14));
        CHECK(r(2 * blk, 2 * blk + 1) == Approx(std::sin(th)).epsilon(1e-14));
      }
    liere::PositionEncoding<double> p3(config("visionllama"), geometry(1, 1, 64, 3, {2, 4, 4}), 0);
    const Eigen::MatrixXd r3 = p3.rotation(0, std::vector<double>{1.0, 2.0, 3.0});
    CHECK((r3.bottomRightCorner(4, 4) - Eigen::MatrixXd::Identity(4, 4)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
        == 0.0);
    CHECK(r3(58, 58) != 1.0);  // pair 29 (axis 2, phase 9) turns
    // one phase per axis (n = D/P/2 = 1): ω_0 = exp(0) = 1, pair a turns by x_a
    liere::PositionEncoding<double> p1(config("visionllama"), geometry(1, 1, 4, 2, {2, 2}), 0);
    const Eigen::MatrixXd r1 = p1.rotation(0, x);
    for (int a = 0; a < 2; ++a) {
      CHECK(r1(2 * a, 2 * a) == Approx(std::cos(x[a])).epsilon(1e-14));
      CHECK(r1(2 * a, 2 * a + 1) == Approx(std::sin(x[a])).epsilon(1e-14));
    }
  }
  SECTION("rope-1d: RoFormer pairs (2j, 2j+1) turn by t·10000^(−2j/d)") {
    liere::PositionEncoding<double> pe(config("rope-1d"), geometry(1, 1, 16, 1, {32}), 0);
    const double t = 5.0;
    const Eigen::MatrixXd r = pe.rotation(0, std::vector<double>{t});
    for (int j = 0; j < 8; ++j) {
      const double th = t * std::pow(10000.0, -2.0 * j / 16);
      // x' = x cos − y sin, y' = x sin + y cos
      CHECK(r(2 * j, 2 * j) == Approx(std::cos(th)).epsilon(1e-14));
      CHECK(r(2 * j, 2 * j + 1) == Approx(-std::sin(th)).epsilon(1e-14));
      CHECK(r(2 * j + 1, 2 * j) == Approx(std::sin(th)).epsilon(1e-14));
    }
  }
  SECTION("rope-mixed: rope-vit's init and complex multiplication by exp(i(f_x t_x + f_y t_y))") {
    liere::PositionEncoding<double> pe(config("rope-mixed"), geometry(2, 2, 16, 2, {8, 8}), 0);
    auto w = pe.group_values(0);  // (sets, 2 axes, 8 pairs): parameter = −f
    for (int s = 0; s < 4; ++s) {
      double alpha = std::atan2(-w[(s * 2 + 0) * 8], -w[(s * 2 + 1) * 8]);  // axis 0 = y (rows), axis 1 = x
      for (int j = 0; j < 8; ++j) {
        const double fy = -w[(s * 2 + 0) * 8 + j], fx = -w[(s * 2 + 1) * 8 + j];
        const double mag = std::pow(10.0, -4.0 * (j % 4) / 16), dir = alpha + (j < 4 ? 0 : std::numbers::pi / 2);
        CHECK(fx == Approx(mag * std::cos(dir)).margin(1e-14));
        CHECK(fy == Approx(mag * std::sin(dir)).margin(1e-14));
      }
      // R((t_y, t_x)) turns pair j by θ = f_x t_x + f_y t_y like (a + ib)·e^{iθ}
      const double ty = 3, tx = 5;
      const Eigen::MatrixXd r = pe.rotation(s, std::vector<double>{ty, tx});
      for (int j = 0; j < 8; ++j) {
        const double th = -w[(s * 2 + 1) * 8 + j] * tx - w[(s * 2) * 8 + j] * ty;
        CHECK(r(2 * j, 2 * j) == Approx(std::cos(th)).epsilon(1e-14));
        CHECK(r(2 * j, 2 * j + 1) == Approx(-std::sin(th)).margin(1e-14));
      }
    }
    // different layers and heads draw different directions
    CHECK(w[0] != w[16]);
    // 3D: the first D/4 pairs along a random unit u₁, the next D/4 along a unit u₂ ⟂ u₁, |f| = 10^(−4k/D)
    liere::PositionEncoding<double> p3(config("rope-mixed"), geometry(2, 2, 16, 3, {2, 4, 4}), 0);
    auto w3 = p3.group_values(0);  // (sets, 3 axes, 8 pairs)
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      Eigen::Vector3d u1, u2;
      for (int a = 0; a < 3; ++a) u1(a) = -w3[(s * 3 + a) * 8], u2(a) = -w3[(s * 3 + a) * 8 + 4];
      CHECK(u1.norm() == Approx(1.0).epsilon(1e-14));
      CHECK(u2.norm() == Approx(1.0).epsilon(1e-14));
      CHECK(std::abs(u1.dot(u2)) <= 1e-14);
      for (int j = 0; j < 8; ++j)
        for (int a = 0; a < 3; ++a)
          CHECK(-w3[(s * 3 + a) * 8 + j]
              == Approx(std::pow(10.0, -4.0 * (j % 4) / 16) * (j < 4 ? u1 : u2)(a)).margin(1e-14));
    }
  }
  SECTION("liere / rope-mixed-official: U[0, 2π) generators; the rotation is exp of the generator") {
    for (const char* kind : {"liere", "rope-mixed-official"}) {
      liere::PositionEncoding<double> pe(config(kind, 8), geometry(1, 2, 16, 2, {4, 4}), 0);
      for (double x : pe.params()) CHECK((x >= 0 && x < 2 * std::numbers::pi));
      if (std::string(kind) == "liere") {
        // and fills it: 224 draws (2 sets, 2 axes, 2 blocks, 28), their min, max and mean (σ of the mean
        // 2π/√(12·224) ≈ 0.12) where U[0, 2π) puts them
        REQUIRE(pe.params().size() == 224);
        const auto [lo, hi] = std::minmax_element(pe.params().begin(), pe.params().end());
        CHECK(*lo < 0.1 * 2 * std::numbers::pi);
        CHECK(*hi > 0.9 * 2 * std::numbers::pi);
        CHECK(std::abs(std::accumulate(pe.params().begin(), pe.params().end(), 0.0) / 224.0 - std::numbers::pi) < 0.5);
      }
      const std::vector<double> p = {0.4, 0.9};
      const auto g = pe.generators(1);
      const Eigen::MatrixXd a = p[0] * g[0] + p[1] * g[1];
      CHECK((pe.rotation(1, p) - liere::exp(a)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-13);
    }
  }
  SECTION("comrope-ap: block k belongs to axis k mod Dim") {
    liere::PositionEncoding<double> pe(config("comrope-ap", 4), geometry(1, 1, 16, 2, {4, 4}), 0);
    const auto g = pe.generators(0);
    for (int k = 0; k < 4; ++k) {
      CHECK((g[k % 2].block(4 * k, 4 * k, 4, 4).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() > 0));
      CHECK(g[(k + 1) % 2].block(4 * k, 4 * k, 4, 4).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
    }
  }
  SECTION("comrope-ld: block k of axis a is θ_{a,k}·S_k") {
    liere::PositionEncoding<double> pe(config("comrope-ld", 4), geometry(1, 1, 8, 2, {4, 4}), 0);
    const auto g = pe.generators(0);
    const auto theta = pe.group_values(1);  // (1, 2, 2)
    for (int k = 0; k < 2; ++k) {
      const Eigen::MatrixXd b0 = g[0].block(4 * k, 4 * k, 4, 4), b1 = g[1].block(4 * k, 4 * k, 4, 4);
      CHECK((b0 / theta[0 * 2 + k] - b1 / theta[1 * 2 + k]).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-12);
    }
  }
  SECTION("string: P = (I − S)(I + S)⁻¹ is orthogonal and R(p) = Pᵀ·RoPE(p)·P") {
    liere::PositionEncoding<double> pe(config("string"), geometry(1, 1, 8, 2, {4, 4}), 0);
    auto cay = pe.group_values(1);
    for (std::size_t i = 0; i < cay.size(); ++i) cay[i] = 0.5 * normal();
    const std::vector<double> p = {1.0, 2.0};
    const Eigen::MatrixXd r = pe.rotation(0, p);
    CHECK((r.transpose() * r - Eigen::MatrixXd::Identity(8, 8)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-13);
    // the torus: the same encoding with S = 0
    liere::PositionEncoding<double> torus = pe;
    for (auto& x : torus.group_values(1)) x = 0;
    const Eigen::MatrixXd s = liere::hat(Eigen::Map<const Eigen::VectorXd>(cay.data(), cay.size()).eval());
    const Eigen::MatrixXd pm = (Eigen::MatrixXd::Identity(8, 8) - s) * inverse(Eigen::MatrixXd::Identity(8, 8) + s);
    CHECK((pm.transpose() * pm - Eigen::MatrixXd::Identity(8, 8)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-13);
    CHECK((r - pm.transpose() * torus.rotation(0, p) * pm).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-12);
  }
}

TEST_CASE("the absolute table is reproduced exactly on the training grid and interpolated elsewhere", "[encodings][absolute]") {
  const PEGeometry g = geometry(1, 2, 4, 2, {4, 4});
  liere::PositionEncoding<double> pe(config("absolute"), g, 5);
  REQUIRE(pe.num_params() == 17 * 8);
  std::vector<double> x(std::size_t(2) * 17 * 8, 0.0);
  pe.add_to_tokens(x.data(), 2);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 17 * 8; ++i) CHECK(x[std::size_t(b) * 17 * 8 + i] == pe.params()[i]);
  // another grid: interpolated, and the backward is its adjoint
  pe.set_grid({6, 6});
  REQUIRE(pe.tokens() == 37);
  std::vector<double> y(std::size_t(2) * 37 * 8, 0.0), dy = random_vector(y.size());
  pe.add_to_tokens(y.data(), 2);
  pe.zero_grad();
  pe.add_to_tokens_backward(dy.data(), 2);
  const std::vector<double> u = random_vector(pe.num_params());
  liere::PositionEncoding<double> pu = pe;
  std::copy(u.begin(), u.end(), pu.params().begin());
  std::vector<double> yu(y.size(), 0.0);
  pu.add_to_tokens(yu.data(), 2);
  CHECK(std::abs(dot(yu, dy) - dot(u, std::vector<double>(pe.grads().begin(), pe.grads().end()))) < 1e-11);
  // --cls skip: no CLS row (16 patches × 8), nothing added to the CLS token, the patches get the table as it is
  PEConfig cs = config("absolute");
  cs.set("cls", "skip");
  liere::PositionEncoding<double> ps(cs, g, 5);
  REQUIRE(ps.num_params() == 16 * 8);
  std::vector<double> z(std::size_t(17) * 8, 0.0);
  ps.add_to_tokens(z.data(), 1);
  for (int i = 0; i < 8; ++i) CHECK(z[std::size_t(i)] == 0.0);
  for (int i = 0; i < 16 * 8; ++i) CHECK(z[std::size_t(8 + i)] == ps.params()[i]);
}

TEST_CASE("gradients of attention to every encoding's parameters: central differences and a JVP test",
          "[encodings][backward]") {
  struct Case {
    const char* kind;
    int block;
    const char* cls;
    int pos_dim;
    int head_dim = 8;
    int batch = 2;
  };
  // head_dim 8 with block 4 has as many blocks as position axes (2): the cases with other head dims and batches
  // tell apart indices that coincide there (ComRoPE's (axis, block) layout: an audit's mutant, the two transposed,
  // passed every case with head_dim / block = pos_dim).
  const std::vector<Case> cases = {
      {"liere", 4, "identity", 2},       {"liere", 8, "center", 2},        {"rope-mixed", 2, "skip", 2},
      {"rope-mixed-official", 2, "identity", 2}, {"liere-commute", 2, "identity", 2}, {"comrope-ap", 4, "identity", 2},
      {"comrope-ld", 4, "identity", 2},  {"string", 2, "identity", 2},     {"liere", 4, "identity", 3},
      {"rope-mixed", 2, "identity", 1},  {"comrope-ap", 4, "identity", 2, 16, 3}, {"comrope-ap", 2, "skip", 3, 12, 3},
      {"comrope-ld", 4, "identity", 2, 16, 3}, {"comrope-ld", 2, "center", 3, 12, 1},
      {"string", 4, "identity", 3, 12, 3},     {"liere", 2, "identity", 3, 12, 3},
  };
  for (const Case& c : cases) {
    CAPTURE(c.kind, c.block, c.cls, c.pos_dim, c.head_dim, c.batch);
    PEConfig cfg = config(c.kind, c.block);
    cfg.set("cls", c.cls);
    const std::vector<int> grid = c.pos_dim == 1 ? std::vector<int>{4} : c.pos_dim == 2 ? std::vector<int>{2, 2} : std::vector<int>{2, 2, 1};
    liere::PositionEncoding<double> pe(cfg, geometry(1, 2, c.head_dim, c.pos_dim, grid), 11);
    if (std::string(c.kind) == "string")
      for (auto& x : pe.group_values(1)) x = 0.3 * normal();
    const int T = pe.tokens(), ld = 2 * c.head_dim;
    const liere::AttentionShape s{c.batch, T, 2, c.head_dim};
    const std::vector<double> q = random_vector(std::size_t(s.size())), k = random_vector(q.size()),
                              v = random_vector(q.size()), g = random_vector(q.size());
    auto loss = [&](liere::PositionEncoding<double>& e) {
      e.prepare();
      liere::AttentionCache<double> cache;
      std::vector<double> out(q.size());
      liere::attention_forward(s, q.data(), k.data(), v.data(), ld, e.rotations(0), {}, out.data(), cache);
      return dot(out, g);
    };
    pe.prepare();
    liere::AttentionCache<double> cache;
    std::vector<double> out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
    liere::attention_forward(s, q.data(), k.data(), v.data(), ld, pe.rotations(0), {}, out.data(), cache);
    auto grads = pe.rotation_grads(0);
    liere::attention_backward(s, q.data(), k.data(), v.data(), ld, pe.rotations(0), {}, g.data(), cache, dq.data(),
                              dk.data(), dv.data(), &grads);
    pe.zero_grad();
    pe.backward();
    const std::vector<double> analytic(pe.grads().begin(), pe.grads().end());
    const std::vector<double> w0(pe.params().begin(), pe.params().end());
    auto f = [&](const std::vector<double>& w) {
      liere::PositionEncoding<double> e = pe;
      std::copy(w.begin(), w.end(), e.params().begin());
      return loss(e);
    };
    CHECK(max_rel_err(analytic, numeric_gradient(f, w0)) < 1e-6);
    const std::vector<double> u = random_vector(w0.size());
    std::vector<double> wp = w0, wm = w0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      wp[i] += 1e-6 * u[i];
      wm[i] -= 1e-6 * u[i];
    }
    const double jvp = (f(wp) - f(wm)) / 2e-6;
    CHECK(std::abs(jvp - dot(u, analytic)) <= 1e-8 * std::max(1.0, std::abs(jvp)));
    // grads() accumulate until zero_grad(): a second backward adds the same gradient again
    pe.backward();
    std::vector<double> twice(analytic.size());
    for (std::size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * analytic[i];
    CHECK(max_rel_err(std::vector<double>(pe.grads().begin(), pe.grads().end()), twice) < 1e-14);
  }
}

TEST_CASE("different positions per sequence in one batch, and arbitrary coordinates", "[encodings][positions]") {
  liere::PositionEncoding<double> pe(config("liere", 4), geometry(1, 1, 8, 2, {2, 2}), 1);
  const std::vector<double> coords = {0.1, 0.2, 0.3, 0.7, 1.5, -0.2, 0.0, 0.9,   // sequence 0: 4 points
                                      2.0, 2.0, 0.5, 0.5, 0.25, 3.0, 1.0, 1.0};  // sequence 1
  pe.set_positions(coords, 2);
  pe.prepare();
  REQUIRE(pe.tokens() == 5);
  const auto rot = pe.rotations(0);
  REQUIRE(rot.heads[0].table.tokens == 2 * 5);  // one table row per (sequence, token)
  // row (b=1, t=2) is the rotation of sequence 1's second point
  liere::RotationTable<double> copy(10, 8, 4);
  std::copy_n(rot.heads[0].table.data, copy.data().size(), copy.data().begin());
  CHECK((copy.matrix(5 + 2) - pe.rotation(0, std::vector<double>{0.5, 0.5})).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
      < 1e-13);
  CHECK((copy.matrix(5) - Eigen::MatrixXd::Identity(8, 8)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);  // CLS
}

TEST_CASE("pe_diagnostics: --json is replaced whole at the end (a failed run leaves it as it was); a block that does "
          "not divide --head-dim and a --json folder that does not exist are usage errors before any work",
          "[encodings][program][needs-pe_diagnostics]") {
  namespace fs = std::filesystem;
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "pe_diagnostics";
  if (!fs::exists(exe)) LIERE_SKIP(exe.string() << " is not built (LIERE_BUILD_EXAMPLES=OFF?)");
  const TempDir dir("liere_pe_diagnostics");
  const std::string json = dir / "res.jsonl", log = dir / "log.txt";
  auto run = [&](const std::string& args) {
    return liere::test::run_logged("OMP_NUM_THREADS=1 " + exe.string() + " --layers 1 --heads 2 " + args, log);
  };
  auto said = [&](const std::string& text) { return read_bytes(log).find(text) != std::string::npos; };
  const std::string started = "pe_diagnostics: head dim";  // the first line of a run that measures

  REQUIRE(run("--pe liere --json " + json) == 0);
  const std::string good = read_bytes(json);
  CHECK(std::count(good.begin(), good.end(), '\n') == 1);  // one encoding, one line
  CHECK(good.find("\"label\":\"liere8\"") != std::string::npos);

  // A run that fails after it started (rope-mixed's own init needs a head dim divisible by 4): the file untouched.
  CHECK(run("--pe rope-mixed --head-dim 6 --json " + json) == 1);
  CHECK(said(started));
  CHECK(read_bytes(json) == good);

  // Blocks that do not divide the head dim: exit 2 naming the flags, nothing measured, the file untouched.
  CHECK(run("--pe liere --head-dim 7 --json " + json) == 2);
  CHECK(said("--pe liere8: blocks of 8 (--block) do not divide --head-dim 7"));
  CHECK_FALSE(said(started));
  CHECK(run("--pe all --block 8 --head-dim 12 --json " + json) == 2);  // liere8 and ComRoPE-8 would not fit
  CHECK(said("(--block) do not divide --head-dim 12"));
  CHECK(run("--pe rope-mixed --head-dim 7 --json " + json) == 2);  // a fixed block: --block does not help
  CHECK(said("--pe rope-mixed: blocks of 2 do not divide --head-dim 7"));
  CHECK(run("--pe all --head-dim 7") == 2);
  CHECK_FALSE(said(started));
  CHECK(read_bytes(json) == good);
  CHECK(run("--pe all --block 4 --head-dim 12") == 0);  // every encoding fits: it runs

  // A --json folder that does not exist: exit 2 saying why, before any work.
  CHECK(run("--pe liere --json " + (dir / "nodir/res.jsonl")) == 2);
  CHECK(said("--json " + (dir / "nodir/res.jsonl") + ": the folder '" + (dir / "nodir") + "' does not exist"));
  CHECK_FALSE(said(started));

  // Nothing left beside the results (no temporary file).
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"log.txt", "res.jsonl"});
}
