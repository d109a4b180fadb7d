// bench/bench_rotation.cpp — rotation tables for one ViT-B attention layer, the workload of the foundation
// issue: 12 heads (each its own LieRE parameters, official init U[0, 2π)), T = 64 positions on an 8×8 grid in
// [0, 1] as the official code places them (linspace(0, 1, 8) per axis, first axis outermost), HeadDim 64,
// Block ∈ {2, 8, 64}, float32, all threads.
//   forward            the 12 rotation tables from the parameters
//   forward + backward the tables, then the gradient to the parameters from a fixed random dL/dtable
// Blocks of 32 and 64 are timed three times in the same run, interleaved: the op's default (the spectral path,
// method "spectral": kSchurLanes decompositions at once), the spectral path one decomposition at a time (method
// "spectral-single") and the polynomial path (scaling and squaring + its Fréchet derivative, method "polynomial",
// cpu::set_rotation_table_method), with the per-table time (ms / (12·64·64/b) tables) and the speed-up against the
// polynomial path.
// Prints a table and JSON lines (--json PATH appends them); bench/compare.py runs this beside
// bench/torch_rotation.py and prints the ratios.
#define LIERE_COUNT_FLOPS
#include <app/flags.hpp>
#include <climits>
#include <liere/liere.hpp>
#include <numbers>
#include <random>

#include "bench_util.hpp"

namespace {

struct Options {
  int reps = 20, warmup = 2, threads = 0;
  bool quick = false, skip_sgemm = false;
  std::string json;
  std::vector<int> blocks = {2, 8, 64};
};

// The flags into opt (--quick applied); false after --help.
bool parse_flags(int argc, char** argv, Options& opt) {
  using liere::app::Range;
  liere::app::Flags f("bench_rotation",
                      "Times LieRE rotation tables for one ViT-B layer (12 heads, 8x8 grid in [0,1], HeadDim 64,\n"
                      "float32): forward, and forward + backward to the parameters (median [min] over --reps after\n"
                      "--warmup).");
  f.section("Options");
  f.add("reps", &opt.reps, "timed repetitions", Range{1, INT_MAX});
  f.add("warmup", &opt.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("threads", &opt.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", Range{0, INT_MAX});
  f.add("blocks", &opt.blocks, "block sizes, comma-separated");
  f.add("json", &opt.json, "append one JSON object per block size and method to PATH", "PATH");
  f.add_switch("quick", &opt.quick, "smoke run: 3 reps, 1 warm-up");
  f.add_switch("skip-sgemm", &opt.skip_sgemm, "do not measure the machine's sgemm rate (no \"of sgemm\" column)");
  if (!f.parse(argc, argv)) return false;
  if (opt.quick) {
    opt.reps = std::min(opt.reps, 3);
    opt.warmup = std::min(opt.warmup, 1);
  }
  return true;
}

constexpr int kHeads = 12, kTokens = 64, kDim = 2, kHeadDim = 64;

// The 64 positions: the 8×8 grid in [0, 1], first axis outermost.
std::vector<float> grid_positions() {
  std::vector<float> pos;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) pos.insert(pos.end(), {float(i) / 7, float(j) / 7});
  return pos;
}

// The methods of one block: the default, and the polynomial path beside it where the default differs.
std::vector<liere::cpu::TableMethod> methods_of(int block) {
  std::vector<liere::cpu::TableMethod> methods = {liere::cpu::TableMethod::Auto};
  if (block >= 32) {
    methods.push_back(liere::cpu::TableMethod::SpectralSingle);
    methods.push_back(liere::cpu::TableMethod::Polynomial);
  }
  return methods;
}

const char* method_name(liere::cpu::TableMethod m, int block) {
  return m == liere::cpu::TableMethod::Polynomial       ? "polynomial"
         : m == liere::cpu::TableMethod::SpectralSingle ? "spectral-single"
         : block >= 32                                  ? "spectral"
                                                        : "default";
}

// One method's times: the round with the lowest median, and every round's median.
struct MethodTimes {
  liere::bench::Timing fwd, fwdbwd;
  std::vector<double> fwd_runs, fwdbwd_runs;
};

// Times forward and forward_backward with each method, interleaved: one timing of each method per round, 3
// rounds; kept: the round with the lowest median.
std::vector<MethodTimes> time_methods(const std::vector<liere::cpu::TableMethod>& methods,
                                      const std::function<void()>& forward,
                                      const std::function<void()>& forward_backward, const Options& opt) {
  std::vector<MethodTimes> t(methods.size());
  for (int round = 0; round < 3; ++round)
    for (std::size_t m = 0; m < methods.size(); ++m) {
      liere::cpu::set_rotation_table_method(methods[m]);
      const liere::bench::Timing a = liere::bench::time_ms(forward, opt.reps, opt.warmup);
      const liere::bench::Timing b = liere::bench::time_ms(forward_backward, opt.reps, opt.warmup);
      t[m].fwd_runs.push_back(a.median_ms);
      t[m].fwdbwd_runs.push_back(b.median_ms);
      if (round == 0 || a.median_ms < t[m].fwd.median_ms) t[m].fwd = a;
      if (round == 0 || b.median_ms < t[m].fwdbwd.median_ms) t[m].fwdbwd = b;
    }
  liere::cpu::set_rotation_table_method(liere::cpu::TableMethod::Auto);
  return t;
}

// The largest |RᵀR − I| over the tokens' tables of head 0.
double orthogonality(const liere::RotationTable<float>& table) {
  double orth = 0;
  for (int t = 0; t < kTokens; ++t) {
    const Eigen::MatrixXd r = table.matrix(t).cast<double>();
    orth = std::max(orth, (r.transpose() * r - Eigen::MatrixXd::Identity(kHeadDim, kHeadDim)).cwiseAbs().maxCoeff());
  }
  return orth;
}

// The table row and the JSON line of one method.
void report_method(int block, const char* name, const MethodTimes& t, double speedup, double ref_flops, double orth,
                   double sgemm, const Options& opt) {
  const int tables = kHeads * kTokens * (kHeadDim / block);
  const double gflops = ref_flops / (t.fwdbwd.median_ms * 1e6);
  std::printf("%6d %11s %10.2f %12.2f %14.1f %12.1f %11.0f%% %14.2f\n", block, name, t.fwd.median_ms,
              t.fwdbwd.median_ms, 1e3 * t.fwdbwd.median_ms / tables, gflops, sgemm > 0 ? 100 * gflops / sgemm : 0.0,
              speedup);
  std::string fr, br;
  for (std::size_t r = 0; r < t.fwd_runs.size(); ++r) {
    // (appended in two steps: gcc 12 warns about "," + std::string inlined here, -Wrestrict)
    if (r) fr += ',', br += ',';
    fr += std::to_string(t.fwd_runs[r]);
    br += std::to_string(t.fwdbwd_runs[r]);
  }
  liere::bench::JsonLine j;
  j.add("bench", "rotation_tables")
      .add("impl", "liere")
      .add("method", name)
      .add("block", block)
      .add("tables", tables)
      .add("fwd_ms", t.fwd.median_ms)
      .add("fwdbwd_ms", t.fwdbwd.median_ms)
      .add("fwd_min_ms", t.fwd.min_ms)
      .add("fwdbwd_min_ms", t.fwdbwd.min_ms)
      .add("fwd_cpu_ms", t.fwd.cpu_median_ms)
      .add("fwdbwd_cpu_ms", t.fwdbwd.cpu_median_ms)
      .add("fwd_round_medians_ms", fr)
      .add("fwdbwd_round_medians_ms", br)
      .add("gflops_fwdbwd", gflops)
      .add("orth_unit", orth)
      .add("threads", liere::bench::threads())
      .add("reps", opt.reps)
      .add("warmup", opt.warmup)
      .add("peak_rss_mib", liere::bench::peak_rss_mib());
  if (sgemm > 0) j.add("sgemm_gflops", sgemm);
  j.add("gemm", liere::cpu::gemm_backend_name(liere::cpu::gemm_backend()));
  j.emit(opt.json);
}

// One block size: the tables of the 12 heads in one call (tables (heads × tokens) rows), timed with each method.
void run_block(int block, const std::vector<float>& pos, double sgemm, const Options& opt) {
  // One parameter set per head, all heads in one call.
  const liere::LieREGeometry geo{kHeads, kDim, kHeadDim, block};
  std::vector<float> params(geo.num_params()), dparams(geo.num_params());
  for (int h = 0; h < kHeads; ++h)
    liere::liere_init_uniform<float>(
        std::span<float>(params).subspan(std::size_t(h) * geo.params_per_set(), geo.params_per_set()),
        2 * std::numbers::pi, 100 + h);
  liere::RotationTable<float> table, dtable(kHeads * kTokens, kHeadDim, block);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (float& v : dtable.data()) v = nd(rng);
  // The engine's op (backend/cpu/rotation_table.hpp: float, threaded); the FLOP count is that of the double
  // reference (pe/liere.hpp), which takes a few more squarings than the float op: GFLOP/s is an upper estimate.
  const liere::RotationTableShape shape{kHeads, kDim, kTokens, kHeadDim, block};
  table.resize(kHeads * kTokens, kHeadDim, block);
  auto forward = [&] { liere::cpu::rotation_table_forward(params.data(), pos.data(), table.data().data(), shape); };
  auto forward_backward = [&] {
    forward();
    std::fill(dparams.begin(), dparams.end(), 0.0f);
    liere::cpu::rotation_table_backward(params.data(), pos.data(), dtable.data().data(), dparams.data(), shape);
  };
  const std::vector<liere::cpu::TableMethod> methods = methods_of(block);
  const std::vector<MethodTimes> times = time_methods(methods, forward, forward_backward, opt);
  liere::detail::product_flops = 0;
  {
    liere::RotationTable<float> ref;
    liere::liere_table_forward<float>(geo, params, pos, kTokens, ref);
    liere::liere_table_backward<float>(geo, params, pos, kTokens, dtable, dparams);
  }
  const double ref_flops = double(liere::detail::product_flops.load());
  for (std::size_t m = 0; m < methods.size(); ++m) {
    liere::cpu::set_rotation_table_method(methods[m]);
    forward();  // the orthogonality below is this method's
    liere::cpu::set_rotation_table_method(liere::cpu::TableMethod::Auto);
    // against the polynomial path (the last method)
    const double speedup = methods.size() > 1 ? times.back().fwdbwd.median_ms / times[m].fwdbwd.median_ms : 1.0;
    report_method(block, method_name(methods[m], block), times[m], speedup, ref_flops, orthogonality(table), sgemm,
                  opt);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_rotation", [&] {
    Options opt;
    if (!parse_flags(argc, argv, opt)) return 0;
    liere::bench::set_threads(opt.threads);
    const std::vector<float> pos = grid_positions();
    const double sgemm = opt.skip_sgemm ? 0.0 : liere::bench::measure_sgemm_gflops();
    std::printf("threads %d, reps %d, warmup %d, sgemm (liere::cpu::gemm, %s) %.1f GFLOP/s (0: not measured)\n",
                liere::bench::threads(), opt.reps, opt.warmup,
                liere::cpu::gemm_backend_name(liere::cpu::gemm_backend()), sgemm);
    std::printf("%6s %11s %10s %12s %14s %12s %12s %14s\n", "block", "method", "fwd ms", "fwd+bwd ms", "us/table f+b",
                "GFLOP/s f+b", "of sgemm", "speed-up f+b");
    for (int block : opt.blocks) run_block(block, pos, sgemm, opt);
    return 0;
  });
}
