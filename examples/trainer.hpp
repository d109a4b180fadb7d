// examples/trainer.hpp — what train_cifar and train_arrows share: flags, the training loop, evaluation
// with a bootstrap CI, checkpoints, metrics, summaries and the speed benchmark. The programs only say
// where the data come from.
//
// Determinism: the data of step s of epoch e depend only on (seed, e, s) and dropout draws from a generator
// seeded by (seed, global step), so training N epochs in one go, or in pieces with --save/--resume at
// epoch boundaries, gives the same weights bit for bit with the same thread count.
#pragma once

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <liere/nn/engine.hpp>
#include <liere/train/bootstrap.hpp>
#include <liere/train/metrics.hpp>
#include <liere/train/progress.hpp>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace liere::app {

// ---- flags --------------------------------------------------------------------------------------------
struct UsageError : Error {
  using Error::Error;
};

// `--name value` or `--name=value`; switches take no value. Position-encoding flags go to a PEConfig.
class Flags {
 public:
  Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  void section(const std::string& title) { help_ << "\n" << title << ":\n"; }
  void add(const std::string& name, int* v, const std::string& help) { opt(name, "N", help, *v, [v](const std::string& s) { *v = to_int(s); }); }
  void add(const std::string& name, std::int64_t* v, const std::string& help) {
    opt(name, "N", help, *v, [v](const std::string& s) { *v = to_int(s); });
  }
  void add(const std::string& name, double* v, const std::string& help) {
    opt(name, "X", help, *v, [v](const std::string& s) { *v = to_double(s); });
  }
  void add(const std::string& name, std::string* v, const std::string& help, const std::string& metavar = "S") {
    opt(name, metavar, help, v->empty() ? std::string("none") : *v, [v](const std::string& s) { *v = s; });
  }
  // A comma-separated list of integers, e.g. --eval-res 24,32,48.
  void add(const std::string& name, std::vector<int>* v, const std::string& help) {
    std::string d;
    for (std::size_t i = 0; i < v->size(); ++i) d += (i ? "," : "") + std::to_string((*v)[i]);
    opt(name, "LIST", help, d.empty() ? std::string("none") : d, [v](const std::string& s) {
      v->clear();
      std::stringstream ss(s);
      std::string item;
      while (std::getline(ss, item, ',')) v->push_back(to_int(item));
    });
  }
  void add_switch(const std::string& name, bool* v, const std::string& help) {
    switches_[name] = v;
    help_ << "  --" << std::left << std::setw(19) << name << " " << help << "\n";
  }
  void add_pe(PEConfig* pe) {
    pe_ = pe;
    help_ << "\nPosition encoding:\n" << PEConfig::flags_help();
  }

  std::string usage() const {
    return "usage: " + program_ + " [options]\n" + summary_ + "\n" + help_.str() + "\n  --help               this text\n";
  }

  // Returns false after printing the usage for --help.
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::cout << usage();
        return false;
      }
      if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq), has_value = true;
      if (auto s = switches_.find(name); s != switches_.end()) {
        if (has_value) throw UsageError("--" + name + " takes no value");
        *s->second = true;
        continue;
      }
      if (!has_value) {
        if (i + 1 >= argc) throw UsageError(known(name) ? "--" + name + " needs a value" : "unknown option --" + name);
        value = argv[++i];
      }
      if (auto o = setters_.find(name); o != setters_.end()) {
        try {
          o->second(value);
        } catch (const Error& e) {
          throw UsageError("--" + name + " " + value + ": " + e.what());
        }
        continue;
      }
      if (pe_) {
        bool known = false;
        try {
          known = pe_->set(name, value);
        } catch (const Error& e) {
          throw UsageError(e.what());
        }
        if (known) continue;
      }
      throw UsageError("unknown option --" + name);
    }
    return true;
  }

  // Whether --name is an option of this program (a PE flag is known when a scratch PEConfig takes or rejects it).
  bool known(const std::string& name) const {
    if (setters_.count(name)) return true;
    if (!pe_) return false;
    try {
      PEConfig scratch;
      return scratch.set(name, "");
    } catch (const Error&) {
      return true;
    }
  }

  static long long to_int(const std::string& s) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    LIERE_ENSURE(!s.empty() && end && *end == '\0', "expected an integer, got '" << s << "'");
    return v;
  }
  static double to_double(const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    LIERE_ENSURE(!s.empty() && end && *end == '\0', "expected a number, got '" << s << "'");
    return v;
  }

 private:
  template <class T>
  void opt(const std::string& name, const std::string& metavar, const std::string& help, const T& def,
           std::function<void(const std::string&)> set) {
    setters_[name] = std::move(set);
    std::ostringstream d;
    d << def;
    help_ << "  --" << std::left << std::setw(19) << (name + " " + metavar) << " " << help << "  [" << d.str() << "]\n";
  }
  std::string program_, summary_;
  std::ostringstream help_;
  std::map<std::string, std::function<void(const std::string&)>> setters_;
  std::map<std::string, bool*> switches_;
  PEConfig* pe_ = nullptr;
};

// Runs main's body: usage errors exit 2 with the message and a pointer to --help, other errors exit 1.
template <class F>
int run_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": " << e.what() << "\n(run " << program << " --help for the options)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 1;
  }
}

// ---- options shared by the trainers ---------------------------------------------------------------------
struct TrainOptions {
  int epochs = 10;
  int batch = 128;
  double lr = 1e-3;
  double wd = 0.05;
  int warmup = 0;  // epochs of linear warmup
  double clip = 1.0;
  std::string optimizer = "adamw";
  std::int64_t seed = 0;
  int threads = 2;
  int eval_batch = 250;
  std::string save, resume, init_from, metrics, summary_json, predictions;
  int bench_steps = 0;
  int log_every = 0;  // steps between step-level metrics rows (0: per epoch only)
  bool dry_run = false;
  std::string model = "tiny";

  void add_flags(Flags& f) {
    f.section("Training");
    f.add("epochs", &epochs, "epochs");
    f.add("batch", &batch, "batch size");
    f.add("lr", &lr, "peak learning rate (cosine schedule to 0)");
    f.add("wd", &wd, "weight decay (not on biases, norms, tokens, position encodings)");
    f.add("warmup", &warmup, "epochs of linear warmup");
    f.add("clip", &clip, "gradient-norm clipping (0: off)");
    f.add("optimizer", &optimizer, "adamw or adam (L2)");
    f.add("seed", &seed, "seed of the model, the data order and augmentation");
    f.add("threads", &threads, "OpenMP threads");
    f.add("eval-batch", &eval_batch, "batch size for evaluation");
    f.section("Files");
    f.add("save", &save, "checkpoint written atomically after every epoch (safetensors)", "PATH");
    f.add("resume", &resume, "continue from a checkpoint of the same model and encoding", "PATH");
    f.add("init-from", &init_from,
          "start from the weights of a checkpoint of the same model and encoding, with a fresh optimizer and schedule "
          "(fine-tuning)", "PATH");
    f.add("metrics", &metrics, "JSON lines, one per epoch", "PATH");
    f.add("log-every", &log_every, "with --metrics: also a row every N steps (step, train loss and accuracy over them)");
    f.add("summary-json", &summary_json, "final results as JSON", "PATH");
    f.add("predictions", &predictions, "per-example test predictions (for compare_runs)", "PATH");
    f.section("Modes");
    f.add("bench-steps", &bench_steps, "time N training steps on random data, print train_img_per_s=X, exit");
    f.add_switch("dry-run", &dry_run, "print pe_params=N total_params=M gflops_per_image=G and exit");
  }
  void validate() const {
    LIERE_ENSURE(epochs >= 1 && batch >= 1 && eval_batch >= 1 && threads >= 1, "epochs, batch, eval-batch and threads must be >= 1");
    LIERE_ENSURE(log_every >= 0, "--log-every must be >= 0");
    LIERE_ENSURE(lr > 0 && wd >= 0 && warmup >= 0 && warmup < epochs + 1 && clip >= 0,
                 "bad optimisation settings lr=" << lr << " wd=" << wd << " warmup=" << warmup << " clip=" << clip);
    LIERE_ENSURE(optimizer == "adamw" || optimizer == "adam", "--optimizer " << optimizer << ": allowed: adamw, adam");
    LIERE_ENSURE(resume.empty() || init_from.empty(),
                 "--resume and --init-from exclude each other: --resume continues a run (its optimizer state and epoch), "
                 "--init-from starts a new one from a checkpoint's weights");
  }
};

// ---- data ---------------------------------------------------------------------------------------------
// The training data: fill(epoch, step, batch, x, y) writes `batch` normalised inputs (C, …) and labels.
struct TrainData {
  std::int64_t steps_per_epoch = 0;
  std::vector<int> size;  // spatial size of the inputs; empty: the model's image size
  std::function<void(int epoch, std::int64_t step, int batch, float* x, int* y)> fill;
  // Optional, for multi-resolution training: the spatial size of the batch of (epoch, step), which fill
  // then writes; `size` is not used.
  std::function<std::vector<int>(int epoch, std::int64_t step)> size_at;
};

// An evaluation set: n examples of shape (C, size...), fill(first, count, x) writes normalised inputs.
struct EvalData {
  std::string name = "test";
  int n = 0;
  std::vector<int> size;  // spatial size (H, W) or (frames, H, W)
  std::vector<int> labels;
  std::function<void(int first, int count, float* x)> fill;
  // Optional: shuffle the patches of every image with this patch size (paper Table 5).
  int shuffle_patch = 0;
  std::uint64_t shuffle_seed = 0;
};

// Moves the p×p patches of a (C, H, W) image to a random permutation of the patch grid.
inline void shuffle_patches(float* img, int C, int H, int W, int p, std::mt19937_64& rng) {
  const int gh = H / p, gw = W / p, n = gh * gw;
  std::vector<int> perm(n);
  for (int i = 0; i < n; ++i) perm[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(perm[i], perm[std::size_t(rng() % std::uint64_t(i + 1))]);
  std::vector<float> src(img, img + std::size_t(C) * H * W);
  for (int c = 0; c < C; ++c)
    for (int k = 0; k < n; ++k) {
      const int si = perm[k] / gw, sj = perm[k] % gw, di = k / gw, dj = k % gw;
      for (int y = 0; y < p; ++y)
        for (int x = 0; x < p; ++x)
          img[(std::size_t(c) * H + di * p + y) * W + dj * p + x] = src[(std::size_t(c) * H + si * p + y) * W + sj * p + x];
    }
}

// Bilinear resize of a (C, H, W) float image (align_corners = False, as torch.nn.functional.interpolate).
inline void resize_bilinear(const float* src, int C, int H, int W, float* dst, int H2, int W2) {
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < H2; ++y) {
      const double sy = std::clamp((y + 0.5) * H / H2 - 0.5, 0.0, double(H - 1));
      const int y0 = int(sy), y1 = std::min(y0 + 1, H - 1);
      const double fy = sy - y0;
      for (int x = 0; x < W2; ++x) {
        const double sx = std::clamp((x + 0.5) * W / W2 - 0.5, 0.0, double(W - 1));
        const int x0 = int(sx), x1 = std::min(x0 + 1, W - 1);
        const double fx = sx - x0;
        const float* s = src + std::size_t(c) * H * W;
        const double v = (1 - fy) * ((1 - fx) * s[y0 * W + x0] + fx * s[y0 * W + x1]) +
                         fy * ((1 - fx) * s[y1 * W + x0] + fx * s[y1 * W + x1]);
        dst[(std::size_t(c) * H2 + y) * W2 + x] = float(v);
      }
    }
}

struct EvalResult {
  std::string name;
  double acc = 0, loss = 0;
  train::BootstrapCI ci;
  std::vector<int> labels, preds;
  std::vector<std::uint8_t> correct;
};

inline double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

inline std::string fmt_pct(double x, int decimals = 2) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(decimals) << 100 * x;
  return o.str();
}

// ---- the trainer --------------------------------------------------------------------------------------
class Trainer {
 public:
  Trainer(const nn::VitConfig& model_cfg, const TrainOptions& opt, std::string data_name)
      : cfg_(model_cfg), opt_(opt), data_name_(std::move(data_name)), model_(params_, cfg_, std::uint64_t(opt.seed)) {
    omp_set_num_threads(opt_.threads);
    optim::AdamConfig ac;
    ac.lr = opt_.lr;
    ac.weight_decay = opt_.wd;
    ac.decoupled = opt_.optimizer == "adamw";
    auto groups = optim::decay_groups(params_.all(), opt_.wd, [](const std::string& n, const Shape& s) {
      return optim::default_no_decay(n, s, {"pe."});
    });
    adam_ = std::make_unique<optim::Adam>(groups, ac);
  }

  nn::Vit& model() { return model_; }
  nn::Params& params() { return params_; }
  std::int64_t pe_params() const { return model_.pe().num_params(); }
  std::int64_t total_params() const { return params_.numel(); }
  const nn::VitConfig& config() const { return cfg_; }

  std::string dry_run_line() const {
    std::ostringstream o;
    o << "pe_params=" << pe_params() << " total_params=" << total_params() << " gflops_per_image=" << std::setprecision(4)
      << cfg_.gflops_per_image();
    return o.str();
  }

  // What a checkpoint must match to be resumed.
  nn::Metadata identity() const {
    return {{"model", cfg_.describe()}, {"pe", cfg_.pe.describe()}, {"data", data_name_}};
  }

  // Times `steps` training steps (after 2 warm-up steps) on random inputs; prints and returns img/s.
  double bench(int steps) {
    const int B = opt_.batch;
    Shape xs{B, cfg_.channels};
    for (int d : cfg_.image) xs.push_back(d);
    Tensor x(xs);
    std::mt19937_64 g(1);
    std::normal_distribution<float> n(0, 1);
    for (Index i = 0; i < x.numel(); ++i) x.data()[i] = n(g);
    std::vector<int> y(B);
    for (int i = 0; i < B; ++i) y[i] = int(g() % cfg_.classes);
    auto step = [&] {
      Tape tape(1);
      Var xv(x);
      auto loss = ops::cross_entropy(tape, model_.forward(tape, xv), y);
      tape.backward(loss);
      if (opt_.clip > 0) optim::clip_grad_norm(params_.all(), opt_.clip);
      adam_->step();
      params_.zero_grad();
    };
    for (int i = 0; i < 2; ++i) step();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ips = double(steps) * B / s;
    const double gflops = 3.0 * cfg_.gflops_per_image() * ips;  // forward + backward ≈ 3 × forward
    std::cout << "model: " << cfg_.describe() << "\npe: " << cfg_.pe.describe() << "\nthreads=" << opt_.threads
              << " batch=" << B << " steps=" << steps << " step_ms=" << std::fixed << std::setprecision(1)
              << 1000 * s / steps << " achieved_gflops=" << gflops << " peak_rss_mib=" << peak_rss_mib()
              << "\ntrain_img_per_s=" << std::setprecision(2) << ips << "\n";
    return ips;
  }

  // Evaluates on `data` (no gradients, no dropout).
  EvalResult evaluate(const EvalData& data, bool progress = false) {
    EvalResult r;
    r.name = data.name;
    Tape tape;
    auto _ = tape.no_grad();
    tape.set_training(false);
    const int C = cfg_.channels, B = opt_.eval_batch;
    std::size_t per = C;
    for (int d : data.size) per *= d;
    std::mt19937_64 shuffle_rng(data.shuffle_seed);
    double loss_sum = 0;
    std::unique_ptr<train::ProgressBar> bar;
    const int batches = (data.n + B - 1) / B;
    if (progress) bar = std::make_unique<train::ProgressBar>(batches, "eval " + data.name);
    for (int first = 0, k = 0; first < data.n; first += B, ++k) {
      const int n = std::min(B, data.n - first);
      Shape xs{n, C};
      for (int d : data.size) xs.push_back(d);
      Tensor x(xs);
      data.fill(first, n, x.data());
      if (data.shuffle_patch > 0)
        for (int i = 0; i < n; ++i) shuffle_patches(x.data() + i * per, C, data.size[0], data.size[1], data.shuffle_patch, shuffle_rng);
      std::vector<int> y(data.labels.begin() + first, data.labels.begin() + first + n);
      Var xv(x);
      Var logits = model_.forward(tape, xv);
      std::vector<float> rows;
      ops::cross_entropy(tape, logits, y, 0.0, &rows);
      for (int i = 0; i < n; ++i) {
        loss_sum += rows[i];
        const float* l = logits.data() + std::size_t(i) * cfg_.classes;
        const int pred = int(std::max_element(l, l + cfg_.classes) - l);
        r.labels.push_back(y[i]);
        r.preds.push_back(pred);
        r.correct.push_back(pred == y[i]);
      }
      if (bar) bar->add_items(n), bar->update(k + 1);
    }
    if (bar) bar->finish();
    r.loss = loss_sum / std::max(1, data.n);
    r.ci = train::bootstrap_ci(r.correct, 1000, 0.95, 0);
    r.acc = r.ci.mean;
    return r;
  }

  // --init-from: the checkpoint's weights into the model (no optimizer state, no epoch). The same model and
  // encoding, up to the resolution policy: it only says how positions follow the image size, and fine-tuning
  // at another resolution may change it (train_arrows --model-res). fit() calls it before the first step.
  void load_init_weights() {
    const nn::SafetensorsFile file = nn::load_safetensors(opt_.init_from);
    const auto pe = file.metadata.find("pe");
    const std::regex policy(" positions=[a-z]+");
    LIERE_ENSURE(pe != file.metadata.end() && std::regex_replace(pe->second, policy, "") ==
                                                  std::regex_replace(cfg_.pe.describe(), policy, ""),
                 "checkpoint pe '" << (pe == file.metadata.end() ? std::string("(none)") : pe->second)
                                   << "' != model pe '" << cfg_.pe.describe() << "' (" << opt_.init_from
                                   << "; only positions= may differ)");
    nn::LoadOptions lo;
    lo.expect = identity();
    lo.expect.erase("pe");
    lo.load_optimizer = false;
    const auto meta = nn::load_checkpoint(file, params_, nullptr, lo);
    const auto ep = meta.find("epoch");
    std::cerr << "weights from " << opt_.init_from << " (after epoch " << (ep == meta.end() ? "?" : ep->second)
              << " of that run), fresh optimizer and schedule\n";
  }

  // Trains opt.epochs epochs (resuming when asked), evaluating on `test` after each epoch when
  // eval_every_epoch, always after the last. Returns the final evaluation.
  EvalResult fit(const TrainData& data, const EvalData& test, bool eval_every_epoch = true) {
    const std::int64_t spe = data.steps_per_epoch;
    LIERE_ENSURE(spe >= 1, "no training steps: the data set is smaller than one batch of " << opt_.batch);
    optim::CosineSchedule sched;
    sched.base_lr = opt_.lr;
    sched.total = std::int64_t(opt_.epochs) * spe;
    sched.warmup = std::int64_t(opt_.warmup) * spe;
    int start_epoch = 0;
    if (!opt_.resume.empty()) {
      nn::LoadOptions lo;
      lo.expect = identity();
      const auto meta = nn::load_checkpoint(opt_.resume, params_, adam_.get(), lo);
      start_epoch = std::stoi(meta.at("epoch"));
      LIERE_ENSURE(start_epoch <= opt_.epochs, "--resume " << opt_.resume << ": the checkpoint is after epoch "
                                                           << start_epoch << ", more than --epochs " << opt_.epochs);
      std::cerr << "resumed " << opt_.resume << " after epoch " << start_epoch << "\n";
    }
    if (!opt_.init_from.empty()) load_init_weights();
    std::unique_ptr<train::MetricsWriter> metrics;
    if (!opt_.metrics.empty())
      metrics = std::make_unique<train::MetricsWriter>(
          opt_.metrics, start_epoch > 0 ? train::MetricsWriter::Mode::append : train::MetricsWriter::Mode::truncate);

    const int B = opt_.batch;
    auto batch_shape = [&](int epoch, std::int64_t s) {
      Shape xs{B, cfg_.channels};
      for (int d : data.size_at ? data.size_at(epoch, s) : data.size.empty() ? cfg_.image : data.size) xs.push_back(d);
      return xs;
    };
    Tensor x(batch_shape(start_epoch, 0));
    std::vector<int> y(B);
    EvalResult last;
    bool evaluated_last = false;
    for (int epoch = start_epoch; epoch < opt_.epochs; ++epoch) {
      train::ProgressBar bar(spe, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(opt_.epochs));
      double loss_sum = 0, window_loss = 0;
      std::int64_t correct = 0, seen = 0, window_correct = 0, window_seen = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t s = 0; s < spe; ++s) {
        const std::int64_t global = std::int64_t(epoch) * spe + s;
        if (data.size_at) {
          const Shape xs = batch_shape(epoch, s);
          if (xs != x.shape()) x = Tensor(xs);
        }
        data.fill(epoch, s, B, x.data(), y.data());
        Tape tape(mix_seed(std::uint64_t(opt_.seed), 0xD209, std::uint64_t(global)));
        Var xv(x);
        Var logits = model_.forward(tape, xv);
        Var loss = ops::cross_entropy(tape, logits, y);
        const double l = loss.item();
        if (!std::isfinite(l)) {
          tape.clear();
          bar.finish();
          LIERE_ENSURE(false, "the loss is " << (std::isnan(l) ? "NaN" : "infinite") << " at epoch " << epoch + 1 << ", step " << s + 1
                                             << "; training stopped"
                                             << (opt_.save.empty() ? std::string()
                                                                   : "; the last good checkpoint '" + opt_.save +
                                                                         "' is intact")
                                             << " (try a lower --lr or --clip)");
        }
        tape.backward(loss);
        if (opt_.clip > 0) optim::clip_grad_norm(params_.all(), opt_.clip);
        adam_->set_lr(sched.at_step(global));
        adam_->step();
        params_.zero_grad();
        std::int64_t step_correct = 0;
        for (int i = 0; i < B; ++i) {
          const float* r = logits.data() + std::size_t(i) * cfg_.classes;
          step_correct += int(std::max_element(r, r + cfg_.classes) - r) == y[i];
        }
        loss_sum += l * B;
        correct += step_correct;
        seen += B;
        window_loss += l * B, window_correct += step_correct, window_seen += B;
        if (metrics && opt_.log_every > 0 && (global + 1) % opt_.log_every == 0) {
          metrics->write({{"step", global + 1},
                          {"epoch_progress", double(global + 1) / double(spe)},
                          {"pe", cfg_.pe.label()},
                          {"train_loss", window_loss / window_seen},
                          {"train_acc", double(window_correct) / window_seen}});
          window_loss = 0, window_correct = 0, window_seen = 0;
        }
        bar.add_items(B);
        bar.update(s + 1, {{"loss", loss_sum / seen}, {"acc", double(correct) / seen}, {"lr", sched.at_step(global)}});
      }
      bar.finish();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      train_seconds_ += secs;
      train_images_ += seen;
      const bool final_epoch = epoch + 1 == opt_.epochs;
      train::Metrics row{{"epoch", epoch + 1},
                         {"pe", cfg_.pe.label()},
                         {"train_loss", loss_sum / seen},
                         {"train_acc", double(correct) / seen},
                         {"lr", sched.at_step(std::int64_t(epoch + 1) * spe - 1)},
                         {"train_img_per_s", seen / secs},
                         {"seconds", secs}};
      if (eval_every_epoch || final_epoch) {
        last = evaluate(test);
        evaluated_last = final_epoch;
        row.emplace_back(test.name + "_acc", last.acc);
        row.emplace_back(test.name + "_loss", last.loss);
        std::cerr << "epoch " << epoch + 1 << ": train loss " << std::setprecision(4) << loss_sum / seen << " acc "
                  << fmt_pct(double(correct) / seen) << "% | " << test.name << " loss " << last.loss << " acc "
                  << fmt_pct(last.acc) << "% [" << fmt_pct(last.ci.lo) << ", " << fmt_pct(last.ci.hi) << "]\n";
      }
      if (metrics) metrics->write(row);
      if (!opt_.save.empty()) {
        nn::Metadata meta = identity();
        meta["epoch"] = std::to_string(epoch + 1);
        meta["seed"] = std::to_string(opt_.seed);
        nn::save_checkpoint(opt_.save, params_, adam_.get(), meta);
      }
    }
    if (!evaluated_last) last = evaluate(test);
    return last;
  }

  double train_img_per_s() const { return train_seconds_ > 0 ? double(train_images_) / train_seconds_ : 0.0; }
  const TrainOptions& options() const { return opt_; }

 private:
  nn::VitConfig cfg_;
  TrainOptions opt_;
  std::string data_name_;
  nn::Params params_;
  nn::Vit model_;
  std::unique_ptr<optim::Adam> adam_;
  double train_seconds_ = 0;
  std::int64_t train_images_ = 0;
};

// The summary fields every trainer writes.
inline train::Metrics summary_fields(const Trainer& t, const EvalResult& r) {
  return {{"test_acc", r.acc},
          {"test_acc_ci95", std::vector<double>{r.ci.lo, r.ci.hi}},
          {"test_loss", r.loss},
          {"test_n", int(r.correct.size())},
          {"pe", t.config().pe.label()},
          {"pe_config", t.config().pe.describe()},
          {"model", t.config().describe()},
          {"pe_params", t.pe_params()},
          {"total_params", t.total_params()},
          {"train_img_per_s", t.train_img_per_s()},
          {"epochs", t.options().epochs},
          {"seed", t.options().seed}};
}

inline void print_result(const EvalResult& r) {
  std::cout << r.name << " top-1 accuracy: " << fmt_pct(r.acc) << "% (95% bootstrap CI " << fmt_pct(r.ci.lo) << " – "
            << fmt_pct(r.ci.hi) << ", 1000 resamples, n=" << r.correct.size() << "), loss " << std::setprecision(4)
            << r.loss << "\n";
}

}  // namespace liere::app
