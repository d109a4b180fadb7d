// liere/backend/cuda/common.cuh — what the .cu files of the CUDA backend share: error checks, launch sizes, the
// cuBLAS handle and the backend's scratch buffers. Included by .cu files only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>

namespace liere::cuda {

// Throws a liere::Error naming the call and CUDA's message.
void check(cudaError_t e, const char* what, const char* file, int line);
void check_blas(cublasStatus_t s, const char* what, const char* file, int line);
#define LIERE_CUDA_CHECK(call) ::liere::cuda::check((call), #call, __FILE__, __LINE__)
#define LIERE_CUBLAS_CHECK(call) ::liere::cuda::check_blas((call), #call, __FILE__, __LINE__)
// After a launch: a bad configuration is reported at once (kernel faults surface at the next synchronisation).
#define LIERE_CUDA_LAUNCHED(name) ::liere::cuda::check(cudaGetLastError(), name, __FILE__, __LINE__)

// The cuBLAS handle of this process (created on first use, in the math mode of tf32()).
cublasHandle_t blas();

// A device buffer of at least `bytes` that stays allocated for reuse (slot 0..kScratchSlots-1): the temporaries
// of one op. Every op runs on the one stream, so an op may use a slot that the previous op used.
inline constexpr int kScratchSlots = 8;
void* scratch(int slot, std::size_t bytes);

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

}  // namespace liere::cuda
