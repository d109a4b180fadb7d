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
//              forward + backward, with both gemm backends, GFLOP/s counting the GEMM flops only — compared with sgemm, this is the
//              fraction of the machine's GEMM throughput the engine keeps over a block.
// Output: one CSV line per measurement (name,ms,gflops,gbytes_per_s) and a summary.
//   bench_engine_ops [--reps N] [--threads N]
#include <dlfcn.h>

#include <liere/core/eigen.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <liere/autodiff/ops.hpp>
#include <liere/backend/cpu/kernels.hpp>
#include <liere/nn/layernorm.hpp>
#include <liere/nn/mlp.hpp>
#include <omp.h>
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
  std::printf("%s,%.3f,%.2f,%.2f\n", name, ms, flops > 0 ? flops / ms * 1e-6 : 0.0, bytes > 0 ? bytes / ms * 1e-6 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, threads = omp_get_max_threads();
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[++i]);
  }
  omp_set_num_threads(threads);
  const Index N = 8320, C = 192, H = 768;
  const double gemm_flops = 2.0 * N * C * H;  // one GEMM of either Linear
  std::printf("# threads %d, Eigen %d.%d.%d, rows %ld, C %ld, hidden %ld\n", threads, EIGEN_WORLD_VERSION,
              EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, long(N), long(C), long(H));
  std::printf("name,ms,gflops,gbytes_per_s\n");

  Rng rng(1);
  auto rand = [&](Shape s) {
    Tensor t(s);
    fill_uniform(t, rng, -1, 1);
    return t;
  };
  Tensor x = rand({N, C}), w1 = rand({H, C}), b1 = rand({H}), w2 = rand({C, H}), b2 = rand({C});
  Tensor h = rand({N, H}), dh = rand({N, H}), dy = rand({N, C}), y(Shape{N, C});
  Tensor dx = Tensor::zeros({N, C}), dw1 = Tensor::zeros({H, C}), db1 = Tensor::zeros({H}), dw2 = Tensor::zeros({C, H}),
         db2 = Tensor::zeros({C}), dhx = Tensor::zeros({N, H});

  // ---- plain Eigen sgemm, same six products ----
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Mat ex = Mat::Random(N, C), ew1 = Mat::Random(H, C), eh(N, H), edh = Mat::Random(N, H), edx(N, C), edw1(H, C);
  Mat ew2 = Mat::Random(C, H), ey(N, C), edy = Mat::Random(N, C), edhx(N, H), edw2(C, H);
  const double t_sgemm = median_ms(
      [&] {
        eh.noalias() = ex * ew1.transpose();    // fc1 forward
        edx.noalias() = edh * ew1;              // fc1 dx
        edw1.noalias() = edh.transpose() * ex;  // fc1 dW
        ey.noalias() = eh * ew2.transpose();    // fc2 forward
        edhx.noalias() = edy * ew2;             // fc2 dx
        edw2.noalias() = edy.transpose() * eh;  // fc2 dW
      },
      reps);
  report("sgemm_eigen_6_products", t_sgemm, 6 * gemm_flops, 0);
  Eigen::setNbThreads(1);
  const double t_sgemm1 = median_ms(
      [&] {
        eh.noalias() = ex * ew1.transpose();
        edx.noalias() = edh * ew1;
        edw1.noalias() = edh.transpose() * ex;
        ey.noalias() = eh * ew2.transpose();
        edhx.noalias() = edy * ew2;
        edw2.noalias() = edy.transpose() * eh;
      },
      reps);
  Eigen::setNbThreads(0);
  report("sgemm_eigen_1thread_6_products", t_sgemm1, 6 * gemm_flops, 0);

  // OpenBLAS, if present: cblas_sgemm(order, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc).
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  double t_blas = 0;
  if (void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL)) {
    if (auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"))) {
      if (auto set = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"))) set(threads);
      enum { RowMajor = 101, NoTrans = 111, Trans = 112 };
      const int n = int(N), c = int(C), hh = int(H);
      t_blas = median_ms(
          [&] {
            sgemm(RowMajor, NoTrans, Trans, n, hh, c, 1.f, ex.data(), c, ew1.data(), c, 0.f, eh.data(), hh);
            sgemm(RowMajor, NoTrans, NoTrans, n, c, hh, 1.f, edh.data(), hh, ew1.data(), c, 0.f, edx.data(), c);
            sgemm(RowMajor, Trans, NoTrans, hh, c, n, 1.f, edh.data(), hh, ex.data(), c, 0.f, edw1.data(), c);
            sgemm(RowMajor, NoTrans, Trans, n, c, hh, 1.f, eh.data(), hh, ew2.data(), hh, 0.f, ey.data(), c);
            sgemm(RowMajor, NoTrans, NoTrans, n, hh, c, 1.f, edy.data(), c, ew2.data(), hh, 0.f, edhx.data(), hh);
            sgemm(RowMajor, Trans, NoTrans, c, hh, n, 1.f, edy.data(), c, eh.data(), hh, 0.f, edw2.data(), hh);
          },
          reps);
      report("sgemm_openblas_6_products", t_blas, 6 * gemm_flops, 0);
    }
  } else {
    std::printf("# libopenblas.so.0 not found: no OpenBLAS reference\n");
  }

  auto six_gemms = [&] {
        cpu::gemm<float>(false, true, N, H, C, 1.f, ex.data(), ew1.data(), 0.f, eh.data());
        cpu::gemm<float>(false, false, N, C, H, 1.f, edh.data(), ew1.data(), 0.f, edx.data());
        cpu::gemm<float>(true, false, H, C, N, 1.f, edh.data(), ex.data(), 0.f, edw1.data());
        cpu::gemm<float>(false, true, N, C, H, 1.f, eh.data(), ew2.data(), 0.f, ey.data());
        cpu::gemm<float>(false, false, N, H, C, 1.f, edy.data(), ew2.data(), 0.f, edhx.data());
        cpu::gemm<float>(true, false, C, H, N, 1.f, edy.data(), eh.data(), 0.f, edw2.data());
  };
  cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  const double t_gemm = median_ms(six_gemms, reps);
  report("gemm_liere_eigen_6_products", t_gemm, 6 * gemm_flops, 0);
  double t_gemm_blas = 0;
  if (cpu::set_gemm_backend(cpu::GemmBackend::OpenBLAS)) {
    t_gemm_blas = median_ms(six_gemms, reps);
    report("gemm_liere_openblas_6_products", t_gemm_blas, 6 * gemm_flops, 0);
  }
  double t_gemm_dnnl = 0;
  if (cpu::set_gemm_backend(cpu::GemmBackend::Dnnl)) {
    t_gemm_dnnl = median_ms(six_gemms, reps);
    report("gemm_liere_dnnl_6_products", t_gemm_dnnl, 6 * gemm_flops, 0);
  }
  cpu::set_gemm_backend(cpu::GemmBackend::Eigen);

  // ---- kernels ----
  const double t_fc1 = median_ms(
      [&] {
        cpu::linear_forward(x.data(), w1.data(), b1.data(), h.data(), N, C, H);
        cpu::linear_backward(x.data(), w1.data(), dh.data(), dx.data(), dw1.data(), db1.data(), N, C, H);
      },
      reps);
  report("linear_fc1_fwd_bwd", t_fc1, 3 * gemm_flops, 0);
  const double t_fc2 = median_ms(
      [&] {
        cpu::linear_forward(h.data(), w2.data(), b2.data(), y.data(), N, H, C);
        cpu::linear_backward(h.data(), w2.data(), dy.data(), dhx.data(), dw2.data(), db2.data(), N, H, C);
      },
      reps);
  report("linear_fc2_fwd_bwd", t_fc2, 3 * gemm_flops, 0);

  Tensor mean(Shape{N}), rstd(Shape{N}), g = Tensor::full({C}, 1.0f), bb = Tensor::zeros({C});
  Tensor dg = Tensor::zeros({C}), dbb = Tensor::zeros({C});
  const double t_ln_f = median_ms(
      [&] { cpu::layernorm_forward(x.data(), g.data(), bb.data(), y.data(), mean.data(), rstd.data(), N, C); }, reps);
  report("layernorm_fwd", t_ln_f, 0, 2.0 * N * C * 4);
  std::vector<float> ln_scratch(std::size_t(cpu::layernorm_backward_scratch(N, C)));
  const double t_ln_b = median_ms(
      [&] {
        cpu::layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(), dbb.data(),
                                ln_scratch.data(), N, C);
      },
      reps);
  report("layernorm_bwd", t_ln_b, 0, 4.0 * N * C * 4);

  Tensor hg(Shape{N, H});
  const double t_gelu_f = median_ms([&] { cpu::gelu_forward(h.data(), hg.data(), N * H); }, reps);
  report("gelu_fwd", t_gelu_f, 0, 2.0 * N * H * 4);
  const double t_gelu_b = median_ms([&] { cpu::gelu_backward(h.data(), dh.data(), dhx.data(), N * H); }, reps);
  report("gelu_bwd", t_gelu_b, 0, 4.0 * N * H * 4);

  // ---- an MLP block through the tape ----
  nn::Params params;
  nn::LayerNorm norm(params, "norm2", C);
  nn::Mlp mlp(params, "mlp", C, H, C, rng);
  Tape tape;
  Tensor input = rand({128, 65, C});
  const Var xin(input, true);  // as inside a network: the block's input needs a gradient
  Tensor seed = rand({128, 65, C});
  auto block = [&] {
    Var out = ops::add(tape, xin, mlp(tape, norm(tape, xin)));
    tape.backward(out, seed);
  };
  const double t_block = median_ms(block, reps);
  report("mlp_block_tape_eigen_fwd_bwd", t_block, 6 * gemm_flops, 0);
  double t_block_blas = 0;
  if (cpu::set_gemm_backend(cpu::GemmBackend::OpenBLAS)) {
    t_block_blas = median_ms(block, reps);
    report("mlp_block_tape_openblas_fwd_bwd", t_block_blas, 6 * gemm_flops, 0);
    cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  }
  double t_block_dnnl = 0;
  if (cpu::set_gemm_backend(cpu::GemmBackend::Dnnl)) {
    t_block_dnnl = median_ms(block, reps);
    report("mlp_block_tape_dnnl_fwd_bwd", t_block_dnnl, 6 * gemm_flops, 0);
    cpu::set_gemm_backend(cpu::GemmBackend::Eigen);
  }

  auto rate = [&](double ms) { return ms > 0 ? 6 * gemm_flops / ms * 1e-6 : 0.0; };
  const double machine = std::max({rate(t_sgemm), rate(t_sgemm1), rate(t_blas)});
  const double block_rate = rate(t_block);
  const PoolStats ps = buffer_pool().stats();
  std::printf("# sgemm GFLOP/s: Eigen %.1f (1 thread %.1f), OpenBLAS %.1f; machine = best library = %.1f\n",
              rate(t_sgemm), rate(t_sgemm1), rate(t_blas), machine);
  std::printf("# liere::cpu::gemm GFLOP/s: Eigen backend %.1f, OpenBLAS backend %.1f, oneDNN backend %.1f\n", rate(t_gemm),
              rate(t_gemm_blas), rate(t_gemm_dnnl));
  std::printf("# MLP block via tape, oneDNN backend: %.1f GFLOP/s = %.0f%% of liere::cpu::gemm on oneDNN; beyond its six GEMMs %.1f ms\n",
              rate(t_block_dnnl), t_gemm_dnnl > 0 ? 100 * rate(t_block_dnnl) / rate(t_gemm_dnnl) : 0.0,
              t_block_dnnl - t_gemm_dnnl);
  std::printf("# linear fc1 %.1f, fc2 %.1f GFLOP/s (Eigen backend)\n", 3 * gemm_flops / t_fc1 * 1e-6,
              3 * gemm_flops / t_fc2 * 1e-6);
  std::printf("# MLP block via tape: Eigen backend %.1f GFLOP/s = %.0f%%, OpenBLAS backend %.1f GFLOP/s = %.0f%% of the machine's sgemm\n",
              block_rate, 100 * block_rate / machine, rate(t_block_blas), 100 * rate(t_block_blas) / machine);
  std::printf("# block time beyond its six GEMMs (liere::cpu::gemm): %.1f ms (layernorm %.1f + gelu %.1f ms of kernels)\n",
              t_block - t_gemm, t_ln_f + t_ln_b, t_gelu_f + t_gelu_b);
  std::printf("# pool: peak %.1f MB in use, %.1f MB cached, %zu fresh allocations, %zu reuses\n", ps.peak_in_use / 1e6,
              ps.bytes_cached / 1e6, ps.allocations, ps.reuses);
  return 0;
}
