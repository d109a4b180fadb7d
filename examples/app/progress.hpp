// examples/app/progress.hpp — a progress bar for long loops (an epoch, an evaluation pass).
//
//   ProgressBar bar(steps, "epoch 3/10");
//   for (int i = 0; i < steps; ++i) {
//     ...                                   // one step over a batch of B images
//     bar.add_items(B);                     // for the images/s column
//     bar.update(i + 1, {{"loss", loss}, {"acc", acc}});   // i + 1 steps are done
//   }
//   bar.finish();
//
// On a terminal (stderr is a TTY) one line is redrawn in place with '\r', at most every 0.1 s:
//   epoch 3/10 [#########...............]  450/1000  45% loss 1.23 acc 0.45 | 812.3 img/s | 00:12 eta 00:15
// Elsewhere (CI, a log file) a plain line is printed each time the progress crosses a multiple of 10% (and
// at finish() if the last line was not the final state), so logs stay readable:
//   epoch 3/10  100/1000  10% loss 1.93 acc 0.31 | 810.0 img/s | 00:02 eta 00:18
// The rate is items/s when add_items() was called, steps/s ("it/s") otherwise; times are mm:ss (h:mm:ss
// past an hour); values are printed with 4 significant digits. The elapsed time counts from construction.
//
// For tests: the stream (std::cerr by default), the mode and the clock are parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace liere::train {

struct ProgressOptions {
  enum class Mode { automatic, tty, plain };
  // automatic: tty when the stream is std::cerr / std::clog (std::cout) and file descriptor 2 (1) is a
  // terminal and TERM is not "dumb"; plain otherwise (any other stream, e.g. a std::ostringstream).
  Mode mode = Mode::automatic;
  double plain_every_percent = 10;  // plain mode: a line at every multiple of this many percent
  double min_redraw_seconds = 0.1;  // tty mode: at most one redraw per this interval (the last always shows)
  int bar_width = 24;               // tty mode: characters inside the brackets
  std::string unit = "img";         // the rate's unit when add_items() is used: "img/s"
  std::function<double()> clock;    // seconds on a monotonic clock; empty: std::chrono::steady_clock
};

class ProgressBar {
 public:
  using Values = std::vector<std::pair<std::string, double>>;

  // total: the number of steps (>= 0); label: printed first ("epoch 3/10").
  explicit ProgressBar(std::int64_t total, std::string label = {}, std::ostream& out = std::cerr,
                       ProgressOptions opt = {});

  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // An unfinished bar on a terminal ends its line, so that what is printed next (an error) starts afresh.
  ~ProgressBar();

  // `done` steps of `total` are complete (clamped to [0, total]); `values` are shown after the counts and
  // kept until the next update that gives values.
  void update(std::int64_t done, const Values& values = {});

  // Counts n more items (images) for the rate column.
  void add_items(std::int64_t n) { items_ += n; }

  // Shows the final state (with `values` if given) and ends the line. Called once; later calls do nothing.
  void finish(const Values& values = {});

  bool tty() const { return tty_; }
  double elapsed() const { return opt_.clock() - start_; }

  // The text of the status line at time `now` (without the bar when `with_bar` is false).
  std::string line(double now, bool with_bar) const;

  // Seconds as mm:ss, or h:mm:ss from an hour on.
  static std::string clock_text(double seconds);

 private:
  static bool stream_is_terminal(const std::ostream& out);
  // The terminal width, or 0 when unknown.
  int columns() const;
  // Plain mode: how many multiples of plain_every_percent `done` has passed.
  std::int64_t bucket(std::int64_t done) const;
  void draw_tty(double now);
  void print_plain(double now);

  std::int64_t total_;
  std::string label_;
  std::ostream& out_;
  ProgressOptions opt_;
  bool tty_ = false;
  double start_ = 0;
  std::int64_t done_ = 0;
  std::int64_t items_ = 0;
  Values values_;
  // tty mode
  bool drawn_ = false;
  double last_draw_ = 0;
  std::size_t last_len_ = 0;
  // plain mode
  std::int64_t last_bucket_ = 0;
  std::int64_t printed_done_ = -1;  // `done` of the last plain line, -1 before the first
  bool finished_ = false;
};

}  // namespace liere::train
