// liere/backend/cuda/ops.hpp — the CUDA backend as the device seam sees it (backend/dispatch.hpp): CudaOps has a
// static function for every engine op, with the name and signature of the CPU kernel in backend/cpu/, in float.
// The definitions are in the .cu files beside this header, compiled into liere::cuda (LIERE_WITH_CUDA).
#pragma once

#include <cstddef>
#include <liere/backend/cuda/memory.hpp>
#include <liere/core/device.hpp>

namespace liere::backend {

struct CudaOps {
  static void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
    cuda::copy_bytes(dst, dst_device, src, src_device, bytes);
  }
};

}  // namespace liere::backend
