// examples/plot_metrics.cpp — training curves from JSON-lines metrics files, as a PNG.
//
// Each input file holds one flat JSON object per line, as the trainers write them:
//   {"epoch":1,"train_loss":2.1,"train_acc":0.31,"test_loss":1.9,"test_acc":0.35,"lr":0.001}
// Every file becomes one series (named after the file's stem, or --label), every --y key one panel, the
// panels stacked vertically:
//   plot_metrics --out curves.png --x epoch --y test_acc --y train_loss runs/rope.jsonl runs/liere.jsonl
// A row without the x or y key is skipped (so metrics logged every few epochs still form a line); a null
// value breaks the line.
//
// With --bars the same files make a bar chart instead (one --y key): the distinct values of --x (numbers or
// strings, in order of first appearance) are the groups, every file one bar in each group, with error bars
// from --lo/--hi keys (e.g. a 95% CI); examples/ablate.py draws its tables this way:
//   plot_metrics --bars --out sharing.png --x sharing --y acc --lo acc_lo --hi acc_hi liere8.jsonl rope.jsonl
#include <app/flags.hpp>
#include <data_tools/jsonl.hpp>
#include <data_tools/plot.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string out;             // the PNG to write
  std::string x = "epoch";     // the key along the x axis
  std::vector<std::string> y;  // one panel per key
  std::string title;
  std::vector<std::string> labels;  // one per file, in order (default: the file stems)
  std::vector<std::string> files;
  bool log_y = false;
  bool markers = false;
  bool bars = false;       // a bar chart: groups from --x, one bar per file
  std::string lo, hi;      // --bars: keys of the error-bar ends (both or neither)
  std::optional<double> y_min, y_max;
  int width = 900;
  int height = 0;  // 0: from the number of panels
};

// The flags, checked: a bad combination is a UsageError (exit code 2).
Config parse_args(int argc, char** argv, bool& help) {
  using liere::app::UsageError;
  Config cfg;
  liere::app::Flags f("plot_metrics",
                      "Plots metrics from JSON-lines files (one flat JSON object per line) against --x, one series per\n"
                      "file and one panel per --y key, stacked vertically. With --bars a bar chart instead.");
  f.section("Options");
  f.positional("METRICS.jsonl...", &cfg.files, "the metrics files, one series each (at least one)");
  f.add("out", &cfg.out, "the PNG to write (required)", "FILE");
  f.add("y", &cfg.y, "a key to plot; repeat for more panels (at least one)", "KEY");
  f.add("x", &cfg.x, "the key along the x axis", "KEY");
  f.add("title", &cfg.title, "the figure title", "TEXT");
  f.add("label", &cfg.labels, "the series name of the next file, in order; give none or one per file (default: the "
                              "file name without its extension)", "NAME");
  f.add_switch("log-y", &cfg.log_y, "logarithmic y axes (for losses)");
  f.add_switch("markers", &cfg.markers, "a dot at every point");
  f.add_switch("bars", &cfg.bars, "a bar chart instead: the distinct --x values (numbers or strings) are the groups, "
                                  "every file one bar in each group; exactly one --y");
  f.add("lo", &cfg.lo, "with --bars: error bars from this key and --hi's (e.g. the ends of a 95% CI)", "KEY");
  f.add("hi", &cfg.hi, "with --bars: the upper ends of the error bars", "KEY");
  f.add("y-min", &cfg.y_min,
        "fixed y range, below --y-max and positive with --log-y (default: from the data; bars start at 0)");
  f.add("y-max", &cfg.y_max, "fixed y range (default: from the data)");
  f.add("width", &cfg.width, "image width, pixels", liere::app::Range{200, 16384});
  f.add("height", &cfg.height, "image height, pixels (0: 300 per panel, plus room for the title)",
        liere::app::Range{0, 16384});
  help = !f.parse(argc, argv);
  if (help) return cfg;
  if (cfg.out.empty()) throw UsageError("--out is required");
  LIERE_USAGE(cfg.height == 0 || cfg.height >= 150,
              "--height " << cfg.height << ": expected 0 (automatic) or at least 150 pixels");
  LIERE_USAGE(!cfg.y_min || !cfg.y_max || *cfg.y_min < *cfg.y_max,
              "--y-min " << *cfg.y_min << " --y-max " << *cfg.y_max << ": expected --y-min below --y-max");
  if (cfg.log_y && !cfg.bars) {  // bar charts have a linear axis
    LIERE_USAGE(!cfg.y_min || *cfg.y_min > 0, "--y-min " << *cfg.y_min << ": --log-y needs a positive --y-min");
    LIERE_USAGE(!cfg.y_max || *cfg.y_max > 0, "--y-max " << *cfg.y_max << ": --log-y needs a positive --y-max");
  }
  if (cfg.y.empty()) throw UsageError("give at least one --y key");
  if (cfg.files.empty()) throw UsageError("give at least one metrics file");
  if (cfg.bars && cfg.y.size() != 1) throw UsageError("--bars takes exactly one --y key");
  if (cfg.lo.empty() != cfg.hi.empty()) throw UsageError("give both --lo and --hi, or neither");
  if (!cfg.bars && !cfg.lo.empty()) throw UsageError("--lo and --hi are for --bars");
  if (!cfg.labels.empty() && cfg.labels.size() != cfg.files.size())
    throw UsageError("--label given " + std::to_string(cfg.labels.size()) + " times for " +
                     std::to_string(cfg.files.size()) + " files (give none or one per file)");
  return cfg;
}

// The value of `key` in a row as a number: null is NaN (a gap); anything else but a number is an error.
double number_at(const liere::data::JsonObject& row, const std::string& key, const std::string& file, int line) {
  const auto& v = row.at(key);
  if (v.is_number()) return v.as_number();
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  throw liere::Error(file + ":" + std::to_string(line) + ": '" + key + "' is a " + v.type_name() +
                     ", expected a number");
}

// A group name for --bars: a string as it is, a number in its shortest round-trip form (std::to_chars: "8", "0.25",
// "1234567"), which reads back as the same double: two numbers share a group only when they are equal.
std::string group_name(const liere::data::JsonObject& row, const std::string& key, const std::string& file, int line) {
  const auto& v = row.at(key);
  if (v.is_string()) return v.as_string();
  if (v.is_number()) {
    char buf[32];  // the longest shortest form, "-2.2250738585072014e-308", has 24 characters
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v.as_number()).ptr);
  }
  throw liere::Error(file + ":" + std::to_string(line) + ": '" + key + "' is a " + v.type_name() +
                     ", expected a number or a string");
}

std::string series_label(const Config& cfg, std::size_t f) {
  return cfg.labels.empty() ? std::filesystem::path(cfg.files[f]).stem().string() : cfg.labels[f];
}

// --bars: groups from --x, one bar per file.
void bar_chart(const Config& cfg) {
  namespace plot = liere::plot;
  plot::BarChart bc;
  bc.title = cfg.title;
  bc.x_label = cfg.x;
  bc.y_label = cfg.y[0];
  bc.width = cfg.width;
  if (cfg.height > 0) bc.height = cfg.height;
  bc.y_min = cfg.y_min;
  bc.y_max = cfg.y_max;
  struct Bar {
    std::size_t group, file;
    double v, lo, hi;
  };
  std::vector<Bar> found;
  for (std::size_t f = 0; f < cfg.files.size(); ++f) {
    const std::string& file = cfg.files[f];
    std::vector<int> lines;
    const auto rows = liere::data::read_jsonl(file, &lines);
    bc.bars.push_back(series_label(cfg, f));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r].contains(cfg.x) || !rows[r].contains(cfg.y[0])) continue;
      const std::string g = group_name(rows[r], cfg.x, file, lines[r]);
      const auto it = std::find(bc.groups.begin(), bc.groups.end(), g);
      const std::size_t gi = std::size_t(it - bc.groups.begin());
      if (it == bc.groups.end()) bc.groups.push_back(g);
      for (const Bar& b : found)
        if (b.group == gi && b.file == f)
          throw liere::Error(file + ":" + std::to_string(lines[r]) + ": a second row for " + cfg.x + " = " + g);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      Bar b{gi, f, number_at(rows[r], cfg.y[0], file, lines[r]), nan, nan};
      if (!cfg.lo.empty()) {
        for (const std::string* k : {&cfg.lo, &cfg.hi})
          if (!rows[r].contains(*k))
            throw liere::Error(file + ":" + std::to_string(lines[r]) + ": no '" + *k + "' (--lo/--hi)");
        b.lo = number_at(rows[r], cfg.lo, file, lines[r]);
        b.hi = number_at(rows[r], cfg.hi, file, lines[r]);
      }
      found.push_back(b);
    }
  }
  if (found.empty()) throw liere::Error("no file has rows with both '" + cfg.x + "' and '" + cfg.y[0] + "'");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  bc.values.assign(bc.groups.size(), std::vector<double>(bc.bars.size(), nan));
  if (!cfg.lo.empty()) bc.lo = bc.hi = bc.values;
  for (const Bar& b : found) {
    bc.values[b.group][b.file] = b.v;
    if (!cfg.lo.empty()) bc.lo[b.group][b.file] = b.lo, bc.hi[b.group][b.file] = b.hi;
  }
  plot::bar_chart(cfg.out, bc);
}

// Line charts: one panel per --y key, one series per file.
void line_chart(const Config& cfg) {
  namespace plot = liere::plot;
  plot::LineChart chart;
  chart.title = cfg.title;
  chart.width = cfg.width;
  chart.height = cfg.height > 0 ? cfg.height : int(60 + (cfg.title.empty() ? 0 : 30) + 300 * cfg.y.size());
  chart.markers = cfg.markers;
  for (std::size_t k = 0; k < cfg.y.size(); ++k) {
    plot::Panel panel;
    panel.y_label = cfg.y[k];
    panel.x_label = k + 1 == cfg.y.size() ? cfg.x : "";  // only under the bottom panel
    panel.log_y = cfg.log_y;
    panel.legend = k == 0;  // the series are the same in every panel
    panel.y_min = cfg.y_min;
    panel.y_max = cfg.y_max;
    chart.panels.push_back(panel);
  }

  for (std::size_t f = 0; f < cfg.files.size(); ++f) {
    const std::string& file = cfg.files[f];
    std::vector<int> lines;
    const auto rows = liere::data::read_jsonl(file, &lines);
    const std::string label = series_label(cfg, f);
    for (std::size_t k = 0; k < cfg.y.size(); ++k) {
      plot::Series s;
      s.label = label;
      s.color = plot::palette(f);  // the same colour for a file in every panel
      for (std::size_t r = 0; r < rows.size(); ++r) {
        if (!rows[r].contains(cfg.x) || !rows[r].contains(cfg.y[k])) continue;
        s.x.push_back(number_at(rows[r], cfg.x, file, lines[r]));
        s.y.push_back(number_at(rows[r], cfg.y[k], file, lines[r]));
      }
      if (s.x.empty()) {
        std::cerr << "plot_metrics: warning: " << file << " has no rows with both '" << cfg.x << "' and '" << cfg.y[k]
                  << "'\n";
        continue;
      }
      chart.panels[k].series.push_back(std::move(s));
    }
  }
  for (std::size_t k = 0; k < cfg.y.size(); ++k)
    if (chart.panels[k].series.empty())
      throw liere::Error("no file has rows with both '" + cfg.x + "' and '" + cfg.y[k] + "'");
  plot::line_chart(cfg.out, chart);
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("plot_metrics", [&] {
    bool help = false;
    const Config cfg = parse_args(argc, argv, help);
    if (help) return 0;
    if (cfg.bars) bar_chart(cfg);
    else line_chart(cfg);
    std::cout << "wrote " << cfg.out << "\n";
    return 0;
  });
}
