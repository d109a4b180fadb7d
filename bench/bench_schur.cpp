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
#include <app/flags.hpp>
#include <climits>
#include <cstdint>
#include <cstdio>
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
using Bdsdc = void (*)(const char*, const char*, const int*, double*, double*, double*, const int*, double*, const int*,
                       double*, int*, double*, int*, int*);
using Stemr = void (*)(const char*, const char*, const int*, double*, double*, const double*, const double*, const int*,
                       const int*, int*, double*, double*, const int*, const int*, int*, int*, double*, const int*,
                       int*, const int*, int*);
using Stevd = void (*)(const char*, const int*, double*, double*, double*, const int*, double*, const int*, int*,
                       const int*, int*);
using Lasq1 = void (*)(const int*, double*, double*, double*, int*);

constexpr int P = liere::kSchurLanes;

struct Options {
  int n = 64, count = 256, rounds = 5;
  double scale = 1.0;
  bool lapack = false;
};

// The flags into o (--count rounded up to whole batches of kSchurLanes); false after --help.
bool parse_flags(int argc, char** argv, Options& o) {
  liere::app::Flags f("bench_schur",
                      "Times the stages of the real Schur form of skew matrices (lie/skew_schur.hpp), per matrix, one\n"
                      "thread, process CPU time, best round; every stage once per round, interleaved.");
  f.section("Options");
  f.add(
      "n", "N", "matrix size b: even, 4 to " + std::to_string(liere::kSchurMaxN),
      [&](const std::string& v) {
        const long long n = liere::app::Flags::to_int(v);
        LIERE_ENSURE(n >= 4 && n <= liere::kSchurMaxN && n % 2 == 0,
                     "expected an even integer in [4, " << liere::kSchurMaxN << "]");
        o.n = int(n);
      },
      [&] { return std::to_string(o.n); });
  f.add("count", &o.count, "matrices, rounded up to a multiple of " + std::to_string(P) + " (kSchurLanes)",
        liere::app::Range{1, INT_MAX});
  f.add("rounds", &o.rounds, "rounds; the best is reported", liere::app::Range{1, INT_MAX});
  f.add("scale", &o.scale, "the positions' scale (the generators' multiples)");
  f.add_switch("lapack", &o.lapack, "also LAPACK's bidiagonal and tridiagonal solvers (liblapack.so.3, dlopen)");
  if (!f.parse(argc, argv)) return false;
  o.count = (o.count + P - 1) / P * P;
  return true;
}

// The matrices and every stage's inputs, outputs and work space, allocated in one place (in the order the
// measurements were taken with: the heap layout moves the stages' times by a few per cent).
struct Inputs {
  Inputs(int n_, int count_)
      : n(n_),
        m(n_ / 2),
        count(count_),
        groups(count_ / P),
        nn(std::size_t(n_) * n_),
        as(std::size_t(count) * nn),
        w1(nn),
        w2(nn),
        q(std::size_t(count) * nn),
        sigma(std::size_t(count) * m),
        r(nn),
        work(std::max(liere::skew_schur_work(n), nn)),
        bwork(liere::skew_schur_batch_work(n)),
        bd(std::size_t(count) * m),
        bf(std::size_t(count) * m),
        lanes_in(std::size_t(groups) * nn * P),
        la(nn * P + 8),
        lq(nn * P + 8),
        ltau_(std::size_t(n) * P + 8),
        le_(std::size_t(n) * P + 8),
        lw_(std::size_t(n) * P + 8),
        ld_(std::size_t(m) * P + 8),
        lf_(std::size_t(m) * P + 8),
        lu(std::size_t(m) * m * P + 8),
        lv(std::size_t(m) * m * P + 8) {}
  int n, m, count, groups;  // m = n/2 (the bidiagonals' size), groups = count / P
  std::size_t nn;
  std::vector<double> as, w1, w2;                // count matrices (n × n); the generators W₁, W₂ of the last 65
  std::vector<double> q, sigma, r, work, bwork;  // skew_schur's outputs and work spaces
  std::vector<double> bd, bf;                    // the bidiagonals (count × m each)
  std::vector<double> lanes_in;                  // the batch stages' input, in the lane layout (groups × n² × P)
  // the lane arrays (64-byte aligned inside, as skew_schur_batch lays them out)
  std::vector<double> la, lq, ltau_, le_, lw_, ld_, lf_, lu, lv;
  double *pa = nullptr, *pq = nullptr, *pu = nullptr, *pv = nullptr, *ltau = nullptr, *le = nullptr, *lw = nullptr,
         *ld = nullptr, *lf = nullptr;
};

// The matrices A = p₁·W₁ + p₂·W₂: the official parametrisation, one (W₁, W₂) per 65 positions (CLS at 0, then the
// 8×8 grid), and the bidiagonals of skew_schur's reduction of each.
void make_matrices(Inputs& in, double scale) {
  const int n = in.n, m = in.m, count = in.count;
  const std::size_t nn = in.nn;
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double>& w1 = in.w1;
  std::vector<double>& w2 = in.w2;
  for (int k = 0; k < count; ++k) {
    const int t = k % 65;
    if (t == 0)
      for (std::size_t e = 0; e < nn; ++e) w1[e] = u(g) - 0.5, w2[e] = u(g) - 0.5;
    const double p1 = t == 0 ? 0.0 : scale * double((t - 1) / 8) / 7.0,
                 p2 = t == 0 ? 0.0 : scale * double((t - 1) % 8) / 7.0;
    double* a = in.as.data() + std::size_t(k) * nn;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c)
        a[r * n + c] = r < c   ? p1 * w1[std::size_t(r * n + c)] + p2 * w2[std::size_t(r * n + c)]
                       : r > c ? -(p1 * w1[std::size_t(c * n + r)] + p2 * w2[std::size_t(c * n + r)])
                               : 0.0;
  }
  // The bidiagonals (from skew_schur's reduction: its work keeps e = T(k, k+1) at offset 2n² + n).
  for (int k = 0; k < count; ++k) {
    liere::skew_schur(in.as.data() + std::size_t(k) * nn, n, in.q.data(), in.sigma.data(), in.work.data());
    const double* e = in.work.data() + 2 * nn + n;
    for (int i = 0; i < m; ++i) in.bd[std::size_t(k * m + i)] = e[2 * i];
    for (int i = 0; i + 1 < m; ++i) in.bf[std::size_t(k * m + i)] = -e[2 * i + 1];
    in.bf[std::size_t(k * m + m - 1)] = 0.0;
  }
}

// Lane-layout inputs for the batch stages: the strict lower triangle of −Aᵀ... as skew_schur_batch loads it.
void make_lanes(Inputs& in) {
  const int n = in.n;
  const std::size_t nn = in.nn;
  for (int gi = 0; gi < in.groups; ++gi)
    for (int c = 0; c < n; ++c)
      for (int rr = c + 1; rr < n; ++rr)
        for (int l = 0; l < P; ++l)
          in.lanes_in[std::size_t(gi) * nn * P + (std::size_t(rr) + std::size_t(c) * n) * P + std::size_t(l)] =
              -in.as[std::size_t(gi * P + l) * nn + std::size_t(c * n + rr)];
  auto aligned = [](std::vector<double>& v) {
    return v.data() + ((64 - reinterpret_cast<std::uintptr_t>(v.data()) % 64) % 64) / sizeof(double);
  };
  in.pa = aligned(in.la), in.pq = aligned(in.lq), in.pu = aligned(in.lu), in.pv = aligned(in.lv);
  in.ltau = aligned(in.ltau_), in.le = aligned(in.le_), in.lw = aligned(in.lw_), in.ld = aligned(in.ld_);
  in.lf = aligned(in.lf_);
}

struct Stage {
  std::string name;
  std::function<void()> run;
  double best = 1e30;
};

// liere's stages, one matrix at a time and kSchurLanes at once, on the inputs (which must outlive them).
std::vector<Stage> liere_stages(Inputs& in) {
  const int n = in.n, m = in.m, count = in.count, groups = in.groups;
  const std::size_t nn = in.nn;
  std::vector<Stage> stages;
  stages.push_back({"single (skew_schur)", [&in, n, m, nn, count] {
                      for (int k = 0; k < count; ++k)
                        liere::skew_schur(in.as.data() + std::size_t(k) * nn, n, in.q.data() + std::size_t(k) * nn,
                                          in.sigma.data() + std::size_t(k) * m, in.work.data());
                    }});
  stages.push_back({"single QR (bidiagonal_svd)", [&in, m, count] {
                      std::vector<double> d(m), f(m), uu(std::size_t(m) * m), vv(std::size_t(m) * m);
                      for (int k = 0; k < count; ++k) {
                        std::copy_n(in.bd.data() + std::size_t(k) * m, m, d.data());
                        std::copy_n(in.bf.data() + std::size_t(k) * m, m, f.data());
                        liere::detail::bidiagonal_svd(d.data(), f.data(), m, uu.data(), vv.data());
                      }
                    }});
  stages.push_back({"batch (skew_schur_batch)", [&in, n, m, nn, count] {
                      for (int k = 0; k < count; k += P) {
                        const double* a[P];
                        double *qp[P], *sp[P];
                        bool ok[P];
                        for (int l = 0; l < P; ++l) {
                          a[l] = in.as.data() + std::size_t(k + l) * nn;
                          qp[l] = in.q.data() + std::size_t(k + l) * nn;
                          sp[l] = in.sigma.data() + std::size_t(k + l) * m;
                        }
                        liere::skew_schur_batch(a, P, n, qp, sp, ok, in.bwork.data());
                      }
                    }});
  stages.push_back({"batch reduce (skew_reduce_lanes)", [&in, n, nn, groups] {
                      for (int gi = 0; gi < groups; ++gi) {
                        std::copy_n(in.lanes_in.data() + std::size_t(gi) * nn * P, nn * P, in.pa);
                        liere::detail::skew_reduce_lanes<P>(in.pa, n, in.ltau, in.le, in.lw);
                      }
                    }});
  stages.push_back({"batch QR (bidiagonal_svd_lanes)", [&in, m, groups] {
                      for (int gi = 0; gi < groups; ++gi) {
                        for (int i = 0; i < m; ++i)
                          for (int l = 0; l < P; ++l) {
                            in.ld[i * P + l] = in.bd[std::size_t((gi * P + l) * m + i)];
                            in.lf[i * P + l] = in.bf[std::size_t((gi * P + l) * m + i)];
                          }
                        bool ok[P];
                        std::fill(ok, ok + P, true);
                        liere::detail::bidiagonal_svd_lanes<P>(in.ld, in.lf, m, in.pu, in.pv, ok);
                      }
                    }});
  // apply: the reflectors of the last reduce (pa, ltau) applied to a fresh copy of the identity, per group
  stages.push_back({"batch apply (apply_reflectors_lanes)", [&in, n, nn, groups] {
                      for (int gi = 0; gi < groups; ++gi) {
                        std::fill(in.pq, in.pq + nn * P, 0.0);
                        for (int i = 0; i < n; ++i)
                          for (int l = 0; l < P; ++l)
                            in.pq[(std::size_t(i) * n + std::size_t(i)) * P + std::size_t(l)] = 1.0;
                        liere::detail::apply_reflectors_lanes<P>(in.pa, in.ltau, n, in.pq);
                      }
                    }});
  stages.push_back({"exp (skew_schur_exp)", [&in, n, m, nn, count] {
                      for (int k = 0; k < count; ++k)
                        liere::skew_schur_exp(in.q.data() + std::size_t(k) * nn, in.sigma.data() + std::size_t(k) * m,
                                              n, in.r.data(), in.work.data());
                    }});
  return stages;
}

// LAPACK's solvers on the same bidiagonals (--lapack), appended to stages; throws when liblapack.so.3 or one of
// its routines is missing.
void add_lapack_stages(std::vector<Stage>& stages, const Inputs& in) {
  void* h = dlopen("liblapack.so.3", RTLD_NOW | RTLD_LOCAL);
  LIERE_ENSURE(h, "--lapack: cannot load liblapack.so.3 (" << dlerror() << ")");
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(1);
  const auto bdsqr = reinterpret_cast<Bdsqr>(dlsym(h, "dbdsqr_"));
  const auto bdsdc = reinterpret_cast<Bdsdc>(dlsym(h, "dbdsdc_"));
  const auto stemr = reinterpret_cast<Stemr>(dlsym(h, "dstemr_"));
  const auto stevd = reinterpret_cast<Stevd>(dlsym(h, "dstevd_"));
  const auto lasq1 = reinterpret_cast<Lasq1>(dlsym(h, "dlasq1_"));
  LIERE_ENSURE(bdsqr && bdsdc && stemr && stevd && lasq1,
               "--lapack: liblapack.so.3 lacks one of dbdsqr dbdsdc dstemr dstevd dlasq1");
  const int n = in.n, m = in.m, count = in.count;
  auto lw_ = std::make_shared<std::vector<double>>(std::size_t(20) * n * n + 100);
  auto iw_ = std::make_shared<std::vector<int>>(std::size_t(20) * n + 100);
  auto load = [&in, m](int k, std::vector<double>& d, std::vector<double>& f) {
    d.assign(in.bd.begin() + std::ptrdiff_t(k) * m, in.bd.begin() + std::ptrdiff_t(k + 1) * m);
    f.assign(in.bf.begin() + std::ptrdiff_t(k) * m, in.bf.begin() + std::ptrdiff_t(k + 1) * m);
  };
  stages.push_back({"LAPACK dbdsqr (U, V)", [=] {
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
  stages.push_back({"LAPACK dbdsdc (U, V)", [=] {
                      std::vector<double> d, f, uu(std::size_t(m) * m), vv(std::size_t(m) * m);
                      for (int k = 0; k < count; ++k) {
                        load(k, d, f);
                        int info = 0, iq = 0;
                        double qd = 0;
                        bdsdc("U", "I", &m, d.data(), f.data(), uu.data(), &m, vv.data(), &m, &qd, &iq, lw_->data(),
                              iw_->data(), &info);
                      }
                    }});
  stages.push_back({"LAPACK dlasq1 (values only)", [=] {
                      std::vector<double> d, f;
                      for (int k = 0; k < count; ++k) {
                        load(k, d, f);
                        int info = 0;
                        lasq1(&m, d.data(), f.data(), lw_->data(), &info);
                      }
                    }});
  stages.push_back({"LAPACK dstemr (Golub-Kahan tridiagonal)", [=] {
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
  stages.push_back({"LAPACK dstevd (Golub-Kahan tridiagonal)", [=] {
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

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_schur", [&] {
    Options o;
    if (!parse_flags(argc, argv, o)) return 0;
    Eigen::setNbThreads(1);  // one thread (Eigen's own products would otherwise use OpenMP's threads)
    Inputs in(o.n, o.count);
    make_matrices(in, o.scale);
    make_lanes(in);
    std::vector<Stage> stages = liere_stages(in);
    if (o.lapack) add_lapack_stages(stages, in);
    for (int round = 0; round < o.rounds; ++round)
      for (Stage& s : stages) {
        const double t0 = cpu_now();
        s.run();
        s.best = std::min(s.best, (cpu_now() - t0) / o.count);
      }
    std::printf("n %d, %d matrices, scale %g, best of %d rounds, per matrix (process CPU time)\n", o.n, o.count,
                o.scale, o.rounds);
    for (const Stage& s : stages) std::printf("  %-42s %8.2f us\n", s.name.c_str(), s.best * 1e6);
    return 0;
  });
}
