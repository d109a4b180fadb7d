// tests/test_rotation_table.cpp — the rotation-table op (backend/cpu/rotation_table.hpp) and the per-block bodies it
// shares with the CUDA kernels (backend/kernels/matrix_exp.hpp), on the CPU, on every machine:
//   * the bodies against lie/exp.hpp (the reference) and the closed forms, in double; the device's product
//     (NaiveMul) against the CPU's (Eigen / GEMM) in float, and the bodies under the loop policy of the device's
//     cooperative kernels (emulated: loops reversed, sums as strided partials and a tree) against NaiveMul's:
//     the tables the GPU computes are checked here;
//   * float orthogonality max|RᵀR − I| ≤ 1e-6 for every block size up to generator norm 1e4;
//   * the Fréchet derivative against central finite differences of lie/exp.hpp in double and against
//     exp_backward (two independent ways), and the op's backward by the dot-product test on its own forward;
//   * the op against pe/liere.hpp's reference tables and gradients; NaN in, NaN out, and the finder.
#include <catch2/catch.hpp>

#include <liere/backend/cpu/rotation_table.hpp>
#include <liere/backend/kernels/matrix_exp.hpp>
#include <liere/lie/exp.hpp>
#include <liere/lie/skew_schur.hpp>
#include <liere/pe/liere.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Dense>
LIERE_THIRD_PARTY_END

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"

using namespace liere;
using liere::test::raise_error;

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A random skew-symmetric n×n matrix with 2-norm `norm`.
MatD random_skew(int n, double norm, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d;
  MatD a = MatD::Zero(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      a(i, j) = d(g);
      a(j, i) = -a(i, j);
    }
  return a * (norm / liere::test::spectral_norm(a));
}

template <int N, class W>
std::vector<W> body_exp(const MatD& a, int polish) {
  std::vector<W> in(N * N), r(N * N), work(kernels::kExpWork * N * N);
  for (int i = 0; i < N * N; ++i) in[i] = W(a.data()[i]);
  if constexpr (N == 2) kernels::exp2_skew(in.data(), r.data());
  else if constexpr (N == 3) kernels::exp3_skew(in.data(), r.data());
  else kernels::expm_skew<N, W>(in.data(), r.data(), work.data(), polish);
  return r;
}

template <class W>
double orthogonality(const std::vector<W>& r, int n) {
  MatD m(n, n);
  for (int i = 0; i < n * n; ++i) m.data()[i] = double(r[i]);
  return (m.transpose() * m - MatD::Identity(n, n)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
}

template <int N>
void check_exp_body() {
  for (double norm : {0.3, 10.0, 1e3}) {
    INFO("block " << N << ", norm " << norm);
    const MatD a = random_skew(N, norm, 17 * N + std::uint64_t(norm));
    const MatD ref = liere::exp(Eigen::MatrixXd(a));
    const std::vector<double> r = body_exp<N, double>(a, 0);
    const double err = (Eigen::Map<const MatD>(r.data(), N, N) - ref).cwiseAbs().maxCoeff<Eigen::PropagateNaN>();
    CHECK(err <= 1e-13 * std::max(1.0, norm));
    if constexpr (N == 2 || N == 3) {  // the closed forms against the scaling-and-squaring body
      std::vector<double> in(a.data(), a.data() + N * N), ss(N * N), work(kernels::kExpWork * N * N);
      kernels::expm_skew<N, double>(in.data(), ss.data(), work.data(), 0);
      CHECK((Eigen::Map<const MatD>(ss.data(), N, N) - Eigen::Map<const MatD>(r.data(), N, N))
                .cwiseAbs()
                .maxCoeff<Eigen::PropagateNaN>() <= 1e-12 * std::max(1.0, norm));
    }
  }
}

template <int N>
void check_float_orthogonality() {
  for (double norm : {1.0, 10.0, 100.0, 1e3, 1e4})
    for (std::uint64_t seed = 0; seed < 3; ++seed) {
      INFO("block " << N << ", norm " << norm << ", seed " << seed);
      const std::vector<float> r = body_exp<N, float>(random_skew(N, norm, 1000 * N + seed), 2);
      CHECK(orthogonality(r, N) <= 1e-6);
    }
}

// The device's product against the CPU's in the op: the same body, the same float tables (the Fréchet backward in
// float, the forward in double).
template <int N>
void check_device_product() {
  const MatD a = random_skew(N, 40.0, 7 * N);
  std::vector<float> in(N * N), r1(N * N), r2(N * N), work(kernels::kExpWork * N * N);
  for (int i = 0; i < N * N; ++i) in[i] = float(a.data()[i]);
  kernels::expm_skew<N, float, kernels::NaiveMul>(in.data(), r1.data(), work.data(), 2);
  kernels::expm_skew<N, float, cpu::detail::TableMul<N>>(in.data(), r2.data(), work.data(), 2);
  const MatD ref = liere::exp(Eigen::MatrixXd(a));
  double d12 = 0, d1 = 0;
  for (int i = 0; i < N * N; ++i) {
    d12 = std::max(d12, double(std::abs(r1[i] - r2[i])));
    d1 = std::max(d1, std::abs(double(r1[i]) - ref.data()[i]));
  }
  INFO("block " << N);
  CHECK(d12 <= 2e-5);
  CHECK(d1 <= 2e-5);
  // The forward as the device computes it since 2026-11-26 (cuda/rotation_table.cu, Work<N>: in double, no
  // finish, rounded to float) against the CPU op's polynomial forward (TableForwardWork, its products): the same
  // float tables to a rounding, and within float's resolution of exp.
  std::vector<double> ind(in.begin(), in.end()), e1(N * N), e2(N * N), wd(kernels::kExpWork * N * N);
  kernels::expm_skew<N, double, kernels::NaiveMul>(ind.data(), e1.data(), wd.data(), 0);
  kernels::expm_skew<N, double, cpu::detail::TableMul<N>>(ind.data(), e2.data(), wd.data(), 0);
  const MatD refd = liere::exp(Eigen::MatrixXd(Eigen::Map<const MatD>(ind.data(), N, N)));
  double f12 = 0, f1 = 0;
  for (int i = 0; i < N * N; ++i) {
    f12 = std::max(f12, double(std::abs(float(e1[i]) - float(e2[i]))));
    f1 = std::max(f1, std::abs(double(float(e1[i])) - refd.data()[i]));
  }
  CHECK(f12 <= 1.2e-7);  // one float ulp at 1
  CHECK(f1 <= 1.2e-7);
}

// L(A, E) of the body against central differences of lie/exp.hpp and against exp_frechet (exp_backward at Aᵀ).
template <int N>
void check_frechet_body() {
  for (double norm : {0.5, 20.0}) {
    INFO("block " << N << ", norm " << norm);
    const MatD a = random_skew(N, norm, 31 * N + std::uint64_t(norm));
    std::mt19937_64 g(5);
    std::normal_distribution<double> d;
    MatD e(N, N);
    for (int i = 0; i < N * N; ++i) e.data()[i] = d(g);
    std::vector<double> l(N * N), r(N * N), work(kernels::kFrechetWork * N * N);
    kernels::expm_frechet_skew<N, double>(a.data(), e.data(), r.data(), l.data(), work.data());
    const Eigen::Map<const MatD> lm(l.data(), N, N);
    const double h = 1e-6;
    // A ± hE is not skew: lie/exp.hpp's general scaling and squaring (the closed forms would read its skew part).
    Eigen::MatrixXd rp(N, N), rm(N, N);
    liere::detail::expm_ss(Eigen::MatrixXd(a + h * e), rp);
    liere::detail::expm_ss(Eigen::MatrixXd(a - h * e), rm);
    const MatD fd = (rp - rm) / (2 * h);  // good to ~1e-8·|L|
    CHECK((lm - fd).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
        <= 1e-6 * std::max(1.0, fd.cwiseAbs().maxCoeff<Eigen::PropagateNaN>()));
    const Eigen::MatrixXd lf = liere::exp_frechet(Eigen::MatrixXd(a), Eigen::MatrixXd(e));
    CHECK((lm - lf).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
        <= 1e-11 * std::max(1.0, lf.cwiseAbs().maxCoeff<Eigen::PropagateNaN>()));
  }
}

// The op's tables and gradients against pe/liere.hpp's (each block's exponential in double there).
template <class S>
void check_op_against_reference(int block, S fwd_tol, S bwd_rel_tol) {
  const int D = block == 3 ? 12 : 64, sets = 3, dim = 2, rows = 7;
  INFO("block " << block);
  LieREGeometry geo{sets, dim, D, block};
  std::vector<S> w(geo.num_params()), pos(std::size_t(rows) * dim), dt(std::size_t(sets) * rows * D * block);
  std::mt19937_64 g(block);
  std::uniform_real_distribution<double> u(0, 2 * M_PI), v(-1, 1);
  for (auto& x : w) x = S(u(g));
  for (auto& x : pos) x = S(v(g));
  for (auto& x : dt) x = S(v(g));
  RotationTable<S> ref;
  liere_table_forward<S>(geo, w, pos, rows, ref);
  const RotationTableShape sh{sets, dim, rows, D, block};
  std::vector<S> tab(dt.size());
  cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), sh);
  double ef = 0;
  for (std::size_t i = 0; i < tab.size(); ++i) raise_error(ef, std::abs(double(tab[i]) - double(ref.data()[i])));
  CHECK(ef <= fwd_tol);
  std::vector<S> dw_ref(w.size(), S(0)), dw(w.size(), S(1));  // the op accumulates: start from 1
  liere_table_backward<S>(geo, w, pos, rows, RotationTableView<const S>{dt.data(), sets * rows, D, block}, dw_ref);
  cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), dw.data(), sh);
  double eb = 0, nb = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    raise_error(eb, std::abs(double(dw[i]) - 1.0 - double(dw_ref[i])));
    nb = std::max(nb, std::abs(double(dw_ref[i])));
  }
  CHECK(eb <= bwd_rel_tol * nb);
}

}  // namespace

TEST_CASE("rotation tables: the per-block bodies match lie/exp.hpp and the closed forms (double)", "[tables]") {
  check_exp_body<2>();
  check_exp_body<3>();
  check_exp_body<4>();
  check_exp_body<8>();
  check_exp_body<16>();
  check_exp_body<32>();
  check_exp_body<64>();
}

TEST_CASE("rotation tables: float tables stay orthogonal to 1e-6 up to generator norm 1e4", "[tables]") {
  check_float_orthogonality<2>();
  check_float_orthogonality<3>();
  check_float_orthogonality<4>();
  check_float_orthogonality<8>();
  check_float_orthogonality<16>();
  check_float_orthogonality<32>();
  check_float_orthogonality<64>();
}

TEST_CASE("rotation tables: without the Newton-Schulz finish, float scaling and squaring drifts (why it is there)",
          "[tables]") {
  const std::vector<float> r = body_exp<8, float>(random_skew(8, 1e3, 3), 0);
  CHECK(orthogonality(r, 8) > 1e-5);
}

TEST_CASE("rotation tables: the device's product (NaiveMul) gives the CPU op's float tables", "[tables]") {
  check_device_product<4>();
  check_device_product<8>();
  check_device_product<16>();
  check_device_product<32>();
  check_device_product<64>();
}

// The loop policy of the CUDA kernels for blocks of 16 and up (one thread block per matrix: BlockLoops in
// backend/cuda/rotation_table.cu), emulated on one thread: every element loop in reverse order (a loop that read an
// element the same loop wrote would see other values, as racing threads would), sums and maxima as 256 strided
// partials combined by the same tree, the product in NaiveMul's order (BlockLoops::mul sums each entry the same
// way). The bodies under it must give NaiveMul's tables and derivatives.
struct EmulatedBlockLoops {
  static constexpr int kThreads = 256;
  template <class F>
  static void each(int n, F&& f) {
    for (int i = n - 1; i >= 0; --i) f(i);
  }
  template <class F, class Op>
  static double strided(int n, F&& f, Op op) {
    double part[kThreads];
    for (int t = kThreads - 1; t >= 0; --t) {
      part[t] = 0;
      for (int i = t; i < n; i += kThreads) part[t] = op(part[t], f(i));
    }
    for (int h = kThreads / 2; h > 0; h /= 2)
      for (int t = 0; t < h; ++t) part[t] = op(part[t], part[t + h]);
    return part[0];
  }
  template <class F>
  static double sum(int n, F&& f) {
    return strided(n, f, [](double x, double y) { return x + y; });
  }
  template <class F>
  static double max(int n, F&& f) {
    return strided(n, f, [](double x, double y) { return kernels::SerialLoops::max2(x, y); });
  }
  template <int N, class W>
  static void mul(const W* a, const W* b, W* c, bool accumulate) {
    kernels::NaiveMul::mul<N, W>(a, b, c, accumulate);
  }
};

template <int N>
void check_block_policy() {
  INFO("block " << N);
  const MatD a = random_skew(N, 40.0, 9 * N);
  std::vector<float> in(N * N), e(N * N), r1(N * N), r2(N * N), l1(N * N), l2(N * N);
  std::vector<float> work(kernels::kFrechetWork * N * N);
  std::mt19937_64 g(N);
  std::normal_distribution<float> d;
  for (int i = 0; i < N * N; ++i) in[i] = float(a.data()[i]), e[i] = d(g);
  kernels::expm_skew<N, float, kernels::NaiveMul>(in.data(), r1.data(), work.data(), 2);
  kernels::expm_skew<N, float, EmulatedBlockLoops>(in.data(), r2.data(), work.data(), 2);
  CHECK(r1 == r2);
  {  // the forward as the device runs it (in double, no finish)
    std::vector<double> ind(in.begin(), in.end()), d1(N * N), d2(N * N), wd(kernels::kExpWork * N * N);
    kernels::expm_skew<N, double, kernels::NaiveMul>(ind.data(), d1.data(), wd.data(), 0);
    kernels::expm_skew<N, double, EmulatedBlockLoops>(ind.data(), d2.data(), wd.data(), 0);
    CHECK(d1 == d2);
  }
  kernels::expm_frechet_skew<N, float, kernels::NaiveMul>(in.data(), e.data(), r1.data(), l1.data(), work.data());
  kernels::expm_frechet_skew<N, float, EmulatedBlockLoops>(in.data(), e.data(), r2.data(), l2.data(), work.data());
  CHECK(r1 == r2);
  CHECK(l1 == l2);
  // The generator (entry by entry: block_generator_entry, which the cooperative kernels run one thread per entry)
  // against hat written out here: Σ_ax p_ax·w_ax at (r, c) above the diagonal, walking the triangle row by row, and
  // its negative at (c, r), in double; and the diagonal exactly 0.
  const int dim = 3;
  const long stride = N * (N - 1) / 2;
  std::vector<float> w(std::size_t(dim * stride)), p = {0.7f, -1.3f, 2.9f}, gen(N * N);
  for (auto& x : w) x = d(g);
  kernels::block_generator<N>(w.data(), stride, p.data(), dim, gen.data());
  // hat written out for position pos (the coordinates w as they are): the sums, and their scale Σ_ax |p_ax·w_ax|
  auto hat_written_out = [&](const std::vector<float>& pos, std::vector<double>& sum, std::vector<double>& abs_sum) {
    sum.assign(N * N, 0.0), abs_sum.assign(N * N, 1e-30);
    for (int ax = 0, q; ax < dim; ++ax) {
      q = 0;
      for (int r = 0; r < N; ++r)
        for (int c = r + 1; c < N; ++c, ++q) {
          const double t = double(pos[std::size_t(ax)]) * double(w[std::size_t(ax * stride + q)]);
          sum[std::size_t(r * N + c)] += t, sum[std::size_t(c * N + r)] -= t;
          abs_sum[std::size_t(r * N + c)] += std::abs(t), abs_sum[std::size_t(c * N + r)] += std::abs(t);
        }
    }
  };
  std::vector<double> want, scale;
  hat_written_out(p, want, scale);
  double worst = 0;  // |gen − want| over Σ_ax |p_ax·w_ax|, the sum's scale
  for (int k = 0; k < N * N; ++k) {
    if (k % (N + 1) == 0) CHECK(gen[std::size_t(k)] == 0.f);
    raise_error(worst, std::abs(double(gen[std::size_t(k)]) - want[std::size_t(k)]) / scale[std::size_t(k)]);
  }
  CHECK(worst <= 4 * std::numeric_limits<float>::epsilon());
  // Float coordinates summed in double (the float step's tables): the host's row-by-row loop against the entry loop
  // (the cooperative policy), and against hat written out above, bit for bit — every float product is exact in
  // double, so the sums are the same in any contraction. A signed zero among the coordinates and a zero position.
  w[5] = -0.0f;
  std::vector<float> p0 = {0.7f, 0.0f, -2.9f};
  for (const std::vector<float>* pp : {&p, &p0}) {
    std::vector<double> rows(N * N), entries(N * N), exact, unused;
    kernels::block_generator<N>(w.data(), stride, pp->data(), dim, rows.data());
    kernels::block_generator<N, float, double, EmulatedBlockLoops>(w.data(), stride, pp->data(), dim, entries.data());
    hat_written_out(*pp, exact, unused);
    CHECK(std::memcmp(rows.data(), entries.data(), rows.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(rows.data(), exact.data(), rows.size() * sizeof(double)) == 0);
  }
  // hat's adjoint, float gradient into double sums: the host's row loop against the entry loop (the same expression
  // per coordinate; a tolerance of two roundings, since a compiler may fuse the last multiply-add in one and not the
  // other) — an index slip moves a coordinate by O(1).
  std::vector<float> da(N * N);
  for (auto& x : da) x = d(g);
  std::vector<double> dw_rows(static_cast<std::size_t>(stride)), dw_entries(dw_rows.size());
  for (std::size_t i = 0; i < dw_rows.size(); ++i) dw_rows[i] = dw_entries[i] = double(d(g));
  const std::vector<double> dw0 = dw_rows;
  kernels::skew_adjoint_add<N>(da.data(), 0.37, dw_rows.data());
  kernels::skew_adjoint_add<N, float, double, EmulatedBlockLoops>(da.data(), 0.37, dw_entries.data());
  double adj = 0;
  for (std::size_t i = 0; i < dw_rows.size(); ++i)
    raise_error(adj, std::abs(dw_rows[i] - dw_entries[i]) / (std::abs(dw0[i]) + 1.0));
  CHECK(adj <= 4 * std::numeric_limits<double>::epsilon());
}

TEST_CASE("rotation tables: the bodies under the cooperative kernels' loop policy give the same tables", "[tables]") {
  check_block_policy<4>();
  check_block_policy<16>();
  check_block_policy<32>();
  check_block_policy<64>();
}

// The cooperative kernels' product (kernels::coop_mul_part, what each of the 256 threads of a block computes) run
// thread after thread: every entry of c written once, each NaiveMul's sum bit for bit, with and without accumulating.
template <int N, class W>
void check_coop_product() {
  INFO("block " << N << (sizeof(W) == 8 ? " double" : " float"));
  std::mt19937_64 g(N + sizeof(W));
  std::normal_distribution<double> d;
  std::vector<W> a(N * N), b(N * N), c0(N * N);
  for (int i = 0; i < N * N; ++i) a[i] = W(d(g)), b[i] = W(d(g)), c0[i] = W(d(g));
  for (const bool accumulate : {false, true}) {
    INFO("accumulate " << accumulate);
    std::vector<W> want = c0, got = c0;
    kernels::NaiveMul::mul<N, W>(a.data(), b.data(), want.data(), accumulate);
    if (!accumulate) std::fill(got.begin(), got.end(), std::numeric_limits<W>::quiet_NaN());  // unwritten: NaN
    for (int t = 0; t < kernels::kCoopThreads; ++t)
      kernels::coop_mul_part<N, W>(a.data(), b.data(), got.data(), accumulate, t);
    CHECK(got == want);  // an entry written twice (accumulating) or never (NaN) differs
  }
}

TEST_CASE("rotation tables: the cooperative kernels' product, thread by thread, is NaiveMul's", "[tables]") {
  check_coop_product<16, float>();
  check_coop_product<32, float>();
  check_coop_product<64, float>();
  check_coop_product<16, double>();
  check_coop_product<64, double>();
}

TEST_CASE("rotation tables: the Frechet body against finite differences and exp_frechet (double)", "[tables]") {
  check_frechet_body<3>();
  check_frechet_body<4>();
  check_frechet_body<8>();
  check_frechet_body<16>();
  check_frechet_body<64>();
  // 2×2: the closed-form adjoint against exp_backward and against finite differences of its forward.
  const MatD a = random_skew(2, 1.3, 2);
  const double g[4] = {0.3, -1.1, 0.7, 0.2};
  double da[4] = {0, 0, 0, 0};
  kernels::exp2_adjoint(a.data(), g, da);
  Eigen::Matrix2d ref = Eigen::Matrix2d::Zero();
  liere::exp_backward(Eigen::Matrix2d(a), Eigen::Map<const Eigen::Matrix<double, 2, 2, Eigen::RowMajor>>(g), ref);
  for (int i = 0; i < 4; ++i) CHECK(std::abs(da[i] - ref(i / 2, i % 2)) <= 1e-14);
  const double h = 1e-6;  // d/dε ⟨g, exp(A + ε·e_01 antisym)⟩ = da(0,1) − da(1,0)
  MatD ap = a, am = a;
  ap(0, 1) += h, ap(1, 0) -= h, am(0, 1) -= h, am(1, 0) += h;
  double rp[4], rm[4];
  kernels::exp2_skew(ap.data(), rp);
  kernels::exp2_skew(am.data(), rm);
  double fd = 0;
  for (int i = 0; i < 4; ++i) fd += g[i] * (rp[i] - rm[i]) / (2 * h);
  CHECK(std::abs(fd - (da[1] - da[2])) <= 1e-8);
}

TEST_CASE("rotation tables: the op matches pe/liere.hpp's reference tables and gradients", "[tables]") {
  for (int block : {2, 3, 4, 8, 16, 32, 64}) {
    check_op_against_reference<double>(block, 1e-12, 1e-10);
    check_op_against_reference<float>(block, 2e-5, 1e-4);
  }
}

namespace {
// The dot-product test of the op's backward dw (for the table gradient dt at generators w) in direction v:
// ⟨dt, (T(w + h·v) − T(w − h·v)) / 2h⟩ = ⟨dw, v⟩, central differences, h = 1e-6. Runs two forwards.
void check_directional_derivative(const RotationTableShape& sh, const std::vector<double>& w,
                                  const std::vector<double>& v, const std::vector<double>& pos,
                                  const std::vector<double>& dt, const std::vector<double>& dw) {
  const double h = 1e-6;
  std::vector<double> wp(w), wm(w), tp(dt.size()), tm(dt.size());
  for (std::size_t i = 0; i < w.size(); ++i) wp[i] += h * v[i], wm[i] -= h * v[i];
  cpu::rotation_table_forward(wp.data(), pos.data(), tp.data(), sh);
  cpu::rotation_table_forward(wm.data(), pos.data(), tm.data(), sh);
  double fd = 0, an = 0;
  for (std::size_t i = 0; i < dt.size(); ++i) fd += dt[i] * (tp[i] - tm[i]) / (2 * h);
  for (std::size_t i = 0; i < w.size(); ++i) an += dw[i] * v[i];
  CHECK(std::abs(fd - an) <= 1e-6 * std::max(1.0, std::abs(an)));
}
}  // namespace

TEST_CASE("rotation tables: the op's backward is the adjoint of its forward (dot-product test, double)", "[tables]") {
  for (int block : {2, 3, 8, 64}) {
    INFO("block " << block);
    const int D = block == 3 ? 6 : 64, sets = 2, dim = 3, rows = 4;
    const RotationTableShape sh{sets, dim, rows, D, block};
    std::mt19937_64 g(block + 100);
    std::uniform_real_distribution<double> u(-2, 2);
    std::vector<double> w(std::size_t(sh.num_generators())), v(w.size()), pos(std::size_t(rows) * dim),
        dt(std::size_t(sh.table_size()));
    for (auto* x : {&w, &v, &pos, &dt})
      for (auto& y : *x) y = u(g);
    std::vector<double> dw(w.size(), 0.0);
    cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), dw.data(), sh);
    check_directional_derivative(sh, w, v, pos, dt, dw);
    // and at w = 0 (every block's generator zero, as at a zero initialisation): the gradient is not zero
    const std::vector<double> w0(w.size(), 0.0);
    std::vector<double> dw0(w.size(), 0.0);
    cpu::rotation_table_backward(w0.data(), pos.data(), dt.data(), dw0.data(), sh);
    check_directional_derivative(sh, w0, v, pos, dt, dw0);
  }
}

TEST_CASE("rotation tables: a non-finite generator gives NaN tables and is found", "[tables]") {
  const RotationTableShape sh{2, 2, 3, 16, 8};
  std::vector<float> w(std::size_t(sh.num_generators()), 0.25f), pos(6, 0.5f), tab(std::size_t(sh.table_size()));
  CHECK(cpu::rotation_table_nonfinite(w.data(), sh) == -1);
  w[40] = std::numeric_limits<float>::quiet_NaN();
  CHECK(cpu::rotation_table_nonfinite(w.data(), sh) == 40);
  {  // ±Inf are found too, the first non-finite coordinate wins
    std::vector<float> wi = w;
    wi[17] = std::numeric_limits<float>::infinity();
    CHECK(cpu::rotation_table_nonfinite(wi.data(), sh) == 17);
    wi[17] = 0.25f, wi[40] = -std::numeric_limits<float>::infinity();
    CHECK(cpu::rotation_table_nonfinite(wi.data(), sh) == 40);
  }
  cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), sh);
  // coordinate 40 of (sets 2, axes 2, blocks 2, 28): set 0, axis 0, block 1: block 1 of set 0's rows is NaN
  for (int row = 0; row < 3; ++row) {
    CHECK(std::isnan(tab[std::size_t(row * 2 + 1) * 64]));
    CHECK(std::isfinite(tab[std::size_t(row * 2) * 64]));  // block 0 is untouched
  }
  CHECK(std::isfinite(tab[std::size_t(3 * 2 + 1) * 64]));  // and so is set 1
  REQUIRE_THROWS_WITH(cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), RotationTableShape{1, 2, 3, 16, 5}),
                      Catch::Contains("bad shape"));
  // no rows (a shape the check allows): nothing to compute, the gradient untouched, on both paths
  for (int block : {8, 64}) {
    const RotationTableShape empty{2, 2, 0, 64, block};
    std::vector<float> we(std::size_t(empty.num_generators()), 0.25f), dwe(we.size(), 1.0f);
    CHECK_NOTHROW(cpu::rotation_table_forward(we.data(), pos.data(), tab.data(), empty));
    CHECK_NOTHROW(cpu::rotation_table_backward(we.data(), pos.data(), tab.data(), dwe.data(), empty));
    CHECK(std::all_of(dwe.begin(), dwe.end(), [](float v) { return v == 1.0f; }));
  }
  REQUIRE_THROWS_WITH(cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), RotationTableShape{1, 2, 3, 20, 5}),
                      Catch::Contains("rotation tables: block size 5 is not supported"));
}

// ---- The spectral path (lie/skew_schur.hpp; the op's blocks of 32 and 64) --------------------------------------

namespace {

// A = Q₀ Θ Q₀ᵀ with Q₀ a random orthogonal matrix and Θ the given angles (the spectra the decomposition must
// survive: zero, repeated, clustered, huge).
MatD skew_with_angles(const std::vector<double>& angles, std::uint64_t seed) {
  const int n = 2 * int(angles.size());
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d;
  MatD x(n, n);
  for (int i = 0; i < n * n; ++i) x.data()[i] = d(g);
  const MatD q0 = liere::test::orthogonal_factor(x);
  MatD th = MatD::Zero(n, n);
  for (int j = 0; j < n / 2; ++j) {
    th(2 * j, 2 * j + 1) = angles[std::size_t(j)];
    th(2 * j + 1, 2 * j) = -angles[std::size_t(j)];
  }
  MatD a = q0 * th * q0.transpose();
  a = (a - a.transpose()) / 2;  // exactly skew
  return a;
}

struct Spectrum {
  const char* name;
  std::vector<double> angles;  // empty: a Gaussian matrix of 2-norm `norm`
  double norm;
  bool tridiagonal = false;    // with no angles: nonzero only next to the diagonal (a reduction with nothing to reduce)
};

std::vector<Spectrum> test_spectra(int n) {
  const int m = n / 2;
  std::vector<Spectrum> s;
  s.push_back({"gaussian, norm 0.7", {}, 0.7});
  s.push_back({"gaussian, norm 30", {}, 30.0});
  s.push_back({"gaussian, norm 1e4", {}, 1e4});
  s.push_back({"zero", std::vector<double>(std::size_t(m), 0.0), 0});
  s.push_back({"all angles equal (2.5)", std::vector<double>(std::size_t(m), 2.5), 0});
  std::vector<double> pairs, zeros, cluster, close, huge;
  for (int j = 0; j < m; ++j) {
    pairs.push_back(1.0 + double(j / 2));                 // repeated in pairs
    zeros.push_back(j % 3 == 0 ? 0.0 : 0.5 * (j + 1));    // a null space of dimension ≥ 2
    cluster.push_back(1.0 + 1e-11 * j);                   // within 1e-9 of each other
    close.push_back(1.0 + 1e-5 * j);                      // 1e-5 apart: differences past sinc's series (1e-3)
    huge.push_back(j % 2 ? 1e4 : -1e4 + 1e-6 * j);        // ±1e4, nearly repeated
  }
  s.push_back({"pairs of equal angles", pairs, 0});
  s.push_back({"a third of the angles zero", zeros, 0});
  s.push_back({"clustered angles (1e-11 apart)", cluster, 0});
  s.push_back({"close angles (1e-5 apart)", close, 0});
  s.push_back({"already skew tridiagonal", {}, 2.0, true});
  s.push_back({"angles ±1e4", huge, 0});
  return s;
}

MatD spectrum_matrix(const Spectrum& sp, int n, std::uint64_t seed) {
  if (sp.tridiagonal) {  // A(i, i+1) = −A(i+1, i): every Householder step finds its column already reduced
    std::mt19937_64 g(seed);
    std::normal_distribution<double> d;
    MatD a = MatD::Zero(n, n);
    for (int i = 0; i + 1 < n; ++i) a(i, i + 1) = sp.norm * d(g), a(i + 1, i) = -a(i, i + 1);
    return a;
  }
  if (sp.angles.empty()) return random_skew(n, sp.norm, seed);
  return skew_with_angles(sp.angles, seed);
}

void check_schur(int n) {
  for (const Spectrum& sp : test_spectra(n)) {
    INFO("n " << n << ", " << sp.name);
    const MatD a = spectrum_matrix(sp, n, 100 + n);
    const double an = std::max(1.0, a.cwiseAbs().maxCoeff<Eigen::PropagateNaN>());
    MatD q(n, n);
    std::vector<double> sigma(std::size_t(n / 2)), work(skew_schur_work(n) + std::size_t(n) * n + 2 * n);
    REQUIRE(skew_schur(a.data(), n, q.data(), sigma.data(), work.data()));
    CHECK((q.transpose() * q - MatD::Identity(n, n)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-13);
    MatD th = MatD::Zero(n, n);
    for (int j = 0; j < n / 2; ++j) {
      th(j, n / 2 + j) = sigma[std::size_t(j)];
      th(n / 2 + j, j) = -sigma[std::size_t(j)];
    }
    CHECK((q * th * q.transpose() - a).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-13 * an);
    // exp through the Schur form against lie/exp.hpp (scaling and squaring) in double
    MatD r(n, n);
    skew_schur_exp(q.data(), sigma.data(), n, r.data(), work.data());
    const MatD ref = liere::exp(Eigen::MatrixXd(a));
    CHECK((r - ref).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 2e-13 * an);
    CHECK((r.transpose() * r - MatD::Identity(n, n)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-13);
    // the adjoint L(Aᵀ, G), two independent ways: exp_frechet (the Fréchet derivative of lie/exp.hpp's scheme,
    // a block-triangular exponential) and central differences of lie/exp.hpp in a random direction
    std::mt19937_64 g(7 + n);
    std::normal_distribution<double> d;
    MatD gm(n, n), e(n, n);
    for (int i = 0; i < n * n; ++i) gm.data()[i] = d(g), e.data()[i] = d(g);
    MatD da = MatD::Zero(n, n);
    skew_schur_exp_adjoint(q.data(), sigma.data(), n, gm.data(), da.data(), work.data());
    const MatD lf = liere::exp_frechet(Eigen::MatrixXd(a.transpose()), Eigen::MatrixXd(gm));
    CHECK((da - lf).cwiseAbs().maxCoeff<Eigen::PropagateNaN>()
        <= 1e-12 * an * std::max(1.0, lf.cwiseAbs().maxCoeff<Eigen::PropagateNaN>()));
    // Central differences resolve ⟨G, L(A, E)⟩ to about u·‖A‖/h·Σ|G|: at ‖A‖ = 1e4 that is of order 1, so the
    // spectra with ‖A‖ ≥ 1e4 are checked against exp_frechet only.
    if (an > 1e3) continue;
    const double h = 1e-6;
    Eigen::MatrixXd rp(n, n), rm(n, n);
    liere::detail::expm_ss(Eigen::MatrixXd(a + h * e), rp);
    liere::detail::expm_ss(Eigen::MatrixXd(a - h * e), rm);
    const double fd = (gm.array() * (rp - rm).array()).sum() / (2 * h), an_dot = (da.array() * e.array()).sum();
    CHECK(std::abs(fd - an_dot) <= 1e-7 * an * std::max(1.0, std::abs(an_dot)));
  }
}

// skew_schur_batch: every spectrum of test_spectra(n), and a matrix with a NaN among them, decomposed
// kSchurLanes at a time; each lane as accurate as skew_schur, the NaN lane reported, and each lane's numbers the
// same bit for bit when its matrix is decomposed alone (a lane does not depend on its neighbours: the backward's
// cache miss relies on it).
void check_schur_batch(int n) {
  std::vector<MatD> mats;
  std::vector<std::string> names;
  for (const Spectrum& sp : test_spectra(n)) {
    mats.push_back(spectrum_matrix(sp, n, 300 + n));
    names.push_back(sp.name);
  }
  MatD bad = random_skew(n, 1.0, 77);
  bad(0, n - 1) = std::numeric_limits<double>::quiet_NaN();
  mats.insert(mats.begin() + 3, bad);
  names.insert(names.begin() + 3, "a NaN entry");
  const int total = int(mats.size()), m = n / 2;
  const auto nt = static_cast<std::size_t>(total);
  std::vector<MatD> q(nt, MatD(n, n));
  std::vector<std::vector<double>> sigma(nt, std::vector<double>(static_cast<std::size_t>(m)));
  std::vector<char> ok(nt);
  std::vector<double> work(skew_schur_batch_work(n) + 7);
  for (int i0 = 0; i0 < total; i0 += kSchurLanes) {
    const int count = std::min(kSchurLanes, total - i0);
    const double* a[kSchurLanes];
    double *qp[kSchurLanes], *sp[kSchurLanes];
    bool okb[kSchurLanes];
    for (int j = 0; j < count; ++j) {
      a[j] = mats[std::size_t(i0 + j)].data();
      qp[j] = q[std::size_t(i0 + j)].data();
      sp[j] = sigma[std::size_t(i0 + j)].data();
    }
    skew_schur_batch(a, count, n, qp, sp, okb, work.data() + 1);  // an unaligned work buffer
    for (int j = 0; j < count; ++j) ok[std::size_t(i0 + j)] = okb[j];
  }
  for (int i = 0; i < total; ++i) {
    INFO("n " << n << ", " << names[std::size_t(i)] << " (batch)");
    const MatD& a = mats[std::size_t(i)];
    if (i == 3) {
      CHECK(!ok[std::size_t(i)]);
      continue;
    }
    REQUIRE(ok[std::size_t(i)]);
    const double an = std::max(1.0, a.cwiseAbs().maxCoeff<Eigen::PropagateNaN>());
    const MatD& qi = q[std::size_t(i)];
    CHECK((qi.transpose() * qi - MatD::Identity(n, n)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-13);
    MatD th = MatD::Zero(n, n);
    for (int j = 0; j < m; ++j) {
      th(j, m + j) = sigma[std::size_t(i)][std::size_t(j)];
      th(m + j, j) = -sigma[std::size_t(i)][std::size_t(j)];
    }
    CHECK((qi * th * qi.transpose() - a).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 1e-13 * an);
    MatD r(n, n);
    std::vector<double> ework(std::size_t(n) * n);
    skew_schur_exp(qi.data(), sigma[std::size_t(i)].data(), n, r.data(), ework.data());
    CHECK((r - liere::exp(Eigen::MatrixXd(a))).cwiseAbs().maxCoeff<Eigen::PropagateNaN>() <= 2e-13 * an);
    // alone in a batch of one: the same numbers
    MatD q1(n, n);
    std::vector<double> s1(static_cast<std::size_t>(m));
    const double* a1[1] = {a.data()};
    double* q1p[1] = {q1.data()};
    double* s1p[1] = {s1.data()};
    bool ok1[1];
    skew_schur_batch(a1, 1, n, q1p, s1p, ok1, work.data());
    REQUIRE(ok1[0]);
    CHECK(q1 == qi);
    CHECK(s1 == sigma[std::size_t(i)]);
  }
}

// The op's tables and gradients with a given method (and the cache's state), double or float.
template <class S>
struct OpRun {
  std::vector<S> table, dw;
};
template <class S>
OpRun<S> run_op(const RotationTableShape& sh, const std::vector<S>& w, const std::vector<S>& pos,
                const std::vector<S>& dt, cpu::TableMethod method) {
  cpu::set_rotation_table_method(method);
  OpRun<S> r;
  r.table.resize(std::size_t(sh.table_size()));
  r.dw.assign(w.size(), S(0));
  cpu::rotation_table_forward(w.data(), pos.data(), r.table.data(), sh);
  cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), r.dw.data(), sh);
  cpu::set_rotation_table_method(cpu::TableMethod::Auto);
  return r;
}

// max |x_i − y_i| and max |x_i| of two tables or gradients, in double.
template <class X, class Y>
double max_diff(const X& x, const Y& y) {
  double e = 0;
  for (std::size_t i = 0; i < x.size(); ++i) raise_error(e, std::abs(double(x[i]) - double(y[i])));
  return e;
}
template <class X>
double max_abs(const X& x) {
  double e = 0;
  for (auto v : x) e = std::max(e, std::abs(double(v)));
  return e;
}

// The spectral op against the polynomial op (same precision), and in float against the spectral op in double on the
// same (float) inputs; every table block orthogonal; and the cache: a backward whose forward was another one (the
// cache holds other inputs) decomposes again and gives the same gradient bit for bit.
template <class S>
void check_spectral_op(int block, double scale, double fwd_tol, double bwd_rel_tol) {
  INFO("block " << block << ", generator scale " << scale << (std::is_same_v<S, float> ? ", float" : ", double"));
  const RotationTableShape sh{2, 2, 5, 64, block};
  std::mt19937_64 g(block * 3 + 1);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<S> w(std::size_t(sh.num_generators())), pos(std::size_t(sh.rows) * sh.dim), dt(std::size_t(sh.table_size()));
  for (auto& x : w) x = S(scale * u(g));
  for (auto& x : pos) x = S(u(g));
  pos[0] = pos[1] = S(0);  // row 0: the zero generator (a CLS token)
  for (auto& x : dt) x = S(u(g));
  const OpRun<S> sp = run_op(sh, w, pos, dt, cpu::TableMethod::Auto);
  const OpRun<S> po = run_op(sh, w, pos, dt, cpu::TableMethod::Polynomial);
  CHECK(max_diff(sp.table, po.table) <= fwd_tol);
  CHECK(max_diff(sp.dw, po.dw) <= bwd_rel_tol * max_abs(po.dw));
  // one decomposition at a time (skew_schur) against kSchurLanes at once (skew_schur_batch): rounding apart
  const OpRun<S> single = run_op(sh, w, pos, dt, cpu::TableMethod::SpectralSingle);
  CHECK(max_diff(sp.table, single.table) <= fwd_tol);
  CHECK(max_diff(sp.dw, single.dw) <= bwd_rel_tol * max_abs(single.dw));
  if constexpr (std::is_same_v<S, float>) {
    const std::vector<double> wd(w.begin(), w.end()), pd(pos.begin(), pos.end()), dd(dt.begin(), dt.end());
    const OpRun<double> ref = run_op(sh, wd, pd, dd, cpu::TableMethod::Auto);
    CHECK(max_diff(sp.table, ref.table) <= 1.2e-7);       // the rounding of the double tables
    CHECK(max_diff(sp.dw, ref.dw) <= 1e-5 * max_abs(ref.dw));  // the float backward
  }
  double orth = 0;
  const int b = block, nblocks = int(sp.table.size()) / (b * b);
  for (int k = 0; k < nblocks; ++k) {
    MatD r(b, b);
    for (int i = 0; i < b * b; ++i) r.data()[i] = double(sp.table[std::size_t(k) * b * b + i]);
    raise_error(orth, (r.transpose() * r - MatD::Identity(b, b)).cwiseAbs().maxCoeff<Eigen::PropagateNaN>());
  }
  CHECK(orth <= (std::is_same_v<S, float> ? 1e-6 : 1e-13));
  std::vector<S> w2(w), other(sp.table.size()), dw2(w.size(), S(0));
  for (auto& x : w2) x = S(double(x) * 0.5);
  cpu::rotation_table_forward(w2.data(), pos.data(), other.data(), sh);  // the cache now holds w2's forms
  CHECK(cpu::detail::schur_cache<S>().matches(w2.data(), pos.data(), sh));
  CHECK_FALSE(cpu::detail::schur_cache<S>().matches(w.data(), pos.data(), sh));  // so the backward below decomposes again
  cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), dw2.data(), sh);
  CHECK(dw2 == sp.dw);
}

// The dot-product test of the op's backward right after its forward (the cached Schur forms), on the given positions
// (random w, direction and table gradient from seed); then the same backward after other forwards, when the cache
// holds other inputs and the group is decomposed again: the same gradient bit for bit.
void check_adjoint_after_forward(const RotationTableShape& sh, const std::vector<double>& pos, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> w(std::size_t(sh.num_generators())), v(w.size()), dt(std::size_t(sh.table_size())),
      tab(dt.size());
  for (auto* x : {&w, &v, &dt})
    for (auto& y : *x) y = u(g);
  std::vector<double> dw_hit(w.size(), 0.0), dw_miss(w.size(), 0.0);
  cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), sh);
  CHECK(cpu::detail::schur_cache<double>().matches(w.data(), pos.data(), sh));  // the backward below takes the cached forms
  cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), dw_hit.data(), sh);
  check_directional_derivative(sh, w, v, pos, dt, dw_hit);  // two forwards: the cache then holds w − h·v's
  CHECK_FALSE(cpu::detail::schur_cache<double>().matches(w.data(), pos.data(), sh));  // this backward decomposes again
  cpu::rotation_table_backward(w.data(), pos.data(), dt.data(), dw_miss.data(), sh);
  CHECK(dw_miss == dw_hit);
}

}  // namespace

namespace {
// The squarings of expm_skew and expm_frechet_skew (their return value), under the device's product and under the
// cooperative kernels' loop policy: the smallest s ≥ 0 with α/2^s ≤ θ18 (the degree-18 polynomial's bound for the
// working precision, BBC 2019, lie/t18.hpp), α = min(‖A‖_F/√2, ‖A²‖₁^{1/2}), the norms taken here with Eigen in
// double. A = θ·Q J Qᵀ, J the 2 × 2 generators down the diagonal: ‖A²‖₁^{1/2} = θ, ‖A‖_F/√2 = θ·√(N/2) ≥ √2·θ, and
// θ = ¾·2^k·θ18 puts α/θ18 a quarter away from a power of two (no rounding moves s) where the Frobenius bound
// alone needs one squaring more: each squaring doubles the rounding error the polynomial made.
template <int N, class W, class Mul>
void check_squarings() {
  INFO("block " << N << (sizeof(W) == 8 ? " double" : " float"));
  const double theta18 = t18_theta<W>();
  for (const int k : {0, 3, 10}) {
    INFO("2^" << k);
    const MatD a = skew_with_angles(std::vector<double>(N / 2, 0.75 * std::ldexp(theta18, k)), 40 + N + k);
    const double fro = a.norm() / std::sqrt(2.0),
        one = std::sqrt((a * a).cwiseAbs().colwise().sum().maxCoeff<Eigen::PropagateNaN>());
    auto squarings = [&](double alpha) {
      int s = 0;
      while (alpha / std::ldexp(1.0, s) > theta18) ++s;
      return s;
    };
    const int want = squarings(std::min(fro, one));
    REQUIRE(want == k);
    REQUIRE(squarings(fro) > want);  // the case tells the two bounds apart
    std::vector<W> in(N * N), e(N * N, W(0.5)), r(N * N), l(N * N), work(kernels::kFrechetWork * N * N);
    for (int i = 0; i < N * N; ++i) in[std::size_t(i)] = W(a.data()[i]);
    CHECK(kernels::expm_skew<N, W, Mul>(in.data(), r.data(), work.data(), 0) == want);
    CHECK(kernels::expm_frechet_skew<N, W, Mul>(in.data(), e.data(), r.data(), l.data(), work.data()) == want);
  }
}

// Non-finite input (a NaN or ∞ in A, or in E for the Fréchet body): every entry of the result NaN and the return
// value −1 (matrix_exp.hpp's promise), under both loop policies.
template <int N, class Mul>
void check_nonfinite_bodies() {
  INFO("block " << N);
  const MatD a = random_skew(N, 3.0, 60 + N);
  std::vector<float> in(N * N), e(N * N, 0.5f), r(N * N), l(N * N), work(kernels::kFrechetWork * N * N);
  auto all_nan = [](const std::vector<float>& m) {
    return std::all_of(m.begin(), m.end(), [](float x) { return std::isnan(x); });
  };
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    INFO("bad value " << bad);
    for (int i = 0; i < N * N; ++i) in[std::size_t(i)] = float(a.data()[i]);
    in[1] = bad;  // in A
    CHECK(kernels::expm_skew<N, float, Mul>(in.data(), r.data(), work.data(), 2) == -1);
    CHECK(all_nan(r));
    std::fill(l.begin(), l.end(), 0.f);
    CHECK(kernels::expm_frechet_skew<N, float, Mul>(in.data(), e.data(), r.data(), l.data(), work.data()) == -1);
    CHECK((all_nan(r) && all_nan(l)));
    in[1] = float(a.data()[1]);  // A finite, E not
    e[N + 2] = bad;
    std::fill(r.begin(), r.end(), 0.f), std::fill(l.begin(), l.end(), 0.f);
    CHECK(kernels::expm_frechet_skew<N, float, Mul>(in.data(), e.data(), r.data(), l.data(), work.data()) == -1);
    CHECK((all_nan(r) && all_nan(l)));
    e[N + 2] = 0.5f;
  }
  // A = 0 (a zero generator: weights at zero, the start of training): exp = I and L(0, E) = E exactly, no squaring.
  std::fill(in.begin(), in.end(), 0.f);
  for (int i = 0; i < N * N; ++i) e[std::size_t(i)] = float(i % 7) - 3.f;
  CHECK(kernels::expm_skew<N, float, Mul>(in.data(), r.data(), work.data(), 2) == 0);
  for (int i = 0; i < N * N; ++i) CHECK(r[std::size_t(i)] == (i % (N + 1) == 0 ? 1.f : 0.f));
  CHECK(kernels::expm_frechet_skew<N, float, Mul>(in.data(), e.data(), r.data(), l.data(), work.data()) == 0);
  for (int i = 0; i < N * N; ++i) CHECK(r[std::size_t(i)] == (i % (N + 1) == 0 ? 1.f : 0.f));
  CHECK(l == e);
}
}  // namespace

TEST_CASE("rotation tables: the bodies take the squarings of the skew bound, give NaN and -1 for non-finite input, "
          "exp(0) = I and L(0, E) = E",
          "[tables]") {
  check_squarings<4, double, kernels::NaiveMul>();
  check_squarings<8, double, kernels::NaiveMul>();
  check_squarings<16, double, EmulatedBlockLoops>();
  check_squarings<64, double, EmulatedBlockLoops>();
  check_squarings<8, float, kernels::NaiveMul>();
  check_squarings<32, float, EmulatedBlockLoops>();
  check_nonfinite_bodies<4, kernels::NaiveMul>();
  check_nonfinite_bodies<16, kernels::NaiveMul>();
  check_nonfinite_bodies<16, EmulatedBlockLoops>();
}

TEST_CASE("spectral path: the real Schur form, exp and the adjoint on degenerate spectra (double)", "[tables]") {
  for (int n : {2, 4, 6, 8, 32, 64}) check_schur(n);
}

TEST_CASE("spectral path: skew_schur_batch, kSchurLanes matrices at once, as accurate and lane by lane exact",
          "[tables]") {
  for (int n : {2, 4, 6, 8, 32, 64}) check_schur_batch(n);
}

TEST_CASE("spectral path: the op agrees with the polynomial path, stays orthogonal, and its cache is exact",
          "[tables]") {
  for (int block : {32, 64})
    for (double scale : {0.05, 3.0, 300.0}) {  // ‖A‖ from about 1 to about 1e4
      // Both paths in double; the polynomial one loses about u·‖A‖ (‖A‖ ≈ 20·scale here).
      check_spectral_op<double>(block, scale, 1e-13 * std::max(1.0, 20 * scale), 1e-11 * std::max(1.0, 20 * scale));
      // Float: both forwards are double rounded once; the polynomial backward runs in float (error ≈ u·‖A‖).
      check_spectral_op<float>(block, scale, 1.2e-7, 1e-5 * std::max(1.0, 20 * scale));
    }
}

TEST_CASE("spectral path: the op's backward is the adjoint of its forward after a forward (cache hit)", "[tables]") {
  for (int block : {32, 64}) {
    INFO("block " << block);
    const RotationTableShape sh{2, 3, 4, 64, block};
    std::mt19937_64 g(block + 200);
    std::uniform_real_distribution<double> u(-2, 2);
    std::vector<double> pos(std::size_t(sh.rows) * sh.dim);
    for (auto& y : pos) y = u(g);
    check_adjoint_after_forward(sh, pos, block + 201);
  }
}

// ---- Rows sharing a direction (backend/position_classes.hpp): one decomposition per class ---------------------

namespace {

// The positions of a CLS token at the origin and an e × e grid in [0, 1] (the official code's linspace), row-major.
template <class S>
std::vector<S> grid_with_cls(int e) {
  std::vector<S> pos{S(0), S(0)};
  for (int i = 0; i < e; ++i)
    for (int j = 0; j < e; ++j) {
      pos.push_back(S(double(i) / (e - 1)));
      pos.push_back(S(double(j) / (e - 1)));
    }
  return pos;
}

// Every member t of every class is an exact positive multiple of its representative, and no two classes are.
template <class S>
void check_classes_exact(const std::vector<S>& pos, int dim, const PositionClasses& pc) {
  const int rows = int(pos.size()) / dim;
  REQUIRE(int(pc.members.size()) == rows);
  REQUIRE(int(pc.start.back()) == rows);
  std::vector<int> seen(std::size_t(rows), 0);
  for (int c = 0; c < pc.num_classes(); ++c) {
    const int r = pc.rep[std::size_t(c)];
    CHECK(pc.members[std::size_t(pc.start[std::size_t(c)])] == r);  // the first row is the representative
    for (int i = pc.start[std::size_t(c)]; i < pc.start[std::size_t(c) + 1]; ++i) {
      const int t = pc.members[std::size_t(i)];
      ++seen[std::size_t(t)];
      const double s = pc.scale[std::size_t(t)];
      CHECK(s > 0);
      for (int a = 0; a < dim; ++a) {  // p_t = c·p_r to the rounding of c (relative 1e-16)
        const double pt = double(pos[std::size_t(t * dim + a)]), pr = double(pos[std::size_t(r * dim + a)]);
        if (!std::isfinite(pt)) continue;  // a class of its own
        CHECK(std::abs(pt - s * pr) <= 4e-16 * std::abs(pt));
      }
    }
  }
  for (int v : seen) CHECK(v == 1);
  // no two representatives collinear with a positive factor (checked independently in long double, where the
  // products of floats are exact)
  if constexpr (std::is_same_v<S, float>)
    for (int c = 0; c < pc.num_classes(); ++c)
      for (int e = c + 1; e < pc.num_classes(); ++e) {
        const S* x = pos.data() + pc.rep[std::size_t(c)] * dim;
        const S* y = pos.data() + pc.rep[std::size_t(e)] * dim;
        bool collinear = true;
        long double dot = 0;
        for (int a = 0; a < dim; ++a) {
          dot += (long double)x[a] * y[a];
          for (int b = a + 1; b < dim; ++b)
            collinear = collinear && (long double)x[a] * y[b] == (long double)x[b] * y[a];
        }
        const bool both_finite = std::isfinite(double(x[0])) && std::isfinite(double(y[0]));
        CHECK_FALSE((both_finite && collinear && dot > 0));
      }
}

}  // namespace

TEST_CASE("position classes: grids, lines, random rows, zeros, NaN and one ulp off", "[tables]") {
  {  // CLS + 8×8 grid: the zero class (CLS and the grid's origin) and the 37 primitive directions of the grid
    const auto pos = grid_with_cls<float>(8);
    const PositionClasses pc = position_classes(pos.data(), 65, 2);
    CHECK(pc.num_classes() == 38);
    CHECK(pc.rep[0] == 0);
    CHECK(pc.start[1] == 2);  // rows 0 and 1 (the CLS token and the grid's (0, 0))
    check_classes_exact(pos, 2, pc);
    const auto posd = grid_with_cls<double>(8);
    const PositionClasses pcd = position_classes(posd.data(), 65, 2);
    CHECK(pcd.num_classes() == 38);
    check_classes_exact(posd, 2, pcd);
  }
  {  // a 1D sequence: one class of nonzero rows; the negative ones another
    std::vector<double> pos;
    for (int t = -3; t < 10; ++t) pos.push_back(0.37 * t);
    const PositionClasses pc = position_classes(pos.data(), 13, 1);
    CHECK(pc.num_classes() == 3);  // negative, zero, positive
    check_classes_exact(pos, 1, pc);
  }
  {  // a 3D grid of 4 × 4 × 4 integer positions: 1 zero class and the primitive directions (49 of 63 points)
    std::vector<float> pos;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        for (int c = 0; c < 4; ++c) pos.insert(pos.end(), {float(a), float(b), float(c)});
    const PositionClasses pc = position_classes(pos.data(), 64, 3);
    CHECK(pc.num_classes() == 1 + 49);
    check_classes_exact(pos, 3, pc);
  }
  {  // random rows: no sharing; a NaN row and an Inf row each alone; a row one ulp off a direction alone
    std::mt19937_64 g(5);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> pos(40 * 2);
    for (auto& x : pos) x = u(g);
    pos[6] = std::numeric_limits<float>::quiet_NaN();
    pos[8] = pos[10] = std::numeric_limits<float>::quiet_NaN();
    pos[12] = std::numeric_limits<float>::infinity();
    pos[14] = 2 * pos[16], pos[15] = 2 * pos[17];                        // row 7 = 2 · row 8
    pos[18] = 2 * pos[16], pos[19] = std::nextafter(2 * pos[17], 10.f);  // row 9: one ulp off
    const PositionClasses pc = position_classes(pos.data(), 40, 2);
    CHECK(pc.num_classes() == 39);
    // double rows whose cross products underflow (4e-400 rounds to 0) or overflow are not grouped, though each
    // pair here is exactly collinear (2·fl(x) = fl(2x)); products near 1 are taken exactly
    const std::vector<double> tiny{1e-200, 2e-200, 2e-200, 4e-200}, huge{1e200, 2e200, 2e200, 4e200};
    CHECK(position_classes(tiny.data(), 2, 2).num_classes() == 2);
    CHECK(position_classes(huge.data(), 2, 2).num_classes() == 2);
    // row 2 joins row 0 (products near 2); row 1 cannot (products near 4e-400)
    const std::vector<double> mixed{1e-200, 2e-200, 2e-200, 4e-200, 1e200, 2e200};
    CHECK(position_classes(mixed.data(), 3, 2).num_classes() == 2);
    const std::vector<double> fine{1e-100, 2e-100, 3e-100, 6e-100, 1e100, 2e100, 3e100, 6e100};
    CHECK(position_classes(fine.data(), 4, 2).num_classes() == 1);
    // (c, fl(3c)) against (1, 3): the same bucket (fl(c / fl(3c)) = fl(1/3)) and the same rounded cross products
    // (fl(3c) both), but 3c is not a double, so the rows are not collinear: two classes; (1, 3) and (0.5, 1.5) one
    const double c = 1 + 4.0 / 97;
    const std::vector<double> near{1.0, 3.0, c, 3 * c}, exact{1.0, 3.0, 0.5, 1.5};
    CHECK(position_classes(near.data(), 2, 2).num_classes() == 2);
    CHECK(position_classes(exact.data(), 2, 2).num_classes() == 1);
    check_classes_exact(pos, 2, pc);
    int with_seven = -1;
    for (int c = 0; c < pc.num_classes(); ++c)
      if (pc.rep[std::size_t(c)] == 7) with_seven = c;
    REQUIRE(with_seven >= 0);
    CHECK(pc.start[std::size_t(with_seven) + 1] - pc.start[std::size_t(with_seven)] == 2);
    CHECK(pc.scale[8] == 0.5);
  }
}

namespace {

// The op on positions with shared directions against the same op one row at a time (rows = 1: nothing to share),
// which is the decomposition of every row's own matrix: tables and gradients equal to rounding; and against the
// polynomial path (the independent one).
template <class S>
void check_shared_rows(int block, double scale, double fwd_tol, double bwd_rel_tol, double poly_bwd_rel_tol) {
  INFO("block " << block << ", scale " << scale << (std::is_same_v<S, float> ? ", float" : ", double"));
  const std::vector<S> pos = grid_with_cls<S>(5);  // 26 rows: 2 zero, 4·4 + … directions
  const int rows = int(pos.size()) / 2, sets = 2, D = 64;
  const RotationTableShape sh{sets, 2, rows, D, block};
  REQUIRE(position_classes(pos.data(), rows, 2).num_classes() < rows - 5);
  std::mt19937_64 g(block + 17);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<S> w(std::size_t(sh.num_generators())), dt(std::size_t(sh.table_size()));
  for (auto& x : w) x = S(scale * u(g));
  for (auto& x : dt) x = S(u(g));
  const OpRun<S> shared = run_op(sh, w, pos, dt, cpu::TableMethod::Auto);
  const OpRun<S> poly = run_op(sh, w, pos, dt, cpu::TableMethod::Polynomial);
  const int nb = D / block, bb = block * block;
  std::vector<S> alone(shared.table.size()), dw_alone(w.size(), S(0));
  const RotationTableShape sh1{sets, 2, 1, D, block};
  std::vector<S> t1(std::size_t(sh1.table_size())), d1(t1.size());
  for (int t = 0; t < rows; ++t) {
    for (int s = 0; s < sets; ++s)
      for (int e = 0; e < nb * bb; ++e)
        d1[std::size_t(s * nb * bb + e)] = dt[std::size_t((s * rows + t) * nb * bb + e)];
    cpu::rotation_table_forward(w.data(), pos.data() + 2 * t, t1.data(), sh1);
    cpu::rotation_table_backward(w.data(), pos.data() + 2 * t, d1.data(), dw_alone.data(), sh1);
    for (int s = 0; s < sets; ++s)
      for (int e = 0; e < nb * bb; ++e)
        alone[std::size_t((s * rows + t) * nb * bb + e)] = t1[std::size_t(s * nb * bb + e)];
  }
  CHECK(max_diff(shared.table, alone) <= fwd_tol);
  CHECK(max_diff(shared.dw, dw_alone) <= bwd_rel_tol * max_abs(dw_alone));
  CHECK(max_diff(shared.table, poly.table) <= fwd_tol);
  CHECK(max_diff(shared.dw, poly.dw) <= poly_bwd_rel_tol * max_abs(poly.dw));
  // the CLS row (the origin) is the identity, exactly
  for (int s = 0; s < sets; ++s)
    for (int k = 0; k < nb; ++k)
      for (int e = 0; e < bb; ++e)
        CHECK(shared.table[std::size_t((s * rows) * nb * bb + k * bb + e)] == S(e % (block + 1) == 0 ? 1 : 0));
}

}  // namespace

TEST_CASE("spectral path: rows sharing a direction give the tables and gradients of rows decomposed alone",
          "[tables]") {
  for (int block : {32, 64})
    for (double scale : {0.05, 3.0, 300.0}) {
      check_shared_rows<double>(block, scale, 1e-13 * std::max(1.0, 20 * scale), 1e-12 * std::max(1.0, 20 * scale),
                                1e-11 * std::max(1.0, 20 * scale));
      // float: the tables are double rounded once either way; the backward sums a class's 𝓛 before one float
      // product instead of after
      check_shared_rows<float>(block, scale, 1.2e-7, 2e-6, 1e-5 * std::max(1.0, 20 * scale));
    }
}

TEST_CASE("spectral path: the backward is the adjoint of the forward on a grid (shared rows; cache hit and miss)",
          "[tables]") {
  for (int block : {32, 64}) {
    INFO("block " << block);
    const std::vector<double> pos = grid_with_cls<double>(4);
    check_adjoint_after_forward(RotationTableShape{2, 2, int(pos.size()) / 2, 64, block}, pos, block + 300);
  }
}

TEST_CASE("spectral path: the cache is keyed by the positions and the row count as well as the generators",
          "[tables]") {
  // A backward takes the forward's Schur forms only when its inputs are the forward's. Here the generators are the
  // same and (1) one position differs, (2) the row count differs while the position buffer is the same (the first
  // rows of it): the cache must not match, and the gradient must be the one of a backward right after its own
  // forward, bit for bit (a cache miss decomposes again: the same numbers), and the polynomial path's to rounding.
  for (int block : {32, 64}) {
    INFO("block " << block);
    const RotationTableShape sh{2, 2, 5, 64, block}, sh3{2, 2, 3, 64, block};
    std::mt19937_64 g(block + 400);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> w(std::size_t(sh.num_generators())), pos(std::size_t(sh.rows) * sh.dim),
        dt(std::size_t(sh.table_size())), tab(dt.size());
    for (auto* x : {&w, &pos, &dt})
      for (auto& y : *x) y = u(g);
    const auto& cache = cpu::detail::schur_cache<double>();
    {  // (1) row 1 moves
      std::vector<double> moved(pos), dw(w.size(), 0.0);
      moved[3] += 0.5;
      const OpRun<double> want = run_op(sh, w, moved, dt, cpu::TableMethod::Auto);
      const OpRun<double> poly = run_op(sh, w, moved, dt, cpu::TableMethod::Polynomial);
      cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), sh);  // the cache: the forms at pos
      CHECK(cache.matches(w.data(), pos.data(), sh));
      CHECK_FALSE(cache.matches(w.data(), moved.data(), sh));
      cpu::rotation_table_backward(w.data(), moved.data(), dt.data(), dw.data(), sh);
      CHECK(dw == want.dw);
      CHECK(max_diff(dw, poly.dw) <= 1e-11 * 20 * max_abs(poly.dw));
    }
    {  // (2) rows 0..2 of the same buffer
      const std::vector<double> pos3(pos.begin(), pos.begin() + sh3.rows * sh3.dim),
          dt3(dt.begin(), dt.begin() + sh3.table_size());
      const OpRun<double> want = run_op(sh3, w, pos3, dt3, cpu::TableMethod::Auto);
      const OpRun<double> poly = run_op(sh3, w, pos3, dt3, cpu::TableMethod::Polynomial);
      std::vector<double> dw(w.size(), 0.0);
      cpu::rotation_table_forward(w.data(), pos.data(), tab.data(), sh);  // the cache: 5 rows
      CHECK_FALSE(cache.matches(w.data(), pos.data(), sh3));
      cpu::rotation_table_backward(w.data(), pos.data(), dt3.data(), dw.data(), sh3);
      CHECK(dw == want.dw);
      CHECK(max_diff(dw, poly.dw) <= 1e-11 * 20 * max_abs(poly.dw));
    }
  }
}

namespace {
// The spectral op (blocks 32, 64) on non-finite input: a NaN or Inf position makes its row's tables NaN and leaves the
// other rows as they are without it; a NaN generator coordinate makes its (set, block) NaN in every row and leaves the
// other blocks; the backward terminates with NaN gradients. (The decomposition of such a matrix fails: these rows
// take the polynomial path.)
template <class S>
void check_spectral_nonfinite(int block) {
  INFO("block " << block << (std::is_same_v<S, float> ? ", float" : ", double"));
  const RotationTableShape sh{2, 2, 4, 64, block};
  const int nb = 64 / block, bb = block * block;
  std::mt19937_64 g(block + 500);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<S> w(std::size_t(sh.num_generators())), pos(std::size_t(sh.rows) * sh.dim),
      dt(std::size_t(sh.table_size()));
  for (auto& x : w) x = S(u(g));
  for (auto& x : pos) x = S(u(g));
  for (auto& x : dt) x = S(u(g));
  std::vector<S> bad = pos;
  bad[2] = std::numeric_limits<S>::quiet_NaN();  // row 1
  bad[7] = std::numeric_limits<S>::infinity();   // row 3
  const OpRun<S> r = run_op(sh, w, bad, dt, cpu::TableMethod::Auto);
  const OpRun<S> ok = run_op(sh, w, pos, dt, cpu::TableMethod::Auto);
  for (int s = 0; s < sh.sets; ++s)
    for (int t = 0; t < sh.rows; ++t)
      for (int k = 0; k < nb; ++k) {
        INFO("set " << s << ", row " << t << ", block " << k);
        const std::size_t o = std::size_t((s * sh.rows + t) * nb + k) * bb;
        bool all_nan = true;
        double diff = 0;
        for (int e = 0; e < bb; ++e) {
          all_nan = all_nan && std::isnan(double(r.table[o + e]));
          raise_error(diff, std::abs(double(r.table[o + e]) - double(ok.table[o + e])));
        }
        if (t == 1 || t == 3) CHECK(all_nan);
        else CHECK(diff <= (std::is_same_v<S, float> ? 1.2e-7 : 1e-13));
      }
  CHECK(std::any_of(r.dw.begin(), r.dw.end(), [](S v) { return std::isnan(double(v)); }));
  // a NaN generator: set 1, axis 0, block 0
  std::vector<S> wbad = w;
  wbad[std::size_t(sh.dim * nb * sh.coords_per_block() + 5)] = std::numeric_limits<S>::quiet_NaN();
  const OpRun<S> rw = run_op(sh, wbad, pos, dt, cpu::TableMethod::Auto);
  for (int s = 0; s < sh.sets; ++s)
    for (int t = 0; t < sh.rows; ++t)
      for (int k = 0; k < nb; ++k) {
        INFO("NaN generator: set " << s << ", row " << t << ", block " << k);
        const std::size_t o = std::size_t((s * sh.rows + t) * nb + k) * bb;
        bool all_nan = true, all_finite = true;
        for (int e = 0; e < bb; ++e) {
          all_nan = all_nan && std::isnan(double(rw.table[o + e]));
          all_finite = all_finite && std::isfinite(double(rw.table[o + e]));
        }
        if (s == 1 && k == 0) CHECK(all_nan);
        else CHECK(all_finite);
      }
  CHECK(std::any_of(rw.dw.begin(), rw.dw.end(), [](S v) { return std::isnan(double(v)); }));
}
}  // namespace

TEST_CASE("spectral path: NaN or Inf positions and generators give NaN rows and blocks, the others as without them",
          "[tables]") {
  for (int block : {32, 64}) {
    check_spectral_nonfinite<double>(block);
    check_spectral_nonfinite<float>(block);
  }
}

TEST_CASE("rotation tables: float tables are the double tables on the same inputs, rounded once", "[tables]") {
  // The forward runs in double for float tables too (TableForwardWork: the generator, then the closed forms of blocks
  // 2 and 3, scaling and squaring from 4, the spectral path for 32 and 64): a float table differs from the double
  // op's on the same float inputs by the final rounding only, at any generator norm. (Float scaling and squaring would
  // be off by about u_float·‖A‖; blocks 2 and 3 summed their angle in float until 2026-12-06, off by u·|angle|.)
  for (int block : {2, 3, 4, 8, 16, 32, 64})
    for (double scale : {0.05, 3.0, 300.0}) {
      INFO("block " << block << ", generator scale " << scale);
      const RotationTableShape sh{2, 2, 5, block == 3 ? 48 : 64, block};
      std::mt19937_64 g(block * 7 + 3);
      std::uniform_real_distribution<double> u(-1, 1);
      std::vector<float> w(std::size_t(sh.num_generators())), pos(std::size_t(sh.rows) * sh.dim),
          tf(std::size_t(sh.table_size()));
      for (auto& x : w) x = float(scale * u(g));
      for (auto& x : pos) x = float(u(g));
      const std::vector<double> wd(w.begin(), w.end()), pd(pos.begin(), pos.end());
      std::vector<double> td(tf.size());
      for (const cpu::TableMethod m : {cpu::TableMethod::Auto, cpu::TableMethod::Polynomial}) {
        INFO((m == cpu::TableMethod::Auto ? "default method" : "polynomial"));
        cpu::set_rotation_table_method(m);
        cpu::rotation_table_forward(w.data(), pos.data(), tf.data(), sh);
        cpu::rotation_table_forward(wd.data(), pd.data(), td.data(), sh);
        cpu::set_rotation_table_method(cpu::TableMethod::Auto);
        // |x| ≤ 1: one rounding is at most 2⁻²⁴ ≈ 6e-8; the double tables' own error is below 1e-11 here
        CHECK(max_diff(tf, td) <= 6.5e-8);
      }
    }
}
