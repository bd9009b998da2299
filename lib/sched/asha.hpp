// Asynchronous successive halving (ASHA): Li et al., "A System for Massively Parallel
// Hyperparameter Tuning", MLSys 2020, Algorithm 2 — with the rules of Ray Tune's
// AsyncHyperBandScheduler, so that results carry over (docs/SCHEDULERS.md).
//
// Bracket s has rungs at the milestones grace_period · rf^k (k = s, s+1, ... while below the
// log-ratio bound). At each result at time t, the one rung checked is the highest milestone <= t
// that this trial has not recorded a value at yet. Its cutoff is the (1 - 1/rf) quantile of the
// values *other* trials recorded there (linear interpolation, NaN ignored); the trial stops if its
// value is strictly below it (values are oriented so that larger is better). An empty rung never
// stops a trial; a NaN value never stops one. The value is recorded either way. Reaching max_t
// stops a trial. A new trial joins a bracket drawn with probability ∝ e^(rungs - most rungs).
#pragma once

#include <map>

#include "sched/scheduler.hpp"

namespace tune::sched {

class Asha final : public TrialScheduler {
 public:
  Asha(const spec::SchedulerSpec& spec, uint64_t seed);

  void on_trial_add(const std::string& trial, uint64_t index) override;
  [[nodiscard]] Decision on_result(const Observation& r) override;
  void on_complete(const std::string& trial, const std::optional<Observation>& last) override;
  [[nodiscard]] json save() const override;
  [[nodiscard]] Result<void> restore(const json& state) override;

  // The milestones of bracket s, highest first (for tests and docs).
  [[nodiscard]] std::vector<double> milestones(size_t bracket) const;
  // The bracket a trial joined.
  [[nodiscard]] std::optional<size_t> bracket_of(const std::string& trial) const;

 private:
  struct Rung {
    double milestone = 0;
    std::map<std::string, double> recorded;  // trial -> value at this rung
    std::vector<double> sorted;              // the recorded values but NaN, ascending
  };
  // Checks and records r at its bracket's rung; returns whether it falls below the cutoff.
  bool record(const Observation& r);

  spec::SchedulerSpec spec_;
  uint64_t seed_;
  std::vector<std::vector<Rung>> brackets_;  // rungs of each bracket, highest milestone first
  std::map<std::string, size_t> bracket_;    // trial -> its bracket
};

}  // namespace tune::sched
