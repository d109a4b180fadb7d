// liere/pe/kind.hpp — what one kind of position encoding contributes, as a small strategy class; the
// composition (positions, tables, sharing, CLS) is PositionEncoding's (pe/encoding.hpp).
//
// Every rotary encoding is LieRE with particular generators: per parameter set, effective generators
// (sets, P, D/b, b(b−1)/2) in the layout of pe/liere.hpp, plus for some kinds a dense orthogonal transform P per
// set (STRING). A kind says
//   init                 which parameter groups it has and how they start (drawing from the encoding's Rng)
//   effective            the effective generators from the parameters
//   effective_backward   grads += d loss / d params given d loss / d effective generators
//   transforms           optional: P per set (sets, D, D) row-major, and its backward
// Adding an encoding: a class here in pe/kinds/, a row of the flag table (pe/config.hpp: PEKind, pe_kinds())
// and a line in make_kind (pe/kinds.hpp).
#pragma once

#include <liere/core/eigen.hpp>
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/core/rng.hpp>
#include <liere/lie/hat.hpp>
#include <liere/pe/config.hpp>
#include <span>
#include <string>
#include <vector>

namespace liere {

// The model the encoding serves.
struct PEGeometry {
  int layers = 12;
  int heads = 3;
  int head_dim = 64;
  int pos_dim = 2;              // position axes: 1 (sequences), 2 (images), 3 (videos)
  int embed_dim = 192;          // token width, for the absolute table
  std::vector<int> train_grid;  // patch grid at the training resolution, e.g. {8, 8}
  bool cls = true;              // token 0 is a CLS token
};

// What a kind's functions know of the encoding: its configuration, the model, the number of parameter sets
// and the effective block size b.
struct KindContext {
  const PEConfig& cfg;
  const PEGeometry& geo;
  int sets = 1;
  int block = 2;

  int num_blocks() const { return geo.head_dim / block; }        // D/b
  int params_per_block() const { return so_dim(block); }          // b(b−1)/2
  std::size_t num_effective() const { return std::size_t(sets) * geo.pos_dim * num_blocks() * params_per_block(); }
};

// The learnable values of an encoding: named groups (each becomes one engine parameter, e.g. "pe.generators")
// in one buffer, with a gradient buffer of the same layout.
template <class Scalar>
class ParamStore {
 public:
  struct Group {
    std::string name;
    std::vector<std::int64_t> shape;
    std::size_t offset = 0, size = 0;
  };

  // Appends a group of zeros; returns its index.
  std::size_t add(const std::string& name, std::vector<std::int64_t> shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= std::size_t(d);
    groups_.push_back({name, std::move(shape), values_.size(), n});
    values_.resize(values_.size() + n, Scalar(0));
    grads_.resize(values_.size(), Scalar(0));
    return groups_.size() - 1;
  }

  const std::vector<Group>& groups() const { return groups_; }
  std::span<Scalar> values() { return values_; }
  std::span<const Scalar> values() const { return values_; }
  std::span<Scalar> grads() { return grads_; }
  std::span<const Scalar> grads() const { return grads_; }
  std::span<Scalar> values(std::size_t g) { return values().subspan(groups_[g].offset, groups_[g].size); }
  std::span<const Scalar> values(std::size_t g) const { return values().subspan(groups_[g].offset, groups_[g].size); }
  std::span<Scalar> grads(std::size_t g) { return grads().subspan(groups_[g].offset, groups_[g].size); }
  std::size_t size() const { return values_.size(); }
  // The groups and values without a gradient buffer (grads() empty): what a backward reads of its forward's values.
  ParamStore values_only() const {
    ParamStore c;
    c.groups_ = groups_;
    c.values_ = values_;
    return c;
  }

 private:
  std::vector<Group> groups_;
  std::vector<Scalar> values_, grads_;
};

template <class Scalar>
class EncodingKind {
 public:
  virtual ~EncodingKind() = default;

  // Checks the configuration against the model; messages name the flags (--pe, --block).
  virtual void validate(const KindContext&) const {}
  // Adds the parameter groups and draws their starting values.
  virtual void init(ParamStore<Scalar>&, const KindContext&, Rng&) const {}
  // eff (sets, P, D/b, b(b−1)/2) = the effective generators (rotary kinds only).
  virtual void effective(const ParamStore<Scalar>&, const KindContext&, std::span<Scalar> eff) const {
    (void)eff;
  }
  // grads += d loss / d params given deff = d loss / d effective generators (learnable rotary kinds).
  virtual void effective_backward(const ParamStore<Scalar>&, const KindContext&, std::span<const Scalar> deff,
                                  std::span<Scalar> grads) const {
    (void)deff, (void)grads;
  }
  // Whether the effective generators are the parameters themselves (one group, in the same layout): the engine
  // then hands the parameter to the tables op as it is, on its device (nn/position_encoding.hpp).
  virtual bool generators_are_params() const { return false; }
  // Kinds with a dense transform P per set (applied before the rotation): out (sets, D, D) row-major.
  virtual bool has_transforms() const { return false; }
  virtual void transforms(const ParamStore<Scalar>&, const KindContext&, std::span<Scalar> out) const { (void)out; }
  // grads += d loss / d params given dtransforms = d loss / d P (sets, D, D).
  virtual void transforms_backward(const ParamStore<Scalar>&, const KindContext&, std::span<const Scalar> dtransforms,
                                   std::span<Scalar> grads) const {
    (void)dtransforms, (void)grads;
  }
  // P of one set in double (diagnostics); the identity for kinds without transforms.
  virtual Eigen::MatrixXd transform(const ParamStore<Scalar>&, const KindContext& ctx, int set) const {
    (void)set;
    return Eigen::MatrixXd::Identity(ctx.geo.head_dim, ctx.geo.head_dim);
  }
};

// Draws for the --init choice of generator entries: U[0, scale) (default 2π, the paper and the official code)
// or N(0, scale²).
template <class Scalar>
void fill_init(std::span<Scalar> v, const PEInit& init, Rng& rng) {
  if (init.kind == PEInit::Kind::normal)
    for (Scalar& x : v) x = Scalar(rng.normal(0.0, init.scale));
  else
    for (Scalar& x : v) x = Scalar(rng.uniform(0.0, init.kind == PEInit::Kind::uniform ? init.scale : 2 * std::numbers::pi));
}

}  // namespace liere
