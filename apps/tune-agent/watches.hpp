// What `tune-agent remote` watches for the driver, so that the driver reads a host's files only
// when something is there to read: each attempt's stdout.log growing (inotify) and, for a
// supervisor the agent did not start itself (one a resumed driver or an earlier agent started),
// its end (a pidfd).
//
// "output" goes at once for the first write after a quiet spell; the file's watch is then
// paused for kOutputGap, and if the file grew meanwhile one more "output" goes at the end of
// the gap. So the agent wakes at most 1000 / kOutputGap times a second per attempt however
// often the trial writes; writes to other files of the trial dir do not wake it (files made or
// renamed there do, and are passed over). A watch that cannot be made or stops working (the
// trial dir removed or replaced, stdout.log a link to something watched already, no inotify
// watches left) is said "unwatched": the driver then polls that attempt. An attempt's last writes
// before its supervisor ends may get no "output": "gone" means "look" too.
//
// An "output" carries the new bytes when they are few (at most kInline, and the new notes of
// stdout.times with them), so that the driver reads nothing over SFTP for a trial's results:
//   {"event":"output","id":..,"attempt":..,"size":S,"from":F,"data":B64,"times_from":T,"times":B64}
// `data` is stdout.log's bytes [F, F + n), `times` stdout.times's [T, T + m), both read at the
// event (the notes after the bytes: a note is written before the bytes it covers), S the size
// of stdout.log then. Each event goes on from where the last one ended; when more than kInline
// came, it carries no bytes, and the next one goes on from S (the driver reads the rest). The
// driver takes from an event what lies past the offsets it has read to.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tune::agent_app {

// Where the driver has read an attempt's stdout.log and stdout.times to (its output events
// carry the bytes after them); -1: it reads them itself (the events carry none).
struct WatchRead {
  int64_t output = -1;
  int64_t times = -1;
};

class Watches {
 public:
  static constexpr int64_t kOutputGap = 50;     // ms (the driver reads a printing trial as often)
  static constexpr int64_t kInline = 64 << 10;  // bytes of output an event carries at most
  // bytes queued for the driver above which events carry none (events.hpp: queue_output)
  static constexpr size_t kMaxBacklog = 256u << 10;
  using Read = WatchRead;

  Watches() = default;
  Watches(const Watches&) = delete;
  Watches& operator=(const Watches&) = delete;
  ~Watches();

  // Watches attempt `attempt` of trial `id`, whose trial dir is `dir`, and, when `supervisor`
  // > 0, that process's end (`started`, when not 0: its start time, start_ticks: a process
  // that took its pid is not it). Replaces the trial's earlier watch (an earlier attempt's: it
  // is superseded), also when this one cannot be made. "" or why it cannot; `gone_already` is
  // set when that supervisor is no longer there.
  std::string watch(const std::string& id, int attempt, const std::string& dir, pid_t supervisor,
                    uint64_t started, bool& gone_already, Read read = {});
  // Stops watching that attempt (its supervisor ended).
  void unwatch(const std::string& id, int attempt);
  // Sends `sig` to that attempt's watched supervisor `supervisor` through its pidfd (never to
  // a process that took its pid); false if it is not watched here (or has ended).
  bool signal(const std::string& id, int attempt, pid_t supervisor, int sig);
  // A line went to that attempt's stdin: its answer is said as soon as it is written, not
  // at the end of the gap after the last "output" (a step-mode trial's steps would wait for
  // that gap each).
  void expect_answer(const std::string& id, int attempt);
  // Says "output" for that attempt now, paused or not, if its stdout.log's size is not the one
  // its last event saw (its supervisor is about to say its exit: its last bytes go first).
  void flush(const std::string& id, int attempt);

  // The descriptors to wait on, appended to `fds`, and how long a wait may last (ms, -1: no
  // limit) before a paused watch is due.
  void add_fds(std::vector<pollfd>& fds) const;
  [[nodiscard]] int timeout_ms() const;
  // After a wait: `fds` as add_fds left them (from index `first`), read and acted on.
  void after_wait(const std::vector<pollfd>& fds, size_t first);

 private:
  struct Watch {
    int attempt = 0;
    std::string dir;
    int dir_wd = -1;   // the trial dir: stdout.log made or moved there; the dir going away
    int file_wd = -1;  // stdout.log written (-1: not there yet, or paused)
    int pidfd = -1;
    pid_t supervisor = -1;
    int64_t last_ms = INT64_MIN / 2;  // when its last output event went
    bool paused = false;              // file_wd removed until last_ms + kOutputGap
    int64_t size_then = -1;           // stdout.log's size when it was paused
    Read sent;                        // where its next event's bytes start
  };
  using Iter = std::unordered_map<std::string, Watch>::iterator;
  void output(Iter it, int64_t now_ms);
  // Adds the new bytes to `event` if they are few; the size of stdout.log (-1: unreadable).
  int64_t add_bytes(Watch& w, nlohmann::json& event);
  // Watches stdout.log if it is there ("" then, or if it is not there yet; else why not).
  std::string watch_file(Iter it);
  // A watch that stopped working: said "unwatched" and dropped after this wait's events.
  void broken(Iter it, const std::string& why);
  // Whether w.dir is still the dir its watch is on (after events were lost).
  bool same_dir(const Watch& w);
  void unwatch_file(Watch& w);
  void resume_paused(int64_t now_ms);
  void read_inotify(int64_t now_ms);
  void lost(Iter it, const std::string& why);
  void drop(Iter it);

  int inotify_fd_ = -1;
  std::unordered_map<std::string, Watch> watches_;  // by trial id
  std::unordered_map<int, std::string> by_wd_;      // inotify watch (dir or file) -> trial id
  std::vector<std::pair<std::string, std::string>> broken_;  // (trial id, why)
};

}  // namespace tune::agent_app
