// liere/backend/cuda/flash_attention_ops.hpp — the fused rotary flash attention as the device seam sees it
// (backend/dispatch.hpp): cuda::SeamOps (cuda/ops.hpp) derives from FlashAttentionCudaOps<SeamOps>, so that
// LIERE_DISPATCH(S, dev, flash_attention_forward, …) finds these beside the other ops. Same names and signatures
// as backend/cpu/flash_attention.hpp, in float; the kernels are in backend/cuda/flash_attention.cu.
#pragma once

#include <cstdint>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/flash_attention_api.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::backend {

// Ops: the seam's cuda::SeamOps, for its attention_call (the views as pointer lists, checked).
template <class Ops>
struct FlashAttentionCudaOps {
  static void flash_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                      std::int64_t ld, const AttentionRotations<float>& rot,
                                      std::span<const std::uint8_t> key_mask, float* out, AttentionCache<float>& cache) {
    LIERE_ENSURE(s.head_dim <= cuda::kFlashMaxHeadDim, "flash attention on cuda: head dim " << s.head_dim
                                                           << " is larger than the kernels' " << cuda::kFlashMaxHeadDim);
    cuda::flash_attention_forward(Ops::attention_call(s, q, k, v, ld, rot, key_mask), out, cache.flash_device);
    cache.probs.clear();
  }
  static void flash_attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                                       std::int64_t ld, const AttentionRotations<float>& rot,
                                       std::span<const std::uint8_t> key_mask, const float* dout,
                                       AttentionCache<float>& cache, float* dq, float* dk, float* dv,
                                       std::vector<HeadRotationGrad<float>>* drot) {
    LIERE_ENSURE(cache.flash_device, "flash_attention_backward: no flash attention forward on cuda before it");
    LIERE_ENSURE(!drot || drot->size() == rot.heads.size(),
                 "flash_attention_backward: " << (drot ? drot->size() : 0) << " rotation gradients for "
                                              << rot.heads.size() << " head rotations");
    std::vector<float*> dtables, dtransforms;
    if (drot)
      for (const HeadRotationGrad<float>& g : *drot) {
        dtables.push_back(g.dtable.data);
        dtransforms.push_back(g.dtransform);
      }
    cuda::flash_attention_backward(Ops::attention_call(s, q, k, v, ld, rot, key_mask), dout, cache.flash_device, dq, dk,
                                   dv, dtables, dtransforms);
  }
};

}  // namespace liere::backend
