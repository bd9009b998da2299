// use_allocation: trial attempts as job steps (srun --exclusive) of the allocation the driver
// runs in, rather than sbatch jobs: the worker thread's turn (start, signal, reap the steps'
// sruns), the loop's judgement of a step that ended without a record, and a resume's attach.
#include <signal.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

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
  if (!ended && !alive) {
    impl.give_up_step(name, l.attempt);
    return Attached::kGone;
  }
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

// No srun of this machine runs the attempt (its driver died before writing the .step file, or
// ran on another machine, or the srun ended): no step may start it from now on, and one that
// did is left to live_steps_found (ended by its id before anything starts).
void SlurmExecutor::Impl::give_up_step(const std::string& name, int attempt) {
  fs::path launch = attempt_file(o.exp_dir, name, attempt, ".launch");
  switch (void_step_launch(launch, attempt_file(o.exp_dir, name, attempt, ".run"),
                           attempt_file(o.exp_dir, name, attempt, ".void"))) {
    case StepClaim::kVoided:
      spdlog::info(
          "trial {} attempt {}: its step had not started; given up (an srun still waiting for "
          "it starts nothing)",
          name, attempt);
      break;
    case StepClaim::kClaimed:
      spdlog::info(
          "trial {} attempt {}: its step started, and no srun of this machine watches it: ended "
          "by its step id if Slurm still lists it",
          name, attempt);
      break;
    case StepClaim::kNone:
      break;
  }
}

namespace {

// The attempt a step file name `<trial>.a<N>.<ext>` is for (nullopt for other files).
std::optional<std::pair<std::string, int>> attempt_of(const std::string& file,
                                                      std::string_view ext) {
  if (!file.ends_with(ext)) return std::nullopt;
  std::string stem = file.substr(0, file.size() - ext.size());
  size_t dot = stem.rfind(".a");
  if (dot == std::string::npos || dot == 0 || stem.size() - dot > 11 || dot + 2 == stem.size() ||
      stem.find_first_not_of("0123456789", dot + 2) != std::string::npos)
    return std::nullopt;
  return std::pair{stem.substr(0, dot), std::atoi(stem.c_str() + dot + 2)};
}

}  // namespace

// use_allocation: the steps an earlier driver left running: those whose srun still runs on this
// machine (as the .step files name them), and those Slurm lists under an attempt's step name
// and id (as the step itself wrote it when it claimed its attempt), wherever their srun runs.
std::vector<LiveAttempt> SlurmExecutor::Impl::live_steps_found() {
  std::vector<LiveAttempt> out;
  std::set<std::pair<std::string, int>> seen;
  std::vector<std::tuple<std::string, int, std::string>> claimed;  // trial, attempt, step id
  std::error_code ec;
  std::string host = this_host();
  for (const auto& e : fs::directory_iterator(slurm_dir, ec)) {
    std::string file = e.path().filename().string();
    if (auto a = attempt_of(file, ".stepid")) {
      auto id = util::read_file(e.path(), 64);
      if (id && fs::exists(attempt_file(o.exp_dir, a->first, a->second, ".run"), ec))
        claimed.emplace_back(a->first, a->second, id->substr(0, id->find('\n')));
      continue;
    }
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
    seen.emplace(name, step->attempt);
    out.push_back(std::move(a));
  }
  if (claimed.empty()) return out;
  auto listed = client->job_steps();
  if (!listed) {
    spdlog::warn("{} (steps of an earlier driver are not looked for)", listed.error().message);
    return out;
  }
  for (auto& [name, attempt, id] : claimed) {
    if (seen.count({name, attempt})) continue;
    bool ours = std::any_of(listed->begin(), listed->end(), [&](const StepInfo& st) {
      return st.id == id && st.name == step_name(o.record_key, o.exp_name, name, attempt);
    });
    if (!ours) continue;
    LiveAttempt a;
    a.host = o.host_name;
    a.trial_name = name;
    a.attempt = attempt;
    a.job_step = id;
    out.push_back(std::move(a));
  }
  return out;
}

// use_allocation: SIGTERM to the steps (to their sruns, which pass it on to the supervisors, or,
// for a step known by its id alone, `scancel --signal=TERM` to its task), then SIGUSR1 (kill now)
// or `scancel` after grace_s, until they are gone (at most grace_s + 10 s).
void SlurmExecutor::Impl::end_steps(const std::vector<LiveAttempt>& which, double grace_s) {
  std::vector<std::string> sruns, steps;
  for (const auto& a : which) {
    if (!a.job_step.empty())
      steps.push_back(a.job_step);
    else if (a.supervisor > 0)
      sruns.push_back(std::to_string(a.supervisor) + ":" + std::to_string(a.supervisor_started));
  }
  if (sruns.empty() && steps.empty()) return;
  auto listed = [&](std::vector<std::string>& left) {
    auto now = client->job_steps();
    if (!now) return;  // unknown: asked again
    std::erase_if(left, [&](const std::string& id) {
      return std::none_of(now->begin(), now->end(), [&](const StepInfo& s) { return s.id == id; });
    });
  };
  client->signal_steps(sruns, SIGTERM);
  if (auto r = client->cancel_steps(steps, true); !r) spdlog::warn("{}", r.error().message);
  double start = mono();
  bool killed = false;
  while (mono() - start < grace_s + 10) {
    if (!steps.empty()) listed(steps);
    if (client->ended_steps(sruns).size() == sruns.size() && steps.empty()) return;
    if (!killed && mono() - start >= grace_s) {
      killed = true;
      client->signal_steps(sruns, SIGUSR1);
      if (auto r = client->cancel_steps(steps, false); !r) spdlog::warn("{}", r.error().message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

}  // namespace tune::exec
