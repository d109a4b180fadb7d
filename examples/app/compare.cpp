// examples/app/compare.cpp — encoding labels and lists for --compare.
#include <app/compare.hpp>

#include <data_tools/plot.hpp>

#include <sstream>

namespace liere::app {

void CompareOptions::add_flags(Flags& f, const std::string& title, const std::string& example,
                               const std::string& json_help) {
  f.section(title);
  f.add("compare", &list, "train each encoding in turn under the same budget, e.g. " + example, "LIST");
  f.add("compare-json", &json, json_help, "PATH");
  f.add("compare-png", &png, "the comparison as a bar chart with 95% CIs", "PATH");
}

void CompareOptions::root_writes_files() {
  if (!Comm::world().root()) json.clear(), png.clear();
}

void CompareOptions::validate(const Flags& f, const TrainOptions& opt, const PEConfig& base) const {
  if (list.empty()) {
    LIERE_USAGE(json.empty() && png.empty(),
                (json.empty() ? "--compare-png" : "--compare-json") << " writes a comparison: it needs --compare LIST");
    return;
  }
  LIERE_USAGE(!f.given("pe"),
              "--pe and --compare " << list << ": name the encodings in --compare's list (e.g. abs,liere8)");
  for (const auto& [flag, path] : {std::pair{"--save", &opt.save}, std::pair{"--resume", &opt.resume},
                                   std::pair{"--predictions", &opt.predictions}})
    LIERE_USAGE(path->empty(), flag << " is for one run; --compare trains every encoding from scratch and writes its "
                                       "results to --compare-json (and --metrics, one file per run)");
  for (const auto& l : labels()) {
    try {
      PEConfig(base).set("pe", l);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError("--compare " + list + ": '" + l + "': " + e.message());
    }
  }
  check_output_folder("--compare-json", json);
  check_output_folder("--compare-png", png);
}

std::vector<std::string> CompareOptions::labels() const {
  auto l = split_list(list);
  LIERE_ENSURE(!l.empty(), "--compare: no encodings given");
  return l;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void write_accuracy_chart(const std::string& path, const std::string& title, const std::string& x_label,
                          const std::vector<std::string>& groups, const std::vector<std::string>& bars,
                          const std::vector<const EvalResult*>& results) {
  LIERE_ENSURE(results.size() == groups.size() * bars.size(),
               "write_accuracy_chart: " << results.size() << " results for " << groups.size() << " groups x "
                                        << bars.size() << " bars");
  plot::BarChart bc;
  bc.title = title;
  bc.x_label = x_label;
  bc.y_label = "accuracy (%)";
  bc.bars = bars;
  bc.groups = groups;
  bc.values.assign(groups.size(), std::vector<double>(bars.size()));
  bc.lo = bc.hi = bc.values;
  for (std::size_t g = 0, k = 0; g < groups.size(); ++g)
    for (std::size_t b = 0; b < bars.size(); ++b, ++k) {
      bc.values[g][b] = 100 * results[k]->acc;
      bc.lo[g][b] = 100 * results[k]->ci.lo;
      bc.hi[g][b] = 100 * results[k]->ci.hi;
    }
  bc.y_min = 0;
  bc.y_max = 100;
  plot::bar_chart(path, bc);
}

}  // namespace liere::app
