// liere/backend/cuda/ops.hpp — the CUDA backend as the device seam sees it (backend/dispatch.hpp): CudaOps has a
// static function for every engine op, with the name and signature of the CPU kernel in backend/cpu/, in float.
// They forward to the plain functions of api.hpp, defined in the .cu files beside this header and compiled into
// liere::cuda (LIERE_WITH_CUDA); attention's views (pe/views.hpp) become plain pointer lists here, so that the
// .cu files need nothing of the pe layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/backend/attention_cache.hpp>
#include <liere/backend/cuda/api.hpp>
#include <liere/backend/cuda/flash_attention_ops.hpp>
#include <liere/backend/cuda/memory.hpp>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/types.hpp>
#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <liere/pe/views.hpp>
#include <span>
#include <vector>

namespace liere::backend {

struct CudaOps : FlashAttentionCudaOps<CudaOps> {  // flash_attention_forward/_backward: cuda/flash_attention_ops.hpp
  // ---- rotation tables (rotation_table.cu) ----
  static void rotation_table_forward(const float* w, const float* p, float* table, RotationTableShape shape) {
    cuda::rotation_table_forward(w, p, table, shape);
  }
  static void rotation_table_backward(const float* w, const float* p, const float* dtable, float* dw,
                                      RotationTableShape shape) {
    cuda::rotation_table_backward(w, p, dtable, dw, shape);
  }

  static void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
    cuda::copy_bytes(dst, dst_device, src, src_device, bytes);
  }
  static void fill(float* p, Index n, float v) { cuda::fill(p, n, v); }
  static void accumulate(const float* s, float* d, Index n) { cuda::accumulate(s, d, n); }

  static void add_forward(const float* a, const float* b, float* y, Index n) { cuda::add_forward(a, b, y, n); }
  static void add_backward(const float* dy, float* da, float* db, Index n, bool fa = false, bool fb = false) {
    cuda::add_backward(dy, da, db, n, fa, fb);
  }
  static void add_broadcast_forward(const float* x, const float* p, float* y, Index R, Index M) {
    cuda::add_broadcast_forward(x, p, y, R, M);
  }
  static void add_broadcast_backward(const float* dy, float* dx, float* dp, Index R, Index M) {
    cuda::add_broadcast_backward(dy, dx, dp, R, M);
  }
  static void mul_forward(const float* a, const float* b, float* y, Index n) { cuda::mul_forward(a, b, y, n); }
  static void mul_backward(const float* a, const float* b, const float* dy, float* da, float* db, Index n) {
    cuda::mul_backward(a, b, dy, da, db, n);
  }
  static void scale_forward(const float* x, float s, float* y, Index n) { cuda::scale_forward(x, s, y, n); }
  static void scale_backward(float s, const float* dy, float* dx, Index n) { cuda::scale_backward(s, dy, dx, n); }
  static void sum_forward(const float* x, float* y, Index n) { cuda::sum_forward(x, y, n); }
  static void sum_backward(const float* dy, float* dx, Index n) { cuda::sum_backward(dy, dx, n); }

  static void linear_forward(const float* x, const float* w, const float* b, float* y, Index N, Index C, Index OC) {
    cuda::linear_forward(x, w, b, y, N, C, OC);
  }
  static void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db, Index N,
                              Index C, Index OC, bool overwrite_dx = false) {
    cuda::linear_backward(x, w, dy, dx, dw, db, N, C, OC, overwrite_dx);
  }
  static void layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
                                Index N, Index C, double eps) {
    cuda::layernorm_forward(x, g, b, y, mean, rstd, N, C, eps);
  }
  static void layernorm_backward(const float* x, const float* g, const float* mean, const float* rstd, const float* dy,
                                 float* dx, float* dg, float* db, float* scratch, Index N, Index C) {
    cuda::layernorm_backward(x, g, mean, rstd, dy, dx, dg, db, scratch, N, C);
  }
  static void gelu_forward(const float* x, float* y, Index n) { cuda::gelu_forward(x, y, n); }
  static void gelu_backward(const float* x, const float* dy, float* dx, Index n, bool overwrite = false) {
    cuda::gelu_backward(x, dy, dx, n, overwrite);
  }
  static void dropout_forward(const float* x, double p, std::uint64_t key, float* y, std::uint8_t* mask, Index n) {
    cuda::dropout_forward(x, p, key, y, mask, n);
  }
  static void dropout_backward(const std::uint8_t* mask, double p, const float* dy, float* dx, Index n,
                               bool overwrite = false) {
    cuda::dropout_backward(mask, p, dy, dx, n, overwrite);
  }
  static void patch_embed_forward(const float* x, const float* w, const float* bias, float* scratch, float* y,
                                  const PatchGeometry& g, Index D) {
    g.check();
    cuda::patch_embed_forward(x, w, bias, scratch, y, g, D);
  }
  static void patch_embed_backward(const float* x, const float* w, const float* dy, float* scratch, float* dx, float* dw,
                                   float* db, const PatchGeometry& g, Index D) {
    cuda::patch_embed_backward(x, w, dy, scratch, dx, dw, db, g, D);
  }
  static void prepend_token_forward(const float* x, const float* tok, float* y, Index B, Index N, Index D) {
    cuda::prepend_token_forward(x, tok, y, B, N, D);
  }
  static void prepend_token_backward(const float* dy, float* dx, float* dtok, Index B, Index N, Index D) {
    cuda::prepend_token_backward(dy, dx, dtok, B, N, D);
  }
  static void select_token_forward(const float* x, float* y, Index B, Index T, Index D, Index t) {
    cuda::select_token_forward(x, y, B, T, D, t);
  }
  static void select_token_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t) {
    cuda::select_token_backward(dy, dx, B, T, D, t);
  }
  static void mean_tokens_forward(const float* x, float* y, Index B, Index T, Index D, Index t0) {
    cuda::mean_tokens_forward(x, y, B, T, D, t0);
  }
  static void mean_tokens_backward(const float* dy, float* dx, Index B, Index T, Index D, Index t0) {
    cuda::mean_tokens_backward(dy, dx, B, T, D, t0);
  }
  static void softmax_cross_entropy_forward(const float* logits, const int* labels, double smoothing, float* probs,
                                            float* row_loss, float* loss, Index B, Index K) {
    LIERE_ENSURE(K > 0, "cross_entropy: no classes");
    LIERE_ENSURE(smoothing >= 0 && smoothing < 1, "cross_entropy: label smoothing must be in [0, 1), got " << smoothing);
    cuda::softmax_cross_entropy_forward(logits, labels, smoothing, probs, row_loss, loss, B, K);
  }
  static void softmax_cross_entropy_backward(const float* probs, const int* labels, double smoothing, const float* dloss,
                                             float* dlogits, Index B, Index K) {
    cuda::softmax_cross_entropy_backward(probs, labels, smoothing, dloss, dlogits, B, K);
  }
  static void adam_update(float* theta, const float* g, float* m, float* v, Index n, const kernels::AdamStep<float>& a) {
    cuda::adam_update(theta, g, m, v, n, a);
  }
  static double sum_squares(const float* x, Index n) { return cuda::sum_squares(x, n); }
  static void scale(float* x, Index n, float c) { cuda::scale(x, n, c); }

  // ---- attention: the views become pointer lists ------------------------------------------------------------
  static cuda::AttentionCall attention_call(const AttentionShape& s, const float* q, const float* k, const float* v,
                                            std::int64_t ld, const AttentionRotations<float>& rot,
                                            std::span<const std::uint8_t> key_mask) {
    LIERE_ENSURE(s.batch > 0 && s.tokens > 0 && s.heads > 0 && s.head_dim > 0,
                 "attention: bad shape B=" << s.batch << " T=" << s.tokens << " H=" << s.heads << " D=" << s.head_dim);
    LIERE_ENSURE(ld >= std::int64_t(s.heads) * s.head_dim,
                 "attention: the token stride " << ld << " is smaller than H·D = " << s.heads * s.head_dim);
    LIERE_ENSURE(s.heads <= cuda::kMaxHeads, "attention on cuda: at most " << cuda::kMaxHeads << " heads, got " << s.heads);
    LIERE_ENSURE(rot.heads.empty() || rot.heads.size() == std::size_t(s.heads),
                 "attention: " << rot.heads.size() << " head rotations for " << s.heads << " heads");
    LIERE_ENSURE(key_mask.empty() || key_mask.size() == std::size_t(s.batch) * s.tokens,
                 "attention: the key mask has " << key_mask.size() << " entries, expected B x T = " << s.batch << " x "
                                                << s.tokens);
    cuda::AttentionCall a;
    a.s = s;
    a.q = q, a.k = k, a.v = v, a.ld = ld;
    a.first_rotated = rot.first_rotated;
    a.key_mask = key_mask.empty() ? nullptr : key_mask.data();
    const int tr = s.tokens - rot.first_rotated;
    LIERE_ENSURE(tr >= 0, "attention: first_rotated " << rot.first_rotated << " outside [0, " << s.tokens << "]");
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
    cuda::AttentionCall a = attention_call(s, q, k, v, ld, rot, key_mask);
    a.backward = cache.backward, a.keep_probs = cache.keep_probs;
    cuda::attention_forward(a, out, cache.device);
    cache.probs.clear();  // the map stays on the device: AttentionCache::device
  }
  static void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v, std::int64_t ld,
                                 const AttentionRotations<float>& rot, std::span<const std::uint8_t> key_mask,
                                 const float* dout, AttentionCache<float>& cache, float* dq, float* dk, float* dv,
                                 std::vector<HeadRotationGrad<float>>* drot) {
    LIERE_ENSURE(cache.device, "attention_backward: no forward on cuda before it");
    LIERE_ENSURE(!drot || drot->size() == rot.heads.size(),
                 "attention_backward: " << (drot ? drot->size() : 0) << " rotation gradients for " << rot.heads.size()
                                        << " head rotations");
    std::vector<float*> dtables, dtransforms;
    if (drot)
      for (const HeadRotationGrad<float>& g : *drot) {
        dtables.push_back(g.dtable.data);
        dtransforms.push_back(g.dtransform);
      }
    cuda::attention_backward(attention_call(s, q, k, v, ld, rot, key_mask), dout, cache.device, dq, dk, dv, dtables,
                             dtransforms);
  }
};

}  // namespace liere::backend
