// liere/core/config.hpp — version, the host/device marker and the one error-checking macro. The bottom layer:
// it includes nothing of liere, and everything of liere may include it.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

#define LIERE_VERSION_MAJOR 0
#define LIERE_VERSION_MINOR 1
#define LIERE_VERSION_PATCH 0

// Functions that run on the host and, compiled by nvcc, on the device: the per-element and per-row bodies of
// backend/kernels/, which the CPU kernels and the CUDA kernels both call (so the CPU tests run them).
#if defined(__CUDACC__)
#define LIERE_HOST_DEVICE __host__ __device__
#else
#define LIERE_HOST_DEVICE
#endif

// LIERE_OMP(simd reduction(+ : s)) is `#pragma omp simd reduction(+ : s)` in host code compiled with OpenMP and
// nothing elsewhere (device code, builds without OpenMP), so shared bodies can carry their vectorisation hints.
#if defined(_OPENMP) && !defined(__CUDA_ARCH__)
#define LIERE_OMP(directive) _Pragma(LIERE_STRINGIFY(omp directive))
#else
#define LIERE_OMP(directive)
#endif
#define LIERE_STRINGIFY(x) #x

namespace liere {

// Every error liere reports: bad sizes, bad values, bad files. The message names the place and the
// values involved, e.g. "liere/pe/liere.hpp:120: positions: expected 128 values (64 tokens × 2), got 100".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  // Raised at `where` (LIERE_ENSURE: "file:line"): what() is "where: message".
  Error(const std::string& where, const std::string& message)
      : std::runtime_error(where + ": " + message), message_at_(where.size() + 2) {}
  // what() without the place in front of it (all of what() for an error made without one): what a usage error
  // shows the user, who typed a flag, not liere's source.
  const char* message() const noexcept { return what() + message_at_; }

 private:
  std::size_t message_at_ = 0;
};

namespace detail {
[[noreturn]] inline void fail(const char* file, int line, const std::string& msg) {
  // Paths relative to the project: "liere/pe/liere.hpp", "data_tools/cifar.cpp", "examples/train_cifar.cpp".
  std::string f = file;
  for (const char* root : {"include/liere/", "data_tools/", "examples/", "bench/"})
    if (auto pos = f.rfind(root); pos != std::string::npos) {
      f = f.substr(std::string(root) == "include/liere/" ? pos + 8 : pos);
      break;
    }
  throw Error(f + ":" + std::to_string(line), msg);
}
}  // namespace detail

}  // namespace liere

// LIERE_ENSURE(cond, stream-expression): throws liere::Error naming the file, the line and the message.
//   LIERE_ENSURE(x.size() == n, "positions: expected " << n << " values, got " << x.size());
#define LIERE_ENSURE(cond, msg)                               \
  do {                                                        \
    if (!(cond)) {                                            \
      std::ostringstream liere_os_;                           \
      liere_os_ << msg;                                       \
      ::liere::detail::fail(__FILE__, __LINE__, liere_os_.str()); \
    }                                                         \
  } while (0)
