// Lines for step-mode trials' stdin, asked by the driver (remote.hpp):
//   {"op":"stdin","id","attempt","dir","line"}
// Each line (a newline added) goes to DIR/stdin.fifo, which the attempt's supervisor holds open
// for reading, in the order asked per trial, without the agent ever waiting on it: the FIFO is
// opened non-blocking (it may not be there for a moment right after the start: looked for
// again until kOpenWaitMs), a line the pipe cannot take now is written as it drains. Only a
// FIFO is written to, never a link followed: a trial that put something else in its place gets
// an error, as does a line that cannot go (an "error" event, op "stdin", naming the trial).
// No event says that a line went: the trial's answer on its stdout does.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tune::agent_app {

class StdinLines {
 public:
  static constexpr int64_t kOpenWaitMs = 1000;
  // Bytes queued for one trial at most (a trial that reads nothing): more is refused.
  static constexpr size_t kMaxQueued = 1u << 20;

  StdinLines() = default;
  StdinLines(const StdinLines&) = delete;
  StdinLines& operator=(const StdinLines&) = delete;
  ~StdinLines();

  void request(const nlohmann::json& req);
  // The attempt ended: what is still queued for it is dropped, its FIFO closed.
  void forget(const std::string& id, int attempt);
  // What the agent waits on for them (FIFOs the pipe of which was full), and until when (ms;
  // -1: none) it must look again for a FIFO not there yet.
  void add_fds(std::vector<pollfd>& fds) const;
  [[nodiscard]] int timeout_ms() const;
  void after_wait(const std::vector<pollfd>& fds);

 private:
  struct Trial {
    int attempt = 0;
    std::string fifo;
    std::deque<std::string> lines;  // (each with its newline)
    size_t written = 0;             // of the first line
    size_t queued = 0;              // bytes in lines
    int fd = -1;
    int64_t open_by = 0;   // (this host's monotonic ms) the FIFO should be there by then
    bool blocked = false;  // the pipe took no more: waiting for POLLOUT
  };
  // Writes what it can; false (said, and the trial's queue dropped) on an error.
  bool pump(const std::string& id, Trial& t);
  void fail(std::map<std::string, Trial>::iterator it, const std::string& why);
  std::map<std::string, Trial> trials_;
};

}  // namespace tune::agent_app
