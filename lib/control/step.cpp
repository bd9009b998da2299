// The step protocol (step mode): the driver's commands over the trial's stdin ({"op": "step"},
// "save", "stop") and their acks — the next command after a result, saves at the checkpoint
// frequency, on request and before a pause, and the stop after the final save.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"

namespace tune::control {

using json = nlohmann::json;

namespace {

std::string staging_name(int64_t seq) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".pending_checkpoint_%06lld", static_cast<long long>(seq));
  return buf;
}

}  // namespace

void Controller::step_next(trial::Trial& t, Runtime& rt, const json& result) {
  if (rt.stop_why != StopWhy::kNone) {  // a stop was asked meanwhile (budget, tune stop)
    // tune stop's deadline was for the step in flight: the final save gets a grace of its own.
    if (t.cause == trial::Cause::kUser) rt.kill_deadline = ex_.now() + opts_.grace_s;
    step_save(t, rt, true);
    return;
  }
  bool done = result.value("done", false) && rt.decision.action != sched::Action::kStop;
  bool stop = done || should_stop(result);
  if (!stop && rt.decision.action != sched::Action::kContinue) {
    // The scheduler's stop or pause: saved first (a pause always, so no work is lost).
    // An exploit (pbt) ends the attempt as a pause does; its own state is not needed any more.
    bool exploit = rt.decision.action == sched::Action::kExploit;
    bool pause = rt.decision.action == sched::Action::kPause || exploit;
    request_stop(t, rt, pause ? StopWhy::kPause : StopWhy::kScheduler);
    t.reason = pause ? trial::Reason::kPaused : trial::Reason::kStopped;  // saved with the state
    rt.force_save = pause && !exploit;
    step_save(t, rt, true);
    return;
  }
  bool wanted = result.contains("should_checkpoint") && result["should_checkpoint"].is_boolean() &&
                result["should_checkpoint"].get<bool>();
  int freq = exp_.checkpoint.frequency;
  // (pbt asks a top trial to save at its check, so that others can exploit it)
  bool due = wanted || rt.decision.save || (freq > 0 && t.iteration % freq == 0);
  if (stop) {
    request_stop(t, rt, done ? StopWhy::kDone : StopWhy::kCriterion);
    step_save(t, rt, true);
  } else if (due) {
    step_save(t, rt, false);
  } else {
    step_send(t, rt, StepOp::kStep);
  }
}

void Controller::step_send(trial::Trial& t, Runtime& rt, StepOp op) {
  rt.pending = op;
  if (op == StepOp::kStop) {
    rt.kill_deadline = ex_.now() + opts_.grace_s;
    ex_.send(t.id, R"({"op":"stop"})");
  } else {
    ex_.send(t.id, R"({"op":"step"})");
  }
}

void Controller::step_save(trial::Trial& t, Runtime& rt, bool then_stop) {
  bool at_end_needed =
      exp_.checkpoint.at_end && rt.last_checkpoint_iteration != t.iteration && t.iteration > 0;
  bool fresh = rt.last_checkpoint_iteration != t.iteration && t.iteration > 0;
  bool needed = then_stop ? at_end_needed || (rt.force_save && fresh)
                          : rt.last_checkpoint_iteration != t.iteration;
  if (!needed) {
    step_send(t, rt, then_stop ? StepOp::kStop : StepOp::kStep);
    return;
  }
  rt.pending_seq = t.checkpoint_seq + 1;
  std::string name = staging_name(rt.pending_seq);
  // An empty staging dir where the trial runs (on its host), renamed once the trial saved.
  if (auto r = ex_.make_staging(t.id, trial_dir(t), name); !r)
    spdlog::warn("trial {}: {}", t.name, r.error().message);
  rt.pending = StepOp::kSave;
  rt.stop_after_save = then_stop;
  json cmd = {{"op", "save"}, {"path", (host_trial_dir(t, rt.placement) / name).string()}};
  ex_.send(t.id, cmd.dump());
}

void Controller::step_saved(trial::Trial& t, Runtime& rt, const json& reply) {
  (void)reply;
  trial::Checkpoint c;
  c.seq = rt.pending_seq;
  std::string reported = (host_trial_dir(t, rt.placement) / staging_name(c.seq)).string();
  json result = t.last_result;
  result["checkpoint_dir_name"] = c.dir_name();
  // On a remote host the adoption waits on its link: it is queued there now, ahead of the
  // next command, and the checkpoint is registered once it is done (the trial's exit waits).
  if (auto task = ex_.adopt_task(t.id, reported, exp_.trial.workdir, trial_dir(t), c.dir_name())) {
    c.iteration = t.iteration;
    c.time_total_s = t.time_total_s;
    c.metrics = checkpoint_metrics(result);
    t.checkpoint_seq = std::max(t.checkpoint_seq, c.seq);
    adopt_off_loop(t, rt, std::move(task), std::move(c), reported);
  } else if (auto r = ex_.adopt(t.id, reported, exp_.trial.workdir, trial_dir(t), c.dir_name());
             !r) {
    spdlog::warn("trial {}: cannot register checkpoint {}: {}", t.name, c.dir_name(),
                 r.error().message);
  } else {
    register_checkpoint(t, rt, c.seq, result);
  }
  step_send(t, rt, rt.stop_after_save ? StepOp::kStop : StepOp::kStep);
}

void Controller::on_stdin_lost(const exec::StdinLostEvent& ev) {
  auto it = running_.find(ev.trial_id);
  if (it == running_.end()) return;
  auto& t = trial(ev.trial_id);
  Runtime& rt = it->second;
  if (t.attempt != ev.attempt || rt.deferred_exit) return;  // (it ended meanwhile)
  // One already ending for a reason that stands (its last result, the scheduler's stop, a
  // user's) ends so, only at once; else it fails: its state cannot be asked for either.
  bool stands = rt.stop_why != StopWhy::kNone && rt.stop_why != StopWhy::kPause &&
                rt.stop_why != StopWhy::kResync;
  spdlog::error("trial {}: its step-mode commands cannot reach it ({}): stopping it{}", t.name,
                ev.why, stands ? "" : " (a failure: it is retried per failure_config)");
  if (!stands) {
    rt.stop_why = StopWhy::kStdinLost;
    rt.lost_why = ev.why;
  }
  ex_.stop(t.id, true);
  rt.term_sent = true;
}

}  // namespace tune::control
