// liere/backend/cpu/softmax.hpp — the attention softmax over rows of a (T, T) row-major score buffer, and its
// backward, on the CPU.
//
//   softmax_rows_forward   p = softmax(p) row by row, keys with mask[j] == 0 excluded (kernels/softmax.hpp)
//   softmax_rows_backward  dS = scale · P ∘ (dP − rowsum(dP ∘ P)), in place in dp
// Rows without a mask go through Eigen's vectorised exp and dot (the masked rows and the CUDA kernels use the
// shared scalar bodies of backend/kernels/softmax.hpp; tests check that both agree).
#pragma once

#include <liere/core/eigen.hpp>
#include <cstdint>
#include <liere/backend/kernels/softmax.hpp>

namespace liere::cpu {

template <class S>
void softmax_rows_forward(S* p,  // (T, T) row-major, scores in, probabilities out
                          int T, const std::uint8_t* mask) {
  using Rows = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  Rows pm(p, T, T);
  for (int i = 0; i < T; ++i) {
    if (mask) {
      kernels::softmax_row(p + std::int64_t(i) * T, T, mask);
      continue;
    }
    auto row = pm.row(i).array();  // vectorised: Eigen's packet exp
    const S mx = row.maxCoeff();
    row = (row - mx).exp();
    row *= S(1) / row.sum();
  }
}

template <class S>
void softmax_rows_backward(const S* p,  // (T, T) probabilities
                           S* dp,       // (T, T) dL/dP in, dL/dscores out
                           int T, S scale) {
  using Rows = Eigen::Map<Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using ConstRows = Eigen::Map<const Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  ConstRows pm(p, T, T);
  Rows dpm(dp, T, T);
  for (int i = 0; i < T; ++i) {
    const S dot = pm.row(i).dot(dpm.row(i));
    dpm.row(i) = (pm.row(i).array() * (dpm.row(i).array() - dot)).matrix() * scale;
  }
}

}  // namespace liere::cpu
