// data_tools/image_folder.hpp — folders of JPEG/PNG images, one folder per class (the ImageNet / torchvision
// ImageFolder layout), decoded with stb_image, and the crops that train and evaluate on them.
//
// C channels, H height, W width, S the side of a square output. Every image is uint8 (C, H, W) row-major.
//
// Layout: root/<class>/**/<file>.jpg|.jpeg|.png (extensions in any case, sub-folders of a class folder included),
// or the same under root/train/ and root/val/. Classes are the class folders sorted by name (byte order, as
// Python's sorted()), label = position in that order; files are sorted by path inside each class. Entries whose
// name starts with '.' and files with other extensions are ignored, as torchvision does; a class folder without one
// image is an error naming it. Symbolic links are followed, but a folder or image reached a second time (a link loop,
// a second link to one folder, two names for one file) is an error naming both paths: each image counts once.
//
// Crops (the torchvision transforms; draws come from the caller's std::mt19937_64 through liere::unit_double and
// liere::below, so a seed gives the same crops with every standard library — not the same as torch's draws):
//   RandomResizedCrop(S, scale = (0.08, 1), ratio = (3/4, 4/3)): up to 10 tries of an area fraction uniform in
//     scale and an aspect ratio log-uniform in ratio, w = round(√(area·ratio)), h = round(√(area/ratio)) (round half
//     to even, as Python), accepted when 0 < w ≤ W and 0 < h ≤ H, at top uniform in [0, H−h] and left uniform in
//     [0, W−w]; after 10 failures the central crop of the whole image clamped to the ratio range.
//   Eval: the central square of side round(crop_fraction · min(H, W)) (0.875: the usual Resize(S/0.875) +
//     CenterCrop(S), up to rounding).
// Either window is then resized to S×S with an antialiased bilinear (triangle) filter whose support widens with the
// shrink factor (Pillow's and torchvision's antialias=True resampling), using only pixels inside the window.
#pragma once

#include <data_tools/image_set.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace liere::data {

// ---- decoding ----------------------------------------------------------------------------------------------------

struct Image {
  int channels = 0;  // C
  int height = 0;    // H
  int width = 0;     // W
  std::vector<std::uint8_t> pixels;  // (C, H, W)
};

// A JPEG or PNG file as `channels` channels (3: grey images are replicated, alpha is dropped; 1: luma). Errors name
// the file: missing, empty, not a JPEG or PNG (naming what it looks like: GIF, BMP, WebP, TIFF, …), or corrupt or
// truncated (with stb_image's reason).
Image read_image(const std::string& path, int channels = 3);

// The same from the bytes of such a file in memory; `name` stands for the file in errors. Images of more than
// kMaxImagePixels pixels are refused from their header, before any allocation; so are two kinds of corrupt file that
// the stb_image of Debian (2.27) does not check itself: a JPEG Huffman table of more than 256 codes (it writes past
// its tables) and a PNG chunk longer than the file (it allocates what the chunk declares). docs/testing.md.
// `max_pixels` lowers that limit (tests/fuzz/fuzz_image: a 4 KB file can declare and hold a 64-megapixel image whose
// decoding takes a second, which would make 10⁵ fuzz inputs take hours).
inline constexpr std::int64_t kMaxImagePixels = std::int64_t(1) << 26;  // 8192 × 8192
Image decode_image(std::span<const std::uint8_t> bytes, const std::string& name = "<memory>", int channels = 3,
                   std::int64_t max_pixels = kMaxImagePixels);

// ---- the folder -------------------------------------------------------------------------------------------------

struct ImageFolder {
  std::string dir;                       // the folder that holds the class folders
  std::vector<std::string> class_names;  // sorted
  std::vector<std::string> files;        // (N) paths, grouped by class in class order, sorted inside a class
  std::vector<int> labels;               // (N)

  int size() const { return int(files.size()); }
  int num_classes() const { return int(class_names.size()); }
};

// Scans root (split empty) or root/split (e.g. "train", "val"). With `classes` given (e.g. those of the training
// folder, for a validation folder), labels index into it, and a class folder not in it, or a class of it with no
// folder, is an error; else the classes are the folder's own.
ImageFolder scan_image_folder(const std::string& root, const std::string& split = "",
                              const std::vector<std::string>& classes = {});

// The files of `b` that are also files of `a`, in b's order: the same file by canonical path, whatever the names
// (e.g. a val/ folder that is a link to train/, or links from both into one pool of images). A training and a test
// folder share none, or the test accuracy counts images trained on.
std::vector<std::string> image_folder_overlap(const ImageFolder& a, const ImageFolder& b);

// ---- crops --------------------------------------------------------------------------------------------------

struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

// torchvision's RandomResizedCrop.get_params (the rules above).
CropBox random_resized_crop_box(int H, int W, std::mt19937_64& rng, double scale_lo = 0.08, double scale_hi = 1.0,
                                double ratio_lo = 3.0 / 4.0, double ratio_hi = 4.0 / 3.0);
// The central square of side round(crop_fraction · min(H, W)), crop_fraction in (0, 1].
CropBox center_crop_box(int H, int W, double crop_fraction = 0.875);

// The window `box` of src resized to out_h × out_w (antialiased bilinear, the rules above).
//   src: (C, H, W); dst: (C, out_h, out_w).
void resize_crop(const std::uint8_t* src, int C, int H, int W, const CropBox& box, std::uint8_t* dst, int out_h,
                 int out_w);

// RandomResizedCrop to S×S: random_resized_crop_box, then resize_crop. Returns the box.
CropBox random_resized_crop(const std::uint8_t* src, int C, int H, int W, std::uint8_t* dst, int S,
                            std::mt19937_64& rng);
// The evaluation crop to S×S: center_crop_box, then resize_crop. Returns the box.
CropBox center_crop_resize(const std::uint8_t* src, int C, int H, int W, std::uint8_t* dst, int S,
                           double crop_fraction = 0.875);

// ---- loading --------------------------------------------------------------------------------------------------

// Every image of the folder decoded and cropped with center_crop_resize to S×S, into memory (OpenMP threads; the
// result does not depend on their number): ImageSet (N, channels, S, S) with the folder's labels and class names.
ImageSet load_image_folder(const ImageFolder& folder, int S, double crop_fraction = 1.0, int channels = 3);

// Lazily, one image at a time (read_image each call), into dst (channels, S, S); return the label.
int load_image_train(const ImageFolder& folder, int i, int S, std::mt19937_64& rng, std::uint8_t* dst,
                     int channels = 3);
int load_image_eval(const ImageFolder& folder, int i, int S, std::uint8_t* dst, double crop_fraction = 0.875,
                    int channels = 3);

}  // namespace liere::data
