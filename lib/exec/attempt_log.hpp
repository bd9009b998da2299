// The attempt log (.tune/attempts.log): where the supervisors tune-agent forks on this machine
// note, one JSON line each, that they started an attempt (their pid and start time, the
// trial's) and how it ended (the exit record, exit_record.hpp). Appended by many processes (one
// write() per line); read back by a driver that re-attaches after a crash and by `tune status`.
// Any process of the user can append to it: a start line is believed only while its supervisor
// runs (pid and start time match, and it is a tune-agent process that leads its session), an
// exit line only with the attempt's nonce.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "exec/executor.hpp"
#include "util/process.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

struct LoggedAttempt {
  std::optional<int> supervisor;    // from the start line
  uint64_t supervisor_started = 0;  // its start time (ticks since boot)
  std::optional<int> pid;           // the trial's process
  uint64_t started = 0;             // and its start time
  std::optional<std::string> exit;  // the exit line, as written (check_exit_record)
  // Where the attempt's output starts in stdout.log, and its notes in stdout.times (from the
  // supervising line; older supervisors did not say)
  std::optional<uint64_t> stdout_from, times_from;
};

// What the log says, by "trial_name\0attempt". Reads on from `offset` (updated), so a caller
// can keep the index and read only what was appended since; lines that are not well-formed are
// skipped, and a line cut short at the end is left for the next read.
class AttemptLog {
 public:
  // Whether supervisor `pid`, started at `ticks`, runs now (supervisor_alive, or the same
  // asked of an SSH host's processes).
  using Alive = std::function<bool(int pid, uint64_t ticks)>;

  explicit AttemptLog(fs::path file) : file_(std::move(file)) {}
  void refresh();
  // Lines read elsewhere (an SSH host's log, read there): each as refresh() takes the file's.
  void add_lines(std::string_view text);
  [[nodiscard]] const LoggedAttempt* find(std::string_view trial_name, int attempt) const;
  // Every attempt whose supervisor runs now, by "trial_name\0attempt" -> supervisor pid.
  [[nodiscard]] std::unordered_map<std::string, int> live(const Alive& alive) const;
  [[nodiscard]] std::unordered_map<std::string, int> live() const;
  [[nodiscard]] const fs::path& file() const { return file_; }

 private:
  void add(std::string_view line);
  fs::path file_;
  uint64_t offset_ = 0;
  std::unordered_map<std::string, LoggedAttempt> by_attempt_;
};

// The attempts `log` names whose supervisors run now (host "").
[[nodiscard]] std::vector<LiveAttempt> live_attempts(const AttemptLog& log);
[[nodiscard]] std::vector<LiveAttempt> live_attempts(const AttemptLog& log,
                                                     const AttemptLog::Alive& alive);
// Ends supervisors of this machine as a driver stop does (SIGTERM; SIGUSR1, "now", after
// grace_s + 5 s) and waits until they are gone, up to another 5 s.
void end_local_attempts(const std::vector<LiveAttempt>& which, double grace_s);

// Asks supervisor `pid` to stop its trial (SIGTERM; `now`: SIGUSR1, kill it at once), and
// continues it if it was stopped.
void signal_supervisor(int pid, bool now);

// Whether a process's /proc/PID/stat (this machine's, or an SSH host's) fits supervisor `pid`
// started at `ticks`: not a zombie, the leader of its session, started then (whether it is a
// tune-agent process is the caller's to check: by its name, or where it can, its executable).
[[nodiscard]] bool stat_fits_supervisor(const util::ProcStat& st, int pid, uint64_t ticks);

// Whether `pid` is a running supervisor that started at `ticks`: not a zombie, the leader of its
// session, and a tune-agent process (what a start line in the log must name to be believed).
[[nodiscard]] bool supervisor_alive(int pid, uint64_t ticks);

}  // namespace tune::exec
