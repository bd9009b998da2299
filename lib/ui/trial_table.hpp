// The trial table shared by the live view and `tune status`: which columns, which rows in which
// order, laid out in a given width (ui/layout.hpp).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "spec/experiment.hpp"
#include "state/state.hpp"

namespace tune::ui {

// What a trial table shows.
struct TableView {
  std::optional<std::string> metric;  // the experiment's: its last value and best
  bool max_mode = false;
  std::vector<spec::ColumnSpec> metrics;  // last values shown (default: `metric`)
  std::vector<spec::ColumnSpec> params;   // config values shown, by dotted path
  bool sort_by_metric = false;            // rows by `metric`, best first
  bool show_host = true;
  std::string scheduler;  // names decisions ("stopped by asha at 9")
  bool color = false;
};

// The view of an experiment: progress_reporter's columns, or `columns` (--columns: result keys
// and config/<path> entries) instead when given.
[[nodiscard]] TableView view_of(const spec::Experiment& exp,
                                const std::optional<std::vector<std::string>>& columns);

// Splits a --columns value ("loss,acc,config/lr") into names; an error text if an entry is empty.
[[nodiscard]] std::variant<std::vector<std::string>, std::string> parse_columns_flag(
    std::string_view text);

// The rows in table order: running, then errors, paused, pending and terminated (or by the
// metric's last value with sort_by_metric; trials without one last).
[[nodiscard]] std::vector<const trial::Trial*> table_order(const state::ExperimentState& s,
                                                           const TableView& view);

// The table of `rows` (plus a "... N more trials" line if `hidden`) at most `width` cells wide.
[[nodiscard]] std::string trial_table(std::span<const trial::Trial* const> rows,
                                      const TableView& view, size_t width, size_t hidden = 0);

// The scheduler that ran an experiment, by its saved state ("" for fifo).
[[nodiscard]] std::string scheduler_of(const state::ExperimentState& s);
// What happened to a trial, for a table's last column ("" if nothing to say).
[[nodiscard]] std::string trial_note(const trial::Trial& t, std::string_view scheduler);
// "hosts: vm up (2 running), 10.0.0.2 unreachable (1 running)\n"; empty with one host up.
[[nodiscard]] std::string hosts_line(const state::ExperimentState& s);

}  // namespace tune::ui
