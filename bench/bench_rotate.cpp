// bench/bench_rotate.cpp — the rotation products of a training step with a table shared by the batch, at the
// ViT-Tiny CIFAR shape of issue 21: B 128, 65 tokens (the CLS token not rotated: 64 table rows), 3 heads of 64,
// q and k inside the packed qkv buffer (B, T, 3·H·D) as the attention reads them, 12 layers (each its own table and
// buffers, so that the data comes from memory as in a step), float32.
//   forward   y = R(t)·x for q and k of every head of the 12 layers         (cpu::rotate)
//   dx        dx += R(t)ᵀ·dy                                                 (cpu::rotate_backward, no dR)
//   dR        dR(t) += Σ_b dy·xᵀ                                             (cpu::rotate_backward, no dx)
// Two implementations of each, interleaved in every round (3 rounds; the round with the lowest median kept):
// "panels", the library's (row panels in registers for the forward and dx, backend/cpu/row_panels.hpp; the GEMM
// library for dR), and "gemms", the strided-batched GEMMs of backend/rotate_gemms.hpp on cpu::gemm (the previous
// CPU path, which the GPU still runs). dR runs the same GEMMs either way: its two rows show the run's noise.
// Prints a table and JSON lines (--json PATH appends them).
#include <app/flags.hpp>
#include <climits>
#include <liere/liere.hpp>
#include <random>

#include "bench_util.hpp"

namespace {

struct Options {
  int reps = 5, warmup = 1, threads = 0, batch = 128, layers = 12;
  std::vector<int> blocks = {32, 64};
  std::string json;
};

bool parse_flags(int argc, char** argv, Options& opt) {
  using liere::app::Range;
  liere::app::Flags f("bench_rotate",
                      "Times the rotation products of a ViT-Tiny training step (q and k of 3 heads of 64, 65 tokens,\n"
                      "packed qkv, all layers): the library's row panels against the strided-batched GEMMs, median\n"
                      "[min] ms over --reps after --warmup, three interleaved rounds.");
  f.section("Options");
  f.add("reps", &opt.reps, "timed repetitions", Range{1, INT_MAX});
  f.add("warmup", &opt.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("threads", &opt.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", Range{0, INT_MAX});
  f.add("batch", &opt.batch, "sequences", Range{1, 4096});
  f.add("layers", &opt.layers, "layers (each its own table and buffers)", Range{1, 64});
  f.add("blocks", &opt.blocks, "block sizes above 16, comma-separated");
  f.add("json", &opt.json, "append one JSON object per block size, product and implementation to PATH", "PATH");
  return f.parse(argc, argv);
}

constexpr int kTokens = 65, kHeads = 3, kHeadDim = 64, kFirst = 1;

struct Layer {
  std::vector<float> qkv, dqkv, y, table, dtable;
};

void run_block(int block, const Options& opt) {
  LIERE_ENSURE(block > 16 && kHeadDim % block == 0,
               "--blocks: " << block << " is not a block size above 16 that divides 64 (32 or 64)");
  const int B = opt.batch, T = kTokens, H = kHeads, D = kHeadDim, tr = T - kFirst, ld = 3 * H * D;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  auto filled = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = nd(rng);
    return v;
  };
  std::vector<Layer> layers(std::size_t(opt.layers));
  for (Layer& l : layers) {
    l.qkv = filled(std::size_t(B) * T * ld);
    l.dqkv.assign(l.qkv.size(), 0.f);
    l.y = filled(std::size_t(B) * T * H * D);  // also the dy of the backward
    l.table = filled(std::size_t(tr) * D * block);
    l.dtable.assign(l.table.size(), 0.f);
  }
  const liere::HeadsLayout xl{std::int64_t(T) * ld, ld}, yl = liere::HeadsLayout::contiguous(T, H, D);
  // offsets of q (0) and k (H·D) in a token's qkv values, and of the first rotated token
  auto q_or_k = [&](auto& buf, int which) { return buf.data() + kFirst * ld + which * H * D; };
  auto table_of = [&](Layer& l) { return liere::RotationTableView<const float>{l.table.data(), tr, D, block}; };
  auto dtable_of = [&](Layer& l) { return liere::RotationTableView<float>{l.dtable.data(), tr, D, block}; };
  const liere::cpu::detail::ThreadedGemms<float> gemms{};
  using Fn = std::function<void()>;
  const std::vector<std::pair<const char*, std::pair<Fn, Fn>>> products = {
      {"forward",
       {[&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              liere::cpu::rotate<float>(table_of(l), q_or_k(l.qkv, w), xl, l.y.data() + kFirst * H * D, yl, B, tr, H);
        },
        [&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              for (int h = 0; h < H; ++h)
                liere::rotate_gemms<float>(table_of(l), q_or_k(l.qkv, w) + h * D, xl,
                                           l.y.data() + kFirst * H * D + h * D, yl, B, gemms);
        }}},
      {"dx",
       {[&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              liere::cpu::rotate_backward<float>(table_of(l), q_or_k(l.qkv, w), xl, l.y.data() + kFirst * H * D, yl,
                                                 q_or_k(l.dqkv, w), xl, {}, B, tr, H);
        },
        [&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              for (int h = 0; h < H; ++h)
                liere::rotate_backward_gemms<float>(table_of(l), l.y.data() + kFirst * H * D + h * D, yl,
                                                    q_or_k(l.dqkv, w) + h * D, xl, 1.f, B, gemms);
        }}},
      {"dR",
       {[&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              liere::cpu::rotate_backward<float>(table_of(l), q_or_k(l.qkv, w), xl, l.y.data() + kFirst * H * D, yl,
                                                 nullptr, xl, dtable_of(l), B, tr, H);
        },
        [&] {
          for (Layer& l : layers)
            for (int w = 0; w < 2; ++w)
              for (int h = 0; h < H; ++h)
                liere::rotate_grad_gemms<float>(dtable_of(l), l.y.data() + kFirst * H * D + h * D, yl,
                                                q_or_k(l.qkv, w) + h * D, xl, B, gemms);
        }}},
  };
  const double gflop = 2.0 * B * tr * H * D * block * 2 * opt.layers / 1e9;  // one of the three, q and k
  for (const auto& [name, fns] : products) {
    liere::bench::Timing best[2];
    std::vector<double> runs[2];
    for (int round = 0; round < 3; ++round)
      for (int impl = 0; impl < 2; ++impl) {
        const liere::bench::Timing t = liere::bench::time_ms(impl == 0 ? fns.first : fns.second, opt.reps, opt.warmup);
        runs[impl].push_back(t.median_ms);
        if (round == 0 || t.median_ms < best[impl].median_ms) best[impl] = t;
      }
    for (int impl = 0; impl < 2; ++impl) {
      const char* impl_name = impl == 0 ? "panels" : "gemms";
      std::printf("%6d %8s %7s %10.1f %10.1f %9.1f %12.2f\n", block, name, impl_name, best[impl].median_ms,
                  best[impl].min_ms, gflop / best[impl].median_ms * 1e3,
                  impl == 0 ? best[1].median_ms / best[0].median_ms : 1.0);
      std::string rounds;
      for (std::size_t r = 0; r < runs[impl].size(); ++r) {
        if (r) rounds += ',';  // (two steps: gcc 12 warns about "," + std::string inlined here, -Wrestrict)
        rounds += std::to_string(runs[impl][r]);
      }
      liere::bench::JsonLine j;
      j.add("bench", "rotate_products")
          .add("impl", impl_name)
          .add("product", name)
          .add("block", block)
          .add("batch", B)
          .add("layers", opt.layers)
          .add("ms", best[impl].median_ms)
          .add("min_ms", best[impl].min_ms)
          .add("cpu_ms", best[impl].cpu_median_ms)
          .add("round_medians_ms", rounds)
          .add("gflops", gflop / best[impl].median_ms * 1e3)
          .add("threads", liere::bench::threads())
          .add("gemm", liere::cpu::gemm_backend_name(liere::cpu::gemm_backend()));
      j.emit(opt.json);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_rotate", [&] {
    Options opt;
    if (!parse_flags(argc, argv, opt)) return 0;
    liere::bench::set_threads(opt.threads);
    std::printf("threads %d, reps %d, warmup %d, batch %d, layers %d, gemm %s\n", liere::bench::threads(), opt.reps,
                opt.warmup, opt.batch, opt.layers, liere::cpu::gemm_backend_name(liere::cpu::gemm_backend()));
    std::printf("%6s %8s %7s %10s %10s %9s %12s\n", "block", "product", "impl", "ms", "min ms", "GFLOP/s",
                "gemms/panels");
    for (int block : opt.blocks) run_block(block, opt);
    return 0;
  });
}
