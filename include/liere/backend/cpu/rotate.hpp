// liere/backend/cpu/rotate.hpp — applying rotation tables to q/k buffers on the CPU, and the backward.
//
// Buffers follow one convention (B batch, T tokens, H heads, D head dim):
//   x, y, dx, dy   (B, T, H, D), each with its own HeadsLayout (backend/types.hpp): contiguous, or strided
//                  inside a packed qkv buffer
// A table (pe/rotation_table.hpp) has T rows (shared by the batch) or B·T rows (one per sequence).
//
//   rotate           y[b,t,h,:]  = R(t) · x[b,t,h,:]                          (for one head h, or all heads)
//   rotate_backward  dx[b,t,h,:] += R(t)ᵀ · dy[b,t,h,:],   dR(t) += Σ_b,h dy xᵀ   (both accumulate)
//
// Blocks up to kRowKernelMaxBlock are applied row by row with fixed-size products, R(t) held in L1 across the
// batch; larger ones gather the batch's rows of one (t, h) into a (B, D) panel and go through one GEMM per
// block. The row kernels are also used by the fused attention path (backend/cpu/attention.hpp).
#pragma once

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <cstdint>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/blocks.hpp>
#include <liere/pe/rotation_table.hpp>
#include <vector>

namespace liere::cpu {

namespace detail {

template <class Scalar>
void check_rotate_args(const RotationTableView<const Scalar>& table, int batch, int tokens, int heads, int head,
                       const char* who) {
  LIERE_ENSURE(batch >= 0 && tokens >= 0 && heads > 0, who << ": bad sizes B=" << batch << " T=" << tokens << " H=" << heads);
  LIERE_ENSURE(head == kAllHeads || (head >= 0 && head < heads),
               who << ": head " << head << " out of range [0, " << heads << ")");
  LIERE_ENSURE(table.tokens == tokens || table.tokens == batch * tokens,
               who << ": the table has " << table.tokens << " rows but the buffers have T=" << tokens << " tokens (B="
                   << batch << "); expected " << tokens << " or " << batch * tokens << " rows");
}

// Blocks up to this size go through the row kernels below.
inline constexpr int kRowKernelMaxBlock = 16;

template <int Block, class Scalar>
using ColBlock = Eigen::Matrix<Scalar, Block, Block, Eigen::ColMajor>;

// The blocks of table rows [0, tokens) transposed to column-major, (tokens, D/b): R·x is then a sum of R's
// columns (vector FMAs, no horizontal adds). For the row kernels below.
template <int Block, class Scalar>
void column_major_blocks(const RotationTableView<const Scalar>& table, std::vector<ColBlock<Block, Scalar>>& out) {
  using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
  const int nb = table.num_blocks();
  out.resize(std::size_t(table.tokens) * nb);
  for (int t = 0; t < table.tokens; ++t)
    for (int k = 0; k < nb; ++k) out[std::size_t(t) * nb + k] = Eigen::Map<const RowMat>(table.block_data(t, k));
}

// One row of D = nb·Block values (one token of one head): y = R·x, R's blocks column-major (rc); y may be x.
template <int Block, class Scalar>
inline void rotate_row(const ColBlock<Block, Scalar>* rc, int nb, const Scalar* x, Scalar* y) {
  using Vec = Eigen::Matrix<Scalar, Block, 1>;
  for (int k = 0; k < nb; ++k) {
    const Vec v = rc[k].lazyProduct(Eigen::Map<const Vec>(x + k * Block));  // a temporary: y may alias x
    Eigen::Map<Vec>(y + k * Block) = v;
  }
}
// dx += Rᵀ·dy, R's blocks row-major as stored (r): Rᵀ is the column-major view of the same data.
template <int Block, class Scalar>
inline void rotate_row_backward(const Scalar* r, int nb, const Scalar* dy, Scalar* dx) {
  using Vec = Eigen::Matrix<Scalar, Block, 1>;
  for (int k = 0; k < nb; ++k)
    Eigen::Map<Vec>(dx + k * Block).noalias() +=
        Eigen::Map<const ColBlock<Block, Scalar>>(r + k * Block * Block).lazyProduct(Eigen::Map<const Vec>(dy + k * Block));
}
// dR += dy·xᵀ blockwise (dr row-major blocks, as stored).
template <int Block, class Scalar>
inline void rotate_row_grad(const Scalar* dy, const Scalar* x, int nb, Scalar* dr) {
  for (int k = 0; k < nb; ++k, dr += Block * Block, dy += Block, x += Block)
    for (int i = 0; i < Block; ++i) {
      const Scalar g = dy[i];
#pragma omp simd
      for (int j = 0; j < Block; ++j) dr[i * Block + j] += g * x[j];
    }
}
// dR += Σ_r dy_r·x_rᵀ blockwise over `rows` rows of D values, `stride` apart in two row-major panels: per
// block, the Block×Block sum stays in registers across the rows (small blocks).
template <int Block, class Scalar>
inline void rotate_rows_grad(const Scalar* dy, const Scalar* x, int rows, std::int64_t stride, int d, Scalar* dr) {
  const int nb = d / Block;
  for (int k = 0; k < nb; ++k, dr += Block * Block) {
    Scalar acc[Block * Block];
    std::copy_n(dr, Block * Block, acc);
    for (int r = 0; r < rows; ++r) {
      const Scalar* g = dy + r * stride + k * Block;
      const Scalar* xr = x + r * stride + k * Block;
      for (int i = 0; i < Block; ++i) {
        const Scalar gi = g[i];
#pragma omp simd
        for (int j = 0; j < Block; ++j) acc[i * Block + j] += gi * xr[j];
      }
    }
    std::copy_n(acc, Block * Block, dr);
  }
}
// Rows a sequence stride apart miss every cache and TLB level (no hardware prefetcher follows them): fetch
// the row `ahead` sequences on early.
template <class Scalar>
inline void prefetch_row(const Scalar* row, int d) {
  for (int i = 0; i < d; i += int(64 / sizeof(Scalar))) __builtin_prefetch(row + i);
}
inline constexpr int kPrefetchAhead = 4;

// The rows x(b, t, h, :) for b = 0…B−1 (stride `stride` between sequences) into a (B, D) row-major panel.
template <class Scalar, class Panel>
void gather_rows(const Scalar* x, std::int64_t stride, int batch, int d, Panel& p) {
  p.resize(batch, d);
  for (int b = 0; b < batch; ++b) std::copy_n(x + b * stride, d, p.data() + std::int64_t(b) * d);
}

// y = R·x for one block size known at compile time; x and y may be the same buffer.
template <int Block, class Scalar>
void rotate_impl(const RotationTableView<const Scalar>& table, const Scalar* x, HeadsLayout xl, Scalar* y,
                 HeadsLayout yl, int batch, int tokens, int heads, int head) {
  using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<Scalar, Block, 1>;
  using Panel = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1, nh = h1 - h0;
  if (table.tokens == tokens) {
    // Shared table: per (t, h) the B rows x(b, t, h, :), R(t) reused for all of them.
    const std::int64_t work = std::int64_t(tokens) * nh;
#pragma omp parallel
    {
      std::vector<ColBlock<Block, Scalar>> rc(nb);  // R(t)'s blocks, column-major (small blocks)
      Panel xp, yp;                                 // (B, D) gathered rows (large blocks)
#pragma omp for schedule(static)
      for (std::int64_t w = 0; w < work; ++w) {
        const int t = int(w / nh), h = h0 + int(w % nh);
        const Scalar* xt = x + t * xl.token + std::int64_t(h) * d;
        Scalar* yt = y + t * yl.token + std::int64_t(h) * d;
        if constexpr (Block <= kRowKernelMaxBlock) {
          for (int k = 0; k < nb; ++k) rc[k] = Eigen::Map<const RowMat>(table.block_data(t, k));
          for (int b = 0; b < batch; ++b) {
            if (b + kPrefetchAhead < batch) prefetch_row(xt + (b + kPrefetchAhead) * xl.batch, d);
            rotate_row<Block>(rc.data(), nb, xt + b * xl.batch, yt + b * yl.batch);
          }
        } else {
          gather_rows(xt, xl.batch, batch, d, xp);
          yp.resize(batch, d);
          for (int k = 0; k < nb; ++k)  // Y_k (B, b) = X_k · R_kᵀ
            yp.middleCols(k * Block, Block).noalias() =
                xp.middleCols(k * Block, Block) * Eigen::Map<const RowMat>(table.block_data(t, k)).transpose();
          for (int b = 0; b < batch; ++b) std::copy_n(yp.data() + std::int64_t(b) * d, d, yt + b * yl.batch);
        }
      }
    }
  } else {
    // One table row per (b, t).
    const std::int64_t work = std::int64_t(batch) * tokens;
#pragma omp parallel for schedule(static)
    for (std::int64_t w = 0; w < work; ++w) {
      const std::int64_t b = w / tokens, t = w % tokens;
      Vec tmp;
      for (int h = h0; h < h1; ++h)
        for (int k = 0; k < nb; ++k) {
          const Eigen::Map<const RowMat> r(table.block_data(int(w), k));
          const std::int64_t col = std::int64_t(h) * d + std::int64_t(k) * Block;
          tmp.noalias() = r * Eigen::Map<const Vec>(x + b * xl.batch + t * xl.token + col);
          Eigen::Map<Vec>(y + b * yl.batch + t * yl.token + col) = tmp;
        }
    }
  }
}

// dx += Rᵀ·dy and dtable += dy·xᵀ; x is the input of the forward rotation.
template <int Block, class Scalar>
void rotate_backward_impl(const RotationTableView<const Scalar>& table, const Scalar* x, HeadsLayout xl,
                          const Scalar* dy, HeadsLayout dyl, Scalar* dx, HeadsLayout dxl,
                          const RotationTableView<Scalar>& dtable, int batch, int tokens, int heads, int head) {
  using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
  using Panel = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1;
  if (table.tokens == tokens) {
    // Parallel over t: every dR(t) is written by one thread, sequences and heads summed in order
    // (deterministic). Per (t, h) as in the forward: R(t) and dR(t) stay in cache across the batch.
#pragma omp parallel
    {
      Panel xp, dyp, dxp;  // (B, D) gathered rows (large blocks)
#pragma omp for schedule(static)
      for (int t = 0; t < tokens; ++t) {
        for (int h = h0; h < h1; ++h) {
          const std::int64_t col = std::int64_t(h) * d;
          const Scalar* xt = x + t * xl.token + col;
          const Scalar* dyt = dy + t * dyl.token + col;
          if constexpr (Block <= kRowKernelMaxBlock) {
            Scalar* dxt = dx ? dx + t * dxl.token + col : nullptr;
            for (int b = 0; b < batch; ++b) {
              if (b + kPrefetchAhead < batch) {
                prefetch_row(dyt + (b + kPrefetchAhead) * dyl.batch, d);
                if (dxt) prefetch_row(dxt + (b + kPrefetchAhead) * dxl.batch, d);
                if (dtable) prefetch_row(xt + (b + kPrefetchAhead) * xl.batch, d);
              }
              if (dxt) rotate_row_backward<Block>(table.block_data(t, 0), nb, dyt + b * dyl.batch, dxt + b * dxl.batch);
              if (dtable) rotate_row_grad<Block>(dyt + b * dyl.batch, xt + b * xl.batch, nb, dtable.block_data(t, 0));
            }
          } else {
            gather_rows(dyt, dyl.batch, batch, d, dyp);
            if (dx) {
              dxp.resize(batch, d);
              for (int k = 0; k < nb; ++k)  // dX_k (B, b) = dY_k · R_k
                dxp.middleCols(k * Block, Block).noalias() =
                    dyp.middleCols(k * Block, Block) * Eigen::Map<const RowMat>(table.block_data(t, k));
              Scalar* dxt = dx + t * dxl.token + col;
              for (int b = 0; b < batch; ++b) {
                Scalar* row = dxt + b * dxl.batch;
                const Scalar* src = dxp.data() + std::int64_t(b) * d;
                for (int i = 0; i < d; ++i) row[i] += src[i];
              }
            }
            if (dtable) {
              gather_rows(xt, xl.batch, batch, d, xp);
              for (int k = 0; k < nb; ++k)  // dR_k += dY_kᵀ · X_k
                Eigen::Map<RowMat>(dtable.block_data(t, k)).noalias() +=
                    dyp.middleCols(k * Block, Block).transpose() * xp.middleCols(k * Block, Block);
            }
          }
        }
      }
    }
  } else {
    const std::int64_t work = std::int64_t(batch) * tokens;
#pragma omp parallel for schedule(static)
    for (std::int64_t w = 0; w < work; ++w) {
      const std::int64_t b = w / tokens, t = w % tokens;
      for (int h = h0; h < h1; ++h)
        for (int k = 0; k < nb; ++k) {
          const std::int64_t col = std::int64_t(h) * d + std::int64_t(k) * Block;
          Eigen::Map<const Eigen::Matrix<Scalar, Block, 1>> dyv(dy + b * dyl.batch + t * dyl.token + col),
              xv(x + b * xl.batch + t * xl.token + col);
          if (dx)
            Eigen::Map<Eigen::Matrix<Scalar, Block, 1>>(dx + b * dxl.batch + t * dxl.token + col).noalias() +=
                Eigen::Map<const RowMat>(table.block_data(int(w), k)).transpose() * dyv;
          if (dtable) Eigen::Map<RowMat>(dtable.block_data(int(w), k)).noalias() += dyv * xv.transpose();
        }
    }
  }
}

}  // namespace detail

// Strided versions: x, y, dy, dx each with its own layout (see HeadsLayout).
template <class Scalar>
void rotate(RotationTableView<const Scalar> table, const Scalar* x, HeadsLayout xl, Scalar* y, HeadsLayout yl,
            int batch, int tokens, int heads, int head = kAllHeads) {
  detail::check_rotate_args(table, batch, tokens, heads, head, "rotate");
  dispatch_block(table.block, [&](auto b) {
    detail::rotate_impl<decltype(b)::value>(table, x, xl, y, yl, batch, tokens, heads, head);
  });
}
template <class Scalar>
void rotate_backward(RotationTableView<const Scalar> table, const Scalar* x, HeadsLayout xl, const Scalar* dy,
                     HeadsLayout dyl, Scalar* dx, HeadsLayout dxl, RotationTableView<Scalar> dtable, int batch,
                     int tokens, int heads, int head = kAllHeads) {
  detail::check_rotate_args(table, batch, tokens, heads, head, "rotate_backward");
  if (dtable)
    LIERE_ENSURE(dtable.tokens == table.tokens && dtable.head_dim == table.head_dim && dtable.block == table.block,
                 "rotate_backward: dtable is (" << dtable.tokens << ", " << dtable.head_dim << ", " << dtable.block
                                                << ") but the table is (" << table.tokens << ", " << table.head_dim
                                                << ", " << table.block << ")");
  dispatch_block(table.block, [&](auto b) {
    detail::rotate_backward_impl<decltype(b)::value>(table, x, xl, dy, dyl, dx, dxl, dtable, batch, tokens, heads, head);
  });
}

// Explicit instances (backend/cpu/rotate_float.cpp, rotate_double.cpp) for programs that link liere::compiled: every block size is
// compiled once there instead of in every file that rotates.
#define LIERE_CPU_ROTATE_INSTANCES(EXTERN, S)                                                                     \
  EXTERN template void rotate<S>(RotationTableView<const S>, const S*, HeadsLayout, S*, HeadsLayout, int, int, int, \
                                 int);                                                                           \
  EXTERN template void rotate_backward<S>(RotationTableView<const S>, const S*, HeadsLayout, const S*, HeadsLayout,  \
                                          S*, HeadsLayout, RotationTableView<S>, int, int, int, int);
#ifdef LIERE_PRECOMPILED
LIERE_CPU_ROTATE_INSTANCES(extern, float)
LIERE_CPU_ROTATE_INSTANCES(extern, double)
#endif

}  // namespace liere::cpu
