// liere/tensor/pool.hpp — the buffer pools behind every tensor, one per device: memory is reused from step to
// step.
//
// A training step allocates the same few hundred activation and gradient buffers, of the same sizes, in
// the same order, every step. Handing large blocks back to glibc would unmap them and fault them in again
// on the next step (hundreds of MB, slow), so released blocks stay in the pool, keyed by size, and the
// next request of that size gets one back. Like PyTorch's caching allocator the pool never returns memory
// to the system by itself: `trim()` does (call it after a phase with other shapes, e.g. evaluation with a
// different batch size).
//
// A request takes the smallest cached block that is at least as large and at most twice as large (an
// exact size is always preferred), otherwise a fresh 64-byte aligned block. Blocks are released by the
// deleter of the tensor's storage (see tensor.hpp), so a buffer goes back to the pool the moment its last
// tensor or view dies: during the backward pass, as each closure of the tape runs and is dropped.
//
// Debugging: with LIERE_POOL_POISON=1 in the environment every block handed out is filled with 0xFF bytes
// (a NaN in float and double), so a kernel that reads uninitialised storage shows up as NaNs. Device blocks too
// (a cudaMemset queued before the block's first kernel).
//
// The CUDA pool also serves the CUDA backend's own blocks (cuda::DeviceBlock: the temporaries of its reductions
// and attention, and what an attention layer keeps for its backward): buffer_pool(Device::cuda) installs itself as
// the backend's block source (cuda::set_block_hooks) when it is made.
//
// One pool per device and process (per scalar type it does not matter: blocks are raw bytes), never destroyed,
// so tensors with static storage duration can still release into it at exit. Thread-safe (a mutex): tensors
// are allocated from the main thread; OpenMP workers inside kernels never allocate. The CPU pool takes its
// blocks from aligned_alloc, the CUDA pool from the CUDA backend (cudaMalloc); in a build without one, a CUDA
// tensor is an error that says so.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <map>
#include <mutex>
#include <string_view>

#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/memory.hpp>
#endif

namespace liere {

// Where a pool's blocks come from.
struct BlockSource {
  void* (*allocate)(std::size_t bytes);  // nullptr when out of memory
  void (*release)(void* p);
  void (*poison)(void* p, std::size_t bytes);  // fills a block with 0xFF bytes (LIERE_POOL_POISON)
};

inline BlockSource host_blocks() {
  return {[](std::size_t bytes) -> void* { return std::aligned_alloc(64, bytes); }, [](void* p) { std::free(p); },
          [](void* p, std::size_t bytes) { std::memset(p, 0xFF, bytes); }};
}

inline BlockSource device_blocks(Device d) {
  if (d == Device::cpu) return host_blocks();
#ifdef LIERE_WITH_CUDA
  return {&cuda::device_allocate, &cuda::device_release, &cuda::device_poison};
#else
  LIERE_ENSURE(false, "a tensor on cuda: this build has no CUDA backend (configure with -DLIERE_WITH_CUDA=ON and link "
                      "liere::cuda)");
  return host_blocks();
#endif
}

struct PoolStats {
  std::size_t bytes_in_use = 0;    // handed out now
  std::size_t bytes_cached = 0;    // released, kept for reuse
  std::size_t peak_in_use = 0;     // high-water mark of bytes_in_use since the last reset_peak()
  std::size_t allocations = 0;     // fresh blocks obtained from the system
  std::size_t reuses = 0;          // requests served from the cache
};

class BufferPool {
 public:
  static constexpr std::size_t kAlign = 64;

  explicit BufferPool(BlockSource source = host_blocks(), Device device = Device::cpu)
      : source_(source), device_(device) {}
  Device device() const { return device_; }

  // Bytes rounded up to the alignment; 0 bytes still gives a valid (unique) block.
  static std::size_t round_up(std::size_t bytes) { return ((bytes + kAlign - 1) / kAlign) * kAlign + (bytes == 0) * kAlign; }

  // A block of at least `bytes` bytes, 64-byte aligned; `*capacity` receives its true size (pass it back
  // to release()).
  void* acquire(std::size_t bytes, std::size_t* capacity) {
    const std::size_t want = round_up(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(want);
    if (it != free_.end() && it->first <= 2 * want) {
      void* p = it->second;
      *capacity = it->first;
      stats_.bytes_cached -= it->first;
      free_.erase(it);
      note_use(*capacity);
      ++stats_.reuses;
      if (poison()) source_.poison(p, *capacity);
      return p;
    }
    void* p = source_.allocate(want);
    if (!p && !free_.empty()) {  // out of memory: give the cache back to the system and try once more
      trim_locked();
      p = source_.allocate(want);
    }
    LIERE_ENSURE(p != nullptr, "out of memory on " << to_string(device_) << " allocating " << want << " bytes ("
                                                   << stats_.bytes_in_use << " bytes in use)");
    *capacity = want;
    note_use(want);
    ++stats_.allocations;
    if (poison()) source_.poison(p, want);
    return p;
  }

  void release(void* p, std::size_t capacity) {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.bytes_in_use -= capacity;
    stats_.bytes_cached += capacity;
    free_.emplace(capacity, p);
  }

  // Returns every cached (released) block to the system.
  void trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    trim_locked();
  }

  PoolStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_in_use = stats_.bytes_in_use;
  }

 private:
  static bool poison() {
    static const bool on = [] {
      const char* e = std::getenv("LIERE_POOL_POISON");
      return e && *e && std::string_view(e) != "0";
    }();
    return on;
  }
  void note_use(std::size_t bytes) {
    stats_.bytes_in_use += bytes;
    if (stats_.bytes_in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.bytes_in_use;
  }
  void trim_locked() {
    for (auto& [size, p] : free_) source_.release(p);
    free_.clear();
    stats_.bytes_cached = 0;
  }

  BlockSource source_;
  Device device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  PoolStats stats_;
};

// The process-wide pool of a device (intentionally leaked: it must outlive every tensor, including static ones).
inline BufferPool& buffer_pool(Device d = Device::cpu) {
  if (d == Device::cpu) {
    static BufferPool* cpu = new BufferPool(host_blocks(), Device::cpu);
    return *cpu;
  }
  static BufferPool* gpu = [] {
    auto* pool = new BufferPool(device_blocks(Device::cuda), Device::cuda);
#ifdef LIERE_WITH_CUDA
    cuda::set_block_hooks(
        {[](std::size_t bytes, std::size_t* capacity) { return buffer_pool(Device::cuda).acquire(bytes, capacity); },
         [](void* p, std::size_t capacity) { buffer_pool(Device::cuda).release(p, capacity); }});
#endif
    return pool;
  }();
  return *gpu;
}

}  // namespace liere
