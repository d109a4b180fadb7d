// liere/io/json.hpp — the one JSON writer and the one JSON reader of liere (checkpoint headers, metrics,
// summaries, predictions tables, diagnostics, benchmarks, plot_metrics' input).
//
// Writing: Writer builds a document front to back,
//   Writer w;                                   // Style::compact: {"epoch":1,"loss":0.5,"pe":"liere"}
//   w.begin_object().member("epoch", 1).member("loss", 0.5).member("pe", "liere").end_object();
//   w.str();
// Style::pretty puts one object member per line, indented by two spaces per level ({\n  "epoch": 1,\n ...\n});
// arrays, and objects inside arrays, stay on one line. Strings are escaped: '"', '\\' and every control
// character (U+0000–U+001F as \b \f \n \r \t or \u00XX); other bytes, UTF-8 included, are written as they are.
// Numbers: integers exactly; double and float in their shortest round-trip form (std::to_chars: 0.1, 1e-05,
// 3); NaN and ±Inf as null, so that every document is strict JSON.
//
// Reading: parse(text, options) returns a Value tree; the parser is strict (RFC 8259): no trailing commas,
// no comments, no leading zeros, no raw control characters in strings, \u escapes with surrogate pairs (a
// lone surrogate is an error), duplicate object keys refused, nesting at most options.max_depth levels.
// Every error is a ParseError (a liere::Error) whose text names the place as "source:line:column: what"
// (1-based; the column counts bytes), e.g. "runs/a.jsonl:7:8: expected a string key".
// ParseOptions::allow_nonfinite also accepts NaN, Infinity, -Infinity (Python's json.dumps) and nan, inf,
// -inf, -nan (C++ streams) as numbers; ParseOptions::jsonl_row reads one row of a JSON-lines file (one flat
// object on one line: nested objects and arrays are refused, and errors speak of the end of the line).
#pragma once

#include <liere/core/config.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace liere::io::json {

// ==== writing ==============================================================================================

namespace detail {
// The two-character escapes: the letter after the backslash and the character it stands for ("\/" is read,
// never written).
inline constexpr std::pair<char, char> kEscapes[] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'},  {'b', '\b'},
                                                     {'f', '\f'}, {'n', '\n'},  {'r', '\r'}, {'t', '\t'}};
}  // namespace detail

// Appends s as a JSON string literal, quotes included.
inline void append_quoted(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && ch != '"' && ch != '\\') {
      out += ch;
      continue;
    }
    char letter = 0;
    for (const auto& [l, value] : detail::kEscapes)
      if (value == ch && l != '/') letter = l;
    if (letter) {
      out += '\\';
      out += letter;
    } else {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  out += '"';
}

// s as a JSON string literal, quotes included.
inline std::string quote(std::string_view s) {
  std::string out;
  append_quoted(out, s);
  return out;
}

// Appends a number: integers exactly, floating point in its shortest round-trip form, NaN and ±Inf as null.
template <class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
void append_number(std::string& out, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(x)) {
      out += "null";
      return;
    }
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out.append(buf, r.ptr);
}

// The number as JSON text (see append_number).
template <class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
std::string number(T x) {
  std::string out;
  append_number(out, x);
  return out;
}

enum class Style { compact, pretty };

struct Value;

// Builds one JSON document front to back; misuse (a value without its key inside an object, a key outside
// one, an unbalanced end_*) is a liere::Error.
class Writer {
 public:
  explicit Writer(Style style = Style::compact) : style_(style) {}

  Writer& begin_object() { return open('{', true); }
  Writer& end_object() { return close('}', true); }
  Writer& begin_array() { return open('[', false); }
  Writer& end_array() { return close(']', false); }

  // The key of the next object member.
  Writer& key(std::string_view k) {
    LIERE_ENSURE(!stack_.empty() && stack_.back().object && !key_pending_,
                 "json::Writer: key '" << k << "' outside an object or after another key");
    Level& top = stack_.back();
    if (top.count++) out_ += ',';
    if (top.pretty) newline(stack_.size());
    append_quoted(out_, k);
    out_ += top.pretty ? ": " : ":";
    key_pending_ = true;
    return *this;
  }

  Writer& null() {
    before_value();
    out_ += "null";
    return *this;
  }
  Writer& value(std::nullptr_t) { return null(); }
  Writer& value(bool b) {
    before_value();
    out_ += b ? "true" : "false";
    return *this;
  }
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
  Writer& value(T x) {
    before_value();
    append_number(out_, x);
    return *this;
  }
  Writer& value(std::string_view s) {
    before_value();
    append_quoted(out_, s);
    return *this;
  }
  Writer& value(const char* s) { return value(std::string_view(s)); }
  Writer& value(const std::string& s) { return value(std::string_view(s)); }
  // A parsed tree (numbers keep the literal they were read from).
  Writer& value(const Value& v);
  // An array of numbers on one line.
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
  Writer& value(const std::vector<T>& xs) {
    begin_array();
    for (const T& x : xs) value(x);
    return end_array();
  }
  // Text that is already JSON (one complete value), written as it is.
  Writer& raw(std::string_view json) {
    before_value();
    out_ += json;
    return *this;
  }

  // key(k).value(v).
  template <class T>
  Writer& member(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  // Whether the document is complete (one value, every container closed).
  bool complete() const { return stack_.empty() && done_; }
  // The text so far.
  const std::string& str() const { return out_; }
  // The finished document; the writer is empty afterwards.
  std::string take() {
    LIERE_ENSURE(complete(), "json::Writer: the document is not complete (" << stack_.size() << " open containers)");
    done_ = false;
    return std::move(out_);
  }

 private:
  struct Level {
    bool object;
    bool pretty;
    std::size_t count;
  };

  void before_value() {
    if (stack_.empty()) {
      LIERE_ENSURE(!done_, "json::Writer: a second value after a complete document");
      done_ = true;
      return;
    }
    Level& top = stack_.back();
    if (top.object) {
      LIERE_ENSURE(key_pending_, "json::Writer: a value inside an object needs a key first");
      key_pending_ = false;
    } else if (top.count++) {
      out_ += ',';
    }
  }
  Writer& open(char c, bool object) {
    before_value();
    // Pretty layout only for objects that are not inside an array.
    const bool in_array = !stack_.empty() && !stack_.back().object;
    const bool parent_pretty = stack_.empty() ? style_ == Style::pretty : stack_.back().pretty;
    stack_.push_back({object, object && parent_pretty && !in_array, 0});
    out_ += c;
    return *this;
  }
  Writer& close(char c, bool object) {
    LIERE_ENSURE(!stack_.empty() && stack_.back().object == object && !key_pending_,
                 "json::Writer: '" << c << "' does not close an open " << (object ? "object" : "array")
                                   << (key_pending_ ? " (a key has no value)" : ""));
    const Level top = stack_.back();
    stack_.pop_back();
    if (top.pretty && top.count) newline(stack_.size());
    out_ += c;
    return *this;
  }
  void newline(std::size_t depth) {
    out_ += '\n';
    out_.append(2 * depth, ' ');
  }

  Style style_;
  std::string out_;
  std::vector<Level> stack_;
  bool key_pending_ = false;
  bool done_ = false;
};

// ==== reading ==============================================================================================

// A parsed JSON value. Numbers keep their literal (`text`) besides the double (`number`), so that integers
// beyond 2^53 can be read exactly (to_uint64, to_int64).
struct Value {
  enum class Type { null, boolean, number, string, array, object };

  Type type = Type::null;
  bool boolean = false;
  double number = 0;                                   // number: the value (±inf or 0 when out of range)
  std::string text;                                    // string: the value (UTF-8); number: the literal
  std::vector<Value> items;                            // array
  std::vector<std::pair<std::string, Value>> members;  // object, in document order
  int line = 0, column = 0;                            // where the value starts (1-based), for messages

  // Declared here and defaulted after the class: with clang and libstdc++, an implicit destructor makes the
  // std::pair<std::string, Value> of `members` be instantiated while Value is still incomplete (a hard error).
  Value() = default;
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();

  bool is_null() const { return type == Type::null; }
  bool is_bool() const { return type == Type::boolean; }
  bool is_number() const { return type == Type::number; }
  bool is_string() const { return type == Type::string; }
  bool is_array() const { return type == Type::array; }
  bool is_object() const { return type == Type::object; }

  // The member `key` of an object, or nullptr.
  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }

  // "null", "bool", "number", "string", "array" or "object".
  const char* type_name() const {
    switch (type) {
      case Type::null: return "null";
      case Type::boolean: return "bool";
      case Type::number: return "number";
      case Type::string: return "string";
      case Type::array: return "array";
      case Type::object: return "object";
    }
    return "?";
  }

  // A number written as a plain integer that fits the type: the value; anything else: false.
  bool to_uint64(std::uint64_t& out) const { return to_integer(out); }
  bool to_int64(std::int64_t& out) const { return to_integer(out); }

 private:
  template <class I>
  bool to_integer(I& out) const {
    if (type != Type::number || text.empty()) return false;
    const char* end = text.data() + text.size();
    const auto r = std::from_chars(text.data(), end, out);
    return r.ec == std::errc() && r.ptr == end;
  }
};

inline Value::Value(const Value&) = default;
inline Value::Value(Value&&) noexcept = default;
inline Value& Value::operator=(const Value&) = default;
inline Value& Value::operator=(Value&&) noexcept = default;
inline Value::~Value() = default;

// A syntax error: what() is "source:line:column: message".
class ParseError : public Error {
 public:
  ParseError(std::string source, int line, int column, std::string message)
      : Error(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
        source_(std::move(source)),
        message_(std::move(message)),
        line_(line),
        column_(column) {}

  const std::string& source() const { return source_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  std::string source_, message_;
  int line_, column_;
};

struct ParseOptions {
  std::string source = "<string>";  // names the text in errors (a file name)
  int first_line = 1;               // the line number of the text's first line
  int max_depth = 64;               // objects and arrays nested deeper are an error
  bool allow_nonfinite = false;     // NaN, Infinity, -Infinity, nan, inf, -inf, -nan as numbers
  bool jsonl_row = false;           // one row of a JSON-lines file: a flat object on one line
};

namespace detail {

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& opt) : s_(text), opt_(opt), line_(opt.first_line) {}

  Value document() {
    skip_space();
    if (opt_.jsonl_row && peek() != '{') expect('{', "'{' to start an object");
    Value v = value(0);
    skip_space();
    if (!at_end()) fail(opt_.jsonl_row ? "unexpected text after the object" : "unexpected text after the JSON value");
    return v;
  }

 private:
  std::string_view s_;
  const ParseOptions& opt_;
  std::size_t pos_ = 0;
  int line_;                    // the line of pos_
  std::size_t line_start_ = 0;  // where that line starts

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  const char* end_name() const { return opt_.jsonl_row ? "unexpected end of line" : "unexpected end of input"; }

  // Line and column of byte `pos`: from the current line when pos is on it (newlines only occur in white
  // space, which skip_space counts), else by counting from the start (an error about an earlier place).
  void locate(std::size_t pos, int& line, int& column) const {
    std::size_t line_start = line_start_;
    line = line_;
    if (pos < line_start_) {
      line = opt_.first_line;
      line_start = 0;
      for (std::size_t i = 0; i < pos; ++i)
        if (s_[i] == '\n') ++line, line_start = i + 1;
    }
    column = int(pos - line_start) + 1;
  }
  [[noreturn]] void fail_at(std::size_t pos, const std::string& msg) const {
    int line = 0, column = 0;
    locate(pos, line, column);
    throw ParseError(opt_.source, line, column, msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }

  void skip_space() {
    for (; !at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n'); ++pos_)
      if (s_[pos_] == '\n') ++line_, line_start_ = pos_ + 1;
  }
  void expect(char c, const char* what) {
    if (peek() != c) fail(at_end() ? std::string(end_name()) + ": expected " + what : std::string("expected ") + what);
    ++pos_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    Value v;
    locate(pos_, v.line, v.column);
    const char c = peek();
    if (c == '{' || c == '[') {
      if (opt_.jsonl_row && depth > 0) fail("nested objects and arrays are not supported (flat objects only)");
      if (depth >= opt_.max_depth) fail("nested too deeply (more than " + std::to_string(opt_.max_depth) + " levels)");
      ++pos_;
      if (c == '{') object(v, depth);
      else array(v, depth);
      return v;
    }
    if (c == '"') {
      v.type = Value::Type::string;
      v.text = string();
      return v;
    }
    if (consume("true")) {
      v.type = Value::Type::boolean;
      v.boolean = true;
      return v;
    }
    if (consume("false")) {
      v.type = Value::Type::boolean;
      return v;
    }
    if (consume("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9') ||
        (opt_.allow_nonfinite && (c == 'N' || c == 'I' || c == 'n' || c == 'i'))) {
      number(v);
      return v;
    }
    if (at_end()) fail(std::string(end_name()) + ": expected a value");
    fail(opt_.jsonl_row ? "expected a value (number, string, true, false or null)"
                        : "expected a value (object, array, number, string, true, false or null)");
  }

  // The members of an object or the items of an array after its opening bracket: `item` reads one, and
  // they are separated by ',' until `close`.
  template <class Item>
  void sequence(char close, Item&& item) {
    skip_space();
    if (peek() == close) {
      ++pos_;
      return;
    }
    const std::string expected = std::string("expected ',' or '") + close + "'";
    for (;;) {
      skip_space();
      item();
      skip_space();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() == close) {
        ++pos_;
        return;
      } else {
        fail(at_end() ? std::string(end_name()) + ": " + expected : expected);
      }
    }
  }

  void object(Value& v, int depth) {
    v.type = Value::Type::object;
    std::unordered_set<std::string> keys;
    sequence('}', [&] {
      if (peek() != '"') fail("expected a string key");
      const std::size_t key_pos = pos_;
      std::string key = string();
      if (!keys.insert(key).second) fail_at(key_pos, "duplicate key");
      skip_space();
      expect(':', "':' after the key");
      skip_space();
      v.members.emplace_back(std::move(key), value(depth + 1));
    });
  }

  void array(Value& v, int depth) {
    v.type = Value::Type::array;
    sequence(']', [&] { v.items.push_back(value(depth + 1)); });
  }

  void number(Value& v) {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    v.type = Value::Type::number;
    const std::size_t start = pos_;
    if (opt_.allow_nonfinite) {
      // The non-finite spellings of Python (NaN, Infinity) and of C++ streams (nan, inf).
      for (auto [word, x] : {std::pair<std::string_view, double>{"NaN", kNaN},
                             {"-NaN", kNaN},
                             {"nan", kNaN},
                             {"-nan", kNaN},
                             {"Infinity", kInf},
                             {"-Infinity", -kInf},
                             {"inf", kInf},
                             {"-inf", -kInf}}) {
        if (consume(word)) {
          check_number_end(start);
          v.number = x;
          v.text = word;
          return;
        }
      }
    }
    // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    auto digits = [&] {
      const std::size_t d = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("invalid number: leading zeros are not allowed");
    } else if (digits() == 0) {
      fail("invalid number: expected a digit");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("invalid number: expected a digit after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("invalid number: expected a digit in the exponent");
    }
    check_number_end(start);
    v.text = s_.substr(start, pos_ - start);
    const auto r = std::from_chars(s_.data() + start, s_.data() + pos_, v.number);
    // from_chars reports out-of-range (1e999, 1e-999) as an error; JSON readers commonly give ±inf or 0.
    if (r.ec == std::errc::result_out_of_range) {
      const bool tiny = v.text.find("e-") != std::string::npos || v.text.find("E-") != std::string::npos;
      v.number = tiny ? 0.0 : (v.text[0] == '-' ? -kInf : kInf);
    } else if (r.ec != std::errc() || r.ptr != s_.data() + pos_) {
      fail_at(start, "invalid number");
    }
  }

  // A number must be followed by a separator, so that "1x" or "nanx" is an error at the right place.
  void check_number_end(std::size_t start) {
    const char c = peek();
    const bool separator = at_end() || c == ',' || c == '}' || (c == ']' && !opt_.jsonl_row) || c == ' ' ||
                           c == '\t' || c == '\r' || c == '\n';
    if (!separator) fail("invalid number '" + std::string(s_.substr(start, pos_ - start + 1)) + "...'");
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
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

  std::uint32_t hex4() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("invalid \\u escape: expected 4 hex digits");
      v = v * 16 + std::uint32_t(d);
      ++pos_;
    }
    return v;
  }

  std::string string() {
    const std::size_t open = pos_;
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail_at(open, "unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string (escape it)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      const std::size_t esc = pos_;
      ++pos_;
      if (at_end()) fail_at(open, "unterminated string");
      const char e = s_[pos_++];
      if (e != 'u') {
        const auto* it = std::find_if(std::begin(kEscapes), std::end(kEscapes), [e](const auto& x) { return x.first == e; });
        if (it == std::end(kEscapes)) fail_at(esc, std::string("invalid escape '\\") + e + "'");
        out += it->second;
        continue;
      }
      std::uint32_t cp = hex4();
      if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate: a low one must follow
        if (!consume("\\u")) fail_at(esc, "invalid \\u escape: high surrogate without a low one");
        const std::uint32_t lo = hex4();
        if (lo < 0xDC00 || lo > 0xDFFF) fail_at(esc, "invalid \\u escape: high surrogate without a low one");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail_at(esc, "invalid \\u escape: lone low surrogate");
      }
      append_utf8(out, cp);
    }
  }
};

}  // namespace detail

// Parses one JSON document (leading and trailing white space allowed).
inline Value parse(std::string_view text, const ParseOptions& opt = {}) { return detail::Parser(text, opt).document(); }

// ==== a parsed tree as text ===============================================================================

inline Writer& Writer::value(const Value& v) {
  switch (v.type) {
    case Value::Type::null: return null();
    case Value::Type::boolean: return value(v.boolean);
    case Value::Type::number:
      if (!std::isfinite(v.number)) return null();
      return v.text.empty() ? value(v.number) : raw(v.text);
    case Value::Type::string: return value(std::string_view(v.text));
    case Value::Type::array:
      begin_array();
      for (const Value& x : v.items) value(x);
      return end_array();
    case Value::Type::object:
      begin_object();
      for (const auto& [k, x] : v.members) member(k, x);
      return end_object();
  }
  return *this;
}

// The tree as a JSON document.
inline std::string write(const Value& v, Style style = Style::compact) {
  Writer w(style);
  w.value(v);
  return w.take();
}

}  // namespace liere::io::json
