// liere/backend/kernels/pointwise.hpp — per-element bodies of the engine's pointwise ops, shared by the CPU and
// the CUDA kernels (LIERE_HOST_DEVICE).
//
//   gelu(x)        x · Φ(x) = ½ x (1 + erf(x/√2))            (the exact erf form, torch.nn.GELU())
//   gelu_grad(x)   Φ(x) + x φ(x),  φ(x) = exp(−x²/2)/√(2π)
//   dropout_keep   whether element i survives dropout with probability p < 1: hash_uniform(key, i) ≥ p
//                  (core/rng.hpp); p = 1 drops everything (the caller's test)
#pragma once

#include <cmath>
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/core/rng.hpp>

namespace liere::kernels {

// The argument check of dropout, one definition: the engine op (for every device) and the CPU kernel (also called
// directly) make it.
inline void check_dropout(double p) { LIERE_ENSURE(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got " << p); }

inline constexpr double kSqrtHalf = 0.70710678118654752440;    // 1/√2
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)

template <class S>
LIERE_HOST_DEVICE inline S gelu(S x) {
  using std::erf;
  return S(0.5) * x * (S(1) + erf(x * S(kSqrtHalf)));
}

template <class S>
LIERE_HOST_DEVICE inline S gelu_grad(S x) {
  using std::erf;
  using std::exp;
  const S cdf = S(0.5) * (S(1) + erf(x * S(kSqrtHalf)));
  const S pdf = S(kInvSqrt2Pi) * exp(S(-0.5) * x * x);
  return cdf + x * pdf;
}

LIERE_HOST_DEVICE inline bool dropout_keep(std::uint64_t key, std::uint64_t i, float p) { return hash_uniform(key, i) >= p; }

}  // namespace liere::kernels
