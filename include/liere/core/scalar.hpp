// liere/core/scalar.hpp — what differs between the scalar types liere computes in (float, double).
#pragma once

#include <limits>
#include <type_traits>

namespace liere {

// The type long sums of S are accumulated in: double for float (a sum of 10⁶ floats stays accurate to ~1e-7
// relative), S itself otherwise.
template <class S>
using acc_t = std::conditional_t<std::is_same_v<S, float>, double, S>;

// Machine epsilon of S (2⁻²³ for float, 2⁻⁵² for double).
template <class S>
inline constexpr S kEpsilon = std::numeric_limits<S>::epsilon();

// "float" or "double", for messages and file names.
template <class S>
constexpr const char* scalar_name() {
  if constexpr (std::is_same_v<S, float>) return "float";
  else if constexpr (std::is_same_v<S, double>) return "double";
  else return "scalar";
}

}  // namespace liere
