// liere/backend/dispatch.hpp — the device seam: every engine op calls its kernel through LIERE_DISPATCH, which
// picks, once, the function of the same name and signature in the backend of the tensors' device:
//
//   LIERE_DISPATCH(S, device, linear_forward, x, w, b, y, N, C, OC)
//     device cpu  → liere::cpu::linear_forward(x, w, b, y, N, C, OC)           (backend/cpu/*.hpp)
//     device cuda → liere::cuda::Ops::linear_forward(…)                         (backend/cuda/, float only)
//
// That is all an op needs to be dispatched: the CPU function in backend/cpu/ and the static function of the same
// name in liere::cuda::Ops (backend/cuda/api.hpp, defined in a .cu file). No list of ops, no forwarding layer: the
// name is looked up on each side where the macro expands (SeamOps, backend/cuda/ops.hpp, adds only attention's
// views-to-pointers step, which nvcc cannot compile). docs/architecture.md, "Adding an op", has the steps.
//
// The CUDA side exists only in builds with LIERE_WITH_CUDA (target liere::cuda). Anything else — a CUDA tensor
// in a build without it, an op or a scalar type with no CUDA kernel — stops with a liere::Error that names the
// op and the device, never a silent fallback.
#pragma once

#include <cstdlib>
#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <type_traits>
#include <utility>

#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/ops.hpp>
#endif

namespace liere::backend {

#ifdef LIERE_WITH_CUDA
inline constexpr bool kHaveCuda = true;
#else
inline constexpr bool kHaveCuda = false;
#endif

// The error of an op that has no kernel for this device (and scalar type).
[[noreturn]] inline void no_kernel(const char* op, Device d, const char* scalar) {
  if (d == Device::cuda && !kHaveCuda)
    LIERE_ENSURE(false, op << " on cuda: this build has no CUDA backend (configure with -DLIERE_WITH_CUDA=ON and link "
                              "liere::cuda)");
  LIERE_ENSURE(false, op << " has no " << scalar << " kernel on " << to_string(d)
                         << (d == Device::cuda ? " (the CUDA backend computes in float)" : ""));
  std::abort();
}

template <class S>
constexpr const char* scalar_label() {
  return std::is_same_v<S, float> ? "float" : std::is_same_v<S, double> ? "double" : "this scalar type's";
}

// Runs cpu_f() on the CPU, cuda_f(cuda::SeamOps{}) on a CUDA device when the build and the scalar type have kernels.
template <class S, class CpuF, class CudaF>
decltype(auto) dispatch(Device d, const char* op, CpuF&& cpu_f, CudaF&& cuda_f) {
  if (d == Device::cpu) return cpu_f();
#ifdef LIERE_WITH_CUDA
  if constexpr (std::is_same_v<S, float>) {
    if (d == Device::cuda) return cuda_f(cuda::SeamOps{});
  }
#else
  (void)cuda_f;
#endif
  no_kernel(op, d, scalar_label<S>());
}

}  // namespace liere::backend

// LIERE_DISPATCH(S, device, name, args...): cpu::name(args...) or cuda::Ops::name(args...) on `device`, with the
// scalar type S of the op (only float has CUDA kernels). The CUDA call names its class through the lambda's
// argument, so it is looked up only where it is instantiated: for float, in builds with the backend.
#define LIERE_DISPATCH(S, dev, name, ...)                                                              \
  ::liere::backend::dispatch<S>(                                                                      \
      (dev), #name, [&]() -> decltype(auto) { return ::liere::cpu::name(__VA_ARGS__); },              \
      [&](auto cuda_ops) -> decltype(auto) { return decltype(cuda_ops)::name(__VA_ARGS__); })
