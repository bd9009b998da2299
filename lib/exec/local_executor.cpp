// Runs trial attempts on this machine through one tune-agent (agent_link.hpp), which forks a
// supervisor per attempt. Output is read from each trial's stdout.log by offset (inotify says
// when it grew), so trials never block on the driver; starts and exits arrive as agent events,
// and the attempt log (attempt_log.hpp) is where a re-attaching driver finds them again (its
// state is in local_worker.hpp; a resume's side in local_resume.cpp).
#include "exec/local_worker.hpp"

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

namespace tune::exec::local_impl {

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

}  // namespace tune::exec::local_impl

namespace tune::exec {

std::unordered_map<std::string, pid_t> live_supervisors(const fs::path& exp_dir) {
  AttemptLog log(exp_dir / kAttemptLog);
  log.refresh();
  std::unordered_map<std::string, pid_t> out;
  for (const auto& [k, pid] : log.live()) out[k] = pid;
  return out;
}

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

void LocalExecutor::also_wake_on(int fd) {
  impl_->wake_fd = fd;
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
  // (the agent's pipe, when it runs, and the wake descriptor, when there is one)
  pollfd fds[4] = {{impl.sig_fd, POLLIN, 0},
                   {impl.ino_fd, POLLIN, 0},
                   {impl.agent.running() ? impl.agent.fd() : -1, POLLIN, 0},
                   {impl.wake_fd, POLLIN, 0}};
  int n = ::ppoll(fds, 4, &ts, nullptr);
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
    if (!r.stdin_lost.empty() && !std::exchange(r.stdin_lost_said, true)) {
      r.pending_in.clear();
      outputs.emplace_back(std::in_place_type<StdinLostEvent>,
                           StdinLostEvent{id, r.attempt, r.stdin_lost});
    }
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
