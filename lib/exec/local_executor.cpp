#include "exec/local_executor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr size_t kReadChunk = 4u << 20;  // per trial per wakeup: keeps the loop fair
constexpr double kRescanPeriod = 1.0;    // safety net for missed inotify events

double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

struct Run {
  std::string id;
  int attempt = 0;
  fs::path dir;
  fs::path record;      // where its supervisor records the exit
  AttemptIdentity who;  // what a genuine record must say
  bool warned_forged = false;
  uint64_t offset = 0;
  int out_fd = -1;
  pid_t spawned = -1;        // the supervisor
  bool child = true;         // spawned by this driver (else re-attached: not ours to reap)
  uint64_t start_ticks = 0;  // re-attached: the supervisor's start time (guards pid reuse)
  bool spawned_exited = false;
  std::optional<int> child_pid;
  int wd = -1;
  int fifo_fd = -1;
  std::string pending_in;
  bool dirty = true;
  bool more = false;  // unread output remains after a full chunk
};

// Field `n` (1-based, n >= 3) of /proc/PID/stat, or 0 if the process is gone.
uint64_t stat_field(pid_t pid, int n) {
  auto text = util::read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text) return 0;
  auto close = text->rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  size_t pos = close + 2;  // field 3 starts here
  for (int field = 3; field < n; ++field) {
    pos = text->find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(text->c_str() + pos, nullptr, 10);
}

// The process's start time in clock ticks since boot (guards against pid reuse); 0 if gone.
uint64_t start_ticks(pid_t pid) {
  return util::process_start_ticks(pid);
}

}  // namespace

std::unordered_map<std::string, pid_t> live_supervisors() {
  std::unordered_map<std::string, pid_t> found;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cmd = util::read_file(it->path() / "cmdline", 1 << 20);
    if (!cmd || cmd->empty()) continue;
    std::vector<std::string_view> args;
    for (size_t start = 0; start < cmd->size() && args.size() < 3;) {
      size_t nul = cmd->find('\0', start);
      if (nul == std::string::npos) nul = cmd->size();
      args.emplace_back(cmd->data() + start, nul - start);
      start = nul + 1;
    }
    if (args.size() < 3 || fs::path(args[0]).filename() != "tune-supervisor") continue;
    // The supervisor leads its session; a child between fork and exec shows the same
    // command line but not that.
    pid_t pid = std::stoi(name);
    if (stat_field(pid, 6) != static_cast<uint64_t>(pid)) continue;
    found[std::string(args[1]) + '\0' + std::string(args[2])] = pid;
  }
  return found;
}

struct LocalExecutor::Impl {
  LocalOptions opts;
  int sig_fd = -1;
  int ino_fd = -1;
  sigset_t old_mask{};
  std::unordered_map<std::string, Run> runs;
  std::unordered_map<int, std::string> by_wd;
  double last_scan = 0;
  std::string hostname = util::host_name();

  std::unordered_map<std::string, std::string> resolved;  // "PATH\0prog" -> absolute path

  // execvp's PATH search, done once per program instead of in every supervisor. A program
  // not found is left as it is, so the supervisor reports "command not found" for it.
  std::string resolve(const std::string& prog, const std::map<std::string, std::string>& env) {
    if (prog.empty() || prog.find('/') != std::string::npos) return prog;
    auto p = env.find("PATH");
    std::string path = p == env.end() ? "/usr/local/bin:/usr/bin:/bin" : p->second;
    std::string key = path + '\0' + prog;
    if (auto it = resolved.find(key); it != resolved.end()) return it->second;
    std::string found = prog;
    size_t start = 0;
    while (start <= path.size()) {
      size_t colon = path.find(':', start);
      std::string dir =
          path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty() &&
          dir[0] == '/') {  // relative PATH entries depend on the cwd: leave to execvp
        std::string cand = dir + "/" + prog;
        struct stat st {};
        if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
            ::access(cand.c_str(), X_OK) == 0) {
          found = cand;
          break;
        }
      } else if (!dir.empty() || colon != std::string::npos) {
        break;  // an empty or relative entry before a match: keep execvp's exact semantics
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    resolved.emplace(std::move(key), found);
    return found;
  }

  // Live supervisors by "trial_dir\0attempt", from their command lines (built on demand for
  // attach(), dropped at the next wait()).
  std::optional<std::unordered_map<std::string, pid_t>> supervisors;

  void scan_supervisors() { supervisors = live_supervisors(); }

  // A run of `l`: its dirs, where its record goes and the nonce that record must hold.
  Run new_run(const Launch& l) const {
    Run r;
    r.id = l.trial_id;
    r.attempt = l.attempt;
    r.dir = l.trial_dir;
    r.offset = l.stdout_offset;
    std::string name = l.trial_dir.filename().string();
    r.record = l.trial_dir.parent_path() / record_path(name);
    r.who.nonce = attempt_nonce(opts.record_key, name, l.attempt);
    return r;
  }

  // This attempt's exit, if its supervisor recorded it. A record it did not write (the trial,
  // or anyone, can write a file there) is ignored, with a warning once per attempt.
  std::optional<ExitInfo> read_record(Run& r) {
    ExitInfo info;
    std::optional<std::string> text;
    if (auto t = util::read_file(r.record, 1 << 20)) text = std::move(*t);
    switch (check_exit_record(text, r.attempt, r.who, info)) {
      case RecordCheck::kGenuine:
        return info;
      case RecordCheck::kForged:
        if (!r.warned_forged)
          spdlog::warn(
              "trial {}: ignoring an exit record for attempt {} that its supervisor did not "
              "write ({}); the trial is still supervised",
              r.dir.filename().string(), r.attempt, r.record.string());
        r.warned_forged = true;
        return std::nullopt;
      case RecordCheck::kAbsent:
        break;
    }
    return std::nullopt;
  }

  std::unordered_map<std::string, int> last_pid;  // trial id -> pid of its last attempt
  std::vector<pid_t> unreaped;  // supervisors of finished runs that have not exited yet

  void reap() {
    std::erase_if(unreaped, [](pid_t pid) {
      int status = 0;
      return ::waitpid(pid, &status, WNOHANG) != 0;  // reaped, or not our child any more
    });
  }

  void close_run(Run& r) {
    if (r.spawned > 0 && r.child && !r.spawned_exited) unreaped.push_back(r.spawned);
    r.spawned = -1;
    if (r.out_fd >= 0) ::close(r.out_fd);
    if (r.fifo_fd >= 0) ::close(r.fifo_fd);
    if (r.wd >= 0) {
      ::inotify_rm_watch(ino_fd, r.wd);
      by_wd.erase(r.wd);
    }
    r.out_fd = r.fifo_fd = r.wd = -1;
  }

  // The trial's pid: the supervisor's only child (Linux: /proc/PID/task/PID/children).
  void load_child_pid(Run& r) {
    if (r.child_pid || r.spawned <= 0 || r.spawned_exited) return;
    std::string p =
        "/proc/" + std::to_string(r.spawned) + "/task/" + std::to_string(r.spawned) + "/children";
    auto text = util::read_file(p, 4096);
    if (!text || text->empty()) return;
    int pid = std::atoi(text->c_str());
    if (pid <= 0) return;
    r.child_pid = pid;  // the first child: the trial (orphans it leaves come back later)
    r.who.pid = pid;
    if (uint64_t ticks = start_ticks(pid)) r.who.started = ticks;
  }

  void flush_stdin(Run& r) {
    if (r.pending_in.empty()) return;
    if (r.fifo_fd < 0) {
      r.fifo_fd = ::open((r.dir / "stdin.fifo").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (r.fifo_fd < 0) return;  // not created yet, or no reader yet: try again later
    }
    while (!r.pending_in.empty()) {
      ssize_t n = ::write(r.fifo_fd, r.pending_in.data(), r.pending_in.size());
      if (n > 0) {
        r.pending_in.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EPIPE) r.pending_in.clear();
      break;  // EAGAIN: the pipe is full, try again later
    }
  }

  // Reads the next chunk of stdout.log; returns the bytes read.
  std::string read_output(Run& r) {
    std::string data;
    if (r.out_fd < 0) {
      r.out_fd = ::open((r.dir / "stdout.log").c_str(), O_RDONLY | O_CLOEXEC);
      if (r.out_fd < 0) return data;
    }
    struct stat st {};
    if (::fstat(r.out_fd, &st) != 0 || static_cast<uint64_t>(st.st_size) <= r.offset) {
      r.more = false;
      return data;
    }
    size_t want = static_cast<size_t>(
        std::min<uint64_t>(kReadChunk, static_cast<uint64_t>(st.st_size) - r.offset));
    data.resize(want);
    size_t got = 0;
    while (got < want) {
      ssize_t n =
          ::pread(r.out_fd, data.data() + got, want - got, static_cast<off_t>(r.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    data.resize(got);
    r.offset += got;
    r.more = got == kReadChunk;
    return data;
  }

  // Output first, then (if the attempt has ended and all output is read) the exit.
  void collect(Run& r, std::vector<Event>& outputs, std::vector<Event>& exits, bool& finished) {
    finished = false;
    // The record is written after every process of the attempt is gone, so once it exists the
    // output is final: look for it before reading, then read to the end.
    // (another attempt's leftover, or anything but this attempt's record, does not count)
    load_child_pid(r);  // while the supervisor still runs: results read now carry it
    std::optional<ExitInfo> exit_record = read_record(r);
    std::string data = read_output(r);
    if (!data.empty())
      outputs.emplace_back(std::in_place_type<OutputEvent>, OutputEvent{r.id, std::move(data)});
    if (r.more) return;
    if (exit_record) {
      exits.emplace_back(std::in_place_type<ExitEvent>, ExitEvent{r.id, std::move(*exit_record)});
      finished = true;
    } else if (r.spawned_exited) {
      // The supervisor is gone without recording an exit (killed, or failed to start).
      if (read_record(r)) {
        r.dirty = true;  // it appeared meanwhile: pick it up next round, after the output
        return;
      }
      ExitInfo info;
      info.attempt = r.attempt;
      info.reason = "supervisor_died";
      info.error = "the trial's supervisor exited without recording the trial's exit";
      exits.emplace_back(std::in_place_type<ExitEvent>, ExitEvent{r.id, std::move(info)});
      finished = true;
    }
  }
};

LocalExecutor::LocalExecutor(LocalOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &mask, &impl_->old_mask);
  ::signal(SIGPIPE, SIG_IGN);
  impl_->sig_fd = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  impl_->ino_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  renew_lease();
}

LocalExecutor::~LocalExecutor() {
  for (auto& [id, r] : impl_->runs) impl_->close_run(r);
  if (impl_->sig_fd >= 0) ::close(impl_->sig_fd);
  if (impl_->ino_fd >= 0) ::close(impl_->ino_fd);
  ::sigprocmask(SIG_SETMASK, &impl_->old_mask, nullptr);
}

Result<void> LocalExecutor::start(const Launch& l) {
  auto& impl = *impl_;
  if (auto it = impl.runs.find(l.trial_id); it != impl.runs.end()) {
    impl.close_run(it->second);
    impl.runs.erase(it);
  }
  std::error_code ec;
  fs::create_directories(l.trial_dir, ec);
  if (ec) return fail("cannot create trial dir '", l.trial_dir.string(), "': ", ec.message());
  Run r = impl.new_run(l);
  ::unlink(r.record.c_str());  // an earlier attempt's
  ::unlink((l.trial_dir / "stdin.fifo").c_str());
  r.wd = ::inotify_add_watch(impl.ino_fd, l.trial_dir.c_str(), IN_MODIFY);
  if (r.wd >= 0) impl.by_wd[r.wd] = l.trial_id;

  std::vector<std::string> argv_in = l.argv;
  if (!argv_in.empty()) argv_in[0] = impl.resolve(argv_in[0], l.env);
  std::vector<std::string> args = {impl.opts.supervisor.string(),
                                   l.trial_dir.string(),
                                   std::to_string(l.attempt),
                                   impl.opts.lease_file.string(),
                                   util::format_double(impl.opts.orphan_timeout_s),
                                   util::format_double(impl.opts.grace_s),
                                   l.cwd.string(),
                                   l.stdin_fifo ? "fifo" : "null",
                                   r.record.string(),
                                   "--"};
  args.insert(args.end(), argv_in.begin(), argv_in.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : l.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // The nonce goes on the supervisor's stdin: not in its argv or environment, which the trial
  // could read in /proc.
  int nonce_pipe[2];
  if (::pipe2(nonce_pipe, O_CLOEXEC) != 0) {
    impl.close_run(r);
    return fail("cannot start supervisor: pipe: ", std::strerror(errno));
  }
  std::string nonce_line = r.who.nonce + "\n";  // fits the pipe's buffer: never blocks
  (void)!::write(nonce_pipe[1], nonce_line.data(), nonce_line.size());
  ::close(nonce_pipe[1]);
  posix_spawnattr_t attr;
  util::init_spawn_attrs(attr, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, nonce_pipe[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(nonce_pipe[0]);
  if (rc != 0) {
    impl.close_run(r);
    return fail("cannot start supervisor '", impl.opts.supervisor.string(),
                "': ", std::strerror(rc));
  }
  r.spawned = pid;
  r.who.supervisor = pid;
  impl.last_pid.erase(l.trial_id);
  impl.runs.emplace(l.trial_id, std::move(r));
  return {};
}

Result<Attached> LocalExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  if (auto it = impl.runs.find(l.trial_id); it != impl.runs.end()) {
    impl.close_run(it->second);
    impl.runs.erase(it);
  }
  Run r = impl.new_run(l);
  r.child = false;
  // Look for the live supervisor first: one that is not running any more has already written
  // its exit record (it writes it, then exits).
  if (!impl.supervisors) impl.scan_supervisors();
  Attached found = Attached::kGone;
  if (auto it = impl.supervisors->find(l.trial_dir.string() + '\0' + std::to_string(l.attempt));
      it != impl.supervisors->end()) {
    r.spawned = it->second;
    r.start_ticks = start_ticks(r.spawned);
    r.who.supervisor = r.spawned;
    if (r.start_ticks != 0) found = Attached::kRunning;
  }
  if (found == Attached::kGone) {
    r.who.supervisor.reset();
    auto record = impl.read_record(r);
    if (!record) return Attached::kGone;
    r.spawned = -1;
    r.spawned_exited = true;
    r.child_pid = record->pid;  // for the `pid` field of results read now
    found = Attached::kEnded;
  }
  r.wd = ::inotify_add_watch(impl.ino_fd, l.trial_dir.c_str(), IN_MODIFY);
  if (r.wd >= 0) impl.by_wd[r.wd] = l.trial_id;
  impl.last_pid.erase(l.trial_id);
  impl.runs.emplace(l.trial_id, std::move(r));
  return found;
}

void LocalExecutor::send(const std::string& trial_id, std::string_view line) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) return;
  it->second.pending_in.append(line);
  it->second.pending_in.push_back('\n');
  impl_->flush_stdin(it->second);
}

void LocalExecutor::stop(const std::string& trial_id, bool now) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) return;
  Run& r = it->second;
  if (r.spawned <= 0 || r.spawned_exited) return;
  if (!r.child && start_ticks(r.spawned) != r.start_ticks) return;  // gone; the pid is reused
  ::kill(r.spawned, now ? SIGUSR1 : SIGTERM);
}

std::vector<Event> LocalExecutor::wait(double timeout_s) {
  auto& impl = *impl_;
  std::vector<Event> interrupts, outputs, exits;
  bool any_more = false;
  for (auto& [id, r] : impl.runs) any_more |= r.more || r.dirty;
  if (any_more) timeout_s = 0;
  timeout_s = std::min(timeout_s, kRescanPeriod);
  timespec ts{
      static_cast<time_t>(timeout_s),
      static_cast<long>((timeout_s - static_cast<double>(static_cast<time_t>(timeout_s))) * 1e9)};
  pollfd fds[2] = {{impl.sig_fd, POLLIN, 0}, {impl.ino_fd, POLLIN, 0}};
  int n = ::ppoll(fds, 2, &ts, nullptr);
  if (n > 0 && (fds[0].revents & POLLIN)) {
    signalfd_siginfo si{};
    while (::read(impl.sig_fd, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) continue;  // reaped below
      interrupts.emplace_back(std::in_place_type<InterruptEvent>,
                              InterruptEvent{static_cast<int>(si.ssi_signo)});
    }
  }
  // Reap supervisors we spawned (they are our children until they exit).
  // (by pid: other children of the driver, e.g. sync processes, are not ours to reap)
  impl.reap();
  impl.supervisors.reset();
  for (auto& [id, r] : impl.runs) {
    int status = 0;
    if (r.spawned > 0 && r.child && !r.spawned_exited &&
        ::waitpid(r.spawned, &status, WNOHANG) == r.spawned)
      r.spawned_exited = true, r.dirty = true;
  }
  if (n > 0 && (fds[1].revents & POLLIN)) {
    alignas(inotify_event) char buf[16384];
    for (;;) {
      ssize_t len = ::read(impl.ino_fd, buf, sizeof buf);
      if (len <= 0) break;
      for (ssize_t off = 0; off < len;) {
        auto* ev = reinterpret_cast<inotify_event*>(buf + off);
        if (ev->mask & IN_Q_OVERFLOW) {
          for (auto& [id, r] : impl.runs) r.dirty = true;
        } else if (std::string_view name = ev->len ? ev->name : ""; name != "stdout.log") {
          // other files of the trial dir (stderr.log, checkpoints, temp files) do not matter here
        } else if (auto it = impl.by_wd.find(ev->wd); it != impl.by_wd.end()) {
          if (auto rit = impl.runs.find(it->second); rit != impl.runs.end())
            rit->second.dirty = true;
        }
        off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      }
    }
  }
  double t = now();
  if (t - impl.last_scan >= kRescanPeriod) {
    impl.last_scan = t;
    for (auto& [id, r] : impl.runs) {
      r.dirty = true;
      // A re-attached supervisor is not our child: no SIGCHLD, so look whether it still runs.
      if (!r.child && r.spawned > 0 && !r.spawned_exited && start_ticks(r.spawned) != r.start_ticks)
        r.spawned_exited = true;
    }
  }
  std::vector<std::string> finished;
  for (auto& [id, r] : impl.runs) {
    impl.flush_stdin(r);
    if (!r.dirty && !r.more) continue;
    r.dirty = false;
    bool done = false;
    impl.collect(r, outputs, exits, done);
    if (done) finished.push_back(id);
  }
  for (const auto& id : finished) {
    if (auto& r = impl.runs[id]; r.child_pid) impl.last_pid[id] = *r.child_pid;
    impl.close_run(impl.runs[id]);
    impl.runs.erase(id);
  }
  std::vector<Event> all = std::move(interrupts);
  for (auto& e : outputs) all.push_back(std::move(e));
  for (auto& e : exits) all.push_back(std::move(e));
  return all;
}

std::optional<int> LocalExecutor::pid(const std::string& trial_id) {
  auto it = impl_->runs.find(trial_id);
  if (it == impl_->runs.end()) {
    // Ended within this wait(): its output is still being handled.
    auto last = impl_->last_pid.find(trial_id);
    if (last == impl_->last_pid.end()) return std::nullopt;
    return last->second;
  }
  impl_->load_child_pid(it->second);
  return it->second.child_pid;
}

double LocalExecutor::now() {
  return clock_s(CLOCK_MONOTONIC);
}
double LocalExecutor::wall_time() {
  return clock_s(CLOCK_REALTIME);
}
std::string LocalExecutor::host_name() {
  return impl_->hostname;
}

void LocalExecutor::renew_lease() {
  const auto& p = impl_->opts.lease_file;
  if (p.empty()) return;
  if (::utimensat(AT_FDCWD, p.c_str(), nullptr, 0) != 0) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
}

Result<fs::path> find_supervisor() {
  if (const char* env = std::getenv("TUNE_SUPERVISOR"); env && *env) return fs::path(env);
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path p = self.parent_path() / "tune-supervisor";
    if (::access(p.c_str(), X_OK) == 0) return p;
    p = self.parent_path().parent_path() / "libexec" / "tune" / "tune-supervisor";
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return fail("cannot find tune-supervisor beside '", self.string(),
              "' (set TUNE_SUPERVISOR to its path)");
}

}  // namespace tune::exec
