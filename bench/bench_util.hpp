// bench/bench_util.hpp — timing (median of repetitions), the machine's sgemm rate, JSON lines.
#pragma once

#include <liere/core/eigen.hpp>
#include <liere/backend/cpu/gemm.hpp>
#include <liere/io/json.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <sys/resource.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace liere::bench {

struct Timing {
  double median_ms = 0, min_ms = 0;
  double cpu_median_ms = 0;  // process CPU time (all threads) per call, as torch_common.time_fn's cpu_median_ms
};

// CPU time of this process so far (user + system, all threads), ms.
inline double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// Runs f `warmup` times, then `reps` times, and returns the median and the minimum wall time and the median
// process CPU time. On a shared machine a wall time far above cpu_median_ms / threads means the run waited for a
// core; with one thread the CPU time is the work itself, whatever the load.
inline Timing time_ms(const std::function<void()>& f, int reps, int warmup = 2) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t, cpu;
  for (int i = 0; i < reps; ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(process_cpu_ms() - c0);
  }
  std::sort(t.begin(), t.end());
  std::sort(cpu.begin(), cpu.end());
  return {t[t.size() / 2], t.front(), cpu[cpu.size() / 2]};
}

inline int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Sets the number of OpenMP threads (n > 0; n <= 0 keeps OMP_NUM_THREADS or all cores).
inline void set_threads(int n) {
#ifdef _OPENMP
  if (n > 0) omp_set_num_threads(n);
#else
  (void)n;
#endif
}

// Peak resident set size of this process so far, MiB (Linux reports ru_maxrss in KiB).
inline double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

// The sgemm rate of liere's own GEMM (liere::cpu::gemm, the backend chosen now: oneDNN by default where it
// loads, else Eigen; all threads, liere's slabs), GFLOP/s: the best of a few square and ViT-shaped products, so
// "achieved / sgemm" ratios compare a workload with the GEMM it runs on.
inline double measure_sgemm_gflops() {
  double best = 0;
  for (auto [m, k, n] : std::vector<std::array<int, 3>>{{1024, 1024, 1024}, {8320, 192, 576}, {8320, 768, 192}}) {
    std::vector<float> a(std::size_t(m) * k, 0.5f), b(std::size_t(k) * n, 0.25f), c(std::size_t(m) * n);
    const Timing t = time_ms([&] { liere::cpu::gemm<float>(false, false, m, n, k, 1.f, a.data(), b.data(), 0.f, c.data()); },
                             7, 2);
    best = std::max(best, 2.0 * m * k * n / (t.median_ms * 1e6));
  }
  return best;
}

// One JSON object per line: {"key": value, ...}; values are numbers or strings (liere/io/json.hpp: numbers
// in their shortest round-trip form, NaN as null, strings escaped).
class JsonLine {
 public:
  JsonLine() { w_.begin_object(); }
  JsonLine& add(const std::string& k, double v) {
    w_.member(k, v);
    return *this;
  }
  JsonLine& add(const std::string& k, const std::string& v) {
    w_.member(k, v);
    return *this;
  }
  std::string str() const { return w_.str() + "}"; }
  void emit(const std::string& path) const {
    std::printf("%s\n", str().c_str());
    if (!path.empty()) std::ofstream(path, std::ios::app) << str() << '\n';
  }

 private:
  liere::io::json::Writer w_;  // the open object; str() closes it
};

// The attention benchmarks' flags (bench_flash_attention, bench_attention_device). A bad value throws
// liere::Error, which app::Flags reports as a usage error naming the flag (exit code 2).
// --impl both|flash|unfused into which of the two runs.
inline void parse_impl(const std::string& v, bool& run_unfused, bool& run_flash) {
  LIERE_ENSURE(v == "both" || v == "flash" || v == "unfused", "expected both, flash or unfused");
  run_unfused = v != "flash";
  run_flash = v != "unfused";
}
// The value of --impl that selects these runs (--help's default).
inline std::string impl_text(bool run_unfused, bool run_flash) {
  return run_unfused && run_flash ? "both" : run_flash ? "flash" : "unfused";
}

// --shapes "T:B,T:B,…" (tokens, batch) into pairs; a pair that is not two integers or that `ok` refuses throws
// "'<pair>' is not <expected>".
struct TokensBatch {
  int T, B;
};
inline std::vector<TokensBatch> parse_shapes(const std::string& v, const std::function<bool(int T, int B)>& ok,
                                             const char* expected) {
  std::vector<TokensBatch> out;
  std::size_t at = 0;
  while (at <= v.size()) {
    const std::size_t end = std::min(v.find(',', at), v.size());
    const std::string tok = v.substr(at, end - at);
    if (tok.empty() && end == v.size()) break;  // "" or a trailing comma: nothing more
    TokensBatch sh{};
    LIERE_ENSURE(std::sscanf(tok.c_str(), "%d:%d", &sh.T, &sh.B) == 2 && ok(sh.T, sh.B),
                 "'" << tok << "' is not " << expected);
    out.push_back(sh);
    at = end + 1;
  }
  return out;
}
// The pairs as --shapes writes them (--help's default).
inline std::string shapes_text(const std::vector<TokensBatch>& shapes) {
  std::string s;
  for (const TokensBatch& sh : shapes) {
    if (!s.empty()) s += ',';  // (not "," + std::string: gcc 12 warns about that inlined, -Wrestrict)
    s += std::to_string(sh.T) + ":" + std::to_string(sh.B);
  }
  return s;
}

}  // namespace liere::bench
