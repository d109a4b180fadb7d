// bench/bench_schur.cpp — the stages of the spectral path's decomposition (lie/skew_schur.hpp), per matrix, one
// thread, process CPU time: the real Schur form one matrix at a time (skew_schur) against kSchurLanes at once
// (skew_schur_batch), and the stages of each, interleaved in every round (the machine is shared: compare within a
// run). Matrices: A = p₁·W₁ + p₂·W₂ as in ViT-Tiny LieRE (the official parametrisation: upper triangle U(0, 1) −
// 0.5, skew; positions on the 8×8 grid linspace(0, 1, 8)², scaled by --scale), b = --n (64).
//   single          skew_schur (reduction, H, bidiagonal QR, Q = H·(V' ⊕ U'))
//   single QR       detail::bidiagonal_svd alone on the same bidiagonals
//   batch           skew_schur_batch (everything below, and the copies in and out of the lane layout)
//   batch reduce    detail::skew_reduce_lanes
//   batch QR        detail::bidiagonal_svd_lanes (the lanes' Golub–Kahan sweeps in lockstep)
//   batch apply     detail::apply_reflectors_lanes (Q from the reflectors and U', V')
//   exp             skew_schur_exp (after either)
// With --lapack, LAPACK's bidiagonal and tridiagonal solvers on the same bidiagonals, loaded with dlopen from
// liblapack.so.3 (Debian: OpenBLAS's LAPACK or the reference one): dbdsqr and dbdsdc (U and V), dlasq1 (values
// only), dstemr and dstevd on the Golub–Kahan tridiagonal (zero diagonal, the bidiagonal's entries off it; its
// eigenvectors interleave U and V).
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <functional>
#include <liere/lie/skew_schur.hpp>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Fortran LAPACK entry points (all arguments by reference).
using Bdsqr = void (*)(const char*, const int*, const int*, const int*, const int*, double*, double*, double*,
                       const int*, double*, const int*, double*, const int*, double*, int*);
using Bdsdc = void (*)(const char*, const char*, const int*, double*, double*, double*, const int*, double*,
                       const int*, double*, int*, double*, int*, int*);
using Stemr = void (*)(const char*, const char*, const int*, double*, double*, const double*, const double*,
                       const int*, const int*, int*, double*, double*, const int*, const int*, int*, int*, double*,
                       const int*, int*, const int*, int*);
using Stevd = void (*)(const char*, const int*, double*, double*, double*, const int*, double*, const int*, int*,
                       const int*, int*);
using Lasq1 = void (*)(const int*, double*, double*, double*, int*);

}  // namespace

int main(int argc, char** argv) {
  int n = 64, count = 256, rounds = 5;
  double scale = 1.0;
  bool lapack = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--n" && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (a == "--count" && i + 1 < argc) count = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--scale" && i + 1 < argc) scale = std::atof(argv[++i]);
    else if (a == "--lapack") lapack = true;
    else {
      std::printf(
          "usage: %s [--n 64] [--count 256] [--rounds 5] [--scale 1] [--lapack]\n"
          "Times the stages of the real Schur form of skew matrices (lie/skew_schur.hpp), per matrix, one thread,\n"
          "process CPU time, best round; every stage once per round, interleaved.\n",
          argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (n < 4 || n % 2 || n > liere::kSchurMaxN || count < 1) {
    std::fprintf(stderr, "bench_schur: --n must be even, 4..%d, and --count ≥ 1 (got %d, %d)\n", liere::kSchurMaxN, n,
                 count);
    return 2;
  }
  Eigen::setNbThreads(1);  // one thread (Eigen's own products would otherwise use OpenMP's threads)
  constexpr int P = liere::kSchurLanes;
  count = (count + P - 1) / P * P;
  const int m = n / 2;
  const std::size_t nn = std::size_t(n) * n;
  // The matrices: the official parametrisation, one (W₁, W₂) per 65 positions (CLS at 0, then the 8×8 grid).
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> as(std::size_t(count) * nn), w1(nn), w2(nn);
  for (int k = 0; k < count; ++k) {
    const int t = k % 65;
    if (t == 0)
      for (std::size_t e = 0; e < nn; ++e) w1[e] = u(g) - 0.5, w2[e] = u(g) - 0.5;
    const double p1 = t == 0 ? 0.0 : scale * double((t - 1) / 8) / 7.0, p2 = t == 0 ? 0.0 : scale * double((t - 1) % 8) / 7.0;
    double* a = as.data() + std::size_t(k) * nn;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        a[r * n + c] = r < c   ? p1 * w1[std::size_t(r * n + c)] + p2 * w2[std::size_t(r * n + c)]
                       : r > c ? -(p1 * w1[std::size_t(c * n + r)] + p2 * w2[std::size_t(c * n + r)])
                               : 0.0;
  }
  std::vector<double> q(std::size_t(count) * nn), sigma(std::size_t(count) * m), r(nn);
  std::vector<double> work(std::max(liere::skew_schur_work(n), nn)), bwork(liere::skew_schur_batch_work(n));
  // The bidiagonals (from skew_schur's reduction: its work keeps e = T(k, k+1) at offset 2n² + n).
  std::vector<double> bd(std::size_t(count) * m), bf(std::size_t(count) * m);
  for (int k = 0; k < count; ++k) {
    liere::skew_schur(as.data() + std::size_t(k) * nn, n, q.data(), sigma.data(), work.data());
    const double* e = work.data() + 2 * nn + n;
    for (int i = 0; i < m; ++i) bd[std::size_t(k * m + i)] = e[2 * i];
    for (int i = 0; i + 1 < m; ++i) bf[std::size_t(k * m + i)] = -e[2 * i + 1];
    bf[std::size_t(k * m + m - 1)] = 0.0;
  }
  // Lane-layout inputs for the batch stages: the strict lower triangle of −Aᵀ... as skew_schur_batch loads it.
  const int groups = count / P;
  std::vector<double> lanes_in(std::size_t(groups) * nn * P), la(nn * P + 8), lq(nn * P + 8), ltau_(std::size_t(n) * P + 8),
      le_(std::size_t(n) * P + 8), lw_(std::size_t(n) * P + 8), ld_(std::size_t(m) * P + 8), lf_(std::size_t(m) * P + 8),
      lu(std::size_t(m) * m * P + 8), lv(std::size_t(m) * m * P + 8);
  for (int gi = 0; gi < groups; ++gi)
    for (int c = 0; c < n; ++c)
      for (int rr = c + 1; rr < n; ++rr)
        for (int l = 0; l < P; ++l)
          lanes_in[std::size_t(gi) * nn * P + (std::size_t(rr) + std::size_t(c) * n) * P + std::size_t(l)] =
              -as[std::size_t(gi * P + l) * nn + std::size_t(c * n + rr)];
  auto aligned = [](std::vector<double>& v) {
    return v.data() + ((64 - reinterpret_cast<std::uintptr_t>(v.data()) % 64) % 64) / sizeof(double);
  };
  // (the lane arrays are 64-byte aligned, as skew_schur_batch lays them out)
  double *pa = aligned(la), *pq = aligned(lq), *pu = aligned(lu), *pv = aligned(lv), *ltau = aligned(ltau_),
         *le = aligned(le_), *lw = aligned(lw_), *ld = aligned(ld_), *lf = aligned(lf_);

  struct Stage {
    std::string name;
    std::function<void()> run;
    double best = 1e30;
  };
  std::vector<Stage> stages;
  stages.push_back({"single (skew_schur)", [&] {
                      for (int k = 0; k < count; ++k)
                        liere::skew_schur(as.data() + std::size_t(k) * nn, n, q.data() + std::size_t(k) * nn,
                                          sigma.data() + std::size_t(k) * m, work.data());
                    }});
  stages.push_back({"single QR (bidiagonal_svd)", [&] {
                      std::vector<double> d(m), f(m), uu(std::size_t(m) * m), vv(std::size_t(m) * m);
                      for (int k = 0; k < count; ++k) {
                        std::copy_n(bd.data() + std::size_t(k) * m, m, d.data());
                        std::copy_n(bf.data() + std::size_t(k) * m, m, f.data());
                        liere::detail::bidiagonal_svd(d.data(), f.data(), m, uu.data(), vv.data());
                      }
                    }});
  stages.push_back({"batch (skew_schur_batch)", [&] {
                      for (int k = 0; k < count; k += P) {
                        const double* a[P];
                        double *qp[P], *sp[P];
                        bool ok[P];
                        for (int l = 0; l < P; ++l) {
                          a[l] = as.data() + std::size_t(k + l) * nn;
                          qp[l] = q.data() + std::size_t(k + l) * nn;
                          sp[l] = sigma.data() + std::size_t(k + l) * m;
                        }
                        liere::skew_schur_batch(a, P, n, qp, sp, ok, bwork.data());
                      }
                    }});
  stages.push_back({"batch reduce (skew_reduce_lanes)", [&] {
                      for (int gi = 0; gi < groups; ++gi) {
                        std::copy_n(lanes_in.data() + std::size_t(gi) * nn * P, nn * P, pa);
                        liere::detail::skew_reduce_lanes<P>(pa, n, ltau, le, lw);
                      }
                    }});
  stages.push_back({"batch QR (bidiagonal_svd_lanes)", [&] {
                      for (int gi = 0; gi < groups; ++gi) {
                        for (int i = 0; i < m; ++i)
                          for (int l = 0; l < P; ++l) {
                            ld[i * P + l] = bd[std::size_t((gi * P + l) * m + i)];
                            lf[i * P + l] = bf[std::size_t((gi * P + l) * m + i)];
                          }
                        bool ok[P];
                        std::fill(ok, ok + P, true);
                        liere::detail::bidiagonal_svd_lanes<P>(ld, lf, m, pu, pv, ok);
                      }
                    }});
  // apply: the reflectors of the last reduce (pa, ltau) applied to a fresh copy of the identity, per group
  stages.push_back({"batch apply (apply_reflectors_lanes)", [&] {
                      for (int gi = 0; gi < groups; ++gi) {
                        std::fill(pq, pq + nn * P, 0.0);
                        for (int i = 0; i < n; ++i)
                          for (int l = 0; l < P; ++l) pq[(std::size_t(i) * n + std::size_t(i)) * P + std::size_t(l)] = 1.0;
                        liere::detail::apply_reflectors_lanes<P>(pa, ltau, n, pq);
                      }
                    }});
  stages.push_back({"exp (skew_schur_exp)", [&] {
                      for (int k = 0; k < count; ++k)
                        liere::skew_schur_exp(q.data() + std::size_t(k) * nn, sigma.data() + std::size_t(k) * m, n,
                                              r.data(), work.data());
                    }});
  if (lapack) {
    void* h = dlopen("liblapack.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "bench_schur: --lapack: cannot load liblapack.so.3 (%s)\n", dlerror());
      return 1;
    }
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(1);
    const auto bdsqr = reinterpret_cast<Bdsqr>(dlsym(h, "dbdsqr_"));
    const auto bdsdc = reinterpret_cast<Bdsdc>(dlsym(h, "dbdsdc_"));
    const auto stemr = reinterpret_cast<Stemr>(dlsym(h, "dstemr_"));
    const auto stevd = reinterpret_cast<Stevd>(dlsym(h, "dstevd_"));
    const auto lasq1 = reinterpret_cast<Lasq1>(dlsym(h, "dlasq1_"));
    if (!bdsqr || !bdsdc || !stemr || !stevd || !lasq1) {
      std::fprintf(stderr, "bench_schur: --lapack: liblapack.so.3 lacks one of dbdsqr dbdsdc dstemr dstevd dlasq1\n");
      return 1;
    }
    auto lw_ = std::make_shared<std::vector<double>>(std::size_t(20) * n * n + 100);
    auto iw_ = std::make_shared<std::vector<int>>(std::size_t(20) * n + 100);
    auto load = [&, m](int k, std::vector<double>& d, std::vector<double>& f) {
      d.assign(bd.begin() + std::ptrdiff_t(k) * m, bd.begin() + std::ptrdiff_t(k + 1) * m);
      f.assign(bf.begin() + std::ptrdiff_t(k) * m, bf.begin() + std::ptrdiff_t(k + 1) * m);
    };
    stages.push_back({"LAPACK dbdsqr (U, V)", [=, &count] {
                        std::vector<double> d, f, uu(std::size_t(m) * m), vv(std::size_t(m) * m);
                        for (int k = 0; k < count; ++k) {
                          load(k, d, f);
                          std::fill(uu.begin(), uu.end(), 0.0);
                          std::fill(vv.begin(), vv.end(), 0.0);
                          for (int i = 0; i < m; ++i) uu[std::size_t(i * m + i)] = vv[std::size_t(i * m + i)] = 1.0;
                          int zero = 0, info = 0;
                          bdsqr("U", &m, &m, &m, &zero, d.data(), f.data(), vv.data(), &m, uu.data(), &m, nullptr, &m,
                                lw_->data(), &info);
                        }
                      }});
    stages.push_back({"LAPACK dbdsdc (U, V)", [=, &count] {
                        std::vector<double> d, f, uu(std::size_t(m) * m), vv(std::size_t(m) * m);
                        for (int k = 0; k < count; ++k) {
                          load(k, d, f);
                          int info = 0, iq = 0;
                          double qd = 0;
                          bdsdc("U", "I", &m, d.data(), f.data(), uu.data(), &m, vv.data(), &m, &qd, &iq, lw_->data(),
                                iw_->data(), &info);
                        }
                      }});
    stages.push_back({"LAPACK dlasq1 (values only)", [=, &count] {
                        std::vector<double> d, f;
                        for (int k = 0; k < count; ++k) {
                          load(k, d, f);
                          int info = 0;
                          lasq1(&m, d.data(), f.data(), lw_->data(), &info);
                        }
                      }});
    stages.push_back({"LAPACK dstemr (Golub-Kahan tridiagonal)", [=, &count] {
                        std::vector<double> d, f;
                        std::vector<double> td(static_cast<std::size_t>(n)), te(td), ev(td);
                        std::vector<double> z(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
                        std::vector<int> supp(std::size_t(2 * n));
                        for (int k = 0; k < count; ++k) {
                          load(k, d, f);
                          for (int i = 0; i < n; ++i) td[std::size_t(i)] = 0.0, te[std::size_t(i)] = 0.0;
                          for (int i = 0; i < m; ++i) te[std::size_t(2 * i)] = d[std::size_t(i)];
                          for (int i = 0; i + 1 < m; ++i) te[std::size_t(2 * i + 1)] = f[std::size_t(i)];
                          int found = 0, info = 0, nzc = n, tryrac = 1, lwork = 18 * n, liwork = 10 * n, il = 0, iu = 0;
                          double vl = 0, vu = 0;
                          stemr("V", "A", &n, td.data(), te.data(), &vl, &vu, &il, &iu, &found, ev.data(), z.data(), &n,
                                &nzc, supp.data(), &tryrac, lw_->data(), &lwork, iw_->data(), &liwork, &info);
                        }
                      }});
    stages.push_back({"LAPACK dstevd (Golub-Kahan tridiagonal)", [=, &count] {
                        std::vector<double> d, f;
                        std::vector<double> td(static_cast<std::size_t>(n)), te(td);
                        std::vector<double> z(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
                        for (int k = 0; k < count; ++k) {
                          load(k, d, f);
                          for (int i = 0; i < n; ++i) td[std::size_t(i)] = 0.0, te[std::size_t(i)] = 0.0;
                          for (int i = 0; i < m; ++i) te[std::size_t(2 * i)] = d[std::size_t(i)];
                          for (int i = 0; i + 1 < m; ++i) te[std::size_t(2 * i + 1)] = f[std::size_t(i)];
                          int info = 0, lwork = 1 + 4 * n + n * n, liwork = 3 + 5 * n;
                          stevd("V", &n, td.data(), te.data(), z.data(), &n, lw_->data(), &lwork, iw_->data(), &liwork,
                                &info);
                        }
                      }});
  }
  for (int round = 0; round < rounds; ++round)
    for (Stage& s : stages) {
      const double t0 = cpu_now();
      s.run();
      s.best = std::min(s.best, (cpu_now() - t0) / count);
    }
  std::printf("n %d, %d matrices, scale %g, best of %d rounds, per matrix (process CPU time)\n", n, count, scale, rounds);
  for (const Stage& s : stages) std::printf("  %-42s %8.2f us\n", s.name.c_str(), s.best * 1e6);
  return 0;
}
