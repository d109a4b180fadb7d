// liere/lie/log.hpp — the principal logarithm SO(n) → so(n).
//
// n = 2 in closed form (atan2). Otherwise from the real Schur form R = U·T·Uᵀ (Eigen::RealSchur): for a
// normal matrix T is block diagonal with 2×2 rotation blocks [[c, s], [−s, c]] (angle atan2(s, c) ∈ (−π, π])
// and 1×1 blocks ±1. Eigenvalues −1 come in pairs (det R = 1); each pair becomes a rotation by π in the
// plane of its two Schur vectors. The result is a skew-symmetric L with exp(L) = R and ‖L‖₂ ≤ π, the
// principal logarithm whenever R has no eigenvalue −1 (and one of the logarithms of norm π when it has).
#pragma once

#include <liere/core/eigen.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Eigenvalues>
LIERE_THIRD_PARTY_END
#include <cmath>
#include <liere/core/config.hpp>
#include <numbers>
#include <vector>

namespace liere {

template <class Derived>
typename Derived::PlainObject log(const Eigen::MatrixBase<Derived>& r_in) {
  using Plain = typename Derived::PlainObject;
  using Scalar = typename Derived::Scalar;
  LIERE_ENSURE(r_in.rows() == r_in.cols(), "log: expects a square matrix, got " << r_in.rows() << "x" << r_in.cols());
  const Eigen::Index n = r_in.rows();
  const Eigen::MatrixXd r = r_in.template cast<double>();
  LIERE_ENSURE(r.allFinite(), "log: R has non-finite entries");
  const double orth = (r.transpose() * r - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff();
  const double orth_tol = std::is_same_v<Scalar, float> ? 1e-4 : 1e-8;
  LIERE_ENSURE(n == 0 || orth <= orth_tol,
               "log: R is not orthogonal: max|RᵀR − I| = " << orth << " > " << orth_tol);
  if (n <= 1) return Plain::Zero(n, n);
  using std::atan2;
  if (n == 2) {
    const double w = atan2((r(0, 1) - r(1, 0)) / 2, (r(0, 0) + r(1, 1)) / 2);
    Plain l(n, n);
    l << 0, Scalar(w), Scalar(-w), 0;
    return l;
  }
  Eigen::RealSchur<Eigen::MatrixXd> schur(r);
  const Eigen::MatrixXd& t = schur.matrixT();
  const Eigen::MatrixXd& u = schur.matrixU();
  Eigen::MatrixXd l = Eigen::MatrixXd::Zero(n, n);
  std::vector<Eigen::Index> minus_one;
  for (Eigen::Index i = 0; i < n;) {
    if (i + 1 < n && t(i + 1, i) != 0.0) {  // 2×2 block: a rotation by θ
      const double th = atan2((t(i, i + 1) - t(i + 1, i)) / 2, (t(i, i) + t(i + 1, i + 1)) / 2);
      l(i, i + 1) = th;
      l(i + 1, i) = -th;
      i += 2;
    } else {
      LIERE_ENSURE(std::abs(std::abs(t(i, i)) - 1.0) <= 1e-6,
                   "log: R is not a rotation (real eigenvalue " << t(i, i) << ")");
      if (t(i, i) < 0) minus_one.push_back(i);
      i += 1;
    }
  }
  LIERE_ENSURE(minus_one.size() % 2 == 0, "log: det R = -1, R is a reflection, not a rotation");
  for (std::size_t k = 0; k < minus_one.size(); k += 2) {
    l(minus_one[k], minus_one[k + 1]) = std::numbers::pi;
    l(minus_one[k + 1], minus_one[k]) = -std::numbers::pi;
  }
  Eigen::MatrixXd out = u * l * u.transpose();
  out = (out - out.transpose()) / 2;  // exactly skew-symmetric
  return out.cast<Scalar>();
}

// Explicit instances (lie/lie.cpp) for programs that link liere::compiled.
#define LIERE_LIE_LOG_INSTANCES(EXTERN, M) EXTERN template M log<M>(const Eigen::MatrixBase<M>&);
#ifdef LIERE_PRECOMPILED
LIERE_LIE_LOG_INSTANCES(extern, Eigen::MatrixXd)
LIERE_LIE_LOG_INSTANCES(extern, Eigen::MatrixXf)
#endif

}  // namespace liere
