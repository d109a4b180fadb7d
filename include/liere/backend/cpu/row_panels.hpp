// liere/backend/cpu/row_panels.hpp — C = A·M (or C += A·M) for many strided rows of A and C and one small square
// M held in cache: the products of a rotation table shared by the batch, blocks above 16 (backend/cpu/rotate.hpp).
//
//   rows_times_block<N>(rows, a, as, m, c, cs, accumulate)
//       c(r, :) = [c(r, :) +] a(r, :) · M      r < rows; a(r, :), c(r, :) N values at a + r·as, c + r·cs;
//                                              M N × N row-major, contiguous
//
// For block k of token t, the batch's rows of a (B, T, H, D) buffer are B rows a sequence apart (a packed qkv
// buffer's sequence stride is T·3·H·D values). Such rows are memory-bound: each row sits on its own pages, and no
// hardware prefetcher follows a stride of a sequence. A GEMM library packs these rows and needs Mᵀ packed in its
// layout too (the forward y = x·Rᵀ is a transposed-B product, which oneDNN runs at about half the speed of the
// plain one: bench/README.md). Here a panel of R rows (R·N/W accumulator registers, W the SIMD width of Eigen's
// packet for the scalar) is kept in registers while the K = N terms of the sum are added, M read from L1, and the
// next panel's rows are prefetched while this one is computed. Measured at the ViT-Tiny shape (bench/bench_rotate.cpp;
// bench/README.md, "Rotation products").
//
// Each c(r, j) is one sum over k in increasing order, one multiply-add per term (fused where the target has FMA):
// the result does not depend on the thread count or on which rows share a panel. The packets are Eigen's (AVX-512,
// AVX2, SSE, NEON, whatever the build targets; the accumulator count follows EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS).
#pragma once

#include <liere/core/eigen.hpp>
#include <liere/core/index.hpp>

namespace liere::cpu {

namespace detail {

// The register tiling of rows_times_block for an N-wide row of Scalar: W values a packet, NV packets a row, CT
// packets a column tile, R rows a panel (R·CT accumulators: 24 of the 32 vector registers of AVX-512 or NEON, 12
// of AVX2's 16, the rest for M's packets and the broadcast). 24, not 16: at block 64 (R 6 rather than 4) the
// forward and dx panels ran 1.3× and 1.6× faster on a Zen 5 host (bench/README.md, "A Zen 5 host"), and a 6-row
// kernel had beaten a 4-row one on the Xeon hosts too (58–84 against 45–73 GFLOP/s, "LieRE-64 against abs on one
// CPU thread").
template <int N, class Scalar>
struct RowPanelShape {
  using Packet = typename Eigen::internal::packet_traits<Scalar>::type;
  static constexpr int W = Eigen::internal::unpacket_traits<Packet>::size;
  static_assert(N % W == 0, "rows_times_block: the row length must be a multiple of the SIMD width");
  static constexpr int NV = N / W;
  static constexpr int CT = NV < 4 ? NV : 4;
  static_assert(NV % CT == 0, "rows_times_block: the row must split into column tiles");
  static constexpr int Accumulators = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? 24 : 12;
  static constexpr int R = Accumulators / CT > 0 ? Accumulators / CT : 1;
};

// Rows [0, R) of the panel, columns [j0, j0 + CT·W): c = [c +] a · M.
template <int N, class Scalar, int R, int CT>
EIGEN_ALWAYS_INLINE void row_panel_tile(const Scalar* a, Index as, const Scalar* m, Scalar* c, Index cs, int j0,
                                        bool accumulate) {
  using Packet = typename RowPanelShape<N, Scalar>::Packet;
  constexpr int W = RowPanelShape<N, Scalar>::W;
  using Eigen::internal::ploadu;
  using Eigen::internal::pmadd;
  using Eigen::internal::pset1;
  using Eigen::internal::pstoreu;
  Packet acc[R][CT];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < CT; ++j)
      acc[r][j] = accumulate ? ploadu<Packet>(c + r * cs + j0 + j * W) : pset1<Packet>(Scalar(0));
  for (int k = 0; k < N; ++k) {
    Packet mk[CT];
    for (int j = 0; j < CT; ++j) mk[j] = ploadu<Packet>(m + k * N + j0 + j * W);
    for (int r = 0; r < R; ++r) {
      const Packet v = pset1<Packet>(a[r * as + k]);
      for (int j = 0; j < CT; ++j) acc[r][j] = pmadd(v, mk[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < CT; ++j) pstoreu(c + r * cs + j0 + j * W, acc[r][j]);
}

}  // namespace detail

// c(r, :) = [c(r, :) +] a(r, :) · M for r < rows (see the header comment). a, c and M must not overlap (a row
// wider than one column tile is written a tile at a time, while later tiles still read it).
template <int N, class Scalar>
void rows_times_block(int rows, const Scalar* a, Index as, const Scalar* m, Scalar* c, Index cs, bool accumulate) {
  using Shape = detail::RowPanelShape<N, Scalar>;
  constexpr int R = Shape::R, CT = Shape::CT, W = Shape::W;
  constexpr int kLine = int(64 / sizeof(Scalar));  // values a cache line
  int r0 = 0;
  for (; r0 + R <= rows; r0 += R) {
    if (r0 + 2 * R <= rows)  // the next panel's rows, while this one computes
      for (int r = r0 + R; r < r0 + 2 * R; ++r)
        for (int l = 0; l < N; l += kLine) {
          __builtin_prefetch(a + r * as + l);
          __builtin_prefetch(c + r * cs + l, 1);
        }
    for (int j0 = 0; j0 < N; j0 += CT * W)
      detail::row_panel_tile<N, Scalar, R, CT>(a + r0 * as, as, m, c + r0 * cs, cs, j0, accumulate);
  }
  for (; r0 < rows; ++r0)
    for (int j0 = 0; j0 < N; j0 += CT * W)
      detail::row_panel_tile<N, Scalar, 1, CT>(a + r0 * as, as, m, c + r0 * cs, cs, j0, accumulate);
}

}  // namespace liere::cpu
