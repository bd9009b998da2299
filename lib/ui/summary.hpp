// One-line and closing summaries of a run: counts by status, the best trial, elapsed time and
// how long the rest should take.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spec/experiment.hpp"
#include "state/state.hpp"

namespace tune::ui {

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
// "12.5s" under a minute, else "01:02:03".
[[nodiscard]] std::string hms(double seconds);

// The training_iteration every trial runs to at most, if the experiment says: a `stop` on
// training_iteration, or the max_t of a scheduler counting training_iteration (the smaller).
[[nodiscard]] std::optional<double> iteration_bound(const spec::Experiment& exp);

// Seconds the rest of the run should take at the pace so far, if knowable: the work left is
// iterations (with an iteration bound) or trials (num_samples x grid) still to finish, capped
// by what is left of time_budget_s. Nullopt until something has been done.
[[nodiscard]] std::optional<double> eta_seconds(const state::ExperimentState& s,
                                                const spec::Experiment& exp, double elapsed_s);

// The parts of the summary: "== name == 3 RUNNING, 1 PENDING", "best loss=0.12 (00003)",
// "elapsed 12.5s", "eta ~00:01:10" (untrusted names sanitized).
[[nodiscard]] std::vector<std::string> summary_parts(const state::ExperimentState& s,
                                                     const spec::Experiment& exp, double elapsed_s);
// The parts joined with " | " on one line (no trailing newline).
[[nodiscard]] std::string summary_line(const state::ExperimentState& s, const spec::Experiment& exp,
                                       double elapsed_s);

// The closing summary printed after a run.
[[nodiscard]] std::string final_summary(const state::ExperimentState& s,
                                        const spec::Experiment& exp);

}  // namespace tune::ui
