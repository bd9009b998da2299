// Population Based Training: Jaderberg et al., "Population Based Training of Neural Networks",
// 2017 — asynchronous, with the rules of Ray Tune's PopulationBasedTraining so that results
// carry over (docs/SCHEDULERS.md lists where ours differs).
//
// A trial is checked when its time has advanced perturbation_interval since its last check (and
// is past burn_in_period). Its score then is recorded, and the unfinished trials with a recorded
// score are ranked: the bottom and top quantiles hold ceil(n · quantile_fraction) trials each, at
// most floor(n / 2). A top trial checkpoints; a bottom one takes a random top trial's checkpoint
// and config and explores it (explore.cpp). When trials wait for a slot, a trial that is not
// exploited is paused at its check so they get their turn; the one that has advanced least runs
// first. Every random draw comes from the experiment's seed and a counter kept in the state.
#pragma once

#include <map>

#include "sched/scheduler.hpp"
#include "search/rng.hpp"

namespace tune::sched {

// The explore step: a new config from the donor's, each mutation resampled with probability
// resample_probability, else perturbed by a factor and kept within its distribution's bounds.
[[nodiscard]] json explore(const spec::SchedulerSpec& spec, const json& config, search::Rng& rng);

class Pbt final : public TrialScheduler {
 public:
  Pbt(const spec::SchedulerSpec& spec, uint64_t seed) : spec_(spec), seed_(seed) {}

  void on_trial_add(const std::string& trial, uint64_t index) override;
  [[nodiscard]] Decision on_result(const Observation& r) override;
  void on_complete(const std::string& trial, const std::optional<Observation>& last) override;
  [[nodiscard]] double priority(const std::string& trial) const override;
  void attach(const Population* population) override { population_ = population; }
  [[nodiscard]] json save() const override;
  [[nodiscard]] Result<void> restore(const json& state) override;

  // The bottom and top quantiles now, worst first (for tests and docs).
  [[nodiscard]] std::pair<std::vector<std::string>, std::vector<std::string>> quantiles() const;

 private:
  struct State {
    uint64_t index = 0;           // creation order (ties in the ranking)
    double last_check = 0;        // time_attr at its last check (Ray's last_perturbation_time)
    std::optional<double> score;  // its score at its last check
  };

  spec::SchedulerSpec spec_;
  uint64_t seed_;
  uint64_t draws_ = 0;  // decisions that drew random numbers so far (the RNG's state)
  std::map<std::string, State> trials_;
  const Population* population_ = nullptr;
};

}  // namespace tune::sched
