// What a run tells the views that watch it (the live table, tests): the controller calls its
// observer and never knows what is drawn. Observers read the state; they never change the run,
// and a failure to draw is theirs to log.
#pragma once

#include "spec/experiment.hpp"
#include "state/state.hpp"

namespace tune::control {

// One look at a run: the experiment, its state as of `now` (the executor's monotonic clock).
struct RunSnapshot {
  double now = 0;
  const state::ExperimentState& state;
  const spec::Experiment& exp;
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
};

}  // namespace tune::control
