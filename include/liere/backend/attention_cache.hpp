// liere/backend/attention_cache.hpp — what an attention layer's forward keeps for its backward, on any device.
#pragma once

#include <memory>
#include <vector>

namespace liere {

// What the forward keeps for the backward, and scratch space reused from call to call. The CPU kernels
// (backend/cpu/attention.hpp) use the host vectors; the CUDA kernels keep their device buffers in `device`
// (backend/cuda/attention.cu), where the attention map stays unless probs() copies it.
template <class Scalar>
struct AttentionCache {
  std::vector<Scalar> xq, xk;    // (B, T, H, D) P·q, P·k           (only with transforms)
  std::vector<Scalar> qr, kr;    // (B, T, H, D) rotated q̂, k̂       (only with rotations)
  std::vector<Scalar> probs;     // (B, H, T, T) the attention map (CPU)
  std::vector<Scalar> dqr, dkr;  // backward scratch, (B, T, H, D)
  std::vector<Scalar> dxq, dxk;  // backward scratch, (B, T, H, D)
  std::shared_ptr<void> device;  // the CUDA backend's buffers (q̂, k̂, v, the attention map) of the last forward
  // Set by the caller before a forward. backward: a backward of this forward will run (the CUDA backend keeps
  // nothing for one otherwise); keep_probs: keep the attention map also when no backward runs. The CPU kernels
  // always keep the map (host memory) and ignore both.
  bool backward = true;
  bool keep_probs = false;
};

}  // namespace liere
