// tests/test_io.cpp — liere/io/: the JSON writer and reader (escapes of every control character, unicode and
// surrogate pairs, numbers in shortest round-trip form, NaN as null, strictness, errors naming line:column),
// the atomic file write (the old file survives a failure and no .tmp remains) and safetensors round trips.
#include <liere/io/atomic_file.hpp>
#include <liere/io/json.hpp>
#include <liere/io/safetensors.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
namespace json = liere::io::json;
using Catch::Contains;

namespace {

using liere::test::read_bytes;

struct TempDir : liere::test::TempDir {
  TempDir() : liere::test::TempDir("liere_test_io") {}
};

// The error text of parsing `text`, or "no error".
std::string parse_error(const std::string& text, json::ParseOptions opt = {}) {
  try {
    json::parse(text, opt);
  } catch (const json::ParseError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

// ==== writing ==============================================================================================

TEST_CASE("json: every control character is escaped, other bytes are written as they are", "[io][json]") {
  CHECK(json::quote("") == "\"\"");
  CHECK(json::quote("a\"b\\c/") == "\"a\\\"b\\\\c/\"");
  CHECK(json::quote("\b\f\n\r\t") == "\"\\b\\f\\n\\r\\t\"");
  CHECK(json::quote(std::string(1, '\0')) == "\"\\u0000\"");
  CHECK(json::quote("\x01\x1f\x7f") == "\"\\u0001\\u001f\x7f\"");  // DEL is not a control character in JSON
  CHECK(json::quote("caf\xC3\xA9 \xF0\x9F\x98\x80") == "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  for (int c = 0; c < 0x20; ++c) {
    INFO("byte " << c);
    const std::string q = json::quote(std::string(1, char(c)));
    for (char ch : q) CHECK(static_cast<unsigned char>(ch) >= 0x20);  // no raw control byte left
    CHECK(json::parse(q).text == std::string(1, char(c)));
  }
  // All 128 ASCII bytes and some UTF-8 round-trip through the writer and the reader.
  std::string all;
  for (int c = 0; c < 128; ++c) all += char(c);
  all += "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  CHECK(json::parse(json::quote(all)).text == all);
}

TEST_CASE("json: numbers — integers exactly, floating point shortest, NaN and Inf as null", "[io][json]") {
  CHECK(json::number(0) == "0");
  CHECK(json::number(-7) == "-7");
  CHECK(json::number(std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
  CHECK(json::number(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");
  CHECK(json::number(9007199254740993LL) == "9007199254740993");  // 2^53 + 1: not via double
  CHECK(json::number(0.1) == "0.1");
  CHECK(json::number(1e-5) == "1e-05");
  CHECK(json::number(3.0) == "3");
  CHECK(json::number(-0.0) == "-0");
  CHECK(json::number(1.0 / 3) == "0.3333333333333333");
  CHECK(json::number(0.1f) == "0.1");          // the shortest float, not 0.10000000149011612
  CHECK(json::number(double(0.1f)) == "0.10000000149011612");
  CHECK(json::number(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(json::number(std::numeric_limits<double>::infinity()) == "null");
  CHECK(json::number(-std::numeric_limits<float>::infinity()) == "null");
  // Shortest form round-trips bit for bit.
  std::mt19937_64 g(1);
  for (int i = 0; i < 2000; ++i) {
    double x = std::bit_cast<double>(g());
    if (!std::isfinite(x)) continue;
    const json::Value v = json::parse(json::number(x));
    REQUIRE(v.is_number());
    CHECK(std::bit_cast<std::uint64_t>(v.number) == std::bit_cast<std::uint64_t>(x));
  }
  for (double x : {5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789.125, -1e22})
    CHECK(json::parse(json::number(x)).number == x);
}

TEST_CASE("json: Writer, compact and pretty", "[io][json]") {
  auto doc = [](json::Writer& w) {
    w.begin_object()
        .member("epoch", 1)
        .member("loss", 0.5)
        .member("pe", "liere")
        .member("ok", true)
        .member("nan", std::numeric_limits<double>::quiet_NaN());
    w.key("none").null();
    w.member("ci", std::vector<double>{0.25, 0.75});
    w.key("nested").begin_object().member("a", std::vector<int>{}).end_object();
    w.key("rows").begin_array();
    w.begin_object().member("x", 1).end_object();
    w.value("s");
    w.end_array();
    w.key("empty").begin_object().end_object();
    w.end_object();
  };
  json::Writer compact;
  doc(compact);
  CHECK(compact.complete());
  CHECK(compact.take() ==
        "{\"epoch\":1,\"loss\":0.5,\"pe\":\"liere\",\"ok\":true,\"nan\":null,\"none\":null,\"ci\":[0.25,0.75],"
        "\"nested\":{\"a\":[]},\"rows\":[{\"x\":1},\"s\"],\"empty\":{}}");
  json::Writer pretty(json::Style::pretty);
  doc(pretty);
  CHECK(pretty.take() ==
        "{\n"
        "  \"epoch\": 1,\n"
        "  \"loss\": 0.5,\n"
        "  \"pe\": \"liere\",\n"
        "  \"ok\": true,\n"
        "  \"nan\": null,\n"
        "  \"none\": null,\n"
        "  \"ci\": [0.25,0.75],\n"
        "  \"nested\": {\n"
        "    \"a\": []\n"
        "  },\n"
        "  \"rows\": [{\"x\":1},\"s\"],\n"
        "  \"empty\": {}\n"
        "}");
  json::Writer scalar;
  scalar.value(42);
  CHECK(scalar.take() == "42");
}

TEST_CASE("json: Writer misuse is an error", "[io][json]") {
  json::Writer a;
  a.begin_object();
  CHECK_THROWS_WITH(a.value(1), Contains("needs a key"));
  json::Writer b;
  CHECK_THROWS_WITH(b.key("k"), Contains("outside an object"));
  json::Writer c;
  c.begin_array();
  CHECK_THROWS_WITH(c.end_object(), Contains("does not close"));
  CHECK_THROWS_WITH(c.take(), Contains("not complete"));
  json::Writer d;
  d.value(1);
  CHECK_THROWS_WITH(d.value(2), Contains("second value"));
  json::Writer e;
  e.begin_object().key("k");
  CHECK_THROWS_WITH(e.end_object(), Contains("a key has no value"));
}

// ==== reading ==============================================================================================

TEST_CASE("json: parse builds a tree, keeps member order and number literals", "[io][json]") {
  const json::Value v = json::parse(
      " {\"b\": [1, -2.5e3, true, false, null, \"x\"],\n  \"a\": {\"big\": 18446744073709551615, \"neg\": -9223372036854775808}} ");
  REQUIRE(v.is_object());
  REQUIRE(v.members.size() == 2);
  CHECK(v.members[0].first == "b");
  CHECK(v.members[1].first == "a");
  const json::Value& b = *v.find("b");
  REQUIRE(b.items.size() == 6);
  CHECK(b.items[0].number == 1);
  CHECK(b.items[1].number == -2500);
  CHECK(b.items[1].text == "-2.5e3");
  CHECK(b.items[2].boolean);
  CHECK(b.items[3].is_bool());
  CHECK(!b.items[3].boolean);
  CHECK(b.items[4].is_null());
  CHECK(b.items[5].text == "x");
  CHECK(std::string(b.items[5].type_name()) == "string");
  std::uint64_t u = 0;
  std::int64_t i = 0;
  CHECK(v.find("a")->find("big")->to_uint64(u));
  CHECK(u == std::numeric_limits<std::uint64_t>::max());
  CHECK(v.find("a")->find("neg")->to_int64(i));
  CHECK(i == std::numeric_limits<std::int64_t>::min());
  CHECK_FALSE(b.items[1].to_int64(i));  // not an integer literal
  CHECK(v.find("missing") == nullptr);
  // Where each value starts.
  CHECK(b.line == 1);
  CHECK(b.column == 8);
  CHECK(v.find("a")->line == 2);
  CHECK(v.find("a")->column == 8);
  // Out of range: ±inf and 0, as other JSON readers.
  CHECK(std::isinf(json::parse("1e999").number));
  CHECK(json::parse("-1e999").number == -std::numeric_limits<double>::infinity());
  CHECK(json::parse("1e-999").number == 0);
}

TEST_CASE("json: unicode escapes and surrogate pairs", "[io][json]") {
  CHECK(json::parse(R"("\u00e9\u20AC\ud83d\ude00\/")").text == "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80/");
  CHECK(json::parse(R"("\u0000")").text == std::string(1, '\0'));
  CHECK(json::parse(R"("\uDBFF\uDFFF")").text == "\xF4\x8F\xBF\xBF");  // U+10FFFF, the last code point
  CHECK(parse_error(R"("\ud83d")") == "<string>:1:2: invalid \\u escape: high surrogate without a low one");
  CHECK(parse_error(R"("\ud83d\u0041")") == "<string>:1:2: invalid \\u escape: high surrogate without a low one");
  CHECK(parse_error(R"("ab\ude00")") == "<string>:1:4: invalid \\u escape: lone low surrogate");
  CHECK(parse_error(R"("\u12")") == "<string>:1:6: invalid \\u escape: expected 4 hex digits");
}

TEST_CASE("json: the writer's output reads back as the same tree", "[io][json]") {
  const std::string text =
      R"({"s":"tab\there \"q\" \u0001 caf\u00e9 \ud83d\ude00","n":[0,-1,0.1,1e-05,12345678901234567890,-0],)"
      R"("o":{"t":true,"f":false,"z":null,"e":[],"eo":{}}})";
  const json::Value v = json::parse(text);
  const std::string again = json::write(v);
  CHECK(json::write(json::parse(again)) == again);
  CHECK(json::parse(again).find("s")->text == v.find("s")->text);
  CHECK(json::parse(again).find("n")->items[4].text == "12345678901234567890");  // literal kept
  const std::string pretty = json::write(v, json::Style::pretty);
  CHECK(json::write(json::parse(pretty)) == again);
  // NaN read with allow_nonfinite is written as null.
  json::ParseOptions lax;
  lax.allow_nonfinite = true;
  CHECK(json::write(json::parse("[NaN,Infinity,-inf,1]", lax)) == "[null,null,null,1]");
}

TEST_CASE("json: strict — what RFC 8259 does not allow is refused", "[io][json][errors]") {
  CHECK(parse_error("[1,]") == "<string>:1:4: expected a value (object, array, number, string, true, false or null)");
  CHECK(parse_error("{\"a\":1,}") == "<string>:1:8: expected a string key");
  CHECK(parse_error("{'a':1}") == "<string>:1:2: expected a string key");
  CHECK(parse_error("[01]") == "<string>:1:3: invalid number: leading zeros are not allowed");
  CHECK(parse_error("[.5]") == "<string>:1:2: expected a value (object, array, number, string, true, false or null)");
  CHECK(parse_error("[1.]") == "<string>:1:4: invalid number: expected a digit after '.'");
  CHECK(parse_error("[+1]") == "<string>:1:2: expected a value (object, array, number, string, true, false or null)");
  CHECK(parse_error("[NaN]") == "<string>:1:2: expected a value (object, array, number, string, true, false or null)");
  CHECK(parse_error("[1] // comment") == "<string>:1:5: unexpected text after the JSON value");
  CHECK(parse_error("\"a\tb\"") == "<string>:1:3: control character in string (escape it)");
  CHECK(parse_error("\"a\nb\"") == "<string>:1:3: control character in string (escape it)");
  CHECK(parse_error("{\"a\":1,\"a\":2}") == "<string>:1:8: duplicate key");
  CHECK(parse_error("[1 2]") == "<string>:1:4: expected ',' or ']'");
  CHECK(parse_error("[1") == "<string>:1:3: unexpected end of input: expected ',' or ']'");
  CHECK(parse_error("") == "<string>:1:1: unexpected end of input: expected a value");
  CHECK(parse_error("\"abc") == "<string>:1:1: unterminated string");
  CHECK(parse_error("\"\\x\"") == "<string>:1:2: invalid escape '\\x'");
  CHECK(parse_error("[tru]") == "<string>:1:2: expected a value (object, array, number, string, true, false or null)");
  CHECK(parse_error("[1x]") == "<string>:1:3: invalid number '1x...'");
}

TEST_CASE("json: errors name the source, the line and the column", "[io][json][errors]") {
  json::ParseOptions opt;
  opt.source = "runs/summary.json";
  CHECK(parse_error("{\n  \"a\": 1,\n  \"b\" 2\n}", opt) == "runs/summary.json:3:7: expected ':' after the key");
  CHECK(parse_error("{\r\n\"a\": [1,\r\n    ]}", opt) == "runs/summary.json:3:5: expected a value (object, array, number, string, true, false or null)");
  opt.first_line = 41;  // a piece of a larger file
  CHECK(parse_error("[1,\n2,\nx]", opt) == "runs/summary.json:43:1: expected a value (object, array, number, string, true, false or null)");
  try {
    json::parse("\n\n   }", opt);
    FAIL("no error");
  } catch (const json::ParseError& e) {
    CHECK(e.source() == "runs/summary.json");
    CHECK(e.line() == 43);
    CHECK(e.column() == 4);
    CHECK(e.message() == "expected a value (object, array, number, string, true, false or null)");
    CHECK_NOTHROW(dynamic_cast<const liere::Error&>(e));
  }
}

TEST_CASE("json: nesting depth is limited", "[io][json][errors]") {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  CHECK_NOTHROW(json::parse(ok));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  CHECK(parse_error(deep) == "<string>:1:65: nested too deeply (more than 64 levels)");
  json::ParseOptions opt;
  opt.max_depth = 2;
  CHECK(parse_error("{\"a\":[[1]]}", opt) == "<string>:1:7: nested too deeply (more than 2 levels)");
  // Hundreds of thousands of brackets: an error, not a stack overflow.
  CHECK_THAT(parse_error(std::string(200000, '[')), Contains("nested too deeply"));
}

TEST_CASE("json: a JSON-lines row (jsonl_row) is one flat object", "[io][json]") {
  json::ParseOptions row;
  row.source = "m.jsonl";
  row.first_line = 7;
  row.jsonl_row = true;
  row.allow_nonfinite = true;
  const json::Value v = json::parse(R"({"a":NaN,"b":-Infinity,"c":"x"})", row);
  CHECK(std::isnan(v.find("a")->number));
  CHECK(v.find("b")->number == -std::numeric_limits<double>::infinity());
  CHECK(parse_error(R"({"a":[1]})", row) == "m.jsonl:7:6: nested objects and arrays are not supported (flat objects only)");
  CHECK(parse_error(R"(["a"])", row) == "m.jsonl:7:1: expected '{' to start an object");
  CHECK(parse_error(R"({"a":1)", row) == "m.jsonl:7:7: unexpected end of line: expected ',' or '}'");
  CHECK(parse_error(R"({"a":1} x)", row) == "m.jsonl:7:9: unexpected text after the object");
}

// ==== atomic write =========================================================================================

TEST_CASE("write_file_atomic: replaces the file, leaves no .tmp", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("a.txt");
  liere::io::write_file_atomic(path, "first");
  CHECK(read_bytes(path) == "first");
  liere::io::write_file_atomic(path, "second, longer");
  CHECK(read_bytes(path) == "second, longer");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  // Pieces are written in order; an empty piece and empty content are fine.
  const std::uint32_t n = 0x64636261;  // "abcd" in little-endian
  liere::io::write_file_atomic(path, {{&n, 4}, {nullptr, 0}, {"xyz", 3}});
  CHECK(read_bytes(path) == "abcdxyz");
  liere::io::write_file_atomic(path, "");
  CHECK(read_bytes(path).empty());
  // Without the fsyncs (durable = false: a generated data set's images): the same file, the same temporary name
  // removed, and the same errors (here: its folder is missing).
  liere::io::AtomicWriteOptions fast;
  fast.durable = false;
  fast.what = "fast writer";
  liere::io::write_file_atomic(path, "third", fast);
  CHECK(read_bytes(path) == "third");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK_THROWS_WITH(liere::io::write_file_atomic(dir.file("no/such/folder.txt"), "x", fast),
                    Contains("fast writer: cannot create"));
}

TEST_CASE("write_file_atomic: the old file survives any failure and no .tmp remains", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("keep.txt");
  liere::io::write_file_atomic(path, "old content");

  SECTION("the on_write hook throws in the middle of the write") {
    liere::io::AtomicWriteOptions opt;
    opt.what = "test writer";
    std::size_t calls = 0;
    opt.on_write = [&](std::size_t written, std::size_t total) {
      ++calls;
      CHECK(total == 3 + 1000);
      if (written >= 3 && written < total) throw std::runtime_error("disk full (simulated)");
    };
    const std::string big(1000, 'x');
    CHECK_THROWS_WITH(liere::io::write_file_atomic(path, {{"new", 3}, {big.data(), big.size()}}, opt),
                      Contains("disk full"));
    CHECK(calls == 1);
  }
  SECTION("the temporary file cannot be created") {
    fs::create_directory(path + ".tmp");  // a directory where the .tmp file would go
    liere::io::AtomicWriteOptions opt;
    opt.what = "test writer";
    CHECK_THROWS_WITH(liere::io::write_file_atomic(path, "new", opt),
                      Contains("test writer: cannot create '" + path + ".tmp'"));
    fs::remove(path + ".tmp");
  }
  SECTION("the directory does not exist") {
    const std::string missing = dir.file("no_such_dir/keep.txt");
    CHECK_THROWS_WITH(liere::io::write_file_atomic(missing, "new"),
                      Contains("write_file_atomic: cannot create") && Contains("no_such_dir"));
    CHECK_FALSE(fs::exists(missing + ".tmp"));
  }
  SECTION("the rename fails (the target is a non-empty directory)") {
    const std::string target = dir.file("target");
    fs::create_directories(target + "/inside");
    CHECK_THROWS_WITH(liere::io::write_file_atomic(target, "new"), Contains("cannot rename"));
    CHECK_FALSE(fs::exists(target + ".tmp"));
    CHECK(fs::is_directory(target + "/inside"));
  }
  CHECK(read_bytes(path) == "old content");
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("write_file_atomic with unique_temp: racing writers leave one whole file and no temporary", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("shared.bin");
  // Four threads write the same path, each a different 64 KiB payload of one repeated byte: with one shared
  // "<path>.tmp" they would truncate and interleave each other's bytes; with names of their own the last rename
  // wins and the file is one writer's payload, whole.
  constexpr int kThreads = 4, kRounds = 20;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string payload(1 << 16, char('a' + t));
      for (int r = 0; r < kRounds; ++r) {
        try {
          liere::io::write_file_atomic(path, payload, liere::io::AtomicWriteOptions::unique("racer"));
        } catch (...) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
  const std::string got = read_bytes(path);
  REQUIRE(got.size() == std::size_t(1) << 16);
  CHECK(got.find_first_not_of(got[0]) == std::string::npos);
  CHECK(got[0] >= 'a');
  CHECK(got[0] < char('a' + kThreads));
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) leftovers += e.path().filename() != "shared.bin";
  CHECK(leftovers == 0);
  // Temporary names differ between calls and carry the process id.
  const std::string a = liere::io::unique_temp_path(path), b = liere::io::unique_temp_path(path);
  CHECK(a != b);
  CHECK_THAT(a, Catch::StartsWith(path + ".tmp-" + std::to_string(long(::getpid())) + "-"));
}

TEST_CASE("commit_file_atomic moves a finished file into place, or leaves the old one and no temporary", "[io][atomic]") {
  TempDir dir;
  const std::string path = dir.file("clip.avi");
  liere::io::write_file_atomic(path, "old");
  const std::string temp = liere::io::unique_temp_path(path);
  {
    std::ofstream(temp, std::ios::binary) << "written by another library";
  }
  liere::io::commit_file_atomic(temp, path, "write_video");
  CHECK(read_bytes(path) == "written by another library");
  CHECK_FALSE(fs::exists(temp));

  SECTION("the temporary file is missing") {
    CHECK_THROWS_WITH(liere::io::commit_file_atomic(dir.file("gone.tmp-1-1"), path, "write_video"),
                      Contains("write_video: cannot open") && Contains("gone.tmp-1-1"));
  }
  SECTION("the rename fails (the target is a non-empty directory)") {
    const std::string target = dir.file("target");
    fs::create_directories(target + "/inside");
    const std::string t2 = liere::io::unique_temp_path(target);
    std::ofstream(t2, std::ios::binary) << "x";
    CHECK_THROWS_WITH(liere::io::commit_file_atomic(t2, target, "write_video"),
                      Contains("write_video: cannot rename") && Contains(target));
    CHECK_FALSE(fs::exists(t2));
    CHECK(fs::is_directory(target + "/inside"));
  }
  CHECK(read_bytes(path) == "written by another library");
}

// ==== safetensors ==========================================================================================

TEST_CASE("safetensors: round trip of raw records with metadata", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<double> d = {3.141592653589793};
  const std::vector<std::int64_t> ids = {-1, 0, std::numeric_limits<std::int64_t>::max()};
  const std::vector<liere::io::SafetensorsRecord> records = {
      {"w", "F32", {2, 3}, w.data(), w.size() * sizeof(float)},
      {"pi", "F64", {}, d.data(), sizeof(double)},
      {"ids", "I64", {3}, ids.data(), ids.size() * sizeof(std::int64_t)},
      {"empty", "F32", {0, 4}, nullptr, 0},
      {"na\"me\n", "U8", {1}, "z", 1}};
  const liere::io::Metadata meta = {{"format", "test"}, {"note", "quote \" newline \n tab \t \x01 caf\xC3\xA9"}};
  liere::io::save_safetensors(path, records, meta);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  const liere::io::SafetensorsFile f = liere::io::load_safetensors(path);
  CHECK(f.metadata == meta);
  REQUIRE(f.entries.size() == records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    INFO(r.name);
    const auto* e = f.find(r.name);
    REQUIRE(e);
    CHECK(e->dtype == r.dtype);
    CHECK(e->shape == r.shape);
    REQUIRE(f.bytes(*e).size() == r.bytes);
    if (r.bytes) CHECK(std::memcmp(f.bytes(*e).data(), r.data, r.bytes) == 0);
  }
  CHECK(liere::io::shape_str(f.find("w")->shape) == "(2, 3)");
  CHECK(liere::io::shape_str(f.find("pi")->shape) == "()");
  // The header is strict JSON that the reader accepts and padded to 8 bytes.
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
  CHECK(json::parse(bytes.substr(8, n)).find("__metadata__")->find("note")->text == meta.at("note"));

  // Every header length is padded to a multiple of 8: names of 1 to 8 bytes give 8 different unpadded lengths.
  for (std::size_t len = 1; len <= 8; ++len) {
    const std::string name(len, 'x');
    INFO("name of " << len << " bytes");
    liere::io::save_safetensors(path, {{name, "F32", {1}, w.data(), sizeof(float)}});
    const std::string b = read_bytes(path);
    std::uint64_t h = 0;
    std::memcpy(&h, b.data(), 8);
    CHECK(h % 8 == 0);
    CHECK(b.size() == 8 + h + sizeof(float));
    const std::string header = b.substr(8, h);
    CHECK(header[header.find_last_not_of(' ')] == '}');  // the padding is spaces after the closing brace
    CHECK(liere::io::load_safetensors(path).find(name) != nullptr);
  }
}

TEST_CASE("safetensors: every dtype of the format has its element size", "[io][safetensors]") {
  // The sizes from the safetensors format's Dtype list.
  const std::vector<std::pair<std::string, std::size_t>> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  TempDir dir;
  const std::string path = dir.file("dtypes.safetensors");
  const std::string data(3 * 8, '\x5a');
  std::vector<liere::io::SafetensorsRecord> records;
  for (const auto& [dtype, size] : sizes) {
    INFO(dtype);
    CHECK(liere::io::safetensors_dtype_size(dtype) == size);
    records.push_back({"t_" + dtype, dtype, {3}, data.data(), 3 * size});
  }
  CHECK(liere::io::safetensors_dtype_size("F99") == 0);
  liere::io::save_safetensors(path, records);
  const auto f = liere::io::load_safetensors(path);
  for (const auto& [dtype, size] : sizes) {
    INFO(dtype);
    const auto* e = f.find("t_" + dtype);
    REQUIRE(e);
    CHECK(e->dtype == dtype);
    CHECK(f.bytes(*e).size() == 3 * size);
  }
}

TEST_CASE("safetensors: bad records and files are refused", "[io][safetensors][errors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const float x[2] = {1, 2};
  using R = liere::io::SafetensorsRecord;
  CHECK_THROWS_WITH(liere::io::save_safetensors(path, {R{"a", "F32", {3}, x, 8}}),
                    Contains("'a' has 8 bytes for dtype F32 and shape (3)"));
  CHECK_THROWS_WITH(liere::io::save_safetensors(path, {R{"a", "F99", {2}, x, 8}}), Contains("dtype F99"));
  CHECK_THROWS_WITH(liere::io::save_safetensors(path, {R{"a", "F32", {2}, x, 8}, R{"a", "F32", {2}, x, 8}}),
                    Contains("'a' appears twice"));
  CHECK_THROWS_WITH(liere::io::save_safetensors(path, {R{"__metadata__", "F32", {2}, x, 8}}), Contains("bad tensor name"));
  CHECK_FALSE(fs::exists(path));

  // A header with a duplicate tensor name, or with a syntax error: "bad JSON header" naming line and column.
  auto write_file = [&](std::string header, const std::string& data) {
    while ((8 + header.size()) % 8) header += ' ';
    std::string b(8, '\0');
    const std::uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    std::ofstream(path, std::ios::binary) << b << header << data;
  };
  write_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             std::string(8, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path), Contains(path) && Contains("bad JSON header: line 1, column 55: duplicate key"));
  write_file("{\n\"a\": {\"dtype\": \"F32\" \"shape\": [1]}}", std::string(4, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path), Contains("bad JSON header: line 2, column 22: expected ',' or '}'"));
  write_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path), Contains("'-1' is not a non-negative integer"));
  write_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})", std::string(4, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path), Contains("tensor 'a' (3) F32 needs 12 bytes, data_offsets give [0, 4)"));
  write_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", std::string(4, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path), Contains("is too large"));
  // Offsets must tile the data section: a gap between two tensors, or an overlap, is refused even when the last
  // tensor ends at the end of the file.
  write_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
             std::string(12, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path),
                    Contains("tensor 'b' starts at data byte 8, expected 4 (gap or overlap)"));
  write_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             std::string(12, '\0'));
  CHECK_THROWS_WITH(liere::io::load_safetensors(path),
                    Contains("tensor 'b' starts at data byte 4, expected 8 (gap or overlap)"));
}

TEST_CASE("safetensors: a failed save leaves the previous file intact", "[io][safetensors][atomic]") {
  TempDir dir;
  const std::string path = dir.file("keep.safetensors");
  const std::vector<float> a(100, 1.0f), b(100, 2.0f);
  liere::io::save_safetensors(path, {{"t", "F32", {100}, a.data(), 400}}, {{"v", "1"}});
  const std::string old = read_bytes(path);
  liere::io::SaveOptions fail;
  fail.on_write = [](std::size_t written, std::size_t total) {
    if (written >= 8 && written < total) throw std::runtime_error("disk full (simulated)");
  };
  CHECK_THROWS_WITH(liere::io::save_safetensors(path, {{"t", "F32", {100}, b.data(), 400}}, {{"v", "2"}}, fail),
                    Contains("disk full"));
  CHECK(read_bytes(path) == old);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(liere::io::load_safetensors(path).metadata.at("v") == "1");
}
