// The trainers' loop (examples/app/trainer.hpp): resuming is exact, a NaN loss stops training and leaves the
// last good checkpoint and the weights before the step intact, a checkpoint of another model or encoding is refused
// with a clear error, the flags parser rejects what it does not know and checks every kind of value, and
// ModelOptions gives every trainer the same model flags.
#include <app/compare.hpp>
#include <app/trainer.hpp>
#include <catch2/catch.hpp>
#include <data_tools/plot.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <thread>
#include <unistd.h>

#include "temp_dir.hpp"

namespace {

using namespace liere;

nn::VitConfig tiny(const std::string& pe) {
  nn::VitConfig c;
  c.image = {8, 8};
  c.channels = 1;
  c.patch = 4;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.mlp_hidden = 32;
  c.classes = 3;
  c.drop = 0.1;  // dropout on: its generator must be restored too
  c.pe.set("pe", pe);
  c.pe.set("block", "4");
  return c;
}

app::TrainOptions options(int epochs, const std::string& save = "", const std::string& resume = "") {
  app::TrainOptions o;
  o.epochs = epochs;
  o.batch = 4;
  o.eval_batch = 5;
  o.lr = 3e-3;
  o.warmup = 1;
  o.threads = 1;
  o.seed = 5;
  o.save = save;
  o.resume = resume;
  return o;
}

// Deterministic data: step s of epoch e depends only on (e, s). nan_at: (epoch, step) that gets a NaN input;
// side: the images' size (side × side; 8 is the tiny model's own).
app::TrainData data(std::pair<int, int> nan_at = {-1, -1}, int side = 8) {
  app::TrainData d;
  d.steps_per_epoch = 3;
  if (side != 8) d.size = {side, side};
  d.fill = [nan_at, side](int epoch, std::int64_t step, int B, int, int, float* x, int* y) {  // one process: the whole batch
    std::mt19937_64 g(liere::mix_seed(9, std::uint64_t(epoch), std::uint64_t(step)));
    std::normal_distribution<float> n(0, 1);
    for (int i = 0; i < B * side * side; ++i) x[i] = n(g);
    for (int i = 0; i < B; ++i) y[i] = int(g() % 3);
    if (epoch == nan_at.first && step == nan_at.second) x[0] = std::numeric_limits<float>::quiet_NaN();
  };
  return d;
}

app::EvalData eval_set() {
  app::EvalData e;
  e.n = 10;
  e.size = {8, 8};
  for (int i = 0; i < e.n; ++i) e.labels.push_back(i % 3);
  e.fill = [](int first, int count, float* x) {
    for (int i = 0; i < count * 64; ++i) x[i] = float(std::sin(0.37 * (first * 64 + i)));
  };
  return e;
}

std::vector<std::vector<float>> weights(app::Trainer& t) {
  std::vector<std::vector<float>> w;
  for (const auto& p : t.params()) w.emplace_back(p.value().data(), p.value().data() + p.numel());
  return w;
}

// Parameter tensors of t that differ from the checkpoint's.
std::size_t differing_from_checkpoint(app::Trainer& t, const std::string& ckpt) {
  const nn::SafetensorsFile file = nn::load_safetensors(ckpt);
  std::size_t differing = 0;
  for (const auto& p : t.params()) {
    const Tensor c = file.tensor<float>(p.name());
    differing += std::memcmp(c.data(), p.value().data(), std::size_t(p.numel()) * sizeof(float)) != 0;
  }
  return differing;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("liere_test_trainer_" + name)).string();
}

// A checkpoint of the tiny model after one epoch, at temp_path(name).
std::string one_epoch_checkpoint(const std::string& pe, const std::string& name) {
  const std::string ckpt = temp_path(name);
  std::remove(ckpt.c_str());
  std::cerr.setstate(std::ios::failbit);
  {
    app::Trainer t(tiny(pe), options(1, ckpt), "synthetic");
    t.fit(data(), eval_set());
  }
  std::cerr.clear();
  return ckpt;
}

// Trains cfg with opt (its --metrics set to path) on data() quietly; returns the metrics file's rows. before and
// after (when given) get the weights before and after training.
std::vector<std::string> metrics_rows(const nn::VitConfig& cfg, app::TrainOptions opt, const std::string& path,
                                      std::vector<std::vector<float>>* before = nullptr,
                                      std::vector<std::vector<float>>* after = nullptr) {
  opt.metrics = path;
  std::cerr.setstate(std::ios::failbit);
  app::Trainer t(cfg, opt, "synthetic");
  if (before) *before = weights(t);
  t.fit(data(), eval_set());
  std::cerr.clear();
  if (after) *after = weights(t);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

TEST_CASE("trainer: 2 epochs == 1 epoch + save + resume + 1 epoch, bit for bit", "[trainer]") {
  for (const char* pe : {"liere", "absolute"}) {
    const std::string ckpt = temp_path(std::string(pe) + ".safetensors");
    std::remove(ckpt.c_str());
    std::cerr.setstate(std::ios::failbit);  // quiet progress bars
    app::Trainer a(tiny(pe), options(2), "synthetic");
    a.fit(data(), eval_set());

    {
      app::TrainOptions o = options(1, ckpt);
      app::Trainer b(tiny(pe), o, "synthetic");
      b.fit(data(), eval_set());
    }
    app::Trainer c(tiny(pe), options(2, "", ckpt), "synthetic");
    c.fit(data(), eval_set());
    std::cerr.clear();
    const auto wa = weights(a), wc = weights(c);
    REQUIRE(wa.size() == wc.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < wa.size(); ++i)
      differing += std::memcmp(wa[i].data(), wc[i].data(), wa[i].size() * sizeof(float)) != 0;
    INFO(pe << ": " << differing << " parameter tensors differ");
    CHECK(differing == 0);
    // And training did something: the weights moved away from a fresh model's.
    app::Trainer fresh(tiny(pe), options(2), "synthetic");
    const auto wf = weights(fresh);
    std::size_t moved = 0;
    for (std::size_t i = 0; i < wa.size(); ++i) moved += wa[i] != wf[i];
    CHECK(moved == wa.size());
    std::remove(ckpt.c_str());
  }
}

TEST_CASE("trainer: --resume appends to --metrics; a checkpoint from after the last epoch is refused", "[trainer]") {
  const std::string ckpt = temp_path("metrics_resume.safetensors"), two = temp_path("metrics_two.safetensors");
  const std::string m1 = temp_path("metrics_resume.jsonl"), m2 = temp_path("metrics_two.jsonl");
  for (const auto& f : {ckpt, two, m1, m2}) std::remove(f.c_str());
  // One uninterrupted run of 2 epochs, and 1 epoch + save + resume for the second, into one metrics file.
  const auto uninterrupted = metrics_rows(tiny("liere"), options(2, two), m2);
  const auto first = metrics_rows(tiny("liere"), options(1, ckpt), m1);
  const auto resumed = metrics_rows(tiny("liere"), options(2, "", ckpt), m1);
  REQUIRE_FALSE(first.empty());
  CHECK(resumed.size() == uninterrupted.size());
  REQUIRE(resumed.size() > first.size());
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(resumed[i] == first[i]);  // epoch 1's rows kept as written
  // The 2-epoch checkpoint resumed with --epochs 1: nothing left to train, and more epochs done than asked for.
  std::cerr.setstate(std::ios::failbit);
  app::Trainer t(tiny("liere"), options(1, "", two), "synthetic");
  CHECK_THROWS_WITH(t.fit(data(), eval_set()),
                    Catch::Contains("the checkpoint is after epoch 2, more than --epochs 1"));
  std::cerr.clear();
  for (const auto& f : {ckpt, two, m1, m2}) std::remove(f.c_str());
}

TEST_CASE("compare: split_list drops empty items; the accuracy chart is bar_chart of the results in % with their CIs",
          "[trainer]") {
  CHECK(app::split_list("abs,,liere8,") == std::vector<std::string>{"abs", "liere8"});
  CHECK(app::split_list(",").empty());

  // 2 groups × 2 bars; results[g · 2 + b], with distinct accuracies and interval ends.
  std::vector<app::EvalResult> r(4);
  for (int k = 0; k < 4; ++k) {
    r[std::size_t(k)].acc = 0.5 + 0.1 * k;
    r[std::size_t(k)].ci = {0.5 + 0.1 * k, 0.45 + 0.1 * k, 0.58 + 0.1 * k};
  }
  const std::string got = temp_path("chart.png"), want = temp_path("chart_ref.png");
  app::write_accuracy_chart(got, "title", "size", {"32", "64"}, {"abs", "liere"}, {&r[0], &r[1], &r[2], &r[3]});
  plot::BarChart bc;
  bc.title = "title";
  bc.x_label = "size";
  bc.y_label = "accuracy (%)";
  bc.groups = {"32", "64"};
  bc.bars = {"abs", "liere"};
  bc.values = {{50, 60}, {70, 80}};
  bc.lo = {{45, 55}, {65, 75}};
  bc.hi = {{58, 68}, {78, 88}};
  bc.y_min = 0;
  bc.y_max = 100;
  plot::bar_chart(want, bc);
  std::ifstream a(got, std::ios::binary), b(want, std::ios::binary);
  const std::string ga{std::istreambuf_iterator<char>(a), {}}, wb{std::istreambuf_iterator<char>(b), {}};
  CHECK_FALSE(ga.empty());
  CHECK(ga == wb);
  CHECK_THROWS_WITH(app::write_accuracy_chart(got, "t", "x", {"32"}, {"abs", "liere"}, {&r[0]}),
                    Catch::Contains("1 results for 1 groups x 2 bars"));
  std::remove(got.c_str());
  std::remove(want.c_str());
}

TEST_CASE("trainer: --resume with another seed or learning rate says so, and with the same settings says nothing",
          "[trainer]") {
  const std::string ckpt = temp_path("settings.safetensors");
  std::remove(ckpt.c_str());
  std::ostringstream log;
  struct Capture {  // std::cerr into `log` for the case's life, even when a fit throws
    std::streambuf* old;
    ~Capture() { std::cerr.rdbuf(old); }
  } capture{std::cerr.rdbuf(log.rdbuf())};
  const auto run = [&](const app::TrainOptions& o) {
    log.str("");
    app::Trainer t(tiny("liere"), o, "synthetic");
    t.fit(data(), eval_set());
    return log.str();
  };
  (void)run(options(1, ckpt));
  const std::string same = run(options(2, "", ckpt));  // another --epochs: training in pieces, no note
  app::TrainOptions o = options(2, "", ckpt);
  o.lr = 1e-3;
  o.seed = 6;
  const std::string other = run(o);
  std::remove(ckpt.c_str());
  using Catch::Contains;
  CHECK_THAT(same, Contains("resumed " + ckpt + " after epoch 1") && !Contains("note: --resume"));
  CHECK_THAT(other, Contains("note: --resume " + ckpt + ": its run had --seed 5, this one --seed 6") &&
                        Contains("its run had --lr 0.003, this one --lr 0.001"));
  CHECK_THAT(other, !Contains("--batch") && !Contains("--wd") && !Contains("--epochs"));
}

TEST_CASE("trainer: a NaN loss stops training and the last good checkpoint stays intact", "[trainer]") {
  const std::string ckpt = temp_path("nan.safetensors");
  std::remove(ckpt.c_str());
  std::cerr.setstate(std::ios::failbit);
  app::Trainer t(tiny("liere"), options(3, ckpt), "synthetic");
  std::string message;
  try {
    t.fit(data({1, 2}), eval_set());  // epoch 1 is saved, epoch 2 (0-based 1) hits NaN at its third step
  } catch (const Error& e) {
    message = e.what();
  }
  std::cerr.clear();
  CHECK_THAT(message, Catch::Contains("the loss is NaN at epoch 2, step 3"));
  CHECK_THAT(message, Catch::Contains("last good checkpoint"));
  // The checkpoint is epoch 1's and loads into a fresh model.
  app::Trainer r(tiny("liere"), options(1), "synthetic");
  const auto meta = nn::load_checkpoint(ckpt, r.params());
  CHECK(meta.at("epoch") == "1");
  CHECK_FALSE(std::filesystem::exists(ckpt + ".tmp"));
  std::remove(ckpt.c_str());
}

TEST_CASE("trainer: a NaN at a step leaves every weight as it was before that step, with and without clipping",
          "[trainer]") {
  // The update is queued before the loss is read (one wait a step on a GPU) and gated on the loss and Σg²: a NaN
  // input at the first step must leave the initial weights, bit for bit, and the optimizer's count at 0 (the update
  // that the gate skipped does not count), the one-wait step (LIERE_ONE_WAIT=1) as the reading one (0).
  for (const char* one_wait : {"1", "0"})
    for (double clip : {0.0, 1.0}) {
      INFO("LIERE_ONE_WAIT=" << one_wait << ", clip " << clip);
      ::setenv("LIERE_ONE_WAIT", one_wait, 1);
      app::TrainOptions o = options(1);
      o.clip = clip;
      app::Trainer t(tiny("liere"), o, "synthetic");
      const auto before = weights(t);
      std::cerr.setstate(std::ios::failbit);
      std::string message;
      try {
        t.fit(data({0, 0}), eval_set());
      } catch (const Error& e) {
        message = e.what();
      }
      std::cerr.clear();
      ::unsetenv("LIERE_ONE_WAIT");
      CHECK_THAT(message, Catch::Contains("the loss is NaN at epoch 1, step 1"));
      CHECK(weights(t) == before);
      CHECK(t.optimizer_steps() == 0);
    }
}

TEST_CASE("trainer: the step with one wait and the step that reads the norm before the update give the same run",
          "[trainer]") {
  // LIERE_ONE_WAIT=0 forces the reading step (the path of several ranks and of loss scaling): two epochs with
  // clipping that bites (0.05) both ways, to the same weights bit for bit.
  std::cerr.setstate(std::ios::failbit);
  std::vector<std::vector<float>> w[2];
  for (int one = 0; one < 2; ++one) {
    ::setenv("LIERE_ONE_WAIT", one ? "1" : "0", 1);
    app::TrainOptions o = options(2);
    o.clip = 0.05;
    app::Trainer t(tiny("liere"), o, "synthetic");
    t.fit(data(), eval_set(), false);
    w[one] = weights(t);
  }
  ::unsetenv("LIERE_ONE_WAIT");
  std::cerr.clear();
  CHECK(w[1] == w[0]);
  app::Trainer fresh(tiny("liere"), options(2), "synthetic");
  CHECK(weights(fresh) != w[1]);  // and they trained
}

TEST_CASE("trainer: resuming a checkpoint of another encoding or model is a clear error", "[trainer]") {
  const std::string ckpt = one_epoch_checkpoint("liere", "other.safetensors");
  app::Trainer other_pe(tiny("rope-mixed"), options(2, "", ckpt), "synthetic");
  CHECK_THROWS_WITH(other_pe.fit(data(), eval_set()), Catch::Contains("checkpoint pe 'liere") && Catch::Contains("!= model pe 'rope-mixed"));
  nn::VitConfig wider = tiny("liere");
  wider.dim = 32;
  app::Trainer other_model(wider, options(2, "", ckpt), "synthetic");
  CHECK_THROWS_WITH(other_model.fit(data(), eval_set()), Catch::Contains("checkpoint model 'vit dim=16"));
  std::remove(ckpt.c_str());
}

TEST_CASE("trainer: --init-from takes a checkpoint's weights and trains them at another image size", "[trainer]") {
  for (const char* pe : {"liere", "absolute"}) {
    const std::string ckpt = one_epoch_checkpoint(pe, std::string("init_") + pe + ".safetensors");
    auto differing = [&](app::Trainer& t) { return differing_from_checkpoint(t, ckpt); };
    std::cerr.setstate(std::ios::failbit);
    // The weights, exactly.
    app::TrainOptions o = options(1);
    o.init_from = ckpt;
    app::Trainer b(tiny(pe), o, "synthetic");
    const std::size_t n = b.params().all().size();
    CHECK(differing(b) == n);  // a fresh model differs in every tensor
    b.load_init_weights();
    CHECK(differing(b) == 0);
    // --epochs 0: fit() evaluates the checkpoint's weights without a training step: the weights stay as
    // loaded and the evaluation is the loaded model's, loss for loss.
    {
      app::TrainOptions z = options(0);
      z.init_from = ckpt;
      CHECK_NOTHROW(z.validate());
      app::Trainer e(tiny(pe), z, "synthetic");
      const app::EvalResult got = e.fit(data(), eval_set());
      CHECK(differing(e) == 0);
      const app::EvalResult want = b.evaluate(eval_set());
      CHECK(got.loss == want.loss);
      CHECK(got.preds == want.preds);
      CHECK_THROWS_WITH(options(0).validate(), Catch::Contains("--epochs 0 evaluates a checkpoint") &&
                                                   Catch::Contains("needs --init-from"));
    }
    // fit() loads them before its first step: with a learning rate whose updates round to 0 in float (below
    // the smallest subnormal), training leaves them as loaded, bit for bit, on 12 × 12 images (a 3 × 3 grid
    // instead of the model's 2 × 2).
    o.lr = 1e-46;
    app::Trainer c(tiny(pe), o, "synthetic");
    c.fit(data({-1, -1}, 12), eval_set());
    CHECK(differing(c) == 0);
    // With a real learning rate it trains there: every tensor moves, nothing becomes non-finite.
    o.lr = 3e-3;
    app::Trainer d(tiny(pe), o, "synthetic");
    d.fit(data({-1, -1}, 12), eval_set());
    std::cerr.clear();
    CHECK(differing(d) == n);
    for (const auto& p : d.params())
      for (Index i = 0; i < p.numel(); ++i) REQUIRE(std::isfinite(p.value().data()[i]));
    std::remove(ckpt.c_str());
  }
  // It needs the same model and encoding (the resolution policy may differ), and it is not --resume.
  const std::string ckpt = one_epoch_checkpoint("liere", "init_other.safetensors");
  app::TrainOptions o = options(1);
  o.init_from = ckpt;
  app::Trainer other_pe(tiny("rope-mixed"), o, "synthetic");
  CHECK_THROWS_WITH(other_pe.load_init_weights(),
                    Catch::Contains("checkpoint pe 'liere") && Catch::Contains("!= model pe 'rope-mixed"));
  nn::VitConfig wider = tiny("liere");
  wider.dim = 32;
  app::Trainer other_model(wider, o, "synthetic");
  CHECK_THROWS_WITH(other_model.load_init_weights(), Catch::Contains("checkpoint model 'vit dim=16"));
  nn::VitConfig interpolate = tiny("liere");
  interpolate.pe.set("positions", "interpolate");
  app::Trainer other_policy(interpolate, o, "synthetic");
  std::cerr.setstate(std::ios::failbit);
  CHECK_NOTHROW(other_policy.load_init_weights());
  std::cerr.clear();
  CHECK(differing_from_checkpoint(other_policy, ckpt) == 0);
  o.resume = ckpt;
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("--resume and --init-from exclude each other"));
  std::remove(ckpt.c_str());
}

TEST_CASE("trainer: TrainData::size_at gives every step its own image size (multi-resolution training)", "[trainer]") {
  // side_of(epoch, step) → the data: fill writes images of that side, size_at says so.
  auto sized = [](std::function<int(int, std::int64_t)> side_of) {
    app::TrainData d;
    d.steps_per_epoch = 3;
    d.size_at = [side_of](int e, std::int64_t s) { return std::vector<int>{side_of(e, s), side_of(e, s)}; };
    d.fill = [side_of](int epoch, std::int64_t step, int B, int, int, float* x, int* y) {
      const int side = side_of(epoch, step);
      std::mt19937_64 g(liere::mix_seed(9, std::uint64_t(epoch), std::uint64_t(step)));
      std::normal_distribution<float> n(0, 1);
      for (int i = 0; i < B * side * side; ++i) x[i] = n(g);
      for (int i = 0; i < B; ++i) y[i] = int(g() % 3);
    };
    return d;
  };
  auto train = [](const app::TrainData& d) {
    app::Trainer t(tiny("liere"), options(2), "synthetic");
    t.fit(d, eval_set(), false);
    return weights(t);
  };
  std::cerr.setstate(std::ios::failbit);
  // A constant size_at is the fixed-size path, bit for bit, at the model's size and at another.
  const auto plain8 = train(data()), plain12 = train(data({-1, -1}, 12));
  CHECK(train(sized([](int, std::int64_t) { return 8; })) == plain8);
  CHECK(train(sized([](int, std::int64_t) { return 12; })) == plain12);
  // Mixed: steps 0 and 2 of each epoch at 8 × 8, step 1 at 12 × 12 (a 3 × 3 grid); it trains, finitely, and
  // ends elsewhere than either fixed size.
  const auto mixed = train(sized([](int, std::int64_t s) { return s == 1 ? 12 : 8; }));
  std::cerr.clear();
  CHECK(mixed != plain8);
  CHECK(mixed != plain12);
  for (const auto& w : mixed)
    for (float v : w) REQUIRE(std::isfinite(v));
}

TEST_CASE("trainer: --prefetch fills the next batch on a loader thread: the same run, and a fill's error at its step",
          "[trainer]") {
  // Mixed sizes (steps 0 and 2 at 8 × 8, step 1 at 12 × 12), so that the buffers change shape between fills. The
  // fills are recorded: in order, and with the loader every fill but each epoch's first off the main thread.
  struct Call {
    int epoch;
    std::int64_t step;
    bool main_thread;
  };
  const std::thread::id main_id = std::this_thread::get_id();
  auto sized = [main_id](std::vector<Call>* calls, std::pair<int, int> fail_at) {
    app::TrainData d;
    d.steps_per_epoch = 3;
    auto side_of = [](std::int64_t s) { return s == 1 ? 12 : 8; };
    d.size_at = [side_of](int, std::int64_t s) { return std::vector<int>{side_of(s), side_of(s)}; };
    d.fill = [=](int epoch, std::int64_t step, int B, int, int, float* x, int* y) {
      calls->push_back({epoch, step, std::this_thread::get_id() == main_id});
      if (epoch == fail_at.first && step == fail_at.second) throw Error("cannot read sample 7 of the batch");
      const int side = side_of(step);
      std::mt19937_64 g(liere::mix_seed(9, std::uint64_t(epoch), std::uint64_t(step)));
      std::normal_distribution<float> n(0, 1);
      for (int i = 0; i < B * side * side; ++i) x[i] = n(g);
      for (int i = 0; i < B; ++i) y[i] = int(g() % 3);
    };
    return d;
  };
  std::cerr.setstate(std::ios::failbit);
  std::vector<std::vector<float>> w[2];
  std::vector<Call> calls[2];
  for (int on = 0; on < 2; ++on) {
    app::TrainOptions o = options(2);
    o.prefetch = on ? "on" : "off";
    app::Trainer t(tiny("liere"), o, "synthetic");
    t.fit(sized(&calls[on], {-1, -1}), eval_set(), false);
    w[on] = weights(t);
  }
  CHECK(w[1] == w[0]);
  for (int on = 0; on < 2; ++on) {
    INFO("prefetch " << on);
    REQUIRE(calls[on].size() == 6);
    for (std::size_t k = 0; k < 6; ++k) {
      CHECK(calls[on][k].epoch == int(k / 3));
      CHECK(calls[on][k].step == std::int64_t(k % 3));
      CHECK(calls[on][k].main_thread == (on == 0 || k % 3 == 0));
    }
  }
  // A fill that fails on the loader: fit stops with its error, at the step that needed the batch, after the steps
  // before it.
  std::vector<Call> failing;
  app::TrainOptions o = options(2);
  o.prefetch = "on";
  app::Trainer t(tiny("liere"), o, "synthetic");
  CHECK_THROWS_WITH(t.fit(sized(&failing, {1, 2}), eval_set(), false), Catch::Contains("cannot read sample 7"));
  std::cerr.clear();
  CHECK(failing.size() == 6);
  CHECK_FALSE(failing.back().main_thread);
  CHECK(t.optimizer_steps() == 5);  // the five steps before it trained
  // A batch shape that cannot be had (size_at throws for epoch 0, step 2): the same stop at the same step both ways,
  // after steps 0 and 1 (with the loader, step 1 asked for step 2's shape first: that must not stop it early).
  for (const char* prefetch : {"on", "off"}) {
    INFO("prefetch " << prefetch);
    std::vector<Call> calls;
    app::TrainData d = sized(&calls, {-1, -1});
    const auto size_at = d.size_at;
    d.size_at = [size_at](int epoch, std::int64_t s) {
      if (epoch == 0 && s == 2) throw Error("no size for step 3");
      return size_at(epoch, s);
    };
    app::TrainOptions po = options(2);
    po.prefetch = prefetch;
    app::Trainer pt(tiny("liere"), po, "synthetic");
    std::cerr.setstate(std::ios::failbit);
    CHECK_THROWS_WITH(pt.fit(d, eval_set(), false), Catch::Contains("no size for step 3"));
    std::cerr.clear();
    CHECK(pt.optimizer_steps() == 2);
    CHECK(calls.size() == 2);
  }
  o.prefetch = "sometimes";
  CHECK_THROWS_WITH(o.validate(), Catch::Contains("--prefetch sometimes: allowed: auto, on, off"));
  o.prefetch = "auto";
  CHECK_FALSE(o.prefetch_on(Device::cpu));
  CHECK(o.prefetch_on(Device::cuda));
}

TEST_CASE("flags: unknown options, bad values and encoding flags", "[trainer]") {
  auto parse = [](std::vector<std::string> args) {
    int epochs = 1;
    double lr = 0.1;
    std::vector<int> res;
    bool sw = false;
    PEConfig pe;
    app::Flags f("prog", "test");
    f.add("epochs", &epochs, "");
    f.add("lr", &lr, "");
    f.add("res", &res, "");
    f.add_switch("dry-run", &sw, "");
    f.add_pe(&pe);
    std::vector<char*> argv{const_cast<char*>("prog")};
    for (auto& a : args) argv.push_back(a.data());
    f.parse(int(argv.size()), argv.data());
    return std::make_tuple(epochs, lr, res, sw, pe);
  };
  auto [e, lr, res, sw, pe] = parse({"--epochs", "7", "--lr=0.5", "--res", "108,168", "--dry-run", "--pe", "liere", "--block", "64"});
  CHECK(e == 7);
  CHECK(lr == 0.5);
  CHECK(res == std::vector<int>{108, 168});
  CHECK(sw);
  CHECK(pe.label() == "liere64");
  CHECK_THROWS_AS(parse({"--bogus", "1"}), app::UsageError);
  CHECK_THROWS_WITH(parse({"--bogus", "1"}), Catch::Contains("unknown option --bogus"));
  CHECK_THROWS_WITH(parse({"--epochs", "x"}), Catch::Contains("expected an integer"));
  // The whole text: the value, what was expected, and no source location of liere's code in front of it.
  CHECK_THROWS_WITH(parse({"--epochs", "x"}), Catch::Equals("--epochs x: expected an integer, got 'x'"));
  CHECK_THROWS_WITH(parse({"--pe", "liere", "--block", "7"}),
                    Catch::StartsWith("--block 7 is not supported; supported block sizes: 2, 3, 4, 8"));
  CHECK_THROWS_WITH(parse({"--epochs"}), Catch::Contains("--epochs needs a value"));
  CHECK_THROWS_WITH(parse({"--block"}), Catch::Contains("--block needs a value"));
  CHECK_THROWS_WITH(parse({"--bogus"}), Catch::Contains("unknown option --bogus"));
  CHECK_THROWS_WITH(parse({"--dry-run=1"}), Catch::Equals("--dry-run takes no value"));
  CHECK_THROWS_AS(parse({"--pe", "foo"}), app::UsageError);
  CHECK_THROWS_WITH(parse({"--pe", "foo"}), Catch::Contains("allowed: none, absolute"));
  CHECK_THROWS_WITH(parse({"--block", "5"}), Catch::Contains("supported block sizes"));
  // --pe takes the labels that --compare, the tables and the file names use: the kind with its block size.
  CHECK(std::get<4>(parse({"--pe", "liere8"})).label() == "liere8");
  CHECK(std::get<4>(parse({"--pe", "liere64"})).block == 64);
  CHECK(std::get<4>(parse({"--pe", "comrope-ap4"})).label() == "comrope-ap4");
  CHECK(std::get<4>(parse({"--pe", "comrope-ld2"})).label() == "comrope-ld2");
  CHECK(std::get<4>(parse({"--pe", "rope-1d"})).label() == "rope-1d");  // a name ending in a letter
  CHECK(std::get<4>(parse({"--pe", "liere16", "--block", "16"})).block == 16);  // agreeing: fine
  CHECK(std::get<4>(parse({"--block", "32", "--pe", "liere"})).block == 32);
  CHECK_THROWS_WITH(parse({"--pe", "liere8", "--block", "16"}),
                    Catch::Equals("--pe liere8 and --block 16 disagree: give the block size once"));
  CHECK_THROWS_WITH(parse({"--block", "16", "--pe", "liere8"}),
                    Catch::Equals("--pe liere8 and --block 16 disagree: give the block size once"));
  CHECK_THROWS_WITH(parse({"--pe", "liere7"}),
                    Catch::Contains("--pe liere7: --block 7 is not supported; supported block sizes: 2, 3, 4, 8"));
  CHECK_THROWS_WITH(parse({"--pe", "rope-mixed8"}), Catch::Contains("unknown --pe value 'rope-mixed8'; allowed: none"));
  {  // --block with an encoding that does not use it: accepted, and said on stderr
    std::ostringstream err;
    std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
    const int rope = std::get<4>(parse({"--pe", "rope-mixed", "--block", "8"})).effective_block();
    const std::string rope_note = err.str();
    err.str("");
    (void)parse({"--block", "8", "--pe", "absolute"});
    const std::string abs_note = err.str();
    err.str("");
    (void)parse({"--pe", "liere", "--block", "8"});
    (void)parse({"--pe", "rope-mixed"});
    const std::string none = err.str();
    std::cerr.rdbuf(old);
    CHECK(rope == 2);
    CHECK(rope_note == "note: --block 8 is not used by --pe rope-mixed (its blocks are 2x2)\n");
    CHECK(abs_note == "note: --block 8 is not used by --pe absolute (it has no rotation blocks)\n");
    CHECK(none.empty());
  }
  // Values out of the type's range are refused, not wrapped or clamped (found while writing tests/fuzz/fuzz_flags):
  // --epochs 4294967297 used to give epochs = 1, --epochs 99999999999999999999 strtoll's LLONG_MAX.
  CHECK(std::get<0>(parse({"--epochs", "2147483647"})) == 2147483647);
  CHECK(std::get<0>(parse({"--epochs", "-2147483648"})) == -2147483647 - 1);
  CHECK_THROWS_WITH(parse({"--epochs", "4294967297"}), Catch::Contains("expected an integer in [-2147483648, 2147483647]"));
  CHECK_THROWS_WITH(parse({"--epochs", "99999999999999999999"}), Catch::Contains("expected an integer in ["));
  CHECK_THROWS_WITH(parse({"--res", "24,4294967320"}), Catch::Contains("expected an integer in ["));
  CHECK_THROWS_WITH(parse({"--lr", "1e999"}), Catch::Contains("expected a finite number"));
  CHECK_THROWS_WITH(parse({"--lr", "nan"}), Catch::Contains("expected a finite number"));
  CHECK(std::get<1>(parse({"--lr", "1e-310"})) > 0);  // a denormal is still a number
  // An --init scale past what float32 generators can hold (1e300: infinite) is a usage error, not a failure at step 0.
  CHECK_THROWS_AS(parse({"--init", "normal:1e300"}), app::UsageError);
  CHECK_THROWS_WITH(parse({"--init", "normal:1e300"}),
                    Catch::StartsWith("--init normal:1e300: expected a scale in (0, 1e6]"));
}

// argv for Flags::parse from a list of arguments.
struct Argv {
  std::vector<std::string> args;
  std::vector<char*> ptrs;
  explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
    ptrs.push_back(const_cast<char*>("prog"));
    for (auto& x : args) ptrs.push_back(x.data());
  }
  int argc() { return int(ptrs.size()); }
  char** argv() { return ptrs.data(); }
};

namespace {
// What run_main prints and returns for each kind of error (set_error_exit: null restores the default).
std::string g_exit_text;
int capture_exit(const std::string& text, int code, bool) {
  g_exit_text = text;
  return code;
}
}  // namespace

TEST_CASE("run_main: usage errors exit 2, other errors 1, running out of memory says so", "[trainer]") {
  app::set_error_exit(capture_exit);
  CHECK(app::run_main("prog", [] { return 0; }) == 0);
  CHECK(app::run_main("prog", []() -> int { throw app::UsageError("--x 3: bad"); }) == 2);
  CHECK(g_exit_text == "prog: --x 3: bad\n(run prog --help for the options)\n");
  CHECK(app::run_main("prog", []() -> int { throw std::runtime_error("disk full"); }) == 1);
  CHECK(g_exit_text == "prog: error: disk full\n");
  CHECK(app::run_main("prog", []() -> int { throw std::bad_alloc(); }) == 1);  // its what(): "std::bad_alloc"
  CHECK_THAT(g_exit_text, Catch::StartsWith("prog: error: out of memory: the data or the model does not fit") &&
                              Catch::Contains("a smaller --batch"));
  app::set_error_exit(nullptr);
}

TEST_CASE("flags: ranges, unsigned seeds, optional numbers, repeatable strings, custom parsers, positionals", "[trainer]") {
  struct Parsed {
    int frames = 8;
    double noise = 0;
    std::uint64_t seed = 0;
    std::optional<double> y_min;
    std::vector<std::string> ys, files;
    std::string grid = "8x8";
    bool given_frames = false, given_seed = false;
  };
  auto parse = [](std::vector<std::string> args, bool positional = true) {
    Parsed p;
    app::Flags f("prog", "test");
    f.add("frames", &p.frames, "", app::Range{2, 1024});
    f.add("noise", &p.noise, "", app::Range{0, 64});
    f.add("seed", &p.seed, "");
    f.add("y-min", &p.y_min, "");
    f.add("y", &p.ys, "", "KEY");
    f.add("grid", "G", "", [&](const std::string& v) {
            LIERE_ENSURE(v.find('x') != std::string::npos, "expected sizes joined by 'x'");
            p.grid = v;
          }, [&] { return p.grid; });
    if (positional) f.positional("FILE...", &p.files, "");
    Argv a(std::move(args));
    f.parse(a.argc(), a.argv());
    p.given_frames = f.given("frames");
    p.given_seed = f.given("seed");
    return p;
  };
  const Parsed p = parse({"a.jsonl", "--frames", "1024", "--noise=0.5", "--seed", "18446744073709551615", "--y", "acc",
                          "b.jsonl", "--y=loss", "--y-min", "-1", "--grid", "4x8"});
  CHECK(p.frames == 1024);
  CHECK(p.noise == 0.5);
  CHECK(p.seed == 18446744073709551615ull);
  CHECK(p.y_min == -1.0);
  CHECK(p.ys == std::vector<std::string>{"acc", "loss"});
  CHECK(p.files == std::vector<std::string>{"a.jsonl", "b.jsonl"});
  CHECK(p.grid == "4x8");
  CHECK(p.given_frames);
  const Parsed d = parse({});
  CHECK((d.frames == 8 && !d.y_min && d.ys.empty() && d.files.empty() && !d.given_frames && !d.given_seed));
  CHECK_THROWS_WITH(parse({"--frames", "1"}),
                    Catch::Contains("--frames 1: ") && Catch::Contains("expected an integer in [2, 1024]"));
  CHECK_THROWS_WITH(parse({"--frames", "1025"}), Catch::Contains("expected an integer in [2, 1024]"));
  CHECK_THROWS_WITH(parse({"--noise", "64.5"}), Catch::Contains("expected a number in [0, 64]"));
  CHECK_THROWS_WITH(parse({"--seed", "-1"}), Catch::Contains("expected a non-negative integer, got '-1'"));
  CHECK_THROWS_WITH(parse({"--seed", "18446744073709551616"}),
                    Catch::Contains("expected an integer in [0, 18446744073709551615]"));
  CHECK_THROWS_WITH(parse({"--y-min", "inf"}), Catch::Contains("expected a finite number"));
  CHECK_THROWS_AS(parse({"--grid", "8y8"}), app::UsageError);
  CHECK_THROWS_WITH(parse({"--grid", "8y8"}),
                    Catch::Contains("--grid 8y8: ") && Catch::Contains("expected sizes joined by 'x'"));
  CHECK_THROWS_WITH(parse({"a.jsonl"}, false), Catch::Contains("unexpected argument 'a.jsonl'"));
}

TEST_CASE("flags: --help lists every flag with its default, long help wrapped under it", "[trainer]") {
  int n = 3;
  std::vector<std::string> files;
  app::Flags f("prog", "Summary line.");
  f.section("Options");
  f.positional("FILE...", &files, "the inputs");
  f.add("n", &n, std::string(150, 'w').replace(70, 1, " "), app::Range{0, 9});
  const std::string u = f.usage();
  CHECK(u.rfind("usage: prog [options] FILE...\nSummary line.\n", 0) == 0);
  CHECK_THAT(u, Catch::Contains("  FILE...               the inputs\n"));
  CHECK_THAT(u, Catch::Contains("  --n N                 " + std::string(70, 'w') + "\n" + std::string(24, ' ') +
                                std::string(79, 'w') + "  [3]\n"));
  // Help text that fills its 86 columns (110 less the 24 of the indent) but for fewer than the default's 5
  // ("  [3]"): the default goes on a line of its own.
  app::Flags g("prog", "Summary line.");
  g.add("m", &n, std::string(84, 'w'));
  g.add("k", &n, std::string(81, 'w'));
  const std::string own_line = "\n" + std::string(24, ' ') + "[3]\n";
  CHECK_THAT(g.usage(), Catch::Contains("  --m N                 " + std::string(84, 'w') + own_line));
  CHECK_THAT(g.usage(), Catch::Contains("  --k N                 " + std::string(81, 'w') + "  [3]\n"));
}

TEST_CASE("TrainOptions and CompareOptions: bad values and what a run cannot honour are usage errors before it starts",
          "[trainer]") {
  // Each: the flags as a trainer declares them, then validate() as its parse_flags runs it. A usage error (exit 2)
  // whose text names the flag; found by a review (2026-11-27): --threads 100000 crashed in libgomp, --bench-steps -1
  // printed a negative throughput, a --summary-json in a missing folder failed after the whole training, and
  // --compare dropped --save and --predictions without a word.
  auto run = [](std::vector<std::string> args) {
    app::TrainOptions opt;
    app::CompareOptions cmp;
    PEConfig pe;
    app::Flags f("prog", "test");
    f.add_pe(&pe);
    opt.add_flags(f);
    cmp.add_flags(f, "Comparison", "abs,liere8", "the table");
    Argv a(std::move(args));
    f.parse(a.argc(), a.argv());
    opt.validate();
    cmp.validate(f, opt, pe);
  };
  auto usage = [&](std::vector<std::string> args, const std::string& text) {
    INFO(Catch::Detail::stringify(args));
    CHECK_THROWS_AS(run(args), app::UsageError);
    CHECK_THROWS_WITH(run(args), Catch::Contains(text));
  };
  CHECK_NOTHROW(run({"--device", "cpu", "--threads", "1024", "--bench-steps", "0"}));
  usage({"--device", "cpu", "--threads", "100000"}, "expected an integer in [1, 1024]");
  usage({"--device", "cpu", "--threads", "0"}, "expected an integer in [1, 1024]");
  usage({"--device", "cpu", "--bench-steps", "-1"}, "expected an integer in [0, 1000000000]");
  usage({"--device", "cpu", "--batch", "0"}, "expected an integer in [1, 1000000000]");
  usage({"--device", "cpu", "--lr", "-1"}, "--lr -1: expected a number > 0");
  usage({"--device", "cpu", "--epochs", "1", "--warmup", "5"}, "--warmup 5: expected a number of epochs in [0, --epochs + 1)");
  const std::string missing = (std::filesystem::temp_directory_path() / "liere-no-such-folder" / "x.json").string();
  for (const char* flag : {"--save", "--metrics", "--summary-json", "--predictions"})
    usage({"--device", "cpu", flag, missing}, std::string(flag) + " " + missing + ": the folder '");
  CHECK_NOTHROW(run({"--device", "cpu", "--summary-json", "here.json"}));  // the working directory
  // A folder where a file is expected failed after the first epoch (--save: the rename) or the whole run (an audit,
  // 2026-12-06); so did a folder that takes no new files.
  const test::TempDir dir("liere_test_trainer_outputs");
  const std::string folder = dir.path.string();
  for (const char* flag : {"--save", "--metrics", "--summary-json", "--predictions"})
    usage({"--device", "cpu", flag, folder}, std::string(flag) + " " + folder + ": is a folder; give the path of a file");
  usage({"--device", "cpu", "--compare", "abs", "--compare-json", folder}, "is a folder");
  if (::geteuid() != 0) {  // root writes anywhere
    const auto ro = dir.path / "read-only";
    std::filesystem::create_directory(ro);
    std::filesystem::permissions(ro, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    usage({"--device", "cpu", "--save", (ro / "x.safetensors").string()}, "' is not writable (Permission denied)");
    std::filesystem::permissions(ro, std::filesystem::perms::owner_all);
  }
  usage({"--device", "cpu", "--compare-json", "t.json"}, "--compare-json writes a comparison: it needs --compare LIST");
  usage({"--device", "cpu", "--compare", "abs,liere8", "--save", "c.safetensors"}, "--save is for one run");
  usage({"--device", "cpu", "--compare", "abs,liere8", "--predictions", "p.pred"}, "--predictions is for one run");
  usage({"--device", "cpu", "--compare", "abs,liere8", "--pe", "liere"}, "--pe and --compare abs,liere8");
  usage({"--device", "cpu", "--compare", "abs,bogus"}, "'bogus'");
  usage({"--device", "cpu", "--compare", "abs,liere5"}, "'liere5'");
  usage({"--device", "cpu", "--compare", "abs", "--compare-png", missing}, "--compare-png " + missing);
  CHECK_NOTHROW(run({"--device", "cpu", "--compare", "abs,liere8,comrope-ld4", "--compare-json", "t.json"}));
}

TEST_CASE("flags: a program's own --pe is listed once, the other encoding flags as usual", "[trainer]") {
  auto count = [](const std::string& s, const std::string& what) {
    int n = 0;
    for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  PEConfig pe;
  app::Flags plain("prog", "test");
  plain.add_pe(&pe);
  const std::string u = plain.usage();
  CHECK(count(u, "  --pe KIND ") == 1);
  CHECK_THAT(u, Catch::Contains("liere-commute, liere, rope-1d"));  // the --pe entry's second line
  std::string which;
  app::Flags own("prog", "test");  // as pe_diagnostics: --pe KIND|all first, then the encoding's flags
  own.add("pe", "KIND|all", "all, or one encoding", [&](const std::string& v) { which = v; }, [] { return "liere8"; });
  own.add_pe(&pe);
  const std::string v = own.usage();
  CHECK(count(v, "  --pe ") == 1);
  CHECK_THAT(v, Catch::Contains("  --pe KIND|all "));
  CHECK_THAT(v, !Catch::Contains("liere-commute, liere, rope-1d"));  // the generic entry, both its lines, gone
  for (const char* flag : {"  --block B ", "  --sharing S ", "  --init I ", "  --positions P ", "  --cls C "})
    CHECK(count(v, flag) == 1);
  CHECK_THAT(v, Catch::Contains("interpolate (keep the range)"));  // --positions' second line kept
}

TEST_CASE("ModelOptions: --model sizes and overrides, or the program's own sizes; the trainers' model flags",
          "[trainer]") {
  auto config = [](app::ModelOptions m, std::vector<std::string> args, std::string* help = nullptr) {
    app::Flags f("prog", "test");
    m.add_flags(f);
    Argv a(std::move(args));
    f.parse(a.argc(), a.argv());
    if (help) *help = f.usage() + f.canonical();
    return m.config();
  };
  const app::ModelOptions sized;  // train_cifar's: --model tiny
  nn::VitConfig c = config(sized, {});
  CHECK((c.dim == 192 && c.depth == 12 && c.heads == 3 && c.mlp_hidden == 768 && c.pool == nn::Pool::cls));
  c = config(sized, {"--model", "small", "--dim", "64", "--heads", "4"});  // --dim: the MLP follows it (4 x dim)
  CHECK((c.dim == 64 && c.depth == 12 && c.heads == 4 && c.mlp_hidden == 256));
  c = config(sized, {"--model", "base", "--mlp", "100", "--pool", "mean", "--patch", "8", "--pe", "rope-mixed"});
  CHECK((c.dim == 768 && c.mlp_hidden == 100 && c.pool == nn::Pool::mean && c.patch == 8));
  CHECK(c.pe.label() == "rope-mixed");
  c = config(sized, {"--model", "custom", "--depth", "2"});  // custom: the defaults of cfg
  CHECK((c.dim == 192 && c.depth == 2 && c.mlp_hidden == 768));
  CHECK_THROWS_WITH(config(sized, {"--model", "huge"}), Catch::Contains("--model: unknown size 'huge'"));
  CHECK_THROWS_WITH(config(sized, {"--pool", "max"}), Catch::Contains("--pool max: allowed: cls, mean"));
  // The geometry's errors are usage errors (exit 2) naming the flags, before a model is built.
  CHECK_THROWS_AS(config(sized, {"--model", "huge"}), app::UsageError);
  CHECK_THROWS_AS(config(sized, {"--pool", "max"}), app::UsageError);
  CHECK_THROWS_WITH(config(sized, {"--patch", "0"}), Catch::Contains("--patch 0: expected an integer >= 1"));
  CHECK_THROWS_WITH(config(sized, {"--drop", "1.5"}), Catch::Contains("--drop 1.5: expected a probability in [0, 1)"));
  CHECK_THROWS_WITH(config(sized, {"--dim", "100", "--heads", "3"}),
                    Catch::Contains("--dim 100 is not a multiple of --heads 3"));
  CHECK_THROWS_AS(config(sized, {"--dim", "16", "--heads", "2", "--block", "16"}), app::UsageError);
  CHECK_THROWS_WITH(config(sized, {"--dim", "16", "--heads", "2", "--block", "16"}),
                    Catch::Contains("--pe liere16: its blocks of 16 do not divide the head dim 8 (--dim 16 / --heads 2)"));
  CHECK_NOTHROW(config(sized, {"--dim", "16", "--heads", "2", "--block", "16", "--pe", "absolute"}));  // no blocks
  CHECK_NOTHROW(config(sized, {"--dim", "16", "--heads", "2", "--block", "8"}));

  app::ModelOptions fixed;  // train_arrows': no --model, no --patch, --dim … are the sizes
  fixed.model.clear();
  fixed.patch_flag = false;
  fixed.cfg.patch = 12;
  fixed.cfg.dim = 128, fixed.cfg.depth = 4, fixed.cfg.heads = 2, fixed.cfg.mlp_hidden = 256;
  std::string help;
  c = config(fixed, {"--dim", "512", "--block", "4"}, &help);
  CHECK((c.dim == 512 && c.depth == 4 && c.heads == 2 && c.mlp_hidden == 256 && c.patch == 12));  // no 4 x dim here
  CHECK(c.pe.block == 4);
  CHECK_THAT(help, Catch::Contains("--dim N               token width  [128]") && !Catch::Contains("--model") &&
                       !Catch::Contains("--patch") && !Catch::Contains("--tubelet"));
  CHECK_THROWS_WITH(config(fixed, {"--model", "tiny"}), Catch::Contains("unknown option --model"));
  // What data-parallel ranks compare (Flags::canonical) holds the model flags and the encoding.
  CHECK_THAT(help, Catch::Contains("\ndim=512\n") && Catch::Contains("\npool=cls\n") &&
                       Catch::Contains("pe=liere block=4"));

  app::ModelOptions video;  // train_ucf101's: a tubelet
  video.cfg.tubelet = 2;
  c = config(video, {"--tubelet", "4"}, &help);
  CHECK(c.tubelet == 4);
  CHECK_THAT(help, Catch::Contains("--tubelet N"));
}

TEST_CASE("trainer: --log-every writes step rows between the epoch rows", "[trainer]") {
  const std::string path = temp_path("steps.jsonl");
  std::remove(path.c_str());
  app::TrainOptions o = options(2);
  o.log_every = 2;  // 3 steps per epoch: a row after every second global step (2, 4, 6), windows across epochs
  const std::vector<std::string> lines = metrics_rows(tiny("liere"), o, path);
  REQUIRE(lines.size() == 5);
  // Rows in order: step 2, epoch 1 (after step 3), step 4, step 6, epoch 2.
  CHECK_THAT(lines[0], Catch::StartsWith("{\"step\":2,"));
  CHECK_THAT(lines[1], Catch::StartsWith("{\"epoch\":1,"));
  CHECK_THAT(lines[2], Catch::StartsWith("{\"step\":4,"));
  CHECK_THAT(lines[3], Catch::StartsWith("{\"step\":6,"));
  CHECK_THAT(lines[4], Catch::StartsWith("{\"epoch\":2,"));
  CHECK_THAT(lines[0], Catch::Contains("\"train_loss\":") && Catch::Contains("\"epoch_progress\":"));
  std::remove(path.c_str());
}

TEST_CASE("trainer: --precision is parsed and checked against the device", "[trainer]") {
  app::TrainOptions o = options(1);
  o.device = "cpu";
  CHECK(o.resolved_precision() == Precision::fp32);
  CHECK_NOTHROW(o.validate());
  o.precision = "bf16";  // where the CPU has bf16 products (tests/test_bf16_train.cpp trains with them)
  if (cpu::bf16_gemm_support()) {
    CHECK(o.resolved_precision() == Precision::bf16);
  } else {
    CHECK_THROWS_AS(o.validate(), app::UsageError);
    CHECK_THROWS_WITH(o.validate(), Catch::Contains("--precision bf16 is not supported on cpu here"));
  }
  o.precision = "fp16";
  CHECK_THROWS_AS(o.resolved_precision(), app::UsageError);
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::Contains("use --precision bf16"));
  // A usage error's text is the flag and what was expected, without the library's source location.
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::StartsWith("--precision fp16 is not supported on cpu"));
  o.precision = "fp8";
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::Contains("allowed: fp32, tf32, bf16, fp16"));
  o.precision = "tf32";
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::Contains("needs --device cuda"));
  o.precision = "fp32";
  o.tf32 = true;  // --tf32 is --precision tf32: on the CPU the same message
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::Contains("needs --device cuda"));
  o.precision = "bf16";
  CHECK_THROWS_WITH(o.resolved_precision(), Catch::Contains("contradict each other"));
}

TEST_CASE("trainer: --loss-scale with a power of two trains the same weights; overflowing steps are skipped",
          "[trainer][loss_scale]") {
  // The backward of S·loss then the gradients × 1/S: with S a power of two every gradient is S times the unscaled
  // one exactly (the backward is linear in its seed; float's rounding commutes with powers of two away from
  // overflow and subnormals), so the weights equal an unscaled run's bit for bit.
  for (const char* pe : {"liere", "absolute"}) {
    INFO("pe " << pe);
    std::cerr.setstate(std::ios::failbit);
    app::Trainer plain(tiny(pe), options(2), "synthetic");
    plain.fit(data(), eval_set());
    app::TrainOptions o = options(2);
    o.loss_scale = 1024;
    app::Trainer scaled(tiny(pe), o, "synthetic");
    scaled.fit(data(), eval_set());
    std::cerr.clear();
    const auto wp = weights(plain), ws = weights(scaled);
    REQUIRE(wp.size() == ws.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < wp.size(); ++i) differing += wp[i] != ws[i];
    CHECK(differing == 0);
  }
  // A scale past float's range: the backward's seed is ∞, so the first three steps (2^130, 2^129, 2^128) overflow
  // for certain and are skipped, each halving the scale, and the run goes on from a finite scale. The metrics rows
  // carry the scale and the skipped steps; a skipped step leaves the weights alone (one epoch, its three steps all
  // skipped: the weights after it are the initial ones, bit for bit).
  const std::string path = temp_path("loss_scale.jsonl");
  std::remove(path.c_str());
  {
    app::TrainOptions one = options(1);
    one.loss_scale = std::ldexp(1.0, 130);
    std::vector<std::vector<float>> before, after;
    const std::vector<std::string> rows = metrics_rows(tiny("liere"), one, path, &before, &after);
    REQUIRE(rows.size() == 1);
    CHECK_THAT(rows[0], Catch::Contains("\"skipped_steps\":3,"));
    CHECK(before == after);
    std::remove(path.c_str());
  }
  app::TrainOptions o = options(4);
  o.loss_scale = std::ldexp(1.0, 130);
  std::vector<std::vector<float>> w0, w1;
  const std::vector<std::string> lines = metrics_rows(tiny("liere"), o, path, &w0, &w1);
  REQUIRE(lines.size() == 4);
  CHECK_THAT(lines[0], Catch::Contains("\"skipped_steps\":3,") && Catch::Contains("\"loss_scale\":"));
  // The last row: at least the three certain skips, fewer than all twelve steps (from 2^127 down, a few more
  // halvings give finite gradients on this model), and a scale of at most 2^127.
  const auto field = [&](const std::string& row, const std::string& key) {
    const std::size_t at = row.find("\"" + key + "\":");
    REQUIRE(at != std::string::npos);
    return std::stod(row.substr(at + key.size() + 3));
  };
  const double skipped = field(lines[3], "skipped_steps"), scale = field(lines[3], "loss_scale");
  CHECK(skipped >= 3);
  CHECK(skipped < 12);
  CHECK(scale <= std::ldexp(1.0, 127));
  std::size_t changed = 0;
  for (std::size_t i = 0; i < w0.size(); ++i) changed += w0[i] != w1[i];
  CHECK(changed > 0);
  std::remove(path.c_str());
  // Not a power of two: refused (unscaling would round).
  app::TrainOptions bad = options(1);
  bad.loss_scale = 1000;
  CHECK_THROWS_AS(bad.validate(), app::UsageError);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("--loss-scale 1000: expected 0 (off) or a power of two"));
}
