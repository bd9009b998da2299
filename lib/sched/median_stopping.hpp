// The median stopping rule: Golovin et al., "Google Vizier: A Service for Black-Box
// Optimization", KDD 2017, §3.2.2 — with the rules of Ray Tune's MedianStoppingRule (hard stop).
//
// Once a trial's time t >= grace_period and at least min_samples_required *other* trials
// (running or finished) have a result at or past t, the trial stops if its best value so far is
// strictly below the median of those trials' running means over [grace_period, t] (values are
// oriented so that larger is better). Unlike Ray it never pauses a trial for lack of samples:
// it waits for them.
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

 private:
  // A trial's results, in time order.
  struct History {
    std::vector<double> time, score;
    double best = -INFINITY;  // its best score (NaN ignored)
  };
  // The mean score over [grace_period, t] (NaN if it has none there).
  [[nodiscard]] double running_mean(const History& h, double t) const;

  spec::SchedulerSpec spec_;
  std::map<std::string, History> trials_;
};

}  // namespace tune::sched
