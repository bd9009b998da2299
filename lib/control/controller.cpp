// The controller: its set-up, the start of a run (fresh or resumed), the last mirror, and the
// experiment dir's watch. The loop is in loop.cpp, how trials end in endings.cpp, launching in
// launching.cpp, results in results.cpp, state writes in state_writes.cpp, resume in resume.cpp.
#include "control/controller.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <csignal>

#include <sys/stat.h>

#include "report/refresher.hpp"
#include "search/space.hpp"
#include "search/space_json.hpp"
#include "sync/upload.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::control {

using json = nlohmann::json;
using exec::ExitReason;
using trial::Status;

Controller::Controller(spec::Experiment exp, exec::Executor& executor, ControllerOptions opts,
                       RunObserver* observer)
    : exp_(std::move(exp)),
      ex_(executor),
      opts_(std::move(opts)),
      observer_(observer),
      pool_(opts_.hosts.empty() ? local_hosts(exp_) : opts_.hosts),
      policy_(checkpoint::Policy::from(exp_.checkpoint)),
      sched_(sched::make_scheduler(exp_.scheduler, exp_.seed.value_or(0))) {
  host_name_ = ex_.host_name();
  search::SearcherContext sc;
  sc.experiment_dir = exp_.dir();
  sc.cwd = exp_.trial.workdir;
  if (!opts_.python_helpers_dir.empty()) {
    const char* pp = std::getenv("PYTHONPATH");
    sc.env["PYTHONPATH"] = opts_.python_helpers_dir + (pp && *pp ? ":" + std::string(pp) : "");
  }
  sc.metric = exp_.metric;
  sc.mode = exp_.mode == spec::Order::kMax ? "max" : "min";
  auto searcher = search::make_searcher(exp_.search_alg, exp_.space, exp_.num_samples,
                                        exp_.seed.value_or(0), sc);
  if (!searcher) throw Fatal(searcher.error(), kExitUsage);
  searcher_ = std::move(*searcher);
  sched_->attach(this);
  load_warm_start();
}

Controller::~Controller() = default;

void Controller::note_job_ids() {
  for (auto& [id, job] : ex_.take_job_ids()) {
    auto it = index_.find(id);
    if (it == index_.end()) continue;
    trial::Trial& t = state_.trials[it->second];
    if (t.status != Status::kRunning || t.job_id == job) continue;
    t.job_id = job;
    mark_dirty();
  }
}

void Controller::final_upload() {
  auto* up = opts_.uploader;
  if (!up) return;
  if (interrupts_ >= 2) {
    up->cancel();
    spdlog::warn("not mirrored to {} (interrupted twice); the next run mirrors it", up->target());
    return;
  }
  // Whatever runs now may predate the last state: wait for it, then mirror once more. A last
  // mirror that fails or is killed at sync_timeout (a stalled network) is tried again.
  spdlog::info("mirroring the experiment to {}", up->target());
  constexpr int kAttempts = 3;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (!mirror_once(*up)) return;
    if (up->failures() == 0) return;
    if (attempt < kAttempts)
      spdlog::warn("mirror to {} failed: trying again ({} of {})", up->target(), attempt + 1,
                   kAttempts);
  }
  spdlog::warn(
      "the experiment was not mirrored to {} ({} attempts failed); the next run "
      "mirrors it",
      up->target(), kAttempts);
}

bool Controller::mirror_once(sync::Uploader& up) {
  bool asked = false;
  while (true) {
    bool busy = up.poll();
    if (!busy && asked) return true;
    if (!busy) {
      up.request(true);
      asked = true;
      continue;
    }
    for (auto& ev : ex_.wait(0.1)) {
      if (std::holds_alternative<exec::InterruptEvent>(ev)) {
        up.cancel();
        spdlog::warn("mirror to {} cancelled; the next run mirrors it", up.target());
        return false;
      }
    }
  }
}

void Controller::draw(bool force) {
  if (!observer_) return;
  observer_->on_progress({ex_.now(), state_, exp_}, force);
}

int Controller::exit_code() const {
  if (interrupted_) return kExitInterrupted;
  for (const auto& t : state_.trials)
    if (t.status == Status::kError) return kExitTrialError;
  return kExitOk;
}

int Controller::run(std::optional<state::ExperimentState> resume) {
  run_started_ = ex_.now();
  bool resuming = resume.has_value();
  if (resume) {
    restore(std::move(*resume));
  } else {
    state_.name = exp_.name;
    state_.seed = exp_.seed.value_or(0);
    state_.total_trials = search::trial_count(exp_.space, exp_.num_samples);
    state_.start_time = ex_.wall_time();
  }
  prepare_run(resuming);
  run_loop();
  return wind_down();
}

// What every run does before its loop: the hosts and the state's header, the experiment dir,
// the journal, a first state write, the searcher, and stop requests made meanwhile.
void Controller::prepare_run(bool resuming) {
  state_.hosts.clear();
  for (const auto& h : pool_.hosts()) state_.hosts[h.name == "local" ? host_name_ : h.name] = "up";
  state_.metric = exp_.metric;
  state_.mode = exp_.mode == spec::Order::kMin ? "min" : "max";
  state_.phase = "running";
  if (!pool_.fits_somewhere(exp_.trial.resources))
    throw Fatal("trial.resources (cpu " + util::format_double(exp_.trial.resources.cpu) + ", gpu " +
                util::format_double(exp_.trial.resources.gpu) + ") fit on no host");
  std::error_code ec;
  fs::create_directories(exp_.dir(), ec);
  if (ec)
    throw Fatal("cannot create experiment dir '" + exp_.dir().string() + "': " + ec.message());
  check_experiment_dir(ex_.now());  // remembers which dir this run works in
  if (auto j = journal_.open(exp_.dir()); !j) throw Fatal(j.error());
  if (!maybe_save_state(true, true))
    throw Fatal("cannot write the experiment state in '" + exp_.dir().string() +
                "': nothing was started");
  start_searcher();
  if (!resuming) warm_searcher();
  if (resuming) check_stop_requests();  // asked while no driver ran

  if (resuming && opts_.process_started > 0)
    spdlog::info("resumed {} trial(s): {} re-attached, start-up took {:.3f} s",
                 state_.trials.size(), running_.size(), ex_.now() - opts_.process_started);
  lease_period_ = std::clamp(exp_.orphan_timeout_s / 4, 0.5, 10.0);
  if (resuming)
    for (const auto& t : state_.trials)
      if (t.finished()) clean_finished(t);
}

void Controller::check_experiment_dir(double now) {
  next_dir_check_ = now + 1;
  struct stat st {};
  bool gone = ::stat(exp_.dir().c_str(), &st) != 0;
  if (!gone && dir_identity_.first == 0 && dir_identity_.second == 0) {
    dir_identity_ = {st.st_dev, st.st_ino};
    return;
  }
  if (!gone && st.st_dev == dir_identity_.first && st.st_ino == dir_identity_.second)
    return check_trial_dirs();
  lost_ = true;
  stopping_ = true;
  // Said once, as the run's one-line error (lost_exit); its tune.log went with the dir.
  spdlog::debug("the experiment dir '{}' was {} while the driver ran: stopping its trials",
                exp_.dir().string(), gone ? "deleted" : "replaced");
  for (auto& [id, rt] : running_)
    if (!rt.deferred_exit) ex_.stop(id, true);
}

void Controller::note_trial_dir(const trial::Trial& t, Runtime& rt) {
  struct stat st {};
  if (::lstat(trial_dir(t).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    rt.dir_identity = {st.st_dev, st.st_ino};
}

void Controller::check_trial_dirs() {
  if (stopping_) return;  // (its trials end anyway, and resume later)
  for (auto& [id, rt] : running_) {
    // One already stopping for a reason of its own ends for that reason.
    if (rt.stop_why != StopWhy::kNone || rt.deferred_exit) continue;
    if (trial_dir_lost(trial(id), rt, false)) {
      ex_.stop(id, true);
      rt.term_sent = true;
    }
  }
}

bool Controller::trial_dir_lost(const trial::Trial& t, Runtime& rt, bool ended) {
  if (rt.dir_identity.first == 0 && rt.dir_identity.second == 0) {
    note_trial_dir(t, rt);  // (or not made yet: its host's agent makes it)
    return false;
  }
  struct stat st {};
  bool gone = ::lstat(trial_dir(t).c_str(), &st) != 0;
  if (!gone && st.st_dev == rt.dir_identity.first && st.st_ino == rt.dir_identity.second)
    return false;
  spdlog::error(
      "trial {}: its dir '{}' was {} while it ran: what it wrote there is lost; {} (a failure: "
      "it is retried per failure_config)",
      t.name, trial_dir(t).string(), gone ? "deleted" : "replaced",
      ended ? "the attempt ended" : "stopping it");
  rt.stop_why = StopWhy::kDirLost;
  return true;
}

void Controller::lost_exit() {
  worker_.cancel();
  (void)worker_.drain(5);
  throw Fatal("the experiment dir '" + exp_.dir().string() +
                  "' was deleted or replaced while the driver ran: its trials were stopped, and "
                  "nothing more could be saved",
              kExitTrialError);
}

void Controller::finish_file_work() {
  if (interrupts_ >= 2) worker_.cancel();  // copies give up; deletions are quick
  if (!worker_.drain(interrupts_ >= 2 ? 5 : 3600))
    spdlog::warn("file work still running after the wait: left for the next run");
  on_file_jobs_done();
}

}  // namespace tune::control
