// tests/test_layers.cpp — the include structure of include/liere/ (docs/architecture.md): which layer may include
// which, and no include cycle between files. It reads the headers as text, so a wrong #include fails here
// before it becomes a tangle.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(LIERE_SOURCE_DIR) / "include" / "liere";

// The layer of a header: its folder under include/liere/, or for the top-level files their role.
std::string layer_of(const std::string& rel) {
  const auto slash = rel.find('/');
  if (slash != std::string::npos) return rel.substr(0, slash);
  if (rel == "liere.hpp") return "umbrella";
  if (rel == "config.hpp") return "core";  // kept for older code: forwards to core/config.hpp
  return "api";                            // attention.hpp, rotate.hpp: the public calls on plain buffers
}

// What each layer may include besides itself (docs/architecture.md has the picture).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> a = {
      {"core", {}},
      {"lie", {"core"}},
      {"io", {"core"}},
      {"pe", {"core", "lie"}},
      {"backend", {"core", "lie", "pe"}},
      {"api", {"core", "lie", "pe", "backend"}},
      {"tensor", {"core", "backend"}},
      {"autodiff", {"core", "backend", "tensor"}},
      {"optim", {"core", "backend", "tensor", "autodiff"}},
      {"nn", {"core", "lie", "pe", "backend", "tensor", "autodiff", "optim", "io"}},
      {"umbrella", {"core", "lie", "pe", "backend", "api", "tensor", "autodiff", "optim", "nn", "io"}},
  };
  return a;
}

struct Header {
  std::string rel;                   // "pe/encoding.hpp"
  std::vector<std::string> includes; // "pe/liere.hpp", …
};

std::vector<Header> read_headers() {
  std::vector<Header> out;
  const std::regex inc(R"(^\s*#\s*include\s*<liere/([^>]+)>)");
  for (const auto& e : fs::recursive_directory_iterator(kRoot)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".hpp" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
    Header h;
    h.rel = fs::relative(e.path(), kRoot).generic_string();
    std::ifstream in(e.path());
    std::string line;
    std::smatch m;
    while (std::getline(in, line))
      if (std::regex_search(line, m, inc)) h.includes.push_back(m[1]);
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace

TEST_CASE("every include of a liere header goes to an allowed layer", "[layers]") {
  const auto headers = read_headers();
  REQUIRE(headers.size() > 40);  // the tree was found
  std::set<std::string> known;
  for (const auto& h : headers) known.insert(h.rel);
  for (const auto& h : headers) {
    const std::string from = layer_of(h.rel);
    INFO(h.rel << " (layer " << from << ")");
    REQUIRE(allowed().count(from));
    for (const auto& inc : h.includes) {
      INFO("#include <liere/" << inc << ">");
      CHECK(known.count(inc));  // no include of a file that does not exist
      const std::string to = layer_of(inc);
      CHECK((to == from || allowed().at(from).count(to)));
    }
  }
}

TEST_CASE("the allowed layers form no cycle", "[layers]") {
  // A layer may only include layers that are, in turn, not allowed to include it (transitively).
  std::map<std::string, std::set<std::string>> reach = allowed();
  for (int round = 0; round < 12; ++round)
    for (auto& [layer, deps] : reach)
      for (const auto& d : std::set<std::string>(deps))
        for (const auto& dd : reach[d]) deps.insert(dd);
  for (const auto& [layer, deps] : reach) {
    INFO(layer);
    CHECK(!deps.count(layer));
  }
}

TEST_CASE("no include cycle between the files of include/liere", "[layers]") {
  const auto headers = read_headers();
  std::map<std::string, std::vector<std::string>> graph;
  for (const auto& h : headers) graph[h.rel] = h.includes;
  std::map<std::string, int> state;  // 0 new, 1 on the stack, 2 done
  std::vector<std::string> stack;
  std::string cycle;
  std::function<void(const std::string&)> visit = [&](const std::string& f) {
    state[f] = 1;
    stack.push_back(f);
    for (const auto& g : graph[f]) {
      if (!cycle.empty()) break;
      if (state[g] == 1) {
        for (auto it = std::find(stack.begin(), stack.end(), g); it != stack.end(); ++it) cycle += *it + " -> ";
        cycle += g;
      } else if (state[g] == 0) {
        visit(g);
      }
    }
    stack.pop_back();
    state[f] = 2;
  };
  for (const auto& [f, incs] : graph)
    if (state[f] == 0 && cycle.empty()) visit(f);
  INFO("cycle: " << cycle);
  CHECK(cycle.empty());
}

TEST_CASE("the layer rules are not vacuous: a made-up wrong include is caught", "[layers]") {
  // backend including the engine's tensors (the old Backend <-> Engine cycle) and pe including attention.hpp
  // (the old PE <-> Attention cycle) are both refused by the table above.
  CHECK(!allowed().at("backend").count(layer_of("tensor/tensor.hpp")));
  CHECK(!allowed().at("pe").count(layer_of("attention.hpp")));
  CHECK(!allowed().at("core").count(layer_of("pe/blocks.hpp")));
}

TEST_CASE("nothing in the library, the programs or the data tools includes the deprecated liere/config.hpp", "[layers]") {
  // liere/config.hpp only forwards to liere/core/config.hpp for code written against earlier versions
  // (test_instantiate still compiles it); liere's own files name the real header.
  const fs::path src(LIERE_SOURCE_DIR);
  const std::regex shim(R"(^\s*#\s*include\s*[<"]liere/config\.hpp[>"])");
  std::vector<std::string> users;
  std::size_t files = 0;
  for (const char* dir : {"include", "examples", "data_tools", "bench"}) {
    for (const auto& e : fs::recursive_directory_iterator(src / dir)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".hpp" && ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".h") continue;
      if (e.path() == src / "include" / "liere" / "config.hpp") continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line))
        if (std::regex_search(line, shim)) users.push_back(fs::relative(e.path(), src).generic_string());
    }
  }
  REQUIRE(files > 60);  // the tree was found
  std::string list;
  for (const auto& u : users) list += u + " ";
  INFO("files including liere/config.hpp: " << list);
  CHECK(users.empty());
}
