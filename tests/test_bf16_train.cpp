// tests/test_bf16_train.cpp — training with --precision bf16 on the CPU (issue 22; docs/precision.md), through the
// trainers' loop (examples/app/trainer.hpp):
//   * 12 steps of a small ViT (LieRE-8 and the absolute encoding) on a synthetic task: every bf16 loss finite, within
//     1% of the fp32 run's step by step, and not equal to it (the bf16 products did run); the test loss too;
//   * checkpoints stay fp32 and move between fp32 and bf16 runs: bf16 resuming is exact (2 epochs == 1 + save +
//     resume + 1, bit for bit), a bf16 run's checkpoint has the tensors, dtypes (F32) and shapes of an fp32 run's,
//     and each precision resumes the other's checkpoint with the file's weights, bit for bit.
// Every case but the first needs the CPU's bf16 products ([needs-bf16]: Skipped where the CPU or oneDNN cannot);
// the first checks on every machine that each trainer sets the mode of the CPU products (or refuses bf16).
#include <app/trainer.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <liere/io/json.hpp>
#include <random>

#include "skip.hpp"
#include "tensor_compare.hpp"

namespace {

using namespace liere;

nn::VitConfig small(const std::string& pe) {
  nn::VitConfig c;
  c.image = {8, 8};
  c.channels = 1;
  c.patch = 2;  // 16 tokens + CLS
  c.dim = 32;
  c.depth = 2;
  c.heads = 2;
  c.mlp_hidden = 64;
  c.classes = 3;
  c.pe.set("pe", pe);
  c.pe.set("block", "8");
  return c;
}

// warmup 1 (the resuming tests): the first epoch's learning rates do not depend on the number of epochs, so that a
// 1-epoch run's checkpoint is a 2-epoch run's state after its first epoch.
app::TrainOptions options(const std::string& precision, int epochs, const std::string& save = "",
                          const std::string& resume = "", double warmup = 1) {
  app::TrainOptions o;
  o.device = "cpu";
  o.precision = precision;
  o.epochs = epochs;
  o.batch = 16;
  o.eval_batch = 16;
  o.lr = 2e-3;
  o.warmup = warmup;
  o.threads = 1;
  o.seed = 3;
  o.save = save;
  o.resume = resume;
  return o;
}

// Class c's images: a bright 4 × 4 quadrant c (of the first three) on noise. Learnable in a few steps.
void fill_image(std::mt19937_64& g, int c, float* x) {
  std::normal_distribution<float> n(0, 0.5f);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) x[i * 8 + j] = n(g) + ((i / 4) * 2 + j / 4 == c ? 2.0f : 0.0f);
}

app::TrainData data() {
  app::TrainData d;
  d.steps_per_epoch = 6;
  d.fill = [](int epoch, std::int64_t step, int B, int, int, float* x, int* y) {
    std::mt19937_64 g(mix_seed(21, std::uint64_t(epoch), std::uint64_t(step)));
    for (int i = 0; i < B; ++i) {
      y[i] = int(g() % 3);
      fill_image(g, y[i], x + i * 64);
    }
  };
  return d;
}

app::EvalData eval_set() {
  app::EvalData e;
  e.n = 48;
  e.size = {8, 8};
  for (int i = 0; i < e.n; ++i) e.labels.push_back(i % 3);
  e.fill = [](int first, int count, float* x) {
    for (int i = 0; i < count; ++i) {
      std::mt19937_64 g(mix_seed(77, std::uint64_t(first + i)));
      fill_image(g, (first + i) % 3, x + i * 64);
    }
  };
  return e;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("liere_test_bf16_train_" + name)).string();
}

// The train_loss of the step rows of a metrics file (log_every 1).
std::vector<double> step_losses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> losses;
  for (std::string l; std::getline(in, l);) {
    const io::json::Value v = io::json::parse(l);
    if (v.find("step")) losses.push_back(v.find("train_loss")->number);
  }
  return losses;
}

// Trains `epochs` epochs; returns the per-step losses and the final evaluation.
std::pair<std::vector<double>, app::EvalResult> train_run(const std::string& pe, const app::TrainOptions& opt) {
  app::TrainOptions o = opt;
  o.metrics = temp_path("metrics.jsonl");
  o.log_every = 1;
  std::remove(o.metrics.c_str());
  std::cerr.setstate(std::ios::failbit);
  app::Trainer t(small(pe), o, "synthetic");
  const app::EvalResult r = t.fit(data(), eval_set());
  std::cerr.clear();
  auto losses = step_losses(o.metrics);
  std::remove(o.metrics.c_str());
  return {losses, r};
}

std::vector<std::vector<float>> weights(app::Trainer& t) {
  std::vector<std::vector<float>> w;
  for (const auto& p : t.params()) w.emplace_back(p.value().data(), p.value().data() + p.numel());
  return w;
}

// Parameter tensors of t that differ from the checkpoint's (tensor<float> also requires dtype F32).
std::size_t differing_from_checkpoint(app::Trainer& t, const std::string& ckpt) {
  const nn::SafetensorsFile file = nn::load_safetensors(ckpt);
  std::size_t differing = 0;
  for (const auto& p : t.params()) {
    const Tensor c = file.tensor<float>(p.name());
    differing += std::memcmp(c.data(), p.value().data(), std::size_t(p.numel()) * sizeof(float)) != 0;
  }
  return differing;
}

}  // namespace

TEST_CASE("bf16 training: each trainer sets the precision of the CPU products, fp32 by default", "[bf16][trainer]") {
  std::cerr.setstate(std::ios::failbit);
  {
    app::Trainer t(small("liere"), options("fp32", 1), "synthetic");
    CHECK(cpu::gemm_precision() == Precision::fp32);
  }
  if (cpu::bf16_gemm_support()) {
    app::Trainer t16(small("liere"), options("bf16", 1), "synthetic");
    CHECK(cpu::gemm_precision() == Precision::bf16);
    app::Trainer t32(small("liere"), options("fp32", 1), "synthetic");  // the next trainer sets it back
    CHECK(cpu::gemm_precision() == Precision::fp32);
  } else {
    CHECK_THROWS_AS(options("bf16", 1).validate(), app::UsageError);
  }
  std::cerr.clear();
}

TEST_CASE("bf16 training: finite losses close to fp32's, step by step", "[bf16][trainer][needs-bf16]") {
  std::string why;
  if (!cpu::bf16_gemm_support(&why)) LIERE_SKIP(why);
  for (const char* pe : {"liere", "absolute"}) {
    INFO(pe);
    const auto [l32, r32] = train_run(pe, options("fp32", 2, "", "", 0));
    const auto [l16, r16] = train_run(pe, options("bf16", 2, "", "", 0));
    REQUIRE(l32.size() == 12);
    REQUIRE(l16.size() == 12);
    double worst = 0;
    int equal = 0;
    for (std::size_t s = 0; s < l16.size(); ++s) {
      CHECK(std::isfinite(l16[s]));
      liere::test::raise_error(worst, std::abs(l16[s] - l32[s]) / l32[s]);
      equal += l16[s] == l32[s];
    }
    WARN(pe << ": largest relative difference of a step's loss, bf16 against fp32, over 12 steps: " << worst
            << "; first step " << l32[0] << " / " << l16[0] << ", last " << l32.back() << " / " << l16.back()
            << "; test accuracy " << r32.acc << " / " << r16.acc);
    // Step 1 starts from the same weights: only the rounding of the products' operands (2⁻⁹ relative each) differs;
    // later steps add the drift of the weights. 1% bounds both here (measured: 0.02–0.05%). At a learning rate
    // where this tiny model's training is chaotic (1e-2) the two runs drift apart by ~15% within 24 steps, as two
    // fp32 runs with other seeds would: closeness step by step is a property of a stable run, so this one is.
    CHECK(worst < 0.01);
    CHECK(equal < 3);  // the bf16 products ran (fp32 and bf16 losses agreeing to the last bit would say they did not)
    CHECK(std::isfinite(r16.loss));
    CHECK(std::abs(r16.loss - r32.loss) < 0.01 * r32.loss);
  }
}

TEST_CASE("bf16 training: checkpoints stay fp32 and move between fp32 and bf16 runs", "[bf16][trainer][needs-bf16]") {
  std::string why;
  if (!cpu::bf16_gemm_support(&why)) LIERE_SKIP(why);
  const std::string ck16 = temp_path("bf16.safetensors"), ck32 = temp_path("fp32.safetensors"),
                    ck_mixed = temp_path("mixed.safetensors");
  for (const auto& p : {ck16, ck32, ck_mixed}) std::remove(p.c_str());
  std::cerr.setstate(std::ios::failbit);
  {
    app::Trainer t16(small("liere"), options("bf16", 1, ck16), "synthetic");
    t16.fit(data(), eval_set());
    CHECK(differing_from_checkpoint(t16, ck16) == 0);  // the fp32 master weights, as they are
    app::Trainer t32(small("liere"), options("fp32", 1, ck32), "synthetic");
    t32.fit(data(), eval_set());
  }
  // The same entries, dtypes and shapes as an fp32 run's checkpoint (values differ: another precision trained them).
  const nn::SafetensorsFile f16 = nn::load_safetensors(ck16), f32 = nn::load_safetensors(ck32);
  REQUIRE(f16.entries.size() == f32.entries.size());
  std::size_t different_values = 0;
  for (const auto& e : f32.entries) {
    INFO(e.name);
    const auto* e16 = f16.find(e.name);
    REQUIRE(e16);
    CHECK(e16->dtype == "F32");
    CHECK(e16->dtype == e.dtype);
    CHECK(e16->shape == e.shape);
    const auto b16 = f16.bytes(*e16), b32 = f32.bytes(e);
    REQUIRE(b16.size() == b32.size());
    different_values += std::memcmp(b16.data(), b32.data(), b16.size()) != 0;
  }
  CHECK(different_values > 0);

  // bf16 resumes exactly: 2 epochs == 1 epoch + save + resume + 1 epoch, bit for bit.
  app::Trainer straight(small("liere"), options("bf16", 2), "synthetic");
  straight.fit(data(), eval_set());
  app::Trainer resumed(small("liere"), options("bf16", 2, "", ck16), "synthetic");
  resumed.fit(data(), eval_set());
  const auto ws = weights(straight), wr = weights(resumed);
  REQUIRE(ws.size() == wr.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < ws.size(); ++i) differing += ws[i] != wr[i];
  CHECK(differing == 0);

  // Each precision takes the other's checkpoint: resumed after its last epoch (nothing left to train), the weights
  // are the file's, bit for bit; trained one epoch further, the losses stay finite.
  for (const auto& [ckpt, precision] : {std::pair{ck16, "fp32"}, std::pair{ck32, "bf16"}}) {
    INFO("checkpoint " << ckpt << " resumed in " << precision);
    app::Trainer t(small("liere"), options(precision, 1, "", ckpt), "synthetic");
    const app::EvalResult r = t.fit(data(), eval_set());
    CHECK(differing_from_checkpoint(t, ckpt) == 0);
    CHECK(std::isfinite(r.loss));
    app::Trainer further(small("liere"), options(precision, 2, ck_mixed, ckpt), "synthetic");
    const app::EvalResult r2 = further.fit(data(), eval_set());
    CHECK(std::isfinite(r2.loss));
    CHECK(differing_from_checkpoint(further, ck_mixed) == 0);
    CHECK(differing_from_checkpoint(further, ckpt) > 0);  // it trained
  }
  std::cerr.clear();
  for (const auto& p : {ck16, ck32, ck_mixed}) std::remove(p.c_str());
}
