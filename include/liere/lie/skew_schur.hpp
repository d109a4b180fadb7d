// liere/lie/skew_schur.hpp — the real Schur form of a skew-symmetric matrix, and exp and the adjoint of its
// Fréchet derivative through it (the spectral path of the rotation tables for large blocks).
//
// For A ∈ so(n), n even: A = Q Θ Qᵀ with Q orthogonal, whose columns come in pairs (x_j, y_j) = (Q[:, j],
// Q[:, m + j]), m = n/2, and Θ zero except Θ(x_j, y_j) = σ_j, Θ(y_j, x_j) = −σ_j (σ_j of either sign):
//   A x_j = −σ_j y_j,   A y_j = σ_j x_j.
// Then (Rot(φ) = [[cos φ, sin φ], [−sin φ, cos φ]] = exp(φ·[[0, 1], [−1, 0]]))
//   exp(A)      = Q diag(Rot(σ_j)) Qᵀ                                                   (one product)
//   L(Aᵀ, G)    = Q 𝓛(Qᵀ G Q) Qᵀ                                                         (four products)
// where 𝓛 acts on each 2×2 block M_JK = [[M(x_J,x_K), M(x_J,y_K)], [M(y_J,x_K), M(y_J,y_K)]] as the integral
// ∫₀¹ Rot(−sσ_J) M_JK Rot(−(1−s)σ_K) ds: write M_JK = αI + βJ + γK₁ + δK₂ (J = [[0,1],[−1,0]], K₁ = diag(1,−1),
// K₂ = [[0,1],[1,0]]); the part αI + βJ ≅ α + iβ commutes with rotations and the part γK₁ + δK₂ ≅ γ + iδ
// reverses them, so with h = σ/2
//   α + iβ ← (α + iβ)·e^{−i(h_J + h_K)}·sinc(h_J − h_K),    γ + iδ ← (γ + iδ)·e^{i(h_J − h_K)}·sinc(h_J + h_K).
// These are the divided differences of exp on the complex eigenvalues ±iσ written in the real basis; sinc of a
// difference is formed from the half-angles' sines and cosines (sin(a − b) = sin a cos b − cos a sin b, relative
// error ≈ 2u/|a − b|) and from its series below |a − b| < 1e-3, so close and equal eigenvalues are exact too.
//
// The decomposition (double, n even, n ≤ kSchurMaxN): Householder reduction to a skew tridiagonal T = Hᵀ A H
// (A ← A + v wᵀ − w vᵀ per step, w = τ A v: the skew form of symmetric tridiagonalisation), then the even/odd
// permutation of T is [[0, B], [−Bᵀ, 0]] with B lower bidiagonal (diagonal T(2i, 2i+1), subdiagonal
// T(2i, 2i−1)), and the SVD B = U Σ Vᵀ by Golub–Kahan implicit-shift QR (Golub & Van Loan, Algorithm 8.6.2:
// Wilkinson shift, zero diagonal entries chased out by Givens rotations, deflation at u·‖B‖). Then
// x_j = H[:, even]·U[:, j], y_j = H[:, odd]·V[:, j], σ_j = Σ_jj. Q is a product of reflections and rotations:
// orthogonal to rounding whatever the spectrum (zero, repeated, huge), and exp(A) inherits it; the eigenvalues
// have absolute error ≈ u‖A‖, so R's error is u·‖A‖ as for any backward-stable method.
// skew_schur returns false (Q, σ unspecified) for non-finite input or when the QR iteration does not converge
// in 30·m sweeps (never observed); callers then take the polynomial path.
//
// Cost for n = 64: the reduction and H are ≈ 2n³ flops of level-2 work, the bidiagonal QR about 1e6 flops of
// rotations on 32-long columns, then two 64×32×32 products; exp then costs one product, the adjoint four.
// skew_schur_batch (below) decomposes kSchurLanes matrices at once, one per vector lane: what the rotation tables
// use; skew_schur is the one-matrix form (and the reference the batch is tested against).
// Storage: column-major inside, row-major at the interface (as the tables).
#pragma once

#include <liere/core/eigen.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <liere/core/config.hpp>
#include <vector>

// Compiled once: skew_schur, skew_schur_batch, skew_schur_exp and skew_schur_exp_adjoint (the functions here that
// are not templates and run Eigen's products) are defined in this header for header-only use and only declared for
// programs that link liere::compiled (LIERE_PRECOMPILED): lie/skew_schur.cpp compiles them there, once. Their bodies
// instantiate Eigen's matrix products wherever the header is included, used or not (the engine includes it: about
// 5 s of compile time in each test and program, docs/testing.md "Build time").
#if defined(LIERE_SKEW_SCHUR_SOURCE)
#define LIERE_SKEW_SCHUR_BODIES 1
#define LIERE_SKEW_SCHUR_INLINE
#elif defined(LIERE_PRECOMPILED)
#define LIERE_SKEW_SCHUR_BODIES 0
#define LIERE_SKEW_SCHUR_INLINE
#else
#define LIERE_SKEW_SCHUR_BODIES 1
#define LIERE_SKEW_SCHUR_INLINE inline
#endif

namespace liere {

inline constexpr int kSchurMaxN = 128;

// Working memory of skew_schur for size n, in doubles.
inline constexpr std::size_t skew_schur_work(int n) { return std::size_t(n) * n * 2 + std::size_t(n) * 4; }

namespace detail {

// Givens: c·y + s·z = r, −s·y + c·z = 0.
inline void givens(double y, double z, double& c, double& s, double& r) {
  using std::abs;
  using std::sqrt;
  if (z == 0.0) {
    c = 1.0;
    s = 0.0;
    r = y;
    return;
  }
  // B is scaled to ‖B‖ ≈ 1: no overflow (std::hypot is several times slower). 1/r = r/(y² + z²): the square root
  // and the division run side by side (this chain of rotations is the latency of the whole QR iteration).
  const double q = y * y + z * z;
  if (!(q > 1e-300)) {  // y² + z² underflowed
    r = std::hypot(y, z);
    c = y / r;
    s = z / r;
    return;
  }
  r = std::sqrt(q);
  const double inv = r * (1.0 / q);
  c = y * inv;
  s = z * inv;
}

// Columns p, q of the m×m column-major u: (u_p, u_q) ← (c u_p + s u_q, −s u_p + c u_q).
inline void rotate_columns(double* u, int m, int p, int q, double c, double s) {
  double* up = u + std::ptrdiff_t(p) * m;
  double* uq = u + std::ptrdiff_t(q) * m;
  for (int i = 0; i < m; ++i) {
    const double a = up[i], b = uq[i];
    up[i] = c * a + s * b;
    uq[i] = -s * a + c * b;
  }
}

// SVD of the upper bidiagonal m×m matrix (d diagonal, f superdiagonal, m−1): on return d holds the singular
// values (of either sign, unsorted) and Bᵀ... precisely: B_in = U diag(d) Vᵀ, U and V column-major m×m (set to I
// here). Returns false when the iteration does not converge.
inline bool bidiagonal_svd(double* d, double* f, int m, double* u, double* v) {
  using std::abs;
  for (int i = 0; i < m * m; ++i) u[i] = v[i] = 0.0;
  for (int i = 0; i < m; ++i) u[i * m + i] = v[i * m + i] = 1.0;
  double bnorm = 0;
  for (int i = 0; i < m; ++i) bnorm = std::max(bnorm, abs(d[i]) + (i + 1 < m ? abs(f[i]) : 0.0));
  if (!(bnorm <= 1e300)) return false;  // NaN or overflow
  if (bnorm == 0.0) return true;
  const double scale = 1.0 / bnorm;
  for (int i = 0; i < m; ++i) d[i] *= scale;
  for (int i = 0; i + 1 < m; ++i) f[i] *= scale;
  const double tol = std::numeric_limits<double>::epsilon();
  int hi = m - 1;
  const int max_sweeps = 30 * m;
  for (int sweep = 0; hi > 0; ++sweep) {
    if (sweep > max_sweeps) return false;
    // Deflation: negligible superdiagonal entries are zero.
    for (int i = 0; i < hi; ++i)
      if (abs(f[i]) <= tol) f[i] = 0.0;
    while (hi > 0 && f[hi - 1] == 0.0) --hi;
    if (hi == 0) break;
    int lo = hi - 1;
    while (lo > 0 && f[lo - 1] != 0.0) --lo;
    // The unreduced block lo..hi. A negligible diagonal entry: chase its row's superdiagonal out.
    bool chased = false;
    for (int i = lo; i <= hi; ++i) {
      if (abs(d[i]) > tol) continue;
      d[i] = 0.0;
      chased = true;
      if (i < hi) {  // rows (j, i) for j = i+1..hi zero B(i, j)
        double x = f[i];
        f[i] = 0.0;
        for (int j = i + 1; j <= hi && x != 0.0; ++j) {
          double c, s, r;
          givens(d[j], x, c, s, r);
          d[j] = r;
          if (j < hi) {
            x = -s * f[j];
            f[j] = c * f[j];
          }
          rotate_columns(u, m, j, i, c, s);
        }
      } else {  // last diagonal zero: columns (j, hi) for j = hi−1..lo zero B(j, hi)
        double x = f[hi - 1];
        f[hi - 1] = 0.0;
        for (int j = hi - 1; j >= lo && x != 0.0; --j) {
          double c, s, r;
          givens(d[j], x, c, s, r);
          d[j] = r;
          if (j > lo) {
            x = -s * f[j - 1];
            f[j - 1] = c * f[j - 1];
          }
          rotate_columns(v, m, j, hi, c, s);
        }
      }
      break;
    }
    if (chased) continue;
    // Golub–Kahan step with the Wilkinson shift of the trailing 2×2 of BᵀB.
    const double dm = d[hi - 1], dn = d[hi], fm = f[hi - 1], fp = hi - 1 > lo ? f[hi - 2] : 0.0;
    const double t11 = dm * dm + fp * fp, t12 = dm * fm, t22 = dn * dn + fm * fm;
    const double delta = (t11 - t22) / 2;
    const double mu =
        t22 - t12 * t12 / (delta + std::copysign(std::sqrt(delta * delta + t12 * t12), delta == 0 ? 1.0 : delta));
    double y = d[lo] * d[lo] - mu, z = d[lo] * f[lo];
    for (int k = lo; k < hi; ++k) {
      double c, s, r;
      givens(y, z, c, s, r);  // columns k, k+1
      if (k > lo) f[k - 1] = r;
      y = c * d[k] + s * f[k];
      f[k] = -s * d[k] + c * f[k];
      z = s * d[k + 1];
      d[k + 1] = c * d[k + 1];
      rotate_columns(v, m, k, k + 1, c, s);
      givens(y, z, c, s, r);  // rows k, k+1
      d[k] = r;
      y = c * f[k] + s * d[k + 1];
      d[k + 1] = -s * f[k] + c * d[k + 1];
      if (k + 1 < hi) {
        z = s * f[k + 1];
        f[k + 1] = c * f[k + 1];
      }
      rotate_columns(u, m, k, k + 1, c, s);
    }
    f[hi - 1] = y;
  }
  for (int i = 0; i < m; ++i) d[i] *= bnorm;
  return true;
}

}  // namespace detail

// A (n×n, row-major, skew-symmetric; only its strict upper triangle is read) = Q Θ Qᵀ as described above: q (n×n,
// row-major), sigma (n/2). work: skew_schur_work(n) doubles. n even, 2 ≤ n ≤ kSchurMaxN.
LIERE_SKEW_SCHUR_INLINE bool skew_schur(const double* a_in, int n, double* q_out, double* sigma, double* work);
#if LIERE_SKEW_SCHUR_BODIES
LIERE_SKEW_SCHUR_INLINE bool skew_schur(const double* a_in, int n, double* q_out, double* sigma, double* work) {
  using std::abs;
  using std::sqrt;
  const int m = n / 2;
  double* a = work;          // n×n column-major: the reduced matrix, then the reflectors below the subdiagonal
  double* h = a + n * n;     // n×n column-major: H
  double* tau = h + n * n;   // n
  double* e = tau + n;       // n: T(k, k+1)
  double* w = e + n;         // n
  double* dd = w + n;        // n: d then f of Bᵀ
  // Only the strict lower triangle of the reduced matrix is kept (the rest follows by skew symmetry).
  for (int c = 0; c < n; ++c)
    for (int r = c + 1; r < n; ++r) {
      const double x = -a_in[c * n + r];
      if (!(x - x == 0.0)) return false;
      a[r + c * n] = x;
    }
  // Householder reduction: column k below the diagonal → β e₁.
  for (int k = 0; k + 2 < n; ++k) {
    double* x = a + (k + 1) + std::ptrdiff_t(k) * n;  // length len = n − k − 1
    const int len = n - k - 1;
    double s2 = 0;
    for (int i = 1; i < len; ++i) s2 += x[i] * x[i];
    const double alpha = x[0];
    if (s2 == 0.0) {
      tau[k] = 0.0;
      e[k] = -alpha;
      for (int i = 1; i < len; ++i) x[i] = 0.0;
      continue;
    }
    const double beta = -std::copysign(sqrt(alpha * alpha + s2), alpha);
    const double tk = (beta - alpha) / beta;
    tau[k] = tk;
    const double inv = 1.0 / (alpha - beta);
    x[0] = 1.0;
    for (int i = 1; i < len; ++i) x[i] *= inv;
    e[k] = -beta;
    // w = τ A22 v from A22's lower triangle (A22(j, i) = −A22(i, j)), then A22 += v wᵀ − w vᵀ below the diagonal.
    // Column j: w[j+1..] += A22(j+1.., j)·v_j and w[j] −= ⟨A22(j+1.., j), v[j+1..]⟩ (Eigen maps: vectorised
    // reductions, which a plain loop is not without -ffast-math).
    double* a22 = a + (k + 1) + std::ptrdiff_t(k + 1) * n;
    Eigen::Map<Eigen::VectorXd> wv(w, len);
    const Eigen::Map<const Eigen::VectorXd> vv(x, len);
    wv.setZero();
    for (int j = 0; j + 1 < len; ++j) {
      const int below = len - j - 1;
      const Eigen::Map<const Eigen::VectorXd> col(a22 + std::ptrdiff_t(j) * n + j + 1, below);
      wv.tail(below) += col * vv[j];
      wv[j] -= col.dot(vv.tail(below));
    }
    wv *= tk;
    for (int j = 0; j + 1 < len; ++j) {
      const int below = len - j - 1;
      Eigen::Map<Eigen::VectorXd> col(a22 + std::ptrdiff_t(j) * n + j + 1, below);
      col += vv.tail(below) * wv[j] - wv.tail(below) * vv[j];
    }
  }
  e[n - 2] = -a[(n - 1) + std::ptrdiff_t(n - 2) * n];
  // H = P_0 P_1 ⋯ P_{n−3}, accumulated backwards.
  for (int i = 0; i < n * n; ++i) h[i] = 0.0;
  for (int i = 0; i < n; ++i) h[i + i * n] = 1.0;
  for (int k = n - 3; k >= 0; --k) {  // H(k+1.., k+1..) −= τ v (vᵀ H(k+1.., k+1..))
    if (tau[k] == 0.0) continue;
    const int len = n - k - 1;
    const Eigen::Map<const Eigen::VectorXd> v(a + (k + 1) + std::ptrdiff_t(k) * n, len);
    Eigen::Map<Eigen::MatrixXd, 0, Eigen::OuterStride<>> hs(h + (k + 1) + std::ptrdiff_t(k + 1) * n, len, len,
                                                            Eigen::OuterStride<>(n));
    Eigen::Map<Eigen::RowVectorXd> t(w, len);
    t.noalias() = tau[k] * (v.transpose() * hs);
    hs.noalias() -= v * t;
  }
  // Bᵀ (upper bidiagonal): d_i = T(2i, 2i+1), f_i = Bᵀ(i, i+1) = B(i+1, i) = T(2i+2, 2i+1) = −T(2i+1, 2i+2).
  double* d = dd;
  double* f = dd + m;
  for (int i = 0; i < m; ++i) d[i] = e[2 * i];
  for (int i = 0; i + 1 < m; ++i) f[i] = -e[2 * i + 1];
  // Bᵀ = U' Σ V'ᵀ, so B = V' Σ U'ᵀ: x_j = H[:, even] V'[:, j], y_j = H[:, odd] U'[:, j]. U', V' go into the
  // (dead) reduced matrix's storage.
  double* ut = a;
  double* vt = a + m * m;
  if (!detail::bidiagonal_svd(d, f, m, ut, vt)) return false;
  for (int j = 0; j < m; ++j) sigma[j] = d[j];
  // q (row-major) = [H_even·V' | H_odd·U']: q[r, j] = Σ_i H(r, 2i) V'(i, j).
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  Eigen::Map<RowMat> q(q_out, n, n);
  const Eigen::Map<const ColMat, 0, Eigen::OuterStride<>> h_even(h, n, m, Eigen::OuterStride<>(2 * n));
  const Eigen::Map<const ColMat, 0, Eigen::OuterStride<>> h_odd(h + n, n, m, Eigen::OuterStride<>(2 * n));
  q.leftCols(m).noalias() = h_even * Eigen::Map<const ColMat>(vt, m, m);
  q.rightCols(m).noalias() = h_odd * Eigen::Map<const ColMat>(ut, m, m);
  return true;
}
#endif

// ---- Several matrices at once ---------------------------------------------------------------------------------
// skew_schur_batch decomposes up to kSchurLanes matrices of one size together, the same steps as skew_schur with the
// matrices side by side in the lanes of every vector operation: element (r, c) of lane l at ((r + c·n)·P + l). The
// reduction and the accumulation of Q are level-2 loops whose innermost dimension is the P lanes (full-width,
// aligned, no horizontal sums); one matrix at a time they run on short, shrinking columns. Each lane gives the
// numbers skew_schur gives up to rounding (the same reflectors and rotations; sums taken in another order).
// Q is not formed from H: the reflectors are applied, last first, to the n×n matrix that holds V' in the even rows
// of its left half and U' in the odd rows of its right half (2n³ flops against 4/3 n³ for H and n³ for the two
// products).
inline constexpr int kSchurLanes = 8;

// Working memory of skew_schur_batch for size n, in doubles.
inline constexpr std::size_t skew_schur_batch_work(int n) {
  return std::size_t(kSchurLanes) * (std::size_t(n) * n * 2 + std::size_t(n) * n / 2 + std::size_t(n) * 4) + 8;
}

namespace detail {

// The lanes' Householder reduction to skew tridiagonal form (skew_schur's, lane by lane): a (n×n×P, lane layout,
// strict lower triangle) → the reflectors below the subdiagonal (v_k(0) = 1 stored), tau (n×P), e (n×P):
// T(k, k+1) = e_k.
template <int P>
void skew_reduce_lanes(double* a, int n, double* tau, double* e, double* w) {
  using std::sqrt;
  using Lanes = Eigen::Array<double, P, 1>;
  using CMap = Eigen::Map<const Lanes, Eigen::Aligned64>;
  using Map = Eigen::Map<Lanes, Eigen::Aligned64>;
  const std::ptrdiff_t cs = std::ptrdiff_t(n) * P;  // column stride
  for (int k = 0; k + 2 < n; ++k) {
    double* x = a + (std::ptrdiff_t(k + 1) + std::ptrdiff_t(k) * n) * P;  // rows k+1.., column k
    const int len = n - k - 1;
    alignas(64) double s2[P] = {}, inv[P];
    for (int i = 1; i < len; ++i) {
      const double* xi = x + std::ptrdiff_t(i) * P;
#pragma omp simd
      for (int l = 0; l < P; ++l) s2[l] += xi[l] * xi[l];
    }
    double* tk = tau + std::ptrdiff_t(k) * P;
    double* ek = e + std::ptrdiff_t(k) * P;
    for (int l = 0; l < P; ++l) {
      const double alpha = x[l];
      if (s2[l] == 0.0) {
        tk[l] = 0.0;
        ek[l] = -alpha;
        inv[l] = 0.0;
      } else {
        const double beta = -std::copysign(sqrt(alpha * alpha + s2[l]), alpha);
        tk[l] = (beta - alpha) / beta;
        inv[l] = 1.0 / (alpha - beta);
        ek[l] = -beta;
      }
      x[l] = 1.0;
    }
    for (int i = 1; i < len; ++i) {
      double* xi = x + std::ptrdiff_t(i) * P;
#pragma omp simd
      for (int l = 0; l < P; ++l) xi[l] *= inv[l];
    }
    // w = τ A22 v from the strict lower triangle of A22 (A22(j, i) = −A22(i, j)), then A22 += v wᵀ − w vᵀ; two
    // columns at a time (the loops are bound by loads: v_i and w_i are loaded once for both).
    double* a22 = a + (std::ptrdiff_t(k + 1) + std::ptrdiff_t(k + 1) * n) * P;
    const auto V = [&](int i) { return CMap(x + std::ptrdiff_t(i) * P); };
    const auto W = [&](int i) { return Map(w + std::ptrdiff_t(i) * P); };
    const auto C = [&](int i, int j) { return Map(a22 + std::ptrdiff_t(j) * cs + std::ptrdiff_t(i) * P); };
    for (int i = 0; i < len; ++i) W(i).setZero();
    int j = 0;
    for (; j + 2 < len; j += 2) {  // columns j, j+1 (rows below j+1 exist)
      const Lanes vj = V(j), vj1 = V(j + 1);
      Lanes acc0 = C(j + 1, j) * V(j + 1), acc1 = Lanes::Zero();
      W(j + 1) += C(j + 1, j) * vj;
      for (int i = j + 2; i < len; ++i) {
        const Lanes c0 = C(i, j), c1 = C(i, j + 1), vi = V(i);
        W(i) += c0 * vj + c1 * vj1;
        acc0 += c0 * vi;
        acc1 += c1 * vi;
      }
      W(j) -= acc0;
      W(j + 1) -= acc1;
    }
    for (; j + 1 < len; ++j) {
      const Lanes vj = V(j);
      Lanes acc = Lanes::Zero();
      for (int i = j + 1; i < len; ++i) {
        const Lanes c0 = C(i, j);
        W(i) += c0 * vj;
        acc += c0 * V(i);
      }
      W(j) -= acc;
    }
    const Lanes tl = CMap(tk);
    for (int i = 0; i < len; ++i) W(i) *= tl;
    j = 0;
    for (; j + 2 < len; j += 2) {
      const Lanes vj = V(j), vj1 = V(j + 1), wj = W(j), wj1 = W(j + 1);
      C(j + 1, j) += V(j + 1) * wj - W(j + 1) * vj;
      for (int i = j + 2; i < len; ++i) {
        const Lanes vi = V(i), wi = W(i);
        C(i, j) += vi * wj - wi * vj;
        C(i, j + 1) += vi * wj1 - wi * vj1;
      }
    }
    for (; j + 1 < len; ++j) {
      const Lanes vj = V(j), wj = W(j);
      for (int i = j + 1; i < len; ++i) C(i, j) += V(i) * wj - W(i) * vj;
    }
  }
  const double* last = a + (std::ptrdiff_t(n - 1) + std::ptrdiff_t(n - 2) * n) * P;
  for (int l = 0; l < P; ++l) e[std::ptrdiff_t(n - 2) * P + l] = -last[l];
}

// q (n×n×P, lane layout, column-major) ← P_0 P_1 ⋯ P_{n−3} q: the reflectors of skew_reduce_lanes, last first.
// Four columns of q at a time (each load of v serves four dot products and four updates; the loop is bound by
// loads), the lanes as Eigen fixed-size arrays (one vector register each with AVX-512, two with AVX2).
template <int P>
void apply_reflectors_lanes(const double* a, const double* tau, int n, double* q) {
  using Lanes = Eigen::Array<double, P, 1>;
  using CMap = Eigen::Map<const Lanes, Eigen::Aligned64>;
  using Map = Eigen::Map<Lanes, Eigen::Aligned64>;
  const std::ptrdiff_t cs = std::ptrdiff_t(n) * P;
  for (int k = n - 3; k >= 0; --k) {
    const double* v = a + (std::ptrdiff_t(k + 1) + std::ptrdiff_t(k) * n) * P;
    const Lanes tk = CMap(tau + std::ptrdiff_t(k) * P);
    const int len = n - k - 1;
    int c = 0;
    for (; c + 4 <= n; c += 4) {
      double* q0 = q + std::ptrdiff_t(c) * cs + std::ptrdiff_t(k + 1) * P;
      Lanes t0 = Lanes::Zero(), t1 = Lanes::Zero(), t2 = Lanes::Zero(), t3 = Lanes::Zero();
      for (int i = 0; i < len; ++i) {
        const Lanes vi = CMap(v + std::ptrdiff_t(i) * P);
        const double* qi = q0 + std::ptrdiff_t(i) * P;
        t0 += vi * CMap(qi);
        t1 += vi * CMap(qi + cs);
        t2 += vi * CMap(qi + 2 * cs);
        t3 += vi * CMap(qi + 3 * cs);
      }
      t0 *= tk;
      t1 *= tk;
      t2 *= tk;
      t3 *= tk;
      for (int i = 0; i < len; ++i) {
        const Lanes vi = CMap(v + std::ptrdiff_t(i) * P);
        double* qi = q0 + std::ptrdiff_t(i) * P;
        Map(qi) -= vi * t0;
        Map(qi + cs) -= vi * t1;
        Map(qi + 2 * cs) -= vi * t2;
        Map(qi + 3 * cs) -= vi * t3;
      }
    }
    for (; c < n; ++c) {
      double* qc = q + std::ptrdiff_t(c) * cs + std::ptrdiff_t(k + 1) * P;
      Lanes t = Lanes::Zero();
      for (int i = 0; i < len; ++i) t += CMap(v + std::ptrdiff_t(i) * P) * CMap(qc + std::ptrdiff_t(i) * P);
      t *= tk;
      for (int i = 0; i < len; ++i) Map(qc + std::ptrdiff_t(i) * P) -= CMap(v + std::ptrdiff_t(i) * P) * t;
    }
  }
}

// Columns p, q of lane l of the m×m×P lane-layout u: (u_p, u_q) ← (c u_p + s u_q, −s u_p + c u_q).
template <int P>
void rotate_columns_lane(double* u, int m, int l, int p, int q, double c, double s) {
  double* up = u + std::ptrdiff_t(p) * m * P + l;
  double* uq = u + std::ptrdiff_t(q) * m * P + l;
  for (int i = 0; i < m; ++i) {
    const double a = up[i * P], b = uq[i * P];
    up[i * P] = c * a + s * b;
    uq[i * P] = -s * a + c * b;
  }
}

// Columns 0 and 1 of the lane-layout p (m rows, column-major), lane-wise rotations c, s:
// (x, y) ← (c x + s y, −s x + c y). (Applied step by step: a sweep's rotations applied afterwards row by row, as
// LAPACK's dlasr does, measured 1.6× slower here: the lanes' U and V, 2·m²·P doubles, live in L2.)
template <int P>
void rotate_lane_columns(double* p, int m, const double* c, const double* s) {
  double* __restrict__ x = p;
  double* __restrict__ y = p + std::ptrdiff_t(m) * P;
  for (int i = 0; i < m * P; i += P) {
#pragma omp simd
    for (int l = 0; l < P; ++l) {
      const double a = x[i + l], b = y[i + l];
      x[i + l] = c[l] * a + s[l] * b;
      y[i + l] = -s[l] * a + c[l] * b;
    }
  }
}

// bidiagonal_svd for P bidiagonals side by side (d, f: m×P, lane layout; u, v: m×m×P, column-major lane layout,
// set to I here), the Golub–Kahan sweeps of all lanes run in lockstep: step k of every lane whose unreduced block
// covers k is one vector operation (lanes outside their block take the identity rotation and keep their entries),
// so the chain of dependent square roots and divisions is paid once for P matrices. Deflation, the shift and the
// chase of a zero diagonal entry are per lane, as in bidiagonal_svd. ok[l]: in, the lane is to be decomposed;
// out, it converged (false for non-finite or overflowing input, or no convergence in 30·m of its sweeps).
template <int P>
void bidiagonal_svd_lanes(double* d, double* f, int m, double* u, double* v, bool* ok) {
  using std::abs;
  for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(m) * m * P; ++i) u[i] = v[i] = 0.0;
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < P; ++l) u[(std::ptrdiff_t(i) * m + i) * P + l] = v[(std::ptrdiff_t(i) * m + i) * P + l] = 1.0;
  const double tol = std::numeric_limits<double>::epsilon();
  const int max_sweeps = 30 * m;
  double bnorm[P];
  int hi[P], sweeps[P];
  for (int l = 0; l < P; ++l) {
    hi[l] = 0;
    sweeps[l] = 0;
    bnorm[l] = 0.0;
    if (!ok[l]) continue;
    for (int i = 0; i < m; ++i)
      bnorm[l] = std::max(bnorm[l], abs(d[i * P + l]) + (i + 1 < m ? abs(f[i * P + l]) : 0.0));
    if (!(bnorm[l] <= 1e300)) {
      ok[l] = false;
      continue;
    }
    if (bnorm[l] == 0.0) continue;
    const double scale = 1.0 / bnorm[l];
    for (int i = 0; i < m; ++i) d[i * P + l] *= scale;
    for (int i = 0; i + 1 < m; ++i) f[i * P + l] *= scale;
    hi[l] = m - 1;
  }
  for (;;) {
    alignas(64) double y[P], z[P], y0[P], z0[P];
    int lo_s[P], hi_s[P];
    int LO = m, HI = -1;
    bool pending = false;
    for (int l = 0; l < P; ++l) {
      lo_s[l] = m;
      hi_s[l] = -1;
      y0[l] = z0[l] = 0.0;
      if (hi[l] == 0) continue;
      if (sweeps[l]++ > max_sweeps) {
        ok[l] = false;
        hi[l] = 0;
        continue;
      }
      for (int i = 0; i < hi[l]; ++i)
        if (abs(f[i * P + l]) <= tol) f[i * P + l] = 0.0;
      while (hi[l] > 0 && f[(hi[l] - 1) * P + l] == 0.0) --hi[l];
      const int h = hi[l];
      if (h == 0) continue;
      pending = true;
      int lo = h - 1;
      while (lo > 0 && f[(lo - 1) * P + l] != 0.0) --lo;
      bool chased = false;
      for (int i = lo; i <= h; ++i) {  // a negligible diagonal entry: chase its row's superdiagonal out
        if (abs(d[i * P + l]) > tol) continue;
        d[i * P + l] = 0.0;
        chased = true;
        if (i < h) {
          double x = f[i * P + l];
          f[i * P + l] = 0.0;
          for (int j = i + 1; j <= h && x != 0.0; ++j) {
            double c, s, r;
            givens(d[j * P + l], x, c, s, r);
            d[j * P + l] = r;
            if (j < h) {
              x = -s * f[j * P + l];
              f[j * P + l] = c * f[j * P + l];
            }
            rotate_columns_lane<P>(u, m, l, j, i, c, s);
          }
        } else {
          double x = f[(h - 1) * P + l];
          f[(h - 1) * P + l] = 0.0;
          for (int j = h - 1; j >= lo && x != 0.0; --j) {
            double c, s, r;
            givens(d[j * P + l], x, c, s, r);
            d[j * P + l] = r;
            if (j > lo) {
              x = -s * f[(j - 1) * P + l];
              f[(j - 1) * P + l] = c * f[(j - 1) * P + l];
            }
            rotate_columns_lane<P>(v, m, l, j, h, c, s);
          }
        }
        break;
      }
      if (chased) continue;
      const double dm = d[(h - 1) * P + l], dn = d[h * P + l], fm = f[(h - 1) * P + l],
                   fp = h - 1 > lo ? f[(h - 2) * P + l] : 0.0;
      const double t11 = dm * dm + fp * fp, t12 = dm * fm, t22 = dn * dn + fm * fm;
      const double delta = (t11 - t22) / 2;
      const double mu =
          t22 - t12 * t12 / (delta + std::copysign(std::sqrt(delta * delta + t12 * t12), delta == 0 ? 1.0 : delta));
      y0[l] = d[lo * P + l] * d[lo * P + l] - mu;
      z0[l] = d[lo * P + l] * f[lo * P + l];
      lo_s[l] = lo;
      hi_s[l] = h;
      LO = std::min(LO, lo);
      HI = std::max(HI, h);
    }
    if (!pending) break;
    for (int l = 0; l < P; ++l) y[l] = z[l] = 0.0;
    // One step of every lane: givens(y, z) on columns k, k+1, then givens on rows k, k+1 (bidiagonal_svd's loop
    // body). The square roots go through Eigen's packet sqrt (std::sqrt may set errno, which keeps the compiler
    // from vectorising a loop that calls it); a lane whose y² + z² underflows (never for ‖B‖ = 1 short of a
    // zero pair) is redone with the branching givens.
    using Lanes = Eigen::Array<double, P, 1>;
    alignas(64) double q1[P], r1[P], q2[P], r2[P], c1[P], s1[P], c2[P], s2[P], y2[P], z2[P];
    Eigen::Map<Lanes, Eigen::Aligned64> q1m(q1), r1m(r1), q2m(q2), r2m(r2);
    for (int k = LO; k < HI; ++k) {
      double* __restrict__ dk = d + std::ptrdiff_t(k) * P;
      double* __restrict__ fk = f + std::ptrdiff_t(k) * P;
      double* __restrict__ dk1 = dk + P;
      double* __restrict__ fk1 = fk + P;
      double* __restrict__ fkm = fk - P;
#pragma omp simd
      for (int l = 0; l < P; ++l) {
        const bool start = k == lo_s[l];
        const double yy = start ? y0[l] : y[l], zz = start ? z0[l] : z[l];
        y[l] = yy;
        z[l] = zz;
        q1[l] = yy * yy + zz * zz;
      }
      r1m = q1m.sqrt();
      bool tiny = false;
#pragma omp simd reduction(|| : tiny)
      for (int l = 0; l < P; ++l) {
        const bool act = k >= lo_s[l] && k < hi_s[l];
        tiny = tiny || (act && !(q1[l] > 1e-300));
        const double inv = r1[l] / q1[l];
        c1[l] = act ? y[l] * inv : 1.0;
        s1[l] = act ? z[l] * inv : 0.0;
        fkm[l] = act && k > lo_s[l] ? r1[l] : fkm[l];  // (blends, not masked stores: the next loads forward)
      }
      if (tiny)
        for (int l = 0; l < P; ++l) {
          if (!(k >= lo_s[l] && k < hi_s[l]) || q1[l] > 1e-300) continue;
          double r;
          givens(y[l], z[l], c1[l], s1[l], r);
          if (k > lo_s[l]) fkm[l] = r;
        }
#pragma omp simd
      for (int l = 0; l < P; ++l) {
        const bool act = k >= lo_s[l] && k < hi_s[l];
        const double c = c1[l], s = s1[l];
        const double yy = c * dk[l] + s * fk[l];
        const double zz = s * dk1[l];
        const double fkn = -s * dk[l] + c * fk[l], dk1n = c * dk1[l];
        fk[l] = act ? fkn : fk[l];
        dk1[l] = act ? dk1n : dk1[l];
        y2[l] = yy;
        z2[l] = zz;
        q2[l] = yy * yy + zz * zz;
      }
      r2m = q2m.sqrt();
      tiny = false;
#pragma omp simd reduction(|| : tiny)
      for (int l = 0; l < P; ++l) {
        const bool act = k >= lo_s[l] && k < hi_s[l];
        tiny = tiny || (act && !(q2[l] > 1e-300));
        const double inv = r2[l] / q2[l];
        c2[l] = act ? y2[l] * inv : 1.0;
        s2[l] = act ? z2[l] * inv : 0.0;
        dk[l] = act ? r2[l] : dk[l];
      }
      if (tiny)
        for (int l = 0; l < P; ++l) {
          if (!(k >= lo_s[l] && k < hi_s[l]) || q2[l] > 1e-300) continue;
          double r;
          givens(y2[l], z2[l], c2[l], s2[l], r);
          dk[l] = r;
        }
#pragma omp simd
      for (int l = 0; l < P; ++l) {
        const bool act = k >= lo_s[l] && k < hi_s[l], inner = k + 1 < hi_s[l];
        const double c = c2[l], s = s2[l];
        const double yy = c * fk[l] + s * dk1[l];
        const double dk1n = -s * fk[l] + c * dk1[l];
        const double zz = s * fk1[l];
        dk1[l] = act ? dk1n : dk1[l];
        fk1[l] = act && inner ? c * fk1[l] : fk1[l];
        fk[l] = act && !inner ? yy : fk[l];  // the lane's last step: f[hi − 1] = y
        y[l] = yy;
        z[l] = zz;
      }
      rotate_lane_columns<P>(v + std::ptrdiff_t(k) * m * P, m, c1, s1);
      rotate_lane_columns<P>(u + std::ptrdiff_t(k) * m * P, m, c2, s2);
    }
  }
  for (int l = 0; l < P; ++l)
    if (bnorm[l] > 0.0)
      for (int i = 0; i < m; ++i) d[i * P + l] *= bnorm[l];
}

}  // namespace detail

// skew_schur for `count` (1 ≤ count ≤ kSchurLanes) matrices of size n at once: a[l] (n×n row-major, skew; only
// the strict upper triangle is read) = Q_l Θ_l Q_lᵀ into q[l] (n×n row-major) and sigma[l] (n/2); ok[l] false where
// skew_schur would return false (non-finite input, no convergence): then q[l], sigma[l] are unspecified.
// work: skew_schur_batch_work(n) doubles, 64-byte aligned not required.
LIERE_SKEW_SCHUR_INLINE void skew_schur_batch(const double* const* a_in, int count, int n, double* const* q_out,
                                              double* const* sigma, bool* ok, double* work);
#if LIERE_SKEW_SCHUR_BODIES
LIERE_SKEW_SCHUR_INLINE void skew_schur_batch(const double* const* a_in, int count, int n, double* const* q_out,
                                              double* const* sigma, bool* ok, double* work) {
  constexpr int P = kSchurLanes;
  const int m = n / 2;
  const std::size_t nn = std::size_t(n) * n;
  // Align the lane arrays to 64 bytes.
  double* base = work + ((64 - (reinterpret_cast<std::uintptr_t>(work) % 64)) % 64) / sizeof(double);
  double* a = base;            // n×n×P
  double* q = a + nn * P;      // n×n×P
  double* tau = q + nn * P;    // n×P
  double* e = tau + n * P;     // n×P
  double* w = e + n * P;       // n×P
  double* dd = w + n * P;      // d, f (m×P each), then U', V' (m×m×P each)
  bool finite[P];
  bool lane_ok[P];
  for (int l = 0; l < P; ++l) finite[l] = l < count;
  for (int c = 0; c < n; ++c)
    for (int r = c + 1; r < n; ++r) {
      double* dst = a + (std::ptrdiff_t(r) + std::ptrdiff_t(c) * n) * P;
      for (int l = 0; l < P; ++l) {
        const double x = l < count ? -a_in[l][c * n + r] : 0.0;
        if (!(x - x == 0.0)) finite[l] = false;
        dst[l] = x;
      }
    }
  for (int l = 0; l < count; ++l)  // a non-finite lane is decomposed as a zero matrix (and reported)
    if (!finite[l])
      for (int c = 0; c < n; ++c)
        for (int r = c + 1; r < n; ++r) a[(std::ptrdiff_t(r) + std::ptrdiff_t(c) * n) * P + l] = 0.0;
  detail::skew_reduce_lanes<P>(a, n, tau, e, w);
  // Bᵀ = U' Σ V'ᵀ for all lanes together (skew_schur), then P·(V' ⊕ U') into q.
  double* d = dd;
  double* f = d + std::ptrdiff_t(m) * P;
  double* ut = f + std::ptrdiff_t(m) * P;
  double* vt = ut + std::ptrdiff_t(m) * m * P;
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < P; ++l) {
      d[i * P + l] = e[std::ptrdiff_t(2 * i) * P + l];
      f[i * P + l] = i + 1 < m ? -e[std::ptrdiff_t(2 * i + 1) * P + l] : 0.0;
    }
  for (int l = 0; l < P; ++l) lane_ok[l] = finite[l];
  detail::bidiagonal_svd_lanes<P>(d, f, m, ut, vt, lane_ok);
  for (int l = 0; l < count; ++l) ok[l] = lane_ok[l];
  for (int l = 0; l < count; ++l)
    for (int j = 0; j < m; ++j) sigma[l][j] = d[j * P + l];
  for (std::size_t i = 0; i < nn * P; ++i) q[i] = 0.0;
  for (int j = 0; j < m; ++j)
    for (int i = 0; i < m; ++i) {
      double* qe = q + (std::ptrdiff_t(2 * i) + std::ptrdiff_t(j) * n) * P;
      double* qo = q + (std::ptrdiff_t(2 * i + 1) + std::ptrdiff_t(m + j) * n) * P;
      const double* ve = vt + (std::ptrdiff_t(i) + std::ptrdiff_t(j) * m) * P;
      const double* uo = ut + (std::ptrdiff_t(i) + std::ptrdiff_t(j) * m) * P;
      for (int l = 0; l < P; ++l) {
        qe[l] = ve[l];
        qo[l] = uo[l];
      }
    }
  detail::apply_reflectors_lanes<P>(a, tau, n, q);
  for (int l = 0; l < count; ++l) {
    if (!ok[l]) continue;
    double* ql = q_out[l];
    for (int c = 0; c < n; ++c)
      for (int r = 0; r < n; ++r) ql[r * n + c] = q[(std::ptrdiff_t(r) + std::ptrdiff_t(c) * n) * P + l];
  }
}
#endif

// The half-angle sines and cosines of σ (m of each), for skew_schur_divided.
inline void skew_schur_half_angles(const double* sigma, int m, double* hc, double* hs) {
  for (int j = 0; j < m; ++j) {
    hc[j] = std::cos(0.5 * sigma[j]);
    hs[j] = std::sin(0.5 * sigma[j]);
  }
}

// mm (n×n, row-major, in place) ← 𝓛(mm): the eigenbasis step of the adjoint (above), given Qᵀ G Q.
template <class T>
void skew_schur_divided(T* mm, int n, const double* sigma, const double* hc, const double* hs) {
  const int m = n / 2;
  for (int jj = 0; jj < m; ++jj) {
    const double hj = 0.5 * sigma[jj], cj = hc[jj], sj = hs[jj];
    T* rx = mm + std::ptrdiff_t(jj) * n;       // row x_J
    T* ry = mm + std::ptrdiff_t(m + jj) * n;  // row y_J
    for (int kk = 0; kk < m; ++kk) {
      const double hk = 0.5 * sigma[kk], ck = hc[kk], sk = hs[kk];
      const double dm = hj - hk, dp = hj + hk;
      const double sin_m = sj * ck - cj * sk, sin_p = sj * ck + cj * sk;
      const double cos_m = cj * ck + sj * sk, cos_p = cj * ck - sj * sk;
      const double sinc_m = std::abs(dm) < 1e-3 ? 1.0 - dm * dm / 6.0 * (1.0 - dm * dm / 20.0) : sin_m / dm;
      const double sinc_p = std::abs(dp) < 1e-3 ? 1.0 - dp * dp / 6.0 * (1.0 - dp * dp / 20.0) : sin_p / dp;
      const double a = double(rx[kk]), b = double(rx[m + kk]), c = double(ry[kk]), d = double(ry[m + kk]);
      const double al = 0.5 * (a + d), be = 0.5 * (b - c), ga = 0.5 * (a - d), de = 0.5 * (b + c);
      // (α + iβ)·e^{−i(h_J + h_K)}·sinc(h_J − h_K),  (γ + iδ)·e^{i(h_J − h_K)}·sinc(h_J + h_K)
      const double al2 = sinc_m * (al * cos_p + be * sin_p), be2 = sinc_m * (be * cos_p - al * sin_p);
      const double ga2 = sinc_p * (ga * cos_m - de * sin_m), de2 = sinc_p * (de * cos_m + ga * sin_m);
      rx[kk] = T(al2 + ga2);
      rx[m + kk] = T(be2 + de2);
      ry[kk] = T(de2 - be2);
      ry[m + kk] = T(al2 - ga2);
    }
  }
}

// r (n×n, row-major) = exp(A) = Q diag(Rot(σ_j)) Qᵀ from skew_schur's q, sigma; work: n² doubles.
LIERE_SKEW_SCHUR_INLINE void skew_schur_exp(const double* q_in, const double* sigma, int n, double* r, double* work);
#if LIERE_SKEW_SCHUR_BODIES
LIERE_SKEW_SCHUR_INLINE void skew_schur_exp(const double* q_in, const double* sigma, int n, double* r, double* work) {
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int m = n / 2;
  double cs[kSchurMaxN];  // cos σ_j, then sin σ_j
  for (int j = 0; j < m; ++j) {
    cs[j] = std::cos(sigma[j]);
    cs[m + j] = std::sin(sigma[j]);
  }
  // W = [X C − Y S, X S + Y C], row by row (contiguous in the row-major Q and W)
  for (int i = 0; i < n; ++i) {
    const double* x = q_in + std::ptrdiff_t(i) * n;
    double* wr = work + std::ptrdiff_t(i) * n;
    for (int j = 0; j < m; ++j) {
      wr[j] = cs[j] * x[j] - cs[m + j] * x[m + j];
      wr[m + j] = cs[m + j] * x[j] + cs[j] * x[m + j];
    }
  }
  const Eigen::Map<const RowMat> q(q_in, n, n), w(work, n, n);
  Eigen::Map<RowMat>(r, n, n).noalias() = w * q.transpose();
}
#endif

// da (n×n, row-major) += L(Aᵀ, g) through the Schur form, in double (the reference of the op's float path);
// work: n² + 2n doubles.
LIERE_SKEW_SCHUR_INLINE void skew_schur_exp_adjoint(const double* q_in, const double* sigma, int n, const double* g_in,
                                                    double* da, double* work);
#if LIERE_SKEW_SCHUR_BODIES
LIERE_SKEW_SCHUR_INLINE void skew_schur_exp_adjoint(const double* q_in, const double* sigma, int n, const double* g_in,
                                                    double* da, double* work) {
  using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMat> q(q_in, n, n);
  Eigen::Map<RowMat> mm(work, n, n);
  double* hc = work + n * n;
  double* hs = hc + n / 2;
  skew_schur_half_angles(sigma, n / 2, hc, hs);
  mm.noalias() = q.transpose() * Eigen::Map<const RowMat>(g_in, n, n) * q;
  skew_schur_divided(work, n, sigma, hc, hs);
  Eigen::Map<RowMat>(da, n, n).noalias() += q * mm * q.transpose();
}
#endif

}  // namespace liere

#undef LIERE_SKEW_SCHUR_BODIES
#undef LIERE_SKEW_SCHUR_INLINE
