// liere/backend/cuda/common.cuh — what the .cu files of the CUDA backend share: error checks, launch sizes and the
// launch helper (every kernel launch), the cuBLAS handle and the range check of cuBLAS's int arguments. Included by .cu
// files only (their temporaries are DeviceBlocks, memory.hpp).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <liere/backend/cuda/blas_int.hpp>
#include <liere/backend/cuda/memory.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::cuda {

// Throws a liere::Error naming the call and CUDA's message.
void check(cudaError_t e, const char* what, const char* file, int line);
void check_blas(cublasStatus_t s, const char* what, const char* file, int line);
// After a kernel launch (or a cuBLAS call): a bad configuration is reported at once; with LIERE_CUDA_SYNC=1
// (sync_launches()) the stream is also synchronised and a fault is reported naming the kernel. Otherwise a fault
// surfaces at the next synchronisation, whose error then says to set LIERE_CUDA_SYNC=1.
void launched(const char* kernel, const char* file, int line);
#define LIERE_CUDA_CHECK(call) ::liere::cuda::check((call), #call, __FILE__, __LINE__)
#define LIERE_CUBLAS_CHECK(call)                                        \
  do {                                                                  \
    ::liere::cuda::check_blas((call), #call, __FILE__, __LINE__);       \
    if (::liere::cuda::sync_launches()) ::liere::cuda::launched(#call, __FILE__, __LINE__); \
  } while (0)

// The cuBLAS handle of this process (created on first use, in the math mode of tf32()).
cublasHandle_t blas();

// Whether p is a multiple of `bytes` (float4 loads: 16; a pack's four 16-bit values: 8).
inline bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

inline constexpr int kThreads = 256;
inline unsigned blocks_for(Index n, int threads = kThreads) {
  const Index b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : b);
}

// Grid-stride loop over [0, n).
#define LIERE_CUDA_LOOP(i, n)                                                                  \
  for (::liere::Index i = ::liere::Index(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);      \
       i += ::liere::Index(blockDim.x) * gridDim.x)

// Launch sizes of an elementwise kernel over n elements: at most 65535·8 blocks, the rest by grid stride.
inline unsigned grid_for(Index n) {
  const unsigned b = blocks_for(n);
  return b > 65535u * 8u ? 65535u * 8u : b;
}

// The one way the backend launches a kernel: kernel<<<grid, threads, smem>>>(args…) (smem: bytes of dynamic
// shared memory), then launched(name) (a bad configuration reported at once; with LIERE_CUDA_SYNC=1 a fault too,
// naming `name`).
#define LIERE_CUDA_LAUNCH_SMEM(name, kernel, grid, threads, smem, ...) \
  do {                                                                 \
    kernel<<<(grid), (threads), (smem)>>>(__VA_ARGS__);                \
    ::liere::cuda::launched((name), __FILE__, __LINE__);               \
  } while (0)
// Without dynamic shared memory.
#define LIERE_CUDA_LAUNCH_AS(name, kernel, grid, threads, ...) \
  LIERE_CUDA_LAUNCH_SMEM(name, kernel, grid, threads, 0, __VA_ARGS__)
// Its common case: a grid-stride kernel (LIERE_CUDA_LOOP) over n elements, grid_for(n) blocks of kThreads, named
// after the kernel; nothing is launched when n ≤ 0.
#define LIERE_CUDA_LAUNCH(kernel, n, ...)                                                                      \
  do {                                                                                                         \
    if ((n) > 0)                                                                                               \
      LIERE_CUDA_LAUNCH_AS(#kernel, kernel, ::liere::cuda::grid_for(n), ::liere::cuda::kThreads, __VA_ARGS__); \
  } while (0)

// A warp per row (the shared bodies' Lanes = 32, kernels/lanes.hpp). Such a kernel loops over n·kWarp threads
// (LIERE_CUDA_LAUNCH(k, n * kWarp, …): blocks of kThreads = 8 warps, the loop's bound and stride multiples of 32),
// so the 32 lanes of a warp take the same row and stay together for the shuffles; thread t is lane t % 32 of row
// t / 32. WarpSum and WarpMax give every lane the warp's total (xor shuffles at offsets 16, 8, …, 1: the order of
// kernels::lane_tree_sum, the same bits on every lane).
#ifdef __CUDACC__
// One block of 256 threads: thread j sums elements j, j + 256, … (in order), then a fixed tree.
template <class A>
__device__ inline A block_sum(A v) {
  __shared__ A s[kThreads];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  return s[0];
}

inline constexpr int kWarp = 32;
static_assert(kThreads % kWarp == 0, "a block is whole warps");
struct WarpSum {
  template <class A>
  __device__ A operator()(A v) const {
    for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
};
struct WarpMax {  // the larger of each pair (a NaN lane's value is dropped, as in the bodies' own comparisons)
  template <class A>
  __device__ A operator()(A v) const {
    for (int o = kWarp / 2; o > 0; o /= 2) {
      const A u = __shfl_xor_sync(0xffffffffu, v, o);
      v = u > v ? u : v;
    }
    return v;
  }
};
#endif

}  // namespace liere::cuda
