// Lines for step-mode trials' stdin, asked by the driver (remote.hpp):
//   {"op":"stdin","id","attempt","dir","line"}
// Each line (a newline added) goes to DIR/stdin.fifo, which the attempt's supervisor holds open
// for reading, in the order asked per trial, without the agent ever waiting on it: the FIFO is
// opened non-blocking (right after the start it may not be there, or not open yet: looked for
// again while a supervisor of that attempt the agent started runs, else for kOpenWaitMs), a line
// the pipe cannot take now is written as it drains. Only a FIFO is written to, and the FIFO itself
// is never a symbolic link followed: a trial that put something else in its place gets an
// error, as does a line that cannot go (an "error" event, op "stdin", naming the attempt).
// Each line written whole is said:
//   {"event":"written","id","attempt"}
// so that the driver knows which lines an agent that ended or went silent had not written.
#pragma once

#include <poll.h>

#include <cstdint>
#include <deque>
#include <functional>
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

  // `live(id, attempt)`: whether the agent's supervisor of that attempt runs; `wrote(id,
  // attempt)`: called as each line went whole.
  StdinLines(std::function<bool(const std::string&, int)> live,
             std::function<void(const std::string&, int)> wrote)
      : live_(std::move(live)), wrote_(std::move(wrote)) {}
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
  std::function<bool(const std::string&, int)> live_;
  std::function<void(const std::string&, int)> wrote_;
};

}  // namespace tune::agent_app
