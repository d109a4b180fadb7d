// tests/fuzz/fuzz_common.hpp — what every libFuzzer target of tests/fuzz shares.
//
// The contract a reader is fuzzed against: on any input it either returns a result that satisfies the reader's
// documented invariants, or throws liere::Error (the clear "file: what was expected" error of the project).
// Anything else is a finding: a sanitizer report (out-of-bounds read, overflow, leak, undefined behaviour), a
// crash, an exception of another type (std::invalid_argument from std::stoi, std::bad_alloc from a size read
// from the file, std::out_of_range from .at()), or a broken invariant (FUZZ_CHECK, which aborts).
#pragma once

#include <liere/core/config.hpp>

#include <cstdio>
#include <cstdlib>

// Aborts with the condition and its place when an invariant of a reader's result does not hold.
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// Runs a reader: liere::Error is the expected answer to bad input; every other exception escapes (libFuzzer
// reports it as a crash, "deadly signal" after std::terminate).
template <class F>
void expect_result_or_error(F&& f) {
  try {
    f();
  } catch (const liere::Error&) {
  }
}
