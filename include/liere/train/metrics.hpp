// liere/train/metrics.hpp — what a trainer writes: JSON-lines metrics, JSON summaries written atomically,
// and per-example predictions for the paired bootstrap test (liere/train/bootstrap.hpp, compare_runs).
//
// Metrics: one flat JSON object per line, keys in the order given, each line flushed as soon as it is
// written (a crashed run keeps every finished epoch; `tail -f` works):
//   MetricsWriter w("runs/liere.jsonl");
//   w.write({{"epoch", 1}, {"train_loss", 0.5}, {"pe", "liere"}, {"ok", true}});
//   -> {"epoch":1,"train_loss":0.5,"pe":"liere","ok":true}
// Values are numbers (integers written exactly, float and double in their shortest round-trip form),
// strings (JSON-escaped), bools, null and arrays of numbers (std::vector<T>); NaN and ±Inf are written as
// null, so every line is strict JSON. data_tools/jsonl.hpp reads these files back (except arrays, which it
// rejects: keep arrays out of files meant for plot_metrics).
//
// Summaries: write_json_atomic(path, fields) writes one object, one key per line, to "<path>.tmp", fsyncs
// it and renames it over <path> (then fsyncs the directory): a reader sees the old file or the new one,
// never half of one, and a failed write leaves the old file as it was and no .tmp behind.
//
// Predictions: a text file, one example per line after a header, written atomically too:
//   # liere-predictions v1 n=3 columns: index label pred
//   0 3 3
//   1 5 2
//   2 1 1
// index counts 0, 1, 2, ... in order; label is the true class and pred the predicted one. read_predictions
// checks the header, that each line holds exactly three integers, that the indices count up from 0 and that
// there are n lines (a truncated file is an error); messages name "file:line".
#pragma once

#include <liere/config.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace liere::train {

// One value of a metrics row: null, bool, integer, number, string or array of numbers.
class MetricValue {
 public:
  MetricValue() = default;  // null
  MetricValue(std::nullptr_t) {}
  MetricValue(bool b) : kind_(Kind::boolean), b_(b) {}
  // Integers are written exactly (unsigned values above INT64_MAX become doubles).
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  MetricValue(T x) {
    if constexpr (std::is_unsigned_v<T>) {
      if (std::uint64_t(x) > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
        kind_ = Kind::number;
        x_ = double(x);
        return;
      }
    }
    kind_ = Kind::integer;
    i_ = std::int64_t(x);
  }
  MetricValue(double x) : kind_(Kind::number), x_(x) {}
  MetricValue(float x) : kind_(Kind::number), x_(x), single_(true) {}  // written as the shortest float
  MetricValue(const char* s) : kind_(Kind::string), s_(s) {}
  MetricValue(std::string s) : kind_(Kind::string), s_(std::move(s)) {}
  MetricValue(std::string_view s) : kind_(Kind::string), s_(s) {}
  // Arrays of numbers (integers above 2^53 lose precision; float arrays are written as floats).
  template <class T>
    requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
  MetricValue(const std::vector<T>& v) : kind_(Kind::array), a_(v.begin(), v.end()), single_(std::is_same_v<T, float>) {}

  bool is_null() const { return kind_ == Kind::null; }

  // The value as JSON text.
  std::string json() const {
    switch (kind_) {
      case Kind::null: return "null";
      case Kind::boolean: return b_ ? "true" : "false";
      case Kind::integer: return std::to_string(i_);
      case Kind::number: return number(x_, single_);
      case Kind::string: return escape(s_);
      case Kind::array: {
        std::string out = "[";
        for (std::size_t i = 0; i < a_.size(); ++i) {
          if (i) out += ',';
          out += number(a_[i], single_);
        }
        return out + "]";
      }
    }
    return "null";
  }

  // A JSON string literal (with the quotes): ", \ and control characters escaped; other bytes (UTF-8) as is.
  static std::string escape(std::string_view s) {
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
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
            out += buf;
          } else {
            out += char(c);
          }
      }
    }
    return out + "\"";
  }

  // A number in its shortest round-trip form ("0.1", "1e-05", "3"); NaN and ±Inf as null.
  static std::string number(double x, bool single = false) {
    if (!std::isfinite(x)) return "null";
    char buf[32];
    const auto r = single ? std::to_chars(buf, buf + sizeof buf, float(x)) : std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
  }

 private:
  enum class Kind { null, boolean, integer, number, string, array };
  Kind kind_ = Kind::null;
  bool b_ = false;
  std::int64_t i_ = 0;
  double x_ = 0;
  std::string s_;
  std::vector<double> a_;
  bool single_ = false;
};

// A flat JSON object, keys in the order they are written.
using Metrics = std::vector<std::pair<std::string, MetricValue>>;

// The object as JSON: compact on one line ({"a":1,"b":"x"}), or pretty with one key per line.
// Duplicate or empty keys are an error.
inline std::string to_json(const Metrics& fields, bool pretty = false) {
  std::string out = "{";
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [key, value] = fields[i];
    LIERE_ENSURE(!key.empty(), "to_json: field " << i << " has an empty key");
    for (std::size_t j = 0; j < i; ++j)
      LIERE_ENSURE(fields[j].first != key, "to_json: key '" << key << "' appears twice (fields " << j << " and " << i << ")");
    if (i) out += ',';
    if (pretty) out += "\n  ";
    out += MetricValue::escape(key);
    out += pretty ? ": " : ":";
    out += value.json();
  }
  if (pretty && !fields.empty()) out += '\n';
  return out + "}";
}

namespace detail {

inline std::string errno_text(int e) { return std::strerror(e); }

inline std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
}

// Writes `data` to "<path>.tmp", fsyncs, renames it over <path> and fsyncs the directory. On any failure the
// .tmp file is removed, <path> is untouched and a liere::Error names `what`, the file and the reason.
inline void write_file_atomic(const std::string& path, std::string_view data, const char* what) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LIERE_ENSURE(fd >= 0, what << ": cannot create '" << tmp << "': " << errno_text(errno));
  // On failure: keep errno, remove the .tmp file, throw.
  auto fail = [&](int e, const std::string& msg) {
    ::close(fd);
    ::unlink(tmp.c_str());
    LIERE_ENSURE(false, what << ": " << msg << ": " << errno_text(e));
  };
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t w = ::write(fd, data.data() + written, data.size() - written);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w < 0 ? errno : EIO;
      fail(e, "writing '" + tmp + "' failed after " + std::to_string(written) + " of " + std::to_string(data.size()) +
                  " bytes");
    }
    written += std::size_t(w);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    fail(e, "fsync of '" + tmp + "' failed");
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    LIERE_ENSURE(false, what << ": closing '" << tmp << "' failed: " << errno_text(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    LIERE_ENSURE(false, what << ": cannot rename '" << tmp << "' to '" << path << "': " << errno_text(e));
  }
  const int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace detail

// Appends one JSON object per line to a file and flushes after each line.
class MetricsWriter {
 public:
  enum class Mode { truncate, append };  // append: continue a resumed run's file

  explicit MetricsWriter(std::string path, Mode mode = Mode::truncate) : path_(std::move(path)) {
    out_.open(path_, mode == Mode::append ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
    LIERE_ENSURE(out_.is_open(), "MetricsWriter: cannot open '" << path_ << "' for writing: " << std::strerror(errno));
  }

  // Writes `row` as one line and flushes it.
  void write(const Metrics& row) {
    const std::string line = to_json(row) + "\n";
    out_.write(line.data(), std::streamsize(line.size()));
    out_.flush();
    LIERE_ENSURE(out_.good(), "MetricsWriter: writing to '" << path_ << "' failed: " << std::strerror(errno));
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Writes one JSON object (pretty, one key per line, ending in a newline) atomically: see the file comment.
inline void write_json_atomic(const std::string& path, const Metrics& object) {
  detail::write_file_atomic(path, to_json(object, /*pretty=*/true) + "\n", "write_json_atomic");
}

// Labels and predictions of one classifier on a test set, example i at index i.
struct Predictions {
  std::vector<int> labels;
  std::vector<int> preds;

  std::size_t size() const { return labels.size(); }
  // correct()[i] = 1 when preds[i] == labels[i]: the input of bootstrap_ci / paired_bootstrap.
  std::vector<std::uint8_t> correct() const {
    std::vector<std::uint8_t> c(labels.size());
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = labels[i] == preds[i];
    return c;
  }
  double accuracy() const {
    std::size_t k = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) k += labels[i] == preds[i];
    return labels.empty() ? 0.0 : double(k) / double(labels.size());
  }
};

inline constexpr std::string_view kPredictionsMagic = "# liere-predictions v1";

// Writes a predictions file atomically (format in the file comment). labels and preds must have equal sizes.
inline void write_predictions(const std::string& path, const std::vector<int>& labels, const std::vector<int>& preds) {
  LIERE_ENSURE(labels.size() == preds.size(), "write_predictions: '" << path << "': " << labels.size() << " labels but "
                                                                      << preds.size() << " predictions");
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
  detail::write_file_atomic(path, text, "write_predictions");
}

// Reads a predictions file written by write_predictions; every error names "file:line".
inline Predictions read_predictions(const std::string& path) {
  std::ifstream in(path);
  LIERE_ENSURE(in.is_open(), "read_predictions: cannot open '" << path << "': " << std::strerror(errno));
  auto where = [&](long line) { return path + ":" + std::to_string(line); };
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

  Predictions p;
  p.labels.reserve(std::size_t(n));
  p.preds.reserve(std::size_t(n));
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
  LIERE_ENSURE(!in.bad(), "read_predictions: reading '" << path << "' failed: " << std::strerror(errno));
  LIERE_ENSURE((long long)p.labels.size() == n, "read_predictions: " << where(line_no) << ": the header says n=" << n
                                                                     << " but the file has " << p.labels.size()
                                                                     << " examples (truncated?)");
  return p;
}

}  // namespace liere::train
