// data_tools/jsonl.hpp — a reader for JSON-lines metrics files: one flat JSON object per line, e.g.
//   {"epoch":1,"train_loss":2.1,"train_acc":0.31,"test_loss":1.9,"test_acc":0.35,"lr":0.001}
//
// Values are numbers, strings, true/false or null; nested objects and arrays are rejected. Blank lines are
// skipped. Besides strict JSON, numbers may be written NaN, Infinity, -Infinity (what Python's json.dumps
// writes for non-finite floats) or nan, inf, -inf, -nan (what C++ streams write). A number beyond the largest double
// (1e400) is an error, not an infinity; one below the smallest (1e-400) reads as 0, as in every JSON reader.
// Every error is a liere::Error naming "file:line:column" (1-based; the column counts bytes). The parser is
// liere/io/json.hpp's (ParseOptions::jsonl_row and allow_nonfinite); this header keeps the flat-row API.
#pragma once

#include <liere/core/config.hpp>

#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace liere::data {

// One value of a flat JSON object.
class JsonValue {
 public:
  JsonValue() = default;  // null
  JsonValue(std::nullptr_t) {}
  JsonValue(bool b) : v_(b) {}
  JsonValue(double x) : v_(x) {}
  JsonValue(std::string s) : v_(std::move(s)) {}
  JsonValue(const char* s) : v_(std::string(s)) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_number() const { return std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }

  // The value as the given type; throws liere::Error naming the actual type when it is another.
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;

  // "null", "bool", "number" or "string".
  const char* type_name() const;

  friend bool operator==(const JsonValue&, const JsonValue&) = default;

 private:
  std::variant<std::monostate, bool, double, std::string> v_;
};

using JsonObject = std::map<std::string, JsonValue>;

// Parses one line holding one flat object. `source` and `line_number` only name the place in errors.
JsonObject parse_json_object(std::string_view text, std::string_view source = "<string>", int line_number = 1);

// Reads a JSON-lines file: one object per non-blank line, in file order. With line_numbers, also the
// (1-based) line each object came from, for messages about its values. A directory is an error that says so.
std::vector<JsonObject> read_jsonl(const std::string& path, std::vector<int>* line_numbers = nullptr);
// The same from a stream; `source` names it in errors.
std::vector<JsonObject> read_jsonl(std::istream& in, std::string_view source, std::vector<int>* line_numbers = nullptr);

}  // namespace liere::data
