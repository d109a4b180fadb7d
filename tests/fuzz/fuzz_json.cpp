// tests/fuzz/fuzz_json.cpp — the JSON reader (liere/io/json.hpp) and the JSON-lines reader (data_tools/jsonl.hpp)
// on arbitrary text.
//
// Besides "no crash, liere::Error only": a document that parses is written back (json::write) and that text must
// parse again to the same text (a fixed point), and a JSON-lines file gives one row per non-blank line.
#include <data_tools/jsonl.hpp>
#include <liere/io/json.hpp>

#include <sstream>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"

using namespace liere;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool nonfinite : {false, true}) {
    expect_result_or_error([&] {
      io::json::ParseOptions po;
      po.source = "fuzz.json";
      po.allow_nonfinite = nonfinite;
      const io::json::Value v = io::json::parse(text, po);
      const std::string once = io::json::write(v);
      const std::string twice = io::json::write(io::json::parse(once));
      FUZZ_CHECK(once == twice);
      const std::string pretty = io::json::write(io::json::parse(once), io::json::Style::pretty);
      FUZZ_CHECK(io::json::write(io::json::parse(pretty)) == once);
    });
  }
  expect_result_or_error([&] {
    std::istringstream in{std::string(text)};
    std::vector<int> lines;
    const auto rows = data::read_jsonl(in, "fuzz.jsonl", &lines);
    FUZZ_CHECK(rows.size() == lines.size());
    for (std::size_t i = 1; i < lines.size(); ++i) FUZZ_CHECK(lines[i] > lines[i - 1]);
    for (const auto& row : rows)
      for (const auto& [k, v] : row) (void)v.type_name();
  });
  return 0;
}
