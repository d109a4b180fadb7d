// liere/backend/kernels/layernorm.hpp — one row of layer normalisation and of its input gradient, shared by
// the CPU and the CUDA kernels (backend/cpu/layernorm.hpp has the maths).
//
//   layernorm_row_forward   μ, r = 1/√(σ² + eps) and y = (x − μ)·r ⊙ γ + β for one row of C values
//   layernorm_row_dx        dx += r · (g − mean(g) − x̂ · mean(g ⊙ x̂)),  g = dy ⊙ γ, x̂ = (x − μ)·r
//   layernorm_params_chunk  one chunk of dγ, dβ: Σ dy ⊙ x̂ and Σ dy over its rows, in row order
//   layernorm_params_finish dγ += Σ of the chunks' sums, dβ likewise, the chunks in order (in acc_t<S>)
// The CPU kernel runs a chunk's every column on one thread and the columns of the finish in parallel; the CUDA
// kernels run one thread per (chunk, column) and per column: the same sums in the same order, the same bits.
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/scalar.hpp>

namespace liere::kernels {

inline constexpr double kLayerNormEps = 1e-5;  // the default ε of every LayerNorm (PyTorch's)

// dγ and dβ are summed per chunk of kLayerNormChunk rows (a fixed split, independent of the thread or block count),
// then the chunks in order: layernorm_backward_scratch(N, C) elements hold the (nchunks, 2, C) partial sums.
inline constexpr Index kLayerNormChunk = 64;
LIERE_HOST_DEVICE inline constexpr Index layernorm_backward_scratch(Index N, Index C) {
  return (N + kLayerNormChunk - 1) / kLayerNormChunk * 2 * C;
}

template <class S>
LIERE_HOST_DEVICE inline void layernorm_row_forward(const S* xr, const S* g, const S* b, S* yr, S* mean, S* rstd,
                                                    Index C, S inv_c, S eps) {
  using std::sqrt;
  S m = S(0);
  LIERE_OMP(simd reduction(+ : m))
  for (Index i = 0; i < C; ++i) m += xr[i];
  m *= inv_c;
  S v = S(0);
  LIERE_OMP(simd reduction(+ : v))
  for (Index i = 0; i < C; ++i) v += (xr[i] - m) * (xr[i] - m);
  v *= inv_c;
  const S r = S(1) / sqrt(v + eps);
  LIERE_OMP(simd)
  for (Index i = 0; i < C; ++i) yr[i] = (xr[i] - m) * r * g[i] + b[i];
  *mean = m;
  *rstd = r;
}

template <class S>
LIERE_HOST_DEVICE inline void layernorm_row_dx(const S* xr, const S* g, S m, S r, const S* dyr, S* dxr, Index C,
                                               S inv_c) {
  S sg = S(0), sgx = S(0);
  LIERE_OMP(simd reduction(+ : sg, sgx))
  for (Index i = 0; i < C; ++i) {
    const S gi = dyr[i] * g[i];
    sg += gi;
    sgx += gi * ((xr[i] - m) * r);
  }
  sg *= inv_c;
  sgx *= inv_c;
  LIERE_OMP(simd)
  for (Index i = 0; i < C; ++i) dxr[i] += r * (dyr[i] * g[i] - sg - ((xr[i] - m) * r) * sgx);
}

// Chunk ch of the dγ, dβ sums (rows [ch·kLayerNormChunk, min(N, (ch + 1)·kLayerNormChunk))), columns [i0, i1):
// part[ch·2C + i] = Σ_n dy[n, i]·x̂[n, i] and part[ch·2C + C + i] = Σ_n dy[n, i], the rows in order.
template <class S>
LIERE_HOST_DEVICE inline void layernorm_params_chunk(const S* x, const S* mean, const S* rstd, const S* dy, S* part,
                                                     Index N, Index C, Index ch, Index i0, Index i1) {
  S* pg = part + ch * 2 * C;
  S* pb = pg + C;
  for (Index i = i0; i < i1; ++i) pg[i] = S(0), pb[i] = S(0);
  const Index n1 = (ch + 1) * kLayerNormChunk < N ? (ch + 1) * kLayerNormChunk : N;
  for (Index n = ch * kLayerNormChunk; n < n1; ++n) {
    const S* xr = x + n * C;
    const S* dyr = dy + n * C;
    const S m = mean[n], r = rstd[n];
    LIERE_OMP(simd)
    for (Index i = i0; i < i1; ++i) {
      pg[i] += dyr[i] * ((xr[i] - m) * r);
      pb[i] += dyr[i];
    }
  }
}

// Column i of dγ, dβ (either may be nullptr) += the sums of the chunks of layernorm_params_chunk, in chunk order.
template <class S>
LIERE_HOST_DEVICE inline void layernorm_params_finish(const S* part, Index N, Index C, Index i, S* dg, S* db) {
  const Index nchunks = (N + kLayerNormChunk - 1) / kLayerNormChunk;
  acc_t<S> sg = acc_t<S>(0), sb = acc_t<S>(0);
  for (Index ch = 0; ch < nchunks; ++ch) {
    sg += acc_t<S>(part[ch * 2 * C + i]);
    sb += acc_t<S>(part[ch * 2 * C + C + i]);
  }
  if (dg) dg[i] += S(sg);
  if (db) db[i] += S(sb);
}

}  // namespace liere::kernels
