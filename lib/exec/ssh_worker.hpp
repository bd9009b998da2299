// The SSH executor's insides (ssh_executor.hpp), shared by its files: one host as the head sees
// it (Worker) and the executor's state (SshExecutor::Impl). Each host's I/O thread owns its
// Worker's connection and attempts; the loop only posts tasks to it and takes the events the
// threads produce. The files, by seam:
//   ssh_executor.cpp     the loop's side: connect, start, send, stop, wait, leases
//   ssh_start.cpp        starting an attempt on its host (workdir copy, logs, restore point)
//   ssh_poll.cpp         reading output, arrivals and exits; supervisor liveness; the poll tick
//   ssh_host_loss.cpp    a host going down, reconnecting, and declared lost
//   ssh_resume.cpp       a resume's questions: re-attach, live attempts, fetching checkpoints
//   ssh_checkpoints.cpp  staging dirs, adopting saved checkpoints, deleting them
#pragma once

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "exec/agent_protocol.hpp"
#include "exec/io_thread.hpp"
#include "exec/poll_schedule.hpp"
#include "exec/ssh_executor.hpp"
#include "exec/ssh_host.hpp"
#include "exec/ssh_run.hpp"
#include "util/clock.hpp"
#include "util/strings.hpp"

namespace tune::exec::ssh_impl {

inline constexpr double kSupervisorCheck = 2.0;  // s between remote supervisor liveness checks
// A host's agent says it is alive every second (apps/tune-agent/remote.hpp); silent this long,
// it is taken as stopped or stuck, or its link as gone: the liveness checks then cover the
// attempts it started or watches too (while it speaks, it says when their supervisors end).
inline constexpr double kAgentSilence = 3.5;
// s between looks at an attempt whose agent says when its output grows (in case it failed to)
inline constexpr double kWatchedLook = 5.0;
// Looks in a row that fail to read an ended attempt's output before its exit goes without it
// (and at least kWatchedLook seconds of them)
inline constexpr int kFailedLooks = 10;
inline constexpr size_t kReadChunk = 4u << 20;  // per trial per poll

// Syncs of one host's trials that run at once (each rsync goes over the host's one master
// connection; in the checkpoint benchmark on 2 CPUs, 1 or 2 at once ended soonest, +26% over
// `syncer: none` against +34% with no limit, one run each; bytes moved were within the
// run-to-run spread). Two, so that one long copy does not hold up all the others.
inline constexpr int kSyncsAtOnce = 2;

using util::clock_s;
using util::mono;

inline std::string q(const std::string& s) {
  return util::shell_quote(s);
}

using util::lines_of;

// An agent silent this long while it holds file requests is taken as stuck (a copy it runs
// says nothing, but the agent says it is alive), and one that answers none of them for this
// long as losing them (the agent stops a copy after 1800 s; a request queued behind others
// waits, but some answer comes): the agent is ended, and they are done in the host's shell
// instead.
inline constexpr double kFileOpSilence = 30;
inline constexpr double kFileOpLimit = 1800 + 60;

// One host as the head sees it. Its I/O thread owns everything here but `name`, `io` and the
// atomics: the loop only posts tasks to it.
struct Worker {
  std::string name;
  SshHost h;
  std::unordered_map<std::string, Run> runs;
  bool output_handed_on = false;  // since the last poll (carried, or read: the poll schedule)
  bool ready = false;  // connected once (the first connect is connect()'s, not the tick's)
  bool up = false, lost = false;
  double down_since = 0, next_retry = 0, backoff = 1, last_check = 0;
  double last_ok = 0;         // the last answer it gave (monotonic): a dead link dates from there
  double agent_heard = -1e9;  // when its agent last said anything (monotonic)
  int agent_heard_gen = -1;   // which agent that was (SshHost::agent_gen)
  void heard_agent() {
    agent_heard = util::mono();
    agent_heard_gen = h.agent_gen;
  }
  std::vector<int> superseded;  // supervisors of attempts re-queued elsewhere: stopped on return
  bool workdir_ready = false;   // trial.sync_workdir: copied (or found current) in this run
  PollSchedule polls;           // when it is polled next (fast after a start or a command)
  double poll_due = 0;          // when that is (monotonic); ticks before it are wake-ups
  std::vector<AgentEvent> agent_events;  // the agent's, read while a launch waited: for the poll
  // The attempts running there as a resume read them (ssh_resume.cpp): dropped at a launch.
  std::optional<std::vector<LiveAttempt>> live_cache;
  // Launches (trial dir there, attempt) whose answer never came: ended before anything else
  // starts there (end_unsure_launches)
  struct Unsure {
    std::string dir;
    int attempt = 0;
    int agent = -1;  // the agent that had it (its pid there)
  };
  std::vector<Unsure> unsure;
  // Requests to its agent that move or delete files in trial dirs (ssh_checkpoints.cpp), by
  // number, until their "done" event (all of the current agent's: they are settled before
  // another starts): when each was sent, the same operation as a command for the host's shell
  // (done there if that agent ends first), and what takes the answer ("" or why not).
  struct FileOp {
    double sent = 0;  // (monotonic)
    std::string shell;
    std::function<void(Worker&, const std::string&)> done;
  };
  std::map<int64_t, FileOp> file_ops;
  int64_t next_req = 1;
  double file_answered = 0;  // when the last of them was answered (monotonic)
  // An agent (agent_gen) that refused a request it does not know (another version's): its
  // host's shell does its file requests, stops and stdin lines.
  int shell_requests_for = -1;
  int agent_end_tried = -1;  // an agent (agent_gen) ended for the stdin lines it held
  std::vector<std::function<void()>> after_file_ops;  // each run once none is left
  SshStats stats;
  std::atomic<bool> lease_queued{false};
  std::unique_ptr<IoThread> io;  // last: stopped (joined) before the rest goes
};

// Ends the host's agent if it still runs, and waits (up to 2 s) until it has: the children
// doing its file requests die with it. False if it still runs (or the host did not answer).
bool end_agent(Worker& w);

}  // namespace tune::exec::ssh_impl

namespace tune::exec {

struct SshExecutor::Impl {
  using Worker = ssh_impl::Worker;

  SshOptions opts;
  std::vector<std::unique_ptr<Worker>> workers;

  // Filled by the host threads, drained by wait() on the loop.
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<Event> events;
  int ready_fd = -1;  // an eventfd, readable while `events` may hold something
  std::unordered_map<std::string, int> pids;  // trial -> its process, once known
  // What names this driver's lines to step-mode trials' stdin (agent/stdin_record.hpp): its
  // run, and the last number given (on the loop; a record naming a later one is forged).
  std::string stdin_run;
  std::atomic<uint64_t> stdin_issued{0};

  // The loop's own: the host each trial's attempt runs on, until its exit is handed out, and
  // the trials whose pid was asked of their host.
  std::unordered_map<std::string, Worker*> where;
  std::unordered_set<std::string> pid_asked;
  // The host each trial's last attempt ended on, until the trial starts again: a checkpoint
  // its output reported is adopted there even when its exit came first (a resumed driver reads
  // a re-attached attempt's output again, and its exit, before it handles either).
  std::unordered_map<std::string, Worker*> ended_on;

  Worker* worker(const std::string& name);
  void emit(Event e);
  void note_pid(const std::string& id, int pid);

  // ---- everything below runs on a host's I/O thread, for that host only ----

  SyncContext sync_context(Worker& w) { return SyncContext{opts, w.h, w.stats}; }
  // Copies checkpoint `name` of the host's trial dir `dir` into head_trial_dir (under a staging
  // name until complete); false, with a warning, if it cannot.
  bool fetch_one(Worker& w, const std::string& dir, const fs::path& head_trial_dir,
                 const std::string& name);
  // fetch_one in two parts: the copy's command (on the host's thread), and running it and
  // publishing the copy under its name (on any thread).
  std::vector<std::string> copy_command(Worker& w, const std::string& dir,
                                        const fs::path& head_trial_dir, const std::string& name);
  static bool publish_copy(const std::vector<std::string>& cmd, const fs::path& head_exp_dir,
                           const fs::path& head_trial_dir, const std::string& name,
                           const std::string& host);

  // ssh_checkpoints.cpp
  // Sends `line`, file request `req` (its number taken from w.next_req), to the host's agent;
  // `done` takes its answer when it comes. Without an agent to take it, `shell` does the same
  // in the host's shell now.
  void file_request(Worker& w, int64_t req, const std::string& line, std::string shell,
                    std::function<void(Worker&, const std::string&)> done);
  // Runs a file operation's command in the host's shell: "" or why not.
  std::string shell_op(Worker& w, const std::string& cmd);
  // File request `req` answered (`error`: why not), unless it was settled already.
  void file_op_done(Worker& w, int64_t req, const std::string& error);
  // The file requests of an agent that ended, or that is given up on (`why`, logged; it is
  // ended first, unless not `end_it`: it refused them), done in the shell if the host answers,
  // else (the host down) failed.
  void settle_file_ops(Worker& w, const std::string& why, bool end_it = true);
  // Deletes checkpoint `name` of the trial dir `dir` on the host (retention dropped it).
  void remove_on_host(Worker& w, const std::string& dir, const std::string& name);

  // ssh_host_loss.cpp
  void mark_down(Worker& w, double now);
  // After an operation failed: is the host down?
  void check(Worker& w);
  // Down past host_timeout_s, or its key changed: its attempts end as host_lost.
  void lose(Worker& w, double now);
  // A down host: reconnects with backoff, and re-queues its trials once lost.
  void tend(Worker& w, double now);

  // ssh_poll.cpp
  // This attempt's exit, if its supervisor recorded it (a forged record is ignored).
  void read_exit(Worker& w, Run& r);
  // The same, from the text of a record (nullopt: none).
  void take_exit(Run& r, const std::optional<std::string>& record);
  // Whether the host says the attempt's supervisor is gone (one command).
  bool supervisor_gone(Worker& w, Run& r);
  // Ends attempts whose supervisor is gone without an exit record (supervisor_died).
  void check_supervisors(Worker& w, double now);
  // One look at each attempt: exit record, output, arrivals, syncs. True if it read output.
  bool poll(Worker& w, bool due);
  // One look at an attempt's output (kUnread: stdout.log has more, which could not be read).
  enum class Look { kNothing, kRead, kUnread };
  // ssh_output.cpp
  Look look(Worker& w, Run& r);
  // The bytes an output event of its agent carries, handed on from where the attempt was read
  // to, if they reach that point (and the notes with them too); true if that reads it to the
  // size the event gives (no look is needed).
  bool take_carried(Worker& w, Run& r, const AgentEvent& e);
  // New output of the attempt, from r.offset, and when it arrived, handed on to the controller
  // (`carried`: in an agent's event, else read over SFTP).
  void hand_on(Worker& w, Run& r, std::string data, std::vector<Arrival> arrivals,
               std::optional<HostTime> started, bool carried);
  void poll_syncs(Worker& w, double t);
  void tick(Worker& w);
  // A command that answers soon was sent (an attempt started, a line to its stdin): poll fast.
  static void expect_output(Worker& w);
  // The lines for the attempt's stdin that no agent said written (r.unwritten): through the
  // host's agent, else in its shell (each line once, whoever sends it).
  void deliver_stdin(Worker& w, Run& r);
  // In the host's shell: those lines, and the attempt's stop (r.stop_asked).
  void stdin_in_shell(Worker& w, Run& r);
  // No line can reach the attempt (`why`): the controller is told (once), and fails it.
  void stdin_lost(Worker& w, Run& r, const std::string& why);
  void stop_in_shell(Worker& w, Run& r);
  // An agent's error event answering a stop or a stdin line: done in the shell instead.
  void signal_or_stdin_refused(Worker& w, const AgentEvent& e);
  // Its agent does not know a request: the host's shell does them all from now on (those of
  // that agent it did not do first).
  void shell_does_requests(Worker& w);
  // The stops (and, with `lines`, the stdin lines not said written) asked of agent `gen`, done
  // in the host's shell.
  void redo_agent_requests(Worker& w, int gen, bool lines);
  // Whether the host's agent takes stops and stdin lines now: it knows them, and was heard
  // from within kAgentSilence (else the host's shell does them, not held up by it).
  static bool agent_takes_requests(const Worker& w);
  void check_agent_requests(Worker& w, double t);

  // The trial's pid, from its supervisor's children there (one round trip), if not known yet.
  void ask_child_pid(Worker& w, Run& r);

  // ssh_poll.cpp: what the host's agent said (supervisors gone); restarts an agent that ended
  void read_agent(Worker& w);
  void on_agent_event(Worker& w, const AgentEvent& e);
  void on_agent_error(Worker& w, const AgentEvent& e);
  void ask_watches(Worker& w);
  // The trial's pid from a start event of its attempt that came after this tick's read_agent.
  void pid_from_events(Worker& w, Run& r);
  void restart_agent(Worker& w);  // a host whose agent cannot start is marked down

  // ssh_start.cpp
  Result<void> ensure_workdir(Worker& w);
  void push_logs(Worker& w, const Run& r);
  void start_on_host(Worker& w, const Launch& l, Run r);
  Run new_run(const Launch& l, Worker& w) const;
  // The trial's working dir `cwd` (the head's) as its trials there have it (trial.sync_workdir:
  // in the workdir's copy).
  std::string host_cwd(const Worker& w, const fs::path& cwd) const;
  // Ends what launches whose answer never came may have started there (all but the agent
  // `keep_agent`, one a reconnect just started).
  void end_unsure_launches(Worker& w, int keep_agent);

  // ssh_resume.cpp
  // The attempts whose supervisors run on the host (its attempt log and its processes); nullopt
  // if it can't be asked.
  static std::optional<std::vector<LiveAttempt>> live_supervisors(Worker& w);
  // The supervisor running attempt `attempt` in `dir` there (nullptr: none; held in
  // w.live_cache); nullopt if the host could not be asked.
  static std::optional<const LiveAttempt*> find_live(Worker& w, const std::string& dir,
                                                     int attempt);
  // Its pid (-1: none).
  static std::optional<int> find_supervisor(Worker& w, const std::string& dir, int attempt);
  // The live supervisor that holds `dir`'s lock there, by the host's /proc/locks (-1: none).
  static std::optional<int> supervisor_of_dir(SshHost& h, const std::string& dir);
  Attached attach_on_host(Worker& w, const Launch& l);
};

}  // namespace tune::exec
