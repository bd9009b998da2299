#include "ui/progress_bar.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "ui/terminal.hpp"
#include "ui/text.hpp"

namespace tune::ui {

namespace {
// The bar drawn on stderr now (the log sink erases it before a line; other threads log).
std::mutex g_mu;
ProgressBar* g_drawn = nullptr;
}  // namespace

ProgressBar::ProgressBar(std::string label, size_t total, bool tty, std::optional<size_t> width,
                         std::string* out)
    : label_(std::move(label)),
      total_(total),
      tty_(tty),
      width_(width),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

namespace {
// "4.5/10.0 MB": both counts in the unit that suits the total.
std::string byte_counts(size_t done, size_t total) {
  const char* unit = "kB";
  double div = 1e3;
  if (total >= 1'000'000'000) {
    unit = "GB", div = 1e9;
  } else if (total >= 1'000'000) {
    unit = "MB", div = 1e6;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f/%.1f %s", static_cast<double>(done) / div,
                static_cast<double>(total) / div, unit);
  return buf;
}
}  // namespace

std::string ProgressBar::render(size_t done, size_t width) const {
  done = std::min(done, total_);
  int pct = total_ ? static_cast<int>(done * 100 / total_) : 100;
  std::string tail =
      "  " + std::to_string(pct) + "%  " +
      (bytes_ ? byte_counts(done, total_) : std::to_string(done) + "/" + std::to_string(total_));
  std::string label = sanitize(label_);
  size_t fixed = display_width(label) + 1 + 2 + display_width(tail);
  if (width < fixed + 10) return fit_end(label + tail, width);
  size_t bar = std::min<size_t>(width - fixed, 40);
  size_t full = total_ ? bar * done / total_ : bar;
  return label + " [" + std::string(full, '#') + std::string(bar - full, '.') + "]" + tail;
}

void ProgressBar::write(const std::string& s) {
  if (out_) {
    *out_ += s;
    return;
  }
  std::fwrite(s.data(), 1, s.size(), stderr);
  std::fflush(stderr);
}

void ProgressBar::update(size_t done) {
  if (!tty_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < delay_) return;
  if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  size_t width = width_ ? *width_ : terminal_columns(STDERR_FILENO).value_or(80);
  // Never the last column: a full line would wrap on some terminals.
  std::string line = "\r" + render(done, width > 1 ? width - 1 : 1) + "\x1b[K";
  std::lock_guard lock(g_mu);
  write(line);
  drawn_ = true;
  g_drawn = this;
}

void ProgressBar::finish() {
  std::lock_guard lock(g_mu);
  if (g_drawn == this) g_drawn = nullptr;
  if (!drawn_) return;
  write("\r\x1b[K");
  drawn_ = false;
}

void ProgressBar::erase_current() {
  std::lock_guard lock(g_mu);
  if (!g_drawn) return;
  g_drawn->write("\r\x1b[K");
  g_drawn->drawn_ = false;
  g_drawn = nullptr;
}

void StagedProgress::update(const std::string& label, size_t done, size_t total) {
  if (!tty_) return;
  if (!bar_ || label != label_) {
    finish();
    label_ = label;
    bar_.emplace(label, total, tty_, width_, out_);
    if (at_once_) bar_->show_at_once();
  }
  bar_->update(done);
}

void StagedProgress::finish() {
  if (bar_) bar_->finish();
  bar_.reset();
}

}  // namespace tune::ui
