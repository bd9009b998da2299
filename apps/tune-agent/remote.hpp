// tune-agent on an SSH worker host (`tune-agent remote ATTEMPT_LOG`): the driver's one channel
// to the host for launches. Per launch request it makes the trial dir, removes the attempt's old
// exit record, and forks the attempt's supervisor (lib/agent/supervise.hpp: no exec), which
// names itself in ATTEMPT_LOG (the host's attempt log, lib/exec/attempt_log.hpp) before the
// agent answers with its pid and where the attempt's output starts; it relays the supervisor's
// own events (the trial started, with its pid; the attempt's exit record) and says when a
// supervisor it started ends. The log is how a later driver finds the attempts that still run
// there; the supervisors lead their own sessions, so an agent that ends (its channel closed) leaves
// them running. Each launch holds ATTEMPT_LOG.agent-lock from before the fork until the supervisor
// has named itself, and a resume reads the log under the same lock (shared): it never misses
// a launch an agent of the crashed driver was making. (Not for the agent's whole life, as on
// the driver's machine: an agent whose link was cut may live on there, idle, for as long as
// its sshd does not notice, and must not hold up the next connection's agent.)
//
// It also says when an attempt's stdout.log grows, so that the driver reads the host's files only
// then (watches.hpp): for the attempts it started, and for those the driver asks it to watch
// (started by an earlier agent or driver), whose end it reports too.
//
// Requests, one JSON object per line on stdin:
//   {"op":"launch","id","attempt","dir","record","nonce","lease","orphan_timeout","grace","cwd",
//    "fifo","argv":[...],"env":["K=V",...]}
//   (argv: the trial's command; env: added to the agent's own environment; the others as the
//   supervisor's, supervise.hpp, with `record` the exit record it writes besides the log)
//   (changes_at_exit, optional: when it has ended, the agent looks at what changed in its
//   trial dir for the driver's last sync of it, agent/dir_changes.hpp, and says so before its
//   exit)
//   {"op":"watch","id","attempt","dir","supervisor":PID}
//   {"op":"adopt","req":N,"dir","path","dest","again"?}   move the checkpoint dir `path` a trial
//                                 reported into dir/dest (agent/file_ops.hpp; again: the
//                                 request may have been carried out already: done if so)
//   {"op":"rm","req":N,"dir","name"}   delete dir/name (a checkpoint retention dropped)
//   (both in a child of the agent, file_ops.hpp: its loop goes on meanwhile)
//   {"op":"signal","id","attempt","supervisor":PID,"now":B}   stop that attempt: SIGTERM to
//                                 its supervisor (now: SIGUSR1, kill at once), then SIGCONT;
//                                 only to a supervisor of that attempt that the agent started
//                                 or watches (an "error" event, op "signal", if none)
//   {"op":"stdin","id","attempt","dir","line"}   one line to a step-mode attempt's stdin
//                                 (stdin_lines.hpp): "written" once it went whole, an "error"
//                                 event if it cannot go; dropped without a word if the
//                                 attempt ends first
// Events, one JSON object per line on stdout:
//   {"event":"ready","agent":PID}                         once, first
//   {"event":"launched","id","attempt","supervisor":PID,"offset":N,"watched":B}
//                                 N: stdout.log's size before the start (where output begins);
//                                 B: its output events will come
//   {"event":"start","id","attempt","supervisor","pid","started",...}   the supervisor's:
//                                 the trial runs (its pid and start time)
//   {"event":"exit","id","attempt","supervisor",...}   the supervisor's: its exit record
//                                 (exit_record.hpp), also written to `record`; before its
//                                 "gone". Either may be missing (relay.hpp): then the record
//                                 file is what says how the attempt ended
//   {"event":"changes","id","attempt","supervisor","answer"}   before the exit of an attempt
//                                 launched with changes_at_exit: what changed in its trial
//                                 dir (agent/dir_changes.hpp)
//   {"event":"alive"}             every kAliveMs while it waits for work (none while it
//                                 launches)
//   {"event":"output","id","attempt"}   its stdout.log grew (watches.hpp: at most one per 50
//                                 ms; the last writes before "gone" may get none)
//   {"event":"watching","id","attempt"}   the answer to a watch
//   {"event":"unwatched","id","attempt","error"}   a watch that could not be made, or that
//                                 stopped working (its trial dir removed): no more events
//   {"event":"gone","id","attempt","supervisor":PID,"status":S}   it ended (S: exit status,
//                                 or 128 + signal; -1 for a watched supervisor, which is not
//                                 the agent's child, also when it had ended before the watch)
//   {"event":"gone","id","attempt","supervisor":null,"status":-1,"error","transient":B}
//                                 it could not be started (B: it may start if asked again:
//                                 fork failed, or the driver is gone)
//   {"event":"done","req":N,"error"?}   an adopt or rm request is carried out (error: why
//                                 not)
//   {"event":"written","id","attempt"}   a stdin line went whole into the attempt's FIFO
//   {"event":"error","message","op"?,"id"?,"attempt"?}   a request that could not be read or
//                                 carried out (op, id and attempt: the request's, as far as
//                                 they could be read)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "agent/supervise.hpp"
#include "events.hpp"
#include "file_ops.hpp"
#include "relay.hpp"
#include "stdin_lines.hpp"
#include "watches.hpp"

namespace tune::agent_app {

class RemoteLauncher {
 public:
  // How often it says it is alive: the driver, on its own clock, takes a silence of a few of
  // these as an agent that is stopped or stuck, or a link that is gone, and then checks its
  // supervisors itself.
  static constexpr int64_t kAliveMs = 1000;

  RemoteLauncher(int log_fd, int lock_fd, std::string lock_path)
      : log_fd_(log_fd), lock_fd_(lock_fd), lock_path_(std::move(lock_path)) {}
  // One request line.
  void handle(const std::string& line);
  // Reaps the supervisors that ended and says so (after the events they sent before).
  void reap();
  // What it waits on besides its requests (serve(), main.cpp): its supervisors' events, and
  // the watches'.
  void add_fds(std::vector<pollfd>& fds) const {
    relay_.add_fd(fds);
    watches_.add_fds(fds);
    file_ops_.add_fds(fds);
    stdin_.add_fds(fds);
  }
  [[nodiscard]] int timeout_ms() const;
  void after_wait(const std::vector<pollfd>& fds, size_t first);

 private:
  // A launch request's fields.
  struct Request {
    std::string id, record;
    int attempt = 0;
    tune::agent::Attempt a;
    std::vector<std::string> args, env;
    std::optional<std::string> params;  // what its supervisor writes to params.json
    bool changes_at_exit = false;
  };
  static bool parse(const nlohmann::json& req, Request& l);
  std::string lock_log(bool& locked);
  void launch(const nlohmann::json& req);
  void watch(const nlohmann::json& req);
  void signal(const nlohmann::json& req);

  int log_fd_;   // the host's attempt log
  int lock_fd_;  // its lock (ATTEMPT_LOG.agent-lock), taken per launch
  std::string lock_path_;
  std::unordered_map<pid_t, Child> children_;
  // The attempts (id, attempt number) whose trial dir is looked at when they end: the dir, and
  // their supervisor.
  std::map<std::pair<std::string, int>, std::pair<std::string, pid_t>> look_at_exit_;
  int64_t next_alive_ms_ = 0;  // when "alive" is said next (this host's monotonic clock)
  EventRelay relay_;
  Watches watches_;
  FileOps file_ops_;
  StdinLines stdin_{
      [this](const std::string& id, int attempt) {
        for (const auto& [pid, c] : children_)
          if (c.id == id && c.attempt == attempt) return true;
        return false;
      },
      [this](const std::string& id, int attempt) { watches_.expect_answer(id, attempt); }};
  // Before a supervisor's exit is passed on: what its attempt printed since its last event,
  // and, if asked, what changed in its trial dir.
  void before_exit(const std::string& id, int attempt);
  std::function<void(const std::string&, int)> flush_ = [this](const std::string& id, int attempt) {
    before_exit(id, attempt);
  };
};

}  // namespace tune::agent_app
