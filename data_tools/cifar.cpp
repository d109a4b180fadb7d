// data_tools/cifar.cpp — CIFAR-10 / CIFAR-100 binary readers (format in cifar.hpp).
#include <data_tools/cifar.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace liere::data {

namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> read_bytes(const std::string& path, const char* what) {
  std::error_code ec;
  LIERE_ENSURE(!fs::is_directory(path, ec), "cannot open '" << path << "': is a directory (expected " << what << ")");
  LIERE_ENSURE(fs::is_regular_file(path, ec),
               "cannot open '" << path << "': no such file (expected " << what << ")");
  std::ifstream in(path, std::ios::binary);
  LIERE_ENSURE(in, "cannot open '" << path << "': " << std::strerror(errno) << " (expected " << what << ")");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LIERE_ENSURE(!in.bad(), "error while reading '" << path << "' (" << what << ")");
  return bytes;
}

// Parses records of `label_bytes` label bytes + 3072 pixel bytes; label k must be below num_labels[k].
ImageSet read_records(std::span<const std::uint8_t> bytes, const std::string& path, int label_bytes,
                      const int* num_labels, const char* what) {
  const std::size_t record = std::size_t(label_bytes) + kCifarPixelBytes;
  LIERE_ENSURE(!bytes.empty(), "'" << path << "' is empty (expected " << what << ": records of "
                                   << record << " bytes)");
  if (bytes.size() % record != 0) {
    const std::size_t whole = bytes.size() / record;
    LIERE_ENSURE(false, "'" << path << "' is truncated: " << bytes.size() << " bytes is not a multiple of the "
                            << record << "-byte record of " << what << "; record " << whole
                            << " at byte offset " << whole * record << " has " << bytes.size() - whole * record
                            << " of " << record << " bytes");
  }
  static const char* const kLabelName[2][2] = {{"label", ""}, {"coarse label", "fine label"}};

  ImageSet set;
  set.n = int(bytes.size() / record);
  set.channels = 3;
  set.height = kCifarSide;
  set.width = kCifarSide;
  set.pixels.resize(std::size_t(set.n) * kCifarPixelBytes);
  std::vector<int> labels[2];
  for (auto& l : labels) l.resize(std::size_t(set.n));
  for (int i = 0; i < set.n; ++i) {
    const std::uint8_t* r = bytes.data() + std::size_t(i) * record;
    for (int k = 0; k < label_bytes; ++k) {
      LIERE_ENSURE(r[k] < num_labels[k], "'" << path << "': record " << i << " (byte offset "
                                              << std::size_t(i) * record + std::size_t(k) << ") has "
                                              << kLabelName[label_bytes - 1][k] << " " << int(r[k])
                                              << ", expected 0.." << num_labels[k] - 1 << " (" << what << ")");
      labels[k][std::size_t(i)] = r[k];
    }
    std::copy_n(r + label_bytes, kCifarPixelBytes, set.pixels.data() + std::size_t(i) * kCifarPixelBytes);
  }
  if (label_bytes == 1) {
    set.labels = std::move(labels[0]);
  } else {
    set.coarse_labels = std::move(labels[0]);
    set.labels = std::move(labels[1]);
  }
  return set;
}

// One name a line, surrounding white space trimmed, blank lines skipped; `expected` names exactly.
std::vector<std::string> read_names(const std::string& path, std::size_t expected) {
  std::ifstream in(path);
  LIERE_ENSURE(in, "cannot open '" << path << "': " << std::strerror(errno));
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) continue;
    const auto last = line.find_last_not_of(" \t\r\n");
    names.push_back(line.substr(first, last - first + 1));
  }
  LIERE_ENSURE(names.size() == expected, "'" << path << "': expected " << expected << " class names, one a line, got "
                                             << names.size());
  return names;
}

std::vector<std::string> names_or_default(const fs::path& file, const std::vector<std::string>& fallback) {
  std::error_code ec;
  return fs::is_regular_file(file, ec) ? read_names(file.string(), fallback.size()) : fallback;
}

// `root` itself when it holds `probe`, else root/sub when that does; otherwise an error naming both. Where neither
// is a file but one exists (a folder), that one, and read_bytes names what it is.
fs::path resolve_root(const std::string& root, const char* sub, const char* probe, const char* what) {
  std::error_code ec;
  const fs::path r(root);
  if (fs::is_regular_file(r / probe, ec)) return r;
  if (fs::is_regular_file(r / sub / probe, ec)) return r / sub;
  if (fs::exists(r / probe, ec)) return r;
  if (fs::exists(r / sub / probe, ec)) return r / sub;
  LIERE_ENSURE(false, what << ": found neither '" << (r / probe).string() << "' nor '" << (r / sub / probe).string()
                           << "' (root must be the folder with the .bin files or its parent)");
  return {};
}

void append(ImageSet& all, ImageSet&& part) {
  if (all.n == 0) {
    all = std::move(part);
    return;
  }
  all.n += part.n;
  all.pixels.insert(all.pixels.end(), part.pixels.begin(), part.pixels.end());
  all.labels.insert(all.labels.end(), part.labels.begin(), part.labels.end());
  all.coarse_labels.insert(all.coarse_labels.end(), part.coarse_labels.begin(), part.coarse_labels.end());
}

}  // namespace

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

const std::vector<std::string>& cifar100_fine_class_names() {
  static const std::vector<std::string> names = {
      "apple",         "aquarium_fish", "baby",         "bear",        "beaver",       "bed",
      "bee",           "beetle",        "bicycle",      "bottle",      "bowl",         "boy",
      "bridge",        "bus",           "butterfly",    "camel",       "can",          "castle",
      "caterpillar",   "cattle",        "chair",        "chimpanzee",  "clock",        "cloud",
      "cockroach",     "couch",         "crab",         "crocodile",   "cup",          "dinosaur",
      "dolphin",       "elephant",      "flatfish",     "forest",      "fox",          "girl",
      "hamster",       "house",         "kangaroo",     "keyboard",    "lamp",         "lawn_mower",
      "leopard",       "lion",          "lizard",       "lobster",     "man",          "maple_tree",
      "motorcycle",    "mountain",      "mouse",        "mushroom",    "oak_tree",     "orange",
      "orchid",        "otter",         "palm_tree",    "pear",        "pickup_truck", "pine_tree",
      "plain",         "plate",         "poppy",        "porcupine",   "possum",       "rabbit",
      "raccoon",       "ray",           "road",         "rocket",      "rose",         "sea",
      "seal",          "shark",         "shrew",        "skunk",       "skyscraper",   "snail",
      "snake",         "spider",        "squirrel",     "streetcar",   "sunflower",    "sweet_pepper",
      "table",         "tank",          "telephone",    "television",  "tiger",        "tractor",
      "train",         "trout",         "tulip",        "turtle",      "wardrobe",     "whale",
      "willow_tree",   "wolf",          "woman",        "worm"};
  return names;
}

const std::vector<std::string>& cifar100_coarse_class_names() {
  static const std::vector<std::string> names = {"aquatic_mammals",
                                                 "fish",
                                                 "flowers",
                                                 "food_containers",
                                                 "fruit_and_vegetables",
                                                 "household_electrical_devices",
                                                 "household_furniture",
                                                 "insects",
                                                 "large_carnivores",
                                                 "large_man-made_outdoor_things",
                                                 "large_natural_outdoor_scenes",
                                                 "large_omnivores_and_herbivores",
                                                 "medium_mammals",
                                                 "non-insect_invertebrates",
                                                 "people",
                                                 "reptiles",
                                                 "small_mammals",
                                                 "trees",
                                                 "vehicles_1",
                                                 "vehicles_2"};
  return names;
}

constexpr const char* kCifar10What = "a CIFAR-10 binary batch";
constexpr const char* kCifar100What = "a CIFAR-100 binary file";

ImageSet parse_cifar10(std::span<const std::uint8_t> bytes, const std::string& name) {
  const int num_labels[1] = {10};
  ImageSet set = read_records(bytes, name, 1, num_labels, kCifar10What);
  set.num_classes = 10;
  set.class_names = cifar10_class_names();
  return set;
}

ImageSet parse_cifar100(std::span<const std::uint8_t> bytes, const std::string& name) {
  const int num_labels[2] = {20, 100};
  ImageSet set = read_records(bytes, name, 2, num_labels, kCifar100What);
  set.num_classes = 100;
  set.num_coarse_classes = 20;
  set.class_names = cifar100_fine_class_names();
  set.coarse_class_names = cifar100_coarse_class_names();
  return set;
}

ImageSet read_cifar10_file(const std::string& path) { return parse_cifar10(read_bytes(path, kCifar10What), path); }

ImageSet read_cifar100_file(const std::string& path) { return parse_cifar100(read_bytes(path, kCifar100What), path); }

ImageSet read_cifar10(const std::string& root, bool train) {
  const fs::path dir = resolve_root(root, "cifar-10-batches-bin", train ? "data_batch_1.bin" : "test_batch.bin",
                                    "CIFAR-10");
  ImageSet set;
  if (train) {
    for (int b = 1; b <= 5; ++b)
      append(set, read_cifar10_file((dir / ("data_batch_" + std::to_string(b) + ".bin")).string()));
  } else {
    set = read_cifar10_file((dir / "test_batch.bin").string());
  }
  set.class_names = names_or_default(dir / "batches.meta.txt", cifar10_class_names());
  return set;
}

ImageSet read_cifar100(const std::string& root, bool train) {
  const char* file = train ? "train.bin" : "test.bin";
  const fs::path dir = resolve_root(root, "cifar-100-binary", file, "CIFAR-100");
  ImageSet set = read_cifar100_file((dir / file).string());
  set.class_names = names_or_default(dir / "fine_label_names.txt", cifar100_fine_class_names());
  set.coarse_class_names = names_or_default(dir / "coarse_label_names.txt", cifar100_coarse_class_names());
  return set;
}

}  // namespace liere::data
