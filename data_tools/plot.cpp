// data_tools/plot.cpp — the canvas (coverage-based anti-aliasing, stb_truetype text, stb_image_write PNG)
// and the three chart kinds built on it.
#include <data_tools/plot.hpp>

#include <liere/core/config.hpp>

#include <stb_image_write.h>
#include <stb_truetype.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#ifndef LIERE_DEFAULT_FONT
#define LIERE_DEFAULT_FONT "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
#endif

namespace liere::plot {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }

}  // namespace

// ==== colours ===========================================================================================

Color palette(std::size_t i) {
  static constexpr std::array<Color, 10> kTableau10 = {rgb(0x1F77B4), rgb(0xFF7F0E), rgb(0x2CA02C), rgb(0xD62728),
                                                       rgb(0x9467BD), rgb(0x8C564B), rgb(0xE377C2), rgb(0x7F7F7F),
                                                       rgb(0xBCBD22), rgb(0x17BECF)};
  return kTableau10[i % kTableau10.size()];
}

namespace {

// 33 evenly spaced anchors of matplotlib's 256-entry viridis table (max interpolation error 1.6/255).
constexpr std::array<Color, 33> kViridis = {{
    {68, 1, 84},    {71, 13, 96},   {72, 24, 106},  {72, 35, 116},  {71, 45, 123},  {69, 55, 129},  {66, 64, 134},
    {62, 73, 137},  {59, 82, 139},  {55, 91, 141},  {51, 99, 141},  {47, 107, 142}, {44, 114, 142}, {41, 122, 142},
    {38, 130, 142}, {35, 137, 142}, {33, 145, 140}, {31, 151, 139}, {31, 159, 136}, {33, 166, 133}, {39, 173, 129},
    {49, 181, 123}, {61, 188, 116}, {76, 194, 108}, {92, 200, 99},  {110, 206, 88}, {129, 211, 77}, {149, 216, 64},
    {170, 220, 50}, {192, 223, 37}, {213, 226, 26}, {234, 229, 26}, {253, 231, 37},
}};

// Moreland's "Diverging Color Maps for Scientific Visualization", Table 2 (33 anchors): blue → grey → red.
constexpr std::array<Color, 33> kCoolWarm = {{
    {59, 76, 192},   {68, 90, 204},   {77, 104, 215},  {87, 117, 225},  {98, 130, 234},  {108, 142, 241},
    {119, 154, 247}, {130, 165, 251}, {141, 176, 254}, {152, 185, 255}, {163, 194, 255}, {174, 201, 253},
    {184, 208, 249}, {194, 213, 244}, {204, 217, 238}, {213, 219, 230}, {221, 221, 221}, {229, 216, 209},
    {236, 211, 197}, {241, 204, 185}, {245, 196, 173}, {247, 187, 160}, {247, 177, 148}, {247, 166, 135},
    {244, 154, 123}, {241, 141, 111}, {236, 127, 99},  {229, 112, 88},  {222, 96, 77},   {213, 80, 66},
    {203, 62, 56},   {192, 40, 47},   {180, 4, 38},
}};

}  // namespace

Color colormap(Colormap map, double t) {
  if (std::isnan(t)) return rgb(0xD9D9D9);
  const auto& table = map == Colormap::CoolWarm ? kCoolWarm : kViridis;
  const double s = clamp01(t) * double(table.size() - 1);
  const std::size_t i = std::min(std::size_t(s), table.size() - 2);
  const double f = s - double(i);
  auto mix = [f](std::uint8_t a, std::uint8_t b) { return std::uint8_t(std::lround(a + (b - a) * f)); };
  const Color a = table[i], b = table[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

// ==== fonts and text ====================================================================================

std::string default_bold_font() { return LIERE_DEFAULT_FONT; }

std::string default_regular_font() {
  const std::filesystem::path bold = LIERE_DEFAULT_FONT;
  const std::filesystem::path regular = bold.parent_path() / "DejaVuSans.ttf";
  std::error_code ec;
  return std::filesystem::exists(regular, ec) ? regular.string() : bold.string();
}

namespace {

struct Font {
  std::vector<unsigned char> data;  // stbtt_fontinfo points into it
  stbtt_fontinfo info{};
  int ascent = 0, descent = 0;  // font units; descent < 0
};

// Fonts are read once per path and shared (the cache outlives every canvas).
std::shared_ptr<const Font> load_font(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Font>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(path); it != cache.end()) return it->second;

  std::ifstream in(path, std::ios::binary);
  LIERE_ENSURE(in.good(),
               "plot: font file '" << path << "' not found or unreadable (set Fonts::regular / Fonts::bold)");
  auto font = std::make_shared<Font>();
  font->data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const int offset = font->data.size() >= 12 ? stbtt_GetFontOffsetForIndex(font->data.data(), 0) : -1;
  LIERE_ENSURE(offset >= 0 && stbtt_InitFont(&font->info, font->data.data(), offset),
               "plot: '" << path << "' is not a TrueType font");
  int line_gap = 0;
  stbtt_GetFontVMetrics(&font->info, &font->ascent, &font->descent, &line_gap);
  cache.emplace(path, font);
  return font;
}

// UTF-8 → code points; a malformed sequence becomes U+FFFD and decoding resumes at the next byte.
std::vector<int> decode_utf8(std::string_view s) {
  std::vector<int> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0, cp = c;
    if (c >= 0x80) {
      if ((c >> 5) == 0x6)
        n = 1, cp = c & 0x1F;
      else if ((c >> 4) == 0xE)
        n = 2, cp = c & 0x0F;
      else if ((c >> 3) == 0x1E)
        n = 3, cp = c & 0x07;
      else
        n = -1;
    }
    bool ok = n >= 0 && i + std::size_t(n) < s.size();
    for (int k = 1; ok && k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + std::size_t(k)]);
      ok = (d >> 6) == 0x2;
      cp = (cp << 6) | (d & 0x3F);
    }
    out.push_back(ok ? cp : 0xFFFD);
    i += ok ? std::size_t(n) + 1 : 1;
  }
  return out;
}

// Where a line of text sits in its own image: the image size, the logical box (advance width × ascent to
// descent) inside it, and the pen position of every glyph. Rotation is applied afterwards.
struct TextGeometry {
  int w = 0, h = 0;
  Rect box;
  std::vector<int> codepoints;
  std::vector<double> pen_x;
  int baseline = 0;
  float scale = 0;
};

TextGeometry text_geometry(const Font& font, std::string_view s, double size) {
  TextGeometry g;
  g.codepoints = decode_utf8(s);
  g.scale = stbtt_ScaleForMappingEmToPixels(&font.info, float(size));
  const int pad = int(std::ceil(size * 0.25)) + 2;  // room for glyphs that overhang their advance box
  double x = 0;
  for (std::size_t i = 0; i < g.codepoints.size(); ++i) {
    g.pen_x.push_back(pad + x);
    int advance = 0, lsb = 0;
    stbtt_GetCodepointHMetrics(&font.info, g.codepoints[i], &advance, &lsb);
    x += advance * g.scale;
    if (i + 1 < g.codepoints.size())
      x += stbtt_GetCodepointKernAdvance(&font.info, g.codepoints[i], g.codepoints[i + 1]) * g.scale;
  }
  const int ascent = int(std::ceil(font.ascent * g.scale));
  const int descent = int(std::ceil(-font.descent * g.scale));
  g.baseline = pad + ascent;
  g.w = int(std::ceil(x)) + 2 * pad;
  g.h = ascent + descent + 2 * pad;
  g.box = {double(pad), double(pad), pad + x, double(pad + ascent + descent)};
  return g;
}

// Coverage (0..255) of the text, (h, w) row-major, unrotated.
std::vector<std::uint8_t> rasterize(const Font& font, const TextGeometry& g) {
  std::vector<std::uint8_t> alpha(std::size_t(g.w) * g.h, 0);
  std::vector<unsigned char> glyph;
  for (std::size_t i = 0; i < g.codepoints.size(); ++i) {
    const int ix = int(std::floor(g.pen_x[i]));
    const float shift = float(g.pen_x[i] - ix);
    int x0, y0, x1, y1;
    stbtt_GetCodepointBitmapBoxSubpixel(&font.info, g.codepoints[i], g.scale, g.scale, shift, 0, &x0, &y0, &x1, &y1);
    const int gw = x1 - x0, gh = y1 - y0;
    if (gw <= 0 || gh <= 0) continue;
    glyph.assign(std::size_t(gw) * gh, 0);
    stbtt_MakeCodepointBitmapSubpixel(&font.info, glyph.data(), gw, gh, gw, g.scale, g.scale, shift, 0,
                                      g.codepoints[i]);
    // Glyph boxes may overlap (kerning): keep the larger coverage rather than overwrite.
    for (int v = 0; v < gh; ++v)
      for (int u = 0; u < gw; ++u) {
        const int X = ix + x0 + u, Y = g.baseline + y0 + v;
        if (X < 0 || Y < 0 || X >= g.w || Y >= g.h) continue;
        auto& a = alpha[std::size_t(Y) * g.w + X];
        a = std::max<std::uint8_t>(a, glyph[std::size_t(v) * gw + u]);
      }
  }
  return alpha;
}

// The image size and box after rotation.
void rotate_geometry(Rotation r, int& w, int& h, Rect& box) {
  if (r == Rotation::None) return;
  const int W = w, H = h;
  const Rect b = box;
  w = H;
  h = W;
  if (r == Rotation::Ccw90)  // (x, y) → (y, W − x): the start of the text at the bottom
    box = {b.y0, W - b.x1, b.y1, W - b.x0};
  else  // Cw90: (x, y) → (H − y, x)
    box = {H - b.y1, b.x0, H - b.y0, b.x1};
}

std::vector<std::uint8_t> rotate_alpha(Rotation r, const std::vector<std::uint8_t>& a, int W, int H) {
  if (r == Rotation::None) return a;
  std::vector<std::uint8_t> out(a.size());
  // out is H wide and W tall.
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const std::uint8_t v = a[std::size_t(y) * W + x];
      const int nx = r == Rotation::Ccw90 ? y : H - 1 - y;
      const int ny = r == Rotation::Ccw90 ? W - 1 - x : x;
      out[std::size_t(ny) * H + nx] = v;
    }
  return out;
}

// The fractions of the box's width and height at which the anchor point lies.
void anchor_fractions(Anchor a, double& fx, double& fy) {
  switch (a) {
    case Anchor::TopLeft: fx = 0.0, fy = 0.0; break;
    case Anchor::Top: fx = 0.5, fy = 0.0; break;
    case Anchor::TopRight: fx = 1.0, fy = 0.0; break;
    case Anchor::Left: fx = 0.0, fy = 0.5; break;
    case Anchor::Center: fx = 0.5, fy = 0.5; break;
    case Anchor::Right: fx = 1.0, fy = 0.5; break;
    case Anchor::BottomLeft: fx = 0.0, fy = 1.0; break;
    case Anchor::Bottom: fx = 0.5, fy = 1.0; break;
    case Anchor::BottomRight: fx = 1.0, fy = 1.0; break;
  }
}

// Whole-pixel origin of the (rotated) text image so that its box's anchor lands on (x, y).
void place(double x, double y, const Rect& box, Anchor anchor, long& ox, long& oy) {
  double fx = 0, fy = 0;
  anchor_fractions(anchor, fx, fy);
  ox = std::lround(x - fx * box.width() - box.x0);
  oy = std::lround(y - fy * box.height() - box.y0);
}

}  // namespace

// ==== canvas ============================================================================================

Canvas::Canvas(int width, int height, Color background, Fonts fonts)
    : width_(width), height_(height), fonts_(std::move(fonts)) {
  LIERE_ENSURE(width > 0 && height > 0 && width <= 32768 && height <= 32768,
               "Canvas: size " << width << "×" << height << " is not in 1…32768 × 1…32768");
  rgb_.resize(std::size_t(width) * height * 3);
  reset_clip();
  fill(background);
}

Color Canvas::pixel(int x, int y) const {
  LIERE_ENSURE(x >= 0 && y >= 0 && x < width_ && y < height_,
               "Canvas::pixel: (" << x << ", " << y << ") is outside the " << width_ << "×" << height_ << " canvas");
  const std::size_t i = (std::size_t(y) * width_ + x) * 3;
  return {rgb_[i], rgb_[i + 1], rgb_[i + 2]};
}

void Canvas::fill(Color c) {
  for (std::size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = c.r;
    rgb_[i + 1] = c.g;
    rgb_[i + 2] = c.b;
  }
}

void Canvas::set_clip(const Rect& r) {
  clip_x0_ = std::clamp(int(std::lround(r.x0)), 0, width_);
  clip_y0_ = std::clamp(int(std::lround(r.y0)), 0, height_);
  clip_x1_ = std::clamp(int(std::lround(r.x1)), clip_x0_, width_);
  clip_y1_ = std::clamp(int(std::lround(r.y1)), clip_y0_, height_);
}

void Canvas::reset_clip() {
  clip_x0_ = clip_y0_ = 0;
  clip_x1_ = width_;
  clip_y1_ = height_;
}

void Canvas::blend(int x, int y, Color c, double alpha) {
  if (x < clip_x0_ || y < clip_y0_ || x >= clip_x1_ || y >= clip_y1_ || !(alpha > 0)) return;
  const double a = alpha >= 1 ? 1.0 : alpha;
  std::uint8_t* p = &rgb_[(std::size_t(y) * width_ + x) * 3];
  auto mix = [a](std::uint8_t dst, std::uint8_t src) { return std::uint8_t(std::lround(dst + (src - dst) * a)); };
  p[0] = mix(p[0], c.r);
  p[1] = mix(p[1], c.g);
  p[2] = mix(p[2], c.b);
}

void Canvas::rect(const Rect& r, Color c, double alpha) {
  const double x0 = std::max(r.x0, double(clip_x0_)), x1 = std::min(r.x1, double(clip_x1_));
  const double y0 = std::max(r.y0, double(clip_y0_)), y1 = std::min(r.y1, double(clip_y1_));
  if (!(x1 > x0 && y1 > y0)) return;
  // Exact coverage: the overlap of each pixel square with the rectangle.
  for (int py = int(std::floor(y0)); py < int(std::ceil(y1)); ++py) {
    const double cy = std::min(y1, py + 1.0) - std::max(y0, double(py));
    for (int px = int(std::floor(x0)); px < int(std::ceil(x1)); ++px) {
      const double cx = std::min(x1, px + 1.0) - std::max(x0, double(px));
      blend(px, py, c, alpha * cx * cy);
    }
  }
}

void Canvas::rect_outline(const Rect& r, Color c, double w) {
  rect({r.x0, r.y0, r.x1, r.y0 + w}, c);
  rect({r.x0, r.y1 - w, r.x1, r.y1}, c);
  rect({r.x0, r.y0 + w, r.x0 + w, r.y1 - w}, c);
  rect({r.x1 - w, r.y0 + w, r.x1, r.y1 - w}, c);
}

void Canvas::line(double x0, double y0, double x1, double y1, Color c, double width) {
  polyline({{x0, y0}, {x1, y1}}, c, width);
}

void Canvas::polyline(const std::vector<Point>& points, Color c, double width) {
  if (!(width > 0)) return;
  // Coverage of a pixel = how far its centre lies inside the stroke (a capsule around each segment), so
  // joins and ends are round. Thinner than a pixel: a one-pixel stroke at reduced opacity.
  const double half = std::max(width, 1.0) / 2;
  const double opacity = std::min(width, 1.0);
  auto finite = [](const Point& p) { return std::isfinite(p.x) && std::isfinite(p.y); };

  std::vector<float> cov;
  for (std::size_t start = 0; start < points.size();) {
    if (!finite(points[start])) {
      ++start;
      continue;
    }
    std::size_t end = start;  // [start, end) is a run of finite points
    while (end < points.size() && finite(points[end])) ++end;

    double bx0 = points[start].x, bx1 = bx0, by0 = points[start].y, by1 = by0;
    for (std::size_t i = start; i < end; ++i) {
      bx0 = std::min(bx0, points[i].x), bx1 = std::max(bx1, points[i].x);
      by0 = std::min(by0, points[i].y), by1 = std::max(by1, points[i].y);
    }
    const int X0 = std::max(clip_x0_, int(std::floor(bx0 - half - 1)));
    const int X1 = std::min(clip_x1_, int(std::ceil(bx1 + half + 1)));
    const int Y0 = std::max(clip_y0_, int(std::floor(by0 - half - 1)));
    const int Y1 = std::min(clip_y1_, int(std::ceil(by1 + half + 1)));
    if (X1 > X0 && Y1 > Y0) {
      const int W = X1 - X0;
      cov.assign(std::size_t(W) * (Y1 - Y0), 0.0f);
      for (std::size_t i = start; i < end; ++i) {
        const Point a = points[i], b = points[i + 1 < end ? i + 1 : i];
        const double dx = b.x - a.x, dy = b.y - a.y, len2 = dx * dx + dy * dy;
        const int sx0 = std::max(X0, int(std::floor(std::min(a.x, b.x) - half - 1)));
        const int sx1 = std::min(X1, int(std::ceil(std::max(a.x, b.x) + half + 1)));
        const int sy0 = std::max(Y0, int(std::floor(std::min(a.y, b.y) - half - 1)));
        const int sy1 = std::min(Y1, int(std::ceil(std::max(a.y, b.y) + half + 1)));
        for (int py = sy0; py < sy1; ++py)
          for (int px = sx0; px < sx1; ++px) {
            const double cx = px + 0.5 - a.x, cy = py + 0.5 - a.y;
            const double t = len2 > 0 ? std::clamp((cx * dx + cy * dy) / len2, 0.0, 1.0) : 0.0;
            const double ex = cx - t * dx, ey = cy - t * dy;
            const double v = clamp01(half + 0.5 - std::sqrt(ex * ex + ey * ey));
            float& dst = cov[std::size_t(py - Y0) * W + (px - X0)];
            dst = std::max(dst, float(v));
          }
      }
      for (int py = Y0; py < Y1; ++py)
        for (int px = X0; px < X1; ++px) blend(px, py, c, opacity * cov[std::size_t(py - Y0) * W + (px - X0)]);
    }
    start = end;
  }
}

void Canvas::circle(double cx, double cy, double radius, Color c) {
  if (!(radius > 0) || !std::isfinite(cx) || !std::isfinite(cy)) return;
  const int x0 = int(std::floor(cx - radius - 1)), x1 = int(std::ceil(cx + radius + 1));
  const int y0 = int(std::floor(cy - radius - 1)), y1 = int(std::ceil(cy + radius + 1));
  for (int py = y0; py < y1; ++py)
    for (int px = x0; px < x1; ++px) blend(px, py, c, clamp01(radius + 0.5 - std::hypot(px + 0.5 - cx, py + 0.5 - cy)));
}

Rect Canvas::text_box(double x, double y, std::string_view s, const TextStyle& style) const {
  const auto font = load_font(style.weight == Weight::Bold ? fonts_.bold : fonts_.regular);
  const TextGeometry g = text_geometry(*font, s, style.size);
  int w = g.w, h = g.h;
  Rect box = g.box;
  rotate_geometry(style.rotation, w, h, box);
  long ox = 0, oy = 0;
  place(x, y, box, style.anchor, ox, oy);
  return {ox + box.x0, oy + box.y0, ox + box.x1, oy + box.y1};
}

Rect Canvas::text(double x, double y, std::string_view s, const TextStyle& style) {
  LIERE_ENSURE(style.size > 0 && style.size < 1000, "Canvas::text: font size " << style.size << " is not in (0, 1000)");
  const auto font = load_font(style.weight == Weight::Bold ? fonts_.bold : fonts_.regular);
  const TextGeometry g = text_geometry(*font, s, style.size);
  const std::vector<std::uint8_t> alpha = rotate_alpha(style.rotation, rasterize(*font, g), g.w, g.h);
  int w = g.w, h = g.h;
  Rect box = g.box;
  rotate_geometry(style.rotation, w, h, box);
  long ox = 0, oy = 0;
  place(x, y, box, style.anchor, ox, oy);
  for (int v = 0; v < h; ++v)
    for (int u = 0; u < w; ++u)
      if (const std::uint8_t a = alpha[std::size_t(v) * w + u]) blend(int(ox + u), int(oy + v), style.color, a / 255.0);
  return {ox + box.x0, oy + box.y0, ox + box.x1, oy + box.y1};
}

void Canvas::save_png(const std::string& path) const {
  LIERE_ENSURE(!path.empty(), "save_png: the output path is empty");
  errno = 0;
  const int ok = stbi_write_png(path.c_str(), width_, height_, 3, rgb_.data(), width_ * 3);
  if (!ok) {
    const int err = errno;
    const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
    std::error_code ec;
    const std::string why = !std::filesystem::is_directory(parent, ec)
                                ? "the directory '" + parent.string() + "' does not exist"
                                : (err ? std::strerror(err) : "write failed");
    LIERE_ENSURE(false, "save_png: cannot write '" << path << "': " << why);
  }
}

// ==== ticks =============================================================================================

namespace {

// The fewest decimals (≤ 10) that write `step` exactly, e.g. 0.25 → 2, 0.5 → 1, 20 → 0.
int decimals_for(double step) {
  step = std::abs(step);
  if (!(step > 0) || !std::isfinite(step)) return 0;
  for (int d = 0; d <= 10; ++d) {
    const double s = step * std::pow(10.0, d);
    if (std::abs(s - std::round(s)) < 1e-6 * std::max(1.0, s)) return d;
  }
  return 10;
}

std::string format_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // "-0", "-0.00": no sign on zero.
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

}  // namespace

std::string tick_label(double v, double step, bool scientific) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  step = std::abs(step);
  if (std::abs(v) < step * 1e-9) v = 0;
  if (v == 0 && scientific) return "0";
  if (!scientific) return format_fixed(v, decimals_for(step > 0 ? step : std::abs(v)));
  // Mantissa with the decimals the step needs at this magnitude, trailing zeros dropped: 2.5e6, 1e-5.
  int e = int(std::floor(std::log10(std::abs(v)) + 1e-9));
  std::string m;
  for (int pass = 0; pass < 2; ++pass) {
    const double scale = std::pow(10.0, e);
    m = format_fixed(v / scale, std::min(3, decimals_for((step > 0 ? step : std::abs(v)) / scale)));
    if (std::abs(std::stod(m)) < 10) break;
    ++e;  // rounding carried into the next power of ten
  }
  if (m.find('.') != std::string::npos) {
    m.erase(m.find_last_not_of('0') + 1);
    if (m.back() == '.') m.pop_back();
  }
  return m + "e" + std::to_string(e);
}

namespace {

// One notation for a whole axis: scientific when the step is tiny or a value is huge.
bool needs_scientific(const std::vector<double>& values, double smallest_step) {
  double biggest = 0;
  for (const double v : values) biggest = std::max(biggest, std::abs(v));
  return smallest_step < 1e-4 || biggest >= 1e6;
}

}  // namespace

Ticks nice_ticks(double lo, double hi, int target, double min_step) {
  LIERE_ENSURE(std::isfinite(lo) && std::isfinite(hi) && hi > lo,
               "nice_ticks: the range [" << lo << ", " << hi << "] is empty or not finite");
  target = std::max(target, 1);
  // The 1-2-5 step that gives the tick count closest to the target (ties: the larger step). The range is r·s: hi − lo
  // (s = 1), or its half (s = 2) where hi − lo overflows (data near ±1.8e308).
  const double s = std::isfinite(hi - lo) ? 1 : 2, r = hi / s - lo / s;
  const double mag = std::pow(10.0, std::floor(std::log10(r / target) + std::log10(s)));
  double step = mag, best = std::numeric_limits<double>::infinity();
  for (const double m : {0.5, 1.0, 2.0, 5.0, 10.0}) {
    if (!std::isfinite(m * mag)) continue;  // beyond the largest double
    const double miss = std::abs(r / (m * mag) * s - target);
    if (miss <= best + 1e-9) step = m * mag, best = miss;
  }
  if (min_step > 0 && step < min_step) {  // the smallest 1-2-5 step ≥ min_step
    const double mm = std::pow(10.0, std::floor(std::log10(min_step)));
    step = 10 * mm;
    for (const double m : {1.0, 2.0, 5.0, 10.0})
      if (m * mm >= min_step * (1 - 1e-9)) {
        step = m * mm;
        break;
      }
  }
  Ticks t;
  t.step = step;
  const double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  for (double k = k0; k <= k1; ++k) {
    const double v = k * step;
    t.values.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  const bool sci = needs_scientific(t.values, step);
  for (const double v : t.values) t.labels.push_back(tick_label(v, step, sci));
  return t;
}

Ticks log_ticks(double lo, double hi, int target) {
  LIERE_ENSURE(lo > 0 && std::isfinite(hi) && hi > lo,
               "log_ticks: the range [" << lo << ", " << hi << "] must be positive, finite and non-empty");
  const double l0 = std::log10(lo), l1 = std::log10(hi);
  const int e0 = int(std::floor(l0 + 1e-9)), e1 = int(std::ceil(l1 - 1e-9));
  const double decades = l1 - l0;
  // Mantissas per decade: 1 on long ranges (every k-th decade when there are many), 1-2-5 on short ones.
  std::vector<double> mantissas = decades < 2.5 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  const int every = std::max(1, int(std::ceil(decades / std::max(target, 1))));
  Ticks t;
  for (int e = e0; e <= e1; ++e) {
    if (mantissas.size() == 1 && (e % every) != 0) continue;
    for (const double m : mantissas) {
      const double v = m * std::pow(10.0, e);
      if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
      t.values.push_back(v);
    }
  }
  if (t.values.size() < 2) return nice_ticks(lo, hi, std::min(target, 4));  // a very short range
  // Each label with the decimals of its own decade.
  const bool sci = needs_scientific(t.values, t.values.front());
  for (const double v : t.values)
    t.labels.push_back(tick_label(v, std::pow(10.0, std::floor(std::log10(v) + 1e-9)), sci));
  t.step = 0;  // not evenly spaced
  return t;
}

// ==== layouts ===========================================================================================

namespace {

// (v − lo) / (hi − lo): where v lies in [lo, hi], 0 at lo and 1 at hi. Where a difference overflows (data near
// ±1.8e308) all three are halved first, which is exact for numbers that large.
double fraction(double v, double lo, double hi) {
  const double d = v - lo, r = hi - lo;
  if (std::isfinite(d) && std::isfinite(r)) return d / r;
  return (v / 2 - lo / 2) / (hi / 2 - lo / 2);
}

}  // namespace

double PanelLayout::to_px(double x) const { return area.x0 + fraction(x, x_min, x_max) * area.width(); }

double PanelLayout::to_py(double y) const {
  if (log_y) {
    const double l0 = std::log10(y_min), l1 = std::log10(y_max);
    return y > 0 ? area.y1 - (std::log10(y) - l0) / (l1 - l0) * area.height() : kNaN;
  }
  return area.y1 - fraction(y, y_min, y_max) * area.height();
}

namespace {

// Font sizes and spacings of one chart, all derived from its base font size.
struct Theme {
  double fs;
  double pad() const { return std::round(0.9 * fs); }
  TextStyle title(Anchor a = Anchor::Top) const { return {1.3 * fs, kTextColor, Weight::Bold, a}; }
  TextStyle panel_title(Anchor a = Anchor::Bottom) const { return {1.05 * fs, kTextColor, Weight::Bold, a}; }
  TextStyle label(Anchor a, Rotation r = Rotation::None) const { return {fs, kTextColor, Weight::Regular, a, r}; }
  TextStyle tick(Anchor a) const { return {0.9 * fs, kTickColor, Weight::Regular, a}; }
  TextStyle legend(Anchor a = Anchor::Left) const { return {0.9 * fs, kTextColor, Weight::Regular, a}; }
};

double text_height(const Canvas& c, const TextStyle& s) { return c.text_box(0, 0, "Ag", s).height(); }
double text_width(const Canvas& c, std::string_view text, const TextStyle& s) {
  return text.empty() ? 0.0 : c.text_box(0, 0, text, s).width();
}

// The style with its font shrunk (to at most 60%) so that the text fits in max_width.
TextStyle fitted(const Canvas& c, std::string_view text, TextStyle s, double max_width) {
  const double w = text_width(c, text, s);
  if (w > max_width && w > 0) s.size *= std::max(0.6, max_width / w);
  return s;
}

constexpr double kTickLength = 4;

// The axes of one panel: grid lines, frame, tick marks and tick labels, axis labels.
void draw_axes(Canvas& c, const Theme& th, const PanelLayout& p, const Ticks& xt, const Ticks& yt,
               const std::string& x_label, const std::string& y_label, double y_label_x, bool vertical_grid) {
  const Rect& a = p.area;
  // Grid lines, one pixel wide, on whole pixels inside the area.
  auto row_of = [&](double py) { return std::clamp(std::floor(py), a.y0, a.y1 - 1); };
  auto col_of = [&](double px) { return std::clamp(std::floor(px), a.x0, a.x1 - 1); };
  for (const double v : yt.values) {
    const double r = row_of(p.to_py(v));
    c.rect({a.x0, r, a.x1, r + 1}, kGridColor);
  }
  if (vertical_grid)
    for (const double v : xt.values) {
      const double col = col_of(p.to_px(v));
      c.rect({col, a.y0, col + 1, a.y1}, kGridColor);
    }
  // The frame lies just outside the area, so that nothing drawn inside covers it.
  c.rect_outline({a.x0 - 1, a.y0 - 1, a.x1 + 1, a.y1 + 1}, kFrameColor);
  for (std::size_t i = 0; i < yt.values.size(); ++i) {
    const double r = row_of(p.to_py(yt.values[i]));
    c.rect({a.x0 - 1 - kTickLength, r, a.x0 - 1, r + 1}, kFrameColor);
    c.text(a.x0 - 1 - kTickLength - 4, r + 0.5, yt.labels[i], th.tick(Anchor::Right));
  }
  for (std::size_t i = 0; i < xt.values.size(); ++i) {
    const double col = col_of(p.to_px(xt.values[i]));
    c.rect({col, a.y1 + 1, col + 1, a.y1 + 1 + kTickLength}, kFrameColor);
    if (!xt.labels.empty()) c.text(col + 0.5, a.y1 + 1 + kTickLength + 3, xt.labels[i], th.tick(Anchor::Top));
  }
  const double tick_h = text_height(c, th.tick(Anchor::Top));
  if (!x_label.empty())
    c.text((a.x0 + a.x1) / 2, a.y1 + 1 + kTickLength + 3 + tick_h + 0.3 * th.pad(), x_label, th.label(Anchor::Top));
  if (!y_label.empty()) c.text(y_label_x, (a.y0 + a.y1) / 2, y_label, th.label(Anchor::Left, Rotation::Ccw90));
}

// A legend box: a swatch (line or square) and a label per entry.
struct LegendEntry {
  std::string label;
  Color color;
};

Rect legend_size(const Canvas& c, const Theme& th, const std::vector<LegendEntry>& entries) {
  const double row = std::round(text_height(c, th.legend()) * 1.15);
  double w = 0;
  for (const auto& e : entries) w = std::max(w, text_width(c, e.label, th.legend()));
  const double inner = 0.6 * th.pad();
  return {0, 0, std::round(2 * inner + 2 * th.fs + 0.5 * th.fs + w), std::round(2 * inner + row * entries.size())};
}

void draw_legend(Canvas& c, const Theme& th, const Rect& box, const std::vector<LegendEntry>& entries,
                 double line_width, bool markers) {
  c.rect(box, kWhite, 0.9);
  c.rect_outline(box, rgb(0xCCCCCC));
  const double row = std::round(text_height(c, th.legend()) * 1.15);
  const double inner = 0.6 * th.pad();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double cy = box.y0 + inner + row * (double(i) + 0.5);
    const double sx0 = box.x0 + inner, sx1 = sx0 + 2 * th.fs;
    c.line(sx0, cy, sx1, cy, entries[i].color, line_width);
    if (markers) c.circle((sx0 + sx1) / 2, cy, 1.6 * line_width, entries[i].color);
    c.text(sx1 + 0.5 * th.fs, cy, entries[i].label, th.legend(Anchor::Left));
  }
}

// min and max of the finite values; {NaN, NaN} when there are none.
struct Range {
  double lo = kNaN, hi = kNaN;
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::isnan(lo) ? v : std::min(lo, v);
    hi = std::isnan(hi) ? v : std::max(hi, v);
  }
  bool empty() const { return std::isnan(lo); }
};

// Widens a degenerate range and adds a margin (in log10 units on a log axis), at most to ±the largest double (data
// near ±1.8e308, whose hi − lo may overflow: the margin is hi·frac − lo·frac).
void pad_range(double& lo, double& hi, double frac, bool log) {
  constexpr double kMax = std::numeric_limits<double>::max();
  if (log) {
    double l0 = std::log10(lo), l1 = std::log10(hi);
    if (l1 - l0 < 1e-12) l0 -= 0.5, l1 += 0.5;
    const double m = (l1 - l0) * frac;
    lo = std::pow(10.0, l0 - m);
    hi = std::min(std::pow(10.0, l1 + m), kMax);
    return;
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(lo))) {
    const double d = std::abs(lo) > 0 ? 0.1 * std::abs(lo) : 1.0;
    lo = std::max(lo - d, -kMax), hi = std::min(hi + d, kMax);
    return;
  }
  const double m = hi * frac - lo * frac;
  lo = std::max(lo - m, -kMax), hi = std::min(hi + m, kMax);
}

}  // namespace

// ==== line chart ========================================================================================

Canvas render(const LineChart& spec, Layout* layout_out) {
  LIERE_ENSURE(!spec.panels.empty(), "line_chart: no panels (a LineChart needs at least one Panel with a Series)");
  LIERE_ENSURE(spec.columns >= 1, "line_chart: columns is " << spec.columns << ", must be ≥ 1");
  LIERE_ENSURE(spec.font_size > 0, "line_chart: font_size must be positive, got " << spec.font_size);
  const int P = int(spec.panels.size());
  const int columns = std::min(spec.columns, P);
  const int rows = (P + columns - 1) / columns;

  // ---- check the data and find each panel's ranges
  std::vector<PanelLayout> panels(P);
  std::vector<bool> integer_x(P, true);
  for (int p = 0; p < P; ++p) {
    const Panel& panel = spec.panels[p];
    const std::string where =
        "line_chart: panel " + std::to_string(p) + (panel.title.empty() ? "" : " ('" + panel.title + "')");
    LIERE_ENSURE(!panel.series.empty(), where << " has no series");
    Range xr, yr;
    for (std::size_t s = 0; s < panel.series.size(); ++s) {
      const Series& se = panel.series[s];
      const std::string name =
          where + ", series " + std::to_string(s) + (se.label.empty() ? "" : " ('" + se.label + "')");
      LIERE_ENSURE(!se.x.empty() || !se.y.empty(), name << " is empty (no points)");
      LIERE_ENSURE(se.x.size() == se.y.size(),
                   name << ": x has " << se.x.size() << " values but y has " << se.y.size());
      for (std::size_t i = 0; i < se.x.size(); ++i) {
        if (!std::isfinite(se.x[i]) || !std::isfinite(se.y[i]) || (panel.log_y && !(se.y[i] > 0))) continue;
        xr.add(se.x[i]);
        yr.add(se.y[i]);
        if (se.x[i] != std::round(se.x[i])) integer_x[p] = false;
      }
    }
    LIERE_ENSURE(!xr.empty(), where << " has no finite points" << (panel.log_y ? " (log_y needs y > 0)" : ""));
    PanelLayout& pl = panels[p];
    pl.log_y = panel.log_y;
    pl.x_min = xr.lo, pl.x_max = xr.hi;
    pad_range(pl.x_min, pl.x_max, 0.03, false);
    pl.y_min = yr.lo, pl.y_max = yr.hi;
    pad_range(pl.y_min, pl.y_max, 0.06, panel.log_y);
    if (panel.x_min) pl.x_min = *panel.x_min;
    if (panel.x_max) pl.x_max = *panel.x_max;
    if (panel.y_min) pl.y_min = *panel.y_min;
    if (panel.y_max) pl.y_max = *panel.y_max;
    LIERE_ENSURE(pl.x_max > pl.x_min, where << ": x range [" << pl.x_min << ", " << pl.x_max << "] is empty");
    LIERE_ENSURE(pl.y_max > pl.y_min, where << ": y range [" << pl.y_min << ", " << pl.y_max << "] is empty");
    LIERE_ENSURE(!panel.log_y || pl.y_min > 0, where << ": log_y needs y_min > 0, got " << pl.y_min);
  }

  // ---- layout: title, then a grid of equal panels with equal margins
  const Theme th{spec.font_size};
  const double pad = th.pad();
  const int width = spec.width;
  const Canvas probe(16, 16, kWhite, spec.fonts);  // measures text before the real canvas size is known
  const double title_h = spec.title.empty() ? 0 : text_height(probe, th.title());
  const double top = pad + (spec.title.empty() ? 0 : title_h + 0.6 * pad);
  const int height = spec.height > 0 ? spec.height : int(std::lround(top + 380 * rows));
  LIERE_ENSURE(width >= 200 && height >= 150,
               "line_chart: size " << width << "×" << height << " is too small (at least 200×150)");
  Canvas c(width, height, kWhite, spec.fonts);

  const double tick_h = text_height(c, th.tick(Anchor::Top));
  const double label_h = text_height(c, th.label(Anchor::Top));
  const double ptitle_h = text_height(c, th.panel_title());
  bool any_panel_title = false, any_x_label = false, any_y_label = false;
  for (const Panel& panel : spec.panels) {
    any_panel_title |= !panel.title.empty();
    any_x_label |= !panel.x_label.empty();
    any_y_label |= !panel.y_label.empty();
  }
  const double cell_w = (width - 0.5 * pad) / columns;
  const double cell_h = (height - top) / rows;
  const double margin_top = std::ceil(any_panel_title ? ptitle_h + 0.5 * pad : 0.5 * tick_h + 0.3 * pad);
  const double margin_bottom =
      std::ceil(1 + kTickLength + 3 + tick_h + (any_x_label ? 0.3 * pad + label_h : 0) + 0.8 * pad);
  const double area_h = std::floor(cell_h - margin_top - margin_bottom);
  LIERE_ENSURE(area_h >= 40, "line_chart: height " << height << " leaves no room for " << rows << " rows of panels");

  std::vector<Ticks> y_ticks(P);
  double tick_label_w = 0;
  for (int p = 0; p < P; ++p) {
    const int target = std::clamp(int(area_h / 50), 3, 10);
    y_ticks[p] = panels[p].log_y ? log_ticks(panels[p].y_min, panels[p].y_max, target)
                                 : nice_ticks(panels[p].y_min, panels[p].y_max, target);
    for (const auto& l : y_ticks[p].labels)
      tick_label_w = std::max(tick_label_w, text_width(c, l, th.tick(Anchor::Right)));
  }
  const double y_label_offset = 0.5 * pad;  // from the cell's left edge
  const double margin_left =
      std::ceil(y_label_offset + (any_y_label ? label_h + 0.5 * pad : 0) + tick_label_w + 4 + kTickLength + 1);
  const double margin_right = std::ceil(1.5 * pad);
  const double area_w = std::floor(cell_w - margin_left - margin_right);
  LIERE_ENSURE(area_w >= 40,
               "line_chart: width " << width << " leaves no room for " << columns << " columns of panels");

  Layout layout;
  layout.width = width;
  layout.height = height;
  if (!spec.title.empty())
    layout.title = c.text(width / 2.0, pad, spec.title, fitted(c, spec.title, th.title(), width - 2 * pad));

  for (int p = 0; p < P; ++p) {
    const Panel& panel = spec.panels[p];
    PanelLayout& pl = panels[p];
    const double cx = 0.25 * pad + (p % columns) * cell_w, cy = top + (p / columns) * cell_h;
    pl.area = {std::round(cx + margin_left), std::round(cy + margin_top), std::round(cx + margin_left) + area_w,
               std::round(cy + margin_top) + area_h};
    const Rect& a = pl.area;

    // x ticks: as many as fit without their labels touching.
    const double min_step = integer_x[p] ? 1.0 : 0.0;
    Ticks xt;
    for (int target = std::clamp(int(area_w / 90), 2, 10); target >= 1; --target) {
      xt = nice_ticks(pl.x_min, pl.x_max, target, min_step);
      double widest = 0;
      for (const auto& l : xt.labels) widest = std::max(widest, text_width(c, l, th.tick(Anchor::Top)));
      const double spacing = xt.values.size() > 1 ? pl.to_px(xt.values[1]) - pl.to_px(xt.values[0]) : area_w;
      if (widest + 0.8 * th.fs <= spacing) break;
    }
    draw_axes(c, th, pl, xt, y_ticks[p], panel.x_label, panel.y_label, cx + y_label_offset, true);
    if (!panel.title.empty()) c.text((a.x0 + a.x1) / 2, a.y0 - 0.4 * pad, panel.title, th.panel_title());

    // The series in pixel coordinates; a non-finite value (or y ≤ 0 on a log axis) breaks the line.
    std::vector<std::vector<Point>> lines(panel.series.size());
    std::vector<LegendEntry> entries;
    for (std::size_t s = 0; s < panel.series.size(); ++s) {
      const Series& se = panel.series[s];
      for (std::size_t i = 0; i < se.x.size(); ++i) {
        const bool ok = std::isfinite(se.x[i]) && std::isfinite(se.y[i]) && (!pl.log_y || se.y[i] > 0);
        lines[s].push_back(ok ? Point{pl.to_px(se.x[i]), pl.to_py(se.y[i])} : Point{kNaN, kNaN});
      }
      if (!se.label.empty()) entries.push_back({se.label, se.color.value_or(palette(s))});
    }
    c.set_clip(a);
    for (std::size_t s = 0; s < panel.series.size(); ++s) {
      const Color col = panel.series[s].color.value_or(palette(s));
      c.polyline(lines[s], col, spec.line_width);
      // A point between two gaps would vanish without a dot.
      for (std::size_t i = 0; i < lines[s].size(); ++i) {
        const bool isolated = std::isfinite(lines[s][i].x) && (i == 0 || !std::isfinite(lines[s][i - 1].x)) &&
                              (i + 1 == lines[s].size() || !std::isfinite(lines[s][i + 1].x));
        if (spec.markers || isolated) c.circle(lines[s][i].x, lines[s][i].y, 1.6 * spec.line_width, col);
      }
    }
    c.reset_clip();

    // The legend goes in the corner of the area that covers the fewest points of the lines.
    if (panel.legend && !entries.empty()) {
      const Rect size = legend_size(c, th, entries);
      const double inset = 0.6 * pad;
      const std::array<Point, 4> corners = {
          Point{a.x1 - inset - size.x1, a.y0 + inset}, Point{a.x0 + inset, a.y0 + inset},
          Point{a.x1 - inset - size.x1, a.y1 - inset - size.y1}, Point{a.x0 + inset, a.y1 - inset - size.y1}};
      std::size_t best = 0, best_hits = std::numeric_limits<std::size_t>::max();
      for (std::size_t k = 0; k < corners.size(); ++k) {
        const Rect box{corners[k].x, corners[k].y, corners[k].x + size.x1, corners[k].y + size.y1};
        std::size_t hits = 0;
        for (const auto& line : lines)
          for (std::size_t i = 0; i < line.size(); ++i) {
            const Point q0 = line[i], q1 = i + 1 < line.size() && std::isfinite(line[i + 1].x) ? line[i + 1] : q0;
            if (!std::isfinite(q0.x)) continue;
            const int n = 1 + int(std::hypot(q1.x - q0.x, q1.y - q0.y) / 4);  // a sample every ~4 pixels
            for (int j = 0; j < n; ++j) {
              const double t = double(j) / n;
              hits += box.contains(q0.x + t * (q1.x - q0.x), q0.y + t * (q1.y - q0.y));
            }
          }
        if (hits < best_hits) best = k, best_hits = hits;
      }
      const Rect box{std::round(corners[best].x), std::round(corners[best].y), std::round(corners[best].x) + size.x1,
                     std::round(corners[best].y) + size.y1};
      draw_legend(c, th, box, entries, spec.line_width, spec.markers);
      layout.legends.push_back(box);
    }
    layout.panels.push_back(pl);
  }
  if (layout_out) *layout_out = std::move(layout);
  return c;
}

Layout line_chart(const std::string& path, const LineChart& spec) {
  Layout layout;
  render(spec, &layout).save_png(path);
  return layout;
}

// ==== bar chart =========================================================================================

Canvas render(const BarChart& spec, Layout* layout_out) {
  const std::size_t G = spec.groups.size(), B = spec.bars.size();
  LIERE_ENSURE(G > 0, "bar_chart: no groups");
  LIERE_ENSURE(B > 0, "bar_chart: no bars (name them in BarChart::bars)");
  LIERE_ENSURE(spec.values.size() == G,
               "bar_chart: values has " << spec.values.size() << " rows but there are " << G << " groups");
  const bool has_err = !spec.lo.empty() || !spec.hi.empty();
  if (has_err)
    LIERE_ENSURE(spec.lo.size() == G && spec.hi.size() == G, "bar_chart: lo and hi must both have "
                                                                 << G << " rows (one per group), got " << spec.lo.size()
                                                                 << " and " << spec.hi.size());
  LIERE_ENSURE(spec.colors.empty() || spec.colors.size() >= B,
               "bar_chart: " << spec.colors.size() << " colours for " << B << " bars");
  LIERE_ENSURE(spec.font_size > 0, "bar_chart: font_size must be positive, got " << spec.font_size);
  Range data;
  for (std::size_t g = 0; g < G; ++g) {
    LIERE_ENSURE(spec.values[g].size() == B, "bar_chart: group " << g << " ('" << spec.groups[g] << "') has "
                                                                 << spec.values[g].size() << " values but there are "
                                                                 << B << " bars");
    if (has_err)
      LIERE_ENSURE(spec.lo[g].size() == B && spec.hi[g].size() == B,
                   "bar_chart: group " << g << " ('" << spec.groups[g] << "'): lo has " << spec.lo[g].size()
                                       << " and hi has " << spec.hi[g].size() << " values, expected " << B);
    for (std::size_t b = 0; b < B; ++b) {
      data.add(spec.values[g][b]);
      if (has_err && std::isfinite(spec.values[g][b])) {
        LIERE_ENSURE(!(spec.lo[g][b] > spec.hi[g][b]), "bar_chart: group '" << spec.groups[g] << "', bar '"
                                                                            << spec.bars[b] << "': lo " << spec.lo[g][b]
                                                                            << " > hi " << spec.hi[g][b]);
        data.add(spec.lo[g][b]);
        data.add(spec.hi[g][b]);
      }
    }
  }
  LIERE_ENSURE(!data.empty(), "bar_chart: no finite values");

  // ---- the y range: from 0 (or below, for negative data) to a tick above the data, unless fixed
  PanelLayout pl;
  pl.x_min = 0, pl.x_max = double(G);
  pl.y_min = spec.y_min.value_or(std::min(0.0, data.lo));
  if (spec.y_max) {
    pl.y_max = *spec.y_max;
  } else {
    // At most ±the largest double (data near ±1.8e308, whose data.hi − y_min may overflow).
    constexpr double kMax = std::numeric_limits<double>::max();
    const double top = std::min(data.hi + (0.05 * data.hi - 0.05 * pl.y_min), kMax);
    const double step = nice_ticks(pl.y_min, top > pl.y_min ? top : pl.y_min + 1, 6).step;
    pl.y_max = std::min(std::ceil(top / step - 1e-9) * step, kMax);
    if (!spec.y_min && pl.y_min < 0) pl.y_min = std::max(std::floor(pl.y_min / step + 1e-9) * step, -kMax);
  }
  LIERE_ENSURE(pl.y_max > pl.y_min, "bar_chart: y range [" << pl.y_min << ", " << pl.y_max << "] is empty");

  // ---- layout, top to bottom: title, legend rows, value-label room, plot area, group names, x label
  const Theme th{spec.font_size};
  const double pad = th.pad();
  LIERE_ENSURE(spec.width >= 200 && spec.height >= 150,
               "bar_chart: size " << spec.width << "×" << spec.height << " is too small (at least 200×150)");
  Canvas c(spec.width, spec.height, kWhite, spec.fonts);
  Layout layout;
  layout.width = spec.width;
  layout.height = spec.height;
  double y = pad;
  if (!spec.title.empty()) {
    layout.title = c.text(spec.width / 2.0, y, spec.title, fitted(c, spec.title, th.title(), spec.width - 2 * pad));
    y = layout.title.y1 + 0.6 * pad;
  }

  // Legend: entries in rows that fit the width, each row centred.
  const auto bar_color = [&](std::size_t b) { return spec.colors.empty() ? palette(b) : spec.colors[b]; };
  const double swatch = std::round(0.85 * th.fs), gap = 0.4 * th.fs, spacing = 1.4 * th.fs;
  const double legend_row_h = std::round(text_height(c, th.legend()) * 1.2);
  std::vector<std::vector<std::size_t>> legend_rows(1);
  std::vector<double> row_w(1, 0);
  for (std::size_t b = 0; b < B; ++b) {
    const double w = swatch + gap + text_width(c, spec.bars[b], th.legend());
    if (!legend_rows.back().empty() && row_w.back() + spacing + w > spec.width - 2 * pad) {
      legend_rows.emplace_back();
      row_w.push_back(0);
    }
    row_w.back() += (legend_rows.back().empty() ? 0 : spacing) + w;
    legend_rows.back().push_back(b);
  }
  Rect legend_box{spec.width / 2.0, y, spec.width / 2.0, y};
  for (std::size_t r = 0; r < legend_rows.size(); ++r) {
    double x = std::round((spec.width - row_w[r]) / 2);
    const double cy = y + legend_row_h * (r + 0.5);
    legend_box.x0 = std::min(legend_box.x0, x);
    for (const std::size_t b : legend_rows[r]) {
      c.rect({x, std::round(cy - swatch / 2), x + swatch, std::round(cy - swatch / 2) + swatch}, bar_color(b));
      const Rect t = c.text(x + swatch + gap, cy, spec.bars[b], th.legend(Anchor::Left));
      x = t.x1 + spacing;
    }
    legend_box.x1 = std::max(legend_box.x1, x - spacing);
  }
  y += legend_row_h * legend_rows.size();
  legend_box.y1 = y;
  layout.legends.push_back(legend_box);

  const double value_h = text_height(c, th.tick(Anchor::Bottom));
  const double tick_h = text_height(c, th.tick(Anchor::Top));
  const double label_h = text_height(c, th.label(Anchor::Top));
  const double group_h = text_height(c, th.label(Anchor::Top));
  const double area_y0 = std::ceil(y + 0.5 * pad + (spec.value_labels ? value_h + 4 : 0.5 * tick_h));
  const double area_y1 =
      std::floor(spec.height - pad - (spec.x_label.empty() ? 0 : label_h + 0.3 * pad) - group_h - kTickLength - 4);
  LIERE_ENSURE(area_y1 - area_y0 >= 40, "bar_chart: height " << spec.height << " leaves no room for the bars");
  // Temporary area to find the y ticks, whose labels set the left margin.
  pl.area = {0, area_y0, 1, area_y1};
  const Ticks yt = nice_ticks(pl.y_min, pl.y_max, std::clamp(int((area_y1 - area_y0) / 50), 3, 10));
  double tick_label_w = 0;
  for (const auto& l : yt.labels) tick_label_w = std::max(tick_label_w, text_width(c, l, th.tick(Anchor::Right)));
  const double y_label_x = 0.5 * pad;
  const double area_x0 =
      std::ceil(y_label_x + (spec.y_label.empty() ? 0 : label_h + 0.5 * pad) + tick_label_w + 4 + kTickLength + 1);
  const double area_x1 = std::floor(spec.width - 1.5 * pad);
  LIERE_ENSURE(area_x1 - area_x0 >= 40, "bar_chart: width " << spec.width << " leaves no room for the bars");
  pl.area = {area_x0, area_y0, area_x1, area_y1};
  const Rect& a = pl.area;

  Ticks xt;  // tick marks between groups, no labels
  for (std::size_t g = 1; g < G; ++g) xt.values.push_back(double(g));
  draw_axes(c, th, pl, xt, yt, "", spec.y_label, y_label_x, false);
  const double group_w = a.width() / G;
  for (std::size_t g = 0; g < G; ++g)
    c.text(a.x0 + (g + 0.5) * group_w, a.y1 + 1 + kTickLength + 3, spec.groups[g], th.label(Anchor::Top));
  if (!spec.x_label.empty())
    c.text((a.x0 + a.x1) / 2, a.y1 + 1 + kTickLength + 3 + group_h + 0.3 * pad, spec.x_label, th.label(Anchor::Top));

  // Bars: 80% of each group's width, a small gap between neighbours.
  const double bar_w = 0.8 * group_w / B;
  const double bar_gap = std::min(3.0, 0.08 * bar_w);
  const double base = std::clamp(0.0, pl.y_min, pl.y_max);
  layout.bars.assign(G * B, Rect{});
  // Value labels shrink to fit the bar width (and are left out when even 7 px text would not fit).
  TextStyle value_style = th.tick(Anchor::Bottom);
  double widest = 0;
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t b = 0; b < B; ++b)
      if (std::isfinite(spec.values[g][b]))
        widest = std::max(widest, text_width(c, format_fixed(spec.values[g][b], spec.decimals), value_style));
  if (widest > bar_w + bar_gap) value_style.size *= (bar_w + bar_gap) / widest;
  const bool draw_values = spec.value_labels && value_style.size >= 7;

  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t b = 0; b < B; ++b) {
      const double v = spec.values[g][b];
      if (!std::isfinite(v)) continue;
      const double x0 = a.x0 + g * group_w + 0.1 * group_w + b * bar_w;
      // Whole-pixel edges keep the bars crisp (the top moves by at most half a pixel).
      const Rect bar{std::round(x0 + bar_gap / 2), std::round(std::min(pl.to_py(v), pl.to_py(base))),
                     std::round(x0 + bar_w - bar_gap / 2), std::round(std::max(pl.to_py(v), pl.to_py(base)))};
      layout.bars[g * B + b] = bar;
      c.set_clip(a);
      c.rect(bar, bar_color(b));
      double label_y = pl.to_py(std::max(v, base));
      if (has_err && std::isfinite(spec.lo[g][b]) && std::isfinite(spec.hi[g][b])) {
        const double cx = (bar.x0 + bar.x1) / 2, cap = std::min(0.35 * bar_w, 0.8 * th.fs);
        const double ylo = pl.to_py(spec.lo[g][b]), yhi = pl.to_py(spec.hi[g][b]);
        const Color err = rgb(0x333333);
        c.line(cx, ylo, cx, yhi, err, 1.5);
        c.line(cx - cap / 2, ylo, cx + cap / 2, ylo, err, 1.5);
        c.line(cx - cap / 2, yhi, cx + cap / 2, yhi, err, 1.5);
        label_y = std::min(label_y, yhi);
      }
      c.reset_clip();
      if (draw_values)
        c.text((bar.x0 + bar.x1) / 2, std::max(label_y, a.y0) - 3, format_fixed(v, spec.decimals), value_style);
    }
  layout.panels.push_back(pl);
  if (layout_out) *layout_out = std::move(layout);
  return c;
}

Layout bar_chart(const std::string& path, const BarChart& spec) {
  Layout layout;
  render(spec, &layout).save_png(path);
  return layout;
}

// ==== heatmap grid ======================================================================================

Canvas render(const HeatmapGrid& spec, Layout* layout_out) {
  LIERE_ENSURE(spec.rows > 0 && spec.cols > 0,
               "heatmap_grid: rows and cols must be positive, got " << spec.rows << "×" << spec.cols);
  const std::size_t N = std::size_t(spec.rows) * spec.cols;
  LIERE_ENSURE(spec.cells.size() == N, "heatmap_grid: " << spec.cells.size() << " cells for a " << spec.rows << "×"
                                                        << spec.cols << " grid (expected " << N << ")");
  LIERE_ENSURE(spec.row_labels.empty() || int(spec.row_labels.size()) == spec.rows,
               "heatmap_grid: " << spec.row_labels.size() << " row labels for " << spec.rows << " rows");
  LIERE_ENSURE(spec.col_labels.empty() || int(spec.col_labels.size()) == spec.cols,
               "heatmap_grid: " << spec.col_labels.size() << " column labels for " << spec.cols << " columns");
  LIERE_ENSURE(spec.cell_px >= 8, "heatmap_grid: cell_px is " << spec.cell_px << ", must be ≥ 8");
  LIERE_ENSURE(spec.font_size > 0, "heatmap_grid: font_size must be positive, got " << spec.font_size);
  Range all;
  for (std::size_t i = 0; i < N; ++i) {
    const Heatmap& m = spec.cells[i];
    LIERE_ENSURE(m.h > 0 && m.w > 0, "heatmap_grid: cell " << i << " (row " << i / spec.cols << ", col "
                                                           << i % spec.cols << ") has size " << m.h << "×" << m.w);
    LIERE_ENSURE(m.values.size() == std::size_t(m.h) * m.w,
                 "heatmap_grid: cell " << i << " (row " << i / spec.cols << ", col " << i % spec.cols << ") is " << m.h
                                       << "×" << m.w << " but has " << m.values.size() << " values");
    LIERE_ENSURE(m.h <= spec.cell_px && m.w <= spec.cell_px,
                 "heatmap_grid: cell " << i << " is " << m.h << "×" << m.w << ", larger than cell_px " << spec.cell_px);
    for (const float v : m.values) all.add(v);
  }
  // The colour range: [0, 1] after per-cell normalisation, else fixed or all the data.
  double v_lo = 0, v_hi = 1;
  if (!spec.normalize_each) {
    v_lo = spec.v_min.value_or(all.empty() ? 0.0 : all.lo);
    v_hi = spec.v_max.value_or(all.empty() ? 1.0 : all.hi);
    if (!spec.v_min && !spec.v_max && !(v_hi > v_lo)) v_hi = v_lo + 1;
    LIERE_ENSURE(v_hi > v_lo, "heatmap_grid: colour range [" << v_lo << ", " << v_hi << "] is empty");
  }

  // ---- layout
  const Theme th{spec.font_size};
  const double pad = th.pad();
  const Canvas probe(16, 16, kWhite, spec.fonts);
  const double title_h = spec.title.empty() ? 0 : text_height(probe, th.title());
  const double label_h = text_height(probe, th.label(Anchor::Top));
  double row_label_w = 0;
  for (const auto& l : spec.row_labels)
    row_label_w = std::max(row_label_w, text_width(probe, l, th.label(Anchor::Right)));
  const int cell = spec.cell_px;
  const int gap = std::max(4, cell / 16);
  const double grid_x0 = std::ceil(pad + (row_label_w > 0 ? row_label_w + 0.8 * pad : 0));
  const double grid_y0 = std::ceil(pad + (spec.title.empty() ? 0 : title_h + 0.8 * pad) +
                                   (spec.col_labels.empty() ? 0 : label_h + 0.4 * pad));
  const double grid_w = spec.cols * cell + (spec.cols - 1) * gap;
  const double grid_h = spec.rows * cell + (spec.rows - 1) * gap;

  const Ticks ct = nice_ticks(v_lo, v_hi, std::clamp(int(grid_h / 40), 2, 6));
  double ct_w = 0;
  for (const auto& l : ct.labels) ct_w = std::max(ct_w, text_width(probe, l, th.tick(Anchor::Left)));
  const std::string cbar_label =
      !spec.colorbar_label.empty() ? spec.colorbar_label : (spec.normalize_each ? "normalised value" : "");
  const double cbar_x0 = grid_x0 + grid_w + std::round(1.2 * pad);
  const double cbar_w = std::round(std::max(12.0, 0.9 * th.fs));
  const double cbar_label_x = cbar_x0 + cbar_w + 1 + kTickLength + 4 + ct_w + 0.6 * pad;
  const double title_w = text_width(probe, spec.title, th.title());
  const int width =
      int(std::ceil(std::max(cbar_label_x + (cbar_label.empty() ? 0.5 * pad : label_h + pad), title_w + 2 * pad)));
  const int height = int(std::ceil(grid_y0 + grid_h + pad));

  Canvas c(width, height, kWhite, spec.fonts);
  Layout layout;
  layout.width = width;
  layout.height = height;
  if (!spec.title.empty())  // centred over the grid when it fits there
    layout.title = c.text(std::clamp(grid_x0 + grid_w / 2, pad + title_w / 2, width - pad - title_w / 2), pad,
                          spec.title, th.title());

  for (int r = 0; r < spec.rows; ++r) {
    const double y0 = grid_y0 + r * (cell + gap);
    if (!spec.row_labels.empty())
      c.text(grid_x0 - 0.8 * pad, y0 + cell / 2.0, spec.row_labels[r], th.label(Anchor::Right));
    for (int col = 0; col < spec.cols; ++col) {
      const double x0 = grid_x0 + col * (cell + gap);
      if (r == 0 && !spec.col_labels.empty())
        c.text(x0 + cell / 2.0, grid_y0 - 0.4 * pad, spec.col_labels[col], th.label(Anchor::Bottom));
      const Heatmap& m = spec.cells[std::size_t(r) * spec.cols + col];
      // Whole-pixel patches, the image centred in its cell.
      const int px = std::max(1, cell / std::max(m.h, m.w));
      const double ix0 = x0 + (cell - px * m.w) / 2, iy0 = y0 + (cell - px * m.h) / 2;
      double lo = v_lo, hi = v_hi;
      if (spec.normalize_each) {
        Range mr;
        for (const float v : m.values) mr.add(v);
        lo = mr.empty() ? 0.0 : mr.lo;
        hi = mr.empty() ? 1.0 : mr.hi;
      }
      for (int i = 0; i < m.h; ++i)
        for (int j = 0; j < m.w; ++j) {
          const double v = m.values[std::size_t(i) * m.w + j];
          // A constant heatmap maps to the bottom of the colour map.
          const double t = std::isfinite(v) ? (hi > lo ? (v - lo) / (hi - lo) : 0.0) : kNaN;
          c.rect({ix0 + j * px, iy0 + i * px, ix0 + (j + 1) * px, iy0 + (i + 1) * px}, colormap(spec.colormap, t));
        }
      layout.cells.push_back({ix0, iy0, ix0 + px * m.w, iy0 + px * m.h});
    }
  }

  // Colour bar: the gradient, a frame, ticks and labels on the right, the label rotated beside them.
  const Rect bar{cbar_x0, grid_y0, cbar_x0 + cbar_w, grid_y0 + grid_h};
  for (int row = int(bar.y0); row < int(bar.y1); ++row) {
    const double t = 1.0 - (row - bar.y0 + 0.5) / bar.height();
    c.rect({bar.x0, double(row), bar.x1, row + 1.0}, colormap(spec.colormap, t));
  }
  c.rect_outline({bar.x0 - 1, bar.y0 - 1, bar.x1 + 1, bar.y1 + 1}, kFrameColor);
  for (std::size_t i = 0; i < ct.values.size(); ++i) {
    const double row =
        std::clamp(std::floor(bar.y1 - (ct.values[i] - v_lo) / (v_hi - v_lo) * bar.height()), bar.y0, bar.y1 - 1);
    c.rect({bar.x1 + 1, row, bar.x1 + 1 + kTickLength, row + 1}, kFrameColor);
    c.text(bar.x1 + 1 + kTickLength + 4, row + 0.5, ct.labels[i], th.tick(Anchor::Left));
  }
  if (!cbar_label.empty())
    c.text(cbar_label_x, (bar.y0 + bar.y1) / 2, cbar_label, th.label(Anchor::Left, Rotation::Ccw90));
  layout.colorbar = bar;
  if (layout_out) *layout_out = std::move(layout);
  return c;
}

Layout heatmap_grid(const std::string& path, const HeatmapGrid& spec) {
  Layout layout;
  render(spec, &layout).save_png(path);
  return layout;
}

}  // namespace liere::plot
