// liere/backend/cuda/memory.hpp — device memory for the CUDA buffer pool (tensor/pool.hpp) and copies between
// the host and the device. Declarations only: the definitions are in memory.cu, compiled into liere::cuda
// (LIERE_WITH_CUDA).
#pragma once

#include <cstddef>
#include <liere/core/device.hpp>

namespace liere::cuda {

// cudaMalloc / cudaFree; device_allocate returns nullptr when the device is out of memory.
void* device_allocate(std::size_t bytes);
void device_release(void* p);

// bytes from src on src_device to dst on dst_device (host ↔ device or device ↔ device), synchronous.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);

}  // namespace liere::cuda
