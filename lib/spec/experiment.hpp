// The validated experiment specification, as parsed from an experiment YAML.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "search/searcher.hpp"
#include "search/space.hpp"

namespace tune::spec {

namespace fs = std::filesystem;

enum class TrialMode { kFunction, kStep };
enum class Order { kMin, kMax };

struct Resources {
  double cpu = 1;
  double gpu = 0;
};

struct TrialSpec {
  std::vector<std::string> command;  // argv template with {placeholders}
  TrialMode mode = TrialMode::kFunction;
  fs::path workdir;  // absolute
  // Copy workdir to each SSH host (its <storage>/<name>/.workdir becomes the cwd there).
  // Unset in the file: on when there are SSH hosts and the syncer is rsync.
  bool sync_workdir = false;
  std::map<std::string, std::string> env;
  Resources resources;
  std::optional<fs::path> restore_from;  // warm start: absolute checkpoint dir
};

struct CheckpointConfig {
  std::optional<int> num_to_keep;              // nullopt = keep all
  std::optional<std::string> score_attribute;  // nullopt = recency
  Order score_order = Order::kMax;
  int frequency = 0;    // step mode only
  bool at_end = false;  // step mode only
};

struct FailureConfig {
  int max_failures = 0;  // -1 = forever
  bool fail_fast = false;
};

struct SyncConfig {
  std::string syncer = "rsync";  // rsync | none | template
  double sync_period = 300;
  bool sync_on_checkpoint = true;
  std::optional<std::string> upload_dir;     // the experiment is mirrored to upload_dir/<name>
  std::optional<std::string> upload_syncer;  // "CMD {source} {target}" instead of the built-in
  double sync_timeout = 1800;  // a pull or mirror running longer is killed (retried next period)
};

// callbacks: commands told about the run's events, one JSON object on their stdin each call.
enum class CallbackEvent {
  kTrialStart,
  kTrialResult,
  kTrialComplete,
  kTrialError,
  kCheckpoint,
  kExperimentEnd
};
inline constexpr CallbackEvent kAllCallbackEvents[] = {
    CallbackEvent::kTrialStart, CallbackEvent::kTrialResult, CallbackEvent::kTrialComplete,
    CallbackEvent::kTrialError, CallbackEvent::kCheckpoint,  CallbackEvent::kExperimentEnd};
// The name an event has in YAML and in the JSON the command gets ("trial_start").
[[nodiscard]] const char* callback_event_name(CallbackEvent e);

struct CallbackSpec {
  std::vector<CallbackEvent> on;     // the events it gets (each once)
  std::vector<std::string> command;  // argv, run without a shell in trial.workdir
  std::string where;                 // "FILE:LINE:COL" of the entry, for messages
};

// A Slurm cluster (docs/SLURM.md): each trial attempt is one job (or, with use_allocation, one
// job step inside the driver's own allocation).
struct SlurmSpec {
  std::string partition, account, time_limit, mem;  // empty: Slurm's defaults
  std::optional<int> cpus;                          // per job; unset: trial.resources.cpu
  std::optional<int> gpus;                          // per job; unset: trial.resources.gpu
  int max_jobs = 100;                               // jobs of this experiment in Slurm at once
  std::vector<std::string> sbatch_args;             // passed to sbatch after tune's own
  double signal_grace_s = 120;                      // SIGTERM this long before a time limit
  bool use_allocation = false;                      // job steps in the driver's allocation
};

struct HostSpec {
  enum class Kind { kLocal, kSsh, kSlurm } kind = Kind::kLocal;
  std::optional<double> cpus;  // nullopt = all of the machine's
  std::optional<int> gpus;     // nullopt = all of the machine's
  // ssh only
  std::string host, user, identity_file, storage_path, known_hosts_file;
  int port = 22;
  SlurmSpec slurm;  // slurm only
};

// scheduler: which trials go on, stop or pause by their results (docs/SCHEDULERS.md).
enum class SchedulerKind { kFifo, kAsha, kHyperBand, kMedianStopping, kPbt };

struct SchedulerSpec {
  SchedulerKind kind = SchedulerKind::kFifo;
  std::string metric;  // the scheduler's own, else the experiment's (required for all but fifo)
  Order mode = Order::kMin;
  std::string time_attr = "training_iteration";  // any result key that grows
  double max_t = 100;                            // asha 100, hyperband 81 (Ray's defaults)
  double grace_period = 1;                       // asha, median_stopping
  double reduction_factor = 4;                   // asha 4, hyperband 3
  int brackets = 1;                              // asha
  int min_samples_required = 3;                  // median_stopping
  // pbt (Ray's defaults): a check every perturbation_interval of time_attr, after burn_in_period.
  double perturbation_interval = 60;
  double burn_in_period = 0;
  double quantile_fraction = 0.25;  // in (0, 0.5]
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors = {1.2, 0.8};
  // What an exploit may change: a numeric domain, or a list (kChoice: moves one place).
  std::vector<search::Param> mutations;
};

// The name a scheduler has in YAML and in messages ("asha").
[[nodiscard]] const char* scheduler_name(SchedulerKind k);

// progress_reporter: what the live table shows (Ray Tune's CLIReporter options).
struct ColumnSpec {
  std::string key;    // a result key, or a dotted config path ("optimizer.lr")
  std::string title;  // shown in the header (the key unless renamed)
};
struct ProgressReporterSpec {
  std::optional<std::vector<ColumnSpec>> metric_columns;     // nullopt: the experiment's metric
  std::optional<std::vector<ColumnSpec>> parameter_columns;  // nullopt: every searched parameter
  std::optional<size_t> max_rows;                            // nullopt: fit the terminal (<= 20)
  bool sort_by_metric = false;  // rows by the metric's last value, best first
  // Seconds between redraws (terminal) or status summaries (log); nullopt: 0.5 s / 30 s.
  std::optional<double> max_report_frequency;
};

struct Experiment {
  fs::path source_file;  // the YAML file
  std::string name;
  fs::path storage_path;  // absolute
  TrialSpec trial;
  search::Space space;
  uint64_t num_samples = 1;
  std::optional<uint64_t> seed;
  std::optional<std::string> metric;
  Order mode = Order::kMin;
  bool mode_given = false;
  std::map<std::string, double> stop;
  std::optional<double> time_budget_s;
  std::optional<int> max_concurrent_trials;
  CheckpointConfig checkpoint;
  FailureConfig failure;
  SyncConfig sync;
  std::vector<HostSpec> hosts;
  double orphan_timeout_s = 600;
  double host_timeout_s = 120;
  SchedulerSpec scheduler;
  search::SearcherSpec search_alg;
  double report_period_s = 30;  // the driver rewrites <dir>/report.html this often (0 = never)
  bool tensorboard = true;      // TensorBoard event files in each trial dir
  ProgressReporterSpec progress_reporter;
  std::vector<CallbackSpec> callbacks;
  // One line per Ray Tune name accepted in place of ours ("FILE:L:C: ... use 'KEY'").
  std::vector<std::string> warnings;
  // The whole document as run (after --set), as JSON: what a resume compares against.
  nlohmann::json effective = nlohmann::json::object();

  [[nodiscard]] fs::path dir() const { return storage_path / name; }
};

}  // namespace tune::spec
