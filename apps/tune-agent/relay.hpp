// On an SSH host, the supervisors' events reach the driver through their agent: each writes its
// "start" and "exit" lines into a pipe the agent reads and copies to its stdout, the SSH
// channel. (Not the channel itself: a supervisor holding the channel's pipe would keep it open
// after its agent ended, and the driver would never see that agent's end.) The pipe never
// blocks a supervisor: with its agent stopped and the pipe full, the line is dropped, and the
// driver reads the exit record file instead; with its agent gone, the write fails (EPIPE).
#pragma once

#include <poll.h>

#include <functional>
#include <string>
#include <vector>

namespace tune::agent_app {

class EventRelay {
 public:
  EventRelay();
  EventRelay(const EventRelay&) = delete;
  EventRelay& operator=(const EventRelay&) = delete;
  ~EventRelay();

  // What a supervisor writes its events into (-1: no pipe could be made; then none are sent).
  [[nodiscard]] int write_fd() const { return write_fd_; }
  // Its read end, appended to `fds`.
  void add_fd(std::vector<pollfd>& fds) const;
  // Copies every whole start or exit line the pipe holds to stdout (others are not a
  // supervisor's: dropped); before an exit line,
  // `before_exit` runs with its trial id and attempt (what the attempt printed goes first).
  void drain(const std::function<void(const std::string&, int)>& before_exit = {});

 private:
  int read_fd_ = -1, write_fd_ = -1;
  std::string buf_;
};

}  // namespace tune::agent_app
