#include "util/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

extern char** environ;

namespace tune::util {

namespace {
thread_local bool helpers_tied = false;
}  // namespace

void init_spawn_attrs(posix_spawnattr_t& attr, short flags) {
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(
      &attr, static_cast<short>(flags | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
}

namespace {

Result<pid_t> spawn(const std::vector<std::string>& args, const fs::path& log, bool detached) {
  if (args.empty()) return fail("internal: empty command");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string out = log.empty() ? "/dev/null" : log.string();
  // fork + exec rather than posix_spawn, for PR_SET_PDEATHSIG: a helper (rsync, an ssh master,
  // an upload) must not outlive a driver that is killed. Between fork and exec only
  // async-signal-safe calls; an exec failure comes back through a close-on-exec pipe.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0)
    return fail("cannot run '", args[0], "': ", std::strerror(errno));
  const pid_t parent = ::getpid();
  // PR_SET_PDEATHSIG fires when the *thread* that forked ends: tie the helper to the driver only
  // when that thread is the main one or lives as long as the driver's work (a host's I/O
  // thread: tie_helpers_to_this_thread); helpers a short-lived thread starts are not tied.
  // A detached process is never tied: it must outlive the driver.
  const bool tie = !detached && (::gettid() == parent || helpers_tied);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(err_pipe[0]), ::close(err_pipe[1]);
    return fail("cannot run '", args[0], "': ", std::strerror(e));
  }
  if (pid == 0) {
    if (tie) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);  // the driver died before the line above
    }
    // its own group (a terminal's Ctrl-C goes to the driver), or its own session
    if (detached)
      ::setsid();
    else
      ::setpgid(0, 0);
    int in = ::open("/dev/null", O_RDONLY);
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || ::dup2(in, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(o, 2) < 0) {
      int e = errno;
      (void)!::write(err_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv.data());
    int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  int child_errno = 0;
  ssize_t got;
  while ((got = ::read(err_pipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
  }
  ::close(err_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    ::waitpid(pid, nullptr, 0);
    return fail("cannot run '", args[0], "': ", std::strerror(child_errno));
  }
  return pid;
}

}  // namespace

Result<pid_t> spawn_process(const std::vector<std::string>& args, const fs::path& log) {
  return spawn(args, log, false);
}

Result<pid_t> spawn_detached(const std::vector<std::string>& args, const fs::path& log) {
  return spawn(args, log, true);
}

std::optional<int> try_wait(pid_t pid) {
  int status = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  if (r < 0) return 255;  // not our child any more: treat as failed
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

Result<int> run_process(const std::vector<std::string>& argv, const fs::path& log,
                        double timeout_s) {
  auto pid = spawn_process(argv, log);
  if (!pid) return std::unexpected(pid.error());
  if (timeout_s <= 0) {
    int status = 0;
    while (::waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  double start = mono();
  long nap_us = 1000;  // short helpers answer within milliseconds; long ones are polled less
  while (true) {
    if (auto status = try_wait(*pid)) return *status;
    if (mono() - start > timeout_s) {
      kill_and_reap(*pid);
      return fail("'", argv[0], "' ran longer than ", format_double(timeout_s), " s: killed");
    }
    ::usleep(static_cast<useconds_t>(nap_us));
    nap_us = std::min(nap_us * 2, 50'000L);
  }
}

void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

std::string last_line(const fs::path& log) {
  auto size = file_size_or_zero(log);
  if (size == 0) return "";
  FILE* f = std::fopen(log.c_str(), "rb");
  if (!f) return "";
  long from = size > 4096 ? static_cast<long>(size - 4096) : 0;  // only the tail is read
  std::fseek(f, from, SEEK_SET);
  std::string s(4096, '\0');
  s.resize(std::fread(s.data(), 1, s.size(), f));
  std::fclose(f);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  auto nl = s.rfind('\n');
  return printable(nl == std::string::npos ? s : s.substr(nl + 1), 300);
}

uint64_t process_start_ticks(pid_t pid) {
  if (pid <= 0) return 0;
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return 0;
  auto close = text->rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  size_t pos = close + 2;  // field 3 starts here
  for (int field = 3; field < 22; ++field) {
    pos = text->find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(text->c_str() + pos, nullptr, 10);
}

void tie_helpers_to_this_thread() {
  helpers_tied = true;
}

}  // namespace tune::util
