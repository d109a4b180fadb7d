// bench_gemm — which GEMM library should the engine's single-precision products run on, on this machine?
//
// Candidates (each behind a thin row-major wrapper of its own, below):
//   eigen         Eigen 3.4 GEMM on Maps (what liere::cpu::gemm runs now). With more than one thread "eigen" is
//                 liere's scheme (gemm.hpp): one contiguous slab of C per OpenMP thread, Eigen single-threaded
//                 on each; "eigen-mt" is Eigen's own parallel GEMM (Eigen::setNbThreads).
//   openblas-*    cblas_sgemm from libopenblas.so.0 (dlopen, RTLD_LOCAL, as gemm.hpp does), named after the kernel
//                 set ("core") it runs: the first copy under the process environment (this machine exports
//                 OPENBLAS_CORETYPE=Haswell: AVX2 kernels); when that core has no AVX-512 kernels, a second copy of
//                 the same library in its own link-map namespace (dlmopen) with OPENBLAS_CORETYPE unset during its
//                 load (OpenBLAS 0.3.21's own detection: Cooperlake = the SkylakeX AVX-512 sgemm kernels) or set to
//                 --openblas-core2. Threads: openblas_set_num_threads.
//   blis          bli_sgemm_ex (typed API, general strides) with a per-call rntm_t thread count, from the OpenMP
//                 build of libblis.so (dlopen, RTLD_LOCAL: loaded globally, its sgemm_ would silently become
//                 libxsmm's fall-back). BLIS 0.9 does not know AMD family 1Ah (it selects "generic", the
//                 reference kernels), so BLIS_ARCH_TYPE is set to --blis-arch (default skx on AVX-512 machines)
//                 unless already set.
//   dnnl-sgemm    oneDNN dnnl_sgemm (row-major BLAS-like call, JIT kernels, OpenMP threads).
//   dnnl-matmul   oneDNN matmul primitive (strided memory descriptors for transposes and leading dimensions,
//                 output scale = alpha, sum post-op = beta), created once per shape and thread count and cached.
//   libxsmm       libxsmm 1.17: JIT kernels from libxsmm_smmdispatch for the small products (column-major:
//                 the row-major product is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ; 1.17 cannot JIT a transposed first
//                 column-major operand, so row-major B·ᵀ is transposed into a scratch first), and
//                 libxsmm_sgemm_omp (libxsmmext, tiled JIT kernels over OpenMP) for the big ones. Linked with
//                 libxsmmnoblas and no BLAS in the global scope: a silent fall-back to some BLAS is impossible
//                 (it would print "LIBXSMM ERROR: application must be linked against LAPACK/BLAS" and fail the
//                 check). alpha ≠ 1 or beta ∉ {0, 1}, which 1.17 cannot JIT, go to Eigen (counted, reported).
//   X/slab        (threads > 1) library X single-threaded inside liere's slab split, as gemm.hpp would run it.
//
// First every variant is checked against a double-precision reference (relative error bound: the error of each
// element over u·(|α|·Σ|a||b| + |β||c₀|), u = 2⁻²⁴, must stay ≤ K + 2 — the worst-case bound of any summation
// order; a wrong layout or transpose gives ~1/u), on odd sizes with padded leading dimensions for all four
// transpose combinations and three (α, β), and on every benchmarked shape (sampled elements).
// Then the shapes are timed INTERLEAVED: round r runs, for each shape, every variant once (order rotated by r),
// so load from other processes hits all of them alike; medians over rounds are reported with the median of the
// per-round ratio to eigen measured side by side.
//
// Shapes (M×N×K, row-major, as liere's Linear / patch embedding / attention call gemm):
//   vit-tiny  ViT-Tiny training step, batch 128, CIFAR (T = 65, dim 192, MLP 768, 8320 rows): x·Wᵀ (fwd),
//             dy·W (dx), dyᵀ·x (dW, β = 1) for qkv, proj, fc1, fc2; patch embedding (8192×192×48) fwd and dW;
//   attn      per (batch, head) T×T products of that model (B = 128, H = 3, head dim 64, q/k/v strided inside
//             the (B·T, 576) qkv buffer): S = Q·Kᵀ (65×65×64), O = P·V (65×64×65), dV += Pᵀ·dO, dP = dO·Vᵀ,
//             dQ = dS·K, dK = dSᵀ·Q (and, as a probe, S = Q·Kᵀ with Kᵀ stored per head: NN); "attn-call": one library
//             call per product (384 per shape) in an OpenMP loop (what liere's attention does), "attn-batch": one
//             batched call (oneDNN 4-D strided matmul; libxsmm one dispatch + kernel calls in an OpenMP loop);
//   vit-b     ViT-B at 224 px, batch 64 (T = 197, 12608 rows, dim 768, MLP 3072): the same twelve Linear products.
//
// Usage: bench_gemm [--threads 1,2] [--rounds 5] [--json PATH] [--groups vit-tiny,attn,vit-b] [--min-ms 25]
//                   [--libs eigen,openblas,...] [--blis-arch skx|zen3|haswell|auto] [--no-check] [--quick]
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <app/flags.hpp>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <liere/core/eigen.hpp>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#ifdef LIERE_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef LIERE_BENCH_HAVE_XSMM
#include <libxsmm.h>
#endif
#ifdef LIERE_BENCH_HAVE_BLIS
#include <blis.h>
#endif

#ifndef LIERE_BENCH_OPENBLAS_PATH
#define LIERE_BENCH_OPENBLAS_PATH "libopenblas.so.0"
#endif

namespace {

namespace app = liere::app;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ------------------------------------------------------------------------------------------------------------
// One row-major product C (M×N) = alpha·op(A)·op(B) + beta·C, BLAS conventions (beta = 0 never reads C).
struct Prob {
  bool ta = false, tb = false;
  int M = 0, N = 0, K = 0;
  float alpha = 1, beta = 0;
  const float* A = nullptr;
  int lda = 0;
  const float* B = nullptr;
  int ldb = 0;
  float* C = nullptr;
  int ldc = 0;
};
using GemmFn = std::function<void(const Prob&)>;

// ---- aligned buffers, random fill ----------------------------------------------------------------------------
struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float[], FreeDeleter>;
Buf alloc(size_t n) {
  const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64 + 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!p) {
    std::fprintf(stderr, "out of memory (%zu floats)\n", n);
    std::exit(1);
  }
  return Buf(p);
}
void fill_uniform(float* p, size_t n, std::uint64_t seed) {
#pragma omp parallel
  {
    const size_t nt = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
    const size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + t * 0xD1B54A32D192ED03ull + 1;
    for (size_t i = i0; i < i1; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
      p[i] = float(double(s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    }
  }
}

// ---- liere's slab split (include/liere/backend/cpu/gemm.hpp), around any single-threaded product ----------------
void slab_gemm(const GemmFn& g1, int threads, const Prob& p) {
  const bool by_rows = p.M >= 32 * threads || p.M >= p.N;
  const int extent = by_rows ? p.M : p.N;
  threads = std::min(threads, std::max(1, extent / 16));
  if (threads <= 1) {
    g1(p);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    auto cut = [&](int i) { return std::min(extent, int(((long(extent) * i / nt + 15) / 16) * 16)); };
    const int s0 = cut(t), s1 = t + 1 == nt ? extent : cut(t + 1);
    if (s1 > s0) {
      Prob q = p;
      if (by_rows) {
        q.M = s1 - s0;
        q.A = p.ta ? p.A + s0 : p.A + long(s0) * p.lda;
        q.C = p.C + long(s0) * p.ldc;
      } else {
        q.N = s1 - s0;
        q.B = p.tb ? p.B + long(s0) * p.ldb : p.B + s0;
        q.C = p.C + s0;
      }
      g1(q);
    }
  }
}

// ============================================================================================================
// Library wrappers
// ============================================================================================================

// ---- Eigen -------------------------------------------------------------------------------------------------
void eigen_gemm(const Prob& p) {
  using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const RM, 0, Eigen::OuterStride<>>;
  using MMap = Eigen::Map<RM, 0, Eigen::OuterStride<>>;
  MMap c(p.C, p.M, p.N, Eigen::OuterStride<>(p.ldc));
  if (p.beta == 0.f) {
    if (p.K == 0) {
      c.setZero();
      return;
    }
  } else if (p.beta != 1.f) {
    c *= p.beta;
  }
  if (p.K == 0) return;
  const CMap a(p.A, p.ta ? p.K : p.M, p.ta ? p.M : p.K, Eigen::OuterStride<>(p.lda));
  const CMap b(p.B, p.tb ? p.N : p.K, p.tb ? p.K : p.N, Eigen::OuterStride<>(p.ldb));
  auto run = [&](const auto& x, const auto& y) {
    if (p.beta == 0.f)
      c.noalias() = p.alpha * x * y;
    else
      c.noalias() += p.alpha * x * y;
  };
  if (!p.ta && !p.tb)
    run(a, b);
  else if (!p.ta && p.tb)
    run(a, b.transpose());
  else if (p.ta && !p.tb)
    run(a.transpose(), b);
  else
    run(a.transpose(), b.transpose());
}

// ---- OpenBLAS (dlopen; a second copy with a forced core type via dlmopen) -------------------------------------
struct OpenBlas {
  // cblas_sgemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); CblasRowMajor = 101,
  // CblasNoTrans = 111, CblasTrans = 112.
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  Sgemm sgemm = nullptr;
  void (*set_threads)(int) = nullptr;
  std::string name, core, config, error, coretype_env;
  double load_ms = 0;
  bool ok() const { return sgemm && set_threads; }
  // second_copy: load another instance (dlmopen, new namespace) with OPENBLAS_CORETYPE = core ("" = unset, i.e.
  // OpenBLAS's own CPU detection) during the load; otherwise dlopen under the process environment.
  void load(const char* path, bool second_copy, const std::string& core_env) {
    const auto t0 = Clock::now();
    void* h = nullptr;
    const char* old = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = old ? old : "";
    if (second_copy) {
      if (core_env.empty())
        unsetenv("OPENBLAS_CORETYPE");
      else
        setenv("OPENBLAS_CORETYPE", core_env.c_str(), 1);
      coretype_env = core_env.empty() ? "unset" : core_env;
      h = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
      if (old)
        setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
      else
        unsetenv("OPENBLAS_CORETYPE");
    } else {
      coretype_env = old ? saved : "unset";
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    load_ms = seconds_since(t0) * 1e3;
    if (!h) {
      error = dlerror();
      return;
    }
    sgemm = reinterpret_cast<Sgemm>(dlsym(h, "cblas_sgemm"));
    set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    if (auto f = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"))) core = f();
    if (auto f = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_config"))) config = f();
    std::string c = core;
    for (auto& ch : c) ch = char(std::tolower(ch));
    const std::map<std::string, std::string> shortname{
        {"haswell", "hsw"}, {"skylakex", "skx"}, {"cooperlake", "cpx"}, {"sapphirerapids", "spr"}, {"zen", "zen"}};
    name = "openblas-" + (shortname.count(c) ? shortname.at(c) : c);
  }
  bool avx512() const { return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids"; }
  void gemm(const Prob& p) const {
    sgemm(101, p.ta ? 112 : 111, p.tb ? 112 : 111, p.M, p.N, p.K, p.alpha, p.A, p.lda, p.B, p.ldb, p.beta, p.C, p.ldc);
  }
};

// ---- BLIS (dlopen, RTLD_LOCAL: its sgemm_ must not become libxsmm's silent fall-back, see below) ---------------
#ifdef LIERE_BENCH_HAVE_BLIS
#ifndef LIERE_BENCH_BLIS_PATH
#define LIERE_BENCH_BLIS_PATH "libblis.so.4"
#endif
struct Blis {
  decltype(&bli_init) init = nullptr;
  decltype(&bli_sgemm_ex) sgemm_ex = nullptr;
  decltype(&bli_arch_query_id) arch_query_id = nullptr;
  decltype(&bli_arch_string) arch_string = nullptr;
  decltype(&bli_info_get_version_str) version = nullptr;
  std::string error;
  bool load(const char* path) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      error = dlerror();
      return false;
    }
    init = reinterpret_cast<decltype(init)>(dlsym(h, "bli_init"));
    sgemm_ex = reinterpret_cast<decltype(sgemm_ex)>(dlsym(h, "bli_sgemm_ex"));
    arch_query_id = reinterpret_cast<decltype(arch_query_id)>(dlsym(h, "bli_arch_query_id"));
    arch_string = reinterpret_cast<decltype(arch_string)>(dlsym(h, "bli_arch_string"));
    version = reinterpret_cast<decltype(version)>(dlsym(h, "bli_info_get_version_str"));
    if (!(init && sgemm_ex && arch_query_id && arch_string && version)) error = "symbols missing";
    return error.empty();
  }
};
Blis g_blis;
// bli_sgemm_ex(transa, transb, m, n, k, alpha*, a, rs_a, cs_a, b, rs_b, cs_b, beta*, c, rs_c, cs_c, cntx, rntm):
// strides describe the matrices as stored (before op()), so row-major is (rs, cs) = (ld, 1).
void blis_gemm(const Prob& p, int threads) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  float alpha = p.alpha, beta = p.beta;
  g_blis.sgemm_ex(p.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, p.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, p.M, p.N, p.K,
                  &alpha, const_cast<float*>(p.A), p.lda, 1, const_cast<float*>(p.B), p.ldb, 1, &beta, p.C, p.ldc, 1,
                  nullptr, &rntm);
}
#endif

// ---- oneDNN --------------------------------------------------------------------------------------------------
#ifdef LIERE_BENCH_HAVE_DNNL
void dnnl_sgemm_call(const Prob& p) {
  // Row-major: dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc).
  const dnnl_status_t st = dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, p.alpha, p.A, p.lda, p.B,
                                      p.ldb, p.beta, p.C, p.ldc);
  if (st != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed (%d)\n", int(st));
    std::exit(1);
  }
}

dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A matmul primitive over up to two batch dimensions: dst[b0,b1] = alpha·src[b0,b1]·wei[b0,b1] + beta·dst[b0,b1],
// each operand (rows × cols) with its own strides. Cached per (shape, strides, alpha, beta, threads).
struct MatmulSpec {
  std::int64_t b0 = 1, b1 = 1, M = 0, N = 0, K = 0;
  std::array<std::int64_t, 4> sa{}, sb{}, sc{};  // strides (b0, b1, row, col) of src (M×K), wei (K×N), dst (M×N)
  float alpha = 1, beta = 0;
  int threads = 1;
  bool batched() const { return b0 * b1 > 1; }
  std::vector<std::int64_t> key() const {
    std::vector<std::int64_t> k{b0, b1, M, N, K, threads};
    for (auto* s : {&sa, &sb, &sc}) k.insert(k.end(), s->begin(), s->end());
    std::uint32_t ab[2];
    std::memcpy(ab, &alpha, sizeof(float));
    std::memcpy(ab + 1, &beta, sizeof(float));
    k.push_back(ab[0]);
    k.push_back(ab[1]);
    return k;
  }
};
struct MatmulEntry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
  std::string impl;
  double create_ms = 0;
};
std::mutex g_dnnl_mutex;
std::map<std::vector<std::int64_t>, std::unique_ptr<MatmulEntry>> g_dnnl_cache;

MatmulEntry& dnnl_matmul_entry(const MatmulSpec& s) {
  const auto key = s.key();
  std::lock_guard<std::mutex> lock(g_dnnl_mutex);
  auto it = g_dnnl_cache.find(key);
  if (it != g_dnnl_cache.end()) return *it->second;
  const auto t0 = Clock::now();
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  auto dims = [&](std::int64_t r, std::int64_t c) {
    return s.batched() ? dnnl::memory::dims{s.b0, s.b1, r, c} : dnnl::memory::dims{r, c};
  };
  auto strides = [&](const std::array<std::int64_t, 4>& st) {
    return s.batched() ? dnnl::memory::dims{st[0], st[1], st[2], st[3]} : dnnl::memory::dims{st[2], st[3]};
  };
  const md src(dims(s.M, s.K), dt::f32, strides(s.sa)), wei(dims(s.K, s.N), dt::f32, strides(s.sb)),
      dst(dims(s.M, s.N), dt::f32, strides(s.sc));
  dnnl::primitive_attr attr;
  if (s.alpha != 1.f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(s.beta);
    attr.set_post_ops(po);
  }
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // one scratchpad per calling thread (concurrent calls)
  auto e = std::make_unique<MatmulEntry>();
  e->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, dnnl_engine());
  e->prim = dnnl::matmul(e->pd);
  e->scratch_bytes = e->pd.scratchpad_desc().get_size();
  e->impl = e->pd.impl_info_str();
  e->create_ms = seconds_since(t0) * 1e3;
  return *g_dnnl_cache.emplace(key, std::move(e)).first->second;
}

// Executes on the calling thread's stream, with memory objects cached per (thread, primitive) whose data handles
// are re-pointed at every call.
void dnnl_matmul_exec(MatmulEntry& e, const float* A, const float* B, float* C) {
  struct ThreadMem {
    dnnl::memory src, wei, dst, scratch;
    std::vector<char> scratch_buf;
    std::unordered_map<int, dnnl::memory> args;
  };
  thread_local dnnl::stream stream(dnnl_engine());
  thread_local std::unordered_map<const MatmulEntry*, ThreadMem> mems;
  auto it = mems.find(&e);
  if (it == mems.end()) {
    ThreadMem m;
    m.src = dnnl::memory(e.pd.src_desc(), dnnl_engine(), const_cast<float*>(A));
    m.wei = dnnl::memory(e.pd.weights_desc(), dnnl_engine(), const_cast<float*>(B));
    m.dst = dnnl::memory(e.pd.dst_desc(), dnnl_engine(), C);
    m.scratch_buf.resize(std::max<size_t>(e.scratch_bytes, 64));
    m.scratch = dnnl::memory(e.pd.scratchpad_desc(), dnnl_engine(), m.scratch_buf.data());
    m.args = {
        {DNNL_ARG_SRC, m.src}, {DNNL_ARG_WEIGHTS, m.wei}, {DNNL_ARG_DST, m.dst}, {DNNL_ARG_SCRATCHPAD, m.scratch}};
    it = mems.emplace(&e, std::move(m)).first;
  }
  ThreadMem& m = it->second;
  m.src.set_data_handle(const_cast<float*>(A));
  m.wei.set_data_handle(const_cast<float*>(B));
  m.dst.set_data_handle(C);
  e.prim.execute(stream, m.args);
}

MatmulSpec matmul_spec_2d(const Prob& p, int threads) {
  MatmulSpec s;
  s.M = p.M, s.N = p.N, s.K = p.K, s.alpha = p.alpha, s.beta = p.beta, s.threads = threads;
  s.sa = {0, 0, p.ta ? 1 : p.lda, p.ta ? p.lda : 1};  // op(A) (M×K): A stored (K×M) when ta
  s.sb = {0, 0, p.tb ? 1 : p.ldb, p.tb ? p.ldb : 1};  // op(B) (K×N): B stored (N×K) when tb
  s.sc = {0, 0, p.ldc, 1};
  return s;
}
// threads: what the primitive is created for (omp_get_max_threads() outside a parallel region, 1 inside).
void dnnl_matmul_call(const Prob& p) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  dnnl_matmul_exec(dnnl_matmul_entry(matmul_spec_2d(p, threads)), p.A, p.B, p.C);
}
#endif

// ---- libxsmm -----------------------------------------------------------------------------------------------
#ifdef LIERE_BENCH_HAVE_XSMM
// Counters of the wrapper paths, kept during the checks only (no shared cache line in the timed loops).
std::atomic<long> g_xsmm_jit{0}, g_xsmm_transposed{0}, g_xsmm_fallback{0};
bool g_xsmm_count = false;

// Transposes the row-major (rows × cols, ld) matrix src into dst (cols × rows, dense).
void transpose_into(const float* src, int rows, int cols, int ld, float* dst) {
  constexpr int kB = 16;
  for (int i0 = 0; i0 < rows; i0 += kB)
    for (int j0 = 0; j0 < cols; j0 += kB)
      for (int i = i0; i < std::min(rows, i0 + kB); ++i)
        for (int j = j0; j < std::min(cols, j0 + kB); ++j) dst[long(j) * rows + i] = src[long(i) * ld + j];
}

// The column-major kernel for row-major C = op(A)·op(B): Cᵀ (N×M) = op(B)ᵀ·op(A)ᵀ, i.e. libxsmm's A is our B and
// its B is our A. 1.17 JITs column-major TRANS_B but not TRANS_A, so a row-major tb (= column-major TRANS_A) is
// served by transposing B into a dense (K×N) scratch first. alpha must be 1 and beta 0 or 1 (1.17's JIT).
struct XsmmPlan {
  libxsmm_smmfunction fn = nullptr;
  bool transpose_b = false;
};
XsmmPlan xsmm_plan(bool ta, bool tb, int M, int N, int K, float alpha, float beta, int lda, int ldb, int ldc) {
  XsmmPlan plan;
  if (alpha != 1.f || (beta != 0.f && beta != 1.f)) return plan;
  plan.transpose_b = tb;
  const libxsmm_blasint m = N, n = M, k = K, la = tb ? N : ldb, lb = lda, lc = ldc;
  const int flags = (ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (beta == 0.f ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  const float one = 1.f;
  plan.fn = libxsmm_smmdispatch(m, n, k, &la, &lb, &lc, &one, &beta, &flags, nullptr);
  return plan;
}
// Runs one product with a plan; scratch holds K·N floats when the plan transposes B.
inline void xsmm_run(const XsmmPlan& plan, const Prob& p, float* scratch) {
  const float* b = p.B;
  if (g_xsmm_count) g_xsmm_jit.fetch_add(1, std::memory_order_relaxed);
  if (plan.transpose_b) {
    if (g_xsmm_count) g_xsmm_transposed.fetch_add(1, std::memory_order_relaxed);
    transpose_into(p.B, p.N, p.K, p.ldb, scratch);  // B stored (N×K) → (K×N) dense
    b = scratch;
  }
  plan.fn(b, p.A, p.C);
}
// Per-call entry: dispatch (JIT on first use, a registry look-up after), Eigen when 1.17 has no kernel.
void xsmm_small_call(const Prob& p) {
  const XsmmPlan plan = xsmm_plan(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.beta, p.lda, p.ldb, p.ldc);
  if (!plan.fn) {
    if (g_xsmm_count) g_xsmm_fallback.fetch_add(1, std::memory_order_relaxed);
    eigen_gemm(p);
    return;
  }
  thread_local std::vector<float> scratch;
  if (plan.transpose_b && scratch.size() < size_t(p.K) * p.N) scratch.resize(size_t(p.K) * p.N);
  xsmm_run(plan, p, scratch.data());
}
// Big products: libxsmm_sgemm_omp (column-major, OpenMP tiles of JIT kernels, omp_get_max_threads() threads);
// a row-major tb is transposed into a scratch first (the weight matrix: small).
void xsmm_big_call(const Prob& p) {
  if (p.alpha != 1.f || (p.beta != 0.f && p.beta != 1.f)) {  // 1.17's JIT: alpha = 1, beta 0 or 1 only
    if (g_xsmm_count) g_xsmm_fallback.fetch_add(1, std::memory_order_relaxed);
    eigen_gemm(p);
    return;
  }
  // Up to LIBXSMM_MAX_MNK (64³) libxsmm_sgemm_omp hands the product to its frontend, which in 1.17 goes to the
  // BLAS fall-back for padded leading dimensions: dispatch the kernel directly instead.
  if (double(p.M) * p.N * p.K <= double(LIBXSMM_MAX_MNK)) {
    xsmm_small_call(p);
    return;
  }
  static std::vector<float> scratch;
  const float* b = p.B;
  if (p.tb) {
    if (scratch.size() < size_t(p.K) * p.N) scratch.resize(size_t(p.K) * p.N);
    transpose_into(p.B, p.N, p.K, p.ldb, scratch.data());
    b = scratch.data();
  }
  const char transa = 'N', transb = p.ta ? 'T' : 'N';
  const libxsmm_blasint m = p.N, n = p.M, k = p.K, la = p.tb ? p.N : p.ldb, lb = p.lda, lc = p.ldc;
  libxsmm_sgemm_omp(&transa, &transb, &m, &n, &k, &p.alpha, b, &la, p.A, &lb, &p.beta, p.C, &lc);
}
#endif

// ============================================================================================================
// Machine: FMA peak and clock
// ============================================================================================================
struct Machine {
  std::string model;
  int cores = 0;
  bool avx512 = false;
  double ghz_add = 0, ghz_imul = 0;  // from dependent chains of 1-cycle adds / 3-cycle imuls, one core
  double fma_gflops[3] = {0, 0, 0};  // measured zmm FMA throughput, 1 and 2 threads (per thread CPU time)
  double peak_gflops = 0;            // cores × GHz × 64 (2 FMA units × 16 fp32 lanes × 2 flops)
};

// Seconds of CPU time the calling thread has received (immune to time slicing by other processes).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Clock from a dependent chain of 1-cycle adds (or 3-cycle imuls), over the thread's CPU time: the best of 7.
double ghz_chain(bool imul) {
  double best = 0;
  for (int trial = 0; trial < 7; ++trial) {
    long x = 1;
    const long n = 200000;
    const double c0 = thread_cpu_s();
    for (long i = 0; i < n; ++i) {
      if (imul)
        asm volatile(".rept 100\n\timulq %0, %0\n\t.endr" : "+r"(x));
      else
        asm volatile(".rept 100\n\taddq $1, %0\n\t.endr" : "+r"(x));
    }
    best = std::max(best, double(n) * 100 * (imul ? 3 : 1) / (thread_cpu_s() - c0) * 1e-9);
  }
  return best;
}

// zmm FMA throughput of `threads` threads (16 independent chains each), summed over the threads' CPU time.
double fma_peak(int threads) {
#ifdef __AVX512F__
  double total = 0;
  volatile float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_ps(1e-3f * float(j + omp_get_thread_num()));
    const __m512 m = _mm512_set1_ps(0.99999f), a = _mm512_set1_ps(1e-6f);
    double best = 0;
    for (int trial = 0; trial < 5; ++trial) {
      const double c0 = thread_cpu_s();
      const long n = 2000000;
      for (long i = 0; i < n; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, a);
      }
      best = std::max(best, double(n) * 16 * 32 / (thread_cpu_s() - c0));
    }
    __m512 s = acc[0];
    for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, acc[j]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);  // (not _mm512_reduce_add_ps: gcc 12 warns inside it)
    sink = sink + lanes[0] + lanes[15];
    total += best * 1e-9;
  }
  return total;
#else
  (void)threads;
  return 0;
#endif
}

Machine measure_machine() {
  Machine m;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (m.model.empty() && line.rfind("model name", 0) == 0) m.model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0 && line.find(" avx512f") != std::string::npos) m.avx512 = true;
  }
  m.cores = int(std::thread::hardware_concurrency());
  m.ghz_add = ghz_chain(false);
  m.ghz_imul = ghz_chain(true);
  for (int t = 1; t <= std::min(2, m.cores); ++t) m.fma_gflops[t] = fma_peak(t);
  m.peak_gflops = m.cores * m.ghz_add * (m.avx512 ? 64 : 32);
  return m;
}

// ============================================================================================================
// Shapes
// ============================================================================================================
struct Shape {
  std::string group, name;
  bool ta = false, tb = false;
  int M = 0, N = 0, K = 0;
  float beta = 0;
  double flops() const { return 2.0 * M * N * K; }
};

// ViT Linear products for `rows` tokens: x·Wᵀ, dy·W, dyᵀ·x (β = 1: gradients accumulate, as liere's linear does).
void add_linear_shapes(std::vector<Shape>& v, const std::string& group, int rows, int dim, int mlp) {
  const std::array<std::tuple<const char*, int, int>, 4> layers{
      {{"qkv", dim, 3 * dim}, {"proj", dim, dim}, {"fc1", dim, mlp}, {"fc2", mlp, dim}}};
  for (const auto& [name, in, out] : layers) {
    v.push_back({group, std::string(name) + ".fwd", false, true, rows, out, in, 0.f});
    v.push_back({group, std::string(name) + ".dx", false, false, rows, in, out, 0.f});
    v.push_back({group, std::string(name) + ".dw", true, false, out, in, rows, 1.f});
  }
}

// Attention: B batches × H heads of T×T products, q/k/v inside a (B·T, 3·H·D) buffer, as liere stores them.
constexpr int kB = 128, kT = 65, kH = 3, kD = 64, kQkv = 3 * kH * kD, kHD = kH * kD;
struct AttnShape {
  std::string name;
  bool ta, tb;
  int M, N, K;
  float beta;
  int a_buf, b_buf, c_buf;   // which buffer: 0 qkv, 1 P (B·H·T·T), 2 O/dO (B·T, H·D), 3 dqkv, 4 S / dP out
  long a_off, b_off, c_off;  // offset of head 0 of batch 0 (the q/k/v column block)
  int lda, ldb, ldc;
  long a_sb, a_sh, b_sb, b_sh, c_sb, c_sh;  // strides between batches and between heads
  double flops() const { return 2.0 * M * N * K * kB * kH; }
};
std::vector<AttnShape> attn_shapes() {
  const long qkv_b = long(kT) * kQkv, p_b = long(kH) * kT * kT, p_h = long(kT) * kT, o_b = long(kT) * kHD;
  const long q = 0, k = kHD, v = 2 * kHD;
  return {
      // S = Q·Kᵀ: (T×D)·(T×D)ᵀ
      {"S=QK^T", false, true, kT, kT, kD, 0.f, 0, 0, 4, q, k, 0, kQkv, kQkv, kT, qkv_b, kD, qkv_b, kD, p_b, p_h},
      // O = P·V
      {"O=PV", false, false, kT, kD, kT, 0.f, 1, 0, 2, 0, v, 0, kT, kQkv, kHD, p_b, p_h, qkv_b, kD, o_b, kD},
      // dV += Pᵀ·dO
      {"dV+=P^TdO", true, false, kT, kD, kT, 1.f, 1, 2, 3, 0, 0, v, kT, kHD, kQkv, p_b, p_h, o_b, kD, qkv_b, kD},
      // dP = dO·Vᵀ
      {"dP=dOV^T", false, true, kT, kT, kD, 0.f, 2, 0, 4, 0, v, 0, kHD, kQkv, kT, o_b, kD, qkv_b, kD, p_b, p_h},
      // dQ = dS·K
      {"dQ=dSK", false, false, kT, kD, kT, 0.f, 1, 0, 3, 0, k, q, kT, kQkv, kQkv, p_b, p_h, qkv_b, kD, qkv_b, kD},
      // dK = dSᵀ·Q
      {"dK=dS^TQ", true, false, kT, kD, kT, 0.f, 1, 0, 3, 0, q, k, kT, kQkv, kQkv, p_b, p_h, qkv_b, kD, qkv_b, kD},
      // Extra (not a product liere runs today): S = Q·(Kᵀ) with Kᵀ stored per head as a dense (D×T) block, i.e.
      // the NN form of the first product, to separate the cost of the transposed operand from that of T = 65.
      {"S=Q(K^T)", false, false, kT, kT, kD, 0.f, 0, 1, 4, q, 0, 0, kQkv, kT, kT, qkv_b, kD, p_b, p_h, p_b, p_h},
  };
}

// ============================================================================================================
// Variants
// ============================================================================================================
struct Libs {
  OpenBlas ob, ob_skx;
  bool blis = false, dnnl = false, xsmm = false;
  std::string blis_arch, blis_version, dnnl_version, dnnl_isa, xsmm_target, xsmm_version;
  double blis_init_ms = 0, dnnl_init_ms = 0, xsmm_init_ms = 0;
};

// A way to run a big product at `threads` threads.
struct Variant {
  std::string name, lib;
  std::function<void(int)> pin;               // pins the library (and OpenMP) to n threads
  std::function<void(const Prob&, int)> run;  // one product at n threads
  bool settle = false;                        // OpenBLAS's own pthreads spin ~0.13 s after each threaded call
};
// A way to run one attention shape (all B·H products) at `threads` threads.
struct AttnVariant {
  std::string name, lib;
  bool batched = false;
  GemmFn one;  // per-call: the single-threaded product, called in an OpenMP loop
  std::function<void(const AttnShape&, float* const* bufs, int)> batch;  // batched
};

bool wanted(const std::vector<std::string>& only, const std::string& lib) {
  return only.empty() || std::find(only.begin(), only.end(), lib) != only.end();
}

std::vector<Variant> make_variants(Libs& L, int threads, const std::vector<std::string>& only) {
  std::vector<Variant> v;
  [[maybe_unused]] auto omp_pin = [](int n) { omp_set_num_threads(n); };
  const GemmFn eigen1 = eigen_gemm;
  if (wanted(only, "eigen")) {
    // "eigen" is the engine's current path: plain at one thread, slabs at more.
    v.push_back({"eigen", "eigen",
                 [](int n) {
                   omp_set_num_threads(n);
                   Eigen::setNbThreads(1);
                 },
                 [eigen1](const Prob& p, int n) { n > 1 ? slab_gemm(eigen1, n, p) : eigen_gemm(p); }, false});
    if (threads > 1)
      v.push_back({"eigen-mt", "eigen",
                   [](int n) {
                     omp_set_num_threads(n);
                     Eigen::setNbThreads(n);
                   },
                   [](const Prob& p, int) { eigen_gemm(p); }, false});
  }
  for (OpenBlas* ob : {&L.ob, &L.ob_skx}) {
    if (!ob->ok() || !wanted(only, "openblas")) continue;
    const std::string name = ob->name;
    v.push_back({name, "openblas",
                 [ob](int n) {
                   omp_set_num_threads(n);
                   ob->set_threads(n);
                 },
                 [ob](const Prob& p, int) { ob->gemm(p); }, true});
    if (threads > 1) {
      const GemmFn g1 = [ob](const Prob& p) { ob->gemm(p); };
      v.push_back({name + "/slab", "openblas",
                   [ob](int n) {
                     omp_set_num_threads(n);
                     ob->set_threads(1);
                   },
                   [g1](const Prob& p, int n) { slab_gemm(g1, n, p); }, false});
    }
  }
#ifdef LIERE_BENCH_HAVE_BLIS
  if (L.blis && wanted(only, "blis")) {
    v.push_back({"blis", "blis", omp_pin, [](const Prob& p, int n) { blis_gemm(p, n); }, false});
    if (threads > 1) {
      const GemmFn g1 = [](const Prob& p) { blis_gemm(p, 1); };
      v.push_back({"blis/slab", "blis", omp_pin, [g1](const Prob& p, int n) { slab_gemm(g1, n, p); }, false});
    }
  }
#endif
#ifdef LIERE_BENCH_HAVE_DNNL
  if (L.dnnl && wanted(only, "dnnl")) {
    v.push_back({"dnnl-sgemm", "dnnl", omp_pin, [](const Prob& p, int) { dnnl_sgemm_call(p); }, false});
    if (threads > 1) {
      const GemmFn g1 = dnnl_sgemm_call;
      v.push_back({"dnnl-sgemm/slab", "dnnl", omp_pin, [g1](const Prob& p, int n) { slab_gemm(g1, n, p); }, false});
    }
    v.push_back({"dnnl-matmul", "dnnl", omp_pin, [](const Prob& p, int) { dnnl_matmul_call(p); }, false});
  }
#endif
#ifdef LIERE_BENCH_HAVE_XSMM
  if (L.xsmm && wanted(only, "libxsmm"))
    v.push_back({"libxsmm", "libxsmm", omp_pin, [](const Prob& p, int) { xsmm_big_call(p); }, false});
#endif
  (void)L;
  return v;
}

Prob attn_prob(const AttnShape& s, float* const* bufs, int b, int h) {
  Prob p;
  p.ta = s.ta, p.tb = s.tb, p.M = s.M, p.N = s.N, p.K = s.K, p.alpha = 1.f, p.beta = s.beta;
  p.A = bufs[s.a_buf] + s.a_off + b * s.a_sb + h * s.a_sh, p.lda = s.lda;
  p.B = bufs[s.b_buf] + s.b_off + b * s.b_sb + h * s.b_sh, p.ldb = s.ldb;
  p.C = bufs[s.c_buf] + s.c_off + b * s.c_sb + h * s.c_sh, p.ldc = s.ldc;
  return p;
}

void attn_per_call(const GemmFn& one, const AttnShape& s, float* const* bufs, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int bh = 0; bh < kB * kH; ++bh) one(attn_prob(s, bufs, bh / kH, bh % kH));
}

std::vector<AttnVariant> make_attn_variants(Libs& L, const std::vector<std::string>& only) {
  std::vector<AttnVariant> v;
  if (wanted(only, "eigen")) v.push_back({"eigen", "eigen", false, eigen_gemm, nullptr});
  if (wanted(only, "openblas")) {
    if (L.ob.ok()) v.push_back({L.ob.name, "openblas", false, [&L](const Prob& p) { L.ob.gemm(p); }, nullptr});
    if (L.ob_skx.ok())
      v.push_back({L.ob_skx.name, "openblas", false, [&L](const Prob& p) { L.ob_skx.gemm(p); }, nullptr});
  }
#ifdef LIERE_BENCH_HAVE_BLIS
  if (L.blis && wanted(only, "blis"))
    v.push_back({"blis", "blis", false, [](const Prob& p) { blis_gemm(p, 1); }, nullptr});
#endif
#ifdef LIERE_BENCH_HAVE_DNNL
  if (L.dnnl && wanted(only, "dnnl")) {
    v.push_back({"dnnl-sgemm", "dnnl", false, dnnl_sgemm_call, nullptr});
    v.push_back({"dnnl-matmul", "dnnl", false, dnnl_matmul_call, nullptr});
    // One 4-D strided matmul over (batch, head): oneDNN threads over the batch itself.
    v.push_back({"dnnl-matmul-batch", "dnnl", true, nullptr, [](const AttnShape& s, float* const* bufs, int threads) {
                   MatmulSpec m;
                   m.b0 = kB, m.b1 = kH, m.M = s.M, m.N = s.N, m.K = s.K, m.beta = s.beta, m.threads = threads;
                   m.sa = {s.a_sb, s.a_sh, s.ta ? 1 : s.lda, s.ta ? s.lda : 1};
                   m.sb = {s.b_sb, s.b_sh, s.tb ? 1 : s.ldb, s.tb ? s.ldb : 1};
                   m.sc = {s.c_sb, s.c_sh, s.ldc, 1};
                   dnnl_matmul_exec(dnnl_matmul_entry(m), bufs[s.a_buf] + s.a_off, bufs[s.b_buf] + s.b_off,
                                    bufs[s.c_buf] + s.c_off);
                 }});
  }
#endif
#ifdef LIERE_BENCH_HAVE_XSMM
  if (L.xsmm && wanted(only, "libxsmm")) {
    v.push_back({"libxsmm", "libxsmm", false, xsmm_small_call, nullptr});
    // One dispatch for the whole batch, then the JIT kernel called directly in an OpenMP loop.
    v.push_back({"libxsmm-batch", "libxsmm", true, nullptr, [](const AttnShape& s, float* const* bufs, int threads) {
                   const XsmmPlan plan = xsmm_plan(s.ta, s.tb, s.M, s.N, s.K, 1.f, s.beta, s.lda, s.ldb, s.ldc);
                   if (!plan.fn) {
                     std::fprintf(stderr, "libxsmm: no kernel for %s\n", s.name.c_str());
                     std::exit(1);
                   }
#pragma omp parallel num_threads(threads)
                   {
                     thread_local std::vector<float> scratch;
                     if (scratch.size() < size_t(s.K) * s.N) scratch.resize(size_t(s.K) * s.N);
#pragma omp for schedule(static)
                     for (int bh = 0; bh < kB * kH; ++bh)
                       xsmm_run(plan, attn_prob(s, bufs, bh / kH, bh % kH), scratch.data());
                   }
                 }});
  }
#endif
  (void)L;
  return v;
}

// ============================================================================================================
// Correctness against a double-precision reference
// ============================================================================================================
struct CheckResult {
  double max_units = 0;  // max over elements of |c − ref| / (u·(|α|Σ|a||b| + |β||c₀|))
  double max_rel = 0;    // max |c − ref| / max |ref|
  long elements = 0;
  bool nan = false;
  int K = 0;
  bool pass() const { return !nan && max_units <= K + 2; }
  void merge(const CheckResult& o) {
    max_units = std::max(max_units, o.max_units), max_rel = std::max(max_rel, o.max_rel);
    elements += o.elements, nan = nan || o.nan, K = std::max(K, o.K);
  }
};
constexpr double kU = 1.0 / (1 << 24);

inline float opA(const Prob& p, int i, int k) { return p.ta ? p.A[long(k) * p.lda + i] : p.A[long(i) * p.lda + k]; }
inline float opB(const Prob& p, int k, int j) { return p.tb ? p.B[long(j) * p.ldb + k] : p.B[long(k) * p.ldb + j]; }

// Checks the elements (i, j) of p.C (after the product) against C₀ values c0 (before it; ignored when beta = 0).
CheckResult check_elements(const Prob& p, const std::vector<std::pair<int, int>>& ij, const std::vector<float>& c0) {
  CheckResult r;
  r.K = p.K;
  double max_ref = 0, max_err = 0;
  for (size_t e = 0; e < ij.size(); ++e) {
    const auto [i, j] = ij[e];
    double s = 0, sa = 0;
    for (int k = 0; k < p.K; ++k) {
      const double t = double(opA(p, i, k)) * double(opB(p, k, j));
      s += t, sa += std::abs(t);
    }
    const double c0v = p.beta != 0.f ? double(c0[e]) : 0.0;
    const double ref = double(p.alpha) * s + double(p.beta) * c0v;
    const double bound = double(std::abs(p.alpha)) * sa + std::abs(double(p.beta) * c0v);
    const double got = p.C[long(i) * p.ldc + j];
    if (!std::isfinite(got)) {
      r.nan = true;
      continue;
    }
    const double err = std::abs(got - ref);
    r.max_units = std::max(r.max_units, err / (kU * bound + 1e-30));
    max_err = std::max(max_err, err), max_ref = std::max(max_ref, std::abs(ref));
  }
  r.max_rel = max_err / (max_ref + 1e-30);
  r.elements = long(ij.size());
  return r;
}

// Runs `run` on p (C filled with NaN when beta = 0, with random values otherwise) and checks elements: all of
// them when M·N ≤ max_full, else `samples` random ones plus the corners.
CheckResult check_product(const std::function<void(const Prob&)>& run, Prob p, long max_full, int samples,
                          std::uint64_t seed) {
  std::vector<std::pair<int, int>> ij;
  if (long(p.M) * p.N <= max_full) {
    for (int i = 0; i < p.M; ++i)
      for (int j = 0; j < p.N; ++j) ij.emplace_back(i, j);
  } else {
    std::uint64_t s = seed | 1;
    for (int e = 0; e < samples; ++e) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      ij.emplace_back(int(s % std::uint64_t(p.M)), int((s >> 32) % std::uint64_t(p.N)));
    }
    for (int i : {0, p.M - 1})
      for (int j : {0, p.N - 1}) ij.emplace_back(i, j);
  }
  std::vector<float> c0(ij.size());
  if (p.beta == 0.f) {
    for (int i = 0; i < p.M; ++i)
      std::fill(p.C + long(i) * p.ldc, p.C + long(i) * p.ldc + p.N, std::numeric_limits<float>::quiet_NaN());
  } else {
    for (size_t e = 0; e < ij.size(); ++e) c0[e] = p.C[long(ij[e].first) * p.ldc + ij[e].second];
  }
  run(p);
  return check_elements(p, ij, c0);
}

// ============================================================================================================
// Results
// ============================================================================================================
struct Series {
  std::vector<double> gflops, ratio;  // per round; ratio = this variant / eigen in the same round
  std::vector<double> gflops_cpu;     // per round: flops / CPU seconds of the process (all threads) / threads
  std::vector<double> share;          // per round: CPU seconds / (wall seconds × threads): 1 = had the cores
  std::string impl;
  long calls = 0;
};
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}
class Json {
 public:
  Json& add(const std::string& k, double v) {
    char b[64];
    if (std::isfinite(v))
      std::snprintf(b, sizeof b, "%.6g", v);
    else
      std::snprintf(b, sizeof b, "null");
    return raw(k, b);
  }
  Json& add(const std::string& k, const std::string& v) { return raw(k, "\"" + json_escape(v) + "\""); }
  Json& add(const std::string& k, const char* v) { return add(k, std::string(v)); }
  std::string str() const { return "{" + s_ + "}"; }

 private:
  Json& raw(const std::string& k, const std::string& v) {
    if (!s_.empty()) s_ += ',';
    s_ += "\"" + k + "\":" + v;
    return *this;
  }
  std::string s_;
};
struct JsonOut {
  std::string path, run_id;
  void write(Json j) const {
    if (path.empty()) return;
    j.add("run", run_id);
    std::ofstream(path, std::ios::app) << j.str() << '\n';
  }
};

// ============================================================================================================
// Options
// ============================================================================================================
struct Options {
  std::vector<int> threads{1, 2};
  int rounds = 5;
  double min_ms = 25;
  std::string json, blis_arch = "default", openblas_core2 = "auto";
  std::vector<std::string> groups{"vit-tiny", "attn", "vit-b"}, libs, skip;
  bool check = true, quick = false;
  int settle_ms = 130;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) v.push_back(x);
  return v;
}
template <class T>
std::string join(const std::vector<T>& v) {
  std::ostringstream s;
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str();
}
// A comma-separated list flag whose every entry must be one of `allowed` (any entry when it is empty).
void add_list(app::Flags& f, const std::string& name, std::vector<std::string>* v, const std::string& help,
              const std::vector<std::string>& allowed = {}) {
  f.add(
      name, "LIST", help,
      [v, allowed](const std::string& s) {
        std::vector<std::string> items = split(s);
        for (const auto& x : items)
          LIERE_ENSURE(allowed.empty() || std::find(allowed.begin(), allowed.end(), x) != allowed.end(),
                       "'" << x << "' is none of " << join(allowed));
        *v = std::move(items);
      },
      [v] { return join(*v); });
}

// The flags into o (--quick applied); false after --help.
bool parse_flags(int argc, char** argv, Options& o) {
  app::Flags f("bench_gemm",
               "Single-precision GEMM libraries side by side on liere's ViT shapes (see the header of\n"
               "bench/bench_gemm.cpp). Checks every library against a double reference, then times the shapes\n"
               "interleaved (every variant once per round per shape) and prints medians over rounds.\n"
               "Environment: OPENBLAS_CORETYPE applies to the first OpenBLAS copy; BLIS_ARCH_TYPE overrides "
               "--blis-arch.");
  f.section("Options");
  f.add(
      "threads", "LIST", "thread counts to measure, comma-separated",
      [&](const std::string& s) {
        std::vector<int> t;
        for (const auto& x : split(s)) {
          const long long n = app::Flags::to_int(x);
          LIERE_ENSURE(n >= 1 && n <= 4096, "expected thread counts in [1, 4096]");
          t.push_back(int(n));
        }
        LIERE_ENSURE(!t.empty(), "expected at least one thread count");
        o.threads = t;
      },
      [&] { return join(o.threads); });
  f.add("rounds", &o.rounds, "rounds", app::Range{1, INT_MAX});
  f.add("min-ms", &o.min_ms, "minimum duration of one sample, ms (repeats small products)");
  add_list(f, "groups", &o.groups, "shape groups: vit-tiny, attn, vit-b", {"vit-tiny", "attn", "vit-b"});
  add_list(f, "libs", &o.libs, "libraries: eigen, openblas, blis, dnnl, libxsmm (none: all that were built and load)",
           {"eigen", "openblas", "blis", "dnnl", "libxsmm"});
  add_list(f, "skip", &o.skip,
           "variants to leave out, e.g. blis,eigen-mt,attn:blis (names as printed; attn: prefix for the attention "
           "variants)");
  f.add("blis-arch", &o.blis_arch,
        "BLIS_ARCH_TYPE to use unless set in the environment: skx, zen3, haswell, ... or auto (BLIS's own "
        "detection); default: skx on AVX-512 CPUs, else auto",
        "A");
  f.add("openblas-core2", &o.openblas_core2,
        "when the environment gives OpenBLAS a core without AVX-512 (OPENBLAS_CORETYPE), also load a second copy "
        "with OPENBLAS_CORETYPE=C; auto = unset, OpenBLAS's own detection; e.g. SkylakeX",
        "C");
  f.add("settle-ms", &o.settle_ms, "pause after each threaded OpenBLAS sample, longer than its worker spin, ms");
  f.add("json", &o.json, "append one JSON object per line (machine, checks, latencies, results) to PATH", "PATH");
  bool no_check = false;
  f.add_switch("no-check", &no_check, "skip the correctness checks");
  f.add_switch("quick", &o.quick, "smoke run: 1 round, 5 ms samples, no ViT-B");
  if (!f.parse(argc, argv)) return false;
  o.check = !no_check;
  if (o.quick) {
    o.rounds = 1, o.min_ms = 5;
    o.groups.erase(std::remove(o.groups.begin(), o.groups.end(), "vit-b"), o.groups.end());
  }
  return true;
}

bool has_group(const Options& o, const std::string& g) {
  return std::find(o.groups.begin(), o.groups.end(), g) != o.groups.end();
}

// ============================================================================================================
// Library set-up
// ============================================================================================================
void load_libs(Libs& L, const Options& o, const Machine& m) {
  L.ob.load(LIERE_BENCH_OPENBLAS_PATH, false, "");
  if (!L.ob.ok()) std::printf("# OpenBLAS: not loaded (%s)\n", L.ob.error.c_str());
  // When the process environment gives OpenBLAS a core without AVX-512 kernels (this machine exports
  // OPENBLAS_CORETYPE=Haswell), a second copy with --openblas-core2 (default: unset, OpenBLAS's own detection).
  if (L.ob.ok() && m.avx512 && !L.ob.avx512()) {
    L.ob_skx.load(LIERE_BENCH_OPENBLAS_PATH, true, o.openblas_core2 == "auto" ? "" : o.openblas_core2);
    if (!L.ob_skx.ok())
      std::printf("# OpenBLAS second copy: not loaded (%s)\n", L.ob_skx.error.c_str());
    else if (L.ob_skx.core == L.ob.core)
      L.ob_skx = OpenBlas{};
  }
#ifdef LIERE_BENCH_HAVE_BLIS
  if (!g_blis.load(LIERE_BENCH_BLIS_PATH)) {
    std::printf("# BLIS: not loaded (%s)\n", g_blis.error.c_str());
  } else {
    std::string arch = o.blis_arch;
    if (arch == "default") arch = m.avx512 ? "skx" : "auto";
    if (arch != "auto" && !std::getenv("BLIS_ARCH_TYPE")) setenv("BLIS_ARCH_TYPE", arch.c_str(), 1);
    const auto t0 = Clock::now();
    g_blis.init();
    L.blis_init_ms = seconds_since(t0) * 1e3;
    L.blis = true;
    L.blis_arch = g_blis.arch_string(g_blis.arch_query_id());
    L.blis_version = g_blis.version();
  }
#endif
#ifdef LIERE_BENCH_HAVE_DNNL
  {
    const auto t0 = Clock::now();
    (void)dnnl_engine();
    L.dnnl_init_ms = seconds_since(t0) * 1e3;
    const dnnl_version_t* v = dnnl_version();
    L.dnnl_version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    switch (dnnl_get_effective_cpu_isa()) {
      case dnnl_cpu_isa_avx512_core:
        L.dnnl_isa = "avx512_core";
        break;
      case dnnl_cpu_isa_avx512_core_vnni:
        L.dnnl_isa = "avx512_core_vnni";
        break;
      case dnnl_cpu_isa_avx512_core_bf16:
        L.dnnl_isa = "avx512_core_bf16";
        break;
      case dnnl_cpu_isa_avx512_core_amx:
        L.dnnl_isa = "avx512_core_amx";
        break;
      case dnnl_cpu_isa_avx2:
        L.dnnl_isa = "avx2";
        break;
      default:
        L.dnnl_isa = "isa " + std::to_string(int(dnnl_get_effective_cpu_isa()));
    }
    L.dnnl = true;
  }
#endif
#ifdef LIERE_BENCH_HAVE_XSMM
  {
    const auto t0 = Clock::now();
    libxsmm_init();
    L.xsmm_init_ms = seconds_since(t0) * 1e3;
    L.xsmm = true;
    L.xsmm_target = libxsmm_get_target_arch();
    L.xsmm_version = LIBXSMM_VERSION;
  }
#endif
  (void)o;
}

// ============================================================================================================
// Latency: first call (JIT, thread start-up, packing buffers) against the steady state
// ============================================================================================================
struct Latency {
  std::string lib;
  double first_small_us = 0, second_small_us = 0, steady_small_us = 0, first_big_ms = 0, steady_big_ms = 0;
  std::string note;
};

std::vector<Latency> measure_latency(Libs& L, int threads) {
  std::vector<Latency> out;
  // small: S = Q·Kᵀ of one head (65×65×64, NT, ld 576); big: fc1 forward of ViT-Tiny (8320×768×192, NT).
  const int T = kT, D = kD;
  Buf q = alloc(size_t(T) * kQkv), s = alloc(size_t(T) * T);
  fill_uniform(q.get(), size_t(T) * kQkv, 7);
  Prob ps;
  ps.ta = false, ps.tb = true, ps.M = T, ps.N = T, ps.K = D, ps.A = q.get(), ps.lda = kQkv, ps.B = q.get() + kHD,
  ps.ldb = kQkv, ps.C = s.get(), ps.ldc = T;
  const int R = 8320, C = 192, H = 768;
  Buf x = alloc(size_t(R) * C), w = alloc(size_t(H) * C), y = alloc(size_t(R) * H);
  fill_uniform(x.get(), size_t(R) * C, 8), fill_uniform(w.get(), size_t(H) * C, 9);
  Prob pb;
  pb.ta = false, pb.tb = true, pb.M = R, pb.N = H, pb.K = C, pb.A = x.get(), pb.lda = C, pb.B = w.get(), pb.ldb = C,
  pb.C = y.get(), pb.ldc = H;

  auto time_us = [](const std::function<void()>& f) {
    const auto t0 = Clock::now();
    f();
    return seconds_since(t0) * 1e6;
  };
  auto steady_us = [&](const std::function<void()>& f, int n) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) t.push_back(time_us(f));
    return median(t);
  };
  auto measure = [&](const std::string& lib, const std::function<void(int)>& pin, const GemmFn& small,
                     const GemmFn& big, const std::string& note) {
    Latency l;
    l.lib = lib, l.note = note;
    pin(1);
    l.first_small_us = time_us([&] { small(ps); });
    l.second_small_us = time_us([&] { small(ps); });
    l.steady_small_us = steady_us([&] { small(ps); }, 200);
    pin(threads);
    l.first_big_ms = time_us([&] { big(pb); }) * 1e-3;
    l.steady_big_ms = steady_us([&] { big(pb); }, 5) * 1e-3;
    out.push_back(l);
  };
  measure(
      "eigen",
      [](int n) {
        Eigen::setNbThreads(n);
        omp_set_num_threads(n);
      },
      eigen_gemm, eigen_gemm, "");
  for (OpenBlas* ob : {&L.ob, &L.ob_skx})
    if (ob->ok())
      measure(
          ob->name,
          [ob](int n) {
            ob->set_threads(n);
            omp_set_num_threads(n);
          },
          [ob](const Prob& p) { ob->gemm(p); }, [ob](const Prob& p) { ob->gemm(p); },
          "library load (dlopen, core detection, buffers) " + std::to_string(ob->load_ms) + " ms before");
#ifdef LIERE_BENCH_HAVE_BLIS
  if (L.blis)
    measure(
        "blis", [](int n) { omp_set_num_threads(n); }, [](const Prob& p) { blis_gemm(p, 1); },
        [threads](const Prob& p) { blis_gemm(p, threads); },
        "bli_init " + std::to_string(L.blis_init_ms) + " ms before");
#endif
#ifdef LIERE_BENCH_HAVE_DNNL
  if (L.dnnl) {
    measure(
        "dnnl-sgemm", [](int n) { omp_set_num_threads(n); }, dnnl_sgemm_call, dnnl_sgemm_call,
        "engine creation " + std::to_string(L.dnnl_init_ms) + " ms before");
    measure(
        "dnnl-matmul", [](int n) { omp_set_num_threads(n); }, dnnl_matmul_call, dnnl_matmul_call,
        "first call creates (JITs) the primitive");
    // Primitive creation with oneDNN's own primitive cache warm (same descriptor again, our cache bypassed).
    omp_set_num_threads(1);
    const MatmulSpec spec = matmul_spec_2d(ps, 1);
    const auto& e = dnnl_matmul_entry(spec);
    std::vector<double> t;
    for (int i = 0; i < 50; ++i) {
      const auto t0 = Clock::now();
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.pd.src_desc(), e.pd.weights_desc(), e.pd.dst_desc()),
                                      dnnl::primitive_attr(), dnnl_engine());
      dnnl::matmul prim(pd);
      t.push_back(seconds_since(t0) * 1e6);
    }
    Latency l;
    l.lib = "dnnl-matmul (re-create, cache hit)";
    l.steady_small_us = median(t);
    l.note = "pd + primitive creation of an already-created descriptor (oneDNN primitive cache hit)";
    out.push_back(l);
  }
#endif
#ifdef LIERE_BENCH_HAVE_XSMM
  if (L.xsmm) {
    measure(
        "libxsmm", [](int n) { omp_set_num_threads(n); }, xsmm_small_call, xsmm_big_call,
        "libxsmm_init " + std::to_string(L.xsmm_init_ms) + " ms before; small: dispatch (JIT) + B transpose");
    std::vector<double> t;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = Clock::now();
      volatile auto plan = xsmm_plan(false, true, T, T, D, 1.f, 0.f, kQkv, kQkv, T).fn;
      (void)plan;
      t.push_back(seconds_since(t0) * 1e6);
    }
    Latency l;
    l.lib = "libxsmm (dispatch, registry hit)";
    l.steady_small_us = median(t);
    l.note = "libxsmm_smmdispatch of an existing kernel";
    out.push_back(l);
  }
#endif
  (void)L;
  omp_set_num_threads(threads);
  return out;
}

// ============================================================================================================
// Machine, libraries and first-call latency: printed and written as JSON
// ============================================================================================================
// The run's id in every JSON line: the local time it started.
std::string run_id_now() {
  char run_id[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(run_id, sizeof run_id, "%Y-%m-%dT%H:%M:%S", std::localtime(&now));
  return run_id;
}

void report_machine(const Machine& mach, const std::string& run_id, const JsonOut& json) {
  double load[3] = {0, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    std::fclose(f);
  }
  std::printf("# bench_gemm  %s  CPU %s, %d cores, AVX-512 %s, Eigen %d.%d.%d, load average %.2f\n", run_id.c_str(),
              mach.model.c_str(), mach.cores, mach.avx512 ? "yes" : "no", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
              EIGEN_MINOR_VERSION, load[0]);
  std::printf(
      "# clock: %.2f GHz (dependent 1-cycle adds), %.2f GHz (dependent 3-cycle imuls), one core, per CPU "
      "second received\n",
      mach.ghz_add, mach.ghz_imul);
  std::printf(
      "# FMA peak: %d cores x %.2f GHz x %d flop/cycle (2 FMA units x %d fp32 lanes x 2) = %.1f GFLOP/s; "
      "measured zmm FMA loop: %.1f GFLOP/s (1 thread), %.1f GFLOP/s (2 threads, summed per-thread rates)\n",
      mach.cores, mach.ghz_add, mach.avx512 ? 64 : 32, mach.avx512 ? 16 : 8, mach.peak_gflops, mach.fma_gflops[1],
      mach.fma_gflops[2]);
  json.write(Json()
                 .add("kind", "machine")
                 .add("cpu", mach.model)
                 .add("cores", mach.cores)
                 .add("avx512", mach.avx512 ? 1 : 0)
                 .add("ghz_add", mach.ghz_add)
                 .add("ghz_imul", mach.ghz_imul)
                 .add("peak_gflops", mach.peak_gflops)
                 .add("peak_gflops_per_core", mach.peak_gflops / std::max(1, mach.cores))
                 .add("fma_loop_gflops_1t", mach.fma_gflops[1])
                 .add("fma_loop_gflops_2t", mach.fma_gflops[2])
                 .add("loadavg", load[0]));
}

void report_libs(const Libs& L, const JsonOut& json) {
  std::printf("# eigen %d.%d.%d (header, -march=native)\n", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION,
              EIGEN_MINOR_VERSION);
  for (const OpenBlas* ob : {&L.ob, &L.ob_skx})
    if (ob->ok())
      std::printf("# %s: %s, core %s (OPENBLAS_CORETYPE %s at load%s), OPENBLAS_L2_SIZE %s\n", ob->name.c_str(),
                  ob->config.c_str(), ob->core.c_str(), ob->coretype_env.c_str(),
                  ob == &L.ob_skx ? "; second copy, dlmopen" : "",
                  std::getenv("OPENBLAS_L2_SIZE") ? std::getenv("OPENBLAS_L2_SIZE") : "unset");
  if (L.blis)
    std::printf("# blis %s, arch %s (BLIS_ARCH_TYPE=%s)\n", L.blis_version.c_str(), L.blis_arch.c_str(),
                std::getenv("BLIS_ARCH_TYPE") ? std::getenv("BLIS_ARCH_TYPE") : "unset");
  if (L.dnnl) std::printf("# onednn %s, ISA %s, OpenMP runtime\n", L.dnnl_version.c_str(), L.dnnl_isa.c_str());
  if (L.xsmm) std::printf("# libxsmm %s, target %s\n", L.xsmm_version.c_str(), L.xsmm_target.c_str());
  json.write(
      Json()
          .add("kind", "libs")
          .add("openblas",
               L.ob.ok() ? L.ob.name + ": " + L.ob.config + " (OPENBLAS_CORETYPE " + L.ob.coretype_env + ")" : "")
          .add("openblas2", L.ob_skx.ok() ? L.ob_skx.name + ": core " + L.ob_skx.core + " (OPENBLAS_CORETYPE " +
                                                L.ob_skx.coretype_env + ")"
                                          : "")
          .add("blis", L.blis ? L.blis_version + " arch " + L.blis_arch : "")
          .add("dnnl", L.dnnl ? L.dnnl_version + " " + L.dnnl_isa : "")
          .add("libxsmm", L.xsmm ? L.xsmm_version + " " + L.xsmm_target : ""));
}

// The first call (JIT, thread start-up, packing buffers) against the steady state, at `threads` threads for the big
// product: before anything else touches the libraries.
void report_latency(Libs& L, int threads, const JsonOut& json) {
  const auto lat = measure_latency(L, threads);
  std::printf("\n# first-call latency (small: 65x65x64 NT, 1 thread; big: 8320x768x192 NT, %d threads)\n", threads);
  std::printf("%-36s %12s %12s %12s %12s %12s  %s\n", "library", "1st small us", "2nd small us", "steady us",
              "1st big ms", "steady big ms", "note");
  for (const auto& l : lat) {
    std::printf("%-36s %12.1f %12.1f %12.2f %12.2f %12.2f  %s\n", l.lib.c_str(), l.first_small_us, l.second_small_us,
                l.steady_small_us, l.first_big_ms, l.steady_big_ms, l.note.c_str());
    json.write(Json()
                   .add("kind", "latency")
                   .add("lib", l.lib)
                   .add("threads", threads)
                   .add("first_small_us", l.first_small_us)
                   .add("second_small_us", l.second_small_us)
                   .add("steady_small_us", l.steady_small_us)
                   .add("first_big_ms", l.first_big_ms)
                   .add("steady_big_ms", l.steady_big_ms)
                   .add("note", l.note));
  }
}

// ============================================================================================================
// The workload: the shapes of the groups asked for and their buffers
// ============================================================================================================
struct Workload {
  explicit Workload(const Options& opt) {
    if (has_group(opt, "vit-tiny")) {
      add_linear_shapes(shapes, "vit-tiny", kB * kT, 192, 768);
      shapes.push_back({"vit-tiny", "patch.fwd", false, true, 8192, 192, 48, 0.f});
      shapes.push_back({"vit-tiny", "patch.dw", true, false, 192, 48, 8192, 1.f});
    }
    if (has_group(opt, "vit-b")) add_linear_shapes(shapes, "vit-b", 64 * 197, 768, 3072);
    data.resize(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      const size_t na = size_t(s.M) * s.K, nb = size_t(s.K) * s.N, nc = size_t(s.M) * s.N;
      data[i] = {alloc(na), alloc(nb), alloc(nc)};
      fill_uniform(data[i].a.get(), na, 11 + 3 * i), fill_uniform(data[i].b.get(), nb, 12 + 3 * i);
      fill_c(i);
    }
    attn = has_group(opt, "attn");
    if (attn) ashapes = attn_shapes();
    if (attn)
      for (int i = 0; i < 5; ++i) {
        abuf.push_back(alloc(abuf_n[i]));
        fill_uniform(abuf.back().get(), abuf_n[i], 100 + i);
        abufs[i] = abuf.back().get();
      }
  }
  // The product of shape i on its buffers (dense, row-major).
  Prob prob(size_t i) const {
    const Shape& s = shapes[i];
    Prob p;
    p.ta = s.ta, p.tb = s.tb, p.M = s.M, p.N = s.N, p.K = s.K, p.alpha = 1.f, p.beta = s.beta;
    p.A = data[i].a.get(), p.lda = s.ta ? s.M : s.K;
    p.B = data[i].b.get(), p.ldb = s.tb ? s.K : s.N;
    p.C = data[i].c.get(), p.ldc = s.N;
    return p;
  }
  // C of shape i with its initial values again (the β = 1 products accumulate into it).
  void fill_c(size_t i) { fill_uniform(data[i].c.get(), size_t(shapes[i].M) * shapes[i].N, 13 + 3 * i); }

  std::vector<Shape> shapes;
  struct Data {
    Buf a, b, c;
  };
  std::vector<Data> data;
  bool attn = false;
  std::vector<AttnShape> ashapes;
  // Buffers: 0 qkv (B·T, 576), 1 P / dS (B·H, T, T), 2 O / dO (B·T, 192), 3 dqkv (B·T, 576), 4 S / dP (B·H, T, T).
  const size_t abuf_n[5] = {size_t(kB) * kT * kQkv, size_t(kB) * kH* kT* kT, size_t(kB) * kT* kHD,
                            size_t(kB) * kT* kQkv, size_t(kB) * kH* kT* kT};
  std::vector<Buf> abuf;
  float* abufs[5] = {};
};

// Runs every (batch, head) product of attention shape s with variant av.
void run_attn(const AttnVariant& av, const AttnShape& s, float* const* bufs, int threads) {
  if (av.batched)
    av.batch(s, bufs, threads);
  else
    attn_per_call(av.one, s, bufs, threads);
}

// ============================================================================================================
// Correctness at one thread count
// ============================================================================================================
// Prints one check's line and writes its JSON line; all_pass is false once a check failed. known: a documented
// limitation of the library rather than a wrong result of the wrapper (reported as "FAIL (known)", does not change
// the exit status).
struct CheckReport {
  int threads;
  const JsonOut& json;
  bool all_pass = true;
  void operator()(const std::string& name, const std::string& what, const CheckResult& r, int cases,
                  const std::string& note, bool known = false) {
    std::printf("%-20s %8d %10ld %12.3g %12.3g  %s%s\n", name.c_str(), cases, r.elements, r.max_units, r.max_rel,
                r.pass() ? "pass"
                : known  ? "FAIL (known)"
                         : "FAIL",
                note.c_str());
    all_pass = all_pass && (r.pass() || known);
    json.write(Json()
                   .add("kind", "check")
                   .add("variant", name)
                   .add("what", what)
                   .add("threads", threads)
                   .add("cases", cases)
                   .add("elements", double(r.elements))
                   .add("max_units", r.max_units)
                   .add("max_rel", r.max_rel)
                   .add("pass", r.pass() ? 1 : 0)
                   .add("known", known ? 1 : 0)
                   .add("note", note));
  }
};

// Odd sizes with padded leading dimensions, all transposes, three (alpha, beta); the padding of C must stay
// untouched.
void unit_cases(const std::function<void(const Prob&)>& run, CheckResult& res, int& cases) {
  const std::array<std::array<int, 3>, 4> dims{{{37, 29, 53}, {1, 7, 5}, {129, 67, 300}, {301, 257, 263}}};
  const std::array<std::pair<float, float>, 3> ab{{{1.f, 0.f}, {1.f, 1.f}, {-1.5f, 0.5f}}};
  const int pad = 5;
  std::uint64_t seed = 1;
  int failures = 0;
  for (const auto& d : dims)
    for (int t = 0; t < 4; ++t)
      for (const auto& [alpha, beta] : ab) {
        const bool ta = t & 1, tb = t & 2;
        const int M = d[0], N = d[1], K = d[2];
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        Buf a = alloc(size_t(ta ? K : M) * lda), b = alloc(size_t(tb ? N : K) * ldb), c = alloc(size_t(M) * ldc);
        fill_uniform(a.get(), size_t(ta ? K : M) * lda, ++seed),
            fill_uniform(b.get(), size_t(tb ? N : K) * ldb, ++seed);
        fill_uniform(c.get(), size_t(M) * ldc, ++seed);
        Prob p;
        p.ta = ta, p.tb = tb, p.M = M, p.N = N, p.K = K, p.alpha = alpha, p.beta = beta, p.A = a.get(), p.lda = lda,
        p.B = b.get(), p.ldb = ldb, p.C = c.get(), p.ldc = ldc;
        // the padding of C must stay untouched
        std::vector<float> padv;
        for (int i = 0; i < M; ++i)
          for (int j = N; j < ldc; ++j) padv.push_back(c[size_t(i) * ldc + j]);
        CheckResult one = check_product(run, p, 1 << 30, 0, seed);
        size_t e = 0;
        for (int i = 0; i < M; ++i)
          for (int j = N; j < ldc; ++j)
            if (std::memcmp(&padv[e++], &c[size_t(i) * ldc + j], sizeof(float)) != 0) one.nan = true;
        if (!one.pass() && failures++ < 6)
          std::printf("#   failed: %dx%dx%d %c%c lda %d ldb %d ldc %d alpha %g beta %g: max units %.3g%s\n", M, N, K,
                      ta ? 'T' : 'N', tb ? 'T' : 'N', lda, ldb, ldc, alpha, beta, one.max_units,
                      one.nan ? ", NaN or padding overwritten" : "");
        res.merge(one);
        ++cases;
      }
}

// A big-product variant: the unit cases, then the benchmarked shapes (sampled elements).
void check_variant(const Variant& v, int threads, const Workload& w, CheckReport& report) {
  v.pin(threads);
  CheckResult r;
  int cases = 0;
  unit_cases([&](const Prob& p) { v.run(p, threads); }, r, cases);
  std::string note = "  (odd sizes, padded ld, 4 transposes x 3 alpha/beta)";
  const bool known = v.name == "libxsmm" && !r.pass();
  if (known)
    note +=
        " -- libxsmm_sgemm_omp (1.17) sends edge tiles of some sizes to the BLAS fall-back, which is "
        "libxsmmnoblas here: it needs a BLAS linked behind it";
  report(v.name, "unit", r, cases, note, known);
  CheckResult rs;
  int scases = 0;
  for (size_t i = 0; i < w.shapes.size(); ++i) {
    rs.merge(check_product([&](const Prob& p) { v.run(p, threads); }, w.prob(i), 4096, 600, 1000 + i));
    ++scases;
  }
  if (scases) report(v.name, "shapes", rs, scases, "  (benchmark shapes, sampled)");
}

// An attention variant, per-call or batched, on every head of the real buffers; 24 (b, h) checked in full.
void check_attn_variant(const AttnVariant& av, int threads, Workload& w, CheckReport& report) {
  float* const* abufs = w.abufs;
  CheckResult r;
  int cases = 0;
#ifdef LIERE_BENCH_HAVE_XSMM
  const long fb0 = g_xsmm_fallback.load(), tr0 = g_xsmm_transposed.load();
#endif
  omp_set_num_threads(threads);
  for (const auto& s : w.ashapes) {
    std::vector<std::pair<int, int>> picks;
    for (int e = 0; e < 24; ++e) picks.emplace_back((e * 37) % kB, e % kH);
    picks.back() = {kB - 1, kH - 1};
    // Save C₀ of the checked heads (β = 1) or poison C (β = 0: everything must be overwritten).
    std::vector<std::vector<float>> c0(picks.size());
    for (int bh = 0; bh < kB * kH; ++bh) {
      Prob p = attn_prob(s, abufs, bh / kH, bh % kH);
      if (s.beta == 0.f)
        for (int i = 0; i < p.M; ++i)
          std::fill(p.C + long(i) * p.ldc, p.C + long(i) * p.ldc + p.N, std::numeric_limits<float>::quiet_NaN());
    }
    for (size_t e = 0; e < picks.size(); ++e) {
      Prob p = attn_prob(s, abufs, picks[e].first, picks[e].second);
      for (int i = 0; i < p.M; ++i)
        for (int j = 0; j < p.N; ++j) c0[e].push_back(p.C[long(i) * p.ldc + j]);
    }
    run_attn(av, s, abufs, threads);
    for (size_t e = 0; e < picks.size(); ++e) {
      Prob p = attn_prob(s, abufs, picks[e].first, picks[e].second);
      std::vector<std::pair<int, int>> ij;
      for (int i = 0; i < p.M; ++i)
        for (int j = 0; j < p.N; ++j) ij.emplace_back(i, j);
      r.merge(check_elements(p, ij, c0[e]));
    }
    // No NaN left anywhere (every head written).
    for (int bh = 0; bh < kB * kH && s.beta == 0.f; ++bh) {
      Prob p = attn_prob(s, abufs, bh / kH, bh % kH);
      for (int i = 0; i < p.M; ++i)
        for (int j = 0; j < p.N; ++j)
          if (!std::isfinite(p.C[long(i) * p.ldc + j])) r.nan = true;
    }
    // Restore finite values for the timing.
    for (int i = 0; i < 5; ++i)
      if (i == s.c_buf) fill_uniform(abufs[i], w.abuf_n[i], 200 + i);
    ++cases;
  }
  std::string note = "  (attention, all 7 shapes, 24 heads in full, no head left unwritten)";
#ifdef LIERE_BENCH_HAVE_XSMM
  if (av.lib == "libxsmm")
    note += ", " + std::to_string(g_xsmm_transposed.load() - tr0) + " calls with B transposed first, " +
            std::to_string(g_xsmm_fallback.load() - fb0) + " Eigen fall-backs";
#endif
  report(std::string("attn:") + av.name, "attn", r, cases, note);
}

// Every variant against the double reference; false when a check failed (not a known one).
bool check_all(int threads, const std::vector<Variant>& variants, const std::vector<AttnVariant>& attn_variants,
               Workload& w, const Libs& L, const JsonOut& json) {
  std::printf("\n# correctness vs double reference: max error in units of u*(|a|S|a||b|+|b||c0|), bound K+2\n");
  std::printf("%-20s %8s %10s %12s %12s  %s\n", "variant", "cases", "elements", "max units", "max rel", "result");
  CheckReport report{threads, json};
  for (const auto& v : variants) check_variant(v, threads, w, report);
  if (w.attn)
    for (const auto& av : attn_variants) check_attn_variant(av, threads, w, report);
#ifdef LIERE_BENCH_HAVE_XSMM
  if (L.xsmm)
    std::printf(
        "# libxsmm per-call wrapper so far: %ld JIT-kernel calls (%ld with B transposed first), %ld "
        "Eigen fall-backs (alpha != 1 or beta not in {0, 1})\n",
        g_xsmm_jit.load(), g_xsmm_transposed.load(), g_xsmm_fallback.load());
#endif
  (void)L;
  // beta = 1 shapes accumulated during the checks: refill.
  for (size_t i = 0; i < w.shapes.size(); ++i) w.fill_c(i);
  return report.all_pass;
}

// Every variant on every shape once (JIT, page faults): what the checks do otherwise.
void warm_up(int threads, const std::vector<Variant>& variants, const std::vector<AttnVariant>& attn_variants,
             Workload& w) {
  for (const auto& v : variants) {
    v.pin(threads);
    for (size_t i = 0; i < w.shapes.size(); ++i) v.run(w.prob(i), threads);
  }
  omp_set_num_threads(threads);
  for (const auto& av : attn_variants)
    for (const auto& s : w.ashapes) run_attn(av, s, w.abufs, threads);
}

// ============================================================================================================
// Interleaved rounds at one thread count
// ============================================================================================================
using Results = std::map<std::pair<std::string, std::string>, Series>;  // (group/shape, variant) → series

struct Sample {
  double sec = 0, cpu = 0;  // per call: wall seconds, process CPU seconds
  long n = 0;
};
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
// Calls f until min_s seconds have passed (at least once).
Sample sample(const std::function<void()>& f, double min_s) {
  Sample smp;
  const double c0 = process_cpu_s();
  const auto t0 = Clock::now();
  double t = 0;
  do {
    f();
    ++smp.n;
    t = seconds_since(t0);
  } while (t < min_s);
  smp.cpu = (process_cpu_s() - c0) / double(smp.n);
  smp.sec = t / double(smp.n);
  return smp;
}

// Round r runs, for each shape, every variant once (order rotated by r), so load from other processes hits all of
// them alike; each round's ratio to eigen is measured side by side.
Results time_rounds(int threads, const Options& opt, const std::vector<Variant>& variants,
                    const std::vector<AttnVariant>& attn_variants, Workload& w) {
  const double min_s = opt.min_ms * 1e-3;
  Results res;
  auto record = [&](const std::string& key, const std::string& name, double flops, const Sample& smp,
                    std::map<std::string, double>& g) {
    g[name] = flops / smp.sec * 1e-9;
    auto& ser = res[{key, name}];
    ser.gflops.push_back(g[name]);
    ser.gflops_cpu.push_back(flops / smp.cpu * 1e-9 * threads);
    ser.share.push_back(smp.cpu / (smp.sec * threads));
    ser.calls = smp.n;
  };
  auto ratios = [&](const std::string& key, std::map<std::string, double>& g) {
    for (const auto& [name, gf] : g)
      if (g.count("eigen")) res[{key, name}].ratio.push_back(gf / g["eigen"]);
  };
  const auto t_start = Clock::now();
  for (int r = 0; r < opt.rounds; ++r) {
    for (size_t i = 0; i < w.shapes.size(); ++i) {
      const Shape& s = w.shapes[i];
      const Prob p = w.prob(i);
      const std::string key = s.group + "/" + s.name;
      std::map<std::string, double> g;
      for (size_t k = 0; k < variants.size(); ++k) {
        const Variant& v = variants[(k + r) % variants.size()];
        v.pin(threads);
        record(key, v.name, s.flops(), sample([&] { v.run(p, threads); }, min_s), g);
        if (v.settle && threads > 1 && opt.settle_ms > 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(opt.settle_ms));
      }
      ratios(key, g);
    }
    omp_set_num_threads(threads);
    for (const auto& s : w.ashapes) {
      const std::string key = "attn/" + s.name;
      std::map<std::string, double> g;
      for (size_t k = 0; k < attn_variants.size(); ++k) {
        const AttnVariant& av = attn_variants[(k + r) % attn_variants.size()];
        record(key, av.name, s.flops(), sample([&] { run_attn(av, s, w.abufs, threads); }, min_s), g);
      }
      ratios(key, g);
    }
    double la = 0;
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &la) != 1) la = 0;
      std::fclose(f);
    }
    std::fprintf(stderr, "# %d thread(s): round %d/%d done, %.0f s, load average %.2f\n", threads, r + 1, opt.rounds,
                 seconds_since(t_start), la);
  }
  return res;
}

#ifdef LIERE_BENCH_HAVE_DNNL
// The oneDNN implementation chosen per shape.
void record_dnnl_impls(Results& res, int threads, const Workload& w) {
  const auto& shapes = w.shapes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& e = dnnl_matmul_entry(matmul_spec_2d(w.prob(i), threads));
    if (res.count({shapes[i].group + "/" + shapes[i].name, "dnnl-matmul"}))
      res[{shapes[i].group + "/" + shapes[i].name, "dnnl-matmul"}].impl = e.impl;
  }
  for (const auto& s : w.ashapes) {
    MatmulSpec m;
    m.b0 = kB, m.b1 = kH, m.M = s.M, m.N = s.N, m.K = s.K, m.beta = s.beta, m.threads = threads;
    m.sa = {s.a_sb, s.a_sh, s.ta ? 1 : s.lda, s.ta ? s.lda : 1};
    m.sb = {s.b_sb, s.b_sh, s.tb ? 1 : s.ldb, s.tb ? s.ldb : 1};
    m.sc = {s.c_sb, s.c_sh, s.ldc, 1};
    if (res.count({"attn/" + s.name, "dnnl-matmul-batch"}))
      res[{"attn/" + s.name, "dnnl-matmul-batch"}].impl = dnnl_matmul_entry(m).impl;
    Prob p = attn_prob(s, w.abufs, 0, 0);
    if (res.count({"attn/" + s.name, "dnnl-matmul"}))
      res[{"attn/" + s.name, "dnnl-matmul"}].impl = dnnl_matmul_entry(matmul_spec_2d(p, 1)).impl;
  }
}
#endif

// ============================================================================================================
// Report of one thread count
// ============================================================================================================
// "MxNxK NT"
std::string dims_text(int M, int N, int K, bool ta, bool tb) {
  return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + (ta ? " T" : " N") + (tb ? "T" : "N");
}

// One group's table: a row per shape (rows, their MxNxK in dims), a column per variant (cols).
void print_table(const Results& res, const std::string& group, int threads, int rounds,
                 const std::vector<std::string>& rows, const std::vector<std::string>& dims,
                 const std::vector<std::string>& cols) {
  std::printf("\n# %s, %d thread(s): median GFLOP/s over %d rounds (median per-round ratio to eigen)\n", group.c_str(),
              threads, rounds);
  std::printf("%-12s %-16s", "shape", "MxNxK");
  for (const auto& c : cols) std::printf(" %17s", c.c_str());
  std::printf("\n");
  for (size_t r = 0; r < rows.size(); ++r) {
    std::printf("%-12s %-16s", rows[r].c_str(), dims[r].c_str());
    for (const auto& c : cols) {
      auto it = res.find({group + "/" + rows[r], c});
      if (it == res.end()) {
        std::printf(" %17s", "-");
        continue;
      }
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.1f (%.2f)", median(it->second.gflops), median(it->second.ratio));
      std::printf(" %17s", cell);
    }
    std::printf("\n");
  }
}

void print_tables(const Results& res, int threads, int rounds, const std::vector<Variant>& variants,
                  const std::vector<AttnVariant>& attn_variants, const Workload& w) {
  std::vector<std::string> vnames;
  for (const auto& v : variants) vnames.push_back(v.name);
  std::vector<std::string> anames;
  for (const auto& v : attn_variants) anames.push_back(v.name);
  for (const std::string group : {"vit-tiny", "vit-b"}) {
    std::vector<std::string> rows, dims;
    for (const auto& s : w.shapes)
      if (s.group == group) rows.push_back(s.name), dims.push_back(dims_text(s.M, s.N, s.K, s.ta, s.tb));
    if (!rows.empty()) print_table(res, group, threads, rounds, rows, dims, vnames);
  }
  if (!w.ashapes.empty()) {
    std::vector<std::string> rows, dims;
    for (const auto& s : w.ashapes) rows.push_back(s.name), dims.push_back(dims_text(s.M, s.N, s.K, s.ta, s.tb));
    print_table(res, "attn", threads, rounds, rows, dims, anames);
  }
}

// Whole-workload totals: time of all shapes of a group (flop-weighted), per variant.
void print_totals(const Results& res, int threads, const Workload& w, const JsonOut& json) {
  std::printf(
      "\n# totals, %d thread(s): all shapes of a group (not the probe), summed time -> GFLOP/s (ratio to eigen)\n",
      threads);
  for (const std::string group : {"vit-tiny", "attn", "vit-b"}) {
    std::map<std::string, std::pair<double, double>> tot;  // variant → (flops, seconds)
    std::map<std::string, double> tot_cpu;                 // variant → CPU seconds / threads
    for (const auto& [key, ser] : res) {
      if (key.first.rfind(group + "/", 0) != 0) continue;
      if (key.first == "attn/S=Q(K^T)") continue;  // the probe shape: not a product liere runs
      double flops = 0;
      for (const auto& s : w.shapes)
        if (s.group + "/" + s.name == key.first) flops = s.flops();
      for (const auto& s : w.ashapes)
        if ("attn/" + s.name == key.first) flops = s.flops();
      tot[key.second].first += flops;
      tot[key.second].second += flops / (median(ser.gflops) * 1e9);
      tot_cpu[key.second] += flops / (median(ser.gflops_cpu) * 1e9);
    }
    if (tot.empty()) continue;
    std::printf("%-10s", group.c_str());
    const double e = tot.count("eigen") ? tot["eigen"].first / tot["eigen"].second : 0;
    for (const auto& [name, ft] : tot)
      std::printf("  %s %.1f (%.2f)", name.c_str(), ft.first / ft.second * 1e-9, e > 0 ? ft.first / ft.second / e : 0);
    std::printf("\n");
    for (const auto& [name, ft] : tot)
      json.write(Json()
                     .add("kind", "total")
                     .add("group", group)
                     .add("variant", name)
                     .add("threads", threads)
                     .add("gflops", ft.first / ft.second * 1e-9)
                     .add("ratio_eigen", e > 0 ? ft.first / ft.second / e : 0)
                     .add("gflops_cpu", ft.first / tot_cpu[name] * 1e-9));
  }
}

// One JSON line per (shape, variant).
void write_results(const Results& res, int threads, const Workload& w, const Machine& mach, const JsonOut& json) {
  for (const auto& [key, ser] : res) {
    const std::string group = key.first.substr(0, key.first.find('/'));
    const std::string shape = key.first.substr(key.first.find('/') + 1);
    int M = 0, N = 0, K = 0;
    std::string tr;
    for (const auto& s : w.shapes)
      if (s.group + "/" + s.name == key.first)
        M = s.M, N = s.N, K = s.K, tr = std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N");
    for (const auto& s : w.ashapes)
      if ("attn/" + s.name == key.first)
        M = s.M, N = s.N, K = s.K, tr = std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N");
    std::string lib = key.second.substr(0, key.second.find_first_of("-/"));
    json.write(Json()
                   .add("kind", "result")
                   .add("group", group)
                   .add("shape", shape)
                   .add("M", M)
                   .add("N", N)
                   .add("K", K)
                   .add("trans", tr)
                   .add("variant", key.second)
                   .add("lib", lib)
                   .add("threads", threads)
                   .add("rounds", double(ser.gflops.size()))
                   .add("calls_per_sample", double(ser.calls))
                   .add("gflops_median", median(ser.gflops))
                   .add("gflops_min", *std::min_element(ser.gflops.begin(), ser.gflops.end()))
                   .add("gflops_max", *std::max_element(ser.gflops.begin(), ser.gflops.end()))
                   .add("ratio_eigen_median", median(ser.ratio))
                   .add("gflops_cpu_median", median(ser.gflops_cpu))
                   .add("cpu_share_median", median(ser.share))
                   .add("impl", ser.impl)
                   .add("peak_gflops", mach.peak_gflops * threads / std::max(1, mach.cores)));
  }
#ifdef LIERE_BENCH_HAVE_DNNL
  std::printf("\n# oneDNN matmul implementations:");
  std::map<std::string, int> impls;
  for (const auto& [key, ser] : res)
    if (!ser.impl.empty()) impls[key.second + " " + ser.impl]++;
  for (const auto& [k, n] : impls) std::printf(" [%s x%d]", k.c_str(), n);
  std::printf("\n");
#endif
}

// ============================================================================================================
// One thread count: checks, interleaved rounds, report
// ============================================================================================================
template <class V>
void drop_skipped(std::vector<V>& v, const std::vector<std::string>& skip, const std::string& prefix) {
  v.erase(
      std::remove_if(v.begin(), v.end(),
                     [&](const V& x) { return std::find(skip.begin(), skip.end(), prefix + x.name) != skip.end(); }),
      v.end());
}

// False when a correctness check failed.
bool run_threads(int threads, const Options& opt, Libs& L, Workload& w, const std::vector<AttnVariant>& attn_variants,
                 const Machine& mach, const JsonOut& json) {
  omp_set_num_threads(threads);
  auto variants = make_variants(L, threads, opt.libs);
  drop_skipped(variants, opt.skip, "");
  std::printf("\n================ %d thread%s ================\n", threads, threads > 1 ? "s" : "");
#ifdef LIERE_BENCH_HAVE_XSMM
  g_xsmm_count = true;
#endif
  const bool pass = opt.check ? check_all(threads, variants, attn_variants, w, L, json) : true;
#ifdef LIERE_BENCH_HAVE_XSMM
  g_xsmm_count = false;
#endif
  if (!opt.check) warm_up(threads, variants, attn_variants, w);  // (the checks did it already)
  omp_set_num_threads(threads);
  Results res = time_rounds(threads, opt, variants, attn_variants, w);
#ifdef LIERE_BENCH_HAVE_DNNL
  record_dnnl_impls(res, threads, w);
#endif
  print_tables(res, threads, opt.rounds, variants, attn_variants, w);
  print_totals(res, threads, w, json);
  write_results(res, threads, w, mach, json);
  return pass;
}

}  // namespace

// ============================================================================================================
int main(int argc, char** argv) {
  return app::run_main("bench_gemm", [&] {
    Options opt;
    if (!parse_flags(argc, argv, opt)) return 0;
    const std::string run_id = run_id_now();
    const JsonOut json{opt.json, run_id};
    const Machine mach = measure_machine();
    report_machine(mach, run_id, json);
    Libs L;
    load_libs(L, opt, mach);
    report_libs(L, json);
    report_latency(L, opt.threads.front(), json);  // before anything else touches the libraries
    Workload w(opt);
    auto attn_variants = make_attn_variants(L, opt.libs);
    drop_skipped(attn_variants, opt.skip, "attn:");
    bool all_pass = true;
    for (const int threads : opt.threads)
      if (!run_threads(threads, opt, L, w, attn_variants, mach, json)) all_pass = false;
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      double load = 0;
      if (std::fscanf(f, "%lf", &load) == 1) std::printf("\n# load average at the end %.2f\n", load);
      std::fclose(f);
    }
    if (!all_pass) std::printf("# SOME CORRECTNESS CHECKS FAILED\n");
    return all_pass ? 0 : 1;
  });
}
