// examples/app/metrics.hpp — what a trainer writes: JSON-lines metrics, JSON summaries written atomically,
// and per-example predictions for the paired bootstrap test (app/bootstrap.hpp, compare_runs). The JSON
// text comes from liere/io/json.hpp, every file that replaces another from liere/io/atomic_file.hpp.
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

#include <liere/io/json.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

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

  // Writes the value (the writer is positioned after a key or inside an array).
  void write(io::json::Writer& w) const;
  // The value as JSON text.
  std::string json() const;

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
std::string to_json(const Metrics& fields, bool pretty = false);

// Appends one JSON object per line to a file and flushes after each line.
class MetricsWriter {
 public:
  enum class Mode { truncate, append };  // append: continue a resumed run's file

  explicit MetricsWriter(std::string path, Mode mode = Mode::truncate);

  // Writes `row` as one line and flushes it.
  void write(const Metrics& row);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// Writes one JSON object (pretty, one key per line, ending in a newline) atomically: see the file comment.
void write_json_atomic(const std::string& path, const Metrics& object);

// Labels and predictions of one classifier on a test set, example i at index i.
struct Predictions {
  std::vector<int> labels;
  std::vector<int> preds;

  std::size_t size() const { return labels.size(); }
  // correct()[i] = 1 when preds[i] == labels[i]: the input of bootstrap_ci / paired_bootstrap.
  std::vector<std::uint8_t> correct() const;
  double accuracy() const;
};

inline constexpr std::string_view kPredictionsMagic = "# liere-predictions v1";

// Writes a predictions file atomically (format in the file comment). labels and preds must have equal sizes.
void write_predictions(const std::string& path, const std::vector<int>& labels, const std::vector<int>& preds);
// The file's text; `source` names the caller's file in the error for unequal sizes.
std::string predictions_text(const std::vector<int>& labels, const std::vector<int>& preds, const std::string& source);

// Reads a predictions file written by write_predictions; every error names "file:line".
Predictions read_predictions(const std::string& path);
// The same from a stream whose lines `source` names in errors; `bytes` (the stream's size, when known) bounds what is
// reserved for a header's n.
Predictions read_predictions(std::istream& in, const std::string& source, std::optional<std::uintmax_t> bytes);

}  // namespace liere::train
