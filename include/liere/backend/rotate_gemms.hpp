// liere/backend/rotate_gemms.hpp — a shared rotation table applied as strided-batched GEMMs: the products the GPU
// runs for large blocks (the CPU runs rotate_grad_gemms; its forward and dx products are row panels,
// backend/cpu/row_panels.hpp).
//
// A table shared by the batch (one row per rotated token, R(t) block-diagonal with D/b blocks of b × b, stored
// row-major as (T, D/b, b, b): pe/rotation_table.hpp) applied to one head's rows of (B, T, ·) buffers, each with
// its own HeadsLayout (backend/types.hpp) and already offset to the head (and to the first rotated token). For
// block k and token t the batch's B rows of that block are a (B, b) row-major matrix X_{t,k} (row stride
// layout.batch), and
//
//   rotate_gemms            Y_{t,k}   = X_{t,k} · R_{t,k}ᵀ       (B, b)     y = R(t)·x for every row
//   rotate_backward_gemms   dX_{t,k}  = dY_{t,k} · R_{t,k} + β·dX_{t,k}     dx (+)= R(t)ᵀ·dy
//   rotate_grad_gemms       dR_{t,k} += dY_{t,k}ᵀ · X_{t,k}       (b, b)     dR(t) += Σ_b dy·xᵀ
//
// For each block k the T products are one strided batch (A, B, C advance by a token's stride, or a table row's
// (D/b)·b² values, per product). These functions only say which products: `gemm` is the backend's row-major GEMM
// with a batch,
//
//   gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, GemmBatch{count, a, b, c})   (alpha 1)
//
// the CPU (backend/cpu/rotate.hpp) runs rotate_grad_gemms' products on its threads through cpu::gemm, the GPU
// (backend/cuda/attention.cu) as one cublasSgemmStridedBatched. Only pointer arithmetic happens here, so the
// pointers may be device pointers. Every product writes distinct memory within a batch (its own token's rows,
// or its own dR(t)); the calls for several heads into one dR follow each other in order.
#pragma once

#include <liere/backend/types.hpp>
#include <liere/core/index.hpp>
#include <liere/pe/rotation_table_view.hpp>

namespace liere {

// Blocks larger than this go through these products on both backends (with a table shared by the batch); smaller
// ones through per-row kernels (CPU) or one thread per element (GPU).
inline constexpr int kGemmRotationAbove = 16;

namespace detail {
template <class Scalar>
Index table_row_stride(const RotationTableView<const Scalar>& table) {
  return Index(table.num_blocks()) * table.block * table.block;
}
}  // namespace detail

// y = R(t)·x for t = 0…table.tokens − 1 and every sequence of the batch (y overwritten).
template <class Scalar, class Gemm>
void rotate_gemms(RotationTableView<const Scalar> table, const Scalar* x, HeadsLayout xl, Scalar* y, HeadsLayout yl,
                  int batch, Gemm&& gemm) {
  if (batch <= 0 || table.tokens <= 0) return;
  const int b = table.block;
  const GemmBatch each{table.tokens, xl.token, detail::table_row_stride(table), yl.token};
  for (int k = 0; k < table.num_blocks(); ++k)
    gemm(false, true, Index(batch), Index(b), Index(b), x + Index(k) * b, Index(xl.batch), table.block_data(0, k),
         Index(b), Scalar(0), y + Index(k) * b, Index(yl.batch), each);
}

// dx = R(t)ᵀ·dy + beta·dx (beta 0: overwritten, 1: accumulated).
template <class Scalar, class Gemm>
void rotate_backward_gemms(RotationTableView<const Scalar> table, const Scalar* dy, HeadsLayout dyl, Scalar* dx,
                           HeadsLayout dxl, Scalar beta, int batch, Gemm&& gemm) {
  if (batch <= 0 || table.tokens <= 0) return;
  const int b = table.block;
  const GemmBatch each{table.tokens, dyl.token, detail::table_row_stride(table), dxl.token};
  for (int k = 0; k < table.num_blocks(); ++k)
    gemm(false, false, Index(batch), Index(b), Index(b), dy + Index(k) * b, Index(dyl.batch), table.block_data(0, k),
         Index(b), beta, dx + Index(k) * b, Index(dxl.batch), each);
}

// dR(t) += Σ_b dy(b, t)·x(b, t)ᵀ blockwise (dtable accumulated), x the forward rotation's input.
template <class Scalar, class Gemm>
void rotate_grad_gemms(RotationTableView<Scalar> dtable, const Scalar* dy, HeadsLayout dyl, const Scalar* x,
                       HeadsLayout xl, int batch, Gemm&& gemm) {
  if (batch <= 0 || dtable.tokens <= 0) return;
  const int b = dtable.block;
  const GemmBatch each{dtable.tokens, dyl.token, xl.token,
                       detail::table_row_stride(RotationTableView<const Scalar>(dtable))};
  for (int k = 0; k < dtable.num_blocks(); ++k)
    gemm(true, false, Index(b), Index(b), Index(batch), dy + Index(k) * b, Index(dyl.batch), x + Index(k) * b,
         Index(xl.batch), Scalar(1), dtable.block_data(0, k), Index(b), each);
}

}  // namespace liere
