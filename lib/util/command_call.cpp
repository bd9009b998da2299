#include "util/command_call.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "util/clock.hpp"

extern char** environ;

namespace tune::util {

namespace {

std::string status_text(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

// Everything the child needs, laid out before fork (only async-signal-safe calls after it).
struct Prepared {
  std::vector<char*> argv;
  std::vector<std::string> env_store;
  std::vector<char*> envp;
  std::string cwd, out, err;
};

void prepare(const CommandCall& call, Prepared& p) {
  for (const auto& a : call.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!call.env.count(std::string(kv.substr(0, kv.find('='))))) p.env_store.emplace_back(kv);
  }
  for (const auto& [k, v] : call.env) p.env_store.push_back(k + "=" + v);
  for (auto& s : p.env_store) p.envp.push_back(s.data());
  p.envp.push_back(nullptr);
  p.cwd = call.cwd.string();
  p.out = call.stdout_file.empty() ? "/dev/null" : call.stdout_file.string();
  p.err = call.stderr_file.empty() ? "/dev/null" : call.stderr_file.string();
}

[[noreturn]] void child(const Prepared& p, int in_fd, int err_pipe, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // fires when the forking (worker) thread ends
  if (::getppid() != parent) ::_exit(127);
  ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C goes to the driver only
  int o = ::open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int e = ::open(p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (o < 0 || e < 0 || ::dup2(in_fd, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 ||
      (!p.cwd.empty() && ::chdir(p.cwd.c_str()) != 0)) {
    int err = errno;
    (void)!::write(err_pipe, &err, sizeof err);
    ::_exit(127);
  }
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execvpe(p.argv[0], p.argv.data(), p.envp.data());
  int err = errno;
  (void)!::write(err_pipe, &err, sizeof err);
  ::_exit(127);
}

// Writes what it can of `data` without blocking; closes `fd` (sets it to -1) once all is
// written or the reader is gone.
void feed(int& fd, const std::string& data, size_t& off) {
  while (fd >= 0 && off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {  // it stopped reading: its exit status says whether that was wrong
      off = data.size();
    }
  }
  if (fd >= 0 && off >= data.size()) {
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    fd = -1;
  }
}

}  // namespace

CallOutcome run_command_call(const CommandCall& call, const std::atomic<bool>& cancel) {
  using Kind = CallOutcome::Kind;
  if (call.argv.empty() || call.argv[0].empty()) return {Kind::kNotStarted, "empty command"};
  Prepared p;
  prepare(call, p);
  int sv[2], err_pipe[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return {Kind::kNotStarted, std::strerror(errno)};
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(sv[0]), ::close(sv[1]);
    return {Kind::kNotStarted, std::strerror(e)};
  }
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) child(p, sv[1], err_pipe[1], parent);
  int fork_errno = errno;
  ::close(sv[1]);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(sv[0]), ::close(err_pipe[0]);
    return {Kind::kNotStarted, std::strerror(fork_errno)};
  }
  int child_errno = 0;
  ssize_t got;
  while ((got = ::read(err_pipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  ::close(err_pipe[0]);
  int status = 0;
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    ::close(sv[0]);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return {Kind::kNotStarted, std::strerror(child_errno)};
  }
  int fd = sv[0];
  size_t off = 0;
  const double deadline = mono() + call.timeout_s;
  Kind stopped = Kind::kOk;
  while (true) {
    feed(fd, call.input, off);
    siginfo_t info{};
    // Seen ended but not reaped yet: its pid still names its group, which goes with it.
    int w = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && info.si_pid == pid) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (w < 0 && errno != EINTR) {  // not ours any more (nobody else reaps it: cannot happen)
      if (fd >= 0) ::close(fd);
      return {Kind::kFailed, std::string("wait: ") + std::strerror(errno)};
    }
    bool late = mono() >= deadline;
    if (late || cancel.load()) {
      stopped = late ? Kind::kTimedOut : Kind::kCancelled;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (fd >= 0) {  // wait for room in its input, briefly, so that its exit is seen soon too
      pollfd pf{fd, POLLOUT, 0};
      (void)::poll(&pf, 1, 5);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (fd >= 0) ::close(fd);
  if (stopped == Kind::kTimedOut) return {stopped, "ran longer than the time limit: killed"};
  if (stopped != Kind::kOk) return {stopped, "stopped"};
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {Kind::kOk, ""};
  return {Kind::kFailed, status_text(status)};
}

}  // namespace tune::util
