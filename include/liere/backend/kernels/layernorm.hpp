// liere/backend/kernels/layernorm.hpp — one row of layer normalisation and of its input gradient, shared by
// the CPU and the CUDA kernels (backend/cpu/layernorm.hpp has the maths).
//
//   layernorm_row_forward   μ, r = 1/√(σ² + eps) and y = (x − μ)·r ⊙ γ + β for one row of C values
//   layernorm_row_dx        dx += r · (g − mean(g) − x̂ · mean(g ⊙ x̂)),  g = dy ⊙ γ, x̂ = (x − μ)·r
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

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

}  // namespace liere::kernels
