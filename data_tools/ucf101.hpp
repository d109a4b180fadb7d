// data_tools/ucf101.hpp — UCF101 (Soomro, Zamir, Shah 2012: 13,320 YouTube clips of 101 actions): the official
// split lists, a data set of decoded clips over the extracted files, and a disk cache of decoded clips.
//
// C channels (3, R G B), T frames, S the side of the square frames; a clip is (C, T, S, S) bytes, which a trainer
// stacks into (B, C, T, H, W).
//
// The official files (https://www.crcv.ucf.edu/data/UCF101.php): UCF101.rar extracts to
// UCF-101/<Class>/v_<Class>_gGG_cCC.avi (MPEG-4 part 2 in AVI, 320×240, 25 fps, 1.06 s to 71 s, 7.2 s on average);
// UCF101TrainTestSplits-RecognitionTask.zip extracts to ucfTrainTestlist/ with, in text with CRLF line endings:
//   classInd.txt       101 lines "<k> <Class>", k = 1 … 101 in order ("1 ApplyEyeMakeup" … "101 YoYo");
//   trainlist0s.txt    "<Class>/<file>.avi <k>" (k the 1-based class), s = 1, 2, 3 — 9537, 9586, 9624 lines;
//   testlist0s.txt     "<Class>/<file>.avi", the class from the folder name — 3783, 3734, 3696 lines.
// The three splits keep the 25 groups (gGG, clips cut from one long video) apart: groups 1–7, 8–14, 15–21 are the
// test groups of splits 1, 2, 3. Labels here are 0-based: label = k − 1.
//
// Every parse error is a liere::Error naming "file:line" and what was expected.
#pragma once

#include <data_tools/video.hpp>

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace liere::data {

// ---- split lists ----------------------------------------------------------------------------------------------

struct Ucf101Entry {
  std::string path;  // relative to the folder of class folders, '/'-separated: "ApplyEyeMakeup/v_…_g08_c01.avi"
  int label = 0;     // 0-based
};

// classInd.txt: the class names, index = 0-based label. Lines must be "<k> <Name>" with k = 1, 2, … in order and
// distinct names; blank lines are skipped, CR before LF is ignored.
std::vector<std::string> read_ucf101_classes(const std::string& class_ind_path);

// A train list ("<Class>/<file> <k>", 1 ≤ k ≤ classes, the folder must be class k) or a test list ("<Class>/<file>",
// the folder must be a class); which one is decided by the first line and every line must agree. Duplicate paths
// are errors. CRLF and LF both work.
std::vector<Ucf101Entry> read_ucf101_list(const std::string& list_path, const std::vector<std::string>& classes);

// The same from a stream; `name` stands for the file in errors.
std::vector<std::string> read_ucf101_classes(std::istream& in, const std::string& name);
std::vector<Ucf101Entry> read_ucf101_list(std::istream& in, const std::string& name,
                                          const std::vector<std::string>& classes);

// "trainlist01.txt" … "testlist03.txt"; split in 1 … 3.
std::string ucf101_list_name(int split, bool train);

// The paths both lists name, in the order of `a`. A split's training and test lists share none (UCF101's splits hold
// out whole groups of clips), so a clip in both means lists that are not UCF101's: its test accuracy would count
// clips the model trained on.
std::vector<std::string> ucf101_overlap(const std::vector<Ucf101Entry>& a, const std::vector<Ucf101Entry>& b);

// Where the clips and the lists are, from `root`:
//   videos: root/UCF-101 when it is a folder, else root itself (the class folders directly);
//   lists:  lists_dir when given (an error naming it when it does not exist, is not a folder or has no
//           classInd.txt), else the first of root/ucfTrainTestlist, root (classInd.txt in root),
//           root/../ucfTrainTestlist that holds classInd.txt.
struct Ucf101Layout {
  std::string videos_dir;
  std::string lists_dir;
};
Ucf101Layout find_ucf101_layout(const std::string& root, const std::string& lists_dir = "");

// ---- a disk cache of decoded clips ---------------------------------------------------------------------------

// One file per clip, named by a 64-bit FNV-1a hash of its key (16 hex digits + ".clip"); the key names the source
// file and how the clip was made (sampling, size, resize), so a change of options never reuses a stale clip.
// All integers little-endian:
//   offset  0  8 bytes  magic "LIERECLP"
//           8  u32      format version (1)
//          12  u32      K, the key's length in bytes
//          16  u32 × 4  C, T, H, W
//          32  u64      size of the source file in bytes
//          40  i64      modification time of the source file, nanoseconds since 1970
//          48  u64      P = C·T·H·W, the payload bytes
//          56  K bytes  the key
//        56+K  P bytes  the clip, (C, T, H, W)
//      56+K+P  u32      CRC-32 (zlib) of every byte before it
// A file whose magic, version, length, key, dimensions, source size or time, or checksum does not match is
// rejected: reported on the log, counted, and the clip is decoded again and rewritten. Files are written under a
// temporary name and renamed, so several threads or processes may share one cache folder.
struct ClipCacheStats {
  std::uint64_t hits = 0;      // clips read from the cache
  std::uint64_t misses = 0;    // no file, or a rejected one
  std::uint64_t rejected = 0;  // files found but not used (damaged, stale, other key)
  std::uint64_t writes = 0;    // files written
};

class ClipCache {
 public:
  // dir is created if needed. log: where rejections are reported (nullptr: std::cerr).
  explicit ClipCache(std::string dir, std::ostream* log = nullptr);

  const std::string& dir() const { return dir_; }
  std::string file_for(const std::string& key) const;

  // Reads the clip cached under `key` for the file `source` into out (C·T·H·W bytes of dims); false on a miss.
  bool read(const std::string& key, const std::string& source, const ClipDims& dims, std::uint8_t* out);
  void write(const std::string& key, const std::string& source, const ClipDims& dims, const std::uint8_t* pixels);

  ClipCacheStats stats() const;

 private:
  std::string dir_;
  std::ostream* log_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, rejected_{0}, writes_{0};
};

// ---- the data set ---------------------------------------------------------------------------------------------

struct Ucf101Options {
  int split = 1;      // 1, 2 or 3
  bool train = true;  // trainlist0s.txt or testlist0s.txt
  // 16 frames every 4th (VideoMAE's sampling for UCF101), centred in the clip, at 112×112. A clip shorter than the
  // 61 frames this spans is an error unless clip.clamp_short (repeat the last frame) or skip_bad_clips.
  ClipOptions clip{FrameSampling{SampleMode::Stride, 16, 4, kCenterOffset}, 112, ResizeMode::CenterCrop, false, 1};
  std::string lists_dir;        // empty: found from root (find_ucf101_layout)
  std::string cache_dir;        // empty: no cache
  // A clip named by the list but missing on disk, or no file there (a folder), is an error naming it and what it is;
  // with skip_bad_clips, such clips are dropped when the set is built, and a clip that fails to decode is replaced
  // by the next good one (i+1, i+2, …) when loaded. Either way every skipped clip is reported on the log with the
  // reason, with a running count.
  bool skip_bad_clips = false;
  std::ostream* log = nullptr;  // nullptr: std::cerr
};

class Ucf101 {
 public:
  Ucf101(const std::string& root, const Ucf101Options& options = {});
  ~Ucf101();

  int size() const { return int(entries_.size()); }
  int num_classes() const { return int(classes_.size()); }
  const std::vector<std::string>& class_names() const { return classes_; }
  const Ucf101Entry& entry(int i) const;
  const std::vector<Ucf101Entry>& entries() const { return entries_; }
  std::string clip_path(int i) const;  // videos_dir / entry(i).path
  const Ucf101Layout& layout() const { return layout_; }
  const Ucf101Options& options() const { return options_; }

  ClipDims clip_dims() const;    // {3, T, S, S}
  std::size_t clip_bytes() const;  // 3·T·S·S

  // Clip i into out, (C, T, S, S); returns its label. With skip_bad_clips a clip that fails is reported and the
  // next good one is returned instead. Safe to call from several threads at once.
  int load(int i, std::uint8_t* out) const;
  // Clips indices[0 … count−1] into out, (count, C, T, S, S), and their labels, on OpenMP threads.
  void load_batch(const int* indices, int count, std::uint8_t* out, int* labels) const;

  ClipCacheStats cache_stats() const;
  // Whether clip i failed to load (with skip_bad_clips; load(i) then returns another clip).
  bool failed(int i) const;
  // Every clip skipped so far (missing at construction, failed when loaded): "path: reason".
  std::vector<std::string> skipped() const;

 private:
  void load_one(int i, std::uint8_t* out) const;
  void report_skip(const std::string& path, const std::string& reason) const;

  Ucf101Options options_;
  Ucf101Layout layout_;
  std::vector<std::string> classes_;
  std::vector<Ucf101Entry> entries_;
  std::unique_ptr<ClipCache> cache_;
  mutable std::mutex mutex_;                  // guards bad_ and skipped_
  mutable std::vector<char> bad_;             // (size()) clips that failed to load
  mutable std::vector<std::string> skipped_;
};

// The cache key of a clip: the canonical path of the source and every option that changes the bytes.
std::string clip_cache_key(const std::string& source, const ClipOptions& options);

}  // namespace liere::data
