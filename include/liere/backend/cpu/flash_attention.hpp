// liere/backend/cpu/flash_attention.hpp — fused rotary flash attention on the CPU: the same results as
// attention_forward / attention_backward (backend/cpu/attention.hpp: same arguments, layouts and encodings —
// tables of any block size shared by the batch or per sequence, transforms, a skipped CLS token, key masks) in
// O(T) extra memory: no (T, T) matrix is kept, only the output and one log-sum-exp per query.
//
// B batch, T tokens, H heads, D head dim; Bq × Bk the tile (FlashTiles).
// Per (b, h), on one thread:
//   forward    q̂ and k̂ rotated as their tiles are loaded (kernels::rotate_load_tile: the table's blocks and
//              the transform, any block size; blocks ≤ 16 without a transform through the fixed-size row kernels
//              of backend/cpu/rotate.hpp, faster here) into a (T, D) panel each; for each query tile, over the key
//              tiles: S = Q̂ K̂ᵀ/√D (GEMM), the online softmax rows (kernels::online_softmax_tile_row; unmasked rows
//              with Eigen's vectorised exp, as backend/cpu/softmax.hpp), acc ← α·acc + P V (GEMM); then
//              out = acc / l and lse = m + log l (kernels::finalize_row).
//   backward   q̂, k̂ rotated again; D_i = dO_i · O_i; for each key tile, over the query tiles: S and dP = dO Vᵀ
//              (GEMMs), P and dS (kernels::backward_tile_row), dV += Pᵀ dO, dQ̂ += dS K̂, dK̂ += dSᵀ Q̂ (GEMMs).
// Each (b, h) then takes its dQ̂, dK̂ rows back through Rᵀ to dq, dk (the row kernels as in the forward, or the
// shared bodies); one pass over tokens sums the tables' gradient, each table row by one thread in a fixed order
// (deterministic, and correct when heads share a table), and takes heads with a transform through the whole
// adjoint (kernels::rotate_load_row_backward); the transforms' gradient is one GEMM per head after it.
//
// Memory besides the inputs and outputs: the cache keeps out and lse ((B, T, H, D) + (B, H, T)); the backward's
// dq̂, dk̂ scratch is (B, T, H, D) each; every thread holds two (T, D) panels and its tiles. The unfused op keeps
// the (B, H, T, T) probabilities. There is no attention map: cache.probs is left empty.
//
// On the CPU the rotated panels are rotated once per (b, h) and pass; the CUDA kernels rotate each tile as they load it
// (backend/cuda/flash_attention.cu).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <liere/core/eigen.hpp>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/cpu/attention.hpp>
#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/backend/kernels/flash_attention.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::cpu {

// Rows of a query tile and of a key tile.
struct FlashTiles {
  int q = 128, k = 128;  // measured on the CPU (bench/bench_flash_attention.cpp): 64 × 64 took 12% more time at T = 1024
};

namespace detail {

// Each head's rotation as the tile bodies take it, after checking it against the shape.
template <class Scalar>
std::vector<kernels::RowRotation<Scalar>> row_rotations(const AttentionShape& s, const AttentionRotations<Scalar>& rot,
                                                        const char* who) {
  std::vector<kernels::RowRotation<Scalar>> rr(std::size_t(s.heads));
  if (!rot.any()) return rr;
  const int tr = s.tokens - rot.first_rotated;
  for (int h = 0; h < s.heads; ++h) {
    const HeadRotation<Scalar>& hr = rot.heads[h];
    kernels::RowRotation<Scalar>& r = rr[h];
    r.first_rotated = rot.first_rotated;
    r.transform = hr.transform;
    if (!hr.table) continue;
    const RotationTableView<const Scalar>& t = hr.table;
    LIERE_ENSURE(t.head_dim == s.head_dim && t.block > 0 && s.head_dim % t.block == 0,
                 who << ": head " << h << "'s table has head dim " << t.head_dim << " and block " << t.block
                     << ", the attention head dim " << s.head_dim);
    LIERE_ENSURE(t.tokens == tr || t.tokens == s.batch * tr,
                 who << ": head " << h << "'s table has " << t.tokens << " rows for " << tr << " rotated tokens (B="
                     << s.batch << "); expected " << tr << " or " << s.batch * tr << " rows");
    r.table = t.data;
    r.block = t.block;
    r.table_rows = t.tokens;
  }
  return rr;
}

// Unmasked rows take Eigen's vectorised exp (as backend/cpu/softmax.hpp); masked rows, and the CUDA kernels, the
// shared scalar bodies. The same maths as kernels::online_softmax_tile_row and kernels::backward_tile_row without a
// mask (the tests compare the two paths through the masked and unmasked cases).
template <class Scalar>
Scalar online_softmax_tile_row(Scalar* s, int n, const std::uint8_t* mask, Scalar& m, Scalar& l) {
  if (mask) return kernels::online_softmax_tile_row(s, n, mask, m, l);
  using std::exp;
  Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>> row(s, n);
  const Scalar mx = std::max(m, row.maxCoeff());  // finite: n ≥ 1 finite scores
  const Scalar alpha = exp(m - mx);               // m = −∞ (first tile): 0
  row = (row - mx).exp();
  l = alpha * l + row.sum();
  m = mx;
  return alpha;
}
template <class Scalar>
void backward_tile_row(Scalar* s, Scalar* dp, int n, const std::uint8_t* mask, Scalar lse, Scalar di, Scalar scale) {
  if (mask) return kernels::backward_tile_row(s, dp, n, mask, lse, di, scale);
  Eigen::Map<Eigen::Array<Scalar, 1, Eigen::Dynamic>> p(s, n), ds(dp, n);
  p = (p - lse).exp();
  ds = scale * p * (ds - di);
}

// Whether a head's rotation takes the fixed-size row kernels of backend/cpu/rotate.hpp on the CPU (a table with
// blocks ≤ kRowKernelMaxBlock and no transform); otherwise the shared bodies (the CUDA kernels' path) rotate.
template <class Scalar>
bool row_kernels(const kernels::RowRotation<Scalar>& r) {
  return r.table && !r.transform && r.block <= kRowKernelMaxBlock;
}

// The (T, D) panel of one (b, h) rotated as it is loaded: y(t, :) = R(t)·P·x(t, :), x rows ld apart.
template <class Scalar>
void rotate_panel(const kernels::RowRotation<Scalar>& r, int b, int T, int D, const Scalar* x, std::int64_t ld,
                  Scalar* tmp, Scalar* y) {
  if (!row_kernels(r)) return kernels::rotate_load_tile(r, b, 0, T, T, D, x, ld, tmp, y, std::int64_t(D));
  dispatch_block(r.block, [&](auto blk) {
    constexpr int Block = decltype(blk)::value;
    if constexpr (Block <= kRowKernelMaxBlock) {
      using RowMat = Eigen::Matrix<Scalar, Block, Block, Eigen::RowMajor>;
      using Vec = Eigen::Matrix<Scalar, Block, 1>;
      const int nb = D / Block;
      for (int t = 0; t < T; ++t) {
        const Scalar* xt = x + t * ld;
        Scalar* yt = y + std::int64_t(t) * D;
        const std::int64_t row = r.row(b, t, T);
        if (row < 0) {
          std::copy_n(xt, D, yt);
          continue;
        }
        const Scalar* rt = r.table + row * D * Block;
        for (int k = 0; k < nb; ++k)
          Eigen::Map<Vec>(yt + k * Block).noalias() =
              Eigen::Map<const RowMat>(rt + k * Block * Block).lazyProduct(Eigen::Map<const Vec>(xt + k * Block));
      }
    }
  });
}

// One token's rows through the rotation's adjoint without a transform: dx += Rᵀ·dy (dx += dy for a token that is
// not rotated) — and the table row's gradient dR += dy·xᵀ — with the row kernels for blocks ≤ 16, else the
// shared bodies.
template <class Scalar>
void unrotate_row(const kernels::RowRotation<Scalar>& r, std::int64_t row, int D, const Scalar* dy, Scalar* dx) {
  if (row < 0) {
    for (int i = 0; i < D; ++i) dx[i] += dy[i];
    return;
  }
  const Scalar* rt = r.table + row * D * r.block;
  if (r.block > kRowKernelMaxBlock) return kernels::rotate_row_backward(rt, D / r.block, r.block, dy, dx);
  dispatch_block(r.block, [&](auto blk) {
    constexpr int Block = decltype(blk)::value;
    if constexpr (Block <= kRowKernelMaxBlock) rotate_row_backward<Block>(rt, D / Block, dy, dx);
  });
}
template <class Scalar>
void table_row_grad(const kernels::RowRotation<Scalar>& r, std::int64_t row, int D, const Scalar* dy, const Scalar* x,
                    Scalar* dtable) {
  Scalar* dr = dtable + row * D * r.block;
  if (r.block > kRowKernelMaxBlock) return kernels::rotate_row_grad(dy, x, D / r.block, r.block, dr);
  dispatch_block(r.block, [&](auto blk) {
    constexpr int Block = decltype(blk)::value;
    if constexpr (Block <= kRowKernelMaxBlock) rotate_row_grad<Block>(dy, x, D / Block, dr);
  });
}

inline void check_tiles(FlashTiles t) {
  LIERE_ENSURE(t.q > 0 && t.k > 0, "flash attention: tiles must be positive, got " << t.q << " x " << t.k);
}

}  // namespace detail

// Forward: out = softmax(q̂ k̂ᵀ / √D) v per (b, h), as attention_forward; the cache keeps out and the lse.
template <class Scalar>
void flash_attention_forward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                             const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, Scalar* out,
                             AttentionCache<Scalar>& cache, FlashTiles tiles = {}) {
  check_attention(s, ld, rot.heads.size(), rot.first_rotated, key_mask.size());
  detail::check_tiles(tiles);
  const std::vector<kernels::RowRotation<Scalar>> rr = detail::row_rotations(s, rot, "flash_attention_forward");
  const int B = s.batch, T = s.tokens, H = s.heads, D = s.head_dim, HD = H * D;
  const int bq = std::min(tiles.q, T), bk = std::min(tiles.k, T);
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
  cache.probs.clear();
  cache.lse.resize(std::size_t(B) * H * T);
  cache.out.resize(std::size_t(s.size()));
#pragma omp parallel
  {
    AlignedVector<Scalar> qr(std::size_t(T) * D), kr(std::size_t(T) * D);  // (T, D) rotated panels of one (b, h)
    AlignedVector<Scalar> sc(std::size_t(bq) * bk), acc(std::size_t(bq) * D), m(bq), l(bq), tmp(D);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const std::int64_t x0 = std::int64_t(b) * T * ld + std::int64_t(h) * D;
      detail::rotate_panel(rr[h], b, T, D, q + x0, ld, tmp.data(), qr.data());
      detail::rotate_panel(rr[h], b, T, D, k + x0, ld, tmp.data(), kr.data());
      const Scalar* vm = v + x0;  // (T, D), rows ld apart
      const std::uint8_t* mask = key_mask.empty() ? nullptr : key_mask.data() + std::int64_t(b) * T;
      for (int i0 = 0; i0 < T; i0 += bq) {
        const int rows = std::min(bq, T - i0);
        std::fill_n(m.data(), rows, -std::numeric_limits<Scalar>::infinity());
        std::fill_n(l.data(), rows, Scalar(0));
        std::fill_n(acc.data(), std::size_t(rows) * D, Scalar(0));
        for (int j0 = 0; j0 < T; j0 += bk) {
          const int cols = std::min(bk, T - j0);
          gemm_act<Scalar>(false, true, rows, cols, D, scale, qr.data() + std::int64_t(i0) * D, D,
                       kr.data() + std::int64_t(j0) * D, D, Scalar(0), sc.data(), bk);  // S = Q̂ K̂ᵀ / √D
          for (int r = 0; r < rows; ++r) {
            const Scalar alpha =
                detail::online_softmax_tile_row(sc.data() + std::int64_t(r) * bk, cols, mask ? mask + j0 : nullptr, m[r], l[r]);
            if (alpha != Scalar(1))
              for (int d = 0; d < D; ++d) acc[std::size_t(r) * D + d] *= alpha;
          }
          gemm_act<Scalar>(false, false, rows, D, cols, Scalar(1), sc.data(), bk, vm + std::int64_t(j0) * ld, ld, Scalar(1),
                       acc.data(), D);  // acc += P V
        }
        for (int r = 0; r < rows; ++r) {
          Scalar* o = out + (std::int64_t(b) * T + i0 + r) * HD + std::int64_t(h) * D;
          cache.lse[(std::size_t(bh)) * T + i0 + r] = kernels::finalize_row(acc.data() + std::size_t(r) * D, D, m[r], l[r], o);
          std::copy_n(o, D, cache.out.data() + (o - out));
        }
      }
    }
  }
}

// Backward: dq, dk, dv (layout of q, k, v) and the per-head dtable / dtransform accumulate, as attention_backward.
template <class Scalar>
void flash_attention_backward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v,
                              std::int64_t ld, const AttentionRotations<Scalar>& rot,
                              std::span<const std::uint8_t> key_mask, const Scalar* dout, AttentionCache<Scalar>& cache,
                              Scalar* dq, Scalar* dk, Scalar* dv, std::vector<HeadRotationGrad<Scalar>>* drot,
                              FlashTiles tiles = {}) {
  check_attention(s, ld, rot.heads.size(), rot.first_rotated, key_mask.size());
  detail::check_tiles(tiles);
  check_attention_grads(drot != nullptr, drot ? drot->size() : 0, rot.heads.size());
  LIERE_ENSURE(cache.lse.size() == std::size_t(s.batch) * s.heads * s.tokens && cache.out.size() == std::size_t(s.size()),
               "flash_attention_backward: the cache does not hold a flash attention forward of this shape (B="
                   << s.batch << " T=" << s.tokens << " H=" << s.heads << " D=" << s.head_dim << ")");
  const std::vector<kernels::RowRotation<Scalar>> rr = detail::row_rotations(s, rot, "flash_attention_backward");
  const int B = s.batch, T = s.tokens, H = s.heads, D = s.head_dim, HD = H * D;
  const int bq = std::min(tiles.q, T), bk = std::min(tiles.k, T);
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
  cache.dqr.assign(std::size_t(s.size()), Scalar(0));  // dq̂, dk̂ (B, T, H, D)
  cache.dkr.assign(std::size_t(s.size()), Scalar(0));
#pragma omp parallel
  {
    AlignedVector<Scalar> qr(std::size_t(T) * D), kr(std::size_t(T) * D), di(T), tmp(D);
    AlignedVector<Scalar> sc(std::size_t(bq) * bk), dp(std::size_t(bq) * bk);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const std::int64_t x0 = std::int64_t(b) * T * ld + std::int64_t(h) * D;  // (T, D) of q, k, v: rows ld apart
      const std::int64_t y0 = std::int64_t(b) * T * HD + std::int64_t(h) * D;  // of out, dout, dq̂, dk̂: rows HD apart
      detail::rotate_panel(rr[h], b, T, D, q + x0, ld, tmp.data(), qr.data());
      detail::rotate_panel(rr[h], b, T, D, k + x0, ld, tmp.data(), kr.data());
      for (int t = 0; t < T; ++t) di[t] = kernels::row_dot(dout + y0 + std::int64_t(t) * HD, cache.out.data() + y0 + std::int64_t(t) * HD, D);
      const Scalar* lse = cache.lse.data() + std::size_t(bh) * T;
      const std::uint8_t* mask = key_mask.empty() ? nullptr : key_mask.data() + std::int64_t(b) * T;
      Scalar* dqh = cache.dqr.data() + y0;
      Scalar* dkh = cache.dkr.data() + y0;
      for (int j0 = 0; j0 < T; j0 += bk) {
        const int cols = std::min(bk, T - j0);
        for (int i0 = 0; i0 < T; i0 += bq) {
          const int rows = std::min(bq, T - i0);
          const Scalar* doi = dout + y0 + std::int64_t(i0) * HD;
          gemm_act<Scalar>(false, true, rows, cols, D, scale, qr.data() + std::int64_t(i0) * D, D,
                       kr.data() + std::int64_t(j0) * D, D, Scalar(0), sc.data(), bk);  // S = Q̂ K̂ᵀ / √D
          gemm_act<Scalar>(false, true, rows, cols, D, Scalar(1), doi, HD, v + x0 + std::int64_t(j0) * ld, ld, Scalar(0),
                       dp.data(), bk);  // dP = dO Vᵀ
          for (int r = 0; r < rows; ++r)
            detail::backward_tile_row(sc.data() + std::int64_t(r) * bk, dp.data() + std::int64_t(r) * bk, cols,
                                      mask ? mask + j0 : nullptr, lse[i0 + r], di[i0 + r], scale);
          gemm_act<Scalar>(true, false, cols, D, rows, Scalar(1), sc.data(), bk, doi, HD, Scalar(1),
                       dv + x0 + std::int64_t(j0) * ld, ld);  // dV += Pᵀ dO
          gemm_act<Scalar>(false, false, rows, D, cols, Scalar(1), dp.data(), bk, kr.data() + std::int64_t(j0) * D, D,
                       Scalar(1), dqh + std::int64_t(i0) * HD, HD);  // dQ̂ += dS K̂
          gemm_act<Scalar>(true, false, cols, D, rows, Scalar(1), dp.data(), bk, qr.data() + std::int64_t(i0) * D, D,
                       Scalar(1), dkh + std::int64_t(j0) * HD, HD);  // dK̂ += dSᵀ Q̂
        }
      }
      // dq += Rᵀ·dq̂, dk += Rᵀ·dk̂ while the rows of (b, h) are in cache (heads with a transform: below)
      if (!rr[h].transform)
        for (int t = 0; t < T; ++t) {
          const std::int64_t row = rr[h].row(b, t, T);
          detail::unrotate_row(rr[h], row, D, dqh + std::int64_t(t) * HD, dq + x0 + std::int64_t(t) * ld);
          detail::unrotate_row(rr[h], row, D, dkh + std::int64_t(t) * HD, dk + x0 + std::int64_t(t) * ld);
        }
    }
  }
  // The tables' gradients, and for heads with a transform the whole adjoint, parallel over tokens: token t's table
  // rows (shared by the batch, or per sequence) and dq, dk rows are written by one thread, heads and sequences in
  // order (heads may share a table). With a transform, dq̂ and dk̂ become Rᵀ·dq̂ and Rᵀ·dk̂ (the gradients w.r.t.
  // P·q, P·k) in place, for dP below.
  const bool transformed = rot.any_transform();
  const bool want_dtable = drot != nullptr;
  if (drot)
    for (int h = 0; h < H; ++h) {
      const RotationTableView<Scalar>& dt = (*drot)[h].dtable;
      LIERE_ENSURE(!rr[h].table || !dt || (dt.tokens == rr[h].table_rows && dt.block == rr[h].block),
                   "flash_attention_backward: head " << h << "'s dtable has " << dt.tokens << " rows and block "
                                                     << dt.block << ", its table " << rr[h].table_rows << " and "
                                                     << rr[h].block);
    }
  bool pass = transformed;
  for (int h = 0; h < H && want_dtable; ++h) pass = pass || (rr[h].table && (*drot)[h].dtable);
  if (!pass) return;
#pragma omp parallel
  {
    AlignedVector<Scalar> tmp(std::size_t(2) * D), g(D);
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const kernels::RowRotation<Scalar>& r = rr[h];
        Scalar* dtable = want_dtable && r.table ? (*drot)[h].dtable.data : nullptr;
        if (!r.transform && !dtable) continue;  // dq, dk done in the attention loop
        for (int b = 0; b < B; ++b)
          for (int which = 0; which < 2; ++which) {
            const std::int64_t xo = std::int64_t(b) * T * ld + std::int64_t(t) * ld + std::int64_t(h) * D;
            const std::int64_t yo = (std::int64_t(b) * T + t) * HD + std::int64_t(h) * D;
            const Scalar* x = (which == 0 ? q : k) + xo;
            Scalar* dy = (which == 0 ? cache.dqr : cache.dkr).data() + yo;
            const std::int64_t row = r.row(b, t, T);
            if (!r.transform) {
              if (row >= 0) detail::table_row_grad(r, row, D, dy, x, dtable);
              continue;
            }
            kernels::rotate_load_row_backward(r, b, t, T, D, x, dy, (which == 0 ? dq : dk) + xo, dtable,
                                              static_cast<Scalar*>(nullptr), tmp.data());
            if (row >= 0) {  // dy ← Rᵀ·dy (dy itself for a token that is not rotated)
              std::fill(g.begin(), g.end(), Scalar(0));
              kernels::rotate_row_backward(r.table + row * D * r.block, D / r.block, r.block, dy, g.data());
              std::copy(g.begin(), g.end(), dy);
            }
          }
      }
  }
  if (!transformed || !drot) return;
  // dP_h += Σ_{b,t} (Rᵀ dŷ) xᵀ: one GEMM per head, heads in order (heads may share a transform).
  const std::int64_t rows = std::int64_t(B) * T;
  for (int h = 0; h < H; ++h) {
    Scalar* dp = (*drot)[h].dtransform;
    if (!rot.heads[h].transform || !dp) continue;
    for (int which = 0; which < 2; ++which)
      gemm<Scalar>(true, false, D, D, rows, Scalar(1), (which == 0 ? cache.dqr : cache.dkr).data() + std::int64_t(h) * D,
                   HD, (which == 0 ? q : k) + std::int64_t(h) * D, ld, Scalar(1), dp, D);
  }
}

// Explicit instances (backend/cpu/flash_attention.cpp) for programs that link liere::compiled.
#define LIERE_CPU_FLASH_ATTENTION_INSTANCES(EXTERN, S)                                                            \
  EXTERN template void flash_attention_forward<S>(const AttentionShape&, const S*, const S*, const S*, std::int64_t, \
                                                  const AttentionRotations<S>&, std::span<const std::uint8_t>, S*,  \
                                                  AttentionCache<S>&, FlashTiles);                                   \
  EXTERN template void flash_attention_backward<S>(const AttentionShape&, const S*, const S*, const S*, std::int64_t,\
                                                   const AttentionRotations<S>&, std::span<const std::uint8_t>,      \
                                                   const S*, AttentionCache<S>&, S*, S*, S*,                         \
                                                   std::vector<HeadRotationGrad<S>>*, FlashTiles);
#ifdef LIERE_PRECOMPILED
LIERE_CPU_FLASH_ATTENTION_INSTANCES(extern, float)
LIERE_CPU_FLASH_ATTENTION_INSTANCES(extern, double)
#endif

}  // namespace liere::cpu
