// liere/pe/liere.hpp — LieRE: R(p) = exp(Σ_i p_i A_i) with learned, block-diagonal skew-symmetric A_i.
//
// Parameters, for Dim position axes, HeadDim = D and blocks of size b (m = D/b blocks):
//   params  [Dim][m][b(b−1)/2]: each block's strict upper triangle, row-major: (0,1),(0,2),…,(0,b−1),(1,2),…
//   A_i     block-diagonal; block k of axis i has entries A[r][c] = w and A[c][r] = −w for r < c.
// The rotation of a position p is block-diagonal too: block k is exp(Σ_i p_i A_i,k), computed in double.
//
// Two layers:
//   * runtime kernels liere_table_forward / liere_table_backward (compile-time Block, runtime Dim and D):
//     rotation tables for T positions at once and their backward to the parameters; the position-encoding
//     modules and the engine use these;
//   * the class LieRE<Dim, HeadDim, Block, Scalar> (docs/api.md's contract) on top of them, with
//     fixed-size Eigen types for single positions and the same batched tables.
//
// Backward: dparams += Σ_t Σ_i p_{t,i} · skew-coordinates of L(A(p_t)ᵀ, dR(t)), computed per block with the
// forward-mode Fréchet derivative of lie/exp.hpp in the precision of Scalar and summed in double.
// Non-finite positions or parameters give NaN rotations (and NaN gradients): never a hang, never a crash.
#pragma once

#include <liere/core/eigen.hpp>
#include <cmath>
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/lie/exp.hpp>
#include <liere/lie/hat.hpp>
#include <liere/pe/blocks.hpp>
#include <liere/pe/rotation_table.hpp>
#include <numbers>
#include <liere/core/rng.hpp>
#include <span>
#include <type_traits>
#include <vector>


namespace liere {

// Number of LieRE parameters for Dim axes, head dimension D and block size b: Dim·(D/b)·b(b−1)/2.
constexpr int liere_num_params(int dim, int head_dim, int block) { return dim * (head_dim / block) * so_dim(block); }

namespace detail {

// Small blocks live in fixed-size matrices (registers, unrolled loops); 32 and 64 on the heap.
template <int Block, class W>
using BlockMat = std::conditional_t<(Block <= 16), Eigen::Matrix<W, Block, Block>,
                                    Eigen::Matrix<W, Eigen::Dynamic, Eigen::Dynamic>>;

template <int Block, class W, class Scalar>
std::vector<BlockMat<Block, W>> liere_generators(std::span<const Scalar> params, int dim, int num_blocks) {
  constexpr int ppb = so_dim(Block);
  std::vector<BlockMat<Block, W>> g(std::size_t(dim) * num_blocks);
  for (int a = 0; a < dim; ++a)
    for (int k = 0; k < num_blocks; ++k) {
      BlockMat<Block, W>& m = g[std::size_t(a) * num_blocks + k];
      m.setZero(Block, Block);
      hat_fill(params.data() + (std::size_t(a) * num_blocks + k) * ppb, Block, m);
    }
  return g;
}

// a = Σ_i p_i G_{i,k} for the parameter set whose generators start at g[base]
template <int Block, class W, class Scalar>
void liere_block_generator(const std::vector<BlockMat<Block, W>>& g, const Scalar* p, int dim, int num_blocks, int k,
                           BlockMat<Block, W>& a, std::size_t base = 0) {
  a.setZero(Block, Block);
  for (int i = 0; i < dim; ++i) a += W(p[i]) * g[base + std::size_t(i) * num_blocks + k];
}

// r = exp(a) for one block, in double.
template <int Block>
void liere_block_exp(const BlockMat<Block, double>& a, BlockMat<Block, double>& r, T18Work<BlockMat<Block, double>>* w) {
  if constexpr (Block == 2) {
    exp2_closed(a, r);
  } else if constexpr (Block == 3) {
    exp3_closed(a, r);
  } else if constexpr (Block <= 16) {
    if (!a.allFinite()) {
      r.setConstant(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    expm_ss<true>(a, r);
  } else {
    if (!a.allFinite()) {
      r.setConstant(Block, Block, std::numeric_limits<double>::quiet_NaN());
      return;
    }
    expm_ss<true>(a, r, *w);
  }
}

// l = L(aᵀ, g) = dL/da for one block, in the precision W.
template <int Block, class W>
void liere_block_exp_adjoint(const BlockMat<Block, W>& a, const BlockMat<Block, W>& g, BlockMat<Block, W>& l,
                             BlockMat<Block, W>& at, BlockMat<Block, W>& r, T18Work<BlockMat<Block, W>>* w) {
  if constexpr (Block == 2) {
    l.setZero();
    exp_backward(a, g, l);
  } else if constexpr (Block <= 16) {
    at = a.transpose();
    expm_frechet_ss<true>(at, g, r, l);
  } else {
    at = a.transpose();
    expm_frechet_ss<true>(at, g, r, l, *w);
  }
}

}  // namespace detail

// The shape of a LieRE parameter set (or of `sets` of them, e.g. one per head of a layer, stored one after
// the other): Dim position axes, head dimension D, blocks of size b.
struct LieREGeometry {
  int sets = 1;
  int dim = 2;
  int head_dim = 64;
  int block = 8;

  int num_blocks() const { return head_dim / block; }
  int params_per_set() const { return liere_num_params(dim, head_dim, block); }
  std::size_t num_params() const { return std::size_t(sets) * params_per_set(); }
};

namespace detail {

inline void check_liere_args(const LieREGeometry& g, std::size_t num_params, std::size_t num_positions, int tokens,
                             const char* who) {
  LIERE_ENSURE(g.sets >= 1, who << ": sets must be >= 1, got " << g.sets);
  LIERE_ENSURE(g.dim >= 1, who << ": the position dimension must be >= 1, got " << g.dim);
  LIERE_ENSURE(g.block >= 2 && g.head_dim % g.block == 0,
               who << ": block " << g.block << " does not divide head_dim " << g.head_dim);
  LIERE_ENSURE(num_params == g.num_params(), who << ": expected " << g.num_params() << " parameters (" << g.sets
                                                 << " sets x Dim " << g.dim << " x " << g.num_blocks() << " blocks x "
                                                 << so_dim(g.block) << "), got " << num_params);
  LIERE_ENSURE(tokens >= 0 && num_positions == std::size_t(tokens) * g.dim,
               who << ": positions: expected " << std::size_t(tokens) * g.dim << " values (" << tokens << " tokens x "
                   << g.dim << "), got " << num_positions);
}

}  // namespace detail

// Rotation tables of `tokens` positions for every parameter set: params (sets, Dim, D/b, b(b−1)/2),
// positions (tokens, Dim) row-major and shared by the sets, table rows (sets, tokens): set h's table is
// rows [h·tokens, (h + 1)·tokens). One loop over sets × tokens × blocks, on the calling thread: this is the
// reference definition (each block's exponential in double, lie/exp.hpp). The engine computes its tables with the
// backend's op instead (backend/cpu/rotation_table.hpp, threaded, in float where that stays orthogonal; and on the
// device); the tests compare the two. `table` is a view of host memory with exactly those rows (a RotationTable
// overload below resizes one).
template <int Block, class Scalar>
void liere_table_forward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                         int tokens, RotationTableView<Scalar> table) {
  using M = detail::BlockMat<Block, double>;
  LIERE_ENSURE(geo.block == Block, "liere_table_forward: geometry block " << geo.block << " != " << Block);
  detail::check_liere_args(geo, params.size(), positions.size(), tokens, "liere_table_forward");
  const int nb = geo.num_blocks(), dim = geo.dim, rows = geo.sets * tokens;
  LIERE_ENSURE(table.tokens == rows && table.head_dim == geo.head_dim && table.block == Block,
               "liere_table_forward: the table is (" << table.tokens << ", " << table.head_dim << ", " << table.block
                                                     << "), expected (" << rows << ", " << geo.head_dim << ", " << Block
                                                     << ")");
  const std::vector<M> g = detail::liere_generators<Block, double>(params, geo.sets * dim, nb);
  const std::int64_t work = std::int64_t(rows) * nb;
  {
    M a(Block, Block), r(Block, Block);
    detail::T18Work<M> w;
    if constexpr (Block > 16) w.resize(Block, false);
    for (std::int64_t i = 0; i < work; ++i) {
      const int row = int(i / nb), k = int(i % nb), set = row / tokens, t = row % tokens;
      detail::liere_block_generator<Block, double>(g, positions.data() + std::size_t(t) * dim, dim, nb, k, a,
                                                   std::size_t(set) * dim * nb);
      detail::liere_block_exp<Block>(a, r, &w);
      Eigen::Map<Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>>(table.block_data(row, k)) =
          r.template cast<Scalar>();
    }
  }
}

// dparams += d(loss)/d(params) given dtable = d(loss)/d(table) (rows (sets, tokens)), summed in double, on the
// calling thread (the reference of backend/cpu/rotation_table.hpp's rotation_table_backward).
template <int Block, class Scalar>
void liere_table_backward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                          int tokens, RotationTableView<const Scalar> dtable, std::span<Scalar> dparams) {
  using W = Scalar;  // the backward runs in the precision of the model
  using M = detail::BlockMat<Block, W>;
  using Acc = detail::BlockMat<Block, double>;
  LIERE_ENSURE(geo.block == Block, "liere_table_backward: geometry block " << geo.block << " != " << Block);
  detail::check_liere_args(geo, params.size(), positions.size(), tokens, "liere_table_backward");
  LIERE_ENSURE(dparams.size() == params.size(),
               "liere_table_backward: dparams has " << dparams.size() << " values, params " << params.size());
  const int nb = geo.num_blocks(), dim = geo.dim, rows = geo.sets * tokens;
  LIERE_ENSURE(dtable.tokens == rows && dtable.head_dim == geo.head_dim && dtable.block == Block,
               "liere_table_backward: dtable is (" << dtable.tokens << ", " << dtable.head_dim << ", "
                                                   << dtable.block << "), expected (" << rows << ", " << geo.head_dim
                                                   << ", " << Block << ")");
  const std::size_t nmat = std::size_t(geo.sets) * dim * nb;
  const std::vector<M> g = detail::liere_generators<Block, W>(params, geo.sets * dim, nb);
  const std::int64_t work = std::int64_t(rows) * nb;
  std::vector<Acc> dg(nmat, Acc::Zero(Block, Block));
  {
    M a(Block, Block), dr(Block, Block), l(Block, Block), at(Block, Block), r(Block, Block);
    detail::T18Work<M> w;
    if constexpr (Block > 16) w.resize(Block, true);
    for (std::int64_t i = 0; i < work; ++i) {
      const int row = int(i / nb), k = int(i % nb), set = row / tokens, t = row % tokens;
      const Scalar* p = positions.data() + std::size_t(t) * dim;
      const std::size_t base = std::size_t(set) * dim * nb;
      detail::liere_block_generator<Block, W>(g, p, dim, nb, k, a, base);
      dr = Eigen::Map<const Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>>(dtable.block_data(row, k))
               .template cast<W>();
      detail::liere_block_exp_adjoint<Block, W>(a, dr, l, at, r, &w);
      for (int ax = 0; ax < dim; ++ax) dg[base + std::size_t(ax) * nb + k] += double(p[ax]) * l.template cast<double>();
    }
  }
  // Through hat's adjoint: dw(r,c) += dA(r,c) − dA(c,r).
  constexpr int ppb = so_dim(Block);
  for (std::size_t j = 0; j < nmat; ++j) hat_backward(dg[j], Block, dparams.data() + j * ppb);
}

// Runtime block size (geo.block): one switch (pe/blocks.hpp) over the compiled sizes.
template <class Scalar>
void liere_table_forward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                         int tokens, RotationTableView<Scalar> table) {
  dispatch_block(geo.block, [&](auto b) {
    liere_table_forward<decltype(b)::value, Scalar>(geo, params, positions, tokens, table);
  });
}
template <class Scalar>
void liere_table_backward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                          int tokens, RotationTableView<const Scalar> dtable, std::span<Scalar> dparams) {
  dispatch_block(geo.block, [&](auto b) {
    liere_table_backward<decltype(b)::value, Scalar>(geo, params, positions, tokens, dtable, dparams);
  });
}

// The same into a RotationTable, resized to (sets · tokens) rows when needed.
template <class Scalar>
void liere_table_forward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                         int tokens, RotationTable<Scalar>& table) {
  dispatch_block(geo.block, [&](auto b) {  // an unsupported block size is reported as such, before any resize
    if (table.tokens() != geo.sets * tokens || table.head_dim() != geo.head_dim || table.block() != geo.block)
      table.resize(geo.sets * tokens, geo.head_dim, geo.block);
    liere_table_forward<decltype(b)::value, Scalar>(geo, params, positions, tokens, table.view());
  });
}
template <class Scalar>
void liere_table_backward(const LieREGeometry& geo, std::span<const Scalar> params, std::span<const Scalar> positions,
                          int tokens, const RotationTable<Scalar>& dtable, std::span<Scalar> dparams) {
  liere_table_backward<Scalar>(geo, params, positions, tokens, dtable.view(), dparams);
}

// Fills params with U[0, scale): the official code and the paper use scale 2π ("RoPE-Mixed drew random
// angles from zero to 2π"); paper Table 7 compares with scale 1. Deterministic for a seed.
template <class Scalar>
void liere_init_uniform(std::span<Scalar> params, double scale, std::uint64_t seed) {
  Rng rng(seed);
  for (Scalar& w : params) w = Scalar(rng.uniform(0.0, scale));
}

template <int Dim, int HeadDim, int Block = HeadDim, class Scalar = float>
class LieRE {
  static_assert(Dim >= 1, "LieRE: Dim (the number of position axes) must be at least 1");
  static_assert(Block >= 2, "LieRE: Block must be at least 2");
  static_assert(HeadDim % Block == 0, "LieRE: Block must divide HeadDim");
  static_assert(std::is_floating_point_v<Scalar>, "LieRE: Scalar must be float or double");

 public:
  static constexpr int dim = Dim;
  static constexpr int head_dim = HeadDim;
  static constexpr int block = Block;
  static constexpr int num_blocks = HeadDim / Block;
  static constexpr int params_per_block = so_dim(Block);
  static constexpr int num_params = Dim * num_blocks * params_per_block;

  using Position = Eigen::Matrix<Scalar, Dim, 1>;
  using Matrix = Eigen::Matrix<Scalar, HeadDim, HeadDim>;
  using Table = RotationTable<Scalar>;

  // All parameters zero: every rotation is the identity. Call init_uniform for the paper's init.
  LieRE() : params_(num_params, Scalar(0)) {}

  std::span<Scalar> params() { return params_; }
  std::span<const Scalar> params() const { return params_; }

  // U[0, scale) on every parameter (default 2π, as the paper and the official code).
  void init_uniform(double scale = 2 * std::numbers::pi, std::uint64_t seed = 0) {
    liere_init_uniform<Scalar>(params_, scale, seed);
  }

  // Σ_i p_i A_i, dense.
  Matrix generator(const Position& p) const {
    const auto g = detail::liere_generators<Block, double>(params(), Dim, num_blocks);
    Matrix out = Matrix::Zero();
    detail::BlockMat<Block, double> a(Block, Block);
    for (int k = 0; k < num_blocks; ++k) {
      detail::liere_block_generator<Block, double>(g, p.data(), Dim, num_blocks, k, a);
      out.template block<Block, Block>(k * Block, k * Block) = a.template cast<Scalar>();
    }
    return out;
  }

  // exp(Σ_i p_i A_i), dense.
  Matrix rotation(const Position& p) const {
    Table t;
    rotation_table(std::span<const Scalar>(p.data(), Dim), 1, t);
    return t.matrix(0);
  }

  // dw += dL/dparams given dL/dR (dense HeadDim×HeadDim; entries outside the diagonal blocks do not
  // depend on the parameters and are ignored).
  void rotation_backward(const Position& p, const Matrix& dr, std::span<Scalar> dw) const {
    Table dt(1, HeadDim, Block);
    for (int k = 0; k < num_blocks; ++k)
      Eigen::Map<Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>>(dt.block_data(0, k)) =
          dr.template block<Block, Block>(k * Block, k * Block);
    rotation_table_backward(std::span<const Scalar>(p.data(), Dim), 1, dt, dw);
  }

  // Rotation tables for T positions at once; positions (T, Dim) row-major.
  void rotation_table(std::span<const Scalar> positions, int tokens, Table& table) const {
    if (table.tokens() != tokens || table.head_dim() != HeadDim || table.block() != Block)
      table.resize(tokens, HeadDim, Block);
    liere_table_forward<Block, Scalar>(geometry(), params(), positions, tokens, table.view());
  }
  void rotation_table_backward(std::span<const Scalar> positions, int tokens, const Table& dtable,
                               std::span<Scalar> dw) const {
    liere_table_backward<Block, Scalar>(geometry(), params(), positions, tokens, dtable.view(), dw);
  }
  static constexpr LieREGeometry geometry() { return {1, Dim, HeadDim, Block}; }

 private:
  std::vector<Scalar> params_;  // [Dim][HeadDim/Block][Block(Block−1)/2]
};

// Explicit instances for programs that link liere::compiled: the table kernels of every block size, compiled once
// there (pe/liere_forward.cpp, pe/liere_backward.cpp) instead of in every file that uses LieRE or an encoding. By
// direction, not by scalar: the forward computes in double for both scalars, so its exponentials are compiled once.
#define LIERE_TABLE_FORWARD_INSTANCES_FOR_BLOCK(EXTERN, B, S)                                                    \
  EXTERN template void liere_table_forward<B, S>(const LieREGeometry&, std::span<const S>, std::span<const S>, int, \
                                                  RotationTableView<S>);
#define LIERE_TABLE_BACKWARD_INSTANCES_FOR_BLOCK(EXTERN, B, S)                                                    \
  EXTERN template void liere_table_backward<B, S>(const LieREGeometry&, std::span<const S>, std::span<const S>, int, \
                                                   RotationTableView<const S>, std::span<S>);
#define LIERE_TABLE_DIRECTION_INSTANCES(DIR, EXTERN, S)                                                           \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 2, S)                                                           \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 3, S)                                                           \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 4, S)                                                           \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 8, S)                                                           \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 16, S)                                                          \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 32, S)                                                          \
  LIERE_TABLE_##DIR##_INSTANCES_FOR_BLOCK(EXTERN, 64, S)
#define LIERE_TABLE_FORWARD_INSTANCES(EXTERN, S)                                                                  \
  LIERE_TABLE_DIRECTION_INSTANCES(FORWARD, EXTERN, S)                                                             \
  EXTERN template void liere_table_forward<S>(const LieREGeometry&, std::span<const S>, std::span<const S>, int,    \
                                               RotationTableView<S>);
#define LIERE_TABLE_BACKWARD_INSTANCES(EXTERN, S)                                                                 \
  LIERE_TABLE_DIRECTION_INSTANCES(BACKWARD, EXTERN, S)                                                            \
  EXTERN template void liere_table_backward<S>(const LieREGeometry&, std::span<const S>, std::span<const S>, int,   \
                                                RotationTableView<const S>, std::span<S>);
#define LIERE_TABLE_INSTANCES(EXTERN, S)                                                                          \
  LIERE_TABLE_FORWARD_INSTANCES(EXTERN, S) LIERE_TABLE_BACKWARD_INSTANCES(EXTERN, S)
// Not under LIERE_COUNT_FLOPS: the tables' products must be compiled with the counter (lie/exp.hpp).
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
LIERE_TABLE_INSTANCES(extern, float)
LIERE_TABLE_INSTANCES(extern, double)
#endif

}  // namespace liere
