// tests/fuzz/fuzz_idx.cpp — the IDX reader (data_tools/idx.hpp: MNIST / Fashion-MNIST) on arbitrary bytes.
//
// Input: 2 bytes k (little-endian), then the images file (k bytes, or what is left), then the labels file. A part
// that starts with the gzip magic 1f 8b goes through read_maybe_gzipped from a file on tmpfs (/dev/shm), as the
// real .gz files do; the others go to parse_idx as they are.
#include <data_tools/idx.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace {

std::vector<std::uint8_t> maybe_gunzip(std::span<const std::uint8_t> part, const char* which) {
  if (part.size() < 2 || part[0] != 0x1f || part[1] != 0x8b) return {part.begin(), part.end()};
  const std::string path = "/dev/shm/liere_fuzz_idx_" + std::to_string(::getpid()) + "_" + which + ".gz";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(part.data()), std::streamsize(part.size()));
  }
  struct Remove {
    const std::string& p;
    ~Remove() { std::remove(p.c_str()); }
  } remove{path};
  return liere::data::read_maybe_gzipped(path);
}

void check(const liere::data::ImageSet& s, std::span<const std::uint8_t> images, std::span<const std::uint8_t> labels) {
  FUZZ_CHECK(s.n >= 0 && s.channels == 1 && s.height >= 0 && s.width >= 0);
  FUZZ_CHECK(s.pixels.size() == std::size_t(s.n) * s.image_size());
  FUZZ_CHECK(s.labels.size() == std::size_t(s.n));
  FUZZ_CHECK(images.size() == 16 + s.pixels.size() && labels.size() == 8 + s.labels.size());
  FUZZ_CHECK(std::equal(s.pixels.begin(), s.pixels.end(), images.begin() + 16));
  FUZZ_CHECK(int(s.class_names.size()) == s.num_classes);
  for (int y : s.labels) FUZZ_CHECK(y >= 0 && y < s.num_classes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t k = std::min<std::size_t>(size - 2, std::size_t(data[0]) | std::size_t(data[1]) << 8);
  const std::span<const std::uint8_t> a(data + 2, k), b(data + 2 + k, size - 2 - k);
  expect_result_or_error([&] {
    const std::vector<std::uint8_t> images = maybe_gunzip(a, "images"), labels = maybe_gunzip(b, "labels");
    check(liere::data::parse_idx(images, labels, 10, "images.idx", "labels.idx"), images, labels);
  });
  return 0;
}
