// tests/fuzz/fuzz_image.cpp — the image-folder decoder (data_tools/image_folder.hpp: decode_image, JPEG and PNG
// through stb_image) and the evaluation crop on arbitrary bytes.
#include <data_tools/image_folder.hpp>

#include "fuzz_common.hpp"

using namespace liere;

// Images of at most 2^16 pixels: the refusal from the header is the same code at any limit, and decoding stays fast
// (with the reader's 2^26, inputs that hold large images ran at 18 a second; docs/testing.md).
constexpr std::int64_t kFuzzMaxPixels = std::int64_t(1) << 16;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  for (const int channels : {3, 1}) {
    expect_result_or_error([&] {
      const data::Image img = data::decode_image(bytes, "fuzz.img", channels, kFuzzMaxPixels);
      FUZZ_CHECK(img.channels == channels && img.height > 0 && img.width > 0);
      FUZZ_CHECK(std::int64_t(img.height) * img.width <= kFuzzMaxPixels);
      FUZZ_CHECK(img.pixels.size() == std::size_t(channels) * std::size_t(img.height) * std::size_t(img.width));
      // The evaluation crop of a trainer, to 8×8.
      std::vector<std::uint8_t> out(std::size_t(channels) * 64);
      data::center_crop_resize(img.pixels.data(), channels, img.height, img.width, out.data(), 8, 0.875);
    });
  }
  return 0;
}
