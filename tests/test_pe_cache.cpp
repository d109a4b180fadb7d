// The rotation-table cache of the engine's position-encoding module (nn/position_encoding.hpp): forwards without
// gradients reuse the tables while the parameters, positions and device stay the same; an optimizer step, a write to
// the parameters, a checkpoint-style load or a new grid invalidate them; freeze() and bake() for inference. The
// cached tables are checked against a fresh computation, and whole-model outputs against the uncached path.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <limits>
#include <liere/nn/engine.hpp>
#include <liere/optim/adam.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using liere::Index;
using liere::Shape;
using S = float;
using Tensor = liere::TensorT<S>;
using Tape = liere::TapeT<S>;

liere::nn::VitConfig small_config(const std::string& pe, int block = 4) {
  liere::nn::VitConfig c;
  c.image = {8, 12};
  c.channels = 2;
  c.patch = 4;
  c.dim = 16, c.depth = 2, c.heads = 2, c.mlp_hidden = 24, c.classes = 3;
  c.pe.set("pe", pe);
  if (pe == "liere") c.pe.set("block", std::to_string(block));
  return c;
}

Tensor random_images(const liere::nn::VitConfig& c, int B, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0, 1);
  Shape s{B, c.channels};
  for (int d : c.image) s.push_back(d);
  Tensor x(s);
  for (Index i = 0; i < x.numel(); ++i) x.data()[i] = n(g);
  return x;
}

std::vector<S> values(const Tensor& t) { return std::vector<S>(t.data(), t.data() + t.numel()); }

// The tables of the module for `grid`, computed fresh (a forward that records gradients never uses the cache).
std::vector<S> fresh_tables(liere::nn::PositionEncodingModuleT<S>& m, const std::vector<int>& grid) {
  Tape tape;
  const auto e = m.begin(tape, grid);
  REQUIRE(e.tables.requires_grad());
  return values(e.tables.value());
}

}  // namespace

TEST_CASE("PE cache: forwards without gradients reuse the tables until the parameters change", "[pe][cache]") {
  for (const std::string pe : {"liere", "rope-mixed", "string"}) {
    INFO(pe);
    const auto cfg = small_config(pe, 4);
    liere::nn::ParamsT<S> params;
    liere::nn::VitT<S> model(params, cfg, 3);
    auto& m = model.pe();
    const std::vector<int> grid = cfg.grid();
    auto eval_tables = [&] {
      Tape tape;
      auto ng = tape.no_grad();
      const auto e = m.begin(tape, grid);
      CHECK_FALSE(e.tables.requires_grad());
      return values(e.tables.value());
    };
    const std::uint64_t n0 = m.table_computations();
    const std::vector<S> t1 = eval_tables();
    CHECK(m.table_computations() == n0 + 1);
    const std::vector<S> t2 = eval_tables();
    CHECK(m.table_computations() == n0 + 1);  // cached
    CHECK(t1 == t2);
    CHECK(t1 == fresh_tables(m, grid));  // the cached tables are the tables
    const std::uint64_t n1 = m.table_computations();

    SECTION("an optimizer step invalidates the cache") {
      // A training step: forward with gradients, backward, Adam.
      liere::optim::AdamConfig ac;
      ac.lr = 1e-2;
      liere::optim::AdamT<S> adam(params.all(), ac);
      Tape tape;
      auto y = liere::ops::cross_entropy(tape, model.forward(tape, liere::VarT<S>(random_images(cfg, 2, 1))),
                                                   std::vector<int>{0, 2});
      tape.backward(y);
      adam.step();
      const std::uint64_t n2 = m.table_computations();
      const std::vector<S> t3 = eval_tables();
      CHECK(m.table_computations() == n2 + 1);
      CHECK(t3 != t1);
      CHECK(t3 == fresh_tables(m, grid));
      CHECK(eval_tables() == t3);
      CHECK(m.table_computations() == n2 + 2);  // + the fresh one above, not the cached one
    }
    SECTION("a write to the parameters (as a checkpoint load does) invalidates the cache") {
      m.encoding().params()[0] += 0.25f;
      const std::vector<S> t3 = eval_tables();
      CHECK(m.table_computations() == n1 + 1);
      CHECK(t3 != t1);
      CHECK(t3 == fresh_tables(m, grid));
    }
    SECTION("another grid invalidates the cache, and going back recomputes the first tables") {
      Tape tape;
      auto ng = tape.no_grad();
      (void)m.begin(tape, {3, 3});
      CHECK(m.table_computations() == n1 + 1);
      CHECK(eval_tables() == t1);
      CHECK(m.table_computations() == n1 + 2);
    }
  }
}

TEST_CASE("PE cache: a whole-model forward without gradients gives the same logits, cached or not", "[pe][cache]") {
  const auto cfg = small_config("liere", 8);
  liere::nn::ParamsT<S> params;
  liere::nn::VitT<S> model(params, cfg, 5);
  const Tensor x = random_images(cfg, 3, 2);
  auto logits = [&](bool grad) {
    Tape tape;
    if (!grad) {
      auto ng = tape.no_grad();
      return values(model.forward(tape, liere::VarT<S>(x)).value());
    }
    return values(model.forward(tape, liere::VarT<S>(x)).value());
  };
  const std::vector<S> with_grad = logits(true);
  const std::uint64_t n = model.pe().table_computations();
  CHECK(logits(false) == with_grad);
  CHECK(logits(false) == with_grad);
  CHECK(model.pe().table_computations() == n + 1);
}

TEST_CASE("PE freeze and bake: constants for inference, no gradient to the encoding", "[pe][cache]") {
  const auto cfg = small_config("liere", 4);
  liere::nn::ParamsT<S> params;
  liere::nn::VitT<S> model(params, cfg, 7);
  auto& m = model.pe();
  const Tensor x = random_images(cfg, 2, 3);
  auto train_forward = [&] {
    Tape tape;
    auto y = liere::ops::cross_entropy(tape, model.forward(tape, liere::VarT<S>(x)), std::vector<int>{1, 0});
    tape.backward(y);
    return double(y.value().data()[0]);
  };
  const double loss_trainable = train_forward();
  double pe_grad = 0;
  for (S g : m.encoding().grads()) pe_grad += std::abs(g);
  CHECK(pe_grad > 0);
  params.zero_grad();

  m.bake(cfg.grid());
  CHECK(m.frozen());
  const std::uint64_t n = m.table_computations();
  const double loss_frozen = train_forward();  // the rest of the model still trains
  CHECK(m.table_computations() == n);          // baked: nothing computed
  CHECK(loss_frozen == loss_trainable);        // the same forward
  for (S g : m.encoding().grads()) CHECK(g == 0.0f);
  bool other_grads = false;
  for (const auto& p : params.all())
    if (p.name().rfind("pe.", 0) != 0)
      for (Index i = 0; i < p.grad().numel(); ++i) other_grads |= p.grad().data()[i] != 0;
  CHECK(other_grads);

  // Frozen tables still follow the parameters when someone changes them.
  m.encoding().params()[1] -= 0.5f;
  (void)train_forward();
  CHECK(m.table_computations() == n + 1);
  m.unfreeze();
  CHECK_FALSE(m.frozen());
}

TEST_CASE("PE tables: a NaN or Inf generator stops the forward with a message naming the layer and head",
          "[pe][bad-input]") {
  auto cfg = small_config("liere", 4);
  liere::nn::ParamsT<S> params;
  liere::nn::VitT<S> model(params, cfg, 9);
  auto& m = model.pe();
  const std::vector<int> grid = cfg.grid();
  (void)fresh_tables(m, grid);  // finite: fine
  // layer-head sharing: set 3 = layer 1, head 1; each set holds 2 axes x 2 blocks (head dim 8) x 6 coordinates
  auto p = m.encoding().params();
  REQUIRE(p.size() == 4 * 24);
  p[3 * 24 + 14] = std::numeric_limits<S>::infinity();
  Tape tape;
  REQUIRE_THROWS_WITH(m.begin(tape, grid), Catch::Contains("layer 1, head 1 (parameter set 3, axis 1) is infinite") &&
                                              Catch::Contains("the training diverged"));
  p[3 * 24 + 14] = std::numeric_limits<S>::quiet_NaN();
  Tape tape2;
  auto guard = tape2.no_grad();
  REQUIRE_THROWS_WITH(m.begin(tape2, grid), Catch::Contains("layer 1, head 1") && Catch::Contains("NaN"));
}

TEST_CASE("PE tables: generators that are not finite in the first forward blame the initialisation, not the training",
          "[pe][bad-input]") {
  auto cfg = small_config("liere", 4);
  cfg.pe.init = {liere::PEInit::Kind::normal, 1e300};  // past float's range (PEConfig::set refuses it; code may not)
  liere::nn::ParamsT<S> params;
  liere::nn::VitT<S> model(params, cfg, 9);
  auto& m = model.pe();
  // The first forward, and what the trainer calls when a first loss is not finite (on a device, where the forward
  // does not read the generators).
  for (int way = 0; way < 2; ++way) {
    std::string message;
    try {
      Tape tape;
      if (way == 0) (void)m.begin(tape, cfg.grid());
      else m.check_generators();
    } catch (const liere::Error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find("layer 0, head 0 (parameter set 0, axis 0) is infinite") != std::string::npos);
    CHECK(message.find("before any update") != std::string::npos);
    CHECK(message.find("--init normal:1e+300") != std::string::npos);
    CHECK(message.find("diverged") == std::string::npos);
  }
  // The default init and a value written before the first forward: not the training either.
  liere::nn::ParamsT<S> params2;
  liere::nn::VitT<S> model2(params2, small_config("liere", 4), 9);
  model2.pe().encoding().params()[5] = std::numeric_limits<S>::quiet_NaN();
  Tape tape;
  REQUIRE_THROWS_WITH(model2.pe().begin(tape, cfg.grid()),
                      Catch::Contains("layer 0, head 0 (parameter set 0, axis 0) is NaN before any update (the first "
                                      "forward pass): the initial values are not finite"));
}

TEST_CASE("PE parameters: the absolute table and kinds whose generators are their parameters register their own",
          "[pe][params]") {
  // liere (every block size), rope-mixed-official, liere-commute and rope-mixed (its frequencies are its generators'
  // coordinates): the parameter owns its storage, so ParamsT::to moves it to the model's device and the tables op
  // reads it there (the absolute table: add_to_tokens adds it there); the other kinds' parameters stay over the
  // encoding's.
  for (const std::string pe :
       {"liere", "rope-mixed-official", "liere-commute", "rope-mixed", "comrope-ap4", "string", "absolute"}) {
    INFO(pe);
    liere::nn::ParamsT<S> params;
    liere::nn::VitT<S> model(params, small_config(pe, 4), 3);
    const bool direct =
        pe == "liere" || pe == "rope-mixed-official" || pe == "liere-commute" || pe == "rope-mixed" || pe == "absolute";
    CHECK(model.pe().layout().generators_are_params() == (direct && pe != "absolute"));
    for (const auto& p : model.pe().parameters()) CHECK(p.owns_storage() == direct);
  }
}

TEST_CASE("PE parameters: encoding() shows the parameter as it is, and writes through it reach it element by element",
          "[pe][params]") {
  const auto cfg = small_config("liere", 4);
  liere::nn::ParamsT<S> params;
  liere::nn::VitT<S> model(params, cfg, 11);
  auto& m = model.pe();
  const liere::ParameterT<S>& gen = params["pe.generators"];
  const Tensor x = random_images(cfg, 2, 4);
  auto train_step = [&](liere::optim::AdamT<S>& adam) {
    Tape tape;
    tape.backward(liere::ops::cross_entropy(tape, model.forward(tape, liere::VarT<S>(x)), std::vector<int>{2, 1}));
    adam.step();
  };
  liere::optim::AdamConfig ac;
  ac.lr = 1e-2;
  liere::optim::AdamT<S> adam(params.all(), ac);

  // After a training step, encoding() hands out the values and the gradient the optimizer saw.
  train_step(adam);
  const std::span<S> host = m.encoding().params();
  REQUIRE(host.size() == std::size_t(gen.numel()));
  CHECK(std::equal(host.begin(), host.end(), gen.value().data()));
  const std::span<S> hgrad = m.encoding().grads();
  CHECK(std::equal(hgrad.begin(), hgrad.end(), gen.grad().data()));
  bool nonzero = false;
  for (S g : hgrad) nonzero |= g != 0;
  CHECK(nonzero);

  // A write through the copy handed out, then another optimizer step before the next forward: the written element
  // takes the written value at the next forward, every other element keeps what the optimizer made of it.
  const S written = host[5] + 1.5f;
  host[5] = written;
  const std::vector<S> before_step = gen.value().to_vector();
  adam.step();  // the gradients of the step above again
  std::vector<S> after_step = gen.value().to_vector();
  REQUIRE(after_step != before_step);
  {
    Tape tape;
    auto ng = tape.no_grad();
    (void)m.begin(tape, cfg.grid());
  }
  CHECK(gen.value().data()[5] == written);
  after_step[5] = written;
  CHECK(gen.value().to_vector() == after_step);
  // Writes through two calls of encoding() before a forward: both reach the parameter.
  m.encoding().params()[1] = 0.5f;
  m.encoding().params()[2] = -0.5f;
  {
    Tape tape;
    auto ng = tape.no_grad();
    (void)m.begin(tape, cfg.grid());
  }
  CHECK(gen.value().data()[1] == 0.5f);
  CHECK(gen.value().data()[2] == -0.5f);
  // Nothing written since: the next forward leaves the parameter alone.
  params.zero_grad();
  train_step(adam);
  const std::vector<S> trained = gen.value().to_vector();
  {
    Tape tape;
    auto ng = tape.no_grad();
    (void)m.begin(tape, cfg.grid());
  }
  CHECK(gen.value().to_vector() == trained);
}

TEST_CASE("PE parameters: a pending backward takes the parameters of its forward, whatever happens to them before it",
          "[pe]") {
  // The kinds whose generators are their parameters (liere, rope-mixed: the tables op reads them on their device)
  // and those whose backward goes through their parameters' values (ComRoPE-LD's θ·S chain, STRING's Cayley map):
  // a backward that runs after a parameter changed (a write to it, a write through encoding() that a forward without
  // gradients applies) must still give the gradients of the forward it belongs to, bit for bit.
  for (const std::string pe : {"liere", "rope-mixed", "comrope-ld", "string"}) {
    INFO(pe);
    auto cfg = small_config(pe, 4);
    if (pe == "comrope-ld") cfg.pe.set("block", "4");
    const Tensor x = random_images(cfg, 2, 5);
    std::vector<std::vector<S>> grads[3];
    for (int variant = 0; variant < 3; ++variant) {
      liere::nn::ParamsT<S> params;
      liere::nn::VitT<S> model(params, cfg, 3);
      CHECK(model.pe().layout().generators_are_params() == (pe == "liere" || pe == "rope-mixed"));
      const auto ps = model.pe().parameters();
      Tape tape;
      auto loss = liere::ops::cross_entropy(tape, model.forward(tape, liere::VarT<S>(x)), std::vector<int>{0, 2});
      if (variant == 1) {
        for (const auto& p : ps) p.value().data()[0] += 0.5f;  // in place, after the forward
      } else if (variant == 2) {
        model.pe().encoding().params()[1] -= 0.25f;  // through encoding(), applied by the next forward
        Tape t2;
        auto ng = t2.no_grad();
        (void)model.forward(t2, liere::VarT<S>(x));
      }
      tape.backward(loss);
      for (const auto& p : ps) grads[variant].push_back(values(p.grad()));
    }
    CHECK(grads[1] == grads[0]);
    CHECK(grads[2] == grads[0]);
  }
}

TEST_CASE("PE parameters: check_generators names the layer and head of a non-finite generator", "[pe][bad-input]") {
  for (const std::string pe : {"liere", "comrope-ap4"}) {
    INFO(pe);
    liere::nn::ParamsT<S> params;
    liere::nn::VitT<S> model(params, small_config(pe, 4), 13);
    CHECK_NOTHROW(model.pe().check_generators());
    // Written into the registered parameter, as an optimizer step or a checkpoint load would (set 2 = layer 1,
    // head 0 under layer-head sharing).
    const liere::ParameterT<S>& p = model.pe().parameters().front();
    const Index per_set = p.numel() / 4;
    p.value().data()[2 * per_set + 1] = std::numeric_limits<S>::quiet_NaN();
    CHECK_THROWS_WITH(model.pe().check_generators(), Catch::Contains("layer 1, head 0") && Catch::Contains("NaN"));
  }
}
