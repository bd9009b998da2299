// `tune stop --trial ID` on the driver's side: the requests the CLI leaves in the experiment's
// .tune dir (control/stop_requests.hpp), read once a second and when a resume starts. The trial
// stops as a scheduler's stop does (its decision journalled before the signal goes) and ends
// TERMINATED, with reason "stopped" and cause "user": a later resume keeps it as it is.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"
#include "control/stop_requests.hpp"

namespace tune::control {

using trial::Status;

void Controller::check_stop_requests() {
  for (const auto& id : stop_requests(exp_.dir())) {
    if (auto it = index_.find(id); it != index_.end())
      stop_by_user(state_.trials[it->second]);
    else
      spdlog::warn("tune stop: there is no trial '{}' in '{}': request ignored", id, exp_.name);
    remove_stop_request(exp_.dir(), id);
  }
}

void Controller::stop_by_user(trial::Trial& t) {
  if (t.finished()) {
    spdlog::info("tune stop: trial {} has ended already ({})", t.name,
                 trial::status_name(t.status));
    return;
  }
  spdlog::info("trial {}: stopping it (tune stop --trial); the others run on", t.name);
  t.reason = trial::Reason::kStopped;
  t.cause = trial::Cause::kUser;
  mark_dirty();
  if (auto it = running_.find(t.id); it != running_.end()) {
    Runtime& rt = it->second;
    if (rt.replay) {  // resumed: a journalled decision is carried out when its results are in
      t.reason = trial::Reason::kNone;
      rt.replay->reason = trial::Reason::kStopped;
      rt.replay->cause = trial::Cause::kUser;
      return;
    }
    if (rt.stop_why == StopWhy::kCriterion || rt.stop_why == StopWhy::kDone ||
        rt.stop_why == StopWhy::kScheduler)
      return;  // ending TERMINATED already
    if (exp_.trial.mode == spec::TrialMode::kStep) {
      // After the command in flight is answered: saved if checkpoint_at_end, then stopped. The
      // command in flight gets the grace period (a long epoch is not waited for: SIGTERM then);
      // its answer starts the save's and the stop's own.
      rt.stop_why = StopWhy::kNone;
      request_stop(t, rt, StopWhy::kScheduler);
      rt.stop_why = StopWhy::kScheduler;
      if (rt.kill_deadline < 0) rt.kill_deadline = ex_.now() + opts_.grace_s;
    } else {
      rt.stop_why = StopWhy::kScheduler;  // later results are ignored
      stop_decided(t, rt);                // journalled, then signalled
    }
    return;
  }
  // Not running: waiting in the queue (or backing off before a retry), or paused.
  pending_.erase(t.index);
  paused_.erase(t.index);
  retry_at_.erase(t.index);
  finish(t, Status::kTerminated, "");
}

}  // namespace tune::control
