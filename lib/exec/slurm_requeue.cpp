// Requeues: a trial whose job Slurm requeued runs its next attempt in that same job when Slurm
// reruns it (the driver prepares that run's launch file), and a rerun Slurm started while no
// driver ran (the job's stub ran the next attempt on its own) is accounted for and adopted.
#include <spdlog/spdlog.h>

#include "exec/slurm_executor_impl.hpp"
#include "util/atomic_file.hpp"

namespace tune::exec {

// The note a rerun of `job` (run k) left when it started r's next attempt on its own; a malformed
// one is ignored (the rerun is then not adopted) with one warning naming the file.
std::optional<SelfRerun> SlurmExecutor::Impl::self_rerun(const Run& r, const std::string& job,
                                                         int k) {
  std::string problem;
  auto self = read_self_rerun(slurm_dir, r.trial_name, job, k, &problem);
  if (!problem.empty() && logged.insert(problem).second)
    spdlog::warn("trial {}: ignoring a malformed self-rerun note: {}", r.trial_name, problem);
  return self;
}

// A trial whose previous job Slurm may have requeued: run the next attempt in that job if Slurm
// holds it for a rerun, else in a new one.
void SlurmExecutor::Impl::decide_requeued(Run& r, double now) {
  auto prev = maybe_requeued.find(r.trial_id);
  std::string job = prev == maybe_requeued.end() ? "" : prev->second.first;
  int first = prev == maybe_requeued.end() ? r.attempt : prev->second.second;
  auto it = last_seen.find(job);
  if (it != last_seen.end() && !listed_ours(it->second, r.trial_name)) it = last_seen.end();
  bool pending = it != last_seen.end() && (it->second.state == JobState::kPending ||
                                           it->second.state == JobState::kRequeued);
  bool running = it != last_seen.end() && it->second.state == JobState::kRunning;
  int k = r.attempt - first;
  // Slurm reran the job on its own (no driver had prepared this run): it runs (or ran) this
  // attempt, whatever the job's state now.
  if (!job.empty() && k >= 1)
    if (auto self = self_rerun(r, job, k)) {
      maybe_requeued.erase(prev);
      adopt_rerun(r, job, first, *self, running);
      return;
    }
  if (running && now - r.deciding_since < 60) return;  // still finishing its last run
  if (prev != maybe_requeued.end()) maybe_requeued.erase(prev);
  // Slurm's rerun is run K = attempt - first of the job (SLURM_RESTART_COUNT): this attempt
  // runs there only if it comes after the job's first run, and if this driver claims that run
  // before the job's stub does (else the stub runs it on its own, and it is adopted above).
  if (pending && first >= 1 && k >= 1) {
    std::error_code ec;
    fs::create_directories(slurm_dir, ec);
    if (!fs::create_directory(claim_dir(slurm_dir, r.trial_name, job, k), ec) && !ec) {
      if (now - r.deciding_since < 30) {  // the stub claimed it: its note is on its way
        maybe_requeued[r.trial_id] = {job, first};
        return;
      }
    } else if (!ec && prepare_rerun(r, job, first, k)) {
      return;
    }
  }
  if (!job.empty() && (pending || running)) cancel(job, r.trial_name, false);  // not needed
  r.phase = Phase::kWaiting;
  waiting.push_back(r.trial_id);
}

// Writes the launch file of run k of `job` for r's attempt (this driver claimed that run).
bool SlurmExecutor::Impl::prepare_rerun(Run& r, const std::string& job, int first, int k) {
  auto& s = *r.pending;
  auto w = util::write_file_atomic(next_launch_file(slurm_dir, r.trial_name, job, k),
                                   launch_text(s.launch, first, false), false);
  if (w)
    w = util::write_file_atomic(
        s.job_file, job + " " + std::to_string(r.attempt) + " " + std::to_string(first) + "\n");
  if (!w) {
    spdlog::warn("{}", w.error().message);
    return false;
  }
  spdlog::info("trial {} attempt {}: runs when Slurm restarts its requeued job {} (run {})",
               r.trial_name, r.attempt, job, k);
  set_job(r, job, first);
  r.phase = Phase::kSubmitted;
  r.judged_after = seen_seq;
  r.pending.reset();
  got_job(r);
  return true;
}

// Run k of `job` already runs r's attempt: Slurm reran the job while no driver ran, and its stub
// started the attempt from the latest checkpoint in the trial dir. Adopted if the driver restarts
// the trial from that same checkpoint (the attempt's exit said so: restart_from); else it is
// ended and the attempt goes to a new job.
void SlurmExecutor::Impl::adopt_rerun(Run& r, const std::string& job, int first,
                                      const SelfRerun& self, bool running) {
  std::string want;
  if (auto it = r.pending->launch.env.find("TUNE_RESTORE_CHECKPOINT");
      it != r.pending->launch.env.end())
    want = fs::path(it->second).filename().string();
  if (want != self.checkpoint) {
    spdlog::warn(
        "trial {} attempt {}: slurm job {} reran on its own from {}, but the trial restarts "
        "from {}: ending that job, the attempt goes to a new one",
        r.trial_name, r.attempt, job, self.checkpoint.empty() ? "scratch" : self.checkpoint,
        want.empty() ? "scratch" : want);
    cancel(job, r.trial_name, false);
    r.phase = Phase::kWaiting;
    waiting.push_back(r.trial_id);
    return;
  }
  if (auto w = util::write_file_atomic(r.pending->job_file, job + " " + std::to_string(r.attempt) +
                                                                " " + std::to_string(first) + "\n");
      !w)
    spdlog::warn("{}", w.error().message);
  spdlog::info(
      "trial {} attempt {}: runs in slurm job {}, which Slurm requeued and reran on its own "
      "(run {}, from {})",
      r.trial_name, r.attempt, job, r.attempt - first,
      self.checkpoint.empty() ? "scratch" : self.checkpoint);
  set_job(r, job, first);
  r.phase = Phase::kSubmitted;
  r.judged_after = seen_seq;
  r.seen_running = running;
  r.pending.reset();
  got_job(r);
}

// r's job was requeued by Slurm and its next run started on its own (SelfRerun): r's attempt
// ended where that run's output begins, as one Slurm ended (no failure), and the trial restarts
// from the checkpoint the rerun restores from (so that the rerun can be adopted: adopt_rerun).
bool SlurmExecutor::Impl::superseded(Run& r) {
  if (o.use_allocation || r.job_id.empty() || r.exit) return false;
  auto self = self_rerun(r, r.job_id, r.attempt - r.first_attempt + 1);
  if (!self) return false;
  r.cut_at = self->stdout_size;
  ExitInfo e;
  e.reason = ExitReason::kPreempted;
  e.error = "slurm job " + r.job_id + " was requeued by Slurm and reran on its own as attempt " +
            std::to_string(r.attempt + 1) + " (from " +
            (self->checkpoint.empty() ? "scratch" : self->checkpoint) + ")";
  e.restart_from = self->checkpoint;
  maybe_requeued[r.trial_id] = {r.job_id, r.first_attempt};
  end_run(r, std::move(e));
  return true;
}

}  // namespace tune::exec
