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
#include <vector>

namespace liere::cpu {

// out (C) += Σ_n a[n, :] for a (N, C) row-major with row stride lda. Each thread owns a contiguous range of
// 64-column blocks and adds the rows in order: chunks of kernels::kColSumChunk rows are summed in S
// (kernels::colsum_rows), chunk k's sums added, in acc_t<S>, to lane k mod kernels::kReduceLanes, the lanes then
// combined by kernels::lane_tree_sum (colsum_finish's sum). The result does not depend on the number of threads and
// is the CUDA kernel's (backend/kernels/reduce.hpp). A thread walks the rows once, chunk by chunk, each chunk through
// all its column blocks while the chunk is in cache (one column block at a time down all the rows read each row's
// 64 values a row stride apart: 1.4–1.8× slower on ViT-Tiny's bias gradients, measured 2026-11-27).
template <class S>
void colsum_accumulate(const S* a, Index N, Index C, Index lda, S* out) {
  constexpr Index kColBlock = 64;
  constexpr int L = kernels::kReduceLanes;
  const Index ncb = (C + kColBlock - 1) / kColBlock;
  const bool threaded = N * C > kGrain && ncb > 1;
#pragma omp parallel if (threaded)
  {
    const Index nt = std::min<Index>(num_threads(), ncb), t = thread_id();
    const Index b0 = ncb * std::min(t, nt) / nt, b1 = ncb * std::min(t + 1, nt) / nt;  // this thread's blocks
    std::vector<acc_t<S>> total(std::size_t(b1 - b0) * L * kColBlock, acc_t<S>(0));  // (block, lane, column)
    S blk[kColBlock];
    int lane = 0;
    for (Index r0 = 0; r0 < N && b0 < b1; r0 += kernels::kColSumChunk) {
      const Index r1 = std::min(N, r0 + kernels::kColSumChunk);
      for (Index cb = b0; cb < b1; ++cb) {
        const Index c0 = cb * kColBlock, c1 = std::min(C, c0 + kColBlock), nc = c1 - c0;
        if (nc == kColBlock)
          kernels::colsum_rows<S, kColBlock>(a, lda, r0, r1, c0, c1, blk);
        else
          kernels::colsum_rows(a, lda, r0, r1, c0, c1, blk);
        acc_t<S>* tl = total.data() + ((cb - b0) * L + lane) * kColBlock;
        for (Index j = 0; j < nc; ++j) tl[j] += acc_t<S>(blk[j]);
      }
      lane = lane + 1 == L ? 0 : lane + 1;
    }
    for (Index cb = b0; cb < b1; ++cb) {
      const Index c0 = cb * kColBlock, nc = std::min(C, c0 + kColBlock) - c0;
      acc_t<S>* tot = total.data() + (cb - b0) * L * kColBlock;
      for (int o = L / 2; o > 0; o /= 2)  // kernels::lane_tree_sum, every column at once
        for (int l = 0; l < o; ++l)
          for (Index j = 0; j < nc; ++j) tot[l * kColBlock + j] += tot[(l + o) * kColBlock + j];
      for (Index j = 0; j < nc; ++j) out[c0 + j] += S(tot[j]);
    }
  }
}

}  // namespace liere::cpu
