// Every engine kernel's backward checked two independent ways, in double (STYLE.md):
//   * central differences of L = ⟨f(x), v⟩: |a − n| / max(1, |a|, |n|) < 1e-6 per element;
//   * the adjoint (dot-product) test ⟨J u, v⟩ = ⟨u, Jᵀ v⟩ to 1e-12, with J u from forward mode: the
//     forward kernel itself for ops linear in their inputs, the bilinear expansion for linear / patch
//     embedding, and the forward kernel instantiated with dual numbers for the nonlinear ones (layernorm,
//     GELU, softmax cross-entropy);
// plus: every backward accumulates (+=); the float paths (Eigen's vectorised erf, OpenMP chunks) agree
// with double; reductions give the same bits with 1 and 2 threads; patch embedding is the convolution.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <liere/backend/cpu/kernels.hpp>
#include <liere/tensor/tensor.hpp>
#include <omp.h>
#include <string>
#include <vector>

#include "skip.hpp"
#include "test_util.hpp"

namespace {

// ---- dual numbers: forward-mode derivatives through the generic kernels ------------------------------------
struct Dual {
  double v = 0, d = 0;
  Dual() = default;
  Dual(double a) : v(a) {}  // NOLINT: implicit, as the kernels write S(1), S(eps)
  Dual(double a, double b) : v(a), d(b) {}
  Dual& operator+=(const Dual& o) { v += o.v; d += o.d; return *this; }
  Dual& operator-=(const Dual& o) { v -= o.v; d -= o.d; return *this; }
  Dual& operator*=(const Dual& o) { d = d * o.v + v * o.d; v *= o.v; return *this; }
  friend Dual operator+(Dual a, const Dual& b) { return a += b; }
  friend Dual operator-(Dual a, const Dual& b) { return a -= b; }
  friend Dual operator*(Dual a, const Dual& b) { return a *= b; }
  friend Dual operator/(const Dual& a, const Dual& b) { return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)}; }
  friend Dual operator-(const Dual& a) { return {-a.v, -a.d}; }
  friend bool operator<(const Dual& a, const Dual& b) { return a.v < b.v; }
  friend bool operator>(const Dual& a, const Dual& b) { return a.v > b.v; }
  friend Dual sqrt(const Dual& a) { const double s = std::sqrt(a.v); return {s, a.d / (2 * s)}; }
  friend Dual exp(const Dual& a) { const double e = std::exp(a.v); return {e, a.d * e}; }
  friend Dual log(const Dual& a) { return {std::log(a.v), a.d / a.v}; }
  friend Dual erf(const Dual& a) {
    return {std::erf(a.v), a.d * 2.0 / std::sqrt(3.14159265358979323846) * std::exp(-a.v * a.v)};
  }
};
#pragma omp declare reduction(+ : Dual : omp_out += omp_in) initializer(omp_priv = Dual(0.0))

using Vec = std::vector<double>;
using Ins = std::vector<Vec>;
using liere::Index;
using liere::test::dot;
using liere::test::random_vector;
using liere::test::rel_err;

std::vector<Dual> duals(const Vec& x, const Vec& u) {
  std::vector<Dual> r(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) r[i] = Dual(x[i], u[i]);
  return r;
}
Vec tangents(const std::vector<Dual>& y) {
  Vec r(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) r[i] = y[i].d;
  return r;
}
Vec add(Vec a, const Vec& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// An op under test: f, its backward (accumulating into dx) and its forward-mode derivative.
struct OpCase {
  std::string name;
  Ins x;                                                                   // the point
  std::function<Vec(const Ins&)> f;                                        // y = f(x)
  std::function<void(const Ins&, const Vec& dy, Ins& dx)> backward;        // dx += Jᵀ dy
  std::function<Vec(const Ins&, const Ins& u)> jvp;                        // J u
};

Ins zeros_like(const Ins& x) {
  Ins z;
  for (const auto& v : x) z.emplace_back(v.size(), 0.0);
  return z;
}

void check_op(const OpCase& op) {
  INFO("op: " << op.name);
  const Vec y = op.f(op.x);
  const Vec v = random_vector(y.size());
  Ins g = zeros_like(op.x);
  op.backward(op.x, v, g);

  // 1. Central differences, every input, every element.
  for (std::size_t i = 0; i < op.x.size(); ++i) {
    INFO("input " << i);
    const Vec num = liere::test::numeric_gradient(
        [&](const Vec& xi) {
          Ins xx = op.x;
          xx[i] = xi;
          return dot(op.f(xx), v);
        },
        op.x[i]);
    double worst = 0;
    for (std::size_t k = 0; k < num.size(); ++k) liere::test::raise_error(worst, rel_err(g[i][k], num[k]));
    CHECK(worst < 1e-6);
  }

  // 2. Adjoint test: ⟨J u, v⟩ = ⟨u, Jᵀ v⟩.
  Ins u;
  for (const auto& xi : op.x) u.push_back(random_vector(xi.size()));
  const double lhs = dot(op.jvp(op.x, u), v);
  double rhs = 0;
  for (std::size_t i = 0; i < u.size(); ++i) rhs += dot(u[i], g[i]);
  INFO("<Ju, v> = " << lhs << ", <u, J^T v> = " << rhs);
  CHECK(rel_err(lhs, rhs) < 1e-12);

  // 3. The backward accumulates: dx = c + Jᵀ v when dx starts at c.
  Ins c;
  for (const auto& xi : op.x) c.push_back(random_vector(xi.size()));
  Ins acc = c;
  op.backward(op.x, v, acc);
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    for (std::size_t k = 0; k < c[i].size(); ++k)
      liere::test::raise_error(worst, rel_err(acc[i][k], c[i][k] + g[i][k]));
  CHECK(worst < 1e-14);
}

}  // namespace

using namespace liere;

TEST_CASE("linear: backward by central differences and the adjoint test", "[engine][ops]") {
  const Index N = 5, C = 4, OC = 3;
  for (bool bias : {true, false}) {
    OpCase op;
    op.name = bias ? "linear" : "linear (no bias)";
    op.x = {random_vector(N * C), random_vector(OC * C)};
    if (bias) op.x.push_back(random_vector(OC));
    auto fwd = [=](const Vec& x, const Vec& w, const Vec* b) {
      Vec y(N * OC);
      cpu::linear_forward(x.data(), w.data(), b ? b->data() : nullptr, y.data(), N, C, OC);
      return y;
    };
    op.f = [=](const Ins& in) { return fwd(in[0], in[1], bias ? &in[2] : nullptr); };
    op.backward = [=](const Ins& in, const Vec& dy, Ins& d) {
      cpu::linear_backward(in[0].data(), in[1].data(), dy.data(), d[0].data(), d[1].data(), bias ? d[2].data() : nullptr,
                           N, C, OC);
    };
    // Bilinear in (x, W), affine in b: J u = f(u_x, W, 0) + f(x, u_W, u_b).
    op.jvp = [=](const Ins& in, const Ins& u) { return add(fwd(u[0], in[1], nullptr), fwd(in[0], u[1], bias ? &u[2] : nullptr)); };
    check_op(op);
  }
}

TEST_CASE("linear: skipped gradients stay untouched", "[engine][ops]") {
  const Index N = 3, C = 2, OC = 2;
  Vec x = random_vector(N * C), w = random_vector(OC * C), dy = random_vector(N * OC);
  Vec dw(OC * C, 0.0), dw_all(OC * C, 0.0), dx_all(N * C, 0.0), db_all(OC, 0.0);
  cpu::linear_backward(x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr, N, C, OC);
  cpu::linear_backward(x.data(), w.data(), dy.data(), dx_all.data(), dw_all.data(), db_all.data(), N, C, OC);
  CHECK(dw == dw_all);
}

TEST_CASE("layernorm: backward by central differences and the adjoint test (dual numbers)", "[engine][ops]") {
  const Index N = 70, C = 6;  // three chunks of kLayerNormChunk = 32 rows, the last one partial
  OpCase op;
  op.name = "layernorm";
  op.x = {random_vector(N * C, -2, 2), random_vector(C, 0.5, 1.5), random_vector(C)};
  auto fwd = [=]<class S>(const S* x, const S* g, const S* b) {
    std::vector<S> y(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(x, g, b, y.data(), mean.data(), rstd.data(), N, C);
    return y;
  };
  op.f = [=](const Ins& in) { return fwd(in[0].data(), in[1].data(), in[2].data()); };
  op.backward = [=](const Ins& in, const Vec& dy, Ins& d) {
    Vec y(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(in[0].data(), in[1].data(), in[2].data(), y.data(), mean.data(), rstd.data(), N, C);
    cpu::layernorm_backward(in[0].data(), in[1].data(), mean.data(), rstd.data(), dy.data(), d[0].data(), d[1].data(),
                            d[2].data(), Vec(cpu::layernorm_backward_scratch(N, C)).data(), N, C);
  };
  op.jvp = [=](const Ins& in, const Ins& u) {
    auto x = duals(in[0], u[0]), g = duals(in[1], u[1]), b = duals(in[2], u[2]);
    return tangents(fwd(x.data(), g.data(), b.data()));
  };
  check_op(op);
}

TEST_CASE("layernorm: matches the definition and saves mean and 1/std", "[engine][ops]") {
  const Index N = 3, C = 5;
  Vec x = random_vector(N * C, -3, 3), g = random_vector(C), b = random_vector(C);
  Vec y(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C);
  for (Index n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (Index i = 0; i < C; ++i) m += x[n * C + i] / C;
    for (Index i = 0; i < C; ++i) v += (x[n * C + i] - m) * (x[n * C + i] - m) / C;  // biased, as PyTorch
    CHECK(mean[n] == Approx(m).epsilon(1e-14));
    CHECK(rstd[n] == Approx(1 / std::sqrt(v + 1e-5)).epsilon(1e-14));
    for (Index i = 0; i < C; ++i)
      CHECK(y[n * C + i] == Approx((x[n * C + i] - m) / std::sqrt(v + 1e-5) * g[i] + b[i]).epsilon(1e-13));
  }
}

TEST_CASE("gelu: backward by central differences and the adjoint test (dual numbers)", "[engine][ops]") {
  OpCase op;
  op.name = "gelu";
  op.x = {random_vector(40, -4, 4)};
  op.f = [](const Ins& in) {
    Vec y(in[0].size());
    cpu::gelu_forward(in[0].data(), y.data(), Index(y.size()));
    return y;
  };
  op.backward = [](const Ins& in, const Vec& dy, Ins& d) {
    cpu::gelu_backward(in[0].data(), dy.data(), d[0].data(), Index(dy.size()));
  };
  op.jvp = [](const Ins& in, const Ins& u) {
    auto x = duals(in[0], u[0]);
    std::vector<Dual> y(x.size());
    cpu::gelu_forward(x.data(), y.data(), Index(x.size()));
    return tangents(y);
  };
  check_op(op);
  // Known values of x Φ(x).
  const double xs[] = {-3, -1, 0, 0.5, 2};
  for (double x : xs) {
    double y = 0;
    cpu::gelu_forward(&x, &y, 1);
    CHECK(y == Approx(x * 0.5 * std::erfc(-x / std::sqrt(2.0))).epsilon(1e-12).margin(1e-15));  // 1 + erf cancels for x < 0
  }
}

TEST_CASE("gelu: the vectorised float path agrees with double", "[engine][ops]") {
  const Index n = 100003;  // large enough for several OpenMP chunks, with a ragged tail
  std::vector<float> x(n), y(n), dy(n), dx(n, 0.25f);
  Vec xd(n), yd(n), dyd(n), dxd(n, 0.25);
  for (Index i = 0; i < n; ++i) {
    xd[i] = x[i] = float(liere::test::uniform(-6, 6));
    dyd[i] = dy[i] = float(liere::test::uniform(-1, 1));
  }
  cpu::gelu_forward(x.data(), y.data(), n);
  cpu::gelu_forward(xd.data(), yd.data(), n);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  cpu::gelu_backward(xd.data(), dyd.data(), dxd.data(), n);
  double ey = 0, ed = 0;
  for (Index i = 0; i < n; ++i) {
    liere::test::raise_error(ey, std::abs(y[i] - yd[i]) / std::max(1.0, std::abs(yd[i])));
    liere::test::raise_error(ed, std::abs(dx[i] - dxd[i]) / std::max(1.0, std::abs(dxd[i])));
  }
  CHECK(ey < 2e-6);  // float rounding of a few operations
  CHECK(ed < 2e-6);
}

TEST_CASE("dropout: backward checks, mask statistics and thread independence", "[engine][ops]") {
  const double p = 0.3;
  const Index n = 50;
  auto fwd = [=](const Vec& x) {
    Rng rng(7);  // the same mask every call
    Vec y(n);
    std::vector<std::uint8_t> mask(n);
    cpu::dropout_forward(x.data(), p, rng, y.data(), mask.data(), n);
    return std::pair{y, mask};
  };
  OpCase op;
  op.name = "dropout";
  op.x = {random_vector(n)};
  op.f = [=](const Ins& in) { return fwd(in[0]).first; };
  op.backward = [=](const Ins& in, const Vec& dy, Ins& d) {
    auto mask = fwd(in[0]).second;
    cpu::dropout_backward(mask.data(), p, dy.data(), d[0].data(), n);
  };
  op.jvp = [=](const Ins&, const Ins& u) { return fwd(u[0]).first; };  // linear for a fixed mask
  check_op(op);

  // Keep rate ≈ 1 − p, kept values scaled by 1/(1 − p), independent of the thread count.
  const Index big = 1 << 18;
  std::vector<float> x(big, 1.0f), y1(big), y2(big);
  std::vector<std::uint8_t> m1(big), m2(big);
  Rng r1(11), r2(11);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::dropout_forward(x.data(), p, r1, y1.data(), m1.data(), big);
  omp_set_num_threads(2);
  cpu::dropout_forward(x.data(), p, r2, y2.data(), m2.data(), big);
  omp_set_num_threads(threads);
  CHECK(std::memcmp(y1.data(), y2.data(), big * sizeof(float)) == 0);
  double kept = 0;
  bool scaled = true;
  for (Index i = 0; i < big; ++i) {
    kept += m1[i];
    scaled = scaled && y1[i] == (m1[i] ? float(1 / (1 - p)) : 0.0f);
  }
  CHECK(scaled);
  CHECK(kept / big == Approx(1 - p).margin(0.005));
  // The Rng advanced: the next mask differs.
  cpu::dropout_forward(x.data(), p, r1, y2.data(), m2.data(), big);
  CHECK(m1 != m2);
}

TEST_CASE("elementwise: add, add_broadcast, mul, scale, sum", "[engine][ops]") {
  {
    OpCase op;
    op.name = "add";
    op.x = {random_vector(12), random_vector(12)};
    op.f = [](const Ins& in) {
      Vec y(12);
      cpu::add_forward(in[0].data(), in[1].data(), y.data(), 12);
      return y;
    };
    op.backward = [](const Ins&, const Vec& dy, Ins& d) { cpu::add_backward(dy.data(), d[0].data(), d[1].data(), 12); };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  {
    const Index R = 6, M = 8;  // x (2, 3, 4, 2) + p (4, 2)
    OpCase op;
    op.name = "add_broadcast";
    op.x = {random_vector(R * M), random_vector(M)};
    op.f = [=](const Ins& in) {
      Vec y(R * M);
      cpu::add_broadcast_forward(in[0].data(), in[1].data(), y.data(), R, M);
      return y;
    };
    op.backward = [=](const Ins&, const Vec& dy, Ins& d) {
      cpu::add_broadcast_backward(dy.data(), d[0].data(), d[1].data(), R, M);
    };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  {
    OpCase op;
    op.name = "mul";
    op.x = {random_vector(10), random_vector(10)};
    op.f = [](const Ins& in) {
      Vec y(10);
      cpu::mul_forward(in[0].data(), in[1].data(), y.data(), 10);
      return y;
    };
    op.backward = [](const Ins& in, const Vec& dy, Ins& d) {
      cpu::mul_backward(in[0].data(), in[1].data(), dy.data(), d[0].data(), d[1].data(), 10);
    };
    // Bilinear: J u = u_a ⊙ b + a ⊙ u_b.
    op.jvp = [&](const Ins& in, const Ins& u) { return add(op.f({u[0], in[1]}), op.f({in[0], u[1]})); };
    check_op(op);
  }
  {
    OpCase op;
    op.name = "scale";
    op.x = {random_vector(7)};
    op.f = [](const Ins& in) {
      Vec y(7);
      cpu::scale_forward(in[0].data(), 0.37, y.data(), 7);
      return y;
    };
    op.backward = [](const Ins&, const Vec& dy, Ins& d) { cpu::scale_backward(0.37, dy.data(), d[0].data(), 7); };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  {
    OpCase op;
    op.name = "sum";
    op.x = {random_vector(9)};
    op.f = [](const Ins& in) { return Vec{cpu::sum_forward(in[0].data(), 9)}; };
    op.backward = [](const Ins&, const Vec& dy, Ins& d) { cpu::sum_backward(dy[0], d[0].data(), 9); };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  {
    // sum adds blocks of 4096 values, then the blocks: two full blocks and a partial one, of integers (exact sums).
    const Index n = 2 * 4096 + 3;
    Vec x(n);
    double exact = 0;
    for (Index i = 0; i < n; ++i) x[i] = double(i % 17) - 8, exact += x[i];
    CHECK(cpu::sum_forward(x.data(), n) == exact);
  }
}

TEST_CASE("softmax cross-entropy: backward checks with and without label smoothing", "[engine][ops]") {
  const Index B = 4, K = 5;
  const std::vector<int> labels = {0, 3, 4, 1};
  for (double eps : {0.0, 0.1}) {
    OpCase op;
    op.name = "cross_entropy eps=" + std::to_string(eps);
    op.x = {random_vector(B * K, -3, 3)};
    op.f = [=](const Ins& in) {
      Vec probs(B * K);
      return Vec{cpu::softmax_cross_entropy_forward(in[0].data(), labels.data(), eps, probs.data(), nullptr, B, K)};
    };
    op.backward = [=](const Ins& in, const Vec& dy, Ins& d) {
      Vec probs(B * K);
      cpu::softmax_cross_entropy_forward(in[0].data(), labels.data(), eps, probs.data(), nullptr, B, K);
      cpu::softmax_cross_entropy_backward(probs.data(), labels.data(), eps, dy[0], d[0].data(), B, K);
    };
    op.jvp = [=](const Ins& in, const Ins& u) {
      auto z = duals(in[0], u[0]);
      std::vector<Dual> probs(B * K);
      return Vec{cpu::softmax_cross_entropy_forward(z.data(), labels.data(), eps, probs.data(), nullptr, B, K).d};
    };
    check_op(op);
  }
}

TEST_CASE("softmax cross-entropy: values match PyTorch's definition", "[engine][ops]") {
  // torch.nn.functional.cross_entropy([[1, 2, 3], [1, 1, 1]], [2, 0], label_smoothing=ε)
  const double z[] = {1, 2, 3, 1, 1, 1};
  const int y[] = {2, 0};
  double probs[6], rows[2];
  const double l0 = cpu::softmax_cross_entropy_forward(z, y, 0.0, probs, rows, Index(2), Index(3));
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(rows[0] == Approx(lse - 3).epsilon(1e-14));
  CHECK(rows[1] == Approx(std::log(3.0)).epsilon(1e-14));
  CHECK(l0 == Approx((lse - 3 + std::log(3.0)) / 2).epsilon(1e-14));
  const double l1 = cpu::softmax_cross_entropy_forward(z, y, 0.1, probs, rows, Index(2), Index(3));
  const double smooth0 = 0.9 * (lse - 3) + 0.1 / 3 * ((lse - 1) + (lse - 2) + (lse - 3));
  CHECK(rows[0] == Approx(smooth0).epsilon(1e-14));
  CHECK(l1 == Approx((smooth0 + std::log(3.0)) / 2).epsilon(1e-14));
  // Large logits do not overflow.
  const double big[] = {1000, 0, -1000};
  const int y0[] = {0};
  CHECK(cpu::softmax_cross_entropy_forward(big, y0, 0.0, probs, rows, Index(1), Index(3)) == Approx(0).margin(1e-12));
  const int bad[] = {3};
  CHECK_THROWS_WITH(cpu::softmax_cross_entropy_forward(big, bad, 0.0, probs, rows, Index(1), Index(3)),
                    Catch::Contains("label 3 of sample 0 is outside [0, 3)"));
}

namespace {
// The convolution by its definition: y[b, n, d] = bias[d] + Σ w[d, c, dt, dy, dx] x[b, c, t·tt+dt, h·p+dy, w·p+dx].
Vec conv_reference(const Vec& x, const Vec& w, const Vec& bias, const PatchGeometry& g, Index D) {
  const Index N = g.tokens();
  Vec y(g.B * N * D);
  for (Index b = 0; b < g.B; ++b)
    for (Index it = 0; it < g.nt(); ++it)
      for (Index ih = 0; ih < g.nh(); ++ih)
        for (Index iw = 0; iw < g.nw(); ++iw)
          for (Index d = 0; d < D; ++d) {
            double s = bias[d];
            for (Index c = 0; c < g.C; ++c)
              for (Index dt = 0; dt < g.tt; ++dt)
                for (Index dy = 0; dy < g.p; ++dy)
                  for (Index dx = 0; dx < g.p; ++dx)
                    s += w[(((d * g.C + c) * g.tt + dt) * g.p + dy) * g.p + dx] *
                         x[(((b * g.C + c) * g.T + it * g.tt + dt) * g.H + ih * g.p + dy) * g.W + iw * g.p + dx];
            y[((b * g.nt() + it) * g.nh() * g.nw() + ih * g.nw() + iw) * D + d] = s;
          }
  return y;
}
}  // namespace

TEST_CASE("patch embedding 2D and 3D: the convolution, and backward checks", "[engine][ops]") {
  PatchGeometry g2;  // images (2, 3, 4, 6), 2×2 patches: 2·3 = 6 tokens, K = 12
  g2.B = 2, g2.C = 3, g2.H = 4, g2.W = 6, g2.p = 2;
  PatchGeometry g3;  // videos (2, 2, 4, 4, 6), 2×2×2 tubelets: 2·2·3 = 12 tokens, K = 16
  g3.B = 2, g3.C = 2, g3.T = 4, g3.H = 4, g3.W = 6, g3.tt = 2, g3.p = 2;
  for (const auto& g : {g2, g3}) {
    const Index D = 5, M = g.B * g.tokens(), K = g.patch_size();
    auto fwd = [=](const Vec& x, const Vec& w, const Vec* b) {
      Vec y(M * D), scratch(M * K);
      cpu::patch_embed_forward(x.data(), w.data(), b ? b->data() : nullptr, scratch.data(), y.data(), g, D);
      return y;
    };
    OpCase op;
    op.name = g.T == 1 ? "patch_embed 2D" : "patch_embed 3D";
    op.x = {random_vector(g.input_size()), random_vector(D * K), random_vector(D)};
    CHECK(liere::test::max_rel_err(fwd(op.x[0], op.x[1], &op.x[2]), conv_reference(op.x[0], op.x[1], op.x[2], g, D)) <
          1e-14);
    op.f = [=](const Ins& in) { return fwd(in[0], in[1], &in[2]); };
    op.backward = [=](const Ins& in, const Vec& dy, Ins& d) {
      Vec scratch(M * K);
      cpu::patch_embed_backward(in[0].data(), in[1].data(), dy.data(), scratch.data(), d[0].data(), d[1].data(),
                                d[2].data(), g, D);
    };
    op.jvp = [=](const Ins& in, const Ins& u) { return add(fwd(u[0], in[1], nullptr), fwd(in[0], u[1], &u[2])); };
    check_op(op);
  }
  PatchGeometry bad = g2;
  bad.W = 5;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("not a multiple of the tubelet"));
}

TEST_CASE("tokens: prepend, select, mean", "[engine][ops]") {
  const Index B = 2, N = 3, D = 4, T = N + 1;
  {
    OpCase op;
    op.name = "prepend_token";
    op.x = {random_vector(B * N * D), random_vector(D)};
    op.f = [=](const Ins& in) {
      Vec y(B * T * D);
      cpu::prepend_token_forward(in[0].data(), in[1].data(), y.data(), B, N, D);
      return y;
    };
    op.backward = [=](const Ins&, const Vec& dy, Ins& d) {
      cpu::prepend_token_backward(dy.data(), d[0].data(), d[1].data(), B, N, D);
    };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  for (Index t : {Index(0), Index(2)}) {
    OpCase op;
    op.name = "select_token " + std::to_string(t);
    op.x = {random_vector(B * T * D)};
    op.f = [=](const Ins& in) {
      Vec y(B * D);
      cpu::select_token_forward(in[0].data(), y.data(), B, T, D, t);
      return y;
    };
    op.backward = [=](const Ins&, const Vec& dy, Ins& d) { cpu::select_token_backward(dy.data(), d[0].data(), B, T, D, t); };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
  for (Index t0 : {Index(0), Index(1)}) {
    OpCase op;
    op.name = "mean_tokens from " + std::to_string(t0);
    op.x = {random_vector(B * T * D)};
    op.f = [=](const Ins& in) {
      Vec y(B * D);
      cpu::mean_tokens_forward(in[0].data(), y.data(), B, T, D, t0);
      return y;
    };
    op.backward = [=](const Ins&, const Vec& dy, Ins& d) { cpu::mean_tokens_backward(dy.data(), d[0].data(), B, T, D, t0); };
    op.jvp = [&](const Ins&, const Ins& u) { return op.f(u); };
    check_op(op);
  }
}

namespace {
// Every transpose combination and beta of a double product on backend `be` against a naive product.
void check_gemm_double(cpu::GemmBackend be) {
  const auto backend = cpu::gemm_backend();
  for (Index M : {Index(7), Index(300)})  // 300 × 260 × 40: large enough to be cut into slabs per thread
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (double beta : {0.0, 1.0, -0.5}) {
        REQUIRE(cpu::set_gemm_backend(be));
        const Index N = M == 7 ? 5 : 260, K = M == 7 ? 3 : 40;
        // Stored with padding (leading dimensions larger than the rows).
        const Index lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
        Vec a = random_vector((ta ? K : M) * lda), b = random_vector((tb ? N : K) * ldb), c = random_vector(M * ldc);
        Vec ref = c;
        for (Index i = 0; i < M; ++i)
          for (Index j = 0; j < N; ++j) {
            double s = 0;
            for (Index k = 0; k < K; ++k) s += (ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
            ref[i * ldc + j] = 1.5 * s + (beta == 0 ? 0.0 : beta * c[i * ldc + j]);
          }
        if (beta == 0)
          for (Index i = 0; i < M; ++i)
            for (Index j = 0; j < N; ++j) c[i * ldc + j] = std::nan("");  // beta = 0 never reads C
        cpu::gemm<double>(ta, tb, M, N, K, 1.5, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        INFO(cpu::gemm_backend_name() << " M " << M << " trans_a " << ta << " trans_b " << tb << " beta " << beta);
        CHECK(liere::test::max_rel_err(c, ref) < 1e-13);
      }
  cpu::set_gemm_backend(backend);
}
}  // namespace

TEST_CASE("gemm: every transpose combination and beta against a naive product, Eigen", "[engine][ops]") {
  check_gemm_double(cpu::GemmBackend::Eigen);
}

TEST_CASE("gemm: every transpose combination and beta against a naive product, OpenBLAS (cblas_dgemm)",
          "[engine][ops][needs-openblas]") {
  if (!cpu::detail::gemm_backend_available(cpu::GemmBackend::OpenBLAS))
    LIERE_SKIP("libopenblas.so.0 cannot be loaded (Debian: libopenblas0)");
  check_gemm_double(cpu::GemmBackend::OpenBLAS);
}

TEST_CASE("float kernels on large inputs agree with double; reductions are thread-count independent",
          "[engine][ops]") {
  const Index N = 3000, C = 96, OC = 64;  // several OpenMP chunks
  std::vector<float> x(N * C), g(C), b(C), dy(N * C), w(OC * C);
  for (auto* v : {&x, &dy, &w}) for (auto& e : *v) e = float(liere::test::uniform(-1, 1));
  for (Index i = 0; i < C; ++i) g[i] = float(liere::test::uniform(0.5, 1.5)), b[i] = float(liere::test::uniform(-1, 1));
  Vec xd(x.begin(), x.end()), gd(g.begin(), g.end()), bd(b.begin(), b.end()), dyd(dy.begin(), dy.end());

  auto run_ln = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C, 0.f), dg(C, 0.f), db(C, 0.f);
    cpu::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C);
    cpu::layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(), db.data(),
                            std::vector<float>(cpu::layernorm_backward_scratch(N, C)).data(), N, C);
    return std::vector<std::vector<float>>{y, dx, dg, db};
  };
  const int threads = omp_get_max_threads();
  const auto one = run_ln(1), two = run_ln(2);
  omp_set_num_threads(threads);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(one[i] == two[i]);  // bit-identical

  Vec y(N * C), mean(N), rstd(N), dx(N * C, 0.0), dg(C, 0.0), db(C, 0.0);
  cpu::layernorm_forward(xd.data(), gd.data(), bd.data(), y.data(), mean.data(), rstd.data(), N, C);
  cpu::layernorm_backward(xd.data(), gd.data(), mean.data(), rstd.data(), dyd.data(), dx.data(), dg.data(), db.data(),
                          Vec(cpu::layernorm_backward_scratch(N, C)).data(), N, C);
  CHECK(liere::test::max_rel_err(Vec(one[0].begin(), one[0].end()), y) < 1e-5);
  CHECK(liere::test::max_rel_err(Vec(one[1].begin(), one[1].end()), dx) < 1e-5);
  // dg and db are float sums over N = 3000 rows, whose terms cancel: their rounding error is bounded relative to
  // the sum of the terms' magnitudes (|dy·x̂| and |dy|), not to the (smaller) result.
  for (Index c = 0; c < C; ++c) {
    double mag_g = 0, mag_b = 0;
    for (Index n = 0; n < N; ++n) {
      mag_g += std::abs(dyd[n * C + c] * (xd[n * C + c] - mean[n]) * rstd[n]);
      mag_b += std::abs(dyd[n * C + c]);
    }
    INFO("column " << c);
    CHECK(std::abs(one[2][c] - dg[c]) <= 1e-6 * mag_g);
    CHECK(std::abs(one[3][c] - db[c]) <= 1e-6 * mag_b);
  }

  // Bias gradient (column sums) with 1 and 2 threads.
  std::vector<float> s1(C, 0.f), s2(C, 0.f);
  omp_set_num_threads(1);
  cpu::colsum_accumulate(dy.data(), N, C, C, s1.data());
  omp_set_num_threads(2);
  cpu::colsum_accumulate(dy.data(), N, C, C, s2.data());
  omp_set_num_threads(threads);
  CHECK(s1 == s2);
  // ... and the column sums themselves: the 3000 rows are 94 chunks of 32, spread over every lane of the finish.
  for (Index c = 0; c < C; ++c) {
    double ref = 0, mag = 0;
    for (Index n = 0; n < N; ++n) ref += dyd[n * C + c], mag += std::abs(dyd[n * C + c]);
    INFO("column " << c);
    CHECK(std::abs(s1[c] - ref) <= 1e-6 * mag);
  }

  // Linear in float against double.
  std::vector<float> yl(N * OC), bl(OC, 0.1f);
  cpu::linear_forward(x.data(), w.data(), bl.data(), yl.data(), N, C, OC);
  Vec wd(w.begin(), w.end()), bld(OC, double(0.1f)), yld(N * OC);
  cpu::linear_forward(xd.data(), wd.data(), bld.data(), yld.data(), N, C, OC);
  CHECK(liere::test::max_rel_err(Vec(yl.begin(), yl.end()), yld) < 1e-5);
}

TEST_CASE("overwrite mode (fresh gradient buffers) writes exactly what accumulating into zeros gives", "[engine][ops]") {
  const Index N = 40, C = 8, OC = 6, n = N * C;
  const double nan = std::nan("");
  Vec x = random_vector(n), w = random_vector(OC * C), dy = random_vector(N * OC), dyn = random_vector(n);
  {
    Vec acc(n, 0.0), over(n, nan);
    cpu::linear_backward(x.data(), w.data(), dy.data(), acc.data(), nullptr, nullptr, N, C, OC);
    cpu::linear_backward(x.data(), w.data(), dy.data(), over.data(), nullptr, nullptr, N, C, OC, true);
    CHECK(acc == over);
  }
  {
    Vec acc(n, 0.0), over(n, nan);
    cpu::gelu_backward(x.data(), dyn.data(), acc.data(), n);
    cpu::gelu_backward(x.data(), dyn.data(), over.data(), n, true);
    CHECK(acc == over);
    // float: Eigen's vectorised path peels unaligned heads with scalar code (rounded differently), so use
    // 64-byte aligned tensors from the pool, as the engine does.
    Tensor xf(Shape{n}), dyf(Shape{n}), accf = Tensor::zeros({n}), overf = Tensor::full({n}, NAN);
    for (Index i = 0; i < n; ++i) xf(i) = float(x[i]), dyf(i) = float(dyn[i]);
    cpu::gelu_backward(xf.data(), dyf.data(), accf.data(), n);
    cpu::gelu_backward(xf.data(), dyf.data(), overf.data(), n, true);
    CHECK(accf.to_vector() == overf.to_vector());
  }
  {
    std::vector<std::uint8_t> mask(n);
    Vec y(n), acc(n, 0.0), over(n, nan);
    Rng rng(3);
    cpu::dropout_forward(x.data(), 0.4, rng, y.data(), mask.data(), n);
    cpu::dropout_backward(mask.data(), 0.4, dyn.data(), acc.data(), n);
    cpu::dropout_backward(mask.data(), 0.4, dyn.data(), over.data(), n, true);
    CHECK(acc == over);
  }
  {
    Vec a0(n, 0.0), b0(n, 0.0), a1(n, nan), b1(n, nan);
    cpu::add_backward(dyn.data(), a0.data(), b0.data(), n);
    cpu::add_backward(dyn.data(), a1.data(), b1.data(), n, true, true);
    CHECK(a0 == a1);
    CHECK(b0 == b1);
    Vec same(n, nan);  // add(x, x): one buffer, fresh for the first use only
    cpu::add_backward(dyn.data(), same.data(), same.data(), n, true, false);
    for (Index i = 0; i < n; ++i) REQUIRE(same[i] == 2 * dyn[i]);
  }
}
