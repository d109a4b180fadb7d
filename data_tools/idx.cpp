// data_tools/idx.cpp — IDX (MNIST / Fashion-MNIST) reader, format in idx.hpp.
#include <data_tools/idx.hpp>

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

std::uint32_t big_endian_u32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | std::uint32_t(p[3]);
}

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::span<const std::uint8_t> bytes;  // the whole file; data at offset `header`
  std::size_t header = 0;
};

// Checks the magic (unsigned bytes, `ndims` dimensions) and that the length is exactly header + Π dims.
IdxArray parse_array(std::span<const std::uint8_t> bytes, const std::string& path, std::uint32_t magic,
                     const char* what) {
  IdxArray a;
  a.bytes = bytes;
  const int ndims = int(magic & 0xff);
  LIERE_ENSURE(a.bytes.size() >= 4, "'" << path << "': " << a.bytes.size() << " bytes is too short for an IDX file ("
                                        << what << ": expected magic " << hex32(magic) << ")");
  const std::uint32_t got = big_endian_u32(a.bytes.data());
  LIERE_ENSURE(got == magic, "'" << path << "': wrong IDX magic " << hex32(got) << ", expected " << hex32(magic)
                                 << " (" << what << ": unsigned bytes, " << ndims << " dimensions)");
  a.header = 4 + 4 * std::size_t(ndims);
  LIERE_ENSURE(a.bytes.size() >= a.header, "'" << path << "': " << a.bytes.size() << " bytes is too short for the "
                                               << a.header << "-byte IDX header (" << what << ")");
  std::uint64_t count = 1;
  bool overflow = false;
  std::ostringstream shape;
  for (int d = 0; d < ndims; ++d) {
    a.dims.push_back(big_endian_u32(a.bytes.data() + 4 + 4 * d));
    overflow = overflow || __builtin_mul_overflow(count, std::uint64_t(a.dims.back()), &count);
    shape << (d ? "×" : "") << a.dims.back();
  }
  const std::uint64_t data = a.bytes.size() - a.header;
  LIERE_ENSURE(!overflow && data == count, "'" << path << "': dims " << shape.str() << " (" << what << ") expect "
                                                << (overflow ? std::string("more than 2^64") : std::to_string(count))
                                                << " data bytes after the " << a.header
                                                << "-byte header, the file has " << data);
  return a;
}

std::string first_existing(const fs::path& root, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name + ".gz", name})
    if (fs::is_regular_file(root / candidate, ec)) return (root / candidate).string();
  for (const std::string& candidate : {name + ".gz", name})  // no file, but a folder: read_maybe_gzipped names it
    if (fs::exists(root / candidate, ec)) return (root / candidate).string();
  LIERE_ENSURE(false, "Fashion-MNIST: found neither '" << (root / (name + ".gz")).string() << "' nor '"
                                                       << (root / name).string() << "'");
  return {};
}

}  // namespace

std::vector<std::uint8_t> read_maybe_gzipped(const std::string& path) {
  std::error_code ec;
  LIERE_ENSURE(!fs::is_directory(path, ec),
               "cannot open '" << path << "': is a directory (expected a file, raw or gzipped)");
  LIERE_ENSURE(fs::is_regular_file(path, ec), "cannot open '" << path << "': no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  LIERE_ENSURE(f != nullptr, "cannot open '" << path << "': " << std::strerror(errno));
  // Read through a fixed buffer and appended: the result grows with the data, not by 1 MiB steps (a 100-byte
  // labels file no longer allocates and clears 2 MiB).
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> chunk(std::size_t(1) << 16);
  for (;;) {
    const int got = gzread(f, chunk.data(), unsigned(chunk.size()));
    if (got < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      LIERE_ENSURE(false, "'" << path << "': corrupt gzip data after " << bytes.size() << " bytes: " << msg);
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + got);
  }
  // gzclose_r reports Z_BUF_ERROR when the file ended inside a gzip stream (a truncated download).
  const int rc = gzclose_r(f);
  LIERE_ENSURE(rc == Z_OK, "'" << path << "': gzip stream ends early or is corrupt (zlib error " << rc << ") after "
                               << bytes.size() << " bytes");
  return bytes;
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

ImageSet read_idx(const std::string& images_path, const std::string& labels_path, int num_classes) {
  LIERE_ENSURE(num_classes > 0 && num_classes <= 256, "read_idx: num_classes must be in 1..256, got " << num_classes);
  return parse_idx(read_maybe_gzipped(images_path), read_maybe_gzipped(labels_path), num_classes, images_path,
                   labels_path);
}

ImageSet parse_idx(std::span<const std::uint8_t> image_bytes, std::span<const std::uint8_t> label_bytes,
                   int num_classes, const std::string& images_path, const std::string& labels_path) {
  LIERE_ENSURE(num_classes > 0 && num_classes <= 256, "parse_idx: num_classes must be in 1..256, got " << num_classes);
  const IdxArray images = parse_array(image_bytes, images_path, kIdxImagesMagic, "IDX images");
  const IdxArray labels = parse_array(label_bytes, labels_path, kIdxLabelsMagic, "IDX labels");
  LIERE_ENSURE(images.dims[0] == labels.dims[0], "'" << images_path << "' has " << images.dims[0] << " images but '"
                                                     << labels_path << "' has " << labels.dims[0]
                                                     << " labels: expected one label per image");
  // Each dimension must fit an int, not only their product: 0 × 2^32−1 images are 0 bytes but no ImageSet.
  LIERE_ENSURE(images.dims[0] <= 0x7fffffffu && images.dims[1] <= 0x7fffffffu && images.dims[2] <= 0x7fffffffu &&
                   std::uint64_t(images.dims[1]) * images.dims[2] <= 0x7fffffffu,
               "'" << images_path << "': dims " << images.dims[0] << "×" << images.dims[1] << "×" << images.dims[2]
                   << " too large (each at most 2^31−1, rows × cols too)");

  ImageSet set;
  set.n = int(images.dims[0]);
  set.channels = 1;
  set.height = int(images.dims[1]);
  set.width = int(images.dims[2]);
  set.pixels.assign(images.bytes.begin() + std::ptrdiff_t(images.header), images.bytes.end());
  set.labels.resize(std::size_t(set.n));
  for (int i = 0; i < set.n; ++i) {
    const int y = labels.bytes[labels.header + std::size_t(i)];
    LIERE_ENSURE(y < num_classes, "'" << labels_path << "': label " << i << " (byte offset "
                                      << labels.header + std::size_t(i) << ") is " << y << ", expected 0.."
                                      << num_classes - 1);
    set.labels[std::size_t(i)] = y;
  }
  set.num_classes = num_classes;
  for (int c = 0; c < num_classes; ++c) set.class_names.push_back(std::to_string(c));
  return set;
}

ImageSet read_fashion_mnist(const std::string& root, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images = first_existing(root, prefix + "-images-idx3-ubyte");
  ImageSet set = read_idx(images, first_existing(root, prefix + "-labels-idx1-ubyte"), 10);
  LIERE_ENSURE(set.channels == 1 && set.height == 28 && set.width == 28,
               "'" << images << "': Fashion-MNIST images are 28x28, this file has " << set.height << "x" << set.width);
  // A valid IDX file of 0 images (parse_idx takes it) is no data set: found here rather than by the evaluation
  // after a training epoch.
  LIERE_ENSURE(set.n > 0, "'" << images << "' holds no images (IDX dims 0x28x28): the Fashion-MNIST "
                              << (train ? "training" : "test") << " set needs at least one");
  set.class_names = fashion_mnist_class_names();
  return set;
}

}  // namespace liere::data
