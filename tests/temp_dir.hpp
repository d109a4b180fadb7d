// tests/temp_dir.hpp — a scratch directory removed at the end of a test, and whole-file reads and writes: the
// file helpers every test that writes files uses.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace liere::test {

using Bytes = std::vector<std::uint8_t>;

// <tmp>/<prefix>_<pid>_<n>, created empty now and removed with everything in it when the object goes.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "liere_test") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
};

// Writes the bytes (creating the parent folders); throws when the write fails.
inline void write_file(const std::string& path, const void* data, std::size_t size) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(size));
  if (!out.good()) throw std::runtime_error("test: cannot write " + path);
}
inline void write_file(const std::string& path, const Bytes& bytes) { write_file(path, bytes.data(), bytes.size()); }
inline void write_bytes(const std::string& path, const std::string& bytes) {
  write_file(path, bytes.data(), bytes.size());
}
inline void write_text(const std::string& path, const std::string& text) { write_bytes(path, text); }

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// Runs `command` through the shell with its output and its errors into the file `log`: its exit status, or -1 when
// it did not exit (a signal). The tests that run the project's programs run them this way.
inline int run_logged(const std::string& command, const std::string& log) {
  const int s = std::system((command + " > " + log + " 2>&1").c_str());
  return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

}  // namespace liere::test
