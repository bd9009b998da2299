// The live progress table on stderr: redrawn in place on a terminal, fitted to its width (and
// redrawn when it is resized). Off a terminal (a pipe, a log file, TERM=dumb) it writes plain
// lines for a reader tailing a log: each trial's status change within a second of it, and every
// period a summary (counts by status, best so far, elapsed, eta) with the running trials' rows.
// Nothing with --quiet. Colors unless NO_COLOR is set or stderr is no TTY. It watches the run
// as a control::RunObserver.
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
  double period_s = 0.5;          // redraw period (plain mode: seconds between summaries)
  double changes_period_s = 1.0;  // plain mode: status changes told at most this often
  // The terminal's size; nullopt: asked of stderr at each redraw (tests set them).
  std::optional<size_t> width, height;
  std::optional<std::vector<std::string>> columns;  // --columns
};

// Redraw period on a terminal, and seconds between summaries off one, by default.
inline constexpr double kTtyPeriodS = 0.5;
inline constexpr double kPlainPeriodS = 30;

// Decides from the environment: TTY-ness of stderr (TERM=dumb counts as none), NO_COLOR,
// --quiet; the period from TUNE_PROGRESS_PERIOD_S, else `max_report_frequency` (the
// experiment's progress_reporter), else the default of the mode.
[[nodiscard]] TableOptions detect_table_options(bool quiet,
                                                std::optional<double> max_report_frequency = {});

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
  // Plain mode: a line per trial whose status changed since the last call (at most 20, then a
  // count), and the note and the hosts' line when they changed.
  [[nodiscard]] std::string status_changes(const control::RunSnapshot& snap);
  // Plain mode: the summary line, then the running trials' rows (at most max_rows).
  [[nodiscard]] std::string heartbeat(const control::RunSnapshot& snap);

 private:
  void draw(const control::RunSnapshot& snap);
  void write(const std::string& text);
  [[nodiscard]] double elapsed(const control::RunSnapshot& snap);

  TableOptions opts_;
  std::string* out_;
  std::string note_;
  double last_draw_ = -1e18;            // the last redraw (plain mode: the last summary)
  double last_scan_ = -1e18;            // plain mode: the last look for status changes
  std::string told_note_, told_hosts_;  // plain mode: the note and hosts' states last told
  std::vector<size_t> drawn_widths_;    // cells of each line on screen (to erase after a resize)
  std::optional<std::pair<double, double>> clock_;  // (now, state elapsed) at the first look
  std::map<std::string, trial::Status> seen_;       // plain mode: statuses already told
};

// A stderr log sink that clears the live table before each line, so logs and table don't mix.
[[nodiscard]] std::shared_ptr<spdlog::sinks::sink> make_stderr_sink(LiveTable* table, bool color);

}  // namespace tune::ui
