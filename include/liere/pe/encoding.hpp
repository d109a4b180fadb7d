// liere/pe/encoding.hpp — every position encoding behind one interface, for a model of L layers × H heads.
//
// All rotary encodings here are one computation with different parameters: per parameter set, effective
// LieRE generators (Dim axes × D/b blocks of b×b skew-symmetric matrices, layout of pe/liere.hpp) and, for
// STRING, a dense orthogonal transform P. What differs between kinds is a small strategy class each
// (pe/kind.hpp, pe/kinds/): which parameters, how they start, the effective generators and their backward.
// PositionEncoding composes one with what every kind shares:
//   sharing     parameter sets per layer × head, per head, per layer, or one for the model (--sharing)
//   positions   the grid of this forward under the resolution policy, or any coordinates; the CLS policy
//   tables      the rotation tables of every set (liere_table_forward) and their backward to the parameters
// The absolute encoding is a learned table added to the tokens, interpolated on other grids.
//
// Two ways to use it:
//   * the engine (nn/position_encoding.hpp) keeps the tables in tensors on the tape: compute_tables() into
//     them, rotations(layer, tables, transforms) for each attention layer, tables_backward() from their
//     gradients — no state between the passes but the parameters and positions;
//   * plain buffers (your own engine), with tables kept here:
//       pe.set_grid({8, 8})                       the patch grid of this batch (or set_positions for any coordinates)
//       pe.prepare()                              tables for every set, once per forward (after the optimizer step)
//       attention_forward(…, pe.rotations(l), …)  for each layer l
//       attention_backward(…, &grads, …)          with grads = pe.rotation_grads(l)
//       pe.backward()                             grads() += d loss / d params
// Gradients of the parameters accumulate until zero_grad(), like every other parameter.
#pragma once

#include <liere/core/eigen.hpp>
LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Dense>
LIERE_THIRD_PARTY_END
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/core/rng.hpp>
#include <liere/lie/exp.hpp>
#include <liere/pe/config.hpp>
#include <liere/pe/interpolation.hpp>
#include <liere/pe/kind.hpp>
#include <liere/pe/kinds.hpp>
#include <liere/pe/liere.hpp>
#include <liere/pe/positions.hpp>
#include <liere/pe/rotation_table.hpp>
#include <liere/pe/views.hpp>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace liere {

template <class Scalar>
class PositionEncoding {
 public:
  using Group = typename ParamStore<Scalar>::Group;

  PositionEncoding(const PEConfig& cfg, const PEGeometry& geo, std::uint64_t seed);

  // ---- what it is ----------------------------------------------------------------------------------
  const PEConfig& config() const { return cfg_; }
  const PEGeometry& geometry() const { return geo_; }
  bool rotary() const { return cfg_.info().rotary; }
  bool learnable() const { return cfg_.info().learnable && !params_.groups().empty(); }
  bool additive() const { return cfg_.kind == PEKind::absolute; }
  bool has_transforms() const { return kind_->has_transforms(); }
  int num_sets() const { return sets_; }
  int block() const { return cfg_.effective_block(); }
  int set_of(int layer, int head) const {
    LIERE_ENSURE(layer >= 0 && layer < geo_.layers && head >= 0 && head < geo_.heads,
                 "PositionEncoding: layer " << layer << " / head " << head << " out of range (" << geo_.layers
                                            << " layers, " << geo_.heads << " heads)");
    switch (cfg_.effective_sharing()) {
      case Sharing::layer_head: return layer * geo_.heads + head;
      case Sharing::head: return head;
      case Sharing::layer: return layer;
      case Sharing::shared: return 0;
    }
    return 0;
  }

  // ---- parameters ------------------------------------------------------------------------------------
  std::span<Scalar> params() { return params_.values(); }
  std::span<const Scalar> params() const { return params_.values(); }
  std::span<Scalar> grads() { return params_.grads(); }
  std::span<const Scalar> grads() const { return params_.grads(); }
  std::size_t num_params() const { return params_.size(); }
  const std::vector<Group>& groups() const { return params_.groups(); }
  std::span<Scalar> group_values(std::size_t i) { return params_.values(i); }
  std::span<Scalar> group_grads(std::size_t i) { return params_.grads(i); }
  void zero_grad() { std::fill(grads().begin(), grads().end(), Scalar(0)); }

  // ---- tokens ----------------------------------------------------------------------------------------
  // The patch grid of this forward; the positions follow the resolution policy and the CLS policy.
  void set_grid(const std::vector<int>& grid);
  // Any coordinates: patch_positions (N, P) shared by the batch (batch = 1) or (B, N, P) per sequence.
  void set_positions(std::span<const double> patch_positions, int batch = 1);
  // Tokens per sequence, the CLS token included.
  int tokens() const { return patches_ + (geo_.cls ? 1 : 0); }
  int patches() const { return patches_; }
  // Positions of the rotated tokens, (rows, P): per set the table has these rows.
  const std::vector<Scalar>& rotated_positions() const { return positions_; }
  // Rows of the tables of all sets: sets × rows per set.
  int table_rows() const { return sets_ * rows_per_set_; }
  // Counts the changes of the positions: tables of fixed kinds need recomputing only when it moves.
  std::uint64_t positions_version() const { return positions_version_; }

  // ---- what the backend's table op takes (backend/cpu/rotation_table.hpp, backend/cuda/rotation_table.cu) ----
  // The effective generators of every set, (sets, P, D/b, b(b−1)/2), refreshed from the parameters now; the op
  // computes the tables from them and rotated_positions() (rows_per_set() rows of P values).
  std::span<const Scalar> table_generators() {
    LIERE_ENSURE(rotary(), "PositionEncoding::table_generators: " << cfg_.info().name << " is not a rotary encoding");
    if (cfg_.info().learnable) kind_->effective(params_, context(), effective_);
    return effective_;
  }
  int rows_per_set() const { return rows_per_set_; }
  // Whether table_generators() is params() itself (pe/kinds/generators.hpp and the kind deriving from it: liere,
  // rope-mixed, rope-mixed-official, liere-commute): the engine then passes the parameter to the op where it lives
  // (nn/position_encoding.hpp).
  bool generators_are_params() const {
    return rotary() && learnable() && !has_transforms() && kind_->generators_are_params() &&
           params_.groups().size() == 1 && params_.size() == context().num_effective();
  }
  // grads() += d loss / d params given d loss / d (effective generators) (the op's backward) and the transforms'
  // gradients (sets, D, D; empty when the kind has none).
  void generators_backward(std::span<const Scalar> dgenerators, std::span<const Scalar> dtransforms) {
    generators_backward(params_, dgenerators, dtransforms);
  }
  // The same through the parameter values `at` (a copy of param_store() taken at the forward: the engine's backward
  // keeps its forward's values, whatever is written to the parameters before it runs).
  void generators_backward(const ParamStore<Scalar>& at, std::span<const Scalar> dgenerators,
                           std::span<const Scalar> dtransforms) {
    if (!rotary() || !cfg_.info().learnable) return;
    LIERE_ENSURE(dgenerators.size() == effective_.size(), "PositionEncoding::generators_backward: "
                                                              << dgenerators.size() << " values, expected "
                                                              << effective_.size());
    LIERE_ENSURE(at.size() == params_.size(), "PositionEncoding::generators_backward: parameter values of "
                                                  << at.size() << ", expected " << params_.size());
    kind_->effective_backward(at, context(), dgenerators, grads());
    if (has_transforms() && !dtransforms.empty()) kind_->transforms_backward(at, context(), dtransforms, grads());
  }
  const ParamStore<Scalar>& param_store() const { return params_; }

  // ---- forward and backward, storage given -----------------------------------------------------------
  // The rotation tables of every set for the current positions into `tables` (host memory, table_rows() rows,
  // head_dim, block), from the current parameters.
  void compute_tables(RotationTableView<Scalar> tables);
  // The dense transforms (sets, D, D) of kinds that have them (STRING) into `out`.
  void compute_transforms(std::span<Scalar> out) const;
  // grads() += d loss / d params given the gradients of the tables (table_rows() rows) and of the transforms
  // (sets, D, D; empty when the kind has none). Call after compute_tables with the same parameters.
  void tables_backward(RotationTableView<const Scalar> dtables, std::span<const Scalar> dtransforms);
  // What attention applies in layer `layer`, as views into `tables` (table_rows() rows) and `transforms`
  // (sets·D·D values, or null); empty for none and absolute.
  AttentionRotations<Scalar> rotations(int layer, RotationTableView<const Scalar> tables, const Scalar* transforms) const;
  // Where attention's backward of layer `layer` accumulates: views into `dtables` and `dtransforms`.
  std::vector<HeadRotationGrad<Scalar>> rotation_grads(int layer, RotationTableView<Scalar> dtables,
                                                       Scalar* dtransforms) const;

  // ---- forward and backward, tables kept here (plain buffers) ----------------------------------------
  // Effective generators, transforms and rotation tables for every parameter set. Call once per forward,
  // after every change of the parameters or the positions; zeroes the table gradients.
  void prepare();
  AttentionRotations<Scalar> rotations(int layer) const {
    return rotations(layer, tables_.view(), transforms_.empty() ? nullptr : transforms_.data());
  }
  std::vector<HeadRotationGrad<Scalar>> rotation_grads(int layer) {
    return rotation_grads(layer, dtables_.view(), dtransforms_.empty() ? nullptr : dtransforms_.data());
  }
  // grads() += d loss / d params from the table (and transform) gradients accumulated by the attention
  // backwards of every layer since prepare().
  void backward() { tables_backward(dtables_.view(), dtransforms_); }

  // ---- the absolute encoding -------------------------------------------------------------------------
  // rows (T, C): what is added to every sequence's tokens — the CLS row (zeros when --cls skip leaves the CLS
  // token without one) and the table interpolated to the current grid.
  void absolute_rows(Scalar* rows) const { absolute_rows(params().data(), rows); }
  // grads() += d loss / d params given drows = d loss / d rows (T, C), summed over the batch.
  void absolute_rows_backward(const Scalar* drows) { absolute_rows_backward(drows, grads().data()); }
  // The same from the values in `table` (the layout of params()) and into `dtable` (+=).
  void absolute_rows(const Scalar* table, Scalar* rows) const;
  void absolute_rows_backward(const Scalar* drows, Scalar* dtable) const {
    absolute_rows_backward(drows, dtable, *interp_);
  }
  // The grid's interpolation of the table (the training grid's: the identity), replaced (not changed) by set_grid:
  // a backward that keeps the one of its forward takes that forward's rows back to the table with it.
  std::shared_ptr<const GridInterpolation> interpolation() const { return interp_; }
  void absolute_rows_backward(const Scalar* drows, Scalar* dtable, const GridInterpolation& interp) const;
  // Whether the rows are the table itself (the training grid, and a CLS row wherever there is a CLS token): the
  // engine then adds the parameter to the tokens as it is, on its device (nn/position_encoding.hpp).
  bool absolute_rows_are_table() const {
    return additive() && (!geo_.cls || cfg_.cls != ClsPolicy::skip) && interp_->is_identity() &&
           std::size_t(tokens()) * std::size_t(geo_.embed_dim) == params_.size();
  }
  // Plain buffers: x (B, T, C) += the rows, and its backward from dx (B, T, C).
  void add_to_tokens(Scalar* x, int batch) const;
  void add_to_tokens_backward(const Scalar* dx, int batch);

  // ---- diagnostics -----------------------------------------------------------------------------------
  // The generators A_0 … A_{P−1} of a parameter set, dense D×D (STRING: Pᵀ·A_i·P), in double.
  std::vector<Eigen::MatrixXd> generators(int set) const;
  // R(p) = exp(Σ p_i A_i) of a parameter set, dense, in double (STRING: = Pᵀ·exp(Σ p_i A_i^torus)·P).
  Eigen::MatrixXd rotation(int set, std::span<const double> p) const;

 private:
  KindContext context() const { return {cfg_, geo_, sets_, block()}; }
  LieREGeometry lie_geometry() const { return {sets_, geo_.pos_dim, geo_.head_dim, block()}; }

  void validate() const;
  int count_sets() const;
  // Patch positions (batch × N × P) → the rotated rows of every table and the CLS handling.
  void set_patch_positions(std::vector<double> patch_pos, int batch);

  PEConfig cfg_;
  PEGeometry geo_;
  std::shared_ptr<const EncodingKind<Scalar>> kind_;  // stateless: copies of the encoding share it
  int sets_ = 1;
  ParamStore<Scalar> params_;                       // learnable values and their gradients, in group order
  std::vector<Scalar> effective_, deffective_;      // (sets, P, D/b, b(b−1)/2)
  std::vector<Scalar> transforms_, dtransforms_;    // (sets, D, D) row-major (kinds with transforms)
  RotationTable<Scalar> tables_, dtables_;          // plain-buffer use: rows (sets, rows_per_set)
  std::uint64_t tables_version_ = std::uint64_t(-1);  // the positions tables_ was computed for
  std::vector<Scalar> positions_;                   // (rows_per_set, P)
  std::vector<int> grid_;
  int patches_ = 0, rows_per_set_ = 0, first_rotated_ = 0;
  std::uint64_t positions_version_ = 0;
  std::shared_ptr<const GridInterpolation> interp_ = std::make_shared<const GridInterpolation>();
};

template <class Scalar>
PositionEncoding<Scalar>::PositionEncoding(const PEConfig& cfg, const PEGeometry& geo, std::uint64_t seed)
    : cfg_(cfg), geo_(geo), kind_(make_kind<Scalar>(cfg.kind)) {
  validate();
  sets_ = count_sets();
  kind_->validate(context());
  Rng rng(seed);
  kind_->init(params_, context(), rng);
  if (rotary()) {
    effective_.assign(context().num_effective(), Scalar(0));
    deffective_.assign(effective_.size(), Scalar(0));
    kind_->effective(params_, context(), effective_);  // fixed kinds: once and for all
  }
  if (kind_->has_transforms()) {
    transforms_.assign(std::size_t(sets_) * geo_.head_dim * geo_.head_dim, Scalar(0));
    dtransforms_.assign(transforms_.size(), Scalar(0));
  }
  if (!geo_.train_grid.empty()) set_grid(geo_.train_grid);
}

template <class Scalar>
void PositionEncoding<Scalar>::set_grid(const std::vector<int>& grid) {
  LIERE_ENSURE(int(grid.size()) == geo_.pos_dim, "PositionEncoding::set_grid: the grid has " << grid.size()
                                                                                        << " axes, the encoding " << geo_.pos_dim);
  const std::vector<int>& train = geo_.train_grid.empty() ? grid : geo_.train_grid;
  grid_ = grid;
  set_patch_positions(grid_positions(grid, train, cfg_.position_unit(), cfg_.resolution), 1);
  if (additive())
    interp_ = std::make_shared<const GridInterpolation>(GridInterpolation::for_grids(train, grid));
}

template <class Scalar>
void PositionEncoding<Scalar>::set_positions(std::span<const double> patch_positions, int batch) {
  LIERE_ENSURE(!additive(), "PositionEncoding::set_positions: the absolute encoding needs a grid (set_grid)");
  LIERE_ENSURE(batch >= 1 && patch_positions.size() % (std::size_t(batch) * geo_.pos_dim) == 0,
               "PositionEncoding::set_positions: " << patch_positions.size() << " values is not B=" << batch
                                                   << " x N x P=" << geo_.pos_dim);
  grid_.clear();
  set_patch_positions(std::vector<double>(patch_positions.begin(), patch_positions.end()), batch);
}

template <class Scalar>
void PositionEncoding<Scalar>::compute_tables(RotationTableView<Scalar> tables) {
  LIERE_ENSURE(rotary(), "PositionEncoding::compute_tables: " << cfg_.info().name << " is not a rotary encoding");
  if (cfg_.info().learnable) kind_->effective(params_, context(), effective_);
  liere_table_forward<Scalar>(lie_geometry(), effective_, positions_, rows_per_set_, tables);
}

template <class Scalar>
void PositionEncoding<Scalar>::compute_transforms(std::span<Scalar> out) const {
  LIERE_ENSURE(out.size() == transforms_.size(), "PositionEncoding::compute_transforms: " << out.size()
                                                                                           << " values, expected "
                                                                                           << transforms_.size());
  kind_->transforms(params_, context(), out);
}

template <class Scalar>
void PositionEncoding<Scalar>::tables_backward(RotationTableView<const Scalar> dtables, std::span<const Scalar> dtransforms) {
  if (!rotary() || !cfg_.info().learnable) return;
  std::fill(deffective_.begin(), deffective_.end(), Scalar(0));
  liere_table_backward<Scalar>(lie_geometry(), effective_, positions_, rows_per_set_, dtables, deffective_);
  kind_->effective_backward(params_, context(), deffective_, grads());
  if (has_transforms() && !dtransforms.empty()) kind_->transforms_backward(params_, context(), dtransforms, grads());
}

template <class Scalar>
AttentionRotations<Scalar> PositionEncoding<Scalar>::rotations(int layer, RotationTableView<const Scalar> tables, const Scalar* transforms) const {
  AttentionRotations<Scalar> r;
  if (!rotary()) return r;
  r.first_rotated = first_rotated_;
  for (int h = 0; h < geo_.heads; ++h) {
    const int s = set_of(layer, h);
    HeadRotation<Scalar> hr;
    hr.table = {tables.data + std::size_t(s) * rows_per_set_ * geo_.head_dim * tables.block, rows_per_set_,
                geo_.head_dim, tables.block};
    if (transforms) hr.transform = transforms + std::size_t(s) * geo_.head_dim * geo_.head_dim;
    r.heads.push_back(hr);
  }
  return r;
}

template <class Scalar>
std::vector<HeadRotationGrad<Scalar>> PositionEncoding<Scalar>::rotation_grads(int layer, RotationTableView<Scalar> dtables,
                                                     Scalar* dtransforms) const {
  std::vector<HeadRotationGrad<Scalar>> g;
  if (!rotary()) return g;
  for (int h = 0; h < geo_.heads; ++h) {
    const int s = set_of(layer, h);
    HeadRotationGrad<Scalar> hg;
    hg.dtable = {dtables.data + std::size_t(s) * rows_per_set_ * geo_.head_dim * dtables.block, rows_per_set_,
                 geo_.head_dim, dtables.block};
    if (dtransforms) hg.dtransform = dtransforms + std::size_t(s) * geo_.head_dim * geo_.head_dim;
    g.push_back(hg);
  }
  return g;
}

template <class Scalar>
void PositionEncoding<Scalar>::prepare() {
  if (!rotary()) return;
  if (tables_.tokens() != table_rows() || tables_.block() != block()) tables_.resize(table_rows(), geo_.head_dim, block());
  if (cfg_.info().learnable || tables_version_ != positions_version_) compute_tables(tables_.view());
  tables_version_ = positions_version_;
  if (has_transforms()) compute_transforms(transforms_);
  if (dtables_.tokens() != tables_.tokens() || dtables_.block() != tables_.block())
    dtables_.resize(tables_.tokens(), tables_.head_dim(), tables_.block());
  else
    dtables_.set_zero();
  std::fill(dtransforms_.begin(), dtransforms_.end(), Scalar(0));
}

template <class Scalar>
void PositionEncoding<Scalar>::absolute_rows(const Scalar* table, Scalar* rows) const {
  LIERE_ENSURE(additive(), "PositionEncoding::absolute_rows: only for the absolute encoding");
  const int c = geo_.embed_dim, first = geo_.cls ? 1 : 0;
  const bool cls_row = geo_.cls && cfg_.cls != ClsPolicy::skip;
  for (int i = 0; i < first * c; ++i) rows[i] = cls_row ? table[i] : Scalar(0);
  interp_->apply(table + (cls_row ? c : 0), rows + std::size_t(first) * c, c);
}

template <class Scalar>
void PositionEncoding<Scalar>::absolute_rows_backward(const Scalar* drows, Scalar* g,
                                                       const GridInterpolation& interp) const {
  const int c = geo_.embed_dim, first = geo_.cls ? 1 : 0;
  const bool cls_row = geo_.cls && cfg_.cls != ClsPolicy::skip;
  if (cls_row)
    for (int i = 0; i < c; ++i) g[i] += drows[i];
  interp.apply_backward(drows + std::size_t(first) * c, g + (cls_row ? c : 0), c);
}

template <class Scalar>
void PositionEncoding<Scalar>::add_to_tokens(Scalar* x, int batch) const {
  const std::size_t n = std::size_t(tokens()) * geo_.embed_dim;
  std::vector<Scalar> rows(n);
  absolute_rows(rows.data());
  for (int b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < n; ++i) x[std::size_t(b) * n + i] += rows[i];
}

template <class Scalar>
void PositionEncoding<Scalar>::add_to_tokens_backward(const Scalar* dx, int batch) {
  const std::size_t n = std::size_t(tokens()) * geo_.embed_dim;
  std::vector<Scalar> drows(n, Scalar(0));
  for (int b = 0; b < batch; ++b)  // sum over the batch in order (deterministic)
    for (std::size_t i = 0; i < n; ++i) drows[i] += dx[std::size_t(b) * n + i];
  absolute_rows_backward(drows.data());
}

template <class Scalar>
std::vector<Eigen::MatrixXd> PositionEncoding<Scalar>::generators(int set) const {
  LIERE_ENSURE(rotary(), "PositionEncoding::generators: " << cfg_.info().name << " is not a rotary encoding");
  LIERE_ENSURE(set >= 0 && set < sets_, "PositionEncoding::generators: set " << set << " of " << sets_);
  std::vector<Scalar> eff(effective_.size());
  kind_->effective(params_, context(), eff);
  const int d = geo_.head_dim, b = block(), nb = d / b, ppb = so_dim(b);
  const Eigen::MatrixXd pm = kind_->transform(params_, context(), set);
  std::vector<Eigen::MatrixXd> out;
  for (int a = 0; a < geo_.pos_dim; ++a) {
    Eigen::MatrixXd m = Eigen::MatrixXd::Zero(d, d);
    for (int k = 0; k < nb; ++k)
      hat_fill(eff.data() + ((std::size_t(set) * geo_.pos_dim + a) * nb + k) * ppb, b, m.block(k * b, k * b, b, b));
    if (has_transforms()) m = pm.transpose() * m * pm;
    out.push_back(m);
  }
  return out;
}

template <class Scalar>
Eigen::MatrixXd PositionEncoding<Scalar>::rotation(int set, std::span<const double> p) const {
  LIERE_ENSURE(int(p.size()) == geo_.pos_dim, "PositionEncoding::rotation: a position has " << geo_.pos_dim << " values");
  const auto g = generators(set);
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(geo_.head_dim, geo_.head_dim);
  for (int i = 0; i < geo_.pos_dim; ++i) a += p[i] * g[i];
  if (has_transforms()) return liere::exp(a);  // conjugated: dense
  const int b = block(), d = geo_.head_dim;
  Eigen::MatrixXd r = Eigen::MatrixXd::Zero(d, d);
  for (int k = 0; k < d / b; ++k) r.block(k * b, k * b, b, b) = liere::exp(Eigen::MatrixXd(a.block(k * b, k * b, b, b)));
  return r;
}

template <class Scalar>
void PositionEncoding<Scalar>::validate() const {
  const PEKindInfo& info = cfg_.info();
  const int d = geo_.head_dim, p = geo_.pos_dim, b = cfg_.effective_block();
  LIERE_ENSURE(geo_.layers >= 1 && geo_.heads >= 1 && d >= 2,
               "position encoding: bad model geometry (layers " << geo_.layers << ", heads " << geo_.heads
                                                             << ", head dim " << d << ")");
  LIERE_ENSURE(p >= 1 && p <= 3, "position encoding: 1, 2 or 3 position axes, got " << p);
  if (!info.rotary) return;
  LIERE_ENSURE(d % b == 0, "--pe " << info.name << " with block " << b << " does not fit head dim " << d
                                   << ": the block must divide the head dimension");
}

template <class Scalar>
int PositionEncoding<Scalar>::count_sets() const {
  switch (cfg_.effective_sharing()) {
    case Sharing::layer_head: return geo_.layers * geo_.heads;
    case Sharing::head: return geo_.heads;
    case Sharing::layer: return geo_.layers;
    case Sharing::shared: return 1;
  }
  return 1;
}

template <class Scalar>
void PositionEncoding<Scalar>::set_patch_positions(std::vector<double> patch_pos, int batch) {
  const int p = geo_.pos_dim;
  patches_ = int(patch_pos.size() / (std::size_t(batch) * p));
  const bool cls_row = geo_.cls && cfg_.cls != ClsPolicy::skip;
  first_rotated_ = geo_.cls && cfg_.cls == ClsPolicy::skip ? 1 : 0;
  const int rows_per_seq = patches_ + (cls_row ? 1 : 0);
  rows_per_set_ = rows_per_seq * batch;
  positions_.assign(std::size_t(rows_per_set_) * p, Scalar(0));
  for (int b = 0; b < batch; ++b) {
    const double* src = patch_pos.data() + std::size_t(b) * patches_ * p;
    Scalar* dst = positions_.data() + std::size_t(b) * rows_per_seq * p;
    if (cls_row) {
      if (cfg_.cls == ClsPolicy::center) {
        const std::vector<double> c = center_of(std::vector<double>(src, src + std::size_t(patches_) * p), p);
        for (int a = 0; a < p; ++a) dst[a] = Scalar(c[a]);
      }
      dst += p;  // identity: position 0
    }
    for (std::size_t i = 0; i < std::size_t(patches_) * p; ++i) dst[i] = Scalar(src[i]);
  }
  ++positions_version_;
}

// Explicit instances (pe/encoding.cpp) for programs that link liere::compiled.
#ifdef LIERE_PRECOMPILED
extern template class PositionEncoding<float>;
extern template class PositionEncoding<double>;
#endif

}  // namespace liere
