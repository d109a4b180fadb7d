// liere/pe/rotation_table.hpp — block-diagonal rotations for many tokens: the table an encoding computes and
// attention applies (the kernels that apply it are in backend/cpu/rotate.hpp, the public calls in
// liere/rotate.hpp).
//
// A RotationTable holds, for each of `tokens` rows, the HeadDim/Block diagonal blocks of a block-diagonal
// rotation: layout (tokens, HeadDim/Block, Block, Block), each block row-major. No dense HeadDim² matrix
// per token is stored when Block < HeadDim. A table has T rows (the same positions for every sequence of the
// batch) or B·T rows (one set of positions per sequence, (B, T) order).
#pragma once

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <liere/core/config.hpp>
#include <liere/pe/rotation_table_view.hpp>
#include <span>
#include <type_traits>
#include <vector>

namespace liere {

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

}  // namespace liere
