// liere/core/precision.hpp — the numeric precision of a training run (issue 22: `--precision fp32|tf32|bf16|fp16`),
// its parser and what this build can run.
//
//   fp32  float everywhere (the default)
//   tf32  float storage, matrix products on TF32 tensor cores (cuda only: cuda::set_tf32)
//   bf16  bf16 activations and GEMM inputs, fp32 accumulation, master weights and statistics (not yet: the bf16
//         storage type and the fp32-table property test exist, backend/kernels/bf16.hpp, tests/test_bf16.cpp)
//   fp16  as bf16 with dynamic loss scaling (not yet)
// check_precision names what is supported on a device, so that a program can stop with a clear message (the
// programs exit with code 2).
#pragma once

#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <string>

namespace liere {

enum class Precision { fp32, tf32, bf16, fp16 };

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

inline Precision parse_precision(const std::string& s) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16, Precision::fp16})
    if (s == to_string(p)) return p;
  LIERE_ENSURE(false, "unknown --precision value '" << s << "'; allowed: fp32, tf32, bf16, fp16");
  return Precision::fp32;
}

// Whether the engine can train in precision p on device d; the message says what is possible instead.
inline bool precision_supported(Precision p, Device d) {
  return p == Precision::fp32 || (p == Precision::tf32 && d == Device::cuda);
}
inline void check_precision(Precision p, Device d) {
  LIERE_ENSURE(p != Precision::tf32 || d == Device::cuda,
               "--precision tf32 needs --device cuda (TF32 is a tensor-core mode); on " << to_string(d) << " use fp32");
  LIERE_ENSURE(p == Precision::fp32 || p == Precision::tf32,
               "--precision " << to_string(p) << " is not supported by this build on " << to_string(d)
                              << " (the engine trains in fp32" << (d == Device::cuda ? " or tf32" : "")
                              << "; bf16/fp16 training is not implemented yet)");
}

}  // namespace liere
