// liere/backend/cpu/tokens.hpp — token bookkeeping of a ViT: prepend a CLS token, read it back, mean-pool.
//
// B batch, N patch tokens, T tokens, D width.
//   prepend_token  x (B, N, D), tok (D) → y (B, N+1, D), y[b, 0] = tok, y[b, 1:] = x[b]
//                  dx += dy[:, 1:],   dtok += Σ_b dy[b, 0]
//   select_token   x (B, T, D) → y (B, D) = x[:, t]                      dx[:, t] += dy
//   mean_tokens    x (B, T, D) → y (B, D) = mean over tokens [t0, T)      dx[:, t0:] += dy / (T − t0)
#pragma once

#include <cstring>
#include <liere/backend/cpu/common.hpp>

namespace liere::cpu {

template <class S>
void prepend_token_forward(const S* x,    // (B, N, D)
                           const S* tok,  // (D)
                           S* y,          // (B, N+1, D)
                           Index B, Index N, Index D) {
#pragma omp parallel for schedule(static) if (B * N * D > kGrain)
  for (Index b = 0; b < B; ++b) {
    S* yb = y + b * (N + 1) * D;
    std::memcpy(yb, tok, std::size_t(D) * sizeof(S));
    std::memcpy(yb + D, x + b * N * D, std::size_t(N * D) * sizeof(S));
  }
}

template <class S>
void prepend_token_backward(const S* dy,  // (B, N+1, D)
                            std::type_identity_t<S>* dx,  // (B, N, D) or nullptr
                            std::type_identity_t<S>* dtok,  // (D) or nullptr
                            Index B, Index N, Index D) {
  if (dx) {
#pragma omp parallel for schedule(static) if (B * N * D > kGrain)
    for (Index b = 0; b < B; ++b) {
      const S* src = dy + b * (N + 1) * D + D;
      S* dst = dx + b * N * D;
      for (Index i = 0; i < N * D; ++i) dst[i] += src[i];
    }
  }
  if (dtok) colsum_accumulate(dy, B, D, (N + 1) * D, dtok);  // rows b: dy[b, 0, :]
}

template <class S>
void select_token_forward(const S* x,  // (B, T, D)
                          S* y,        // (B, D)
                          Index B, Index T, Index D, Index t) {
  for (Index b = 0; b < B; ++b) std::memcpy(y + b * D, x + (b * T + t) * D, std::size_t(D) * sizeof(S));
}

template <class S>
void select_token_backward(const S* dy,  // (B, D)
                           S* dx,        // (B, T, D)
                           Index B, Index T, Index D, Index t) {
  for (Index b = 0; b < B; ++b) {
    S* dst = dx + (b * T + t) * D;
    for (Index i = 0; i < D; ++i) dst[i] += dy[b * D + i];
  }
}

template <class S>
void mean_tokens_forward(const S* x,  // (B, T, D)
                         S* y,        // (B, D)
                         Index B, Index T, Index D, Index t0) {
  const S inv = S(1) / S(double(T - t0));
#pragma omp parallel for schedule(static) if (B * T * D > kGrain)
  for (Index b = 0; b < B; ++b) {
    S* yb = y + b * D;
    for (Index i = 0; i < D; ++i) yb[i] = S(0);
    for (Index t = t0; t < T; ++t) {
      const S* xt = x + (b * T + t) * D;
#pragma omp simd
      for (Index i = 0; i < D; ++i) yb[i] += xt[i];
    }
    for (Index i = 0; i < D; ++i) yb[i] *= inv;
  }
}

template <class S>
void mean_tokens_backward(const S* dy,  // (B, D)
                          S* dx,        // (B, T, D)
                          Index B, Index T, Index D, Index t0) {
  const S inv = S(1) / S(double(T - t0));
#pragma omp parallel for schedule(static) if (B * T * D > kGrain)
  for (Index b = 0; b < B; ++b)
    for (Index t = t0; t < T; ++t) {
      S* dxt = dx + (b * T + t) * D;
#pragma omp simd
      for (Index i = 0; i < D; ++i) dxt[i] += dy[b * D + i] * inv;
    }
}

}  // namespace liere::cpu
