// liere/nn/position_encoding.hpp — a position encoding (pe/encoding.hpp) as a module of the engine.
//
// The encoding's parameter blocks ("pe.generators", "pe.freqs", "pe.absolute", …) are registered in the
// model's ParamsT as parameters over the encoding's own storage, so the optimizer, gradient clipping,
// zero_grad and checkpoints treat them like every other parameter.
//
// Per forward pass:
//   pe.begin(tape, grid)      positions for this grid, rotation tables for every parameter set; when the
//                             encoding is learned and gradients are on, pushes the closure that turns the
//                             table gradients into parameter gradients. It is pushed first, so it runs last
//                             in the backward, after every attention layer has accumulated its table gradients.
//   pe.add_to_tokens(tape, x) the absolute encoding (identity for the others)
//   nn::attention(…, pe, layer, …) in each layer
#pragma once

#include <liere/autodiff/ops.hpp>
#include <liere/nn/module.hpp>
#include <liere/pe/encoding.hpp>
#include <memory>
#include <vector>

namespace liere::nn {

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

  // Positions for this patch grid and fresh rotation tables; see the header comment.
  void begin(TapeT<S>& tape, const std::vector<int>& grid) {
    if (grid != grid_) {
      pe_->set_grid(grid);
      grid_ = grid;
    }
    pe_->prepare();
    if (pe_->rotary() && pe_->config().info().learnable && tape.grad_enabled() && !params_.empty()) {
      PositionEncoding<S>* pe = pe_.get();
      tape.push([pe] { pe->backward(); });
    }
  }
  // Arbitrary coordinates instead of a grid (rotary encodings): (N, P) for the batch or (B, N, P).
  void begin(TapeT<S>& tape, std::span<const double> positions, int batch) {
    pe_->set_positions(positions, batch);
    grid_.clear();
    pe_->prepare();
    if (pe_->rotary() && pe_->config().info().learnable && tape.grad_enabled() && !params_.empty()) {
      PositionEncoding<S>* pe = pe_.get();
      tape.push([pe] { pe->backward(); });
    }
  }

  // x (B, T, C) → x + the absolute table (interpolated to the grid); x itself for the other encodings.
  VarT<S> add_to_tokens(TapeT<S>& tape, const VarT<S>& x) const {
    if (!pe_->additive()) return x;
    const Shape& xs = x.shape();
    LIERE_ENSURE(xs.rank() == 3 && xs[1] == pe_->tokens() && xs[2] == pe_->geometry().embed_dim,
                 "absolute encoding: tokens " << xs << " but the encoding expects (B, " << pe_->tokens() << ", "
                                              << pe_->geometry().embed_dim << ")");
    const int B = int(xs[0]);
    VarT<S> y = tape.output(xs, x, params_.front());
    std::copy(x.data(), x.data() + x.numel(), y.data());
    pe_->add_to_tokens(y.data(), B);
    if (y.requires_grad()) {
      PositionEncoding<S>* pe = pe_.get();
      tape.push([gx = x.grad_ref(), gy = y.grad_ref(), pe, B, n = x.numel()] {
        const S* dy = gy.get();
        if (!dy) return;
        if (S* dx = gx.acc())
          for (Index i = 0; i < n; ++i) dx[i] += dy[i];
        pe->add_to_tokens_backward(dy, B);
      });
    }
    return y;
  }

  PositionEncoding<S>& encoding() { return *pe_; }
  const PositionEncoding<S>& encoding() const { return *pe_; }
  const std::vector<ParameterT<S>>& parameters() const { return params_; }
  Index num_params() const { return Index(pe_->num_params()); }

 private:
  std::unique_ptr<PositionEncoding<S>> pe_;
  std::vector<ParameterT<S>> params_;
  std::vector<int> grid_;
};

using PositionEncodingModule = PositionEncodingModuleT<float>;

}  // namespace liere::nn
