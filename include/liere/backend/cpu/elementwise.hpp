// liere/backend/cpu/elementwise.hpp — residual add, broadcast add, scaling, sum: the small glue ops.
//
//   add            y = a + b                      da += dy,  db += dy                  (residual connections;
//                                                 overwrite_a/b: da = dy / db = dy for fresh buffers)
//   add_broadcast  y[r, :] = x[r, :] + p          dx += dy,  dp += Σ_r dy[r, :]        (absolute position
//                  x (R, M), p (M)                                                      embeddings, biases)
//   mul            y = a ⊙ b                      da += dy ⊙ b,  db += dy ⊙ a          (gates, layer scale)
//   scale          y = s · x                      dx += s · dy
//   sum            y = Σ x                        dx += dy (a scalar)
//   accumulate     d += s                         the "+=" of every backward, in parallel
//   fill, copy     p = v, dst = src               what tensors do with their memory (tensor/tensor.hpp)
//   copy_bytes     the seam's copy between two buffers on the host (cuda::Ops::copy_bytes has the same signature and
//                  also moves bytes to and from a device)
#pragma once

#include <cstdint>
#include <cstring>
#include <liere/backend/cpu/common.hpp>
#include <liere/core/device.hpp>

namespace liere::cpu {

inline constexpr Index kCopyGrain = 1 << 15;  // elements below which fill and copy stay on one thread

template <class S>
void fill(S* p, Index n, S v) {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (Index i = 0; i < n; ++i) p[i] = v;
}
// fill of many tensors (zeroing every gradient: one call per device, cuda::Ops::fill_many a launch per 24).
template <class S>
void fill_many(S* const* xs, const Index* ns, int count, S v) {
  for (int k = 0; k < count; ++k) fill(xs[k], ns[k], v);
}

template <class S>
void copy(S* dst, const S* src, Index n) {
  if (n <= kCopyGrain) {
    std::memcpy(dst, src, std::size_t(n) * sizeof(S));
    return;
  }
  constexpr Index chunk = 1 << 14;
  const Index nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (Index c = 0; c < nchunks; ++c) {
    const Index b = c * chunk, e = std::min(n, b + chunk);
    std::memcpy(dst + b, src + b, std::size_t(e - b) * sizeof(S));
  }
}

// `bytes` bytes from src to dst, both in host memory (a device buffer here is a caller's bug: the dispatch sends
// every copy that touches a device to the CUDA backend).
inline void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  LIERE_ENSURE(dst_device == Device::cpu && src_device == Device::cpu,
               "cpu::copy_bytes: a copy from " << to_string(src_device) << " to " << to_string(dst_device)
                                               << " is not a host copy");
  // In 4-byte words where it can (the grain of copy is in elements: the same threading as a float copy).
  if (bytes % 4 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 4 == 0 && reinterpret_cast<std::uintptr_t>(src) % 4 == 0)
    copy(static_cast<std::uint32_t*>(dst), static_cast<const std::uint32_t*>(src), Index(bytes / 4));
  else
    copy(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), Index(bytes));
}

template <class S>
void accumulate(const S* s,  // (n)
                S* d,        // (n) += s
                Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) d[i] += s[i];
}

template <class S>
void add_forward(const S* a, const S* b,  // (n), (n)
                 S* y,                    // (n)
                 Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// da and db may be the same buffer (add(x, x)); then overwrite_b must be false (only the first use is fresh).
template <class S>
void add_backward(const S* dy,  // (n)
                  std::type_identity_t<S>* da, std::type_identity_t<S>* db,  // (n) or nullptr each
                  Index n, bool overwrite_a = false, bool overwrite_b = false) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) {
    if (da) da[i] = (overwrite_a ? S(0) : da[i]) + dy[i];
    if (db) db[i] = (overwrite_b ? S(0) : db[i]) + dy[i];
  }
}

template <class S>
void add_broadcast_forward(const S* x,  // (R, M)
                           const S* p,  // (M)
                           S* y,        // (R, M)
                           Index R, Index M) {
#pragma omp parallel for schedule(static) if (R * M > kGrain)
  for (Index r = 0; r < R; ++r) {
    const S* xr = x + r * M;
    S* yr = y + r * M;
#pragma omp simd
    for (Index i = 0; i < M; ++i) yr[i] = xr[i] + p[i];
  }
}

template <class S>
void add_broadcast_backward(const S* dy,  // (R, M)
                            std::type_identity_t<S>* dx,  // (R, M) or nullptr
                            std::type_identity_t<S>* dp,  // (M) or nullptr
                            Index R, Index M) {
  if (dx) accumulate(dy, dx, R * M);
  if (dp) colsum_accumulate(dy, R, M, M, dp);
}

template <class S>
void mul_forward(const S* a, const S* b,  // (n), (n)
                 S* y,                    // (n)
                 Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

template <class S>
void mul_backward(const S* a, const S* b,  // (n), (n); a may be nullptr when db is, b when da is
                  const S* dy,             // (n)
                  std::type_identity_t<S>* da, std::type_identity_t<S>* db,  // (n) or nullptr each
                  Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) {
    if (da) da[i] += dy[i] * b[i];
    if (db) db[i] += dy[i] * a[i];
  }
}

template <class S>
void scale_forward(const S* x, S s, S* y, Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) y[i] = s * x[i];
}

template <class S>
void scale_backward(S s, const S* dy, S* dx, Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) dx[i] += s * dy[i];
}

// Σ x in a fixed order (blocks of 4096 summed first, then added in order): thread-count independent.
template <class S>
S sum_forward(const S* x, Index n) {
  constexpr Index kBlock = 4096;
  S total = S(0);
  for (Index b = 0; b < n; b += kBlock) {
    S part = S(0);
    const Index e = std::min(n, b + kBlock);
    for (Index i = b; i < e; ++i) part += x[i];
    total += part;
  }
  return total;
}

template <class S>
void sum_backward(S dy, S* dx, Index n) {
#pragma omp parallel for schedule(static) if (n > kGrain)
  for (Index i = 0; i < n; ++i) dx[i] += dy;
}

// The same with the scalars in memory (device-friendly signatures, as the CUDA backend's): y[0] = Σ x, and
// dx += dy[0].
template <class S>
void sum_forward(const S* x, S* y, Index n) {
  y[0] = sum_forward(x, n);
}
template <class S>
void sum_backward(const S* dy, S* dx, Index n) {
  sum_backward(dy[0], dx, n);
}

}  // namespace liere::cpu
