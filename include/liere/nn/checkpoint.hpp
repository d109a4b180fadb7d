// liere/nn/checkpoint.hpp — checkpoints of a model and its optimizer as safetensors files: the policy on top of
// the format layer liere/io/safetensors.hpp (layout, atomic write, validation).
//
// A liere checkpoint holds the model parameters under their registry names (the state_dict keys), the
// optimizer state as "optim.<name>.m" / "optim.<name>.v" with the step count in the metadata
// ("optim.step", "optim.lr"), and whatever strings the trainer adds to the metadata (RNG state, epoch,
// config, encoding name). "format" = "liere-checkpoint-1" marks the file.
//
// Writing is atomic: an interrupted or failed write leaves the previous checkpoint intact. Loading reads and
// validates everything (header, offsets, dtypes, names, shapes, expected metadata, finite values) before touching
// the model, and every error names the file and what was expected.
#pragma once

#include <liere/autodiff/tape.hpp>
#include <liere/core/config.hpp>
#include <liere/io/safetensors.hpp>
#include <liere/nn/module.hpp>
#include <liere/optim/adam.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace liere::nn {

// The format layer, under the names it had when it lived here.
using io::Metadata;
using io::safetensors_dtype;
using io::safetensors_dtype_size;
using io::SafetensorsRecord;
using io::SaveOptions;
using io::save_safetensors;

// The record of a tensor (its bytes are not copied: keep t alive until the file is written). Host tensors only:
// save_checkpoint copies device tensors to the host first, so checkpoints do not depend on the device.
template <class S>
SafetensorsRecord record(const std::string& name, const TensorT<S>& t) {
  const Shape& s = t.shape();
  std::vector<std::int64_t> shape;
  for (int d = 0; d < s.rank(); ++d) shape.push_back(s[d]);
  LIERE_ENSURE(t.on_host(), "checkpoint record '" << name << "': the tensor is on " << to_string(t.device())
                                                  << " (copy it to the host first)");
  return {name, safetensors_dtype<S>(), std::move(shape), t.data(), std::size_t(t.numel()) * sizeof(S)};
}

namespace detail {
inline bool same_shape(const std::vector<std::int64_t>& file, const Shape& model) {
  if (int(file.size()) != model.rank()) return false;
  for (int d = 0; d < model.rank(); ++d)
    if (file[std::size_t(d)] != model[d]) return false;
  return true;
}
}  // namespace detail

// Copies tensor `name` of a file read by load_safetensors into t (same shape and scalar type required).
template <class S>
void read_tensor(const io::SafetensorsFile& f, const std::string& name, const TensorT<S>& t) {
  const auto* e = f.find(name);
  LIERE_ENSURE(e, "'" << f.path << "': no tensor '" << name << "'");
  LIERE_ENSURE(e->dtype == safetensors_dtype<S>(),
               "'" << f.path << "': " << name << ": dtype " << e->dtype << ", expected " << safetensors_dtype<S>());
  LIERE_ENSURE(detail::same_shape(e->shape, t.shape()),
               name << ": checkpoint " << io::shape_str(e->shape) << " != model " << t.shape());
  if (t.on_host()) {
    std::memcpy(t.data(), f.data.data() + e->begin, e->end - e->begin);
    return;
  }
  TensorT<S> host(t.shape());  // a checkpoint read into a model on a device
  std::memcpy(host.data(), f.data.data() + e->begin, e->end - e->begin);
  t.copy_from(host);
}

// A safetensors file read whole, with its tensors as engine tensors.
struct SafetensorsFile : io::SafetensorsFile {
  SafetensorsFile() = default;
  SafetensorsFile(io::SafetensorsFile f) : io::SafetensorsFile(std::move(f)) {}

  // The shape of entry `e` as an engine Shape.
  static Shape shape_of(const Entry& e) { return Shape(e.shape.begin(), e.shape.end()); }

  // Copies tensor `name` into t (same shape and scalar type required).
  template <class S>
  void read_into(const std::string& name, const TensorT<S>& t) const {
    read_tensor(*this, name, t);
  }
  // Tensor `name` as a new tensor of its shape.
  template <class S>
  TensorT<S> tensor(const std::string& name) const {
    const Entry* e = find(name);
    LIERE_ENSURE(e, "'" << path << "': no tensor '" << name << "'");
    TensorT<S> t(shape_of(*e));
    read_tensor(*this, name, t);
    return t;
  }
};

namespace detail {
// Engine tensors have at most Shape::kMaxRank dimensions.
inline SafetensorsFile check_ranks(io::SafetensorsFile&& file) {
  SafetensorsFile f(std::move(file));
  for (const auto& e : f.entries)
    LIERE_ENSURE(int(e.shape.size()) <= Shape::kMaxRank,
                 "checkpoint '" << f.path << "': tensor '" << e.name << "' has " << e.shape.size()
                                << " dimensions (at most " << Shape::kMaxRank << ")");
  return f;
}
}  // namespace detail

// Reads and validates a whole safetensors file (io::load_safetensors), whose tensors must have at most
// Shape::kMaxRank dimensions.
inline SafetensorsFile load_safetensors(const std::string& path) { return detail::check_ranks(io::load_safetensors(path)); }

// The same from the bytes of a file in memory (io::parse_safetensors); `path` names it in errors.
inline SafetensorsFile parse_safetensors(std::span<const char> bytes, const std::string& path = "<memory>") {
  return detail::check_ranks(io::parse_safetensors(bytes, path));
}

// ---- checkpoints of a model (+ optimizer) ------------------------------------------------------------------
inline constexpr const char* kCheckpointFormat = "liere-checkpoint-1";

// Metadata value `key` of the checkpoint `path` as a whole decimal integer in [lo, hi]; an error naming the file,
// the key and the range when it is missing, not an integer, or out of range.
inline std::int64_t metadata_integer(const Metadata& meta, const std::string& key, const std::string& path,
                                     std::int64_t lo = 0, std::int64_t hi = INT64_MAX) {
  const auto it = meta.find(key);
  LIERE_ENSURE(it != meta.end(), "checkpoint '" << path << "' has no metadata '" << key << "'");
  const std::string& s = it->second;
  std::int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  LIERE_ENSURE(!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && v >= lo && v <= hi,
               "checkpoint '" << path << "': metadata " << key << " '" << s << "' is not an integer in [" << lo << ", "
                              << hi << "]");
  return v;
}

// Metadata value `key` as a finite number >= 0 (a learning rate); the same errors.
inline double metadata_nonnegative(const Metadata& meta, const std::string& key, const std::string& path) {
  const auto it = meta.find(key);
  LIERE_ENSURE(it != meta.end(), "checkpoint '" << path << "' has no metadata '" << key << "'");
  const std::string& s = it->second;
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  LIERE_ENSURE(!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v) && v >= 0,
               "checkpoint '" << path << "': metadata " << key << " '" << s << "' is not a finite number >= 0");
  return v;
}

namespace detail {
// The first of the values of S in `bytes` that is NaN or ±Inf, or negative where nonnegative is set: its index, with
// the value in v; -1 where there is none.
template <class S>
std::int64_t first_bad_value(std::span<const char> bytes, bool nonnegative, S& v) {
  const std::size_t n = bytes.size() / sizeof(S);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(&v, bytes.data() + i * sizeof(S), sizeof(S));
    if (!std::isfinite(v) || (nonnegative && v < S(0))) return std::int64_t(i);
  }
  return -1;
}
// Throws "<where>: tensor 'name' (shape) holds NaN at element i (flat index)…: <why>" at the first value of `bytes`
// that a checkpoint may not hold (non-finite; negative in Adam's second moments, the tensors "optim.*.v").
template <class S>
void check_values(const std::string& where, const std::string& name, std::span<const std::int64_t> shape,
                  std::span<const char> bytes, const char* why) {
  const bool second_moment =
      name.rfind("optim.", 0) == 0 && name.size() > 2 && name.compare(name.size() - 2, 2, ".v") == 0;
  S v{};
  const std::int64_t bad = first_bad_value(bytes, second_moment, v);
  if (bad < 0) return;
  const char* what = std::isnan(v) ? "NaN" : std::isinf(v) ? "an infinity" : "a negative value";
  LIERE_ENSURE(false, where << ": tensor '" << name << "' " << io::shape_str(shape) << " holds " << what
                            << " at element " << bad << " (flat index)"
                            << (second_moment ? ", where Adam's second moments are >= 0" : "") << ": " << why);
}
}  // namespace detail

// Saves every parameter, the optimizer state (when given) and `meta` (RNG state, epoch, config, ...). Values that
// load_checkpoint would refuse (NaN, ±Inf, a negative second moment) are not written: the error names the tensor,
// and the file at `path` stays as it was.
template <class S>
void save_checkpoint(const std::string& path, const ParamsT<S>& params, const std::type_identity_t<optim::AdamT<S>>* opt,
                     Metadata meta = {}, const SaveOptions& so = {}) {
  std::vector<SafetensorsRecord> records;
  std::vector<TensorT<S>> host;  // host copies of device tensors, alive until the file is written
  host.reserve(params.size() + (opt ? 2 * opt->states().size() : 0));
  auto on_host = [&](const TensorT<S>& t) -> const TensorT<S>& {
    if (t.on_host()) return t;
    host.push_back(t.to(Device::cpu));
    return host.back();
  };
  for (const auto& p : params) records.push_back(record(p.name(), on_host(p.value())));
  if (opt) {
    for (const auto& s : opt->states()) {
      records.push_back(record("optim." + s.param.name() + ".m", on_host(s.m)));
      records.push_back(record("optim." + s.param.name() + ".v", on_host(s.v)));
    }
    meta["optim.step"] = std::to_string(opt->steps());
    std::ostringstream lr;
    lr.precision(17);
    lr << opt->lr();
    meta["optim.lr"] = lr.str();
  }
  meta["format"] = kCheckpointFormat;
  for (const auto& r : records)
    detail::check_values<S>("checkpoint '" + path + "' not written", r.name, r.shape,
                            {static_cast<const char*>(r.data), r.bytes},
                            "a diverged model is not saved (the file at that path, if any, is unchanged)");
  save_safetensors(path, records, meta, so);
}

struct LoadOptions {
  // Metadata that must be present with exactly these values, e.g. {{"encoding", "rope-mixed"}, {"config", ...}}.
  Metadata expect;
  bool load_optimizer = true;  // read optim.* into the optimizer (when one is given)
  bool strict = true;          // every model parameter present, and no unknown parameter tensor
  // Every value read finite, and Adam's second moments >= 0, as save_checkpoint writes them; false reads a damaged
  // or foreign file as it is (for inspecting it).
  bool finite = true;
};


// Loads parameters (and optimizer state) from a file read by load_safetensors, after validating it;
// returns the metadata.
template <class S>
Metadata load_checkpoint(const io::SafetensorsFile& f, const ParamsT<S>& params, std::type_identity_t<optim::AdamT<S>>* opt = nullptr,
                         const LoadOptions& lo = {}) {
  const std::string& path = f.path;
  for (const auto& [key, want] : lo.expect) {
    auto it = f.metadata.find(key);
    LIERE_ENSURE(it != f.metadata.end(),
                 "checkpoint '" << path << "' has no " << key << " (model " << key << " '" << want << "')");
    LIERE_ENSURE(it->second == want, "checkpoint " << key << " '" << it->second << "' != model " << key << " '" << want
                                                   << "' (" << path << ")");
  }
  auto check = [&](const std::string& name, const TensorT<S>& t, bool required) {
    const auto* e = f.find(name);
    if (!e) {
      LIERE_ENSURE(!required, "checkpoint '" << path << "' has no tensor '" << name << "' (model " << t.shape() << ")");
      return false;
    }
    LIERE_ENSURE(e->dtype == safetensors_dtype<S>(),
                 name << ": checkpoint dtype " << e->dtype << " != model dtype " << safetensors_dtype<S>() << " (" << path
                      << ")");
    LIERE_ENSURE(detail::same_shape(e->shape, t.shape()),
                 name << ": checkpoint " << io::shape_str(e->shape) << " != model " << t.shape() << " (" << path << ")");
    if (lo.finite)
      detail::check_values<S>("checkpoint '" + path + "'", name, e->shape, f.bytes(*e),
                              "the file is damaged or was not written by liere's save_checkpoint (LoadOptions::finite "
                              "= false reads it as it is)");
    return true;
  };
  for (const auto& p : params) check(p.name(), p.value(), lo.strict);
  if (lo.strict)
    for (const auto& e : f.entries)
      LIERE_ENSURE(e.name.rfind("optim.", 0) == 0 || params.contains(e.name),
                   "checkpoint '" << path << "' has tensor '" << e.name << "' " << io::shape_str(e.shape)
                                  << " that the model does not have");
  const bool with_opt = opt && lo.load_optimizer;
  std::int64_t steps = 0;
  double lr = with_opt ? opt->lr() : 0.0;
  if (with_opt) {
    LIERE_ENSURE(f.metadata.count("optim.step"),
                 "checkpoint '" << path << "' has no optimizer state (metadata optim.step missing)");
    steps = metadata_integer(f.metadata, "optim.step", path);
    if (f.metadata.count("optim.lr")) lr = metadata_nonnegative(f.metadata, "optim.lr", path);
    for (const auto& s : opt->states()) {
      check("optim." + s.param.name() + ".m", s.m, true);
      check("optim." + s.param.name() + ".v", s.v, true);
    }
  }
  // Everything checked: now copy.
  for (const auto& p : params)
    if (f.find(p.name())) read_tensor(f, p.name(), p.value());
  if (with_opt) {
    for (auto& s : opt->states()) {
      read_tensor(f, "optim." + s.param.name() + ".m", s.m);
      read_tensor(f, "optim." + s.param.name() + ".v", s.v);
    }
    opt->set_steps(steps);
    opt->set_lr(lr);
  }
  return f.metadata;
}

// The same from a path.
template <class S>
Metadata load_checkpoint(const std::string& path, const ParamsT<S>& params, std::type_identity_t<optim::AdamT<S>>* opt = nullptr,
                         const LoadOptions& lo = {}) {
  return load_checkpoint(load_safetensors(path), params, opt, lo);
}

}  // namespace liere::nn
