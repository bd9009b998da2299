// One trial attempt's supervisor (see supervise.hpp). The code that was tune-supervisor's main.
#include "agent/supervise.hpp"

#include "agent/arrival_notes.hpp"
#include "agent/dir_lock.hpp"
#include "util/clock.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
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

extern char** environ;

namespace tune::agent {

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

}  // namespace

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

namespace {

// Writes `target` atomically (temp, rename), making its directory first if `make_dir`. No
// fsync: rename is atomic against the crash of any process, and after a power loss the trial is
// gone too (the driver then treats a missing record as a supervisor that died, and retries the
// trial).
void write_atomic(const std::string& target, const std::string& content, bool make_dir) {
  if (auto slash = target.rfind('/'); make_dir && slash != std::string::npos && slash > 0)
    ::mkdir(target.substr(0, slash).c_str(), 0700);  // usually there already
  std::string tmp = target + ".tmp";
  // (a new file: never through a link, nor into a FIFO left there, which would block)
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return diag("cannot write " + tmp + ": " + std::strerror(errno));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0)
    diag("cannot write " + target + ": " + std::strerror(errno));
}

using util::clock_s;

// The driver's heartbeat, seen from here: how long the lease file has not changed, on this
// host's monotonic clock. Only a change of its mtime counts, never its value, so a driver whose
// clock differs from this host's (by minutes, say) is neither taken for dead nor kept alive.
struct LeaseWatch {
  bool seen = false;
  timespec mtime{};
  double changed_at = 0;  // monotonic; the supervisor's start until a change is seen

  double silence(const std::string& lease, double now) {
    struct stat st {};
    if (::stat(lease.c_str(), &st) == 0 &&
        (!seen || st.st_mtim.tv_sec != mtime.tv_sec || st.st_mtim.tv_nsec != mtime.tv_nsec)) {
      seen = true;
      mtime = st.st_mtim;
      changed_at = now;
    }
    return now - changed_at;
  }
};

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

// The message for a trial that could not be started: `e` > 0 from chdir, < 0 from exec.
std::string start_error(const Attempt& a, int child_errno) {
  int e = child_errno < 0 ? -child_errno : child_errno;
  if (child_errno > 0)
    return std::string("cannot enter workdir ") + a.cwd + ": " + std::strerror(e);
  if (e == ENOENT) return std::string("command not found: ") + a.prog[0];
  if (e == EACCES) return std::string("permission denied: ") + a.prog[0];
  return std::string("cannot execute ") + a.prog[0] + ": " + std::strerror(e);
}

constexpr int kTrialDefaultSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGPIPE};

// The trial's process by fork and execvp (the trial's PATH searched in the child), reporting a
// failed chdir or exec through a pipe. Returns its pid (which exits 127 on such a failure, with
// `error` set), or -1 with `error` set if it could not be forked.
pid_t fork_trial(const Attempt& a, int in, int out, int err, const sigset_t& old,
                 std::string& error) {
  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return -1;
  pid_t child = ::fork();
  if (child < 0) {
    error = std::string("fork failed: ") + std::strerror(errno);
    ::close(exec_pipe[0]), ::close(exec_pipe[1]);
    return -1;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (int s : kTrialDefaultSignals) ::signal(s, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    int e = 0;
    if (::chdir(a.cwd.c_str()) != 0) {
      e = errno;  // positive: chdir failed
    } else {
      if (a.envp) environ = a.envp;
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
  if (got == static_cast<ssize_t>(sizeof child_errno)) error = start_error(a, child_errno);
  return child;
}

// The trial's process by posix_spawn: the child shares this process's memory until its exec
// (no page tables copied, no copy-on-write faults), which is most of what a fork costs here.
// Only for a program given by its path (the driver resolves it on the trial's PATH). Returns
// -1 if it did not start (then nothing was started: the caller forks instead, which reports
// the failure as before).
pid_t spawn_trial(const Attempt& a, int in, int out, int err, const sigset_t& old) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (::posix_spawn_file_actions_init(&actions) != 0) return -1;
  if (::posix_spawnattr_init(&attr) != 0) {
    ::posix_spawn_file_actions_destroy(&actions);
    return -1;
  }
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : kTrialDefaultSignals) sigaddset(&defaults, s);
  bool ok = ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETSIGMASK) == 0 &&
            ::posix_spawnattr_setpgroup(&attr, 0) == 0 &&
            ::posix_spawnattr_setsigdefault(&attr, &defaults) == 0 &&
            ::posix_spawnattr_setsigmask(&attr, &old) == 0 &&
            ::posix_spawn_file_actions_adddup2(&actions, in, 0) == 0 &&
            ::posix_spawn_file_actions_adddup2(&actions, out, 1) == 0 &&
            ::posix_spawn_file_actions_adddup2(&actions, err, 2) == 0 &&
            ::posix_spawn_file_actions_addchdir_np(&actions, a.cwd.c_str()) == 0;
  pid_t child = -1;
  if (ok &&
      ::posix_spawn(&child, a.prog[0], &actions, &attr, a.prog, a.envp ? a.envp : environ) != 0)
    child = -1;
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  return child;
}

// The trial's process: its own group, stdin/stdout/stderr wired, in CWD. Returns its pid, or
// -1 with `error` set; an exec failure is reported through `error` after the fork.
pid_t start_trial(const Attempt& a, int in, int out, int err, const sigset_t& old,
                  std::string& error) {
  if (std::strchr(a.prog[0], '/')) {
    pid_t child = spawn_trial(a, in, out, err, old);
    if (child > 0) return child;
  }
  return fork_trial(a, in, out, err, old, error);
}

// How the trial's process ended.
struct Ended {
  std::string code = "null", signal = "null";
};

// The trial's stdout or stderr: a pipe this process copies into the log file, which is made
// on the first byte (a trial that prints nothing costs no file).
struct Output {
  int pipe = -1;
  int file = -1;
  const char* name = "";
  bool failed = false;
  std::string error;  // why it failed
  // stdout: where this process's last write ended in the file, and its last bytes
  uint64_t end = 0;
  char tail[16] = {};
  size_t tail_len = 0;
};

// How stdout.log differs from what this process wrote there, if it does: shorter (cut), or
// not holding the last bytes it wrote where it wrote them (overwritten), by another process
// (the trial, writing to its own log by its path). "" if it holds them.
std::string check_log(const Output& o, uint64_t size) {
  std::string where = std::string(o.name) + " in " + g_dir;
  if (size < o.end)
    return where + " was cut from " + std::to_string(o.end) + " to " + std::to_string(size) +
           " bytes by another process";
  char now[sizeof o.tail];
  if (o.tail_len > 0 && (::pread(o.file, now, o.tail_len, static_cast<off_t>(o.end - o.tail_len)) !=
                             static_cast<ssize_t>(o.tail_len) ||
                         std::memcmp(now, o.tail, o.tail_len) != 0))
    return where + " was overwritten by another process";
  return "";
}

// Checked before each write: what the log held past the cut may never have been read. The
// attempt fails, and nothing more is written there: a driver reading on from where it was would
// take results that come after a gap (and a checkpoint past it, which its retry would start
// from), while the retry starts from a checkpoint before the gap and prints them all again.
void check_not_cut(Output& o, uint64_t size) {
  if (o.failed) return;
  std::string why = check_log(o, size);
  if (why.empty()) return;
  o.failed = true;
  o.error = why + "; what the trial printed since is not kept";
  diag(o.error);
  ::close(o.file);
  o.file = -1;
}

// Copies what the pipe holds now (its read end is non-blocking); at EOF closes it.
// `notes`: where stdout's arrival times go (null for stderr).
void pump(Output& o, const std::string& attempt, ArrivalNotes* notes) {
  char buf[65536];
  while (o.pipe >= 0) {
    ssize_t n = ::read(o.pipe, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: all read for now
    if (n == 0) {
      ::close(o.pipe);
      o.pipe = -1;
      return;
    }
    // (disk full, say: it keeps reading so that the trial never blocks on it)
    auto failed = [&](const char* what) {
      if (o.failed) return;
      o.failed = true;
      o.error = std::string("cannot ") + what + " " + o.name + " in " + g_dir + ": " +
                std::strerror(errno);
      diag(o.error);
    };
    if (o.file < 0 && !o.failed) o.file = open_log(o.name, attempt);
    if (o.file < 0) failed("create");
    struct stat st {};
    if (notes && o.file >= 0 && ::fstat(o.file, &st) == 0) {
      check_not_cut(o, static_cast<uint64_t>(st.st_size));
      if (o.file >= 0)
        notes->before_write(static_cast<uint64_t>(st.st_size), buf, static_cast<size_t>(n));
    }
    ssize_t done = 0;
    while (o.file >= 0 && done < n) {
      ssize_t w = ::write(o.file, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        if (w == 0) errno = ENOSPC;  // (a regular file takes what it can, or fails)
        failed("write");
        break;
      }
      done += w;
    }
    // (O_APPEND: the file's offset is where this write ended)
    if (notes && o.file >= 0 && !o.failed) {
      if (off_t end = ::lseek(o.file, 0, SEEK_CUR); end >= 0) o.end = static_cast<uint64_t>(end);
      o.tail_len = std::min(sizeof o.tail, static_cast<size_t>(done));
      std::memcpy(o.tail, buf + done - o.tail_len, o.tail_len);
    }
  }
}

// Waits for the trial's process to end (leaving it a zombie), copying its output, passing on
// stop requests and watching the lease; reaps orphans that came back to this subreaper.
Ended watch_trial(const Attempt& a, pid_t child, int sig_fd, Output (&outs)[2], ArrivalNotes& notes,
                  std::string& reason) {
  double kill_at = -1;  // monotonic deadline for SIGKILL after a SIGTERM
  double next_lease_check = 0;
  LeaseWatch lease;
  lease.changed_at = clock_s(CLOCK_MONOTONIC);
  bool stopping = false;
  bool chld = true;  // a SIGCHLD since the last look for orphans (or the first turn)
  auto stop = [&](const char* why, bool now) {
    if (!stopping) reason = why;
    stopping = true;
    if (now) {
      ::kill(-child, SIGKILL);
      kill_at = -1;
    } else if (kill_at < 0) {
      ::kill(-child, SIGTERM);
      ::kill(-child, SIGCONT);  // a stopped trial gets its grace period too
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
    if (chld)
      for (pid_t pid : orphans(child)) ::waitpid(pid, nullptr, WNOHANG);
    chld = false;
    pollfd fds[3] = {{sig_fd, POLLIN, 0}, {outs[0].pipe, POLLIN, 0}, {outs[1].pipe, POLLIN, 0}};
    (void)::poll(fds, 3, 500);
    for (int k = 0; k < 2; ++k)
      if (fds[k + 1].revents) pump(outs[k], a.attempt, k == 0 ? &notes : nullptr);
    signalfd_siginfo info{};
    while (::read(sig_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) stop("driver_stop", false);
      if (info.ssi_signo == SIGUSR1) stop("driver_stop", true);
      if (info.ssi_signo == SIGCHLD) chld = true;
    }
    double now = clock_s(CLOCK_MONOTONIC);
    if (kill_at >= 0 && now >= kill_at) {
      ::kill(-child, SIGKILL);
      kill_at = -1;
    }
    if (!stopping && now >= next_lease_check) {
      next_lease_check = now + 0.5;
      if (lease.silence(a.lease, now) > a.orphan_timeout) {
        diag("the driver's lease expired (no driver for " +
             std::to_string(static_cast<int>(a.orphan_timeout)) +
             " s): stopping the orphaned trial");
        stop("orphaned", false);
      }
    }
  }
}

// Who holds the trial dir's lock, for a message: a supervisor (forked by tune-agent, or
// tune-supervisor in a Slurm job), or not.
std::string held_by(int pid) {
  if (pid <= 0) return "another process holds the trial dir's lock";
  char path[64], comm[64] = {0};
  std::snprintf(path, sizeof path, "/proc/%d/comm", pid);
  if (int fd = ::open(path, O_RDONLY | O_CLOEXEC); fd >= 0) {
    ssize_t n = ::read(fd, comm, sizeof comm - 1);
    ::close(fd);
    comm[n > 0 ? n : 0] = '\0';
    if (char* nl = std::strchr(comm, '\n')) *nl = '\0';
  }
  std::string who = std::to_string(pid);
  if (std::strncmp(comm, "tune-agent", 10) == 0 || std::strncmp(comm, "tune-supervisor", 15) == 0)
    return "an earlier attempt of this trial still runs there (its supervisor, pid " + who +
           ", holds the trial dir)";
  return "another process (pid " + who + ", '" + comm + "') holds the trial dir's lock";
}

// Whether `path` holds exactly `text`.
bool same_content(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  bool same = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              static_cast<uint64_t>(st.st_size) == text.size();
  std::string buf(same ? text.size() : 0, '\0');
  size_t got = 0;
  while (same && got < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return same && got == text.size() && buf == text;
}

// Makes the trial dir if it is missing, and takes its lock (dir_lock.hpp: held until this
// process exits). Nothing is written where the lock cannot be taken: an earlier attempt's
// supervisor that still runs there (two would write one stdout.log), or a trial dir that is a
// symlink. Returns true if it made the dir (then nothing else is in it: no earlier attempt's
// logs to look for); `lock_fd` is the lock's, or -1 with `error` set.
bool take_trial_dir(const Attempt& a, std::string& error, bool& dir_busy, int& lock_fd) {
  bool made = ::mkdir(a.dir.c_str(), 0755) == 0;
  if (!made && errno != EEXIST) {
    // Its parent (the experiment dir) exists; a deeper missing path is an error worth naming.
    error = "cannot create trial dir '" + a.dir + "': " + std::strerror(errno);
    return false;
  }
  lock_fd = lock_trial_dir(a.dir);
  if (lock_fd < 0) {
    if (errno == EWOULDBLOCK) {
      dir_busy = true;
      error = held_by(flock_holder(a.dir)) + ": attempt " + a.attempt + " is not started beside it";
    } else if (struct stat st{}; ::lstat(a.dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      error = "the trial dir '" + a.dir + "' is a symbolic link: nothing is written through one";
    } else {
      error = "cannot lock the trial dir '" + a.dir + "': " + std::strerror(errno);
    }
    return false;
  }
  return made;
}

// Writes params.json into the locked trial dir (agent mode: the driver's loop creates no file
// per trial, the supervisors do, in parallel); `made`: the dir was made just now.
void write_params(const Attempt& a, bool made) {
  if (!a.params_json) return;
  std::string target = a.dir + "/params.json";
  if (made) {  // in a dir nobody else writes yet: no temporary name and rename needed
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const std::string& text = *a.params_json;
    if (fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
        ::close(fd) == 0)
      return;
    if (fd >= 0) ::close(fd);
  }
  // Every attempt starts with the trial's config there, as Ray does: one missing, left empty
  // by a supervisor killed between making it and writing it, or changed by an earlier attempt
  // is written whole again (read first: a retry of an untouched trial writes nothing).
  if (made || !same_content(target, *a.params_json)) write_atomic(target, *a.params_json, false);
}

// Sends `line` (one JSON object, newline added) to the log and/or the driver. Each is a single
// write(): appends of concurrent supervisors never interleave, nor do pipe writes under 4 KiB.
void emit(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string out = line + "\n";
  while (::write(fd, out.data(), out.size()) < 0 && errno == EINTR) {
  }
}

// (a file that is missing or not a file: 0)
uint64_t size_or_zero(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size)
                                                               : 0;
}

std::string trial_name(const std::string& dir) {
  auto slash = dir.find_last_of('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

int supervise(const Attempt& a, const Sinks& sinks) {
  g_dir = a.dir;
  ::setsid();  // no-op if already a session leader
  // Orphans of the trial (double forks, setsid) are reparented here, not to init.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1}) sigaddset(&mask, s);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigset_t none;  // the trial starts with no signal blocked, whatever this process inherited
  sigemptyset(&none);

  const std::string name = json_escape(trial_name(a.dir));
  const std::string me = std::to_string(::getpid());
  // (read once: this process's start time, as the log's lines give it)
  const std::string who = ",\"supervisor\":" + me +
                          ",\"supervisor_started\":" + std::to_string(start_ticks(::getpid()));
  // First of all, the trial dir's lock, then the attempt log names this supervisor: from here
  // on a driver that resumes finds the attempt, and can tell it by the lock it holds (the agent
  // waits for this before it reads its next request, and a new driver waits for the old agent,
  // so no launch the old driver asked for is missed).
  std::string error;  // set: the attempt fails as an exec failure, with this in its record
  bool dir_busy = false;
  int lock_fd = -1;
  const bool fresh_dir = take_trial_dir(a, error, dir_busy, lock_fd);
  // Where this attempt's output and notes start in the trial's files (after what its earlier
  // attempts, or an earlier experiment of the same name, left there), in the log and the record:
  // a driver killed before it wrote down what the launch answered reads on from here.
  std::string from;
  if (lock_fd >= 0)
    from = ",\"stdout_from\":" + std::to_string(size_or_zero(g_dir + "/stdout.log")) +
           ",\"times_from\":" + std::to_string(size_or_zero(g_dir + "/stdout.times"));
  emit(sinks.log_fd, "{\"event\":\"supervising\",\"trial\":\"" + name +
                         "\",\"attempt\":" + a.attempt + who + from + "}");
  if (sinks.hold_fd >= 0) ::close(sinks.hold_fd);
  if (sinks.ready_fd >= 0) ::close(sinks.ready_fd);
  if (lock_fd >= 0) write_params(a, fresh_dir);
  int in = -1, out = -1, err = -1;  // the trial's stdin, and the write ends of its pipes
  Output outs[2];
  outs[0].name = "stdout.log";
  outs[1].name = "stderr.log";
  int sig_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (error.empty()) {
    if (a.use_fifo) {
      std::string fifo = g_dir + "/stdin.fifo";
      ::unlink(fifo.c_str());
      // (a dir an earlier attempt's trial put in its place, say: said in the exit record, so
      // that the attempt fails for that, not as a supervisor gone without a word)
      if (::mkfifo(fifo.c_str(), 0600) != 0)
        error = "cannot create " + fifo + ": " + std::strerror(errno);
      else
        in = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
    } else {
      in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0) {
      out = out_pipe[1], err = err_pipe[1];
      outs[0].pipe = out_pipe[0], outs[1].pipe = err_pipe[0];
      for (auto& o : outs) {
        ::fcntl(o.pipe, F_SETFL, O_NONBLOCK);
        // A log an earlier attempt wrote gets this attempt's marker now, even if this attempt
        // prints nothing there (so its last line is never an earlier attempt's); a new one is
        // made at the first byte.
        if (!fresh_dir && ::access((g_dir + "/" + o.name).c_str(), F_OK) == 0)
          o.file = open_log(o.name, a.attempt);
      }
    }
    if (error.empty() && (in < 0 || out < 0 || err < 0)) {
      diag(std::string("cannot open the trial's files: ") + std::strerror(errno));
      return 3;
    }
  }

  pid_t child = -1;
  unsigned long long child_started = 0;
  std::string stdout_size;  // ",\"stdout_size\":N" once its stdout.log was written (+ stdout_cut)
  ArrivalNotes notes(g_dir, a.attempt);
  std::string reason = "exited";
  Ended ended;
  if (error.empty()) {
    child = start_trial(a, in, out, err, none, error);
    ::close(out), ::close(err);  // the trial holds the write ends now
    if (child < 0) {
      diag(error.empty() ? std::string("cannot start the trial: ") + std::strerror(errno) : error);
      return 3;
    }
    child_started = start_ticks(child);
    notes.started();
    std::string start = "{\"event\":\"start\",\"trial\":\"" + name + "\",\"attempt\":" + a.attempt +
                        who + ",\"pid\":" + std::to_string(child) +
                        ",\"started\":" + std::to_string(child_started);
    emit(sinks.log_fd, start + "}");
    emit(sinks.event_fd, start + ",\"id\":\"" + json_escape(a.id) + "\"}");
    if (!error.empty()) {
      reason = "exec_failed";
      diag(error);
    }
    ended = watch_trial(a, child, sig_fd, outs, notes, reason);
    end_descendants(child);  // nothing of the attempt runs, or writes, once its end is recorded
    for (auto& o : outs) {   // every writer is gone: what the pipes hold, then EOF
      pump(o, a.attempt, &o == &outs[0] ? &notes : nullptr);
      struct stat st;
      if (&o == &outs[0] && o.file >= 0 && ::fstat(o.file, &st) == 0) {
        stdout_size = ",\"stdout_size\":" + std::to_string(st.st_size);
        // Cut after the trial's last output: lost only if the driver had not read all of it by
        // then, which the driver judges (exec::judge_cut). Overwritten: what a driver reads
        // now may be the other process's bytes, not the trial's, so the attempt fails.
        if (std::string why = o.failed ? "" : check_log(o, static_cast<uint64_t>(st.st_size));
            !why.empty() && static_cast<uint64_t>(st.st_size) < o.end) {
          diag(why + " after the trial's last output");
          stdout_size += ",\"stdout_cut\":" + std::to_string(o.end);
        } else if (!why.empty()) {
          o.failed = true;
          o.error = why + " after the trial's last output";
          diag(o.error);
        }
      }
      if (o.file >= 0) ::close(o.file);
      // A trial that ended by itself, part of whose output is lost, failed (its results, or
      // what says why it ended, are missing).
      if (o.failed && reason == "exited" && error.empty()) {
        reason = "output_lost";
        error = o.error + " (part of the trial's output is lost)";
      }
    }
  } else {
    reason = dir_busy ? "dir_busy" : "exec_failed";
  }
  // Nothing of this attempt writes into the trial dir any more: the next attempt, which the
  // driver may start as soon as the exit below reaches it, can take the dir.
  if (lock_fd >= 0) ::close(lock_fd);
  // An event stays one atomic pipe write (PIPE_BUF, 4 KiB) once escaped (at most 6 bytes a
  // byte), and valid UTF-8: not cut inside a character.
  if (error.size() > 512) {
    size_t cut = 512;
    while (cut > 0 && (static_cast<unsigned char>(error[cut]) & 0xC0) == 0x80) --cut;
    error.resize(cut);
  }
  std::string record =
      "{\"attempt\":" + a.attempt + ",\"nonce\":\"" + a.nonce + "\",\"supervisor\":" + me +
      ",\"pid\":" + (child > 0 ? std::to_string(child) : "null") +
      ",\"started\":" + std::to_string(child_started) + ",\"exit_code\":" + ended.code +
      ",\"signal\":" + ended.signal + ",\"reason\":\"" + reason + "\",\"error\":\"" +
      json_escape(error) + "\",\"ended\":" + std::to_string(clock_s(CLOCK_REALTIME)) + stdout_size +
      from;
  if (!sinks.record_file.empty()) write_atomic(sinks.record_file, record + "}\n", true);
  emit(sinks.log_fd, record + ",\"event\":\"exit\",\"trial\":\"" + name + "\"}");
  emit(sinks.event_fd, record + ",\"event\":\"exit\",\"id\":\"" + json_escape(a.id) + "\"}");
  if (child > 0) ::waitpid(child, nullptr, 0);
  return 0;
}

}  // namespace tune::agent
