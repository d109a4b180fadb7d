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
#include <liere/liere.hpp>

#include <cstring>
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

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--reps N] [--warmup N] [--threads N] [--blocks 2,8,64] [--json PATH] [--quick] [--skip-sgemm]\n"
      "Times LieRE rotation tables for one ViT-B layer (12 heads, 8x8 grid in [0,1], HeadDim 64, float32):\n"
      "forward, and forward + backward to the parameters (median [min] over --reps after --warmup).\n"
      "  --threads N    OpenMP threads [OMP_NUM_THREADS or all cores]\n"
      "  --json PATH    append one JSON object per block size to PATH\n"
      "  --quick        smoke run: 3 reps, 1 warm-up\n"
      "  --skip-sgemm   do not measure the machine's sgemm rate (no \"of sgemm\" column)\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage(argv[0]);
      return 0;
    } else if (a == "--reps" && i + 1 < argc) {
      opt.reps = std::atoi(argv[++i]);
    } else if (a == "--warmup" && i + 1 < argc) {
      opt.warmup = std::atoi(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      opt.threads = std::atoi(argv[++i]);
    } else if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--skip-sgemm") {
      opt.skip_sgemm = true;
    } else if (a == "--json" && i + 1 < argc) {
      opt.json = argv[++i];
    } else if (a == "--blocks" && i + 1 < argc) {
      opt.blocks.clear();
      std::stringstream ss(argv[++i]);
      for (std::string tok; std::getline(ss, tok, ',');) opt.blocks.push_back(std::stoi(tok));
    } else {
      std::fprintf(stderr, "unknown argument: %s\n", a.c_str());
      usage(argv[0]);
      return 2;
    }
  }
  if (opt.quick) {
    opt.reps = std::min(opt.reps, 3);
    opt.warmup = std::min(opt.warmup, 1);
  }
  opt.reps = std::max(opt.reps, 1);
  liere::bench::set_threads(opt.threads);
  constexpr int heads = 12, tokens = 64, dim = 2, head_dim = 64;
  std::vector<float> pos;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) pos.insert(pos.end(), {float(i) / 7, float(j) / 7});

  const double sgemm = opt.skip_sgemm ? 0.0 : liere::bench::measure_sgemm_gflops();
  std::printf("threads %d, reps %d, warmup %d, sgemm (liere::cpu::gemm, %s) %.1f GFLOP/s (0: not measured)\n",
              liere::bench::threads(), opt.reps, opt.warmup,
              liere::cpu::gemm_backend_name(liere::cpu::gemm_backend()), sgemm);
  std::printf("%6s %11s %10s %12s %14s %12s %12s %14s\n", "block", "method", "fwd ms", "fwd+bwd ms", "us/table f+b",
              "GFLOP/s f+b", "of sgemm", "speed-up f+b");
  for (int block : opt.blocks) {
    // One parameter set per head, all heads in one call: tables (heads × tokens) rows.
    const liere::LieREGeometry geo{heads, dim, head_dim, block};
    std::vector<float> params(geo.num_params()), dparams(geo.num_params());
    for (int h = 0; h < heads; ++h)
      liere::liere_init_uniform<float>(std::span<float>(params).subspan(std::size_t(h) * geo.params_per_set(), geo.params_per_set()),
                                       2 * std::numbers::pi, 100 + h);
    liere::RotationTable<float> table, dtable(heads * tokens, head_dim, block);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    for (float& v : dtable.data()) v = nd(rng);
    // The engine's op (backend/cpu/rotation_table.hpp: float, threaded); the FLOP count is that of the double
    // reference (pe/liere.hpp), which takes a few more squarings than the float op: GFLOP/s is an upper estimate.
    const liere::RotationTableShape shape{heads, dim, tokens, head_dim, block};
    table.resize(heads * tokens, head_dim, block);
    auto forward = [&] { liere::cpu::rotation_table_forward(params.data(), pos.data(), table.data().data(), shape); };
    auto forward_backward = [&] {
      forward();
      std::fill(dparams.begin(), dparams.end(), 0.0f);
      liere::cpu::rotation_table_backward(params.data(), pos.data(), dtable.data().data(), dparams.data(), shape);
    };
    // The methods of this block: the default, and the polynomial path beside it where the default differs.
    std::vector<liere::cpu::TableMethod> methods = {liere::cpu::TableMethod::Auto};
    if (block >= 32) {
      methods.push_back(liere::cpu::TableMethod::SpectralSingle);
      methods.push_back(liere::cpu::TableMethod::Polynomial);
    }
    std::vector<liere::bench::Timing> tf(methods.size()), tfb(methods.size());
    std::vector<std::vector<double>> fwd_runs(methods.size()), fb_runs(methods.size());
    // Interleaved: one timing of each method per round, 3 rounds; reported: the round with the lowest median.
    for (int round = 0; round < 3; ++round)
      for (std::size_t m = 0; m < methods.size(); ++m) {
        liere::cpu::set_rotation_table_method(methods[m]);
        const liere::bench::Timing a = liere::bench::time_ms(forward, opt.reps, opt.warmup);
        const liere::bench::Timing b = liere::bench::time_ms(forward_backward, opt.reps, opt.warmup);
        fwd_runs[m].push_back(a.median_ms);
        fb_runs[m].push_back(b.median_ms);
        if (round == 0 || a.median_ms < tf[m].median_ms) tf[m] = a;
        if (round == 0 || b.median_ms < tfb[m].median_ms) tfb[m] = b;
      }
    liere::cpu::set_rotation_table_method(liere::cpu::TableMethod::Auto);
    liere::detail::product_flops = 0;
    {
      liere::RotationTable<float> ref;
      liere::liere_table_forward<float>(geo, params, pos, tokens, ref);
      liere::liere_table_backward<float>(geo, params, pos, tokens, dtable, dparams);
    }
    const double ref_flops = double(liere::detail::product_flops.load());
    const int tables = heads * tokens * (head_dim / block);
    for (std::size_t m = 0; m < methods.size(); ++m) {
      liere::cpu::set_rotation_table_method(methods[m]);
      forward();  // the orthogonality below is this method's
      liere::cpu::set_rotation_table_method(liere::cpu::TableMethod::Auto);
      const double gflops = ref_flops / (tfb[m].median_ms * 1e6);
      double orth = 0;
      for (int t = 0; t < tokens; ++t) {
        const Eigen::MatrixXd r = table.matrix(t).cast<double>();
        orth = std::max(orth, (r.transpose() * r - Eigen::MatrixXd::Identity(head_dim, head_dim)).cwiseAbs().maxCoeff());
      }
      const char* name = methods[m] == liere::cpu::TableMethod::Polynomial       ? "polynomial"
                         : methods[m] == liere::cpu::TableMethod::SpectralSingle ? "spectral-single"
                         : block >= 32                                            ? "spectral"
                                                                                  : "default";
      // against the polynomial path (the last method)
      const double speedup = methods.size() > 1 ? tfb.back().median_ms / tfb[m].median_ms : 1.0;
      std::printf("%6d %11s %10.2f %12.2f %14.1f %12.1f %11.0f%% %14.2f\n", block, name, tf[m].median_ms,
                  tfb[m].median_ms, 1e3 * tfb[m].median_ms / tables, gflops, sgemm > 0 ? 100 * gflops / sgemm : 0.0,
                  speedup);
      std::string fr, br;
      for (std::size_t r = 0; r < fwd_runs[m].size(); ++r) {
        fr += (r ? "," : "") + std::to_string(fwd_runs[m][r]);
        br += (r ? "," : "") + std::to_string(fb_runs[m][r]);
      }
      liere::bench::JsonLine j;
      j.add("bench", "rotation_tables")
          .add("impl", "liere")
          .add("method", name)
          .add("block", block)
          .add("tables", tables)
          .add("fwd_ms", tf[m].median_ms)
          .add("fwdbwd_ms", tfb[m].median_ms)
          .add("fwd_min_ms", tf[m].min_ms)
          .add("fwdbwd_min_ms", tfb[m].min_ms)
          .add("fwd_cpu_ms", tf[m].cpu_median_ms)
          .add("fwdbwd_cpu_ms", tfb[m].cpu_median_ms)
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
  }
  return 0;
}
