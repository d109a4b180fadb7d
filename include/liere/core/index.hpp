// liere/core/index.hpp — the one integer type for sizes, offsets and loop counters of tensors and kernels.
#pragma once

#include <cstdint>

namespace liere {

using Index = std::int64_t;

}  // namespace liere
