// data_tools/arrows.cpp — layouts, shapes, the coverage rasteriser and the renderer of the arrow task.
#include <data_tools/arrows.hpp>
#include <liere/core/rng.hpp>
#include <liere/io/atomic_file.hpp>

#include <stb_image_write.h>
#include <stb_truetype.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#ifndef LIERE_DEFAULT_FONT
#define LIERE_DEFAULT_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
#endif

namespace liere::data {

namespace {


}  // namespace

// ==== layout ============================================================================================

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::Up: return "up";
    case Direction::Down: return "down";
    case Direction::Left: return "left";
    case Direction::Right: return "right";
  }
  return "?";
}

ArrowLayout make_arrow_layout(std::uint64_t seed) {
  constexpr int G = kArrowGrid;
  std::mt19937_64 rng(seed);
  ArrowLayout L;
  L.seed = seed;

  // 1–2. label and the Y's base direction.
  L.label = Direction(liere::below(rng, kArrowClasses));
  L.y_base = Direction(liere::below(rng, kArrowClasses));

  // 3. the Y among the G·(G-1) cells whose neighbour towards the base lies inside the grid.
  const int k = int(liere::below(rng, G * (G - 1)));
  Cell y;
  switch (L.y_base) {
    case Direction::Up: y = {k / G + 1, k % G}; break;
    case Direction::Down: y = {k / G, k % G}; break;
    case Direction::Left: y = {k / (G - 1), k % (G - 1) + 1}; break;
    case Direction::Right: y = {k / (G - 1), k % (G - 1)}; break;
  }
  L.letter_cells[kYIndex] = y;
  L.target = step(y, L.y_base);
  L.arrow_cells[0] = L.target;
  L.arrow_directions[0] = L.label;

  // 4. the other 12 objects: distinct cells from the 79 left, by a partial Fisher–Yates shuffle of the
  //    free cells in row-major order.
  std::array<Cell, G * G> free{};
  int n_free = 0;
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < G; ++c)
      if (Cell{r, c} != y && Cell{r, c} != L.target) free[n_free++] = {r, c};
  constexpr int kOthers = (kArrowCount - 1) + (kLetterCount - 1);
  for (int j = 0; j < kOthers; ++j) {
    const int r = j + int(liere::below(rng, std::uint64_t(n_free - j)));
    std::swap(free[j], free[r]);
  }
  for (int i = 1; i < kArrowCount; ++i) L.arrow_cells[i] = free[i - 1];
  for (int i = 0; i < kLetterCount - 1; ++i) L.letter_cells[i] = free[kArrowCount - 1 + i];

  // 5. the distractor arrows' directions.
  for (int i = 1; i < kArrowCount; ++i) L.arrow_directions[i] = Direction(liere::below(rng, kArrowClasses));
  return L;
}

std::uint64_t arrow_sample_seed(std::uint64_t base_seed, std::uint64_t index) {
  return splitmix64(splitmix64(base_seed) + index);
}

// ==== shapes and the rasteriser ===========================================================================

namespace {

struct Point {
  double x = 0, y = 0;
};
using Contour = std::vector<Point>;
using Shape = std::vector<Contour>;  // closed contours, filled by the nonzero winding rule

constexpr int kSubRows = 32;          // sub-rows per pixel row; coverage along a row is exact
constexpr int kCurveSegments = 16;    // straight segments per quadratic/cubic curve of a glyph
constexpr double kLetterSize = 0.72;  // the largest side of the letters' boxes, in cells
constexpr double kGridInk = 0.35;     // ink of the grid lines (ArrowStyle::grid_lines)

// Adds the nonzero-winding coverage of `shape` (pixel coordinates) to acc, (h, w) row-major: per sub-row the
// crossings with every edge are sorted and each covered span adds its exact overlap with every pixel.
void rasterize(const Shape& shape, int w, int h, std::vector<double>& acc) {
  struct Edge {
    double x0, y0, x1, y1;  // y0 < y1
    int winding;
  };
  std::vector<Edge> edges;
  double y_min = h, y_max = 0;
  for (const Contour& c : shape) {
    for (std::size_t i = 0; i < c.size(); ++i) {
      Point a = c[i], b = c[(i + 1) % c.size()];
      if (a.y == b.y) continue;  // horizontal edges cross no sub-row
      int winding = 1;
      if (a.y > b.y) std::swap(a, b), winding = -1;
      edges.push_back({a.x, a.y, b.x, b.y, winding});
      y_min = std::min(y_min, a.y);
      y_max = std::max(y_max, b.y);
    }
  }
  const int row0 = std::max(0, int(std::floor(y_min)));
  const int row1 = std::min(h, int(std::ceil(y_max)));
  const double weight = 1.0 / kSubRows;
  std::vector<std::pair<double, int>> crossings;
  for (int row = row0; row < row1; ++row) {
    double* out = acc.data() + std::size_t(row) * w;
    for (int k = 0; k < kSubRows; ++k) {
      const double y = row + (k + 0.5) * weight;
      crossings.clear();
      for (const Edge& e : edges)
        if (e.y0 <= y && y < e.y1)
          crossings.emplace_back(e.x0 + (y - e.y0) * (e.x1 - e.x0) / (e.y1 - e.y0), e.winding);
      std::sort(crossings.begin(), crossings.end());
      int winding = 0;
      double start = 0;
      for (const auto& [x, wnd] : crossings) {
        const int before = winding;
        winding += wnd;
        if (before == 0 && winding != 0) start = x;
        if (before != 0 && winding == 0) {
          // the span [start, x) ∩ [0, w)
          const double xa = std::max(start, 0.0), xb = std::min(x, double(w));
          if (xb <= xa) continue;
          const int ia = int(xa), ib = int(xb);
          if (ia == ib) {
            out[ia] += (xb - xa) * weight;
          } else {
            out[ia] += (ia + 1 - xa) * weight;
            for (int i = ia + 1; i < ib; ++i) out[i] += weight;
            if (ib < w) out[ib] += (xb - ib) * weight;
          }
        }
      }
    }
  }
}

// Coverage → ink byte (0 none, 255 full).
std::uint8_t ink_byte(double coverage) { return std::uint8_t(std::lround(std::clamp(coverage, 0.0, 1.0) * 255)); }

// The proper rotation that turns "down" (0, 1) into direction d: (a, b) ↦ a·(dy, −dx) + b·(dx, dy). Shapes
// are defined pointing down — an arrow's head, the Y's stem — and turned by it.
Point turn(Point p, Direction d) {
  switch (d) {
    case Direction::Down: return {p.x, p.y};
    case Direction::Up: return {-p.x, -p.y};
    case Direction::Left: return {-p.y, p.x};
    case Direction::Right: return {p.y, -p.x};
  }
  return p;
}

Shape turn(const Shape& s, Direction d) {
  Shape out = s;
  for (Contour& c : out)
    for (Point& p : c) p = turn(p, d);
  return out;
}

// An arrow pointing down in cell units (the cell is [−0.5, 0.5]², y down): a shaft 0.17 wide from −0.38 to
// 0 and a head 0.54 wide from 0 to its tip at 0.38.
Shape arrow_down() {
  constexpr double ws = 0.085, wh = 0.27, tail = -0.38, base = 0.0, tip = 0.38;
  return {{{-ws, tail}, {ws, tail}, {ws, base}, {wh, base}, {0, tip}, {-wh, base}, {-ws, base}}};
}

// The six letters' outlines in font units (y up), read once per font path and shared.
using Outlines = std::array<Shape, kLetterCount>;

std::shared_ptr<const Outlines> load_outlines(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Outlines>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(path); it != cache.end()) return it->second;

  std::ifstream in(path, std::ios::binary);
  LIERE_ENSURE(in.good(), "arrows: font file '" << path
                                                << "' not found or unreadable (Debian: apt-get install "
                                                   "fonts-dejavu-core, or set ArrowStyle::font_path)");
  const std::vector<unsigned char> data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  stbtt_fontinfo info{};
  const int offset = data.size() >= 12 ? stbtt_GetFontOffsetForIndex(data.data(), 0) : -1;
  LIERE_ENSURE(offset >= 0 && stbtt_InitFont(&info, data.data(), offset),
               "arrows: '" << path << "' is not a TrueType font");

  auto outlines = std::make_shared<Outlines>();
  for (int i = 0; i < kLetterCount; ++i) {
    const int codepoint = kArrowLetters[i];
    LIERE_ENSURE(stbtt_FindGlyphIndex(&info, codepoint) != 0,
                 "arrows: font '" << path << "' has no glyph for '" << kArrowLetters[i] << "'");
    stbtt_vertex* v = nullptr;
    const int n = stbtt_GetCodepointShape(&info, codepoint, &v);
    Shape& shape = (*outlines)[i];
    Point last;
    for (int j = 0; j < n; ++j) {
      const Point p{double(v[j].x), double(v[j].y)};
      const Point c0{double(v[j].cx), double(v[j].cy)}, c1{double(v[j].cx1), double(v[j].cy1)};
      if (v[j].type == STBTT_vmove) {
        shape.emplace_back();
        shape.back().push_back(p);
      } else if (!shape.empty() && v[j].type == STBTT_vline) {
        shape.back().push_back(p);
      } else if (!shape.empty() && v[j].type == STBTT_vcurve) {
        for (int s = 1; s <= kCurveSegments; ++s) {
          const double t = double(s) / kCurveSegments, u = 1 - t;
          shape.back().push_back({u * u * last.x + 2 * u * t * c0.x + t * t * p.x,
                                  u * u * last.y + 2 * u * t * c0.y + t * t * p.y});
        }
      } else if (!shape.empty() && v[j].type == STBTT_vcubic) {
        for (int s = 1; s <= kCurveSegments; ++s) {
          const double t = double(s) / kCurveSegments, u = 1 - t;
          shape.back().push_back(
              {u * u * u * last.x + 3 * u * u * t * c0.x + 3 * u * t * t * c1.x + t * t * t * p.x,
               u * u * u * last.y + 3 * u * u * t * c0.y + 3 * u * t * t * c1.y + t * t * t * p.y});
        }
      }
      last = p;
    }
    stbtt_FreeShape(&info, v);
    LIERE_ENSURE(!shape.empty(), "arrows: font '" << path << "' has an empty glyph for '" << kArrowLetters[i] << "'");
  }
  cache.emplace(path, outlines);
  return outlines;
}

// The letters in cell units, upright (y down): one scale for all six so that the largest side of their
// boxes is kLetterSize, each centred on its own box.
std::array<Shape, kLetterCount> letters_in_cells(const Outlines& outlines) {
  std::array<Point, kLetterCount> lo, hi;
  double largest = 0;
  for (int i = 0; i < kLetterCount; ++i) {
    lo[i] = {1e300, 1e300};
    hi[i] = {-1e300, -1e300};
    for (const Contour& c : outlines[i])
      for (const Point& p : c) {
        lo[i] = {std::min(lo[i].x, p.x), std::min(lo[i].y, p.y)};
        hi[i] = {std::max(hi[i].x, p.x), std::max(hi[i].y, p.y)};
      }
    largest = std::max({largest, hi[i].x - lo[i].x, hi[i].y - lo[i].y});
  }
  const double scale = kLetterSize / largest;
  std::array<Shape, kLetterCount> out;
  for (int i = 0; i < kLetterCount; ++i) {
    const Point centre{(lo[i].x + hi[i].x) / 2, (lo[i].y + hi[i].y) / 2};
    out[i] = outlines[i];
    for (Contour& c : out[i])
      for (Point& p : c) p = {(p.x - centre.x) * scale, -(p.y - centre.y) * scale};
  }
  return out;
}

// Shape kinds, each drawn once per sub-pixel phase: arrows by direction, A–E, the Y by base direction.
constexpr int kArrowKind0 = 0;
constexpr int kLetterKind0 = 4;
constexpr int kYKind0 = kLetterKind0 + kLetterCount - 1;
constexpr int kKinds = kYKind0 + kArrowClasses;

}  // namespace

// ==== renderer ============================================================================================

// Cell c starts at pixel c·res/9 = origin(c) + phase(c)/9 with origin(c) = ⌊c·res/9⌋ and phase(c) =
// c·res mod 9. A sprite is the coverage of one shape kind placed in a cell of phase (py, px), in a window
// of side `window` pixels whose top-left pixel is (origin(row), origin(col)).
struct ArrowRenderer::Impl {
  int res = 0;
  int window = 0;
  std::vector<std::uint8_t> background;             // (res, res)
  std::vector<std::vector<std::uint8_t>> sprites;   // (kKinds, 9, 9) → (window, window) ink, or empty

  const std::vector<std::uint8_t>& sprite(int kind, Cell c) const {
    return sprites[(std::size_t(kind) * kArrowGrid + (c.row * res) % kArrowGrid) * kArrowGrid +
                   (c.col * res) % kArrowGrid];
  }

  // out = min(out, 255 − ink): darkest wins, so the order of drawing does not matter.
  void blit(int kind, Cell c, std::uint8_t* out) const {
    const std::vector<std::uint8_t>& s = sprite(kind, c);
    const int oy = c.row * res / kArrowGrid, ox = c.col * res / kArrowGrid;
    const int h = std::min(window, res - oy), w = std::min(window, res - ox);
    for (int y = 0; y < h; ++y) {
      const std::uint8_t* src = s.data() + std::size_t(y) * window;
      std::uint8_t* dst = out + std::size_t(oy + y) * res + ox;
      for (int x = 0; x < w; ++x) dst[x] = std::min<std::uint8_t>(dst[x], std::uint8_t(255 - src[x]));
    }
  }
};

ArrowRenderer::ArrowRenderer(int resolution, ArrowStyle style) : resolution_(resolution), style_(std::move(style)) {
  LIERE_ENSURE(resolution >= 27 && resolution <= 4096,
               "ArrowRenderer: resolution " << resolution << " is not in [27, 4096] (the paper uses 108, 168, 276)");
  if (style_.font_path.empty()) style_.font_path = LIERE_DEFAULT_FONT;
  const auto letters = letters_in_cells(*load_outlines(style_.font_path));

  auto impl = std::make_unique<Impl>();
  impl->res = resolution;
  const double s = cell_size();
  impl->window = int(std::ceil(s)) + 1;
  const int win = impl->window;

  // The shapes in cell units, each kind turned once.
  std::array<Shape, kKinds> shapes;
  for (int d = 0; d < kArrowClasses; ++d) {
    shapes[kArrowKind0 + d] = turn(arrow_down(), Direction(d));
    shapes[kYKind0 + d] = turn(letters[kYIndex], Direction(d));
  }
  for (int i = 0; i < kLetterCount - 1; ++i) shapes[kLetterKind0 + i] = letters[i];

  // Sprites for the phases that occur at this resolution (1 at 108, 3 per axis at 168 and 276).
  std::array<bool, kArrowGrid> used{};
  for (int c = 0; c < kArrowGrid; ++c) used[(c * resolution) % kArrowGrid] = true;
  impl->sprites.resize(std::size_t(kKinds) * kArrowGrid * kArrowGrid);
  std::vector<double> acc;
  for (int kind = 0; kind < kKinds; ++kind)
    for (int py = 0; py < kArrowGrid; ++py)
      for (int px = 0; px < kArrowGrid; ++px) {
        if (!used[py] || !used[px]) continue;
        Shape placed = shapes[kind];
        for (Contour& c : placed)
          for (Point& p : c) p = {px / double(kArrowGrid) + (0.5 + p.x) * s, py / double(kArrowGrid) + (0.5 + p.y) * s};
        acc.assign(std::size_t(win) * win, 0.0);
        rasterize(placed, win, win, acc);
        auto& sprite = impl->sprites[(std::size_t(kind) * kArrowGrid + py) * kArrowGrid + px];
        sprite.resize(acc.size());
        std::transform(acc.begin(), acc.end(), sprite.begin(), ink_byte);
      }

  // The background: white, or white with grid lines max(1, res/108) pixels wide on the cell borders (the
  // outer frame drawn just inside the image).
  impl->background.assign(std::size_t(resolution) * resolution, 255);
  if (style_.grid_lines) {
    const double lw = std::max(1.0, resolution / 108.0);
    const double R = resolution;
    Shape lines;
    for (int c = 0; c <= kArrowGrid; ++c) {
      const double x = std::clamp(c * s, lw / 2, R - lw / 2);
      lines.push_back({{x - lw / 2, 0}, {x + lw / 2, 0}, {x + lw / 2, R}, {x - lw / 2, R}});
      lines.push_back({{0, x - lw / 2}, {R, x - lw / 2}, {R, x + lw / 2}, {0, x + lw / 2}});
    }
    acc.assign(impl->background.size(), 0.0);
    rasterize(lines, resolution, resolution, acc);
    for (std::size_t i = 0; i < acc.size(); ++i)
      impl->background[i] = std::uint8_t(255 - ink_byte(kGridInk * std::min(acc[i], 1.0)));
  }
  impl_ = std::move(impl);
}

ArrowRenderer::~ArrowRenderer() = default;
ArrowRenderer::ArrowRenderer(ArrowRenderer&&) noexcept = default;
ArrowRenderer& ArrowRenderer::operator=(ArrowRenderer&&) noexcept = default;

void ArrowRenderer::render(const ArrowLayout& layout, std::uint8_t* out) const {
  for (int i = 0; i < kArrowCount; ++i)
    LIERE_ENSURE(inside_grid(layout.arrow_cells[i]), "ArrowRenderer::render: arrow " << i << " at ("
                     << layout.arrow_cells[i].row << ", " << layout.arrow_cells[i].col << ") is outside the grid");
  for (int i = 0; i < kLetterCount; ++i)
    LIERE_ENSURE(inside_grid(layout.letter_cells[i]), "ArrowRenderer::render: letter " << kArrowLetters[i] << " at ("
                     << layout.letter_cells[i].row << ", " << layout.letter_cells[i].col << ") is outside the grid");
  std::copy(impl_->background.begin(), impl_->background.end(), out);
  for (int i = 0; i < kArrowCount; ++i)
    impl_->blit(kArrowKind0 + int(layout.arrow_directions[i]), layout.arrow_cells[i], out);
  for (int i = 0; i < kLetterCount - 1; ++i) impl_->blit(kLetterKind0 + i, layout.letter_cells[i], out);
  impl_->blit(kYKind0 + int(layout.y_base), layout.y_cell(), out);
}

std::vector<std::uint8_t> ArrowRenderer::render(const ArrowLayout& layout) const {
  std::vector<std::uint8_t> out(std::size_t(resolution_) * resolution_);
  render(layout, out.data());
  return out;
}

void render_arrows(const ArrowLayout& layout, int resolution, std::uint8_t* out) {
  static std::mutex mutex;
  static std::map<int, std::shared_ptr<const ArrowRenderer>> renderers;
  std::shared_ptr<const ArrowRenderer> r;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = renderers[resolution];
    if (!slot) slot = std::make_shared<const ArrowRenderer>(resolution);
    r = slot;
  }
  r->render(layout, out);
}

void make_arrow_batch(const ArrowRenderer& renderer, std::uint64_t base_seed, std::uint64_t first, int count,
                      std::uint8_t* pixels, int* labels) {
  LIERE_ENSURE(count >= 0, "make_arrow_batch: count " << count << " is negative");
  const std::size_t image = std::size_t(renderer.resolution()) * renderer.resolution();
#pragma omp parallel for schedule(static) if (count >= 64)
  for (int i = 0; i < count; ++i) {
    const ArrowLayout layout = make_arrow_layout(arrow_sample_seed(base_seed, first + std::uint64_t(i)));
    renderer.render(layout, pixels + std::size_t(i) * image);
    labels[i] = layout.label_index();
  }
}

// ==== output ==============================================================================================

void write_png_grey(const std::string& path, const std::uint8_t* pixels, int width, int height) {
  LIERE_ENSURE(width > 0 && height > 0, "write_png_grey: bad size " << width << "×" << height << " for '" << path << "'");
  // Encoded in memory (stbi_write_png does not check its fwrite), then written whole under "<path>.tmp" and renamed
  // (io/atomic_file.hpp), without an fsync each: the images of a generated data set can be made again.
  std::string png;
  const auto append = [](void* out, void* data, int size) {
    static_cast<std::string*>(out)->append(static_cast<const char*>(data), std::size_t(size));
  };
  LIERE_ENSURE(stbi_write_png_to_func(append, &png, width, height, 1, pixels, width) != 0,
               "write_png_grey: cannot encode '" << path << "'");
  io::AtomicWriteOptions opt;
  opt.what = "write_png_grey";
  opt.durable = false;
  io::write_file_atomic(path, png, opt);
}

}  // namespace liere::data
