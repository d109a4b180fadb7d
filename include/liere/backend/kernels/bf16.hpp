// liere/backend/kernels/bf16.hpp — bfloat16 storage (1 sign, 8 exponent, 7 mantissa bits: the upper half of a
// float) and its conversions, shared by the CPU and the CUDA kernels (LIERE_HOST_DEVICE).
//
//   to_bf16(float)   round to nearest, ties to even (what __float2bfloat16_rn and PyTorch do); ±∞ stays ±∞, a
//                    finite value that rounds past the largest bf16 becomes ±∞, NaN stays a (quiet) NaN
//   to_float(bf16)   exact
//   round_bf16(x)    to_float(to_bf16(x)): the float nearest to x among the bf16 values
//   to_bf16x4(a, b, c, d)
//                    four consecutive values rounded, as they lie in memory in a little-endian 64-bit word (a in
//                    the low 16 bits): cuda::gemm_act's conversion stores four at a time where the rows allow it
//   strided_row(g, rows, ld, stride)
//                    where row g of the dense (count, rows, cols) pack of a strided batch of (rows, cols) matrices
//                    comes from: the i-th matrix at stride·i, its rows ld apart (cuda::gemm_act packs its operands,
//                    rounded to bf16, this way: a warp per row, its lanes along the row)
//
// bf16 keeps float's range with 8 significant bits: a rounding error of at most 2^-9 ≈ 2e-3 relative. A rotation
// table stored in bf16 is no longer a rotation (‖RᵀR − I‖ ~ 1e-2); liere keeps tables in fp32 and applies them in
// fp32 to bf16-stored q and k (docs/math.md, "Low precision"; tests/test_bf16.cpp measures both).
#pragma once

#include <cstdint>
#include <cstring>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::kernels {

struct bf16 {
  std::uint16_t bits = 0;
};

LIERE_HOST_DEVICE inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
LIERE_HOST_DEVICE inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

LIERE_HOST_DEVICE inline bf16 to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {std::uint16_t((u >> 16) | 0x0040u)};  // NaN: quiet, sign kept
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry out of the mantissa
  // increments the exponent (the largest finite values round to ∞, as they should).
  const std::uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return {std::uint16_t(r >> 16)};
}

LIERE_HOST_DEVICE inline float to_float(bf16 h) { return bits_float(std::uint32_t(h.bits) << 16); }

LIERE_HOST_DEVICE inline float round_bf16(float x) { return to_float(to_bf16(x)); }

LIERE_HOST_DEVICE inline std::uint64_t to_bf16x4(float a, float b, float c, float d) {
  return std::uint64_t(to_bf16(a).bits) | std::uint64_t(to_bf16(b).bits) << 16 |
         std::uint64_t(to_bf16(c).bits) << 32 | std::uint64_t(to_bf16(d).bits) << 48;
}

// The offset, from the first matrix's first element, of row g of the dense pack (count, rows, cols) of `count`
// (rows, cols) matrices stored `stride` elements apart with leading dimension ld ≥ cols: matrix g / rows, row
// g % rows; element (g, c) of the pack is at strided_row(g, …) + c.
LIERE_HOST_DEVICE inline Index strided_row(Index g, Index rows, Index ld, Index stride) {
  const Index m = g / rows;
  return m * stride + (g - m * rows) * ld;
}

}  // namespace liere::kernels
