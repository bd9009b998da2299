// The text Slurm runs for a trial attempt, and the sbatch options that go with it.
//
// Each job's batch script is a small stub (kept by Slurm for the job's life). It runs a launch
// file in <experiment>/.tune/slurm/: for the job's first run the attempt's own launch file; when
// Slurm requeues the job itself (SLURM_RESTART_COUNT > 0), the file the driver prepared for that
// job's next run (`<trial>.job<JOBID>.next`, claimed with a rename so it runs once), and if there
// is none (no driver was running to prepare one) it exits without starting anything. A launch
// file exports the trial's environment and execs tune-supervisor with the attempt's nonce on
// stdin, so the batch shell *is* the supervisor and `--signal=B:TERM@…` reaches it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "exec/executor.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// A slurm host's job options (hosts: - slurm: {...}).
struct SlurmJobOptions {
  std::string partition, account, time_limit, mem;
  std::optional<int> cpus, gpus;
  std::vector<std::string> sbatch_args;
  double signal_grace_s = 120;
};

// What a launch file needs beyond the Launch.
struct SupervisorCall {
  fs::path supervisor;  // tune-supervisor, on the shared filesystem
  fs::path lease;       // the driver's lease file
  double orphan_timeout_s = 600;
  double grace_s = 10;  // SIGTERM -> SIGKILL inside the supervisor
  fs::path record;      // the exit record it writes
  std::string nonce;
};

// The job's name: tune-<experiment>-<trial name>.
[[nodiscard]] std::string job_name(const std::string& experiment, const std::string& trial_name);

// sbatch's options for a trial's job (tune's own first, the user's sbatch_args last);
// `comment` (if any) marks the job as one attempt's (--comment).
[[nodiscard]] std::vector<std::string> sbatch_options(const SlurmJobOptions& o,
                                                      const std::string& name,
                                                      const fs::path& trial_dir,
                                                      const std::string& comment = "");

// The submitted batch script of a trial's job.
[[nodiscard]] std::string stub_script(const std::string& name, const fs::path& launch_file,
                                      const fs::path& slurm_dir, const std::string& trial_name);

// The launch file of one attempt (sh).
[[nodiscard]] std::string launch_script(const Launch& l, const SupervisorCall& call);

// Where a requeued job `job_id` of trial `trial_name` finds its next run's launch file.
[[nodiscard]] fs::path next_launch_file(const fs::path& slurm_dir, const std::string& trial_name,
                                        const std::string& job_id);

}  // namespace tune::exec
