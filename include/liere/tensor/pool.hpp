// liere/tensor/pool.hpp — the buffer pool behind every tensor: memory is reused from step to step.
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
// (a NaN in float and double), so a kernel that reads uninitialised storage shows up as NaNs.
//
// One pool per process (per scalar type it does not matter: blocks are raw bytes), never destroyed, so
// tensors with static storage duration can still release into it at exit. Thread-safe (a mutex): tensors
// are allocated from the main thread; OpenMP workers inside kernels never allocate.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <liere/config.hpp>
#include <map>
#include <mutex>
#include <string_view>

namespace liere {

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
      if (poison()) std::memset(p, 0xFF, *capacity);
      return p;
    }
    void* p = std::aligned_alloc(kAlign, want);
    if (!p && !free_.empty()) {  // out of memory: give the cache back to the system and try once more
      trim_locked();
      p = std::aligned_alloc(kAlign, want);
    }
    LIERE_ENSURE(p != nullptr, "BufferPool: out of memory allocating " << want << " bytes (" << stats_.bytes_in_use
                                                                       << " bytes in use)");
    *capacity = want;
    note_use(want);
    ++stats_.allocations;
    if (poison()) std::memset(p, 0xFF, want);
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
    for (auto& [size, p] : free_) std::free(p);
    free_.clear();
    stats_.bytes_cached = 0;
  }

  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  PoolStats stats_;
};

// The process-wide pool (intentionally leaked: it must outlive every tensor, including static ones).
inline BufferPool& buffer_pool() {
  static BufferPool* pool = new BufferPool();
  return *pool;
}

}  // namespace liere
