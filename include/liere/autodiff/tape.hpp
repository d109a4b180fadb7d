// liere/autodiff/tape.hpp — reverse-mode automatic differentiation with a tape of hand-written backwards.
//
// Three types:
//   VarT<S>        a value (TensorT) and, when it requires a gradient, a gradient slot. A handle: copies share.
//   ParameterT<S>  a VarT with a name and a persistent gradient that accumulates until zero_grad().
//   TapeT<S>       the context of one forward/backward pass: the list of backward closures pushed by the ops
//                  (autodiff/ops.hpp), the grad/no-grad switch, the training flag and the dropout Rng.
//
// An op computes its output with a forward kernel and, when the output requires a gradient, pushes a
// closure that calls the matching backward kernel. The closure captures exactly what the backward needs:
// the saved tensors (by handle, which keeps them alive) and GradRefs — small handles on gradient slots:
//   gy.get()  the gradient that arrived at the output, or nullptr when none did (the closure returns);
//   gx.acc()  the buffer to accumulate (+=) the input's gradient into, created zeroed on first use from the
//             buffer pool; nullptr when that input needs no gradient (the kernel skips it).
//   gx.acc_fresh(fresh)  the same, but a new buffer is left uninitialised and fresh = true: the kernel then
//             writes instead of accumulating (linear's dx, GELU, dropout, residual add do this, which spares
//             zero-filling most activation gradients).
// tape.backward(loss) seeds dloss = 1 and runs the closures newest first, dropping each one after it ran:
// what only that closure held (saved activations, the output's gradient) goes back to the buffer pool at
// once, so memory falls during the backward pass as in PyTorch, and the next step reuses the same blocks.
//
// Gradients of parameters accumulate across backward passes until zero_grad(); activation gradients live
// only as long as the closures and Vars that refer to them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <liere/core/config.hpp>
#include <liere/backend/cpu/elementwise.hpp>
#include <liere/backend/dispatch.hpp>
#include <liere/core/rng.hpp>
#include <liere/tensor/tensor.hpp>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace liere {

// ---- gradient slots ------------------------------------------------------------------------------------
// The gradient of one Var: created lazily (zeroed) the first time a backward accumulates into it. A slot
// may be a reshaped view of another slot (VarT::reshape), sharing its buffer.
template <class S>
class GradSlot {
 public:
  explicit GradSlot(const Shape& shape, Device device = Device::cpu) : shape_(shape), device_(device) {}
  GradSlot(std::shared_ptr<GradSlot> base, const Shape& shape)
      : shape_(shape), device_(base->device_), base_(std::move(base)) {}

  const Shape& shape() const { return shape_; }
  bool allocated() const { return base_ ? base_->allocated() : tensor_.defined(); }
  // The buffer to accumulate into (zeroed when created).
  S* acc() {
    if (base_) return base_->acc();
    if (!tensor_.defined()) tensor_ = TensorT<S>::zeros(shape_, device_);
    return tensor_.data();
  }
  // The buffer and whether it was just created *uninitialised* (fresh): the caller must then write every
  // element instead of accumulating — which saves zero-filling buffers whose first writer can assign.
  S* acc_fresh(bool& fresh) {
    if (base_) return base_->acc_fresh(fresh);
    fresh = !tensor_.defined();
    if (fresh) tensor_ = TensorT<S>(shape_, device_);
    return tensor_.data();
  }
  // The gradient, or nullptr when nothing has been accumulated yet.
  S* get() const { return base_ ? base_->get() : tensor_.data(); }
  TensorT<S> tensor() {
    acc();
    return base_ ? base_->tensor().view(shape_) : tensor_;
  }
  // The slot that owns the buffer (this one, or the slot a reshaped view refers to).
  const GradSlot* root() const { return base_ ? base_->root() : this; }
  // For parameters: a persistent buffer.
  void set(TensorT<S> t) {
    ensure_same_shape(t.shape(), shape_, "GradSlot::set");
    tensor_ = std::move(t);
  }

 private:
  Shape shape_;
  Device device_;
  TensorT<S> tensor_;
  std::shared_ptr<GradSlot> base_;
};

template <class S>
class GradRef {
 public:
  GradRef() = default;
  explicit GradRef(std::shared_ptr<GradSlot<S>> slot) : slot_(std::move(slot)) {}
  explicit operator bool() const { return bool(slot_); }
  // Where to accumulate this gradient; nullptr when it is not wanted.
  S* acc() const { return slot_ ? slot_->acc() : nullptr; }
  // Like acc(), but a newly created buffer is left uninitialised and `fresh` is set: the kernel must then
  // overwrite all of it (the `overwrite` arguments of the backward kernels) instead of accumulating.
  S* acc_fresh(bool& fresh) const {
    fresh = false;
    return slot_ ? slot_->acc_fresh(fresh) : nullptr;
  }
  // The gradient that has arrived; nullptr when none (or when it is not tracked).
  const S* get() const { return slot_ ? slot_->get() : nullptr; }

 private:
  std::shared_ptr<GradSlot<S>> slot_;
};

template <class S>
class TapeT;

// ---- Var -------------------------------------------------------------------------------------------------
template <class S>
class VarT {
 public:
  VarT() = default;
  explicit VarT(TensorT<S> value, bool requires_grad = false) : node_(std::make_shared<Node>()) {
    LIERE_ENSURE(value.defined(), "Var: the value tensor is undefined");
    node_->value = std::move(value);
    if (requires_grad) node_->grad = std::make_shared<GradSlot<S>>(node_->value.shape(), node_->value.device());
  }

  bool defined() const { return node_ != nullptr; }
  const TensorT<S>& value() const {
    check();
    return node_->value;
  }
  const Shape& shape() const { return value().shape(); }
  Device device() const { return value().device(); }
  Index numel() const { return value().numel(); }
  S* data() const { return value().data(); }
  // The single value of a scalar (e.g. the loss), copied to the host.
  S item() const {
    LIERE_ENSURE(numel() == 1, "Var::item: needs a single value, shape is " << shape());
    return value().on_host() ? data()[0] : value().to_vector()[0];
  }

  bool requires_grad() const { return node_ && node_->grad; }
  GradRef<S> grad_ref() const { return GradRef<S>(node_ ? node_->grad : nullptr); }
  // Whether a gradient has arrived (or, for a parameter, exists).
  bool has_grad() const { return requires_grad() && node_->grad->allocated(); }
  // The gradient tensor (created zeroed if nothing arrived).
  TensorT<S> grad() const {
    LIERE_ENSURE(requires_grad(), "Var::grad: " << label() << " does not require a gradient");
    return node_->grad->tensor();
  }

  // The same value seen with another shape (no copy, no tape entry): its gradient is a view of this
  // Var's gradient.
  VarT reshape(const Shape& shape) const {
    VarT v;
    v.node_ = std::make_shared<Node>();
    v.node_->value = value().view(shape);
    if (node_->grad) v.node_->grad = std::make_shared<GradSlot<S>>(node_->grad, shape);
    v.node_->name = node_->name;
    return v;
  }

  const std::string& name() const {
    check();
    return node_->name;
  }
  // "'blocks.0.mlp.fc1.weight' (192, 768)" or "a value of shape (8, 65, 192)": for error messages.
  std::string label() const {
    if (!node_) return "an undefined Var";
    if (!node_->name.empty()) return "'" + node_->name + "' " + node_->value.shape().str();
    return "a value of shape " + node_->value.shape().str();
  }

 protected:
  struct Node {
    TensorT<S> value;
    std::shared_ptr<GradSlot<S>> grad;  // null: no gradient
    std::string name;
  };
  void check() const { LIERE_ENSURE(node_ != nullptr, "Var: undefined (default-constructed) Var used"); }
  std::shared_ptr<Node> node_;
  friend class TapeT<S>;
};

// ---- Parameter -------------------------------------------------------------------------------------------
// A trainable tensor: value and gradient are allocated once (zeros) and persist across steps.
template <class S>
class ParameterT : public VarT<S> {
 public:
  ParameterT() = default;
  ParameterT(std::string name, const Shape& shape, Device device = Device::cpu) {
    this->node_ = std::make_shared<typename VarT<S>::Node>();
    this->node_->value = TensorT<S>::zeros(shape, device);
    this->node_->grad = std::make_shared<GradSlot<S>>(shape, device);
    this->node_->grad->set(TensorT<S>::zeros(shape, device));
    this->node_->name = std::move(name);
  }
  // A parameter over storage owned elsewhere (value and gradient buffers of the same shape that outlive it),
  // e.g. a position encoding's parameter block: the optimizer and checkpoints then update it in place.
  static ParameterT wrap(std::string name, TensorT<S> value, TensorT<S> grad) {
    LIERE_ENSURE(value.defined() && grad.defined(), "Parameter::wrap: '" << name << "' needs value and gradient buffers");
    ensure_same_shape(grad.shape(), value.shape(), "Parameter::wrap: gradient vs value");
    LIERE_ENSURE(grad.device() == value.device(), "Parameter::wrap: '" << name << "' has its value on "
                                                                       << to_string(value.device()) << " and its gradient on "
                                                                       << to_string(grad.device()));
    ParameterT p;
    p.node_ = std::make_shared<typename VarT<S>::Node>();
    p.node_->value = std::move(value);
    p.node_->grad = std::make_shared<GradSlot<S>>(p.node_->value.shape(), p.node_->value.device());
    p.node_->grad->set(std::move(grad));
    p.node_->name = std::move(name);
    return p;
  }
  void zero_grad() const { this->grad().zero(); }

  // Moves value and gradient to `device` (a copy; every handle of this parameter sees the move). A parameter
  // over storage owned elsewhere (wrap) stays where it is: its owner reads it there (ParamsT::to skips it).
  void move_to(Device device) const {
    if (this->device() == device) return;
    TensorT<S> v = this->node_->value.to(device);
    TensorT<S> g = this->node_->grad->tensor().to(device);
    this->node_->value = v;
    this->node_->grad = std::make_shared<GradSlot<S>>(v.shape(), device);
    this->node_->grad->set(g);
  }
  bool owns_storage() const { return this->value().owns_storage(); }
};

// Calls f(device, xs, ns, count) for each run of consecutive parameters on one device, xs[k] and ns[k] the gradient
// and the size of its k-th parameter: the arguments of the multi-tensor ops (fill_many, scale_many,
// sum_squares_many), called once per device instead of once per parameter (on a GPU: a launch per 24 parameters).
template <class S, class F>
void for_grad_runs(const std::vector<ParameterT<S>>& params, F f) {
  std::vector<S*> xs;
  std::vector<Index> ns;
  for (std::size_t i = 0; i < params.size();) {
    const Device dev = params[i].device();
    xs.clear();
    ns.clear();
    for (; i < params.size() && params[i].device() == dev; ++i) {
      xs.push_back(params[i].grad().data());
      ns.push_back(params[i].numel());
    }
    f(dev, xs.data(), ns.data(), int(xs.size()));
  }
}

// Zeroes the gradients of `params`.
template <class S>
void zero_grads(const std::vector<ParameterT<S>>& params) {
  for_grad_runs(params, [](Device dev, S* const* xs, const Index* ns, int count) {
    LIERE_DISPATCH(S, dev, fill_many, xs, ns, count, S(0));
  });
}

// ---- Tape ------------------------------------------------------------------------------------------------
template <class S>
class TapeT {
 public:
  using Backward = std::function<void()>;

  TapeT() = default;
  explicit TapeT(std::uint64_t seed) : rng_(seed) {}
  TapeT(const TapeT&) = delete;
  TapeT& operator=(const TapeT&) = delete;

  // The output of an op: uninitialised pooled storage; it requires a gradient when gradients are enabled
  // and one of the inputs requires one (undefined inputs, e.g. a missing bias, are ignored).
  // The output lives on the device of the first input.
  template <class V0, class... V>
  VarT<S> output(const Shape& shape, const V0& input0, const V&... inputs) const {
    const Device d = input0.device();
    VarT<S> y{TensorT<S>(shape, d)};
    if (grad_enabled_ && (input0.requires_grad() || (inputs.requires_grad() || ...)))
      y.node_->grad = std::make_shared<GradSlot<S>>(shape, d);
    if (watch_ && grad_enabled_) note_inputs(input0, inputs...);
    return y;
  }
  // The same on an explicit device (an op whose inputs live elsewhere, e.g. the encoding's tables computed on the
  // host from host parameters for a model on cuda).
  template <class V0, class... V>
  VarT<S> output_on(Device d, const Shape& shape, const V0& input0, const V&... inputs) const {
    VarT<S> y{TensorT<S>(shape, d)};
    if (grad_enabled_ && (input0.requires_grad() || (inputs.requires_grad() || ...)))
      y.node_->grad = std::make_shared<GradSlot<S>>(shape, d);
    if (watch_ && grad_enabled_) note_inputs(input0, inputs...);
    return y;
  }
  // Appends a backward closure (call it only for an output that requires a gradient).
  void push(Backward f) { ops_.push_back(std::move(f)); }

  // dloss = 1, then every closure newest first; the tape is empty afterwards.
  void backward(const VarT<S>& loss) {
    LIERE_ENSURE(loss.defined() && loss.numel() == 1,
                 "backward: the loss must be a single value, got " << loss.label());
    backward(loss, TensorT<S>::full(loss.shape(), S(1), loss.device()));
  }
  // dy given (a vector–Jacobian product): dy is added to y's gradient, then every closure runs.
  void backward(const VarT<S>& y, const TensorT<S>& dy) {
    LIERE_ENSURE(y.requires_grad(), "backward: " << y.label()
                                                 << " does not require a gradient (no parameter in its graph, or it "
                                                    "was computed in no-grad mode)");
    ensure_same_shape(dy.shape(), y.shape(), "backward: seed gradient vs output");
    LIERE_ENSURE(dy.device() == y.device(), "backward: the seed gradient is on " << to_string(dy.device())
                                                                                << ", the output on " << to_string(y.device()));
    LIERE_DISPATCH(S, y.device(), accumulate, dy.data(), y.grad_ref().acc(), dy.numel());
    run();
  }
  // Drops every recorded closure (a forward pass whose backward is not wanted) and what they hold, and the
  // watch (below).
  void clear() {
    while (!ops_.empty()) ops_.pop_back();
    watch_.reset();
  }

  // Gradient-ready notifications, for data-parallel training: reducing a parameter's gradient across processes
  // can start while backward still runs on the layers below it. Call watch() before the forward pass. During it,
  // the tape notes for every watched parameter the first op that takes it as an input (or takes a reshaped view
  // of it): every closure that adds to its gradient was pushed by that op or a later one, so once backward has
  // run that op's closure the gradient is final, and ready(k) is called with k the parameter's index in `params`.
  // A parameter no op took as an input (or one reached only through another op's captures, such as the
  // position encoding's groups after the first) is announced when backward ends, after every closure, so no
  // gradient is ever announced early. tick(), when given, runs after every closure (to progress communication).
  // Each parameter is announced exactly once; the watch ends with backward (or clear()).
  void watch(const std::vector<ParameterT<S>>& params, std::function<void(std::size_t)> ready,
             std::function<void()> tick = {}) {
    LIERE_ENSURE(ops_.empty(), "Tape::watch: call it before the forward pass (the tape holds " << ops_.size() << " ops)");
    auto w = std::make_unique<Watch>();
    for (std::size_t k = 0; k < params.size(); ++k) {
      LIERE_ENSURE(params[k].requires_grad(), "Tape::watch: " << params[k].label() << " has no gradient");
      w->index.emplace(params[k].node_->grad->root(), k);
    }
    w->first_use.assign(params.size(), kUnseen);
    w->ready = std::move(ready);
    w->tick = std::move(tick);
    watch_ = std::move(w);
  }
  std::size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }

  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  // Training mode (dropout active) or evaluation mode.
  bool training() const { return training_; }
  void set_training(bool on) { training_ = on; }
  // The generator dropout draws from (seed it, save its state in checkpoints).
  Rng& rng() { return rng_; }
  // Data-parallel training: this pass computes samples [first, first + count) of a larger batch, so that a
  // per-element draw (dropout's mask) gives each sample what it gets in the whole batch, whatever the split.
  // The default (0, 0): the pass is the whole batch.
  void set_batch_shard(Index first, Index count) {
    LIERE_ENSURE(first >= 0 && count >= 0 && (first == 0 || count > 0),
                 "Tape::set_batch_shard: bad shard first=" << first << " count=" << count);
    shard_first_ = first, shard_count_ = count;
  }
  Index shard_first() const { return shard_first_; }
  Index shard_count() const { return shard_count_; }

  // RAII: no op records anything while it lives (evaluation, or code whose gradient is not wanted).
  class NoGradGuard {
   public:
    explicit NoGradGuard(TapeT& t) : tape_(t), old_(t.grad_enabled_) { t.grad_enabled_ = false; }
    ~NoGradGuard() { tape_.grad_enabled_ = old_; }
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

   private:
    TapeT& tape_;
    bool old_;
  };
  [[nodiscard]] NoGradGuard no_grad() { return NoGradGuard(*this); }

 private:
  void run() {
    try {
      if (watch_) watch_->start();
      while (!ops_.empty()) {
        {
          Backward f = std::move(ops_.back());
          ops_.pop_back();
          f();
        }  // f (and what it captured) is released here, before the next closure runs
        if (watch_) watch_->after(ops_.size());
      }
      if (watch_) {
        auto w = std::move(watch_);
        w->after(0);
        w->finish();
      }
    } catch (...) {
      clear();
      throw;
    }
  }

  static constexpr std::size_t kUnseen = std::numeric_limits<std::size_t>::max();
  struct Watch {
    std::unordered_map<const GradSlot<S>*, std::size_t> index;  // gradient slot → parameter index
    std::vector<std::size_t> first_use;                           // per parameter: the tape position of its first op
    std::vector<std::size_t> order;                               // seen parameters, latest first use first
    std::size_t next = 0;                                         // order[next] is the next to announce
    std::function<void(std::size_t)> ready;
    std::function<void()> tick;

    void start() {
      order.clear();
      for (std::size_t k = 0; k < first_use.size(); ++k)
        if (first_use[k] != kUnseen) order.push_back(k);
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first_use[a] > first_use[b]; });
      next = 0;
    }
    // `remaining` closures are left: a parameter first used at position >= remaining is final.
    void after(std::size_t remaining) {
      while (next < order.size() && first_use[order[next]] >= remaining) ready(order[next++]);
      if (tick) tick();
    }
    // The parameters no op took as an input.
    void finish() {
      for (std::size_t k = 0; k < first_use.size(); ++k)
        if (first_use[k] == kUnseen) ready(k);
    }
  };
  template <class... V>
  void note_inputs(const V&... inputs) const {
    (note_input(inputs), ...);
  }
  template <class V>
  void note_input(const V& v) const {
    if (!v.node_ || !v.node_->grad) return;
    const auto it = watch_->index.find(v.node_->grad->root());
    if (it != watch_->index.end() && watch_->first_use[it->second] == kUnseen) watch_->first_use[it->second] = ops_.size();
  }

  std::vector<Backward> ops_;
  std::unique_ptr<Watch> watch_;
  bool grad_enabled_ = true;
  bool training_ = true;
  Rng rng_{0};
  Index shard_first_ = 0, shard_count_ = 0;
};

using Var = VarT<float>;
using Parameter = ParameterT<float>;
using Tape = TapeT<float>;

}  // namespace liere
