// Runs trial attempts on worker hosts over SSH: one libssh session per host, with an
// SFTP channel for files and exec channels for commands; the same tune-agent as locally (which
// forks each attempt's supervisor there), placed on the host at first contact. Output is read by
// offset over SFTP; trial dirs are pulled to the head with rsync over an OpenSSH ControlMaster
// connection the driver owns, with each checkpoint copied under a staging name and renamed only
// when complete.
//
// The driver's loop never waits on the network: each host has its own I/O thread that owns
// its connection and its attempts (ssh_host, ssh_run); the loop posts starts, stops and stdin
// lines to it and takes the events it produced (output, exits, host up/down). Only a resume's
// questions (attach, live attempts, fetching checkpoints) are waited for; a checkpoint's
// adoption is queued on the host's thread at once and its answer waited for off the loop.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/executor.hpp"
#include "sync/workdir.hpp"

namespace tune::exec {

struct SshHostConfig {
  std::string name;  // shown in tables: the host, or host:port
  std::string host, user;
  int port = 22;
  std::string identity_file;   // empty: ssh-agent, then the default keys
  std::string known_hosts;     // checked, and unknown hosts recorded (accept-new)
  std::string storage_path;    // on the host; empty: ~/tune_results
  std::optional<double> cpus;  // nullopt: the host's CPU count
  std::optional<int> gpus;     // nullopt: its /dev/nvidiaN count
};

struct SshOptions {
  fs::path supervisor;     // the static tune-supervisor binary to place on hosts
  fs::path agent;          // the static tune-agent binary placed beside it (launches there)
  fs::path python_helper;  // tune_trial.py, placed beside it
  std::string exp_name;
  fs::path head_exp_dir;
  double orphan_timeout_s = 600;
  double grace_s = 10;
  double host_timeout_s = 120;
  double sync_period = 300;
  double sync_timeout = 1800;  // a pull running longer is killed (retried next period)
  bool sync_on_checkpoint = true;
  std::string syncer = "rsync";  // rsync | none | "CMD {source} {target}"
  std::string record_key;        // the experiment's key for attempt nonces (exit_record.hpp)
  // trial.sync_workdir: what is copied to <exp dir on the host>/.workdir before the host's
  // first trial (and again on a resume only if it changed); that copy is the trial's cwd there.
  std::optional<sync::WorkdirPlan> workdir;
};

// What connect() learned of a host that is ready for trials.
struct SshHostInfo {
  std::string name;
  double cpus = 1;
  int gpus = 0;
  std::string exp_dir;      // <storage_path>/<experiment> on the host (absolute)
  std::string helpers_dir;  // where tune_trial.py is on the host
  // GNU dd, base64 and timeout are there: a trial's files are read without blocking opens
  // (SshHost::read_ranges); else over SFTP, which a FIFO in their place stalls
  bool safe_reads = false;
};

// The name of the workdir's copy in an experiment dir on a host.
inline constexpr const char* kWorkdirCopy = ".workdir";

class SshExecutor final : public Executor {
 public:
  explicit SshExecutor(SshOptions opts);
  ~SshExecutor() override;

  // Connects to every host: host-key check (unknown: recorded; changed: refused), public-key
  // auth, supervisor placed, experiment dir made. A host that fails is logged in one line and
  // left out; the others are returned.
  std::vector<SshHostInfo> connect(const std::vector<SshHostConfig>& hosts);

  Result<void> start(const Launch& launch) override;
  Result<Attached> attach(const Launch& launch) override;
  void send(const std::string& trial_id, std::string_view line) override;
  void stop(const std::string& trial_id, bool now) override;
  std::vector<Event> wait(double timeout_s) override;
  // Readable while events for wait() may be queued (the hosts' threads queue them at any
  // time): a loop that waits on other descriptors too wakes for them at once.
  [[nodiscard]] int ready_fd() const;
  std::optional<int> pid(const std::string& trial_id) override;
  double now() override;
  double wall_time() override;
  std::string host_name() override;
  std::vector<LiveAttempt> live_attempts() override;
  void end_attempts(const std::vector<LiveAttempt>& which, double grace_s) override;
  void renew_lease() override;
  Result<void> adopt(const std::string& trial_id, const std::string& reported, const fs::path& cwd,
                     const fs::path& head_trial_dir, const std::string& dest) override;
  std::function<Result<void>()> adopt_task(const std::string& trial_id, const std::string& reported,
                                           const fs::path& cwd, const fs::path& head_trial_dir,
                                           const std::string& dest) override;
  void remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                         const std::string& name) override;
  std::vector<std::string> fetch_checkpoints(const std::string& host,
                                             const fs::path& head_trial_dir,
                                             const std::vector<std::string>& names) override;
  Result<void> make_staging(const std::string& trial_id, const fs::path& head_trial_dir,
                            const std::string& name) override;
  void checkpoint_registered(const std::string& trial_id) override;
  void checkpoint_dropped(const std::string& trial_id, const std::string& name) override;

  [[nodiscard]] bool owns(const std::string& trial_id) const;
  [[nodiscard]] bool busy() const;  // trials running or syncs pending

  struct Impl;  // (named by the implementation's helpers only)

 private:
  void finish_deletions();
  std::unique_ptr<Impl> impl_;
};

}  // namespace tune::exec
