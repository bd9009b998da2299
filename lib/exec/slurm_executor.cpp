#include "exec/slurm_executor.hpp"

#include "exec/slurm_executor_impl.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

namespace tune::exec {

namespace {

// Up to `max` bytes of `path` from `offset` (nothing if it is missing or no longer).
std::string read_from(const fs::path& path, uint64_t offset, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string data(max, '\0');
  ssize_t n = ::pread(fd, data.data(), data.size(), static_cast<off_t>(offset));
  ::close(fd);
  data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return data;
}

}  // namespace

void SlurmExecutor::Impl::worker_main() {
  // Job steps' sruns get SIGTERM if the driver dies (they pass it on to the trial): a step never
  // outlives its driver, whose allocation it belongs to.
  if (o.use_allocation) util::tie_helpers_to_this_thread();
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
    out.job = client->start_step(
        s.args, s.launch_file,
        s.launch.trial_dir / ("slurm-step.a" + std::to_string(s.launch.attempt) + ".out"));
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

std::string SlurmExecutor::Impl::launch_text(const Launch& l, int first) const {
  std::string name = l.trial_dir.filename().string();
  SupervisorCall call;
  call.supervisor = o.supervisor;
  call.lease = o.lease;
  call.orphan_timeout_s = o.orphan_timeout_s;
  call.grace_s = std::max(1.0, o.job.signal_grace_s - 2);
  call.record = o.exp_dir / record_path(name);
  // A step is never requeued by Slurm: its supervisor gets the attempt's own nonce.
  call.secret = o.use_allocation ? attempt_nonce(o.record_key, name, l.attempt)
                                 : slurm_job_secret(o.record_key, name, first);
  return launch_script(l, call);
}

Submit SlurmExecutor::Impl::make_submit(const Launch& l, uint64_t gen) {
  Submit s;
  s.trial_id = l.trial_id;
  s.gen = gen;
  s.launch = l;
  std::string name = l.trial_dir.filename().string();
  s.launch_file = slurm_dir / (name + ".a" + std::to_string(l.attempt) + ".launch");
  s.stub = slurm_dir / (name + ".sbatch");
  s.job_file = job_file_path(o.exp_dir, name);
  s.launch_text = launch_text(l, l.attempt);  // a new job: this attempt is its first run
  std::string jn = job_name(o.exp_name, name);
  s.stub_text = stub_script(jn, s.launch_file, slurm_dir, name);
  s.args = o.use_allocation
               ? srun_options(o.job, jn, l.trial_dir)
               : sbatch_options(o.job, jn, l.trial_dir, job_mark(o.record_key, name, l.attempt));
  return s;
}

int SlurmExecutor::Impl::in_slurm() const {
  int n = 0;
  for (const auto& [id, r] : runs)
    if (r.phase == Phase::kSubmitting || r.phase == Phase::kSubmitted) ++n;
  return n;
}

// Submits waiting attempts while there is room under max_jobs.
void SlurmExecutor::Impl::hand_over() {
  double now = mono();
  int room = o.max_jobs - in_slurm();
  std::vector<Submit> go;
  for (auto it = waiting.begin(); it != waiting.end() && room > 0;) {
    auto r = runs.find(*it);
    if (r == runs.end() || r->second.phase != Phase::kWaiting || !r->second.pending) {
      it = waiting.erase(it);
      continue;
    }
    if (r->second.retry_at > now) {
      ++it;
      continue;
    }
    r->second.phase = Phase::kSubmitting;
    go.push_back(*r->second.pending);
    --room;
    it = waiting.erase(it);
  }
  if (go.empty()) return;
  std::lock_guard lk(m);
  for (auto& s : go) submits.push_back(std::move(s));
  cv.notify_all();
}

void SlurmExecutor::Impl::end_run(Run& r, ExitInfo info) {
  if (r.exit || r.phase == Phase::kDone) return;
  info.attempt = r.attempt;
  r.exit = std::move(info);
}

// A decision on a job Slurm ended or lost, when no exit record says how the attempt ended.
void SlurmExecutor::Impl::judge(Run& r, double now) {
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

// Reads the trial's new output and its exit record; reports the exit after all output.
void SlurmExecutor::Impl::scan(Run& r, std::vector<Event>& out) {
  if (r.phase != Phase::kSubmitted && !r.exit) return;
  fs::path log = r.dir / "stdout.log";
  // The notes first: each covers bytes written after it, so all output read below is covered.
  std::vector<Arrival> arrivals;
  std::optional<HostTime> started;
  if (auto notes = read_from(r.dir / "stdout.times", r.times.offset(), 1u << 20); !notes.empty())
    r.times.feed(notes, arrivals, started);
  struct stat st {};
  if (::stat(log.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > r.offset) {
    int fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string data(std::min<uint64_t>(static_cast<uint64_t>(st.st_size) - r.offset, 4u << 20),
                       '\0');
      ssize_t n = ::pread(fd, data.data(), data.size(), static_cast<off_t>(r.offset));
      ::close(fd);
      if (n > 0) {
        data.resize(static_cast<size_t>(n));
        r.offset += static_cast<uint64_t>(n);
        r.grew = true;
        OutputEvent ev(r.trial_id, std::move(data));
        ev.arrivals = std::move(arrivals);
        ev.started = started;
        out.push_back(std::move(ev));
        return;  // the rest (and the exit) next turn
      }
    }
  }
  if (!r.exit) {
    ExitInfo info;
    auto text = util::read_file(o.exp_dir / record_path(r.trial_name), 1 << 16);
    AttemptIdentity id{r.nonce, std::nullopt, std::nullopt, std::nullopt};
    auto check = check_exit_record(text ? std::optional(*text) : std::nullopt, r.attempt, id, info);
    if (check != RecordCheck::kGenuine) return;
    if (info.reason == ExitReason::kDriverStop && !r.stop_asked) {
      // Signalled by Slurm (time limit, preemption, requeue) or cancelled by someone: the
      // attempt is re-queued from its checkpoint, unless Slurm ended it twice without one.
      if (!o.use_allocation) maybe_requeued[r.trial_id] = {r.job_id, r.first_attempt};
      int& n = slurm_ends[r.trial_id];
      if (++n >= 2) {
        n = 0;
        info.reason = ExitReason::kExited;
        info.exit_code.reset();
        info.signal = SIGTERM;
        info.error = "slurm job " + r.job_id +
                     " was ended by Slurm (time limit or preemption) a second time without a new "
                     "checkpoint";
      } else {
        info.reason = ExitReason::kPreempted;
        info.error =
            "slurm job " + r.job_id + " was signalled by Slurm (time limit, preemption or requeue)";
      }
    }
    end_run(r, std::move(info));
  }
  ExitEvent e{r.trial_id, *r.exit};
  e.info.attempt = r.attempt;
  r.phase = Phase::kDone;
  out.emplace_back(std::move(e));
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
  if (running && now - r.deciding_since < 60) return;  // still finishing its last run
  if (prev != maybe_requeued.end()) maybe_requeued.erase(prev);
  // Slurm's rerun is run K = attempt - first of the job (SLURM_RESTART_COUNT): this attempt
  // runs there only if it comes after the job's first run.
  if (pending && first >= 1 && r.attempt > first) {
    auto& s = *r.pending;
    std::error_code ec;
    fs::create_directories(slurm_dir, ec);
    int k = r.attempt - first;
    auto w = util::write_file_atomic(next_launch_file(slurm_dir, r.trial_name, job, k),
                                     launch_text(s.launch, first), false);
    if (w)
      w = util::write_file_atomic(
          s.job_file, job + " " + std::to_string(r.attempt) + " " + std::to_string(first) + "\n");
    if (w) {
      spdlog::info("trial {} attempt {}: runs when Slurm restarts its requeued job {} (run {})",
                   r.trial_name, r.attempt, job, k);
      set_job(r, job, first);
      r.phase = Phase::kSubmitted;
      r.judged_after = seen_seq;
      r.pending.reset();
      got_job(r);
      return;
    }
    spdlog::warn("{}", w.error().message);
  }
  if (!job.empty() && (pending || running)) cancel(job, r.trial_name, false);  // not needed
  r.phase = Phase::kWaiting;
  waiting.push_back(r.trial_id);
}

void SlurmExecutor::Impl::take_answers(std::vector<Event>& out, double now) {
  std::vector<Submitted> got;
  std::optional<std::vector<JobInfo>> snap;
  std::vector<std::string> errors, ended_steps;
  uint64_t seq = 0;
  {
    std::lock_guard lk(m);
    got.swap(answers);
    ended_steps.swap(steps_ended);
    snap.swap(snapshot);
    errors.swap(worker_errors);
    seq = snapshot_seq;
    for (auto& j : acct_answers) acct[j.id] = std::move(j);
    acct_answers.clear();
    for (auto& id : acct_answered) acct_done.insert(std::move(id));
    acct_answered.clear();
  }
  for (auto& e : errors) log_once(e);
  for (auto& a : got) {
    auto it = runs.find(a.trial_id);
    if (a.job) ours.insert(*a.job);
    if (it == runs.end() || it->second.gen != a.gen) {
      // submitted for an attempt that was stopped meanwhile
      if (a.job) cancel(*a.job, it == runs.end() ? "" : it->second.trial_name, false);
      continue;
    }
    Run& r = it->second;
    if (!a.job) {
      log_once(a.job.error().message);
      if (++r.submit_failures >= 5) {
        ExitInfo e;
        e.reason = ExitReason::kExecFailed;
        e.error = a.job.error().message;
        r.phase = Phase::kSubmitted;
        end_run(r, std::move(e));
        continue;
      }
      r.phase = Phase::kWaiting;
      r.retry_at = now + 5.0 * (1 << r.submit_failures);
      waiting.push_back(r.trial_id);
      continue;
    }
    set_job(r, *a.job, r.attempt);
    r.phase = Phase::kSubmitted;
    r.judged_after = seq;
    r.pending.reset();
    spdlog::info("trial {} attempt {}: slurm job {}", r.trial_name, r.attempt, r.job_id);
    got_job(r);
    if (r.stop_asked) cancel(r.job_id, r.trial_name, false);
  }
  if (o.use_allocation) judge_steps(ended_steps, now);
  if (snap) {
    last_seen.clear();
    for (auto& j : *snap) last_seen[j.id] = std::move(j);
    seen_seq = seq;
    verify_runs();
    release_held(seq);
    for (auto& [id, r] : runs) {
      if (r.phase == Phase::kDeciding) decide_requeued(r, now);
      if (r.phase == Phase::kSubmitted && !r.exit && seq > r.judged_after) judge(r, now);
    }
  }
  (void)out;
}

SlurmExecutor::SlurmExecutor(SlurmOptions opts, std::unique_ptr<SlurmClient> client)
    : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(opts);
  impl_->client = std::move(client);
  impl_->slurm_dir = impl_->o.exp_dir / kSlurmDir;
  impl_->worker = std::thread([this] { impl_->worker_main(); });
}

SlurmExecutor::~SlurmExecutor() {
  {
    std::lock_guard lk(impl_->m);
    impl_->quit = true;
    impl_->cv.notify_all();
  }
  impl_->worker.join();
  impl_->cancel_at_exit();
}

Result<void> SlurmExecutor::start(const Launch& l) {
  auto& impl = *impl_;
  std::error_code ec;
  fs::create_directories(impl.slurm_dir, ec);  // one mkdir; the rest is the worker's
  Impl::Run& r = impl.runs[l.trial_id];
  uint64_t gen = r.gen + 1;
  r = Impl::Run{};
  r.gen = gen;
  r.trial_id = l.trial_id;
  r.trial_name = l.trial_dir.filename().string();
  r.attempt = l.attempt;
  r.first_attempt = l.attempt;
  r.dir = l.trial_dir;
  r.offset = l.stdout_offset;
  r.times = ArrivalReader(l.attempt);
  r.pending = impl.make_submit(l, gen);
  impl.slurm_ends.try_emplace(l.trial_id, 0);
  if (impl.maybe_requeued.count(l.trial_id)) {
    r.phase = Phase::kDeciding;
    r.deciding_since = mono();
  } else {
    impl.waiting.push_back(l.trial_id);
    impl.hand_over();
  }
  return {};
}

void SlurmExecutor::send(const std::string&, std::string_view) {}  // step mode: not on Slurm

void SlurmExecutor::stop(const std::string& id, bool now) {
  auto& impl = *impl_;
  auto it = impl.runs.find(id);
  if (it == impl.runs.end() || it->second.phase == Phase::kDone) return;
  Impl::Run& r = it->second;
  bool first = !r.stop_asked;
  r.stop_asked = true;
  ExitInfo stopped;
  stopped.reason = ExitReason::kDriverStop;
  switch (r.phase) {
    case Phase::kWaiting:
    case Phase::kDeciding:  // never reached Slurm
      r.phase = Phase::kSubmitted;
      impl.end_run(r, stopped);
      return;
    case Phase::kSubmitting:  // cancelled when sbatch answers
      return;
    default:
      break;
  }
  if (r.job_id.empty()) {
    impl.end_run(r, stopped);
    return;
  }
  if (!r.seen_running && r.state == JobState::kPending) {
    impl.cancel(r.job_id, r.trial_name, false);  // nothing ran yet: no supervisor will record
    impl.end_run(r, stopped);
    return;
  }
  if (now) {
    impl.cancel(r.job_id, r.trial_name, false);
  } else if (first) {
    impl.cancel(r.job_id, r.trial_name, true);  // SIGTERM to the batch shell: the supervisor
    r.kill_at = mono() + impl.o.job.signal_grace_s + 5;
  }
}

std::vector<Event> SlurmExecutor::wait(double timeout_s) {
  auto& impl = *impl_;
  std::vector<Event> out;
  double now = mono();
  impl.take_answers(out, now);
  if (!impl.waiting.empty()) impl.hand_over();
  for (auto& [id, r] : impl.runs)
    if (r.kill_at > 0 && now >= r.kill_at && r.phase == Phase::kSubmitted && !r.exit) {
      r.kill_at = -1;
      impl.cancel(r.job_id, r.trial_name, false);
    }
  bool any_exit = false;
  for (auto& [id, r] : impl.runs) any_exit = any_exit || r.exit.has_value();
  if (now >= impl.next_scan || any_exit) {
    impl.next_scan = now + impl.o.scan_s;
    for (auto& [id, r] : impl.runs) impl.scan(r, out);
    for (auto it = impl.runs.begin(); it != impl.runs.end();)
      it = it->second.phase == Phase::kDone ? impl.runs.erase(it) : std::next(it);
  }
  if (out.empty() && timeout_s > 0) {
    std::unique_lock lk(impl.m);
    impl.cv.wait_for(lk, std::chrono::duration<double>(std::min(timeout_s, impl.o.scan_s)),
                     [&] { return !impl.answers.empty() || impl.snapshot.has_value(); });
  }
  // output before exits (an exit only follows its own output, which scan() guarantees)
  std::stable_partition(out.begin(), out.end(),
                        [](const Event& e) { return std::holds_alternative<OutputEvent>(e); });
  return out;
}

std::optional<int> SlurmExecutor::pid(const std::string&) {
  return std::nullopt;
}

double SlurmExecutor::now() {
  return mono();
}

double SlurmExecutor::wall_time() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

std::string SlurmExecutor::host_name() {
  return impl_->o.host_name;
}

void SlurmExecutor::checkpoint_registered(const std::string& id) {
  impl_->slurm_ends[id] = 0;
}

std::vector<std::pair<std::string, std::string>> SlurmExecutor::take_job_ids() {
  return std::exchange(impl_->new_jobs, {});
}

bool SlurmExecutor::busy() const {
  return !impl_->runs.empty();
}

uint64_t SlurmExecutor::accounting_calls() const {
  std::lock_guard lk(impl_->m);
  return impl_->acct_calls;
}

uint64_t SlurmExecutor::queue_calls() const {
  std::lock_guard lk(impl_->m);
  return impl_->queue_calls;
}

}  // namespace tune::exec
