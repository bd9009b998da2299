// The live progress table on stderr (SPEC §1): redrawn in place on a terminal, periodic plain
// blocks otherwise, nothing with --quiet. Colors unless NO_COLOR is set or stderr is no TTY.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/sinks/sink.h>

#include "spec/experiment.hpp"
#include "state/state.hpp"

namespace tune::ui {

struct TableOptions {
  bool tty = false;
  bool color = false;
  bool quiet = false;
  double period_s = 0.5;  // redraw period (plain mode: seconds between blocks)
  size_t max_rows = 20;
};

// Decides from the environment: TTY-ness of stderr, NO_COLOR, --quiet.
[[nodiscard]] TableOptions detect_table_options(bool quiet);

// "hosts: vm up (2 running), 10.0.0.2 unreachable (1 running)"; empty with one host.
[[nodiscard]] std::string hosts_line(const state::ExperimentState& s);

class LiveTable {
 public:
  explicit LiveTable(TableOptions opts) : opts_(opts) {}
  // Redraws if the period has passed (or `force`).
  void update(double now, const state::ExperimentState& s, const spec::Experiment& exp, bool force);
  [[nodiscard]] double seconds_until_due(double now) const;
  // A line shown under the header of every redraw (why fewer trials run than asked, ...).
  void set_note(std::string note) { note_ = std::move(note); }
  // Erases the in-place table (before a log line is printed under it).
  void clear();

 private:
  TableOptions opts_;
  std::string note_;
  double last_draw_ = -1e18;
  size_t drawn_lines_ = 0;
};

// A stderr log sink that clears the live table before each line, so logs and table don't mix.
[[nodiscard]] std::shared_ptr<spdlog::sinks::sink> make_stderr_sink(LiveTable* table, bool color);

// The text of a trial table shared by the live view and `tune status`.
[[nodiscard]] std::string trial_table(const state::ExperimentState& s,
                                      const std::optional<std::string>& metric, bool max_mode,
                                      size_t max_rows, bool color);
// The column titles of a trial table, and one trial's row (names cut to `name_w`).
[[nodiscard]] std::string trial_table_header(const std::optional<std::string>& metric,
                                             size_t name_w);
// A row ends with what happened to the trial, if anything: a scheduler's decision ("stopped by
// asha at 9"; `scheduler` names it) or "interrupted".
[[nodiscard]] std::string trial_row(const trial::Trial& t, const std::optional<std::string>& metric,
                                    bool max_mode, size_t name_w, bool color,
                                    std::string_view scheduler = "");
// The scheduler that ran an experiment, by its saved state ("" for fifo).
[[nodiscard]] std::string scheduler_of(const state::ExperimentState& s);
// What happened to a trial, for a table's last column ("" if nothing to say).
[[nodiscard]] std::string trial_note(const trial::Trial& t, std::string_view scheduler);
// "3 TERMINATED, 1 RUNNING" in a fixed status order.
[[nodiscard]] std::string status_counts(const state::ExperimentState& s);
// The same from counts by status; trials the searcher has not created yet count as PENDING.
[[nodiscard]] std::string status_counts(const std::map<trial::Status, uint64_t>& counts,
                                        uint64_t total_trials, uint64_t next_index);
// The best trial by the last value of `metric` (nullptr if none reported it); trials in ERROR
// are left out unless `include_errored`.
[[nodiscard]] const trial::Trial* best_trial(const state::ExperimentState& s,
                                             const std::string& metric, bool max_mode,
                                             bool include_errored = false);
// The closing summary printed after a run.
[[nodiscard]] std::string final_summary(const state::ExperimentState& s,
                                        const spec::Experiment& exp);

}  // namespace tune::ui
