// tests/test_image_folder.cpp — folders of PNG/JPEG files written here with stb_image_write, read back through
// stb_image: class mapping, pixel layout, RandomResizedCrop and the eval crop, and every kind of bad file.
//
// C channels, H height, W width, S the side of a square output.
#include <data_tools/image_folder.hpp>

#include <catch2/catch.hpp>

#include "temp_dir.hpp"
#include <stb_image_write.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace liere::data;
using Catch::Contains;
using liere::test::Bytes;
using liere::test::read_all;
using liere::test::TempDir;
using liere::test::write_file;
using liere::test::write_text;

namespace {

// Pixel (x, y, c) of test image `tag`, W×H: a smooth pattern that JPEG keeps to a few grey levels.
std::uint8_t pattern(int tag, int x, int y, int c) { return std::uint8_t((tag * 40 + x * 3 + y * 2 + c * 70) % 256); }

// An interleaved (H, W, n) image of the pattern; n = 1, 3 or 4 (alpha = 200).
Bytes interleaved(int tag, int W, int H, int n) {
  Bytes b(std::size_t(W) * H * n);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < n; ++c) b[(std::size_t(y) * W + x) * n + c] = c == 3 ? 200 : pattern(tag, x, y, c);
  return b;
}

void write_png(const std::string& path, int tag, int W, int H, int n = 3) {
  fs::create_directories(fs::path(path).parent_path());
  const Bytes b = interleaved(tag, W, H, n);
  REQUIRE(stbi_write_png(path.c_str(), W, H, n, b.data(), W * n) != 0);
}

void write_jpg(const std::string& path, int tag, int W, int H) {
  fs::create_directories(fs::path(path).parent_path());
  const Bytes b = interleaved(tag, W, H, 3);
  REQUIRE(stbi_write_jpg(path.c_str(), W, H, 3, b.data(), 95) != 0);
}

}  // namespace

TEST_CASE("image folder: classes sorted, files sorted, labels, train/ and val/", "[image_folder]") {
  TempDir dir;
  write_png(dir / "train/zebra/b.png", 0, 20, 10);
  write_png(dir / "train/zebra/a.PNG", 1, 20, 10);
  write_jpg(dir / "train/cat/x.jpg", 2, 16, 16);
  write_jpg(dir / "train/cat/deeper/y.JPEG", 3, 16, 16);  // sub-folders of a class count
  write_png(dir / "train/Dog/1.png", 4, 8, 12);
  write_file(dir / "train/Dog/notes.txt", {'h', 'i'});    // other extensions are ignored
  write_png(dir / "train/Dog/.hidden.png", 5, 8, 8);      // so are hidden files and folders
  write_png(dir / "train/.cache/z.png", 6, 8, 8);
  write_png(dir / "val/cat/v.png", 7, 9, 9);
  write_png(dir / "val/zebra/w.png", 8, 9, 9);

  const ImageFolder train = scan_image_folder(dir.path.string(), "train");
  // Byte order, as Python's sorted(): upper case first.
  REQUIRE(train.class_names == std::vector<std::string>{"Dog", "cat", "zebra"});
  REQUIRE(train.size() == 5);
  CHECK(train.labels == std::vector<int>{0, 1, 1, 2, 2});
  CHECK(fs::path(train.files[0]).filename() == "1.png");
  CHECK(fs::path(train.files[1]).filename() == "y.JPEG");  // "cat/deeper/y.JPEG" < "cat/x.jpg"
  CHECK(fs::path(train.files[2]).filename() == "x.jpg");
  CHECK(fs::path(train.files[3]).filename() == "a.PNG");
  CHECK(fs::path(train.files[4]).filename() == "b.png");

  // The validation folder with the training classes: labels index into them (no Dog images there).
  const ImageFolder val = scan_image_folder(dir.path.string(), "val", {"cat", "zebra"});
  CHECK(val.labels == std::vector<int>{0, 1});
  CHECK_THROWS_WITH(scan_image_folder(dir.path.string(), "val", train.class_names),
                    Contains("class 'Dog' has no folder"));
  CHECK_THROWS_WITH(scan_image_folder(dir.path.string(), "train", {"cat", "zebra"}),
                    Contains("Dog") && Contains("is not one of the 2 given classes"));
  CHECK(scan_image_folder((dir.path / "val").string()).class_names == std::vector<std::string>{"cat", "zebra"});

  // Loaded at a fixed size.
  const ImageSet set = load_image_folder(train, 8);
  CHECK(set.n == 5);
  CHECK(set.channels == 3);
  CHECK(set.height == 8);
  CHECK(set.width == 8);
  CHECK(set.pixels.size() == 5u * 3u * 64u);
  CHECK(set.labels == train.labels);
  CHECK(set.num_classes == 3);
  CHECK(set.class_names == train.class_names);
}

TEST_CASE("image folder: PNG pixels arrive exactly, as (C, H, W) R G B; JPEG closely", "[image_folder]") {
  TempDir dir;
  write_png(dir / "rgb.png", 3, 7, 5);
  const Image img = read_image(dir / "rgb.png");
  REQUIRE(img.channels == 3);
  REQUIRE(img.width == 7);
  REQUIRE(img.height == 5);
  bool exact = true;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 7; ++x) exact = exact && img.pixels[(std::size_t(c) * 5 + y) * 7 + x] == pattern(3, x, y, c);
  CHECK(exact);

  write_png(dir / "grey.png", 1, 6, 4, 1);
  const Image grey = read_image(dir / "grey.png");
  CHECK(grey.channels == 3);
  CHECK(grey.pixels[0] == pattern(1, 0, 0, 0));
  CHECK(grey.pixels[24] == pattern(1, 0, 0, 0));  // replicated into green
  CHECK(read_image(dir / "grey.png", 1).pixels.size() == 24u);

  write_png(dir / "rgba.png", 2, 6, 4, 4);
  const Image rgba = read_image(dir / "rgba.png");
  CHECK(rgba.channels == 3);
  CHECK(rgba.pixels[2 * 24 + 5] == pattern(2, 5, 0, 2));  // blue of (x 5, y 0); alpha dropped

  write_jpg(dir / "photo.jpg", 4, 32, 24);
  const Image jpg = read_image(dir / "photo.jpg");
  REQUIRE((jpg.width == 32 && jpg.height == 24 && jpg.channels == 3));
  double err = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 24; ++y)
      for (int x = 0; x < 32; ++x)
        err += std::abs(int(jpg.pixels[(std::size_t(c) * 24 + y) * 32 + x]) - int(pattern(4, x, y, c)));
  CHECK(err / (3 * 24 * 32) < 6.0);  // mean absolute error of a quality-95 JPEG (the pattern wraps at 256)
}

TEST_CASE("image folder: RandomResizedCrop follows torchvision and is deterministic for a seed", "[image_folder]") {
  std::mt19937_64 a(7), b(7), c(8);
  std::vector<CropBox> boxes_a, boxes_b, boxes_c;
  for (int i = 0; i < 200; ++i) {
    boxes_a.push_back(random_resized_crop_box(375, 500, a));
    boxes_b.push_back(random_resized_crop_box(375, 500, b));
    boxes_c.push_back(random_resized_crop_box(375, 500, c));
  }
  CHECK(boxes_a == boxes_b);
  CHECK(boxes_a != boxes_c);
  for (const CropBox& box : boxes_a) {
    INFO(box.top << " " << box.left << " " << box.height << " " << box.width);
    REQUIRE(box.top >= 0);
    REQUIRE(box.left >= 0);
    REQUIRE(box.top + box.height <= 375);
    REQUIRE(box.left + box.width <= 500);
    // Area fraction in [0.08, 1] and aspect in [3/4, 4/3], up to the rounding of w and h.
    const double area = double(box.width) * box.height / (375.0 * 500.0);
    CHECK(area >= 0.08 * 0.97);
    CHECK(area <= 1.0);
    const double aspect = double(box.width) / box.height;
    CHECK(aspect >= 0.75 * (1 - 2.0 / box.height) - 1e-9);
    CHECK(aspect <= 4.0 / 3.0 * (1 + 2.0 / box.height) + 1e-9);
  }

  // The fallback after 10 failed tries: a 10×100 strip cannot hold 99% of its area at an aspect ≤ 4/3, so the
  // crop is the central 10 × round(10·4/3) = 10×13 window.
  std::mt19937_64 g(1);
  CHECK(random_resized_crop_box(10, 100, g, 0.99, 1.0) == CropBox{0, 43, 10, 13});
  CHECK(random_resized_crop_box(100, 10, g, 0.99, 1.0) == CropBox{43, 0, 13, 10});  // 10 / (3/4) = 13.33 → 13
  CHECK(random_resized_crop_box(30, 30, g, 1.0, 1.0, 1.0, 1.0) == CropBox{0, 0, 30, 30});

  // Output size and determinism of the whole transform.
  Bytes src(3 * 40 * 60);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint8_t(i * 7 % 251);
  Bytes d1(3 * 24 * 24), d2(3 * 24 * 24);
  std::mt19937_64 r1(42), r2(42);
  const CropBox b1 = random_resized_crop(src.data(), 3, 40, 60, d1.data(), 24, r1);
  const CropBox b2 = random_resized_crop(src.data(), 3, 40, 60, d2.data(), 24, r2);
  CHECK(b1 == b2);
  CHECK(d1 == d2);
}

TEST_CASE("image folder: resizing and the eval crop", "[image_folder]") {
  // The whole image at its own size is a copy.
  Bytes src(3 * 12 * 20);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint8_t(i * 13 % 256);
  Bytes out(src.size());
  resize_crop(src.data(), 3, 12, 20, {0, 0, 12, 20}, out.data(), 12, 20);
  CHECK(out == src);

  // A window at its own size is that window.
  Bytes win(3 * 4 * 5);
  resize_crop(src.data(), 3, 12, 20, {2, 3, 4, 5}, win.data(), 4, 5);
  CHECK(win[0] == src[2 * 20 + 3]);
  CHECK(win[2 * 20 + 4 * 5 - 1] == src[(2 * 12 + 5) * 20 + 7]);

  // A constant image stays constant at any size; a 1-pixel checkerboard halves to mid grey (antialiasing) away
  // from the border, where the filter has only the window's pixels (as Pillow's) and is not symmetric.
  Bytes flat(3 * 30 * 30, 77), small(3 * 7 * 7);
  resize_crop(flat.data(), 3, 30, 30, {0, 0, 30, 30}, small.data(), 7, 7);
  CHECK(std::all_of(small.begin(), small.end(), [](std::uint8_t v) { return v == 77; }));
  Bytes checker(64 * 64), half(32 * 32);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) checker[std::size_t(y) * 64 + x] = (x + y) % 2 ? 255 : 0;
  resize_crop(checker.data(), 1, 64, 64, {0, 0, 64, 64}, half.data(), 32, 32);
  for (int y = 1; y < 31; ++y)
    for (int x = 1; x < 31; ++x) REQUIRE(std::abs(int(half[std::size_t(y) * 32 + x]) - 128) <= 1);

  // Eval crop: the central square of side round(0.875 · min(H, W)).
  CHECK(center_crop_box(100, 200) == CropBox{6, 56, 88, 88});
  CHECK(center_crop_box(224, 224, 1.0) == CropBox{0, 0, 224, 224});
  Bytes eval(3 * 8 * 8);
  CHECK(center_crop_resize(src.data(), 3, 12, 20, eval.data(), 8, 1.0) == CropBox{0, 4, 12, 12});

  CHECK_THROWS_WITH(resize_crop(src.data(), 3, 12, 20, {5, 5, 10, 10}, out.data(), 4, 4),
                    Contains("is not inside the 12×20 image"));
  CHECK_THROWS_WITH(center_crop_box(10, 10, 0.0), Contains("crop_fraction must be in (0, 1]"));
}

TEST_CASE("image folder: lazy loading for training and evaluation", "[image_folder]") {
  TempDir dir;
  write_png(dir / "a/0.png", 0, 40, 30);
  write_png(dir / "b/0.png", 1, 30, 40);
  const ImageFolder f = scan_image_folder(dir.path.string());
  Bytes x(3 * 16 * 16), y(3 * 16 * 16);
  std::mt19937_64 g1(3), g2(3);
  CHECK(load_image_train(f, 1, 16, g1, x.data()) == 1);
  CHECK(load_image_train(f, 1, 16, g2, y.data()) == 1);
  CHECK(x == y);
  CHECK(load_image_eval(f, 0, 16, x.data()) == 0);
  CHECK_THROWS_WITH(load_image_eval(f, 2, 16, x.data()), Contains("index 2 out of range [0, 2)"));
}

// A symbolic link loop (a/loop -> .) made the scan follow a/loop/loop/… until the system's limit: each image of
// class a counted 41 times, and train_cifar's hold-out put copies of one image in both splits, silently.
TEST_CASE("image folder: a folder or image reached twice through symbolic links is refused, naming both paths",
          "[image_folder][errors]") {
  TempDir dir;
  for (int i = 0; i < 3; ++i) {
    write_png(dir / ("a/" + std::to_string(i) + ".png"), i, 8, 8);
    write_png(dir / ("b/" + std::to_string(i) + ".png"), 10 + i, 8, 8);
  }
  const std::string root = dir.path.string();
  REQUIRE(scan_image_folder(root).size() == 6);

  SECTION("a loop back to the class folder (the audit's imgs_loop/a/loop -> .)") {
    fs::create_directory_symlink(".", dir.path / "a/loop");
    CHECK_THROWS_WITH(scan_image_folder(root), Contains("reached twice, as '" + (dir / "a") + "' and as '" +
                                                        (dir / "a/loop") + "'") &&
                                                   Contains("remove the link"));
  }
  SECTION("a loop from a sub-folder up to its class folder") {
    fs::create_directories(dir.path / "a/sub");
    write_png(dir / "a/sub/3.png", 3, 8, 8);
    fs::create_directory_symlink("..", dir.path / "a/sub/up");
    CHECK_THROWS_WITH(scan_image_folder(root), Contains("as '" + (dir / "a/sub/up") + "'"));
  }
  SECTION("a class folder that is a link to another class's folder: the same images under two labels") {
    fs::create_directory_symlink("a", dir.path / "c");
    CHECK_THROWS_WITH(scan_image_folder(root), Contains("reached twice, as '" + (dir / "a") + "' and as '" +
                                                        (dir / "c") + "'"));
  }
  SECTION("a link inside one class to another class's folder") {
    fs::create_directory_symlink("../b", dir.path / "a/more");
    CHECK_THROWS_WITH(scan_image_folder(root), Contains(dir / "a/more") && Contains(dir / "b") &&
                                                   Contains("reached twice"));
  }
  SECTION("a second name for one image") {
    fs::create_symlink("0.png", dir.path / "a/copy.png");
    CHECK_THROWS_WITH(scan_image_folder(root), Contains(dir / "a/0.png") && Contains(dir / "a/copy.png") &&
                                                   Contains("the same file"));
  }
  SECTION("links to folders and images reached once are followed, each image counted once") {
    TempDir outside;
    write_png(outside / "pics/x.png", 20, 8, 8);
    write_png(outside / "y.png", 21, 8, 8);
    fs::create_directory_symlink(outside.path / "pics", dir.path / "a/extra");
    fs::create_symlink(outside.path / "y.png", dir.path / "b/y.png");
    const ImageFolder f = scan_image_folder(root);
    REQUIRE(f.size() == 8);
    CHECK(f.labels == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
    CHECK(f.files[3] == dir / "a/extra/x.png");
    CHECK(f.files[7] == dir / "b/y.png");
  }
}

// train_cifar --data folder refuses a val/ folder that shares an image with train/ (the test accuracy would count
// images trained on); the names differ when a link leads there.
TEST_CASE("image folder: the files two folders share, found by canonical path", "[image_folder]") {
  TempDir dir;
  write_png(dir / "train/a/0.png", 0, 8, 8);
  write_png(dir / "train/b/0.png", 1, 8, 8);
  write_png(dir / "train/b/1.png", 2, 8, 8);
  write_png(dir / "val/a/5.png", 3, 8, 8);
  write_png(dir / "val/c/0.png", 4, 8, 8);  // the same names as train/'s, other files
  const auto overlap = [&] {
    const ImageFolder train = scan_image_folder(dir.path.string(), "train");
    return image_folder_overlap(train, scan_image_folder(dir.path.string(), "val"));
  };
  CHECK(overlap().empty());
  fs::create_directory_symlink(dir.path / "train/b", dir.path / "val/b");  // a class folder that is train/'s
  CHECK(overlap() == std::vector<std::string>{dir / "val/b/0.png", dir / "val/b/1.png"});
  fs::create_symlink("../../train/a/0.png", dir.path / "val/a/6.png");  // an image of train/ under another name
  CHECK(overlap() == std::vector<std::string>{dir / "val/a/6.png", dir / "val/b/0.png", dir / "val/b/1.png"});
}

TEST_CASE("image folder: bad files and folders are errors naming them", "[image_folder][errors]") {
  TempDir dir;
  write_png(dir / "ok/0.png", 0, 10, 10);

  SECTION("missing and empty files") {
    CHECK_THROWS_WITH(read_image(dir / "none.png"), Contains("none.png") && Contains("no such file"));
    fs::create_directory(dir.path / "folder.png");
    CHECK_THROWS_WITH(read_image(dir / "folder.png"), Contains("cannot open '" + (dir / "folder.png") +
                                                               "': is a directory"));
    write_file(dir / "empty.jpg", {});
    CHECK_THROWS_WITH(read_image(dir / "empty.jpg"), Contains("empty.jpg") && Contains("is empty"));
  }
  SECTION("corrupt: a truncated PNG and a JPEG with its data cut") {
    const Bytes png = read_all(dir / "ok/0.png");
    write_file(dir / "cut.png", Bytes(png.begin(), png.begin() + std::ptrdiff_t(png.size() / 2)));
    CHECK_THROWS_WITH(read_image(dir / "cut.png"), Contains("cut.png") && Contains("corrupt or truncated PNG: "));
    // Chunks whole but the compressed data garbled: stb_image's reason.
    Bytes garbled = png;
    const auto idat = std::search(garbled.begin(), garbled.end(), std::begin("IDAT"), std::end("IDAT") - 1);
    REQUIRE(idat != garbled.end());
    std::fill(idat + 4, idat + 8, std::uint8_t(0xFF));  // the zlib header and the first bytes of the stream
    write_file(dir / "garbled.png", garbled);
    CHECK_THROWS_WITH(read_image(dir / "garbled.png"),
                      Contains("garbled.png") && Contains("corrupt or truncated PNG image (stb_image: "));
    write_file(dir / "cut.jpg", Bytes{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00});
    CHECK_THROWS_WITH(read_image(dir / "cut.jpg"), Contains("cut.jpg") && Contains("corrupt or truncated JPEG"));
  }
  SECTION("unsupported formats behind a .png or .jpg name") {
    write_file(dir / "anim.png", Bytes{'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
    CHECK_THROWS_WITH(read_image(dir / "anim.png"),
                      Contains("anim.png") && Contains("unsupported format") && Contains("GIF"));
    write_file(dir / "pic.jpg", Bytes{'B', 'M', 0, 0, 0, 0});
    CHECK_THROWS_WITH(read_image(dir / "pic.jpg"), Contains("pic.jpg") && Contains("BMP"));
    write_file(dir / "web.jpg", Bytes{'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'});
    CHECK_THROWS_WITH(read_image(dir / "web.jpg"), Contains("WebP"));
    write_file(dir / "junk.png", Bytes{1, 2, 3, 4});
    CHECK_THROWS_WITH(read_image(dir / "junk.png"), Contains("junk.png") && Contains("01 02 03 04"));
  }
  SECTION("bytes in memory decode as the file does; a header declaring a huge image is refused before decoding") {
    const Bytes png = read_all(dir / "ok/0.png");
    const Image from_file = read_image(dir / "ok/0.png"), from_memory = decode_image(png, "mem.png");
    CHECK(from_memory.pixels == from_file.pixels);
    CHECK(from_memory.height == 10);
    // Width and height in IHDR (bytes 16–23, big-endian) set to 12000: 1.44e8 RGB pixels from a 100-byte file, under
    // stb_image's own limit (w·h·channels < 2^30), so it would allocate 432 MB before finding the data short (found
    // while writing tests/fuzz/fuzz_image).
    Bytes huge = png;
    for (int at : {16, 20}) {
      huge[std::size_t(at) + 2] = 0x2E;
      huge[std::size_t(at) + 3] = 0xE0;
    }
    CHECK_THROWS_WITH(decode_image(huge, "huge.png"),
                      Contains("'huge.png': 12000×12000 pixels is more than 67108864"));
    // A lower limit (the fuzz target's) refuses from the header as well; the image at the limit decodes.
    CHECK_THROWS_WITH(decode_image(png, "ten.png", 3, 99), Contains("'ten.png': 10×10 pixels is more than 99"));
    CHECK(decode_image(png, "ten.png", 3, 100).pixels == from_file.pixels);
    CHECK_THROWS_WITH(decode_image(png, "ten.png", 3, 0), Contains("max_pixels must be positive, got 0"));
    // Over stb_image's own limit (26000 × 26000 × 3 ≥ 2^30) it is stb_image that refuses.
    for (int at : {16, 20}) {
      huge[std::size_t(at) + 2] = 0x65;
      huge[std::size_t(at) + 3] = 0x90;
    }
    CHECK_THROWS_WITH(decode_image(huge, "huger.png"), Contains("'huger.png': corrupt or truncated PNG image (stb_image: "
                                                                "too large)"));
    CHECK_THROWS_WITH(decode_image(Bytes{}, "nothing.png"), Contains("'nothing.png' is empty"));
  }
  SECTION("an empty class folder, a missing split, no class folders") {
    fs::create_directories(dir.path / "empty_class");
    write_file(dir / "empty_class/readme.txt", {'x'});
    CHECK_THROWS_WITH(scan_image_folder(dir.path.string()),
                      Contains("empty_class") && Contains("is empty (no .jpg, .jpeg or .png files)"));
    CHECK_THROWS_WITH(scan_image_folder(dir.path.string(), "train"), Contains("train") && Contains("is not a folder"));
    CHECK_THROWS_WITH(scan_image_folder((dir.path / "ok").string()), Contains("has no class folders"));
  }
  SECTION("a bad file inside a folder being loaded is named") {
    write_file(dir / "ok/1.png", Bytes{'n', 'o', 'p', 'e'});
    const ImageFolder f = scan_image_folder(dir.path.string());
    CHECK_THROWS_WITH(load_image_folder(f, 8), Contains("1.png") && Contains("not a JPEG or PNG"));
  }
}

namespace {

// A DHT segment (FF C4, length, one DC table 0) declaring `codes` codes: one of 15 bits, the rest of 16 bits (at
// most 255 per length), values 0, 1, 2, ….
Bytes dht_segment(int codes) {
  const int length = 2 + 1 + 16 + codes;
  Bytes seg{0xFF, 0xC4, std::uint8_t(length >> 8), std::uint8_t(length & 0xFF), 0x00};
  seg.resize(seg.size() + 16, 0);  // the 16 code counts (not an insert: GCC 12 warns a false -Warray-bounds there)
  seg[5 + 14] = std::uint8_t(codes - 255);
  seg[5 + 15] = 255;
  for (int v = 0; v < codes; ++v) seg.push_back(std::uint8_t(v));
  return seg;
}

Bytes inserted(const Bytes& file, std::size_t at, const Bytes& part) {
  Bytes out(file.begin(), file.begin() + std::ptrdiff_t(at));
  out.insert(out.end(), part.begin(), part.end());
  out.insert(out.end(), file.begin() + std::ptrdiff_t(at), file.end());
  return out;
}

}  // namespace

// Found by tests/fuzz/fuzz_image (UBSan: index 257 out of bounds for 'stbi_uc[257]' in stbi__build_huffman): the
// stb_image of Debian (2.27) writes past its table arrays for a DHT table of more than 256 codes (docs/testing.md).
TEST_CASE("image folder: a JPEG Huffman table of more than 256 codes is refused before stb_image reads it",
          "[image_folder][errors]") {
  TempDir dir("liere_image_dht");
  write_jpg(dir / "a.jpg", 1, 12, 10);
  const Bytes jpg = read_all(dir / "a.jpg");
  REQUIRE(jpg.size() > 4);
  REQUIRE((jpg[0] == 0xFF && jpg[1] == 0xD8 && jpg[jpg.size() - 2] == 0xFF && jpg[jpg.size() - 1] == 0xD9));
  const Image plain = decode_image(jpg, "a.jpg");
  // 256 codes is JPEG's limit and is accepted: the extra table for DC 0 comes first and the file's own DC 0 table
  // replaces it, so the pixels are those of the file.
  const Image with256 = decode_image(inserted(jpg, 2, dht_segment(256)), "a256.jpg");
  CHECK(with256.pixels == plain.pixels);
  // 257 codes: refused, wherever stb_image would read the segment. Right after SOI (table at byte 6, after FF D8,
  // FF C4 and the length) ...
  CHECK_THROWS_WITH(decode_image(inserted(jpg, 2, dht_segment(257)), "b.jpg"),
                    Contains("'b.jpg': corrupt JPEG: the Huffman table at byte 6 (DHT segment at byte 2) declares 257 "
                             "codes, at most 256 are possible"));
  // ... after padding and fill bytes following the first segment (APP0), which stb_image skips between segments ...
  Bytes padded{0x00, 0x00, 0xFF, 0xFF};
  const Bytes seg257 = dht_segment(257);
  padded.insert(padded.end(), seg257.begin() + 1, seg257.end());  // FF FF FF C4 …: the marker's FF is a fill byte
  const std::size_t after_app0 = 4 + (std::size_t(jpg[4]) << 8 | jpg[5]);
  REQUIRE(jpg[3] == 0xE0);
  CHECK_THROWS_WITH(decode_image(inserted(jpg, after_app0, padded), "c.jpg"),
                    Contains("'c.jpg': corrupt JPEG") && Contains("declares 257 codes"));
  // ... and after the entropy-coded data of the scan, just before EOI, where stb_image reads it as the next marker
  // (with the largest count JPEG's bytes can declare: 16 × 255).
  Bytes counts_only{0xFF, 0xC4, 0x00, 0x13, 0x00};
  counts_only.insert(counts_only.end(), 16, 0xFF);
  CHECK_THROWS_WITH(decode_image(inserted(jpg, jpg.size() - 2, counts_only), "d.jpg"),
                    Contains("'d.jpg': corrupt JPEG") && Contains("declares 4080 codes"));
  // The same bytes inside an APP segment are data, not a table, and are not looked at.
  const std::size_t app_length = 2 + seg257.size();
  Bytes app{0xFF, 0xE1, std::uint8_t(app_length >> 8), std::uint8_t(app_length & 0xFF)};
  app.insert(app.end(), seg257.begin(), seg257.end());
  CHECK(decode_image(inserted(jpg, 2, app), "e.jpg").pixels == plain.pixels);
}

// Found by tests/fuzz/fuzz_image on 2026-11-28 (UBSan: index 429 out of bounds for type 'stbi_uc[256]' in
// stbi__jpeg_huff_decode): a scan naming a Huffman table that no DHT segment defined decodes with the uncleared memory
// of stb_image 2.27's decoder (docs/testing.md). The file is libFuzzer's input, also a seed of fuzz_image; its scan
// gives component 2 AC table 3, the file defines tables 0 and 1.
TEST_CASE("image folder: a JPEG scan using a Huffman table no DHT segment defines is refused before stb_image decodes",
          "[image_folder][errors]") {
  CHECK_THROWS_WITH(decode_image(read_all(std::filesystem::path(LIERE_TEST_DATA_DIR) / "jpeg_undefined_huffman.jpg"),
                                 "f.jpg"),
                    Contains("'f.jpg': corrupt JPEG: the scan at byte 533 decodes component 2 with AC Huffman table 3, "
                             "which no DHT segment before it defines"));
  // stb_image_write's baseline file (DHT: DC and AC tables 0 and 1; the scan: Y with 0/0, Cb and Cr with 1/1), its
  // scan's table selectors changed.
  TempDir dir("liere_image_sos");
  write_jpg(dir / "a.jpg", 1, 12, 10);
  const Bytes jpg = read_all(dir / "a.jpg");
  const std::uint8_t kSos[2] = {0xFF, 0xDA};
  const auto sos = std::search(jpg.begin(), jpg.end(), std::begin(kSos), std::end(kSos));
  REQUIRE(sos != jpg.end());
  const std::size_t at = std::size_t(sos - jpg.begin());
  REQUIRE(jpg[at + 4] == 3);  // three components
  REQUIRE((jpg[at + 6] == 0x00 && jpg[at + 8] == 0x11 && jpg[at + 10] == 0x11));
  const Image plain = decode_image(jpg, "a.jpg");
  const auto with = [&](int component, std::uint8_t tables) {
    Bytes b = jpg;
    b[at + 6 + 2 * std::size_t(component - 1)] = tables;
    return b;
  };
  CHECK(decode_image(with(2, 0x00), "g.jpg").pixels.size() == plain.pixels.size());  // defined tables: decodes
  CHECK_THROWS_WITH(decode_image(with(2, 0x13), "h.jpg"),
                    Contains("'h.jpg': corrupt JPEG: the scan at byte " + std::to_string(at) +
                             " decodes component 2 with AC Huffman table 3, which no DHT segment before it defines"));
  CHECK_THROWS_WITH(decode_image(with(1, 0x20), "i.jpg"), Contains("component 1 with DC Huffman table 2"));
  CHECK_THROWS_WITH(decode_image(with(3, 0x40), "j.jpg"), Contains("bad DC huff"));  // above 3: stb_image's own error

  // A progressive file (Pillow 9.4, libjpeg: progressive=True, quality 90; 10 scans) uses only some of the tables its
  // scans name: its first DC scan (byte 231) names AC table 0 for Cb and Cr before any AC table is defined (at 270),
  // its DC refinement (1229) decodes raw bits, its AC scans (300: Y, Ss 1–5) their AC tables.
  const Bytes prog = read_all(std::filesystem::path(LIERE_TEST_DATA_DIR) / "progressive_37x29.jpg");
  REQUIRE(prog.size() == 1697);
  const Image p = decode_image(prog, "p.jpg");
  CHECK((p.width == 37 && p.height == 29 && p.channels == 3));
  const auto prog_with = [&](std::size_t scan, int component, std::uint8_t tables) {
    REQUIRE((prog[scan] == 0xFF && prog[scan + 1] == 0xDA));
    Bytes b = prog;
    b[scan + 6 + 2 * std::size_t(component - 1)] = tables;
    return b;
  };
  CHECK(decode_image(prog_with(1229, 2, 0x33), "k.jpg").pixels == p.pixels);  // a refinement names no table it uses
  CHECK_THROWS_WITH(decode_image(prog_with(231, 2, 0x30), "l.jpg"),
                    Contains("the scan at byte 231 decodes component 2 with DC Huffman table 3"));
  CHECK_THROWS_WITH(decode_image(prog_with(300, 1, 0x02), "m.jpg"),
                    Contains("the scan at byte 300 decodes component 1 with AC Huffman table 2"));
  CHECK(decode_image(prog_with(300, 1, 0x30), "n.jpg").pixels == p.pixels);  // an AC scan's DC selector is unused
}

// Found by tests/fuzz/fuzz_image (UBSan: signed integer overflow in stbi__jpeg_decode_block, `dc * dequant[0]`):
// corrupt entropy-coded data grow a JPEG's DC prediction until its product with the quantisation step overflows int
// (nothings/stb #1533, open upstream; the file is libFuzzer's minimised input). data_tools/stb_impl.cpp is compiled
// with -fwrapv, so the product wraps and the file decodes to garbage pixels, the sizes its header declares. The
// same file is a seed of fuzz_image (tests/fuzz/corpus/image/), whose replay in the fuzzing build (clang, UBSan
// without recovery) reports the overflow if the flag is lost; GCC's UBSan in the sanitizer build does not see it
// (checked: without -fwrapv this test passes there too).
TEST_CASE("image folder: a JPEG whose DC prediction overflows int decodes without undefined behaviour",
          "[image_folder][errors]") {
  const Bytes jpg = read_all(std::filesystem::path(LIERE_TEST_DATA_DIR) / "jpeg_dc_overflow.jpg");
  for (const int channels : {3, 1}) {
    const Image img = decode_image(jpg, "jpeg_dc_overflow.jpg", channels);
    CHECK(img.height == 255);
    CHECK(img.width == 57608);
    CHECK(img.channels == channels);
    CHECK(img.pixels.size() == std::size_t(channels) * 255 * 57608);
  }
}

// Found by tests/fuzz/fuzz_image as inputs of several seconds each: a PNG whose IDAT chunk declares 1.2 GB made
// stb_image allocate 2 GB before finding the data short; such a chunk is refused from its length (docs/testing.md).
TEST_CASE("image folder: a PNG chunk longer than the file is refused before stb_image allocates for it",
          "[image_folder][errors]") {
  TempDir dir("liere_image_chunk");
  write_png(dir / "a.png", 1, 4, 2);
  const Bytes png = read_all(dir / "a.png");
  const Image plain = decode_image(png, "a.png");
  CHECK(plain.width == 4);
  const auto idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::end("IDAT") - 1);
  REQUIRE(idat != png.end());
  const std::size_t at = std::size_t(idat - png.begin()) - 4;  // the chunk's length field
  Bytes huge = png;
  huge[at] = 0x4C;
  huge[at + 1] = 0x00;
  huge[at + 2] = 0x00;
  huge[at + 3] = 0x0C;
  CHECK_THROWS_WITH(decode_image(huge, "huge_idat.png"),
                    Contains("'huge_idat.png': corrupt or truncated PNG: chunk 'IDAT' at byte " + std::to_string(at) +
                             " declares 1275068428 bytes of data, the file has " +
                             std::to_string(png.size() - at - 8) + " bytes left"));
  // The file's last CRC (IEND's) missing is not looked at, as stb_image does not read it.
  const Bytes no_last_crc(png.begin(), png.end() - 4);
  CHECK(decode_image(no_last_crc, "short.png").pixels == plain.pixels);
}

// Found by tests/fuzz/fuzz_image (2026-11-25): a PNG whose first IDAT chunk is empty made stb_image 2.27 call
// memcpy(NULL, p, 0) (undefined behaviour, a UBSan report in the sanitizer build). Empty IDAT chunks are legal; they
// are dropped before stb sees the file, and the image is the same.
TEST_CASE("image folder: empty IDAT chunks are dropped before stb_image, the image is unchanged", "[image_folder][errors]") {
  TempDir dir("liere_image_empty_idat");
  write_png(dir / "a.png", 2, 5, 4);
  const Bytes png = read_all(dir / "a.png");
  const Image plain = decode_image(png, "a.png");
  const auto idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::end("IDAT") - 1);
  REQUIRE(idat != png.end());
  const std::size_t at = std::size_t(idat - png.begin()) - 4;  // the IDAT chunk's length field
  const Bytes empty = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0x35, 0xAF, 0x06, 0x1E};  // length 0, type, CRC-32 of "IDAT"
  Bytes before = png;  // one empty IDAT before the real one, two more after it
  before.insert(before.begin() + std::ptrdiff_t(at), empty.begin(), empty.end());
  const std::size_t real_len = std::size_t(png[at]) << 24 | std::size_t(png[at + 1]) << 16 |
                               std::size_t(png[at + 2]) << 8 | std::size_t(png[at + 3]);
  const std::size_t after_real = at + empty.size() + 12 + real_len;
  before.insert(before.begin() + std::ptrdiff_t(after_real), empty.begin(), empty.end());
  before.insert(before.begin() + std::ptrdiff_t(after_real), empty.begin(), empty.end());
  const Image got = decode_image(before, "empty_idat.png");
  CHECK(got.width == plain.width);
  CHECK(got.height == plain.height);
  CHECK(got.pixels == plain.pixels);
  // The fuzzer's own input (132 bytes): decodes or is refused with a message, never undefined behaviour.
  const std::string b64 =
      "iVBORw0KGgoAAAANSUhEUgAAAAUAAAAECAIAAADJUWIXAAAAS35EQVR42gFAAL//AABGjChutFCS3Hi+BKDmLAAJGpUxd71Zn+WBxw2p7zUAAlie"
      "OoDGYqjuitAWsvg+ABthp0OJz2uxIZPZH7sBR4dNHVNTfehHAAAAAElEQVSuQmCC";
  Bytes fuzz;
  {
    unsigned acc = 0;
    int bits = 0;
    for (const char c : b64) {
      if (c == '=') break;
      const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      acc = acc << 6 | unsigned(std::strchr(table, c) - table);
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        fuzz.push_back(std::uint8_t(acc >> bits & 0xFF));
      }
    }
  }
  REQUIRE(fuzz.size() == 132);
  try {
    (void)decode_image(fuzz, "fuzz.png");
  } catch (const liere::Error& e) {
    CHECK_THAT(e.what(), Contains("fuzz.png"));
  }
  // Found by tests/fuzz/fuzz_image on 2026-11-28: an empty IDAT at the end of the file with its CRC cut short (1 of 4
  // bytes) was cut out as 12 bytes, past the file's end (std::length_error from the vector, an abort). What the file
  // has of the chunk is dropped; the file, without IEND, is refused as truncated.
  const Bytes grey3{0x89, 'P',  'N',  'G',  0x0D, 0x0A, 0x1A, 0x0A, 0,    0,    0,    0x0D, 'I',  'H',  'D',  'R',  0,
                    0,    0,    3,    0,    0,    0,    1,    8,    0,    0,    0,    0,    0x44, 0x43, 0xEA, 0x63, 0,
                    0,    0,    0x0E, 'I',  'D',  'A',  'T',  0x78, 0xDA, 0x63, 0x64, 0x68, 0xFA, 0xCF, 0x00, 0xC5,
                    0x00, 0x17, 0xFD, 0x04, 0x7E, 0x64, 0x07, 0x1B, 0x32, 0,    0,    0,    0,    'I',  'D',  'A',
                    'T',  0x82};
  REQUIRE(grey3.size() == 68);
  CHECK_THROWS_WITH(decode_image(grey3, "cut.png"), Contains("'cut.png': corrupt or truncated PNG image"));
}
