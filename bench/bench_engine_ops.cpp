// bench_engine_ops — one realistic ViT-Tiny layer of the engine, forward + backward, against plain Eigen sgemm.
//
// Shapes: B·T = 8320 rows (batch 128 × 65 tokens: CIFAR 32×32 with 4×4 patches + CLS), C = 192, hidden 768.
// Measured (median of --reps runs after a warm-up):
//   sgemm      the same six GEMMs as the two Linear layers (forward, dx, dW for fc1 and fc2) with plain
//              Eigen on matrices it owns (Eigen's own OpenMP threading, and one thread), and with OpenBLAS's
//              cblas_sgemm when libopenblas.so.0 can be loaded (dlopen: no build dependency) — the library
//              PyTorch's CPU build uses; the best of these is "the machine's sgemm throughput";
//   gemm       the same six products through liere::cpu::gemm (one slab of C per thread), with its Eigen
//              and (if loadable) OpenBLAS and oneDNN backends;
//   linear     fc1 (192 → 768) and fc2 (768 → 192) through the kernels (bias included), forward + backward;
//   layernorm  (8320, 192) forward + backward;
//   gelu       (8320, 768) forward + backward;
//   mlp block  LN → fc1 → GELU → fc2 → residual through the tape (pool, closures, lazy gradients included),
//              forward + backward, with both gemm backends, GFLOP/s counting the GEMM flops only — compared with sgemm,
//              this is the fraction of the machine's GEMM throughput the engine keeps over a block.
// Output: one CSV line per measurement (name,ms,gflops,gbytes_per_s) and a summary.
//   bench_engine_ops [--reps N] [--threads N]
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <app/flags.hpp>
#include <chrono>
#include <climits>
#include <cstdio>
#include <functional>
#include <liere/autodiff/ops.hpp>
#include <liere/backend/cpu/kernels.hpp>
#include <liere/core/eigen.hpp>
#include <liere/nn/layernorm.hpp>
#include <liere/nn/mlp.hpp>
#include <string>
#include <vector>

using namespace liere;

namespace {

double median_ms(const std::function<void()>& f, int reps) {
  f();  // warm-up (first touch, pool fill)
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const char* name, double ms, double flops, double bytes) {
  std::printf("%s,%.3f,%.2f,%.2f\n", name, ms, flops > 0 ? flops / ms * 1e-6 : 0.0,
              bytes > 0 ? bytes / ms * 1e-6 : 0.0);
}

constexpr Index N = 8320, C = 192, H = 768;     // rows (B·T), model width, MLP hidden width
constexpr double kGemmFlops = 2.0 * N * C * H;  // one GEMM of either Linear

// The flags; false after --help.
bool parse_flags(int argc, char** argv, int& reps, int& threads) {
  app::Flags f("bench_engine_ops",
               "One ViT-Tiny MLP layer of the engine (8320 rows, C 192, hidden 768), forward + backward, against\n"
               "plain sgemm: one CSV line per measurement (name,ms,gflops,gbytes_per_s) and a summary.");
  f.section("Options");
  f.add("reps", &reps, "timed runs after a warm-up; the median is reported", app::Range{1, INT_MAX});
  f.add("threads", &threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", app::Range{0, INT_MAX});
  return f.parse(argc, argv);
}

// Every measurement's median ms (0: not measured, its library missing) and the pool's statistics after them.
struct Times {
  double sgemm = 0, sgemm1 = 0, blas = 0;         // plain Eigen (its threads, one thread), OpenBLAS
  double gemm = 0, gemm_blas = 0, gemm_dnnl = 0;  // liere::cpu::gemm on Eigen, OpenBLAS, oneDNN
  double fc1 = 0, fc2 = 0, ln_f = 0, ln_b = 0, gelu_f = 0, gelu_b = 0;  // the kernels
  double block = 0, block_blas = 0, block_dnnl = 0;  // the MLP block through the tape, per gemm backend
  PoolStats pool;
};

Tensor random_tensor(Rng& rng, const Shape& s) {
  Tensor t(s);
  fill_uniform(t, rng, -1, 1);
  return t;
}

// The kernels' operands, from the engine's pool, alive until the end (the pool statistics count them).
struct Tensors {
  explicit Tensors(Rng& rng)
      : x(random_tensor(rng, {N, C})),
        w1(random_tensor(rng, {H, C})),
        b1(random_tensor(rng, {H})),
        w2(random_tensor(rng, {C, H})),
        b2(random_tensor(rng, {C})),
        h(random_tensor(rng, {N, H})),
        dh(random_tensor(rng, {N, H})),
        dy(random_tensor(rng, {N, C})),
        y(Shape{N, C}),
        dx(Tensor::zeros({N, C})),
        dw1(Tensor::zeros({H, C})),
        db1(Tensor::zeros({H})),
        dw2(Tensor::zeros({C, H})),
        db2(Tensor::zeros({C})),
        dhx(Tensor::zeros({N, H})),
        mean(Shape{N}),
        rstd(Shape{N}),
        g(Tensor::full({C}, 1.0f)),
        bb(Tensor::zeros({C})),
        dg(Tensor::zeros({C})),
        dbb(Tensor::zeros({C})),
        hg(Shape{N, H}) {}
  Tensor x, w1, b1, w2, b2, h, dh, dy, y, dx, dw1, db1, dw2, db2, dhx;
  Tensor mean, rstd, g, bb, dg, dbb, hg;
};

// The six products of the two Linear layers on matrices Eigen owns.
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
struct EigenMats {
  Mat ex = Mat::Random(N, C), ew1 = Mat::Random(H, C), eh = Mat(N, H), edh = Mat::Random(N, H), edx = Mat(N, C),
      edw1 = Mat(H, C);
  Mat ew2 = Mat::Random(C, H), ey = Mat(N, C), edy = Mat::Random(N, C), edhx = Mat(N, H), edw2 = Mat(C, H);
};

void six_eigen_products(EigenMats& m) {
  m.eh.noalias() = m.ex * m.ew1.transpose();    // fc1 forward
  m.edx.noalias() = m.edh * m.ew1;              // fc1 dx
  m.edw1.noalias() = m.edh.transpose() * m.ex;  // fc1 dW
  m.ey.noalias() = m.eh * m.ew2.transpose();    // fc2 forward
  m.edhx.noalias() = m.edy * m.ew2;             // fc2 dx
  m.edw2.noalias() = m.edy.transpose() * m.eh;  // fc2 dW
}

// ---- plain sgemm, same six products: Eigen (its own threads, then one) and OpenBLAS when it loads ----
void time_sgemm(EigenMats& m, int reps, int threads, Times& t) {
  t.sgemm = median_ms([&] { six_eigen_products(m); }, reps);
  report("sgemm_eigen_6_products", t.sgemm, 6 * kGemmFlops, 0);
  Eigen::setNbThreads(1);
  t.sgemm1 = median_ms([&] { six_eigen_products(m); }, reps);
  Eigen::setNbThreads(0);
  report("sgemm_eigen_1thread_6_products", t.sgemm1, 6 * kGemmFlops, 0);

  // OpenBLAS, if present: cblas_sgemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc).
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::printf("# libopenblas.so.0 not found: no OpenBLAS reference\n");
    return;
  }
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
  if (!sgemm) return;
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) set(threads);
  enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
  const int n = int(N), c = int(C), hh = int(H);
  t.blas = median_ms(
      [&] {
        sgemm(RowMajor, NoTrans, Trans, n, hh, c, 1.f, m.ex.data(), c, m.ew1.data(), c, 0.f, m.eh.data(), hh);
        sgemm(RowMajor, NoTrans, NoTrans, n, c, hh, 1.f, m.edh.data(), hh, m.ew1.data(), c, 0.f, m.edx.data(), c);
        sgemm(RowMajor, Trans, NoTrans, hh, c, n, 1.f, m.edh.data(), hh, m.ex.data(), c, 0.f, m.edw1.data(), c);
        sgemm(RowMajor, NoTrans, Trans, n, c, hh, 1.f, m.eh.data(), hh, m.ew2.data(), hh, 0.f, m.ey.data(), c);
        sgemm(RowMajor, NoTrans, NoTrans, n, hh, c, 1.f, m.edy.data(), c, m.ew2.data(), hh, 0.f, m.edhx.data(), hh);
        sgemm(RowMajor, Trans, NoTrans, c, hh, n, 1.f, m.edy.data(), c, m.eh.data(), hh, 0.f, m.edw2.data(), hh);
      },
      reps);
  report("sgemm_openblas_6_products", t.blas, 6 * kGemmFlops, 0);
}

// ---- the same six products through liere::cpu::gemm, with each backend that loads ----
void time_liere_gemm(EigenMats& m, int reps, Times& t) {
  auto six_gemms = [&] {
    cpu::gemm<float>(false, true, N, H, C, 1.f, m.ex.data(), m.ew1.data(), 0.f, m.eh.data());
    cpu::gemm<float>(false, false, N, C, H, 1.f, m.edh.data(), m.ew1.data(), 0.f, m.edx.data());
    cpu::gemm<float>(true, false, H, C, N, 1.f, m.edh.data(), m.ex.data(), 0.f, m.edw1.data());
    cpu::gemm<float>(false, true, N, C, H, 1.f, m.eh.data(), m.ew2.data(), 0.f, m.ey.data());
    cpu::gemm<float>(false, false, N, H, C, 1.f, m.edy.data(), m.ew2.data(), 0.f, m.edhx.data());
    cpu::gemm<float>(true, false, C, H, N, 1.f, m.edy.data(), m.eh.data(), 0.f, m.edw2.data());
  };
  cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  t.gemm = median_ms(six_gemms, reps);
  report("gemm_liere_eigen_6_products", t.gemm, 6 * kGemmFlops, 0);
  if (cpu::set_gemm_backend(cpu::GemmBackend::OpenBLAS)) {
    t.gemm_blas = median_ms(six_gemms, reps);
    report("gemm_liere_openblas_6_products", t.gemm_blas, 6 * kGemmFlops, 0);
  }
  if (cpu::set_gemm_backend(cpu::GemmBackend::Dnnl)) {
    t.gemm_dnnl = median_ms(six_gemms, reps);
    report("gemm_liere_dnnl_6_products", t.gemm_dnnl, 6 * kGemmFlops, 0);
  }
  cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
}

// ---- kernels: both Linears, layernorm, GELU (Eigen gemm backend) ----
void time_kernels(Tensors& a, int reps, Times& t) {
  t.fc1 = median_ms(
      [&] {
        cpu::linear_forward(a.x.data(), a.w1.data(), a.b1.data(), a.h.data(), N, C, H);
        cpu::linear_backward(a.x.data(), a.w1.data(), a.dh.data(), a.dx.data(), a.dw1.data(), a.db1.data(), N, C, H);
      },
      reps);
  report("linear_fc1_fwd_bwd", t.fc1, 3 * kGemmFlops, 0);
  t.fc2 = median_ms(
      [&] {
        cpu::linear_forward(a.h.data(), a.w2.data(), a.b2.data(), a.y.data(), N, H, C);
        cpu::linear_backward(a.h.data(), a.w2.data(), a.dy.data(), a.dhx.data(), a.dw2.data(), a.db2.data(), N, H, C);
      },
      reps);
  report("linear_fc2_fwd_bwd", t.fc2, 3 * kGemmFlops, 0);

  t.ln_f = median_ms(
      [&] {
        cpu::layernorm_forward(a.x.data(), a.g.data(), a.bb.data(), a.y.data(), a.mean.data(), a.rstd.data(), N, C);
      },
      reps);
  report("layernorm_fwd", t.ln_f, 0, 2.0 * N * C * 4);
  std::vector<float> ln_scratch(std::size_t(cpu::layernorm_backward_scratch(N, C)));
  t.ln_b = median_ms(
      [&] {
        cpu::layernorm_backward(a.x.data(), a.g.data(), a.mean.data(), a.rstd.data(), a.dy.data(), a.dx.data(),
                                a.dg.data(), a.dbb.data(), ln_scratch.data(), N, C);
      },
      reps);
  report("layernorm_bwd", t.ln_b, 0, 4.0 * N * C * 4);

  t.gelu_f = median_ms([&] { cpu::gelu_forward(a.h.data(), a.hg.data(), N * H); }, reps);
  report("gelu_fwd", t.gelu_f, 0, 2.0 * N * H * 4);
  t.gelu_b = median_ms([&] { cpu::gelu_backward(a.h.data(), a.dh.data(), a.dhx.data(), N * H); }, reps);
  report("gelu_bwd", t.gelu_b, 0, 4.0 * N * H * 4);
}

// ---- an MLP block through the tape, with each gemm backend that loads; then the pool's statistics ----
void time_mlp_block(Rng& rng, int reps, Times& t) {
  nn::Params params;
  nn::LayerNorm norm(params, "norm2", C);
  nn::Mlp mlp(params, "mlp", C, H, C, rng);
  Tape tape;
  Tensor input = random_tensor(rng, {128, 65, C});
  const Var xin(input, true);  // as inside a network: the block's input needs a gradient
  Tensor seed = random_tensor(rng, {128, 65, C});
  auto block = [&] {
    Var out = ops::add(tape, xin, mlp(tape, norm(tape, xin)));
    tape.backward(out, seed);
  };
  t.block = median_ms(block, reps);
  report("mlp_block_tape_eigen_fwd_bwd", t.block, 6 * kGemmFlops, 0);
  if (cpu::set_gemm_backend(cpu::GemmBackend::OpenBLAS)) {
    t.block_blas = median_ms(block, reps);
    report("mlp_block_tape_openblas_fwd_bwd", t.block_blas, 6 * kGemmFlops, 0);
    cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  }
  if (cpu::set_gemm_backend(cpu::GemmBackend::Dnnl)) {
    t.block_dnnl = median_ms(block, reps);
    report("mlp_block_tape_dnnl_fwd_bwd", t.block_dnnl, 6 * kGemmFlops, 0);
    cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  }
  t.pool = buffer_pool().stats();  // (before this block's tensors go back to the pool)
}

void print_summary(const Times& t) {
  auto rate = [&](double ms) { return ms > 0 ? 6 * kGemmFlops / ms * 1e-6 : 0.0; };
  const double machine = std::max({rate(t.sgemm), rate(t.sgemm1), rate(t.blas)});
  const double block_rate = rate(t.block);
  std::printf("# sgemm GFLOP/s: Eigen %.1f (1 thread %.1f), OpenBLAS %.1f; machine = best library = %.1f\n",
              rate(t.sgemm), rate(t.sgemm1), rate(t.blas), machine);
  std::printf("# liere::cpu::gemm GFLOP/s: Eigen backend %.1f, OpenBLAS backend %.1f, oneDNN backend %.1f\n",
              rate(t.gemm), rate(t.gemm_blas), rate(t.gemm_dnnl));
  std::printf(
      "# MLP block via tape, oneDNN backend: %.1f GFLOP/s = %.0f%% of liere::cpu::gemm on oneDNN; beyond its six "
      "GEMMs %.1f ms\n",
      rate(t.block_dnnl), t.gemm_dnnl > 0 ? 100 * rate(t.block_dnnl) / rate(t.gemm_dnnl) : 0.0,
      t.block_dnnl - t.gemm_dnnl);
  std::printf("# linear fc1 %.1f, fc2 %.1f GFLOP/s (Eigen backend)\n", 3 * kGemmFlops / t.fc1 * 1e-6,
              3 * kGemmFlops / t.fc2 * 1e-6);
  std::printf(
      "# MLP block via tape: Eigen backend %.1f GFLOP/s = %.0f%%, OpenBLAS backend %.1f GFLOP/s = %.0f%% of the "
      "machine's sgemm\n",
      block_rate, 100 * block_rate / machine, rate(t.block_blas), 100 * rate(t.block_blas) / machine);
  std::printf(
      "# block time beyond its six GEMMs (liere::cpu::gemm): %.1f ms (layernorm %.1f + gelu %.1f ms of kernels)\n",
      t.block - t.gemm, t.ln_f + t.ln_b, t.gelu_f + t.gelu_b);
  std::printf("# pool: peak %.1f MB in use, %.1f MB cached, %zu fresh allocations, %zu reuses\n",
              t.pool.peak_in_use / 1e6, t.pool.bytes_cached / 1e6, t.pool.allocations, t.pool.reuses);
}

}  // namespace

int main(int argc, char** argv) {
  return app::run_main("bench_engine_ops", [&] {
    int reps = 7, threads = 0;
    if (!parse_flags(argc, argv, reps, threads)) return 0;
    if (threads == 0) threads = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::printf("# threads %d, Eigen %d.%d.%d, rows %ld, C %ld, hidden %ld\n", threads, EIGEN_WORLD_VERSION,
                EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, long(N), long(C), long(H));
    std::printf("name,ms,gflops,gbytes_per_s\n");
    Rng rng(1);
    Tensors tensors(rng);
    EigenMats mats;
    Times t;
    time_sgemm(mats, reps, threads, t);
    time_liere_gemm(mats, reps, t);
    time_kernels(tensors, reps, t);
    time_mlp_block(rng, reps, t);
    print_summary(t);
    return 0;
  });
}
