// The Executor interface: where trial attempts run. The controller drives it; the local
// executor runs supervisors on this machine, tests use a scripted fake (tests/unit/fake_executor).
#pragma once

#include <time.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "exec/arrivals.hpp"
#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

// One attempt of one trial to start (or re-attach to, when `attach` is set).
struct Launch {
  std::string trial_id;
  int attempt = 1;
  fs::path trial_dir;  // absolute; holds stdout.log, stderr.log, the FIFO
  fs::path cwd;        // the trial's working directory
  std::string host;    // empty: this machine; else the SSH host's name
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the trial's complete environment
  uint64_t stdout_offset = 0;              // where unread output starts in stdout.log
  bool stdin_fifo = false;                 // step mode: commands arrive on stdin.fifo
  std::string params_json;  // written to trial_dir/params.json if set and that is missing or other
  std::string job_id;       // attach on Slurm: the job the experiment state names for it, if any
  // attach: the checkpoint dirs the experiment state names for the trial (an SSH host copies
  // those the head lacks with the attempt's syncs, as for checkpoints taken after the attach)
  std::vector<std::string> checkpoints;
};

// What a driver writes as its lease file's mtime: this machine's time, shifted by
// $TUNE_TEST_LEASE_SKEW_S seconds if set (tests: a worker whose clock is ahead or behind).
// Supervisors only look for changes of that mtime, never compare it with their own clock.
[[nodiscard]] timespec lease_stamp();

// Makes launch.trial_dir and writes its params.json (on this machine): what start() does first
// in executors that do not leave it to the host's agent.
[[nodiscard]] Result<void> prepare_trial_dir(const Launch& launch);

// How an attempt ended, as the supervisor recorded it.
// How an attempt ended, as its executor tells the controller. Exit records on disk keep the
// text (exit_reason_name), read back with parse_exit_reason.
enum class ExitReason {
  kExited,          // "exited": the trial's process ended by itself (any exit code or signal)
  kDriverStop,      // "driver_stop": stopped at a driver's request (or `tune stop`'s)
  kOrphaned,        // "orphaned": its supervisor stopped it, the driver silent past the timeout
  kExecFailed,      // "exec_failed": its command could not be executed
  kSupervisorDied,  // "supervisor_died": its supervisor ended without an exit record
  kHostLost,        // "host_lost": its host was unreachable for host_timeout_s
  kPreempted,       // "preempted": Slurm ended or requeued its job (time limit, preemption, a
                    // node lost); it is re-queued from its checkpoint as for a lost host
  kDirBusy,         // "dir_busy": not started, another process held its trial dir's lock (an
                    // earlier attempt's supervisor); a failure, retried
  kOutputLost,      // "output_lost": it ended by itself, but its supervisor could not write all
                    // of its output into the trial dir (a full disk, say): a failure, retried
};

[[nodiscard]] const char* exit_reason_name(ExitReason r);
// Parses an exit_reason_name(); nullopt for anything else.
[[nodiscard]] std::optional<ExitReason> parse_exit_reason(std::string_view s);

struct ExitInfo {
  int attempt = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  ExitReason reason = ExitReason::kExited;
  std::string error;       // e.g. "command not found: foo"
  std::optional<int> pid;  // the trial's process, as the supervisor recorded it
  // What identifies the record's writer (checked by check_exit_record, exit_record.hpp):
  std::string nonce;                // the attempt's secret nonce
  std::optional<int> supervisor;    // the supervisor's pid
  std::optional<uint64_t> started;  // the trial process's start time (ticks since boot)
  // The size of the stdout.log its supervisor wrote into, when the attempt ended (a driver that
  // reads the file by its path can tell that it missed some: it was removed or replaced)
  std::optional<uint64_t> stdout_size;
  // Where the attempt's output started in stdout.log, and its notes in stdout.times
  std::optional<uint64_t> stdout_from, times_from;
  // stdout.log was cut by another process after the trial's last output, which ended here
  // (judge_cut)
  std::optional<uint64_t> stdout_cut;
  // Slurm: the next attempt already runs, restored from this checkpoint (a dir name; "" for
  // none) by a rerun Slurm started while no driver ran: later checkpoints are forgotten so that
  // the driver restarts the trial from the same one.
  std::optional<std::string> restart_from;
};

// The supervisor's exit record for `attempt`, from the file's text. Anything else (another
// attempt's record, a torn or foreign file, fields of the wrong type) is nullopt. Whether the
// record is genuine is checked separately (check_exit_record): any process of the user can
// write a file.
[[nodiscard]] std::optional<ExitInfo> parse_exit_record(std::string_view text, int attempt);

// An attempt that ended by itself while its stdout.log was cut after its last output
// (ExitInfo::stdout_cut) failed as output_lost if the driver had read less than that
// output (`read_to`: where its reading of the file ended): its last results are gone.
void judge_cut(ExitInfo& info, uint64_t read_to);

// True for the "=== attempt N ===" line the supervisor writes into stdout.log and stderr.log
// before an attempt's output when an earlier attempt wrote there.
[[nodiscard]] bool is_attempt_marker(std::string_view line);

// Events returned by Executor::wait(), in priority order: interrupts, output, exits.
struct InterruptEvent {
  int signal = 0;
};
struct OutputEvent {
  OutputEvent(std::string id, std::string bytes)
      : trial_id(std::move(id)), data(std::move(bytes)) {}
  std::string trial_id;
  std::string data;  // the next bytes of stdout.log
  // When they arrived, on the trial host's clocks (arrivals.hpp), as far as its supervisor
  // noted it: notes covering these bytes (and maybe a few after), and the attempt's start when
  // first known. Empty: the driver times the output as it reads it.
  std::vector<Arrival> arrivals;
  std::optional<HostTime> started;
  // Where `data` starts in stdout.log, when the executor learns it only once the attempt has
  // started (SSH hosts: the host's copy of the file may be longer than the head's). The
  // controller reads on from there. Such an event may carry no data.
  std::optional<uint64_t> from;
};
struct ExitEvent {
  std::string trial_id;
  ExitInfo info;  // delivered only after all of the attempt's output
};
// An SSH host went down (connection lost: no new trials go there) or came back.
struct HostEvent {
  std::string host;
  bool up = false;
};
// A step-mode attempt's commands cannot reach it: its stdin.fifo was removed, replaced or
// left unread, or something else is in its place (`why`). The controller fails the attempt.
struct StdinLostEvent {
  std::string trial_id;
  int attempt = 0;
  std::string why;
};
using Event = std::variant<InterruptEvent, OutputEvent, ExitEvent, HostEvent, StdinLostEvent>;

// An attempt whose supervisor runs now, as the host it runs on says.
struct LiveAttempt {
  std::string host;  // "" for this machine, else the SSH host's name
  std::string trial_name;
  int attempt = 0;
  int supervisor = 0;               // its pid there
  uint64_t supervisor_started = 0;  // its start time on its host (guards pid reuse)
  // Its supervisor holds the trial dir's lock there (false: no process does, e.g. the dir was
  // replaced while no driver ran; a line naming a process when another holds the dir is not
  // believed at all). Only those that hold it are stopped as strays.
  bool holds_dir = true;
  std::string job_step;  // a Slurm job step known by its id alone (JOBID.STEPID)
  // Where its output starts in stdout.log and its notes in stdout.times, as its supervisor said
  std::optional<uint64_t> stdout_from, times_from;
};

// What attach() found of an attempt that an earlier driver started.
enum class Attached {
  kRunning,  // its supervisor still runs: output and exit follow as for start()
  kEnded,    // it ended meanwhile: its remaining output and its exit follow
  kGone,     // no supervisor runs it and it left no exit record: nothing will be reported
};

class Executor {
 public:
  virtual ~Executor() = default;
  // Starts an attempt under a supervisor. Fails only if the supervisor cannot be started; a
  // program that cannot be executed is reported as an ExitEvent with reason exec_failed.
  [[nodiscard]] virtual Result<void> start(const Launch& launch) = 0;
  // Re-attaches to `launch.attempt` of a trial started by an earlier driver (crash, kill -9):
  // output is read again from launch.stdout_offset. argv/env/cwd are not used.
  [[nodiscard]] virtual Result<Attached> attach(const Launch& launch) = 0;
  // Queues one line (newline added) for the trial's stdin; never blocks.
  virtual void send(const std::string& trial_id, std::string_view line) = 0;
  // Asks the attempt to stop: SIGTERM then SIGKILL after the grace period, or SIGKILL now.
  virtual void stop(const std::string& trial_id, bool now) = 0;
  // Waits up to `timeout_s` seconds for events; returns none on timeout.
  [[nodiscard]] virtual std::vector<Event> wait(double timeout_s) = 0;
  // The trial process's pid, once known.
  [[nodiscard]] virtual std::optional<int> pid(const std::string& trial_id) = 0;
  // Monotonic seconds (for durations and deadlines) and wall-clock epoch seconds.
  [[nodiscard]] virtual double now() = 0;
  [[nodiscard]] virtual double wall_time() = 0;
  // The name of the host trials run on (for the `hostname` result field and tables).
  [[nodiscard]] virtual std::string host_name() = 0;
  // Tells supervisors the driver is alive (the lease).
  virtual void renew_lease() = 0;

  // Moves a checkpoint dir the trial reported into its trial dir as `dest`, with the checks of
  // checkpoint::adopt, on the host where the trial runs.
  [[nodiscard]] virtual Result<void> adopt(const std::string& trial_id, const std::string& reported,
                                           const fs::path& cwd, const fs::path& head_trial_dir,
                                           const std::string& dest);
  // adopt() as a task that may run on another thread (the controller's file worker), for
  // executors whose adopt() waits on the network; it must be made on the loop, and may queue
  // the work there and then (so it runs before any command sent to the trial after it), the
  // task only waiting for the answer. Empty: call adopt() on the loop.
  [[nodiscard]] virtual std::function<Result<void>()> adopt_task(const std::string& trial_id,
                                                                 const std::string& reported,
                                                                 const fs::path& cwd,
                                                                 const fs::path& head_trial_dir,
                                                                 const std::string& dest) {
    (void)trial_id, (void)reported, (void)cwd, (void)head_trial_dir, (void)dest;
    return {};
  }
  // Makes `name` an empty directory in the trial dir where the trial runs (step-mode saves).
  [[nodiscard]] virtual Result<void> make_staging(const std::string& trial_id,
                                                  const fs::path& head_trial_dir,
                                                  const std::string& name);
  // Retention deleted a checkpoint on the head: delete the host's copy too (remote hosts).
  virtual void remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                                 const std::string& name) {
    (void)host, (void)head_trial_dir, (void)name;
  }
  // Brings checkpoints a trial saved on SSH host `host` that never reached the head (`names`,
  // checkpoint dir names) into head_trial_dir, each under its name only once complete. Blocking:
  // for a resume, before any trial starts. Returns the names now on the head.
  [[nodiscard]] virtual std::vector<std::string> fetch_checkpoints(
      const std::string& host, const fs::path& head_trial_dir,
      const std::vector<std::string>& names) {
    (void)host, (void)head_trial_dir, (void)names;
    return {};
  }
  // Every attempt of this experiment whose supervisor runs now, on every host that can be
  // asked (a resume asks before anything starts, to end those no trial expects).
  [[nodiscard]] virtual std::vector<LiveAttempt> live_attempts() { return {}; }
  // Ends these attempts as a driver stop does (SIGTERM to their supervisors, which stop their
  // trials with `grace_s`), and waits until they are gone (after grace_s + 5 s, at once).
  // Blocking: for a resume, before any trial starts.
  virtual void end_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
    (void)which, (void)grace_s;
  }
  // A checkpoint was registered (sync_on_checkpoint for remote hosts).
  virtual void checkpoint_registered(const std::string& trial_id) { (void)trial_id; }
  // Retention dropped checkpoint `name` of the trial; it is deleted (remove_checkpoint) only
  // once the state no longer names it, but from now on it is not worth copying: remote hosts
  // drop a copy of it that is queued or under way.
  virtual void checkpoint_dropped(const std::string& trial_id, const std::string& name) {
    (void)trial_id, (void)name;
  }
  // Slurm: (trial id, job id) for each attempt whose job id became known since the last call,
  // for the experiment state.
  [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> take_job_ids() {
    return {};
  }
};

}  // namespace tune::exec
