// data_tools/augment.cpp — crop, flip, RandAugment and normalisation (semantics in augment.hpp).
//
// C channels, H height, W width; images uint8 (C, H, W).
#include <data_tools/augment.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace liere::data {

namespace {

// a·b rounded on its own. Compiled with -march=native, GCC fuses a·b + c into one FMA with a single rounding;
// the volatile store prevents that where Python or Pillow round the product first and the results must agree.
template <class T>
T mul(T a, T b) {
  volatile T r = a * b;
  return r;
}

void check_shape(const char* where, int C, int H, int W) {
  LIERE_ENSURE(C > 0 && H > 0 && W > 0, where << ": expected positive C, H, W, got " << C << "×" << H << "×" << W);
}

std::size_t plane(int H, int W) { return std::size_t(H) * std::size_t(W); }

// Nearest-neighbour affine warp as Pillow's ImagingTransformAffine does it. The inverse map a = (a0 a1 a2;
// a3 a4 a5) sends the output pixel centre (x + ½, y + ½) to an input point whose floor is the source pixel;
// outside the image → 0. Pillow steps the input point by (a0, a3) along a row and by (a1, a4) from row to row:
// in 16.16 fixed point, every coefficient rounded to the nearest 1/65536, unless a1 = a3 = 0 (translation,
// scaling) or a corner maps beyond ±32768; in doubles otherwise. So does this, which makes the rounding, and
// the output, the same as Pillow's.
void affine_nearest(std::uint8_t* img, int C, int H, int W, const std::array<double, 6>& a) {
  const std::vector<std::uint8_t> src(img, img + std::size_t(C) * plane(H, W));
  std::vector<int> xin(plane(H, W)), yin(plane(H, W));  // (H, W) source pixel of each output pixel
  const auto fits = [&](double x, double y) {
    return std::abs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::abs(x * a[3] + y * a[4] + a[5]) < 32768.0;
  };
  const bool fixed_point = !(a[1] == 0.0 && a[3] == 0.0) && fits(0, 0) && fits(W, H) && fits(0, H) && fits(W, 0);
  if (fixed_point) {
    const auto fix = [](double v) { return std::int64_t(std::floor(v * 65536.0 + 0.5)); };
    const std::int64_t a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
    std::int64_t row_x = fix(a[2] + a[0] * 0.5 + a[1] * 0.5), row_y = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
    for (int y = 0; y < H; ++y, row_x += a1, row_y += a4) {
      std::int64_t xx = row_x, yy = row_y;
      for (int x = 0; x < W; ++x, xx += a0, yy += a3) {
        xin[std::size_t(y) * W + x] = int(xx >> 16);  // arithmetic shift: floor
        yin[std::size_t(y) * W + x] = int(yy >> 16);
      }
    }
  } else {
    const auto coord = [](double v) { return v < 0.0 ? -1 : v >= 2147483647.0 ? 2147483647 : int(v); };
    double row_x = a[2] + a[1] * 0.5 + a[0] * 0.5, row_y = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < H; ++y, row_x += a[1], row_y += a[4]) {
      double xx = row_x, yy = row_y;
      for (int x = 0; x < W; ++x, xx += a[0], yy += a[3]) {
        xin[std::size_t(y) * W + x] = coord(xx);
        yin[std::size_t(y) * W + x] = coord(yy);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    const std::uint8_t* in = src.data() + std::size_t(c) * plane(H, W);
    std::uint8_t* out = img + std::size_t(c) * plane(H, W);
    for (std::size_t i = 0; i < plane(H, W); ++i) {
      const int xs = xin[i], ys = yin[i];
      out[i] = (xs >= 0 && xs < W && ys >= 0 && ys < H) ? in[std::size_t(ys) * W + xs] : std::uint8_t(0);
    }
  }
}

// Python's math.degrees / math.radians (multiplications by the rounded constants).
double degrees(double r) { return r * (180.0 / std::numbers::pi); }
double radians(double d) { return d * (std::numbers::pi / 180.0); }

// round(v, 15) as Pillow's rotate applies it to cos and sin, so that cos 90° is exactly 0.
double round15(double v) { return std::nearbyint(v * 1e15) / 1e15; }

// Pillow's Image.blend(degenerate, img, factor) = degenerate + α·(img − degenerate) with α = float(factor),
// each operation rounded to float, then truncated and clipped to 0..255. The float product and sum are formed
// exactly in double and rounded once to float each, which is the same and cannot be fused into an FMA.
void blend(const std::uint8_t* degenerate, std::uint8_t* img, std::size_t count, double factor) {
  const double alpha = double(float(factor));
  for (std::size_t i = 0; i < count; ++i) {
    const double product = double(float(alpha * double(int(img[i]) - int(degenerate[i]))));
    const float t = float(double(degenerate[i]) + product);
    img[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : std::uint8_t(t);
  }
}

// Applies a per-channel lookup table.
void apply_lut(std::uint8_t* p, std::size_t count, const std::array<std::uint8_t, 256>& lut) {
  for (std::size_t i = 0; i < count; ++i) p[i] = lut[p[i]];
}

std::array<std::uint32_t, 256> histogram(const std::uint8_t* p, std::size_t count) {
  std::array<std::uint32_t, 256> h{};
  for (std::size_t i = 0; i < count; ++i) ++h[p[i]];
  return h;
}

// torch.linspace(start, end, steps)[i] in float32, as ATen computes it (from the nearer end).
float linspace_at(float start, float end, int steps, int i) {
  if (steps == 1) return start;
  const float step = (end - start) / float(steps - 1);
  return i < steps / 2 ? start + mul(step, float(i)) : end - mul(step, float(steps - i - 1));
}

}  // namespace

// ---- normalisation ---------------------------------------------------------------------------------------

void normalize(const std::uint8_t* src, float* dst, int C, int H, int W, std::span<const float> mean,
               std::span<const float> stddev) {
  check_shape("normalize", C, H, W);
  LIERE_ENSURE(mean.size() == std::size_t(C) && stddev.size() == std::size_t(C),
               "normalize: expected " << C << " means and stds, got " << mean.size() << " and " << stddev.size());
  for (int c = 0; c < C; ++c) {
    LIERE_ENSURE(stddev[c] > 0, "normalize: std of channel " << c << " must be positive, got " << stddev[c]);
    const float scale = 1.0f / (255.0f * stddev[c]);
    const float shift = mean[c] / stddev[c];
    const std::size_t off = std::size_t(c) * plane(H, W);
    for (std::size_t i = 0; i < plane(H, W); ++i) dst[off + i] = float(src[off + i]) * scale - shift;
  }
}

// ---- crop and flip -------------------------------------------------------------------------------------

void crop_padded(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W, int pad, int top, int left) {
  check_shape("crop_padded", C, H, W);
  LIERE_ENSURE(pad >= 0 && top >= 0 && top <= 2 * pad && left >= 0 && left <= 2 * pad,
               "crop_padded: expected 0 <= top, left <= 2·pad = " << 2 * pad << ", got top " << top << ", left "
                                                                    << left);
  const int dy = top - pad, dx = left - pad;  // dst(y, x) = src(y + dy, x + dx)
  for (int c = 0; c < C; ++c) {
    const std::uint8_t* in = src + std::size_t(c) * plane(H, W);
    std::uint8_t* out = dst + std::size_t(c) * plane(H, W);
    for (int y = 0; y < H; ++y) {
      const int ys = y + dy;
      for (int x = 0; x < W; ++x) {
        const int xs = x + dx;
        out[std::size_t(y) * W + x] = (ys >= 0 && ys < H && xs >= 0 && xs < W) ? in[std::size_t(ys) * W + xs] : 0;
      }
    }
  }
}

void random_crop(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W, int pad, std::mt19937_64& rng) {
  LIERE_ENSURE(pad >= 0, "random_crop: pad must be >= 0, got " << pad);
  const int top = int(liere::below(rng, std::uint64_t(2 * pad + 1)));
  const int left = int(liere::below(rng, std::uint64_t(2 * pad + 1)));
  crop_padded(src, dst, C, H, W, pad, top, left);
}

void hflip(std::uint8_t* img, int C, int H, int W) {
  check_shape("hflip", C, H, W);
  for (std::size_t r = 0; r < std::size_t(C) * H; ++r) std::reverse(img + r * W, img + (r + 1) * W);
}

bool random_hflip(std::uint8_t* img, int C, int H, int W, std::mt19937_64& rng, double p) {
  const bool flip = liere::unit_double(rng()) < p;
  if (flip) hflip(img, C, H, W);
  return flip;
}

// ---- geometric operations --------------------------------------------------------------------------------

// torchvision passes shear = degrees(atan(m)) and center (0, 0); with s = radians(shear) its inverse map is
// (1, tan s, 0; 0, 1, 0) for ShearX and (1, 0, 0; sin s / cos s, 1, 0) for ShearY (as torchvision forms them).
void shear_x(std::uint8_t* img, int C, int H, int W, double m) {
  check_shape("shear_x", C, H, W);
  const double t = std::tan(radians(degrees(std::atan(m))));
  affine_nearest(img, C, H, W, {1.0, t, 0.0, 0.0, 1.0, 0.0});
}

void shear_y(std::uint8_t* img, int C, int H, int W, double m) {
  check_shape("shear_y", C, H, W);
  const double s = radians(degrees(std::atan(m)));
  affine_nearest(img, C, H, W, {1.0, 0.0, 0.0, std::sin(s) / std::cos(s), 1.0, 0.0});
}

void translate(std::uint8_t* img, int C, int H, int W, int dx, int dy) {
  check_shape("translate", C, H, W);
  affine_nearest(img, C, H, W, {1.0, 0.0, -double(dx), 0.0, 1.0, -double(dy)});
}

void rotate(std::uint8_t* img, int C, int H, int W, double degrees_ccw) {
  check_shape("rotate", C, H, W);
  const double angle = std::fmod(std::fmod(degrees_ccw, 360.0) + 360.0, 360.0);  // Python's angle % 360
  if (angle == 0.0) return;
  const std::size_t n = plane(H, W);
  if (angle == 180.0) {  // Pillow transposes exactly
    for (int c = 0; c < C; ++c) std::reverse(img + c * n, img + (c + 1) * n);
    return;
  }
  // Pillow's rotate: θ = −radians(angle), (cos θ, sin θ; −sin θ, cos θ) rounded to 15 decimals, about the
  // centre (W/2, H/2). For 90° and 270° on a square image this is Pillow's exact transpose too.
  const double th = -radians(angle);
  const double a = round15(std::cos(th)), b = round15(std::sin(th));
  const double d = round15(-std::sin(th)), e = round15(std::cos(th));
  const double cx = W / 2.0, cy = H / 2.0;
  const double c0 = mul(a, -cx) + mul(b, -cy) + 0.0 + cx;
  const double f0 = mul(d, -cx) + mul(e, -cy) + 0.0 + cy;
  affine_nearest(img, C, H, W, {a, b, c0, d, e, f0});
}

// ---- enhance operations -----------------------------------------------------------------------------------

void grayscale(const std::uint8_t* src, std::uint8_t* dst, int C, int H, int W) {
  check_shape("grayscale", C, H, W);
  LIERE_ENSURE(C == 1 || C == 3, "grayscale: expected 1 or 3 channels, got " << C);
  const std::size_t n = plane(H, W);
  if (C == 1) {
    std::copy_n(src, n, dst);
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = std::uint8_t((19595u * src[i] + 38470u * src[n + i] + 7471u * src[2 * n + i] + 0x8000u) >> 16);
}

void adjust_brightness(std::uint8_t* img, int C, int H, int W, double factor) {
  check_shape("adjust_brightness", C, H, W);
  const std::size_t count = std::size_t(C) * plane(H, W);
  const std::vector<std::uint8_t> black(count, 0);
  blend(black.data(), img, count, factor);
}

void adjust_color(std::uint8_t* img, int C, int H, int W, double factor) {
  check_shape("adjust_color", C, H, W);
  LIERE_ENSURE(C == 1 || C == 3, "adjust_color: expected 1 or 3 channels, got " << C);
  if (C == 1) return;  // the greyscale of a grey image is itself: blend(img, img, f) = img
  const std::size_t n = plane(H, W);
  std::vector<std::uint8_t> grey(3 * n);
  grayscale(img, grey.data(), C, H, W);
  std::copy_n(grey.data(), n, grey.data() + n);
  std::copy_n(grey.data(), n, grey.data() + 2 * n);
  blend(grey.data(), img, 3 * n, factor);
}

void adjust_contrast(std::uint8_t* img, int C, int H, int W, double factor) {
  check_shape("adjust_contrast", C, H, W);
  LIERE_ENSURE(C == 1 || C == 3, "adjust_contrast: expected 1 or 3 channels, got " << C);
  const std::size_t n = plane(H, W);
  std::vector<std::uint8_t> grey(n);
  grayscale(img, grey.data(), C, H, W);
  const auto h = histogram(grey.data(), n);
  double sum = 0;
  for (int v = 0; v < 256; ++v) sum += double(v) * h[v];
  const auto mean = std::uint8_t(int(sum / double(n) + 0.5));  // ImageStat mean, rounded as Pillow does
  const std::vector<std::uint8_t> degenerate(std::size_t(C) * n, mean);
  blend(degenerate.data(), img, std::size_t(C) * n, factor);
}

void adjust_sharpness(std::uint8_t* img, int C, int H, int W, double factor) {
  check_shape("adjust_sharpness", C, H, W);
  const std::size_t n = plane(H, W);
  // Degenerate: Pillow's SMOOTH filter, 3×3 kernel (1 1 1; 1 5 1; 1 1 1) / 13 rounded to nearest, the
  // one-pixel border copied. (The sum over 13 is never within 1/26 of a half, so the rounding is exact.)
  std::vector<std::uint8_t> degenerate(img, img + std::size_t(C) * n);
  if (H >= 3 && W >= 3) {
    for (int c = 0; c < C; ++c) {
      const std::uint8_t* in = img + std::size_t(c) * n;
      std::uint8_t* out = degenerate.data() + std::size_t(c) * n;
      for (int y = 1; y < H - 1; ++y)
        for (int x = 1; x < W - 1; ++x) {
          unsigned s = 4u * in[std::size_t(y) * W + x];
          for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) s += in[std::size_t(y + dy) * W + (x + dx)];
          out[std::size_t(y) * W + x] = std::uint8_t((s + 6) / 13);
        }
    }
  }
  blend(degenerate.data(), img, std::size_t(C) * n, factor);
}

// ---- point operations -----------------------------------------------------------------------------------

void posterize(std::uint8_t* img, int C, int H, int W, int bits) {
  check_shape("posterize", C, H, W);
  LIERE_ENSURE(bits >= 0 && bits <= 8, "posterize: bits must be in 0..8, got " << bits);
  const auto mask = std::uint8_t(~((1u << (8 - bits)) - 1u));
  for (std::size_t i = 0; i < std::size_t(C) * plane(H, W); ++i) img[i] &= mask;
}

void solarize(std::uint8_t* img, int C, int H, int W, double threshold) {
  check_shape("solarize", C, H, W);
  for (std::size_t i = 0; i < std::size_t(C) * plane(H, W); ++i)
    if (double(img[i]) >= threshold) img[i] = std::uint8_t(255 - img[i]);
}

void autocontrast(std::uint8_t* img, int C, int H, int W) {
  check_shape("autocontrast", C, H, W);
  const std::size_t n = plane(H, W);
  for (int c = 0; c < C; ++c) {
    std::uint8_t* p = img + std::size_t(c) * n;
    const auto [lo_it, hi_it] = std::minmax_element(p, p + n);
    const int lo = *lo_it, hi = *hi_it;
    if (hi <= lo) continue;
    // Pillow's table: int(v · scale + offset), scale = 255 / (hi − lo), offset = −lo · scale, clipped.
    const double scale = 255.0 / double(hi - lo);
    const double offset = -double(lo) * scale;
    std::array<std::uint8_t, 256> lut;
    for (int v = 0; v < 256; ++v) lut[v] = std::uint8_t(std::clamp(int(mul(double(v), scale) + offset), 0, 255));
    apply_lut(p, n, lut);
  }
}

void equalize(std::uint8_t* img, int C, int H, int W) {
  check_shape("equalize", C, H, W);
  const std::size_t n = plane(H, W);
  for (int c = 0; c < C; ++c) {
    std::uint8_t* p = img + std::size_t(c) * n;
    const auto h = histogram(p, n);
    // Pillow's ImageOps.equalize: step = (pixels − count of the highest present value) // 255; nothing to do
    // with fewer than two values or a zero step; else lut[v] = (step // 2 + #pixels below v) // step, clipped.
    int present = 0, last = 0;
    for (int v = 0; v < 256; ++v)
      if (h[v]) ++present, last = v;
    if (present <= 1) continue;
    const std::uint64_t step = (n - h[last]) / 255;
    if (step == 0) continue;
    std::array<std::uint8_t, 256> lut;
    std::uint64_t acc = step / 2;
    for (int v = 0; v < 256; ++v) {
      lut[v] = std::uint8_t(std::min<std::uint64_t>(acc / step, 255));
      acc += h[v];
    }
    apply_lut(p, n, lut);
  }
}

// ---- RandAugment --------------------------------------------------------------------------------------

const char* op_name(AugmentOp op) {
  switch (op) {
    case AugmentOp::Identity: return "Identity";
    case AugmentOp::ShearX: return "ShearX";
    case AugmentOp::ShearY: return "ShearY";
    case AugmentOp::TranslateX: return "TranslateX";
    case AugmentOp::TranslateY: return "TranslateY";
    case AugmentOp::Rotate: return "Rotate";
    case AugmentOp::Brightness: return "Brightness";
    case AugmentOp::Color: return "Color";
    case AugmentOp::Contrast: return "Contrast";
    case AugmentOp::Sharpness: return "Sharpness";
    case AugmentOp::Posterize: return "Posterize";
    case AugmentOp::Solarize: return "Solarize";
    case AugmentOp::AutoContrast: return "AutoContrast";
    case AugmentOp::Equalize: return "Equalize";
  }
  return "unknown";
}

OpMagnitude op_magnitude(AugmentOp op, int bin, int num_bins, int H, int W) {
  LIERE_ENSURE(num_bins >= 2 && bin >= 0 && bin < num_bins,
               "op_magnitude: expected 0 <= bin < num_bins, num_bins >= 2, got bin " << bin << " of " << num_bins);
  const auto lin = [&](double start, double end) {
    return double(linspace_at(float(start), float(end), num_bins, bin));
  };
  switch (op) {
    case AugmentOp::Identity:
    case AugmentOp::AutoContrast:
    case AugmentOp::Equalize: return {0.0, false};
    case AugmentOp::ShearX:
    case AugmentOp::ShearY: return {lin(0.0, 0.3), true};
    case AugmentOp::TranslateX: return {lin(0.0, 150.0 / 331.0 * W), true};
    case AugmentOp::TranslateY: return {lin(0.0, 150.0 / 331.0 * H), true};
    case AugmentOp::Rotate: return {lin(0.0, 30.0), true};
    case AugmentOp::Brightness:
    case AugmentOp::Color:
    case AugmentOp::Contrast:
    case AugmentOp::Sharpness: return {lin(0.0, 0.9), true};
    case AugmentOp::Posterize: {
      const float q = float(bin) / float((num_bins - 1) / 4.0);  // torch: int64 / float → float32
      return {double(8 - int(std::nearbyint(q))), false};       // round half to even, as torch.round
    }
    case AugmentOp::Solarize: return {lin(255.0, 0.0), false};
  }
  LIERE_ENSURE(false, "op_magnitude: unknown op " << int(op));
  return {};
}

void apply_op(std::uint8_t* img, int C, int H, int W, AugmentOp op, double m) {
  switch (op) {
    case AugmentOp::Identity: return;
    case AugmentOp::ShearX: return shear_x(img, C, H, W, m);
    case AugmentOp::ShearY: return shear_y(img, C, H, W, m);
    case AugmentOp::TranslateX: return translate(img, C, H, W, int(m), 0);  // int(): toward zero, as Python
    case AugmentOp::TranslateY: return translate(img, C, H, W, 0, int(m));
    case AugmentOp::Rotate: return rotate(img, C, H, W, m);
    case AugmentOp::Brightness: return adjust_brightness(img, C, H, W, 1.0 + m);
    case AugmentOp::Color: return adjust_color(img, C, H, W, 1.0 + m);
    case AugmentOp::Contrast: return adjust_contrast(img, C, H, W, 1.0 + m);
    case AugmentOp::Sharpness: return adjust_sharpness(img, C, H, W, 1.0 + m);
    case AugmentOp::Posterize: return posterize(img, C, H, W, int(m));
    case AugmentOp::Solarize: return solarize(img, C, H, W, m);
    case AugmentOp::AutoContrast: return autocontrast(img, C, H, W);
    case AugmentOp::Equalize: return equalize(img, C, H, W);
  }
  LIERE_ENSURE(false, "apply_op: unknown op " << int(op));
}

std::vector<AppliedOp> RandAugment::operator()(std::uint8_t* img, int C, int H, int W, std::mt19937_64& rng) const {
  LIERE_ENSURE(num_ops >= 0, "RandAugment: num_ops must be >= 0, got " << num_ops);
  std::vector<AppliedOp> applied;
  applied.reserve(std::size_t(num_ops));
  for (int k = 0; k < num_ops; ++k) {
    const auto op = AugmentOp(liere::below(rng, kNumAugmentOps));
    auto [m, is_signed] = op_magnitude(op, magnitude, num_magnitude_bins, H, W);
    if (is_signed && liere::below(rng, 2) == 1) m = -m;
    apply_op(img, C, H, W, op, m);
    applied.push_back({op, m});
  }
  return applied;
}

}  // namespace liere::data
