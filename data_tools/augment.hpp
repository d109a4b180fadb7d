// data_tools/augment.hpp — training-time image augmentation on uint8 images and the float normalisation
// that turns them into network input.
//
// C channels, H height, W width. Every image is uint8 (C, H, W) row-major, C = 1 (Fashion-MNIST) or 3 (CIFAR).
//
// RandAugment follows torchvision's transforms.RandAugment applied to a PIL image (the usual place in a
// torchvision pipeline, before ToTensor): the same 14 operations, the same magnitude tables, nearest
// interpolation and fill 0 for the geometric ones, and Pillow's arithmetic for the rest:
//   geometric  an output pixel (x, y) takes the input pixel floor(M · (x + ½, y + ½)) for the inverse affine
//              map M that torchvision hands to Pillow, or 0 outside the image;
//   enhance    Pillow's ImageEnhance: blend(degenerate, image, f) = degenerate + f·(image − degenerate) in float,
//              truncated and clipped to 0..255, with degenerate = black (Brightness), the greyscale image
//              (Color), its rounded mean grey (Contrast), the SMOOTH-filtered image (Sharpness);
//   point ops  Pillow's ImageOps lookup tables (posterize, solarize, autocontrast, equalize), per channel.
// All randomness comes from a caller's std::mt19937_64 through liere::below / liere::unit_double (core/rng.hpp), so
// a seed gives the same images on every standard library.
#pragma once

#include <data_tools/image_set.hpp>

#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace liere::data {

// ---- normalisation ---------------------------------------------------------------------------------------

// Per-channel mean and standard deviation of the training sets, pixel values scaled to [0, 1].
// CIFAR: the population statistics over all 50000 training images (the values torchvision's references and
// timm use; some code uses (0.2023, 0.1994, 0.2010) for the CIFAR-10 std, a mean of per-image stds).
// Fashion-MNIST: over its 60000 training images (tests/test_augment.cpp recomputes them when the data set is
// installed).
inline constexpr std::array<float, 3> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifar10Std = {0.2470f, 0.2435f, 0.2616f};
inline constexpr std::array<float, 3> kCifar100Mean = {0.5071f, 0.4865f, 0.4409f};
inline constexpr std::array<float, 3> kCifar100Std = {0.2673f, 0.2564f, 0.2762f};
inline constexpr std::array<float, 1> kFashionMnistMean = {0.2860f};
inline constexpr std::array<float, 1> kFashionMnistStd = {0.3530f};
// ImageNet's (torchvision's references, timm's IMAGENET_DEFAULT_*): for photos in general (train_cifar --data folder,
// train_ucf101 as VideoMAE).
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

// dst = (src / 255 − mean[c]) / stddev[c] for channel c; mean and stddev hold C values each.
void normalize(const std::uint8_t* src,  // (C, H, W)
               float* dst,               // (C, H, W)
               int C, int H, int W, std::span<const float> mean, std::span<const float> stddev);

// ---- crop and flip -------------------------------------------------------------------------------------

// The H×W window at (top, left) of the image zero-padded by `pad` on every side: dst(c, y, x) =
// src(c, y + top − pad, x + left − pad), or 0 outside src. top, left in [0, 2·pad]. src and dst must differ.
void crop_padded(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W, int pad, int top, int left);

// torchvision RandomCrop(size = (H, W), padding = pad): top, then left, uniform in [0, 2·pad].
void random_crop(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W, int pad, std::mt19937_64& rng);

// Mirrors every row in place.
void hflip(std::uint8_t* img, int C, int H, int W);

// Flips with probability p (one draw of liere::unit_double); returns whether it flipped.
bool random_hflip(std::uint8_t* img, int C, int H, int W, std::mt19937_64& rng, double p = 0.5);

// ---- the RandAugment operations, in place ---------------------------------------------------------------

// torchvision ShearX(m): out(x, y) = in(x + m·y, y) about the top-left corner (pixel centres, floor, fill 0).
void shear_x(std::uint8_t* img, int C, int H, int W, double m);
// torchvision ShearY(m): out(x, y) = in(x, y + m·x).
void shear_y(std::uint8_t* img, int C, int H, int W, double m);
// out(x, y) = in(x − dx, y − dy): the content moves right by dx and down by dy.
void translate(std::uint8_t* img, int C, int H, int W, int dx, int dy);
// PIL Image.rotate(degrees): counter-clockwise as displayed, about (W/2, H/2), same size, fill 0.
void rotate(std::uint8_t* img, int C, int H, int W, double degrees);

// The PIL "L" grey of an RGB image, Pillow's fixed-point form of L = (299 R + 587 G + 114 B) / 1000 rounded
// to nearest: (19595 R + 38470 G + 7471 B + 2^15) >> 16. C = 1 copies. dst: (H, W).
void grayscale(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W);

// Pillow ImageEnhance with factor f (1 = unchanged).
void adjust_brightness(std::uint8_t* img, int C, int H, int W, double factor);
void adjust_color(std::uint8_t* img, int C, int H, int W, double factor);  // identity for C = 1
void adjust_contrast(std::uint8_t* img, int C, int H, int W, double factor);
void adjust_sharpness(std::uint8_t* img, int C, int H, int W, double factor);

// Pillow ImageOps: keep the top `bits` bits (0..8); invert every value ≥ threshold; stretch each channel's
// [min, max] to [0, 255]; equalise each channel's histogram.
void posterize(std::uint8_t* img, int C, int H, int W, int bits);
void solarize(std::uint8_t* img, int C, int H, int W, double threshold);
void autocontrast(std::uint8_t* img, int C, int H, int W);
void equalize(std::uint8_t* img, int C, int H, int W);

// ---- RandAugment --------------------------------------------------------------------------------------

// torchvision's RandAugment operations, in its order (the order picks the op from a random index).
enum class AugmentOp : int {
  Identity,
  ShearX,
  ShearY,
  TranslateX,
  TranslateY,
  Rotate,
  Brightness,
  Color,
  Contrast,
  Sharpness,
  Posterize,
  Solarize,
  AutoContrast,
  Equalize,
};
inline constexpr int kNumAugmentOps = 14;

const char* op_name(AugmentOp op);

// The magnitude of `op` at bin `bin` of `num_bins` for an H×W image, from torchvision's float32 tables:
// ShearX/Y linspace(0, 0.3), TranslateX/Y linspace(0, 150/331 · W or H), Rotate linspace(0, 30) degrees,
// Brightness/Color/Contrast/Sharpness linspace(0, 0.9), Posterize 8 − round(bin / ((num_bins − 1) / 4)),
// Solarize linspace(255, 0); 0 for Identity, AutoContrast and Equalize. `is_signed`: whether RandAugment
// negates it with probability ½.
struct OpMagnitude {
  double magnitude;
  bool is_signed;
};
OpMagnitude op_magnitude(AugmentOp op, int bin, int num_bins, int H, int W);

// torchvision's _apply_op: ShearX → shear_x(m), TranslateX → translate(int(m), 0), Rotate → rotate(m),
// Brightness … Sharpness → adjust_*(1 + m), Posterize → posterize(int(m)), Solarize → solarize(m), …
void apply_op(std::uint8_t* img, int C, int H, int W, AugmentOp op, double magnitude);

struct AppliedOp {
  AugmentOp op;
  double magnitude;  // signed, as passed to apply_op
};

// RandAugment(num_ops, magnitude, num_magnitude_bins): num_ops times, an op uniform over the 14 (one
// below(rng, 14)), then for a signed op one below(rng, 2) that negates the magnitude when 1.
// Returns the ops it applied, in order.
struct RandAugment {
  int num_ops = 2;
  int magnitude = 14;
  int num_magnitude_bins = 31;

  std::vector<AppliedOp> operator()(std::uint8_t* img, int C, int H, int W, std::mt19937_64& rng) const;
};

}  // namespace liere::data
