// liere/backend/cpu/attention.hpp — multi-head self-attention with rotary position encodings on the CPU:
// the loops behind liere/attention.hpp (which documents the layouts) and the engine's attention op.
//
// B batch, T tokens, H heads, D head dim.
// Two paths, the same results (to rounding):
//   fused   tables shared by the batch, blocks ≤ 16, no transforms (LieRE-8, RoPE, …): each (b, h) of the
//           attention loop rotates its own q and k rows (and takes dq̂, dk̂ back through Rᵀ) while they are in
//           cache; the table gradient is one pass over tokens afterwards. No pass over the batch per token.
//   general transforms, larger blocks (one GEMM per (token, head, block) over the batch), per-sequence tables:
//           rotate / rotate_backward (backend/cpu/rotate.hpp) per head, before and after the attention loop.
// The per-(b, h) products go through gemm() (backend/cpu/gemm.hpp) on the calling thread; the softmax through
// backend/cpu/softmax.hpp.
#pragma once

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/backend/cpu/rotate.hpp>
#include <liere/backend/cpu/softmax.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::cpu {

namespace detail {

template <class Scalar>
using RowMajor = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Scalar>
using HeadMap = Eigen::Map<const RowMajor<Scalar>, 0, Eigen::OuterStride<>>;  // (T, D) rows strided by ld
template <class Scalar>
using MutHeadMap = Eigen::Map<RowMajor<Scalar>, 0, Eigen::OuterStride<>>;

// y(b, t, h) = P_h · x(b, t, h) for every token (x, y contiguous or strided; y contiguous).
template <class Scalar>
void apply_transforms(const AttentionShape& s, const AttentionRotations<Scalar>& rot, const Scalar* x, std::int64_t ld,
                      Scalar* y) {
  const int d = s.head_dim, hd = s.heads * s.head_dim;
  const std::int64_t rows = std::int64_t(s.batch) * s.tokens;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < s.heads; ++h) {
    if (const Scalar* p = rot.heads[h].transform) {  // Y_h (rows, d) = X_h Pᵀ
      gemm<Scalar>(false, true, rows, d, d, Scalar(1), x + std::int64_t(h) * d, ld, p, d, Scalar(0),
                   y + std::int64_t(h) * d, hd);
    } else {
      HeadMap<Scalar> xs(x + std::int64_t(h) * d, rows, d, Eigen::OuterStride<>(ld));
      MutHeadMap<Scalar>(y + std::int64_t(h) * d, rows, d, Eigen::OuterStride<>(hd)) = xs;
    }
  }
}

// The block size of the row-by-row fused path, or 0 when it does not apply: every head's table (where it has
// one) shared by the batch (T − first_rotated rows), one block size ≤ kRowKernelMaxBlock, and no transforms.
// Then each (b, h) rotates its own q and k rows inside the attention loop, with the tokens still in cache,
// instead of a separate pass over the batch per token.
template <class Scalar>
int fused_block(const AttentionRotations<Scalar>& rot, int rotated_tokens) {
  if (!rot.any() || rot.any_transform()) return 0;
  int block = 0;
  for (const HeadRotation<Scalar>& h : rot.heads) {
    if (!h.table) continue;
    if (h.table.tokens != rotated_tokens || h.table.block > kRowKernelMaxBlock || (block && h.table.block != block))
      return 0;
    block = h.table.block;
  }
  return block;
}

}  // namespace detail


// Forward. See the header comment for the layouts.
template <class Scalar>
void attention_forward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                       const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, Scalar* out,
                       AttentionCache<Scalar>& cache) {
  check_attention(s, ld, rot.heads.size(), rot.first_rotated, key_mask.size());
  const int B = s.batch, T = s.tokens, H = s.heads, D = s.head_dim, HD = H * D;
  const std::int64_t n = s.size();
  const HeadsLayout contiguous = HeadsLayout::contiguous(T, H, D), strided{std::int64_t(T) * ld, ld};
  const int f = rot.first_rotated, tr = T - f;
  const int fused = detail::fused_block(rot, tr);
  const Scalar *qh = q, *kh = k;  // what enters the scores
  std::int64_t qld = ld;
  if (rot.any()) {
    cache.qr.resize(n);
    cache.kr.resize(n);
    qh = cache.qr.data();
    kh = cache.kr.data();
    qld = HD;
  }
  if (rot.any() && !fused) {  // a pass per head over the batch (transforms, large blocks, per-sequence tables)
    const Scalar *xq = q, *xk = k;
    HeadsLayout xl = strided;
    if (rot.any_transform()) {
      cache.xq.resize(n);
      cache.xk.resize(n);
      detail::apply_transforms(s, rot, q, ld, cache.xq.data());
      detail::apply_transforms(s, rot, k, ld, cache.xk.data());
      xq = cache.xq.data();
      xk = cache.xk.data();
      xl = contiguous;
    }
    for (int h = 0; h < H; ++h) {
      // unrotated tokens (all of them without a table) are copied, rotated ones go through the table
      const RotationTableView<const Scalar>& table = rot.heads[h].table;
      const int copied = table ? f : T;
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < copied; ++t) {
          const std::int64_t src = b * xl.batch + t * xl.token + h * D, dst = (std::int64_t(b) * T + t) * HD + h * D;
          std::copy_n(xq + src, D, cache.qr.data() + dst);
          std::copy_n(xk + src, D, cache.kr.data() + dst);
        }
      if (table && tr > 0) {
        cpu::rotate<Scalar>(table, xq + f * xl.token, xl, cache.qr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
        cpu::rotate<Scalar>(table, xk + f * xl.token, xl, cache.kr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
      }
    }
  }
  cache.probs.resize(std::int64_t(B) * H * T * T);
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
  // The attention loop over (b, h); rotate_rows(b, h) first fills q̂, k̂ of (b, h) on the fused path.
  auto attend = [&](auto&& rotate_rows) {
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      rotate_rows(b, h);
      const Scalar* qm = qh + b * T * qld + h * D;  // (T, D), rows qld apart
      const Scalar* km = kh + b * T * qld + h * D;
      const Scalar* vm = v + b * T * ld + h * D;    // (T, D), rows ld apart
      Scalar* p = cache.probs.data() + std::int64_t(bh) * T * T;  // (T, T)
      gemm_act<Scalar>(false, true, T, T, D, scale, qm, qld, km, qld, Scalar(0), p, T);  // Q̂ K̂ᵀ / √D (the scale as α)
      softmax_rows_forward(p, T, key_mask.empty() ? nullptr : key_mask.data() + std::int64_t(b) * T);
      gemm_act<Scalar>(false, false, T, D, T, Scalar(1), p, T, vm, ld, Scalar(0), out + std::int64_t(b) * T * HD + h * D,
                   HD);  // P V
    }
  };
  if (!fused) {
    attend([](int, int) {});
    return;
  }
  dispatch_block(fused, [&](auto blk) {
    constexpr int Block = decltype(blk)::value;
    if constexpr (Block <= detail::kRowKernelMaxBlock) {
      const int nb = D / Block;
      std::vector<std::vector<detail::ColBlock<Block, Scalar>>> rc(H);  // per head: the table's blocks, column-major
      for (int h = 0; h < H; ++h)
        if (rot.heads[h].table) detail::column_major_blocks<Block>(rot.heads[h].table, rc[h]);
      attend([&](int b, int h) {
        for (int which = 0; which < 2; ++which) {
          const Scalar* x = (which == 0 ? q : k) + std::int64_t(b) * T * ld + h * D;
          Scalar* y = (which == 0 ? cache.qr : cache.kr).data() + std::int64_t(b) * T * HD + h * D;
          for (int t = 0; t < T; ++t) {
            if (t < f || rc[h].empty()) std::copy_n(x + t * ld, D, y + t * HD);
            else detail::rotate_row<Block>(rc[h].data() + std::size_t(t - f) * nb, nb, x + t * ld, y + t * HD);
          }
        }
      });
    }
  });
}

// Backward: dq, dk, dv (layout of q, k, v) and the per-head dtable / dtransform accumulate.
template <class Scalar>
void attention_backward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                        const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, const Scalar* dout,
                        AttentionCache<Scalar>& cache, Scalar* dq, Scalar* dk, Scalar* dv,
                        std::vector<HeadRotationGrad<Scalar>>* drot) {
  check_attention(s, ld, rot.heads.size(), rot.first_rotated, key_mask.size());  // a key mask: masked probabilities
                                                                                  // are 0, their gradients vanish
  check_attention_grads(drot != nullptr, drot ? drot->size() : 0, rot.heads.size());
  LIERE_ENSURE(cache.probs.size() == std::size_t(s.batch) * s.heads * s.tokens * s.tokens,
               "attention_backward: the cache does not hold a forward of this shape");
  const int B = s.batch, T = s.tokens, H = s.heads, D = s.head_dim, HD = H * D;
  const std::int64_t n = s.size();
  const HeadsLayout contiguous = HeadsLayout::contiguous(T, H, D), strided{std::int64_t(T) * ld, ld};
  const bool rotated = rot.any();
  const int f = rot.first_rotated, tr = T - f;
  const int fused = detail::fused_block(rot, tr);
  const Scalar* qh = rotated ? cache.qr.data() : q;
  const Scalar* kh = rotated ? cache.kr.data() : k;
  const std::int64_t qld = rotated ? HD : ld;
  Scalar* dqh = dq;
  Scalar* dkh = dk;
  // Where dq̂(b, t, h, :) lives: b·dl.batch + t·dl.token + h·D (dq itself, or the contiguous cache.dqr).
  HeadsLayout dl = strided;
  if (rotated) {  // gradients w.r.t. q̂, k̂ first: every (b, h) writes its own rows once
    cache.dqr.resize(n);
    cache.dkr.resize(n);
    dqh = cache.dqr.data();
    dkh = cache.dkr.data();
    dl = contiguous;
  }
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
  // The attention loop over (b, h); rows_backward(b, h) then takes dq̂, dk̂ of (b, h) to dq, dk on the fused path.
  // Work items (c, h): sequences [c·chunk, (c + 1)·chunk) of head h, in order.
  auto backprop = [&](int chunk, auto&& rows_backward) {
    const int items = (B + chunk - 1) / chunk * H;
#pragma omp parallel
    {
      AlignedVector<Scalar> dp(std::size_t(T) * T);  // (T, T) dL/dP, then dL/dscores
#pragma omp for schedule(static)
      for (int item = 0; item < items; ++item)
      for (int b = item / H * chunk, h = item % H, b1 = std::min(B, b + chunk); b < b1; ++b) {
        const int bh = b * H + h;
        const Scalar* qm = qh + b * T * qld + h * D;  // (T, D), rows qld apart
        const Scalar* km = kh + b * T * qld + h * D;
        const Scalar* vm = v + b * T * ld + h * D;    // (T, D), rows ld apart
        const Scalar* dom = dout + std::int64_t(b) * T * HD + h * D;  // (T, D), rows HD apart
        const Scalar* p = cache.probs.data() + std::int64_t(bh) * T * T;  // (T, T)
        gemm_act<Scalar>(true, false, T, D, T, Scalar(1), p, T, dom, HD, Scalar(1), dv + b * T * ld + h * D, ld);  // dV += Pᵀ dO
        gemm_act<Scalar>(false, true, T, T, D, Scalar(1), dom, HD, vm, ld, Scalar(0), dp.data(), T);  // dP = dO Vᵀ
        softmax_rows_backward(p, dp.data(), T, scale);
        // scores = Q̂ K̂ᵀ: dQ̂ = dS K̂, dK̂ = dSᵀ Q̂ (written when rotated: dq̂, dk̂ are scratch; else accumulated)
        const Scalar beta = rotated ? Scalar(0) : Scalar(1);
        gemm_act<Scalar>(false, false, T, D, T, Scalar(1), dp.data(), T, km, qld, beta, dqh + b * dl.batch + h * D, dl.token);
        gemm_act<Scalar>(true, false, T, D, T, Scalar(1), dp.data(), T, qm, qld, beta, dkh + b * dl.batch + h * D, dl.token);
        rows_backward(b, h, item / H);
      }
    }
  };
  if (fused) {
    dispatch_block(fused, [&](auto blk) {
      constexpr int Block = decltype(blk)::value;
      if constexpr (Block <= detail::kRowKernelMaxBlock) {
        const int nb = D / Block;
        // dq += Rᵀ·dq̂ (rotated tokens) or dq̂ (the others), likewise dk, while the rows of (b, h) are in cache
        backprop(1, [&](int b, int h, int) {
          const RotationTableView<const Scalar>& table = rot.heads[h].table;
          for (int which = 0; which < 2; ++which) {
            const Scalar* dy = (which == 0 ? cache.dqr : cache.dkr).data() + b * dl.batch + h * D;
            Scalar* dx = (which == 0 ? dq : dk) + std::int64_t(b) * T * ld + h * D;
            for (int t = 0; t < T; ++t) {
              if (t >= f && table) {
                detail::rotate_row_backward<Block>(table.block_data(t - f, 0), nb, dy + t * dl.token, dx + t * ld);
              } else {
                for (int i = 0; i < D; ++i) dx[t * ld + i] += dy[t * dl.token + i];
              }
            }
          }
        });
        if (!drot) return;
        // dR(t) += Σ_b dq̂ qᵀ + dk̂ kᵀ, parallel over t: every dR(t) summed by one thread in order (deterministic).
        // The B rows of one token lie a sequence apart: gathered first, all heads at once (independent loads, many
        // in flight, one page per sequence), then summed with each block of dR(t) in registers.
#pragma omp parallel
        {
          using Panel = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
          Panel xq(B, HD), xk(B, HD), gq(B, HD), gk(B, HD);  // q, k, dq̂, dk̂ rows of token f + t
#pragma omp for schedule(static)
          for (int t = 0; t < tr; ++t) {
            for (int b = 0; b < B; ++b) {
              const std::int64_t xb = (std::int64_t(b) * T + f + t) * ld, yb = (std::int64_t(b) * T + f + t) * HD;
              std::copy_n(q + xb, HD, &xq(b, 0));
              std::copy_n(k + xb, HD, &xk(b, 0));
              std::copy_n(cache.dqr.data() + yb, HD, &gq(b, 0));
              std::copy_n(cache.dkr.data() + yb, HD, &gk(b, 0));
            }
            for (int h = 0; h < H; ++h) {
              const RotationTableView<Scalar>& dtable = (*drot)[h].dtable;
              if (!rot.heads[h].table || !dtable) continue;
              Scalar* dr = dtable.block_data(t, 0);
              detail::rotate_rows_grad<Block>(&gq(0, h * D), &xq(0, h * D), B, HD, D, dr);
              detail::rotate_rows_grad<Block>(&gk(0, h * D), &xk(0, h * D), B, HD, D, dr);
            }
          }
        }
      }
    });
    return;
  }
  backprop(1, [](int, int, int) {});
  if (!rotated) return;
  // Through the rotations (tokens ≥ first_rotated) or the copies (tokens < first_rotated), to P·q and P·k.
  const bool transformed = rot.any_transform();
  const Scalar *xq = q, *xk = k;
  HeadsLayout xl = strided;
  Scalar *dxq = dq, *dxk = dk;
  HeadsLayout dxl = strided;
  if (transformed) {
    xq = cache.xq.data();
    xk = cache.xk.data();
    xl = contiguous;
    cache.dxq.assign(n, Scalar(0));
    cache.dxk.assign(n, Scalar(0));
    dxq = cache.dxq.data();
    dxk = cache.dxk.data();
    dxl = contiguous;
  }
  for (int h = 0; h < H; ++h) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        if (t >= f && rot.heads[h].table) continue;
        for (int i = 0; i < D; ++i) {
          const std::int64_t src = (std::int64_t(b) * T + t) * HD + h * D + i, dst = b * dxl.batch + t * dxl.token + h * D + i;
          dxq[dst] += cache.dqr[src];
          dxk[dst] += cache.dkr[src];
        }
      }
    const RotationTableView<const Scalar>& table = rot.heads[h].table;
    if (!table || tr == 0) continue;
    const RotationTableView<Scalar> dtable = drot ? (*drot)[h].dtable : RotationTableView<Scalar>{};
    const std::int64_t off = std::int64_t(f) * HD;
    cpu::rotate_backward<Scalar>(table, xq + f * xl.token, xl, cache.dqr.data() + off, contiguous, dxq + f * dxl.token, dxl, dtable,
                    B, tr, H, h);
    cpu::rotate_backward<Scalar>(table, xk + f * xl.token, xl, cache.dkr.data() + off, contiguous, dxk + f * dxl.token, dxl, dtable,
                    B, tr, H, h);
  }
  if (!transformed) return;
  // Through y = P·x: dx += Pᵀ·dy, dP += Σ dy·xᵀ. One head per thread, unless heads share a dP buffer (a transform
  // shared by the heads of a layer, or by every layer): then in head order on this thread, since two threads
  // accumulating into one buffer would lose updates.
  const std::int64_t rows = std::int64_t(B) * T;
  bool distinct_dp = true;
  if (drot)
    for (int h = 0; h < H && distinct_dp; ++h)
      for (int g = 0; g < h; ++g)
        if ((*drot)[h].dtransform && (*drot)[h].dtransform == (*drot)[g].dtransform) distinct_dp = false;
#pragma omp parallel for schedule(static) if (distinct_dp)
  for (int h = 0; h < H; ++h) {
    const Scalar* pm = rot.heads[h].transform;
    for (int which = 0; which < 2; ++which) {
      const Scalar* x = which == 0 ? q : k;
      Scalar* dx = which == 0 ? dq : dk;
      const Scalar* dy = which == 0 ? cache.dxq.data() : cache.dxk.data();
      const Scalar* xs = x + std::int64_t(h) * D;    // (rows, D), rows ld apart
      Scalar* dxs = dx + std::int64_t(h) * D;         // (rows, D), rows ld apart
      const Scalar* dys = dy + std::int64_t(h) * D;  // (rows, D), rows HD apart
      if (pm) {
        gemm<Scalar>(false, false, rows, D, D, Scalar(1), dys, HD, pm, D, Scalar(1), dxs, ld);  // dX += dY P
        if (drot && (*drot)[h].dtransform)  // dP += dYᵀ X
          gemm<Scalar>(true, false, D, D, rows, Scalar(1), dys, HD, xs, ld, Scalar(1), (*drot)[h].dtransform, D);
      } else {
        detail::MutHeadMap<Scalar>(dxs, rows, D, Eigen::OuterStride<>(ld)) +=
            detail::HeadMap<Scalar>(dys, rows, D, Eigen::OuterStride<>(HD));
      }
    }
  }
}

// Explicit instances (backend/cpu/attention.cpp) for programs that link liere::compiled.
#define LIERE_CPU_ATTENTION_INSTANCES(EXTERN, S)                                                                   \
  EXTERN template void attention_forward<S>(const AttentionShape&, const S*, const S*, const S*, std::int64_t,       \
                                            const AttentionRotations<S>&, std::span<const std::uint8_t>, S*,        \
                                            AttentionCache<S>&);                                                     \
  EXTERN template void attention_backward<S>(const AttentionShape&, const S*, const S*, const S*, std::int64_t,      \
                                             const AttentionRotations<S>&, std::span<const std::uint8_t>, const S*, \
                                             AttentionCache<S>&, S*, S*, S*, std::vector<HeadRotationGrad<S>>*);
#ifdef LIERE_PRECOMPILED
LIERE_CPU_ATTENTION_INSTANCES(extern, float)
LIERE_CPU_ATTENTION_INSTANCES(extern, double)
#endif

}  // namespace liere::cpu
