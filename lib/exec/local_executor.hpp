// Runs trial attempts on this machine, each under a tune-supervisor in its own session.
#pragma once

#include <sys/types.h>
#include <memory>
#include <string>
#include <unordered_map>

#include "exec/executor.hpp"

namespace tune::exec {

struct LocalOptions {
  fs::path supervisor;  // the tune-supervisor binary
  fs::path lease_file;  // touched by renew_lease(); supervisors watch its age
  double orphan_timeout_s = 600;
  double grace_s = 10;     // SIGTERM -> SIGKILL delay
  std::string record_key;  // the experiment's key for attempt nonces (exit_record.hpp)
};

// Owns a signalfd (SIGINT, SIGTERM, SIGCHLD) and an inotify fd; wait() is one ppoll over both.
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
  std::optional<int> pid(const std::string& trial_id) override;
  double now() override;
  double wall_time() override;
  std::string host_name() override;
  void renew_lease() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Live supervisors on this machine by "trial_dir\0attempt" (from their /proc command lines):
// how a new driver, or `tune status`, finds the attempts that outlived a crashed driver.
[[nodiscard]] std::unordered_map<std::string, pid_t> live_supervisors();

// Finds tune-supervisor: $TUNE_SUPERVISOR, else beside the running tune binary.
[[nodiscard]] Result<fs::path> find_supervisor();

}  // namespace tune::exec
