#include "exec/ssh_executor.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "exec/exit_record.hpp"
#include "exec/io_thread.hpp"
#include "exec/ssh_host.hpp"
#include "exec/ssh_run.hpp"
#include "util/fs.hpp"
#include "util/process.hpp"
#include "util/strings.hpp"

namespace tune::exec {

namespace {

constexpr double kSupervisorCheck = 2.0;  // s between remote supervisor liveness checks
constexpr double kPollPeriod = 0.2;       // remote output and exits are looked at this often
constexpr double kPollSoon = 0.005;       // ... and this soon after a start, a line sent or output
                                          // read, the gap doubling while nothing comes
constexpr size_t kReadChunk = 4u << 20;   // per trial per poll

double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

double mono() {
  return clock_s(CLOCK_MONOTONIC);
}

std::string q(const std::string& s) {
  return util::shell_quote(s);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Lines of `text`, without their newlines.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

// One host as the head sees it. Its I/O thread owns everything here but `name`, `io` and the
// atomics: the loop only posts tasks to it.
struct Worker {
  std::string name;
  SshHost h;
  std::unordered_map<std::string, Run> runs;
  bool ready = false;  // connected once (the first connect is connect()'s, not the tick's)
  bool up = false, lost = false;
  double down_since = 0, next_retry = 0, backoff = 1, last_check = 0;
  double last_ok = 0;           // the last answer it gave (monotonic): a dead link dates from there
  std::vector<int> superseded;  // supervisors of attempts re-queued elsewhere: stopped on return
  bool workdir_ready = false;   // trial.sync_workdir: copied (or found current) in this run
  double poll_gap = kPollPeriod;  // until the next poll (kPollSoon after activity, doubling)
  SshStats stats;
  std::atomic<bool> lease_queued{false};
  std::unique_ptr<IoThread> io;  // last: stopped (joined) before the rest goes
};

}  // namespace

struct SshExecutor::Impl {
  SshOptions opts;
  std::vector<std::unique_ptr<Worker>> workers;

  // Filled by the host threads, drained by wait() on the loop.
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<Event> events;
  std::unordered_map<std::string, int> pids;  // trial -> its process, once known

  // The loop's own: the host each trial's attempt runs on, until its exit is handed out, and
  // the trials whose pid was asked of their host.
  std::unordered_map<std::string, Worker*> where;
  std::unordered_set<std::string> pid_asked;

  Worker* worker(const std::string& name) {
    for (auto& w : workers)
      if (w->name == name) return w.get();
    return nullptr;
  }

  void emit(Event e) {
    {
      std::lock_guard lock(mutex);
      events.push_back(std::move(e));
    }
    arrived.notify_one();
  }

  void note_pid(const std::string& id, int pid) {
    std::lock_guard lock(mutex);
    pids[id] = pid;
  }

  // ---- everything below runs on a host's I/O thread, for that host only ----

  SyncContext sync_context(Worker& w) { return SyncContext{opts, w.h, w.stats}; }

  void mark_down(Worker& w, double now) {
    if (!w.up) return;
    w.up = false;
    // Silent since its last answer: the timeouts that noticed it count toward host_timeout_s,
    // so it is declared lost host_timeout_s after the link went, not after they ran out.
    w.down_since = w.last_ok > 0 ? std::min(now, w.last_ok) : now;
    w.backoff = 1;
    w.next_retry = now + w.backoff;
    spdlog::warn("host {}: connection lost ({}); reconnecting, its trials keep running there",
                 w.name, w.h.err());
    emit(HostEvent{w.name, false});
  }

  // After an operation failed: is the host down?
  void check(Worker& w) {
    if (w.up && w.h.broken()) mark_down(w, mono());
  }

  // Down past host_timeout_s, or its key changed: its attempts end as host_lost (re-queued
  // elsewhere by the controller); their supervisors are stopped if it comes back.
  void lose(Worker& w, double now) {
    w.lost = true;
    if (w.h.key_changed)
      spdlog::warn("host {}: its host key changed: its trials are re-queued", w.name);
    else
      spdlog::warn("host {}: unreachable for {:.0f} s: its trials are re-queued", w.name,
                   now - w.down_since);
    for (auto it = w.runs.begin(); it != w.runs.end();) {
      Run& r = it->second;
      drop_sync(r);
      if (r.exited) {  // it ended before the link went: only its end-of-trial sync is lost
        emit(ExitEvent{it->first, *r.exit});
        it = w.runs.erase(it);
        continue;
      }
      if (r.sup_pid > 0) w.superseded.push_back(r.sup_pid);
      ExitInfo info;
      info.attempt = r.attempt;
      info.reason = ExitReason::kHostLost;
      info.error = w.h.key_changed ? "host " + w.name + ": its host key changed"
                                   : "host " + w.name + " unreachable for " +
                                         util::format_short(now - w.down_since) + " s";
      emit(ExitEvent{it->first, info});
      it = w.runs.erase(it);
    }
  }

  // A down host: reconnects with backoff (each try bounded so that the host is declared lost
  // within a second of host_timeout_s), and re-queues its trials once lost.
  void tend(Worker& w, double now) {
    if (w.up) return;
    if (!w.lost && (w.h.key_changed || now - w.down_since > opts.host_timeout_s)) lose(w, now);
    if (w.h.key_changed || now < w.next_retry) return;
    double left = w.lost ? 5.0 : opts.host_timeout_s - (now - w.down_since);
    auto result = w.h.open(opts, left);
    now = mono();
    if (result) {
      w.up = true;
      w.last_ok = now;
      spdlog::warn("host {}: reconnected after {:.1f} s", w.name, now - w.down_since);
      for (int pid : w.superseded)  // attempts re-queued elsewhere meanwhile
        (void)w.h.shell_run("kill -TERM " + std::to_string(pid) + " 2>/dev/null; true");
      w.superseded.clear();
      w.lost = false;
      emit(HostEvent{w.name, true});
      return;
    }
    if (w.h.key_changed) {
      spdlog::error("host {}: {}; it is not used again in this run", w.name,
                    result.error().message);
      if (!w.lost) lose(w, now);
      return;
    }
    spdlog::debug("host {}: reconnect failed: {}", w.name, result.error().message);
    w.backoff = std::min(w.backoff * 2, 10.0);
    w.next_retry = now + w.backoff;
    if (!w.lost && now - w.down_since > opts.host_timeout_s) lose(w, now);
  }

  // The processes on the host that run a tune-supervisor in the host's own mount namespace
  // (hosts that share a pid namespace, as test hosts do, do not see each other's), as "PID
  // ARGS..." lines; nullopt if the host could not be asked. A supervisor is not dumpable (its
  // nonce), so only root can read its namespace: one that cannot be read counts (the trial dir
  // in its command line tells hosts apart then).
  static std::optional<std::string> supervisor_processes(SshHost& h) {
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

  // This attempt's exit, if its supervisor recorded it; a record it did not write is ignored,
  // with a warning once per attempt.
  void read_exit(Run& r) {
    ExitInfo info;
    switch (check_exit_record(r.host->read(r.record, 0, 1 << 20), r.attempt, r.who, info)) {
      case RecordCheck::kGenuine:
        r.exit = std::move(info);
        if (r.exit->pid) {
          r.child_pid = r.exit->pid;
          note_pid(r.id, *r.child_pid);
        }
        break;
      case RecordCheck::kForged:
        if (!r.warned_forged)
          spdlog::warn(
              "trial {}: ignoring an exit record for attempt {} that its supervisor did not "
              "write ({} on {}); the trial is still supervised",
              r.head_dir.filename().string(), r.attempt, r.record, r.host->cfg.name);
        r.warned_forged = true;
        break;
      case RecordCheck::kAbsent:
        break;
    }
  }

  void check_supervisors(Worker& w, double now);
  bool poll(Worker& w);  // true if it read output
  void tick(Worker& w);
  // Output is likely soon (an attempt started, a line sent): poll again within kPollSoon.
  static void expect_output(Worker& w) {
    w.poll_gap = kPollSoon;
    w.io->tick_within(kPollSoon);
  }
  Result<void> ensure_workdir(Worker& w);
  void push_logs(Worker& w, const Run& r);
  void start_on_host(Worker& w, const Launch& l, Run r);
  Attached attach_on_host(Worker& w, const Launch& l);
  Run new_run(const Launch& l, Worker& w) const;
};

// Every kSupervisorCheck seconds: are the supervisors of the host's running attempts alive?
// One that is gone without an exit record (killed, or it could not write the record, e.g. on
// a full disk) ends its attempt as supervisor_died, instead of a wait forever.
void SshExecutor::Impl::check_supervisors(Worker& w, double now) {
  if (now - w.last_check < kSupervisorCheck || !w.up) return;
  w.last_check = now;
  std::string cmd;
  std::vector<Run*> asked;
  for (auto& [id, r] : w.runs) {
    if (r.exit || r.exited || r.sup_pid <= 0) continue;
    // "G PID" if gone: no such process, or a zombie (by its state in /proc/PID/stat; not by
    // its command line, which is the shell's until the supervisor is exec'd); else, while the
    // trial's pid is not known, "C PID CHILD" (to end it if need be).
    std::string p = std::to_string(r.sup_pid);
    cmd += "s=$(sed 's/.*) //' /proc/" + p + "/stat 2>/dev/null | cut -c1); " +
           "if [ -z \"$s\" ] || [ \"$s\" = Z ] || [ \"$s\" = X ]; then echo G " + p + "; else " +
           (r.child_pid
                ? std::string(":")
                : "echo C " + p + " $(cat /proc/" + p + "/task/" + p + "/children 2>/dev/null)") +
           "; fi; ";
    asked.push_back(&r);
  }
  if (asked.empty()) return;
  std::string out;
  auto st = w.h.shell_run(cmd + "true", &out);
  if (!st) return check(w);
  w.last_ok = mono();
  if (*st != 0) return;
  std::set<int> gone;
  std::map<int, int> children;
  for (const auto& line : lines_of(out)) {
    int pid = 0, child = 0;
    char kind = 0;
    int n = std::sscanf(line.c_str(), "%c %d %d", &kind, &pid, &child);
    if (n >= 2 && kind == 'G') gone.insert(pid);
    if (n == 3 && kind == 'C' && child > 0) children[pid] = child;
  }
  for (Run* r : asked) {
    if (auto c = children.find(r->sup_pid); c != children.end()) {
      r->child_pid = c->second;
      note_pid(r->id, c->second);
    }
    if (!gone.count(r->sup_pid)) continue;
    read_exit(*r);  // it may have written the record just before it exited
    if (r->exit) continue;
    ExitInfo info;
    info.attempt = r->attempt;
    info.reason = ExitReason::kSupervisorDied;
    std::string full = w.h.full_note(r->dir);
    info.error = full.empty() ? "the trial's supervisor on " + w.name +
                                    " is gone without recording the trial's exit (killed?)"
                              : "the trial's supervisor on " + w.name +
                                    " could not record the trial's exit: the disk holding " +
                                    r->dir + " is full" + full;
    info.pid = r->child_pid;
    spdlog::warn("trial {}: {}{}", r->head_dir.filename().string(), info.error,
                 r->child_pid ? "; ending its trial, pid " + std::to_string(*r->child_pid)
                              : std::string("; ending its trial's session"));
    // Its trial may still run: end it, so that a retry never runs beside it. The supervisor
    // led its own session, which the trial's processes stay in (pkill -s), and the trial leads
    // its own process group (when its pid is known).
    std::string end = "pkill -KILL -s " + std::to_string(r->sup_pid) + " 2>/dev/null; ";
    if (r->child_pid && *r->child_pid > 0)
      end += "kill -KILL -" + std::to_string(*r->child_pid) + " 2>/dev/null; ";
    (void)w.h.shell_run(end + "true");
    r->exit = std::move(info);
  }
}

// One look at each attempt on the host: its exit record, new output and when it arrived, its
// syncs. An attempt's exit is handed on after all its output and its end-of-trial sync.
bool SshExecutor::Impl::poll(Worker& w) {
  bool any_output = false;
  double t = mono();
  check_supervisors(w, t);
  auto sync = sync_context(w);
  std::vector<std::string> done;
  for (auto& [id, r] : w.runs) {
    bool read_some = false;
    if (!r.exited && w.up) {
      if (!r.exit) read_exit(r);  // before reading: once it exists, the output is final
      auto size = w.h.size_of(r.dir + "/stdout.log");
      if (!size) check(w);
      if (size) w.last_ok = mono();
      if (size && *size > r.offset && w.up) {
        auto data = w.h.read(r.dir + "/stdout.log", r.offset,
                             static_cast<size_t>(std::min<uint64_t>(*size - r.offset, kReadChunk)));
        if (!data) check(w);
        if (data && !data->empty()) {
          OutputEvent ev(id, std::move(*data));
          ev.from = r.offset;
          r.offset += ev.data.size();
          // When it arrived, on the host's clocks (its notes are written before the output;
          // none, or an unreadable file: the controller times it as it reads it).
          if (auto notes = w.h.read(r.dir + "/stdout.times", r.times.offset(), kReadChunk))
            r.times.feed(*notes, ev.arrivals, ev.started);
          emit(std::move(ev));
          read_some = true;  // exit only once all output is read
          any_output = true;
          if (r.started_at >= 0) {
            w.stats.first_output_ms.push_back((mono() - r.started_at) * 1000);
            r.started_at = -1;
          }
        }
      }
      if (r.exit && w.up && !read_some) {
        r.exited = true;
        r.sync_due = true;  // the end-of-trial sync, before the exit is reported
      }
    }
    // Syncs advance whether or not the trial printed (a trial that prints at every poll once
    // starved them: checkpoints reached the head ~9 s late with sync_period 1).
    if (!w.up) continue;
    double before = mono();
    bool syncing = poll_sync(sync, r, t);
    w.stats.sync_poll_max_ms = std::max(w.stats.sync_poll_max_ms, (mono() - before) * 1000);
    if (r.exited && !syncing) {
      emit(ExitEvent{id, *r.exit});
      done.push_back(id);
    }
  }
  for (const auto& id : done) w.runs.erase(id);
  return any_output;
}

void SshExecutor::Impl::tick(Worker& w) {
  if (!w.ready) return;
  tend(w, mono());
  // Polled often while output flows or is expected, every kPollPeriod when the host is quiet.
  w.poll_gap = poll(w) ? kPollSoon : std::min(w.poll_gap * 2, kPollPeriod);
  if (w.poll_gap < kPollPeriod) w.io->tick_within(w.poll_gap);
}

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
  std::vector<std::string> cmd = {"rsync", "-rlt", "-e", w.h.ssh_words(),
                                  "--exclude=/.tune_workdir_stamp"};
  for (const auto& x : p.excludes) cmd.push_back("--exclude=" + x);
  cmd.push_back(p.workdir.string() + "/");
  cmd.push_back(w.h.remote_prefix() + copy + "/");
  fs::path log = opts.head_exp_dir / ".tune" / ("workdir-" + std::to_string(w.h.index) + ".log");
  double t0 = mono();
  auto rc = util::run_process(cmd, log);
  if (!rc || *rc != 0)
    return fail("cannot copy trial.workdir ", p.workdir.string(), " to ", w.name, ": ",
                rc ? util::last_line(log) : rc.error().message);
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

SshExecutor::SshExecutor(SshOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
}

SshExecutor::~SshExecutor() {
  auto& impl = *impl_;
  for (auto& w : impl.workers) w->io.reset();  // joined: their state is ours now
  SshStats all;
  for (auto& w : impl.workers) {
    all.add(w->stats);
    for (auto& [id, r] : w->runs) drop_sync(r);
  }
  if (!all.start_ms.empty())
    spdlog::info(
        "ssh timings: {} starts, median {:.2f} ms; first output read {:.2f} ms after the start "
        "(median); {} syncs, median {:.2f} ms; longest "
        "sync bookkeeping in one loop turn {:.2f} ms; {} checkpoints published, {} bytes, "
        "median {:.2f} ms after registration",
        all.start_ms.size(), median_of(all.start_ms), median_of(all.first_output_ms),
        all.sync_ms.size(), median_of(all.sync_ms), all.sync_poll_max_ms, all.publish_ms.size(),
        all.published_bytes, median_of(all.publish_ms));
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
    w->io = std::make_unique<IoThread>(kPollPeriod, [&impl, raw] { impl.tick(*raw); });
    w->io->start();
    auto promise = std::make_shared<std::promise<Result<void>>>();
    opened.push_back(promise->get_future());
    w->io->post([&impl, raw, promise] {
      auto r = raw->h.open(impl.opts);
      raw->up = raw->ready = r.has_value();
      raw->last_ok = mono();
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

void SshExecutor::Impl::start_on_host(Worker& w, const Launch& l, Run r) {
  // A host that is down (or went down just now): the attempt ends as host_lost, re-queued.
  auto lost = [&](const std::string& why) {
    check(w);
    ExitInfo info;
    info.attempt = l.attempt;
    info.reason = ExitReason::kHostLost;
    info.error = why;
    emit(ExitEvent{l.trial_id, std::move(info)});
  };
  // Not startable there (a refused command, a full disk): the attempt failed to execute.
  auto failed = [&](const std::string& why) {
    ExitInfo info;
    info.attempt = l.attempt;
    info.reason = ExitReason::kExecFailed;
    info.error = why;
    emit(ExitEvent{l.trial_id, std::move(info)});
  };
  if (!w.up) return lost("host " + w.name + " is unreachable");
  if (auto it = w.runs.find(l.trial_id); it != w.runs.end()) {
    r.checkpoints = it->second.checkpoints;
    drop_sync(it->second);
    w.runs.erase(it);
  }
  remove_sync_leftovers(r.head_dir);
  // trial.sync_workdir: the trial runs in the workdir's copy there, and words of its command
  // that name a path inside the workdir name the same path in the copy.
  std::string cwd = l.cwd.string();
  std::vector<std::string> argv = l.argv;
  if (opts.workdir) {
    if (auto copied = ensure_workdir(w); !copied) {
      check(w);
      return w.up ? failed(copied.error().message) : lost(copied.error().message);
    }
    std::string from = opts.workdir->workdir.string();
    std::string to = w.h.info.exp_dir + "/" + kWorkdirCopy;
    auto remap = [&](std::string& s) {
      if (s == from)
        s = to;
      else if (s.starts_with(from + "/"))
        s = to + s.substr(from.size());
    };
    remap(cwd);
    for (auto& a : argv) remap(a);
  }
  // params.json, then the supervisor in the background; each word quoted for the host's shell.
  // The attempt's output starts where stdout.log ends now on the host (the head's copy may
  // lag, or be missing while the host has one from an earlier run): it prints that first.
  std::string cmd = "mkdir -p -- " + q(r.dir) + " && rm -f -- " + q(r.record) +
                    " && { stat -c %s -- " + q(r.dir + "/stdout.log") +
                    " 2>/dev/null || echo 0; } && ( env";
  for (const auto& [k, v] : l.env) cmd += " " + q(k + "=" + v);
  cmd += " " + q(w.h.supervisor) + " " + q(r.dir) + " " + std::to_string(l.attempt) + " " +
         q(w.h.lease) + " " + util::format_double(opts.orphan_timeout_s) + " " +
         util::format_double(opts.grace_s) + " " + q(cwd) + " " + (l.stdin_fifo ? "fifo" : "null") +
         " " + q(r.record) + " --";
  for (const auto& a : argv) cmd += " " + q(a);
  // (a subshell: the supervisor is orphaned to init at once, never a child of the kept shell;
  // the nonce reaches its stdin through a here-document, never a command line)
  cmd += " <<'TUNE_NONCE' >/dev/null 2>&1 & echo $! )\n" + r.who.nonce + "\nTUNE_NONCE";
  if (auto params = util::read_file(l.trial_dir / "params.json", 1u << 20)) {
    (void)w.h.shell_run("mkdir -p -- " + q(r.dir));
    if (auto written = w.h.write(r.dir + "/params.json", *params, 0644); !written) {
      check(w);
      if (!w.up) return lost("host " + w.name + " is unreachable");
      return failed(written.error().message);
    }
  }
  check(w);
  if (!w.up) return lost("host " + w.name + " is unreachable");
  push_logs(w, r);
  // A restore point the host lacks (the trial ran elsewhere before) is pushed there first.
  if (auto it = l.env.find("TUNE_RESTORE_CHECKPOINT"); it != l.env.end()) {
    std::string name = fs::path(it->second).filename().string();
    if (!w.h.size_of(it->second)) {
      (void)w.h.shell_run("mkdir -p -- " + q(r.dir));
      fs::path log = opts.head_exp_dir / ".tune" / ("push-" + r.id + ".log");
      auto rc = util::run_process({"rsync", "-rlt", "-e", w.h.ssh_words(),
                                   (r.head_dir / name).string(), w.h.remote_prefix() + r.dir + "/"},
                                  log);
      if (!rc || *rc != 0)
        return lost("cannot push " + name + " to " + w.name + ": " + util::last_line(log));
      r.checkpoints.insert(name);
    }
  }
  std::string out;
  double t0 = mono();
  auto st = w.h.shell_run(cmd, &out);
  w.stats.start_ms.push_back((mono() - t0) * 1000);
  r.started_at = t0;
  if (!st) return lost(st.error().message);
  if (*st != 0)
    return failed(w.name + ": cannot start the supervisor: " + util::printable(out, 300));
  r.offset = std::strtoull(out.c_str(), nullptr, 10);
  auto nl = out.find('\n');
  r.sup_pid = nl == std::string::npos ? -1 : std::atoi(out.c_str() + nl + 1);
  if (r.sup_pid <= 0)
    return failed(w.name + ": the supervisor did not start: " + util::printable(out, 300));
  r.who.supervisor = r.sup_pid;
  // Where its output starts: the controller reads the attempt's lines from there.
  OutputEvent where(l.trial_id, "");
  where.from = r.offset;
  emit(std::move(where));
  w.runs[l.trial_id] = std::move(r);
  expect_output(w);
}

Result<void> SshExecutor::start(const Launch& l) {
  auto& impl = *impl_;
  Worker* w = impl.worker(l.host);
  if (!w) return fail("unknown host ", l.host);
  if (auto made = prepare_trial_dir(l); !made) return made;  // the head's copy
  impl.where[l.trial_id] = w;
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

Attached SshExecutor::Impl::attach_on_host(Worker& w, const Launch& l) {
  if (!w.up) return Attached::kGone;  // restarts (from the head's latest checkpoint)
  Run r = new_run(l, w);
  // Its supervisor, by command line (as locally): "<supervisor> <trial dir> <attempt> ..."
  auto procs = supervisor_processes(w.h);
  if (!procs) {
    check(w);
    return Attached::kGone;
  }
  std::string needle = w.h.supervisor + " " + r.dir + " " + std::to_string(l.attempt) + " ";
  for (const auto& line : lines_of(*procs))
    if (line.find(needle) != std::string::npos) r.sup_pid = std::atoi(line.c_str());
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
  w.runs[l.trial_id] = std::move(r);
  return found;
}

Result<Attached> SshExecutor::attach(const Launch& l) {
  auto& impl = *impl_;
  Worker* w = impl.worker(l.host);
  if (!w) return Attached::kGone;
  // Before the loop runs: the answer is waited for.
  Attached found = w->io->call([&] { return impl.attach_on_host(*w, l); });
  if (found != Attached::kGone) impl.where[l.trial_id] = w;
  return found;
}

void SshExecutor::send(const std::string& trial_id, std::string_view line) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([impl = impl_.get(), w, trial_id, line = std::string(line)] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || run->second.exit || !w->up) return;
    auto& r = run->second;
    // One line into the trial's FIFO (the supervisor holds it open, so opening it never
    // blocks; it may not exist for a moment right after the start).
    std::string fifo = q(r.dir + "/stdin.fifo");
    auto st =
        w->h.shell_run("for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do [ -p " +
                           fifo + " ] && break; sleep 0.05; done; [ -p " + fifo +
                           " ] && printf '%s\\n' " + q(line) + " > " + fifo,
                       nullptr);
    if (!st)
      impl->check(*w);
    else if (*st != 0)
      spdlog::warn("trial {}: cannot send a command to its stdin on {}", trial_id, w->name);
    else
      Impl::expect_output(*w);  // its answer (step mode)
  });
}

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

void SshExecutor::stop(const std::string& trial_id, bool now) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([impl = impl_.get(), w, trial_id, now] {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || run->second.exit || run->second.sup_pid <= 0) return;
    if (!w->up) return;  // unreachable: it stops itself when its lease runs out
    if (!w->h.shell_run(std::string("kill -") + (now ? "USR1" : "TERM") + " " +
                        std::to_string(run->second.sup_pid) + " 2>/dev/null; true"))
      impl->check(*w);
  });
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
  }
  // Host events first, then output, then exits (each trial's exit follows all its output).
  std::stable_partition(got.begin(), got.end(),
                        [](const Event& e) { return std::holds_alternative<HostEvent>(e); });
  std::stable_partition(got.begin(), got.end(),
                        [](const Event& e) { return !std::holds_alternative<ExitEvent>(e); });
  for (const auto& e : got)
    if (const auto* x = std::get_if<ExitEvent>(&e)) impl.where.erase(x->trial_id);
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
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end() || run->second.child_pid || run->second.sup_pid <= 0 || !w->up) return;
    auto& r = run->second;
    std::string out;
    auto st = w->h.shell_run("cat /proc/" + std::to_string(r.sup_pid) + "/task/" +
                                 std::to_string(r.sup_pid) + "/children 2>/dev/null",
                             &out);
    if (st && *st == 0 && std::atoi(out.c_str()) > 0) {
      r.child_pid = r.who.pid = std::atoi(out.c_str());
      impl.note_pid(trial_id, *r.child_pid);
    }
  });
  return std::nullopt;
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

Result<void> SshExecutor::adopt(const std::string& trial_id, const std::string& reported,
                                const fs::path& cwd, const fs::path& head_trial_dir,
                                const std::string& dest) {
  auto task = adopt_task(trial_id, reported, cwd, head_trial_dir, dest);
  return task ? task() : fail("internal: no remote run for ", trial_id);
}

namespace {
// The supervisor on the host checks and moves the reported dir (checkpoint::adopt's rules), on
// the host's thread; whoever calls waits (the controller's file worker).
Result<void> adopt_on_host(SshExecutor::Impl* impl, Worker* w, const std::string& trial_id,
                           const std::string& reported, const fs::path& cwd,
                           const std::string& dest) {
  return w->io->call([&]() -> Result<void> {
    auto run = w->runs.find(trial_id);
    if (run == w->runs.end()) return fail("the attempt on ", w->name, " has ended");
    auto& r = run->second;
    if (!w->up) return fail("host ", w->name, " is unreachable");
    if (r.found_at_attach.erase(dest)) {
      // moved in by the driver that crashed; this line is being read again
      r.checkpoints.insert(dest);
      return {};
    }
    std::string path = reported;
    if (!path.empty() && path[0] != '/') path = cwd.string() + "/" + path;
    std::string out;
    auto st = w->h.shell_run(
        q(w->h.supervisor) + " --adopt " + q(r.dir) + " " + q(path) + " " + q(dest), &out);
    if (!st) {
      impl->check(*w);
      return std::unexpected(st.error());
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    if (*st != 0) return fail(util::printable(out, 300));
    r.checkpoints.insert(dest);
    r.adopted_at[dest] = mono();
    return {};
  });
}
}  // namespace

std::function<Result<void>()> SshExecutor::adopt_task(const std::string& trial_id,
                                                      const std::string& reported,
                                                      const fs::path& cwd, const fs::path&,
                                                      const std::string& dest) {
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return {};
  Worker* w = it->second;
  Impl* impl = impl_.get();
  return [impl, w, trial_id, reported, cwd, dest]() -> Result<void> {
    try {
      return adopt_on_host(impl, w, trial_id, reported, cwd, dest);
    } catch (const std::future_error&) {  // the executor is going away
      return fail("the connection to ", w->name, " was closed");
    }
  };
}

void SshExecutor::remove_checkpoint(const std::string& host, const fs::path& head_trial_dir,
                                    const std::string& name) {
  Worker* w = impl_->worker(host);
  if (!w) return;
  w->io->post([w, head_trial_dir, name] {
    std::string dir = w->h.info.exp_dir + "/" + head_trial_dir.filename().string();
    for (auto& [id, r] : w->runs)
      if (r.dir == dir) r.checkpoints.erase(name);
    // A sync may have published it on the head after the controller deleted the head's copy:
    // no longer retained, it goes again.
    std::error_code ec;
    if (fs::exists(head_trial_dir / name, ec))
      (void)util::remove_tree_nofollow(head_trial_dir, name);
    if (!w->up) return;
    std::string out;
    auto st = w->h.shell_run(q(w->h.supervisor) + " --rm " + q(dir) + " " + q(name), &out);
    if (!st || *st != 0)
      spdlog::warn("host {}: cannot delete {}/{}: {}", w->name, dir, name,
                   st ? out : st.error().message);
  });
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
    fs::path log = impl_->opts.head_exp_dir / ".tune" /
                   ("fetch-" + head_trial_dir.filename().string() + ".log");
    SshStats unused;
    SyncContext c{impl_->opts, w->h, unused};
    for (const auto& name : names) {
      if (!name.starts_with("checkpoint_") || name.find('/') != std::string::npos) continue;
      std::string staging = ".sync_" + name;
      (void)util::remove_tree_nofollow(head_trial_dir, staging);
      auto rc =
          util::run_process(copy_from(c, dir + "/" + name + "/",
                                      (head_trial_dir / staging).string() + "/", {"--timeout=30"}),
                            log);
      std::error_code ec;
      if (rc && *rc == 0) fs::rename(head_trial_dir / staging, head_trial_dir / name, ec);
      if (!rc || *rc != 0 || ec) {
        spdlog::warn("{}: cannot bring {} from {}: {}", head_trial_dir.filename().string(), name,
                     host, ec ? ec.message() : util::last_line(log));
        (void)util::remove_tree_nofollow(head_trial_dir, staging);
        continue;
      }
      fetched.push_back(name);
    }
    return fetched;
  });
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

void SshExecutor::checkpoint_registered(const std::string& trial_id) {
  if (!impl_->opts.sync_on_checkpoint) return;
  auto it = impl_->where.find(trial_id);
  if (it == impl_->where.end()) return;
  Worker* w = it->second;
  w->io->post([w, trial_id] {
    if (auto run = w->runs.find(trial_id); run != w->runs.end()) run->second.sync_due = true;
  });
}

bool SshExecutor::owns(const std::string& trial_id) const {
  return impl_->where.count(trial_id) != 0;
}

bool SshExecutor::busy() const {
  return !impl_->where.empty();
}

}  // namespace tune::exec
