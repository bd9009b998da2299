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

std::string SlurmExecutor::Impl::launch_text(const Launch& l, int first, bool first_run) const {
  std::string name = l.trial_dir.filename().string();
  SupervisorCall call;
  call.supervisor = o.supervisor;
  call.lease = o.lease;
  call.orphan_timeout_s = o.orphan_timeout_s;
  call.grace_s = std::max(1.0, o.job.signal_grace_s - 2);
  call.record = o.exp_dir / record_path(name);
  // A step is never requeued by Slurm: its supervisor gets the attempt's own nonce.
  call.rerun = first_run && !o.use_allocation;  // a job's stub may rerun it on its own
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
  s.job_file = o.use_allocation ? step_file_path(o.exp_dir, name) : job_file_path(o.exp_dir, name);
  s.launch_text = launch_text(l, l.attempt, true);  // a new job: this attempt is its first run
  std::string jn = job_name(o.exp_name, name);
  s.stub_text = stub_script(jn, s.launch_file, slurm_dir, name, l.trial_dir);
  if (!o.use_allocation) {
    s.args = sbatch_options(o.job, jn, l.trial_dir, job_mark(o.record_key, name, l.attempt));
    return s;
  }
  // A step: named for its attempt, it claims its launch file as it starts (step_command).
  s.args = srun_options(o.job, step_name(o.record_key, o.exp_name, name, l.attempt), l.trial_dir);
  s.command = step_command(s.launch_file, attempt_file(o.exp_dir, name, l.attempt, ".run"),
                           step_id_path(o.exp_dir, name, l.attempt));
  return s;
}

SlurmExecutor::Impl::Run& SlurmExecutor::Impl::fresh_run(const Launch& l) {
  Run& r = runs[l.trial_id];
  uint64_t gen = r.gen + 1;
  r = Run{};
  r.gen = gen;
  r.trial_id = l.trial_id;
  r.trial_name = l.trial_dir.filename().string();
  r.attempt = l.attempt;
  r.first_attempt = l.attempt;
  r.dir = l.trial_dir;
  r.offset = l.stdout_offset;
  r.times = ArrivalReader(l.attempt);
  return r;
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

// Reads the trial's new output and its exit record; reports the exit after all output.
void SlurmExecutor::Impl::scan(Run& r, std::vector<Event>& out) {
  if (r.phase != Phase::kSubmitted && !r.exit) return;
  if (o.use_allocation && r.step_id.empty()) note_step_id(r);
  fs::path log = r.dir / "stdout.log";
  // The notes first: each covers bytes written after it, so all output read below is covered.
  std::vector<Arrival> arrivals;
  std::optional<HostTime> started;
  if (auto notes = read_from(r.dir / "stdout.times", r.times.offset(), 1u << 20); !notes.empty())
    r.times.feed(notes, arrivals, started);
  struct stat st {};
  uint64_t size = ::stat(log.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  size = std::min(size, r.cut_at);  // a later attempt's output starts there
  if (size > r.offset) {
    int fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string data(std::min<uint64_t>(size - r.offset, 4u << 20), '\0');
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
    if (o.use_allocation) {
      spdlog::info("trial {} attempt {}: slurm job step started (srun {})", r.trial_name, r.attempt,
                   r.job_id);
    } else {
      spdlog::info("trial {} attempt {}: slurm job {}", r.trial_name, r.attempt, r.job_id);
      got_job(r);
    }
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
  const char* kill_hook = std::getenv("TUNE_TEST_KILL_AFTER_SRUN");  // tests only
  impl_->kill_after_srun = kill_hook && *kill_hook == '1';
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
  // one mkdir (the rest is the worker's), private: its files hold the jobs' secrets
  if (fs::create_directories(impl.slurm_dir, ec)) ::chmod(impl.slurm_dir.c_str(), 0700);
  Impl::Run& r = impl.fresh_run(l);
  r.pending = impl.make_submit(l, r.gen);
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
