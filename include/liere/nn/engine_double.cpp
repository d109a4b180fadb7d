// liere/nn/engine_double.cpp — the explicit double instances of the engine's modules (nn/*.hpp, declared `extern` there
// under LIERE_PRECOMPILED) in liere::compiled: the ViT, its blocks, attention, the MLP, LayerNorm, the patch
// embedding, dropout and the position-encoding module, compiled once instead of in every test and program.
// (One file per scalar type, so that a parallel build compiles the two at once.)
#include <liere/nn/engine.hpp>

namespace liere::nn {
template class VitBlockT<double>;
template class VitT<double>;
template class AttentionT<double>;
template VarT<double> attention(TapeT<double>&, const VarT<double>&, int, const PositionEncoding<double>*, const EncodingVars<double>&,
                             int, std::shared_ptr<AttentionCache<double>>, std::span<const std::uint8_t>, bool);
template class MlpT<double>;
template class LinearT<double>;
template class LayerNormT<double>;
template class PatchEmbedT<double>;
template class DropoutT<double>;
template class PositionEncodingModuleT<double>;
}  // namespace liere::nn
