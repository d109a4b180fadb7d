// liere/backend/cpu/linear.hpp — y = x Wᵀ + b, with W stored (OC, C) as in torch.nn.Linear.
//
// N rows (every leading dimension flattened: B·T), C input features, OC output features.
//   forward   y (N, OC) = x (N, C) · Wᵀ + b
//   backward  dx (N, C) += dy · W,   dW (OC, C) += dyᵀ · x,   db (OC) += Σ_n dy[n, :]
//             (overwrite_dx: dx = dy · W, for a fresh uninitialised buffer)
// Three GEMMs straight on the caller's buffers (gemm.hpp), 2·N·C·OC flops each. Gradient pointers may be
// nullptr: that gradient is skipped (an input image, a frozen weight). b may be nullptr (no bias). keep / kept: what
// the CUDA backend's bf16 forward keeps for its backward (its operands rounded once); nothing here.
#pragma once

#include <liere/backend/cpu/common.hpp>
#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/core/device.hpp>

namespace liere::cpu {

template <class S>
void linear_forward(const S* x,  // (N, C)
                    const S* w,  // (OC, C)
                    const std::type_identity_t<S>* b,  // (OC) or nullptr
                    S* y,        // (N, OC)
                    Index N, Index C, Index OC,
                    OpState* /*keep*/ = nullptr) {  // the CPU keeps nothing for the backward
  if (b) {
#pragma omp parallel for schedule(static) if (N * OC > kGrain)
    for (Index n = 0; n < N; ++n) {
      S* yr = y + n * OC;
#pragma omp simd
      for (Index o = 0; o < OC; ++o) yr[o] = b[o];
    }
  }
  gemm_act<S>(false, true, N, OC, C, S(1), x, w, b ? S(1) : S(0), y);
}

template <class S>
void linear_backward(const S* x,   // (N, C)
                     const S* w,   // (OC, C)
                     const S* dy,  // (N, OC)
                     std::type_identity_t<S>* dx,  // (N, C) or nullptr
                     std::type_identity_t<S>* dw,  // (OC, C) or nullptr
                     std::type_identity_t<S>* db,  // (OC) or nullptr
                     Index N, Index C, Index OC, bool overwrite_dx = false,
                     const OpState* /*kept*/ = nullptr) {
  if (dx) gemm_act<S>(false, false, N, C, OC, S(1), dy, w, overwrite_dx ? S(0) : S(1), dx);
  if (dw) gemm_act<S>(true, false, OC, C, N, S(1), dy, x, S(1), dw);
  if (db) colsum_accumulate(dy, N, OC, OC, db);
}

}  // namespace liere::cpu
