// data_tools/plot.hpp — PNG plots written from C++, no Python needed.
//
//   Canvas        an RGB image with anti-aliased lines, filled rectangles, circles and TrueType text
//                 (DejaVu Sans through stb_truetype), saved with stb_image_write.
//   line_chart    training curves: one or more panels of named (x, y) series; NaN makes a gap.
//   bar_chart     groups × bars with [lo, hi] error bars (confidence intervals), as in the paper's Table 3.
//   heatmap_grid  rows × cols of small heatmaps, e.g. the CLS token's attention per layer over the 9×9 patch
//                 grid (the paper's Fig. 10), with a colour bar.
//
// Coordinates are pixels, x to the right and y down, (0, 0) the top-left corner of the top-left pixel; the
// pixel (i, j) covers [i, i+1) × [j, j+1). Every chart function returns the Layout it drew (plot areas, data
// ranges, legend and cell rectangles) so that callers and tests can find things in the image.
// Errors (empty series, mismatched lengths, unwritable path, missing font) throw liere::Error.
#pragma once

#include <liere/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace liere::plot {

// ---- colours -----------------------------------------------------------------------------------------

struct Color {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Color&, const Color&) = default;
};

// 0xRRGGBB → Color.
constexpr Color rgb(std::uint32_t hex) {
  return {std::uint8_t((hex >> 16) & 0xFF), std::uint8_t((hex >> 8) & 0xFF), std::uint8_t(hex & 0xFF)};
}

inline constexpr Color kWhite = rgb(0xFFFFFF);
inline constexpr Color kBlack = rgb(0x000000);
inline constexpr Color kTextColor = rgb(0x1A1A1A);   // titles and axis labels
inline constexpr Color kTickColor = rgb(0x4D4D4D);   // tick labels
inline constexpr Color kFrameColor = rgb(0x8C8C8C);  // plot frame and tick marks
inline constexpr Color kGridColor = rgb(0xE6E6E6);   // grid lines

// The series colour cycle: Tableau 10 (matplotlib's default), repeated past 10.
Color palette(std::size_t i);

// Colour maps, each a table of anchors with linear interpolation.
//   Viridis   perceptually uniform, dark blue → yellow (matplotlib's default);
//   CoolWarm  Moreland's diverging blue → grey → red, like the paper's attention maps.
enum class Colormap { Viridis, CoolWarm };

// The colour at t ∈ [0, 1] (clamped); NaN gives a light grey.
Color colormap(Colormap map, double t);

// ---- geometry and text -------------------------------------------------------------------------------

struct Rect {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // [x0, x1) × [y0, y1)
  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
  bool contains(double x, double y) const { return x >= x0 && x < x1 && y >= y0 && y < y1; }
};

struct Point {
  double x = 0, y = 0;
};

// Which point of the text's box is placed at the given (x, y).
enum class Anchor { TopLeft, Top, TopRight, Left, Center, Right, BottomLeft, Bottom, BottomRight };

// Ccw90 reads bottom to top (y-axis labels), Cw90 top to bottom.
enum class Rotation { None, Ccw90, Cw90 };

enum class Weight { Regular, Bold };

// The TrueType files used for text: DejaVu Sans (regular) for text, DejaVu Sans Bold for titles.
std::string default_bold_font();     // LIERE_DEFAULT_FONT
std::string default_regular_font();  // DejaVuSans.ttf beside LIERE_DEFAULT_FONT, or the bold one if absent

struct Fonts {
  std::string regular = default_regular_font();
  std::string bold = default_bold_font();
};

struct TextStyle {
  double size = 14;  // pixels per em
  Color color = kTextColor;
  Weight weight = Weight::Regular;
  Anchor anchor = Anchor::TopLeft;
  Rotation rotation = Rotation::None;
};

// ---- canvas ------------------------------------------------------------------------------------------

// An RGB image, row-major, 3 bytes per pixel. Drawing is clipped to the clip rectangle (the whole canvas
// unless set_clip narrows it). Shapes are anti-aliased by exact pixel coverage (rectangles) or by the
// distance from the pixel centre to the shape (lines, circles).
class Canvas {
 public:
  Canvas(int width, int height, Color background = kWhite, Fonts fonts = {});

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<std::uint8_t>& pixels() const { return rgb_; }  // (height, width, 3)
  Color pixel(int x, int y) const;

  void fill(Color c);
  void set_clip(const Rect& r);  // rounded to whole pixels
  void reset_clip();

  // Mixes c into pixel (x, y) with weight alpha ∈ [0, 1]; outside the clip rectangle it does nothing.
  void blend(int x, int y, Color c, double alpha);

  void rect(const Rect& r, Color c, double alpha = 1.0);  // filled
  void rect_outline(const Rect& r, Color c, double width = 1.0);
  void line(double x0, double y0, double x1, double y1, Color c, double width = 1.0);
  // A connected line through the points, with round joins; every pixel is blended once.
  void polyline(const std::vector<Point>& points, Color c, double width = 1.0);
  void circle(double cx, double cy, double radius, Color c);  // filled

  // Draws s (UTF-8) with its box's `style.anchor` at (x, y); returns the box it occupies.
  Rect text(double x, double y, std::string_view s, const TextStyle& style = {});
  // The box text() would occupy, without drawing.
  Rect text_box(double x, double y, std::string_view s, const TextStyle& style = {}) const;

  // Writes a PNG; throws liere::Error when the file cannot be written.
  void save_png(const std::string& path) const;

 private:
  int width_ = 0, height_ = 0;
  std::vector<std::uint8_t> rgb_;
  int clip_x0_ = 0, clip_y0_ = 0, clip_x1_ = 0, clip_y1_ = 0;
  Fonts fonts_;
};

// ---- ticks -------------------------------------------------------------------------------------------

// Tick positions at 1-2-5 steps (…, 0.1, 0.2, 0.5, 1, 2, 5, 10, …) inside [lo, hi], about `target` of
// them; `step` is the spacing. With min_step > 0 the step is at least that (1 for integer data). Any finite
// lo < hi, also one whose hi − lo overflows (data near ±1.8e308, which the charts draw too).
struct Ticks {
  std::vector<double> values;
  std::vector<std::string> labels;  // one per value
  double step = 0;                  // 0 for log ticks (not evenly spaced)
};
Ticks nice_ticks(double lo, double hi, int target = 6, double min_step = 0);

// Ticks for a log axis on [lo, hi] (lo > 0): powers of ten, with 2 and 5 between them on short ranges.
Ticks log_ticks(double lo, double hi, int target = 6);

// The label of tick value v for ticks spaced `step` apart, with as many decimals as the step needs and never
// "-0". Scientific notation (2.5e6, 1e-5) when `scientific`; an axis chooses it for all its labels at once,
// when its step is below 1e-4 or a value reaches 1e6.
std::string tick_label(double v, double step, bool scientific = false);

// ---- what a chart function drew ----------------------------------------------------------------------

struct PanelLayout {
  Rect area;                    // the plot area in pixels
  double x_min = 0, x_max = 1;  // data range shown across the area
  double y_min = 0, y_max = 1;
  bool log_y = false;
  double to_px(double x) const;  // data → pixel coordinates
  double to_py(double y) const;
};

struct Layout {
  int width = 0, height = 0;
  Rect title;                       // the figure title's box (empty without a title)
  std::vector<PanelLayout> panels;  // line and bar charts
  std::vector<Rect> legends;        // legend boxes
  std::vector<Rect> bars;           // bar charts: (G, B) row-major, the bars' rectangles (empty for NaN)
  std::vector<Rect> cells;          // heatmap grids: (rows, cols) row-major, each heatmap's image
  Rect colorbar;                    // heatmap grids: the colour bar's gradient
};

// ---- line chart --------------------------------------------------------------------------------------

struct Series {
  std::string label;           // legend entry; empty: not in the legend
  std::vector<double> x, y;    // same length; a non-finite x or y breaks the line
  std::optional<Color> color;  // default: palette(index of the series in its panel)
};

struct Panel {
  std::string title;  // above the panel (optional)
  std::string x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;                                // log-scale y; values ≤ 0 become gaps
  std::optional<double> x_min, x_max, y_min, y_max;  // fixed ranges; default: the data with a margin
  bool legend = true;  // drawn inside the panel, in the corner that hides the fewest points
};

struct LineChart {
  std::string title;
  std::vector<Panel> panels;  // one or more, laid out in `columns` columns, row by row
  int columns = 1;
  int width = 900;
  int height = 0;  // 0: 380 pixels per row of panels plus the title
  double line_width = 2.0;
  bool markers = false;   // a dot at every point
  double font_size = 14;  // axis labels; the title is 1.3×, ticks and legend 0.9×
  Fonts fonts;
};

Canvas render(const LineChart& spec, Layout* layout = nullptr);
Layout line_chart(const std::string& path, const LineChart& spec);

// ---- bar chart ---------------------------------------------------------------------------------------

// G groups along the x axis (e.g. resolutions 108/168/276), B bars in each (e.g. position encodings), one
// colour per bar index, named in the legend.
struct BarChart {
  std::string title, x_label, y_label;
  std::vector<std::string> groups;          // G names, under the groups
  std::vector<std::string> bars;            // B names, in the legend
  std::vector<std::vector<double>> values;  // (G, B); NaN: no bar
  std::vector<std::vector<double>> lo, hi;  // (G, B) each, error-bar ends (e.g. a 95% CI); empty: none
  std::optional<double> y_min, y_max;       // e.g. 0 and 100 for accuracy in %; default: 0 … the data
  bool value_labels = true;                 // the value above each bar
  int decimals = 1;                         // of the value labels
  std::vector<Color> colors;                // B colours; empty: the palette
  int width = 900, height = 520;
  double font_size = 14;
  Fonts fonts;
};

Canvas render(const BarChart& spec, Layout* layout = nullptr);
Layout bar_chart(const std::string& path, const BarChart& spec);

// ---- heatmap grid ------------------------------------------------------------------------------------

struct Heatmap {
  int h = 0, w = 0;
  std::vector<float> values;  // (h, w) row-major; NaN is drawn light grey
};

struct HeatmapGrid {
  std::string title;
  int rows = 0, cols = 0;
  std::vector<Heatmap> cells;           // (rows, cols) row-major
  std::vector<std::string> row_labels;  // rows names (or empty), left of the rows
  std::vector<std::string> col_labels;  // cols names (or empty), above the columns
  bool normalize_each = true;           // rescale every heatmap to [0, 1] by its own min and max
  std::optional<double> v_min, v_max;   // without normalize_each: the colour range (default: all data)
  Colormap colormap = Colormap::Viridis;
  int cell_px = 120;           // the side of one heatmap in pixels (rounded down to whole patches)
  std::string colorbar_label;  // default: "normalised value" with normalize_each, else empty
  double font_size = 14;
  Fonts fonts;
};

Canvas render(const HeatmapGrid& spec, Layout* layout = nullptr);
Layout heatmap_grid(const std::string& path, const HeatmapGrid& spec);

}  // namespace liere::plot
