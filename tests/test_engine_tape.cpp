// The tape: gradients equal the kernels called by hand and central differences through a whole small ViT-like
// network (double); gradients accumulate over backward passes; no-grad records nothing; memory is reused from
// step to step; a small MLP learns with Adam; runs are bit-identical; errors name the shapes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <liere/autodiff/ops.hpp>
#include <liere/nn/dropout.hpp>
#include <liere/nn/layernorm.hpp>
#include <liere/nn/linear.hpp>
#include <liere/nn/mlp.hpp>
#include <liere/nn/patch_embed.hpp>
#include <liere/optim/adam.hpp>
#include <omp.h>
#include <vector>

#include "test_util.hpp"

using namespace liere;

namespace {

// patch embed → CLS → x + MLP(LN(x)) → LN → CLS token → head → cross-entropy (label smoothing 0.1).
template <class S>
struct TinyNet {
  static constexpr Index kB = 2, kC = 2, kH = 4, kW = 4, kP = 2, kD = 6, kHidden = 12, kClasses = 3;
  Rng init;
  nn::ParamsT<S> params;
  nn::PatchEmbedT<S> patch;
  ParameterT<S> cls;
  nn::LayerNormT<S> ln1, ln2;
  nn::MlpT<S> mlp;
  nn::LinearT<S> head;
  double drop;

  explicit TinyNet(std::uint64_t seed, double dropout = 0.0)
      : init(seed),
        patch(params, "patch_embed", kC, kD, kP, init),
        cls(params.add("cls_token", Shape{1, 1, kD})),
        ln1(params, "blocks.0.norm2", kD),
        ln2(params, "norm", kD),
        mlp(params, "blocks.0.mlp", kD, kHidden, kD, init, dropout),
        head(params, "head", kD, kClasses, init),
        drop(dropout) {
    // Non-trivial values everywhere (not only the ViT init), so every gradient is exercised.
    for (const auto& p : params) fill_uniform(p.value(), init, -0.8, 0.8);
    for (Index i = 0; i < kD; ++i) ln1.weight().data()[i] += S(1), ln2.weight().data()[i] += S(1);
  }

  VarT<S> loss(TapeT<S>& tape, const TensorT<S>& images, const std::vector<int>& labels) const {
    VarT<S> x = patch(tape, VarT<S>(images));
    x = ops::prepend_token(tape, x, cls);
    x = ops::add(tape, x, mlp(tape, ln1(tape, x)));
    x = ln2(tape, x);
    // CLS token + mean of the patch tokens (without attention the CLS token alone would not see the patches).
    VarT<S> logits = head(tape, ops::add(tape, ops::select_token(tape, x, 0), ops::mean_tokens(tape, x, 1)));
    return ops::cross_entropy<S>(tape, logits, labels, 0.1);
  }
};

template <class S>
TensorT<S> random_tensor(const Shape& s, Rng& rng, double lo = -1, double hi = 1) {
  TensorT<S> t(s);
  fill_uniform(t, rng, lo, hi);
  return t;
}

const std::vector<int> kLabels = {2, 0};

}  // namespace

TEST_CASE("tape: gradients equal the kernels called by hand", "[engine][tape]") {
  using S = double;
  using N = TinyNet<S>;
  const double p = 0.25;  // with dropout: the mask must match too
  N net(3, p);
  Rng data(5);
  TensorT<S> img = random_tensor<S>({N::kB, N::kC, N::kH, N::kW}, data);
  TapeT<S> tape(99);
  const VarT<S> loss = net.loss(tape, img, kLabels);
  tape.backward(loss);
  CHECK(tape.empty());

  // ---- the same computation, kernel by kernel ----
  const Index B = N::kB, D = N::kD, Hd = N::kHidden, K = N::kClasses;
  PatchGeometry g;
  g.B = B, g.C = N::kC, g.H = N::kH, g.W = N::kW, g.p = N::kP;
  const Index Np = g.tokens(), T = Np + 1, R = B * T, Kp = g.patch_size();
  using V = std::vector<S>;
  const auto& P = net.params;
  auto val = [&](const char* n) { return P[n].data(); };
  V scratch(B * Np * Kp), pe(B * Np * D), x0(R * D), m1(R), r1(R), a(R * D), h(R * Hd), hg(R * Hd), hd(R * Hd),
      f2(R * D), f2d(R * D), x1(R * D), m2(R), r2(R), x2(R * D), c0(B * D), cm(B * D), c(B * D), logits(B * K),
      probs(B * K);
  std::vector<std::uint8_t> mask1(R * Hd), mask2(R * D);
  Rng drop_rng(99);
  cpu::patch_embed_forward(img.data(), val("patch_embed.proj.weight"), val("patch_embed.proj.bias"), scratch.data(),
                           pe.data(), g, D);
  cpu::prepend_token_forward(pe.data(), val("cls_token"), x0.data(), B, Np, D);
  cpu::layernorm_forward(x0.data(), val("blocks.0.norm2.weight"), val("blocks.0.norm2.bias"), a.data(), m1.data(),
                         r1.data(), R, D);
  cpu::linear_forward(a.data(), val("blocks.0.mlp.fc1.weight"), val("blocks.0.mlp.fc1.bias"), h.data(), R, D, Hd);
  cpu::gelu_forward(h.data(), hg.data(), R * Hd);
  cpu::dropout_forward(hg.data(), p, drop_rng, hd.data(), mask1.data(), R * Hd);
  cpu::linear_forward(hd.data(), val("blocks.0.mlp.fc2.weight"), val("blocks.0.mlp.fc2.bias"), f2.data(), R, Hd, D);
  cpu::dropout_forward(f2.data(), p, drop_rng, f2d.data(), mask2.data(), R * D);
  cpu::add_forward(x0.data(), f2d.data(), x1.data(), R * D);
  cpu::layernorm_forward(x1.data(), val("norm.weight"), val("norm.bias"), x2.data(), m2.data(), r2.data(), R, D);
  cpu::select_token_forward(x2.data(), c0.data(), B, T, D, Index(0));
  cpu::mean_tokens_forward(x2.data(), cm.data(), B, T, D, Index(1));
  cpu::add_forward(c0.data(), cm.data(), c.data(), B * D);
  cpu::linear_forward(c.data(), val("head.weight"), val("head.bias"), logits.data(), B, D, K);
  const S l = cpu::softmax_cross_entropy_forward(logits.data(), kLabels.data(), 0.1, probs.data(), nullptr, B, K);
  CHECK(l == loss.item());

  std::map<std::string, V> grad;
  for (const auto& prm : P) grad[prm.name()] = V(prm.numel(), 0.0);
  auto gr = [&](const char* n) { return grad.at(n).data(); };
  V dlogits(B * K, 0.0), dc(B * D, 0.0), dc0(B * D, 0.0), dcm(B * D, 0.0), dx2(R * D, 0.0), dx1(R * D, 0.0), df2d(R * D, 0.0), df2(R * D, 0.0),
      dhd(R * Hd, 0.0), dhg(R * Hd, 0.0), dh(R * Hd, 0.0), da(R * D, 0.0), dx0(R * D, 0.0), dpe(B * Np * D, 0.0);
  cpu::softmax_cross_entropy_backward(probs.data(), kLabels.data(), 0.1, S(1), dlogits.data(), B, K);
  cpu::linear_backward(c.data(), val("head.weight"), dlogits.data(), dc.data(), gr("head.weight"), gr("head.bias"), B, D, K);
  cpu::add_backward(dc.data(), dc0.data(), dcm.data(), B * D);
  cpu::mean_tokens_backward(dcm.data(), dx2.data(), B, T, D, Index(1));
  cpu::select_token_backward(dc0.data(), dx2.data(), B, T, D, Index(0));
  cpu::layernorm_backward(x1.data(), val("norm.weight"), m2.data(), r2.data(), dx2.data(), dx1.data(), gr("norm.weight"),
                          gr("norm.bias"), std::vector<S>(cpu::layernorm_backward_scratch(R, D)).data(), R, D);
  cpu::add_backward(dx1.data(), dx0.data(), df2d.data(), R * D);
  cpu::dropout_backward(mask2.data(), p, df2d.data(), df2.data(), R * D);
  cpu::linear_backward(hd.data(), val("blocks.0.mlp.fc2.weight"), df2.data(), dhd.data(), gr("blocks.0.mlp.fc2.weight"),
                       gr("blocks.0.mlp.fc2.bias"), R, Hd, D);
  cpu::dropout_backward(mask1.data(), p, dhd.data(), dhg.data(), R * Hd);
  cpu::gelu_backward(h.data(), dhg.data(), dh.data(), R * Hd);
  cpu::linear_backward(a.data(), val("blocks.0.mlp.fc1.weight"), dh.data(), da.data(), gr("blocks.0.mlp.fc1.weight"),
                       gr("blocks.0.mlp.fc1.bias"), R, D, Hd);
  cpu::layernorm_backward(x0.data(), val("blocks.0.norm2.weight"), m1.data(), r1.data(), da.data(), dx0.data(),
                          gr("blocks.0.norm2.weight"), gr("blocks.0.norm2.bias"),
                          std::vector<S>(cpu::layernorm_backward_scratch(R, D)).data(), R, D);
  cpu::prepend_token_backward(dx0.data(), dpe.data(), gr("cls_token"), B, Np, D);
  cpu::patch_embed_backward(img.data(), val("patch_embed.proj.weight"), dpe.data(), scratch.data(), nullptr,
                            gr("patch_embed.proj.weight"), gr("patch_embed.proj.bias"), g, D);

  for (const auto& prm : P) {
    INFO(prm.name());
    const V tape_grad = prm.grad().to_vector();
    CHECK(liere::test::max_rel_err(tape_grad, grad.at(prm.name())) < 1e-14);
    double norm = 0;
    for (S v : tape_grad) norm += v * v;
    CHECK(norm > 0);  // every parameter received a gradient
  }
}

TEST_CASE("tape: whole-network gradients by central differences (double, with dropout)", "[engine][tape]") {
  using S = double;
  using N = TinyNet<S>;
  N net(4, 0.2);
  Rng data(6);
  TensorT<S> img = random_tensor<S>({N::kB, N::kC, N::kH, N::kW}, data);
  TapeT<S> tape(123);
  const std::string rng_state = tape.rng().state();
  tape.backward(net.loss(tape, img, kLabels));
  for (const auto& p : net.params) {
    INFO(p.name());
    std::vector<double> x = p.value().to_vector();
    const auto num = liere::test::numeric_gradient(
        [&](const std::vector<double>& xi) {
          std::copy(xi.begin(), xi.end(), p.data());
          tape.rng().set_state(rng_state);  // the same dropout masks
          auto guard = tape.no_grad();
          return double(net.loss(tape, img, kLabels).item());
        },
        x);
    std::copy(x.begin(), x.end(), p.data());
    CHECK(liere::test::max_rel_err(p.grad().to_vector(), num) < 1e-6);
  }
}

TEST_CASE("tape: the remaining op wrappers by central differences (double)", "[engine][tape]") {
  // 3D patch embedding → reshape → linear without bias → broadcast add → mul → scale → sum, on leaves that
  // all require gradients (also the input video).
  using S = double;
  Rng rng(21);
  std::vector<VarT<S>> leaves = {
      VarT<S>(random_tensor<S>({1, 2, 4, 4, 4}, rng), true),  // video (B, C, T, H, W)
      VarT<S>(random_tensor<S>({3, 2, 2, 2, 2}, rng), true),  // tubelet weight (D, C, t, p, p)
      VarT<S>(random_tensor<S>({3}, rng), true),              // its bias
      VarT<S>(random_tensor<S>({4, 3}, rng), true),           // linear weight, no bias
      VarT<S>(random_tensor<S>({4}, rng), true),              // broadcast term
      VarT<S>(random_tensor<S>({8, 4}, rng), true)};          // gate
  auto loss = [&](TapeT<S>& tape) {
    VarT<S> t = ops::patch_embed(tape, leaves[0], leaves[1], leaves[2]);  // (1, 8, 3): 2·2·2 tubelets
    t = ops::linear(tape, t.reshape({8, 3}), leaves[3]);
    t = ops::add_broadcast(tape, t, leaves[4]);
    t = ops::mul(tape, t, leaves[5]);
    t = ops::scale(tape, t, S(0.7));
    return ops::sum(tape, ops::gelu(tape, t));
  };
  TapeT<S> tape;
  tape.backward(loss(tape));
  for (const auto& leaf : leaves) {
    INFO(leaf.shape());
    std::vector<double> x = leaf.value().to_vector();
    const auto num = liere::test::numeric_gradient(
        [&](const std::vector<double>& xi) {
          std::copy(xi.begin(), xi.end(), leaf.data());
          auto guard = tape.no_grad();
          return double(loss(tape).item());
        },
        x);
    std::copy(x.begin(), x.end(), leaf.data());
    CHECK(liere::test::max_rel_err(leaf.grad().to_vector(), num) < 1e-6);
  }
}

TEST_CASE("tape: parameter gradients accumulate over backward passes until zero_grad", "[engine][tape]") {
  TinyNet<double> net(8);
  Rng data(9);
  auto img = random_tensor<double>({2, 2, 4, 4}, data);
  TapeT<double> tape;
  tape.backward(net.loss(tape, img, kLabels));
  std::vector<std::vector<double>> once;
  for (const auto& p : net.params) once.push_back(p.grad().to_vector());
  tape.backward(net.loss(tape, img, kLabels));
  std::size_t i = 0;
  for (const auto& p : net.params) {
    auto twice = p.grad().to_vector();
    for (std::size_t k = 0; k < twice.size(); ++k) REQUIRE(twice[k] == 2 * once[i][k]);  // g + g is exact
    ++i;
  }
  net.params.zero_grad();
  for (const auto& p : net.params)
    for (double v : p.grad().to_vector()) REQUIRE(v == 0.0);
}

TEST_CASE("tape: no-grad mode and evaluation mode record nothing", "[engine][tape]") {
  TinyNet<float> net(10, 0.5);
  Rng data(11);
  auto img = random_tensor<float>({2, 2, 4, 4}, data);
  Tape tape;
  {
    auto guard = tape.no_grad();
    CHECK_FALSE(tape.grad_enabled());
    const Var loss = net.loss(tape, img, kLabels);
    CHECK(tape.size() == 0);
    CHECK_FALSE(loss.requires_grad());
    CHECK_THROWS_WITH(tape.backward(loss), Catch::Contains("does not require a gradient"));
  }
  CHECK(tape.grad_enabled());
  // Evaluation mode: dropout is the identity, so two forwards agree and the Rng is untouched.
  tape.set_training(false);
  const std::string state = tape.rng().state();
  auto guard = tape.no_grad();
  const float l1 = net.loss(tape, img, kLabels).item(), l2 = net.loss(tape, img, kLabels).item();
  CHECK(l1 == l2);
  CHECK(tape.rng().state() == state);
  const Var x(img);
  CHECK(ops::dropout(tape, x, 0.5).data() == x.data());  // the same Var back
}

TEST_CASE("tape: inputs without gradients, unused outputs, reshaped views", "[engine][tape]") {
  Rng rng(12);
  nn::Params params;
  nn::Linear fc(params, "fc", 4, 3, rng);
  Tape tape;
  const Var x(random_tensor<float>({5, 4}, rng));  // data: no gradient
  const Var y = fc(tape, x);
  CHECK(y.requires_grad());
  CHECK_FALSE(x.requires_grad());
  const Var unused = ops::gelu(tape, y);  // recorded, but no gradient will reach it
  const Var loss = ops::sum(tape, y.reshape({15}));
  tape.backward(loss);
  CHECK_FALSE(unused.has_grad());
  CHECK(y.has_grad());
  // d sum / dy = 1 everywhere, seen through the reshaped view.
  for (float v : y.grad().to_vector()) CHECK(v == 1.0f);
  // dW = Σ_n x_n (every output row gets the same 1).
  for (Index o = 0; o < 3; ++o)
    for (Index c = 0; c < 4; ++c) {
      float s = 0;
      for (Index n = 0; n < 5; ++n) s += x.value()(n, c);
      CHECK(fc.weight().grad()(o, c) == Approx(s).epsilon(1e-6));
    }
  for (float v : fc.bias().grad().to_vector()) CHECK(v == 5.0f);
  // mul with one factor a constant: the other's gradient is dy ⊙ the constant, whichever side the constant is on.
  for (bool const_first : {true, false}) {
    INFO("constant first " << const_first);
    const Var k(random_tensor<float>({6}, rng)), z(random_tensor<float>({6}, rng), true);
    Tape t2;
    t2.backward(ops::sum(t2, const_first ? ops::mul(t2, k, z) : ops::mul(t2, z, k)));
    CHECK(z.grad().to_vector() == k.value().to_vector());
  }
}

TEST_CASE("tape: shape mismatches throw errors naming both shapes", "[engine][tape]") {
  Tape tape;
  const Var a(Tensor::zeros({2, 3})), b(Tensor::zeros({3, 2})), w(Tensor::zeros({4, 5}));
  CHECK_THROWS_AS(ops::add(tape, a, b), liere::Error);
  CHECK_THROWS_WITH(ops::add(tape, a, b), Catch::Contains("(2, 3)") && Catch::Contains("(3, 2)"));
  CHECK_THROWS_WITH(ops::linear(tape, a, w), Catch::Contains("(2, 3)") && Catch::Contains("(4, 5)"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 3}).copy_from(Tensor::zeros({6})), Catch::Contains("(6) != (2, 3)"));
  CHECK_THROWS_WITH(Tensor::zeros({2, 3}).view({4}), Catch::Contains("as (4)"));
  CHECK_THROWS_WITH(ops::add_broadcast(tape, a, b), Catch::Contains("(3, 2) is not the trailing part of (2, 3)"));
  const std::vector<int> labels = {0, 7};
  const Var logits(Tensor::zeros({2, 3}), true);
  CHECK_THROWS_WITH(ops::cross_entropy<float>(tape, logits, labels), Catch::Contains("label 7"));
  nn::Params params;
  params.add("w", {2});
  CHECK_THROWS_WITH(params.add("w", {3}), Catch::Contains("'w' is registered twice"));
  CHECK_THROWS_WITH(params["nope"], Catch::Contains("no parameter named 'nope'"));
}

TEST_CASE("tensor: views share storage, clones do not; printing of shapes", "[engine][tape]") {
  Tensor t = Tensor::zeros({2, 3, 4});
  CHECK(t.shape().str() == "(2, 3, 4)");
  CHECK(t.numel() == 24);
  CHECK(t.shape().rows() == 6);
  Tensor v = t.view({6, 4});
  v(1, 2) = 5.0f;
  CHECK(t(0, 1, 2) == 5.0f);
  Tensor s = t.select(1);
  s(0, 0) = 7.0f;
  CHECK(t(1, 0, 0) == 7.0f);
  Tensor c = t.clone();
  c(0, 0, 0) = 1.0f;
  CHECK(t(0, 0, 0) == 0.0f);
  // Copies of every size: one memcpy up to cpu::kCopyGrain elements, then chunks of 2^14 in parallel with a partial
  // last one; byte tensors whose size is not a multiple of 4 go byte by byte, the others in 4-byte words.
  for (Index n : {Index(5), cpu::kCopyGrain + 5, 3 * cpu::kCopyGrain + 1}) {
    INFO("n " << n);
    Tensor a(Shape{n});
    for (Index i = 0; i < n; ++i) a(i) = float(i % 1000) - 0.5f;
    const std::vector<float> back = a.clone().to_vector();
    REQUIRE(Index(back.size()) == n);
    Index wrong = 0;
    for (Index i = 0; i < n; ++i) wrong += back[std::size_t(i)] != float(i % 1000) - 0.5f;
    CHECK(wrong == 0);
  }
  for (Index n : {Index(1), Index(7), Index(8), Index(13)}) {
    INFO("bytes " << n);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) b[std::size_t(i)] = std::uint8_t(3 * i + 1);
    const auto bt = TensorT<std::uint8_t>::from(Shape{n}, b);
    CHECK(bt.to_vector() == b);
    CHECK(bt.clone().to_vector() == b);
  }
  CHECK_THROWS_WITH(t(2, 0, 0), Catch::Contains("out of range"));
  CHECK(Shape{}.numel() == 1);
  CHECK_THROWS_WITH((Shape{1, 2, 3, 4, 5, 6}), Catch::Contains("at most 5"));
  float buf[6] = {1, 2, 3, 4, 5, 6};
  Tensor w = Tensor::wrap(buf, {2, 3});
  CHECK(w(1, 2) == 6.0f);
}

TEST_CASE("buffer pool: a released block serves requests of more than half its size, and only those",
          "[engine][tape]") {
  BufferPool pool;
  std::size_t cap = 0;
  void* p = pool.acquire(256, &cap);
  REQUIRE(cap == 256);
  pool.release(p, cap);
  std::size_t cap2 = 0;
  void* q = pool.acquire(200, &cap2);  // 256 bytes serve 200 (rounded to 256): the same block
  CHECK(q == p);
  CHECK(cap2 == 256);
  pool.release(q, cap2);
  q = pool.acquire(128, &cap2);  // 256 ≤ 2·128: still the cached block, with its true capacity
  CHECK(q == p);
  CHECK(cap2 == 256);
  pool.release(q, cap2);
  void* r = pool.acquire(64, &cap2);  // 256 > 2·64: a fresh 64-byte block, the 256 stay cached
  CHECK(r != p);
  CHECK(cap2 == 64);
  CHECK(pool.stats().reuses == 2);
  CHECK(pool.stats().allocations == 2);
  CHECK(pool.stats().bytes_cached == 256);
  pool.release(r, cap2);
  pool.trim();
  CHECK(pool.stats().bytes_cached == 0);
}

TEST_CASE("tape: activation memory is reused from step to step and released after backward", "[engine][tape]") {
  TinyNet<float> net(13, 0.1);
  Rng data(14);
  auto img = random_tensor<float>({2, 2, 4, 4}, data);
  Tape tape;
  auto step = [&] {
    tape.backward(net.loss(tape, img, kLabels));
    net.params.zero_grad();
  };
  step();  // fills the pool
  step();
  const PoolStats before = buffer_pool().stats();
  for (int i = 0; i < 3; ++i) step();
  const PoolStats after = buffer_pool().stats();
  CHECK(after.allocations == before.allocations);  // no fresh block: every buffer came from the pool
  CHECK(after.reuses > before.reuses);
  CHECK(after.bytes_in_use == before.bytes_in_use);  // nothing leaked across steps
  // A forward whose backward is dropped: clear() releases what the closures held.
  {
    const Var loss = net.loss(tape, img, kLabels);
    CHECK(tape.size() > 0);
    tape.clear();
  }
  CHECK(buffer_pool().stats().bytes_in_use == before.bytes_in_use);
}

namespace {
// Points in [-1, 1]², class = quadrant parity (XOR): not linearly separable.
void xor_data(std::size_t n, Rng& rng, Tensor& x, std::vector<int>& y) {
  x = Tensor(Shape{Index(n), 2});
  y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = rng.uniform(-1, 1), b = rng.uniform(-1, 1);
    x(Index(i), 0) = float(a);
    x(Index(i), 1) = float(b);
    y[i] = (a > 0) != (b > 0);
  }
}
}  // namespace

TEST_CASE("a small MLP learns XOR with the tape and Adam", "[engine][tape][train]") {
  Rng rng(15);
  Tensor xs;
  std::vector<int> ys;
  xor_data(256, rng, xs, ys);
  nn::Params params;
  nn::Mlp mlp(params, "mlp", 2, 32, 2, rng);
  optim::Adam opt(params.all(), optim::adam_config(0.02));
  Tape tape;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const Var loss = ops::cross_entropy<float>(tape, mlp(tape, Var(xs)), ys);
    if (step == 0) first = loss.item();
    last = loss.item();
    tape.backward(loss);
    opt.step();
    opt.zero_grad();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 0.6);
  CHECK(last < 0.15);
  auto guard = tape.no_grad();
  const Var logits = mlp(tape, Var(xs));
  int correct = 0;
  for (Index i = 0; i < 256; ++i) correct += (logits.value()(i, 1) > logits.value()(i, 0)) == (ys[std::size_t(i)] == 1);
  CHECK(correct >= 245);
}

TEST_CASE("determinism: two training runs give bit-identical parameters (1 and 2 threads)", "[engine][tape]") {
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    TinyNet<float> net(16, 0.2);
    optim::Adam opt(optim::decay_groups(net.params.all(), 0.05), optim::adamw_config(1e-2, 0.05));
    Tape tape(17);
    Rng data(18);
    for (int step = 0; step < 4; ++step) {
      auto img = random_tensor<float>({2, 2, 4, 4}, data);
      tape.backward(net.loss(tape, img, kLabels));
      opt.step();
      opt.zero_grad();
    }
    std::vector<float> all;
    for (const auto& p : net.params) {
      auto v = p.value().to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const int threads = omp_get_max_threads();
  const auto a = run(1), b = run(1);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  const auto c = run(2), d = run(2);
  CHECK(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)) == 0);
  omp_set_num_threads(threads);
}

TEST_CASE("modules: names follow timm's state_dict keys and ViT initialisation", "[engine][nn]") {
  Rng rng(19);
  nn::Params params;
  nn::PatchEmbed pe2(params, "patch_embed", 3, 192, 4, rng);
  nn::PatchEmbed pe3(params, "video.patch_embed", 3, 64, 16, rng, 2);
  nn::Mlp mlp(params, "blocks.3.mlp", 192, 768, 192, rng);
  nn::LayerNorm ln(params, "blocks.3.norm1", 192);
  CHECK(params["patch_embed.proj.weight"].shape() == Shape{192, 3, 4, 4});
  CHECK(params["video.patch_embed.proj.weight"].shape() == Shape{64, 3, 2, 16, 16});
  CHECK(params["blocks.3.mlp.fc1.weight"].shape() == Shape{768, 192});
  CHECK(params["blocks.3.mlp.fc2.bias"].shape() == Shape{192});
  CHECK(pe2.num_tokens(32, 32) == 64);
  CHECK(pe3.num_tokens(224, 224, 16) == 8 * 14 * 14);
  // Truncated normal, std 0.02; biases 0; LayerNorm 1 and 0.
  auto w = params["blocks.3.mlp.fc1.weight"].value().to_vector();
  double m = 0, v = 0;
  for (float x : w) m += x / w.size();
  for (float x : w) v += (x - m) * (x - m) / w.size();
  CHECK(std::abs(m) < 1e-3);
  CHECK(std::sqrt(v) == Approx(0.02).epsilon(0.02));
  for (float x : params["blocks.3.mlp.fc1.bias"].value().to_vector()) CHECK(x == 0.0f);
  for (float x : params["blocks.3.norm1.weight"].value().to_vector()) CHECK(x == 1.0f);
  // The same seed gives the same model.
  Rng rng2(19);
  nn::Params params2;
  nn::PatchEmbed again(params2, "patch_embed", 3, 192, 4, rng2);
  CHECK(again.weight().value().to_vector() == pe2.weight().value().to_vector());
}

TEST_CASE("rng: state round trip, normal moments, shuffle", "[engine][rng]") {
  Rng a(20);
  a.normal();
  const std::string s = a.state();
  const double x1 = a.normal(), x2 = a.uniform();
  Rng b(0);
  b.set_state(s);
  CHECK(b.normal() == x1);
  CHECK(b.uniform() == x2);
  CHECK_THROWS_WITH(b.set_state("garbage"), Catch::Contains("not a std::mt19937_64 state"));
  double m = 0, v = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double z = a.normal();
    m += z / n;
    v += z * z / n;
  }
  CHECK(std::abs(m) < 0.03);
  CHECK(v == Approx(1).epsilon(0.03));
  for (int i = 0; i < 1000; ++i) {
    const double t = a.trunc_normal(0, 1, -0.5, 0.5);
    REQUIRE((t >= -0.5 && t <= 0.5));
  }
  std::vector<int> perm(10);
  for (int i = 0; i < 10; ++i) perm[i] = i;
  a.shuffle(perm.begin(), perm.end());
  std::vector<int> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 10; ++i) CHECK(sorted[i] == i);
}

TEST_CASE("tape: add(x, x) and a Var used by several ops get every contribution", "[engine][tape]") {
  using S = double;
  Rng rng(22);
  const VarT<S> x(random_tensor<S>({3, 4}, rng), true);
  TapeT<S> tape;
  // L = Σ gelu(x + x) + Σ (x + gelu(x)): x is used by add twice (same buffer, fresh once), by gelu twice.
  const VarT<S> loss =
      ops::add(tape, ops::sum(tape, ops::gelu(tape, ops::add(tape, x, x))), ops::sum(tape, ops::add(tape, x, ops::gelu(tape, x))));
  tape.backward(loss);
  const auto g = x.grad().to_vector();
  const auto v = x.value().to_vector();
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto dgelu = [](double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)) + z * std::exp(-z * z / 2) / std::sqrt(2 * M_PI); };
    CHECK(g[i] == Approx(2 * dgelu(2 * v[i]) + 1 + dgelu(v[i])).epsilon(1e-13));
  }
}
