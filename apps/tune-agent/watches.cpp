#include "watches.hpp"

#include "agent/supervise.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "events.hpp"
#include "util/base64.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // (the same on every architecture)
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace tune::agent_app {

using nlohmann::json;

namespace {

int64_t size_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// A regular file of the trial dir, opened to read (never a FIFO's or a link's wait); -1 if not.
struct ReadFile {
  int fd = -1;
  int64_t size = -1;
  explicit ReadFile(const std::string& path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size = st.st_size;
  }
  ~ReadFile() {
    if (fd >= 0) ::close(fd);
  }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  // Bytes [from, end) as base64, if at most `most` and all of them could be read.
  bool read(int64_t from, int64_t end, int64_t most, std::string& b64) const {
    if (size < 0 || from < 0 || end < from || end - from > most) return false;
    if (end == from) return true;  // (nothing new: no read, also of a file not there)
    std::string bytes(static_cast<size_t>(end - from), '\0');
    for (size_t got = 0; got < bytes.size();) {
      ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got,
                          static_cast<off_t>(from + static_cast<int64_t>(got)));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    util::base64_encode(bytes, b64);
    return true;
  }
};

constexpr uint32_t kDirEvents =
    IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

}  // namespace

Watches::~Watches() {
  for (auto& [id, w] : watches_)
    if (w.pidfd >= 0) ::close(w.pidfd);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

std::string Watches::watch(const std::string& id, int attempt, const std::string& dir,
                           pid_t supervisor, uint64_t started, bool& gone_already, Read read) {
  gone_already = false;
  if (auto old = watches_.find(id); old != watches_.end()) drop(old);
  if (inotify_fd_ < 0) inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return std::string("inotify: ") + std::strerror(errno);
  int pidfd = -1;
  if (supervisor > 0) {
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, supervisor, 0));
    if (pidfd < 0 && errno == ESRCH) {
      gone_already = true;
      return "supervisor " + std::to_string(supervisor) + " is gone";
    }
    if (pidfd < 0) return std::string("pidfd_open: ") + std::strerror(errno);
    // (read after the pidfd is open: the process it names, unless that has ended since, which
    // its watch says at once anyway)
    if (started != 0 && agent::start_ticks(supervisor) != started) {
      ::close(pidfd);
      gone_already = true;
      return "supervisor " + std::to_string(supervisor) + " is gone (its pid is another process's)";
    }
  }
  int wd = ::inotify_add_watch(inotify_fd_, dir.c_str(), kDirEvents);
  if (wd < 0) {
    int e = errno;
    if (pidfd >= 0) ::close(pidfd);
    return "cannot watch " + dir + ": " + std::strerror(e);
  }
  if (by_wd_.count(wd)) {  // (another trial's dir: not this attempt's to watch)
    if (pidfd >= 0) ::close(pidfd);
    return dir + " is watched for another trial already";
  }
  Watch w;
  w.attempt = attempt;
  w.dir = dir;
  w.dir_wd = wd;
  w.pidfd = pidfd;
  w.supervisor = supervisor;
  w.sent = read;
  auto it = watches_.insert_or_assign(id, std::move(w)).first;
  by_wd_[wd] = id;
  // (if stdout.log is not there yet, its creation is seen on the dir)
  if (std::string why = watch_file(it); !why.empty()) {
    drop(it);
    return why;
  }
  return "";
}

std::string Watches::watch_file(Iter it) {
  Watch& w = it->second;
  if (w.file_wd >= 0 || w.paused) return "";
  std::string path = w.dir + "/stdout.log";
  int wd = ::inotify_add_watch(inotify_fd_, path.c_str(), IN_MODIFY | IN_DONT_FOLLOW);
  if (wd < 0 && errno == ENOENT) return "";
  if (wd < 0) return "cannot watch " + path + ": " + std::strerror(errno);
  // A watch number this instance has already is another file's (stdout.log a hard link to
  // it) or the dir's own: adding it again changed that watch's mask (to the same IN_MODIFY).
  if (by_wd_.count(wd)) return path + " is not a file of its own";
  // A symlink's own inode is watched (IN_DONT_FOLLOW): it would never say the output grew.
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    ::inotify_rm_watch(inotify_fd_, wd);
    return path + " is not a regular file";
  }
  w.file_wd = wd;
  by_wd_[wd] = it->first;
  return "";
}

void Watches::broken(Iter it, const std::string& why) {
  broken_.emplace_back(it->first, why);
}

bool Watches::same_dir(const Watch& w) {
  // (the kernel gives the watch it has for that inode: another number is another dir, one
  // made in its place, even with a reused inode number)
  int wd = ::inotify_add_watch(inotify_fd_, w.dir.c_str(), kDirEvents | IN_MASK_ADD);
  if (wd >= 0 && wd != w.dir_wd && !by_wd_.count(wd)) ::inotify_rm_watch(inotify_fd_, wd);
  return wd == w.dir_wd;
}

void Watches::unwatch_file(Watch& w) {
  if (w.file_wd < 0) return;
  by_wd_.erase(w.file_wd);  // (first: the IN_IGNORED that follows finds no watch)
  ::inotify_rm_watch(inotify_fd_, w.file_wd);
  w.file_wd = -1;
}

void Watches::drop(Iter it) {
  Watch& w = it->second;
  unwatch_file(w);
  if (auto b = by_wd_.find(w.dir_wd); b != by_wd_.end() && b->second == it->first) {
    by_wd_.erase(b);
    ::inotify_rm_watch(inotify_fd_, w.dir_wd);
  }
  if (w.pidfd >= 0) ::close(w.pidfd);
  watches_.erase(it);
}

bool Watches::signal(const std::string& id, int attempt, pid_t supervisor, int sig) {
  auto it = watches_.find(id);
  if (it == watches_.end() || it->second.attempt != attempt ||
      it->second.supervisor != supervisor || it->second.pidfd < 0)
    return false;
  return ::syscall(SYS_pidfd_send_signal, it->second.pidfd, sig, nullptr, 0) == 0;
}

void Watches::unwatch(const std::string& id, int attempt) {
  if (auto it = watches_.find(id); it != watches_.end() && it->second.attempt == attempt) drop(it);
}

void Watches::lost(Iter it, const std::string& why) {
  emit(json{
      {"event", "unwatched"}, {"id", it->first}, {"attempt", it->second.attempt}, {"error", why}});
  drop(it);
}

void Watches::add_fds(std::vector<pollfd>& fds) const {
  if (inotify_fd_ >= 0) fds.push_back({inotify_fd_, POLLIN, 0});
  for (const auto& [id, w] : watches_)
    if (w.pidfd >= 0) fds.push_back({w.pidfd, POLLIN, 0});
}

int Watches::timeout_ms() const {
  int64_t now = monotonic_ms();
  int64_t best = -1;
  for (const auto& [id, w] : watches_)
    if (w.paused) {
      int64_t due = std::max<int64_t>(0, w.last_ms + kOutputGap - now);
      if (best < 0 || due < best) best = due;
    }
  return static_cast<int>(best);
}

// Says "output" and pauses the file's watch for kOutputGap (a paused one is looked at then).
void Watches::output(Iter it, int64_t now) {
  Watch& w = it->second;
  if (w.paused) return;
  w.last_ms = now;
  // The size before the event goes: a write after the event (after the driver's look, say)
  // must show at the gap's end.
  unwatch_file(w);
  w.paused = true;
  json event{{"event", "output"}, {"id", it->first}, {"attempt", w.attempt}};
  w.size_then = w.sent.output < 0 ? size_of(w.dir + "/stdout.log") : add_bytes(w, event);
  emit(event);
}

void Watches::expect_answer(const std::string& id, int attempt) {
  auto it = watches_.find(id);
  if (it == watches_.end() || it->second.attempt != attempt) return;
  Watch& w = it->second;
  w.last_ms = INT64_MIN / 2;  // (the next write is said at once)
  if (!w.paused) return;
  w.paused = false;
  if (std::string why = watch_file(it); !why.empty()) return broken(it, why);
  if (size_of(w.dir + "/stdout.log") != w.size_then) output(it, monotonic_ms());
}

void Watches::flush(const std::string& id, int attempt) {
  auto it = watches_.find(id);
  if (it == watches_.end() || it->second.attempt != attempt) return;
  Watch& w = it->second;
  if (w.sent.output < 0 || size_of(w.dir + "/stdout.log") == w.sent.output) return;
  json event{{"event", "output"}, {"id", id}, {"attempt", attempt}};
  int64_t size = add_bytes(w, event);
  if (w.paused) w.size_then = size;  // (the gap's end says only what comes after)
  emit(event);
}

int64_t Watches::add_bytes(Watch& w, json& event) {
  ReadFile out(w.dir + "/stdout.log");
  if (out.size < 0) return -1;
  event["size"] = out.size;
  // (stdout.log read first: the notes read after it cover all of its bytes read)
  std::string data, notes;
  ReadFile times(w.dir + "/stdout.times");
  // (none yet: its supervisor writes the first note with the first line of output)
  if (times.fd < 0 && errno == ENOENT) times.size = 0;
  // Nothing carried while the driver has not read what went before (a slow link, or a driver
  // busy elsewhere): it reads the bytes itself, and the agent's own lines go out meanwhile.
  bool carried = queued_output() <= kMaxBacklog &&
                 out.read(w.sent.output, out.size, kInline, data) &&
                 times.read(w.sent.times, times.size, kInline, notes);
  if (carried) {
    event["from"] = w.sent.output;
    event["data"] = std::move(data);
    event["times_from"] = w.sent.times;
    event["times"] = std::move(notes);
  }
  // (not carried: the driver reads up to here itself; a stdout.times that cannot be read, or
  // stdout.log shrunk, leave the events without bytes until the sizes make sense again)
  w.sent.output = out.size;
  w.sent.times = times.size < 0 ? w.sent.times : times.size;
  return out.size;
}

// Paused watches whose gap is over: watched again, and one more "output" if the file grew.
void Watches::resume_paused(int64_t now) {
  for (auto it = watches_.begin(); it != watches_.end(); ++it) {
    Watch& w = it->second;
    if (!w.paused || now - w.last_ms < kOutputGap) continue;
    w.paused = false;
    // (watched before the size is read: a write after it is seen either way)
    if (std::string why = watch_file(it); !why.empty()) broken(it, why);
    if (size_of(w.dir + "/stdout.log") != w.size_then) output(it, now);
  }
}

void Watches::read_inotify(int64_t now) {
  alignas(inotify_event) char buf[16384];
  for (int reads = 0; reads < 64; ++reads) {  // (then back to the loop: requests go first)
    ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {  // events were lost: every attempt may have output,
        for (auto it = watches_.begin(); it != watches_.end(); ++it) {
          output(it, now);
          // and a dir may have gone
          if (!same_dir(it->second))
            broken(it, "its trial dir " + it->second.dir + " was removed or replaced");
        }
        continue;
      }
      auto b = by_wd_.find(ev->wd);
      if (b == by_wd_.end()) continue;
      auto it = watches_.find(b->second);
      if (it == watches_.end()) continue;
      Watch& w = it->second;
      if (ev->wd == w.file_wd) {
        if (ev->mask & IN_IGNORED) {  // stdout.log removed: its next one is seen on the dir
          by_wd_.erase(b);
          w.file_wd = -1;
        } else {
          output(it, now);
        }
      } else if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT)) {
        broken(it, "its trial dir " + w.dir + " was removed or moved");
      } else if (ev->len > 0 && std::strcmp(ev->name, "stdout.log") == 0) {
        // A new stdout.log: watched, and said only if it holds something (the supervisor
        // makes it empty; its first write then goes out at once, not after a pause).
        if (std::string why = watch_file(it); !why.empty()) broken(it, why);
        if (size_of(w.dir + "/stdout.log") > 0) output(it, now);
      }
    }
  }
}

void Watches::after_wait(const std::vector<pollfd>& fds, size_t first) {
  int64_t now = monotonic_ms();
  std::vector<std::string> ended;
  for (size_t i = first; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    if (fds[i].fd == inotify_fd_) {
      read_inotify(now);
      continue;
    }
    for (const auto& [id, w] : watches_)
      if (w.pidfd == fds[i].fd) ended.push_back(id);
  }
  resume_paused(now);
  // A supervisor it did not start ended (its exit status is its parent's to know).
  for (const auto& id : ended) {
    auto it = watches_.find(id);
    if (it == watches_.end()) continue;
    emit(json{{"event", "gone"},
              {"id", id},
              {"attempt", it->second.attempt},
              {"supervisor", it->second.supervisor},
              {"status", -1}});
    drop(it);
  }
  // Watches that stopped working: "unwatched" (the driver looks at those attempts itself).
  for (const auto& [id, why] : std::exchange(broken_, {}))
    if (auto it = watches_.find(id); it != watches_.end()) lost(it, why);
}

}  // namespace tune::agent_app
