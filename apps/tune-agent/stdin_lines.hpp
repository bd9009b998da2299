// Lines for step-mode trials' stdin, asked by the driver (remote.hpp):
//   {"op":"stdin","id","attempt","dir","line","run","n"}
// Each line (a newline added) goes to DIR/stdin.fifo, which the attempt's supervisor holds open
// for reading, in the order asked per trial, without the agent ever waiting on it: the FIFO is
// opened non-blocking (right after the start it may not be there, or not open yet: looked for
// again for kOpenWaitMs, or kSupervisedWaitMs while a supervisor of that attempt the agent
// started runs), a line the pipe cannot take now is written as it drains. Only a FIFO is written
// to, and the FIFO itself is never a symbolic link followed.
//
// Each line once, whoever sends it: `run` (the driver's) and `n` (rising within a run) name the
// line, and DIR/stdin.sent records the last one written (stdin_record.hpp). A line is written
// only if the record names an earlier one; the record is updated just before its write, both
// under an flock of the record held only for that (never while the trial could react): a
// driver that lost its link sends the lines not said written again, to a new agent or through
// the host's shell, while the old agent may live on.
//
// Each line written whole (or found written already, with the number the record gave) is said:
//   {"event":"written","id","attempt","n"[,"already"]}
// A line that cannot go is said with an "error" event (op "stdin", naming the attempt and n)
// with a `code`: "lost" (no FIFO, something else in its place, no reader: no line will reach the
// trial) or "full" (this line dropped: more than kMaxQueued bytes wait for a trial that reads
// none).
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
  static constexpr int64_t kSupervisedWaitMs = 10000;
  // How long the record's lock may stay held by another process (a writer holds it for the
  // time of one write) before no line can go.
  static constexpr int64_t kLockWaitMs = 10000;
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
  struct Line {
    std::string text;  // (with its newline)
    std::string run;   // "": sent without a name (written as asked, no record kept)
    uint64_t n = 0;
    bool claimed = false;  // recorded as this agent's to write
  };
  struct Trial {
    int attempt = 0;
    std::string dir, fifo;
    std::deque<Line> lines;
    size_t written = 0;  // of the first line
    size_t queued = 0;   // bytes in lines
    int fd = -1;
    int record_fd = -1;        // DIR/stdin.sent
    int64_t open_from = 0;     // (this host's monotonic ms) since when its FIFO is looked for
    int64_t retry_at = -1;     // the record's lock was held: tried again then
    int64_t locked_from = -1;  // since when it is held
    uint64_t already = 0;      // the first line was found written: the record's number
    bool blocked = false;      // the pipe took no more: waiting for POLLOUT
  };
  enum class Claim { kWrite, kWritten, kLater, kFailed };
  enum class Open { kOpen, kLater, kFailed };
  // The trial's FIFO, opened (a FIFO, never through a link), or looked for again later, or
  // failed (said, and the trial's queue dropped).
  Open open_fifo(std::map<std::string, Trial>::iterator it);
  // Writes what it can; false (said, and the trial's queue dropped) on an error.
  bool pump(const std::string& id, Trial& t);
  // Whether the first line is to be written now (recorded as this agent's), was written
  // already, or the record's lock is held (later).
  Claim claim(std::map<std::string, Trial>::iterator it);
  void said_written(const std::string& id, Trial& t);
  void fail(std::map<std::string, Trial>::iterator it, const std::string& why, const char* code);
  static void close_fds(Trial& t);
  std::map<std::string, Trial> trials_;
  std::function<bool(const std::string&, int)> live_;
  std::function<void(const std::string&, int)> wrote_;
};

}  // namespace tune::agent_app
