// liere/core/rng.hpp — every random number liere draws comes from here: one recipe for each kind of draw.
//
//   unit_double(u)      a uniform double in [0, 1) from the top 53 bits of one 64-bit draw
//   below(engine, n)    a uniform integer in [0, n) from 64-bit draws, rejecting the short last block of 2⁶⁴
//                       (2⁶⁴ mod n values) so that r mod n has no bias
//   Rng                 std::mt19937_64 (whose output sequence the C++ standard fixes) with the draws above, normals
//                       by Box–Muller and a text state for checkpoints: a seed gives the same numbers with every
//                       standard library
//   splitmix64(x)       one step of SplitMix64 (Steele, Lea, Flood 2014) from state x: derived seeds
//   mix_seed(s, a, b)   an independent stream's seed from (seed, a, b): per epoch, step, sample, layer …
//   hash_u64(key, i)    a counter-based 64-bit value of (key, i), and hash_uniform its float in [0, 1): parallel
//                       kernels (dropout) draw per element with it, so results never depend on the thread count
//                       or on the device (LIERE_HOST_DEVICE: the CUDA kernels call the same functions)
#pragma once

#include <cmath>
#include <cstdint>
#include <liere/core/config.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <utility>

namespace liere {

inline constexpr std::uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;  // SplitMix64's increment, 2⁶⁴/φ

// SplitMix64's output function applied to x + γ: one step of the generator whose state was x.
LIERE_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of an independent stream: splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b).
LIERE_HOST_DEVICE inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

// Counter-based random value of (key, i) = splitmix64(key + i·γ).
LIERE_HOST_DEVICE inline std::uint64_t hash_u64(std::uint64_t key, std::uint64_t i) { return splitmix64(key + i * kGoldenGamma); }
// Uniform in [0, 1) from (key, i), 24 bits (exact in float).
LIERE_HOST_DEVICE inline float hash_uniform(std::uint64_t key, std::uint64_t i) {
  return float(hash_u64(key, i) >> 40) * 0x1.0p-24f;
}

// Uniform in [0, 1) from the top 53 bits of a 64-bit draw.
LIERE_HOST_DEVICE inline double unit_double(std::uint64_t u) { return double(u >> 11) * 0x1.0p-53; }

// Uniform integer in [0, n) from a 64-bit engine (any callable returning std::uint64_t): draws r until
// r ≥ 2⁶⁴ mod n, then returns r mod n.
template <class Engine>
std::uint64_t below(Engine& engine, std::uint64_t n) {
  LIERE_ENSURE(n > 0, "below: n must be positive");
  const std::uint64_t threshold = (0 - n) % n;  // 2⁶⁴ mod n: the short last block that would bias r mod n
  for (;;) {
    const std::uint64_t r = engine();
    if (r >= threshold) return r % n;
  }
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : engine_(seed) {}

  void seed(std::uint64_t s) { engine_.seed(s); }
  std::uint64_t next_u64() { return engine_(); }
  std::uint64_t operator()() { return engine_(); }

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return unit_double(engine_()); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal by Box–Muller (two uniforms per value, nothing cached).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  double normal(double mean, double std) { return mean + std * normal(); }
  // Normal(mean, std) conditioned on [a, b] by rejection — timm's trunc_normal_ (whose a, b are absolute
  // values, not multiples of std: with std 0.02 and [-2, 2] it practically never rejects).
  double trunc_normal(double mean, double std, double a, double b) {
    LIERE_ENSURE(a < b, "trunc_normal: empty interval [" << a << ", " << b << "]");
    for (int tries = 0; tries < 1000000; ++tries) {
      const double x = normal(mean, std);
      if (x >= a && x <= b) return x;
    }
    LIERE_ENSURE(false, "trunc_normal: [" << a << ", " << b << "] has almost no mass under N(" << mean << ", " << std
                                          << "^2)");
    return 0;
  }
  // Uniform integer in [0, n) (liere::below).
  std::uint64_t below(std::uint64_t n) { return liere::below(engine_, n); }
  // Fisher–Yates shuffle (the same permutation for the same state with every standard library).
  template <class It>
  void shuffle(It first, It last) {
    const auto n = std::uint64_t(last - first);
    for (std::uint64_t i = n; i > 1; --i) std::swap(first[i - 1], first[below(i)]);
  }
  // An independent generator seeded from this one (e.g. one stream for data, one for dropout).
  Rng split() { return Rng(next_u64()); }

  // The full state as text (std::mt19937_64's textual representation), for checkpoints.
  std::string state() const {
    std::ostringstream os;
    os << engine_;
    return os.str();
  }
  void set_state(const std::string& s) {
    std::istringstream is(s);
    std::mt19937_64 e;
    is >> e;
    LIERE_ENSURE(!is.fail(), "Rng::set_state: not a std::mt19937_64 state (" << s.size() << " characters)");
    engine_ = e;
  }

  friend bool operator==(const Rng& a, const Rng& b) { return a.engine_ == b.engine_; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace liere
