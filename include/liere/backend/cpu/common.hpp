// liere/backend/cpu/common.hpp — what the CPU kernels share: thread helpers and deterministic reductions.
//
// Threading rules for every kernel (docs/engine.md, "Threading and determinism"):
//   * `#pragma omp parallel for schedule(static)` over an outer dimension (rows, tokens, batch), with an
//     `if` clause so small problems stay on one thread;
//   * a reduction over rows is never an OpenMP `reduction` clause (whose combination order is unspecified):
//     either each thread owns a fixed range of output columns and sums the rows in a fixed order (`colsum`),
//     or rows are cut into fixed-size chunks whose partial sums are added in a fixed order. Both give the same
//     bits whatever the number of threads. Only the GEMM (Eigen's blocking depends on the thread count) is
//     deterministic for a fixed thread count only.
#pragma once

#include <algorithm>
#include <liere/backend/kernels/reduce.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/parallel.hpp>
#include <liere/core/scalar.hpp>

namespace liere::cpu {

// out (C) += Σ_n a[n, :] for a (N, C) row-major with row stride lda. Each thread owns a contiguous range of
// columns and adds the rows in order: chunks of kernels::kColSumChunk rows are summed in S (kernels::colsum_rows),
// chunk k's sums added, in acc_t<S>, to lane k mod kernels::kReduceLanes, the lanes then combined by
// kernels::lane_tree_sum (colsum_finish's sum). The result does not depend on the number of threads and is the CUDA
// kernel's (backend/kernels/reduce.hpp).
template <class S>
void colsum_accumulate(const S* a, Index N, Index C, Index lda, S* out) {
  constexpr Index kColBlock = 64;
  constexpr int L = kernels::kReduceLanes;
  const Index ncb = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kGrain && ncb > 1)
  for (Index cb = 0; cb < ncb; ++cb) {
    const Index c0 = cb * kColBlock, c1 = std::min(C, c0 + kColBlock), nc = c1 - c0;
    S blk[kColBlock];
    acc_t<S> total[L][kColBlock];
    for (int l = 0; l < L; ++l)
      for (Index j = 0; j < nc; ++j) total[l][j] = acc_t<S>(0);
    int lane = 0;
    for (Index r0 = 0; r0 < N; r0 += kernels::kColSumChunk) {
      const Index r1 = std::min(N, r0 + kernels::kColSumChunk);
      if (nc == kColBlock)
        kernels::colsum_rows<S, kColBlock>(a, lda, r0, r1, c0, c1, blk);
      else
        kernels::colsum_rows(a, lda, r0, r1, c0, c1, blk);
      for (Index j = 0; j < nc; ++j) total[lane][j] += acc_t<S>(blk[j]);
      lane = lane + 1 == L ? 0 : lane + 1;
    }
    for (int o = L / 2; o > 0; o /= 2)  // kernels::lane_tree_sum, every column at once
      for (int l = 0; l < o; ++l)
        for (Index j = 0; j < nc; ++j) total[l][j] += total[l + o][j];
    for (Index j = 0; j < nc; ++j) out[c0 + j] += S(total[0][j]);
  }
}

}  // namespace liere::cpu
