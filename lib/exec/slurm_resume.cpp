// Which Slurm jobs are this experiment's, and what a new driver finds of an earlier one's: job
// files and marks, cancels only of our own jobs, re-attaching and the jobs a resume ends.
#include <signal.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "agent/nonce.hpp"
#include "exec/exit_record.hpp"
#include "exec/slurm_executor_impl.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"

namespace tune::exec {

std::optional<JobFile> read_job_file(const fs::path& exp_dir, const std::string& trial_name) {
  auto text = util::read_file(job_file_path(exp_dir, trial_name), 256);
  if (!text) return std::nullopt;
  JobFile f;
  size_t sp = text->find(' ');
  if (sp == std::string::npos) return std::nullopt;
  f.job_id = text->substr(0, sp);
  if (f.job_id.empty() || f.job_id.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  // ATTEMPT [FIRST]: decimal numbers, FIRST <= ATTEMPT
  std::string rest = text->substr(sp + 1);
  size_t sp2 = rest.find(' ');
  std::string a = rest.substr(0, sp2), first = sp2 == std::string::npos ? "" : rest.substr(sp2 + 1);
  while (!first.empty() && (first.back() == '\n' || first.back() == ' ')) first.pop_back();
  while (!a.empty() && a.back() == '\n') a.pop_back();
  auto number = [](const std::string& s) {
    return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos
               ? std::atoi(s.c_str())
               : -1;
  };
  f.attempt = number(a);
  f.first_attempt = first.empty() ? f.attempt : number(first);
  if (f.attempt < 1 || f.first_attempt < 1 || f.first_attempt > f.attempt) return std::nullopt;
  return f;
}

std::string job_mark(std::string_view key, const std::string& trial_name, int attempt) {
  return "tune:" + std::to_string(attempt) + ":" +
         attempt_nonce(key, trial_name + "/job", attempt).substr(0, 16);
}

std::string step_name(std::string_view key, const std::string& experiment,
                      const std::string& trial_name, int attempt) {
  return job_name(experiment, trial_name) + ".a" + std::to_string(attempt) + "." +
         attempt_nonce(key, trial_name + "/step", attempt).substr(0, 16);
}

std::string slurm_job_key(std::string_view key, const std::string& trial_name, int first_attempt) {
  return attempt_nonce(key, trial_name + "/slurm-job-key", first_attempt);
}

std::string slurm_job_secret(std::string_view key, const std::string& trial_name,
                             int first_attempt) {
  return "slurm-job:" + std::to_string(first_attempt) + ":" +
         slurm_job_key(key, trial_name, first_attempt);
}

std::string slurm_attempt_nonce(std::string_view key, const std::string& trial_name,
                                int first_attempt, const std::string& job_id, int attempt) {
  if (job_id.empty() || attempt < first_attempt) return "";
  return agent::slurm_run_nonce(slurm_job_key(key, trial_name, first_attempt), job_id,
                                attempt - first_attempt);
}

std::optional<int> marked_attempt(std::string_view key, const std::string& trial_name,
                                  std::string_view comment) {
  if (!comment.starts_with("tune:")) return std::nullopt;
  size_t colon = comment.find(':', 5);
  if (colon == std::string_view::npos || colon == 5 || colon > 14) return std::nullopt;
  std::string digits(comment.substr(5, colon - 5));
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  int attempt = std::atoi(digits.c_str());
  if (attempt < 1 || comment != job_mark(key, trial_name, attempt)) return std::nullopt;
  return attempt;
}

// Cancels `job` if it is known to be ours; otherwise after the next squeue answer, and only if
// that lists it under the trial's job name (a forged .job file never gets a foreign job cancelled).
void SlurmExecutor::Impl::cancel(const std::string& job, const std::string& trial_name,
                                 bool term_only) {
  std::lock_guard lk(m);
  if (o.use_allocation) {
    // A step: its srun passes SIGTERM on to the supervisor (stop the trial); SIGUSR1 (kill it
    // now), then SIGTERM, which also ends an srun still waiting for CPUs. Never scancel: the
    // allocation is the driver's own.
    if (!term_only) step_signals.emplace_back(job, SIGUSR1);
    step_signals.emplace_back(job, SIGTERM);
    cv.notify_all();
    return;
  }
  if (ours.count(job))
    (term_only ? cancel_term : cancel_kill).push_back(job);
  else
    held.push_back({job, trial_name, term_only, snapshot_seq});
  poll_now = true;
  cv.notify_all();
}

void SlurmExecutor::Impl::release_held(uint64_t seq) {
  std::vector<Held> keep;
  for (auto& h : held) {
    if (seq <= h.after) {
      keep.push_back(std::move(h));
      continue;
    }
    auto it = last_seen.find(h.job);
    if (it == last_seen.end()) continue;  // not listed: nothing to cancel
    if (!listed_ours(it->second, h.trial_name)) {
      spdlog::warn("not cancelling slurm job {}: {} (tune cancels only its own jobs)", h.job,
                   not_ours(it->second, h.trial_name));
      continue;
    }
    ours.insert(h.job);
    cancel(h.job, h.trial_name, h.term);
  }
  held = std::move(keep);
}

void SlurmExecutor::Impl::cancel_at_exit() {
  if (o.use_allocation) {  // steps still running when the driver ends: killed, recorded
    for (auto& a : answers)
      if (a.job) live_steps.push_back(*a.job);
    answers.clear();
    auto ended = client->ended_steps(live_steps);
    std::erase_if(live_steps, [&](const std::string& id) {
      return std::find(ended.begin(), ended.end(), id) != ended.end();
    });
    for (int sig : {SIGUSR1, SIGTERM}) client->signal_steps(live_steps, sig);
    return;
  }
  for (auto& a : answers) {
    if (!a.job) continue;
    ours.insert(*a.job);
    auto it = runs.find(a.trial_id);
    if (it == runs.end() || it->second.gen != a.gen || it->second.stop_asked)
      cancel(*a.job, it == runs.end() ? "" : it->second.trial_name, false);
  }
  answers.clear();
  if (!held.empty()) {
    if (auto q = client->queue()) {
      last_seen.clear();
      for (auto& j : *q) last_seen[j.id] = std::move(j);
      release_held(UINT64_MAX);
    } else {
      spdlog::warn("{}", q.error().message);
    }
  }
  for (auto [ids, term] : {std::pair{&cancel_term, true}, {&cancel_kill, false}})
    if (!ids->empty())
      if (auto r = client->cancel(*ids, term); !r) spdlog::warn("{}", r.error().message);
  cancel_term.clear(), cancel_kill.clear();
}

// Job ids read back from the state or a .job file become ours once squeue lists them so.
void SlurmExecutor::Impl::verify_runs() {
  for (auto& [id, r] : runs) {
    if (r.job_id.empty() || ours.count(r.job_id)) continue;
    auto it = last_seen.find(r.job_id);
    if (it != last_seen.end() && listed_ours(it->second, r.trial_name)) ours.insert(r.job_id);
  }
}

Result<void> SlurmExecutor::check() {
  if (impl_->o.use_allocation) return {};  // no sbatch: steps of the driver's own allocation
  // The job's name and comment are how tune knows its own jobs again: not the user's to set.
  for (const auto& a : impl_->o.job.sbatch_args)
    for (const char* own : {"--job-name", "-J", "--comment"})
      if (a == own || (a.starts_with(own) && (a[std::strlen(own)] == '=' || own[1] == 'J')))
        return fail("hosts.slurm.sbatch_args: '", a,
                    "' is tune's own (jobs are named tune-<experiment>-<trial> and marked with "
                    "a comment, to know them again)");
  std::string name = job_name(impl_->o.exp_name, "check");
  auto args = sbatch_options(impl_->o.job, name, impl_->o.exp_dir);
  if (auto r = impl_->client->test_only(args); !r)
    return fail("hosts.slurm: Slurm refuses jobs like this experiment's: ", r.error().message);
  return {};
}

Result<Attached> SlurmExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  std::string name = l.trial_dir.filename().string();
  auto queue = [&]() -> const std::vector<JobInfo>& {
    if (!impl.resume_queue) {
      auto q = impl.client->queue();
      if (!q) spdlog::warn("{} (jobs of an earlier driver are not looked for)", q.error().message);
      impl.resume_queue = q ? std::move(*q) : std::vector<JobInfo>{};
    }
    return *impl.resume_queue;
  };
  // The job: as the state names it, else as its .job file does, else the one squeue lists with
  // this attempt's mark (sbatch answered, then the driver died before writing the id down).
  // The attempt the job ran first: the .job file's, else the job's mark's, else this one.
  if (impl.o.use_allocation) return attach_step(l);
  auto file = read_job_file(impl.o.exp_dir, name);
  std::optional<JobFile> job;
  if (!l.job_id.empty()) job = JobFile{l.job_id, l.attempt, l.attempt};
  if (!job && file) job = file;
  if (job && file && file->job_id == job->job_id && file->attempt == job->attempt)
    job->first_attempt = file->first_attempt;
  else if (job && job->attempt == l.attempt)
    for (const auto& j : queue())
      if (j.id == job->job_id && impl.listed_ours(j, name))
        if (auto m = marked_attempt(impl.o.record_key, name, j.comment); m && *m <= l.attempt)
          job->first_attempt = *m;
  if (!job || job->attempt != l.attempt) {
    for (const auto& j : queue())
      if (impl.listed_ours(j, name) && !job_ended(j.state) &&
          marked_attempt(impl.o.record_key, name, j.comment) == l.attempt) {
        spdlog::info("trial {}: slurm job {} found by its mark (its id was never recorded)", name,
                     j.id);
        job = JobFile{j.id, l.attempt, l.attempt};
        impl.ours.insert(j.id);
      }
  }
  bool ours = job && job->attempt == l.attempt;
  // The record is believed only with the nonce of this run of the job (its id and count).
  std::string nonce = ours ? slurm_attempt_nonce(impl.o.record_key, name, job->first_attempt,
                                                 job->job_id, l.attempt)
                           : "";
  ExitInfo info;
  auto text = util::read_file(impl.o.exp_dir / record_path(name), 1 << 16);
  AttemptIdentity id{nonce, std::nullopt, std::nullopt, std::nullopt};
  bool ended = ours && check_exit_record(text ? std::optional(*text) : std::nullopt, l.attempt, id,
                                         info) == RecordCheck::kGenuine;
  if (!ended && !ours) return Attached::kGone;
  Impl::Run& r = impl.fresh_run(l);
  r.phase = Phase::kSubmitted;
  // Not seen running yet: a job still pending from before is not mistaken for a requeued one
  // (one Slurm requeued meanwhile reruns without an attempt and leaves the old record).
  impl.set_job(r, job->job_id, job->first_attempt);
  if (l.job_id != r.job_id) impl.got_job(r);
  // Slurm requeued the job and reran it on its own meanwhile: this attempt ended there.
  if (impl.superseded(r)) {
    spdlog::info("trial {}: {}", name, r.exit->error);
    return Attached::kEnded;
  }
  {
    std::lock_guard lk(impl.m);
    r.judged_after = impl.snapshot_seq;
    impl.poll_now = true;
    impl.cv.notify_all();
  }
  if (!ended) spdlog::info("trial {}: re-attached to slurm job {}", name, job->job_id);
  return ended ? Attached::kEnded : Attached::kRunning;
}

std::vector<LiveAttempt> SlurmExecutor::live_attempts() {
  auto& impl = *impl_;
  std::vector<LiveAttempt> out;
  if (impl.o.use_allocation) return impl.live_steps_found();
  std::error_code ec;
  if (!fs::is_directory(impl.slurm_dir, ec)) return out;
  auto q = impl.client->queue();
  if (!q) {
    spdlog::warn("{} (jobs of an earlier driver are not checked)", q.error().message);
    return out;
  }
  impl.resume_queue = *q;
  std::set<std::string> found;
  auto add = [&](const std::string& trial_name, int attempt, const std::string& job) {
    if (!found.insert(job).second) return;
    impl.ours.insert(job);
    LiveAttempt a;
    a.host = impl.o.host_name;
    a.trial_name = trial_name;
    a.attempt = attempt;
    a.supervisor = std::atoi(job.c_str());  // the job id stands for the supervisor here
    out.push_back(std::move(a));
  };
  std::unordered_map<std::string, const JobInfo*> by_id;
  for (const auto& j : *q) by_id[j.id] = &j;
  // Those the .job files name, if squeue lists them under the trial's job name.
  for (const auto& e : fs::directory_iterator(impl.slurm_dir, ec)) {
    std::string file = e.path().filename().string();
    if (!file.ends_with(".job")) continue;
    std::string name = file.substr(0, file.size() - 4);
    auto job = read_job_file(impl.o.exp_dir, name);
    if (!job) continue;
    auto it = by_id.find(job->job_id);
    if (it == by_id.end() || job_ended(it->second->state)) continue;
    if (!impl.listed_ours(*it->second, name)) {
      spdlog::warn("{}/{} names slurm job {}, but {}: left alone (tune touches only its own jobs)",
                   kSlurmDir, file, job->job_id, impl.not_ours(*it->second, name));
      continue;
    }
    add(name, job->attempt, job->job_id);
  }
  // Those with an attempt's mark, whether or not their id was ever written down.
  std::string prefix = job_name(impl.o.exp_name, "");
  for (const auto& j : *q) {
    if (job_ended(j.state) || !j.name.starts_with(prefix)) continue;
    std::string name = j.name.substr(prefix.size());
    if (auto attempt = marked_attempt(impl.o.record_key, name, j.comment))
      add(name, *attempt, j.id);
  }
  return out;
}

void SlurmExecutor::end_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
  auto& impl = *impl_;
  if (impl.o.use_allocation) return impl.end_steps(which, grace_s);
  std::vector<std::string> ids;
  for (const auto& a : which) {
    std::string id = std::to_string(a.supervisor);
    if (a.supervisor > 0 && impl.ours.count(id)) ids.push_back(id);
  }
  if (ids.empty()) return;
  if (auto r = impl.client->cancel(ids, true); !r) spdlog::warn("{}", r.error().message);
  double start = mono();
  bool killed = false;
  while (mono() - start < grace_s + 10) {
    auto q = impl.client->queue();
    if (!q) break;
    bool any = false;
    for (const auto& j : *q)
      if (std::find(ids.begin(), ids.end(), j.id) != ids.end() && !job_ended(j.state)) any = true;
    if (!any) return;
    if (!killed && mono() - start >= grace_s) {
      killed = true;
      if (auto r = impl.client->cancel(ids, false); !r) spdlog::warn("{}", r.error().message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (!killed) (void)impl.client->cancel(ids, false);
}

}  // namespace tune::exec
