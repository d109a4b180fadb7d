// tests/test_plot.cpp — the PNG plots (data_tools/plot.hpp) and the JSON-lines reader (data_tools/jsonl.hpp).
//
// Charts are written to PNG files, decoded again with stb_image and inspected pixel by pixel: the size, where
// the series colours are (inside the plot areas, not outside), the height of a bar, the colour at the centre
// of a heatmap's maximum, and that text is drawn where the title is.
//
// `liere_tests_O0 "[.docs]"` (hidden, not run by default or by CTest) regenerates docs/images/plot_examples/.
#include <catch2/catch.hpp>

#include <data_tools/jsonl.hpp>
#include <data_tools/plot.hpp>

// The stb include directory is private to liere_data_tools; the implementation is compiled in there.
#include <stb/stb_image.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>


#include "skip.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace plot = liere::plot;
using liere::data::JsonValue;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

fs::path scratch_dir() {
  const fs::path dir = fs::path(LIERE_BINARY_DIR) / "test_plot_out";
  fs::create_directories(dir);
  return dir;
}

std::string scratch(const std::string& name) { return (scratch_dir() / name).string(); }

// A decoded PNG.
struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> rgb;
  plot::Color at(int x, int y) const {
    const std::size_t i = (std::size_t(y) * w + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

Image load_png(const std::string& path) {
  Image img;
  int n = 0;
  unsigned char* data = stbi_load(path.c_str(), &img.w, &img.h, &n, 3);
  REQUIRE(data != nullptr);
  img.rgb.assign(data, data + std::size_t(img.w) * img.h * 3);
  stbi_image_free(data);
  return img;
}

// Pixels of exactly colour c inside / outside the given rectangles.
struct Count {
  long inside = 0, outside = 0;
};
Count count_color(const Image& img, plot::Color c, const std::vector<plot::Rect>& regions) {
  Count n;
  for (int y = 0; y < img.h; ++y)
    for (int x = 0; x < img.w; ++x) {
      if (!(img.at(x, y) == c)) continue;
      bool in = false;
      for (const auto& r : regions) in |= r.contains(x + 0.5, y + 0.5);
      (in ? n.inside : n.outside)++;
    }
  return n;
}

long count_in(const Image& img, plot::Color c, const plot::Rect& r) {
  long n = 0;
  for (int y = std::max(0, int(r.y0)); y < std::min(img.h, int(std::ceil(r.y1))); ++y)
    for (int x = std::max(0, int(r.x0)); x < std::min(img.w, int(std::ceil(r.x1))); ++x) n += img.at(x, y) == c;
  return n;
}

bool is_white(plot::Color c) { return c == plot::kWhite; }

// Colours no chart element uses, so that their pixels can only come from the series or bars.
constexpr plot::Color kRed = plot::rgb(0xE0102F), kBlue = plot::rgb(0x1050E0), kGreen = plot::rgb(0x10A050);

}  // namespace

// ==== canvas ============================================================================================

TEST_CASE("Canvas: rectangles have exact coverage, lines are anti-aliased and clipped", "[plot][canvas]") {
  plot::Canvas c(40, 30);
  REQUIRE(c.width() == 40);
  REQUIRE(c.height() == 30);
  CHECK(c.pixel(0, 0) == plot::kWhite);

  SECTION("filled rectangle, whole and half pixels") {
    c.rect({10, 10, 20, 20.5}, kRed);
    CHECK(c.pixel(10, 10) == kRed);
    CHECK(c.pixel(19, 19) == kRed);
    CHECK(is_white(c.pixel(9, 15)));
    CHECK(is_white(c.pixel(20, 15)));
    // Row 20 is half covered: half-way between white and red.
    const plot::Color half = c.pixel(15, 20);
    CHECK(std::abs(int(half.r) - (255 + kRed.r) / 2) <= 1);
    CHECK(std::abs(int(half.g) - (255 + kRed.g) / 2) <= 1);
  }
  SECTION("a horizontal line of width 2 covers two rows fully; a diagonal one has partial pixels") {
    c.line(5, 15, 35, 15, kBlue, 2.0);
    CHECK(c.pixel(20, 14) == kBlue);
    CHECK(c.pixel(20, 15) == kBlue);
    CHECK(is_white(c.pixel(20, 12)));
    CHECK(is_white(c.pixel(20, 17)));
    plot::Canvas d(40, 30);
    d.line(2, 3, 37, 26, kBlue, 1.5);
    int partial = 0;
    for (int y = 0; y < 30; ++y)
      for (int x = 0; x < 40; ++x) partial += !is_white(d.pixel(x, y)) && !(d.pixel(x, y) == kBlue);
    CHECK(partial > 20);
  }
  SECTION("clip rectangle") {
    c.set_clip({0, 0, 20, 30});
    c.line(2, 15, 38, 15, kBlue, 3.0);
    CHECK(c.pixel(10, 15) == kBlue);
    CHECK(is_white(c.pixel(25, 15)));
    c.reset_clip();
    c.line(2, 5, 38, 5, kBlue, 3.0);
    CHECK(c.pixel(25, 5) == kBlue);
  }
  SECTION("a non-finite point breaks a polyline") {
    c.polyline({{2, 5}, {12, 5}, {kNaN, kNaN}, {28, 5}, {38, 5}}, kGreen, 2.0);
    CHECK(c.pixel(8, 5) == kGreen);
    CHECK(is_white(c.pixel(20, 5)));
    CHECK(c.pixel(32, 5) == kGreen);
  }
}

TEST_CASE("Canvas: text is drawn in its box, anchored and rotated", "[plot][canvas][text]") {
  plot::Canvas c(300, 200);
  plot::TextStyle style;
  style.size = 20;
  style.anchor = plot::Anchor::Center;
  const plot::Rect box = c.text(150, 100, "Accuracy 95%", style);
  CHECK(std::abs((box.x0 + box.x1) / 2 - 150) <= 1);
  CHECK(std::abs((box.y0 + box.y1) / 2 - 100) <= 1);
  CHECK(box.width() > box.height());
  // Fully covered pixels have exactly the text colour; they lie in the box.
  Image img{c.width(), c.height(), c.pixels()};
  const Count n = count_color(img, plot::kTextColor, {box});
  CHECK(n.inside > 30);
  CHECK(n.outside == 0);

  SECTION("text_box measures what text draws") {
    const plot::Rect m = c.text_box(150, 100, "Accuracy 95%", style);
    CHECK(m.x0 == box.x0);
    CHECK(m.y1 == box.y1);
  }
  SECTION("a rotated label is tall and narrow, with the same extent") {
    style.rotation = plot::Rotation::Ccw90;
    style.anchor = plot::Anchor::Left;
    const plot::Rect r = c.text_box(10, 100, "Accuracy 95%", style);
    CHECK(std::abs(r.height() - box.width()) < 1e-9);
    CHECK(std::abs(r.width() - box.height()) < 1e-9);
    CHECK(std::abs(r.x0 - 10) <= 1);
  }
}

TEST_CASE("Canvas: save_png writes a PNG that decodes to the same pixels", "[plot][canvas]") {
  plot::Canvas c(64, 48, plot::rgb(0x102030));
  c.rect({8, 8, 40, 30}, kRed);
  const std::string path = scratch("canvas_roundtrip.png");
  c.save_png(path);
  const Image img = load_png(path);
  REQUIRE(img.w == 64);
  REQUIRE(img.h == 48);
  CHECK(img.rgb == c.pixels());
}

// ==== ticks =============================================================================================

TEST_CASE("nice_ticks: 1-2-5 steps inside the range, clean labels", "[plot][ticks]") {
  const plot::Ticks t = plot::nice_ticks(0, 1, 5);
  CHECK(t.step == Approx(0.2));
  REQUIRE(t.values.size() == 6);
  CHECK(t.labels == std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"});

  const plot::Ticks u = plot::nice_ticks(-3.7, 61.8, 6);
  CHECK(u.step == Approx(10));
  CHECK(u.values.front() == Approx(0));
  CHECK(u.values.back() == Approx(60));
  CHECK(u.labels[0] == "0");  // not "-0"

  for (const double lo : {0.031, -2.0, 1e-7, 123456.0})
    for (const double span : {0.004, 0.7, 3.0, 900.0}) {
      const plot::Ticks v = plot::nice_ticks(lo, lo + span, 6);
      const double mantissa = v.step / std::pow(10.0, std::floor(std::log10(v.step) + 1e-9));
      CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6));
      CHECK(v.values.size() >= 3);
      CHECK(v.values.size() <= 12);
      for (const double x : v.values) {
        CHECK(x >= lo - 1e-9 * span);
        CHECK(x <= lo + span + 1e-9 * span);
      }
    }

  // Integer data (epochs): never a step below 1.
  CHECK(plot::nice_ticks(0.9, 3.1, 8, 1.0).step == Approx(1));

  CHECK(plot::tick_label(2.5e6, 5e5, true) == "2.5e6");
  CHECK(plot::tick_label(1e-5, 1e-5, true) == "1e-5");
  CHECK(plot::tick_label(9.9996e-5, 1e-7, true) == "1e-4");
  CHECK(plot::tick_label(0.0002, 0.0001) == "0.0002");
  CHECK(plot::tick_label(-1e-17, 0.1) == "0.0");
  CHECK(plot::tick_label(0.75, 0.25) == "0.75");

  const plot::Ticks l = plot::log_ticks(1e-3, 10);
  CHECK(l.labels == std::vector<std::string>{"0.001", "0.01", "0.1", "1", "10"});
  const plot::Ticks s = plot::log_ticks(0.3, 3);
  CHECK(s.labels == std::vector<std::string>{"0.5", "1", "2"});
  // One notation per axis: all scientific once one label needs it.
  CHECK(plot::log_ticks(2e-7, 2e-3).labels == std::vector<std::string>{"1e-6", "1e-5", "1e-4", "1e-3"});
  CHECK(plot::nice_ticks(0, 1.2e6, 3).labels == std::vector<std::string>{"0", "5e5", "1e6"});
  CHECK(plot::nice_ticks(0, 3e-5, 3).labels == std::vector<std::string>{"0", "1e-5", "2e-5", "3e-5"});
}

TEST_CASE("nice_ticks: a range wider than the largest double (data near ±1.8e308)", "[plot][ticks]") {
  // hi − lo overflows to inf: the ticks are still 1-2-5 steps inside the range.
  for (const double top : {1e308, 1.7e308, std::numeric_limits<double>::max()})
    for (const int target : {1, 2, 6}) {
      const plot::Ticks t = plot::nice_ticks(-top, top, target);
      INFO("top " << top << ", target " << target << ", step " << t.step);
      REQUIRE(std::isfinite(t.step));
      const double mantissa = t.step / std::pow(10.0, std::floor(std::log10(t.step) + 1e-9));
      CHECK((std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6));
      REQUIRE(t.values.size() >= 2);
      for (const double x : t.values) {
        CHECK(std::isfinite(x));
        CHECK(std::abs(x) <= top);
      }
      CHECK(t.labels.size() == t.values.size());
    }
}

// ==== line chart ========================================================================================

TEST_CASE("line_chart: series colours are inside the plot areas only, gaps stay empty, the title renders",
          "[plot][line]") {
  plot::LineChart chart;
  chart.title = "Training curves";
  chart.width = 800;
  chart.height = 700;
  plot::Panel acc;
  acc.x_label = "epoch";
  acc.y_label = "test accuracy";
  plot::Series a{"RoPE", {}, {}, kRed}, b{"LieRE", {}, {}, kBlue};
  for (int e = 1; e <= 30; ++e) {
    a.x.push_back(e);
    a.y.push_back(0.6 * (1 - std::exp(-0.15 * e)));
    b.x.push_back(e);
    b.y.push_back(0.7 * (1 - std::exp(-0.2 * e)));
  }
  b.y[14] = kNaN;  // a gap at epoch 15
  acc.series = {a, b};
  plot::Panel loss;
  loss.x_label = "epoch";
  loss.y_label = "loss";
  loss.log_y = true;
  plot::Series c{"train", {}, {}, kGreen};
  for (int e = 1; e <= 30; ++e) {
    c.x.push_back(e);
    c.y.push_back(2.0 * std::exp(-0.1 * e));
  }
  loss.series = {c};
  chart.panels = {acc, loss};

  const std::string path = scratch("line_chart.png");
  const plot::Layout layout = plot::line_chart(path, chart);
  const Image img = load_png(path);
  REQUIRE(img.w == 800);
  REQUIRE(img.h == 700);
  REQUIRE(layout.panels.size() == 2);
  REQUIRE(layout.legends.size() == 2);

  const std::vector<plot::Rect> areas = {layout.panels[0].area, layout.panels[1].area};
  for (const plot::Color col : {kRed, kBlue, kGreen}) {
    const Count n = count_color(img, col, areas);
    CHECK(n.inside > 100);
    CHECK(n.outside == 0);
  }
  // Each panel's colours stay in that panel, and the legend shows them.
  CHECK(count_in(img, kGreen, layout.panels[0].area) == 0);
  CHECK(count_in(img, kRed, layout.panels[1].area) == 0);
  CHECK(count_in(img, kRed, layout.legends[0]) > 10);
  CHECK(count_in(img, kBlue, layout.legends[0]) > 10);

  // No blue in the column of the missing epoch (away from the legend).
  const plot::PanelLayout& p0 = layout.panels[0];
  const int gap_col = int(p0.to_px(15));
  int blue_in_gap = 0;
  for (int y = int(p0.area.y0); y < int(p0.area.y1); ++y)
    if (!layout.legends[0].contains(gap_col + 0.5, y + 0.5)) blue_in_gap += img.at(gap_col, y) == kBlue;
  CHECK(blue_in_gap == 0);
  // ... but there is blue at epoch 10.
  int blue_at_10 = 0;
  for (int y = int(p0.area.y0); y < int(p0.area.y1); ++y) blue_at_10 += img.at(int(p0.to_px(10)), y) == kBlue;
  CHECK(blue_at_10 > 0);

  // The log panel: 2·e^(−0.1·e) spans decades; the first point is near the top of the area.
  const plot::PanelLayout& p1 = layout.panels[1];
  CHECK(p1.log_y);
  CHECK(p1.to_py(2.0 * std::exp(-0.1)) < p1.area.y0 + 0.1 * p1.area.height());

  // The title: text-coloured pixels in its box, centred on the image.
  REQUIRE(layout.title.width() > 0);
  CHECK(count_in(img, plot::kTextColor, layout.title) > 50);
  CHECK(std::abs((layout.title.x0 + layout.title.x1) / 2 - 400) <= 1);
}

TEST_CASE("line_chart: data from -1e308 to 1e308 (a range wider than the largest double) is drawn", "[plot][line]") {
  plot::LineChart chart;
  chart.width = 600;
  chart.height = 400;
  plot::Panel panel;
  panel.series = {plot::Series{"wide", {-1e308, 0, 1e308}, {1e308, 0, -1e308}, kRed}};
  panel.legend = false;
  chart.panels = {panel};
  const std::string path = scratch("line_chart_wide.png");
  const plot::Layout layout = plot::line_chart(path, chart);
  const plot::PanelLayout& p = layout.panels.at(0);
  CHECK(std::isfinite(p.x_min));
  CHECK(std::isfinite(p.x_max));
  CHECK(p.x_min <= -1e308);
  CHECK(p.x_max >= 1e308);
  CHECK(p.y_min <= -1e308);
  CHECK(p.y_max >= 1e308);
  // The middle point (0, 0) is at the middle of the area; the ends are inside it.
  CHECK(std::abs(p.to_px(0) - (p.area.x0 + p.area.x1) / 2) < 1);
  CHECK(std::abs(p.to_py(0) - (p.area.y0 + p.area.y1) / 2) < 1);
  CHECK(p.area.contains(p.to_px(-1e308), p.to_py(1e308)));
  CHECK(p.area.contains(p.to_px(1e308) - 1, p.to_py(-1e308) - 1));
  const Image img = load_png(path);
  const Count n = count_color(img, kRed, {p.area});
  CHECK(n.inside > 200);
  CHECK(n.outside == 0);
}

TEST_CASE("line_chart: errors name what is wrong", "[plot][line][errors]") {
  plot::LineChart chart;
  const std::string path = scratch("line_chart_error.png");
  CHECK_THROWS_AS(plot::line_chart(path, chart), liere::Error);
  CHECK_THROWS_WITH(plot::line_chart(path, chart), Catch::Contains("no panels"));

  chart.panels.resize(1);
  CHECK_THROWS_WITH(plot::line_chart(path, chart), Catch::Contains("has no series"));

  chart.panels[0].series = {plot::Series{"empty", {}, {}, {}}};
  CHECK_THROWS_WITH(plot::line_chart(path, chart), Catch::Contains("'empty'") && Catch::Contains("is empty"));

  chart.panels[0].series = {plot::Series{"short", {1, 2, 3}, {1, 2}, {}}};
  CHECK_THROWS_WITH(plot::line_chart(path, chart),
                    Catch::Contains("'short'") && Catch::Contains("x has 3 values but y has 2"));

  chart.panels[0].series = {plot::Series{"nan", {1, 2}, {kNaN, kNaN}, {}}};
  CHECK_THROWS_WITH(plot::line_chart(path, chart), Catch::Contains("no finite points"));

  chart.panels[0].series = {plot::Series{"ok", {1, 2}, {3, 4}, {}}};
  const std::string unwritable = (scratch_dir() / "no_such_dir" / "chart.png").string();
  CHECK_THROWS_AS(plot::line_chart(unwritable, chart), liere::Error);
  CHECK_THROWS_WITH(plot::line_chart(unwritable, chart),
                    Catch::Contains("cannot write") && Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(plot::line_chart(scratch_dir().string(), chart),
                    Catch::Contains("cannot write") && Catch::Contains(std::strerror(EISDIR)));

  chart.title = "needs a font";
  chart.fonts.bold = "/nonexistent/NoSuchFont.ttf";
  CHECK_THROWS_WITH(plot::line_chart(path, chart),
                    Catch::Contains("/nonexistent/NoSuchFont.ttf") && Catch::Contains("not found"));
}

// ==== bar chart =========================================================================================

TEST_CASE("bar_chart: a bar of 50 on a 0–100 axis reaches the middle row; colours stay in the plot and legend",
          "[plot][bar]") {
  plot::BarChart chart;
  chart.title = "Accuracy by resolution";
  chart.y_label = "accuracy (%)";
  chart.x_label = "resolution";
  chart.groups = {"108", "168", "276"};
  chart.bars = {"APE", "RoPE-Mixed", "LieRE"};
  chart.colors = {kRed, kBlue, kGreen};
  chart.values = {{50, 62, 64}, {55, 66, 68}, {40, 58, 61}};
  chart.lo = {{48, 60, 62}, {53, 64, 66}, {38, 56, 59}};
  chart.hi = {{52, 64, 66}, {57, 68, 70}, {42, 60, 63}};
  chart.y_min = 0;
  chart.y_max = 100;
  chart.width = 800;
  chart.height = 500;

  const std::string path = scratch("bar_chart.png");
  const plot::Layout layout = plot::bar_chart(path, chart);
  const Image img = load_png(path);
  REQUIRE(img.w == 800);
  REQUIRE(img.h == 500);
  REQUIRE(layout.panels.size() == 1);
  REQUIRE(layout.bars.size() == 9);
  const plot::PanelLayout& p = layout.panels[0];
  CHECK(p.y_min == 0);
  CHECK(p.y_max == 100);
  const double expected = p.area.y0 + 0.5 * p.area.height();  // 50 on [0, 100]
  CHECK(p.to_py(50) == Approx(expected));

  // Scan down the middle column of the first bar (value 50), between the error bar and the bar's edge.
  const plot::Rect& bar = layout.bars[0];
  const int col = int(bar.x0 + 0.2 * bar.width());
  int top = -1;
  for (int y = int(p.area.y0); y < int(p.area.y1); ++y)
    if (img.at(col, y) == kRed) {
      top = y;
      break;
    }
  REQUIRE(top >= 0);
  CHECK(std::abs(top - expected) <= 2);
  // The bar reaches down to the axis at 0.
  CHECK(img.at(col, int(p.area.y1) - 1) == kRed);
  CHECK(img.at(col, int(p.area.y1)) == plot::kFrameColor);

  // Bar colours appear in the plot area and in the legend, nowhere else.
  for (const plot::Color c : {kRed, kBlue, kGreen}) {
    const Count n = count_color(img, c, {p.area, layout.legends[0]});
    CHECK(n.inside > 500);
    CHECK(n.outside == 0);
    CHECK(count_in(img, c, layout.legends[0]) > 20);
  }
  // The value label: grey text just above the bar's error bar (whose cap ends at row to_py(52) + 1).
  const double hi_row = p.to_py(52);
  long grey = 0;
  for (int y = int(hi_row - 25); y < int(hi_row - 2); ++y)
    for (int x = int(bar.x0); x < int(bar.x1); ++x) {
      const plot::Color c = img.at(x, y);
      grey += c.r == c.g && c.g == c.b && c.r < 160;
    }
  CHECK(grey > 20);
  CHECK(count_in(img, plot::kTextColor, layout.title) > 50);
}

TEST_CASE("bar_chart: values of ±1e308 (a range wider than the largest double) are drawn", "[plot][bar]") {
  plot::BarChart chart;
  chart.groups = {"a", "b"};
  chart.bars = {"x"};
  chart.values = {{1e308}, {-1e308}};
  chart.colors = {kRed};
  chart.value_labels = false;
  const std::string path = scratch("bar_chart_wide.png");
  const plot::Layout layout = plot::bar_chart(path, chart);
  const plot::PanelLayout& p = layout.panels.at(0);
  CHECK(std::isfinite(p.y_max));
  CHECK(p.y_max >= 1e308);
  CHECK(p.y_min <= -1e308);
  // Both bars start at 0, in the middle of the axis, and reach beyond a third of the area's height.
  REQUIRE(layout.bars.size() == 2);
  CHECK(layout.bars[0].height() > p.area.height() / 3);
  CHECK(layout.bars[1].height() > p.area.height() / 3);
  CHECK(std::abs(layout.bars[0].y1 - layout.bars[1].y0) <= 1);
  CHECK(count_color(load_png(path), kRed, {p.area, layout.legends.at(0)}).inside > 1000);
}

TEST_CASE("bar_chart: default range starts at 0; errors name the shape", "[plot][bar][errors]") {
  plot::BarChart chart;
  chart.groups = {"a", "b"};
  chart.bars = {"x"};
  chart.values = {{3.2}, {kNaN}};  // a missing bar is fine
  plot::Layout layout;
  const plot::Canvas c = plot::render(chart, &layout);
  CHECK(layout.panels[0].y_min == 0);
  CHECK(layout.panels[0].y_max >= 3.2);
  CHECK(layout.bars[1].width() == 0);

  const std::string path = scratch("bar_chart_error.png");
  chart.values = {{1.0}};
  CHECK_THROWS_WITH(plot::bar_chart(path, chart), Catch::Contains("values has 1 rows but there are 2 groups"));
  chart.values = {{1.0}, {2.0, 3.0}};
  CHECK_THROWS_WITH(plot::bar_chart(path, chart), Catch::Contains("group 1 ('b') has 2 values"));
  chart.values = {{1.0}, {2.0}};
  chart.lo = {{0.5}, {1.5}};
  CHECK_THROWS_WITH(plot::bar_chart(path, chart), Catch::Contains("lo and hi"));
  chart.hi = {{1.5}, {1.0}};
  CHECK_THROWS_WITH(plot::bar_chart(path, chart), Catch::Contains("lo 1.5 > hi 1"));
}

// ==== heatmap grid ======================================================================================

TEST_CASE("heatmap_grid: the maximum of each heatmap has the colour map's top colour at its centre",
          "[plot][heatmap]") {
  const plot::Colormap map = GENERATE(plot::Colormap::Viridis, plot::Colormap::CoolWarm);
  plot::HeatmapGrid grid;
  grid.title = "CLS attention";
  grid.rows = 2;
  grid.cols = 3;
  grid.row_labels = {"RoPE", "LieRE"};
  grid.col_labels = {"layer 1", "layer 2", "layer 3"};
  grid.colormap = map;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 0.5f);
  std::vector<std::pair<int, int>> argmax;
  for (int k = 0; k < 6; ++k) {
    plot::Heatmap m{9, 9, std::vector<float>(81)};
    for (auto& v : m.values) v = u(rng) * float(k + 1);  // each cell on its own scale
    const int i = k % 9, j = (2 * k + 3) % 9;
    m.values[i * 9 + j] = 1.0f * float(k + 1);
    argmax.push_back({i, j});
    grid.cells.push_back(m);
  }
  const std::string path = scratch(map == plot::Colormap::Viridis ? "heatmap_viridis.png" : "heatmap_coolwarm.png");
  const plot::Layout layout = plot::heatmap_grid(path, grid);
  const Image img = load_png(path);
  REQUIRE(img.w == layout.width);
  REQUIRE(img.h == layout.height);
  REQUIRE(layout.cells.size() == 6);

  const plot::Color top = plot::colormap(map, 1.0);
  for (int k = 0; k < 6; ++k) {
    const plot::Rect& r = layout.cells[k];
    CHECK(r.width() == Approx(r.height()));
    const double patch = r.width() / 9;
    const auto [i, j] = argmax[k];
    CHECK(img.at(int(r.x0 + (j + 0.5) * patch), int(r.y0 + (i + 0.5) * patch)) == top);
    // Per-cell normalisation: every cell has its own maximum at the top colour, and only one patch of it.
    CHECK(count_in(img, top, r) == long(patch * patch));
  }
  // The colour bar runs from the top colour (at its top) to the bottom one.
  const plot::Rect& bar = layout.colorbar;
  const plot::Color bar_top = img.at(int(bar.x0 + bar.width() / 2), int(bar.y0));
  CHECK(std::abs(int(bar_top.r) - int(top.r)) <= 4);
  CHECK(std::abs(int(bar_top.g) - int(top.g)) <= 4);
  CHECK(std::abs(int(bar_top.b) - int(top.b)) <= 4);
  CHECK(count_in(img, plot::kTextColor, layout.title) > 30);
}

TEST_CASE("heatmap_grid: a shared colour range, and errors", "[plot][heatmap][errors]") {
  plot::HeatmapGrid grid;
  grid.rows = 1;
  grid.cols = 2;
  grid.normalize_each = false;
  grid.cells = {plot::Heatmap{2, 2, {0, 1, 2, 3}}, plot::Heatmap{2, 2, {4, 5, 6, 8}}};
  plot::Layout layout;
  const plot::Canvas c = plot::render(grid, &layout);
  const plot::Color top = plot::colormap(plot::Colormap::Viridis, 1.0);
  const plot::Color bottom = plot::colormap(plot::Colormap::Viridis, 0.0);
  auto centre = [&](int cell, int i, int j) {
    const plot::Rect& r = layout.cells[cell];
    return c.pixel(int(r.x0 + (j + 0.5) * r.width() / 2), int(r.y0 + (i + 0.5) * r.height() / 2));
  };
  CHECK(centre(1, 1, 1) == top);     // 8, the global maximum
  CHECK(centre(0, 0, 0) == bottom);  // 0, the global minimum
  CHECK(!(centre(0, 1, 1) == top));  // 3, the first cell's own maximum, is not the top colour here

  const std::string path = scratch("heatmap_error.png");
  grid.cells.pop_back();
  CHECK_THROWS_WITH(plot::heatmap_grid(path, grid), Catch::Contains("1 cells for a 1×2 grid"));
  grid.cells.push_back(plot::Heatmap{2, 3, {1, 2, 3}});
  CHECK_THROWS_WITH(plot::heatmap_grid(path, grid), Catch::Contains("is 2×3 but has 3 values"));
  grid.cells.back() = plot::Heatmap{2, 2, {1, 2, 3, 4}};
  grid.row_labels = {"a", "b"};
  CHECK_THROWS_WITH(plot::heatmap_grid(path, grid), Catch::Contains("2 row labels for 1 rows"));
}

TEST_CASE("colormap: table ends, interpolation, NaN", "[plot][colormap]") {
  CHECK(plot::colormap(plot::Colormap::Viridis, 0.0) == plot::rgb(0x440154));
  CHECK(plot::colormap(plot::Colormap::Viridis, 1.0) == plot::rgb(0xFDE725));
  CHECK(plot::colormap(plot::Colormap::Viridis, 2.0) == plot::rgb(0xFDE725));  // clamped
  CHECK(plot::colormap(plot::Colormap::CoolWarm, 0.0) == plot::Color{59, 76, 192});
  CHECK(plot::colormap(plot::Colormap::CoolWarm, 0.5) == plot::Color{221, 221, 221});
  CHECK(plot::colormap(plot::Colormap::CoolWarm, 1.0) == plot::Color{180, 4, 38});
  // Halfway between Moreland's first two of 33 samples, (59, 76, 192) and (68, 90, 204): rounded, not truncated.
  CHECK(plot::colormap(plot::Colormap::CoolWarm, 1.0 / 64) == plot::Color{64, 83, 198});
  // viridis(0.5) is #21918C in matplotlib's 256-entry table.
  const plot::Color mid = plot::colormap(plot::Colormap::Viridis, 0.5);
  CHECK(std::abs(int(mid.r) - 0x21) <= 2);
  CHECK(std::abs(int(mid.g) - 0x91) <= 2);
  CHECK(std::abs(int(mid.b) - 0x8C) <= 2);
  CHECK(plot::colormap(plot::Colormap::Viridis, kNaN) == plot::rgb(0xD9D9D9));
}

// ==== JSON lines ========================================================================================

TEST_CASE("parse_json_object: values, escapes, numbers with exponents", "[jsonl]") {
  using liere::data::parse_json_object;
  const auto o = parse_json_object(
      R"( {"epoch": 3, "loss":2.5e-1, "acc":-1.25E+2, "x": 0, "y": 0.5e1, "lr":1e-3, "name":"LieRE-8",)"
      R"( "ok":true, "bad": false, "none": null, "tiny": 1e-400} )");
  CHECK(o.at("epoch").as_number() == 3);
  CHECK(o.at("loss").as_number() == 0.25);
  CHECK(o.at("acc").as_number() == -125);
  CHECK(o.at("x").as_number() == 0);
  CHECK(o.at("y").as_number() == 5);
  CHECK(o.at("lr").as_number() == 1e-3);
  CHECK(o.at("name").as_string() == "LieRE-8");
  CHECK(o.at("ok").as_bool());
  CHECK(!o.at("bad").as_bool());
  CHECK(o.at("none").is_null());
  CHECK(o.at("tiny").as_number() == 0);  // below the smallest subnormal: rounds to 0, as in every JSON reader
  CHECK(o.size() == 11);

  const auto e = parse_json_object(R"({"s":"q\"b\\s\/n\nt\tr\rb\bf\fu\u00e9\u20ac\ud83d\ude00"})");
  CHECK(e.at("s").as_string() == "q\"b\\s/n\nt\tr\rb\bf\fu\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");

  const auto n = parse_json_object(R"({"a":NaN,"b":-Infinity,"c":nan,"d":inf})");
  CHECK(std::isnan(n.at("a").as_number()));
  CHECK(n.at("b").as_number() == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(n.at("c").as_number()));
  CHECK(std::isinf(n.at("d").as_number()));

  CHECK(parse_json_object("{}").empty());
  CHECK_THROWS_WITH(o.at("name").as_number(), Catch::Contains("expected a number, got a string"));
}

TEST_CASE("parse_json_object: malformed input names file:line:column", "[jsonl][errors]") {
  using liere::data::parse_json_object;
  auto error_of = [](const std::string& text) {
    try {
      parse_json_object(text, "m.jsonl", 7);
    } catch (const liere::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of(R"({"a":1,,"b":2})") == "m.jsonl:7:8: expected a string key");
  CHECK(error_of(R"({"a" 1})") == "m.jsonl:7:6: expected ':' after the key");
  CHECK(error_of(R"({"a":01})") == "m.jsonl:7:7: invalid number: leading zeros are not allowed");
  CHECK(error_of(R"({"a":1.})") == "m.jsonl:7:8: invalid number: expected a digit after '.'");
  CHECK(error_of(R"({"a":1e})") == "m.jsonl:7:8: invalid number: expected a digit in the exponent");
  CHECK(error_of(R"({"a":12x})") == "m.jsonl:7:8: invalid number '12x...'");
  CHECK(error_of(R"({"a":"abc)") == "m.jsonl:7:6: unterminated string");
  CHECK(error_of(R"({"a":"\q"})") == "m.jsonl:7:7: invalid escape '\\q'");
  CHECK(error_of(R"({"a":"\u12G4"})") == "m.jsonl:7:11: invalid \\u escape: expected 4 hex digits");
  CHECK(error_of(R"({"a":{"b":1}})") == "m.jsonl:7:6: nested objects and arrays are not supported (flat objects only)");
  CHECK(error_of(R"({"a":[1]})") == "m.jsonl:7:6: nested objects and arrays are not supported (flat objects only)");
  CHECK(error_of(R"({"a":1} x)") == "m.jsonl:7:9: unexpected text after the object");
  CHECK(error_of(R"({"a":1)") == "m.jsonl:7:7: unexpected end of line: expected ',' or '}'");
  CHECK(error_of(R"({"a":1,"a":2})") == "m.jsonl:7:8: duplicate key");
  CHECK(error_of(R"({"a":tru})") == "m.jsonl:7:6: expected a value (number, string, true, false or null)");
  CHECK(error_of(R"(["a"])") == "m.jsonl:7:1: expected '{' to start an object");
  // A number beyond the largest double is an error, not ±inf (Infinity says that on purpose).
  CHECK(error_of(R"({"a":1e400})") ==
        "m.jsonl:7:6: the number 1e400 is out of the range of a double (largest 1.7976931348623157e+308; write "
        "Infinity for an infinite value)");
  CHECK(error_of(R"({"a":1, "b":-1.8e308})").starts_with("m.jsonl:7:13: the number -1.8e308 is out of the range"));
  CHECK(error_of(R"({"a":1.7e308,"b":-Infinity})") == "no error");
}

TEST_CASE("read_jsonl: rows in order, blank lines skipped, errors name the file and line", "[jsonl]") {
  const std::string path = scratch("metrics.jsonl");
  {
    std::ofstream out(path);
    out << R"({"epoch":1,"train_loss":2.1,"train_acc":0.31,"test_loss":1.9,"test_acc":0.35,"lr":0.001})"
        << "\n"
        << "\n"
        << R"({"epoch":2,"train_loss":1.7,"test_acc":0.41,"note":"warm-up done"})"
        << "\r\n";
  }
  std::vector<int> lines;
  const auto rows = liere::data::read_jsonl(path, &lines);
  REQUIRE(rows.size() == 2);
  CHECK(lines == std::vector<int>{1, 3});
  CHECK(rows[0].at("lr").as_number() == 0.001);
  CHECK(rows[1].at("epoch").as_number() == 2);
  CHECK(rows[1].at("note").as_string() == "warm-up done");
  CHECK(!rows[1].contains("train_acc"));

  // A UTF-8 byte-order mark (EF BB BF) before the first line is not part of the JSON; one on a later line is.
  {
    std::ofstream out(path, std::ios::binary);
    out << "\xEF\xBB\xBF" << R"({"epoch":1})" << "\n" << R"({"epoch":2})" << "\n";
  }
  const auto bom_rows = liere::data::read_jsonl(path);
  REQUIRE(bom_rows.size() == 2);
  CHECK(bom_rows[0].at("epoch").as_number() == 1);
  {
    std::ofstream out(path, std::ios::binary);
    out << R"({"epoch":1})" << "\n" << "\xEF\xBB\xBF" << R"({"epoch":2})" << "\n";
  }
  CHECK_THROWS_WITH(liere::data::read_jsonl(path), Catch::Contains(path + ":2:1:"));

  {
    std::ofstream out(path);
    out << R"({"epoch":1,"loss":2.0})"
        << "\n"
        << R"({"epoch":2,"loss":})"
        << "\n";
  }
  CHECK_THROWS_AS(liere::data::read_jsonl(path), liere::Error);
  CHECK_THROWS_WITH(liere::data::read_jsonl(path), Catch::Contains(path + ":2:19: expected a value"));
  CHECK_THROWS_WITH(liere::data::read_jsonl(scratch("no_such_file.jsonl")),
                    Catch::Contains("cannot open") && Catch::Contains(std::strerror(ENOENT)));
  CHECK_THROWS_WITH(liere::data::read_jsonl(scratch_dir().string()),
                    Catch::Equals(scratch_dir().string() + ": is a directory, not a JSON-lines file"));
}

// ==== the plot_metrics program ==========================================================================

TEST_CASE("plot_metrics: usage, exit codes, a malformed line", "[plot][program][needs-plot_metrics]") {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "plot_metrics";
  if (!fs::exists(exe)) LIERE_SKIP(exe.string() << " is not built (LIERE_BUILD_EXAMPLES=OFF?)");
  auto run = [&](const std::string& args) {
    return liere::test::run_logged(exe.string() + " " + args, scratch("plot_metrics.log"));
  };
  auto log = [&] {
    std::ifstream in(scratch("plot_metrics.log"));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  CHECK(run("--help") == 0);
  CHECK(log().find("usage: plot_metrics") != std::string::npos);
  CHECK(run("--frobnicate") == 2);
  CHECK(log().find("unknown option --frobnicate") != std::string::npos);

  const std::string good = scratch("run_a.jsonl"), bad = scratch("run_bad.jsonl");
  {
    std::ofstream a(good), b(bad);
    for (int e = 1; e <= 5; ++e)
      a << R"({"epoch":)" << e << R"(,"test_acc":)" << 0.1 * e << R"(,"train_loss":)" << 2.0 / e << "}\n";
    b << R"({"epoch":1,"test_acc":0.1})"
      << "\n"
      << R"({"epoch":2,"test_acc":0.2)"
      << "\n";
  }
  const std::string png = scratch("plot_metrics.png");
  CHECK(run("--out " + png + " --y test_acc --y train_loss " + good) == 0);
  const Image img = load_png(png);
  CHECK(img.w == 900);
  CHECK(run("--out " + png + " --y test_acc " + bad) == 1);
  CHECK(log().find(bad + ":2:") != std::string::npos);
  // Sizes a chart cannot have are usage errors (exit 2), before any file is read.
  CHECK(run("--out " + png + " --y test_acc --width 0 " + bad) == 2);
  CHECK(log().find("--width 0: expected an integer in [200, 16384]") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc --height -5 " + bad) == 2);
  CHECK(run("--out " + png + " --y test_acc --height 100 " + bad) == 2);
  CHECK(log().find("--height 100: expected 0 (automatic) or at least 150 pixels") != std::string::npos);
  // An empty y range, or one a log axis cannot show, is a usage error naming the flags.
  CHECK(run("--out " + png + " --y test_acc --y-min 5 --y-max 1 " + good) == 2);
  CHECK(log().find("--y-min 5 --y-max 1: expected --y-min below --y-max") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc --y-min 1 --y-max 1 --bars " + good) == 2);
  CHECK(log().find("--y-min 1 --y-max 1: expected --y-min below --y-max") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc --log-y --y-min 0 " + good) == 2);
  CHECK(log().find("--y-min 0: --log-y needs a positive --y-min") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc --log-y --y-max -1 " + good) == 2);
  CHECK(log().find("--y-max -1: --log-y needs a positive --y-max") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc --log-y --y-min 0.01 --y-max 1 " + good) == 0);

  // A number beyond the largest double names its file, line and column; ±1e308 on both axes is drawn.
  const std::string ovf = scratch("run_ovf.jsonl"), huge = scratch("run_huge.jsonl");
  {
    std::ofstream o(ovf), h(huge);
    o << R"({"epoch":1,"test_acc":0.5})" << "\n" << R"({"epoch":2,"test_acc":1e400})" << "\n";
    h << R"({"epoch":-1e308,"test_acc":1e308})" << "\n" << R"({"epoch":1e308,"test_acc":-1e308})" << "\n";
  }
  CHECK(run("--out " + png + " --y test_acc " + ovf) == 1);
  CHECK(log().find(ovf + ":2:23: the number 1e400 is out of the range of a double") != std::string::npos);
  CHECK(run("--out " + png + " --y test_acc " + huge) == 0);
  // A directory is an error that says so, not a file without rows.
  CHECK(run("--out " + png + " --y test_acc " + good + " " + scratch_dir().string()) == 1);
  CHECK(log().find(scratch_dir().string() + ": is a directory") != std::string::npos);
}

TEST_CASE("plot_metrics --bars: groups from --x, a bar per file, CIs; the same pixels as bar_chart", "[plot][program][needs-plot_metrics]") {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "plot_metrics";
  if (!fs::exists(exe)) LIERE_SKIP(exe.string() << " is not built (LIERE_BUILD_EXAMPLES=OFF?)");
  auto run = [&](const std::string& args) {
    return liere::test::run_logged(exe.string() + " " + args, scratch("plot_bars.log"));
  };
  auto log = [&] {
    std::ifstream in(scratch("plot_bars.log"));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // Two series; string and numeric groups; the second file lacks group "b" and has a row without the y key.
  const std::string a = scratch("bars_a.jsonl"), b = scratch("bars_b.jsonl"), dup = scratch("bars_dup.jsonl");
  {
    std::ofstream fa(a), fb(b), fd(dup);
    fa << R"({"g":"a","acc":50,"lo":45,"hi":55})" << "\n" << R"({"g":"b","acc":70,"lo":66,"hi":74})" << "\n"
       << R"({"g":8,"acc":30,"lo":20,"hi":40})" << "\n";
    fb << R"({"g":8,"acc":60,"lo":58,"hi":62})" << "\n" << R"({"g":"a","other":1})" << "\n"
       << R"({"g":"a","acc":40,"lo":35,"hi":45})" << "\n";
    fd << R"({"g":"a","acc":1,"lo":0,"hi":2})" << "\n" << R"({"g":"a","acc":2,"lo":1,"hi":3})" << "\n";
  }
  const std::string png = scratch("plot_bars.png"), ref = scratch("plot_bars_ref.png");
  REQUIRE(run("--bars --out " + png + " --x g --y acc --lo lo --hi hi --y-min 0 --y-max 100 --label A --label B " + a +
              " " + b) == 0);
  plot::BarChart chart;
  chart.x_label = "g";
  chart.y_label = "acc";
  chart.groups = {"a", "b", "8"};
  chart.bars = {"A", "B"};
  chart.values = {{50, 40}, {70, kNaN}, {30, 60}};
  chart.lo = {{45, 35}, {66, kNaN}, {20, 58}};
  chart.hi = {{55, 45}, {74, kNaN}, {40, 62}};
  chart.y_min = 0;
  chart.y_max = 100;
  plot::bar_chart(ref, chart);
  const Image got = load_png(png), want = load_png(ref);
  REQUIRE(got.w == want.w);
  REQUIRE(got.h == want.h);
  CHECK(got.rgb == want.rgb);
  // A different value gives a different picture (the comparison above can fail).
  chart.values[0][0] = 20;
  plot::bar_chart(ref, chart);
  CHECK(load_png(ref).rgb != got.rgb);

  CHECK(run("--bars --out " + png + " --x g --y acc --y lo " + a) == 2);
  CHECK(log().find("exactly one --y") != std::string::npos);
  CHECK(run("--bars --out " + png + " --x g --y acc --lo lo " + a) == 2);
  CHECK(log().find("both --lo and --hi") != std::string::npos);
  CHECK(run("--bars --out " + png + " --x g --y acc --lo lo --hi nope " + a) == 1);
  CHECK(log().find("no 'nope'") != std::string::npos);
  CHECK(run("--bars --out " + png + " --x g --y acc " + dup) == 1);
  CHECK(log().find(dup + ":2: a second row for g = a") != std::string::npos);

  // Numeric groups are named in their shortest round-trip form: 1234567 and 1234568 (both "1.23457e+06" with 6
  // significant digits) are two groups, in one file or in two; 0.30000000000000004 is not 0.3.
  const std::string p1 = scratch("bars_p1.jsonl"), p2 = scratch("bars_p2.jsonl");
  {
    std::ofstream f1(p1), f2(p2);
    f1 << R"({"params":1234567,"acc":50})" << "\n" << R"({"params":1234568,"acc":55})" << "\n";
    f2 << R"({"params":1234568,"acc":60})" << "\n" << R"({"params":0.30000000000000004,"acc":30})" << "\n"
       << R"({"params":0.3,"acc":20})" << "\n";
  }
  REQUIRE(run("--bars --out " + png + " --x params --y acc --y-min 0 --y-max 100 " + p1 + " " + p2) == 0);
  plot::BarChart pc;
  pc.x_label = "params";
  pc.y_label = "acc";
  pc.groups = {"1234567", "1234568", "0.30000000000000004", "0.3"};
  pc.bars = {"bars_p1", "bars_p2"};
  pc.values = {{50, kNaN}, {55, 60}, {kNaN, 30}, {kNaN, 20}};
  pc.y_min = 0;
  pc.y_max = 100;
  plot::bar_chart(ref, pc);
  CHECK(load_png(png).rgb == load_png(ref).rgb);
}

// ==== the images in docs/images/plot_examples/ (hidden: run `liere_tests_O0 "[.docs]"`) =======================

TEST_CASE("docs: example images", "[.docs]") {
  const fs::path dir = fs::path(LIERE_SOURCE_DIR) / "docs" / "images" / "plot_examples";
  fs::create_directories(dir);
  std::mt19937 rng(20250713);
  std::normal_distribution<double> noise(0.0, 1.0);

  // Training curves of three encodings (synthetic data).
  plot::LineChart lc;
  lc.title = "ViT on CIFAR-100: training curves (synthetic data)";
  lc.columns = 2;
  lc.height = 420;
  plot::Panel acc{"Test accuracy", "epoch", "accuracy (%)", {}, false, {}, {}, {}, {}, true};
  plot::Panel loss{"Training loss", "epoch", "cross-entropy", {}, true, {}, {}, {}, {}, true};
  const std::vector<std::tuple<std::string, double, double>> runs = {
      {"Absolute PE", 0.07, 58}, {"RoPE-Mixed", 0.09, 65}, {"LieRE\u2088", 0.10, 69}};
  for (const auto& [name, rate, final_acc] : runs) {
    plot::Series a{name, {}, {}, {}}, l{name, {}, {}, {}};
    for (int e = 1; e <= 100; ++e) {
      l.x.push_back(e);
      l.y.push_back(3.6 * std::exp(-rate * 0.6 * e) + 0.45 + 0.03 * noise(rng));
      if (e % 5 == 0 || e == 1) {
        a.x.push_back(e);
        a.y.push_back(final_acc * (1 - std::exp(-rate * e)) + 0.5 * noise(rng));
      }
    }
    acc.series.push_back(a);
    loss.series.push_back(l);
  }
  loss.legend = false;
  lc.panels = {acc, loss};
  plot::line_chart((dir / "line_chart.png").string(), lc);

  // Accuracy at several inference resolutions with 95% CIs, like the paper's Table 3 (synthetic data).
  plot::BarChart bc;
  bc.title = "Accuracy across inference resolutions (synthetic data)";
  bc.x_label = "inference resolution (pixels)";
  bc.y_label = "top-1 accuracy (%)";
  bc.groups = {"108", "168", "224 (train)", "276"};
  bc.bars = {"Absolute PE", "RoPE-Mixed", "LieRE\u2088", "LieRE-Commute"};
  bc.values = {{38.4, 47.9, 52.3, 49.0}, {55.1, 61.8, 65.2, 63.4}, {58.3, 64.9, 68.7, 66.5}, {54.0, 62.2, 66.1, 63.7}};
  bc.y_min = 0;
  bc.y_max = 100;
  for (const auto& row : bc.values) {
    std::vector<double> lo, hi;
    for (const double v : row) {
      const double h = 0.8 + 0.4 * std::abs(noise(rng));
      lo.push_back(v - h);
      hi.push_back(v + h);
    }
    bc.lo.push_back(lo);
    bc.hi.push_back(hi);
  }
  plot::bar_chart((dir / "bar_chart.png").string(), bc);

  // The CLS token's attention over the 9×9 patches, per layer (synthetic data, each map rescaled to [0, 1]).
  plot::HeatmapGrid hg;
  hg.title = "CLS attention over the 9×9 patch grid (synthetic data)";
  hg.rows = 3;
  hg.cols = 4;
  hg.row_labels = {"Absolute PE", "RoPE-Mixed", "LieRE\u2088"};
  hg.col_labels = {"layer 1", "layer 4", "layer 8", "layer 12"};
  hg.colormap = plot::Colormap::CoolWarm;
  for (int r = 0; r < hg.rows; ++r)
    for (int l = 0; l < hg.cols; ++l) {
      plot::Heatmap m{9, 9, std::vector<float>(81)};
      const double ci = 2 + (3 * l + r) % 5, cj = 6 - (2 * l + r) % 5;  // a centre that moves with the layer
      const double width = 3.2 - 0.9 * r + 0.2 * l;                     // sharper for the rotary encodings
      for (int i = 0; i < 9; ++i)
        for (int j = 0; j < 9; ++j) {
          const double d2 = (i - ci) * (i - ci) + (j - cj) * (j - cj);
          m.values[i * 9 + j] = float(std::exp(-d2 / (2 * width * width)) +
                                      (r == 0 ? 0.25 : 0.0) * std::abs(noise(rng)) + 0.05 * std::abs(noise(rng)));
        }
      hg.cells.push_back(m);
    }
  plot::heatmap_grid((dir / "heatmap_grid.png").string(), hg);
}
