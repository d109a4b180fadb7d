// liere/backend/position_classes.hpp — the rows of a position table grouped by direction: rows whose positions are
// positive multiples of one another, exactly.
//
// If p_t = c·p_r with c > 0 exactly (as real numbers), then A(p_t) = Σ_i p_{t,i} hat(w_i) = c·A(p_r), whose real
// Schur form is A(p_r)'s with its angles times c: the spectral path of the rotation tables decomposes one matrix per
// class (its representative, the class's first row) and gets every member's exp and adjoint from it. An 8 × 8 grid
// has 37 directions among its 63 nonzero points, a 1D sequence one, a 3D grid of tubelets far fewer than its points.
//
// Exact means bit for bit in the positions' own type: p_{t,a}·p_{r,b} = p_{t,b}·p_{r,a} for every pair of axes, each
// product taken exactly (its rounded value and its rounding error, std::fma), and p_t·p_r > 0 (double positions
// whose products overflow or come near underflow are not grouped). Rows are bucketed by their positions divided by
// the largest |p_a| (the same rounded numbers for exactly collinear rows: the same real quotients, rounded once),
// sorted, and each row of a bucket checked exactly against the bucket's classes: no tolerance, so a position off a
// direction by one unit in the last place is a class of its own. Rows of all zeros form one class (the identity: a
// CLS token at the origin); a row with a NaN or ±Inf is a class of its own. Members keep the row order; the classes
// are ordered by their first row, so the grouping is deterministic.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace liere {

struct PositionClasses {
  std::vector<int> rep;       // (classes): the representative row of each class (its first row)
  std::vector<int> start;     // (classes + 1): class c's rows are members[start[c] .. start[c + 1])
  std::vector<int> members;   // (rows): the rows, class by class, each class in row order
  std::vector<double> scale;  // (rows, indexed by row): c_t with p_t = c_t·p_rep (1 for a representative)
  int num_classes() const { return int(rep.size()); }
};

namespace detail {

// a·b as the pair (rounded product, its rounding error), false where that pair is not exact: a product that
// overflows, or one so small that its error term would underflow (only for double inputs below about 1e-146).
template <class S>
inline bool exact_product(S a, S b, double& hi, double& lo) {
  hi = double(a) * double(b);
  lo = 0;
  if (a == S(0) || b == S(0)) return true;
  constexpr double kSafe = std::numeric_limits<double>::min() * 0x1p54;
  if (!(std::abs(hi) >= kSafe && std::abs(hi) <= std::numeric_limits<double>::max())) return false;
  lo = std::fma(double(a), double(b), -hi);
  return true;
}

// a·b = c·d exactly (equal pairs ⇔ equal exact products); false where either product cannot be taken exactly.
template <class S>
inline bool exact_products_equal(S a, S b, S c, S d) {
  double x, ex, y, ey;
  if (!exact_product(a, b, x, ex) || !exact_product(c, d, y, ey)) return false;
  return x == y && ex == ey;
}

// p_t = c·p_r exactly for some c > 0 (both rows finite and nonzero).
template <class S>
inline bool exactly_same_direction(const S* pt, const S* pr, int dim) {
  double dot = 0;
  for (int a = 0; a < dim; ++a) {
    dot += double(pt[a]) * double(pr[a]);  // the terms share one sign when the rows are collinear
    for (int b = a + 1; b < dim; ++b)
      if (!exact_products_equal(pt[a], pr[b], pt[b], pr[a])) return false;
  }
  return dot > 0;
}

}  // namespace detail

// The classes of rows × dim positions (row-major). dim ≤ 3 is what the encodings use; any dim works.
template <class S>
PositionClasses position_classes(const S* pos, int rows, int dim) {
  enum Kind : int { kZero = 0, kFinite = 1, kNonFinite = 2 };
  struct Key {
    int kind;
    std::array<double, 3> dir;  // p / max|p_a| for dim ≤ 3 (the bucket; dim > 3 buckets on the first three)
    int row;
  };
  std::vector<Key> keys(std::size_t(std::max(rows, 0)));
  for (int t = 0; t < rows; ++t) {
    const S* p = pos + std::int64_t(t) * dim;
    Key& k = keys[std::size_t(t)];
    k.row = t;
    k.dir = {0, 0, 0};
    double big = 0;
    bool finite = true;
    for (int a = 0; a < dim; ++a) {
      finite = finite && std::isfinite(double(p[a]));
      big = std::max(big, std::abs(double(p[a])));
    }
    k.kind = !finite ? kNonFinite : big == 0 ? kZero : kFinite;
    if (k.kind == kFinite)
      for (int a = 0; a < std::min(dim, 3); ++a) k.dir[std::size_t(a)] = double(p[a]) / big;
  }
  // Buckets: equal (kind, dir) next to each other, rows ascending within (stable on the row order).
  std::stable_sort(keys.begin(), keys.end(), [](const Key& x, const Key& y) {
    if (x.kind != y.kind) return x.kind < y.kind;
    return x.dir < y.dir;
  });
  std::vector<int> cls(std::size_t(std::max(rows, 0)), -1);
  std::vector<int> reps;  // first row of each class, in order of creation
  std::size_t b0 = 0;
  while (b0 < keys.size()) {
    std::size_t b1 = b0 + 1;
    while (b1 < keys.size() && keys[b1].kind == keys[b0].kind && keys[b1].dir == keys[b0].dir) ++b1;
    const std::size_t first_class = reps.size();
    for (std::size_t i = b0; i < b1; ++i) {
      const int t = keys[i].row;
      int found = -1;
      if (keys[i].kind == kZero) {
        if (reps.size() > first_class) found = int(first_class);  // the zero rows: one class
      } else if (keys[i].kind == kFinite) {
        for (std::size_t c = first_class; c < reps.size() && found < 0; ++c)
          if (detail::exactly_same_direction(pos + std::int64_t(t) * dim, pos + std::int64_t(reps[c]) * dim, dim))
            found = int(c);
      }
      if (found < 0) {
        found = int(reps.size());
        reps.push_back(t);
      }
      cls[std::size_t(t)] = found;
    }
    b0 = b1;
  }
  // Classes renumbered by their first row; members in row order.
  const int nc = int(reps.size());
  std::vector<int> order(static_cast<std::size_t>(nc));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return reps[std::size_t(x)] < reps[std::size_t(y)]; });
  std::vector<int> renum(static_cast<std::size_t>(nc));
  for (int c = 0; c < nc; ++c) renum[std::size_t(order[std::size_t(c)])] = c;
  PositionClasses out;
  out.rep.resize(std::size_t(nc));
  out.start.assign(std::size_t(nc) + 1, 0);
  out.members.resize(std::size_t(std::max(rows, 0)));
  out.scale.assign(std::size_t(std::max(rows, 0)), 1.0);
  for (int c = 0; c < nc; ++c) out.rep[std::size_t(c)] = reps[std::size_t(order[std::size_t(c)])];
  for (int t = 0; t < rows; ++t) ++out.start[std::size_t(renum[std::size_t(cls[std::size_t(t)])]) + 1];
  for (int c = 0; c < nc; ++c) out.start[std::size_t(c) + 1] += out.start[std::size_t(c)];
  std::vector<int> fill(out.start.begin(), out.start.end() - 1);
  for (int t = 0; t < rows; ++t) {
    const int c = renum[std::size_t(cls[std::size_t(t)])];
    out.members[std::size_t(fill[std::size_t(c)]++)] = t;
    const int r = out.rep[std::size_t(c)];
    if (r == t) continue;
    // c_t from the largest component (exact collinearity: every component gives c_t to rounding)
    const S* pt = pos + std::int64_t(t) * dim;
    const S* pr = pos + std::int64_t(r) * dim;
    int k = 0;
    for (int a = 1; a < dim; ++a)
      if (std::abs(double(pr[a])) > std::abs(double(pr[k]))) k = a;
    out.scale[std::size_t(t)] = pr[k] == S(0) ? 1.0 : double(pt[k]) / double(pr[k]);
  }
  return out;
}

}  // namespace liere
