// liere/nn/attention.hpp — timm's Attention with a position encoding: qkv Linear → attention.hpp with the
// encoding's rotations for this layer → proj Linear. Parameters <name>.qkv.{weight,bias} (3C, C) and
// <name>.proj.{weight,bias} (C, C), as in timm, so the qkv output is the packed (B, T, 3, H, D) buffer that
// attention_forward reads in place (ld = 3C). With `flash` the layer runs the fused rotary flash attention
// (backend/cpu/flash_attention.hpp: the same results in O(T) memory, no attention map) instead.
#pragma once

#include <liere/backend/cpu/attention.hpp>
#include <liere/backend/cpu/flash_attention.hpp>
#include <liere/backend/dispatch.hpp>
#include <liere/autodiff/ops.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/module.hpp>
#include <liere/nn/position_encoding.hpp>
#include <limits>
#include <memory>
#include <type_traits>

namespace liere::nn {

// The attention op on the tape: qkv (B, T, 3C) → (B, T, C) with the rotations of `layer` from the encoding's
// tables of this forward (enc, from PositionEncodingModule::begin). `pe` may be null (no rotary encoding).
// `cache` keeps the probabilities (B, H, T, T) after the forward: the attention map, and what the backward reads
// (its closure holds the cache, which must not serve another forward until then; AttentionT sees to it). The
// backward accumulates the tables' (and transforms') gradients into enc's Vars, whose own op takes them to the
// parameters.
// flash: the fused flash attention (flash_attention_forward / _backward), which keeps no attention map.
template <class S>
VarT<S> attention(TapeT<S>& tape, const VarT<S>& qkv, int heads, const PositionEncoding<S>* pe,
                  const EncodingVars<S>& enc, int layer, std::shared_ptr<AttentionCache<S>> cache,
                  std::span<const std::uint8_t> key_mask = {}, bool flash = false) {
  const Shape& xs = qkv.shape();
  LIERE_ENSURE(xs.rank() == 3 && xs[2] % (3 * heads) == 0,
               "attention: qkv must be (B, T, 3·C) with C divisible by " << heads << " heads, got " << xs);
  const Index B = xs[0], T = xs[1], C = xs[2] / 3;
  LIERE_ENSURE(B <= std::numeric_limits<int>::max() && T <= std::numeric_limits<int>::max(),
               "attention: batch " << B << " or tokens " << T << " exceed the attention kernels' int range");
  const AttentionShape s{int(B), int(T), heads, int(C / heads)};
  const bool rotary = pe && pe->rotary();
  const Device dev = rotary ? ops::same_device("attention", qkv, enc.tables, enc.transforms) : qkv.device();
  AttentionRotations<S> rot;
  if (rotary) rot = pe->rotations(layer, enc.table_view(s.head_dim), enc.transforms.defined() ? enc.transforms.data() : nullptr);
  VarT<S> y = tape.output(Shape{B, T, C}, qkv);
  cache->backward = y.requires_grad();  // else (no-grad mode, constants) the CUDA backend keeps no state
  const S* q = qkv.data();
  if (flash)
    LIERE_DISPATCH(S, dev, flash_attention_forward, s, q, q + C, q + 2 * C, 3 * C, rot, key_mask, y.data(), *cache);
  else
    LIERE_DISPATCH(S, dev, attention_forward, s, q, q + C, q + 2 * C, 3 * C, rot, key_mask, y.data(), *cache);
  if (y.requires_grad()) {
    std::vector<std::uint8_t> mask(key_mask.begin(), key_mask.end());
    tape.push([qkv, gx = qkv.grad_ref(), gy = y.grad_ref(), s, rot, pe, enc, layer, cache, mask = std::move(mask), C, dev,
               flash] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dq = gx.acc();
      const S* q = qkv.data();
      const bool want_rot = pe && enc.tables.requires_grad();
      std::vector<HeadRotationGrad<S>> drot;
      if (want_rot) {
        // Each head's gradient views lie where its table and transform views of this forward (rot) lie in the
        // tables and transforms: the geometry of this forward, not the encoding's now (a forward on another grid
        // before this backward changes the encoding's rows per set).
        S* dt = enc.tables.grad_ref().acc();
        S* dx = enc.transforms.defined() ? enc.transforms.grad_ref().acc() : nullptr;
        for (const HeadRotation<S>& h : rot.heads) {
          HeadRotationGrad<S> g;
          if (h.table)
            g.dtable = {dt + (h.table.data - enc.tables.data()), h.table.tokens, h.table.head_dim, h.table.block};
          if (h.transform && dx) g.dtransform = dx + (h.transform - enc.transforms.data());
          drot.push_back(g);
        }
      }
      std::span<const std::uint8_t> m(mask);
      S* dk = dq ? dq + C : nullptr;
      S* dv = dq ? dq + 2 * C : nullptr;
      std::vector<HeadRotationGrad<S>>* dr = want_rot ? &drot : nullptr;
      if (flash)
        LIERE_DISPATCH(S, dev, flash_attention_backward, s, q, q + C, q + 2 * C, 3 * C, rot, m, dy, *cache, dq, dk, dv, dr);
      else
        LIERE_DISPATCH(S, dev, attention_backward, s, q, q + C, q + 2 * C, 3 * C, rot, m, dy, *cache, dq, dk, dv, dr);
    });
  }
  return y;
}

template <class S>
class AttentionT {
 public:
  AttentionT() = default;
  // flash: run the fused flash attention (same parameters and results, O(T) memory, no attention map).
  AttentionT(ParamsT<S>& params, const std::string& name, Index dim, int heads, int layer, Rng& rng, bool qkv_bias = true,
             bool flash = false)
      : qkv_(params, join(name, "qkv"), dim, 3 * dim, rng, qkv_bias),
        proj_(params, join(name, "proj"), dim, dim, rng),
        heads_(heads),
        layer_(layer),
        flash_(flash),
        cache_(std::make_shared<AttentionCache<S>>()) {
    LIERE_ENSURE(heads > 0 && dim % heads == 0, "Attention " << name << ": dim " << dim << " is not divisible by "
                                                             << heads << " heads");
  }

  // x (B, T, C) → (B, T, C). pe may be null (no rotary encoding); enc is its tables of this forward.
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x, const PositionEncoding<S>* pe, const EncodingVars<S>& enc,
                  std::span<const std::uint8_t> key_mask = {}) const {
    VarT<S> qkv = qkv_(tape, x);
    // The cache holds what a pending backward reads when a closure of an earlier forward still refers to it (a
    // forward without gradients, or a second forward, before the first one's backward): this forward takes a cache
    // of its own then, so that the earlier backward keeps its forward's state (the tape drops each closure after it
    // ran, so a training step's forward finds the layer's cache free and reuses it).
    if (cache_.use_count() > 1) {
      auto fresh = std::make_shared<AttentionCache<S>>();
      fresh->keep_probs = cache_->keep_probs;
      cache_ = std::move(fresh);
    }
    VarT<S> a = attention(tape, qkv, heads_, pe, enc, layer_, cache_, key_mask, flash_);
    return proj_(tape, a);
  }

  // The attention probabilities (B, H, T, T) of the last forward (copied from the device after a forward there), a
  // copy: the layer's cache may go with the next forward (forward). On cuda a forward without gradients (no-grad
  // mode) keeps its map only when keep_probs(true) was called before it; otherwise last_probs() is an error that
  // says so.
  AlignedVector<S> last_probs() const {
    LIERE_ENSURE(!flash_, "Attention::last_probs: this layer runs flash attention, which keeps no attention map "
                          "(build it without flash attention to read maps)");
#ifdef LIERE_WITH_CUDA
    if constexpr (std::is_same_v<S, float>)
      if (cache_->device && cache_->probs.empty()) {
        const std::vector<float> p = cuda::attention_probs(cache_->device);
        cache_->probs.assign(p.begin(), p.end());
      }
#endif
    return cache_->probs;
  }
  // Keep the attention map of forwards without gradients too (for last_probs() on cuda; the CPU always keeps it).
  // const like last_probs(): the cache is the layer's mutable state, not a parameter.
  void keep_probs(bool on) const { cache_->keep_probs = on; }
  int heads() const { return heads_; }
  bool flash() const { return flash_; }
  const LinearT<S>& qkv() const { return qkv_; }
  const LinearT<S>& proj() const { return proj_; }

 private:
  LinearT<S> qkv_, proj_;
  int heads_ = 1, layer_ = 0;
  bool flash_ = false;
  // Reused from forward to forward while no pending backward refers to it (forward); last_probs() reads the last
  // forward's. Mutable: the layer's state, not a parameter (forward is const).
  mutable std::shared_ptr<AttentionCache<S>> cache_;
};

using Attention = AttentionT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class AttentionT<float>;
extern template class AttentionT<double>;
extern template VarT<float> attention(TapeT<float>&, const VarT<float>&, int, const PositionEncoding<float>*,
                                      const EncodingVars<float>&, int, std::shared_ptr<AttentionCache<float>>,
                                      std::span<const std::uint8_t>, bool);
extern template VarT<double> attention(TapeT<double>&, const VarT<double>&, int, const PositionEncoding<double>*,
                                       const EncodingVars<double>&, int, std::shared_ptr<AttentionCache<double>>,
                                       std::span<const std::uint8_t>, bool);
#endif

}  // namespace liere::nn
