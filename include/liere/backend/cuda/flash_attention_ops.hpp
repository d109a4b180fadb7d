// liere/backend/cuda/flash_attention_ops.hpp — the fused rotary flash attention as the device seam sees it
// (backend/dispatch.hpp): CudaOps (cuda/ops.hpp) derives from FlashAttentionCudaOps, so that
// LIERE_DISPATCH(S, dev, flash_attention_forward, …) finds these beside the other ops. Same names and signatures
// as backend/cpu/flash_attention.hpp, in float.
#pragma once

#include <cstdint>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::backend {

struct FlashAttentionCudaOps {
  static void flash_attention_forward(const AttentionShape&, const float*, const float*, const float*, std::int64_t,
                                      const AttentionRotations<float>&, std::span<const std::uint8_t>, float*,
                                      AttentionCache<float>&) {
    LIERE_ENSURE(false, "flash_attention_forward has no CUDA kernel yet (run the unfused attention on cuda)");
  }
  static void flash_attention_backward(const AttentionShape&, const float*, const float*, const float*, std::int64_t,
                                       const AttentionRotations<float>&, std::span<const std::uint8_t>, const float*,
                                       AttentionCache<float>&, float*, float*, float*,
                                       std::vector<HeadRotationGrad<float>>*) {
    LIERE_ENSURE(false, "flash_attention_backward has no CUDA kernel yet (run the unfused attention on cuda)");
  }
};

}  // namespace liere::backend
