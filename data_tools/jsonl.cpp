// data_tools/jsonl.cpp — JSON-lines rows read with liere/io/json.hpp (ParseOptions::jsonl_row).
#include <data_tools/jsonl.hpp>

#include <liere/core/config.hpp>
#include <liere/io/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

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

JsonObject parse_json_object(std::string_view text, std::string_view source, int line_number) {
  io::json::ParseOptions opt;
  opt.source = std::string(source);
  opt.first_line = line_number;
  opt.allow_nonfinite = true;
  opt.jsonl_row = true;
  const io::json::Value row = io::json::parse(text, opt);
  JsonObject obj;
  for (const auto& [key, v] : row.members) {
    JsonValue& out = obj[key];  // keys are unique: the parser refuses duplicates
    switch (v.type) {
      case io::json::Value::Type::boolean: out = JsonValue(v.boolean); break;
      case io::json::Value::Type::number:
        // The parser reads a literal beyond the largest double (1e400) as ±inf; in a metrics file that is a value
        // no double holds, not an infinity (written Infinity or inf, with an 'I' or 'i').
        if (std::isinf(v.number) && v.text.find_first_of("Ii") == std::string::npos)
          throw io::json::ParseError(opt.source, v.line, v.column,
                                     "the number " + v.text + " is out of the range of a double (largest "
                                     "1.7976931348623157e+308; write Infinity for an infinite value)");
        out = JsonValue(v.number);
        break;
      case io::json::Value::Type::string: out = JsonValue(v.text); break;
      default: break;  // null (objects and arrays are refused by jsonl_row)
    }
  }
  return obj;
}

std::vector<JsonObject> read_jsonl(const std::string& path, std::vector<int>* line_numbers) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a JSON-lines file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file for reading: " + std::strerror(errno));
  return read_jsonl(in, path, line_numbers);
}

std::vector<JsonObject> read_jsonl(std::istream& in, std::string_view source, std::vector<int>* line_numbers) {
  std::vector<JsonObject> rows;
  if (line_numbers) line_numbers->clear();
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);  // a UTF-8 byte-order mark
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    rows.push_back(parse_json_object(line, source, n));
    if (line_numbers) line_numbers->push_back(n);
  }
  return rows;
}

}  // namespace liere::data
