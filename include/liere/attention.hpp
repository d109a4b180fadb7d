// liere/attention.hpp — multi-head self-attention with a rotary position encoding applied to q and k,
// forward and backward on plain buffers, so that any engine can call it on its own memory.
//
// B batch, T tokens, H heads, D head dim.
//   q, k, v   element (b, t, h, i) at b·T·ld + t·ld + h·D + i: ld = H·D for three separate buffers, 3·H·D for
//             a packed qkv buffer (B, T, 3, H, D) as a fused Linear produces it (pass q = qkv, k = qkv + H·D,
//             v = qkv + 2·H·D)
//   out       (B, T, H, D) contiguous, i.e. (B, T, C) with C = H·D, ready for the output projection
//   key_mask  (B, T) bytes, 0 marks a padded key that no query may attend to; empty: attend to all
//
// Per head h the position encoding is an optional dense D×D transform P_h (STRING's learned orthogonal
// matrix) applied to every token, then an optional rotation table (pe/rotation_table.hpp) applied to the
// tokens [first_rotated, T): q̂ = R(p)·P·q, k̂ = R(p)·P·k, and
//   scores = q̂ k̂ᵀ / √D  (masked keys: −∞),  probs = softmax(scores),  out = probs · v.
// A full rotation Pᵀ·R(p)·P would give the same scores: Pᵀ is orthogonal and cancels in q̂ᵀk̂, so it is not
// applied. Values are never rotated.
//
// The backward accumulates (+=) into dq, dk, dv (the layout of q, k, v) and into each head's dtable and
// dtransform. The probabilities stay in the cache after the forward: cache.probs (B, H, T, T) is the
// attention map.
//
// Two paths, the same results (to rounding):
//   fused   tables shared by the batch, blocks ≤ 16, no transforms (LieRE-8, RoPE, …): each (b, h) of the
//           attention loop rotates its own q and k rows (and takes dq̂, dk̂ back through Rᵀ) while they are in
//           cache; the table gradient is one pass over tokens afterwards. No pass over the batch per token.
//   general transforms, larger blocks (one GEMM per (token, head, block) over the batch), per-sequence tables:
//           rotate / rotate_backward of pe/rotation_table.hpp per head, before and after the attention loop.
// Softmax rows without a mask use Eigen's vectorised exp.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <liere/config.hpp>
#include <liere/pe/rotation_table.hpp>
#include <vector>

namespace liere {

struct AttentionShape {
  int batch = 0, tokens = 0, heads = 0, head_dim = 0;
  std::int64_t size() const { return std::int64_t(batch) * tokens * heads * head_dim; }
};

// What attention applies to the q and k of one head.
template <class Scalar>
struct HeadRotation {
  RotationTableView<const Scalar> table;  // T − first_rotated rows (shared by the batch) or B·(T − first_rotated)
  const Scalar* transform = nullptr;      // optional D×D, row-major, applied first (before the table)
};

template <class Scalar>
struct HeadRotationGrad {
  RotationTableView<Scalar> dtable;  // accumulates dL/dtable
  Scalar* dtransform = nullptr;      // accumulates dL/dP (D×D row-major)
};

template <class Scalar>
struct AttentionRotations {
  std::vector<HeadRotation<Scalar>> heads;  // size H, or empty: no rotary encoding
  int first_rotated = 0;                    // tokens [0, first_rotated) are not rotated (e.g. a skipped CLS)

  bool any() const { return !heads.empty(); }
  bool any_transform() const {
    return std::any_of(heads.begin(), heads.end(), [](const HeadRotation<Scalar>& h) { return h.transform; });
  }
};

// What the forward keeps for the backward, and scratch space reused from call to call.
template <class Scalar>
struct AttentionCache {
  std::vector<Scalar> xq, xk;    // (B, T, H, D) P·q, P·k           (only with transforms)
  std::vector<Scalar> qr, kr;    // (B, T, H, D) rotated q̂, k̂       (only with rotations)
  std::vector<Scalar> probs;     // (B, H, T, T) the attention map
  std::vector<Scalar> dqr, dkr;  // backward scratch, (B, T, H, D)
  std::vector<Scalar> dxq, dxk;  // backward scratch, (B, T, H, D)
};

namespace detail {

template <class Scalar>
using RowMajor = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Scalar>
using HeadMap = Eigen::Map<const RowMajor<Scalar>, 0, Eigen::OuterStride<>>;  // (T, D) rows strided by ld
template <class Scalar>
using MutHeadMap = Eigen::Map<RowMajor<Scalar>, 0, Eigen::OuterStride<>>;

inline void check_attention(const AttentionShape& s, std::int64_t ld, std::size_t rot_heads, int first_rotated) {
  LIERE_ENSURE(s.batch > 0 && s.tokens > 0 && s.heads > 0 && s.head_dim > 0,
               "attention: bad shape B=" << s.batch << " T=" << s.tokens << " H=" << s.heads << " D=" << s.head_dim);
  LIERE_ENSURE(ld >= std::int64_t(s.heads) * s.head_dim,
               "attention: the token stride " << ld << " is smaller than H·D = " << s.heads * s.head_dim);
  LIERE_ENSURE(rot_heads == 0 || rot_heads == std::size_t(s.heads),
               "attention: " << rot_heads << " head rotations for " << s.heads << " heads");
  LIERE_ENSURE(first_rotated >= 0 && first_rotated <= s.tokens,
               "attention: first_rotated " << first_rotated << " outside [0, " << s.tokens << "]");
}

inline void check_mask(const AttentionShape& s, std::span<const std::uint8_t> key_mask) {
  LIERE_ENSURE(key_mask.empty() || key_mask.size() == std::size_t(s.batch) * s.tokens,
               "attention: the key mask has " << key_mask.size() << " entries, expected B x T = " << s.batch << " x "
                                              << s.tokens << " = " << std::size_t(s.batch) * s.tokens);
}

// y(b, t, h) = P_h · x(b, t, h) for every token (x, y contiguous or strided; y contiguous).
template <class Scalar>
void apply_transforms(const AttentionShape& s, const AttentionRotations<Scalar>& rot, const Scalar* x, std::int64_t ld,
                      Scalar* y) {
  const int d = s.head_dim, hd = s.heads * s.head_dim;
  const std::int64_t rows = std::int64_t(s.batch) * s.tokens;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < s.heads; ++h) {
    HeadMap<Scalar> xs(x + std::int64_t(h) * d, rows, d, Eigen::OuterStride<>(ld));
    MutHeadMap<Scalar> ys(y + std::int64_t(h) * d, rows, d, Eigen::OuterStride<>(hd));
    if (const Scalar* p = rot.heads[h].transform)
      ys.noalias() = xs * Eigen::Map<const RowMajor<Scalar>>(p, d, d).transpose();
    else
      ys = xs;
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

// softmax(p) row by row in place, keys with mask[j] == 0 excluded; a row with every key masked becomes 0.
template <class Scalar>
void softmax_rows(Eigen::Map<RowMajor<Scalar>>& p, const std::uint8_t* mask) {
  using std::exp;
  const int T = int(p.rows());
  for (int i = 0; i < T; ++i) {
    if (!mask) {  // vectorised: Eigen's packet exp
      auto row = p.row(i).array();
      const Scalar mx = row.maxCoeff();
      row = (row - mx).exp();
      row *= Scalar(1) / row.sum();
      continue;
    }
    Scalar mx = -std::numeric_limits<Scalar>::infinity();
    for (int j = 0; j < T; ++j)
      if (mask[j]) mx = std::max(mx, p(i, j));
    if (mx == -std::numeric_limits<Scalar>::infinity()) {  // every key masked: no attention, output 0
      p.row(i).setZero();
      continue;
    }
    Scalar sum = 0;
    for (int j = 0; j < T; ++j) {
      const Scalar e = mask[j] ? exp(p(i, j) - mx) : Scalar(0);
      p(i, j) = e;
      sum += e;
    }
    p.row(i) /= sum;
  }
}

}  // namespace detail

// Forward. See the header comment for the layouts.
template <class Scalar>
void attention_forward(const AttentionShape& s, const Scalar* q, const Scalar* k, const Scalar* v, std::int64_t ld,
                       const AttentionRotations<Scalar>& rot, std::span<const std::uint8_t> key_mask, Scalar* out,
                       AttentionCache<Scalar>& cache) {
  detail::check_attention(s, ld, rot.heads.size(), rot.first_rotated);
  detail::check_mask(s, key_mask);
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
        rotate(table, xq + f * xl.token, xl, cache.qr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
        rotate(table, xk + f * xl.token, xl, cache.kr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
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
      detail::HeadMap<Scalar> qm(qh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::HeadMap<Scalar> km(kh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::HeadMap<Scalar> vm(v + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
      Eigen::Map<detail::RowMajor<Scalar>> p(cache.probs.data() + std::int64_t(bh) * T * T, T, T);
      p.noalias() = qm * km.transpose();
      p *= scale;
      detail::softmax_rows(p, key_mask.empty() ? nullptr : key_mask.data() + std::int64_t(b) * T);
      detail::MutHeadMap<Scalar> om(out + std::int64_t(b) * T * HD + h * D, T, D, Eigen::OuterStride<>(HD));
      om.noalias() = p * vm;
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
  detail::check_attention(s, ld, rot.heads.size(), rot.first_rotated);
  LIERE_ENSURE(!drot || drot->size() == rot.heads.size(),
               "attention_backward: " << (drot ? drot->size() : 0) << " rotation gradients for " << rot.heads.size()
                                      << " head rotations");
  LIERE_ENSURE(cache.probs.size() == std::size_t(s.batch) * s.heads * s.tokens * s.tokens,
               "attention_backward: the cache does not hold a forward of this shape");
  detail::check_mask(s, key_mask);  // masked probabilities are exactly 0: their gradients vanish in the softmax
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
      detail::RowMajor<Scalar> dp(T, T);
#pragma omp for schedule(static)
      for (int item = 0; item < items; ++item)
      for (int b = item / H * chunk, h = item % H, b1 = std::min(B, b + chunk); b < b1; ++b) {
        const int bh = b * H + h;
        detail::HeadMap<Scalar> qm(qh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
        detail::HeadMap<Scalar> km(kh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
        detail::HeadMap<Scalar> vm(v + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
        detail::HeadMap<Scalar> dom(dout + std::int64_t(b) * T * HD + h * D, T, D, Eigen::OuterStride<>(HD));
        detail::MutHeadMap<Scalar> dqm(dqh + b * dl.batch + h * D, T, D, Eigen::OuterStride<>(dl.token));
        detail::MutHeadMap<Scalar> dkm(dkh + b * dl.batch + h * D, T, D, Eigen::OuterStride<>(dl.token));
        detail::MutHeadMap<Scalar> dvm(dv + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
        Eigen::Map<const detail::RowMajor<Scalar>> p(cache.probs.data() + std::int64_t(bh) * T * T, T, T);
        dvm.noalias() += p.transpose() * dom;  // out = P·V
        dp.noalias() = dom * vm.transpose();   // dP
        // softmax: dS = P ∘ (dP − rowsum(dP ∘ P)), then the 1/√D scale
        for (int i = 0; i < T; ++i) {
          const Scalar dot = p.row(i).dot(dp.row(i));
          dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot)).matrix() * scale;
        }
        if (rotated) {  // scores = Q̂ K̂ᵀ
          dqm.noalias() = dp * km;
          dkm.noalias() = dp.transpose() * qm;
        } else {
          dqm.noalias() += dp * km;
          dkm.noalias() += dp.transpose() * qm;
        }
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
    rotate_backward(table, xq + f * xl.token, xl, cache.dqr.data() + off, contiguous, dxq + f * dxl.token, dxl, dtable,
                    B, tr, H, h);
    rotate_backward(table, xk + f * xl.token, xl, cache.dkr.data() + off, contiguous, dxk + f * dxl.token, dxl, dtable,
                    B, tr, H, h);
  }
  if (!transformed) return;
  // Through y = P·x: dx += Pᵀ·dy, dP += Σ dy·xᵀ.
  const std::int64_t rows = std::int64_t(B) * T;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < H; ++h) {
    const Scalar* pm = rot.heads[h].transform;
    for (int which = 0; which < 2; ++which) {
      const Scalar* x = which == 0 ? q : k;
      Scalar* dx = which == 0 ? dq : dk;
      const Scalar* dy = which == 0 ? cache.dxq.data() : cache.dxk.data();
      detail::HeadMap<Scalar> xs(x + std::int64_t(h) * D, rows, D, Eigen::OuterStride<>(ld));
      detail::MutHeadMap<Scalar> dxs(dx + std::int64_t(h) * D, rows, D, Eigen::OuterStride<>(ld));
      detail::HeadMap<Scalar> dys(dy + std::int64_t(h) * D, rows, D, Eigen::OuterStride<>(HD));
      if (pm) {
        dxs.noalias() += dys * Eigen::Map<const detail::RowMajor<Scalar>>(pm, D, D);
        if (drot && (*drot)[h].dtransform)
          Eigen::Map<detail::RowMajor<Scalar>>((*drot)[h].dtransform, D, D).noalias() += dys.transpose() * xs;
      } else {
        dxs += dys;
      }
    }
  }
}

}  // namespace liere
