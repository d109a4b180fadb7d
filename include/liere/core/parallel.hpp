// liere/core/parallel.hpp — the thread helpers every OpenMP loop of liere uses.
//
// Threading rules (docs/engine.md, "Threading and determinism"): a loop runs `#pragma omp parallel for
// schedule(static)` over an outer dimension with `if (n > kGrain)`, so small problems stay on one thread; a
// reduction is never an OpenMP `reduction` clause (whose order is unspecified) but fixed chunks added in
// order, so results do not depend on the number of threads.
#pragma once

#include <liere/core/index.hpp>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace liere {

// Loops with fewer elements than this run on one thread (a parallel region costs a few microseconds).
inline constexpr Index kGrain = 1 << 14;

// The number of threads a parallel region started here would get.
inline int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
// This thread's number inside a parallel region (0 outside one).
inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}
// The number of threads of the enclosing parallel region (1 outside one).
inline int num_threads() {
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}
// Whether we are inside an active parallel region.
inline bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return false;
#endif
}
// Sets the number of threads later parallel regions use.
inline void set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace liere
