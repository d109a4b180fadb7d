// liere/pe/kinds/comrope.hpp — ComRoPE (Yu et al. 2025): commuting generators built from blocks.
//   comrope-ap  axis partition: group "pe.blocks" (sets, D/b, b(b−1)/2); block k belongs to axis k mod P and
//               is zero in the other axes' generators
//   comrope-ld  linearly dependent: groups "pe.skew" (sets, D/b, b(b−1)/2) and "pe.theta" (sets, P, D/b); block
//               k of axis a is θ_{a,k}·S_k (θ ~ N(0, 1) as ComRoPE's code)
#pragma once

#include <algorithm>
#include <liere/pe/kind.hpp>

namespace liere {

template <class Scalar>
class ComRopeApKind : public EncodingKind<Scalar> {
 public:
  void validate(const KindContext& c) const override {
    LIERE_ENSURE(c.num_blocks() >= c.geo.pos_dim,
                 "--pe comrope-ap needs at least one block per axis: head dim " << c.geo.head_dim << " / block "
                                                                                << c.block << " = " << c.num_blocks()
                                                                                << " blocks for " << c.geo.pos_dim
                                                                                << " axes");
  }
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    fill_init(ps.values(ps.add("pe.blocks", {c.sets, c.num_blocks(), c.params_per_block()})), c.cfg.init, rng);
  }
  // w[s][a][k] = blocks[s][k] when k mod P = a, else 0
  void effective(const ParamStore<Scalar>& ps, const KindContext& c, std::span<Scalar> eff) const override {
    const int p = c.geo.pos_dim, nb = c.num_blocks(), ppb = c.params_per_block();
    std::fill(eff.begin(), eff.end(), Scalar(0));
    for (int s = 0; s < c.sets; ++s)
      for (int k = 0; k < nb; ++k)
        std::copy_n(ps.values(0).data() + (std::size_t(s) * nb + k) * ppb, ppb,
                    eff.data() + ((std::size_t(s) * p + k % p) * nb + k) * ppb);
  }
  void effective_backward(const ParamStore<Scalar>&, const KindContext& c, std::span<const Scalar> deff,
                          std::span<Scalar> grads) const override {
    const int p = c.geo.pos_dim, nb = c.num_blocks(), ppb = c.params_per_block();
    for (int s = 0; s < c.sets; ++s)
      for (int k = 0; k < nb; ++k)
        for (int i = 0; i < ppb; ++i)
          grads[(std::size_t(s) * nb + k) * ppb + i] += deff[((std::size_t(s) * p + k % p) * nb + k) * ppb + i];
  }
};

template <class Scalar>
class ComRopeLdKind : public EncodingKind<Scalar> {
 public:
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    const std::size_t skew = ps.add("pe.skew", {c.sets, c.num_blocks(), c.params_per_block()});
    const std::size_t theta = ps.add("pe.theta", {c.sets, c.geo.pos_dim, c.num_blocks()});
    fill_init(ps.values(skew), c.cfg.init, rng);
    for (Scalar& t : ps.values(theta)) t = Scalar(rng.normal());  // ComRoPE: θ ~ N(0, 1)
  }
  // w[s][a][k][i] = θ[s][a][k]·skew[s][k][i]
  void effective(const ParamStore<Scalar>& ps, const KindContext& c, std::span<Scalar> eff) const override {
    const int p = c.geo.pos_dim, nb = c.num_blocks(), ppb = c.params_per_block();
    const Scalar* skew = ps.values(0).data();
    const Scalar* theta = ps.values(1).data();
    for (int s = 0; s < c.sets; ++s)
      for (int a = 0; a < p; ++a)
        for (int k = 0; k < nb; ++k)
          for (int i = 0; i < ppb; ++i)
            eff[((std::size_t(s) * p + a) * nb + k) * ppb + i] =
                theta[(std::size_t(s) * p + a) * nb + k] * skew[(std::size_t(s) * nb + k) * ppb + i];
  }
  void effective_backward(const ParamStore<Scalar>& ps, const KindContext& c, std::span<const Scalar> deff,
                          std::span<Scalar> grads) const override {
    const int p = c.geo.pos_dim, nb = c.num_blocks(), ppb = c.params_per_block();
    Scalar* dskew = grads.data() + ps.groups()[0].offset;
    Scalar* dtheta = grads.data() + ps.groups()[1].offset;
    const Scalar* skew = ps.values(0).data();
    const Scalar* theta = ps.values(1).data();
    for (int s = 0; s < c.sets; ++s)
      for (int a = 0; a < p; ++a)
        for (int k = 0; k < nb; ++k) {
          const Scalar* dw = deff.data() + ((std::size_t(s) * p + a) * nb + k) * ppb;
          const std::size_t ti = (std::size_t(s) * p + a) * nb + k, si = (std::size_t(s) * nb + k) * ppb;
          for (int i = 0; i < ppb; ++i) {
            dtheta[ti] += dw[i] * skew[si + i];
            dskew[si + i] += dw[i] * theta[ti];
          }
        }
  }
};

}  // namespace liere
