// liere/backend/kernels/reduce.hpp — the column sums behind every bias and broadcast gradient (cpu and cuda
// colsum_accumulate: dβ-like sums of dy over rows), shared by the CPU and the CUDA kernels so that both add the same
// numbers in the same order and give the same bits whatever the thread or block count:
//
//   colsum_rows    the sums of one chunk of kColSumChunk rows, in row order, in S
//   colsum_lane    lane l of kReduceLanes: the sums of chunks l, l + kReduceLanes, …, in order, in acc_t<S>
//   lane_tree_sum  the lanes' sums added in the order of a warp's xor-shuffle all-reduce (offsets 16, 8, …, 1)
//   colsum_finish  out[c] += the lanes' sums of column c, in that order (the CPU's serial form of the GPU's warp)
//
// The CPU kernel keeps a column block's lane sums in registers and adds them as it goes; the CUDA kernels store
// every chunk's sums (one thread per chunk and column, rows in order) and add them in a second kernel (one warp per
// column: lane l sums its chunks in order, then the warp's shuffle sum). Both orders are fixed by kColSumChunk and
// kReduceLanes alone, never by the thread or block count.
#pragma once

#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/scalar.hpp>

namespace liere::kernels {

inline constexpr Index kColSumChunk = 32;  // rows per chunk: a fixed split, whatever the threads or blocks
inline constexpr int kReduceLanes = 32;    // the lanes a finish splits the chunks among: one warp on the GPU

// The sum of v[0..L) in the order of the xor-shuffle all-reduce of L lanes (v += shfl_xor(v, o) for o = L/2, …, 1):
// v[l] += v[l + o] for l < o. Every lane of the shuffle ends with this value's bits (each step adds the same two
// numbers, a + b = b + a). Overwrites v.
template <int L, class A>
LIERE_HOST_DEVICE inline A lane_tree_sum(A* v) {
  static_assert(L >= 1 && (L & (L - 1)) == 0, "lane_tree_sum: the lane count is a power of two");
  for (int o = L / 2; o > 0; o /= 2)
    for (int l = 0; l < o; ++l) v[l] += v[l + o];
  return v[0];
}

// sums[j] = Σ_{r in [r0, r1)} a[r·lda + c0 + j] for j in [0, c1 − c0), the rows in order. NC > 0: c1 − c0 == NC, a
// compile-time width whose sums the CPU keeps in registers (the same additions).
template <class S, Index NC = 0>
LIERE_HOST_DEVICE inline void colsum_rows(const S* a, Index lda, Index r0, Index r1, Index c0, Index c1, S* sums) {
  if constexpr (NC > 0) {
    S acc[NC];
    for (Index j = 0; j < NC; ++j) acc[j] = S(0);
    for (Index r = r0; r < r1; ++r) {
      const S* row = a + r * lda + c0;
      LIERE_OMP(simd)
      for (Index j = 0; j < NC; ++j) acc[j] += row[j];
    }
    for (Index j = 0; j < NC; ++j) sums[j] = acc[j];
  } else {
    const Index nc = c1 - c0;
    for (Index j = 0; j < nc; ++j) sums[j] = S(0);
    for (Index r = r0; r < r1; ++r) {
      const S* row = a + r * lda + c0;
      LIERE_OMP(simd)
      for (Index j = 0; j < nc; ++j) sums[j] += row[j];
    }
  }
}

// Lane `lane` of kReduceLanes: Σ part[ch·C + c] over ch = lane, lane + kReduceLanes, … < nchunks, in order, in acc_t<S>.
template <class S>
LIERE_HOST_DEVICE inline acc_t<S> colsum_lane(const S* part, Index nchunks, Index C, Index c, int lane) {
  acc_t<S> s = acc_t<S>(0);
  for (Index ch = lane; ch < nchunks; ch += kReduceLanes) s += acc_t<S>(part[ch * C + c]);
  return s;
}

// out[c] += the sum of the chunks' sums part[ch·C + c] over the nchunks chunks: the lanes' in-order sums
// (colsum_lane), then lane_tree_sum, in acc_t<S> — the CUDA finish's warp, one lane after another.
template <class S>
LIERE_HOST_DEVICE inline void colsum_finish(const S* part, Index nchunks, Index C, Index c, S* out) {
  acc_t<S> v[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) v[l] = colsum_lane(part, nchunks, C, c, l);
  out[c] += S(lane_tree_sum<kReduceLanes>(v));
}

}  // namespace liere::kernels
