// tests/test_ucf101.cpp — the UCF101 split lists (the real ones, CRLF), the data set over the real sample clip and over
// small data sets written here, the clip cache (hits, identical bytes, damaged files detected), skipping bad clips,
// and the synthetic passing task: balance, determinism, the symmetries its label must have, and end to end through
// the UCF101 reader.
//
// C channels, T frames, S the side of the square frames, K movers.
#include <data_tools/moving_objects.hpp>
#include <data_tools/ucf101.hpp>

#include <catch2/catch.hpp>

#include "temp_dir.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
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

// The real sample, committed under tests/data/ucf101 (a byte-for-byte copy of the shared sample).
const std::string kRoot = std::string(LIERE_TEST_DATA_DIR) + "/ucf101";
const std::string kLists = kRoot + "/ucfTrainTestlist";
const std::string kClipRel = "ApplyEyeMakeup/v_ApplyEyeMakeup_g01_c01.avi";

// A UCF101 layout under `root` with the given classes and one clip per (class, name): each clip T frames of S×S in
// one solid colour that encodes its class (red = 40·(k+1)) and its number (green = 30·n + 20).
void write_tiny_set(const fs::path& root, int classes, int per_class, int T = 4, int S = 16) {
  std::string class_ind, train, test;
  for (int k = 0; k < classes; ++k) {
    const std::string cls = "Class" + std::string(1, char('A' + k));
    class_ind += std::to_string(k + 1) + " " + cls + "\r\n";
    for (int n = 0; n < per_class; ++n) {
      const std::string rel = cls + "/v_" + cls + "_g0" + std::to_string(n + 1) + "_c01.avi";
      Bytes px(std::size_t(3) * T * S * S);
      const std::uint8_t colour[3] = {std::uint8_t(40 * (k + 1)), std::uint8_t(30 * n + 20), 90};
      for (int c = 0; c < 3; ++c) std::fill_n(px.begin() + std::ptrdiff_t(c) * T * S * S, T * S * S, colour[c]);
      fs::create_directories(root / "UCF-101" / cls);
      write_video((root / "UCF-101" / rel).string(), px.data(), FrameLayout::CTHW, T, S, S);
      train += rel + " " + std::to_string(k + 1) + "\r\n";
      test += rel + "\r\n";
    }
  }
  write_text((root / "ucfTrainTestlist/classInd.txt").string(), class_ind);
  write_text((root / "ucfTrainTestlist/trainlist01.txt").string(), train);
  write_text((root / "ucfTrainTestlist/testlist01.txt").string(), test);
}

Ucf101Options small_options(int T = 4, int S = 16) {
  Ucf101Options o;
  o.clip.sampling = {SampleMode::Stride, T, 1, 0};
  o.clip.size = S;
  return o;
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / double(a.size());
}

// ---- a pixel oracle for the passing task ------------------------------------------------------------------------

// The label read from the pixels of a clip (3, T, S, S) with K movers: the anchor is the mean position of the white
// pixels (min(R, G, B) ≥ 200) over all frames; mover k in frame t is the centroid of its colour's excess over the
// other two channels (pure red, green, blue movers; the anchor and the distractors have no such excess); its
// velocity is the least-squares slope over the frames where it is visible; bit k = [cross(v, A − mean) > 0].
int oracle_label(const std::uint8_t* clip, int T, int S, int K) {
  const std::size_t plane = std::size_t(S) * S, channel = std::size_t(T) * plane;
  auto px = [&](int c, int t, int y, int x) { return int(clip[c * channel + std::size_t(t) * plane + std::size_t(y) * S + x]); };
  double ax = 0, ay = 0, an = 0;
  for (int t = 0; t < T; ++t)
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x)
        if (std::min({px(0, t, y, x), px(1, t, y, x), px(2, t, y, x)}) >= 200) {
          ax += x + 0.5;
          ay += y + 0.5;
          an += 1;
        }
  if (an == 0) return -1;
  ax /= an;
  ay /= an;
  int label = 0;
  for (int k = 0; k < K; ++k) {
    std::vector<double> ts, xs, ys;
    for (int t = 0; t < T; ++t) {
      double sx = 0, sy = 0, sw = 0;
      for (int y = 0; y < S; ++y)
        for (int x = 0; x < S; ++x) {
          const int others = std::max(px((k + 1) % 3, t, y, x), px((k + 2) % 3, t, y, x));
          const double w = std::max(0, px(k, t, y, x) - others - 60);
          sx += w * (x + 0.5);
          sy += w * (y + 0.5);
          sw += w;
        }
      if (sw > 400) {
        ts.push_back(t);
        xs.push_back(sx / sw);
        ys.push_back(sy / sw);
      }
    }
    if (ts.size() < 2) return -1;
    double mt = 0, mx = 0, my = 0;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      mt += ts[i];
      mx += xs[i];
      my += ys[i];
    }
    mt /= double(ts.size());
    mx /= double(ts.size());
    my /= double(ts.size());
    double vx = 0, vy = 0, tt = 0;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      vx += (ts[i] - mt) * (xs[i] - mx);
      vy += (ts[i] - mt) * (ys[i] - my);
      tt += (ts[i] - mt) * (ts[i] - mt);
    }
    vx /= tt;
    vy /= tt;
    label = 2 * label + (vx * (ay - my) - vy * (ax - mx) > 0 ? 1 : 0);
  }
  return label;
}

// Transforms of a scene (every object alike).
template <class F>
PassingScene transformed(PassingScene s, F f) {
  f(s.anchor);
  for (auto& m : s.movers) f(m);
  for (auto& d : s.distractors) f(d);
  return s;
}

// The clip with its frames in reverse order.
Bytes reversed_frames(const Bytes& clip, int T, int S) {
  Bytes out(clip.size());
  const std::size_t plane = std::size_t(S) * S;
  for (int c = 0; c < 3; ++c)
    for (int t = 0; t < T; ++t)
      std::copy_n(clip.begin() + std::ptrdiff_t((std::size_t(c) * T + t) * plane), plane,
                  out.begin() + std::ptrdiff_t((std::size_t(c) * T + (T - 1 - t)) * plane));
  return out;
}

}  // namespace

// ==== split lists ================================================================================================

TEST_CASE("UCF101 lists: the official classInd, trainlist01 and testlist01 (CRLF)", "[ucf101][lists]") {
  // The files really have CRLF line endings (as distributed).
  const Bytes raw = read_all(kLists + "/trainlist01.txt");
  REQUIRE(raw.size() == 395164u);
  REQUIRE(std::search(raw.begin(), raw.end(), std::begin("1\r\n"), std::end("1\r\n") - 1) != raw.end());

  const std::vector<std::string> classes = read_ucf101_classes(kLists + "/classInd.txt");
  REQUIRE(classes.size() == 101);
  CHECK(classes.front() == "ApplyEyeMakeup");
  CHECK(classes[36] == "HandstandPushups");
  CHECK(classes.back() == "YoYo");
  for (const auto& c : classes) CHECK(c.find('\r') == std::string::npos);

  // `wc -l`: 9537 and 3783 lines.
  const auto train = read_ucf101_list(kLists + "/" + ucf101_list_name(1, true), classes);
  REQUIRE(train.size() == 9537);
  CHECK(train.front().path == "ApplyEyeMakeup/v_ApplyEyeMakeup_g08_c01.avi");
  CHECK(train.front().label == 0);
  CHECK(train.back().path == "YoYo/v_YoYo_g25_c05.avi");
  CHECK(train.back().label == 100);
  const auto test = read_ucf101_list(kLists + "/" + ucf101_list_name(1, false), classes);
  REQUIRE(test.size() == 3783);
  CHECK(test.front().path == kClipRel);
  CHECK(test.front().label == 0);
  CHECK(test.back().path == "YoYo/v_YoYo_g07_c04.avi");
  CHECK(test.back().label == 100);
  // The folder of class 37 is spelt HandstandPushups, its files v_HandStandPushups_…: paths stay as written.
  const auto hs = std::find_if(test.begin(), test.end(), [](const Ucf101Entry& e) { return e.label == 36; });
  REQUIRE(hs != test.end());
  CHECK(hs->path == "HandstandPushups/v_HandStandPushups_g01_c01.avi");
  int per_class[101] = {};
  for (const auto& e : train) {
    REQUIRE(e.path.back() == 'i');  // no '\r' left
    ++per_class[e.label];
  }
  CHECK(*std::min_element(std::begin(per_class), std::end(per_class)) > 0);
  CHECK(ucf101_list_name(3, false) == "testlist03.txt");
  CHECK_THROWS_WITH(ucf101_list_name(4, true), Contains("split must be 1, 2 or 3"));

  // The same lists with LF line endings parse identically.
  TempDir dir;
  std::string lf;
  for (std::uint8_t b : read_all(kLists + "/testlist01.txt"))
    if (b != '\r') lf.push_back(char(b));
  write_text(dir / "testlist_lf.txt", lf);
  const auto test_lf = read_ucf101_list(dir / "testlist_lf.txt", classes);
  REQUIRE(test_lf.size() == test.size());
  CHECK(test_lf.back().path == test.back().path);
}

TEST_CASE("UCF101 lists: the official training and test lists of split 1 share no clip; a shared one is found",
          "[ucf101][lists]") {
  const std::vector<std::string> classes = read_ucf101_classes(kLists + "/classInd.txt");
  auto train = read_ucf101_list(kLists + "/" + ucf101_list_name(1, true), classes);
  const auto test = read_ucf101_list(kLists + "/" + ucf101_list_name(1, false), classes);
  CHECK(train.size() + test.size() == 13320);  // every clip of UCF101 in one of the two
  CHECK(ucf101_overlap(train, test).empty());
  CHECK(ucf101_overlap(test, train).empty());
  train.insert(train.begin() + 5000, test[1234]);  // a test clip planted in the training list
  CHECK(ucf101_overlap(train, test) == std::vector<std::string>{test[1234].path});
  CHECK(ucf101_overlap(test, train) == std::vector<std::string>{test[1234].path});
  std::vector<Ucf101Entry> a{{"A/x.avi", 0}, {"B/y.avi", 1}, {"A/z.avi", 0}}, b{{"A/z.avi", 0}, {"A/x.avi", 0}};
  CHECK(ucf101_overlap(a, b) == std::vector<std::string>{"A/x.avi", "A/z.avi"});  // in the first list's order
  CHECK(ucf101_overlap(a, {}).empty());
}

TEST_CASE("UCF101 lists: every malformed line is named with file:line and what was expected", "[ucf101][errors]") {
  TempDir dir;
  const std::vector<std::string> classes = {"Archery", "Bowling", "Diving"};
  auto list_error = [&](const std::string& text) {
    write_text(dir / "list.txt", text);
    try {
      read_ucf101_list(dir / "list.txt", classes);
    } catch (const liere::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string file = dir / "list.txt";
  CHECK_THAT(list_error("Archery/a.avi 1\r\nBowling/b.avi 4\r\n"),
             Contains(file + ":2: label '4' is not a class number 1 … 3"));
  CHECK_THAT(list_error("Archery/a.avi 1\r\nBowling/b.avi x\r\n"), Contains(file + ":2: label 'x'"));
  // Ten digits: past int's range, still a named error.
  CHECK_THAT(list_error("Archery/a.avi 1\r\nBowling/b.avi 9999999999\r\n"),
             Contains(file + ":2: label '9999999999' is not a class number 1 … 3"));
  CHECK_THAT(list_error("Archery/a.avi 1\r\n\r\nBowling/b.avi 3\r\n"),
             Contains(file + ":3: label 3 is class 'Diving' but the clip is in folder 'Bowling'"));
  CHECK_THAT(list_error("Archery/a.avi 1\nBowling/b.avi\n"),
             Contains(file + ":2: expected a path and a label, as on the first line"));
  CHECK_THAT(list_error("Archery/a.avi\nBowling/b.avi 2\n"), Contains(file + ":2: expected a path only"));
  CHECK_THAT(list_error("Surfing/s.avi\n"), Contains(file + ":1: folder 'Surfing' is not a class"));
  CHECK_THAT(list_error("a.avi\n"), Contains(file + ":1: expected a path '<Class>/<file>'"));
  CHECK_THAT(list_error("Archery/\n"), Contains(file + ":1: expected a path '<Class>/<file>'"));
  CHECK_THAT(list_error("/a.avi\n"), Contains(file + ":1: expected a path '<Class>/<file>'"));
  CHECK_THAT(list_error("Archery/a.avi 1 extra\n"), Contains(file + ":1: expected '<Class>/<file>.avi <k>'"));
  CHECK_THAT(list_error("Archery/a.avi\nDiving/d.avi\nArchery/a.avi\n"),
             Contains(file + ":3: 'Archery/a.avi' is already listed at line 1"));
  CHECK_THAT(list_error("\r\n\r\n"), Contains("lists no clips"));
  CHECK_THROWS_WITH(read_ucf101_list(dir / "absent.txt", classes), Contains("absent.txt") && Contains("no such file"));

  auto class_error = [&](const std::string& text) {
    write_text(dir / "classInd.txt", text);
    try {
      read_ucf101_classes(dir / "classInd.txt");
    } catch (const liere::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ci = dir / "classInd.txt";
  CHECK_THAT(class_error("1 A\r\n3 B\r\n"), Contains(ci + ":2: class index 3, expected 2"));
  CHECK_THAT(class_error("1 A\r\n2 A\r\n"), Contains(ci + ":2: class 'A' is already defined at line 1"));
  CHECK_THAT(class_error("1 A\r\nB\r\n"), Contains(ci + ":2: expected '<k> <ClassName>' (2 here)"));
  CHECK_THAT(class_error(""), Contains("holds no classes"));
  CHECK(class_error("\xEF\xBB\xBF" "1 A\r\n2 B") == "no error");  // a byte-order mark and no final newline
}

// ==== the data set ===============================================================================================

TEST_CASE("UCF101: the real sample clip through the data set; missing clips are errors or reported skips",
          "[ucf101]") {
  Ucf101Options o;
  o.train = false;
  o.clip.size = 32;
  // testlist01 names 3783 clips; the sample holds one.
  CHECK_THROWS_WITH(Ucf101(kRoot, o), Contains("testlist01.txt") && Contains("names 3782 clip(s) that are missing") &&
                                          Contains("v_ApplyEyeMakeup_g01_c02.avi") && Contains("skip_bad_clips"));

  std::ostringstream log;
  o.skip_bad_clips = true;
  o.log = &log;
  const Ucf101 set(kRoot, o);
  REQUIRE(set.size() == 1);
  CHECK(set.num_classes() == 101);
  CHECK(set.entry(0).path == kClipRel);
  CHECK(set.layout().videos_dir == kRoot + "/UCF-101");
  CHECK(set.skipped().size() == 3782);
  CHECK_THAT(log.str(), Contains("v_ApplyEyeMakeup_g01_c02.avi': no such file") &&
                            Contains("(3782 clips skipped so far)"));
  const ClipDims d = set.clip_dims();
  CHECK((d.channels == 3 && d.frames == 16 && d.height == 32 && d.width == 32));
  Bytes clip(set.clip_bytes());
  CHECK(set.load(0, clip.data()) == 0);
  // The default sampling: 16 frames every 4th, centred (frames 51 … 111 of 164).
  ClipOptions same = o.clip;
  CHECK(read_clip(set.clip_path(0), same).pixels == clip);
  CHECK(o.clip.sampling.offset == kCenterOffset);

  // No clip of trainlist01 is in the sample (its group 1 is a test group).
  o.train = true;
  CHECK_THROWS_WITH(Ucf101(kRoot, o), Contains("none of the 9537 clips"));
  // The class folders directly as root, with the lists given.
  Ucf101Options direct = o;
  direct.train = false;
  direct.lists_dir = kLists;
  std::ostringstream quiet;
  direct.log = &quiet;
  CHECK(Ucf101(kRoot + "/UCF-101", direct).size() == 1);
  direct.lists_dir.clear();  // found beside the class folders: root/../ucfTrainTestlist
  CHECK(Ucf101(kRoot + "/UCF-101", direct).layout().lists_dir == kRoot + "/ucfTrainTestlist");
  CHECK(Ucf101(kRoot + "/UCF-101/", direct).layout().lists_dir == kRoot + "/ucfTrainTestlist");
  TempDir empty;
  CHECK_THROWS_WITH(Ucf101(empty.path.string(), small_options()),
                    Contains("found no classInd.txt") && Contains(empty.path.string()));
}

TEST_CASE("UCF101: a small written data set gives exact labels and its clips", "[ucf101]") {
  TempDir dir;
  write_tiny_set(dir.path, 3, 2);
  for (bool train : {true, false}) {
    Ucf101Options o = small_options();
    o.train = train;
    const Ucf101 set(dir.path.string(), o);
    REQUIRE(set.size() == 6);
    CHECK(set.class_names() == std::vector<std::string>{"ClassA", "ClassB", "ClassC"});
    Bytes clip(set.clip_bytes());
    for (int i = 0; i < 6; ++i) {
      const int label = set.load(i, clip.data());
      CHECK(label == i / 2);
      // The solid colour: red 40·(k+1), green 30·n + 20, blue 90 (MJPEG: within 2 grey levels).
      const std::size_t channel = clip.size() / 3;
      CHECK(std::abs(int(clip[0]) - 40 * (label + 1)) <= 2);
      CHECK(std::abs(int(clip[channel]) - (30 * (i % 2) + 20)) <= 2);
      CHECK(std::abs(int(clip[2 * channel + channel - 1]) - 90) <= 2);
    }
    std::vector<int> idx = {5, 0, 3}, labels(3);
    Bytes batch(3 * set.clip_bytes());
    set.load_batch(idx.data(), 3, batch.data(), labels.data());
    CHECK(labels == std::vector<int>{2, 0, 1});
    Bytes one(set.clip_bytes());
    set.load(3, one.data());
    CHECK(std::equal(one.begin(), one.end(), batch.begin() + std::ptrdiff_t(2 * set.clip_bytes())));
  }
  CHECK_THROWS_WITH(Ucf101(dir.path.string(), [] {
                      auto o = small_options();
                      o.split = 2;
                      return o;
                    }()),
                    Contains("trainlist02.txt") && Contains("no such file"));
}

TEST_CASE("UCF101: clips that fail to decode are errors, or reported and skipped", "[ucf101][errors]") {
  TempDir dir;
  write_tiny_set(dir.path, 3, 1);
  const std::string bad = (dir.path / "UCF-101/ClassB/v_ClassB_g01_c01.avi").string();
  write_file(bad, Bytes{'n', 'o', 't', ' ', 'a', ' ', 'v', 'i', 'd', 'e', 'o'});

  const Ucf101 strict(dir.path.string(), small_options());
  Bytes clip(strict.clip_bytes());
  CHECK(strict.load(0, clip.data()) == 0);
  CHECK_THROWS_WITH(strict.load(1, clip.data()), Contains("v_ClassB_g01_c01.avi") && Contains("not a video file"));

  std::ostringstream log;
  Ucf101Options o = small_options();
  o.skip_bad_clips = true;
  o.log = &log;
  const Ucf101 lenient(dir.path.string(), o);
  CHECK(lenient.load(1, clip.data()) == 2);  // the next good clip
  CHECK(lenient.load(1, clip.data()) == 2);  // reported once
  CHECK(lenient.load(2, clip.data()) == 2);
  CHECK(lenient.failed(1));
  CHECK(!lenient.failed(0));
  CHECK(!lenient.failed(2));
  REQUIRE(lenient.skipped().size() == 1);
  CHECK_THAT(lenient.skipped()[0], Contains("v_ClassB_g01_c01.avi") && Contains("not a video file"));
  CHECK_THAT(log.str(), Contains("UCF101: skipping '" + bad + "'") && Contains("(1 clip skipped so far)"));

  // Too short for the sampling: an error naming the clip, the frames found and wanted.
  Ucf101Options longer = small_options(6);
  const Ucf101 too_long(dir.path.string(), longer);
  CHECK_THROWS_WITH(too_long.load(0, Bytes(too_long.clip_bytes()).data()),
                    Contains("v_ClassA_g01_c01.avi") && Contains("has 4 frames, 6 wanted"));
  longer.clip.clamp_short = true;
  CHECK(Ucf101(dir.path.string(), longer).load(0, Bytes(too_long.clip_bytes()).data()) == 0);
}

// Each was reported as missing before: a clip folder as "no such file", a lists folder that does not exist as "no
// classInd.txt in the lists folder".
TEST_CASE("UCF101: a clip or a list that is a folder, and a lists folder that does not exist, are named as such",
          "[ucf101][errors]") {
  TempDir dir;
  write_tiny_set(dir.path, 3, 1);
  const std::string clip = (dir.path / "UCF-101/ClassB/v_ClassB_g01_c01.avi").string();
  fs::remove(clip);
  fs::create_directory(clip);
  CHECK_THROWS_WITH(Ucf101(dir.path.string(), small_options()),
                    Contains("names 1 clip(s) that are missing or not files, the first '" + clip +
                             "' (is a directory; skip_bad_clips"));
  std::ostringstream log;
  Ucf101Options o = small_options();
  o.skip_bad_clips = true;
  o.log = &log;
  CHECK(Ucf101(dir.path.string(), o).size() == 2);
  CHECK_THAT(log.str(), Contains("UCF101: skipping '" + clip + "': is a directory (1 clip skipped so far)"));

  const std::string nope = (dir.path / "nope").string();
  CHECK_THROWS_WITH(find_ucf101_layout(dir.path.string(), nope),
                    Contains("UCF101: the lists folder '" + nope + "' does not exist"));
  const std::string list = (dir.path / "ucfTrainTestlist/trainlist01.txt").string();
  CHECK_THROWS_WITH(find_ucf101_layout(dir.path.string(), list),
                    Contains("UCF101: the lists folder '" + list + "' is not a folder"));
  const fs::path lists = dir.path / "lists";
  fs::create_directories(lists / "classInd.txt");
  o.lists_dir = lists.string();
  CHECK_THROWS_WITH(Ucf101(dir.path.string(), o),
                    Contains("cannot open '" + (lists / "classInd.txt").string() + "': is a directory"));
}

// ==== the clip cache =============================================================================================

TEST_CASE("UCF101 cache: the second read hits and gives the same bytes; damaged files are re-decoded",
          "[ucf101][cache]") {
  TempDir dir;
  // A one-clip data set around a copy of the real clip (its time stamp is changed below).
  fs::create_directories(dir.path / "data/UCF-101/ApplyEyeMakeup");
  fs::copy_file(kRoot + "/UCF-101/" + kClipRel, dir.path / "data/UCF-101" / kClipRel);
  write_text(dir / "data/ucfTrainTestlist/classInd.txt", "1 ApplyEyeMakeup\r\n");
  write_text(dir / "data/ucfTrainTestlist/testlist01.txt", kClipRel + "\r\n");
  std::ostringstream log;
  Ucf101Options o;
  o.train = false;
  o.clip.sampling = {SampleMode::Stride, 8, 4, 0};
  o.clip.size = 32;
  o.cache_dir = dir / "cache";
  o.log = &log;

  const Ucf101 set(dir / "data", o);
  const std::string source = set.clip_path(0);
  const std::string cache_file = ClipCache(o.cache_dir).file_for(clip_cache_key(source, o.clip));
  Bytes first(set.clip_bytes()), again(set.clip_bytes());
  set.load(0, first.data());
  CHECK(set.cache_stats().misses == 1);
  CHECK(set.cache_stats().writes == 1);
  REQUIRE(fs::exists(cache_file));
  CHECK(fs::file_size(cache_file) == 56 + clip_cache_key(source, o.clip).size() + first.size() + 4);
  set.load(0, again.data());
  CHECK(set.cache_stats().hits == 1);
  CHECK(again == first);
  CHECK(first == read_clip(source, o.clip).pixels);

  auto reload_after = [&](const char* what, auto damage) {
    INFO(what);
    damage();
    const auto before = set.cache_stats();
    std::fill(again.begin(), again.end(), 0);
    set.load(0, again.data());
    const auto after = set.cache_stats();
    CHECK(after.rejected == before.rejected + 1);
    CHECK(after.writes == before.writes + 1);
    CHECK(again == first);
    set.load(0, again.data());  // rewritten: a hit again
    CHECK(set.cache_stats().hits == after.hits + 1);
  };
  reload_after("one payload byte flipped", [&] {
    Bytes b = read_all(cache_file);
    b[b.size() - 100] ^= 0x40;
    write_file(cache_file, b);
  });
  CHECK_THAT(log.str(), Contains(cache_file) && Contains("checksum mismatch") && Contains("decoding '" + source));
  reload_after("truncated", [&] {
    Bytes b = read_all(cache_file);
    b.resize(b.size() / 2);
    write_file(cache_file, b);
  });
  CHECK_THAT(log.str(), Contains("truncated in the pixels"));
  reload_after("bytes after the checksum", [&] {
    Bytes b = read_all(cache_file);
    b.push_back(0);
    write_file(cache_file, b);
  });
  CHECK_THAT(log.str(), Contains("longer than its header says"));
  reload_after("not a cache file", [&] { write_file(cache_file, Bytes(200, 7)); });
  CHECK_THAT(log.str(), Contains("wrong magic"));
  reload_after("the source changed", [&] {
    fs::last_write_time(source, fs::last_write_time(source) + std::chrono::hours(1));
  });
  CHECK_THAT(log.str(), Contains("its source has changed"));

  // Other options, another file: the 32×32 clip is never served for 16×16.
  Ucf101Options o16 = o;
  o16.clip.size = 16;
  CHECK(clip_cache_key(source, o16.clip) != clip_cache_key(source, o.clip));
  const Ucf101 set16(dir / "data", o16);
  Bytes small(set16.clip_bytes());
  set16.load(0, small.data());
  CHECK(set16.cache_stats().misses == 1);
  CHECK(set16.cache_stats().rejected == 0);

  // The cache on its own: a file read with other dimensions is rejected, not reinterpreted.
  ClipCache cache(dir / "cache2", &log);
  const ClipDims dims{3, 8, 32, 32}, other{3, 4, 64, 32};
  cache.write("key", source, dims, first.data());
  Bytes out(first.size());
  CHECK(cache.read("key", source, dims, out.data()));
  CHECK(out == first);
  CHECK_FALSE(cache.read("key", source, other, out.data()));
  CHECK_FALSE(cache.read("another key", source, dims, out.data()));
  CHECK(cache.stats().hits == 1);
  CHECK(cache.stats().rejected == 1);  // "another key" has another file name: a plain miss
  CHECK(cache.stats().misses == 2);
  int temps = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "cache"))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) ++temps;
  CHECK(temps == 0);
}

// ==== the passing task ===========================================================================================

TEST_CASE("passing task: distractors' path centres are spread over the frame, half of them static", "[passing]") {
  // moving_objects.hpp: "the centre of its path uniform in [0, 1]² · S, static with probability ½".
  PassingTaskConfig cfg;
  cfg.distractors = 4;
  const double S = cfg.size, T1 = cfg.frames - 1;
  int still = 0, total = 0, outside = 0;
  double sum_x = 0, sum_y = 0;
  for (std::uint64_t i = 0; i < 1000; ++i)
    for (const PassingObject& d : make_passing_scene(cfg, i).distractors) {
      const double cx = d.x(T1 / 2), cy = d.y(T1 / 2);  // the middle of its path
      outside += !(cx >= 0 && cx <= S && cy >= 0 && cy <= S);
      sum_x += cx;
      sum_y += cy;
      still += d.vx == 0 && d.vy == 0;
      ++total;
    }
  CHECK(outside == 0);
  // 4000 draws: the mean of a uniform [0, S] has standard deviation S / sqrt(12 · 4000) ≈ 0.0046 S, a Bernoulli(½)
  // fraction 0.0079; the bounds are 6 standard deviations.
  CHECK(std::abs(sum_x / total / S - 0.5) < 0.03);
  CHECK(std::abs(sum_y / total / S - 0.5) < 0.03);
  CHECK(std::abs(double(still) / total - 0.5) < 0.05);
}

TEST_CASE("passing task: balanced labels, deterministic per seed, batches equal single clips", "[passing]") {
  PassingTaskConfig cfg;  // 8 frames of 32×32, 4 classes, 2 distractors
  const std::size_t bytes = std::size_t(3) * cfg.frames * cfg.size * cfg.size;
  std::vector<int> count(4, 0);
  for (std::uint64_t i = 0; i < 400; ++i) ++count[std::size_t(make_passing_scene(cfg, i).label)];
  CHECK(count == std::vector<int>{100, 100, 100, 100});
  CHECK(passing_class_names(4) ==
        std::vector<std::string>{"RedLeftGreenLeft", "RedLeftGreenRight", "RedRightGreenLeft", "RedRightGreenRight"});
  CHECK(passing_class_names(2) == std::vector<std::string>{"RedLeft", "RedRight"});
  CHECK(passing_class_names(8).back() == "RedRightGreenRightBlueRight");

  Bytes a(bytes), b(bytes), c(bytes);
  CHECK(make_passing_clip(cfg, 17, a.data()) == 1);
  make_passing_clip(cfg, 17, b.data());
  CHECK(a == b);
  PassingTaskConfig other = cfg;
  other.seed = 1;
  make_passing_clip(other, 17, c.data());
  CHECK(a != c);

  Bytes batch(10 * bytes);
  std::vector<int> labels(10);
  make_passing_batch(cfg, 13, 10, batch.data(), labels.data());
  for (int k = 0; k < 10; ++k) {
    CHECK(labels[std::size_t(k)] == (13 + k) % 4);
    make_passing_clip(cfg, 13 + std::uint64_t(k), b.data());
    CHECK(std::equal(b.begin(), b.end(), batch.begin() + std::ptrdiff_t(std::size_t(k) * bytes)));
  }
  // Every object of the task is drawn: white, red and green are all present in frame 0 of clip 17.
  const std::size_t channel = bytes / 3;
  bool white = false, red = false, green = false;
  for (std::size_t p = 0; p < std::size_t(cfg.size * cfg.size); ++p) {
    const int r = a[p], g = a[channel + p], bl = a[2 * channel + p];
    white = white || std::min({r, g, bl}) == 255;
    red = red || (r == 255 && g == 0);
    green = green || (g == 255 && r == 0 && bl == 0);
  }
  CHECK((white && red && green));

  CHECK_THROWS_WITH(make_passing_scene({8, 32, 3, 0, 0, 0}, 0), Contains("num_classes must be 2, 4 or 8"));
  CHECK_THROWS_WITH(make_passing_scene({1, 32, 4, 0, 0, 0}, 0), Contains("frames must be 2 … 1024"));
  CHECK_THROWS_WITH(make_passing_scene({8, 8, 4, 0, 0, 0}, 0), Contains("size must be 16 … 1024"));
  CHECK_THROWS_WITH(make_passing_scene({8, 32, 4, 99, 0, 0}, 0), Contains("distractors must be 0 … 16"));
}

TEST_CASE("passing task: the label is a relation in space and time (translation, rotation, time reversal, mirror)",
          "[passing]") {
  for (int C : {2, 4, 8}) {
    PassingTaskConfig cfg;
    cfg.num_classes = C;
    const int T = cfg.frames;
    const double S = cfg.size;
    for (std::uint64_t i = 0; i < 300; ++i) {
      const PassingScene s = make_passing_scene(cfg, i);
      INFO("C " << C << " sample " << i);
      REQUIRE(passing_label(s) == s.label);
      const auto shift = transformed(s, [](PassingObject& o) {
        o.x0 += 5.25;
        o.y0 -= 3.5;
      });
      CHECK(passing_label(shift) == s.label);
      const auto rotate = transformed(s, [&](PassingObject& o) {  // 90° on screen
        const double x = o.x0, vx = o.vx;
        o.x0 = S - o.y0;
        o.y0 = x;
        o.vx = -o.vy;
        o.vy = vx;
      });
      CHECK(passing_label(rotate) == s.label);
      const auto backwards = transformed(s, [&](PassingObject& o) {
        o.x0 = o.x(T - 1);
        o.y0 = o.y(T - 1);
        o.vx = -o.vx;
        o.vy = -o.vy;
      });
      CHECK(passing_label(backwards) == C - 1 - s.label);
      const auto mirror = transformed(s, [&](PassingObject& o) {
        o.x0 = S - o.x0;
        o.vx = -o.vx;
      });
      CHECK(passing_label(mirror) == C - 1 - s.label);
    }
  }

  // The same from the pixels: an oracle that finds the objects by colour reads the label off the clip, the label
  // of the frames played backwards is C − 1 − label, and a translated scene keeps it.
  PassingTaskConfig cfg;
  const int T = cfg.frames, S = cfg.size;
  Bytes clip(std::size_t(3) * T * S * S), moved(clip.size());
  int agree = 0, agree_reversed = 0, agree_moved = 0, n = 200;
  for (int i = 0; i < n; ++i) {
    const PassingScene s = make_passing_scene(cfg, std::uint64_t(i));
    render_passing_scene(cfg, s, clip.data());
    agree += oracle_label(clip.data(), T, S, 2) == s.label;
    agree_reversed += oracle_label(reversed_frames(clip, T, S).data(), T, S, 2) == 3 - s.label;
    const int dx = (i % 5) - 2, dy = (i % 3) - 1;
    render_passing_scene(cfg, transformed(s, [&](PassingObject& o) {
                           o.x0 += dx;
                           o.y0 += dy;
                         }),
                         moved.data());
    agree_moved += oracle_label(moved.data(), T, S, 2) == s.label;
  }
  // The oracle is not perfect (a mover leaving the frame or hidden under another object), but nearly.
  CHECK(agree >= n * 97 / 100);
  CHECK(agree_reversed >= n * 97 / 100);
  CHECK(agree_moved >= n * 97 / 100);
}

TEST_CASE("passing task: a single frame carries no label (the relative vector is isotropic in every class)",
          "[passing]") {
  // For each class, frame 0 and frame T−1: the mean distance of the red mover from the anchor and the mean of its
  // direction's unit vector. Same distribution in every class: distances agree to sampling noise (SE ≈ 0.05 px),
  // the mean unit vector is 0 (SE ≈ 0.02). The last frame, with the first, gives the label away (previous test).
  PassingTaskConfig cfg;
  const int T = cfg.frames, N = 4000;
  double dist[4][2] = {}, ux[4][2] = {}, uy[4][2] = {};
  int count[4] = {};
  for (int i = 0; i < N; ++i) {
    const PassingScene s = make_passing_scene(cfg, std::uint64_t(i));
    ++count[s.label];
    for (int f = 0; f < 2; ++f) {
      const double t = f ? T - 1 : 0;
      const double dx = s.movers[0].x(t) - s.anchor.x0, dy = s.movers[0].y(t) - s.anchor.y0;
      const double r = std::hypot(dx, dy);
      dist[s.label][f] += r;
      ux[s.label][f] += dx / r;
      uy[s.label][f] += dy / r;
    }
  }
  for (int f = 0; f < 2; ++f) {
    double all = 0;
    for (int c = 0; c < 4; ++c) all += dist[c][f];
    all /= N;
    for (int c = 0; c < 4; ++c) {
      INFO("class " << c << " frame " << (f ? T - 1 : 0));
      CHECK(dist[c][f] / count[c] == Approx(all).margin(0.25));
      CHECK(std::abs(ux[c][f] / count[c]) < 0.1);
      CHECK(std::abs(uy[c][f] / count[c]) < 0.1);
    }
  }
}

TEST_CASE("passing task: written in the UCF101 layout and read back through the UCF101 reader", "[passing][ucf101]") {
  TempDir dir;
  PassingTaskConfig cfg;  // 8 × 32 × 32, 4 classes, 2 distractors
  REQUIRE(write_passing_ucf101(cfg, dir.path.string(), 8, 4) == 12);
  CHECK(fs::exists(dir.path / "passing_task.txt"));
  CHECK(fs::exists(dir.path / "UCF-101/RedRightGreenLeft/v_RedRightGreenLeft_i000002.avi"));
  const Bytes class_ind = read_all(dir / "ucfTrainTestlist/classInd.txt");
  CHECK(std::string(class_ind.begin(), class_ind.end()) ==
        "1 RedLeftGreenLeft\r\n2 RedLeftGreenRight\r\n3 RedRightGreenLeft\r\n4 RedRightGreenRight\r\n");

  const std::size_t bytes = std::size_t(3) * cfg.frames * cfg.size * cfg.size;
  for (bool train : {true, false}) {
    Ucf101Options o = small_options(cfg.frames, cfg.size);
    o.train = train;
    const Ucf101 set(dir.path.string(), o);
    REQUIRE(set.size() == (train ? 8 : 4));
    CHECK(set.num_classes() == 4);
    Bytes decoded(set.clip_bytes()), made(bytes);
    REQUIRE(set.clip_bytes() == bytes);
    for (int i = 0; i < set.size(); ++i) {
      const int index = train ? i : 8 + i;
      INFO("sample " << index);
      const int label = set.load(i, decoded.data());
      CHECK(label == make_passing_clip(cfg, std::uint64_t(index), made.data()));
      CHECK(label == index % 4);
      CHECK(mean_abs_diff(decoded, made) < 1.0);  // MJPEG 4:4:4 at quantiser 2
    }
  }

  // MPEG-4 works too (4:2:0 blurs the colours of 3-pixel squares, so only the labels are exact).
  TempDir dir2;
  PassingTaskConfig cfg2 = cfg;
  cfg2.num_classes = 2;
  cfg2.seed = 5;
  write_passing_ucf101(cfg2, dir2.path.string(), 4, 2, {VideoCodec::Mpeg4, 25, 2});
  const Ucf101 set2(dir2.path.string(), small_options(cfg2.frames, cfg2.size));
  Bytes clip(set2.clip_bytes()), made(clip.size());
  for (int i = 0; i < 4; ++i) {
    CHECK(set2.load(i, clip.data()) == i % 2);
    make_passing_clip(cfg2, std::uint64_t(i), made.data());
    CHECK(mean_abs_diff(clip, made) < 4.0);
  }
}

// ---- speed (hidden: not run by ctest; run `test_ucf101 "[.bench]"` to print the numbers) ------------------------

TEST_CASE("UCF101 cache and passing task speed on one core", "[.bench]") {
  // Clips per second: the median and the fastest of the timed calls (see test_video.cpp).
  auto time_calls = [](int n, auto f) {
    f();
    std::vector<double> s;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(s.begin(), s.end());
    return std::pair<double, double>{1 / s[s.size() / 2], 1 / s.front()};
  };
  TempDir dir;
  const std::string source = kRoot + "/UCF-101/" + kClipRel;
  ClipCache cache(dir / "cache");
  std::printf("  %-62s %14s %14s\n", "", "median clip/s", "best clip/s");
  for (int S : {112, 32}) {
    ClipOptions o;
    o.sampling = {SampleMode::Stride, 16, 4, 0};
    o.size = S;
    const Clip clip = read_clip(source, o);
    const ClipDims dims{3, 16, S, S};
    const std::string key = clip_cache_key(source, o);
    cache.write(key, source, dims, clip.pixels.data());
    Bytes out(clip.pixels.size());
    const auto [rm, rb] = time_calls(300, [&] { REQUIRE(cache.read(key, source, dims, out.data())); });
    const std::string what = "cache read, 16x" + std::to_string(S) + "x" + std::to_string(S) + " (" +
                             std::to_string(out.size()) + " bytes, page-cached)";
    std::printf("  %-62s %14.1f %14.1f\n", what.c_str(), rm, rb);
    int k = 0;
    const auto [wm, wb] = time_calls(100, [&] { cache.write(key + std::to_string(k++), source, dims, clip.pixels.data()); });
    std::printf("  %-62s %14.1f %14.1f\n", ("cache write, 16x" + std::to_string(S) + "x" + std::to_string(S)).c_str(), wm,
                wb);
  }
  PassingTaskConfig cfg;
  Bytes clip(std::size_t(3) * cfg.frames * cfg.size * cfg.size);
  std::uint64_t i = 0;
  const auto [gm, gb] = time_calls(2000, [&] { make_passing_clip(cfg, i++, clip.data()); });
  std::printf("  %-62s %14.1f %14.1f\n", "passing task in memory, 8x32x32, 4 classes, 2 distractors", gm, gb);
  write_passing_ucf101(cfg, dir / "task", 200, 4);
  const Ucf101 set(dir / "task", small_options(cfg.frames, cfg.size));
  int j = 0;
  const auto [dm, db] = time_calls(199, [&] { set.load(j++ % set.size(), clip.data()); });
  std::printf("  %-62s %14.1f %14.1f\n", "passing task from its MJPEG files through Ucf101, 8x32x32", dm, db);
}
