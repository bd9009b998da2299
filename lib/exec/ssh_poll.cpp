// Looking at a host's attempts, on its I/O thread: exit records, new output and when it
// arrived, the syncs, and whether each attempt's supervisor still lives; and the tick that
// does it, on the host's poll schedule.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "agent/stdin_record.hpp"
#include "exec/exit_record.hpp"
#include "exec/ssh_worker.hpp"
#include "util/strings.hpp"

namespace tune::exec {

using namespace ssh_impl;

// This attempt's exit, if its supervisor recorded it; a record it did not write is ignored,
// with a warning once per attempt.
void SshExecutor::Impl::read_exit(Worker& w, Run& r) {
  ++w.stats.records_read;
  // (a trial can make the file a FIFO: not opened over SFTP, see SshHost::read_ranges)
  auto got = w.h.read_ranges({{r.record, 0, 1u << 20}});
  if (!got) return check(w);
  using Got = SshHost::RangeRead::Got;
  take_exit(r, (*got)[0].got == Got::kData ? std::optional((*got)[0].data) : std::nullopt);
}

void SshExecutor::Impl::take_exit(Run& r, const std::optional<std::string>& record) {
  ExitInfo info;
  switch (check_exit_record(record, r.attempt, r.who, info)) {
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

namespace {

// A shell command that prints, for each attempt asked about, "G PID" if its supervisor is
// gone: no such process, a zombie (by its state in /proc/PID/stat; not by its command line),
// or, when its start time is known, a process started at another time (the pid reused); else,
// while the trial's pid is not known, "C PID CHILD" (to end it if need be).
std::string liveness_command(const std::vector<Run*>& asked) {
  std::string cmd;
  for (const Run* r : asked) {
    std::string p = std::to_string(r->sup_pid);
    // (after "pid (comm) ": the state is the 1st field, the start time the 20th)
    cmd += "set -- $(sed 's/.*) //' /proc/" + p + "/stat 2>/dev/null) x; " +
           "if [ \"$1\" = x ] || [ \"$1\" = Z ] || [ \"$1\" = X ]" +
           (r->sup_started ? " || [ \"${20}\" != " + std::to_string(r->sup_started) + " ]"
                           : std::string()) +
           "; then echo G " + p + "; else " +
           (r->child_pid
                ? std::string(":")
                : "echo C " + p + " $(cat /proc/" + p + "/task/" + p + "/children 2>/dev/null)") +
           "; fi; ";
  }
  return cmd + "true";
}

}  // namespace

// Whether the host says the attempt's supervisor is gone (one command); false if it runs, or
// the host could not be asked (the caller has the liveness checks ask again).
bool SshExecutor::Impl::supervisor_gone(Worker& w, Run& r) {
  std::vector<Run*> asked{&r};
  std::string out;
  auto st = w.h.shell_run(liveness_command(asked), &out);
  if (!st || *st != 0) {
    if (!st) check(w);
    return false;
  }
  for (const auto& line : lines_of(out))
    if (line == "G " + std::to_string(r.sup_pid)) return true;
  spdlog::warn(
      "host {}: its agent said supervisor {} of trial {} ended, but it still runs there: not "
      "believed",
      w.name, r.sup_pid, r.head_dir.filename().string());
  return false;
}

namespace {

// An ended attempt part of whose output its host will not give: it failed, as one whose
// supervisor could not write all of it does, if it had ended by itself (output_lost).
void output_lost(Run& r, const std::string& why) {
  spdlog::warn("trial {}: {}; it ends without it", r.head_dir.filename().string(), why);
  if (r.exit->reason != ExitReason::kExited) return;
  r.exit->reason = ExitReason::kOutputLost;
  r.exit->error = why + " (part of the trial's output is lost)";
}

// An attempt whose supervisor is gone without recording its exit: supervisor_died, and its
// trial, which may still run, is ended, so that a retry never runs beside it. The supervisor
// led its own session, which the trial's processes stay in (pkill -s), and the trial leads its
// own process group (when its pid is known).
void end_orphaned(Worker& w, Run& r) {
  ExitInfo info;
  info.attempt = r.attempt;
  info.reason = ExitReason::kSupervisorDied;
  std::string full = w.h.full_note(r.dir);
  info.error = full.empty() ? "the trial's supervisor on " + w.name +
                                  " is gone without recording the trial's exit (killed?)"
                            : "the trial's supervisor on " + w.name +
                                  " could not record the trial's exit: the disk holding " + r.dir +
                                  " is full" + full;
  info.pid = r.child_pid;
  spdlog::warn("trial {}: {}{}", r.head_dir.filename().string(), info.error,
               r.child_pid ? "; ending its trial, pid " + std::to_string(*r.child_pid)
                           : std::string("; ending its trial's session"));
  std::string end = "pkill -KILL -s " + std::to_string(r.sup_pid) + " 2>/dev/null; ";
  if (r.child_pid && *r.child_pid > 0)
    end += "kill -KILL -" + std::to_string(*r.child_pid) + " 2>/dev/null; ";
  (void)w.h.shell_run(end + "true");
  r.exit = std::move(info);
}

}  // namespace

// An agent's error answering a stop or a stdin line.
void SshExecutor::Impl::signal_or_stdin_refused(Worker& w, const AgentEvent& e) {
  auto run = w.runs.find(e.id);
  if (run == w.runs.end() || run->second.exit || run->second.attempt != e.attempt)
    return spdlog::debug("host {}: tune-agent: {}", w.name, e.error);  // (it ended meanwhile)
  auto& r = run->second;
  if (e.op == "signal") return stop_in_shell(w, r);  // (one its agent does not know)
  if (e.stdin_lost) return stdin_lost(w, r, e.error);
  // (that line dropped: a trial that reads none of its commands but answers them all the same
  // has one refused per step: said once per attempt, not 200 MB of tune.log in a minute)
  std::erase_if(r.unwritten, [&](const Run::StdinLine& l) { return l.n == e.n; });
  if (std::exchange(r.stdin_refused, true))
    return spdlog::debug("trial {}: cannot send a command to its stdin on {}: {}", e.id, w.name,
                         util::printable(e.error, 300));
  spdlog::warn("trial {}: cannot send a command to its stdin on {}: {} (said once per attempt)",
               e.id, w.name, util::printable(e.error, 300));
}

void SshExecutor::Impl::shell_does_requests(Worker& w) {
  // (an agent that does not know a request, another version's: it answered none of those of
  // that kind sent to it, and the host's shell does them all from now on)
  int gen = w.h.agent_gen;
  if (std::exchange(w.shell_requests_for, gen) == gen) return;
  redo_agent_requests(w, gen, true);
}

void SshExecutor::Impl::redo_agent_requests(Worker& w, int gen, bool lines) {
  for (auto& [id, r] : w.runs) {
    if (r.exit || r.exited) continue;  // (its FIFO has no reader: a write there would block)
    if (lines && std::ranges::any_of(r.unwritten, [&](const auto& l) { return l.by == gen; }))
      stdin_in_shell(w, r);
    // (a SIGTERM the supervisor had already is no harm)
    if (r.stop_by == gen) {
      r.stop_by = -1;
      stop_in_shell(w, r);
    }
  }
}

bool SshExecutor::Impl::agent_takes_requests(const Worker& w) {
  int gen = w.h.agent_gen;
  return w.up && w.shell_requests_for != gen && w.h.agent_pid > 0 && w.agent_heard_gen == gen &&
         mono() - w.agent_heard < kAgentSilence;
}

// An agent silent for kAgentSilence: the stops it was asked for are done in the host's shell
// too; past kFileOpSilence with stdin lines it had not written, it is ended and they go
// through the shell (each line once: the host's record says which went).
void SshExecutor::Impl::check_agent_requests(Worker& w, double t) {
  int gen = w.h.agent_gen;
  double heard = w.agent_heard_gen == gen ? w.agent_heard : -1e9;
  if (!w.up || t - heard < kAgentSilence) return;
  redo_agent_requests(w, gen, false);
  bool stuck = false;
  for (const auto& [id, r] : w.runs)
    for (const auto& l : r.unwritten)
      stuck |= l.by == gen && !r.exit && t - std::max(heard, l.sent) > kFileOpSilence;
  if (!stuck || std::exchange(w.agent_end_tried, gen) == gen) return;  // (once per agent)
  spdlog::warn(
      "host {}: its agent has said nothing for {:.0f} s: ending it; the commands it had "
      "not written to trials' stdin go through the host's shell",
      w.name, t - heard);
  if (!end_agent(w)) spdlog::warn("host {}: its agent could not be ended", w.name);
  redo_agent_requests(w, gen, true);
}

// The host's agent relayed a supervisor's start (the trial's pid) or exit record, or said a
// supervisor ended: its exit record is read now (or, without one, the attempt ends as
// supervisor_died) instead of at the next liveness check.
// And its output events: the bytes they carry are handed on, else that attempt is looked at in
// this poll; and the answers to watches.
void SshExecutor::Impl::on_agent_error(Worker& w, const AgentEvent& e) {
  // (an agent of another version, put in this version's `.tune-bin/<sum>/` there by hand,
  // that does not know a request answers none of that kind: its host's shell does them all)
  bool unknown = e.error.starts_with("not a request");
  if (e.op == "adopt" || e.op == "rm") {
    if (unknown)
      shell_does_requests(w);
    else
      w.shell_requests_for = w.h.agent_gen;
    return settle_file_ops(w, "its agent does not take file requests (" + e.error + ")", false);
  }
  if (e.op == "signal" || e.op == "stdin")
    return unknown ? shell_does_requests(w) : signal_or_stdin_refused(w, e);
  spdlog::warn("host {}: tune-agent: {}", w.name, e.error);
}

void SshExecutor::Impl::on_agent_event(Worker& w, const AgentEvent& e) {
  using Kind = AgentEvent::Kind;
  if (e.kind == Kind::kError) return on_agent_error(w, e);
  // (a file request carried out; numbers are never reused, and the error names paths a trial
  // chose)
  if (e.kind == Kind::kDone)
    return file_op_done(w, e.req, e.error.empty() ? "" : util::printable(e.error, 300));
  auto it = w.runs.find(e.id);
  if (it == w.runs.end() || it->second.attempt != e.attempt) return;
  Run& r = it->second;
  switch (e.kind) {
    case Kind::kOutput:  // (the bytes it carries; else, or for the rest, a look over SFTP)
      if (!take_carried(w, r, e)) r.look = true;
      return;
    case Kind::kWatching:
      // Watched from now on; what came before the watch is read in this poll. (Only an answer
      // of the agent that was asked: one kept from an agent that has ended is not.)
      if (r.watch_asked != w.h.agent_gen) return;
      r.watched_by = w.h.agent_gen;
      r.look = true;
      return;
    case Kind::kWritten:  // a stdin line went (and those before it): not sent again
      if (e.already > stdin_issued.load())  // (a record no writer of this driver's made)
        return stdin_lost(w, r,
                          std::string("its record ") + agent::kStdinRecordName +
                              " names a command never sent (written by another process)");
      if (e.n == 0 && !r.unwritten.empty() && r.unwritten.front().by == w.h.agent_gen)
        r.unwritten.pop_front();  // (an agent that does not number them: the first it got)
      std::erase_if(r.unwritten, [&](const Run::StdinLine& l) { return l.n <= e.n; });
      return;
    case Kind::kUnwatched:  // (a watch that could not be made, or stopped working)
      spdlog::debug("host {}: trial {} is polled: {}", w.name, e.id, e.error);
      if (r.watched_by == w.h.agent_gen) r.watched_by = -1;
      r.look = true;
      return;
    case Kind::kStart:  // the trial's pid, without a round trip to ask for it
      // (Not what its exit record is checked against: the nonce proves a record, and a start
      // line written into the agent's pipes by another process, which takes root there, must
      // not make the attempt's genuine record look forged.)
      if (e.supervisor != r.sup_pid || e.pid <= 0 || r.child_pid) return;
      r.child_pid = e.pid;
      if (e.supervisor_started) r.sup_started = e.supervisor_started;
      note_pid(r.id, e.pid);
      return;
    case Kind::kChanges:  // what its last sync would ask for (it comes before the exit)
      if (e.supervisor != r.sup_pid || r.exit || r.exited) return;
      r.exit_changes = e.data;
      return;
    case Kind::kExit:  // its exit record, as its supervisor wrote it (no file read for it)
      if (e.supervisor != r.sup_pid || r.exit || r.exited) return;
      take_exit(r, e.line);
      r.look = true;
      return;
    case Kind::kGone:
      if (e.supervisor < 0 || r.sup_pid != e.supervisor || r.exit || r.exited) return;
      r.look = true;
      read_exit(w, r);  // (no exit event came: sent to an earlier agent, or lost)
      // Ended without a record: confirmed on the host before the attempt ends (a gone line
      // is not proof: anyone who can write into the agent's pipes can write one).
      if (!r.exit) {
        if (supervisor_gone(w, r))
          end_orphaned(w, r);
        else
          r.confirm_gone = true;
      }
      return;
    default:
      return;
  }
}

// Attempts the current agent neither started nor watches (a resumed driver's, or an earlier
// agent's) are asked of it, once per agent.
void SshExecutor::Impl::ask_watches(Worker& w) {
  for (auto& [id, r] : w.runs) {
    if (r.watched_by == w.h.agent_gen || r.watch_asked == w.h.agent_gen ||
        r.launched_by == w.h.agent_gen || r.sup_pid <= 0 || r.exit || r.exited)
      continue;
    if (!w.h.agent_send(agent_watch_request(id, r.attempt, r.dir, r.sup_pid, r.sup_started,
                                            r.offset, r.times.offset())))
      return check(w);
    r.watch_asked = w.h.agent_gen;
  }
}

void SshExecutor::Impl::pid_from_events(Worker& w, Run& r) {
  if (auto lines = w.h.agent_events(0))  // (the rest waits for the next tick's read_agent)
    for (const auto& line : *lines)
      if (auto e = parse_agent_event(line)) w.agent_events.push_back(std::move(*e));
  for (const auto& e : w.agent_events)
    if (e.kind == AgentEvent::Kind::kStart && e.id == r.id && e.attempt == r.attempt)
      on_agent_event(w, e);
}

void SshExecutor::Impl::read_agent(Worker& w) {
  auto lines = w.h.agent_events(0);
  if (!lines) {
    check(w);
    if (!w.up) return;
    // Only the agent ended (killed?): the supervisors it started run on, watched by the
    // liveness checks; a new agent takes the launches.
    spdlog::warn("host {}: {}; starting a new one", w.name, lines.error().message);
    restart_agent(w);
    return;
  }
  if (!lines->empty() || !w.agent_events.empty()) {
    w.last_ok = mono();
    w.heard_agent();
  }
  for (const auto& line : *lines)
    if (auto e = parse_agent_event(line)) w.agent_events.push_back(std::move(*e));
  // (trials' pids first: output handed on in this batch carries its trial's pid)
  auto events = std::exchange(w.agent_events, {});
  for (const auto& e : events)
    if (e.kind == AgentEvent::Kind::kStart) on_agent_event(w, e);
  for (const auto& e : events)
    if (e.kind != AgentEvent::Kind::kStart) on_agent_event(w, e);
  ask_watches(w);
}

void SshExecutor::Impl::restart_agent(Worker& w) {
  // What it said that was read but not handled yet (during a launch): its "written" lines are
  // not sent again.
  auto said = std::exchange(w.agent_events, {});
  for (const auto& e : said)
    if (e.kind == AgentEvent::Kind::kStart) on_agent_event(w, e);
  for (const auto& e : said)
    if (e.kind != AgentEvent::Kind::kStart) on_agent_event(w, e);
  settle_file_ops(w, "its agent ended");
  // The stops it was asked for, and the stdin lines it had not written (each line once: the
  // host's record says which went).
  if (!end_agent(w)) spdlog::warn("host {}: its agent could not be ended", w.name);
  redo_agent_requests(w, w.h.agent_gen, true);
  if (auto a = w.h.open_agent(); a) {
    w.heard_agent();
  } else {
    // Treated as a host that is down: reconnected with backoff, lost after host_timeout_s.
    spdlog::warn("host {}: {}", w.name, a.error().message);
    mark_down(w, mono());
  }
}

// Every kSupervisorCheck seconds: are the supervisors of the host's running attempts alive?
// One that is gone without an exit record (killed, or it could not write the record, e.g. on
// a full disk) ends its attempt as supervisor_died, instead of a wait forever.
void SshExecutor::Impl::check_supervisors(Worker& w, double now) {
  if (now - w.last_check < kSupervisorCheck || !w.up) return;
  w.last_check = now;
  // The agent says when a supervisor it started or watches ends, but one that is stopped or
  // stuck would not: while it is heard from, only the others are asked about, else all, in one
  // command for all of a host's attempts.
  bool heard = w.agent_heard_gen == w.h.agent_gen && now - w.agent_heard < kAgentSilence;
  std::vector<Run*> asked;
  for (auto& [id, r] : w.runs) {
    bool told =
        (r.launched_by == w.h.agent_gen || r.watched_by == w.h.agent_gen) && !r.confirm_gone;
    if (!r.exit && !r.exited && r.sup_pid > 0 && !(heard && told)) asked.push_back(&r);
  }
  if (asked.empty()) return;
  std::string out;
  auto st = w.h.shell_run(liveness_command(asked), &out);
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
    read_exit(w, *r);  // it may have written the record just before it exited
    if (!r->exit) end_orphaned(w, *r);
  }
}

// One look at each attempt on the host that is due one: its exit record, new output and when it
// arrived, its syncs. An attempt's exit is handed on after all its output and its end-of-trial
// sync.
bool SshExecutor::Impl::poll(Worker& w, bool due) {
  bool any_output = false;
  double t = mono();
  if (w.up) read_agent(w);
  // (an agent that says nothing at all is stuck, and a request never answered is lost: what
  // it was asked to do is done without it)
  if (w.up && !w.file_ops.empty()) {
    double oldest = w.file_ops.begin()->second.sent;  // (numbers only grow)
    double heard = w.agent_heard_gen == w.h.agent_gen ? w.agent_heard : -1e9;
    if (t - std::max(oldest, heard) > kFileOpSilence)
      settle_file_ops(w, fmt::format("its agent has said nothing for {:.0f} s", kFileOpSilence));
    else if (t - std::max(oldest, w.file_answered) > kFileOpLimit)
      settle_file_ops(
          w, fmt::format("its agent has answered no file request for {:.0f} s", kFileOpLimit));
  }
  check_agent_requests(w, t);
  check_supervisors(w, t);
  bool agent_live = w.agent_heard_gen == w.h.agent_gen && t - w.agent_heard < kAgentSilence;
  for (auto& [id, r] : w.runs) {
    bool read_some = false;
    // A watched attempt only when its agent said something, or every kWatchedLook seconds;
    // an unwatched one at every tick of the schedule, and on every poll while it owes the
    // answer to a stdin line (a watched one's answer comes in its agent's output event: no
    // look over SFTP per step, which held up every other attempt on the host for round trips).
    // (an agent silent for kAgentSilence, stopped or stuck, says nothing of it either)
    bool watched = r.watched_by == w.h.agent_gen && agent_live;
    bool routine = t - r.last_look >= kWatchedLook;
    if (!r.exited && w.up &&
        ((!watched && (due || r.awaiting_answer)) || r.look || r.exit || routine)) {
      r.look = false;
      r.last_look = t;
      // before reading: once it exists, the output is final (a watched attempt's is read when
      // its agent says its supervisor ended; one this agent started comes in its exit event,
      // or, if that was lost, is read when the agent says its supervisor ended)
      if (!r.exit && (!watched || routine) && r.launched_by != w.h.agent_gen) read_exit(w, r);
      Look got = look(w, r);
      any_output = any_output || got == Look::kRead;
      // exit only once all output is read; output that cannot be read (its host refuses) holds
      // it back kFailedLooks looks and kWatchedLook seconds, not for ever
      if (got != Look::kUnread || !r.exit) {
        r.failed_looks = 0;
        r.unread_since = t;
      } else {
        ++r.failed_looks;
      }
      read_some = got == Look::kRead ||
                  (got == Look::kUnread &&
                   (r.failed_looks < kFailedLooks || t - r.unread_since < kWatchedLook));
      if (r.exit && w.up && !read_some) {
        // (unreadable by the trial's doing: it failed; by the host's, e.g. its SFTP server gone
        // while the session lives: said, but not held against the trial)
        std::string unread = "cannot read the rest of its output on " + w.name + " (from byte " +
                             std::to_string(r.offset) + ")";
        if (got == Look::kUnread && r.unread_denied)
          output_lost(r, unread + ": permission denied");
        else if (got == Look::kUnread)
          spdlog::warn("trial {}: {}; it ends without it", r.head_dir.filename().string(), unread);
        else if (r.exit->stdout_size && *r.exit->stdout_size > r.offset)
          output_lost(r, "its stdout.log on " + w.name + " was removed or replaced while it ran: " +
                             std::to_string(*r.exit->stdout_size - r.offset) +
                             " bytes of its output, from byte " + std::to_string(r.offset) +
                             ", cannot be read");
        judge_cut(*r.exit, r.offset);
        r.exited = true;
        r.want_sync(true, t);  // the end-of-trial sync, before the exit is reported
      }
    }
  }
  // Syncs advance whether or not the trial printed (a trial that prints at every poll once
  // starved them: checkpoints reached the head ~9 s late with sync_period 1).
  if (w.up) poll_syncs(w, t);
  // (output its agent's events carried counts as output read, for the poll schedule)
  return std::exchange(w.output_handed_on, false) || any_output;
}

// The host's syncs: those under way advance; those wanted start, longest waiting first, while
// fewer than kSyncsAtOnce run (more at once only share the same CPUs and link, and a trial
// whose turn comes later copies its newest checkpoint then, not every one it made meanwhile);
// an ended attempt's exit is handed on once its last sync is done.
void SshExecutor::Impl::poll_syncs(Worker& w, double t) {
  auto sync = sync_context(w);
  double before = mono();
  int running = 0;
  std::vector<std::pair<double, Run*>> waiting;
  for (auto& [id, r] : w.runs) {
    if (poll_sync(sync, r, t, false))
      ++running;
    else if (auto since = r.sync_wanted(t))
      waiting.emplace_back(*since, &r);
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [since, r] : waiting)
    if (running < kSyncsAtOnce && poll_sync(sync, *r, t, true)) ++running;
  w.stats.sync_poll_max_ms = std::max(w.stats.sync_poll_max_ms, (mono() - before) * 1000);
  std::vector<std::string> done;
  for (auto& [id, r] : w.runs) {
    if (r.sync_pid > 0) continue;
    for (const auto& name : std::exchange(r.rm_later, {})) remove_on_host(w, r.dir, name);
    if (r.exited && !r.sync_wanted(t) && r.adopting == 0) {
      emit(ExitEvent{id, *r.exit});
      done.push_back(id);
    }
  }
  for (const auto& id : done) w.runs.erase(id);
}

void SshExecutor::Impl::tick(Worker& w) {
  if (!w.ready) return;
  tend(w, mono());
  // A tick that input on the connection brought before the schedule's time (the agent's events
  // about other attempts) never moves the next due poll later, and unwatched attempts wait for
  // it: a burst of events neither polls them at every tick nor pushes their polls (or a
  // step-mode answer's fast ones) out.
  double t = mono();
  bool due = t >= w.poll_due - 0.0005;
  bool read = poll(w, due);
  if (due) {
    w.poll_due = t + w.polls.after_poll(read);
  } else if (read) {  // (output read early: the next poll may come sooner, never later)
    w.poll_due = std::min(w.poll_due, t + w.polls.after_poll(true));
  }
  double gap = w.poll_due - t;
  // Agent events that libssh read off the socket while this tick waited for other answers
  // leave nothing on the socket to wake the thread: another tick for them.
  if (w.up && (!w.agent_events.empty() || w.h.agent_pending())) gap = IoThread::kMinGap;
  if (gap < PollSchedule::kIdle) w.io->tick_within(gap);
}

void SshExecutor::Impl::expect_output(Worker& w) {
  double gap = w.polls.expect_answer();
  w.poll_due = std::min(w.poll_due, mono() + gap);
  w.io->tick_within(gap);
}

}  // namespace tune::exec
