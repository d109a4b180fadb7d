// liere/backend/kernels/fp16.hpp — IEEE half precision storage (1 sign, 5 exponent, 10 mantissa bits) and its
// conversions, shared by the CPU tests and the CUDA kernels (LIERE_HOST_DEVICE), as kernels/bf16.hpp for bf16.
//
//   to_fp16(float)   round to nearest, ties to even (what __float2half_rn does); a value at or past 65520 (halfway
//                    between the largest half, 65504, and 2^16) becomes ±∞, ±∞ stays, NaN stays a (quiet) NaN;
//                    values below 2^-14 become subnormal halves (steps of 2^-24), at or below 2^-25 signed zeros
//   to_float(fp16)   exact
//   round_fp16(x)    to_float(to_fp16(x))
//   to_fp16x4(a, b, c, d)
//                    four consecutive values rounded, as they lie in memory in a little-endian 64-bit word (a in
//                    the low 16 bits): cuda::gemm_act's fp16 packs store four at a time, as its bf16 packs
//
// fp16 keeps 11 significant bits (a rounding error of at most 2^-11 ≈ 4.9e-4 relative, 8× smaller than bf16's) in a
// range of 6.1e-5 to 65504: gradients underflow and activations can overflow, hence dynamic loss scaling
// (optim/loss_scale.hpp) in an fp16 run, and bf16 where the range matters (docs/precision.md).
#pragma once

#include <cstdint>
#include <liere/backend/kernels/bf16.hpp>  // float_bits, bits_float
#include <liere/core/config.hpp>

namespace liere::kernels {

struct fp16 {
  std::uint16_t bits = 0;
};

LIERE_HOST_DEVICE inline fp16 to_fp16(float f) {
  const std::uint32_t u = float_bits(f), a = u & 0x7fffffffu;
  const auto sign = std::uint16_t((u >> 16) & 0x8000u);
  if (a > 0x7f800000u) return {std::uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN: quiet, sign kept
  if (a >= 0x477ff000u) return {std::uint16_t(sign | 0x7c00u)};  // ≥ 65520 (and ∞): ∞
  if (a >= 0x38800000u) {  // a normal half (≥ 2^-14): rebias the exponent (127 − 15 = 112), round 13 bits away
    const std::uint32_t r = a - 0x38000000u;
    return {std::uint16_t(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13))};  // a carry moves to the exponent
  }
  if (a <= 0x33000000u) return {sign};  // ≤ 2^-25 (half of the smallest subnormal, a tie to the even 0): ±0
  // A subnormal half: the value in units of 2^-24, m · 2^(e − 150) / 2^-24 = m >> (126 − e), rounded to even.
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);  // shift 14 … 24
  const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return {std::uint16_t(sign | (q + (rem > half || (rem == half && (q & 1u)))))};  // may round up to 2^-14
}

LIERE_HOST_DEVICE inline float to_float(fp16 h) {
  const std::uint32_t sign = std::uint32_t(h.bits & 0x8000u) << 16, e = (h.bits >> 10) & 0x1fu, m = h.bits & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m · 2^-24, exact in float
    const float v = float(m) * bits_float(0x33800000u);  // 2^-24
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));  // ∞ or NaN
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

LIERE_HOST_DEVICE inline float round_fp16(float x) { return to_float(to_fp16(x)); }

LIERE_HOST_DEVICE inline std::uint64_t to_fp16x4(float a, float b, float c, float d) {
  return std::uint64_t(to_fp16(a).bits) | std::uint64_t(to_fp16(b).bits) << 16 |
         std::uint64_t(to_fp16(c).bits) << 32 | std::uint64_t(to_fp16(d).bits) << 48;
}

}  // namespace liere::kernels
