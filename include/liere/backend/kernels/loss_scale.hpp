// liere/backend/kernels/loss_scale.hpp — one gradient element of a loss-scaled (fp16) step, shared by the CPU and
// the CUDA kernels: the gradient of the scaled loss s·L is unscaled in place, g ← g · (1/s), and the caller learns
// whether it was finite. An element that overflowed in fp16 (±∞) or became NaN makes the whole step an overflow
// step: optim/loss_scale.hpp then skips the update and lowers s.
//
//   unscale_grad(g, inv_scale)   g ← g · inv_scale; returns whether g is finite (before and after: a finite g
//                                times inv_scale ≤ 1 stays finite)
#pragma once

#include <cstdint>
#include <cstring>
#include <liere/core/config.hpp>

namespace liere::kernels {

// Finite ⇔ the exponent bits are not all ones (no std::isfinite: also under nvcc and -ffast-math).
LIERE_HOST_DEVICE inline bool finite_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7f800000u) != 0x7f800000u;
}

LIERE_HOST_DEVICE inline bool finite_bits(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

LIERE_HOST_DEVICE inline bool unscale_grad(float& g, float inv_scale) {
  const bool ok = finite_bits(g);
  g *= inv_scale;
  return ok;
}

}  // namespace liere::kernels
