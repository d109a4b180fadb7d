// data_tools/arrows.hpp — the synthetic spatial-reasoning task of the LieRE paper (§5.2, Fig. 5, Table 3).
//
// An image shows a 9×9 grid of cells. 8 arrows (up, down, left or right) and the 6 letters A, B, C, D, E
// and Y lie in 14 distinct cells. The Y is drawn rotated so that its base (the stem) points up, down, left
// or right, and the cell next to the Y in that direction holds an arrow: the label is that arrow's
// direction (4 classes). The other 7 arrows and the letters A–E are distractors.
//
//   ArrowLayout         what is where: integers only, drawn from one seed (make_arrow_layout);
//   ArrowRenderer       the layout as a one-channel image at any resolution (108, 168, 276 in the paper),
//                       drawn from vector geometry scaled to the resolution, never by resizing a bitmap;
//   render_arrows       the same through one shared renderer per resolution;
//   make_arrow_batch    a batch of (image, label) pairs for a trainer, sample i from arrow_sample_seed;
//   write_png_grey      a one-channel image as a PNG.
//
// Images: (res, res) bytes, row-major, row 0 at the top; 255 is the white background and 0 full ink (dark
// ink on white). Cell (row, col) covers the pixels [col·s, (col+1)·s) × [row·s, (row+1)·s), s = res / 9.
// docs/arrows.md gives the exact rules, the drawing and the measured speed.
#pragma once

#include <liere/core/config.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace liere::data {

// ---- layout ------------------------------------------------------------------------------------------

inline constexpr int kArrowGrid = 9;      // cells per side
inline constexpr int kArrowCount = 8;     // arrows per image
inline constexpr int kLetterCount = 6;    // letters per image
inline constexpr int kArrowClasses = 4;   // labels: the four directions
inline constexpr int kYIndex = 5;         // the Y is letters[5]
inline constexpr std::array<char, kLetterCount> kArrowLetters = {'A', 'B', 'C', 'D', 'E', 'Y'};

// On the image, y down: Up is towards row 0, Left towards column 0. The value is the class index.
enum class Direction : std::uint8_t { Up = 0, Down = 1, Left = 2, Right = 3 };

// "up", "down", "left", "right".
const char* direction_name(Direction d);

struct Cell {
  int row = 0, col = 0;
  friend bool operator==(const Cell&, const Cell&) = default;
};

// The neighbouring cell in direction d (may lie outside the grid).
constexpr Cell step(Cell c, Direction d) {
  switch (d) {
    case Direction::Up: return {c.row - 1, c.col};
    case Direction::Down: return {c.row + 1, c.col};
    case Direction::Left: return {c.row, c.col - 1};
    case Direction::Right: return {c.row, c.col + 1};
  }
  return c;
}

constexpr bool inside_grid(Cell c) {
  return c.row >= 0 && c.row < kArrowGrid && c.col >= 0 && c.col < kArrowGrid;
}

struct ArrowLayout {
  std::uint64_t seed = 0;                             // what make_arrow_layout was given
  std::array<Cell, kArrowCount> arrow_cells{};        // arrow_cells[0] is the arrow the Y's base points to
  std::array<Direction, kArrowCount> arrow_directions{};
  std::array<Cell, kLetterCount> letter_cells{};      // letter_cells[i] holds kArrowLetters[i]
  Direction y_base = Direction::Down;                 // where the Y's stem points (Down: an upright Y)
  Cell target{};                                      // step(y_cell(), y_base) == arrow_cells[0]
  Direction label = Direction::Up;                    // arrow_directions[0]

  Cell y_cell() const { return letter_cells[kYIndex]; }
  int label_index() const { return int(label); }
};

// The layout for one seed, the same bytes on every platform and standard library (std::mt19937_64 with
// integers drawn by rejection, never std::uniform_int_distribution). In order:
//   1. label ~ uniform over the 4 directions (so the classes are balanced by construction);
//   2. y_base ~ uniform over the 4 directions;
//   3. the Y's cell ~ uniform over the 72 cells whose neighbour towards y_base is inside the grid;
//      target = that neighbour, which holds arrow 0, pointing in the label's direction;
//   4. the 7 other arrows and the letters A–E take 12 distinct cells drawn uniformly from the 79 left
//      (a partial Fisher–Yates shuffle, in the order arrows 1–7, then A, B, C, D, E);
//   5. each of arrows 1–7 points in a uniform direction, independent of everything else.
ArrowLayout make_arrow_layout(std::uint64_t seed);

// The seed of sample `index` of a data set with seed `base_seed` (SplitMix64 of both), so that data sets
// with nearby base seeds do not share samples.
std::uint64_t arrow_sample_seed(std::uint64_t base_seed, std::uint64_t index);

// ---- rendering ---------------------------------------------------------------------------------------

struct ArrowStyle {
  bool grid_lines = false;  // light grey cell borders; off in the task's images, on for illustrations
  std::string font_path;    // a TrueType font for the letters; empty: LIERE_DEFAULT_FONT (DejaVu Sans Bold)
};

// Draws layouts at one resolution. The constructor reads the font once (shared by every renderer with the
// same font path) and draws every shape it will ever need — 4 arrows, A–E, and the Y in 4 rotations, each
// at every sub-pixel offset a cell can have at this resolution — into small coverage bitmaps; render()
// copies the background and blends 14 of them. A renderer is immutable after construction, so one object
// can serve any number of threads.
//
// Shapes are anti-aliased by their area coverage of each pixel (exact across a row, 32 sub-rows per pixel),
// from polygons in cell units: arrows are a shaft and a triangular head; letters are the font's outlines
// (quadratic curves flattened to 16 segments), scaled so that the largest side of the six letters' boxes
// is 0.72 of a cell and centred in the cell. Every shape stays more than 0.1 of a cell inside its cell.
class ArrowRenderer {
 public:
  // resolution: the image side in pixels, 27 … 4096 (108, 168, 276 in the paper).
  explicit ArrowRenderer(int resolution, ArrowStyle style = {});
  ~ArrowRenderer();
  ArrowRenderer(ArrowRenderer&&) noexcept;
  ArrowRenderer& operator=(ArrowRenderer&&) noexcept;

  int resolution() const { return resolution_; }
  double cell_size() const { return double(resolution_) / kArrowGrid; }
  const ArrowStyle& style() const { return style_; }

  // out: (resolution, resolution) bytes, every one written.
  void render(const ArrowLayout& layout, std::uint8_t* out) const;
  std::vector<std::uint8_t> render(const ArrowLayout& layout) const;

 private:
  struct Impl;
  int resolution_ = 0;
  ArrowStyle style_;
  std::unique_ptr<const Impl> impl_;
};

// render through a renderer shared by the whole process for this resolution (default style), built on
// first use; safe to call from several threads.
void render_arrows(const ArrowLayout& layout, int resolution, std::uint8_t* out);

// Samples first … first+count-1 of the data set `base_seed`: sample i is make_arrow_layout(
// arrow_sample_seed(base_seed, i)) drawn by `renderer`. Runs the samples on OpenMP threads; the result does
// not depend on the number of threads.
//   pixels: (count, res, res) bytes; labels: (count) class indices (Direction values).
void make_arrow_batch(const ArrowRenderer& renderer, std::uint64_t base_seed, std::uint64_t first, int count,
                      std::uint8_t* pixels, int* labels);

// ---- output ------------------------------------------------------------------------------------------

// A one-channel image, (height, width) bytes row-major, as a PNG, whole or not at all: written under
// "<path>.tmp" and renamed, so a program stopped in the middle leaves no half image under `path` (no fsync: made
// for many small files). Throws liere::Error naming the path and the system's reason when it cannot be written.
void write_png_grey(const std::string& path, const std::uint8_t* pixels, int width, int height);

}  // namespace liere::data
