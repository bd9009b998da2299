// Starting an attempt on its SSH host, on the host's I/O thread: the workdir's copy made
// current, params.json, earlier attempts' logs and a restore point placed there, then the
// attempt's supervisor forked by the host's agent (one request line on its channel).
#include <spdlog/spdlog.h>

#include "exec/exit_record.hpp"
#include "exec/ssh_worker.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using namespace ssh_impl;

namespace {

// params.json up to this size goes in the launch request, a bigger one over SFTP first (a
// config this small reaches the trial in TUNE_CONFIG too: if its supervisor cannot write the
// file, which it says in stderr.log, the trial still has it; a bigger one fails the start).
constexpr size_t kParamsInRequest = 128u << 10;

// Why an attempt did not start: its host is gone (host_lost: re-queued elsewhere) or the host
// refused it (exec_failed: a refused command; supervisor_died: a full disk there).
struct Unstarted {
  bool host_lost = false;
  std::string why;
  // Not the trial's fault, nor a lost host (its disk is full): retried as a supervisor that
  // died is, per failure_config, instead of an error that is not retried.
  bool host_fault = false;
};

// trial.sync_workdir: words of the command (and the cwd) that name a path inside the workdir
// name the same path in its copy on the host.
void remap_to_copy(const std::string& from, const std::string& to, std::string& cwd,
                   std::vector<std::string>& argv) {
  auto remap = [&](std::string& s) {
    if (s == from)
      s = to;
    else if (s.starts_with(from + "/"))
      s = to + s.substr(from.size());
  };
  remap(cwd);
  for (auto& a : argv) remap(a);
}

// The launch request: the attempt's supervisor runs it in the trial dir there.
std::string launch_request(const SshOptions& opts, const SshHost& h, const Launch& l, const Run& r,
                           const std::string& cwd, const std::vector<std::string>& argv) {
  RemoteLaunch rl;
  rl.id = l.trial_id;
  rl.attempt = l.attempt;
  rl.dir = r.dir;
  rl.record = r.record;
  rl.nonce = r.who.nonce;
  rl.lease = h.lease;
  rl.orphan_timeout = opts.orphan_timeout_s;
  rl.grace = opts.grace_s;
  rl.cwd = cwd;
  rl.fifo = l.stdin_fifo;
  rl.argv = argv;
  rl.env = l.env;
  rl.params = r.params;
  // (the answer its last sync takes in place of asking: plan_sync, ssh_run.cpp)
  rl.changes_at_exit = opts.syncer == "rsync" && h.info.safe_reads;
  return agent_launch_request(rl);
}

// Starts the attempt through the host's agent and waits (on the host's thread) for its answer:
// the supervisor's pid and where the output starts, or why it did not start. Other events that
// come meanwhile are kept for the poll.
struct Started {
  int supervisor = -1;
  uint64_t offset = 0;
  uint64_t times_offset = 0;  // where its notes start in stdout.times
  std::string error;          // set: not started
  bool transient = false;     // and it may start if asked again (fork or exec failed there)
  bool unreachable = false;   // and the host (or its agent) did not answer
  bool watched = false;       // the agent says when its output grows
};

Started launch_through_agent(Worker& w, const std::string& request, const std::string& id,
                             int attempt) {
  Started s;
  if (auto sent = w.h.agent_send(request); !sent) {
    s.error = sent.error().message;
    s.unreachable = true;
    return s;
  }
  double deadline = mono() + 15;
  while (mono() < deadline) {
    auto lines = w.h.agent_events(200);
    if (!lines) {
      s.error = lines.error().message;
      s.unreachable = true;
      return s;
    }
    for (const auto& line : *lines) {
      auto e = parse_agent_event(line);
      if (!e) continue;
      bool mine = e->id == id && e->attempt == attempt;
      if (mine && e->kind == AgentEvent::Kind::kLaunched) {
        s.supervisor = e->supervisor;
        s.offset = e->offset;
        s.times_offset = e->times_offset;
        s.watched = e->watched;
      } else if (mine && e->kind == AgentEvent::Kind::kGone && e->supervisor < 0) {
        s.error = e->error;
        s.transient = e->transient;
      } else if (e->kind == AgentEvent::Kind::kError && (e->op.empty() || e->op == "launch") &&
                 (e->id.empty() || e->id == id)) {
        // (launches to a host are made one at a time: an error now that does not answer a
        // watch or a file request is this request's)
        s.error = "tune-agent refused the launch: " + e->error;
      } else {
        w.agent_events.push_back(std::move(*e));
      }
    }
    if (s.supervisor > 0 || !s.error.empty()) return s;
  }
  s.error = "tune-agent on " + w.name + " did not answer a launch within 15 s";
  s.unreachable = true;
  return s;
}

}  // namespace

// trial.sync_workdir: the workdir's copy on the host is current before a trial starts there.
Result<void> SshExecutor::Impl::ensure_workdir(Worker& w) {
  if (!opts.workdir || w.workdir_ready) return {};
  const auto& p = *opts.workdir;
  std::string copy = w.h.info.exp_dir + "/" + kWorkdirCopy;
  std::string stamp_file = copy + "/.tune_workdir_stamp";
  if (auto there = w.h.read(stamp_file, 0, 64); there && *there == p.stamp + "\n") {
    spdlog::info("host {}: the copy of {} there is current: not copied again", w.name,
                 p.workdir.string());
    w.workdir_ready = true;
    return {};
  }
  std::vector<std::string> cmd = {"rsync", "-rlt",          util::kRsyncExactTimes,
                                  "-e",    w.h.ssh_words(), "--exclude=/.tune_workdir_stamp"};
  for (const auto& x : p.excludes) cmd.push_back("--exclude=" + x);
  cmd.push_back(p.workdir.string() + "/");
  cmd.push_back(w.h.remote_prefix() + copy + "/");
  fs::path log = opts.head_exp_dir / ".tune" / ("workdir-" + std::to_string(w.h.index) + ".log");
  double t0 = mono();
  // Bounded like every sync: a stalled link must not hold this host's thread for ever.
  auto rc = util::run_process(cmd, log, opts.sync_timeout);
  if (rc && *rc == util::kRsyncVanished) {
    // Files deleted while rsync ran (an editor's temporary file, a log being rotated): the
    // copy holds everything else, which is what a copy taken a moment later would hold.
    spdlog::warn(
        "host {}: files in {} vanished while they were copied; the copy there has the "
        "rest ({})",
        w.name, p.workdir.string(), util::last_line(log));
  } else if (!rc || *rc != 0) {
    return fail("cannot copy trial.workdir ", p.workdir.string(), " to ", w.name, ": ",
                rc ? util::last_line(log) : rc.error().message);
  }
  if (auto written = w.h.write(stamp_file, p.stamp + "\n", 0644); !written) return written;
  std::string left;
  for (const auto& x : p.left_out) left += (left.empty() ? "" : ", ") + x;
  spdlog::info("host {}: copied {} to {} ({} files, {:.1f} MB, {:.2f} s){}", w.name,
               p.workdir.string(), copy, p.files, static_cast<double>(p.bytes) / 1e6, mono() - t0,
               left.empty() ? "" : "; left out: " + left);
  w.workdir_ready = true;
  return {};
}

// The head's stdout.log and stderr.log go to the host first when the host's copies are
// shorter (the trial ran elsewhere before), so that the host's files, which the syncs bring
// back over the head's, keep every earlier attempt.
void SshExecutor::Impl::push_logs(Worker& w, const Run& r) {
  for (const char* log : {"stdout.log", "stderr.log"}) {
    uint64_t here = util::file_size_or_zero(r.head_dir / log);
    if (here == 0 || w.h.size_of(r.dir + "/" + log).value_or(0) >= here) continue;
    (void)w.h.shell_run("mkdir -p -- " + q(r.dir));
    auto content = util::read_file(r.head_dir / log);
    auto written = content ? w.h.write(r.dir + "/" + log, *content, 0644)
                           : Result<void>(std::unexpected(content.error()));
    if (!written)
      spdlog::warn(
          "trial {}: cannot copy {} to {}: earlier attempts' output stays on the head only: {}",
          r.id, log, w.name, written.error().message);
  }
}

// An attempt of `l` on the host: its dir there and on the head, reading from l's offset.
std::string SshExecutor::Impl::host_cwd(const Worker& w, const fs::path& cwd) const {
  std::string dir = cwd.string();
  std::vector<std::string> none;
  if (opts.workdir)
    remap_to_copy(opts.workdir->workdir.string(), w.h.info.exp_dir + "/" + kWorkdirCopy, dir, none);
  return dir;
}

Run SshExecutor::Impl::new_run(const Launch& l, Worker& w) const {
  Run r;
  r.id = l.trial_id;
  r.attempt = l.attempt;
  r.host = &w.h;
  r.dir = w.h.info.exp_dir + "/" + l.trial_dir.filename().string();
  r.head_dir = opts.head_exp_dir / l.trial_dir.filename();
  r.offset = l.stdout_offset;
  r.times = ArrivalReader(l.attempt);
  std::string name = l.trial_dir.filename().string();
  r.record = w.h.info.exp_dir + "/" + record_path(name);
  r.who.nonce = attempt_nonce(opts.record_key, name, l.attempt);
  return r;
}

namespace {

// What the attempt needs on the host before it starts: params.json, the head's logs of earlier
// attempts, and a restore point the host lacks (the trial ran elsewhere before).
std::optional<Unstarted> place_files(SshExecutor::Impl& impl, Worker& w, const Launch& l, Run& r) {
  auto unreachable = [&] { return Unstarted{true, "host " + w.name + " is unreachable"}; };
  // (a config over 128 KiB reaches the trial only through this file)
  auto params = util::read_file(l.trial_dir / "params.json", 64u << 20);
  std::error_code ec;
  if (!params && fs::exists(l.trial_dir / "params.json", ec))
    return Unstarted{false, params.error().message};
  // (a small one goes in the launch request: its supervisor writes it, after it took the dir)
  if (params && params->size() <= kParamsInRequest &&
      util::invalid_utf8_at(*params) == std::string::npos) {  // (the request is JSON)
    r.params = std::move(*params);
  } else if (params) {
    (void)w.h.shell_run("mkdir -p -- " + q(r.dir));
    if (auto written = w.h.write(r.dir + "/params.json", *params, 0644); !written) {
      impl.check(w);
      if (!w.up) return unreachable();
      bool full = !w.h.full_note(r.dir).empty();
      return Unstarted{false, written.error().message, full};
    }
  }
  impl.check(w);
  if (!w.up) return unreachable();
  impl.push_logs(w, r);
  if (auto it = l.env.find("TUNE_RESTORE_CHECKPOINT"); it != l.env.end()) {
    std::string name = fs::path(it->second).filename().string();
    if (!w.h.size_of(it->second)) {
      (void)w.h.shell_run("mkdir -p -- " + q(r.dir));
      fs::path log = impl.opts.head_exp_dir / ".tune" / ("push-" + r.id + ".log");
      auto rc = util::run_process({"rsync", "-rlt", util::kRsyncExactTimes, "-e", w.h.ssh_words(),
                                   (r.head_dir / name).string(), w.h.remote_prefix() + r.dir + "/"},
                                  log);
      if (!rc || *rc != 0)
        return Unstarted{true,
                         "cannot push " + name + " to " + w.name + ": " + util::last_line(log)};
      r.checkpoints.insert(name);
    }
  }
  return std::nullopt;
}

}  // namespace

// Launches the host's agent never answered: the agent that had them is killed (a pending
// SIGKILL ends it before it forks again, even out of a stalled system call), then any
// supervisor it started for them, once its fork has had time to become that supervisor.
void SshExecutor::Impl::end_unsure_launches(Worker& w, int keep_agent) {
  if (w.unsure.empty() || !w.up) return;
  std::string cmd;
  for (const auto& u : w.unsure)
    if (u.agent > 0 && u.agent != keep_agent)
      cmd += "kill -KILL " + std::to_string(u.agent) + " 2>/dev/null; ";
  (void)w.h.shell_run(cmd + "sleep 0.2; true");
  for (auto& u : std::exchange(w.unsure, {})) {
    const auto& [dir, attempt, agent] = u;
    w.live_cache.reset();  // (asked again: the launch may have started since)
    auto pid = find_supervisor(w, dir, attempt);
    if (!pid) {
      w.unsure.push_back(std::move(u));  // not asked: again when the host answers
      continue;
    }
    if (*pid <= 0) continue;
    spdlog::warn(
        "host {}: ending supervisor {} of a launch whose answer never came ({} attempt {})", w.name,
        *pid, dir, attempt);
    (void)w.h.shell_run("pkill -KILL -s " + std::to_string(*pid) + " 2>/dev/null; true");
  }
}

void SshExecutor::Impl::start_on_host(Worker& w, const Launch& l, Run r) {
  // Not started: host_lost (re-queued) if the host is down, else exec_failed.
  auto unstarted = [&](const Unstarted& u) {
    if (u.host_lost) check(w);
    ExitInfo info;
    info.attempt = l.attempt;
    info.reason = u.host_lost    ? ExitReason::kHostLost
                  : u.host_fault ? ExitReason::kSupervisorDied
                                 : ExitReason::kExecFailed;
    info.error = u.why;
    emit(ExitEvent{l.trial_id, std::move(info)});
  };
  if (!w.up) return unstarted({true, "host " + w.name + " is unreachable"});
  if (auto it = w.runs.find(l.trial_id); it != w.runs.end()) {
    r.checkpoints = it->second.checkpoints;
    drop_sync(it->second);
    w.runs.erase(it);
  }
  remove_sync_leftovers(r.head_dir);
  // trial.sync_workdir: the trial runs in the workdir's copy there.
  std::string cwd = host_cwd(w, l.cwd);
  std::vector<std::string> argv = l.argv;
  if (opts.workdir) {
    if (auto copied = ensure_workdir(w); !copied) {
      check(w);
      return unstarted({!w.up, copied.error().message});
    }
    std::string ignored;
    remap_to_copy(opts.workdir->workdir.string(), w.h.info.exp_dir + "/" + kWorkdirCopy, ignored,
                  argv);
  }
  if (auto u = place_files(*this, w, l, r)) return unstarted(*u);
  // The request is JSON: a word that is not UTF-8 would reach the host changed.
  std::vector<std::string> words = argv;
  words.push_back(cwd);
  words.push_back(r.dir);
  for (const auto& [k, v] : l.env) words.push_back(k + "=" + v);
  for (const auto& word : words)
    if (util::invalid_utf8_at(word) != std::string::npos)
      return unstarted({false, "cannot start it on " + w.name + ": '" + util::printable(word, 80) +
                                   "' is not UTF-8 text"});
  std::string request = launch_request(opts, w.h, l, r, cwd, argv);
  r.params.reset();
  w.live_cache.reset();
  double t0 = mono();
  Started started = launch_through_agent(w, request, l.trial_id, l.attempt);
  if (started.unreachable) {
    // No answer. The agent may yet start it (a stalled filesystem there), or have started it
    // just before it went: it is ended first, then any supervisor of this attempt, and the
    // launch is asked once more of a new agent. A host that went down meanwhile does this when
    // it is back, before anything else starts there.
    w.unsure.push_back({r.dir, l.attempt, w.h.agent_pid});
    check(w);
    spdlog::warn("trial {}: {}{}", r.head_dir.filename().string(), started.error,
                 w.up ? "; ending that agent and asking a new one" : "");
    if (w.up) {
      end_unsure_launches(w, -1);
      restart_agent(w);
      if (w.up) started = launch_through_agent(w, request, l.trial_id, l.attempt);
      if (started.unreachable) w.unsure.push_back({r.dir, l.attempt, w.h.agent_pid});
    }
  }
  w.stats.start_ms.push_back((mono() - t0) * 1000);
  r.started_at = t0;
  if (started.unreachable) {
    check(w);
    return unstarted({true, started.error});
  }
  if (!started.error.empty()) {
    if (!started.transient)
      return unstarted({false, w.name + ": cannot start the supervisor: " + started.error});
    // Not the trial's fault (fork or exec of the supervisor failed there): retried as a
    // supervisor that died is.
    ExitInfo info;
    info.attempt = l.attempt;
    info.reason = ExitReason::kSupervisorDied;
    info.error = w.name + ": cannot start the supervisor: " + started.error;
    emit(ExitEvent{l.trial_id, std::move(info)});
    return;
  }
  r.offset = started.offset;
  r.times = ArrivalReader(l.attempt, started.times_offset);
  r.sup_pid = started.supervisor;
  r.launched_by = w.h.agent_gen;
  // Its first periodic sync one period from now (a trial that just started has nothing to
  // copy: before, each start cost an rsync at once, which its end-of-trial sync then waited for).
  r.next_sync = mono() + opts.sync_period;
  r.watched_by = started.watched ? w.h.agent_gen : -1;
  // (watched from before it started: its agent says when to look, the routine looks start now)
  r.look = !started.watched;
  r.last_look = mono();
  r.who.supervisor = r.sup_pid;
  // Where its output starts: the controller reads the attempt's lines from there.
  OutputEvent where(l.trial_id, "");
  where.from = r.offset;
  emit(std::move(where));
  w.runs[l.trial_id] = std::move(r);
  expect_output(w);
}

}  // namespace tune::exec
