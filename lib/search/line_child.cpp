#include "search/line_child.hpp"

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

namespace tune::search {

namespace {

using util::mono;

// Milliseconds left until `deadline` for poll(), at least 0.
int ms_until(double deadline) {
  double left = deadline - mono();
  return left <= 0 ? 0 : static_cast<int>(left * 1000) + 1;
}

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

Result<fs::path> resolve_command(const std::vector<std::string>& argv, const fs::path& cwd,
                                 const std::string& what) {
  if (argv.empty() || argv[0].empty()) return fail(what, ": the command is empty");
  const std::string& a0 = argv[0];
  if (a0.find('/') != std::string::npos) {
    fs::path p = fs::path(a0).is_absolute() ? fs::path(a0) : cwd / a0;
    std::error_code ec;
    if (!fs::exists(p, ec)) return fail(what, ": '", a0, "' does not exist");
    if (!executable(p)) return fail(what, ": '", a0, "' is not an executable file");
    return p;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= dirs.size()) {
    size_t end = dirs.find(':', at);
    if (end == std::string::npos) end = dirs.size();
    fs::path dir = dirs.substr(at, end - at);
    if (dir.empty()) dir = ".";
    if (executable(dir / a0)) return dir / a0;
    at = end + 1;
  }
  return fail(what, ": '", a0, "' is not found on PATH");
}

LineChild::~LineChild() {
  if (fd_ >= 0) ::close(fd_);
  kill_now();
}

Result<void> LineChild::start(const std::vector<std::string>& args, const fs::path& cwd,
                              const std::map<std::string, std::string>& env,
                              const fs::path& stderr_log) {
  // Everything the child needs is laid out before fork: between fork and exec only
  // async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (!env.count(std::string(kv.substr(0, kv.find('='))))) env_store.emplace_back(kv);
  }
  for (const auto& [k, v] : env) env_store.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  int err_log = ::open(stderr_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_log < 0) return fail("cannot open '", stderr_log.string(), "': ", std::strerror(errno));
  int sv[2], err_pipe[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
      ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(err_log);
    return fail("cannot start '", args[0], "': ", std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const bool tie = ::gettid() == parent;  // PDEATHSIG follows the forking thread
  std::string dir = cwd.string();
  pid_t pid = ::fork();
  if (pid == 0) {
    if (tie) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);
    }
    ::setpgid(0, 0);  // a terminal's Ctrl-C goes to the driver, which saves it first
    if (::dup2(sv[1], 0) < 0 || ::dup2(sv[1], 1) < 0 || ::dup2(err_log, 2) < 0 ||
        (!dir.empty() && ::chdir(dir.c_str()) != 0)) {
      int e = errno;
      (void)!::write(err_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(sv[1]);
  ::close(err_log);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(sv[0]);
    ::close(err_pipe[0]);
    return fail("cannot start '", args[0], "': ", std::strerror(fork_errno));
  }
  int child_errno = 0;
  ssize_t got;
  while ((got = ::read(err_pipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  ::close(err_pipe[0]);
  pid_ = pid;
  fd_ = sv[0];
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    (void)exit_text(5);
    return fail("cannot start '", args[0], "': ", std::strerror(child_errno));
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  return {};
}

Result<void> LineChild::send(const std::string& line, double timeout_s) {
  std::string data = line + "\n";
  double deadline = mono() + timeout_s;
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return fail("it stopped reading (", std::strerror(errno), ")");
    pollfd p{fd_, POLLOUT, 0};
    int ms = ms_until(deadline);
    if (ms == 0) return fail("it did not read its input within ", std::to_string(timeout_s), " s");
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) return fail("poll: ", std::strerror(errno));
  }
  return {};
}

Result<std::string> LineChild::read_line(double timeout_s, size_t max_bytes) {
  double deadline = mono() + timeout_s;
  while (true) {
    if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      if (nl > max_bytes) break;
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (buffer_.size() > max_bytes) break;
    char chunk[65536];
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return fail("it exited (", exit_text(2), ")");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return fail("read: ", std::strerror(errno));
    pollfd p{fd_, POLLIN, 0};
    int ms = ms_until(deadline);
    if (ms == 0) return fail("no answer within ", std::to_string(timeout_s), " s (a hang)");
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) return fail("poll: ", std::strerror(errno));
  }
  std::string head = buffer_.substr(0, 80);
  buffer_.clear();
  return fail("it wrote a line longer than ", std::to_string(max_bytes), " bytes, starting '", head,
              "'");
}

std::string LineChild::exit_text(double wait_s) {
  if (pid_ <= 0) return "not started";
  double deadline = mono() + wait_s;
  while (!reaped_) {
    pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (r < 0 && errno != EINTR) return "not its child";
    if (mono() >= deadline) return "still running";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFSIGNALED(status_)) {
    int sig = WTERMSIG(status_);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit code " + std::to_string(WEXITSTATUS(status_));
}

void LineChild::stop(double grace_s) {
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_WR);  // end of its input: a well-behaved searcher exits
    ::close(fd_);
    fd_ = -1;
  }
  if (pid_ > 0 && !reaped_) (void)exit_text(grace_s);
  kill_now();
}

void LineChild::kill_now() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

}  // namespace tune::search
