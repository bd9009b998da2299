// One run of a short-lived command that is given some input on stdin (a callback): started
// without a shell in its own process group, its stdout and stderr to files, waited for up to a
// deadline and killed (its whole process group) past it. Blocking: for a worker thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tune::util {

namespace fs = std::filesystem;

struct CommandCall {
  std::vector<std::string> argv;           // argv[0] searched on PATH when it has no '/'
  fs::path cwd;                            // empty: the driver's
  std::map<std::string, std::string> env;  // added to the driver's environment
  std::string input;                       // written to its stdin, which is then closed
  fs::path stdout_file, stderr_file;       // truncated; empty: /dev/null
  double timeout_s = 60;
};

struct CallOutcome {
  enum class Kind { kOk, kFailed, kNotStarted, kTimedOut, kCancelled } kind = Kind::kOk;
  std::string detail;  // "exit code 3", "killed by signal 9", "No such file or directory"
};

// Runs `call` to its end, the deadline, or `cancel` turning true (checked every few ms); never
// leaves a zombie. A command that exits 0 without reading all of its input is kOk.
[[nodiscard]] CallOutcome run_command_call(const CommandCall& call,
                                           const std::atomic<bool>& cancel);

}  // namespace tune::util
