// The supervisor of one trial attempt: the process that owns the trial, outlives the driver,
// kills and reaps everything the attempt leaves, and records how it ended. It runs as a child
// the host's agent forks per attempt (tune-agent, no exec: on the driver's machine and on SSH
// worker hosts), or as its own program (tune-supervisor: a Slurm job's batch program). Deliberately
// libc only: no allocation heavier than std::string, no exceptions, no threads.
#pragma once

#include <string>

namespace tune::agent {

// Field 22 of /proc/PID/stat: process `pid`'s start time in clock ticks since boot (0 if it is
// gone), which tells it from a later process that took its pid.
[[nodiscard]] unsigned long long start_ticks(pid_t pid);

struct Attempt {
  std::string id;       // the driver's trial id (agent mode: echoed in events)
  std::string dir;      // the trial dir; made if missing, and locked while this attempt runs
  std::string attempt;  // decimal
  std::string lease;    // the driver's lease file: its mtime is the driver's heartbeat
  double orphan_timeout = 600;
  double grace = 10;
  std::string cwd;
  bool use_fifo = false;  // step mode: the trial reads dir/stdin.fifo
  char** prog = nullptr;  // the trial's argv (null-terminated), argv[0] searched on PATH
  char** envp = nullptr;  // its environment (nullptr: this process's)
  std::string nonce;      // the attempt's secret (exit_record.hpp)
  const std::string* params_json = nullptr;  // dir/params.json, written if missing or other
};

// Where the supervisor reports: forked by an agent, it appends "supervising", "start" and exit
// lines to the host's attempt log, and sends events to the driver (on the driver's machine) or
// writes the exit record to a file (on an SSH host); as tune-supervisor, the record file alone.
struct Sinks {
  std::string record_file;  // the exit record, written atomically
  int log_fd = -1;          // agent mode: the attempt log (O_APPEND)
  int event_fd = -1;        // agent mode, on the driver's machine: the pipe to the driver
  int ready_fd = -1;        // agent mode: closed once the attempt log names this supervisor
  int hold_fd = -1;         // agent mode: closed then too (the agent's lock on the log)
};

// Runs the attempt to its end and records it. Returns the exit status for the supervisor
// process: 0 once the exit is recorded, 3 if the trial could not be set up (then no record:
// the driver reports the supervisor died, with the reason in dir/stderr.log).
int supervise(const Attempt& a, const Sinks& sinks);

// `s` as the inside of a JSON string.
std::string json_escape(const std::string& s);

}  // namespace tune::agent
