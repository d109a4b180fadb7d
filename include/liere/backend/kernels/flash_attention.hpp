// liere/backend/kernels/flash_attention.hpp — the tile bodies of the fused rotary flash attention, shared by the
// CPU op (backend/cpu/flash_attention.hpp) and the CUDA kernels (backend/cuda/flash_attention.cu); the CPU tests
// run them (docs/math.md, "Fused rotary flash attention", has the maths).
//
// D head dim, T tokens. Per (sequence b, head h), with q̂ = R(t)·P·q, k̂ = R(t)·P·k, s = q̂·k̂ / √D:
//
//   rotation on load   rotate_load_row             ŷ = R(t)·(P·x)   (R: the token's table row, any block size,
//                                                                   dense included; P: an optional transform)
//                      rotate_load_row_backward    dx += Pᵀ Rᵀ dŷ,  dR(t) += dŷ (P x)ᵀ,  dP += (Rᵀ dŷ) xᵀ
//   forward            online_softmax_tile_row     one query row over one key tile: running max m, sum l; the
//                                                  scores become p = exp(s − m_new), returns α = exp(m_old − m_new)
//                      accumulate_pv_row           acc ← α·acc + Σ_j p_j v_j
//                      finalize_row                out = acc / l, returns the log-sum-exp m + log l (kept for the
//                                                  backward; −∞ for a row whose keys are all masked)
//   backward           row_dot                     D_i = dO_i · O_i
//                      backward_entry              p = exp(s − lse_i),  ds = scale · p (dp − D_i),  dp = dO_i · v_j
//                      backward_tile_row           backward_entry over one query row and one key tile
//   compositions       flash_forward_row_tile            one query row against a key tile, products included
//                      flash_backward_key_row_tile       one key row against a query tile: dk̂_j, dv_j
//                      flash_backward_query_row_tile     one query row against a key tile: dq̂_i
//   (the CUDA kernels run these one thread per row; the CPU op does the tile products with its GEMM and the
//   per-row parts with the bodies above.)
//
// The rotations reuse backend/kernels/rotate.hpp (rotate_row, rotate_row_backward, rotate_row_grad).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <liere/backend/kernels/rotate.hpp>
#include <liere/core/config.hpp>

namespace liere::kernels {

// How one head's q and k rows are rotated as they are loaded: a head's HeadRotation (pe/views.hpp) as plain
// pointers, so that a device kernel can take it by value.
template <class S>
struct RowRotation {
  const S* table = nullptr;      // (table_rows, D/block, block, block) row-major blocks, or null: no table
  int block = 0;                 // the table's block size (D for a dense table)
  int first_rotated = 0;         // tokens [0, first_rotated) are not rotated (a skipped CLS token)
  int table_rows = 0;            // T − first_rotated (shared by the batch) or B·(T − first_rotated) (per sequence)
  const S* transform = nullptr;  // D×D row-major, applied before the table, or null

  // The table row of token t (of T) of sequence b, or −1 when the token is not rotated.
  LIERE_HOST_DEVICE std::int64_t row(int b, int t, int T) const {
    if (!table || t < first_rotated) return -1;
    const int tr = T - first_rotated;
    return table_rows == tr ? std::int64_t(t - first_rotated) : std::int64_t(b) * tr + (t - first_rotated);
  }
};

// ŷ = R(t)·(P·x) for one token of one head (D values); tmp holds D values (used with a transform). y must not
// alias x or tmp.
template <class S>
LIERE_HOST_DEVICE inline void rotate_load_row(const RowRotation<S>& r, int b, int t, int T, int D, const S* x, S* tmp,
                                              S* y) {
  const S* src = x;
  if (r.transform) {
    rotate_row(r.transform, 1, D, x, tmp);
    src = tmp;
  }
  const std::int64_t row = r.row(b, t, T);
  if (row >= 0) {
    rotate_row(r.table + row * D * r.block, D / r.block, r.block, src, y);
  } else {
    for (int i = 0; i < D; ++i) y[i] = src[i];
  }
}

// A tile of `rows` tokens from t0: y(i, :) = R(t0 + i)·P·x(i, :), x rows ldx apart, y rows ldy apart.
template <class S>
LIERE_HOST_DEVICE inline void rotate_load_tile(const RowRotation<S>& r, int b, int t0, int rows, int T, int D,
                                               const S* x, std::int64_t ldx, S* tmp, S* y, std::int64_t ldy) {
  for (int i = 0; i < rows; ++i) rotate_load_row(r, b, t0 + i, T, D, x + i * ldx, tmp, y + i * ldy);
}

// The adjoint of rotate_load_row. x: the token's unrotated row; dy = dL/dŷ. Accumulates dx += Pᵀ·Rᵀ·dy, and
// where not null dtable (the table's layout) row += dy·(P·x)ᵀ and dtransform (D×D) += (Rᵀ·dy)·xᵀ. tmp: 2·D values.
template <class S>
LIERE_HOST_DEVICE inline void rotate_load_row_backward(const RowRotation<S>& r, int b, int t, int T, int D, const S* x,
                                                       const S* dy, S* dx, S* dtable, S* dtransform, S* tmp) {
  S* u = tmp;      // P·x
  S* g = tmp + D;  // Rᵀ·dy
  const S* gin = dy;
  const std::int64_t row = r.row(b, t, T);
  if (row >= 0) {
    const int nb = D / r.block;
    const std::int64_t off = row * D * r.block;
    for (int i = 0; i < D; ++i) g[i] = S(0);
    rotate_row_backward(r.table + off, nb, r.block, dy, g);
    if (dtable) {
      const S* xin = x;
      if (r.transform) {
        rotate_row(r.transform, 1, D, x, u);
        xin = u;
      }
      rotate_row_grad(dy, xin, nb, r.block, dtable + off);
    }
    gin = g;
  }
  if (r.transform) {
    rotate_row_backward(r.transform, 1, D, gin, dx);
    if (dtransform) rotate_row_grad(gin, x, 1, D, dtransform);
  } else {
    for (int i = 0; i < D; ++i) dx[i] += gin[i];
  }
}

template <class S>
LIERE_HOST_DEVICE inline S row_dot(const S* a, const S* b, int n) {
  S acc = S(0);
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// One query row over one key tile of n keys (online softmax). s: the row's scaled scores; keys with mask[j] == 0
// are skipped (mask may be null). m, l: the running max and the running Σ exp(s − m) of the tiles before (start
// −∞ and 0). On return s holds p_j = exp(s_j − m_new) (0 for masked keys), m and l are updated, and the result
// is α = exp(m_old − m_new), by which the caller scales its accumulator before adding Σ_j p_j v_j.
template <class S>
LIERE_HOST_DEVICE inline S online_softmax_tile_row(S* s, int n, const std::uint8_t* mask, S& m, S& l) {
  using std::exp;
  constexpr S ninf = -std::numeric_limits<S>::infinity();
  S mx = m;
  for (int j = 0; j < n; ++j)
    if (!mask || mask[j]) mx = s[j] > mx ? s[j] : mx;
  if (mx == ninf) {  // no key so far: nothing to accumulate
    for (int j = 0; j < n; ++j) s[j] = S(0);
    return S(1);
  }
  const S alpha = exp(m - mx);  // m = −∞ (first keys): 0
  S sum = S(0);
  for (int j = 0; j < n; ++j) {
    const S e = (!mask || mask[j]) ? exp(s[j] - mx) : S(0);
    s[j] = e;
    sum += e;
  }
  l = alpha * l + sum;
  m = mx;
  return alpha;
}

// acc (D) ← α·acc + Σ_j p_j v_j over a tile of n values rows (ldv apart).
template <class S>
LIERE_HOST_DEVICE inline void accumulate_pv_row(const S* p, int n, const S* v, std::int64_t ldv, int D, S alpha,
                                                S* acc) {
  for (int d = 0; d < D; ++d) acc[d] *= alpha;
  for (int j = 0; j < n; ++j) {
    const S pj = p[j];
    if (pj == S(0)) continue;
    const S* vj = v + j * ldv;
    for (int d = 0; d < D; ++d) acc[d] += pj * vj[d];
  }
}

// out = acc / l; returns the row's log-sum-exp m + log l, or −∞ (and out = 0) when every key was masked.
template <class S>
LIERE_HOST_DEVICE inline S finalize_row(const S* acc, int D, S m, S l, S* out) {
  using std::log;
  if (!(l > S(0))) {
    for (int d = 0; d < D; ++d) out[d] = S(0);
    return -std::numeric_limits<S>::infinity();
  }
  const S inv = S(1) / l;
  for (int d = 0; d < D; ++d) out[d] = acc[d] * inv;
  return m + log(l);
}

// One entry of the backward: the probability recomputed from the scaled score s and the row's log-sum-exp,
// p = exp(s − lse) (0 for a masked key), and the score gradient ds = scale · p · (dp − D_i), dp = dO_i · v_j.
template <class S>
LIERE_HOST_DEVICE inline void backward_entry(S s, S dp, bool key_on, S lse, S di, S scale, S& p, S& ds) {
  using std::exp;
  p = key_on ? exp(s - lse) : S(0);
  ds = scale * p * (dp - di);
}

// backward_entry over one query row and a key tile: s (scaled scores) becomes P, dp (dO_i · v_j) becomes dS
// (already multiplied by the scale, so that dq̂ = dS K̂ and dk̂ = dSᵀ Q̂).
template <class S>
LIERE_HOST_DEVICE inline void backward_tile_row(S* s, S* dp, int n, const std::uint8_t* mask, S lse, S di, S scale) {
  for (int j = 0; j < n; ++j) {
    S p, ds;
    backward_entry(s[j], dp[j], !mask || mask[j], lse, di, scale, p, ds);
    s[j] = p;
    dp[j] = ds;
  }
}

// ---- compositions: what one device thread runs for one row (products included) ----------------------------

// One rotated query row q̂ (D) against a key tile: n rows of k̂ (ldk apart) and v (ldv apart). s: n scratch
// values. Updates m, l, acc (online softmax).
template <class S>
LIERE_HOST_DEVICE inline void flash_forward_row_tile(const S* q, const S* k, std::int64_t ldk, const S* v,
                                                     std::int64_t ldv, int n, int D, const std::uint8_t* mask, S scale,
                                                     S* s, S& m, S& l, S* acc) {
  for (int j = 0; j < n; ++j) s[j] = scale * row_dot(q, k + j * ldk, D);
  const S alpha = online_softmax_tile_row(s, n, mask, m, l);
  accumulate_pv_row(s, n, v, ldv, D, alpha, acc);
}

// One key row (k̂_j, v_j; key_on: not masked) against a query tile of n rows: q̂ (ldq apart), dO (lddo apart),
// their log-sum-exps lse and D_i = dO_i · O_i. Accumulates dk̂_j += Σ_i ds_ij q̂_i and dv_j += Σ_i p_ij dO_i.
template <class S>
LIERE_HOST_DEVICE inline void flash_backward_key_row_tile(const S* k, const S* v, bool key_on, const S* q,
                                                          std::int64_t ldq, const S* dout, std::int64_t lddo,
                                                          const S* lse, const S* di, int n, int D, S scale, S* dk,
                                                          S* dv) {
  if (!key_on) return;  // p = 0 for every query: no gradient
  for (int i = 0; i < n; ++i) {
    const S* qi = q + i * ldq;
    const S* doi = dout + i * lddo;
    S p, ds;
    backward_entry(scale * row_dot(qi, k, D), row_dot(doi, v, D), true, lse[i], di[i], scale, p, ds);
    for (int d = 0; d < D; ++d) {
      dv[d] += p * doi[d];
      dk[d] += ds * qi[d];
    }
  }
}

// One query row (q̂_i, dO_i, its lse and D_i) against a key tile of n rows (k̂ ldk apart, v ldv apart):
// accumulates dq̂_i += Σ_j ds_ij k̂_j.
template <class S>
LIERE_HOST_DEVICE inline void flash_backward_query_row_tile(const S* q, const S* dout, S lse, S di, const S* k,
                                                            std::int64_t ldk, const S* v, std::int64_t ldv, int n,
                                                            int D, const std::uint8_t* mask, S scale, S* dq) {
  for (int j = 0; j < n; ++j) {
    const S* kj = k + j * ldk;
    S p, ds;
    backward_entry(scale * row_dot(q, kj, D), row_dot(dout, v + j * ldv, D), !mask || mask[j], lse, di, scale, p, ds);
    if (ds == S(0)) continue;
    for (int d = 0; d < D; ++d) dq[d] += ds * kj[d];
  }
}

}  // namespace liere::kernels
