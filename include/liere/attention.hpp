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
  const Scalar *qh = q, *kh = k;  // what enters the scores
  std::int64_t qld = ld;
  if (rot.any()) {
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
    cache.qr.resize(n);
    cache.kr.resize(n);
    const int f = rot.first_rotated, tr = T - f;
    for (int h = 0; h < H; ++h) {
      // unrotated tokens are copied, rotated ones go through the table
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < f; ++t)
          for (int i = 0; i < D; ++i) {
            const std::int64_t src = b * xl.batch + t * xl.token + h * D + i, dst = (std::int64_t(b) * T + t) * HD + h * D + i;
            cache.qr[dst] = xq[src];
            cache.kr[dst] = xk[src];
          }
      const RotationTableView<const Scalar>& table = rot.heads[h].table;
      if (tr == 0) continue;
      if (table) {
        rotate(table, xq + f * xl.token, xl, cache.qr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
        rotate(table, xk + f * xl.token, xl, cache.kr.data() + std::int64_t(f) * HD, contiguous, B, tr, H, h);
      } else {
        for (int b = 0; b < B; ++b)
          for (int t = f; t < T; ++t)
            for (int i = 0; i < D; ++i) {
              const std::int64_t src = b * xl.batch + t * xl.token + h * D + i, dst = (std::int64_t(b) * T + t) * HD + h * D + i;
              cache.qr[dst] = xq[src];
              cache.kr[dst] = xk[src];
            }
      }
    }
    qh = cache.qr.data();
    kh = cache.kr.data();
    qld = HD;
  }
  cache.probs.resize(std::int64_t(B) * H * T * T);
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    detail::HeadMap<Scalar> qm(qh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
    detail::HeadMap<Scalar> km(kh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
    detail::HeadMap<Scalar> vm(v + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
    Eigen::Map<detail::RowMajor<Scalar>> p(cache.probs.data() + std::int64_t(bh) * T * T, T, T);
    p.noalias() = qm * km.transpose();
    p *= scale;
    const std::uint8_t* mask = key_mask.empty() ? nullptr : key_mask.data() + std::int64_t(b) * T;
    for (int i = 0; i < T; ++i) {
      Scalar mx = -std::numeric_limits<Scalar>::infinity();
      for (int j = 0; j < T; ++j)
        if (!mask || mask[j]) mx = std::max(mx, p(i, j));
      if (mx == -std::numeric_limits<Scalar>::infinity()) {  // every key masked: no attention, output 0
        p.row(i).setZero();
        continue;
      }
      Scalar sum = 0;
      for (int j = 0; j < T; ++j) {
        const Scalar e = (!mask || mask[j]) ? std::exp(p(i, j) - mx) : Scalar(0);
        p(i, j) = e;
        sum += e;
      }
      p.row(i) /= sum;
    }
    detail::MutHeadMap<Scalar> om(out + std::int64_t(b) * T * HD + h * D, T, D, Eigen::OuterStride<>(HD));
    om.noalias() = p * vm;
  }
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
  const Scalar* qh = rotated ? cache.qr.data() : q;
  const Scalar* kh = rotated ? cache.kr.data() : k;
  const std::int64_t qld = rotated ? HD : ld;
  Scalar* dqh = dq;
  Scalar* dkh = dk;
  if (rotated) {  // gradients w.r.t. q̂, k̂ first
    cache.dqr.assign(n, Scalar(0));
    cache.dkr.assign(n, Scalar(0));
    dqh = cache.dqr.data();
    dkh = cache.dkr.data();
  }
  const Scalar scale = Scalar(1) / std::sqrt(Scalar(D));
#pragma omp parallel
  {
    detail::RowMajor<Scalar> dp(T, T);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      detail::HeadMap<Scalar> qm(qh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::HeadMap<Scalar> km(kh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::HeadMap<Scalar> vm(v + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
      detail::HeadMap<Scalar> dom(dout + std::int64_t(b) * T * HD + h * D, T, D, Eigen::OuterStride<>(HD));
      detail::MutHeadMap<Scalar> dqm(dqh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::MutHeadMap<Scalar> dkm(dkh + b * T * qld + h * D, T, D, Eigen::OuterStride<>(qld));
      detail::MutHeadMap<Scalar> dvm(dv + b * T * ld + h * D, T, D, Eigen::OuterStride<>(ld));
      Eigen::Map<const detail::RowMajor<Scalar>> p(cache.probs.data() + std::int64_t(bh) * T * T, T, T);
      dvm.noalias() += p.transpose() * dom;  // out = P·V
      dp.noalias() = dom * vm.transpose();   // dP
      // softmax: dS = P ∘ (dP − rowsum(dP ∘ P)), then the 1/√D scale
      for (int i = 0; i < T; ++i) {
        const Scalar dot = p.row(i).dot(dp.row(i));
        dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot)).matrix() * scale;
      }
      dqm.noalias() += dp * km;              // scores = Q̂ K̂ᵀ
      dkm.noalias() += dp.transpose() * qm;
    }
  }
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
  const int f = rot.first_rotated, tr = T - f;
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
