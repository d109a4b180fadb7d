// liere/backend/cpu/layernorm.hpp — layer normalisation over the last dimension (torch.nn.LayerNorm).
//
// For each of the N rows of x (N, C):
//   μ = mean(x),  σ² = mean((x − μ)²)  (biased, as PyTorch),  r = 1/√(σ² + eps),  x̂ = (x − μ)·r
//   y = x̂ ⊙ γ + β
// The forward saves μ and r per row (N each) for the backward:
//   g = dy ⊙ γ
//   dx += r · (g − mean(g) − x̂ · mean(g ⊙ x̂))
//   dγ += Σ_n dy ⊙ x̂,   dβ += Σ_n dy
// (from ∂x̂_j/∂x_i = r(δ_ij − 1/C − x̂_i x̂_j / C)). Rows run in parallel; dγ and dβ are summed per fixed
// chunk of kernels::kLayerNormChunk rows and the chunks added in a fixed order (kernels::layernorm_params_finish,
// in double for float), so the result does not depend on the thread count.
// Template on the scalar: float for training, double (and dual numbers in the tests) for checking.
#pragma once

#include <cmath>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/kernels/layernorm.hpp>

namespace liere::cpu {

using kernels::kLayerNormEps;

template <class S>
void layernorm_forward(const S* x,   // (N, C)
                       const S* g,   // (C) γ
                       const S* b,   // (C) β
                       S* y,         // (N, C)
                       S* mean,      // (N) saved μ
                       S* rstd,      // (N) saved 1/√(σ² + eps)
                       Index N, Index C, double eps = kLayerNormEps) {
  const S inv_c = S(1) / S(double(C));
#pragma omp parallel for schedule(static) if (N * C > kGrain)
  for (Index n = 0; n < N; ++n) kernels::layernorm_row_forward(x + n * C, g, b, y + n * C, mean + n, rstd + n, C, inv_c, S(eps));
}

// The scratch buffer layernorm_backward needs for dγ, dβ: kernels::layernorm_backward_scratch(N, C) elements.
using kernels::kLayerNormChunk;
using kernels::layernorm_backward_scratch;

template <class S>
void layernorm_backward(const S* x,     // (N, C)
                        const S* g,     // (C) γ
                        const S* mean,  // (N)
                        const S* rstd,  // (N)
                        const S* dy,    // (N, C)
                        std::type_identity_t<S>* dx,  // (N, C) or nullptr
                        std::type_identity_t<S>* dg,  // (C) or nullptr
                        std::type_identity_t<S>* db,  // (C) or nullptr
                        std::type_identity_t<S>* scratch,  // (nchunks, 2, C) = layernorm_backward_scratch(N, C)
                                                           // values when dg or db is given, else unused
                        Index N, Index C) {
  const Index nchunks = (N + kLayerNormChunk - 1) / kLayerNormChunk;
  const bool params = dg || db;
  const S inv_c = S(1) / S(double(C));
#pragma omp parallel for schedule(static) if (N * C > kGrain)
  for (Index ch = 0; ch < nchunks; ++ch) {
    if (params) kernels::layernorm_params_chunk(x, mean, rstd, dy, scratch, N, C, ch, Index(0), C);
    if (dx) {
      const Index n1 = std::min(N, (ch + 1) * kLayerNormChunk);
      for (Index n = ch * kLayerNormChunk; n < n1; ++n)
        kernels::layernorm_row_dx(x + n * C, g, mean[n], rstd[n], dy + n * C, dx + n * C, C, inv_c);
    }
  }
  if (params) {  // chunks in order, columns in parallel
#pragma omp parallel for schedule(static) if (nchunks * C > kGrain)
    for (Index i = 0; i < C; ++i) kernels::layernorm_params_finish<S>(scratch, N, C, i, dg, db);
  }
}

}  // namespace liere::cpu
