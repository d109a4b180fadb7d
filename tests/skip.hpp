// tests/skip.hpp — LIERE_SKIP: a test case that needs something this machine may lack reports "Skipped" in CTest,
// never "Passed" (docs/testing.md, "Skips").
//
// Catch2 v2 has no skip. A test case that needs a resource (python3 with NumPy, a GEMM library, Fashion-MNIST, an
// example program) carries a tag [needs-<resource>]. tests/CMakeLists.txt finds these tags in each test source
// and registers one more CTest entry per tag, `<test>:<resource>`, that runs only the test cases with that tag
// (`<test> [needs-<resource>]`, SKIP_RETURN_CODE 77); the main entry `<test>` runs every other test case
// (`~[needs-…]`). When the resource is missing the test case calls LIERE_SKIP("why"), which records the skip and
// returns; the shared main (tests/catch_main.cpp) then exits with 77 if nothing failed, which CTest reports as
// Skipped. LIERE_SKIP in a test case without a [needs-…] tag is a test failure: its skip would hide the passes of
// the main entry.
//
//   TEST_CASE("checkpoint: NumPy reads it", "[checkpoint][needs-numpy]") {
//     if (!liere::test::python_has("numpy")) LIERE_SKIP(liere::test::python() << " cannot import numpy");
//     ...
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace liere::test {

struct SkipState {
  std::vector<std::string> tags;     // of the test case running now (set by catch_main.cpp's listener)
  std::vector<std::string> reasons;  // "test case: why", one per LIERE_SKIP
};
inline SkipState& skip_state() {
  static SkipState s;
  return s;
}

inline bool current_test_needs_something() {
  for (const auto& t : skip_state().tags)
    if (t.rfind("needs-", 0) == 0) return true;
  return false;
}

inline void record_skip(const std::string& why) {
  if (!current_test_needs_something())
    FAIL("LIERE_SKIP(\"" << why << "\") in a test case without a [needs-…] tag: tag it so that it runs as its own "
                                   "CTest entry (tests/skip.hpp)");
  skip_state().reasons.push_back(Catch::getResultCapture().getCurrentTestName() + ": " + why);
  WARN("skipped: " << why);
}

// The Python interpreter the tests run: Debian's /usr/bin/python3 (python3-numpy, python3-torch), not whatever
// python3 comes first on PATH. The environment variable LIERE_TEST_PYTHON overrides the CMake cache variable of
// the same name (e.g. LIERE_TEST_PYTHON=python3 ctest -R numpy: pyenv's python3, without NumPy here, is skipped).
inline std::string python() {
  if (const char* env = std::getenv("LIERE_TEST_PYTHON"); env && *env) return env;
#ifdef LIERE_TEST_PYTHON
  return LIERE_TEST_PYTHON;
#else
  return "/usr/bin/python3";
#endif
}
// Whether python() runs and imports `module` from a file (an empty directory of that name would import as a
// namespace package, with no __file__).
inline bool python_has(const std::string& module) {
  const std::string cmd = "'" + python() + "' -c 'import " + module + "; assert " + module + ".__file__' > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace liere::test

// Records why and goes on: for a test case that checks several things (bf16, then fp16) and lacks what one of them
// needs; the others still run and can fail, and the entry reads Skipped if nothing failed (the caller then skips
// that part: `continue`, `break`).
#define LIERE_SKIP_PART(why)                           \
  do {                                                 \
    std::ostringstream liere_skip_why_;                \
    liere_skip_why_ << why;                            \
    ::liere::test::record_skip(liere_skip_why_.str()); \
  } while (false)

// Records why and returns from the test case (use it at the top level of a TEST_CASE body, not in a lambda).
#define LIERE_SKIP(why)   \
  do {                    \
    LIERE_SKIP_PART(why); \
    return;               \
  } while (false)
