// liere/pe/interpolation.hpp — resampling a table of per-grid-point vectors (the learned absolute position
// embedding) from the training grid to another grid, and the exact adjoint of that map.
//
// The maps reproduce PyTorch's F.interpolate(..., align_corners=False) on a (1, C, [D,] [H,] W) tensor:
//   1D  mode='linear'     GridInterpolation::linear1d
//   2D  mode='bicubic'    GridInterpolation::bicubic      (cubic convolution, A = −0.75, no antialiasing)
//   3D  mode='trilinear'  GridInterpolation::trilinear
// as the official LieRE code does for its absolute-position baseline (the CLS row is kept and is not part of
// the grid: the caller passes only the patch rows).
//
// Per axis, with n_in source and n_out destination points and scale = n_in / n_out:
//   src = (dst + 0.5) · scale − 0.5                       (PyTorch's area_pixel_compute_source_index,
//                                                          evaluated exactly: see source() below)
//   linear:  src is clamped below at 0; i0 = ⌊src⌋, i1 = i0 + 1 unless i0 is the last point (then i1 = i0);
//            λ1 = src − i0, λ0 = 1 − λ1.
//   cubic:   src is not clamped; i = ⌊src⌋, t = src − i; the four taps i−1, i, i+1, i+2 get the weights
//            K(t+1), K(t), K(1−t), K(2−t) of Keys' kernel with A = −0.75, evaluated with PyTorch's two
//            polynomials ((A+2)x − (A+3))x² + 1 for |x| ≤ 1 and ((Ax − 5A)x + 8A)x − 4A for 1 ≤ |x| ≤ 2;
//            tap indices are clamped to [0, n_in − 1] (border replicate), taps landing on the same point add.
//   An axis whose size does not change is the identity (weight exactly 1.0), as in PyTorch, where the same
//   formulas give exactly t = 0 and the weights 0, 1, 0, 0 there too.
// Multi-dimensional weights are products of the per-axis weights (PyTorch's kernels are separable).
// Exactly-zero weights are not stored. Weights are computed and stored in double.
//
// Layout (G_in / G_out source / destination grid points in row-major (d, h, w) order, C channels):
//   in, din    (G_in, C)   row-major
//   out, dout  (G_out, C)  row-major
//   apply           out  = W · in        (overwrites out)
//   apply_backward  din += Wᵀ · dout     (accumulates)
// Both sum in double for any S (float or double) and round once to S: on an unchanged grid the result is
// bit-for-bit the input. Both are gathers over CSR rows (W and an explicitly stored Wᵀ), so they run in
// parallel over output rows with no atomics and give the same bits for any number of threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <liere/core/config.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace liere {

class GridInterpolation {
 public:
  GridInterpolation() = default;

  // PyTorch mode='linear', align_corners=False: n_in → n_out points.
  static GridInterpolation linear1d(int n_in, int n_out) {
    check_sizes("linear1d", {n_in}, {n_out});
    return product("linear1d", {n_in}, {n_out}, {linear_axis(n_in, n_out)});
  }

  // PyTorch mode='bicubic', align_corners=False (A = −0.75, border replicate, no antialiasing).
  static GridInterpolation bicubic(int h_in, int w_in, int h_out, int w_out) {
    check_sizes("bicubic", {h_in, w_in}, {h_out, w_out});
    return product("bicubic", {h_in, w_in}, {h_out, w_out}, {cubic_axis(h_in, h_out), cubic_axis(w_in, w_out)});
  }

  // PyTorch mode='trilinear', align_corners=False.
  static GridInterpolation trilinear(int d_in, int h_in, int w_in, int d_out, int h_out, int w_out) {
    check_sizes("trilinear", {d_in, h_in, w_in}, {d_out, h_out, w_out});
    return product("trilinear", {d_in, h_in, w_in}, {d_out, h_out, w_out},
                   {linear_axis(d_in, d_out), linear_axis(h_in, h_out), linear_axis(w_in, w_out)});
  }

  // The mode the LieRE code uses for a grid of that dimension: 1 linear, 2 bicubic, 3 trilinear.
  static GridInterpolation for_grids(const std::vector<int>& in, const std::vector<int>& out) {
    LIERE_ENSURE(in.size() == out.size(), "GridInterpolation::for_grids: source grid " << shape_str(in)
                                              << " has " << in.size() << " dimensions, destination grid "
                                              << shape_str(out) << " has " << out.size());
    switch (in.size()) {
      case 1: return linear1d(in[0], out[0]);
      case 2: return bicubic(in[0], in[1], out[0], out[1]);
      case 3: return trilinear(in[0], in[1], in[2], out[0], out[1], out[2]);
      default:
        LIERE_ENSURE(false, "GridInterpolation::for_grids: grids of dimension 1, 2 or 3 are supported, got "
                                << shape_str(in) << " → " << shape_str(out));
    }
    return {};  // not reached
  }

  int rows() const { return rows_; }  // destination grid points
  int cols() const { return cols_; }  // source grid points
  const std::vector<int>& in_shape() const { return in_shape_; }
  const std::vector<int>& out_shape() const { return out_shape_; }
  std::size_t nonzeros() const { return weight_.size(); }

  // CSR of W: row r holds the entries row_ptr()[r] .. row_ptr()[r+1]−1, columns increasing.
  const std::vector<int>& row_ptr() const { return row_ptr_; }  // (rows + 1)
  const std::vector<int>& col_idx() const { return col_idx_; }  // (nonzeros)
  const std::vector<double>& weights() const { return weight_; }  // (nonzeros)

  // W as a dense (rows, cols) row-major matrix; for tests and small grids.
  std::vector<double> dense() const {
    std::vector<double> m(std::size_t(rows_) * cols_, 0.0);
    for (int r = 0; r < rows_; ++r)
      for (int k = row_ptr_[r]; k < row_ptr_[r + 1]; ++k) m[std::size_t(r) * cols_ + col_idx_[k]] += weight_[k];
    return m;
  }

  // True when W is exactly the identity: square, one entry per row, on the diagonal, of weight 1.0.
  bool is_identity() const {
    if (rows_ != cols_) return false;
    for (int r = 0; r < rows_; ++r)
      if (row_ptr_[r + 1] - row_ptr_[r] != 1 || col_idx_[row_ptr_[r]] != r || weight_[row_ptr_[r]] != 1.0)
        return false;
    return true;
  }

  // out = W · in.   in (cols, C), out (rows, C); out is overwritten and must not overlap in.
  template <class S>
  void apply(const S* in, S* out, int channels) const {  // in (G_in, C), out (G_out, C)
    check_buffers("apply", in, std::size_t(cols_), out, std::size_t(rows_), channels);
    gather(row_ptr_, col_idx_, weight_, rows_, in, out, channels, /*accumulate=*/false);
  }

  // din += Wᵀ · dout.   dout (rows, C), din (cols, C); din must not overlap dout.
  template <class S>
  void apply_backward(const S* dout, S* din, int channels) const {  // dout (G_out, C), din (G_in, C)
    check_buffers("apply_backward", dout, std::size_t(rows_), din, std::size_t(cols_), channels);
    gather(t_row_ptr_, t_col_idx_, t_weight_, cols_, dout, din, channels, /*accumulate=*/true);
  }

 private:
  // One axis: for each destination index, the (source index, weight) taps, indices increasing and distinct.
  using Taps = std::vector<std::pair<int, double>>;
  using Axis = std::vector<Taps>;  // (n_out)

  static std::string shape_str(const std::vector<int>& s) {
    std::ostringstream os;
    os << "(";
    for (std::size_t i = 0; i < s.size(); ++i) os << (i ? "×" : "") << s[i];
    os << ")";
    return os.str();
  }

  static void check_sizes(const char* what, const std::vector<int>& in, const std::vector<int>& out) {
    bool ok = true;
    std::int64_t n_in = 1, n_out = 1;
    for (int s : in) {
      ok = ok && s > 0;
      n_in *= std::max(s, 1);
    }
    for (int s : out) {
      ok = ok && s > 0;
      n_out *= std::max(s, 1);
    }
    LIERE_ENSURE(ok, "GridInterpolation::" << what << ": grid sizes must be positive, got " << shape_str(in)
                                           << " → " << shape_str(out));
    constexpr std::int64_t kMax = std::numeric_limits<int>::max();
    LIERE_ENSURE(n_in <= kMax && n_out <= kMax, "GridInterpolation::" << what << ": grid " << shape_str(in)
                                                                       << " → " << shape_str(out)
                                                                       << " has too many points for int indices");
  }

  // Adds weight w at source index i (clamped into [0, n_in)) to taps kept sorted by index.
  static void add_tap(Taps& taps, int i, int n_in, double w) {
    i = std::clamp(i, 0, n_in - 1);
    if (!taps.empty() && taps.back().first == i)
      taps.back().second += w;
    else
      taps.emplace_back(i, w);
  }

  static Axis identity_axis(int n) {
    Axis a(n);
    for (int i = 0; i < n; ++i) a[i] = {{i, 1.0}};
    return a;
  }

  // PyTorch's source coordinate of destination index o, src = (o + 0.5)·n_in/n_out − 0.5, split as
  // src = i + t with i = ⌊src⌋, 0 ≤ t < 1. It is computed from the exact fraction
  //   src = ((2o + 1)·n_in − n_out) / (2·n_out)          (64-bit integers: no overflow for int sizes)
  // so i is exact and t and 1 − t are correctly rounded. PyTorch rounds scale = n_in/n_out and the product
  // first; that moves t by an ulp or so, i.e. the weights by ~1e-16 (the kernels are continuous, also where
  // src crosses an integer and the taps shift by one). Exact arithmetic here means the taps do not depend on
  // compiler flags (FMA contraction of scale·(o + 0.5) − 0.5 would change ⌊src⌋ where src is an integer,
  // e.g. 1 → 3 points), and t is exactly 0 where src is an integer.
  struct Source {
    std::int64_t i;  // ⌊src⌋ (may be −1 for cubic near the border)
    double t;        // src − i
    double one_minus_t;
  };
  static Source source(int o, int n_in, int n_out) {
    const std::int64_t num = (2 * std::int64_t(o) + 1) * n_in - n_out, den = 2 * std::int64_t(n_out);
    std::int64_t i = num / den, r = num % den;
    if (r < 0) {  // floor division
      r += den;
      --i;
    }
    return {i, double(r) / double(den), double(den - r) / double(den)};
  }

  // PyTorch's linear taps (compute_source_index_and_lambda with align_corners=False): src clamped below at 0.
  static Axis linear_axis(int n_in, int n_out) {
    if (n_in == n_out) return identity_axis(n_in);
    Axis a(n_out);
    for (int o = 0; o < n_out; ++o) {
      auto [i, l1, l0] = source(o, n_in, n_out);
      if (i < 0) {  // src < 0 → src = 0
        i = 0;
        l1 = 0.0;
        l0 = 1.0;
      }
      const int i0 = int(i);
      const int i1 = i0 < n_in - 1 ? i0 + 1 : i0;
      add_tap(a[o], i0, n_in, l0);
      add_tap(a[o], i1, n_in, l1);
    }
    return a;
  }

  // PyTorch's cubic taps (get_cubic_upsample_coefficients with A = −0.75, indices clamped to the border).
  static Axis cubic_axis(int n_in, int n_out) {
    if (n_in == n_out) return identity_axis(n_in);
    constexpr double A = -0.75;
    auto k1 = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };      // |x| ≤ 1
    auto k2 = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 ≤ |x| ≤ 2
    Axis a(n_out);
    for (int o = 0; o < n_out; ++o) {
      const auto [i, t, omt] = source(o, n_in, n_out);  // src not clamped for cubic
      const double w[4] = {k2(t + 1.0), k1(t), k1(omt), k2(omt + 1.0)};
      for (int j = 0; j < 4; ++j) add_tap(a[o], int(i) - 1 + j, n_in, w[j]);
    }
    return a;
  }

  // W = ⊗ of the per-axis maps (first axis outermost), as CSR, plus its transpose.
  static GridInterpolation product(const char* what, const std::vector<int>& in, const std::vector<int>& out,
                                   const std::vector<Axis>& axes) {
    GridInterpolation g;
    g.in_shape_ = in;
    g.out_shape_ = out;
    g.rows_ = g.cols_ = 1;
    for (std::size_t d = 0; d < in.size(); ++d) g.rows_ *= out[d], g.cols_ *= in[d];
    const int dims = int(in.size());
    g.row_ptr_.assign(1, 0);
    g.row_ptr_.reserve(std::size_t(g.rows_) + 1);

    std::vector<int> o(dims, 0);  // destination multi-index, last axis fastest
    std::vector<std::size_t> k(dims, 0);  // tap counter per axis
    for (int r = 0; r < g.rows_; ++r) {
      // Enumerate the tensor product of the taps of each axis in row-major order: columns come out increasing.
      std::fill(k.begin(), k.end(), 0);
      for (bool more = true; more;) {
        int col = 0;
        double w = 1.0;
        for (int d = 0; d < dims; ++d) {
          const auto& tap = axes[d][o[d]][k[d]];
          col = col * in[d] + tap.first;
          w *= tap.second;
        }
        if (w != 0.0) {
          g.col_idx_.push_back(col);
          g.weight_.push_back(w);
        }
        more = false;
        for (int d = dims - 1; d >= 0; --d) {
          if (++k[d] < axes[d][o[d]].size()) {
            more = true;
            break;
          }
          k[d] = 0;
        }
      }
      LIERE_ENSURE(g.weight_.size() <= std::size_t(std::numeric_limits<int>::max()),
                   "GridInterpolation::" << what << ": too many weights for " << shape_str(in) << " → "
                                         << shape_str(out));
      g.row_ptr_.push_back(int(g.weight_.size()));
      for (int d = dims - 1; d >= 0; --d) {  // next destination point
        if (++o[d] < out[d]) break;
        o[d] = 0;
      }
    }
    g.build_transpose();
    return g;
  }

  void build_transpose() {
    t_row_ptr_.assign(std::size_t(cols_) + 1, 0);
    for (int c : col_idx_) ++t_row_ptr_[c + 1];
    for (int c = 0; c < cols_; ++c) t_row_ptr_[c + 1] += t_row_ptr_[c];
    t_col_idx_.resize(col_idx_.size());
    t_weight_.resize(weight_.size());
    std::vector<int> next(t_row_ptr_.begin(), t_row_ptr_.end() - 1);
    for (int r = 0; r < rows_; ++r)  // rows in order: each transposed row has increasing columns
      for (int k = row_ptr_[r]; k < row_ptr_[r + 1]; ++k) {
        const int p = next[col_idx_[k]]++;
        t_col_idx_[p] = r;
        t_weight_[p] = weight_[k];
      }
  }

  template <class S>
  static void check_buffers(const char* what, const S* x, std::size_t x_rows, const S* y, std::size_t y_rows,
                            int channels) {
    static_assert(std::is_floating_point_v<S>, "GridInterpolation: S must be float or double");
    LIERE_ENSURE(channels > 0, "GridInterpolation::" << what << ": channels must be positive, got " << channels);
    LIERE_ENSURE(x != nullptr && y != nullptr, "GridInterpolation::" << what << ": null buffer");
    const auto xb = reinterpret_cast<std::uintptr_t>(x), yb = reinterpret_cast<std::uintptr_t>(y);
    const auto xe = xb + x_rows * channels * sizeof(S), ye = yb + y_rows * channels * sizeof(S);
    LIERE_ENSURE(xe <= yb || ye <= xb, "GridInterpolation::" << what << ": input and output buffers overlap");
  }

  // y[r, :] (=|+=) Σ_k w[k] · x[idx[k], :] over k in ptr[r] .. ptr[r+1]−1, summed in double, on the calling
  // thread (a table of T × C values: threading belongs to the backend's ops, not to pe/).
  template <class S>
  static void gather(const std::vector<int>& ptr, const std::vector<int>& idx, const std::vector<double>& w,
                     int n_rows, const S* x, S* y, int channels, bool accumulate) {
    const std::size_t C = std::size_t(channels);
    {
      std::vector<double> acc(C);  // (C)
      for (int r = 0; r < n_rows; ++r) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int k = ptr[r]; k < ptr[r + 1]; ++k) {
          const double wk = w[k];
          const S* xr = x + std::size_t(idx[k]) * C;
          for (std::size_t c = 0; c < C; ++c) acc[c] += wk * double(xr[c]);
        }
        S* yr = y + std::size_t(r) * C;
        if (accumulate)
          for (std::size_t c = 0; c < C; ++c) yr[c] += S(acc[c]);
        else
          for (std::size_t c = 0; c < C; ++c) yr[c] = S(acc[c]);
      }
    }
  }

  int rows_ = 0, cols_ = 0;
  std::vector<int> in_shape_, out_shape_;
  std::vector<int> row_ptr_, col_idx_;  // W: (rows + 1), (nonzeros)
  std::vector<double> weight_;          // (nonzeros)
  std::vector<int> t_row_ptr_, t_col_idx_;  // Wᵀ: (cols + 1), (nonzeros)
  std::vector<double> t_weight_;            // (nonzeros)
};

}  // namespace liere
