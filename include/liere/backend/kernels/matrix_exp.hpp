// liere/backend/kernels/matrix_exp.hpp — one block of a rotation table and of its backward, shared by the CPU
// (backend/cpu/rotation_table.hpp) and the CUDA kernels (backend/cuda/rotation_table.cu).
//
// Every matrix is N×N, row-major, on raw pointers; N is a compile-time block size. The maths is that of
// lie/exp.hpp (the reference the tests compare with), written without Eigen so that a device can run it:
//   block_generator      a = Σ_i p_i · hat(w_i) for one block (w: the block's b(b−1)/2 coordinates per axis)
//   exp2_skew, exp3_skew closed forms (cos/sin; Rodrigues with a stable (1 − cos θ)/θ²), computed in double
//   expm_skew            exp(a) for skew a by scaling and squaring of the degree-18 Taylor polynomial of Bader,
//                        Blanes and Casas (5 products), scaled by the skew bound min(‖A‖_F/√2, ‖A²‖₁^{1/2}),
//                        then up to `polish` Newton–Schulz steps R ← R + R·(I − RᵀR)/2 (a second one only when
//                        max|I − RᵀR| > 3e-4 before the first): in float, scaling and squaring alone drifts from SO(n) by
//                        ~2^s·√n·u (4e-6 at ‖A‖ = 10, 5e-4 at 1e3 for b = 8) and one step brings it back to
//                        ≤ 4e-7 for every block size up to ‖A‖ = 1e4 (docs/math.md has the table)
//   expm_frechet_skew    exp(a) and the Fréchet derivative L(a, e) of the same polynomial scheme (forward mode,
//                        no polish: it is the derivative of exp itself); the adjoint of the table's exp at A is
//                        L(Aᵀ, G) (lie/exp.hpp explains why)
//   exp2_adjoint         the closed-form adjoint for 2×2 (lie/exp.hpp's exp_backward)
//   skew_adjoint_add     dw(r, c) += scale · (dA(r, c) − dA(c, r)) for r < c: hat's adjoint, row-major coordinates
// The bodies take an execution policy Mul with the product Mul::mul(a, b, c, accumulate): c = a·b (or c += a·b), c
// never aliasing a or b, and the loops Mul::each(n, f) (f(i) for i in [0, n): every element loop writes through
// it), Mul::sum(n, f) and Mul::max(n, f) (in double). SerialLoops runs them on one thread: NaiveMul (the device's
// one-thread-per-matrix kernels and the small blocks) and the CPU's products (its GEMM for large blocks) build on
// it. The CUDA kernels for blocks of 16 and more run the same bodies with one thread block per matrix
// (backend/cuda/rotation_table.cu: every thread calls each body; each, sum, max and mul split the work over the
// block's threads and synchronise). So the bodies keep every write inside those loops and compute only scalars
// (the same on every thread) outside them. Working memory is given by the caller (kExpWork and kFrechetWork
// matrices): a thread's stack, a CPU thread's buffer or a slice of a device scratch buffer.
// Non-finite input gives an all-NaN result and the return value −1, never a hang.
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/lie/t18.hpp>
#include <type_traits>

namespace liere::kernels {

inline constexpr int kExpWork = 9;       // matrices of working memory for expm_skew
inline constexpr int kFrechetWork = 16;  // for expm_frechet_skew

// The loops of one thread, in index order.
struct SerialLoops {
  template <class F>
  LIERE_HOST_DEVICE static void each(int n, F&& f) {
    for (int i = 0; i < n; ++i) f(i);
  }
  template <class F>
  LIERE_HOST_DEVICE static double sum(int n, F&& f) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += f(i);
    return s;
  }
  // max(0, f(0), …), NaN if any f(i) is NaN
  template <class F>
  LIERE_HOST_DEVICE static double max(int n, F&& f) {
    double m = 0;
    for (int i = 0; i < n; ++i) m = max2(m, f(i));
    return m;
  }
  LIERE_HOST_DEVICE static double max2(double m, double v) { return m != m || v != v ? m + v : (m > v ? m : v); }
};

// The product of the device and of small blocks: i-k-j loops (the inner loop runs along rows: vectorises).
struct NaiveMul : SerialLoops {
  template <int N, class W>
  LIERE_HOST_DEVICE static void mul(const W* __restrict__ a, const W* __restrict__ b, W* __restrict__ c,
                                    bool accumulate) {
    for (int i = 0; i < N; ++i) {
      W ci[N];  // one row of c in registers
      for (int j = 0; j < N; ++j) ci[j] = accumulate ? c[i * N + j] : W(0);
      for (int k = 0; k < N; ++k) {
        const W aik = a[i * N + k];
        for (int j = 0; j < N; ++j) ci[j] += aik * b[k * N + j];
      }
      for (int j = 0; j < N; ++j) c[i * N + j] = ci[j];
    }
  }
};

// The product of the cooperative kernels (backend/cuda/rotation_table.cu: one thread block of kCoopThreads per
// matrix, blocks of 16 and up) as one thread's part of it: thread t of a 16 × 16 grid, (ti, tj) = (t / 16, t % 16),
// computes rows ti·R … ti·R + R − 1 at columns tj, tj + 16, …, tj + 16(R − 1) (R = N/16) of c = a·b (+ c); a and b
// are the operands as staged (shared memory on the device). The columns are interleaved so that the 16 threads of a
// half-warp read 16 consecutive entries of b's row k (no shared-memory bank conflicts; with R consecutive columns
// per thread, as before 2026-11-27, four threads shared each bank) and write 16 consecutive entries of c. Every
// entry sums over k in order from c (or 0), as NaiveMul does: the kCoopThreads parts together are NaiveMul's
// product bit for bit (test_rotation_table runs them one after another on the CPU).
inline constexpr int kCoopThreads = 256;
template <int N, class W>
LIERE_HOST_DEVICE void coop_mul_part(const W* __restrict__ a, const W* __restrict__ b, W* __restrict__ c,
                                     bool accumulate, int thread) {
  static_assert(N % 16 == 0 && kCoopThreads == 256, "coop_mul_part: 16 × 16 threads, N a multiple of 16");
  constexpr int R = N / 16;
  const int i0 = thread / 16 * R, j0 = thread % 16;
  W acc[R][R];
  for (int u = 0; u < R; ++u)
    for (int v = 0; v < R; ++v) acc[u][v] = accumulate ? c[(i0 + u) * N + j0 + 16 * v] : W(0);
  for (int k = 0; k < N; ++k) {
    W av[R], bv[R];
    for (int u = 0; u < R; ++u) av[u] = a[(i0 + u) * N + k];
    for (int v = 0; v < R; ++v) bv[v] = b[k * N + j0 + 16 * v];
    for (int u = 0; u < R; ++u)
      for (int v = 0; v < R; ++v) acc[u][v] += av[u] * bv[v];
  }
  for (int u = 0; u < R; ++u)
    for (int v = 0; v < R; ++v) c[(i0 + u) * N + j0 + 16 * v] = acc[u][v];
}

// The position of (r, c), r < c, in a block's row-major strict upper triangle.
template <int N>
LIERE_HOST_DEVICE constexpr int triangle_index(int r, int c) {
  return r * N - r * (r + 1) / 2 + (c - r - 1);
}

// Entry e = r·N + c of block_generator's a: Σ_ax p_ax·w_ax[q] above the diagonal, its negative below, the axes
// in order.
template <int N, class S, class W>
LIERE_HOST_DEVICE W block_generator_entry(const S* w, long axis_stride, const S* p, int dim, int e) {
  const int r = e / N, c = e % N;
  if (r == c) return W(0);
  const int q = r < c ? triangle_index<N>(r, c) : triangle_index<N>(c, r);
  W v = W(0);
  for (int ax = 0; ax < dim; ++ax) {
    const W t = W(p[ax]) * W(w[ax * axis_stride + q]);
    if (r < c)
      v += t;
    else
      v -= t;
  }
  return v;
}

// a (N×N) = Σ_i p_i · hat(w + i·axis_stride): w holds the block's strict upper triangle, row-major; an entry per
// Mul::each step (the cooperative kernels: one thread per entry). On the host, one thread a matrix (SerialLoops),
// float coordinates summed in double (the float step's tables): row by row, the row's triangle read contiguously
// and the sums vectorised over its columns — the same sums as block_generator_entry's (the upper entry adds the
// axes' terms in order, the lower one subtracts them in order; a float product is exact in double, so a fused
// multiply-add cannot change them: the same bits, signed zeros included). Entry by entry, the index arithmetic took
// about 1% of a LieRE-64 ViT-Tiny CPU step.
template <int N, class S, class W, class Mul = SerialLoops>
LIERE_HOST_DEVICE void block_generator(const S* w, long axis_stride, const S* p, int dim, W* a) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_base_of_v<SerialLoops, Mul> && std::is_same_v<S, float> && std::is_same_v<W, double>) {
    W up[N], lo[N];
    for (int r = 0; r < N; ++r) {
      const int q0 = triangle_index<N>(r, r + 1) - (r + 1);  // triangle_index(r, c) = q0 + c
      for (int c = r + 1; c < N; ++c) up[c] = lo[c] = W(0);
      for (int ax = 0; ax < dim; ++ax) {
        const W pa = W(p[ax]);
        const S* wr = w + ax * axis_stride + q0;
        for (int c = r + 1; c < N; ++c) {
          const W t = pa * W(wr[c]);
          up[c] += t;
          lo[c] -= t;
        }
      }
      a[r * N + r] = W(0);
      for (int c = r + 1; c < N; ++c) {
        a[r * N + c] = up[c];
        a[c * N + r] = lo[c];
      }
    }
    return;
  }
#endif
  Mul::each(N * N, [&](int e) { a[e] = block_generator_entry<N, S, W>(w, axis_stride, p, dim, e); });
}

// dw(r, c) += scale·(da(r, c) − da(c, r)), r < c, into the block's coordinates (hat's adjoint).
// On the host, one thread a matrix, for float gradients summed in double (the float step's tables): row by row, the
// same expression per coordinate (as in block_generator, the entry loop's index arithmetic was most of the time).
// Checked bit for bit against the entry loop: a LieRE-8 and a LieRE-64 epoch give the same losses to the last digit.
template <int N, class W, class D, class Mul = SerialLoops>
LIERE_HOST_DEVICE void skew_adjoint_add(const W* da, double scale, D* dw) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_base_of_v<SerialLoops, Mul> && std::is_same_v<W, float> && std::is_same_v<D, double>) {
    for (int r = 0; r < N; ++r) {
      D* dwr = dw + (triangle_index<N>(r, r + 1) - (r + 1));  // triangle_index(r, c) = that + c
      for (int c = r + 1; c < N; ++c) dwr[c] += D(scale * (double(da[r * N + c]) - double(da[c * N + r])));
    }
    return;
  }
#endif
  Mul::each(N * N, [&](int e) {
    const int r = e / N, c = e % N;
    if (r < c) dw[triangle_index<N>(r, c)] += D(scale * (double(da[e]) - double(da[c * N + r])));
  });
}

LIERE_HOST_DEVICE inline double sinc_stable(double x) {
  if (fabs(x) < 1e-4) return 1.0 - x * x / 6.0 * (1.0 - x * x / 20.0);
  return sin(x) / x;
}

// a in the working precision W (the tables' forward: double, also for float tables), r in the table's R.
template <class W, class R>
LIERE_HOST_DEVICE void exp2_skew(const W* a, R* r) {
  const double w = (double(a[1]) - double(a[2])) / 2, c = cos(w), s = sin(w);
  r[0] = R(c);
  r[1] = R(s);
  r[2] = R(-s);
  r[3] = R(c);
}

template <class W, class R>
LIERE_HOST_DEVICE void exp3_skew(const W* a, R* r) {
  const double x = (double(a[1]) - double(a[3])) / 2, y = (double(a[2]) - double(a[6])) / 2,
               z = (double(a[5]) - double(a[7])) / 2;
  const double m[9] = {0, x, y, -x, 0, z, -y, -z, 0};
  const double th = sqrt(x * x + y * y + z * z);
  if (!(th == th) || th > 1e300) {  // NaN or ±Inf
    for (int i = 0; i < 9; ++i) r[i] = R(NAN);
    return;
  }
  const double f1 = sinc_stable(th), h = sinc_stable(th / 2), f2 = 0.5 * h * h;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double m2 = 0;
      for (int k = 0; k < 3; ++k) m2 += m[i * 3 + k] * m[k * 3 + j];
      r[i * 3 + j] = R((i == j ? 1.0 : 0.0) + f1 * m[i * 3 + j] + f2 * m2);
    }
}

// Adjoint of the 2×2 closed form: da += L(aᵀ, g) (lie/exp.hpp's exp_backward for n = 2).
template <class W>
LIERE_HOST_DEVICE void exp2_adjoint(const W* a, const W* g, W* da) {
  const double w = (double(a[1]) - double(a[2])) / 2, c = cos(w), s = sin(w), sn = sinc_stable(w);
  const double g0 = (double(g[0]) + double(g[3])) / 2, g1 = (double(g[1]) - double(g[2])) / 2;
  const double p0 = c * g0 + s * g1, p1 = c * g1 - s * g0;
  da[0] += W(p0 + sn * (double(g[0]) - g0));
  da[3] += W(p0 + sn * (double(g[3]) - g0));
  da[1] += W(p1 + sn * (double(g[1]) - g1));
  da[2] += W(-p1 + sn * (double(g[2]) + g1));
}

namespace detail {

template <int N, class W, class Mul = SerialLoops>
LIERE_HOST_DEVICE void fill_nan(W* m) {
  Mul::each(N * N, [&](int i) { m[i] = W(NAN); });
}

// x = a/2^s, x2, x3 for the skew bound; returns s, −1 for non-finite a, −2 for a = 0.
template <int N, class W, class Mul>
LIERE_HOST_DEVICE int scale_skew(const W* a, W* x, W* x2, W* x3) {
  const double f2 = Mul::sum(N * N, [&](int i) { return double(a[i]) * double(a[i]); });
  if (!(f2 <= 1e300)) return -1;  // NaN or overflow
  if (f2 == 0.0) return -2;
  constexpr double theta = t18_theta<W>();
  const int s0 = t18_scaling(sqrt(f2 / 2), theta);
  const W sc = W(ldexp(1.0, -s0));
  Mul::each(N * N, [&](int i) { x[i] = a[i] * sc; });
  Mul::template mul<N, W>(x, x, x2, false);
  const double n1 = Mul::max(N, [&](int j) {  // ‖X²‖₁
    double col = 0;
    for (int i = 0; i < N; ++i) col += fabs(double(x2[i * N + j]));
    return col;
  });
  const int s1 = t18_scaling(sqrt(n1) * ldexp(1.0, s0), theta);
  const int s = s1 < s0 ? s1 : s0;
  if (s < s0) {
    const W up = W(ldexp(1.0, s0 - s)), up2 = W(ldexp(1.0, 2 * (s0 - s)));
    Mul::each(N * N, [&](int i) {
      x[i] *= up;
      x2[i] *= up2;
    });
  }
  Mul::template mul<N, W>(x, x2, x3, false);
  return s;
}

// out[i] = Σ_j b[i][j]·P_j for i = 0…4 (with the identity term when with_identity), in one pass over the four
// powers: each entry of x, x2, x3, x6 is read once for the five outputs (five passes read them five times: on the
// device, where every matrix of a cooperative kernel lives in global memory, that was a third of the forward's
// traffic). Every output entry is the same expression as one combination at a time; where the compiler contracts
// products and sums into FMAs (GCC's default with -march=native, nvcc's), this loop may contract them otherwise than
// the five-pass one did, so the last bit can differ (with -ffp-contract=off both give the same bits).
template <int N, class W, class Mul = SerialLoops>
LIERE_HOST_DEVICE void t18_combinations(const W* x, const W* x2, const W* x3, const W* x6, W* const* out,
                                        bool with_identity) {
  W c[5][5];
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) c[i][j] = W(t18_coef(i, j));
  Mul::each(N * N, [&](int k) {
    const W xk = x[k], x2k = x2[k], x3k = x3[k], x6k = x6[k];
    const bool diagonal = with_identity && k % (N + 1) == 0;
    for (int i = 0; i < 5; ++i) {
      W v = c[i][1] * xk + c[i][2] * x2k + c[i][3] * x3k + c[i][4] * x6k;
      if (diagonal) v += c[i][0];
      out[i][k] = v;
    }
  });
}

template <int N, class W, class Mul = SerialLoops>
LIERE_HOST_DEVICE void transpose(const W* a, W* t) {
  Mul::each(N * N, [&](int e) { t[e] = a[(e % N) * N + e / N]; });
}

template <int N, class W, class Mul>
LIERE_HOST_DEVICE void copy(const W* a, W* b) {
  Mul::each(N * N, [&](int e) { b[e] = a[e]; });
}

template <int N, class W, class Mul>
LIERE_HOST_DEVICE void identity(W* m) {
  Mul::each(N * N, [&](int e) { m[e] = W(e % (N + 1) == 0 ? 1 : 0); });
}

}  // namespace detail

// r = exp(a), a skew-symmetric; work: kExpWork·N² values. Returns the number of squarings (−1: non-finite a).
template <int N, class W, class Mul = NaiveMul>
LIERE_HOST_DEVICE int expm_skew(const W* a, W* r, W* work, int polish) {
  constexpr int NN = N * N;
  W *x = work, *x2 = x + NN, *x3 = x2 + NN, *x6 = x3 + NN, *t = x6 + NN, *b = t + NN;  // b: 4 matrices
  const int s = detail::scale_skew<N, W, Mul>(a, x, x2, x3);
  if (s == -1) {
    detail::fill_nan<N, W, Mul>(r);
    return -1;
  }
  if (s == -2) {
    detail::identity<N, W, Mul>(r);
    return 0;
  }
  Mul::template mul<N, W>(x3, x3, x6, false);
  W *b0 = b, *b2 = b + NN, *a9 = b + 2 * NN, *b4 = b + 3 * NN;
  W* cur = r;  // B1 straight into r
  W* spare = t;
  W* const combos[5] = {b0, cur, b2, a9, b4};
  detail::t18_combinations<N, W, Mul>(x, x2, x3, x6, combos, true);
  Mul::template mul<N, W>(b0, b4, a9, true);  // A9 = B0·B4 + B3
  Mul::each(NN, [&](int i) { b2[i] += a9[i]; });  // C = B2 + A9
  Mul::template mul<N, W>(b2, a9, cur, true);  // T18 = B1 + C·A9
  for (int k = 0; k < s; ++k) {
    Mul::template mul<N, W>(cur, cur, spare, false);
    W* tmp = cur;
    cur = spare;
    spare = tmp;
  }
  // Newton–Schulz: R ← R + R·E/2, E = I − RᵀR. One step takes max|E| to about ¾·max|E|²; a second one runs
  // only when the first started above kPolishAgain.
  constexpr double kPolishAgain = 3e-4;
  for (int step = 0; step < polish; ++step) {
    detail::transpose<N, W, Mul>(cur, x);
    Mul::template mul<N, W>(x, cur, x2, false);
    const double emax = Mul::max(NN, [&](int i) {
      x2[i] = (i % (N + 1) == 0 ? W(1) : W(0)) - x2[i];
      return fabs(double(x2[i]));
    });
    if (!(emax > kPolishAgain)) polish = step + 1;  // this step is the last
    Mul::each(NN, [&](int i) {
      spare[i] = cur[i];
      x2[i] *= W(0.5);
    });
    Mul::template mul<N, W>(cur, x2, spare, true);
    W* tmp = cur;
    cur = spare;
    spare = tmp;
  }
  if (cur != r) detail::copy<N, W, Mul>(cur, r);
  return s;
}

// r = exp(a) and l = L(a, e), the Fréchet derivative of the same scheme; a skew-symmetric (the adjoint needs it at
// aᵀ = −a, skew too); work: kFrechetWork·N² values. Returns the squarings, or −1 for non-finite input.
template <int N, class W, class Mul = NaiveMul>
LIERE_HOST_DEVICE int expm_frechet_skew(const W* a, const W* e, W* r, W* l, W* work) {
  constexpr int NN = N * N;
  W *x = work, *x2 = x + NN, *x3 = x2 + NN, *x6 = x3 + NN, *b = x6 + NN;  // b, db: 4 matrices each
  W *dx = b + 4 * NN, *dx2 = dx + NN, *dx3 = dx2 + NN, *dx6 = dx3 + NN, *db = dx6 + NN;
  const bool e_finite = Mul::max(NN, [&](int i) { return e[i] - e[i] == W(0) ? 0.0 : 1.0; }) == 0.0;
  const int s = detail::scale_skew<N, W, Mul>(a, x, x2, x3);
  if (s == -1 || !e_finite) {
    detail::fill_nan<N, W, Mul>(r);
    detail::fill_nan<N, W, Mul>(l);
    return -1;
  }
  if (s == -2) {
    detail::identity<N, W, Mul>(r);
    detail::copy<N, W, Mul>(e, l);
    return 0;
  }
  const W sc = W(ldexp(1.0, -s));
  Mul::each(NN, [&](int i) { dx[i] = e[i] * sc; });
  Mul::template mul<N, W>(dx, x, dx2, false);
  Mul::template mul<N, W>(x, dx, dx2, true);
  Mul::template mul<N, W>(dx, x2, dx3, false);
  Mul::template mul<N, W>(x, dx2, dx3, true);
  Mul::template mul<N, W>(x3, x3, x6, false);
  Mul::template mul<N, W>(dx3, x3, dx6, false);
  Mul::template mul<N, W>(x3, dx3, dx6, true);
  // B1 and its derivative straight into (r, l), where the squaring chain starts.
  W *b0 = b, *b2 = b + NN, *a9 = b + 2 * NN, *b4 = b + 3 * NN;
  W *db0 = db, *db2 = db + NN, *da9 = db + 2 * NN, *db4 = db + 3 * NN;
  W* const combos[5] = {b0, r, b2, a9, b4};
  W* const dcombos[5] = {db0, l, db2, da9, db4};
  detail::t18_combinations<N, W, Mul>(x, x2, x3, x6, combos, true);
  detail::t18_combinations<N, W, Mul>(dx, dx2, dx3, dx6, dcombos, false);
  Mul::template mul<N, W>(b0, b4, a9, true);
  Mul::template mul<N, W>(db0, b4, da9, true);
  Mul::template mul<N, W>(b0, db4, da9, true);
  Mul::each(NN, [&](int i) {
    b2[i] += a9[i];
    db2[i] += da9[i];
  });
  // The squaring chain ping-pongs between (r, l) and two spare matrices (x6, dx6 are free now).
  W *cr = r, *cl = l, *sr = x6, *sl = dx6;
  Mul::template mul<N, W>(b2, a9, cr, true);
  Mul::template mul<N, W>(db2, a9, cl, true);
  Mul::template mul<N, W>(b2, da9, cl, true);
  for (int k = 0; k < s; ++k) {  // (R, L) ← (R², R·L + L·R)
    Mul::template mul<N, W>(cr, cl, sl, false);
    Mul::template mul<N, W>(cl, cr, sl, true);
    Mul::template mul<N, W>(cr, cr, sr, false);
    W* t1 = cr;
    cr = sr;
    sr = t1;
    W* t2 = cl;
    cl = sl;
    sl = t2;
  }
  if (cr != r) detail::copy<N, W, Mul>(cr, r);
  if (cl != l) detail::copy<N, W, Mul>(cl, l);
  return s;
}

}  // namespace liere::kernels
