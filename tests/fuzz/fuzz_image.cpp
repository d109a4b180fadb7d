// tests/fuzz/fuzz_image.cpp — the image-folder decoder (data_tools/image_folder.hpp: decode_image, JPEG and PNG
// through stb_image) and the evaluation crop on arbitrary bytes.
#include <data_tools/image_folder.hpp>

#include "fuzz_common.hpp"

using namespace liere;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  for (const int channels : {3, 1}) {
    expect_result_or_error([&] {
      const data::Image img = data::decode_image(bytes, "fuzz.img", channels);
      FUZZ_CHECK(img.channels == channels && img.height > 0 && img.width > 0);
      FUZZ_CHECK(std::int64_t(img.height) * img.width <= data::kMaxImagePixels);
      FUZZ_CHECK(img.pixels.size() == std::size_t(channels) * std::size_t(img.height) * std::size_t(img.width));
      // The evaluation crop of a trainer, to 8×8.
      std::vector<std::uint8_t> out(std::size_t(channels) * 64);
      data::center_crop_resize(img.pixels.data(), channels, img.height, img.width, out.data(), 8, 0.875);
    });
  }
  return 0;
}
