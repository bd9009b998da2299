// The driver's end of a local tune-agent: the process, its request pipe and its event pipe.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::exec {

namespace fs = std::filesystem;

class AgentLink {
 public:
  AgentLink() = default;
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;
  ~AgentLink() { close(); }

  // Starts `agent` (tune-agent serve LOG) in its own session.
  [[nodiscard]] Result<void> start(const fs::path& agent, const fs::path& log);
  [[nodiscard]] bool running() const { return events_fd_ >= 0; }
  // The fd to poll for events (-1 when not running).
  [[nodiscard]] int fd() const { return events_fd_; }
  // Writes one request line (newline added). Fails if the agent is gone.
  [[nodiscard]] Result<void> send(const std::string& line);
  // The complete event lines that have arrived; on EOF (the agent is gone) running() turns false.
  [[nodiscard]] std::vector<std::string> read_events();
  // Ends the link: EOF on the agent's stdin makes it exit (supervisors go on).
  void close();
  // Ends the link and the agent (SIGKILL: a stopped one too), so that it never makes a launch
  // it still holds; for an agent given up on (supervisors go on).
  void kill();
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int requests_fd_ = -1, events_fd_ = -1;
  std::string buf_;
};

}  // namespace tune::exec
