// liere/backend/kernels/layernorm.hpp — one row of layer normalisation and of its input gradient, shared by
// the CPU and the CUDA kernels (backend/cpu/layernorm.hpp has the maths).
//
//   layernorm_row_forward   μ, r = 1/√(σ² + eps) and y = (x − μ)·r ⊙ γ + β for one row of C values
//   layernorm_row_dx        dx += r · (g − mean(g) − x̂ · mean(g ⊙ x̂)),  g = dy ⊙ γ, x̂ = (x − μ)·r
//   layernorm_params_chunk  one chunk of dγ, dβ: Σ dy ⊙ x̂ and Σ dy over its rows, in row order
//   layernorm_params_lane   lane l of kReduceLanes: the chunks l, l + kReduceLanes, … in order (in acc_t<S>)
//   layernorm_params_finish dγ += the lanes' sums added by lane_tree_sum (reduce.hpp), dβ likewise
//
// A row is shared by Lanes lanes (a template parameter): lane l takes the column groups l, l + Lanes, … of V
// consecutive columns each, and `sum` (a functor) adds a value over the row's lanes and gives every lane the total.
// The CPU runs Lanes = 1, V = 1 and the identity (one thread per row, stride-1 simd loops); the CUDA kernels run a
// warp per row, Lanes = 32 with the warp's xor-shuffle sum, and V = 4 (float4 loads) where C % 4 == 0 and the
// rows are 16-byte aligned. So the GPU's μ, σ², mean(g), mean(g ⊙ x̂) add the same numbers as the CPU's in another
// order: its LayerNorm rows agree with the CPU's to float rounding, not bit for bit.
// The CPU kernel runs a chunk's every column on one thread and the columns of the finish in parallel; the CUDA
// kernels run one thread per (chunk, column) and one warp per column: dγ, dβ are the same sums in the same order on
// both sides, the same bits.
#pragma once

#include <cmath>
#include <type_traits>
#include <liere/backend/kernels/lanes.hpp>
#include <liere/backend/kernels/reduce.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/scalar.hpp>

namespace liere::kernels {

inline constexpr double kLayerNormEps = 1e-5;  // the default ε of every LayerNorm (PyTorch's)

// dγ and dβ are summed per chunk of kLayerNormChunk rows (a fixed split, independent of the thread or block count),
// then the chunks by kReduceLanes lanes in a fixed order (layernorm_params_finish): layernorm_backward_scratch(N, C)
// elements hold the (nchunks, 2, C) partial sums.
inline constexpr Index kLayerNormChunk = 32;
LIERE_HOST_DEVICE inline constexpr Index layernorm_backward_scratch(Index N, Index C) {
  return (N + kLayerNormChunk - 1) / kLayerNormChunk * 2 * C;
}

// The V values at p (consecutive; on the device, for float and V = 4, p must be 16-byte aligned: one float4 load).
template <int V, class S>
struct LaneVec {
  S v[V];
};
template <int V, class S>
LIERE_HOST_DEVICE inline LaneVec<V, S> lane_load(const S* p) {
#ifdef __CUDA_ARCH__
  if constexpr (V == 4 && std::is_same_v<S, float>) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    return {{t.x, t.y, t.z, t.w}};
  } else
#endif
  {
    LaneVec<V, S> r;
    for (int j = 0; j < V; ++j) r.v[j] = p[j];
    return r;
  }
}
template <int V, class S>
LIERE_HOST_DEVICE inline void lane_store(S* p, const LaneVec<V, S>& r) {
#ifdef __CUDA_ARCH__
  if constexpr (V == 4 && std::is_same_v<S, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else
#endif
  {
    for (int j = 0; j < V; ++j) p[j] = r.v[j];
  }
}

// One row, as lane `lane` of Lanes (C % V == 0): the lane's sums, `sum` over the lanes, the lane's columns of y;
// lane 0 writes μ and r.
template <int Lanes = 1, int V = 1, class S, class Sum = OneLane>
LIERE_HOST_DEVICE inline void layernorm_row_forward(const S* xr, const S* g, const S* b, S* yr, S* mean, S* rstd,
                                                    Index C, S inv_c, S eps, int lane = 0, Sum sum = {}) {
  using std::sqrt;
  const Index nq = C / V;  // groups of V columns
  S m = S(0);
  LIERE_OMP(simd reduction(+ : m))
  for (Index q = lane; q < nq; q += Lanes) {
    const LaneVec<V, S> xv = lane_load<V>(xr + q * V);
    for (int j = 0; j < V; ++j) m += xv.v[j];
  }
  m = sum(m) * inv_c;
  S v = S(0);
  LIERE_OMP(simd reduction(+ : v))
  for (Index q = lane; q < nq; q += Lanes) {
    const LaneVec<V, S> xv = lane_load<V>(xr + q * V);
    for (int j = 0; j < V; ++j) v += (xv.v[j] - m) * (xv.v[j] - m);
  }
  v = sum(v) * inv_c;
  const S r = S(1) / sqrt(v + eps);
  LIERE_OMP(simd)
  for (Index q = lane; q < nq; q += Lanes) {
    const LaneVec<V, S> xv = lane_load<V>(xr + q * V), gv = lane_load<V>(g + q * V), bv = lane_load<V>(b + q * V);
    LaneVec<V, S> yv;
    for (int j = 0; j < V; ++j) yv.v[j] = (xv.v[j] - m) * r * gv.v[j] + bv.v[j];
    lane_store<V>(yr + q * V, yv);
  }
  if (lane == 0) {
    *mean = m;
    *rstd = r;
  }
}

// dx of one row, as lane `lane` of Lanes (C % V == 0), as layernorm_row_forward.
template <int Lanes = 1, int V = 1, class S, class Sum = OneLane>
LIERE_HOST_DEVICE inline void layernorm_row_dx(const S* xr, const S* g, S m, S r, const S* dyr, S* dxr, Index C,
                                               S inv_c, int lane = 0, Sum sum = {}) {
  const Index nq = C / V;
  S sg = S(0), sgx = S(0);
  LIERE_OMP(simd reduction(+ : sg, sgx))
  for (Index q = lane; q < nq; q += Lanes) {
    const LaneVec<V, S> xv = lane_load<V>(xr + q * V), gv = lane_load<V>(g + q * V), dyv = lane_load<V>(dyr + q * V);
    for (int j = 0; j < V; ++j) {
      const S gi = dyv.v[j] * gv.v[j];
      sg += gi;
      sgx += gi * ((xv.v[j] - m) * r);
    }
  }
  sg = sum(sg) * inv_c;
  sgx = sum(sgx) * inv_c;
  LIERE_OMP(simd)
  for (Index q = lane; q < nq; q += Lanes) {
    const LaneVec<V, S> xv = lane_load<V>(xr + q * V), gv = lane_load<V>(g + q * V), dyv = lane_load<V>(dyr + q * V);
    LaneVec<V, S> dxv = lane_load<V>(dxr + q * V);
    for (int j = 0; j < V; ++j) dxv.v[j] += r * (dyv.v[j] * gv.v[j] - sg - ((xv.v[j] - m) * r) * sgx);
    lane_store<V>(dxr + q * V, dxv);
  }
}

// Chunk ch of the dγ, dβ sums (rows [ch·kLayerNormChunk, min(N, (ch + 1)·kLayerNormChunk))), columns [i0, i1):
// part[ch·2C + i] = Σ_n dy[n, i]·x̂[n, i] and part[ch·2C + C + i] = Σ_n dy[n, i], the rows in order. W > 0: i1 − i0
// == W, a compile-time width summed in registers and stored once (the GPU's thread per (chunk, column): W = 1;
// the same additions).
template <class S, Index W = 0>
LIERE_HOST_DEVICE inline void layernorm_params_chunk(const S* x, const S* mean, const S* rstd, const S* dy, S* part,
                                                     Index N, Index C, Index ch, Index i0, Index i1) {
  S* pg = part + ch * 2 * C;
  S* pb = pg + C;
  const Index n1 = (ch + 1) * kLayerNormChunk < N ? (ch + 1) * kLayerNormChunk : N;
  if constexpr (W > 0) {
    S ag[W], ab[W];
    for (Index k = 0; k < W; ++k) ag[k] = S(0), ab[k] = S(0);
    for (Index n = ch * kLayerNormChunk; n < n1; ++n) {
      const S* xr = x + n * C + i0;
      const S* dyr = dy + n * C + i0;
      const S m = mean[n], r = rstd[n];
      for (Index k = 0; k < W; ++k) {
        ag[k] = madd(dyr[k], (xr[k] - m) * r, ag[k]);
        ab[k] += dyr[k];
      }
    }
    for (Index k = 0; k < W; ++k) pg[i0 + k] = ag[k], pb[i0 + k] = ab[k];
  } else {
    for (Index i = i0; i < i1; ++i) pg[i] = S(0), pb[i] = S(0);
    for (Index n = ch * kLayerNormChunk; n < n1; ++n) {
      const S* xr = x + n * C;
      const S* dyr = dy + n * C;
      const S m = mean[n], r = rstd[n];
      LIERE_OMP(simd)
      for (Index i = i0; i < i1; ++i) {
        pg[i] = madd(dyr[i], (xr[i] - m) * r, pg[i]);
        pb[i] += dyr[i];
      }
    }
  }
}

// Lane `lane` of kReduceLanes of column i: the chunks lane, lane + kReduceLanes, … of layernorm_params_chunk, in
// order, in acc_t<S>: sg the dγ sums, sb the dβ sums.
template <class S>
LIERE_HOST_DEVICE inline void layernorm_params_lane(const S* part, Index N, Index C, Index i, int lane, acc_t<S>& sg,
                                                    acc_t<S>& sb) {
  const Index nchunks = (N + kLayerNormChunk - 1) / kLayerNormChunk;
  sg = acc_t<S>(0), sb = acc_t<S>(0);
  for (Index ch = lane; ch < nchunks; ch += kReduceLanes) {
    sg += acc_t<S>(part[ch * 2 * C + i]);
    sb += acc_t<S>(part[ch * 2 * C + C + i]);
  }
}

// Column i of dγ, dβ (either may be nullptr) += the chunks' sums: the lanes' sums (layernorm_params_lane) added by
// lane_tree_sum — the CUDA finish's warp, one lane after another.
template <class S>
LIERE_HOST_DEVICE inline void layernorm_params_finish(const S* part, Index N, Index C, Index i, S* dg, S* db) {
  acc_t<S> sg[kReduceLanes], sb[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) layernorm_params_lane(part, N, C, i, l, sg[l], sb[l]);
  if (dg) dg[i] += S(lane_tree_sum<kReduceLanes>(sg));
  if (db) db[i] += S(lane_tree_sum<kReduceLanes>(sb));
}

}  // namespace liere::kernels
