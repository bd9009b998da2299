// use_allocation: trial attempts as job steps (srun --exclusive) of the allocation the driver
// runs in, rather than sbatch jobs: the worker thread's turn (start, signal, reap the steps'
// sruns), the loop's judgement of a step that ended without a record, and a resume's attach.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "exec/slurm_executor_impl.hpp"
#include "util/fs.hpp"

namespace tune::exec {

// use_allocation: starts the steps, signals those asked for (only sruns not yet reaped: a pid is
// never signalled after it may have been reused) and reaps the ended ones.
void SlurmExecutor::Impl::steps_worker_turn(std::unique_lock<std::mutex>& lk,
                                            std::deque<Submit>& todo, bool poll,
                                            double& next_poll) {
  auto sigs = std::move(step_signals);
  step_signals.clear();
  std::vector<std::string> live = live_steps;
  lk.unlock();
  std::vector<Submitted> done;
  for (auto& s : todo) {
    done.push_back({s.trial_id, s.gen, {}});
    do_submit(s, done.back());
  }
  std::vector<std::string> ended;
  if (poll || !sigs.empty()) {
    ended = client->ended_steps(live);
    next_poll = mono() + std::min(o.poll_s, 0.5);
  }
  for (auto& [id, sig] : sigs)
    if (std::find(live.begin(), live.end(), id) != live.end() &&
        std::find(ended.begin(), ended.end(), id) == ended.end())
      client->signal_steps({id}, sig);
  lk.lock();
  for (auto& d : done) {
    if (d.job) live_steps.push_back(*d.job);
    answers.push_back(std::move(d));
  }
  std::erase_if(live_steps, [&](const std::string& id) {
    return std::find(ended.begin(), ended.end(), id) != ended.end();
  });
  for (auto& id : ended) steps_ended.push_back(std::move(id));
  if (poll) ++queue_calls;
}

void SlurmExecutor::Impl::judge_steps(const std::vector<std::string>& ended, double now) {
  for (auto& [id, r] : runs) {
    if (r.phase != Phase::kSubmitted || r.exit) continue;
    if (r.ended_at < 0 && std::find(ended.begin(), ended.end(), r.job_id) != ended.end())
      r.ended_at = now;
    if (r.ended_at < 0 || now - r.ended_at < o.record_wait_s) continue;
    ExitInfo e;
    e.reason = r.stop_asked ? ExitReason::kDriverStop : ExitReason::kSupervisorDied;
    e.error = "slurm job step of trial " + r.trial_name + " (srun pid " + r.job_id +
              ") ended without an exit record (see its slurm-step.a" + std::to_string(r.attempt) +
              ".out)";
    end_run(r, std::move(e));
  }
}

// use_allocation: a step never outlives the driver that started it (its srun is tied to the
// driver), so a resume only finishes an attempt whose supervisor recorded its end.
Result<Attached> SlurmExecutor::attach_step(const Launch& l) {
  auto& impl = *impl_;
  std::string name = l.trial_dir.filename().string();
  ExitInfo info;
  auto text = util::read_file(impl.o.exp_dir / record_path(name), 1 << 16);
  AttemptIdentity id{attempt_nonce(impl.o.record_key, name, l.attempt), std::nullopt, std::nullopt,
                     std::nullopt};
  if (check_exit_record(text ? std::optional(*text) : std::nullopt, l.attempt, id, info) !=
      RecordCheck::kGenuine)
    return Attached::kGone;
  Impl::Run& r = impl.runs[l.trial_id];
  uint64_t gen = r.gen + 1;
  r = Impl::Run{};
  r.gen = gen;
  r.trial_id = l.trial_id;
  r.trial_name = name;
  r.attempt = l.attempt;
  r.dir = l.trial_dir;
  r.offset = l.stdout_offset;
  r.times = ArrivalReader(l.attempt);
  r.phase = Phase::kSubmitted;
  r.nonce = id.nonce;
  return Attached::kEnded;
}

}  // namespace tune::exec
