// liere/backend/kernels/rotate.hpp — one token of one head through a block-diagonal rotation, for any block size:
// the bodies the CUDA kernels run (one thread per token and head) and the tests run on the CPU against the CPU
// kernels (backend/cpu/rotate.hpp, whose fixed-size Eigen row kernels are faster there).
//
// r holds nb blocks of b×b, each row-major (a row of a RotationTable); x, y, dx, dy hold D = nb·b values.
//   rotate_row            y = R·x             (y must not alias x)
//   rotate_row_backward   dx += Rᵀ·dy
//   rotate_row_grad       dR += dy·xᵀ          (blockwise)
// and one entry of one block, which the CUDA kernels run one thread per output element:
//   rotate_entry           (R·x)_i     = Σ_j R[i][j] x_j     for one b×b block R and its b inputs x
//   rotate_backward_entry  (Rᵀ·dy)_j   = Σ_i R[i][j] dy_i
#pragma once

#include <liere/core/config.hpp>

namespace liere::kernels {

template <class S>
LIERE_HOST_DEVICE inline S rotate_entry(const S* r, int b, const S* x, int i) {
  S acc = S(0);
  for (int j = 0; j < b; ++j) acc += r[i * b + j] * x[j];
  return acc;
}

template <class S>
LIERE_HOST_DEVICE inline S rotate_backward_entry(const S* r, int b, const S* dy, int j) {
  S acc = S(0);
  for (int i = 0; i < b; ++i) acc += r[i * b + j] * dy[i];
  return acc;
}

template <class S>
LIERE_HOST_DEVICE inline void rotate_row(const S* r, int nb, int b, const S* x, S* y) {
  for (int k = 0; k < nb; ++k, r += b * b, x += b, y += b)
    for (int i = 0; i < b; ++i) y[i] = rotate_entry(r, b, x, i);
}

template <class S>
LIERE_HOST_DEVICE inline void rotate_row_backward(const S* r, int nb, int b, const S* dy, S* dx) {
  for (int k = 0; k < nb; ++k, r += b * b, dy += b, dx += b)
    for (int j = 0; j < b; ++j) dx[j] += rotate_backward_entry(r, b, dy, j);
}

template <class S>
LIERE_HOST_DEVICE inline void rotate_row_grad(const S* dy, const S* x, int nb, int b, S* dr) {
  for (int k = 0; k < nb; ++k, dr += b * b, dy += b, x += b)
    for (int i = 0; i < b; ++i)
      for (int j = 0; j < b; ++j) dr[i * b + j] += dy[i] * x[j];
}

}  // namespace liere::kernels
