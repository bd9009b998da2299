// A resume's side of the trials that were RUNNING when the last driver ended: their attempts
// re-attached where they still run (or ended meanwhile), decisions taken before a crash carried
// out, and attempts no trial expects ended before anything starts.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"

namespace tune::control {

// The state a resume starts from: the searcher's and scheduler's state restored, the trials
// checked, decisions journalled before the crash read back, and each unfinished trial
// re-attached, queued or kept paused.
void Controller::restore(state::ExperimentState resume) {
  state_ = std::move(resume);
  elapsed_before_ = state_.elapsed_s;
  if (auto r = searcher_->restore(state_.search_alg);
      !r && exp_.search_alg.kind != search::SearcherKind::kRandom)
    throw Fatal(exp_.dir().string() + "/" + state::kStateFile + ": " + r.error().message +
                ": it cannot be resumed");
  if (auto r = restore_scheduler_log(); !r)
    throw Fatal(r.error().message + ": it cannot be resumed");
  if (auto r = sched_->restore(state_.scheduler);
      !r && exp_.scheduler.kind != spec::SchedulerKind::kFifo)
    throw Fatal(exp_.dir().string() + "/" + state::kStateFile + ": " + r.error().message +
                ": it cannot be resumed");
  std::sort(state_.trials.begin(), state_.trials.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
  for (size_t i = 0; i < state_.trials.size(); ++i)
    if (state_.trials[i].index != i || state_.next_index < state_.trials.size() ||
        state_.next_index > state_.total_trials)
      throw Fatal("experiment state of '" + exp_.name +
                  "' is inconsistent (trial indexes are not 0.." +
                  std::to_string(state_.trials.size() - 1) + "): it cannot be resumed");
  for (size_t i = 0; i < state_.trials.size(); ++i) index_[state_.trials[i].id] = i;
  trim_policy_log();  // before any exploit is carried out again
  for (auto& d : state_.decisions) journalled_[d.trial_id] = std::move(d);
  state_.decisions.clear();
  // Trials only the journal knows (created after the last full state write) join the
  // scheduler again, in creation order, as they did before the crash.
  for (const auto& t : state_.trials)
    if (!t.finished()) sched_->on_trial_add(t.id, t.index);
  for (auto& t : state_.trials) {
    // Attempts that outlived the crashed driver are re-attached; other trials that did not
    // end go back to the queue and restart from their latest checkpoint.
    // (a copy a second Ctrl-C cut short leaves it named by a trial that is no longer RUNNING)
    if (t.status != trial::Status::kRunning && !t.adopting.empty()) take_adopting_now(t);
    if (t.status == trial::Status::kRunning)
      resume_running(t);
    else if (t.status == trial::Status::kPending)
      set_pending(t);
    else if (t.status == trial::Status::kPaused) {
      if (!t.pending_exploit.is_null()) carry_out_exploit(t);
      (sched_->may_resume(t.id) ? pending_ : paused_).insert(t.index);
    }
  }
  order_catch_up();
  end_strays();
  fetch_all_remote_only();
}

void Controller::resume_running(trial::Trial& t) {
  fs::path dir = trial_dir(t);
  bool step = exp_.trial.mode == spec::TrialMode::kStep;
  exec::Launch l;
  l.trial_id = t.id;
  l.attempt = t.attempt;
  l.trial_dir = dir;
  l.cwd = exp_.trial.workdir;
  l.host = remote_host(t);
  l.stdout_offset = t.stdout_offset;
  l.stdin_fifo = step;
  l.job_id = t.job_id;
  settle_adopting(t);
  for (const auto& c : t.checkpoints) l.checkpoints.push_back(c.dir_name());
  auto found = ex_.attach(l);
  if (!found) spdlog::warn("trial {}: {}", t.name, found.error().message);
  if (!found || *found == exec::Attached::kGone) {
    spdlog::info("trial {} attempt {}: not running any more; it restarts", t.name, t.attempt);
    take_adopting_now(t);
    set_pending(t);
    return;
  }
  if (!step) {  // (step mode restarts what it finds: its output is not replayed)
    catch_up_.push_back(t.id);
    if (*found == exec::Attached::kEnded) caught_ended_.insert(t.id);
  }
  // Its placement: the GPUs it holds, else the first that fits (it runs regardless).
  auto placement = pool_.acquire_exact(exp_.trial.resources, t.gpu_ids,
                                       pool_.find(l.host.empty() ? "local" : l.host).value_or(0));
  Runtime& rt = running_[t.id];
  rt.placement = placement;
  double now = ex_.now();
  rt.started = now - std::max(0.0, ex_.wall_time() - t.attempt_started);
  rt.last_result_at = now;
  rt.time_base = t.time_base;
  rt.iterations_since_restore = t.iteration - t.restore_iteration;
  if (const auto* c = t.latest_checkpoint()) rt.last_checkpoint_iteration = c->iteration;
  // A stop or pause decided before the driver died, and recorded in the state or journalled
  // after the results it was decided on: carried out now. One the state does not record with
  // its results yet is applied when they are read again (replay_decision).
  std::optional<state::JournalledDecision> replay;
  if (auto j = journalled_.find(t.id); j != journalled_.end()) {
    if (t.reason == trial::Reason::kNone && j->second.attempt == t.attempt) {
      if (t.iteration >= j->second.iteration && !step) {
        t.reason = j->second.reason;
        t.cause = j->second.cause;
        t.decided_at = j->second.decided_at;
        if (j->second.exploit.is_object()) t.pending_exploit = j->second.exploit;
      } else if (!step) {
        replay = j->second;
      }
    }
    journalled_.erase(j);
  }
  StopWhy decided = t.reason == trial::Reason::kStopped  ? StopWhy::kScheduler
                    : t.reason == trial::Reason::kPaused ? StopWhy::kPause
                                                         : StopWhy::kNone;
  if (decided != StopWhy::kNone) {
    spdlog::info("trial {} attempt {}: found {}; {} as decided before the driver stopped", t.name,
                 t.attempt, *found == exec::Attached::kRunning ? "running" : "ended",
                 decided == StopWhy::kPause ? "pausing it" : "stopping it");
    rt.stop_why = decided;
    if (*found == exec::Attached::kRunning) {
      ex_.stop(t.id, false);
      rt.term_sent = true;
    }
    if (!step) {
      if (auto r = rt.log.open(dir); !r) spdlog::warn("trial {}: {}", t.name, r.error().message);
    }
    retake_adopting(t, rt);  // (a pause restarts from it)
    return;
  }
  if (step) {
    // Which command it was answering is unknown: stop it, then restart from its checkpoint.
    spdlog::info("trial {} attempt {}: found {}; step mode: stopping it to restart it", t.name,
                 t.attempt, *found == exec::Attached::kRunning ? "running" : "ended");
    rt.stop_why = StopWhy::kResync;
    if (*found == exec::Attached::kRunning) {
      ex_.stop(t.id, false);
      rt.term_sent = true;
    }
    retake_adopting(t, rt);
    return;
  }
  // Results recorded after the last state write are read again from the saved offset: drop
  // them from result.json first so that none is recorded twice.
  if (auto r = trial::ResultLog::truncate_after(dir, t.iteration); !r)
    spdlog::warn("trial {}: {}", t.name, r.error().message);
  reconcile_checkpoints(t, true, &rt);
  retake_adopting(t, rt);  // after the reconciliation, which would take its dir for a stray
  if (auto r = rt.log.open(dir); !r) spdlog::warn("trial {}: {}", t.name, r.error().message);
  spdlog::info("trial {} attempt {}: re-attached ({}), reading from byte {}", t.name, t.attempt,
               *found == exec::Attached::kRunning ? "running" : "ended meanwhile", t.stdout_offset);
  if (replay) {
    spdlog::info(
        "trial {}: {} at iteration {} before the driver stopped: carried out when its "
        "results are read again",
        t.name, replay->reason == trial::Reason::kPaused ? "paused" : "stopped", replay->iteration);
    rt.replay = std::move(replay);
  }
}

void Controller::order_catch_up() {
  // Launch order: when each attempt started (journalled or saved with its launch), then index.
  std::sort(catch_up_.begin(), catch_up_.end(), [&](const std::string& a, const std::string& b) {
    const trial::Trial &x = trial(a), &y = trial(b);
    return std::pair(x.attempt_started, x.index) < std::pair(y.attempt_started, y.index);
  });
  catch_up_deadline_ = ex_.now() + kCatchUpLimit;
  advance_catch_up();
}

namespace {
const std::string* trial_of(const exec::Event& ev) {
  if (const auto* o = std::get_if<exec::OutputEvent>(&ev)) return &o->trial_id;
  if (const auto* x = std::get_if<exec::ExitEvent>(&ev)) return &x->trial_id;
  return nullptr;
}
}  // namespace

void Controller::dispatch_in_order(exec::Event& ev) {
  const std::string* id = catch_up_.empty() ? nullptr : trial_of(ev);
  if (id && *id != catch_up_.front() &&
      std::find(catch_up_.begin(), catch_up_.end(), *id) != catch_up_.end()) {
    held_[*id].push_back(std::move(ev));  // launched after the front: it waits for its turn
    return;
  }
  dispatch(ev);
  if (!catch_up_.empty()) advance_catch_up();
}

void Controller::advance_catch_up() {
  while (!catch_up_.empty()) {
    const std::string front = catch_up_.front();
    if (auto h = held_.find(front); h != held_.end()) {
      std::vector<exec::Event> events = std::move(h->second);
      held_.erase(h);
      for (auto& ev : events) dispatch(ev);
    }
    // An attempt that had ended holds the later ones back until its exit is handled (and any
    // checkpoint copies it waited for); one still running gives no order to keep.
    if (caught_ended_.count(front) && running_.count(front)) return;
    catch_up_.pop_front();
    caught_ended_.erase(front);
  }
}

void Controller::release_catch_up() {
  spdlog::warn(
      "trial {}: its exit after a resume did not come within {:.0f} s: the output of {} later "
      "attempt(s) is handled without waiting for it",
      trial(catch_up_.front()).name, kCatchUpLimit, catch_up_.size() - 1);
  caught_ended_.clear();
  while (!catch_up_.empty()) {
    std::string id = catch_up_.front();
    catch_up_.pop_front();
    if (auto h = held_.find(id); h != held_.end()) {
      std::vector<exec::Event> events = std::move(h->second);
      held_.erase(h);
      for (auto& ev : events) dispatch(ev);
    }
  }
}

void Controller::end_strays() {
  std::unordered_map<std::string, const trial::Trial*> by_name;
  for (const auto& t : state_.trials) by_name[t.name] = &t;
  std::vector<exec::LiveAttempt> strays;
  for (auto& a : ex_.live_attempts()) {
    auto it = by_name.find(a.trial_name);
    const trial::Trial* t = it == by_name.end() ? nullptr : it->second;
    if (t && running_.count(t->id) && t->attempt == a.attempt && remote_host(*t) == a.host)
      continue;  // the attempt this resume re-attached
    spdlog::warn(
        "{} attempt {} still runs on {} but is not the trial's current attempt{}: "
        "stopping it before anything starts",
        a.trial_name, a.attempt, a.host.empty() ? host_name_ : a.host,
        t ? " (" + std::to_string(t->attempt) + ")" : std::string(" (unknown trial)"));
    strays.push_back(std::move(a));
  }
  if (!strays.empty()) ex_.end_attempts(strays, opts_.grace_s);
}

}  // namespace tune::control
