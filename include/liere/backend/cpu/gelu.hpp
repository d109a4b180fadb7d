// liere/backend/cpu/gelu.hpp — GELU, the exact erf form (torch.nn.GELU() with approximate='none').
//
//   y  = x · Φ(x) = ½ x (1 + erf(x/√2))
//   dx += dy · (Φ(x) + x φ(x)),   φ(x) = exp(−x²/2)/√(2π)      (overwrite: dx = ..., for a fresh buffer)
// float goes through Eigen's vectorised erf (a rational approximation accurate to a few ulp, as PyTorch's
// own vectorised erf) and exp; other scalars (double, the tests' dual numbers) use the shared scalar bodies of
// backend/kernels/pointwise.hpp (which the CUDA kernels run too).
#pragma once

#include <liere/core/eigen.hpp>
#include <cmath>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/kernels/pointwise.hpp>
#include <type_traits>
LIERE_THIRD_PARTY_BEGIN
#include <unsupported/Eigen/SpecialFunctions>
LIERE_THIRD_PARTY_END

namespace liere::cpu {

namespace detail {
inline constexpr Index kGeluChunk = 4096;  // elements per vectorised block
}  // namespace detail

template <class S>
void gelu_forward(const S* x,  // (n)
                  S* y,        // (n)
                  Index n) {
  if constexpr (std::is_same_v<S, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Index nb = (n + detail::kGeluChunk - 1) / detail::kGeluChunk;
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index blk = 0; blk < nb; ++blk) {
      const Index i0 = blk * detail::kGeluChunk, len = std::min(detail::kGeluChunk, n - i0);
      Eigen::Map<const A> xa(x + i0, len);
      Eigen::Map<A> ya(y + i0, len);
      ya = 0.5f * xa * (1.0f + (xa * float(kernels::kSqrtHalf)).erf());
    }
  } else {
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index i = 0; i < n; ++i) y[i] = kernels::gelu(x[i]);
  }
}

template <class S>
void gelu_backward(const S* x,   // (n)
                   const S* dy,  // (n)
                   S* dx,        // (n)
                   Index n, bool overwrite = false) {
  if constexpr (std::is_same_v<S, float>) {
    using A = Eigen::Array<float, Eigen::Dynamic, 1>;
    const Index nb = (n + detail::kGeluChunk - 1) / detail::kGeluChunk;
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index blk = 0; blk < nb; ++blk) {
      const Index i0 = blk * detail::kGeluChunk, len = std::min(detail::kGeluChunk, n - i0);
      Eigen::Map<const A> xa(x + i0, len), dya(dy + i0, len);
      Eigen::Map<A> dxa(dx + i0, len);
      auto g = dya * (0.5f * (1.0f + (xa * float(kernels::kSqrtHalf)).erf()) +
                      xa * float(kernels::kInvSqrt2Pi) * (-0.5f * xa.square()).exp());
      if (overwrite) dxa = g;
      else dxa += g;
    }
  } else {
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index i = 0; i < n; ++i) dx[i] = (overwrite ? S(0) : dx[i]) + dy[i] * kernels::gelu_grad(x[i]);
  }
}

}  // namespace liere::cpu
