// bench/bench_arrows.cpp — speed of the synthetic arrow task generator (data_tools/arrows.hpp) on one core,
// at the paper's three resolutions, and two statistics of the task itself.
//   layout            make_arrow_layout alone
//   render            ArrowRenderer::render of a ready layout
//   layout+render     both: one training sample, what a trainer pays per image
//   batch             make_arrow_batch, 256 samples per call, on all OpenMP threads (OMP_NUM_THREADS)
//   renderer setup    building an ArrowRenderer (font outlines are shared after the first)
// Every rate is the median of --reps runs of --n samples. Prints a table and JSON lines (--json PATH
// appends them). Then the accuracy of two shortcuts a model could learn without the Y: always one class
// (25%), and "the most common arrow direction" (ties split evenly).
#include <algorithm>
#include <app/flags.hpp>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <data_tools/arrows.hpp>
#include <fstream>
#include <functional>
#include <liere/io/json.hpp>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using namespace liere::data;

struct Options {
  int n = 20000;  // samples per run
  int reps = 5;
  std::string json;
};

// The flags into opt; false after --help.
bool parse_flags(int argc, char** argv, Options& opt) {
  liere::app::Flags f("bench_arrows",
                      "Times the arrow-task generator (layout, render, both) on one core at 108, 168, 276 pixels, and\n"
                      "the batch generator on all threads (OMP_NUM_THREADS); N samples per run, the median of R runs.");
  f.section("Options");
  f.add("n", &opt.n, "samples per run", liere::app::Range{1, INT_MAX});
  f.add("reps", &opt.reps, "runs; the median is reported", liere::app::Range{1, INT_MAX});
  f.add("json", &opt.json, "append the JSON lines to PATH", "PATH");
  return f.parse(argc, argv);
}

// The median wall time of f over reps runs after one warm-up, in seconds.
double median_seconds(const std::function<void()>& f, int reps) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void emit(const Options& opt, const std::string& what, int res, int threads, double per_second) {
  std::printf("  %-16s %4d px  %2d thread%s  %12.0f samples/s  %8.2f us/sample\n", what.c_str(), res, threads,
              threads == 1 ? " " : "s", per_second, 1e6 / per_second);
  liere::io::json::Writer w;
  w.begin_object().member("bench", "arrows").member("what", what).member("resolution", res).member("threads", threads);
  w.member("samples_per_s", std::round(per_second * 10) / 10).end_object();
  const std::string line = w.take();
  std::printf("%s\n", line.c_str());
  if (!opt.json.empty()) std::ofstream(opt.json, std::ios::app) << line << '\n';
}

// make_arrow_layout alone: what the layouts of one run cost, on one core.
void time_layout(const Options& opt, std::uint64_t& sink) {
  const double t = median_seconds(
      [&] {
        for (int i = 0; i < opt.n; ++i) sink += make_arrow_layout(arrow_sample_seed(1, std::uint64_t(i))).target.col;
      },
      opt.reps);
  emit(opt, "layout", 0, 1, opt.n / t);
}

// One resolution: the renderer's set-up, then render, layout+render (one core) and batch (all threads).
void time_resolution(const Options& opt, int res, std::uint64_t& sink) {
  const auto t0 = std::chrono::steady_clock::now();
  const ArrowRenderer renderer(res);
  const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  %-16s %4d px  %.1f ms\n", "renderer setup", res, setup * 1e3);

  std::vector<ArrowLayout> layouts(std::size_t(opt.n));
  for (int i = 0; i < opt.n; ++i) layouts[i] = make_arrow_layout(arrow_sample_seed(1, std::uint64_t(i)));
  std::vector<std::uint8_t> image(std::size_t(res) * res);
  const double t_render = median_seconds(
      [&] {
        for (const ArrowLayout& L : layouts) {
          renderer.render(L, image.data());
          sink += image[std::size_t(res) * res / 2];
        }
      },
      opt.reps);
  emit(opt, "render", res, 1, opt.n / t_render);

  const double t_both = median_seconds(
      [&] {
        for (int i = 0; i < opt.n; ++i) {
          renderer.render(make_arrow_layout(arrow_sample_seed(1, std::uint64_t(i))), image.data());
          sink += image[std::size_t(res) * res / 2];
        }
      },
      opt.reps);
  emit(opt, "layout+render", res, 1, opt.n / t_both);

  // batches of 256 into one buffer, as a trainer would fill its input tensor
  constexpr int kBatch = 256;
  std::vector<std::uint8_t> batch(std::size_t(kBatch) * res * res);
  std::vector<int> labels(kBatch);
  const double t_batch = median_seconds(
      [&] {
        for (int first = 0; first < opt.n; first += kBatch) {
          make_arrow_batch(renderer, 1, std::uint64_t(first), std::min(kBatch, opt.n - first), batch.data(),
                           labels.data());
          sink += std::uint64_t(labels[0]);
        }
      },
      opt.reps);
  emit(opt, "batch", res, max_threads(), opt.n / t_batch);
}

// Shortcuts: how often the most common direction among the 8 arrows is the label (ties split evenly).
void print_shortcuts() {
  constexpr int kShortcutSamples = 1000000;
  double majority = 0;
  for (int i = 0; i < kShortcutSamples; ++i) {
    const ArrowLayout L = make_arrow_layout(arrow_sample_seed(99, std::uint64_t(i)));
    int count[kArrowClasses] = {};
    for (Direction d : L.arrow_directions) ++count[int(d)];
    const int top = *std::max_element(count, count + kArrowClasses);
    const int ties = int(std::count(count, count + kArrowClasses, top));
    if (count[L.label_index()] == top) majority += 1.0 / ties;
  }
  std::printf("shortcuts over %d layouts: one class 25.0%%, most common arrow direction %.2f%%\n", kShortcutSamples,
              100.0 * majority / kShortcutSamples);
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_arrows", [&] {
    Options opt;
    if (!parse_flags(argc, argv, opt)) return 0;
    std::uint64_t sink = 0;  // keeps the work observable
    std::printf("arrow task generator: %d samples per run, median of %d runs\n", opt.n, opt.reps);
    time_layout(opt, sink);
    for (int res : {108, 168, 276}) time_resolution(opt, res, sink);
    print_shortcuts();
    std::printf("(checksum %llu)\n", (unsigned long long)(sink % 1000));
    return 0;
  });
}
