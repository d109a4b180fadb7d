// data_tools/cifar.hpp — readers for the binary versions of CIFAR-10 and CIFAR-100.
//
// CIFAR-10  (cifar-10-batches-bin/: data_batch_1.bin … data_batch_5.bin, test_batch.bin, batches.meta.txt):
//   records of 1 label byte (0..9) + 3072 pixel bytes.
// CIFAR-100 (cifar-100-binary/: train.bin, test.bin, fine_label_names.txt, coarse_label_names.txt):
//   records of 1 coarse label byte (0..19) + 1 fine label byte (0..99) + 3072 pixel bytes.
// The 3072 pixel bytes are 1024 red, then 1024 green, then 1024 blue, each 32×32 row-major: exactly the
// (C, H, W) layout of ImageSet, so a record's pixels are copied as they are.
#pragma once

#include <data_tools/image_set.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace liere::data {

inline constexpr int kCifarSide = 32;
inline constexpr int kCifarPixelBytes = 3 * kCifarSide * kCifarSide;  // 3072
inline constexpr int kCifar10RecordBytes = 1 + kCifarPixelBytes;      // 3073
inline constexpr int kCifar100RecordBytes = 2 + kCifarPixelBytes;     // 3074

// The official class names, used when the .txt files beside the .bin files are absent.
const std::vector<std::string>& cifar10_class_names();          // 10
const std::vector<std::string>& cifar100_fine_class_names();    // 100, alphabetical as in the data set
const std::vector<std::string>& cifar100_coarse_class_names();  // 20

// One binary file. Errors (liere::Error) name the file and what was expected: a missing or empty file (a folder in
// its place: "is a directory"), a size that is not a whole number of records (with the byte offset of the truncated
// record), a label out of range (with the record index and its byte offset).
ImageSet read_cifar10_file(const std::string& path);
ImageSet read_cifar100_file(const std::string& path);

// The same from the bytes of such a file in memory; `name` stands for the file in errors.
ImageSet parse_cifar10(std::span<const std::uint8_t> bytes, const std::string& name = "<memory>");
ImageSet parse_cifar100(std::span<const std::uint8_t> bytes, const std::string& name = "<memory>");

// The training set (CIFAR-10: the five data batches concatenated in order 1..5; CIFAR-100: train.bin) or the
// test set. `root` is the folder that holds the .bin files or its parent (the folder the official tarball
// was extracted into, which holds cifar-10-batches-bin/ or cifar-100-binary/). Class names come from
// batches.meta.txt / fine_label_names.txt / coarse_label_names.txt when present, else the official lists.
ImageSet read_cifar10(const std::string& root, bool train);
ImageSet read_cifar100(const std::string& root, bool train);

}  // namespace liere::data
