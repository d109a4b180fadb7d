// train_arrows — the synthetic spatial-reasoning task of the LieRE paper (§5.2, Table 3): "which way does
// the arrow point that the base of the Y points to?" A ViT with patch 12 trains on freshly generated
// samples and is evaluated on a fixed held-out set with a bootstrap 95% CI.
//
//   train_arrows                                   # the README's main job: abs vs liere8, about 10 minutes
//   train_arrows --pe liere --block 64 --epochs 20 --res 168
//   train_arrows --compare abs,visionllama,rope-mixed,liere8,liere64 --compare-json t3.json --compare-png t3.png
//   train_arrows --pe liere --attn-maps attn.png
//   train_arrows --pe liere --save l108.safetensors                 # then fine-tune it at 168:
//   train_arrows --pe liere --res 168 --model-res 108 --positions interpolate --init-from l108.safetensors --lr 1e-4
//   train_arrows --pe liere --positions interpolate --init-from l108.safetensors --shift 1    # objects off the patch grid
//   train_arrows --pe liere --res 168 --train-res 108,168 --positions interpolate           # two sizes in one run
#include <app/compare.hpp>
#include <app/trainer.hpp>
#include <data_tools/arrows.hpp>
#include <data_tools/augment.hpp>
#include <data_tools/plot.hpp>
#include <liere/io/atomic_file.hpp>

#include <cmath>
#include <iomanip>
#include <iostream>
#include <optional>

using namespace liere;

namespace {

// Pixels 0…255 (255 the white background) → ink a = (255 − v) / 255: positive, the background 0. With
// --standardize, (a − 0.0347) / 0.172 instead: the mean and standard deviation of a over the task's images
// (the same at 108, 168 and 276, since the drawing scales with the image), so the background is −0.20.
void to_input(const std::uint8_t* px, std::size_t n, float* x, bool standardize) {
  const float mean = standardize ? 0.0347f : 0.0f, inv_std = standardize ? 1.0f / 0.172f : 1.0f;
  for (std::size_t i = 0; i < n; ++i) x[i] = (float(255 - px[i]) * (1.0f / 255.0f) - mean) * inv_std;
}

// --shift: moves each image of a batch by its own (dx, dy) in [−shift, shift]², drawn from the sample's
// index, filling with the white background (augment's translate fills with 0, so it runs on the inverted
// image).
void shift_batch(std::uint8_t* px, int n, int B, int shift, std::uint64_t seed, std::uint64_t first) {
  const std::size_t per = std::size_t(n) * n;
  for (int i = 0; i < B; ++i) {
    std::uint8_t* img = px + std::size_t(i) * per;
    const std::uint64_t h = liere::mix_seed(seed, 0x5717, first + std::uint64_t(i));
    const int dx = int(h % std::uint64_t(2 * shift + 1)) - shift, dy = int((h >> 32) % std::uint64_t(2 * shift + 1)) - shift;
    for (std::size_t k = 0; k < per; ++k) img[k] = std::uint8_t(255 - img[k]);
    data::translate(img, 1, n, n, dx, dy);
    for (std::size_t k = 0; k < per; ++k) img[k] = std::uint8_t(255 - img[k]);
  }
}

struct ArrowRun {
  std::string label;
  int res = 108;
  app::EvalResult result;
  std::optional<app::EvalResult> shuffled;  // --shuffle-eval: the held-out set with its patches shuffled
  std::int64_t pe_params = 0, total_params = 0;
  double img_per_s = 0;
};

struct ArrowOptions {
  std::int64_t train_samples = 0;  // per epoch
  int model_res = 0;               // the image size the model is built for (0: the data's)
  std::vector<int> train_res;      // training image sizes, one drawn per batch (empty: the evaluation's)
  int shift = 0;                   // training images translated by up to ±shift pixels on each axis
  bool standardize = false;        // inputs with mean 0 and standard deviation 1 over the task's images
  bool shuffle_eval = false;       // also evaluate with the patches of every held-out image shuffled
  int test_n = 2000;
  std::uint64_t test_seed = 0;
};

ArrowRun train_one(const nn::VitConfig& cfg_in, const app::TrainOptions& opt, const ArrowOptions& ao, int res,
                   const std::string& attn_maps) {
  nn::VitConfig cfg = cfg_in;
  const int model_res = ao.model_res > 0 ? ao.model_res : res;
  cfg.image = {model_res, model_res};
  app::Trainer t(cfg, opt, "arrows");
  std::cerr << "\n== " << cfg.pe.label() << " at " << res << "x" << res
            << (model_res != res ? " (model built for " + std::to_string(model_res) + ")" : std::string()) << ": "
            << cfg.describe() << "\n   "
            << cfg.pe.describe() << "\n   " << t.dry_run_line() << "\n";
  const data::ArrowRenderer renderer(res);
  const std::size_t per = std::size_t(res) * res;

  // Training resolutions: --res, or with --train-res one of those drawn for each batch (multi-resolution
  // training); the held-out set is always at --res.
  const std::vector<int> train_res = ao.train_res.empty() ? std::vector<int>{res} : ao.train_res;
  std::vector<data::ArrowRenderer> train_renderers;
  int max_res = 0;
  for (int r : train_res) train_renderers.emplace_back(r), max_res = std::max(max_res, r);

  app::TrainData td;
  td.steps_per_epoch = ao.train_samples / opt.batch;
  auto res_index = [&](int epoch, std::int64_t step) -> std::size_t {
    if (train_res.size() == 1) return 0;
    const std::uint64_t global = std::uint64_t(epoch) * std::uint64_t(td.steps_per_epoch) + std::uint64_t(step);
    return std::size_t(liere::mix_seed(std::uint64_t(opt.seed), 0x4E5, global) % train_res.size());
  };
  td.size_at = [&](int epoch, std::int64_t step) {
    const int r = train_res[res_index(epoch, step)];
    return std::vector<int>{r, r};
  };
  std::vector<std::uint8_t> px(std::size_t(max_res) * max_res * opt.batch);
  const std::uint64_t train_seed = liere::mix_seed(std::uint64_t(opt.seed), 0xA770);
  td.fill = [&](int epoch, std::int64_t step, int B, int first, int count, float* x, int* y) {
    // Fresh samples: sample j of the step's batch is sample epoch·(samples per epoch) + step·B + j of the training
    // stream; this call fills j in [first, first + count) (a data-parallel rank's share).
    const std::uint64_t start = std::uint64_t(epoch) * std::uint64_t(td.steps_per_epoch) * B + std::uint64_t(step) * B +
                                std::uint64_t(first);
    const data::ArrowRenderer& r = train_renderers[res_index(epoch, step)];
    data::make_arrow_batch(r, train_seed, start, count, px.data(), y);
    const int n = r.resolution();
    if (ao.shift > 0) shift_batch(px.data(), n, count, ao.shift, train_seed, start);
    to_input(px.data(), std::size_t(n) * n * count, x, ao.standardize);
  };

  // The held-out set: its own seed, rendered once.
  app::EvalData test;
  test.name = "test";
  test.n = ao.test_n;
  test.size = {res, res};
  test.labels.resize(ao.test_n);
  auto test_px = std::make_shared<std::vector<std::uint8_t>>(per * ao.test_n);
  data::make_arrow_batch(renderer, ao.test_seed, 0, ao.test_n, test_px->data(), test.labels.data());
  test.fill = [test_px, per, st = ao.standardize](int first, int count, float* x) {
    to_input(test_px->data() + per * first, per * count, x, st);
  };

  ArrowRun run;
  run.label = cfg.pe.label();
  run.res = res;
  run.result = t.fit(td, test, /*eval_every_epoch=*/true);
  run.pe_params = t.pe_params();
  run.total_params = t.total_params();
  run.img_per_s = t.train_img_per_s();
  app::print_result(run.result);
  if (ao.shuffle_eval) {
    // The same held-out images with their 12 × 12 patches permuted (paper Table 5); the permutation of every
    // image is drawn from (seed, 3), as train_cifar does.
    app::EvalData shuffled = test;
    shuffled.name = "test_shuffled";
    shuffled.shuffle_patch = cfg.patch;
    shuffled.shuffle_seed = liere::mix_seed(std::uint64_t(opt.seed), 3);
    run.shuffled = t.evaluate(shuffled);
    app::print_result(*run.shuffled);
    if (!opt.predictions.empty())
      train::write_predictions(app::predictions_path_for(opt.predictions, shuffled.name), run.shuffled->labels,
                               run.shuffled->preds);
  }

  if (!opt.predictions.empty()) train::write_predictions(opt.predictions, run.result.labels, run.result.preds);
  if (!attn_maps.empty()) {
    // The CLS token's attention over the patch grid in every layer and head, for test sample 0 (paper Fig. 10).
    Tape tape;
    auto _ = tape.no_grad();
    tape.set_training(false);
    Tensor x(Shape{1, 1, res, res});
    test.fill(0, 1, x.data());
    Var xv(x.to(t.device()));
    for (const auto& b : t.model().blocks()) b.attn().keep_probs(true);  // no-grad forward: ask for the maps (cuda)
    t.model().forward(tape, xv);
    LIERE_ENSURE(cfg.pool == nn::Pool::cls, "--attn-maps needs a CLS token (--pool cls)");
    const auto grid = cfg.grid_for({res, res});
    const int H = cfg.heads, L = cfg.depth, N = grid[0] * grid[1], T = N + 1;
    plot::HeatmapGrid hg;
    hg.title = "CLS attention, " + cfg.pe.label() + ", sample 0 (label " +
               data::direction_name(data::Direction(test.labels[0])) + ", predicted " +
               data::direction_name(data::Direction(run.result.preds[0])) + ")";
    hg.rows = H + 1;
    hg.cols = L;
    hg.cells.resize(std::size_t(hg.rows) * hg.cols);
    for (int l = 0; l < L; ++l) {
      const auto& probs = t.model().blocks()[l].attn().last_probs();  // (1, H, T, T)
      plot::Heatmap mean{grid[0], grid[1], std::vector<float>(N, 0.0f)};
      for (int h = 0; h < H; ++h) {
        plot::Heatmap m{grid[0], grid[1], std::vector<float>(N)};
        for (int k = 0; k < N; ++k) m.values[k] = probs[(std::size_t(h) * T + 0) * T + 1 + k];
        for (int k = 0; k < N; ++k) mean.values[k] += m.values[k] / H;
        hg.cells[std::size_t(h) * L + l] = std::move(m);
      }
      hg.cells[std::size_t(H) * L + l] = std::move(mean);
      hg.col_labels.push_back("layer " + std::to_string(l + 1));
    }
    for (int h = 0; h < H; ++h) hg.row_labels.push_back("head " + std::to_string(h + 1));
    hg.row_labels.push_back("mean");
    plot::heatmap_grid(attn_maps, hg);
    std::string input_png = attn_maps;
    if (auto dot = input_png.rfind(".png"); dot != std::string::npos) input_png.erase(dot);
    input_png += "_input.png";
    data::write_png_grey(input_png, test_px->data(), res, res);
    std::cerr << "attention maps: " << attn_maps << " (input image: " << input_png << ")\n";
  }
  return run;
}

// Everything the command line sets.
struct Setup {
  app::ModelOptions model;
  app::TrainOptions opt;
  ArrowOptions ao;
  app::CompareOptions compare;
  std::vector<int> res = {108};
  std::string attn_maps;
  nn::VitConfig cfg;  // model.config(), for the data's channels and classes
};

// The flags with the task's defaults, parsed and checked; false after --help.
bool parse_flags(int argc, char** argv, Setup& s) {
  app::TrainOptions& opt = s.opt;
  opt.epochs = 6;
  opt.batch = 64;
  opt.lr = 1e-3;
  opt.wd = 0.05;
  opt.warmup = 1;
  opt.eval_batch = 200;
  ArrowOptions& ao = s.ao;
  ao.train_samples = 6400;
  std::int64_t test_seed = 1;
  app::ModelOptions& m = s.model;
  m.model.clear();  // no --model: --dim … are the sizes, these the defaults
  m.patch_flag = false;
  m.cfg.patch = 12;
  m.cfg.dim = 128;
  m.cfg.depth = 4;
  m.cfg.heads = 2;
  m.cfg.mlp_hidden = 256;
  const std::string default_compare = "abs,liere8";

  app::Flags f("train_arrows",
               "Trains a ViT (patch 12) on the synthetic arrow task of the LieRE paper (§5.2) with freshly generated\n"
               "samples and evaluates it on a fixed held-out set with a bootstrap 95% CI. Without --pe or --compare\n"
               "it runs the README's main job: --compare " + default_compare + ".");
  f.section("Task");
  f.add("res", &s.res, "image sizes: 108 (9x9 tokens), 168 (14x14), 276 (23x23); several with --compare");
  f.add("train-samples", &ao.train_samples, "fresh training samples per epoch");
  f.add_switch("standardize", &ao.standardize,
               "inputs standardised to mean 0 and std 1 over the task's images (else ink in [0, 1], background 0)");
  f.add("shift", &ao.shift, "augmentation: translate each training image by up to this many pixels on each axis");
  f.add("train-res", &ao.train_res,
        "multi-resolution training: image sizes to train on, one drawn at random for each batch, e.g. "
        "108,120,168 (none: --res; the held-out set stays at --res; with --positions interpolate a cell is "
        "about the same distance in position units at every size)");
  f.add("test-n", &ao.test_n, "held-out samples");
  f.add_switch("shuffle-eval", &ao.shuffle_eval,
               "also evaluate on the held-out set with its patches shuffled (paper Table 5); with --predictions P "
               "also P.test_shuffled.pred");
  f.add("test-seed", &test_seed, "seed of the held-out set (the training stream uses --seed)");
  f.add("model-res", &ao.model_res,
        "the image size the model is built for (its position grid and absolute table): with --init-from, the "
        "checkpoint's, to fine-tune it at another --res [0: --res]");
  m.add_flags(f);
  s.compare.add_flags(f, "Comparison (paper Table 3)", "abs,visionllama,rope-mixed,liere8,liere64",
                      "the comparison table as JSON");
  f.add("attn-maps", &s.attn_maps, "the CLS token's attention per layer and head for test sample 0, as PNG (paper Fig. 10)", "PATH");
  opt.add_flags(f);
  if (!f.parse(argc, argv)) return false;
  opt.root_writes_files();  // rank 0 writes the files
  s.compare.root_writes_files();
  if (!app::Comm::world().root()) s.attn_maps.clear();

  opt.validate();
  app::check_output_folder("--attn-maps", s.attn_maps);
  ao.test_seed = liere::mix_seed(std::uint64_t(test_seed), 0x7E57);
  const int patch = m.cfg.patch;
  LIERE_USAGE(ao.test_n >= 1 && ao.train_samples >= opt.batch,
              "--test-n must be >= 1 and --train-samples at least one batch (" << opt.batch << ")");
  for (int r : s.res) LIERE_USAGE(r >= 27 && r % patch == 0, "--res " << r << ": must be a multiple of the patch size 12");
  LIERE_USAGE(ao.shift >= 0 && ao.shift <= patch, "--shift " << ao.shift << ": allowed 0 to " << patch << " pixels");
  for (int r : ao.train_res)
    LIERE_USAGE(r >= 27 && r % patch == 0, "--train-res " << r << ": must be a multiple of the patch size 12");
  LIERE_USAGE(ao.model_res == 0 || (ao.model_res >= 27 && ao.model_res % patch == 0),
              "--model-res " << ao.model_res << ": must be a multiple of the patch size 12");
  s.cfg = m.config();
  s.cfg.channels = 1;
  s.cfg.classes = data::kArrowClasses;
  LIERE_USAGE(s.compare.list.empty() || opt.init_from.empty(), "--init-from fine-tunes one model: not with --compare");
  s.compare.default_to(f, default_compare);
  s.compare.validate(f, opt, s.cfg.pe);
  return true;
}

// --summary-json of a single run.
void write_summary(const Setup& s, const ArrowRun& r) {
  const app::TrainOptions& opt = s.opt;
  train::Metrics m{{"test_acc", r.result.acc},
                   {"test_acc_ci95", std::vector<double>{r.result.ci.lo, r.result.ci.hi}},
                   {"test_loss", r.result.loss},
                   {"test_n", s.ao.test_n},
                   {"pe", s.cfg.pe.label()},
                   {"pe_config", s.cfg.pe.describe()},
                   {"res", s.res[0]},
                   {"model_res", s.ao.model_res > 0 ? s.ao.model_res : s.res[0]},
                   {"init_from", opt.init_from},
                   {"pe_params", r.pe_params},
                   {"total_params", r.total_params},
                   {"train_img_per_s", r.img_per_s},
                   {"epochs", opt.epochs},
                   {"train_samples_per_epoch", s.ao.train_samples},
                   {"seed", opt.seed}};
  if (r.shuffled) {
    m.emplace_back("test_acc_shuffled", r.shuffled->acc);
    m.emplace_back("test_acc_shuffled_ci95", std::vector<double>{r.shuffled->ci.lo, r.shuffled->ci.hi});
  }
  train::write_json_atomic(opt.summary_json, m);
}

// --compare: every encoding × resolution under the same budget.
std::vector<ArrowRun> train_all(const Setup& s, const std::vector<std::string>& labels) {
  std::vector<ArrowRun> runs;
  for (int r : s.res)
    for (const auto& l : labels) {
      nn::VitConfig c = s.cfg;
      c.pe.set("pe", l);
      app::TrainOptions o = s.opt;
      o.save.clear(), o.resume.clear(), o.init_from.clear(), o.predictions.clear();
      if (!s.opt.metrics.empty()) o.metrics = s.opt.metrics + "." + c.pe.label() + "." + std::to_string(r) + ".jsonl";
      runs.push_back(train_one(c, o, s.ao, r, ""));
    }
  return runs;
}

// The comparison table on stdout, and --compare-json, --compare-png, --summary-json.
void report_comparison(const Setup& s, const std::vector<std::string>& labels, const std::vector<ArrowRun>& runs) {
  const app::TrainOptions& opt = s.opt;
  std::cout << "\nArrow task (paper Table 3): test accuracy on " << s.ao.test_n << " held-out samples, 95% bootstrap CI\n"
            << "budget: " << opt.epochs << " epochs x " << s.ao.train_samples << " fresh samples, batch " << opt.batch
            << ", lr " << opt.lr << ", model dim " << s.cfg.dim << " depth " << s.cfg.depth << " heads " << s.cfg.heads
            << "\n\n";
  std::cout << std::left << std::setw(14) << "encoding" << std::setw(6) << "res" << std::setw(10) << "acc %"
            << std::setw(18) << "95% CI" << std::setw(11) << "pe params" << std::setw(10) << "img/s" << "\n";
  for (const auto& r : runs)
    std::cout << std::left << std::setw(14) << r.label << std::setw(6) << r.res << std::setw(10) << app::fmt_pct(r.result.acc)
              << std::setw(18) << (app::fmt_pct(r.result.ci.lo) + " - " + app::fmt_pct(r.result.ci.hi)) << std::setw(11)
              << r.pe_params << std::setw(10) << std::fixed << std::setprecision(1) << r.img_per_s << "\n";

  if (!s.compare.json.empty()) {
    std::string rows = "[";
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& r = runs[i];
      rows += (i ? ",\n  " : "\n  ") +
              train::to_json({{"pe", r.label},
                              {"res", r.res},
                              {"test_acc", r.result.acc},
                              {"test_acc_ci95", std::vector<double>{r.result.ci.lo, r.result.ci.hi}},
                              {"test_loss", r.result.loss},
                              {"pe_params", r.pe_params},
                              {"total_params", r.total_params},
                              {"train_img_per_s", r.img_per_s},
                              {"test_acc_shuffled", r.shuffled ? r.shuffled->acc : NAN}});
    }
    rows += "\n]\n";
    io::write_file_atomic(s.compare.json, rows, {"--compare-json", {}});
    std::cerr << "table: " << s.compare.json << "\n";
  }
  if (!s.compare.png.empty()) {
    std::vector<std::string> groups;
    for (int r : s.res) groups.push_back(std::to_string(r) + "x" + std::to_string(r));
    std::vector<const app::EvalResult*> results;
    for (const auto& r : runs) results.push_back(&r.result);
    app::write_accuracy_chart(s.compare.png, "Arrow task: test accuracy (" + std::to_string(s.ao.test_n) +
                                                 " held-out samples, 95% CI)",
                              "image size", groups, labels, results);
    std::cerr << "chart: " << s.compare.png << "\n";
  }
  if (!opt.summary_json.empty()) {
    train::Metrics m;
    for (const auto& r : runs) {
      const std::string k = r.label + "_" + std::to_string(r.res);
      m.emplace_back("test_acc_" + k, r.result.acc);
      m.emplace_back("test_acc_ci95_" + k, std::vector<double>{r.result.ci.lo, r.result.ci.hi});
    }
    train::write_json_atomic(opt.summary_json, m);
  }
}

}  // namespace

int main(int argc, char** argv) {
  app::Comm::init(&argc, &argv);  // mpirun -np N: data-parallel training (docs/scaling.md)
  return app::run_main("train_arrows", [&] {
    Setup s;
    if (!parse_flags(argc, argv, s)) return 0;

    if (s.opt.dry_run || s.opt.bench_steps > 0) {
      LIERE_USAGE(s.ao.model_res == 0 || s.ao.model_res == s.res[0], "--dry-run and --bench-steps use the model at --res");
      nn::VitConfig cfg = s.cfg;
      cfg.image = {s.res[0], s.res[0]};
      app::dry_run_or_bench(cfg, s.opt, "arrows");
      return 0;
    }
    if (s.compare.list.empty()) {  // one encoding
      LIERE_USAGE(s.res.size() == 1, "several --res values need --compare");
      const ArrowRun r = train_one(s.cfg, s.opt, s.ao, s.res[0], s.attn_maps);
      if (!s.opt.summary_json.empty()) write_summary(s, r);
      return 0;
    }
    const auto labels = s.compare.labels();
    report_comparison(s, labels, train_all(s, labels));
    return 0;
  });
}
