// How an attempt ended when its supervisor left no exit record: judged from squeue's state of
// its job (and sacct's, for a job squeue no longer lists, where the cluster keeps accounting).
#include <spdlog/spdlog.h>

#include "exec/slurm_executor_impl.hpp"

namespace tune::exec {

// A decision on a job Slurm ended or lost, when no exit record says how the attempt ended.
void SlurmExecutor::Impl::judge(Run& r, double now) {
  if (superseded(r)) return;
  auto it = last_seen.find(r.job_id);
  if (it != last_seen.end() && !listed_ours(it->second, r.trial_name))
    it = last_seen.end();  // someone else's job (an id read back from a file): not this attempt
  if (it == last_seen.end()) {
    // Not listed (ended and purged after MinJobAge, or never seen): after three answers.
    if (++r.missing < 3) return;
    if (ask_accounting(r, now)) return;  // sacct's answer is on its way
    if (auto a = acct.find(r.job_id); a != acct.end() && job_ended(a->second.state)) {
      end_run(r, ended_without_record(r, a->second, " (sacct)"));
      return;
    }
    ExitInfo e;
    e.reason = r.stop_asked ? ExitReason::kDriverStop
               : r.grew     ? ExitReason::kHostLost
                            : ExitReason::kSupervisorDied;
    e.error = "slurm job " + r.job_id + " is gone from squeue and left no exit record";
    end_run(r, std::move(e));
    return;
  }
  r.missing = 0;
  const JobInfo& j = it->second;
  r.state = j.state;
  if (j.state == JobState::kRunning) r.seen_running = true;
  if ((j.state == JobState::kPending || j.state == JobState::kRequeued) && r.seen_running) {
    ExitInfo e;  // Slurm requeued it (preemption, `scontrol requeue`, a node lost)
    e.reason = ExitReason::kPreempted;
    e.error = "slurm job " + r.job_id + " was requeued by Slurm";
    maybe_requeued[r.trial_id] = {r.job_id, r.first_attempt};
    end_run(r, std::move(e));
    return;
  }
  if (!job_ended(j.state)) return;
  if (r.ended_at < 0) r.ended_at = now;
  if (now - r.ended_at < o.record_wait_s) return;  // the record may still be on its way
  end_run(r, ended_without_record(r, j, ""));
}

// How an attempt ended whose job Slurm (squeue, or sacct: `source`) says ended as `j`, when its
// supervisor left no exit record: Slurm's doing (time limit, preemption, a node) counts no failure.
ExitInfo SlurmExecutor::Impl::ended_without_record(const Run& r, const JobInfo& j,
                                                   const char* source) {
  ExitInfo e;
  bool slurms = j.state == JobState::kTimeout || j.state == JobState::kPreempted ||
                j.state == JobState::kNodeFail;
  e.reason = slurms || (j.state == JobState::kCancelled && r.stop_asked)
                 ? ExitReason::kPreempted
                 : ExitReason::kSupervisorDied;
  // A rerun of a requeued job that found no launch file prepared for its restart count (Slurm
  // requeued it more often than this driver saw) exits 0 without starting anything.
  if (j.state == JobState::kCompleted && r.attempt > r.first_attempt)
    e.reason = ExitReason::kPreempted;
  if (r.stop_asked) e.reason = ExitReason::kDriverStop;
  e.error = "slurm job " + r.job_id + " ended " + j.state_text;
  if (j.exit_code) e.error += " (exit code " + std::to_string(*j.exit_code) + ")";
  if (j.signal) e.error += " (signal " + std::to_string(*j.signal) + ")";
  e.error += " without an exit record";
  e.error += source;
  return e;
}

// Asks sacct about r's job unless the cluster has no accounting; true while the answer is due
// (at most 30 s).
bool SlurmExecutor::Impl::ask_accounting(const Run& r, double now) {
  if (acct_done.count(r.job_id)) return false;
  std::lock_guard lk(m);
  if (acct_mode == Acct::kOff) return false;
  auto [at, fresh] = acct_asked.try_emplace(r.job_id, now);
  if (fresh) {
    acct_ask.push_back(r.job_id);
    cv.notify_all();
  }
  return now - at->second < 30;
}

}  // namespace tune::exec
