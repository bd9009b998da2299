// Which Slurm jobs are this experiment's, and what a new driver finds of an earlier one's: job
// files and marks, cancels only of our own jobs, re-attaching and the jobs a resume ends.
#include <cstring>

#include <spdlog/spdlog.h>

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
  f.attempt = std::atoi(text->c_str() + sp + 1);
  if (f.attempt < 1) return std::nullopt;
  return f;
}

std::string job_mark(std::string_view key, const std::string& trial_name, int attempt) {
  return "tune:" + std::to_string(attempt) + ":" +
         attempt_nonce(key, trial_name + "/job", attempt).substr(0, 16);
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
    if (!named_ours(it->second, h.trial_name)) {
      spdlog::warn(
          "not cancelling slurm job {}: squeue lists it as '{}', not as {} (tune cancels only "
          "its own jobs)",
          h.job, it->second.name, job_name(o.exp_name, h.trial_name));
      continue;
    }
    ours.insert(h.job);
    cancel(h.job, h.trial_name, h.term);
  }
  held = std::move(keep);
}

void SlurmExecutor::Impl::cancel_at_exit() {
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
    if (it != last_seen.end() && named_ours(it->second, r.trial_name)) ours.insert(r.job_id);
  }
}

Result<void> SlurmExecutor::check() {
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
  std::string nonce = attempt_nonce(impl.o.record_key, name, l.attempt);
  // The job: as the state names it, else as its .job file does, else the one squeue lists with
  // this attempt's mark (sbatch answered, then the driver died before writing the id down).
  std::optional<JobFile> job;
  if (!l.job_id.empty()) job = JobFile{l.job_id, l.attempt};
  if (!job) job = read_job_file(impl.o.exp_dir, name);
  if (!job || job->attempt != l.attempt) {
    if (!impl.resume_queue) {
      auto q = impl.client->queue();
      if (!q) spdlog::warn("{} (jobs of an earlier driver are not looked for)", q.error().message);
      impl.resume_queue = q ? std::move(*q) : std::vector<JobInfo>{};
    }
    for (const auto& j : *impl.resume_queue)
      if (impl.named_ours(j, name) && !job_ended(j.state) &&
          marked_attempt(impl.o.record_key, name, j.comment) == l.attempt) {
        spdlog::info("trial {}: slurm job {} found by its mark (its id was never recorded)", name,
                     j.id);
        job = JobFile{j.id, l.attempt};
        impl.ours.insert(j.id);
      }
  }
  ExitInfo info;
  auto text = util::read_file(impl.o.exp_dir / record_path(name), 1 << 16);
  AttemptIdentity id{nonce, std::nullopt, std::nullopt, std::nullopt};
  bool ended = check_exit_record(text ? std::optional(*text) : std::nullopt, l.attempt, id, info) ==
               RecordCheck::kGenuine;
  bool ours = job && job->attempt == l.attempt;
  if (!ended && !ours) return Attached::kGone;
  Impl::Run& r = impl.runs[l.trial_id];
  uint64_t gen = r.gen + 1;
  r = Impl::Run{};
  r.gen = gen;
  r.trial_id = l.trial_id;
  r.trial_name = name;
  r.attempt = l.attempt;
  r.dir = l.trial_dir;
  r.offset = l.stdout_offset;
  r.nonce = nonce;
  r.times = ArrivalReader(l.attempt);
  r.phase = Phase::kSubmitted;
  // Not seen running yet: a job still pending from before is not mistaken for a requeued one
  // (one Slurm requeued meanwhile reruns without an attempt and leaves the old record).
  r.job_id = ours ? job->job_id : "";
  if (ours && l.job_id != r.job_id) impl.got_job(r);
  {
    std::lock_guard lk(impl.m);
    r.judged_after = impl.snapshot_seq;
    impl.poll_now = true;
    impl.cv.notify_all();
  }
  if (ours && !ended) spdlog::info("trial {}: re-attached to slurm job {}", name, job->job_id);
  return ended ? Attached::kEnded : Attached::kRunning;
}

std::vector<LiveAttempt> SlurmExecutor::live_attempts() {
  auto& impl = *impl_;
  std::vector<LiveAttempt> out;
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
    if (!impl.named_ours(*it->second, name)) {
      spdlog::warn(
          "{}/{} names slurm job {}, which squeue lists as '{}', not as {}: left alone (tune "
          "touches only its own jobs)",
          kSlurmDir, file, job->job_id, it->second->name, job_name(impl.o.exp_name, name));
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
