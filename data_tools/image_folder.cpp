// data_tools/image_folder.cpp — JPEG/PNG folders through stb_image, RandomResizedCrop and the eval crop
// (rules in image_folder.hpp).
#include <data_tools/image_folder.hpp>

#include <stb_image.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_image_name(const fs::path& p) {
  const std::string e = lower(p.extension().string());
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

// The path with every link resolved; where that fails, as it is, made absolute.
fs::path canonical_path(const fs::path& p) {
  std::error_code ec;
  const fs::path c = fs::canonical(p, ec);
  return ec ? fs::absolute(p, ec).lexically_normal() : c;
}

// Canonical paths of folders and files, each folder resolved once: a file that is a link by its own target, any
// other by its folder's canonical path and its name (one system call a folder, not one a file).
struct CanonicalPaths {
  std::map<std::string, fs::path> folders;  // folder as named → its canonical path
  const fs::path& folder(const fs::path& d) {
    auto it = folders.find(d.string());
    if (it == folders.end()) it = folders.emplace(d.string(), canonical_path(d)).first;
    return it->second;
  }
  fs::path file(const fs::path& f, bool is_link) {
    return is_link ? canonical_path(f) : folder(f.parent_path()) / f.filename();
  }
};

// What the first bytes of a file look like, for the error of a file that is neither JPEG nor PNG.
std::string sniff(std::span<const std::uint8_t> b) {
  auto starts = [&](const char* magic, std::size_t n, std::size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("GIF8", 4)) return "a GIF image";
  if (starts("BM", 2)) return "a BMP image";
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return "a WebP image";
  if (starts("II*\0", 4) || starts("MM\0*", 4)) return "a TIFF image";
  if (starts("ftyp", 4, 4)) return "an ISO media file (HEIC, AVIF or MP4)";
  if (starts("8BPS", 4)) return "a Photoshop file";
  if (starts("P5", 2) || starts("P6", 2)) return "a PNM image";
  std::string hex;
  for (std::size_t i = 0; i < std::min<std::size_t>(b.size(), 8); ++i) {
    char h[4];
    std::snprintf(h, sizeof h, "%02x ", b[i]);
    hex += h;
  }
  return "unknown content starting with bytes " + hex.substr(0, hex.size() - 1);
}

// Refuses a JPEG whose Huffman table (DHT segment) declares more than 256 codes, before stb_image sees it.
//
// stb_image 2.27, the version of Debian's libstb-dev (0.0~git20220908), builds a table from the 16 code counts of a
// DHT segment without checking that they sum to at most 256 (JPEG's limit, one code per byte value), and then writes
// one entry per code into arrays of 256 and 257: up to 4080 bytes past them, inside the decoder's own state (ASan
// does not see it; UBSan's bounds check does, and tests/fuzz/fuzz_image found it). Corrupted tables can then send
// the Huffman decoder out of bounds. Fixed upstream in stb_image 2.28 (nothings/stb PR #1297 for issues #1289 and
// #1291: "bad DHT header" when the counts sum to more than 256).
//
// Also refuses a scan (SOS) that uses a Huffman table no DHT segment before it defined. stb_image 2.27 allocates its
// decoder without clearing it and checks only that a scan's table indices are at most 3, so such a scan decodes with
// whatever the memory held: a symbol index past the tables' 256 entries (UBSan: "index 429 out of bounds for type
// 'stbi_uc[256]'" in stbi__jpeg_huff_decode, found by tests/fuzz/fuzz_image on 2026-11-28), then values[] read up to
// 64 KiB past it. Upstream 2.28 bounds the index ("symbol id out of bounds!"). The tables a scan uses are stb_image's:
// a sequential scan (SOF0, SOF1) both of each component's; a progressive one (SOF2) its DC tables in a first DC scan
// (Ss = 0, Ah = 0), none in a DC refinement (raw bits), its AC tables in an AC scan (Ss > 0). Motion-JPEG frames
// without DHT segments (default tables, which stb_image does not know) are refused by this with a clear message.
//
// The segments are found as stb_image finds them: after SOI, skip to a 0xFF, skip fill bytes (0xFF), read the
// marker; markers without a length (RSTn, TEM, a stuffed 0xFF 0x00 in entropy-coded data) are passed over, EOI
// ends, every other marker's segment is jumped by its length. Entropy-coded data after SOS is scanned the same way,
// up to its first marker that is not RSTn. This visits every DHT segment stb_image can read (and possibly a few it
// would not reach: then the file is refused for a table that is bad anyway). Bytes past the end read as 0, as in
// stb_image.
void refuse_bad_huffman_tables(std::span<const std::uint8_t> b, const std::string& path) {
  const std::size_t n = b.size();
  const auto at = [&](std::size_t i) -> std::size_t { return i < n ? b[i] : 0; };
  bool defined[2][4] = {};  // [DC, AC][index]: defined by a DHT segment so far
  bool progressive = false;
  std::size_t p = 2;  // after SOI (FF D8)
  while (p < n) {
    if (b[p] != 0xFF) {
      ++p;
      continue;
    }
    while (p < n && b[p] == 0xFF) ++p;
    if (p >= n) break;
    const std::size_t marker_at = p - 1, m = b[p++];
    if (m == 0xD9) break;                                           // EOI
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue;  // no length: stuffed byte, TEM, RSTn, SOI
    const std::size_t length = at(p) << 8 | at(p + 1);
    if (m == 0xC4) {
      // Tables one after another, as stb_image reads them: Tc/Th, 16 counts, then one value per code.
      std::ptrdiff_t left = std::ptrdiff_t(length) - 2;
      std::size_t t = p + 2;
      while (left > 0) {
        std::size_t codes = 0;
        for (std::size_t i = 1; i <= 16; ++i) codes += at(t + i);
        LIERE_ENSURE(codes <= 256, "'" << path << "': corrupt JPEG: the Huffman table at byte " << t
                                       << " (DHT segment at byte " << marker_at << ") declares " << codes
                                       << " codes, at most 256 are possible");
        const std::size_t tc = at(t) >> 4, th = at(t) & 15;
        if (tc <= 1 && th <= 3) defined[tc][th] = true;  // others: stb_image's own "bad DHT header"
        t += 17 + codes;
        left -= std::ptrdiff_t(17 + codes);
      }
    } else if (m == 0xC0 || m == 0xC1 || m == 0xC2) {  // the frames stb_image decodes
      progressive = m == 0xC2;
    } else if (m == 0xDA) {  // SOS: Ns, then (component, Td << 4 | Ta) × Ns, Ss, Se, Ah << 4 | Al
      const std::size_t ns = at(p + 2), ss = at(p + 3 + 2 * ns), ah = at(p + 5 + 2 * ns) >> 4;
      const bool dc = !progressive || (ss == 0 && ah == 0), ac = !progressive || ss > 0;
      for (std::size_t i = 0; i < ns && i < 4; ++i) {  // more than 4: stb_image's own "bad SOS component count"
        const std::size_t td = at(p + 4 + 2 * i) >> 4, ta = at(p + 4 + 2 * i) & 15;
        for (const auto& [use, cls, idx, name] : {std::tuple{dc, 0, td, "DC"}, std::tuple{ac, 1, ta, "AC"}})
          LIERE_ENSURE(!use || idx > 3 || defined[cls][idx],  // above 3: stb_image's own "bad DC/AC huff"
                       "'" << path << "': corrupt JPEG: the scan at byte " << marker_at << " decodes component "
                           << i + 1 << " with " << name << " Huffman table " << idx
                           << ", which no DHT segment before it defines");
      }
    }
    p += std::max<std::size_t>(length, 2);
  }
}

// Refuses a PNG with a chunk that declares more bytes than the file has left, before stb_image sees it. stb_image
// grows its buffer for the compressed data to the length an IDAT chunk declares (doubling up to 2^31) before it
// reads the data: a 93-byte file declaring a 1.2 GB IDAT chunk allocated 2 GB before "outofdata" (found by
// tests/fuzz/fuzz_image as inputs of several seconds each). The chunks are walked as stb_image reads them: length,
// type, data, CRC, up to IEND. A file whose chunk runs past its end is truncated, and stb_image refuses it anyway.
//
// It returns the byte offsets of IDAT chunks with no data. Those are legal (the compressed stream may be split
// anywhere), but stb_image 2.27 copies a first empty IDAT into its not yet allocated buffer: memcpy(NULL, p, 0),
// undefined behaviour that UBSan reports (stb_image.h:1663, found by tests/fuzz/fuzz_image on 2026-11-25).
// decode_image drops them before stb sees the file; the image is the same.
std::vector<std::size_t> refuse_truncated_png_chunks(std::span<const std::uint8_t> b, const std::string& path) {
  std::vector<std::size_t> empty_idat;
  std::size_t p = 8;  // after the signature
  while (p < b.size()) {  // (a file that ends between chunks: stb_image says what is missing)
    LIERE_ENSURE(p + 8 <= b.size(), "'" << path << "': corrupt or truncated PNG: the file ends inside the header of the "
                                        << "chunk at byte " << p);
    const std::uint64_t length = std::uint64_t(b[p]) << 24 | std::uint64_t(b[p + 1]) << 16 |
                                 std::uint64_t(b[p + 2]) << 8 | std::uint64_t(b[p + 3]);
    std::string type(reinterpret_cast<const char*>(b.data() + p + 4), 4);
    for (char& c : type)
      if (!std::isalpha(static_cast<unsigned char>(c))) c = '?';  // a chunk type is four letters
    const std::uint64_t left = b.size() - (p + 8);
    LIERE_ENSURE(length <= left, "'" << path << "': corrupt or truncated PNG: chunk '" << type << "' at byte " << p
                                     << " declares " << length << " bytes of data, the file has " << left
                                     << " bytes left");
    if (type == "IEND") break;
    if (type == "IDAT" && length == 0) empty_idat.push_back(p);
    p += 12 + std::size_t(length);  // length, type, data, CRC
  }
  return empty_idat;
}

// Triangle-filter weights for resampling the input range [start, start + len) to `out` samples (Pillow's
// ImagingResample with the bilinear filter, restricted to the window): for output i, the inputs first[i] …
// first[i] + count[i] − 1 with weights w[i · stride …], summing to 1.
struct Weights {
  std::vector<int> first, count;
  std::vector<float> w;
  int stride = 0;
};

Weights triangle_weights(int start, int len, int out) {
  const double scale = double(len) / out;
  const double fscale = std::max(scale, 1.0);
  const double support = 1.0 * fscale;  // the bilinear filter's support is 1
  Weights k;
  k.stride = int(std::ceil(support)) * 2 + 1;
  k.first.resize(std::size_t(out));
  k.count.resize(std::size_t(out));
  k.w.assign(std::size_t(out) * std::size_t(k.stride), 0.0f);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;  // in window coordinates
    int lo = int(center - support + 0.5), hi = int(center + support + 0.5);
    lo = std::max(lo, 0);
    hi = std::min(hi, len);
    double sum = 0;
    std::vector<double> tmp;
    for (int x = lo; x < hi; ++x) {
      const double d = std::abs((x - center + 0.5) / fscale);
      const double wt = d < 1.0 ? 1.0 - d : 0.0;
      tmp.push_back(wt);
      sum += wt;
    }
    int n = int(tmp.size());
    if (n > k.stride) n = k.stride;  // cannot happen: hi − lo ≤ 2·support + 1
    k.first[std::size_t(i)] = start + lo;
    k.count[std::size_t(i)] = n;
    for (int x = 0; x < n; ++x)
      k.w[std::size_t(i) * std::size_t(k.stride) + std::size_t(x)] =
          float(sum > 0 ? tmp[std::size_t(x)] / sum : 1.0 / n);
  }
  return k;
}

// Python's round(): to the nearest integer, halves to even.
int round_half_even(double x) { return int(std::nearbyint(x)); }

}  // namespace

// ==== decoding ===================================================================================================

Image read_image(const std::string& path, int channels) {
  LIERE_ENSURE(channels == 1 || channels == 3, "read_image '" << path << "': channels must be 1 or 3, got " << channels);
  std::error_code ec;
  LIERE_ENSURE(!fs::is_directory(path, ec),
               "cannot open '" << path << "': is a directory (expected a JPEG or PNG image)");
  LIERE_ENSURE(fs::is_regular_file(path, ec), "cannot open '" << path << "': no such file (expected a JPEG or PNG image)");
  std::ifstream in(path, std::ios::binary);
  LIERE_ENSURE(in, "cannot open '" << path << "': " << std::strerror(errno) << " (expected a JPEG or PNG image)");
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LIERE_ENSURE(!in.bad(), "error while reading '" << path << "'");
  return decode_image(bytes, path, channels);
}

Image decode_image(std::span<const std::uint8_t> bytes, const std::string& path, int channels,
                   std::int64_t max_pixels) {
  LIERE_ENSURE(channels == 1 || channels == 3,
               "decode_image '" << path << "': channels must be 1 or 3, got " << channels);
  LIERE_ENSURE(max_pixels > 0, "decode_image '" << path << "': max_pixels must be positive, got " << max_pixels);
  LIERE_ENSURE(!bytes.empty(), "'" << path << "' is empty (expected a JPEG or PNG image)");
  static const std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const bool jpeg = bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
  const bool png = bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0;
  LIERE_ENSURE(jpeg || png, "'" << path << "' is not a JPEG or PNG file: unsupported format (" << sniff(bytes) << ")");
  LIERE_ENSURE(bytes.size() <= std::size_t(INT32_MAX), "'" << path << "': " << bytes.size() << " bytes is too large");

  // Checks of what stb_image 2.27 does not check itself (notes above), before stbi_info: it reads JPEG tables too.
  if (jpeg) refuse_bad_huffman_tables(bytes, path);
  std::vector<std::uint8_t> without_empty_idat;  // the file without its empty IDAT chunks, when it has any
  if (png) {
    const std::vector<std::size_t> empty_idat = refuse_truncated_png_chunks(bytes, path);
    if (!empty_idat.empty()) {
      without_empty_idat.reserve(bytes.size());
      std::size_t from = 0;
      for (const std::size_t at : empty_idat) {
        without_empty_idat.insert(without_empty_idat.end(), bytes.begin() + std::ptrdiff_t(from),
                                  bytes.begin() + std::ptrdiff_t(at));
        from = std::min(at + 12, bytes.size());  // length, type, (no data), CRC (or what the file has of it)
      }
      without_empty_idat.insert(without_empty_idat.end(), bytes.begin() + std::ptrdiff_t(from), bytes.end());
      bytes = without_empty_idat;
    }
  }
  const int size = int(bytes.size());
  // The size the header declares, before anything is allocated: a few bytes can declare 60000 × 60000 pixels.
  int w = 0, h = 0, n = 0;
  if (stbi_info_from_memory(bytes.data(), size, &w, &h, &n))
    LIERE_ENSURE(std::int64_t(w) * h <= max_pixels, "'" << path << "': " << w << "×" << h << " pixels is more than "
                                                        << max_pixels << " (expected an image of a data set)");
  unsigned char* data = stbi_load_from_memory(bytes.data(), size, &w, &h, &n, channels);
  if (data == nullptr) {
    const char* why = stbi_failure_reason();
    LIERE_ENSURE(false, "'" << path << "': corrupt or truncated " << (jpeg ? "JPEG" : "PNG")
                            << " image (stb_image: " << (why && *why ? why : "no reason given") << ")");
  }
  Image img;
  img.channels = channels;
  img.height = h;
  img.width = w;
  img.pixels.resize(std::size_t(channels) * std::size_t(w) * std::size_t(h));
  const std::size_t plane = std::size_t(w) * std::size_t(h);
  for (std::size_t p = 0; p < plane; ++p)
    for (int c = 0; c < channels; ++c) img.pixels[std::size_t(c) * plane + p] = data[p * std::size_t(channels) + c];
  stbi_image_free(data);
  return img;
}

// ==== the folder =================================================================================================

ImageFolder scan_image_folder(const std::string& root, const std::string& split, const std::vector<std::string>& classes) {
  std::error_code ec;
  const fs::path dir = split.empty() ? fs::path(root) : fs::path(root) / split;
  LIERE_ENSURE(fs::is_directory(dir, ec), "image folder: '" << dir.string() << "' is not a folder (expected "
                                                            << (split.empty() ? "root" : "root/" + split)
                                                            << "/<class>/<image>.jpg|.png)");
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec))
    if (std::error_code e2; !hidden(e.path()) && e.is_directory(e2)) found.push_back(e.path().filename().string());
  LIERE_ENSURE(!ec, "image folder: cannot list '" << dir.string() << "': " << ec.message());
  std::sort(found.begin(), found.end());
  LIERE_ENSURE(!found.empty(), "image folder: '" << dir.string() << "' has no class folders (expected "
                                                 << dir.string() << "/<class>/<image>.jpg|.png)");

  ImageFolder f;
  f.dir = dir.string();
  std::map<std::string, int> index;
  if (classes.empty()) {
    f.class_names = found;
  } else {
    f.class_names = classes;
    for (const auto& c : found)
      LIERE_ENSURE(std::find(classes.begin(), classes.end(), c) != classes.end(),
                   "image folder: '" << (dir / c).string() << "' is not one of the " << classes.size()
                                     << " given classes");
  }
  for (int k = 0; k < int(f.class_names.size()); ++k) index.emplace(f.class_names[std::size_t(k)], k);

  // Every folder and every image once, over all classes: each folder entered and each image taken by its canonical
  // path (an image that is not a link: its folder's canonical path and its name). A link back into what is already
  // scanned (a loop such as a/loop -> ., which was followed until the system's limit, or a second way into one
  // folder) or a second name for one image would count its images twice, under two labels or in both splits of a
  // hold-out: refused, naming both paths, rather than skipped (which copy is the right one is the user's call).
  std::map<std::string, std::string> reached;  // canonical path → the path it was first reached as
  CanonicalPaths canonical;
  const auto enter = [&](const fs::path& d) {
    const fs::path& c = canonical.folder(d);
    const auto [it, fresh] = reached.emplace(c.string(), d.string());
    LIERE_ENSURE(fresh, "image folder: the folder '" << c.string() << "' is reached twice, as '" << it->second
                                                     << "' and as '" << d.string()
                                                     << "' (a symbolic link loop, or a second link to one folder): "
                                                        "its images would count twice; remove the link");
  };
  for (int k = 0; k < int(f.class_names.size()); ++k) {
    const fs::path cdir = dir / f.class_names[std::size_t(k)];
    LIERE_ENSURE(fs::is_directory(cdir, ec), "image folder: class '" << f.class_names[std::size_t(k)]
                                                                     << "' has no folder '" << cdir.string() << "'");
    enter(cdir);
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(cdir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (hidden(it->path())) {
        if (std::error_code e2; it->is_directory(e2)) it.disable_recursion_pending();
        continue;
      }
      if (std::error_code e2; it->is_directory(e2)) {
        enter(it->path());
      } else if (it->is_regular_file(e2) && is_image_name(it->path())) {
        const fs::path c = canonical.file(it->path(), it->is_symlink(e2));
        const auto [first, fresh] = reached.emplace(c.string(), it->path().string());
        LIERE_ENSURE(fresh, "image folder: '" << first->second << "' and '" << it->path().string()
                                              << "' are the same file ('" << c.string()
                                              << "', through a symbolic link): it would count twice; remove the link");
        files.push_back(it->path().string());
      }
    }
    LIERE_ENSURE(!ec, "image folder: cannot list '" << cdir.string() << "': " << ec.message());
    LIERE_ENSURE(!files.empty(), "image folder: class folder '" << cdir.string()
                                                                << "' is empty (no .jpg, .jpeg or .png files)");
    std::sort(files.begin(), files.end());
    for (auto& file : files) {
      f.files.push_back(std::move(file));
      f.labels.push_back(k);
    }
  }
  return f;
}

std::vector<std::string> image_folder_overlap(const ImageFolder& a, const ImageFolder& b) {
  CanonicalPaths paths;
  const auto canonical = [&](const std::string& file) {
    std::error_code ec;
    return paths.file(file, fs::is_symlink(file, ec)).string();
  };
  std::set<std::string> in_a;
  for (const auto& file : a.files) in_a.insert(canonical(file));
  std::vector<std::string> both;
  for (const auto& file : b.files)
    if (in_a.count(canonical(file))) both.push_back(file);
  return both;
}

// ==== crops ======================================================================================================

CropBox random_resized_crop_box(int H, int W, std::mt19937_64& rng, double scale_lo, double scale_hi, double ratio_lo,
                                double ratio_hi) {
  LIERE_ENSURE(H > 0 && W > 0, "random_resized_crop: empty image " << W << "×" << H);
  LIERE_ENSURE(scale_lo > 0 && scale_lo <= scale_hi && scale_hi <= 1,
               "random_resized_crop: scale must satisfy 0 < lo ≤ hi ≤ 1, got (" << scale_lo << ", " << scale_hi << ")");
  LIERE_ENSURE(ratio_lo > 0 && ratio_lo <= ratio_hi,
               "random_resized_crop: ratio must satisfy 0 < lo ≤ hi, got (" << ratio_lo << ", " << ratio_hi << ")");
  const double area = double(H) * W;
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (scale_lo + (scale_hi - scale_lo) * liere::unit_double(rng()));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * liere::unit_double(rng()));
    const int w = round_half_even(std::sqrt(target * aspect));
    const int h = round_half_even(std::sqrt(target / aspect));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      const int top = int(liere::below(rng, std::uint64_t(H - h + 1)));
      const int left = int(liere::below(rng, std::uint64_t(W - w + 1)));
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(W) / H;
  int w = W, h = H;
  if (in_ratio < ratio_lo) {
    h = round_half_even(w / ratio_lo);
  } else if (in_ratio > ratio_hi) {
    w = round_half_even(h * ratio_hi);
  }
  h = std::clamp(h, 1, H);
  w = std::clamp(w, 1, W);
  return {(H - h) / 2, (W - w) / 2, h, w};
}

CropBox center_crop_box(int H, int W, double crop_fraction) {
  LIERE_ENSURE(H > 0 && W > 0, "center_crop: empty image " << W << "×" << H);
  LIERE_ENSURE(crop_fraction > 0 && crop_fraction <= 1, "center_crop: crop_fraction must be in (0, 1], got "
                                                            << crop_fraction);
  const int side = std::clamp(int(std::lround(crop_fraction * std::min(H, W))), 1, std::min(H, W));
  return {(H - side) / 2, (W - side) / 2, side, side};
}

void resize_crop(const std::uint8_t* src, int C, int H, int W, const CropBox& box, std::uint8_t* dst, int out_h,
                 int out_w) {
  LIERE_ENSURE(C > 0 && H > 0 && W > 0 && out_h > 0 && out_w > 0,
               "resize_crop: bad sizes C=" << C << " H=" << H << " W=" << W << " → " << out_h << "×" << out_w);
  LIERE_ENSURE(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 && box.top + box.height <= H &&
                   box.left + box.width <= W,
               "resize_crop: window (top " << box.top << ", left " << box.left << ", " << box.height << "×"
                                           << box.width << ") is not inside the " << H << "×" << W << " image");
  const Weights kx = triangle_weights(box.left, box.width, out_w);
  const Weights ky = triangle_weights(box.top, box.height, out_h);
  // Horizontal pass over the window's rows: tmp (C, box.height, out_w).
  std::vector<float> tmp(std::size_t(C) * box.height * out_w);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < box.height; ++y) {
      const std::uint8_t* row = src + (std::size_t(c) * H + std::size_t(box.top + y)) * W;
      float* o = tmp.data() + (std::size_t(c) * box.height + y) * out_w;
      for (int x = 0; x < out_w; ++x) {
        const float* w = kx.w.data() + std::size_t(x) * kx.stride;
        const std::uint8_t* p = row + kx.first[std::size_t(x)];
        float s = 0;
        for (int i = 0; i < kx.count[std::size_t(x)]; ++i) s += w[i] * float(p[i]);
        o[x] = s;
      }
    }
  // Vertical pass.
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < out_h; ++y) {
      const float* w = ky.w.data() + std::size_t(y) * ky.stride;
      const int first = ky.first[std::size_t(y)] - box.top;
      std::uint8_t* o = dst + (std::size_t(c) * out_h + y) * out_w;
      for (int x = 0; x < out_w; ++x) {
        float s = 0;
        for (int i = 0; i < ky.count[std::size_t(y)]; ++i)
          s += w[i] * tmp[(std::size_t(c) * box.height + std::size_t(first + i)) * out_w + x];
        o[x] = std::uint8_t(std::clamp(std::lround(s), 0L, 255L));
      }
    }
}

CropBox random_resized_crop(const std::uint8_t* src, int C, int H, int W, std::uint8_t* dst, int S,
                            std::mt19937_64& rng) {
  const CropBox box = random_resized_crop_box(H, W, rng);
  resize_crop(src, C, H, W, box, dst, S, S);
  return box;
}

CropBox center_crop_resize(const std::uint8_t* src, int C, int H, int W, std::uint8_t* dst, int S,
                           double crop_fraction) {
  const CropBox box = center_crop_box(H, W, crop_fraction);
  resize_crop(src, C, H, W, box, dst, S, S);
  return box;
}

// ==== loading ====================================================================================================

ImageSet load_image_folder(const ImageFolder& folder, int S, double crop_fraction, int channels) {
  LIERE_ENSURE(S > 0, "load_image_folder: size must be > 0, got " << S);
  LIERE_ENSURE(folder.labels.size() == folder.files.size(),
               "load_image_folder: " << folder.files.size() << " files but " << folder.labels.size() << " labels");
  ImageSet set;
  set.n = folder.size();
  set.channels = channels;
  set.height = S;
  set.width = S;
  set.num_classes = folder.num_classes();
  set.class_names = folder.class_names;
  set.labels = folder.labels;
  set.pixels.resize(std::size_t(set.n) * set.image_size());
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for schedule(dynamic, 4)
  for (int i = 0; i < set.n; ++i) {
    try {
      const Image img = read_image(folder.files[std::size_t(i)], channels);
      center_crop_resize(img.pixels.data(), channels, img.height, img.width, set.image(i), S, crop_fraction);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return set;
}

int load_image_train(const ImageFolder& folder, int i, int S, std::mt19937_64& rng, std::uint8_t* dst, int channels) {
  LIERE_ENSURE(i >= 0 && i < folder.size(), "image folder: index " << i << " out of range [0, " << folder.size() << ")");
  const Image img = read_image(folder.files[std::size_t(i)], channels);
  random_resized_crop(img.pixels.data(), channels, img.height, img.width, dst, S, rng);
  return folder.labels[std::size_t(i)];
}

int load_image_eval(const ImageFolder& folder, int i, int S, std::uint8_t* dst, double crop_fraction, int channels) {
  LIERE_ENSURE(i >= 0 && i < folder.size(), "image folder: index " << i << " out of range [0, " << folder.size() << ")");
  const Image img = read_image(folder.files[std::size_t(i)], channels);
  center_crop_resize(img.pixels.data(), channels, img.height, img.width, dst, S, crop_fraction);
  return folder.labels[std::size_t(i)];
}

}  // namespace liere::data
