// tests/test_liere.cpp — LieRE<Dim, HeadDim, Block>: layout, rotations, the relative-position identity, the
// 1D equivalence with RoPE, batched rotation tables and every backward (central differences + adjoint); the
// liere_report program's command line.
#include <catch2/catch.hpp>

#include <liere/liere.hpp>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <vector>

#include "skip.hpp"
#include "temp_dir.hpp"
#include "test_util.hpp"

using namespace liere::test;
using Eigen::MatrixXd;

namespace {

constexpr double kTwoPi = 2 * std::numbers::pi;

double frob_dot(const MatrixXd& a, const MatrixXd& b) { return (a.array() * b.array()).sum(); }

double orthogonality(const MatrixXd& r) {
  return (r.transpose() * r - MatrixXd::Identity(r.rows(), r.cols())).cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
}

// max |R(p)ᵀR(q) − R(q − p)| over a grid of position pairs.
template <class PE>
double relative_deviation(const PE& pe, const std::vector<typename PE::Position>& ps) {
  double m = 0;
  for (const auto& p : ps)
    for (const auto& q : ps) {
      const MatrixXd d = MatrixXd(pe.rotation(p).transpose() * pe.rotation(q)) - MatrixXd(pe.rotation(q - p));
      raise_error(m, d.cwiseAbs().maxCoeff<Eigen::PropagateNaN>());
    }
  return m;
}

std::vector<Eigen::Vector2d> grid_positions(int n, double step) {  // n×n grid, first axis outermost
  std::vector<Eigen::Vector2d> ps;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) ps.emplace_back(i * step, j * step);
  return ps;
}

}  // namespace

// DESIGN.md's "Public API that must keep compiling" block, as it is written there (lines 68-82; the same
// declarations, names and comments), with the inputs it leaves to its reader: A (skew, 8×8), dR and dRp. The checks
// after it are what each line's comment promises.
TEST_CASE("DESIGN.md's public API compiles as written and does what its comments say", "[liere][api]") {
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  Eigen::Matrix<double, 8, 8> A = Eigen::Matrix<double, 8, 8>::Zero(), dR;
  for (int r = 0; r < 8; ++r)
    for (int c = r + 1; c < 8; ++c) A(c, r) = -(A(r, c) = u(g));
  for (int i = 0; i < 64; ++i) dR.data()[i] = u(g);
  Eigen::Matrix<double, 64, 64> dRp;
  for (int i = 0; i < 64 * 64; ++i) dRp.data()[i] = u(g);

  // ---- DESIGN.md, verbatim ----
  using M = Eigen::Matrix<double, 8, 8>;
  M R = liere::exp(A);                  // A skew-symmetric -> R in SO(8)
  M L = liere::log(R);                  // principal logarithm
  M dA = M::Zero(); liere::exp_backward(A, dR, dA);   // dA += dL/dA given dL/dR

  liere::LieRE<2, 64, 8, double> pe;    // <Dim, HeadDim, Block, Scalar>
  static_assert(decltype(pe)::num_params == 2 * 8 * 28);
  std::span<double> w = pe.params();    // layout [Dim][HeadDim/Block][Block(Block-1)/2]: each block's strict
                                        // upper triangle, row-major: (0,1),(0,2),...,(0,B-1),(1,2),...
  Eigen::Matrix<double, 2, 1> p{0.5, 1.25};
  Eigen::Matrix<double, 64, 64> G  = pe.generator(p);   // Σ_i p_i A_i, dense storage
  Eigen::Matrix<double, 64, 64> Rp = pe.rotation(p);    // exp(G)
  std::vector<double> dw(pe.num_params, 0.0);
  pe.rotation_backward(p, dRp, dw);                     // dw += dL/dparams given dL/dR (dense 64×64)
  // ---- end of DESIGN.md ----

  CHECK(orthogonality(R) < 1e-14);
  CHECK(R.determinant() == Approx(1.0).margin(1e-13));
  CHECK((L - A).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() < 1e-13);  // ‖A‖ < π: the principal logarithm is A
  const double h = 1e-6;  // dA against a central difference of <dR, exp(A + hV)> along a skew V
  M V = M::Zero();
  for (int r = 0; r < 8; ++r)
    for (int c = r + 1; c < 8; ++c) V(c, r) = -(V(r, c) = u(g));
  const double fd = ((dR.array() * (liere::exp(M(A + h * V)) - liere::exp(M(A - h * V))).array()).sum()) / (2 * h);
  CHECK((dA.array() * V.array()).sum() == Approx(fd).epsilon(1e-7));
  // Parameters: zero, so G = 0 and Rp = I; then drawn, and G, Rp, dw as promised.
  CHECK(w.size() == std::size_t(2 * 8 * 28));
  CHECK(G.cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
  CHECK((Rp - Eigen::Matrix<double, 64, 64>::Identity()).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
  for (double& x : w) x = u(g);
  G = pe.generator(p);
  Rp = pe.rotation(p);
  CHECK((G + G.transpose()).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
  // entry (0, 1) of block 0: coordinate 0 of axis 0 and of axis 1
  CHECK(G(0, 1) == Approx(0.5 * w[0] + 1.25 * w[std::size_t(8 * 28)]).epsilon(1e-15));
  CHECK(orthogonality(Rp) < 1e-13);
  std::fill(dw.begin(), dw.end(), 0.0);
  pe.rotation_backward(p, dRp, dw);
  std::vector<double> wv(w.size());
  for (double& x : wv) x = u(g);
  auto loss = [&](double t) {
    std::vector<double> keep(w.begin(), w.end());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = keep[i] + t * wv[i];
    const double v = (dRp.array() * pe.rotation(p).array()).sum();
    std::copy(keep.begin(), keep.end(), w.begin());
    return v;
  };
  double dot = 0;
  for (std::size_t i = 0; i < w.size(); ++i) dot += dw[i] * wv[i];
  CHECK(dot == Approx((loss(h) - loss(-h)) / (2 * h)).epsilon(1e-6));
}

TEST_CASE("the parameter layout is [Dim][HeadDim/Block][upper triangle, row-major]", "[liere][layout]") {
  liere::LieRE<2, 8, 4, double> pe;
  auto w = pe.params();
  REQUIRE(w.size() == 2 * 2 * 6);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = double(i + 1);
  const Eigen::Matrix<double, 8, 8> g = pe.generator(Eigen::Vector2d(1.0, 0.0));  // axis 0 only
  // Axis 0, block 0: (0,1)=1 (0,2)=2 (0,3)=3 (1,2)=4 (1,3)=5 (2,3)=6; block 1 starts at parameter 7.
  REQUIRE(g(0, 1) == 1);
  REQUIRE(g(1, 0) == -1);
  REQUIRE(g(0, 3) == 3);
  REQUIRE(g(2, 3) == 6);
  REQUIRE(g(4, 5) == 7);
  REQUIRE(g(6, 7) == 12);
  REQUIRE(g(0, 4) == 0);  // nothing outside the blocks
  const Eigen::Matrix<double, 8, 8> g1 = pe.generator(Eigen::Vector2d(0.0, 1.0));  // axis 1
  REQUIRE(g1(0, 1) == 13);
  REQUIRE(g1(6, 7) == 24);
  const Eigen::Matrix<double, 8, 8> gm = pe.generator(Eigen::Vector2d(0.5, 2.0));
  REQUIRE((gm - (0.5 * g + 2.0 * g1)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
}

TEST_CASE("ViT-B parameter counts match the paper's Table 10", "[liere][params]") {
  // 12 layers × 12 heads, HeadDim 64, 2D positions.
  REQUIRE(144 * liere::LieRE<2, 64, 2>::num_params == 9216);
  REQUIRE(144 * liere::LieRE<2, 64, 4>::num_params == 27648);
  REQUIRE(144 * liere::LieRE<2, 64, 8>::num_params == 64512);
  REQUIRE(144 * liere::LieRE<2, 64, 16>::num_params == 138240);
  REQUIRE(144 * liere::LieRE<2, 64, 32>::num_params == 285696);
  REQUIRE(144 * liere::LieRE<2, 64, 64>::num_params == 580608);
}

TEST_CASE("rotations are exp of the generator, orthogonal, det 1; zero params give the identity", "[liere]") {
  liere::LieRE<2, 64, 8, double> zero;
  REQUIRE(zero.rotation(Eigen::Vector2d(0.3, 0.7)) == Eigen::Matrix<double, 64, 64>::Identity());

  liere::LieRE<2, 64, 8, double> pe8;
  pe8.init_uniform(kTwoPi, 1);
  liere::LieRE<2, 64, 64, double> pe64;
  pe64.init_uniform(kTwoPi, 2);
  for (const Eigen::Vector2d& p : {Eigen::Vector2d(0, 0), Eigen::Vector2d(0.5, 1.25), Eigen::Vector2d(7, 7)}) {
    const MatrixXd r8 = pe8.rotation(p), r64 = pe64.rotation(p);
    CHECK(orthogonality(r8) <= 1e-12);
    CHECK(orthogonality(r64) <= 1e-12);
    CHECK(determinant(r64) == Approx(1.0).margin(1e-9));
    CHECK((r64 - MatrixXd(liere::exp(MatrixXd(pe64.generator(p))))).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-9);
    CHECK((r8 - MatrixXd(liere::exp(MatrixXd(pe8.generator(p))))).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-12);
  }
  // The origin (the official code's first grid position) is exactly the identity.
  REQUIRE(pe64.rotation(Eigen::Vector2d(0, 0)) == Eigen::Matrix<double, 64, 64>::Identity());
}

TEST_CASE("float32 rotation tables stay orthogonal at the official init with integer positions", "[liere][float]") {
  // Official init (U[0, 2π)) on an integer 8×8 grid: generator norms reach ~1e3–1e4.
  liere::LieRE<2, 64, 64, float> pe;
  pe.init_uniform(kTwoPi, 3);
  std::vector<float> pos;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) pos.insert(pos.end(), {float(i), float(j)});
  liere::RotationTable<float> table;
  pe.rotation_table(pos, 64, table);
  double worst = 0;
  for (int t = 0; t < 64; ++t) raise_error(worst, orthogonality(table.matrix(t).cast<double>()));
  CHECK(worst <= 1e-6);
  const double norm = spectral_norm(pe.generator(Eigen::Vector2f(7, 7)).cast<double>());
  CHECK(norm > 1e3);  // the test really is in the large-norm regime
}

TEST_CASE("relative-position identity: exact for Block 2, far from it for Block 8 and 64", "[liere][relative]") {
  // Block 2: all generator blocks are 2×2 and commute, so R(p)ᵀR(q) = R(q − p) at any positions.
  liere::LieRE<2, 64, 2, double> pe2;
  pe2.init_uniform(kTwoPi, 4);
  CHECK(relative_deviation(pe2, grid_positions(4, 1.0 / 3)) <= 1e-12);
  CHECK(relative_deviation(pe2, grid_positions(3, 7.5)) <= 1e-12);  // large positions too
  // Block 8 and 64 with the official init: the generators do not commute and the identity fails by O(1)
  // (the main job prints this number; docs/math.md discusses it).
  liere::LieRE<2, 64, 8, double> pe8;
  pe8.init_uniform(kTwoPi, 5);
  liere::LieRE<2, 64, 64, double> pe64;
  pe64.init_uniform(kTwoPi, 6);
  const double d8 = relative_deviation(pe8, grid_positions(4, 1.0 / 3));
  const double d64 = relative_deviation(pe64, grid_positions(4, 1.0 / 3));
  CHECK(d8 > 0.5);
  CHECK(d64 > 0.5);
  CHECK(d8 <= 2.0);  // entries of orthogonal matrices: the difference of two is at most 2
  CHECK(d64 <= 2.0);
  // With tiny parameters the deviation is second order, ‖[A₁, A₂]‖·|p|·|q|: small but not zero.
  liere::LieRE<2, 64, 8, double> small;
  small.init_uniform(1e-3, 7);
  const double ds = relative_deviation(small, grid_positions(3, 0.5));
  CHECK(ds > 1e-12);
  CHECK(ds < 1e-5);
}

TEST_CASE("in 1D a LieRE rotation is S^T RoPE(lambda t) S with S independent of t (Appendix A)", "[liere][1d]") {
  liere::LieRE<1, 16, 16, double> pe;
  pe.init_uniform(1.0, 8);
  const MatrixXd a = pe.generator(Eigen::Matrix<double, 1, 1>(1.0));
  // Real Schur form of the skew-symmetric A: A = Sᵀ Λ S with Λ = blockdiag([[0, λ_k], [−λ_k, 0]]).
  MatrixXd u, lam;
  real_schur(a, u, lam);
  const MatrixXd s = u.transpose();
  for (double t : {0.0, 0.3, 1.0, 2.5, 17.0}) {
    CAPTURE(t);
    MatrixXd rope = MatrixXd::Identity(16, 16);  // RoPE(λ t): 2×2 rotations by λ_k t
    for (int i = 0; i + 1 < 16; i += 2) {
      const double th = t * (lam(i, i + 1) - lam(i + 1, i)) / 2;
      rope(i, i) = rope(i + 1, i + 1) = std::cos(th);
      rope(i, i + 1) = std::sin(th);
      rope(i + 1, i) = -std::sin(th);
    }
    const MatrixXd r = pe.rotation(Eigen::Matrix<double, 1, 1>(t));
    CHECK((r - s.transpose() * rope * s).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-12 * std::max(1.0, t));
  }
}

TEST_CASE("rotation_backward: central differences and the adjoint test", "[liere][backward]") {
  auto run = [](auto pe, double scale, const Eigen::Vector2d& p) {
    using PE = decltype(pe);
    pe.init_uniform(scale, 9);
    const int n = PE::num_params;
    const MatrixXd g = random_like(MatrixXd(PE::head_dim, PE::head_dim));
    std::vector<double> w0(pe.params().begin(), pe.params().end());
    auto f = [&](const std::vector<double>& w) {
      PE q;
      std::copy(w.begin(), w.end(), q.params().begin());
      return frob_dot(q.rotation(p), g);
    };
    std::vector<double> dw(n, 0.0);
    pe.rotation_backward(p, g, dw);
    CHECK(max_rel_err(dw, numeric_gradient(f, w0)) < 1e-6);
    // Adjoint: ⟨J u, G⟩ = ⟨u, Jᵀ G⟩ where J u = Σ_k L(A_k, Σ_i p_i hat(u_{i,k})) (forward mode, blockwise).
    const std::vector<double> u = random_vector(n);
    PE du;
    std::copy(u.begin(), u.end(), du.params().begin());
    const MatrixXd gen = pe.generator(p), dgen = du.generator(p);
    MatrixXd ju = MatrixXd::Zero(PE::head_dim, PE::head_dim);
    for (int k = 0; k < PE::num_blocks; ++k) {
      const int b = PE::block, o = k * b;
      ju.block(o, o, b, b) = liere::exp_frechet(MatrixXd(gen.block(o, o, b, b)), MatrixXd(dgen.block(o, o, b, b)));
    }
    const double lhs = frob_dot(ju, g), rhs = dot(u, dw);
    CHECK(std::abs(lhs - rhs) <= 1e-11 * std::max(1.0, std::abs(lhs)));
  };
  run(liere::LieRE<2, 8, 2, double>{}, kTwoPi, Eigen::Vector2d(0.4, 0.9));
  run(liere::LieRE<2, 12, 3, double>{}, kTwoPi, Eigen::Vector2d(0.4, 0.9));
  run(liere::LieRE<2, 16, 8, double>{}, kTwoPi, Eigen::Vector2d(0.4, 0.9));
  run(liere::LieRE<2, 16, 8, double>{}, 1.0, Eigen::Vector2d(3.0, 5.0));
  run(liere::LieRE<2, 16, 16, double>{}, kTwoPi, Eigen::Vector2d(1.0, 1.0));
  run(liere::LieRE<2, 32, 32, double>{}, kTwoPi, Eigen::Vector2d(0.25, 0.5));
  // zero generators (A = 0 in every block: the scaling-and-squaring derivative's own branch, L(0, E) = E)
  run(liere::LieRE<2, 16, 8, double>{}, 0.0, Eigen::Vector2d(0.4, -0.9));
  run(liere::LieRE<2, 64, 64, double>{}, 0.0, Eigen::Vector2d(1.5, 0.25));
}

TEST_CASE("rotation tables equal the per-position rotations; their backward the sum of per-position ones",
          "[liere][table]") {
  auto run = [](auto pe) {
    using PE = decltype(pe);
    pe.init_uniform(kTwoPi, 10);
    const int t = 7;
    const std::vector<double> pos = random_vector(std::size_t(t) * 2, 0.0, 1.0);
    liere::RotationTable<double> table;
    pe.rotation_table(pos, t, table);
    REQUIRE(table.tokens() == t);
    liere::RotationTable<double> dtable(t, PE::head_dim, PE::block);
    for (double& x : dtable.data()) x = normal();
    std::vector<double> dw(PE::num_params, 0.0), dw_ref(PE::num_params, 0.0);
    pe.rotation_table_backward(pos, t, dtable, dw);
    for (int i = 0; i < t; ++i) {
      const Eigen::Vector2d p(pos[2 * i], pos[2 * i + 1]);
      CHECK((table.matrix(i) - MatrixXd(pe.rotation(p))).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
      pe.rotation_backward(p, dtable.matrix(i), dw_ref);
    }
    CHECK(max_rel_err(dw, dw_ref) < 1e-12);
  };
  run(liere::LieRE<2, 16, 2, double>{});
  run(liere::LieRE<2, 16, 4, double>{});
  run(liere::LieRE<2, 64, 8, double>{});
  run(liere::LieRE<2, 64, 64, double>{});
}

TEST_CASE("several parameter sets in one call equal one call per set", "[liere][table]") {
  const liere::LieREGeometry geo{3, 2, 16, 8};  // e.g. the 3 heads of a layer
  std::vector<double> params(geo.num_params());
  liere::liere_init_uniform<double>(params, kTwoPi, 13);
  const int t = 5;
  const std::vector<double> pos = random_vector(std::size_t(t) * 2, 0.0, 1.0);
  liere::RotationTable<double> all;
  liere::liere_table_forward<double>(geo, params, pos, t, all);
  REQUIRE(all.tokens() == 3 * t);
  liere::RotationTable<double> dall(3 * t, 16, 8);
  for (double& v : dall.data()) v = normal();
  std::vector<double> dparams(params.size(), 0.0);
  liere::liere_table_backward<double>(geo, params, pos, t, dall, dparams);
  const int per = geo.params_per_set();
  for (int set = 0; set < 3; ++set) {
    const std::span<const double> ps(params.data() + set * per, per);
    liere::RotationTable<double> one, done(t, 16, 8);
    liere::liere_table_forward<double>({1, 2, 16, 8}, ps, pos, t, one);
    for (int i = 0; i < t; ++i)
      CHECK((one.matrix(i) - all.matrix(set * t + i)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
    std::copy_n(dall.view(set * t, t).data, done.data().size(), done.data().begin());
    std::vector<double> d1(per, 0.0);
    liere::liere_table_backward<double>({1, 2, 16, 8}, ps, pos, t, done, d1);
    CHECK(max_rel_err(d1, std::vector<double>(dparams.begin() + set * per, dparams.begin() + (set + 1) * per)) < 1e-14);
  }
}

TEST_CASE("rotate applies a table to (B, T, H, D) buffers; rotate_backward is its adjoint", "[liere][rotate]") {
  const int b = 3, t = 5, h = 2, d = 16;
  for (int block : {2, 8, 16}) {
    for (bool per_sequence : {false, true}) {
      CAPTURE(block, per_sequence);
      const int rows = per_sequence ? b * t : t;
      liere::RotationTable<double> table(rows, d, block);
      // arbitrary (not orthogonal) tables: rotate is linear in both arguments, the test covers that
      for (double& v : table.data()) v = normal();
      const std::size_t n = std::size_t(b) * t * h * d;
      const std::vector<double> x = random_vector(n), g = random_vector(n);
      for (int head : {liere::kAllHeads, 1}) {
        std::vector<double> y(n, 0.0);
        if (head != liere::kAllHeads) y = x;  // heads not rotated keep their values
        liere::rotate(table, x.data(), y.data(), b, t, h, head);
        // reference: dense per-vector products
        for (int bi = 0; bi < b; ++bi)
          for (int ti = 0; ti < t; ++ti)
            for (int hi = 0; hi < h; ++hi) {
              const std::size_t off = ((std::size_t(bi) * t + ti) * h + hi) * d;
              const Eigen::Map<const Eigen::VectorXd> xv(x.data() + off, d), yv(y.data() + off, d);
              const bool rotated = head == liere::kAllHeads || head == hi;
              const Eigen::VectorXd ref = rotated ? Eigen::VectorXd(table.matrix(per_sequence ? bi * t + ti : ti) * xv) : Eigen::VectorXd(xv);
              CHECK((yv - ref).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-12);
            }
        // in place
        std::vector<double> inplace = x;
        liere::rotate(table, inplace.data(), inplace.data(), b, t, h, head);
        if (head == liere::kAllHeads) CHECK(max_rel_err(inplace, y) == 0.0);
        // backward, adjoint test in both arguments: ⟨rotate(T, u), g⟩ = ⟨u, dx⟩ and ⟨rotate(U, x), g⟩ = ⟨U, dT⟩
        std::vector<double> dx(n, 0.0);
        liere::RotationTable<double> dtab(rows, d, block);
        liere::rotate_backward(table, x.data(), g.data(), dx.data(), &dtab, b, t, h, head);
        std::vector<double> yx(n, 0.0);
        liere::rotate(table, x.data(), yx.data(), b, t, h, head);
        double lhs = 0;
        for (std::size_t i = 0; i < n; ++i) lhs += yx[i] * g[i];
        CHECK(std::abs(lhs - dot(x, dx)) <= 1e-12 * std::max(1.0, std::abs(lhs)));
        std::vector<double> tab(table.data().begin(), table.data().end()), dt(dtab.data().begin(), dtab.data().end());
        CHECK(std::abs(lhs - dot(tab, dt)) <= 1e-12 * std::max(1.0, std::abs(lhs)));
        // central differences in the table entries (a few of them)
        for (int probe = 0; probe < 5; ++probe) {
          const std::size_t j = std::size_t(probe * 37) % table.data().size();
          auto f = [&](double delta) {
            liere::RotationTable<double> tp = table;
            tp.data()[j] += delta;
            std::vector<double> yy(n, 0.0);
            liere::rotate(tp, x.data(), yy.data(), b, t, h, head);
            return dot(yy, g);
          };
          CHECK(rel_err((f(1e-6) - f(-1e-6)) / 2e-6, dt[j]) < 1e-6);
        }
      }
    }
  }
}

namespace {
// cpu::rotate / rotate_backward for blocks above 16 with a table shared by the batch (the row panels of
// backend/cpu/row_panels.hpp and the dR GEMMs), in the attention's geometry: q in a packed qkv buffer (token stride
// 3·H·D, values of k and v between the rows), outputs in another layout. Reference: the sums written out in long
// double. Batches of 1, 11, 13 and 25 rows give full panels (6 rows under AVX-512, 3 under AVX2, 12 at b = 32 in
// float under AVX-512), the prefetch and the remainder rows.
template <class S>
void check_large_block_rotation(int block, int batch, int head) {
  CAPTURE(block, batch, head);
  const int T = 3, H = 2, D = 64, nb = D / block, ld = 3 * H * D;
  const liere::HeadsLayout xl{std::int64_t(T) * ld, ld}, yl = liere::HeadsLayout::contiguous(T, H, D);
  auto filled = [](std::size_t n) {
    std::vector<S> v(n);
    for (S& e : v) e = S(normal());
    return v;
  };
  const std::vector<S> r = filled(std::size_t(T) * nb * block * block), qkv = filled(std::size_t(batch) * T * ld);
  const std::vector<S> dy = filled(std::size_t(batch) * T * H * D), dx0 = filled(qkv.size()), dr0 = filled(r.size());
  const liere::RotationTableView<const S> table{r.data(), T, D, block};
  const S nan = std::numeric_limits<S>::quiet_NaN();
  std::vector<S> y(dy.size(), nan), dx = dx0, dr = dr0;
  liere::cpu::rotate<S>(table, qkv.data(), xl, y.data(), yl, batch, T, H, head);
  liere::cpu::rotate_backward<S>(table, qkv.data(), xl, dy.data(), yl, dx.data(), xl,
                                 liere::RotationTableView<S>{dr.data(), T, D, block}, batch, T, H, head);
  // reference
  std::vector<long double> dr_ref(dr0.begin(), dr0.end());
  double ey = 0, edx = 0, edr = 0;
  bool untouched = true;
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const S* x = qkv.data() + b * xl.batch + t * xl.token + h * D;
        const std::size_t yo = std::size_t(b * yl.batch + t * yl.token + h * D), xo = std::size_t(x - qkv.data());
        if (head != liere::kAllHeads && h != head) {
          for (int i = 0; i < D; ++i) untouched = untouched && std::isnan(y[yo + i]) && dx[xo + i] == dx0[xo + i];
          continue;
        }
        for (int k = 0; k < nb; ++k) {
          const S* blk = table.block_data(t, k);
          for (int i = 0; i < block; ++i) {
            long double fy = 0, fx = dx0[xo + k * block + i];
            for (int j = 0; j < block; ++j) {
              fy += (long double)blk[i * block + j] * x[k * block + j];
              fx += (long double)blk[j * block + i] * dy[yo + k * block + j];
              dr_ref[std::size_t(t) * nb * block * block + std::size_t(k) * block * block + i * block + j] +=
                  (long double)dy[yo + k * block + i] * x[k * block + j];
            }
            raise_error(ey, double(std::abs(y[yo + k * block + i] - fy)));
            raise_error(edx, double(std::abs(dx[xo + k * block + i] - fx)));
          }
        }
      }
  for (std::size_t i = 0; i < dr.size(); ++i) raise_error(edr, double(std::abs(dr[i] - dr_ref[i])));
  // the packed buffer's k and v columns keep their values
  for (std::size_t i = 0; i < dx.size(); ++i) untouched = untouched && (i % ld < std::size_t(H * D) || dx[i] == dx0[i]);
  // sums of `block` (dR: batch·heads) products of N(0, 1) values: a few units of rounding times the sum's size
  const double u = std::numeric_limits<S>::epsilon(), tol = 8 * u * block, tol_dr = 8 * u * std::max(block, batch * H);
  CHECK(untouched);
  CHECK(ey <= tol);
  CHECK(edx <= tol);
  CHECK(edr <= tol_dr);
  // in place: y = R·y
  if (head == liere::kAllHeads) {
    std::vector<S> inplace(dy.size());
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < T; ++t)
        std::copy_n(qkv.data() + b * xl.batch + t * xl.token, H * D, inplace.data() + b * yl.batch + t * yl.token);
    liere::cpu::rotate<S>(table, inplace.data(), yl, inplace.data(), yl, batch, T, H);
    CHECK(inplace == y);
  }
}
}  // namespace

TEST_CASE("cpu::rotate and rotate_backward for blocks of 32 and 64 (row panels) in the attention's strided layout",
          "[liere][rotate]") {
  const int block = GENERATE(32, 64);
  const int batch = GENERATE(1, 11, 13, 25);
  for (int head : {liere::kAllHeads, 1}) {
    check_large_block_rotation<float>(block, batch, head);
    check_large_block_rotation<double>(block, batch, head);
  }
}

TEST_CASE("the whole chain params -> table -> rotate(q) has the right gradient", "[liere][chain]") {
  liere::LieRE<2, 16, 8, double> pe;
  pe.init_uniform(kTwoPi, 11);
  const int b = 2, t = 4, h = 2, d = 16;
  const std::vector<double> pos = random_vector(std::size_t(t) * 2, 0.0, 1.0);
  const std::size_t n = std::size_t(b) * t * h * d;
  const std::vector<double> x = random_vector(n), g = random_vector(n);
  auto loss = [&](const std::vector<double>& w) {
    liere::LieRE<2, 16, 8, double> q;
    std::copy(w.begin(), w.end(), q.params().begin());
    liere::RotationTable<double> table;
    q.rotation_table(pos, t, table);
    std::vector<double> y(n);
    liere::rotate(table, x.data(), y.data(), b, t, h);
    return dot(y, g);
  };
  liere::RotationTable<double> table, dtable(t, d, 8);
  pe.rotation_table(pos, t, table);
  liere::rotate_backward(table, x.data(), g.data(), static_cast<double*>(nullptr), &dtable, b, t, h);
  std::vector<double> dw(pe.num_params, 0.0);
  pe.rotation_table_backward(pos, t, dtable, dw);
  const std::vector<double> w0(pe.params().begin(), pe.params().end());
  CHECK(max_rel_err(dw, numeric_gradient(loss, w0)) < 1e-6);
}

TEST_CASE("runtime block sizes go through one switch that names the supported sizes", "[liere][bad-input]") {
  std::vector<float> params(liere::liere_num_params(2, 64, 8)), pos(4, 0.5f);
  liere::RotationTable<float> table;
  liere::liere_table_forward<float>({1, 2, 64, 8}, params, pos, 2, table);
  REQUIRE(table.block() == 8);
  REQUIRE_THROWS_WITH(liere::liere_table_forward<float>({1, 2, 64, 5}, params, pos, 2, table),
                      Catch::Contains("block size 5 is not supported") && Catch::Contains("2, 3, 4, 8, 16, 32, 64"));
}

TEST_CASE("size mismatches give exceptions naming the sizes", "[liere][bad-input]") {
  liere::LieRE<2, 64, 8, float> pe;
  liere::RotationTable<float> table;
  std::vector<float> pos(5);  // 2.5 tokens
  REQUIRE_THROWS_WITH(pe.rotation_table(pos, 3, table),
                      Catch::Contains("expected 6 values (3 tokens x 2)") && Catch::Contains("got 5"));
  std::vector<float> params(100), pos4(4);
  REQUIRE_THROWS_WITH((liere::liere_table_forward<8, float>({1, 2, 64, 8}, params, pos4, 2, table.view())),
                      Catch::Contains("expected 448 parameters") && Catch::Contains("got 100"));
  REQUIRE_THROWS_WITH(liere::RotationTable<float>(4, 64, 12), Catch::Contains("block 12 must divide head_dim 64"));
  liere::RotationTable<float> t3(3, 64, 8);
  std::vector<float> q(2 * 4 * 1 * 64), y(q.size());
  REQUIRE_THROWS_WITH(liere::rotate(t3, q.data(), y.data(), 2, 4, 1),
                      Catch::Contains("3 rows") && Catch::Contains("T=4"));
  // a head index one past the last (H = 2: heads 0 and 1), and a negative one (buffers of 3 heads: an unchecked
  // head 2 fails the check below instead of writing past the end)
  liere::RotationTable<float> t4(4, 64, 8);
  std::vector<float> q2(2 * 4 * 3 * 64), y2(q2.size());
  REQUIRE_THROWS_WITH(liere::rotate(t4, q2.data(), y2.data(), 2, 4, 2, 2),
      Catch::Contains("head 2 out of range [0, 2)"));
  REQUIRE_THROWS_WITH(liere::rotate(t4, q2.data(), y2.data(), 2, 4, 2, -3), Catch::Contains("head -3 out of range"));
  std::vector<float> dw(10);
  liere::RotationTable<float> dt(2, 64, 8);
  REQUIRE_THROWS_WITH(pe.rotation_table_backward(pos4, 2, dt, dw), Catch::Contains("dparams has 10 values"));
}

TEST_CASE("NaN or Inf in positions or params give NaN rotations, never a hang or a crash", "[liere][bad-input]") {
  liere::LieRE<2, 64, 64, float> pe;
  pe.init_uniform(kTwoPi, 12);
  std::vector<float> pos = {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.25f, 0.75f,
                            std::numeric_limits<float>::infinity(), 0.0f};
  liere::RotationTable<float> table;
  pe.rotation_table(pos, 3, table);
  REQUIRE(table.matrix(0).array().isNaN().all());
  REQUIRE(table.matrix(1).allFinite());
  REQUIRE(table.matrix(2).array().isNaN().all());
  liere::RotationTable<float> dt(3, 64, 64);
  dt.set_identity();
  std::vector<float> dw(pe.num_params, 0.0f);
  pe.rotation_table_backward(pos, 3, dt, dw);  // terminates; NaN gradients
  REQUIRE(std::any_of(dw.begin(), dw.end(), [](float v) { return std::isnan(v); }));
  liere::LieRE<2, 64, 8, double> bad;
  bad.params()[3] = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(bad.rotation(Eigen::Vector2d(1, 1)).block<8, 8>(0, 0).array().isNaN().all());
  REQUIRE(bad.rotation(Eigen::Vector2d(1, 1)).block<8, 8>(8, 8).allFinite());  // other blocks unaffected
}

TEST_CASE("liere_report: --reps outside [1, 1000] is a usage error naming the range, before any measurement",
          "[liere][program][needs-liere_report]") {
  namespace fs = std::filesystem;
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "liere_report";
  if (!fs::exists(exe)) LIERE_SKIP(exe.string() << " is not built (LIERE_BUILD_EXAMPLES=OFF?)");
  const TempDir dir("liere_report");
  const std::string log = dir / "log.txt";
  auto run = [&](const std::string& args) { return liere::test::run_logged(exe.string() + " " + args, log); };
  auto said = [&](const std::string& text) { return read_bytes(log).find(text) != std::string::npos; };
  for (const std::string reps : {"0", "-1", "1001"}) {
    INFO("--reps " << reps);
    REQUIRE(run("--reps " + reps) == 2);  // REQUIRE: a --reps 1001 that ran would take half an hour
    CHECK(said("--reps " + reps + ": expected an integer in [1, 1000]"));
    CHECK_FALSE(said("LieRE rotations"));  // nothing measured
  }
  CHECK(run("--help") == 0);
  CHECK(said("[1, 1000]"));
}
