// liere/pe/kinds.hpp — the strategy class of every encoding kind (pe/kind.hpp), chosen once from the flag table.
#pragma once

#include <memory>
#include <liere/pe/kind.hpp>
#include <liere/pe/kinds/absolute.hpp>
#include <liere/pe/kinds/comrope.hpp>
#include <liere/pe/kinds/fixed.hpp>
#include <liere/pe/kinds/generators.hpp>
#include <liere/pe/kinds/rope_mixed.hpp>
#include <liere/pe/kinds/string.hpp>

namespace liere {

template <class Scalar>
std::unique_ptr<EncodingKind<Scalar>> make_kind(PEKind kind) {
  switch (kind) {
    case PEKind::none: return std::make_unique<EncodingKind<Scalar>>();
    case PEKind::absolute: return std::make_unique<AbsoluteKind<Scalar>>();
    case PEKind::visionllama: return std::make_unique<VisionLlamaKind<Scalar>>();
    case PEKind::rope_1d: return std::make_unique<Rope1dKind<Scalar>>();
    case PEKind::rope_mixed: return std::make_unique<RopeMixedKind<Scalar>>();
    case PEKind::string_cayley: return std::make_unique<StringKind<Scalar>>();
    case PEKind::comrope_ap: return std::make_unique<ComRopeApKind<Scalar>>();
    case PEKind::comrope_ld: return std::make_unique<ComRopeLdKind<Scalar>>();
    case PEKind::liere:
    case PEKind::rope_mixed_official:
    case PEKind::liere_commute: return std::make_unique<GeneratorsKind<Scalar>>();
  }
  LIERE_ENSURE(false, "make_kind: unknown encoding kind " << int(kind));
  return nullptr;
}

}  // namespace liere
