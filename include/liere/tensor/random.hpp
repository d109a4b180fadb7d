// liere/tensor/random.hpp — random fills of tensors, drawn from liere::Rng (core/rng.hpp, where every
// recipe is described).
#pragma once

#include <liere/core/rng.hpp>
#include <liere/tensor/tensor.hpp>

namespace liere {

// ---- random fills ------------------------------------------------------------------------------------------
template <class S>
void fill_uniform(const TensorT<S>& t, Rng& rng, double lo, double hi) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.uniform(lo, hi));
}
template <class S>
void fill_normal(const TensorT<S>& t, Rng& rng, double mean, double std) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.normal(mean, std));
}
template <class S>
void fill_trunc_normal(const TensorT<S>& t, Rng& rng, double mean, double std, double a = -2.0, double b = 2.0) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.trunc_normal(mean, std, a, b));
}

}  // namespace liere
