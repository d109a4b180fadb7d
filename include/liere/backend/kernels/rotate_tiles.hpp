// liere/backend/kernels/rotate_tiles.hpp — the products of a rotation table shared by the batch, blocks of 64, as
// 64 × 64 tiles in shared memory: the bodies of the CUDA kernels under cuda::set_rotate_tiles (cuda/attention.cu),
// which test_kernels runs thread by thread on the CPU against the plain products.
//
// One tile product is C (64 × 64) += Σ_k as(k, :)ᵀ bs(k, :) over the 64 rows k of a staged pair (as, bs: kTile rows
// of kTileLd values each). The three products of rotate_gemms.hpp stage it thus, for the rows b0 … b0 + 63 of one
// token's block (X, B rows a row stride apart) and that token's 64 × 64 block M = R_{t,k}:
//   forward  Y = X·Mᵀ      as(k, i) = X(b0 + i, k)    bs(k, j) = M(j, k)    Y(b0 + i, j) = C(i, j)
//   dx       dX = dY·M     as(k, i) = dY(b0 + i, k)   bs(k, j) = M(k, j)    dX(b0 + i, j) (+)= C(i, j)
//   dR       dR += dYᵀ·X   as(k, i) = dY(b0 + k, i)   bs(k, j) = X(b0 + k, j), C summed over the chunks of 64 rows
// Rows past the batch stage as zeros and are not stored.
// Threads: kTileThreads = 128. Thread t stages elements t, t + 128, … of a tile (a source row's 64 values read by
// consecutive threads) and owns C's rows 8·(t / 16) + r (r < 8) and columns 4·(t % 16) + c (c < 4): per k, 8 values
// of as and 4 of bs (two and one 16-byte loads on the device: kTileLd keeps every row 16-byte aligned) for 32
// multiply-adds. Each C(i, j) is one sum over k in increasing order, chunk after chunk.
#pragma once

#include <cstdint>
#include <liere/core/config.hpp>

namespace liere::kernels {

inline constexpr int kTile = 64;          // the block size these kernels take
inline constexpr int kTileLd = 68;        // a staged row: 64 values and 4 of padding (16-byte aligned rows)
inline constexpr int kTileThreads = 128;  // threads of a tile kernel
inline constexpr int kTileRows = 8, kTileCols = 4;  // C's entries per thread

// Thread `thread`'s share of staging the tile src(r, c), r < 64 (rows `row_stride` apart; rows ≥ rows_valid read as
// 0), c < 64, into dst: dst(c, r) when transpose, else dst(r, c) (dst rows kTileLd apart).
template <class S>
LIERE_HOST_DEVICE inline void tile_stage_part(const S* src, std::int64_t row_stride, int rows_valid, bool transpose,
                                              S* dst, int thread) {
  for (int e = thread; e < kTile * kTile; e += kTileThreads) {
    const int r = e / kTile, c = e % kTile;
    const S v = r < rows_valid ? src[std::int64_t(r) * row_stride + c] : S(0);
    if (transpose) dst[c * kTileLd + r] = v;
    else dst[r * kTileLd + c] = v;
  }
}

// acc += thread `thread`'s part of Σ_k as(k, :)ᵀ bs(k, :), k in increasing order.
template <class S>
LIERE_HOST_DEVICE inline void tile_mul_part(const S* as, const S* bs, int thread, S (&acc)[kTileRows][kTileCols]) {
  const int i0 = kTileRows * (thread / 16), j0 = kTileCols * (thread % 16);
  for (int k = 0; k < kTile; ++k) {
    S a[kTileRows], b[kTileCols];
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(S) == 4) {  // 16-byte loads: rows are kTileLd apart, i0 and j0 multiples of 4
      const float4 a0 = *reinterpret_cast<const float4*>(as + k * kTileLd + i0);
      const float4 a1 = *reinterpret_cast<const float4*>(as + k * kTileLd + i0 + 4);
      const float4 b0 = *reinterpret_cast<const float4*>(bs + k * kTileLd + j0);
      a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
      b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w;
    } else
#endif
    {
      for (int r = 0; r < kTileRows; ++r) a[r] = as[k * kTileLd + i0 + r];
      for (int c = 0; c < kTileCols; ++c) b[c] = bs[k * kTileLd + j0 + c];
    }
    for (int r = 0; r < kTileRows; ++r)
      for (int c = 0; c < kTileCols; ++c) acc[r][c] += a[r] * b[c];
  }
}

// Thread `thread`'s entries of C into dst(i, j) (rows `row_stride` apart, rows ≥ rows_valid left alone): dst = C, or
// dst += C when accumulate.
template <class S>
LIERE_HOST_DEVICE inline void tile_store_part(const S (&acc)[kTileRows][kTileCols], S* dst, std::int64_t row_stride,
                                              int rows_valid, bool accumulate, int thread) {
  const int i0 = kTileRows * (thread / 16), j0 = kTileCols * (thread % 16);
  for (int r = 0; r < kTileRows; ++r) {
    if (i0 + r >= rows_valid) break;
    S* d = dst + std::int64_t(i0 + r) * row_stride + j0;
    for (int c = 0; c < kTileCols; ++c) d[c] = accumulate ? d[c] + acc[r][c] : acc[r][c];
  }
}

// Where one launch's products read and write. Product (w, h, t, kb): side w (0: q, 1: k), head h, table row t, block
// kb of nb (a token's D = 64·nb values): its operand rows start at x[w].at(h, t, kb) and follow each other x[w].batch
// apart (the batch), its 64 × 64 block is m[h] + (t·nb + kb)·64².
struct TileOperand {
  const float* p = nullptr;
  std::int64_t batch = 0, token = 0, head = 0;
  LIERE_HOST_DEVICE const float* at(int h, int t, int kb) const {
    return p + h * head + t * token + std::int64_t(kTile) * kb;
  }
};
struct TileOutput {
  float* p = nullptr;
  std::int64_t batch = 0, token = 0, head = 0;
  LIERE_HOST_DEVICE float* at(int h, int t, int kb) const { return p + h * head + t * token + std::int64_t(kTile) * kb; }
};
template <int MaxHeads>
struct TileProducts {
  TileOperand x[2];  // forward: X; dx and dR: dY
  TileOperand y[2];  // dR: X (its second factor)
  TileOutput out[2];  // forward: Y; dx: dX
  const float* m[MaxHeads] = {};  // the heads' tables (null: the head is not rotated)
  float* dm[MaxHeads] = {};       // dR: the heads' table gradients (distinct, or the products would race)
  int sides = 2, heads = 0, tokens = 0, nb = 1, batch = 0;
  bool dx = false;          // dx (bs = M) rather than forward (bs = Mᵀ)
  bool accumulate = false;  // out += rather than out =
  LIERE_HOST_DEVICE int products() const { return sides * heads * tokens * nb; }
  // Product p's (w, h, t, kb), p < products(): kb fastest, then t, h, w.
  LIERE_HOST_DEVICE void decode(int p, int& w, int& h, int& t, int& kb) const {
    kb = p % nb;
    p /= nb;
    t = p % tokens;
    p /= tokens;
    h = p % heads;
    w = p / heads;
  }
  LIERE_HOST_DEVICE std::int64_t block_offset(int t, int kb) const {
    return (std::int64_t(t) * nb + kb) * kTile * kTile;
  }
};

}  // namespace liere::kernels
