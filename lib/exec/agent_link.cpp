#include "exec/agent_link.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/process.hpp"

extern char** environ;

namespace tune::exec {

namespace {
constexpr size_t kMaxEventLine = 1 << 20;  // the agent's lines are short; more is not the agent
constexpr int kSendTimeoutMs = 5000;
}  // namespace

Result<void> AgentLink::start(const fs::path& agent, const fs::path& log) {
  close();
  int req[2], ev[2];
  if (::pipe2(req, O_CLOEXEC) != 0) return fail("cannot start tune-agent: ", std::strerror(errno));
  if (::pipe2(ev, O_CLOEXEC) != 0) {
    ::close(req[0]), ::close(req[1]);
    return fail("cannot start tune-agent: ", std::strerror(errno));
  }
  std::string a0 = agent.string(), a1 = "serve", a2 = log.string();
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  posix_spawnattr_t attr;
  util::init_spawn_attrs(attr, POSIX_SPAWN_SETSID);  // no terminal signal reaches it
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, req[0], 0);
  posix_spawn_file_actions_adddup2(&fa, ev[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(req[0]);
  ::close(ev[1]);
  if (rc != 0) {
    ::close(req[1]), ::close(ev[0]);
    return fail("cannot start tune-agent '", a0, "': ", std::strerror(rc));
  }
  pid_ = pid;
  requests_fd_ = req[1];
  events_fd_ = ev[0];
  ::fcntl(events_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(requests_fd_, F_SETFL, O_NONBLOCK);
  return {};
}

Result<void> AgentLink::send(const std::string& line) {
  if (requests_fd_ < 0) return fail("tune-agent is not running");
  std::string out = line + "\n";
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::write(requests_fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // the agent is busy: wait a little, never forever
      pollfd p{requests_fd_, POLLOUT, 0};
      if (::poll(&p, 1, kSendTimeoutMs) == 0)
        return fail("tune-agent has not read a request for ", std::to_string(kSendTimeoutMs / 1000),
                    " s");
      continue;
    }
    if (n < 0) return fail("tune-agent is gone: ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return {};
}

std::vector<std::string> AgentLink::read_events() {
  std::vector<std::string> lines;
  if (events_fd_ < 0) return lines;
  char chunk[65536];
  for (;;) {
    ssize_t n = ::read(events_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: all read
    if (n == 0) {      // the agent exited (or was killed): its supervisors go on without it
      ::close(events_fd_);
      events_fd_ = -1;
      break;
    }
    buf_.append(chunk, static_cast<size_t>(n));
  }
  size_t start = 0;
  for (size_t nl; (nl = buf_.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.emplace_back(buf_, start, nl - start);
  buf_.erase(0, start);
  if (buf_.size() > kMaxEventLine) buf_.clear();
  if (events_fd_ < 0) close();
  return lines;
}

void AgentLink::kill() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
  close();
}

void AgentLink::close() {
  if (requests_fd_ >= 0) ::close(requests_fd_);
  if (events_fd_ >= 0) ::close(events_fd_);
  requests_fd_ = events_fd_ = -1;
  if (pid_ > 0) {
    // It exits at EOF on its stdin, once it has launched the requests it read: wait a moment
    // to reap it, but never kill it (a launch it has not made yet would be lost; a resuming
    // driver waits for it instead, see wait_for_agent). Left running, it is reaped by init
    // after this process exits.
    for (int i = 0; i < 50; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) != 0) break;
      timespec ts{0, 2'000'000};
      ::nanosleep(&ts, nullptr);
    }
    pid_ = -1;
  }
}

}  // namespace tune::exec
