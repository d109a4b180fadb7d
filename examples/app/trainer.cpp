// examples/app/trainer.cpp — the training loop, evaluation, checkpoints and the speed benchmark.
#include <app/trainer.hpp>

#include <data_tools/image_ops.hpp>
#include <liere/backend/cpu/gemm.hpp>

#ifdef LIERE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <liere/backend/cuda/memory.hpp>
#endif

#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>
#include <iomanip>
#include <iostream>
#include <limits>
#include <random>
#include <regex>
#include <sstream>

namespace liere::app {

void ModelOptions::add_flags(Flags& f) {
  f.section("Model");
  const bool sized = !model.empty();
  if (sized) f.add("model", &model, model_help);
  if (patch_flag) f.add("patch", &cfg.patch, patch_help);
  if (cfg.tubelet > 0) f.add("tubelet", &cfg.tubelet, "frames per tubelet");
  if (sized) {
    f.add("dim", &dim, "token width (0: from --model)");
    f.add("depth", &depth, "layers (0: from --model)");
    f.add("heads", &heads, "heads, head dim = dim / heads (0: from --model)");
    f.add("mlp", &mlp, "MLP hidden width (0: --model's, or 4 x --dim when --dim is given)");
  } else {
    f.add("dim", &cfg.dim, "token width");
    f.add("depth", &cfg.depth, "layers");
    f.add("heads", &cfg.heads, "heads (head dim = dim / heads; liere64 needs 64)");
    f.add("mlp", &cfg.mlp_hidden, "MLP hidden width");
  }
  f.add("drop", &cfg.drop, "dropout in the MLP");
  f.add("pool", &pool, "cls (a CLS token, the paper's) or mean (the mean of the patch tokens)");
  f.add_pe(&cfg.pe);
}

nn::VitConfig ModelOptions::config() const {
  nn::VitConfig c = cfg;
  if (!model.empty()) {
    try {
      c.set_size(model);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(e.message());
    }
    if (dim) c.dim = dim;
    if (depth) c.depth = depth;
    if (heads) c.heads = heads;
    if (mlp) c.mlp_hidden = mlp;
    else if (dim) c.mlp_hidden = 4 * c.dim;
  }
  // The model's geometry, as usage errors that name the flags (the model and the encoding would refuse it later,
  // naming neither).
  LIERE_USAGE(pool == "cls" || pool == "mean", "--pool " << pool << ": allowed: cls, mean");
  c.pool = pool == "cls" ? nn::Pool::cls : nn::Pool::mean;
  LIERE_USAGE(c.patch >= 1, "--patch " << c.patch << ": expected an integer >= 1");
  LIERE_USAGE(c.drop >= 0 && c.drop < 1, "--drop " << c.drop << ": expected a probability in [0, 1)");
  LIERE_USAGE(c.dim >= 1 && c.depth >= 1 && c.heads >= 1 && c.mlp_hidden >= 1,
              "the model's sizes must be >= 1: --dim " << c.dim << ", --depth " << c.depth << ", --heads " << c.heads
                                                       << ", --mlp " << c.mlp_hidden);
  LIERE_USAGE(c.dim % c.heads == 0,
              "--dim " << c.dim << " is not a multiple of --heads " << c.heads << " (head dim = dim / heads)");
  const int head = c.dim / c.heads, b = c.pe.effective_block();
  LIERE_USAGE(head >= 2, "--dim " << c.dim << " / --heads " << c.heads << " gives a head dim of " << head
                                  << ": expected at least 2");
  LIERE_USAGE(!c.pe.info().rotary || head % b == 0, "--pe " << c.pe.label() << ": its blocks of " << b
                                                            << " do not divide the head dim " << head << " (--dim "
                                                            << c.dim << " / --heads " << c.heads << ")");
  return c;
}

bool dry_run_or_bench(const nn::VitConfig& cfg, const TrainOptions& opt, const std::string& data_name) {
  if (!opt.dry_run && opt.bench_steps == 0) return false;
  Trainer t(cfg, opt, data_name);
  if (opt.dry_run) std::cout << cfg.describe() << "\n" << cfg.pe.describe() << "\n" << t.dry_run_line() << "\n";
  else t.bench(opt.bench_steps);
  return true;
}

void TrainOptions::root_writes_files() {
  if (!Comm::world().root()) summary_json.clear(), predictions.clear();
}

void TrainOptions::add_flags(Flags& f) {
  f.section("Training");
  constexpr double kMany = 1e9;  // an upper end for counts that have none of their own
  f.add("epochs", &epochs, "epochs (0 with --init-from: evaluate the checkpoint's weights, no training)",
        Range{0, kMany});
  f.add("batch", &batch, "batch size", Range{1, kMany});
  f.add("lr", &lr, "peak learning rate (cosine schedule to 0)");  // > 0: validate()
  f.add("wd", &wd, "weight decay (not on biases, norms, tokens, position encodings)", Range{0, 1e6});
  f.add("warmup", &warmup, "epochs of linear warmup", Range{0, kMany});
  f.add("clip", &clip, "gradient-norm clipping (0: off)", Range{0, 1e30});
  f.add("optimizer", &optimizer, "adamw or adam (L2)");
  f.add("seed", &seed, "seed of the model, the data order and augmentation");
  // An upper end: libgomp crashes or hangs creating tens of thousands of threads (100 000: a segfault).
  f.add("threads", &threads, "OpenMP threads", Range{1, 1024});
  f.add("eval-batch", &eval_batch, "batch size for evaluation", Range{1, kMany});
  f.add("device", &device, "cpu, cuda, or auto (cuda when this build has the CUDA backend and a device is present)");
  f.add("precision", &precision,
        "fp32; tf32 (cuda: matrix products in TF32 on tensor cores, ~1e-3 relative error); bf16 (cpu with "
        "AVX512_BF16 and oneDNN, cuda with compute capability 8.0 or newer: products of activations and gradients on "
        "bf16 operands, fp32 accumulation, weights and statistics; docs/precision.md); fp16 (cuda with compute "
        "capability 7.0 or newer: the same on fp16 operands, with dynamic loss scaling from 65536 unless "
        "--loss-scale says otherwise; not on cpu)");
  f.add_switch("tf32", &tf32, "the same as --precision tf32");
  f.add("loss-scale", &loss_scale,
        "dynamic loss scaling starting from this power of two (0, the default: off, but for --precision fp16, "
        "which starts from 65536): backward on scale·loss, the gradients unscaled, a step whose gradients "
        "overflow skipped and the scale halved, doubled after 2000 finite steps (fp16's mechanism, "
        "optim/loss_scale.hpp; with fp32, tf32 or bf16 it changes nothing but the skipped steps); the scale and the "
        "skipped steps go to --metrics");
  f.add("prefetch", &prefetch,
        "auto, on or off: a loader thread fills step s + 1's batch while step s runs, with --threads OpenMP threads "
        "of its own (auto: on with --device cuda, where the host otherwise fills it while the GPU waits; off on the "
        "CPU, whose threads the step keeps busy). The batches, and so the run, are the same either way. With "
        "OMP_PROC_BIND set the loader inherits the main thread's core");
  f.section("Files");
  f.add("save", &save, "checkpoint written atomically after every epoch (safetensors)", "PATH");
  f.add("resume", &resume, "continue from a checkpoint of the same model and encoding", "PATH");
  f.add("init-from", &init_from,
        "start from the weights of a checkpoint of the same model and encoding, with a fresh optimizer and schedule "
        "(fine-tuning)", "PATH");
  f.add("metrics", &metrics, "JSON lines, one per epoch", "PATH");
  f.add("log-every", &log_every, "with --metrics: also a row every N steps (step, train loss and accuracy over them)",
        Range{0, kMany});
  f.add("summary-json", &summary_json, "final results as JSON", "PATH");
  f.add("predictions", &predictions, "per-example test predictions (for compare_runs)", "PATH");
  f.section("Modes");
  f.add("bench-steps", &bench_steps, "time N training steps on random data, print train_img_per_s=X, exit",
        Range{0, kMany});
  f.add_switch("dry-run", &dry_run, "print pe_params=N total_params=M gflops_per_image=G pe_gflops_per_image=E and exit");
  f.section("Data parallel (mpirun -np N; docs/scaling.md)");
  f.add("comm-timeout", &comm_timeout, "seconds a rank waits for the others in a collective before it ends the job",
        Range{1e-3, 1e9});
  f.add("bucket-mib", &bucket_mib, "size of the gradient all-reduce buckets, MiB", Range{1e-3, 1e6});
  f.add_switch("no-overlap", &no_overlap, "all-reduce the gradients after backward instead of while it runs");
}

namespace {
// The settings that set a run's course (its model is identity()'s), written into its checkpoints beside the epoch.
// --resume with other values is said, not refused: the result is not what one uninterrupted run would give, but
// changing them for a resumed run can be what one wants. --epochs is not among them: training in pieces (--epochs 1
// --save, then --epochs 2 --resume) changes it by design.
std::vector<std::pair<std::string, std::string>> run_settings(const TrainOptions& o) {
  const auto text = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  return {{"seed", std::to_string(o.seed)}, {"batch", std::to_string(o.batch)}, {"lr", text(o.lr)},
          {"wd", text(o.wd)},               {"warmup", std::to_string(o.warmup)}, {"clip", text(o.clip)},
          {"optimizer", o.optimizer}};
}

// LIERE_ONE_WAIT=0 in the environment: train_step reads the loss before the update and the norm before clipping even
// where one wait would do (the same results; for side-by-side timings on a GPU, bench/gpu_run.sh's `onewait`).
bool one_wait_allowed() {
  const char* v = std::getenv("LIERE_ONE_WAIT");
  return !(v && std::string(v) == "0");
}

// Whether this build has the CUDA backend and the machine a device; `why` says what is missing.
bool cuda_usable(std::string* why) {
#ifdef LIERE_WITH_CUDA
  if (cuda::device_count() > 0) return true;
  *why = cuda::device_description() + " on this machine";
  return false;
#else
  *why = "this build has no CUDA backend (configure with -DLIERE_WITH_CUDA=ON or AUTO where nvcc is installed)";
  return false;
#endif
}
}  // namespace

Device TrainOptions::resolved_device() const {
  std::string why;
  if (device == "auto") return cuda_usable(&why) ? Device::cuda : Device::cpu;
  if (device == "cpu") return Device::cpu;
  if (device == "cuda") {
    if (!cuda_usable(&why)) throw UsageError("--device cuda: " + why);
    return Device::cuda;
  }
  throw UsageError("--device " + device + ": allowed: cpu, cuda, auto");
}

Precision TrainOptions::resolved_precision() const {
  Precision p = Precision::fp32;
  try {
    p = parse_precision(precision);
    if (tf32 && p != Precision::tf32 && precision != "fp32")
      throw UsageError("--tf32 and --precision " + precision + " contradict each other (--tf32 is --precision tf32)");
    if (tf32) p = Precision::tf32;
    check_precision(p, resolved_device());
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.message());
  }
  return p;
}

void TrainOptions::validate() const {
  (void)resolved_device();
  (void)resolved_precision();
  // The single values' ranges are the flags' own (add_flags: checked as they are read); here the combinations and what
  // a range cannot say. A bad value is a usage error (exit 2) that names the flag.
  LIERE_USAGE(epochs >= 1 || !init_from.empty(),
              "--epochs 0 evaluates a checkpoint without training: it needs --init-from PATH");
  LIERE_USAGE(lr > 0, "--lr " << lr << ": expected a number > 0");
  LIERE_USAGE(epochs == 0 || warmup < epochs + 1,
              "--warmup " << warmup << ": expected a number of epochs in [0, --epochs + 1) (--epochs " << epochs
                          << ")");
  LIERE_USAGE(optimizer == "adamw" || optimizer == "adam", "--optimizer " << optimizer << ": allowed: adamw, adam");
  LIERE_USAGE(prefetch == "auto" || prefetch == "on" || prefetch == "off",
              "--prefetch " << prefetch << ": allowed: auto, on, off");
  if (loss_scale != 0) {  // a power of two: unscaling is then exact
    int e = 0;
    if (!(loss_scale > 0 && std::frexp(loss_scale, &e) == 0.5))
      throw UsageError((std::ostringstream() << "--loss-scale " << loss_scale
                                             << ": expected 0 (off) or a power of two (e.g. 65536)")
                           .str());
  }
  if (const int n = Comm::world().size(); batch % n != 0)
    throw UsageError("--batch " + std::to_string(batch) + " does not divide among the " + std::to_string(n) +
                     " ranks of this run (mpirun -np " + std::to_string(n) + "): --batch is the global batch and every "
                     "rank takes batch/N samples of each step; use a multiple of " + std::to_string(n));
  // The files written at the end of a run (or of its first epoch): their folders must exist now, not after the
  // training (a run's results were lost that way).
  for (const auto& [flag, path] : {std::pair{"--save", &save}, std::pair{"--metrics", &metrics},
                                   std::pair{"--summary-json", &summary_json},
                                   std::pair{"--predictions", &predictions}})
    check_output_folder(flag, *path);
  LIERE_USAGE(resume.empty() || init_from.empty(),
              "--resume and --init-from exclude each other: --resume continues a run (its optimizer state and epoch), "
              "--init-from starts a new one from a checkpoint's weights");
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

std::string fmt_pct(double x, int decimals) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(decimals) << 100 * x;
  return o.str();
}

Trainer::Trainer(const nn::VitConfig& model_cfg, const TrainOptions& opt, std::string data_name)
    : cfg_(model_cfg),
      opt_(opt),
      data_name_(std::move(data_name)),
      model_(params_, cfg_, std::uint64_t(opt.seed)),
      comm_(Comm::world()) {
  omp_set_num_threads(opt_.threads);
  comm_.set_timeout(opt_.comm_timeout);
  device_ = opt_.resolved_device();
  if (device_ == Device::cuda) {
#ifdef LIERE_WITH_CUDA
    if (comm_.distributed()) {  // ranks on one machine take its GPUs in turn (before anything is allocated there)
      const int gpus = cuda::device_count();
      LIERE_ENSURE(cudaSetDevice(comm_.local_rank() % gpus) == cudaSuccess,
                   "cudaSetDevice(" << comm_.local_rank() % gpus << ") failed");
      if (comm_.local_size() > gpus)
        std::cerr << "warning: " << comm_.local_size() << " ranks share this machine's " << gpus << " GPUs\n";
    }
    const Precision p = opt_.resolved_precision();
    std::cerr << "device: cuda, " << cuda::device_description()
              << (p == Precision::tf32   ? ", TF32 matrix products"
                  : p == Precision::bf16 ? ", bf16 matrix products"
                  : p == Precision::fp16 ? ", fp16 matrix products"
                                         : "")
              << "\n";
#endif
    params_.to(device_);  // before the optimizer: its state lives where the parameters do
  }
  // The mode of the device's matrix products (cpu: fp32 or bf16 operands; cuda: TF32 or not); weights stay fp32.
  set_precision(opt_.resolved_precision(), device_);
  const Precision prec = opt_.resolved_precision();
  if (prec == Precision::bf16 || prec == Precision::fp16)
    std::cerr << "precision: " << to_string(prec) << " matrix products (operands rounded to " << to_string(prec)
              << ", fp32 accumulation: "
              << (device_ == Device::cpu ? "oneDNN, AVX512_BF16"
                                         : std::string("cuBLAS, ") + to_string(prec) + " tensor cores")
              << "); weights, optimizer state, LayerNorm, softmax, loss and rotation tables in fp32\n";
  optim::AdamConfig ac;
  ac.lr = opt_.lr;
  ac.weight_decay = opt_.wd;
  ac.decoupled = opt_.optimizer == "adamw";
  auto groups = optim::decay_groups(params_.all(), opt_.wd, [](const std::string& n, const Shape& s) {
    return optim::default_no_decay(n, s, {"pe."});
  });
  adam_ = std::make_unique<optim::Adam>(groups, ac);
  // fp16 scales the loss by default (its gradients would underflow); --loss-scale sets the start, or turns it on
  // for the other precisions.
  const double start_scale = opt_.loss_scale > 0 ? opt_.loss_scale : prec == Precision::fp16 ? 65536.0 : 0.0;
  if (start_scale > 0) {
    optim::LossScaleConfig lc;
    lc.init = start_scale;
    lc.max_scale = std::max(lc.max_scale, lc.init);
    lc.floor = std::min(lc.floor, lc.init);
    loss_scale_ = std::make_unique<optim::DynamicLossScale>(lc);
    std::cerr << "loss scaling: dynamic from " << start_scale << " (skipped steps and the scale in --metrics)\n";
  }
  if (comm_.distributed()) {
    // Every rank built the same weights from the seed; rank 0's are sent anyway, so that the ranks start equal
    // whatever their machines.
    broadcast_params(comm_, params_);
    reducer_ = std::make_unique<GradReducer>(comm_, params_, opt_.bucket_mib);
    std::cerr << "data parallel: " << comm_.size() << " ranks (" << comm_.describe() << "), " << opt_.batch / comm_.size()
              << " samples per rank and step, " << reducer_->buckets() << " gradient buckets of up to " << opt_.bucket_mib
              << " MiB (" << reducer_->bytes() / 1e6 << " MB per step), "
              << (opt_.no_overlap ? "reduced after backward" : "reduced while backward runs") << ", "
              << reducer_->transport() << "\n";
  }
}

Trainer::~Trainer() = default;

std::int64_t Trainer::optimizer_steps() const { return adam_->steps(); }

Trainer::StepStats Trainer::train_step(const Tensor& x, const std::vector<int>& y, int first, std::uint64_t seed,
                                       double lr, int epoch, std::int64_t step) {
  const int N = comm_.size();
  StepStats st;
  Tape tape(seed);
  if (N > 1) {
    tape.set_batch_shard(first, Index(y.size()));
    if (!opt_.no_overlap) reducer_->attach(tape);
  }
  // A non-finite generator is named (layer and head) as an error of every rank: the ranks hold the same weights, so
  // each finds it at the same point, and rank 0 alone reports it (on a device, where the forward does not read the
  // generators, this runs when the loss is not finite).
  auto check_generators = [&] {
    try {
      model_.pe().check_generators();
    } catch (const Error& g) {
      throw AllRanksError(g.what());
    }
  };
  Var logits, loss;
  try {
    Var xv(x.to(device_));
    logits = model_.forward(tape, xv);
    loss = ops::cross_entropy(tape, logits, y);
  } catch (const Error& e) {
    tape.clear();
    if (N > 1) check_generators();
    step_failed(e);
  }
  double l = 0;
  std::int64_t steps_before = -1;  // the optimizer's count before a gated update (one wait), restored when it stops
  auto check_finite = [&] {
    if (std::isfinite(l)) return;
    tape.clear();
    if (steps_before >= 0) adam_->set_steps(steps_before);  // as if the update had not been called (the reading way)
    check_generators();
    std::ostringstream m;
    m << "the loss is " << (std::isnan(l) ? "NaN" : "infinite") << " at epoch " << epoch + 1 << ", step " << step + 1
      << "; training stopped"
      << (opt_.save.empty() ? std::string() : "; the last good checkpoint '" + opt_.save + "' is intact")
      << " (try a lower --lr or --clip"
      << (opt_.resolved_precision() == Precision::fp16
              ? "; in fp16 an activation past 65504 overflows: --precision bf16 has fp32's range)"
              : ")");
    throw AllRanksError(m.str());
  };
  try {
    // The global loss is the mean of the ranks' means: each rank's backward is seeded with 1/N, and the all-reduce
    // sums the gradients.
    // With loss scaling the seed is scale/N (±∞ past float's range: that step overflows and is skipped).
    const double seed = (loss_scale_ ? loss_scale_->scale() : 1.0) / N;
    const float seed_f =
        seed > double(std::numeric_limits<float>::max()) ? std::numeric_limits<float>::infinity() : float(seed);
    if (seed_f == 1.0f) tape.backward(loss);
    else tape.backward(loss, Tensor::full(loss.shape(), seed_f, loss.device()));
  } catch (const Error& e) {
    step_failed(e);
  }
  // One wait for the device a step where it can be (one rank, no loss scaling, every parameter on the model's
  // device): the clipping and the update are queued behind the backward with no read of the device
  // (optim::clip_grad_norm_into), the update gated on the loss and Σg² being finite (AdamT::StepGate), and the loss,
  // the logits and Σg² are read after them. Otherwise the loss and the logits are read after the backward, then the
  // gradients reduced across ranks, unscaled, clipped (a read of the norm) and the update made. Either way a
  // non-finite loss or gradient stops the run with the weights as they were before the step.
  bool one_wait = N == 1 && !loss_scale_ && one_wait_allowed();
  for (const auto& p : params_.all()) one_wait = one_wait && p.device() == device_;
  if (one_wait) {
    try {
      if (opt_.clip > 0) {
        if (!sumsq_.defined()) sumsq_ = TensorT<double>(Shape{1}, device_);
        optim::clip_grad_norm_into(params_.all(), opt_.clip, sumsq_);
      }
      adam_->set_lr(lr);
      steps_before = adam_->steps();
      adam_->step({loss.value(), opt_.clip > 0 ? sumsq_ : TensorT<double>()});
    } catch (const Error& e) {
      step_failed(e);
    }
  }
  l = loss.item();
  if (N == 1) check_finite();
  const std::vector<float> host_logits = logits.value().to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float* r = host_logits.data() + i * std::size_t(cfg_.classes);
    st.correct += int(std::max_element(r, r + cfg_.classes) - r) == y[i];
  }
  if (one_wait) {
    st.loss = l;
    try {
      if (opt_.clip > 0 && !std::isfinite(sumsq_.to_vector()[0])) {
        adam_->set_steps(steps_before);
        optim::check_finite_grads(params_.all());  // names the parameter
        throw Error("the gradients' sum of squares overflows at epoch " + std::to_string(epoch + 1) + ", step " +
                    std::to_string(step + 1) + ": stopping (lower the learning rate)");
      }
      params_.zero_grad();
    } catch (const Error& e) {
      step_failed(e);
    }
    return st;
  }
  if (N > 1) {
    st.comm_s = reducer_->finish();
    const auto t0 = std::chrono::steady_clock::now();
    double stats[2] = {l, double(st.correct)};
    comm_.all_reduce_sum(stats, 2, "the step's loss");
    st.comm_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    l = stats[0] / N;
    st.correct = std::int64_t(stats[1]);
    check_finite();
  }
  st.loss = l;
  if (loss_scale_) {  // every rank holds the same summed gradients: the same decision everywhere
    const double scale = loss_scale_->scale();
    const bool finite = optim::unscale_grads(  // and clipped, in the same pass
        params_.all(), scale, opt_.clip > 0 ? opt_.clip : std::numeric_limits<double>::infinity());
    try {
      st.skipped = !loss_scale_->update(!finite, step + 1);
    } catch (const Error& e) {
      throw AllRanksError("epoch " + std::to_string(epoch + 1) + ": " + e.what());
    }
    if (st.skipped) {
      params_.zero_grad();
      return st;
    }
  }
  try {
    if (opt_.clip > 0 && !loss_scale_) optim::clip_grad_norm(params_.all(), opt_.clip);
    adam_->set_lr(lr);
    adam_->step();
    params_.zero_grad();
  } catch (const Error& e) {
    step_failed(e);
  }
  return st;
}

std::string Trainer::dry_run_line() const {
  std::ostringstream o;
  o << "pe_params=" << pe_params() << " total_params=" << total_params() << " gflops_per_image=" << std::setprecision(4)
    << cfg_.gflops_per_image() << " pe_gflops_per_image=" << cfg_.pe_gflops_per_image();
  return o.str();
}

nn::Metadata Trainer::identity() const {
  return {{"model", cfg_.describe()}, {"pe", cfg_.pe.describe()}, {"data", data_name_}};
}

double Trainer::bench(int steps) {
  const int B = opt_.batch, N = comm_.size(), Bl = B / N;
  Shape xs{Bl, cfg_.channels};
  for (int d : cfg_.image) xs.push_back(d);
  Tensor xh(xs);
  std::mt19937_64 g(1 + std::uint64_t(comm_.rank()));
  std::normal_distribution<float> n(0, 1);
  for (Index i = 0; i < xh.numel(); ++i) xh.data()[i] = n(g);
  std::vector<int> y(Bl);
  for (int i = 0; i < Bl; ++i) y[i] = int(g() % cfg_.classes);
  // Each step copies the batch to the device, as training does.
  double comm_s = 0;
  auto step = [&] { comm_s += train_step(xh, y, comm_.rank() * Bl, 1, opt_.lr, 0, 0).comm_s; };
  auto sync = [&] {
#ifdef LIERE_WITH_CUDA
    if (device_ == Device::cuda) cuda::synchronize();
#endif
    comm_.barrier("the benchmark");
  };
  auto cpu_s = [] {  // CPU time of the process (all threads): on a shared machine, the work without the waiting
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  for (int i = 0; i < 2; ++i) step();
  sync();
  comm_s = 0;
  const double c0 = cpu_s();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  sync();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_s() - c0;
  const double ips = double(steps) * B / s;
  const double gflops = 3.0 * cfg_.gflops_per_image() * ips;  // forward + backward ≈ 3 × forward
  std::cout << "model: " << cfg_.describe() << "\npe: " << cfg_.pe.describe() << "\ndevice=" << to_string(device_)
            << " precision=" << to_string(opt_.resolved_precision())
            << " threads=" << opt_.threads
            << " gemm=" << (device_ == Device::cuda ? std::string("cuBLAS") : cpu::gemm_backend_name(cpu::gemm_backend()))
            << " batch=" << B << " steps=" << steps << " step_ms=" << std::fixed << std::setprecision(1)
            << 1000 * s / steps << " step_cpu_ms=" << 1000 * cpu / steps << " achieved_gflops=" << gflops
            << " peak_rss_mib=" << peak_rss_mib();
#ifdef LIERE_WITH_CUDA
  if (device_ == Device::cuda) {  // which way the copies to the device went (LIERE_CUDA_STAGING), the whole run
    const cuda::CopyCounts cc = cuda::copy_counts();
    std::cout << " copies_staged=" << cc.staged << " copies_plain=" << cc.plain;
    if (cc.pinned_failures) std::cout << " pinned_failures=" << cc.pinned_failures;
  }
#endif
  if (N > 1)
    std::cout << "\nranks=" << N << " batch_per_rank=" << Bl << " comm_wait_ms=" << std::setprecision(2)
              << 1000 * comm_s / steps << " allreduce_mb_per_step=" << std::setprecision(3) << reducer_->bytes() / 1e6
              << " buckets=" << reducer_->buckets() << " buckets_started_in_backward=" << reducer_->started_during_backward();
  std::cout << "\ntrain_img_per_s=" << std::setprecision(2) << ips << "\n";
  return ips;
}

void Trainer::step_failed(const Error& e) const {
  const std::string what = e.what();
  if (device_ == Device::cuda && what.find("out of memory on cuda") != std::string::npos)
    throw Error("out of GPU memory with --batch " + std::to_string(opt_.batch) + " (eval batch " +
                std::to_string(opt_.eval_batch) + "): lower --batch (or --eval-batch)" +
                (opt_.save.empty() ? std::string() : "; the checkpoint '" + opt_.save + "' is untouched") + " [" + what + "]");
  throw;
}

EvalResult Trainer::evaluate(const EvalData& data, bool progress) {
  EvalResult r;
  r.name = data.name;
  Tape tape;
  auto _ = tape.no_grad();
  tape.set_training(false);
  const int C = cfg_.channels, B = opt_.eval_batch;
  std::size_t per = C;
  for (int d : data.size) per *= d;
  // This rank's share: examples [lo, hi).
  const int N = comm_.size(), rank = comm_.rank();
  const int lo = int(std::int64_t(data.n) * rank / N), hi = int(std::int64_t(data.n) * (rank + 1) / N);
  std::vector<double> rows(std::size_t(data.n), 0.0);        // per-example loss
  std::vector<std::int64_t> preds(std::size_t(data.n), 0);   // per-example prediction
  std::unique_ptr<train::ProgressBar> bar;
  const int batches = (hi - lo + B - 1) / B;
  if (progress) bar = std::make_unique<train::ProgressBar>(batches, "eval " + data.name);
  for (int first = lo, k = 0; first < hi; first += B, ++k) {
    const int n = std::min(B, hi - first);
    Shape xs{n, C};
    for (int d : data.size) xs.push_back(d);
    Tensor x(xs);
    data.fill(first, n, x.data());
    if (data.shuffle_patch > 0)
      for (int i = 0; i < n; ++i) {
        std::mt19937_64 shuffle_rng(mix_seed(data.shuffle_seed, std::uint64_t(first + i)));
        data::shuffle_patches(x.data() + i * per, C, data.size[0], data.size[1], data.shuffle_patch, shuffle_rng);
      }
    std::vector<int> y(data.labels.begin() + first, data.labels.begin() + first + n);
    std::vector<float> loss_rows, host_logits;
    try {
      Var xv(x.to(device_));
      Var logits = model_.forward(tape, xv);
      ops::cross_entropy(tape, logits, y, 0.0, &loss_rows);
      host_logits = logits.value().to_vector();
    } catch (const Error& e) {
      step_failed(e);
    }
    for (int i = 0; i < n; ++i) {
      rows[std::size_t(first + i)] = loss_rows[i];
      const float* l = host_logits.data() + std::size_t(i) * cfg_.classes;
      preds[std::size_t(first + i)] = int(std::max_element(l, l + cfg_.classes) - l);
    }
    if (bar) bar->add_items(n), bar->update(k + 1);
  }
  if (bar) bar->finish();
  if (N > 1) {  // every example was computed by one rank and is 0 on the others
    comm_.all_reduce_sum(rows.data(), rows.size(), "the evaluation");
    comm_.all_reduce_sum(preds.data(), preds.size(), "the evaluation");
  }
  double loss_sum = 0;
  for (int i = 0; i < data.n; ++i) {
    loss_sum += rows[std::size_t(i)];
    const int y = data.labels[std::size_t(i)], pred = int(preds[std::size_t(i)]);
    r.labels.push_back(y);
    r.preds.push_back(pred);
    r.correct.push_back(pred == y);
  }
  r.loss = loss_sum / std::max(1, data.n);
  r.ci = train::bootstrap_ci(r.correct, 1000, 0.95, 0);
  r.acc = r.ci.mean;
  return r;
}

void Trainer::load_init_weights() {
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

EvalResult Trainer::fit(const TrainData& data, const EvalData& test, bool eval_every_epoch) {
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
    start_epoch = int(nn::metadata_integer(meta, "epoch", opt_.resume, 0, INT32_MAX));
    LIERE_ENSURE(start_epoch <= opt_.epochs, "--resume " << opt_.resume << ": the checkpoint is after epoch "
                                                         << start_epoch << ", more than --epochs " << opt_.epochs);
    std::cerr << "resumed " << opt_.resume << " after epoch " << start_epoch << "\n";
    if (comm_.root())
      for (const auto& [key, value] : run_settings(opt_))
        if (const auto it = meta.find(key); it != meta.end() && it->second != value)
          std::cerr << "note: --resume " << opt_.resume << ": its run had --" << key << " " << it->second
                    << ", this one --" << key << " " << value << " (the result is not that of one uninterrupted run)\n";
  }
  if (!opt_.init_from.empty()) load_init_weights();
  std::unique_ptr<train::MetricsWriter> metrics;
  if (!opt_.metrics.empty() && comm_.root())
    metrics = std::make_unique<train::MetricsWriter>(
        opt_.metrics, start_epoch > 0 ? train::MetricsWriter::Mode::append : train::MetricsWriter::Mode::truncate);

  // This rank's share of every step's batch: samples [first, first + Bl).
  const int B = opt_.batch, Bl = B / comm_.size(), first = comm_.rank() * Bl;
  auto batch_shape = [&](int epoch, std::int64_t s) {
    Shape xs{Bl, cfg_.channels};
    for (int d : data.size_at ? data.size_at(epoch, s) : data.size.empty() ? cfg_.image : data.size) xs.push_back(d);
    return xs;
  };
  // With a loader thread (--prefetch), two batch buffers: step s trains on one while step s + 1's batch is filled
  // into the other (without, the first alone). The epoch's first batch is filled on the spot (nothing runs beside the
  // evaluation and the checkpoint between epochs); a fill's error (or the batch shape's, data.size_at) surfaces at
  // the step that needed its batch, after the steps before it.
  const bool prefetch = opt_.prefetch_on(device_);
  Tensor xb[2] = {Tensor(batch_shape(start_epoch, 0)), Tensor()};
  std::vector<int> yb[2] = {std::vector<int>(std::size_t(Bl)), std::vector<int>(prefetch ? std::size_t(Bl) : 0)};
  auto fill = [&](int slot, int epoch, std::int64_t s) {
    data.fill(epoch, s, B, first, Bl, xb[slot].data(), yb[slot].data());
  };
  std::future<void> next;  // the loader's fill of the other buffer
  EvalResult last;
  bool evaluated_last = false;
  for (int epoch = start_epoch; epoch < opt_.epochs; ++epoch) {
    train::ProgressBar bar(spe, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(opt_.epochs));
    double loss_sum = 0, window_loss = 0;
    std::int64_t correct = 0, seen = 0, window_correct = 0, window_seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t s = 0; s < spe; ++s) {
      const std::int64_t global = std::int64_t(epoch) * spe + s;
      const int cur = prefetch ? int(s % 2) : 0;
      // The buffers take the batch's shape on this thread (the loader only writes into them).
      auto shape_for = [&](int slot, std::int64_t step) {
        const Shape xs = batch_shape(epoch, step);
        if (xs != xb[slot].shape()) xb[slot] = Tensor(xs);
      };
      StepStats st;
      try {
        if (next.valid()) next.get();  // step s's batch, filled while step s − 1 ran
        else shape_for(cur, s), fill(cur, epoch, s);
        bool shaped = false;
        if (prefetch && s + 1 < spe) {
          try {  // a shape that cannot be had is step s + 1's error: it asks again there, on this thread
            shape_for(1 - cur, s + 1);
            shaped = true;
          } catch (const std::exception&) {
          }
        }
        if (shaped) {
          next = std::async(std::launch::async, [&, epoch, s, slot = 1 - cur] {
            omp_set_num_threads(opt_.threads);  // a new thread's OpenMP default is every core
            fill(slot, epoch, s + 1);
          });
        }
        st = train_step(xb[cur], yb[cur], first, mix_seed(std::uint64_t(opt_.seed), 0xD209, std::uint64_t(global)),
                        sched.at_step(global), epoch, s);
      } catch (...) {
        if (next.valid()) next.wait();  // the loader is done with the buffers before they go
        bar.finish();
        throw;
      }
      loss_sum += st.loss * B;
      correct += st.correct;
      seen += B;
      window_loss += st.loss * B, window_correct += st.correct, window_seen += B;
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
    if (loss_scale_)
      for (const auto& [k, v] : loss_scale_->metrics()) row.emplace_back(k, v);
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
    if (!opt_.save.empty() && comm_.root()) {  // rank 0 writes it (atomically); every rank holds the same weights
      nn::Metadata meta = identity();
      meta["epoch"] = std::to_string(epoch + 1);
      for (const auto& [key, value] : run_settings(opt_)) meta[key] = value;
      nn::save_checkpoint(opt_.save, params_, adam_.get(), meta);
    }
  }
  if (!evaluated_last) last = evaluate(test);
  return last;
}

train::Metrics summary_fields(const Trainer& t, const EvalResult& r) {
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
          {"precision", std::string(to_string(t.options().resolved_precision()))},
          {"seed", t.options().seed}};
}

std::string predictions_path_for(const std::string& predictions, const std::string& eval_name) {
  std::string base = predictions;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, ".pred") == 0) base.erase(base.size() - 5);
  return base + "." + eval_name + ".pred";
}

void print_result(const EvalResult& r) {
  std::cout << r.name << " top-1 accuracy: " << fmt_pct(r.acc) << "% (95% bootstrap CI " << fmt_pct(r.ci.lo) << " – "
            << fmt_pct(r.ci.hi) << ", 1000 resamples, n=" << r.correct.size() << "), loss " << std::setprecision(4)
            << r.loss << "\n";
}

}  // namespace liere::app
