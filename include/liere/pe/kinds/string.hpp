// liere/pe/kinds/string.hpp — Cayley-STRING (Schenck et al. 2025): R(p) = Pᵀ·RoPE-Mixed(p)·P with a learned
// orthogonal P = (I − S)(I + S)⁻¹, S skew-symmetric. Groups "pe.freqs" (as RoPE-Mixed, rope-vit's init) and
// "pe.cayley" (sets, D(D−1)/2), S's upper triangle, starting at 0 (P = I).
//
// Backward of P = (I − S)·M, M = (I + S)⁻¹, for G = dL/dP: dS = −(I + P)ᵀ·G·Mᵀ, then hat's adjoint.
#pragma once

#include <liere/core/eigen.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Dense>
LIERE_THIRD_PARTY_END
#include <liere/pe/kinds/rope_mixed.hpp>

namespace liere {

template <class Scalar>
class StringKind : public RopeMixedKind<Scalar> {
 public:
  void init(ParamStore<Scalar>& ps, const KindContext& c, Rng& rng) const override {
    RopeMixedKind<Scalar>::init(ps, c, rng);
    ps.add("pe.cayley", {c.sets, so_dim(c.geo.head_dim)});  // S = 0: P = I
  }
  bool has_transforms() const override { return true; }
  Eigen::MatrixXd transform(const ParamStore<Scalar>& ps, const KindContext& c, int set) const override {
    const Eigen::MatrixXd sm = skew(ps, c, set), id = Eigen::MatrixXd::Identity(sm.rows(), sm.cols());
    return (id - sm) * (id + sm).inverse();
  }
  void transforms(const ParamStore<Scalar>& ps, const KindContext& c, std::span<Scalar> out) const override {
    const int d = c.geo.head_dim;
    for (int s = 0; s < c.sets; ++s)
      Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(out.data() + std::size_t(s) * d * d,
                                                                                         d, d) =
          transform(ps, c, s).template cast<Scalar>();
  }
  void transforms_backward(const ParamStore<Scalar>& ps, const KindContext& c, std::span<const Scalar> dtransforms,
                           std::span<Scalar> grads) const override {
    const int d = c.geo.head_dim;
    const std::size_t offset = ps.groups()[1].offset;
    for (int s = 0; s < c.sets; ++s) {
      const Eigen::MatrixXd sm = skew(ps, c, s), id = Eigen::MatrixXd::Identity(d, d), minv = (id + sm).inverse(),
                            pm = (id - sm) * minv;
      const Eigen::MatrixXd g = Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                                    dtransforms.data() + std::size_t(s) * d * d, d, d)
                                    .template cast<double>();
      const Eigen::MatrixXd ds = -(id + pm).transpose() * g * minv.transpose();
      hat_backward(ds, d, grads.data() + offset + std::size_t(s) * so_dim(d));
    }
  }

 private:
  // S of one set, in double.
  static Eigen::MatrixXd skew(const ParamStore<Scalar>& ps, const KindContext& c, int set) {
    const int d = c.geo.head_dim;
    Eigen::MatrixXd sm = Eigen::MatrixXd::Zero(d, d);
    hat_fill(ps.values(1).data() + std::size_t(set) * so_dim(d), d, sm);
    return sm;
  }
};

}  // namespace liere
