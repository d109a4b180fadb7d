// liere/tensor/random.hpp — the engine's random number generator and random fills.
//
// Rng wraps std::mt19937_64 (whose output sequence is fixed by the C++ standard) and draws everything
// else itself — uniforms from the top 53 bits, normals by Box–Muller without a cached second value — so a
// seed gives the same numbers with every standard library, and the whole state is the engine's state:
// `state()` / `set_state()` turn it into a string for checkpoints.
//
// Kernels that need randomness in parallel (dropout) take one 64-bit key from an Rng and hash
// (key, element index) with splitmix64 (`hash_uniform`): the result does not depend on the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <liere/config.hpp>
#include <liere/tensor/tensor.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <utility>

namespace liere {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : engine_(seed) {}

  void seed(std::uint64_t s) { engine_.seed(s); }
  std::uint64_t next_u64() { return engine_(); }

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }
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
  // Uniform integer in [0, n) without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    LIERE_ENSURE(n > 0, "Rng::below: n must be positive");
    const std::uint64_t limit = std::uint64_t(-1) - std::uint64_t(-1) % n;
    std::uint64_t x;
    do x = engine_();
    while (x >= limit);
    return x % n;
  }
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

// splitmix64 finaliser of (key, i): a counter-based random 64-bit value.
inline std::uint64_t hash_u64(std::uint64_t key, std::uint64_t i) {
  std::uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) from (key, i), 24 bits (exact in float).
inline float hash_uniform(std::uint64_t key, std::uint64_t i) { return float(hash_u64(key, i) >> 40) * 0x1.0p-24f; }

// ---- random fills ------------------------------------------------------------------------------------------
template <class S>
void fill_uniform(const TensorT<S>& t, Rng& rng, double lo, double hi) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.uniform(lo, hi));
}
template <class S>
void fill_normal(const TensorT<S>& t, Rng& rng, double mean, double std) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.normal(mean, std));
}
template <class S>
void fill_trunc_normal(const TensorT<S>& t, Rng& rng, double mean, double std, double a = -2.0, double b = 2.0) {
  S* p = t.data();
  for (Index i = 0; i < t.numel(); ++i) p[i] = S(rng.trunc_normal(mean, std, a, b));
}

}  // namespace liere
