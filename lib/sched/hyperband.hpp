// Synchronous HyperBand: Li et al., "Hyperband: A Novel Bandit-Based Approach to
// Hyperparameter Optimization", JMLR 2018, Algorithm 1 — with Ray Tune's HyperBandScheduler's
// rules, except that brackets are filled in the paper's order (docs/SCHEDULERS.md).
//
// s_max = round(log_rf(max_t)). Bracket s holds n0 = ceil((s_max + 1) / (s + 1) · rf^s) trials
// that start with the budget r0 = floor(max_t · rf^-s) (a bracket with r0 = 0 is skipped). New
// trials fill bracket s_max first, then s_max - 1, ... 0, then a new band. A trial reaching its
// bracket's milestone is paused until every live trial of the bracket has reached it (and the
// bracket is full, or no more trials will come); then the best ceil(n / rf) (n: the bracket's
// nominal size at that rung; ties to the earlier trial) go on to min(milestone · rf, max_t) and
// the rest stop. A trial reaching max_t stops.
#pragma once

#include <map>

#include "sched/scheduler.hpp"

namespace tune::sched {

class HyperBand final : public TrialScheduler {
 public:
  explicit HyperBand(const spec::SchedulerSpec& spec);

  void on_trial_add(const std::string& trial, uint64_t index) override;
  [[nodiscard]] Decision on_result(const Observation& r) override;
  void on_complete(const std::string& trial, const std::optional<Observation>& last) override;
  void on_no_more_trials() override;
  [[nodiscard]] std::vector<Verdict> take_verdicts() override;
  [[nodiscard]] bool may_resume(const std::string& trial) const override;
  [[nodiscard]] json save() const override;
  [[nodiscard]] Result<void> restore(const json& state) override;

  // The paper's bracket sizes: n0 and r0 of bracket s.
  [[nodiscard]] int64_t n0(int s) const;
  [[nodiscard]] double r0(int s) const;
  [[nodiscard]] int s_max() const { return s_max_; }

 private:
  struct Member {
    std::string trial;
    double time = 0;              // its latest time_attr value
    double score = std::nan("");  // its value when it reached the milestone
    bool live = true;             // not stopped or ended
  };
  struct Bracket {
    int s = 0;
    int64_t n0 = 0;  // nominal size when full
    int64_t n = 0;   // nominal size at the current rung
    double milestone = 0;
    std::vector<Member> members;  // in the order they joined
  };
  // Decides the bracket's rung if every live member reached it; `reporting` gets its own
  // decision back, the others go to verdicts_.
  std::optional<Decision> settle(Bracket& b, const std::string& reporting);
  [[nodiscard]] bool full(const Bracket& b) const {
    return no_more_ || b.members.size() >= size_t(b.n0);
  }
  Member* find(const std::string& trial, Bracket** in);
  // The next bracket to fill: s_max first, skipping those with r0 = 0.
  Bracket& open_bracket();

  spec::SchedulerSpec spec_;
  int s_max_ = 0;
  std::vector<Bracket> brackets_;     // in the order they were opened
  std::map<std::string, size_t> at_;  // trial -> its bracket
  bool no_more_ = false;
  std::vector<Verdict> verdicts_;
};

}  // namespace tune::sched
