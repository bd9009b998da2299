// Runs trial attempts on this machine through one tune-agent (agent_link.hpp), which forks a
// supervisor per attempt. Output is read from each trial's stdout.log by offset (inotify says
// when it grew), so trials never block on the driver; starts and exits arrive as agent events,
// and the attempt log (attempt_log.hpp) is where a re-attaching driver finds them again.
#include "exec/local_executor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "agent/dir_lock.hpp"
#include "exec/agent_link.hpp"
#include "exec/agent_protocol.hpp"
#include "exec/attempt_log.hpp"
#include "exec/exit_record.hpp"
#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr size_t kReadChunk = 4u << 20;  // per trial per wakeup: keeps the loop fair
constexpr double kRescanPeriod = 1.0;    // safety net for missed inotify events; liveness polls
// An agent that has not started a launch this long after it was sent is given up on (killed,
// its launches not started); one that is stopped (SIGSTOP, a debugger), after kStoppedAgentS.
constexpr double kAgentAnswerS = 30.0;
constexpr double kStoppedAgentS = 3.0;

using util::clock_s;

enum class StopAsk { kNone, kTerm, kKill };

struct Run {
  std::string id;
  std::string name;  // the trial dir's name (the attempt log's key)
  int attempt = 0;
  fs::path dir;
  AttemptIdentity who;  // what a genuine record must say
  bool warned_forged = false;
  uint64_t offset = 0;
  int out_fd = -1;
  int times_fd = -1;  // stdout.times, once it exists
  ArrivalReader times{0};
  std::optional<int> supervisor;    // once started
  uint64_t supervisor_started = 0;  // its start time (guards against pid reuse)
  bool via_agent = true;            // the current agent reports its events (else: poll)
  bool supervisor_gone = false;
  std::optional<ExitInfo> exit;
  std::string gone_error;         // the agent could not start the supervisor
  double sent_at = 0;             // when its launch was sent to the agent (monotonic)
  bool given_up = false;          // on an agent that sat on its launch: not the trial's doing
  StopAsk stop = StopAsk::kNone;  // asked before the supervisor was known
  int wd = -1;
  int fifo_fd = -1;
  std::string pending_in;
  bool dirty = true;
  bool more = false;     // unread output remains after a full chunk
  bool rewound = false;  // re-attached to a stdout.log shorter than what was read: say where
};

}  // namespace

std::unordered_map<std::string, pid_t> live_supervisors(const fs::path& exp_dir) {
  AttemptLog log(exp_dir / kAttemptLog);
  log.refresh();
  std::unordered_map<std::string, pid_t> out;
  for (const auto& [k, pid] : log.live()) out[k] = pid;
  return out;
}

namespace {
// What /proc says process `pid` is doing, for a message; `hint`: with what to do about it.
std::string process_state(int pid, bool hint) {
  auto st = util::proc_stat(pid);
  if (!st) return "gone";
  switch (st->state) {
    case 'T':
      return "stopped (by SIGSTOP or a terminal)" +
             (hint ? ": `kill -CONT " + std::to_string(pid) + "`" : std::string());
    case 't':
      return "stopped by a debugger";
    case 'D':
      return "blocked in the kernel (disk or network file system?)";
    case 'Z':
      return "ended, not yet reaped";
    default:
      return "running";
  }
}
}  // namespace

// A launch request's size limit (a program's arguments and environment are at most a few MiB
// anyway: ARG_MAX).
constexpr size_t kMaxLaunchBytes = 16u << 20;

struct LocalExecutor::Impl {
  LocalOptions opts;
  int sig_fd = -1;
  int ino_fd = -1;
  sigset_t old_mask{};
  AgentLink agent;
  AttemptLog log;
  std::unordered_map<std::string, Run> runs;
  std::unordered_map<int, std::string> by_wd;
  double last_scan = 0;
  std::string hostname = util::host_name();
  std::unordered_map<std::string, int> last_pid;  // trial id -> pid of its last attempt
  bool waited_for_old_agent = false;
  std::string agent_said;  // the running agent's last error that named no launch

  explicit Impl(LocalOptions o)
      : opts(std::move(o)), log(opts.attempt_log), waited_for_old_agent(opts.agent_waited_for) {}

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

  Run new_run(const Launch& l) const {
    Run r;
    r.id = l.trial_id;
    r.attempt = l.attempt;
    r.dir = l.trial_dir;
    r.name = l.trial_dir.filename().string();
    r.offset = l.stdout_offset;
    r.times = ArrivalReader(l.attempt);
    r.who.nonce = attempt_nonce(opts.record_key, r.name, l.attempt);
    return r;
  }

  void watch(Run& r) {
    if (r.wd >= 0) return;
    r.wd = ::inotify_add_watch(ino_fd, r.dir.c_str(), IN_MODIFY);
    if (r.wd >= 0) by_wd[r.wd] = r.id;
    r.dirty = true;
  }

  void close_run(Run& r) {
    if (r.out_fd >= 0) ::close(r.out_fd);
    if (r.times_fd >= 0) ::close(r.times_fd);
    if (r.fifo_fd >= 0) ::close(r.fifo_fd);
    if (r.wd >= 0) {
      ::inotify_rm_watch(ino_fd, r.wd);
      by_wd.erase(r.wd);
    }
    r.out_fd = r.times_fd = r.fifo_fd = r.wd = -1;
  }

  // An exit line (from the agent or the log) that this attempt's supervisor wrote, else
  // nothing (with a warning once per attempt for one it did not write).
  std::optional<ExitInfo> check_record(Run& r, const std::string& text) {
    ExitInfo info;
    switch (check_exit_record(text, r.attempt, r.who, info)) {
      case RecordCheck::kGenuine:
        return info;
      case RecordCheck::kForged:
        if (!r.warned_forged)
          spdlog::warn(
              "trial {}: ignoring an exit record for attempt {} that its supervisor did not "
              "write ({}); the trial is still supervised",
              r.name, r.attempt, log.file().string());
        r.warned_forged = true;
        return std::nullopt;
      case RecordCheck::kAbsent:
        break;
    }
    return std::nullopt;
  }

  void supervisor_known(Run& r, int pid, uint64_t pid_started, std::optional<int> trial,
                        uint64_t trial_started) {
    r.supervisor = pid;
    r.supervisor_started = pid_started;
    r.who.supervisor = pid;
    if (trial) {
      r.who.pid = trial;
      if (trial_started) r.who.started = trial_started;
    }
    if (r.stop != StopAsk::kNone) signal_supervisor(pid, r.stop == StopAsk::kKill);
    watch(r);
  }

  Run* run_for(const AgentEvent& e) {
    auto it = runs.find(e.id);
    if (it == runs.end() || it->second.attempt != e.attempt) return nullptr;
    return &it->second;
  }

  // One line from the agent (start, exit, gone, error), read as the SSH hosts' agents' are.
  void on_event(const std::string& line) {
    using Kind = AgentEvent::Kind;
    auto e = parse_agent_event(line);
    if (!e) return;
    if (e->kind == Kind::kError) {
      std::string message = e->error.empty() ? "?" : e->error;
      // A launch it refused: that attempt never starts (it ends as one whose supervisor could
      // not start, with this message).
      auto it = runs.find(e->id);
      if (it != runs.end() && it->second.via_agent && !it->second.supervisor && e->op == "launch") {
        it->second.supervisor_gone = true;
        it->second.gone_error = "tune-agent refused it: " + message;
        it->second.dirty = true;
      } else {
        agent_said = message;
      }
      spdlog::warn("tune-agent: {}", message);
      return;
    }
    Run* r = run_for(*e);
    if (!r) return;  // an earlier attempt's, or a trial already handled
    if (e->kind == Kind::kStart) {
      if (e->supervisor <= 0) return;
      supervisor_known(*r, e->supervisor, e->supervisor_started,
                       e->pid > 0 ? std::optional<int>(e->pid) : std::nullopt, e->started);
    } else if (e->kind == Kind::kExit) {
      if (auto info = check_record(*r, e->line)) r->exit = std::move(info);
      r->dirty = true;
    } else if (e->kind == Kind::kGone) {
      r->supervisor_gone = true;
      if (!e->error.empty()) r->gone_error = e->error;
      r->dirty = true;
    }
  }

  // The agent is gone (killed, crashed): the attempts it launched go on under their
  // supervisors, which are watched from here on as re-attached ones are.
  void agent_lost() {
    spdlog::warn(
        "tune-agent exited; its trials go on under their supervisors (a new agent "
        "starts with the next launch)");
    for (auto& [id, r] : runs) {
      if (!r.via_agent) continue;
      r.via_agent = false;
      if (!r.supervisor) {  // not started, or its start event was lost: the log says
        log.refresh();
        if (const auto* a = log.find(r.name, r.attempt); a && a->supervisor) {
          supervisor_known(r, *a->supervisor, a->supervisor_started, a->pid, a->started);
        } else {
          r.supervisor_gone = true;
          if (r.gone_error.empty())
            r.gone_error = "tune-agent ended before it started the attempt" +
                           (agent_said.empty() ? std::string() : ": " + agent_said);
        }
      }
      r.dirty = true;
    }
  }

  // An agent that sits on launches (stopped, stuck) is killed, so that it never makes them
  // later, and its launches end as not started; the next launch starts a new agent. Without
  // this a Ctrl-C would wait for ever on attempts nobody starts. (every kRescanPeriod)
  void check_agent(double now) {
    if (!agent.running()) return;
    double oldest = now;
    for (const auto& [id, r] : runs)
      if (r.via_agent && !r.supervisor && !r.supervisor_gone && !r.exit)
        oldest = std::min(oldest, r.sent_at);
    double waited = now - oldest;
    if (waited < kStoppedAgentS) return;
    std::string state = process_state(agent.pid(), false);
    if (waited < kAgentAnswerS && !state.starts_with("stopped")) return;
    spdlog::warn(
        "tune-agent (pid {}) has not started a trial it was asked to start {:.0f} s ago; it is "
        "{}: it is ended, and the trials it held are not started",
        agent.pid(), waited, state);
    agent_said = "it did not answer for " + fmt::format("{:.0f}", waited) + " s (" + state + ")";
    for (auto& [id, r] : runs)
      if (r.via_agent && !r.supervisor && !r.supervisor_gone && !r.exit) r.given_up = true;
    agent.kill();
    agent_lost();
  }

  // Runs not reported by the agent: still running? (every kRescanPeriod)
  void poll_liveness() {
    bool refreshed = false;
    for (auto& [id, r] : runs) {
      if (r.via_agent || r.supervisor_gone || r.exit) continue;
      if (r.supervisor && supervisor_alive(*r.supervisor, r.supervisor_started)) continue;
      if (!refreshed) log.refresh(), refreshed = true;
      if (const auto* a = log.find(r.name, r.attempt); a && a->exit)
        r.exit = check_record(r, *a->exit);
      r.supervisor_gone = true;
      r.dirty = true;
    }
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

  // The notes of when the output arrived that are new since the last call.
  static void read_times(Run& r, OutputEvent& ev) {
    if (r.times_fd < 0) {
      r.times_fd = ::open((r.dir / "stdout.times").c_str(), O_RDONLY | O_CLOEXEC);
      if (r.times_fd < 0) return;  // none: the controller times the output as it reads it
    }
    char buf[65536];
    for (int chunks = 0; chunks < 64; ++chunks) {  // bounded per call, as the output is
      ssize_t n = ::pread(r.times_fd, buf, sizeof buf, static_cast<off_t>(r.times.offset()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      r.times.feed(std::string_view(buf, static_cast<size_t>(n)), ev.arrivals, ev.started);
    }
  }

  // Output first, then (if the attempt has ended and all output is read) the exit.
  void collect(Run& r, std::vector<Event>& outputs, std::vector<Event>& exits, bool& finished) {
    finished = false;
    // The record is written after every process of the attempt is gone, so once it is here
    // the output is final: read to the end, then report the exit.
    const bool ended = r.exit || r.supervisor_gone;
    uint64_t from = r.offset;
    std::string data = read_output(r);
    if (!data.empty() || r.rewound) {
      OutputEvent ev(r.id, std::move(data));
      if (std::exchange(r.rewound, false)) ev.from = from;
      read_times(r, ev);  // after the output: its notes are written before it
      outputs.emplace_back(std::move(ev));
    }
    if (r.more || !ended) return;
    if (!r.exit) {  // gone without a record over the pipe: the log may have it
      log.refresh();
      if (const auto* a = log.find(r.name, r.attempt); a && a->exit)
        r.exit = check_record(r, *a->exit);
    }
    ExitInfo info;
    if (r.exit) {
      info = std::move(*r.exit);
    } else {
      info.attempt = r.attempt;
      // (never started: the agent was given up on, which is the host's failing, not the trial's)
      info.reason =
          r.given_up && !r.supervisor ? ExitReason::kHostLost : ExitReason::kSupervisorDied;
      info.error = r.gone_error.empty()
                       ? "the trial's supervisor exited without recording the trial's exit"
                       : "cannot start the trial's supervisor: " + r.gone_error;
    }
    if (!info.pid && r.who.pid) info.pid = r.who.pid;
    exits.emplace_back(std::in_place_type<ExitEvent>, ExitEvent{r.id, std::move(info)});
    finished = true;
  }

  // The environment the agent holds as its base (sent once per agent; each launch then
  // carries only what differs from it): empty until sent to the running agent.
  std::optional<std::map<std::string, std::string>> env_base;

  // Puts `env` into `req` as the differences from env_base, first making `env` the base (an
  // "env_base" line into `lines`) when the running agent has none.
  void put_env(const std::map<std::string, std::string>& env, nlohmann::json& req,
               std::string& lines) {
    if (!env_base) {
      nlohmann::json base = {{"op", "env_base"}, {"env", env_list(env)}};
      lines = base.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) + "\n";
      env_base = env;
    }
    std::vector<std::string> set, unset;
    for (const auto& [k, v] : env)
      if (auto b = env_base->find(k); b == env_base->end() || b->second != v)
        set.push_back(k + "=" + v);
    for (const auto& [k, v] : *env_base)
      if (!env.count(k)) unset.push_back(k);
    req["env_set"] = std::move(set);
    if (!unset.empty()) req["env_unset"] = std::move(unset);
  }

  static std::vector<std::string> env_list(const std::map<std::string, std::string>& env) {
    std::vector<std::string> out;
    out.reserve(env.size());
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
  }
};

LocalExecutor::LocalExecutor(LocalOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
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
  impl_->agent.close();
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
  Run r = impl.new_run(l);
  // A step-mode attempt's supervisor makes a new FIFO: an earlier attempt's must not be opened
  // for this one's commands in the meantime.
  if (l.stdin_fifo) ::unlink((l.trial_dir / "stdin.fifo").c_str());
  std::vector<std::string> argv = l.argv;
  if (!argv.empty()) argv[0] = impl.resolve(argv[0], l.env);
  nlohmann::json req = {{"op", "launch"},
                        {"id", l.trial_id},
                        {"dir", l.trial_dir.string()},
                        {"attempt", l.attempt},
                        {"lease", impl.opts.lease_file.string()},
                        {"orphan_timeout", impl.opts.orphan_timeout_s},
                        {"grace", impl.opts.grace_s},
                        {"cwd", l.cwd.string()},
                        {"fifo", l.stdin_fifo},
                        {"argv", argv},
                        {"nonce", r.who.nonce}};
  if (!l.params_json.empty()) req["params"] = l.params_json;
  // An agent that is gone (killed; noticed at the next wait()) is replaced once, here.
  Result<void> sent = fail("tune-agent is not running");
  for (int i = 0; i < 2 && !sent; ++i) {
    if (!impl.agent.running()) {
      if (auto up = impl.agent.start(impl.opts.agent, impl.opts.attempt_log); !up) return up;
      impl.env_base.reset();  // a new agent: it has no environment yet
      impl.agent_said.clear();
    }
    std::string lines;
    try {
      impl.put_env(l.env, req, lines);
      lines += req.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    } catch (const std::exception& e) {  // argv or environment that is not UTF-8
      impl.env_base.reset();
      return fail("cannot start trial: its command or environment is not valid UTF-8");
    }
    if (lines.size() > kMaxLaunchBytes) {  // (the agent drops a line over 64 MiB unread)
      impl.env_base.reset();
      return fail("cannot start trial: its command, environment and params.json take ",
                  std::to_string(lines.size() >> 20), " MiB, more than a launch can carry (",
                  std::to_string(kMaxLaunchBytes >> 20), " MiB)");
    }
    sent = impl.agent.send(lines);
    if (!sent) {
      impl.agent.kill();  // a request may be cut short: never reuse this link or this agent
      impl.env_base.reset();
      impl.agent_lost();
    }
  }
  if (!sent) return sent;
  r.sent_at = now();
  impl.last_pid.erase(l.trial_id);
  impl.runs.emplace(l.trial_id, std::move(r));
  return {};
}

namespace {
struct Unlogged {
  int supervisor = 0;
  uint64_t started = 0;
  std::optional<int> trial;  // its first child: the trial (orphans it adopts come later)
  uint64_t trial_started = 0;
};

// The live supervisor that holds `dir`'s lock (agent/dir_lock.hpp), if any.
std::optional<Unlogged> supervisor_of_dir(const fs::path& dir) {
  Unlogged u;
  u.supervisor = agent::flock_holder(dir.string());
  if (u.supervisor <= 0) return std::nullopt;
  u.started = util::process_start_ticks(u.supervisor);
  if (!supervisor_alive(u.supervisor, u.started)) return std::nullopt;
  std::string p = std::to_string(u.supervisor);
  if (auto kids = util::read_file("/proc/" + p + "/task/" + p + "/children", 4096)) {
    int child = std::atoi(kids->c_str());
    if (child > 0) u.trial = child, u.trial_started = util::process_start_ticks(child);
  }
  return u;
}
}  // namespace

Result<Attached> LocalExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  if (!impl.waited_for_old_agent) {
    impl.waited_for_old_agent = true;
    if (auto w = wait_for_agent(impl.opts.attempt_log, 10.0); !w)
      spdlog::warn("{}", w.error().message);
  }
  if (auto it = impl.runs.find(l.trial_id); it != impl.runs.end()) {
    impl.close_run(it->second);
    impl.runs.erase(it);
  }
  Run r = impl.new_run(l);
  r.via_agent = false;
  // A stdout.log cut short (or removed) while no driver ran: what was read of it is kept, and
  // reading goes on from its end, where the trial's next output lands.
  std::error_code ec;
  uint64_t size = fs::file_size(r.dir / "stdout.log", ec);
  if (ec) size = 0;
  if (size < r.offset) {
    if (ec)  // (its supervisor writes on into the removed file: nobody can read that)
      spdlog::warn(
          "trial {}: its stdout.log was removed while no driver ran, after {} bytes read: what "
          "the trial prints from now on is lost",
          r.name, r.offset);
    else
      spdlog::warn(
          "trial {}: its stdout.log is {} bytes, shorter than the {} bytes read before: it was "
          "cut or replaced while no driver ran; output is read on from its end",
          r.name, size, r.offset);
    r.offset = size;
    r.rewound = true;
  }
  impl.log.refresh();
  const LoggedAttempt* a = impl.log.find(r.name, r.attempt);
  Attached found = Attached::kGone;
  bool logged = a && a->supervisor && supervisor_alive(*a->supervisor, a->supervisor_started);
  if (int holder = logged ? agent::flock_holder(r.dir.string()) : -1;
      holder > 0 && holder != *a->supervisor) {
    spdlog::warn(
        "trial {}: {} names supervisor {} for attempt {}, but another process holds the trial "
        "dir: not believed",
        r.name, impl.log.file().string(), *a->supervisor, r.attempt);
    logged = false;
  }
  if (logged) {
    found = Attached::kRunning;
    impl.supervisor_known(r, *a->supervisor, a->supervisor_started, a->pid, a->started);
  } else if (auto unlogged = a && a->exit ? std::nullopt : supervisor_of_dir(r.dir)) {
    // The log lost its line (cut or replaced while no driver ran), but the trial dir's lock
    // names a live supervisor: the attempt runs, and is re-attached rather than started again.
    spdlog::warn(
        "trial {}: {} names no running supervisor for attempt {}, but one holds the trial dir "
        "(pid {}): re-attached to it; was the log cut or replaced while no driver ran?",
        r.name, impl.log.file().string(), r.attempt, unlogged->supervisor);
    found = Attached::kRunning;
    impl.supervisor_known(r, unlogged->supervisor, unlogged->started, unlogged->trial,
                          unlogged->trial_started);
  } else if (a && a->exit) {
    if (a->supervisor)
      impl.supervisor_known(r, *a->supervisor, a->supervisor_started, a->pid, a->started);
    r.exit = impl.check_record(r, *a->exit);
    if (!r.exit) {
      impl.close_run(r);
      return Attached::kGone;
    }
    r.supervisor_gone = true;
    found = Attached::kEnded;
  } else {
    return Attached::kGone;
  }
  impl.watch(r);
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
  if (r.supervisor_gone || r.exit) return;
  if (!r.supervisor) {  // not started yet: asked again as soon as it is
    if (now || r.stop == StopAsk::kNone) r.stop = now ? StopAsk::kKill : StopAsk::kTerm;
    return;
  }
  if (!supervisor_alive(*r.supervisor, r.supervisor_started))
    return;  // gone; the pid may be reused
  signal_supervisor(*r.supervisor, now);
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
  pollfd fds[3] = {
      {impl.sig_fd, POLLIN, 0}, {impl.ino_fd, POLLIN, 0}, {impl.agent.fd(), POLLIN, 0}};
  int n = ::ppoll(fds, impl.agent.running() ? 3 : 2, &ts, nullptr);
  if (n > 0 && (fds[0].revents & POLLIN)) {
    signalfd_siginfo si{};
    while (::read(impl.sig_fd, &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) continue;  // the agent's supervisors are its children
      interrupts.emplace_back(std::in_place_type<InterruptEvent>,
                              InterruptEvent{static_cast<int>(si.ssi_signo)});
    }
  }
  if (impl.agent.running() && n > 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
    for (const auto& line : impl.agent.read_events()) impl.on_event(line);
    if (!impl.agent.running()) impl.agent_lost();
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
    for (auto& [id, r] : impl.runs) r.dirty = true;
    impl.check_agent(t);
    impl.poll_liveness();
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
    if (auto& r = impl.runs[id]; r.who.pid) impl.last_pid[id] = *r.who.pid;
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
  return it->second.who.pid;
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
  timespec times[2] = {lease_stamp(), lease_stamp()};
  if (::utimensat(AT_FDCWD, p.c_str(), times, 0) != 0) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
    (void)::utimensat(AT_FDCWD, p.c_str(), times, 0);
  }
}

std::vector<LiveAttempt> LocalExecutor::live_attempts() {
  auto& impl = *impl_;
  if (!impl.waited_for_old_agent) {  // launches it was asked for are in the log once it exits
    impl.waited_for_old_agent = true;
    if (auto w = wait_for_agent(impl.opts.attempt_log, 10.0); !w)
      spdlog::warn("{}", w.error().message);
  }
  impl.log.refresh();
  // Only a supervisor that holds its trial dir's lock is stopped as a stray: a line naming
  // another process (anyone of the user may append one) never makes a resume stop another
  // trial's or another experiment's supervisor.
  fs::path exp_dir = impl.opts.attempt_log.parent_path().parent_path();
  std::vector<LiveAttempt> out;
  for (auto& a : exec::live_attempts(impl.log)) {
    // (each supervisor holds its dir's lock from before it names itself in the log)
    if (a.trial_name.find('/') == std::string::npos &&
        agent::flock_holder((exp_dir / a.trial_name).string()) == a.supervisor)
      out.push_back(std::move(a));
    else
      spdlog::warn(
          "{} names supervisor {} for {} attempt {}, but that process does not hold "
          "the trial dir: not stopped",
          impl.opts.attempt_log.string(), a.supervisor, a.trial_name, a.attempt);
  }
  return out;
}

void LocalExecutor::end_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
  end_local_attempts(which, grace_s);
}

Result<void> wait_for_agent(const fs::path& attempt_log, double timeout_s) {
  fs::path lock = attempt_log;
  lock += ".agent-lock";
  // (for writing: an exclusive flock over NFS needs that)
  int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return {};  // no agent ever ran for this experiment here
  double end = clock_s(CLOCK_MONOTONIC) + timeout_s;
  bool warned = false;
  Result<void> out;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {  // a file system without flock: cannot tell
      spdlog::warn("cannot lock {} ({}): not waiting for an earlier tune-agent", lock.string(),
                   std::strerror(errno));
      break;
    }
    if (clock_s(CLOCK_MONOTONIC) >= end) {
      // Going on beside it would start a second agent that cannot take the lock, and the old
      // one would launch what it still holds whenever it moves again: stop here, say why.
      int pid = agent::flock_holder(lock.string());
      auto st = util::proc_stat(pid);
      std::string comm = util::printable(st ? st->comm : std::string(), 40);
      bool agent = comm.starts_with("tune-agent");
      out = fail(agent || pid <= 0 ? "the tune-agent of an earlier driver"
                                   : "a process that is not a tune-agent ('" + comm + "')",
                 pid > 0 ? " (pid " + std::to_string(pid) + ", " + process_state(pid, true) + ")"
                         : std::string(),
                 " still holds ", lock.string(), " after ", fmt::format("{:g}", timeout_s),
                 agent || pid <= 0 ? " s: it may still launch trials it was asked for; let it "
                                     "finish or end it, then run again"
                                   : " s: end it, then run again");
      break;
    }
    if (!warned) spdlog::info("waiting for the previous driver's tune-agent to finish");
    warned = true;
    timespec ts{0, 10'000'000};
    ::nanosleep(&ts, nullptr);
  }
  ::close(fd);  // releases the lock if it was taken
  return out;
}

Result<fs::path> find_helper_program(const std::string& name, const char* env_var,
                                     const fs::path& self) {
  if (const char* env = std::getenv(env_var); env && *env) {
    if (::access(env, X_OK) == 0) return fs::path(env);
    return fail("cannot run ", name, " at '", util::printable(env, 200), "' (", env_var,
                "): ", std::strerror(errno));
  }
  std::vector<fs::path> places;  // beside tune (a build dir), then as installed
  if (!self.empty())
    places = {self.parent_path() / name,
              self.parent_path().parent_path() / "libexec" / "tune" / name};
  std::string tried;
  for (const auto& p : places) {
    if (::access(p.c_str(), X_OK) == 0) return p;
    tried += (tried.empty() ? "'" : ", '") + p.lexically_normal().string() + "'";
  }
  if (tried.empty()) tried = "nowhere (the path of the running tune is unknown)";
  return fail("cannot find ", name, ": looked in ", tried, " and $", env_var,
              " (unset); install it there or set ", env_var, " to its path");
}

namespace {
fs::path self_exe() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self;
}
}  // namespace

Result<fs::path> find_supervisor() {
  return find_helper_program("tune-supervisor", "TUNE_SUPERVISOR", self_exe());
}
Result<fs::path> find_agent() {
  return find_helper_program("tune-agent", "TUNE_AGENT", self_exe());
}

}  // namespace tune::exec
