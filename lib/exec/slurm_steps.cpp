// use_allocation: trial attempts as job steps (srun --exclusive) of the allocation the driver
// runs in, rather than sbatch jobs: the worker thread's turn (start, signal, reap the steps'
// sruns), the loop's judgement of a step that ended without a record, and a resume's attach.
#include <signal.h>

#include <algorithm>
#include <sstream>

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

void SlurmExecutor::Impl::note_step_id(Run& r) {
  auto text = util::read_file(step_id_path(o.exp_dir, r.trial_name, r.attempt), 64);
  if (!text) return;
  std::string id = text->substr(0, text->find('\n'));
  size_t dot = id.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == id.size() ||
      id.find_first_not_of("0123456789.") != std::string::npos)
    return;
  r.step_id = id;
  new_jobs.emplace_back(r.trial_id, id);
}

namespace {

// What a trial's .step file says: the srun of its latest step, its attempt and the machine.
struct StepFile {
  std::string handle, host;
  int attempt = 0;
};
std::optional<StepFile> read_step_file(const fs::path& exp_dir, const std::string& trial_name) {
  auto text = util::read_file(step_file_path(exp_dir, trial_name), 512);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  StepFile f;
  std::string attempt;
  if (!(in >> f.handle >> attempt >> f.host)) return std::nullopt;
  if (attempt.size() > 9 || attempt.find_first_not_of("0123456789") != std::string::npos ||
      f.handle.find_first_not_of("0123456789:") != std::string::npos)
    return std::nullopt;
  f.attempt = std::atoi(attempt.c_str());
  return f;
}

}  // namespace

// use_allocation: a step outlives a killed driver (its srun is detached), so a resume in the same
// allocation, on the machine where the sruns run, re-attaches to the step whose srun still runs
// and finishes one whose supervisor recorded its end; any other attempt restarts.
Result<Attached> SlurmExecutor::attach_step(const Launch& l) {
  auto& impl = *impl_;
  std::string name = l.trial_dir.filename().string();
  ExitInfo info;
  auto text = util::read_file(impl.o.exp_dir / record_path(name), 1 << 16);
  AttemptIdentity id{attempt_nonce(impl.o.record_key, name, l.attempt), std::nullopt, std::nullopt,
                     std::nullopt};
  bool ended = check_exit_record(text ? std::optional(*text) : std::nullopt, l.attempt, id, info) ==
               RecordCheck::kGenuine;
  auto step = read_step_file(impl.o.exp_dir, name);
  bool alive = !ended && step && step->attempt == l.attempt && step->host == this_host() &&
               impl.client->ended_steps({step->handle}).empty();
  if (!ended && !alive) return Attached::kGone;
  Impl::Run& r = impl.fresh_run(l);
  r.phase = Phase::kSubmitted;
  impl.set_job(r, step && step->attempt == l.attempt ? step->handle : "", l.attempt);
  impl.note_step_id(r);
  if (alive) {
    std::lock_guard lk(impl.m);
    impl.live_steps.push_back(r.job_id);
    impl.poll_now = true;
    impl.cv.notify_all();
    spdlog::info("trial {}: re-attached to slurm job step {} (srun {})", name,
                 r.step_id.empty() ? "(not started yet)" : r.step_id, r.job_id);
  }
  return ended ? Attached::kEnded : Attached::kRunning;
}

// use_allocation: the steps whose srun still runs on this machine, as their .step files name them.
std::vector<LiveAttempt> SlurmExecutor::Impl::live_steps_found() {
  std::vector<LiveAttempt> out;
  std::error_code ec;
  std::string host = this_host();
  for (const auto& e : fs::directory_iterator(slurm_dir, ec)) {
    std::string file = e.path().filename().string();
    if (!file.ends_with(".step")) continue;
    std::string name = file.substr(0, file.size() - 5);
    auto step = read_step_file(o.exp_dir, name);
    if (!step || step->host != host || !client->ended_steps({step->handle}).empty()) continue;
    LiveAttempt a;
    a.host = o.host_name;
    a.trial_name = name;
    a.attempt = step->attempt;
    a.supervisor = std::atoi(step->handle.c_str());  // the srun's pid stands for it here
    if (size_t colon = step->handle.find(':'); colon != std::string::npos)
      a.supervisor_started = std::strtoull(step->handle.c_str() + colon + 1, nullptr, 10);
    out.push_back(std::move(a));
  }
  return out;
}

// use_allocation: SIGTERM to the steps' sruns (passed on to their supervisors), SIGUSR1 (kill
// now) after grace_s, until they are gone (at most grace_s + 10 s).
void SlurmExecutor::Impl::end_steps(const std::vector<LiveAttempt>& which, double grace_s) {
  std::vector<std::string> ids;
  for (const auto& a : which)
    if (a.supervisor > 0)
      ids.push_back(std::to_string(a.supervisor) + ":" + std::to_string(a.supervisor_started));
  if (ids.empty()) return;
  client->signal_steps(ids, SIGTERM);
  double start = mono();
  bool killed = false;
  while (mono() - start < grace_s + 10) {
    if (client->ended_steps(ids).size() == ids.size()) return;
    if (!killed && mono() - start >= grace_s) {
      killed = true;
      client->signal_steps(ids, SIGUSR1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

}  // namespace tune::exec
