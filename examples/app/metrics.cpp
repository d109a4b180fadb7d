// examples/app/metrics.cpp — metrics rows, summaries and predictions files (formats in metrics.hpp).
#include <app/metrics.hpp>

#include <liere/core/config.hpp>
#include <liere/io/atomic_file.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace liere::train {

void MetricValue::write(io::json::Writer& w) const {
  switch (kind_) {
    case Kind::null: w.null(); return;
    case Kind::boolean: w.value(b_); return;
    case Kind::integer: w.value(i_); return;
    case Kind::number:
      if (single_) w.value(float(x_));
      else w.value(x_);
      return;
    case Kind::string: w.value(s_); return;
    case Kind::array:
      w.begin_array();
      for (const double x : a_) {
        if (single_) w.value(float(x));
        else w.value(x);
      }
      w.end_array();
      return;
  }
}

std::string MetricValue::json() const {
  io::json::Writer w;
  write(w);
  return w.take();
}

std::string to_json(const Metrics& fields, bool pretty) {
  io::json::Writer w(pretty ? io::json::Style::pretty : io::json::Style::compact);
  w.begin_object();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [key, value] = fields[i];
    LIERE_ENSURE(!key.empty(), "to_json: field " << i << " has an empty key");
    for (std::size_t j = 0; j < i; ++j)
      LIERE_ENSURE(fields[j].first != key, "to_json: key '" << key << "' appears twice (fields " << j << " and " << i << ")");
    w.key(key);
    value.write(w);
  }
  w.end_object();
  return w.take();
}

MetricsWriter::MetricsWriter(std::string path, Mode mode) : path_(std::move(path)) {
  out_.open(path_, mode == Mode::append ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
  LIERE_ENSURE(out_.is_open(), "MetricsWriter: cannot open '" << path_ << "' for writing: " << std::strerror(errno));
}

void MetricsWriter::write(const Metrics& row) {
  const std::string line = to_json(row) + "\n";
  out_.write(line.data(), std::streamsize(line.size()));
  out_.flush();
  LIERE_ENSURE(out_.good(), "MetricsWriter: writing to '" << path_ << "' failed: " << std::strerror(errno));
}

void write_json_atomic(const std::string& path, const Metrics& object) {
  io::write_file_atomic(path, to_json(object, /*pretty=*/true) + "\n", {"write_json_atomic", {}});
}

std::vector<std::uint8_t> Predictions::correct() const {
  std::vector<std::uint8_t> c(labels.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = labels[i] == preds[i];
  return c;
}

double Predictions::accuracy() const {
  std::size_t k = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) k += labels[i] == preds[i];
  return labels.empty() ? 0.0 : double(k) / double(labels.size());
}

std::string predictions_text(const std::vector<int>& labels, const std::vector<int>& preds, const std::string& source) {
  LIERE_ENSURE(labels.size() == preds.size(), "write_predictions: '" << source << "': " << labels.size()
                                                                      << " labels but " << preds.size()
                                                                      << " predictions");
  std::string text = std::string(kPredictionsMagic) + " n=" + std::to_string(labels.size()) +
                     " columns: index label pred\n";
  text.reserve(text.size() + labels.size() * 12);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    text += std::to_string(i);
    text += ' ';
    text += std::to_string(labels[i]);
    text += ' ';
    text += std::to_string(preds[i]);
    text += '\n';
  }
  return text;
}

void write_predictions(const std::string& path, const std::vector<int>& labels, const std::vector<int>& preds) {
  io::write_file_atomic(path, predictions_text(labels, preds, path), {"write_predictions", {}});
}

Predictions read_predictions(const std::string& path) {
  std::error_code ec;
  LIERE_ENSURE(!std::filesystem::is_directory(path, ec), "read_predictions: cannot open '"
                                                             << path << "': is a directory (expected a file written by "
                                                             << "--predictions)");
  std::ifstream in(path);
  LIERE_ENSURE(in.is_open(), "read_predictions: cannot open '" << path << "': " << std::strerror(errno));
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);  // fails for a pipe: nothing reserved up front
  return read_predictions(in, path, ec ? std::nullopt : std::optional<std::uintmax_t>(bytes));
}

Predictions read_predictions(std::istream& in, const std::string& source, std::optional<std::uintmax_t> bytes) {
  auto where = [&](long line) { return source + ":" + std::to_string(line); };
  std::string line;
  long line_no = 0;

  // Header: "# liere-predictions v1 n=<count> columns: index label pred".
  long long n = -1;
  if (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto pos = line.find(" n=");
    if (line.rfind(kPredictionsMagic, 0) == 0 && pos != std::string::npos) {
      const char* b = line.data() + pos + 3;
      const char* e = line.data() + line.size();
      const auto r = std::from_chars(b, e, n);
      if (r.ec != std::errc() || (r.ptr != e && *r.ptr != ' ')) n = -1;
    }
  }
  LIERE_ENSURE(line_no == 1 && n >= 0, "read_predictions: " << where(1) << ": not a predictions file: expected a header '"
                                                            << kPredictionsMagic << " n=<count> columns: index label pred', got '"
                                                            << (line_no == 1 ? line : std::string("<empty file>")) << "'");

  // Reserved: n, but no more than the file can hold (an example line "index label pred" takes at least 6 bytes with
  // its newline), so that a damaged header (n=1000000000000000000) is not an allocation of that size; the count is
  // then checked against the lines, below. (A stream whose size is unknown, a pipe, reserves nothing up front.)
  Predictions p;
  const std::streamoff header_end = in.tellg();
  if (bytes && header_end >= 0) {
    const std::uintmax_t rest = *bytes - std::min<std::uintmax_t>(*bytes, std::uintmax_t(header_end));
    const std::size_t most = std::size_t(std::min<std::uintmax_t>(std::uintmax_t(n), (rest + 1) / 6));
    p.labels.reserve(most);
    p.preds.reserve(most);
  }
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank
    long long v[3];
    const char* c = line.data();
    const char* e = line.data() + line.size();
    int got = 0;
    bool ok = true;
    for (; got < 3 && ok; ++got) {
      while (c < e && (*c == ' ' || *c == '\t')) ++c;
      const auto r = std::from_chars(c, e, v[got]);
      ok = r.ec == std::errc() && (r.ptr == e || *r.ptr == ' ' || *r.ptr == '\t');
      c = r.ptr;
    }
    while (ok && c < e && (*c == ' ' || *c == '\t')) ++c;
    LIERE_ENSURE(ok && c == e, "read_predictions: " << where(line_no)
                                                    << ": expected three integers 'index label pred', got '" << line << "'");
    const long long expected = (long long)p.labels.size();
    LIERE_ENSURE(v[0] == expected, "read_predictions: " << where(line_no) << ": index " << v[0] << ", expected " << expected
                                                        << " (indices count up from 0, one line per example)");
    for (int k = 1; k < 3; ++k)
      LIERE_ENSURE(v[k] >= std::numeric_limits<int>::min() && v[k] <= std::numeric_limits<int>::max(),
                   "read_predictions: " << where(line_no) << ": " << (k == 1 ? "label " : "pred ") << v[k]
                                        << " does not fit an int");
    LIERE_ENSURE(expected < n, "read_predictions: " << where(line_no) << ": more lines than the header's n=" << n);
    p.labels.push_back(int(v[1]));
    p.preds.push_back(int(v[2]));
  }
  LIERE_ENSURE(!in.bad(), "read_predictions: reading '" << source << "' failed: " << std::strerror(errno));
  LIERE_ENSURE((long long)p.labels.size() == n, "read_predictions: " << where(line_no) << ": the header says n=" << n
                                                                     << " but the file has " << p.labels.size()
                                                                     << " examples (truncated?)");
  return p;
}

}  // namespace liere::train
