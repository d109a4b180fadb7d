// data_tools/video.hpp — video files through FFmpeg (libavformat, libavcodec, libswscale, libavutil; the 5.1 API):
// sequential decoding, frame sampling into a (C, T, H, W) clip, and an encoder for test and synthetic clips.
//
// C channels (3: R, G, B), T frames, H height, W width, S the side of a square output.
//
// Decoding is sequential and seek-free: packets are demuxed and decoded in order from the start of the file
// (avcodec_send_packet / avcodec_receive_frame), frames that no sample needs are decoded but never converted, and
// decoding stops after the last frame a sample needs. Colour conversion goes through libswscale with the matrix the
// stream declares (BT.601 when it declares none, as UCF101's MPEG-4 clips), the declared range (limited unless the
// stream says full, as MJPEG), accurate rounding and full chroma interpolation: frame 0 of the UCF101 sample clip
// matches a floating-point BT.601 reference within 0.02 in every channel mean (tests/test_video.cpp); libswscale's
// default fast path would be about one grey level darker.
//
// Frame sampling picks T frame indices in [0, N) for a clip of N frames:
//   Stride   offset, offset + stride, …, offset + (T−1)·stride (VideoMAE's frame_sample_rate = stride); the span
//            (T−1)·stride + 1 must fit in the clip. offset = kCenterOffset centres the span: offset = (N − span) / 2.
//   Uniform  the centres of T equal segments: floor((2k + 1)·N / (2T)), k = 0 … T−1 (TSN's test-time sampling).
// N comes from the container (the AVI header and index, MP4's sample table) when it is needed (Uniform, centred
// Stride) and known; else from counting the stream's packets. A clip with too few frames is an error naming the
// file, the frames found and the frames wanted, unless clamp_short is set: then indices past the last decoded frame
// repeat it (what many video pipelines do for short clips).
//
// Each sampled frame is resized to S×S: CenterCrop scales the shorter side to S (libswscale's bilinear filter, which
// widens when it shrinks, so that downscaling averages) and keeps the central S columns or rows (the usual
// Resize(S) + CenterCrop(S)); Stretch scales both sides to S; size 0 keeps the native H×W.
//
// FFmpeg's own log is silenced (av_log_set_level(AV_LOG_ERROR) with a callback that keeps the last error line of the
// calling thread); real failures become liere::Error naming the file and carry that line. Set the environment
// variable LIERE_FFMPEG_LOG=1 to see FFmpeg's warnings on stderr instead (e.g. UCF101's harmless "packed B-frames").
#pragma once

#include <liere/core/config.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace liere::data {

// ---- what a file holds ----------------------------------------------------------------------------------------

struct VideoInfo {
  std::string path;
  std::string codec;             // FFmpeg's codec name: "mpeg4", "mjpeg", "h264", …
  std::string container;         // FFmpeg's demuxer name: "avi", "mov,mp4,m4a,3gp,3g2,mj2", …
  int width = 0, height = 0;     // of the decoded frames
  double fps = 0;                // frames per second; 0 when the file does not say
  long long frame_count = -1;    // from the container header or index; -1 when it does not say
  double duration_s = 0;         // of the video stream (or the file); 0 when unknown
};

// Opens the file and reads its headers (nothing is decoded). Errors name the file: missing, not a media file FFmpeg
// can read, no video stream, no decoder for its codec.
VideoInfo probe_video(const std::string& path);

// The number of frames: decoded ones when `decode` (exact, as fast as decoding the whole file), else the packets of
// the video stream (one per frame for every common codec and container; no decoding).
long long count_video_frames(const std::string& path, bool decode = false);

// ---- sequential decoding -------------------------------------------------------------------------------------

// One open file, decoded frame by frame from the start. Not copyable; one object per thread.
class VideoReader {
 public:
  // threads: libavcodec's decoding threads for this file (1: decode on the calling thread only, the right choice
  // when a data loader decodes several clips in parallel).
  explicit VideoReader(const std::string& path, int threads = 1);
  ~VideoReader();
  VideoReader(VideoReader&&) noexcept;
  VideoReader& operator=(VideoReader&&) noexcept;

  const VideoInfo& info() const;
  const std::string& path() const;

  // Decodes the next frame; false at the end of the stream. Errors (a damaged packet the decoder rejects, a read
  // error of the file) name the file and the index of the frame.
  bool next();
  // Frames decoded so far; the frame next() just produced has index frames_decoded() − 1.
  long long frames_decoded() const;
  // Size of the frame next() just produced (it may differ from info() in a stream that changes size).
  int frame_width() const;
  int frame_height() const;

  // The frame next() just produced (after the end of the stream: the last one), converted to RGB and resized to
  // out_w × out_h (0, 0: the frame's own size). Planar output:
  //   r, g, b: (out_h, out_w) each, rows `stride` bytes apart (stride 0: out_w).
  void convert(std::uint8_t* r, std::uint8_t* g, std::uint8_t* b, int out_w = 0, int out_h = 0, int stride = 0);
  // The same frame interleaved: (out_h, out_w, 3) R, G, B.
  std::vector<std::uint8_t> convert_rgb(int out_w = 0, int out_h = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- clips ----------------------------------------------------------------------------------------------------

enum class SampleMode { Stride, Uniform };
enum class ResizeMode { CenterCrop, Stretch };

inline constexpr int kCenterOffset = -1;  // FrameSampling::offset: centre the span in the clip

struct FrameSampling {
  SampleMode mode = SampleMode::Stride;
  int frames = 16;  // T
  int stride = 4;   // Stride: frames between two samples (VideoMAE's frame_sample_rate)
  int offset = 0;   // Stride: index of the first sampled frame, or kCenterOffset
};

struct ClipOptions {
  FrameSampling sampling;
  int size = 112;                              // S; 0 keeps the native H×W
  ResizeMode resize = ResizeMode::CenterCrop;
  bool clamp_short = false;                    // repeat the last frame instead of failing on a short clip
  int threads = 1;                             // libavcodec threads (see VideoReader)
};

// A decoded clip: (C, T, H, W) row-major bytes, channel 0 red, 1 green, 2 blue.
struct Clip {
  int channels = 3;  // C
  int frames = 0;    // T
  int height = 0;    // H
  int width = 0;     // W
  std::vector<std::uint8_t> pixels;  // (C, T, H, W)

  std::size_t size() const { return std::size_t(channels) * frames * height * width; }
  // Byte (c, t, y, x).
  std::uint8_t at(int c, int t, int y, int x) const {
    return pixels[((std::size_t(c) * frames + t) * height + y) * width + x];
  }
};

// The T frame indices the sampling picks from a clip of `frame_count` frames (the rules at the top of this file).
// Errors name `what` (a file name), the frames found and the frames wanted, unless clamp_short: then indices past the
// end become frame_count − 1.
std::vector<long long> frame_indices(const FrameSampling& sampling, long long frame_count, bool clamp_short = false,
                                     const std::string& what = "clip");

// One clip from a file (the rules at the top of this file). read_clip_into writes C·T·H·W bytes to `out`; H and W
// are S, or the native size when options.size is 0 (clip_dims tells them without decoding).
Clip read_clip(const std::string& path, const ClipOptions& options);
void read_clip_into(const std::string& path, const ClipOptions& options, std::uint8_t* out);
struct ClipDims {
  int channels, frames, height, width;
};
ClipDims clip_dims(const std::string& path, const ClipOptions& options);

// ---- writing --------------------------------------------------------------------------------------------------

enum class VideoCodec { Mpeg4, Mjpeg };
enum class FrameLayout { CTHW, THWC };  // (C, T, H, W) planar, or (T, H, W, C) interleaved; C = 3, R G B

const char* codec_name(VideoCodec codec);  // "mpeg4", "mjpeg"

struct VideoWriteOptions {
  VideoCodec codec = VideoCodec::Mjpeg;
  double fps = 25;
  // Fixed quantiser 1 … 31, lower is better (ffmpeg's -q:v). MJPEG is written 4:4:4 full range (colours of small
  // objects survive), MPEG-4 part 2 4:2:0 limited range, intra-only every 12 frames, no B-frames.
  int quality = 2;
};

// Encodes T frames of H×W RGB bytes into `path`; the container follows the extension (.avi, .mkv, .mp4, .mov;
// MPEG-4 needs even H and W). The file is written under a temporary name in the same folder and renamed to `path`
// when complete, so `path` never holds half a clip. Errors name the file.
void write_video(const std::string& path, const std::uint8_t* frames, FrameLayout layout, int T, int H, int W,
                 const VideoWriteOptions& options = {});

// "Major.minor.micro" of libavformat, libavcodec, libswscale and libavutil, for logs.
std::string ffmpeg_versions();

}  // namespace liere::data
