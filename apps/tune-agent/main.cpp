// tune-agent: the driver's agent on a host. Started once per experiment per host, it reads
// launch requests (JSON lines) on stdin and forks, per attempt, a supervisor (no exec: one exec
// per attempt, the trial's, as xargs does). Supervisors are independent of it: each leads its
// own session, so an agent that exits (the driver is gone: EOF on stdin) leaves them running;
// the next driver finds them again in the attempt log (lib/agent/attempt_log.hpp).
//
//   tune-agent serve ATTEMPT_LOG     (holds an flock on ATTEMPT_LOG.agent-lock while it runs)
//   tune-agent remote ATTEMPT_LOG    (on an SSH worker host: remote.hpp)
//
// Requests, one JSON object per line on stdin:
//   {"op":"env_base","env":["K=V",...]}  the environment later launches are relative to
//   {"op":"launch","id","dir","attempt","lease","orphan_timeout","grace","cwd","fifo",
//    "argv":[...],"env":[...] | "env_set":["K=V",...],"env_unset":["K",...]?,"nonce","params"?}
//   (with "env_set" the trial's environment is the base with those changes)
// (Before anything else each supervisor appends a "supervising" line to the attempt log, and the
// agent reads no further request until it has.)
// Events, one JSON object per line on stdout (written by the agent and by its supervisors, each
// line in one write, so they never interleave):
//   {"event":"start",...}  a supervisor started the trial (its pid, the trial's pid and start)
//   {"event":"exit",...}   the attempt ended: its exit record (exit_record.hpp)
//   {"event":"gone","id","attempt","supervisor","status"}  the supervisor process ended
//   {"event":"error","message","op"?,"id"?}  a request the agent could not run
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/supervise.hpp"
#include "events.hpp"
#include "fork_supervisor.hpp"
#include "remote.hpp"

namespace {

using nlohmann::json;
using tune::agent_app::Child;
using tune::agent_app::emit;
using tune::agent_app::emit_error;

// How long a new agent waits for the lock an earlier one holds (it finishes what it was asked).
constexpr int kLockWaitMs = 15000;

class Agent {
 public:
  explicit Agent(int log_fd) : log_fd_(log_fd) {}

  // One request line.
  void handle(const std::string& line) {
    auto req = json::parse(line, nullptr, false);
    auto op = req.is_object() ? req.find("op") : req.end();
    bool base = op != req.end() && op->is_string() && *op == "env_base";
    if (op == req.end() || !op->is_string() || (*op != "launch" && !base)) {
      emit_error("not a request: " + line.substr(0, 200));
      return;
    }
    try {
      if (base)
        set_base(req.at("env").get<std::vector<std::string>>());
      else
        launch(req);
    } catch (const std::exception& e) {
      // (a launch's error names its id, so that the driver does not wait for that attempt)
      auto id = req.find("id");
      emit_error(std::string(base ? "bad env_base request: " : "bad launch request: ") + e.what(),
                 *op, id != req.end() && id->is_string() ? id->get<std::string>() : "");
    }
  }

  // Reaps the supervisors that ended and says so.
  void reap() { (void)tune::agent_app::reap_children(children_); }
  // Nothing else to wait on (the driver watches this host's files itself).
  void add_fds(std::vector<pollfd>&) const {}
  [[nodiscard]] int timeout_ms() const { return -1; }
  void after_wait(const std::vector<pollfd>&, size_t) {}

 private:
  void launch(const json& req) {
    agent_attempt_.id = req.at("id").get<std::string>();
    agent_attempt_.dir = req.at("dir").get<std::string>();
    int attempt = req.at("attempt").get<int>();
    agent_attempt_.attempt = std::to_string(attempt);
    agent_attempt_.lease = req.at("lease").get<std::string>();
    agent_attempt_.orphan_timeout = req.at("orphan_timeout").get<double>();
    agent_attempt_.grace = req.at("grace").get<double>();
    agent_attempt_.cwd = req.at("cwd").get<std::string>();
    agent_attempt_.use_fifo = req.at("fifo").get<bool>();
    agent_attempt_.nonce = req.at("nonce").get<std::string>();
    argv_ = req.at("argv").get<std::vector<std::string>>();
    if (auto full = req.find("env"); full != req.end())
      env_ = full->get<std::vector<std::string>>();
    else
      env_ = env_from_base(req.at("env_set").get<std::vector<std::string>>(),
                           req.value("env_unset", std::vector<std::string>{}));
    if (argv_.empty()) throw std::runtime_error("empty argv");
    params_.reset();
    if (auto p = req.find("params"); p != req.end() && p->is_string())
      params_ = p->get<std::string>();
    std::vector<char*> argv, envp;
    for (auto& a : argv_) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_) envp.push_back(e.data());
    envp.push_back(nullptr);
    agent_attempt_.prog = argv.data();
    agent_attempt_.envp = envp.data();
    agent_attempt_.params_json = params_ ? &*params_ : nullptr;
    std::string error;
    pid_t pid = tune::agent_app::fork_supervisor(agent_attempt_, log_fd_, 1, error);
    if (pid < 0) {
      emit(json{{"event", "gone"},
                {"id", agent_attempt_.id},
                {"attempt", attempt},
                {"supervisor", nullptr},
                {"status", -1},
                {"error", error}});
      return;
    }
    children_[pid] = Child{agent_attempt_.id, attempt};
  }

  // Puts "NAME=VALUE" into `env`.
  static void put(std::map<std::string, std::string>& env, const std::string& kv) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::runtime_error("not NAME=VALUE: " + kv);
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  void set_base(const std::vector<std::string>& env) {
    base_.clear();
    for (const auto& kv : env) put(base_, kv);
    has_base_ = true;
  }

  // The base environment with `unset` removed and `set` ("NAME=VALUE") put in.
  std::vector<std::string> env_from_base(const std::vector<std::string>& set,
                                         const std::vector<std::string>& unset) const {
    if (!has_base_) throw std::runtime_error("env_set before any env_base");
    auto env = base_;
    for (const auto& k : unset) env.erase(k);
    for (const auto& kv : set) put(env, kv);
    std::vector<std::string> out;
    out.reserve(env.size());
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
  }

  int log_fd_;
  std::unordered_map<pid_t, Child> children_;
  // The request being launched.
  tune::agent::Attempt agent_attempt_;
  std::vector<std::string> argv_, env_;
  std::optional<std::string> params_;
  std::map<std::string, std::string> base_;  // env_base's environment
  bool has_base_ = false;
};

}  // namespace

namespace {

// Reads requests on stdin until EOF (the driver is gone: supervisors go on without this agent),
// reaping supervisors as SIGCHLD arrives on `sig_fd`, and waiting on the handler's own fds.
template <class Handler>
int serve(Handler& handler, int sig_fd) {
  std::string buf;
  char chunk[65536];
  std::vector<pollfd> fds;
  for (;;) {
    // (stdout while lines are queued for it, tune::agent_app::queue_output; else ignored)
    int out_fd = tune::agent_app::queued_output() > 0 ? 1 : -1;
    fds = {{0, POLLIN, 0}, {sig_fd, POLLIN, 0}, {out_fd, POLLOUT, 0}};
    handler.add_fds(fds);
    if (::poll(fds.data(), fds.size(), handler.timeout_ms()) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(sig_fd, &si, sizeof si) == sizeof si) {
      }
      handler.reap();
    }
    handler.after_wait(fds, 3);
    if (tune::agent_app::queued_output() > 0) tune::agent_app::flush_output();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::read(0, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
        handler.handle(buf.substr(0, nl));
        buf.erase(0, nl + 1);
      }
      if (buf.size() > (64u << 20)) {
        emit_error("request line longer than 64 MiB: dropped");
        buf.clear();
      }
    }
  }
  return 0;
}

// SIGCHLD as a file descriptor (blocked, so that it is only read there).
int child_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  return ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
}

// The attempt log, opened for appending (no symlink followed, no FIFO waited on: the driver
// checks too, before it starts this); -1 after saying why.
int open_attempt_log(const char* path) {
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  struct stat st {};
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(fd);
    fd = -1;
    errno = EINVAL;
  }
  if (fd < 0)
    std::fprintf(stderr, "tune-agent: cannot open %s: %s\n", path,
                 errno == EINVAL ? "not a regular file" : std::strerror(errno));
  return fd;
}

// The attempt log's lock file, opened (-1: errno says why).
int open_lock(const std::string& lock_path) {
  return ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
}

// On the driver's machine, one agent per experiment at a time: a new one waits here for the
// last one (whose driver is gone) to finish the requests it had read. A driver that resumes
// takes the same lock before it looks for its attempts in the log (exec::wait_for_agent). Never
// for ever: one that is stopped or stuck would hold every launch of this driver. Returns the
// lock's fd (held while this process runs), or -1 after saying why.
int take_agent_lock(const std::string& log_path, int wait_ms) {
  std::string lock_path = log_path + ".agent-lock";
  int lock_fd = open_lock(lock_path);
  auto got = lock_fd >= 0 ? tune::agent_app::wait_for_flock(lock_fd, wait_ms)
                          : tune::agent_app::FlockWait::kFailed;
  if (got == tune::agent_app::FlockWait::kLocked) return lock_fd;
  if (got == tune::agent_app::FlockWait::kHeld)
    emit_error("cannot start: another tune-agent" + tune::agent_app::flock_holder_text(lock_path) +
               " has held " + lock_path + " for " + std::to_string(wait_ms / 1000) +
               " s (stopped or stuck?)");
  else
    emit_error("cannot start: cannot lock " + lock_path + ": " + std::strerror(errno));
  if (lock_fd >= 0) ::close(lock_fd);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  bool local = argc == 3 && std::strcmp(argv[1], "serve") == 0;
  bool remote = argc == 3 && std::strcmp(argv[1], "remote") == 0;
  if (!local && !remote) {
    std::fprintf(stderr,
                 "usage: tune-agent serve ATTEMPT_LOG | tune-agent remote ATTEMPT_LOG "
                 "(requests on stdin)\n");
    return 2;
  }
  // Requests carry attempt nonces: keep this process's memory unreadable to trials.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);  // a driver that is gone: writes fail, nothing else
  int log_fd = open_attempt_log(argv[2]);
  if (log_fd < 0) return 1;
  if (remote) {
    // (the log's lock is taken per launch there: remote.hpp)
    std::string lock_path = std::string(argv[2]) + ".agent-lock";
    int lock_fd = open_lock(lock_path);
    if (lock_fd < 0) {
      std::fprintf(stderr, "tune-agent: cannot open %s: %s\n", lock_path.c_str(),
                   std::strerror(errno));
      return 1;
    }
    int sig_fd = child_signals();
    ::fcntl(0, F_SETFD, FD_CLOEXEC);
    tune::agent_app::RemoteLauncher launcher(log_fd, lock_fd, lock_path);
    tune::agent_app::queue_output();
    emit(nlohmann::json{{"event", "ready"}, {"agent", ::getpid()}});
    return serve(launcher, sig_fd);
  }
  int lock_fd = take_agent_lock(argv[2], kLockWaitMs);
  if (lock_fd < 0) return 1;
  int sig_fd = child_signals();
  ::fcntl(0, F_SETFD, FD_CLOEXEC);
  Agent agent(log_fd);
  return serve(agent, sig_fd);
}
