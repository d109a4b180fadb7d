// tests/test_image_ops.cpp — data_tools/image_ops.hpp: bilinear resizing against hand-computed values and
// against PyTorch's align_corners=False formula, and patch shuffling as a permutation of whole patches.
//
// C channels, H height, W width; images float (C, H, W).
#include <data_tools/image_ops.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

using namespace liere::data;
using Img = std::vector<float>;

namespace {

Img resized(const Img& src, int C, int H, int W, int H2, int W2) {
  Img dst(std::size_t(C) * H2 * W2, -1.0f);
  resize_bilinear(src.data(), C, H, W, dst.data(), H2, W2);
  return dst;
}

Img random_image(int C, int H, int W, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  Img img(std::size_t(C) * H * W);
  for (float& v : img) v = u(g);
  return img;
}

// PyTorch's upsample_bilinear2d on the CPU for align_corners=False and an output size (no scale factor),
// written after aten/src/ATen/native/UpSample.h: area_pixel_compute_source_index and the h1p/w1p
// neighbour offsets, independently of resize_bilinear's clamp to [0, size − 1].
Img torch_bilinear(const Img& src, int C, int H, int W, int H2, int W2) {
  auto source_index = [](double scale, int dst) {
    const double s = scale * (dst + 0.5) - 0.5;
    return s < 0 ? 0.0 : s;
  };
  const double rh = double(H) / H2, rw = double(W) / W2;
  Img dst(std::size_t(C) * H2 * W2);
  for (int c = 0; c < C; ++c)
    for (int h2 = 0; h2 < H2; ++h2) {
      const double h1r = source_index(rh, h2);
      const int h1 = int(h1r), h1p = h1 < H - 1 ? 1 : 0;
      const double h1lambda = h1r - h1, h0lambda = 1 - h1lambda;
      for (int w2 = 0; w2 < W2; ++w2) {
        const double w1r = source_index(rw, w2);
        const int w1 = int(w1r), w1p = w1 < W - 1 ? 1 : 0;
        const double w1lambda = w1r - w1, w0lambda = 1 - w1lambda;
        const float* s = src.data() + std::size_t(c) * H * W;
        dst[(std::size_t(c) * H2 + h2) * W2 + w2] =
            float(h0lambda * (w0lambda * s[h1 * W + w1] + w1lambda * s[h1 * W + w1 + w1p]) +
                  h1lambda * (w0lambda * s[(h1 + h1p) * W + w1] + w1lambda * s[(h1 + h1p) * W + w1 + w1p]));
      }
    }
  return dst;
}

}  // namespace

TEST_CASE("resize_bilinear: the same size copies the image exactly", "[image_ops]") {
  const Img img = random_image(3, 5, 7, 1);
  CHECK(resized(img, 3, 5, 7, 5, 7) == img);
}

TEST_CASE("resize_bilinear: 2×2 → 4×4 by hand (PyTorch's align_corners=False result)", "[image_ops]") {
  // Source positions of the 4 outputs along an axis: clamp((i + ½)·2/4 − ½, 0, 1) = 0, ¼, ¾, 1.
  // [[1, 2], [3, 4]] is linear, v = 1 + fx + 2 fy: what F.interpolate(..., size=4, mode="bilinear") prints.
  CHECK(resized({1, 2, 3, 4}, 1, 2, 2, 4, 4) == Img{1.0f, 1.25f, 1.75f, 2.0f,   //
                                                     1.5f, 1.75f, 2.25f, 2.5f,  //
                                                     2.5f, 2.75f, 3.25f, 3.5f,  //
                                                     3.0f, 3.25f, 3.75f, 4.0f});
  // [[0, 10], [20, 70]] is not: v = (1 − fy)(10 fx) + fy (20 + 50 fx) = 10 fx + 20 fy + 40 fx fy.
  CHECK(resized({0, 10, 20, 70}, 1, 2, 2, 4, 4) == Img{0.0f, 2.5f, 7.5f, 10.0f,    //
                                                       5.0f, 10.0f, 20.0f, 25.0f,  //
                                                       15.0f, 25.0f, 45.0f, 55.0f,  //
                                                       20.0f, 32.5f, 57.5f, 70.0f});
}

TEST_CASE("resize_bilinear: corners and edges keep the input's values when upsampling", "[image_ops]") {
  const int C = 2, H = 3, W = 4, H2 = 9, W2 = 10;
  const Img img = random_image(C, H, W, 2);
  const Img out = resized(img, C, H, W, H2, W2);
  for (int c = 0; c < C; ++c) {
    const float* s = img.data() + std::size_t(c) * H * W;
    const float* o = out.data() + std::size_t(c) * H2 * W2;
    CHECK(o[0] == s[0]);                                  // top left
    CHECK(o[W2 - 1] == s[W - 1]);                         // top right
    CHECK(o[(H2 - 1) * W2] == s[(H - 1) * W]);            // bottom left
    CHECK(o[(H2 - 1) * W2 + W2 - 1] == s[(H - 1) * W + W - 1]);  // bottom right
    // The first output row samples source row 0 (sy = (½)·3/9 − ½ < 0, clamped): a 1-D interpolation of it.
    for (int x = 0; x < W2; ++x) {
      const double sx = std::clamp((x + 0.5) * W / W2 - 0.5, 0.0, double(W - 1));
      const int x0 = int(sx), x1 = std::min(x0 + 1, W - 1);
      CHECK(o[x] == Approx((1 - (sx - x0)) * s[x0] + (sx - x0) * s[x1]).margin(1e-6));
    }
  }
}

TEST_CASE("resize_bilinear: 4 → 2 averages neighbouring pairs", "[image_ops]") {
  // Source positions (i + ½)·4/2 − ½ = 0.5, 2.5: the mean of pixels (0, 1) and (2, 3) on each axis.
  CHECK(resized({1, 2, 3, 4,      //
                 5, 6, 7, 8,      //
                 9, 10, 11, 12,   //
                 13, 14, 15, 16},
                1, 4, 4, 2, 2) == Img{3.5f, 5.5f, 11.5f, 13.5f});
}

TEST_CASE("resize_bilinear: agrees with PyTorch's formula on up-, down- and mixed resizing", "[image_ops]") {
  const int C = 2, H = 5, W = 6;
  const Img img = random_image(C, H, W, 3);
  for (auto [H2, W2] : {std::pair{5, 6}, {10, 12}, {3, 4}, {7, 3}, {1, 1}, {13, 2}}) {
    INFO(H << "x" << W << " -> " << H2 << "x" << W2);
    const Img ours = resized(img, C, H, W, H2, W2), ref = torch_bilinear(img, C, H, W, H2, W2);
    REQUIRE(ours.size() == ref.size());
    for (std::size_t i = 0; i < ours.size(); ++i) CHECK(ours[i] == Approx(ref[i]).margin(1e-6));
  }
}

// ---- shuffle_patches ----------------------------------------------------------------------------------

namespace {

// An image whose pixel (c, y, x) holds 10000 c + 100 y + x: every value names its place.
Img labelled(int C, int H, int W) {
  Img img(std::size_t(C) * H * W);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) img[(std::size_t(c) * H + y) * W + x] = float(10000 * c + 100 * y + x);
  return img;
}

Img shuffled(Img img, int C, int H, int W, int p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  shuffle_patches(img.data(), C, H, W, p, rng);
  return img;
}

// For each destination patch (row-major over the grid), the source patch it holds; fails the test unless
// the patch is one whole source patch, moved as a block, from the same channel.
std::vector<int> patch_sources(const Img& out, int C, int H, int W, int p) {
  const int gw = W / p, n = (H / p) * gw;
  std::vector<int> src(n, -1);
  for (int k = 0; k < n; ++k) {
    const int di = k / gw, dj = k % gw;
    // The top-left pixel of channel 0 names the source patch; every other pixel must follow it.
    const int v0 = int(out[std::size_t(di * p) * W + dj * p]);
    const int sy = v0 / 100, sx = v0 % 100;
    REQUIRE(sy % p == 0);
    REQUIRE(sx % p == 0);
    src[k] = (sy / p) * gw + sx / p;
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < p; ++y)
        for (int x = 0; x < p; ++x)
          REQUIRE(int(out[(std::size_t(c) * H + di * p + y) * W + dj * p + x]) == 10000 * c + 100 * (sy + y) + sx + x);
  }
  return src;
}

}  // namespace

TEST_CASE("shuffle_patches: a permutation of whole patches, the same for every channel", "[image_ops]") {
  const int C = 3, H = 12, W = 16, p = 4;  // a 3×4 grid of patches
  const Img img = labelled(C, H, W);
  const Img out = shuffled(img, C, H, W, p, 7);
  const std::vector<int> src = patch_sources(out, C, H, W, p);
  std::vector<int> sorted = src;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(12);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);  // every patch exactly once: the multiset of patches is preserved
  CHECK(src != all);     // and something moved
  // The multiset of pixel values is preserved too.
  Img a = img, b = out;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
}

TEST_CASE("shuffle_patches: the Fisher–Yates permutation of the generator, deterministic per seed", "[image_ops]") {
  const int C = 1, H = 16, W = 16, p = 4;  // 16 patches: two seeds give the same order with probability 1/16!
  const Img img = labelled(C, H, W);
  const Img a = shuffled(img, C, H, W, p, 11), b = shuffled(img, C, H, W, p, 11), c = shuffled(img, C, H, W, p, 12);
  CHECK(a == b);
  CHECK(a != c);
  // Destination k holds source perm[k], perm drawn as for i = n−1 … 1: swap(perm[i], perm[rng() % (i + 1)]).
  std::vector<int> perm(16);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(11);
  for (int i = 15; i > 0; --i) std::swap(perm[i], perm[std::size_t(rng() % std::uint64_t(i + 1))]);
  CHECK(patch_sources(a, C, H, W, p) == perm);
}

TEST_CASE("shuffle_patches: one patch (p = H = W) keeps the image; pixels past the last whole patch stay",
          "[image_ops]") {
  const Img img = random_image(2, 8, 8, 5);
  CHECK(shuffled(img, 2, 8, 8, 8, 3) == img);

  // 7×7 with p = 3: a 2×2 grid; row 6 and column 6 are outside every patch.
  const int C = 2, H = 7, W = 7, p = 3;
  const Img lab = labelled(C, H, W);
  const Img out = shuffled(lab, C, H, W, p, 4);
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < H; ++k) {
      CHECK(out[(std::size_t(c) * H + 6) * W + k] == lab[(std::size_t(c) * H + 6) * W + k]);
      CHECK(out[(std::size_t(c) * H + k) * W + 6] == lab[(std::size_t(c) * H + k) * W + 6]);
    }
  std::vector<int> src = patch_sources(out, C, H, W, p);
  std::sort(src.begin(), src.end());
  CHECK(src == std::vector<int>{0, 1, 2, 3});
}
