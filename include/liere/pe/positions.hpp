// liere/pe/positions.hpp — token positions for 1D, 2D and 3D patch grids, how they change with the
// resolution, and where the CLS token sits.
//
// Tokens of a grid are in row-major order, first axis outermost: (h, w) for images, (t, h, w) for videos,
// matching the patch flattening `b c (h p1) (w p2) -> b (h w) …`. Position axis a of token (i_0, …) is
// x_a = i_a · step_a. At the training grid E the step is the *unit*:
//   unit range    1/(E_a − 1): the training grid spans [0, 1] (the official LieRE code)
//   unit integer  1: integer indices (rope-vit, RoPE-1D)
// On another grid n the resolution policy chooses the step:
//   official      linspace(0, (n_a/E_a)·L_a, n_a), L_a = (E_a − 1)·unit (the official code's linspace(0, n/E, n))
//   extrapolate   the training step: positions run past the training range on larger grids (the paper's §5.6)
//   interpolate   the training range: step L_a/(n_a − 1)
// The CLS token (token 0 when present):
//   identity  position 0, i.e. the identity rotation (the official code)
//   skip      not rotated at all (rope-vit, timm); for rotary encodings the same scores as identity
//   center    the centre of the grid (ComRoPE)
#pragma once

#include <liere/core/config.hpp>
#include <string>
#include <vector>

namespace liere {

enum class PositionUnit { range, integer };
enum class ResolutionPolicy { official, extrapolate, interpolate };
enum class ClsPolicy { identity, skip, center };

inline const char* to_string(PositionUnit u) { return u == PositionUnit::range ? "range" : "integer"; }
inline const char* to_string(ResolutionPolicy p) {
  return p == ResolutionPolicy::official ? "official" : p == ResolutionPolicy::extrapolate ? "extrapolate" : "interpolate";
}
inline const char* to_string(ClsPolicy c) {
  return c == ClsPolicy::identity ? "identity" : c == ClsPolicy::skip ? "skip" : "center";
}

// The step of axis a at grid size n, given the training grid size e.
inline double grid_step(int n, int e, PositionUnit unit, ResolutionPolicy policy) {
  LIERE_ENSURE(n >= 1 && e >= 1, "grid_step: grid sizes must be >= 1, got n=" << n << " E=" << e);
  const double u = unit == PositionUnit::integer ? 1.0 : (e > 1 ? 1.0 / (e - 1) : 1.0);
  const double range = (e - 1) * u;  // the training range L
  if (n == 1) return 0.0;
  switch (policy) {
    case ResolutionPolicy::official: return (double(n) / e) * range / (n - 1);
    case ResolutionPolicy::extrapolate: return u;
    case ResolutionPolicy::interpolate: return range / (n - 1);
  }
  return u;
}

// Positions (N, P) row-major for the tokens of `grid` (P = grid.size() axes), first axis outermost.
inline std::vector<double> grid_positions(const std::vector<int>& grid, const std::vector<int>& train_grid,
                                          PositionUnit unit, ResolutionPolicy policy) {
  const int p = int(grid.size());
  LIERE_ENSURE(p >= 1 && p <= 3, "grid_positions: 1, 2 or 3 axes, got " << p);
  LIERE_ENSURE(train_grid.size() == grid.size(), "grid_positions: the grid has " << p << " axes but the training grid "
                                                                               << train_grid.size());
  std::vector<double> step(p);
  std::size_t n = 1;
  for (int a = 0; a < p; ++a) {
    step[a] = grid_step(grid[a], train_grid[a], unit, policy);
    n *= std::size_t(grid[a]);
  }
  std::vector<double> pos(n * p);
  for (std::size_t t = 0; t < n; ++t) {
    std::size_t rest = t;
    for (int a = p - 1; a >= 0; --a) {
      pos[t * p + a] = double(rest % grid[a]) * step[a];
      rest /= grid[a];
    }
  }
  return pos;
}

// The centre of a set of positions (N, P): the CLS position of the `center` policy.
inline std::vector<double> center_of(const std::vector<double>& pos, int p) {
  std::vector<double> c(p, 0.0);
  const std::size_t n = pos.size() / p;
  for (std::size_t t = 0; t < n; ++t)
    for (int a = 0; a < p; ++a) c[a] += pos[t * p + a];
  for (double& x : c) x /= double(std::max<std::size_t>(n, 1));
  return c;
}

}  // namespace liere
