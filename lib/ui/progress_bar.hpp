// A one-line progress bar on stderr for long work with a known total (loading a big state,
// pulling checkpoints on a resume, writing a report over many trials): drawn only on a
// terminal, only once the work has taken a moment (quick work prints nothing), redrawn at most
// 10 times a second, erased when done. Without a terminal nothing is printed (the work's own
// log lines say what happened); no colour is used, so NO_COLOR has nothing to turn off.
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
  // "label [########......]  45%  450/1000" (or "... 45%  4.5/10.0 MB") in at most `width`
  // cells.
  [[nodiscard]] std::string render(size_t done, size_t width) const;
  // Draw from the first update on (tests).
  void show_at_once() { delay_ = std::chrono::milliseconds(0); }
  // The counts are bytes: shown as "12.3/45.6 MB" instead of "123/456".
  void count_bytes() { bytes_ = true; }
  // Erases the bar drawn on stderr now, if any (its next update draws it again): the log
  // sink calls this before it prints a line, so a message never lands in the middle of a bar.
  static void erase_current();

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
  bool bytes_ = false;
};

// Bars for work in stages, each with its own label and total ("reading state", then "checking
// trials"): a new label erases the previous stage's bar and starts one of its own.
class StagedProgress {
 public:
  explicit StagedProgress(bool tty, std::optional<size_t> width = {}, std::string* out = nullptr)
      : tty_(tty), width_(width), out_(out) {}
  // `done` of `total` of the stage `label` are done.
  void update(const std::string& label, size_t done, size_t total);
  // Erases the current bar (if drawn). Idempotent.
  void finish();
  // Draw from each stage's first update on (tests).
  void show_at_once() { at_once_ = true; }

 private:
  bool tty_;
  std::optional<size_t> width_;
  std::string* out_;
  bool at_once_ = false;
  std::string label_;
  std::optional<ProgressBar> bar_;
};

}  // namespace tune::ui
