// liere/io/safetensors.hpp — safetensors files (https://huggingface.co/docs/safetensors): write, read,
// validate. Raw bytes with a dtype and a shape; liere/nn/checkpoint.hpp puts tensors and optimizers on top.
//
// Layout (all that Python's `safetensors.safe_open` / `load_file` needs):
//   bytes [0, 8)          N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)      a UTF-8 JSON object, padded with spaces so that the data starts 8-byte aligned:
//                           {"__metadata__": {"key": "string value", ...},
//                            "<tensor name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)    the data: each tensor row-major little-endian, at [begin, end) relative to the data
//                           start; tensors are contiguous, in header order, with no gaps, ending at EOF.
//
// save_safetensors writes atomically (liere/io/atomic_file.hpp): an interrupted or failed write leaves the
// previous file intact. load_safetensors reads and validates everything — header length, JSON (io/json.hpp),
// string metadata, dtypes, sizes = dtype × shape, offsets contiguous from 0 to EOF — and every error names
// the file and what was expected, e.g. "checkpoint 'run/last.safetensors': truncated: expected 22104936 bytes
// (8 + a header of 4728 + data of 22100200), found 1048576".
#pragma once

#include <liere/core/config.hpp>
#include <liere/io/atomic_file.hpp>
#include <liere/io/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace liere::io {

static_assert(std::endian::native == std::endian::little, "safetensors.hpp writes the host's bytes: little-endian only");

using Metadata = std::map<std::string, std::string>;

// The dtype name of a scalar type.
template <class S>
constexpr const char* safetensors_dtype() {
  if constexpr (std::is_same_v<S, float>) return "F32";
  else if constexpr (std::is_same_v<S, double>) return "F64";
  else static_assert(sizeof(S) == 0, "safetensors: only float (F32) and double (F64) tensors");
}

// Bytes per element of a dtype, 0 for an unknown one.
inline std::size_t safetensors_dtype_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

// "(8, 65, 192)", as the engine prints shapes; "()" for a scalar.
inline std::string shape_str(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// The number of elements of a shape; false when a dimension is negative or the product overflows.
inline bool shape_numel(std::span<const std::int64_t> shape, std::uint64_t& n) {
  n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::uint64_t(INT64_MAX) / std::uint64_t(d)) return false;
    n *= std::uint64_t(d);
  }
  return true;
}

// A tensor to write: name, dtype, shape and bytes (not owned).
struct SafetensorsRecord {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

struct SaveOptions {
  // Called after each block written to the temporary file with (bytes written, total bytes); may throw
  // (tests use it to simulate a failure in the middle of a write).
  std::function<void(std::size_t, std::size_t)> on_write;
};

namespace detail {

// The header JSON, padded with spaces to a multiple of 8 bytes.
inline std::string safetensors_header(const std::vector<SafetensorsRecord>& records, const Metadata& meta) {
  json::Writer w;
  w.begin_object();
  if (!meta.empty()) {
    w.key("__metadata__").begin_object();
    for (const auto& [k, v] : meta) w.member(k, v);
    w.end_object();
  }
  std::size_t offset = 0;
  for (const auto& r : records) {
    w.key(r.name).begin_object().member("dtype", r.dtype).member("shape", r.shape);
    w.key("data_offsets").begin_array().value(offset).value(offset + r.bytes).end_array();
    w.end_object();
    offset += r.bytes;
  }
  w.end_object();
  std::string h = w.take();
  while (h.size() % 8) h += ' ';
  return h;
}

}  // namespace detail

// Writes a safetensors file atomically (path.tmp + fsync + rename).
inline void save_safetensors(const std::string& path, const std::vector<SafetensorsRecord>& records,
                             const Metadata& meta = {}, const SaveOptions& opt = {}) {
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    LIERE_ENSURE(!r.name.empty() && r.name != "__metadata__", "save_safetensors: bad tensor name '" << r.name << "'");
    const std::size_t es = safetensors_dtype_size(r.dtype);
    std::uint64_t numel = 0;
    LIERE_ENSURE(es > 0 && shape_numel(r.shape, numel) && numel * es == r.bytes,
                 "save_safetensors: '" << r.name << "' has " << r.bytes << " bytes for dtype " << r.dtype
                                       << " and shape " << shape_str(r.shape));
    for (std::size_t j = 0; j < i; ++j)
      LIERE_ENSURE(records[j].name != r.name, "save_safetensors: tensor '" << r.name << "' appears twice");
  }
  const std::string header = detail::safetensors_header(records, meta);
  const std::uint64_t n = header.size();
  std::vector<Bytes> pieces{{&n, 8}, {header.data(), header.size()}};
  for (const auto& r : records) pieces.push_back({r.data, r.bytes});
  write_file_atomic(path, pieces, {"save_safetensors", opt.on_write});
}

// A parsed safetensors file: the header entries (in file order), the metadata and the data bytes.
struct SafetensorsFile {
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::size_t begin = 0, end = 0;  // relative to the data section
  };
  std::string path;
  std::vector<Entry> entries;
  Metadata metadata;
  std::vector<char> data;

  const Entry* find(std::string_view name) const {
    for (const auto& e : entries)
      if (e.name == name) return &e;
    return nullptr;
  }
  // The bytes of an entry.
  std::span<const char> bytes(const Entry& e) const { return {data.data() + e.begin, e.end - e.begin}; }
};

namespace detail {

// Checks the 8-byte header length n of a file of `size` bytes.
inline void check_safetensors_prefix(const std::string& path, std::uint64_t size, std::uint64_t n) {
  LIERE_ENSURE(size >= 8, "checkpoint '" << path << "': truncated: " << size
                                         << " bytes, expected at least the 8-byte header length of a safetensors file");
  LIERE_ENSURE(n >= 2 && n <= (std::uint64_t(100) << 20),
               "checkpoint '" << path << "': not a safetensors file (header length " << n << ")");
  LIERE_ENSURE(size >= 8 + n, "checkpoint '" << path << "': truncated: the header needs " << n
                                             << " bytes after the first 8, the file has " << size << " bytes in all");
}

// Parses and validates the header (n bytes) of a file of `size` bytes into f.entries and f.metadata; f.path names
// the file in errors, f.data is not used.
inline void parse_safetensors_header(SafetensorsFile& f, std::string_view header, std::uint64_t size);

}  // namespace detail

// Parses and validates a whole safetensors file held in memory (bytes: the file from its first byte); `path`
// names it in errors. The data are copied into the result.
inline SafetensorsFile parse_safetensors(std::span<const char> bytes, const std::string& path = "<memory>") {
  SafetensorsFile f;
  f.path = path;
  std::uint64_t n = 0;
  if (bytes.size() >= 8) std::memcpy(&n, bytes.data(), 8);
  detail::check_safetensors_prefix(path, bytes.size(), n);
  detail::parse_safetensors_header(f, std::string_view(bytes.data() + 8, std::size_t(n)), bytes.size());
  f.data.assign(bytes.begin() + std::ptrdiff_t(8 + n), bytes.end());
  return f;
}

// Reads and validates a whole safetensors file.
inline SafetensorsFile load_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.path = path;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  LIERE_ENSURE(in, "checkpoint '" << path << "': cannot open: " << std::strerror(errno));
  const std::streamoff size = in.tellg();
  in.seekg(0);
  std::uint64_t n = 0;
  if (size >= 8) in.read(reinterpret_cast<char*>(&n), 8);
  detail::check_safetensors_prefix(path, std::uint64_t(size), n);
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  const std::size_t data_size = std::size_t(size) - 8 - std::size_t(n);
  f.data.resize(data_size);
  in.read(f.data.data(), std::streamsize(data_size));
  LIERE_ENSURE(in, "checkpoint '" << path << "': read error");
  detail::parse_safetensors_header(f, header, std::uint64_t(size));
  return f;
}

inline void detail::parse_safetensors_header(SafetensorsFile& f, std::string_view header, std::uint64_t size) {
  using json::Value;
  const std::string& path = f.path;
  const std::uint64_t n = header.size();
  const std::size_t data_size = std::size_t(size - 8 - n);
  const std::string where = "checkpoint '" + path + "'";
  LIERE_ENSURE(header[0] == '{', where << ": not a safetensors file (the header does not start with '{')");
  Value root;
  try {
    json::ParseOptions po;
    po.source = where + " header";
    root = json::parse(header, po);
  } catch (const json::ParseError& e) {
    LIERE_ENSURE(false, where << ": bad JSON header: line " << e.line() << ", column " << e.column() << ": "
                              << e.message());
  }
  LIERE_ENSURE(root.is_object(), where << ": the header is not a JSON object");
  std::size_t expected_end = 0;
  for (const auto& member : root.members) {
    // (Not a structured binding: the lambda below captures the name, which clang 14 refuses for a binding.)
    const std::string& name = member.first;
    const Value& v = member.second;
    if (name == "__metadata__") {
      LIERE_ENSURE(v.is_object(), where << ": __metadata__ is not an object");
      for (const auto& [k, s] : v.members) {
        LIERE_ENSURE(s.is_string(), where << ": metadata '" << k << "' is not a string");
        f.metadata[k] = s.text;
      }
      continue;
    }
    const Value* dt = v.find("dtype");
    const Value* sh = v.find("shape");
    const Value* off = v.find("data_offsets");
    LIERE_ENSURE(v.is_object() && dt && sh && off && dt->is_string() && sh->is_array() && off->is_array() &&
                     off->items.size() == 2,
                 where << ": tensor '" << name << "' needs dtype, shape and data_offsets [begin, end]");
    SafetensorsFile::Entry e;
    e.name = name;
    e.dtype = dt->text;
    auto to_u64 = [&](const Value& x) {
      std::uint64_t u = 0;
      LIERE_ENSURE(x.is_number() && x.text.find_first_not_of("0123456789") == std::string::npos && x.text.size() < 19 &&
                       x.to_uint64(u),
                   where << ": tensor '" << name << "': '" << x.text << "' is not a non-negative integer");
      return u;
    };
    for (const auto& d : sh->items) e.shape.push_back(std::int64_t(to_u64(d)));
    e.begin = to_u64(off->items[0]);
    e.end = to_u64(off->items[1]);
    const std::size_t es = safetensors_dtype_size(e.dtype);
    LIERE_ENSURE(es > 0, where << ": tensor '" << name << "' has unknown dtype '" << e.dtype << "'");
    std::uint64_t numel = 0;
    LIERE_ENSURE(shape_numel(e.shape, numel) && numel <= std::uint64_t(INT64_MAX) / es,
                 where << ": tensor '" << name << "' " << shape_str(e.shape) << " is too large");
    LIERE_ENSURE(e.begin <= e.end && e.end - e.begin == numel * es,
                 where << ": tensor '" << name << "' " << shape_str(e.shape) << " " << e.dtype << " needs " << numel * es
                       << " bytes, data_offsets give [" << e.begin << ", " << e.end << ")");
    expected_end = std::max(expected_end, e.end);
    f.entries.push_back(std::move(e));
  }
  LIERE_ENSURE(expected_end <= data_size, where << ": truncated: expected " << (8 + n + expected_end)
                                                << " bytes (8 + a header of " << n << " + data of " << expected_end
                                                << "), found " << size);
  // Contiguous, non-overlapping, covering the data section exactly (what safetensors itself validates).
  std::vector<const SafetensorsFile::Entry*> sorted;
  for (const auto& e : f.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
  std::size_t pos = 0;
  for (const auto* e : sorted) {
    LIERE_ENSURE(e->begin == pos, where << ": tensor '" << e->name << "' starts at data byte " << e->begin
                                        << ", expected " << pos << " (gap or overlap)");
    pos = e->end;
  }
  LIERE_ENSURE(pos == data_size, where << ": " << data_size << " data bytes, the tensors cover " << pos
                                       << (pos < data_size ? " (trailing bytes)" : " (truncated)"));
}

}  // namespace liere::io
