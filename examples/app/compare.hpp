// examples/app/compare.hpp — what the trainers' --compare modes share: the --compare flags and comma-separated lists
// of encoding labels ("abs", "liere8", "comrope-ld4", …: --pe values, which PEConfig::set("pe", label) reads with
// their block sizes).
//
//   for (const auto& l : app::split_list("abs,liere8")) cfg.pe.set("pe", l);
#pragma once

#include <app/trainer.hpp>
#include <liere/pe/config.hpp>

#include <string>
#include <vector>

namespace liere::app {

// --compare LIST, --compare-json PATH, --compare-png PATH: train each encoding of LIST in turn under the same budget
// (train_arrows, train_ucf101).
struct CompareOptions {
  std::string list, json, png;

  // A section `title` with the three flags; `example` is a LIST for --compare's help.
  void add_flags(Flags& f, const std::string& title, const std::string& example, const std::string& json_help);
  // Without --pe and --compare on the command line (f parsed), `fallback` becomes the list: a program's default
  // comparison.
  void default_to(const Flags& f, const std::string& fallback) {
    if (list.empty() && !f.given("pe")) list = fallback;
  }
  // Ranks other than 0 write no files: clears --compare-json and --compare-png there.
  void root_writes_files();
  // After default_to, before any training: what the comparison cannot honour is a usage error, not silently dropped
  // (--compare-json or --compare-png without a list; with one, --pe, --save, --resume or --predictions, which are
  // for one run), every label of the list is an encoding (with `base`'s other flags), and the files' folders exist.
  void validate(const Flags& f, const TrainOptions& opt, const PEConfig& base) const;
  // The labels of the list; an empty list is an error.
  std::vector<std::string> labels() const;
};

// "a,b,,c" → {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s);

// The --compare-png bar chart: test accuracy in % with the 95% CI as whiskers, on a 0–100 axis.
// results[g * bars.size() + b] is bar b (an encoding) of group g (an image size, a data set).
void write_accuracy_chart(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::vector<std::string>& groups, const std::vector<std::string>& bars,
                          const std::vector<const EvalResult*>& results);

}  // namespace liere::app
