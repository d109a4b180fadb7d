// liere/backend/cpu/optim.hpp — the optimizer's kernels on the CPU: the Adam/AdamW update and the sums and
// scalings of gradient clipping.
//
//   adam_update    every element through kernels::adam_update (backend/kernels/adam.hpp)
//   sum_squares    Σ x_i² in double; chunks of 8192 summed in parallel and added in order (thread-count
//                  independent)
//   scale          x *= c
//   clip_scale_many  x *= the clipping coefficient of a Σg² in memory (kernels/clip.hpp)
//   *_many         the same for a list of tensors (sum_squares_many: their total, added in order): one call per
//                  device for all the parameters
#pragma once

#include <liere/backend/cpu/common.hpp>
#include <liere/backend/kernels/adam.hpp>
#include <liere/backend/kernels/clip.hpp>
#include <vector>

namespace liere::cpu {

template <class S>
void adam_update(S* theta,     // (n) parameters, updated
                 const S* g,   // (n) gradient
                 S* m, S* v,   // (n) first and second moments, updated
                 Index n, const kernels::AdamStep<S>& step) {
  if (!kernels::gate_open(step.gate_loss, step.gate_sumsq)) return;
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) kernels::adam_update(theta[i], g[i], m[i], v[i], step);
}

template <class S>
double sum_squares(const S* x, Index n) {
  constexpr Index kChunk = 8192;
  const Index nc = (n + kChunk - 1) / kChunk;
  std::vector<double> part(std::size_t(nc), 0.0);
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index c = 0; c < nc; ++c) {
    const Index e = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (Index i = c * kChunk; i < e; ++i) s += double(x[i]) * double(x[i]);
    part[std::size_t(c)] = s;
  }
  double total = 0.0;
  for (double s : part) total += s;
  return total;
}

// Σ_k sum_squares(xs[k], ns[k]), the tensors in order (the global gradient norm: the CUDA side reads it back once).
template <class S>
double sum_squares_many(const S* const* xs, const Index* ns, int count) {
  double total = 0.0;
  for (int k = 0; k < count; ++k) total += sum_squares(xs[k], ns[k]);
  return total;
}
// The same total written to *out (memory of the tensors' device: on a GPU no host waits for it).
template <class S>
void sum_squares_many_into(const S* const* xs, const Index* ns, int count, double* out) {
  *out = sum_squares_many(xs, ns, count);
}

template <class S>
void scale(S* x, Index n, S c) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) x[i] *= c;
}

// The multi-tensor forms of the optimizer's per-parameter ops, one call for every parameter of a device (the CUDA
// side launches once per kernels::kMultiTensor tensors instead of once per parameter): the same updates.
template <class S>
void adam_update_many(const kernels::AdamTensor<S>* ts, int count) {
  for (int k = 0; k < count; ++k) adam_update(ts[k].theta, ts[k].g, ts[k].m, ts[k].v, ts[k].n, ts[k].step);
}
template <class S>
void scale_many(S* const* xs, const Index* ns, int count, S c) {
  for (int k = 0; k < count; ++k) scale(xs[k], ns[k], c);
}
// Clipping by the norm in the device's memory: every x × S(kernels::clip_from_sum(*sumsq, max_norm)), nothing when
// that is 1 (the norm within max_norm, or Σg² not finite): scale_many with the host's coefficient, the same bits.
template <class S>
void clip_scale_many(S* const* xs, const Index* ns, int count, const double* sumsq, double max_norm) {
  const double c = kernels::clip_from_sum(*sumsq, max_norm);
  if (c != 1.0) scale_many(xs, ns, count, S(c));
}


}  // namespace liere::cpu
