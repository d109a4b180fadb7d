// bench/bench_flash_attention.cpp — the fused rotary flash attention (backend/cpu/flash_attention.hpp) against the
// unfused attention (backend/cpu/attention.hpp) on the CPU: time and peak memory of forward + backward.
//
// B batch, T tokens, H heads, D head dim. The attention op alone (no Linears), float32, LieRE-8 tables shared by the
// batch (the CLS token at position 0 is rotated by its identity-like row, as the official code), head dim 64, 3
// heads (ViT-Tiny); the gradients of q, k, v and the tables. Default shapes (--shapes T:B,...):
//   65:128     CIFAR, ViT-Tiny's training batch (CLS + 8×8 patches)
//   1024:8     a 32×32 grid
//   4096:2     a 3D grid of tubelets (16×16×16)
// Each (implementation, shape) runs in its own child process (fork), so that its peak RSS is its own; the table
// prints the median [min] wall ms, the median process CPU ms per call (all threads), the peak RSS, and the bytes
// of the unfused op's (B, H, T, T) probabilities that the flash op does not keep (its backward also takes a
// (T, T) scratch per thread). One JSON object per run with --json.
#include <sys/wait.h>
#include <unistd.h>

#include <app/flags.hpp>
#include <climits>
#include <cstdio>
#include <liere/attention.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr int kHeads = 3, kHeadDim = 64, kBlock = 8;

using Shape = liere::bench::TokensBatch;

struct Options {
  int reps = 3, warmup = 1, threads = 0;
  liere::cpu::FlashTiles tiles{};
  std::string json;
  bool run_unfused = true, run_flash = true;
  std::vector<Shape> shapes = {{65, 128}, {1024, 8}, {4096, 2}};
};

// Random rotation tables: every block a product of plane rotations (the values do not change the timing; they
// are rotations like an encoding's so that the outputs stay in range).
void fill_table(liere::RotationTable<float>& t, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0, 6.283185307179586);
  t.set_identity();
  for (int r = 0; r < t.tokens(); ++r)
    for (int k = 0; k < t.num_blocks(); ++k) {
      float* m = t.block_data(r, k);
      for (int i = 0; i + 1 < kBlock; ++i) {  // multiply by the rotation of plane (i, i+1)
        const double a = u(g), c = std::cos(a), s = std::sin(a);
        for (int row = 0; row < kBlock; ++row) {
          const double x = m[row * kBlock + i], y = m[row * kBlock + i + 1];
          m[row * kBlock + i] = float(c * x - s * y);
          m[row * kBlock + i + 1] = float(s * x + c * y);
        }
      }
    }
}

void run_one(bool flash, Shape sh, const Options& o) {
  liere::bench::set_threads(o.threads);
  const int B = sh.B, T = sh.T, H = kHeads, D = kHeadDim, HD = H * D;
  const liere::AttentionShape s{B, T, H, D};
  const std::size_t n = std::size_t(s.size());
  std::vector<float> qkv(3 * n), out(n), dout(n), dqkv(3 * n);
  std::mt19937_64 g(1);
  std::normal_distribution<float> nd(0, 1);
  for (float& x : qkv) x = nd(g);
  for (float& x : dout) x = nd(g);
  std::vector<liere::RotationTable<float>> tables(H), dtables(H);
  liere::AttentionRotations<float> rot;
  std::vector<liere::HeadRotationGrad<float>> drot;
  for (int h = 0; h < H; ++h) {
    tables[h].resize(T, D, kBlock);
    fill_table(tables[h], 10 + h);
    dtables[h].resize(T, D, kBlock);
    rot.heads.push_back({tables[h].view(), nullptr});
    drot.push_back({dtables[h].view(), nullptr});
  }
  liere::AttentionCache<float> cache;
  const std::int64_t ld = 3 * HD;
  const float* q = qkv.data();
  float* d = dqkv.data();
  auto step = [&] {
    std::fill(dqkv.begin(), dqkv.end(), 0.f);
    for (auto& t : dtables) t.set_zero();
    if (flash) {
      liere::cpu::flash_attention_forward<float>(s, q, q + HD, q + 2 * HD, ld, rot, {}, out.data(), cache, o.tiles);
      liere::cpu::flash_attention_backward<float>(s, q, q + HD, q + 2 * HD, ld, rot, {}, dout.data(), cache, d, d + HD,
                                                  d + 2 * HD, &drot, o.tiles);
    } else {
      liere::attention_forward<float>(s, q, q + HD, q + 2 * HD, ld, rot, {}, out.data(), cache);
      liere::attention_backward<float>(s, q, q + HD, q + 2 * HD, ld, rot, {}, dout.data(), cache, d, d + HD, d + 2 * HD,
                                       &drot);
    }
  };
  const liere::bench::Timing t = liere::bench::time_ms(step, o.reps, o.warmup);
  double checksum = 0;
  for (float x : dqkv) checksum += x;
  const double probs_mib = double(B) * H * T * T * sizeof(float) / (1 << 20);
  // The (T, T) products, 2·B·H·T²·D flops each: forward Q̂K̂ᵀ and PV; backward dV, dP, dQ̂, dK̂ and, in the flash
  // op, Q̂K̂ᵀ again.
  const double flops = double(B) * H * T * T * D * (flash ? 14.0 : 12.0);
  std::printf(
      "%-8s T=%5d B=%4d  %9.1f [%9.1f] ms  cpu %9.1f ms  %6.1f GFLOP/s  peak RSS %8.1f MiB  (B,H,T,T) probs %8.1f MiB  "
      "sum %.6g\n",
      flash ? "flash" : "unfused", T, B, t.median_ms, t.min_ms, t.cpu_median_ms, flops / (t.median_ms * 1e6),
      liere::bench::peak_rss_mib(), probs_mib, checksum);
  std::fflush(stdout);
  liere::bench::JsonLine()
      .add("bench", "flash_attention")
      .add("impl", flash ? "flash" : "unfused")
      .add("T", T)
      .add("B", B)
      .add("H", H)
      .add("D", D)
      .add("block", kBlock)
      .add("tile_q", flash ? o.tiles.q : 0)
      .add("tile_k", flash ? o.tiles.k : 0)
      .add("threads", liere::bench::threads())
      .add("fwdbwd_ms", t.median_ms)
      .add("fwdbwd_min_ms", t.min_ms)
      .add("cpu_ms", t.cpu_median_ms)
      .add("peak_rss_mib", liere::bench::peak_rss_mib())
      .add("probs_mib", probs_mib)
      .emit(o.json);
}

// The flags into o; false after --help.
bool parse_flags(int argc, char** argv, Options& o) {
  using liere::app::Range;
  liere::app::Flags f("bench_flash_attention", "Flash vs unfused attention (CPU, float32, H=" + std::to_string(kHeads) +
                                                   ", D=" + std::to_string(kHeadDim) + ", LieRE-" +
                                                   std::to_string(kBlock) + " tables), forward + backward.");
  f.section("Options");
  f.add(
      "shapes", "LIST", "tokens:batch pairs",
      [&](const std::string& v) {
        o.shapes = liere::bench::parse_shapes(
            v, [](int T, int B) { return T >= 1 && B >= 1; }, "T:B with positive integers");
      },
      [&] { return liere::bench::shapes_text(o.shapes); });
  f.add(
      "tiles", "Q:K", "the flash op's query and key tile rows",
      [&](const std::string& v) {
        liere::cpu::FlashTiles t{};
        LIERE_ENSURE(std::sscanf(v.c_str(), "%d:%d", &t.q, &t.k) == 2 && t.q >= 1 && t.k >= 1,
                     "expected Q:K with positive integers");
        o.tiles = t;
      },
      [&] { return std::to_string(o.tiles.q) + ":" + std::to_string(o.tiles.k); });
  f.add(
      "impl", "WHICH", "both, flash or unfused",
      [&](const std::string& v) { liere::bench::parse_impl(v, o.run_unfused, o.run_flash); },
      [&] { return liere::bench::impl_text(o.run_unfused, o.run_flash); });
  f.add("reps", &o.reps, "timed repetitions (median, min)", Range{1, INT_MAX});
  f.add("warmup", &o.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("threads", &o.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", Range{0, INT_MAX});
  f.add("json", &o.json, "append one JSON object per run to PATH", "PATH");
  return f.parse(argc, argv);
}

// One (implementation, shape) in a child process of its own (fork), so that the peak RSS it prints is its own.
void run_forked(bool flash, Shape sh, const Options& o) {
  std::fflush(stdout);  // (else the child would write this process's buffered lines again)
  const pid_t pid = fork();
  if (pid == 0) {  // the child never returns: an error ends it with status 1, which the parent reports
    int code = 0;
    try {
      run_one(flash, sh, o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_flash_attention: error: %s\n", e.what());
      code = 1;
    }
    std::fflush(stdout);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    std::printf("%-8s T=%5d B=%4d  failed (status %d)\n", flash ? "flash" : "unfused", sh.T, sh.B, status);
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_flash_attention", [&] {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
    for (const Shape& sh : o.shapes)
      for (bool flash : {false, true})
        if (flash ? o.run_flash : o.run_unfused) run_forked(flash, sh, o);
    return 0;
  });
}
