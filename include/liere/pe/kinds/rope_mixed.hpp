// liere/pe/kinds/rope_mixed.hpp — RoPE-Mixed with rope-vit's init (Heo et al. 2024): b = 2, one learned frequency
// per pair and axis. Group "pe.freqs" (sets, P, D/2); pair j of axis a turns by f_a[j]·x_a as a complex
// multiplication, i.e. LieRE parameter −f_a[j] (exp(wJ) turns by −w).
//
// rope-vit's init (--init default): |f_k| = 10^(−4k/D) for k < D/4; the first D/4 pairs along a random unit
// direction u₁ per set, the next D/4 along u₂ ⟂ u₁ (in 2D: α and α + π/2, α ~ U[0, 2π)). Other --init values draw
// the frequencies as LieRE generators.
#pragma once

#include <liere/core/eigen.hpp>
#include <cmath>
#include <liere/pe/kinds/generators.hpp>
#include <numbers>

namespace liere {

template <class Scalar>
class RopeMixedKind : public GeneratorsKind<Scalar> {
 public:
  void validate(const KindContext& c) const override {
    LIERE_ENSURE(c.geo.head_dim % 4 == 0 || c.cfg.init.kind != PEInit::Kind::default_for_encoding,
                 "--pe " << c.cfg.info().name << " with rope-vit's init needs a head dim divisible by 4, got "
                         << c.geo.head_dim);
  }
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    const std::size_t g = ps.add("pe.freqs", {c.sets, c.geo.pos_dim, c.geo.head_dim / 2});
    if (c.cfg.init.kind == PEInit::Kind::default_for_encoding) rope_vit_init(ps.values(g), c, rng);
    else fill_init(ps.values(g), c.cfg.init, rng);
  }

 private:
  static void rope_vit_init(std::span<Scalar> w, const KindContext& c, Rng& rng) {
    const int d = c.geo.head_dim, p = c.geo.pos_dim, pairs = d / 2, quarter = d / 4;
    for (int s = 0; s < c.sets; ++s) {
      Eigen::VectorXd u1(p), u2(p);
      if (p == 1) {
        u1 << 1.0;
        u2 << 1.0;
      } else if (p == 2) {
        const double alpha = rng.uniform(0.0, 2 * std::numbers::pi);
        u1 << std::cos(alpha), std::sin(alpha);
        u2 << std::cos(alpha + std::numbers::pi / 2), std::sin(alpha + std::numbers::pi / 2);
      } else {  // a random orthonormal pair in 3D
        Eigen::Matrix<double, 6, 1> g;
        for (int i = 0; i < 6; ++i) g(i) = double(Scalar(rng.normal()));
        u1 << g(0), g(1), g(2);
        u1.normalize();
        u2 << g(3), g(4), g(5);
        u2 -= u1.dot(u2) * u1;
        u2.normalize();
      }
      for (int j = 0; j < pairs; ++j) {
        const int k = j % quarter;
        const double mag = std::pow(10.0, -4.0 * k / d);
        const Eigen::VectorXd& u = j < quarter ? u1 : u2;
        // rope-vit's (f_x, f_y) in our axis order (…, y, x): the last axis is x
        for (int a = 0; a < p; ++a) w[(std::size_t(s) * p + a) * pairs + j] = Scalar(-mag * u(p - 1 - a));
      }
    }
  }
};

}  // namespace liere
