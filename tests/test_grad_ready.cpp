// What data-parallel training (examples/app/data_parallel.hpp, docs/scaling.md) asks of the engine:
//   Tape::watch announces every parameter exactly once, when its gradient is final (the value at the announcement
//   is the value after backward), and the late layers' parameters before backward ends (so their all-reduce can
//   overlap the rest of backward);
//   Tape::set_batch_shard gives a shard of a batch the dropout mask its samples have in the whole batch, so the
//   ranks' forward passes together are the one-process forward pass.
#include <catch2/catch.hpp>
#include <liere/nn/engine.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace liere;

nn::VitConfig tiny(const std::string& pe) {
  nn::VitConfig c;
  c.image = {8, 8};
  c.channels = 1;
  c.patch = 4;
  c.dim = 16;
  c.depth = 3;
  c.heads = 2;
  c.mlp_hidden = 32;
  c.classes = 3;
  c.drop = 0.2;
  c.pe.set("pe", pe);
  if (pe != "absolute" && pe != "none") c.pe.set("block", "4");
  return c;
}

Tensor batch(int B, std::uint64_t seed, std::vector<int>& y) {
  Tensor x(Shape{B, 1, 8, 8});
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0, 1);
  for (Index i = 0; i < x.numel(); ++i) x.data()[i] = n(g);
  y.resize(std::size_t(B));
  for (int i = 0; i < B; ++i) y[std::size_t(i)] = int(g() % 3);
  return x;
}

}  // namespace

TEST_CASE("Tape::watch: every parameter announced once, with its final gradient", "[engine][tape][data-parallel]") {
  for (const char* pe : {"liere", "absolute", "rope-mixed", "none"}) {
    INFO("pe " << pe);
    nn::Params params;
    nn::Vit model(params, tiny(pe), 3);
    std::vector<int> y;
    const Tensor x = batch(4, 11, y);
    const auto& all = params.all();
    // Two steps: the second starts from gradients zeroed by zero_grad, as training does.
    for (int step = 0; step < 2; ++step) {
      std::vector<std::vector<float>> at_ready(all.size());
      std::vector<int> announced(all.size(), 0), tick_at(all.size(), -1);
      int ticks = 0;
      Tape tape(77 + std::uint64_t(step));
      tape.watch(
          all,
          [&](std::size_t k) {
            ++announced[k];
            tick_at[k] = ticks;
            const Tensor g = all[k].grad();
            at_ready[k].assign(g.data(), g.data() + g.numel());
          },
          [&] { ++ticks; });
      Var loss = ops::cross_entropy(tape, model.forward(tape, Var(x)), y);
      tape.backward(loss);
      std::size_t early = 0;
      for (std::size_t k = 0; k < all.size(); ++k) {
        INFO(all[k].name());
        REQUIRE(announced[k] == 1);
        const Tensor g = all[k].grad();
        REQUIRE(std::equal(at_ready[k].begin(), at_ready[k].end(), g.data()));  // exactly: nothing was added later
        early += tick_at[k] < ticks;
      }
      // The head and the last block are final long before backward ends.
      CHECK(early >= all.size() / 2);
      CHECK(tick_at[all.size() - 1] < ticks / 2);
      params.zero_grad();
    }
  }
  // A watch is for a tape without ops.
  nn::Params params;
  nn::Vit model(params, tiny("liere"), 3);
  std::vector<int> y;
  Tape tape;
  model.forward(tape, Var(batch(2, 1, y)));
  CHECK_THROWS_WITH(tape.watch(params.all(), [](std::size_t) {}), Catch::Contains("before the forward pass"));
}

TEST_CASE("Tape::set_batch_shard: shards of a batch get the whole batch's dropout masks", "[engine][tape][data-parallel]") {
  const int B = 6;
  const Shape shape{B, 5, 7};  // (B, T, C)
  Tensor x(shape);
  std::mt19937_64 g(5);
  std::normal_distribution<float> n(0, 1);
  for (Index i = 0; i < x.numel(); ++i) x.data()[i] = n(g) + 3.0f;  // no zeros: a zero output is a dropped element
  auto drop = [&](Index first, Index count, bool shard) {
    Tape tape(1234);
    if (shard) tape.set_batch_shard(first, count);
    Tensor part(Shape{count, 5, 7});
    std::copy_n(x.data() + first * 35, count * 35, part.data());
    const Tensor y = ops::dropout(tape, Var(part), 0.5).value();
    return std::vector<float>(y.data(), y.data() + y.numel());
  };
  const std::vector<float> whole = drop(0, B, false);
  CHECK(std::count(whole.begin(), whole.end(), 0.0f) > 40);  // about half of 210 dropped
  for (int N : {2, 3, 6}) {
    std::vector<float> joined;
    for (int r = 0; r < N; ++r) {
      const std::vector<float> part = drop(r * B / N, B / N, true);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    CHECK(joined == whole);
  }
  // Without the shard, a part of the batch would reuse the masks of samples 0, 1, …
  const std::vector<float> unsharded = drop(3, 3, false);
  CHECK(!std::equal(unsharded.begin(), unsharded.end(), whole.begin() + 3 * 35));
  Tape tape;
  CHECK_THROWS_WITH(tape.set_batch_shard(2, 0), Catch::Contains("bad shard"));
  tape.set_batch_shard(1, 4);
  CHECK_THROWS_WITH(ops::dropout(tape, Var(Tensor(Shape{3, 5})), 0.5), Catch::Contains("not 4 samples"));
}
