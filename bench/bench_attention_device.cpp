// bench/bench_attention_device.cpp — the fused rotary flash attention against the unfused attention on a device (the
// GPU with --device cuda; the CPU for a smoke test): time and peak device memory of one forward + backward (or, with
// --pass fwd, the forward of such a training step alone) through nn::attention, the op the ViT runs (issue 22: "at
// T = 4096 it trains where the unfused path runs out of memory or uses N× more, both figures measured").
//
// LieRE-8 tables over a square grid of patches plus the CLS token (T = side² + 1), 3 heads of 64 (ViT-Tiny), float;
// the gradients of q, k, v and of the encoding's generators. Default shapes (--shapes T:B): 65:128 (CIFAR, 8×8),
// 1025:8 (32×32), 4097:2 (64×64). Per run: the median [min] wall ms over --reps after --warmup (the device
// synchronised around each), the peak bytes the device's buffer pool handed out during one forward + backward over
// what the inputs already held (on cuda every tensor and every backend temporary of the op is a pool block: cuda
// memory.cu, tensor/pool.hpp; on the CPU attention's own scratch is host memory outside the pool, so the figure
// leaves it out: bench_flash_attention measures the CPU by peak RSS), and the unfused op's (B, H, T, T)
// probabilities for scale. An error (out of device memory) is reported for its run, and the next run goes on.
//
//   ./build/bench/bench_attention_device --device cuda [--shapes 4097:2,8193:1] [--impl both] [--json OUT]
#include <app/flags.hpp>
#include <liere/nn/engine.hpp>
#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/memory.hpp>
#endif

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

using namespace liere;

constexpr int kHeads = 3, kHeadDim = 64, kBlock = 8;

using RunShape = liere::bench::TokensBatch;

struct Options {
  int reps = 3, warmup = 1;
  Device device = Device::cpu;
  bool run_unfused = true, run_flash = true;
  bool backward = true;  // --pass fwdbwd (false: --pass fwd)
  std::string json;
  std::vector<RunShape> shapes = {{65, 128}, {1025, 8}, {4097, 2}};
};

void sync(Device d) {
#ifdef LIERE_WITH_CUDA
  if (d == Device::cuda) cuda::synchronize();
#else
  (void)d;
#endif
}

// One forward + backward (or forward) of nn::attention; false (with the message) when the device ran out of memory.
bool run_one(bool flash, RunShape sh, const Options& o) {
  const int side = int(std::lround(std::sqrt(double(sh.T - 1))));
  const int B = sh.B, T = side * side + 1, H = kHeads, C = H * kHeadDim;
  const char* impl = flash ? "flash" : "unfused";
  nn::Params params;
  PEGeometry geo;
  geo.layers = 1;
  geo.heads = H;
  geo.head_dim = kHeadDim;
  geo.pos_dim = 2;
  geo.embed_dim = C;
  geo.train_grid = {side, side};
  geo.cls = true;
  PEConfig cfg;
  cfg.set("pe", "liere");
  cfg.set("block", std::to_string(kBlock));
  nn::PositionEncodingModuleT<float> pe(params, cfg, geo, 17);
  params.to(o.device);
  std::vector<float> x(std::size_t(B) * T * 3 * C), dy(std::size_t(B) * T * C);
  std::mt19937_64 g(1);
  std::normal_distribution<float> nd(0, 1);
  for (float& v : x) v = nd(g);
  for (float& v : dy) v = nd(g);
  BufferPool& pool = buffer_pool(o.device);
  auto json = [&] {  // the fields every line of this run has
    liere::bench::JsonLine j;
    j.add("bench", "attention_device").add("device", to_string(o.device)).add("impl", impl).add("T", T).add("B", B);
    return j;
  };
  try {
    Var qkv(Tensor::from(Shape{B, T, 3 * C}, x, o.device), true);
    const Tensor dyt = Tensor::from(Shape{B, T, C}, dy, o.device);
    auto step = [&] {
      Tape tape(5);
      const nn::EncodingVars<float> enc = pe.begin(tape, std::vector<int>{side, side}, o.device);
      auto cache = std::make_shared<AttentionCache<float>>();
      Var y = nn::attention(tape, qkv, H, &pe.layout(), enc, 0, cache, {}, flash);
      if (o.backward) tape.backward(y, dyt);
      sync(o.device);
    };
    step();  // the first run allocates; the peak below is a steady-state step's
    sync(o.device);
    pool.reset_peak();
    const std::size_t base = pool.stats().bytes_in_use;
    const liere::bench::Timing t = liere::bench::time_ms(step, o.reps, o.warmup);
    const double peak_mib = double(pool.stats().peak_in_use - base) / (1 << 20);
    const double probs_mib = double(B) * H * T * T * sizeof(float) / (1 << 20);
    const char* pass = o.backward ? "fwdbwd" : "fwd";
    std::printf(
        "%-8s %-4s T=%5d B=%4d %-6s %9.2f [%9.2f] ms  pool peak %9.1f MiB over the inputs  (B,H,T,T) probs %9.1f "
        "MiB\n",
        impl, to_string(o.device), T, B, pass, t.median_ms, t.min_ms, peak_mib, probs_mib);
    std::fflush(stdout);
    json()
        .add("H", H)
        .add("D", kHeadDim)
        .add("block", kBlock)
        .add(std::string(pass) + "_ms", t.median_ms)
        .add(std::string(pass) + "_min_ms", t.min_ms)
        .add("peak_mib", peak_mib)
        .add("probs_mib", probs_mib)
        .emit(o.json);
    return true;
  } catch (const Error& e) {
    std::printf("%-8s %-4s T=%5d B=%4d  failed: %s\n", impl, to_string(o.device), T, B, e.what());
    std::fflush(stdout);
    json().add("error", e.what()).emit(o.json);
    pool.trim();
    return false;
  }
}

// The flags into o; false after --help.
bool parse_flags(int argc, char** argv, Options& o) {
  using liere::app::Range;
  liere::app::Flags f(
      "bench_attention_device",
      "Flash vs unfused attention through nn::attention on a device (float32, H=" + std::to_string(kHeads) +
          ", D=" + std::to_string(kHeadDim) + ", LieRE-" + std::to_string(kBlock) +
          "), forward +\nbackward (or forward): median [min] ms and the pool's peak bytes.");
  f.section("Options");
  f.add(
      "device", "D", "cpu or cuda",
      [&](const std::string& v) {
        LIERE_ENSURE(v == "cpu" || v == "cuda", "expected cpu or cuda");
#ifndef LIERE_WITH_CUDA
        LIERE_ENSURE(v == "cpu", "this build has no CUDA backend (configure with -DLIERE_WITH_CUDA=ON)");
#endif
        o.device = v == "cuda" ? Device::cuda : Device::cpu;
      },
      [&] { return std::string(to_string(o.device)); });
  f.add(
      "shapes", "LIST", "tokens:batch pairs, tokens = side^2 + 1 (a square grid and CLS)",
      [&](const std::string& v) {
        o.shapes = liere::bench::parse_shapes(
            v,
            [](int T, int B) {
              const long side = T >= 2 ? std::lround(std::sqrt(double(T - 1))) : 0;
              return B >= 1 && T >= 2 && side * side == T - 1;
            },
            "T:B with T = side^2 + 1 (65, 1025, 4097, ...) and B >= 1");
      },
      [&] { return liere::bench::shapes_text(o.shapes); });
  f.add(
      "impl", "WHICH", "both, flash or unfused",
      [&](const std::string& v) { liere::bench::parse_impl(v, o.run_unfused, o.run_flash); },
      [&] { return liere::bench::impl_text(o.run_unfused, o.run_flash); });
  f.add(
      "pass", "WHICH", "fwdbwd (forward + backward) or fwd (the training forward alone)",
      [&](const std::string& v) {
        LIERE_ENSURE(v == "fwdbwd" || v == "fwd", "expected fwdbwd or fwd");
        o.backward = v == "fwdbwd";
      },
      [&] { return std::string(o.backward ? "fwdbwd" : "fwd"); });
  f.add("reps", &o.reps, "timed repetitions", Range{1, INT_MAX});
  f.add("warmup", &o.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("json", &o.json, "append one JSON object per run to PATH", "PATH");
  return f.parse(argc, argv);
}

// With --device cuda: whether a device is there (else the reason is printed); prints which one.
bool check_device(const Options& o) {
  if (o.device != Device::cuda) return true;
#ifdef LIERE_WITH_CUDA
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench_attention_device: --device cuda: %s\n", cuda::device_description().c_str());
    return false;
  }
  std::printf("device: %s\n", cuda::device_description().c_str());
#endif
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return app::run_main("bench_attention_device", [&] {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
    if (!check_device(o)) return 2;
    int failed = 0;
    for (const RunShape& sh : o.shapes)
      for (bool flash : {false, true})
        if (flash ? o.run_flash : o.run_unfused) failed += run_one(flash, sh, o) ? 0 : 1;
    return failed ? 1 : 0;
  });
}
