// liere/autodiff/ops.hpp — the engine's differentiable ops: a forward kernel plus a backward closure each.
//
// Every op has the same shape (docs/engine.md shows how to add one):
//   1. check the input shapes and devices (liere::Error naming both on a mismatch);
//   2. y = tape.output(shape, inputs...)   — pooled storage on the inputs' device, requires a gradient iff an
//      input does;
//   3. run the forward kernel through LIERE_DISPATCH (backend/dispatch.hpp): backend/cpu or backend/cuda;
//   4. if y requires a gradient, push a closure that captures only what the backward needs and calls the
//      backward kernel with dy = gy.get() (return if nothing arrived) and dx = gx.acc() (nullptr: skip) —
//      or gx.acc_fresh(fresh) and the kernel's overwrite flag, when the kernel writes all of dx.
// Ops whose backward needs no input value (add, dropout, reshape) capture none, so activations that only
// such ops consume are released as soon as the forward code drops them.
#pragma once

#include <cstdint>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/kernels.hpp>
#include <liere/backend/dispatch.hpp>
#include <span>
#include <vector>

namespace liere::ops {

// Throws unless every defined input lives on the device of the first: "linear: input on cpu, weight on cuda".
template <class S, class... V>
Device same_device(const char* op, const VarT<S>& first, const V&... rest) {
  const Device d = first.device();
  auto check = [&](const auto& v) {
    if (v.defined())
      LIERE_ENSURE(v.device() == d, op << ": " << first.label() << " is on " << to_string(d) << ", " << v.label()
                                       << " on " << to_string(v.device()));
  };
  (check(rest), ...);
  return d;
}

// y = x Wᵀ + b.   x (..., C), w (OC, C), b (OC) or undefined → y (..., OC)
template <class S>
VarT<S> linear(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& w, const VarT<S>& b = {}) {
  LIERE_ENSURE(w.shape().rank() == 2, "linear: weight must be (out, in), got " << w.label());
  const Index OC = w.shape()[0], C = w.shape()[1];
  LIERE_ENSURE(x.shape().rank() >= 1 && x.shape().back() == C,
               "linear: input " << x.shape() << " does not end in " << C << " features of weight " << w.shape());
  if (b.defined()) LIERE_ENSURE(b.numel() == OC, "linear: bias " << b.shape() << " for weight " << w.shape());
  const Index N = x.shape().rows();
  const Device dev = same_device("linear", x, w, b);
  VarT<S> y = tape.output(x.shape().with(-1, OC), x, w, b);
  const S* bias = b.defined() ? b.data() : nullptr;
  OpState keep;  // what the backend's forward keeps for the backward (a bf16 run's rounded operands on cuda)
  LIERE_DISPATCH(S, dev, linear_forward, x.data(), w.data(), bias, y.data(), N, C, OC,
                 y.requires_grad() ? &keep : nullptr);
  if (y.requires_grad()) {
    TensorT<S> xv = w.requires_grad() ? x.value() : TensorT<S>();  // only dW needs x
    TensorT<S> wv = x.requires_grad() ? w.value() : TensorT<S>();  // only dx needs W
    tape.push([xv, wv, keep, gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), N, C, OC,
               dev] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      S* dw = gw.acc();
      S* db = gb.acc();
      LIERE_DISPATCH(S, dev, linear_backward, xv.data(), wv.data(), dy, dx, dw, db, N, C, OC, fresh, &keep);
    });
  }
  return y;
}

// Layer normalisation over the last dimension.   x (..., C), w (C), b (C)
template <class S>
VarT<S> layernorm(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& w, const VarT<S>& b,
                  double eps = kernels::kLayerNormEps) {
  const Index C = x.shape().back(), N = x.shape().rows();
  LIERE_ENSURE(w.numel() == C && b.numel() == C,
               "layernorm: input " << x.shape() << " with weight " << w.shape() << " and bias " << b.shape());
  const Device dev = same_device("layernorm", x, w, b);
  VarT<S> y = tape.output(x.shape(), x, w, b);
  TensorT<S> mean(Shape{N}, dev), rstd(Shape{N}, dev);  // (N) saved statistics
  LIERE_DISPATCH(S, dev, layernorm_forward, x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, eps);
  if (y.requires_grad()) {
    tape.push([xv = x.value(), wv = w.value(), mean, rstd, gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(),
               gy = y.grad_ref(), N, C, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      S* dw = gw.acc();
      S* db = gb.acc();
      TensorT<S> scratch;
      if (dw || db) scratch = TensorT<S>(Shape{kernels::layernorm_backward_scratch(N, C)}, dev);
      LIERE_DISPATCH(S, dev, layernorm_backward, xv.data(), wv.data(), mean.data(), rstd.data(), dy, dx, dw, db,
                     scratch.data(), N, C);
    });
  }
  return y;
}

// GELU (exact erf form), elementwise.
template <class S>
VarT<S> gelu(TapeT<S>& tape, const VarT<S>& x) {
  const Device dev = x.device();
  VarT<S> y = tape.output(x.shape(), x);
  LIERE_DISPATCH(S, dev, gelu_forward, x.data(), y.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([xv = x.value(), gx = x.grad_ref(), gy = y.grad_ref(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      LIERE_DISPATCH(S, dev, gelu_backward, xv.data(), dy, dx, xv.numel(), fresh);
    });
  }
  return y;
}

// Dropout with probability p, drawing from tape.rng(); the identity (the same Var) in evaluation mode or
// for p = 0. With Tape::set_batch_shard, a shard of a batch gets the mask its samples have in the whole batch.
template <class S>
VarT<S> dropout(TapeT<S>& tape, const VarT<S>& x, double p) {
  kernels::check_dropout(p);
  if (!tape.training() || p == 0) return x;
  const Device dev = x.device();
  VarT<S> y = tape.output(x.shape(), x);
  TensorT<std::uint8_t> mask(x.shape(), dev);
  std::uint64_t key = tape.rng().next_u64();
  if (tape.shard_first() > 0) {
    // Element i of this shard is element first·(elements per sample) + i of the whole batch, and the mask of
    // element j is hash_u64(key, j) = splitmix64(key + j·γ) (core/rng.hpp): shifting the key by first·per·γ
    // gives this shard exactly its part of the whole batch's mask.
    LIERE_ENSURE(x.numel() % tape.shard_count() == 0, "dropout: " << x.label() << " is not " << tape.shard_count()
                                                                    << " samples of equal size (Tape::set_batch_shard)");
    key += std::uint64_t(tape.shard_first()) * std::uint64_t(x.numel() / tape.shard_count()) * kGoldenGamma;
  }
  LIERE_DISPATCH(S, dev, dropout_forward, x.data(), p, key, y.data(), mask.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([mask, p, gx = x.grad_ref(), gy = y.grad_ref(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      LIERE_DISPATCH(S, dev, dropout_backward, mask.data(), p, dy, dx, mask.numel(), fresh);
    });
  }
  return y;
}

// a + b (same shapes): residual connections.
template <class S>
VarT<S> add(TapeT<S>& tape, const VarT<S>& a, const VarT<S>& b) {
  ensure_same_shape(a.shape(), b.shape(), "add");
  const Device dev = same_device("add", a, b);
  VarT<S> y = tape.output(a.shape(), a, b);
  LIERE_DISPATCH(S, dev, add_forward, a.data(), b.data(), y.data(), a.numel());
  if (y.requires_grad()) {
    tape.push([ga = a.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), n = a.numel(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh_a = false, fresh_b = false;
      S* da = ga.acc_fresh(fresh_a);  // first: for add(x, x), b then finds the buffer already there
      S* db = gb.acc_fresh(fresh_b);
      LIERE_DISPATCH(S, dev, add_backward, dy, da, db, n, fresh_a, fresh_b);
    });
  }
  return y;
}

// x + p broadcast over the leading dimensions: p's shape must be the trailing dimensions of x's
// (e.g. x (B, N, D) + pos (N, D)).
template <class S>
VarT<S> add_broadcast(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& p) {
  const Shape& xs = x.shape();
  const Shape& ps = p.shape();
  bool ok = ps.rank() <= xs.rank();
  for (int i = 1; ok && i <= ps.rank(); ++i) ok = ps[-i] == xs[-i];
  LIERE_ENSURE(ok, "add_broadcast: " << ps << " is not the trailing part of " << xs);
  const Index M = p.numel(), R = x.numel() / std::max<Index>(M, 1);
  const Device dev = same_device("add_broadcast", x, p);
  VarT<S> y = tape.output(xs, x, p);
  LIERE_DISPATCH(S, dev, add_broadcast_forward, x.data(), p.data(), y.data(), R, M);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gp = p.grad_ref(), gy = y.grad_ref(), R, M, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      S* dp = gp.acc();
      LIERE_DISPATCH(S, dev, add_broadcast_backward, dy, dx, dp, R, M);
    });
  }
  return y;
}

// a ⊙ b (same shapes).
template <class S>
VarT<S> mul(TapeT<S>& tape, const VarT<S>& a, const VarT<S>& b) {
  ensure_same_shape(a.shape(), b.shape(), "mul");
  const Device dev = same_device("mul", a, b);
  VarT<S> y = tape.output(a.shape(), a, b);
  LIERE_DISPATCH(S, dev, mul_forward, a.data(), b.data(), y.data(), a.numel());
  if (y.requires_grad()) {
    tape.push([av = b.requires_grad() ? a.value() : TensorT<S>(),  // a is needed only for db
               bv = a.requires_grad() ? b.value() : TensorT<S>(),  // b only for da
               ga = a.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), n = a.numel(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* da = ga.acc();
      S* db = gb.acc();
      LIERE_DISPATCH(S, dev, mul_backward, av.data(), bv.data(), dy, da, db, n);
    });
  }
  return y;
}

// s · x
template <class S>
VarT<S> scale(TapeT<S>& tape, const VarT<S>& x, S s) {
  const Device dev = x.device();
  VarT<S> y = tape.output(x.shape(), x);
  LIERE_DISPATCH(S, dev, scale_forward, x.data(), s, y.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([s, gx = x.grad_ref(), gy = y.grad_ref(), n = x.numel(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      LIERE_DISPATCH(S, dev, scale_backward, s, dy, dx, n);
    });
  }
  return y;
}

// Σ x → a scalar (shape ()).
template <class S>
VarT<S> sum(TapeT<S>& tape, const VarT<S>& x) {
  const Device dev = x.device();
  VarT<S> y = tape.output(Shape{}, x);
  S* out = y.data();
  LIERE_DISPATCH(S, dev, sum_forward, x.data(), out, x.numel());
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), n = x.numel(), dev] {
      const S* dy = gy.get();
      if (!dy) return;
      if (S* dx = gx.acc()) LIERE_DISPATCH(S, dev, sum_backward, dy, dx, n);
    });
  }
  return y;
}

// Patch / tubelet embedding. x (B, C, H, W) with w (D, C, p, p), or x (B, C, T, H, W) with w (D, C, t, p, p);
// b (D) or undefined → y (B, N, D). Sizes come from the weight's shape.
template <class S>
VarT<S> patch_embed(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& w, const VarT<S>& b = {}) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  LIERE_ENSURE((ws.rank() == 4 || ws.rank() == 5) && ws[-1] == ws[-2],
               "patch_embed: weight must be (D, C, p, p) or (D, C, t, p, p), got " << ws);
  LIERE_ENSURE(xs.rank() == ws.rank() && xs[1] == ws[1],
               "patch_embed: input " << xs << " does not match weight " << ws
                                     << " (expected (B, C, H, W) for a 2D or (B, C, T, H, W) for a 3D weight)");
  PatchGeometry g;
  g.B = xs[0];
  g.C = xs[1];
  g.T = ws.rank() == 5 ? xs[2] : 1;
  g.H = xs[-2];
  g.W = xs[-1];
  g.tt = ws.rank() == 5 ? ws[2] : 1;
  g.p = ws[-1];
  g.check();
  const Index D = ws[0], N = g.tokens();
  if (b.defined()) LIERE_ENSURE(b.numel() == D, "patch_embed: bias " << b.shape() << " for weight " << ws);
  const Device dev = same_device("patch_embed", x, w, b);
  VarT<S> y = tape.output(Shape{g.B, N, D}, x, w, b);
  {
    TensorT<S> scratch(Shape{g.B * N, g.patch_size()}, dev);  // (B·N, K), back to the pool at the end of the scope
    const S* bias = b.defined() ? b.data() : nullptr;
    LIERE_DISPATCH(S, dev, patch_embed_forward, x.data(), w.data(), bias, scratch.data(), y.data(), g, D);
  }
  if (y.requires_grad()) {
    tape.push([xv = x.value(), wv = w.value(), gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(),
               gy = y.grad_ref(), g, D, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      TensorT<S> scratch(Shape{g.B * g.tokens(), g.patch_size()}, dev);
      S* dx = gx.acc();
      S* dw = gw.acc();
      S* db = gb.acc();
      LIERE_DISPATCH(S, dev, patch_embed_backward, xv.data(), wv.data(), dy, scratch.data(), dx, dw, db, g, D);
    });
  }
  return y;
}

// Prepends a token (e.g. CLS) to every sequence: x (B, N, D), tok with D values (e.g. (1, 1, D)) → (B, N+1, D).
template <class S>
VarT<S> prepend_token(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& tok) {
  const Shape& xs = x.shape();
  LIERE_ENSURE(xs.rank() == 3 && tok.numel() == xs[2],
               "prepend_token: expected x (B, N, D) and a token of D values, got " << xs << " and " << tok.shape());
  const Index B = xs[0], N = xs[1], D = xs[2];
  const Device dev = same_device("prepend_token", x, tok);
  VarT<S> y = tape.output(Shape{B, N + 1, D}, x, tok);
  LIERE_DISPATCH(S, dev, prepend_token_forward, x.data(), tok.data(), y.data(), B, N, D);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gt = tok.grad_ref(), gy = y.grad_ref(), B, N, D, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      S* dtok = gt.acc();
      LIERE_DISPATCH(S, dev, prepend_token_backward, dy, dx, dtok, B, N, D);
    });
  }
  return y;
}

// Token t of every sequence: x (B, T, D) → (B, D). t = 0 reads the CLS token.
template <class S>
VarT<S> select_token(TapeT<S>& tape, const VarT<S>& x, Index t = 0) {
  const Shape& xs = x.shape();
  LIERE_ENSURE(xs.rank() == 3 && t >= 0 && t < xs[1], "select_token: token " << t << " of " << xs);
  const Index B = xs[0], T = xs[1], D = xs[2];
  const Device dev = x.device();
  VarT<S> y = tape.output(Shape{B, D}, x);
  LIERE_DISPATCH(S, dev, select_token_forward, x.data(), y.data(), B, T, D, t);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), B, T, D, t, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      LIERE_DISPATCH(S, dev, select_token_backward, dy, dx, B, T, D, t);
    });
  }
  return y;
}

// Mean over tokens [t0, T): x (B, T, D) → (B, D). t0 = 1 skips a CLS token (global average pooling).
template <class S>
VarT<S> mean_tokens(TapeT<S>& tape, const VarT<S>& x, Index t0 = 0) {
  const Shape& xs = x.shape();
  LIERE_ENSURE(xs.rank() == 3 && t0 >= 0 && t0 < xs[1], "mean_tokens: tokens from " << t0 << " of " << xs);
  const Index B = xs[0], T = xs[1], D = xs[2];
  const Device dev = x.device();
  VarT<S> y = tape.output(Shape{B, D}, x);
  LIERE_DISPATCH(S, dev, mean_tokens_forward, x.data(), y.data(), B, T, D, t0);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), B, T, D, t0, dev] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dx = gx.acc();
      LIERE_DISPATCH(S, dev, mean_tokens_backward, dy, dx, B, T, D, t0);
    });
  }
  return y;
}

// Mean softmax cross-entropy over the batch: logits (B, K), labels (B) in [0, K) → a scalar.
// `row_loss`, when given, receives the B per-sample losses.
template <class S>
VarT<S> cross_entropy(TapeT<S>& tape, const VarT<S>& logits, std::span<const int> labels, double smoothing = 0.0,
                      std::vector<S>* row_loss = nullptr) {
  const Shape& ls = logits.shape();
  LIERE_ENSURE(ls.rank() == 2 && Index(labels.size()) == ls[0],
               "cross_entropy: logits " << ls << " need (B, K) and B labels, got " << labels.size() << " labels");
  const Index B = ls[0], K = ls[1];
  kernels::check_cross_entropy(K, smoothing);
  const Device dev = logits.device();
  VarT<S> loss = tape.output(Shape{}, logits);
  TensorT<S> probs(ls, dev);  // (B, K) saved softmax
  for (Index b = 0; b < B; ++b)  // checked here, on the host, for every device
    LIERE_ENSURE(labels[b] >= 0 && labels[b] < K,
                 "cross_entropy: label " << labels[b] << " of sample " << b << " is outside [0, " << K << ")");
  const TensorT<int> lab = TensorT<int>::from(Shape{B}, labels, dev);
  TensorT<S> rows;
  if (row_loss) rows = TensorT<S>(Shape{B}, dev);
  LIERE_DISPATCH(S, dev, softmax_cross_entropy_forward, logits.data(), lab.data(), smoothing, probs.data(), rows.data(),
                 loss.data(), B, K);
  if (row_loss) *row_loss = rows.to_vector();
  if (loss.requires_grad()) {
    tape.push([probs, lab, smoothing, gz = logits.grad_ref(), gl = loss.grad_ref(), B, K, dev] {
      const S* dl = gl.get();
      if (!dl) return;
      if (S* dz = gz.acc()) LIERE_DISPATCH(S, dev, softmax_cross_entropy_backward, probs.data(), lab.data(), smoothing, dl, dz, B, K);
    });
  }
  return loss;
}

}  // namespace liere::ops
