// `tune status`: the experiment read one trial line at a time, rows printed a chunk at a time
// (fitted to the terminal); what a dead driver left behind; what this user's experiments hold.
#include <algorithm>
#include <ctime>
#include <iostream>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "control/ledger.hpp"
#include "exec/local_executor.hpp"
#include "exec/slurm_executor.hpp"
#include "ui/summary.hpp"
#include "ui/terminal.hpp"
#include "ui/text.hpp"
#include "ui/trial_table.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::cli {

using json = nlohmann::json;

namespace {

json trial_summary_json(const trial::Trial& t) {
  json metrics = state::metrics_to_json(t);
  return {{"trial_id", t.id},
          {"trial_name", t.name},
          {"status", trial::status_name(t.status)},
          {"host", t.host},
          {"iteration", t.iteration},
          {"attempt", t.attempt},
          {"failures", t.failures},
          {"error", t.error},
          {"time_total_s", t.time_total_s},
          {"metrics", metrics},
          {"checkpoints", t.checkpoints.size()},
          {"config", t.config}};
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// What became of the RUNNING trials of an experiment whose driver is gone.
class Orphans {
 public:
  enum class Fate { kDetached, kInterrupted, kElsewhere };

  // Reads the experiment's live supervisors on this machine (only needed when the driver is
  // gone).
  Orphans(bool driver_gone, const fs::path& exp_dir) {
    if (driver_gone) supervisors_ = exec::live_supervisors(exp_dir);
  }
  // Classifies one RUNNING trial of the experiment.
  Fate classify(const trial::Trial& t) {
    if (t.host != util::host_name()) {
      elsewhere_.push_back(t.name + " (on " + t.host + ")");
      return Fate::kElsewhere;
    }
    auto key = t.name + '\0' + std::to_string(t.attempt);
    if (auto it = supervisors_.find(key); it != supervisors_.end()) {
      detached_.push_back(t.name + " (supervisor pid " + std::to_string(it->second) + ")");
      detached_names_.push_back(t.name);
      return Fate::kDetached;
    }
    interrupted_.push_back(t.name);
    return Fate::kInterrupted;
  }
  static const char* name(Fate f) {
    return f == Fate::kDetached ? "detached" : f == Fate::kInterrupted ? "interrupted" : "unknown";
  }
  // The lines after the table.
  [[nodiscard]] std::string text(const fs::path& dir) const {
    std::string out;
    if (!detached_.empty())
      out += "still running detached (their supervisor is alive; a resume re-attaches them): " +
             join(detached_) + "\n";
    if (!interrupted_.empty())
      out +=
          "interrupted (no longer running; a resume reads how they ended, or continues them "
          "from their latest checkpoint): " +
          join(interrupted_) + "\n";
    if (!elsewhere_.empty())
      out += "on other hosts (not checked from here): " + join(elsewhere_) + "\n";
    return out + "resume with: " + resume_command(dir) + "\n";
  }
  void add_json(json& out, const fs::path& dir) const {
    out["detached"] = detached_names_;
    out["interrupted"] = interrupted_;
    out["resume_command"] = resume_command(dir);
  }

 private:
  std::unordered_map<std::string, pid_t> supervisors_;  // "trial_name\0attempt"
  std::vector<std::string> detached_, detached_names_, interrupted_, elsewhere_;
};

double wall_now() {
  return static_cast<double>(std::time(nullptr));
}

// Who holds what on this machine (the host-wide ledger of this user's experiments).
std::string holders_text(const fs::path& dir, const std::vector<control::LedgerEntry>& live) {
  std::string out;
  std::error_code ec;
  auto here = fs::weakly_canonical(dir, ec);
  for (const auto& e : live) {
    out += "  " + util::printable(e.exp_dir, 300) + " (pid " + std::to_string(e.pid) +
           "): " + util::format_double(e.cpus) + " CPU" + (e.cpus == 1 ? "" : "s");
    for (const auto& [g, f] : e.gpus)
      out += ", GPU " + std::to_string(g) + (f < 1 ? " (" + util::format_double(f) + ")" : "");
    if (e.waiting_until > wall_now()) out += ", waiting for more";
    if (fs::weakly_canonical(e.exp_dir, ec) == here) out += "  <- this experiment";
    out += "\n";
  }
  return out.empty() ? "" : "held on this machine by this user's experiments:\n" + out;
}

json holders_json(const std::vector<control::LedgerEntry>& live) {
  json out = json::array();
  for (const auto& e : live) {
    json gpus = json::object();
    for (const auto& [g, f] : e.gpus) gpus[std::to_string(g)] = f;
    out.push_back({{"experiment", e.exp_dir},
                   {"pid", e.pid},
                   {"cpus", e.cpus},
                   {"gpus", gpus},
                   {"waiting", e.waiting_until > wall_now()}});
  }
  return out;
}

// Prints `tune status` as the state streams by: the header, a row per trial, then the totals.
class StatusPrinter {
 public:
  StatusPrinter(fs::path dir, DriverInfo driver, bool json_out)
      : dir_(std::move(dir)), driver_(std::move(driver)), json_(json_out) {}

  void header(const state::ExperimentState& h) {
    head_ = h;
    load_slurm_jobs();
    gone_ = h.phase == "running" && !driver_.alive;
    orphans_.emplace(gone_, dir_);
    if (json_) {
      json top = {
          {"name", h.name},
          {"dir", dir_.string()},
          {"phase", h.phase},
          {"driver", {{"alive", driver_.alive}, {"pid", driver_.pid}, {"host", driver_.host}}},
          {"total_trials", h.total_trials},
          {"elapsed_s", h.elapsed_s},
          {"metric", h.metric ? json(*h.metric) : json(nullptr)},
          {"mode", h.mode},
          {"hosts", h.hosts}};
      std::string text = top.dump(2);
      text.resize(text.size() - 2);  // "\n}"
      std::cout << text << ",\n  \"trials\": [";
      return;
    }
    std::cout << "experiment '" << ui::sanitize(h.name) << "' ("
              << (gone_ ? "driver gone" : h.phase) << ")\ndir: " << dir_.string() << "\n";
    if (gone_)
      std::cout << "driver: gone (pid " << driver_.pid << " on " << driver_.host
                << " ended without finishing: killed or crashed)\n";
    else if (driver_.alive)
      std::cout << "driver: pid " << driver_.pid << " on " << driver_.host << "\n";
  }

  void row(trial::Trial&& t) {
    ++counts_[t.status];
    std::optional<Orphans::Fate> fate;
    if (t.status == trial::Status::kRunning) {
      ++running_on_[t.host];
      if (gone_) fate = orphans_->classify(t);
    }
    if (json_) {
      json row = trial_summary_json(t);
      if (auto note = ui::trial_note(t, ui::scheduler_of(head_)); !note.empty())
        row["decision"] = note;
      if (fate) row["running"] = Orphans::name(*fate);
      if (auto job = slurm_job(t)) row["slurm_job"] = job->first, row["slurm_state"] = job->second;
      std::cout << (rows_++ ? ",\n    " : "\n    ") << row.dump();
      return;
    }
    ++rows_;
    chunk_.push_back(std::move(t));
    if (chunk_.size() >= kChunk) flush_rows();
  }

  // Rows are laid out a chunk at a time: the column widths fit the terminal, and memory stays
  // bounded for experiments of many trials.
  void flush_rows() {
    if (chunk_.empty()) return;
    ui::TableView view;
    view.metric = head_.metric;
    view.max_mode = head_.mode == "max";
    if (head_.metric) view.metrics.push_back({*head_.metric, *head_.metric});
    view.scheduler = ui::scheduler_of(head_);
    std::vector<const trial::Trial*> rows;
    for (const auto& t : chunk_) rows.push_back(&t);
    std::cout << ui::trial_table(rows, view, ui::output_width(STDOUT_FILENO));
    // Trials run as Slurm jobs: their job ids and states under the rows.
    for (const auto& t : chunk_)
      if (auto job = slurm_job(t))
        std::cout << "  " << ui::sanitize(t.name) << "  slurm job " << job->first << " "
                  << job->second << "\n";
    chunk_.clear();
  }

  void finish() {
    auto holders = control::Ledger::read_live(control::Ledger::default_dir());
    if (json_) {
      json tail = {{"counts", json::object()}, {"machine_resources", holders_json(holders)}};
      for (const auto& [st, c] : counts_) tail["counts"][trial::status_name(st)] = c;
      if (gone_) orphans_->add_json(tail, dir_);
      std::string text = tail.dump(2);
      std::cout << (rows_ ? "\n  ],\n" : "],\n") << text.substr(2) << "\n";
      return;
    }
    flush_rows();
    if (rows_ == 0) std::cout << "no trials yet\n";
    std::cout << "trials: " << ui::status_counts(counts_, head_.total_trials, head_.next_index)
              << "\n";
    if (head_.hosts.size() > 1 || (!head_.hosts.empty() && head_.hosts.begin()->second != "up")) {
      std::string line = "hosts:";
      for (const auto& [name, st] : head_.hosts)
        line += (line.size() > 6 ? ", " : " ") + name + " " + st + " (" +
                std::to_string(running_on_[name]) + " running)";
      std::cout << ui::sanitize(line) << "\n";
    }
    std::cout << holders_text(dir_, holders);
    if (!slurm_error_.empty()) std::cout << "slurm job states unknown: " << slurm_error_ << "\n";
    if (gone_) std::cout << orphans_->text(dir_);
  }

 private:
  // Trials that ran as Slurm jobs: their states from one squeue call (none if Slurm is not
  // reachable from here: then only the job ids are shown).
  void load_slurm_jobs() {
    std::error_code ec;
    if (!fs::is_directory(dir_ / exec::kSlurmDir, ec)) return;
    has_slurm_ = true;
    auto q = exec::CommandSlurmClient().queue();
    if (!q) {
      slurm_error_ = q.error().message;
      return;
    }
    for (auto& j : *q) slurm_states_[j.id] = j.state_text;
  }
  std::optional<std::pair<std::string, std::string>> slurm_job(const trial::Trial& t) const {
    if (!has_slurm_) return std::nullopt;
    // The state's job id (the current attempt's), else the trial's .job file.
    std::string job = t.job_id;
    if (job.empty()) {
      auto f = exec::read_job_file(dir_, t.name);
      if (!f) return std::nullopt;
      job = f->job_id;
    }
    if (job.find('.') != std::string::npos && !steps_loaded_) {
      // A job step (use_allocation: JOBID.STEPID): squeue --steps lists the running ones.
      steps_loaded_ = true;
      if (auto steps = exec::CommandSlurmClient().job_steps())
        for (auto& st : *steps) slurm_states_[st.id] = "RUNNING";
      else
        slurm_error_ = steps.error().message;
    }
    auto it = slurm_states_.find(job);
    std::string st = it != slurm_states_.end() ? it->second
                     : slurm_error_.empty()
                         ? (job.find('.') != std::string::npos ? "(ended)" : "(not in squeue)")
                         : "(squeue failed)";
    return std::pair{job, st};
  }

  fs::path dir_;
  bool has_slurm_ = false;
  mutable bool steps_loaded_ = false;
  mutable std::map<std::string, std::string> slurm_states_;
  mutable std::string slurm_error_;
  DriverInfo driver_;
  bool json_;
  state::ExperimentState head_;
  bool gone_ = false;
  std::optional<Orphans> orphans_;
  std::map<trial::Status, uint64_t> counts_;
  std::map<std::string, int> running_on_;
  static constexpr size_t kChunk = 200;
  std::vector<trial::Trial> chunk_;
  size_t rows_ = 0;
};

}  // namespace

void StatusCommand::add_options(CLI::App& app) {
  add_experiment_options(app, experiment_, storage_);
  app.add_option("--format", format_, "table | json")->check(CLI::IsMember({"table", "json"}));
}

int StatusCommand::execute() {
  fs::path dir = resolve_experiment(experiment_, storage_);
  // The state is read one trial at a time and rows are printed a chunk at a time: 5,000 trials
  // of 10 KB configs are never in memory at once.
  StatusPrinter out(dir, probe_driver(dir), format_ == "json");
  auto r = state::stream(
      dir, [&](const state::ExperimentState& h) { out.header(h); },
      [&](trial::Trial&& t) { out.row(std::move(t)); });
  if (!r) {
    out.flush_rows();  // the rows read before the error
    std::cout << std::endl;
    throw Fatal(r.error(), kExitUsage);
  }
  out.finish();
  return kExitOk;
}

}  // namespace tune::cli
