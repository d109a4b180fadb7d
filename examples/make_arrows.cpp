// make_arrows — writes samples of the synthetic arrow task (LieRE paper §5.2, Fig. 5) as PNG files.
//
//   make_arrows --out DIR --n N [--res 108|168|276] [--seed S] [--grid] [--sheet FILE]
//
// DIR gets N one-channel PNG files (dark ink on white) and labels.csv with the columns
//   file,label,label_name,seed
// where label is the class index (0 up, 1 down, 2 left, 3 right) and seed the sample's own seed:
// make_arrow_layout(seed) gives its layout again. Sample i has seed arrow_sample_seed(S, i), the same as
// make_arrow_batch, so a trainer using --seed S sees exactly these images.
#include <data_tools/arrows.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string out;            // output directory (created if needed)
  long long n = -1;           // number of samples
  int res = 108;              // image side in pixels
  std::uint64_t seed = 0;     // data-set seed
  bool grid = false;          // draw the cell borders
  std::string sheet;          // optional 2×2 contact sheet of the first 4 samples
};

void usage(std::ostream& os) {
  os << "usage: make_arrows --out DIR --n N [--res 108|168|276] [--seed S] [--grid] [--sheet FILE]\n"
        "\n"
        "Writes N samples of the LieRE synthetic arrow task (paper section 5.2) to DIR as PNG files\n"
        "(one channel, dark ink on white) and DIR/labels.csv (file,label,label_name,seed).\n"
        "\n"
        "  --out DIR     output directory, created if needed\n"
        "  --n N         number of samples (N >= 0)\n"
        "  --res R       image side in pixels, 27..4096; the paper uses 108, 168, 276 (default 108)\n"
        "  --seed S      data-set seed (default 0); sample i uses arrow_sample_seed(S, i)\n"
        "  --grid        draw light grey cell borders (illustrations; the task images have none)\n"
        "  --sheet FILE  also write a 2x2 contact sheet of the first 4 samples to FILE\n"
        "  --help        this text\n";
}

// Parses a whole non-negative decimal number, or returns false.
bool parse_u64(const std::string& s, std::uint64_t& v) {
  if (s.empty() || s.size() > 20 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  try {
    v = std::stoull(s);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace liere::data;
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& v) {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    std::string v;
    std::uint64_t u = 0;
    if (a == "--help" || a == "-h") {
      usage(std::cout);
      return 0;
    } else if (a == "--out" && value(v)) {
      cfg.out = v;
    } else if (a == "--n" && value(v) && parse_u64(v, u) && u < (1ull << 40)) {
      cfg.n = (long long)u;
    } else if (a == "--res" && value(v) && parse_u64(v, u) && u >= 27 && u <= 4096) {
      cfg.res = int(u);
    } else if (a == "--seed" && value(v) && parse_u64(v, u)) {
      cfg.seed = u;
    } else if (a == "--grid") {
      cfg.grid = true;
    } else if (a == "--sheet" && value(v)) {
      cfg.sheet = v;
    } else {
      std::cerr << "make_arrows: bad or unknown argument '" << a << (v.empty() ? "" : " " + v) << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (cfg.out.empty() || cfg.n < 0) {
    std::cerr << "make_arrows: --out and --n are required\n";
    usage(std::cerr);
    return 2;
  }

  try {
    namespace fs = std::filesystem;
    fs::create_directories(cfg.out);
    const ArrowRenderer renderer(cfg.res, ArrowStyle{.grid_lines = cfg.grid, .font_path = {}});
    const std::size_t image = std::size_t(cfg.res) * cfg.res;
    const int digits = std::max<int>(6, int(std::to_string(std::max(0LL, cfg.n - 1)).size()));

    std::ofstream csv(fs::path(cfg.out) / "labels.csv");
    LIERE_ENSURE(csv.good(), "make_arrows: cannot write " << (fs::path(cfg.out) / "labels.csv").string());
    csv << "file,label,label_name,seed\n";

    // The contact sheet: 2×2 samples, separated and framed by a gap of mid grey.
    const int gap = std::max(2, cfg.res / 27), side = 2 * cfg.res + 3 * gap;
    std::vector<std::uint8_t> sheet(std::size_t(side) * side, 128);

    std::vector<std::uint8_t> pixels(image);
    for (long long i = 0; i < cfg.n; ++i) {
      const std::uint64_t seed = arrow_sample_seed(cfg.seed, std::uint64_t(i));
      const ArrowLayout layout = make_arrow_layout(seed);
      renderer.render(layout, pixels.data());
      std::string name = std::to_string(i);
      name = std::string(std::size_t(std::max(0, digits - int(name.size()))), '0') + name + ".png";
      write_png_grey((fs::path(cfg.out) / name).string(), pixels.data(), cfg.res, cfg.res);
      csv << name << ',' << layout.label_index() << ',' << direction_name(layout.label) << ',' << seed << '\n';
      if (i < 4) {
        const int x0 = gap + int(i % 2) * (cfg.res + gap), y0 = gap + int(i / 2) * (cfg.res + gap);
        for (int y = 0; y < cfg.res; ++y)
          std::copy_n(pixels.data() + std::size_t(y) * cfg.res, cfg.res, sheet.data() + std::size_t(y0 + y) * side + x0);
      }
    }
    LIERE_ENSURE(csv.good(), "make_arrows: error writing labels.csv in " << cfg.out);
    if (!cfg.sheet.empty()) write_png_grey(cfg.sheet, sheet.data(), side, side);
    std::cout << "make_arrows: wrote " << cfg.n << " images (" << cfg.res << "x" << cfg.res << ") and labels.csv to "
              << cfg.out << "\n";
  } catch (const std::exception& e) {
    std::cerr << "make_arrows: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
