// data_tools/idx.hpp — the IDX format of MNIST and Fashion-MNIST, gzipped or raw.
//
// An IDX file is a 4-byte magic 0x0000TTDD (TT the element type, 0x08 = unsigned byte; DD the number of
// dimensions), DD big-endian uint32 sizes, then the elements row-major:
//   images: 0x00000803, N × rows × cols bytes   → ImageSet (N, 1, rows, cols)
//   labels: 0x00000801, N bytes
// Files are read through zlib's gzread, which reads gzip files and passes raw files through unchanged.
#pragma once

#include <data_tools/image_set.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace liere::data {

inline constexpr std::uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr std::uint32_t kIdxLabelsMagic = 0x00000801;

// The whole (decompressed) content of a gzip or raw file. Errors name the file: missing, a folder, unreadable, or a
// gzip stream that is corrupt or ends early.
std::vector<std::uint8_t> read_maybe_gzipped(const std::string& path);

// The Fashion-MNIST class names: T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt, Sneaker, Bag,
// Ankle boot.
const std::vector<std::string>& fashion_mnist_class_names();

// An images file and its labels file. Errors name the file and what was expected: a wrong magic, a length
// that disagrees with the dimensions, a count mismatch between the two files, a label ≥ num_classes.
// The set has class names "0".."num_classes-1".
ImageSet read_idx(const std::string& images_path, const std::string& labels_path, int num_classes = 10);

// The same from the (decompressed) bytes of the two files in memory; the names stand for the files in errors.
ImageSet parse_idx(std::span<const std::uint8_t> images, std::span<const std::uint8_t> labels, int num_classes = 10,
                   const std::string& images_name = "<images>", const std::string& labels_name = "<labels>");

// Fashion-MNIST from `root` with the standard names train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
// t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz (or the same names without .gz). On Debian the
// package dataset-fashion-mnist installs them in kFashionMnistSystemDir. Images of another size than 28×28, and a
// file of 0 images (valid IDX, which read_idx returns as it is), are errors that name the file.
inline constexpr const char* kFashionMnistSystemDir = "/usr/share/datasets/fashion-mnist";
ImageSet read_fashion_mnist(const std::string& root, bool train);

}  // namespace liere::data
