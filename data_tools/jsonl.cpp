// data_tools/jsonl.cpp — a recursive-descent parser for one flat JSON object per line.
#include <data_tools/jsonl.hpp>

#include <liere/config.hpp>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>

namespace liere::data {

bool JsonValue::as_bool() const {
  LIERE_ENSURE(is_bool(), "JsonValue: expected a bool, got a " << type_name());
  return std::get<bool>(v_);
}

double JsonValue::as_number() const {
  LIERE_ENSURE(is_number(), "JsonValue: expected a number, got a " << type_name());
  return std::get<double>(v_);
}

const std::string& JsonValue::as_string() const {
  LIERE_ENSURE(is_string(), "JsonValue: expected a string, got a " << type_name());
  return std::get<std::string>(v_);
}

const char* JsonValue::type_name() const {
  if (is_null()) return "null";
  if (is_bool()) return "bool";
  if (is_number()) return "number";
  return "string";
}

namespace {

// The parser keeps a cursor into one line; every error names source:line:column (1-based, in bytes).
class Parser {
 public:
  Parser(std::string_view text, std::string_view source, int line) : s_(text), source_(source), line_(line) {}

  JsonObject object() {
    skip_space();
    expect('{', "'{' to start an object");
    JsonObject obj;
    skip_space();
    if (peek() == '}') {
      ++pos_;
    } else {
      for (;;) {
        skip_space();
        if (peek() != '"') fail("expected a string key");
        const std::size_t key_pos = pos_;
        std::string key = string();
        skip_space();
        expect(':', "':' after the key");
        skip_space();
        JsonValue v = value();
        if (!obj.emplace(std::move(key), std::move(v)).second) fail_at(key_pos, "duplicate key");
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == '}') {
          ++pos_;
          break;
        }
        fail(at_end() ? "unexpected end of line: expected ',' or '}'" : "expected ',' or '}'");
      }
    }
    skip_space();
    if (!at_end()) fail("unexpected text after the object");
    return obj;
  }

 private:
  std::string_view s_;
  std::string_view source_;
  int line_;
  std::size_t pos_ = 0;

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  [[noreturn]] void fail_at(std::size_t pos, const std::string& msg) const {
    throw Error(std::string(source_) + ":" + std::to_string(line_) + ":" + std::to_string(pos + 1) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }

  void skip_space() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) ++pos_;
  }

  void expect(char c, const char* what) {
    if (peek() != c)
      fail(at_end() ? std::string("unexpected end of line: expected ") + what : std::string("expected ") + what);
    ++pos_;
  }

  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue value() {
    const char c = peek();
    if (c == '"') return JsonValue(string());
    if (c == '{' || c == '[') fail("nested objects and arrays are not supported (flat objects only)");
    if (consume("true")) return JsonValue(true);
    if (consume("false")) return JsonValue(false);
    if (consume("null")) return JsonValue();
    if (c == '-' || (c >= '0' && c <= '9') || c == 'N' || c == 'I' || c == 'n' || c == 'i') return number();
    if (at_end()) fail("unexpected end of line: expected a value");
    fail("expected a value (number, string, true, false or null)");
  }

  JsonValue number() {
    constexpr double kInf = std::numeric_limits<double>::infinity();
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    const std::size_t start = pos_;
    // The non-finite spellings of Python (NaN, Infinity) and of C++ streams (nan, inf).
    for (auto [word, v] : {std::pair<std::string_view, double>{"NaN", kNaN},
                           {"-NaN", kNaN},
                           {"nan", kNaN},
                           {"-nan", kNaN},
                           {"Infinity", kInf},
                           {"-Infinity", -kInf},
                           {"inf", kInf},
                           {"-inf", -kInf}}) {
      if (consume(word)) {
        check_number_end(start);
        return JsonValue(v);
      }
    }
    // Strict JSON grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
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
    double x = 0;
    const auto r = std::from_chars(s_.data() + start, s_.data() + pos_, x);
    // from_chars reports out-of-range (1e999) as an error; JSON readers commonly give ±inf or 0 there.
    if (r.ec == std::errc::result_out_of_range) {
      const std::string_view t = s_.substr(start, pos_ - start);
      const bool tiny = t.find("e-") != std::string_view::npos || t.find("E-") != std::string_view::npos;
      x = tiny ? 0.0 : (t[0] == '-' ? -kInf : kInf);
    } else if (r.ec != std::errc() || r.ptr != s_.data() + pos_) {
      fail_at(start, "invalid number");
    }
    return JsonValue(x);
  }

  // A number must be followed by a separator, so that "1x" or "nanx" is an error at the right place.
  void check_number_end(std::size_t start) {
    const char c = peek();
    if (!(at_end() || c == ',' || c == '}' || c == ' ' || c == '\t' || c == '\r' || c == '\n'))
      fail("invalid number '" + std::string(s_.substr(start, pos_ - start + 1)) + "...'");
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
          break;
        }
        default: fail_at(esc, std::string("invalid escape '\\") + e + "'");
      }
    }
  }
};

}  // namespace

JsonObject parse_json_object(std::string_view text, std::string_view source, int line_number) {
  return Parser(text, source, line_number).object();
}

std::vector<JsonObject> read_jsonl(const std::string& path, std::vector<int>* line_numbers) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file for reading");
  std::vector<JsonObject> rows;
  if (line_numbers) line_numbers->clear();
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte-order mark
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    rows.push_back(parse_json_object(line, path, n));
    if (line_numbers) line_numbers->push_back(n);
  }
  return rows;
}

}  // namespace liere::data
