// liere/backend/kernels/reduce.hpp — the column sums behind every bias and broadcast gradient (cpu and cuda
// colsum_accumulate: dβ-like sums of dy over rows), shared by the CPU and the CUDA kernels so that both add the same
// numbers in the same order and give the same bits whatever the thread or block count:
//
//   colsum_rows    the sums of one chunk of kColSumChunk rows, in row order, in S
//   colsum_finish  out[c] += the chunks' sums of column c, in chunk order, in acc_t<S>
//
// The CPU kernel keeps a column block's chunk sums in registers and adds them as it goes; the CUDA kernels store
// every chunk's sums (one thread per chunk and column) and add them in a second kernel (one thread per column).
#pragma once

#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/scalar.hpp>

namespace liere::kernels {

inline constexpr Index kColSumChunk = 256;  // rows per chunk: a fixed split, whatever the threads or blocks

// sums[j] = Σ_{r in [r0, r1)} a[r·lda + c0 + j] for j in [0, c1 − c0), the rows in order.
template <class S>
LIERE_HOST_DEVICE inline void colsum_rows(const S* a, Index lda, Index r0, Index r1, Index c0, Index c1, S* sums) {
  const Index nc = c1 - c0;
  for (Index j = 0; j < nc; ++j) sums[j] = S(0);
  for (Index r = r0; r < r1; ++r) {
    const S* row = a + r * lda + c0;
    LIERE_OMP(simd)
    for (Index j = 0; j < nc; ++j) sums[j] += row[j];
  }
}

// out[c] += Σ_ch part[ch·C + c] over the nchunks chunks, in order, in acc_t<S>.
template <class S>
LIERE_HOST_DEVICE inline void colsum_finish(const S* part, Index nchunks, Index C, Index c, S* out) {
  acc_t<S> s = acc_t<S>(0);
  for (Index ch = 0; ch < nchunks; ++ch) s += acc_t<S>(part[ch * C + c]);
  out[c] += S(s);
}

}  // namespace liere::kernels
