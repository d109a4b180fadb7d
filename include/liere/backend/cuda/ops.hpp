// liere/backend/cuda/ops.hpp — the CUDA backend as the device seam (backend/dispatch.hpp) sees it: SeamOps is Ops
// (api.hpp: every op, defined in the .cu files) plus what nvcc cannot compile, because it needs the pe layer's
// views (pe/views.hpp includes Eigen): attention's rotations as views become the plain pointer lists of
// AttentionCall here, on the host (and in the base FlashAttentionCudaOps for the flash attention). Nothing else is
// here: an op of api.hpp needs no line in this file.
#pragma once

#include <cstdint>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/flash_attention_ops.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::cuda {

struct SeamOps : Ops, backend::FlashAttentionCudaOps<SeamOps> {  // flash_attention_forward/_backward: cuda/flash_attention_ops.hpp
  // The views as pointer lists, after the checks every backend makes (check_attention, backend/types.hpp) and
  // those of this backend (at most kMaxHeads heads, one block size and row count for every table).
  static AttentionCall attention_call(const AttentionShape& s, const float* q, const float* k, const float* v,
                                      std::int64_t ld, const AttentionRotations<float>& rot,
                                      std::span<const std::uint8_t> key_mask) {
    check_attention(s, ld, rot.heads.size(), rot.first_rotated, key_mask.size());
    LIERE_ENSURE(s.heads <= kMaxHeads, "attention on cuda: at most " << kMaxHeads << " heads, got " << s.heads);
    AttentionCall a;
    a.s = s;
    a.q = q, a.k = k, a.v = v, a.ld = ld;
    a.first_rotated = rot.first_rotated;
    a.key_mask = key_mask.empty() ? nullptr : key_mask.data();
    const int tr = s.tokens - rot.first_rotated;
    for (const HeadRotation<float>& h : rot.heads) {
      a.tables.push_back(h.table ? h.table.data : nullptr);
      a.transforms.push_back(h.transform);
      if (!h.table) continue;
      LIERE_ENSURE(h.table.head_dim == s.head_dim, "attention: a table of head dim " << h.table.head_dim << " for "
                                                                                     << s.head_dim);
      LIERE_ENSURE(h.table.tokens == tr || h.table.tokens == s.batch * tr,
                   "attention: a table of " << h.table.tokens << " rows for " << tr << " rotated tokens (batch " << s.batch
                                            << ")");
      LIERE_ENSURE(!a.block || (a.block == h.table.block && a.table_tokens == h.table.tokens),
                   "attention on cuda: every head's table must have the same block size and rows");
      a.block = h.table.block, a.table_tokens = h.table.tokens;
    }
    return a;
  }
  static void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v, std::int64_t ld,
                                const AttentionRotations<float>& rot, std::span<const std::uint8_t> key_mask,
                                float* out, AttentionCache<float>& cache) {
    AttentionCall a = attention_call(s, q, k, v, ld, rot, key_mask);
    a.backward = cache.backward, a.keep_probs = cache.keep_probs;
    Ops::attention_forward(a, out, cache.device);
    cache.probs.clear();  // the map stays on the device: AttentionCache::device
  }
  static void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, std::int64_t ld,
                                 const AttentionRotations<float>& rot, std::span<const std::uint8_t> key_mask,
                                 const float* dout, AttentionCache<float>& cache, float* dq, float* dk, float* dv,
                                 std::vector<HeadRotationGrad<float>>* drot) {
    LIERE_ENSURE(cache.device, "attention_backward: no forward on cuda before it");
    check_attention_grads(drot != nullptr, drot ? drot->size() : 0, rot.heads.size());
    std::vector<float*> dtables, dtransforms;
    if (drot)
      for (const HeadRotationGrad<float>& g : *drot) {
        dtables.push_back(g.dtable.data);
        dtransforms.push_back(g.dtransform);
      }
    Ops::attention_backward(attention_call(s, q, k, v, ld, rot, key_mask), dout, cache.device, dq, dk, dv, dtables,
                            dtransforms);
  }
};

}  // namespace liere::cuda
