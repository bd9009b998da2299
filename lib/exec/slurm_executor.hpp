// Runs trial attempts as Slurm jobs (docs/SLURM.md): one sbatch job per attempt, running
// tune-supervisor in the trial dir on the cluster's shared filesystem. The driver never talks to
// a compute node: it reads the trial's stdout.log and exit record on the shared filesystem, and
// learns every job's state from one `squeue` per poll. All Slurm commands run on the executor's
// own thread; the driver's loop only hands requests over and collects answers.
#pragma once

#include <memory>
#include <string>

#include "exec/executor.hpp"
#include "exec/slurm_client.hpp"
#include "exec/slurm_script.hpp"

namespace tune::exec {

struct SlurmOptions {
  SlurmJobOptions job;
  int max_jobs = 100;  // jobs of this experiment queued or running in Slurm at once
  std::string exp_name;
  fs::path exp_dir;     // absolute, on the shared filesystem
  fs::path supervisor;  // tune-supervisor, reachable from the compute nodes
  fs::path lease;       // the driver's lease file (the local executor renews it)
  double orphan_timeout_s = 600;
  std::string record_key;     // the experiment's key for attempt nonces (exit_record.hpp)
  double poll_s = 2;          // squeue this often
  double scan_s = 0.5;        // trial files read this often
  double record_wait_s = 10;  // after Slurm says a job ended, how long its exit record may lag
  std::string host_name = "slurm";
  // Trials as job steps (srun --exclusive) of the allocation the driver runs in, not as jobs.
  bool use_allocation = false;
};

// Where the executor keeps its scripts and job files in the experiment dir.
inline constexpr const char* kSlurmDir = ".tune/slurm";

// What <exp>/.tune/slurm/<trial>.job says (`JOBID ATTEMPT FIRST`): the job running an attempt
// and the attempt the job ran first (for re-attaching and for `tune status`). A file without
// FIRST (an older tune's) means FIRST = ATTEMPT.
struct JobFile {
  std::string job_id;
  int attempt = 0;
  int first_attempt = 0;  // the job's first run; run K of the job is attempt first_attempt + K
};
[[nodiscard]] std::optional<JobFile> read_job_file(const fs::path& exp_dir,
                                                   const std::string& trial_name);

// The mark an attempt's job carries as its --comment: `tune:<attempt>:<tag>`, the tag derived
// from the experiment's key, so a resume can find a job whose id was never recorded (the driver
// died between sbatch's answer and writing it down) and tell it from anyone else's.
[[nodiscard]] std::string job_mark(std::string_view key, const std::string& trial_name,
                                   int attempt);
// use_allocation: the name of an attempt's job step, `tune-<experiment>-<trial>.a<N>.<tag>`
// (the tag derived from the experiment's key): squeue --steps lists it so, wherever its srun runs.
[[nodiscard]] std::string step_name(std::string_view key, const std::string& experiment,
                                    const std::string& trial_name, int attempt);
// A Slurm job's own key (32 hex digits), for the job first run as attempt `first_attempt`.
[[nodiscard]] std::string slurm_job_key(std::string_view key, const std::string& trial_name,
                                        int first_attempt);
// What the job's supervisor reads on stdin: `slurm-job:FIRST:JOBKEY` (tune-supervisor derives
// each run's nonce from it, the job id and SLURM_RESTART_COUNT).
[[nodiscard]] std::string slurm_job_secret(std::string_view key, const std::string& trial_name,
                                           int first_attempt);
// The nonce of attempt `attempt` run by job `job_id` first run as attempt `first_attempt` (run
// K = attempt - first_attempt of the job): what its supervisor derives and writes in its record.
[[nodiscard]] std::string slurm_attempt_nonce(std::string_view key, const std::string& trial_name,
                                              int first_attempt, const std::string& job_id,
                                              int attempt);

// The attempt a job's comment marks, if it is `job_mark(key, trial_name, N)` for some N.
[[nodiscard]] std::optional<int> marked_attempt(std::string_view key, const std::string& trial_name,
                                                std::string_view comment);

class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(SlurmOptions opts, std::unique_ptr<SlurmClient> client);
  ~SlurmExecutor() override;

  // Asks Slurm once whether it takes jobs like ours (sbatch --test-only): a missing sbatch, an
  // unknown partition or a refused account is a config error before anything runs.
  [[nodiscard]] Result<void> check();

  Result<void> start(const Launch& launch) override;
  Result<Attached> attach(const Launch& launch) override;
  void send(const std::string& trial_id, std::string_view line) override;
  void stop(const std::string& trial_id, bool now) override;
  std::vector<Event> wait(double timeout_s) override;
  std::optional<int> pid(const std::string& trial_id) override;
  double now() override;
  double wall_time() override;
  std::string host_name() override;
  void renew_lease() override {}  // the local executor renews the shared lease file
  void checkpoint_registered(const std::string& trial_id) override;
  std::vector<std::pair<std::string, std::string>> take_job_ids() override;
  // This experiment's jobs that Slurm still lists as pending or running (one squeue call; for a
  // resume, before anything starts): those named in .job files that squeue lists under the
  // trial's job name, and those whose comment carries an attempt's mark (job_mark). With
  // use_allocation: the steps whose srun (named in .step files) still runs on this machine.
  std::vector<LiveAttempt> live_attempts() override;
  // Cancels those jobs (SIGTERM to the batch shell, scancel after grace_s) and waits until
  // Slurm no longer lists them as pending or running (at most grace_s + 10 s). Only jobs that
  // live_attempts() found to be this experiment's are touched.
  void end_attempts(const std::vector<LiveAttempt>& which, double grace_s) override;

  [[nodiscard]] bool busy() const;
  // How many squeue calls were made (tests and the bench check one per poll).
  [[nodiscard]] uint64_t queue_calls() const;
  // How many sacct calls were made (none once sacct said accounting is disabled).
  [[nodiscard]] uint64_t accounting_calls() const;

 private:
  Result<Attached> attach_step(const Launch& launch);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tune::exec
