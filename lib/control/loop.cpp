// The controller's loop and its end: waiting for events with the next timer as the bound,
// dispatching them, the periodic work of each turn, and the run's wind-down.
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>

#include "control/controller.hpp"
#include "report/refresher.hpp"
#include "sync/upload.hpp"

namespace tune::control {

using trial::Status;

// The loop: launch what is ready, wait for events, handle them, write the state, renew the
// lease, until nothing runs and nothing more is to start (or Ctrl-C twice, or the dir is lost).
void Controller::run_loop() {
  double woke = ex_.now(), wall_woke = ex_.wall_time();
  // Where a slow turn's time went (logged when a turn takes over a second): launching,
  // handling events, the rest (result logs, lease, state write, mirror, report, table).
  double t_launch = 0, t_events = 0;
  size_t n_events = 0;
  while (true) {
    double now = ex_.now();
    check_deadlines(now);
    launch_ready();
    t_launch = ex_.now() - now;
    pool_.sync_ledger();  // what ended this turn and was not started again
    bool more = !stopping_ && (state_.next_index < state_.total_trials || !pending_.empty());
    if (running_.empty() && !more && !stopping_ && !paused_.empty()) {
      release_stuck_paused();
      continue;
    }
    if (running_.empty() && !more) break;
    if (interrupts_ >= 2 || lost_) break;
    double timeout = wait_timeout(now);
    double turn = ex_.now() - woke;
    if (turn > 1.0)
      spdlog::info(
          "slow loop turn: {:.2f} s (launching {:.2f} s, {} event(s) {:.2f} s, the rest {:.2f} s)",
          turn, t_launch, n_events, t_events, turn - t_launch - t_events);
    longest_stall_ = std::max(longest_stall_, turn);
    // (stopped in the middle of a turn, during a state write say: the same lapse of leases;
    // the wall clock too, which a suspended machine's monotonic one may not count)
    notice_gap(std::max(turn, ex_.wall_time() - wall_woke), true);
    double slept_from = ex_.now(), wall_from = ex_.wall_time();
    auto events = ex_.wait(timeout);
    woke = ex_.now();
    wall_woke = ex_.wall_time();
    longest_overrun_ = std::max(longest_overrun_, woke - slept_from - timeout);
    notice_gap(std::max(woke - slept_from, ex_.wall_time() - wall_from) - timeout, false);
    n_events = events.size();
    for (auto& ev : events) dispatch_in_order(ev);
    t_events = ex_.now() - woke;
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
}

// After the loop: trials still running are interrupted, the last state written and mirrored.
int Controller::wind_down() {
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
  // The driver's own cost (all its threads, none of its helpers or trials): for benchmarks.
  rusage self{};
  if (::getrusage(RUSAGE_SELF, &self) == 0)
    spdlog::info("driver CPU: {:.2f} s, peak RSS {} MB",
                 static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
                     static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6,
                 self.ru_maxrss / 1024);
  if (state_writes_ > 0)
    spdlog::info("state writes: {}, mean {:.2f} ms, longest {:.2f} ms", state_writes_,
                 state_write_s_ * 1000 / static_cast<double>(state_writes_),
                 longest_state_write_ * 1000);
  if (!fatal_.empty()) throw Fatal(fatal_, kExitTrialError);
  if (searcher_failed_)
    throw Fatal(*searcher_failed_ + " (state saved; --resume continues)", kExitTrialError);
  return exit_code();
}

double Controller::wait_timeout(double now) const {
  // Sleep until something happens or the next timer is due.
  double timeout = launch_more_ ? 0.0 : 1.0;
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
  } else if (auto* l = std::get_if<exec::StdinLostEvent>(&ev)) {
    on_stdin_lost(*l);
  } else if (auto* h = std::get_if<exec::HostEvent>(&ev)) {
    pool_.set_available(h->host, h->up);
    state_.hosts[h->host] = h->up ? "up" : "unreachable";
    mark_dirty();
    if (!pool_.any_available())
      spdlog::warn("every host is unreachable: waiting for one to come back (Ctrl-C stops)");
    draw(true);
  }
}

void Controller::notice_gap(double overslept, bool in_turn) {
  // The loop slept far longer than it asked to, or one turn of it took that long: the driver
  // was stopped (SIGSTOP, Ctrl-Z), the machine suspended, or a step (a state write on a
  // stalled disk) held it up. Leases were not renewed meanwhile; renew them now, before
  // anything else, so supervisors that have not given up yet keep their trials. Trials whose
  // supervisors did give up report reason "orphaned" and are re-queued, not failed.
  if (overslept < std::max(2.0, lease_period_)) return;
  if (in_turn)
    spdlog::warn(
        "a loop turn took {:.0f} s (the driver stopped, suspended or held up by a slow step): "
        "renewing leases; trials stopped meanwhile resume from their latest checkpoint",
        overslept);
  else
    spdlog::warn(
        "the driver did not run for {:.0f} s (stopped or suspended): renewing leases; "
        "trials stopped meanwhile resume from their latest checkpoint",
        overslept);
  ex_.renew_lease();
  next_lease_ = ex_.now() + lease_period_;
}

}  // namespace tune::control
