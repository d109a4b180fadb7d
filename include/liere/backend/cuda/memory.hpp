// liere/backend/cuda/memory.hpp — the CUDA device: whether there is one, device memory for the CUDA buffer pool
// (tensor/pool.hpp) and the blocks the backend takes from that pool for itself, copies between the host and the
// device, the debugging switches, and the math mode of the GEMMs. Declarations (and the small DeviceBlock) only:
// the definitions are in memory.cu, compiled into liere::cuda (LIERE_WITH_CUDA).
//
// Every kernel and copy of the backend runs on one stream (the legacy default stream), so a buffer released to
// the pool and handed out again is only touched after the kernels queued before it: no event bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <liere/core/device.hpp>
#include <liere/core/precision.hpp>
#include <string>
#include <utility>

namespace liere::cuda {

// The number of CUDA devices this process sees; 0 when there is none or the driver cannot be used (no error).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or why there is no device.
std::string device_description();

// cudaMalloc / cudaFree; device_allocate returns nullptr when the device is out of memory. The first call checks
// that this build has code for the device (check_device_code).
void* device_allocate(std::size_t bytes);
void device_release(void* p);
// bytes of 0xFF at p (a NaN in float), queued on the stream: the pool's LIERE_POOL_POISON for device blocks.
void device_poison(void* p, std::size_t bytes);

// Throws a liere::Error naming the device's architecture, the architectures this build has code for and the
// CMake option (CMAKE_CUDA_ARCHITECTURES) when the kernels cannot run on the device (no machine code for it and
// no PTX it can compile). Checked once, by the first device_allocate; no effect without a device.
void check_device_code();
// The architectures liere::cuda was built for (CMAKE_CUDA_ARCHITECTURES), e.g. "80-real;86-real;90-virtual".
const char* built_architectures();

// Where the backend's own device memory comes from: its temporaries (a reduction's partial sums, attention's
// backward buffers) and what an attention layer keeps between its forward and backward. tensor/pool.hpp installs
// the CUDA BufferPool here when it makes it, so these blocks are pool blocks: reused, covered by the pool's
// trim-and-retry on out of memory, and given back with trim(). Until then (a program calling api.hpp on its own
// cudaMalloc'd pointers) cudaMalloc and cudaFree.
struct BlockHooks {
  void* (*acquire)(std::size_t bytes, std::size_t* capacity);  // throws when out of memory
  void (*release)(void* p, std::size_t capacity);
};
void set_block_hooks(BlockHooks hooks);
BlockHooks block_hooks();

// A device block from block_hooks(), given back when the object goes (or on reset()). Every kernel runs on the
// one stream, so a block may go back to the pool while kernels queued before still use it.
class DeviceBlock {
 public:
  DeviceBlock() = default;
  explicit DeviceBlock(std::size_t bytes) {
    const BlockHooks h = block_hooks();
    p_ = h.acquire(bytes, &capacity_);
    release_ = h.release;
  }
  DeviceBlock(DeviceBlock&& o) noexcept { swap(o); }
  DeviceBlock& operator=(DeviceBlock&& o) noexcept {
    DeviceBlock(std::move(o)).swap(*this);
    return *this;
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock() { reset(); }
  void reset() {
    if (p_) release_(p_, capacity_);
    p_ = nullptr;
    capacity_ = 0;
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  explicit operator bool() const { return p_ != nullptr; }
  std::size_t capacity() const { return capacity_; }  // bytes (the pool's block size: at least those asked for)

 private:
  void swap(DeviceBlock& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(capacity_, o.capacity_);
    std::swap(release_, o.release_);
  }
  void* p_ = nullptr;
  std::size_t capacity_ = 0;
  void (*release_)(void*, std::size_t) = nullptr;
};
// A device block of `count` floats.
inline DeviceBlock device_floats(std::size_t count) { return DeviceBlock(count * sizeof(float)); }
// Free and total device memory, bytes.
void memory_info(std::size_t* free_bytes, std::size_t* total_bytes);

// bytes from src on src_device to dst on dst_device (host ↔ device or device ↔ device). Reading the device waits for
// it; a copy to the device returns with src free to reuse, ordered with the kernels (copy_to_device).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// bytes from host memory src to the device at dst. cudaMemcpy from pageable memory first waits for every queued
// kernel (a training step had two such waits: its batch, and its labels after the forward). Under
// set_staged_copies(true) (or LIERE_CUDA_STAGING=1 in the environment; off by default: written 2026-11-28 without a
// GPU, not yet run on one) copies of up to 8 MiB go through a ring of pinned staging buffers with cudaMemcpyAsync
// on the kernels' stream: the host waits only for the buffer's copy of eight copies before. test_cuda checks the
// values and a ViT step's bits both ways; gpu_run.sh times them.
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void set_staged_copies(bool on);
bool staged_copies_on();
// Host-to-device copies since the process started, by the way they went: staged (pinned buffer, cudaMemcpyAsync),
// plain (cudaMemcpy: staging off, or above 8 MiB) and pinned_failures (staging on, no pinned memory left: plain). For
// a test that the staged way ran, and for a side by side that says which way its copies went.
struct CopyCounts {
  std::uint64_t staged = 0, plain = 0, pinned_failures = 0;
};
CopyCounts copy_counts();

// Waits for every queued kernel; throws a liere::Error naming the first asynchronous failure.
void synchronize();

// LIERE_CUDA_SYNC=1 in the environment (debugging): every kernel launch and cuBLAS call is followed by a
// synchronisation, so a kernel that faults is named in the error instead of the next copy that happens to wait.
bool sync_launches();

// GEMMs in TF32 on tensor cores (10-bit mantissa inputs, float accumulation) instead of full float. Off by
// default: the parity tests compare with the CPU in float. Also on with LIERE_CUDA_TF32=1 in the environment.
void set_tf32(bool on);
bool tf32();

// The precision of the products of activations and gradients (gemm_act, api.hpp): fp32 (the default: gemm, in the
// math mode of tf32()), bf16 (operands rounded to bf16, to nearest even as kernels::to_bf16, multiplied on bf16
// tensor cores with fp32 accumulation and fp32 output: cublasGemmEx) or fp16 (the same with kernels::to_fp16 and
// fp16 tensor cores; a trainer scales the loss: optim/loss_scale.hpp). Process-wide, as the CPU's
// cpu::set_gemm_precision: set it before training. bf16 needs bf16_gemm_support(), fp16 fp16_gemm_support();
// otherwise it throws with the reason and changes nothing.
void set_gemm_precision(Precision p);
Precision gemm_precision();
// Whether the current device runs bf16 GEMMs: a device of compute capability 8.0 (Ampere) or newer. *why (when
// given) says what is missing ("no CUDA device", or the device and its compute capability). Asks the driver each
// time (no context is created).
bool bf16_gemm_support(std::string* why = nullptr);
// Likewise fp16 GEMMs on tensor cores: compute capability 7.0 (Volta) or newer.
bool fp16_gemm_support(std::string* why = nullptr);

}  // namespace liere::cuda
