#include "file_ops.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/file_ops.hpp"
#include "events.hpp"
#include "fork_supervisor.hpp"

namespace tune::agent_app {

using nlohmann::json;

namespace {

constexpr size_t kMaxError = 2000;  // (one write into the pipe, well under its capacity)

// kSilentMs, or (tests only) $TUNE_TEST_AGENT_SILENT_MS.
int64_t silent_ms() {
  static const int64_t ms = [] {
    const char* v = std::getenv("TUNE_TEST_AGENT_SILENT_MS");
    return v && std::atoll(v) > 0 ? std::atoll(v) : FileOps::kSilentMs;
  }();
  return ms;
}

}  // namespace

void FileOps::request(const json& req) {
  Op op;
  try {
    op.req = req.at("req").get<int64_t>();
    op.adopt = req.at("op").get<std::string>() == "adopt";
    op.dir = req.at("dir").get<std::string>();
    if (op.adopt) {
      op.path = req.at("path").get<std::string>();
      op.name = req.at("dest").get<std::string>();
      op.again = req.value("again", false);
    } else {
      op.name = req.at("name").get<std::string>();
    }
  } catch (const std::exception& e) {
    auto r = req.find("req");
    if (r == req.end() || !r->is_number_integer())
      return emit_error(std::string("bad file request: ") + e.what(), "file");
    return done(r->get<int64_t>(), std::string("bad request: ") + e.what());
  }
  if (op.dir.empty() || op.dir[0] != '/')
    return done(op.req, "not an absolute trial dir: " + op.dir);
  queued_.push_back(std::move(op));
  start_next();
}

void FileOps::start_next() {
  for (auto it = queued_.begin();
       it != queued_.end() && running_.size() < static_cast<size_t>(kAtOnce);) {
    if (busy_dirs_.count(it->dir)) {
      ++it;
      continue;
    }
    Op op = std::move(*it);
    it = queued_.erase(it);
    run(std::move(op));
  }
}

// In a child: its stdin, stdout and stderr /dev/null (stdout is the driver's channel). An
// adoption is killed with the agent (a driver that is gone asks again after its resume, or
// finds it done; a driver that gave up on this agent does it in the host's shell, and kills
// this agent first); a deletion runs to its end (nothing would delete the rest).
void FileOps::run(Op op) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return done(op.req, std::string("cannot make a pipe: ") + std::strerror(errno));
  pid_t agent = ::getpid();  // (before the fork)
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return done(op.req, std::string("cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    if (op.adopt) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != agent) ::_exit(1);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // (stdout: the pipe, where keep_alive_while's newlines go, then the answer)
    ::dup2(fds[1], 1);
    close_all_but({});  // (first: /dev/null then opens whatever the agent held)
    int null_fd = ::open("/dev/null", O_RDWR);
    ::dup2(null_fd, 0);
    ::dup2(null_fd, 2);
    if (null_fd > 2) ::close(null_fd);
    std::string error;
    if (!op.adopt)
      error = tune::agent::remove_entry(op.dir, op.name);
    else if (!op.again || !tune::agent::adopted_already(op.dir, op.path, op.name))
      error = tune::agent::adopt_dir(op.dir, op.path, op.name);
    error.resize(std::min(error.size(), kMaxError));
    (void)!::write(1, error.data(), error.size());
    ::_exit(error.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  busy_dirs_.insert(op.dir);
  running_[pid] = Running{std::move(op), fds[0], "", monotonic_ms(), false};
}

void FileOps::read_from(Running& r) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(r.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // (EAGAIN: nothing more now)
    if (n == 0) {
      ::close(r.fd);
      r.fd = -1;
      return;
    }
    r.heard = monotonic_ms();
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] != '\n' && r.said.size() < kMaxError) r.said += buf[i];
  }
}

void FileOps::add_fds(std::vector<pollfd>& fds) const {
  for (const auto& [pid, r] : running_)
    if (r.fd >= 0) fds.push_back({r.fd, POLLIN, 0});
}

int FileOps::timeout_ms() const {
  int64_t now = monotonic_ms(), best = -1;
  for (const auto& [pid, r] : running_)
    if (!r.killed) {
      int64_t due = std::max<int64_t>(0, r.heard + silent_ms() - now);
      if (best < 0 || due < best) best = due;
    }
  return static_cast<int>(best);
}

void FileOps::after_wait(const std::vector<pollfd>& fds) {
  for (const auto& p : fds)
    if (p.revents)
      for (auto& [pid, r] : running_)
        if (r.fd == p.fd) read_from(r);
  int64_t now = monotonic_ms();
  for (auto& [pid, r] : running_)
    if (!r.killed && now - r.heard >= silent_ms()) {
      ::kill(pid, SIGKILL);  // (its own child dies with it; the "done" comes when it is reaped)
      r.killed = true;
    }
}

void FileOps::reaped(pid_t pid, int status) {
  auto it = running_.find(pid);
  if (it == running_.end()) return;
  Running r = std::move(it->second);
  running_.erase(it);
  busy_dirs_.erase(r.op.dir);
  // (it has ended: all it wrote is in the pipe)
  if (r.fd >= 0) {
    read_from(r);
    if (r.fd >= 0) ::close(r.fd);
  }
  std::string error = std::move(r.said);
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (r.killed)
    error = "it said nothing for " + std::to_string(silent_ms()) + " ms (stopped or stuck): killed";
  else if (!ok && error.empty())
    error = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                : "it ended with status " + std::to_string(WEXITSTATUS(status));
  if (r.op.req >= 0) done(r.op.req, ok ? "" : error);
  // A copy that failed or was killed leaves its DEST.partial: deleted now, not at the next
  // copy to the same name (which may never come).
  if (r.op.adopt && !ok)
    queued_.push_back(Op{-1, false, false, r.op.dir, "", r.op.name + ".partial"});
  start_next();
}

void FileOps::done(int64_t req, const std::string& error) {
  json e{{"event", "done"}, {"req", req}};
  if (!error.empty()) e["error"] = error;
  emit(e);
}

}  // namespace tune::agent_app
