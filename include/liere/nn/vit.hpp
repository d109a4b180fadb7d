// liere/nn/vit.hpp — the pre-norm Vision Transformer (timm's VisionTransformer) with any position encoding.
//
//   tokens = PatchEmbed(x)                              (B, N, C), 2D patches or 3D tubelets
//   [CLS] + tokens (+ absolute table)                   (B, T, C), T = N + 1 with a CLS token
//   for each block: x += Attn(LN1(x)); x += MLP(LN2(x))  rotary encodings act inside Attn on q and k
//   LN(x) → CLS token (pool cls) or mean of the patch tokens (pool mean, no CLS token) → head Linear
//
// Parameter names are timm's state_dict keys (patch_embed.proj.weight, cls_token, blocks.3.attn.qkv.weight,
// blocks.3.mlp.fc1.weight, norm.weight, head.weight, …) plus the encoding's (pe.generators, pe.absolute, …).
// Initialisation as timm: Linear and patch weights truncated normal (std 0.02), biases 0, LayerNorm 1/0,
// cls_token N(0, 1e-6²); LayerNorm eps 1e-6.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/attention.hpp>
#include <liere/nn/layernorm.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/mlp.hpp>
#include <liere/nn/module.hpp>
#include <liere/nn/patch_embed.hpp>
#include <liere/nn/position_encoding.hpp>
#include <liere/pe/config.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace liere::nn {

enum class Pool { cls, mean };

struct VitConfig {
  std::vector<int> image = {32, 32};  // (H, W) or (frames, H, W)
  int channels = 3;
  int patch = 4;
  int tubelet = 0;  // frames per tubelet for videos (3D); 0 for images
  int dim = 192, depth = 12, heads = 3, mlp_hidden = 768;
  int classes = 10;
  Pool pool = Pool::cls;
  double drop = 0.0;
  double ln_eps = 1e-6;
  PEConfig pe;
  // Attention through the fused rotary flash attention (nn::AttentionT's flash): the same model and results in
  // O(T) memory instead of the (B, H, T, T) probabilities, without attention maps. Not part of the model's
  // identity (describe()): checkpoints are interchangeable.
  bool flash_attention = false;

  // tiny (192/12/3/768), small (384/12/6/1536), base (768/12/12/3072); "custom" keeps the sizes as they are.
  void set_size(const std::string& name) {
    if (name == "tiny") dim = 192, depth = 12, heads = 3, mlp_hidden = 768;
    else if (name == "small") dim = 384, depth = 12, heads = 6, mlp_hidden = 1536;
    else if (name == "base") dim = 768, depth = 12, heads = 12, mlp_hidden = 3072;
    else
      LIERE_ENSURE(name == "custom", "--model: unknown size '" << name << "', allowed: tiny, small, base, custom");
  }
  int head_dim() const { return dim / heads; }
  bool video() const { return tubelet > 0; }
  // The patch grid of an input of the given size: (h, w) or (t, h, w), from the op's PatchGeometry.
  std::vector<int> grid_for(const std::vector<int>& size) const {
    LIERE_ENSURE(size.size() == image.size(), "ViT: input has " << size.size() << " spatial axes, the model "
                                                                << image.size());
    for (std::size_t a = 0; a < size.size(); ++a) {
      const int p = video() && a == 0 ? tubelet : patch;
      LIERE_ENSURE(size[a] % p == 0 && size[a] >= p,
                   "ViT: input axis " << a << " of size " << size[a] << " is not a multiple of the patch size " << p);
    }
    const PatchGeometry g{.B = 0, .C = channels, .T = video() ? size[0] : 1, .H = size[size.size() - 2],
                          .W = size.back(), .tt = video() ? tubelet : 1, .p = patch};
    if (video()) return {int(g.nt()), int(g.nh()), int(g.nw())};
    return {int(g.nh()), int(g.nw())};
  }
  std::vector<int> grid() const { return grid_for(image); }
  int patches() const {
    int n = 1;
    for (int g : grid()) n *= g;
    return n;
  }
  int tokens() const { return patches() + (pool == Pool::cls ? 1 : 0); }
  void validate() const {
    LIERE_ENSURE(dim > 0 && depth > 0 && heads > 0 && dim % heads == 0,
                 "ViT: dim " << dim << " must be divisible by heads " << heads);
    LIERE_ENSURE(image.size() == (video() ? 3u : 2u),
                 "ViT: " << (video() ? "videos need (frames, H, W)" : "images need (H, W)") << ", got " << image.size()
                         << " sizes");
    LIERE_ENSURE(classes > 0 && channels > 0 && patch > 0 && mlp_hidden > 0, "ViT: sizes must be positive");
    (void)grid();
  }
  // Forward FLOPs per image, 2 per multiply-add (docs/flops.md). The backbone: matrix products and attention
  // (elementwise ops not counted).
  double backbone_gflops_per_image() const {
    const double T = tokens(), N = patches(), C = dim, H = heads, Dh = head_dim();
    const double patch_vol = double(channels) * patch * patch * (video() ? tubelet : 1);
    double f = 2 * N * patch_vol * C;
    f += depth * (2 * T * C * 3 * C + 2 * 2 * H * T * T * Dh + 2 * T * C * C + 2 * 2 * T * C * mlp_hidden);
    f += 2 * C * classes;
    return f * 1e-9;
  }
  // The position encoding's share per image: a rotary encoding rotates q and k of every rotated token in every
  // layer and head with its block-diagonal table, 2·D·b per vector (the CLS token too under --cls identity,
  // where its rotation is the identity but is applied, as in the official code; not under --cls skip); STRING
  // first applies its dense transform to every token, 2·D² per vector. The absolute encoding adds its table,
  // T·C. The rotation tables themselves do not depend on the image: they are computed once per forward (or
  // never, when cached or baked) and counted apart (PositionEncoding::table_flops, docs/flops.md).
  double pe_gflops_per_image() const {
    const PEKindInfo& info = pe.info();
    const double T = tokens(), C = dim, D = head_dim();
    if (pe.kind == PEKind::absolute) return T * C * 1e-9;
    if (!info.rotary) return 0.0;
    const double rotated = patches() + (pool == Pool::cls && pe.cls != ClsPolicy::skip ? 1 : 0);
    const double b = pe.effective_block();
    double f = depth * heads * rotated * 2 * (2 * D * b);
    if (pe.kind == PEKind::string_cayley) f += depth * heads * T * 2 * (2 * D * D);
    return f * 1e-9;
  }
  double gflops_per_image() const { return backbone_gflops_per_image() + pe_gflops_per_image(); }
  std::string describe() const {
    std::ostringstream o;
    o << "vit dim=" << dim << " depth=" << depth << " heads=" << heads << " mlp=" << mlp_hidden << " patch=" << patch;
    if (video()) o << " tubelet=" << tubelet;
    o << " image=";
    for (std::size_t i = 0; i < image.size(); ++i) o << (i ? "x" : "") << image[i];
    o << " channels=" << channels << " classes=" << classes << " pool=" << (pool == Pool::cls ? "cls" : "mean");
    return o.str();
  }
};

template <class S>
class VitBlockT {
 public:
  VitBlockT(ParamsT<S>& params, const std::string& name, const VitConfig& c, int layer, Rng& rng)
      : norm1_(params, join(name, "norm1"), c.dim, c.ln_eps),
        attn_(params, join(name, "attn"), c.dim, c.heads, layer, rng, true, c.flash_attention),
        norm2_(params, join(name, "norm2"), c.dim, c.ln_eps),
        mlp_(params, join(name, "mlp"), c.dim, c.mlp_hidden, c.dim, rng, c.drop) {}

  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x, const PositionEncoding<S>* pe, const EncodingVars<S>& enc) const {
    VarT<S> h = ops::add(tape, x, attn_.forward(tape, norm1_(tape, x), pe, enc));
    return ops::add(tape, h, mlp_(tape, norm2_(tape, h)));
  }
  const AttentionT<S>& attn() const { return attn_; }

 private:
  LayerNormT<S> norm1_;
  AttentionT<S> attn_;
  LayerNormT<S> norm2_;
  MlpT<S> mlp_;
};

template <class S>
class VitT {
 public:
  // Registers every parameter in `params` and initialises them from `seed` (the encoding from seed + 1).
  VitT(ParamsT<S>& params, const VitConfig& cfg, std::uint64_t seed) : cfg_(cfg) {
    cfg_.validate();
    Rng rng(seed);
    patch_ = PatchEmbedT<S>(params, "patch_embed", cfg_.channels, cfg_.dim, cfg_.patch, rng, cfg_.tubelet);
    if (cfg_.pool == Pool::cls) {
      cls_ = params.add("cls_token", Shape{1, 1, cfg_.dim});
      init::normal(cls_, rng, 1e-6);
    }
    PEGeometry geo;
    geo.layers = cfg_.depth;
    geo.heads = cfg_.heads;
    geo.head_dim = cfg_.head_dim();
    geo.pos_dim = int(cfg_.image.size());
    geo.embed_dim = cfg_.dim;
    geo.train_grid = cfg_.grid();
    geo.cls = cfg_.pool == Pool::cls;
    pe_ = std::make_unique<PositionEncodingModuleT<S>>(params, cfg_.pe, geo, seed + 1);
    for (int l = 0; l < cfg_.depth; ++l) blocks_.emplace_back(params, "blocks." + std::to_string(l), cfg_, l, rng);
    norm_ = LayerNormT<S>(params, "norm", cfg_.dim, cfg_.ln_eps);
    head_ = LinearT<S>(params, "head", cfg_.dim, cfg_.classes, rng);
  }
  VitT(const VitT&) = delete;
  VitT& operator=(const VitT&) = delete;

  // x (B, C, H, W) or (B, C, frames, H, W) → logits (B, classes). Any input size that the patch divides:
  // the encoding follows its resolution policy on the new grid.
  VarT<S> forward(TapeT<S>& tape, const VarT<S>& x) {
    const Shape& xs = x.shape();
    LIERE_ENSURE(xs.rank() == int(cfg_.image.size()) + 2 && xs[1] == cfg_.channels,
                 "ViT: input " << xs << ", expected (B, " << cfg_.channels << (cfg_.video() ? ", frames" : "")
                               << ", H, W)");
    std::vector<int> size;
    for (int a = 2; a < xs.rank(); ++a) size.push_back(int(xs[a]));
    // the tables op first on the tape: its backward runs after every attention layer's
    const EncodingVars<S> enc = pe_->begin(tape, cfg_.grid_for(size), x.device());
    VarT<S> h = patch_(tape, x);
    if (cls_.defined()) h = ops::prepend_token(tape, h, cls_);
    h = pe_->add_to_tokens(tape, h);
    const PositionEncoding<S>* pe = pe_->layout().rotary() ? &pe_->layout() : nullptr;
    for (const auto& b : blocks_) h = b.forward(tape, h, pe, enc);
    h = norm_(tape, h);
    h = cfg_.pool == Pool::cls ? ops::select_token(tape, h, 0) : ops::mean_tokens(tape, h, 0);
    return head_(tape, h);
  }

  const VitConfig& config() const { return cfg_; }
  PositionEncodingModuleT<S>& pe() { return *pe_; }
  const PositionEncodingModuleT<S>& pe() const { return *pe_; }
  const std::vector<VitBlockT<S>>& blocks() const { return blocks_; }

 private:
  VitConfig cfg_;
  PatchEmbedT<S> patch_;
  ParameterT<S> cls_;
  std::unique_ptr<PositionEncodingModuleT<S>> pe_;
  std::vector<VitBlockT<S>> blocks_;
  LayerNormT<S> norm_;
  LinearT<S> head_;
};

using Vit = VitT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class VitBlockT<float>;
extern template class VitBlockT<double>;
extern template class VitT<float>;
extern template class VitT<double>;
#endif

}  // namespace liere::nn
