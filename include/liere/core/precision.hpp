// liere/core/precision.hpp — the numeric precision of a training run (issue 22: `--precision fp32|tf32|bf16|fp16`)
// and its parser. What a device can run, and the setter, are in backend/precision.hpp (they ask the backends).
//
//   fp32  float everywhere (the default)
//   tf32  float storage, matrix products on TF32 tensor cores (cuda only: cuda::set_tf32)
//   bf16  matrix products of activations and gradients on bf16 operands with fp32 accumulation; weights, Adam's
//         state, LayerNorm, softmax, the loss and the rotation tables in fp32 (cpu: oneDNN's bf16 GEMM where the
//         CPU has AVX512_BF16, backend/cpu/gemm_bf16.hpp; cuda: cuBLAS bf16 GEMMs on devices of compute
//         capability 8.0 or newer, cuda::gemm_act). docs/precision.md says what is rounded.
//   fp16  as bf16 with dynamic loss scaling (not yet on any device)
#pragma once

#include <liere/core/config.hpp>
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

}  // namespace liere
