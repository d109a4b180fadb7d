// tests/fuzz/fuzz_cifar.cpp — the CIFAR-10 and CIFAR-100 binary readers (data_tools/cifar.hpp) on arbitrary bytes.
#include <data_tools/cifar.hpp>

#include <cstring>

#include "fuzz_common.hpp"

namespace {

// What a returned set must satisfy: whole records, labels in range, pixels copied unchanged.
void check(const liere::data::ImageSet& s, std::span<const std::uint8_t> bytes, int label_bytes) {
  using namespace liere::data;
  const std::size_t record = std::size_t(label_bytes) + kCifarPixelBytes;
  FUZZ_CHECK(s.n >= 1 && std::size_t(s.n) * record == bytes.size());
  FUZZ_CHECK(s.channels == 3 && s.height == kCifarSide && s.width == kCifarSide);
  FUZZ_CHECK(s.pixels.size() == std::size_t(s.n) * s.image_size());
  FUZZ_CHECK(s.labels.size() == std::size_t(s.n));
  FUZZ_CHECK(int(s.class_names.size()) == s.num_classes);
  for (int i = 0; i < s.n; ++i) {
    const std::uint8_t* r = bytes.data() + std::size_t(i) * record;
    FUZZ_CHECK(s.labels[std::size_t(i)] >= 0 && s.labels[std::size_t(i)] < s.num_classes);
    FUZZ_CHECK(s.labels[std::size_t(i)] == r[label_bytes - 1]);
    FUZZ_CHECK(std::memcmp(s.image(i), r + label_bytes, kCifarPixelBytes) == 0);
  }
  if (label_bytes == 2) {
    FUZZ_CHECK(s.coarse_labels.size() == std::size_t(s.n) && int(s.coarse_class_names.size()) == s.num_coarse_classes);
    for (int i = 0; i < s.n; ++i)
      FUZZ_CHECK(s.coarse_labels[std::size_t(i)] >= 0 && s.coarse_labels[std::size_t(i)] < s.num_coarse_classes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  expect_result_or_error([&] { check(liere::data::parse_cifar10(bytes, "fuzz.bin"), bytes, 1); });
  expect_result_or_error([&] { check(liere::data::parse_cifar100(bytes, "fuzz.bin"), bytes, 2); });
  return 0;
}
