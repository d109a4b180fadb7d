// tests/test_util.hpp — tolerances, random inputs and the two derivative checks every test uses.
#pragma once

#include <liere/core/eigen.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Dense>
LIERE_THIRD_PARTY_END
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "tensor_compare.hpp"  // raise_error

namespace liere::test {

// One place for tolerances: tol<T>(double_tol, float_tol).
template <class T>
constexpr double tol(double double_tol, double float_tol) {
  return std::is_same_v<T, float> ? float_tol : double_tol;
}

// |a - n| / max(1, |a|, |n|): the per-element error measure of STYLE.md (NaN where either is NaN).
inline double rel_err(double a, double n) {
  return std::abs(a - n) / std::max({1.0, std::abs(a), std::abs(n)});
}

template <class DA, class DB>
double max_rel_err(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DB>& b) {
  double m = 0;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j) raise_error(m, rel_err(double(a(i, j)), double(b(i, j))));
  return m;
}

inline double max_rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) raise_error(m, rel_err(a[i], b[i]));
  return m;
}

// Fixed seeds everywhere: a failure is reproducible.
inline std::mt19937_64& rng() {
  static std::mt19937_64 g(20250713);
  return g;
}

inline double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng()); }
inline double normal() { return std::normal_distribution<double>(0.0, 1.0)(rng()); }

inline std::vector<double> random_vector(std::size_t n, double lo = -1, double hi = 1) {
  std::vector<double> v(n);
  for (auto& x : v) x = uniform(lo, hi);
  return v;
}

// Eigen's dense decompositions as references, compiled once (tests/util.cpp, linked into every test) instead of
// instantiated again in each test that uses one: JacobiSVD, PartialPivLU and RealSchur of a MatrixXd (at -O0 a
// test's own SelfAdjointEigenSolver or HouseholderQR cost about 5 CPU s each, PartialPivLU's inverse 2).
double spectral_norm(const Eigen::MatrixXd& a);  // the largest singular value
// U of x's singular value decomposition: an orthogonal matrix; for x of independent normal entries, a random one.
Eigen::MatrixXd orthogonal_factor(const Eigen::MatrixXd& x);
double determinant(const Eigen::MatrixXd& a);
Eigen::MatrixXd inverse(const Eigen::MatrixXd& a);  // by LU with partial pivoting
// a = u·t·uᵀ, u orthogonal, t quasi-triangular (the real Schur form).
void real_schur(const Eigen::MatrixXd& a, Eigen::MatrixXd& u, Eigen::MatrixXd& t);

// A random n×n skew-symmetric matrix scaled to the given 2-norm.
template <class Scalar = double, int N = Eigen::Dynamic>
Eigen::Matrix<Scalar, N, N> random_skew(int n, double norm2) {
  Eigen::MatrixXd g(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) g(i, j) = normal();
  Eigen::MatrixXd a = g - g.transpose();
  if (n > 1) {
    double s = spectral_norm(a);
    if (s > 0) a *= norm2 / s;
  }
  return a.cast<Scalar>();
}

template <class D>
Eigen::MatrixXd random_like(const Eigen::MatrixBase<D>& m) {
  Eigen::MatrixXd r(m.rows(), m.cols());
  for (Eigen::Index i = 0; i < r.size(); ++i) r.data()[i] = normal();
  return r;
}

// Central difference of a scalar function along every coordinate of x (double): returns the gradient.
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace liere::test
