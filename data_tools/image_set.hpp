// data_tools/image_set.hpp — the in-memory image data set every reader returns, and the fixed-seed,
// class-stratified subset behind the data-efficiency ablation (LieRE paper, Fig. 4: --data-fraction F).
//
// N images, C channels, H height, W width.
#pragma once

#include <liere/core/rng.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace liere::data {

struct ImageSet {
  int n = 0;         // N
  int channels = 0;  // C
  int height = 0;    // H
  int width = 0;     // W
  std::vector<std::uint8_t> pixels;      // (N, C, H, W) row-major
  std::vector<int> labels;               // (N) in [0, num_classes); the fine label for CIFAR-100
  std::vector<int> coarse_labels;        // (N) in [0, num_coarse_classes); CIFAR-100 only, else empty
  int num_classes = 0;
  int num_coarse_classes = 0;            // CIFAR-100 only, else 0
  std::vector<std::string> class_names;         // (num_classes)
  std::vector<std::string> coarse_class_names;  // (num_coarse_classes)

  // C·H·W: the bytes of one image.
  std::size_t image_size() const { return std::size_t(channels) * height * width; }

  // The first byte of image i, laid out (C, H, W).
  const std::uint8_t* image(int i) const {
    LIERE_ENSURE(i >= 0 && i < n, "ImageSet::image: index " << i << " out of range [0, " << n << ")");
    return pixels.data() + std::size_t(i) * image_size();
  }
  std::uint8_t* image(int i) {
    LIERE_ENSURE(i >= 0 && i < n, "ImageSet::image: index " << i << " out of range [0, " << n << ")");
    return pixels.data() + std::size_t(i) * image_size();
  }
};


// Keeps round(fraction · N_c) images of every class c (at least one of a non-empty class), chosen by a
// Fisher–Yates shuffle of each class's indices seeded with `seed`; the kept images stay in their original
// order. Same set and seed → same subset. fraction in (0, 1]; 1 returns a copy.
inline ImageSet subset(const ImageSet& set, double fraction, std::uint64_t seed) {
  LIERE_ENSURE(fraction > 0.0 && fraction <= 1.0,
               "subset: fraction must be in (0, 1], got " << fraction);
  LIERE_ENSURE(int(set.labels.size()) == set.n,
               "subset: expected " << set.n << " labels, got " << set.labels.size());
  LIERE_ENSURE(set.pixels.size() == std::size_t(set.n) * set.image_size(),
               "subset: expected " << std::size_t(set.n) * set.image_size() << " pixel bytes, got "
                                   << set.pixels.size());
  int num_classes = set.num_classes;
  for (int y : set.labels) {
    LIERE_ENSURE(y >= 0, "subset: negative label " << y);
    num_classes = std::max(num_classes, y + 1);
  }
  std::vector<std::vector<int>> by_class(num_classes);
  for (int i = 0; i < set.n; ++i) by_class[set.labels[i]].push_back(i);

  std::mt19937_64 rng(seed);
  std::vector<int> keep;
  for (auto& idx : by_class) {
    if (idx.empty()) continue;
    for (std::size_t i = idx.size() - 1; i > 0; --i) std::swap(idx[i], idx[liere::below(rng, i + 1)]);
    const auto count = std::clamp<std::size_t>(std::size_t(std::llround(fraction * double(idx.size()))), 1,
                                               idx.size());
    keep.insert(keep.end(), idx.begin(), idx.begin() + std::ptrdiff_t(count));
  }
  std::sort(keep.begin(), keep.end());

  ImageSet out;
  out.n = int(keep.size());
  out.channels = set.channels;
  out.height = set.height;
  out.width = set.width;
  out.num_classes = set.num_classes;
  out.num_coarse_classes = set.num_coarse_classes;
  out.class_names = set.class_names;
  out.coarse_class_names = set.coarse_class_names;
  const std::size_t size = set.image_size();
  out.pixels.resize(keep.size() * size);
  out.labels.reserve(keep.size());
  const bool coarse = set.coarse_labels.size() == std::size_t(set.n) && set.n > 0;
  if (coarse) out.coarse_labels.reserve(keep.size());
  for (std::size_t k = 0; k < keep.size(); ++k) {
    std::copy_n(set.pixels.data() + std::size_t(keep[k]) * size, size, out.pixels.data() + k * size);
    out.labels.push_back(set.labels[keep[k]]);
    if (coarse) out.coarse_labels.push_back(set.coarse_labels[keep[k]]);
  }
  return out;
}

}  // namespace liere::data
