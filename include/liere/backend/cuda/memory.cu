// liere/backend/cuda/memory.cu — the device, its memory, copies, errors and the debugging switches, the cuBLAS
// handle, its precision switches (TF32, bf16 products) and the source of the backend's own blocks (memory.hpp,
// common.cuh).
#include <liere/backend/cuda/common.cuh>
#include <liere/backend/cuda/memory.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>

#ifndef LIERE_CUDA_ARCHITECTURES
#define LIERE_CUDA_ARCHITECTURES "(unknown)"
#endif

namespace liere::cuda {

namespace {
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::string_view(e) != "0";
}

// Errors of a kernel that ran (rather than of the call that reports them): with asynchronous launches they
// surface at a later call.
bool kernel_fault(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

// "sm_75" of the current device, or "" when there is none.
std::string device_arch() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return p.name + std::string(" (sm_") + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

std::string no_code_message() {
  const std::string arch = device_arch();
  return "this build of liere's CUDA backend has no code for " + (arch.empty() ? std::string("this device") : arch) +
         ": it was compiled for CMAKE_CUDA_ARCHITECTURES=" + LIERE_CUDA_ARCHITECTURES +
         " (real: machine code for that architecture; virtual: PTX for it and newer ones); reconfigure with "
         "-DCMAKE_CUDA_ARCHITECTURES=<the device's, e.g. 75 for sm_75, or native> and rebuild";
}

__global__ void k_probe() {}
}  // namespace

bool sync_launches() {
  static const bool on = env_on("LIERE_CUDA_SYNC");
  return on;
}

const char* built_architectures() { return LIERE_CUDA_ARCHITECTURES; }

void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so that the next call does not see it again
  std::ostringstream o;
  o << what << ": CUDA error " << int(e) << " (" << cudaGetErrorName(e) << "): " << cudaGetErrorString(e);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) o << "; " << no_code_message();
  if (kernel_fault(e) && !sync_launches())
    o << " (a kernel queued before this call may have failed: run with LIERE_CUDA_SYNC=1 to have the failing kernel "
         "named)";
  detail::fail(file, line, o.str());
}

void launched(const char* kernel, const char* file, int line) {
  check(cudaGetLastError(), kernel, file, line);
  if (!sync_launches()) return;
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return;
  const std::string what = std::string(kernel) + " (failed while running, LIERE_CUDA_SYNC=1)";
  check(e, what.c_str(), file, line);
}

void check_device_code() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return;
  }
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, k_probe);
  if (e == cudaSuccess) return;
  cudaGetLastError();
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
    detail::fail(__FILE__, __LINE__, no_code_message());
  check(e, "cudaFuncGetAttributes (the device check of the CUDA backend)", __FILE__, __LINE__);
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
  static const bool checked = (check_device_code(), true);  // a failed check throws and is repeated next time
  (void)checked;
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

void device_poison(void* p, std::size_t bytes) {
  if (p && bytes) LIERE_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes));
}

void memory_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  LIERE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

namespace {
// Host-to-device copies through pinned staging buffers (set_staged_copies, memory.hpp): a ring of kStagingSlots
// buffers, each reused once the event recorded after its last copy has completed. Never destroyed: at exit the
// context may be gone before static destructors run.
std::atomic<bool> g_staged{env_on("LIERE_CUDA_STAGING")};
constexpr int kStagingSlots = 8;
constexpr std::size_t kStagingLargest = std::size_t(8) << 20;  // larger copies are cudaMemcpy's
constexpr std::size_t kStagingSmallest = std::size_t(256) << 10;
struct StagingSlot {
  void* host = nullptr;
  std::size_t capacity = 0;
  cudaEvent_t done = nullptr;
};
struct Staging {
  std::mutex mutex;
  StagingSlot slots[kStagingSlots];
  int next = 0;
};
std::atomic<std::uint64_t> g_copies_staged{0}, g_copies_plain{0}, g_pinned_failures{0};
Staging& staging() {
  static Staging* s = new Staging;
  return *s;
}
}  // namespace

void set_staged_copies(bool on) { g_staged = on; }
bool staged_copies_on() { return g_staged; }
CopyCounts copy_counts() { return {g_copies_staged.load(), g_copies_plain.load(), g_pinned_failures.load()}; }

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (!g_staged || bytes > kStagingLargest) {
    LIERE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    ++g_copies_plain;
    return;
  }
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.mutex);
  StagingSlot& s = st.slots[st.next];
  st.next = (st.next + 1) % kStagingSlots;
  if (s.done) LIERE_CUDA_CHECK(cudaEventSynchronize(s.done));  // its last copy has left the buffer
  else LIERE_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  if (s.capacity < bytes) {  // a larger buffer first; the slot keeps its own until it has one
    std::size_t cap = kStagingSmallest;
    while (cap < bytes) cap *= 2;
    void* grown = nullptr;
    if (cudaHostAlloc(&grown, cap, cudaHostAllocPortable) != cudaSuccess) {  // no pinned memory left: the plain way
      cudaGetLastError();
      LIERE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
      ++g_copies_plain, ++g_pinned_failures;
      return;
    }
    void* old = s.host;
    s.host = grown;
    s.capacity = cap;
    if (old) LIERE_CUDA_CHECK(cudaFreeHost(old));  // its last copy has completed (the event above)
  }
  std::memcpy(s.host, src, bytes);
  // Stream 0, where the kernels are launched: ordered after the work queued before it, before the work after it.
  LIERE_CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, 0));
  LIERE_CUDA_CHECK(cudaEventRecord(s.done, 0));
  ++g_copies_staged;
  if (sync_launches()) synchronize();
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device != Device::cpu && src_device == Device::cpu) return copy_to_device(dst, src, bytes);
  const cudaMemcpyKind kind = dst_device == Device::cpu
                                  ? (src_device == Device::cpu ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                                  : (src_device == Device::cpu ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  LIERE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void synchronize() { LIERE_CUDA_CHECK(cudaDeviceSynchronize()); }

namespace {
std::mutex g_mutex;
bool g_tf32 = env_on("LIERE_CUDA_TF32");
Precision g_gemm_precision = Precision::fp32;
cublasHandle_t g_blas = nullptr;

// Without a pool: cudaMalloc and cudaFree.
void* plain_acquire(std::size_t bytes, std::size_t* capacity) {
  void* p = device_allocate(bytes ? bytes : 1);
  LIERE_ENSURE(p, "out of memory on cuda allocating " << bytes << " bytes");
  *capacity = bytes;
  return p;
}
void plain_release(void* p, std::size_t) { device_release(p); }
BlockHooks g_hooks{&plain_acquire, &plain_release};
}  // namespace

void set_block_hooks(BlockHooks hooks) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_hooks = hooks;
}
BlockHooks block_hooks() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_hooks;
}

void set_tf32(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_tf32 = on;
  if (g_blas)
    LIERE_CUBLAS_CHECK(cublasSetMathMode(g_blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}
bool tf32() { return g_tf32; }

namespace {
// Whether the current device has compute capability `need_major`.0 or newer; otherwise *why says what it has.
bool capability_at_least(int need_major, const char* what, std::string* why) {
  std::string w;
  int n = 0, dev = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    w = device_description();
  } else {
    LIERE_CUDA_CHECK(cudaGetDevice(&dev));
    LIERE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    LIERE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major < need_major)
      w = device_description() + " has compute capability " + std::to_string(major) + "." + std::to_string(minor) +
          ": " + what;
  }
  if (why) *why = w;
  return w.empty();
}
}  // namespace

bool bf16_gemm_support(std::string* why) {
  return capability_at_least(8, "bf16 matrix products (bf16 tensor cores) need 8.0 (Ampere) or newer", why);
}
bool fp16_gemm_support(std::string* why) {
  return capability_at_least(7, "fp16 matrix products (fp16 tensor cores) need 7.0 (Volta) or newer", why);
}

void set_gemm_precision(Precision p) {
  LIERE_ENSURE(p == Precision::fp32 || p == Precision::bf16 || p == Precision::fp16,
               "cuda::set_gemm_precision(" << to_string(p) << "): the products of activations and gradients run in "
                                              "fp32 (TF32 is cuda::set_tf32), bf16 or fp16");
  std::string why;
  LIERE_ENSURE(p != Precision::bf16 || bf16_gemm_support(&why), "bf16 products on cuda: " << why);
  LIERE_ENSURE(p != Precision::fp16 || fp16_gemm_support(&why), "fp16 products on cuda: " << why);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_gemm_precision = p;
}
Precision gemm_precision() { return g_gemm_precision; }

cublasHandle_t blas() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_blas) {  // intentionally never destroyed (tensors with static storage may still run kernels at exit)
    LIERE_CUBLAS_CHECK(cublasCreate(&g_blas));
    LIERE_CUBLAS_CHECK(cublasSetMathMode(g_blas, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  return g_blas;
}

}  // namespace liere::cuda
