// liere/backend/cuda/flash_attention_api.hpp — the CUDA flash attention's plain functions (no Eigen: nvcc compiles
// backend/cuda/flash_attention.cu, which defines them, without it), called by cuda/flash_attention_ops.hpp.
#pragma once

#include <liere/backend/cuda/api.hpp>
#include <vector>

namespace liere::cuda {

// Largest head dim of the flash kernels (a thread keeps a query or key row, its accumulator and a scratch row).
inline constexpr int kFlashMaxHeadDim = 128;

// The forward keeps out, the log-sum-exps and the key mask in `state` (AttentionCache::flash_device); the backward
// accumulates like attention_backward (dq, dk, dv in the layout of q, k, v; dtables, dtransforms: H entries or
// empty). Every buffer is a block of the CUDA BufferPool.
void flash_attention_forward(const AttentionCall& a, float* out, AttentionState& state);
void flash_attention_backward(const AttentionCall& a, const float* dout, AttentionState& state, float* dq, float* dk,
                              float* dv, const std::vector<float*>& dtables, const std::vector<float*>& dtransforms);

}  // namespace liere::cuda
