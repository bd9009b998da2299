// The local executor's insides (local_executor.hpp), shared by its files: one attempt as the
// driver sees it (Run) and the executor's state (LocalExecutor::Impl). The files, by seam:
//   local_executor.cpp   starting attempts, reading their output and events, stopping them
//   local_resume.cpp     a resume's questions: re-attach, live attempts, the old agent
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "exec/agent_link.hpp"
#include "exec/agent_protocol.hpp"
#include "exec/arrivals.hpp"
#include "exec/attempt_log.hpp"
#include "exec/exit_record.hpp"
#include "exec/local_executor.hpp"
#include "util/clock.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec::local_impl {

constexpr size_t kReadChunk = 4u << 20;  // per trial per wakeup: keeps the loop fair
constexpr double kRescanPeriod = 1.0;    // safety net for missed inotify events; liveness polls
// An agent that has not started a launch this long after it was sent is given up on (killed,
// its launches not started); one that is stopped (SIGSTOP, a debugger), after kStoppedAgentS.
constexpr double kAgentAnswerS = 30.0;
constexpr double kStoppedAgentS = 3.0;
// How long a step-mode command waits for its attempt's stdin.fifo to be there and read.
constexpr double kStdinWaitS = 10.0;

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
  double stdin_waits_from = -1;  // since when a line waits for its FIFO to be there (monotonic)
  std::string stdin_lost;        // why no line can reach it (then nothing is sent)
  bool stdin_lost_said = false;
  bool dirty = true;
  bool more = false;     // unread output remains after a full chunk
  bool rewound = false;  // re-attached to a stdout.log shorter than what was read: say where
};

// What /proc says process `pid` is doing, for a message; `hint`: with what to do about it.
std::string process_state(int pid, bool hint);

}  // namespace tune::exec::local_impl

namespace tune::exec {

using namespace local_impl;

// A launch request's size limit (a program's arguments and environment are at most a few MiB
// anyway: ARG_MAX).
constexpr size_t kMaxLaunchBytes = 16u << 20;

struct LocalExecutor::Impl {
  LocalOptions opts;
  int sig_fd = -1;
  int ino_fd = -1;
  int wake_fd = -1;  // also_wake_on()
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

  // Writes what waits for the attempt's stdin.fifo, opened (and kept open) once it is there
  // and read: a FIFO only, never through a link. One not there or not read for kStdinWaitS
  // while its supervisor runs, or something else in its place: r.stdin_lost says why, and
  // wait() tells the controller, which fails the attempt.
  void flush_stdin(Run& r) {
    if (r.pending_in.empty() || !r.stdin_lost.empty()) return;
    if (r.fifo_fd < 0) {
      r.fifo_fd =
          ::open((r.dir / "stdin.fifo").c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
      if (r.fifo_fd < 0) {
        int e = errno;
        double t = clock_s(CLOCK_MONOTONIC);
        // (timed from its supervisor's start: launches may wait their turn in a busy agent)
        if (!r.supervisor) return;
        if (r.stdin_waits_from < 0) r.stdin_waits_from = t;
        // (not made yet, or not open yet: its supervisor makes it, then opens it)
        if ((e == ENOENT || e == ENXIO) &&
            (t - r.stdin_waits_from < kStdinWaitS || r.supervisor_gone || r.exit))
          return;
        r.stdin_lost = e == ELOOP    ? "its stdin.fifo is a symbolic link"
                       : e == ENXIO  ? "nobody reads its stdin.fifo"
                       : e == ENOENT ? "its stdin.fifo is not there"
                                     : std::string("its stdin.fifo: ") + std::strerror(e);
        return;
      }
      struct stat st {};
      if (::fstat(r.fifo_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
        ::close(r.fifo_fd);
        r.fifo_fd = -1;
        r.stdin_lost = "its stdin.fifo is not a FIFO";
        return;
      }
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
      judge_cut(info, r.offset);
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

}  // namespace tune::exec
