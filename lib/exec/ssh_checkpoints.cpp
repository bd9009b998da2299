// Checkpoints of remote attempts, on their host's I/O thread: the empty staging dir a
// step-mode save goes to, adopting what a trial saved (the supervisor on the host checks and
// moves it, checkpoint::adopt's rules), noting a registered one for the next sync, and
// deleting one that retention dropped.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>

#include "exec/ssh_worker.hpp"
#include "util/fs.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using namespace ssh_impl;

Result<void> SshExecutor::make_staging(const std::string& trial_id, const fs::path&,
                                       const std::string& name) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return fail("internal: no remote run for ", trial_id);
  Worker* w = it->second;
  // Posted, not waited for: the host's thread runs its tasks in order, so the dir exists before
  // the save command that follows (also posted) reaches the trial; a failure is logged there
  // and the trial's save then fails on its own.
  w->io->post([impl = impl_.get(), w, trial_id, name] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || !w->up) return;
    auto& r = run->second;
    std::string out;
    auto st = w->h.shell_run(q(w->h.supervisor) + " --rm " + q(r.dir) + " " + q(name) +
                                 " && mkdir -- " + q(r.dir + "/" + name),
                             &out);
    if (!st) {
      impl->check(*w);
      spdlog::warn("trial {}: cannot make {}: {}", r.head_dir.filename().string(), name,
                   st.error().message);
    } else if (*st != 0) {
      spdlog::warn("trial {}: cannot make {} on {}: {}", r.head_dir.filename().string(), name,
                   w->name, util::printable(out, 300));
    }
  });
  return {};
}

Result<void> SshExecutor::adopt(const std::string& trial_id, const std::string& reported,
                                const fs::path& cwd, const fs::path& head_trial_dir,
                                const std::string& dest) {
  auto task = adopt_task(trial_id, reported, cwd, head_trial_dir, dest);
  return task ? task() : fail("internal: no remote run for ", trial_id);
}

namespace {

// Runs the supervisor's --adopt (its checks and move) on the host: what it printed is the error.
Result<void> adopt_command(SshExecutor::Impl& impl, Worker& w, const std::string& cmd) {
  std::string out;
  auto st = w.h.shell_run(cmd, &out);
  if (!st) {
    impl.check(w);
    return std::unexpected(st.error());
  }
  // (the newlines a long copy prints to show it is alive, then the error)
  out.erase(0, std::min(out.find_first_not_of('\n'), out.size()));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (*st != 0) return fail(util::printable(out, 300));
  return {};
}

// A copy to the head that an adoption leaves to the task waiting for its answer (on the
// controller's file worker, not the host's thread): the rsync command.
using LateCopy = std::optional<std::vector<std::string>>;

// adopt_on_host for an attempt whose end was handed on before this line of its output was
// handled (rare: a resumed driver catching up): no sync of it runs any more, so the checkpoint
// is copied to the head before the answer, by the task that waits for it. One that the driver
// before the resume moved in already is only copied.
Result<LateCopy> adopt_after_end(SshExecutor::Impl& impl, Worker& w, const fs::path& head_trial_dir,
                                 const std::string& path, const std::string& dest) {
  if (!w.up) return fail("host ", w.name, " is unreachable");
  std::string dir = w.h.info.exp_dir + "/" + head_trial_dir.filename().string();
  // (no `exit`: the host's shell runs on after each command)
  if (auto moved = adopt_command(impl, w,
                                 "if [ -d " + q(dir + "/" + dest) + " ] && [ ! -e " + q(path) +
                                     " ]; then :; else " + q(w.h.supervisor) + " --adopt " +
                                     q(dir) + " " + q(path) + " " + q(dest) + "; fi");
      !moved)
    return std::unexpected(moved.error());
  if (impl.opts.syncer == "none") return LateCopy{};
  return LateCopy{impl.copy_command(w, dir, head_trial_dir, dest)};
}

// The supervisor on the host checks and moves the reported dir (checkpoint::adopt's rules).
Result<LateCopy> adopt_on_host(SshExecutor::Impl& impl, Worker& w, const std::string& trial_id,
                               const fs::path& head_trial_dir, const std::string& path,
                               const std::string& dest) {
  auto run = w.runs.find(trial_id);
  if (run == w.runs.end()) return adopt_after_end(impl, w, head_trial_dir, path, dest);
  auto& r = run->second;
  if (!w.up) return fail("host ", w.name, " is unreachable");
  // An ended attempt's last sync may be under way without it (planned before this line was
  // handled): one more follows, and its exit waits for that. (Not left to
  // checkpoint_registered: that comes after the answer, when the exit may be handed on and the
  // run gone, and the checkpoint never copied.)
  auto copy_before_exit = [&] {
    if (r.exited && impl.opts.syncer != "none") r.want_sync(true, mono());
  };
  if (r.found_at_attach.erase(dest)) {
    // moved in by the driver that crashed; this line is being read again
    r.checkpoints.insert(dest);
    copy_before_exit();
    return LateCopy{};
  }
  if (auto moved = adopt_command(
          impl, w, q(w.h.supervisor) + " --adopt " + q(r.dir) + " " + q(path) + " " + q(dest));
      !moved)
    return std::unexpected(moved.error());
  seed_checkpoint(r, path, dest);
  r.checkpoints.insert(dest);
  r.adopted_at[dest] = mono();
  copy_before_exit();
  return LateCopy{};
}

}  // namespace

// Queued on the host's thread at once, so that it runs there before any command the loop sends
// the trial after it (the next step, a stop), and never on the loop: the task returned only
// waits for its answer (on the controller's file worker).
std::function<Result<void>()> SshExecutor::adopt_task(const std::string& trial_id,
                                                      const std::string& reported,
                                                      const fs::path& cwd,
                                                      const fs::path& head_trial_dir,
                                                      const std::string& dest) {
  Worker* w = nullptr;
  if (auto it = impl_->where.find(trial_id); it != impl_->where.end())
    w = it->second;
  else if (auto e = impl_->ended_on.find(trial_id); e != impl_->ended_on.end())
    w = e->second;
  if (!w) return {};
  std::string path = reported;
  if (!path.empty() && path[0] != '/') path = cwd.string() + "/" + path;
  auto promise = std::make_shared<std::promise<Result<LateCopy>>>();
  std::shared_future<Result<LateCopy>> answer = promise->get_future().share();
  w->io->post([impl = impl_.get(), w, trial_id, path, dest, promise, head_trial_dir] {
    promise->set_value(adopt_on_host(*impl, *w, trial_id, head_trial_dir, path, dest));
  });
  return [answer, host = w->name, exp = impl_->opts.head_exp_dir, head_trial_dir,
          dest]() -> Result<void> {
    Result<LateCopy> got = fail("the connection to ", host, " was closed");
    try {
      got = answer.get();
    } catch (const std::future_error&) {  // the executor went away before it ran
    }
    if (!got) return std::unexpected(got.error());
    if (*got && !Impl::publish_copy(**got, exp, head_trial_dir, dest, host))
      return fail("cannot bring ", dest, " from ", host, " to the head");
    return {};
  };
}

void ssh_impl::remove_on_host(Worker& w, const std::string& dir, const std::string& name) {
  if (!w.up) return;
  std::string out;
  auto st = w.h.shell_run(q(w.h.supervisor) + " --rm " + q(dir) + " " + q(name), &out);
  if (!st || *st != 0)
    spdlog::warn("host {}: cannot delete {}/{}: {}", w.name, dir, name,
                 st ? out : st.error().message);
}

void SshExecutor::remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                                    const std::string& name) {
  Worker* w = impl_->worker(host);
  if (!w) return;
  w->io->post([impl = impl_.get(), w, head_trial_dir, name] {
    std::string dir = w->h.info.exp_dir + "/" + head_trial_dir.filename().string();
    auto sync = impl->sync_context(*w);
    Run* copying = nullptr;
    for (auto& [id, r] : w->runs) {
      if (r.dir != dir) continue;
      drop_checkpoint(sync, r, name);
      if (r.sync_pid > 0) copying = &r;
    }
    // A sync may have published it on the head after the controller deleted the head's copy:
    // no longer retained, it goes again.
    std::error_code ec;
    if (fs::exists(head_trial_dir / name, ec))
      (void)util::remove_tree_nofollow(head_trial_dir, name);
    // While a copy of several checkpoints runs, it may still be reading this one: deleted
    // once it is done, so that the others' copy does not fail and go again.
    if (copying)
      copying->rm_later.push_back(name);
    else
      remove_on_host(*w, dir, name);
  });
}

void SshExecutor::checkpoint_dropped(const std::string& trial_id, const std::string& name) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([impl = impl_.get(), w, trial_id, name] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end()) return;
    auto sync = impl->sync_context(*w);
    drop_checkpoint(sync, run->second, name);
  });
}

void SshExecutor::checkpoint_registered(const std::string& trial_id) {
  if (!impl_->opts.sync_on_checkpoint) return;
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([w, trial_id] {
    if (auto run = w->runs.find(trial_id); run != w->runs.end())
      run->second.want_sync(false, mono());
  });
}

}  // namespace tune::exec
