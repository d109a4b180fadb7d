// data_tools/image_ops.hpp — float image operations for evaluation: bilinear resizing (evaluating at another
// resolution, paper Fig. 7) and shuffling the patches of an image (paper Table 5).
//
// C channels, H height, W width; every image is float (C, H, W) row-major.
#pragma once

#include <cstdint>
#include <random>

namespace liere::data {

// Bilinear resize of a (C, H, W) image to (C, H2, W2), as torch.nn.functional.interpolate(mode="bilinear",
// align_corners=False): output pixel (y, x) samples the input at
//   sy = clamp((y + ½)·H/H2 − ½, 0, H − 1),   sx = clamp((x + ½)·W/W2 − ½, 0, W − 1)
// and interpolates linearly between the four neighbours floor(s), min(floor(s) + 1, size − 1) (computed in
// double). H2 = H and W2 = W copy the image.
void resize_bilinear(const float* src, int C, int H, int W, float* dst, int H2, int W2);

// Moves the p×p patches of a (C, H, W) image to a random permutation of the patch grid (H/p × W/p patches;
// the same permutation for every channel; pixels right or below the last whole patch stay). The permutation
// is a Fisher–Yates shuffle drawing rng() % (i + 1), so the same generator state gives the same images.
void shuffle_patches(float* img, int C, int H, int W, int p, std::mt19937_64& rng);

}  // namespace liere::data
