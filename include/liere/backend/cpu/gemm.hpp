// liere/backend/cpu/gemm.hpp — the one matrix product every engine op goes through.
//
//   C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C          all row-major, leading dimensions lda, ldb, ldc
//
// op(A) = A, or Aᵀ when trans_a (then A is stored (K, M)); likewise for B. The arguments follow BLAS
// (cblas_sgemm with CblasRowMajor), so switching to another GEMM (OpenBLAS, MKL, cuBLAS) is a change of
// this file only. beta = 0 never reads C (C may hold garbage, even NaN), as in BLAS.
//
// Three implementations of the per-thread product, chosen at run time (gemm_backend()):
//   oneDNN    (default for float where libdnnl.so.2 can be loaded) dnnl_sgemm, loaded with dlopen on first use:
//             no build dependency, the library stays header-only; JIT AVX-512/AVX2 kernels. Its first call JITs
//             its kernels (40–90 ms, once per process). It has no double GEMM: double stays on Eigen. Measured
//             1.4–1.7× Eigen on the ViT products and 1.4–2.2× on most per-head attention products on the 2-core
//             AVX-512 development machine (bench/bench_gemm.cpp). Debian package: libdnnl2 (runtime) or libdnnl-dev.
//   Eigen     (the fallback, and double) Eigen's GEMM on Maps of the caller's buffers (no copies);
//   OpenBLAS  cblas_sgemm / cblas_dgemm from libopenblas.so.0, also dlopen'ed, pinned to one thread.
// bf16 runs: the engine's products of activations and gradients call gemm_act (backend/cpu/gemm_bf16.hpp), which
// is gemm() in fp32 and oneDNN's bf16 GEMM on rounded operands under set_gemm_precision(Precision::bf16).
// Select with set_gemm_backend() or the environment variable LIERE_GEMM=dnnl|eigen|openblas (read once, at the
// first product; a value that is not one of these, or a library that cannot be loaded, stops with an error that
// says so). Without LIERE_GEMM: oneDNN when it loads, else Eigen.
// Threads: a large product is cut into one
// contiguous slab of C per OpenMP thread (rows of C, or its columns when C has few rows), and each thread
// runs Eigen's single-threaded GEMM on its slab over the full K. This beats Eigen's own parallel GEMM, whose
// threads share packed panels and spin on each other at every K block: on a 2-core machine with other load
// its dW = dyᵀx product fell to a tenth of the single-thread speed, the slabs lose nothing. Each element of C
// is computed by one thread with a fixed blocking, so results are deterministic for a fixed thread count.
// Called from inside a parallel region (e.g. per (batch, head) in attention), it runs on the calling thread.
#pragma once

#include <dlfcn.h>

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <liere/core/config.hpp>
#include <liere/core/index.hpp>
#include <liere/core/parallel.hpp>
#include <string>
#include <type_traits>

namespace liere::cpu {

enum class GemmBackend { Eigen, OpenBLAS, Dnnl };

namespace detail {
// cblas_?gemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), with CBLAS's enum values.
struct OpenBlas {
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                         int);
  Sgemm sgemm = nullptr;
  Dgemm dgemm = nullptr;
  static constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
};
// The loaded library, or nullptr (looked up once).
inline const OpenBlas* openblas() {
  static const OpenBlas* lib = []() -> const OpenBlas* {
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    auto* ob = new OpenBlas{reinterpret_cast<OpenBlas::Sgemm>(dlsym(h, "cblas_sgemm")),
                            reinterpret_cast<OpenBlas::Dgemm>(dlsym(h, "cblas_dgemm"))};
    if (!ob->sgemm || !ob->dgemm) return nullptr;
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(1);
    return ob;
  }();
  return lib;
}
// dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc): row-major, 'N' or 'T', dnnl_dim_t =
// int64_t, returns dnnl_status_t (0 = dnnl_success). From libdnnl.so.2 (oneDNN 2.x), looked up once.
using DnnlSgemm = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                          const float*, std::int64_t, float, float*, std::int64_t);
inline DnnlSgemm dnnl_sgemm() {
  static const DnnlSgemm fn = []() -> DnnlSgemm {
    void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nullptr;
    return reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
  }();
  return fn;
}
inline bool gemm_backend_available(GemmBackend b) {
  switch (b) {
    case GemmBackend::Eigen: return true;
    case GemmBackend::OpenBLAS: return openblas() != nullptr;
    case GemmBackend::Dnnl: return dnnl_sgemm() != nullptr;
  }
  return false;
}
// The choice of LIERE_GEMM (or the default when it is unset or empty).
inline GemmBackend gemm_backend_from_env() {
  const char* env = std::getenv("LIERE_GEMM");
  if (!env || !*env) return dnnl_sgemm() ? GemmBackend::Dnnl : GemmBackend::Eigen;
  const std::string v = env;
  GemmBackend b = GemmBackend::Eigen;
  if (v == "dnnl" || v == "onednn") b = GemmBackend::Dnnl;
  else if (v == "openblas") b = GemmBackend::OpenBLAS;
  else LIERE_ENSURE(v == "eigen", "LIERE_GEMM=" << v << ": expected one of eigen, dnnl, openblas");
  LIERE_ENSURE(gemm_backend_available(b),
               "LIERE_GEMM=" << v << ": "
                             << (b == GemmBackend::Dnnl ? "libdnnl.so.2 (Debian: libdnnl2)"
                                                        : "libopenblas.so.0 (Debian: libopenblas0)")
                             << " cannot be loaded");
  return b;
}
inline GemmBackend& gemm_backend_slot() {
  static GemmBackend b = gemm_backend_from_env();
  return b;
}
}  // namespace detail

// The implementation gemm() uses now (for float; double runs on Eigen under Dnnl).
inline GemmBackend gemm_backend() { return detail::gemm_backend_slot(); }
// Selects the implementation; returns false (and changes nothing) when its library cannot be loaded.
inline bool set_gemm_backend(GemmBackend b) {
  if (!detail::gemm_backend_available(b)) return false;
  detail::gemm_backend_slot() = b;
  return true;
}
inline const char* gemm_backend_name(GemmBackend b) {
  switch (b) {
    case GemmBackend::Eigen: return "Eigen";
    case GemmBackend::OpenBLAS: return "OpenBLAS";
    case GemmBackend::Dnnl: return "oneDNN";
  }
  return "?";
}
inline const char* gemm_backend_name() { return gemm_backend_name(gemm_backend()); }

namespace detail {
template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One thread's product on C[m0:m0+m, n0:n0+n] (the block of op(A) rows and op(B) columns it needs).
template <class S>
void gemm_block(bool trans_a, bool trans_b, Index m0, Index m, Index n0, Index n, Index K, S alpha, const S* A,
                Index lda, const S* B, Index ldb, S beta, S* C, Index ldc) {
  using CMap = Eigen::Map<const RowMat<S>, 0, Eigen::OuterStride<>>;
  using MMap = Eigen::Map<RowMat<S>, 0, Eigen::OuterStride<>>;
  if constexpr (std::is_same_v<S, float> || std::is_same_v<S, double>) {
    if (gemm_backend() == GemmBackend::OpenBLAS && K > 0) {
      const OpenBlas* ob = openblas();
      const S* a = trans_a ? A + m0 : A + m0 * lda;
      const S* b = trans_b ? B + n0 * ldb : B + n0;
      const int ta = trans_a ? OpenBlas::kTrans : OpenBlas::kNoTrans, tb = trans_b ? OpenBlas::kTrans : OpenBlas::kNoTrans;
      if constexpr (std::is_same_v<S, float>)
        ob->sgemm(OpenBlas::kRowMajor, ta, tb, int(m), int(n), int(K), alpha, a, int(lda), b, int(ldb), beta,
                  C + m0 * ldc + n0, int(ldc));
      else
        ob->dgemm(OpenBlas::kRowMajor, ta, tb, int(m), int(n), int(K), alpha, a, int(lda), b, int(ldb), beta,
                  C + m0 * ldc + n0, int(ldc));
      return;
    }
    if (std::is_same_v<S, float> && gemm_backend() == GemmBackend::Dnnl && K > 0) {
      const S* a = trans_a ? A + m0 : A + m0 * lda;
      const S* b = trans_b ? B + n0 * ldb : B + n0;
      // Inside a parallel region (the slabs below, the per-head attention loops) oneDNN runs on the calling thread.
      const int status = detail::dnnl_sgemm()(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, K, float(alpha),
                                               reinterpret_cast<const float*>(a), lda, reinterpret_cast<const float*>(b),
                                               ldb, float(beta), reinterpret_cast<float*>(C + m0 * ldc + n0), ldc);
      if (status == 0) return;
      // Only invalid arguments fail, and gemm() checked them: should it happen, Eigen computes the block.
    }
  }
  MMap c(C + m0 * ldc + n0, m, n, Eigen::OuterStride<>(ldc));
  if (beta == S(0)) {
    if (K == 0) {
      c.setZero();
      return;
    }
  } else if (beta != S(1)) {
    c *= beta;
  }
  if (K == 0) return;
  // op(A) rows m0.. : A stored (M, K) → rows m0..; A stored (K, M) → columns m0..
  const CMap a(trans_a ? A + m0 : A + m0 * lda, trans_a ? K : m, trans_a ? m : K, Eigen::OuterStride<>(lda));
  // op(B) columns n0.. : B stored (K, N) → columns n0..; B stored (N, K) → rows n0..
  const CMap b(trans_b ? B + n0 * ldb : B + n0, trans_b ? n : K, trans_b ? K : n, Eigen::OuterStride<>(ldb));
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == S(0))
      c.noalias() = alpha * opa * opb;
    else
      c.noalias() += alpha * opa * opb;
  };
  if (!trans_a && !trans_b) run(a, b);
  else if (!trans_a && trans_b) run(a, b.transpose());
  else if (trans_a && !trans_b) run(a.transpose(), b);
  else run(a.transpose(), b.transpose());
}
}  // namespace detail

// Products below this many multiply-adds stay on one thread (below Eigen's own threshold for threading,
// 2 × 50000, so Eigen never starts its parallel GEMM behind our back).
inline constexpr double kGemmParallelMacs = 1 << 16;

namespace detail {
// Cuts C (M, N) into one slab per thread and calls block(by_rows, s0, s1) for each: rows s0..s1 of C when by_rows,
// else columns. One slab on the calling thread when the product is small or this runs inside a parallel region.
template <class Block>
void gemm_slabs(Index M, Index N, Index K, Block&& block) {
  int threads = 1;
  if (!in_parallel() && double(M) * double(N) * double(K) >= kGemmParallelMacs) threads = max_threads();
  // Slabs of whole rows when there are enough rows (≥ 32 per thread), else of columns; aligned to 16.
  const bool by_rows = M >= 32 * threads || M >= N;
  const Index extent = by_rows ? M : N;
  threads = int(std::min<Index>(threads, std::max<Index>(1, extent / 16)));
  if (threads <= 1) {
    block(true, Index(0), M);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const Index t = thread_id(), nt = num_threads();
    auto cut = [&](Index i) { return std::min(extent, ((extent * i / nt + 15) / 16) * 16); };
    const Index s0 = cut(t), s1 = t + 1 == nt ? extent : cut(t + 1);
    if (s1 > s0) block(by_rows, s0, s1);
  }
}
}  // namespace detail

template <class S>
void gemm(bool trans_a, bool trans_b, Index M, Index N, Index K, S alpha, const S* A, Index lda, const S* B, Index ldb,
          S beta, S* C, Index ldc) {
  if (M == 0 || N == 0) return;
  LIERE_ENSURE(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N,
               "gemm: leading dimensions (" << lda << ", " << ldb << ", " << ldc << ") too small for M=" << M
                                            << " N=" << N << " K=" << K);
  detail::gemm_slabs(M, N, K, [&](bool by_rows, Index s0, Index s1) {
    if (by_rows) detail::gemm_block(trans_a, trans_b, s0, s1 - s0, 0, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else detail::gemm_block(trans_a, trans_b, 0, M, s0, s1 - s0, K, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}

// Dense shorthand: leading dimensions are the stored row lengths.
template <class S>
void gemm(bool trans_a, bool trans_b, Index M, Index N, Index K, S alpha, const S* A, const S* B, S beta, S* C) {
  gemm(trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N);
}

// Explicit instances (backend/cpu/gemm.cpp) for programs that link liere::compiled: Eigen's GEMM kernels are
// compiled once there.
#define LIERE_CPU_GEMM_INSTANCES(EXTERN, S) \
  EXTERN template void gemm<S>(bool, bool, Index, Index, Index, S, const S*, Index, const S*, Index, S, S*, Index);
#ifdef LIERE_PRECOMPILED
LIERE_CPU_GEMM_INSTANCES(extern, float)
LIERE_CPU_GEMM_INSTANCES(extern, double)
#endif

}  // namespace liere::cpu
