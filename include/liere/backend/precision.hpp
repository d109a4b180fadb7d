// liere/backend/precision.hpp — what precision (core/precision.hpp) each device can train in, and the one call
// that sets it for a process (the C++ API of `--precision`).
//
//   precision_supported(p, d, &why)   fp32 everywhere; tf32 on cuda; bf16 on cpu where cpu::bf16_gemm_support()
//                                     (oneDNN's bf16 GEMM and AVX512_BF16; backend/cpu/gemm_bf16.hpp), on cuda where
//                                     cuda::bf16_gemm_support() (a device of compute capability 8.0 or newer;
//                                     backend/cuda/memory.hpp); fp16 on cuda where cuda::fp16_gemm_support() (7.0 or
//                                     newer; written 2026-11-26 without a GPU), not on cpu. why says what is missing
//                                     and what to use instead.
//   check_precision(p, d)             throws liere::Error with that message (the programs exit with code 2)
//   set_precision(p, d)               checks, then sets the mode of d's matrix products: cpu::set_gemm_precision
//                                     (fp32 or bf16 for every later product of activations and gradients), or on
//                                     cuda cuda::set_tf32 (TF32 or full float for gemm) and cuda::set_gemm_precision
//                                     (fp32, bf16 or fp16 for gemm_act, the products of activations and gradients:
//                                     the CPU's products). Process-wide, like torch.backends.cuda.matmul.allow_tf32:
//                                     call it before training. Weights, gradients, Adam's state and checkpoints stay
//                                     fp32 whatever it is, so checkpoints move freely between fp32 and bf16 runs.
#pragma once

#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/core/config.hpp>
#include <liere/core/device.hpp>
#include <liere/core/precision.hpp>
#include <string>

#ifdef LIERE_WITH_CUDA
#include <liere/backend/cuda/memory.hpp>
#endif

namespace liere {

inline bool precision_supported(Precision p, Device d, std::string* why = nullptr) {
  std::string w;
  bool ok = false;
  switch (p) {
    case Precision::fp32: ok = true; break;
    case Precision::tf32:
      ok = d == Device::cuda;
      if (!ok) w = "--precision tf32 needs --device cuda (TF32 is a tensor-core mode); on cpu use fp32 or bf16";
      break;
    case Precision::bf16:
      if (d == Device::cpu) {
        std::string cpu_why;
        ok = cpu::bf16_gemm_support(&cpu_why);
        if (!ok) w = "--precision bf16 is not supported on cpu here: " + cpu_why + "; use --precision fp32";
      } else {
#ifdef LIERE_WITH_CUDA
        std::string cuda_why;
        ok = cuda::bf16_gemm_support(&cuda_why);
        if (!ok)
          w = "--precision bf16 is not supported on cuda here: " + cuda_why + "; use --precision fp32 there, or bf16 "
              "on --device cpu";
#else
        w = "--precision bf16 is not supported on cuda: this build has no CUDA backend; use bf16 on --device cpu";
#endif
      }
      break;
    case Precision::fp16:
      if (d == Device::cpu) {
        w = "--precision fp16 is not supported on cpu (oneDNN 2.x has no fp16 GEMM); use --precision bf16, which "
            "keeps fp32's range and needs no loss scaling, or fp32";
      } else {
#ifdef LIERE_WITH_CUDA
        std::string cuda_why;
        ok = cuda::fp16_gemm_support(&cuda_why);
        if (!ok) w = "--precision fp16 is not supported on cuda here: " + cuda_why + "; use --precision fp32";
#else
        w = "--precision fp16 is not supported on cuda: this build has no CUDA backend; use --precision bf16 on "
            "--device cpu, or fp32";
#endif
      }
      break;
  }
  if (why) *why = ok ? std::string() : w;
  return ok;
}

inline void check_precision(Precision p, Device d) {
  std::string why;
  LIERE_ENSURE(precision_supported(p, d, &why), why);
}

inline void set_precision(Precision p, Device d) {
  check_precision(p, d);
  if (d == Device::cpu) {
    cpu::set_gemm_precision(p);
  } else {
#ifdef LIERE_WITH_CUDA
    cuda::set_tf32(p == Precision::tf32);
    cuda::set_gemm_precision(p == Precision::bf16 || p == Precision::fp16 ? p : Precision::fp32);
#endif
  }
}

}  // namespace liere
