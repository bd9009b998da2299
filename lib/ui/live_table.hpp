// The live progress table on stderr: redrawn in place on a terminal, fitted to its width (and
// redrawn when it is resized); periodic plain lines otherwise; nothing with --quiet. Colors
// unless NO_COLOR is set or stderr is no TTY. It watches the run as a control::RunObserver.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/sinks/sink.h>

#include "control/events.hpp"
#include "spec/experiment.hpp"
#include "state/state.hpp"
#include "ui/summary.hpp"
#include "ui/trial_table.hpp"

namespace tune::ui {

struct TableOptions {
  bool tty = false;
  bool color = false;
  bool quiet = false;
  double period_s = 0.5;  // redraw period (plain mode: seconds between lines)
  // The terminal's size; nullopt: asked of stderr at each redraw (tests set them).
  std::optional<size_t> width, height;
  std::optional<std::vector<std::string>> columns;  // --columns
};

// Decides from the environment: TTY-ness of stderr, NO_COLOR, --quiet.
[[nodiscard]] TableOptions detect_table_options(bool quiet);

class LiveTable final : public control::RunObserver {
 public:
  // Writes to stderr unless `out` is given (tests).
  explicit LiveTable(TableOptions opts, std::string* out = nullptr);

  void on_progress(const control::RunSnapshot& snap, bool notable) override;
  void on_run_end(const control::RunSnapshot& snap) override;
  [[nodiscard]] double seconds_until_due(double now) const override;

  // A line shown under the header of every redraw (why fewer trials run than asked, ...).
  void set_note(std::string note) { note_ = std::move(note); }
  // Erases the in-place table (before a log line is printed under it).
  void clear();

  // The text of one redraw at `width` x `height` cells (no escape codes but colors).
  [[nodiscard]] std::string render(const control::RunSnapshot& snap, size_t width,
                                   size_t height) const;
  // The plain-mode lines: trials whose status changed since the last call, then the summary.
  [[nodiscard]] std::string plain_lines(const control::RunSnapshot& snap);

 private:
  void draw(const control::RunSnapshot& snap);
  void write(const std::string& text);
  [[nodiscard]] double elapsed(const control::RunSnapshot& snap);

  TableOptions opts_;
  std::string* out_;
  std::string note_;
  double last_draw_ = -1e18;
  std::vector<size_t> drawn_widths_;  // cells of each line on screen (to erase after a resize)
  std::optional<std::pair<double, double>> clock_;  // (now, state elapsed) at the first look
  std::map<std::string, trial::Status> seen_;       // plain mode: statuses already told
};

// A stderr log sink that clears the live table before each line, so logs and table don't mix.
[[nodiscard]] std::shared_ptr<spdlog::sinks::sink> make_stderr_sink(LiveTable* table, bool color);

}  // namespace tune::ui
