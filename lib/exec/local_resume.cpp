// The local executor's side of a resume (local_worker.hpp): attempts re-attached from the
// attempt log or by their trial dir's lock, the live ones listed, and the wait for the agent of
// the driver that went before.
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/dir_lock.hpp"
#include "exec/local_worker.hpp"

namespace tune::exec {

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

}  // namespace tune::exec
