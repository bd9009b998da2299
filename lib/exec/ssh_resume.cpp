// A resume's questions to the SSH hosts, asked before the loop runs and waited for: which
// attempts still run there (re-attach), which supervisors of an earlier driver live, ending
// them, and fetching checkpoints that were saved on a host but never reached the head.
#include <spdlog/spdlog.h>

#include <future>
#include <map>
#include <set>
#include <unordered_map>

#include "exec/attempt_log.hpp"
#include "exec/ssh_worker.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

namespace tune::exec {

using namespace ssh_impl;

namespace {

// The host's /proc/PID/stat lines after `mark` in `out`, by pid.
std::unordered_map<int, util::ProcStat> stats_after(const std::string& out, size_t mark) {
  std::unordered_map<int, util::ProcStat> procs;
  for (const auto& line : lines_of(out.substr(mark)))
    if (auto parsed = util::parse_proc_stat(line)) procs[parsed->first] = parsed->second;
  return procs;
}

constexpr std::string_view kStats = "--- stat\n", kBusy = "--- busy\n";

// A shell command that prints the pids of the processes that hold an flock on `dir` (by its
// inode in the host's /proc/locks; nothing if it is not there).
std::string dir_lock_holders(const std::string& dir) {
  return "i=$(stat -c %i " + q(dir) +
         " 2>/dev/null) && awk -v i=\":$i\" '$2 == \"FLOCK\" && "
         "substr($6, length($6) - length(i) + 1) == i { print $5 }' /proc/locks";
}

// A re-attached attempt is read from where its supervisor says its output and notes start, if
// that is past where the state says: a driver killed before it wrote down what the launch
// answered has the size of the head's copy of stdout.log there, and what comes before is an
// earlier attempt's, or an earlier experiment's of the same name whose trial dirs the host kept.
void read_from(Run& r, std::optional<uint64_t> stdout_from, std::optional<uint64_t> times_from) {
  if (stdout_from && *stdout_from > r.offset) {
    spdlog::info(
        "trial {}: attempt {}'s output starts at byte {} of stdout.log there: read from it",
        r.head_dir.filename().string(), r.attempt, *stdout_from);
    r.offset = *stdout_from;
  }
  if (times_from) r.times = ArrivalReader(r.attempt, *times_from);
}

}  // namespace

// The attempts whose supervisors run on the host now: the lines of its attempt log in which
// the supervisors its agents forked named themselves, each believed as on the driver's machine
// but by the host's /proc. A supervisor is not dumpable (its nonce), so only its stat is read,
// which anyone may. Hosts that share a pid namespace (test hosts do) keep apart, as each has a
// log of its own. Read once per resume (the cache is dropped at the host's next launch).
// Nullopt if the host could not be asked.
std::optional<std::vector<LiveAttempt>> SshExecutor::Impl::live_supervisors(Worker& w) {
  if (w.live_cache) return w.live_cache;
  SshHost& h = w.h;
  // Under the log's lock (shared), which a launch holds until its supervisor is in the log
  // (apps/tune-agent/remote.hpp): no launch an agent was making is missed. The log's last 32
  // MB (its oldest lines name attempts that ended long ago), without any line that holds the
  // kept shell's end marker or is longer than 4 KB (a supervisor's are ~200 bytes; anyone of
  // the user may append lines).
  std::string read =
      "grep -F '\"event\":\"supervising\"' \"$1\" 2>/dev/null | "
      "grep -v -E '__tune_done_[0-9a-f]+_[0-9]+__ ' | awk 'length($0) <= 4096' | tail -c 33554432";
  std::string args = q(read) + " sh " + q(h.attempt_log);
  std::string out;
  auto st = h.shell_run(
      "if command -v flock >/dev/null 2>&1; then flock -E 75 -s -w 5 " +
          q(h.attempt_log + ".agent-lock") + " sh -c " + args +
          "; r=$?; else r=1; fi; [ $r != 0 ] && { [ $r = 75 ] && echo '--- busy'; sh -c " + args +
          "; }; echo '--- stat'; for p in $(pgrep -x tune-agent 2>/dev/null); do "
          "cat /proc/$p/stat 2>/dev/null; echo; done; true",
      &out);
  if (!st) return std::nullopt;
  size_t mark = out.rfind(kStats);
  if (mark == std::string::npos) return std::nullopt;
  if (out.rfind(kBusy, mark) != std::string::npos)
    spdlog::warn(
        "host {}: a launch held {}.agent-lock for 5 s: its attempt log was read "
        "without it, and an attempt starting there just now may be missed",
        w.name, h.attempt_log);
  AttemptLog log(h.attempt_log);
  log.add_lines(std::string_view(out).substr(0, mark));
  auto procs = stats_after(out, mark + kStats.size());
  auto live = exec::live_attempts(log, [&](int pid, uint64_t ticks) {
    auto it = procs.find(pid);
    return it != procs.end() && stat_fits_supervisor(it->second, pid, ticks) &&
           it->second.comm == "tune-agent";
  });
  // And which hold their trial dir's lock there (a supervisor takes it before it names itself
  // in the log): a line naming a process while another holds that dir (anyone of the user may
  // append lines) is not believed; one whose dir nobody holds (replaced while no driver ran)
  // is re-attached, but not stopped as a stray.
  if (!live.empty()) {
    std::string cmd;
    for (size_t k = 0; k < live.size(); ++k)
      // (a name that is not one dir of this experiment, "../other/trial", is never looked up:
      // its supervisor then holds no dir of ours and is not stopped as a stray)
      if (const auto& n = live[k].trial_name;
          n.find('/') == std::string::npos && !n.empty() && n != "." && n != "..")
        cmd += "h=$(" + dir_lock_holders(h.info.exp_dir + "/" + live[k].trial_name) +
               "); case \" $(echo $h) \" in *\" " + std::to_string(live[k].supervisor) +
               " \"*) echo " + std::to_string(k) + " ok;; \"  \") ;; *) echo " + std::to_string(k) +
               " other;; esac; ";
    std::string held;
    if (!h.shell_run(cmd + "true", &held)) return std::nullopt;
    std::set<size_t> holds, others;
    for (const auto& line : lines_of(held))
      (line.ends_with(" ok") ? holds : others).insert(std::strtoull(line.c_str(), nullptr, 10));
    std::vector<LiveAttempt> kept;
    for (size_t k = 0; k < live.size(); ++k) {
      if (others.count(k)) {
        spdlog::warn(
            "host {}: its attempt log names supervisor {} for {} attempt {}, but another "
            "process holds the trial dir: not believed",
            w.name, live[k].supervisor, live[k].trial_name, live[k].attempt);
        continue;
      }
      live[k].holds_dir = holds.count(k) > 0;
      kept.push_back(std::move(live[k]));
    }
    live = std::move(kept);
  }
  w.live_cache = std::move(live);
  return w.live_cache;
}

// The live supervisor that holds trial dir `dir` there (agent/dir_lock.hpp), found by the
// kernel's lock table: for an attempt the log does not name (lines lost, or started by an
// earlier version of tune, which ran supervisors as tune-supervisor processes). -1 if none.
std::optional<int> SshExecutor::Impl::supervisor_of_dir(SshHost& h, const std::string& dir) {
  std::string out;
  auto st = h.shell_run("for p in $(" + dir_lock_holders(dir) +
                            "); do cat /proc/$p/stat 2>/dev/null; echo; done; true",
                        &out);
  if (!st) return std::nullopt;
  for (const auto& [pid, p] : stats_after(out, 0))
    if (p.state != 'Z' && p.state != 'X' && p.session == pid &&
        (p.comm == "tune-agent" || p.comm == "tune-supervisor"))
      return pid;
  return -1;
}

std::optional<const LiveAttempt*> SshExecutor::Impl::find_live(Worker& w, const std::string& dir,
                                                               int attempt) {
  if (!live_supervisors(w)) return std::nullopt;
  // (the log is the experiment's on that host: a trial dir there is the exp dir's child)
  std::string name = fs::path(dir).filename().string();
  for (const auto& a : *w.live_cache)
    if (a.trial_name == name && a.attempt == attempt) return &a;
  return nullptr;
}

std::optional<int> SshExecutor::Impl::find_supervisor(Worker& w, const std::string& dir,
                                                      int attempt) {
  auto live = find_live(w, dir, attempt);
  if (!live) return std::nullopt;
  return *live ? (*live)->supervisor : -1;
}

Attached SshExecutor::Impl::attach_on_host(Worker& w, const Launch& l) {
  if (!w.up) return Attached::kGone;  // restarts (from the head's latest checkpoint)
  Run r = new_run(l, w);
  auto live = find_live(w, r.dir, l.attempt);
  if (!live) {
    check(w);
    return Attached::kGone;
  }
  r.sup_pid = *live ? (*live)->supervisor : -1;
  Attached found = Attached::kRunning;
  remove_sync_leftovers(r.head_dir);
  if (*live) {
    read_from(r, (*live)->stdout_from, (*live)->times_from);
  } else {
    read_exit(w, r);
    if (r.exit) {
      found = Attached::kEnded;
      read_from(r, r.exit->stdout_from, r.exit->times_from);
    } else {
      auto holder = supervisor_of_dir(w.h, r.dir);
      if (!holder || *holder <= 0) return Attached::kGone;
      spdlog::warn(
          "trial {}: attempt {} is not in {}'s attempt log, but supervisor {} holds "
          "its dir there: re-attached to it",
          r.head_dir.filename().string(), l.attempt, w.name, *holder);
      r.sup_pid = *holder;
    }
  }
  if (r.sup_pid > 0) r.who.supervisor = r.sup_pid;
  // The checkpoints it has there (for the syncs).
  std::string out;
  if (auto ls = w.h.shell_run(
          "cd -- " + q(r.dir) + " 2>/dev/null && ls -d checkpoint_* 2>/dev/null", &out);
      ls && *ls == 0)
    for (const auto& name : lines_of(out))
      if (!name.empty()) r.found_at_attach.insert(name);
  // Those the state names are retained: the syncs bring them to the head if the crashed driver
  // had not (the others wait for their output line to be read again, or are left out).
  for (const auto& name : l.checkpoints)
    if (r.found_at_attach.erase(name)) r.checkpoints.insert(name);
  w.runs[l.trial_id] = std::move(r);
  return found;
}

Result<Attached> SshExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  Worker* w = impl.worker(l.host);
  if (!w) return Attached::kGone;
  // Before the loop runs: the answer is waited for.
  Attached found = w->io->call([&] { return impl.attach_on_host(*w, l); });
  if (found != Attached::kGone) {
    impl.where[l.trial_id] = w;
    impl.ended_on.erase(l.trial_id);
  }
  return found;
}

std::vector<std::string> SshExecutor::fetch_checkpoints(const std::string& host,
                                                        const fs::path& head_trial_dir,
                                                        const std::vector<std::string>& names) {
  Worker* w = impl_->worker(host);
  if (!w || impl_->opts.syncer == "none") return {};
  // Before the loop runs (a resume): waited for.
  return w->io->call([&]() -> std::vector<std::string> {
    std::vector<std::string> fetched;
    if (!w->up) return fetched;
    std::string dir = w->h.info.exp_dir + "/" + head_trial_dir.filename().string();
    for (const auto& name : names)
      if (impl_->fetch_one(*w, dir, head_trial_dir, name)) fetched.push_back(name);
    return fetched;
  });
}

std::vector<std::string> SshExecutor::Impl::copy_command(Worker& w, const std::string& dir,
                                                         const fs::path& head_trial_dir,
                                                         const std::string& name) {
  SshStats unused;
  SyncContext c{opts, w.h, unused};
  return copy_from(c, dir + "/" + name + "/", (head_trial_dir / (".sync_" + name)).string() + "/",
                   {"--timeout=30"});
}

bool SshExecutor::Impl::publish_copy(const std::vector<std::string>& cmd,
                                     const fs::path& head_exp_dir, const fs::path& head_trial_dir,
                                     const std::string& name, const std::string& host) {
  fs::path log = head_exp_dir / ".tune" / ("fetch-" + head_trial_dir.filename().string() + ".log");
  std::string staging = ".sync_" + name;
  (void)util::remove_tree_nofollow(head_trial_dir, staging);
  auto rc = util::run_process(cmd, log);
  std::error_code ec;
  if (rc && *rc == 0) fs::rename(head_trial_dir / staging, head_trial_dir / name, ec);
  if (!rc || *rc != 0 || ec) {
    spdlog::warn("{}: cannot bring {} from {}: {}", head_trial_dir.filename().string(), name, host,
                 ec ? ec.message() : util::last_line(log));
    (void)util::remove_tree_nofollow(head_trial_dir, staging);
    return false;
  }
  return true;
}

bool SshExecutor::Impl::fetch_one(Worker& w, const std::string& dir, const fs::path& head_trial_dir,
                                  const std::string& name) {
  if (!name.starts_with("checkpoint_") || name.find('/') != std::string::npos) return false;
  return publish_copy(copy_command(w, dir, head_trial_dir, name), opts.head_exp_dir, head_trial_dir,
                      name, w.name);
}

std::vector<LiveAttempt> SshExecutor::live_attempts() {
  // Every host at once; each answers on its own thread.
  std::vector<std::future<std::vector<LiveAttempt>>> asked;
  for (auto& wp : impl_->workers) {
    Worker* w = wp.get();
    auto promise = std::make_shared<std::promise<std::vector<LiveAttempt>>>();
    asked.push_back(promise->get_future());
    w->io->post([w, promise] {
      std::vector<LiveAttempt> out;
      if (w->up)
        if (auto live = Impl::live_supervisors(*w))
          for (auto& a : *live)
            if (a.holds_dir) {  // (see live_supervisors)
              a.host = w->name;
              out.push_back(std::move(a));
            }
      promise->set_value(std::move(out));
    });
  }
  std::vector<LiveAttempt> all;
  for (auto& f : asked)
    for (auto& a : f.get()) all.push_back(std::move(a));
  return all;
}

void SshExecutor::end_attempts(const std::vector<LiveAttempt>& which, double grace_s) {
  std::map<Worker*, std::string> pids;  // host -> " PID PID ..."
  for (const auto& a : which)
    if (Worker* w = impl_->worker(a.host)) pids[w] += " " + std::to_string(a.supervisor);
  std::vector<std::future<void>> ended;
  for (auto& [w, list] : pids) {
    auto promise = std::make_shared<std::promise<void>>();
    ended.push_back(promise->get_future());
    w->io->post([w, list, grace_s, promise] {
      if (w->up) {
        // SIGTERM (the supervisors stop their trials with the grace period), SIGUSR1 (now),
        // then their sessions killed; the waits run on the host, a few seconds at most each.
        std::string alive = "for p in" + list +
                            "; do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); "
                            "[ -n \"$s\" ] && [ \"$s\" != Z ] && [ \"$s\" != X ] && echo $p; done";
        auto wait_up_to = [&](double seconds) {
          // Polls on the host, printing a dot each second so the channel never sits silent.
          int rounds = static_cast<int>(seconds * 4) + 1;
          return "n=0; while [ -n \"$(" + alive + ")\" ] && [ $n -lt " + std::to_string(rounds) +
                 " ]; do sleep 0.25; n=$((n+1)); [ $((n % 4)) = 0 ] && printf .; done; echo; ";
        };
        (void)w->h.shell_run("kill -TERM" + list + " 2>/dev/null; " + wait_up_to(grace_s + 5) +
                             "kill -USR1" + list + " 2>/dev/null; " + wait_up_to(5) + "true");
        std::string still;
        if (auto st = w->h.shell_run(alive + "; true", &still); st && !still.empty()) {
          spdlog::warn("host {}: supervisors of an earlier driver still run: ending their sessions",
                       w->name);
          std::string kill;
          for (const auto& line : lines_of(still))
            kill += "pkill -KILL -s " + std::to_string(std::atoi(line.c_str())) + " 2>/dev/null; ";
          (void)w->h.shell_run(kill + "true");
        }
      }
      promise->set_value();
    });
  }
  for (auto& f : ended) f.get();
}

}  // namespace tune::exec
