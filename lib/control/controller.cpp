// The controller's loop: launching, exits, stopping, state. Result handling is in results.cpp.
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
using trial::Status;

namespace {

std::string describe_exit(const exec::ExitInfo& info) {
  if (!info.error.empty()) return info.error;
  if (info.signal) {
    const char* name = sigabbrev_np(*info.signal);
    return "killed by signal " + std::to_string(*info.signal) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  if (info.exit_code) return "exit code " + std::to_string(*info.exit_code);
  return info.reason;
}

}  // namespace

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

trial::Trial* Controller::new_trial() {
  auto cfg = searcher_->suggest(state_.next_index);
  if (cfg.kind == search::Suggestion::Kind::kFinished) {
    spdlog::info("the searcher has no more configs: {} trial(s) in all", state_.next_index);
    state_.total_trials = state_.next_index;
    mark_dirty();
    return nullptr;
  }
  if (cfg.kind == search::Suggestion::Kind::kWait) return nullptr;
  trial::Trial t;
  t.index = state_.next_index++;
  char id[32];
  std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(t.index));
  t.id = id;
  t.name = trial::make_trial_name(t.id, cfg.varying);
  t.config = std::move(cfg.config);
  index_[t.id] = state_.trials.size();
  state_.trials.push_back(std::move(t));
  sched_->on_trial_add(state_.trials.back().id, state_.trials.back().index);
  return &state_.trials.back();
}

void Controller::start_searcher() {
  std::vector<search::KnownTrial> known;
  for (const auto& t : state_.trials) {
    search::KnownTrial k{t.id, t.config, t.finished(), {}};
    if (k.finished)
      k.completion = {t.id, t.config, t.status == Status::kError ? std::nullopt : value_of(t),
                      t.last_result, t.status == Status::kError};
    known.push_back(std::move(k));
  }
  if (auto r = searcher_->start(known); !r) throw Fatal(r.error(), kExitTrialError);
}

void Controller::load_warm_start() {
  if (!exp_.search_alg.restore_from) return;
  const fs::path& from = *exp_.search_alg.restore_from;
  auto earlier = state::load(from);
  if (!earlier) throw Fatal("search_alg.restore_from: " + earlier.error().message, kExitUsage);
  size_t skipped = 0;
  for (const auto& t : earlier->trials) {
    if (!t.finished()) continue;
    // Its config must fit this space: the searcher models this space only.
    auto fits = search::config_from_answer(exp_.space, t.config);
    if (!fits) {
      ++skipped;
      continue;
    }
    bool error = t.status == Status::kError;
    warm_.push_back({"restored-" + t.id, fits->config, error ? std::nullopt : value_of(t),
                     t.last_result, error});
  }
  if (skipped)
    spdlog::warn(
        "search_alg.restore_from: {} finished trial(s) of {} left out: their configs "
        "do not fit this param_space",
        skipped, from.string());
}

void Controller::warm_searcher() {
  for (const auto& c : warm_) searcher_->on_complete(c);
  if (!warm_.empty()) {
    spdlog::info("search_alg.restore_from: the searcher was told {} finished trial(s) of {}",
                 warm_.size(), exp_.search_alg.restore_from->string());
    mark_dirty();
  }
  warm_.clear();
}

void Controller::poll_searcher() {
  if (searcher_->poll()) mark_dirty();
  if (searcher_failed_) return;
  searcher_failed_ = searcher_->failure();
  if (!searcher_failed_) return;
  // Ends the run like a Ctrl-C (trials resume later), then exits 1 with this error.
  spdlog::debug("{}", *searcher_failed_);
  stopping_ = true;
  stop_all(StopWhy::kUser, false);
  mark_dirty();
}

std::vector<std::string> Controller::trial_argv(const trial::Trial& t) const {
  std::vector<std::string> argv;
  for (const auto& word : exp_.trial.command) {
    std::string out;
    for (size_t i = 0; i < word.size(); ++i) {
      char c = word[i];
      if ((c == '{' || c == '}') && i + 1 < word.size() && word[i + 1] == c) {
        out.push_back(c);
        ++i;
      } else if (c == '{') {
        size_t close = word.find('}', i);
        const json* v =
            search::lookup(t.config, std::string_view(word).substr(i + 1, close - i - 1));
        out += v ? search::value_text(*v) : "";
        i = close;
      } else {
        out.push_back(c);
      }
    }
    argv.push_back(std::move(out));
  }
  return argv;
}

std::map<std::string, std::string> Controller::trial_env(const trial::Trial& t, const Placement& p,
                                                         const std::string& restore) const {
  const auto& host = pool_.hosts()[p.host];
  // On an SSH host the trial gets the host's own environment (its login shell's), not ours.
  auto env = host.remote ? std::map<std::string, std::string>{} : opts_.base_env;
  for (const auto& [k, v] : exp_.trial.env) env[k] = v;
  fs::path dir = host.remote ? fs::path(host.remote_exp_dir) / t.name : trial_dir(t);
  env["TUNE_TRIAL_ID"] = t.id;
  env["TUNE_TRIAL_NAME"] = t.name;
  env["TUNE_TRIAL_DIR"] = dir.string();
  env["TUNE_EXPERIMENT_NAME"] = exp_.name;
  env["TUNE_CONFIG"] = t.config.dump(-1, ' ', false, json::error_handler_t::replace);
  env["TUNE_CONFIG_FILE"] = (dir / "params.json").string();
  // Where the helpers stage a checkpoint before naming it: inside the trial dir, so the driver
  // takes it over with a rename (its .staged_checkpoint_* leftovers are cleaned on restart).
  env["TUNE_CHECKPOINT_STAGING"] = dir.string();
  env["TUNE_TRIAL_MODE"] = exp_.trial.mode == spec::TrialMode::kStep ? "step" : "function";
  env["CUDA_VISIBLE_DEVICES"] = p.cuda_visible_devices();
  if (restore.empty())
    env.erase("TUNE_RESTORE_CHECKPOINT");
  else
    env["TUNE_RESTORE_CHECKPOINT"] = restore;
  std::string helpers = host.remote ? host.remote_helpers_dir : opts_.python_helpers_dir;
  if (!helpers.empty()) {
    auto it = env.find("PYTHONPATH");
    env["PYTHONPATH"] = helpers + (it != env.end() && !it->second.empty() ? ":" + it->second : "");
  }
  return env;
}

fs::path Controller::host_trial_dir(const trial::Trial& t, const Placement& p) const {
  const auto& host = pool_.hosts()[p.host];
  return host.remote ? fs::path(host.remote_exp_dir) / t.name : trial_dir(t);
}

std::string Controller::remote_host(const trial::Trial& t) const {
  for (const auto& h : pool_.hosts())
    if (h.remote && h.name == t.host) return h.name;
  return "";
}

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

void Controller::end_strays() {
  std::unordered_map<std::string, const trial::Trial*> by_name;
  for (const auto& t : state_.trials) by_name[t.name] = &t;
  std::vector<exec::LiveAttempt> strays;
  for (auto& a : ex_.live_attempts()) {
    auto it = by_name.find(a.trial_name);
    const trial::Trial* t = it == by_name.end() ? nullptr : it->second;
    if (t && running_.count(t->id) && t->attempt == a.attempt && remote_host(*t) == a.host)
      continue;  // the attempt this resume re-attached
    spdlog::warn(
        "{} attempt {} still runs on {} but is not the trial's current attempt{}: "
        "stopping it before anything starts",
        a.trial_name, a.attempt, a.host.empty() ? host_name_ : a.host,
        t ? " (" + std::to_string(t->attempt) + ")" : std::string(" (unknown trial)"));
    strays.push_back(std::move(a));
  }
  if (!strays.empty()) ex_.end_attempts(strays, opts_.grace_s);
}

std::vector<std::string> Controller::missing_on_head(const trial::Trial& t) const {
  std::vector<std::string> missing;
  if (remote_host(t).empty()) return missing;
  fs::path dir = trial_dir(t);
  std::error_code ec;
  for (const auto& c : t.checkpoints)
    if (!fs::is_directory(dir / c.dir_name(), ec)) missing.push_back(c.dir_name());
  return missing;
}

void Controller::fetch_all_remote_only() {
  std::vector<std::pair<trial::Trial*, std::vector<std::string>>> todo;
  size_t total = 0, done = 0;
  for (auto& t : state_.trials) {
    if (running_.count(t.id)) continue;
    auto missing = missing_on_head(t);
    if (missing.empty()) continue;
    total += missing.size();
    todo.emplace_back(&t, std::move(missing));
  }
  for (auto& [t, missing] : todo) {
    fetch_remote_only(*t, missing);
    done += missing.size();
    if (opts_.fetch_progress) opts_.fetch_progress(done, total);
  }
}

void Controller::fetch_remote_only(trial::Trial& t, const std::vector<std::string>& missing) {
  std::string host = remote_host(t);
  fs::path dir = trial_dir(t);
  spdlog::info("trial {}: bringing {} checkpoint(s) from {} that never reached the head", t.name,
               missing.size(), host);
  auto got = ex_.fetch_checkpoints(host, dir, missing);
  for (const auto& name : got) spdlog::info("trial {}: {} brought from {}", t.name, name, host);
}

void Controller::prepare_restart(trial::Trial& t) {
  fs::path dir = trial_dir(t);
  // A trial that ran on an SSH host restarts from the newest checkpoint the head holds (its
  // host may be gone); newer ones that never reached the head are forgotten.
  if (!remote_host(t).empty()) {
    std::error_code ec;
    while (!t.checkpoints.empty() && !fs::is_directory(dir / t.checkpoints.back().dir_name(), ec)) {
      spdlog::warn("trial {}: {} never reached the head: restarting from an earlier one", t.name,
                   t.checkpoints.back().dir_name());
      t.checkpoints.pop_back();
    }
  }
  const trial::Checkpoint* c = t.latest_checkpoint();
  int64_t keep = c ? c->iteration : 0;
  std::vector<json> kept;
  auto rows = trial::ResultLog::truncate_after(dir, keep, &kept);
  if (!rows) spdlog::warn("trial {}: {}", t.name, rows.error().message);
  t.iteration = t.restore_iteration = keep;
  t.time_total_s = t.time_base = c ? c->time_total_s : 0;
  // last/min/max cover the results kept, not the dropped ones.
  if (rows) {
    t.metrics.clear();
    t.last_result = json::object();
    for (auto& row : kept) {
      t.track_metrics(row);
      t.last_result = std::move(row);
    }
  }
  reconcile_checkpoints(t, false, nullptr);
}

std::string Controller::host_of(const Placement& p) const {
  return pool_.hosts()[p.host].name == "local" ? host_name_ : pool_.hosts()[p.host].name;
}

bool Controller::launch(trial::Trial& t, const Placement& p) {
  fs::path dir = trial_dir(t);   // the executor makes it (off this loop where it can)
  Runtime& rt = running_[t.id];  // a fresh runtime for this attempt
  rt.placement = p;
  rt.time_base = t.time_base;
  // A retried or resumed trial starts from its latest checkpoint (prepare_restart dropped the
  // results after it).
  std::string restore;
  if (const trial::Checkpoint* c = t.latest_checkpoint(); c && t.attempt > 1) {
    const auto& host = pool_.hosts()[p.host];
    restore =
        ((host.remote ? fs::path(host.remote_exp_dir) / t.name : dir) / c->dir_name()).string();
    rt.last_checkpoint_iteration = c->iteration;
  } else if (!c && opts_.warm_start) {  // trial.restore_from: a warm start
    restore = pool_.hosts()[p.host].remote ? exp_.trial.restore_from->string()
                                           : opts_.warm_start->string();
  }
  t.status = Status::kRunning;
  t.reason = trial::Reason::kNone;
  t.host = host_of(p);
  t.error.clear();

  exec::Launch l;
  l.trial_id = t.id;
  l.attempt = t.attempt;
  l.trial_dir = dir;
  l.cwd = exp_.trial.workdir;
  if (pool_.hosts()[p.host].remote) l.host = pool_.hosts()[p.host].name;
  l.argv = trial_argv(t);
  l.env = trial_env(t, p, restore);
  l.stdout_offset = t.stdout_offset;
  l.stdin_fifo = exp_.trial.mode == spec::TrialMode::kStep;
  if (t.attempt == 1) l.params_json = t.config.dump(2) + "\n";
  rt.started = rt.last_result_at = ex_.now();
  spdlog::info("trial {} attempt {}: starting{}", t.name, t.attempt,
               restore.empty() ? "" : " from " + fs::path(restore).filename().string());
  if (auto r = ex_.start(l); !r) {
    running_.erase(t.id);
    pool_.release(p);
    finish(t, Status::kError, r.error().message);
    return false;
  }
  notify(TrialEvent::kStart, t);
  if (exp_.trial.mode == spec::TrialMode::kStep) step_send(t, running_.at(t.id), StepOp::kStep);
  return true;
}

void Controller::launch_ready() {
  if (stopping_) return;
  if (last_write_failed_ && ex_.now() < next_state_write_) return;
  size_t limit =
      exp_.max_concurrent_trials ? static_cast<size_t>(*exp_.max_concurrent_trials) : SIZE_MAX;
  if (exp_.search_alg.max_concurrent)  // the searcher's own limit (Ray's ConcurrencyLimiter)
    limit = std::min(limit, static_cast<size_t>(*exp_.search_alg.max_concurrent));
  // Restarts (retries, resumed trials) are prepared first and started after one full state
  // write: their truncated results and restore point must be on disk before they run. They are
  // held by index: new_trial() below may grow state_.trials and move every Trial.
  std::vector<std::pair<size_t, Placement>> restarts;
  // Trials waiting for a retry (or a resume) go first, then new ones from the searcher.
  while (running_.size() + restarts.size() < limit) {
    std::optional<size_t> ready = next_pending(ex_.now());
    if (!ready && state_.next_index >= state_.total_trials) break;
    auto placement = pool_.acquire(exp_.trial.resources);
    if (!placement) break;
    size_t at = 0;
    if (ready) {
      at = *ready;
      pending_.erase(at);
      retry_at_.erase(at);
    } else {
      trial::Trial* t = new_trial();
      if (!t) {
        pool_.release(*placement);
        break;
      }
      at = t->index;
    }
    trial::Trial& next = state_.trials[at];
    next.gpu_ids = placement->gpu_ids;
    // Where it runs is written ahead with the rest (journal line or state), so that a resume
    // after a crash at any instant looks for the attempt on the right host.
    next.host = host_of(*placement);
    next.attempt_started = ex_.wall_time();
    if (next.attempt > 0) {
      if (!next.pending_exploit.is_null()) carry_out_exploit(next);
      prepare_restart(next);
      next.attempt += 1;
      next.status = Status::kRunning;
      next.job_id.clear();
      next.stdout_offset = util::file_size_or_zero(trial_dir(next) / "stdout.log");
      restarts.emplace_back(at, *placement);
      continue;
    }
    if (!start_first_attempt(next, *placement)) break;
  }
  maybe_no_more_trials();
  if (restarts.empty()) return;
  mark_dirty();
  if (!maybe_save_state(true, false)) {
    for (auto& [at, p] : restarts) {
      trial::Trial& t = state_.trials[at];
      spdlog::error("trial {} not restarted: its state could not be saved", t.name);
      t.attempt -= 1;
      set_pending(t);
      pool_.release(p);
    }
    return;
  }
  for (auto& [at, p] : restarts) launch(state_.trials[at], p);
  mark_dirty();
}

bool Controller::start_first_attempt(trial::Trial& next, const Placement& placement) {
  // Write-ahead for a first attempt: one journal line rather than a rewrite of the whole
  // state (SPEC §4). If it cannot be written, nothing starts.
  next.attempt = 1;
  next.status = Status::kRunning;
  next.job_id.clear();
  next.iteration = next.restore_iteration = 0;
  next.time_total_s = next.time_base = 0;
  next.stdout_offset = util::file_size_or_zero(trial_dir(next) / "stdout.log");
  if (next.stdout_offset > 0) {
    // Output of a launch the state does not know (its journal line was lost, e.g. a state
    // downloaded from upload_dir): nothing of it counts.
    next.checkpoint_seq = 0;
    next.checkpoints.clear();
    prepare_restart(next);
  }
  if (auto r = journal_.record_launch(next); !r) {
    spdlog::error("cannot record the launch of {}: {} (not started)", next.name, r.error().message);
    next.attempt = 0;
    set_pending(next);
    pool_.release(placement);
    last_write_failed_ = true;
    next_state_write_ = ex_.now() + 1;
    return false;
  }
  launch(next, placement);
  mark_dirty();
  return true;
}

std::optional<size_t> Controller::next_pending(double now) const {
  // The lowest priority first (the scheduler's; 0 for most), then the oldest.
  std::optional<size_t> best;
  double best_p = 0;
  for (uint64_t at : pending_) {
    auto it = retry_at_.find(at);
    if (it != retry_at_.end() && it->second > now) continue;
    if (exploit_waits(state_.trials[at])) continue;  // pbt: its donor's save is on its way
    double p = sched_->priority(state_.trials[at].id);
    if (!best || p < best_p) best = at, best_p = p;
  }
  // A trial not created yet has advanced least of all (pbt ranks waiting trials so).
  if (best_p > 0 && state_.next_index < state_.total_trials && !stopping_) return std::nullopt;
  return best;
}

void Controller::resume_running(trial::Trial& t) {
  fs::path dir = trial_dir(t);
  bool step = exp_.trial.mode == spec::TrialMode::kStep;
  exec::Launch l;
  l.trial_id = t.id;
  l.attempt = t.attempt;
  l.trial_dir = dir;
  l.cwd = exp_.trial.workdir;
  l.host = remote_host(t);
  l.stdout_offset = t.stdout_offset;
  l.stdin_fifo = step;
  l.job_id = t.job_id;
  auto found = ex_.attach(l);
  if (!found) spdlog::warn("trial {}: {}", t.name, found.error().message);
  if (!found || *found == exec::Attached::kGone) {
    spdlog::info("trial {} attempt {}: not running any more; it restarts", t.name, t.attempt);
    set_pending(t);
    return;
  }
  // Its placement: the GPUs it holds, else the first that fits (it runs regardless).
  auto placement = pool_.acquire_exact(exp_.trial.resources, t.gpu_ids,
                                       pool_.find(l.host.empty() ? "local" : l.host).value_or(0));
  Runtime& rt = running_[t.id];
  rt.placement = placement;
  double now = ex_.now();
  rt.started = now - std::max(0.0, ex_.wall_time() - t.attempt_started);
  rt.last_result_at = now;
  rt.time_base = t.time_base;
  rt.iterations_since_restore = t.iteration - t.restore_iteration;
  if (const auto* c = t.latest_checkpoint()) rt.last_checkpoint_iteration = c->iteration;
  // A scheduler's stop or pause was on its way when the driver died (saved before it was sent):
  // it is carried out now.
  StopWhy decided = t.reason == trial::Reason::kStopped  ? StopWhy::kScheduler
                    : t.reason == trial::Reason::kPaused ? StopWhy::kPause
                                                         : StopWhy::kNone;
  if (decided != StopWhy::kNone) {
    spdlog::info("trial {} attempt {}: found {}; {} as decided before the driver stopped", t.name,
                 t.attempt, *found == exec::Attached::kRunning ? "running" : "ended",
                 decided == StopWhy::kPause ? "pausing it" : "stopping it");
    rt.stop_why = decided;
    if (*found == exec::Attached::kRunning) {
      ex_.stop(t.id, false);
      rt.term_sent = true;
    }
    if (!step) {
      if (auto r = rt.log.open(dir); !r) spdlog::warn("trial {}: {}", t.name, r.error().message);
    }
    return;
  }
  if (step) {
    // Which command it was answering is unknown: stop it, then restart from its checkpoint.
    spdlog::info("trial {} attempt {}: found {}; step mode: stopping it to restart it", t.name,
                 t.attempt, *found == exec::Attached::kRunning ? "running" : "ended");
    rt.stop_why = StopWhy::kResync;
    if (*found == exec::Attached::kRunning) {
      ex_.stop(t.id, false);
      rt.term_sent = true;
    }
    return;
  }
  // Results recorded after the last state write are read again from the saved offset: drop
  // them from result.json first so that none is recorded twice.
  if (auto r = trial::ResultLog::truncate_after(dir, t.iteration); !r)
    spdlog::warn("trial {}: {}", t.name, r.error().message);
  reconcile_checkpoints(t, true, &rt);
  if (auto r = rt.log.open(dir); !r) spdlog::warn("trial {}: {}", t.name, r.error().message);
  spdlog::info("trial {} attempt {}: re-attached ({}), reading from byte {}", t.name, t.attempt,
               *found == exec::Attached::kRunning ? "running" : "ended meanwhile", t.stdout_offset);
}

void Controller::set_pending(trial::Trial& t) {
  t.status = Status::kPending;
  // index == position in state_.trials: trials are created in index order and never removed
  pending_.insert(t.index);
  mark_dirty();
}

void Controller::request_stop(trial::Trial& t, Runtime& rt, StopWhy why) {
  // A stop criterion, done or a scheduler's decision is final: a later Ctrl-C does not make
  // the trial interrupted.
  bool final = is_final(rt.stop_why);
  if (rt.stop_why == StopWhy::kNone ||
      (!final && (why == StopWhy::kUser || why == StopWhy::kFailFast)))
    rt.stop_why = why;
  double now = ex_.now();
  if (exp_.trial.mode == spec::TrialMode::kStep && why != StopWhy::kUser &&
      why != StopWhy::kFailFast) {
    // Asked over stdin once the command in flight is answered (and the final checkpoint is
    // saved); the grace period starts when {"op":"stop"} is sent. The time budget is a hard
    // limit: a trial stuck in a step is stopped after the grace period regardless.
    if (why == StopWhy::kBudget && rt.kill_deadline < 0) rt.kill_deadline = now + opts_.grace_s;
    return;
  }
  if (why == StopWhy::kDone) {
    // The trial said it is done: let it exit by itself, then insist.
    if (rt.kill_deadline < 0) rt.kill_deadline = now + opts_.grace_s;
    return;
  }
  if (!rt.term_sent) {
    ex_.stop(t.id, false);
    rt.term_sent = true;
  }
}

void Controller::stop_all(StopWhy why, bool now) {
  for (auto& [id, rt] : running_) {
    if (rt.deferred_exit) continue;  // ended already
    auto& t = trial(id);
    if (now) {
      if (!is_final(rt.stop_why)) rt.stop_why = why;
      ex_.stop(id, true);
    } else {
      request_stop(t, rt, why);
    }
  }
}

void Controller::on_interrupt() {
  ++interrupts_;
  interrupted_ = true;
  stopping_ = true;
  if (interrupts_ == 1) {
    spdlog::warn("interrupted: stopping {} running trial(s) (Ctrl-C again to stop at once)",
                 running_.size());
    stop_all(StopWhy::kUser, false);
  } else {
    spdlog::warn("interrupted again: killing running trials now");
    stop_all(StopWhy::kUser, true);
  }
}

void Controller::check_deadlines(double now) {
  if (exp_.time_budget_s && !budget_spent_ &&
      elapsed_before_ + (now - run_started_) >= *exp_.time_budget_s) {
    budget_spent_ = true;
    stopping_ = true;
    spdlog::info("time budget of {} s spent: stopping", util::format_double(*exp_.time_budget_s));
    stop_all(StopWhy::kBudget, false);
  }
  for (auto& [id, rt] : running_) {
    if (rt.kill_deadline < 0 || now < rt.kill_deadline || rt.deferred_exit) continue;
    rt.kill_deadline = -1;
    if (!rt.term_sent) {
      ex_.stop(id, false);  // the supervisor escalates to SIGKILL after its own grace period
      rt.term_sent = true;
    }
  }
}

void Controller::finish(trial::Trial& t, Status status, const std::string& error) {
  t.status = status;
  t.error = error;
  if (status == Status::kError)
    spdlog::error("trial {} failed: {}", t.name, error);
  else
    spdlog::info("trial {} {}", t.name, trial::status_name(status));
  if (t.finished()) {
    if (!t.pending_exploit.is_null()) {  // ended before the exploit was carried out
      std::string donor_id = t.pending_exploit.value("donor", "");
      spdlog::info("trial {}: its exploit of {} is dropped: it ended first", t.name, donor_id);
      t.pending_exploit = nullptr;
      if (auto d = index_.find(donor_id); d != index_.end()) {
        trial::Trial& donor = state_.trials[d->second];
        apply_retention(donor, !donor.finished());
      }
    }
    apply_retention(t, false);
    notify(status == Status::kError ? TrialEvent::kError : TrialEvent::kComplete, t);
    searcher_->on_complete({t.id, t.config, status == Status::kError ? std::nullopt : value_of(t),
                            t.last_result, status == Status::kError});
    scheduler_complete(t);
  }
  mark_dirty();
}

void Controller::on_exit(const std::string& id, const exec::ExitInfo& info) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  auto& t = trial(id);
  Runtime& rt = it->second;
  if (rt.copies_in_flight > 0) {  // its checkpoints are still being copied in: wait for them
    rt.deferred_exit = info;
    return;
  }
  // A partial last line (no newline) still counts as a line once the process is gone.
  if (rt.splitter.pending() > 0) on_output(exec::OutputEvent(id, "\n"));
  StopWhy why = rt.stop_why;
  bool clean = info.exit_code && *info.exit_code == 0;
  // Ended by a stop criterion, by saying done, by the budget, or by itself with exit 0.
  // driver_stop without a stop of ours: an earlier driver's, or `tune stop`'s.
  bool by_supervisor =
      info.reason == "orphaned" || info.reason == "host_lost" || info.reason == "driver_stop";
  bool terminated = why == StopWhy::kCriterion || why == StopWhy::kDone ||
                    why == StopWhy::kBudget || why == StopWhy::kScheduler ||
                    (why == StopWhy::kNone && clean && !by_supervisor);
  // The driver ended it for another reason (SPEC §1): interrupted, resumed later from its
  // latest checkpoint, whatever its exit code, and never counted as a failure. A supervisor
  // that stopped its trial because the driver went silent (a stopped or suspended driver)
  // counts as the driver's doing too, as does a host lost for longer than host_timeout_s.
  bool interrupted =
      !terminated && (why == StopWhy::kUser || why == StopWhy::kFailFast || by_supervisor);
  if (auto r = terminated ? rt.log.mark_last_done() : rt.log.flush(); !r)
    spdlog::warn("trial {}: {}", t.name, r.error().message);
  rt.log.close();
  pool_.release(rt.placement);
  running_.erase(it);

  if (terminated) {
    if (why == StopWhy::kScheduler) t.reason = trial::Reason::kStopped;
    finish(t, Status::kTerminated, "");
    return;
  }
  if (why == StopWhy::kPause) {  // whatever its exit code: the driver ended it
    paused(t);
    return;
  }
  if (why == StopWhy::kResync) {  // a step-mode attempt found after a crash: restart it
    set_pending(t);
    return;
  }
  if (interrupted) {
    if (info.reason == "orphaned" || info.reason == "host_lost")
      spdlog::warn("trial {}: {}; it resumes from its latest checkpoint", t.name,
                   info.reason == "orphaned"
                       ? "its supervisor stopped it while the driver was silent (stopped or "
                         "suspended past orphan_timeout_s)"
                       : info.error);
    if (info.restart_from) rewind_checkpoints(t, *info.restart_from);
    interrupt(t);
    return;
  }
  std::string why_text = describe_exit(info);
  if (info.reason != "exec_failed") {
    std::string tail = util::last_line(trial_dir(t) / "stderr.log");
    if (!tail.empty() && tail.find("tune-supervisor:") == std::string::npos &&
        !exec::is_attempt_marker(tail))  // the attempt wrote nothing there
      why_text += ": " + tail;
  }
  t.failures += 1;
  int max = exp_.failure.max_failures;
  bool retry = info.reason != "exec_failed" && !stopping_ && (max < 0 || t.failures <= max);
  if (retry) {
    schedule_retry(t, why_text);
    return;
  }
  finish(t, Status::kError, why_text);
  if (exp_.failure.fail_fast && !stopping_) {
    spdlog::error("fail_fast: stopping the experiment after the first error");
    stopping_ = true;
    stop_all(StopWhy::kFailFast, false);
  }
}

void Controller::interrupt(trial::Trial& t) {
  set_pending(t);
  t.reason = trial::Reason::kInterrupted;
  mark_dirty();
}

void Controller::schedule_retry(trial::Trial& t, const std::string& why_text) {
  int max = exp_.failure.max_failures;
  t.fail_streak += 1;
  // Exponential back-off between attempts that fail without reporting anything: 0.25 s, 0.5 s,
  // 1 s, ... capped at a minute, so a script that dies at once cannot spin the driver.
  double delay = std::min(kMaxRetryDelay,
                          opts_.retry_backoff_s * std::pow(2.0, std::min(t.fail_streak - 1, 16)));
  // The same failure again and again is logged at its 1st, 2nd, 4th, 8th... occurrence.
  bool same = t.last_failure == why_text;
  t.last_failure = why_text;
  int repeats = same ? t.fail_streak : 1;
  std::string of = max < 0 ? std::string("unlimited") : std::to_string(max);
  if (!same || (repeats & (repeats - 1)) == 0) {
    if (repeats > 1)
      spdlog::warn("trial {} failed again ({}), {} times in a row; retrying in {} s ({} of {})",
                   t.name, why_text, repeats, util::format_double(delay), t.failures, of);
    else
      spdlog::warn("trial {} failed ({}); retrying in {} s ({} of {})", t.name, why_text,
                   util::format_double(delay), t.failures, of);
  } else {
    spdlog::debug("trial {} failed again ({}); retrying in {} s", t.name, why_text,
                  util::format_double(delay));
  }
  set_pending(t);
  retry_at_[t.index] = ex_.now() + delay;
  t.error = why_text;
  mark_dirty();
}

void Controller::flush_result_logs(double now) {
  for (auto& [id, rt] : running_) {
    if (auto r = rt.log.flush(); !r && now >= rt.next_write_warning) {
      spdlog::warn("trial {}: {} (retrying; logged at most every 30 s)", trial(id).name,
                   r.error().message);
      rt.next_write_warning = now + 30;
    }
  }
}

bool Controller::maybe_save_state(bool force, bool durable) {
  double now = ex_.now();
  if (!force && (!state_dirty_ || now < next_state_write_)) return true;
  // Rows first: a state that counts an iteration whose row is still in a buffer would, after a
  // crash, resume with that row missing from result.json.
  flush_result_logs(now);
  state_.elapsed_s = elapsed_before_ + (now - run_started_);
  // Checkpoints are deleted right after this write: it must survive a power loss too, or an
  // older state could name them.
  durable = durable || !pending_deletions_.empty();
  append_scheduler_log(durable);  // first: the state then counts what the log holds
  state_.scheduler = sched_->save();
  searcher_->prepare_save();  // a snapshot for a later write: this one names the last acked
  state_.search_alg = searcher_->save();
  double t0 = ex_.now();
  auto r = writer_.save(exp_.dir(), state_, durable);
  double cost = ex_.now() - t0;
  last_write_cost_ = cost;
  if (!r) {
    check_experiment_dir(now);
    if (lost_) return false;  // said once, by check_experiment_dir
    // Said at once, then at most every 30 s while it lasts (a full disk stays full for a while).
    if (!last_write_failed_ || now >= next_write_error_ || force)
      spdlog::error("cannot save experiment state: {} (the previous state is intact{})",
                    r.error().message, last_write_failed_ ? "; still failing" : "");
    if (!last_write_failed_ || now >= next_write_error_) next_write_error_ = now + 30;
    next_state_write_ = now + 1;
    last_write_failed_ = true;
    return false;
  }
  if (last_write_failed_) spdlog::warn("experiment state saved again");
  state_dirty_ = false;
  last_write_failed_ = false;
  searcher_->state_written();
  if (auto j = journal_.reset(); !j) spdlog::warn("{}", j.error().message);
  // At most ~5% of wall time goes to state writes, unless a fixed period is set.
  double period = opts_.state_period_s ? *opts_.state_period_s : std::max(0.5, 20 * cost);
  next_state_write_ = now + period;
  run_deletions();
  if (opts_.uploader) opts_.uploader->request(false);
  return true;
}

void Controller::final_upload() {
  auto* up = opts_.uploader;
  if (!up) return;
  if (interrupts_ >= 2) {
    up->cancel();
    spdlog::warn("not mirrored to {} (interrupted twice); the next run mirrors it", up->target());
    return;
  }
  // Whatever runs now may predate the last state: wait for it, then mirror once more.
  spdlog::info("mirroring the experiment to {}", up->target());
  bool asked = false;
  while (true) {
    bool busy = up->poll();
    if (!busy && asked) break;
    if (!busy) {
      up->request(true);
      asked = true;
      continue;
    }
    for (auto& ev : ex_.wait(0.1)) {
      if (std::holds_alternative<exec::InterruptEvent>(ev)) {
        up->cancel();
        spdlog::warn("mirror to {} cancelled; the next run mirrors it", up->target());
        return;
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
    state_ = std::move(*resume);
    elapsed_before_ = state_.elapsed_s;
    if (auto r = searcher_->restore(state_.search_alg);
        !r && exp_.search_alg.kind != search::SearcherKind::kRandom)
      throw Fatal(exp_.dir().string() + "/" + state::kStateFile + ": " + r.error().message +
                  ": it cannot be resumed");
    if (auto r = restore_scheduler_log(); !r)
      throw Fatal(r.error().message + ": it cannot be resumed");
    if (auto r = sched_->restore(state_.scheduler);
        !r && exp_.scheduler.kind != spec::SchedulerKind::kFifo)
      throw Fatal(exp_.dir().string() + "/" + state::kStateFile + ": " + r.error().message +
                  ": it cannot be resumed");
    std::sort(state_.trials.begin(), state_.trials.end(),
              [](const auto& a, const auto& b) { return a.index < b.index; });
    for (size_t i = 0; i < state_.trials.size(); ++i)
      if (state_.trials[i].index != i || state_.next_index < state_.trials.size() ||
          state_.next_index > state_.total_trials)
        throw Fatal("experiment state of '" + exp_.name +
                    "' is inconsistent (trial indexes are not 0.." +
                    std::to_string(state_.trials.size() - 1) + "): it cannot be resumed");
    for (size_t i = 0; i < state_.trials.size(); ++i) index_[state_.trials[i].id] = i;
    trim_policy_log();  // before any exploit is carried out again
    // Trials only the journal knows (created after the last full state write) join the
    // scheduler again, in creation order, as they did before the crash.
    for (const auto& t : state_.trials)
      if (!t.finished()) sched_->on_trial_add(t.id, t.index);
    for (auto& t : state_.trials) {
      // Attempts that outlived the crashed driver are re-attached; other trials that did not
      // end go back to the queue and restart from their latest checkpoint.
      if (t.status == Status::kRunning)
        resume_running(t);
      else if (t.status == Status::kPending)
        set_pending(t);
      else if (t.status == Status::kPaused) {
        if (!t.pending_exploit.is_null()) carry_out_exploit(t);
        (sched_->may_resume(t.id) ? pending_ : paused_).insert(t.index);
      }
    }
    end_strays();
    fetch_all_remote_only();
  } else {
    state_.name = exp_.name;
    state_.seed = exp_.seed.value_or(0);
    state_.total_trials = search::trial_count(exp_.space, exp_.num_samples);
    state_.start_time = ex_.wall_time();
  }
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
  double woke = ex_.now();
  while (true) {
    double now = ex_.now();
    check_deadlines(now);
    launch_ready();
    pool_.sync_ledger();  // what ended this turn and was not started again
    bool more = !stopping_ && (state_.next_index < state_.total_trials || !pending_.empty());
    if (running_.empty() && !more && !stopping_ && !paused_.empty()) {
      release_stuck_paused();
      continue;
    }
    if (running_.empty() && !more) break;
    if (interrupts_ >= 2 || lost_) break;
    double timeout = wait_timeout(now);
    longest_stall_ = std::max(longest_stall_, ex_.now() - woke);
    double slept_from = ex_.now(), wall_from = ex_.wall_time();
    auto events = ex_.wait(timeout);
    woke = ex_.now();
    longest_overrun_ = std::max(longest_overrun_, woke - slept_from - timeout);
    notice_gap(std::max(woke - slept_from, ex_.wall_time() - wall_from) - timeout);
    for (auto& ev : events) dispatch(ev);
    note_job_ids();
    poll_searcher();
    on_file_jobs_done();
    send_decided_stops();
    now = ex_.now();
    flush_result_logs(now);
    if (now >= next_lease_) {
      ex_.renew_lease();
      next_lease_ = now + lease_period_;
    }
    if (now >= next_dir_check_) {
      check_experiment_dir(now);
      if (!lost_) check_stop_requests();
    }
    if (!lost_) maybe_save_state(false, false);
    if (opts_.uploader) opts_.uploader->poll();
    // The periodic report.html: built off the loop, from the files on disk.
    if (opts_.reporter)
      if (auto e = opts_.reporter->poll(now); !e.empty()) spdlog::warn("{}", e);
    draw(false);
  }
  if (lost_) lost_exit();
  // Ctrl-C twice: trials still running were killed; they resume from their latest checkpoint.
  for (auto& [id, rt] : running_) {
    rt.log.close();
    interrupt(trial(id));
  }
  state_.phase = interrupted_ || searcher_failed_ ? "interrupted" : "finished";
  finish_file_work();
  if (!searcher_failed_ && interrupts_ < 2) {
    searcher_->finish();  // its last snapshot, for the final state
    poll_searcher();
  }
  maybe_save_state(true, true);
  finish_file_work();  // the deletions that write allowed
  final_upload();
  if (observer_) observer_->on_run_end({ex_.now(), state_, exp_});
  spdlog::info("longest loop stall: {:.0f} ms, longest wait past its timeout: {:.0f} ms",
               longest_stall_ * 1000, longest_overrun_ * 1000);
  if (!fatal_.empty()) throw Fatal(fatal_, kExitTrialError);
  if (searcher_failed_)
    throw Fatal(*searcher_failed_ + " (state saved; --resume continues)", kExitTrialError);
  return exit_code();
}

double Controller::wait_timeout(double now) const {
  // Sleep until something happens or the next timer is due.
  double timeout = 1.0;
  if (state_dirty_) timeout = std::min(timeout, std::max(0.0, next_state_write_ - now));
  for (const auto& [id, rt] : running_)
    if (rt.kill_deadline >= 0) timeout = std::min(timeout, std::max(0.0, rt.kill_deadline - now));
  if (exp_.time_budget_s && !budget_spent_)
    timeout = std::min(timeout,
                       std::max(0.0, *exp_.time_budget_s - elapsed_before_ - (now - run_started_)));
  if (!decided_stops_.empty())
    timeout = std::min(timeout, std::max(0.0, next_decision_write_ - now));
  if (observer_) timeout = std::min(timeout, observer_->seconds_until_due(now));
  for (const auto& [at, when] : retry_at_) timeout = std::min(timeout, std::max(0.0, when - now));
  if (worker_.outstanding() > 0) timeout = std::min(timeout, 0.05);  // collect finished copies
  if (searcher_->busy()) timeout = std::min(timeout, 0.02);          // collect its answer
  return timeout;
}

void Controller::dispatch(exec::Event& ev) {
  if (std::holds_alternative<exec::InterruptEvent>(ev)) {
    on_interrupt();
  } else if (auto* o = std::get_if<exec::OutputEvent>(&ev)) {
    on_output(*o);
  } else if (auto* x = std::get_if<exec::ExitEvent>(&ev)) {
    on_exit(x->trial_id, x->info);
  } else if (auto* h = std::get_if<exec::HostEvent>(&ev)) {
    pool_.set_available(h->host, h->up);
    state_.hosts[h->host] = h->up ? "up" : "unreachable";
    mark_dirty();
    if (!pool_.any_available())
      spdlog::warn("every host is unreachable: waiting for one to come back (Ctrl-C stops)");
    draw(true);
  }
}

void Controller::notice_gap(double overslept) {
  // The loop slept far longer than it asked to: the driver was stopped (SIGSTOP, Ctrl-Z) or
  // the machine suspended. Leases were not renewed meanwhile; renew them now, before anything
  // else, so supervisors that have not given up yet keep their trials. Trials whose
  // supervisors did give up report reason "orphaned" and are re-queued, not failed.
  if (overslept < std::max(2.0, lease_period_)) return;
  spdlog::warn(
      "the driver did not run for {:.0f} s (stopped or suspended): renewing leases; "
      "trials stopped meanwhile resume from their latest checkpoint",
      overslept);
  ex_.renew_lease();
  next_lease_ = ex_.now() + lease_period_;
}

void Controller::check_experiment_dir(double now) {
  next_dir_check_ = now + 1;
  struct stat st {};
  bool gone = ::stat(exp_.dir().c_str(), &st) != 0;
  if (!gone && dir_identity_.first == 0 && dir_identity_.second == 0) {
    dir_identity_ = {st.st_dev, st.st_ino};
    return;
  }
  if (!gone && st.st_dev == dir_identity_.first && st.st_ino == dir_identity_.second) return;
  lost_ = true;
  stopping_ = true;
  // Said once, as the run's one-line error (lost_exit); its tune.log went with the dir.
  spdlog::debug("the experiment dir '{}' was {} while the driver ran: stopping its trials",
                exp_.dir().string(), gone ? "deleted" : "replaced");
  for (auto& [id, rt] : running_)
    if (!rt.deferred_exit) ex_.stop(id, true);
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
