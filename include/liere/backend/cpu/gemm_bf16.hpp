// liere/backend/cpu/gemm_bf16.hpp — the products of activations and gradients in the run's precision (issue 22):
// in a bf16 run their operands are rounded to bf16 and multiplied by oneDNN's bf16 GEMM with fp32 accumulation.
//
//   gemm_act(…)        the engine's products of activations and gradients (linear forward and both backward
//                      products, the patch embedding, attention's QKᵀ, PV and their backward, the flash attention's
//                      tiles). Same arguments as gemm() (backend/cpu/gemm.hpp). Under gemm_precision() == fp32 it is
//                      gemm(); under bf16 (float only) it rounds op(A) and op(B) to bf16 (to nearest, ties to even:
//                      kernels::to_bf16) into per-thread scratch and calls gemm_bf16: C stays fp32, alpha and beta
//                      are applied in fp32.
//   gemm_bf16(…)       C (fp32) = alpha · op(A) · op(B) + beta · C on bf16 operands: dnnl_gemm_bf16bf16f32 from
//                      libdnnl.so.2 (oneDNN 2.x; row-major like dnnl_sgemm; loaded with dlopen like dnnl_sgemm),
//                      cut into the same per-thread slabs as gemm().
//   set_gemm_precision(p)   fp32 (the default) or bf16 for every later gemm_act of the process (set it before
//                      training, not while products run). bf16 needs bf16_gemm_support(): oneDNN loads, the CPU has
//                      AVX512_BF16 (vdpbf16ps: bf16 products summed in fp32), and a probe product through oneDNN
//                      succeeds and is exact (oneDNN refuses below AVX-512, e.g. under ONEDNN_MAX_CPU_ISA=AVX2,
//                      with dnnl_unimplemented). Otherwise it stops with a message that says which of them failed.
//
// What stays fp32 in a bf16 run: every stored tensor (activations, gradients, weights and Adam's state: the
// operands are converted at each product, so a bf16 run saves no memory here), the accumulation and output of
// every product, LayerNorm, softmax, GELU, the loss, the rotation tables (backend/cpu/rotation_table.hpp uses
// gemm(), not gemm_act) and their application to q and k (the rotations and the dense per-head transforms in
// backend/cpu/attention.hpp use gemm() or kernels::rotate in fp32). docs/precision.md has the list.
//
// Error of one product: each operand element is rounded with relative error ≤ 2⁻⁹, so against the same product
// on fp32 operands |ΔC| ≤ (2·2⁻⁹ + 2⁻¹⁸ + γ_K) Σ_k |A_ik||B_kj|·|alpha|; against fp32 arithmetic on the
// bf16-rounded operands only the accumulation order differs: |ΔC| ≤ 2γ_K Σ_k |A_ik||B_kj|·|alpha|, γ_K = K·2⁻²⁴/(1−K·2⁻²⁴)
// (tests/test_bf16.cpp checks this bound).
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <liere/backend/cpu/gemm.hpp>
#include <liere/backend/kernels/bf16.hpp>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/parallel.hpp>
#include <liere/core/precision.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace liere::cpu {

namespace detail {
// dnnl_gemm_bf16bf16f32(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc): row-major, A and B bf16
// (uint16 bits), C float; returns dnnl_status_t (0 success, 3 unimplemented: no AVX-512 on this CPU or under
// ONEDNN_MAX_CPU_ISA).
using DnnlGemmBf16 = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const std::uint16_t*,
                             std::int64_t, const std::uint16_t*, std::int64_t, float, float*, std::int64_t);
inline DnnlGemmBf16 dnnl_gemm_bf16() {
  static const DnnlGemmBf16 fn = []() -> DnnlGemmBf16 {
    void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    return reinterpret_cast<DnnlGemmBf16>(dlsym(h, "dnnl_gemm_bf16bf16f32"));
  }();
  return fn;
}

struct Bf16Support {
  bool ok = false;
  std::string why;  // empty when ok
};

inline Bf16Support probe_bf16_gemm() {
  Bf16Support s;
  const DnnlGemmBf16 fn = dnnl_gemm_bf16();
  if (!fn) {
    s.why = "oneDNN's bf16 GEMM (dnnl_gemm_bf16bf16f32 in libdnnl.so.2, Debian: libdnnl2) cannot be loaded";
    return s;
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    s.why = "this CPU has no AVX512_BF16 instructions (Intel Cooper Lake or Sapphire Rapids and later, AMD Zen 4 "
            "and later have them)";
    return s;
  }
  // A (2, 3) · B (3, 2) of small integers: exact in bf16 and in fp32 whatever the order.
  const std::uint16_t one = kernels::to_bf16(1.0f).bits, two = kernels::to_bf16(2.0f).bits,
                      three = kernels::to_bf16(3.0f).bits;
  const std::uint16_t a[6] = {one, two, three, three, two, one}, b[6] = {one, two, two, one, three, three};
  float c[4] = {0, 0, 0, 0};
  const int status = fn('N', 'N', 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
  if (status != 0 || c[0] != 14 || c[1] != 13 || c[2] != 10 || c[3] != 11) {
    const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
    s.why = "oneDNN's bf16 GEMM refused this CPU (dnnl_gemm_bf16bf16f32 returned status " + std::to_string(status) +
            (status == 3 ? ", unimplemented: it needs AVX-512" : status == 0 ? " with a wrong product" : "") + ")" +
            (isa && *isa ? std::string(" under ONEDNN_MAX_CPU_ISA=") + isa : std::string());
    return s;
  }
  s.ok = true;
  return s;
}

inline Precision& gemm_precision_slot() {
  static Precision p = Precision::fp32;
  return p;
}
}  // namespace detail

// Whether bf16 products can run here; *why (when given) says what is missing. Probed once per process.
inline const detail::Bf16Support& bf16_support() {
  static const detail::Bf16Support s = detail::probe_bf16_gemm();
  return s;
}
inline bool bf16_gemm_support(std::string* why = nullptr) {
  if (why) *why = bf16_support().why;
  return bf16_support().ok;
}

// The precision of gemm_act's products: fp32 or bf16.
inline Precision gemm_precision() { return detail::gemm_precision_slot(); }
inline void set_gemm_precision(Precision p) {
  LIERE_ENSURE(p == Precision::fp32 || p == Precision::bf16,
               "set_gemm_precision(" << to_string(p) << "): the CPU products run in fp32 or bf16");
  LIERE_ENSURE(p == Precision::fp32 || bf16_support().ok, "bf16 products on the CPU: " << bf16_support().why);
  detail::gemm_precision_slot() = p;
}
// Sets the precision for a scope and restores the previous one.
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(Precision p) : saved_(gemm_precision()) { set_gemm_precision(p); }
  ~GemmPrecisionScope() { detail::gemm_precision_slot() = saved_; }
  GemmPrecisionScope(const GemmPrecisionScope&) = delete;
  GemmPrecisionScope& operator=(const GemmPrecisionScope&) = delete;

 private:
  Precision saved_;
};

// C (M, N) fp32 = alpha · op(A) · op(B) + beta · C with bf16 A, B (stored as gemm() says); beta = 0 never reads C.
inline void gemm_bf16(bool trans_a, bool trans_b, Index M, Index N, Index K, float alpha, const kernels::bf16* A,
                      Index lda, const kernels::bf16* B, Index ldb, float beta, float* C, Index ldc) {
  if (M == 0 || N == 0) return;
  LIERE_ENSURE(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
               "gemm_bf16: leading dimensions (" << lda << ", " << ldb << ", " << ldc << ") too small for M=" << M
                                                 << " N=" << N << " K=" << K);
  LIERE_ENSURE(bf16_support().ok, "gemm_bf16: " << bf16_support().why);
  if (K == 0) {  // C = beta · C (beta = 0: zeros, C not read)
    for (Index i = 0; i < M; ++i)
      for (Index j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const auto* a16 = reinterpret_cast<const std::uint16_t*>(A);
  const auto* b16 = reinterpret_cast<const std::uint16_t*>(B);
  const detail::DnnlGemmBf16 fn = detail::dnnl_gemm_bf16();
  detail::gemm_slabs(M, N, K, [&](bool by_rows, Index s0, Index s1) {
    const Index m0 = by_rows ? s0 : 0, m = by_rows ? s1 - s0 : M, n0 = by_rows ? 0 : s0, n = by_rows ? N : s1 - s0;
    const std::uint16_t* a = trans_a ? a16 + m0 : a16 + m0 * lda;
    const std::uint16_t* b = trans_b ? b16 + n0 * ldb : b16 + n0;
    const int status =
        fn(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, K, alpha, a, lda, b, ldb, beta, C + m0 * ldc + n0, ldc);
    LIERE_ENSURE(status == 0, "gemm_bf16: dnnl_gemm_bf16bf16f32 failed with status " << status << " (M=" << m
                                                                                       << " N=" << n << " K=" << K << ")");
  });
}

namespace detail {
// dst (rows, cols) dense = the bf16 rounding of src (rows, cols) with leading dimension ld; threads when large.
inline void round_to_bf16(const float* src, Index rows, Index cols, Index ld, kernels::bf16* dst) {
  auto row = [&](Index i) {
    const float* s = src + i * ld;
    kernels::bf16* d = dst + i * cols;
    for (Index j = 0; j < cols; ++j) d[j] = kernels::to_bf16(s[j]);
  };
  if (!in_parallel() && rows * cols >= 4 * kGrain && rows >= 2) {
#pragma omp parallel for schedule(static)
    for (Index i = 0; i < rows; ++i) row(i);
  } else {
    for (Index i = 0; i < rows; ++i) row(i);
  }
}
// Per-thread scratch for the rounded operands (grows, never shrinks).
inline std::vector<kernels::bf16>& bf16_scratch(int which) {
  thread_local std::vector<kernels::bf16> buf[2];
  return buf[which];
}
}  // namespace detail

// A product of activations or gradients (see the top of this file): gemm() in fp32 runs, bf16 operands in bf16 runs.
template <class S>
void gemm_act(bool trans_a, bool trans_b, Index M, Index N, Index K, S alpha, const S* A, Index lda, const S* B,
              Index ldb, S beta, S* C, Index ldc) {
  if constexpr (std::is_same_v<S, float>) {
    if (gemm_precision() == Precision::bf16 && M > 0 && N > 0 && K > 0) {
      LIERE_ENSURE(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
                   "gemm_act: leading dimensions (" << lda << ", " << ldb << ", " << ldc << ") too small for M=" << M
                                                    << " N=" << N << " K=" << K);
      // Stored shapes: A is (M, K), or (K, M) when trans_a; B is (K, N), or (N, K) when trans_b.
      const Index ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
      auto& a = detail::bf16_scratch(0);
      auto& b = detail::bf16_scratch(1);
      if (a.size() < std::size_t(ar * ac)) a.resize(std::size_t(ar * ac));
      if (b.size() < std::size_t(br * bc)) b.resize(std::size_t(br * bc));
      detail::round_to_bf16(A, ar, ac, lda, a.data());
      detail::round_to_bf16(B, br, bc, ldb, b.data());
      gemm_bf16(trans_a, trans_b, M, N, K, alpha, a.data(), ac, b.data(), bc, beta, C, ldc);
      return;
    }
  }
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Dense shorthand, as gemm()'s.
template <class S>
void gemm_act(bool trans_a, bool trans_b, Index M, Index N, Index K, S alpha, const S* A, const S* B, S beta, S* C) {
  gemm_act(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

}  // namespace liere::cpu
