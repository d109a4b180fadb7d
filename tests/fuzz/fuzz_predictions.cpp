// tests/fuzz/fuzz_predictions.cpp — the predictions reader (examples/app/metrics.hpp, read_predictions: the files
// that compare_runs takes) on arbitrary text.
//
// Besides "no crash, liere::Error only": what it reads is no longer than its bytes allow, and the writer's text of it
// reads back to the same labels and predictions.
#include <app/metrics.hpp>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_common.hpp"

using namespace liere;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const bool sized : {true, false}) {  // a file's size known (what is reserved is bounded by it), or a pipe's not
    expect_result_or_error([&] {
      std::istringstream in(text);
      const train::Predictions p =
          train::read_predictions(in, "fuzz.pred", sized ? std::optional<std::uintmax_t>(size) : std::nullopt);
      FUZZ_CHECK(p.labels.size() == p.preds.size());
      FUZZ_CHECK(6 * p.labels.size() <= size + 1);  // an example's line takes 6 bytes at least ("0 1 1\n"; the last 5)
      const std::string once = train::predictions_text(p.labels, p.preds, "fuzz.pred");
      std::istringstream again(once);
      const train::Predictions q = train::read_predictions(again, "again.pred", once.size());
      FUZZ_CHECK(q.labels == p.labels && q.preds == p.preds);
    });
  }
  return 0;
}
