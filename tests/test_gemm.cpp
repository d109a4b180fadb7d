// The GEMM backends (backend/cpu/gemm.hpp): Eigen, and oneDNN and OpenBLAS (test cases tagged [needs-dnnl] and
// [needs-openblas]: CTest entries test_gemm:dnnl and test_gemm:openblas, Skipped where the library does not load)
// against Eigen and against a double reference on random shapes, every transpose combination, padded leading
// dimensions, alpha/beta (beta = 0 with NaN in C: C is never read), inside and outside a parallel region; and the
// LIERE_GEMM switch.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <liere/backend/cpu/gemm.hpp>
#include <omp.h>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "skip.hpp"

namespace cpu = liere::cpu;
using liere::Index;

namespace {

struct Case {
  Index M, N, K, lda, ldb, ldc;
  bool ta, tb;
  float alpha, beta;
  std::vector<float> a, b, c0;
};

Case random_case(std::mt19937_64& g, Index max_dim) {
  std::uniform_int_distribution<Index> dim(1, max_dim), pad(0, 5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Case c;
  c.M = dim(g), c.N = dim(g), c.K = dim(g);
  c.ta = g() & 1, c.tb = g() & 1;
  c.lda = (c.ta ? c.M : c.K) + pad(g), c.ldb = (c.tb ? c.K : c.N) + pad(g), c.ldc = c.N + pad(g);
  const float alphas[] = {1.f, -0.75f, 2.5f}, betas[] = {0.f, 1.f, -0.5f};
  c.alpha = alphas[g() % 3], c.beta = betas[g() % 3];
  c.a.resize(std::size_t((c.ta ? c.K : c.M) * c.lda));
  c.b.resize(std::size_t((c.tb ? c.N : c.K) * c.ldb));
  c.c0.resize(std::size_t(c.M * c.ldc));
  for (std::vector<float>* v : {&c.a, &c.b, &c.c0})
    for (float& x : *v) x = u(g);
  if (c.beta == 0.f)  // beta = 0 never reads C
    for (Index i = 0; i < c.M; ++i)
      for (Index j = 0; j < c.N; ++j) c.c0[std::size_t(i * c.ldc + j)] = std::nanf("");
  return c;
}

// C of the case with the current backend (the padding of C must stay untouched).
std::vector<float> run(const Case& c, bool in_parallel_region) {
  std::vector<float> out = c.c0;
  auto call = [&] {
    cpu::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, c.a.data(), c.lda, c.b.data(), c.ldb, c.beta, out.data(),
                     c.ldc);
  };
  if (in_parallel_region) {
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      call();
    }
  } else {
    call();
  }
  return out;
}

// The exact (double) value of C(i, j) and the bound (K + 2)·u·(|α| Σ_k |a||b| + |β| |c0|) (u = 2⁻²⁴) on the error
// of any float GEMM that sums in float (the classical γ_K bound), whatever its blocking.
std::pair<double, double> reference(const Case& c, Index i, Index j) {
  double s = 0, s_abs = 0;
  for (Index k = 0; k < c.K; ++k) {
    const double x = c.ta ? c.a[std::size_t(k * c.lda + i)] : c.a[std::size_t(i * c.lda + k)];
    const double y = c.tb ? c.b[std::size_t(j * c.ldb + k)] : c.b[std::size_t(k * c.ldb + j)];
    s += x * y;
    s_abs += std::abs(x * y);
  }
  const double c0 = c.beta == 0.f ? 0.0 : c.c0[std::size_t(i * c.ldc + j)];
  return {c.alpha * s + c.beta * c0,
          (double(c.K) + 2) * std::ldexp(1.0, -24) * (std::abs(c.alpha) * s_abs + std::abs(c.beta) * std::abs(c0)) +
              1e-30};
}

// Max over C of |out − ref| / bound (≤ 1 for a correct float GEMM; infinite for a NaN); with other given, of
// |out − other| / (2·bound) (two results that both meet the bound differ by at most twice it).
double max_units(const Case& c, const std::vector<float>& out, const std::vector<float>* other = nullptr) {
  double worst = 0;
  for (Index i = 0; i < c.M; ++i)
    for (Index j = 0; j < c.N; ++j) {
      const auto [ref, bound] = reference(c, i, j);
      const std::size_t at = std::size_t(i * c.ldc + j);
      const double got = out[at], e = other ? std::abs(got - (*other)[at]) / (2 * bound) : std::abs(got - ref) / bound;
      worst = std::max(worst, std::isfinite(got) ? e : HUGE_VAL);
    }
  return worst;
}

bool padding_untouched(const Case& c, const std::vector<float>& out) {
  for (Index i = 0; i < c.M; ++i)
    for (Index j = c.N; j < c.ldc; ++j) {
      const float a = out[std::size_t(i * c.ldc + j)], b = c.c0[std::size_t(i * c.ldc + j)];
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) return false;
    }
  return true;
}

}  // namespace

namespace {

// 120 random cases (both outside and inside a parallel region) on backend b: against the double reference, the
// padding of C untouched, and against Eigen's result; then K = 0, which only scales C by beta.
void check_backend(cpu::GemmBackend b) {
  const cpu::GemmBackend saved = cpu::gemm_backend();
  std::mt19937_64 g(20261124);
  int cases = 0;
  for (int rep = 0; rep < 120; ++rep) {
    // Mostly small and odd shapes; every fourth one large enough to be cut into slabs per thread.
    const Case c = random_case(g, rep % 4 == 3 ? 300 : 70);
    for (bool par : {false, true}) {
      REQUIRE(cpu::set_gemm_backend(cpu::GemmBackend::Eigen));
      const std::vector<float> eigen = run(c, par);
      INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << c.ta << " tb " << c.tb << " lda " << c.lda
                << " ldb " << c.ldb << " ldc " << c.ldc << " alpha " << c.alpha << " beta " << c.beta
                << " in a parallel region " << par);
      CHECK(max_units(c, eigen) <= 1.0);
      CHECK(padding_untouched(c, eigen));
      if (b == cpu::GemmBackend::Eigen) {
        ++cases;
        continue;
      }
      REQUIRE(cpu::set_gemm_backend(b));
      REQUIRE(cpu::gemm_backend() == b);
      const std::vector<float> out = run(c, par);
      INFO(cpu::gemm_backend_name(b));
      CHECK(max_units(c, out) <= 1.0);
      CHECK(padding_untouched(c, out));
      CHECK(max_units(c, out, &eigen) <= 1.0);  // against Eigen's result
      ++cases;
    }
  }
  CHECK(cases == 2 * 120);

  REQUIRE(cpu::set_gemm_backend(b));
  std::vector<float> c = {1, 2, 3, 4, 5, 6}, a(1), bb(1);
  cpu::gemm<float>(false, false, 2, 3, 0, 1.f, a.data(), 1, bb.data(), 3, 0.5f, c.data(), 3);
  CHECK(c == std::vector<float>{0.5f, 1.f, 1.5f, 2.f, 2.5f, 3.f});
  // K = 0 with beta = 0 writes zeros and never reads C (NaN there), leaving the padding of C alone.
  const float nan = std::nanf("");
  c = {nan, nan, nan, 7.f, nan, nan, nan, 7.f};  // (2, 3) with ldc = 4
  cpu::gemm<float>(false, false, 2, 3, 0, 1.f, a.data(), 1, bb.data(), 3, 0.f, c.data(), 4);
  CHECK(c == std::vector<float>{0.f, 0.f, 0.f, 7.f, 0.f, 0.f, 0.f, 7.f});
  cpu::set_gemm_backend(saved);
}

}  // namespace

TEST_CASE("gemm: Eigen against a double reference on random shapes; K = 0 scales C by beta", "[gemm]") {
  check_backend(cpu::GemmBackend::Eigen);
}

TEST_CASE("gemm: oneDNN agrees with Eigen and with a double reference on random shapes; K = 0",
          "[gemm][needs-dnnl]") {
  if (!cpu::detail::gemm_backend_available(cpu::GemmBackend::Dnnl))
    LIERE_SKIP("libdnnl.so.2 cannot be loaded (Debian: libdnnl2)");
  check_backend(cpu::GemmBackend::Dnnl);
}

TEST_CASE("gemm: OpenBLAS agrees with Eigen and with a double reference on random shapes; K = 0",
          "[gemm][needs-openblas]") {
  if (!cpu::detail::gemm_backend_available(cpu::GemmBackend::OpenBLAS))
    LIERE_SKIP("libopenblas.so.0 cannot be loaded (Debian: libopenblas0)");
  check_backend(cpu::GemmBackend::OpenBLAS);
}

TEST_CASE("gemm: LIERE_GEMM picks the backend; an unknown name or a missing library is an error", "[gemm]") {
  const char* old = std::getenv("LIERE_GEMM");
  const std::string saved = old ? old : "";
  auto pick = [](const char* v) {
    if (v) setenv("LIERE_GEMM", v, 1);
    else unsetenv("LIERE_GEMM");
    return cpu::detail::gemm_backend_from_env();
  };
  CHECK(pick("eigen") == cpu::GemmBackend::Eigen);
  // Default: oneDNN where it loads (float products), else Eigen.
  CHECK(pick(nullptr) ==
        (cpu::detail::gemm_backend_available(cpu::GemmBackend::Dnnl) ? cpu::GemmBackend::Dnnl : cpu::GemmBackend::Eigen));
  CHECK(pick("") == pick(nullptr));
  // A library named explicitly is used when it loads, and is an error naming it and its package when it does not
  // (docs/testing.md, "Skips", shows both sides by hiding the library).
  if (cpu::detail::gemm_backend_available(cpu::GemmBackend::Dnnl)) CHECK(pick("dnnl") == cpu::GemmBackend::Dnnl);
  else CHECK_THROWS_WITH(pick("dnnl"), Catch::Contains("LIERE_GEMM=dnnl: libdnnl.so.2 (Debian: libdnnl2) cannot be loaded"));
  if (cpu::detail::gemm_backend_available(cpu::GemmBackend::OpenBLAS))
    CHECK(pick("openblas") == cpu::GemmBackend::OpenBLAS);
  else
    CHECK_THROWS_WITH(pick("openblas"),
                      Catch::Contains("LIERE_GEMM=openblas: libopenblas.so.0 (Debian: libopenblas0) cannot be loaded"));
  // "onednn" is another name for oneDNN.
  if (cpu::detail::gemm_backend_available(cpu::GemmBackend::Dnnl)) CHECK(pick("onednn") == cpu::GemmBackend::Dnnl);
  CHECK_THROWS_WITH(pick("mkl"), Catch::Contains("expected one of eigen, dnnl, openblas"));
  if (old) setenv("LIERE_GEMM", saved.c_str(), 1);
  else unsetenv("LIERE_GEMM");
}

TEST_CASE("gemm: double products stay on Eigen under oneDNN", "[gemm][needs-dnnl]") {
  const cpu::GemmBackend saved = cpu::gemm_backend();
  if (!cpu::set_gemm_backend(cpu::GemmBackend::Dnnl)) LIERE_SKIP("libdnnl.so.2 cannot be loaded (Debian: libdnnl2)");
  // 3 × 3 identity times B: exact in any order of summation, in double.
  std::vector<double> a = {1, 0, 0, 0, 1, 0, 0, 0, 1}, b = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}, c(9);
  cpu::gemm<double>(false, false, 3, 3, 3, 1.0, a.data(), b.data(), 0.0, c.data());
  CHECK(c == b);
  cpu::set_gemm_backend(saved);
}

namespace {

// The dense shorthand (leading dimensions = the stored row lengths) for every transpose combination, on a
// non-square product of small integers: exact in float and double whatever the order of summation, so the result
// must equal the double reference bit for bit. With M, N, K all different, a leading dimension taken from the wrong
// dimension reads the wrong elements (or is refused).
template <class S>
void check_dense_shorthand() {
  const Index M = 3, N = 5, K = 4;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << " trans_b " << tb);
      std::vector<S> a(std::size_t(M * K)), b(std::size_t(K * N)), c(std::size_t(M * N));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = S(int(i * 7 % 9) - 4);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = S(int(i * 5 % 7) - 3);
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = S(int(i % 5) - 2);
      const std::vector<S> c0 = c;
      cpu::gemm<S>(ta, tb, M, N, K, S(2), a.data(), b.data(), S(-1), c.data());
      int wrong = 0;
      for (Index i = 0; i < M; ++i)
        for (Index j = 0; j < N; ++j) {
          double s = 0;
          for (Index k = 0; k < K; ++k)
            s += double(ta ? a[std::size_t(k * M + i)] : a[std::size_t(i * K + k)]) *
                 double(tb ? b[std::size_t(j * K + k)] : b[std::size_t(k * N + j)]);
          wrong += double(c[std::size_t(i * N + j)]) != 2 * s - double(c0[std::size_t(i * N + j)]);
        }
      CHECK(wrong == 0);
    }
}

}  // namespace

TEST_CASE("gemm: the dense shorthand takes the leading dimensions from the stored shapes, every transpose", "[gemm]") {
  check_dense_shorthand<float>();
  check_dense_shorthand<double>();
}

TEST_CASE("gemm: leading dimensions smaller than the stored rows are refused", "[gemm]") {
  // A (2, 3), B (3, 4), C (2, 4): lda ≥ 3, ldb ≥ 4, ldc ≥ 4 (lda ≥ 2 when A is stored transposed, (3, 2)).
  std::vector<float> a(12), b(16), c(8);
  auto call = [&](bool ta, Index lda, Index ldb, Index ldc) {
    cpu::gemm<float>(ta, false, 2, 4, 3, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc);
  };
  CHECK_NOTHROW(call(false, 3, 4, 4));
  CHECK_NOTHROW(call(true, 2, 4, 4));
  CHECK_THROWS_WITH(call(false, 2, 4, 4), Catch::Contains("leading dimensions (2, 4, 4) too small"));
  CHECK_THROWS_WITH(call(true, 1, 4, 4), Catch::Contains("leading dimensions (1, 4, 4) too small"));
  CHECK_THROWS_WITH(call(false, 3, 3, 4), Catch::Contains("too small"));
  CHECK_THROWS_WITH(call(false, 3, 4, 3), Catch::Contains("too small"));
}
