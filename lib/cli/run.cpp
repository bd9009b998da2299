// `tune run` and `tune validate`.
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/restore_from.hpp"
#include "cli/run_slurm.hpp"
#include "control/callbacks.hpp"
#include "control/controller.hpp"
#include "exec/exit_record.hpp"
#include "exec/local_executor.hpp"
#include "exec/multi_executor.hpp"
#include "report/refresher.hpp"
#include "search/space.hpp"
#include "search/space_json.hpp"
#include "spec/parse.hpp"
#include "sync/upload.hpp"
#include "sync/workdir.hpp"
#include "ui/live_table.hpp"
#include "ui/progress_bar.hpp"
#include "ui/terminal.hpp"
#include "util/atomic_file.hpp"
#include "util/fs.hpp"
#include "util/json_ext.hpp"
#include "util/strings.hpp"

extern char** environ;

namespace tune::cli {

namespace {

spec::Experiment load_or_throw(const std::string& file, const spec::Overrides& ov) {
  auto e = spec::load_experiment(file, ov);
  if (!e) throw Fatal(e.error(), kExitUsage);
  for (const auto& w : e->warnings) std::cerr << "tune: warning: " << w << "\n";
  return std::move(*e);
}

// This process's environment, for the trials on this machine. A variable that is not valid
// UTF-8 (a Latin-1 path in the user's shell) cannot go to the agent, whose requests are JSON:
// it is left out with a warning naming it, rather than failing every trial.
std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  std::string left_out;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    if (util::invalid_utf8_at(kv) != std::string_view::npos) {
      std::string name = util::printable(kv.substr(0, eq), 60);
      left_out += (left_out.empty() ? "" : ", ") + name;
      continue;
    }
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  if (!left_out.empty())
    spdlog::warn("not passed to trials: environment variable(s) {} (not valid UTF-8)", left_out);
  return env;
}

std::optional<double> env_seconds(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end || !(d >= 0))
    throw Fatal(std::string(name) + ": expected seconds, got '" + v + "'");
  return d;
}

// The experiment file as run, with the command-line overrides noted for the record.
std::string snapshot_text(const spec::Experiment& exp, const std::vector<std::string>& sets) {
  std::string text = util::read_file(exp.source_file, 16u << 20).value_or("");
  if (!sets.empty()) {
    text += "\n# tune run overrides:\n";
    for (const auto& s : sets) text += "#   --set " + util::printable(s, 500) + "\n";
  }
  return text;
}

}  // namespace

void RunCommand::add_options(CLI::App& app) {
  app.add_option("experiment", file_, "experiment YAML file")->required();
  app.add_option("--resume", resume_,
                 "never (default) | auto | must | errored | auto+errored | restart-errored "
                 "(any case; Ray's spellings with '_' too)")
      ->transform([](std::string v) {
        for (auto& c : v) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
        return v;
      })
      ->check(
          CLI::IsMember({"never", "auto", "must", "errored", "auto+errored", "restart-errored"}));
  app.add_option("--restore-from", restore_from_,
                 "copy the experiment in DIR (or an upload_dir mirror URI/NAME) to this run's "
                 "dir (use --name NEW) and resume it there");
  app.add_option("--name", name_, "experiment name (default: the file's name or its 'name')");
  app.add_option("--storage-path", storage_, "root of experiment dirs (default ~/tune_results)");
  app.add_option("--set", sets_, "override a value: --set checkpoint_config.num_to_keep=3");
  app.add_option("--max-concurrent", max_concurrent_, "at most N trials at once");
  app.add_option("--columns", columns_,
                 "live table columns: result keys and config/PATH, comma-separated "
                 "(replaces progress_reporter's metric_columns and parameter_columns)");
  auto* q = app.add_flag("--quiet,-q", quiet_, "print only errors and the final summary");
  app.add_flag("--verbose,-v", verbose_, "log more, with times and pids")->excludes(q);
}

void RunCommand::find_mirrored_state(const spec::Experiment& exp, const fs::path& dir,
                                     bool& has_state) const {
  std::error_code ec;
  auto there = sync::Uploader::remote_has_state(dir, exp.name, exp.sync);
  if (!there)
    throw Fatal(there.error().message + " (nothing was started: a new run would overwrite it)");
  std::string remote = *exp.sync.upload_dir + "/" + exp.name;
  if (!there->has_value()) {
    // A custom upload_syncer cannot be asked: a resume tries to download, a fresh run starts.
    if (resume_ == "never") return;
  } else {
    if (**there && resume_ == "never")
      throw Fatal("upload_dir '" + remote +
                  "' already holds this experiment; resume it with --resume=auto, or start a "
                  "new one with --name NAME");
    if (!**there) return;
  }
  std::cerr << "tune: downloading experiment '" << exp.name << "' from " << remote << "\n";
  if (auto r = sync::Uploader::download(dir, exp.name, exp.sync); !r)
    throw Fatal(r.error().message +
                (there->has_value() ? "" : " (a new experiment: run it without --resume)"));
  has_state = fs::exists(dir / state::kStateFile, ec);
  if (!has_state) throw Fatal("downloaded '" + remote + "' but it holds no " + state::kStateFile);
}

int RunCommand::execute() {
  timespec started{};
  ::clock_gettime(CLOCK_MONOTONIC, &started);
  spec::Overrides ov{sets_, name_, storage_, max_concurrent_};
  std::optional<std::vector<std::string>> columns;
  if (columns_) {
    auto parsed = ui::parse_columns_flag(*columns_);
    if (auto* err = std::get_if<std::string>(&parsed)) throw Fatal(*err, kExitUsage);
    columns = std::get<std::vector<std::string>>(std::move(parsed));
  }
  spec::Experiment exp = load_or_throw(file_, ov);
  std::vector<exec::SshHostConfig> ssh_hosts;
  for (const auto& h : exp.hosts) {
    if (h.kind != spec::HostSpec::Kind::kSsh) continue;
    exec::SshHostConfig c;
    c.name = h.port == 22 ? h.host : h.host + ":" + std::to_string(h.port);
    c.host = h.host;
    c.user = h.user;
    c.port = h.port;
    c.identity_file = h.identity_file;
    c.known_hosts = h.known_hosts_file;
    c.storage_path = h.storage_path;
    c.cpus = h.cpus;
    c.gpus = h.gpus;
    ssh_hosts.push_back(std::move(c));
  }

  fs::path dir = exp.dir();
  std::error_code ec;
  bool has_state = fs::exists(dir / state::kStateFile, ec);
  bool restart_errored = resume_ == "restart-errored";
  bool errored = resume_ == "errored" || resume_ == "auto+errored" || restart_errored;
  bool must = resume_ == "must" || resume_ == "errored" || restart_errored;
  if (resume_ == "never" && has_state)
    throw Fatal("experiment dir '" + dir.string() +
                "' already holds an experiment; resume it with "
                "--resume=auto, or start a new one with --name NAME or --storage-path DIR");
  bool mirrored = exp.sync.upload_dir.has_value();
  if (auto r = sync::Uploader::check(dir, exp.name, exp.sync); !r)
    throw Fatal(exp.source_file.string() + ": " + r.error().message);
  if (must && !has_state && !mirrored)
    throw Fatal("--resume=" + resume_ + ": no experiment state in '" + dir.string() +
                "' to resume");

  bool created = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw Fatal("cannot create experiment dir '" + dir.string() + "': " + ec.message());
  acquire_lock(dir);
  if (restore_from_) {  // a copy of a quiet experiment, resumed here under this name
    if (has_state)
      throw Fatal("--restore-from: '" + dir.string() +
                  "' already holds an experiment; give the copy a new --name");
    try {
      restore_from(*restore_from_, dir, exp.sync, ui::stderr_can_redraw() && !quiet_);
    } catch (const Fatal&) {
      if (created) fs::remove_all(dir, ec);
      throw;
    }
    has_state = true;
  }
  // A copy made here that this run then refuses (a changed param_space, say) is removed, so
  // that the same command, corrected, can make it again.
  struct UndoCopy {
    fs::path dir;
    bool armed;
    ~UndoCopy() {
      std::error_code ec;
      if (armed && std::uncaught_exceptions() > 0) fs::remove_all(dir, ec);
    }
  } undo_copy{dir, restore_from_ && created};

  // No local state but an upload_dir: the mirror may hold the experiment. A
  // fresh start would mirror over it (with --delete), so it is never done blindly.
  if (!has_state && mirrored) try {
      find_mirrored_state(exp, dir, has_state);
    } catch (const Fatal&) {
      if (created) fs::remove_all(dir, ec);  // made a moment ago: leave nothing behind
      throw;
    }
  if (must && !has_state)
    throw Fatal("--resume=" + resume_ + ": no experiment state in '" + dir.string() +
                "' or its upload_dir to resume");

  // The spec as run, to refuse a resume under a different one.
  fs::path spec_file = dir / ".tune" / "spec.json";
  std::vector<std::string> changed;
  if (has_state) {
    if (auto text = util::read_file(spec_file, 64u << 20)) {
      auto before = util::parse_json_ext(*text);
      if (before.is_discarded())
        throw Fatal(spec_file.string() +
                    ": not valid JSON (torn or corrupt); cannot check the experiment file");
      if (auto key = spec::forbidden_change(before, exp.effective))
        throw Fatal(
            "experiment '" + exp.name + "' was started with a different '" + *key +
            "'; on resume only stop, time_budget_s, max_concurrent_trials, checkpoint retention, "
            "sync_config and timeouts may change (start a new experiment with --name NAME)");
      changed = spec::changed_keys(before, exp.effective);
    } else if (fs::exists(spec_file, ec)) {
      throw Fatal(text.error());
    }
  }

  std::optional<state::ExperimentState> resume;
  if (has_state) {
    // A bar on a terminal while a big state loads (seconds at 100,000 trials).
    ui::StagedProgress bar(ui::stderr_can_redraw() && !quiet_);
    auto s = state::load(dir, [&](state::LoadStage stage, size_t done, size_t total) {
      bar.update(state::load_stage_label(stage), done, total);
    });
    bar.finish();
    if (!s) throw Fatal(s.error().message + " (the experiment cannot be resumed from it)");
    // A trial dir replaced by a symlink: resuming would write, and clean up, where it points.
    for (const auto& t : s->trials) {
      std::error_code ec;
      if (fs::path td = dir / t.name; fs::is_symlink(fs::symlink_status(td, ec)))
        throw Fatal("'" + td.string() +
                    "' is a symbolic link: a trial dir is never written or cleaned through "
                    "one; put the directory itself there to resume");
    }
    if (s->total_trials != search::trial_count(exp.space, exp.num_samples) ||
        (exp.seed && s->seed != *exp.seed))
      throw Fatal("experiment '" + exp.name +
                  "': the search space or seed differs from the run being "
                  "resumed; start a new experiment with --name NAME");
    if (errored) {
      for (auto& t : s->trials) {
        if (t.status != trial::Status::kError) continue;
        t.status = trial::Status::kPending, t.failures = 0;
        // From scratch: no checkpoint to restore (their dirs are removed as strays).
        if (restart_errored) t.checkpoints.clear();
      }
    }
    resume = std::move(*s);
  }
  undo_copy.armed = false;
  if (!exp.seed) {
    // No seed: draw one, and keep it in the state so a resume continues the same sequence.
    exp.seed = resume ? resume->seed
                      : (static_cast<uint64_t>(::getpid()) << 32) ^
                            static_cast<uint64_t>(::time(nullptr)) ^
                            static_cast<uint64_t>(std::random_device{}());
  }
  if (auto r = util::write_file_atomic(dir / "experiment.yaml", snapshot_text(exp, sets_), true);
      !r)
    throw Fatal(r.error());
  if (auto r = util::write_file_atomic(spec_file, exp.effective.dump(1) + "\n", true); !r)
    throw Fatal(r.error());
  // How this run was started, so that `tune status` can print the command that resumes it.
  nlohmann::json started_as = {{"experiment_file", exp.source_file.string()}, {"set", sets_}};
  if (auto r = util::write_file_atomic(
          dir / ".tune" / kStartedAsFile,
          started_as.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", false);
      !r)
    spdlog::warn("{}", r.error().message);

  auto table_opts = ui::detect_table_options(quiet_, exp.progress_reporter.max_report_frequency);
  table_opts.columns = std::move(columns);
  ui::LiveTable table(table_opts);
  setup_logging(dir, quiet_, verbose_, &table, table_opts.color);
  if (verbose_) {
    std::string argv_text;
    for (const auto& w : exp.trial.command) argv_text += " " + util::shell_quote(w);
    spdlog::debug("trial command:{}", argv_text);
  }
  spdlog::info("tune run {} -> {}{}", exp.source_file.string(), dir.string(),
               resume ? " (resuming)" : "");
  for (const auto& key : changed)
    spdlog::warn("resuming with a changed '{}' (the new value applies)", key);

  auto agent = exec::find_agent();
  if (!agent) throw Fatal(agent.error());
  exec::LocalOptions lo;
  lo.agent = *agent;
  lo.attempt_log = dir / exec::kAttemptLog;
  // (a FIFO there would block every open of it; a symlink would have the agent append attempt
  // records, nonces included, wherever it points)
  for (fs::path f : {lo.attempt_log, fs::path(lo.attempt_log.string() + ".agent-lock")}) {
    std::error_code ec;
    auto st = fs::symlink_status(f, ec);
    if (!ec && st.type() != fs::file_type::regular)
      throw Fatal("'" + f.string() + "' is not a regular file: move it away to run or resume");
  }
  // An agent an earlier driver left (it ends once it has launched what it was asked for): what
  // it launches must be in the log before this driver reads it, and two never run at once.
  if (auto w = exec::wait_for_agent(lo.attempt_log, env_seconds("TUNE_AGENT_WAIT_S").value_or(10));
      !w)
    throw Fatal(w.error());
  lo.agent_waited_for = true;
  lo.lease_file = dir / ".tune" / "lease";
  lo.orphan_timeout_s = exp.orphan_timeout_s;
  lo.grace_s = env_seconds("TUNE_STOP_GRACE_S").value_or(10);
  auto key = exec::load_record_key(dir / ".tune" / "supervisor.key");
  if (!key) throw Fatal(key.error());
  lo.record_key = *key;
  exec::LocalExecutor executor(lo);

  std::optional<sync::Uploader> uploader;
  if (mirrored) uploader.emplace(dir, exp.name, exp.sync);

  control::ControllerOptions co;
  // SSH hosts: connected now, so that their capacity is known; a host that cannot be used is
  // left out with a message, and the run goes on with the others.
  std::optional<exec::SshExecutor> ssh;
  std::optional<exec::SlurmExecutor> slurm;
  std::optional<exec::MultiExecutor> multi;
  exec::Executor* ex = &executor;
  if (auto h = start_slurm(exp, dir, lo, slurm)) {
    co.hosts = control::local_hosts(exp);
    co.hosts.push_back(std::move(*h));
    multi.emplace(executor, nullptr, &*slurm);
    ex = &*multi;
  }
  if (!ssh_hosts.empty()) {
    auto supervisor = exec::find_supervisor();
    if (!supervisor) throw Fatal(supervisor.error());
    exec::SshOptions so;
    so.supervisor = *supervisor;
    auto agent = exec::find_agent();
    if (!agent) throw Fatal(agent.error());
    so.agent = *agent;
    so.python_helper = fs::path(python_helpers_dir()) / "tune_trial.py";
    so.exp_name = exp.name;
    so.head_exp_dir = dir;
    so.orphan_timeout_s = exp.orphan_timeout_s;
    so.grace_s = lo.grace_s;
    so.host_timeout_s = exp.host_timeout_s;
    so.sync_period = exp.sync.sync_period;
    so.sync_timeout = exp.sync.sync_timeout;
    so.sync_on_checkpoint = exp.sync.sync_on_checkpoint;
    so.syncer = exp.sync.syncer;
    so.record_key = lo.record_key;
    if (exp.trial.sync_workdir) {  // too big to copy: a config error, before anything runs
      std::vector<sync::HostStorage> stores;
      for (const auto& h : ssh_hosts) stores.push_back({h.name, h.storage_path});
      auto plan = sync::plan_workdir(exp.trial.workdir, dir.parent_path(), stores, exp.name);
      if (!plan) throw Fatal(plan.error().message);
      if (plan->bytes > sync::kWarnWorkdirBytes)
        spdlog::warn(
            "trial.sync_workdir: {:.0f} MB of {} go to each SSH host (point trial.workdir at the "
            "code, or set trial.sync_workdir: false)",
            static_cast<double>(plan->bytes) / 1e6, exp.trial.workdir.string());
      so.workdir = std::move(*plan);
    }
    ssh.emplace(so);
    co.hosts = control::local_hosts(exp);
    for (const auto& info : ssh->connect(ssh_hosts)) {
      control::ResourcePool::Host h;
      h.name = info.name;
      h.cpus = h.cpu_free = info.cpus;
      h.gpu_free.assign(static_cast<size_t>(info.gpus), 1.0);
      h.remote = true;
      h.remote_exp_dir = info.exp_dir;
      h.remote_helpers_dir = info.helpers_dir;
      co.hosts.push_back(std::move(h));
    }
    if (co.hosts.empty()) throw Fatal("no host of '" + exp.name + "' can be used (see above)");
    multi.emplace(executor, *ssh);
    ex = &*multi;
  }
  if (co.hosts.empty()) co.hosts = control::local_hosts(exp);
  // This machine is shared with this user's other experiments through the host-wide ledger.
  for (auto& h : co.hosts) {
    if (h.remote) continue;
    auto ledger = control::Ledger::open(control::Ledger::default_dir(), dir);
    if (ledger)
      h.ledger = std::move(*ledger);
    else
      spdlog::warn("{} (sharing this machine with other experiments is off)",
                   ledger.error().message);
    break;
  }
  if (auto note =
          control::concurrency_note(co.hosts, exp.trial.resources, exp.max_concurrent_trials);
      !note.empty()) {
    spdlog::info("{}", note);
    table.set_note(note);
  }
  if (exp.trial.restore_from) {  // warm start: one copy, made once, that trials read
    fs::path copy = dir / ".tune" / "restore_from";
    if (!fs::exists(copy, ec)) {
      fs::path tmp = dir / ".tune" / "restore_from.partial";
      fs::remove_all(tmp, ec);
      copy_tree(*exp.trial.restore_from, tmp,
                ui::stderr_can_redraw() && !quiet_ ? "copying restore_from" : "");
      fs::rename(tmp, copy, ec);
      if (ec) throw Fatal("cannot create '" + copy.string() + "': " + ec.message());
    }
    co.warm_start = copy;
  }
  co.uploader = uploader ? &*uploader : nullptr;
  report::Refresher reporter(dir, exp.report_period_s);
  if (exp.report_period_s > 0) co.reporter = &reporter;
  co.grace_s = lo.grace_s;
  co.process_started = static_cast<double>(started.tv_sec) + started.tv_nsec / 1e9;
  co.state_period_s = env_seconds("TUNE_GLOBAL_CHECKPOINT_S");
  co.base_env = environment();
  co.python_helpers_dir = python_helpers_dir();
  // A bar on a terminal while a resume pulls checkpoints from SSH hosts.
  ui::StagedProgress fetch_bar(ui::stderr_can_redraw() && !quiet_);
  co.fetch_progress = [&](size_t done, size_t total) {
    fetch_bar.update("pulling checkpoints", done, total);
    if (done == total) fetch_bar.finish();
  };
  // callbacks: their worker threads start after the executor blocked the loop's signals.
  control::CallbackOptions cbo;
  cbo.log_dir = dir / ".tune" / "callbacks";
  std::optional<control::CallbackRunner> callbacks;
  if (!exp.callbacks.empty()) callbacks.emplace(exp, cbo);
  std::vector<control::RunObserver*> watching{&table};
  if (callbacks) watching.push_back(&*callbacks);
  control::ObserverList observers(std::move(watching));
  control::Controller controller(exp, *ex, co, &observers);
  int code = kExitOk;
  try {
    code = controller.run(std::move(resume));
    // The events still queued get their calls (a Ctrl-C gives them a few seconds only).
    if (callbacks) callbacks->finish(code == kExitInterrupted ? 5 : cbo.call_timeout_s + 5);
  } catch (const Fatal&) {
    if (callbacks) callbacks->finish(5);
    throw;
  } catch (const std::exception& e) {
    // Not a refusal but a failure while running: keep what the run got so far resumable.
    auto saved = state::save(dir, controller.state(), true);
    throw Fatal(std::string("internal error while running: ") + e.what() +
                    (saved ? "; the state was saved: resume with: " + resume_command(dir)
                           : "; the state could not be saved: " + saved.error().message),
                kExitTrialError);
  }
  // The last report, of the final state (not after Ctrl-C: the user asked to stop now).
  if (co.reporter && code != kExitInterrupted) {
    // A bar on a terminal while it reads the trials (seconds for a big experiment).
    ui::StagedProgress bar(ui::stderr_can_redraw() && !quiet_);
    auto e = reporter.write_now(
        [&](size_t done, size_t total) { bar.update("writing report.html", done, total); });
    bar.finish();
    if (!e.empty()) spdlog::warn("{}", e);
  }
  std::cout << ui::final_summary(controller.state(), exp);
  if (code == kExitInterrupted)
    std::cout << "interrupted: resume with: " << resume_command(dir) << "\n";
  return code;
}

void ValidateCommand::add_options(CLI::App& app) {
  app.add_option("experiment", file_, "experiment YAML file")->required();
  app.add_option("--set", sets_, "override a value: --set num_samples=2");
  app.add_option("--name", name_, "experiment name");
  app.add_option("--storage-path", storage_, "root of experiment dirs");
  app.add_option("--format", format_, "table | json")->check(CLI::IsMember({"table", "json"}));
}

namespace {

// The configs known before the run: points_to_evaluate, then random search's draws; tpe's first
// n_startup_trials are those draws too, the rest depend on results; an external searcher's on
// nothing known in advance. `note` says which.
std::vector<search::TrialConfig> known_configs(const spec::Experiment& exp, uint64_t total,
                                               uint64_t listed, std::string& note) {
  uint64_t seed = exp.seed.value_or(0);
  const auto& sa = exp.search_alg;
  uint64_t points = sa.points_to_evaluate.size();
  uint64_t known = total;
  if (sa.kind == search::SearcherKind::kTpe) {
    known = std::min<uint64_t>(total, std::max<uint64_t>(points, sa.tpe.n_startup_trials));
    note = "tpe: the first " + std::to_string(known) +
           " trial(s) are known in advance (points_to_evaluate, then random draws until " +
           std::to_string(sa.tpe.n_startup_trials) + " trials have finished); the other " +
           std::to_string(total - known) + " are chosen from the results during the run";
  } else if (sa.kind == search::SearcherKind::kBohb) {
    // No budget can hold enough values for a model before that many trials were suggested.
    uint64_t min_points = search::Bohb::values_for_model(sa.bohb, exp.space.params.size());
    known = std::min<uint64_t>(total, std::max<uint64_t>(points, min_points));
    note = "bohb: the first " + std::to_string(known) +
           " trial(s) are known in advance (points_to_evaluate, then random draws); the other " +
           std::to_string(total - known) +
           " are random draws or chosen from the results at the scheduler's rungs during the run";
  } else if (sa.kind == search::SearcherKind::kExternal) {
    known = points;
    note = "external searcher: " + std::to_string(total - known) +
           " trial(s) are chosen by the searcher process during the run; nothing is known about "
           "them in advance" +
           (points ? " (the " + std::to_string(points) + " points_to_evaluate run first)" : "");
  }
  std::vector<search::TrialConfig> out;
  for (uint64_t i = 0; i < known && i < listed; ++i)
    out.push_back(i < points ? search::fill_point(exp.space, sa.points_to_evaluate[i], seed, i)
                             : search::generate(exp.space, seed, i));
  return out;
}

std::string trial_id_of(uint64_t i) {
  char id[32];
  std::snprintf(id, sizeof id, "%05llu", static_cast<unsigned long long>(i));
  return id;
}

}  // namespace

int ValidateCommand::execute() {
  spec::Overrides ov{sets_, name_, storage_, std::nullopt};
  spec::Experiment exp = load_or_throw(file_, ov);
  uint64_t total = search::trial_count(exp.space, exp.num_samples);
  constexpr uint64_t kMaxListed = 10000;
  std::string note;
  auto configs = known_configs(exp, total, kMaxListed, note);
  if (format_ == "json") {
    nlohmann::json out = {{"name", exp.name},
                          {"dir", exp.dir().string()},
                          {"total_trials", total},
                          {"seeded", exp.seed.has_value()},
                          {"search_alg", search::searcher_name(exp.search_alg.kind)},
                          {"trials", nlohmann::json::array()}};
    if (!note.empty()) out["note"] = note;
    for (uint64_t i = 0; i < configs.size(); ++i)
      out["trials"].push_back(
          {{"trial_id", trial_id_of(i)},
           {"trial_name", trial::make_trial_name(trial_id_of(i), configs[i].varying)},
           {"config", configs[i].config}});
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << "experiment '" << exp.name << "' is valid: " << total << " trial(s) ("
            << exp.num_samples << " sample(s) x " << total / exp.num_samples
            << " grid point(s)) -> " << exp.dir().string() << "\n";
  if (!note.empty()) std::cout << note << "\n";
  if (!exp.seed && !configs.empty())
    std::cout << "no seed: sampled values will differ on each run (shown with seed 0)\n";
  for (uint64_t i = 0; i < configs.size(); ++i)
    std::cout << trial_id_of(i) << "  "
              << trial::make_trial_name(trial_id_of(i), configs[i].varying) << "  "
              << configs[i].config.dump() << "\n";
  if (configs.size() == kMaxListed && total > kMaxListed)
    std::cout << "... " << total - kMaxListed << " more\n";
  return kExitOk;
}

}  // namespace tune::cli
