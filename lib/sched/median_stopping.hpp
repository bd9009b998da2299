// The median stopping rule: Golovin et al., "Google Vizier: A Service for Black-Box
// Optimization", KDD 2017, §3.2.2 — with the rules of Ray Tune's MedianStoppingRule (hard stop).
//
// Once a trial's time t >= grace_period and at least min_samples_required *other* trials
// (running or finished) have a result at or past t, the trial stops if its best value so far is
// strictly below the median of those trials' running means over [grace_period, t] (values are
// oriented so that larger is better). Unlike Ray it never pauses a trial for lack of samples:
// it waits for them.
//
// Cost: asked naively, each decision computes a mean for every other trial — 150 µs a result at
// 10,000 trials. The means at a time t change only when a trial reaches t (or reports again at
// t), so from the second decision at a t on, they are kept sorted for that t and updated as
// trials report (bench/schedulers/overhead.py). Times that are asked once (seconds rather than
// iterations) are answered naively; at most kMaxWindows times are kept.
//
// State: every result is needed (a running mean may be asked at any time), so the results go
// to the scheduler's append-only log at each state write (each result once), and save() holds
// only those not logged yet. A state written before the log existed holds them all: it loads.
#pragma once

#include <map>

#include "sched/scheduler.hpp"

namespace tune::sched {

class MedianStopping final : public TrialScheduler {
 public:
  explicit MedianStopping(const spec::SchedulerSpec& spec) : spec_(spec) {}

  void on_trial_add(const std::string& trial, uint64_t index) override;
  [[nodiscard]] Decision on_result(const Observation& r) override;
  void on_complete(const std::string& trial, const std::optional<Observation>& last) override;
  [[nodiscard]] json save() const override;
  [[nodiscard]] Result<void> restore(const json& state) override;
  [[nodiscard]] std::string log_tail() const override;
  void log_written() override;
  [[nodiscard]] Result<void> restore_log(std::string_view text, const std::string& where) override;

  static constexpr size_t kMaxWindows = 1024;

 private:
  // A trial's results, in time order.
  struct History {
    std::vector<double> time, score;
    std::vector<double> sum;  // sum[i]: the scores of results [first at grace_period, i]
    double best = -INFINITY;  // its best score (NaN ignored)
    size_t logged = 0;        // results [0, logged) are in the log (never in save())
  };
  // The running means over [grace_period, t] of every trial whose last result is at or past t.
  struct Window {
    std::vector<double> sorted;  // the means but NaN, ascending
    size_t nans = 0;             // trials whose mean is NaN (none in the window, or a NaN score)
  };
  void add(History& h, double time, double score);
  // Adds a saved {"time": [..], "score": [..]} (a state's entry or a log line) to `h`.
  [[nodiscard]] Result<void> add_saved(History& h, const json& saved, const std::string& trial);
  // The mean score over [grace_period, t] (NaN if it has none there); `drop_last` leaves its
  // last result out.
  [[nodiscard]] double running_mean(const History& h, double t, bool drop_last = false) const;
  // Keeps the windows up to date after `h` got a result at `time`; `last` was its latest time.
  void update_windows(const History& h, std::optional<double> last, double time);
  // The median of the other trials' means at r.time, or NaN if fewer than required or one is
  // NaN.
  [[nodiscard]] double median_of_others(const History& own, const Observation& r);

  spec::SchedulerSpec spec_;
  std::map<std::string, History> trials_;
  std::map<std::string, History> from_log_;  // restore_log()'s, until restore() takes them
  std::map<double, Window> windows_;         // derived from trials_: rebuilt as needed, never saved
  std::map<double, int> asked_;              // times asked once, not yet kept as a window
};

}  // namespace tune::sched
