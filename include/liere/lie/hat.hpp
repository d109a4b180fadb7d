// liere/lie/hat.hpp — so(n) ↔ R^{n(n−1)/2}.
//
// Coordinates are the strict upper triangle, row-major: (0,1), (0,2), …, (0,n−1), (1,2), …, (n−2,n−1).
// hat(v) puts v_k at (r,c) and −v_k at (c,r). This is the layout of LieRE's parameters (docs/api.md); note
// that for n = 3 it is *not* the cross-product convention of Sophus (ω = (−v₂, v₁, −v₀) there).
#pragma once

#include <liere/core/eigen.hpp>
#include <liere/core/config.hpp>
#include <type_traits>

namespace liere {

// Dimension of so(n): n(n−1)/2.
constexpr int so_dim(int n) { return n * (n - 1) / 2; }

// The n with so_dim(n) == m, or −1 when m is not a triangular number.
constexpr int so_n(int m) {
  for (int n = 1; so_dim(n) <= m; ++n)
    if (so_dim(n) == m) return n;
  return -1;
}

namespace detail {
template <class D>
constexpr int vector_size_at_compile_time() {
  return D::RowsAtCompileTime == 1 ? D::ColsAtCompileTime : D::RowsAtCompileTime;
}
template <class D>
constexpr int hat_size_at_compile_time() {
  constexpr int m = vector_size_at_compile_time<D>();
  if constexpr (m == Eigen::Dynamic) {
    return Eigen::Dynamic;
  } else {
    static_assert(so_n(m) > 0, "hat: the vector size must be n(n-1)/2 for some n");
    return so_n(m);
  }
}
}  // namespace detail

// The strict upper triangle w (n(n−1)/2 values, row-major) into an n×n matrix or block m: m(r, c) = w_k and
// m(c, r) = −w_k for r < c; the diagonal is left as it is. m may be a temporary block expression
// (`hat_fill(w, b, dense.block(k·b, k·b, b, b))`).
template <class T, class M>
void hat_fill(const T* w, int n, M&& m) {
  using W = std::decay_t<decltype(m(0, 0))>;
  int k = 0;
  for (int r = 0; r < n; ++r)
    for (int c = r + 1; c < n; ++c, ++k) {
      m(r, c) = W(w[k]);
      m(c, r) = -W(w[k]);
    }
}

// The adjoint of hat: given the gradient g (n×n) of a loss with respect to hat(w), dw_k += g(r, c) − g(c, r).
template <class M, class T>
void hat_backward(const M& g, int n, T* dw) {
  int k = 0;
  for (int r = 0; r < n; ++r)
    for (int c = r + 1; c < n; ++c, ++k) dw[k] += T(g(r, c) - g(c, r));
}

// R^{n(n−1)/2} → so(n).
template <class Derived>
auto hat(const Eigen::MatrixBase<Derived>& v) {
  static_assert(Derived::RowsAtCompileTime == 1 || Derived::ColsAtCompileTime == 1 ||
                    Derived::RowsAtCompileTime == Eigen::Dynamic || Derived::ColsAtCompileTime == Eigen::Dynamic,
                "hat: expects a vector");
  using Scalar = typename Derived::Scalar;
  constexpr int N = detail::hat_size_at_compile_time<Derived>();
  const int m = static_cast<int>(v.size());
  LIERE_ENSURE(v.rows() == 1 || v.cols() == 1, "hat: expects a vector, got " << v.rows() << "x" << v.cols());
  const int n = so_n(m);
  LIERE_ENSURE(n > 0, "hat: the vector size " << m << " is not n(n-1)/2 for any n");
  Eigen::Matrix<Scalar, N, N> a = Eigen::Matrix<Scalar, N, N>::Zero(n, n);
  const Eigen::Matrix<Scalar, Eigen::Dynamic, 1> w = v;  // contiguous coordinates
  hat_fill(w.data(), n, a);
  return a;
}

// so(n) → R^{n(n−1)/2}: the coordinates of the skew-symmetric part (A − Aᵀ)/2, which for a skew-symmetric
// A are exactly its strict upper triangle.
template <class Derived>
auto vee(const Eigen::MatrixBase<Derived>& a) {
  using Scalar = typename Derived::Scalar;
  constexpr int N = Derived::RowsAtCompileTime;
  constexpr int M = N == Eigen::Dynamic ? Eigen::Dynamic : so_dim(N);
  LIERE_ENSURE(a.rows() == a.cols(), "vee: expects a square matrix, got " << a.rows() << "x" << a.cols());
  const int n = static_cast<int>(a.rows());
  Eigen::Matrix<Scalar, M, 1> v(so_dim(n));
  int k = 0;
  for (int r = 0; r < n; ++r)
    for (int c = r + 1; c < n; ++c, ++k) v(k) = (a(r, c) - a(c, r)) / Scalar(2);
  return v;
}

}  // namespace liere
