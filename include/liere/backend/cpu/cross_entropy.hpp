// liere/backend/cpu/cross_entropy.hpp — softmax and cross-entropy fused, mean over the batch
// (torch.nn.CrossEntropyLoss(label_smoothing=ε)).
//
// For row b with logits z (K classes) and label y, the target is q = (1 − ε)·onehot(y) + ε/K:
//   p = softmax(z),   ℓ_b = −Σ_k q_k log p_k = lse(z) − (1 − ε) z_y − (ε/K) Σ_k z_k,   L = (1/B) Σ_b ℓ_b
//   dz_b += dL · (p_b − q_b) / B
// The forward saves p (B, K). Rows run in parallel; the mean adds the per-row losses in order.
#pragma once

#include <cmath>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/kernels/cross_entropy.hpp>
#include <vector>

namespace liere::cpu {

template <class S>
S softmax_cross_entropy_forward(const S* logits,   // (B, K)
                                const int* labels,  // (B), in [0, K)
                                double smoothing,   // ε in [0, 1)
                                S* probs,           // (B, K) saved softmax
                                std::type_identity_t<S>* row_loss,  // (B) ℓ_b, or nullptr
                                Index B, Index K) {
  kernels::check_cross_entropy(K, smoothing);
  for (Index b = 0; b < B; ++b)
    LIERE_ENSURE(labels[b] >= 0 && labels[b] < K,
                 "cross_entropy: label " << labels[b] << " of sample " << b << " is outside [0, " << K << ")");
  std::vector<S> losses(std::size_t(B), S(0));
  const S eps_k = S(smoothing / double(K)), one_m_eps = S(1.0 - smoothing);
#pragma omp parallel for schedule(static) if (B * K > kGrain)
  for (Index b = 0; b < B; ++b)
    losses[std::size_t(b)] = kernels::cross_entropy_row_forward(logits + b * K, labels[b], eps_k, one_m_eps, probs + b * K, K);
  S total = S(0);
  for (Index b = 0; b < B; ++b) {
    total += losses[std::size_t(b)];
    if (row_loss) row_loss[b] = losses[std::size_t(b)];
  }
  return B > 0 ? total / S(double(B)) : S(0);
}

// The same writing the mean loss to loss[0] (device-friendly signature, as the CUDA backend's).
template <class S>
void softmax_cross_entropy_forward(const S* logits, const int* labels, double smoothing, S* probs,
                                   std::type_identity_t<S>* row_loss, S* loss, Index B, Index K) {
  loss[0] = softmax_cross_entropy_forward(logits, labels, smoothing, probs, row_loss, B, K);
}

template <class S>
void softmax_cross_entropy_backward(const S* probs,     // (B, K)
                                    const int* labels,  // (B)
                                    double smoothing,
                                    S dloss,            // dL/dL (the seed: 1 for a plain loss)
                                    S* dlogits,         // (B, K)
                                    Index B, Index K) {
  const S eps_k = S(smoothing / double(K)), one_m_eps = S(1.0 - smoothing);
  const S c = dloss / S(double(B));
#pragma omp parallel for schedule(static) if (B * K > kGrain)
  for (Index b = 0; b < B; ++b) kernels::cross_entropy_row_backward(probs + b * K, labels[b], eps_k, one_m_eps, c, dlogits + b * K, K);
}

// The same with dL/dL in memory (device-friendly signature).
template <class S>
void softmax_cross_entropy_backward(const S* probs, const int* labels, double smoothing, const S* dloss, S* dlogits,
                                    Index B, Index K) {
  softmax_cross_entropy_backward(probs, labels, smoothing, dloss[0], dlogits, B, K);
}

}  // namespace liere::cpu
