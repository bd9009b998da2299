#include "stdin_lines.hpp"

#include "events.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace tune::agent_app {

using nlohmann::json;

StdinLines::~StdinLines() {
  for (auto& [id, t] : trials_)
    if (t.fd >= 0) ::close(t.fd);
}

void StdinLines::request(const json& req) {
  std::string id, dir, line;
  int attempt = 0;
  try {
    id = req.at("id").get<std::string>();
    attempt = req.at("attempt").get<int>();
    dir = req.at("dir").get<std::string>();
    line = req.at("line").get<std::string>();
  } catch (const std::exception& e) {
    return emit_error(std::string("bad stdin request: ") + e.what(), "stdin", id, attempt);
  }
  if (dir.empty() || dir[0] != '/' || line.find('\n') != std::string::npos)
    return emit_error(
        "bad stdin request: a trial dir that is not absolute, or a line with a "
        "newline in it",
        "stdin", id, attempt);
  auto [it, fresh] = trials_.try_emplace(id);
  Trial& t = it->second;
  if (!fresh && t.attempt != attempt) {  // (an earlier attempt's: its FIFO is gone)
    if (t.fd >= 0) ::close(t.fd);
    t = Trial{};
  }
  t.attempt = attempt;
  t.fifo = dir + "/stdin.fifo";
  if (t.queued + line.size() + 1 > kMaxQueued)
    return emit_error("cannot write to the stdin of trial " + id + ": more than " +
                          std::to_string(kMaxQueued) +
                          " bytes wait for it (it reads none): this line is dropped",
                      "stdin", id, attempt);
  if (t.lines.empty() && t.fd < 0) t.open_by = monotonic_ms() + kOpenWaitMs;
  t.lines.push_back(line + "\n");
  t.queued += t.lines.back().size();
  if (!t.blocked) pump(id, t);
}

void StdinLines::fail(std::map<std::string, Trial>::iterator it, const std::string& why) {
  emit_error(
      "cannot write to the stdin of trial " + it->first + " (" + it->second.fifo + "): " + why,
      "stdin", it->first, it->second.attempt);
  if (it->second.fd >= 0) ::close(it->second.fd);
  trials_.erase(it);
}

bool StdinLines::pump(const std::string& id, Trial& t) {
  auto it = trials_.find(id);
  if (t.fd < 0) {
    // (never through a link; a regular file put there is opened, looked at and left alone)
    t.fd = ::open(t.fifo.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (t.fd < 0) {
      int e = errno;
      // (not there yet, or not open yet: its supervisor makes it, then opens it; or an
      // earlier attempt's is still there: looked for again)
      if ((e == ENOENT || e == ENXIO) && (monotonic_ms() < t.open_by || live_(id, t.attempt)))
        return true;
      fail(it, e == ELOOP    ? "it is a symbolic link"
               : e == ENXIO  ? "nobody reads it (its attempt has ended)"
               : e == ENOENT ? "it is not there"
                             : std::strerror(e));
      return false;
    }
    struct stat st;
    if (::fstat(t.fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
      fail(it, "it is not a FIFO");
      return false;
    }
  }
  while (!t.lines.empty()) {
    const std::string& front = t.lines.front();
    ssize_t n = ::write(t.fd, front.data() + t.written, front.size() - t.written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      t.blocked = true;  // (written on as the trial reads)
      return true;
    }
    if (n < 0) {
      fail(it, errno == EPIPE ? "nobody reads it (its attempt has ended)" : std::strerror(errno));
      return false;
    }
    t.written += static_cast<size_t>(n);
    if (t.written == front.size()) {
      t.queued -= front.size();
      t.lines.pop_front();
      t.written = 0;
      emit(json{{"event", "written"}, {"id", id}, {"attempt", t.attempt}});
      wrote_(id, t.attempt);
    }
  }
  // All of it went: closed, so that a later attempt's new FIFO is the one opened next.
  ::close(t.fd);
  t.fd = -1;
  t.blocked = false;
  return true;
}

void StdinLines::forget(const std::string& id, int attempt) {
  auto it = trials_.find(id);
  if (it == trials_.end() || it->second.attempt != attempt) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  trials_.erase(it);
}

void StdinLines::add_fds(std::vector<pollfd>& fds) const {
  for (const auto& [id, t] : trials_)
    if (t.blocked && t.fd >= 0) fds.push_back({t.fd, POLLOUT, 0});
}

int StdinLines::timeout_ms() const {
  int64_t now = monotonic_ms(), best = -1;
  for (const auto& [id, t] : trials_)
    if (t.fd < 0 && !t.lines.empty()) {
      // (looked for every 50 ms, also past open_by while its supervisor runs)
      int64_t due = t.open_by > now ? std::min<int64_t>(t.open_by - now, 50) : 50;
      if (best < 0 || due < best) best = due;
    }
  return static_cast<int>(best);
}

void StdinLines::after_wait(const std::vector<pollfd>& fds) {
  std::vector<std::string> due;
  for (auto& [id, t] : trials_) {
    bool ready = t.fd < 0 && !t.lines.empty();
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
