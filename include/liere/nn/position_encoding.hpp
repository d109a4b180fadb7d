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
// The tables are computed on the host (each block's exponential in double, pe/liere.hpp) and copied to the
// model's device when it is not the CPU. Fixed encodings (visionllama, rope-1d) keep their tables until the
// positions change.
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>
#include <liere/pe/encoding.hpp>
#include <memory>
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
      tape.push([gx = x.grad_ref(), gy = y.grad_ref(), pe, R, M, rs, dev] {
        const S* dy = gy.get();
        if (!dy) return;
        TensorT<S> drows = TensorT<S>::zeros(rs, dev);
        S* dx = gx.acc();
        LIERE_DISPATCH(S, dev, add_broadcast_backward, dy, dx, drows.data(), R, M);
        pe->absolute_rows_backward(drows.on_host() ? drows.data() : drows.to(Device::cpu).data());
      });
    }
    return y;
  }

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
    e.tables = tape.output_on(device, ts, params_.front());
    compute_tables(e.tables.value());
    if (pe_->has_transforms()) {
      e.transforms = tape.output_on(device, xs, params_.front());
      std::vector<S> host(std::size_t(xs.numel()));
      pe_->compute_transforms(host);
      e.transforms.value().copy_from(TensorT<S>::wrap(host.data(), xs));
    }
    if (e.tables.requires_grad()) {
      PositionEncoding<S>* pe = pe_.get();
      tape.push([pe, gt = e.tables.grad_ref(), gx = e.transforms.grad_ref(), ts, xs, d, device] {
        const S* dt = gt.get();
        const S* dx = gx.get();
        if (!dt && !dx) return;
        TensorT<S> dth = dt ? TensorT<S>::wrap(const_cast<S*>(dt), ts, device).to(Device::cpu) : TensorT<S>::zeros(ts);
        TensorT<S> dxh;
        if (dx) dxh = TensorT<S>::wrap(const_cast<S*>(dx), xs, device).to(Device::cpu);
        pe->tables_backward({dth.data(), int(ts[0]), d, int(ts[2])},
                            dx ? std::span<const S>(dxh.data(), std::size_t(xs.numel())) : std::span<const S>());
      });
    }
    return e;
  }
  // The tables into t (host memory directly; through a host copy for a device).
  void compute_tables(const TensorT<S>& t) {
    const int d = pe_->geometry().head_dim, b = pe_->block();
    if (t.on_host()) {
      pe_->compute_tables({t.data(), int(t.dim(0)), d, b});
      return;
    }
    TensorT<S> host(t.shape());
    pe_->compute_tables({host.data(), int(t.dim(0)), d, b});
    t.copy_from(host);
  }

  std::unique_ptr<PositionEncoding<S>> pe_;
  std::vector<ParameterT<S>> params_;
  std::vector<int> grid_;
  TensorT<S> fixed_tables_;  // fixed kinds: the tables of positions version fixed_version_
  std::uint64_t fixed_version_ = 0;
};

using PositionEncodingModule = PositionEncodingModuleT<float>;

}  // namespace liere::nn
