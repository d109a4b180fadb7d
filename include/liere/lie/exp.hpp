// liere/lie/exp.hpp — the exponential so(n) → SO(n) and the adjoint of its Fréchet derivative.
//
//   R  = exp(A)                    A skew-symmetric (n×n, fixed or dynamic size) → R ∈ SO(n)
//   exp_backward(A, dR, dA)        dA += L(A, ·)*(dR) = L(Aᵀ, dR): given dL/dR, accumulate dL/dA
//
// n = 1, 2, 3 have closed forms (2: cos/sin; 3: Rodrigues with a small-angle series). Every other n goes
// through scaling and squaring of the degree-18 Taylor polynomial of Bader, Blanes and Casas (Mathematics
// 7(12):1174, 2019), evaluated with 5 products. The scaling uses α = max(‖A²‖^{1/2}, ‖A³‖^{1/3})
// (Al-Mohy & Higham, SIAM J. Matrix Anal. Appl. 31(3), 2009), which for a skew-symmetric A is the 2-norm
// itself instead of the pessimistic 1-norm, so fewer squarings are needed. exp() always computes in double
// (a float input is promoted, the result is rounded once), which keeps float rotations orthogonal to
// ~1e-7 for generator norms up to 1e4; docs/math.md explains why and shows the measurements.
//
// The adjoint is computed without storing the squaring chain: L(Aᵀ, G) is the forward-mode (Fréchet)
// derivative of the same algorithm applied to Aᵀ in the direction G. Because the approximant is a
// polynomial with real coefficients and the scaling is chosen from transposition-invariant norms, this is
// exactly the adjoint of the algorithm's own derivative, so the dot-product test holds to rounding.
//
// Non-finite input (NaN or ±Inf anywhere) gives an all-NaN result: never a hang, never a crash.
#pragma once

#include <liere/core/eigen.hpp>
#include <algorithm>
#ifdef LIERE_COUNT_FLOPS
#include <atomic>
#endif
#include <cmath>
#include <limits>
#include <liere/core/config.hpp>
#include <liere/lie/t18.hpp>
#include <type_traits>

namespace liere {

namespace detail {

template <class M>
double norm_1inf(const M& a) {  // max(‖a‖₁, ‖a‖∞): invariant under transposition
  return std::max(double(a.cwiseAbs().colwise().sum().maxCoeff()), double(a.cwiseAbs().rowwise().sum().maxCoeff()));
}

// out = a·b and out += a·b. Small fixed sizes use Eigen's lazy (coefficient-based) product, which is
// several times faster than the GEMM path there (8×8 double: 34 ns against 127 ns on AVX-512).
template <class M>
constexpr bool use_lazy_product() {
  return M::RowsAtCompileTime != Eigen::Dynamic && M::RowsAtCompileTime <= 8;
}
#ifdef LIERE_COUNT_FLOPS
// Benchmarks define LIERE_COUNT_FLOPS to count the floating-point operations of every matrix product here.
inline std::atomic<long long> product_flops{0};
#define LIERE_ADD_PRODUCT_FLOPS(out, a) ::liere::detail::product_flops += 2LL * (out).rows() * (out).cols() * (a).cols()
#else
#define LIERE_ADD_PRODUCT_FLOPS(out, a) ((void)0)
#endif

template <class M, class A, class B>
inline void mul(M& out, const A& a, const B& b) {
  LIERE_ADD_PRODUCT_FLOPS(out, a);
  if constexpr (use_lazy_product<M>()) out.noalias() = a.lazyProduct(b);
  else out.noalias() = a * b;
}
template <class M, class A, class B>
inline void mul_add(M& out, const A& a, const B& b) {
  LIERE_ADD_PRODUCT_FLOPS(out, a);
  if constexpr (use_lazy_product<M>()) out.noalias() += a.lazyProduct(b);
  else out.noalias() += a * b;
}

// sin(x)/x, accurate at 0.
inline double sinc(double x) {
  using std::sin;
  if (std::abs(x) < 1e-4) return 1.0 - x * x / 6.0 * (1.0 - x * x / 20.0);
  return sin(x) / x;
}


// The scaled matrix X = A/2^s and its powers X², X³ for the degree-18 scheme; returns s, or −1 when A is
// not finite, or −2 when A = 0.
//
// General A: α = max(‖A²‖^{1/2}, ‖A³‖^{1/3}) in the transposition-invariant max(‖·‖₁, ‖·‖∞). The first
// scaling uses ‖A‖ (an upper bound of α) so that no power can overflow; s is then lowered to the one α asks
// for and the powers are rescaled exactly by powers of two.
// Skew-symmetric A (Skew = true; every generator liere builds is exactly skew): ‖A‖₂ is the largest
// rotation angle, bounded by ‖A‖_F/√2 (the angles come in ± pairs) and by ‖A²‖₁^{1/2} (A² is symmetric, so
// its 2-norm ‖A‖₂² is at most its 1-norm). The cheaper of the two bounds costs no extra product.
template <bool Skew, class M>
int scale_for_t18(const M& a, M& x, M& x2, M& x3) {
  using W = typename M::Scalar;
  constexpr double theta = t18_theta<W>();
  if constexpr (Skew) {
    const double f2 = double(a.squaredNorm());
    if (!std::isfinite(f2)) return -1;
    if (f2 == 0.0) return -2;  // A = 0: exp(A) = I exactly
    const int s0 = t18_scaling(std::sqrt(f2 / 2), theta);
    x = a * W(std::ldexp(1.0, -s0));
    mul(x2, x, x);
    const double beta = std::sqrt(double(x2.cwiseAbs().colwise().sum().maxCoeff())) * std::ldexp(1.0, s0);
    const int s = std::min(s0, t18_scaling(beta, theta));
    if (s < s0) {
      const int up = s0 - s;
      x *= W(std::ldexp(1.0, up));
      x2 *= W(std::ldexp(1.0, 2 * up));
    }
    mul(x3, x, x2);
    return s;
  } else {
    const double n1 = norm_1inf(a);
    if (!std::isfinite(n1)) return -1;
    if (n1 == 0.0) return -2;
    const int s0 = t18_scaling(n1, theta);
    x = a * W(std::ldexp(1.0, -s0));
    mul(x2, x, x);
    mul(x3, x, x2);
    const double alpha = std::max(std::sqrt(norm_1inf(x2)), std::cbrt(norm_1inf(x3))) * std::ldexp(1.0, s0);
    const int s = std::min(s0, t18_scaling(alpha, theta));
    if (s < s0) {
      const int up = s0 - s;
      x *= W(std::ldexp(1.0, up));
      x2 *= W(std::ldexp(1.0, 2 * up));
      x3 *= W(std::ldexp(1.0, 3 * up));
    }
    return s;
  }
}

// True when A + Aᵀ = 0 exactly.
template <class M>
bool is_skew(const M& a) {
  for (Eigen::Index j = 0; j < a.cols(); ++j)
    for (Eigen::Index i = 0; i <= j; ++i)
      if (a(i, j) != -a(j, i)) return false;
  return true;
}

// B_i = Σ_j b[i][j] P_j for P = (I, X, X², X³, X⁶).
template <class M>
void t18_combination(int i, const M& x, const M& x2, const M& x3, const M& x6, M& out, bool with_identity) {
  using W = typename M::Scalar;
  out = W(t18_coef(i, 1)) * x + W(t18_coef(i, 2)) * x2 + W(t18_coef(i, 3)) * x3 + W(t18_coef(i, 4)) * x6;
  if (with_identity && t18_coef(i, 0) != 0.0) out.diagonal().array() += W(t18_coef(i, 0));
}

// Working matrices of the degree-18 scheme. One set per thread and matrix type, reused across calls: a
// fresh allocation per call costs more than the arithmetic for 64×64 (glibc trims and re-faults the heap).
template <class M>
struct T18Work {
  M x, x2, x3, x6, t, b[5];      // powers of X, a spare, the B_i
  M dx, dx2, dx3, dx6, db[5];    // their directional derivatives
  void resize(Eigen::Index n, bool frechet) {
    for (M* m : {&x, &x2, &x3, &x6, &t, &b[0], &b[1], &b[2], &b[3], &b[4]}) m->resize(n, n);
    if (frechet)
      for (M* m : {&dx, &dx2, &dx3, &dx6, &db[0], &db[1], &db[2], &db[3], &db[4]}) m->resize(n, n);
  }
};
// Small fixed sizes keep their working set on the stack, where the compiler can keep it in registers.
template <class M>
constexpr bool work_on_stack() {
  return M::RowsAtCompileTime != Eigen::Dynamic && M::RowsAtCompileTime <= 16;
}
template <class M>
T18Work<M>& t18_work(Eigen::Index n, bool frechet) {
  thread_local T18Work<M> w;
  w.resize(n, frechet);
  return w;
}

// Squarings after which the rounding drift of RᵀR (≈ 2^s·√n·u) may exceed 1e-13 in double: beyond it one
// Newton–Schulz step R ← R·(3I − RᵀR)/2 restores orthogonality to rounding (the drift is measured in
// docs/math.md; at ‖A‖ = 1e4 it is 2e-12 without the step).
inline constexpr int kPolishAfterSquarings = 10;

// exp(A) by scaling and squaring of T18, in the precision of M. Skew: A is known to be skew-symmetric.
template <bool Skew, class M>
void expm_ss(const M& a, M& r, T18Work<M>& w) {
  using W = typename M::Scalar;
  const Eigen::Index n = a.rows();
  const int s = scale_for_t18<Skew>(a, w.x, w.x2, w.x3);
  if (s == -2) {
    r.setIdentity(n, n);
    return;
  }
  if (s < 0) {
    r.setConstant(n, n, std::numeric_limits<W>::quiet_NaN());
    return;
  }
  mul(w.x6, w.x3, w.x3);
  for (int i = 0; i < 5; ++i) t18_combination(i, w.x, w.x2, w.x3, w.x6, w.b[i], true);
  M& a9 = w.b[3];  // A9 = B0·B4 + B3
  mul_add(a9, w.b[0], w.b[4]);
  w.b[2] += a9;  // C = B2 + A9
  r = w.b[1];
  mul_add(r, w.b[2], a9);  // T18 = B1 + C·A9
  for (int k = 0; k < s; ++k) {
    mul(w.t, r, r);
    r.swap(w.t);
  }
  if (s >= kPolishAfterSquarings) {
    mul(w.t, r.transpose(), r);  // RᵀR
    w.t *= W(-0.5);
    w.t.diagonal().array() += W(1.5);
    mul(w.x, r, w.t);
    r.swap(w.x);
  }
}
template <bool Skew, class M>
void expm_ss(const M& a, M& r) {
  if constexpr (work_on_stack<M>()) {
    T18Work<M> w;
    w.resize(a.rows(), false);
    expm_ss<Skew>(a, r, w);
  } else {
    expm_ss<Skew>(a, r, t18_work<M>(a.rows(), false));
  }
}
// Runtime check: the cheaper skew-symmetric scaling when A + Aᵀ = 0 exactly.
template <class M>
void expm_ss(const M& a, M& r) {
  if (is_skew(a)) expm_ss<true>(a, r);
  else expm_ss<false>(a, r);
}

// exp(A) and the Fréchet derivative L(A, E) of the same algorithm, in the precision of M (without the
// orthogonality polish of expm_ss: L is the derivative of exp itself, not of the projection).
template <bool Skew, class M>
void expm_frechet_ss(const M& a, const M& e, M& r, M& l, T18Work<M>& w) {
  using W = typename M::Scalar;
  const Eigen::Index n = a.rows();
  const int s = scale_for_t18<Skew>(a, w.x, w.x2, w.x3);
  if (s == -2 && e.allFinite()) {  // A = 0: R = I, L(0, E) = E
    r.setIdentity(n, n);
    l = e;
    return;
  }
  if (s < 0 || !e.allFinite()) {
    r.setConstant(n, n, std::numeric_limits<W>::quiet_NaN());
    l.setConstant(n, n, std::numeric_limits<W>::quiet_NaN());
    return;
  }
  // Directional derivatives of the powers: dX = E/2^s, dX² = dX·X + X·dX, dX³ = dX·X² + X·dX².
  w.dx = e * W(std::ldexp(1.0, -s));
  mul(w.dx2, w.dx, w.x);
  mul_add(w.dx2, w.x, w.dx);
  mul(w.dx3, w.dx, w.x2);
  mul_add(w.dx3, w.x, w.dx2);
  mul(w.x6, w.x3, w.x3);
  mul(w.dx6, w.dx3, w.x3);
  mul_add(w.dx6, w.x3, w.dx3);
  for (int i = 0; i < 5; ++i) {
    t18_combination(i, w.x, w.x2, w.x3, w.x6, w.b[i], true);
    t18_combination(i, w.dx, w.dx2, w.dx3, w.dx6, w.db[i], false);
  }
  // A9 = B0·B4 + B3
  M& a9 = w.b[3];
  M& da9 = w.db[3];
  mul_add(a9, w.b[0], w.b[4]);
  mul_add(da9, w.db[0], w.b[4]);
  mul_add(da9, w.b[0], w.db[4]);
  // C = B2 + A9; T18 = B1 + C·A9
  w.b[2] += a9;
  w.db[2] += da9;
  r = w.b[1];
  mul_add(r, w.b[2], a9);
  l = w.db[1];
  mul_add(l, w.db[2], a9);
  mul_add(l, w.b[2], da9);
  // Squaring: (R, L) ← (R², R·L + L·R).
  for (int k = 0; k < s; ++k) {
    mul(w.t, r, l);
    mul_add(w.t, l, r);
    l.swap(w.t);
    mul(w.t, r, r);
    r.swap(w.t);
  }
}
template <bool Skew, class M>
void expm_frechet_ss(const M& a, const M& e, M& r, M& l) {
  if constexpr (work_on_stack<M>()) {
    T18Work<M> w;
    w.resize(a.rows(), true);
    expm_frechet_ss<Skew>(a, e, r, l, w);
  } else {
    expm_frechet_ss<Skew>(a, e, r, l, t18_work<M>(a.rows(), true));
  }
}
template <class M>
void expm_frechet_ss(const M& a, const M& e, M& r, M& l) {
  if (is_skew(a)) expm_frechet_ss<true>(a, e, r, l);
  else expm_frechet_ss<false>(a, e, r, l);
}

// Closed forms. They read the skew-symmetric part of A.
template <class M>
void exp2_closed(const M& a, M& r) {
  using std::cos;
  using std::sin;
  const double w = (double(a(0, 1)) - double(a(1, 0))) / 2;
  const double c = cos(w), s = sin(w);
  r(0, 0) = c;
  r(0, 1) = s;
  r(1, 0) = -s;
  r(1, 1) = c;
}

template <class M>
void exp3_closed(const M& a_in, M& r) {
  using std::sqrt;
  const double x = (double(a_in(0, 1)) - double(a_in(1, 0))) / 2, y = (double(a_in(0, 2)) - double(a_in(2, 0))) / 2,
               z = (double(a_in(1, 2)) - double(a_in(2, 1))) / 2;
  Eigen::Matrix3d a;
  a << 0, x, y, -x, 0, z, -y, -z, 0;
  const double th = sqrt(x * x + y * y + z * z);
  // Rodrigues: R = I + sinc(θ)·A + ½·sinc(θ/2)²·A²  (the second factor is (1 − cos θ)/θ², written stably)
  const double f1 = sinc(th), h = sinc(th / 2), f2 = 0.5 * h * h;
  const Eigen::Matrix3d rr = Eigen::Matrix3d::Identity() + f1 * a + f2 * (a * a);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r(i, j) = typename M::Scalar(rr(i, j));
}

// Promote to double, keeping a compile-time size when there is one.
template <class Derived>
using DoubleOf = Eigen::Matrix<double, Derived::RowsAtCompileTime, Derived::ColsAtCompileTime>;

}  // namespace detail

// exp(A) for a skew-symmetric n×n matrix A (fixed or dynamic size, float or double). Computed in double.
template <class Derived>
typename Derived::PlainObject exp(const Eigen::MatrixBase<Derived>& a) {
  static_assert(Derived::RowsAtCompileTime == Derived::ColsAtCompileTime || Derived::RowsAtCompileTime == Eigen::Dynamic ||
                    Derived::ColsAtCompileTime == Eigen::Dynamic,
                "liere::exp: expects a square matrix");
  using Plain = typename Derived::PlainObject;
  using Scalar = typename Derived::Scalar;
  LIERE_ENSURE(a.rows() == a.cols(), "exp: expects a square matrix, got " << a.rows() << "x" << a.cols());
  const Eigen::Index n = a.rows();
  detail::DoubleOf<Derived> ad = a.template cast<double>(), rd(n, n);
  if (!ad.allFinite()) return Plain::Constant(n, n, std::numeric_limits<Scalar>::quiet_NaN());
  constexpr int N = Derived::RowsAtCompileTime;
  if (n == 0) return Plain(n, n);
  if (n == 1) {
    rd(0, 0) = 1.0;  // so(1) = {0}
  } else if (n == 2) {
    // (A fixed size is n itself: the closed forms are only instantiated for the size they read, so that a 1×1
    // instance holds no out-of-bounds a(0, 1) even in a branch it never takes.)
    if constexpr (N == Eigen::Dynamic || N == 2) detail::exp2_closed(ad, rd);
  } else if (n == 3) {
    if constexpr (N == Eigen::Dynamic || N == 3) detail::exp3_closed(ad, rd);
  } else if constexpr (N == Eigen::Dynamic || N > 16) {
    Eigen::MatrixXd r(n, n);  // large working sets live on the heap
    detail::expm_ss(Eigen::MatrixXd(ad), r);
    rd = r;
  } else if constexpr (N > 3) {
    detail::expm_ss(ad, rd);
  }
  return rd.template cast<Scalar>();
}

// dA += dL/dA given dL/dR, where R = exp(A): the adjoint of the Fréchet derivative, L(Aᵀ, dR).
// A skew-symmetric; dR and dA of A's size. Computed in the precision of A's scalar type.
template <class DA, class DG, class DOut>
void exp_backward(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DG>& dr, const Eigen::MatrixBase<DOut>& da_) {
  auto& da = const_cast<Eigen::MatrixBase<DOut>&>(da_);  // Eigen's idiom for output arguments
  using W = typename DA::Scalar;
  const Eigen::Index n = a.rows();
  LIERE_ENSURE(a.rows() == a.cols(), "exp_backward: A must be square, got " << a.rows() << "x" << a.cols());
  LIERE_ENSURE(dr.rows() == n && dr.cols() == n && da.rows() == n && da.cols() == n,
               "exp_backward: A is " << n << "x" << n << " but dR is " << dr.rows() << "x" << dr.cols()
                                     << " and dA is " << da.rows() << "x" << da.cols());
  if (n == 0) return;
  if (n == 1) {
    da(0, 0) += dr(0, 0);  // d exp(a)/da = 1 at a = 0
    return;
  }
  if (n == 2) {
    // A = wJ, J = [[0,1],[−1,0]]. E = e₀I + e₁J commutes with A, the rest anticommutes, so
    // L(A, E) = R·P(E) + sinc(w)·(E − P(E)) with P the projection on span{I, J}; its adjoint uses Rᵀ.
    using std::cos;
    using std::sin;
    const double w = (double(a(0, 1)) - double(a(1, 0))) / 2, c = cos(w), s = sin(w), sn = detail::sinc(w);
    const double g0 = (double(dr(0, 0)) + double(dr(1, 1))) / 2, g1 = (double(dr(0, 1)) - double(dr(1, 0))) / 2;
    const double p0 = c * g0 + s * g1, p1 = c * g1 - s * g0;  // Rᵀ(g0 I + g1 J) = (cI − sJ)(g0 I + g1 J)
    da(0, 0) += W(p0 + sn * (dr(0, 0) - g0));
    da(1, 1) += W(p0 + sn * (dr(1, 1) - g0));
    da(0, 1) += W(p1 + sn * (dr(0, 1) - g1));
    da(1, 0) += W(-p1 + sn * (dr(1, 0) + g1));
    return;
  }
  constexpr int N = DA::RowsAtCompileTime;
  if constexpr (N == Eigen::Dynamic || N > 2) {
    using M = std::conditional_t<(N == Eigen::Dynamic || N > 16), Eigen::Matrix<W, Eigen::Dynamic, Eigen::Dynamic>,
                                 Eigen::Matrix<W, N, N>>;
    M at = a.transpose(), g = dr.template cast<W>(), r(n, n), l(n, n);
    detail::expm_frechet_ss(at, g, r, l);
    da += l.template cast<typename DOut::Scalar>();
  }
}

// The Fréchet derivative itself, L(A, E) (forward mode), with R = exp(A) computed alongside.
template <class DA, class DE>
typename DA::PlainObject exp_frechet(const Eigen::MatrixBase<DA>& a, const Eigen::MatrixBase<DE>& e) {
  using Plain = typename DA::PlainObject;
  Plain l = Plain::Zero(a.rows(), a.cols());
  LIERE_ENSURE(e.rows() == a.rows() && e.cols() == a.cols(), "exp_frechet: A and E differ in size");
  // L(A, E) = L(Aᵀᵀ, E) = exp_backward applied at Aᵀ.
  exp_backward(a.transpose(), e, l);
  return l;
}

// Explicit instances (lie/lie.cpp) for programs that link liere::compiled: the dynamic-size maps, whose
// scaling-and-squaring and Fréchet code is the costliest part of compiling a file that uses them.
#define LIERE_LIE_EXP_INSTANCES(EXTERN, M)                                                               \
  EXTERN template M exp<M>(const Eigen::MatrixBase<M>&);                                                \
  EXTERN template void exp_backward<M, M, M>(const Eigen::MatrixBase<M>&, const Eigen::MatrixBase<M>&,   \
                                             const Eigen::MatrixBase<M>&);                              \
  EXTERN template M exp_frechet<M, M>(const Eigen::MatrixBase<M>&, const Eigen::MatrixBase<M>&);
// A program that defines LIERE_COUNT_FLOPS (bench_rotation, bench_attention) compiles its own instances, with the
// counter: liere::compiled's are built without it and would count nothing.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
LIERE_LIE_EXP_INSTANCES(extern, Eigen::MatrixXd)
LIERE_LIE_EXP_INSTANCES(extern, Eigen::MatrixXf)
#endif

}  // namespace liere
