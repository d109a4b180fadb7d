// train_ucf101 — video classification with a ViViT-style ViT (paper §5.3, Table 1): 3D tubelets (default 2×16×16,
// as the paper) and 3D positions (t, h, w) for every encoding — LieRE with Dim 3, RoPE-Mixed and VisionLlama in 3D,
// the absolute table (trilinear interpolation on other grids). Data: UCF101 (or any folder in its layout) decoded
// through FFmpeg, with a disk cache of decoded clips so that epochs after the first do not decode; without --root,
// the synthetic passing task (data_tools/moving_objects.hpp) is written as video clips in the UCF101 layout and read
// back through the same reader, so the default run needs no download.
//
//   train_ucf101                                            # passing task: abs vs liere8, paired bootstrap
//   train_ucf101 --root ~/data/UCF101 --split 1 --pe liere --block 8 --epochs 30 --save ucf.safetensors
//   train_ucf101 --root ~/data/UCF101 --dry-run             # decodes the first clip and runs one forward pass
//   train_ucf101 --compare abs,visionllama,rope-mixed,liere8 --compare-json t.json --compare-png t.png
//   train_ucf101 --root ~/data/UCF101 --bench-data 64       # decode, cache-write and cache-read clips/s
#include <app/compare.hpp>
#include <app/trainer.hpp>
#include <data_tools/augment.hpp>
#include <data_tools/moving_objects.hpp>
#include <data_tools/ucf101.hpp>
#include <liere/io/atomic_file.hpp>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

using namespace liere;
namespace fs = std::filesystem;

namespace {

// C channels (3), T frames, S the side of the square frames, B batch.

// How clip bytes become model inputs (--normalise). imagenet: per channel (v/255 − mean) / std with ImageNet's
// mean and standard deviation (VideoMAE's normalisation for UCF101). unit: v/255, so black is 0, as train_arrows
// feeds ink. The synthetic clips are 97% black background: ImageNet's statistics turn it into −2.1, −2.0, −1.8
// per channel, every tubelet's embedding is then dominated by the same background vector and the squares are a
// small change on top of it (a dim-64 ViT did not even memorise 64 clips in 240 steps that way; docs/video.md).
enum class Normalise { imagenet, unit };
constexpr std::array<float, 3> kMean = data::kImageNetMean, kStd = data::kImageNetStd;

// count clips (count, C, T, S, S) of bytes → floats.
void normalise(const std::uint8_t* px, int count, std::size_t plane, float* x, Normalise mode) {  // plane: T·S·S
  for (int b = 0; b < count; ++b)
    for (int c = 0; c < 3; ++c) {
      const std::size_t o = (std::size_t(b) * 3 + std::size_t(c)) * plane;
      const bool in = mode == Normalise::imagenet;
      const float inv = in ? 1.0f / (255.0f * kStd[c]) : 1.0f / 255.0f, m = in ? kMean[c] / kStd[c] : 0.0f;
      for (std::size_t i = 0; i < plane; ++i) x[o + i] = float(px[o + i]) * inv - m;
    }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct VideoOptions {
  std::string root, lists, cache = "auto", data_dir;
  int split = 1;
  int frames = 0, stride = 0, size = 0;  // 0: the data's default
  bool skip_bad_clips = false;
  int bench_data = 0;
  std::string normalise = "auto";  // imagenet, unit, or auto: imagenet with --root, unit without
  Normalise norm() const {
    return normalise == "imagenet" || (normalise == "auto" && !root.empty()) ? Normalise::imagenet : Normalise::unit;
  }
  // the synthetic passing task (without --root)
  int syn_train = 768, syn_test = 512, syn_classes = 4, syn_distractors = 2;
  double syn_noise = 0;
  std::int64_t syn_seed = 0;
  bool synthetic() const { return root.empty(); }
};

// ---- the synthetic task on disk -----------------------------------------------------------------------------

// "key value…" lines of passing_task.txt.
std::map<std::string, std::string> read_task_file(const fs::path& p) {
  std::map<std::string, std::string> kv;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp != std::string::npos) kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return kv;
}

// Writes the passing task (the clips have (T − 1)·stride + 1 frames, so that --stride samples T of them) under
// --data-dir, or under <tmp>/liere-passing-<hash of the task>, and returns that folder. A folder that already holds
// the same task (its passing_task.txt, written last, says so) is reused; one that holds another task is an error.
std::string prepare_synthetic(const VideoOptions& vo, int T, int stride, int S) {
  data::PassingTaskConfig task;
  task.frames = (T - 1) * stride + 1;
  task.size = S;
  task.num_classes = vo.syn_classes;
  task.distractors = vo.syn_distractors;
  task.noise = vo.syn_noise;
  task.seed = std::uint64_t(vo.syn_seed);
  data::check_passing_config(task);
  const data::VideoWriteOptions video;  // MJPEG 4:4:4, quality 2
  std::ostringstream id;
  id << task.frames << ' ' << S << ' ' << task.num_classes << ' ' << task.distractors << ' ' << task.noise << ' '
     << task.seed << ' ' << vo.syn_train << ' ' << vo.syn_test;
  std::uint64_t h = 0;
  for (char c : id.str()) h = liere::hash_u64(h, std::uint64_t(static_cast<unsigned char>(c)));
  std::ostringstream name;
  name << "liere-passing-" << std::hex << std::setw(16) << std::setfill('0') << h;
  const fs::path dir = vo.data_dir.empty() ? fs::temp_directory_path() / name.str() : fs::path(vo.data_dir);

  const fs::path about = dir / "passing_task.txt";
  if (fs::exists(about)) {
    auto kv = read_task_file(about);
    auto same = [&](const std::string& k, const std::string& v) { return kv.count(k) && kv[k] == v; };
    auto prefix = [&](const std::string& k, int n) { return kv.count(k) && kv[k].rfind(std::to_string(n) + " ", 0) == 0; };
    const bool match = same("frames", std::to_string(task.frames)) && same("size", std::to_string(S)) &&
                       same("num_classes", std::to_string(task.num_classes)) &&
                       same("distractors", std::to_string(task.distractors)) && kv.count("noise") &&
                       std::atof(kv["noise"].c_str()) == task.noise && same("seed", std::to_string(task.seed)) &&
                       prefix("train", vo.syn_train) && prefix("test", vo.syn_test) &&
                       same("codec", data::codec_name(video.codec)) && same("quality", std::to_string(video.quality));
    LIERE_ENSURE(match, "--data-dir " << dir.string() << " holds another synthetic task (see " << about.string()
                                      << "); choose another folder or delete it");
    std::cerr << "synthetic passing task: reusing " << dir.string() << "\n";
    return dir.string();
  }
  std::cerr << "synthetic passing task: writing " << vo.syn_train << " training and " << vo.syn_test << " test clips ("
            << task.num_classes << " classes, " << task.frames << " frames of " << S << "x" << S << ", "
            << task.distractors << " distractors, seed " << task.seed << ") to " << dir.string() << " ...\n";
  const auto t0 = std::chrono::steady_clock::now();
  const int n = data::write_passing_ucf101(task, dir.string(), vo.syn_train, vo.syn_test, video);
  std::cerr << "  " << n << " clips in " << std::fixed << std::setprecision(1) << seconds_since(t0) << " s\n"
            << std::defaultfloat;
  return dir.string();
}

// The clip cache folder: --cache none: none; auto: <data dir>/clip_cache for the synthetic task, else
// $XDG_CACHE_HOME/liere/clips (~/.cache/liere/clips); else the folder given.
std::string cache_dir_for(const VideoOptions& vo, const std::string& root) {
  if (vo.cache == "none") return "";
  if (vo.cache != "auto") return vo.cache;
  if (vo.synthetic()) return (fs::path(root) / "clip_cache").string();
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "liere" / "clips").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "liere" / "clips").string();
  return (fs::temp_directory_path() / "liere-clips").string();
}

data::Ucf101Options set_options(const VideoOptions& vo, int T, int stride, int S, bool train, const std::string& cache) {
  data::Ucf101Options o;
  o.split = vo.split;
  o.train = train;
  o.clip.sampling = {data::SampleMode::Stride, T, stride, data::kCenterOffset};
  o.clip.size = S;
  o.clip.resize = data::ResizeMode::CenterCrop;
  o.lists_dir = vo.lists;
  o.cache_dir = cache;
  o.skip_bad_clips = vo.skip_bad_clips;
  return o;
}

// ---- one run ---------------------------------------------------------------------------------------------------

struct VideoSets {
  std::unique_ptr<data::Ucf101> train, test;
  std::vector<int> test_index;   // the test clips evaluated (all of them, or the good ones with --skip-bad-clips)
  std::vector<int> test_labels;  // their labels
  std::string name;              // "ucf101" or "passing"
  Normalise norm = Normalise::imagenet;
};

// With --skip-bad-clips, every test clip is loaded once (filling the cache) and those that fail are reported and
// left out of the test set, so that every evaluation scores the same clips; without it, a bad clip stops the run
// with an error naming the file when it is first loaded.
void index_test_set(VideoSets& d) {
  const data::Ucf101& t = *d.test;
  if (!t.options().skip_bad_clips) {
    for (int i = 0; i < t.size(); ++i) d.test_index.push_back(i), d.test_labels.push_back(t.entry(i).label);
    return;
  }
  std::vector<std::uint8_t> buf(t.clip_bytes());
  train::ProgressBar bar(t.size(), "checking test clips");
  for (int i = 0; i < t.size(); ++i) {
    t.load(i, buf.data());
    if (!t.failed(i)) d.test_index.push_back(i), d.test_labels.push_back(t.entry(i).label);
    bar.add_items(1);
    bar.update(i + 1);
  }
  bar.finish();
  LIERE_ENSURE(!d.test_index.empty(), "every test clip failed to load (see the messages above)");
}

struct VideoRun {
  std::string label;
  app::EvalResult result;
  std::int64_t pe_params = 0, total_params = 0;
  double clips_per_s = 0, load_seconds = 0, train_seconds = 0;
  std::int64_t clips_loaded = 0;
};

VideoRun train_one(const nn::VitConfig& cfg, const app::TrainOptions& opt, const VideoSets& d) {
  app::Trainer t(cfg, opt, d.name);
  std::cerr << "\n== " << cfg.pe.label() << ": " << cfg.describe() << "\n   " << cfg.pe.describe() << "\n   "
            << t.dry_run_line() << "\n";
  const data::Ucf101& tr = *d.train;
  const std::size_t bytes = tr.clip_bytes(), plane = bytes / 3;
  // The clips' bytes, for the training fills (on the loader thread with --prefetch) and the evaluation's: fit never
  // evaluates while a fill runs (nothing is filled ahead at an epoch's last step), so one buffer serves both.
  std::vector<std::uint8_t> px(bytes * std::size_t(std::max(opt.batch, opt.eval_batch)));
  std::vector<int> perm, idx(std::size_t(opt.batch));
  int perm_epoch = -1;
  double load_s = 0;
  std::int64_t loaded = 0;

  app::TrainData td;
  td.steps_per_epoch = tr.size() / opt.batch;
  // Samples [first, first + count) of step `step`'s batch of B (a data-parallel rank's share): sample j is clip
  // perm[step·B + j].
  td.fill = [&](int epoch, std::int64_t step, int B, int first, int count, float* x, int* y) {
    if (perm_epoch != epoch) {  // the epoch's order: a Fisher–Yates shuffle seeded by (seed, epoch)
      perm.resize(std::size_t(tr.size()));
      for (int i = 0; i < tr.size(); ++i) perm[std::size_t(i)] = i;
      std::mt19937_64 g(liere::mix_seed(std::uint64_t(opt.seed), 1, std::uint64_t(epoch)));
      for (int i = tr.size() - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[liere::below(g, std::uint64_t(i) + 1)]);
      perm_epoch = epoch;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) idx[std::size_t(i)] = perm[std::size_t(step) * B + first + i];
    tr.load_batch(idx.data(), count, px.data(), y);
    normalise(px.data(), count, plane, x, d.norm);
    load_s += seconds_since(t0);
    loaded += count;
  };

  app::EvalData test;
  test.name = "test";
  test.n = int(d.test_index.size());
  test.size = {cfg.image[0], cfg.image[1], cfg.image[2]};
  test.labels = d.test_labels;
  std::vector<int> got(std::size_t(opt.eval_batch));
  test.fill = [&](int first, int count, float* x) {
    d.test->load_batch(d.test_index.data() + first, count, px.data(), got.data());
    for (int i = 0; i < count; ++i)
      LIERE_ENSURE(got[std::size_t(i)] == d.test_labels[std::size_t(first + i)],
                   "test clip '" << d.test->clip_path(d.test_index[std::size_t(first + i)])
                                 << "' failed to load during the run (it loaded before)");
    normalise(px.data(), count, plane, x, d.norm);
  };

  VideoRun run;
  run.label = cfg.pe.label();
  run.result = t.fit(td, test, /*eval_every_epoch=*/true);
  run.pe_params = t.pe_params();
  run.total_params = t.total_params();
  run.clips_per_s = t.train_img_per_s();
  run.load_seconds = load_s;
  run.clips_loaded = loaded;
  // (In a data-parallel run `loaded` counts this rank's share, clips_per_s every rank's.)
  run.train_seconds = double(loaded) * app::Comm::world().size() / std::max(1e-9, run.clips_per_s);
  app::print_result(run.result);
  const auto cs = tr.cache_stats();
  std::cerr << "training data" << (app::Comm::world().distributed() ? " (rank 0's share)" : "") << ": " << loaded
            << " clips loaded in " << std::fixed << std::setprecision(2) << load_s
            << " s (" << std::setprecision(1) << loaded / std::max(1e-9, load_s) << " clips/s, "
            << 100 * load_s / std::max(1e-9, run.train_seconds) << "% of the training time"
            << (opt.prefetch_on(t.device()) ? ", overlapped with the steps by the loader thread" : "")
            << "); the trainer consumed "
            << run.clips_per_s << " clips/s; training-set cache so far: " << cs.hits << " hits, " << cs.misses << " misses, " << cs.writes
            << " writes\n"
            << std::defaultfloat;
  return run;
}

// ---- --bench-data: decoding vs the cache ----------------------------------------------------------------------

// Decodes the first n training clips (FFmpeg + resize + normalisation, one thread, no cache), writes them to a
// scratch cache, reads them back from it, and prints clips/s of each.
void bench_data(const VideoOptions& vo, int T, int stride, int S, const std::string& root) {
  const fs::path scratch = fs::temp_directory_path() / ("liere-bench-cache-" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  data::Ucf101 plain(root, set_options(vo, T, stride, S, true, ""));
  data::Ucf101 cached(root, set_options(vo, T, stride, S, true, scratch.string()));
  const int n = std::min(vo.bench_data, plain.size());
  const std::size_t bytes = plain.clip_bytes();
  std::vector<std::uint8_t> px(bytes);
  std::vector<float> x(bytes);
  // clips/s by the wall clock and by this process's CPU time (one thread: the same on an idle machine; on a shared
  // one the CPU time is the one-core figure).
  auto pass = [&](const data::Ucf101& set, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    for (int i = 0; i < n; ++i) {
      set.load(i, px.data());
      normalise(px.data(), 1, bytes / 3, x.data(), vo.norm());
    }
    const double s = seconds_since(t0), cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    std::cout << what << ": " << n << " clips in " << std::fixed << std::setprecision(3) << s << " s wall, " << cpu
              << " s CPU = " << std::setprecision(1) << n / s << " clips/s wall, " << n / std::max(1e-9, cpu)
              << " clips/s CPU\n"
              << std::defaultfloat;
    return n / std::max(1e-9, cpu);
  };
  std::cout << "clips " << T << " frames (stride " << stride << ") of " << S << "x" << S << " from "
            << plain.layout().videos_dir << ", one thread, " << data::ffmpeg_versions() << "\n";
  const double dec = pass(plain, "decode+preprocess (no cache)");
  const double wr = pass(cached, "decode+preprocess+cache write");
  const double rd = pass(cached, "cache read+preprocess");
  const auto cs = cached.cache_stats();
  std::cout << std::fixed << std::setprecision(1) << "(CPU time) data_decode_clips_per_s=" << dec << " data_cache_write_clips_per_s=" << wr
            << " data_cache_read_clips_per_s=" << rd << " cache_hits=" << cs.hits << " cache_misses=" << cs.misses
            << "\n";
  fs::remove_all(scratch);
}

// ---- the command line -------------------------------------------------------------------------------------------

// Everything the command line sets, and the defaults that follow from the data (--root or not).
struct Setup {
  VideoOptions vo;
  app::ModelOptions model;
  app::TrainOptions opt;
  app::CompareOptions compare;
  int T = 0, stride = 0, S = 0;  // frames, frame stride, frame side
  nn::VitConfig cfg;              // the model; classes: the data's, set when the sets are opened
  std::string name() const { return vo.synthetic() ? "passing" : "ucf101"; }
};

// The flags, parsed and checked, the data's defaults filled in; false after --help.
bool parse_flags(int argc, char** argv, Setup& s) {
  VideoOptions& vo = s.vo;
  app::TrainOptions& opt = s.opt;
  opt.epochs = 0;  // 0: the data's default (below)
  opt.batch = 32;
  opt.lr = 1e-3;
  opt.wd = 0.05;
  opt.warmup = 1;
  opt.eval_batch = 64;
  app::ModelOptions& m = s.model;
  m.model = "auto";
  m.model_help = "tiny, small, base or custom (auto: tiny with --root; without, custom dim 64, depth 4, heads 2, mlp 128)";
  m.cfg.patch = 0;  // 0: the data's default
  m.patch_help = "spatial patch size (0: 16 with --root, 8 without)";
  m.cfg.tubelet = 2;
  const std::string default_compare = "abs,liere8";

  app::Flags f("train_ucf101",
               "Trains a ViViT-style ViT (3D tubelets, 3D positions for every encoding) on UCF101 or any folder in\n"
               "its layout, decoded through FFmpeg with a disk cache of decoded clips, and evaluates it with a\n"
               "bootstrap 95% CI. Without --root it writes the synthetic passing task (coloured squares pass a white\n"
               "one; the label needs the direction of travel, see data_tools/moving_objects.hpp) as clips in the\n"
               "UCF101 layout and trains on them; without --pe or --compare it then runs --compare " + default_compare +
               ".\nUCF101: https://www.crcv.ucf.edu/data/UCF101.php (UCF101.rar and the train/test split zip).\n"
               "Some defaults depend on whether --root is given; so does --epochs 0: 30 with --root, 20 without.");
  f.section("Data");
  f.add("root", &vo.root,
        "UCF101 folder: holds UCF-101/<Class>/*.avi (or the class folders) and ucfTrainTestlist/ (or see --lists); "
        "none: the synthetic task", "DIR");
  f.add("lists", &vo.lists, "the folder of classInd.txt, trainlist0N.txt, testlist0N.txt (default: found from --root)", "DIR");
  f.add("split", &vo.split, "UCF101 train/test split: 1, 2 or 3");
  f.add("frames", &vo.frames, "frames per clip, T (0: 16 with --root, 8 without)", app::Range{0, 1024});
  f.add("stride", &vo.stride, "frames between two sampled frames, the span centred in the clip (0: 4 with --root, 1 without)",
        app::Range{0, 1024});
  f.add("size", &vo.size, "frame side S: the shorter side scaled to S, the centre cropped (0: 112 with --root, 32 without)",
        app::Range{0, 4096});
  f.add("cache", &vo.cache,
        "folder of decoded clips (none: decode every time; auto: <data dir>/clip_cache for the synthetic task, "
        "else $XDG_CACHE_HOME/liere/clips or ~/.cache/liere/clips)", "DIR");
  f.add("normalise", &vo.normalise,
        "input pixels: imagenet ((v/255 - mean)/std per channel, ImageNet's) or unit (v/255, black = 0); auto: "
        "imagenet with --root, unit without");
  f.add_switch("skip-bad-clips", &vo.skip_bad_clips,
               "report and skip clips that are missing or fail to decode (default: an error naming the file)");
  f.add("bench-data", &vo.bench_data, "time decoding, cache writes and cache reads of N training clips (one thread), exit");
  f.section("Synthetic task (without --root)");
  f.add("data-dir", &vo.data_dir, "where the clips are written (default: <tmp>/liere-passing-<hash of the task>; reused "
                                  "when it holds the same task)", "DIR");
  // The ranges of make_video_task's flags, which write the same task (data_tools/moving_objects.hpp).
  f.add("synthetic-train", &vo.syn_train, "training clips", app::Range{1, 10000000});
  f.add("synthetic-test", &vo.syn_test, "test clips", app::Range{1, 10000000});
  f.add("synthetic-classes", &vo.syn_classes, "2, 4 or 8 (1, 2 or 3 movers)", app::Range{2, 8});
  f.add("synthetic-distractors", &vo.syn_distractors, "squares that do not change the label", app::Range{0, 16});
  f.add("synthetic-noise", &vo.syn_noise, "uniform background noise, 0 to 64 grey levels", app::Range{0, 64});
  f.add("synthetic-seed", &vo.syn_seed, "seed of the task (the training order and the model use --seed)");
  m.add_flags(f);
  s.compare.add_flags(f, "Comparison", "abs,visionllama,rope-mixed,liere8",
                      "the comparison table (with paired bootstrap p-values) as JSON");
  opt.add_flags(f);
  if (!f.parse(argc, argv)) return false;
  opt.root_writes_files();  // rank 0 writes the files
  s.compare.root_writes_files();

  // Defaults that depend on the data.
  const bool syn = vo.synthetic();
  const int T = s.T = vo.frames ? vo.frames : syn ? 8 : 16;
  const int stride = s.stride = vo.stride ? vo.stride : syn ? 1 : 4;
  const int S = s.S = vo.size ? vo.size : syn ? 32 : 112;
  if (m.cfg.patch == 0) m.cfg.patch = syn ? 8 : 16;
  if (opt.epochs == 0) opt.epochs = syn ? 20 : 30;
  if (m.model == "auto") {
    m.model = syn ? "custom" : "tiny";
    if (syn) m.cfg.dim = 64, m.cfg.depth = 4, m.cfg.heads = 2, m.cfg.mlp_hidden = 128;
  }
  nn::VitConfig& cfg = s.cfg;
  cfg = m.config();
  opt.validate();
  LIERE_USAGE(vo.normalise == "auto" || vo.normalise == "imagenet" || vo.normalise == "unit",
              "--normalise " << vo.normalise << ": allowed: auto, imagenet, unit");
  LIERE_USAGE(vo.split >= 1 && vo.split <= 3, "--split " << vo.split << ": allowed: 1, 2, 3");
  LIERE_USAGE(!syn || vo.split == 1, "--split " << vo.split << ": the synthetic task has split 1 only");
  LIERE_USAGE(T >= 1 && stride >= 1 && S >= 1, "--frames, --stride and --size must be >= 1");
  LIERE_USAGE(cfg.tubelet >= 1 && T % cfg.tubelet == 0,
              "--frames " << T << " is not a multiple of --tubelet " << cfg.tubelet);
  LIERE_USAGE(S % cfg.patch == 0, "--size " << S << " is not a multiple of --patch " << cfg.patch);
  LIERE_USAGE(vo.syn_classes == 2 || vo.syn_classes == 4 || vo.syn_classes == 8,
              "--synthetic-classes " << vo.syn_classes << ": allowed: 2, 4, 8");
  // The synthetic task's clips (prepare_synthetic): (T − 1)·stride + 1 frames, 2 to 1024, of 16 to 1024 pixels a
  // side (make_video_task's --frames, --size).
  const long clip = long(T - 1) * stride + 1;
  LIERE_USAGE(!syn || (clip >= 2 && clip <= 1024),
              "--frames " << T << " --stride " << stride << ": the synthetic clips would have (T − 1)·stride + 1 = "
                          << clip << " frames; the task has 2 to 1024");
  LIERE_USAGE(!syn || (S >= 16 && S <= 1024), "--size " << S << ": the synthetic task's frames are 16 to 1024 pixels");
  LIERE_USAGE(vo.bench_data >= 0, "--bench-data must be >= 0");
  cfg.channels = 3;
  cfg.image = {T, S, S};
  cfg.classes = syn ? vo.syn_classes : 101;
  LIERE_USAGE(s.compare.list.empty() || opt.init_from.empty(), "--init-from fine-tunes one model: not with --compare");
  if (syn) s.compare.default_to(f, default_compare);
  s.compare.validate(f, opt, cfg.pe);
  return true;
}

// ---- the modes that do not train -------------------------------------------------------------------------------

// A clip in both lists is said (the test accuracy would count clips trained on). UCF101's own lists never share
// one; the tests' tiny data sets do on purpose, and so may a user's own lists, knowingly.
void check_disjoint(const data::Ucf101& train, const data::Ucf101& test) {
  const std::vector<std::string> both = data::ucf101_overlap(train.entries(), test.entries());
  if (both.empty()) return;
  const int split = train.options().split;
  std::cerr << "warning: UCF101 split " << split << ": " << both.size()
            << (both.size() == 1 ? " clip is" : " clips are") << " in both " << data::ucf101_list_name(split, true) << " and " << data::ucf101_list_name(split, false)
            << " (in " << train.layout().lists_dir << "), the first '" << both.front()
            << "': the test accuracy counts clips the model trained on\n";
}

// --dry-run: the model; with --root also the data: the lists, the first training clip decoded and one forward pass.
void dry_run(const Setup& s) {
  if (s.vo.synthetic()) {
    app::dry_run_or_bench(s.cfg, s.opt, "passing");
    return;
  }
  const VideoOptions& vo = s.vo;
  const int T = s.T, S = s.S;
  data::Ucf101 tr(vo.root, set_options(vo, T, s.stride, S, true, ""));
  data::Ucf101 te(vo.root, set_options(vo, T, s.stride, S, false, ""));
  check_disjoint(tr, te);
  nn::VitConfig cfg = s.cfg;
  cfg.classes = tr.num_classes();
  app::Trainer t(cfg, s.opt, "ucf101");
  std::cout << cfg.describe() << "\n" << cfg.pe.describe() << "\n" << t.dry_run_line() << "\n";
  std::cout << "data: " << tr.layout().videos_dir << " (lists " << tr.layout().lists_dir << "), split " << vo.split
            << ": " << tr.size() << " training and " << te.size() << " test clips, " << tr.num_classes()
            << " classes\n";
  const auto t0 = std::chrono::steady_clock::now();
  Tensor x(Shape{1, 3, T, S, S});
  std::vector<std::uint8_t> px(tr.clip_bytes());
  const int label = tr.load(0, px.data());
  const double ms = 1000 * seconds_since(t0);
  normalise(px.data(), 1, px.size() / 3, x.data(), vo.norm());
  Tape tape;
  auto _ = tape.no_grad();
  tape.set_training(false);
  Var xv(x);
  Var logits = t.model().forward(tape, xv);
  const double loss = ops::cross_entropy(tape, logits, std::vector<int>{label}).item();
  LIERE_ENSURE(std::isfinite(loss), "the forward pass of the first clip gave a loss of " << loss);
  std::cout << "first training clip: " << tr.clip_path(0) << " (class " << tr.class_names()[std::size_t(label)]
            << ") decoded to 3x" << T << "x" << S << "x" << S << " in " << std::fixed << std::setprecision(1) << ms
            << " ms; forward pass: loss " << std::setprecision(4) << loss << "\n";
}

// ---- the data --------------------------------------------------------------------------------------------------

// The folder the clips are read from: --root, or the synthetic task, written once, by rank 0 (no deadline: writing
// it may take minutes); the others reuse it.
std::string data_root(const Setup& s) {
  app::Comm& comm = app::Comm::world();
  const bool syn = s.vo.synthetic();
  if (syn && comm.distributed() && comm.root()) prepare_synthetic(s.vo, s.T, s.stride, s.S);
  comm.barrier("waiting for rank 0 to write the synthetic task", 0);
  return syn ? prepare_synthetic(s.vo, s.T, s.stride, s.S) : s.vo.root;
}

// The training and test sets at `root`, the test set indexed (index_test_set); the model's classes the data's.
VideoSets open_sets(Setup& s, const std::string& root) {
  const VideoOptions& vo = s.vo;
  VideoSets d;
  d.name = s.name();
  d.norm = vo.norm();
  const std::string cache = cache_dir_for(vo, root);
  d.train = std::make_unique<data::Ucf101>(root, set_options(vo, s.T, s.stride, s.S, true, cache));
  d.test = std::make_unique<data::Ucf101>(root, set_options(vo, s.T, s.stride, s.S, false, cache));
  LIERE_ENSURE(d.train->class_names() == d.test->class_names(), "the training and test sets have different classes");
  check_disjoint(*d.train, *d.test);
  s.cfg.classes = d.train->num_classes();
  index_test_set(d);
  LIERE_ENSURE(d.train->size() >= s.opt.batch, "the training set has " << d.train->size() << " clips, fewer than one batch ("
                                                                        << s.opt.batch << "); lower --batch");
  std::cerr << "data: " << d.train->layout().videos_dir << ", split " << vo.split << ": " << d.train->size()
            << " training and " << d.test_index.size() << " test clips, " << s.cfg.classes << " classes; clips " << s.T
            << " frames (stride " << s.stride << ") of " << s.S << "x" << s.S << "; cache "
            << (cache.empty() ? std::string("none") : cache) << "\n";
  return d;
}

// The summary fields that describe the data.
void add_data_summary(train::Metrics& m, const Setup& s, const VideoSets& d, const std::string& root) {
  m.emplace_back("data", d.name);
  m.emplace_back("root", root);
  m.emplace_back("split", s.vo.split);
  m.emplace_back("frames", s.T);
  m.emplace_back("stride", s.stride);
  m.emplace_back("size", s.S);
  m.emplace_back("normalise", s.vo.norm() == Normalise::imagenet ? "imagenet" : "unit");
  m.emplace_back("train_n", d.train->size());
  m.emplace_back("skipped_clips", int(d.train->skipped().size() + d.test->skipped().size()));
}

// ---- one encoding, or --compare ------------------------------------------------------------------------------

// One encoding: its predictions and --summary-json.
void train_single(const Setup& s, const VideoSets& d, const std::string& root) {
  const app::TrainOptions& opt = s.opt;
  const VideoRun r = train_one(s.cfg, opt, d);
  if (!opt.predictions.empty()) train::write_predictions(opt.predictions, r.result.labels, r.result.preds);
  if (opt.summary_json.empty()) return;
  train::Metrics m = {{"test_acc", r.result.acc},
                      {"test_acc_ci95", std::vector<double>{r.result.ci.lo, r.result.ci.hi}},
                      {"test_loss", r.result.loss},
                      {"test_n", int(r.result.correct.size())},
                      {"pe", s.cfg.pe.label()},
                      {"pe_config", s.cfg.pe.describe()},
                      {"model", s.cfg.describe()},
                      {"pe_params", r.pe_params},
                      {"total_params", r.total_params},
                      {"train_clips_per_s", r.clips_per_s},
                      {"data_load_seconds", r.load_seconds},
                      {"epochs", opt.epochs},
                      {"seed", opt.seed}};
  add_data_summary(m, s, d, root);
  train::write_json_atomic(opt.summary_json, m);
}

// --compare: every encoding under the same budget, on the same clips and the same training order.
std::vector<VideoRun> train_all(const Setup& s, const VideoSets& d, const std::vector<std::string>& labels) {
  const app::TrainOptions& opt = s.opt;
  std::vector<VideoRun> runs;
  for (const auto& l : labels) {
    nn::VitConfig c = s.cfg;
    c.pe.set("pe", l);
    app::TrainOptions o = opt;
    o.save.clear(), o.resume.clear(), o.init_from.clear(), o.predictions.clear();
    if (!opt.metrics.empty()) o.metrics = opt.metrics + "." + c.pe.label() + ".jsonl";
    if (!opt.save.empty()) o.save = opt.save + "." + c.pe.label() + ".safetensors";
    runs.push_back(train_one(c, o, d));
    if (!opt.predictions.empty())
      train::write_predictions(opt.predictions + "." + c.pe.label() + ".txt", runs.back().result.labels,
                               runs.back().result.preds);
  }
  return runs;
}

// The comparison: a paired bootstrap of every run against the first (10000 resamples, seed 0), as compare_runs
// does; the table on stdout, and --compare-json, --compare-png, --summary-json.
void report_comparison(const Setup& s, const VideoSets& d, const std::string& root, const std::vector<std::string>& labels,
                       const std::vector<VideoRun>& runs) {
  const app::TrainOptions& opt = s.opt;
  std::vector<train::PairedBootstrap> pb(runs.size());
  for (std::size_t k = 1; k < runs.size(); ++k)
    pb[k] = train::paired_bootstrap(runs[k].result.correct, runs[0].result.correct, 10000, 0.95, 0);
  std::cout << "\n" << d.name << ": test accuracy on " << d.test_index.size() << " clips, 95% bootstrap CI; paired "
            << "bootstrap against " << runs[0].label << " (10000 resamples)\n"
            << "budget: " << opt.epochs << " epochs x " << d.train->size() << " clips, batch " << opt.batch << ", lr "
            << opt.lr << ", " << s.cfg.describe() << "\n\n";
  std::cout << std::left << std::setw(14) << "encoding" << std::setw(9) << "acc %" << std::setw(17) << "95% CI"
            << std::setw(10) << "diff pp" << std::setw(19) << "diff 95% CI" << std::setw(10) << "p" << std::setw(11)
            << "pe params" << "clips/s\n";
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const auto& r = runs[k];
    // "0.0123", or "≤ 0.0002" when no resample crossed 0 (the floor 2/10001, a bound); its "≤" is 3 bytes
    // wide and 1 column.
    const std::string p = k ? train::p_value_text(pb[k]) : "";
    const int p_width = 10 + (pb[k].p_bound && k ? 2 : 0);
    std::cout << std::left << std::setw(14) << r.label << std::setw(9) << app::fmt_pct(r.result.acc) << std::setw(17)
              << (app::fmt_pct(r.result.ci.lo) + " - " + app::fmt_pct(r.result.ci.hi)) << std::setw(10)
              << (k ? app::fmt_pct(pb[k].diff) : "") << std::setw(19)
              << (k ? app::fmt_pct(pb[k].diff_lo) + " - " + app::fmt_pct(pb[k].diff_hi) : "") << std::setw(p_width)
              << p << std::setw(11) << r.pe_params << std::fixed << std::setprecision(1) << r.clips_per_s
              << std::defaultfloat << "\n";
  }

  if (!s.compare.json.empty()) {
    std::string rows = "[";
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const auto& r = runs[k];
      train::Metrics m{{"pe", r.label},
                       {"test_acc", r.result.acc},
                       {"test_acc_ci95", std::vector<double>{r.result.ci.lo, r.result.ci.hi}},
                       {"test_loss", r.result.loss},
                       {"test_n", int(r.result.correct.size())},
                       {"pe_params", r.pe_params},
                       {"total_params", r.total_params},
                       {"train_clips_per_s", r.clips_per_s}};
      if (k) {
        m.emplace_back("vs", runs[0].label);
        m.emplace_back("diff", pb[k].diff);
        m.emplace_back("diff_ci95", std::vector<double>{pb[k].diff_lo, pb[k].diff_hi});
        m.emplace_back("p_value", pb[k].p_value);
        m.emplace_back("p_bound", pb[k].p_bound);
      }
      rows += (k ? ",\n  " : "\n  ") + train::to_json(m);
    }
    rows += "\n]\n";
    io::write_file_atomic(s.compare.json, rows, {"--compare-json", {}});
    std::cerr << "table: " << s.compare.json << "\n";
  }
  if (!s.compare.png.empty()) {
    std::vector<const app::EvalResult*> results;
    for (const auto& r : runs) results.push_back(&r.result);
    app::write_accuracy_chart(s.compare.png, d.name + ": test accuracy (" + std::to_string(d.test_index.size()) + " clips, 95% CI)",
                              "clips " + std::to_string(s.T) + "x" + std::to_string(s.S) + "x" + std::to_string(s.S),
                              {d.name}, labels, results);
    std::cerr << "chart: " << s.compare.png << "\n";
  }
  if (!opt.summary_json.empty()) {
    train::Metrics m;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const auto& r = runs[k];
      m.emplace_back("test_acc_" + r.label, r.result.acc);
      m.emplace_back("test_acc_ci95_" + r.label, std::vector<double>{r.result.ci.lo, r.result.ci.hi});
      if (k) m.emplace_back("p_value_" + r.label + "_vs_" + runs[0].label, pb[k].p_value);
    }
    m.emplace_back("epochs", opt.epochs);
    m.emplace_back("seed", opt.seed);
    add_data_summary(m, s, d, root);
    train::write_json_atomic(opt.summary_json, m);
  }
}

}  // namespace

int main(int argc, char** argv) {
  app::Comm::init(&argc, &argv);  // mpirun -np N: data-parallel training (docs/scaling.md)
  return app::run_main("train_ucf101", [&] {
    Setup s;
    if (!parse_flags(argc, argv, s)) return 0;
    if (s.opt.dry_run) {
      dry_run(s);
      return 0;
    }
    if (s.opt.bench_steps > 0 && s.vo.bench_data == 0) {
      app::dry_run_or_bench(s.cfg, s.opt, s.name());
      return 0;
    }

    const std::string root = data_root(s);
    if (s.vo.bench_data > 0) {
      bench_data(s.vo, s.T, s.stride, s.S, root);
      app::dry_run_or_bench(s.cfg, s.opt, s.name());  // and --bench-steps when given
      return 0;
    }
    const VideoSets d = open_sets(s, root);
    if (s.compare.list.empty()) {  // one encoding
      train_single(s, d, root);
      return 0;
    }
    const auto labels = s.compare.labels();
    report_comparison(s, d, root, labels, train_all(s, d, labels));
    return 0;
  });
}
