// One long-lived child process spoken to in JSON lines (an external searcher): started without a
// shell in its own process group, stdin and stdout one Unix socket (so a write to a child that
// died fails with EPIPE instead of raising SIGPIPE), stderr appended to a log file. Every call
// blocks up to a deadline: it is meant for a worker thread, never for the controller's loop.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace tune::search {

namespace fs = std::filesystem;

// Where argv[0] resolves (PATH search when it has no '/', else relative to `cwd`); fails naming
// `what` when it is missing or not executable.
[[nodiscard]] Result<fs::path> resolve_command(const std::vector<std::string>& argv,
                                               const fs::path& cwd, const std::string& what);

class LineChild {
 public:
  LineChild() = default;
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;
  ~LineChild();  // kills and reaps the child if it still runs

  // Starts argv in `cwd` with the driver's environment plus `env` (replacing same-named ones).
  [[nodiscard]] Result<void> start(const std::vector<std::string>& argv, const fs::path& cwd,
                                   const std::map<std::string, std::string>& env,
                                   const fs::path& stderr_log);
  // Writes `line` and a newline; fails if the child is gone or does not read by `timeout_s`.
  [[nodiscard]] Result<void> send(const std::string& line, double timeout_s);
  // The next line the child writes (without the newline). Fails on end of file ("exited"), on a
  // line longer than `max_bytes`, or after `timeout_s` ("no answer").
  [[nodiscard]] Result<std::string> read_line(double timeout_s, size_t max_bytes);
  // How it ended ("exit code 3", "killed by signal 9 (SIGKILL)"), waiting up to `wait_s` for it;
  // "still running" if it has not ended by then.
  [[nodiscard]] std::string exit_text(double wait_s);
  // Closes its stdin, waits up to `grace_s` for it to exit, then kills its process group.
  void stop(double grace_s);
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  void kill_now();
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;  // bytes read past the last line returned
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace tune::search
