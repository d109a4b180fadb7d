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
#include <app/flags.hpp>
#include <data_tools/moving_objects.hpp>

#include <stb_image_write.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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
               "cannot write the sheet '" << path << "'");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace liere::data;
  using liere::app::Range;
  return liere::app::run_main("make_video_task", [&] {
    Config cfg;
    std::string codec = "mjpeg";
    liere::app::Flags f(
        "make_video_task",
        "Writes the synthetic passing task as video clips in the UCF101 layout: DIR/UCF-101/<Class>/*.avi,\n"
        "DIR/ucfTrainTestlist/{classInd,trainlist01,testlist01}.txt (CRLF, as the official lists) and\n"
        "DIR/passing_task.txt. Coloured squares (the movers) pass a white square (the anchor); the label says,\n"
        "for each mover, whether the anchor lies left or right of its direction of travel. No single frame\n"
        "tells the label; see data_tools/moving_objects.hpp.");
    f.section("Options");
    f.add("out", &cfg.out, "output folder, created if needed (required)", "DIR");
    f.add("train", &cfg.train, "training clips, samples 0..N-1", Range{1, 10000000});
    f.add("test", &cfg.test, "test clips, the next N samples", Range{1, 10000000});
    f.add("frames", &cfg.task.frames, "frames per clip", Range{2, 1024});
    f.add("size", &cfg.task.size, "frame side in pixels", Range{16, 1024});
    f.add("classes", &cfg.task.num_classes, "2, 4 or 8: 1, 2 or 3 movers", Range{2, 8});
    f.add("distractors", &cfg.task.distractors, "extra squares that do not change the label", Range{0, 16});
    f.add("noise", &cfg.task.noise, "uniform background noise in [0, A] grey levels", Range{0, 64});
    f.add("seed", &cfg.task.seed, "data-set seed");
    f.add("codec", &codec, "mjpeg (4:4:4) or mpeg4 (4:2:0, needs an even size), in .avi", "C");
    f.add("fps", &cfg.video.fps, "frame rate written in the files", Range{0.001, 1000});
    f.add("quality", &cfg.video.quality, "fixed quantiser, lower is better", Range{1, 31});
    f.add("sheet", &cfg.sheet, "also write the frames of the first 4 samples as a PNG, one row per sample", "FILE.png");
    if (!f.parse(argc, argv)) return 0;
    if (cfg.out.empty()) throw liere::app::UsageError("--out is required");
    const int c = cfg.task.num_classes;
    if (c != 2 && c != 4 && c != 8) throw liere::app::UsageError("--classes " + std::to_string(c) + ": allowed: 2, 4, 8");
    if (codec != "mjpeg" && codec != "mpeg4") throw liere::app::UsageError("--codec " + codec + ": allowed: mjpeg, mpeg4");
    cfg.video.codec = codec == "mjpeg" ? VideoCodec::Mjpeg : VideoCodec::Mpeg4;
    if (cfg.video.codec == VideoCodec::Mpeg4 && cfg.task.size % 2 != 0)
      throw liere::app::UsageError("--codec mpeg4 needs an even --size, got " + std::to_string(cfg.task.size));

    const auto start = std::chrono::steady_clock::now();
    const int written = write_passing_ucf101(cfg.task, cfg.out, cfg.train, cfg.test, cfg.video);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!cfg.sheet.empty()) write_sheet(cfg.sheet, cfg.task, std::min(4, cfg.train));
    std::cout << "make_video_task: wrote " << written << " clips (" << cfg.train << " train, " << cfg.test
              << " test; " << cfg.task.num_classes << " classes, " << cfg.task.frames << " frames of " << cfg.task.size
              << "x" << cfg.task.size << ", " << codec_name(cfg.video.codec) << ") to " << cfg.out << " in " << seconds
              << " s\n";
    return 0;
  });
}
