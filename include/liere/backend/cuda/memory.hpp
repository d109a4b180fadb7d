// liere/backend/cuda/memory.hpp — the CUDA device: whether there is one, device memory for the CUDA buffer pool
// (tensor/pool.hpp), copies between the host and the device, and the math mode of the GEMMs. Declarations
// only: the definitions are in memory.cu, compiled into liere::cuda (LIERE_WITH_CUDA).
//
// Every kernel and copy of the backend runs on one stream (the legacy default stream), so a buffer released to
// the pool and handed out again is only touched after the kernels queued before it: no event bookkeeping.
#pragma once

#include <cstddef>
#include <liere/core/device.hpp>
#include <string>

namespace liere::cuda {

// The number of CUDA devices this process sees; 0 when there is none or the driver cannot be used (no error).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or why there is no device.
std::string device_description();

// cudaMalloc / cudaFree; device_allocate returns nullptr when the device is out of memory.
void* device_allocate(std::size_t bytes);
void device_release(void* p);
// Free and total device memory, bytes.
void memory_info(std::size_t* free_bytes, std::size_t* total_bytes);

// bytes from src on src_device to dst on dst_device (host ↔ device or device ↔ device), synchronous for the host.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);

// Waits for every queued kernel; throws a liere::Error naming the first asynchronous failure.
void synchronize();

// GEMMs in TF32 on tensor cores (10-bit mantissa inputs, float accumulation) instead of full float. Off by
// default: the parity tests compare with the CPU in float. Also on with LIERE_CUDA_TF32=1 in the environment.
void set_tf32(bool on);
bool tf32();

}  // namespace liere::cuda
