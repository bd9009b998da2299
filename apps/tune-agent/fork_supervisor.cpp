#include "fork_supervisor.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "agent/dir_lock.hpp"

namespace tune::agent_app {

namespace {

// close_range(2), or one close(2) each where it fails (a kernel older than 5.9, a seccomp
// filter; the agent's descriptors are few and low: its first 1024 are enough).
void close_from_to(unsigned from, unsigned to) {
  if (::close_range(from, to, 0) == 0) return;
  for (unsigned fd = from; fd <= std::min(to, 1023u); ++fd) ::close(static_cast<int>(fd));
}

}  // namespace

FlockWait wait_for_flock(int fd, int wait_ms) {
  for (int waited_ms = 0;; waited_ms += 10) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return FlockWait::kLocked;
    if (errno != EWOULDBLOCK && errno != EINTR) return FlockWait::kFailed;
    if (waited_ms >= wait_ms) return FlockWait::kHeld;
    timespec ts{0, 10'000'000};
    ::nanosleep(&ts, nullptr);
  }
}

std::string flock_holder_text(const std::string& path) {
  int holder = tune::agent::flock_holder(path);
  return holder > 0 ? " (pid " + std::to_string(holder) + ")" : "";
}

void close_all_but(std::initializer_list<int> keep) {
  std::vector<int> kept(keep);
  std::sort(kept.begin(), kept.end());
  unsigned from = 3;
  for (int fd : kept) {
    if (fd < 0 || static_cast<unsigned>(fd) < from) continue;
    if (static_cast<unsigned>(fd) > from) close_from_to(from, static_cast<unsigned>(fd) - 1);
    from = static_cast<unsigned>(fd) + 1;
  }
  close_from_to(from, UINT_MAX);
}

namespace {

// In the forked child: becomes the attempt's supervisor.
int run_child(const tune::agent::Attempt& a, int log_fd, int events_fd, int ready_fd,
              const std::string& record_file, int hold_fd) {
  // (close-on-exec: the trial never gets it)
  int event_fd = events_fd >= 0 ? ::fcntl(events_fd, F_DUPFD_CLOEXEC, 3) : -1;
  int null_fd = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(null_fd, fd);
  // The agent's requests, its signalfd, its lock (a flock lives while any fd holds it) and its
  // watches stay the agent's.
  close_all_but({log_fd, event_fd, ready_fd, hold_fd});
  tune::agent::Sinks sinks;
  sinks.log_fd = log_fd;
  sinks.event_fd = event_fd;
  sinks.ready_fd = ready_fd;
  sinks.record_file = record_file;
  sinks.hold_fd = hold_fd;
  return tune::agent::supervise(a, sinks);
}

}  // namespace

pid_t fork_supervisor(const tune::agent::Attempt& a, int log_fd, int events_fd, std::string& error,
                      const std::string& record_file, int hold_fd) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    // (without it the agent could not wait for the log to name the supervisor)
    error = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    ::_exit(run_child(a, log_fd, events_fd, ready[1], record_file, hold_fd));
  }
  int fork_errno = errno;
  ::close(ready[1]);
  if (pid > 0) {
    // The child closes its end once the log names it (or dies).
    char byte;
    while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
    }
  }
  ::close(ready[0]);
  if (pid < 0) error = std::string("fork failed: ") + std::strerror(fork_errno);
  return pid;
}

}  // namespace tune::agent_app
