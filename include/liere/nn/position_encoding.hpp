// liere/nn/position_encoding.hpp — a position encoding (pe/encoding.hpp) as a module of the engine.
//
// The encoding's parameter blocks ("pe.generators", "pe.freqs", "pe.absolute", …) are registered in the
// model's ParamsT, so the optimizer, gradient clipping, zero_grad and checkpoints treat them like every other
// parameter. Two kinds of registration:
//   * kinds whose effective generators are their parameters (liere at every block size, rope-mixed,
//     rope-mixed-official, liere-commute: pe/kinds/generators.hpp) and the absolute table register that group as a
//     parameter of its own, which ParamsT::to moves to the model's device with the others. The tables op reads it
//     where it lives and its backward adds into its gradient there (the absolute table on the training grid: added
//     to the tokens and summed into its gradient there): on a GPU no copy and no host work in the step (the
//     optimizer updates it with the other parameters on the device). The encoding's host copy
//     (encoding().params(), .grads()) is brought up to date when encoding() is called, and what is written through
//     it reaches the parameter at the next begin() (the elements that differ from what encoding() handed out);
//   * the other kinds (comrope, STRING) register parameters over the encoding's own storage (ParameterT::wrap),
//     which stay on the host: the effective generators and the transforms are made there from them (a few kB,
//     copied to the device per step) and their gradients come back there.
//
// Per forward pass:
//   enc = pe.begin(tape, grid)   positions for this grid and an op on the tape whose outputs are the rotation
//                                tables of every parameter set (and STRING's transforms): Vars like any other,
//                                computed from the parameters; their gradients, accumulated by every attention
//                                layer's backward, go back to the parameters in this op's backward
//   pe.add_to_tokens(tape, x)    the absolute encoding (identity for the others)
//   nn::attention(…, &pe.layout(), enc, layer, …) in each layer
// The tables are computed by the backend's op on the model's device (LIERE_DISPATCH rotation_table_forward /
// rotation_table_backward: backend/cpu/rotation_table.hpp, backend/cuda/rotation_table.cu) from the generators
// and the positions (copied to the device when they change). Fixed encodings (visionllama, rope-1d) keep their
// tables until the positions change.
//
// NaN or Inf in a generator stops the step with a message naming the layer and head, and the initial values or the
// training as the cause (the initial values before any update reached the parameters): before the tables are
// computed where the generators are on the host; on a device, whose values the host reads only by waiting for it,
// the tables come out NaN and check_generators() (which the trainer calls when the loss is not finite) names them.
//
// Caching (docs/api.md, "Inference: cached and baked tables"). A forward that needs no gradient for the encoding
// (under tape.no_grad(), or after freeze()) reuses the tables (and STRING's transforms) of the previous such
// forward when the parameters, the positions and the device are the same. "The same parameters" is checked on
// their values (a copy taken when the tables were computed, compared bit for bit: a few hundred kB at most, read
// from the device where they live there), so an optimizer step, a checkpoint load or a write through
// encoding().params() all invalidate the cache, with no counter anyone could forget to bump. A forward that
// records gradients computes its tables fresh, as before.
//   freeze()       the encoding's parameters become constants: no gradient reaches them, their tables are cached
//                  from one forward to the next, even while the rest of the model trains; unfreeze() undoes it.
//   bake(grid)     freeze() and compute the tables of this grid now, so that the first inference pays nothing.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>
#include <liere/pe/encoding.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
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
      : pe_(std::make_unique<PositionEncoding<S>>(cfg, geo, seed)),
        direct_(pe_->generators_are_params() || (pe_->additive() && pe_->groups().size() == 1)) {
    for (std::size_t i = 0; i < pe_->groups().size(); ++i) {
      const auto& g = pe_->groups()[i];
      Shape shape;
      for (auto d : g.shape) shape.push_back(Index(d));
      auto v = pe_->group_values(i);
      auto gr = pe_->group_grads(i);
      ParameterT<S> p;
      if (direct_) {  // a parameter of its own, starting from the encoding's draw (see the header comment)
        p = ParameterT<S>(g.name, shape);
        p.value().copy_from(TensorT<S>::wrap(v.data(), shape));
      } else {
        p = ParameterT<S>::wrap(g.name, TensorT<S>::wrap(v.data(), shape), TensorT<S>::wrap(gr.data(), shape));
      }
      params.add(p);
      params_.push_back(p);
    }
  }

  // Positions for this patch grid and the tables op; see the header comment.
  EncodingVars<S> begin(TapeT<S>& tape, const std::vector<int>& grid, Device device = Device::cpu) {
    push_host_writes();
    if (grid != grid_) {
      pe_->set_grid(grid);
      grid_ = grid;
    }
    return record(tape, device);
  }
  // Arbitrary coordinates instead of a grid (rotary encodings): (N, P) for the batch or (B, N, P).
  EncodingVars<S> begin(TapeT<S>& tape, std::span<const double> positions, int batch, Device device = Device::cpu) {
    push_host_writes();
    pe_->set_positions(positions, batch);
    grid_.clear();
    return record(tape, device);
  }

  // x (B, T, C) → x + the absolute table (interpolated to the grid); x itself for the other encodings. On the
  // training grid the rows are the parameter itself, added by add_broadcast where it lives (its backward sums into
  // the parameter's gradient there); on other grids they are interpolated on the host from its values and copied
  // to x's device, and their gradient comes back to the host for the interpolation's backward.
  VarT<S> add_to_tokens(TapeT<S>& tape, const VarT<S>& x) const {
    if (!pe_->additive()) return x;
    const Shape& xs = x.shape();
    LIERE_ENSURE(xs.rank() == 3 && xs[1] == pe_->tokens() && xs[2] == pe_->geometry().embed_dim,
                 "absolute encoding: tokens " << xs << " but the encoding expects (B, " << pe_->tokens() << ", "
                                              << pe_->geometry().embed_dim << ")");
    const Device dev = x.device();
    const Shape rs{xs[1], xs[2]};
    const ParameterT<S>& p = params_.front();
    const bool in_place = pe_->absolute_rows_are_table() && p.device() == dev;
    TensorT<S> rows;
    if (in_place) {
      rows = p.value().view(rs);
    } else {
      const std::vector<S> table = p.value().to_vector();
      rows = TensorT<S>(rs);
      pe_->absolute_rows(table.data(), rows.data());
      if (dev != Device::cpu) rows = rows.to(dev);
    }
    VarT<S> y = tape.output(xs, x, p);
    const Index R = xs[0], M = rs.numel();
    LIERE_DISPATCH(S, dev, add_broadcast_forward, x.data(), rows.data(), y.data(), R, M);
    if (y.requires_grad()) {
      const PositionEncoding<S>* pe = pe_.get();
      // The interpolation of this forward's grid (a forward at another size before this backward replaces the
      // encoding's).
      tape.push([gx = x.grad_ref(), gy = y.grad_ref(), pe, interp = pe_->interpolation(), p, R, M, rs, dev, in_place,
                 frozen = frozen_] {
        const S* dy = gy.get();
        if (!dy) return;
        S* dx = gx.acc();
        if (frozen || in_place) {
          LIERE_DISPATCH(S, dev, add_broadcast_backward, dy, dx, frozen ? nullptr : p.grad().data(), R, M);
          return;
        }
        TensorT<S> drows = TensorT<S>::zeros(rs, dev);
        LIERE_DISPATCH(S, dev, add_broadcast_backward, dy, dx, drows.data(), R, M);
        const std::vector<S> dh = drows.to_vector();
        std::vector<S> dtable(std::size_t(p.numel()), S(0));
        pe->absolute_rows_backward(dh.data(), dtable.data(), *interp);
        accumulate_grad(p, TensorT<S>::wrap(dtable.data(), p.shape()));
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

  // The encoding with its parameters and their gradients as they are now (brought to the host for the kinds whose
  // parameter lives on the model's device: a copy, on a GPU a wait for it); writes through it reach the model at
  // the next begin().
  PositionEncoding<S>& encoding() {
    pull_to_host();
    return *pe_;
  }
  const PositionEncoding<S>& encoding() const {
    pull_to_host();
    return *pe_;
  }
  // The encoding for its layout (kind, geometry, sets, positions), without bringing the parameters' values up to
  // date: what attention takes in every forward (nn::attention reads the tables, not the parameters).
  const PositionEncoding<S>& layout() const { return *pe_; }
  // Throws the message of a non-finite generator (naming the layer and head) if the parameters hold one; reads the
  // device where they live there. The trainer calls it when the loss is not finite.
  void check_generators() const {
    if (!pe_->rotary() || !pe_->learnable()) return;
    if (direct_) check_finite(params_.front().value().to_vector(), table_shape());
    else check_finite(pe_->table_generators(), table_shape());
  }
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
    if (e.tables.requires_grad() && direct_) {
      // The generators' gradient added into the parameter's where it lives: in place on its device.
      tape.push([p = params_.front(), gt = e.tables.grad_ref(), device, sh = table_shape(), gens = gens_,
                 pos = positions_] {
        const S* dt = gt.get();
        if (!dt) return;
        if (p.device() == device) {
          LIERE_DISPATCH(S, device, rotation_table_backward, gens.data(), pos.data(), dt, p.grad().data(), sh);
          return;
        }
        const TensorT<S> dgens = TensorT<S>::zeros(Shape{p.numel()}, device);
        LIERE_DISPATCH(S, device, rotation_table_backward, gens.data(), pos.data(), dt, dgens.data(), sh);
        accumulate_grad(p, dgens);
      });
    } else if (e.tables.requires_grad()) {
      PositionEncoding<S>* pe = pe_.get();
      // The generators and positions this forward used (on the device), for the op's backward there; only the
      // generators' gradient (a few kB) comes back to the host, where the encoding's parameters live, and goes to
      // them through the parameter values of this forward (a copy: ComRoPE-LD's chain and STRING's Cayley map read
      // them).
      tape.push([pe, at = std::make_shared<const ParamStore<S>>(pe_->param_store().values_only()), gt = e.tables.grad_ref(),
                 gx = e.transforms.grad_ref(), xs, device, sh = table_shape(), gens = gens_, pos = positions_] {
        const S* dt = gt.get();
        const S* dx = gx.get();
        if (!dt && !dx) return;
        const Shape gs{Index(sh.num_generators())};
        TensorT<S> dgens = TensorT<S>::zeros(gs, device);
        if (dt) LIERE_DISPATCH(S, device, rotation_table_backward, gens.data(), pos.data(), dt, dgens.data(), sh);
        if (!dgens.on_host()) dgens = dgens.to(Device::cpu);
        TensorT<S> dxh;
        if (dx) dxh = TensorT<S>::wrap(const_cast<S*>(dx), xs, device).to(Device::cpu);
        pe->generators_backward(*at, std::span<const S>(dgens.data(), std::size_t(gs.numel())),
                                dx ? std::span<const S>(dxh.data(), std::size_t(xs.numel())) : std::span<const S>());
      });
    }
    return e;
  }
  RotationTableShape table_shape() const {
    return {pe_->num_sets(), pe_->geometry().pos_dim, pe_->rows_per_set(), pe_->geometry().head_dim, pe_->block()};
  }
  // The tables into t by the backend's op on t's device (backend/cpu/rotation_table.hpp, cuda/rotation_table.cu),
  // from the generators and positions in gens_ and positions_ on that device: the parameter itself where it lives
  // there (direct kinds), else a copy of the encoding's effective generators (a few kB); the positions are copied
  // when they change. The tables themselves are made there and never cross the bus.
  void compute_tables(const TensorT<S>& t) {
    const Device dev = t.device();
    const RotationTableShape sh = table_shape();
    const Shape gs{Index(sh.num_generators())};
    if (direct_ && params_.front().device() == dev) {
      const TensorT<S>& v = params_.front().value();
      if (v.on_host()) check_finite(std::span<const S>(v.data(), std::size_t(v.numel())), sh);
      // A copy on the parameter's device (for LieRE-64 580 kB; on a GPU a copy queued on the stream, no wait): a
      // pending backward takes the generators of its forward even where the parameter changes before it runs (a
      // write to it, a load, a write through encoding() that a forward without gradients applies).
      gens_ = v.view(gs).clone();
    } else {
      std::vector<S> direct_host;
      if (direct_) direct_host = params_.front().value().to_vector();
      const std::span<const S> g = direct_ ? std::span<const S>(direct_host) : pe_->table_generators();
      check_finite(g, sh);
      gens_ = TensorT<S>(gs, dev);  // a fresh buffer: a pending backward keeps the one of its forward
      gens_.copy_from(TensorT<S>::wrap(const_cast<S*>(g.data()), gs));
    }
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

  // NaN or Inf in a generator stops the step here, naming the layer and head: a pass over generators on the host
  // (before they are copied to a device, or where a direct kind's parameter lives on the host). The cause it names:
  // the initial values where no tables were made from the parameters yet (so no update has reached them), else the
  // training.
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
    // No tables made yet: no update has reached the parameters (an --init past S's range stops here too).
    const PEInit& init = pe_->config().init;
    std::ostringstream cause;
    if (table_computations_ == 0)
      cause << " before any update (the first forward pass): the initial values are not finite"
            << (init.kind == PEInit::Kind::default_for_encoding ? "" : " (--init " + init.str() + ")");
    else
      cause << ": the training diverged (lower the learning rate or clip gradients)";
    LIERE_ENSURE(false, "position encoding " << pe_->config().info().name << ": a generator of layer " << layer
                                             << ", head " << head << " (parameter set " << set << ", axis " << axis
                                             << ") is " << (std::isnan(double(g[std::size_t(bad)])) ? "NaN" : "infinite")
                                             << cause.str());
  }

  // The learned tables for a forward without gradients: recomputed when the parameter values, the positions or
  // the device differ from those of the cached ones.
  void refresh_cache(const Shape& ts, const Shape& xs, Device device) {
    std::vector<S> direct_now;  // a direct kind's parameter, read from its device
    if (direct_) direct_now = params_.front().value().to_vector();
    const std::span<const S> now = direct_ ? std::span<const S>(direct_now) : pe_->params();
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

  // p's gradient += d (p.numel() values, on any device: copied to p's first where it lives elsewhere).
  static void accumulate_grad(const ParameterT<S>& p, const TensorT<S>& d) {
    const TensorT<S> here = d.device() == p.device() ? d : d.to(p.device());
    LIERE_DISPATCH(S, p.device(), accumulate, here.data(), p.grad().data(), p.numel());
  }
  // Direct kinds: the encoding's host copy from the parameter (values and gradient), and what was handed out, so
  // that push_host_writes() can tell what was written through encoding() since. What was written through an earlier
  // encoding() goes to the parameter first.
  void pull_to_host() const {
    if (!direct_) return;
    push_host_writes();
    const ParameterT<S>& p = params_.front();
    pulled_values_ = p.value().to_vector();
    pulled_grads_ = p.grad().to_vector();
    std::copy(pulled_values_.begin(), pulled_values_.end(), pe_->params().begin());
    std::copy(pulled_grads_.begin(), pulled_grads_.end(), pe_->grads().begin());
    pulled_ = true;
  }
  // What was written through encoding() since it was handed out — the elements that differ, bit for bit, from what
  // it handed out — goes into the parameter; every other element keeps the parameter's value (an optimizer step
  // since then included). Two comparisons of the host copy per begin() once encoding() has been called.
  void push_host_writes() const {
    if (!pulled_) return;
    patch(params_.front().value(), pe_->params(), pulled_values_);
    patch(params_.front().grad(), pe_->grads(), pulled_grads_);
  }
  static void patch(const TensorT<S>& t, std::span<const S> host, std::vector<S>& handed) {
    if (std::memcmp(host.data(), handed.data(), host.size_bytes()) == 0) return;
    std::vector<S> now = t.to_vector();
    for (std::size_t i = 0; i < host.size(); ++i)
      if (std::memcmp(&host[i], &handed[i], sizeof(S)) != 0) now[i] = host[i];
    t.copy_from(TensorT<S>::wrap(now.data(), t.shape()));
    handed.assign(host.begin(), host.end());
  }

  std::unique_ptr<PositionEncoding<S>> pe_;
  // params_[0] is a parameter of its own: the kind's generators are its parameters, or the absolute table
  bool direct_ = false;
  mutable bool pulled_ = false;
  mutable std::vector<S> pulled_values_, pulled_grads_;  // what encoding() last handed out (direct kinds)
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
