// liere/nn/patch_embed.hpp — timm's PatchEmbed: images (B, C, H, W) → tokens (B, N, D) with p×p patches, or
// videos (B, C, T, H, W) → tokens (B, N, D) with t×p×p tubelets (N in (t, h, w) row-major order).
//
// Parameters <name>.proj.weight (D, C, p, p) or (D, C, t, p, p) — PyTorch's Conv2d/Conv3d layout, so a timm
// checkpoint maps 1:1 — initialised truncated normal (std 0.02) like the Linear layers, and <name>.proj.bias
// (D) = 0.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>

namespace liere::nn {

template <class S>
class PatchEmbedT {
 public:
  PatchEmbedT() = default;
  // 2D when tubelet == 0 (weight (D, C, p, p)); 3D with tubelets of `tubelet` frames otherwise
  // (weight (D, C, tubelet, p, p); tubelet = 1 is a 3D model over single frames).
  PatchEmbedT(ParamsT<S>& params, const std::string& name, Index in_chans, Index embed_dim, Index patch, Rng& rng,
              Index tubelet = 0, bool bias = true)
      : in_chans_(in_chans), embed_dim_(embed_dim), patch_(patch), tubelet_(tubelet) {
    LIERE_ENSURE(in_chans > 0 && embed_dim > 0 && patch > 0 && tubelet >= 0,
                 "PatchEmbed " << name << ": bad sizes in_chans=" << in_chans << " embed_dim=" << embed_dim
                               << " patch=" << patch << " tubelet=" << tubelet);
    const Shape ws = tubelet == 0 ? Shape{embed_dim, in_chans, patch, patch}
                                  : Shape{embed_dim, in_chans, tubelet, patch, patch};
    weight_ = params.add(join(name, "proj.weight"), ws);
    init::trunc_normal(weight_, rng);
    if (bias) bias_ = params.add(join(name, "proj.bias"), Shape{embed_dim});
  }

  // (B, C, H, W) or (B, C, T, H, W) → (B, N, D)
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) const { return ops::patch_embed(tape, x, weight_, bias_); }
  VarT<S> operator()(TapeT<S>& tape, const VarT<S>& x) const { return forward(tape, x); }

  // The patch geometry of an input of the given spatial (and temporal) size, batch 0: its patch grid nt() × nh() ×
  // nw() (nt() = 1 in 2D) and tokens(), as the op computes them (PatchGeometry, backend/types.hpp).
  PatchGeometry geometry(Index H, Index W, Index T = 1) const {
    return {.B = 0, .C = in_chans_, .T = is_3d() ? T : 1, .H = H, .W = W, .tt = is_3d() ? tubelet_ : 1, .p = patch_};
  }
  // Tokens for an input of the given spatial (and temporal) size.
  Index num_tokens(Index H, Index W, Index T = 1) const { return geometry(H, W, T).tokens(); }

  const ParameterT<S>& weight() const { return weight_; }
  const ParameterT<S>& bias() const { return bias_; }
  Index in_chans() const { return in_chans_; }
  Index embed_dim() const { return embed_dim_; }
  Index patch() const { return patch_; }
  Index tubelet() const { return tubelet_; }
  bool is_3d() const { return tubelet_ > 0; }

 private:
  ParameterT<S> weight_, bias_;
  Index in_chans_ = 0, embed_dim_ = 0, patch_ = 0, tubelet_ = 0;
};

using PatchEmbed = PatchEmbedT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class PatchEmbedT<float>;
extern template class PatchEmbedT<double>;
#endif

}  // namespace liere::nn
