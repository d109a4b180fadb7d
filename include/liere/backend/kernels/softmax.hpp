// liere/backend/kernels/softmax.hpp — one attention row's softmax and its backward, shared by the CPU and the
// CUDA kernels (LIERE_HOST_DEVICE).
//
//   softmax_row            p_j = exp(s_j − max) / Σ_k exp(s_k − max) over the keys with mask[k] ≠ 0 (mask may
//                          be null: every key); masked keys get 0, and a row with every key masked becomes 0
//   softmax_row_backward   dS_j = scale · P_j (dP_j − Σ_k dP_k P_k), in place in dp
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <liere/core/config.hpp>

namespace liere::kernels {

template <class S>
LIERE_HOST_DEVICE void softmax_row(S* p, int T, const std::uint8_t* mask) {
  using std::exp;
  S mx = -std::numeric_limits<S>::infinity();
  for (int j = 0; j < T; ++j)
    if (!mask || mask[j]) mx = p[j] > mx ? p[j] : mx;
  if (mx == -std::numeric_limits<S>::infinity()) {  // every key masked: no attention, output 0
    for (int j = 0; j < T; ++j) p[j] = S(0);
    return;
  }
  S sum = 0;
  for (int j = 0; j < T; ++j) {
    const S e = (!mask || mask[j]) ? exp(p[j] - mx) : S(0);
    p[j] = e;
    sum += e;
  }
  for (int j = 0; j < T; ++j) p[j] /= sum;
}

template <class S>
LIERE_HOST_DEVICE void softmax_row_backward(const S* p, S* dp, int T, S scale) {
  S dot = 0;
  for (int j = 0; j < T; ++j) dot += p[j] * dp[j];
  for (int j = 0; j < T; ++j) dp[j] = p[j] * (dp[j] - dot) * scale;
}

}  // namespace liere::kernels
