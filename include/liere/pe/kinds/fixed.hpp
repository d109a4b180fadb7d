// liere/pe/kinds/fixed.hpp — rotary encodings with fixed frequencies (b = 2, nothing to learn).
//   visionllama  the official code's TiledPositionEncoder: n = D/P/2 phases per axis, ω_j = exp(−4j/(n−1)); block
//                a·n + j turns by x_a·ω_j; the remaining dims pass through
//   rope-1d      language-model RoPE (RoFormer), θ_j = 10000^(−2j/D): pairs (2j, 2j+1) turn as
//                [[cos, −sin], [sin, cos]], i.e. LieRE parameter −θ_j; 1D positions only
#pragma once

#include <algorithm>
#include <cmath>
#include <liere/pe/kind.hpp>

namespace liere {

template <class Scalar>
class VisionLlamaKind : public EncodingKind<Scalar> {
 public:
  void validate(const KindContext& c) const override {
    LIERE_ENSURE(c.geo.head_dim / c.geo.pos_dim / 2 >= 1, "--pe visionllama needs head dim >= "
                                                              << 2 * c.geo.pos_dim << " for " << c.geo.pos_dim
                                                              << " axes, got " << c.geo.head_dim);
  }
  void effective(const ParamStore<Scalar>&, const KindContext& c, std::span<Scalar> eff) const override {
    const int d = c.geo.head_dim, p = c.geo.pos_dim, pairs = d / 2, n = d / p / 2;
    std::fill(eff.begin(), eff.end(), Scalar(0));
    for (int a = 0; a < p; ++a)
      for (int j = 0; j < n; ++j) eff[std::size_t(a) * pairs + a * n + j] = Scalar(n > 1 ? std::exp(-4.0 * j / (n - 1)) : 1.0);
  }
};

template <class Scalar>
class Rope1dKind : public EncodingKind<Scalar> {
 public:
  void validate(const KindContext& c) const override {
    LIERE_ENSURE(c.geo.pos_dim == 1, "--pe rope-1d encodes 1D sequences, but the positions have "
                                         << c.geo.pos_dim << " axes; use rope-mixed or liere for images");
  }
  void effective(const ParamStore<Scalar>&, const KindContext& c, std::span<Scalar> eff) const override {
    const int d = c.geo.head_dim;
    std::fill(eff.begin(), eff.end(), Scalar(0));
    for (int j = 0; j < d / 2; ++j) eff[j] = Scalar(-std::pow(10000.0, -2.0 * j / d));
  }
};

}  // namespace liere
