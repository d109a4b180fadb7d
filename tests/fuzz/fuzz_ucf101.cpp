// tests/fuzz/fuzz_ucf101.cpp — the UCF101 split-list parsers (data_tools/ucf101.hpp: classInd.txt, trainlist0s.txt
// and testlist0s.txt) on arbitrary text.
//
// Input: the class index, a NUL byte, then a split list. The list is read with the classes of the index when that
// parses, else with three fixed classes, so that list lines are fuzzed even when the index is not valid.
#include <data_tools/ucf101.hpp>

#include <set>
#include <sstream>
#include <string>

#include "fuzz_common.hpp"

using namespace liere;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = text.find('\0');
  const std::string index = text.substr(0, nul), list = nul == std::string::npos ? "" : text.substr(nul + 1);
  std::vector<std::string> classes = {"ApplyEyeMakeup", "Archery", "YoYo"};
  expect_result_or_error([&] {
    std::istringstream in(index);
    auto c = data::read_ucf101_classes(in, "classInd.txt");
    FUZZ_CHECK(!c.empty() && std::set<std::string>(c.begin(), c.end()).size() == c.size());
    classes = std::move(c);
  });
  expect_result_or_error([&] {
    std::istringstream in(list);
    const auto entries = data::read_ucf101_list(in, "trainlist01.txt", classes);
    FUZZ_CHECK(!entries.empty());
    std::set<std::string> paths;
    for (const auto& e : entries) {
      FUZZ_CHECK(e.label >= 0 && e.label < int(classes.size()));
      FUZZ_CHECK(e.path.substr(0, e.path.find('/')) == classes[std::size_t(e.label)]);
      FUZZ_CHECK(paths.insert(e.path).second);
    }
  });
  return 0;
}
