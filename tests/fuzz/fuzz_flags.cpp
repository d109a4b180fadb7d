// tests/fuzz/fuzz_flags.cpp — the programs' command-line parser (examples/app/flags.hpp) with the trainers' flags
// (TrainOptions, the position-encoding flags, and a flag of every value type) on arbitrary command lines.
//
// Input: the arguments separated by NUL bytes. A command line either parses (then TrainOptions::validate and the
// encoding's describe() run on the result) or throws liere::Error (UsageError is one).
#include <app/flags.hpp>
#include <app/trainer.hpp>

#include <iostream>
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

  app::TrainOptions opt;
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
  opt.add_flags(f);
  expect_result_or_error([&] {
    std::streambuf* old = std::cout.rdbuf(nullptr);  // --help prints the usage: not wanted 10^6 times
    struct Restore {
      std::streambuf* b;
      ~Restore() { std::cout.rdbuf(b); std::cout.clear(); }
    } restore{old};
    if (!f.parse(int(args.size()), argv.data())) return;
    opt.validate();
    (void)pe.describe();
    (void)pe.label();
  });
  return 0;
}
