// examples/app/flags.hpp — the programs' command lines: `--name value` or `--name=value` options, switches,
// the position-encoding flags (PEConfig) and a --help text built from the declarations.
//
//   Flags f("train_cifar", "Trains a ViT ...");
//   f.section("Training");
//   f.add("epochs", &epochs, "epochs");            // --epochs N      epochs  [10]
//   f.add_switch("dry-run", &dry_run, "...");
//   f.add_pe(&cfg.pe);
//   if (!f.parse(argc, argv)) return 0;            // --help printed the usage
//
// A bad command line throws UsageError; run_main turns it into exit code 2 with a pointer to --help.
#pragma once

#include <liere/core/config.hpp>
#include <liere/pe/config.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace liere::app {

struct UsageError : Error {
  using Error::Error;
};

// `--name value` or `--name=value`; switches take no value. Position-encoding flags go to a PEConfig.
class Flags {
 public:
  Flags(std::string program, std::string summary);

  void section(const std::string& title);
  void add(const std::string& name, int* v, const std::string& help);
  void add(const std::string& name, std::int64_t* v, const std::string& help);
  void add(const std::string& name, double* v, const std::string& help);
  void add(const std::string& name, std::string* v, const std::string& help, const std::string& metavar = "S");
  // A comma-separated list of integers, e.g. --eval-res 24,32,48.
  void add(const std::string& name, std::vector<int>* v, const std::string& help);
  void add_switch(const std::string& name, bool* v, const std::string& help);
  void add_pe(PEConfig* pe);

  std::string usage() const;

  // Returns false after printing the usage for --help.
  bool parse(int argc, char** argv);

  // Whether --name is an option of this program (a PE flag is known when a scratch PEConfig takes or rejects it).
  bool known(const std::string& name) const;

  static long long to_int(const std::string& s);
  static double to_double(const std::string& s);

 private:
  void opt(const std::string& name, const std::string& metavar, const std::string& help, const std::string& def,
           std::function<void(const std::string&)> set);

  std::string program_, summary_;
  std::ostringstream help_;
  std::map<std::string, std::function<void(const std::string&)>> setters_;
  std::map<std::string, bool*> switches_;
  PEConfig* pe_ = nullptr;
};

// Runs main's body: usage errors exit 2 with the message and a pointer to --help, other errors exit 1.
template <class F>
int run_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": " << e.what() << "\n(run " << program << " --help for the options)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace liere::app
