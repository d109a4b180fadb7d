// liere/nn/checkpoint.hpp — checkpoints as safetensors files (https://huggingface.co/docs/safetensors).
//
// Layout (all that Python's `safetensors.safe_open` / `load_file` needs):
//   bytes [0, 8)          N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)      a UTF-8 JSON object, padded with spaces so that the data starts 8-byte aligned:
//                           {"__metadata__": {"key": "string value", ...},
//                            "<tensor name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)    the data: each tensor row-major little-endian, at [begin, end) relative to the data
//                           start; tensors are contiguous, in header order, with no gaps, ending at EOF.
//
// A liere checkpoint holds the model parameters under their registry names (the state_dict keys), the
// optimizer state as "optim.<name>.m" / "optim.<name>.v" with the step count in the metadata
// ("optim.step", "optim.lr"), and whatever strings the trainer adds to the metadata (RNG state, epoch,
// config, encoding name). "format" = "liere-checkpoint-1" marks the file.
//
// Writing is atomic: the file is written to "<path>.tmp", flushed and fsync'ed, then renamed over <path>
// (and the directory fsync'ed), so an interrupted or failed write leaves the previous checkpoint intact.
// Loading reads and validates everything (header, offsets, dtypes, names, shapes, expected metadata) before
// touching the model, and every error names the file and what was expected.
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <liere/autodiff/tape.hpp>
#include <liere/config.hpp>
#include <liere/nn/module.hpp>
#include <liere/optim/adam.hpp>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

namespace liere::nn {

static_assert(std::endian::native == std::endian::little, "checkpoint.hpp writes the host's bytes: little-endian only");

using Metadata = std::map<std::string, std::string>;

// ---- a small JSON reader/writer (just what safetensors headers use) ---------------------------------------
namespace json {

struct Value {
  enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
  bool boolean = false;
  std::string text;                                  // String: the value; Number: the literal
  std::vector<Value> items;                          // Array
  std::vector<std::pair<std::string, Value>> members;  // Object, in file order

  const Value* find(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
};

inline std::string escape(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

class Parser {
 public:
  Parser(const char* begin, const char* end, std::string where) : p_(begin), end_(end), where_(std::move(where)) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (p_ != end_) fail("unexpected characters after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    LIERE_ENSURE(false, where_ << ": bad JSON header: " << what);
    std::abort();
  }
  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool consume(char c) {
    skip_ws();
    if (p_ != end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  Value parse_value(int depth) {
    if (depth > 64) fail("nested too deeply");
    skip_ws();
    if (p_ == end_) fail("unexpected end");
    Value v;
    const char c = *p_;
    if (c == '{') {
      ++p_;
      v.type = Value::Type::Object;
      if (consume('}')) return v;
      do {
        skip_ws();
        std::string key = parse_string();
        expect(':');
        v.members.emplace_back(std::move(key), parse_value(depth + 1));
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      ++p_;
      v.type = Value::Type::Array;
      if (consume(']')) return v;
      do v.items.push_back(parse_value(depth + 1));
      while (consume(','));
      expect(']');
    } else if (c == '"') {
      v.type = Value::Type::String;
      v.text = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = Value::Type::Number;
      const char* b = p_;
      while (p_ != end_ && (std::strchr("+-.eE", *p_) || (*p_ >= '0' && *p_ <= '9'))) ++p_;
      v.text.assign(b, p_);
    } else if (literal("true")) {
      v.type = Value::Type::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.type = Value::Type::Bool;
    } else if (!literal("null")) {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }
  bool literal(const char* w) {
    const std::size_t n = std::strlen(w);
    if (std::size_t(end_ - p_) >= n && std::memcmp(p_, w, n) == 0) {
      p_ += n;
      return true;
    }
    return false;
  }
  unsigned hex4() {
    if (end_ - p_ < 4) fail("short \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = *p_++;
      u = u * 16 + unsigned(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
      if (u >= 0x10000) fail("bad \\u escape");
    }
    return u;
  }
  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }
  std::string parse_string() {
    if (p_ == end_ || *p_ != '"') fail("expected a string");
    ++p_;
    std::string out;
    while (true) {
      if (p_ == end_) fail("unterminated string");
      const char c = *p_++;
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ == end_) fail("unterminated escape");
      const char e = *p_++;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
            p_ += 2;
            const unsigned lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
    return out;
  }

  const char* p_;
  const char* end_;
  std::string where_;
};

}  // namespace json

// ---- safetensors ---------------------------------------------------------------------------------------------
template <class S>
constexpr const char* safetensors_dtype() {
  if constexpr (std::is_same_v<S, float>) return "F32";
  else if constexpr (std::is_same_v<S, double>) return "F64";
  else static_assert(sizeof(S) == 0, "safetensors: only float (F32) and double (F64) tensors");
}
inline std::size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

// A tensor to write: name, shape and bytes (not owned).
struct SafetensorsRecord {
  std::string name;
  std::string dtype;
  Shape shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

template <class S>
SafetensorsRecord record(const std::string& name, const TensorT<S>& t) {
  return {name, safetensors_dtype<S>(), t.shape(), t.data(), std::size_t(t.numel()) * sizeof(S)};
}

struct SaveOptions {
  // Called after each block written to the temporary file with (bytes written, total bytes); may throw
  // (tests use it to simulate a failure in the middle of a write).
  std::function<void(std::size_t, std::size_t)> on_write;
};

namespace detail {
inline std::string errno_text() { return std::strerror(errno); }

inline std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
}

// The header JSON, padded with spaces to a multiple of 8 bytes.
inline std::string safetensors_header(const std::vector<SafetensorsRecord>& records, const Metadata& meta) {
  std::string h = "{";
  if (!meta.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : meta) {
      if (!first) h += ',';
      h += json::escape(k);
      h += ':';
      h += json::escape(v);
      first = false;
    }
    h += "}";
  }
  std::size_t offset = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    if (i > 0 || !meta.empty()) h += ',';
    h += json::escape(r.name);
    h += ":{\"dtype\":\"" + r.dtype + "\",\"shape\":[";
    for (int d = 0; d < r.shape.rank(); ++d) {
      if (d) h += ',';
      h += std::to_string(r.shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + r.bytes) + "]}";
    offset += r.bytes;
  }
  h += "}";
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
    LIERE_ENSURE(es > 0 && std::size_t(r.shape.numel()) * es == r.bytes,
                 "save_safetensors: '" << r.name << "' has " << r.bytes << " bytes for dtype " << r.dtype << " and shape "
                                       << r.shape);
    for (std::size_t j = 0; j < i; ++j)
      LIERE_ENSURE(records[j].name != r.name, "save_safetensors: tensor '" << r.name << "' appears twice");
  }
  const std::string header = detail::safetensors_header(records, meta);
  const std::uint64_t n = header.size();
  std::size_t total = 8 + header.size();
  for (const auto& r : records) total += r.bytes;

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LIERE_ENSURE(fd >= 0, "save_safetensors: cannot create '" << tmp << "': " << detail::errno_text());
  std::size_t written = 0;
  auto put = [&](const void* p, std::size_t bytes) {
    const char* c = static_cast<const char*>(p);
    while (bytes > 0) {
      const std::size_t chunk = std::min<std::size_t>(bytes, std::size_t(1) << 24);
      const ssize_t w = ::write(fd, c, chunk);
      if (w < 0 && errno == EINTR) continue;
      LIERE_ENSURE(w > 0, "save_safetensors: writing '" << tmp << "' failed after " << written << " of " << total
                                                         << " bytes: " << detail::errno_text());
      c += w;
      bytes -= std::size_t(w);
      written += std::size_t(w);
      if (opt.on_write) opt.on_write(written, total);
    }
  };
  try {
    put(&n, 8);
    put(header.data(), header.size());
    for (const auto& r : records) put(r.data, r.bytes);
    LIERE_ENSURE(::fsync(fd) == 0, "save_safetensors: fsync of '" << tmp << "' failed: " << detail::errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string err = detail::errno_text();
    ::unlink(tmp.c_str());
    LIERE_ENSURE(false, "save_safetensors: closing '" << tmp << "' failed: " << err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = detail::errno_text();
    ::unlink(tmp.c_str());
    LIERE_ENSURE(false, "save_safetensors: cannot rename '" << tmp << "' to '" << path << "': " << err);
  }
  // Make the rename itself durable.
  const int dfd = ::open(detail::directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// A parsed safetensors file: the header entries (in file order), the metadata and the data bytes.
struct SafetensorsFile {
  struct Entry {
    std::string name;
    std::string dtype;
    Shape shape;
    std::size_t begin = 0, end = 0;  // relative to the data section
  };
  std::string path;
  std::vector<Entry> entries;
  Metadata metadata;
  std::vector<char> data;

  const Entry* find(const std::string& name) const {
    for (const auto& e : entries)
      if (e.name == name) return &e;
    return nullptr;
  }
  // Copies tensor `name` into t (same shape and scalar type required).
  template <class S>
  void read_into(const std::string& name, const TensorT<S>& t) const {
    const Entry* e = find(name);
    LIERE_ENSURE(e, "'" << path << "': no tensor '" << name << "'");
    LIERE_ENSURE(e->dtype == safetensors_dtype<S>(),
                 "'" << path << "': " << name << ": dtype " << e->dtype << ", expected " << safetensors_dtype<S>());
    LIERE_ENSURE(e->shape == t.shape(), name << ": checkpoint " << e->shape << " != model " << t.shape());
    std::memcpy(t.data(), data.data() + e->begin, e->end - e->begin);
  }
  template <class S>
  TensorT<S> tensor(const std::string& name) const {
    const Entry* e = find(name);
    LIERE_ENSURE(e, "'" << path << "': no tensor '" << name << "'");
    TensorT<S> t(e->shape);
    read_into(name, t);
    return t;
  }
};

// Reads and validates a whole safetensors file.
inline SafetensorsFile load_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.path = path;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  LIERE_ENSURE(in, "checkpoint '" << path << "': cannot open: " << detail::errno_text());
  const std::streamoff size = in.tellg();
  in.seekg(0);
  LIERE_ENSURE(size >= 8, "checkpoint '" << path << "': truncated: " << size
                                         << " bytes, expected at least the 8-byte header length of a safetensors file");
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  LIERE_ENSURE(n >= 2 && n <= (std::uint64_t(100) << 20),
               "checkpoint '" << path << "': not a safetensors file (header length " << n << ")");
  LIERE_ENSURE(std::uint64_t(size) >= 8 + n, "checkpoint '" << path << "': truncated: the header needs " << n
                                                            << " bytes after the first 8, the file has " << size
                                                            << " bytes in all");
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  const std::size_t data_size = std::size_t(size) - 8 - std::size_t(n);
  f.data.resize(data_size);
  in.read(f.data.data(), std::streamsize(data_size));
  LIERE_ENSURE(in, "checkpoint '" << path << "': read error");

  const std::string where = "checkpoint '" + path + "'";
  LIERE_ENSURE(header[0] == '{', where << ": not a safetensors file (the header does not start with '{')");
  const json::Value root = json::Parser(header.data(), header.data() + header.size(), where).parse_document();
  LIERE_ENSURE(root.type == json::Value::Type::Object, where << ": the header is not a JSON object");
  std::size_t expected_end = 0;
  for (const auto& [name, v] : root.members) {
    if (name == "__metadata__") {
      LIERE_ENSURE(v.type == json::Value::Type::Object, where << ": __metadata__ is not an object");
      for (const auto& [k, s] : v.members) {
        LIERE_ENSURE(s.type == json::Value::Type::String, where << ": metadata '" << k << "' is not a string");
        f.metadata[k] = s.text;
      }
      continue;
    }
    const json::Value* dt = v.find("dtype");
    const json::Value* sh = v.find("shape");
    const json::Value* off = v.find("data_offsets");
    LIERE_ENSURE(v.type == json::Value::Type::Object && dt && sh && off && dt->type == json::Value::Type::String &&
                     sh->type == json::Value::Type::Array && off->type == json::Value::Type::Array &&
                     off->items.size() == 2,
                 where << ": tensor '" << name << "' needs dtype, shape and data_offsets [begin, end]");
    SafetensorsFile::Entry e;
    e.name = name;
    e.dtype = dt->text;
    auto to_u64 = [&](const json::Value& x) {
      LIERE_ENSURE(x.type == json::Value::Type::Number && !x.text.empty() &&
                       x.text.find_first_not_of("0123456789") == std::string::npos && x.text.size() < 19,
                   where << ": tensor '" << name << "': '" << x.text << "' is not a non-negative integer");
      return std::uint64_t(std::stoull(x.text));
    };
    LIERE_ENSURE(int(sh->items.size()) <= Shape::kMaxRank,
                 where << ": tensor '" << name << "' has " << sh->items.size() << " dimensions (at most "
                       << Shape::kMaxRank << ")");
    for (const auto& d : sh->items) e.shape.push_back(Index(to_u64(d)));
    e.begin = to_u64(off->items[0]);
    e.end = to_u64(off->items[1]);
    const std::size_t es = safetensors_dtype_size(e.dtype);
    LIERE_ENSURE(es > 0, where << ": tensor '" << name << "' has unknown dtype '" << e.dtype << "'");
    LIERE_ENSURE(e.begin <= e.end && e.end - e.begin == std::size_t(e.shape.numel()) * es,
                 where << ": tensor '" << name << "' " << e.shape << " " << e.dtype << " needs "
                       << std::size_t(e.shape.numel()) * es << " bytes, data_offsets give [" << e.begin << ", " << e.end
                       << ")");
    expected_end = std::max(expected_end, e.end);
    f.entries.push_back(std::move(e));
  }
  LIERE_ENSURE(expected_end <= data_size, where << ": truncated: expected " << (8 + n + expected_end)
                                                << " bytes (8 + a header of " << n << " + data of " << expected_end
                                                << "), found " << size);
  // Contiguous, non-overlapping, covering the data section exactly (what safetensors itself validates).
  std::vector<const SafetensorsFile::Entry*> sorted;
  for (const auto& e : f.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
  std::size_t pos = 0;
  for (const auto* e : sorted) {
    LIERE_ENSURE(e->begin == pos, where << ": tensor '" << e->name << "' starts at data byte " << e->begin
                                        << ", expected " << pos << " (gap or overlap)");
    pos = e->end;
  }
  LIERE_ENSURE(pos == data_size, where << ": " << data_size << " data bytes, the tensors cover " << pos
                                       << (pos < data_size ? " (trailing bytes)" : " (truncated)"));
  return f;
}

// ---- checkpoints of a model (+ optimizer) ------------------------------------------------------------------
inline constexpr const char* kCheckpointFormat = "liere-checkpoint-1";

// Saves every parameter, the optimizer state (when given) and `meta` (RNG state, epoch, config, ...).
template <class S>
void save_checkpoint(const std::string& path, const ParamsT<S>& params, const std::type_identity_t<optim::AdamT<S>>* opt,
                     Metadata meta = {}, const SaveOptions& so = {}) {
  std::vector<SafetensorsRecord> records;
  for (const auto& p : params) records.push_back(record(p.name(), p.value()));
  if (opt) {
    for (const auto& s : opt->states()) {
      records.push_back(record("optim." + s.param.name() + ".m", s.m));
      records.push_back(record("optim." + s.param.name() + ".v", s.v));
    }
    meta["optim.step"] = std::to_string(opt->steps());
    std::ostringstream lr;
    lr.precision(17);
    lr << opt->lr();
    meta["optim.lr"] = lr.str();
  }
  meta["format"] = kCheckpointFormat;
  save_safetensors(path, records, meta, so);
}

struct LoadOptions {
  // Metadata that must be present with exactly these values, e.g. {{"encoding", "rope-mixed"}, {"config", ...}}.
  Metadata expect;
  bool load_optimizer = true;  // read optim.* into the optimizer (when one is given)
  bool strict = true;          // every model parameter present, and no unknown parameter tensor
};

// Loads parameters (and optimizer state) from a file read by load_safetensors, after validating it;
// returns the metadata.
template <class S>
Metadata load_checkpoint(const SafetensorsFile& f, const ParamsT<S>& params, std::type_identity_t<optim::AdamT<S>>* opt = nullptr,
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
    LIERE_ENSURE(e->shape == t.shape(), name << ": checkpoint " << e->shape << " != model " << t.shape() << " (" << path
                                             << ")");
    return true;
  };
  for (const auto& p : params) check(p.name(), p.value(), lo.strict);
  if (lo.strict)
    for (const auto& e : f.entries)
      LIERE_ENSURE(e.name.rfind("optim.", 0) == 0 || params.contains(e.name),
                   "checkpoint '" << path << "' has tensor '" << e.name << "' " << e.shape
                                  << " that the model does not have");
  const bool with_opt = opt && lo.load_optimizer;
  if (with_opt) {
    LIERE_ENSURE(f.metadata.count("optim.step"),
                 "checkpoint '" << path << "' has no optimizer state (metadata optim.step missing)");
    for (const auto& s : opt->states()) {
      check("optim." + s.param.name() + ".m", s.m, true);
      check("optim." + s.param.name() + ".v", s.v, true);
    }
  }
  // Everything checked: now copy.
  for (const auto& p : params)
    if (f.find(p.name())) f.read_into(p.name(), p.value());
  if (with_opt) {
    for (auto& s : opt->states()) {
      f.read_into("optim." + s.param.name() + ".m", s.m);
      f.read_into("optim." + s.param.name() + ".v", s.v);
    }
    opt->set_steps(std::stoll(f.metadata.at("optim.step")));
    if (auto it = f.metadata.find("optim.lr"); it != f.metadata.end()) opt->set_lr(std::stod(it->second));
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
