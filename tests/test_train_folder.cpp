// tests/test_train_folder.cpp — train_cifar --data folder end to end on tiny folders of PNG and JPEG images that the
// test writes: reddish and bluish images of different sizes, so that a ViT learns the classes in a few steps through
// RandomResizedCrop. Both layouts (class folders with every N-th image held out; train/ and val/), and bad input.
#include <catch2/catch.hpp>

#include <liere/backend/cpu/gemm_bf16.hpp>
#include <liere/io/json.hpp>

#include <stb_image_write.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using liere::test::TempDir;

namespace {

struct Result {
  int status = -1;
  std::string log;
};

// env: more VAR=value settings for the program (e.g. ONEDNN_MAX_CPU_ISA=AVX2).
Result run(const TempDir& dir, const std::string& args, const std::string& env = "") {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "train_cifar";
  const std::string log = dir / "log.txt";
  const int status = liere::test::run_logged(
      "OMP_NUM_THREADS=1 " + (env.empty() ? "" : env + " ") + exe.string() + " --threads 1 " + args, log);
  return {status, liere::test::read_bytes(log)};
}

double num(const liere::io::json::Value& o, const char* key) {
  const auto* v = o.find(key);
  INFO("key " << key);
  REQUIRE((v && v->is_number()));
  return v->number;
}

// An H×W image of class `red` (true: red dominates, else blue) with noise; PNG or JPEG by the extension.
void write_image(const fs::path& path, bool red, int W, int H, std::mt19937& g) {
  fs::create_directories(path.parent_path());
  std::uniform_int_distribution<int> noise(0, 90);
  std::vector<std::uint8_t> px(std::size_t(W) * H * 3);
  for (std::size_t i = 0; i < px.size(); i += 3) {
    px[i + 0] = std::uint8_t((red ? 160 : 40) + noise(g));
    px[i + 1] = std::uint8_t(60 + noise(g));
    px[i + 2] = std::uint8_t((red ? 40 : 160) + noise(g));
  }
  const bool png = path.extension() == ".png";
  const int ok = png ? stbi_write_png(path.string().c_str(), W, H, 3, px.data(), W * 3)
                     : stbi_write_jpg(path.string().c_str(), W, H, 3, px.data(), 90);
  REQUIRE(ok != 0);
}

// n images per class under dir/<class>/ (sizes from 20×16 to 43×39; every other one a JPEG).
void write_classes(const fs::path& dir, int n, std::uint32_t seed) {
  std::mt19937 g(seed);
  for (int i = 0; i < n; ++i)
    for (const char* cls : {"blue", "red"}) {
      const std::string name = std::string(cls) + "_" + std::to_string(i) + (i % 2 ? ".jpg" : ".png");
      write_image(dir / cls / name, cls[0] == 'r', 20 + (i * 7) % 24, 16 + (i * 5) % 24, g);
    }
}

// tests/CMakeLists.txt builds train_cifar before this test and disables the test where the program is not built
// (LIERE_BUILD_EXAMPLES=OFF), so a missing program is a failure here, not a skip.
void require_program() {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "train_cifar";
  INFO(exe.string() << " is not built");
  REQUIRE(fs::exists(exe));
}

const std::string kModel =
    " --image-size 16 --patch 4 --model custom --dim 32 --depth 1 --heads 2 --mlp 64 --pe liere --block 8"
    " --epochs 6 --batch 6 --lr 3e-3 --warmup 0 --eval-batch 16 ";

}  // namespace

TEST_CASE("train_cifar --data folder: class folders, every N-th image held out", "[program][images]") {
  require_program();
  TempDir dir("liere_train_folder");
  write_classes(dir.path / "photos", 24, 1);
  const std::string summary = dir / "s.json";
  const Result r = run(dir, "--data folder --root " + (dir.path / "photos").string() + " --holdout-every 4" + kModel +
                                "--summary-json " + summary);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("train 36 test 12") && Contains("2 classes, every 4th image of each class held out") &&
                        Contains("image=16x16"));
  const auto s = liere::io::json::parse(liere::test::read_bytes(summary));
  CHECK(num(s, "train_n") == 36);
  CHECK(num(s, "test_n") == 12);
  // The colour decides the class: learnt from 36 crops in 36 steps (chance is 50%).
  CHECK(num(s, "test_acc") >= 0.9);
}

TEST_CASE("train_cifar --data folder: train/ and val/, and bad input", "[program][images]") {
  require_program();
  TempDir dir("liere_train_folder");
  const fs::path root = dir.path / "imagenet_like";
  write_classes(root / "train", 12, 2);
  write_classes(root / "val", 4, 3);
  const std::string summary = dir / "s.json";
  Result r = run(dir, "--data folder --root " + root.string() + kModel + "--summary-json " + summary);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("train 24 test 8") && Contains("train/ and val/"));
  CHECK(num(liere::io::json::parse(liere::test::read_bytes(summary)), "test_n") == 8);

  // --dry-run needs the folder only for the number of classes.
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run");
  CHECK(r.status == 0);
  CHECK_THAT(r.log, Contains("classes=2"));
  // --precision: what this build cannot train in stops before any work, exit code 2, saying what it can.
  // bf16 runs where the CPU has it (AVX512_BF16 and oneDNN); oneDNN limited to AVX2 refuses it, as a CPU without
  // AVX-512 would.
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run --precision bf16 --device cpu");
  CHECK(r.status == (liere::cpu::bf16_gemm_support() ? 0 : 2));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run --precision bf16 --device cpu",
          "ONEDNN_MAX_CPU_ISA=AVX2");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--precision bf16 is not supported on cpu here") && Contains("use --precision fp32"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run --precision fp16 --device cpu");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--precision fp16 is not supported on cpu") && Contains("use --precision bf16"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run --precision tf32 --device cpu");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--precision tf32 needs --device cuda"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run --precision fp32 --device cpu");
  CHECK(r.status == 0);

  // No --root; a size the patch does not divide; a class in val/ that train/ lacks; a corrupt image.
  r = run(dir, "--data folder" + kModel);
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--data folder needs --root DIR"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--image-size 18");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--image-size 18 is not a multiple of --patch 4"));
  // A size past any image's, and one whose decoded images cannot fit in memory: refused before anything is decoded
  // (both were std::bad_alloc).
  r = run(dir, "--data folder --root " + root.string() + kModel + "--image-size 100000");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--image-size 100000"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--image-size 8192 --batch 100000");
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("8 test images and a batch of 100000 at --image-size 8192 take") &&
                        Contains("GiB as floats, more than this machine's"));
  r = run(dir, "--data folder --root " + root.string() + kModel + "--data-fraction 0.5");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--data-fraction is for the CIFAR and Fashion-MNIST files"));
  // An --eval-res whose attention scores cannot fit in memory (a bad_alloc after the training, an audit found), and a
  // --patch that does not divide the fixed images of CIFAR or Fashion-MNIST (an error after loading them): usage
  // errors before any work.
  r = run(dir, "--data folder --root " + root.string() + kModel + "--eval-res 4000");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--eval-res 4000: 1000001 tokens a test image at --patch 4") &&
                        Contains("GiB of memory (a smaller --eval-res or --eval-batch)"));
  r = run(dir, "--data fashion-mnist --root " + (dir.path / "nowhere").string() + kModel + "--patch 3");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--patch 3 does not divide the side of Fashion-MNIST's 28 × 28 images"));
  // One class folder: nothing to classify (it trained to 100%).
  write_classes(dir.path / "one", 6, 5);
  fs::remove_all(dir.path / "one" / "blue");
  r = run(dir, "--data folder --root " + (dir.path / "one").string() + " --holdout-every 2" + kModel);
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("has one class folder ('red'): a classifier needs two or more"));
  r = run(dir, "--data folder --root " + (dir.path / "one").string() + " --holdout-every 1" + kModel);
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--holdout-every 1"));
  // val/red a link to train/red: 12 of the 16 test images are training images (trained on and scored, silently).
  fs::rename(root / "val" / "red", dir.path / "val_red");
  fs::create_directory_symlink(root / "train" / "red", root / "val" / "red");
  r = run(dir, "--data folder --root " + root.string() + kModel + "--dry-run");
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("12 image(s) of '" + (root / "val").string() + "' are images of '" +
                             (root / "train").string() + "' too (through links), the first '" +
                             (root / "val" / "red" / "red_0.png").string() + "'"));
  fs::remove(root / "val" / "red");
  fs::rename(dir.path / "val_red", root / "val" / "red");
  std::mt19937 g(4);
  write_image(root / "val" / "green" / "g.png", false, 20, 20, g);
  r = run(dir, "--data folder --root " + root.string() + kModel);
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("green") && Contains("is not one of the 2 given classes"));
  fs::remove_all(root / "val" / "green");
  liere::test::write_text((root / "train" / "red" / "broken.png").string(), "\x89PNG\r\n\x1a\n truncated");
  r = run(dir, "--data folder --root " + root.string() + kModel);
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("broken.png"));
}
