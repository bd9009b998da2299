// Launching trials: the next pending or new trial while slots and resources allow, its argv
// and environment, the write-ahead of a first attempt (a journal line) or of a restart (a
// full state write), and the start itself.
#include <spdlog/spdlog.h>

#include "control/controller.hpp"
#include "search/space.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

namespace tune::control {

using json = nlohmann::json;
using trial::Status;

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
  // Linux passes at most 128 KiB in one variable (MAX_ARG_STRLEN): a bigger config goes in
  // params.json only, which the helpers read when TUNE_CONFIG is not set.
  if (auto text = t.config.dump(-1, ' ', false, json::error_handler_t::replace);
      text.size() + sizeof("TUNE_CONFIG=") <= util::kMaxEnvString) {
    env["TUNE_CONFIG"] = std::move(text);
  } else {
    env.erase("TUNE_CONFIG");
    if (!warned_big_config_)
      spdlog::warn(
          "trial {}: its config takes {} KiB, more than one environment variable can hold: "
          "TUNE_CONFIG is not set, the config is in TUNE_CONFIG_FILE only",
          t.name, text.size() >> 10);
    warned_big_config_ = true;
  }
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
  l.params_json = t.config.dump(2) + "\n";  // (written again where an attempt changed it)
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
  double began = ex_.now();
  launch_more_ = false;
  // Trials waiting for a retry (or a resume) go first, then new ones from the searcher.
  while (running_.size() + restarts.size() < limit) {
    if (ex_.now() - began > kLaunchSlice) {  // the rest next turn, after this turn's events
      launch_more_ = true;
      break;
    }
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
  // state. If it cannot be written, nothing starts.
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

void Controller::set_pending(trial::Trial& t) {
  t.status = Status::kPending;
  // index == position in state_.trials: trials are created in index order and never removed
  pending_.insert(t.index);
  mark_dirty();
}

}  // namespace tune::control
