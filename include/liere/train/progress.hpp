// liere/train/progress.hpp — a progress bar for long loops (an epoch, an evaluation pass).
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

#include <liere/config.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <sys/ioctl.h>
#include <unistd.h>

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
                       ProgressOptions opt = {})
      : total_(total), label_(std::move(label)), out_(out), opt_(std::move(opt)) {
    LIERE_ENSURE(total >= 0, "ProgressBar: total must be >= 0, got " << total);
    LIERE_ENSURE(opt_.plain_every_percent > 0 && opt_.plain_every_percent <= 100,
                 "ProgressBar: plain_every_percent must be in (0, 100], got " << opt_.plain_every_percent);
    if (!opt_.clock)
      opt_.clock = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      };
    tty_ = opt_.mode == ProgressOptions::Mode::tty ||
           (opt_.mode == ProgressOptions::Mode::automatic && stream_is_terminal(out_));
    start_ = opt_.clock();
  }

  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // An unfinished bar on a terminal ends its line, so that what is printed next (an error) starts afresh.
  ~ProgressBar() {
    if (tty_ && drawn_ && !finished_) out_ << '\n' << std::flush;
  }

  // `done` steps of `total` are complete (clamped to [0, total]); `values` are shown after the counts and
  // kept until the next update that gives values.
  void update(std::int64_t done, const Values& values = {}) {
    done_ = std::clamp<std::int64_t>(done, 0, total_);
    if (!values.empty()) values_ = values;
    const double now = opt_.clock();
    if (tty_) {
      if (!drawn_ || done_ == total_ || now - last_draw_ >= opt_.min_redraw_seconds) draw_tty(now);
    } else {
      const std::int64_t b = bucket(done_);
      if (b > last_bucket_) {
        last_bucket_ = b;
        print_plain(now);
      }
    }
  }

  // Counts n more items (images) for the rate column.
  void add_items(std::int64_t n) { items_ += n; }

  // Shows the final state (with `values` if given) and ends the line. Called once; later calls do nothing.
  void finish(const Values& values = {}) {
    if (finished_) return;
    if (!values.empty()) values_ = values;
    const double now = opt_.clock();
    if (tty_) {
      draw_tty(now);
      out_ << '\n' << std::flush;
    } else if (printed_done_ != done_ || !values.empty()) {
      print_plain(now);
    }
    finished_ = true;
  }

  bool tty() const { return tty_; }
  double elapsed() const { return opt_.clock() - start_; }

  // The text of the status line at time `now` (without the bar when `with_bar` is false).
  std::string line(double now, bool with_bar) const {
    std::string s = label_;
    auto add = [&s](const std::string& part) {
      if (!s.empty()) s += ' ';
      s += part;
    };
    const double frac = total_ > 0 ? double(done_) / double(total_) : 1.0;
    if (with_bar) {
      const int w = std::max(1, opt_.bar_width);
      const int filled = std::min(w, int(frac * w));
      add("[" + std::string(std::size_t(filled), '#') + std::string(std::size_t(w - filled), '.') + "]");
    }
    const std::string total_str = std::to_string(total_);
    std::string done_str = std::to_string(done_);
    if (done_str.size() < total_str.size()) done_str.insert(0, total_str.size() - done_str.size(), ' ');
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3d%%", int(std::floor(frac * 100 + 1e-9)));
    add(done_str + "/" + total_str + " " + pct);
    for (const auto& [name, v] : values_) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.4g", v);
      add(name + " " + buf);
    }
    const double elapsed = std::max(0.0, now - start_);
    const double count = items_ > 0 ? double(items_) : double(done_);
    if (elapsed > 0 && count > 0) {
      const double rate = count / elapsed;
      char buf[48];
      std::snprintf(buf, sizeof buf, rate < 100 ? "%.2f %s/s" : "%.1f %s/s", rate,
                    items_ > 0 ? opt_.unit.c_str() : "it");
      add(std::string("| ") + buf);
    }
    std::string t = "| " + clock_text(elapsed);
    if (done_ < total_)
      t += " eta " + (done_ > 0 ? clock_text(elapsed * double(total_ - done_) / double(done_)) : std::string("--:--"));
    add(t);
    return s;
  }

  // Seconds as mm:ss, or h:mm:ss from an hour on.
  static std::string clock_text(double seconds) {
    const auto s = std::int64_t(std::max(0.0, std::round(seconds)));
    char buf[32];
    if (s >= 3600)
      std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                    (long long)(s % 60));
    else
      std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(s / 60), (long long)(s % 60));
    return buf;
  }

 private:
  static bool stream_is_terminal(const std::ostream& out) {
    int fd = -1;
    if (&out == &std::cerr || &out == &std::clog) fd = STDERR_FILENO;
    if (&out == &std::cout) fd = STDOUT_FILENO;
    if (fd < 0 || !::isatty(fd)) return false;
    const char* term = std::getenv("TERM");
    return !(term && std::strcmp(term, "dumb") == 0);
  }

  // The terminal width, or 0 when unknown.
  int columns() const {
    const int fd = &out_ == &std::cout ? STDOUT_FILENO : STDERR_FILENO;
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 0;
  }

  // Plain mode: how many multiples of plain_every_percent `done` has passed.
  std::int64_t bucket(std::int64_t done) const {
    if (total_ == 0) return 1;
    return std::int64_t(std::floor(100.0 * double(done) / double(total_) / opt_.plain_every_percent + 1e-9));
  }

  void draw_tty(double now) {
    std::string s = line(now, true);
    // A line longer than the terminal wraps, and '\r' would then only return to its last row.
    if (const int cols = columns(); cols > 1 && int(s.size()) >= cols) s.resize(std::size_t(cols - 1));
    const std::size_t len = s.size();
    if (len < last_len_) s.append(last_len_ - len, ' ');  // erase the rest of a longer previous line
    out_ << '\r' << s << std::flush;
    last_len_ = len;
    last_draw_ = now;
    drawn_ = true;
  }

  void print_plain(double now) {
    out_ << line(now, false) << '\n' << std::flush;
    printed_done_ = done_;
  }

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
