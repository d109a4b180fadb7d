// data_tools/video.cpp — FFmpeg decoding, frame sampling and encoding (the rules in video.hpp).
#include <data_tools/video.hpp>

#include <liere/io/atomic_file.hpp>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unistd.h>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

// ---- FFmpeg's log: silent, but the last error line of each thread is kept for our messages --------------------

thread_local std::string t_last_ffmpeg_error;
bool g_ffmpeg_verbose = false;

void log_callback(void* avcl, int level, const char* fmt, va_list vl) {
  if (level > (g_ffmpeg_verbose ? AV_LOG_WARNING : AV_LOG_ERROR)) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(avcl, level, fmt, vl, line, int(sizeof line), &print_prefix);
  if (g_ffmpeg_verbose) std::fputs(line, stderr);
  if (level > AV_LOG_ERROR) return;
  std::string s = line;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (!s.empty()) t_last_ffmpeg_error = s;
}

void init_ffmpeg() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("LIERE_FFMPEG_LOG");
    g_ffmpeg_verbose = v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
    av_log_set_level(g_ffmpeg_verbose ? AV_LOG_WARNING : AV_LOG_ERROR);
    av_log_set_callback(log_callback);
  });
}

// "Invalid data found when processing input", plus FFmpeg's last error line when there is one.
std::string describe(int err) {
  char buf[256];
  if (av_strerror(err, buf, sizeof buf) < 0) std::snprintf(buf, sizeof buf, "FFmpeg error %d", err);
  std::string s = buf;
  if (!t_last_ffmpeg_error.empty()) s += "; FFmpeg says: " + t_last_ffmpeg_error;
  return s;
}

void ensure_file(const std::string& path) {
  std::error_code ec;
  LIERE_ENSURE(fs::exists(path, ec), "cannot open '" << path << "': no such file (expected a video file)");
  LIERE_ENSURE(!fs::is_directory(path, ec), "cannot open '" << path << "': is a directory (expected a video file)");
  LIERE_ENSURE(fs::is_regular_file(path, ec), "cannot open '" << path << "': not a regular file (expected a video file)");
}

// Closes an AVFormatContext opened for reading.
struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};

// An open container with its best video stream; other streams are discarded by the demuxer.
struct Input {
  std::unique_ptr<AVFormatContext, FormatCloser> owner;  // closed also when the constructor throws
  AVFormatContext* fmt = nullptr;
  int stream = -1;
  const AVCodec* codec = nullptr;

  explicit Input(const std::string& path) {
    init_ffmpeg();
    ensure_file(path);
    t_last_ffmpeg_error.clear();
    int r = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr);  // frees and nulls fmt when it fails
    LIERE_ENSURE(r >= 0, "'" << path << "' is not a video file FFmpeg can read (" << describe(r) << ")");
    owner.reset(fmt);
    r = avformat_find_stream_info(fmt, nullptr);
    LIERE_ENSURE(r >= 0, "'" << path << "': cannot read the stream headers (" << describe(r)
                             << "); the file is truncated, damaged or not a video");
    r = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    LIERE_ENSURE(r != AVERROR_STREAM_NOT_FOUND, "'" << path << "' has no video stream (FFmpeg reads it as '"
                                                    << fmt->iformat->name << "' with " << fmt->nb_streams
                                                    << " stream(s); expected a video file)");
    if (r == AVERROR_DECODER_NOT_FOUND) {
      int s = 0;
      for (unsigned i = 0; i < fmt->nb_streams; ++i)
        if (fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) s = int(i);
      LIERE_ENSURE(false, "'" << path << "': this FFmpeg has no decoder for its video codec '"
                              << avcodec_get_name(fmt->streams[s]->codecpar->codec_id) << "'");
    }
    LIERE_ENSURE(r >= 0, "'" << path << "': no usable video stream (" << describe(r) << ")");
    stream = r;
    for (unsigned i = 0; i < fmt->nb_streams; ++i)
      if (int(i) != stream) fmt->streams[i]->discard = AVDISCARD_ALL;
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  VideoInfo info(const std::string& path) const {
    const AVStream* st = fmt->streams[stream];
    VideoInfo v;
    v.path = path;
    v.codec = avcodec_get_name(st->codecpar->codec_id);
    v.container = fmt->iformat->name;
    v.width = st->codecpar->width;
    v.height = st->codecpar->height;
    const AVRational fr = av_guess_frame_rate(fmt, const_cast<AVStream*>(st), nullptr);
    if (fr.num > 0 && fr.den > 0) v.fps = av_q2d(fr);
    v.frame_count = st->nb_frames > 0 ? (long long)st->nb_frames : -1;
    if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
      v.duration_s = double(st->duration) * av_q2d(st->time_base);
    else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
      v.duration_s = double(fmt->duration) / AV_TIME_BASE;
    return v;
  }
};

bool is_full_range_format(AVPixelFormat f) {
  return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
         f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

bool is_yuv(AVPixelFormat f) {
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(f);
  return d != nullptr && !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3;
}

constexpr int kSwsFlags = SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP;

// A name beside `path` that no other writer (process or thread) uses.
fs::path temp_name(const fs::path& path) { return liere::io::unique_temp_path(path.string()); }

}  // namespace

// ==== probing ====================================================================================================

VideoInfo probe_video(const std::string& path) {
  const Input in(path);
  return in.info(path);
}

long long count_video_frames(const std::string& path, bool decode) {
  if (decode) {
    VideoReader r(path);
    while (r.next()) {
    }
    return r.frames_decoded();
  }
  Input in(path);
  AVPacket* pkt = av_packet_alloc();
  LIERE_ENSURE(pkt != nullptr, "count_video_frames: out of memory");
  long long n = 0;
  int r = 0;
  while ((r = av_read_frame(in.fmt, pkt)) >= 0) {
    if (pkt->stream_index == in.stream) ++n;
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  LIERE_ENSURE(r == AVERROR_EOF, "'" << path << "': read error after " << n << " video packets (" << describe(r)
                                     << "); the file is truncated or damaged");
  return n;
}

// ==== VideoReader ================================================================================================

struct VideoReader::Impl {
  std::string path;
  VideoInfo info;
  std::unique_ptr<Input> in;
  AVCodecContext* dec = nullptr;
  AVPacket* pkt = nullptr;
  AVFrame* frame = nullptr;     // the last decoded frame
  AVFrame* incoming = nullptr;  // what avcodec_receive_frame writes to
  bool flushing = false, ended = false;
  long long decoded = 0;

  SwsContext* sws = nullptr;
  int sws_key[6] = {-1, -1, -1, -1, -1, -1};  // src w, h, format, colorspace, range; dst w·65536 + h

  ~Impl() {
    sws_freeContext(sws);
    av_frame_free(&incoming);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&dec);
  }
};

VideoReader::VideoReader(const std::string& path, int threads) : impl_(std::make_unique<Impl>()) {
  LIERE_ENSURE(threads >= 0, "VideoReader: threads must be ≥ 0, got " << threads);
  Impl& m = *impl_;
  m.path = path;
  m.in = std::make_unique<Input>(path);
  m.info = m.in->info(path);
  m.dec = avcodec_alloc_context3(m.in->codec);
  m.pkt = av_packet_alloc();
  m.frame = av_frame_alloc();
  m.incoming = av_frame_alloc();
  LIERE_ENSURE(m.dec && m.pkt && m.frame && m.incoming, "'" << path << "': out of memory opening the decoder");
  int r = avcodec_parameters_to_context(m.dec, m.in->fmt->streams[m.in->stream]->codecpar);
  LIERE_ENSURE(r >= 0, "'" << path << "': bad codec parameters (" << describe(r) << ")");
  m.dec->thread_count = threads;
  r = avcodec_open2(m.dec, m.in->codec, nullptr);
  LIERE_ENSURE(r >= 0, "'" << path << "': cannot open the " << m.info.codec << " decoder (" << describe(r) << ")");
}

VideoReader::~VideoReader() = default;
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;

const VideoInfo& VideoReader::info() const { return impl_->info; }
const std::string& VideoReader::path() const { return impl_->path; }
long long VideoReader::frames_decoded() const { return impl_->decoded; }
int VideoReader::frame_width() const { return impl_->frame->width; }
int VideoReader::frame_height() const { return impl_->frame->height; }

bool VideoReader::next() {
  Impl& m = *impl_;
  if (m.ended) return false;
  for (;;) {
    int r = avcodec_receive_frame(m.dec, m.incoming);
    if (r >= 0) {
      av_frame_unref(m.frame);
      av_frame_move_ref(m.frame, m.incoming);
      ++m.decoded;
      return true;
    }
    if (r == AVERROR_EOF) {
      m.ended = true;
      return false;
    }
    LIERE_ENSURE(r == AVERROR(EAGAIN), "'" << m.path << "': decoding failed after " << m.decoded << " frames ("
                                           << describe(r) << ")");
    if (m.flushing) {  // the decoder asks for input after the end: nothing more will come
      m.ended = true;
      return false;
    }
    r = av_read_frame(m.in->fmt, m.pkt);
    if (r == AVERROR_EOF) {
      m.flushing = true;
      r = avcodec_send_packet(m.dec, nullptr);
      LIERE_ENSURE(r >= 0 || r == AVERROR_EOF, "'" << m.path << "': decoding failed at the end of the stream after "
                                                    << m.decoded << " frames (" << describe(r) << ")");
      continue;
    }
    LIERE_ENSURE(r >= 0, "'" << m.path << "': read error after " << m.decoded << " frames (" << describe(r)
                             << "); the file is truncated or damaged");
    if (m.pkt->stream_index != m.in->stream) {
      av_packet_unref(m.pkt);
      continue;
    }
    r = avcodec_send_packet(m.dec, m.pkt);
    av_packet_unref(m.pkt);
    LIERE_ENSURE(r >= 0, "'" << m.path << "': the " << m.info.codec << " decoder rejected the packet after frame "
                             << m.decoded << " (" << describe(r) << "); the file is damaged");
  }
}

void VideoReader::convert(std::uint8_t* r, std::uint8_t* g, std::uint8_t* b, int out_w, int out_h, int stride) {
  Impl& m = *impl_;
  const AVFrame* f = m.frame;
  LIERE_ENSURE(f->width > 0 && f->height > 0 && f->data[0] != nullptr,
               "'" << m.path << "': VideoReader::convert called before a frame was decoded");
  if (out_w == 0 && out_h == 0) {
    out_w = f->width;
    out_h = f->height;
  }
  LIERE_ENSURE(out_w > 0 && out_h > 0, "VideoReader::convert: bad output size " << out_w << "×" << out_h);
  if (stride == 0) stride = out_w;
  LIERE_ENSURE(stride >= out_w, "VideoReader::convert: stride " << stride << " < width " << out_w);

  const AVPixelFormat src = AVPixelFormat(f->format);
  const int full = (f->color_range == AVCOL_RANGE_JPEG || is_full_range_format(src)) ? 1 : 0;
  const int key[6] = {f->width, f->height, int(src), int(f->colorspace), full, out_w * 65536 + out_h};
  if (!m.sws || !std::equal(key, key + 6, m.sws_key)) {
    sws_freeContext(m.sws);
    m.sws = sws_getContext(f->width, f->height, src, out_w, out_h, AV_PIX_FMT_GBRP, kSwsFlags, nullptr, nullptr,
                           nullptr);
    LIERE_ENSURE(m.sws != nullptr, "'" << m.path << "': cannot convert " << f->width << "×" << f->height << " "
                                       << (av_get_pix_fmt_name(src) ? av_get_pix_fmt_name(src) : "?")
                                       << " frames to RGB");
    if (is_yuv(src)) {
      // The stream's matrix (BT.601 when unspecified: sws_getCoefficients falls back to its default) and range;
      // RGB output is full range.
      sws_setColorspaceDetails(m.sws, sws_getCoefficients(int(f->colorspace)), full,
                               sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    }
    std::copy(key, key + 6, m.sws_key);
  }
  std::uint8_t* dst[4] = {g, b, r, nullptr};  // GBRP: planes G, B, R
  const int dst_stride[4] = {stride, stride, stride, 0};
  const int h = sws_scale(m.sws, f->data, f->linesize, 0, f->height, dst, dst_stride);
  LIERE_ENSURE(h == out_h, "'" << m.path << "': colour conversion of frame " << m.decoded - 1 << " failed");
}

std::vector<std::uint8_t> VideoReader::convert_rgb(int out_w, int out_h) {
  if (out_w == 0 && out_h == 0) {
    out_w = frame_width();
    out_h = frame_height();
  }
  const std::size_t plane = std::size_t(out_w) * out_h;
  std::vector<std::uint8_t> planar(3 * plane), rgb(3 * plane);
  convert(planar.data(), planar.data() + plane, planar.data() + 2 * plane, out_w, out_h);
  for (std::size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = planar[c * plane + i];
  return rgb;
}

// ==== sampling ===================================================================================================

namespace {

std::string describe_sampling(const FrameSampling& s) {
  std::string d = std::to_string(s.frames) + " frames ";
  if (s.mode == SampleMode::Uniform) return d + "spread uniformly";
  d += "with stride " + std::to_string(s.stride);
  return d + (s.offset == kCenterOffset ? " centred in the clip" : " from frame " + std::to_string(s.offset));
}

void check_sampling(const FrameSampling& s) {
  LIERE_ENSURE(s.frames >= 1, "frame sampling: frames must be ≥ 1, got " << s.frames);
  if (s.mode == SampleMode::Stride) {
    LIERE_ENSURE(s.stride >= 1, "frame sampling: stride must be ≥ 1, got " << s.stride);
    LIERE_ENSURE(s.offset >= 0 || s.offset == kCenterOffset,
                 "frame sampling: offset must be ≥ 0 or kCenterOffset (-1), got " << s.offset);
  }
}

}  // namespace

std::vector<long long> frame_indices(const FrameSampling& s, long long n, bool clamp_short, const std::string& what) {
  check_sampling(s);
  const long long T = s.frames;
  std::vector<long long> idx(std::size_t(T), 0);
  const bool unknown = n < 0;
  LIERE_ENSURE(!unknown || (s.mode == SampleMode::Stride && s.offset != kCenterOffset),
               "frame_indices: '" << what << "': " << describe_sampling(s) << " needs the clip's frame count");
  LIERE_ENSURE(unknown || n > 0, "'" << what << "' has no frames (wanted " << describe_sampling(s) << ")");
  long long wanted = 0;
  if (s.mode == SampleMode::Uniform) {
    for (long long k = 0; k < T; ++k) idx[std::size_t(k)] = (2 * k + 1) * n / (2 * T);
    wanted = T;
  } else {
    const long long span = (T - 1) * s.stride + 1;
    const long long offset = s.offset == kCenterOffset ? std::max(0LL, (n - span) / 2) : s.offset;
    for (long long k = 0; k < T; ++k) idx[std::size_t(k)] = offset + k * s.stride;
    wanted = offset + span;
  }
  if (!unknown && wanted > n) {
    LIERE_ENSURE(clamp_short, "'" << what << "' is too short: it has " << n << " frames, " << wanted
                                  << " wanted (" << describe_sampling(s) << ")");
    for (auto& i : idx) i = std::min(i, n - 1);
  }
  return idx;
}

ClipDims clip_dims(const std::string& path, const ClipOptions& o) {
  LIERE_ENSURE(o.size >= 0, "clip options: size must be ≥ 0, got " << o.size);
  check_sampling(o.sampling);
  if (o.size > 0) return {3, o.sampling.frames, o.size, o.size};
  const VideoInfo info = probe_video(path);
  return {3, o.sampling.frames, info.height, info.width};
}

Clip read_clip(const std::string& path, const ClipOptions& o) {
  Clip clip;
  const ClipDims d = clip_dims(path, o);
  clip.channels = d.channels;
  clip.frames = d.frames;
  clip.height = d.height;
  clip.width = d.width;
  clip.pixels.resize(clip.size());
  read_clip_into(path, o, clip.pixels.data());
  return clip;
}

void read_clip_into(const std::string& path, const ClipOptions& o, std::uint8_t* out) {
  LIERE_ENSURE(o.size >= 0, "clip options: size must be ≥ 0, got " << o.size);
  check_sampling(o.sampling);
  VideoReader reader(path, o.threads);
  const VideoInfo& info = reader.info();
  const FrameSampling& s = o.sampling;
  const int T = s.frames;

  // Plan: the indices, from the header's frame count where the rule needs one.
  const bool needs_count = s.mode == SampleMode::Uniform || s.offset == kCenterOffset;
  long long n = -1;
  if (needs_count) n = info.frame_count > 0 ? info.frame_count : count_video_frames(path);
  const std::vector<long long> idx = frame_indices(s, n, o.clamp_short, path);

  // Output geometry: H×W, and for CenterCrop the scaled size (sw, sh) of which the central H×W is kept.
  const int H = o.size > 0 ? o.size : info.height, W = o.size > 0 ? o.size : info.width;
  const std::size_t plane = std::size_t(H) * W, channel = std::size_t(T) * plane;
  std::vector<std::uint8_t> scratch;
  auto convert_to = [&](int t) {
    const int fw = reader.frame_width(), fh = reader.frame_height();
    std::uint8_t* r = out + std::size_t(t) * plane;
    if (o.size == 0) {
      LIERE_ENSURE(fw == W && fh == H, "'" << path << "': frame " << reader.frames_decoded() - 1 << " is " << fw << "×"
                                           << fh << ", the stream started at " << W << "×" << H
                                           << " (give a size to resize every frame)");
    }
    if (o.size == 0 || o.resize == ResizeMode::Stretch || fw == fh) {
      reader.convert(r, r + channel, r + 2 * channel, W, H);
      return;
    }
    // Shorter side to S, then the central S×S.
    int sw, sh;
    if (fw < fh) {
      sw = W;
      sh = std::max(H, int((long long)fh * W / fw + ((long long)fh * W % fw * 2 >= fw ? 1 : 0)));
    } else {
      sh = H;
      sw = std::max(W, int((long long)fw * H / fh + ((long long)fw * H % fh * 2 >= fh ? 1 : 0)));
    }
    const std::size_t splane = std::size_t(sw) * sh;
    scratch.resize(3 * splane);
    reader.convert(scratch.data(), scratch.data() + splane, scratch.data() + 2 * splane, sw, sh);
    const int x0 = (sw - W) / 2, y0 = (sh - H) / 2;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < H; ++y)
        std::memcpy(r + c * channel + std::size_t(y) * W, scratch.data() + c * splane + std::size_t(y0 + y) * sw + x0,
                    std::size_t(W));
  };

  // Decode in order; idx is non-decreasing, equal indices copy the frame already converted.
  for (int t = 0; t < T; ++t) {
    if (t > 0 && idx[std::size_t(t)] == idx[std::size_t(t) - 1]) {
      for (int c = 0; c < 3; ++c)
        std::memcpy(out + c * channel + std::size_t(t) * plane, out + c * channel + std::size_t(t - 1) * plane, plane);
      continue;
    }
    bool ok = true;
    while (reader.frames_decoded() <= idx[std::size_t(t)])
      if (!reader.next()) {
        ok = false;
        break;
      }
    if (ok) {
      convert_to(t);
      continue;
    }
    // The stream ended before frame idx[t].
    const long long found = reader.frames_decoded();
    if (o.clamp_short && found > 0) {
      for (int u = t; u < T; ++u) convert_to(u);  // the last decoded frame
      return;
    }
    const long long wanted = idx.back() + 1;
    std::string why;
    if (info.frame_count > found)
      why = "; its header declares " + std::to_string(info.frame_count) + " frames, so the file is truncated or damaged";
    LIERE_ENSURE(false, "'" << path << "' is too short: it has " << found << " frames, " << wanted << " wanted ("
                            << describe_sampling(s) << ")" << why);
  }
}

// ==== writing ====================================================================================================

const char* codec_name(VideoCodec codec) { return codec == VideoCodec::Mpeg4 ? "mpeg4" : "mjpeg"; }

namespace {

// Everything one encoding owns; the destructor removes the temporary file unless the clip was committed.
struct Output {
  AVFormatContext* oc = nullptr;
  AVCodecContext* enc = nullptr;
  AVFrame* frame = nullptr;
  AVPacket* pkt = nullptr;
  SwsContext* sws = nullptr;
  fs::path temp;
  bool committed = false;

  ~Output() {
    sws_freeContext(sws);
    av_packet_free(&pkt);
    av_frame_free(&frame);
    avcodec_free_context(&enc);
    if (oc) {
      if (oc->pb) avio_closep(&oc->pb);
      avformat_free_context(oc);
    }
    if (!committed && !temp.empty()) {
      std::error_code ec;
      fs::remove(temp, ec);
    }
  }
};

// Sends `frame` (nullptr: flush) and writes every packet the encoder returns.
void encode(Output& o, const AVFrame* frame, const std::string& path) {
  int r = avcodec_send_frame(o.enc, frame);
  LIERE_ENSURE(r >= 0, "'" << path << "': encoding failed (" << describe(r) << ")");
  for (;;) {
    r = avcodec_receive_packet(o.enc, o.pkt);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    LIERE_ENSURE(r >= 0, "'" << path << "': encoding failed (" << describe(r) << ")");
    av_packet_rescale_ts(o.pkt, o.enc->time_base, o.oc->streams[0]->time_base);
    o.pkt->stream_index = 0;
    r = av_interleaved_write_frame(o.oc, o.pkt);
    LIERE_ENSURE(r >= 0, "'" << path << "': cannot write (" << describe(r) << ")");
  }
}

}  // namespace

void write_video(const std::string& path, const std::uint8_t* frames, FrameLayout layout, int T, int H, int W,
                 const VideoWriteOptions& opt) {
  init_ffmpeg();
  t_last_ffmpeg_error.clear();
  LIERE_ENSURE(T >= 1 && H >= 1 && W >= 1, "write_video '" << path << "': bad clip size T=" << T << " H=" << H
                                                           << " W=" << W);
  LIERE_ENSURE(frames != nullptr, "write_video '" << path << "': no pixels");
  LIERE_ENSURE(opt.fps > 0 && opt.fps <= 1000, "write_video '" << path << "': fps must be in (0, 1000], got " << opt.fps);
  LIERE_ENSURE(opt.quality >= 1 && opt.quality <= 31,
               "write_video '" << path << "': quality must be 1 … 31, got " << opt.quality);
  const bool mjpeg = opt.codec == VideoCodec::Mjpeg;
  LIERE_ENSURE(mjpeg || (H % 2 == 0 && W % 2 == 0),
               "write_video '" << path << "': MPEG-4 needs an even width and height, got " << W << "×" << H);

  const fs::path final_path(path);
  const AVOutputFormat* ofmt = av_guess_format(nullptr, final_path.filename().c_str(), nullptr);
  LIERE_ENSURE(ofmt != nullptr, "write_video '" << path << "': no container for the extension '"
                                                << final_path.extension().string()
                                                << "' (expected .avi, .mkv, .mp4 or .mov)");
  Output o;
  o.temp = temp_name(final_path);
  int r = avformat_alloc_output_context2(&o.oc, ofmt, nullptr, o.temp.c_str());
  LIERE_ENSURE(r >= 0 && o.oc, "write_video '" << path << "': " << describe(r));
  const AVCodec* codec = avcodec_find_encoder(mjpeg ? AV_CODEC_ID_MJPEG : AV_CODEC_ID_MPEG4);
  LIERE_ENSURE(codec != nullptr, "write_video '" << path << "': this FFmpeg has no " << codec_name(opt.codec)
                                                 << " encoder");
  AVStream* st = avformat_new_stream(o.oc, nullptr);
  o.enc = avcodec_alloc_context3(codec);
  o.frame = av_frame_alloc();
  o.pkt = av_packet_alloc();
  LIERE_ENSURE(st && o.enc && o.frame && o.pkt, "write_video '" << path << "': out of memory");

  const AVRational rate = av_d2q(opt.fps, 100000);
  o.enc->width = W;
  o.enc->height = H;
  o.enc->time_base = av_inv_q(rate);
  o.enc->framerate = rate;
  o.enc->pix_fmt = mjpeg ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
  o.enc->color_range = mjpeg ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
  o.enc->colorspace = AVCOL_SPC_BT470BG;  // BT.601, what a decoder assumes when the file does not say
  o.enc->flags |= AV_CODEC_FLAG_QSCALE;
  o.enc->global_quality = FF_QP2LAMBDA * opt.quality;
  o.enc->qmin = 1;
  o.enc->qmax = 31;
  o.enc->thread_count = 1;
  if (!mjpeg) {
    o.enc->gop_size = 12;
    o.enc->max_b_frames = 0;
  }
  if (o.oc->oformat->flags & AVFMT_GLOBALHEADER) o.enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  r = avcodec_open2(o.enc, codec, nullptr);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': cannot open the " << codec_name(opt.codec) << " encoder for "
                                       << W << "×" << H << " (" << describe(r) << ")");
  r = avcodec_parameters_from_context(st->codecpar, o.enc);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': " << describe(r));
  st->time_base = o.enc->time_base;
  st->avg_frame_rate = rate;

  r = avio_open(&o.oc->pb, o.temp.c_str(), AVIO_FLAG_WRITE);
  LIERE_ENSURE(r >= 0, "write_video: cannot create '" << o.temp.string() << "' for '" << path << "' ("
                                                      << describe(r) << ")");
  r = avformat_write_header(o.oc, nullptr);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': cannot write the header (" << describe(r) << ")");

  o.frame->format = o.enc->pix_fmt;
  o.frame->width = W;
  o.frame->height = H;
  o.frame->color_range = o.enc->color_range;
  o.frame->colorspace = o.enc->colorspace;
  r = av_frame_get_buffer(o.frame, 0);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': out of memory for a frame");
  const AVPixelFormat src_fmt = layout == FrameLayout::CTHW ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24;
  o.sws = sws_getContext(W, H, src_fmt, W, H, o.enc->pix_fmt, kSwsFlags, nullptr, nullptr, nullptr);
  LIERE_ENSURE(o.sws != nullptr, "write_video '" << path << "': cannot convert RGB to " << codec_name(opt.codec));
  const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
  sws_setColorspaceDetails(o.sws, bt601, 1, bt601, mjpeg ? 1 : 0, 0, 1 << 16, 1 << 16);

  const std::size_t plane = std::size_t(H) * W;
  for (int t = 0; t < T; ++t) {
    r = av_frame_make_writable(o.frame);
    LIERE_ENSURE(r >= 0, "write_video '" << path << "': out of memory for a frame");
    const std::uint8_t* src[4] = {nullptr, nullptr, nullptr, nullptr};
    int src_stride[4] = {0, 0, 0, 0};
    if (layout == FrameLayout::CTHW) {
      const std::uint8_t* red = frames + std::size_t(t) * plane;
      const std::size_t channel = std::size_t(T) * plane;
      src[0] = red + channel;      // G
      src[1] = red + 2 * channel;  // B
      src[2] = red;                // R
      src_stride[0] = src_stride[1] = src_stride[2] = W;
    } else {
      src[0] = frames + std::size_t(t) * plane * 3;
      src_stride[0] = 3 * W;
    }
    sws_scale(o.sws, src, src_stride, 0, H, o.frame->data, o.frame->linesize);
    o.frame->pts = t;
    o.frame->quality = o.enc->global_quality;
    encode(o, o.frame, path);
  }
  encode(o, nullptr, path);
  r = av_write_trailer(o.oc);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': cannot finish the file (" << describe(r) << ")");
  r = avio_closep(&o.oc->pb);
  LIERE_ENSURE(r >= 0, "write_video '" << path << "': cannot close '" << o.temp.string() << "' (" << describe(r) << ")");

  // fsync, rename, fsync of the folder; on failure the temporary file is removed and `path` left as it was.
  o.committed = true;  // commit_file_atomic removes the temporary file itself if it fails
  liere::io::commit_file_atomic(o.temp.string(), final_path.string(), "write_video");
}

std::string ffmpeg_versions() {
  auto v = [](unsigned x) {
    return std::to_string(AV_VERSION_MAJOR(x)) + "." + std::to_string(AV_VERSION_MINOR(x)) + "." +
           std::to_string(AV_VERSION_MICRO(x));
  };
  return "libavformat " + v(avformat_version()) + ", libavcodec " + v(avcodec_version()) + ", libswscale " +
         v(swscale_version()) + ", libavutil " + v(avutil_version());
}

}  // namespace liere::data
