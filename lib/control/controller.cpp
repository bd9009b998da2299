// The controller's loop: the run, exits, stops, deadlines and the experiment dir. Launching is in
// launching.cpp, results in results.cpp, state writes in state_writes.cpp, resume in resume.cpp.
#include "control/controller.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>

#include <sys/stat.h>

#include "report/refresher.hpp"
#include "search/space.hpp"
#include "search/space_json.hpp"
#include "sync/upload.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::control {

using json = nlohmann::json;
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

Controller::Controller(spec::Experiment exp, exec::Executor& executor, ControllerOptions opts,
                       RunObserver* observer)
    : exp_(std::move(exp)),
      ex_(executor),
      opts_(std::move(opts)),
      observer_(observer),
      pool_(opts_.hosts.empty() ? local_hosts(exp_) : opts_.hosts),
      policy_(checkpoint::Policy::from(exp_.checkpoint)),
      sched_(sched::make_scheduler(exp_.scheduler, exp_.seed.value_or(0))) {
  host_name_ = ex_.host_name();
  search::SearcherContext sc;
  sc.experiment_dir = exp_.dir();
  sc.cwd = exp_.trial.workdir;
  if (!opts_.python_helpers_dir.empty()) {
    const char* pp = std::getenv("PYTHONPATH");
    sc.env["PYTHONPATH"] = opts_.python_helpers_dir + (pp && *pp ? ":" + std::string(pp) : "");
  }
  sc.metric = exp_.metric;
  sc.mode = exp_.mode == spec::Order::kMax ? "max" : "min";
  auto searcher = search::make_searcher(exp_.search_alg, exp_.space, exp_.num_samples,
                                        exp_.seed.value_or(0), sc);
  if (!searcher) throw Fatal(searcher.error(), kExitUsage);
  searcher_ = std::move(*searcher);
  sched_->attach(this);
  load_warm_start();
}

Controller::~Controller() = default;

void Controller::note_job_ids() {
  for (auto& [id, job] : ex_.take_job_ids()) {
    auto it = index_.find(id);
    if (it == index_.end()) continue;
    trial::Trial& t = state_.trials[it->second];
    if (t.status != Status::kRunning || t.job_id == job) continue;
    t.job_id = job;
    mark_dirty();
  }
}

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
  StopWhy why = rt.stop_why;
  bool clean = info.exit_code && *info.exit_code == 0;
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
  bool interrupted =
      !terminated && (why == StopWhy::kUser || why == StopWhy::kFailFast || by_supervisor);
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
  if (interrupted) {
    if (info.reason == ExitReason::kOrphaned || info.reason == ExitReason::kHostLost ||
        info.reason == ExitReason::kPreempted)
      spdlog::warn("trial {}: {}; it resumes from its latest checkpoint", t.name,
                   info.reason == ExitReason::kOrphaned
                       ? "its supervisor stopped it while the driver was silent (stopped or "
                         "suspended past orphan_timeout_s)"
                       : info.error);
    if (info.restart_from) rewind_checkpoints(t, *info.restart_from);
    interrupt(t);
    return;
  }
  std::string why_text = describe_exit(info);
  if (info.reason != ExitReason::kExecFailed) {
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

void Controller::final_upload() {
  auto* up = opts_.uploader;
  if (!up) return;
  if (interrupts_ >= 2) {
    up->cancel();
    spdlog::warn("not mirrored to {} (interrupted twice); the next run mirrors it", up->target());
    return;
  }
  // Whatever runs now may predate the last state: wait for it, then mirror once more. A last
  // mirror that fails or is killed at sync_timeout (a stalled network) is tried again.
  spdlog::info("mirroring the experiment to {}", up->target());
  constexpr int kAttempts = 3;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (!mirror_once(*up)) return;
    if (up->failures() == 0) return;
    if (attempt < kAttempts)
      spdlog::warn("mirror to {} failed: trying again ({} of {})", up->target(), attempt + 1,
                   kAttempts);
  }
  spdlog::warn(
      "the experiment was not mirrored to {} ({} attempts failed); the next run "
      "mirrors it",
      up->target(), kAttempts);
}

bool Controller::mirror_once(sync::Uploader& up) {
  bool asked = false;
  while (true) {
    bool busy = up.poll();
    if (!busy && asked) return true;
    if (!busy) {
      up.request(true);
      asked = true;
      continue;
    }
    for (auto& ev : ex_.wait(0.1)) {
      if (std::holds_alternative<exec::InterruptEvent>(ev)) {
        up.cancel();
        spdlog::warn("mirror to {} cancelled; the next run mirrors it", up.target());
        return false;
      }
    }
  }
}

void Controller::draw(bool force) {
  if (!observer_) return;
  observer_->on_progress({ex_.now(), state_, exp_}, force);
}

int Controller::exit_code() const {
  if (interrupted_) return kExitInterrupted;
  for (const auto& t : state_.trials)
    if (t.status == Status::kError) return kExitTrialError;
  return kExitOk;
}

int Controller::run(std::optional<state::ExperimentState> resume) {
  run_started_ = ex_.now();
  bool resuming = resume.has_value();
  if (resume) {
    state_ = std::move(*resume);
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
      if (t.status == Status::kRunning)
        resume_running(t);
      else if (t.status == Status::kPending)
        set_pending(t);
      else if (t.status == Status::kPaused) {
        if (!t.pending_exploit.is_null()) carry_out_exploit(t);
        (sched_->may_resume(t.id) ? pending_ : paused_).insert(t.index);
      }
    }
    order_catch_up();
    end_strays();
    fetch_all_remote_only();
  } else {
    state_.name = exp_.name;
    state_.seed = exp_.seed.value_or(0);
    state_.total_trials = search::trial_count(exp_.space, exp_.num_samples);
    state_.start_time = ex_.wall_time();
  }
  state_.hosts.clear();
  for (const auto& h : pool_.hosts()) state_.hosts[h.name == "local" ? host_name_ : h.name] = "up";
  state_.metric = exp_.metric;
  state_.mode = exp_.mode == spec::Order::kMin ? "min" : "max";
  state_.phase = "running";
  if (!pool_.fits_somewhere(exp_.trial.resources))
    throw Fatal("trial.resources (cpu " + util::format_double(exp_.trial.resources.cpu) + ", gpu " +
                util::format_double(exp_.trial.resources.gpu) + ") fit on no host");
  std::error_code ec;
  fs::create_directories(exp_.dir(), ec);
  if (ec)
    throw Fatal("cannot create experiment dir '" + exp_.dir().string() + "': " + ec.message());
  check_experiment_dir(ex_.now());  // remembers which dir this run works in
  if (auto j = journal_.open(exp_.dir()); !j) throw Fatal(j.error());
  if (!maybe_save_state(true, true))
    throw Fatal("cannot write the experiment state in '" + exp_.dir().string() +
                "': nothing was started");
  start_searcher();
  if (!resuming) warm_searcher();
  if (resuming) check_stop_requests();  // asked while no driver ran

  if (resuming && opts_.process_started > 0)
    spdlog::info("resumed {} trial(s): {} re-attached, start-up took {:.3f} s",
                 state_.trials.size(), running_.size(), ex_.now() - opts_.process_started);
  lease_period_ = std::clamp(exp_.orphan_timeout_s / 4, 0.5, 10.0);
  if (resuming)
    for (const auto& t : state_.trials)
      if (t.finished()) clean_finished(t);
  double woke = ex_.now();
  while (true) {
    double now = ex_.now();
    check_deadlines(now);
    launch_ready();
    pool_.sync_ledger();  // what ended this turn and was not started again
    bool more = !stopping_ && (state_.next_index < state_.total_trials || !pending_.empty());
    if (running_.empty() && !more && !stopping_ && !paused_.empty()) {
      release_stuck_paused();
      continue;
    }
    if (running_.empty() && !more) break;
    if (interrupts_ >= 2 || lost_) break;
    double timeout = wait_timeout(now);
    longest_stall_ = std::max(longest_stall_, ex_.now() - woke);
    double slept_from = ex_.now(), wall_from = ex_.wall_time();
    auto events = ex_.wait(timeout);
    woke = ex_.now();
    longest_overrun_ = std::max(longest_overrun_, woke - slept_from - timeout);
    notice_gap(std::max(woke - slept_from, ex_.wall_time() - wall_from) - timeout);
    for (auto& ev : events) dispatch_in_order(ev);
    note_job_ids();
    poll_searcher();
    on_file_jobs_done();
    if (!catch_up_.empty()) {  // (an exit that waited for checkpoint copies may be in now)
      advance_catch_up();
      if (!catch_up_.empty() && ex_.now() >= catch_up_deadline_) release_catch_up();
    }
    now = ex_.now();
    flush_result_logs(now);
    if (now >= next_lease_) {
      ex_.renew_lease();
      next_lease_ = now + lease_period_;
    }
    if (now >= next_dir_check_) {
      check_experiment_dir(now);
      if (!lost_) check_stop_requests();
    }
    if (!lost_) maybe_save_state(false, false);
    if (opts_.uploader) opts_.uploader->poll();
    // The periodic report.html: built off the loop, from the files on disk.
    if (opts_.reporter)
      if (auto e = opts_.reporter->poll(now); !e.empty()) spdlog::warn("{}", e);
    draw(false);
  }
  if (lost_) lost_exit();
  // Ctrl-C twice: trials still running were killed; they resume from their latest checkpoint.
  for (auto& [id, rt] : running_) {
    rt.log.close();
    interrupt(trial(id));
  }
  state_.phase = interrupted_ || searcher_failed_ ? "interrupted" : "finished";
  finish_file_work();
  if (!searcher_failed_ && interrupts_ < 2) {
    searcher_->finish();  // its last snapshot, for the final state
    poll_searcher();
  }
  maybe_save_state(true, true);
  finish_file_work();  // the deletions that write allowed
  final_upload();
  if (observer_) observer_->on_run_end({ex_.now(), state_, exp_});
  spdlog::info("longest loop stall: {:.0f} ms, longest wait past its timeout: {:.0f} ms",
               longest_stall_ * 1000, longest_overrun_ * 1000);
  if (!fatal_.empty()) throw Fatal(fatal_, kExitTrialError);
  if (searcher_failed_)
    throw Fatal(*searcher_failed_ + " (state saved; --resume continues)", kExitTrialError);
  return exit_code();
}

double Controller::wait_timeout(double now) const {
  // Sleep until something happens or the next timer is due.
  double timeout = 1.0;
  if (state_dirty_) timeout = std::min(timeout, std::max(0.0, next_state_write_ - now));
  for (const auto& [id, rt] : running_)
    if (rt.kill_deadline >= 0) timeout = std::min(timeout, std::max(0.0, rt.kill_deadline - now));
  if (exp_.time_budget_s && !budget_spent_)
    timeout = std::min(timeout,
                       std::max(0.0, *exp_.time_budget_s - elapsed_before_ - (now - run_started_)));
  if (observer_) timeout = std::min(timeout, observer_->seconds_until_due(now));
  for (const auto& [at, when] : retry_at_) timeout = std::min(timeout, std::max(0.0, when - now));
  if (worker_.outstanding() > 0) timeout = std::min(timeout, 0.05);  // collect finished copies
  if (searcher_->busy()) timeout = std::min(timeout, 0.02);          // collect its answer
  return timeout;
}

void Controller::dispatch(exec::Event& ev) {
  if (std::holds_alternative<exec::InterruptEvent>(ev)) {
    on_interrupt();
  } else if (auto* o = std::get_if<exec::OutputEvent>(&ev)) {
    on_output(*o);
  } else if (auto* x = std::get_if<exec::ExitEvent>(&ev)) {
    on_exit(x->trial_id, x->info);
  } else if (auto* h = std::get_if<exec::HostEvent>(&ev)) {
    pool_.set_available(h->host, h->up);
    state_.hosts[h->host] = h->up ? "up" : "unreachable";
    mark_dirty();
    if (!pool_.any_available())
      spdlog::warn("every host is unreachable: waiting for one to come back (Ctrl-C stops)");
    draw(true);
  }
}

void Controller::notice_gap(double overslept) {
  // The loop slept far longer than it asked to: the driver was stopped (SIGSTOP, Ctrl-Z) or
  // the machine suspended. Leases were not renewed meanwhile; renew them now, before anything
  // else, so supervisors that have not given up yet keep their trials. Trials whose
  // supervisors did give up report reason "orphaned" and are re-queued, not failed.
  if (overslept < std::max(2.0, lease_period_)) return;
  spdlog::warn(
      "the driver did not run for {:.0f} s (stopped or suspended): renewing leases; "
      "trials stopped meanwhile resume from their latest checkpoint",
      overslept);
  ex_.renew_lease();
  next_lease_ = ex_.now() + lease_period_;
}

void Controller::check_experiment_dir(double now) {
  next_dir_check_ = now + 1;
  struct stat st {};
  bool gone = ::stat(exp_.dir().c_str(), &st) != 0;
  if (!gone && dir_identity_.first == 0 && dir_identity_.second == 0) {
    dir_identity_ = {st.st_dev, st.st_ino};
    return;
  }
  if (!gone && st.st_dev == dir_identity_.first && st.st_ino == dir_identity_.second) return;
  lost_ = true;
  stopping_ = true;
  // Said once, as the run's one-line error (lost_exit); its tune.log went with the dir.
  spdlog::debug("the experiment dir '{}' was {} while the driver ran: stopping its trials",
                exp_.dir().string(), gone ? "deleted" : "replaced");
  for (auto& [id, rt] : running_)
    if (!rt.deferred_exit) ex_.stop(id, true);
}

void Controller::lost_exit() {
  worker_.cancel();
  (void)worker_.drain(5);
  throw Fatal("the experiment dir '" + exp_.dir().string() +
                  "' was deleted or replaced while the driver ran: its trials were stopped, and "
                  "nothing more could be saved",
              kExitTrialError);
}

void Controller::finish_file_work() {
  if (interrupts_ >= 2) worker_.cancel();  // copies give up; deletions are quick
  if (!worker_.drain(interrupts_ >= 2 ? 5 : 3600))
    spdlog::warn("file work still running after the wait: left for the next run");
  on_file_jobs_done();
}

}  // namespace tune::control
