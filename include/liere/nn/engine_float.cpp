// liere/nn/engine_float.cpp — the explicit float instances of the engine's modules (nn/*.hpp, declared `extern` there
// under LIERE_PRECOMPILED) in liere::compiled: the ViT, its blocks, attention, the MLP, LayerNorm, the patch
// embedding, dropout and the position-encoding module, compiled once instead of in every test and program.
// (One file per scalar type, so that a parallel build compiles the two at once.)
#include <liere/nn/engine.hpp>

namespace liere::nn {
template class VitBlockT<float>;
template class VitT<float>;
template class AttentionT<float>;
template VarT<float> attention(TapeT<float>&, const VarT<float>&, int, const PositionEncoding<float>*, const EncodingVars<float>&,
                             int, std::shared_ptr<AttentionCache<float>>, std::span<const std::uint8_t>, bool);
template class MlpT<float>;
template class LinearT<float>;
template class LayerNormT<float>;
template class PatchEmbedT<float>;
template class DropoutT<float>;
template class PositionEncodingModuleT<float>;
}  // namespace liere::nn
