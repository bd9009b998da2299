// The driver's side of tune-agent's protocol: the event lines both agents send (`tune-agent
// serve` on this machine over a pipe, apps/tune-agent/main.cpp; `tune-agent remote` on an SSH
// host over a channel, apps/tune-agent/remote.hpp), read by one parser, and the requests of
// the remote agent. JSON stays in this one file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tune::exec {

struct AgentEvent {
  // kOutput: the attempt's stdout.log grew; kWatching / kUnwatched: the answer to a watch;
  // kStart / kExit: its supervisor's own (the trial runs; the attempt's exit record); kChanges:
  // what changed in its trial dir, looked at as it ended (before its exit: `data`, an answer
  // as agent/dir_changes.hpp gives it); kAlive: the agent's heartbeat; kDone: a file request
  // (`req`) is carried out (`error`: why not)
  enum class Kind {
    kReady,
    kLaunched,
    kGone,
    kError,
    kOutput,
    kWatching,
    kUnwatched,
    kStart,
    kExit,
    kChanges,
    kAlive,
    kDone,
    kWritten  // a stdin line went whole into the attempt's FIFO
  };
  Kind kind = Kind::kError;
  std::string id;
  int attempt = 0;
  int supervisor = -1;              // -1: none (a launch that failed before its supervisor ran)
  uint64_t offset = 0;              // launched: where the attempt's output starts in stdout.log
  int status = 0;                   // gone: the supervisor's exit status (128 + signal if killed)
  std::string error;                // gone without a supervisor, or an error event: why
  bool transient = false;           // gone without a supervisor: it may start if asked again
  bool watched = false;             // launched: its output events will come
  std::string op;                   // error: the request it answers ("launch", "watch"), if known
  int pid = -1;                     // start: the trial's pid
  uint64_t started = 0;             // start: and its start time (clock ticks since boot)
  uint64_t supervisor_started = 0;  // start: the supervisor's start time (the same)
  std::string line;                 // exit: the whole line, an exit record (exit_record.hpp)
  uint64_t times_offset = 0;        // launched: where its notes start in stdout.times
  // output: stdout.log's size when the agent looked, and, when the new bytes were few, they
  // (`data`, from offset `from`; -1: not carried) and the new notes of stdout.times (`times`,
  // from offset `times_from`)
  int64_t size = -1;
  int64_t from = -1;
  std::string data;  // (changes: the answer)
  int64_t times_from = -1;
  std::string times;
  int64_t req = -1;      // done: the request it answers
  uint64_t n = 0;        // written, or an error answering a stdin line: the line's number (0: none)
  uint64_t already = 0;  // written: found written before, by the record naming this number
  // An error answering a stdin line: no line can reach that attempt (code "lost": its FIFO is
  // gone, replaced or unread), not only this one dropped (code "full")
  bool stdin_lost = false;
};

// One event line; nullopt for a line that is not one.
[[nodiscard]] std::optional<AgentEvent> parse_agent_event(std::string_view line);

// What starts attempt `attempt` of trial `id` on a host: its supervisor (lib/agent/supervise.hpp)
// forked by the agent, running `argv` with `env` added to the agent's environment; `dir` is made
// and `record` (the exit record the supervisor writes) removed first.
struct RemoteLaunch {
  std::string id;
  int attempt = 0;
  std::string dir, record, nonce, lease;
  double orphan_timeout = 600, grace = 10;
  std::string cwd;
  bool fifo = false;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  // set: the supervisor writes it to dir/params.json if that is missing or other (the driver
  // places none over SFTP: one round trip per start, not five)
  std::optional<std::string> params;
  // set: when the attempt has ended, the agent looks at what changed in its trial dir (its
  // end-of-trial sync's look) and says it before relaying the exit
  bool changes_at_exit = false;
};
[[nodiscard]] std::string agent_launch_request(const RemoteLaunch& l);

// The request that has the agent watch attempt `attempt` of trial `id`, started by another
// agent: its output (in `dir`) and the end of its supervisor `supervisor` (started at
// `supervisor_started`, clock ticks since boot; 0: not known). Its output events carry the
// bytes after `offset` in stdout.log and `times_offset` in stdout.times, where the driver has
// read them to.
[[nodiscard]] std::string agent_watch_request(const std::string& id, int attempt,
                                              const std::string& dir, int supervisor,
                                              uint64_t supervisor_started, uint64_t offset,
                                              uint64_t times_offset);

// The file requests of the remote agent (apps/tune-agent/file_ops.hpp), each answered by a
// "done" event with its `req`: move the checkpoint dir `path` a trial reported into
// `dir`/`dest` (`again`: it may have been done already, then it is done), and delete
// `dir`/`name`.
[[nodiscard]] std::string agent_adopt_request(int64_t req, const std::string& dir,
                                              const std::string& path, const std::string& dest,
                                              bool again);
[[nodiscard]] std::string agent_rm_request(int64_t req, const std::string& dir,
                                           const std::string& name);

// Stop that attempt through its supervisor (SIGTERM; `now`: kill it at once), and one line for
// a step-mode attempt's stdin (its trial dir's stdin.fifo), line `n` (from 1, rising) of the
// driver's `run` (agent/stdin_record.hpp: written once, however often it is sent). A line
// written is said "written"; either gets an "error" event (op "signal" / "stdin", the attempt's
// id and number) when the remote agent cannot (remote.hpp). `line` must be UTF-8 without a
// newline (else: nullopt, sent some other way).
[[nodiscard]] std::string agent_signal_request(const std::string& id, int attempt, int supervisor,
                                               bool now);
[[nodiscard]] std::optional<std::string> agent_stdin_request(const std::string& id, int attempt,
                                                             const std::string& dir,
                                                             const std::string& line,
                                                             const std::string& run, uint64_t n);

}  // namespace tune::exec
