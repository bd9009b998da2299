// The controller's side of trial schedulers (sched/): what a scheduler sees of each result, and
// its decisions carried out — a stop ends the trial as TERMINATED, a pause ends its attempt and
// parks it as PAUSED until the scheduler lets it run again from its latest checkpoint.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"
#include "util/strings.hpp"

namespace tune::control {

using json = nlohmann::json;
using trial::Status;

std::optional<sched::Observation> Controller::observe(const trial::Trial& t,
                                                      const json& result) const {
  const auto& s = exp_.scheduler;
  auto tm = result.find(s.time_attr);
  auto mv = result.find(s.metric);
  if (tm == result.end() || mv == result.end() || !tm->is_number() || !mv->is_number())
    return std::nullopt;  // Ray's rule: a result without them changes nothing
  double v = mv->get<double>();
  return sched::Observation{t.id, tm->get<double>(), s.mode == spec::Order::kMax ? v : -v};
}

std::optional<double> Controller::value_of(const trial::Trial& t) const {
  if (!exp_.metric) return std::nullopt;
  auto it = t.last_result.find(*exp_.metric);
  if (it == t.last_result.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  return exp_.mode == spec::Order::kMax ? -v : v;  // searchers minimise
}

void Controller::say_unobserved(const trial::Trial& t, const json& result) {
  if (said_unobserved_) return;
  said_unobserved_ = true;
  const auto& s = exp_.scheduler;
  std::string missing;
  for (const std::string* key : {&s.time_attr, &s.metric}) {
    auto it = result.find(*key);
    if (it != result.end() && it->is_number()) continue;
    missing += (missing.empty() ? "'" : " and '") + *key + "'" +
               (it == result.end() ? "" : " (not a number)");
  }
  // Ray's rule: such a result changes nothing. Silent, a misspelt key would turn the
  // scheduler off for the whole run.
  spdlog::warn(
      "trial {}: a result without {} ({} needs time_attr '{}' and metric '{}' as numbers): "
      "the scheduler skips such results (said once a run)",
      t.name, missing, spec::scheduler_name(s.kind), s.time_attr, s.metric);
}

void Controller::consult_scheduler(trial::Trial& t, Runtime& rt, json& result) {
  rt.decision = sched::Decision::go();
  if (exp_.scheduler.kind == spec::SchedulerKind::kFifo || rt.stop_why != StopWhy::kNone) return;
  auto obs = observe(t, result);
  if (!obs) {
    say_unobserved(t, result);
    return;
  }
  rt.decision = sched_->on_result(*obs);
  mark_dirty();
  if (rt.decision.action != sched::Action::kExploit && !rt.decision.donor.empty())
    exploit_skipped(t, rt.decision.donor);
  if (rt.decision.action == sched::Action::kExploit && !plan_exploit(t, rt.decision)) {
    bool save = rt.decision.save;
    rt.decision = sched::Decision::go();
    rt.decision.save = save;
  }
  if (rt.decision.action == sched::Action::kContinue) {
    apply_verdicts();
    return;
  }
  t.cause = rt.decision.why;
  t.decided_at = rt.decision.at;
  trial::Trial view = t;
  view.reason =
      rt.decision.action == sched::Action::kStop ? trial::Reason::kStopped : trial::Reason::kPaused;
  // (an exploit is carried out as a pause: the trial's attempt ends, it restarts from the donor)
  std::string what = trial::describe_decision(view, spec::scheduler_name(exp_.scheduler.kind));
  result["decision"] = what;
  if (rt.decision.action == sched::Action::kStop) result["done"] = true;
  spdlog::info("trial {}: {}", t.name, what);
  apply_verdicts();
}

void Controller::act_on_decision(trial::Trial& t, Runtime& rt) {
  if (rt.decision.action == sched::Action::kContinue) return;
  // Function mode: later results are ignored from now on.
  bool pause =
      rt.decision.action == sched::Action::kPause || rt.decision.action == sched::Action::kExploit;
  rt.stop_why = pause ? StopWhy::kPause : StopWhy::kScheduler;
  t.reason = pause ? trial::Reason::kPaused : trial::Reason::kStopped;
  stop_decided(t, rt);
}

state::JournalledDecision Controller::journalled(const trial::Trial& t) const {
  state::JournalledDecision d{t.id, t.attempt, t.reason, t.cause, t.decided_at, t.iteration, {}};
  if (t.reason == trial::Reason::kPaused && t.pending_exploit.is_object())
    d.exploit = t.pending_exploit;  // replayed as decided: same donor, checkpoint and config
  return d;
}

void Controller::stop_decided(trial::Trial& t, Runtime& rt) {
  mark_dirty();
  // One journal line, not a whole state: the state records the decision at its next periodic
  // write (one forced write per decision would cost O(trials²) over a large run, and batching
  // those writes kept stopped trials running meanwhile).
  if (auto r = journal_.record_decision(journalled(t)); !r)
    spdlog::warn("trial {}: the decision could not be journalled ({}): stopping it anyway", t.name,
                 r.error().message);
  if (rt.term_sent || rt.deferred_exit) return;
  ex_.stop(t.id, false);
  rt.term_sent = true;
}

void Controller::replay_decision(trial::Trial& t, Runtime& rt, json& result) {
  if (!rt.replay || t.iteration < rt.replay->iteration) return;
  state::JournalledDecision d = *std::exchange(rt.replay, std::nullopt);
  // What was decided before the crash is carried out exactly, whatever the scheduler (restored
  // from an older state) decided this time: the same action, and for an exploit the same donor,
  // donor checkpoint and new config. A pause is not an exploit, nor an exploit another one.
  bool pause = d.reason == trial::Reason::kPaused;
  bool exploit = pause && d.exploit.is_object();
  sched::Action was = !pause    ? sched::Action::kStop
                      : exploit ? sched::Action::kExploit
                                : sched::Action::kPause;
  bool same = rt.decision.action == was &&
              (!exploit || (t.pending_exploit.is_object() &&
                            t.pending_exploit.value("donor", "") == d.exploit.value("donor", "") &&
                            t.pending_exploit.value("donor_seq", int64_t{-1}) ==
                                d.exploit.value("donor_seq", int64_t{-2}) &&
                            t.pending_exploit["new_config"] == d.exploit["new_config"]));
  // The journalled record stands even when decided alike (it keeps the first decision's time).
  t.pending_exploit = exploit ? d.exploit : json(nullptr);
  if (same) return;  // decided alike again (the scheduler saw the same results in order)
  spdlog::warn(
      "trial {}: the scheduler decided otherwise on results read again after a crash: "
      "carrying out the decision taken before it",
      t.name);
  rt.decision = sched::Decision::go();
  rt.decision.action = was;
  if (exploit) {
    rt.decision.donor = d.exploit.value("donor", "");
    rt.decision.config = d.exploit.value("new_config", json::object());
  }
  rt.decision.why = d.cause;
  rt.decision.at = d.decided_at;
  t.cause = d.cause;
  t.decided_at = d.decided_at;
  trial::Trial view = t;
  view.reason = d.reason;
  std::string what = trial::describe_decision(view, spec::scheduler_name(exp_.scheduler.kind));
  result["decision"] = what;
  if (!pause) result["done"] = true;
  spdlog::info("trial {}: {}, as decided before the driver stopped", t.name, what);
}

void Controller::journal_replays() {
  for (const auto& [id, rt] : running_)
    if (rt.replay)
      if (auto r = journal_.record_decision(*rt.replay); !r)
        spdlog::warn("trial {}: {}", trial(id).name, r.error().message);
}

void Controller::paused(trial::Trial& t) {
  t.status = Status::kPaused;
  t.reason = trial::Reason::kPaused;
  bool exploit = !t.pending_exploit.is_null();
  if (exploit) carry_out_exploit(t);  // it goes on from the donor's checkpoint (pbt)
  const trial::Checkpoint* c = t.latest_checkpoint();
  int64_t from = c ? c->iteration : 0;
  if (!exploit && from < t.iteration && !t.told_stale_checkpoint) {
    t.told_stale_checkpoint = true;
    spdlog::warn(
        "trial {}: paused at iteration {}, but its latest checkpoint is {}: it resumes from "
        "there and repeats {} iteration(s) (checkpoint at every rung to lose nothing)",
        t.name, t.iteration, c ? "from iteration " + std::to_string(from) : std::string("none"),
        t.iteration - from);
  }
  mark_dirty();
  if (sched_->may_resume(t.id)) {
    pending_.insert(t.index);  // stays PAUSED until it starts again
  } else {
    paused_.insert(t.index);
  }
}

void Controller::apply_verdicts() {
  for (const auto& v : sched_->take_verdicts()) {
    auto found = index_.find(v.trial);
    if (found == index_.end()) continue;
    trial::Trial& t = state_.trials[found->second];
    if (auto run = running_.find(t.id); run != running_.end()) {
      // Its pause is under way: a stop now makes it TERMINATED when it exits.
      if (v.action == sched::Action::kStop && run->second.stop_why == StopWhy::kPause) {
        run->second.stop_why = StopWhy::kScheduler;
        t.cause = v.why;
        t.decided_at = v.at;
      }
      continue;
    }
    if (!paused_.count(t.index)) continue;
    if (v.action == sched::Action::kStop) {
      paused_.erase(t.index);
      t.reason = trial::Reason::kStopped;
      t.cause = v.why;
      t.decided_at = v.at;
      spdlog::info("trial {}: {}", t.name,
                   trial::describe_decision(t, spec::scheduler_name(exp_.scheduler.kind)));
      finish(t, Status::kTerminated, "");
    } else if (sched_->may_resume(t.id)) {
      paused_.erase(t.index);
      pending_.insert(t.index);
      spdlog::info("trial {}: goes on from {}", t.name, util::format_double(t.decided_at));
    }
    mark_dirty();
  }
}

void Controller::scheduler_complete(const trial::Trial& t) {
  sched_->on_complete(t.id, observe(t, t.last_result));
  apply_verdicts();
}

void Controller::maybe_no_more_trials() {
  if (told_no_more_ || state_.next_index < state_.total_trials) return;
  told_no_more_ = true;
  sched_->on_no_more_trials();
  apply_verdicts();
}

void Controller::release_stuck_paused() {
  if (paused_.empty()) return;
  spdlog::warn(
      "{} paused trial(s) got no decision from the scheduler and nothing else can run: "
      "resuming them",
      paused_.size());
  pending_.insert(paused_.begin(), paused_.end());
  paused_.clear();
}

}  // namespace tune::control
