// liere/pe/encoding.hpp — every position encoding behind one interface, for a model of L layers × H heads.
//
// All rotary encodings here are one computation with different parameters: per parameter set, effective
// LieRE generators (Dim axes × D/b blocks of b×b skew-symmetric matrices, layout of pe/liere.hpp) and, for
// STRING, a dense orthogonal transform P:
//   liere, rope-mixed-official, liere-commute   the generators are the parameters
//   rope-mixed (rope-vit)                       b = 2; pair j of axis a turns by −f_a[j]·x_a (complex multiply)
//   visionllama, rope-1d                        b = 2, fixed frequencies, not trained
//   comrope-ap                                  one block per index k, owned by axis k mod Dim (0 for the others)
//   comrope-ld                                  block k of axis a is θ_{a,k}·S_k (one S_k per block)
//   string                                      rope-vit's RoPE-Mixed torus and P = (I − S)(I + S)⁻¹
// Parameter sets follow the sharing mode: one per layer × head, per head, per layer, or one for the model.
// The absolute encoding is a learned table added to the tokens, interpolated on other grids.
//
// Per training step:
//   pe.set_grid({8, 8})                       the patch grid of this batch (or set_positions for any coordinates)
//   pe.prepare()                              tables for every set, once per forward (after the optimizer step)
//   attention_forward(…, pe.rotations(l), …)  for each layer l
//   attention_backward(…, &grads, …)          with grads = pe.rotation_grads(l)
//   pe.backward()                             grads() += d loss / d params
// Gradients of the parameters accumulate until zero_grad(), like every other parameter.
#pragma once

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <liere/attention.hpp>
#include <liere/config.hpp>
#include <liere/lie/hat.hpp>
#include <liere/pe/config.hpp>
#include <liere/pe/interpolation.hpp>
#include <liere/pe/liere.hpp>
#include <liere/pe/positions.hpp>
#include <liere/pe/rotation_table.hpp>
#include <numbers>
#include <random>
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

template <class Scalar>
class PositionEncoding {
 public:
  // A named block of parameters (the engine registers each as one tensor).
  struct Group {
    std::string name;
    std::vector<std::int64_t> shape;
    std::size_t offset = 0, size = 0;
  };

  PositionEncoding(const PEConfig& cfg, const PEGeometry& geo, std::uint64_t seed) : cfg_(cfg), geo_(geo) {
    validate();
    const int b = cfg_.effective_block(), d = geo_.head_dim, p = geo_.pos_dim;
    sets_ = count_sets();
    eff_geo_ = {sets_, p, d, b};
    std::mt19937_64 rng(seed);
    switch (cfg_.kind) {
      case PEKind::none: break;
      case PEKind::absolute: {
        const std::int64_t rows = train_patches() + (geo_.cls && cfg_.cls != ClsPolicy::skip ? 1 : 0);
        add_group("pe.absolute", {rows, geo_.embed_dim});
        const double std = cfg_.init.kind == PEInit::Kind::default_for_encoding ? 0.02 : cfg_.init.scale;
        if (cfg_.init.kind == PEInit::Kind::uniform) fill_uniform(group_span(0), cfg_.init.scale, rng);
        else fill_normal(group_span(0), std, rng);
        break;
      }
      case PEKind::visionllama:
      case PEKind::rope_1d:
        effective_.assign(eff_geo_.num_params(), Scalar(0));
        fixed_frequencies();
        break;
      case PEKind::rope_mixed:
      case PEKind::string_cayley:
        add_group("pe.freqs", {sets_, p, d / 2});
        if (cfg_.init.kind == PEInit::Kind::default_for_encoding) rope_vit_init(rng);
        else fill_init(group_span(0), rng);
        if (cfg_.kind == PEKind::string_cayley) add_group("pe.cayley", {sets_, so_dim(d)});  // S = 0: P = I
        break;
      case PEKind::comrope_ld: {
        add_group("pe.skew", {sets_, d / b, so_dim(b)});
        add_group("pe.theta", {sets_, p, d / b});
        fill_init(group_span(0), rng);
        fill_normal(group_span(1), 1.0, rng);  // ComRoPE: θ ~ N(0, 1)
        break;
      }
      case PEKind::comrope_ap:  // one b×b block per block index, owned by axis k mod Dim
        add_group("pe.blocks", {sets_, d / b, so_dim(b)});
        fill_init(group_span(0), rng);
        break;
      default:  // liere, rope-mixed-official, liere-commute: the generators are the parameters
        add_group("pe.generators", {sets_, p, d / b, so_dim(b)});
        fill_init(group_span(0), rng);
        break;
    }
    grads_.assign(params_.size(), Scalar(0));
    if (rotary()) {
      effective_.resize(eff_geo_.num_params());
      deffective_.assign(eff_geo_.num_params(), Scalar(0));
    }
    if (cfg_.kind == PEKind::string_cayley) {
      transforms_.assign(std::size_t(sets_) * d * d, Scalar(0));
      dtransforms_.assign(transforms_.size(), Scalar(0));
    }
    if (!geo_.train_grid.empty()) set_grid(geo_.train_grid);
  }

  // ---- what it is ----------------------------------------------------------------------------------
  const PEConfig& config() const { return cfg_; }
  const PEGeometry& geometry() const { return geo_; }
  bool rotary() const { return cfg_.info().rotary; }
  bool additive() const { return cfg_.kind == PEKind::absolute; }
  int num_sets() const { return sets_; }
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
  std::span<Scalar> params() { return params_; }
  std::span<const Scalar> params() const { return params_; }
  std::span<Scalar> grads() { return grads_; }
  std::span<const Scalar> grads() const { return grads_; }
  std::size_t num_params() const { return params_.size(); }
  const std::vector<Group>& groups() const { return groups_; }
  std::span<Scalar> group_values(std::size_t i) { return group_span(i); }
  std::span<Scalar> group_grads(std::size_t i) { return std::span<Scalar>(grads_).subspan(groups_[i].offset, groups_[i].size); }
  void zero_grad() { std::fill(grads_.begin(), grads_.end(), Scalar(0)); }

  // ---- tokens ----------------------------------------------------------------------------------------
  // The patch grid of this forward; the positions follow the resolution policy and the CLS policy.
  void set_grid(const std::vector<int>& grid) {
    LIERE_ENSURE(int(grid.size()) == geo_.pos_dim, "PositionEncoding::set_grid: the grid has " << grid.size()
                                                                                          << " axes, the encoding " << geo_.pos_dim);
    const std::vector<int>& train = geo_.train_grid.empty() ? grid : geo_.train_grid;
    grid_ = grid;
    set_patch_positions(grid_positions(grid, train, cfg_.position_unit(), cfg_.resolution), 1);
    if (additive()) interp_ = GridInterpolation::for_grids(train, grid);
  }
  // Any coordinates: patch_positions (N, P) shared by the batch (batch = 1) or (B, N, P) per sequence.
  void set_positions(std::span<const double> patch_positions, int batch = 1) {
    LIERE_ENSURE(!additive(), "PositionEncoding::set_positions: the absolute encoding needs a grid (set_grid)");
    LIERE_ENSURE(batch >= 1 && patch_positions.size() % (std::size_t(batch) * geo_.pos_dim) == 0,
                 "PositionEncoding::set_positions: " << patch_positions.size() << " values is not B=" << batch
                                                     << " x N x P=" << geo_.pos_dim);
    grid_.clear();
    set_patch_positions(std::vector<double>(patch_positions.begin(), patch_positions.end()), batch);
  }
  // Tokens per sequence, the CLS token included.
  int tokens() const { return patches_ + (geo_.cls ? 1 : 0); }
  int patches() const { return patches_; }
  // Positions of the rotated tokens, (rows, P): per set the table has these rows.
  const std::vector<Scalar>& rotated_positions() const { return positions_; }

  // ---- forward ---------------------------------------------------------------------------------------
  // Effective generators, transforms and rotation tables for every parameter set. Call once per forward,
  // after every change of the parameters or the positions; zeroes the table gradients.
  void prepare() {
    if (!rotary()) return;
    const bool fixed = !cfg_.info().learnable;
    if (!fixed || tables_dirty_) {
      if (!fixed) compute_effective();
      liere_table_forward<Scalar>(eff_geo_, effective_, positions_, rows_per_set_, tables_);
      tables_dirty_ = false;
    }
    if (cfg_.kind == PEKind::string_cayley) compute_transforms();
    if (dtables_.tokens() != tables_.tokens() || dtables_.block() != tables_.block())
      dtables_.resize(tables_.tokens(), tables_.head_dim(), tables_.block());
    else
      dtables_.set_zero();
    std::fill(dtransforms_.begin(), dtransforms_.end(), Scalar(0));
  }

  // What attention applies in layer `layer` (empty for none and absolute).
  AttentionRotations<Scalar> rotations(int layer) const {
    AttentionRotations<Scalar> r;
    if (!rotary()) return r;
    r.first_rotated = first_rotated_;
    for (int h = 0; h < geo_.heads; ++h) {
      const int s = set_of(layer, h);
      HeadRotation<Scalar> hr;
      hr.table = tables_.view(s * rows_per_set_, rows_per_set_);
      if (!transforms_.empty()) hr.transform = transforms_.data() + std::size_t(s) * geo_.head_dim * geo_.head_dim;
      r.heads.push_back(hr);
    }
    return r;
  }
  std::vector<HeadRotationGrad<Scalar>> rotation_grads(int layer) {
    std::vector<HeadRotationGrad<Scalar>> g;
    if (!rotary()) return g;
    for (int h = 0; h < geo_.heads; ++h) {
      const int s = set_of(layer, h);
      HeadRotationGrad<Scalar> hg;
      hg.dtable = dtables_.view(s * rows_per_set_, rows_per_set_);
      if (!dtransforms_.empty()) hg.dtransform = dtransforms_.data() + std::size_t(s) * geo_.head_dim * geo_.head_dim;
      g.push_back(hg);
    }
    return g;
  }

  // grads() += d loss / d params from the table (and transform) gradients accumulated by the attention
  // backwards of every layer since prepare().
  void backward() {
    if (!rotary() || !cfg_.info().learnable) return;
    std::fill(deffective_.begin(), deffective_.end(), Scalar(0));
    liere_table_backward<Scalar>(eff_geo_, effective_, positions_, rows_per_set_, dtables_, deffective_);
    switch (cfg_.kind) {
      case PEKind::comrope_ld: {
        // w[s][a][k][i] = θ[s][a][k]·skew[s][k][i]
        const int p = geo_.pos_dim, nb = eff_geo_.num_blocks(), ppb = so_dim(eff_geo_.block);
        Scalar* dskew = grads_.data() + groups_[0].offset;
        Scalar* dtheta = grads_.data() + groups_[1].offset;
        const Scalar* skew = params_.data() + groups_[0].offset;
        const Scalar* theta = params_.data() + groups_[1].offset;
        for (int s = 0; s < sets_; ++s)
          for (int a = 0; a < p; ++a)
            for (int k = 0; k < nb; ++k) {
              const Scalar* dw = deffective_.data() + ((std::size_t(s) * p + a) * nb + k) * ppb;
              const std::size_t ti = (std::size_t(s) * p + a) * nb + k, si = (std::size_t(s) * nb + k) * ppb;
              for (int i = 0; i < ppb; ++i) {
                dtheta[ti] += dw[i] * skew[si + i];
                dskew[si + i] += dw[i] * theta[ti];
              }
            }
        break;
      }
      case PEKind::string_cayley:
        for (std::size_t i = 0; i < deffective_.size(); ++i) grads_[groups_[0].offset + i] += deffective_[i];
        cayley_backward();
        break;
      case PEKind::comrope_ap: {  // w[s][a][k] = blocks[s][k] when k mod Dim = a, else 0
        const int p = geo_.pos_dim, nb = eff_geo_.num_blocks(), ppb = so_dim(eff_geo_.block);
        for (int s = 0; s < sets_; ++s)
          for (int k = 0; k < nb; ++k)
            for (int i = 0; i < ppb; ++i)
              grads_[(std::size_t(s) * nb + k) * ppb + i] += deffective_[((std::size_t(s) * p + k % p) * nb + k) * ppb + i];
        break;
      }
      default:
        for (std::size_t i = 0; i < deffective_.size(); ++i) grads_[i] += deffective_[i];
        break;
    }
  }

  // ---- the absolute encoding -------------------------------------------------------------------------
  // x (B, T, C) += the table interpolated to the current grid (the CLS row to token 0 when it has one).
  void add_to_tokens(Scalar* x, int batch) const {
    LIERE_ENSURE(additive(), "PositionEncoding::add_to_tokens: only for the absolute encoding");
    const int c = geo_.embed_dim, t = tokens(), first = geo_.cls ? 1 : 0;
    std::vector<Scalar> patch(std::size_t(patches_) * c);
    const Scalar* table = params_.data();
    const bool cls_row = geo_.cls && cfg_.cls != ClsPolicy::skip;
    interp_.apply(table + (cls_row ? c : 0), patch.data(), c);
#pragma omp parallel for schedule(static)
    for (int b = 0; b < batch; ++b) {
      Scalar* xb = x + std::size_t(b) * t * c;
      if (cls_row)
        for (int i = 0; i < c; ++i) xb[i] += table[i];
      for (std::size_t i = 0; i < patch.size(); ++i) xb[std::size_t(first) * c + i] += patch[i];
    }
  }
  void add_to_tokens_backward(const Scalar* dx, int batch) {
    const int c = geo_.embed_dim, t = tokens(), first = geo_.cls ? 1 : 0;
    const bool cls_row = geo_.cls && cfg_.cls != ClsPolicy::skip;
    std::vector<Scalar> dpatch(std::size_t(patches_) * c, Scalar(0));
    for (int b = 0; b < batch; ++b) {  // sum over the batch in order (deterministic)
      const Scalar* db = dx + std::size_t(b) * t * c;
      if (cls_row)
        for (int i = 0; i < c; ++i) grads_[i] += db[i];
      for (std::size_t i = 0; i < dpatch.size(); ++i) dpatch[i] += db[std::size_t(first) * c + i];
    }
    interp_.apply_backward(dpatch.data(), grads_.data() + (cls_row ? c : 0), c);
  }

  // ---- diagnostics -----------------------------------------------------------------------------------
  // The generators A_0 … A_{P−1} of a parameter set, dense D×D (STRING: Pᵀ·A_i·P), in double.
  std::vector<Eigen::MatrixXd> generators(int set) const {
    LIERE_ENSURE(rotary(), "PositionEncoding::generators: " << cfg_.info().name << " is not a rotary encoding");
    LIERE_ENSURE(set >= 0 && set < sets_, "PositionEncoding::generators: set " << set << " of " << sets_);
    std::vector<Scalar> eff(eff_geo_.num_params());
    effective_into(eff);
    const int d = geo_.head_dim, b = eff_geo_.block, nb = eff_geo_.num_blocks(), ppb = so_dim(b);
    std::vector<Eigen::MatrixXd> out;
    for (int a = 0; a < geo_.pos_dim; ++a) {
      Eigen::MatrixXd m = Eigen::MatrixXd::Zero(d, d);
      for (int k = 0; k < nb; ++k) {
        const Scalar* w = eff.data() + ((std::size_t(set) * geo_.pos_dim + a) * nb + k) * ppb;
        int i = 0;
        for (int r = 0; r < b; ++r)
          for (int c = r + 1; c < b; ++c, ++i) {
            m(k * b + r, k * b + c) = double(w[i]);
            m(k * b + c, k * b + r) = -double(w[i]);
          }
      }
      if (cfg_.kind == PEKind::string_cayley) {
        const Eigen::MatrixXd pm = cayley(set);
        m = pm.transpose() * m * pm;
      }
      out.push_back(m);
    }
    return out;
  }
  // R(p) = exp(Σ p_i A_i) of a parameter set, dense, in double (STRING: = Pᵀ·exp(Σ p_i A_i^torus)·P).
  Eigen::MatrixXd rotation(int set, std::span<const double> p) const {
    LIERE_ENSURE(int(p.size()) == geo_.pos_dim, "PositionEncoding::rotation: a position has " << geo_.pos_dim << " values");
    const auto g = generators(set);
    Eigen::MatrixXd a = Eigen::MatrixXd::Zero(geo_.head_dim, geo_.head_dim);
    for (int i = 0; i < geo_.pos_dim; ++i) a += p[i] * g[i];
    if (cfg_.kind == PEKind::string_cayley) return liere::exp(a);  // conjugated: dense
    const int b = eff_geo_.block, d = geo_.head_dim;
    Eigen::MatrixXd r = Eigen::MatrixXd::Zero(d, d);
    for (int k = 0; k < d / b; ++k) r.block(k * b, k * b, b, b) = liere::exp(Eigen::MatrixXd(a.block(k * b, k * b, b, b)));
    return r;
  }

 private:
  void validate() {
    const PEKindInfo& info = cfg_.info();
    const int d = geo_.head_dim, p = geo_.pos_dim, b = cfg_.effective_block();
    LIERE_ENSURE(geo_.layers >= 1 && geo_.heads >= 1 && d >= 2,
                 "position encoding: bad model geometry (layers " << geo_.layers << ", heads " << geo_.heads
                                                               << ", head dim " << d << ")");
    LIERE_ENSURE(p >= 1 && p <= 3, "position encoding: 1, 2 or 3 position axes, got " << p);
    if (!info.rotary) return;
    LIERE_ENSURE(d % b == 0, "--pe " << info.name << " with block " << b << " does not fit head dim " << d
                                     << ": the block must divide the head dimension");
    if (cfg_.kind == PEKind::rope_1d)
      LIERE_ENSURE(p == 1, "--pe rope-1d encodes 1D sequences, but the positions have " << p
                                                                                      << " axes; use rope-mixed or liere for images");
    if (cfg_.kind == PEKind::visionllama)
      LIERE_ENSURE(d / p / 2 >= 1, "--pe visionllama needs head dim >= " << 2 * p << " for " << p << " axes, got " << d);
    if (cfg_.kind == PEKind::comrope_ap)
      LIERE_ENSURE(d / b >= p, "--pe comrope-ap needs at least one block per axis: head dim " << d << " / block " << b
                                                                                           << " = " << d / b
                                                                                           << " blocks for " << p << " axes");
    if (cfg_.kind == PEKind::rope_mixed || cfg_.kind == PEKind::string_cayley)
      LIERE_ENSURE(d % 4 == 0 || cfg_.init.kind != PEInit::Kind::default_for_encoding,
                   "--pe " << info.name << " with rope-vit's init needs a head dim divisible by 4, got " << d);
  }
  int count_sets() const {
    switch (cfg_.effective_sharing()) {
      case Sharing::layer_head: return geo_.layers * geo_.heads;
      case Sharing::head: return geo_.heads;
      case Sharing::layer: return geo_.layers;
      case Sharing::shared: return 1;
    }
    return 1;
  }
  std::int64_t train_patches() const {
    std::int64_t n = 1;
    LIERE_ENSURE(!geo_.train_grid.empty(), "the absolute encoding needs the training grid (PEGeometry::train_grid)");
    for (int g : geo_.train_grid) n *= g;
    return n;
  }
  void add_group(const std::string& name, std::vector<std::int64_t> shape) {
    std::size_t n = 1;
    for (auto s : shape) n *= std::size_t(s);
    groups_.push_back({name, shape, params_.size(), n});
    params_.resize(params_.size() + n, Scalar(0));
  }
  std::span<Scalar> group_span(std::size_t i) { return std::span<Scalar>(params_).subspan(groups_[i].offset, groups_[i].size); }

  static void fill_uniform(std::span<Scalar> v, double scale, std::mt19937_64& rng) {
    for (Scalar& x : v) x = Scalar(scale * double(rng() >> 11) * 0x1.0p-53);
  }
  static void fill_normal(std::span<Scalar> v, double std, std::mt19937_64& rng) {
    for (Scalar& x : v) {  // Box–Muller from 53-bit uniforms: identical on every standard library
      const double u1 = (double(rng() >> 11) + 1.0) * 0x1.0p-53, u2 = double(rng() >> 11) * 0x1.0p-53;
      x = Scalar(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
    }
  }
  // The --init choice for generator entries: U[0, 2π) unless told otherwise (paper, official code).
  void fill_init(std::span<Scalar> v, std::mt19937_64& rng) const {
    if (cfg_.init.kind == PEInit::Kind::normal) fill_normal(v, cfg_.init.scale, rng);
    else fill_uniform(v, cfg_.init.kind == PEInit::Kind::uniform ? cfg_.init.scale : 2 * std::numbers::pi, rng);
  }
  // rope-vit's RoPE-Mixed init: |f_k| = 10^(−4k/D) for k < D/4; the first D/4 pairs along a random unit
  // direction u₁ per set, the next D/4 along u₂ ⟂ u₁ (in 2D: α and α + π/2). Pair j of axis a turns by
  // f_a[j]·x_a as a complex multiplication, i.e. LieRE parameter −f_a[j] (exp(wJ) turns by −w).
  void rope_vit_init(std::mt19937_64& rng) {
    const int d = geo_.head_dim, p = geo_.pos_dim, pairs = d / 2, quarter = d / 4;
    Scalar* w = params_.data() + groups_[0].offset;
    for (int s = 0; s < sets_; ++s) {
      Eigen::VectorXd u1(p), u2(p);
      if (p == 1) {
        u1 << 1.0;
        u2 << 1.0;
      } else {
        const double alpha = 2 * std::numbers::pi * double(rng() >> 11) * 0x1.0p-53;
        if (p == 2) {
          u1 << std::cos(alpha), std::sin(alpha);
          u2 << std::cos(alpha + std::numbers::pi / 2), std::sin(alpha + std::numbers::pi / 2);
        } else {  // a random orthonormal pair in 3D
          std::vector<Scalar> g(6);
          fill_normal(g, 1.0, rng);
          u1 << g[0], g[1], g[2];
          u1.normalize();
          u2 << g[3], g[4], g[5];
          u2 -= u1.dot(u2) * u1;
          u2.normalize();
        }
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
  // visionllama (the official code's TiledPositionEncoder): n = D/P/2 phases per axis, ω_j = exp(−4j/(n−1)),
  // block a·n + j turns by x_a·ω_j; remaining dims pass through. rope-1d: θ_j = 10000^(−2j/D), pairs
  // (2j, 2j+1) turn as in RoFormer ([[cos, −sin], [sin, cos]], i.e. parameter −θ_j).
  void fixed_frequencies() {
    const int d = geo_.head_dim, p = geo_.pos_dim, pairs = d / 2;
    if (cfg_.kind == PEKind::visionllama) {
      const int n = d / p / 2;
      for (int a = 0; a < p; ++a)
        for (int j = 0; j < n; ++j)
          effective_[std::size_t(a) * pairs + a * n + j] = Scalar(n > 1 ? std::exp(-4.0 * j / (n - 1)) : 1.0);
    } else {
      for (int j = 0; j < pairs; ++j) effective_[j] = Scalar(-std::pow(10000.0, -2.0 * j / d));
    }
  }
  // The effective generators (sets, P, D/b, b(b−1)/2) from the parameters.
  void effective_into(std::vector<Scalar>& out) const {
    switch (cfg_.kind) {
      case PEKind::none:
      case PEKind::absolute: break;
      case PEKind::visionllama:
      case PEKind::rope_1d: out = effective_; break;
      case PEKind::comrope_ld: {
        const int p = geo_.pos_dim, nb = eff_geo_.num_blocks(), ppb = so_dim(eff_geo_.block);
        const Scalar* skew = params_.data() + groups_[0].offset;
        const Scalar* theta = params_.data() + groups_[1].offset;
        for (int s = 0; s < sets_; ++s)
          for (int a = 0; a < p; ++a)
            for (int k = 0; k < nb; ++k)
              for (int i = 0; i < ppb; ++i)
                out[((std::size_t(s) * p + a) * nb + k) * ppb + i] =
                    theta[(std::size_t(s) * p + a) * nb + k] * skew[(std::size_t(s) * nb + k) * ppb + i];
        break;
      }
      case PEKind::comrope_ap: {
        const int p = geo_.pos_dim, nb = eff_geo_.num_blocks(), ppb = so_dim(eff_geo_.block);
        std::fill(out.begin(), out.end(), Scalar(0));
        for (int s = 0; s < sets_; ++s)
          for (int k = 0; k < nb; ++k)
            std::copy_n(params_.data() + (std::size_t(s) * nb + k) * ppb, ppb,
                        out.data() + ((std::size_t(s) * p + k % p) * nb + k) * ppb);
        break;
      }
      default:  // the first group holds the effective generators
        std::copy_n(params_.data() + groups_[0].offset, out.size(), out.begin());
        break;
    }
  }
  void compute_effective() { effective_into(effective_); }
  // STRING: P = (I − S)(I + S)⁻¹ per set, S = hat(the set's Cayley parameters).
  Eigen::MatrixXd cayley(int set) const {
    const int d = geo_.head_dim;
    const Scalar* s = params_.data() + groups_[1].offset + std::size_t(set) * so_dim(d);
    const Eigen::MatrixXd sm = hat(Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, 1>>(s, so_dim(d)).template cast<double>().eval());
    const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(d, d);
    return (id - sm) * (id + sm).inverse();
  }
  void compute_transforms() {
    const int d = geo_.head_dim;
    for (int s = 0; s < sets_; ++s)
      Eigen::Map<Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          transforms_.data() + std::size_t(s) * d * d, d, d) = cayley(s).template cast<Scalar>();
  }
  // dS = −(I + P)ᵀ·G·(I + S)⁻ᵀ with G = dL/dP; the parameters are S's upper triangle: ds = dS(r,c) − dS(c,r).
  void cayley_backward() {
    const int d = geo_.head_dim;
    for (int s = 0; s < sets_; ++s) {
      const Scalar* sp = params_.data() + groups_[1].offset + std::size_t(s) * so_dim(d);
      const Eigen::MatrixXd sm = hat(Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, 1>>(sp, so_dim(d)).template cast<double>().eval());
      const Eigen::MatrixXd id = Eigen::MatrixXd::Identity(d, d), minv = (id + sm).inverse(), pm = (id - sm) * minv;
      const Eigen::MatrixXd g = Eigen::Map<const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                                    dtransforms_.data() + std::size_t(s) * d * d, d, d)
                                    .template cast<double>();
      const Eigen::MatrixXd ds = -(id + pm).transpose() * g * minv.transpose();
      Scalar* out = grads_.data() + groups_[1].offset + std::size_t(s) * so_dim(d);
      int i = 0;
      for (int r = 0; r < d; ++r)
        for (int c = r + 1; c < d; ++c, ++i) out[i] += Scalar(ds(r, c) - ds(c, r));
    }
  }
  // Patch positions (batch × N × P) → the rotated rows of every table and the CLS handling.
  void set_patch_positions(std::vector<double> patch_pos, int batch) {
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
    tables_dirty_ = true;
  }

  PEConfig cfg_;
  PEGeometry geo_;
  int sets_ = 1;
  LieREGeometry eff_geo_;
  std::vector<Scalar> params_, grads_;  // learnable, in group order
  std::vector<Group> groups_;
  std::vector<Scalar> effective_, deffective_;      // (sets, P, D/b, b(b−1)/2)
  std::vector<Scalar> transforms_, dtransforms_;    // (sets, D, D) row-major (STRING)
  RotationTable<Scalar> tables_, dtables_;          // rows (sets, rows_per_set)
  std::vector<Scalar> positions_;                   // (rows_per_set, P)
  std::vector<int> grid_;
  int patches_ = 0, rows_per_set_ = 0, first_rotated_ = 0;
  bool tables_dirty_ = true;
  GridInterpolation interp_;
};

}  // namespace liere
