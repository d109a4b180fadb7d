// tests/test_cuda.cpp — the CUDA backend against the CPU path: every op's forward and backward, a whole ViT step
// for every encoding (attention with every block size, transforms, the absolute table), Adam/AdamW with
// clipping, a short training run, and checkpoints moving between the devices.
//
// Built only with LIERE_WITH_CUDA. Without a CUDA device main() returns 77, which CTest reports as skipped
// (SKIP_RETURN_CODE in tests/CMakeLists.txt).
//
// Tolerances (float on both sides; cuBLAS and the CPU GEMM sum in different orders): a tensor matches when
//   max |gpu − cpu| ≤ tol · max(1, max |cpu|)
// with tol = 1e-5 for single ops and 1e-4 for whole ViT steps (two layers of products and softmaxes) — GEMMs in
// full float: the tests switch TF32 off.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <liere/backend/cuda/memory.hpp>
#include <liere/nn/checkpoint.hpp>
#include <liere/nn/engine.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.hpp"

using namespace liere;

namespace {

constexpr double kOpTol = 1e-5;
constexpr double kStepTol = 1e-4;

double scaled_err(const std::vector<float>& gpu, const std::vector<float>& cpu, double scale = 1.0) {
  REQUIRE(gpu.size() == cpu.size());
  double m = scale, e = 0.0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    m = std::max(m, double(std::abs(cpu[i])));
    e = std::max(e, double(std::abs(gpu[i] - cpu[i])));
    if (!std::isfinite(gpu[i])) return INFINITY;
  }
  return e / m;
}

std::vector<float> randn(Index n, std::uint64_t seed, float scale = 1.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

// Runs f on both devices with the same inputs (random, requiring gradients) and the same seed gradient of the
// output; compares the output and every input's gradient.
void check_op(const std::string& name, const std::vector<Shape>& shapes,
              const std::function<Var(Tape&, const std::vector<Var>&)>& f, double tol = kOpTol, bool reduction = false) {
  INFO("op " << name);
  std::vector<std::vector<float>> values;
  for (std::size_t i = 0; i < shapes.size(); ++i) values.push_back(randn(shapes[i].numel(), 100 + i));
  std::vector<float> out[2];
  std::vector<std::vector<float>> grads[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu : Device::cuda;
    Tape tape(7);
    std::vector<Var> in;
    for (std::size_t i = 0; i < shapes.size(); ++i) in.emplace_back(Tensor::from(shapes[i], values[i], dev), true);
    Var y = f(tape, in);
    REQUIRE(y.device() == dev);
    out[d] = y.value().to_vector();
    tape.backward(y, Tensor::from(y.shape(), randn(y.numel(), 999), dev));
    for (const Var& v : in) grads[d].push_back(v.grad().to_vector());
  }
  // A reduction's rounding depends on the summation order, bounded by the sum of the magnitudes of its terms:
  // the output is compared relative to Σ|x| of the first input, not to |Σx| (which may be small).
  double out_scale = 1.0;
  if (reduction)
    for (float v : values[0]) out_scale += std::abs(v);
  CHECK(scaled_err(out[1], out[0], out_scale) <= tol);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    INFO("gradient of input " << i);
    CHECK(scaled_err(grads[1][i], grads[0][i]) <= tol);
  }
}

nn::VitConfig vit_config(const std::string& pe, int block, int head_dim = 8, bool video = false) {
  nn::VitConfig c;
  c.image = video ? std::vector<int>{4, 8, 12} : std::vector<int>{8, 12};
  c.tubelet = video ? 2 : 0;
  c.channels = 2;
  c.patch = 4;
  c.heads = 2;
  c.dim = c.heads * head_dim;
  c.depth = 2;
  c.mlp_hidden = 24;
  c.classes = 5;
  c.drop = 0.1;
  c.pe.set("pe", pe);
  if (pe == "liere" || pe == "comrope-ap" || pe == "comrope-ld") c.pe.set("block", std::to_string(block));
  return c;
}

// Perturbs every parameter so that constant-initialised ones (biases, norms, cls) do not hide errors.
void perturb(const nn::Params& params, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0, 0.3f);
  for (const auto& p : params) {
    std::vector<float> v = p.value().to_vector();
    const bool pe = p.name().rfind("pe.", 0) == 0;
    for (auto& x : v) x += pe ? 0.2f * n(g) : n(g);
    p.value().copy_from(Tensor::from(p.shape(), v));
  }
}

}  // namespace

TEST_CASE("cuda: elementwise, token and loss ops match the CPU", "[cuda]") {
  check_op("add", {{3, 70}, {3, 70}}, [](Tape& t, auto& v) { return ops::add(t, v[0], v[1]); });
  check_op("add(x, x)", {{300}}, [](Tape& t, auto& v) { return ops::add(t, v[0], v[0]); });
  check_op("add_broadcast", {{4, 5, 7}, {5, 7}}, [](Tape& t, auto& v) { return ops::add_broadcast(t, v[0], v[1]); });
  check_op("mul", {{513}, {513}}, [](Tape& t, auto& v) { return ops::mul(t, v[0], v[1]); });
  check_op("scale", {{77}}, [](Tape& t, auto& v) { return ops::scale(t, v[0], 0.37f); });
  check_op("sum", {{5000}}, [](Tape& t, auto& v) { return ops::sum(t, v[0]); }, kOpTol, true);
  check_op("gelu", {{4099}}, [](Tape& t, auto& v) { return ops::gelu(t, v[0]); });
  check_op("gelu twice", {{333}}, [](Tape& t, auto& v) { return ops::add(t, ops::gelu(t, v[0]), ops::gelu(t, v[0])); });
  check_op("dropout", {{5000}}, [](Tape& t, auto& v) { return ops::dropout(t, v[0], 0.3); });
  check_op("dropout p=1", {{100}}, [](Tape& t, auto& v) { return ops::dropout(t, v[0], 1.0); });
  check_op("layernorm", {{300, 48}, {48}, {48}}, [](Tape& t, auto& v) { return ops::layernorm(t, v[0], v[1], v[2], 1e-6); });
  check_op("layernorm wide", {{70, 768}, {768}, {768}}, [](Tape& t, auto& v) { return ops::layernorm(t, v[0], v[1], v[2]); });
  check_op("linear", {{2, 33, 24}, {40, 24}, {40}}, [](Tape& t, auto& v) { return ops::linear(t, v[0], v[1], v[2]); });
  check_op("linear, no bias", {{600, 64}, {30, 64}}, [](Tape& t, auto& v) { return ops::linear(t, v[0], v[1]); });
  check_op("prepend_token", {{3, 5, 8}, {1, 1, 8}}, [](Tape& t, auto& v) { return ops::prepend_token(t, v[0], v[1]); });
  check_op("select_token", {{3, 5, 8}}, [](Tape& t, auto& v) { return ops::select_token(t, v[0], 2); });
  check_op("mean_tokens", {{3, 5, 8}}, [](Tape& t, auto& v) { return ops::mean_tokens(t, v[0], 1); });
  check_op("patch_embed 2D", {{2, 3, 8, 12}, {16, 3, 4, 4}, {16}},
           [](Tape& t, auto& v) { return ops::patch_embed(t, v[0], v[1], v[2]); });
  check_op("patch_embed 3D", {{2, 3, 4, 8, 8}, {16, 3, 2, 4, 4}, {16}},
           [](Tape& t, auto& v) { return ops::patch_embed(t, v[0], v[1], v[2]); });
  for (double smoothing : {0.0, 0.1}) {
    const std::vector<int> labels = {3, 0, 99, 42, 7};
    check_op("cross_entropy", {{5, 100}}, [&](Tape& t, auto& v) {
      std::vector<float> rows;
      Var l = ops::cross_entropy(t, v[0], labels, smoothing, &rows);
      REQUIRE(rows.size() == 5);
      return l;
    });
  }
}

TEST_CASE("cuda: a ViT step matches the CPU for every encoding and block size", "[cuda]") {
  struct Case {
    std::string pe;
    int block, head_dim;
    bool video;
  };
  const std::vector<Case> cases = {
      {"none", 0, 8, false},       {"absolute", 0, 8, false},  {"visionllama", 0, 8, false},
      {"rope-mixed", 0, 8, false}, {"liere-commute", 0, 8, false}, {"liere", 2, 8, false},
      {"liere", 3, 12, false},     {"liere", 4, 8, false},     {"liere", 8, 16, false},
      {"liere", 16, 16, false},    {"liere", 64, 64, false},   {"string", 0, 8, false},
      {"comrope-ap", 4, 8, false}, {"liere", 8, 8, true},      {"absolute", 0, 8, true}};
  for (const Case& c : cases) {
    INFO("pe " << c.pe << " block " << c.block << " head_dim " << c.head_dim << (c.video ? " video" : ""));
    const nn::VitConfig cfg = vit_config(c.pe, c.block, c.head_dim, c.video);
    Shape xs{3, cfg.channels};
    for (int d : cfg.image) xs.push_back(d);
    const std::vector<float> x = randn(xs.numel(), 5);
    const std::vector<int> y = {1, 4, 0};
    std::vector<float> logits[2];
    std::vector<std::vector<float>> grads[2];
    std::vector<std::string> names;
    for (int d = 0; d < 2; ++d) {
      const Device dev = d == 0 ? Device::cpu : Device::cuda;
      nn::Params params;
      nn::Vit model(params, cfg, 11);
      perturb(params, 12);
      params.to(dev);
      Tape tape(3);
      Var xv(Tensor::from(xs, x, dev));
      Var z = model.forward(tape, xv);
      logits[d] = z.value().to_vector();
      tape.backward(ops::cross_entropy(tape, z, y, 0.1));
      for (const auto& p : params) {
        grads[d].push_back(p.grad().to_vector());
        if (d == 0) names.push_back(p.name());
      }
      if (d == 1 && c.pe == "liere" && !c.video) {  // the attention map comes back from the device
        const auto& probs = model.blocks()[0].attn().last_probs();
        REQUIRE(probs.size() == std::size_t(3) * cfg.heads * cfg.tokens() * cfg.tokens());
      }
    }
    CHECK(scaled_err(logits[1], logits[0]) <= kStepTol);
    for (std::size_t i = 0; i < names.size(); ++i) {
      INFO("gradient of " << names[i]);
      CHECK(scaled_err(grads[1][i], grads[0][i]) <= kStepTol);
    }
  }
}

TEST_CASE("cuda: Adam/AdamW with clipping, a short training run and checkpoints across devices", "[cuda]") {
  nn::VitConfig cfg = vit_config("liere", 4);
  cfg.drop = 0.0;
  Shape xs{8, cfg.channels};
  for (int d : cfg.image) xs.push_back(d);
  std::vector<float> loss[2];
  std::vector<std::vector<float>> final_params[2];
  test::TempDir dir;
  const std::string ckpt = dir.file("gpu.safetensors");
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu : Device::cuda;
    nn::Params params;
    nn::Vit model(params, cfg, 21);
    params.to(dev);
    for (bool decoupled : {true, false}) {
      optim::AdamConfig ac;
      ac.lr = 3e-3;
      ac.weight_decay = 0.05;
      ac.decoupled = decoupled;
      optim::Adam adam(params.all(), ac);
      for (int step = 0; step < 6; ++step) {  // an "epoch" of 6 steps over fixed synthetic batches
        const std::vector<float> x = randn(xs.numel(), 1000 + step);
        std::vector<int> y(8);
        for (int i = 0; i < 8; ++i) y[i] = (i * 7 + step) % cfg.classes;
        Tape tape(step);
        Var l = ops::cross_entropy(tape, model.forward(tape, Var(Tensor::from(xs, x, dev))), y);
        loss[d].push_back(l.item());
        tape.backward(l);
        optim::clip_grad_norm(params.all(), 0.5);
        adam.step();
        params.zero_grad();
      }
      if (d == 1 && decoupled) nn::save_checkpoint(ckpt, params, &adam, {{"device", "cuda"}});
    }
    for (const auto& p : params) final_params[d].push_back(p.value().to_vector());
  }
  REQUIRE(loss[0].size() == loss[1].size());
  for (std::size_t i = 0; i < loss[0].size(); ++i) {
    INFO("step " << i << ": cpu loss " << loss[0][i] << ", cuda loss " << loss[1][i]);
    CHECK(std::abs(loss[1][i] - loss[0][i]) <= 1e-3 * std::max(1.f, std::abs(loss[0][i])));
  }
  for (std::size_t i = 0; i < final_params[0].size(); ++i) CHECK(scaled_err(final_params[1][i], final_params[0][i]) <= 1e-3);

  // The checkpoint written from the GPU loads on the CPU and back on the GPU, bit for bit.
  nn::Params cpu_params, gpu_params;
  nn::Vit cpu_model(cpu_params, cfg, 99), gpu_model(gpu_params, cfg, 98);
  gpu_params.to(Device::cuda);
  optim::Adam cpu_adam(cpu_params.all(), optim::adamw_config(1e-3)), gpu_adam(gpu_params.all(), optim::adamw_config(1e-3));
  nn::load_checkpoint(ckpt, cpu_params, &cpu_adam);
  nn::load_checkpoint(ckpt, gpu_params, &gpu_adam);
  CHECK(cpu_adam.steps() == 6);
  const auto file = nn::load_safetensors(ckpt);
  for (const auto& p : cpu_params) {
    const Tensor saved = file.tensor<float>(p.name());
    CHECK(p.value().to_vector() == saved.to_vector());
    CHECK(gpu_params[p.name()].value().to_vector() == saved.to_vector());
    CHECK(cpu_adam.state(p.name()).m.to_vector() == gpu_adam.state(p.name()).m.to_vector());
  }
}

TEST_CASE("cuda: out of device memory is a clear error", "[cuda]") {
  std::size_t free_bytes = 0, total = 0;
  cuda::memory_info(&free_bytes, &total);
  const Index too_many = Index(total / sizeof(float)) * 2;
  try {
    Tensor t(Shape{too_many}, Device::cuda);
    FAIL("allocating " << too_many << " floats succeeded");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("out of memory on cuda") != std::string::npos);
  }
  Tensor ok = Tensor::full(Shape{10}, 2.f, Device::cuda);  // the device still works
  CHECK(ok.to_vector() == std::vector<float>(10, 2.f));
}

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::cout << "test_cuda: skipped: " << cuda::device_description() << "\n";
    return 77;
  }
  std::cout << "test_cuda: " << cuda::device_description() << "\n";
  cuda::set_tf32(false);
  return Catch::Session().run(argc, argv);
}

// ==== rotation tables on the device (branch `tables`; a separate block: backend/cuda/rotation_table.cu) ==========
// The device's tables and generator gradients against cpu::rotation_table_forward/backward (the same per-block
// bodies, backend/kernels/matrix_exp.hpp; the bodies themselves are checked against lie/exp.hpp and the closed
// forms on the CPU by test_rotation_table), every block size, and NaN generators raising the device flag.
TEST_CASE("cuda: rotation tables and their backward match the CPU op", "[cuda][tables]") {
  for (int block : {2, 3, 4, 8, 16, 32, 64}) {
    INFO("block " << block);
    const int D = block == 3 ? 48 : 64;
    const RotationTableShape sh{6, 2, 17, D, block};
    std::vector<float> w = randn(Index(sh.num_generators()), 11 + block, 2.f), p = randn(Index(sh.rows) * sh.dim, 3),
                       dt = randn(Index(sh.table_size()), 5);
    std::vector<float> tab_cpu(std::size_t(sh.table_size())), dw_cpu(w.size(), 0.5f);
    cpu::rotation_table_forward(w.data(), p.data(), tab_cpu.data(), sh);
    cpu::rotation_table_backward(w.data(), p.data(), dt.data(), dw_cpu.data(), sh);
    const Tensor wg = Tensor::from(Shape{Index(w.size())}, w, Device::cuda);
    const Tensor pg = Tensor::from(Shape{Index(p.size())}, p, Device::cuda);
    const Tensor dtg = Tensor::from(Shape{Index(dt.size())}, dt, Device::cuda);
    Tensor tab(Shape{Index(sh.table_size())}, Device::cuda);
    Tensor dw = Tensor::full(Shape{Index(w.size())}, 0.5f, Device::cuda);
    cuda::rotation_table_forward(wg.data(), pg.data(), tab.data(), sh);
    cuda::rotation_table_backward(wg.data(), pg.data(), dtg.data(), dw.data(), sh);
    const double ef = scaled_err(tab.to_vector(), tab_cpu), eb = scaled_err(dw.to_vector(), dw_cpu);
    std::cout << "rotation tables block " << block << ": forward max err " << ef << ", backward " << eb << "\n";
    CHECK(ef <= 2e-5);
    CHECK(eb <= 1e-4);
  }
  CHECK(!cuda::rotation_table_nonfinite());
  const RotationTableShape sh{1, 2, 3, 16, 8};
  std::vector<float> w(std::size_t(sh.num_generators()), 0.1f), p(6, 0.5f);
  w[3] = NAN;
  const Tensor wg = Tensor::from(Shape{Index(w.size())}, w, Device::cuda);
  const Tensor pg = Tensor::from(Shape{Index(p.size())}, p, Device::cuda);
  Tensor tab(Shape{Index(sh.table_size())}, Device::cuda);
  cuda::rotation_table_forward(wg.data(), pg.data(), tab.data(), sh);
  CHECK(std::isnan(tab.to_vector()[0]));
  CHECK(cuda::rotation_table_nonfinite());
  CHECK(!cuda::rotation_table_nonfinite());  // read and cleared
}
