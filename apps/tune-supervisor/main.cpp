// tune-supervisor: runs one trial attempt so that it outlives the driver.
//
//   tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD STDIN RECORD --
//   PROGRAM ARGS...
//
// Started by the driver in a new session, with the attempt's nonce (a secret the trial never
// sees) on its stdin. With STDIN=fifo it makes TRIAL_DIR/stdin.fifo and keeps it open (a
// step-mode trial reads its commands there and never sees EOF); with STDIN=null the trial's
// stdin is /dev/null. It starts PROGRAM in its own process group with stdout/stderr appended to
// TRIAL_DIR/stdout.log and stderr.log (after an "=== attempt N ===" line when an earlier attempt
// wrote there), and when the trial's process ends it kills and reaps every process the attempt
// left (it is a child subreaper, so even those in their own session come back to it), then
// records the exit in RECORD (a file under the driver's .tune dir, not the trial dir) atomically,
// with the nonce, its own pid and the trial's pid and start time, so that the driver can tell
// its record from one the trial wrote. Its own argv names the trial dir and attempt, which is
// how a live supervisor is found again (no pid file: every file created costs time per trial).
//
// Signals: SIGTERM or SIGINT = stop the trial (SIGTERM to its group, SIGKILL after GRACE_S);
// SIGUSR1 = kill it now. If LEASE_FILE's mtime is older than ORPHAN_TIMEOUT_S (the driver is
// gone), it stops the trial the same way and records that it did.
//
// On worker hosts the same binary does the file operations the driver needs there
// (remote_ops.hpp).
//
// Deliberately free of any library but libc: it starts once per trial and must start fast.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "remote_ops.hpp"

namespace {

std::string g_dir;

void diag(const std::string& msg) {
  std::string line = "tune-supervisor: " + msg + "\n";
  int fd = ::open((g_dir + "/stderr.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
  }
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out;
}

// Writes `target` atomically (temp, rename), making its directory if needed. No fsync: rename
// is atomic against the crash of any process, and after a power loss the trial is gone too
// (the driver then treats a missing record as a supervisor that died, and retries the trial).
void write_atomic(const std::string& target, const std::string& content) {
  if (auto slash = target.rfind('/'); slash != std::string::npos && slash > 0)
    ::mkdir(target.substr(0, slash).c_str(), 0700);  // usually there already
  std::string tmp = target + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return diag("cannot write " + tmp + ": " + std::strerror(errno));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0)
    diag("cannot write " + target + ": " + std::strerror(errno));
}

double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Age in seconds of the lease file; a missing lease counts from `since`.
double lease_age(const std::string& lease, double since) {
  struct stat st {};
  if (::stat(lease.c_str(), &st) != 0) return clock_s(CLOCK_REALTIME) - since;
  double m = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
  return clock_s(CLOCK_REALTIME) - m;
}

// The attempt's nonce: hex digits on stdin up to EOF (nothing if stdin is a terminal).
std::string read_nonce() {
  std::string nonce;
  if (::isatty(0)) return nonce;
  char buf[128];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && nonce.size() < 64; ++i)
      if (std::strchr("0123456789abcdef", buf[i]) && buf[i]) nonce += buf[i];
  }
  return nonce;
}

// Field 22 of /proc/PID/stat: the process's start time in clock ticks since boot (0 if gone).
unsigned long long start_ticks(pid_t pid) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  for (int field = 2; p && field < 22; ++field) p = std::strchr(p + 1, ' ');
  return p ? std::strtoull(p + 1, nullptr, 10) : 0;
}

// Opens a log for appending; after an earlier attempt's output (or for any attempt but the
// first) it writes "=== attempt N ===" on a line of its own, so every attempt stays readable
// and the driver, which reads from the size before the start, sees a line that is not JSON.
int open_log(const std::string& name, const std::string& attempt) {
  int fd = ::open((g_dir + "/" + name).c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return fd;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (st.st_size > 0 || attempt != "1")) {
    char last = '\n';
    if (st.st_size > 0) (void)!::pread(fd, &last, 1, st.st_size - 1);
    std::string marker =
        std::string(last == '\n' ? "" : "\n") + "=== attempt " + attempt + " ===\n";
    (void)!::write(fd, marker.data(), marker.size());
  }
  return fd;
}

// Calls fn(pid) for each child of this process (zombies included).
template <class Fn>
void for_each_child(Fn fn) {
  char path[64], buf[4096];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/children", static_cast<int>(::getpid()),
                static_cast<int>(::getpid()));
  if (int fd = ::open(path, O_RDONLY | O_CLOEXEC); fd >= 0) {
    std::string text;
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      text.append(buf, static_cast<size_t>(n));
    ::close(fd);
    for (const char* p = text.c_str(); *p;) {
      char* end = nullptr;
      long pid = std::strtol(p, &end, 10);
      if (end == p) break;
      if (pid > 0) fn(static_cast<pid_t>(pid));
      p = end;
    }
    return;
  }
  // Kernels without /proc/PID/task/TID/children: look at every process's parent.
  DIR* d = ::opendir("/proc");
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char* p = std::strrchr(buf, ')');
    if (p && std::strlen(p) > 4 && std::atol(p + 4) == ::getpid()) fn(static_cast<pid_t>(pid));
  }
  ::closedir(d);
}

// The other children of this process: orphans of the trial, reparented to this subreaper.
std::vector<pid_t> orphans(pid_t trial) {
  std::vector<pid_t> found;
  for_each_child([&](pid_t pid) {
    if (pid != trial) found.push_back(pid);
  });
  return found;
}

// Ends every process the attempt left: its process group, then every other descendant. As a
// child subreaper this process inherits each orphan of the trial, whatever its session or
// group, so killing its children until none but the trial is left ends them all; each is
// reaped. The trial's own process stays a zombie until its record is written, so it is always
// the first child listed in /proc (where the driver looks for its pid).
void end_descendants(pid_t trial) {
  ::kill(-trial, SIGKILL);
  for (auto left = orphans(trial); !left.empty(); left = orphans(trial)) {
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    for (pid_t pid : left)
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
}

struct Args {
  std::string attempt, lease, record;
  double orphan_timeout = 0, grace = 0;
  const char* cwd = nullptr;
  bool use_fifo = false;
  char** prog = nullptr;
};

// The trial's process: its own group, stdin/stdout/stderr wired, in CWD. Returns its pid, or
// -1 with `error` set; an exec failure is reported through `error` after the fork.
pid_t start_trial(const Args& a, int in, int out, int err, const sigset_t& old,
                  std::string& error) {
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return -1;
  pid_t child = ::fork();
  if (child < 0) {
    error = std::string("fork failed: ") + std::strerror(errno);
    return -1;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGPIPE}) ::signal(s, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    int e = 0;
    if (::chdir(a.cwd) != 0) {
      e = errno;  // positive: chdir failed
    } else {
      ::execvp(a.prog[0], a.prog);
      e = -errno;  // negative: exec failed
    }
    (void)!::write(exec_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(child, child);
  ::close(exec_pipe[1]);
  int child_errno = 0;
  ssize_t got = ::read(exec_pipe[0], &child_errno, sizeof child_errno);
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    int e = child_errno < 0 ? -child_errno : child_errno;
    if (child_errno > 0)
      error = std::string("cannot enter workdir ") + a.cwd + ": " + std::strerror(e);
    else if (e == ENOENT)
      error = std::string("command not found: ") + a.prog[0];
    else if (e == EACCES)
      error = std::string("permission denied: ") + a.prog[0];
    else
      error = std::string("cannot execute ") + a.prog[0] + ": " + std::strerror(e);
  }
  return child;
}

// How the trial's process ended.
struct Ended {
  std::string code = "null", signal = "null";
};

// Waits for the trial's process to end (leaving it a zombie), passing on stop requests and
// watching the lease; reaps orphans that came back to this subreaper meanwhile.
Ended supervise(const Args& a, pid_t child, const sigset_t& mask, double started,
                std::string& reason) {
  double kill_at = -1;  // monotonic deadline for SIGKILL after a SIGTERM
  bool stopping = false;
  auto stop = [&](const char* why, bool now) {
    if (!stopping) reason = why;
    stopping = true;
    if (now) {
      ::kill(-child, SIGKILL);
      kill_at = -1;
    } else if (kill_at < 0) {
      ::kill(-child, SIGTERM);
      kill_at = clock_s(CLOCK_MONOTONIC) + a.grace;
    }
  };
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_PID, static_cast<id_t>(child), &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == child) {
      Ended e;
      (si.si_code == CLD_EXITED ? e.code : e.signal) = std::to_string(si.si_status);
      return e;
    }
    for (pid_t pid : orphans(child)) ::waitpid(pid, nullptr, WNOHANG);
    timespec tick{0, 500'000'000};
    siginfo_t info{};
    int sig = ::sigtimedwait(&mask, &info, &tick);
    if (sig == SIGTERM || sig == SIGINT) stop("driver_stop", false);
    if (sig == SIGUSR1) stop("driver_stop", true);
    if (kill_at >= 0 && clock_s(CLOCK_MONOTONIC) >= kill_at) {
      ::kill(-child, SIGKILL);
      kill_at = -1;
    }
    if (!stopping && lease_age(a.lease, started) > a.orphan_timeout) {
      diag("the driver's lease expired (no driver for " +
           std::to_string(static_cast<int>(a.orphan_timeout)) + " s): stopping the orphaned trial");
      stop("orphaned", false);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && argv[1][0] == '-' && argv[1][1] == '-') return remote_op(argc, argv);
  if (argc < 11 || std::strcmp(argv[9], "--") != 0 || !*argv[2] ||
      std::strspn(argv[2], "0123456789") != std::strlen(argv[2]) ||
      (std::strcmp(argv[7], "fifo") != 0 && std::strcmp(argv[7], "null") != 0)) {
    std::fprintf(stderr,
                 "usage: tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD "
                 "fifo|null RECORD -- PROGRAM ARGS... (the attempt's nonce on stdin)\n");
    return 2;
  }
  // Its memory and environment stay unreadable to the trial (same user): the nonce is secret.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const std::string nonce = read_nonce();
  g_dir = argv[1];
  Args a;
  a.attempt = argv[2];
  a.lease = argv[3];
  a.orphan_timeout = std::atof(argv[4]);
  a.grace = std::atof(argv[5]);
  a.cwd = argv[6];
  a.use_fifo = std::strcmp(argv[7], "fifo") == 0;
  a.record = argv[8];
  a.prog = argv + 10;

  ::setsid();  // no-op if the driver already made us a session leader
  // Orphans of the trial (double forks, setsid) are reparented here, not to init.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  const double started = clock_s(CLOCK_REALTIME);

  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1}) sigaddset(&mask, s);
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &mask, &old);

  int in = -1;
  if (a.use_fifo) {
    std::string fifo = g_dir + "/stdin.fifo";
    ::unlink(fifo.c_str());
    if (::mkfifo(fifo.c_str(), 0600) != 0) {
      diag("cannot create " + fifo + ": " + std::strerror(errno));
      return 3;
    }
    in = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  } else {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  int out = open_log("stdout.log", a.attempt);
  int err = open_log("stderr.log", a.attempt);
  if (in < 0 || out < 0 || err < 0) {
    diag(std::string("cannot open the trial's files: ") + std::strerror(errno));
    return 3;
  }

  std::string error;
  pid_t child = start_trial(a, in, out, err, old, error);
  if (child < 0) {
    diag(error.empty() ? std::string("cannot start the trial: ") + std::strerror(errno) : error);
    return 3;
  }
  const unsigned long long child_started = start_ticks(child);
  std::string reason = "exited";
  if (!error.empty()) {
    reason = "exec_failed";
    diag(error);
  }
  Ended ended = supervise(a, child, mask, started, reason);
  end_descendants(child);  // nothing of the attempt runs, or writes, once its end is recorded
  write_atomic(a.record, "{\"attempt\":" + a.attempt + ",\"nonce\":\"" + nonce +
                             "\",\"supervisor\":" + std::to_string(::getpid()) +
                             ",\"pid\":" + std::to_string(child) +
                             ",\"started\":" + std::to_string(child_started) +
                             ",\"exit_code\":" + ended.code + ",\"signal\":" + ended.signal +
                             ",\"reason\":\"" + reason + "\",\"error\":\"" + json_escape(error) +
                             "\",\"ended\":" + std::to_string(clock_s(CLOCK_REALTIME)) + "}\n");
  ::waitpid(child, nullptr, 0);
  return 0;
}
