// tune-supervisor: runs one trial attempt so that it outlives the driver (SPEC §6).
//
//   tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD STDIN -- PROGRAM
//   ARGS...
//
// Started by the driver in a new session. With STDIN=fifo it makes TRIAL_DIR/stdin.fifo and
// keeps it open (a step-mode trial reads its commands there and never sees EOF); with
// STDIN=null the trial's stdin is /dev/null. It starts PROGRAM in its own process group with
// stdout/stderr appended to TRIAL_DIR/stdout.log and stderr.log, and records TRIAL_DIR/exit.json
// atomically when the trial ends. Its own argv names the trial dir and attempt, which is how a
// live supervisor is found again (no pid file: every file created costs time per trial).
//
// Signals: SIGTERM or SIGINT = stop the trial (SIGTERM to its group, SIGKILL after GRACE_S);
// SIGUSR1 = kill it now. If LEASE_FILE's mtime is older than ORPHAN_TIMEOUT_S (the driver is
// gone), it stops the trial the same way and records that it did.
//
// On worker hosts the same binary does the file operations the driver needs there, with the
// same checks as on the head (the driver never builds shell commands out of trial output):
//   tune-supervisor --adopt TRIAL_DIR REPORTED DEST   move a reported checkpoint dir into
//                                                     TRIAL_DIR/DEST (it must lie in TRIAL_DIR
//                                                     or /tmp, be a real directory, not a symlink)
//   tune-supervisor --rm DIR NAME                     delete DIR/NAME, never following a symlink
//
// Deliberately free of any library but libc: it starts once per trial and must start fast.
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

// Writes TRIAL_DIR/name atomically (temp, rename). No fsync: rename is atomic against the
// crash of any process, and after a power loss the trial is gone too (the driver then treats a
// missing exit.json as a supervisor that died, and retries the trial).
void write_atomic(const std::string& name, const std::string& content) {
  std::string target = g_dir + "/" + name;
  std::string tmp = target + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return diag("cannot write " + tmp + ": " + std::strerror(errno));
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0)
    diag("cannot write " + target + ": " + std::strerror(errno));
}

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

double monotonic_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Age in seconds of the lease file; a missing lease counts from `since`.
double lease_age(const std::string& lease, double since) {
  struct stat st {};
  if (::stat(lease.c_str(), &st) != 0) return now_s() - since;
  double m = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
  return now_s() - m;
}

int rm_entry(const char* path, const struct stat*, int type, struct FTW*) {
  return type == FTW_DP || type == FTW_D ? ::rmdir(path) : ::unlink(path);
}

bool plain_name(const char* name) {
  return *name && std::strchr(name, '/') == nullptr && std::strcmp(name, ".") != 0 &&
         std::strcmp(name, "..") != 0;
}

bool under(const std::string& path, const std::string& root) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          (root.back() == '/' || path[root.size()] == '/'));
}

// --adopt TRIAL_DIR REPORTED DEST / --rm DIR NAME. Prints one line on failure, exits 1.
int remote_op(int argc, char** argv) {
  auto failed = [](const std::string& msg) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    return 1;
  };
  if (std::strcmp(argv[1], "--rm") == 0 && argc == 4) {
    if (!plain_name(argv[3])) return failed(std::string("refused name '") + argv[3] + "'");
    std::string path = std::string(argv[2]) + "/" + argv[3];
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
      return errno == ENOENT ? 0 : failed(path + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return ::unlink(path.c_str()) == 0 ? 0 : failed(path + ": " + std::strerror(errno));
    if (::nftw(path.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
      return failed("cannot delete " + path + ": " + std::strerror(errno));
    return 0;
  }
  if (std::strcmp(argv[1], "--adopt") == 0 && argc == 5) {
    std::string dir = argv[2], reported = argv[3], dest = argv[4];
    if (!plain_name(dest.c_str())) return failed("refused name '" + dest + "'");
    if (reported.empty()) return failed("checkpoint path is empty");
    if (reported[0] != '/') reported = dir + "/" + reported;
    while (reported.size() > 1 && reported.back() == '/') reported.pop_back();
    struct stat st {};
    if (::lstat(reported.c_str(), &st) != 0)
      return failed("checkpoint '" + reported + "' does not exist");
    if (S_ISLNK(st.st_mode))
      return failed("checkpoint '" + reported + "' is a symlink; report the directory itself");
    if (!S_ISDIR(st.st_mode)) return failed("checkpoint '" + reported + "' is not a directory");
    char real[PATH_MAX], trial[PATH_MAX];
    if (!::realpath(reported.c_str(), real) || !::realpath(dir.c_str(), trial))
      return failed("checkpoint '" + reported + "': " + std::strerror(errno));
    const char* tmp = std::getenv("TMPDIR");
    char tmp_real[PATH_MAX];
    if (!::realpath(tmp && *tmp ? tmp : "/tmp", tmp_real)) std::strcpy(tmp_real, "/tmp");
    bool in_trial = under(real, trial), in_tmp = under(real, tmp_real);
    if ((!in_trial && !in_tmp) || std::strcmp(real, tmp_real) == 0 || under(trial, real))
      return failed("checkpoint '" + reported + "' resolves to '" + real +
                    "', outside the trial dir and the temp dir: refused");
    std::string target = std::string(trial) + "/" + dest;
    if (::lstat(target.c_str(), &st) == 0 &&
        ::nftw(target.c_str(), rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
      return failed("cannot replace " + target + ": " + std::strerror(errno));
    if (::rename(real, target.c_str()) != 0)
      return failed("cannot move checkpoint '" + reported +
                    "' into the trial dir: " + std::strerror(errno));
    return 0;
  }
  return failed("usage: tune-supervisor --adopt TRIAL_DIR REPORTED DEST | --rm DIR NAME");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && argv[1][0] == '-' && argv[1][1] == '-') return remote_op(argc, argv);
  if (argc < 10 || std::strcmp(argv[8], "--") != 0 ||
      (std::strcmp(argv[7], "fifo") != 0 && std::strcmp(argv[7], "null") != 0)) {
    std::fprintf(stderr,
                 "usage: tune-supervisor TRIAL_DIR ATTEMPT LEASE_FILE ORPHAN_TIMEOUT_S GRACE_S CWD "
                 "fifo|null -- "
                 "PROGRAM ARGS...\n");
    return 2;
  }
  g_dir = argv[1];
  const std::string attempt = argv[2];
  const std::string lease = argv[3];
  const double orphan_timeout = std::atof(argv[4]);
  const double grace = std::atof(argv[5]);
  const char* cwd = argv[6];
  const bool use_fifo = std::strcmp(argv[7], "fifo") == 0;
  char** prog = argv + 9;

  ::setsid();  // no-op if the driver already made us a session leader
  const double started = now_s();

  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1}) sigaddset(&mask, s);
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &mask, &old);

  int in = -1;
  if (use_fifo) {
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
  int out =
      ::open((g_dir + "/stdout.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  int err =
      ::open((g_dir + "/stderr.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (in < 0 || out < 0 || err < 0) {
    diag(std::string("cannot open the trial's files: ") + std::strerror(errno));
    return 3;
  }

  int exec_pipe[2];
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) return 3;
  pid_t child = ::fork();
  if (child < 0) {
    diag(std::string("fork failed: ") + std::strerror(errno));
    return 3;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGUSR1, SIGPIPE}) ::signal(s, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    if (::chdir(cwd) != 0) {
      int e = errno;
      (void)!::write(exec_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    ::execvp(prog[0], prog);
    int e = errno;
    e = -e;  // negative: exec failed (positive: chdir failed)
    (void)!::write(exec_pipe[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(child, child);
  ::close(exec_pipe[1]);
  int child_errno = 0;
  ssize_t got = ::read(exec_pipe[0], &child_errno, sizeof child_errno);
  ::close(exec_pipe[0]);

  std::string reason = "exited";
  std::string error;
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    int e = child_errno < 0 ? -child_errno : child_errno;
    if (child_errno > 0) {
      error = std::string("cannot enter workdir ") + cwd + ": " + std::strerror(e);
    } else if (e == ENOENT) {
      error = std::string("command not found: ") + prog[0];
    } else if (e == EACCES) {
      error = std::string("permission denied: ") + prog[0];
    } else {
      error = std::string("cannot execute ") + prog[0] + ": " + std::strerror(e);
    }
    reason = "exec_failed";
    diag(error);
  }

  int status = 0;
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
      kill_at = monotonic_s() + grace;
    }
  };
  for (;;) {
    pid_t w = ::waitpid(child, &status, WNOHANG);
    if (w == child) break;
    timespec tick{0, 500'000'000};
    siginfo_t info{};
    int sig = ::sigtimedwait(&mask, &info, &tick);
    if (sig == SIGTERM || sig == SIGINT) stop("driver_stop", false);
    if (sig == SIGUSR1) stop("driver_stop", true);
    if (kill_at >= 0 && monotonic_s() >= kill_at) {
      ::kill(-child, SIGKILL);
      kill_at = -1;
    }
    if (!stopping && lease_age(lease, started) > orphan_timeout) {
      diag("the driver's lease expired (no driver for " +
           std::to_string(static_cast<int>(orphan_timeout)) + " s): stopping the orphaned trial");
      stop("orphaned", false);
    }
  }
  ::kill(-child, SIGKILL);  // leftovers of the trial's process group
  std::string code = "null", sig = "null";
  if (WIFEXITED(status)) code = std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) sig = std::to_string(WTERMSIG(status));
  write_atomic("exit.json", "{\"attempt\":" + attempt + ",\"exit_code\":" + code + ",\"signal\":" +
                                sig + ",\"reason\":\"" + reason + "\",\"error\":\"" +
                                json_escape(error) + "\",\"ended\":" + std::to_string(now_s()) +
                                ",\"pid\":" + std::to_string(child) + "}\n");
  return 0;
}
