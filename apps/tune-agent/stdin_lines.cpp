#include "stdin_lines.hpp"

#include "agent/stdin_record.hpp"
#include "events.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace tune::agent_app {

using nlohmann::json;

namespace {

// An "error" event answering a stdin request: its code says whether any line can still go.
void stdin_error(const std::string& message, const std::string& id, int attempt, uint64_t n,
                 const char* code) {
  json e{{"event", "error"}, {"message", message}, {"op", "stdin"}, {"code", code}};
  if (!id.empty()) e["id"] = id;
  if (attempt > 0) e["attempt"] = attempt;
  if (n > 0) e["n"] = n;
  emit(e);
}

}  // namespace

StdinLines::~StdinLines() {
  for (auto& [id, t] : trials_) close_fds(t);
}

void StdinLines::close_fds(Trial& t) {
  if (t.fd >= 0) ::close(t.fd);
  if (t.record_fd >= 0) ::close(t.record_fd);
  t.fd = t.record_fd = -1;
}

void StdinLines::request(const json& req) {
  std::string id, dir, line, run;
  int attempt = 0;
  uint64_t n = 0;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    dir = req.at("dir").get<std::string>();
    line = req.at("line").get<std::string>();
    if (req.contains("run")) {
      run = req.at("run").get<std::string>();
      n = req.at("n").get<uint64_t>();
    }
  } catch (const std::exception& e) {
    return emit_error(std::string("bad stdin request: ") + e.what(), "stdin", id, attempt);
  }
  if (dir.empty() || dir[0] != '/' || line.find('\n') != std::string::npos ||
      (req.contains("run") && (!agent::valid_stdin_run(run) || n == 0)))
    return emit_error(
        "bad stdin request: a trial dir that is not absolute, a line with a newline in it, or "
        "a run that is not 1-32 hex digits with an n of 1 or more",
        "stdin", id, attempt);
  auto [it, fresh] = trials_.try_emplace(id);
  Trial& t = it->second;
  if (!fresh && t.attempt != attempt) {  // (an earlier attempt's: its FIFO is gone)
    close_fds(t);
    t = Trial{};
  }
  t.attempt = attempt;
  t.dir = dir;
  t.fifo = dir + "/stdin.fifo";
  if (t.queued + line.size() + 1 > kMaxQueued)
    return stdin_error("cannot write to the stdin of trial " + id + ": more than " +
                           std::to_string(kMaxQueued) +
                           " bytes wait for it (it reads none): this line is dropped",
                       id, attempt, n, "full");
  if (t.lines.empty() && t.fd < 0) t.open_from = monotonic_ms();
  t.lines.push_back({line + "\n", run, n});
  t.queued += t.lines.back().text.size();
  if (!t.blocked && t.retry_at < 0) pump(id, t);
}

void StdinLines::fail(std::map<std::string, Trial>::iterator it, const std::string& why,
                      const char* code) {
  Trial& t = it->second;
  stdin_error("cannot write to the stdin of trial " + it->first + " (" + t.fifo + "): " + why,
              it->first, t.attempt, t.lines.empty() ? 0 : t.lines.front().n, code);
  close_fds(t);
  trials_.erase(it);
}

StdinLines::Claim StdinLines::claim(std::map<std::string, Trial>::iterator it) {
  Trial& t = it->second;
  Line& line = t.lines.front();
  if (line.run.empty() || line.claimed) return Claim::kWrite;
  if (t.record_fd < 0) {
    std::string path = t.dir + "/" + agent::kStdinRecordName;
    t.record_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    // (a hard link would have it written into a file elsewhere)
    struct stat st;
    if (t.record_fd < 0 || ::fstat(t.record_fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_nlink != 1) {
      fail(it,
           std::string("its record ") + agent::kStdinRecordName + " cannot be used: " +
               (t.record_fd < 0 ? std::strerror(errno) : "it is not a plain file of its own"),
           "lost");
      return Claim::kFailed;
    }
  }
  if (::flock(t.record_fd, LOCK_EX | LOCK_NB) != 0) {
    // (another writer holds it for a moment; one that holds it for long is not a writer)
    if (t.locked_from < 0) t.locked_from = monotonic_ms();
    if (monotonic_ms() - t.locked_from < kLockWaitMs) return Claim::kLater;
    fail(it, std::string("its record ") + agent::kStdinRecordName + " stays locked", "lost");
    return Claim::kFailed;
  }
  t.locked_from = -1;
  auto rec = agent::read_stdin_record(t.record_fd);
  bool written = agent::stdin_record_covers(rec, line.run, line.n);
  if (written) {
    t.already = rec->n;  // (by an agent before this one, or the host's shell)
  } else {
    // Recorded before it is written, and unlocked before the trial can see it (one that
    // stops this agent as it reads the line must not find the record locked): the line is
    // this agent's to write now.
    std::string text = agent::stdin_record_text({line.run, line.n});
    (void)!::pwrite(t.record_fd, text.data(), text.size(), 0);
    line.claimed = true;
  }
  ::flock(t.record_fd, LOCK_UN);
  if (written) return Claim::kWritten;
  return Claim::kWrite;
}

void StdinLines::said_written(const std::string& id, Trial& t) {
  const Line& front = t.lines.front();
  json e{{"event", "written"}, {"id", id}, {"attempt", t.attempt}};
  if (front.n > 0) e["n"] = front.n;
  // (found written already: the line the record names, which the driver checks it did send)
  if (t.already > 0) e["already"] = std::exchange(t.already, 0);
  emit(e);
  t.queued -= front.text.size();
  t.lines.pop_front();
  t.written = 0;
  wrote_(id, t.attempt);
}

StdinLines::Open StdinLines::open_fifo(std::map<std::string, Trial>::iterator it) {
  Trial& t = it->second;
  if (t.fd >= 0) return Open::kOpen;
  // (never through a link; a regular file put there is opened, looked at and left alone)
  t.fd = ::open(t.fifo.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (t.fd < 0) {
    int e = errno;
    // (not there yet, or not open yet: its supervisor makes it, then opens it; or an
    // earlier attempt's is still there: looked for again)
    int64_t waited = monotonic_ms() - t.open_from;
    if ((e == ENOENT || e == ENXIO) &&
        (waited < kOpenWaitMs || (waited < kSupervisedWaitMs && live_(it->first, t.attempt))))
      return Open::kLater;
    fail(it,
         e == ELOOP    ? "it is a symbolic link"
         : e == ENXIO  ? "nobody reads it (its attempt has ended, or it was replaced)"
         : e == ENOENT ? "it is not there"
                       : std::strerror(e),
         "lost");
    return Open::kFailed;
  }
  struct stat st;
  if (::fstat(t.fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
    fail(it, "it is not a FIFO", "lost");
    return Open::kFailed;
  }
  return Open::kOpen;
}

bool StdinLines::pump(const std::string& id, Trial& t) {
  auto it = trials_.find(id);
  t.retry_at = -1;
  if (auto o = open_fifo(it); o != Open::kOpen) return o == Open::kLater;
  while (!t.lines.empty()) {
    auto c = claim(it);
    if (c == Claim::kFailed) return false;
    if (c == Claim::kLater) {  // (another writer holds the record for a moment)
      t.retry_at = monotonic_ms() + 10;
      return true;
    }
    if (c == Claim::kWritten) {
      said_written(id, t);
      continue;
    }
    const Line& front = t.lines.front();
    ssize_t n = ::write(t.fd, front.text.data() + t.written, front.text.size() - t.written);
    int e = errno;
    if (n < 0 && e == EINTR) continue;
    if (n < 0 && e == EAGAIN) {
      t.blocked = true;  // (written on as the trial reads)
      return true;
    }
    if (n < 0) {
      fail(it, e == EPIPE ? "nobody reads it (its attempt has ended)" : std::strerror(e), "lost");
      return false;
    }
    t.written += static_cast<size_t>(n);
    if (t.written == front.text.size()) said_written(id, t);
  }
  // All of it went: closed, so that a later attempt's new FIFO is the one opened next.
  close_fds(t);
  t.blocked = false;
  return true;
}

void StdinLines::forget(const std::string& id, int attempt) {
  auto it = trials_.find(id);
  if (it == trials_.end() || it->second.attempt != attempt) return;
  close_fds(it->second);
  trials_.erase(it);
}

void StdinLines::add_fds(std::vector<pollfd>& fds) const {
  for (const auto& [id, t] : trials_)
    if (t.blocked && t.fd >= 0) fds.push_back({t.fd, POLLOUT, 0});
}

int StdinLines::timeout_ms() const {
  int64_t now = monotonic_ms(), best = -1;
  for (const auto& [id, t] : trials_) {
    int64_t due = -1;
    if (t.retry_at >= 0)
      due = std::max<int64_t>(0, t.retry_at - now);
    else if (t.fd < 0 && !t.lines.empty())
      due = 50;  // (a FIFO not there yet: looked for every 50 ms)
    if (due >= 0 && (best < 0 || due < best)) best = due;
  }
  return static_cast<int>(best);
}

void StdinLines::after_wait(const std::vector<pollfd>& fds) {
  std::vector<std::string> due;
  int64_t now = monotonic_ms();
  for (auto& [id, t] : trials_) {
    bool ready = (t.fd < 0 && !t.lines.empty()) || (t.retry_at >= 0 && t.retry_at <= now);
    if (t.blocked)
      for (const auto& p : fds)
        if (p.fd == t.fd && p.revents) ready = true;
    if (ready) due.push_back(id);
  }
  for (const auto& id : due) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    it->second.blocked = false;
    pump(id, it->second);
  }
}

}  // namespace tune::agent_app
