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
// batch; larger ones, with a table shared by the batch, as one product per (token, block) over the batch's rows,
// in place on the strided buffers, the tokens' products spread over the threads: y = X·R(t)ᵀ and dx += dY·R(t)
// as row panels in registers (backend/cpu/row_panels.hpp: these rows are a sequence apart, memory-bound, and the
// forward is a transposed product), dR(t) += dYᵀ·X as the GEMMs of backend/rotate_gemms.hpp (the GPU runs all
// three there, on cuBLAS). The row kernels are also used by the fused attention path (backend/cpu/attention.hpp).
#pragma once

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <cstdint>
#include <liere/backend/cpu/gemm.hpp>
#include <liere/backend/cpu/row_panels.hpp>
#include <liere/backend/rotate_gemms.hpp>
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

// Blocks up to this size go through the row kernels below, larger ones through row_panels.hpp and rotate_gemms.hpp.
inline constexpr int kRowKernelMaxBlock = kGemmRotationAbove;

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

// The products of backend/rotate_gemms.hpp on the CPU: a batch's products (each writing its own C) spread over
// the threads, each through gemm() on its thread.
template <class Scalar>
struct ThreadedGemms {
  void operator()(bool ta, bool tb, Index M, Index N, Index K, const Scalar* A, Index lda, const Scalar* B, Index ldb,
                  Scalar beta, Scalar* C, Index ldc, GemmBatch batch) const {
    const Index n = batch.count > 0 ? batch.count : 1;
#pragma omp parallel for schedule(static)
    for (Index i = 0; i < n; ++i)
      gemm<Scalar>(ta, tb, M, N, K, Scalar(1), A + i * batch.a, lda, B + i * batch.b, ldb, beta, C + i * batch.c, ldc);
  }
};

// y = R·x for one block size known at compile time; x and y may be the same buffer.
template <int Block, class Scalar>
void rotate_impl(const RotationTableView<const Scalar>& table, const Scalar* x, HeadsLayout xl, Scalar* y,
                 HeadsLayout yl, int batch, int tokens, int heads, int head) {
  using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<Scalar, Block, 1>;
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1, nh = h1 - h0;
  if constexpr (Block > kRowKernelMaxBlock) {
    if (table.tokens == tokens) {
      // Shared table, large blocks: per head, one product of the batch's rows by R(t)'s block transposed for each
      // (token, block), row_panels.hpp, spread over the threads. In place (y is x), the head's rows go through a
      // contiguous copy first.
      std::vector<Scalar> copy;
      const HeadsLayout cl = HeadsLayout::contiguous(tokens, 1, d);
      const std::int64_t work = std::int64_t(tokens) * nb;
      for (int h = h0; h < h1; ++h) {
        const Scalar* xh = x + std::int64_t(h) * d;
        Scalar* yh = y + std::int64_t(h) * d;
        HeadsLayout xhl = xl;
        if (x == y) {
          copy.resize(std::size_t(batch) * tokens * d);
          for (int b = 0; b < batch; ++b)
            for (int t = 0; t < tokens; ++t)
              std::copy_n(xh + b * xl.batch + t * xl.token, d, copy.data() + b * cl.batch + t * cl.token);
          xh = copy.data(), xhl = cl;
        }
#pragma omp parallel
        {
          RowMat rt;  // R(t)'s block k transposed: y = x·Rᵀ
#pragma omp for schedule(static)
          for (std::int64_t w = 0; w < work; ++w) {
            const int t = int(w / nb), k = int(w % nb);
            // Rᵀ by rows of R: the table's block read in order (it comes from memory), rt's columns written in L1.
            // (Eigen's assignment walked R by columns: a third of the forward's time in the LieRE-64 step.)
            const Scalar* rb = table.block_data(t, k);
            for (int i = 0; i < Block; ++i)
              for (int j = 0; j < Block; ++j) rt(j, i) = rb[i * Block + j];
            rows_times_block<Block>(batch, xh + t * xhl.token + k * Block, xhl.batch, rt.data(),
                                    yh + t * yl.token + k * Block, yl.batch, false);
          }
        }
      }
      return;
    }
  }
  if (table.tokens == tokens) {
    // Shared table, small blocks: per (t, h) the B rows x(b, t, h, :), R(t) reused for all of them.
    const std::int64_t work = std::int64_t(tokens) * nh;
#pragma omp parallel
    {
      std::vector<ColBlock<Block, Scalar>> rc(nb);  // R(t)'s blocks, column-major
#pragma omp for schedule(static)
      for (std::int64_t w = 0; w < work; ++w) {
        const int t = int(w / nh), h = h0 + int(w % nh);
        const Scalar* xt = x + t * xl.token + std::int64_t(h) * d;
        Scalar* yt = y + t * yl.token + std::int64_t(h) * d;
        for (int k = 0; k < nb; ++k) rc[k] = Eigen::Map<const RowMat>(table.block_data(t, k));
        for (int b = 0; b < batch; ++b) {
          if (b + kPrefetchAhead < batch) prefetch_row(xt + (b + kPrefetchAhead) * xl.batch, d);
          rotate_row<Block>(rc.data(), nb, xt + b * xl.batch, yt + b * yl.batch);
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
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1;
  if constexpr (Block > kRowKernelMaxBlock) {
    if (table.tokens == tokens) {
      // Shared table, large blocks: per head, dx += dY·R as one row-panel product per (token, block) over the
      // threads (row_panels.hpp), dR += dYᵀ·X as the strided batch of GEMMs of rotate_gemms.hpp (the GEMM library
      // is as fast there); every dR(t) is one product's, the heads added in order (deterministic).
      const std::int64_t work = std::int64_t(tokens) * nb;
      for (int h = h0; h < h1; ++h) {
        const std::int64_t col = std::int64_t(h) * d;
        if (dx) {
#pragma omp parallel for schedule(static)
          for (std::int64_t w = 0; w < work; ++w) {
            const int t = int(w / nb), k = int(w % nb);
            rows_times_block<Block>(batch, dy + col + t * dyl.token + k * Block, dyl.batch, table.block_data(t, k),
                                    dx + col + t * dxl.token + k * Block, dxl.batch, true);
          }
        }
        if (dtable) rotate_grad_gemms<Scalar>(dtable, dy + col, dyl, x + col, xl, batch, ThreadedGemms<Scalar>{});
      }
      return;
    }
  }
  if (table.tokens == tokens) {
    // Shared table, small blocks. Parallel over t: every dR(t) is written by one thread, sequences and heads
    // summed in order (deterministic). Per (t, h) as in the forward: R(t) and dR(t) stay in cache across the batch.
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tokens; ++t) {
      for (int h = h0; h < h1; ++h) {
        const std::int64_t col = std::int64_t(h) * d;
        const Scalar* xt = x + t * xl.token + col;
        const Scalar* dyt = dy + t * dyl.token + col;
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
