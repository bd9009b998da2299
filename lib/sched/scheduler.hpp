// Trial schedulers: at each result, a scheduler decides whether a trial goes on, stops early or
// pauses (docs/SCHEDULERS.md). A scheduler sees numbers, never processes: the controller turns
// its decisions into stop and pause requests. Every scheduler is a pure unit a test can drive
// with a scripted list of results.
#pragma once

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spec/experiment.hpp"
#include "trial/trial.hpp"
#include "util/error.hpp"

namespace tune::sched {

using json = nlohmann::json;

// One result as a scheduler sees it.
struct Observation {
  std::string trial;            // trial id
  double time = 0;              // the result's time_attr value
  double score = std::nan("");  // the metric, oriented so that larger is better (NaN as given)
};

// kExploit (pbt): the trial continues from `donor`'s latest checkpoint with `config`.
enum class Action { kContinue, kStop, kPause, kExploit };

// Why a scheduler stopped or paused a trial (kept with the trial in the state).
using Why = trial::Cause;

struct Decision {
  Action action = Action::kContinue;
  Why why = Why::kNone;
  double at = 0;  // the time_attr value it was decided at
  // pbt: the trial should checkpoint now (step mode saves; function mode has what it reported).
  bool save = false;
  std::string donor = {};        // kExploit: whose checkpoint; with kContinue: an exploit of
                                 // this donor was skipped, as it has no checkpoint yet
  json config = json::object();  // kExploit: the trial's new config

  static Decision go() { return {}; }
};

// What a scheduler may ask about the trials besides their results (pbt needs configs and
// checkpoints). The controller answers from its state; tests answer from a script.
class Population {
 public:
  virtual ~Population() = default;
  // The trial's config (nullptr if unknown).
  [[nodiscard]] virtual const json* config(const std::string& trial) const = 0;
  // Whether the trial has a checkpoint another trial could start from.
  [[nodiscard]] virtual bool has_checkpoint(const std::string& trial) const = 0;
  // Whether trials wait for a slot (pending, paused ready to run, or not created yet).
  [[nodiscard]] virtual bool trials_waiting() const = 0;
};

// A decision about a trial that is not the one reporting (a paused trial that a hyperband rung
// now stops or lets run again).
struct Verdict {
  std::string trial;
  Action action = Action::kContinue;  // kStop: terminate it; kContinue: it may run again
  Why why = Why::kNone;
  double at = 0;
};

class TrialScheduler {
 public:
  virtual ~TrialScheduler() = default;
  // A new trial exists (index: its creation order, for seeded choices such as asha's bracket).
  virtual void on_trial_add(const std::string& trial, uint64_t index) = 0;
  // A result of a running trial: what the trial does next.
  [[nodiscard]] virtual Decision on_result(const Observation& r) = 0;
  // The trial ended (TERMINATED or ERROR), with its last result if it had one.
  virtual void on_complete(const std::string& trial, const std::optional<Observation>& last) = 0;
  // No trial will be added any more (the search space is exhausted or the run is stopping).
  virtual void on_no_more_trials() {}
  // Decisions about paused trials, made since the last call.
  [[nodiscard]] virtual std::vector<Verdict> take_verdicts() { return {}; }
  // Whether a paused trial may run again now.
  [[nodiscard]] virtual bool may_resume(const std::string& trial) const {
    (void)trial;
    return true;
  }
  // Which waiting trial runs first: the lowest value (ties: creation order). pbt: the one
  // that has advanced least, so a population larger than the slots evolves evenly.
  [[nodiscard]] virtual double priority(const std::string& trial) const {
    (void)trial;
    return 0;
  }
  // The trials' configs and checkpoints, for schedulers that need them (kept, not owned).
  virtual void attach(const Population* population) { (void)population; }
  // Its state, saved with the experiment state so that a resumed run decides as an
  // uninterrupted one; restore() refuses a state that is not its own, naming the field.
  [[nodiscard]] virtual json save() const = 0;
  [[nodiscard]] virtual Result<void> restore(const json& state) = 0;
  // A scheduler whose state grows with every result (median_stopping: every trial's results)
  // keeps the bulk of it in an append-only log beside the experiment state, so that a state
  // write costs what changed since the last one, not the whole history. log_tail(): whole lines
  // to append before the next state write (empty: none); log_written(): they were appended, and
  // save() leaves them out from now on. restore_log(): the log's text, up to the length the state
  // recorded, before restore() (which then adds the state's own part); `where` names the file.
  [[nodiscard]] virtual std::string log_tail() const { return {}; }
  virtual void log_written() {}
  [[nodiscard]] virtual Result<void> restore_log(std::string_view text, const std::string& where) {
    (void)text;
    (void)where;
    return {};
  }
};

// The scheduler a spec asks for; `seed` is the experiment's.
[[nodiscard]] std::unique_ptr<TrialScheduler> make_scheduler(const spec::SchedulerSpec& spec,
                                                             uint64_t seed);

// numpy's nanpercentile with linear interpolation: the q-th percentile (0..100) of the values
// that are not NaN; NaN when there are none.
[[nodiscard]] double nan_percentile(std::vector<double> values, double q);

}  // namespace tune::sched
