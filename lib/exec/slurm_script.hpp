// The text Slurm runs for a trial attempt, and the sbatch options that go with it.
//
// Each job's batch script is a small stub (kept by Slurm for the job's life). It runs a launch
// file in <experiment>/.tune/slurm/: for the job's first run the attempt's own launch file; when
// Slurm requeues the job itself (SLURM_RESTART_COUNT = K > 0), the file the driver prepared for
// run K of that job (`<trial>.job<JOBID>.next<K>`, claimed with a rename to `.run<K>` so it runs
// once), and if there is none (no driver was running to prepare one) it exits without starting
// anything. A launch file exports the trial's environment and execs tune-supervisor with the
// job's secret on stdin (`slurm-job:FIRST:KEY`), so the batch shell *is* the supervisor and
// `--signal=B:TERM@…` reaches it. Run K of a job first run as attempt FIRST is attempt FIRST + K,
// and its nonce is derived by the supervisor from KEY, the job id and K (agent/nonce.hpp).
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
  std::string secret;   // what the supervisor reads on stdin (slurm_job_secret)
  // A job's first run: when the stub runs it again for a rerun Slurm started on its own
  // (TUNE_SLURM_RERUN set), it runs attempt ATTEMPT + SLURM_RESTART_COUNT, restoring from
  // $TUNE_SLURM_RESTORE (the latest checkpoint in the trial dir; none if empty).
  bool rerun = false;
};

// The job's name: tune-<experiment>-<trial name>.
[[nodiscard]] std::string job_name(const std::string& experiment, const std::string& trial_name);

// sbatch's options for a trial's job (tune's own first, the user's sbatch_args last);
// `comment` (if any) marks the job as one attempt's (--comment).
[[nodiscard]] std::vector<std::string> sbatch_options(const SlurmJobOptions& o,
                                                      const std::string& name,
                                                      const fs::path& trial_dir,
                                                      const std::string& comment = "");

// srun's options for a trial's job step in the driver's allocation (use_allocation): one task
// on CPUs of its own, the job's size mapped (cpus, gpus, mem).
[[nodiscard]] std::vector<std::string> srun_options(const SlurmJobOptions& o,
                                                    const std::string& name,
                                                    const fs::path& trial_dir);

// use_allocation: what srun runs as a step's task. The step first writes its id
// (`$SLURM_JOB_ID.$SLURM_STEP_ID`) to `step_id_file`, then claims the attempt by renaming
// `launch_file` to `run_file` and runs that. A step that finds the launch file gone (a resumed
// driver gave the attempt up: void_step_launch) exits at once without starting anything, so an
// srun that a killed driver left waiting for CPUs never runs an attempt beside its successor.
[[nodiscard]] std::vector<std::string> step_command(const fs::path& launch_file,
                                                    const fs::path& run_file,
                                                    const fs::path& step_id_file);
// What became of a step's launch file when a resume gave its attempt up (renamed it to
// `void_file`, unless a step had claimed it first).
enum class StepClaim {
  kVoided,   // it was there: no step will ever run it now
  kClaimed,  // a step claimed it (`run_file` is there): that step started the attempt
  kNone,     // neither: its srun was never started (or the files are gone)
};
[[nodiscard]] StepClaim void_step_launch(const fs::path& launch_file, const fs::path& run_file,
                                         const fs::path& void_file);

// The submitted batch script of a trial's job.
[[nodiscard]] std::string stub_script(const std::string& name, const fs::path& launch_file,
                                      const fs::path& slurm_dir, const std::string& trial_name,
                                      const fs::path& trial_dir);

// Run `restart_count` of job `job_id` is claimed (a directory, made once): by the driver before
// it prepares that run's launch file, or by the stub of a rerun that found none, which then runs
// the next attempt on its own and notes in `<claim>/self` what it did (SelfRerun).
[[nodiscard]] fs::path claim_dir(const fs::path& slurm_dir, const std::string& trial_name,
                                 const std::string& job_id, int restart_count);
// What a rerun that ran on its own noted before starting: how long stdout.log was (the earlier
// attempt's output ends there) and the checkpoint it restores from ("" for none).
struct SelfRerun {
  uint64_t stdout_size = 0;
  std::string checkpoint;
};
// Nothing when there is no note; a note that is there but malformed (or unreadable) is nothing
// too, and `problem` (if given) then says which file and what is wrong with it.
[[nodiscard]] std::optional<SelfRerun> read_self_rerun(const fs::path& slurm_dir,
                                                       const std::string& trial_name,
                                                       const std::string& job_id, int restart_count,
                                                       std::string* problem = nullptr);

// The launch file of one attempt (sh).
[[nodiscard]] std::string launch_script(const Launch& l, const SupervisorCall& call);

// Where run `restart_count` (> 0) of the requeued job `job_id` of trial `trial_name` finds its
// launch file.
[[nodiscard]] fs::path next_launch_file(const fs::path& slurm_dir, const std::string& trial_name,
                                        const std::string& job_id, int restart_count);

}  // namespace tune::exec
