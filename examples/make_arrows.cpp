// make_arrows — writes samples of the synthetic arrow task (LieRE paper §5.2, Fig. 5) as PNG files.
//
//   make_arrows --out DIR --n N [--res 108|168|276] [--seed S] [--grid] [--sheet FILE]    (--help: every flag)
//
// DIR gets N one-channel PNG files (dark ink on white) and labels.csv with the columns
//   file,label,label_name,seed
// where label is the class index (0 up, 1 down, 2 left, 3 right) and seed the sample's own seed:
// make_arrow_layout(seed) gives its layout again. Sample i has seed arrow_sample_seed(S, i), the same as
// make_arrow_batch, so a trainer using --seed S sees exactly these images.
//
// labels.csv is the folder's index, and it stays usable when the program is stopped (Ctrl-C, a killed job, a full
// disk): each image is written whole (write_png_grey: a temporary name, then renamed) before its line is written and
// flushed, so every line names an image that is there and whole. A stopped run leaves the first k samples listed, a
// data set of its own, and at most one image more, not yet listed (images from an earlier run into the same folder
// are not listed either). Written only at the end, labels.csv would be missing after hours of work, or be the
// earlier run's, listing images since replaced.
#include <app/flags.hpp>
#include <data_tools/arrows.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string out;            // output directory (created if needed)
  std::int64_t n = 0;         // number of samples
  int res = 108;              // image side in pixels
  std::uint64_t seed = 0;     // data-set seed
  bool grid = false;          // draw the cell borders
  std::string sheet;          // optional 2×2 contact sheet of the first 4 samples
};

// A usage error, before anything is written, when the --sheet file could not be written at the end: its folder is
// missing (and is not the --out folder, which the run creates) or not writable; the system's reason.
void check_sheet(const Config& cfg) {
  namespace fs = std::filesystem;
  if (cfg.sheet.empty()) return;
  const fs::path file(cfg.sheet), folder = file.has_parent_path() ? file.parent_path() : ".";
  std::error_code ec1, ec2;
  const bool out_folder = fs::weakly_canonical(folder, ec1) / "" == fs::weakly_canonical(cfg.out, ec2) / "";
  if (out_folder && !ec1 && !ec2 && !fs::exists(folder)) return;
  liere::app::check_output_folder("--sheet", cfg.sheet);
}

// The N samples, labels.csv (a line per image, after it: see the file comment) and the contact sheet.
void write_samples(const Config& cfg) {
  using namespace liere::data;
  namespace fs = std::filesystem;
  fs::create_directories(cfg.out);
  const ArrowRenderer renderer(cfg.res, ArrowStyle{.grid_lines = cfg.grid, .font_path = {}});
  const std::size_t image = std::size_t(cfg.res) * cfg.res;
  const int digits = std::max<int>(6, int(std::to_string(std::max<std::int64_t>(0, cfg.n - 1)).size()));

  const std::string labels = (fs::path(cfg.out) / "labels.csv").string();
  errno = 0;
  std::ofstream csv(labels);
  LIERE_ENSURE(csv.good(), "cannot write " << labels << ": " << std::strerror(errno));
  csv << "file,label,label_name,seed\n";

  // The contact sheet: 2×2 samples, separated and framed by a gap of mid grey.
  const int gap = std::max(2, cfg.res / 27), side = 2 * cfg.res + 3 * gap;
  std::vector<std::uint8_t> sheet(std::size_t(side) * side, 128);

  std::vector<std::uint8_t> pixels(image);
  for (std::int64_t i = 0; i < cfg.n; ++i) {
    const std::uint64_t seed = arrow_sample_seed(cfg.seed, std::uint64_t(i));
    const ArrowLayout layout = make_arrow_layout(seed);
    renderer.render(layout, pixels.data());
    std::string name = std::to_string(i);
    name = std::string(std::size_t(std::max(0, digits - int(name.size()))), '0') + name + ".png";
    write_png_grey((fs::path(cfg.out) / name).string(), pixels.data(), cfg.res, cfg.res);
    csv << name << ',' << layout.label_index() << ',' << direction_name(layout.label) << ',' << seed << '\n';
    csv.flush();  // the line on disk as soon as its image is
    LIERE_ENSURE(csv.good(), "writing " << labels << " failed: " << std::strerror(errno));
    if (i < 4) {
      const int x0 = gap + int(i % 2) * (cfg.res + gap), y0 = gap + int(i / 2) * (cfg.res + gap);
      for (int y = 0; y < cfg.res; ++y)
        std::copy_n(pixels.data() + std::size_t(y) * cfg.res, cfg.res, sheet.data() + std::size_t(y0 + y) * side + x0);
    }
  }
  if (!cfg.sheet.empty()) write_png_grey(cfg.sheet, sheet.data(), side, side);
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("make_arrows", [&] {
    Config cfg;
    liere::app::Flags f("make_arrows",
                        "Writes N samples of the LieRE synthetic arrow task (paper section 5.2) to DIR as PNG files\n"
                        "(one channel, dark ink on white) and DIR/labels.csv (file,label,label_name,seed).");
    f.section("Options");
    f.add("out", &cfg.out, "output directory, created if needed (required)", "DIR");
    f.add("n", &cfg.n, "number of samples (required)", liere::app::Range{1, double((1LL << 40) - 1)});
    f.add("res", &cfg.res, "image side in pixels, 27..4096; the paper uses 108, 168, 276", liere::app::Range{27, 4096});
    f.add("seed", &cfg.seed, "data-set seed; sample i uses arrow_sample_seed(seed, i)");
    f.add_switch("grid", &cfg.grid, "draw light grey cell borders (illustrations; the task images have none)");
    f.add("sheet", &cfg.sheet, "also write a 2x2 contact sheet of the first 4 samples to FILE", "FILE");
    if (!f.parse(argc, argv)) return 0;
    if (cfg.out.empty() || !f.given("n")) throw liere::app::UsageError("--out and --n are required");
    check_sheet(cfg);

    write_samples(cfg);
    std::cout << "make_arrows: wrote " << cfg.n << " images (" << cfg.res << "x" << cfg.res << ") and labels.csv to "
              << cfg.out << "\n";
    return 0;
  });
}
