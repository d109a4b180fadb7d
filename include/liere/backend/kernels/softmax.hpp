// liere/backend/kernels/softmax.hpp — one attention row's softmax and its backward, shared by the CPU and the
// CUDA kernels (LIERE_HOST_DEVICE).
//
//   softmax_row            p_j = exp(s_j − max) / Σ_k exp(s_k − max) over the keys with mask[k] ≠ 0 (mask may
//                          be null: every key); masked keys get 0, and a row with every key masked becomes 0
//   softmax_row_backward   dS_j = scale · P_j (dP_j − Σ_k dP_k P_k), in place in dp
// Both as lane `lane` of Lanes (kernels/lanes.hpp): the lane's keys j ≡ lane mod Lanes, the row's maximum and sums
// over the lanes by `max_all` and `sum_all`. The CPU: Lanes = 1; the CUDA kernels: a warp per row (its sums add the
// same terms in another order: equal to float rounding).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <liere/backend/kernels/lanes.hpp>
#include <liere/core/config.hpp>

namespace liere::kernels {

template <int Lanes = 1, class S, class Max = OneLane, class Sum = OneLane>
LIERE_HOST_DEVICE void softmax_row(S* p, int T, const std::uint8_t* mask, int lane = 0, Max max_all = {},
                                   Sum sum_all = {}) {
  using std::exp;
  S mx = -std::numeric_limits<S>::infinity();
  for (int j = lane; j < T; j += Lanes)
    if (!mask || mask[j]) mx = p[j] > mx ? p[j] : mx;
  mx = max_all(mx);
  if (mx == -std::numeric_limits<S>::infinity()) {  // every key masked: no attention, output 0
    for (int j = lane; j < T; j += Lanes) p[j] = S(0);
    return;
  }
  S sum = 0;
  for (int j = lane; j < T; j += Lanes) {
    const S e = (!mask || mask[j]) ? exp(p[j] - mx) : S(0);
    p[j] = e;
    sum += e;
  }
  sum = sum_all(sum);
  for (int j = lane; j < T; j += Lanes) p[j] /= sum;
}

template <int Lanes = 1, class S, class Sum = OneLane>
LIERE_HOST_DEVICE void softmax_row_backward(const S* p, S* dp, int T, S scale, int lane = 0, Sum sum_all = {}) {
  S dot = 0;
  for (int j = lane; j < T; j += Lanes) dot += p[j] * dp[j];
  dot = sum_all(dot);
  for (int j = lane; j < T; j += Lanes) dp[j] = p[j] * (dp[j] - dot) * scale;
}

}  // namespace liere::kernels
