// liere/nn/position_encoding.hpp — a position encoding (pe/encoding.hpp) as a module of the engine.
//
// The encoding's parameter blocks ("pe.generators", "pe.freqs", "pe.absolute", …) are registered in the
// model's ParamsT as parameters over the encoding's own storage, so the optimizer, gradient clipping,
// zero_grad and checkpoints treat them like every other parameter.
//
// Per forward pass:
//   enc = pe.begin(tape, grid)   positions for this grid and an op on the tape whose outputs are the rotation
//                                tables of every parameter set (and STRING's transforms): Vars like any other,
//                                computed from the parameters; their gradients, accumulated by every attention
//                                layer's backward, go back to the parameters in this op's backward
//   pe.add_to_tokens(tape, x)    the absolute encoding (identity for the others)
//   nn::attention(…, &pe.encoding(), enc, layer, …) in each layer
// The tables are computed by the backend's op on the model's device (LIERE_DISPATCH rotation_table_forward /
// rotation_table_backward: backend/cpu/rotation_table.hpp, backend/cuda/rotation_table.cu) from the encoding's
// effective generators and positions, which pe/ provides on the host (a few kB, copied to the device per step;
// the parameters stay on the host, see nn/module.hpp). Fixed encodings (visionllama, rope-1d) keep their tables
// until the positions change.
//
// Caching (docs/api.md, "Inference: cached and baked tables"). A forward that needs no gradient for the encoding
// (under tape.no_grad(), or after freeze()) reuses the tables (and STRING's transforms) of the previous such
// forward when the parameters, the positions and the device are the same. "The same parameters" is checked on
// their values (a copy taken when the tables were computed, compared bit for bit: a few hundred kB at most), so
// an optimizer step, a checkpoint load or a write through encoding().params() all invalidate the cache, with no
// counter anyone could forget to bump. A forward that records gradients computes its tables fresh, as before.
//   freeze()       the encoding's parameters become constants: no gradient reaches them, their tables are cached
//                  from one forward to the next, even while the rest of the model trains; unfreeze() undoes it.
//   bake(grid)     freeze() and compute the tables of this grid now, so that the first inference pays nothing.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>
#include <liere/pe/encoding.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

namespace liere::nn {

// The encoding's part of one forward pass, on the tape.
template <class S>
struct EncodingVars {
  VarT<S> tables;      // (table rows, D/b, b, b): every set's rotation table; undefined for non-rotary encodings
  VarT<S> transforms;  // (sets, D, D) dense transforms (STRING), else undefined

  RotationTableView<const S> table_view(int head_dim) const {
    const Shape& s = tables.shape();
    return {tables.data(), int(s[0]), head_dim, int(s[2])};
  }
};

template <class S>
class PositionEncodingModuleT {
 public:
  PositionEncodingModuleT() = default;
  PositionEncodingModuleT(ParamsT<S>& params, const PEConfig& cfg, const PEGeometry& geo, std::uint64_t seed)
      : pe_(std::make_unique<PositionEncoding<S>>(cfg, geo, seed)) {
    for (std::size_t i = 0; i < pe_->groups().size(); ++i) {
      const auto& g = pe_->groups()[i];
      Shape shape;
      for (auto d : g.shape) shape.push_back(Index(d));
      auto v = pe_->group_values(i);
      auto gr = pe_->group_grads(i);
      ParameterT<S> p = ParameterT<S>::wrap(g.name, TensorT<S>::wrap(v.data(), shape), TensorT<S>::wrap(gr.data(), shape));
      params.add(p);
      params_.push_back(p);
    }
  }

  // Positions for this patch grid and the tables op; see the header comment.
  EncodingVars<S> begin(TapeT<S>& tape, const std::vector<int>& grid, Device device = Device::cpu) {
    if (grid != grid_) {
      pe_->set_grid(grid);
      grid_ = grid;
    }
    return record(tape, device);
  }
  // Arbitrary coordinates instead of a grid (rotary encodings): (N, P) for the batch or (B, N, P).
  EncodingVars<S> begin(TapeT<S>& tape, std::span<const double> positions, int batch, Device device = Device::cpu) {
    pe_->set_positions(positions, batch);
    grid_.clear();
    return record(tape, device);
  }

  // x (B, T, C) → x + the absolute table (interpolated to the grid); x itself for the other encodings. The
  // rows (T, C) are made on the host from the table and added to every sequence by add_broadcast on x's device.
  VarT<S> add_to_tokens(TapeT<S>& tape, const VarT<S>& x) const {
    if (!pe_->additive()) return x;
    const Shape& xs = x.shape();
    LIERE_ENSURE(xs.rank() == 3 && xs[1] == pe_->tokens() && xs[2] == pe_->geometry().embed_dim,
                 "absolute encoding: tokens " << xs << " but the encoding expects (B, " << pe_->tokens() << ", "
                                              << pe_->geometry().embed_dim << ")");
    const Device dev = x.device();
    const Shape rs{xs[1], xs[2]};
    TensorT<S> rows(rs);
    pe_->absolute_rows(rows.data());
    if (dev != Device::cpu) rows = rows.to(dev);
    VarT<S> y = tape.output(xs, x, params_.front());
    const Index R = xs[0], M = rs.numel();
    LIERE_DISPATCH(S, dev, add_broadcast_forward, x.data(), rows.data(), y.data(), R, M);
    if (y.requires_grad()) {
      PositionEncoding<S>* pe = pe_.get();
      tape.push([gx = x.grad_ref(), gy = y.grad_ref(), pe, R, M, rs, dev, frozen = frozen_] {
        const S* dy = gy.get();
        if (!dy) return;
        TensorT<S> drows = TensorT<S>::zeros(rs, dev);
        S* dx = gx.acc();
        LIERE_DISPATCH(S, dev, add_broadcast_backward, dy, dx, drows.data(), R, M);
        if (!frozen) pe->absolute_rows_backward(drows.on_host() ? drows.data() : drows.to(Device::cpu).data());
      });
    }
    return y;
  }

  // See the header comment. freeze() keeps the parameters registered (checkpoints still hold them) but no gradient
  // reaches them: an optimizer then sees zero gradients for them.
  void freeze(bool frozen = true) { frozen_ = frozen; }
  void unfreeze() { frozen_ = false; }
  bool frozen() const { return frozen_; }
  void bake(const std::vector<int>& grid, Device device = Device::cpu) {
    freeze();
    TapeT<S> tape;
    (void)begin(tape, grid, device);
  }
  // How many times the learned tables were computed (the cache's misses and every forward with gradients).
  std::uint64_t table_computations() const { return table_computations_; }

  PositionEncoding<S>& encoding() { return *pe_; }
  const PositionEncoding<S>& encoding() const { return *pe_; }
  const std::vector<ParameterT<S>>& parameters() const { return params_; }
  Index num_params() const { return Index(pe_->num_params()); }

 private:
  EncodingVars<S> record(TapeT<S>& tape, Device device) {
    EncodingVars<S> e;
    if (!pe_->rotary()) return e;
    const int d = pe_->geometry().head_dim, b = pe_->block(), sets = pe_->num_sets();
    const Shape ts{pe_->table_rows(), d / b, b, b}, xs{sets, d, d};
    const bool learned = pe_->learnable();
    if (!learned) {  // fixed frequencies: the tables change with the positions only
      if (!fixed_tables_.defined() || fixed_version_ != pe_->positions_version() || fixed_tables_.device() != device) {
        fixed_tables_ = TensorT<S>(ts, device);
        compute_tables(fixed_tables_);
        fixed_version_ = pe_->positions_version();
      }
      e.tables = VarT<S>(fixed_tables_);
      return e;
    }
    if (frozen_ || !tape.grad_enabled() || !params_.front().requires_grad()) {  // constants: the cache
      refresh_cache(ts, xs, device);
      e.tables = VarT<S>(cached_tables_);
      if (pe_->has_transforms()) e.transforms = VarT<S>(cached_transforms_);
      return e;
    }
    e.tables = tape.output_on(device, ts, params_.front());
    compute_tables(e.tables.value());
    ++table_computations_;
    if (pe_->has_transforms()) {
      e.transforms = tape.output_on(device, xs, params_.front());
      std::vector<S> host(std::size_t(xs.numel()));
      pe_->compute_transforms(host);
      e.transforms.value().copy_from(TensorT<S>::wrap(host.data(), xs));
    }
    if (e.tables.requires_grad()) {
      PositionEncoding<S>* pe = pe_.get();
      // The generators and positions this forward used (on the device), for the op's backward there; only the
      // generators' gradient (a few kB) comes back to the host, where the encoding's parameters live.
      tape.push([pe, gt = e.tables.grad_ref(), gx = e.transforms.grad_ref(), xs, device, sh = table_shape(),
                 gens = gens_, pos = positions_] {
        const S* dt = gt.get();
        const S* dx = gx.get();
        if (!dt && !dx) return;
        const Shape gs{Index(sh.num_generators())};
        TensorT<S> dgens = TensorT<S>::zeros(gs, device);
        if (dt) LIERE_DISPATCH(S, device, rotation_table_backward, gens.data(), pos.data(), dt, dgens.data(), sh);
        if (!dgens.on_host()) dgens = dgens.to(Device::cpu);
        TensorT<S> dxh;
        if (dx) dxh = TensorT<S>::wrap(const_cast<S*>(dx), xs, device).to(Device::cpu);
        pe->generators_backward(std::span<const S>(dgens.data(), std::size_t(gs.numel())),
                                dx ? std::span<const S>(dxh.data(), std::size_t(xs.numel())) : std::span<const S>());
      });
    }
    return e;
  }
  RotationTableShape table_shape() const {
    return {pe_->num_sets(), pe_->geometry().pos_dim, pe_->rows_per_set(), pe_->geometry().head_dim, pe_->block()};
  }
  // The tables into t by the backend's op on t's device (backend/cpu/rotation_table.hpp, cuda/rotation_table.cu),
  // from the encoding's effective generators and positions: those (a few kB) are copied into gens_ and positions_
  // on the device, the tables themselves are made there and never cross the bus.
  void compute_tables(const TensorT<S>& t) {
    const Device dev = t.device();
    const RotationTableShape sh = table_shape();
    const std::span<const S> g = pe_->table_generators();
    check_finite(g, sh);
    const Shape gs{Index(g.size())};
    gens_ = TensorT<S>(gs, dev);  // a fresh buffer: a pending backward keeps the one of its forward
    gens_.copy_from(TensorT<S>::wrap(const_cast<S*>(g.data()), gs));
    if (!positions_.defined() || positions_device_ != dev || positions_of_ != pe_->positions_version()) {
      const std::vector<S>& p = pe_->rotated_positions();
      const Shape ps{Index(p.size())};
      positions_ = TensorT<S>(ps, dev);
      positions_.copy_from(TensorT<S>::wrap(const_cast<S*>(p.data()), ps));
      positions_device_ = dev;
      positions_of_ = pe_->positions_version();
    }
    LIERE_DISPATCH(S, dev, rotation_table_forward, gens_.data(), positions_.data(), t.data(), sh);
  }

  // NaN or Inf in a generator stops the step here, naming the layer and head, on every device: the generators are
  // on the host before they are copied, so the check costs one pass over a few kB and no device synchronisation.
  void check_finite(std::span<const S> g, const RotationTableShape& sh) const {
    const std::int64_t bad = cpu::rotation_table_nonfinite(g.data(), sh);
    if (bad < 0) return;
    const std::int64_t per_set = sh.num_generators() / sh.sets;
    const int set = int(bad / per_set);
    const int axis = int((bad % per_set) / (std::int64_t(sh.num_blocks()) * sh.coords_per_block()));
    const PEGeometry& geo = pe_->geometry();
    int layer = -1, head = -1;
    for (int l = 0; l < geo.layers && layer < 0; ++l)
      for (int h = 0; h < geo.heads; ++h)
        if (pe_->set_of(l, h) == set) {
          layer = l;
          head = h;
          break;
        }
    LIERE_ENSURE(false, "position encoding " << pe_->config().info().name << ": a generator of layer " << layer
                                             << ", head " << head << " (parameter set " << set << ", axis " << axis
                                             << ") is " << (std::isnan(double(g[std::size_t(bad)])) ? "NaN" : "infinite")
                                             << ": the training diverged (lower the learning rate or clip gradients)");
  }

  // The learned tables for a forward without gradients: recomputed when the parameter values, the positions or
  // the device differ from those of the cached ones.
  void refresh_cache(const Shape& ts, const Shape& xs, Device device) {
    const std::span<const S> now = pe_->params();
    const bool same = cached_tables_.defined() && cached_device_ == device &&
                      cached_positions_ == pe_->positions_version() && cached_tables_.shape() == ts &&
                      std::equal(now.begin(), now.end(), cached_params_.begin(), cached_params_.end());
    if (same) return;
    cached_tables_ = TensorT<S>(ts, device);
    compute_tables(cached_tables_);
    ++table_computations_;
    if (pe_->has_transforms()) {
      std::vector<S> host(std::size_t(xs.numel()));
      pe_->compute_transforms(host);
      cached_transforms_ = TensorT<S>(xs, device);
      cached_transforms_.copy_from(TensorT<S>::wrap(host.data(), xs));
    }
    cached_params_.assign(now.begin(), now.end());
    cached_positions_ = pe_->positions_version();
    cached_device_ = device;
  }

  std::unique_ptr<PositionEncoding<S>> pe_;
  std::vector<ParameterT<S>> params_;
  bool frozen_ = false;
  TensorT<S> cached_tables_, cached_transforms_;
  std::vector<S> cached_params_;
  std::uint64_t cached_positions_ = 0;
  Device cached_device_ = Device::cpu;
  std::uint64_t table_computations_ = 0;
  std::vector<int> grid_;
  TensorT<S> fixed_tables_;  // fixed kinds: the tables of positions version fixed_version_
  TensorT<S> gens_, positions_;  // what the last table computation read, on its device
  Device positions_device_ = Device::cpu;
  std::uint64_t positions_of_ = 0;
  std::uint64_t fixed_version_ = 0;
};

using PositionEncodingModule = PositionEncodingModuleT<float>;

// Explicit instances in liere::compiled (nn/engine_float.cpp, nn/engine_double.cpp) for the programs that link it:
// they do not compile these members again (CMakeLists.txt, "liere::compiled"); LIERE_COUNT_FLOPS builds compile their own.
#if defined(LIERE_PRECOMPILED) && !defined(LIERE_COUNT_FLOPS)
extern template class PositionEncodingModuleT<float>;
extern template class PositionEncodingModuleT<double>;
#endif

}  // namespace liere::nn
