// Runs trial attempts on this machine: one tune-agent forks a supervisor per attempt.
#pragma once

#include <sys/types.h>
#include <memory>
#include <string>
#include <unordered_map>

#include "exec/executor.hpp"

namespace tune::exec {

// The attempt log, relative to the experiment dir.
inline constexpr const char* kAttemptLog = ".tune/attempts.log";

struct LocalOptions {
  fs::path agent;        // the tune-agent binary
  fs::path attempt_log;  // the experiment's attempt log (kAttemptLog)
  fs::path lease_file;   // touched by renew_lease(); supervisors watch its age
  double orphan_timeout_s = 600;
  double grace_s = 10;     // SIGTERM -> SIGKILL delay
  std::string record_key;  // the experiment's key for attempt nonces (exit_record.hpp)
  // The caller waited for an earlier driver's agent already (wait_for_agent); otherwise the
  // first attach() or live_attempts() does, for at most 10 s.
  bool agent_waited_for = false;
};

// Owns a signalfd (SIGINT, SIGTERM, SIGCHLD), an inotify fd and the agent's event pipe; wait()
// is one ppoll over them.
// Output is read from each trial's stdout.log by offset, so trials never block on the driver.
class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(LocalOptions opts);
  ~LocalExecutor() override;

  Result<void> start(const Launch& launch) override;
  Result<Attached> attach(const Launch& launch) override;
  void send(const std::string& trial_id, std::string_view line) override;
  void stop(const std::string& trial_id, bool now) override;
  std::vector<Event> wait(double timeout_s) override;
  // wait() also returns (with what it has) as soon as `fd` is readable: another executor's
  // ready_fd(), whose events the caller then collects. Not read here.
  void also_wake_on(int fd);
  std::optional<int> pid(const std::string& trial_id) override;
  double now() override;
  double wall_time() override;
  std::string host_name() override;
  std::vector<LiveAttempt> live_attempts() override;
  void end_attempts(const std::vector<LiveAttempt>& which, double grace_s) override;
  void renew_lease() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The experiment's live supervisors on this machine by "trial_name\0attempt" (from its attempt
// log): how `tune status` finds the attempts that outlived a crashed driver.
[[nodiscard]] std::unordered_map<std::string, pid_t> live_supervisors(const fs::path& exp_dir);

// Waits (up to timeout_s) until no tune-agent of an earlier driver runs for this attempt log:
// one still running may have launches left that it read before its driver died. Fails, naming
// the agent and what it is doing (stopped, blocked), if it still runs then.
[[nodiscard]] Result<void> wait_for_agent(const fs::path& attempt_log, double timeout_s);

// Finds tune-supervisor (pushed to SSH hosts, for file operations there; run by Slurm jobs) and
// tune-agent: $TUNE_SUPERVISOR / $TUNE_AGENT, else beside the running tune binary (a build dir),
// else in ../libexec/tune/ next to it (an install). The error names every place it looked.
[[nodiscard]] Result<fs::path> find_supervisor();
[[nodiscard]] Result<fs::path> find_agent();
// The same for any helper `name`, `self` being the tune binary's path ("" if unknown).
[[nodiscard]] Result<fs::path> find_helper_program(const std::string& name, const char* env_var,
                                                   const fs::path& self);

}  // namespace tune::exec
