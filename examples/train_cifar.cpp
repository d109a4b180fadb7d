// train_cifar — a ViT with any position encoding on CIFAR-10, CIFAR-100 or Fashion-MNIST (paper §5.1), or on a
// folder of JPEG/PNG images, one folder per class (data_tools/image_folder.hpp).
//
//   train_cifar --data fashion-mnist --model custom --dim 128 --depth 6 --heads 4 --pe liere --block 8
//   train_cifar --data cifar100 --root ~/data/cifar-100-binary --pe rope-mixed --epochs 200
//   train_cifar --data folder --root ~/data/my-photos --image-size 64 --patch 8 --pe liere --block 8
//   train_cifar --pe liere --block 8 --model base --dry-run        # pe_params=64512 …
#include <app/trainer.hpp>
#include <data_tools/augment.hpp>
#include <data_tools/cifar.hpp>
#include <data_tools/idx.hpp>
#include <data_tools/image_folder.hpp>
#include <data_tools/image_ops.hpp>
#include <data_tools/image_set.hpp>

#include <cmath>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <unistd.h>

using namespace liere;

namespace {

constexpr double kMaxImageSize = 8192;  // --image-size: a side above it is a typing error, not an image

struct DataOptions {
  std::string data = "fashion-mnist";
  std::string root;
  double fraction = 1.0;
  std::string augment = "default";
  int test_limit = 0;
  std::vector<int> eval_res;
  bool shuffle_eval = false;
  int image_size = 32;    // --data folder: the side the images are cropped to
  int holdout_every = 10; // --data folder without train/ and val/: every N-th image of a class is a test image
};

// --data folder: root/train and root/val (or root/test) when root/train is a folder, else root itself with
// every holdout_every-th image of each class (in the folder's sorted order, the last of each group of N) held out
// for testing. The two never share an image (scan_image_folder counts each once; val/ may not reach train/'s).
struct FolderSplit {
  data::ImageFolder train, test;
  std::string how;  // for the log
};

FolderSplit split_folder(const DataOptions& d) {
  namespace fs = std::filesystem;
  FolderSplit f;
  if (fs::is_directory(fs::path(d.root) / "train")) {
    const std::string val = fs::is_directory(fs::path(d.root) / "val") ? "val" : "test";
    f.train = data::scan_image_folder(d.root, "train");
    f.test = data::scan_image_folder(d.root, val, f.train.class_names);
    const std::vector<std::string> both = data::image_folder_overlap(f.train, f.test);
    LIERE_ENSURE(both.empty(), "--data folder: " << both.size() << " image(s) of '" << f.test.dir << "' are images of '"
                                                 << f.train.dir << "' too (through links), the first '" << both.front()
                                                 << "': the test accuracy would count images trained on");
    f.how = "train/ and " + val + "/";
    return f;
  }
  const data::ImageFolder all = data::scan_image_folder(d.root);
  f.train.dir = f.test.dir = all.dir;
  f.train.class_names = f.test.class_names = all.class_names;
  for (int i = 0, in_class = 0; i < all.size(); ++i) {
    in_class = (i > 0 && all.labels[std::size_t(i)] == all.labels[std::size_t(i - 1)]) ? in_class + 1 : 0;
    data::ImageFolder& to = (in_class % d.holdout_every == d.holdout_every - 1) ? f.test : f.train;
    to.files.push_back(all.files[std::size_t(i)]);
    to.labels.push_back(all.labels[std::size_t(i)]);
  }
  LIERE_ENSURE(f.test.size() > 0, "--data folder: '" << d.root << "' has fewer than " << d.holdout_every
                                                     << " images in every class, so none is held out for testing "
                                                        "(add train/ and val/ folders, or lower --holdout-every)");
  f.how = "every " + std::to_string(d.holdout_every) + "th image of each class held out";
  return f;
}

struct Normalisation {
  std::vector<float> mean, std;
};

Normalisation normalisation_for(const std::string& data) {
  if (data == "folder") return {{data::kImageNetMean.begin(), data::kImageNetMean.end()}, {data::kImageNetStd.begin(), data::kImageNetStd.end()}};
  if (data == "cifar10") return {{data::kCifar10Mean.begin(), data::kCifar10Mean.end()}, {data::kCifar10Std.begin(), data::kCifar10Std.end()}};
  if (data == "cifar100")
    return {{data::kCifar100Mean.begin(), data::kCifar100Mean.end()}, {data::kCifar100Std.begin(), data::kCifar100Std.end()}};
  return {{data::kFashionMnistMean.begin(), data::kFashionMnistMean.end()},
          {data::kFashionMnistStd.begin(), data::kFashionMnistStd.end()}};
}

data::ImageSet load(const DataOptions& d, bool train) {
  if (d.data == "cifar10") return data::read_cifar10(d.root, train);
  if (d.data == "cifar100") return data::read_cifar100(d.root, train);
  return data::read_fashion_mnist(d.root, train);
}

// This machine's memory in bytes; 0 where the system does not say.
double physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

// --data folder decodes its test images once and a batch of training images every step, as floats: a size that
// cannot fit in this machine's memory is refused before anything is decoded (rather than std::bad_alloc later).
void check_decoded_size(const DataOptions& d, int test_images, int batch) {
  const double image = 3.0 * d.image_size * d.image_size * sizeof(float);
  const double need = image * (double(test_images) + batch), gib = double(1 << 30), have = physical_memory();
  if (have == 0) return;  // unknown: no check
  LIERE_ENSURE(need < have, "--data folder: " << test_images << " test images and a batch of " << batch
                                              << " at --image-size " << d.image_size << " take " << std::fixed
                                              << std::setprecision(1) << need / gib
                                              << " GiB as floats, more than this machine's " << have / gib
                                              << " GiB of memory (lower --image-size, --test-limit or --batch)");
}

// --eval-res R evaluates at R × R: an evaluation batch's attention scores (--eval-batch × heads × T² floats, T the
// tokens of an R × R image) must fit in this machine's memory, or the run would end in std::bad_alloc after training.
void check_eval_res(int res, const nn::VitConfig& cfg, int eval_batch) {
  const double tokens = std::pow(double(res / cfg.patch), 2) + 1, gib = double(1 << 30);
  const double need = double(eval_batch) * cfg.heads * tokens * tokens * sizeof(float), have = physical_memory();
  if (have == 0) return;  // unknown: no check
  LIERE_USAGE(need < have, "--eval-res " << res << ": " << std::fixed << std::setprecision(0) << tokens
                                         << " tokens a test image at --patch " << cfg.patch << "; one evaluation "
                                         << "batch's attention scores take " << std::setprecision(1) << need / gib
                                         << " GiB, more than this machine's " << have / gib
                                         << " GiB of memory (a smaller --eval-res or --eval-batch)");
}

// Everything the command line sets, and what follows from it before any data is read.
struct Setup {
  DataOptions d;
  app::ModelOptions model;
  app::TrainOptions opt;
  nn::VitConfig cfg;                     // the model, with the data's channels, image size and classes
  std::unique_ptr<FolderSplit> images;   // --data folder: the training and test files
};

// The flags, parsed and checked, and the model for the data; false after --help.
bool parse_flags(int argc, char** argv, Setup& s) {
  DataOptions& d = s.d;
  s.model.cfg.patch = 4;
  app::Flags f("train_cifar",
               "Trains a ViT with a chosen position encoding on CIFAR-10/100 or Fashion-MNIST, evaluates it with a\n"
               "bootstrap 95% CI. CIFAR binary files: https://www.cs.toronto.edu/~kriz/cifar.html (see README).\n"
               "--data folder trains on your own JPEG/PNG images: --root DIR with DIR/<class>/*.jpg (every --holdout-every-th\n"
               "image of a class is a test image) or DIR/train/<class>/ and DIR/val/<class>/ (the ImageNet layout).");
  f.section("Data");
  f.add("data", &d.data, "cifar10, cifar100, fashion-mnist or folder (one folder of JPEG/PNG images per class)");
  f.add("root", &d.root, "data directory (default for fashion-mnist: /usr/share/datasets/fashion-mnist)", "DIR");
  f.add("image-size", &d.image_size, "--data folder: images are cropped and resized to this side",
        app::Range{1, kMaxImageSize});
  f.add("holdout-every", &d.holdout_every,
        "--data folder without train/ and val/: every N-th image of a class is for testing", app::Range{2, 1e9});
  f.add("data-fraction", &d.fraction, "train on this fixed-seed, class-stratified fraction (paper Fig. 4)");
  f.add("augment", &d.augment, "none, crop-flip, randaugment (crop, flip, RandAugment(2, 14)); default: "
                               "randaugment for CIFAR, crop-flip for Fashion-MNIST and folders (there the crop is "
                               "RandomResizedCrop, and none is the central 87.5%)");
  f.add("test-limit", &d.test_limit, "evaluate on the first N test images only (0: all)", app::Range{0, 1e9});
  f.add("eval-res", &d.eval_res, "also evaluate at these image sizes (paper Fig. 7), e.g. 24,40,48; with "
                                 "--predictions P also P.test@R.pred");
  f.add_switch("shuffle-eval", &d.shuffle_eval, "also evaluate with the patches shuffled (paper Table 5); with "
                                                "--predictions P also P.test_shuffled.pred");
  s.model.add_flags(f);
  s.opt.add_flags(f);
  if (!f.parse(argc, argv)) return false;
  s.opt.root_writes_files();  // rank 0 writes the files

  LIERE_USAGE(d.data == "cifar10" || d.data == "cifar100" || d.data == "fashion-mnist" || d.data == "folder",
              "--data " << d.data << ": allowed: cifar10, cifar100, fashion-mnist, folder");
  const bool folder = d.data == "folder", fashion = d.data == "fashion-mnist";
  if (d.augment == "default") d.augment = fashion || folder ? "crop-flip" : "randaugment";
  LIERE_USAGE(d.augment == "none" || d.augment == "crop-flip" || d.augment == "randaugment",
              "--augment " << d.augment << ": allowed: none, crop-flip, randaugment");
  nn::VitConfig& cfg = s.cfg;
  cfg = s.model.config();
  s.opt.validate();
  LIERE_USAGE(d.fraction > 0 && d.fraction <= 1, "--data-fraction " << d.fraction << ": expected a fraction in (0, 1]");
  for (int res : d.eval_res) {  // before training, not after it
    LIERE_USAGE(res >= cfg.patch && res % cfg.patch == 0,
                "--eval-res " << res << " is not a positive multiple of the patch size " << cfg.patch);
    check_eval_res(res, cfg, s.opt.eval_batch);
  }
  cfg.channels = fashion ? 1 : 3;
  cfg.image = fashion ? std::vector<int>{28, 28} : std::vector<int>{32, 32};
  if (!folder)
    LIERE_USAGE(cfg.image[0] % cfg.patch == 0, "--patch " << cfg.patch << " does not divide the side of "
                                                          << (fashion ? "Fashion-MNIST's 28" : "CIFAR's 32")
                                                          << " × " << cfg.image[0] << " images");
  cfg.classes = d.data == "cifar100" ? 100 : 10;
  if (folder) {
    if (d.root.empty()) throw app::UsageError("--data folder needs --root DIR (DIR/<class>/*.jpg|png, or DIR/train/ and DIR/val/)");
    LIERE_USAGE(d.image_size % cfg.patch == 0,
                "--image-size " << d.image_size << " is not a multiple of --patch " << cfg.patch);
    LIERE_USAGE(d.fraction == 1.0, "--data-fraction is for the CIFAR and Fashion-MNIST files, not --data folder");
    s.images = std::make_unique<FolderSplit>(split_folder(d));
    const data::ImageFolder& train = s.images->train;
    LIERE_ENSURE(train.num_classes() >= 2, "--data folder: '" << train.dir << "' has one class folder ('"
                                               << train.class_names.front()
                                               << "'): a classifier needs two or more, one folder per class");
    if (d.test_limit > 0 && d.test_limit < s.images->test.size()) {  // before decoding, not after
      s.images->test.files.resize(std::size_t(d.test_limit));
      s.images->test.labels.resize(std::size_t(d.test_limit));
    }
    check_decoded_size(d, s.images->test.size(), s.opt.batch);
    cfg.image = {d.image_size, d.image_size};
    cfg.classes = s.images->train.num_classes();
  }
  return true;
}

// The training and test sets: the files of --data (the whole test set decoded, the training set too but for
// --data folder, whose training images are decoded for every step), --data-fraction and --test-limit applied.
struct Sets {
  data::ImageSet train, test;
};

Sets load_sets(Setup& s) {
  DataOptions& d = s.d;
  const bool folder = d.data == "folder";
  if (d.root.empty()) {
    if (d.data == "fashion-mnist") d.root = data::kFashionMnistSystemDir;
    else throw app::UsageError("--data " + d.data + " needs --root DIR (the directory with the binary files; see README)");
  }
  // --data folder: the training images are decoded and cropped for every step (RandomResizedCrop); the test
  // images once, with the central 87.5% resized to the image size.
  Sets sets;
  data::ImageSet& train = sets.train;
  data::ImageSet& test = sets.test;
  train = folder ? data::ImageSet{} : load(d, true);
  test = folder ? data::load_image_folder(s.images->test, d.image_size, 0.875) : load(d, false);
  if (folder) train.n = s.images->train.size(), train.channels = 3, train.height = train.width = d.image_size;
  if (d.fraction < 1.0) train = data::subset(train, d.fraction, std::uint64_t(s.opt.seed));
  if (d.test_limit > 0 && d.test_limit < test.n) {
    test.n = d.test_limit;
    test.labels.resize(test.n);
    test.pixels.resize(std::size_t(test.n) * test.image_size());
  }
  const nn::VitConfig& cfg = s.cfg;
  for (const auto* set : {&train, &test})  // the readers check their formats; this, that both sets are the model's
    LIERE_ENSURE(set->height == cfg.image[0] && set->width == cfg.image[1] && set->channels == cfg.channels,
                 "--data " << d.data << " (" << d.root << "): the " << (set == &train ? "training" : "test")
                           << " images are " << set->channels << "x" << set->height << "x" << set->width
                           << ", the model expects " << cfg.channels << "x" << cfg.image[0] << "x" << cfg.image[1]);
  std::cerr << "data: " << d.data << " train " << train.n << " test " << test.n << " (" << d.root
            << (folder ? ": " + std::to_string(cfg.classes) + " classes, " + s.images->how : std::string()) << "), augment "
            << d.augment << "\nmodel: " << cfg.describe() << "\npe: " << cfg.pe.describe() << "\n";
  return sets;
}

// The training batches: step s of epoch e takes perm_e[s·B …], perm_e a Fisher–Yates shuffle seeded by (seed, e);
// every image is augmented from (seed, epoch, its index in the data set).
app::TrainData training_data(const Setup& s, const data::ImageSet& train) {
  struct Order {
    std::vector<int> perm;
    int epoch = -1;
  };
  const DataOptions& d = s.d;
  const nn::VitConfig& cfg = s.cfg;
  const int C = cfg.channels, H = cfg.image[0], W = cfg.image[1];
  const std::size_t per = std::size_t(C) * H * W;
  const std::uint64_t seed = std::uint64_t(s.opt.seed);
  const bool folder = d.data == "folder", fashion = d.data == "fashion-mnist";
  const FolderSplit* images = s.images.get();
  app::TrainData td;
  td.steps_per_epoch = train.n / s.opt.batch;
  // Samples [first, first + count) of step `step`'s batch of B (a data-parallel rank's share): sample j is
  // perm[step·B + j], augmented from (seed, epoch, its index in the data set).
  td.fill = [&train, d, C, H, W, per, seed, folder, fashion, images, norm = normalisation_for(d.data),
             order = std::make_shared<Order>()](int epoch, std::int64_t step, int B, int first, int count, float* x, int* y) {
    const data::RandAugment randaug;
    std::vector<int>& perm = order->perm;
    if (order->epoch != epoch) {  // the epoch's order: a Fisher–Yates shuffle seeded by (seed, epoch)
      perm.resize(train.n);
      for (int i = 0; i < train.n; ++i) perm[i] = i;
      std::mt19937_64 g(liere::mix_seed(seed, 1, std::uint64_t(epoch)));
      for (int i = train.n - 1; i > 0; --i) std::swap(perm[i], perm[liere::below(g, std::uint64_t(i) + 1)]);
      order->epoch = epoch;
    }
    std::exception_ptr error;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < count; ++i) {
      const int idx = perm[std::size_t(step) * B + first + i];
      std::mt19937_64 g(liere::mix_seed(seed, 2, std::uint64_t(epoch) * train.n + std::uint64_t(idx)));
      std::vector<std::uint8_t> img(per);
      if (folder) {  // decoded now; RandomResizedCrop, flip, RandAugment, or the central crop for --augment none
        try {
          if (d.augment == "none") {
            y[i] = data::load_image_eval(images->train, idx, H, img.data(), 0.875);
          } else {
            y[i] = data::load_image_train(images->train, idx, H, g, img.data());
            data::random_hflip(img.data(), C, H, W, g);
            if (d.augment == "randaugment") randaug(img.data(), C, H, W, g);
          }
        } catch (...) {  // a bad image: the error names the file; rethrown after the loop
#pragma omp critical(train_cifar_error)
          if (!error) error = std::current_exception();
          continue;
        }
        data::normalize(img.data(), x + std::size_t(i) * per, C, H, W, norm.mean, norm.std);
        continue;
      }
      const std::uint8_t* src = train.image(idx);
      if (d.augment == "none") {
        std::copy(src, src + per, img.begin());
      } else {
        data::random_crop(src, img.data(), C, H, W, fashion ? 2 : 4, g);
        data::random_hflip(img.data(), C, H, W, g);
        if (d.augment == "randaugment") randaug(img.data(), C, H, W, g);
      }
      data::normalize(img.data(), x + std::size_t(i) * per, C, H, W, norm.mean, norm.std);
      y[i] = train.labels[idx];
    }
    if (error) std::rethrow_exception(error);
  };
  return td;
}

// The test set at image size `res` (resized bilinearly from the model's), with its patches shuffled when asked
// (the permutation of every image drawn from (seed, 3)).
app::EvalData eval_data(const Setup& s, const data::ImageSet& test, int res, bool shuffled) {
  const nn::VitConfig& cfg = s.cfg;
  const int C = cfg.channels, H = cfg.image[0], W = cfg.image[1];
  const std::size_t per = std::size_t(C) * H * W;
  app::EvalData e;
  e.n = test.n;
  e.labels = test.labels;
  e.size = {res, res};
  e.name = "test";
  if (res != H) e.name += "@" + std::to_string(res);
  if (shuffled) e.name += "_shuffled", e.shuffle_patch = cfg.patch, e.shuffle_seed = liere::mix_seed(std::uint64_t(s.opt.seed), 3);
  e.fill = [&test, C, H, W, per, res, norm = normalisation_for(s.d.data)](int first, int count, float* x) {
    std::vector<float> tmp(per);
    for (int i = 0; i < count; ++i) {
      if (res == H) {
        data::normalize(test.image(first + i), x + std::size_t(i) * per, C, H, W, norm.mean, norm.std);
      } else {
        data::normalize(test.image(first + i), tmp.data(), C, H, W, norm.mean, norm.std);
        data::resize_bilinear(tmp.data(), C, H, W, x + std::size_t(i) * C * res * res, res, res);
      }
    }
  };
  return e;
}

// --shuffle-eval and --eval-res: the extra evaluations, printed, their predictions written, added to the summary.
void extra_evaluations(const Setup& s, app::Trainer& t, const data::ImageSet& test, train::Metrics& summary) {
  const app::TrainOptions& opt = s.opt;
  auto one = [&](const app::EvalData& e, const std::string& key) {
    const auto r = t.evaluate(e);
    app::print_result(r);
    if (!opt.predictions.empty())
      train::write_predictions(app::predictions_path_for(opt.predictions, r.name), r.labels, r.preds);
    summary.emplace_back(key, r.acc);
    summary.emplace_back(key + "_ci95", std::vector<double>{r.ci.lo, r.ci.hi});
  };
  if (s.d.shuffle_eval) one(eval_data(s, test, s.cfg.image[0], true), "test_acc_shuffled");
  for (int res : s.d.eval_res) one(eval_data(s, test, res, false), "test_acc_res_" + std::to_string(res));
}

}  // namespace

int main(int argc, char** argv) {
  app::Comm::init(&argc, &argv);  // mpirun -np N: data-parallel training (docs/scaling.md)
  return app::run_main("train_cifar", [&] {
    Setup s;
    if (!parse_flags(argc, argv, s)) return 0;
    if (app::dry_run_or_bench(s.cfg, s.opt, s.d.data)) return 0;  // they need no data

    const Sets sets = load_sets(s);
    app::Trainer t(s.cfg, s.opt, s.d.data);
    std::cerr << t.dry_run_line() << "\n";
    const app::EvalResult r = t.fit(training_data(s, sets.train), eval_data(s, sets.test, s.cfg.image[0], false));
    app::print_result(r);
    train::Metrics summary = app::summary_fields(t, r);
    summary.emplace_back("data", s.d.data);
    summary.emplace_back("data_fraction", s.d.fraction);
    summary.emplace_back("train_n", sets.train.n);
    extra_evaluations(s, t, sets.test, summary);
    if (!s.opt.predictions.empty()) train::write_predictions(s.opt.predictions, r.labels, r.preds);
    if (!s.opt.summary_json.empty()) train::write_json_atomic(s.opt.summary_json, summary);
    return 0;
  });
}
