// tests/test_interpolation.cpp — GridInterpolation: identity on an unchanged grid (bit for bit), agreement with
// PyTorch's F.interpolate (tests/data/interpolation_reference.bin, written by make_interpolation_reference.py),
// the adjoint identity for apply_backward, constants preserved, and the errors.
// G_in / G_out source / destination grid points, C channels.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <liere/pe/interpolation.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

using liere::GridInterpolation;
using namespace liere::test;

namespace {

int prod(const std::vector<int>& s) { return std::accumulate(s.begin(), s.end(), 1, std::multiplies<int>()); }

std::string shape_name(const std::vector<int>& in, const std::vector<int>& out) {
  std::ostringstream os;
  for (std::size_t i = 0; i < in.size(); ++i) os << (i ? "x" : "") << in[i];
  os << " -> ";
  for (std::size_t i = 0; i < out.size(); ++i) os << (i ? "x" : "") << out[i];
  return os.str();
}

// One case of the PyTorch reference file; buffers converted to liere's (G, C) layout.
struct ReferenceCase {
  std::vector<int> in, out;
  int channels = 0;
  std::vector<float> x;     // (G_in, C)
  std::vector<float> y32;   // (G_out, C)  PyTorch, float32
  std::vector<double> y64;  // (G_out, C)  PyTorch, float64
};

template <class T>
T read_pod(std::ifstream& f) {
  T v;
  f.read(reinterpret_cast<char*>(&v), sizeof(T));
  REQUIRE(f.good());
  return v;
}

// (C, G) as stored by PyTorch → (G, C).
template <class T>
std::vector<T> read_transposed(std::ifstream& f, int C, int G) {
  std::vector<T> cg(std::size_t(C) * G), gc(cg.size());
  f.read(reinterpret_cast<char*>(cg.data()), std::streamsize(cg.size() * sizeof(T)));
  REQUIRE(f.good());
  for (int c = 0; c < C; ++c)
    for (int g = 0; g < G; ++g) gc[std::size_t(g) * C + c] = cg[std::size_t(c) * G + g];
  return gc;
}

std::vector<ReferenceCase> read_reference() {
  static_assert(sizeof(float) == 4 && sizeof(double) == 8);
  const std::string path = LIERE_TEST_DATA_DIR "/interpolation_reference.bin";
  std::ifstream f(path, std::ios::binary);
  INFO(path);
  REQUIRE(f.is_open());
  char magic[8];
  f.read(magic, 8);
  REQUIRE(std::memcmp(magic, "LIEREINT", 8) == 0);
  REQUIRE(read_pod<std::uint32_t>(f) == 1);
  const auto n = read_pod<std::uint32_t>(f);
  std::vector<ReferenceCase> cases(n);
  for (auto& rc : cases) {
    const int dims = int(read_pod<std::uint32_t>(f));
    REQUIRE((dims >= 1 && dims <= 3));
    rc.channels = int(read_pod<std::uint32_t>(f));
    for (int d = 0; d < dims; ++d) rc.in.push_back(int(read_pod<std::uint32_t>(f)));
    for (int d = 0; d < dims; ++d) rc.out.push_back(int(read_pod<std::uint32_t>(f)));
    rc.x = read_transposed<float>(f, rc.channels, prod(rc.in));
    rc.y32 = read_transposed<float>(f, rc.channels, prod(rc.out));
    rc.y64 = read_transposed<double>(f, rc.channels, prod(rc.out));
  }
  f.peek();
  REQUIRE(f.eof());  // nothing left over: the format was read as written
  return cases;
}

const std::vector<std::vector<int>> kGrids1 = {{1}, {5}, {9}, {16}};
const std::vector<std::vector<int>> kGrids2 = {{1, 1}, {4, 4}, {7, 3}, {14, 14}, {1, 9}};
const std::vector<std::vector<int>> kGrids3 = {{1, 1, 1}, {2, 4, 4}, {3, 5, 2}, {4, 6, 6}};

// Pairs of grids of every dimension: up, down, mixed, unchanged axes.
std::vector<std::pair<std::vector<int>, std::vector<int>>> grid_pairs() {
  std::vector<std::pair<std::vector<int>, std::vector<int>>> p;
  for (const auto* grids : {&kGrids1, &kGrids2, &kGrids3})
    for (const auto& a : *grids)
      for (const auto& b : *grids) p.emplace_back(a, b);
  return p;
}

}  // namespace

TEMPLATE_TEST_CASE("GridInterpolation is exactly the identity on an unchanged grid", "[interpolation]", float,
                   double) {
  std::vector<std::vector<int>> grids = {{1}, {7}, {196}, {1, 1}, {4, 4}, {14, 14}, {3, 9},
                                         {32, 32}, {1, 1, 1}, {2, 4, 4}, {8, 8, 8}, {3, 5, 7}};
  for (const auto& g : grids) {
    const auto w = GridInterpolation::for_grids(g, g);
    INFO(shape_name(g, g));
    REQUIRE(w.is_identity());
    REQUIRE(w.rows() == prod(g));
    REQUIRE(w.cols() == prod(g));
    const int C = 5;
    std::vector<TestType> x(std::size_t(prod(g)) * C);
    for (auto& v : x) v = TestType(normal() * 1e3);  // any values, any magnitude
    std::vector<TestType> y(x.size(), TestType(7));
    w.apply(x.data(), y.data(), C);
    REQUIRE(std::memcmp(x.data(), y.data(), x.size() * sizeof(TestType)) == 0);  // bit for bit
    std::vector<TestType> dx(x.size(), TestType(0));
    w.apply_backward(x.data(), dx.data(), C);
    REQUIRE(std::memcmp(x.data(), dx.data(), x.size() * sizeof(TestType)) == 0);
  }
  // The per-mode constructors too, and the PyTorch formulas themselves give exact weights there: the same
  // grid with one axis changed keeps exact 1.0 weights along the unchanged axis.
  REQUIRE(GridInterpolation::linear1d(6, 6).is_identity());
  REQUIRE(GridInterpolation::bicubic(5, 8, 5, 8).is_identity());
  REQUIRE(GridInterpolation::trilinear(2, 3, 4, 2, 3, 4).is_identity());
  REQUIRE_FALSE(GridInterpolation::bicubic(5, 8, 5, 9).is_identity());
  REQUIRE_FALSE(GridInterpolation::linear1d(5, 6).is_identity());
}

TEST_CASE("GridInterpolation: destination points on source points copy them exactly", "[interpolation]") {
  // n → 3n points: destination 3k + 1 sits exactly on source k (src = k, t = 0), whatever the compiler does
  // with scale·(dst + 0.5) − 0.5: the row is one weight of exactly 1.0.
  for (int n : {1, 2, 4, 7}) {
    INFO("n = " << n);
    for (const auto& w : {GridInterpolation::linear1d(n, 3 * n), GridInterpolation::bicubic(n, n, 3 * n, 3 * n),
                          GridInterpolation::trilinear(n, n, n, 3 * n, 3 * n, 3 * n)}) {
      const int dims = int(w.in_shape().size());
      for (int k = 0; k < n; ++k) {
        int r = 0, c = 0;  // destination (3k+1, ..., 3k+1) and source (k, ..., k)
        for (int d = 0; d < dims; ++d) {
          r = r * 3 * n + 3 * k + 1;
          c = c * n + k;
        }
        REQUIRE(w.row_ptr()[r + 1] - w.row_ptr()[r] == 1);
        REQUIRE(w.col_idx()[w.row_ptr()[r]] == c);
        REQUIRE(w.weights()[w.row_ptr()[r]] == 1.0);
      }
    }
  }
}

TEST_CASE("GridInterpolation matches PyTorch's F.interpolate(align_corners=False)", "[interpolation]") {
  const auto cases = read_reference();
  REQUIRE(cases.size() >= 10);
  for (const auto& rc : cases) {
    INFO(shape_name(rc.in, rc.out) << ", " << rc.channels << " channels");
    const auto w = GridInterpolation::for_grids(rc.in, rc.out);
    REQUIRE(w.cols() == prod(rc.in));
    REQUIRE(w.rows() == prod(rc.out));
    const int C = rc.channels;

    // float64, on the same float32-representable inputs: PyTorch evaluates the same formulas in double; only
    // rounding differs (we take src exactly, PyTorch rounds scale·(dst + 0.5) first, and the summation order).
    // This is the sharp check of the formulas (measured ≤ 3e-15).
    std::vector<double> x64(rc.x.begin(), rc.x.end()), y64(std::size_t(w.rows()) * C);
    w.apply(x64.data(), y64.data(), C);
    double e64 = 0;
    for (std::size_t i = 0; i < y64.size(); ++i) raise_error(e64, rel_err(y64[i], rc.y64[i]));
    CHECK(e64 < 1e-13);

    // float32, as PyTorch ran it (inputs in [-1, 1], so rel_err is an absolute error here). Our float path
    // uses double weights and double sums and rounds once (≤ 6e-8); the difference is PyTorch's float32
    // arithmetic:
    //  * linear/trilinear: λ = src − ⌊src⌋ and ≤ 8 products summed in float32, a few ulps: 1e-6 (measured
    //    ≤ 3e-7);
    //  * bicubic: PyTorch evaluates Keys' polynomials in float32, where terms up to |8A| = 6 cancel to weights
    //    near 0, so each float32 weight is off by up to ~ulp(4) = 4.8e-7 (measured on the 8 → 14 weights: 4.7e-7,
    //    Σ|Δw| per row 1.2e-6). The 2D error is ≲ Σ|Δw_y|·Σ|w_x| + Σ|w_y|·Σ|Δw_x| ≤ 2 · 1.2e-6 · 1.375
    //    ≈ 3.3e-6, hence 4e-6 (measured 1.1e-6 on 8×8 → 14×14). A wrong offset, kernel constant or border
    //    rule shows at 1e-3 or more in either precision.
    const double tol32 = rc.in.size() == 2 ? 4e-6 : 1e-6;
    std::vector<float> y32(std::size_t(w.rows()) * C);
    w.apply(rc.x.data(), y32.data(), C);
    double e32 = 0;
    for (std::size_t i = 0; i < y32.size(); ++i) raise_error(e32, rel_err(y32[i], rc.y32[i]));
    CHECK(e32 < tol32);
  }
}

TEST_CASE("GridInterpolation::apply_backward is the adjoint of apply and accumulates", "[interpolation]") {
  for (const auto& [in, out] : grid_pairs()) {
    INFO(shape_name(in, out));
    const auto w = GridInterpolation::for_grids(in, out);
    const int C = 3;
    const auto x = random_vector(std::size_t(w.cols()) * C);  // (G_in, C)
    const auto y = random_vector(std::size_t(w.rows()) * C);  // (G_out, C)
    std::vector<double> wx(y.size());
    w.apply(x.data(), wx.data(), C);
    std::vector<double> wty(x.size(), 0.0);
    w.apply_backward(y.data(), wty.data(), C);
    CHECK(rel_err(dot(wx, y), dot(x, wty)) < 1e-12);

    // Against the dense matrix: apply is W·x, apply_backward is Wᵀ·y.
    const auto m = w.dense();  // (G_out, G_in)
    double ef = 0, eb = 0;
    for (int r = 0; r < w.rows(); ++r)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int j = 0; j < w.cols(); ++j) s += m[std::size_t(r) * w.cols() + j] * x[std::size_t(j) * C + c];
        raise_error(ef, rel_err(s, wx[std::size_t(r) * C + c]));
      }
    for (int j = 0; j < w.cols(); ++j)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int r = 0; r < w.rows(); ++r) s += m[std::size_t(r) * w.cols() + j] * y[std::size_t(r) * C + c];
        raise_error(eb, rel_err(s, wty[std::size_t(j) * C + c]));
      }
    CHECK(ef < 1e-14);
    CHECK(eb < 1e-14);

    // Accumulates: starting from g gives g + Wᵀy.
    const auto g = random_vector(x.size());
    auto acc = g;
    w.apply_backward(y.data(), acc.data(), C);
    double ea = 0;
    for (std::size_t i = 0; i < acc.size(); ++i) raise_error(ea, rel_err(acc[i], g[i] + wty[i]));
    CHECK(ea < 1e-15);

    // apply overwrites (whatever out held before).
    std::vector<double> again(y.size(), 1e300);
    w.apply(x.data(), again.data(), C);
    CHECK(again == wx);
  }
}

TEST_CASE("GridInterpolation: central differences of a loss through apply", "[interpolation]") {
  // L(x) = Σ v ⊙ (W x)²: dL/dx = Wᵀ (2 v ⊙ W x), through apply_backward.
  const auto w = GridInterpolation::bicubic(4, 5, 7, 3);
  const int C = 2;
  const auto v = random_vector(std::size_t(w.rows()) * C);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(v.size());
    w.apply(x.data(), y.data(), C);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += v[i] * y[i] * y[i];
    return s;
  };
  const auto x = random_vector(std::size_t(w.cols()) * C);
  std::vector<double> y(v.size()), dy(v.size()), dx(x.size(), 0.0);
  w.apply(x.data(), y.data(), C);
  for (std::size_t i = 0; i < y.size(); ++i) dy[i] = 2 * v[i] * y[i];
  w.apply_backward(dy.data(), dx.data(), C);
  CHECK(max_rel_err(dx, numeric_gradient(loss, x)) < 1e-6);
}

TEST_CASE("GridInterpolation: every row of weights sums to 1", "[interpolation]") {
  for (const auto& [in, out] : grid_pairs()) {
    INFO(shape_name(in, out));
    const auto w = GridInterpolation::for_grids(in, out);
    for (int r = 0; r < w.rows(); ++r) {
      double s = 0;
      for (int k = w.row_ptr()[r]; k < w.row_ptr()[r + 1]; ++k) {
        REQUIRE(w.col_idx()[k] >= 0);
        REQUIRE(w.col_idx()[k] < w.cols());
        if (k > w.row_ptr()[r]) REQUIRE(w.col_idx()[k] > w.col_idx()[k - 1]);  // sorted, no duplicates
        s += w.weights()[k];
      }
      REQUIRE(std::abs(s - 1.0) < 1e-14);
    }
    // Interpolating a constant gives the constant.
    const int C = 2;
    std::vector<double> x(std::size_t(w.cols()) * C), y(std::size_t(w.rows()) * C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? -2.5 : 0.75;
    w.apply(x.data(), y.data(), C);
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(std::abs(y[i] - (i % 2 ? -2.5 : 0.75)) < 1e-14);
  }
  // A larger ViT-sized case (14×14 → 24×24 and back down).
  for (const auto& w : {GridInterpolation::bicubic(14, 14, 24, 24), GridInterpolation::bicubic(24, 24, 14, 14)})
    for (int r = 0; r < w.rows(); ++r) {
      double s = 0;
      for (int k = w.row_ptr()[r]; k < w.row_ptr()[r + 1]; ++k) s += w.weights()[k];
      REQUIRE(std::abs(s - 1.0) < 1e-14);
    }
}

TEST_CASE("GridInterpolation: float buffers, many channels, threads", "[interpolation]") {
  // Large enough for the parallel path; the float result is the double one rounded (both sum in double).
  const auto w = GridInterpolation::bicubic(14, 14, 20, 20);
  const int C = 96;
  const auto x64 = random_vector(std::size_t(w.cols()) * C);
  std::vector<float> x32(x64.begin(), x64.end());
  std::vector<double> xr(x32.begin(), x32.end()), y64(std::size_t(w.rows()) * C);
  std::vector<float> y32(y64.size());
  w.apply(xr.data(), y64.data(), C);
  w.apply(x32.data(), y32.data(), C);
  for (std::size_t i = 0; i < y32.size(); ++i) REQUIRE(y32[i] == float(y64[i]));
  std::vector<float> d32(x32.size(), 0.0f);
  std::vector<double> d64(x32.size(), 0.0);
  std::vector<double> y32d(y32.begin(), y32.end());
  w.apply_backward(y32.data(), d32.data(), C);
  w.apply_backward(y32d.data(), d64.data(), C);
  for (std::size_t i = 0; i < d32.size(); ++i) REQUIRE(d32[i] == float(d64[i]));
}

TEST_CASE("GridInterpolation: bad sizes give errors naming them", "[interpolation]") {
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_AS(GridInterpolation::linear1d(0, 4), liere::Error);
  REQUIRE_THROWS_WITH(GridInterpolation::linear1d(0, 4), Contains("(0) → (4)") && Contains("positive"));
  REQUIRE_THROWS_WITH(GridInterpolation::bicubic(4, -2, 7, 7), Contains("(4×-2) → (7×7)"));
  REQUIRE_THROWS_WITH(GridInterpolation::bicubic(4, 4, 7, 0), Contains("(4×4) → (7×0)"));
  REQUIRE_THROWS_WITH(GridInterpolation::trilinear(2, 4, 4, 0, 6, 6), Contains("(2×4×4) → (0×6×6)"));
  REQUIRE_THROWS_WITH(GridInterpolation::for_grids({4, 4}, {7, 7, 7}),
                      Contains("(4×4)") && Contains("(7×7×7)") && Contains("dimensions"));
  REQUIRE_THROWS_WITH(GridInterpolation::for_grids({}, {}), Contains("dimension 1, 2 or 3"));
  REQUIRE_THROWS_WITH(GridInterpolation::for_grids({2, 2, 2, 2}, {3, 3, 3, 3}),
                      Contains("(2×2×2×2) → (3×3×3×3)"));
  REQUIRE_THROWS_WITH(GridInterpolation::bicubic(100000, 100000, 2, 2), Contains("too many points"));

  const auto w = GridInterpolation::bicubic(4, 4, 7, 7);
  std::vector<double> x(16 * 2), y(49 * 2);
  REQUIRE_THROWS_WITH(w.apply(x.data(), y.data(), 0), Contains("channels"));
  REQUIRE_THROWS_WITH(w.apply(y.data(), y.data(), 2), Contains("overlap"));
  REQUIRE_THROWS_WITH(w.apply_backward(y.data(), y.data() + 10, 2), Contains("overlap"));
  REQUIRE_NOTHROW(w.apply(x.data(), y.data(), 2));
}
