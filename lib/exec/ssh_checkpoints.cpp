// Checkpoints of remote attempts, on their host's I/O thread: the empty staging dir a
// step-mode save goes to (in the host's shell), adopting what a trial saved (the host's agent
// checks and moves it, checkpoint::adopt's rules, and answers later), noting a registered one
// for the next sync, and deleting one that retention dropped (its agent too); and the file
// requests to the agent, with the host's shell as the fallback.
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

void SshExecutor::Impl::file_request(Worker& w, int64_t req, const std::string& line,
                                     std::string shell,
                                     std::function<void(Worker&, const std::string&)> done) {
  if (w.up && w.shell_requests_for != w.h.agent_gen) {
    if (w.h.agent_send(line)) {
      ++w.stats.agent_file_ops;
      w.file_ops[req] = Worker::FileOp{mono(), std::move(shell), std::move(done)};
      return;
    }
    check(w);
    // (the agent is gone: what it had goes first, in the order asked)
    settle_file_ops(w, "its agent does not take requests");
  }
  done(w, shell_op(w, shell));
}

std::string SshExecutor::Impl::shell_op(Worker& w, const std::string& cmd) {
  if (!w.up) return "host " + w.name + " is unreachable";
  ++w.stats.shell_file_ops;
  std::string out;
  auto st = w.h.shell_run(cmd, &out);
  if (!st) {
    check(w);
    return st.error().message;
  }
  // (the newlines a long copy prints to show it is alive, then the error)
  out.erase(0, std::min(out.find_first_not_of('\n'), out.size()));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (*st == 0) return "";
  return out.empty() ? "it ended with status " + std::to_string(*st) : util::printable(out, 300);
}

void SshExecutor::Impl::file_op_done(Worker& w, int64_t req, const std::string& error) {
  auto op = w.file_ops.find(req);
  if (op == w.file_ops.end()) return;  // (settled already)
  auto done = std::move(op->second.done);
  w.file_ops.erase(op);
  w.file_answered = mono();
  done(w, error);
  if (w.file_ops.empty())
    for (auto& f : std::exchange(w.after_file_ops, {})) f();
}

bool ssh_impl::end_agent(Worker& w) {
  if (w.h.agent_pid <= 0) return true;
  // (a zombie's cmdline is empty: it has ended, and its children have been told)
  std::string c = "/proc/" + std::to_string(w.h.agent_pid) + "/cmdline";
  std::string alive = "grep -q tune-agent " + c + " 2>/dev/null";
  std::string out;
  auto st = w.h.shell_run("if " + alive + "; then kill -KILL " + std::to_string(w.h.agent_pid) +
                              "; i=0; while [ $i -lt 100 ] && " + alive +
                              "; do sleep 0.02; i=$((i+1)); done; sleep 0.1; fi; " + alive +
                              " && echo alive; true",
                          &out);
  return st && *st == 0 && out.find("alive") == std::string::npos;
}

void SshExecutor::Impl::settle_file_ops(Worker& w, const std::string& why, bool end_it) {
  if (w.file_ops.empty()) return;
  if (w.up) {
    spdlog::warn("host {}: {}: its {} file operation(s) are done in the host's shell", w.name, why,
                 w.file_ops.size());
    // (so that none of them goes on beside the shell's; they are all the current agent's, as
    // they are settled before another starts)
    if (end_it && !end_agent(w)) {
      spdlog::warn("host {}: its agent could not be ended: its file operations are not redone",
                   w.name);
      while (!w.file_ops.empty())
        file_op_done(w, w.file_ops.begin()->first,
                     "its agent on " + w.name + " could not be ended");
      return;
    }
  }
  // (one at a time, in the order asked; those of a host that is down fail)
  while (!w.file_ops.empty()) {
    int64_t req = w.file_ops.begin()->first;
    file_op_done(w, req, shell_op(w, w.file_ops.begin()->second.shell));
  }
}

namespace {

// A copy to the head that an adoption leaves to the task waiting for its answer (on the
// controller's file worker, not the host's thread): the rsync command.
using LateCopy = std::optional<std::vector<std::string>>;
using Answer = std::function<void(Result<LateCopy>)>;

// The same adoption in the host's shell, for a request its agent may have carried out
// already, all or in part: done if DEST is a dir and the reported dir is gone (as
// agent::adopted_already decides, links not followed; in the shell, so that the supervisor of
// any version there does it).
std::string adopt_in_shell(const Worker& w, const std::string& dir, const std::string& path,
                           const std::string& dest) {
  std::string d = q(dir + "/" + dest), p = q(path);
  // (no `exit`: the host's shell runs on after each command)
  return "if [ -d " + d + " ] && [ ! -L " + d + " ] && [ ! -e " + p + " ] && [ ! -L " + p +
         " ]; then :; else " + q(w.h.supervisor) + " --adopt " + q(dir) + " " + p + " " + q(dest) +
         "; fi";
}

// adopt_on_host for an attempt whose end was handed on before this line of its output was
// handled (rare: a resumed driver catching up): no sync of it runs any more, so the checkpoint
// is copied to the head before the answer, by the task that waits for it. One that the driver
// before the resume moved in already is only copied.
void adopt_after_end(SshExecutor::Impl& impl, Worker& w, const fs::path& head_trial_dir,
                     const std::string& path, const std::string& dest, Answer answer) {
  if (!w.up) return answer(fail("host ", w.name, " is unreachable"));
  std::string dir = w.h.info.exp_dir + "/" + head_trial_dir.filename().string();
  int64_t req = w.next_req++;
  impl.file_request(
      w, req, agent_adopt_request(req, dir, path, dest, true), adopt_in_shell(w, dir, path, dest),
      [&impl, dir, head_trial_dir, dest, answer](Worker& w, const std::string& error) {
        if (!error.empty()) return answer(fail(error));
        if (impl.opts.syncer == "none") return answer(LateCopy{});
        answer(LateCopy{impl.copy_command(w, dir, head_trial_dir, dest)});
      });
}

// An ended attempt's last sync may be under way without the checkpoint just adopted (planned
// before it was): one more follows, and its exit waits for that. (Not left to
// checkpoint_registered: that comes after the answer, when the exit may be handed on and the
// run gone, and the checkpoint never copied.)
void copy_before_exit(const SshExecutor::Impl& impl, Run& r) {
  if (r.exited && impl.opts.syncer != "none") r.want_sync(true, mono());
}

// The host's agent checks and moves the reported dir (checkpoint::adopt's rules), in a process
// of its own: this thread goes on meanwhile, and the attempt's exit waits for the answer.
void adopt_on_host(SshExecutor::Impl& impl, Worker& w, const std::string& trial_id,
                   const fs::path& head_trial_dir, const std::string& path, const std::string& dest,
                   Answer answer) {
  auto run = w.runs.find(trial_id);
  if (run == w.runs.end())
    return adopt_after_end(impl, w, head_trial_dir, path, dest, std::move(answer));
  auto& r = run->second;
  if (!w.up) return answer(fail("host ", w.name, " is unreachable"));
  if (r.found_at_attach.erase(dest)) {
    // moved in by the driver that crashed; this line is being read again
    r.checkpoints.insert(dest);
    copy_before_exit(impl, r);
    return answer(LateCopy{});
  }
  ++r.adopting;
  int64_t req = w.next_req++;
  auto adopted = [&impl, trial_id, attempt = r.attempt, dir = r.dir, head_trial_dir, path, dest,
                  answer](Worker& w, const std::string& error) {
    auto run = w.runs.find(trial_id);
    Run* r = run != w.runs.end() && run->second.attempt == attempt ? &run->second : nullptr;
    if (r) --r->adopting;
    if (!error.empty()) return answer(fail(error));
    if (!r) {  // (its attempt gone meanwhile, re-queued: no sync of it copies this)
      if (impl.opts.syncer == "none") return answer(LateCopy{});
      return answer(LateCopy{impl.copy_command(w, dir, head_trial_dir, dest)});
    }
    seed_checkpoint(*r, path, dest);
    r->checkpoints.insert(dest);
    r->adopted_at[dest] = mono();
    copy_before_exit(impl, *r);
    answer(LateCopy{});
  };
  impl.file_request(w, req, agent_adopt_request(req, r.dir, path, dest, false),
                    adopt_in_shell(w, r.dir, path, dest), adopted);
}

}  // namespace

// Queued on the host's thread at once, so that it is asked there before any command the loop
// sends the trial after it (the next step, a stop), and never on the loop: the task returned
// only waits for its answer (on the controller's file worker).
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
  auto promise = std::make_shared<std::promise<Result<LateCopy>>>();
  std::shared_future<Result<LateCopy>> answer = promise->get_future().share();
  w->io->post([impl = impl_.get(), w, trial_id, reported, cwd, dest, promise, head_trial_dir] {
    // (relative: to the trial's working dir there)
    std::string path = reported;
    if (!path.empty() && path[0] != '/') path = impl->host_cwd(*w, cwd) + "/" + path;
    adopt_on_host(*impl, *w, trial_id, head_trial_dir, path, dest,
                  [promise](Result<LateCopy> got) { promise->set_value(std::move(got)); });
  });
  return [answer, host = w->name, exp = impl_->opts.head_exp_dir, head_trial_dir,
          dest]() -> Result<void> {
    Result<LateCopy> got = fail("the connection to ", host, " was closed");
    try {
      got = answer.get();
    } catch (const std::future_error&) {  // the executor went away before it answered
    }
    if (!got) return std::unexpected(got.error());
    if (*got && !Impl::publish_copy(**got, exp, head_trial_dir, dest, host))
      return fail("cannot bring ", dest, " from ", host, " to the head");
    return {};
  };
}

void SshExecutor::Impl::remove_on_host(Worker& w, const std::string& dir, const std::string& name) {
  if (!w.up) return;
  int64_t req = w.next_req++;
  file_request(w, req, agent_rm_request(req, dir, name),
               q(w.h.supervisor) + " --rm " + q(dir) + " " + q(name),
               [dir, name](Worker& w, const std::string& error) {
                 if (!error.empty())
                   spdlog::warn("host {}: cannot delete {}/{}: {}", w.name, dir, name, error);
               });
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
      impl->remove_on_host(*w, dir, name);
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
