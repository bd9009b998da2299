// What the Slurm executor asks of Slurm, behind an interface so that unit tests can script it:
// submit a batch script (sbatch), list this user's jobs (one squeue for all of them), cancel
// jobs (scancel), and check a submission without running it (sbatch --test-only).
// `CommandSlurmClient` runs Slurm's own commands; every call blocks, so the executor makes them
// on its own thread, never on the driver's loop.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// A job's state as squeue reports it (%T): the states tune acts on, and everything else.
enum class JobState {
  kPending,
  kRunning,    // RUNNING, COMPLETING, CONFIGURING, SUSPENDED, STOPPED, RESIZING, SIGNALING
  kRequeued,   // REQUEUED, REQUEUE_FED, REQUEUE_HOLD: on its way back to PENDING
  kCompleted,  // COMPLETED (exit code 0)
  kFailed,     // FAILED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, SPECIAL_EXIT
  kCancelled,  // CANCELLED
  kTimeout,    // TIMEOUT
  kPreempted,  // PREEMPTED
  kNodeFail,   // NODE_FAIL
  kUnknown,
};

[[nodiscard]] JobState parse_job_state(std::string_view squeue_state);
[[nodiscard]] const char* job_state_name(JobState s);
// Ended, as far as Slurm is concerned (the job will not run again unless requeued).
[[nodiscard]] bool job_ended(JobState s);

struct JobInfo {
  std::string id;
  JobState state = JobState::kUnknown;
  std::string state_text;  // squeue's own word, for `tune status`
  std::string reason;      // %r, e.g. BeginTime after a requeue
  std::string comment;     // %k: tune's own jobs carry `tune:<tag>` (an attempt's mark)
  std::string name;
  // sacct only: the batch script's exit code and the signal that ended it (ExitCode "N:S").
  std::optional<int> exit_code, signal;
};

// A running job step as `squeue --steps` lists it: JOBID.STEPID and its name.
struct StepInfo {
  std::string id, name;
};
// Parses `squeue -h -s -o '%i|%j'` output; lines without a JOBID.STEPID are skipped.
[[nodiscard]] std::vector<StepInfo> parse_steps(std::string_view text);

// Parses `squeue -h -o '%i|%T|%r|%k|%j'` output (the name last: it may hold '|'); lines that do
// not have that shape are skipped.
[[nodiscard]] std::vector<JobInfo> parse_squeue(std::string_view text);

// Parses `sacct -n -P -X -o JobID,State,ExitCode,JobName` output ('|'-separated, the name last;
// State may read "CANCELLED by 1000"); lines that do not have that shape are skipped.
[[nodiscard]] std::vector<JobInfo> parse_sacct(std::string_view text);
// Whether sacct's message says the cluster keeps no accounting (no slurmdbd).
[[nodiscard]] bool sacct_disabled(std::string_view message);

// What sacct said: the jobs' final records, or that the cluster has no accounting.
struct Accounting {
  bool available = true;
  std::vector<JobInfo> jobs;
};

class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // sbatch --parsable ARGS SCRIPT: the new job's id, or Slurm's message.
  [[nodiscard]] virtual Result<std::string> submit(const std::vector<std::string>& args,
                                                   const fs::path& script) = 0;
  // sbatch --test-only ARGS: whether Slurm would take such a job (partition, account, limits).
  [[nodiscard]] virtual Result<void> test_only(const std::vector<std::string>& args) = 0;
  // Every job of this user that squeue still lists (all states): one call.
  [[nodiscard]] virtual Result<std::vector<JobInfo>> queue() = 0;
  // sacct for these jobs (one call); {available = false} where accounting is disabled.
  [[nodiscard]] virtual Result<Accounting> accounting(const std::vector<std::string>& ids) = 0;
  // scancel [--batch --signal=TERM] IDS: one call for all of them.
  [[nodiscard]] virtual Result<void> cancel(const std::vector<std::string>& ids,
                                            bool term_batch_only) = 0;

  // use_allocation: job steps of the allocation the driver runs in.
  // `srun ARGS COMMAND...` in the background, its own messages in `log`: an id for the step
  // (its srun's pid and start time, as text).
  [[nodiscard]] virtual Result<std::string> start_step(const std::vector<std::string>& args,
                                                       const std::vector<std::string>& command,
                                                       const fs::path& log) {
    (void)args, (void)command, (void)log;
    return fail("job steps are not supported by this Slurm client");
  }
  // Which of these steps have ended (their srun exited; an srun an earlier driver started is
  // watched by its pid and start time).
  [[nodiscard]] virtual std::vector<std::string> ended_steps(const std::vector<std::string>& ids) {
    (void)ids;
    return {};
  }
  // Signals the steps' sruns, which pass SIGTERM and SIGUSR1 on to the step's task (the
  // supervisor: stop the trial; kill it now). Never the allocation itself.
  virtual void signal_steps(const std::vector<std::string>& ids, int sig) { (void)ids, (void)sig; }
  // The job steps this user has running (`squeue --me --steps`): one call.
  [[nodiscard]] virtual Result<std::vector<StepInfo>> job_steps() {
    return std::vector<StepInfo>{};
  }
  // scancel [--signal=TERM] JOBID.STEPID...: a step by its id, wherever its srun runs (SIGTERM
  // goes to the step's task, the supervisor; without it the step is ended).
  [[nodiscard]] virtual Result<void> cancel_steps(const std::vector<std::string>& ids, bool term) {
    (void)ids, (void)term;
    return fail("job steps are not supported by this Slurm client");
  }
};

class CommandSlurmClient final : public SlurmClient {
 public:
  Result<std::string> submit(const std::vector<std::string>& args, const fs::path& script) override;
  Result<void> test_only(const std::vector<std::string>& args) override;
  Result<std::vector<JobInfo>> queue() override;
  Result<Accounting> accounting(const std::vector<std::string>& ids) override;
  Result<void> cancel(const std::vector<std::string>& ids, bool term_batch_only) override;
  Result<std::string> start_step(const std::vector<std::string>& args,
                                 const std::vector<std::string>& command,
                                 const fs::path& log) override;
  std::vector<std::string> ended_steps(const std::vector<std::string>& ids) override;
  void signal_steps(const std::vector<std::string>& ids, int sig) override;
  Result<std::vector<StepInfo>> job_steps() override;
  Result<void> cancel_steps(const std::vector<std::string>& ids, bool term) override;
};

// Runs argv (argv[0] searched on PATH, no shell) to its end or `timeout_s`, stdin /dev/null.
struct Captured {
  int status = 0;  // exit status, 128+signal if killed
  std::string out, err;
};
[[nodiscard]] Result<Captured> run_captured(const std::vector<std::string>& argv, double timeout_s);

}  // namespace tune::exec
