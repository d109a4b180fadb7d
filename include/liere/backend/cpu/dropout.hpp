// liere/backend/cpu/dropout.hpp — inverted dropout with a saved mask (torch.nn.Dropout in training mode).
//
//   keep_i ~ Bernoulli(1 − p),   y_i = x_i · keep_i / (1 − p),   dx_i += dy_i · keep_i / (1 − p)
//   (overwrite: dx_i = ..., for a fresh uninitialised buffer)
// The randomness comes from the Rng passed in: the forward draws one 64-bit key from it and element i is
// kept when hash_uniform(key, i) ≥ p (tensor/random.hpp), so the mask depends on the Rng state and the
// element index only, never on the number of threads. p = 1 drops everything (y = 0), as PyTorch.
#pragma once

#include <cstdint>
#include <liere/backend/cpu/common.hpp>
#include <liere/tensor/random.hpp>

namespace liere::cpu {

template <class S>
void dropout_forward(const S* x,           // (n)
                     double p, Rng& rng,
                     S* y,                 // (n)
                     std::uint8_t* mask,   // (n) saved: 1 kept, 0 dropped
                     Index n) {
  LIERE_ENSURE(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got " << p);
  const std::uint64_t key = rng.next_u64();
  const float pf = float(p);
  const S scale = p < 1 ? S(1.0 / (1.0 - p)) : S(0);
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) {
    const std::uint8_t keep = hash_uniform(key, std::uint64_t(i)) >= pf && p < 1;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : S(0);
  }
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
