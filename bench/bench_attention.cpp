// bench/bench_attention.cpp — one attention layer with its position encoding, the workload of the issue
// "Every position encoding behind one interface": ViT-Tiny on CIFAR, B = 128, T = 65 (CLS + an 8×8 grid),
// dim 192, 3 heads of 64, float32, all threads. The C++ twin of bench/torch_attention.py; bench/compare.py runs
// the two side by side and prints the ratios.
//
// B batch, T tokens, H heads, D head dim, C = H·D model width, N = B·T rows.
//
// Timed region: the same as torch_attention.py's, step for step.
//   forward     pe.prepare()                      the encoding's tables from its parameters (every forward, as
//                                                  rope-vit and the official LieRE code recompute them)
//               qkv = x·Wqkvᵀ + bqkv              Linear(192 → 576, bias), qkv (B, T, 3, H, D) packed
//               attention_forward                 rotate q and k (CLS never rotated), softmax(q̂k̂ᵀ/√D)·v
//               y = o·Wprojᵀ + bproj              Linear(192 → 192, bias)
//   fwd+bwd     the forward, then with dL/dy = C (the loss (y ∘ C).sum(), C ~ N(0, 1) fixed):
//               zero every gradient (torch: grad = None), proj backward (do, dWproj, dbproj),
//               attention_backward (dqkv, dtables), qkv backward (dx, dWqkv, dbqkv), pe.backward() (dparams)
// The torch script's fwd runs under no_grad; liere's forward always keeps what its backward needs (the
// probabilities), so "fwd" here is the training forward.
//
// Encodings (--enc, comma-separated; default none,rope-mixed,liere8,liere64):
//   none        no rotation
//   rope-mixed  rope-vit's RoPE-Mixed (integer grid, per-head frequencies, CLS skipped as rope-vit slices it)
//   liereB      LieRE with B×B blocks (B ∈ 2, 3, 4, 8, 16, 32, 64), positions in [0, 1] (linspace(0, 1, 8) per
//               axis), init U[0, 2π), CLS at position 0 (identity rotation, as the official code)
// Any other name of PEConfig's --pe list is accepted too (visionllama, comrope-ap, string, …).
//
// Output: a table of median [min] ms for fwd and fwd+bwd, GFLOP/s, peak RSS, and one JSON object per encoding
// (keys as torch_attention.py's: bench, impl, enc, B, T, dim, heads, fwd_ms, fwd_min_ms, fwdbwd_ms, …).
// By default each encoding runs in its own child process (this program again) so that its peak RSS is its own.
#define LIERE_COUNT_FLOPS
#include <sys/wait.h>
#include <unistd.h>

#include <app/flags.hpp>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <liere/attention.hpp>
#include <liere/backend/cpu/linear.hpp>
#include <liere/pe/config.hpp>
#include <liere/pe/encoding.hpp>
#include <random>

#include "bench_util.hpp"

namespace {

constexpr int kBatch = 128, kSide = 8, kTokens = kSide * kSide + 1, kHeads = 3, kHeadDim = 64, kDim = kHeads * kHeadDim;

struct Options {
  int reps = 10, warmup = 2, threads = 0;
  bool quick = false, no_isolate = false, skip_sgemm = false, profile = false;
  std::string json, child;  // child: internal, the file a child process appends its JSON line to
  double sgemm = 0;         // internal: measured by the parent
  std::vector<std::string> encodings = {"none", "rope-mixed", "liere8", "liere64"};
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (!tok.empty()) out.push_back(tok);
  return out;
}
std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) {
    if (!s.empty()) s += ',';
    s += e;
  }
  return s;
}

// The PEConfig of an encoding name.
liere::PEConfig config_of(const std::string& enc) {
  liere::PEConfig cfg;
  if (enc.rfind("liere", 0) == 0 && enc.size() > 5 && std::isdigit(static_cast<unsigned char>(enc[5]))) {
    cfg.set("pe", "liere");
    cfg.set("block", enc.substr(5));
  } else {
    cfg.set("pe", enc);
  }
  // rope-vit slices the CLS token off (skip); the official LieRE code gives it position 0 (identity, default).
  if (cfg.kind == liere::PEKind::rope_mixed) cfg.set("cls", "skip");
  return cfg;
}

// The flags into opt (--quick applied); false after --help. An unknown encoding is a usage error, before any timing.
bool parse_flags(int argc, char** argv, Options& opt) {
  using liere::app::Range;
  liere::app::Flags f("bench_attention",
                      "One attention layer + its position encoding (B=" + std::to_string(kBatch) +
                          ", T=" + std::to_string(kTokens) + " = CLS + " + std::to_string(kSide) + "x" +
                          std::to_string(kSide) + ", dim " + std::to_string(kDim) + ", " + std::to_string(kHeads) +
                          " heads of " + std::to_string(kHeadDim) +
                          ", float32),\nthe workload of bench/torch_attention.py: PE tables, qkv Linear, rotate q/k, "
                          "softmax attention, "
                          "proj Linear;\nforward, and forward + backward to x, both Linears and the PE parameters.");
  f.section("Options");
  f.add(
      "enc", "LIST", "comma-separated: none, rope-mixed, liere<B> (B in 2,3,4,8,16,32,64) or any --pe name",
      [&](const std::string& v) {
        opt.encodings = split(v);
        for (const auto& e : opt.encodings) config_of(e);
      },
      [&] { return join(opt.encodings); });
  f.add("reps", &opt.reps, "timed repetitions, median and min reported", Range{1, INT_MAX});
  f.add("warmup", &opt.warmup, "untimed repetitions first", Range{0, INT_MAX});
  f.add("threads", &opt.threads, "OpenMP threads (0: OMP_NUM_THREADS or all cores)", Range{0, INT_MAX});
  f.add("json", &opt.json, "append one JSON object per encoding to PATH", "PATH");
  f.add_switch("quick", &opt.quick, "smoke run: 2 reps, 1 warm-up");
  f.add_switch("no-isolate", &opt.no_isolate,
               "run every encoding in this process (default: one child process each, so that the peak RSS printed "
               "is that encoding's own)");
  f.add_switch("skip-sgemm", &opt.skip_sgemm, "do not measure the machine's sgemm rate");
  f.add_switch("profile", &opt.profile, "also time each stage of fwd+bwd on its own (median ms per stage)");
  f.section("Internal (the options this program gives the child process of an encoding)");
  f.add("_child", &opt.child, "run one encoding and append its JSON line to PATH", "PATH");
  f.add("_sgemm", &opt.sgemm, "the sgemm rate the parent measured, GFLOP/s (0: none)");
  if (!f.parse(argc, argv)) return false;
  if (opt.quick) {
    opt.reps = std::min(opt.reps, 2);
    opt.warmup = std::min(opt.warmup, 1);
  }
  return true;
}

struct Result {
  liere::bench::Timing fwd, fwdbwd;
  double flops_fwd = 0, flops_fwdbwd = 0;  // GEMM-like flops, plus the table products counted by exp.hpp
  double table_flops_fwd = 0, table_flops_fwdbwd = 0;
  std::size_t enc_params = 0;
  double checksum = 0;
  std::vector<std::pair<std::string, double>> stages;  // --profile: median ms per stage
};

// The flops of the dense products of one forward (the layer's GEMMs and the rotation of q and k); the
// backward does twice as many (two products per forward product).
double layer_flops(const liere::PositionEncoding<float>& pe) {
  const double n = double(kBatch) * kTokens;
  double f = 2 * n * kDim * 3 * kDim                                     // qkv projection
             + 2 * 2.0 * kBatch * kHeads * kTokens * kTokens * kHeadDim  // q̂k̂ᵀ and P·v
             + 2 * n * kDim * kDim;                                      // output projection
  if (pe.rotary()) {
    const int b = pe.config().effective_block();
    const int rotated = pe.rotations(0).first_rotated ? kTokens - 1 : kTokens;
    f += 2 * (2.0 * kBatch * rotated * kHeads * kHeadDim * b);  // q and k: D/b blocks of b×b per token and head
  }
  return f;
}

Result run_encoding(const std::string& enc, const Options& opt) {
  using liere::cpu::linear_backward;
  using liere::cpu::linear_forward;
  const liere::PEConfig cfg = config_of(enc);
  liere::PEGeometry geo;
  geo.layers = 1;
  geo.heads = kHeads;
  geo.head_dim = kHeadDim;
  geo.pos_dim = 2;
  geo.embed_dim = kDim;
  geo.train_grid = {kSide, kSide};
  geo.cls = true;
  liere::PositionEncoding<float> pe(cfg, geo, 1);
  LIERE_ENSURE(pe.tokens() == kTokens,
               "bench_attention: the encoding has " << pe.tokens() << " tokens, expected " << kTokens);

  // Parameters as torch.nn.Linear initialises them (U(−1/√C, 1/√C)), inputs x and C ~ N(0, 1).
  const std::int64_t n = std::int64_t(kBatch) * kTokens;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uni(-1.0f / std::sqrt(float(kDim)), 1.0f / std::sqrt(float(kDim)));
  auto fill = [&](std::vector<float>& v, auto& dist) {
    for (float& e : v) e = dist(rng);
  };
  std::vector<float> w_qkv(3 * kDim * kDim), b_qkv(3 * kDim), w_proj(kDim * kDim), b_proj(kDim);
  fill(w_qkv, uni);
  fill(b_qkv, uni);
  fill(w_proj, uni);
  fill(b_proj, uni);
  std::vector<float> x(n * kDim), c(n * kDim);  // (B, T, C)
  fill(x, normal);
  fill(c, normal);
  // Activations and gradients.
  std::vector<float> qkv(n * 3 * kDim);   // (B, T, 3, H, D)
  std::vector<float> o(n * kDim);         // (B, T, H, D) attention output
  std::vector<float> y(n * kDim);         // (B, T, C)
  std::vector<float> dqkv(n * 3 * kDim);  // (B, T, 3, H, D)
  std::vector<float> d_o(n * kDim);       // (B, T, H, D)
  std::vector<float> dx(n * kDim);        // (B, T, C)
  std::vector<float> dw_qkv(w_qkv.size()), db_qkv(b_qkv.size()), dw_proj(w_proj.size()), db_proj(b_proj.size());
  liere::AttentionCache<float> cache;
  const liere::AttentionShape shape{kBatch, kTokens, kHeads, kHeadDim};
  const std::int64_t ld = 3 * kDim;

  std::vector<liere::HeadRotationGrad<float>> drot;
  // The timed work as named stages: the forward is stages [0, kForwardStages), fwd+bwd all of them.
  const std::vector<std::pair<const char*, std::function<void()>>> stages = {
      {"pe.prepare", [&] { pe.prepare(); }},
      {"qkv linear",
       [&] { linear_forward<float>(x.data(), w_qkv.data(), b_qkv.data(), qkv.data(), n, kDim, 3 * kDim); }},
      {"attention fwd",
       [&] {
         liere::attention_forward<float>(shape, qkv.data(), qkv.data() + kDim, qkv.data() + 2 * kDim, ld,
                                         pe.rotations(0), {}, o.data(), cache);
       }},
      {"proj linear", [&] { linear_forward<float>(o.data(), w_proj.data(), b_proj.data(), y.data(), n, kDim, kDim); }},
      {"zero grads",
       [&] {
         std::fill(dw_qkv.begin(), dw_qkv.end(), 0.0f);
         std::fill(db_qkv.begin(), db_qkv.end(), 0.0f);
         std::fill(dw_proj.begin(), dw_proj.end(), 0.0f);
         std::fill(db_proj.begin(), db_proj.end(), 0.0f);
         pe.zero_grad();
    // attention_backward accumulates into dqkv (19 MiB): zeroed by all threads, as torch fills in parallel
#pragma omp parallel for schedule(static)
         for (std::int64_t r = 0; r < n; ++r) std::fill_n(dqkv.data() + r * 3 * kDim, 3 * kDim, 0.0f);
       }},
      {"proj backward",
       [&] {
         linear_backward<float>(o.data(), w_proj.data(), c.data(), d_o.data(), dw_proj.data(), db_proj.data(), n, kDim,
                                kDim, /*overwrite_dx=*/true);
       }},
      {"attention bwd",
       [&] {
         drot = pe.rotation_grads(0);
         liere::attention_backward<float>(shape, qkv.data(), qkv.data() + kDim, qkv.data() + 2 * kDim, ld,
                                          pe.rotations(0), {}, d_o.data(), cache, dqkv.data(), dqkv.data() + kDim,
                                          dqkv.data() + 2 * kDim, pe.rotary() ? &drot : nullptr);
       }},
      {"qkv backward",
       [&] {
         linear_backward<float>(x.data(), w_qkv.data(), dqkv.data(), dx.data(), dw_qkv.data(), db_qkv.data(), n, kDim,
                                3 * kDim, /*overwrite_dx=*/true);
       }},
      {"pe.backward", [&] { pe.backward(); }},
  };
  constexpr std::size_t kForwardStages = 4;
  auto forward = [&] {
    for (std::size_t i = 0; i < kForwardStages; ++i) stages[i].second();
  };
  auto forward_backward = [&] {
    for (const auto& st : stages) st.second();
  };

  Result r;
  r.fwd = liere::bench::time_ms(forward, opt.reps, opt.warmup);
  r.fwdbwd = liere::bench::time_ms(forward_backward, opt.reps, opt.warmup);
  if (opt.profile) {  // each stage timed on its own inside full fwd+bwd passes
    std::vector<std::vector<double>> t(stages.size());
    for (int rep = 0; rep < opt.reps; ++rep)
      for (std::size_t i = 0; i < stages.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        stages[i].second();
        t[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    for (std::size_t i = 0; i < stages.size(); ++i) {
      std::sort(t[i].begin(), t[i].end());
      r.stages.emplace_back(stages[i].first, t[i][t[i].size() / 2]);
    }
  }
  liere::detail::product_flops = 0;
  forward();
  r.table_flops_fwd = double(liere::detail::product_flops.load());
  liere::detail::product_flops = 0;
  forward_backward();
  r.table_flops_fwdbwd = double(liere::detail::product_flops.load());
  const double lf = layer_flops(pe);
  r.flops_fwd = lf + r.table_flops_fwd;
  r.flops_fwdbwd = 3 * lf + r.table_flops_fwdbwd;
  r.enc_params = pe.num_params();
  for (float v : dx) r.checksum += double(v);
  for (float v : pe.grads()) r.checksum += double(v);
  LIERE_ENSURE(std::isfinite(r.checksum), "bench_attention: non-finite gradients for " << enc);
  return r;
}

liere::bench::JsonLine json_of(const std::string& enc, const Result& r, const Options& opt) {
  liere::bench::JsonLine j;
  j.add("bench", "attention_layer")
      .add("impl", "liere")
      .add("enc", enc)
      .add("B", kBatch)
      .add("T", kTokens)
      .add("dim", kDim)
      .add("heads", kHeads)
      .add("fwd_ms", r.fwd.median_ms)
      .add("fwd_min_ms", r.fwd.min_ms)
      .add("fwdbwd_ms", r.fwdbwd.median_ms)
      .add("fwdbwd_min_ms", r.fwdbwd.min_ms)
      .add("flops_fwd", r.flops_fwd)
      .add("flops_fwdbwd", r.flops_fwdbwd)
      .add("table_flops_fwdbwd", r.table_flops_fwdbwd)
      .add("gflops_fwd", r.flops_fwd / (r.fwd.median_ms * 1e6))
      .add("gflops_fwdbwd", r.flops_fwdbwd / (r.fwdbwd.median_ms * 1e6))
      .add("enc_params", double(r.enc_params))
      .add("checksum", r.checksum)
      .add("threads", liere::bench::threads())
      .add("peak_rss_mib", liere::bench::peak_rss_mib())
      .add("reps", opt.reps)
      .add("warmup", opt.warmup)
      .add("gemm", liere::cpu::gemm_backend_name());
  if (opt.sgemm > 0) j.add("sgemm_gflops", opt.sgemm);
  for (const auto& [name, ms] : r.stages) {
    std::string key = "stage_" + name + "_ms";
    std::replace_if(
        key.begin(), key.end(), [](char ch) { return ch == ' ' || ch == '.'; }, '_');
    j.add(key, ms);
  }
  return j;
}

// Runs this program again for one encoding; returns its JSON line ("" on failure).
std::string run_child(const char* self, const std::string& enc, const Options& opt) {
  char tmpl[] = "/tmp/bench_attention_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return "";
  close(fd);
  std::vector<std::string> args = {self,
                                   "--enc",
                                   enc,
                                   "--reps",
                                   std::to_string(opt.reps),
                                   "--warmup",
                                   std::to_string(opt.warmup),
                                   "--_child",
                                   tmpl,
                                   "--_sgemm",
                                   std::to_string(opt.sgemm)};
  if (opt.threads > 0) args.insert(args.end(), {"--threads", std::to_string(opt.threads)});
  if (opt.profile) args.push_back("--profile");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    std::perror("bench_attention: execv");
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::string line;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    std::getline(std::ifstream(tmpl), line);
  else
    std::fprintf(stderr, "bench_attention: the child for --enc %s failed\n", enc.c_str());
  std::remove(tmpl);
  return line;
}

// A number from a flat JSON line written by JsonLine.
double json_number(const std::string& line, const std::string& key) {
  const auto p = line.find("\"" + key + "\":");
  return p == std::string::npos ? 0.0 : std::atof(line.c_str() + p + key.size() + 3);
}

// A child process (--_child): the one encoding, its JSON line appended to the parent's file.
int run_as_child(const Options& opt) {
  LIERE_ENSURE(opt.encodings.size() == 1, "internal --_child runs one encoding");
  const Result r = run_encoding(opt.encodings[0], opt);
  std::ofstream(opt.child, std::ios::app) << json_of(opt.encodings[0], r, opt).str() << '\n';
  return 0;
}

void print_header(const Options& opt) {
  std::printf("== attention layer + PE (B=%d, T=%d, dim %d, %d heads of %d), liere, threads %d, GEMM %s", kBatch,
              kTokens, kDim, kHeads, kHeadDim, liere::bench::threads(), liere::cpu::gemm_backend_name());
  if (opt.sgemm > 0) std::printf(", sgemm %.1f GFLOP/s", opt.sgemm);
  std::printf("\n   reps=%d, warmup=%d; median [min] ms; float32; peak RSS %s\n", opt.reps, opt.warmup,
              opt.no_isolate ? "of the process so far (--no-isolate)" : "per encoding");
  std::printf("  %-12s %18s %18s %10s %10s %9s %9s\n", "encoding", "fwd ms", "fwd+bwd ms", "GF/s fwd", "GF/s f+b",
              "PE params", "RSS MiB");
}

// The table row of an encoding from its JSON line (and, with --profile, its stages).
void print_row(const std::string& enc, const std::string& line, const Options& opt) {
  char fwd[64], fb[64];
  std::snprintf(fwd, sizeof fwd, "%.1f [%.1f]", json_number(line, "fwd_ms"), json_number(line, "fwd_min_ms"));
  std::snprintf(fb, sizeof fb, "%.1f [%.1f]", json_number(line, "fwdbwd_ms"), json_number(line, "fwdbwd_min_ms"));
  std::printf("  %-12s %18s %18s %10.1f %10.1f %9.0f %9.0f\n", enc.c_str(), fwd, fb, json_number(line, "gflops_fwd"),
              json_number(line, "gflops_fwdbwd"), json_number(line, "enc_params"), json_number(line, "peak_rss_mib"));
  if (opt.profile) {
    std::printf("  %-12s", "");
    for (std::size_t p = line.find("\"stage_"); p != std::string::npos; p = line.find("\"stage_", p + 1)) {
      const std::size_t colon = line.find("\":", p);
      const std::string key = line.substr(p + 7, colon - p - 7 - 3);  // between "stage_ and _ms
      std::printf(" %s %.1f", key.c_str(), std::atof(line.c_str() + colon + 2));
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  return liere::app::run_main("bench_attention", [&] {
    Options opt;
    if (!parse_flags(argc, argv, opt)) return 0;
    liere::bench::set_threads(opt.threads);
    if (!opt.child.empty()) return run_as_child(opt);

    if (!opt.skip_sgemm) opt.sgemm = liere::bench::measure_sgemm_gflops();
    print_header(opt);
    for (const auto& enc : opt.encodings) {
      // By default each encoding in a child process (this program again), so that its peak RSS is its own.
      const std::string line =
          opt.no_isolate ? json_of(enc, run_encoding(enc, opt), opt).str() : run_child(argv[0], enc, opt);
      if (line.empty()) continue;
      print_row(enc, line, opt);
      if (!opt.json.empty()) std::ofstream(opt.json, std::ios::app) << line << '\n';
    }
    return 0;
  });
}
