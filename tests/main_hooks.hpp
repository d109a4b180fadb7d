// tests/main_hooks.hpp — what a test program adds around the shared Catch2 main (tests/catch_main.cpp) without a
// main() of its own: a check before the run that may end the program (e.g. exit 77, skipped, without the device the
// test needs) and a report after it.
//
//   const liere::test::MainHooks hooks{
//       [] { return have_device() ? liere::test::kRunTests : 77; },   // before: kRunTests, or the exit code
//       [] { print_report(); }};                                       // after the run
//
// One MainHooks object per program, at namespace scope (it registers itself during static initialisation).
#pragma once

#include <functional>
#include <stdexcept>

namespace liere::test {

inline constexpr int kRunTests = -1;

struct MainHookFunctions {
  std::function<int()> before;
  std::function<void()> after;
};
inline MainHookFunctions& main_hook_functions() {
  static MainHookFunctions h;
  return h;
}

struct MainHooks {
  MainHooks(std::function<int()> before, std::function<void()> after) {
    MainHookFunctions& h = main_hook_functions();
    if (h.before || h.after) throw std::logic_error("tests/main_hooks.hpp: more than one MainHooks in one program");
    h.before = std::move(before), h.after = std::move(after);
  }
};

}  // namespace liere::test
