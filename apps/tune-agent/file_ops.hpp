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

#include <poll.h>

#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace tune::agent_app {

class FileOps {
 public:
  static constexpr int kAtOnce = 4;
  // A child says something (a newline) every 2 s while it copies or deletes (keep_alive_while
  // in agent/file_ops.cpp); one silent this long is stopped or stuck, and is killed.
  static constexpr int64_t kSilentMs = 30000;

  // {"op":"adopt","req":N,"dir","path","dest","again"?} / {"op":"rm","req":N,"dir","name"}:
  // started, or queued behind those on the same dir. A request that cannot be read is
  // answered at once.
  void request(const nlohmann::json& req);
  // A child of the agent that ended: if it was one of these, its "done" is said.
  void reaped(pid_t pid, int status);
  // What the agent waits on for them (their children's pipes), and until when (ms; -1: none).
  void add_fds(std::vector<pollfd>& fds) const;
  [[nodiscard]] int timeout_ms() const;
  // After a wait: what the children said is read, and one silent for kSilentMs is killed.
  void after_wait(const std::vector<pollfd>& fds);

 private:
  struct Op {
    int64_t req = 0;  // (-1: the agent's own, answered to nobody)
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
    int fd = -1;        // the child's stdout: its newlines, then its answer (-1 after EOF)
    std::string said;   // (newlines left out)
    int64_t heard = 0;  // when it last said something (this host's monotonic ms)
    bool killed = false;
  };
  static void read_from(Running& r);
  std::unordered_map<pid_t, Running> running_;
};

}  // namespace tune::agent_app
