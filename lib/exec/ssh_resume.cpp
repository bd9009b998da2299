// A resume's questions to the SSH hosts, asked before the loop runs and waited for: which
// attempts still run there (re-attach), which supervisors of an earlier driver live, ending
// them, and fetching checkpoints that were saved on a host but never reached the head.
#include <spdlog/spdlog.h>

#include <future>
#include <map>

#include "exec/ssh_worker.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"

namespace tune::exec {

using namespace ssh_impl;

// The processes on the host that run a tune-supervisor in the host's own mount namespace
// (hosts that share a pid namespace, as test hosts do, do not see each other's), as "PID
// ARGS..." lines; nullopt if the host could not be asked. A supervisor is not dumpable (its
// nonce), so only root can read its namespace: one that cannot be read counts (the trial dir
// in its command line tells hosts apart then).
std::optional<std::string> SshExecutor::Impl::supervisor_processes(SshHost& h) {
  std::string out;
  auto st = h.shell_run(
      "m=$(readlink /proc/$$/ns/mnt); for p in $(pgrep -f tune-supervisor 2>/dev/null); do "
      "n=$(readlink /proc/$p/ns/mnt 2>/dev/null); "
      "{ [ -z \"$n\" ] || [ \"$n\" = \"$m\" ]; } && printf '%s %s\\n' \"$p\" "
      "\"$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null)\"; done; true",
      &out);
  if (!st) return std::nullopt;
  return out;
}

std::optional<int> SshExecutor::Impl::find_supervisor(SshHost& h, const std::string& dir,
                                                      int attempt) {
  auto procs = supervisor_processes(h);
  if (!procs) return std::nullopt;
  // By its command line: "<supervisor> <trial dir> <attempt> ..."
  std::string needle = h.supervisor + " " + dir + " " + std::to_string(attempt) + " ";
  int pid = -1;
  for (const auto& line : lines_of(*procs))
    if (line.find(needle) != std::string::npos) pid = std::atoi(line.c_str());
  return pid;
}

Attached SshExecutor::Impl::attach_on_host(Worker& w, const Launch& l) {
  if (!w.up) return Attached::kGone;  // restarts (from the head's latest checkpoint)
  Run r = new_run(l, w);
  auto pid = find_supervisor(w.h, r.dir, l.attempt);
  if (!pid) {
    check(w);
    return Attached::kGone;
  }
  r.sup_pid = *pid;
  Attached found = Attached::kRunning;
  remove_sync_leftovers(r.head_dir);
  if (r.sup_pid > 0) r.who.supervisor = r.sup_pid;
  if (r.sup_pid <= 0) {
    read_exit(r);
    if (!r.exit) return Attached::kGone;
    found = Attached::kEnded;
  }
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
      auto procs = w->up ? Impl::supervisor_processes(w->h) : std::nullopt;
      // A supervisor's command line: SUPERVISOR TRIAL_DIR ATTEMPT ... (apps/tune-supervisor);
      // trial names hold no spaces. A zombie has an empty one and does not match.
      std::string prefix = w->h.supervisor + " " + w->h.info.exp_dir + "/";
      for (const auto& text : lines_of(procs.value_or(""))) {
        std::string_view line(text);
        while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        size_t space = line.find(' ');
        if (space == std::string_view::npos) continue;
        int pid = std::atoi(std::string(line.substr(0, space)).c_str());
        std::string_view args = line.substr(space + 1);
        if (pid <= 0 || !args.starts_with(prefix)) continue;
        args.remove_prefix(prefix.size());
        size_t end = args.find(' ');
        if (end == std::string_view::npos || args.substr(0, end).find('/') != std::string::npos)
          continue;
        LiveAttempt a;
        a.host = w->name;
        a.trial_name = std::string(args.substr(0, end));
        a.attempt = std::atoi(std::string(args.substr(end + 1, 10)).c_str());
        a.supervisor = pid;
        if (a.attempt > 0) out.push_back(std::move(a));
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
