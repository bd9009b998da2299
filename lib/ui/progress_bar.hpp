// A one-line progress bar on stderr for long work with a known total (writing a report over
// many trials): drawn only on a terminal, only once the work has taken a moment (quick work
// prints nothing), redrawn at most 10 times a second, erased when done.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace tune::ui {

class ProgressBar {
 public:
  // `tty`: draw at all; `width`: the terminal's (nullopt: asked of stderr); `out`: tests.
  ProgressBar(std::string label, size_t total, bool tty, std::optional<size_t> width = {},
              std::string* out = nullptr);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` of the total are done.
  void update(size_t done);
  // Erases the bar (if drawn). Idempotent.
  void finish();
  // "label [########......]  45%  450/1000" in at most `width` cells.
  [[nodiscard]] std::string render(size_t done, size_t width) const;
  // Draw from the first update on (tests).
  void show_at_once() { delay_ = std::chrono::milliseconds(0); }

 private:
  void write(const std::string& s);

  std::string label_;
  size_t total_;
  bool tty_;
  std::optional<size_t> width_;
  std::string* out_;
  std::chrono::steady_clock::time_point start_, last_;
  std::chrono::milliseconds delay_{300};
  bool drawn_ = false;
};

}  // namespace tune::ui
