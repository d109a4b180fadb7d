// The Catch2 main every test program shares, with two additions: a run in which a test case called LIERE_SKIP
// (tests/skip.hpp) and nothing failed exits with 77, which CTest reports as Skipped (SKIP_RETURN_CODE); a run in
// which no test case matched fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

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
  Catch::Session session;
  if (const int bad = session.applyCommandLine(argc, argv)) return bad;
  // A run in which no test case matched fails (Catch2 v2 would pass it): a CTest entry whose [needs-…] tag names
  // no test case, or a main entry that excludes everything, must not read as a pass.
  auto& config = session.configData();
  config.warnings = static_cast<Catch::WarnAbout::What>(config.warnings | Catch::WarnAbout::NoTests);
  const int failed = session.run();
  const auto& skipped = liere::test::skip_state().reasons;
  if (failed != 0 || skipped.empty()) return failed;
  std::printf("skipped (exit code 77, CTest: Skipped):\n");
  for (const auto& r : skipped) std::printf("  %s\n", r.c_str());
  return 77;
}
