// examples/plot_metrics.cpp — training curves from JSON-lines metrics files, as a PNG.
//
// Each input file holds one flat JSON object per line, as the trainers write them:
//   {"epoch":1,"train_loss":2.1,"train_acc":0.31,"test_loss":1.9,"test_acc":0.35,"lr":0.001}
// Every file becomes one series (named after the file's stem, or --label), every --y key one panel, the
// panels stacked vertically:
//   plot_metrics --out curves.png --x epoch --y test_acc --y train_loss runs/rope.jsonl runs/liere.jsonl
// A row without the x or y key is skipped (so metrics logged every few epochs still form a line); a null
// value breaks the line.
#include <data_tools/jsonl.hpp>
#include <data_tools/plot.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
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
  int width = 900;
  int height = 0;  // 0: from the number of panels
};

const char* kUsage =
    "usage: plot_metrics --out FILE.png --y KEY [--y KEY ...] [options] METRICS.jsonl [METRICS.jsonl ...]\n"
    "\n"
    "Plots metrics from JSON-lines files (one flat JSON object per line) against --x, one series per file\n"
    "and one panel per --y key, stacked vertically.\n"
    "\n"
    "  --out FILE      the PNG to write (required)\n"
    "  --y KEY         a key to plot; repeat for more panels (at least one)\n"
    "  --x KEY         the key along the x axis (default: epoch)\n"
    "  --title TEXT    the figure title\n"
    "  --label NAME    the series name of the next file, in order; give none or one per file\n"
    "                  (default: the file name without its extension)\n"
    "  --log-y         logarithmic y axes (for losses)\n"
    "  --markers       a dot at every point\n"
    "  --width PX      image width (default: 900)\n"
    "  --height PX     image height (default: 300 per panel, plus room for the title)\n"
    "  --help          this text\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "plot_metrics: " << msg << "\n\n" << kUsage;
  std::exit(2);
}

int parse_int(const std::string& flag, const std::string& v) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects an integer, got '" + v + "'");
}

Config parse_args(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) {
      cfg.files.push_back(arg);
      continue;
    }
    if (arg == "--log-y") {
      cfg.log_y = true;
      continue;
    }
    if (arg == "--markers") {
      cfg.markers = true;
      continue;
    }
    // Flags with a value: "--flag value" or "--flag=value".
    std::string value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else {
      const bool known = arg == "--out" || arg == "--x" || arg == "--y" || arg == "--title" || arg == "--label" ||
                         arg == "--width" || arg == "--height";
      if (!known) usage_error("unknown flag '" + arg + "'");
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      value = argv[++i];
    }
    if (arg == "--out")
      cfg.out = value;
    else if (arg == "--x")
      cfg.x = value;
    else if (arg == "--y")
      cfg.y.push_back(value);
    else if (arg == "--title")
      cfg.title = value;
    else if (arg == "--label")
      cfg.labels.push_back(value);
    else if (arg == "--width")
      cfg.width = parse_int(arg, value);
    else if (arg == "--height")
      cfg.height = parse_int(arg, value);
    else
      usage_error("unknown flag '" + arg + "'");
  }
  if (cfg.out.empty()) usage_error("--out is required");
  if (cfg.y.empty()) usage_error("give at least one --y key");
  if (cfg.files.empty()) usage_error("give at least one metrics file");
  if (!cfg.labels.empty() && cfg.labels.size() != cfg.files.size())
    usage_error("--label given " + std::to_string(cfg.labels.size()) + " times for " +
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

}  // namespace

int main(int argc, char** argv) {
  const Config cfg = parse_args(argc, argv);
  namespace plot = liere::plot;
  try {
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
      chart.panels.push_back(panel);
    }

    for (std::size_t f = 0; f < cfg.files.size(); ++f) {
      const std::string& file = cfg.files[f];
      std::vector<int> lines;
      const auto rows = liere::data::read_jsonl(file, &lines);
      const std::string label = cfg.labels.empty() ? std::filesystem::path(file).stem().string() : cfg.labels[f];
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
    std::cout << "wrote " << cfg.out << "\n";
  } catch (const std::exception& e) {
    std::cerr << "plot_metrics: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
