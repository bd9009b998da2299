#include "util/process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

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

// What the child of spawn() needs, prepared by the parent: the child shares the parent's memory
// (CLONE_VM) and so must not allocate, lock or touch anything another thread may hold.
struct ChildArgs {
  const char* path;  // the program, resolved on PATH by the parent
  char* const* argv;
  char* const* sh_argv;  // sh, the program, its arguments: for a script without a #! line
  char* const* envp;
  const char* out;  // stdout and stderr (created, truncated)
  pid_t parent;
  bool tie, detached;
  int err;  // errno of what failed before the exec (0: the exec happened)
};

// The child: raw system calls only, on its own stack, and never instrumented by the
// sanitizers (their runtime does not know this stack, and their interceptors take locks).
__attribute__((no_sanitize("address", "undefined"))) int spawn_child(void* p) {
  auto* a = static_cast<ChildArgs*>(p);
  // (libc's syscall() sets errno on failure: the parent thread's, which is suspended meanwhile)
  if (a->tie) {
    ::syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
    if (::syscall(SYS_getppid) != a->parent) ::syscall(SYS_exit, 127);  // the driver died first
  }
  // its own group (a terminal's Ctrl-C goes to the driver), or its own session
  if (a->detached)
    ::syscall(SYS_setsid);
  else
    ::syscall(SYS_setpgid, 0, 0);
  // Opened close-on-exec: only their copies as 0, 1 and 2 reach the helper.
  long in = ::syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC, 0);
  long o = in < 0 ? -1
                  : ::syscall(SYS_openat, AT_FDCWD, a->out,
                              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (in < 0 || o < 0) {
    a->err = errno != 0 ? errno : EIO;
    ::syscall(SYS_exit, 127);
  }
  // (dup3 refuses a descriptor onto itself: one that is already in place keeps it, open at exec)
  if (in == 0)
    ::syscall(SYS_fcntl, 0, F_SETFD, 0);
  else
    ::syscall(SYS_dup3, in, 0, 0);
  for (int target : {1, 2}) {
    if (o == target)
      ::syscall(SYS_fcntl, target, F_SETFD, 0);
    else
      ::syscall(SYS_dup3, o, target, 0);
  }
  // The kernel's sigaction, not libc's: the handlers the driver set go back to the defaults
  // (this child has its own copy of the table: no CLONE_SIGHAND), then the mask is cleared.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    uint64_t mask;
  } dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP})
    ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
  uint64_t none = 0;
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, sizeof none);
  ::syscall(SYS_execve, a->path, a->argv, a->envp);
  if (errno == ENOEXEC)  // a script without a #! line: run by sh, as execvp does
    ::syscall(SYS_execve, "/bin/sh", a->sh_argv, a->envp);
  a->err = errno != 0 ? errno : ENOEXEC;
  ::syscall(SYS_exit, 127);
  return 127;
}

// argv[0] as execvp would find it: as given if it names a path, else the first executable
// file of that name on PATH (unchanged if none: the exec then fails with ENOENT).
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir =
        dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return name;
}

Result<pid_t> spawn(const std::vector<std::string>& args, const fs::path& log, bool detached) {
  if (args.empty()) return fail("internal: empty command");
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string out = log.empty() ? "/dev/null" : log.string();
  std::string path = resolve_program(args[0]);
  std::string sh = "/bin/sh";
  std::vector<char*> sh_argv = {sh.data(), path.data()};
  sh_argv.insert(sh_argv.end(), argv.begin() + 1, argv.end());  // (with argv's final nullptr)
  const pid_t parent = ::getpid();
  // PR_SET_PDEATHSIG (a helper — rsync, an ssh master, an upload — must not outlive a driver
  // that is killed) fires when the *thread* that started it ends: tie the helper to the driver
  // only when that thread is the main one or lives as long as the driver's work (a host's I/O
  // thread: tie_helpers_to_this_thread). A detached process is never tied.
  ChildArgs a{path.c_str(),
              argv.data(),
              sh_argv.data(),
              environ,
              out.c_str(),
              parent,
              !detached && (::gettid() == parent || helpers_tied),
              detached,
              0};
  // clone(CLONE_VM | CLONE_VFORK), as posix_spawn does, rather than fork: a fork copies the
  // page tables of the whole driver (hundreds of MB with a hundred hosts' sessions) for each
  // rsync, and that copy was ~40% of the driver's CPU at 100 hosts. This thread waits until the
  // child has exec'd or failed; every signal is blocked meanwhile so that no handler runs in
  // the child.
  constexpr size_t kStack = 64 * 1024;
  std::unique_ptr<char[]> stack(new char[kStack]);
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(spawn_child, stack.get() + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return fail("cannot run '", args[0], "': ", std::strerror(clone_errno));
  if (a.err != 0) {
    ::waitpid(pid, nullptr, 0);
    return fail("cannot run '", args[0], "': ", std::strerror(a.err));
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

std::optional<std::pair<pid_t, ProcStat>> parse_proc_stat(std::string_view text) {
  // The fields after the command name, which may hold spaces and parentheses: field 3 first.
  auto open = text.find('('), close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return std::nullopt;
  std::string_view rest = text.substr(close + 1);
  std::string_view fields[20];
  size_t n = 0;
  for (size_t at = 0; n < 20 && at < rest.size();) {
    size_t from = rest.find_first_not_of(' ', at);
    if (from == std::string_view::npos) break;
    size_t to = rest.find(' ', from);
    if (to == std::string_view::npos) to = rest.size();
    fields[n++] = rest.substr(from, to - from);
    at = to;
  }
  if (n < 20 || fields[0].size() != 1) return std::nullopt;
  ProcStat st;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  st.state = fields[0][0];
  st.session = std::strtol(std::string(fields[3]).c_str(), nullptr, 10);
  st.start = std::strtoull(std::string(fields[19]).c_str(), nullptr, 10);
  long pid = std::strtol(std::string(text.substr(0, open)).c_str(), nullptr, 10);
  if (pid <= 0 || pid > INT32_MAX) return std::nullopt;
  return std::pair<pid_t, ProcStat>{static_cast<pid_t>(pid), std::move(st)};
}

std::optional<ProcStat> proc_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return std::nullopt;
  auto parsed = parse_proc_stat(*text);
  if (!parsed) return std::nullopt;
  return std::move(parsed->second);
}

uint64_t process_start_ticks(pid_t pid) {
  auto st = proc_stat(pid);
  return st ? st->start : 0;
}

void tie_helpers_to_this_thread() {
  helpers_tied = true;
}

}  // namespace tune::util
