// liere/backend/cpu/common.hpp — what the CPU kernels share: thread helpers and deterministic reductions.
//
// Threading rules for every kernel (docs/engine.md, "Threading and determinism"):
//   * `#pragma omp parallel for schedule(static)` over an outer dimension (rows, tokens, batch), with an
//     `if` clause so small problems stay on one thread;
//   * a reduction over rows is never an OpenMP `reduction` clause (whose combination order is unspecified):
//     either each thread owns a fixed range of output columns and sums the rows in order (`colsum`), or
//     rows are cut into fixed-size chunks whose partial sums are added in chunk order. Both give the same
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
// the chunk sums in acc_t<S>, in order (colsum_finish's sum). The result does not depend on the number of threads
// and is the CUDA kernel's (backend/kernels/reduce.hpp).
template <class S>
void colsum_accumulate(const S* a, Index N, Index C, Index lda, S* out) {
  constexpr Index kColBlock = 64;
  const Index ncb = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kGrain && ncb > 1)
  for (Index cb = 0; cb < ncb; ++cb) {
    const Index c0 = cb * kColBlock, c1 = std::min(C, c0 + kColBlock), nc = c1 - c0;
    S blk[kColBlock];
    acc_t<S> total[kColBlock];
    for (Index j = 0; j < nc; ++j) total[j] = acc_t<S>(0);
    for (Index r0 = 0; r0 < N; r0 += kernels::kColSumChunk) {
      kernels::colsum_rows(a, lda, r0, std::min(N, r0 + kernels::kColSumChunk), c0, c1, blk);
      for (Index j = 0; j < nc; ++j) total[j] += acc_t<S>(blk[j]);
    }
    for (Index j = 0; j < nc; ++j) out[c0 + j] += S(total[j]);
  }
}

}  // namespace liere::cpu
