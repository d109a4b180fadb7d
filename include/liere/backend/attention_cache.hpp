// liere/backend/attention_cache.hpp — what an attention layer's forward keeps for its backward, on any device.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace liere {

// An allocator of 64-byte aligned memory (the buffer pool's alignment, tensor/pool.hpp), for host scratch that the
// kernels read with vector instructions: Eigen's small products and reductions start with scalar steps up to the
// first aligned element, so the same data at another address mod 64 is summed in another order. With malloc's
// 16-byte alignment the results of a step then depended on the heap's layout (e.g. a process with MPI's runtime
// loaded gave other losses from run to run).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const Aligned64<U>&) const noexcept { return true; }
};
template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

// What the forward keeps for the backward, and scratch space reused from call to call. The CPU kernels
// (backend/cpu/attention.hpp) use the host vectors; the CUDA kernels keep their device buffers in `device`
// (backend/cuda/attention.cu), where the attention map stays unless probs() copies it.
template <class Scalar>
struct AttentionCache {
  AlignedVector<Scalar> xq, xk;    // (B, T, H, D) P·q, P·k           (only with transforms)
  AlignedVector<Scalar> qr, kr;    // (B, T, H, D) rotated q̂, k̂       (only with rotations)
  AlignedVector<Scalar> probs;     // (B, H, T, T) the attention map (CPU)
  AlignedVector<Scalar> dqr, dkr;  // backward scratch, (B, T, H, D)
  AlignedVector<Scalar> dxq, dxk;  // backward scratch, (B, T, H, D)
  AlignedVector<Scalar> lse, out;  // flash attention (backend/cpu/flash_attention.hpp): the log-sum-exp of every
                                   // query's scores (B, H, T) and the output (B, T, H, D); no attention map
  std::shared_ptr<void> device;  // the CUDA backend's buffers (q̂, k̂, v, the attention map) of the last forward
  std::shared_ptr<void> flash_device;  // the CUDA flash attention's buffers (out, lse, the mask) of the last forward
  // Set by the caller before a forward. backward: a backward of this forward will run (the CUDA backend keeps
  // nothing for one otherwise); keep_probs: keep the attention map also when no backward runs. The CPU kernels
  // always keep the map (host memory) and ignore both.
  bool backward = true;
  bool keep_probs = false;
};

}  // namespace liere
