// tests/test_video.cpp — the FFmpeg decoder on the real UCF101 sample clip (header, exact colours, sampling,
// resizing), the encoder (MPEG-4 and MJPEG clips of known content decoded back), and every kind of bad file.
//
// C channels, T frames, H height, W width, S the side of a square output.
#include <data_tools/video.hpp>

#include <catch2/catch.hpp>

#include "temp_dir.hpp"
#include "tensor_compare.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace liere::data;
using Catch::Contains;
using liere::test::Bytes;
using liere::test::read_all;
using liere::test::TempDir;
using liere::test::write_file;
using liere::test::write_text;

namespace {

// The real clip, committed under tests/data/ucf101 (a byte-for-byte copy of the shared sample).
const std::string kClip =
    std::string(LIERE_TEST_DATA_DIR) + "/ucf101/UCF-101/ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi";

// Mean of channel c of frame t over the window [x0, x1) × [y0, y1).
double mean(const Clip& clip, int c, int t, int x0 = 0, int y0 = 0, int x1 = -1, int y1 = -1) {
  if (x1 < 0) x1 = clip.width;
  if (y1 < 0) y1 = clip.height;
  double s = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) s += clip.at(c, t, y, x);
  return s / double((x1 - x0) * (y1 - y0));
}

// A 16-bit mono PCM WAV file of n samples: a media file FFmpeg reads, with no video stream.
Bytes wav_file(int n) {
  Bytes b;
  auto u32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(std::uint8_t(v >> (8 * i)));
  };
  auto u16 = [&](std::uint16_t v) {
    b.push_back(std::uint8_t(v));
    b.push_back(std::uint8_t(v >> 8));
  };
  auto tag = [&](const char* s) {
    for (int i = 0; i < 4; ++i) b.push_back(std::uint8_t(s[i]));
  };
  tag("RIFF");
  u32(36 + 2 * std::uint32_t(n));
  tag("WAVE");
  tag("fmt ");
  u32(16);
  u16(1);      // PCM
  u16(1);      // mono
  u32(8000);   // sample rate
  u32(16000);  // byte rate
  u16(2);      // block align
  u16(16);     // bits
  tag("data");
  u32(2 * std::uint32_t(n));
  for (int i = 0; i < n; ++i) u16(std::uint16_t(int(8000 * std::sin(i * 0.3))));
  return b;
}

// The test pattern written and decoded back: (C, T, H, W) with H = 32, W = 48. The top half holds three 16-pixel
// wide colour blocks, the bottom half is mid grey with a white 6×6 square whose left edge is at x = 4 + 2t
// (rows 20 … 25).
constexpr int kT = 12, kH = 32, kW = 48;
constexpr int kBlock[3][3] = {{200, 30, 40}, {20, 180, 60}, {30, 50, 220}};
constexpr int kGrey = 128;

Bytes pattern_cthw() {
  Bytes px(std::size_t(3) * kT * kH * kW);
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < kT; ++t)
      for (int y = 0; y < kH; ++y)
        for (int x = 0; x < kW; ++x) {
          int v = y < 16 ? kBlock[x / 16][c] : kGrey;
          if (y >= 20 && y < 26 && x >= 4 + 2 * t && x < 10 + 2 * t) v = 255;
          px[((std::size_t(c) * kT + t) * kH + y) * kW + x] = std::uint8_t(v);
        }
  return px;
}

Bytes to_thwc(const Bytes& cthw, int T, int H, int W) {
  Bytes out(cthw.size());
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < T; ++t)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x)
          out[((std::size_t(t) * H + y) * W + x) * 3 + c] = cthw[((std::size_t(c) * T + t) * H + y) * W + x];
  return out;
}

ClipOptions native(int frames, int stride = 1, int offset = 0) {
  ClipOptions o;
  o.size = 0;
  o.sampling = {SampleMode::Stride, frames, stride, offset};
  return o;
}

}  // namespace

// ---- the real clip ----------------------------------------------------------------------------------------------

TEST_CASE("video: the UCF101 sample clip's header and frame count", "[video]") {
  const VideoInfo info = probe_video(kClip);
  CHECK(info.codec == "mpeg4");
  CHECK(info.container == "avi");
  CHECK(info.width == 320);
  CHECK(info.height == 240);
  CHECK(info.fps == Approx(25.0));
  CHECK(info.frame_count == 164);
  CHECK(info.duration_s == Approx(6.56).margin(0.05));
  CHECK(count_video_frames(kClip) == 164);        // packets
  CHECK(count_video_frames(kClip, true) == 164);  // decoded

  VideoReader reader(kClip);
  REQUIRE(reader.next());
  CHECK(reader.frames_decoded() == 1);
  CHECK(reader.frame_width() == 320);
  CHECK(reader.frame_height() == 240);
  const Bytes rgb = reader.convert_rgb();
  CHECK(rgb.size() == 320u * 240u * 3u);
}

TEST_CASE("video: colours of the real clip match an independent BT.601 conversion", "[video]") {
  // Reference means of frames 0 and 163 at 320×240, computed without libswscale:
  //   ffmpeg -v error -i v_ApplyEyeMakeup_g01_c01.avi -fps_mode passthrough -f rawvideo -pix_fmt yuv420p out.yuv
  // (the decoder's own 164 yuv420p frames), then in Python, per pixel with the chroma sample of its 2×2 block,
  // BT.601 limited range in floating point:
  //   c = (Y−16)·255/219;  R = c + 1.402·(255/224)·(V−128);  G = c − (0.344136·U' + 0.714136·V')·255/224;
  //   B = c + 1.772·(255/224)·(U−128)   (U' = U−128, V' = V−128), each rounded and clipped to 0 … 255:
  //   frame 0:   R 94.975  G 81.355  B 87.903        frame 163:  R 91.066  G 76.696  B 82.878
  // ffmpeg -sws_flags bilinear+full_chroma_int+accurate_rnd -pix_fmt rgb24 gives 94.981 81.355 87.914 for frame 0;
  // plain `ffmpeg -pix_fmt rgb24` (libswscale's fast path) gives 94.089 80.185 87.085, about one grey level dark,
  // which the tolerance below rejects. A wrong matrix (BT.709), range (full) or R/B order also fails.
  const Clip clip = read_clip(kClip, native(2, 163));
  REQUIRE(clip.frames == 2);
  REQUIRE(clip.height == 240);
  REQUIRE(clip.width == 320);
  const double expected[2][3] = {{94.975, 81.355, 87.903}, {91.066, 76.696, 82.878}};
  for (int t = 0; t < 2; ++t)
    for (int c = 0; c < 3; ++c) {
      INFO("frame " << (t ? 163 : 0) << " channel " << c);
      CHECK(mean(clip, c, t) == Approx(expected[t][c]).margin(0.1));
    }
  // R and B are not swapped: red is the brighter of the two by 7 grey levels.
  CHECK(mean(clip, 0, 0) - mean(clip, 2, 0) > 5.0);
}

TEST_CASE("video: frame sampling rules", "[video][sampling]") {
  using V = std::vector<long long>;
  CHECK(frame_indices({SampleMode::Stride, 4, 4, 0}, 164) == V{0, 4, 8, 12});
  CHECK(frame_indices({SampleMode::Stride, 3, 2, 5}, 11) == V{5, 7, 9});
  // Centred: span (T−1)·stride + 1 = 61 in 164 frames → offset (164 − 61) / 2 = 51.
  CHECK(frame_indices({SampleMode::Stride, 16, 4, kCenterOffset}, 164).front() == 51);
  CHECK(frame_indices({SampleMode::Stride, 16, 4, kCenterOffset}, 164).back() == 111);
  // Uniform: floor((2k + 1)·N / (2T)).
  CHECK(frame_indices({SampleMode::Uniform, 8, 0, 0}, 164) == V{10, 30, 51, 71, 92, 112, 133, 153});
  CHECK(frame_indices({SampleMode::Uniform, 4, 0, 0}, 4) == V{0, 1, 2, 3});
  // Unknown length: an explicit stride offset is fine, the others need the count.
  CHECK(frame_indices({SampleMode::Stride, 2, 3, 1}, -1) == V{1, 4});
  CHECK_THROWS_WITH(frame_indices({SampleMode::Uniform, 2, 1, 0}, -1), Contains("needs the clip's frame count"));

  SECTION("too short: named with the frames found and wanted, or clamped") {
    CHECK_THROWS_WITH(frame_indices({SampleMode::Stride, 16, 4, 0}, 40, false, "a.avi"),
                      Contains("'a.avi' is too short") && Contains("has 40 frames, 61 wanted") &&
                          Contains("16 frames with stride 4 from frame 0"));
    CHECK_THROWS_WITH(frame_indices({SampleMode::Uniform, 8, 0, 0}, 5, false, "b.avi"),
                      Contains("has 5 frames, 8 wanted") && Contains("spread uniformly"));
    CHECK(frame_indices({SampleMode::Stride, 4, 4, 0}, 7, true) == V{0, 4, 6, 6});
    CHECK(frame_indices({SampleMode::Stride, 4, 4, kCenterOffset}, 7, true) == V{0, 4, 6, 6});
    CHECK(frame_indices({SampleMode::Uniform, 4, 0, 0}, 2, true) == V{0, 0, 1, 1});
  }
  SECTION("bad parameters") {
    CHECK_THROWS_WITH(frame_indices({SampleMode::Stride, 0, 4, 0}, 10), Contains("frames must be ≥ 1"));
    CHECK_THROWS_WITH(frame_indices({SampleMode::Stride, 2, 0, 0}, 10), Contains("stride must be ≥ 1"));
    CHECK_THROWS_WITH(frame_indices({SampleMode::Stride, 2, 1, -5}, 10), Contains("offset must be ≥ 0"));
    CHECK_THROWS_WITH(frame_indices({SampleMode::Stride, 2, 1, 0}, 0, false, "e.avi"),
                      Contains("'e.avi' has no frames"));
  }
}

TEST_CASE("video: sampled frames are the decoder's frames; resizing keeps the colours", "[video][sampling]") {
  // Uniform sampling picks frames 10, 30, …, 153: each equals that frame read on its own.
  ClipOptions uni = native(8);
  uni.sampling.mode = SampleMode::Uniform;
  const Clip u = read_clip(kClip, uni);
  REQUIRE(u.frames == 8);
  const long long idx[8] = {10, 30, 51, 71, 92, 112, 133, 153};
  for (int t : {0, 3, 7}) {
    const Clip one = read_clip(kClip, native(1, 1, int(idx[t])));
    bool same = true;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 240; ++y)
        for (int x = 0; x < 320; ++x) same = same && one.at(c, 0, y, x) == u.at(c, t, y, x);
    CHECK(same);
  }
  // Decoding is deterministic.
  CHECK(read_clip(kClip, uni).pixels == u.pixels);

  // 16 frames every 4th → 112×112: shorter side to 112, central square kept; its colours are those of the central
  // 240×240 of the native frame (to about one grey level); Stretch keeps the whole frame's.
  ClipOptions crop;
  crop.sampling = {SampleMode::Stride, 16, 4, 0};
  crop.size = 112;
  const Clip c = read_clip(kClip, crop);
  REQUIRE(c.frames == 16);
  REQUIRE(c.height == 112);
  REQUIRE(c.width == 112);
  REQUIRE(c.pixels.size() == 3u * 16u * 112u * 112u);
  const Clip n0 = read_clip(kClip, native(16, 4));
  ClipOptions stretch = crop;
  stretch.resize = ResizeMode::Stretch;
  const Clip s = read_clip(kClip, stretch);
  for (int t : {0, 15})
    for (int ch = 0; ch < 3; ++ch) {
      INFO("frame " << t << " channel " << ch);
      CHECK(mean(c, ch, t) == Approx(mean(n0, ch, t, 40, 0, 280, 240)).margin(1.0));
      CHECK(mean(s, ch, t) == Approx(mean(n0, ch, t)).margin(1.0));
    }
  const ClipDims d = clip_dims(kClip, crop);
  CHECK((d.channels == 3 && d.frames == 16 && d.height == 112 && d.width == 112));
  const ClipDims dn = clip_dims(kClip, native(4));
  CHECK((dn.height == 240 && dn.width == 320));
}

// ---- bad files ----------------------------------------------------------------------------------------------

TEST_CASE("video: bad files are errors naming the file and what was expected", "[video][errors]") {
  TempDir dir;
  const Bytes clip = read_all(kClip);
  REQUIRE(clip.size() == 294566u);

  SECTION("missing file") {
    CHECK_THROWS_WITH(probe_video(dir / "absent.avi"), Contains("absent.avi") && Contains("no such file"));
    CHECK_THROWS_WITH(read_clip(dir / "absent.avi", native(1)), Contains("absent.avi") && Contains("no such file"));
    fs::create_directory(dir.path / "folder.avi");  // "not a regular file" before
    CHECK_THROWS_WITH(read_clip(dir / "folder.avi", native(1)),
                      Contains("cannot open '" + (dir / "folder.avi") + "': is a directory"));
  }
  SECTION("not a video: text, and a WAV file (a media file with no video stream)") {
    write_file(dir / "text.avi", Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'v', 'i', 'd', 'e', 'o', '\n'});
    CHECK_THROWS_WITH(read_clip(dir / "text.avi", native(1)),
                      Contains("text.avi") && Contains("is not a video file FFmpeg can read"));
    write_file(dir / "sound.avi", wav_file(4000));
    CHECK_THROWS_WITH(probe_video(dir / "sound.avi"), Contains("sound.avi") && Contains("has no video stream") &&
                                                          Contains("'wav'"));
    write_file(dir / "empty.avi", {});
    CHECK_THROWS_WITH(probe_video(dir / "empty.avi"), Contains("empty.avi"));
  }
  SECTION("truncated: the header survives but frames are missing") {
    // The first 150000 bytes hold the AVI header (which declares 164 frames) and 78 decodable frames.
    write_file(dir / "cut.avi", Bytes(clip.begin(), clip.begin() + 150000));
    CHECK(probe_video(dir / "cut.avi").frame_count == 164);
    CHECK(count_video_frames(dir / "cut.avi", true) == 78);
    ClipOptions uni = native(8);
    uni.sampling.mode = SampleMode::Uniform;
    CHECK_THROWS_WITH(read_clip(dir / "cut.avi", uni),
                      Contains("cut.avi") && Contains("is too short: it has 78 frames, 154 wanted") &&
                          Contains("header declares 164 frames") && Contains("truncated"));
    CHECK_THROWS_WITH(read_clip(dir / "cut.avi", native(2, 100)), Contains("has 78 frames, 101 wanted"));
    // What is there still decodes.
    CHECK(read_clip(dir / "cut.avi", native(8, 10)).frames == 8);
  }
  SECTION("truncated inside the header") {
    write_file(dir / "stub.avi", Bytes(clip.begin(), clip.begin() + 1000));
    CHECK_THROWS_WITH(probe_video(dir / "stub.avi"), Contains("stub.avi") && Contains("not a video file"));
  }
  SECTION("a clip shorter than the frames asked, and clamping") {
    // 16 frames every 4th need 61 frames; the clip has 164, so ask from frame 120.
    CHECK_THROWS_WITH(read_clip(kClip, native(16, 4, 120)),
                      Contains("v_ApplyEyeMakeup_g01_c01.avi") && Contains("has 164 frames, 181 wanted") &&
                          Contains("16 frames with stride 4 from frame 120"));
    ClipOptions clamp = native(16, 4, 120);
    clamp.clamp_short = true;
    const Clip c = read_clip(kClip, clamp);
    const Clip last = read_clip(kClip, native(1, 1, 163));
    const Clip f160 = read_clip(kClip, native(1, 1, 160));
    bool t10_is_160 = true, t11_is_last = true, t15_is_last = true;  // indices 120 + 4t: t = 10 → 160; t ≥ 11 past
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < 240; ++y)
        for (int x = 0; x < 320; ++x) {
          t10_is_160 = t10_is_160 && c.at(ch, 10, y, x) == f160.at(ch, 0, y, x);
          t11_is_last = t11_is_last && c.at(ch, 11, y, x) == last.at(ch, 0, y, x);
          t15_is_last = t15_is_last && c.at(ch, 15, y, x) == last.at(ch, 0, y, x);
        }
    CHECK(t10_is_160);
    CHECK(t11_is_last);
    CHECK(t15_is_last);
  }
}

// ---- writing --------------------------------------------------------------------------------------------------

TEST_CASE("video: MPEG-4 and MJPEG clips of known content decode back", "[video][write]") {
  TempDir dir;
  const Bytes px = pattern_cthw();
  struct Case {
    VideoCodec codec;
    const char* file;
    double tol;  // per-block mean tolerance in grey levels
  };
  // MJPEG is written 4:4:4 at quantiser 2 (nearly lossless on flat blocks); MPEG-4 4:2:0 at quantiser 2.
  for (const Case& k : {Case{VideoCodec::Mjpeg, "a.avi", 3.0}, Case{VideoCodec::Mpeg4, "b.avi", 5.0},
                        Case{VideoCodec::Mjpeg, "c.mkv", 3.0}, Case{VideoCodec::Mpeg4, "d.mp4", 5.0}}) {
    INFO(k.file << " " << codec_name(k.codec));
    const std::string path = dir / k.file;
    write_video(path, px.data(), FrameLayout::CTHW, kT, kH, kW, {k.codec, 10.0, 2});
    const VideoInfo info = probe_video(path);
    CHECK(info.codec == codec_name(k.codec));
    CHECK(info.width == kW);
    CHECK(info.height == kH);
    CHECK(info.fps == Approx(10.0));
    if (info.frame_count >= 0) CHECK(info.frame_count == kT);  // Matroska does not say
    CHECK(count_video_frames(path, true) == kT);

    ClipOptions all = native(kT);
    all.sampling.mode = SampleMode::Uniform;  // needs the count: from the header, or from the packets (mkv)
    const Clip c = read_clip(path, all);
    REQUIRE(c.frames == kT);
    for (int t = 0; t < kT; ++t) {
      for (int b = 0; b < 3; ++b)
        for (int ch = 0; ch < 3; ++ch)  // the inside of each block, 4 pixels from its edges
          CHECK(mean(c, ch, t, 16 * b + 4, 4, 16 * b + 12, 12) == Approx(kBlock[b][ch]).margin(k.tol));
      // The white square: its centroid (pixel centres) is at x = 4 + 2t + 3, y = 23. Only bright pixels count:
      // the colour blocks bleed a few grey levels into the rows below them.
      double sx = 0, sy = 0, sw = 0;
      for (int y = 16; y < kH; ++y)
        for (int x = 0; x < kW; ++x) {
          const double w = std::max(0.0, double(c.at(1, t, y, x)) - (kGrey + 64));
          sx += w * (x + 0.5);
          sy += w * (y + 0.5);
          sw += w;
        }
      REQUIRE(sw > 0);
      CHECK(sx / sw == Approx(7.0 + 2 * t).margin(0.5));
      CHECK(sy / sw == Approx(23.0).margin(0.5));
    }
  }

  SECTION("(T, H, W, C) frames give the same video") {
    write_video(dir / "cthw.avi", px.data(), FrameLayout::CTHW, kT, kH, kW);
    const Bytes thwc = to_thwc(px, kT, kH, kW);
    write_video(dir / "thwc.avi", thwc.data(), FrameLayout::THWC, kT, kH, kW);
    const Clip a = read_clip(dir / "cthw.avi", native(kT)), b = read_clip(dir / "thwc.avi", native(kT));
    int worst = 0;
    for (std::size_t i = 0; i < a.pixels.size(); ++i)
      liere::test::raise_error(worst, std::abs(a.pixels[i] - b.pixels[i]));
    CHECK(worst <= 1);
  }
}

TEST_CASE("video: writing is atomic and its errors name the file", "[video][write]") {
  TempDir dir;
  const Bytes px = pattern_cthw();
  auto leftovers = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir.path))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
    return n;
  };

  // Replacing a file: the old clip stays whole until the new one is complete.
  write_video(dir / "x.avi", px.data(), FrameLayout::CTHW, kT, kH, kW);
  const auto first_size = fs::file_size(dir / "x.avi");
  write_video(dir / "x.avi", px.data(), FrameLayout::CTHW, 3, kH, kW);
  CHECK(count_video_frames(dir / "x.avi", true) == 3);
  CHECK(fs::file_size(dir / "x.avi") < first_size);
  CHECK(leftovers() == 0);

  CHECK_THROWS_WITH(write_video(dir / "odd.avi", px.data(), FrameLayout::CTHW, 2, 31, 47, {VideoCodec::Mpeg4}),
                    Contains("odd.avi") && Contains("even width and height"));
  CHECK_THROWS_WITH(write_video(dir / "clip.xyz", px.data(), FrameLayout::CTHW, 2, kH, kW),
                    Contains("clip.xyz") && Contains("no container for the extension '.xyz'"));
  CHECK_THROWS_WITH(write_video(dir / "nowhere/clip.avi", px.data(), FrameLayout::CTHW, 2, kH, kW),
                    Contains("nowhere/clip.avi") && Contains("cannot create"));
  CHECK_THROWS_WITH(write_video(dir / "q.avi", px.data(), FrameLayout::CTHW, 2, kH, kW, {VideoCodec::Mjpeg, 25, 40}),
                    Contains("q.avi") && Contains("quality must be 1 … 31"));
  CHECK_THROWS_WITH(write_video(dir / "z.avi", px.data(), FrameLayout::CTHW, 0, kH, kW), Contains("z.avi"));
  CHECK(!fs::exists(dir / "odd.avi"));
  CHECK(!fs::exists(dir / "q.avi"));
  CHECK(leftovers() == 0);
  // MJPEG takes odd sizes.
  write_video(dir / "odd.avi", px.data(), FrameLayout::CTHW, 2, 31, 47, {VideoCodec::Mjpeg});
  CHECK(probe_video(dir / "odd.avi").width == 47);
  CHECK(!ffmpeg_versions().empty());
}

// ---- speed (hidden: not run by ctest; run `test_video "[.bench]"` to print the numbers) -------------------------

namespace {

// Seconds per call of f: the median and the fastest of n timed calls after one warm-up (the median resists other
// work on the machine, the fastest shows the cost on an idle core).
template <class F>
std::pair<double, double> time_calls(int n, F f) {
  f();
  std::vector<double> s;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return {s[s.size() / 2], s.front()};
}

}  // namespace

TEST_CASE("video: decode and preprocess speed on one core", "[.bench]") {
  auto opt = [](SampleMode mode, int frames, int stride, int offset, int size) {
    ClipOptions o;
    o.sampling = {mode, frames, stride, offset};
    o.size = size;
    return o;
  };
  const std::pair<const char*, ClipOptions> settings[] = {
      {"16 frames stride 4 from frame 0 -> 112x112", opt(SampleMode::Stride, 16, 4, 0, 112)},
      {"16 frames stride 4 centred      -> 112x112", opt(SampleMode::Stride, 16, 4, kCenterOffset, 112)},
      {"16 frames stride 4 from frame 0 -> 32x32  ", opt(SampleMode::Stride, 16, 4, 0, 32)},
      {"16 frames uniform (whole clip)  -> 112x112", opt(SampleMode::Uniform, 16, 1, 0, 112)},
      {"8 frames stride 2 from frame 0  -> 32x32  ", opt(SampleMode::Stride, 8, 2, 0, 32)},
  };
  std::printf("real UCF101 clip (320x240 MPEG-4, 164 frames), one thread, %s\n", ffmpeg_versions().c_str());
  std::printf("  %-52s %14s %14s\n", "", "median clip/s", "best clip/s");
  for (const auto& [name, options] : settings) {
    const auto [median, best] = time_calls(30, [&] { read_clip(kClip, options); });
    std::printf("  decode + resize %-36s %14.1f %14.1f\n", name, 1 / median, 1 / best);
  }
  const auto [median, best] = time_calls(10, [&] { count_video_frames(kClip, true); });
  std::printf("  %-52s %14.1f %14.1f\n", "decode all 164 frames, no conversion", 1 / median, 1 / best);
}
