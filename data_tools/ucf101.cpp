// data_tools/ucf101.cpp — UCF101 split lists, the clip cache and the data set (formats in ucf101.hpp).
#include <data_tools/ucf101.hpp>

#include <liere/io/atomic_file.hpp>

#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <unistd.h>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

// ---- text lists ------------------------------------------------------------------------------------------------

// The non-blank lines of a text file with their 1-based line numbers; CR before LF, surrounding white space and a
// UTF-8 byte-order mark are dropped.
std::vector<std::pair<int, std::string>> read_lines(std::istream& in, const std::string& path, const char* what) {
  std::vector<std::pair<int, std::string>> lines;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const auto last = line.find_last_not_of(" \t\r");
    lines.emplace_back(number, line.substr(first, last - first + 1));
  }
  LIERE_ENSURE(!in.bad(), "error while reading '" << path << "' (" << what << ")");
  return lines;
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string tok; is >> tok;) out.push_back(tok);
  return out;
}

// A whole decimal integer in [lo, hi], or false.
bool parse_int(const std::string& s, int lo, int hi, int& v) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  v = std::stoi(s);
  return v >= lo && v <= hi;
}

// ---- cache file helpers ---------------------------------------------------------------------------------------

constexpr char kCacheMagic[8] = {'L', 'I', 'E', 'R', 'E', 'C', 'L', 'P'};
constexpr std::uint32_t kCacheVersion = 1;
constexpr std::size_t kCacheHeader = 56;

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::uint8_t(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::uint8_t(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint32_t crc_update(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {  // zlib's crc32 takes a uInt length
    const uInt chunk = uInt(std::min<std::size_t>(n, 1u << 30));
    crc = std::uint32_t(crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Size and modification time (ns) of a file; false when it cannot be stat'ed.
bool source_stamp(const std::string& path, std::uint64_t& size, std::int64_t& mtime_ns) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  size = std::uint64_t(st.st_size);
  mtime_ns = std::int64_t(st.st_mtim.tv_sec) * 1000000000 + std::int64_t(st.st_mtim.tv_nsec);
  return true;
}

}  // namespace

// ==== lists ======================================================================================================

namespace {
constexpr const char* kClassesWhat = "the UCF101 class index, lines '<k> <ClassName>'";
constexpr const char* kListWhat = "a UCF101 split list, lines '<Class>/<file>.avi <k>' or '<Class>/<file>.avi'";

// A text file opened for read_lines, or an error naming it and what was expected.
std::ifstream open_list(const std::string& path, const char* what) {
  std::error_code ec;
  LIERE_ENSURE(!fs::is_directory(path, ec), "cannot open '" << path << "': is a directory (expected " << what << ")");
  LIERE_ENSURE(fs::is_regular_file(path, ec), "cannot open '" << path << "': no such file (expected " << what << ")");
  std::ifstream in(path, std::ios::binary);
  LIERE_ENSURE(in, "cannot open '" << path << "': " << std::strerror(errno) << " (expected " << what << ")");
  return in;
}
}  // namespace

std::vector<std::string> read_ucf101_classes(const std::string& path) {
  std::ifstream in = open_list(path, kClassesWhat);
  return read_ucf101_classes(in, path);
}

std::vector<Ucf101Entry> read_ucf101_list(const std::string& path, const std::vector<std::string>& classes) {
  std::ifstream in = open_list(path, kListWhat);
  return read_ucf101_list(in, path, classes);
}

std::vector<std::string> read_ucf101_classes(std::istream& in, const std::string& path) {
  const char* what = kClassesWhat;
  std::vector<std::string> classes;
  std::unordered_map<std::string, int> seen;
  for (const auto& [line, text] : read_lines(in, path, what)) {
    const auto tok = split_ws(text);
    const int expected = int(classes.size()) + 1;
    int k = 0;
    LIERE_ENSURE(tok.size() == 2 && parse_int(tok[0], 1, 1 << 20, k),
                 path << ":" << line << ": expected '<k> <ClassName>' (" << expected << " here), got '" << text << "'");
    LIERE_ENSURE(k == expected, path << ":" << line << ": class index " << k << ", expected " << expected
                                     << " (indices must be 1, 2, 3, … in order)");
    const auto [it, fresh] = seen.emplace(tok[1], line);
    LIERE_ENSURE(fresh, path << ":" << line << ": class '" << tok[1] << "' is already defined at line " << it->second);
    classes.push_back(tok[1]);
  }
  LIERE_ENSURE(!classes.empty(), "'" << path << "' holds no classes (expected " << what << ")");
  return classes;
}

std::vector<Ucf101Entry> read_ucf101_list(std::istream& in, const std::string& path,
                                          const std::vector<std::string>& classes) {
  const char* what = kListWhat;
  LIERE_ENSURE(!classes.empty(), "read_ucf101_list '" << path << "': no classes given");
  std::unordered_map<std::string, int> class_index, seen;
  for (int k = 0; k < int(classes.size()); ++k) class_index.emplace(classes[std::size_t(k)], k);
  const int n = int(classes.size());

  std::vector<Ucf101Entry> entries;
  int labelled = -1;  // decided by the first line: 1 train list, 0 test list
  for (const auto& [line, text] : read_lines(in, path, what)) {
    const auto tok = split_ws(text);
    LIERE_ENSURE(tok.size() == 1 || tok.size() == 2,
                 path << ":" << line << ": expected '<Class>/<file>.avi <k>' or '<Class>/<file>.avi', got '" << text
                      << "'");
    if (labelled < 0) labelled = tok.size() == 2 ? 1 : 0;
    LIERE_ENSURE(int(tok.size() == 2) == labelled,
                 path << ":" << line << ": " << (labelled ? "expected a path and a label, as on the first line ('"
                                                            : "expected a path only, as on the first line (")
                      << (labelled ? "<Class>/<file>.avi <k>')" : "a test list)") << ", got '" << text << "'");
    const std::string& p = tok[0];
    const auto slash = p.find('/');
    LIERE_ENSURE(slash != std::string::npos && slash > 0 && slash + 1 < p.size(),
                 path << ":" << line << ": expected a path '<Class>/<file>', got '" << p << "'");
    const std::string folder = p.substr(0, slash);
    const auto cls = class_index.find(folder);
    Ucf101Entry e;
    e.path = p;
    if (labelled) {
      int k = 0;
      LIERE_ENSURE(parse_int(tok[1], 1, n, k), path << ":" << line << ": label '" << tok[1]
                                                    << "' is not a class number 1 … " << n);
      LIERE_ENSURE(classes[std::size_t(k - 1)] == folder,
                   path << ":" << line << ": label " << k << " is class '" << classes[std::size_t(k - 1)]
                        << "' but the clip is in folder '" << folder << "'");
      e.label = k - 1;
    } else {
      LIERE_ENSURE(cls != class_index.end(), path << ":" << line << ": folder '" << folder
                                                  << "' is not a class of the class index (" << n << " classes)");
      e.label = cls->second;
    }
    const auto [it, fresh] = seen.emplace(p, line);
    LIERE_ENSURE(fresh, path << ":" << line << ": '" << p << "' is already listed at line " << it->second);
    entries.push_back(std::move(e));
  }
  LIERE_ENSURE(!entries.empty(), "'" << path << "' lists no clips (expected " << what << ")");
  return entries;
}

std::string ucf101_list_name(int split, bool train) {
  LIERE_ENSURE(split >= 1 && split <= 3, "UCF101: split must be 1, 2 or 3, got " << split);
  return std::string(train ? "trainlist0" : "testlist0") + std::to_string(split) + ".txt";
}

std::vector<std::string> ucf101_overlap(const std::vector<Ucf101Entry>& a, const std::vector<Ucf101Entry>& b) {
  std::unordered_set<std::string> in_b;
  for (const Ucf101Entry& e : b) in_b.insert(e.path);
  std::vector<std::string> both;
  for (const Ucf101Entry& e : a)
    if (in_b.count(e.path)) both.push_back(e.path);
  return both;
}

Ucf101Layout find_ucf101_layout(const std::string& root, const std::string& lists_dir) {
  std::error_code ec;
  const fs::path r(root);
  LIERE_ENSURE(fs::is_directory(r, ec), "UCF101: root '" << root << "' is not a folder");
  Ucf101Layout layout;
  layout.videos_dir = fs::is_directory(r / "UCF-101", ec) ? (r / "UCF-101").string() : r.string();
  if (!lists_dir.empty()) {
    LIERE_ENSURE(fs::exists(lists_dir, ec), "UCF101: the lists folder '" << lists_dir << "' does not exist");
    LIERE_ENSURE(fs::is_directory(lists_dir, ec), "UCF101: the lists folder '" << lists_dir << "' is not a folder");
    // A classInd.txt that is no file (a folder) is found: read_ucf101_classes names what it is.
    LIERE_ENSURE(fs::exists(fs::path(lists_dir) / "classInd.txt", ec),
                 "UCF101: no classInd.txt in the lists folder '" << lists_dir << "'");
    layout.lists_dir = lists_dir;
    return layout;
  }
  fs::path up = fs::absolute(r, ec).lexically_normal();  // root's parent, also for "data/UCF-101/" and "."
  if (!up.has_filename()) up = up.parent_path();
  const fs::path candidates[3] = {r / "ucfTrainTestlist", r, up.parent_path() / "ucfTrainTestlist"};
  for (const auto& c : candidates)
    if (fs::is_regular_file(c / "classInd.txt", ec)) {
      layout.lists_dir = c.string();
      return layout;
    }
  LIERE_ENSURE(false, "UCF101: found no classInd.txt in '" << candidates[0].string() << "', '" << candidates[1].string()
                                                           << "' or '" << candidates[2].string()
                                                           << "' (unzip UCF101TrainTestSplits-RecognitionTask.zip "
                                                              "into the root, or give the lists folder)");
  return layout;
}

// ==== ClipCache ==================================================================================================

ClipCache::ClipCache(std::string dir, std::ostream* log) : dir_(std::move(dir)), log_(log ? log : &std::cerr) {
  LIERE_ENSURE(!dir_.empty(), "ClipCache: empty folder name");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  LIERE_ENSURE(fs::is_directory(dir_, ec), "ClipCache: cannot create the folder '" << dir_ << "'"
                                                                                    << (ec ? ": " + ec.message() : ""));
}

std::string ClipCache::file_for(const std::string& key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.clip", (unsigned long long)fnv1a64(key));
  return (fs::path(dir_) / name).string();
}

ClipCacheStats ClipCache::stats() const {
  ClipCacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.rejected = rejected_.load();
  s.writes = writes_.load();
  return s;
}

bool ClipCache::read(const std::string& key, const std::string& source, const ClipDims& dims, std::uint8_t* out) {
  const std::string file = file_for(key);
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    ++misses_;
    return false;
  }
  const std::size_t payload = std::size_t(dims.channels) * dims.frames * dims.height * dims.width;
  auto reject = [&](const std::string& why) {
    ++rejected_;
    ++misses_;
    std::ostringstream os;
    os << "clip cache: '" << file << "' rejected (" << why << "): decoding '" << source << "' again\n";
    *log_ << os.str() << std::flush;
    return false;
  };
  std::uint8_t h[kCacheHeader];
  if (!in.read(reinterpret_cast<char*>(h), kCacheHeader)) return reject("shorter than its 56-byte header");
  if (std::memcmp(h, kCacheMagic, 8) != 0) return reject("not a clip cache file: wrong magic");
  if (get_u32(h + 8) != kCacheVersion)
    return reject("format version " + std::to_string(get_u32(h + 8)) + ", expected " + std::to_string(kCacheVersion));
  const std::uint32_t key_len = get_u32(h + 12);
  if (key_len != key.size()) return reject("written for another key");
  const std::uint32_t c = get_u32(h + 16), t = get_u32(h + 20), hh = get_u32(h + 24), w = get_u32(h + 28);
  if (int(c) != dims.channels || int(t) != dims.frames || int(hh) != dims.height || int(w) != dims.width)
    return reject("dimensions " + std::to_string(c) + "×" + std::to_string(t) + "×" + std::to_string(hh) + "×" +
                  std::to_string(w) + ", expected " + std::to_string(dims.channels) + "×" +
                  std::to_string(dims.frames) + "×" + std::to_string(dims.height) + "×" + std::to_string(dims.width));
  std::uint64_t size = 0;
  std::int64_t mtime = 0;
  if (!source_stamp(source, size, mtime)) return reject("its source cannot be read");
  if (get_u64(h + 32) != size || std::int64_t(get_u64(h + 40)) != mtime) return reject("its source has changed");
  if (get_u64(h + 48) != payload) return reject("payload size disagrees with the dimensions");

  std::string stored_key(key_len, '\0');
  if (!in.read(stored_key.data(), std::streamsize(key_len))) return reject("truncated in the key");
  if (stored_key != key) return reject("written for another key");
  if (!in.read(reinterpret_cast<char*>(out), std::streamsize(payload))) return reject("truncated in the pixels");
  std::uint8_t trailer[4];
  if (!in.read(reinterpret_cast<char*>(trailer), 4)) return reject("truncated before its checksum");
  if (in.peek() != std::char_traits<char>::eof()) return reject("longer than its header says");
  std::uint32_t crc = crc_update(0, h, kCacheHeader);
  crc = crc_update(crc, reinterpret_cast<const std::uint8_t*>(stored_key.data()), key_len);
  crc = crc_update(crc, out, payload);
  if (crc != get_u32(trailer)) return reject("checksum mismatch: the file is damaged");
  ++hits_;
  return true;
}

void ClipCache::write(const std::string& key, const std::string& source, const ClipDims& dims,
                      const std::uint8_t* pixels) {
  const std::string file = file_for(key);
  const std::size_t payload = std::size_t(dims.channels) * dims.frames * dims.height * dims.width;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;
  LIERE_ENSURE(source_stamp(source, size, mtime), "clip cache: cannot stat the source '" << source << "'");
  std::uint8_t h[kCacheHeader];
  std::memcpy(h, kCacheMagic, 8);
  put_u32(h + 8, kCacheVersion);
  put_u32(h + 12, std::uint32_t(key.size()));
  put_u32(h + 16, std::uint32_t(dims.channels));
  put_u32(h + 20, std::uint32_t(dims.frames));
  put_u32(h + 24, std::uint32_t(dims.height));
  put_u32(h + 28, std::uint32_t(dims.width));
  put_u64(h + 32, size);
  put_u64(h + 40, std::uint64_t(mtime));
  put_u64(h + 48, payload);
  std::uint32_t crc = crc_update(0, h, kCacheHeader);
  crc = crc_update(crc, reinterpret_cast<const std::uint8_t*>(key.data()), key.size());
  crc = crc_update(crc, pixels, payload);
  std::uint8_t trailer[4];
  put_u32(trailer, crc);

  // Atomic and durable (fsync, rename, fsync of the folder) under a temporary name of this writer's own: threads
  // and processes may fill one cache folder at once, and the last rename wins.
  liere::io::write_file_atomic(file,
                               {{h, kCacheHeader},
                                {key.data(), key.size()},
                                {pixels, payload},
                                {trailer, 4}},
                               liere::io::AtomicWriteOptions::unique("clip cache"));
  ++writes_;
}

std::string clip_cache_key(const std::string& source, const ClipOptions& o) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(fs::absolute(source), ec);
  std::ostringstream k;
  k << "liere-clip-v1|" << (ec ? source : canonical.string()) << "|mode="
    << (o.sampling.mode == SampleMode::Uniform ? "uniform" : "stride") << "|frames=" << o.sampling.frames;
  if (o.sampling.mode == SampleMode::Stride) k << "|stride=" << o.sampling.stride << "|offset=" << o.sampling.offset;
  k << "|size=" << o.size << "|resize=" << (o.resize == ResizeMode::CenterCrop ? "center-crop" : "stretch")
    << "|clamp=" << (o.clamp_short ? 1 : 0);
  return k.str();
}

// ==== Ucf101 =====================================================================================================

Ucf101::Ucf101(const std::string& root, const Ucf101Options& options) : options_(options) {
  LIERE_ENSURE(options_.clip.size > 0, "UCF101: the clip size must be > 0 (every clip is resized to S×S), got "
                                           << options_.clip.size);
  const FrameSampling& s = options_.clip.sampling;
  LIERE_ENSURE(s.frames >= 1 && (s.mode == SampleMode::Uniform || (s.stride >= 1 && s.offset >= kCenterOffset)),
               "UCF101: bad frame sampling (frames " << s.frames << ", stride " << s.stride << ", offset " << s.offset
                                                     << "): frames and stride must be ≥ 1, offset ≥ 0 or kCenterOffset");
  layout_ = find_ucf101_layout(root, options_.lists_dir);
  classes_ = read_ucf101_classes((fs::path(layout_.lists_dir) / "classInd.txt").string());
  const std::string list = (fs::path(layout_.lists_dir) / ucf101_list_name(options_.split, options_.train)).string();
  std::vector<Ucf101Entry> all = read_ucf101_list(list, classes_);

  std::vector<std::pair<std::string, const char*>> missing;  // (path, why)
  std::error_code ec;
  for (auto& e : all) {
    const fs::path p = fs::path(layout_.videos_dir) / e.path;
    if (fs::is_regular_file(p, ec))
      entries_.push_back(std::move(e));
    else
      missing.emplace_back(p.string(), fs::is_directory(p, ec) ? "is a directory"
                                       : fs::exists(p, ec)     ? "not a regular file"
                                                               : "no such file");
  }
  if (!missing.empty()) {
    LIERE_ENSURE(options_.skip_bad_clips,
                 "UCF101: '" << list << "' names " << missing.size()
                             << " clip(s) that are missing or not files, the first '" << missing.front().first << "' ("
                             << missing.front().second
                             << "; skip_bad_clips, train_ucf101 --skip-bad-clips, goes on without them)");
    for (const auto& [m, why] : missing) report_skip(m, why);
  }
  LIERE_ENSURE(!entries_.empty(), "UCF101: none of the " << all.size() << " clips of '" << list << "' is under '"
                                                         << layout_.videos_dir << "'");
  bad_.assign(entries_.size(), 0);
  if (!options_.cache_dir.empty()) cache_ = std::make_unique<ClipCache>(options_.cache_dir, options_.log);
}

Ucf101::~Ucf101() = default;

const Ucf101Entry& Ucf101::entry(int i) const {
  LIERE_ENSURE(i >= 0 && i < size(), "UCF101: clip index " << i << " out of range [0, " << size() << ")");
  return entries_[std::size_t(i)];
}

std::string Ucf101::clip_path(int i) const { return (fs::path(layout_.videos_dir) / entry(i).path).string(); }

ClipDims Ucf101::clip_dims() const {
  return {3, options_.clip.sampling.frames, options_.clip.size, options_.clip.size};
}

std::size_t Ucf101::clip_bytes() const {
  const ClipDims d = clip_dims();
  return std::size_t(d.channels) * d.frames * d.height * d.width;
}

ClipCacheStats Ucf101::cache_stats() const { return cache_ ? cache_->stats() : ClipCacheStats{}; }

bool Ucf101::failed(int i) const {
  (void)entry(i);  // the range check
  std::lock_guard<std::mutex> lock(mutex_);
  return bad_[std::size_t(i)] != 0;
}

std::vector<std::string> Ucf101::skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return skipped_;
}

void Ucf101::report_skip(const std::string& path, const std::string& reason) const {
  // The caller holds mutex_ (load) or is the constructor.
  skipped_.push_back(path + ": " + reason);
  std::ostringstream os;
  os << "UCF101: skipping '" << path << "': " << reason << " (" << skipped_.size() << " clip"
     << (skipped_.size() == 1 ? "" : "s") << " skipped so far)\n";
  *(options_.log ? options_.log : &std::cerr) << os.str() << std::flush;
}

void Ucf101::load_one(int i, std::uint8_t* out) const {
  const std::string path = clip_path(i);
  if (!cache_) {
    read_clip_into(path, options_.clip, out);
    return;
  }
  const std::string key = clip_cache_key(path, options_.clip);
  const ClipDims dims = clip_dims();
  if (cache_->read(key, path, dims, out)) return;
  read_clip_into(path, options_.clip, out);
  cache_->write(key, path, dims, out);
}

int Ucf101::load(int i, std::uint8_t* out) const {
  const int n = size();
  LIERE_ENSURE(i >= 0 && i < n, "UCF101: clip index " << i << " out of range [0, " << n << ")");
  for (int k = 0; k < n; ++k) {
    const int j = (i + k) % n;
    if (options_.skip_bad_clips) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bad_[std::size_t(j)]) continue;
    }
    try {
      load_one(j, out);
      return entries_[std::size_t(j)].label;
    } catch (const Error& e) {
      if (!options_.skip_bad_clips) throw;
      std::lock_guard<std::mutex> lock(mutex_);
      if (!bad_[std::size_t(j)]) {
        bad_[std::size_t(j)] = 1;
        report_skip(clip_path(j), e.what());
      }
    }
  }
  LIERE_ENSURE(false, "UCF101: every one of the " << n << " clips failed to load (see the messages above)");
  return -1;
}

void Ucf101::load_batch(const int* indices, int count, std::uint8_t* out, int* labels) const {
  const std::size_t bytes = clip_bytes();
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for schedule(dynamic, 1)
  for (int b = 0; b < count; ++b) {
    try {
      labels[b] = load(indices[b], out + std::size_t(b) * bytes);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace liere::data
