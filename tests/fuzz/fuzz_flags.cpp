// tests/fuzz/fuzz_flags.cpp — the programs' command-line parser (examples/app/flags.hpp) with the trainers' flags
// on arbitrary command lines: the position-encoding flags (PEConfig::set) and the flags of TrainOptions and
// train_cifar, declared here with the same names and types (TrainOptions itself lives in trainer.cpp, which would
// bring the whole engine into this build; its validate() is range checks on the parsed values), and the kinds the
// other programs use: ranges, unsigned seeds, optional numbers, repeatable strings, a custom parser, positional
// arguments.
//
// Input: the arguments separated by NUL bytes. A command line either parses (then the encoding's describe() and
// label() run on the result) or throws liere::Error (UsageError is one).
#include <app/flags.hpp>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

using namespace liere;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"fuzz_flags"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  args.push_back(cur);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  PEConfig pe;
  std::string name = "x";
  int patch = 4;
  double fraction = 1.0;
  std::vector<int> eval_res;
  bool shuffle = false;
  app::Flags f("fuzz_flags", "the trainers' flags");
  f.add("data", &name, "a string");
  f.add("patch", &patch, "an int");
  f.add("data-fraction", &fraction, "a double");
  f.add("eval-res", &eval_res, "a list of ints");
  f.add_switch("shuffle-eval", &shuffle, "a switch");
  f.add_pe(&pe);
  // TrainOptions::add_flags' flags (examples/app/trainer.cpp).
  int epochs = 10, batch = 128, warmup = 0, threads = 2, eval_batch = 250, log_every = 0, bench_steps = 0;
  double lr = 1e-3, wd = 0.05, clip = 1.0;
  std::string optimizer = "adamw", save, resume, init_from, metrics;
  std::int64_t seed = 0;
  bool dry_run = false;
  f.section("Training");
  f.add("epochs", &epochs, "");
  f.add("batch", &batch, "");
  f.add("lr", &lr, "");
  f.add("wd", &wd, "");
  f.add("warmup", &warmup, "");
  f.add("clip", &clip, "");
  f.add("optimizer", &optimizer, "");
  f.add("seed", &seed, "");
  f.add("threads", &threads, "");
  f.add("eval-batch", &eval_batch, "");
  f.add("save", &save, "", "PATH");
  f.add("resume", &resume, "", "PATH");
  f.add("init-from", &init_from, "", "PATH");
  f.add("metrics", &metrics, "", "PATH");
  f.add("log-every", &log_every, "");
  f.add("bench-steps", &bench_steps, "");
  f.add_switch("dry-run", &dry_run, "");
  // The other programs' kinds (plot_metrics, make_video_task, pe_diagnostics, compare_runs).
  int frames = 8;
  double noise = 0;
  std::uint64_t useed = 0;
  std::optional<double> y_min;
  std::vector<std::string> ys, files;
  std::vector<int> grid;
  f.section("Others");
  f.add("frames", &frames, "", app::Range{2, 1024});
  f.add("noise", &noise, "", app::Range{0, 64});
  f.add("useed", &useed, "");
  f.add("y-min", &y_min, "");
  f.add("y", &ys, "", "KEY");
  f.add("grid", "G", "", [&](const std::string& v) {
          grid.clear();
          for (char c : v) grid.push_back(int(app::Flags::to_int(std::string(1, c))));
        }, [&] { return std::to_string(grid.size()); });
  f.positional("FILE...", &files, "");
  expect_result_or_error([&] {
    std::streambuf* old = std::cout.rdbuf(nullptr);  // --help prints the usage: not wanted 10^6 times
    struct Restore {
      std::streambuf* b;
      ~Restore() { std::cout.rdbuf(b); std::cout.clear(); }
    } restore{old};
    if (!f.parse(int(args.size()), argv.data())) return;
    (void)pe.describe();
    (void)pe.label();
  });
  return 0;
}
