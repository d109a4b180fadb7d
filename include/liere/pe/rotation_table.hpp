// liere/pe/rotation_table.hpp — block-diagonal rotations for many tokens, and applying them to q/k buffers.
//
// A RotationTable holds, for each of `tokens` rows, the HeadDim/Block diagonal blocks of a block-diagonal
// rotation: layout (tokens, HeadDim/Block, Block, Block), each block row-major. No dense HeadDim² matrix
// per token is stored when Block < HeadDim.
//
// Buffers follow one convention (B batch, T tokens, H heads, D head dim):
//   x, y, dx, dy   (B, T, H, D) row-major, e.g. the q or k of an attention layer
// A table has T rows (the same positions for every sequence of the batch) or B·T rows (one set of positions
// per sequence, (B, T) order).
//
//   rotate           y[b,t,h,:]  = R(t) · x[b,t,h,:]                          (for one head h, or all heads)
//   rotate_backward  dx[b,t,h,:] += R(t)ᵀ · dy[b,t,h,:],   dR(t) += Σ_b,h dy xᵀ   (both accumulate)
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <liere/config.hpp>
#include <liere/pe/blocks.hpp>
#include <span>
#include <type_traits>
#include <vector>

namespace liere {

inline constexpr int kAllHeads = -1;

// A non-owning view of consecutive rows of a table (Scalar may be const): what rotate() reads and
// rotate_backward() accumulates into, so one table of (sets × T) rows can serve several heads.
template <class Scalar>
struct RotationTableView {
  Scalar* data = nullptr;  // (tokens, head_dim/block, block, block)
  int tokens = 0, head_dim = 0, block = 0;

  int num_blocks() const { return block ? head_dim / block : 0; }
  Scalar* block_data(int t, int k) const { return data + (std::size_t(t) * num_blocks() + k) * block * block; }
  explicit operator bool() const { return data != nullptr; }
  // A mutable view converts to a read-only one.
  operator RotationTableView<const Scalar>() const
    requires(!std::is_const_v<Scalar>)
  {
    return {data, tokens, head_dim, block};
  }
};

template <class Scalar>
class RotationTable {
 public:
  RotationTable() = default;
  RotationTable(int tokens, int head_dim, int block) { resize(tokens, head_dim, block); }

  void resize(int tokens, int head_dim, int block) {
    LIERE_ENSURE(tokens >= 0 && head_dim > 0 && block > 0 && head_dim % block == 0,
                 "RotationTable: block " << block << " must divide head_dim " << head_dim << " (tokens " << tokens
                                         << ")");
    tokens_ = tokens;
    head_dim_ = head_dim;
    block_ = block;
    data_.assign(std::size_t(tokens) * head_dim * block, Scalar(0));
  }
  void set_zero() { std::fill(data_.begin(), data_.end(), Scalar(0)); }
  void set_identity() {
    set_zero();
    for (int t = 0; t < tokens_; ++t)
      for (int k = 0; k < num_blocks(); ++k)
        for (int i = 0; i < block_; ++i) block_data(t, k)[i * block_ + i] = Scalar(1);
  }

  int tokens() const { return tokens_; }
  int head_dim() const { return head_dim_; }
  int block() const { return block_; }
  int num_blocks() const { return block_ ? head_dim_ / block_ : 0; }

  Scalar* block_data(int t, int k) { return data_.data() + (std::size_t(t) * num_blocks() + k) * block_ * block_; }
  const Scalar* block_data(int t, int k) const {
    return data_.data() + (std::size_t(t) * num_blocks() + k) * block_ * block_;
  }
  std::span<Scalar> data() { return data_; }
  std::span<const Scalar> data() const { return data_; }

  // Rows [first, first + count) (count −1: to the end).
  RotationTableView<Scalar> view(int first = 0, int count = -1) {
    if (count < 0) count = tokens_ - first;
    LIERE_ENSURE(first >= 0 && first + count <= tokens_,
                 "RotationTable::view: rows [" << first << ", " << first + count << ") out of [0, " << tokens_ << ")");
    return {data_.data() + std::size_t(first) * head_dim_ * block_, count, head_dim_, block_};
  }
  RotationTableView<const Scalar> view(int first = 0, int count = -1) const {
    if (count < 0) count = tokens_ - first;
    LIERE_ENSURE(first >= 0 && first + count <= tokens_,
                 "RotationTable::view: rows [" << first << ", " << first + count << ") out of [0, " << tokens_ << ")");
    return {data_.data() + std::size_t(first) * head_dim_ * block_, count, head_dim_, block_};
  }

  // Dense HeadDim×HeadDim rotation of row t (for tests, diagnostics and small users).
  Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic> matrix(int t) const {
    LIERE_ENSURE(t >= 0 && t < tokens_, "RotationTable::matrix: row " << t << " out of range [0, " << tokens_ << ")");
    Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic> m =
        Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>::Zero(head_dim_, head_dim_);
    for (int k = 0; k < num_blocks(); ++k)
      m.block(k * block_, k * block_, block_, block_) =
          Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(block_data(t, k),
                                                                                                 block_, block_);
    return m;
  }

 private:
  int tokens_ = 0, head_dim_ = 0, block_ = 0;
  std::vector<Scalar> data_;  // (tokens, head_dim/block, block, block)
};

// Where element (b, t, h, i) of a (B, T, H, D) buffer lives: b·batch + t·token + h·D + i. Contiguous buffers
// have token = H·D and batch = T·H·D; a packed qkv buffer has token = 3·H·D.
struct HeadsLayout {
  std::int64_t batch = 0, token = 0;
  static HeadsLayout contiguous(int tokens, int heads, int head_dim) {
    return {std::int64_t(tokens) * heads * head_dim, std::int64_t(heads) * head_dim};
  }
};

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

// y = R·x for one block size known at compile time; x and y may be the same buffer.
template <int Block, class Scalar>
void rotate_impl(const RotationTableView<const Scalar>& table, const Scalar* x, HeadsLayout xl, Scalar* y,
                 HeadsLayout yl, int batch, int tokens, int heads, int head) {
  using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
  using Cols = Eigen::Matrix<Scalar, Block, Eigen::Dynamic>;
  using Strided = Eigen::OuterStride<>;
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1, nh = h1 - h0;
  if (table.tokens == tokens) {
    // Shared table: for each (t, h, k) one product R (Block×Block) · X (Block×B), X strided over the batch.
    const std::int64_t work = std::int64_t(tokens) * nh;
#pragma omp parallel
    {
      Cols tmp(Block, batch);
#pragma omp for schedule(static)
      for (std::int64_t w = 0; w < work; ++w) {
        const int t = int(w / nh), h = h0 + int(w % nh);
        for (int k = 0; k < nb; ++k) {
          const Eigen::Map<const RowMat> r(table.block_data(t, k));
          const std::int64_t col = std::int64_t(h) * d + std::int64_t(k) * Block;
          Eigen::Map<const Cols, 0, Strided> xs(x + t * xl.token + col, Block, batch, Strided(xl.batch));
          Eigen::Map<Cols, 0, Strided> ys(y + t * yl.token + col, Block, batch, Strided(yl.batch));
          tmp.noalias() = r * xs;  // through a temporary: y may alias x
          ys = tmp;
        }
      }
    }
  } else {
    // One table row per (b, t).
    const std::int64_t work = std::int64_t(batch) * tokens;
#pragma omp parallel for schedule(static)
    for (std::int64_t w = 0; w < work; ++w) {
      const std::int64_t b = w / tokens, t = w % tokens;
      Eigen::Matrix<Scalar, Block, 1> tmp;
      for (int h = h0; h < h1; ++h)
        for (int k = 0; k < nb; ++k) {
          const Eigen::Map<const RowMat> r(table.block_data(int(w), k));
          const std::int64_t col = std::int64_t(h) * d + std::int64_t(k) * Block;
          tmp.noalias() = r * Eigen::Map<const Eigen::Matrix<Scalar, Block, 1>>(x + b * xl.batch + t * xl.token + col);
          Eigen::Map<Eigen::Matrix<Scalar, Block, 1>>(y + b * yl.batch + t * yl.token + col) = tmp;
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
  using Cols = Eigen::Matrix<Scalar, Block, Eigen::Dynamic>;
  using Strided = Eigen::OuterStride<>;
  const int d = table.head_dim, nb = table.num_blocks();
  const int h0 = head == kAllHeads ? 0 : head, h1 = head == kAllHeads ? heads : head + 1;
  if (table.tokens == tokens) {
    // Parallel over t: every dR(t) is written by one thread, heads summed in order (deterministic).
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tokens; ++t) {
      for (int h = h0; h < h1; ++h)
        for (int k = 0; k < nb; ++k) {
          const std::int64_t col = std::int64_t(h) * d + std::int64_t(k) * Block;
          Eigen::Map<const Cols, 0, Strided> dys(dy + t * dyl.token + col, Block, batch, Strided(dyl.batch));
          if (dx) {
            Eigen::Map<Cols, 0, Strided> dxs(dx + t * dxl.token + col, Block, batch, Strided(dxl.batch));
            dxs.noalias() += Eigen::Map<const RowMat>(table.block_data(t, k)).transpose() * dys;
          }
          if (dtable) {
            Eigen::Map<const Cols, 0, Strided> xs(x + t * xl.token + col, Block, batch, Strided(xl.batch));
            Eigen::Map<RowMat>(dtable.block_data(t, k)).noalias() += dys * xs.transpose();
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

// y = R·x blockwise for head `head` (or every head with kAllHeads). x and y are contiguous (B, T, H, D);
// y may be x.
template <class Scalar>
void rotate(RotationTableView<const Scalar> table, const Scalar* x, Scalar* y, int batch, int tokens, int heads,
            int head = kAllHeads) {
  const HeadsLayout l = HeadsLayout::contiguous(tokens, heads, table.head_dim);
  rotate(table, x, l, y, l, batch, tokens, heads, head);
}
template <class Scalar>
void rotate(const RotationTable<Scalar>& table, const Scalar* x, Scalar* y, int batch, int tokens, int heads,
            int head = kAllHeads) {
  rotate(table.view(), x, y, batch, tokens, heads, head);
}

// dx += Rᵀ·dy and dtable += dy·xᵀ (summed over the batch and the heads rotated). dx or dtable may be null.
// x must be the input of the forward rotate (not its output). Contiguous (B, T, H, D) buffers.
template <class Scalar>
void rotate_backward(RotationTableView<const Scalar> table, const Scalar* x, const Scalar* dy, Scalar* dx,
                     RotationTableView<Scalar> dtable, int batch, int tokens, int heads, int head = kAllHeads) {
  const HeadsLayout l = HeadsLayout::contiguous(tokens, heads, table.head_dim);
  rotate_backward(table, x, l, dy, l, dx, l, dtable, batch, tokens, heads, head);
}
template <class Scalar>
void rotate_backward(const RotationTable<Scalar>& table, const Scalar* x, const Scalar* dy, Scalar* dx,
                     RotationTable<Scalar>* dtable, int batch, int tokens, int heads, int head = kAllHeads) {
  rotate_backward(table.view(), x, dy, dx, dtable ? dtable->view() : RotationTableView<Scalar>{}, batch, tokens, heads,
                  head);
}

}  // namespace liere
