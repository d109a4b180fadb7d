// examples/app/compare.cpp — encoding labels and lists for --compare.
#include <app/compare.hpp>

#include <regex>
#include <sstream>

namespace liere::app {

PEConfig parse_pe_label(const std::string& label, const PEConfig& base) {
  PEConfig c = base;
  std::smatch m;
  if (std::regex_match(label, m, std::regex("(liere|comrope-ap|comrope-ld)([0-9]+)"))) {
    c.set("pe", m[1]);
    c.set("block", m[2]);
  } else {
    c.set("pe", label);
  }
  return c;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace liere::app
