// liere/rotate.hpp — rotation tables applied to your own q/k buffers (host memory), and the backward: the
// public calls over the CPU kernels of backend/cpu/rotate.hpp.
//
// B batch, T tokens, H heads, D head dim; x, y, dx, dy (B, T, H, D).
//   rotate           y[b,t,h,:]  = R(t) · x[b,t,h,:]                          (for one head h, or all heads)
//   rotate_backward  dx[b,t,h,:] += R(t)ᵀ · dy[b,t,h,:],   dR(t) += Σ_b,h dy xᵀ   (both accumulate)
// A table has T rows (shared by the batch) or B·T rows (one per sequence).
#pragma once

#include <liere/backend/cpu/rotate.hpp>
#include <liere/backend/types.hpp>
#include <liere/pe/rotation_table.hpp>

namespace liere {

// Strided buffers: x, y, dy, dx each with its own layout (see HeadsLayout); y may be x.
template <class Scalar>
void rotate(RotationTableView<const Scalar> table, const Scalar* x, HeadsLayout xl, Scalar* y, HeadsLayout yl,
            int batch, int tokens, int heads, int head = kAllHeads) {
  cpu::rotate(table, x, xl, y, yl, batch, tokens, heads, head);
}
template <class Scalar>
void rotate_backward(RotationTableView<const Scalar> table, const Scalar* x, HeadsLayout xl, const Scalar* dy,
                     HeadsLayout dyl, Scalar* dx, HeadsLayout dxl, RotationTableView<Scalar> dtable, int batch,
                     int tokens, int heads, int head = kAllHeads) {
  cpu::rotate_backward(table, x, xl, dy, dyl, dx, dxl, dtable, batch, tokens, heads, head);
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
