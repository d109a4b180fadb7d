// tests/test_train_video.cpp — train_ucf101 end to end, as a user runs it: --dry-run and one training step on the
// real UCF101 clip (tests/data/ucf101) in a two-class root the test builds, the clip cache on a second run, bad
// input (a list naming a missing clip, a truncated clip, a text file named .avi, a clip shorter than the frames
// asked) with and without --skip-bad-clips, a tiny --compare on the synthetic task that the program writes, and
// both encodings fitting 16 synthetic clips with the synthetic task's default inputs (unit, not ImageNet-normalised).
#include <catch2/catch.hpp>

#include <liere/io/json.hpp>


#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using liere::test::TempDir;

namespace {

const std::string kClip = std::string(LIERE_TEST_DATA_DIR) + "/ucf101/UCF-101/ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi";

struct Result {
  int status = -1;
  std::string log;  // stdout and stderr
};

Result run(const TempDir& dir, const std::string& args) {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "train_ucf101";
  const std::string log = dir / "log.txt";
  const int status = liere::test::run_logged("OMP_NUM_THREADS=1 " + exe.string() + " --threads 1 " + args, log);
  return {status, liere::test::read_bytes(log)};
}

// root/UCF-101/<Class>/<file> for every (class, file) and its lists: the classes, a training list of `train` and a
// test list of `test` ("<Class>/<file>"), CRLF as the official ones.
void write_lists(const fs::path& root, const std::vector<std::string>& classes, const std::vector<std::string>& train,
                 const std::vector<std::string>& test) {
  std::string ci, tr, te;
  for (std::size_t k = 0; k < classes.size(); ++k) ci += std::to_string(k + 1) + " " + classes[k] + "\r\n";
  for (const auto& e : train) {
    const std::string cls = e.substr(0, e.find('/'));
    const auto k = std::find(classes.begin(), classes.end(), cls) - classes.begin();
    tr += e + " " + std::to_string(k + 1) + "\r\n";
  }
  for (const auto& e : test) te += e + "\r\n";
  liere::test::write_text((root / "ucfTrainTestlist" / "classInd.txt").string(), ci);
  liere::test::write_text((root / "ucfTrainTestlist" / "trainlist01.txt").string(), tr);
  liere::test::write_text((root / "ucfTrainTestlist" / "testlist01.txt").string(), te);
}

// Two classes, each holding a copy of the real clip: A/v_A_g01_c01.avi and B/v_B_g01_c01.avi, both in the
// training and the test list.
fs::path real_root(const TempDir& dir) {
  const fs::path root = dir.path / "ucf";
  for (const char* c : {"A", "B"}) {
    fs::create_directories(root / "UCF-101" / c);
    fs::copy_file(kClip, root / "UCF-101" / c / (std::string("v_") + c + "_g01_c01.avi"));
  }
  write_lists(root, {"A", "B"}, {"A/v_A_g01_c01.avi", "B/v_B_g01_c01.avi"}, {"A/v_A_g01_c01.avi", "B/v_B_g01_c01.avi"});
  return root;
}

// The member `key` of a JSON object as a number or a string; a missing member fails the test.
double num(const liere::io::json::Value& o, const char* key) {
  const auto* v = o.find(key);
  INFO("key " << key);
  REQUIRE((v && v->is_number()));
  return v->number;
}
std::string str(const liere::io::json::Value& o, const char* key) {
  const auto* v = o.find(key);
  INFO("key " << key);
  REQUIRE((v && v->is_string()));
  return v->text;
}

// tests/CMakeLists.txt builds train_ucf101 before this test and disables the test where the program is not built
// (no FFmpeg, or LIERE_BUILD_EXAMPLES=OFF), so a missing program is a failure here, not a skip.
void require_program() {
  const fs::path exe = fs::path(LIERE_BINARY_DIR) / "examples" / "train_ucf101";
  INFO(exe.string() << " is not built");
  REQUIRE(fs::exists(exe));
}

// A small model for the runs that train, so that a step takes well under a second.
const std::string kSmall = " --model custom --dim 32 --depth 2 --heads 2 --mlp 64 --warmup 0 ";

}  // namespace

TEST_CASE("train_ucf101: --help and bad flags", "[program][video]") {
  require_program();
  TempDir dir("liere_train_video");
  Result r = run(dir, "--help");
  CHECK(r.status == 0);
  CHECK_THAT(r.log, Contains("--skip-bad-clips") && Contains("--split") && Contains("--compare") &&
                        Contains("https://www.crcv.ucf.edu/data/UCF101.php"));
  r = run(dir, "--frobnicate");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--frobnicate"));
  r = run(dir, "--split 4 --dry-run");  // bad flags: usage errors, exit 2
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--split 4: allowed: 1, 2, 3"));
  r = run(dir, "--frames 7 --dry-run");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--frames 7 is not a multiple of --tubelet 2"));
  r = run(dir, "--normalise zscore --dry-run");
  CHECK(r.status == 2);
  CHECK_THAT(r.log, Contains("--normalise zscore: allowed: auto, imagenet, unit"));
  // The synthetic task's flags, as make_video_task's (they exited 1 with the task generator's words, an audit found).
  for (const auto& [args, text] : std::vector<std::pair<std::string, std::string>>{
           {"--synthetic-classes 3", "--synthetic-classes 3: allowed: 2, 4, 8"},
           {"--synthetic-noise 1000", "--synthetic-noise 1000: expected a number in [0, 64]"},
           {"--synthetic-distractors -5", "--synthetic-distractors -5: expected an integer in [0, 16]"},
           {"--frames 100000", "--frames 100000: expected an integer in [0, 1024]"},
           {"--frames 600 --stride 2", "(T − 1)·stride + 1 = 1199 frames; the task has 2 to 1024"},
           {"--size 8 --patch 8", "--size 8: the synthetic task's frames are 16 to 1024 pixels"}}) {
    INFO(args);
    r = run(dir, args + " --dry-run");
    CHECK(r.status == 2);
    CHECK_THAT(r.log, Contains(text));
  }
}

TEST_CASE("train_ucf101 on the real clip: --dry-run, one step, the cache", "[program][video]") {
  require_program();
  TempDir dir("liere_train_video");
  const fs::path root = real_root(dir);

  // The paper's geometry (16 frames every 4th at 112×112, tubelets 2×16×16: an 8×7×7 grid) with ViT-Tiny: the
  // clip is decoded and goes through one forward pass.
  Result r = run(dir, "--root " + root.string() + " --dry-run");
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("tubelet=2 image=16x112x112") && Contains("classes=2") &&
                        Contains("2 training and 2 test clips, 2 classes") && Contains("decoded to 3x16x112x112") &&
                        Contains("forward pass: loss"));
  // This tiny data set tests on its training clips, which is said (UCF101's own lists share none).
  CHECK_THAT(r.log, Contains("warning: UCF101 split 1: 2 clips are in both trainlist01.txt and testlist01.txt") &&
                        Contains("the test accuracy counts clips the model trained on"));

  // One training step (batch 2) and an evaluation, with a summary; the clips go to the cache.
  const std::string cache = dir / "cache", summary = dir / "summary.json";
  const std::string args = "--root " + root.string() + kSmall + " --pe liere --epochs 1 --batch 2 --eval-batch 2 --cache " +
                           cache + " --summary-json " + summary;
  r = run(dir, args);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("epoch 1: train loss") && Contains("cache so far: 0 hits, 2 misses, 2 writes"));
  const auto s = liere::io::json::parse(liere::test::read_bytes(summary));
  CHECK(num(s, "test_n") == 2);
  CHECK(num(s, "train_n") == 2);
  CHECK(num(s, "frames") == 16);
  CHECK(str(s, "pe") == "liere8");
  int files = 0;
  for (const auto& e : fs::directory_iterator(cache)) files += e.path().extension() == ".clip";
  CHECK(files == 2);  // one per clip: A and B are different source files

  // A second run reads the clips from the cache instead of decoding them.
  r = run(dir, args);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("cache so far: 2 hits, 0 misses, 0 writes"));
}

TEST_CASE("train_ucf101: bad clips are errors naming the file, skipped only with --skip-bad-clips", "[program][video]") {
  require_program();
  TempDir dir("liere_train_video");
  const fs::path root = real_root(dir);
  const std::string base = "--root " + root.string() + kSmall + " --epochs 1 --batch 2 --eval-batch 2 --cache none";

  SECTION("a list naming a missing clip") {
    write_lists(root, {"A", "B"}, {"A/v_A_g01_c01.avi", "B/v_B_g01_c01.avi", "B/v_B_g02_c01.avi"},
                {"A/v_A_g01_c01.avi"});
    Result r = run(dir, base);
    CHECK(r.status == 1);
    CHECK_THAT(r.log, Contains("trainlist01.txt") && Contains("v_B_g02_c01.avi") && Contains("missing"));
    r = run(dir, base + " --skip-bad-clips");
    INFO(r.log);
    CHECK(r.status == 0);
    CHECK_THAT(r.log, Contains("skipping '") && Contains("v_B_g02_c01.avi': no such file"));
  }
  SECTION("a truncated clip and a text file named .avi in the test list") {
    const std::string bytes = liere::test::read_bytes(kClip);
    liere::test::write_bytes((root / "UCF-101" / "A" / "v_A_g02_c01.avi").string(), bytes.substr(0, 4000));
    liere::test::write_text((root / "UCF-101" / "B" / "v_B_g02_c01.avi").string(), "not a video\n");
    write_lists(root, {"A", "B"}, {"A/v_A_g01_c01.avi", "B/v_B_g01_c01.avi"},
                {"A/v_A_g01_c01.avi", "A/v_A_g02_c01.avi", "B/v_B_g02_c01.avi", "B/v_B_g01_c01.avi"});
    Result r = run(dir, base);
    CHECK(r.status == 1);
    CHECK_THAT(r.log, Contains("v_A_g02_c01.avi") || Contains("v_B_g02_c01.avi"));
    r = run(dir, base + " --skip-bad-clips --summary-json " + (dir / "s.json"));
    INFO(r.log);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.log, Contains("skipping '") && Contains("v_A_g02_c01.avi") && Contains("v_B_g02_c01.avi") &&
                          Contains("not a video file"));
    const auto s = liere::io::json::parse(liere::test::read_bytes(dir / "s.json"));
    CHECK(num(s, "test_n") == 2);  // the two good test clips are evaluated, the bad ones left out
    CHECK(num(s, "skipped_clips") == 2);
  }
  SECTION("a clip shorter than the frames asked") {
    // 32 frames every 8th span 249 frames; the clip has 164.
    Result r = run(dir, base + " --frames 32 --stride 8");
    CHECK(r.status == 1);
    CHECK_THAT(r.log, Contains("_g01_c01.avi' is too short: it has 164 frames, 249 wanted"));
  }
}

TEST_CASE("train_ucf101 on the synthetic task: a tiny --compare, the data folder reused", "[program][video]") {
  require_program();
  TempDir dir("liere_train_video");
  const std::string data = dir / "passing", table = dir / "table.json", summary = dir / "summary.json";
  const std::string args = "--data-dir " + data + " --synthetic-train 16 --synthetic-test 8" + kSmall +
                           " --epochs 2 --batch 8 --eval-batch 8 --compare abs,liere8 --compare-json " + table +
                           " --summary-json " + summary + " --metrics " + (dir / "m");
  Result r = run(dir, args);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("synthetic passing task: writing 16 training and 8 test clips"));
  CHECK(fs::exists(fs::path(data) / "UCF-101" / "RedLeftGreenLeft"));
  CHECK(fs::exists(fs::path(data) / "clip_cache"));
  const auto t = liere::io::json::parse(liere::test::read_bytes(table));
  REQUIRE(t.items.size() == 2);
  CHECK(str(t.items[0], "pe") == "abs");
  CHECK(str(t.items[1], "pe") == "liere8");
  CHECK(num(t.items[1], "test_n") == 8);
  const double p = num(t.items[1], "p_value");
  CHECK((p > 0 && p <= 1));
  CHECK(fs::exists(dir / "m.abs.jsonl"));
  CHECK(fs::exists(dir / "m.liere8.jsonl"));
  const auto s = liere::io::json::parse(liere::test::read_bytes(summary));
  CHECK(num(s, "train_n") == 16);

  // The same task again: the clips are reused (and come from the cache); another task in that folder is an error.
  r = run(dir, args);
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.log, Contains("synthetic passing task: reusing") && Contains("cache so far: 32 hits, 0 misses"));
  r = run(dir, "--data-dir " + data + " --synthetic-train 24 --synthetic-test 8 --epochs 1 --pe abs");
  CHECK(r.status == 1);
  CHECK_THAT(r.log, Contains("holds another synthetic task"));
}

// The synthetic clips are 97% black. With ImageNet's normalisation (the default with --root) every tubelet became
// nearly the same background vector and neither encoding left ln 2 even on 16 clips; with the synthetic task's
// default, unit inputs (v/255), a small ViT fits them in 80 steps. Measured on this setting (seeds 0-3): final
// training loss 0.02-0.15 and training accuracy 1 for abs and LieRE-8 with unit inputs, 0.6931 and 0.5 for both
// with --normalise imagenet.
TEST_CASE("train_ucf101 on the synthetic task: unit inputs by default, and both encodings fit 16 clips",
          "[program][video]") {
  require_program();
  TempDir dir("liere_train_video");
  const std::string summary = dir / "summary.json";
  const Result r = run(dir, "--data-dir " + (dir / "passing") +
                                " --synthetic-train 16 --synthetic-test 8 --synthetic-classes 2 "
                                "--synthetic-distractors 0" + kSmall + " --epochs 40 --batch 8 --eval-batch 8 --lr 3e-3 "
                                "--compare abs,liere8 --summary-json " + summary + " --metrics " + (dir / "m"));
  INFO(r.log);
  REQUIRE(r.status == 0);
  CHECK(str(liere::io::json::parse(liere::test::read_bytes(summary)), "normalise") == "unit");
  for (const char* pe : {"abs", "liere8"}) {
    // The last line of the metrics is the last epoch's row.
    const std::string m = liere::test::read_bytes(dir / (std::string("m.") + pe + ".jsonl"));
    const auto end = m.find_last_not_of('\n');
    REQUIRE(end != std::string::npos);
    const auto nl = m.rfind('\n', end), start = nl == std::string::npos ? 0 : nl + 1;
    const std::string last = m.substr(start, end + 1 - start);
    INFO(pe << ": " << last);
    const auto row = liere::io::json::parse(last);
    CHECK(num(row, "epoch") == 40);
    CHECK(num(row, "train_loss") < 0.5 * std::log(2.0));
    CHECK(num(row, "train_acc") >= 0.9);
  }
}
