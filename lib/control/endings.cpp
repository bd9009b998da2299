// How attempts and trials end: stop requests (user, scheduler, deadline, Ctrl-C), an attempt's
// exit read as success, failure (retried with back-off), pre-emption or interruption.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>

#include "control/controller.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::control {

using exec::ExitReason;
using trial::Status;

namespace {

std::string describe_exit(const exec::ExitInfo& info) {
  if (!info.error.empty()) return info.error;
  if (info.signal) {
    const char* name = sigabbrev_np(*info.signal);
    return "killed by signal " + std::to_string(*info.signal) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  if (info.exit_code) return "exit code " + std::to_string(*info.exit_code);
  return exec::exit_reason_name(info.reason);
}

}  // namespace

void Controller::request_stop(trial::Trial& t, Runtime& rt, StopWhy why) {
  // A stop criterion, done or a scheduler's decision is final: a later Ctrl-C does not make
  // the trial interrupted.
  bool final = is_final(rt.stop_why);
  if (rt.stop_why == StopWhy::kNone ||
      (!final && (why == StopWhy::kUser || why == StopWhy::kFailFast)))
    rt.stop_why = why;
  double now = ex_.now();
  if (exp_.trial.mode == spec::TrialMode::kStep && why != StopWhy::kUser &&
      why != StopWhy::kFailFast) {
    // Asked over stdin once the command in flight is answered (and the final checkpoint is
    // saved); the grace period starts when {"op":"stop"} is sent. The time budget is a hard
    // limit: a trial stuck in a step is stopped after the grace period regardless.
    if (why == StopWhy::kBudget && rt.kill_deadline < 0) rt.kill_deadline = now + opts_.grace_s;
    return;
  }
  if (why == StopWhy::kDone) {
    // The trial said it is done: let it exit by itself, then insist.
    if (rt.kill_deadline < 0) rt.kill_deadline = now + opts_.grace_s;
    return;
  }
  if (!rt.term_sent) {
    ex_.stop(t.id, false);
    rt.term_sent = true;
  }
}

void Controller::stop_all(StopWhy why, bool now) {
  for (auto& [id, rt] : running_) {
    if (rt.deferred_exit) continue;  // ended already
    auto& t = trial(id);
    if (now) {
      if (!is_final(rt.stop_why)) rt.stop_why = why;
      ex_.stop(id, true);
    } else {
      request_stop(t, rt, why);
    }
  }
}

void Controller::on_interrupt() {
  ++interrupts_;
  interrupted_ = true;
  stopping_ = true;
  if (interrupts_ == 1) {
    spdlog::warn("interrupted: stopping {} running trial(s) (Ctrl-C again to stop at once)",
                 running_.size());
    stop_all(StopWhy::kUser, false);
  } else {
    spdlog::warn("interrupted again: killing running trials now");
    stop_all(StopWhy::kUser, true);
  }
}

void Controller::check_deadlines(double now) {
  if (exp_.time_budget_s && !budget_spent_ &&
      elapsed_before_ + (now - run_started_) >= *exp_.time_budget_s) {
    budget_spent_ = true;
    stopping_ = true;
    spdlog::info("time budget of {} s spent: stopping", util::format_double(*exp_.time_budget_s));
    stop_all(StopWhy::kBudget, false);
  }
  for (auto& [id, rt] : running_) {
    if (rt.kill_deadline < 0 || now < rt.kill_deadline || rt.deferred_exit) continue;
    rt.kill_deadline = -1;
    if (!rt.term_sent) {
      ex_.stop(id, false);  // the supervisor escalates to SIGKILL after its own grace period
      rt.term_sent = true;
    }
  }
}

void Controller::finish(trial::Trial& t, Status status, const std::string& error) {
  t.status = status;
  t.error = error;
  if (status == Status::kError)
    spdlog::error("trial {} failed: {}", t.name, error);
  else
    spdlog::info("trial {} {}", t.name, trial::status_name(status));
  if (t.finished()) {
    if (!t.pending_exploit.is_null()) {  // ended before the exploit was carried out
      std::string donor_id = t.pending_exploit.value("donor", "");
      spdlog::info("trial {}: its exploit of {} is dropped: it ended first", t.name, donor_id);
      t.pending_exploit = nullptr;
      if (auto d = index_.find(donor_id); d != index_.end()) {
        trial::Trial& donor = state_.trials[d->second];
        apply_retention(donor, !donor.finished());
      }
    }
    apply_retention(t, false);
    notify(status == Status::kError ? TrialEvent::kError : TrialEvent::kComplete, t);
    searcher_->on_complete({t.id, t.config, status == Status::kError ? std::nullopt : value_of(t),
                            t.last_result, status == Status::kError});
    scheduler_complete(t);
  }
  mark_dirty();
}

void Controller::on_exit(const std::string& id, const exec::ExitInfo& info) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  auto& t = trial(id);
  Runtime& rt = it->second;
  if (rt.copies_in_flight > 0) {  // its checkpoints are still being copied in: wait for them
    rt.deferred_exit = info;
    return;
  }
  // A partial last line (no newline) still counts as a line once the process is gone.
  if (rt.splitter.pending() > 0) on_output(exec::OutputEvent(id, "\n"));
  // Its dir deleted or replaced before the once-a-second look saw it (the trial most likely
  // crashed writing there): it fails for that reason, as check_trial_dirs would have said.
  if (rt.stop_why == StopWhy::kNone && !stopping_ &&
      (info.reason == ExitReason::kExited || info.reason == ExitReason::kSupervisorDied ||
       info.reason == ExitReason::kOutputLost))
    (void)trial_dir_lost(t, rt, true);
  StopWhy why = rt.stop_why;
  // An attempt that never ran (its exit record says why: its FIFO could not be made, say) did
  // not get its commands for that reason: it fails for the record's.
  if (why == StopWhy::kStdinLost &&
      (info.reason == ExitReason::kExecFailed || info.reason == ExitReason::kDirBusy))
    why = StopWhy::kNone;
  std::string rt_lost_why = rt.lost_why;
  // (an attempt whose output could not all be kept failed, whatever its exit code)
  bool clean = info.exit_code && *info.exit_code == 0 && info.reason != ExitReason::kOutputLost;
  // Ended by a stop criterion, by saying done, by the budget, or by itself with exit 0.
  // driver_stop without a stop of ours: an earlier driver's, or `tune stop`'s.
  bool by_supervisor =
      info.reason == ExitReason::kOrphaned || info.reason == ExitReason::kHostLost ||
      info.reason == ExitReason::kPreempted || info.reason == ExitReason::kDriverStop;
  bool terminated = why == StopWhy::kCriterion || why == StopWhy::kDone ||
                    why == StopWhy::kBudget || why == StopWhy::kScheduler ||
                    (why == StopWhy::kNone && clean && !by_supervisor);
  // The driver ended it for another reason: interrupted, resumed later from its
  // latest checkpoint, whatever its exit code, and never counted as a failure. A supervisor
  // that stopped its trial because the driver went silent (a stopped or suspended driver)
  // counts as the driver's doing too, as does a host lost for longer than host_timeout_s.
  bool interrupted = !terminated && !is_failure(why) &&
                     (why == StopWhy::kUser || why == StopWhy::kFailFast || by_supervisor);
  if (auto r = terminated ? rt.log.mark_last_done() : rt.log.flush(); !r)
    spdlog::warn("trial {}: {}", t.name, r.error().message);
  rt.log.close();
  pool_.release(rt.placement);
  running_.erase(it);

  if (terminated) {
    if (why == StopWhy::kScheduler) t.reason = trial::Reason::kStopped;
    finish(t, Status::kTerminated, "");
    return;
  }
  if (why == StopWhy::kPause) {  // whatever its exit code: the driver ended it
    paused(t);
    return;
  }
  if (why == StopWhy::kResync) {  // a step-mode attempt found after a crash: restart it
    set_pending(t);
    return;
  }
  if (interrupted) return attempt_interrupted(t, info);
  attempt_failed(t, info, why, rt_lost_why);
}

void Controller::attempt_interrupted(trial::Trial& t, const exec::ExitInfo& info) {
  if (info.reason == ExitReason::kOrphaned || info.reason == ExitReason::kHostLost ||
      info.reason == ExitReason::kPreempted)
    spdlog::warn("trial {}: {}; it resumes from its latest checkpoint", t.name,
                 info.reason == ExitReason::kOrphaned
                     ? "its supervisor stopped it while the driver was silent (stopped or "
                       "suspended past orphan_timeout_s)"
                     : info.error);
  if (info.restart_from) rewind_checkpoints(t, *info.restart_from);
  interrupt(t);
}

void Controller::attempt_failed(trial::Trial& t, const exec::ExitInfo& info, StopWhy why,
                                const std::string& lost_why) {
  std::string why_text =
      why == StopWhy::kDirLost     ? "its trial dir was deleted or replaced while it ran"
      : why == StopWhy::kStdinLost ? "its step-mode commands could not reach it: " + lost_why
                                   : describe_exit(info);
  // (not for an attempt that never ran: the log's last line is another attempt's)
  if (info.reason != ExitReason::kExecFailed && info.reason != ExitReason::kDirBusy &&
      !is_failure(why)) {
    std::string tail = util::last_line(trial_dir(t) / "stderr.log");
    if (!tail.empty() && tail.find("tune-supervisor:") == std::string::npos &&
        !exec::is_attempt_marker(tail))  // the attempt wrote nothing there
      why_text += ": " + tail;
  }
  t.failures += 1;
  int max = exp_.failure.max_failures;
  bool retry =
      info.reason != ExitReason::kExecFailed && !stopping_ && (max < 0 || t.failures <= max);
  if (retry) {
    schedule_retry(t, why_text);
    return;
  }
  finish(t, Status::kError, why_text);
  if (exp_.failure.fail_fast && !stopping_) {
    spdlog::error("fail_fast: stopping the experiment after the first error");
    stopping_ = true;
    stop_all(StopWhy::kFailFast, false);
  }
}

void Controller::interrupt(trial::Trial& t) {
  set_pending(t);
  t.reason = trial::Reason::kInterrupted;
  mark_dirty();
}

void Controller::schedule_retry(trial::Trial& t, const std::string& why_text) {
  int max = exp_.failure.max_failures;
  t.fail_streak += 1;
  // Exponential back-off between attempts that fail without reporting anything: 0.25 s, 0.5 s,
  // 1 s, ... capped at a minute, so a script that dies at once cannot spin the driver.
  double delay = std::min(kMaxRetryDelay,
                          opts_.retry_backoff_s * std::pow(2.0, std::min(t.fail_streak - 1, 16)));
  // The same failure again and again is logged at its 1st, 2nd, 4th, 8th... occurrence.
  bool same = t.last_failure == why_text;
  t.last_failure = why_text;
  int repeats = same ? t.fail_streak : 1;
  std::string of = max < 0 ? std::string("unlimited") : std::to_string(max);
  if (!same || (repeats & (repeats - 1)) == 0) {
    if (repeats > 1)
      spdlog::warn("trial {} failed again ({}), {} times in a row; retrying in {} s ({} of {})",
                   t.name, why_text, repeats, util::format_double(delay), t.failures, of);
    else
      spdlog::warn("trial {} failed ({}); retrying in {} s ({} of {})", t.name, why_text,
                   util::format_double(delay), t.failures, of);
  } else {
    spdlog::debug("trial {} failed again ({}); retrying in {} s", t.name, why_text,
                  util::format_double(delay));
  }
  set_pending(t);
  retry_at_[t.index] = ex_.now() + delay;
  t.error = why_text;
  mark_dirty();
}

}  // namespace tune::control
