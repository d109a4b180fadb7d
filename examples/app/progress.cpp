// examples/app/progress.cpp — the progress bar's two modes (terminal and plain lines).
#include <app/progress.hpp>

#include <liere/core/config.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/ioctl.h>
#include <unistd.h>

namespace liere::train {

ProgressBar::ProgressBar(std::int64_t total, std::string label, std::ostream& out, ProgressOptions opt)
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

ProgressBar::~ProgressBar() {
  if (tty_ && drawn_ && !finished_) out_ << '\n' << std::flush;
}

void ProgressBar::update(std::int64_t done, const Values& values) {
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

void ProgressBar::finish(const Values& values) {
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

std::string ProgressBar::line(double now, bool with_bar) const {
  std::string s = label_;
  auto add = [&s](const std::string& part) {
    if (!s.empty()) s += ' ';
    s += part;
  };
  const double frac = total_ > 0 ? double(done_) / double(total_) : 1.0;
  if (with_bar) {
    const int w = std::max(1, opt_.bar_width);
    const int filled = std::min(w, int(frac * w));
    std::string bar = "[";
    bar.append(std::size_t(filled), '#').append(std::size_t(w - filled), '.') += ']';
    add(bar);
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
    std::snprintf(buf, sizeof buf, rate < 100 ? "%.2f %s/s" : "%.1f %s/s", rate, items_ > 0 ? opt_.unit.c_str() : "it");
    add(std::string("| ") + buf);
  }
  std::string t = "| " + clock_text(elapsed);
  if (done_ < total_)
    t += " eta " + (done_ > 0 ? clock_text(elapsed * double(total_ - done_) / double(done_)) : std::string("--:--"));
  add(t);
  return s;
}

std::string ProgressBar::clock_text(double seconds) {
  const auto s = std::int64_t(std::max(0.0, std::round(seconds)));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                  (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

bool ProgressBar::stream_is_terminal(const std::ostream& out) {
  int fd = -1;
  if (&out == &std::cerr || &out == &std::clog) fd = STDERR_FILENO;
  if (&out == &std::cout) fd = STDOUT_FILENO;
  if (fd < 0 || !::isatty(fd)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

int ProgressBar::columns() const {
  const int fd = &out_ == &std::cout ? STDOUT_FILENO : STDERR_FILENO;
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

std::int64_t ProgressBar::bucket(std::int64_t done) const {
  if (total_ == 0) return 1;
  return std::int64_t(std::floor(100.0 * double(done) / double(total_) / opt_.plain_every_percent + 1e-9));
}

void ProgressBar::draw_tty(double now) {
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

void ProgressBar::print_plain(double now) {
  out_ << line(now, false) << '\n' << std::flush;
  printed_done_ = done_;
}

}  // namespace liere::train
