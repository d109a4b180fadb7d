// make_video_task — writes the synthetic passing task (data_tools/moving_objects.hpp) as video clips in the UCF101
// folder layout, so that the UCF101 reader and trainer run on it end to end without a download.
//
//   make_video_task --out DIR [--train N] [--test N] [--frames T] [--size S] [--classes 2|4|8] [--distractors D]
//                   [--noise A] [--seed S] [--codec mjpeg|mpeg4] [--fps F] [--quality Q] [--sheet FILE.png]
//
// DIR gets UCF-101/<Class>/v_<Class>_iNNNNNN.avi, ucfTrainTestlist/{classInd,trainlist01,testlist01}.txt and
// passing_task.txt (the configuration). Sample i is make_passing_clip(config, i): samples 0 … N_train−1 are the
// training list, the next N_test the test list, so a trainer that generates the task in memory with the same
// --seed sees exactly these clips.
#include <data_tools/moving_objects.hpp>

#include <stb_image_write.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string out;                     // output folder (created if needed)
  int train = 2000;                    // clips in trainlist01
  int test = 500;                      // clips in testlist01
  liere::data::PassingTaskConfig task; // frames, size, classes, distractors, noise, seed
  liere::data::VideoWriteOptions video;
  std::string sheet;                   // optional PNG: the frames of the first samples, one row each
};

void usage(std::ostream& os) {
  os << "usage: make_video_task --out DIR [--train N] [--test N] [--frames T] [--size S] [--classes 2|4|8]\n"
        "                       [--distractors D] [--noise A] [--seed S] [--codec mjpeg|mpeg4] [--fps F]\n"
        "                       [--quality Q] [--sheet FILE.png]\n"
        "\n"
        "Writes the synthetic passing task as video clips in the UCF101 layout: DIR/UCF-101/<Class>/*.avi,\n"
        "DIR/ucfTrainTestlist/{classInd,trainlist01,testlist01}.txt (CRLF, as the official lists) and\n"
        "DIR/passing_task.txt. Coloured squares (the movers) pass a white square (the anchor); the label says,\n"
        "for each mover, whether the anchor lies left or right of its direction of travel. No single frame\n"
        "tells the label; see data_tools/moving_objects.hpp.\n"
        "\n"
        "  --out DIR          output folder, created if needed\n"
        "  --train N          training clips, samples 0..N-1 (default 2000)\n"
        "  --test N           test clips, the next N samples (default 500)\n"
        "  --frames T         frames per clip, 2..1024 (default 8)\n"
        "  --size S           frame side in pixels, 16..1024 (default 32)\n"
        "  --classes C        2, 4 or 8: 1, 2 or 3 movers (default 4)\n"
        "  --distractors D    extra squares that do not change the label, 0..16 (default 2)\n"
        "  --noise A          uniform background noise in [0, A] grey levels, 0..64 (default 0)\n"
        "  --seed S           data-set seed (default 0)\n"
        "  --codec C          mjpeg (4:4:4, default) or mpeg4 (4:2:0, needs an even size), in .avi\n"
        "  --fps F            frame rate written in the files (default 25)\n"
        "  --quality Q        fixed quantiser 1..31, lower is better (default 2)\n"
        "  --sheet FILE.png   also write the frames of the first 4 samples as a PNG, one row per sample\n"
        "  --help             this text\n";
}

// A whole decimal number in [lo, hi], or false.
bool parse_int(const std::string& s, long long lo, long long hi, long long& v) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  v = std::stoll(s);
  return v >= lo && v <= hi;
}

bool parse_double(const std::string& s, double lo, double hi, double& v) {
  try {
    std::size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && v >= lo && v <= hi;
  } catch (const std::exception&) {
    return false;
  }
}

// The frames of samples 0 … rows−1 side by side, each pixel drawn as a zoom×zoom block, grey gaps of 2·zoom.
void write_sheet(const std::string& path, const liere::data::PassingTaskConfig& task, int rows) {
  const int T = task.frames, S = task.size, zoom = std::max(1, 128 / S), gap = 2 * zoom;
  const int cell = S * zoom, width = T * cell + (T + 1) * gap, height = rows * cell + (rows + 1) * gap;
  std::vector<std::uint8_t> img(std::size_t(width) * height * 3, 96);
  std::vector<std::uint8_t> clip(std::size_t(3) * T * S * S);
  const std::size_t plane = std::size_t(S) * S;
  for (int r = 0; r < rows; ++r) {
    liere::data::make_passing_clip(task, std::uint64_t(r), clip.data());
    for (int t = 0; t < T; ++t)
      for (int y = 0; y < cell; ++y)
        for (int x = 0; x < cell; ++x)
          for (int c = 0; c < 3; ++c) {
            const int X = gap + t * (cell + gap) + x, Y = gap + r * (cell + gap) + y;
            img[(std::size_t(Y) * width + X) * 3 + c] =
                clip[(std::size_t(c) * T + t) * plane + std::size_t(y / zoom) * S + x / zoom];
          }
  }
  LIERE_ENSURE(stbi_write_png(path.c_str(), width, height, 3, img.data(), width * 3) != 0,
               "make_video_task: cannot write the sheet '" << path << "'");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace liere::data;
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    auto value = [&] {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    long long n = 0;
    double d = 0;
    if (a == "--help" || a == "-h") {
      usage(std::cout);
      return 0;
    } else if (a == "--out" && value()) {
      cfg.out = v;
    } else if (a == "--train" && value() && parse_int(v, 1, 10000000, n)) {
      cfg.train = int(n);
    } else if (a == "--test" && value() && parse_int(v, 1, 10000000, n)) {
      cfg.test = int(n);
    } else if (a == "--frames" && value() && parse_int(v, 2, 1024, n)) {
      cfg.task.frames = int(n);
    } else if (a == "--size" && value() && parse_int(v, 16, 1024, n)) {
      cfg.task.size = int(n);
    } else if (a == "--classes" && value() && parse_int(v, 2, 8, n) && (n == 2 || n == 4 || n == 8)) {
      cfg.task.num_classes = int(n);
    } else if (a == "--distractors" && value() && parse_int(v, 0, 16, n)) {
      cfg.task.distractors = int(n);
    } else if (a == "--noise" && value() && parse_double(v, 0, 64, d)) {
      cfg.task.noise = d;
    } else if (a == "--seed" && value() && parse_int(v, 0, 999999999999999999LL, n)) {
      cfg.task.seed = std::uint64_t(n);
    } else if (a == "--codec" && value() && (v == "mjpeg" || v == "mpeg4")) {
      cfg.video.codec = v == "mjpeg" ? VideoCodec::Mjpeg : VideoCodec::Mpeg4;
    } else if (a == "--fps" && value() && parse_double(v, 0.001, 1000, d)) {
      cfg.video.fps = d;
    } else if (a == "--quality" && value() && parse_int(v, 1, 31, n)) {
      cfg.video.quality = int(n);
    } else if (a == "--sheet" && value()) {
      cfg.sheet = v;
    } else {
      std::cerr << "make_video_task: bad or unknown argument '" << a << (v.empty() ? "" : " " + v) << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (cfg.out.empty()) {
    std::cerr << "make_video_task: --out is required\n";
    usage(std::cerr);
    return 2;
  }
  if (cfg.video.codec == VideoCodec::Mpeg4 && cfg.task.size % 2 != 0) {
    std::cerr << "make_video_task: --codec mpeg4 needs an even --size, got " << cfg.task.size << "\n";
    return 2;
  }

  try {
    const auto start = std::chrono::steady_clock::now();
    const int written = write_passing_ucf101(cfg.task, cfg.out, cfg.train, cfg.test, cfg.video);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!cfg.sheet.empty()) write_sheet(cfg.sheet, cfg.task, std::min(4, cfg.train));
    std::cout << "make_video_task: wrote " << written << " clips (" << cfg.train << " train, " << cfg.test
              << " test; " << cfg.task.num_classes << " classes, " << cfg.task.frames << " frames of " << cfg.task.size
              << "x" << cfg.task.size << ", " << codec_name(cfg.video.codec) << ") to " << cfg.out << " in " << seconds
              << " s\n";
  } catch (const std::exception& e) {
    std::cerr << "make_video_task: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
