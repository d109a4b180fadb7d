// liere/pe/kinds/generators.hpp — encodings whose parameters are the generators themselves: liere (any block
// size), rope-mixed-official (b = 2, the official LieRE code's "RoPE-Mixed") and liere-commute (b = 2, one set for
// the model). Group "pe.generators" (sets, P, D/b, b(b−1)/2), drawn by --init (default U[0, 2π)).
#pragma once

#include <algorithm>
#include <liere/pe/kind.hpp>

namespace liere {

template <class Scalar>
class GeneratorsKind : public EncodingKind<Scalar> {
 public:
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    const std::size_t g = ps.add("pe.generators", {c.sets, c.geo.pos_dim, c.num_blocks(), c.params_per_block()});
    fill_init(ps.values(g), c.cfg.init, rng);
  }
  bool generators_are_params() const override { return true; }
  void effective(const ParamStore<Scalar>& ps, const KindContext&, std::span<Scalar> eff) const override {
    std::copy_n(ps.values(0).begin(), eff.size(), eff.begin());
  }
  void effective_backward(const ParamStore<Scalar>&, const KindContext&, std::span<const Scalar> deff,
                          std::span<Scalar> grads) const override {
    for (std::size_t i = 0; i < deff.size(); ++i) grads[i] += deff[i];
  }
};

}  // namespace liere
