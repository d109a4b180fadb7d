// data_tools/moving_objects.cpp — the passing task (rules in moving_objects.hpp): scenes, rendering, the UCF101 layout.
#include <data_tools/moving_objects.hpp>

#include <liere/core/rng.hpp>
#include <liere/io/atomic_file.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <numbers>
#include <random>
#include <sstream>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

// Geometry in units of S (moving_objects.hpp).
constexpr double kObjectSize = 0.09375;
constexpr double kAnchorLo = 0.25, kAnchorHi = 0.75;
constexpr double kPassLo = 0.14, kPassHi = 0.22;
constexpr double kTravelLo = 0.30, kTravelHi = 0.40;
constexpr double kClosestLo = 0.3, kClosestHi = 0.7;

constexpr std::array<std::uint8_t, 3> kAnchorColour = {255, 255, 255};
constexpr std::array<std::array<std::uint8_t, 3>, 3> kMoverColours = {{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}}};
constexpr const char* kMoverNames[3] = {"Red", "Green", "Blue"};
constexpr std::array<std::array<std::uint8_t, 3>, 4> kDistractorColours = {
    {{128, 128, 128}, {255, 255, 0}, {0, 255, 255}, {255, 0, 255}}};

double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * liere::unit_double(rng()); }

// Length of [a, b) ∩ [c, d).
double overlap(double a, double b, double c, double d) { return std::max(0.0, std::min(b, d) - std::max(a, c)); }

// "Over" blend of an axis-aligned square of side `side` centred at (cx, cy) into planes (3, S, S) of floats.
void draw_square(float* planes, int S, double cx, double cy, double side, const std::array<std::uint8_t, 3>& colour) {
  const double h = side / 2;
  const int x0 = std::max(0, int(std::floor(cx - h))), x1 = std::min(S - 1, int(std::floor(cx + h)));
  const int y0 = std::max(0, int(std::floor(cy - h))), y1 = std::min(S - 1, int(std::floor(cy + h)));
  const std::size_t plane = std::size_t(S) * S;
  for (int y = y0; y <= y1; ++y) {
    const double wy = overlap(y, y + 1, cy - h, cy + h);
    if (wy <= 0) continue;
    for (int x = x0; x <= x1; ++x) {
      const float a = float(wy * overlap(x, x + 1, cx - h, cx + h));
      if (a <= 0) continue;
      for (int c = 0; c < 3; ++c) {
        float& p = planes[c * plane + std::size_t(y) * S + x];
        p += a * (float(colour[std::size_t(c)]) - p);
      }
    }
  }
}

// Writes `text` to `path` atomically (fsync, rename, fsync of the directory), under a temporary name of its own:
// several generator threads or processes may write into one folder.
void write_text_atomic(const fs::path& path, const std::string& text) {
  liere::io::write_file_atomic(path.string(), text, liere::io::AtomicWriteOptions::unique("passing task"));
}

}  // namespace

void check_passing_config(const PassingTaskConfig& c) {
  LIERE_ENSURE(c.frames >= 2 && c.frames <= 1024, "passing task: frames must be 2 … 1024, got " << c.frames);
  LIERE_ENSURE(c.size >= 16 && c.size <= 1024, "passing task: size must be 16 … 1024, got " << c.size);
  LIERE_ENSURE(c.num_classes == 2 || c.num_classes == 4 || c.num_classes == 8,
               "passing task: num_classes must be 2, 4 or 8 (1, 2 or 3 movers), got " << c.num_classes);
  LIERE_ENSURE(c.distractors >= 0 && c.distractors <= 16, "passing task: distractors must be 0 … 16, got "
                                                              << c.distractors);
  LIERE_ENSURE(c.noise >= 0 && c.noise <= 64, "passing task: noise must be 0 … 64, got " << c.noise);
}

int passing_movers(int num_classes) {
  LIERE_ENSURE(num_classes == 2 || num_classes == 4 || num_classes == 8,
               "passing task: num_classes must be 2, 4 or 8, got " << num_classes);
  return num_classes == 2 ? 1 : num_classes == 4 ? 2 : 3;
}

std::vector<std::string> passing_class_names(int num_classes) {
  const int K = passing_movers(num_classes);
  std::vector<std::string> names;
  for (int label = 0; label < num_classes; ++label) {
    std::string n;
    for (int k = 0; k < K; ++k) n += std::string(kMoverNames[k]) + ((label >> (K - 1 - k)) & 1 ? "Right" : "Left");
    names.push_back(n);
  }
  return names;
}

PassingScene make_passing_scene(const PassingTaskConfig& cfg, std::uint64_t index) {
  check_passing_config(cfg);
  const int K = passing_movers(cfg.num_classes);
  const double S = cfg.size, T1 = cfg.frames - 1;
  std::mt19937_64 rng(liere::mix_seed(cfg.seed, kPassingStream, index));
  PassingScene s;
  s.label = int(index % std::uint64_t(cfg.num_classes));
  s.object_size = kObjectSize * S;
  s.anchor.x0 = S * uniform(rng, kAnchorLo, kAnchorHi);
  s.anchor.y0 = S * uniform(rng, kAnchorLo, kAnchorHi);
  s.anchor.colour = kAnchorColour;
  for (int k = 0; k < K; ++k) {
    const double theta = uniform(rng, 0, 2 * std::numbers::pi);
    const double D = S * uniform(rng, kPassLo, kPassHi);
    const double speed = S * uniform(rng, kTravelLo, kTravelHi) / T1;
    const double closest = T1 * uniform(rng, kClosestLo, kClosestHi);
    const bool right = (s.label >> (K - 1 - k)) & 1;
    const double sigma = right ? -1.0 : 1.0;
    const double ux = std::cos(theta), uy = std::sin(theta), nx = -uy, ny = ux;
    PassingObject m;
    m.vx = speed * ux;
    m.vy = speed * uy;
    m.x0 = s.anchor.x0 + sigma * D * nx - closest * m.vx;
    m.y0 = s.anchor.y0 + sigma * D * ny - closest * m.vy;
    m.colour = kMoverColours[std::size_t(k)];
    s.movers.push_back(m);
  }
  for (int j = 0; j < cfg.distractors; ++j) {
    PassingObject d;
    d.x0 = S * liere::unit_double(rng());
    d.y0 = S * liere::unit_double(rng());
    const bool moving = liere::below(rng, 2) == 1;
    const double theta = uniform(rng, 0, 2 * std::numbers::pi);
    const double speed = S * uniform(rng, kTravelLo, kTravelHi) / T1;
    if (moving) {
      d.vx = speed * std::cos(theta);
      d.vy = speed * std::sin(theta);
      // Centre the path on the drawn point, so a moving distractor is spread over the frame like a static one.
      d.x0 -= d.vx * T1 / 2;
      d.y0 -= d.vy * T1 / 2;
    }
    d.colour = kDistractorColours[std::size_t(liere::below(rng, kDistractorColours.size()))];
    s.distractors.push_back(d);
  }
  s.noise_seed = rng();
  return s;
}

int passing_label(const PassingScene& s) {
  const int K = int(s.movers.size());
  int label = 0;
  for (int k = 0; k < K; ++k) {
    const PassingObject& m = s.movers[std::size_t(k)];
    const double ax = s.anchor.x0 - m.x0, ay = s.anchor.y0 - m.y0;
    const bool right = m.vx * ay - m.vy * ax > 0;
    label = 2 * label + (right ? 1 : 0);
  }
  return label;
}

void render_passing_scene(const PassingTaskConfig& cfg, const PassingScene& s, std::uint8_t* clip) {
  check_passing_config(cfg);
  const int S = cfg.size, T = cfg.frames;
  const std::size_t plane = std::size_t(S) * S, channel = std::size_t(T) * plane;
  std::vector<float> frame(3 * plane);
  std::mt19937_64 noise_rng(s.noise_seed);
  for (int t = 0; t < T; ++t) {
    if (cfg.noise > 0) {
      for (std::size_t p = 0; p < plane; ++p) {
        const float v = float(cfg.noise * liere::unit_double(noise_rng()));
        frame[p] = frame[plane + p] = frame[2 * plane + p] = v;
      }
    } else {
      std::fill(frame.begin(), frame.end(), 0.0f);
    }
    for (const auto& d : s.distractors) draw_square(frame.data(), S, d.x(t), d.y(t), s.object_size, d.colour);
    draw_square(frame.data(), S, s.anchor.x(t), s.anchor.y(t), s.object_size, s.anchor.colour);
    for (const auto& m : s.movers) draw_square(frame.data(), S, m.x(t), m.y(t), s.object_size, m.colour);
    for (int c = 0; c < 3; ++c)
      for (std::size_t p = 0; p < plane; ++p)
        clip[c * channel + std::size_t(t) * plane + p] =
            std::uint8_t(std::clamp(std::lround(frame[c * plane + p]), 0L, 255L));
  }
}

int make_passing_clip(const PassingTaskConfig& cfg, std::uint64_t index, std::uint8_t* clip) {
  const PassingScene s = make_passing_scene(cfg, index);
  render_passing_scene(cfg, s, clip);
  return s.label;
}

void make_passing_batch(const PassingTaskConfig& cfg, std::uint64_t first, int count, std::uint8_t* clips,
                        int* labels) {
  check_passing_config(cfg);
  LIERE_ENSURE(count >= 0, "make_passing_batch: count must be ≥ 0, got " << count);
  const std::size_t bytes = std::size_t(3) * cfg.frames * cfg.size * cfg.size;
#pragma omp parallel for schedule(static) if (count >= 16)
  for (int b = 0; b < count; ++b)
    labels[b] = make_passing_clip(cfg, first + std::uint64_t(b), clips + std::size_t(b) * bytes);
}

int write_passing_ucf101(const PassingTaskConfig& cfg, const std::string& root, int n_train, int n_test,
                         const VideoWriteOptions& video) {
  check_passing_config(cfg);
  LIERE_ENSURE(n_train >= 1 && n_test >= 1, "write_passing_ucf101: need at least one training and one test clip, got "
                                                << n_train << " and " << n_test);
  LIERE_ENSURE(!root.empty(), "write_passing_ucf101: empty root folder");
  const std::vector<std::string> names = passing_class_names(cfg.num_classes);
  const fs::path base(root), videos = base / "UCF-101", lists = base / "ucfTrainTestlist";
  std::error_code ec;
  for (const auto& n : names) {
    fs::create_directories(videos / n, ec);
    LIERE_ENSURE(fs::is_directory(videos / n, ec), "write_passing_ucf101: cannot create '" << (videos / n).string()
                                                                                           << "'");
  }
  fs::create_directories(lists, ec);
  LIERE_ENSURE(fs::is_directory(lists, ec), "write_passing_ucf101: cannot create '" << lists.string() << "'");

  const int total = n_train + n_test;
  auto relative = [&](int i, int label) {
    char num[16];
    std::snprintf(num, sizeof num, "%06d", i);
    const std::string& cls = names[std::size_t(label)];
    return cls + "/v_" + cls + "_i" + num + ".avi";
  };

  // Clips first, lists last: a crash leaves no list naming a clip that is not there.
  const std::size_t bytes = std::size_t(3) * cfg.frames * cfg.size * cfg.size;
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel
  {
    std::vector<std::uint8_t> clip(bytes);
#pragma omp for schedule(dynamic, 8)
    for (int i = 0; i < total; ++i) {
      try {
        const int label = make_passing_clip(cfg, std::uint64_t(i), clip.data());
        write_video((videos / relative(i, label)).string(), clip.data(), FrameLayout::CTHW, cfg.frames, cfg.size,
                    cfg.size, video);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);

  std::ostringstream class_ind, train, test;
  for (int k = 0; k < cfg.num_classes; ++k) class_ind << k + 1 << ' ' << names[std::size_t(k)] << "\r\n";
  for (int i = 0; i < total; ++i) {
    const int label = i % cfg.num_classes;  // make_passing_scene's rule
    if (i < n_train)
      train << relative(i, label) << ' ' << label + 1 << "\r\n";
    else
      test << relative(i, label) << "\r\n";
  }
  write_text_atomic(lists / "classInd.txt", class_ind.str());
  write_text_atomic(lists / "trainlist01.txt", train.str());
  write_text_atomic(lists / "testlist01.txt", test.str());

  std::ostringstream about;
  about << "The passing task (liere data_tools/moving_objects.hpp): K coloured movers pass a white anchor; the label\n"
           "says, for each mover, whether the anchor lies to the left or to the right of its direction of travel.\n"
        << "frames " << cfg.frames << "\nsize " << cfg.size << "\nnum_classes " << cfg.num_classes << "\ndistractors "
        << cfg.distractors << "\nnoise " << cfg.noise << "\nseed " << cfg.seed << "\ntrain " << n_train
        << " (samples 0.." << n_train - 1 << ")\ntest " << n_test << " (samples " << n_train << ".." << total - 1
        << ")\ncodec " << codec_name(video.codec) << "\nfps " << video.fps << "\nquality " << video.quality << "\n";
  write_text_atomic(base / "passing_task.txt", about.str());
  return total;
}

}  // namespace liere::data
