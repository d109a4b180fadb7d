// liere/backend/cpu/dropout.hpp — inverted dropout with a saved mask (torch.nn.Dropout in training mode).
//
//   keep_i ~ Bernoulli(1 − p),   y_i = x_i · keep_i / (1 − p),   dx_i += dy_i · keep_i / (1 − p)
//   (overwrite: dx_i = ..., for a fresh uninitialised buffer)
// The randomness is one 64-bit key (drawn from the tape's Rng by the op): element i is kept when
// hash_uniform(key, i) ≥ p (core/rng.hpp, kernels/pointwise.hpp), so the mask depends on the key and the element
// index only, never on the number of threads or the device. p = 1 drops everything (y = 0), as PyTorch.
#pragma once

#include <cstdint>
#include <liere/backend/cpu/common.hpp>
#include <liere/backend/kernels/pointwise.hpp>
#include <liere/core/rng.hpp>

namespace liere::cpu {

template <class S>
void dropout_forward(const S* x,           // (n)
                     double p, std::uint64_t key,
                     S* y,                 // (n)
                     std::uint8_t* mask,   // (n) saved: 1 kept, 0 dropped
                     Index n) {
  kernels::check_dropout(p);
  const float pf = float(p);
  const S scale = p < 1 ? S(1.0 / (1.0 - p)) : S(0);
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) {
    const std::uint8_t keep = p < 1 && kernels::dropout_keep(key, std::uint64_t(i), pf);
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : S(0);
  }
}

// The same with the key drawn from rng.
template <class S>
void dropout_forward(const S* x, double p, Rng& rng, S* y, std::uint8_t* mask, Index n) {
  dropout_forward(x, p, rng.next_u64(), y, mask, n);
}

template <class S>
void dropout_backward(const std::uint8_t* mask,  // (n)
                      double p,
                      const S* dy,               // (n)
                      S* dx,                     // (n)
                      Index n, bool overwrite = false) {
  const S scale = p < 1 ? S(1.0 / (1.0 - p)) : S(0);
  if (overwrite) {
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] * scale : S(0);
  } else {
#pragma omp parallel for schedule(static) if (n > kGrain)
    for (Index i = 0; i < n; ++i)
      if (mask[i]) dx[i] += dy[i] * scale;
  }
}

}  // namespace liere::cpu
