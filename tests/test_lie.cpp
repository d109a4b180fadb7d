// tests/test_lie.cpp — hat/vee, exp, exp_backward and log on so(n) / SO(n).
#include <catch2/catch.hpp>

#include <liere/liere.hpp>
#include <numbers>
#include <liere/core/eigen.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <unsupported/Eigen/MatrixFunctions>
LIERE_THIRD_PARTY_END

#include "test_util.hpp"

using namespace liere::test;
using Eigen::MatrixXd;
using Eigen::MatrixXf;

namespace {

constexpr double kU = 1.1102230246251565e-16;  // unit roundoff of double

const std::vector<int> kBlocks = {2, 3, 4, 8, 16, 32, 64};
// Edge cases as explicit data (STYLE.md): 0, tiny, small, around π, large, and the official-init range.
const std::vector<double> kNorms = {0.0, 1e-8, 1e-5, 0.5, 1.0, std::numbers::pi - 1e-6, std::numbers::pi, 20.0, 100.0,
                                    450.0, 1e3, 1e4};

double orthogonality(const MatrixXd& r) {
  return (r.transpose() * r - MatrixXd::Identity(r.rows(), r.cols())).cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
}

// The general scaling-and-squaring path, bypassing the closed forms.
MatrixXd exp_general(const MatrixXd& a) {
  MatrixXd r(a.rows(), a.cols());
  liere::detail::expm_ss(a, r);
  return r;
}

double frob_dot(const MatrixXd& a, const MatrixXd& b) { return (a.array() * b.array()).sum(); }

}  // namespace

TEST_CASE("hat and vee are inverse and use the row-major upper-triangle layout", "[lie][hat]") {
  Eigen::Matrix<double, 6, 1> v;
  v << 1, 2, 3, 4, 5, 6;
  const Eigen::Matrix4d a = liere::hat(v);
  Eigen::Matrix4d expected;
  expected << 0, 1, 2, 3,  //
      -1, 0, 4, 5,         //
      -2, -4, 0, 6,        //
      -3, -5, -6, 0;
  REQUIRE(a == expected);
  REQUIRE(liere::vee(a) == v);

  for (int n : {1, 2, 3, 5, 8, 64}) {
    const Eigen::VectorXd w = Eigen::VectorXd::Random(liere::so_dim(n));
    const MatrixXd h = liere::hat(w);
    REQUIRE(h.rows() == n);
    REQUIRE((h + h.transpose()).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() == 0.0);
    REQUIRE(liere::vee(h) == w);
  }
  // vee reads the skew-symmetric part of a general matrix.
  const Eigen::Matrix3d g = Eigen::Matrix3d::Random();
  const Eigen::Vector3d vg = liere::vee(g);
  REQUIRE(vg(0) == Approx((g(0, 1) - g(1, 0)) / 2));
  REQUIRE(vg(2) == Approx((g(1, 2) - g(2, 1)) / 2));
  REQUIRE_THROWS_WITH(liere::hat(Eigen::VectorXd(4)), Catch::Contains("not n(n-1)/2"));
}

TEST_CASE("exp is orthogonal with det 1 for every block size and generator norms 0..1e4", "[lie][exp]") {
  for (int n : kBlocks) {
    for (double norm : kNorms) {
      CAPTURE(n, norm);
      const MatrixXd a = random_skew(n, norm);
      const MatrixXd r = liere::exp(a);
      CHECK(orthogonality(r) <= 1e-12);
      CHECK(determinant(r) == Approx(1.0).margin(1e-10));
      // float32 rotations: computed inside in double, rounded once.
      const MatrixXf rf = liere::exp(MatrixXf(a.cast<float>()));
      CHECK(orthogonality(rf.cast<double>()) <= 1e-6);
    }
  }
}

TEST_CASE("exp agrees with Eigen's MatrixFunctions and the closed forms with the general path", "[lie][exp]") {
  // For skew A the exponential's absolute condition number is ≤ 1 per unit of ‖ΔA‖ and a backward-stable
  // method perturbs A by O(u‖A‖), so two correct double results may differ by a small multiple of
  // u·max(1, ‖A‖₂).
  for (int n : kBlocks) {
    for (double norm : kNorms) {
      CAPTURE(n, norm);
      const MatrixXd a = random_skew(n, norm);
      const double bound = 50 * kU * std::max(1.0, norm);
      const MatrixXd r = liere::exp(a);
      const MatrixXd reig = a.exp();
      CHECK((r - reig).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= bound);
      if (n <= 3) CHECK((r - exp_general(a)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= bound);
    }
  }
  // Fixed-size and dynamic-size inputs give the same result.
  const MatrixXd a8 = random_skew(8, 30.0);
  const Eigen::Matrix<double, 8, 8> f8 = a8;
  // (the two sizes take different product kernels, so they may differ by rounding)
  REQUIRE((liere::exp(f8) - liere::exp(a8)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 50 * kU * 30.0);
  const Eigen::Matrix3d f3 = random_skew(3, 2.0);
  REQUIRE((liere::exp(f3) - liere::exp(MatrixXd(f3))).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-15);
}

TEST_CASE("exp of 2x2 and 3x3 matches the textbook formulas", "[lie][exp]") {
  Eigen::Matrix2d a2;
  a2 << 0, 0.3, -0.3, 0;
  const Eigen::Matrix2d r2 = liere::exp(a2);
  REQUIRE(r2(0, 0) == Approx(std::cos(0.3)));
  REQUIRE(r2(0, 1) == Approx(std::sin(0.3)));
  REQUIRE(r2(1, 0) == Approx(-std::sin(0.3)));
  // 3×3: rotation by θ about the axis ω = (−v₂, v₁, −v₀) maps ω to itself.
  Eigen::Vector3d v(0.2, -0.5, 0.7);
  const Eigen::Matrix3d r3 = liere::exp(liere::hat(v));
  const Eigen::Vector3d axis(-v(2), v(1), -v(0));
  REQUIRE((r3 * axis - axis).norm() < 1e-15);
  REQUIRE(std::acos((r3.trace() - 1) / 2) == Approx(v.norm()));
  // so(1) and the empty matrix.
  REQUIRE(liere::exp(Eigen::Matrix<double, 1, 1>::Zero())(0, 0) == 1.0);
  REQUIRE(liere::exp(MatrixXd(0, 0)).size() == 0);
}

TEST_CASE("exp never hangs or crashes on NaN, Inf or absurd norms: NaN out", "[lie][exp][bad-input]") {
  for (int n : {2, 3, 8, 64}) {
    MatrixXd a = random_skew(n, 1.0);
    a(0, n - 1) = std::numeric_limits<double>::quiet_NaN();
    REQUIRE(liere::exp(a).array().isNaN().all());
    a(0, n - 1) = std::numeric_limits<double>::infinity();
    REQUIRE(liere::exp(a).array().isNaN().all());
    MatrixXd g = MatrixXd::Ones(n, n), da = MatrixXd::Zero(n, n);
    liere::exp_backward(a, g, da);
    REQUIRE(da.array().isNaN().any());
  }
  // A finite but absurd norm terminates (≈ 1000 squarings) and stays finite or NaN, never hangs.
  const MatrixXd big = random_skew(8, 1e300);
  const MatrixXd rb = liere::exp(big);
  REQUIRE(rb.rows() == 8);
}

TEST_CASE("log inverts exp on SO(n), including angles near and at pi", "[lie][log]") {
  for (int n : {2, 3, 4, 5, 8, 16, 64}) {
    for (double norm : {0.0, 0.1, 1.0, 3.0, 10.0, 50.0}) {
      CAPTURE(n, norm);
      const MatrixXd r = liere::exp(random_skew(n, norm));
      const MatrixXd l = liere::log(r);
      CHECK((l + l.transpose()).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-15);
      CHECK((liere::exp(l) - r).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-12);
      // principal: the angles lie in [−π, π]
      CHECK(spectral_norm(l) <= std::numbers::pi + 1e-12);
    }
  }
  // Rotations by π − δ in one or several planes, in a random orthonormal basis.
  for (int n : {2, 3, 4, 6, 8}) {
    for (double delta : {1e-3, 1e-6, 1e-9, 0.0}) {
      CAPTURE(n, delta);
      MatrixXd blocks = MatrixXd::Zero(n, n);
      for (int i = 0; i + 1 < n; i += 2) {
        blocks(i, i + 1) = std::numbers::pi - delta * (1 + i);
        blocks(i + 1, i) = -blocks(i, i + 1);
      }
      const MatrixXd q = n > 2 ? liere::exp(random_skew(n, 2.0)) : MatrixXd::Identity(2, 2);
      const MatrixXd r = q * liere::exp(blocks) * q.transpose();
      const MatrixXd l = liere::log(r);
      CHECK((liere::exp(l) - r).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-12);
    }
  }
}

TEST_CASE("log(exp A) = A for norms below pi", "[lie][log]") {
  for (int n : {2, 3, 4, 8, 16}) {
    for (double norm : {1e-6, 0.1, 1.0, 3.0, 3.1}) {
      CAPTURE(n, norm);
      const MatrixXd a = random_skew(n, norm);
      // log is ill-conditioned as the angles approach π (1/(π − θ)); 3.1 leaves a margin of 0.04.
      CHECK((liere::log(liere::exp(a)) - a).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
          <= 1e-12 * std::max(1.0, 1 / (std::numbers::pi - norm)));
      // float: a float rotation (orthogonal to ~1e-7, rounded once from double) is accepted and its log is A to
      // float's resolution
      const MatrixXf rf = liere::exp(MatrixXf(a.cast<float>()));
      const MatrixXf lf = liere::log(rf);
      CHECK((lf.cast<double>() - a).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
          <= 1e-5 * std::max(1.0, 1 / (std::numbers::pi - norm)));
    }
  }
}

TEST_CASE("log rejects matrices that are not rotations", "[lie][log][bad-input]") {
  MatrixXd r = MatrixXd::Identity(4, 4);
  r(0, 0) = -1;  // a reflection: det = −1
  REQUIRE_THROWS_WITH(liere::log(r), Catch::Contains("reflection"));
  REQUIRE_THROWS_WITH(liere::log(MatrixXd(MatrixXd::Constant(3, 3, 0.5))), Catch::Contains("not orthogonal"));
  REQUIRE_THROWS_WITH(liere::log(MatrixXd(2, 3)), Catch::Contains("square"));
}

TEST_CASE("exp_backward: central differences in parameter coordinates", "[lie][exp_backward]") {
  for (int n : {2, 3, 4, 8, 16}) {
    for (double norm : {0.3, 3.0, 20.0, 100.0}) {
      CAPTURE(n, norm);
      const int m = liere::so_dim(n);
      const MatrixXd a0 = random_skew(n, norm);
      const Eigen::VectorXd v0 = liere::vee(a0);
      const MatrixXd g = random_like(a0);
      auto f = [&](const std::vector<double>& v) {
        return frob_dot(liere::exp(liere::hat(Eigen::Map<const Eigen::VectorXd>(v.data(), m))), g);
      };
      const std::vector<double> x(v0.data(), v0.data() + m);
      const std::vector<double> numeric = numeric_gradient(f, x);
      MatrixXd da = MatrixXd::Zero(n, n);
      liere::exp_backward(a0, g, da);
      std::vector<double> analytic(m);
      int k = 0;
      for (int r = 0; r < n; ++r)
        for (int c = r + 1; c < n; ++c) analytic[k++] = da(r, c) - da(c, r);  // chain rule through hat
      CHECK(max_rel_err(analytic, numeric) < 1e-6);
    }
  }
}

TEST_CASE("exp_backward: central differences of the full-matrix exponential", "[lie][exp_backward]") {
  // Perturbations that leave so(n): the reference is Eigen's general-matrix exponential.
  for (int n : {2, 3, 4, 8}) {
    for (double norm : {0.3, 3.0, 20.0}) {
      CAPTURE(n, norm);
      const MatrixXd a0 = random_skew(n, norm), g = random_like(a0);
      auto f = [&](const std::vector<double>& v) {
        return frob_dot(Eigen::Map<const MatrixXd>(v.data(), n, n).exp(), g);
      };
      const std::vector<double> numeric = numeric_gradient(f, std::vector<double>(a0.data(), a0.data() + n * n));
      MatrixXd da = MatrixXd::Zero(n, n);
      liere::exp_backward(a0, g, da);
      CHECK(max_rel_err(std::vector<double>(da.data(), da.data() + n * n), numeric) < 1e-6);
    }
  }
}

TEST_CASE("exp_backward: adjoint dot-product test and the 2n x 2n block formula", "[lie][exp_backward]") {
  for (int n : {2, 3, 4, 8, 16, 32, 64}) {
    for (double norm : {0.3, 3.0, 100.0, 1e3}) {
      CAPTURE(n, norm);
      const MatrixXd a = random_skew(n, norm), e = random_like(a), g = random_like(a);
      // ⟨L(A, E), G⟩ = ⟨E, L*(A, G)⟩
      const MatrixXd l = liere::exp_frechet(a, e);
      MatrixXd lstar = MatrixXd::Zero(n, n);
      liere::exp_backward(a, g, lstar);
      const double lhs = frob_dot(l, g), rhs = frob_dot(e, lstar);
      // rounding in the squaring phase grows like 2^s·u, i.e. in proportion to ‖A‖
      CHECK(std::abs(lhs - rhs) <= 1e-14 * std::max(1.0, std::abs(lhs)) * std::max(1.0, norm));
      // L*(A, G) = L(Aᵀ, G) = upper-right block of exp([[Aᵀ, G], [0, Aᵀ]]) (Eigen's MatrixFunctions).
      if (n <= 16 && norm <= 100) {
        MatrixXd big = MatrixXd::Zero(2 * n, 2 * n);
        big.topLeftCorner(n, n) = a.transpose();
        big.bottomRightCorner(n, n) = a.transpose();
        big.topRightCorner(n, n) = g;
        const MatrixXd ref = MatrixXd(big.exp()).topRightCorner(n, n);
        CHECK(max_rel_err(lstar, ref) < 1e-13 * std::max(1.0, norm));
      }
    }
  }
}

TEMPLATE_TEST_CASE("exp_backward at A = 0 is the identity map: L(0, E) = E", "[lie][exp_backward]", float, double) {
  // exp(εE) = I + εE + O(ε²), so the Fréchet derivative at 0 is the identity and so is its adjoint: dA += G exactly
  // (no rounding: L(0, E) = E is what any correct scheme gives). The closed form (n = 2) and the scaling-and-squaring
  // path (n ≥ 3), whose A = 0 case is a branch of its own.
  using M = Eigen::Matrix<TestType, Eigen::Dynamic, Eigen::Dynamic>;
  for (int n : {2, 3, 4, 8, 16, 64}) {
    CAPTURE(n);
    const M zero = M::Zero(n, n), g = random_like(MatrixXd(n, n)).cast<TestType>();
    M da = M::Constant(n, n, TestType(0.5));  // accumulates
    liere::exp_backward(zero, g, da);
    CHECK((da - M::Constant(n, n, TestType(0.5)) - g).cwiseAbs().template maxCoeff<Eigen::PropagateNaN>()
        <= tol<TestType>(1e-15, 1e-6));
    CHECK((liere::exp_frechet(zero, g) - g).cwiseAbs().template maxCoeff<Eigen::PropagateNaN>()
        <= tol<TestType>(1e-15, 1e-6));
  }
}

TEMPLATE_TEST_CASE("exp_backward accumulates and checks sizes", "[lie][exp_backward]", float, double) {
  using M = Eigen::Matrix<TestType, Eigen::Dynamic, Eigen::Dynamic>;
  const M a = random_skew(8, 5.0).cast<TestType>(), g = M::Ones(8, 8);
  M once = M::Zero(8, 8), twice = M::Zero(8, 8);
  liere::exp_backward(a, g, once);
  liere::exp_backward(a, g, twice);
  liere::exp_backward(a, g, twice);
  REQUIRE((twice - 2 * once).cwiseAbs().template maxCoeff<Eigen::PropagateNaN>()
      <= tol<TestType>(1e-12, 1e-4) * once.cwiseAbs().template maxCoeff<Eigen::PropagateNaN>());
  M wrong = M::Zero(4, 4);
  REQUIRE_THROWS_WITH(liere::exp_backward(a, g, wrong), Catch::Contains("8x8") && Catch::Contains("4x4"));
}
