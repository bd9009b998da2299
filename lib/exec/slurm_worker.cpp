// The Slurm executor's worker thread: every Slurm command (sbatch, squeue, sacct, scancel; srun
// for job steps) runs here, never on the driver's loop, which only hands requests over and
// takes the answers (slurm_executor_impl.hpp: the shared part of Impl, under its mutex).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "exec/slurm_executor_impl.hpp"
#include "util/atomic_file.hpp"

namespace tune::exec {

void SlurmExecutor::Impl::worker_main() {
  // Job steps' sruns are started detached (CommandSlurmClient::start_step): a step outlives a
  // killed driver as a job does, for as long as the allocation lives.
  double next_poll = 0;
  std::unique_lock lk(m);
  while (!quit) {
    double nap = std::clamp(next_poll - mono(), 0.0, 0.2);
    cv.wait_for(lk, std::chrono::duration<double>(nap), [&] {
      return quit || !submits.empty() || !cancel_term.empty() || !cancel_kill.empty() ||
             !acct_ask.empty() || !step_signals.empty() || mono() >= next_poll;
    });
    if (quit) break;
    std::deque<Submit> todo;
    todo.swap(submits);
    auto term = std::move(cancel_term);
    auto kill = std::move(cancel_kill);
    cancel_term.clear(), cancel_kill.clear();
    auto ask = std::move(acct_ask);
    acct_ask.clear();
    if (acct_mode == Acct::kOff) ask.clear();
    bool poll = poll_now || mono() >= next_poll;
    poll_now = false;
    if (o.use_allocation) {
      steps_worker_turn(lk, todo, poll, next_poll);
      continue;
    }
    lk.unlock();
    std::vector<Submitted> done;
    for (auto& s : todo) {
      done.push_back({s.trial_id, s.gen, {}});
      do_submit(s, done.back());
    }
    std::vector<std::string> errors;
    if (!term.empty())
      if (auto r = client->cancel(term, true); !r) errors.push_back(r.error().message);
    if (!kill.empty())
      if (auto r = client->cancel(kill, false); !r) errors.push_back(r.error().message);
    std::optional<Accounting> records;
    if (!ask.empty()) {
      if (auto a = client->accounting(ask))
        records = std::move(*a);
      else
        errors.push_back(a.error().message);
    }
    std::optional<std::vector<JobInfo>> jobs;
    if (poll) {
      auto q = client->queue();
      next_poll = mono() + o.poll_s;
      if (q)
        jobs = std::move(*q);
      else
        errors.push_back(q.error().message);
    }
    lk.lock();
    if (poll) ++queue_calls;
    if (!ask.empty()) ++acct_calls;
    if (records && !records->available && acct_mode != Acct::kOff)
      spdlog::info(
          "sacct: this cluster keeps no accounting; jobs are judged by their exit "
          "records and squeue");
    if (records) acct_mode = records->available ? Acct::kOn : Acct::kOff;
    if (records)
      for (auto& j : records->jobs) acct_answers.push_back(std::move(j));
    for (auto& id : ask) acct_answered.push_back(std::move(id));
    for (auto& d : done) answers.push_back(std::move(d));
    if (jobs) snapshot = std::move(*jobs), ++snapshot_seq;
    for (auto& e : errors) worker_errors.push_back(std::move(e));
  }
}

void SlurmExecutor::Impl::do_submit(Submit& s, Submitted& out) {
  if (auto r = prepare_trial_dir(s.launch); !r) {
    out.job = std::unexpected(r.error());
    return;
  }
  std::error_code ec;
  fs::create_directories(o.exp_dir / ".tune" / "exit", ec);
  for (auto [path, text] : {std::pair{&s.launch_file, &s.launch_text}, {&s.stub, &s.stub_text}})
    if (auto r = util::write_file_atomic(*path, *text, false); !r) {
      out.job = std::unexpected(r.error());
      return;
    }
  if (o.use_allocation) {
    std::string a = std::to_string(s.launch.attempt);
    out.job =
        client->start_step(s.args, s.command, s.launch.trial_dir / ("slurm-step.a" + a + ".out"));
    // Tests: the crash window between srun's start and the .step file (a resume finds the step
    // by its own files and Slurm's step list, not by this file).
    if (out.job && kill_after_srun) ::kill(::getpid(), SIGKILL);
    if (out.job)  // for a resume: which srun runs the attempt, and where
      if (auto w = util::write_file_atomic(s.job_file,
                                           *out.job + " " + a + " " + this_host() + "\n", true);
          !w)
        spdlog::warn("{}", w.error().message);
    return;
  }
  out.job = client->submit(s.args, s.stub);
  if (out.job) {
    std::string a = std::to_string(s.launch.attempt);
    std::string line = *out.job + " " + a + " " + a + "\n";
    if (auto w = util::write_file_atomic(s.job_file, line, true); !w)
      spdlog::warn("{}", w.error().message);
  }
}

}  // namespace tune::exec
