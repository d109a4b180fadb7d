// liere/core/eigen.hpp — Eigen's core, included the one way liere includes Eigen.
//
// GCC 12 reports false positives inside Eigen's inlined AVX-512 packet code (`‘__Y’ is used uninitialized` from
// _mm512_extractf64x4_pd, GCC bug 105593; `iteration … invokes undefined behavior` in BlasUtil.h): dozens of
// warnings with hundreds of lines of notes in a clean build, although Eigen is a system include. Diagnostic
// pragmas apply to source locations, so switching these off around the #include lines silences them for
// Eigen's (and the intrinsics') own lines only: the same warnings in liere's code still show. Every Eigen
// header liere uses is included between LIERE_THIRD_PARTY_BEGIN and LIERE_THIRD_PARTY_END, this one first.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#define LIERE_THIRD_PARTY_BEGIN                                        \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")      \
          _Pragma("GCC diagnostic ignored \"-Waggressive-loop-optimizations\"")
#define LIERE_THIRD_PARTY_END _Pragma("GCC diagnostic pop")
#else
#define LIERE_THIRD_PARTY_BEGIN
#define LIERE_THIRD_PARTY_END
#endif

LIERE_THIRD_PARTY_BEGIN
#include <Eigen/Core>
LIERE_THIRD_PARTY_END
