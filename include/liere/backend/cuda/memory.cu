// liere/backend/cuda/memory.cu — the device, its memory, copies, errors, the cuBLAS handle and the scratch
// buffers of the CUDA backend (memory.hpp, common.cuh).
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/cuda/memory.hpp>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>

namespace liere::cuda {

void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so that the next call does not see it again
  std::ostringstream o;
  o << what << ": CUDA error " << int(e) << " (" << cudaGetErrorName(e) << "): " << cudaGetErrorString(e);
  detail::fail(file, line, o.str());
}

void check_blas(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::ostringstream o;
  o << what << ": cuBLAS error " << int(s) << " (" << cublasGetStatusName(s) << "): " << cublasGetStatusString(s);
  detail::fail(file, line, o.str());
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_description() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device";
  int dev = 0;
  LIERE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  LIERE_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  std::ostringstream o;
  o.precision(3);
  o << p.name << " (sm_" << p.major << p.minor << ", " << double(p.totalGlobalMem) / (1u << 30) << " GiB)";
  return o.str();
}

void* device_allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  LIERE_CUDA_CHECK(e);
  return p;
}

void device_release(void* p) {
  if (p) cudaFree(p);  // at exit the context may be gone already: nothing to report then
}

void memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  LIERE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  const cudaMemcpyKind kind = dst_device == Device::cpu
                                  ? (src_device == Device::cpu ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                                  : (src_device == Device::cpu ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  LIERE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void synchronize() { LIERE_CUDA_CHECK(cudaDeviceSynchronize()); }

namespace {
std::mutex g_mutex;
bool g_tf32 = [] {
  const char* e = std::getenv("LIERE_CUDA_TF32");
  return e && *e && std::string_view(e) != "0";
}();
cublasHandle_t g_blas = nullptr;
struct Scratch {
  void* p = nullptr;
  std::size_t bytes = 0;
};
Scratch g_scratch[kScratchSlots];
}  // namespace

void set_tf32(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tf32 = on;
  if (g_blas)
    LIERE_CUBLAS_CHECK(cublasSetMathMode(g_blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}
bool tf32() { return g_tf32; }

cublasHandle_t blas() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_blas) {  // intentionally never destroyed (tensors with static storage may still run kernels at exit)
    LIERE_CUBLAS_CHECK(cublasCreate(&g_blas));
    LIERE_CUBLAS_CHECK(cublasSetMathMode(g_blas, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  return g_blas;
}

void* scratch(int slot, std::size_t bytes) {
  LIERE_ENSURE(slot >= 0 && slot < kScratchSlots, "cuda::scratch: slot " << slot);
  Scratch& s = g_scratch[slot];
  if (s.bytes < bytes) {
    if (s.p) LIERE_CUDA_CHECK(cudaFree(s.p));  // cudaFree waits for the kernels that may still read it
    s.p = nullptr;
    s.bytes = 0;
    const std::size_t want = bytes + bytes / 4 + 256;
    s.p = device_allocate(want);
    LIERE_ENSURE(s.p, "out of memory on cuda allocating " << want << " bytes of scratch space");
    s.bytes = want;
  }
  return s.p;
}

}  // namespace liere::cuda
