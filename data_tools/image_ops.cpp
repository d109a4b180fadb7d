// data_tools/image_ops.cpp — bilinear resizing and patch shuffling of float images.
#include <data_tools/image_ops.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace liere::data {

void resize_bilinear(const float* src, int C, int H, int W, float* dst, int H2, int W2) {
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < H2; ++y) {
      const double sy = std::clamp((y + 0.5) * H / H2 - 0.5, 0.0, double(H - 1));
      const int y0 = int(sy), y1 = std::min(y0 + 1, H - 1);
      const double fy = sy - y0;
      for (int x = 0; x < W2; ++x) {
        const double sx = std::clamp((x + 0.5) * W / W2 - 0.5, 0.0, double(W - 1));
        const int x0 = int(sx), x1 = std::min(x0 + 1, W - 1);
        const double fx = sx - x0;
        const float* s = src + std::size_t(c) * H * W;
        const double v = (1 - fy) * ((1 - fx) * s[y0 * W + x0] + fx * s[y0 * W + x1]) +
                         fy * ((1 - fx) * s[y1 * W + x0] + fx * s[y1 * W + x1]);
        dst[(std::size_t(c) * H2 + y) * W2 + x] = float(v);
      }
    }
}

void shuffle_patches(float* img, int C, int H, int W, int p, std::mt19937_64& rng) {
  const int gh = H / p, gw = W / p, n = gh * gw;
  std::vector<int> perm(n);
  for (int i = 0; i < n; ++i) perm[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(perm[i], perm[std::size_t(rng() % std::uint64_t(i + 1))]);
  std::vector<float> src(img, img + std::size_t(C) * H * W);
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < n; ++k) {
      const int si = perm[k] / gw, sj = perm[k] % gw, di = k / gw, dj = k % gw;
      for (int y = 0; y < p; ++y)
        for (int x = 0; x < p; ++x)
          img[(std::size_t(c) * H + di * p + y) * W + dj * p + x] = src[(std::size_t(c) * H + si * p + y) * W + sj * p + x];
    }
}

}  // namespace liere::data
