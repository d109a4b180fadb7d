// tests/test_augment.cpp — crop, flip, every RandAugment operation on hand-made images with hand-computed
// results, Pillow-exact results on the committed CIFAR-100 record, RandAugment's determinism, normalisation.
//
// C channels, H height, W width; images uint8 (C, H, W).
#include <data_tools/augment.hpp>
#include <data_tools/cifar.hpp>
#include <data_tools/idx.hpp>

#include <catch2/catch.hpp>

#include "skip.hpp"

#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <numeric>
#include <set>
#include <span>
#include <vector>

using namespace liere::data;
using Catch::Contains;
using Img = std::vector<std::uint8_t>;

namespace {

// A 1×H×W image from rows.
Img grey(std::initializer_list<std::initializer_list<int>> rows) {
  Img img;
  for (const auto& r : rows)
    for (int v : r) img.push_back(std::uint8_t(v));
  return img;
}

Img random_image(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Img img(size);
  for (auto& v : img) v = std::uint8_t(liere::below(rng, 256));
  return img;
}

Img cifar100_record0() {
  const ImageSet set = read_cifar100_file(LIERE_TEST_DATA_DIR "/cifar100-train-record0.bin");
  return Img(set.image(0), set.image(0) + set.image_size());
}

}  // namespace

// ---- normalize -------------------------------------------------------------------------------------------

TEST_CASE("normalize: (x / 255 - mean) / std per channel", "[augment][normalize]") {
  const int C = 3, H = 4, W = 5;
  const Img img = random_image(C * H * W, 1);
  std::vector<float> out(img.size());
  normalize(img.data(), out.data(), C, H, W, kCifar10Mean, kCifar10Std);
  for (int c = 0; c < C; ++c)
    for (int i = 0; i < H * W; ++i) {
      const double x = img[c * H * W + i];
      const double expected = (x / 255.0 - kCifar10Mean[c]) / kCifar10Std[c];
      REQUIRE(out[c * H * W + i] == Approx(expected).epsilon(1e-6).margin(1e-6));  // float rounding
    }
  std::vector<float> grey_out(H * W);
  normalize(img.data(), grey_out.data(), 1, H, W, kFashionMnistMean, kFashionMnistStd);
  CHECK(grey_out[0] == Approx((img[0] / 255.0 - 0.2860) / 0.3530).epsilon(1e-6));

  CHECK_THROWS_WITH(normalize(img.data(), out.data(), C, H, W, kFashionMnistMean, kFashionMnistStd),
                    Contains("expected 3 means and stds, got 1 and 1"));
  const std::array<float, 1> zero = {0.0f};
  CHECK_THROWS_WITH(normalize(img.data(), grey_out.data(), 1, H, W, kFashionMnistMean, zero),
                    Contains("must be positive"));
}

TEST_CASE("normalize: the Fashion-MNIST constants are the training set's statistics", "[augment][normalize][real][needs-fashion-mnist]") {
  std::error_code ec;
  if (!std::filesystem::is_directory(kFashionMnistSystemDir, ec))
    LIERE_SKIP(kFashionMnistSystemDir << " not found (Debian package dataset-fashion-mnist)");
  const ImageSet train = read_fashion_mnist(kFashionMnistSystemDir, true);
  double sum = 0, sum2 = 0;
  for (std::uint8_t v : train.pixels) {
    const double x = v / 255.0;
    sum += x;
    sum2 += x * x;
  }
  const double n = double(train.pixels.size());
  const double mean = sum / n, stddev = std::sqrt(sum2 / n - mean * mean);
  CHECK(kFashionMnistMean[0] == Approx(mean).margin(5e-5));  // constants given to 4 decimals
  CHECK(kFashionMnistStd[0] == Approx(stddev).margin(5e-5));
}

// ---- crop and flip -------------------------------------------------------------------------------------

TEST_CASE("crop with padding keeps the size, shifts the content and fills with zeros", "[augment][crop]") {
  const int C = 2, H = 6, W = 5, pad = 4;
  Img src(C * H * W);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint8_t(1 + i);  // no zeros in the image
  Img dst(src.size(), 77);

  crop_padded(src.data(), dst.data(), C, H, W, pad, pad, pad);  // the centre window: the image itself
  CHECK(dst == src);

  // top = 1, left = 6: dst(c, y, x) = src(c, y − 3, x + 2), zero outside.
  crop_padded(src.data(), dst.data(), C, H, W, pad, 1, 6);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const int ys = y - 3, xs = x + 2;
        const int expected = (ys >= 0 && ys < H && xs < W) ? src[(c * H + ys) * W + xs] : 0;
        REQUIRE(dst[(c * H + y) * W + x] == expected);
      }

  // The corner window (0, 0) of a 4-padded 32×32 image: 4 zero rows and columns, then the image.
  const Img big = random_image(3 * 32 * 32, 3);
  Img out(big.size());
  crop_padded(big.data(), out.data(), 3, 32, 32, 4, 0, 0);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        REQUIRE(out[(c * 32 + y) * 32 + x] == ((y < 4 || x < 4) ? 0 : big[(c * 32 + y - 4) * 32 + x - 4]));

  CHECK_THROWS_WITH(crop_padded(src.data(), dst.data(), C, H, W, pad, 9, 0), Contains("2·pad = 8"));
}

TEST_CASE("random_crop: one of the (2·pad + 1)² windows, fixed by the seed", "[augment][crop]") {
  const int C = 1, H = 8, W = 8, pad = 4;
  Img src(C * H * W);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint8_t(1 + i);
  std::mt19937_64 rng(11), again(11);
  std::set<std::pair<int, int>> seen;
  Img dst(src.size()), dst2(src.size()), window(src.size());
  for (int k = 0; k < 2000; ++k) {
    random_crop(src.data(), dst.data(), C, H, W, pad, rng);
    random_crop(src.data(), dst2.data(), C, H, W, pad, again);
    REQUIRE(dst == dst2);
    int found = 0;
    for (int top = 0; top <= 2 * pad; ++top)
      for (int left = 0; left <= 2 * pad; ++left) {
        crop_padded(src.data(), window.data(), C, H, W, pad, top, left);
        if (window == dst) ++found, seen.insert({top, left});
      }
    REQUIRE(found == 1);  // every window of this image is different
  }
  CHECK(seen.size() == 81u);  // all windows occur (each has probability 1/81 per draw)
}

TEST_CASE("hflip: mirrors each row; twice is the identity", "[augment][flip]") {
  Img img = grey({{1, 2, 3}, {4, 5, 6}});
  hflip(img.data(), 1, 2, 3);
  CHECK(img == grey({{3, 2, 1}, {6, 5, 4}}));
  const Img rgb = random_image(3 * 7 * 9, 5);
  Img twice = rgb;
  hflip(twice.data(), 3, 7, 9);
  CHECK(twice != rgb);
  hflip(twice.data(), 3, 7, 9);
  CHECK(twice == rgb);

  std::mt19937_64 rng(3);
  Img x = rgb;
  CHECK_FALSE(random_hflip(x.data(), 3, 7, 9, rng, 0.0));
  CHECK(random_hflip(x.data(), 3, 7, 9, rng, 1.0));
  int flips = 0;
  for (int k = 0; k < 4000; ++k) flips += random_hflip(x.data(), 3, 7, 9, rng);
  CHECK(std::abs(flips - 2000) < 160);  // 5 standard deviations (σ ≈ 32)
}

// ---- point and enhance operations, hand-computed ------------------------------------------------------------

TEST_CASE("solarize inverts every value >= threshold", "[augment][ops]") {
  Img img = grey({{0, 135, 136, 200, 255}});
  solarize(img.data(), 1, 1, 5, 136.0);
  CHECK(img == grey({{0, 135, 119, 55, 0}}));
  Img none = grey({{0, 255}});
  solarize(none.data(), 1, 1, 2, 256.0);  // bin 0 of the table is 255: only 255 → 0; above it nothing changes
  CHECK(none == grey({{0, 255}}));
}

TEST_CASE("posterize keeps the top bits", "[augment][ops]") {
  Img img = grey({{183, 0xAB, 255, 3}});
  posterize(img.data(), 1, 1, 4, 6);  // mask 0xFC
  CHECK(img == grey({{180, 0xA8, 252, 0}}));
  img = grey({{0xAB, 0x0F}});
  posterize(img.data(), 1, 1, 2, 4);
  CHECK(img == grey({{0xA0, 0x00}}));
  img = grey({{0xAB}});
  posterize(img.data(), 1, 1, 1, 8);
  CHECK(img[0] == 0xAB);
  CHECK_THROWS_WITH(posterize(img.data(), 1, 1, 1, 9), Contains("bits must be in 0..8"));
}

TEST_CASE("equalize: Pillow's per-channel histogram equalisation", "[augment][ops]") {
  // A 2-level 32×32 channel, 512 pixels each at 50 and 200: step = 512 // 255 = 2, lut[50] = (2 // 2) // 2 = 0,
  // lut[200] = (1 + 512) // 2 = 256 → clipped to 255.
  const int H = 32, W = 32, n = H * W;
  Img img(2 * n);
  for (int i = 0; i < n; ++i) img[i] = i < n / 2 ? 50 : 200;
  // Channel 1: 512 at 10, 256 at 20, 256 at 30: step = 768 // 255 = 3, lut = 1 // 3 = 0, 513 // 3 = 171,
  // 769 // 3 = 256 → 255.
  for (int i = 0; i < n; ++i) img[n + i] = i < 512 ? 10 : i < 768 ? 20 : 30;
  Img out = img;
  equalize(out.data(), 2, H, W);
  for (int i = 0; i < n; ++i) {
    REQUIRE(out[i] == (i < n / 2 ? 0 : 255));
    REQUIRE(out[n + i] == (i < 512 ? 0 : i < 768 ? 171 : 255));
  }
  // Fewer than 255 pixels below the top value: step 0, unchanged; a constant image: unchanged.
  Img small = grey({{10, 20}, {30, 40}});
  equalize(small.data(), 1, 2, 2);
  CHECK(small == grey({{10, 20}, {30, 40}}));
  Img flat(n, 99);
  equalize(flat.data(), 1, H, W);
  CHECK(flat == Img(n, 99));
}

TEST_CASE("autocontrast stretches each channel's [min, max] to [0, 255]", "[augment][ops]") {
  // Channel 0 spans [10, 61]: scale 255 / 51 = 5, offset −50. Channel 1 is constant: unchanged.
  Img img = grey({{10, 30, 61, 11}, {40, 40, 40, 40}});
  autocontrast(img.data(), 2, 1, 4);
  CHECK(img == grey({{0, 100, 255, 5}, {40, 40, 40, 40}}));
}

TEST_CASE("brightness blends with black: truncate, clip", "[augment][ops]") {
  Img img = grey({{100, 201, 0, 255}});
  adjust_brightness(img.data(), 1, 1, 4, 0.5);
  CHECK(img == grey({{50, 100, 0, 127}}));  // 100.5 → 100, 127.5 → 127
  img = grey({{100, 201, 0, 101}});
  adjust_brightness(img.data(), 1, 1, 4, 1.5);
  CHECK(img == grey({{150, 255, 0, 151}}));  // 301.5 clipped, 151.5 → 151
  img = grey({{100}});
  // Pillow multiplies in float: 0.58f = 0.579999983, and 100 · 0.579999983 = 57.9999983 rounds to the float 58.0
  // (floats near 58 are 3.8e-6 apart), so 58, where double arithmetic would truncate to 57.
  adjust_brightness(img.data(), 1, 1, 1, 0.58);
  CHECK(img[0] == 58);
}

TEST_CASE("color blends with the PIL greyscale; identity on one channel", "[augment][ops]") {
  // Pixel 0 is pure red: L = (19595·255 + 2^15) >> 16 = 76 (= 255·299/1000 = 76.2 rounded). Factor ½:
  // R = 76 + ½·179 = 165.5 → 165, G = B = 76 − 38 = 38. Pixel 1 is grey (90, 90, 90): unchanged.
  Img rgb = {255, 90, 0, 90, 0, 90};  // (3, 1, 2)
  Img l(2);
  grayscale(rgb.data(), l.data(), 3, 1, 2);
  CHECK(l == Img{76, 90});
  adjust_color(rgb.data(), 3, 1, 2, 0.5);
  CHECK(rgb == Img{165, 90, 38, 90, 38, 90});

  Img g = grey({{0, 100, 255}});
  for (double f : {0.0, 0.58, 1.42}) {
    adjust_color(g.data(), 1, 1, 3, f);
    CHECK(g == grey({{0, 100, 255}}));
  }
}

TEST_CASE("contrast blends with the rounded mean grey", "[augment][ops]") {
  Img img = grey({{0, 100, 200, 100}});  // mean 100
  adjust_contrast(img.data(), 1, 1, 4, 1.5);
  CHECK(img == grey({{0, 100, 250, 100}}));  // −50 clipped
  img = grey({{0, 100, 200, 101}});          // mean 100.25 → 100
  adjust_contrast(img.data(), 1, 1, 4, 0.0);
  CHECK(img == Img(4, 100));
  // RGB: the mean is over the greyscale image, the same for every channel. Red (255, 0, 0) → L 76, black → 0:
  // mean 38. Factor 0 gives 38 everywhere.
  Img rgb = {255, 0, 0, 0, 0, 0};
  adjust_contrast(rgb.data(), 3, 1, 2, 0.0);
  CHECK(rgb == Img(6, 38));
}

TEST_CASE("sharpness blends with Pillow's SMOOTH filter, border kept", "[augment][ops]") {
  // 130 at (1, 1), 90 on the border at (3, 0), zeros elsewhere. SMOOTH = (1 1 1; 1 5 1; 1 1 1) / 13 rounded:
  // (1, 1): 5·130 / 13 = 50; (1, 2), (2, 2): 130 / 13 = 10; (2, 1): (130 + 90) / 13 = 16.9 → 17; the border keeps
  // its values.
  const Img img = grey({{0, 0, 0, 0}, {0, 130, 0, 0}, {0, 0, 0, 0}, {90, 0, 0, 0}});
  Img smooth = img;
  adjust_sharpness(smooth.data(), 1, 4, 4, 0.0);
  CHECK(smooth == grey({{0, 0, 0, 0}, {0, 50, 10, 0}, {0, 17, 10, 0}, {90, 0, 0, 0}}));
  // Factor 2: 50 + 2·80 = 210, 10 − 20 → 0, 17 − 34 → 0.
  Img sharp = img;
  adjust_sharpness(sharp.data(), 1, 4, 4, 2.0);
  CHECK(sharp == grey({{0, 0, 0, 0}, {0, 210, 0, 0}, {0, 0, 0, 0}, {90, 0, 0, 0}}));
}

// ---- geometric operations ---------------------------------------------------------------------------------

TEST_CASE("shear_x / shear_y move row y by m·(y + ½) (column x by m·(x + ½)), nearest, fill 0", "[augment][ops]") {
  // m = ½: output (x, y) samples x + ½ + ½(y + ½) → floor: shifts 0, 1, 1, 2 to the left for rows 0..3.
  const Img img = grey({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}});
  Img sx = img;
  shear_x(sx.data(), 1, 4, 4, 0.5);
  CHECK(sx == grey({{1, 2, 3, 4}, {6, 7, 8, 0}, {10, 11, 12, 0}, {15, 16, 0, 0}}));
  // m = −½: x + ½ − ½(y + ½) → shifts 0, 1, 1, 2 to the right.
  sx = img;
  shear_x(sx.data(), 1, 4, 4, -0.5);
  CHECK(sx == grey({{1, 2, 3, 4}, {0, 5, 6, 7}, {0, 9, 10, 11}, {0, 0, 13, 14}}));
  // shear_y with m = ½ moves columns 0..3 up by 0, 1, 1, 2; it is shear_x conjugated by the transpose.
  Img sy = img;
  shear_y(sy.data(), 1, 4, 4, 0.5);
  CHECK(sy == grey({{1, 6, 7, 12}, {5, 10, 11, 16}, {9, 14, 15, 0}, {13, 0, 0, 0}}));
  const auto transpose = [](const Img& a) {
    Img t(16);
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) t[x * 4 + y] = a[y * 4 + x];
    return t;
  };
  Img t = transpose(img);
  shear_x(t.data(), 1, 4, 4, 0.5);
  CHECK(transpose(t) == sy);
}

TEST_CASE("translate moves the content by (dx, dy) with zero fill", "[augment][ops]") {
  Img img = grey({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  translate(img.data(), 1, 3, 3, 1, -1);
  CHECK(img == grey({{0, 4, 5}, {0, 7, 8}, {0, 0, 0}}));
}

TEST_CASE("rotate by 90°, 180°, 270° matches the manual rotation", "[augment][ops]") {
  for (int n : {4, 5, 32}) {
    const Img img = random_image(3 * n * n, 100 + n);
    Img r90 = img, r270 = img, rm90 = img, r180 = img;
    rotate(r90.data(), 3, n, n, 90.0);
    rotate(r270.data(), 3, n, n, 270.0);
    rotate(rm90.data(), 3, n, n, -90.0);
    rotate(r180.data(), 3, n, n, 180.0);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < n; ++y)
        for (int x = 0; x < n; ++x) {
          const auto at = [&](int yy, int xx) { return img[(c * n + yy) * n + xx]; };
          const int i = (c * n + y) * n + x;
          // Counter-clockwise on screen: the top-right corner goes to the top-left.
          REQUIRE(r90[i] == at(x, n - 1 - y));
          REQUIRE(r270[i] == at(n - 1 - x, y));
          REQUIRE(rm90[i] == r270[i]);
          REQUIRE(r180[i] == at(n - 1 - y, n - 1 - x));
        }
  }
  // 180° of a non-square image.
  Img rect = grey({{1, 2, 3}, {4, 5, 6}});
  rotate(rect.data(), 1, 2, 3, 180.0);
  CHECK(rect == grey({{6, 5, 4}, {3, 2, 1}}));
}

TEST_CASE("rotate by 14°: every pixel comes from the nearest source pixel, to within one", "[augment][ops]") {
  // Pixel values encode their position (16 × 16 = 256 values, 0 only at (0, 0) which stays inside).
  const int n = 16;
  Img img(n * n);
  std::iota(img.begin(), img.end(), 0);
  Img out = img;
  rotate(out.data(), 1, n, n, 14.0);
  const double th = 14.0 * std::numbers::pi / 180.0, c = n / 2.0;
  int inside = 0;
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) {
      // The exact inverse map of a counter-clockwise rotation (y down) at the pixel centre.
      const double u = x + 0.5 - c, v = y + 0.5 - c;
      const double xs = std::cos(th) * u - std::sin(th) * v + c, ys = std::sin(th) * u + std::cos(th) * v + c;
      const int value = out[y * n + x];
      if (xs < 0 || xs >= n || ys < 0 || ys >= n) {
        CHECK((value == 0 || std::min({xs, ys, n - xs, n - ys}) > -0.01));  // outside: fill 0
        continue;
      }
      ++inside;
      CHECK(std::abs(value % n - std::floor(xs)) <= 1);
      CHECK(std::abs(value / n - std::floor(ys)) <= 1);
    }
  CHECK(inside > 200);
}

// ---- RandAugment --------------------------------------------------------------------------------------

TEST_CASE("op_magnitude: torchvision's tables (31 bins)", "[augment][randaugment]") {
  // Bin 14 of 31, as torchvision's float32 linspace gives them (0.3/30·14 etc. in float32).
  const auto m = [](AugmentOp op, int bin = 14) { return op_magnitude(op, bin, 31, 32, 32); };
  CHECK(m(AugmentOp::ShearX).magnitude == double(0.14000001549720764));
  CHECK(m(AugmentOp::ShearY).is_signed);
  CHECK(m(AugmentOp::TranslateX).magnitude == Approx(150.0 / 331.0 * 32 * 14 / 30).epsilon(1e-6));
  CHECK(op_magnitude(AugmentOp::TranslateY, 14, 31, 28, 32).magnitude ==
        Approx(150.0 / 331.0 * 28 * 14 / 30).epsilon(1e-6));  // H = 28 for TranslateY
  CHECK(m(AugmentOp::Rotate).magnitude == 14.0);
  for (auto op : {AugmentOp::Brightness, AugmentOp::Color, AugmentOp::Contrast, AugmentOp::Sharpness}) {
    CHECK(m(op).magnitude == double(0.41999998688697815));
    CHECK(m(op).is_signed);
  }
  CHECK(m(AugmentOp::Solarize).magnitude == 136.0);
  CHECK_FALSE(m(AugmentOp::Solarize).is_signed);
  CHECK(m(AugmentOp::Solarize, 0).magnitude == 255.0);
  CHECK(m(AugmentOp::Solarize, 30).magnitude == 0.0);
  // Posterize: 8 − round(bin / 7.5), half to even.
  const int posterize[31] = {8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6,
                             6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4};
  for (int b = 0; b < 31; ++b) CHECK(m(AugmentOp::Posterize, b).magnitude == posterize[b]);
  CHECK_FALSE(m(AugmentOp::Posterize).is_signed);
  for (auto op : {AugmentOp::Identity, AugmentOp::AutoContrast, AugmentOp::Equalize})
    CHECK((m(op).magnitude == 0.0 && !m(op).is_signed));
  CHECK_THROWS_WITH(op_magnitude(AugmentOp::Rotate, 31, 31, 32, 32), Contains("bin 31 of 31"));
}

TEST_CASE("apply_op: torchvision's magnitude → operation mapping", "[augment][randaugment]") {
  const Img img = random_image(3 * 8 * 8, 9);
  const auto same = [&](AugmentOp op, double m, auto&& direct) {
    Img a = img, b = img;
    apply_op(a.data(), 3, 8, 8, op, m);
    direct(b.data());
    return a == b;
  };
  CHECK(same(AugmentOp::TranslateX, -3.77, [](std::uint8_t* p) { translate(p, 3, 8, 8, -3, 0); }));  // int(): toward 0
  CHECK(same(AugmentOp::TranslateY, 2.9, [](std::uint8_t* p) { translate(p, 3, 8, 8, 0, 2); }));
  CHECK(same(AugmentOp::Brightness, -0.42, [](std::uint8_t* p) { adjust_brightness(p, 3, 8, 8, 0.58); }));
  CHECK(same(AugmentOp::Posterize, 6.0, [](std::uint8_t* p) { posterize(p, 3, 8, 8, 6); }));
  CHECK(same(AugmentOp::Identity, 0.0, [](std::uint8_t*) {}));
  CHECK(std::string(op_name(AugmentOp::AutoContrast)) == "AutoContrast");
}

TEST_CASE("every op at magnitude 14 equals Pillow on the CIFAR-100 cow", "[augment][randaugment][pillow]") {
  // Pixel sum and Σ (i + 1)·p[i] mod 2^32 over the (C, H, W) bytes of each output. Made once with Pillow 9.4.0
  // (Debian python3-pil) by the calls torchvision's _apply_op makes on a PIL image: F.affine's inverse matrix
  // (center (0, 0) for the shears, the image centre otherwise) into Image.transform(AFFINE, NEAREST, fill 0),
  // Image.rotate(m, NEAREST), ImageEnhance.{Brightness, Color, Contrast, Sharpness}(img).enhance(1 + m),
  // ImageOps.{posterize, solarize, autocontrast, equalize}; the RGB image is the record, the grey one its red
  // plane. The same script compared whole images for bins 0, 7, 14, 22, 30 with both signs, for RGB 32×32,
  // Fashion-MNIST 28×28 and random 20×27 images, and rotations by ±90°, 180°, 270°, 45°, 13.7°: all identical.
  struct Golden {
    int op;
    double magnitude;
    long sum;
    std::uint32_t hash;
  };
  const Golden rgb_golden[] = {
      {1, 0.14000001549720764, 390869, 536009313u},   {1, -0.14000001549720764, 411455, 570768829u},
      {2, 0.14000001549720764, 378507, 519137087u},   {2, -0.14000001549720764, 404128, 574833369u},
      {3, 6.767371654510498, 374850, 528652670u},     {3, -6.767371654510498, 321238, 442885849u},
      {4, 6.767371654510498, 354234, 532231528u},     {4, -6.767371654510498, 302577, 397383873u},
      {5, 14.0, 377943, 535865650u},                  {5, -14.0, 380593, 525453430u},
      {6, 0.41999998688697815, 536350, 755710311u},   {6, -0.41999998688697815, 244838, 339300322u},
      {7, 0.41999998688697815, 414459, 555308380u},   {7, -0.41999998688697815, 432828, 619398375u},
      {8, 0.41999998688697815, 399000, 535074758u},   {8, -0.41999998688697815, 433351, 628862562u},
      {9, 0.41999998688697815, 423217, 586553537u},   {9, -0.41999998688697815, 423893, 587653695u},
      {10, 6.0, 419960, 581786548u},                  {11, 136.0, 202784, 316063291u},
      {12, 0.0, 414042, 577385902u},                  {13, 0.0, 488443, 727443592u},
  };
  const Golden grey_golden[] = {
      {1, 0.14000001549720764, 142553, 63611228u},  {1, -0.14000001549720764, 148579, 67772579u},
      {2, 0.14000001549720764, 138811, 62534223u},  {2, -0.14000001549720764, 146561, 72428101u},
      {3, 6.767371654510498, 133976, 63209560u},    {3, -6.767371654510498, 119217, 55470090u},
      {4, 6.767371654510498, 128179, 71828707u},    {4, -6.767371654510498, 112535, 45994384u},
      {5, 14.0, 138177, 67752456u},                 {5, -14.0, 138869, 63855285u},
      {6, 0.41999998688697815, 196962, 96693599u},  {6, -0.41999998688697815, 89031, 41131032u},
      {7, 0.41999998688697815, 154423, 71371179u},  {7, -0.41999998688697815, 154423, 71371179u},
      {8, 0.41999998688697815, 147984, 67213765u},  {8, -0.41999998688697815, 154010, 74421715u},
      {9, 0.41999998688697815, 153894, 71104747u},  {9, -0.41999998688697815, 154092, 71196020u},
      {10, 6.0, 152756, 70560532u},                 {11, 136.0, 74544, 44921069u},
      {12, 0.0, 148126, 67753002u},                 {13, 0.0, 162753, 76110881u},
  };
  const Img rgb = cifar100_record0();
  const Img red(rgb.begin(), rgb.begin() + 1024);
  for (int channels : {3, 1}) {
    for (const Golden& g : channels == 3 ? std::span<const Golden>(rgb_golden) : std::span<const Golden>(grey_golden)) {
      const auto op = AugmentOp(g.op);
      // The table's magnitudes are torchvision's at bin 14, signed.
      CHECK(std::abs(g.magnitude) == op_magnitude(op, 14, 31, 32, 32).magnitude);
      Img img = channels == 3 ? rgb : red;
      apply_op(img.data(), channels, 32, 32, op, g.magnitude);
      long sum = 0;
      std::uint32_t hash = 0;
      for (std::size_t i = 0; i < img.size(); ++i) {
        sum += img[i];
        hash += std::uint32_t(i + 1) * img[i];
      }
      INFO(op_name(op) << " " << g.magnitude << " on " << channels << " channel(s)");
      CHECK(sum == g.sum);
      CHECK(hash == g.hash);
    }
  }
}

TEST_CASE("RandAugment(2, 14) is deterministic for a seed and replays through apply_op", "[augment][randaugment]") {
  const RandAugment augment;  // num_ops 2, magnitude 14, 31 bins
  const Img rgb = cifar100_record0();
  std::mt19937_64 a(2024), b(2024), c(2025);
  int differ = 0;
  std::map<AugmentOp, int> count;
  for (int k = 0; k < 1400; ++k) {
    Img x = rgb, y = rgb, z = rgb;
    const auto ops_x = augment(x.data(), 3, 32, 32, a);
    const auto ops_y = augment(y.data(), 3, 32, 32, b);
    augment(z.data(), 3, 32, 32, c);
    REQUIRE(ops_x.size() == 2u);
    REQUIRE(x == y);
    REQUIRE(ops_x[0].op == ops_y[0].op);
    REQUIRE(ops_x[1].magnitude == ops_y[1].magnitude);
    differ += x != z;
    // Replaying the recorded ops gives the same image.
    Img replay = rgb;
    for (const AppliedOp& o : ops_x) {
      apply_op(replay.data(), 3, 32, 32, o.op, o.magnitude);
      const auto table = op_magnitude(o.op, 14, 31, 32, 32);
      REQUIRE(std::abs(o.magnitude) == table.magnitude);
      if (!table.is_signed) REQUIRE(o.magnitude >= 0);
      ++count[o.op];
    }
    REQUIRE(replay == x);
  }
  CHECK(differ > 1000);  // another seed: mostly other images (both may draw e.g. two Identity ops)
  REQUIRE(count.size() == std::size_t(kNumAugmentOps));
  for (const auto& [op, k] : count) CHECK(std::abs(k - 200) < 75);  // 2800 draws / 14 = 200, σ ≈ 14

  // One channel works too (Color is the identity there).
  Img g(28 * 28);
  std::iota(g.begin(), g.end(), 0);
  std::mt19937_64 d(1), e(1);
  Img g2 = g;
  augment(g.data(), 1, 28, 28, d);
  augment(g2.data(), 1, 28, 28, e);
  CHECK(g == g2);
}
