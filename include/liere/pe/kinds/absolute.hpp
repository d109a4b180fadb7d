// liere/pe/kinds/absolute.hpp — the learned absolute table added to the tokens (ViT), group "pe.absolute"
// (training patches + a CLS row when the model has a CLS token and --cls is not skip, embed dim). Drawn
// N(0, 0.02²) as timm's pos_embed (--init official: N(0, 1) as the official LieRE code; uniform:S / normal:S as
// asked). PositionEncoding::add_to_tokens interpolates it to other grids (pe/interpolation.hpp).
#pragma once

#include <liere/pe/kind.hpp>

namespace liere {

template <class Scalar>
class AbsoluteKind : public EncodingKind<Scalar> {
 public:
  void validate(const KindContext& c) const override {
    LIERE_ENSURE(!c.geo.train_grid.empty(), "the absolute encoding needs the training grid (PEGeometry::train_grid)");
  }
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    std::int64_t rows = 1;
    for (int g : c.geo.train_grid) rows *= g;
    rows += c.geo.cls && c.cfg.cls != ClsPolicy::skip ? 1 : 0;
    const std::size_t g = ps.add("pe.absolute", {rows, c.geo.embed_dim});
    const PEInit& init = c.cfg.init;
    if (init.kind == PEInit::Kind::uniform) {
      for (Scalar& x : ps.values(g)) x = Scalar(rng.uniform(0.0, init.scale));
    } else {
      const double std = init.kind == PEInit::Kind::default_for_encoding ? 0.02 : init.scale;
      for (Scalar& x : ps.values(g)) x = Scalar(rng.normal(0.0, std));
    }
  }
};

}  // namespace liere
