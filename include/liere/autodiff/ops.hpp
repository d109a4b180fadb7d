// liere/autodiff/ops.hpp — the engine's differentiable ops: a forward kernel plus a backward closure each.
//
// Every op has the same shape (docs/engine.md shows how to add one):
//   1. check the input shapes (liere::Error naming both shapes on a mismatch);
//   2. y = tape.output(shape, inputs...)   — pooled storage, requires a gradient iff an input does;
//   3. run the forward kernel (backend/cpu);
//   4. if y requires a gradient, push a closure that captures only what the backward needs and calls the
//      backward kernel with dy = gy.get() (return if nothing arrived) and dx = gx.acc() (nullptr: skip) —
//      or gx.acc_fresh(fresh) and the kernel's overwrite flag, when the kernel writes all of dx.
// Ops whose backward needs no input value (add, dropout, reshape) capture none, so activations that only
// such ops consume are released as soon as the forward code drops them.
#pragma once

#include <cstdint>
#include <liere/autodiff/tape.hpp>
#include <liere/backend/cpu/kernels.hpp>
#include <span>
#include <vector>

namespace liere::ops {

// y = x Wᵀ + b.   x (..., C), w (OC, C), b (OC) or undefined → y (..., OC)
template <class S>
VarT<S> linear(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& w, const VarT<S>& b = {}) {
  LIERE_ENSURE(w.shape().rank() == 2, "linear: weight must be (out, in), got " << w.label());
  const Index OC = w.shape()[0], C = w.shape()[1];
  LIERE_ENSURE(x.shape().rank() >= 1 && x.shape().back() == C,
               "linear: input " << x.shape() << " does not end in " << C << " features of weight " << w.shape());
  if (b.defined()) LIERE_ENSURE(b.numel() == OC, "linear: bias " << b.shape() << " for weight " << w.shape());
  const Index N = x.shape().rows();
  VarT<S> y = tape.output(x.shape().with(-1, OC), x, w, b);
  cpu::linear_forward(x.data(), w.data(), b.defined() ? b.data() : nullptr, y.data(), N, C, OC);
  if (y.requires_grad()) {
    TensorT<S> xv = w.requires_grad() ? x.value() : TensorT<S>();  // only dW needs x
    TensorT<S> wv = x.requires_grad() ? w.value() : TensorT<S>();  // only dx needs W
    tape.push([xv, wv, gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), N, C, OC] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      cpu::linear_backward(xv.data(), wv.data(), dy, dx, gw.acc(), gb.acc(), N, C, OC, fresh);
    });
  }
  return y;
}

// Layer normalisation over the last dimension.   x (..., C), w (C), b (C)
template <class S>
VarT<S> layernorm(TapeT<S>& tape, const VarT<S>& x, const VarT<S>& w, const VarT<S>& b,
                  double eps = cpu::kLayerNormEps) {
  const Index C = x.shape().back(), N = x.shape().rows();
  LIERE_ENSURE(w.numel() == C && b.numel() == C,
               "layernorm: input " << x.shape() << " with weight " << w.shape() << " and bias " << b.shape());
  VarT<S> y = tape.output(x.shape(), x, w, b);
  TensorT<S> mean(Shape{N}), rstd(Shape{N});  // (N) saved statistics
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), N, C, eps);
  if (y.requires_grad()) {
    tape.push([xv = x.value(), wv = w.value(), mean, rstd, gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(),
               gy = y.grad_ref(), N, C] {
      const S* dy = gy.get();
      if (!dy) return;
      S* dw = gw.acc();
      S* db = gb.acc();
      TensorT<S> scratch;
      if (dw || db) scratch = TensorT<S>(Shape{cpu::layernorm_backward_scratch(N, C)});
      cpu::layernorm_backward(xv.data(), wv.data(), mean.data(), rstd.data(), dy, gx.acc(), dw, db, scratch.data(), N, C);
    });
  }
  return y;
}

// GELU (exact erf form), elementwise.
template <class S>
VarT<S> gelu(TapeT<S>& tape, const VarT<S>& x) {
  VarT<S> y = tape.output(x.shape(), x);
  cpu::gelu_forward(x.data(), y.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([xv = x.value(), gx = x.grad_ref(), gy = y.grad_ref()] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      cpu::gelu_backward(xv.data(), dy, dx, xv.numel(), fresh);
    });
  }
  return y;
}

// Dropout with probability p, drawing from tape.rng(); the identity (the same Var) in evaluation mode or
// for p = 0.
template <class S>
VarT<S> dropout(TapeT<S>& tape, const VarT<S>& x, double p) {
  LIERE_ENSURE(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got " << p);
  if (!tape.training() || p == 0) return x;
  VarT<S> y = tape.output(x.shape(), x);
  TensorT<std::uint8_t> mask(x.shape());
  cpu::dropout_forward(x.data(), p, tape.rng(), y.data(), mask.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([mask, p, gx = x.grad_ref(), gy = y.grad_ref()] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh = false;
      S* dx = gx.acc_fresh(fresh);
      cpu::dropout_backward(mask.data(), p, dy, dx, mask.numel(), fresh);
    });
  }
  return y;
}

// a + b (same shapes): residual connections.
template <class S>
VarT<S> add(TapeT<S>& tape, const VarT<S>& a, const VarT<S>& b) {
  ensure_same_shape(a.shape(), b.shape(), "add");
  VarT<S> y = tape.output(a.shape(), a, b);
  cpu::add_forward(a.data(), b.data(), y.data(), a.numel());
  if (y.requires_grad()) {
    tape.push([ga = a.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), n = a.numel()] {
      const S* dy = gy.get();
      if (!dy) return;
      bool fresh_a = false, fresh_b = false;
      S* da = ga.acc_fresh(fresh_a);  // first: for add(x, x), b then finds the buffer already there
      S* db = gb.acc_fresh(fresh_b);
      cpu::add_backward(dy, da, db, n, fresh_a, fresh_b);
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
  VarT<S> y = tape.output(xs, x, p);
  cpu::add_broadcast_forward(x.data(), p.data(), y.data(), R, M);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gp = p.grad_ref(), gy = y.grad_ref(), R, M] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::add_broadcast_backward(dy, gx.acc(), gp.acc(), R, M);
    });
  }
  return y;
}

// a ⊙ b (same shapes).
template <class S>
VarT<S> mul(TapeT<S>& tape, const VarT<S>& a, const VarT<S>& b) {
  ensure_same_shape(a.shape(), b.shape(), "mul");
  VarT<S> y = tape.output(a.shape(), a, b);
  cpu::mul_forward(a.data(), b.data(), y.data(), a.numel());
  if (y.requires_grad()) {
    tape.push([av = b.requires_grad() ? a.value() : TensorT<S>(),  // a is needed only for db
               bv = a.requires_grad() ? b.value() : TensorT<S>(),  // b only for da
               ga = a.grad_ref(), gb = b.grad_ref(), gy = y.grad_ref(), n = a.numel()] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::mul_backward(av.data(), bv.data(), dy, ga.acc(), gb.acc(), n);
    });
  }
  return y;
}

// s · x
template <class S>
VarT<S> scale(TapeT<S>& tape, const VarT<S>& x, S s) {
  VarT<S> y = tape.output(x.shape(), x);
  cpu::scale_forward(x.data(), s, y.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([s, gx = x.grad_ref(), gy = y.grad_ref(), n = x.numel()] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::scale_backward(s, dy, gx.acc(), n);
    });
  }
  return y;
}

// Σ x → a scalar (shape ()).
template <class S>
VarT<S> sum(TapeT<S>& tape, const VarT<S>& x) {
  VarT<S> y = tape.output(Shape{}, x);
  y.data()[0] = cpu::sum_forward(x.data(), x.numel());
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), n = x.numel()] {
      const S* dy = gy.get();
      if (!dy) return;
      if (S* dx = gx.acc()) cpu::sum_backward(dy[0], dx, n);
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
  cpu::PatchGeometry g;
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
  VarT<S> y = tape.output(Shape{g.B, N, D}, x, w, b);
  {
    TensorT<S> scratch(Shape{g.B * N, g.patch_size()});  // (B·N, K), back to the pool at the end of the scope
    cpu::patch_embed_forward(x.data(), w.data(), b.defined() ? b.data() : nullptr, scratch.data(), y.data(), g, D);
  }
  if (y.requires_grad()) {
    tape.push([xv = x.value(), wv = w.value(), gx = x.grad_ref(), gw = w.grad_ref(), gb = b.grad_ref(),
               gy = y.grad_ref(), g, D] {
      const S* dy = gy.get();
      if (!dy) return;
      TensorT<S> scratch(Shape{g.B * g.tokens(), g.patch_size()});
      cpu::patch_embed_backward(xv.data(), wv.data(), dy, scratch.data(), gx.acc(), gw.acc(), gb.acc(), g, D);
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
  VarT<S> y = tape.output(Shape{B, N + 1, D}, x, tok);
  cpu::prepend_token_forward(x.data(), tok.data(), y.data(), B, N, D);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gt = tok.grad_ref(), gy = y.grad_ref(), B, N, D] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::prepend_token_backward(dy, gx.acc(), gt.acc(), B, N, D);
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
  VarT<S> y = tape.output(Shape{B, D}, x);
  cpu::select_token_forward(x.data(), y.data(), B, T, D, t);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), B, T, D, t] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::select_token_backward(dy, gx.acc(), B, T, D, t);
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
  VarT<S> y = tape.output(Shape{B, D}, x);
  cpu::mean_tokens_forward(x.data(), y.data(), B, T, D, t0);
  if (y.requires_grad()) {
    tape.push([gx = x.grad_ref(), gy = y.grad_ref(), B, T, D, t0] {
      const S* dy = gy.get();
      if (!dy) return;
      cpu::mean_tokens_backward(dy, gx.acc(), B, T, D, t0);
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
  VarT<S> loss = tape.output(Shape{}, logits);
  TensorT<S> probs(ls);  // (B, K) saved softmax
  if (row_loss) row_loss->resize(std::size_t(B));
  loss.data()[0] = cpu::softmax_cross_entropy_forward(logits.data(), labels.data(), smoothing, probs.data(),
                                                      row_loss ? row_loss->data() : nullptr, B, K);
  if (loss.requires_grad()) {
    tape.push([probs, lab = std::vector<int>(labels.begin(), labels.end()), smoothing, gz = logits.grad_ref(),
               gl = loss.grad_ref(), B, K] {
      const S* dl = gl.get();
      if (!dl) return;
      if (S* dz = gz.acc()) cpu::softmax_cross_entropy_backward(probs.data(), lab.data(), smoothing, dl[0], dz, B, K);
    });
  }
  return loss;
}

}  // namespace liere::ops
