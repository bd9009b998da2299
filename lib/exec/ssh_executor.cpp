// The SSH executor's side on the driver's loop (ssh_executor.hpp): connecting to the hosts,
// posting starts, lines, stops and lease renewals to their I/O threads, and taking the events
// those threads produced. The rest is in the files ssh_worker.hpp lists.
#include "exec/ssh_executor.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <utility>

#include "agent/stdin_record.hpp"
#include "exec/exit_record.hpp"
#include "exec/ssh_stdin.hpp"
#include "exec/ssh_worker.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using namespace ssh_impl;

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

SshExecutor::Impl::Worker* SshExecutor::Impl::worker(const std::string& name) {
  for (auto& w : workers)
    if (w->name == name) return w.get();
  return nullptr;
}

void SshExecutor::Impl::emit(Event e) {
  {
    std::lock_guard lock(mutex);
    events.push_back(std::move(e));
  }
  arrived.notify_one();
  if (ready_fd >= 0) (void)!::eventfd_write(ready_fd, 1);
}

void SshExecutor::Impl::note_pid(const std::string& id, int pid) {
  std::lock_guard lock(mutex);
  pids[id] = pid;
}

SshExecutor::SshExecutor(SshOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  impl_->ready_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  // (names this driver's lines to step-mode trials' stdin on the hosts)
  auto run = util::random_hex(8);
  impl_->stdin_run =
      run ? *run
          : fmt::format(
                "{:x}{:08x}", ::getpid(),
                static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
}

int SshExecutor::ready_fd() const {
  return impl_->ready_fd;
}

SshExecutor::~SshExecutor() {
  auto& impl = *impl_;
  finish_deletions();
  // Joined before they go: a tick under way still uses its worker's io (reset() would null
  // it first: a driver crashed so at its end).
  for (auto& w : impl.workers) w->io->stop();
  for (auto& w : impl.workers) w->io.reset();  // their state is ours now
  SshStats all;
  for (auto& w : impl.workers) {
    all.add(w->stats);
    for (auto& [id, r] : w->runs) drop_sync(r);
  }
  if (!all.start_ms.empty() || all.looks > 0)
    spdlog::info(
        "ssh timings: {} starts, median {:.2f} ms; first output read {:.2f} ms after the start "
        "(median); {} syncs, median {:.2f} ms, {} of them last syncs without rsync, {} with the "
        "look their agent sent; longest "
        "sync bookkeeping in one poll of a host {:.2f} ms; {} checkpoints published, {} bytes, "
        "median {:.2f} ms after registration; {} looks at trials' output; {} outputs carried "
        "by agents' events, {} bytes; {} exit record files read; {} trial pids asked; {} file "
        "operations by agents, {} in hosts' shells",
        all.start_ms.size(), median_of(all.start_ms), median_of(all.first_output_ms),
        all.sync_ms.size(), median_of(all.sync_ms), all.inline_syncs, all.sent_looks,
        all.sync_poll_max_ms, all.publish_ms.size(), all.published_bytes, median_of(all.publish_ms),
        all.looks, all.carried, all.carried_bytes, all.records_read, all.pid_asks,
        all.agent_file_ops, all.shell_file_ops);
  if (impl.ready_fd >= 0) ::close(impl.ready_fd);
}

// Deletions retention asked for last (after the run's final state write) are still queued on
// the hosts' threads, which drop what is queued when they stop, or under way in their agents:
// each host's queue is run to here, and its agent's deletions to their end, first (a host that
// does not answer within kFinishDeletions is left as it is).
void SshExecutor::finish_deletions() {
  constexpr double kFinishDeletions = 10;
  std::vector<std::future<void>> done;
  for (auto& w : impl_->workers) {
    if (!w->io) continue;
    auto barrier = std::make_shared<std::promise<void>>();
    done.push_back(barrier->get_future());
    w->io->post([impl = impl_.get(), w = w.get(), barrier] {
      // An agent silent at the end (stopped: SIGSTOP, a debugger) would never see the EOF
      // that ends the others: its file operations go through the shell, and it is ended.
      bool heard = w->agent_heard_gen == w->h.agent_gen && mono() - w->agent_heard < kAgentSilence;
      if (w->up && w->h.agent_pid > 0 && !heard) {
        impl->settle_file_ops(*w, "its agent is silent at the end of the run");
        if (!end_agent(*w)) spdlog::warn("host {}: its silent agent could not be ended", w->name);
      }
      for (auto& [id, r] : w->runs)
        if (r.sync_pid <= 0)
          for (const auto& name : std::exchange(r.rm_later, {}))
            impl->remove_on_host(*w, r.dir, name);
      // (and those its agent is doing: an agent whose driver is gone ends them)
      if (w->file_ops.empty())
        barrier->set_value();
      else
        w->after_file_ops.push_back([barrier] { barrier->set_value(); });
    });
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kFinishDeletions);
  for (auto& f : done) (void)f.wait_until(until);
}

std::vector<SshHostInfo> SshExecutor::connect(const std::vector<SshHostConfig>& configs) {
  auto& impl = *impl_;
  // Every host at once, each on its own thread: a hundred hosts connect in the time of one.
  std::vector<std::unique_ptr<Worker>> all;
  std::vector<std::future<Result<void>>> opened;
  for (size_t i = 0; i < configs.size(); ++i) {
    auto w = std::make_unique<Worker>();
    Worker* raw = w.get();
    w->name = configs[i].name;
    w->h.cfg = configs[i];
    w->h.index = static_cast<int>(i);
    // (ticked as soon as the connection has input too: the agent's events are read at once)
    w->io = std::make_unique<IoThread>(
        PollSchedule::kIdle, [&impl, raw] { impl.tick(*raw); },
        [raw] { return raw->up ? raw->h.socket_fd() : -1; });
    w->io->start();
    auto promise = std::make_shared<std::promise<Result<void>>>();
    opened.push_back(promise->get_future());
    w->io->post([&impl, raw, promise] {
      auto r = raw->h.open(impl.opts);
      // Tried twice more (1 s, then 2 s later) unless the host refused us for good: a link
      // that dropped, or an agent that died, as it came up leaves the host out of the run.
      for (int i = 0; !r && i < 2 && !raw->h.key_changed &&
                      r.error().message.find("authentication failed") == std::string::npos;
           ++i) {
        spdlog::warn("host {}: {}; trying again in {} s", raw->name, r.error().message, 1 << i);
        raw->h.close();
        std::this_thread::sleep_for(std::chrono::seconds(1 << i));
        r = raw->h.open(impl.opts);
      }
      raw->up = raw->ready = r.has_value();
      raw->last_ok = mono();
      if (r) raw->heard_agent();  // (its "ready" line: requests go to it from now on)
      promise->set_value(std::move(r));
    });
    all.push_back(std::move(w));
  }
  std::vector<SshHostInfo> ready;
  for (size_t i = 0; i < all.size(); ++i) {
    auto why = opened[i].get();
    if (!why) {
      spdlog::error("host {}: {}; it is left out", all[i]->name, why.error().message);
      continue;  // its thread ends with it
    }
    ready.push_back(all[i]->h.info);  // written before the promise was kept
    impl.workers.push_back(std::move(all[i]));
  }
  renew_lease();
  return ready;
}

Result<void> SshExecutor::start(const Launch& l) {
  auto& impl = *impl_;
  Worker* w = impl.worker(l.host);
  if (!w) return fail("unknown host ", l.host);
  if (auto made = prepare_trial_dir(l); !made) return made;  // the head's copy
  impl.where[l.trial_id] = w;
  impl.ended_on.erase(l.trial_id);
  impl.pid_asked.erase(l.trial_id);
  {
    std::lock_guard lock(impl.mutex);
    impl.pids.erase(l.trial_id);
  }
  Run r = impl.new_run(l, *w);
  w->io->post(
      [&impl, w, l, r = std::move(r)]() mutable { impl.start_on_host(*w, l, std::move(r)); });
  return {};
}

void SshExecutor::send(const std::string& trial_id, std::string_view line) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  uint64_t n = ++impl_->stdin_issued;  // (numbered here, on the loop: in the order sent)
  w->io->post([impl = impl_.get(), w, trial_id, n, line = std::string(line)] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || run->second.exit || run->second.exited) return;
    run->second.unwritten.push_back({line, n, -1, 0});
    impl->deliver_stdin(*w, run->second);
  });
}

void SshExecutor::Impl::deliver_stdin(Worker& w, Run& r) {
  if (!w.up || r.unwritten.empty() || r.exit || r.exited) return;  // (sent when it is back)
  // Through the host's agent (no round trip; it writes as the trial reads), else its shell.
  if (agent_takes_requests(w)) {
    int gen = w.h.agent_gen;
    bool all = true;
    for (auto& l : r.unwritten) {
      if (l.by == gen) continue;
      auto req = agent_stdin_request(r.id, r.attempt, r.dir, l.text, stdin_run, l.n);
      if (!req || !w.h.agent_send(*req)) {
        if (req) check(w);
        all = false;
        break;
      }
      l.by = gen;
      l.sent = mono();
    }
    if (all) {
      r.awaiting_answer = true;  // (unwatched, or its agent silent: looked at on each poll)
      expect_output(w);          // its answer (step mode)
      return;
    }
    if (!w.up) return;
  }
  stdin_in_shell(w, r);
}

void SshExecutor::Impl::stdin_in_shell(Worker& w, Run& r) {
  if (!w.up || r.unwritten.empty()) return;
  std::vector<std::pair<uint64_t, std::string>> lines;
  for (const auto& l : r.unwritten) lines.emplace_back(l.n, l.text);
  auto st =
      w.h.shell_run(stdin_shell_command(r.dir, stdin_run, stdin_issued.load(), lines), nullptr);
  if (!st) return check(w);  // (sent again when it is back)
  if (*st != 0) {            // (nothing would send them again: the trial would wait for ever)
    std::string rec = std::string("its record ") + agent::kStdinRecordName;
    return stdin_lost(w, r,
                      *st == 3   ? "its stdin.fifo is not there, is not a FIFO, or nobody reads it"
                      : *st == 4 ? rec + " is not a plain file of its own"
                      : *st == 5 ? rec + " is locked by another process"
                      : *st == 6 ? rec + " names a command never sent (written by another process)"
                                 : "the host's shell could not write it (exit status " +
                                       std::to_string(*st) + ")");
  }
  r.unwritten.clear();
  r.awaiting_answer = true;  // (unwatched, or its agent silent: looked at on each poll)
  expect_output(w);          // its answer (step mode)
}

void SshExecutor::Impl::stdin_lost(Worker& w, Run& r, const std::string& why) {
  r.unwritten.clear();
  if (std::exchange(r.stdin_lost, true)) return;
  spdlog::debug("host {}: trial {}: {}", w.name, r.id, why);
  emit(StdinLostEvent{r.id, r.attempt, why});
}

void SshExecutor::stop(const std::string& trial_id, bool now) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([impl = impl_.get(), w, trial_id, now] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || run->second.exit || run->second.sup_pid <= 0) return;
    auto& r = run->second;
    r.stop_asked = std::max(r.stop_asked, now ? 2 : 1);
    if (!w->up) return;  // (asked again when the host is back: tend)
    // Through the agent that started or watches its supervisor: it signals that process and
    // no other (its own child, or through a pidfd), with no round trip.
    int gen = w->h.agent_gen;
    if (Impl::agent_takes_requests(*w) && (r.launched_by == gen || r.watched_by == gen)) {
      if (w->h.agent_send(agent_signal_request(trial_id, r.attempt, r.sup_pid, now))) {
        r.stop_by = gen;
        return;
      }
      impl->check(*w);
    }
    impl->stop_in_shell(*w, r);
  });
}

void SshExecutor::Impl::stop_in_shell(Worker& w, Run& r) {
  if (!w.up || r.exit || r.sup_pid <= 0 || r.stop_asked == 0) return;
  std::string pid = std::to_string(r.sup_pid);  // (continued if it was stopped)
  if (!w.h.shell_run(std::string("kill -") + (r.stop_asked == 2 ? "USR1" : "TERM") + " " + pid +
                     " 2>/dev/null; kill -CONT " + pid + " 2>/dev/null; true"))
    check(w);
}

std::vector<Event> SshExecutor::wait(double timeout_s) {
  auto& impl = *impl_;
  std::vector<Event> got;
  {
    std::unique_lock lock(impl.mutex);
    if (impl.events.empty() && timeout_s > 0)
      impl.arrived.wait_for(lock, std::chrono::duration<double>(timeout_s),
                            [&] { return !impl.events.empty(); });
    got.swap(impl.events);
    eventfd_t drained;
    if (impl.ready_fd >= 0) (void)!::eventfd_read(impl.ready_fd, &drained);
  }
  // Host events first, then output, then exits (each trial's exit follows all its output).
  std::stable_partition(got.begin(), got.end(),
                        [](const Event& e) { return std::holds_alternative<HostEvent>(e); });
  std::stable_partition(got.begin(), got.end(),
                        [](const Event& e) { return !std::holds_alternative<ExitEvent>(e); });
  for (const auto& e : got)
    if (const auto* x = std::get_if<ExitEvent>(&e))
      if (auto it = impl.where.find(x->trial_id); it != impl.where.end()) {
        impl.ended_on[x->trial_id] = it->second;
        impl.where.erase(it);
      }
  return got;
}

std::optional<int> SshExecutor::pid(const std::string& trial_id) {
  auto& impl = *impl_;
  {
    std::lock_guard lock(impl.mutex);
    if (auto it = impl.pids.find(trial_id); it != impl.pids.end()) return it->second;
  }
  // Asked of the host once per attempt (it is filled in on every result once known).
  auto it = impl.where.find(trial_id);
  if (it == impl.where.end() || !impl.pid_asked.insert(trial_id).second) return std::nullopt;
  Worker* w = it->second;
  w->io->post([&impl, w, trial_id] {
    if (auto run = w->runs.find(trial_id); run != w->runs.end())
      impl.ask_child_pid(*w, run->second);
  });
  return std::nullopt;
}

void SshExecutor::Impl::ask_child_pid(Worker& w, Run& r) {
  if (r.child_pid || r.sup_pid <= 0 || !w.up) return;
  ++w.stats.pid_asks;
  std::string out;
  std::string sup = std::to_string(r.sup_pid);
  auto st = w.h.shell_run("cat /proc/" + sup + "/task/" + sup + "/children 2>/dev/null", &out);
  if (st && *st == 0 && std::atoi(out.c_str()) > 0) {
    r.child_pid = r.who.pid = std::atoi(out.c_str());
    note_pid(r.id, *r.child_pid);
  }
}

double SshExecutor::now() {
  return mono();
}
double SshExecutor::wall_time() {
  return clock_s(CLOCK_REALTIME);
}
std::string SshExecutor::host_name() {
  return util::host_name();
}

void SshExecutor::renew_lease() {
  for (auto& wp : impl_->workers) {
    Worker* w = wp.get();
    if (w->lease_queued.exchange(true)) continue;  // one still waits its turn there
    w->io->post([impl = impl_.get(), w] {
      w->lease_queued = false;
      if (!w->up || !w->h.session) return;
      timespec now = lease_stamp();
      timeval tv[2];
      tv[0].tv_sec = now.tv_sec;
      tv[0].tv_usec = now.tv_nsec / 1000;
      tv[1] = tv[0];
      if (sftp_utimes(w->h.sftp, w->h.lease.c_str(), tv) == 0) {
        w->last_ok = mono();
      } else {
        sftp_file f = sftp_open(w->h.sftp, w->h.lease.c_str(), O_WRONLY | O_CREAT, 0644);
        if (f)
          sftp_close(f);
        else
          impl->check(*w);
      }
    });
  }
}

bool SshExecutor::owns(const std::string& trial_id) const {
  return impl_->where.count(trial_id) != 0;
}

bool SshExecutor::busy() const {
  return !impl_->where.empty();
}

}  // namespace tune::exec
