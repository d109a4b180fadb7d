// examples/app/flags.hpp — the command lines of every program in examples/: `--name value` or `--name=value`
// options, switches, positional arguments, the position-encoding flags (PEConfig) and a --help text built from
// the declarations. Groups of flags several programs share are declared once, next to what they fill:
// ModelOptions and TrainOptions (app/trainer.hpp), CompareOptions (app/compare.hpp).
//
//   Flags f("train_cifar", "Trains a ViT ...");
//   f.section("Training");
//   f.add("epochs", &epochs, "epochs");            // --epochs N      epochs  [10]
//   f.add("frames", &frames, "frames", {2, 1024}); // out of range: "--frames 9999: expected an integer in [2, 1024]"
//   f.add_switch("dry-run", &dry_run, "...");
//   f.add_pe(&cfg.pe);
//   f.positional("FILE...", &files, "metrics files");
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
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace liere::app {

struct UsageError : Error {
  using Error::Error;
};

// LIERE_USAGE(cond, msg): a UsageError (exit 2) with the streamed message when cond is false: LIERE_ENSURE for the
// checks of a command line, without the source location.
#define LIERE_USAGE(cond, msg)                                \
  do {                                                        \
    if (!(cond)) {                                            \
      std::ostringstream liere_usage_msg_;                    \
      liere_usage_msg_ << msg;                                \
      throw ::liere::app::UsageError(liere_usage_msg_.str()); \
    }                                                         \
  } while (false)

// An error every rank of a data-parallel run raises alike (e.g. a non-finite loss after the all-reduce): rank 0
// alone prints it and the ranks end normally.
struct AllRanksError : Error {
  using Error::Error;
};

// A usage error (exit 2) naming the flag when PATH could not be written at the end of a run: its folder does not
// exist or is not writable, or PATH is a folder (PATH empty: the flag is not given). Every program checks the files
// it writes last this way before any work.
void check_output_folder(const std::string& flag, const std::string& path);

// The closed range a numeric option must lie in; a value outside is a UsageError naming the range.
struct Range {
  double lo, hi;
};

// `--name value` or `--name=value`; switches take no value. Position-encoding flags go to a PEConfig. Arguments
// that do not start with "--" are positional (an error unless the program declares positional()).
class Flags {
 public:
  Flags(std::string program, std::string summary);

  void section(const std::string& title);
  void add(const std::string& name, int* v, const std::string& help, std::optional<Range> range = {});
  void add(const std::string& name, std::int64_t* v, const std::string& help, std::optional<Range> range = {});
  // 0 to 2^64 - 1 (seeds).
  void add(const std::string& name, std::uint64_t* v, const std::string& help);
  void add(const std::string& name, double* v, const std::string& help, std::optional<Range> range = {});
  // A number or, when not given, nothing ("none" in --help).
  void add(const std::string& name, std::optional<double>* v, const std::string& help);
  void add(const std::string& name, std::string* v, const std::string& help, const std::string& metavar = "S");
  // A comma-separated list of integers, e.g. --eval-res 24,32,48.
  void add(const std::string& name, std::vector<int>* v, const std::string& help);
  // Repeatable: every --name V appends V.
  void add(const std::string& name, std::vector<std::string>* v, const std::string& help, const std::string& metavar);
  // Any other type: `set` parses a value (an Error becomes a UsageError naming the flag), `get` writes the current
  // one (the --help default and canonical()).
  void add(const std::string& name, const std::string& metavar, const std::string& help,
           std::function<void(const std::string&)> set, std::function<std::string()> get);
  void add_switch(const std::string& name, bool* v, const std::string& help);
  void add_pe(PEConfig* pe);
  // The arguments that do not start with "--", in order; `metavar` names them in the usage line.
  void positional(const std::string& metavar, std::vector<std::string>* v, const std::string& help);

  std::string usage() const;

  // Returns false after printing the usage for --help.
  bool parse(int argc, char** argv);

  // Whether --name is an option of this program (a PE flag is known when a scratch PEConfig takes or rejects it).
  bool known(const std::string& name) const;

  // Whether the last parse() saw --name (an option, a switch or a position-encoding flag).
  bool given(const std::string& name) const { return given_.count(name) > 0; }

  // Every option's value (given or default) and every switch, "name=value" lines sorted by name, and the
  // position encoding's description: what the ranks of a data-parallel run compare (all but `ignore`).
  std::string canonical(const std::vector<std::string>& ignore = {}) const;

  static long long to_int(const std::string& s);
  static std::uint64_t to_uint(const std::string& s);
  static double to_double(const std::string& s);

 private:
  void opt(const std::string& name, const std::string& metavar, const std::string& help, const std::string& def,
           std::function<void(const std::string&)> set, std::function<std::string()> get);

  std::string program_, summary_;
  std::ostringstream help_;
  std::map<std::string, std::function<void(const std::string&)>> setters_;
  std::map<std::string, std::function<std::string()>> getters_;
  std::map<std::string, bool*> switches_;
  std::set<std::string> given_;
  PEConfig* pe_ = nullptr;
  std::vector<std::string>* positional_ = nullptr;
  std::string positional_metavar_;
};

// How an error leaves main (run_main). A distributed run (app/comm.hpp) installs its own: `all_ranks` says that
// every rank raised the same error (a usage error once the ranks are known to share their flags), so rank 0 alone
// prints it; otherwise the rank that failed prints it and ends the job, since the others may be waiting for it.
// The default prints `text` to stderr and returns `code`.
using ErrorExit = int (*)(const std::string& text, int code, bool all_ranks);
void set_error_exit(ErrorExit f);
int error_exit(const std::string& text, int code, bool all_ranks);
// Prepended to error messages ("[rank 1/2] " in a distributed run).
void set_error_prefix(const std::string& prefix);
const std::string& error_prefix();
// Whether a usage error is known to be raised by every rank alike (set once the ranks compared their flags).
void set_usage_errors_shared(bool shared);
bool usage_errors_shared();

// Runs main's body: usage errors exit 2 with the message and a pointer to --help, other errors exit 1.
template <class F>
int run_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    return error_exit(error_prefix() + program + ": " + e.what() + "\n(run " + program + " --help for the options)\n", 2,
                      usage_errors_shared());
  } catch (const AllRanksError& e) {
    return error_exit(error_prefix() + program + ": error: " + e.what() + "\n", 1, true);
  } catch (const std::bad_alloc&) {  // its what() is "std::bad_alloc"
    return error_exit(error_prefix() + program + ": error: out of memory: the data or the model does not fit in this " +
                          "machine's memory (std::bad_alloc; a smaller --batch, image size or data set needs less)\n",
                      1, false);
  } catch (const std::exception& e) {
    return error_exit(error_prefix() + program + ": error: " + e.what() + "\n", 1, false);
  }
}

}  // namespace liere::app
