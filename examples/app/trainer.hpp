// examples/app/trainer.hpp — what train_cifar, train_arrows and train_ucf101 share: the flags every trainer takes
// (ModelOptions, TrainOptions), the training loop, evaluation with a bootstrap CI, checkpoints, metrics, summaries
// and the speed benchmark. The programs only say where the data come from.
//
// Determinism: the data of step s of epoch e depend only on (seed, e, s) and dropout draws from a generator
// seeded by (seed, global step), so training N epochs in one go, or in pieces with --save/--resume at
// epoch boundaries, gives the same weights bit for bit with the same thread count.
//
// Data parallel (mpirun -np N, docs/scaling.md): --batch is the global batch; rank r computes samples
// [r·B/N, (r+1)·B/N) of every step's batch, whose contents and augmentation are keyed by the sample, and dropout
// masks by the sample's place in the global batch (Tape::set_batch_shard), so a run does not depend on N beyond
// float rounding. Gradients are summed in buckets while backward runs (GradReducer); evaluation is split between
// the ranks and gathered. Rank 0 alone prints, writes metrics and checkpoints; any N resumes any checkpoint.
#pragma once

#include <app/bootstrap.hpp>
#include <app/comm.hpp>
#include <app/data_parallel.hpp>
#include <app/flags.hpp>
#include <app/metrics.hpp>
#include <app/progress.hpp>
#include <liere/backend/precision.hpp>
#include <liere/core/precision.hpp>
#include <liere/nn/engine.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace liere::app {

// ---- options shared by the trainers ---------------------------------------------------------------------
// Two flag groups, declared once: ModelOptions (what is trained) and TrainOptions (how). A trainer sets its own
// defaults on them, calls add_flags, parses, and asks ModelOptions::config() for the model. A new option of the
// model or of the training loop (a number precision, say) goes into one of them, and every trainer has it with the
// same name, default and meaning.

// The model: a ViT (size, patch, tubelet, pooling, dropout) and its position encoding (the PEConfig flags).
struct ModelOptions {
  // --model: tiny, small, base or custom (the sizes of `cfg`, i.e. the program's). Empty: the program has no
  // --model, and --dim, --depth, --heads, --mlp are `cfg`'s sizes themselves, with its values as defaults.
  std::string model = "tiny";
  std::string model_help = "tiny, small, base or custom";
  // With --model: overrides, 0 keeps the size's (--mlp 0: the size's, or 4 x --dim when --dim is given).
  int dim = 0, depth = 0, heads = 0, mlp = 0;
  std::string pool = "cls";   // cls or mean
  bool patch_flag = true;     // --patch (false: the task fixes the patch, train_arrows)
  std::string patch_help = "patch size";
  // The defaults of everything else: --patch, --tubelet (a video model: cfg.tubelet > 0), --drop and the encoding
  // flags write into it. channels, image and classes are the data's: the program sets them.
  nn::VitConfig cfg;

  // Section "Model" and section "Position encoding".
  void add_flags(Flags& f);
  // cfg with --model's sizes, the overrides and --pool applied (--pool and --model checked).
  nn::VitConfig config() const;
};

// How the model is trained: schedule, files, modes, device and the data-parallel settings.
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
  std::string device = "auto";  // cpu, cuda, or auto: cuda when the build has it and a device is present
  bool tf32 = false;            // cuda: GEMMs in TF32 on tensor cores (the same as --precision tf32)
  std::string precision = "fp32";  // fp32, tf32, bf16, fp16 (backend/precision.hpp: what each device can train in)
  double loss_scale = 0;           // dynamic loss scaling from this power of two (optim/loss_scale.hpp); 0: off
  std::string prefetch = "auto";   // auto, on, off: a loader thread fills the next batch while a step runs
  // data parallel (mpirun)
  double comm_timeout = 30;     // seconds a collective waits for the other ranks before the job is ended
  double bucket_mib = 4;        // gradient all-reduce bucket size
  bool no_overlap = false;      // all-reduce after backward instead of during it

  // Sections "Training", "Files", "Modes" and "Data parallel".
  void add_flags(Flags& f);
  // Also checks the device: --device cuda without a CUDA build or device is a UsageError (exit code 2), and that
  // --batch divides among the ranks of a data-parallel run.
  void validate() const;
  // The device --device names (auto resolved).
  Device resolved_device() const;
  // --precision, parsed and checked against the device: a value this build or machine cannot train in on it (fp16;
  // bf16 on a CPU without AVX512_BF16 or oneDNN, or on a device older than compute capability 8.0; tf32 off cuda)
  // is a UsageError (exit code 2) that says
  // what it can. --tf32 is --precision tf32.
  Precision resolved_precision() const;
  // Whether a loader thread fills step s + 1's batch while step s runs on `d` (--prefetch; auto: on a GPU).
  bool prefetch_on(Device d) const { return prefetch == "on" || (prefetch == "auto" && d == Device::cuda); }
  // Ranks other than 0 write no files: clears --summary-json and --predictions there.
  void root_writes_files();
};

// --dry-run prints the model, its parameter counts and FLOPs; --bench-steps N times N training steps. Returns
// whether either was asked for (and done): the program then exits.
bool dry_run_or_bench(const nn::VitConfig& cfg, const TrainOptions& opt, const std::string& data_name);

// ---- data ---------------------------------------------------------------------------------------------
// The training data: fill(epoch, step, batch, first, count, x, y) writes samples [first, first + count) of the
// `batch` samples of (epoch, step) — normalised inputs (count, C, …) and labels. A sample's contents and
// augmentation must depend on (seed, epoch, its index in the epoch) only, not on first and count: ranks of a
// data-parallel run each fill their share of the same batch.
struct TrainData {
  std::int64_t steps_per_epoch = 0;
  std::vector<int> size;  // spatial size of the inputs; empty: the model's image size
  std::function<void(int epoch, std::int64_t step, int batch, int first, int count, float* x, int* y)> fill;
  // Optional, for multi-resolution training: the spatial size of the batch of (epoch, step), which fill
  // then writes; `size` is not used.
  std::function<std::vector<int>(int epoch, std::int64_t step)> size_at;
};

// An evaluation set: n examples of shape (C, size...), fill(first, count, x) writes normalised inputs. In a
// data-parallel run each rank fills and evaluates its contiguous share.
struct EvalData {
  std::string name = "test";
  int n = 0;
  std::vector<int> size;  // spatial size (H, W) or (frames, H, W)
  std::vector<int> labels;
  std::function<void(int first, int count, float* x)> fill;
  // Optional: shuffle the patches of every image with this patch size (paper Table 5); image i's permutation is
  // drawn from mix_seed(shuffle_seed, i).
  int shuffle_patch = 0;
  std::uint64_t shuffle_seed = 0;
};

struct EvalResult {
  std::string name;
  double acc = 0, loss = 0;
  train::BootstrapCI ci;
  std::vector<int> labels, preds;
  std::vector<std::uint8_t> correct;
};

// Peak resident set size of this process so far, MiB.
double peak_rss_mib();

// 100·x with `decimals` digits after the point: "45.25".
std::string fmt_pct(double x, int decimals = 2);

// ---- the trainer --------------------------------------------------------------------------------------
class Trainer {
 public:
  Trainer(const nn::VitConfig& model_cfg, const TrainOptions& opt, std::string data_name);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  nn::Vit& model() { return model_; }
  nn::Params& params() { return params_; }
  std::int64_t pe_params() const { return model_.pe().num_params(); }
  std::int64_t total_params() const { return params_.numel(); }
  const nn::VitConfig& config() const { return cfg_; }
  // The optimizer's count of updates (its bias correction's t): a step stopped by a non-finite loss does not count.
  std::int64_t optimizer_steps() const;

  // "pe_params=N total_params=M gflops_per_image=G pe_gflops_per_image=E" (docs/flops.md).
  std::string dry_run_line() const;

  // What a checkpoint must match to be resumed.
  nn::Metadata identity() const;

  // Times `steps` training steps (after 2 warm-up steps) on random inputs; prints and returns img/s (of the
  // global batch: in a data-parallel run each rank computes its share, and the time waiting on communication is
  // printed as comm_wait_ms).
  double bench(int steps);

  // Evaluates on `data` (no gradients, no dropout); every rank returns the whole result.
  EvalResult evaluate(const EvalData& data, bool progress = false);

  // --init-from: the checkpoint's weights into the model (no optimizer state, no epoch). The same model and
  // encoding, up to the resolution policy: it only says how positions follow the image size, and fine-tuning
  // at another resolution may change it (train_arrows --model-res). fit() calls it before the first step.
  void load_init_weights();

  // Trains opt.epochs epochs (resuming when asked), evaluating on `test` after each epoch when
  // eval_every_epoch, always after the last. Returns the final evaluation.
  EvalResult fit(const TrainData& data, const EvalData& test, bool eval_every_epoch = true);

  double train_img_per_s() const { return train_seconds_ > 0 ? double(train_images_) / train_seconds_ : 0.0; }
  const TrainOptions& options() const { return opt_; }
  Device device() const { return device_; }

 private:
  // One training step's error: out of device memory becomes a message naming the batch size to lower.
  [[noreturn]] void step_failed(const Error& e) const;

  // One optimiser step on this rank's share x, y (samples [first, first + y.size()) of the global batch) with the
  // tape seeded by `seed`: forward, backward with the gradient all-reduce, clipping, update. Returns the global
  // batch's mean loss and correct count; comm_s gets the seconds spent waiting on the other ranks. A non-finite
  // loss is an AllRanksError naming (epoch, step), 0-based here; the weights are those before the step.
  struct StepStats {
    double loss = 0;
    std::int64_t correct = 0;
    double comm_s = 0;
    bool skipped = false;  // loss scaling: the gradients overflowed, no update
  };
  StepStats train_step(const Tensor& x, const std::vector<int>& y, int first, std::uint64_t seed, double lr, int epoch,
                       std::int64_t step);

  nn::VitConfig cfg_;
  TrainOptions opt_;
  Device device_ = Device::cpu;
  std::string data_name_;
  nn::Params params_;
  nn::Vit model_;
  std::unique_ptr<optim::Adam> adam_;
  std::unique_ptr<optim::DynamicLossScale> loss_scale_;  // --loss-scale
  TensorT<double> sumsq_;  // the step's Σg² on device_ (clipping with one wait a step: train_step)
  Comm& comm_;
  std::unique_ptr<GradReducer> reducer_;  // data parallel only
  double train_seconds_ = 0;
  std::int64_t train_images_ = 0;
};

// The summary fields every trainer writes.
train::Metrics summary_fields(const Trainer& t, const EvalResult& r);

// Where the predictions of an extra evaluation (shuffled patches, another image size) go, beside the main
// --predictions file P: P less a ".pred" ending, then "." + the evaluation's name + ".pred", e.g.
// "run.pred" and "test_shuffled" → "run.test_shuffled.pred"; "run.pred" and "test@40" → "run.test@40.pred".
std::string predictions_path_for(const std::string& predictions, const std::string& eval_name);

// "test top-1 accuracy: 45.25% (95% bootstrap CI 43.10 – 47.40, 1000 resamples, n=2000), loss 1.234".
void print_result(const EvalResult& r);

}  // namespace liere::app
