// liere/pe/rotation_table_view.hpp — a view of rotation-table rows (pe/rotation_table.hpp's layout), without
// Eigen: the CUDA files and the shared GEMM geometry (backend/rotate_gemms.hpp) take it too.
#pragma once

#include <cstddef>
#include <type_traits>

namespace liere {

// A non-owning view of consecutive rows of a table (Scalar may be const): what rotate() reads and
// rotate_backward() accumulates into, so one table of (sets × T) rows can serve several heads. The memory may
// be on any device (a CUDA kernel reads a view of device memory).
template <class Scalar>
struct RotationTableView {
  Scalar* data = nullptr;  // (tokens, head_dim/block, block, block)
  int tokens = 0, head_dim = 0, block = 0;

  int num_blocks() const { return block ? head_dim / block : 0; }
  Scalar* block_data(int t, int k) const { return data + (std::size_t(t) * num_blocks() + k) * block * block; }
  explicit operator bool() const { return data != nullptr; }
  // A mutable view converts to a read-only one. (A template, not a `requires` clause: nvcc's front end warns
  // that a const view's operator, a conversion to its own type, is never called.)
  template <class S = Scalar, class = std::enable_if_t<!std::is_const_v<S>>>
  operator RotationTableView<const S>() const {
    return {data, tokens, head_dim, block};
  }
};

}  // namespace liere
