// liere/pe/config.hpp — one description of a position encoding, built from command-line flags such as
//   --pe liere --block 8 --sharing layer-head --init 2pi --positions official --cls identity
// with errors that name the allowed values.
#pragma once

#include <cmath>
#include <liere/core/config.hpp>
#include <liere/pe/blocks.hpp>
#include <liere/pe/positions.hpp>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace liere {

enum class PEKind {
  none,                 // no position information at all
  absolute,             // learned table added to the tokens (ViT); interpolated on other grids
  visionllama,          // fixed axial RoPE of the official code: ω_j = exp(−4j/(n−1)), axis-major blocks
  rope_mixed,           // RoPE-Mixed with rope-vit's init: |f_k| = 10^(−4k/d), a random direction per layer × head
  rope_mixed_official,  // the official LieRE code's "RoPE-Mixed": LieRE with 2×2 blocks, U[0, 2π)
  liere_commute,        // LieRE with 2×2 blocks and one parameter set for the whole model (paper Table 2)
  liere,                // LieRE with any block size dividing the head dimension
  rope_1d,              // language-model RoPE, θ = 10000, for 1D sequences
  comrope_ap,           // ComRoPE axis-partition: each block belongs to one axis (commuting)
  comrope_ld,           // ComRoPE linearly dependent: block k of axis a is θ_{a,k}·S_k (commuting)
  string_cayley,        // Cayley-STRING: R(p) = Pᵀ·RoPE-Mixed(p)·P, P = (I − S)(I + S)⁻¹ learned
};

enum class Sharing { layer_head, head, layer, shared };

struct PEKindInfo {
  PEKind kind;
  const char* name;
  bool rotary;        // applied to q and k inside attention
  bool learnable;     // has trainable parameters
  bool commuting;     // exactly relative: R(p)ᵀR(q) = R(q − p)
  int fixed_block;    // 0: --block chooses; otherwise the block size the encoding uses
};

inline const std::vector<PEKindInfo>& pe_kinds() {
  static const std::vector<PEKindInfo> k = {
      {PEKind::none, "none", false, false, true, 0},
      {PEKind::absolute, "absolute", false, true, false, 0},
      {PEKind::visionllama, "visionllama", true, false, true, 2},
      {PEKind::rope_mixed, "rope-mixed", true, true, true, 2},
      {PEKind::rope_mixed_official, "rope-mixed-official", true, true, true, 2},
      {PEKind::liere_commute, "liere-commute", true, true, true, 2},
      {PEKind::liere, "liere", true, true, false, 0},
      {PEKind::rope_1d, "rope-1d", true, false, true, 2},
      {PEKind::comrope_ap, "comrope-ap", true, true, true, 0},
      {PEKind::comrope_ld, "comrope-ld", true, true, true, 0},
      {PEKind::string_cayley, "string", true, true, true, 2},
  };
  return k;
}

inline const PEKindInfo& pe_info(PEKind kind) {
  for (const auto& i : pe_kinds())
    if (i.kind == kind) return i;
  LIERE_ENSURE(false, "pe_info: unknown kind");
  return pe_kinds().front();
}

namespace detail {
template <class E>
std::string allowed_names(const std::vector<std::pair<const char*, E>>& table) {
  std::string s;
  for (const auto& [n, e] : table) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}
template <class E>
E parse_enum(const std::string& flag, const std::string& value, const std::vector<std::pair<const char*, E>>& table) {
  for (const auto& [n, e] : table)
    if (value == n) return e;
  LIERE_ENSURE(false, "unknown " << flag << " value '" << value << "'; allowed: " << allowed_names(table));
  return table.front().second;
}
inline const std::vector<std::pair<const char*, Sharing>>& sharing_names() {
  static const std::vector<std::pair<const char*, Sharing>> t = {
      {"layer-head", Sharing::layer_head}, {"head", Sharing::head}, {"layer", Sharing::layer}, {"shared", Sharing::shared}};
  return t;
}
}  // namespace detail

inline const char* to_string(Sharing s) {
  for (const auto& [n, e] : detail::sharing_names())
    if (e == s) return n;
  return "?";
}
inline const char* to_string(PEKind k) { return pe_info(k).name; }

// How the parameters are drawn at the start.
struct PEInit {
  enum class Kind { default_for_encoding, uniform, normal } kind = Kind::default_for_encoding;
  double scale = 0;  // U[0, scale) or N(0, scale²)
  // The largest scale parse() takes. Past it float32 holds a generator entry to a radian or worse (a draw of
  // N(0, S²) reaches 8.6·S, and float32's spacing is 1 from 2²³ ≈ 8.4e6): the rotations are noise. From about 1e15
  // the float32 rotation tables overflow (a NaN loss at the first step), from about 4e37 the generators themselves.
  static constexpr double kMaxScale = 1e6;
  std::string str() const {
    if (kind == Kind::default_for_encoding) return "default";
    std::ostringstream os;
    os << (kind == Kind::uniform ? "uniform:" : "normal:") << scale;
    return os.str();
  }
  // "default", "2pi" (= uniform:2π), "uniform:S", "normal:S", "official" (absolute: N(0, 1) as the official code)
  static PEInit parse(const std::string& s) {
    PEInit i;
    if (s == "default") return i;
    if (s == "2pi") return {Kind::uniform, 2 * std::numbers::pi};
    if (s == "official") return {Kind::normal, 1.0};
    const auto colon = s.find(':');
    if (colon != std::string::npos) {
      const std::string head = s.substr(0, colon);
      char* end = nullptr;
      const double v = std::strtod(s.c_str() + colon + 1, &end);
      LIERE_ENSURE(end && *end == '\0' && std::isfinite(v) && v > 0 && v <= kMaxScale,
                   "--init " << s << ": expected a scale in (0, 1e6] after ':' (past it float32 holds the generators "
                                     "to a radian or worse, and from about 1e15 their rotations overflow)");
      if (head == "uniform") return {Kind::uniform, v};
      if (head == "normal") return {Kind::normal, v};
    }
    LIERE_ENSURE(false, "unknown --init value '" << s << "'; allowed: default, 2pi, uniform:S, normal:S, official");
    return i;
  }
};

struct PEConfig {
  PEKind kind = PEKind::liere;
  int block = 8;
  Sharing sharing = Sharing::layer_head;
  PEInit init;
  ResolutionPolicy resolution = ResolutionPolicy::official;
  std::optional<PositionUnit> unit;  // default per encoding (see default_unit)
  ClsPolicy cls = ClsPolicy::identity;

  const PEKindInfo& info() const { return pe_info(kind); }
  int effective_block() const { return info().fixed_block ? info().fixed_block : block; }
  PositionUnit position_unit() const { return unit ? *unit : default_unit(kind); }
  static PositionUnit default_unit(PEKind k) {
    return (k == PEKind::rope_mixed || k == PEKind::rope_1d || k == PEKind::string_cayley) ? PositionUnit::integer
                                                                                           : PositionUnit::range;
  }
  Sharing effective_sharing() const {
    if (kind == PEKind::liere_commute || kind == PEKind::visionllama || kind == PEKind::rope_1d) return Sharing::shared;
    return sharing;
  }

  // Short label used in tables and file names: "liere8", "liere64", "rope-mixed", "abs", …
  std::string label() const {
    switch (kind) {
      case PEKind::liere: return "liere" + std::to_string(block);
      case PEKind::absolute: return "abs";
      case PEKind::comrope_ap: return "comrope-ap" + std::to_string(block);
      case PEKind::comrope_ld: return "comrope-ld" + std::to_string(block);
      default: return info().name;
    }
  }
  // Everything that changes the model, for checkpoints ("liere block=8 sharing=layer-head …").
  std::string describe() const {
    std::ostringstream os;
    os << info().name << " block=" << effective_block() << " sharing=" << to_string(effective_sharing())
       << " init=" << init.str() << " positions=" << to_string(resolution) << " unit=" << to_string(position_unit())
       << " cls=" << to_string(cls);
    return os.str();
  }

  // Sets one option from a flag name without the dashes ("pe", "block", "sharing", "init", "positions",
  // "position-unit", "cls"). Returns false for a flag that is not a position-encoding flag.
  bool set(const std::string& flag, const std::string& value) {
    if (flag == "pe") {
      // A label with its block size (label()'s "liere8", "comrope-ap4", as --compare and tables write them) sets
      // the block too.
      const std::size_t digits = value.find_last_not_of("0123456789") + 1;
      const std::string name = value.substr(0, digits);
      const bool with_block =
          digits < value.size() && (name == "liere" || name == "comrope-ap" || name == "comrope-ld");
      std::vector<std::pair<const char*, PEKind>> t;
      for (const auto& i : pe_kinds()) t.emplace_back(i.name, i.kind);
      t.emplace_back("abs", PEKind::absolute);
      kind = detail::parse_enum("--pe", with_block ? name : value, t);
      if (with_block) {
        try {
          set("block", value.substr(digits));
        } catch (const Error& e) {
          LIERE_ENSURE(false, "--pe " << value << ": " << e.message());
        }
      }
    } else if (flag == "block") {
      char* end = nullptr;
      const long b = std::strtol(value.c_str(), &end, 10);
      LIERE_ENSURE(end && *end == '\0', "--block " << value << ": expected an integer; supported block sizes: "
                                                   << kSupportedBlocksText);
      bool ok = false;
      for (int s : kSupportedBlocks) ok = ok || s == b;
      LIERE_ENSURE(ok, "--block " << value << " is not supported; supported block sizes: " << kSupportedBlocksText);
      block = int(b);
    } else if (flag == "sharing") {
      sharing = detail::parse_enum("--sharing", value, detail::sharing_names());
    } else if (flag == "init") {
      init = PEInit::parse(value);
    } else if (flag == "positions") {
      resolution = detail::parse_enum<ResolutionPolicy>("--positions", value,
                                                        {{"official", ResolutionPolicy::official},
                                                         {"extrapolate", ResolutionPolicy::extrapolate},
                                                         {"interpolate", ResolutionPolicy::interpolate}});
    } else if (flag == "position-unit") {
      unit = detail::parse_enum<PositionUnit>("--position-unit", value,
                                              {{"range", PositionUnit::range}, {"integer", PositionUnit::integer}});
    } else if (flag == "cls") {
      cls = detail::parse_enum<ClsPolicy>("--cls", value,
                                          {{"identity", ClsPolicy::identity}, {"skip", ClsPolicy::skip}, {"center", ClsPolicy::center}});
    } else {
      return false;
    }
    return true;
  }

  // The --help text of the flags set() takes, an entry per flag; skip(name) true leaves that flag's entry out (a
  // program that declares the flag itself, e.g. pe_diagnostics' --pe KIND|all).
  template <class Skip>
  static std::string flags_help(Skip skip) {
    static constexpr std::pair<const char*, const char*> kEntries[] = {
        {"pe", "  --pe KIND            none, absolute (abs), visionllama, rope-mixed, rope-mixed-official,\n"
               "                       liere-commute, liere, rope-1d, comrope-ap, comrope-ld, string; with the\n"
               "                       block size, liere8, comrope-ap4, ... set --block too  [liere]\n"},
        {"block",
         "  --block B            LieRE / ComRoPE block size: 2, 3, 4, 8, 16, 32, 64 (must divide the head dim) [8]\n"},
        {"sharing", "  --sharing S          layer-head, head, layer, shared  [layer-head]\n"},
        {"init", "  --init I             default, 2pi, uniform:S, normal:S (S in (0, 1e6]), official\n"
                 "                       [default: per encoding]\n"},
        {"positions", "  --positions P        official (linspace(0, n/E, n)), extrapolate (keep the step),\n"
                      "                       interpolate (keep the range)  [official]\n"},
        {"position-unit", "  --position-unit U    range (training grid in [0,1]) or integer  [per encoding]\n"},
        {"cls", "  --cls C              identity (official), skip (rope-vit, timm), center (ComRoPE)  [identity]\n"}};
    std::string text;
    for (const auto& [name, help] : kEntries)
      if (!skip(std::string(name))) text += help;
    return text;
  }
  static std::string flags_help() {
    return flags_help([](const std::string&) { return false; });
  }
};

}  // namespace liere
