// tune-agent on an SSH worker host (`tune-agent remote SUPERVISOR`): the driver's one channel to
// the host for launches. Per launch request it makes the trial dir, removes the attempt's old
// exit record, and starts SUPERVISOR (tune-supervisor) in the background with the attempt's
// nonce on its stdin; it answers with the supervisor's pid and where the attempt's output
// starts, and says when a supervisor it started ends. The supervisors keep their own command
// lines (trial dir, attempt), which is how a later driver finds them again on the host; they
// lead their own sessions, so an agent that ends (its channel closed) leaves them running.
//
// Requests, one JSON object per line on stdin:
//   {"op":"launch","id","attempt","dir","record","argv":[...],"env":["K=V",...],"nonce"}
//   (argv: the supervisor's arguments; env: added to the agent's own environment)
// Events, one JSON object per line on stdout:
//   {"event":"ready","agent":PID}                         once, first
//   {"event":"launched","id","attempt","supervisor":PID,"offset":N}
//                                 N: stdout.log's size before the start (where output begins)
//   {"event":"gone","id","attempt","supervisor":PID,"status":S}   it ended (S: exit status,
//                                 or 128 + signal); with "error" and supervisor null when it
//                                 could not be started ("transient": true when it may start
//                                 if asked again: fork or exec failed, or the driver is gone)
//   {"event":"error","message"}                           a request that could not be read
#pragma once

#include <string>
#include <unordered_map>

#include "events.hpp"

namespace tune::agent_app {

class RemoteLauncher {
 public:
  explicit RemoteLauncher(std::string supervisor) : supervisor_(std::move(supervisor)) {}
  // One request line.
  void handle(const std::string& line);
  // Reaps the supervisors that ended and says so.
  void reap();

 private:
  std::string supervisor_;
  std::unordered_map<pid_t, Child> children_;
};

}  // namespace tune::agent_app
