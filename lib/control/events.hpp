// What a run tells the views that watch it (the live table, tests): the controller calls its
// observer and never knows what is drawn. Observers read the state; they never change the run,
// and a failure to draw is theirs to log.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "spec/experiment.hpp"
#include "state/state.hpp"

namespace tune::control {

// One look at a run: the experiment, its state as of `now` (the executor's monotonic clock).
struct RunSnapshot {
  double now = 0;
  const state::ExperimentState& state;
  const spec::Experiment& exp;
};

// What happened to one trial, in the order it happened for that trial.
enum class TrialEvent {
  kStart,       // an attempt started (a first start, a retry, a resume)
  kResult,      // detail: the result row as written to result.json
  kCheckpoint,  // detail: {"checkpoint": dir name, "iteration": N}
  kComplete,    // it ended TERMINATED
  kError        // it ended in ERROR (t.error says why)
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  // Called on every loop turn; `notable`: something a view should show at once (a host came
  // or went, the run is about to end) rather than at its own pace.
  virtual void on_progress(const RunSnapshot& snap, bool notable) = 0;
  // The run ended (every trial done, the budget spent, or the user interrupted); the state is
  // final and saved.
  virtual void on_run_end(const RunSnapshot& snap) = 0;
  // Seconds until this observer next wants on_progress; the loop sleeps no longer than that.
  [[nodiscard]] virtual double seconds_until_due(double now) const = 0;
  // One trial's event, as it happens (on the loop: observers only take note).
  virtual void on_trial_event(TrialEvent /*kind*/, const trial::Trial& /*t*/,
                              const nlohmann::json& /*detail*/) {}
};

// Several observers as one: each call goes to each, in order.
class ObserverList final : public RunObserver {
 public:
  explicit ObserverList(std::vector<RunObserver*> list) : list_(std::move(list)) {}
  void on_progress(const RunSnapshot& snap, bool notable) override {
    for (auto* o : list_) o->on_progress(snap, notable);
  }
  void on_run_end(const RunSnapshot& snap) override {
    for (auto* o : list_) o->on_run_end(snap);
  }
  [[nodiscard]] double seconds_until_due(double now) const override {
    double due = 3600;
    for (auto* o : list_) due = std::min(due, o->seconds_until_due(now));
    return due;
  }
  void on_trial_event(TrialEvent kind, const trial::Trial& t,
                      const nlohmann::json& detail) override {
    for (auto* o : list_) o->on_trial_event(kind, t, detail);
  }

 private:
  std::vector<RunObserver*> list_;
};

}  // namespace tune::control
