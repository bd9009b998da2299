// The remote agent's file operations on trial dirs, asked by the driver (remote.hpp): moving a
// checkpoint a trial reported into its trial dir, and deleting one retention dropped
// (agent/file_ops.hpp does them). Each runs in a forked child, so that a checkpoint copied
// across filesystems for minutes holds up neither this agent's launches and events nor the
// driver's I/O thread for the host; the child's end is said in a "done" event (an adoption's
// child dies with the agent; a deletion's runs to its end). Those on one
// trial dir run one at a time, in the order asked (a trial's checkpoints are registered in
// that order); at most kAtOnce run at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <unordered_map>

namespace tune::agent_app {

class FileOps {
 public:
  static constexpr int kAtOnce = 4;

  // {"op":"adopt","req":N,"dir","path","dest","again"?} / {"op":"rm","req":N,"dir","name"}:
  // started, or queued behind those on the same dir. A request that cannot be read is
  // answered at once.
  void request(const nlohmann::json& req);
  // A child of the agent that ended: if it was one of these, its "done" is said.
  void reaped(pid_t pid, int status);

 private:
  struct Op {
    int64_t req = 0;
    bool adopt = false, again = false;
    std::string dir, path, name;  // (path: the reported dir; name: the dest, or what goes)
  };
  void start_next();
  void run(Op op);
  static void done(int64_t req, const std::string& error);

  std::deque<Op> queued_;
  std::set<std::string> busy_dirs_;
  struct Running {
    Op op;
    int fd = -1;  // the child's answer
  };
  std::unordered_map<pid_t, Running> running_;
};

}  // namespace tune::agent_app
