// liere/pe/blocks.hpp — the block sizes liere compiles, and the one switch that maps a runtime block size
// (from a command line, a config file) to a compile-time one.
#pragma once

#include <liere/core/config.hpp>
#include <type_traits>
#include <utility>

namespace liere {

// Block sizes with compiled kernels. Any of them must divide the head dimension.
inline constexpr int kSupportedBlocks[] = {2, 3, 4, 8, 16, 32, 64};
inline constexpr const char* kSupportedBlocksText = "2, 3, 4, 8, 16, 32, 64";

// Calls f(std::integral_constant<int, B>{}) for the runtime block size `block`: the one switch over the list, for
// the encodings (pe/), the rotations and attention (backend/cpu/) and the table ops of both backends. Any other
// size is an error that begins with `who` when given ("rotation tables on cuda: block size 5 is not supported; …").
template <class F>
decltype(auto) dispatch_block(int block, F&& f, const char* who = nullptr) {
  switch (block) {
    case 2: return std::forward<F>(f)(std::integral_constant<int, 2>{});
    case 3: return std::forward<F>(f)(std::integral_constant<int, 3>{});
    case 4: return std::forward<F>(f)(std::integral_constant<int, 4>{});
    case 8: return std::forward<F>(f)(std::integral_constant<int, 8>{});
    case 16: return std::forward<F>(f)(std::integral_constant<int, 16>{});
    case 32: return std::forward<F>(f)(std::integral_constant<int, 32>{});
    case 64: return std::forward<F>(f)(std::integral_constant<int, 64>{});
    default: break;
  }
  LIERE_ENSURE(false, (who ? who : "") << (who ? ": " : "") << "block size " << block
                                        << " is not supported; supported block sizes: " << kSupportedBlocksText);
  return std::forward<F>(f)(std::integral_constant<int, 2>{});  // unreachable
}

}  // namespace liere
