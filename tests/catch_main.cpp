// The Catch2 main every test program shares, with three additions: a run in which a test case called LIERE_SKIP
// (tests/skip.hpp) and nothing failed exits with 77, which CTest reports as Skipped (SKIP_RETURN_CODE); a run in
// which no test case matched fails; a program's MainHooks (tests/main_hooks.hpp) run before and after the tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "main_hooks.hpp"
#include "skip.hpp"

#include <cstdio>

namespace {
// Tells skip.hpp the tags of the test case that runs now.
struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const& info) override { liere::test::skip_state().tags = info.tags; }
  void testCaseEnded(Catch::TestCaseStats const&) override { liere::test::skip_state().tags.clear(); }
};
}  // namespace
CATCH_REGISTER_LISTENER(SkipListener)

int main(int argc, char** argv) {
  const liere::test::MainHookFunctions& hooks = liere::test::main_hook_functions();
  if (hooks.before)
    if (const int code = hooks.before(); code != liere::test::kRunTests) return code;
  Catch::Session session;
  if (const int bad = session.applyCommandLine(argc, argv)) return bad;
  // A run in which no test case matched fails (Catch2 v2 would pass it): a CTest entry whose [needs-…] tag names
  // no test case, or a main entry that excludes everything, must not read as a pass.
  auto& config = session.configData();
  config.warnings = static_cast<Catch::WarnAbout::What>(config.warnings | Catch::WarnAbout::NoTests);
  const int failed = session.run();
  if (hooks.after) hooks.after();
  const auto& skipped = liere::test::skip_state().reasons;
  if (failed != 0 || skipped.empty()) return failed;
  std::printf("skipped (exit code 77, CTest: Skipped):\n");
  for (const auto& r : skipped) std::printf("  %s\n", r.c_str());
  return 77;
}
