// bench/bench_cudnn_attention.cpp — cuDNN 9's fused attention (backend/cuda/cudnn_attention.hpp) on the GPU, the
// peer issue 22 measures liere's attention against: softmax(q kᵀ / √D) v in bf16 or fp16 with fp32 accumulation,
// H = 3 heads of D = 64 (ViT-Tiny), the same T:B shapes as bench_attention_device. Per shape: the median [min] wall
// ms of the forward (with the rows' log-sum-exps, as for training) and of forward + backward, over --reps after
// --warmup, the device synchronised around each; the engines cuDNN chose and their workspace. A shape cuDNN has no
// plan for (or no backward plan) is reported with cuDNN's reason, and the next one goes on.
//
// What the figures leave out: q, k, v are random normal values already in cuDNN's (B, H, T, D) layout. liere's
// attention (bench_attention_device, float) rotates q and k and changes the layout inside its own kernels; in a
// pipeline with cuDNN that is liere's gather (docs/gpu.md: 40 µs a layer at B 128, T 65 on an H200) before cuDNN,
// and the gradients' way back after it. bench/gpu_run.sh runs both programs in one call.
//
//   ./build/bench/bench_cudnn_attention [--shapes 65:128,1025:8,4097:2] [--type bf16|fp16] [--json OUT]
#include <app/flags.hpp>
#include <liere/backend/kernels/bf16.hpp>
#include <liere/backend/kernels/fp16.hpp>
#include <liere/core/config.hpp>
#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/cudnn_attention.hpp>
#include <liere/backend/cuda/memory.hpp>
#endif

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

using namespace liere;

constexpr int kHeads = 3, kHeadDim = 64;

struct Options {
  int reps = 5, warmup = 2;
  bool fp16 = false;
  std::string json;
  std::vector<liere::bench::TokensBatch> shapes = {{65, 128}, {1025, 8}, {4097, 2}};
};

bool parse_flags(int argc, char** argv, Options& o) {
  using liere::app::Range;
  liere::app::Flags f("bench_cudnn_attention",
                      "cuDNN's fused attention on the GPU (H=" + std::to_string(kHeads) +
                          ", D=" + std::to_string(kHeadDim) +
                          ", 16-bit inputs, fp32 accumulation): median [min] ms of the forward and of\nforward + "
                          "backward, the engines cuDNN chose.");
  f.section("Options");
  f.add(
      "shapes", "LIST", "tokens:batch pairs",
      [&](const std::string& v) {
        o.shapes = liere::bench::parse_shapes(
            v, [](int T, int B) { return T >= 1 && B >= 1; }, "T:B with T >= 1 and B >= 1");
      },
      [&] { return liere::bench::shapes_text(o.shapes); });
  f.add(
      "type", "T", "bf16 or fp16",
      [&](const std::string& v) {
        LIERE_ENSURE(v == "bf16" || v == "fp16", "expected bf16 or fp16");
        o.fp16 = v == "fp16";
      },
      [&] { return std::string(o.fp16 ? "fp16" : "bf16"); });
  f.add("reps", &o.reps, "timed repetitions", Range{1, INT_MAX});
  f.add("warmup", &o.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("json", &o.json, "append one JSON object per shape to PATH", "PATH");
  return f.parse(argc, argv);
}

#ifdef LIERE_WITH_CUDA
// One shape: false when cuDNN had no forward plan or the device ran out of memory (the message printed).
bool run_one(liere::bench::TokensBatch sh, const Options& o) {
  const Precision h = o.fp16 ? Precision::fp16 : Precision::bf16;
  const cuda::CudnnAttentionShape s{sh.B, kHeads, sh.T, kHeadDim};
  const std::size_t n = std::size_t(s.B) * s.H * s.T * s.D, bytes = n * 2, rows = std::size_t(s.B) * s.H * s.T;
  auto json = [&] {
    liere::bench::JsonLine j;
    j.add("bench", "cudnn_attention").add("type", to_string(h)).add("T", s.T).add("B", s.B).add("H", s.H);
    return j.add("D", s.D).add("cudnn", cuda::cudnn_version());
  };
  try {
    std::vector<std::uint16_t> host(n);
    std::mt19937_64 g(7);
    std::normal_distribution<float> nd(0, 1);
    cuda::DeviceBlock q(bytes), k(bytes), v(bytes), out(bytes), lse(rows * sizeof(float)), dout(bytes), dq(bytes),
        dk(bytes), dv(bytes);
    for (cuda::DeviceBlock* b : {&q, &k, &v, &dout}) {
      for (std::uint16_t& x : host) x = o.fp16 ? kernels::to_fp16(nd(g)).bits : kernels::to_bf16(nd(g)).bits;
      cuda::copy_bytes(b->get(), Device::cuda, host.data(), Device::cpu, bytes);
    }
    cuda::CudnnAttention att(s, h, 1.0f / std::sqrt(float(s.D)));
    auto forward = [&] {
      att.forward(q.get(), k.get(), v.get(), out.get(), lse.get<float>());
      cuda::synchronize();
    };
    const liere::bench::Timing tf = liere::bench::time_ms(forward, o.reps, o.warmup);
    std::printf("cudnn    %s T=%5d B=%4d  forward          %9.3f [%9.3f] ms   %s\n", to_string(h), s.T, s.B,
                tf.median_ms, tf.min_ms, att.forward_engine().c_str());
    liere::bench::JsonLine j = json();
    j.add("fwd_ms", tf.median_ms).add("fwd_min_ms", tf.min_ms).add("fwd_engine", att.forward_engine());
    if (att.backward_plan()) {
      auto step = [&] {
        att.forward(q.get(), k.get(), v.get(), out.get(), lse.get<float>());
        att.backward(q.get(), k.get(), v.get(), out.get(), lse.get<float>(), dout.get(), dq.get(), dk.get(), dv.get());
        cuda::synchronize();
      };
      const liere::bench::Timing tb = liere::bench::time_ms(step, o.reps, o.warmup);
      std::printf("cudnn    %s T=%5d B=%4d  forward+backward %9.3f [%9.3f] ms   %s\n", to_string(h), s.T, s.B,
                  tb.median_ms, tb.min_ms, att.backward_engine().c_str());
      j.add("fwdbwd_ms", tb.median_ms).add("fwdbwd_min_ms", tb.min_ms).add("bwd_engine", att.backward_engine());
    } else {
      std::printf("cudnn    %s T=%5d B=%4d  backward: no plan: %s\n", to_string(h), s.T, s.B, att.why().c_str());
      j.add("bwd_error", att.why());
    }
    j.add("workspace_mib", double(att.workspace_bytes()) / (1 << 20)).emit(o.json);
    std::fflush(stdout);
    return true;
  } catch (const Error& e) {
    std::printf("cudnn    %s T=%5d B=%4d  failed: %s\n", to_string(h), s.T, s.B, e.what());
    std::fflush(stdout);
    json().add("error", e.what()).emit(o.json);
    return false;
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  return app::run_main("bench_cudnn_attention", [&] {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
#ifdef LIERE_WITH_CUDA
    std::string why;
    if (cuda::device_count() == 0) {
      std::fprintf(stderr, "bench_cudnn_attention: no CUDA device: %s\n", cuda::device_description().c_str());
      return 2;
    }
    if (!cuda::cudnn_loaded(&why)) {
      std::fprintf(stderr, "bench_cudnn_attention: %s\n", why.c_str());
      return 2;
    }
    std::printf("device: %s, cuDNN %s\n", cuda::device_description().c_str(), cuda::cudnn_version().c_str());
    int failed = 0;
    for (const liere::bench::TokensBatch& sh : o.shapes) failed += run_one(sh, o) ? 0 : 1;
    return failed ? 1 : 0;
#else
    std::fprintf(stderr,
                 "bench_cudnn_attention: this build has no CUDA backend (configure with -DLIERE_WITH_CUDA=ON)\n");
    return 2;
#endif
  });
}
